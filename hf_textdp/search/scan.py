"""The exact search's torch filter (space.md §5.3): one pass of matrix products over all positions, in fp32 (the
reference, and every device) or bf16, with the strided block-extremum pass that keeps every candidate of the
top k (:class:`TorchFilter`); :class:`~hf_textdp.search.ExactIndex` runs it where no fused kernel does."""

from __future__ import annotations

import dataclasses
import math
import threading

import torch

from ..utils.rounding import round_up_fp32
from ..utils.threads import torch_threads
from .bf16 import Found, bf16_operands, chunk_bf16
from .bounds import U32, Bf16Constants, bf16_filter_bound, threshold, top_k


__all__ = ["TorchFilter"]


class TorchFilter:
    """The operands of the torch filter pass of fp32 rows ``E`` ``[V, d]`` (squared norms ``sq64``, largest norm
    rounded up ``R``) padded to ``Vp`` positions, built on first use, and the pass itself (:meth:`scan`)."""

    def __init__(self, E: torch.Tensor, sq64: torch.Tensor, Vp: int, R: float, block: int) -> None:
        self.E, self.sq64, self.Vp, self.R, self.block = E, sq64, Vp, R, block
        self.V, self.d = E.shape
        self.n32 = sq64.float().contiguous()
        self.device = E.device
        self._fp32_pad: tuple[torch.Tensor, torch.Tensor] | None = None
        self._bf16: tuple[torch.Tensor, Bf16Constants] | None = None
        self._lock = threading.Lock()

    @property
    def bf16_ready(self) -> bool:
        """Whether the bf16 operands were built (a search has run the bf16 pass)."""
        return self._bf16 is not None

    def fp32_operands(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(n32 padded with +inf, −2·Eᵀ padded with zero columns) to Vp positions."""
        with self._lock:
            if self._fp32_pad is None:
                pad = self.Vp - self.V
                n32 = torch.cat([self.n32, torch.full((pad,), math.inf, device=self.device)])
                em2t = torch.zeros((self.d, self.Vp), dtype=torch.float32, device=self.device)
                em2t[:, : self.V] = (-2.0 * self.E).T
                self._fp32_pad = (n32.contiguous(), em2t)
            return self._fp32_pad

    def bf16_operands(self) -> tuple[torch.Tensor, Bf16Constants]:
        """:func:`~hf_textdp.search.bf16.bf16_operands` of the rows, built once."""
        with self._lock:
            if self._bf16 is None:
                self._bf16 = bf16_operands(self.E, self.sq64, self.Vp)
            return self._bf16

    def scan(
        self,
        Qb: torch.Tensor,
        k: int,
        exclude: torch.Tensor | None,
        L: int,
        *,
        bf16: bool,
        gemm_threads: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One filter pass over all positions: (rows, positions, candidates per row).

        Scores are oriented so that larger is better (the bf16 score t̃, or −s̃ for fp32). Every chunk's
        scores go through one strided block-extremum pass; the k-th best block extremum so far gives a
        running threshold (a threshold from fewer positions is lower, so it keeps a superset), the
        blocks that reach it are read again, and the final threshold trims the candidates at the end.
        Comparisons run in the scores' own format against the threshold rounded outwards, and a lower
        bound on a block's best score in place of the exact one only lowers the threshold, so every
        shortcut below keeps a superset of the true top k.
        """
        B = Qb.shape[0]
        dev = Qb.device
        G = self.block if self.Vp // self.block >= 4 * k else 1
        if bf16:
            EaT, consts = self.bf16_operands()
            Qa = torch.zeros((B, EaT.shape[0]), dtype=torch.bfloat16, device=dev)
            Qa[:, : self.d] = Qb  # round to nearest even
            Qa[:, self.d : self.d + 2] = 1.0
            q_hat = Qa[:, : self.d].double()
            qh_norm = torch.linalg.vector_norm(q_hat, dim=1)
            qr_norm = torch.linalg.vector_norm(Qb.double() - q_hat, dim=1)
            bound = bf16_filter_bound(qh_norm, qr_norm, **dataclasses.asdict(consts))
            buf = torch.empty((B, L), dtype=torch.bfloat16, device=dev)
        else:
            n32p, em2tp = self.fp32_operands()
            qn = torch.linalg.vector_norm(Qb.double(), dim=1)
            bound = 2.0 * (self.d + 3) * U32 * (self.R * self.R + 2.0 * qn * self.R)  # η of space.md §5
            buf = torch.empty((B, L), dtype=torch.float32, device=dev)
        best = torch.full((B, k), -math.inf, dtype=torch.float64, device=dev)  # k best block scores so far
        found: Found = []
        for s in range(0, self.Vp, L):
            e = min(s + L, self.Vp)
            Lc = e - s
            nbc = Lc // G
            X = buf.view(-1)[: B * Lc].view(B, Lc)  # contiguous, even for a short last chunk
            with torch_threads(gemm_threads):
                if bf16:
                    torch.mm(Qa, EaT[:, s:e], out=X)
                else:
                    torch.addmm(n32p[s:e], Qb, em2tp[:, s:e], out=X)
            if exclude is not None:
                inside = (exclude >= s) & (exclude < e)
                if bool(inside.any()):
                    r_in = torch.nonzero(inside).squeeze(1)
                    X[r_in, exclude[r_in] - s] = -math.inf if bf16 else math.inf
            X3 = X.view(B, G, nbc)
            if bf16 and G > 1:
                best = chunk_bf16(X3, best, bound, s, found)
            else:
                best = _chunk_exact_order(X3, best, bound, s, found, bf16)
        thr = threshold(best[:, k - 1], bound, bf16)
        if found:
            rows = torch.cat([f[0] for f in found])
            pos = torch.cat([f[1] for f in found])
            val = torch.cat([f[2] for f in found])
            keep = (val >= thr[rows]) & (pos < self.V)
            rows, pos = rows[keep], pos[keep]
        else:
            rows = pos = torch.empty(0, dtype=torch.int64, device=dev)
        counts = torch.bincount(rows, minlength=B)
        return rows, pos, counts


def _chunk_exact_order(
    X3: torch.Tensor, best: torch.Tensor, bound: torch.Tensor, s: int, found: Found, bf16: bool
) -> torch.Tensor:
    """One chunk ``[B, G, nbc]`` whose scores order like their values (fp32, or bf16 with G = 1).

    ``best`` holds each query's k best block scores so far and ``found`` collects the candidates of
    positions ``s + …``. fp32 scores are s̃ (smaller is better): the oriented score is −s̃, and
    "−s̃ ≥ thr" is tested as "s̃ ≤ lim" with lim = −thr rounded up to fp32.
    """
    k, nbc = best.shape[1], X3.shape[2]
    if bf16:  # G == 1: every position is its own block (tiny matrices)
        bm = X3[:, 0, :].double()
        best = top_k(best, bm, k)
        thr = threshold(best[:, k - 1], bound, True)
        hr, hj = torch.nonzero(bm >= thr[:, None], as_tuple=True)
        found.append((hr, hj + s, bm[hr, hj]))
        return best
    mins = X3.amin(1) if X3.shape[1] > 1 else X3[:, 0, :]  # [B, nbc] fp32
    kth = mins.topk(k, dim=1, largest=False).values if k > 1 and mins.shape[1] >= k else None
    if kth is not None:
        cand = -kth.double()
    elif k == 1:
        cand = -mins.amin(1, keepdim=True).double()
    else:  # fewer blocks in this chunk than k
        cand = -mins.double()
    best = top_k(best, cand, k)
    thr = threshold(best[:, k - 1], bound, False)
    lim = round_up_fp32(-thr)
    hr, hj = torch.nonzero(mins <= lim[:, None], as_tuple=True)
    if hr.numel():
        vals = X3[hr, :, hj]  # [H, G]: positions hj + i·nbc of the chunk
        hit, gi = torch.nonzero(vals <= lim[hr][:, None], as_tuple=True)
        found.append((hr[hit], hj[hit] + gi * nbc + s, -vals[hit, gi].double()))
    return best
