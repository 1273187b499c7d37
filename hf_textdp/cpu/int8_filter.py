"""The int8 filter of the exact search (``kernels/int8_filter.c`` with AVX-512 VNNI, ``kernels/int8_filter_avx2.c``
with AVX2; docs/mechanisms/space.md §5.3, "The int8 filter").

The public rows are quantised once per row (e_c ≈ s_c·I_c, I_c int8) and each query on the fly (q ≈ s_q·I_q); the
kernel scores every position by an exact integer dot product and keeps, per query, every position that the error
bound of :func:`int8_filter_bound` cannot exclude from the top k. Float64 verification then decides, as for every
filter, so the answer is the same exact one (float64 brute force's, ties to the lowest position).

Which kernel runs follows the CPU's flags (:mod:`hf_textdp.cpu.features`): VNNI's ``VPDPBUSD`` where the int8
product is native, else AVX2's ``VPMADDUBSW``/``VPMADDWD`` (queries within ±63, so that its int16 pair sums never
saturate); never an emulated product.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
from typing import Any

import torch

from ..utils.native import load_kernel, native_enabled, run_team
from ..utils.rounding import round_up_fp32
from .features import int8_kernel_kind
from .lists import RunningLists, padded_exclude


__all__ = ["LIST_K", "NB", "Int8Rows", "block_bounds", "int8_candidates", "int8_filter_available", "int8_filter_bound"]

#: positions per block of the kernel
NB = 64
#: the largest k whose candidates the kernel lists (each list holds NB·(k + 3) positions)
LIST_K = 4
U32 = 2.0**-24
U64 = 2.0**-53
#: bytes of packed queries per pass of the kernel: they stay in a core's L2 cache while all rows go by
_PASS_BYTES = 384 * 1024
#: tiles per thread below which one call on the calling thread is faster than splitting
_MIN_TILES_PER_THREAD = 4
_SOURCES = {"vnni": "int8_filter", "avx2": "int8_filter_avx2"}


@functools.cache
def _load(kind: str) -> Any:
    """The compiled ``kind`` kernel (typed for ctypes), or ``None`` where it does not build for this CPU."""
    lib = load_kernel(_SOURCES[kind], openmp=True)
    if lib is None or lib.int8_filter_tile() <= 0:
        return None
    p, i = ctypes.c_void_p, ctypes.c_int64
    # q, qs, e, init, sc, nnu, rho, nrm, exclude, K4, blocks, t0, t1, pass, threads, eta, k, cap, top … score
    lib.int8_lists.argtypes = [p, p, p, p, p, p, p, p, p, i, i, i, i, i, i, p, i, i, p, p, p, p, p]
    lib.int8_lists.restype = None
    lib.prepare_int8_queries.argtypes = [p, i, i, i, i, p, p, p, p]
    lib.prepare_int8_queries.restype = None
    lib.list_candidates.argtypes = [i, i, i, i, p, p, p, p, p, p, p]
    lib.list_candidates.restype = i
    lib.int8_block_bounds.argtypes = [p, p, p, p, p, p, p, p, p, p, i, i, p, p]
    lib.int8_block_bounds.restype = None
    return lib


def kernel_kind() -> str | None:
    """The kernel for this CPU's flags: ``"vnni"`` where the int8 product is native (AVX-512 VNNI) and that kernel
    builds, else ``"avx2"`` with AVX2 and FMA, else ``None`` (also with the native switch off)."""
    return int8_kernel_kind(_load) if native_enabled() else None


def int8_filter_available() -> bool:
    """Whether an int8 filter kernel runs here (:func:`kernel_kind`)."""
    return kernel_kind() is not None


def _slack(d: int) -> float:
    """A factor above the relative error of a float64 norm of d terms (a sum of d squares, then a square root): each
    step rounds once, so (d + 2)·u₆₄ bounds it; doubled, plus 2⁻⁴⁰."""
    return 1.0 + 2.0 * (d + 2) * U64 + 2.0**-40


@dataclasses.dataclass(frozen=True)
class Int8Rows:
    """Rows quantised per row and packed for the ``kind`` kernel, with the constants of :func:`int8_filter_bound`.

    ``e`` ``[blocks, K4, NB]`` words of four int8 coordinates I_c; per position (``[blocks·NB]``): ``init`` the
    accumulators' start −offset·Σ_j I_c,j, ``sc`` the scale s_c (fp32), ``nnu`` −ν̃_c = −fp32(‖e_c‖²/2) (−∞ for
    padding rows), ``rho`` ≥ ‖e_c − s_c·I_c‖ and ``nrm`` ≥ ‖e_c‖ (fp32, rounded up).
    """

    e: torch.Tensor
    init: torch.Tensor
    sc: torch.Tensor
    nnu: torch.Tensor
    rho: torch.Tensor
    nrm: torch.Tensor
    V: int
    d: int
    kind: str
    e_hat: float  # max_c ‖s_c·I_c‖, rounded up
    rho_max: float
    r_max: float  # max_c ‖e_c‖, rounded up
    nu_max: float  # max_c ν64_c

    @property
    def K4(self) -> int:
        return self.e.shape[1]

    @property
    def blocks(self) -> int:
        return self.e.shape[0]

    @classmethod
    def build(cls, E: torch.Tensor, sq64: torch.Tensor, kind: str) -> Int8Rows:
        """Quantise and pack the fp32 rows ``E`` ``[V, d]`` (CPU; ``sq64`` their float64 squared norms): s_c =
        fp32(max_j |e_cj| / 127), I_c = round(e_c / s_c) within ±127; residual norms in float64 (every term exact:
        s_c·I_cj has at most 31 significant bits and lies within 2⁸ of e_cj), raised by :func:`_slack` and rounded
        up to fp32."""
        V, d = E.shape
        K4, blocks = -(-d // 4), -(-V // NB)
        Vp = blocks * NB
        E64 = E.double()
        s = (E64.abs().amax(1) / 127.0).float()
        s64 = s.double()
        safe = torch.where(s64 > 0, s64, 1.0)
        ints = torch.where(s64[:, None] > 0, torch.round(E64 / safe[:, None]), 0.0).clamp_(-127, 127)
        e_hat = ints * s64[:, None]  # exact
        slack = _slack(d)
        rho = torch.linalg.vector_norm(E64 - e_hat, dim=1) * slack
        nrm = sq64.double().sqrt() * slack
        cols = torch.zeros((Vp, 4 * K4), dtype=torch.int8)
        cols[:V, :d] = ints.to(torch.int8)
        e = cols.view(torch.int32).view(blocks, NB, K4).transpose(1, 2).contiguous()
        offset = int(_load(kind).int8_filter_offset())
        init = torch.zeros(Vp, dtype=torch.int32)
        init[:V] = (-offset * ints.sum(1)).to(torch.int32)
        nu64 = sq64.double() / 2.0

        def padded(x: torch.Tensor, fill: float) -> torch.Tensor:
            out = torch.full((Vp,), fill, dtype=torch.float32)
            out[:V] = x
            return out

        return cls(
            e=e,
            init=init,
            sc=padded(s, 0.0),
            nnu=padded(-nu64.float(), -math.inf),
            rho=padded(round_up_fp32(rho), 0.0),
            nrm=padded(round_up_fp32(nrm), 0.0),
            V=V,
            d=d,
            kind=kind,
            e_hat=float(torch.linalg.vector_norm(e_hat, dim=1).max()) * slack,
            rho_max=float(rho.max()),
            r_max=float(nrm.max()),
            nu_max=float(nu64.max()),
        )

    def arrays(self) -> list[int]:
        """The kernel's row arguments e … nrm."""
        return [x.data_ptr() for x in (self.e, self.init, self.sc, self.nnu, self.rho, self.nrm)]


