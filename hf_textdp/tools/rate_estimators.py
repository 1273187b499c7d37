"""Estimators of the replacement rate as a function of ε, for :func:`~hf_textdp.tools.calibrate.calibrate`
(its docstring gives the method): the Rao–Blackwellised estimator of madlib + ``nearest`` from the cell radii
s(w, u) of madlib.md §4, plain Monte Carlo through the mechanism interfaces (common random numbers), their
class-weighted mixture (space.md §7), and the bisection on log ε that solves for a target rate. Nothing here
reads private data: every draw is public."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from scipy import special

from ..errors import InvalidParameterError
from ..mechanisms.base import AdditiveMechanism, Mechanism, SelectionMechanism
from ..postprocess import PostprocessStep
from ..rng import derive_row_seed, streams_for_rows
from ..search import exact_fp32_matmul
from ..space import EmbeddingSpace
from .audit_sampler import apply_step


__all__ = ["MonteCarlo", "Mixture", "RaoBlackwell", "bisect_log", "madlib_cell_radii"]

_SPLIT = "hf_textdp/calibrate"  # the key of the public draws' streams (kept: it fixes the Monte Carlo figures)
_MC_ROW = 256  # tokens per stream row in the Monte Carlo estimator
_REFINE = 8  # per draw, the smallest fp32-based radii re-checked in float64
_BLOCK_ELEMS = 2**22  # N × V block size of the radius computation (memory ≈ 5 × 8 × this bytes)


# --------------------------------------------------------------------------- the madlib estimator
def _duplicate_groups(E: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Group id of every row (exact duplicates share one) and whether a lower position has the same row."""
    _, inv = torch.unique(E.cpu(), dim=0, return_inverse=True)
    V = E.shape[0]
    first = torch.full((int(inv.max()) + 1,), V, dtype=torch.int64)
    first = first.scatter_reduce(0, inv, torch.arange(V), reduce="amin")
    return inv, first[inv] < torch.arange(V)


