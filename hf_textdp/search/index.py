"""The exact nearest-neighbour index (the algorithm: :mod:`hf_textdp.search`): the filter's tiling and scan,
the fused GPU path, and the verification of the candidates (:mod:`~hf_textdp.search.verify`)."""

from __future__ import annotations

import dataclasses
import math
import os
import threading
from typing import Literal

import torch

from .. import settings
from ..cpu.avx2_filter import LIST_K as AVX2_LIST_K
from ..cpu.avx2_filter import Fp32Rows, avx2_candidates, avx2_filter_available
from ..cpu.bf16_filter import NB, PackedRows, fused_candidates, fused_filter_available
from ..errors import InvalidParameterError
from ..gpu import triton_ready
from ..gpu.nearest import TensorCoreOperands, fused_nearest, tensor_core_model_holds, tile_config
from ..utils.rounding import round_up_fp32
from ..utils.threads import torch_threads
from .bf16 import (
    BF16_MAX_CANDIDATES,
    BF16_MAX_K,
    Found,
    _bf16_model_ok,
    bf16_filter_available,
    bf16_operands,
    chunk_bf16,
)
from .bounds import (
    BF16_MAX_MAGNITUDE,
    U32,
    U64,
    Bf16Constants,
    bf16_filter_bound,
    check_range,
    exact_fp32_matmul,
    round_up,
    threshold,
    top_k,
)
from .verify import verify


__all__ = ["BLOCK", "FILTERS", "FUSED_CPU_QUERIES", "FUSED_QUERIES", "ExactIndex", "FilterName"]


def _single_thread_after_fork() -> None:
    # torch's OpenMP pool does not survive fork(): a forked child (datasets ``num_proc``, DataLoader
    # workers) that runs a multi-threaded GEMM deadlocks. Each forked worker is one process per core
    # anyway, so it uses one intra-op thread.
    torch.set_num_threads(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_single_thread_after_fork)


#: positions per block of the block-extremum pass (strided: block j of a chunk of L positions holds
#: positions j, j + L/G, j + 2L/G, …, so the pass is a vectorised reduction over rows of memory)
BLOCK = 64
#: the filter choices; "auto" takes bf16 where it is available and fast, else fp32
FILTERS = ("auto", "bf16", "fp32")
FilterName = Literal["auto", "bf16", "fp32"]
#: bytes of scores per (query block × chunk) tile when the chunk size is automatic
_TILE_BYTES = 32 * 2**20
#: queries per launch of the fused GPU search (its buffers are O(queries · d))
FUSED_QUERIES = 1 << 18
#: queries per call of the fused CPU filter (its kernel ran 963 GFLOPS at 512, 984-993 at 1,024 and 985-1,007 at
#: 2,048 on 2 cores; with the running lists 998 at 4,096 against 981 at 2,048, and a pass of 4,000 MR rows took
#: 2.081-2.090 s against 2.117-2.138 s, no faster at 8,192); the bench's bound uses as many rows
FUSED_CPU_QUERIES = 4096
#: queries an index serves before ``filter="auto"`` packs its rows for the bf16 filter (packing 22,816 x 384 rows
#: took 0.10 s on 2 cores, what the bf16 filter saves over the fp32 one on about 2,000 queries)
BF16_WARM_QUERIES = 2048
#: flagged queries at most that the direct float64 distances resolve (each reads all rows once)
_FEW_QUERIES = 64


def _row_sq64(E: torch.Tensor, block: int = 4096) -> torch.Tensor:
    """Each row's float64 squared norm, ``(E.double() ** 2).sum(1)`` computed ``block`` rows at a time: the same
    values (each row's own sum), without the two ``[V, d]`` float64 temporaries."""
    out = torch.empty(E.shape[0], dtype=torch.float64, device=E.device)
    for s in range(0, E.shape[0], block):
        out[s : s + block] = (E[s : s + block].double() ** 2).sum(1)
    return out


