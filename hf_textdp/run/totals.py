"""The report totals of released rows, recounted from the rows themselves (after num_proc, a resume, Ray).

Only token classes and the ``dp_*`` columns are read: no text.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import datasets
import numpy as np

from ..accounting import Totals
from ..space import CANDIDATE, STRUCTURAL, EmbeddingSpace
from ..tokens import make_tokens
from ..users import UserTotals
from ..utils.logging import get_logger


if TYPE_CHECKING:
    from ..privatizer import Privatizer


__all__ = [
    "totals_from_columns",
    "totals_from_dataset",
    "dataset_report",
    "warn_row_epsilon_outliers",
    "ROW_EPSILON_OUTLIER_MULTIPLE",
]

logger = get_logger("hf_textdp.pipeline")  # the logger this warning has always used

ROW_EPSILON_OUTLIER_MULTIPLE = 10.0


def totals_from_columns(space: EmbeddingSpace, batches: Iterable[dict[str, list[Any]]]) -> Totals:
    """Recompute the report totals from released columns (works after num_proc, a cache hit or a resume).

    Each batch's ids are classified in one pass and counted per row with ``np.add.reduceat``: the same integers
    as a row-by-row count (a streamed MR × 10 spent seconds in the row loop)."""
    totals = Totals()
    for batch in batches:
        _add_batch(space, totals, batch)
    return totals


def _add_batch(space: EmbeddingSpace, totals: Totals, batch: dict[str, list[Any]]) -> None:
    ids_col, n_col = batch["input_ids"], batch["dp_tokens"]
    if not ids_col:
        return
    sizes = np.fromiter((len(x) for x in ids_col), dtype=np.int64, count=len(ids_col))
    flat = np.fromiter((i for row in ids_col for i in row), dtype=np.int64, count=int(sizes.sum()))
    cls, _ = space.classify(flat)
    structural = cls == STRUCTURAL
    pad = space.pad_id
    padded = structural & (flat == pad) if pad is not None else np.zeros_like(structural)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])

    def per_row(mask: np.ndarray) -> np.ndarray:
        out = np.zeros(sizes.size, dtype=np.int64)
        nz = sizes > 0  # reduceat reads one element at an empty row's start: count those rows as 0
        if nz.any():
            out[nz] = np.add.reduceat(mask.astype(np.int64), starts[nz])
        return out

    n = np.asarray(n_col, dtype=np.int64)
    padding = per_row(padded)
    n_structural = per_row(structural)
    sens_col = batch.get("dp_sensitive_tokens")  # selective privatization (selective.md §6)
    # with others="keep" the candidates not privatized were kept: they are not passthrough tokens
    kept = per_row(cls == CANDIDATE) - n if sens_col is not None else np.zeros_like(n)
    eps, delta = batch.get("dp_epsilon"), batch.get("dp_delta")
    for j in range(sizes.size):
        totals.add_row(
            dp_tokens=int(n[j]),
            special=int(n_structural[j] - padding[j]),
            padding=int(padding[j]),
            passthrough=int(sizes[j] - n_structural[j] - n[j] - kept[j]),
            epsilon=None if eps is None else eps[j],
            delta=None if delta is None else delta[j],
            sensitive=0 if sens_col is None else int(sens_col[j]),
            kept_other=int(kept[j]),
        )


def totals_from_dataset(space: EmbeddingSpace, part: Any) -> Totals:
    """:func:`totals_from_columns` over a ``Dataset`` of released rows (memory-mapped, batch by batch)."""
    if not part.num_rows:
        return Totals()
    names = ("input_ids", "dp_tokens", "dp_epsilon", "dp_delta", "dp_sensitive_tokens")
    cols = [c for c in names if c in part.column_names]
    return totals_from_columns(space, part.select_columns(cols).iter(batch_size=1000))


def _totals_from_source(priv: Privatizer, source: Any, released: Any) -> Totals:
    """Totals of a ``postprocess="vector"`` output (no ``input_ids``): classify the input's tokens again.

    Only token classes are read from the input (as the privatizer did); no text leaves this function.
    """
    space = priv.engine.space
    tokens = make_tokens(space)
    totals = Totals()
    rows_in = source.select_columns([priv.text_column]).iter(batch_size=1000)
    cols = [c for c in ("dp_tokens", "dp_epsilon", "dp_delta") if c in released.column_names]
    rows_out = released.select_columns(cols).iter(batch_size=1000)
    for batch_in, batch_out in zip(rows_in, rows_out, strict=True):
        for j, row in enumerate(tokens.encode(batch_in[priv.text_column])):
            cls, _ = space.classify(row.ids)
            structural = int((cls == STRUCTURAL).sum())
            n = int((cls == CANDIDATE).sum())
            totals.add_row(
                dp_tokens=n,
                special=structural,
                padding=0,
                passthrough=int(cls.size - structural - n),
                epsilon=batch_out["dp_epsilon"][j] if "dp_epsilon" in batch_out else None,
                delta=batch_out["dp_delta"][j] if "dp_delta" in batch_out else None,
            )
    return totals


def warn_row_epsilon_outliers(parts: dict[str, Any], multiple: float = ROW_EPSILON_OUTLIER_MULTIPLE) -> int:
    """Log one warning when rows have ``dp_epsilon`` above ``multiple`` × the median row's (a very long row).

    A row's ε grows with its number of tokens (basic composition), so one 200,000-character row has an ε a
    thousand times its neighbours'. The message names the split, the count, the first row indices and the
    figures, never any text. Returns the number of such rows.
    """
    eps_by_split = {
        name: np.asarray(part.data.column("dp_epsilon").to_numpy(zero_copy_only=False), dtype=np.float64)
        for name, part in parts.items()
        if "dp_epsilon" in getattr(part, "column_names", [])
    }
    values = [v[np.isfinite(v)] for v in eps_by_split.values()]
    if not values or sum(v.size for v in values) < 2:
        return 0
    median = float(np.median(np.concatenate(values)))
    if median <= 0:
        return 0
    limit = multiple * median
    count = 0
    for name, eps in eps_by_split.items():
        rows = np.flatnonzero(np.nan_to_num(eps, nan=0.0) > limit)
        if rows.size == 0:
            continue
        count += int(rows.size)
        first = ", ".join(str(int(r)) for r in rows[:5]) + (", ..." if rows.size > 5 else "")
        logger.warning(
            "%d row(s)%s have dp_epsilon above %g x the median row's (%.4g): rows %s (largest %.4g). Long rows "
            "compose more tokens; split them into shorter rows or check that they are meant to be one text.",
            rows.size,
            f" of split {name!r}" if name else "",
            multiple,
            median,
            first,
            float(np.nanmax(eps[rows])),
        )
    return count


def dataset_report(
    ds: Any, privatizers: dict[str, Privatizer], sources: dict[str, Any] | None = None, users: UserTotals | None = None
) -> dict[str, Any]:
    """The report of a privatized Dataset/DatasetDict, totals recomputed from its columns.

    ``sources`` (split name → input Dataset) is needed only for ``postprocess="vector"`` outputs, which have
    no ``input_ids`` to count token classes from.
    """
    parts = dict(ds.items()) if isinstance(ds, datasets.DatasetDict) else {next(iter(privatizers)): ds}
    warn_row_epsilon_outliers(parts)
    totals = Totals()
    priv = next(iter(privatizers.values()))
    for name, part in parts.items():
        p = privatizers.get(name, priv)
        if "input_ids" not in part.column_names and sources is not None and name in sources:
            totals.merge(_totals_from_source(p, sources[name], part))
            continue
        totals.merge(totals_from_dataset(p.engine.space, part))
    return priv.engine.build_report(totals, users=users)  # users: the per-user figures (users.md §6)
