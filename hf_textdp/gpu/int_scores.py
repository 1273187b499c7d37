"""The exponential sampler's exact integer scores on the GPU in one kernel (tem.md, "Sampling", step 1–2).

For int8 rows I_x (the tokens) and I_c (the targets), ``key = 2·I_x·I_c − N_c`` (int32, exact: the
int8 × int8 products and their int32 sums are integers, |key| < 2³¹ by the sampler's choice of scale)
and, per block of 64 consecutive targets, its largest key. One pass of tensor-core int8 products writes
both, where the torch form runs a product, an in-place update and a reduction over the [G, V′] scores.
The numbers are the torch form's, bit for bit (tests compare them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import settings
from . import built, interpreting, on_device, triton_ready


__all__ = ["IntOperands", "int_scores"]

#: targets per block of the sampler's proposal (mechanisms/exponential.py's BLOCK)
BLOCK = 64
_kernels: dict[bool, Any] = {}


def _config() -> tuple[int, int, int, int, int]:
    """(BM, BN, BK, warps, stages): BN a multiple of BLOCK; ``settings.cuda_int_tiles()`` overrides."""
    env = settings.cuda_int_tiles()
    if env:
        bm, bn, bk, w, st = (int(v) for v in env.split(",")[:5])
        return bm, bn, bk, w, st
    # the fastest of five shapes on an H200 (git show 740eb28:docs/bench/cuda_h200_sweep.json:
    # tem 7.2 M tokens/s against 4.2–6.7 M)
    return (16, 64, 16, 1, 1) if interpreting() else (256, 128, 64, 8, 3)


@dataclass(frozen=True)
class IntOperands:
    """Targets prepared for the kernel: I_cᵀ padded to ``[K, Vp]`` int8 and N padded to ``[Vp]`` int32."""

    IT: torch.Tensor
    NT: torch.Tensor
    K: int
    V: int  # the sampler's padded target count (a multiple of BLOCK)

    @classmethod
    def build(cls, IT: torch.Tensor, NT: torch.Tensor) -> IntOperands:
        _, BN, BK, _, _ = _config()
        d, V = IT.shape
        K = -(-d // BK) * BK
        Vp = -(-V // BN) * BN
        ITp = torch.zeros((K, Vp), dtype=torch.int8, device=IT.device)
        ITp[:d, :V] = IT
        NTp = torch.full((Vp,), torch.iinfo(torch.int32).max // 2, dtype=torch.int32, device=IT.device)
        NTp[:V] = NT
        return cls(ITp.contiguous(), NTp, K, V)

    def fits(self) -> bool:
        """Whether the padding suits the current tile shape (a sweep may change it between calls)."""
        _, BN, BK, _, _ = _config()
        return self.K % BK == 0 and self.IT.shape[1] % BN == 0


def _build() -> Any:
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator]
    def int_kernel(  # type: ignore[no-untyped-def]  # pragma: no cover - GPU or interpreter
        a_ptr, b_ptr, n_ptr, key_ptr, kb_ptr, G,
        Vp: tl.constexpr, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
        BLK: tl.constexpr,
    ):  # fmt: skip
        rm = tl.program_id(0).to(tl.int64) * BM + tl.arange(0, BM)
        n0 = tl.program_id(1) * BN
        rn = n0 + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        live = rm < G
        acc = tl.zeros((BM, BN), tl.int32)
        for k0 in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :], mask=live[:, None], other=0)
            b = tl.load(b_ptr + (k0 + rk)[:, None] * Vp + rn[None, :])
            acc = tl.dot(a, b, acc, out_dtype=tl.int32)
        key = 2 * acc - tl.load(n_ptr + rn)[None, :]
        tl.store(key_ptr + rm[:, None] * Vp + rn[None, :], key, mask=live[:, None])
        kb = tl.max(tl.reshape(key, (BM, BN // BLK, BLK)), axis=2)
        rb = n0 // BLK + tl.arange(0, BN // BLK)
        tl.store(kb_ptr + rm[:, None] * (Vp // BLK) + rb[None, :], kb, mask=live[:, None])

    return int_kernel


def int_scores(A: torch.Tensor, ops: IntOperands) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(key ``[G, V]``, block maxima ``[G, V/64]``), int32, for int8 rows ``A`` ``[G, d′]``; None without Triton."""
    dev = A.device
    if not triton_ready(dev):
        return None
    kernel = built(_kernels, _build)
    BM, BN, BK, warps, stages = _config()
    G, d = A.shape
    Ap = torch.zeros((G, ops.K), dtype=torch.int8, device=dev)
    Ap[:, :d] = A
    Vp = int(ops.IT.shape[1])
    key = torch.empty((G, Vp), dtype=torch.int32, device=dev)
    kb = torch.empty((G, Vp // BLOCK), dtype=torch.int32, device=dev)
    grid = ((G + BM - 1) // BM, Vp // BN)
    extra = {} if interpreting() else {"num_warps": warps, "num_stages": stages}
    with on_device(dev):
        kernel[grid](Ap, ops.IT, ops.NT, key, kb, G, Vp=Vp, K=ops.K, BM=BM, BN=BN, BK=BK, BLK=BLOCK, **extra)
    return key[:, : ops.V], kb[:, : ops.V // BLOCK]
