"""Philox4x32-10 uniforms on the GPU: the kernel of ``kernels/philox.c`` in Triton (randomness.md §1, §4).

Token i has key (k0[i], k1[i]); block j of a draw has counter (start + j, pos[i], draw, extra[i]) and
gives uniforms 2j (words 0, 1) and 2j + 1 (words 2, 3), u = (⌊x/2¹²⌋ + ½)·2⁻⁵² from the 64 bits x = hi:lo
(Salmon et al., SC 2011). Integer arithmetic only, so the bits equal the CPU kernel's and the int64
tensor form's (tests compare them); one launch draws a whole batch.
"""

from __future__ import annotations

from typing import Any

import torch

from . import built, on_device, triton_ready


__all__ = ["philox_uniforms"]

_kernels: dict[bool, Any] = {}  # see built()
_BLOCK = 256


def _build() -> Any:
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator]
    def philox_kernel(  # type: ignore[no-untyped-def]  # pragma: no cover - GPU or interpreter
        k0_ptr, k1_ptr, pos_ptr, extra_ptr, extra_stride, draw, start, blocks, total, out_ptr,
        BLOCK: tl.constexpr,
    ):  # fmt: skip
        f = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        live = f < total
        i = f // blocks
        j = f - i * blocks
        ka = tl.load(k0_ptr + i, mask=live, other=0).to(tl.uint32)
        kb = tl.load(k1_ptr + i, mask=live, other=0).to(tl.uint32)
        # scalar arguments may arrive as Python ints (Triton specialises the value 1): arithmetic only
        c0 = (j + start).to(tl.uint32)
        c1 = tl.load(pos_ptr + i, mask=live, other=0).to(tl.uint32)
        c2 = (tl.zeros_like(j) + draw).to(tl.uint32)
        c3 = tl.load(extra_ptr + i * extra_stride, mask=live, other=0).to(tl.uint32)
        m0 = tl.full(c0.shape, 0xD2511F53, tl.uint32)
        m1 = tl.full(c0.shape, 0xCD9E8D57, tl.uint32)
        for _ in tl.static_range(10):
            n0 = tl.umulhi(m1, c2) ^ c1 ^ ka
            n2 = tl.umulhi(m0, c0) ^ c3 ^ kb
            c1 = m1 * c2
            c3 = m0 * c0
            c0 = n0
            c2 = n2
            ka = ka + 0x9E3779B9
            kb = kb + 0xBB67AE85
        x01 = (c0.to(tl.uint64) << 32) | c1.to(tl.uint64)
        x23 = (c2.to(tl.uint64) << 32) | c3.to(tl.uint64)
        u0 = ((x01 >> 12).to(tl.float64) + 0.5) * 2.220446049250313e-16  # 2⁻⁵², exact
        u1 = ((x23 >> 12).to(tl.float64) + 0.5) * 2.220446049250313e-16
        tl.store(out_ptr + 2 * f, u0, mask=live)
        tl.store(out_ptr + 2 * f + 1, u1, mask=live)

    return philox_kernel


def philox_uniforms(
    k0: torch.Tensor,
    k1: torch.Tensor,
    pos: torch.Tensor,
    extra: int | torch.Tensor,
    draw: int,
    start: int,
    blocks: int,
) -> torch.Tensor | None:
    """``[N, 2·blocks]`` float64 uniforms of :meth:`~hf_textdp.rng.Streams.uniforms`; ``None`` without Triton."""
    dev = pos.device
    if not triton_ready(dev):
        return None
    N = int(pos.numel())
    out = torch.empty((N, 2 * blocks), dtype=torch.float64, device=dev)
    total = N * blocks
    if total == 0:
        return out
    kernel = built(_kernels, _build)
    if isinstance(extra, torch.Tensor):
        ext, stride = extra.to(dev, torch.int64).contiguous(), 1
    else:
        ext, stride = torch.full((1,), int(extra), dtype=torch.int64, device=dev), 0
    k0c, k1c, pc = (t.to(torch.int64).contiguous() for t in (k0, k1, pos))
    grid = ((total + _BLOCK - 1) // _BLOCK,)
    with on_device(dev):
        kernel[grid](k0c, k1c, pc, ext, stride, int(draw), int(start), int(blocks), total, out, BLOCK=_BLOCK)
    return out
