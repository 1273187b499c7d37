"""A filtered evaluation of the dense Gumbel-max sampler that returns its exact outputs (spec §6.4).

The dense sampler of spec §6.4 is normative for seeded outputs: per chunk of columns, fp32
distances ``d̃`` (the §1.5 expansion), float64 scores ``a = −scale·min(d̃, γ)``, one float64 uniform
per (token, column) from the row's generator, ``s = a − log(−log u)``, first index on ties, a later
chunk wins only on a strictly larger value. Its result is the first column with the largest ``s``.

:func:`gumbel_max_rows` returns that same column while computing ``s`` for few columns. It draws
every uniform of the reference, in the same calls and order (one ``rand(B, c)`` per chunk from each
row's generator), so the generators end in the same state. Instead of the fp32 product and the
Gumbel transform over all columns it uses a proven interval for each ``s``:

1. **Filter.** A bf16 product with fp32 accumulation (the filter of spec §1.5, bound
   :func:`~hf_textdp.search.bf16_filter_bound`) gives t̃ ≈ t = x·e − ‖e‖²/2 with |t − t̃| ≤ β, so the
   exact squared distance δ = ‖x‖² − 2t lies in a known interval. The reference's fp32 value obeys
   |fl32(n32 + x·(−2e)ᵀ) + x_sq − δ| ≤ E with E = 1.05·(d + 4)·u₃₂·(‖x‖ + R)² (products, d + 1 sums,
   and the roundings of n32, x_sq and the last addition; Higham eq. 3.5), then clamp, a correctly
   rounded sqrt, and float64 roundings of ``a`` and ``s`` bounded by relative 2⁻⁵¹. ``log(−log u)`` is
   decreasing in u, and two evaluations of it differ by far less than the slack κ = 10⁻¹²·(1 + |a| + |ℓ|)
   added to every bound. So each column gets lo ≤ s ≤ hi.
2. **Skip.** T, the largest lower bound seen for a token, is a value that some column's s reaches,
   so a column with hi < T can neither reach the maximum nor tie it, and is dropped. Two scans find
   the columns with hi ≥ T, with the same result:

   * *compiled* (:func:`_scan_compiled`, numba; the default where :func:`~hf_textdp.mt19937.mirror_available`):
     each token's uniforms are drawn from its row's own MT19937 words, bit for bit what ``uniform_``
     gives (:mod:`hf_textdp.mt19937`), then T starts from the lower bound of the best-scoring column.
     Every other column scores at most the second-best t̃, so hi ≥ T needs ``log(−log u) ≤ X`` with X
     from that score: one comparison of u against ``exp(−e^X)`` (rounded down) per column, in
     blocks of 16 with a vectorised maximum. Only the rare columns above it get an interval.
   * *torch* (:func:`_scan_torch`): each row's ``uniform_`` per chunk; columns grouped in strided
     blocks of 64, a block's bound from its largest t̃ and its largest u, one transcendental per block.
3. **Refine.** The columns left (hi ≥ T) get δ in float64 (relative error (d + 2)·u₆₄), which leaves
   only E in the interval. If one column is left, it is the reference's answer.
4. **Exact fallback.** Otherwise the row's chunks that hold the columns left are recomputed with the
   reference code itself (:func:`~hf_textdp.mechanisms.tem._dense_chunk`, same row, same shapes, the
   uniforms regenerated from a copy of the generator's state before that chunk), and the largest chunk
   maximum wins, the earlier chunk on ties: the reference's own rule.

The answer therefore never depends on the filter's rounding, on which rows share a product, or on
the block layout or on the scan. Memory is O(B·chunk) per row group; no V × V.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..mt19937 import TorchMT, kernels, mirror_available
from ..search import U32, U64, UBF16, bf16_filter_available, bf16_filter_bound, exact_fp32_matmul


if TYPE_CHECKING:
    from ..search import ExactIndex, _Bf16Constants


__all__ = ["gumbel_max_rows", "fast_dense_available", "filter_operands", "group_rows", "sampler_groups"]

#: columns per strided block of the block pass
BLOCK = 64
#: the filter product's rows are padded to a multiple of this
PAD_ROWS = 32
#: initial candidate slots per token of the compiled scan (the buffers grow when needed)
CAP_PER_TOKEN = 64
_REL = 2.0**-51  # relative slack for the float64 roundings of a and s (several u₆₄)


def fast_dense_available(index: ExactIndex) -> bool:
    """Whether :func:`gumbel_max_rows` uses the filter: CPU with a fast, model-checked bf16 product."""
    return index.device.type == "cpu" and bf16_filter_available(index.device)


def filter_operands(index: ExactIndex) -> tuple[torch.Tensor, _Bf16Constants]:
    """The bf16 filter operands of ``index`` (built once per index and cached: O(V·d), never V × V)."""
    return index._bf16_operands()


def group_rows(sizes: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Consecutive groups of row indices with at most ``max_tokens`` tokens each (a longer row is alone).

    Example:

    >>> group_rows([3, 4, 0, 9, 2], 8)
    [[0, 1, 2], [3], [4]]
    """
    groups: list[list[int]] = []
    cur: list[int] = []
    n = 0
    for i, k in enumerate(sizes):
        if cur and n + int(k) > max_tokens:
            groups.append(cur)
            cur, n = [], 0
        cur.append(i)
        n += int(k)
    if cur:
        groups.append(cur)
    return groups


