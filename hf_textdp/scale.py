"""Scale statistics of a space: ρ₁ (nearest-neighbour distance) and the diameter (space.md §4, accounting.md §4).

Both are exact (float64 answers certified by the fp32 error bounds of space.md §5) for V ≤ 65,536;
above that ρ₁ is computed on every ⌈V/20,000⌉-th position and the diameter is the sound upper bound
2·max‖φ(c) − mean‖. Results are cached per (matrix hash, metric) in memory and in an optional
injected :class:`~hf_textdp.memo.Store` (the space's disk cache): they depend on the public matrix only.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

from .cpu.bf16_filter import farthest_pair_candidates, fused_filter_available
from .memo import Store, matrix_key, memoised
from .search import BF16_MAX_MAGNITUDE, U32, ExactIndex, exact_fp32_matmul
from .utils.threads import torch_threads


__all__ = ["ScaleStats", "scale_stats", "rho1", "diameter"]

EXACT_LIMIT = 65_536


@dataclass(frozen=True)
class ScaleStats:
    median_rho1: float
    min_rho1: float
    max_rho1: float
    diam: float
    diam_exact: bool
    rho1_sampled: bool


_MEMO: dict[str, ScaleStats] = {}


def _matrix_key(E: torch.Tensor, metric: str) -> str:
    return matrix_key(b"hf_textdp/scale/v1\x00" + metric.encode() + b"\x00", E)


def rho1(index: ExactIndex, positions: torch.Tensor | None = None, block: int = 2048) -> np.ndarray:
    """Exact float64 ρ₁ of the given positions (all by default): distance to the nearest other row."""
    V = index.V
    pos = torch.arange(V) if positions is None else positions
    out = np.empty(pos.numel(), dtype=np.float64)
    E64 = index.E.double()
    for s in range(0, pos.numel(), block):
        p = pos[s : s + block].to(index.device)
        nn = index.search(index.E[p], 1, exclude=p)[:, 0].to(index.device)
        out[s : s + block] = torch.sqrt(((E64[p] - E64[nn]) ** 2).sum(1)).cpu().numpy()
    return out


def diameter(E: torch.Tensor, block: int = 512) -> float:
    """Exact float64 diameter: fp32 Gram pass, then float64 re-check of every pair within 2τ of the max.

    On CPUs where the fused bf16 kernel of the search runs, its farthest-pair form proposes the pairs instead
    (:func:`~hf_textdp.cpu.bf16_filter.farthest_pair_candidates`); the float64 re-check is the same.

    τ bounds the error of an fp32 squared distance ``‖a‖² + ‖b‖² − 2a·b`` (space.md §5's argument with
    both norms rounded), so every pair whose true squared distance is the maximum has an fp32 value
    within 2τ of the largest fp32 value. Per block of rows: one product against the rows from the
    block on (the distance is symmetric), the row maxima (one pass), and
    only the rows whose maximum reaches the running threshold are searched for pairs; the threshold
    from fewer rows is lower, so the pairs kept are a superset. The passes around the products run on
    one thread (see :meth:`ExactIndex.search`).
    """
    V, d = E.shape
    E = E.to(torch.float32).contiguous()
    sq64 = (E.double() ** 2).sum(1)
    n32 = sq64.float()
    R = math.sqrt(float(sq64.max()))
    if E.device.type == "cpu" and V * d >= 2**18 and 2 * R * R < BF16_MAX_MAGNITUDE and fused_filter_available():
        found = farthest_pair_candidates(E, sq64)  # the fused bf16 kernel (cpu/bf16_filter.py)
        if found is not None:
            E64 = E.double()
            return float(torch.sqrt(((E64[found[0]] - E64[found[1]]) ** 2).sum(1).max()))
    n = d + 2
    tau = (n * U32 / (1 - n * U32)) * 4 * R * R * 1.01 + 4 * U32 * 4 * R * R
    best = -math.inf
    cand_i: list[torch.Tensor] = []
    cand_j: list[torch.Tensor] = []
    ET = (-2.0 * E).T.contiguous()
    threads = torch.get_num_threads()
    serial = E.device.type == "cpu" and threads > 1
    with exact_fp32_matmul(), torch_threads(1 if serial else None):
        buf = torch.empty(min(block, V) * V, dtype=torch.float32, device=E.device)
        for s in range(0, V, block):
            e = min(s + block, V)
            # the distance is symmetric: rows s..e against columns s..V cover every pair once
            S = buf[: (e - s) * (V - s)].view(e - s, V - s)
            with torch_threads(threads if serial else None):
                torch.addmm(n32[s:], E[s:e], ET[:, s:], out=S)
            S.add_(n32[s:e, None])  # fp32 squared distances
            rmax = S.amax(1)
            best = max(best, float(rmax.max()))
            lim = torch.tensor(best - 2 * tau, dtype=torch.float64)
            lim32 = lim.float()
            if float(lim32) > float(lim):  # round the threshold down: the kept pairs stay a superset
                lim32 = torch.nextafter(lim32, torch.tensor(-math.inf))
            rows = torch.nonzero(rmax >= lim32).squeeze(1)
            if rows.numel():
                i, j = torch.nonzero(S[rows] >= lim32, as_tuple=True)
                cand_i.append(rows[i] + s)
                cand_j.append(j + s)
        ii = torch.cat(cand_i)
        jj = torch.cat(cand_j)
        E64 = E.double()
        D = ((E64[ii] - E64[jj]) ** 2).sum(1)
    return float(torch.sqrt(D.max()))


def scale_stats(
    E: torch.Tensor, metric: str = "euclidean", index: ExactIndex | None = None, *, store: Store | None = None
) -> ScaleStats:
    """ρ₁ summary and diameter of the rows of E (cached per matrix hash and metric, in memory and ``store``)."""
    return memoised(
        _MEMO,
        store,
        "scale",
        _matrix_key(E, metric),
        lambda: _compute(E, index),
        lambda raw: ScaleStats(**raw),
        asdict,
    )


def _compute(E: torch.Tensor, index: ExactIndex | None) -> ScaleStats:
    V = E.shape[0]
    index = index or ExactIndex(E, E.device)
    if V <= EXACT_LIMIT:
        r = rho1(index)
        sampled = False
        diam = diameter(E)
        diam_exact = True
    else:
        step = math.ceil(V / 20_000)
        r = rho1(index, torch.arange(0, V, step))
        sampled = True
        E64 = E.double()
        m = E64.mean(0)
        diam = 2.0 * float(torch.linalg.vector_norm(E64 - m, dim=1).max())
        diam = math.nextafter(diam, math.inf)
        diam_exact = False
    return ScaleStats(
        median_rho1=float(np.median(r)),
        min_rho1=float(r.min()),
        max_rho1=float(r.max()),
        diam=diam,
        diam_exact=diam_exact,
        rho1_sampled=sampled,
    )
