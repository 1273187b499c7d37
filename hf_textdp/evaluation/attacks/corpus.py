"""A corpus released by a privatizer, token by token: the data every attack reads.

Attacks work on the *candidate tokens* of a corpus (the tokens a mechanism rewrites), identified by
their position in the candidate set C (docs/mechanisms/space.md). For each such token the attacker sees
the released position; the truth is the input position, which is what the mechanism received (an input
outside C counts as the candidate it is privatized as). Structural and passthrough tokens are not
privatized and are not scored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ...privatizer import Privatizer
from ...space import CANDIDATE
from ...tokens import WordLayout, make_tokens


__all__ = ["ReleasedCorpus", "RowLayout", "release_corpus"]


@dataclass(frozen=True)
class RowLayout:
    """The released rows whole (every token the attacker sees), and where the candidate tokens sit in them.

    Attributes:
        ids (`list[np.ndarray]`): each row's released token ids, special and passthrough tokens included.
        cand_at (`list[np.ndarray]`): each row's indices (into ``ids[r]``) of its candidate tokens, in the
            order of the corpus's flat arrays.
        word_of (`np.ndarray`): ``[N]`` each candidate token's word, numbered over the corpus (the
            tokenizer's pre-tokenizer words; one word per token for static vectors).
        offsets (`np.ndarray`): ``[N, 2]`` each candidate token's character span in its input row
            (``-1`` where the tokenizer gives none), for scoring given spans such as identifiers.
    """

    ids: list[npt.NDArray[np.int64]]
    cand_at: list[npt.NDArray[np.int64]]
    word_of: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]


@dataclass(frozen=True)
class ReleasedCorpus:
    """The candidate tokens of a corpus, flat with rows in order, and what the privatizer released.

    Attributes:
        inputs (`np.ndarray`): ``[N]`` int64 input positions in C (the truth an attacker tries to recover).
        released (`np.ndarray`): ``[N]`` int64 released positions in C (what the attacker sees).
        row_sizes (`np.ndarray`): ``[n_rows]`` candidate tokens per row.
        texts (`list[str]`): the released texts (empty unless asked for).
        rows (`RowLayout`, *optional*): the released rows whole, for attacks that read them (``keep_rows``).
    """

    inputs: npt.NDArray[np.int64]
    released: npt.NDArray[np.int64]
    row_sizes: npt.NDArray[np.int64]
    texts: list[str]
    rows: RowLayout | None = None

    @property
    def n_rows(self) -> int:
        return int(self.row_sizes.size)

    @property
    def row_of(self) -> npt.NDArray[np.int64]:
        """The row of each token."""
        return np.repeat(np.arange(self.n_rows, dtype=np.int64), self.row_sizes)

    @property
    def starts(self) -> npt.NDArray[np.int64]:
        """Each row's first token in the flat arrays (``[n_rows + 1]``, the last entry is ``N``)."""
        out = np.zeros(self.n_rows + 1, dtype=np.int64)
        np.cumsum(self.row_sizes, out=out[1:])
        return out

    def replacement_rate(self) -> float:
        return float(np.mean(self.inputs != self.released)) if self.inputs.size else 0.0


def release_corpus(
    priv: Privatizer,
    texts: Sequence[str],
    *,
    batch_rows: int = 1000,
    keep_texts: bool = False,
    keep_rows: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ReleasedCorpus:
    """Privatize ``texts`` (row ids 0…n−1, the privatizer's own key) and pair each token's input with its release.

    The privatizer tokenizes as it always does; the released ids are one to one with the input's
    tokenization, so the candidate tokens line up position by position. ``keep_rows`` keeps the
    released rows whole (:class:`RowLayout`).
    """
    space = priv.engine.space
    tokens = make_tokens(space)
    inputs, released, sizes, out_texts = [], [], [], []
    row_ids: list[npt.NDArray[np.int64]] = []
    cand_at: list[npt.NDArray[np.int64]] = []
    word_of: list[npt.NDArray[np.int64]] = []
    offsets: list[npt.NDArray[np.int64]] = []
    n_words = 0
    texts = list(texts)
    for start in range(0, len(texts), batch_rows):
        batch = texts[start : start + batch_rows]
        out = priv({priv.text_column: batch}, list(range(start, start + len(batch))))
        flat, lengths, layout = tokens.encode_flat(batch)
        cls, pos = space.classify(flat)
        cand = cls == CANDIDATE
        out_flat = np.fromiter((t for ids in out["input_ids"] for t in ids), dtype=np.int64, count=flat.size)
        _, out_pos = space.classify(out_flat)
        inputs.append(pos[cand])
        released.append(out_pos[cand])
        row_of = np.repeat(np.arange(len(batch), dtype=np.int64), lengths)
        sizes.append(np.bincount(row_of[cand], minlength=len(batch)))
        if keep_texts:
            out_texts.extend(out[priv.text_column])
        if keep_rows:
            words = _word_index(layout, flat.size)
            word_of.append(np.where(words[cand] >= 0, words[cand] + n_words, -1))
            n_words += int(words.max()) + 1 if words.size else 0
            offsets.append(_offsets(space, batch, lengths)[cand])
            bounds = np.concatenate([[0], np.cumsum(lengths)])
            for r in range(len(batch)):
                a, b = int(bounds[r]), int(bounds[r + 1])
                row_ids.append(out_flat[a:b].copy())
                cand_at.append(np.flatnonzero(cand[a:b]).astype(np.int64))
        if progress is not None:
            progress(start + len(batch), len(texts))
    cat = np.concatenate
    empty = np.zeros(0, dtype=np.int64)
    rows = None
    if keep_rows:
        rows = RowLayout(
            row_ids,
            cand_at,
            cat(word_of).astype(np.int64) if word_of else empty,
            cat(offsets).astype(np.int64) if offsets else np.zeros((0, 2), dtype=np.int64),
        )
    return ReleasedCorpus(
        inputs=cat(inputs).astype(np.int64) if inputs else empty,
        released=cat(released).astype(np.int64) if released else empty,
        row_sizes=cat(sizes).astype(np.int64) if sizes else empty,
        texts=out_texts,
        rows=rows,
    )


def _word_index(layout: Any, n: int) -> npt.NDArray[np.int64]:
    """Each flat position's word in the batch (``-1`` outside words): the layout's words, or one per token."""
    out = np.full(n, -1, dtype=np.int64)
    if isinstance(layout, WordLayout):
        spans = (layout.stops - layout.starts).astype(np.int64)
        pos = np.repeat(layout.starts - np.cumsum(np.concatenate([[0], spans[:-1]])), spans) + np.arange(spans.sum())
        out[pos] = np.repeat(np.arange(spans.size, dtype=np.int64), spans)
    else:
        out[:] = np.arange(n)
    return out


def _offsets(space: Any, batch: list[str], lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """``[n, 2]`` character spans of the batch's tokens in their rows (``-1`` where unknown)."""
    out = np.full((int(lengths.sum()), 2), -1, dtype=np.int64)
    tok = getattr(space, "tokenizer", None)
    if tok is None or space.kind != "hf":
        return out
    spans = tok(batch, add_special_tokens=True, return_offsets_mapping=True)["offset_mapping"]
    start = 0
    for r, m in enumerate(spans):
        if len(m) == int(lengths[r]):  # a text spelling a special token tokenizes otherwise: left unknown
            out[start : start + len(m)] = np.asarray(m, dtype=np.int64).reshape(-1, 2)
        start += int(lengths[r])
    return out