def sampler_groups(sizes: Sequence[int], max_tokens: int, *, threads: int | None = None) -> list[list[int]]:
    """:func:`group_rows` with groups small enough to give every intra-op thread work.

    Groups hold up to ``max_tokens`` tokens, fewer when the batch is small: at least 4 groups per thread
    where the batch has the tokens for it, never below 32 tokens (the product's rows come in multiples
    of 32). Rows are sampled alone either way, so the grouping never changes an output.

    Example:

    >>> [len(g) for g in sampler_groups([1] * 800, 256, threads=2)]
    [100, 100, 100, 100, 100, 100, 100, 100]
    """
    threads = torch.get_num_threads() if threads is None else threads
    total = sum(int(k) for k in sizes)
    return group_rows(sizes, min(max_tokens, max(PAD_ROWS, -(-total // (4 * max(1, threads))))))


def _neg_log_neg_log(u: torch.Tensor) -> torch.Tensor:
    return u.log().neg_().log_()


class _Bounds:
    """Per-token constants and the interval of the reference's s from a bf16 score p and ℓ = log(−log u).

    With k = u_bf16/(1 − u_bf16), the fp32 accumulation Ã behind the stored bf16 p lies in
    [p − k|p|, p + k|p|], and t ∈ [Ã − β, Ã + β]; δ = ‖x‖² − 2t. ``c_lo``/``c_hi`` fold ‖x‖², β, the
    float64 error of ‖x‖² and the reference's fp32 error E, so δ − E ≥ c_lo − 2p − 2k|p| and
    δ + E ≤ c_hi − 2p + 2k|p|. The slack κ₀ = 10⁻¹²·(41 + scale·min(γ, 2(‖x‖ + R) + 1)) bounds every
    κ of the module docstring (|ℓ| ≤ 37 for u ∈ (0, 1 − 2⁻⁵³]).
    """

    K = UBF16 / (1.0 - UBF16) * (1.0 + 2.0**-40)

    def __init__(self, c_lo: torch.Tensor, c_hi: torch.Tensor, *, scale: float, gamma: float, kappa: float) -> None:
        self.c_lo, self.c_hi, self.kappa = c_lo, c_hi, kappa
        self.s_lo = scale * (1.0 - 4.0 * U32) * (1.0 - _REL)
        self.s_hi = scale * (1.0 + 4.0 * U32) * (1.0 + _REL)
        self.g_lo = scale * gamma * (1.0 - _REL) if gamma < math.inf else math.inf
        self.g_hi = scale * gamma * (1.0 + _REL) if gamma < math.inf else math.inf

    def upper(self, p: torch.Tensor, ell: torch.Tensor, c_lo: torch.Tensor) -> torch.Tensor:
        """hi ≥ s: float64 ``p`` (consumed), ``c_lo`` broadcastable to it."""
        q = p.abs().mul_(2.0 * self.K).add_(p, alpha=2.0)
        d = torch.sub(c_lo, q).clamp_(min=0.0).sqrt_().mul_(self.s_lo)
        if self.g_lo < math.inf:
            d.clamp_(max=self.g_lo)
        return d.neg_().sub_(ell).add_(self.kappa)

    def lower(self, p: torch.Tensor, ell: torch.Tensor, c_hi: torch.Tensor) -> torch.Tensor:
        """lo ≤ s."""
        q = p.abs().mul_(-2.0 * self.K).add_(p, alpha=2.0)
        d = torch.sub(c_hi, q).clamp_(min=0.0).sqrt_().mul_(self.s_hi)
        if self.g_hi < math.inf:
            d.clamp_(max=self.g_hi)
        return d.neg_().sub_(ell).sub_(self.kappa)


def _refined(
    dlt: torch.Tensor, err: torch.Tensor, ell: torch.Tensor, b: _Bounds, d: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(lo, hi) of s from a float64 δ (relative error (d + 2)·u₆₄) and the reference's fp32 error E."""
    rel = (d + 2) * U64 * 1.01
    d_lo = torch.sqrt((dlt * (1.0 - rel) - err).clamp(min=0.0)) * b.s_lo
    d_hi = torch.sqrt((dlt * (1.0 + rel) + err).clamp(min=0.0)) * b.s_hi
    if b.g_lo < math.inf:
        d_lo = d_lo.clamp(max=b.g_lo)
        d_hi = d_hi.clamp(max=b.g_hi)
    return -d_hi - ell - b.kappa, -d_lo - ell + b.kappa


#: the generator state of row r before chunk k, as ``get_state()`` returns it
StateAt = Callable[[int, int], torch.Tensor]
_Scan = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, StateAt]


@dataclasses.dataclass(frozen=True)
class _ScanJob:
    """What a scan (steps 1–2) needs: the rows' generators and layout, the filter operands, the bounds."""

    gens: list[torch.Generator]  # one per row with tokens
    row_start: list[int]  # row r's tokens are [row_start[r], row_start[r + 1])
    tok_row: torch.Tensor  # the row of each token
    qa: torch.Tensor  # bf16 filter rows of the tokens (padded to a multiple of PAD_ROWS)
    a_t: torch.Tensor  # bf16 filter operand of the columns
    c_lo: torch.Tensor
    c_hi: torch.Tensor
    bnd: _Bounds
    starts: list[int]  # chunk starts
    V: int
    chunk_size: int


def _scan_torch(job: _ScanJob) -> _Scan:
    """Steps 1–2 with torch ops: each row's ``uniform_`` per chunk, then the block and column passes.

    Returns T, the kept (token, column, hi, ℓ) and the generator states before each chunk.
    """
    gens, row_start, qa, a_t, c_lo, c_hi, bnd = job.gens, job.row_start, job.qa, job.a_t, job.c_lo, job.c_hi, job.bnd
    starts, V, chunk_size = job.starts, job.V, job.chunk_size
    N = job.tok_row.shape[0]
    T = torch.full((N,), -math.inf, dtype=torch.float64)
    kt = torch.empty(0, dtype=torch.int64)
    kc = torch.empty(0, dtype=torch.int64)
    kh = torch.empty(0, dtype=torch.float64)
    ke = torch.empty(0, dtype=torch.float64)
    states: list[list[torch.Tensor]] = [[] for _ in gens]
    ar = torch.arange(N)
    c_lo2, c_hi2 = c_lo[:, None], c_hi[:, None]
    for c0 in starts:
        c1 = min(c0 + chunk_size, V)
        c = c1 - c0
        u = torch.empty((N, c), dtype=torch.float64)
        for r, g in enumerate(gens):  # each row's rand(B_i, c), written in place (same draws as torch.rand)
            states[r].append(g.get_state())
            u[row_start[r] : row_start[r + 1]].uniform_(0.0, 1.0, generator=g)
        p32 = torch.mm(qa, a_t[:, c0:c1])[:N].float()
        G = BLOCK if c >= 4 * BLOCK else 1
        nb = c // G
        main = G * nb
        u3 = u[:, :main].view(-1, G, nb) if u.is_contiguous() and main == c else u[:, :main].reshape(-1, G, nb)
        p3 = p32[:, :main].view(-1, G, nb) if main == c else p32[:, :main].reshape(-1, G, nb)
        bu = u3.amax(1) if G > 1 else u3[:, 0]
        bp = (p3.amax(1) if G > 1 else p3[:, 0]).double()
        b_hi = bnd.upper(bp, _neg_log_neg_log(bu), c_lo2)
        # a value that a column of this chunk reaches: the best lower bound in its most promising block
        cols0 = b_hi.argmax(1)[:, None] + torch.arange(G)[None, :] * nb
        e_lo = bnd.lower(p32.gather(1, cols0).double(), _neg_log_neg_log(u.gather(1, cols0)), c_hi2)
        T = torch.maximum(T, e_lo.amax(1))
        hr, hj = torch.nonzero(b_hi >= T[:, None], as_tuple=True)
        ct = hr[:, None].expand(-1, G).reshape(-1)
        cc = (hj[:, None] + torch.arange(G)[None, :] * nb).reshape(-1)
        if main < c:
            tr, tj = torch.meshgrid(ar, torch.arange(main, c), indexing="ij")
            ct = torch.cat([ct, tr.reshape(-1)])
            cc = torch.cat([cc, tj.reshape(-1)])
        if ct.numel():
            ell = _neg_log_neg_log(u[ct, cc])
            pc = p32[ct, cc].double()
            hi = bnd.upper(pc.clone(), ell, c_lo[ct])
            lo = bnd.lower(pc, ell, c_hi[ct])
            T = T.scatter_reduce(0, ct, lo, reduce="amax")
            kt = torch.cat([kt, ct])
            kc = torch.cat([kc, cc + c0])
            kh = torch.cat([kh, hi])
            ke = torch.cat([ke, ell])
        ok = kh >= T[kt]  # prune everything kept so far
        kt, kc, kh, ke = kt[ok], kc[ok], kh[ok], ke[ok]
        del u, p32
    return T, kt, kc, kh, ke, lambda r, k: states[r][k]


def _scan_compiled(job: _ScanJob) -> _Scan:
    """Steps 1–2 fused per token in compiled code (:func:`hf_textdp._kernels.scan_chunk`).

    The generators' own MT19937 stream is drawn outside torch (:class:`~hf_textdp.mt19937.TorchMT`,
    checked bit for bit against ``uniform_`` by :func:`~hf_textdp.mt19937.mirror_available`), token by
    token in each row's order, so every row sees the reference's ``rand(B_i, c)``; the states are
    written back at the end. Instead of block maxima, a token's columns with u below the level at which
    even its best-scoring column could not reach T are skipped (one comparison each). Same T and kept
    set semantics as :func:`_scan_torch`: kept columns all have hi ≥ T at the time they were seen.
    """
    kern = kernels()
    gens, qa, a_t, bnd, starts, V, chunk_size = job.gens, job.qa, job.a_t, job.bnd, job.starts, job.V, job.chunk_size
    N = job.tok_row.shape[0]
    mts = TorchMT(gens)
    t_best = np.full(N, -math.inf, dtype=np.float64)
    prm = np.array([bnd.s_lo, bnd.s_hi, bnd.g_lo, bnd.g_hi, bnd.kappa, 2.0 * bnd.K], dtype=np.float64)
    tok_np = job.tok_row.numpy()
    lo_np = job.c_lo.numpy()
    hi_np = job.c_hi.numpy()
    cap = max(chunk_size, CAP_PER_TOKEN * N)
    bufs = _grow(None, cap)
    count = 0
    snaps = []
    for c0 in starts:
        c1 = min(c0 + chunk_size, V)
        snaps.append(mts.snapshot())
        p16 = torch.mm(qa, a_t[:, c0:c1]).view(torch.int16).numpy().view(np.uint16)
        b = 0
        while True:
            count, b = kern.scan_chunk(
                mts.mt, mts.pos, mts.raw, tok_np, p16, lo_np, hi_np, t_best, prm, c0, *bufs, count, b
            )
            if b == N:
                break
            count = _prune(bufs, count, t_best)
            if count + (c1 - c0) > bufs[0].shape[0] // 2:
                bufs = _grow(bufs, 2 * bufs[0].shape[0])
        count = _prune(bufs, count, t_best)
    mts.store(gens)
    kt, kc, kh, ke = (torch.from_numpy(a[:count].copy()) for a in bufs)
    return torch.from_numpy(t_best), kt, kc, kh, ke, lambda r, k: mts.state_tensor(r, snaps[k])


_Bufs = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _grow(bufs: _Bufs | None, cap: int) -> _Bufs:
    """Candidate buffers (token, column, hi, ℓ) of ``cap`` slots, keeping the old contents."""
    new = (np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.float64), np.empty(cap, np.float64))
    if bufs is not None:
        n = bufs[0].shape[0]
        for a, b in zip(new, bufs, strict=True):
            a[:n] = b
    return new


def _prune(bufs: _Bufs, count: int, t_best: np.ndarray) -> int:
    """Drop the kept columns whose hi fell below their token's T; returns the new count (in place)."""
    keep = np.nonzero(bufs[2][:count] >= t_best[bufs[0][:count]])[0]
    for a in bufs:
        a[: keep.size] = a[keep]
    return int(keep.size)


def _compiled_scan() -> bool:
    """The compiled scan, unless ``HF_TEXTDP_SAMPLER_SCAN=torch`` or the stream mirror is unavailable."""
    return os.environ.get("HF_TEXTDP_SAMPLER_SCAN", "auto") != "torch" and mirror_available()


def gumbel_max_rows(
    xs: Sequence[torch.Tensor],
    gens: Sequence[torch.Generator],
    index: ExactIndex,
    n32: torch.Tensor,
    em2t: torch.Tensor,
    *,
    scale: float,
    gamma: float,
    chunk_size: int,
) -> list[torch.Tensor]:
    """The dense sampler's outputs (spec §6.4) for several rows, each with its own generator.

    Equal, row by row, to ``gumbel_max_dense(xs[i], n32, em2t, ..., g=gens[i])``, and leaves every
    generator in the same state; see the module docstring for the proof.

    Args:
        xs (sequence of `torch.Tensor` `[B_i, d]` fp32): each row's input vectors.
        gens (sequence of `torch.Generator`): each row's generator (CPU).
        index (`ExactIndex`): an index over the target columns' rows (its ``E`` are the columns, in
            order); it supplies the bf16 filter operands, the rows for the float64 refinement and R.
        n32 (`torch.Tensor` `[V']` fp32), em2t (`torch.Tensor` `[d, V']` fp32): the reference's operands
            for the same columns (bit for bit what the reference sampler would be given).
        scale (`float`): ε/2. gamma (`float`): truncation threshold (``math.inf`` for none).
        chunk_size (`int`): columns per chunk (the reference's, part of the random stream).

    Returns:
        list of `torch.Tensor` `[B_i]` int64: column indices per row.
    """
    sizes = [int(x.shape[0]) for x in xs]
    out = [torch.zeros(n, dtype=torch.int64) for n in sizes]
    live = [i for i, n in enumerate(sizes) if n]
    if not live:
        return out
    x = torch.cat([xs[i].to(torch.float32) for i in live], 0).contiguous()
    N, d = x.shape
    V = int(n32.shape[0])
    row_sizes = [sizes[i] for i in live]
    row_start = [0]
    for n in row_sizes:
        row_start.append(row_start[-1] + n)
    tok_row = torch.repeat_interleave(torch.arange(len(live)), torch.tensor(row_sizes))
    starts = list(range(0, V, chunk_size))

    a_t, consts = filter_operands(index)
    K = a_t.shape[0]
    # rows padded to a multiple of PAD_ROWS: the product's kernels are built per shape, so few shapes
    qa = torch.zeros((-(-N // PAD_ROWS) * PAD_ROWS, K), dtype=torch.bfloat16)
    qa[:N, :d] = x
    qa[:N, d : d + 2] = 1.0
    x64 = x.double()
    xsq = (x64 * x64).sum(1)
    q_hat = qa[:N, :d].double()
    beta = bf16_filter_bound(
        torch.linalg.vector_norm(q_hat, dim=1),
        torch.linalg.vector_norm(x64 - q_hat, dim=1),
        rho=consts.rho,
        e_hat=consts.e_hat,
        nu_max=consts.nu_max,
        terms_max=consts.terms_max,
        n_terms=consts.n_terms,
    )
    xsq_slack = (d + 2) * U64 * xsq * 1.01 + 1e-300
    xn = torch.sqrt(xsq) * (1.0 + 1e-12)
    err = 1.05 * (d + 4) * U32 * (xn + index.R) ** 2  # E of the module docstring
    c_lo = xsq - 2.0 * beta - xsq_slack - err
    c_hi = xsq + 2.0 * beta + xsq_slack + err
    dmax = 2.0 * (float(xn.max()) + index.R) + 1.0
    kappa = 1e-12 * (41.0 + scale * min(gamma, dmax))
    bnd = _Bounds(c_lo, c_hi, scale=scale, gamma=gamma, kappa=kappa)

    with exact_fp32_matmul():
        scan = _scan_compiled if _compiled_scan() else _scan_torch  # same numbers either way
        job = _ScanJob([gens[i] for i in live], row_start, tok_row, qa, a_t, c_lo, c_hi, bnd, starts, V, chunk_size)
        T, kt, kc, kh, ke, state_at = scan(job)

        # refine the columns left with float64 distances (only E stays in the interval)
        cnt = torch.bincount(kt, minlength=N)
        multi = cnt[kt] > 1
        if bool(multi.any()):
            mt, mc = kt[multi], kc[multi]
            dlt = ((index.E[mc].double() - x64[mt]) ** 2).sum(1)
            lo, hi = _refined(dlt, err[mt], ke[multi], bnd, d)
            kh = kh.clone()
            kh[multi] = hi
            T = T.scatter_reduce(0, mt, lo, reduce="amax")
            ok = kh >= T[kt]
            kt, kc = kt[ok], kc[ok]
        cnt = torch.bincount(kt, minlength=N)
        # one column left per token: the winner (the column whose lower bound is T is never pruned)
        win = torch.zeros(N, dtype=torch.int64)
        single = cnt[kt] == 1
        win[kt[single]] = kc[single]
        amb_tok = torch.nonzero(cnt > 1).squeeze(1)
        if amb_tok.numel():
            _exact_fallback(
                win,
                amb_tok,
                kt,
                kc,
                x,
                tok_row,
                row_sizes,
                state_at,
                n32,
                em2t,
                starts,
                chunk_size,
                scale=scale,
                gamma=gamma,
            )
    if bool((cnt == 0).any()):  # cannot happen: T is reached by a column that is never pruned
        raise AssertionError("gumbel_max_rows: a token lost every column")
    res = torch.split(win, row_sizes)
    for r, i in enumerate(live):
        out[i] = res[r].clone()
    return out


def _exact_fallback(
    win: torch.Tensor,
    amb_tok: torch.Tensor,
    kt: torch.Tensor,
    kc: torch.Tensor,
    x: torch.Tensor,
    tok_row: torch.Tensor,
    row_sizes: list[int],
    state_at: StateAt,
    n32: torch.Tensor,
    em2t: torch.Tensor,
    starts: list[int],
    chunk_size: int,
    *,
    scale: float,
    gamma: float,
) -> None:
    """Decide the tokens whose intervals overlap with the reference code on their chunks (in place)."""
    from .tem import _dense_chunk

    V = int(n32.shape[0])
    row_start = [0]
    for n in row_sizes:
        row_start.append(row_start[-1] + n)
    is_amb = torch.zeros(win.shape[0], dtype=torch.bool)
    is_amb[amb_tok] = True
    sel = is_amb[kt]
    at, ac = kt[sel], kc[sel] // chunk_size
    for r in torch.unique(tok_row[amb_tok]).tolist():
        s0, s1 = row_start[r], row_start[r + 1]
        in_row = (at >= s0) & (at < s1)
        xr = x[s0:s1].clone()  # a fresh allocation, like the reference's E[positions]
        x_sq = (xr.double() ** 2).sum(1).float()
        best = torch.full((s1 - s0,), -math.inf, dtype=torch.float64)
        arg = torch.zeros(s1 - s0, dtype=torch.int64)
        need = torch.zeros((s1 - s0, len(starts)), dtype=torch.bool)
        need[at[in_row] - s0, ac[in_row]] = True
        for k in torch.nonzero(need.any(0)).squeeze(1).tolist():
            g = torch.Generator(device="cpu")
            g.set_state(state_at(r, k))
            c0 = starts[k]
            m, j = _dense_chunk(xr, x_sq, n32, em2t, c0, min(c0 + chunk_size, V), scale=scale, gamma=gamma, g=g)
            upd = need[:, k] & (m > best)  # chunks in increasing order: the earlier wins ties
            best = torch.where(upd, m, best)
            arg = torch.where(upd, j + c0, arg)
        toks = torch.nonzero(need.any(1)).squeeze(1)
        win[toks + s0] = arg[toks]
