"""madlib: the multivariate Laplace mechanism (Feyisetan et al. 2020, arXiv:1910.08902; spec §2).

For a candidate w release ``q = φ(w) + Z`` with density ``p(z) ∝ exp(−ε‖z‖₂)`` on R^d, then
post-process q (§7; default: the exact nearest candidate). Z = r·u with r ~ Gamma(d, scale 1/ε),
drawn as a sum of d Exp(1) variables over ε (exact for integer d, and generator-driven, unlike
``torch.distributions.Gamma``), and u uniform on the unit sphere (a normalised Gaussian).

Guarantee: ε·d metric DP in the Euclidean distance between rows of E, δ = 0; per token, pure
ε_tok-DP with ε_tok = ε·diam (spec §2.3).

With ``bound`` set to a transform T of spec §8 (computed from the public matrix only), madlib perturbs
T(φ(w)) and searches the rows of T(E): the guarantee is then metric DP in the distance between
transformed rows, and d and diam are those of the transformed space (spec §2.1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..accounting import Claim
from ..bounding import BOUNDS, Transform, fit_transform
from ..errors import InvalidParameterError
from ..scale import scale_stats
from ..search import ExactIndex
from ..validation import check_choice
from .base import AdditiveMechanism


if TYPE_CHECKING:
    from ..space import EmbeddingSpace


__all__ = ["Madlib", "sample_madlib_noise"]


def sample_madlib_noise(
    n: int, d: int, epsilon: float, g: torch.Generator, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """``[n, d]`` float64 draws of density ∝ exp(−ε‖z‖) (spec §2.2: draw 1 Gaussian, draw 2 exponentials)."""
    G = torch.randn((n, d), dtype=torch.float64, generator=g, device=device)
    X = torch.empty((n, d), dtype=torch.float64, device=device).exponential_(1.0, generator=g)
    r = X.sum(dim=1, keepdim=True) / epsilon  # Gamma(d, scale 1/ε)
    u = G / torch.linalg.vector_norm(G, dim=1, keepdim=True)
    z: torch.Tensor = r * u
    return z


def sample_madlib_noise_rows(
    sizes: Sequence[int], d: int, epsilon: float, gens: Sequence[torch.Generator], device: torch.device | str = "cpu"
) -> torch.Tensor:
    """:func:`sample_madlib_noise` of consecutive rows (``sizes[i]`` vectors from ``gens[i]``), concatenated.

    Row i's draws fill its own slice of one buffer (``normal_`` and ``exponential_`` on a contiguous
    [n_i, d] slice are ``randn``/``exponential_`` of that shape), in spec §2.2's order, and its sums and
    norms are taken on that slice alone; the elementwise rest (÷ε, G/‖G‖, r·u) is the same float64
    operation per element whatever the batch. So the result equals the per-row calls bit for bit.
    """
    N = sum(sizes)
    G = torch.empty((N, d), dtype=torch.float64, device=device)
    X = torch.empty((N, d), dtype=torch.float64, device=device)
    r = torch.empty((N, 1), dtype=torch.float64, device=device)
    norm = torch.empty((N, 1), dtype=torch.float64, device=device)
    s = 0
    for n, g in zip(sizes, gens, strict=True):
        if n:
            e = s + n
            G[s:e].normal_(generator=g)  # draw 1
            X[s:e].exponential_(1.0, generator=g)  # draw 2
            torch.sum(X[s:e], dim=1, keepdim=True, out=r[s:e])
            torch.linalg.vector_norm(G[s:e], dim=1, keepdim=True, out=norm[s:e])
            s = e
    return (r / epsilon) * (G / norm)


class Madlib(AdditiveMechanism):
    """Multivariate Laplace noise on the model's own input embeddings (spec §2).

    Args:
        epsilon (`float`): metric ε per unit of Euclidean distance in the embedding space.
        bound (`str`, *optional*, defaults to `"none"`): sensitivity bounding transform (spec §8,
            default parameters: C = median row norm, JL with ξ = 0.9 and seed 0); madlib's guarantee
            is metric and needs none. With a bound, the metric is the distance between T(E) rows.
    """

    name = "madlib"
    OPTIONS = {"bound": "none"}
    BOUNDS: tuple[str, ...] = ("none", *BOUNDS)

    _bounded: tuple[str, Transform, torch.Tensor, ExactIndex] | None = None

    def _validate(self) -> None:
        check_choice(self.options["bound"], "bound", self.BOUNDS)

    # ---------------------------------------------------------------- bound (spec §2.1, §8)
    def _transformed(self, space: EmbeddingSpace) -> tuple[Transform, torch.Tensor, ExactIndex] | None:
        """(T, T(E) as fp32, its index) for ``space``, or ``None`` without a bound (cached per space)."""
        if self.options["bound"] == "none":
            return None
        if self._bounded is None or self._bounded[0] != space.space_hash:
            T = fit_transform(space.E, self.options["bound"], ids=space.candidate_ids)
            rows = T.apply(space.E).to(torch.float32).contiguous()
            self._bounded = (space.space_hash, T, rows, ExactIndex(rows, space.device))
        return self._bounded[1:]

    def setup(self, space: EmbeddingSpace) -> None:
        self._transformed(space)

    def search_index(self, space: EmbeddingSpace) -> ExactIndex:
        bounded = self._transformed(space)
        return space.index if bounded is None else bounded[2]

    def scale_metric_matrix(self, space: EmbeddingSpace) -> torch.Tensor:
        bounded = self._transformed(space)
        return space.E if bounded is None else bounded[1]

    def transform_input(self, x: torch.Tensor) -> torch.Tensor:
        """x in float64, through T (then rounded to fp32, as the rows of T(E)) when a bound is set (spec §2.1)."""
        if self.options["bound"] == "none":
            return x.double()
        if self._bounded is None:
            raise InvalidParameterError(
                f"mechanism 'madlib' with bound={self.options['bound']!r} has not been set up for a space; "
                "call mechanism.setup(space) first."
            )
        # rounded to fp32 like the searched rows T(E), so the metric is exactly that of the rows diam is taken over
        return self._bounded[1].apply(x).float().double()

    def perturb(self, x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        xt = self.transform_input(x)
        if math.isinf(self.epsilon):
            return xt.float()
        n, d = xt.shape
        if n == 0:
            return xt.float()
        z = sample_madlib_noise(n, d, self.epsilon, g, x.device)
        return (xt + z).float()

    def perturb_rows(self, xs: Sequence[torch.Tensor], gens: Sequence[torch.Generator]) -> torch.Tensor:
        """:meth:`perturb` for several rows (:func:`sample_madlib_noise_rows`, then x + z and the fp32
        rounding, elementwise): equal to ``torch.cat([perturb(x, g) ...])`` bit for bit, with far fewer
        small ops per row."""
        batched = self._keeps(Madlib, "perturb", "transform_input")
        if not batched or self.options["bound"] != "none" or math.isinf(self.epsilon) or len(xs) < 2:
            return super().perturb_rows(xs, gens)
        x = torch.cat(list(xs), 0)
        z = sample_madlib_noise_rows([int(p.shape[0]) for p in xs], x.shape[1], self.epsilon, gens, x.device)
        return (x.double() + z).float()

    def claim(self, space: EmbeddingSpace) -> Claim:
        index = self.search_index(space)
        stats = scale_stats(index.E, index=index)
        E64 = index.E.double()

        def pair_bound(a: int, b: int) -> float:
            return self.epsilon * float(torch.linalg.vector_norm(E64[a] - E64[b]))

        return Claim(
            guarantee="metric_dp",
            metric="euclidean",
            epsilon=self.epsilon,
            delta=None,
            epsilon_token=self.epsilon * stats.diam,
            delta_token=0.0,
            certified=True,
            pair_bound=pair_bound,
        )

    def details(self, space: EmbeddingSpace) -> dict[str, Any]:
        index = self.search_index(space)
        d = index.d
        eps = self.epsilon
        stats = scale_stats(index.E, index=index)
        bounded = self._transformed(space)
        return {
            "bound": self.options["bound"],
            **({"transform": bounded[0].parameters()} if bounded is not None else {}),
            "diam_exact": stats.diam_exact,
            "noise": {
                "radius_mean": d / eps,
                "radius_sd": math.sqrt(d) / eps,
                "projection_sd": math.sqrt(d + 1) / eps,
            },
        }
