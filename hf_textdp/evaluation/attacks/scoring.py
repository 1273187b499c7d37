"""Recovery per group of tokens, per word and per character span, with row-bootstrap intervals (docs/attacks.md §5).

Groups of candidate tokens (:func:`token_groups`): ``replaced`` (the release differs from the input),
``kept``, ``all``, and the replaced tokens split into ``replaced_content`` (inputs outside the
attacker's most frequent public tokens) and ``replaced_function`` (inputs among them). Whole words
(:func:`word_hits`): a word is recovered when every one of its candidate pieces is. Spans
(:func:`span_recovery`): a span, such as an injected identifier, is recovered when every candidate
token overlapping it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .corpus import ReleasedCorpus
from .intervals import row_bootstrap


__all__ = ["GROUPS", "WORD_GROUPS", "token_groups", "score_groups", "word_hits", "span_recovery", "frequent_mask"]

GROUPS = ("all", "replaced", "kept", "replaced_content", "replaced_function")
WORD_GROUPS = ("words_all", "words_replaced")

Hits = tuple[npt.NDArray[np.bool_], "npt.NDArray[np.bool_] | None"]


def frequent_mask(counts: npt.NDArray[np.int64], n: int) -> npt.NDArray[np.bool_]:
    """``[V]`` whether each candidate is among the ``n`` most frequent of ``counts`` (ties by position)."""
    top = np.argsort(-counts, kind="stable")[:n]
    out = np.zeros(counts.size, dtype=bool)
    out[top[counts[top] > 0]] = True
    return out


def token_groups(corpus: ReleasedCorpus, frequent: npt.NDArray[np.bool_]) -> dict[str, npt.NDArray[np.bool_]]:
    """The token masks of :data:`GROUPS`; ``frequent[x]`` marks the function words (module docstring)."""
    replaced = corpus.inputs != corpus.released
    func = frequent[corpus.inputs]
    return {
        "all": np.ones(corpus.inputs.size, dtype=bool),
        "replaced": replaced,
        "kept": ~replaced,
        "replaced_content": replaced & ~func,
        "replaced_function": replaced & func,
    }


def _interval(
    hits: npt.NDArray[np.bool_], row_of: npt.NDArray[np.int64], n_rows: int, resamples: int, seed: int
) -> dict[str, Any]:
    sizes = np.bincount(row_of, minlength=n_rows).astype(np.int64)
    mean, lo, hi = row_bootstrap(hits, sizes, resamples, seed)
    return {"value": mean, "ci95": [lo, hi], "n": int(hits.size)}


def score_groups(
    hits: Mapping[str, Hits],
    row_of: npt.NDArray[np.int64],
    n_rows: int,
    groups: Mapping[str, npt.NDArray[np.bool_]],
    resamples: int,
    seed: int,
) -> dict[str, dict[str, dict[str, Any]]]:
    """``{attack: {group: {"top1": {value, ci95, n}, "top5": … | None}}}`` over the tokens (or words) of each group.

    Args:
        hits: per attack, its top-1 and top-5 hit flags (top-5 ``None`` where the attack has one guess).
        row_of: each scored unit's row; rows are what the bootstrap resamples.
        groups: a mask per group over the same units.
    """
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for a, (name, (top1, top5)) in enumerate(hits.items()):
        out[name] = {}
        for g, (group, mask) in enumerate(groups.items()):
            salt = seed + 1000 * a + 10 * g
            out[name][group] = {
                "top1": _interval(top1[mask], row_of[mask], n_rows, resamples, salt),
                "top5": None if top5 is None else _interval(top5[mask], row_of[mask], n_rows, resamples, salt + 1),
            }
    return out


def word_hits(
    corpus: ReleasedCorpus, hits: Mapping[str, Hits]
) -> tuple[dict[str, Hits], npt.NDArray[np.int64], dict[str, npt.NDArray[np.bool_]]]:
    """Whole-word hits (every candidate piece of the word hit), each word's row, and :data:`WORD_GROUPS` masks.

    Needs ``corpus.rows`` (``release_corpus(..., keep_rows=True)``). Top-5 of a word: every piece's truth is
    among that piece's five guesses.
    """
    if corpus.rows is None:
        raise ValueError("whole-word scoring needs the corpus's rows (release_corpus(keep_rows=True))")
    word_of = corpus.rows.word_of
    words, inv = np.unique(word_of, return_inverse=True)
    W = words.size

    def all_of(flags: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        return np.asarray(np.bincount(inv, weights=~flags, minlength=W) == 0)

    out: dict[str, Hits] = {name: (all_of(t1), None if t5 is None else all_of(t5)) for name, (t1, t5) in hits.items()}
    row_of = np.zeros(W, dtype=np.int64)
    row_of[inv] = corpus.row_of
    replaced = np.bincount(inv, weights=corpus.inputs != corpus.released, minlength=W) > 0
    return out, row_of, {"words_all": np.ones(W, dtype=bool), "words_replaced": replaced}


def span_recovery(
    corpus: ReleasedCorpus,
    hits: Mapping[str, Hits],
    spans: Sequence[tuple[int, int, int]],
    resamples: int,
    seed: int,
) -> dict[str, dict[str, Any]]:
    """The share of ``spans`` (row, first character, end character) whose every overlapping candidate token is hit.

    Scores given character spans of the input rows, such as injected identifiers: per attack, top-1 and
    top-5 with row-bootstrap intervals. A span that overlaps no candidate token is left out (``n`` counts
    those scored). Needs ``corpus.rows`` with offsets.
    """
    if corpus.rows is None:
        raise ValueError("span scoring needs the corpus's rows (release_corpus(keep_rows=True))")
    off, starts = corpus.rows.offsets, corpus.starts
    members: list[npt.NDArray[np.int64]] = []
    span_rows: list[int] = []
    for r, a, b in spans:
        idx = np.arange(starts[r], starts[r + 1])
        o = off[idx]
        inside = idx[(o[:, 0] < b) & (o[:, 1] > a) & (o[:, 1] > o[:, 0])]
        if inside.size:
            members.append(inside)
            span_rows.append(int(r))
    rows = np.asarray(span_rows, dtype=np.int64)
    out: dict[str, dict[str, Any]] = {}
    for a_i, (name, (top1, top5)) in enumerate(hits.items()):
        entry: dict[str, Any] = {}
        for k, flags in (("top1", top1), ("top5", top5)):
            if flags is None:
                entry[k] = None
                continue
            got = np.array([bool(flags[m].all()) for m in members], dtype=bool)
            entry[k] = _interval(got, rows, corpus.n_rows, resamples, seed + 100 * a_i + (k == "top5"))
        out[name] = entry
    return out