def madlib_cell_radii(E: torch.Tensor, w: np.ndarray, U: np.ndarray) -> np.ndarray:
    """s(wᵢ, uᵢ) of madlib.md §4: how far the ray φ(wᵢ) + s·uᵢ stays in wᵢ's ``nearest`` cell.

    ``+∞`` when no candidate lies ahead in direction uᵢ; 0 when a lower-id exact duplicate of φ(wᵢ)
    exists (``nearest`` then never returns wᵢ); higher-id duplicates are ignored (ties go to wᵢ).
    Approximate radii come from two fp32 GEMMs per block of draws (TF32 off); for each draw the
    ``_REFINE`` smallest are recomputed in float64 from exact differences, and their minimum is s.

    Args:
        E (`torch.Tensor` `[V, d]`): candidate rows (fp32).
        w (`np.ndarray` `[N]`): positions of the tokens.
        U (`np.ndarray` `[N, d]`): unit directions (float64).
    """
    E = E.detach().to("cpu", torch.float32).contiguous()
    V, d = E.shape
    E64 = E.double()
    sq32 = (E64**2).sum(1).float()
    ET = E.T.contiguous()
    group, lower_dup = _duplicate_groups(E)
    has_dup = torch.bincount(group)[group] > 1
    N = len(w)
    out = np.empty(N, dtype=np.float64)
    block = max(1, min(N, _BLOCK_ELEMS // V))
    t = min(_REFINE, V)
    wt_all = torch.from_numpy(np.asarray(w, dtype=np.int64))
    U_all = torch.from_numpy(np.asarray(U, dtype=np.float64))
    for s0 in range(0, N, block):
        wt = wt_all[s0 : s0 + block]
        B = int(wt.numel())
        u64 = U_all[s0 : s0 + block]
        x64 = E64[wt]
        # fp32 filter: approximate radii, only used to pick each draw's `t` best candidates
        with exact_fp32_matmul():
            ud = u64.float() @ ET
            ud -= (u64 * x64).sum(1, keepdim=True).float()
            dd2 = E[wt] @ ET
        dd2.mul_(-2.0).add_(sq32[None, :]).add_(sq32[wt][:, None])
        ud[torch.arange(B), wt] = 0.0
        for r in torch.nonzero(has_dup[wt]).squeeze(1).tolist():  # rows whose w has exact duplicates
            ud[r, group == group[wt[r]]] = 0.0
        s = torch.where(ud > 0, dd2 / (2.0 * ud), math.inf)
        cand = torch.topk(s, t, dim=1, largest=False).indices  # [B, t]
        # float64 re-check of the best candidates (differences of fp32 values are exact in float64)
        delta = E64[cand] - x64[:, None, :]
        ud64 = (delta * u64[:, None, :]).sum(2)
        dd64 = (delta**2).sum(2)
        ok64 = (ud64 > 0) & (group[cand] != group[wt][:, None])
        s64 = torch.where(ok64, dd64 / (2.0 * torch.where(ok64, ud64, 1.0)), math.inf).min(1).values
        s64 = torch.where(lower_dup[wt], 0.0, s64)
        out[s0 : s0 + block] = s64.numpy()
    return out


def _keep_terms(d: int, epsilon: float, radii: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.where(np.isinf(radii), np.inf, epsilon * radii)
    return np.asarray(special.gammainc(d, x), dtype=np.float64)


class RaoBlackwell:
    """madlib + ``nearest``: K̂(ε) = mean of P(d, ε·sᵢ) over the public cell radii sᵢ (madlib.md §4)."""

    def __init__(self, d: int, radii: np.ndarray) -> None:
        self.d, self.radii, self.n = d, radii, radii.size

    def rate(self, epsilon: float) -> tuple[float, float]:
        k = _keep_terms(self.d, epsilon, self.radii)
        se = float(k.std(ddof=1) / math.sqrt(self.n)) if self.n > 1 else float("nan")
        return 1.0 - float(k.mean()), se

    def slope(self, epsilon: float) -> float:
        """d(replacement rate)/dε = −mean(s·gamma_pdf(d)(ε·s))."""
        r = self.radii
        fin = np.isfinite(r) & (r > 0)
        x = epsilon * r[fin]
        pdf = np.exp((self.d - 1) * np.log(x) - x - special.gammaln(self.d))
        return -float((r[fin] * pdf).sum() / self.n)

    def range(self) -> tuple[float, float]:
        """Replacement rates reachable as ε → ∞ and ε → 0."""
        return float((self.radii == 0).mean()), float(1.0 - np.isinf(self.radii).mean())


# --------------------------------------------------------------------------- the generic estimator
class MonteCarlo:
    """Any mechanism: the share of n public tokens whose output is not the input, on the same streams at every ε."""

    def __init__(self, make: Any, space: EmbeddingSpace, positions: np.ndarray, seed: int) -> None:
        self.make, self.space, self.seed = make, space, seed
        self.positions = torch.from_numpy(positions.astype(np.int64))
        self.n = int(self.positions.numel())
        self._memo: dict[float, tuple[float, float]] = {}

    def outputs(self, mech: Mechanism, step: PostprocessStep | None) -> torch.Tensor:
        space = self.space
        sizes = [int(p.numel()) for p in torch.split(self.positions, _MC_ROW)]
        # the same public streams at every ε: common random numbers make the rate smooth in ε
        keys = [derive_row_seed(self.seed, i, _SPLIT, 0) for i in range(len(sizes))]
        streams = streams_for_rows(keys, sizes, space.device)
        if isinstance(mech, SelectionMechanism):
            return mech.sample(space, self.positions, streams).cpu()
        assert isinstance(mech, AdditiveMechanism) and step is not None
        z = mech.perturb_positions(space, self.positions, streams)
        return apply_step(step, z, mech, space, streams, self.positions).cpu()

    def rate(self, epsilon: float) -> tuple[float, float]:
        if epsilon not in self._memo:
            mech, step = self.make(epsilon)
            out = self.outputs(mech, step)
            p = float((out != self.positions).double().mean())
            self._memo[epsilon] = (p, math.sqrt(p * (1.0 - p) / self.n))
        return self._memo[epsilon]

    def slope(self, epsilon: float) -> float:
        f = 1.1
        hi, lo = self.rate(epsilon * f)[0], self.rate(epsilon / f)[0]
        return (hi - lo) / (epsilon * f - epsilon / f)


class Mixture:
    """Class-preserving replacement (space.md §7): each class's estimator, weighted by its share of the draws."""

    def __init__(self, parts: list[tuple[float, MonteCarlo]]) -> None:
        self.parts = parts

    def rate(self, epsilon: float) -> tuple[float, float]:
        rates = [(w, est.rate(epsilon)) for w, est in self.parts]
        return sum(w * r for w, (r, _) in rates), math.sqrt(sum((w * se) ** 2 for w, (_, se) in rates))

    def slope(self, epsilon: float) -> float:
        return sum(w * est.slope(epsilon) for w, est in self.parts)


# --------------------------------------------------------------------------- solving for a target rate
def bisect_log(rate: Any, target: float, start: float, *, rel_tol: float, max_iter: int = 200) -> float:
    """Solve rate(ε) = target for a rate decreasing in ε by bracketing and bisection on log ε."""
    lo = hi = start
    r = rate(start)[0]
    steps = 0
    if r > target:  # too much replacement: increase ε
        while r > target:
            lo, hi = hi, hi * 4.0
            r = rate(hi)[0]
            steps += 1
            if steps > 60:
                raise InvalidParameterError(f"target_rate={target}: not reached for epsilon up to {hi:.3g}.")
    else:
        while r <= target:
            hi, lo = lo, lo / 4.0
            r = rate(lo)[0]
            steps += 1
            if steps > 60:
                raise InvalidParameterError(f"target_rate={target}: not reached for epsilon down to {lo:.3g}.")
    for _ in range(max_iter):
        if hi / lo - 1.0 <= rel_tol:
            break
        mid = math.sqrt(lo * hi)
        if rate(mid)[0] > target:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)
