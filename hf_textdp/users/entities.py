"""The sensitive strings of a batch, for consistent pseudonyms (docs/mechanisms/selective.md §8).

A *sensitive string* is a maximal run of consecutive sensitive positions of one row (the detectors' and the span
column's spans, mapped to whole words: selective.md §4). Its identity is its token ids, as the tokenizer gives
them: the tokenizer's own normalisation (lower case for an uncased model) is the only one. A coarser identity
(case-folded text, say) would give one draw to two different inputs, and the outputs would then show how they
differ.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .keys import entity_digest


__all__ = ["EntityRuns", "find_entities"]


@dataclass(frozen=True)
class EntityRuns:
    """The sensitive strings of a batch, in row and position order.

    Attributes:
        row (`np.ndarray` `[E]` int64): each string's row in the batch.
        digest (`list[bytes]`): each string's identity (:func:`~hf_textdp.users.keys.entity_digest` of its ids).
        tokens (`list[np.ndarray]`): each string's privatized tokens, as indices into the batch's privatized tokens
            (flat, rows in order), in position order.
        ids (`list[np.ndarray]`): each string's token ids (the context of a contextual mechanism's draw).
        at (`list[np.ndarray]`): where its privatized tokens stand among ``ids``.
    """

    row: np.ndarray
    digest: list[bytes]
    tokens: list[np.ndarray]
    ids: list[np.ndarray]
    at: list[np.ndarray]

    def __len__(self) -> int:
        return int(self.row.size)


def find_entities(flat: np.ndarray, lengths: np.ndarray, marked: np.ndarray, cand: np.ndarray) -> EntityRuns:
    """The runs of consecutive ``marked`` positions of each row (``flat``: the batch's ids, rows of ``lengths``;
    ``cand``: the privatized positions). A run without a privatized position is left out (nothing is released).

    Example:

    >>> flat = np.array([101, 7, 8, 5, 7, 8, 102])
    >>> marked = np.array([0, 1, 1, 0, 1, 1, 0], dtype=bool)
    >>> runs = find_entities(flat, np.array([7]), marked, np.ones(7, dtype=bool))
    >>> runs.row.tolist(), runs.digest[0] == runs.digest[1], [t.tolist() for t in runs.tokens]
    ([0, 0], True, [[1, 2], [4, 5]])
    """
    n_tok = int(flat.size)
    row_of = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
    starts = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    is_row_start = np.zeros(n_tok, dtype=bool)
    is_row_start[starts[:-1][lengths > 0]] = True
    prev = np.concatenate([[False], marked[:-1]]) if n_tok else marked
    run_start = marked & (~prev | is_row_start)
    run_of = np.cumsum(run_start) - 1  # each marked position's run
    cand_index = np.cumsum(cand) - 1  # each privatized position's index among the batch's privatized tokens
    first = np.flatnonzero(run_start)
    ends = np.empty_like(first)
    if first.size:
        pos = np.flatnonzero(marked)
        last_of_run = np.zeros(first.size, dtype=np.int64)
        np.maximum.at(last_of_run, run_of[pos], pos)
        ends = last_of_run + 1
    runs = EntityRuns(np.zeros(0, dtype=np.int64), [], [], [], [])
    rows = []
    for a, b in zip(first.tolist(), ends.tolist(), strict=True):
        inside = cand[a:b]
        if not inside.any():
            continue
        rows.append(int(row_of[a]))
        runs.digest.append(entity_digest(flat[a:b]))
        runs.tokens.append(cand_index[a:b][inside])
        runs.ids.append(flat[a:b])
        runs.at.append(np.flatnonzero(inside))
    return dataclasses.replace(runs, row=np.asarray(rows, dtype=np.int64))
