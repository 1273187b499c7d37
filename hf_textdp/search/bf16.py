"""The bf16 filter's glue: whether this process's bf16 product meets the model of
:func:`~hf_textdp.search.bounds.bf16_filter_bound` (and is fast), the augmented bf16 matrix with its bound
constants, and one chunk's pass over bf16 scores through their int16 bit patterns."""

from __future__ import annotations

import functools
import math

import torch

from ..cpu.features import native_bf16
from .bounds import (
    U32,
    UBF16,
    Bf16Constants,
    bf16_key_at_least,
    exact_fp32_matmul,
    round_up,
    threshold,
    top_k,
)


__all__ = ["BF16_MAX_CANDIDATES", "BF16_MAX_K", "Found", "bf16_filter_available", "bf16_operands", "chunk_bf16"]

#: a query whose bf16 filter keeps more candidates than this (or than 4k) is filtered again in fp32
BF16_MAX_CANDIDATES = 256
#: ``filter="auto"`` takes the bf16 filter for k up to this only (measured on all-MiniLM-L6-v2 with an
#: AMX CPU: bf16 is 1.4× faster at k = 2, even at k = 4 and 1.9× slower at k = 16, where it keeps ~155
#: candidates a query against ~17 for fp32)
BF16_MAX_K = 4
_PAD_NU = 1.0e30  # half squared norm of the padding rows: their bf16 score is −1e30, never a candidate
#: candidates a filter pass collects: (query rows, positions, oriented scores), one triple per chunk
Found = list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


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
    the ``search_filter`` switch of :mod:`hf_textdp.settings` (``auto``, ``bf16``, ``fp32``) sets what
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


def bf16_operands(E: torch.Tensor, sq64: torch.Tensor, Vp: int) -> tuple[torch.Tensor, Bf16Constants]:
    """[ê_c, −h_c, −l_c, 0…]ᵀ as bf16 ``[K, Vp]`` (K = d + 2 rounded up to 32) and the bound constants of
    the rows ``E`` (fp32 ``[V, d]``, squared norms ``sq64`` in float64), padded to ``Vp`` positions."""
    V, d = E.shape
    K = round_up(d + 2, 32)
    e_hat = E.to(torch.bfloat16)
    res = E - e_hat.float()  # exact
    nu64 = sq64 / 2.0
    h = nu64.to(torch.bfloat16)
    lo = (nu64 - h.double()).to(torch.bfloat16)  # ν64 − h is exact (Sterbenz)
    A = torch.zeros((Vp, K), dtype=torch.bfloat16, device=E.device)
    A[:V, :d] = e_hat
    A[:V, d] = -h
    A[:V, d + 1] = -lo
    A[V:, d] = -_PAD_NU
    consts = Bf16Constants(
        rho=float(torch.linalg.vector_norm(res.double(), dim=1).max()) * (1 + 2.0**-40),
        e_hat=float(torch.linalg.vector_norm(e_hat.double(), dim=1).max()) * (1 + 2.0**-40),
        nu_max=float(nu64.max()),
        terms_max=float((h.double().abs() + lo.double().abs()).max()),
        n_terms=d + 2,
    )
    return A.T.contiguous(), consts


def chunk_bf16(X3: torch.Tensor, best: torch.Tensor, bound: torch.Tensor, s: int, found: Found) -> torch.Tensor:
    """One chunk of bf16 scores (as :meth:`ExactIndex._chunk_exact_order`), compared through their int16 bit patterns.

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
    best = top_k(prev, torch.where(top >= 0, top.view(torch.bfloat16).double(), -math.inf), k)
    thr = threshold(best[:, k - 1], bound, True)
    fast = thr > 0
    key = torch.where(fast, bf16_key_at_least(thr), torch.full_like(hi[:, 0], 32767))
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
        best_s = top_k(prev[slow], bm, k)
        best[slow] = best_s
        thr_s = threshold(best_s[:, k - 1], bound[slow], True)
        r, j = torch.nonzero(bm >= thr_s[:, None], as_tuple=True)
        if r.numel():
            vals = sub[r, :, j].view(torch.bfloat16).double()
            hit, gi = torch.nonzero(vals >= thr_s[r][:, None], as_tuple=True)
            found.append((slow[r[hit]], j[hit] + gi * nbc + s, vals[hit, gi]))
    return best
