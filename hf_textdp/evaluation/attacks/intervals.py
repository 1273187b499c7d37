"""Row-bootstrap intervals: tokens of one row are not independent, rows are (docs/attacks.md §5)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


__all__ = ["row_bootstrap"]


def row_bootstrap(
    hits: npt.NDArray[np.bool_], row_sizes: npt.NDArray[np.int64], resamples: int, seed: int, *, level: float = 0.95
) -> tuple[float, float, float]:
    """The token-level rate of ``hits`` and its percentile interval, resampling rows with replacement.

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
    row_of = np.repeat(np.arange(row_sizes.size), row_sizes)
    per_row = np.bincount(row_of, weights=hits.astype(np.float64), minlength=row_sizes.size)
    rng = np.random.default_rng(seed)
    num = np.empty(resamples)
    den = np.empty(resamples)
    for b in range(resamples):
        idx = rng.integers(0, row_sizes.size, row_sizes.size)
        num[b] = per_row[idx].sum()
        den[b] = row_sizes[idx].sum()
    ratios = num / np.maximum(den, 1)
    a = (1.0 - level) / 2.0
    return rate, float(np.quantile(ratios, a)), float(np.quantile(ratios, 1.0 - a))
