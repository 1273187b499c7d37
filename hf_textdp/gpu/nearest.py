"""Exact nearest neighbour on a GPU in three kernels: query norms, a fused bf16 filter and a float64 verification.

**Norms** (one launch). ‖q̂‖, ‖q − q̂‖ and ‖q‖ of every query in float64, for the bound β and the
magnitude check; a non-finite query gets a non-finite norm and is flagged.

**Filter** (one launch per batch). Each program takes ``BM`` queries and walks all positions in tiles
of ``BN``: a tensor-core product of the bf16 queries q̂ with the bf16 rows ê_c (fp32 accumulation), minus
ν32_c = fl32(‖e_c‖²/2), gives ``s_c ≈ t_c = q·e_c − ‖e_c‖²/2`` (the nearest row has the largest t). With
the running maximum M of s over the tiles so far, every position with ``s_c ≥ M − 2β`` is appended to
the query's candidate list (at most ``CAP``, with their scores; the count goes on). No score matrix is
ever written: per query the kernel stores a count, ``CAP`` positions and scores, and the final maximum.

**Why the candidates hold the answer.** With |t_c − s_c| ≤ β for every c (:func:`tensor_core_bound`) and
M* the final maximum, reached at c′: the true nearest c* has t_c* ≥ t_c′ ≥ M* − β, so s_c* ≥ M* − 2β ≥
M − 2β for every running M ≤ M*. The kernel's threshold is computed in fp32 with a margin that covers
its own roundings, so it never exceeds M − 2β.

**Verify** (one launch). Per query, float64 distances D = Σ(q_j − e_cj)² of its candidates that pass the
threshold at the final maximum (the others were kept under a lower running one), 16 at a time (error ≤
(d + 2)u₆₄·D in any summation order); the smallest (D, position) wins when its interval
[D ± 2(d+3)u₆₄D] lies strictly below every other candidate's. Queries whose list overflowed, or whose
winner is not certified (a near-tie, duplicate rows), are flagged; the caller solves those few by direct
distances to every row or, for a genuine near-tie, by the generic exact search
(:class:`hf_textdp.search.ExactIndex`), so every answer is exactly float64 brute force's
(docs/mechanisms/space.md §5.6).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import settings
from ..utils.rounding import round_up_fp32
from . import bf16_operands, built, interpreting, on_device, triton_ready


__all__ = ["TensorCoreOperands", "tensor_core_bound", "tensor_core_model_holds", "fused_nearest", "tile_config"]

U32 = 2.0**-24
U64 = 2.0**-53
#: the accumulation unit assumed of the tensor cores: 4× fp32's unit roundoff. NVIDIA's tensor cores
#: multiply bf16 exactly but may align and add with truncation (Fasi, Higham, Mikaitis and Pranesh,
#: "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021), i.e. errors up to 2⁻²³ per addition
#: relative to the largest term; n·2⁻²²·Σ|terms| covers that with a factor of 2 to spare.
U_ACC = 2.0**-22
#: candidates kept per query; a query with more is solved by the generic search (MiniLM with MR text: the
#: running maximum keeps 11 a query at the median, 54 at most; the final threshold keeps about 2)
CAP = 64
#: queries whose ‖q‖R + R² exceed this take the generic search (fp32 scores far from overflow)
MAX_MAGNITUDE = 2.0**60
#: queries per program of the norms kernel
_NORM_ROWS = 16
_PAD_NU = 1.0e30  # ν of the padding columns: their score is −1e30, never a candidate

_kernels: dict[bool, dict[str, Any]] = {}  # see built()


def tile_config() -> tuple[int, int, int, int, int, bool]:
    """(BM, BN, BK, warps, stages, preload) of the filter.

    ``preload``: the queries' tile stays in registers for the whole walk (K ≤ 4·BK), else it is reloaded
    per position tile in a pipelined K loop. :func:`hf_textdp.settings.cuda_tiles` (``"64,64,128,4,3,p"``)
    overrides (``l`` for the loop).
    """
    env = settings.cuda_tiles()
    if env:
        parts = env.split(",")
        bm, bn, bk, w, st = (int(v) for v in parts[:5])
        return bm, bn, bk, w, st, (parts[5:] or ["p"])[0] == "p"
    if interpreting():
        return 16, 64, 16, 1, 1, True
    # the fastest of seven shapes on an H100 and of nine on an H200 (git show
    # 740eb28:docs/bench/cuda_h100_sweep.json, cuda_h200_sweep.json: 9.9 M queries/s, 1.5 % above three
    # stages, 12–40 % above the other shapes)
    return 128, 64, 128, 8, 4, True


@dataclass(frozen=True)
class TensorCoreOperands:
    """The prepared matrix of one index: ê padded to ``[K, Vp]``, −ν32 padded, and the bound's constants."""

    EhT: torch.Tensor  # [K, Vp] bf16 (fp32 holding bf16 values under the interpreter)
    nu32: torch.Tensor  # [Vp] fp32, ‖e_c‖²/2 rounded to fp32; padding columns 1e30
    rho: float  # max_c ‖e_c − ê_c‖
    e_hat: float  # max_c ‖ê_c‖
    nu_max: float  # max_c ‖e_c‖²/2
    K: int
    Vp: int

    @classmethod
    def build(cls, E: torch.Tensor, sq64: torch.Tensor, BN: int, BK: int) -> TensorCoreOperands:
        V, d = E.shape
        K = -(-d // BK) * BK
        Vp = -(-V // BN) * BN
        e_hat = E.to(torch.bfloat16)
        res = E.double() - e_hat.double()  # exact
        dtype = bf16_operands()
        EhT = torch.zeros((K, Vp), dtype=dtype, device=E.device)
        EhT[:d, :V] = e_hat.T.to(dtype)
        nu64 = sq64 / 2.0
        nu32 = torch.full((Vp,), _PAD_NU, dtype=torch.float32, device=E.device)
        nu32[:V] = nu64.float()
        return cls(
            EhT=EhT.contiguous(),
            nu32=nu32,
            rho=float(torch.linalg.vector_norm(res, dim=1).max()) * (1 + 2.0**-40),
            e_hat=float(torch.linalg.vector_norm(e_hat.double(), dim=1).max()) * (1 + 2.0**-40),
            nu_max=float(nu64.max()),
            K=K,
            Vp=Vp,
        )


def tensor_core_bound(
    q_hat_norm: torch.Tensor, q_res_norm: torch.Tensor, ops: TensorCoreOperands, d: int
) -> torch.Tensor:
    """Per-query β with |t_c − s_c| ≤ β for every position c (float64).

    s_c = fl32(A_c − ν32_c), A_c the tensor-core sum of the d exact products q̂_j ê_cj. Then
    t_c − s_c = (q·e_c − q̂·ê_c) + (q̂·ê_c − A_c) + (ν32_c − ν_c) + (A_c − ν32_c − s_c), and

    * |q·e_c − q̂·ê_c| ≤ ‖q̂‖ρ + ‖r_q‖(Ê + ρ) (Cauchy–Schwarz on q̂·r_c + r_q·ê_c + r_q·r_c, r the exact residuals);
    * |q̂·ê_c − A_c| ≤ γ·‖q̂‖Ê with γ = n·U_ACC/(1 − n·U_ACC), n = d + K/16 terms and partial sums
      (:data:`U_ACC`; Higham, Accuracy and Stability, eq. 3.5, with the larger unit);
    * |ν32_c − ν_c| ≤ u·ν_max + (d + 1)u₆₄·ν_max (fp32 rounding of the float64 sum of exact squares);
    * the fp32 subtraction errs by ≤ u·(‖q̂‖Ê(1 + γ) + ν_max(1 + u));

    plus 2⁻¹⁰⁰(1 + ‖q̂‖ + Ê) for underflow, all times (1 + 2⁻²⁰).
    """
    u = U32
    n = d + ops.K // 16
    gamma = n * U_ACC / (1.0 - n * U_ACC)
    prod = q_hat_norm * ops.e_hat
    beta_in = q_hat_norm * ops.rho + q_res_norm * (ops.e_hat + ops.rho)
    beta_acc = gamma * prod
    beta_nu = (u + (d + 1) * U64) * ops.nu_max
    beta_sub = u * (prod * (1.0 + gamma) + ops.nu_max * (1.0 + u))
    beta_abs = 2.0**-100 * (1.0 + q_hat_norm + ops.e_hat)
    beta: torch.Tensor = (beta_in + beta_acc + beta_nu + beta_sub + beta_abs) * (1.0 + 2.0**-20)
    return beta


def _build_probe() -> Any:
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator]
    def probe_kernel(  # type: ignore[no-untyped-def]  # pragma: no cover - GPU or interpreter
        a_ptr, b_ptr, c_ptr, N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
        BK: tl.constexpr, FP32_OPERANDS: tl.constexpr,
    ):  # fmt: skip
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), tl.float32)
        for k0 in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
            b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
            if FP32_OPERANDS:
                acc = tl.dot(a, b, acc, input_precision="ieee")
            else:
                acc = tl.dot(a, b, acc)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)

    return probe_kernel


