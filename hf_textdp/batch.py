"""A batch of texts as the release reads it (:meth:`hf_textdp.Privatizer.read_batch`): tokenized, classified and
marked, with the batch's tokens held flat (space.md §1, selective.md §4). The release and the per-person counting
pass (docs/mechanisms/users.md §4) read batches the same way, so they count exactly the tokens that are released.
:func:`read_map_batch` reads the columns of a ``datasets.map`` batch that a :class:`~hf_textdp.Privatizer` is
called with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from .errors import ColumnNotFoundError, InvalidParameterError, ParameterTypeError
from .validation import check_row_ids


__all__ = ["MapBatch", "TokenBatch", "read_map_batch"]


class TokenBatch(NamedTuple):
    """One batch: the flat token ids, each row's length, the rows' words, each position's class and position in
    the candidate space, its row, the candidate mask, each row's candidate count, and the sensitive marks."""

    flat: np.ndarray  # [T] int64 token ids, the rows one after another
    lengths: np.ndarray  # [n] tokens per row
    rows: Any  # the words: a WordLayout (HFTokens) or a list of TokenizedRow (WordTokens)
    cls: np.ndarray  # [T] each position's class (space.py: STRUCTURAL, PASSTHROUGH, CANDIDATE)
    pos: np.ndarray  # [T] each position's index in the candidate set
    row_of: np.ndarray  # [T] each position's row
    cand: np.ndarray  # [T] bool, the candidate positions
    sizes: np.ndarray  # [n] candidate positions per row
    marked: np.ndarray | None  # [T] bool, the sensitive positions (None without ``sensitive``)


class MapBatch(NamedTuple):
    """The columns of a ``datasets.map`` batch that the release reads: the texts, whether the map is not batched
    (one row, its values not in lists), each row's id, and each row's sensitive spans (``None`` without a span
    column)."""

    texts: list[Any]
    single: bool
    row_ids: list[int]
    spans: list[Any] | None


def read_map_batch(
    batch: Any,
    indices: Sequence[int] | int | None,
    text_column: str,
    id_column: str | None,
    seeded: bool,
    span_column: str | None,
) -> MapBatch:
    """Read a ``datasets`` batch (batched or not): a missing column is named with the columns there are; the row
    ids come from ``id_column``, else the map's ``indices`` (a seeded release needs one of them)."""
    if not isinstance(batch, Mapping):  # its "columns" would be the texts, which no message may list
        raise ParameterTypeError(
            f"a Privatizer is called with a datasets batch (a dict of columns), got {type(batch).__name__}; "
            "for a list of texts use priv.privatize(texts)."
        )
    if text_column not in batch:
        raise ColumnNotFoundError(
            f"text_column={text_column!r} is not in the dataset. Current columns in the dataset: {sorted(batch)}."
        )
    texts = batch[text_column]
    single = not isinstance(texts, list)
    if single:  # non-batched map
        texts = [texts]
        if isinstance(indices, int):
            indices = [indices]
    if id_column is not None:
        if id_column not in batch:
            raise ColumnNotFoundError(
                f"id_column={id_column!r} is not in the dataset. Current columns in the dataset: {sorted(batch)}."
            )
        raw_ids = batch[id_column]
        raw_ids = [raw_ids] if single else raw_ids
        at = [indices] if isinstance(indices, int) else indices  # the map's indices name a bad row
        row_ids = check_row_ids(raw_ids, id_column, column=True, indices=at)
    elif indices is not None:
        row_ids = [int(i) for i in indices]  # type: ignore[union-attr]
    elif seeded:
        raise InvalidParameterError(
            "indices: a seeded Privatizer needs row ids; call ds.map(priv, batched=True, with_indices=True) "
            "or pass id_column=."
        )
    else:
        row_ids = [0] * len(texts)  # unused: unseeded rows draw fresh entropy
    span_values = None
    if span_column is not None:
        if span_column not in batch:
            raise ColumnNotFoundError(
                f'sensitive["column"]={span_column!r} is not in the dataset. Current columns in the dataset: '
                f"{sorted(batch)}."
            )
        span_values = [batch[span_column]] if single else list(batch[span_column])
    return MapBatch(texts, single, row_ids, span_values)
