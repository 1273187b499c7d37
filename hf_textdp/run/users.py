"""Per-person accounting in the runners (docs/mechanisms/users.md §4, §6): the counting pass before a release, the
per-user figures of released rows, and the finished output (dropped rows out, the user column dropped unless
``user["keep_column"]``).

Every engine runs the same three steps: ``privatize_dataset`` (in memory, sharded, streaming) and ``--engine ray``
count each split once before any row is released (:func:`fit_splits`), keep the user column and ``dp_dropped`` in
their work folders (the map removes the other :attr:`~hf_textdp.Privatizer.drop_columns`: :func:`mapped_drops`),
recount the per-user figures from the released rows (:func:`user_totals`) and then finish the output
(:func:`finish`, :func:`finish_parquet`), which drops the user column with the rest of ``drop_columns``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import InvalidParameterError
from ..privatizer import Privatizer
from ..users import UserTotals, user_totals_from_batches


__all__ = ["DROPPED", "finish", "finish_parquet", "finish_table", "fit_splits", "mapped_drops", "user_totals"]

#: the column that flags a row dropped by ``bound="rows"`` (removed from finished outputs)
DROPPED = "dp_dropped"


def fit_splits(privatizers: dict[str, Privatizer], parts: dict[str, Any], *, resume: bool, batch_size: int) -> None:
    """Run the counting pass of every split whose release needs it (before any row is released).

    Raises:
        InvalidParameterError: ``resume`` of an unseeded run that chooses rows or pseudonyms with a key: the key of
            the first run is not stored, so the resumed part would choose apart from the finished one.
    """
    for name, priv in privatizers.items():
        users = priv.users
        if users is None or not users.needs_counts:
            continue
        keyed = users.consistent == "user" or (users.spec is not None and users.spec.bound == "rows")
        if resume and priv.seed is None and keyed:
            raise InvalidParameterError(
                "resume: an unseeded run with user['bound'] = 'rows' or sensitive['consistent'] = 'user' cannot be "
                "continued (its key is not stored, so the rest would choose rows or pseudonyms apart from the "
                "finished shards); rerun with overwrite=True, or use a seed."
            )
        priv.fit_users(parts[name], batch_size=batch_size)


def _spec(priv: Privatizer) -> Any:
    return priv.config.user


def mapped_drops(priv: Privatizer) -> list[str]:
    """The :attr:`~hf_textdp.Privatizer.drop_columns` a map removes at once: all but the user column, which the
    per-user figures are recounted from before :func:`finish` removes it (users.md §6)."""
    spec = _spec(priv)
    return [c for c in priv.drop_columns if spec is None or c != spec.column]


def user_totals(parts: dict[str, Any], privatizers: dict[str, Privatizer]) -> UserTotals | None:
    """The per-user sums of released splits (``None`` without a user setting); users are per split."""
    first = next(iter(privatizers.values()))
    spec = _spec(first)
    if spec is None:
        return None
    totals = UserTotals()
    for part in parts.values():
        cols = [c for c in (spec.column, "dp_epsilon", "dp_delta", DROPPED) if c in part.column_names]
        if part.num_rows:
            totals.merge(user_totals_from_batches(part.select_columns(cols).iter(batch_size=4096), spec))
    return totals


def finish(ds: Any, priv: Privatizer) -> Any:
    """A released ``Dataset`` / ``IterableDataset`` (or dict of them) without its dropped rows, the ``dp_dropped``
    flag, and the privatizer's :attr:`~hf_textdp.Privatizer.drop_columns` (the user column unless
    ``user["keep_column"]``, with the span column where the map left it)."""
    spec = _spec(priv)
    if spec is None:
        return ds
    if isinstance(ds, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        return type(ds)({k: finish(v, priv) for k, v in ds.items()})
    names = ds.column_names or (list(ds.features) if ds.features is not None else None)
    if names is None:  # a mapped stream of unknown columns: the flag (bound="rows") and the user column are there
        names = [DROPPED, spec.column] if spec.bound == "rows" else [spec.column]
    if DROPPED in names:
        kwargs = {"keep_in_memory": True} if isinstance(ds, datasets.Dataset) else {}
        ds = ds.filter(lambda flags: [not f for f in flags], input_columns=[DROPPED], batched=True, **kwargs)
    drop = [c for c in (DROPPED, *priv.drop_columns) if c in names]
    return ds.remove_columns(drop) if drop else ds


def finish_table(table: pa.Table, priv_config: Any) -> pa.Table:
    """:func:`finish` of an Arrow table (Ray's parquet parts)."""
    spec = priv_config.user
    if spec is None:
        return table
    if DROPPED in table.schema.names:
        table = table.filter(pc.invert(table.column(DROPPED))).drop_columns([DROPPED])
    if spec.dropped_column is not None and spec.dropped_column in table.schema.names:
        table = table.drop_columns([spec.dropped_column])
    return table


def finish_parquet(folder: Path, config: Any) -> None:
    """:func:`finish_table` of every parquet file under ``folder``, rewritten in place (before the output is
    renamed into place)."""
    if config.user is None:
        return
    for path in sorted(folder.rglob("*.parquet")):
        table = finish_table(pq.read_table(path), config)
        pq.write_table(table, path)
