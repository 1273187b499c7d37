"""The exponential sampler's bound and tries in two GPU kernels (tem.md, "Sampling", steps 2–3;
mechanisms/exponential.py).

**Bound** (:func:`sampler_bounds`). From the exact integer keys and block maxima of
:mod:`~hf_textdp.gpu.int_scores`, one program per token picks the ``hot`` blocks (largest block maximum,
ties by the lower index), and computes the lower distance bounds of the hot columns and of the blocks,
their weights exp(−a·(dlo − min dlo)) and the cumulative weights, in float64, as the torch form does in a
dozen passes over ``[G, nb]`` tensors.

**Tries** (:func:`sample_tries`). Given each token's bound, one program per token runs tries t = 0, 1, …
until one is accepted, exactly as the torch loop does: try t reads blocks 0 and 1 of the
:attr:`~hf_textdp.rng.Draw.SAMPLER` draw with extra = t; u₁ picks an entry by the inverse CDF, u₂ a column
of a cold block, and the column is accepted iff log u₃ < −a·(min(d_c, γ) − min(dlo, γ)) with d_c in
float64. There is no host round trip per try, where the torch loop synchronises once a round and runs a
dozen kernels per round. Only the float64 exponential and logarithm and the order of the cumulative and
distance sums may differ from the CPU's by an ulp (a near-tie of the proposal or of the acceptance test).
"""

from __future__ import annotations

from typing import Any

import torch

from . import built, lanes, on_device, triton_ready


__all__ = ["MAX_KERNEL_TRIES", "sample_tries", "sampler_bounds"]

#: tries per token in the kernel; a token still rejecting after these goes on in the torch loop
#: (expected tries are H/Σw, a few at most; the cap only bounds a kernel's running time)
MAX_KERNEL_TRIES = 4096
_kernels: dict[bool, dict[str, Any]] = {}
#: target columns per block (mechanisms/exponential.py's BLOCK)
BLOCK = 64


def _build() -> dict[str, Any]:
    import triton
    import triton.language as tl

    from ._philox_jit import sampler_kernel

    @triton.jit  # type: ignore[untyped-decorator]
    def bounds_kernel(  # type: ignore[no-untyped-def]  # pragma: no cover - GPU or interpreter
        key_ptr, key_stride, kb_ptr, kb_stride, x_pos_ptr, n_ptr, r_ptr, rt_ptr, br_ptr, size_ptr, par_ptr,
        cum_ptr, cols_ptr, dlo_c_ptr, dlo_b_ptr, Vt,
        NB: tl.constexpr, HOT: tl.constexpr, BNB: tl.constexpr, BLK: tl.constexpr,
    ):  # fmt: skip
        g = tl.program_id(0).to(tl.int64)
        s_lo = tl.load(par_ptr)  # s·(1 − slack)
        neg_scale = -tl.load(par_ptr + 1)
        gamma = tl.load(par_ptr + 2)
        xp = tl.load(x_pos_ptr + g)
        nx = tl.load(n_ptr + xp)
        rx = tl.load(r_ptr + xp)
        rb = tl.arange(0, BNB)
        mb = rb < NB
        kb = tl.load(kb_ptr + g * kb_stride + rb, mask=mb, other=0).to(tl.int64)
        # dlo = max(s·√max(N_x − key, 0) − (r_x + r_c), 0), then min(·, γ): the torch form's _dlo
        dh = tl.sqrt(tl.maximum((nx - kb).to(tl.float64), 0.0)) * s_lo
        dlo_b = tl.minimum(tl.maximum(dh - (rx + tl.load(br_ptr + rb, mask=mb, other=0.0)), 0.0), gamma)
        dlo_b = tl.where(mb, dlo_b, float("inf"))
        tl.store(dlo_b_ptr + g * NB + rb, dlo_b, mask=mb)
        m = tl.min(dlo_b, axis=0)
        hb = tl.where(mb, tl.exp(neg_scale * (dlo_b - m)) * tl.load(size_ptr + rb, mask=mb, other=0.0), 0.0)
        # hot blocks: the largest block maximum first, ties by the lower index (key·nb − index is strict)
        u = tl.where(mb, kb * NB - rb, -(2**62))
        rc0 = tl.arange(0, BLK)
        base = tl.full([], 0.0, tl.float64)
        for h in tl.static_range(HOT):
            idx = tl.min(tl.where(u == tl.max(u, axis=0), rb, BNB), axis=0)
            u = tl.where(rb == idx, -(2**62), u)
            hb = tl.where(rb == idx, 0.0, hb)
            cols = idx.to(tl.int64) * BLK + rc0
            key = tl.load(key_ptr + g * key_stride + cols).to(tl.int64)
            dh_c = tl.sqrt(tl.maximum((nx - key).to(tl.float64), 0.0)) * s_lo
            dlo_c = tl.minimum(tl.maximum(dh_c - (rx + tl.load(rt_ptr + cols)), 0.0), gamma)
            tau = tl.where(cols < Vt, tl.exp(neg_scale * (dlo_c - m)), 0.0)
            o = g * (HOT * BLK) + h * BLK + rc0
            tl.store(cols_ptr + o, cols)
            tl.store(dlo_c_ptr + o, dlo_c)
            tl.store(cum_ptr + g * (HOT * BLK + NB) + h * BLK + rc0, base + tl.cumsum(tau, axis=0))
            base += tl.sum(tau, axis=0)
        tl.store(cum_ptr + g * (HOT * BLK + NB) + HOT * BLK + rb, base + tl.cumsum(hb, axis=0), mask=mb)

    return {"tries": sampler_kernel, "bounds": bounds_kernel}


