"""The fused fp32 filter of the exact search on CPUs with AVX2 and FMA (``kernels/avx2_filter.c``).

Where there is no native bf16 product (:mod:`hf_textdp.cpu.features`), :class:`~hf_textdp.search.ExactIndex`'s
fp32 filter forms a ``[queries, positions]`` tile of scores with torch's ``addmm`` and reads it again in several
passes. This kernel computes the scores in registers and keeps each query's running candidate list while they
are there (as :func:`hf_textdp.cpu.bf16_filter.fused_candidates` does for k ≤ its ``LIST_K``), so no score is
written back; float64 verification then decides, as for every filter, so the answer is the same exact one.

Scores (docs/mechanisms/space.md §5.3). With ν̃_c = fp32(ν64_c), ν64_c the float64 ‖e_c‖²/2, the kernel's score
is Ã_c = −ν̃_c + Σ_j q_j e_cj by one FMA chain (each product exact inside the FMA, one rounding per step): the
setting of :func:`~hf_textdp.cpu.bf16_filter.fused_filter_bound` with q̂ = q and ê_c = e_c (no input rounding:
ρ = 0, ‖r_q‖ = 0), whose β_abs also covers gradual underflow or a flushed denormal.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
from typing import Any

import torch

from ..utils.native import load_kernel, native_enabled, run_team
from .bf16_filter import fused_filter_bound
from .features import has_avx2_fma
from .lists import RunningLists, padded_exclude


__all__ = ["LIST_K", "NB", "Fp32Rows", "avx2_candidates", "avx2_filter_available", "block_scores"]

#: positions per block of the kernel (two vectors of 8 fp32 scores)
NB = 16
#: the largest k whose candidates the kernel lists (each list holds up to 4·NB·(k + 2) positions)
LIST_K = 8
#: bytes of packed queries per pass of the kernel: they stay in a core's L2 cache while all rows go by
_PASS_BYTES = 384 * 1024
#: the largest k whose candidates get the lists' second cut (kernels/kernel_common.h, list_candidates)
_REFINE = 16
#: tiles per thread below which one call on the calling thread is faster than splitting
_MIN_TILES_PER_THREAD = 4


@functools.cache
def _lib() -> Any:
    """The compiled kernel with AVX2 and FMA (typed for ctypes), else ``None``."""
    lib = load_kernel("avx2_filter", openmp=True)
    if lib is None or lib.avx2_filter_tile() <= 0:
        return None
    p, i = ctypes.c_void_p, ctypes.c_int64
    # q, e, init, exclude, d, blocks, t0, t1, pass, threads, beta, k, cap, top, lim, cnt, pos, score
    lib.avx2_lists.argtypes = [p, p, p, p, i, i, i, i, i, i, p, i, i, p, p, p, p, p]
    lib.avx2_lists.restype = None
    lib.list_candidates.argtypes = [i, i, i, i, p, p, p, p, p, p, p]
    lib.list_candidates.restype = i
    lib.avx2_block_scores.argtypes = [p, p, p, p, p, i, i, p]
    lib.avx2_block_scores.restype = None
    return lib


def avx2_filter_available() -> bool:
    """Whether the kernel runs here: AVX2 and FMA in the CPU's flags (:func:`~hf_textdp.cpu.features.has_avx2_fma`),
    a C compiler that builds it, and the native switch on (:mod:`hf_textdp.settings`)."""
    return native_enabled() and has_avx2_fma() and _lib() is not None


@dataclasses.dataclass(frozen=True)
class Fp32Rows:
    """A matrix packed for the kernel: ``e`` ``[blocks, d, NB]`` fp32, ``init`` the ``−ν̃_c`` (−∞ for padding rows,
    never a candidate), and the constants of the bound."""

    e: torch.Tensor
    init: torch.Tensor
    V: int
    d: int
    e_norm: float  # max_c ‖e_c‖, rounded up
    nu_max: float  # max_c ν64_c

    @property
    def blocks(self) -> int:
        return self.e.shape[0]

    @classmethod
    def build(cls, E: torch.Tensor, sq64: torch.Tensor) -> Fp32Rows:
        """Pack the fp32 rows ``E`` ``[V, d]`` on the CPU; ``sq64`` are their float64 squared norms."""
        V, d = E.shape
        blocks = -(-V // NB)
        rows = torch.zeros((blocks * NB, d), dtype=torch.float32)
        rows[:V] = E
        e = rows.view(blocks, NB, d).transpose(1, 2).contiguous()
        nu64 = sq64.double() / 2.0
        init = torch.full((blocks * NB,), -math.inf, dtype=torch.float32)
        init[:V] = -nu64.float()
        return cls(
            e=e, init=init, V=V, d=d, e_norm=math.sqrt(float(sq64.max())) * (1 + 2.0**-40), nu_max=float(nu64.max())
        )


def _tiles(Q: torch.Tensor) -> torch.Tensor:
    """The queries ``Q`` ``[B, d]`` fp32 packed in tiles ``[tiles, d, tile]`` (padding queries zero)."""
    B, d = Q.shape
    tile = int(_lib().avx2_filter_tile())
    tiles = -(-B // tile)
    qa = torch.zeros((tiles * tile, d), dtype=torch.float32)
    qa[:B] = Q
    return qa.view(tiles, tile, d).transpose(1, 2).contiguous()


def query_bounds(rows: Fp32Rows, Q: torch.Tensor) -> torch.Tensor:
    """β per query: :func:`~hf_textdp.cpu.bf16_filter.fused_filter_bound` with no input rounding, from ‖q‖ in
    float64 (its own rounding is covered by the bound's factor 1 + 2⁻²⁰)."""
    qn = torch.linalg.vector_norm(Q.double(), dim=1)
    return fused_filter_bound(qn, torch.zeros_like(qn), rho=0.0, e_hat=rows.e_norm, nu_max=rows.nu_max, d=rows.d)


def avx2_candidates(
    rows: Fp32Rows, Q: torch.Tensor, k: int, threads: int = 1, exclude: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(query rows, positions, queries whose list overflowed): candidates that provably hold the exact top k of
    every other query (among positions other than ``exclude[i]``, where given; −1: none), k ≤ :data:`LIST_K`.

    The argument of :func:`hf_textdp.cpu.bf16_filter.fused_candidates`: the k-th largest block maximum M is the
    Ã of a real position and k positions have Ã ≥ M, so a top-k position has Ã_c ≥ M − 2β; a query's running
    k-th largest maximum only grows towards the final one, so each such position was listed when its block
    went by. A query whose list outgrows its room (a cluster of near-duplicate rows ahead of its best rows) is
    returned in the third tensor with no candidates: the caller filters it another way.
    """
    lib = _lib()
    B = Q.shape[0]
    Qc = Q.to(torch.float32).contiguous()
    q_tiles = _tiles(Qc)
    tiles, tile = q_tiles.shape[0], q_tiles.shape[2]
    n = tiles * tile
    lists = RunningLists.empty(query_bounds(rows, Qc), n, k, 4 * NB * (k + 2))
    ex = padded_exclude(exclude, n)
    ex_ptr = None if ex is None else ex.data_ptr()
    per_pass = max(1, _PASS_BYTES // (rows.d * tile * 4))
    parts = max(1, min(threads, tiles // _MIN_TILES_PER_THREAD))

    def run(t0: int, t1: int, team: int) -> None:
        lib.avx2_lists(
            q_tiles.data_ptr(), rows.e.data_ptr(), rows.init.data_ptr(), ex_ptr, rows.d, rows.blocks, t0, t1,
            per_pass, team, *lists.args(),
        )  # fmt: skip

    run_team(run, tiles, parts, openmp=bool(lib.avx2_filter_openmp()))
    return lists.candidates(lib, B, _REFINE)


def block_scores(rows: Fp32Rows, Q: torch.Tensor, qi: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """``[n, NB]`` fp32: the kernel's Ã of the NB positions of block ``blocks[i]`` for query ``Q[qi[i]]``."""
    n = qi.numel()
    out = torch.empty((n, NB), dtype=torch.float32)
    if n:
        Qc, r, b = (
            Q.to(torch.float32).contiguous(),
            qi.to(torch.int64).contiguous(),
            blocks.to(torch.int64).contiguous(),
        )
        _lib().avx2_block_scores(
            Qc.data_ptr(), rows.e.data_ptr(), rows.init.data_ptr(), r.data_ptr(), b.data_ptr(), rows.d, n,
            out.data_ptr(),
        )  # fmt: skip
    return out
