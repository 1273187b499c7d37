"""Rank selection (postprocess.md §4, arXiv:2411.13784 §6): the truncated geometric rank and its candidate."""

from __future__ import annotations

import base64
import math
import threading
import weakref

import numpy as np
import torch

from ..memo import Store, matrix_key, memoised
from ..search import ExactIndex


__all__ = [
    "truncated_geometric_ranks",
    "rank_select",
    "rank_select_knn",
    "clear_neighbour_caches",
    "neighbour_table",
    "KNN_MAX_RANK",
]


def truncated_geometric_ranks(u: torch.Tensor, lam: float, V: int) -> torch.Tensor:
    """Exact inverse CDF of P(r) ∝ exp(−λr), r = 0…V−1 (postprocess.md §4 step 2).

    ``r = ⌊−log1p(u·expm1(−λV))/λ⌋``, clamped to [0, V − 1]: r = ⌊X⌋ with X of density ∝ e^{−λx} on
    [0, V). λ = +∞ gives r = 0; λ = 0 gives the uniform law.

    Args:
        u (`torch.Tensor`): float64 uniforms in [0, 1).
        lam (`float`): λ = c·ε ≥ 0.
        V (`int`): number of candidates.

    Returns:
        `torch.Tensor`: int64 ranks, same shape as ``u``.

    Example:

    >>> truncated_geometric_ranks(torch.tensor([0.0, 0.3, 0.5, 0.9, 0.99, 0.999999], dtype=torch.float64), 0.5, 10)
    tensor([0, 0, 1, 4, 8, 9])
    """
    u = u.to(torch.float64)
    if lam == 0.0:
        r = torch.floor(u * V)
    else:
        em = math.expm1(-lam * V)  # −1 when λ = ∞
        r = torch.floor(-torch.log1p(u * em) / lam)
    return r.clamp(min=0, max=V - 1).to(torch.int64)


_F64_CACHE: weakref.WeakKeyDictionary[ExactIndex, tuple[torch.Tensor, torch.Tensor]] = weakref.WeakKeyDictionary()


def _float64_rows(index: ExactIndex) -> tuple[torch.Tensor, torch.Tensor]:
    cached = _F64_CACHE.get(index)
    if cached is None:
        E64 = index.E.double()
        cached = (E64, (E64 * E64).sum(1))
        _F64_CACHE[index] = cached
    return cached


