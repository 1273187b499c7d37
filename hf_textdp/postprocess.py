"""Post-processing of noisy vectors (spec §7): a registry of steps that map z to candidates.

A step is ``apply(z, mechanism, space, streams)``: it sees the noisy vectors, public data
and fresh randomness from each token's keyed stream (:class:`~hf_textdp.rng.Streams`), and
**never the original token** — that is why every step preserves the mechanism's guarantee (§7.1).

Steps: ``nearest`` (§7.2), ``top2`` (§7.3), ``rank`` (§7.4, the fix of arXiv:2411.13784 §6), ``vector``
(§7.5), ``backproject`` (§7.6, projected mechanisms) and the unsafe ``nearest_excluding_input`` (§7.7),
which reads the input and therefore lives apart: it subclasses :class:`UnsafePostprocessStep`, runs
only through ``apply_unsafe(..., input_positions)``, and turns the claim into :func:`unsafe_claim`.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import threading
import weakref
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import torch

from .accounting import Claim
from .errors import InvalidParameterError, UnknownOptionError, UnknownPostprocessError
from .rng import Draw, Streams
from .validation import check_bool, check_choice, check_float, check_open_unit


if TYPE_CHECKING:
    from .mechanisms.base import AdditiveMechanism
    from .search import ExactIndex
    from .space import EmbeddingSpace


__all__ = [
    "PostprocessStep",
    "UnsafePostprocessStep",
    "ProjectedMechanism",
    "Nearest",
    "Top2",
    "Rank",
    "Vector",
    "Backproject",
    "NearestExcludingInput",
    "register_postprocess",
    "get_postprocess_class",
    "list_postprocess",
    "postprocess_option_names",
    "unsafe_claim",
    "truncated_geometric_ranks",
    "rank_select",
    "rank_select_knn",
    "median_rho1_subset",
]


class PostprocessStep(abc.ABC):
    """One post-processing step; ``OPTIONS`` declares its options and their defaults."""

    name: ClassVar[str] = ""
    OPTIONS: ClassVar[dict[str, Any]] = {}
    RELEASES_VECTORS: ClassVar[bool] = False
    UNSAFE: ClassVar[bool] = False

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            raise UnknownOptionError(
                f"options {unknown} are not accepted by postprocess {self.name!r}. "
                f"Its options: {sorted(self.OPTIONS)}."
            )
        self.options: dict[str, Any] = {**self.OPTIONS, **options}
        self._validate()

    def _validate(self) -> None:  # noqa: B027 - an optional hook, not an abstract method
        """Check ``self.options``."""

    def parameters(self) -> dict[str, Any]:
        return dict(self.options)

    def report_parameters(self, mechanism: AdditiveMechanism, space: EmbeddingSpace) -> dict[str, Any]:
        """The options as the privacy report shows them: :meth:`parameters`, plus resolved values."""
        return self.parameters()

    def check_mechanism(self, mechanism: AdditiveMechanism) -> None:
        """Raise :class:`InvalidParameterError` if this step does not apply to ``mechanism``.

        A step applies when the mechanism lists it in ``POSTPROCESS``; steps with further needs (a
        projection) check those too.
        """
        allowed = list(getattr(mechanism, "POSTPROCESS", ()))
        if self.name not in allowed:
            raise InvalidParameterError(
                f"postprocess={self.name!r} is not available for mechanism {mechanism.name!r}. Allowed: {allowed}."
            )

    @abc.abstractmethod
    def apply(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        streams: Streams,
    ) -> torch.Tensor:
        """Candidate positions ``[N]`` int64 (or vectors ``[N, k]`` when ``RELEASES_VECTORS``)."""


class Nearest(PostprocessStep):
    """The candidate nearest to z by the exact search of spec §1.5 (ties: lowest id) — spec §7.2."""

    name = "nearest"

    def apply(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        streams: Streams,
    ) -> torch.Tensor:
        return mechanism.search_index(space).search(z, 1)[:, 0]


# --------------------------------------------------------------------------- shared helpers
@runtime_checkable
class ProjectedMechanism(Protocol):
    """A mechanism whose noise lives in R^m after a public projection Φ ∈ R^{m×d} (``privemb``, §5)."""

    def projection_matrix(self, space: EmbeddingSpace) -> torch.Tensor:
        """Φ ``[m, d]`` fp32."""
        ...


def _projection(mechanism: AdditiveMechanism, space: EmbeddingSpace, what: str) -> torch.Tensor:
    if not isinstance(mechanism, ProjectedMechanism):
        raise InvalidParameterError(
            f"{what} needs a projected mechanism (one whose noise lives in R^m after a public projection, such as "
            f"'privemb'); mechanism {mechanism.name!r} has none. Allowed postprocess for it: "
            f"{list(mechanism.POSTPROCESS)}."
        )
    return mechanism.projection_matrix(space)


def backproject_vectors(y: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """x̂ = Φᵀy (the transpose, not the pseudo-inverse; spec §7.6), computed in float64, returned fp32 ``[N, d]``."""
    return (y.double() @ phi.to(y.device, torch.float64)).float()


def _token_uniforms(streams: Streams, draw: Draw, z: torch.Tensor) -> torch.Tensor:
    """One float64 uniform on (0, 1) per vector: the first uniform of ``draw`` in each token's stream, on CPU."""
    if len(streams) != z.shape[0]:
        raise InvalidParameterError(f"streams hold {len(streams)} tokens but z has {z.shape[0]} vectors.")
    return streams.uniforms(draw, 1)[:, 0].cpu()


