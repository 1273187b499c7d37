"""Float64 squared distances of (query, row) pairs by a compiled kernel (``kernels/sqdist.c``).

The verification of the exact search (docs/mechanisms/space.md §5.4) needs D = Σ_j (q_j − e_cj)² in float64
for a few candidates per query; in tensor operations that is a gather, a subtraction, a square and a sum
over blocks of pairs. The kernel does the same arithmetic (a difference, a square and a sum of d terms, each
rounded to nearest), so §5.4's bound holds for its result as for the torch form's.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

from ..utils.native import load_kernel, native_enabled


__all__ = ["pair_sqdist"]


@functools.cache
def _lib() -> Any:
    lib = load_kernel("sqdist")
    if lib is not None:
        p, i = ctypes.c_void_p, ctypes.c_int64
        lib.pair_sqdist.argtypes = [p, p, p, p, i, i, i, p]
        lib.pair_sqdist.restype = None
    return lib


def pair_sqdist(Q: torch.Tensor, E: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor | None:
    """``[n]`` float64 D of query ``rows[i]`` of ``Q`` and row ``pos[i]`` of ``E`` (both fp32 on the CPU), or
    ``None`` where the kernel does not run (no compiler, ``HF_TEXTDP_NATIVE=0``, other devices)."""
    if Q.device.type != "cpu" or E.device.type != "cpu" or not native_enabled() or (lib := _lib()) is None:
        return None
    Qc, Ec = Q.to(torch.float32).contiguous(), E.to(torch.float32).contiguous()
    r, p = rows.to(torch.int64).contiguous(), pos.to(torch.int64).contiguous()
    out = torch.empty(r.numel(), dtype=torch.float64)
    if r.numel():
        lib.pair_sqdist(
            Qc.data_ptr(), Ec.data_ptr(), r.data_ptr(), p.data_ptr(), Ec.shape[1], 0, r.numel(), out.data_ptr()
        )
    return out