def rank_select(
    matrix: torch.Tensor | ExactIndex, pivots: torch.Tensor, ranks: torch.Tensor, *, block_entries: int = 2**22
) -> torch.Tensor:
    """The candidate of rank ``ranks[i]`` from pivot ``pivots[i]`` in the order (δ, id) (postprocess.md §4 step 3).

    δ_y = ‖φ(p) − φ(y)‖₂² in float64 by ``‖p‖² + ‖y‖² − 2p·y`` (chunked over tokens, O(V) memory per
    token, no sort, no V × V), where values within the Gram formula's rounding bound of 0 are recomputed
    by differences so that duplicate rows are exactly at 0. The pivot has rank 0. For rank r:
    t = kthvalue(δ, r + 1), n_less = #{δ < t}, and among the candidates with δ = t in increasing id the
    (r − n_less + 1)-th is returned.

    Args:
        matrix (`torch.Tensor` `[V, k]` or `ExactIndex`): the rows ``nearest`` searched.
        pivots (`torch.Tensor`): int64 positions ``[N]``.
        ranks (`torch.Tensor`): int64 ranks ``[N]`` in [0, V − 1].

    Returns:
        `torch.Tensor`: int64 positions ``[N]`` on CPU.
    """
    if isinstance(matrix, ExactIndex):
        E64, sq = _float64_rows(matrix)
    else:
        E64 = matrix.to(torch.float32).double()
        sq = (E64 * E64).sum(1)
    V, k = E64.shape
    dev = E64.device
    pivots = pivots.to(torch.int64).cpu()
    ranks = ranks.to(torch.int64).cpu()
    out = pivots.clone()
    todo = torch.nonzero(ranks > 0).squeeze(1)
    if todo.numel() == 0:
        return out
    tol_factor = 4.0 * (k + 2) * 2.0**-53
    step = max(1, block_entries // V)
    for b0 in range(0, todo.numel(), step):
        rows = todo[b0 : b0 + step]
        p = pivots[rows].to(dev)
        r = ranks[rows].to(dev)
        n = rows.numel()
        D = sq[p][:, None] + sq[None, :] - 2.0 * (E64[p] @ E64.T)
        # Gram-formula values near 0 (duplicates, near-duplicates): recompute by differences
        near = torch.nonzero(D <= tol_factor * (sq[p][:, None] + sq[None, :]))
        if near.numel():
            a, c = near[:, 0], near[:, 1]
            D[a, c] = ((E64[p[a]] - E64[c]) ** 2).sum(1)
        ar = torch.arange(n, device=dev)
        D[ar, p] = -math.inf
        t = torch.empty(n, dtype=torch.float64, device=dev)
        for rv in torch.unique(r).tolist():  # few distinct ranks per block: batched O(V) selections
            sel = torch.nonzero(r == rv).squeeze(1)
            t[sel] = torch.kthvalue(D[sel], int(rv) + 1, dim=1).values
        n_less = (D < t[:, None]).sum(1)
        eq = D == t[:, None]
        target = (r - n_less + 1)[:, None]  # 1-based among the ties, in increasing id
        hit = eq & (torch.cumsum(eq.to(torch.int64), dim=1) == target)
        out[rows] = torch.argmax(hit.to(torch.int8), dim=1).cpu()
    return out


#: ranks up to this are answered by a k-nearest-neighbour query from the pivot (postprocess.md §4 step 3)
KNN_MAX_RANK = 256
#: neighbours kept per pivot by the per-index neighbour cache (int32: V × this at most, never V × V)
KNN_CACHE_WIDTH = 64
#: the smallest k searched for a pivot: a few more neighbours cost little and serve its later ranks
KNN_MIN_K = 16
#: a batch that needs at least V / this many pivots searched fills the whole table instead (one batched
#: search of every row, kept in the store: public, O(V·width)); later batches and processes read it
KNN_FULL_TABLE_SHARE = 16
_TABLES: dict[str, np.ndarray] = {}
#: each index's table key, hashed once (a cache refill after :func:`clear_neighbour_caches` reads it)
_TABLE_KEYS: weakref.WeakKeyDictionary[ExactIndex, dict[int, str]] = weakref.WeakKeyDictionary()


def _table_key(index: ExactIndex, width: int) -> str:
    keys = _TABLE_KEYS.setdefault(index, {})
    if width not in keys:
        keys[width] = matrix_key(b"hf_textdp/neighbours/v1\x00", index.E, np.asarray([width], dtype="<i8").tobytes())
    return keys[width]


def neighbour_table(index: ExactIndex, width: int, store: Store | None = None) -> np.ndarray:
    """``[V, width]`` int32: row p holds the positions of ranks 1…width from pivot p (exact order, p excluded).

    One exact search of every row with ``k = width`` (space.md §5), in blocks; cached per matrix hash in
    this process and in ``store``. It depends on the public matrix only.
    """

    def compute() -> np.ndarray:
        out = np.empty((index.V, width), dtype=np.int32)
        for s in range(0, index.V, 4096):
            p = torch.arange(s, min(s + 4096, index.V), dtype=torch.int64)
            out[s : s + p.numel()] = index.search(index.E[p.to(index.device)], width, exclude=p).numpy()
        return out

    def decode(raw: dict[str, object]) -> np.ndarray:
        table = np.frombuffer(base64.b64decode(str(raw["int32_le"])), dtype="<i4").reshape(index.V, width)
        return table.astype(np.int32)

    def encode(table: np.ndarray) -> dict[str, object]:
        return {"int32_le": base64.b64encode(table.astype("<i4").tobytes()).decode("ascii")}

    return memoised(_TABLES, store, "neighbours", _table_key(index, width), compute, decode, encode)


class _NeighbourCache:
    """The first neighbours of the pivots searched so far, for one index (filled lazily).

    Row p of ``table`` holds, in its first ``length[p]`` columns, the positions of ranks 1, 2, … from
    pivot p (the exact order of space.md §5 with p excluded). A search for k neighbours gives the first k
    of that order whatever k, the query block or the other pivots in the batch (the search is exact),
    so a cached entry is the answer any later search would give. Memory: V × ``width`` int32, O(V),
    allocated uninitialised (pages that no pivot has touched stay uncommitted).
    """

    def __init__(self, V: int, width: int) -> None:
        self.width = width
        self.table = torch.empty((V, width), dtype=torch.int32)  # rows are read only up to length[p]
        self.length = torch.zeros(V, dtype=torch.int64)
        self.lock = threading.Lock()

    def lookup(self, pivots: torch.Tensor, ranks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(hit mask, positions of the hits) for ranks ≥ 1."""
        with self.lock:
            hit = self.length[pivots] >= ranks
            found = self.table[pivots[hit], ranks[hit] - 1].to(torch.int64)
        return hit, found

    def fill(self, table: np.ndarray) -> None:
        """Take a whole :func:`neighbour_table` (every pivot answered up to ``width``)."""
        with self.lock:
            self.table = torch.from_numpy(table[:, : self.width])
            self.length.fill_(self.width)

    def store(self, pivots: torch.Tensor, neighbours: torch.Tensor) -> None:
        """Record ``neighbours[i]`` (the first k neighbours of ``pivots[i]``, distinct pivots)."""
        n = min(neighbours.shape[1], self.width)
        with self.lock:
            longer = self.length[pivots] < n
            if bool(longer.any()):
                p = pivots[longer]
                self.table[p, :n] = neighbours[longer, :n].to(torch.int32)
                self.length[p] = n


_KNN_CACHE: weakref.WeakKeyDictionary[ExactIndex, _NeighbourCache] = weakref.WeakKeyDictionary()
_KNN_CACHE_LOCK = threading.Lock()


def clear_neighbour_caches() -> None:
    """Empty the rank step's neighbour caches (``hf-textdp bench`` times every pass from a cold cache)."""
    with _KNN_CACHE_LOCK:
        _KNN_CACHE.clear()


def _neighbour_cache(index: ExactIndex) -> _NeighbourCache:
    with _KNN_CACHE_LOCK:
        cache = _KNN_CACHE.get(index)
        if cache is None:
            cache = _NeighbourCache(index.V, min(KNN_CACHE_WIDTH, max(index.V - 1, 1)))
            _KNN_CACHE[index] = cache
        return cache


def rank_select_knn(
    index: ExactIndex,
    pivots: torch.Tensor,
    ranks: torch.Tensor,
    *,
    max_rank: int = KNN_MAX_RANK,
    store: Store | None = None,
) -> torch.Tensor:
    """:func:`rank_select` for small ranks by an exact k-nearest-neighbour query from the pivot (postprocess.md §4).

    The candidate of rank r ≥ 1 from pivot p is the r-th nearest candidate other than p in the order
    (exact ‖φ(p) − φ(y)‖₂², id): the exact search of space.md §5 with ``exclude=p`` and k ≥ r, column
    r − 1. That search returns the exact order (ties to the lowest id), which is the order of
    :func:`rank_select` wherever the float64 distances there are themselves ordered like the exact ones
    (every case but float64 near-ties between different rows). Each distinct pivot is searched once,
    with k = the next power of two ≥ max(its largest rank, ``KNN_MIN_K``), pivots with equal k in one
    batched search; the first ``KNN_CACHE_WIDTH`` neighbours are kept per index (O(V) memory, see
    :class:`_NeighbourCache`) and answer later ranks from the same pivot. A batch that needs at least
    V / :data:`KNN_FULL_TABLE_SHARE` pivots searched fills the whole cache from :func:`neighbour_table`
    instead (kept in ``store``, so a later process reads it). Neither k, the batch nor the cache changes
    a row's answer, because the search is exact. Ranks above ``max_rank`` go to :func:`rank_select`
    (O(V) per token). No V × V.

    Args:
        index (`ExactIndex`): the rows ``nearest`` searched.
        pivots (`torch.Tensor`): int64 positions ``[N]``.
        ranks (`torch.Tensor`): int64 ranks ``[N]`` in [0, V − 1].
        max_rank (`int`, defaults to `KNN_MAX_RANK`): the largest rank answered by the search.

    Returns:
        `torch.Tensor`: int64 positions ``[N]`` on CPU.
    """
    pivots = pivots.to(torch.int64).cpu()
    ranks = ranks.to(torch.int64).cpu()
    out = pivots.clone()
    V = index.V
    small = (ranks > 0) & (ranks <= max_rank)
    if V > 1 and bool(small.any()):
        rows = torch.nonzero(small).squeeze(1)
        cache = _neighbour_cache(index)
        hit, found = cache.lookup(pivots[rows], ranks[rows])
        out[rows[hit]] = found
        rows = rows[~hit]
        if rows.numel() and torch.unique(pivots[rows]).numel() * KNN_FULL_TABLE_SHARE >= V:
            cache.fill(neighbour_table(index, cache.width, store))
            hit, found = cache.lookup(pivots[rows], ranks[rows])
            out[rows[hit]] = found
            rows = rows[~hit]
        if rows.numel():
            p, r = pivots[rows], ranks[rows]
            uniq, inv = torch.unique(p, return_inverse=True)
            need = torch.zeros(uniq.numel(), dtype=torch.int64).scatter_reduce_(0, inv, r, "amax")
            bucket = torch.ceil(torch.log2(need.clamp(min=KNN_MIN_K).double())).to(torch.int64)
            slot = torch.empty(uniq.numel(), dtype=torch.int64)
            for b in torch.unique(bucket).tolist():
                sel = torch.nonzero(bucket == b).squeeze(1)
                k = min(2 ** int(b), V - 1)
                ps = uniq[sel]
                nn = index.search(index.E[ps.to(index.device)], k, exclude=ps)
                cache.store(ps, nn)
                slot[sel] = torch.arange(sel.numel())
                mine = torch.nonzero(bucket[inv] == b).squeeze(1)
                out[rows[mine]] = nn[slot[inv[mine]], r[mine] - 1]
    large = ranks > max_rank
    if bool(large.any()):
        rows = torch.nonzero(large).squeeze(1)
        out[rows] = rank_select(index, pivots[rows], ranks[rows])
    return out