def sampler_bounds(
    key: torch.Tensor,
    kb: torch.Tensor,
    x_pos: torch.Tensor,
    N: torch.Tensor,
    r: torch.Tensor,
    rT: torch.Tensor,
    block_r: torch.Tensor,
    block_size: torch.Tensor,
    s_lo: float,
    scale: float,
    gamma: float,
    Vt: int,
    hot: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(hot columns ``[G, hot·64]`` int64, their lower bounds ``[G, hot·64]``, the blocks' ``[G, nb]``,
    cumulative weights ``[G, hot·64 + nb]``), float64, for keys ``[G, ≥ nb·64]`` and block maxima ``[G, nb]``.

    ``N``, ``r``: the integer squared norms and residuals of the input rows; ``rT``, ``block_r``,
    ``block_size``: the targets' residuals, per block their largest and the block sizes; ``s_lo`` the scale
    times (1 − slack). The numbers of the torch form in ``ExponentialSampler._bounds``.
    """
    dev = key.device
    G, nb = kb.shape
    NH = hot * BLOCK
    cols = torch.empty((G, NH), dtype=torch.int64, device=dev)
    dlo_c = torch.empty((G, NH), dtype=torch.float64, device=dev)
    dlo_b = torch.empty((G, nb), dtype=torch.float64, device=dev)
    cum = torch.empty((G, NH + nb), dtype=torch.float64, device=dev)
    if G == 0:
        return cols, dlo_c, dlo_b, cum
    par = torch.tensor([s_lo, scale, gamma], dtype=torch.float64, device=dev)
    kernel = built(_kernels, _build)["bounds"]
    with on_device(dev):
        kernel[(G,)](
            key, key.stride(0), kb, kb.stride(0), x_pos.to(dev, torch.int64).contiguous(), N, r, rT, block_r,
            block_size, par, cum, cols, dlo_c, dlo_b, int(Vt), NB=nb, HOT=hot, BNB=lanes(nb), BLK=BLOCK,
        )  # fmt: skip
    return cols, dlo_c, dlo_b, cum


def sample_tries(
    cum: torch.Tensor,
    cols: torch.Tensor,
    dlo_c: torch.Tensor,
    dlo_b: torch.Tensor,
    block_size: torch.Tensor,
    E: torch.Tensor,
    x_pos: torch.Tensor,
    targets: torch.Tensor,
    k0: torch.Tensor,
    k1: torch.Tensor,
    position: torch.Tensor,
    scale: float,
    gamma: float,
    draw: int,
    max_tries: int = MAX_KERNEL_TRIES,
) -> torch.Tensor | None:
    """Accepted target indices ``[G]`` int64 (−1 for a token still rejecting after ``max_tries`` tries).

    ``cum`` ``[G, W]`` float64 cumulative weights (hot columns first); ``cols``, ``dlo_c`` ``[G, NH]`` the hot
    columns and their lower bounds; ``dlo_b`` ``[G, nb]`` the blocks'; ``block_size`` ``[nb]``; ``E`` ``[V, d]``
    fp32; ``x_pos`` the tokens' rows; ``targets`` the target rows. ``None`` without Triton.
    """
    dev = cum.device
    if not triton_ready(dev):
        return None
    G, W = cum.shape
    out = torch.empty(G, dtype=torch.int64, device=dev)
    if G == 0:
        return out
    kernel = built(_kernels, _build)["tries"]
    NH, NB = int(cols.shape[1]), int(dlo_b.shape[1])
    d = int(E.shape[1])
    tries = torch.empty(G, dtype=torch.int64, device=dev)
    # scale and γ as float64 (a Python float would arrive as fp32)
    par = torch.tensor([scale, gamma], dtype=torch.float64, device=dev)
    args = [
        t.contiguous()
        for t in (cum, cols.to(torch.int64), dlo_c, dlo_b, block_size, E, x_pos.to(torch.int64), targets)
    ]
    keys = [t.to(dev, torch.int64).contiguous() for t in (k0, k1, position)]
    with on_device(dev):
        kernel[(G,)](
            *args, *keys, par, out, tries, int(targets.numel()), int(draw), int(max_tries),
            W=W, NH=NH, NB=NB, d=d, BW=lanes(W), BD=lanes(d), BLK=64,
        )  # fmt: skip
    return out
