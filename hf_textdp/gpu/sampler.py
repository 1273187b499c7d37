"""The exponential sampler's tries in one GPU kernel (tem.md, "Sampling", step 3; mechanisms/exponential.py).

Given each token's bound (the cumulative weights of its hot columns and cold blocks, their lower distance
bounds and the hot columns), one program per token runs tries t = 0, 1, … until one is accepted, exactly as
the torch loop does: try t reads blocks 0 and 1 of the :attr:`~hf_textdp.rng.Draw.SAMPLER` draw with
extra = t; u₁ picks an entry by the inverse CDF, u₂ a column of a cold block, and the column is accepted iff
log u₃ < −a·(min(d_c, γ) − min(dlo, γ)) with d_c in float64. There is no host round trip per try: the torch
loop synchronises once a round and runs a dozen kernels per round. Only the float64 logarithm and the
order of the distance's sum may differ from the CPU's by an ulp (a near-tie of the acceptance test).
"""

from __future__ import annotations

from typing import Any

import torch

from . import built, on_device, triton_ready


__all__ = ["MAX_KERNEL_TRIES", "sample_tries"]

#: tries per token in the kernel; a token still rejecting after these goes on in the torch loop
#: (expected tries are H/Σw, a few at most; the cap only bounds a kernel's running time)
MAX_KERNEL_TRIES = 4096
_kernels: dict[bool, Any] = {}


def _build() -> Any:
    from ._philox_jit import sampler_kernel

    return sampler_kernel


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
    kernel = built(_kernels, _build)
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
            W=W, NH=NH, NB=NB, d=d, BW=_pow2(W), BD=_pow2(d), BLK=64,
        )  # fmt: skip
    return out


def _pow2(n: int) -> int:
    return 1 << max(4, (n - 1).bit_length())
