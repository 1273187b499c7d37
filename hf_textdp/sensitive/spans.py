"""Character spans of a batch held flat, their union, and the user's span column, validated (selective.md §3).

A batch's spans are three int64 arrays (row, start, end), ``start < end``, character (code point) offsets into
the row's text, end exclusive, as Python slices and the fast tokenizers' offsets count them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidRowError
from ..validation import is_int


__all__ = ["RowSpans", "union", "column_spans"]

_ROW_SHIFT = 32  # rows and offsets packed in one int64 key: a text holds fewer than 2**32 characters


@dataclass(frozen=True)
class RowSpans:
    """Spans of a batch of ``n_rows`` rows: span k covers ``[starts[k], ends[k])`` of row ``rows[k]``."""

    rows: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    n_rows: int

    @classmethod
    def empty(cls, n_rows: int) -> RowSpans:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, z, n_rows)

    @classmethod
    def from_lists(cls, per_row: Sequence[Sequence[tuple[int, int]]]) -> RowSpans:
        """From one list of ``(start, end)`` pairs per row."""
        counts = [len(s) for s in per_row]
        rows = np.repeat(np.arange(len(per_row), dtype=np.int64), counts)
        pairs = np.array([p for s in per_row for p in s], dtype=np.int64).reshape(-1, 2)
        return cls(rows, pairs[:, 0].copy(), pairs[:, 1].copy(), len(per_row))

    def to_lists(self) -> list[list[tuple[int, int]]]:
        """One list of ``(start, end)`` pairs per row, in the order held."""
        out: list[list[tuple[int, int]]] = [[] for _ in range(self.n_rows)]
        for r, a, b in zip(self.rows.tolist(), self.starts.tolist(), self.ends.tolist(), strict=True):
            out[r].append((a, b))
        return out

    def keys(self) -> tuple[np.ndarray, np.ndarray]:
        """(row << 32 | start, row << 32 | end): one sorted order for all rows."""
        base = self.rows << _ROW_SHIFT
        return base | self.starts, base | self.ends


def union(*parts: RowSpans) -> RowSpans:
    """The union of the parts' spans, as sorted, disjoint, non-touching spans per row.

    Example:

    >>> a = RowSpans.from_lists([[(0, 3), (8, 9)], []])
    >>> b = RowSpans.from_lists([[(2, 5)], [(1, 2)]])
    >>> union(a, b).to_lists()
    [[(0, 5), (8, 9)], [(1, 2)]]
    """
    if not parts:
        raise ValueError("union() needs at least one RowSpans")
    n = parts[0].n_rows
    if any(p.n_rows != n for p in parts):
        raise ValueError(f"union(): the parts cover different numbers of rows {[p.n_rows for p in parts]}")
    rows = np.concatenate([p.rows for p in parts]).astype(np.int64)
    starts = np.concatenate([p.starts for p in parts]).astype(np.int64)
    ends = np.concatenate([p.ends for p in parts]).astype(np.int64)
    if rows.size == 0:
        return RowSpans.empty(n)
    order = np.lexsort((starts, rows))
    rows, starts, ends = rows[order], starts[order], ends[order]
    base = rows << _ROW_SHIFT
    reach = np.maximum.accumulate(base | ends)  # the furthest end so far (rows are sorted, so within the row)
    new = np.ones(rows.size, dtype=bool)
    new[1:] = (base[1:] | starts[1:]) > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], rows.size) - 1
    return RowSpans(rows[first], starts[first], reach[last] - base[first], n)


def column_spans(values: Sequence[Any], texts: Sequence[str], column: str, row_ids: Sequence[int]) -> RowSpans:
    """The user's span column for a batch: ``values[i]`` is row i's ``[[start, end], ...]`` (or ``None``: no span).

    Each span is two ints with ``0 <= start < end <= len(text)``. An error names the row (``row_ids[i]``), the
    column and the span's numbers, never the text.

    Raises:
        InvalidRowError: an entry that is not a list of ``[start, end]`` int pairs inside its text.
    """
    per_row: list[list[tuple[int, int]]] = []
    for i, (value, text) in enumerate(zip(values, texts, strict=True)):
        where = f"row {row_ids[i]}: column {column!r}"
        if value is None:
            per_row.append([])
            continue
        if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__len__"):
            raise InvalidRowError(
                f"{where} must hold a list of [start, end] character spans, got {type(value).__name__}."
            )
        spans: list[tuple[int, int]] = []
        for k, span in enumerate(value):
            if isinstance(span, (str, bytes, dict)) or not hasattr(span, "__len__") or len(span) != 2:
                raise InvalidRowError(f"{where}: span {k} must be a pair [start, end], got {type(span).__name__}.")
            a, b = span[0], span[1]
            if not (is_int(a) and is_int(b)):
                raise InvalidRowError(
                    f"{where}: span {k} must hold ints, got [{type(a).__name__}, {type(b).__name__}]."
                )
            a, b = int(a), int(b)
            if not 0 <= a < b <= len(text):
                raise InvalidRowError(
                    f"{where}: span {k} = [{a}, {b}] must satisfy 0 <= start < end <= {len(text)} (the text's "
                    "length in characters)."
                )
            spans.append((a, b))
        per_row.append(spans)
    return RowSpans.from_lists(per_row)