_model_checked: dict[tuple[bool, str], bool] = {}


def tensor_core_model_holds(device: torch.device | str) -> bool:
    """Whether ``tl.dot`` on ``device`` meets the accumulation model of :func:`tensor_core_bound` (cached).

    Checked once per device before the fused search is used, as the CPU's bf16 filter checks its library:
    bf16 operands spanning 2¹⁶ in magnitude, sums of 384 products; every fp32 result must lie within
    n·U_ACC·Σ|terms| of the exact sum. A GPU that fails (or a kernel that does not build) keeps the generic
    exact search.
    """
    dev = torch.device(device)
    key = (interpreting(), str(dev))
    if key not in _model_checked:
        _model_checked[key] = _probe(dev)
    return _model_checked[key]


def _probe(dev: torch.device) -> bool:
    try:
        kernel = _build_probe()
        g = torch.Generator().manual_seed(9)
        M, N, K = (16, 64, 384) if interpreting() else (128, 256, 384)
        BM, BN, BK = (16, 64, 16) if interpreting() else (64, 64, 64)
        ea = torch.exp2(torch.randint(-8, 9, (M, K), generator=g).double())
        eb = torch.exp2(torch.randint(-8, 9, (K, N), generator=g).double())
        a = (torch.randn(M, K, generator=g, dtype=torch.float64) * ea).to(torch.bfloat16)
        b = (torch.randn(K, N, generator=g, dtype=torch.float64) * eb).to(torch.bfloat16)
        dtype = bf16_operands()
        c = torch.empty((M, N), dtype=torch.float32, device=dev)
        with on_device(dev):
            kernel[(M // BM, N // BN)](
                a.to(dtype).to(dev), b.to(dtype).to(dev), c, N=N, K=K, BM=BM, BN=BN, BK=BK,
                FP32_OPERANDS=interpreting(),
            )  # fmt: skip
        exact = a.double() @ b.double()  # float64: its own error is far below the tolerance
        terms = a.double().abs() @ b.double().abs()
        n = K + K // 16
        gamma = n * U_ACC / (1.0 - n * U_ACC)
        err = (c.double().cpu() - exact).abs()
        return bool((err <= gamma * terms + 1e-300).all()) and bool(torch.isfinite(c).all())
    except Exception:  # noqa: BLE001 - no kernel, no fused search: the generic exact search runs
        return False


def _build() -> dict[str, Any]:
    """The three Triton kernels of the fused search (each compiled at its first launch)."""
    return {"filter": _filter_kernel(), "verify": _verify_kernel(), "norms": _norms_kernel()}


def _filter_kernel() -> Any:
    """The bf16 product filter: each query's running maximum and its candidates within 2β of it."""
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator]
    def filter_kernel(  # type: ignore[no-untyped-def]  # pragma: no cover - GPU or interpreter
        q_ptr, e_ptr, nu_ptr, b2_ptr, cnt_ptr, cand_ptr, cs_ptr, best_ptr, B,
        Vp: tl.constexpr, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, CAP_: tl.constexpr,
        PRELOAD: tl.constexpr, FP32_OPERANDS: tl.constexpr,
    ):  # fmt: skip
        rm = tl.program_id(0).to(tl.int64) * BM + tl.arange(0, BM)
        live = rm < B
        rn = tl.arange(0, BN)
        rk = tl.arange(0, BK)
        b2 = tl.load(b2_ptr + rm, mask=live, other=0.0)
        dead = tl.where(live, 0.0, float("inf"))  # rows past B: a threshold nothing reaches
        best = tl.full((BM,), float("-inf"), tl.float32)
        cnt = tl.zeros((BM,), tl.int32)
        if PRELOAD:  # the queries' K/BK ≤ 4 tiles, loaded once
            qp = q_ptr + rm[:, None] * K + rk[None, :]
            a0 = tl.load(qp, mask=live[:, None], other=0.0)
            if K // BK > 1:
                a1 = tl.load(qp + BK, mask=live[:, None], other=0.0)
            if K // BK > 2:
                a2 = tl.load(qp + 2 * BK, mask=live[:, None], other=0.0)
            if K // BK > 3:
                a3 = tl.load(qp + 3 * BK, mask=live[:, None], other=0.0)
        for n0 in range(0, Vp, BN):
            acc = tl.zeros((BM, BN), tl.float32)
            # (under the interpreter the operands are fp32 holding bf16 values: "ieee" keeps the products exact)
            if PRELOAD:
                ep = e_ptr + rk[:, None] * Vp + (n0 + rn)[None, :]
                if FP32_OPERANDS:
                    acc = tl.dot(a0, tl.load(ep), acc, input_precision="ieee")
                    if K // BK > 1:
                        acc = tl.dot(a1, tl.load(ep + BK * Vp), acc, input_precision="ieee")
                    if K // BK > 2:
                        acc = tl.dot(a2, tl.load(ep + 2 * BK * Vp), acc, input_precision="ieee")
                    if K // BK > 3:
                        acc = tl.dot(a3, tl.load(ep + 3 * BK * Vp), acc, input_precision="ieee")
                else:
                    acc = tl.dot(a0, tl.load(ep), acc)
                    if K // BK > 1:
                        acc = tl.dot(a1, tl.load(ep + BK * Vp), acc)
                    if K // BK > 2:
                        acc = tl.dot(a2, tl.load(ep + 2 * BK * Vp), acc)
                    if K // BK > 3:
                        acc = tl.dot(a3, tl.load(ep + 3 * BK * Vp), acc)
            else:
                for k0 in range(0, K, BK):  # a loop, not unrolled: the compiler pipelines its loads
                    a = tl.load(q_ptr + rm[:, None] * K + (k0 + rk)[None, :], mask=live[:, None], other=0.0)
                    b = tl.load(e_ptr + (k0 + rk)[:, None] * Vp + (n0 + rn)[None, :])
                    if FP32_OPERANDS:
                        acc = tl.dot(a, b, acc, input_precision="ieee")
                    else:
                        acc = tl.dot(a, b, acc)
            s = acc - tl.load(nu_ptr + n0 + rn)[None, :]
            best = tl.maximum(best, tl.max(s, axis=1))
            # ≤ best − 2β: b2 is 2β rounded up, and |best|·2⁻²² covers the two fp32 roundings
            thr = best - (b2 + tl.abs(best) * 2.384185791015625e-07) + dead
            hit = s >= thr[:, None]
            nh = tl.sum(hit.to(tl.int32), axis=1)
            if tl.max(nh, axis=0) > 0:
                slot = cnt[:, None] + tl.cumsum(hit.to(tl.int32), axis=1) - 1
                keep = hit & (slot < CAP_)
                tl.store(cand_ptr + rm[:, None] * CAP_ + slot, (n0 + rn)[None, :] + slot * 0, mask=keep)
                tl.store(cs_ptr + rm[:, None] * CAP_ + slot, s, mask=keep)
                cnt += nh
        tl.store(cnt_ptr + rm, cnt, mask=live)
        tl.store(best_ptr + rm, best, mask=live)

    return filter_kernel