def int8_filter_bound(a: torch.Tensor, b: torch.Tensor, rows: Int8Rows) -> torch.Tensor:
    """Per-query η (float64) with t_c ∈ [Lo_c − η, Up_c + η] for every position c (kernels/int8_filter_body.h).

    **Setting.** t_c = q·e_c − ν_c (ν_c = ‖e_c‖²/2: the nearest positions have the largest t). Write q = q̂ + r_q,
    e_c = ê_c + r_c exactly, with q̂ = s_q·I_q and ê_c = s_c·I_c; a ≥ ‖q̂‖, b ≥ ‖r_q‖, ρ_c ≥ ‖r_c‖, n_c ≥ ‖e_c‖ are
    the kernel's fp32 constants. The kernel forms the exact integer S_c = I_q·I_c (so P_c = s_q·s_c·S_c = q̂·ê_c
    exactly) and, in fp32 with one rounding per step, y = S_c·s_c, Up_c = fma(y, s_q, fma(a, ρ_c, fma(b, n_c, −ν̃_c)))
    and Lo_c the same with −a, −b (ν̃_c = fp32(ν64_c)).

    **Claim.** |t_c − (P_c − ν_c)| ≤ β_c := a·ρ_c + b·n_c, since q·e_c − q̂·ê_c = q̂·r_c + r_q·e_c exactly
    (Cauchy–Schwarz on each term); and Up_c ≥ P_c − ν_c + β_c − η, Lo_c ≤ P_c − ν_c − β_c + η with
    η = (5u·Σ + β_ν + β_abs)(1 + 2⁻²⁰), u = 2⁻²⁴, Σ = a·Ê + a·ρ_max + b·R + ν_max (Ê = max‖ê_c‖, R = max n_c):
    y·s_q errs from P_c by u|P_c| ≤ u·a·Ê; the three fma steps each round once, on magnitudes at most
    b·R + ν_max, a·ρ_max + b·R + ν_max and Σ (Higham, *Accuracy and Stability of Numerical Algorithms*, §2.2);
    β_ν = ((d + 1)u₆₄ + u)·ν_max·1.01 bounds |ν_c − ν̃_c| (ν64_c sums d exact squares in float64, ν̃_c rounds it
    to fp32); β_abs = 2⁻¹⁰⁰(1 + a + b + Ê + R) covers gradual underflow (each step's absolute error below 2⁻¹⁴⁹).
    Hence t_c ∈ [Lo_c − η, Up_c + η].
    """
    u = U32
    sigma = a * rows.e_hat + a * rows.rho_max + b * rows.r_max + rows.nu_max
    beta_nu = ((rows.d + 1) * U64 + u) * rows.nu_max * 1.01
    beta_abs = 2.0**-100 * (1.0 + a + b + rows.e_hat + rows.r_max)
    eta: torch.Tensor = (5.0 * u * sigma + beta_nu + beta_abs) * (1.0 + 2.0**-20)
    return eta


