"""Metric-Laplace noise added to a batch of vectors in one GPU kernel (madlib.md, "Sampling"; randomness.md §1).

For token i with key (k0, k1), position p and radius r_i, the kernel computes exactly what the torch form
``fl32(x + r·G/‖G‖)`` computes, with G the token's standard normals of ``Streams.normals``: Philox block j
of the draw (counter (j, p, draw, 0)) gives the uniforms (u₂ⱼ, u₂ⱼ₊₁) and, by Box–Muller,
G₂ⱼ = √(−2 ln u₂ⱼ)·cos 2πu₂ⱼ₊₁ and G₂ⱼ₊₁ = √(−2 ln u₂ⱼ)·sin 2πu₂ⱼ₊₁, in float64. The noise never leaves
the chip: one launch reads x and writes the fp32 sums, where the torch form runs a dozen passes over
float64 ``[n, d]`` tensors. Only the float64 logarithm, cosine, sine and the order of the sum ‖G‖² may
differ from the CPU's by an ulp, so an fp32 output differs only where such an ulp crosses a rounding
boundary (the rate is measured by ``scripts/cuda_checks.py``).
"""

from __future__ import annotations

from typing import Any

import torch

from . import built, lanes, on_device, triton_ready


__all__ = ["metric_laplace_shift"]

_kernels: dict[bool, Any] = {}


def _build() -> Any:
    from ._philox_jit import shift_kernel

    return shift_kernel


def metric_laplace_shift(
    x: torch.Tensor, k0: torch.Tensor, k1: torch.Tensor, position: torch.Tensor, radius: torch.Tensor, draw: int
) -> torch.Tensor | None:
    """``[n, d]`` fp32: fl32(x + r·G/‖G‖) per token, G its normals of ``draw``; ``None`` without Triton.

    ``x`` ``[n, d]`` fp32 or float64; ``k0``, ``k1``, ``position`` ``[n]`` int64 (the tokens' streams);
    ``radius`` ``[n]`` float64 (the Gamma radii, already scaled).
    """
    dev = x.device
    if not triton_ready(dev):
        return None
    n, d = x.shape
    out = torch.empty((n, d), dtype=torch.float32, device=dev)
    if n == 0 or d == 0:
        return out
    kernel = built(_kernels, _build)
    blocks = (d + 1) // 2
    args = [t.to(dev).contiguous() for t in (x, k0.to(torch.int64), k1.to(torch.int64), position.to(torch.int64))]
    r = radius.to(dev, torch.float64).contiguous()
    with on_device(dev):
        kernel[(n,)](*args, r, out, d, blocks, int(draw), BLK=lanes(blocks))
    return out
