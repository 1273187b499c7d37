"""Exact chunked nearest-neighbour search (space.md §5).

``ExactIndex(matrix).search(Q, k)`` returns, for each query row, the ``k`` positions with the
smallest *exact* squared distance ``‖q − e_c‖²`` (real arithmetic on the fp32 values), ties to the
lowest position. This equals float64 brute force whenever that brute force is itself exact, and is
the exact answer when it is not (space.md §5, cases N4/N5). The result never depends on the chunk size,
the query block, the thread count, the device or which filter ran.

Algorithm (filter and verify):

1. **Filter.** Scores of every position by one matrix product per chunk of positions, in one of two
   precisions, each with a proven bound on its error (below). Positions are grouped in blocks of
   ``G`` (64) strided positions; one vectorised pass takes every block's best score, the k-th best
   block score bounds the k-th best score, and only blocks that can hold a winner are read again.
   So the work beyond the product is one pass over the scores plus O(candidates).

   * ``fp32`` (space.md §5's reference, and always on CUDA): ``s̃_c = fl(‖e_c‖² − 2 q·e_c)`` by
     ``addmm`` with TF32 and reduced-precision reductions off; ``|s̃_c − s_c| ≤ 0.51·η`` with
     ``η = 2(d+3)u(R² + 2‖q‖R)``, u = 2⁻²⁴, R = max row norm; candidates ``s̃_c ≤ m + 2η``.
   * ``bf16`` (CPUs whose bf16 matrix product is fast, e.g. AMX): a bf16 product with fp32
     accumulation of an augmented matrix, ``P̃_c ≈ t_c = q·e_c − ‖e_c‖²/2`` (the nearest position has
     the largest t), with the bound of :func:`bf16_filter_bound` (proof there). When the filter keeps
     too many candidates for a query (near-duplicate clusters), that query is filtered again in fp32.

2. **Verify.** Float64 distances ``D_c = Σ (q_j − e_cj)²`` of the candidates, error ≤ (d+2)u₆₄·D;
   if the top-k intervals ``[D ± 2(d+3)u₆₄D]`` are disjoint from each other and from the rest they
   decide; otherwise exact rational arithmetic (``fractions.Fraction``) orders each group of
   overlapping intervals among the first k.

Memory is O(query_block·chunk + V·d): never V × V.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Literal

import numpy as np
import torch

from .cpu.avx2_filter import LIST_K as AVX2_LIST_K
from .cpu.avx2_filter import Fp32Rows, avx2_candidates, avx2_filter_available
from .cpu.bf16_filter import NB, PackedRows, fused_candidates, fused_filter_available
from .cpu.distances import pair_sqdist, top_of_pairs
from .cpu.features import native_bf16
from .errors import InvalidParameterError, NumericalRangeError
from .gpu import triton_ready
from .gpu.nearest import TensorCoreOperands, fused_nearest, tensor_core_model_holds, tile_config
from .utils.rounding import round_up_fp32
from .utils.threads import torch_threads


__all__ = ["ExactIndex", "exact_fp32_matmul", "bf16_filter_bound", "bf16_filter_available", "FILTERS"]


def _single_thread_after_fork() -> None:
    # torch's OpenMP pool does not survive fork(): a forked child (datasets ``num_proc``, DataLoader
    # workers) that runs a multi-threaded GEMM deadlocks. Each forked worker is one process per core
    # anyway, so it uses one intra-op thread.
    torch.set_num_threads(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_single_thread_after_fork)

U32 = 2.0**-24
U64 = 2.0**-53
UBF16 = 2.0**-8  # unit roundoff of bfloat16 (8-bit significand, round to nearest even)

#: positions per block of the block-extremum pass (strided: block j of a chunk of L positions holds
#: positions j, j + L/G, j + 2L/G, …, so the pass is a vectorised reduction over rows of memory)
BLOCK = 64
#: the filter choices; "auto" takes bf16 where it is available and fast, else fp32
FILTERS = ("auto", "bf16", "fp32")
FilterName = Literal["auto", "bf16", "fp32"]
#: a query whose bf16 filter keeps more candidates than this (or than 4k) is filtered again in fp32
BF16_MAX_CANDIDATES = 256
#: ``filter="auto"`` takes the bf16 filter for k up to this only (measured on all-MiniLM-L6-v2 with an
#: AMX CPU: bf16 is 1.4× faster at k = 2, even at k = 4 and 1.9× slower at k = 16, where it keeps ~155
#: candidates a query against ~17 for fp32)
BF16_MAX_K = 4
#: (query, position) pairs per block of the float64 verification (a block of float64 rows stays in cache)
_VERIFY_PAIRS = 256
#: bytes of scores per (query block × chunk) tile when the chunk size is automatic
_TILE_BYTES = 32 * 2**20
#: queries with ‖q‖R + R² above this skip the bf16 filter (scores stay far from the padding rows'
#: −1e30 and from fp32 overflow); the fp32 filter takes them
_BF16_MAX_MAGNITUDE = 2.0**60
#: queries per launch of the fused GPU search (its buffers are O(queries · d))
FUSED_QUERIES = 1 << 18
#: queries per call of the fused CPU filter (its kernel ran 963 GFLOPS at 512, 984-993 at 1,024 and 985-1,007 at
#: 2,048 on 2 cores; with the running lists 998 at 4,096 against 981 at 2,048, and a pass of 4,000 MR rows took
#: 2.081-2.090 s against 2.117-2.138 s, no faster at 8,192); the bench's bound uses as many rows
FUSED_CPU_QUERIES = 4096
#: flagged queries at most that the direct float64 distances resolve (each reads all rows once)
_FEW_QUERIES = 64
#: queries with ‖q‖R + R² above this are refused: fp32 scores would come within 2⁸ of overflow (2¹²⁸)
_FP32_MAX_MAGNITUDE = 2.0**120
_PAD_NU = 1.0e30  # half squared norm of the padding rows: their bf16 score is −1e30, never a candidate
#: candidates a filter pass collects: (query rows, positions, oriented scores), one triple per chunk
_Found = list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


@contextmanager
def exact_fp32_matmul() -> Iterator[None]:
    """Disable TF32 / bf16 reduced-precision fp32 matmuls for the duration (space.md §5)."""
    prev_prec = torch.get_float32_matmul_precision()
    prev_cuda = torch.backends.cuda.matmul.allow_tf32
    prev_cudnn = torch.backends.cudnn.allow_tf32
    prev_bf16_red = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    new_api = []  # torch >= 2.9: per-backend fp32 precision, which overrides the global setting
    for obj in (getattr(torch.backends.mkldnn, "matmul", None), getattr(torch.backends.cuda, "matmul", None)):
        if obj is not None and hasattr(obj, "fp32_precision"):
            new_api.append((obj, obj.fp32_precision))
    try:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        for obj, _ in new_api:
            obj.fp32_precision = "ieee"
        yield
    finally:
        for obj, prev in new_api:
            obj.fp32_precision = prev
        torch.set_float32_matmul_precision(prev_prec)
        torch.backends.cuda.matmul.allow_tf32 = prev_cuda
        torch.backends.cudnn.allow_tf32 = prev_cudnn
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = prev_bf16_red


def _exact_sqdist(q: np.ndarray, e: np.ndarray) -> Fraction:
    return sum(((Fraction(float(a)) - Fraction(float(b))) ** 2 for a, b in zip(q, e, strict=True)), Fraction(0))


# --------------------------------------------------------------------------- the bf16 filter bound
@dataclasses.dataclass(frozen=True)
class _Bf16Constants:
    """Per-matrix constants of the bf16 filter bound (float64, rounded up where they bound)."""

    rho: float  # max_c ‖e_c − bf16(e_c)‖
    e_hat: float  # max_c ‖bf16(e_c)‖
    nu_max: float  # max_c ‖e_c‖²/2 (float64)
    terms_max: float  # max_c |h_c| + |l_c| (the two bf16 parts of ‖e_c‖²/2)
    n_terms: int  # d + 2 non-zero products per score


def bf16_filter_bound(
    q_hat_norm: torch.Tensor,
    q_res_norm: torch.Tensor,
    *,
    rho: float,
    e_hat: float,
    nu_max: float,
    terms_max: float,
    n_terms: int,
) -> torch.Tensor:
    """Per-query bound β with |t_c − Ã_c| ≤ β for every position c (float64, one value per query).

    **Setting.** q, e_c are the fp32 query and row; t_c = q·e_c − ν_c with ν_c = ‖e_c‖²/2, so that
    ‖q − e_c‖² = ‖q‖² − 2t_c and the nearest positions are those with the largest t. Write
    q = q̂ + r_q and e_c = ê_c + r_c with q̂ = bf16(q), ê_c = bf16(e_c) (round to nearest); r_q and r_c
    are exact fp32 numbers (the low bits). ν64_c is ν_c in float64, split as h_c = bf16(ν64_c) and
    l_c = bf16(ν64_c − h_c). The filter multiplies the bf16 rows [q̂, 1, 1] and [ê_c, −h_c, −l_c] with
    fp32 accumulation: Ã_c ≈ A_c = q̂·ê_c − h_c − l_c, and stores P̃_c = bf16(Ã_c).

    **Claim.** |t_c − Ã_c| ≤ β_in + β_acc + β_ν + β_abs =: β, where

    * β_in = ‖q̂‖·ρ + ‖r_q‖·(Ê + ρ), with ρ = max_c‖r_c‖, Ê = max_c‖ê_c‖. Proof: q·e_c − q̂·ê_c =
      q̂·r_c + r_q·ê_c + r_q·r_c exactly; apply Cauchy–Schwarz to each term. (This is space.md §5's
      input-rounding bound ((1 + u_in)² − 1)·Σ|q_j||e_cj| made sharper with the actual residuals.)
    * β_acc = γ_n·(‖q̂‖·Ê + max_c(|h_c| + |l_c|)), γ_n = n·u/(1 − n·u), u = 2⁻²⁴, n = d + 2. Proof: a
      product of two bf16 numbers (8-bit significands) has at most 16 significant bits, so it is exact
      in fp32; n exact terms summed in fp32 in any order, with or without FMA, err by at most
      γ_n·Σ|terms| (Higham, Accuracy and Stability, eq. 3.5), and Σ|q̂_j ê_cj| ≤ ‖q̂‖‖ê_c‖.
    * β_ν = (2u_bf16² + (d + 3)·u₆₄)·ν_max·1.01: |ν_c − ν64_c| ≤ (d+1)u₆₄ν_c (float64 sum of d squares
      of fp32 numbers, each square exact); ν64_c − h_c is exact (Sterbenz) and at most 2u_bf16·ν64_c
      even if the conversion to bf16 rounds twice (through fp32), so |ν64_c − h_c − l_c| ≤ 2u_bf16²·ν64_c.

    The bound uses the residuals r_q, r_c themselves, so it holds whatever rounding produced q̂ and ê_c.
    * β_abs = 2⁻¹⁰⁰·(1 + ‖q̂‖ + Ê): covers underflow (products or residuals below 2⁻¹²⁶, flushed or
      gradual), which the relative bounds above do not; every such effect is below n·2⁻¹²⁶·(…).

    The stored score adds one rounding to bf16: |P̃_c − Ã_c| ≤ u_bf16·|Ã_c| (u_bf16 = 2⁻⁸), so
    lo(P̃_c) ≤ Ã_c ≤ hi(P̃_c) with lo(x) = x/(1 + u), hi(x) = x/(1 − u) for x ≥ 0 and the reverse for
    x < 0 (both increasing). See :meth:`ExactIndex._bf16_threshold` for how the candidates follow.

    The model assumed of the library (checked at run time by :func:`bf16_filter_available` on a
    test product before the filter is ever used): bf16 inputs, products exact, fp32 accumulation, one
    round-to-nearest of the result to bf16 — what oneDNN's AMX and AVX512-BF16 kernels do.
    """
    u = U32
    n = n_terms
    gamma_n = n * u / (1.0 - n * u)
    beta_in = q_hat_norm * rho + q_res_norm * (e_hat + rho)
    beta_acc = gamma_n * (q_hat_norm * e_hat + terms_max)
    beta_nu = (2.0 * UBF16 * UBF16 + (n + 1) * U64) * nu_max * 1.01
    beta_abs = 2.0**-100 * (1.0 + q_hat_norm + e_hat)
    beta: torch.Tensor = (beta_in + beta_acc + beta_nu + beta_abs) * (1.0 + 2.0**-20)
    return beta


def _bf16_lo(x: torch.Tensor) -> torch.Tensor:
    """Smallest Ã consistent with the stored bf16 value x (|x − Ã| ≤ u|Ã|)."""
    return torch.where(x >= 0, x / (1.0 + UBF16), x / (1.0 - UBF16))


def _bf16_hi_inverse(y: torch.Tensor) -> torch.Tensor:
    """Smallest x with hi(x) ≥ y, hi(x) = x/(1 − u) for x ≥ 0 and x/(1 + u) for x < 0."""
    return torch.where(y >= 0, y * (1.0 - UBF16), y * (1.0 + UBF16))


def _bf16_key_at_least(x: torch.Tensor) -> torch.Tensor:
    """int16 pattern of the smallest bf16 number ≥ x, for x > 0 (float64 in)."""
    y = x.to(torch.bfloat16)  # round to nearest: at most one step below x
    bits = y.view(torch.int16)
    return torch.where(y.double() < x, bits + 1, bits)  # x > 0: the next bf16 up is the next pattern


def _bf16_model_holds() -> bool:
    """Check the library model of :func:`bf16_filter_bound` on a test product shaped like a search tile.

    Random bf16 operands spanning 2¹² in magnitude, with cancellation: every stored result must lie
    within u_bf16·|Ã| + γ_n·Σ|terms| of the exact sum (a bf16 accumulator, or inexact products, would
    fail). Entry (0, 0) is a probe whose exact sum 1 + 2⁻⁷ + 2⁻⁸ + 2⁻¹² lies between two bf16 numbers:
    rounding to nearest gives 1 + 2⁻⁶, truncation 1 + 2⁻⁷.
    """
    g = torch.Generator().manual_seed(1234)
    m, n, p = 64, 416, 1024
    a64 = torch.randn(m, n, generator=g, dtype=torch.float64) * torch.exp2(
        torch.randint(-6, 7, (m, n), generator=g).double()
    )
    b64 = torch.randn(n, p, generator=g, dtype=torch.float64) * torch.exp2(
        torch.randint(-6, 7, (n, p), generator=g).double()
    )
    a64[0] = 0.0
    a64[0, :2] = 1.0
    b64[:, 0] = 0.0
    b64[0, 0] = 1.0 + 2.0**-7
    b64[1, 0] = 2.0**-8 + 2.0**-12
    a, b = a64.to(torch.bfloat16), b64.to(torch.bfloat16)
    ref = a.double() @ b.double()  # float64 error ≤ n·u₆₄·Σ|terms|, far below the tolerance
    absum = a.double().abs() @ b.double().abs()
    with exact_fp32_matmul():
        got = torch.mm(a, b).double()
    gamma_n = n * U32 / (1 - n * U32)
    tol = UBF16 * (ref.abs() + gamma_n * absum) + gamma_n * absum
    if not bool(((got - ref).abs() <= tol * 1.001 + 1e-300).all()):
        return False
    nearest = float(torch.tensor(ref[0, 0].item(), dtype=torch.float32).to(torch.bfloat16))
    return float(got[0, 0]) == nearest == 1.0 + 2.0**-6


def bf16_filter_available(device: str | torch.device = "cpu") -> bool:
    """Whether the bf16 filter is exact *and* worth it on this process's ``device`` (cached).

    CPU only (CUDA keeps the fp32 filter): the bf16 product must satisfy the library model of
    :func:`bf16_filter_bound` on a test product, and be fast: the CPU has AMX tiles or AVX-512 BF16
    (:func:`_bf16_is_fast`). ``filter="auto"`` indexes use it when this is true;
    the environment variable ``HF_TEXTDP_SEARCH_FILTER`` (``auto``, ``bf16``, ``fp32``) sets what
    ``"auto"`` means for the whole process (``bf16`` skips the speed test, never the exactness test).
    """
    return torch.device(device).type == "cpu" and native_bf16() and _bf16_model_ok() and _bf16_is_fast()


@functools.cache
def _bf16_model_ok() -> bool:
    """The exactness half of :func:`bf16_filter_available` (no speed test), cached."""
    try:
        return _bf16_model_holds()
    except RuntimeError:  # no bf16 matmul kernel on this build
        return False


@functools.cache
def _bf16_is_fast() -> bool:
    """Whether the CPU has a native bf16 dot product (AVX-512 BF16 or AMX), read from its capabilities.

    A capability, not a timing: a timing taken at start-up on a shared machine can flip between runs,
    and with it the filter (never the result, which is exact either way).
    """
    for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported"):
        probe = getattr(torch.cpu, name, None)
        if probe is not None and probe():
            return True
    return False


# --------------------------------------------------------------------------- the index
def _check_range(Q: torch.Tensor, R: float) -> None:
    """Refuse queries that are not finite, or so large that the fp32 scores ν − q·e could overflow.

    The Frobenius norm bounds every ‖q‖ and is not finite when a term is nan or ±inf (or when it overflows):
    one reduction over the batch for the usual case, the elementwise tests only where it fails.
    """
    fro = float(torch.linalg.vector_norm(Q))
    if math.isfinite(fro) and fro * R + R * R < _FP32_MAX_MAGNITUDE:
        return
    if not bool(torch.isfinite(Q).all()):
        raise NumericalRangeError(
            "epsilon: the noisy vectors overflowed to non-finite values; epsilon is far too small "
            "for float32 (use a larger epsilon)."
        )
    qmax = float(torch.linalg.vector_norm(Q.double(), dim=1).max())
    if qmax * R + R * R >= _FP32_MAX_MAGNITUDE:
        raise NumericalRangeError(
            f"epsilon: the noisy vectors are too large for float32 scores (norms up to {qmax:.3g}); epsilon is "
            "far too small (use a larger epsilon)."
        )


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
        self.E = matrix.detach().to(self.device, torch.float32).contiguous()
        self.V, self.d = self.E.shape
        sq64 = (self.E.double() ** 2).sum(1)
        self.sq64 = sq64
        self.n32 = sq64.float().contiguous()
        r = math.sqrt(float(sq64.max()))
        self.R = math.nextafter(r, math.inf)
        self.chunk_size = chunk_size
        self.filter: FilterName = filter
        self.Vp = _round_up(self.V, BLOCK)
        self._em2t: torch.Tensor | None = None
        self._fp32_pad: tuple[torch.Tensor, torch.Tensor] | None = None
        self._bf16: tuple[torch.Tensor, _Bf16Constants] | None = None
        self._packed: PackedRows | None = None
        self._fp32_rows: Fp32Rows | None = None
        self._lock = threading.Lock()
        #: run everything but the matrix products on one thread (see :meth:`search`)
        self.serial_small_ops = True
        self._tc: tuple[tuple[int, int], TensorCoreOperands] | None = None
        #: queries the fused GPU path handed to the generic search (overflow, near-ties), since creation
        self.fallback_queries = 0

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

    def _bf16_operands(self) -> tuple[torch.Tensor, _Bf16Constants]:
        """[ê_c, −h_c, −l_c, 0…]ᵀ as bf16 ``[K, Vp]`` (K = d + 2 rounded up to 32) and the bound constants."""
        with self._lock:
            if self._bf16 is None:
                d, V = self.d, self.V
                K = _round_up(d + 2, 32)
                e_hat = self.E.to(torch.bfloat16)
                res = self.E - e_hat.float()  # exact
                nu64 = self.sq64 / 2.0
                h = nu64.to(torch.bfloat16)
                lo = (nu64 - h.double()).to(torch.bfloat16)  # ν64 − h is exact (Sterbenz)
                A = torch.zeros((self.Vp, K), dtype=torch.bfloat16, device=self.device)
                A[:V, :d] = e_hat
                A[:V, d] = -h
                A[:V, d + 1] = -lo
                A[V:, d] = -_PAD_NU
                consts = _Bf16Constants(
                    rho=float(torch.linalg.vector_norm(res.double(), dim=1).max()) * (1 + 2.0**-40),
                    e_hat=float(torch.linalg.vector_norm(e_hat.double(), dim=1).max()) * (1 + 2.0**-40),
                    nu_max=float(nu64.max()),
                    terms_max=float((h.double().abs() + lo.double().abs()).max()),
                    n_terms=d + 2,
                )
                self._bf16 = (A.T.contiguous(), consts)
            return self._bf16

    def _packed_rows(self, k: int) -> PackedRows | None:
        """The rows packed for the fused bf16 kernel (:mod:`hf_textdp.cpu.bf16_filter`), or ``None`` where it does
        not run (no AVX-512 BF16, AMX, no compiler, ``HF_TEXTDP_NATIVE=0``) or the rows fill fewer than k blocks."""
        if self.device.type != "cpu" or -(-self.V // NB) < k or not fused_filter_available():
            return None
        with self._lock:
            if self._packed is None:
                self._packed = PackedRows.build(self.E, self.sq64)
            return self._packed

    def _avx2_rows(self, k: int) -> Fp32Rows | None:
        """The rows packed for the fused AVX2 fp32 filter (:mod:`hf_textdp.cpu.avx2_filter`), or ``None`` where it does
        not run: not a CPU, an explicit ``filter="fp32"`` (the torch reference), k above its lists' limit, no AVX2 and
        FMA or compiler, or ``HF_TEXTDP_NATIVE=0``."""
        mode = self.filter if self.filter != "auto" else os.environ.get("HF_TEXTDP_SEARCH_FILTER", "auto")
        if self.device.type != "cpu" or mode != "auto" or k > AVX2_LIST_K or not avx2_filter_available():
            return None
        with self._lock:
            if self._fp32_rows is None:
                self._fp32_rows = Fp32Rows.build(self.E, self.sq64)
            return self._fp32_rows

    def _use_bf16(self, k: int = 1) -> bool:
        """Whether a search for ``k`` neighbours runs the bf16 filter (the answer is the same either way)."""
        if self.device.type != "cpu":
            return False
        mode = self.filter if self.filter != "auto" else os.environ.get("HF_TEXTDP_SEARCH_FILTER", "auto")
        if mode == "fp32":
            return False
        if mode == "bf16":
            return _bf16_model_ok()
        # "auto": only where the product is large enough for the filter to pay off, and for small k: the
        # bf16 bound is ~100× the fp32 one, so for larger k it keeps many more candidates than the k + 1
        # or so of the fp32 filter, and verifying them costs more than the cheaper product saves
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
        _check_range(Q, self.R)
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
        use_bf16 = self._use_bf16(k)
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
                out.append(self._verify(Qb, rows, pos, k, Qb.shape[0]))
        return torch.cat(out, 0).cpu()

    # ------------------------------------------------------------------ the GPU path
    def _use_tensor_cores(self) -> bool:
        """Whether ``k = 1`` searches run the fused GPU kernels (:mod:`hf_textdp.gpu.nearest`): CUDA with Triton,
        and tensor cores that meet the bound's accumulation model (checked once per device)."""
        mode = self.filter if self.filter != "auto" else os.environ.get("HF_TEXTDP_SEARCH_FILTER", "auto")
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
            _check_range(Qb, self.R)
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
            L = min(_round_up(int(c), BLOCK), self.Vp)
        else:
            L = self.Vp  # whole rows of scores when a few hundred of them fit the tile budget
            if 256 * self.Vp * nbytes > _TILE_BYTES:
                L = max(BLOCK, min(self.Vp, _round_up(_TILE_BYTES // (256 * nbytes), BLOCK)))
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
            if qmax * self.R + self.R * self.R < _BF16_MAX_MAGNITUDE:
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
        found: _Found = []
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
                best = self._chunk_bf16(X3, best, bound, s, found)
            else:
                best = self._chunk_exact_order(X3, best, bound, s, found, bf16)
        thr = self._threshold(best[:, k - 1], bound, bf16)
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
        self, X3: torch.Tensor, best: torch.Tensor, bound: torch.Tensor, s: int, found: _Found, bf16: bool
    ) -> torch.Tensor:
        """One chunk ``[B, G, nbc]`` whose scores order like their values (fp32, or bf16 with G = 1).

        ``best`` holds each query's k best block scores so far and ``found`` collects the candidates of
        positions ``s + …``. fp32 scores are s̃ (smaller is better): the oriented score is −s̃, and
        "−s̃ ≥ thr" is tested as "s̃ ≤ lim" with lim = −thr rounded up to fp32.
        """
        k, nbc = best.shape[1], X3.shape[2]
        if bf16:  # G == 1: every position is its own block (tiny matrices)
            bm = X3[:, 0, :].double()
            best = self._top_k(best, bm, k)
            thr = self._threshold(best[:, k - 1], bound, True)
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
        best = self._top_k(best, cand, k)
        thr = self._threshold(best[:, k - 1], bound, False)
        lim = round_up_fp32(-thr)
        hr, hj = torch.nonzero(mins <= lim[:, None], as_tuple=True)
        if hr.numel():
            vals = X3[hr, :, hj]  # [H, G]: positions hj + i·nbc of the chunk
            hit, gi = torch.nonzero(vals <= lim[hr][:, None], as_tuple=True)
            found.append((hr[hit], hj[hit] + gi * nbc + s, -vals[hit, gi].double()))
        return best

    def _chunk_bf16(
        self, X3: torch.Tensor, best: torch.Tensor, bound: torch.Tensor, s: int, found: _Found
    ) -> torch.Tensor:
        """One chunk of bf16 scores (as :meth:`_chunk_exact_order`), compared through their int16 bit patterns.

        bf16 reductions are not vectorised but int16 ones are, and non-negative bf16 numbers order like
        their int16 patterns. So a block's largest pattern, if ≥ 0, is the pattern of its maximum (a
        block of negative values has a negative largest pattern and is given −∞, a lower bound). For
        a row whose threshold is > 0, "value ≥ thr" is "pattern ≥ key" with key the pattern of the
        smallest bf16 number ≥ thr, and negative values never pass. Rows whose threshold is ≤ 0 (rare:
        every score near the top is negative) take the float64 route with exact block maxima.
        """
        k, nbc = best.shape[1], X3.shape[2]
        bits = X3.view(torch.int16)
        hi = bits.amax(1)  # [B, nbc]
        if hi.shape[1] <= k:
            top = hi
        else:
            top = hi.topk(k, dim=1).values if k > 1 else hi.amax(1, keepdim=True)
        prev = best
        best = self._top_k(prev, torch.where(top >= 0, top.view(torch.bfloat16).double(), -math.inf), k)
        thr = self._threshold(best[:, k - 1], bound, True)
        fast = thr > 0
        key = torch.where(fast, _bf16_key_at_least(thr), torch.full_like(hi[:, 0], 32767))
        hr, hj = torch.nonzero(hi >= key[:, None], as_tuple=True)
        if hr.numel():
            vals = bits[hr, :, hj]  # [H, G] patterns of positions hj + i·nbc of the chunk
            hit, gi = torch.nonzero(vals >= key[hr][:, None], as_tuple=True)
            v = vals[hit, gi].view(torch.bfloat16).double()
            found.append((hr[hit], hj[hit] + gi * nbc + s, v))
        slow = torch.nonzero(~fast).squeeze(1)
        if slow.numel():
            sub = bits[slow]
            bm = torch.where(hi[slow] >= 0, hi[slow], sub.amin(1)).view(torch.bfloat16).double()  # exact maxima
            best_s = self._top_k(prev[slow], bm, k)
            best[slow] = best_s
            thr_s = self._threshold(best_s[:, k - 1], bound[slow], True)
            r, j = torch.nonzero(bm >= thr_s[:, None], as_tuple=True)
            if r.numel():
                vals = sub[r, :, j].view(torch.bfloat16).double()
                hit, gi = torch.nonzero(vals >= thr_s[r][:, None], as_tuple=True)
                found.append((slow[r[hit]], j[hit] + gi * nbc + s, vals[hit, gi]))
        return best

    @staticmethod
    def _top_k(best: torch.Tensor, cand: torch.Tensor, k: int) -> torch.Tensor:
        """The k best of the previous best ``[B, k]`` and new block scores ``[B, m]`` (float64)."""
        cat = torch.cat([best, cand], 1)
        return cat.topk(k, dim=1).values if k > 1 else cat.amax(1, keepdim=True)

    @staticmethod
    def _threshold(best_k: torch.Tensor, bound: torch.Tensor, bf16: bool) -> torch.Tensor:
        """Lowest oriented score a true top-k position can have, given the k-th best block score.

        fp32 (space.md §5): at least k positions have s̃ ≤ m (m = −best_k), each with s ≤ m + η, so a true
        top-k position has s ≤ m + η and s̃ ≤ m + 2η: threshold −(m + 2η).
        bf16: at least k positions have P̃ ≥ M (M = best_k), so t_(k) ≥ lo(M) − β; a true top-k position
        has hi(P̃_c) + β ≥ t_c ≥ t_(k), i.e. P̃_c ≥ hi⁻¹(lo(M) − 2β) (see :func:`bf16_filter_bound`).
        Both are evaluated in float64 and lowered by a relative 2⁻⁴⁰, far above float64's rounding.
        """
        if bf16:
            thr = _bf16_hi_inverse(_bf16_lo(best_k) - 2.0 * bound)
        else:
            thr = best_k - 2.0 * bound
        return thr - 2.0**-40 * (thr.abs() + bound)

    def _sqdist64(self, Qb: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Float64 ``D = Σ_j (q_j − e_cj)²`` of each (query row, position) pair.

        In blocks of :data:`_VERIFY_PAIRS` pairs, so the float64 work stays in cache and the memory is
        O(block·d), not O(pairs·d). The arithmetic is the same whatever the block (a difference, a square
        and a sum of d non-negative terms per pair), so the error bound of :meth:`_verify` holds.
        """
        native = pair_sqdist(Qb, self.E, rows, pos)  # the same arithmetic by a compiled kernel, where it runs
        if native is not None:
            return native
        q64 = Qb.double()
        n = rows.numel()
        D = torch.empty(n, dtype=torch.float64, device=Qb.device)
        for s in range(0, n, _VERIFY_PAIRS):
            x = self.E.index_select(0, pos[s : s + _VERIFY_PAIRS]).double()
            x.sub_(q64.index_select(0, rows[s : s + _VERIFY_PAIRS]))
            x.square_()
            torch.sum(x, 1, out=D[s : s + _VERIFY_PAIRS])
        return D

    def _verify(self, Qb: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor, k: int, B: int) -> torch.Tensor:
        """The exact top k ``[B, k]`` among each query's candidates (docs/mechanisms/space.md §5.4)."""
        found = top_of_pairs(Qb, self.E, rows, pos, B, k, self.interval)
        if found is None:
            return self._verify_sorted(Qb, rows, pos, k, B)
        best, count, tie = found
        if bool((count < k).any()):  # cannot happen: the candidates always hold the true top k
            raise AssertionError("exact search kept fewer candidates than k")
        if bool(tie.any()):  # an open order: those queries' candidates through the sorted form, exactly
            t = torch.nonzero(tie).squeeze(1)
            sel = tie[rows]
            renum = torch.full((B,), -1, dtype=torch.int64)
            renum[t] = torch.arange(t.numel())
            best[t] = self._verify_sorted(Qb[t], renum[rows[sel]], pos[sel], k, t.numel())
        return best

    def _verify_sorted(self, Qb: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor, k: int, B: int) -> torch.Tensor:
        D = self._sqdist64(Qb, rows, pos)
        err = self.interval * D
        # sort by (row, D, pos): stable sorts from the last key to the first
        o = torch.argsort(pos, stable=True)
        o = o[torch.argsort(D[o], stable=True)]
        o = o[torch.argsort(rows[o], stable=True)]
        rows, pos, D, err = rows[o], pos[o], D[o], err[o]
        counts = torch.bincount(rows, minlength=B)
        if bool((counts < k).any()):  # cannot happen: K_b always holds the true top-k
            raise AssertionError("exact search kept fewer candidates than k")
        starts = torch.cumsum(counts, 0) - counts
        rank = torch.arange(rows.numel(), device=rows.device) - starts[rows]
        # certified when each of the first k intervals is strictly below the next one's
        nxt_same = torch.zeros_like(rows, dtype=torch.bool)
        nxt_same[:-1] = rows[1:] == rows[:-1]
        gap_ok = torch.ones_like(nxt_same)
        hi = D + err
        lo = D - err
        gap_ok[:-1] = hi[:-1] < lo[1:]
        bad = nxt_same & ~gap_ok & (rank < k)
        bad_rows = torch.unique(rows[bad])
        sel = rank < k
        result = pos[sel].view(B, k).clone()
        if bad_rows.numel():
            E_np = self.E.cpu().numpy()
            for b in bad_rows.tolist():
                s0, n = int(starts[b]), int(counts[b])
                exact = self._exact_prefix(
                    Qb[b].cpu().numpy(),
                    E_np,
                    pos[s0 : s0 + n].tolist(),
                    lo[s0 : s0 + n].tolist(),
                    hi[s0 : s0 + n].tolist(),
                    k,
                )
                result[b] = torch.tensor(exact, dtype=torch.int64, device=result.device)
        return result

    @staticmethod
    def _exact_prefix(
        q: np.ndarray, E_np: np.ndarray, cand: list[int], lo: list[float], hi: list[float], k: int
    ) -> list[int]:
        """The first k of ``cand`` in the exact (distance, position) order, by exact arithmetic where needed.

        ``cand`` is sorted by (D, position) with D's certified intervals [lo, hi], where lo = D − cD and
        hi = D + cD grow with D (computed in float64 they still do: c ≈ 1e-13, so rounding c·D moves
        them by far less than one ulp of D). Cut the list wherever ``hi[i] < lo[i + 1]``: every candidate j ≤ i then
        has hi_j ≤ hi_i (D_j ≤ D_i) and every m ≥ i + 1 has lo_m ≥ lo_(i+1), so the exact distances of the
        first part are all strictly below those of the second, and only the order inside each part is
        open. Parts are taken in order until k candidates are placed; a part of two or more is ordered
        by exact rational distance (``fractions.Fraction``), then position.
        """
        out: list[int] = []
        i, n = 0, len(cand)
        while len(out) < k:
            j = i + 1
            while j < n and not hi[j - 1] < lo[j]:
                j += 1
            part = cand[i:j]
            if len(part) > 1:
                part = [c for _, c in sorted((_exact_sqdist(q, E_np[c]), c) for c in part)]
            out += part
            i = j
        return out[:k]
