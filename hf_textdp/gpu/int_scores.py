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

from . import built, interpreting, on_device, triton_ready


__all__ = ["IntOperands", "hot_scores", "int_scores"]

#: targets per block of the sampler's proposal (mechanisms/exponential.py's BLOCK)
BLOCK = 64
_kernels: dict[bool, dict[str, Any]] = {}


def _config() -> tuple[int, int, int, int, int]:
    """(BM, BN, BK, warps, stages): BN a multiple of BLOCK."""
    return (16, 64, 16, 1, 1) if interpreting() else (128, 128, 64, 8, 3)


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


def _build() -> Any:
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator]
    def int_kernel(  # type: ignore[no-untyped-def]  # pragma: no cover - GPU or interpreter
        a_ptr, b_ptr, n_ptr, key_ptr, kb_ptr, G,
        Vp: tl.constexpr, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
        BLK: tl.constexpr, KEYS: tl.constexpr,
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
        if KEYS:
            tl.store(key_ptr + rm[:, None] * Vp + rn[None, :], key, mask=live[:, None])
        kb = tl.max(tl.reshape(key, (BM, BN // BLK, BLK)), axis=2)
        rb = n0 // BLK + tl.arange(0, BN // BLK)
        tl.store(kb_ptr + rm[:, None] * (Vp // BLK) + rb[None, :], kb, mask=live[:, None])

    @triton.jit  # type: ignore[untyped-decorator]
    def hot_kernel(  # type: ignore[no-untyped-def]  # pragma: no cover - GPU or interpreter
        a_ptr, b_ptr, n_ptr, kb_ptr, hot_ptr, key_ptr, nb, kb_stride,
        Vp: tl.constexpr, K: tl.constexpr, HOT: tl.constexpr, BNB: tl.constexpr, BLK: tl.constexpr,
        KC: tl.constexpr,
    ):  # fmt: skip
        g = tl.program_id(0).to(tl.int64)
        rb = tl.arange(0, BNB)
        kb = tl.load(kb_ptr + g * kb_stride + rb, mask=rb < nb, other=0).to(tl.int64)
        # the blocks with the largest key first, ties by the lower index: the key·nb − index order is strict
        u = tl.where(rb < nb, kb * nb - rb, -(2**62))
        rc0 = tl.arange(0, BLK)
        for h in tl.static_range(HOT):
            idx = tl.min(tl.where(u == tl.max(u, axis=0), rb, BNB), axis=0)
            u = tl.where(rb == idx, -(2**62), u)
            tl.store(hot_ptr + g * HOT + h, idx.to(tl.int64))
            rc = idx * BLK + rc0
            acc = tl.zeros((BLK,), tl.int32)
            for k0 in range(0, K, KC):
                rk = k0 + tl.arange(0, KC)
                a = tl.load(a_ptr + g * K + rk).to(tl.int32)
                b = tl.load(b_ptr + rk[:, None] * Vp + rc[None, :]).to(tl.int32)
                acc += tl.sum(a[:, None] * b, axis=0)
            tl.store(key_ptr + g * (HOT * BLK) + h * BLK + rc0, 2 * acc - tl.load(n_ptr + rc))

    return {"int": int_kernel, "hot": hot_kernel}


def _padded(A: torch.Tensor, ops: IntOperands) -> torch.Tensor:
    Ap = torch.zeros((A.shape[0], ops.K), dtype=torch.int8, device=A.device)
    Ap[:, : A.shape[1]] = A
    return Ap


def int_scores(
    A: torch.Tensor, ops: IntOperands, *, keys: bool = True
) -> tuple[torch.Tensor | None, torch.Tensor] | None:
    """(key ``[G, V]``, block maxima ``[G, V/64]``), int32, for int8 rows ``A`` ``[G, d′]``; None without Triton.

    ``keys=False`` writes the block maxima only (the key is ``None``): :func:`hot_scores` recomputes the few
    columns the sampler reads, where the full ``[G, V]`` matrix would cost 4 bytes a score in memory traffic.
    """
    dev = A.device
    if not triton_ready(dev):
        return None
    kernel = built(_kernels, _build)["int"]
    BM, BN, BK, warps, stages = _config()
    G = A.shape[0]
    Ap = _padded(A, ops)
    Vp = int(ops.IT.shape[1])
    key = torch.empty((G, Vp) if keys else (1, 1), dtype=torch.int32, device=dev)
    kb = torch.empty((G, Vp // BLOCK), dtype=torch.int32, device=dev)
    grid = ((G + BM - 1) // BM, Vp // BN)
    extra = {} if interpreting() else {"num_warps": warps, "num_stages": stages}
    with on_device(dev):
        kernel[grid](
            Ap, ops.IT, ops.NT, key, kb, G, Vp=Vp, K=ops.K, BM=BM, BN=BN, BK=BK, BLK=BLOCK, KEYS=keys, **extra
        )  # fmt: skip
    return (key[:, : ops.V] if keys else None), kb[:, : ops.V // BLOCK]


def hot_scores(A: torch.Tensor, ops: IntOperands, kb: torch.Tensor, hot: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``hot`` blocks with the largest block maximum per row (ties: lower index first), ``[G, hot]`` int64,
    and their columns' keys ``[G, hot·64]`` int32: torch's ``topk`` of key·nb − index and a gather of the key."""
    dev = A.device
    kernel = built(_kernels, _build)["hot"]
    G, nb = kb.shape
    Ap = _padded(A, ops)
    hot_idx = torch.empty((G, hot), dtype=torch.int64, device=dev)
    key = torch.empty((G, hot * BLOCK), dtype=torch.int32, device=dev)
    if G == 0:
        return hot_idx, key
    BNB = 1 << max(4, (nb - 1).bit_length())
    with on_device(dev):
        kernel[(G,)](
            Ap, ops.IT, ops.NT, kb, hot_idx, key, nb, kb.stride(0), Vp=int(ops.IT.shape[1]), K=ops.K, HOT=hot,
            BNB=BNB, BLK=BLOCK, KC=16,
        )  # fmt: skip
    return hot_idx, key
