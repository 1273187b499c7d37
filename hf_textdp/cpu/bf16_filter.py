"""The fused bf16 filter of the exact search on CPUs with AVX-512 BF16 (``kernels/bf16_filter.c``).

:class:`~hf_textdp.search.ExactIndex`'s bf16 filter forms a ``[queries, positions]`` tile of bf16 scores with
oneDNN, then reads it again for the block maxima. This one computes the scores in registers and keeps
only each block's maximum (blocks of :data:`NB` consecutive positions), so no tile of scores is written or
read; the few blocks that can hold a winner are scored again for their candidates. For k ≤ :data:`LIST_K`
it keeps each query's candidates itself instead (:class:`RunningLists`). The answer is the same exact one:
the filter only proposes candidates, which float64 verification decides.

Scores (docs/mechanisms/space.md §5.3, "The fused bf16 filter"). With q̂ = bf16(q), ê_c = bf16(e_c) (round to
nearest) and ν̃_c = fp32(ν64_c), ν64_c the float64 ‖e_c‖²/2, the kernel's score is
Ã_c = −ν̃_c + Σ_j q̂_j ê_cj, summed in fp32 with each product exact; it estimates t_c = q·e_c − ‖e_c‖²/2, the
quantity the nearest position maximises, within the per-query bound β of :func:`fused_filter_bound`.
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
from .features import native_bf16
from .lists import RunningLists, padded_exclude


__all__ = [
    "NB",
    "PackedRows",
    "block_maxima",
    "block_scores",
    "fused_candidates",
    "fused_filter_available",
    "fused_filter_bound",
    "farthest_pair_candidates",
    "query_tiles",
]

#: positions per block of the kernel (two vectors of 16 fp32 scores)
NB = 32
U32 = 2.0**-24
U64 = 2.0**-53
#: bytes of packed queries per pass of the kernel: they stay in a core's L2 cache while all rows go by
_PASS_BYTES = 384 * 1024
#: tiles per thread below which one call on the calling thread is faster than splitting
_MIN_TILES_PER_THREAD = 4
#: queries per part below which the candidate selection runs on one thread
_MIN_QUERIES_PER_PART = 64
#: the kernel's second cut applies for k up to this (kernels/bf16_filter.c, MAX_REFINE)
MAX_REFINE = 16
#: the largest k whose candidates the kernel lists while it scores (fused_candidates: nearest and top2); a list
#: holds NB·(k + 2) positions, so larger k (the rank's neighbour tables) select after the maxima
LIST_K = 2
#: listed queries after which rows whose lists mostly overflow stop being listed (PackedRows.lists_pay)
_LIST_TRIAL = 4096
#: the kernel's list arguments (beta … score) when it writes block maxima instead
_NO_LISTS = [None, 0, 0, None, None, None, None, None]


@functools.cache
def _lib() -> Any:
    """The compiled kernel with AVX-512 BF16 (typed for ctypes), else ``None``."""
    lib = load_kernel("bf16_filter", openmp=True)
    if lib is None or lib.bf16_filter_tile() <= 0:
        return None
    p, i = ctypes.c_void_p, ctypes.c_int64
    # q, e, init, exclude, K2, blocks, t0, t1, pass, threads, beta, k, cap, top, lim, cnt, pos, score, out
    lib.block_maxima.argtypes = [p, p, p, p, i, i, i, i, i, i, p, i, i, p, p, p, p, p, p]
    lib.block_maxima.restype = None
    lib.block_scores.argtypes = [p, p, p, p, p, i, i, i, p]
    lib.block_scores.restype = None
    lib.select_candidates.argtypes = [p, p, p, p, i, i, i, p, p, p, i, i, i, p, p, p, p]
    lib.select_candidates.restype = None
    lib.prepare_queries.argtypes = [p, i, i, i, i, p, p, p, p]
    lib.prepare_queries.restype = None
    lib.list_candidates.argtypes = [i, i, i, i, p, p, p, p, p, p, p]
    lib.list_candidates.restype = i
    return lib


def _tile() -> int:
    """Queries per micro-tile of the kernel (12)."""
    return int(_lib().bf16_filter_tile())


def _has_amx() -> bool:
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(probe is not None and probe())


def fused_filter_available() -> bool:
    """Whether the fused kernel runs here and meets the bound's model.

    It needs a C compiler and AVX-512 BF16 (read from the CPU's capabilities, not timed). On CPUs with AMX
    tiles oneDNN's bf16 product is several times faster than any AVX-512 kernel, so the torch filter stays
    there. The model (products exact, fp32 accumulation) is checked once, on a test product, before first
    use. The ``native`` switch (:mod:`hf_textdp.settings`) turns the kernel off (the search then runs its
    torch bf16 filter), and the ``cpu_isa`` switch set to ``avx2`` hides AVX-512 BF16 from it
    (:mod:`hf_textdp.cpu.features`).
    """
    return native_enabled() and native_bf16() and _kernel_ok()


@functools.cache
def _kernel_ok() -> bool:
    return _lib() is not None and not _has_amx() and _model_holds()


@dataclasses.dataclass(frozen=True)
class PackedRows:
    """A matrix packed for the kernel, with the constants of :func:`fused_filter_bound`.

    ``e`` holds blocks of NB rows as ``[blocks, K2, NB]`` words of two bf16 coordinates (K2 = ⌈d/2⌉,
    an odd d padded with a zero coordinate), ``init`` the ``−ν̃_c`` (−∞ for padding rows, never a candidate).
    """

    e: torch.Tensor
    init: torch.Tensor
    V: int
    d: int
    rho: float  # max_c ‖e_c − ê_c‖
    e_hat: float  # max_c ‖ê_c‖
    nu_max: float  # max_c ν64_c
    #: queries whose candidates were listed with these rows, and how many of their lists overflowed
    listed: list[int] = dataclasses.field(default_factory=lambda: [0, 0], compare=False, repr=False)

    @property
    def lists_pay(self) -> bool:
        """Whether running lists suit these rows: not once 4,096 or more queries were listed and more than a
        quarter of them overflowed (a large cluster of near-duplicate rows ahead of the others makes most lists
        overflow, and each such query pays the kernel twice)."""
        queries, overflowed = self.listed
        return queries < _LIST_TRIAL or 4 * overflowed <= queries

    @property
    def K2(self) -> int:
        return self.e.shape[1]

    @property
    def blocks(self) -> int:
        return self.e.shape[0]

    @classmethod
    def build(cls, E: torch.Tensor, sq64: torch.Tensor) -> PackedRows:
        """Pack the fp32 rows ``E`` ``[V, d]`` on the CPU; ``sq64`` are their float64 squared norms."""
        V, d = E.shape
        K2 = (d + 1) // 2
        blocks = -(-V // NB)
        e_hat = torch.zeros((blocks * NB, 2 * K2), dtype=torch.bfloat16)
        e_hat[:V, :d] = E  # round to nearest even
        e = e_hat.view(torch.int32).view(blocks, NB, K2).transpose(1, 2).contiguous()
        nu64 = sq64.double() / 2.0
        init = torch.full((blocks * NB,), -math.inf, dtype=torch.float32)
        init[:V] = -nu64.float()
        res = E - e_hat[:V, :d].float()  # exact in fp32
        f64 = torch.float64
        return cls(
            e=e,
            init=init,
            V=V,
            d=d,
            rho=float(torch.linalg.vector_norm(res, dim=1, dtype=f64).max()) * (1 + 2.0**-40),
            e_hat=float(torch.linalg.vector_norm(e_hat[:V], dim=1, dtype=f64).max()) * (1 + 2.0**-40),
            nu_max=float(nu64.max()),
        )


def fused_filter_bound(
    q_hat_norm: torch.Tensor, q_res_norm: torch.Tensor, *, rho: float, e_hat: float, nu_max: float, d: int
) -> torch.Tensor:
    """Per-query β with |t_c − Ã_c| ≤ β for every position c (float64, one value per query).

    Notation of :func:`hf_textdp.search.bf16_filter_bound`: q = q̂ + r_q, e_c = ê_c + r_c exactly, ρ = max‖r_c‖,
    Ê = max‖ê_c‖. Then t_c − Ã_c = (q·e_c − q̂·ê_c) − (ν_c − ν̃_c) + (A_c − Ã_c), A_c the exact value of
    −ν̃_c + q̂·ê_c, and β = β_in + β_acc + β_ν + β_abs with

    * β_in = ‖q̂‖ρ + ‖r_q‖(Ê + ρ): q·e_c − q̂·ê_c = q̂·r_c + r_q·ê_c + r_q·r_c, Cauchy–Schwarz on each;
    * β_acc = γ_n(‖q̂‖Ê + ν_max(1 + u₃₂)), n = d + 1 terms (d exact bf16 products and ν̃_c), γ_n = nu/(1 − nu),
      u = 2⁻²⁴: any order or tree of fp32 additions of n terms errs by at most γ_n·Σ|terms| (Higham,
      *Accuracy and Stability of Numerical Algorithms*, eq. 3.5), and Σ|q̂_j ê_cj| ≤ ‖q̂‖‖ê_c‖;
    * β_ν = ((d + 1)u₆₄ + u₃₂)·ν_max·1.01: ν64_c sums d exact squares in float64, and ν̃_c rounds it to fp32;
    * β_abs = 2⁻¹⁰⁰(1 + ‖q̂‖ + Ê): VDPBF16PS flushes inputs, products and sums below 2⁻¹²⁶ to zero; a flushed
      q̂_j moves a product by < 2⁻¹²⁶Ê, a flushed ê_cj by < 2⁻¹²⁶‖q̂‖, a flushed product or sum by < 2⁻¹²⁶: in
      all < (3d + 1)·2⁻¹²⁶·(1 + ‖q̂‖ + Ê), far below β_abs for d < 2²⁰.
    """
    n = d + 1
    gamma_n = n * U32 / (1.0 - n * U32)
    beta_in = q_hat_norm * rho + q_res_norm * (e_hat + rho)
    beta_acc = gamma_n * (q_hat_norm * e_hat + nu_max * (1.0 + U32))
    beta_nu = ((d + 1) * U64 + U32) * nu_max * 1.01
    beta_abs = 2.0**-100 * (1.0 + q_hat_norm + e_hat)
    beta: torch.Tensor = (beta_in + beta_acc + beta_nu + beta_abs) * (1.0 + 2.0**-20)
    return beta


def _queries(Q: torch.Tensor, K2: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(q̂ as rows ``[B, 2·K2]`` bf16, q̂ packed in tiles ``[tiles, K2, tile]`` of words)."""
    B, d = Q.shape
    tile = _tile()
    tiles = -(-B // tile)
    qa = torch.zeros((tiles * tile, 2 * K2), dtype=torch.bfloat16)
    qa[:B, :d] = Q  # round to nearest even
    packed = qa.view(torch.int32).view(tiles, tile, K2).transpose(1, 2).contiguous()
    return qa[:B], packed


def _prepare(packed: PackedRows, Q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q_rows, q_tiles, β): the queries' words of :func:`_queries` and each query's :func:`fused_filter_bound`
    from ‖q̂‖ and ‖q − q̂‖ in float64, by one pass of the kernel over ``Q`` (the tests hold it to the tensor
    form: the same words, the norms within float64 rounding, which the bound's factor 1 + 2⁻²⁰ covers)."""
    Qc = Q.to(torch.float32).contiguous()
    B, d = Qc.shape
    tile, K2 = _tile(), packed.K2
    q_rows = torch.empty((B, 2 * K2), dtype=torch.bfloat16)
    q_tiles = torch.empty((-(-B // tile), K2, tile), dtype=torch.int32)
    qh, qr = torch.empty(B, dtype=torch.float64), torch.empty(B, dtype=torch.float64)
    _lib().prepare_queries(
        Qc.data_ptr(), B, d, K2, torch.get_num_threads(), q_rows.data_ptr(), q_tiles.data_ptr(), qh.data_ptr(),
        qr.data_ptr(),
    )  # fmt: skip
    bound = fused_filter_bound(qh, qr, rho=packed.rho, e_hat=packed.e_hat, nu_max=packed.nu_max, d=packed.d)
    return q_rows, q_tiles, bound


def _threshold(M: torch.Tensor, bound: torch.Tensor, k: int) -> torch.Tensor:
    """The candidates' fp32 threshold of :func:`fused_candidates` from the block maxima ``M`` (for k ≤ MAX_REFINE
    the selection kernel takes the same steps itself, from each row's k-th largest maximum)."""
    kth = (M.topk(k, dim=1).values[:, k - 1] if k > 1 else M.amax(1)).double()
    thr = kth - 2.0 * bound
    thr = thr - 2.0**-40 * (thr.abs() + bound)  # float64 rounding of the line above, far outweighed
    return round_up_fp32(thr)  # for an fp32 score x: x ≥ thr exactly when x ≥ lim


def _select(
    packed: PackedRows,
    M: torch.Tensor,
    lim: torch.Tensor | None,
    beta: torch.Tensor,
    ex: torch.Tensor | None,
    k: int,
    q_rows: torch.Tensor,
    cap: int,
    threads: int,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The kernel's candidate lists (query rows, positions) for block maxima ``M`` and thresholds ``lim``, the
    queries split between ``threads`` parts of ``cap`` each; ``None`` when a part's list would exceed it."""
    B = M.shape[0]
    parts = max(1, min(threads, B // _MIN_QUERIES_PER_PART))
    rows, pos = torch.empty((parts, cap), dtype=torch.int64), torch.empty((parts, cap), dtype=torch.int64)
    scores, counts = torch.empty((parts, cap), dtype=torch.float32), torch.empty(parts, dtype=torch.int64)
    M, beta = M.contiguous(), beta.contiguous()
    lim_ptr = None if lim is None else lim.contiguous().data_ptr()
    _lib().select_candidates(
        M.data_ptr(), lim_ptr, beta.data_ptr(), None if ex is None else ex.data_ptr(), k, B, packed.blocks,
        q_rows.view(torch.int32).data_ptr(), packed.e.data_ptr(), packed.init.data_ptr(), packed.K2, parts, cap,
        rows.data_ptr(), pos.data_ptr(), scores.data_ptr(), counts.data_ptr(),
    )  # fmt: skip
    n = counts.tolist()
    if min(n) < 0:
        return None
    if parts == 1:
        return rows[0, : n[0]], pos[0, : n[0]]
    return torch.cat([rows[p, : n[p]] for p in range(parts)]), torch.cat([pos[p, : n[p]] for p in range(parts)])


def query_tiles(Q: torch.Tensor, K2: int) -> torch.Tensor:
    """The queries ``Q`` ``[B, d]`` (fp32) rounded to bf16 and packed in tiles for :func:`block_maxima`."""
    return _queries(Q, K2)[1]


def block_maxima(
    packed: PackedRows, q_tiles: torch.Tensor, threads: int, exclude: torch.Tensor | None = None
) -> torch.Tensor:
    """``[tiles·tile, blocks]`` fp32: each query's largest Ã over each block of NB positions (without the
    position ``exclude[i]`` of query i, where given; −1: none)."""
    out = torch.empty((q_tiles.shape[0] * _tile(), packed.blocks), dtype=torch.float32)
    _run_kernel(packed, q_tiles, threads, exclude, _NO_LISTS, out.data_ptr())
    return out


def block_lists(
    packed: PackedRows, q_tiles: torch.Tensor, threads: int, lists: RunningLists, exclude: torch.Tensor | None = None
) -> None:
    """The kernel of :func:`block_maxima` keeping each query's candidate list in ``lists`` instead of maxima."""
    _run_kernel(packed, q_tiles, threads, exclude, lists.args(), None)


def _run_kernel(
    packed: PackedRows, q_tiles: torch.Tensor, threads: int, exclude: torch.Tensor | None, lists: list[Any], out: Any
) -> None:
    lib, tile = _lib(), _tile()
    tiles = q_tiles.shape[0]
    ex = padded_exclude(exclude, tiles * tile)
    ex_ptr = None if ex is None else ex.data_ptr()
    per_pass = max(1, _PASS_BYTES // (packed.K2 * tile * 4))
    parts = max(1, min(threads, tiles // _MIN_TILES_PER_THREAD))

    def run(t0: int, t1: int, team: int) -> None:
        lib.block_maxima(
            q_tiles.data_ptr(), packed.e.data_ptr(), packed.init.data_ptr(), ex_ptr, packed.K2, packed.blocks,
            t0, t1, per_pass, team, *lists, out,
        )  # fmt: skip

    run_team(run, tiles, parts, openmp=bool(lib.bf16_filter_openmp()))  # torch's OpenMP threads, or Python threads


def block_scores(packed: PackedRows, q_rows: torch.Tensor, rows: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """``[n, NB]`` fp32: the Ã of the NB positions of block ``blocks[i]`` for query ``rows[i]``."""
    lib = _lib()
    n = rows.numel()
    out = torch.empty((n, NB), dtype=torch.float32)
    if n:
        r, b = rows.contiguous(), blocks.contiguous()
        lib.block_scores(
            q_rows.data_ptr(), packed.e.data_ptr(), packed.init.data_ptr(), r.data_ptr(), b.data_ptr(),
            packed.K2, 0, n, out.data_ptr(),
        )  # fmt: skip
    return out


def fused_candidates(
    packed: PackedRows, Q: torch.Tensor, k: int, threads: int = 1, exclude: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(query rows, positions, candidates per query) that provably hold each query's exact top k (among the
    positions other than ``exclude[i]`` for query i, where given; −1: none).

    The k-th largest block maximum M is the Ã of a real position, and k positions have Ã ≥ M, so the k-th
    best t is at least M − β; a top-k position c has Ã_c ≥ t_c − β ≥ M − 2β. Blocks whose maximum reaches
    that threshold are scored again and their positions that reach it are the candidates (a superset of
    the top k; float64 verification decides). The same argument on the k-th largest of the candidates'
    new scores (real positions too, k of them at least) gives a second threshold, often higher for k > 1
    (the k best positions share a block), which the kernel also applies (k ≤ 16). Needs at least k blocks
    and finite, moderate queries (the caller's range check).

    For k ≤ :data:`LIST_K` the kernel keeps these candidates itself, while each block's scores are still in
    registers (:class:`RunningLists`): a query's running k-th largest maximum only grows towards the final
    one, so a position that reaches the final threshold reached the running one when its block went by and
    is in the list; the final cuts then apply to the listed scores. No block is scored twice and no maxima are
    written. A query whose list outgrows its room (more than NB·(k + 2) positions within 2β of its running
    maximum: a cluster of near-duplicate rows ahead of its best rows) goes the other way, alone; rows on which
    most lists overflow go the other way for good (:attr:`PackedRows.lists_pay`).
    """
    B = Q.shape[0]
    ex = None if exclude is None else exclude.to(torch.int64).contiguous()
    if k > LIST_K or not packed.lists_pay:
        rows, pos = _selected(packed, Q, k, threads, ex)
    else:
        rows, pos, dropped = _listed(packed, Q, k, threads, ex)
        packed.listed[0] += B
        packed.listed[1] += dropped.numel()
        if dropped.numel():  # lists that outgrew their room (clusters of near-duplicate rows)
            r2, p2 = _selected(packed, Q[dropped], k, threads, None if ex is None else ex[dropped])
            rows, pos = torch.cat([rows, dropped[r2]]), torch.cat([pos, p2])
            order = torch.sort(rows, stable=True).indices  # queries in order, each one's positions as they were
            rows, pos = rows[order], pos[order]
    return rows, pos, torch.bincount(rows, minlength=B)


def _listed(
    packed: PackedRows, Q: torch.Tensor, k: int, threads: int, ex: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(query rows, positions, queries whose list was dropped) of :func:`fused_candidates` from the running lists."""
    _, q_tiles, bound = _prepare(packed, Q)
    lists = RunningLists.empty(bound, q_tiles.shape[0] * _tile(), k, NB * (k + 2))
    block_lists(packed, q_tiles, threads, lists, ex)
    return lists.candidates(_lib(), Q.shape[0], MAX_REFINE)


def _selected(
    packed: PackedRows, Q: torch.Tensor, k: int, threads: int, ex: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(query rows, positions) of :func:`fused_candidates` from the block maxima and the selection after them."""
    B = Q.shape[0]
    q_rows, q_tiles, bound = _prepare(packed, Q)
    M = block_maxima(packed, q_tiles, threads, ex)[:B]
    lim = None if k <= MAX_REFINE else _threshold(M, bound, k)  # k ≤ MAX_REFINE: in the kernel
    found = _select(packed, M, lim, bound, ex, k, q_rows, max(1024, 8 * B * k), threads)
    if found is not None:
        return found
    # more candidates than cap (clusters of near-duplicate rows): the same selection in tensor operations
    lim_t = _threshold(M, bound, k) if lim is None else lim
    hr, hb = torch.nonzero(M >= lim_t[:, None], as_tuple=True)
    S = block_scores(packed, q_rows.view(torch.int32), hr, hb)
    hit, j = torch.nonzero(S >= lim_t[hr][:, None], as_tuple=True)
    rows, pos = hr[hit], hb[hit] * NB + j
    if ex is not None:
        keep = pos != ex[rows]
        rows, pos = rows[keep], pos[keep]
    return rows, pos


def _model_holds() -> bool:
    """Check the kernel against the bound's model on a test product shaped like a search tile.

    Random bf16 operands spanning 2¹² in magnitude, with cancellation: every block score must lie within
    γ_n·Σ|terms| of the exact sum (inexact products or a bf16 accumulator fail), and every block maximum
    within the same of the exact block maximum. Query 0 is a probe whose exact score 1 + 2⁻²⁰ needs the
    fp32 accumulator.
    """
    g = torch.Generator().manual_seed(1234)
    m, d, V = 30, 384, 4 * NB + 5

    def spread(rows: int, cols: int) -> torch.Tensor:
        x = torch.randn(rows, cols, generator=g, dtype=torch.float64)
        return (x * torch.exp2(torch.randint(-6, 7, (rows, cols), generator=g).double())).to(torch.bfloat16)

    q, e = spread(m, d), spread(V, d)
    q[0], e[0] = 0.0, 0.0
    q[0, :2] = 1.0
    e[0, 0], e[0, 1] = 1.0, 2.0**-20
    packed = PackedRows.build(e.float(), torch.zeros(V, dtype=torch.float64))  # ν = 0: init −0
    q_rows, q_tiles = _queries(q.float(), packed.K2)
    ref = q.double() @ e.double().T  # float64 error far below the tolerance
    tol = d * U32 / (1 - d * U32) * (q.double().abs() @ e.double().abs().T) * 1.001 + 1e-300
    rows = torch.arange(m).repeat_interleave(packed.blocks)
    blocks = torch.arange(packed.blocks).repeat(m)
    S = block_scores(packed, q_rows.view(torch.int32), rows, blocks).view(m, -1)[:, :V].double()
    if not bool(((S - ref).abs() <= tol).all()) or float(S[0, 0]) != 1.0 + 2.0**-20:
        return False
    M = block_maxima(packed, q_tiles, 1)[:m].double()
    pad = torch.full((m, packed.blocks * NB - V), -math.inf, dtype=torch.float64)
    exact_max = torch.cat([ref, pad], 1).view(m, packed.blocks, NB).amax(2)
    slack = torch.cat([tol, torch.zeros_like(pad)], 1).view(m, packed.blocks, NB).amax(2)
    return bool(((M - exact_max).abs() <= slack).all())


def farthest_pair_candidates(
    E: torch.Tensor, sq64: torch.Tensor, queries: int = 1024
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Pairs (i, c) of rows of ``E`` ``[V, d]`` (fp32, CPU) that provably hold every pair at the largest distance,
    or ``None`` when the list would be too long (the caller's fp32 pass then runs).

    The same kernel with the query −e_i and the start +ν̃_c scores Ã_ic ≈ ν_c − e_i·e_c = h_ic − ν_i, where
    h_ic = ‖e_i − e_c‖²/2, within the β of :func:`fused_filter_bound` (every term only changes sign). Row i's
    largest block maximum M_i is the Ã of a real pair, so max h ≥ L = max_i (ν_i + M_i − β_i) (ν_i in float64,
    lowered by its own error bound); a pair with h_ic ≥ L has Ã_ic ≥ L − ν_i − β_i, and the blocks and
    positions that reach that threshold are the candidates.
    """
    V, d = E.shape
    packed = PackedRows.build(E, sq64)
    init = torch.where(torch.isfinite(packed.init), -packed.init, packed.init)  # +ν̃_c; padding stays −∞
    packed = dataclasses.replace(packed, init=init)
    nu64 = sq64.double() / 2.0
    nu_lo = nu64 * (1.0 - (d + 2) * U64 * 1.01)  # ν_i ≥ nu_lo: the float64 sum errs by ≤ (d + 1)u₆₄·ν_i
    nu_hi = nu64 * (1.0 + (d + 2) * U64 * 1.01)
    maxima, betas, rows_q = [], [], []
    for s in range(0, V, queries):
        Q = -E[s : s + queries]
        q_rows, q_tiles, beta = _prepare(packed, Q)
        maxima.append(block_maxima(packed, q_tiles, torch.get_num_threads())[: Q.shape[0]])
        betas.append(beta)
        rows_q.append(q_rows)
    M, beta, q_rows = torch.cat(maxima), torch.cat(betas), torch.cat(rows_q)
    best = M.amax(1).double()
    L = float((nu_lo + best - beta).max())
    thr = L - nu_hi - beta
    # float64 rounding of the lines above (a few ulps of terms up to `size`), far outweighed
    size = float(nu64.max()) + float(best.abs().max()) + float(beta.max()) + abs(L)
    thr = thr - 2.0**-40 * (thr.abs() + beta + size)
    lim = round_up_fp32(thr)
    return _select(packed, M, lim, beta, None, MAX_REFINE + 1, q_rows, max(4096, 8 * V), 1)
