"""The exact nearest-neighbour index (the algorithm: :mod:`hf_textdp.search`): the filter's tiling and scan,
the fused GPU path, and the verification of the candidates (:mod:`~hf_textdp.search.verify`)."""

from __future__ import annotations

import math
import os
import threading
from typing import Literal

import torch

from .. import settings
from ..cpu.avx2_filter import LIST_K as AVX2_LIST_K
from ..cpu.avx2_filter import Fp32Rows, avx2_candidates, avx2_filter_available
from ..cpu.bf16_filter import NB, PackedRows, fused_candidates, fused_filter_available
from ..cpu.features import effective_flags
from ..cpu.int8_filter import LIST_K as INT8_LIST_K
from ..cpu.int8_filter import Int8Rows, int8_candidates
from ..cpu.int8_filter import kernel_kind as int8_kind
from ..errors import InvalidParameterError
from ..gpu import triton_ready
from ..gpu.nearest import TensorCoreOperands, fused_nearest, tensor_core_model_holds, tile_config
from ..utils.threads import torch_threads
from .bf16 import BF16_MAX_CANDIDATES, BF16_MAX_K, _bf16_model_ok, bf16_filter_available
from .bounds import BF16_MAX_MAGNITUDE, U64, check_range, exact_fp32_matmul, round_up
from .scan import TorchFilter
from .verify import verify


__all__ = ["BLOCK", "FILTERS", "FUSED_CPU_QUERIES", "FUSED_QUERIES", "ExactIndex", "FilterName", "int8_filter_runs"]


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
#: the filter choices; "auto" takes the fastest native one: int8 where its kernel runs (not on AMX CPUs, whose bf16
#: tiles are faster), else bf16 where it is available and fast, else fp32
FILTERS = ("auto", "int8", "bf16", "fp32")
FilterName = Literal["auto", "int8", "bf16", "fp32"]
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


