"""The exact search's second step (space.md §5.4): float64 distances of the filter's candidates with
certified intervals, and exact rational arithmetic where the intervals leave an order open."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import torch

from ..cpu.distances import pair_sqdist, top_of_pairs


__all__ = ["exact_prefix", "exact_sqdist", "sqdist64", "verify", "verify_sorted"]

#: (query, position) pairs per block of the float64 verification (a block of float64 rows stays in cache)
_VERIFY_PAIRS = 256


def exact_sqdist(q: np.ndarray, e: np.ndarray) -> Fraction:
    """‖q − e‖² in exact rational arithmetic."""
    return sum(((Fraction(float(a)) - Fraction(float(b))) ** 2 for a, b in zip(q, e, strict=True)), Fraction(0))


def sqdist64(E: torch.Tensor, Qb: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Float64 ``D = Σ_j (q_j − e_cj)²`` of each (query row, position) pair.

    In blocks of :data:`_VERIFY_PAIRS` pairs, so the float64 work stays in cache and the memory is
    O(block·d), not O(pairs·d). The arithmetic is the same whatever the block (a difference, a square
    and a sum of d non-negative terms per pair), so the error bound of :func:`verify` holds.
    """
    native = pair_sqdist(Qb, E, rows, pos)  # the same arithmetic by a compiled kernel, where it runs
    if native is not None:
        return native
    q64 = Qb.double()
    n = rows.numel()
    D = torch.empty(n, dtype=torch.float64, device=Qb.device)
    for s in range(0, n, _VERIFY_PAIRS):
        x = E.index_select(0, pos[s : s + _VERIFY_PAIRS]).double()
        x.sub_(q64.index_select(0, rows[s : s + _VERIFY_PAIRS]))
        x.square_()
        torch.sum(x, 1, out=D[s : s + _VERIFY_PAIRS])
    return D


def verify(
    E: torch.Tensor, interval: float, Qb: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor, k: int, B: int
) -> torch.Tensor:
    """The exact top k ``[B, k]`` among each query's candidates (docs/mechanisms/space.md §5.4)."""
    found = top_of_pairs(Qb, E, rows, pos, B, k, interval)
    if found is None:
        return verify_sorted(E, interval, Qb, rows, pos, k, B)
    best, count, tie = found
    if bool((count < k).any()):  # cannot happen: the candidates always hold the true top k
        raise AssertionError("exact search kept fewer candidates than k")
    if bool(tie.any()):  # an open order: those queries' candidates through the sorted form, exactly
        t = torch.nonzero(tie).squeeze(1)
        sel = tie[rows]
        renum = torch.full((B,), -1, dtype=torch.int64)
        renum[t] = torch.arange(t.numel())
        best[t] = verify_sorted(E, interval, Qb[t], renum[rows[sel]], pos[sel], k, t.numel())
    return best


def verify_sorted(
    E: torch.Tensor, interval: float, Qb: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor, k: int, B: int
) -> torch.Tensor:
    D = sqdist64(E, Qb, rows, pos)
    err = interval * D
    # sort by (row, D, pos): stable sorts from the last key to the first
    o = torch.argsort(pos, stable=True)
    o = o[torch.argsort(D[o], stable=True)]
    o = o[torch.argsort(rows[o], stable=True)]
    rows, pos, D, err = rows[o], pos[o], D[o], err[o]
    counts = torch.bincount(rows, minlength=B)
    if bool((counts < k).any()):  # cannot happen: K_b always holds the true top-k
        raise AssertionError("exact search kept fewer candidates than k")
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(rows.numel(), device=rows.device) - starts[rows]
    # certified when each of the first k intervals is strictly below the next one's
    nxt_same = torch.zeros_like(rows, dtype=torch.bool)
    nxt_same[:-1] = rows[1:] == rows[:-1]
    gap_ok = torch.ones_like(nxt_same)
    hi = D + err
    lo = D - err
    gap_ok[:-1] = hi[:-1] < lo[1:]
    bad = nxt_same & ~gap_ok & (rank < k)
    bad_rows = torch.unique(rows[bad])
    sel = rank < k
    result = pos[sel].view(B, k).clone()
    if bad_rows.numel():
        E_np = E.cpu().numpy()
        for b in bad_rows.tolist():
            s0, n = int(starts[b]), int(counts[b])
            exact = exact_prefix(
                Qb[b].cpu().numpy(),
                E_np,
                pos[s0 : s0 + n].tolist(),
                lo[s0 : s0 + n].tolist(),
                hi[s0 : s0 + n].tolist(),
                k,
            )
            result[b] = torch.tensor(exact, dtype=torch.int64, device=result.device)
    return result


def exact_prefix(
    q: np.ndarray, E_np: np.ndarray, cand: list[int], lo: list[float], hi: list[float], k: int
) -> list[int]:
    """The first k of ``cand`` in the exact (distance, position) order, by exact arithmetic where needed.

    ``cand`` is sorted by (D, position) with D's certified intervals [lo, hi], where lo = D − cD and
    hi = D + cD grow with D (computed in float64 they still do: c ≈ 1e-13, so rounding c·D moves
    them by far less than one ulp of D). Cut the list wherever ``hi[i] < lo[i + 1]``: every candidate j ≤ i then
    has hi_j ≤ hi_i (D_j ≤ D_i) and every m ≥ i + 1 has lo_m ≥ lo_(i+1), so the exact distances of the
    first part are all strictly below those of the second, and only the order inside each part is
    open. Parts are taken in order until k candidates are placed; a part of two or more is ordered
    by exact rational distance (``fractions.Fraction``), then position.
    """
    out: list[int] = []
    i, n = 0, len(cand)
    while len(out) < k:
        j = i + 1
        while j < n and not hi[j - 1] < lo[j]:
            j += 1
        part = cand[i:j]
        if len(part) > 1:
            part = [c for _, c in sorted((exact_sqdist(q, E_np[c]), c) for c in part)]
        out += part
        i = j
    return out[:k]
