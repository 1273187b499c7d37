"""madlib: the multivariate Laplace mechanism (Feyisetan et al. 2020, arXiv:1910.08902; spec §2).

For a candidate w release ``q = φ(w) + Z`` with density ``p(z) ∝ exp(−ε‖z‖₂)`` on R^d, then
post-process q (§7; default: the exact nearest candidate). Z = r·u with r ~ Gamma(d, scale 1/ε),
drawn as a sum of d Exp(1) variables over ε (exact for integer d, and generator-driven, unlike
``torch.distributions.Gamma``), and u uniform on the unit sphere (a normalised Gaussian).

Guarantee: ε·d metric DP in the Euclidean distance between rows of E, δ = 0; per token, pure
ε_tok-DP with ε_tok = ε·diam (spec §2.3).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from ..accounting import Claim
from ..scale import scale_stats
from ..validation import check_choice
from .base import AdditiveMechanism


if TYPE_CHECKING:
    from ..space import EmbeddingSpace


__all__ = ["Madlib", "sample_madlib_noise"]


def sample_madlib_noise(n: int, d: int, epsilon: float, g: torch.Generator, device: torch.device | str = "cpu"
                        ) -> torch.Tensor:
    """``[n, d]`` float64 draws of density ∝ exp(−ε‖z‖) (spec §2.2: draw 1 Gaussian, draw 2 exponentials)."""
    G = torch.randn((n, d), dtype=torch.float64, generator=g, device=device)
    X = torch.empty((n, d), dtype=torch.float64, device=device).exponential_(1.0, generator=g)
    r = X.sum(dim=1, keepdim=True) / epsilon  # Gamma(d, scale 1/ε)
    u = G / torch.linalg.vector_norm(G, dim=1, keepdim=True)
    return r * u


class Madlib(AdditiveMechanism):
    """Multivariate Laplace noise on the model's own input embeddings (spec §2).

    Args:
        epsilon (`float`): metric ε per unit of Euclidean distance in the embedding space.
        bound (`str`, *optional*, defaults to `"none"`): sensitivity bounding transform (spec §8);
            madlib's guarantee is metric and needs none.
    """

    name = "madlib"
    OPTIONS = {"bound": "none"}
    BOUNDS: tuple[str, ...] = ("none",)

    def _validate(self) -> None:
        check_choice(self.options["bound"], "bound", self.BOUNDS)

    def perturb(self, x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        if math.isinf(self.epsilon):
            return x.to(torch.float32).clone()
        n, d = x.shape
        if n == 0:
            return x.to(torch.float32).clone()
        z = sample_madlib_noise(n, d, self.epsilon, g, x.device)
        return (x.double() + z).float()

    def claim(self, space: EmbeddingSpace) -> Claim:
        stats = scale_stats(space.E, index=space.index)
        E64 = space.E.double()

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
        d = space.d
        eps = self.epsilon
        stats = scale_stats(space.E, index=space.index)
        return {
            "diam_exact": stats.diam_exact,
            "noise": {
                "radius_mean": d / eps,
                "radius_sd": math.sqrt(d) / eps,
                "projection_sd": math.sqrt(d + 1) / eps,
            },
        }