def _verify_kernel() -> Any:
    """The float64 check of each query's candidates: the nearest, or a flag where it is not certain."""
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator]
    def verify_kernel(  # type: ignore[no-untyped-def]  # pragma: no cover - GPU or interpreter
        q_ptr, e_ptr, cnt_ptr, cand_ptr, cs_ptr, best_ptr, b2_ptr, out_ptr, flag_ptr, c_err,
        d: tl.constexpr, CAP_: tl.constexpr, CH: tl.constexpr, DCH: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0).to(tl.int64)
        cnt = tl.load(cnt_ptr + b)
        best = tl.load(best_ptr + b)
        thr = best - (tl.load(b2_ptr + b) + tl.abs(best) * 2.384185791015625e-07)  # the filter's, at the final max
        n = tl.where(cnt <= CAP_, cnt, 0)  # an overflowed list is flagged unread
        # D's interval [D·c_lo, D·c_hi] (a Python float arrives as fp32: c is a tiny number, 1 ∓ c is not)
        c64 = tl.full([], 1.0, tl.float64) * c_err
        c_lo = 1.0 - c64
        c_hi = 1.0 + c64
        # the smallest (D, position) so far, and the smallest lower end D·c_lo among the other candidates
        best_d = tl.full([], float("inf"), tl.float64)
        best_p = tl.full([], 2147483647, tl.int32)
        others = tl.full([], float("inf"), tl.float64)
        for j0 in tl.static_range(0, CAP_, CH):  # CH candidates at a time: most lists need one round
            if j0 < n:
                rj = j0 + tl.arange(0, CH)
                # candidates kept under a lower running maximum that the final one rules out are not read
                mj = (rj < n) & (tl.load(cs_ptr + b * CAP_ + rj, mask=rj < n, other=float("-inf")) >= thr)
                p = tl.load(cand_ptr + b * CAP_ + rj, mask=mj, other=0)
                row = p.to(tl.int64) * d
                D = tl.zeros((CH,), tl.float64)
                for d0 in range(0, d, DCH):  # float64 sums of squares, DCH coordinates at a time
                    rd = d0 + tl.arange(0, DCH)
                    md = rd < d
                    q = tl.load(q_ptr + b * d + rd, mask=md, other=0.0).to(tl.float64)
                    e = tl.load(e_ptr + row[:, None] + rd[None, :], mask=mj[:, None] & md[None, :], other=0.0)
                    x = q[None, :] - e.to(tl.float64)
                    D += tl.sum(x * x, axis=1)
                D = tl.where(mj, D, float("inf"))
                cd = tl.min(D, axis=0)
                cp = tl.min(tl.where(mj & (D == cd), p, 2147483647), axis=0)
                rest = tl.min(tl.where(mj & (p != cp), D, float("inf")), axis=0)
                # the loser of (best so far, this round's best) joins the others
                wins = (cd < best_d) | ((cd == best_d) & (cp < best_p))
                loser = tl.where(wins, best_d, cd)
                others = tl.minimum(others, tl.minimum(rest, loser) * c_lo)
                best_d = tl.where(wins, cd, best_d)
                best_p = tl.where(wins, cp, best_p)
        ok = (n > 0) & (best_d < float("inf")) & (best_d * c_hi < others)
        tl.store(out_ptr + b, best_p.to(tl.int64))
        tl.store(flag_ptr + b, tl.where(ok, 0, 1).to(tl.int8))

    return verify_kernel