def int8_filter_runs(device: str | torch.device = "cpu") -> bool:
    """Whether ``filter="auto"`` searches of large products (V·d ≥ 2¹⁸, k ≤ 4) on ``device`` run the int8 filter: a
    CPU whose flags give it a kernel (:func:`~hf_textdp.cpu.int8_filter.kernel_kind`: VNNI, else AVX2) and no AMX
    (whose bf16 tiles are faster), with the ``search_filter`` switch at ``auto`` or ``int8``."""
    return (
        torch.device(device).type == "cpu"
        and settings.search_filter() in ("auto", "int8")
        and int8_kind() is not None
        and "amx_bf16" not in effective_flags()
    )


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
        filter (`str`, defaults to `"auto"`): ``"int8"`` (the int8 filter where its kernel runs, CPU, k ≤ 4),
            ``"bf16"`` (the proven low-precision filter, CPU), ``"fp32"`` (space.md §5's reference filter) or
            ``"auto"`` (int8 for large products where :func:`int8_filter_runs`, else bf16 where it is available
            and fast, see :func:`bf16_filter_available`, and k ≤ ``BF16_MAX_K``). The result is the same exact
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
        r = math.sqrt(float(sq64.max()))
        self.R = math.nextafter(r, math.inf)
        self.chunk_size = chunk_size
        self.filter: FilterName = filter
        self.Vp = round_up(self.V, BLOCK)
        self._torch = TorchFilter(self.E, sq64, self.Vp, self.R, BLOCK)
        self.n32 = self._torch.n32
        self._em2t: torch.Tensor | None = None
        self._int8: Int8Rows | None = None
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

    def _mode(self) -> str:
        """The filter this index asks for: its own, or the ``search_filter`` switch where it says ``"auto"``."""
        return self.filter if self.filter != "auto" else settings.search_filter()

    def _int8_rows(self, k: int, queries: int = BF16_WARM_QUERIES) -> Int8Rows | None:
        """The rows quantised for the int8 filter (:mod:`hf_textdp.cpu.int8_filter`), or ``None`` where it does not run
        for a search of ``k`` neighbours of ``queries`` more queries: not a CPU, k above its lists' limit, no kernel
        for this CPU's flags (VNNI, else AVX2), or a filter other than ``"int8"`` asked for; ``"auto"`` also leaves it
        to AMX CPUs' bf16 tiles and to small products, and packs the rows only once the queries pay for it (as the
        bf16 filter: a 1-row run packs nothing)."""
        mode = self._mode()
        if self.device.type != "cpu" or k > INT8_LIST_K or mode not in ("auto", "int8"):
            return None
        kind = int8_kind()
        if kind is None:
            return None
        if mode == "auto" and (
            "amx_bf16" in effective_flags()
            or self.V * self.d < 2**18
            or (self._int8 is None and self._served + queries < BF16_WARM_QUERIES)
        ):
            return None
        with self._lock:
            if self._int8 is None or self._int8.kind != kind:
                self._int8 = Int8Rows.build(self.E, self.sq64, kind)
            return self._int8

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
        mode = self._mode()
        if self.device.type != "cpu" or mode not in ("auto", "int8") or k > AVX2_LIST_K or not avx2_filter_available():
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
        mode = self._mode()
        if mode == "fp32":
            return False
        if mode == "bf16":
            return _bf16_model_ok()
        # "auto": only where the product is large enough for the filter to pay off, and for small k: the
        # bf16 bound is ~100× the fp32 one, so for larger k it keeps many more candidates than the k + 1
        # or so of the fp32 filter, and verifying them costs more than the cheaper product saves
        # and once the queries pay for packing the rows (~0.1 s for 22,816 x 384, the time the bf16 filter saves
        # over fp32 on ~2,000 queries): a 1-row run packs nothing, a long run packs at its first large batch
        if not self._torch.bf16_ready and self._packed is None and self._served + queries < BF16_WARM_QUERIES:
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
        int8 = self._int8_rows(k, int(Q.shape[0]))
        use_bf16 = self._use_bf16(k, int(Q.shape[0]))
        self._served += int(Q.shape[0])
        L, qb = self._tiling(chunk_size, query_block, 2 if use_bf16 else 4)
        if query_block is None and int8 is not None:
            qb = FUSED_CPU_QUERIES  # the int8 kernel's lists: no tile of scores
        elif query_block is None and use_bf16 and self._packed_rows(k) is not None:
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
                if int8 is not None:
                    rows, pos = self._filter_int8(int8, Qb, k, ex, L, use_bf16, gemm_threads)
                else:
                    rows, pos = self._filter(Qb, k, ex, L, use_bf16, gemm_threads)
                out.append(verify(self.E, self.interval, Qb, rows, pos, k, Qb.shape[0]))
        return torch.cat(out, 0).cpu()

    # ------------------------------------------------------------------ the GPU path
    def _use_tensor_cores(self) -> bool:
        """Whether ``k = 1`` searches run the fused GPU kernels (:mod:`hf_textdp.gpu.nearest`): CUDA with Triton,
        and tensor cores that meet the bound's accumulation model (checked once per device)."""
        return self._mode() != "fp32" and triton_ready(self.device) and tensor_core_model_holds(self.device)

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

    def _filter_int8(
        self,
        rows8: Int8Rows,
        Qb: torch.Tensor,
        k: int,
        exclude: torch.Tensor | None,
        L: int,
        use_bf16: bool,
        gemm_threads: int | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_filter` by the int8 kernel; queries whose list overflowed (clusters of near-duplicate rows) by
        :meth:`_filter`, and queries too large for its scales' range (the bf16 filter's) likewise."""
        qmax = float(torch.linalg.vector_norm(Qb, dim=1).max())
        if qmax * self.R + self.R * self.R >= BF16_MAX_MAGNITUDE:
            return self._filter(Qb, k, exclude, L, use_bf16, gemm_threads)
        threads = gemm_threads or torch.get_num_threads()
        rows, pos, dropped = int8_candidates(rows8, Qb, k, threads, exclude)
        if dropped.numel():
            ex = None if exclude is None else exclude[dropped]
            r2, p2 = self._filter(Qb[dropped], k, ex, L, use_bf16, gemm_threads)
            rows, pos = torch.cat([rows, dropped[r2]]), torch.cat([pos, p2])
        return rows, pos

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
                    rows, pos, counts = self._torch.scan(Qb, k, exclude, L, bf16=True, gemm_threads=gemm_threads)
                heavy = counts > max(BF16_MAX_CANDIDATES, 4 * k)
                if not bool(heavy.any()):
                    return rows, pos
                # near-duplicate clusters: the fp32 bound is ~100× tighter, so filter those queries again
                hq = torch.nonzero(heavy).squeeze(1)
                keep = ~heavy[rows]
                ex = None if exclude is None else exclude[hq]
                r2, p2, _ = self._torch.scan(Qb[hq], k, ex, L, bf16=False, gemm_threads=gemm_threads)
                return torch.cat([rows[keep], hq[r2]]), torch.cat([pos[keep], p2])
        fp32_rows = self._avx2_rows(k)
        if fp32_rows is not None:  # the fused AVX2 filter; queries whose list overflowed by the torch filter
            rows, pos, dropped = avx2_candidates(fp32_rows, Qb, k, gemm_threads or torch.get_num_threads(), exclude)
            if dropped.numel():
                ex = None if exclude is None else exclude[dropped]
                r2, p2, _ = self._torch.scan(Qb[dropped], k, ex, L, bf16=False, gemm_threads=gemm_threads)
                rows, pos = torch.cat([rows, dropped[r2]]), torch.cat([pos, p2])
            return rows, pos
        rows, pos, _ = self._torch.scan(Qb, k, exclude, L, bf16=False, gemm_threads=gemm_threads)
        return rows, pos
