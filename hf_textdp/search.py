"""Exact chunked nearest-neighbour search (spec §1.5).

``ExactIndex(matrix).search(Q, k)`` returns, for each query row, the ``k`` positions with the
smallest *exact* squared distance ``‖q − e_c‖²`` (real arithmetic on the fp32 values), ties to the
lowest position. This equals float64 brute force whenever that brute force is itself exact, and is
the exact answer when it is not (spec §1.5, cases N4/N5).

Algorithm (filter and verify):

1. fp32 scores ``s̃_c = fl(‖e_c‖² − 2 q·e_c)`` by one ``addmm`` per chunk of positions, with TF32
   and bf16 reduced-precision matmuls off. For every chunk keep the ``t = k + 3`` smallest scores.
2. Error bound: an fp32 dot product of length d errs by at most γ_d‖q‖‖e‖; rounding ``‖e‖²`` and the
   final addition add at most u(‖e‖² + |s|)(1 + γ_d). So ``|s̃_c − s_c| ≤ 0.51·η`` with
   ``η = 2(d+3)u(R² + 2‖q‖R)`` (u = 2⁻²⁴, R = max row norm) for d ≤ 80,000. Every true top-k
   position therefore has ``s̃ ≤ m + 2η``, m being the k-th smallest fp32 score.
3. Candidates ``K = {c : s̃_c ≤ m + 2η}``. If a chunk's t-th kept score is itself ≤ m + 2η, the chunk
   may hold more candidates than were kept: that query is rescanned over all positions.
4. Re-check: float64 distances ``D_c = Σ (q_j − e_cj)²`` with error ≤ (d+2)u₆₄·D; if the top-k
   intervals ``[D ± 2(d+3)u₆₄D]`` are disjoint from each other and from the rest, they decide;
   otherwise exact rational arithmetic (``fractions.Fraction``) decides.

Memory is O(B·chunk) per call: never V × V.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction

import numpy as np
import torch

from .errors import InvalidParameterError, NumericalRangeError


__all__ = ["ExactIndex", "exact_fp32_matmul"]


def _single_thread_after_fork() -> None:
    # torch's OpenMP pool does not survive fork(): a forked child (datasets ``num_proc``, DataLoader
    # workers) that runs a multi-threaded GEMM deadlocks. Each forked worker is one process per core
    # anyway, so it uses one intra-op thread.
    torch.set_num_threads(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_single_thread_after_fork)

U32 = 2.0**-24
U64 = 2.0**-53


@contextmanager
def exact_fp32_matmul() -> Iterator[None]:
    """Disable TF32 / bf16 reduced-precision fp32 matmuls for the duration (spec §1.5)."""
    prev_prec = torch.get_float32_matmul_precision()
    prev_cuda = torch.backends.cuda.matmul.allow_tf32
    prev_cudnn = torch.backends.cudnn.allow_tf32
    try:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        yield
    finally:
        torch.set_float32_matmul_precision(prev_prec)
        torch.backends.cuda.matmul.allow_tf32 = prev_cuda
        torch.backends.cudnn.allow_tf32 = prev_cudnn


def _exact_sqdist(q: np.ndarray, e: np.ndarray) -> Fraction:
    return sum(((Fraction(float(a)) - Fraction(float(b))) ** 2 for a, b in zip(q, e)), Fraction(0))


class ExactIndex:
    """An fp32 matrix prepared for exact nearest-neighbour search (spec §1.5).

    Args:
        matrix (`torch.Tensor` of shape `[V, k]`): the rows to search (converted to fp32, contiguous).
        device (`str`, defaults to `"cpu"`): where scores are computed.
        chunk_size (`int`, defaults to `8192`): positions per fp32 score block.
    """

    def __init__(self, matrix: torch.Tensor, device: str | torch.device = "cpu", chunk_size: int = 8192) -> None:
        if matrix.ndim != 2 or matrix.shape[0] < 1:
            raise InvalidParameterError(f"matrix must be 2-D with at least one row, got shape {tuple(matrix.shape)}.")
        if chunk_size < 1:
            raise InvalidParameterError(f"chunk_size must be >= 1, got {chunk_size}.")
        self.device = torch.device(device)
        self.E = matrix.detach().to(self.device, torch.float32).contiguous()
        self.V, self.d = self.E.shape
        sq64 = (self.E.double() ** 2).sum(1)
        self.n32 = sq64.float().contiguous()
        self.Em2T = (-2.0 * self.E).T.contiguous()  # exact in fp32 (power-of-two scaling)
        r = math.sqrt(float(sq64.max()))
        self.R = math.nextafter(r, math.inf)
        self.chunk_size = int(chunk_size)
        self._t_extra = 3

    # ------------------------------------------------------------------ public
    def search(
        self,
        Q: torch.Tensor,
        k: int = 1,
        exclude: torch.Tensor | None = None,
        chunk_size: int | None = None,
        query_block: int = 2048,
    ) -> torch.Tensor:
        """Return ``[B, k]`` int64 positions of the k nearest rows, ordered by (distance, position)."""
        if k < 1 or k > self.V - (1 if exclude is not None else 0):
            raise InvalidParameterError(f"k must be in [1, {self.V}], got {k}.")
        Q = Q.to(self.device, torch.float32)
        if Q.ndim != 2 or Q.shape[1] != self.d:
            raise InvalidParameterError(f"queries must have shape [B, {self.d}], got {tuple(Q.shape)}.")
        if Q.shape[0] == 0:
            return torch.empty((0, k), dtype=torch.int64)
        if not bool(torch.isfinite(Q).all()):
            raise NumericalRangeError(
                "epsilon: the noisy vectors overflowed to non-finite values; epsilon is far too small "
                "for float32 (use a larger epsilon)."
            )
        L = int(chunk_size or self.chunk_size)
        out = []
        with exact_fp32_matmul():
            for b0 in range(0, Q.shape[0], query_block):
                Qb = Q[b0 : b0 + query_block]
                ex = None if exclude is None else exclude[b0 : b0 + query_block].to(self.device)
                out.append(self._search_block(Qb, k, ex, L))
        return torch.cat(out, 0).cpu()

    # ------------------------------------------------------------------ internals
    def _scores(self, Qb: torch.Tensor, s: int, e: int) -> torch.Tensor:
        return torch.addmm(self.n32[s:e], Qb, self.Em2T[:, s:e])

    def _search_block(self, Qb: torch.Tensor, k: int, exclude: torch.Tensor | None, L: int) -> torch.Tensor:
        B = Qb.shape[0]
        t = k + self._t_extra
        vals, idxs, full = [], [], []
        for s in range(0, self.V, L):
            e = min(s + L, self.V)
            S = self._scores(Qb, s, e)
            if exclude is not None:
                inside = (exclude >= s) & (exclude < e)
                if bool(inside.any()):
                    rows = torch.nonzero(inside).squeeze(1)
                    S[rows, exclude[rows] - s] = math.inf
            tt = min(t, e - s)
            v, i = torch.topk(S, tt, dim=1, largest=False, sorted=True)
            vals.append(v)
            idxs.append(i + s)
            full.append(tt < e - s)  # the chunk has more entries than were kept
        allv = torch.cat(vals, 1).double()
        alli = torch.cat(idxs, 1)
        qn = torch.linalg.vector_norm(Qb.double(), dim=1)
        eta = 2.0 * (self.d + 3) * U32 * (self.R * self.R + 2.0 * qn * self.R)
        m = torch.kthvalue(allv, k, dim=1).values
        thresh = m + 2.0 * eta
        # overflow: a chunk whose last kept score is within the threshold may hide candidates
        overflow = torch.zeros(B, dtype=torch.bool, device=Qb.device)
        col = 0
        for v, f in zip(vals, full):
            tt = v.shape[1]
            if f:
                overflow |= v[:, tt - 1].double() <= thresh
            col += tt
        keep = allv <= thresh[:, None]
        rows_l: list[torch.Tensor] = []
        pos_l: list[torch.Tensor] = []
        ok_rows = ~overflow
        r_idx, c_idx = torch.nonzero(keep & ok_rows[:, None], as_tuple=True)
        rows_l.append(r_idx)
        pos_l.append(alli[r_idx, c_idx])
        for b in torch.nonzero(overflow).squeeze(1).tolist():
            p = self._rescan(Qb[b : b + 1], float(thresh[b]), None if exclude is None else int(exclude[b]), L)
            rows_l.append(torch.full((p.numel(),), b, dtype=torch.int64, device=Qb.device))
            pos_l.append(p)
        rows = torch.cat(rows_l)
        pos = torch.cat(pos_l)
        return self._verify(Qb, rows, pos, k, B)

    def _rescan(self, q: torch.Tensor, thresh: float, exclude: int | None, L: int) -> torch.Tensor:
        found = []
        for s in range(0, self.V, L):
            e = min(s + L, self.V)
            S = self._scores(q, s, e)[0].double()
            if exclude is not None and s <= exclude < e:
                S[exclude - s] = math.inf
            found.append(torch.nonzero(S <= thresh).squeeze(1) + s)
        return torch.cat(found)

    def _verify(self, Qb: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor, k: int, B: int) -> torch.Tensor:
        q64 = Qb.double()
        D = ((q64[rows] - self.E[pos].double()) ** 2).sum(1)
        err = 2.0 * (self.d + 3) * U64 * D
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
            E_np = None
            for b in bad_rows.tolist():
                s0, n = int(starts[b]), int(counts[b])
                cand = pos[s0 : s0 + n].tolist()
                if E_np is None:
                    E_np = self.E.cpu().numpy()
                qn = Qb[b].cpu().numpy()
                exact = sorted((_exact_sqdist(qn, E_np[c]), c) for c in cand)
                result[b] = torch.tensor([c for _, c in exact[:k]], dtype=torch.int64, device=result.device)
        return result
