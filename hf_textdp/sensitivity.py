"""The sensitivities a mechanism calibrates to (bounding.md §2, §3): the `Sensitivity` record and the exact
Δ₁, Δ₂, Δ∞ over all pairs of transformed candidate rows (the transforms are in bounding.py).

Exact sensitivities (bounding.md §3) are computed in row blocks (memory O(block·V), never V × V):
Δ∞ column-wise; Δ₂ by a float64 Gram pass with error below η₂ = (d+3)·u₆₄·4·max‖x‖², then a
float64 recomputation by differences of every pair within 2η₂ of the maximum; Δ₁ by ``torch.cdist``
(p = 1) with error below η₁ = (d+3)·u·2·max‖x‖₁ (u the unit roundoff of the pass: float64 on CPU,
float32 on CUDA), then the same recomputation. The results do not depend on the block size;
``bounding.candidate_sensitivity`` caches them per (matrix hash, transform parameters).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from datasets.utils import tqdm as hf_tqdm


__all__ = ["PROGRESS_ROWS", "Sensitivity", "exact_sensitivity"]

U32 = 2.0**-24
U64 = 2.0**-53
_PAIR_BATCH = 8192
#: matrices with at least this many rows show a progress bar while their exact sensitivity is computed
PROGRESS_ROWS = 4096
_BLOCK_ENTRIES = 1 << 22  # entries of one block of pairwise values (32 MiB in float64)


@dataclass(frozen=True)
class Sensitivity:
    """L1, L2 and L∞ sensitivities of a transform over the candidates (bounding.md §2, §3).

    Attributes:
        l1 (`float`): Δ₁ = max over candidate pairs of ‖T(x) − T(x')‖₁ (or a stated upper bound).
        l2 (`float`): Δ₂, the same in the L2 norm.
        linf (`float`): Δ∞, the same in the L∞ norm.
        exact (`bool`): whether these are the exact maxima (bounding.md §3) or the stated bounds (bounding.md §2).
    """

    l1: float
    l2: float
    linf: float
    exact: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _block_rows(V: int, chunk_size: int | None) -> int:
    if chunk_size is not None:
        return max(1, int(chunk_size))
    return max(1, min(V, _BLOCK_ENTRIES // max(V, 1)))


def _max_pair(
    X: torch.Tensor,
    c: int,
    approx: Any,
    eta: float,
    exact: Any,
    desc: str = "",
) -> float:
    """max over pairs i ≤ j of ``exact(X[i] − X[j])`` from approximate blocks with error below ``eta``.

    Every pair whose approximation is within 2η of the largest approximation is recomputed by
    ``exact``; the true maximiser is always among them (its approximation is ≥ max − 2η). A matrix of
    :data:`PROGRESS_ROWS` rows or more shows a progress bar named ``desc`` (minutes for a 30k vocabulary).
    """
    V = X.shape[0]
    with hf_tqdm(total=V, desc=desc, unit=" rows", disable=V < PROGRESS_ROWS) as bar:
        return _max_pair_blocks(X, c, approx, eta, exact, bar)


def _max_pair_blocks(X: torch.Tensor, c: int, approx: Any, eta: float, exact: Any, bar: Any) -> float:
    V = X.shape[0]
    best = -math.inf
    kept_i: list[torch.Tensor] = []
    kept_j: list[torch.Tensor] = []
    kept_v: list[torch.Tensor] = []
    n_kept = 0
    for s in range(0, V, c):
        e = min(s + c, V)
        D = approx(s, e)  # [e − s, V − s]: pairs (s + a, s + b)
        best = max(best, float(D.max()))
        a, b = torch.nonzero(D >= best - 2.0 * eta, as_tuple=True)
        bar.update(e - s)
        kept_i.append(a + s)
        kept_j.append(b + s)
        kept_v.append(D[a, b].to(torch.float64))
        n_kept += int(a.numel())
        if n_kept > 4 * _PAIR_BATCH:  # prune what the running maximum has overtaken
            vi, vj, vv = torch.cat(kept_i), torch.cat(kept_j), torch.cat(kept_v)
            keep = vv >= best - 2.0 * eta
            kept_i, kept_j, kept_v = [vi[keep]], [vj[keep]], [vv[keep]]
            n_kept = int(keep.sum())
    vi, vj, vv = torch.cat(kept_i), torch.cat(kept_j), torch.cat(kept_v)
    keep = vv >= best - 2.0 * eta
    vi, vj = vi[keep], vj[keep]
    out = 0.0
    for s in range(0, int(vi.numel()), _PAIR_BATCH):
        diff = X[vi[s : s + _PAIR_BATCH]] - X[vj[s : s + _PAIR_BATCH]]
        out = max(out, float(exact(diff).max()))
    return out


def exact_sensitivity(
    X: torch.Tensor, *, chunk_size: int | None = None, l1_dtype: torch.dtype | None = None
) -> Sensitivity:
    """Exact Δ₁, Δ₂, Δ∞ over all pairs of rows of ``X`` (bounding.md §3), uncached.

    Args:
        X (`torch.Tensor` of shape `[V, k]`): transformed candidate rows (converted to float64).
        chunk_size (`int`, *optional*): rows per block (default: about 4M pairwise entries per block).
        l1_dtype (`torch.dtype`, *optional*): precision of the Δ₁ filter pass (``torch.float32`` or
            ``torch.float64``); defaults to float32 on CUDA and float64 on CPU. The result is the same.

    Returns:
        `Sensitivity` with ``exact=True``; equal to a float64 brute force by differences, whatever
        ``chunk_size`` is.

    Example:

    >>> import torch
    >>> s = exact_sensitivity(torch.tensor([[0.0, 0.0], [3.0, 4.0], [1.0, 0.0]]))
    >>> s.l1, s.l2, s.linf
    (7.0, 5.0, 4.0)
    """
    X = X.detach().to(torch.float64).contiguous()
    V, k = int(X.shape[0]), int(X.shape[1])
    if V < 2 or k == 0:
        return Sensitivity(l1=0.0, l2=0.0, linf=0.0, exact=True)
    c = _block_rows(V, chunk_size)
    # Δ∞: max over columns of (max − min), one float64 subtraction, equal to the pairwise brute force
    linf = float((X.max(dim=0).values - X.min(dim=0).values).max())

    # Δ₂: float64 Gram blocks; |error| < η₂ = (d + 3)·u₆₄·4·max‖x‖² (bounding.md §3)
    sq = (X * X).sum(dim=1)
    eta2 = (k + 3) * U64 * 4.0 * float(sq.max())

    def gram(s: int, e: int) -> torch.Tensor:
        return sq[s:e, None] + sq[None, s:] - 2.0 * (X[s:e] @ X[s:].T)

    l2 = math.sqrt(_max_pair(X, c, gram, eta2, lambda diff: (diff * diff).sum(dim=1), "exact sensitivity (L2)"))

    # Δ₁: cdist(p = 1) blocks; float32 on CUDA (fast), float64 on CPU (faster there, tighter bound)
    lowp = (l1_dtype or (torch.float32 if X.device.type == "cuda" else torch.float64)) == torch.float32
    u = U32 if lowp else U64
    Xc = X.float() if lowp else X
    eta1 = (k + 3) * u * 2.0 * float(X.abs().sum(dim=1).max())

    def l1_block(s: int, e: int) -> torch.Tensor:
        return torch.cdist(Xc[s:e], Xc[s:], p=1.0)

    l1 = _max_pair(X, c, l1_block, eta1, lambda diff: diff.abs().sum(dim=1), "exact sensitivity (L1)")
    return Sensitivity(l1=l1, l2=l2, linf=linf, exact=True)