class ExactIndex:
    """An fp32 matrix prepared for exact nearest-neighbour search (space.md §5).

    Args:
        matrix (`torch.Tensor` of shape `[V, k]`): the rows to search (converted to fp32, contiguous).
        device (`str`, defaults to `"cpu"`): where scores are computed.
        chunk_size (`int`, *optional*): positions per score tile (rounded up to a multiple of 64);
            by default as many as keep a tile of scores near 32 MB.
        filter (`str`, defaults to `"auto"`): ``"bf16"`` (the proven low-precision filter, CPU),
            ``"fp32"`` (space.md §5's reference filter) or ``"auto"`` (bf16 where it is available and fast,
            see :func:`bf16_filter_available`, and k ≤ ``BF16_MAX_K``). The result is the same exact
            answer for every choice.

    Example:

    >>> E = torch.tensor([[0.0, 0.0], [1.0, 2.0], [5.0, 5.0], [1.0, 2.0]])
    >>> ExactIndex(E).search(torch.tensor([[1.0, 2.0]]), 2).tolist()   # duplicates: lowest position first
    [[1, 3]]
    """

    def __init__(
        self,
        matrix: torch.Tensor,
        device: str | torch.device = "cpu",
        chunk_size: int | None = None,
        *,
        filter: FilterName = "auto",
    ) -> None:
        if matrix.ndim != 2 or matrix.shape[0] < 1:
            raise InvalidParameterError(f"matrix must be 2-D with at least one row, got shape {tuple(matrix.shape)}.")
        if chunk_size is not None and (
            isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1
        ):
            raise InvalidParameterError(f"chunk_size must be an int >= 1 or None, got {chunk_size!r}.")
        if filter not in FILTERS:
            raise InvalidParameterError(f"filter must be one of {list(FILTERS)}, got {filter!r}.")
        self.device = torch.device(device)
        # the same tensor object where no copy is needed, so that keys memoised per matrix (memo.matrix_key) are hits
        rows = matrix.detach() if matrix.requires_grad else matrix
        self.E = rows.to(self.device, torch.float32).contiguous()
        self.V, self.d = self.E.shape
        sq64 = _row_sq64(self.E)
        self.sq64 = sq64
        self.n32 = sq64.float().contiguous()
        r = math.sqrt(float(sq64.max()))
        self.R = math.nextafter(r, math.inf)
        self.chunk_size = chunk_size
        self.filter: FilterName = filter
        self.Vp = round_up(self.V, BLOCK)
        self._em2t: torch.Tensor | None = None
        self._fp32_pad: tuple[torch.Tensor, torch.Tensor] | None = None
        self._bf16: tuple[torch.Tensor, Bf16Constants] | None = None
        self._packed: PackedRows | None = None
        self._fp32_rows: Fp32Rows | None = None
        self._lock = threading.Lock()
        #: run everything but the matrix products on one thread (see :meth:`search`)
        self.serial_small_ops = True
        self._tc: tuple[tuple[int, int], TensorCoreOperands] | None = None
        #: queries the fused GPU path handed to the generic search (overflow, near-ties), since creation
        self.fallback_queries = 0
        self._served = 0  # queries searched so far (the bf16 filter's rows are packed once they pay off)

    @property
    def interval(self) -> float:
        """c of the certified interval [D − cD, D + cD] around a float64 squared distance D (space.md §5.4)."""
        return 2.0 * (self.d + 3) * U64

    # ------------------------------------------------------------------ prepared matrices (lazy)
    @property
    def Em2T(self) -> torch.Tensor:
        """−2·Eᵀ ``[d, V]`` fp32, contiguous (exact: power-of-two scaling); used by the samplers."""
        if self._em2t is None:
            with self._lock:
                if self._em2t is None:
                    self._em2t = (-2.0 * self.E).T.contiguous()
        return self._em2t

    def _fp32_operands(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(n32 padded with +inf, −2·Eᵀ padded with zero columns) to Vp positions."""
        with self._lock:
            if self._fp32_pad is None:
                pad = self.Vp - self.V
                n32 = torch.cat([self.n32, torch.full((pad,), math.inf, device=self.device)])
                em2t = torch.zeros((self.d, self.Vp), dtype=torch.float32, device=self.device)
                em2t[:, : self.V] = (-2.0 * self.E).T
                self._fp32_pad = (n32.contiguous(), em2t)
            return self._fp32_pad

    def _bf16_operands(self) -> tuple[torch.Tensor, Bf16Constants]:
        """:func:`~hf_textdp.search.bf16.bf16_operands` of the rows, built once."""
        with self._lock:
            if self._bf16 is None:
                self._bf16 = bf16_operands(self.E, self.sq64, self.Vp)
            return self._bf16

    def _packed_rows(self, k: int) -> PackedRows | None:
        """The rows packed for the fused bf16 kernel (:mod:`hf_textdp.cpu.bf16_filter`), or ``None`` where it does
        not run (no AVX-512 BF16, AMX, no compiler, native switch off) or the rows fill fewer than k blocks."""
        if self.device.type != "cpu" or -(-self.V // NB) < k or not fused_filter_available():
            return None
        with self._lock:
            if self._packed is None:
                self._packed = PackedRows.build(self.E, self.sq64)
            return self._packed

    def _avx2_rows(self, k: int) -> Fp32Rows | None:
        """The rows packed for the fused AVX2 fp32 filter (:mod:`hf_textdp.cpu.avx2_filter`), or ``None`` where it does
        not run: not a CPU, an explicit ``filter="fp32"`` (the torch reference), k above its lists' limit, no AVX2 and
        FMA or compiler, or the native switch off."""
        mode = self.filter if self.filter != "auto" else settings.search_filter()
        if self.device.type != "cpu" or mode != "auto" or k > AVX2_LIST_K or not avx2_filter_available():
            return None
        with self._lock:
            if self._fp32_rows is None:
                self._fp32_rows = Fp32Rows.build(self.E, self.sq64)
            return self._fp32_rows

    def _use_bf16(self, k: int = 1, queries: int = BF16_WARM_QUERIES) -> bool:
        """Whether a search for ``k`` neighbours of ``queries`` more queries runs the bf16 filter (the answer is the
        same either way)."""
        if self.device.type != "cpu":
            return False
        mode = self.filter if self.filter != "auto" else settings.search_filter()
        if mode == "fp32":
            return False
        if mode == "bf16":
            return _bf16_model_ok()
        # "auto": only where the product is large enough for the filter to pay off, and for small k: the
        # bf16 bound is ~100× the fp32 one, so for larger k it keeps many more candidates than the k + 1
        # or so of the fp32 filter, and verifying them costs more than the cheaper product saves
        # and once the queries pay for packing the rows (~0.1 s for 22,816 x 384, the time the bf16 filter saves
        # over fp32 on ~2,000 queries): a 1-row run packs nothing, a long run packs at its first large batch
        if self._bf16 is None and self._packed is None and self._served + queries < BF16_WARM_QUERIES:
            return False
        return k <= BF16_MAX_K and self.V * self.d >= 2**18 and bf16_filter_available(self.device)

    # ------------------------------------------------------------------ public
    def search(
        self,
        Q: torch.Tensor,
        k: int = 1,
        exclude: torch.Tensor | None = None,
        chunk_size: int | None = None,
        query_block: int | None = None,
    ) -> torch.Tensor:
        """Return ``[B, k]`` int64 positions of the k nearest rows, ordered by (distance, position).

        Args:
            Q (`torch.Tensor` `[B, d]`): queries (converted to fp32).
            k (`int`, defaults to 1): neighbours per query.
            exclude (`torch.Tensor` `[B]`, *optional*): a position per query to leave out (or −1).
            chunk_size (`int`, *optional*): positions per score tile (overrides the index's).
            query_block (`int`, *optional*): queries per tile (default: from the tile budget).
        """
        if k < 1 or k > self.V - (1 if exclude is not None else 0):
            raise InvalidParameterError(f"k must be in [1, {self.V}], got {k}.")
        Q = Q.to(self.device, torch.float32)
        if Q.ndim != 2 or Q.shape[1] != self.d:
            raise InvalidParameterError(f"queries must have shape [B, {self.d}], got {tuple(Q.shape)}.")
        if Q.shape[0] == 0:
            return torch.empty((0, k), dtype=torch.int64)
        Q = Q.contiguous()
        if k == 1 and exclude is None and self._use_tensor_cores():
            return self._search_fused(Q, chunk_size, query_block)  # flags non-finite queries, checked with the rest
        check_range(Q, self.R)
        return self._search_generic(Q, k, exclude, chunk_size, query_block)

    def _search_generic(
        self,
        Q: torch.Tensor,
        k: int,
        exclude: torch.Tensor | None,
        chunk_size: int | None,
        query_block: int | None,
    ) -> torch.Tensor:
        """:meth:`search` by the chunked filter and verification (any k, any device; Q finite), ``[B, k]`` on CPU."""
        use_bf16 = self._use_bf16(k, int(Q.shape[0]))
        self._served += int(Q.shape[0])
        L, qb = self._tiling(chunk_size, query_block, 2 if use_bf16 else 4)
        if query_block is None and use_bf16 and self._packed_rows(k) is not None:
            qb = FUSED_CPU_QUERIES  # no tile of scores: lists (k ≤ 2) or [queries, V/32] maxima
        elif query_block is None and not use_bf16 and self._avx2_rows(k) is not None:
            qb = FUSED_CPU_QUERIES  # the AVX2 kernel's lists: no tile of scores either
        # The work around the products is many medium-sized passes; on a CPU whose cores are shared
        # with other processes each multi-threaded pass can wait a scheduler slice for its second
        # thread, so they run on one thread and only the products use the pool (same results).
        threads = torch.get_num_threads()
        serial = self.serial_small_ops and self.device.type == "cpu" and threads > 1
        gemm_threads = threads if serial else None
        out = []
        with exact_fp32_matmul(), torch_threads(1 if serial else None):
            for b0 in range(0, Q.shape[0], qb):
                Qb = Q[b0 : b0 + qb]
                ex = None if exclude is None else exclude[b0 : b0 + qb].to(self.device, torch.int64)
                rows, pos = self._filter(Qb, k, ex, L, use_bf16, gemm_threads)
                out.append(verify(self.E, self.interval, Qb, rows, pos, k, Qb.shape[0]))
        return torch.cat(out, 0).cpu()

    # ------------------------------------------------------------------ the GPU path
    def _use_tensor_cores(self) -> bool:
        """Whether ``k = 1`` searches run the fused GPU kernels (:mod:`hf_textdp.gpu.nearest`): CUDA with Triton,
        and tensor cores that meet the bound's accumulation model (checked once per device)."""
        mode = self.filter if self.filter != "auto" else settings.search_filter()
        return mode != "fp32" and triton_ready(self.device) and tensor_core_model_holds(self.device)

    def _tensor_core_operands(self) -> TensorCoreOperands:
        _, BN, BK, _, _, _ = tile_config()
        with self._lock:
            key = (BN, BK)
            if self._tc is None or self._tc[0] != key:
                self._tc = (key, TensorCoreOperands.build(self.E, self.sq64, BN, BK))
            return self._tc[1]

    def _search_fused(self, Q: torch.Tensor, chunk_size: int | None, query_block: int | None) -> torch.Tensor:
        """k = 1 by the fused filter and float64 verification on the device; flagged queries (list overflow,
        a near-tie, a huge query) by :meth:`_resolve_few`, or the generic search. One host synchronisation
        (reading the flags) where none is flagged."""
        ops = self._tensor_core_operands()
        positions, flags = [], []
        for s in range(0, Q.shape[0], FUSED_QUERIES):
            res = fused_nearest(Q[s : s + FUSED_QUERIES], self.E, self.R, ops)
            if res is None:  # cannot happen after _use_tensor_cores(): Triton is there
                raise RuntimeError("the fused GPU search could not run")
            positions.append(res[0])
            flags.append(res[1])
        pos = torch.cat(positions)
        bad = torch.nonzero(torch.cat(flags)).squeeze(1)
        if bad.numel():
            Qb = Q[bad]
            check_range(Qb, self.R)
            self.fallback_queries += int(bad.numel())
            found, done = self._resolve_few(Qb)
            rest = torch.nonzero(~done).squeeze(1)
            if rest.numel():
                found[rest] = self._search_generic(Qb[rest], 1, None, chunk_size, query_block)[:, 0].to(found.device)
            pos[bad] = found
        return pos[:, None].cpu()

    def _resolve_few(self, Q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The nearest row of a few flagged queries by direct float64 distances to every row, without the
        generic search's many small passes: (positions, resolved) on the device.

        D_c = Σ(q − e_c)² errs by at most (d + 2)u₆₄·D_c, so the smallest (D, position) is the answer when every
        other row's D(1 − c) exceeds its D(1 + c), c = 2(d + 3)u₆₄ (as the fused verification); or when every
        row within that band is bit for bit its row (duplicates: equal distances, the lowest position wins).
        Other queries (a genuine near-tie of distinct rows) are not resolved: the generic search takes them.
        """
        n = Q.shape[0]
        if n > _FEW_QUERIES:
            none = torch.zeros(n, dtype=torch.int64, device=Q.device)
            return none, none.bool()
        D = torch.stack([self._dist2_all(q) for q in Q.double()])  # [n, V]
        ar = torch.arange(self.V, device=Q.device)
        c = self.interval
        dmin = D.min(1, keepdim=True).values
        best = torch.where(D == dmin, ar, self.V).min(1).values
        band = D * (1.0 - c) <= dmin * (1.0 + c)
        alone = band.sum(1) == 1
        # rows at distance 0 from the best row are that row (fp32 coordinates: a difference squares to > 0)
        twin = torch.stack([self._dist2_all(e) == 0 for e in self.E[best].double()])
        same = (~band | twin).all(1)
        return best, alone | same

    def _dist2_all(self, q: torch.Tensor) -> torch.Tensor:
        """Σ(q − e_c)² in float64 for every row c, ``[V]``, over row chunks of at most 2²⁴ elements."""
        rows = max(1, (1 << 24) // max(self.d, 1))
        return torch.cat([((self.E[s : s + rows].double() - q) ** 2).sum(1) for s in range(0, self.V, rows)])

    # ------------------------------------------------------------------ internals
    def _tiling(self, chunk_size: int | None, query_block: int | None, nbytes: int) -> tuple[int, int]:
        """(chunk length, a multiple of BLOCK; queries per block)."""
        c = chunk_size if chunk_size is not None else self.chunk_size
        if c is not None:
            L = min(round_up(int(c), BLOCK), self.Vp)
        else:
            L = self.Vp  # whole rows of scores when a few hundred of them fit the tile budget
            if 256 * self.Vp * nbytes > _TILE_BYTES:
                L = max(BLOCK, min(self.Vp, round_up(_TILE_BYTES // (256 * nbytes), BLOCK)))
        if query_block is not None:
            qb = max(1, int(query_block))
        else:
            # whole multiples of 128 rows, at most 512: oneDNN's bf16 product ran 880 GFLOPS at 512 rows
            # and 457 at 550 on this 2-core EPYC (AVX-512 BF16), for the same work
            qb = max(16, min(512, _TILE_BYTES // (L * nbytes)))
            if qb >= 128:
                qb -= qb % 128
        return L, qb

    def _filter(
        self,
        Qb: torch.Tensor,
        k: int,
        exclude: torch.Tensor | None,
        L: int,
        use_bf16: bool,
        gemm_threads: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Candidate (query row, position) pairs that provably contain every query's exact top k."""
        if use_bf16:
            qmax = float(torch.linalg.vector_norm(Qb, dim=1).max())
            if qmax * self.R + self.R * self.R < BF16_MAX_MAGNITUDE:
                packed = self._packed_rows(k)
                if packed is not None:
                    threads = gemm_threads or torch.get_num_threads()
                    rows, pos, counts = fused_candidates(packed, Qb, k, threads, exclude)
                else:
                    rows, pos, counts = self._scan(Qb, k, exclude, L, bf16=True, gemm_threads=gemm_threads)
                heavy = counts > max(BF16_MAX_CANDIDATES, 4 * k)
                if not bool(heavy.any()):
                    return rows, pos
                # near-duplicate clusters: the fp32 bound is ~100× tighter, so filter those queries again
                hq = torch.nonzero(heavy).squeeze(1)
                keep = ~heavy[rows]
                ex = None if exclude is None else exclude[hq]
                r2, p2, _ = self._scan(Qb[hq], k, ex, L, bf16=False, gemm_threads=gemm_threads)
                return torch.cat([rows[keep], hq[r2]]), torch.cat([pos[keep], p2])
        fp32_rows = self._avx2_rows(k)
        if fp32_rows is not None:  # the fused AVX2 filter; queries whose list overflowed by the torch filter
            rows, pos, dropped = avx2_candidates(fp32_rows, Qb, k, gemm_threads or torch.get_num_threads(), exclude)
            if dropped.numel():
                ex = None if exclude is None else exclude[dropped]
                r2, p2, _ = self._scan(Qb[dropped], k, ex, L, bf16=False, gemm_threads=gemm_threads)
                rows, pos = torch.cat([rows, dropped[r2]]), torch.cat([pos, p2])
            return rows, pos
        rows, pos, _ = self._scan(Qb, k, exclude, L, bf16=False, gemm_threads=gemm_threads)
        return rows, pos

    def _scan(
        self,
        Qb: torch.Tensor,
        k: int,
        exclude: torch.Tensor | None,
        L: int,
        *,
        bf16: bool,
        gemm_threads: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One filter pass over all positions: (rows, positions, candidates per row).

        Scores are oriented so that larger is better (the bf16 score t̃, or −s̃ for fp32). Every chunk's
        scores go through one strided block-extremum pass; the k-th best block extremum so far gives a
        running threshold (a threshold from fewer positions is lower, so it keeps a superset), the
        blocks that reach it are read again, and the final threshold trims the candidates at the end.
        Comparisons run in the scores' own format against the threshold rounded outwards, and a lower
        bound on a block's best score in place of the exact one only lowers the threshold, so every
        shortcut below keeps a superset of the true top k.
        """
        B = Qb.shape[0]
        dev = Qb.device
        G = BLOCK if self.Vp // BLOCK >= 4 * k else 1
        if bf16:
            EaT, consts = self._bf16_operands()
            Qa = torch.zeros((B, EaT.shape[0]), dtype=torch.bfloat16, device=dev)
            Qa[:, : self.d] = Qb  # round to nearest even
            Qa[:, self.d : self.d + 2] = 1.0
            q_hat = Qa[:, : self.d].double()
            qh_norm = torch.linalg.vector_norm(q_hat, dim=1)
            qr_norm = torch.linalg.vector_norm(Qb.double() - q_hat, dim=1)
            bound = bf16_filter_bound(qh_norm, qr_norm, **dataclasses.asdict(consts))
            buf = torch.empty((B, L), dtype=torch.bfloat16, device=dev)
        else:
            n32p, em2tp = self._fp32_operands()
            qn = torch.linalg.vector_norm(Qb.double(), dim=1)
            bound = 2.0 * (self.d + 3) * U32 * (self.R * self.R + 2.0 * qn * self.R)  # η of space.md §5
            buf = torch.empty((B, L), dtype=torch.float32, device=dev)
        best = torch.full((B, k), -math.inf, dtype=torch.float64, device=dev)  # k best block scores so far
        found: Found = []
        for s in range(0, self.Vp, L):
            e = min(s + L, self.Vp)
            Lc = e - s
            nbc = Lc // G
            X = buf.view(-1)[: B * Lc].view(B, Lc)  # contiguous, even for a short last chunk
            with torch_threads(gemm_threads):
                if bf16:
                    torch.mm(Qa, EaT[:, s:e], out=X)
                else:
                    torch.addmm(n32p[s:e], Qb, em2tp[:, s:e], out=X)
            if exclude is not None:
                inside = (exclude >= s) & (exclude < e)
                if bool(inside.any()):
                    r_in = torch.nonzero(inside).squeeze(1)
                    X[r_in, exclude[r_in] - s] = -math.inf if bf16 else math.inf
            X3 = X.view(B, G, nbc)
            if bf16 and G > 1:
                best = chunk_bf16(X3, best, bound, s, found)
            else:
                best = self._chunk_exact_order(X3, best, bound, s, found, bf16)
        thr = threshold(best[:, k - 1], bound, bf16)
        if found:
            rows = torch.cat([f[0] for f in found])
            pos = torch.cat([f[1] for f in found])
            val = torch.cat([f[2] for f in found])
            keep = (val >= thr[rows]) & (pos < self.V)
            rows, pos = rows[keep], pos[keep]
        else:
            rows = pos = torch.empty(0, dtype=torch.int64, device=dev)
        counts = torch.bincount(rows, minlength=B)
        return rows, pos, counts

    def _chunk_exact_order(
        self, X3: torch.Tensor, best: torch.Tensor, bound: torch.Tensor, s: int, found: Found, bf16: bool
    ) -> torch.Tensor:
        """One chunk ``[B, G, nbc]`` whose scores order like their values (fp32, or bf16 with G = 1).

        ``best`` holds each query's k best block scores so far and ``found`` collects the candidates of
        positions ``s + …``. fp32 scores are s̃ (smaller is better): the oriented score is −s̃, and
        "−s̃ ≥ thr" is tested as "s̃ ≤ lim" with lim = −thr rounded up to fp32.
        """
        k, nbc = best.shape[1], X3.shape[2]
        if bf16:  # G == 1: every position is its own block (tiny matrices)
            bm = X3[:, 0, :].double()
            best = top_k(best, bm, k)
            thr = threshold(best[:, k - 1], bound, True)
            hr, hj = torch.nonzero(bm >= thr[:, None], as_tuple=True)
            found.append((hr, hj + s, bm[hr, hj]))
            return best
        mins = X3.amin(1) if X3.shape[1] > 1 else X3[:, 0, :]  # [B, nbc] fp32
        kth = mins.topk(k, dim=1, largest=False).values if k > 1 and mins.shape[1] >= k else None
        if kth is not None:
            cand = -kth.double()
        elif k == 1:
            cand = -mins.amin(1, keepdim=True).double()
        else:  # fewer blocks in this chunk than k
            cand = -mins.double()
        best = top_k(best, cand, k)
        thr = threshold(best[:, k - 1], bound, False)
        lim = round_up_fp32(-thr)
        hr, hj = torch.nonzero(mins <= lim[:, None], as_tuple=True)
        if hr.numel():
            vals = X3[hr, :, hj]  # [H, G]: positions hj + i·nbc of the chunk
            hit, gi = torch.nonzero(vals <= lim[hr][:, None], as_tuple=True)
            found.append((hr[hit], hj[hit] + gi * nbc + s, -vals[hit, gi].double()))
        return best
