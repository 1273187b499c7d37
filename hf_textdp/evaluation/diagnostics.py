"""Privacy diagnostics beside accuracy, from the privatized token ids of a run.

- replacement rate: the fraction of privatized positions whose id changed;
- N_w and S_w (Feyisetan et al. 2020, arXiv 1910.08902 §5): per input word type w, N_w is the
  fraction of its occurrences left unchanged and S_w the number of distinct outputs it produced;
  reported as means over the types seen at least ``min_count`` times;
- the rank histogram of seed 003 ("d_χ-privacy and the curse of dimensionality", postprocess.md §4): the rank of each
  output among the input's neighbours in the public matrix (0 = the input itself, 1 = its nearest
  neighbour, ...), over a fixed subsample of positions.

The counting lives in the local ``evaluate`` module ``metrics/privacy_diagnostics``; this module adds
what needs the embedding matrix (the ranks).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch


__all__ = ["RANK_BINS", "rank_of_outputs", "rank_histogram"]

# bin edges (inclusive lower bounds) of the rank histogram; the last bin is open
RANK_BINS: tuple[tuple[int, int | None], ...] = ((0, 0), (1, 1), (2, 5), (6, 20), (21, 100), (101, 1000), (1001, None))


def rank_of_outputs(
    E: torch.Tensor, inputs: npt.NDArray[np.int64], outputs: npt.NDArray[np.int64], *, block: int = 256
) -> npt.NDArray[np.int64]:
    """Rank of ``E[outputs[i]]`` among the neighbours of ``E[inputs[i]]`` (positions into E).

    Rank 0 means the output is the input; rank r ≥ 1 counts the rows strictly closer to the input
    than the output (the input itself included), so the nearest neighbour has rank 1. Squared
    distances in float32 (a histogram, not a guarantee).
    """
    E = E.float().cpu()
    sq = (E * E).sum(1)
    ranks = np.zeros(inputs.size, dtype=np.int64)
    changed = np.flatnonzero(inputs != outputs)
    for start in range(0, changed.size, block):
        idx = changed[start : start + block]
        x = E[torch.from_numpy(inputs[idx])]
        dist = sq[None, :] + (x * x).sum(1)[:, None] - 2.0 * x @ E.T
        d_out = dist[torch.arange(idx.size), torch.from_numpy(outputs[idx])]
        ranks[idx] = (dist < d_out[:, None]).sum(1).clamp(min=1).numpy()
    return ranks


def rank_histogram(ranks: npt.NDArray[np.int64]) -> dict[str, Any]:
    """Fractions of outputs per rank bin, plus the median rank of the changed outputs."""
    n = max(int(ranks.size), 1)
    bins: dict[str, float] = {}
    for lo, hi in RANK_BINS:
        name = f"{lo}" if hi == lo else (f"{lo}-{hi}" if hi is not None else f">={lo}")
        mask = ranks >= lo if hi is None else (ranks >= lo) & (ranks <= hi)
        bins[name] = float(mask.sum() / n)
    changed = ranks[ranks > 0]
    return {
        "n": int(ranks.size),
        "bins": bins,
        "median_rank_changed": float(np.median(changed)) if changed.size else None,
    }
