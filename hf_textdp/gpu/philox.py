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
    from ._philox_jit import philox_kernel

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