@dataclasses.dataclass
class _Queries:
    """Queries prepared for the kernel: words by row and by tile, (s_q, a, b) as fp32, η per query."""

    rows: torch.Tensor
    tiles: torch.Tensor
    qs: torch.Tensor
    eta: torch.Tensor


def _prepare(rows: Int8Rows, Q: torch.Tensor) -> _Queries:
    lib = _load(rows.kind)
    Qc = Q.to(torch.float32).contiguous()
    B, d = Qc.shape
    tile = int(lib.int8_filter_tile())
    tiles = -(-B // tile)
    q_rows = torch.empty((B, rows.K4), dtype=torch.int32)
    q_tiles = torch.empty((tiles, rows.K4, tile), dtype=torch.int32)
    qs = torch.zeros((tiles * tile, 3), dtype=torch.float32)
    ab = torch.empty((B, 2), dtype=torch.float64)
    lib.prepare_int8_queries(  # one thread: 1.2 ms for 4,096 queries of d = 384, less than a team's start-up
        Qc.data_ptr(), B, d, rows.K4, 1, q_rows.data_ptr(), q_tiles.data_ptr(), qs.data_ptr(), ab.data_ptr()
    )
    qs[:B, 1:] = round_up_fp32(ab * _slack(d))  # the float64 norms' own rounding

    up = qs[:B, 1:].double()
    eta = torch.zeros(tiles * tile, dtype=torch.float64)
    eta[:B] = int8_filter_bound(up[:, 0], up[:, 1], rows)
    return _Queries(q_rows, q_tiles, qs, eta)


def int8_candidates(
    rows: Int8Rows, Q: torch.Tensor, k: int, threads: int = 1, exclude: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(query rows, positions, queries whose list overflowed): candidates that provably hold the exact top k of every
    other query (among positions other than ``exclude[i]``, where given; −1: none), k ≤ :data:`LIST_K`; needs
    finite, moderate queries (the search's range check).

    Each query keeps its k largest block maxima of Lo (each the Lo of a real position, so the k-th best t is at
    least the k-th of them, M, less η) and the positions whose Up reached 2η below its running k-th maximum when
    their block went by: a top-k position has Up_c + η ≥ t_c ≥ M − η, and the running k-th maximum only grows
    towards M. A query whose list outgrows its room is returned in the third tensor with no candidates: the
    caller filters it another way.
    """
    lib = _load(rows.kind)
    B = Q.shape[0]
    qp = _prepare(rows, Q)
    tiles, tile = qp.tiles.shape[0], qp.tiles.shape[2]
    n = tiles * tile
    lists = RunningLists.empty(qp.eta, n, k, NB * (k + 3))
    ex = padded_exclude(exclude, n)
    ex_ptr = None if ex is None else ex.data_ptr()
    per_pass = max(1, _PASS_BYTES // (rows.K4 * tile * 4))
    parts = max(1, min(threads, tiles // _MIN_TILES_PER_THREAD))

    def run(t0: int, t1: int, team: int) -> None:
        lib.int8_lists(
            qp.tiles.data_ptr(), qp.qs.data_ptr(), *rows.arrays(), ex_ptr, rows.K4, rows.blocks, t0, t1, per_pass,
            team, *lists.args(),
        )  # fmt: skip

    run_team(run, tiles, parts, openmp=bool(lib.int8_filter_openmp()))
    return lists.candidates(lib, B, 0)  # no second cut: the listed scores are Up, not a real position's Lo


def block_bounds(
    rows: Int8Rows, Q: torch.Tensor, qi: torch.Tensor, blocks: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(Up, Lo ``[n, NB]`` fp32 of the positions of block ``blocks[i]`` for query ``Q[qi[i]]``, η per query of ``Q``),
    by scalar integer dots and the kernel's fp32 steps (for the tests)."""
    qp = _prepare(rows, Q)
    n = qi.numel()
    up, lo = torch.empty((n, NB), dtype=torch.float32), torch.empty((n, NB), dtype=torch.float32)
    r, b = qi.to(torch.int64).contiguous(), blocks.to(torch.int64).contiguous()
    _load(rows.kind).int8_block_bounds(
        qp.rows.data_ptr(), qp.qs.data_ptr(), *rows.arrays(), r.data_ptr(), b.data_ptr(), rows.K4, n, up.data_ptr(),
        lo.data_ptr(),
    )  # fmt: skip
    return up, lo, qp.eta[: Q.shape[0]]