# --------------------------------------------------------------------------- §7.3 top2
class Top2(PostprocessStep):
    """Output the nearest candidate with probability ``top2_p``, else the second nearest (spec §7.3).

    n₁, n₂ are the first two candidates in the order (‖z − φ(y)‖₂, id) over all of C, by the exact
    search of spec §1.5 with k = 2. One float64 uniform per vector comes from the token's keyed stream
    (its :attr:`~hf_textdp.rng.Draw.TOP2` draw). This is seed 002's "randomly output the first or second
    nearest neighbour", without its exclusion of the input (that is ``nearest_excluding_input``).

    Args:
        top2_p (`float`, *optional*, defaults to `0.5`): probability in [0, 1] of outputting n₁.
    """

    name = "top2"
    OPTIONS = {"top2_p": 0.5}

    def _validate(self) -> None:
        self.options["top2_p"] = check_open_unit(self.options["top2_p"], "top2_p", closed_low=True, closed_high=True)

    def apply(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        streams: Streams,
    ) -> torch.Tensor:
        self.check_mechanism(mechanism)
        u = _token_uniforms(streams, Draw.TOP2, z)
        nn = mechanism.search_index(space).search(z, 2).cpu()
        return torch.where(u < self.options["top2_p"], nn[:, 0], nn[:, 1])


# --------------------------------------------------------------------------- §7.4 rank
def truncated_geometric_ranks(u: torch.Tensor, lam: float, V: int) -> torch.Tensor:
    """Exact inverse CDF of P(r) ∝ exp(−λr), r = 0…V−1 (spec §7.4 step 2).

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
    """The candidate of rank ``ranks[i]`` from pivot ``pivots[i]`` in the order (δ, id) (spec §7.4 step 3).

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
    from .search import ExactIndex

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


#: ranks up to this are answered by a k-nearest-neighbour query from the pivot (spec §7.4 step 3)
KNN_MAX_RANK = 256
#: neighbours kept per pivot by the per-index neighbour cache (int32: V × this at most, never V × V)
KNN_CACHE_WIDTH = 64
#: the smallest k searched for a pivot: a few more neighbours cost little and serve its later ranks
KNN_MIN_K = 16


