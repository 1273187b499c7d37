"""From character spans to sensitive token positions (docs/mechanisms/selective.md §4).

A position is sensitive when its characters overlap a span (its offsets ``[a, b)`` with ``a < b`` meet some
span ``[s, e)``: ``a < e`` and ``s < b``); positions with no characters (template special tokens) never are.
Whole words: when one position of a word is sensitive, every position of the word is, so a name is never
released half at one ε and half at another. Hugging Face words are the pre-tokenizer's words
(``tokens.WordLayout``); for static vectors every whitespace word is one position, so its offsets come from
the row's words and separators (:func:`static_offsets`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .spans import RowSpans, union


__all__ = ["overlap_mask", "expand_words", "sensitive_mask", "static_offsets"]


def overlap_mask(offsets: np.ndarray, lengths: np.ndarray, spans: RowSpans) -> np.ndarray:
    """Whether each position (rows' positions concatenated, ``offsets[j] = (a, b)`` in its row's text, row r
    holding ``lengths[r]`` positions) overlaps a span of its row.

    Example:

    >>> import numpy as np
    >>> offsets = np.array([[0, 0], [0, 4], [5, 9], [9, 10], [0, 0], [0, 3]])
    >>> overlap_mask(offsets, np.array([5, 1]), RowSpans.from_lists([[(6, 7)], []])).tolist()
    [False, False, True, False, False, False]
    """
    N = int(lengths.sum())
    mask = np.zeros(N, dtype=bool)
    if N == 0 or spans.rows.size == 0:
        return mask
    merged = spans if _is_merged(spans) else union(spans)
    s_key, e_key = merged.keys()
    rows = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths) << 32
    a = rows | offsets[:, 0].astype(np.int64)
    b = rows | offsets[:, 1].astype(np.int64)
    i = np.searchsorted(e_key, a, side="right")  # the first span of the row (or after) that ends after a
    ok = i < e_key.size
    mask[ok] = s_key[i[ok]] < b[ok]
    mask &= offsets[:, 1] > offsets[:, 0]
    return mask


def _is_merged(spans: RowSpans) -> bool:
    s, e = spans.keys()
    return bool(np.all(s[1:] > e[:-1]))


def expand_words(mask: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """``mask`` with every position of a word that holds a sensitive position set (word k covers positions
    ``starts[k]:stops[k]``); positions outside every word keep their value.

    >>> import numpy as np
    >>> expand_words(np.array([0, 0, 1, 0, 0], bool), np.array([0, 1]), np.array([1, 4])).tolist()
    [False, True, True, True, False]
    """
    counts = np.concatenate([[0], np.cumsum(mask, dtype=np.int64)])
    hit = counts[stops] > counts[starts]
    edge = np.zeros(mask.size + 1, dtype=np.int64)
    np.add.at(edge, starts[hit], 1)
    np.add.at(edge, stops[hit], -1)
    out: np.ndarray = mask | (np.cumsum(edge[:-1]) > 0)
    return out


def sensitive_mask(
    offsets: np.ndarray,
    lengths: np.ndarray,
    spans: RowSpans,
    words: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """The sensitive positions of a batch: :func:`overlap_mask`, then :func:`expand_words` over ``words``
    (``(starts, stops)``; ``None``: each position is its own word, as for static vectors)."""
    mask = overlap_mask(offsets, lengths, spans)
    return mask if words is None else expand_words(mask, words[0], words[1])


def static_offsets(pieces: Sequence[Sequence[str]], seps: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
    """Character offsets ``[N, 2]`` of static-vector words and each row's number of words, from each row's words
    and separators (``seps[r]`` has one more entry than ``pieces[r]``: before each word, then after the last).

    >>> off, n = static_offsets([["ab", "c"]], [[" ", "  ", ""]])
    >>> off.tolist(), n.tolist()
    ([[1, 3], [5, 6]], [2])
    """
    n_words = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
    # all rows' parts in a line: sep 0, word 0, sep 1, word 1, … (a row's last separator is not needed)
    widths = [
        len(x) for p, s in zip(pieces, seps, strict=True) for w, sep in zip(p, s, strict=False) for x in (sep, w)
    ]
    if not widths:
        return np.zeros((0, 2), dtype=np.int64), n_words
    w = np.asarray(widths, dtype=np.int64)
    ends = np.cumsum(w)
    row_width = np.bincount(np.repeat(np.arange(n_words.size), 2 * n_words), weights=w, minlength=n_words.size)
    row_width = row_width.astype(np.int64)
    before = np.cumsum(row_width) - row_width  # characters of the rows before, in the line above
    stop = ends[1::2] - np.repeat(before, n_words)
    word_lens = w[1::2]
    return np.stack([stop - word_lens, stop], axis=1), n_words
