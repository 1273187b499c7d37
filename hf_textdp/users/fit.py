"""The counting pass over a dataset (docs/mechanisms/users.md §4) and the user column of a batch.

:func:`fit_counts` reads the text, user, id and span columns of every row (a ``Dataset``, an ``IterableDataset``
or an iterable of column batches), has the privatizer count each batch's privatized tokens without releasing
anything, and returns the :class:`~hf_textdp.users.table.UserTable` of the counts. Row ids are those the release
uses: the ``id_column`` values, else the rows' indices in the source order.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..errors import ColumnNotFoundError, ParameterTypeError
from ..validation import check_row_ids
from .counting import BatchCounts, UserCounter
from .spec import UserSpec
from .table import UserTable


__all__ = ["count_batch", "fit_counts", "others_kept", "per_person", "spec_consistent", "user_secret", "user_values"]


def spec_consistent(config: Any) -> str | None:
    """The config's ``sensitive["consistent"]`` (``None`` without it)."""
    return None if config.sensitive is None else config.sensitive.consistent


def others_kept(config: Any) -> bool:
    """Whether ``sensitive["others"] = "keep"``: the other positions are released unchanged (and count nothing)."""
    return config.sensitive is not None and config.sensitive.others == "keep"


def per_person(config: Any) -> bool:
    """Whether a config needs the per-person release: a ``user`` setting or consistent pseudonyms."""
    return config.user is not None or spec_consistent(config) is not None


def user_secret(config: Any, seed: int | None) -> int | None:
    """The key of an unseeded privatizer's row priorities and pseudonyms (users.md §5): 64 fresh random bits, drawn
    once per privatizer and pickled to its workers as a seed is (``None`` with a seed or without per-person work)."""
    return secrets.randbits(64) if seed is None and per_person(config) else None


def user_values(batch: Any, spec: UserSpec | None, single: bool) -> list[Any] | None:
    """The batch's user column as a list (``None`` without a user setting).

    Raises:
        ColumnNotFoundError: the batch has no such column.
    """
    if spec is None:
        return None
    if spec.column not in batch:
        raise ColumnNotFoundError(
            f'user["column"]={spec.column!r} is not in the dataset. Current columns in the dataset: {sorted(batch)}.'
        )
    values = batch[spec.column]
    return [values] if single else list(values)


def _batches(source: Any, columns: list[str], batch_size: int) -> Iterator[dict[str, list[Any]]]:
    if hasattr(source, "select_columns") and hasattr(source, "iter"):  # a Dataset or an IterableDataset
        names = getattr(source, "column_names", None) or columns
        missing = [c for c in columns if c not in names]
        if missing:
            raise ColumnNotFoundError(
                f"{missing[0]!r} is not in the dataset. Current columns in the dataset: {list(names)}."
            )
        yield from source.with_format(None).select_columns(columns).iter(batch_size=batch_size)
    elif isinstance(source, Iterable) and not isinstance(source, (str, bytes, dict)):
        yield from source
    else:
        raise ParameterTypeError(
            f"fit_users takes a Dataset, an IterableDataset or an iterable of column batches, got "
            f"{type(source).__name__}."
        )


def _row_ids(batch: dict[str, list[Any]], id_column: str | None, offset: int, n: int) -> list[int]:
    """The batch's row ids as the release takes them (``validation.check_row_ids``, rows named by their index)."""
    if id_column is None:
        return list(range(offset, offset + n))
    return check_row_ids(batch[id_column], id_column, column=True, indices=range(offset, offset + n))


def fit_counts(priv: Any, source: Any, *, batch_size: int = 1000) -> UserTable:
    """Count every row of ``source`` with ``priv`` (a :class:`~hf_textdp.Privatizer` with per-person settings)."""
    users = priv.users
    spec = users.spec or UserSpec(column="")
    counter = UserCounter(spec, users.consistent)
    span_column = None if priv.config.sensitive is None else priv.config.sensitive.column
    columns = [c for c in (priv.text_column, users.spec and spec.column, priv.id_column, span_column) if c]
    offset = 0
    for batch in _batches(source, list(dict.fromkeys(columns)), batch_size):
        n = len(batch[priv.text_column])
        counter.add(count_batch(priv, batch, _row_ids(batch, priv.id_column, offset, n)))
        offset += n
    table: UserTable = counter.finish(users.levels.token_bounds)
    return table


def count_batch(priv: Any, batch: dict[str, list[Any]], row_ids: list[int]) -> BatchCounts:
    """One batch of the counting pass: each row's privatized sensitive tokens (every occurrence) and other tokens,
    and its sensitive strings, tokenized, classified and detected as the privatizer's release does them."""
    texts = list(batch[priv.text_column])
    spec = priv.config.sensitive
    spans = None if spec is None or spec.column is None else list(batch[spec.column])
    plan = priv.users.batch(user_values(batch, priv.users.spec, False), row_ids, counting=True)
    read = priv.read_batch(texts, row_ids, spans)  # as the release reads it (a TokenBatch)
    n, marked, cand = len(texts), read.marked, read.cand
    n_s = np.zeros(n, np.int64) if marked is None else np.bincount(read.row_of[marked & cand], minlength=n)
    n_o = np.zeros_like(read.sizes) if others_kept(priv.config) else read.sizes - n_s
    counts: BatchCounts = priv.users.counts(plan, n_s, n_o, priv.users.entities(read.flat, read.lengths, marked, cand))
    return counts