class _NeighbourCache:
    """The first neighbours of the pivots searched so far, for one index (filled lazily).

    Row p of ``table`` holds, in its first ``length[p]`` columns, the positions of ranks 1, 2, … from
    pivot p (the exact order of spec §1.5 with p excluded). A search for k neighbours gives the first k
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
    index: ExactIndex, pivots: torch.Tensor, ranks: torch.Tensor, *, max_rank: int = KNN_MAX_RANK
) -> torch.Tensor:
    """:func:`rank_select` for small ranks by an exact k-nearest-neighbour query from the pivot (spec §7.4).

    The candidate of rank r ≥ 1 from pivot p is the r-th nearest candidate other than p in the order
    (exact ‖φ(p) − φ(y)‖₂², id): the exact search of spec §1.5 with ``exclude=p`` and k ≥ r, column
    r − 1. That search returns the exact order (ties to the lowest id), which is the order of
    :func:`rank_select` wherever the float64 distances there are themselves ordered like the exact ones
    (every case but float64 near-ties between different rows). Each distinct pivot is searched once,
    with k = the next power of two ≥ max(its largest rank, ``KNN_MIN_K``), pivots with equal k in one
    batched search; the first ``KNN_CACHE_WIDTH`` neighbours are kept per index (O(V) memory, see
    :class:`_NeighbourCache`) and answer later ranks from the same pivot. Neither k, the batch nor the
    cache changes a row's answer, because the search is exact. Ranks above ``max_rank`` go to
    :func:`rank_select` (O(V) per token). No V × V.

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


_RHO_CACHE: weakref.WeakKeyDictionary[ExactIndex, float] = weakref.WeakKeyDictionary()
RANK_SUBSET = 4096


def median_rho1_subset(index: ExactIndex) -> float:
    """ρ̃₁: the median of exact float64 ρ₁ over the fixed subset S of spec §7.4 (cached per index).

    S is every position when V ≤ 4096, else positions ⌊k·V/4096⌋ for k = 0…4095. ρ₁(y) is the distance
    from y to its nearest other row of the searched matrix (§1.5 with the row itself excluded). It
    depends on the public matrix only.
    """
    cached = _RHO_CACHE.get(index)
    if cached is not None:
        return cached
    from .scale import rho1

    V = index.V
    if V <= RANK_SUBSET:
        positions = torch.arange(V, dtype=torch.int64)
    else:
        positions = (torch.arange(RANK_SUBSET, dtype=torch.int64) * V) // RANK_SUBSET
    value = float(np.median(rho1(index, positions)))
    _RHO_CACHE[index] = value
    return value


class Rank(PostprocessStep):
    """Seed 003's fix (arXiv:2411.13784): sample a rank around the nearest candidate (spec §7.4).

    p = nearest(z) is the pivot; every candidate is ranked by its distance to p (p has rank 0) and the
    candidate of rank r is output with probability ∝ exp(−c·ε·r), r = 0…V−1. It reads only z, the
    public matrix, public ε and c, and fresh randomness (one float64 uniform per vector from the
    token's keyed stream, its :attr:`~hf_textdp.rng.Draw.RANK` draw), so it is post-processing. Sampling
    is the exact inverse CDF of the truncated geometric law, O(V) per token.

    Args:
        rank_c (`float` or `"auto"`, *optional*, defaults to `"auto"`): c > 0, in units of distance;
            ``"auto"`` sets c = ρ̃₁/100 with ρ̃₁ from :func:`median_rho1_subset` on the space that
            ``nearest`` searches (public, cached), so λ = c·ε = ε·ρ̃₁/100.
    """

    name = "rank"
    OPTIONS = {"rank_c": "auto"}

    def _validate(self) -> None:
        c = self.options["rank_c"]
        if isinstance(c, str):
            if c != "auto":
                raise InvalidParameterError(f"rank_c must be 'auto' or a finite float > 0, got {c!r}.")
            return
        try:
            self.options["rank_c"] = check_float(c, "rank_c", minimum=0.0)
        except InvalidParameterError as err:
            raise type(err)(f"rank_c must be 'auto' or a finite float > 0, got {c!r}.") from None

    def rank_constant(self, mechanism: AdditiveMechanism, space: EmbeddingSpace) -> float:
        """c: the ``rank_c`` value, or ρ̃₁/100 of the searched space for ``"auto"``."""
        c = self.options["rank_c"]
        if c == "auto":
            return median_rho1_subset(mechanism.search_index(space)) / 100.0
        return float(c)

    def report_parameters(self, mechanism: AdditiveMechanism, space: EmbeddingSpace) -> dict[str, Any]:
        """``rank_c`` as given, ``rank_c_value`` (c, resolved for ``"auto"``) and ``rank_lambda`` = c·ε."""
        c = self.rank_constant(mechanism, space)
        return {**self.parameters(), "rank_c_value": c, "rank_lambda": c * mechanism.epsilon}

    def apply(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        streams: Streams,
    ) -> torch.Tensor:
        self.check_mechanism(mechanism)
        u = _token_uniforms(streams, Draw.RANK, z)
        index = mechanism.search_index(space)
        pivots = index.search(z, 1)[:, 0].cpu()
        lam = self.rank_constant(mechanism, space) * mechanism.epsilon
        ranks = truncated_geometric_ranks(u, lam, index.V)
        return rank_select_knn(index, pivots, ranks)