def _norms_kernel() -> Any:
    """The queries' norms (of q̂, of q − q̂ and of q) in float64."""
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator]
    def norms_kernel(  # type: ignore[no-untyped-def]  # pragma: no cover - GPU or interpreter
        q_ptr, qa_ptr, out_ptr, B, d: tl.constexpr, K: tl.constexpr, BQ: tl.constexpr, DCH: tl.constexpr,
    ):  # fmt: skip
        rb = tl.program_id(0).to(tl.int64) * BQ + tl.arange(0, BQ)
        live = rb < B
        hh = tl.zeros((BQ,), tl.float64)
        rr = tl.zeros((BQ,), tl.float64)
        qq = tl.zeros((BQ,), tl.float64)
        for d0 in range(0, d, DCH):
            rd = d0 + tl.arange(0, DCH)
            m = live[:, None] & (rd < d)[None, :]
            q = tl.load(q_ptr + rb[:, None] * d + rd[None, :], mask=m, other=0.0).to(tl.float64)
            h = tl.load(qa_ptr + rb[:, None] * K + rd[None, :], mask=m, other=0.0).to(tl.float64)
            r = q - h  # exact: q̂ is q rounded to bf16
            hh += tl.sum(h * h, axis=1)
            rr += tl.sum(r * r, axis=1)
            qq += tl.sum(q * q, axis=1)
        tl.store(out_ptr + rb, tl.sqrt(hh), mask=live)
        tl.store(out_ptr + B + rb, tl.sqrt(rr), mask=live)
        tl.store(out_ptr + 2 * B + rb, tl.sqrt(qq), mask=live)

    return norms_kernel


