"""The test of one audited pair (testing.md §3): up to 2·k_max candidate events chosen on the selection draws,
and the log probability ratio of each bounded on the independent estimation draws with one-sided
Clopper–Pearson bounds (at the Bonferroni-corrected level ``a_ev``) and the slack δ_tok."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from .audit_sampler import Sampler


__all__ = ["audit_pair", "clopper_pearson_lower", "clopper_pearson_upper"]


def clopper_pearson_lower(k: np.ndarray, n: int, a: float) -> np.ndarray:
    """One-sided Clopper–Pearson lower bound: P[p ≥ lo] ≥ 1 − a (0 at k = 0)."""
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        lo = stats.beta.ppf(a, np.maximum(k, 1e-300), n - k + 1)
    return np.where(k > 0, lo, 0.0)


def clopper_pearson_upper(k: np.ndarray, n: int, a: float) -> np.ndarray:
    """One-sided Clopper–Pearson upper bound: P[p ≤ hi] ≥ 1 − a (1 at k = n)."""
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        hi = stats.beta.ppf(1.0 - a, k + 1, np.maximum(n - k, 1e-300))
    return np.where(k < n, hi, 1.0)


def _events(ya: np.ndarray, yb: np.ndarray, n_out: int, k_max: int) -> list[np.ndarray]:
    """Prefixes of the k_max outputs with the highest smoothed log ratio P_a/P_b (selection draws only)."""
    ca = np.bincount(ya, minlength=n_out).astype(np.float64)
    cb = np.bincount(yb, minlength=n_out).astype(np.float64)
    seen = (ca + cb) > 0
    pa = (ca + 0.5) / (ca + 0.5).sum()
    pb = (cb + 0.5) / (cb + 0.5).sum()
    score = np.where(seen, np.log(pa) - np.log(pb), -np.inf)
    order = np.argsort(-score, kind="stable")
    order = order[np.isfinite(score[order])][:k_max]
    return [order[: i + 1] for i in range(len(order))]


def audit_pair(
    sampler: Sampler,
    a: int,
    b: int,
    n_select: int,
    n_estimate: int,
    a_ev: float,
    delta: float,
    k_max: int,
    n_bins: int,
) -> tuple[float, float, tuple[int, ...], tuple[int, int]]:
    """(largest lower confidence bound of a log ratio, largest point estimate, the event reaching the bound,
    its direction (x, y): more likely under M(x)) for the positions ``a`` and ``b``."""
    sa, sb = sampler.draw(a, n_select), sampler.draw(b, n_select)
    if sampler.vectors:
        u = sampler.direction(a, b, sa, sb)
        sa, sb = sa @ u.numpy(), sb @ u.numpy()
        ea, eb = sampler.draw(a, n_estimate, u), sampler.draw(b, n_estimate, u)
        edges = np.quantile(np.concatenate([sa, sb]), np.linspace(0.0, 1.0, n_bins + 1)[1:-1])
        sa, sb, ea, eb = (np.searchsorted(edges, x) for x in (sa, sb, ea, eb))
        n_out = n_bins
    else:
        ea, eb = sampler.draw(a, n_estimate), sampler.draw(b, n_estimate)
        n_out = int(max(sa.max(), sb.max(), ea.max(), eb.max())) + 1
    best_lcb, best_pt = -math.inf, -math.inf
    best_event: tuple[int, ...] = ()
    best_dir = (a, b)
    for sx, sy, ex, ey, direction in ((sa, sb, ea, eb, (a, b)), (sb, sa, eb, ea, (b, a))):
        events = _events(sx, sy, n_out, k_max)
        if not events:
            continue
        cx = np.bincount(ex, minlength=n_out)
        cy = np.bincount(ey, minlength=n_out)
        kx = np.array([cx[e].sum() for e in events], dtype=np.float64)
        ky = np.array([cy[e].sum() for e in events], dtype=np.float64)
        lo = clopper_pearson_lower(kx, n_estimate, a_ev) - delta
        hi = clopper_pearson_upper(ky, n_estimate, a_ev)
        with np.errstate(divide="ignore", invalid="ignore"):
            lcb = np.where(lo > 0, np.log(np.maximum(lo, 1e-300)) - np.log(hi), -np.inf)
            pt = np.where(
                (kx > 0) & (ky > 0),
                np.log(kx / n_estimate) - np.log(np.maximum(ky, 1) / n_estimate),
                np.where(kx > 0, np.inf, -np.inf),
            )
        i = int(np.argmax(lcb))
        if lcb[i] > best_lcb or not best_event:
            best_lcb, best_event, best_dir = float(lcb[i]), tuple(int(o) for o in events[i]), direction
        best_pt = max(best_pt, float(pt.max()))
    return best_lcb, best_pt, best_event, best_dir