# --------------------------------------------------------------------------- §7.5, §7.6 vectors
class Vector(PostprocessStep):
    """Release the noisy vector itself as float32 (spec §7.5; ``inputs_embeds`` when k = d).

    Args:
        vector_space (`str`, *optional*, defaults to `"native"`): ``"native"`` releases z as the
            mechanism produced it (R^m for ``privemb``); ``"input"`` (projected mechanisms only) releases
            x̂ = Φᵀz ∈ R^d, usable as ``inputs_embeds`` (spec §7.6).
    """

    name = "vector"
    OPTIONS = {"vector_space": "native"}
    RELEASES_VECTORS = True
    VECTOR_SPACES: ClassVar[tuple[str, ...]] = ("native", "input")

    def _validate(self) -> None:
        check_choice(self.options["vector_space"], "vector_space", self.VECTOR_SPACES)

    def check_mechanism(self, mechanism: AdditiveMechanism) -> None:
        super().check_mechanism(mechanism)
        if self.options["vector_space"] == "input" and not isinstance(mechanism, ProjectedMechanism):
            raise InvalidParameterError(
                f"postprocess='vector' with vector_space='input' needs a projected mechanism (such as 'privemb'); "
                f"mechanism {mechanism.name!r} already releases vectors in the input space. "
                f"Allowed vector_space for it: ['native']."
            )

    def apply(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        streams: Streams,
    ) -> torch.Tensor:
        self.check_mechanism(mechanism)
        if self.options["vector_space"] == "input":
            phi = _projection(mechanism, space, "vector_space='input'")
            return backproject_vectors(z, phi)
        return z.to(torch.float32).clone()


class Backproject(PostprocessStep):
    """Map y ∈ R^m back with x̂ = Φᵀy, then output the nearest raw row of E (spec §7.6).

    The transpose, not the pseudo-inverse: E_Φ[ΦᵀΦ] = I_d, so x̂ is an unbiased estimate of the input
    row, while Φ⁺ ≈ (m/d)·Φᵀ shrinks it towards small-norm rows. Projected mechanisms only.
    """

    name = "backproject"

    def check_mechanism(self, mechanism: AdditiveMechanism) -> None:
        super().check_mechanism(mechanism)
        if not isinstance(mechanism, ProjectedMechanism):
            raise InvalidParameterError(
                f"postprocess='backproject' needs a projected mechanism (such as 'privemb'); mechanism "
                f"{mechanism.name!r} has no projection. Allowed: {list(mechanism.POSTPROCESS)}."
            )

    def apply(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        streams: Streams,
    ) -> torch.Tensor:
        self.check_mechanism(mechanism)
        phi = _projection(mechanism, space, "postprocess='backproject'")
        return mechanism.input_index(space).search(backproject_vectors(z, phi), 1)[:, 0]


# --------------------------------------------------------------------------- §7.7 unsafe
UNSAFE_WARNING = (
    "postprocess='nearest_excluding_input' reads the original token (seed 002's mapping): it is not "
    "post-processing and the output has NO privacy guarantee; dp_epsilon is null (spec §7.7)."
)
UNSAFE_NOT_COVERED = "no guarantee: the unsafe step makes the loss unbounded"


