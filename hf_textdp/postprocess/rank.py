"""``rank``: sample a rank around the nearest candidate (postprocess.md §4; the fix of arXiv:2411.13784 §6)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..errors import InvalidParameterError
from ..rng import Draw, Streams
from ..scale import rho1
from ..search import ExactIndex
from ..validation import check_float
from .base import PostprocessStep, token_uniforms
from .select import rank_select_knn, truncated_geometric_ranks


if TYPE_CHECKING:
    from ..mechanisms.base import AdditiveMechanism
    from ..space import EmbeddingSpace


__all__ = ["RANK_SUBSET", "median_rho1_subset", "Rank"]


_RHO_CACHE: weakref.WeakKeyDictionary[ExactIndex, float] = weakref.WeakKeyDictionary()
RANK_SUBSET = 4096


def median_rho1_subset(index: ExactIndex) -> float:
    """ρ̃₁: the median of exact float64 ρ₁ over the fixed subset S of postprocess.md §4 (cached per index).

    S is every position when V ≤ 4096, else positions ⌊k·V/4096⌋ for k = 0…4095. ρ₁(y) is the distance
    from y to its nearest other row of the searched matrix (space.md §5 with the row itself excluded). It
    depends on the public matrix only.
    """
    cached = _RHO_CACHE.get(index)
    if cached is not None:
        return cached
    V = index.V
    if V <= RANK_SUBSET:
        positions = torch.arange(V, dtype=torch.int64)
    else:
        positions = (torch.arange(RANK_SUBSET, dtype=torch.int64) * V) // RANK_SUBSET
    value = float(np.median(rho1(index, positions)))
    _RHO_CACHE[index] = value
    return value


class Rank(PostprocessStep):
    """Seed 003's fix (arXiv:2411.13784): sample a rank around the nearest candidate (postprocess.md §4).

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
        u = token_uniforms(streams, Draw.RANK, z)
        index = mechanism.search_index(space)
        pivots = index.search(z, 1)[:, 0].cpu()
        lam = self.rank_constant(mechanism, space) * mechanism.epsilon
        ranks = truncated_geometric_ranks(u, lam, index.V)
        return rank_select_knn(index, pivots, ranks, store=space.store)