def fused_nearest(
    Q: torch.Tensor, E: torch.Tensor, R: float, ops: TensorCoreOperands
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(positions ``[B]`` int64, flags ``[B]`` bool) on Q's device; a flagged query needs the generic search.

    ``Q`` ``[B, d]`` fp32 finite, ``E`` ``[V, d]`` fp32 (the index's rows, same device); ``None`` where
    Triton cannot run. No host synchronisation: the caller reads the flags once.
    """
    dev = Q.device
    if not triton_ready(dev):
        return None
    kernels = built(_kernels, _build)
    B, d = Q.shape
    BM, BN, BK, warps, stages, preload = tile_config()
    dtype = bf16_operands()
    Qh = Q.to(torch.bfloat16).to(dtype)
    if ops.K == d:
        Qa = Qh
    else:
        Qa = torch.zeros((B, ops.K), dtype=dtype, device=dev)
        Qa[:, :d] = Qh
    # ‖q̂‖, ‖q − q̂‖ and ‖q‖ in float64 in one pass (any summation order: β carries a relative slack of 2⁻²⁰,
    # far above the float64 sums' error of (d + 1)·2⁻⁵³)
    norms = torch.empty((3, B), dtype=torch.float64, device=dev)
    with on_device(dev):
        kernels["norms"][(triton_cdiv(B, _NORM_ROWS),)](Q, Qa, norms, B, d=d, K=ops.K, BQ=_NORM_ROWS, DCH=64)
    beta = tensor_core_bound(norms[0], norms[1], ops, d)
    big = ~(norms[2] * R + R * R < MAX_MAGNITUDE)  # a non-finite query too: the caller's check reports it
    b2 = round_up_fp32(2.0 * beta)
    cnt = torch.empty(B, dtype=torch.int32, device=dev)
    cand = torch.empty((B, CAP), dtype=torch.int32, device=dev)
    cand_s = torch.empty((B, CAP), dtype=torch.float32, device=dev)
    best = torch.empty(B, dtype=torch.float32, device=dev)
    args = (Qa, ops.EhT, ops.nu32, b2, cnt, cand, cand_s, best, B)
    with on_device(dev):
        _launch_filter(kernels["filter"], args, ops, (BM, BN, BK, warps, stages, preload and ops.K <= 4 * BK))
    out = torch.empty(B, dtype=torch.int64, device=dev)
    flag = torch.empty(B, dtype=torch.int8, device=dev)
    # D's interval [D(1 − c), D(1 + c)]: c = 2(d + 3)u₆₄ is twice the sum's (d + 2)u₆₄, which covers the
    # products' own roundings and c's to fp32
    c_err = 2.0 * (d + 3) * U64
    with on_device(dev):
        kernels["verify"][(B,)](Q, E, cnt, cand, cand_s, best, b2, out, flag, c_err, d=d, CAP_=CAP, CH=16, DCH=64)
    return out, flag.bool() | big


#: pipeline depths that ran out of shared memory on this process's GPU, per tile shape (tried once each)
_too_deep: dict[tuple[int, ...], int] = {}


def _launch_filter(kernel: Any, args: tuple[Any, ...], ops: TensorCoreOperands, cfg: tuple[int, ...]) -> None:
    """Launch the filter; a GPU with less shared memory than the tile shape's pipeline needs gets a shallower one."""
    BM, BN, BK, warps, stages, preload = cfg
    B = int(args[-1])
    consts = {"Vp": ops.Vp, "K": ops.K, "BM": BM, "BN": BN, "BK": BK, "CAP_": CAP, "PRELOAD": preload}
    consts["FP32_OPERANDS"] = interpreting()
    if interpreting():
        kernel[(triton_cdiv(B, BM),)](*args, **consts)
        return
    from triton.runtime.errors import OutOfResources

    key = (BM, BN, BK, warps, int(preload), ops.K)
    depth = min(stages, _too_deep.get(key, stages + 1) - 1)
    while True:
        try:
            kernel[(triton_cdiv(B, BM),)](*args, **consts, num_warps=warps, num_stages=depth)
            return
        except OutOfResources:
            if depth <= 1:
                raise
            _too_deep[key] = depth
            depth -= 1


def triton_cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b