class UnsafePostprocessStep(PostprocessStep):
    """A step that reads the original tokens and so voids every guarantee (spec §7.7).

    It is run only through :meth:`apply_unsafe`, which receives the input positions; :meth:`apply`
    refuses. The privatizer wraps the mechanism's claim with :func:`unsafe_claim`.
    """

    UNSAFE = True

    def apply(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        streams: Streams,
    ) -> torch.Tensor:
        raise InvalidParameterError(
            f"postprocess={self.name!r} reads the original tokens; it runs only through "
            "apply_unsafe(z, mechanism, space, streams, input_positions)."
        )

    @abc.abstractmethod
    def apply_unsafe(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        streams: Streams,
        input_positions: torch.Tensor,
    ) -> torch.Tensor:
        """Like ``apply``, given the candidate positions ``[N]`` of the original tokens."""


class NearestExcludingInput(UnsafePostprocessStep):
    """Seed 002's mapping: the nearest candidate other than the input itself (spec §7.7). **No guarantee.**

    P[M(w) = w] = 0 while P[M(w') = w] > 0, so no ε bounds the loss; on a two-token vocabulary it
    reveals the input exactly. Exists only to reproduce seed 002, behind ``unsafe=True``.

    Args:
        unsafe (`bool`, defaults to `False`): must be ``True``, acknowledging that there is no guarantee.
    """

    name = "nearest_excluding_input"
    OPTIONS = {"unsafe": False}

    def _validate(self) -> None:
        if check_bool(self.options["unsafe"], "unsafe") is not True:
            raise InvalidParameterError(
                "postprocess='nearest_excluding_input' reads the original token and has no privacy guarantee "
                "(spec §7.7); it is only available with options={'unsafe': True}, got unsafe=False."
            )

    def apply_unsafe(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        streams: Streams,
        input_positions: torch.Tensor,
    ) -> torch.Tensor:
        self.check_mechanism(mechanism)
        if input_positions.shape != (z.shape[0],):
            raise InvalidParameterError(
                f"input_positions must have shape [{z.shape[0]}], got {tuple(input_positions.shape)}."
            )
        return mechanism.search_index(space).search(z, 1, exclude=input_positions.to(torch.int64))[:, 0]


def unsafe_claim(claim: Claim) -> Claim:
    """The claim of a mechanism run with an unsafe step: ``guarantee="none"`` (spec §10.1, §7.7).

    No ε exists, so ``epsilon_token`` is ``None`` (rows get a null ``dp_epsilon``) and ``certified`` is
    false. ``pair_bound`` keeps the mechanism's nominal bound, which the audit shows to be violated.
    """
    return dataclasses.replace(
        claim,
        guarantee="none",
        metric=None,
        epsilon_token=None,
        delta_token=0.0,
        delta_per_projection=None,
        certified=False,
        warnings=(*claim.warnings, UNSAFE_WARNING),
        not_covered=(*claim.not_covered, UNSAFE_NOT_COVERED),
    )


# --------------------------------------------------------------------------- registry
_REGISTRY: dict[str, type[PostprocessStep]] = {}


def register_postprocess(name: str, cls: type[PostprocessStep], *, force: bool = False) -> None:
    if name in _REGISTRY and not force:
        raise InvalidParameterError(f"postprocess {name!r} is already registered; pass force=True to replace it.")
    _REGISTRY[name] = cls


def list_postprocess() -> list[str]:
    return sorted(_REGISTRY)


def get_postprocess_class(name: str) -> type[PostprocessStep]:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownPostprocessError(
            f"Unknown postprocess {name!r}. Registered post-processing steps: {list_postprocess()}."
        ) from None


def postprocess_option_names() -> set[str]:
    """Every option declared by some registered step (used to route ``options`` keys)."""
    names: set[str] = set()
    for cls in _REGISTRY.values():
        names |= set(cls.OPTIONS)
    return names


register_postprocess("nearest", Nearest)
for _cls in (Top2, Rank, Vector, Backproject, NearestExcludingInput):
    register_postprocess(_cls.name, _cls)
del _cls
