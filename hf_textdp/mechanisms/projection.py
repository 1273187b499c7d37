"""PrivEmb's public projection: the dimension m, the matrix Φ and its exact constants L̂, diam_Φ (privemb.md §2–§4).

Feyisetan and Kasiviswanathan, "Private Release of Text Embedding Vectors" (TrustNLP 2021), Algorithm 1:
Φ ∈ R^{m×d} has i.i.d. N(0, 1/m) entries drawn from a public seed; the mechanism
(:mod:`~hf_textdp.mechanisms.privemb`) calibrates its noise to the largest stretch L̂ of Φ over
candidate pairs. Everything here depends on public matrices only.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ..errors import InvalidParameterError
from ..memo import Store, matrix_key, memoised
from ..validation import check_int, check_open_unit


__all__ = [
    "ProjectionStats",
    "projection_dim",
    "projection_matrix",
    "phi_sha256",
    "lipschitz_exact",
    "projection_stats",
]

U64 = 2.0**-53
_BLOCK_ENTRIES = 2**22  # float64 entries per [chunk, V] block of the L̂ pass (32 MiB per array)
_REFINE = 8  # pairs recomputed per block at least (privemb.md §4: "at least the 8 largest")
#: entries of Φ at most (m·d; 1 GiB of fp32): β ≈ 0.009 reaches it at d = 384, where 0.5–0.9 give m of 55–220
MAX_PROJECTION_ENTRIES = 2**28


# --------------------------------------------------------------------------- privemb.md §2, §3
def projection_dim(*, beta: float, delta: float, d: int) -> int:
    """The projection dimension of privemb.md §2: ``m = ⌈(√(log₂ d) + √(ln(1/δ)))² / β²⌉``.

    Seed 000 (PrivEmb) sets ω = √(log d) without naming the base; base 2 for d and the natural log for δ
    reproduce its appendix dimensions. The ceiling is taken because m is a lower bound.

    Args:
        beta (`float`): distortion β ∈ (0, 1).
        delta (`float`): failure probability δ ∈ (0, 1).
        d (`int`): input dimension, ≥ 1.

    Returns:
        `int`: m ≥ 1.

    Example:

    >>> projection_dim(beta=0.9, delta=1e-6, d=384)
    55
    >>> projection_dim(beta=0.5, delta=1e-5, d=768)
    169
    """
    beta = check_open_unit(beta, "beta")
    delta = check_open_unit(delta, "delta")
    d = check_int(d, "d", minimum=1)
    bb = beta * beta
    x = (math.sqrt(math.log2(d)) + math.sqrt(math.log(1.0 / delta))) ** 2 / bb if bb > 0 else math.inf
    if not x * d <= MAX_PROJECTION_ENTRIES:
        raise InvalidParameterError(
            f"beta={beta!r} asks for a projection dimension m = {x:.4g} at d = {d} (Φ would hold {x * d:.3g} entries, "
            f"more than {MAX_PROJECTION_ENTRIES:,}); use a larger beta (0.5–0.9 give m of 55–220 at d = 384)."
        )
    return max(1, math.ceil(x))


def projection_matrix(m: int, d: int, projection_seed: int) -> npt.NDArray[np.float32]:
    """Φ ∈ R^{m×d} of privemb.md §3: ``default_rng(projection_seed).standard_normal((m, d)) / √m`` as fp32.

    Drawn on CPU with numpy (PCG64) in float64, divided, then cast, so Φ is the same on every device
    and for every torch version. Entries are N(0, 1/m).

    Example:

    >>> phi = projection_matrix(8, 16, 12345)
    >>> phi.shape, phi.dtype, phi_sha256(phi)[:16]
    ((8, 16), dtype('float32'), '179623bdff12ff1a')
    """
    m = check_int(m, "m", minimum=1)
    d = check_int(d, "d", minimum=1)
    if m * d > MAX_PROJECTION_ENTRIES:
        raise InvalidParameterError(
            f"m={m} at d = {d} gives a projection matrix of {m * d:,} entries, more than {MAX_PROJECTION_ENTRIES:,}; "
            "use a smaller m."
        )
    projection_seed = check_int(projection_seed, "projection_seed", minimum=0)
    rng = np.random.default_rng(projection_seed)
    phi: npt.NDArray[np.float32] = (rng.standard_normal((m, d)) / math.sqrt(m)).astype(np.float32)
    return np.ascontiguousarray(phi)


def phi_sha256(phi: npt.NDArray[np.float32]) -> str:
    """Hex SHA-256 of Φ as little-endian fp32 in C order (the report's ``projection.sha256``)."""
    return hashlib.sha256(np.ascontiguousarray(phi, dtype="<f4").tobytes()).hexdigest()


# --------------------------------------------------------------------------- privemb.md §4
@dataclass(frozen=True)
class ProjectionStats:
    """Exact constants of Φ over the rows of E (privemb.md §4, §6).

    Attributes:
        L_hat (`float`): max over pairs with x ≠ x' of ‖Φ(x − x')‖/‖x − x'‖ (0 if every pair is equal).
        L_pair (`tuple[int, int]`): the lexicographically first pair (i < j) attaining ``L_hat``.
        diam_projected (`float`): diam_Φ, the max over pairs of ‖Φ(x − x')‖.
        diam_pair (`tuple[int, int]`): the first pair attaining ``diam_projected``.
    """

    L_hat: float
    L_pair: tuple[int, int]
    diam_projected: float
    diam_pair: tuple[int, int]


def _as_float64_tensor(E: torch.Tensor | npt.NDArray[Any]) -> torch.Tensor:
    t = torch.as_tensor(E)
    return t.to(torch.float32).to(torch.float64)


def lipschitz_exact(
    E: torch.Tensor | npt.NDArray[Any], phi: npt.NDArray[np.float32], *, chunk_size: int | None = None
) -> ProjectionStats:
    """Exact L̂ and diam_Φ over all pairs of rows of E, float64, never V × V in memory (privemb.md §4).

    Rows are processed in blocks of ``chunk_size`` against the later rows (memory O(chunk·V)). Each
    block computes the Gram-formula ratios ``R = ‖Φ(x_i − x_j)‖² / ‖x_i − x_j‖²`` as a filter, then
    recomputes, by differences in float64 and one pair at a time, every pair with ``R ≥ (1 − 10⁻⁶)·max R``
    (at least the 8 largest) and every cancellation-prone pair (``‖x_i − x_j‖² < 10⁻⁶(‖x_i‖² + ‖x_j‖²)``).
    The maximum is taken over the recomputed values only, so the result does not depend on
    ``chunk_size``. Rows are centred before the filter (distances are translation invariant; the
    recomputation uses the raw rows), which only reduces cancellation.

    Args:
        E (`torch.Tensor` or `np.ndarray` of shape `[V, d]`): the input rows (fp32 values).
        phi (`np.ndarray` of shape `[m, d]`): Φ (fp32).
        chunk_size (`int`, *optional*): rows per block; by default about 4M float64 entries per block.

    Returns:
        `ProjectionStats`: L̂, diam_Φ and the pairs attaining them.
    """
    X_raw = _as_float64_tensor(E)
    V, d = X_raw.shape
    if phi.ndim != 2 or phi.shape[1] != d:
        raise InvalidParameterError(f"phi must have shape [m, {d}], got {tuple(phi.shape)}.")
    if chunk_size is None:
        chunk_size = max(1, min(V, _BLOCK_ENTRIES // max(V, 1)))
    chunk_size = check_int(chunk_size, "chunk_size", minimum=1)
    phi64 = torch.from_numpy(np.asarray(phi, dtype=np.float32)).to(X_raw.device, torch.float64)
    X = X_raw - X_raw.mean(0, keepdim=True)
    P = X @ phi64.T
    sx = (X * X).sum(1)
    sp = (P * P).sum(1)
    m = phi64.shape[0]
    err_q = 4.0 * (m + 3) * U64 * 2.0 * float(sp.max())  # absolute bound on the Gram error of Q2
    X_np = X_raw.cpu().numpy()
    phi_np = np.asarray(phi, dtype=np.float32).astype(np.float64)

    best_l, arg_l = 0.0, (0, 1)
    best_q, arg_q = -1.0, (0, 1)
    for i0 in range(0, V - 1, chunk_size):
        i1 = min(i0 + chunk_size, V)
        D2 = sx[i0:i1, None] + sx[None, i0:] - 2.0 * (X[i0:i1] @ X[i0:].T)
        Q2 = sp[i0:i1, None] + sp[None, i0:] - 2.0 * (P[i0:i1] @ P[i0:].T)
        rows = torch.arange(i1 - i0, device=X.device)[:, None]
        cols = torch.arange(V - i0, device=X.device)[None, :]
        valid = cols > rows  # pairs (i, j) with j > i
        if not bool(valid.any()):
            continue
        tiny = D2 < 1e-6 * (sx[i0:i1, None] + sx[None, i0:])
        ninf = torch.full_like(D2, -math.inf)
        R = torch.where(valid & ~tiny, Q2 / torch.where(D2 > 0, D2, torch.ones_like(D2)), ninf)
        Qv = torch.where(valid, Q2, ninf)
        rmax, qmax = float(R.max()), float(Qv.max())
        lpairs = _pick(R, (1.0 - 1e-6) * rmax if rmax > 0 else math.inf)
        lpairs |= {(int(a), int(b)) for a, b in torch.nonzero(valid & tiny).tolist()}
        qpairs = _pick(Qv, qmax - 1e-6 * abs(qmax) - 2.0 * err_q)
        for a, b in sorted(lpairs):
            ia, jb = i0 + a, i0 + b
            dx = X_np[ia] - X_np[jb]
            nd = float(np.linalg.norm(dx))
            if nd == 0.0:
                continue
            val = float(np.linalg.norm(phi_np @ dx)) / nd
            if val > best_l:
                best_l, arg_l = val, (ia, jb)
        for a, b in sorted(qpairs):
            ia, jb = i0 + a, i0 + b
            val = float(np.linalg.norm(phi_np @ (X_np[ia] - X_np[jb])))
            if val > best_q:
                best_q, arg_q = val, (ia, jb)
    return ProjectionStats(L_hat=best_l, L_pair=arg_l, diam_projected=max(best_q, 0.0), diam_pair=arg_q)


def _pick(S: torch.Tensor, threshold: float) -> set[tuple[int, int]]:
    """Local (row, col) pairs of S with S ≥ threshold, plus the ``_REFINE`` largest finite entries."""
    vals, idx = torch.topk(S.reshape(-1), min(_REFINE, S.numel()))
    ncol = S.shape[1]
    out = {(f // ncol, f % ncol) for f, v in zip(idx.tolist(), vals.tolist(), strict=True) if math.isfinite(v)}
    if math.isfinite(threshold):
        out |= {(int(a), int(b)) for a, b in torch.nonzero(S >= threshold).tolist()}
    return out


_STATS_MEMO: dict[str, ProjectionStats] = {}


def projection_stats(E: torch.Tensor, phi: npt.NDArray[np.float32], *, store: Store | None = None) -> ProjectionStats:
    """:func:`lipschitz_exact`, cached by (SHA-256 of E, SHA-256 of Φ) in memory and in ``store``.

    The values depend on the public matrices only (``store``: e.g. the space's disk cache, kind ``"privemb"``).
    """
    key = matrix_key(b"hf_textdp/privemb/lipschitz/v1\x00", E, phi_sha256(phi).encode())
    return memoised(_STATS_MEMO, store, "privemb", key, lambda: lipschitz_exact(E, phi), _decode, asdict)


def _decode(raw: dict[str, Any]) -> ProjectionStats:
    return ProjectionStats(
        L_hat=float(raw["L_hat"]),
        L_pair=(int(raw["L_pair"][0]), int(raw["L_pair"][1])),
        diam_projected=float(raw["diam_projected"]),
        diam_pair=(int(raw["diam_pair"][0]), int(raw["diam_pair"][1])),
    )
