"""Row-bootstrap intervals: tokens of one row are not independent, rows are (docs/attacks.md §5)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats


__all__ = ["row_bootstrap"]


def row_bootstrap(
    hits: npt.NDArray[np.bool_], row_sizes: npt.NDArray[np.int64], resamples: int, seed: int, *, level: float = 0.95
) -> tuple[float, float, float]:
    """The token-level rate of ``hits`` and its percentile interval, resampling rows with replacement
    (``scipy.stats.bootstrap``, paired over rows).

    Args:
        hits (`np.ndarray`): ``[N]`` one flag per token, rows in order.
        row_sizes (`np.ndarray`): ``[n_rows]`` tokens per row (sums to N).
        resamples (`int`): bootstrap resamples (0: the interval is the point estimate).
        seed (`int`): the resampling seed.

    Returns:
        (rate, lower, upper).
    """
    n = int(hits.size)
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    rate = float(hits.mean())
    if resamples <= 0:
        return rate, rate, rate
    if row_sizes.size < 2:  # one row: every resample is that row
        return rate, rate, rate
    row_of = np.repeat(np.arange(row_sizes.size), row_sizes)
    per_row = np.bincount(row_of, weights=hits.astype(np.float64), minlength=row_sizes.size)

    def ratio(num: npt.NDArray[np.float64], den: npt.NDArray[np.float64], axis: int = -1) -> Any:
        return num.sum(axis) / np.maximum(den.sum(axis), 1)

    ci = stats.bootstrap(
        (per_row, row_sizes.astype(np.float64)),
        ratio,
        paired=True,  # a resample draws whole rows: their hits with their sizes
        vectorized=True,
        n_resamples=resamples,
        batch=200,
        method="percentile",
        confidence_level=level,
        rng=np.random.default_rng(seed),
    ).confidence_interval
    return rate, float(ci.low), float(ci.high)
