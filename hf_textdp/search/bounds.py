"""The exact search's error bounds (space.md §5): fp32 without reduced precision, the bf16 filter's bound
β and the thresholds that follow from it, and the range of queries whose fp32 scores cannot overflow."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from ..errors import NumericalRangeError


__all__ = [
    "U32",
    "U64",
    "UBF16",
    "BF16_MAX_MAGNITUDE",
    "Bf16Constants",
    "bf16_filter_bound",
    "bf16_hi_inverse",
    "bf16_key_at_least",
    "bf16_lo",
    "check_range",
    "exact_fp32_matmul",
    "round_up",
    "threshold",
    "top_k",
]

U32 = 2.0**-24
U64 = 2.0**-53
UBF16 = 2.0**-8  # unit roundoff of bfloat16 (8-bit significand, round to nearest even)
#: queries with ‖q‖R + R² above this skip the bf16 filter (scores stay far from the padding rows'
#: −1e30 and from fp32 overflow); the fp32 filter takes them
BF16_MAX_MAGNITUDE = 2.0**60
#: queries with ‖q‖R + R² above this are refused: fp32 scores would come within 2⁸ of overflow (2¹²⁸)
_FP32_MAX_MAGNITUDE = 2.0**120


def round_up(x: int, m: int) -> int:
    """x rounded up to a multiple of m."""
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


@dataclasses.dataclass(frozen=True)
class Bf16Constants:
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
    x < 0 (both increasing). See :func:`threshold` for how the candidates follow.

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


def bf16_lo(x: torch.Tensor) -> torch.Tensor:
    """Smallest Ã consistent with the stored bf16 value x (|x − Ã| ≤ u|Ã|)."""
    return torch.where(x >= 0, x / (1.0 + UBF16), x / (1.0 - UBF16))


def bf16_hi_inverse(y: torch.Tensor) -> torch.Tensor:
    """Smallest x with hi(x) ≥ y, hi(x) = x/(1 − u) for x ≥ 0 and x/(1 + u) for x < 0."""
    return torch.where(y >= 0, y * (1.0 - UBF16), y * (1.0 + UBF16))


def bf16_key_at_least(x: torch.Tensor) -> torch.Tensor:
    """int16 pattern of the smallest bf16 number ≥ x, for x > 0 (float64 in)."""
    y = x.to(torch.bfloat16)  # round to nearest: at most one step below x
    bits = y.view(torch.int16)
    return torch.where(y.double() < x, bits + 1, bits)  # x > 0: the next bf16 up is the next pattern


def top_k(best: torch.Tensor, cand: torch.Tensor, k: int) -> torch.Tensor:
    """The k best of the previous best ``[B, k]`` and new block scores ``[B, m]`` (float64)."""
    cat = torch.cat([best, cand], 1)
    return cat.topk(k, dim=1).values if k > 1 else cat.amax(1, keepdim=True)


def threshold(best_k: torch.Tensor, bound: torch.Tensor, bf16: bool) -> torch.Tensor:
    """Lowest oriented score a true top-k position can have, given the k-th best block score.

    fp32 (space.md §5): at least k positions have s̃ ≤ m (m = −best_k), each with s ≤ m + η, so a true
    top-k position has s ≤ m + η and s̃ ≤ m + 2η: threshold −(m + 2η).
    bf16: at least k positions have P̃ ≥ M (M = best_k), so t_(k) ≥ lo(M) − β; a true top-k position
    has hi(P̃_c) + β ≥ t_c ≥ t_(k), i.e. P̃_c ≥ hi⁻¹(lo(M) − 2β) (see :func:`bf16_filter_bound`).
    Both are evaluated in float64 and lowered by a relative 2⁻⁴⁰, far above float64's rounding.
    """
    if bf16:
        thr = bf16_hi_inverse(bf16_lo(best_k) - 2.0 * bound)
    else:
        thr = best_k - 2.0 * bound
    return thr - 2.0**-40 * (thr.abs() + bound)


def check_range(Q: torch.Tensor, R: float) -> None:
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
