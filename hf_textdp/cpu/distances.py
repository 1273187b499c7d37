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

from ..utils.native import check_index_range, load_kernel, native_enabled


__all__ = ["MAX_TOP", "pair_sqdist", "top_of_pairs"]

#: the largest k that :func:`top_of_pairs` verifies
MAX_TOP = 16

#: pairs per thread below which one thread computes the distances
_PAIRS_PER_THREAD = 256


@functools.cache
def _lib() -> Any:
    lib = load_kernel("sqdist", openmp=True)
    if lib is not None:
        p, i = ctypes.c_void_p, ctypes.c_int64
        lib.pair_sqdist.argtypes = [p, p, p, p, i, i, i, p]
        lib.pair_sqdist.restype = None
        lib.pair_sqdist_team.argtypes = [p, p, p, p, i, i, i, p]
        lib.pair_sqdist_team.restype = None
        lib.verify_top.argtypes = [p, p, p, i, i, i, ctypes.c_double, p, p, p, p, p]
        lib.verify_top.restype = None
    return lib


def pair_sqdist(Q: torch.Tensor, E: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor | None:
    """``[n]`` float64 D of query ``rows[i]`` of ``Q`` and row ``pos[i]`` of ``E`` (both fp32 on the CPU), or
    ``None`` where the kernel does not run (no compiler, native switch off, other devices)."""
    if Q.device.type != "cpu" or E.device.type != "cpu" or not native_enabled() or (lib := _lib()) is None:
        return None
    Qc, Ec = Q.to(torch.float32).contiguous(), E.to(torch.float32).contiguous()
    r, p = rows.to(torch.int64).contiguous(), pos.to(torch.int64).contiguous()
    out = torch.empty(r.numel(), dtype=torch.float64)
    check_index_range(r, Qc.shape[0], "rows")
    check_index_range(p, Ec.shape[0], "pos")
    if r.numel():
        threads = min(torch.get_num_threads(), r.numel() // _PAIRS_PER_THREAD)
        lib.pair_sqdist_team(
            Qc.data_ptr(), Ec.data_ptr(), r.data_ptr(), p.data_ptr(), Ec.shape[1], r.numel(), threads, out.data_ptr()
        )
    return out


def top_of_pairs(
    Q: torch.Tensor, E: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor, B: int, k: int, coef: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """The verification of a search for the k ≤ :data:`MAX_TOP` nearest (docs/mechanisms/space.md §5.4) among
    candidate pairs (``rows``, ``pos``): ``(best, count, tie)``, or ``None`` where the kernel does not run.

    ``best`` ``[B, k]``: each query's first k candidates in (D, position) order, D of :func:`pair_sqdist`
    (−1 where it has fewer); ``count`` ``[B]``: its candidates; ``tie`` ``[B]``: true where one of those k
    certified intervals [D − cD, D + cD] (c = ``coef``) is not strictly below the next candidate's, so their
    exact order is open.
    """
    if k > MAX_TOP:
        return None
    D = pair_sqdist(Q, E, rows, pos)
    if D is None:
        return None
    r, p = rows.to(torch.int64).contiguous(), pos.to(torch.int64).contiguous()
    check_index_range(r, B, "rows")
    best, count = torch.empty((B, k), dtype=torch.int64), torch.empty(B, dtype=torch.int64)
    tie = torch.empty(B, dtype=torch.bool)
    top_d, top_p = torch.empty(B * (k + 1), dtype=torch.float64), torch.empty(B * (k + 1), dtype=torch.int64)
    _lib().verify_top(
        D.data_ptr(), r.data_ptr(), p.data_ptr(), r.numel(), B, k, coef, best.data_ptr(), count.data_ptr(),
        tie.data_ptr(), top_d.data_ptr(), top_p.data_ptr(),
    )  # fmt: skip
    return best, count, tie
