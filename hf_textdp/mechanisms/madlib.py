"""madlib: the multivariate Laplace mechanism (Feyisetan et al. 2020, arXiv:1910.08902; madlib.md).

For a candidate w release ``q = φ(w) + Z`` with density ``p(z) ∝ exp(−ε‖z‖₂)`` on R^d, then
post-process q (postprocess.md; default: the exact nearest candidate). Z = r·u with r ~ Gamma(d, scale 1/ε),
drawn exactly (Marsaglia–Tsang) from the row's keyed stream, and u uniform on the unit sphere (a
normalised Gaussian).

Guarantee: ε·d metric DP in the Euclidean distance between rows of E, δ = 0; per token, pure
ε_tok-DP with ε_tok = ε·diam (madlib.md §3).

With ``bound`` set to a transform T of bounding.md (computed from the public matrix only), madlib perturbs
T(φ(w)) and searches the rows of T(E): the guarantee is then metric DP in the distance between
transformed rows, and d and diam are those of the transformed space (madlib.md §1).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from .. import backend
from ..accounting import Claim
from ..bounding import BOUNDS, Transform, fit_transform
from ..errors import InvalidParameterError
from ..rng import Draw, Streams, as_streams
from ..scale import scale_stats
from ..search import ExactIndex
from ..validation import check_choice
from .base import AdditiveMechanism


if TYPE_CHECKING:
    from ..space import EmbeddingSpace


__all__ = ["Madlib", "add_metric_laplace", "sample_madlib_noise", "sample_metric_laplace"]


def sample_metric_laplace(
    streams: Streams | torch.Generator, n: int, k: int, scale: float, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """``[n, k]`` float64 draws of density ∝ exp(−‖z‖₂/scale) on R^k (docs/mechanisms/madlib.md, "Sampling").

    Z = r·G/‖G‖: G are k standard normals (:attr:`Draw.NOISE`), r ~ Gamma(k, scale) (one exact
    Marsaglia–Tsang draw, :attr:`Draw.RADIUS`): ‖Z‖ has density ∝ r^{k−1}e^{−r/scale} and the direction
    is uniform on the sphere, independent of it (Feyisetan et al. 2020, §3).
    """
    s = as_streams(streams, n, device)
    if n == 0:
        return torch.empty((0, k), dtype=torch.float64, device=device)
    G = s.normals(Draw.NOISE, k)
    r = s.gamma(Draw.RADIUS, float(k)).mul_(scale)
    return G.mul_((r / torch.linalg.vector_norm(G, dim=1)).unsqueeze_(1))


def sample_madlib_noise(
    streams: Streams | torch.Generator, n: int, d: int, epsilon: float, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """``[n, d]`` float64 draws of density ∝ exp(−ε‖z‖): :func:`sample_metric_laplace` with scale 1/ε."""
    return sample_metric_laplace(streams, n, d, 1.0 / epsilon, device)


def add_metric_laplace(
    x: torch.Tensor, streams: Streams | torch.Generator, scale: float, rows: torch.Tensor | None = None
) -> torch.Tensor:
    """``fl32(x + Z)`` ``[n, k]`` for x ``[n, k]`` (fp32 or float64), Z of :func:`sample_metric_laplace` per row;
    with ``rows`` (``[n]`` int64), token i's input is row ``rows[i]`` of ``x``.

    One fused kernel draws the normals, normalises them and adds them, on a GPU (:mod:`hf_textdp.gpu.noise`)
    and on the CPU (:mod:`hf_textdp.cpu.noise`, which also reads the rows itself): the same numbers as the
    torch form up to an ulp of a float64 logarithm, cosine or sine; the torch form runs where neither does.
    """
    n, k = (x.shape[0] if rows is None else int(rows.numel())), x.shape[1]
    s = as_streams(streams, n, x.device)
    if n and backend.noise_shift_runs(x.device):
        r = s.gamma(Draw.RADIUS, float(k)).mul_(scale)
        out = backend.metric_laplace_shift(x, s.k0, s.k1, s.position, r, int(Draw.NOISE), rows=rows)
        if out is not None:
            return out
    return (_inputs(x, rows).double() + sample_metric_laplace(s, n, k, scale, x.device)).float()


def _inputs(x: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    """Token i's input of :func:`add_metric_laplace`: row i of ``x``, or row ``rows[i]``."""
    return x if rows is None else x[rows.to(x.device)]


class Madlib(AdditiveMechanism):
    """Multivariate Laplace noise on the model's own input embeddings (madlib.md).

    Args:
        epsilon (`float`): metric ε per unit of Euclidean distance in the embedding space.
        bound (`str`, *optional*, defaults to `"none"`): sensitivity bounding transform (bounding.md,
            default parameters: C = median row norm, JL with ξ = 0.9 and seed 0); madlib's guarantee
            is metric and needs none. With a bound, the metric is the distance between T(E) rows.
    """

    name = "madlib"
    OPTIONS = {"bound": "none"}
    BOUNDS: tuple[str, ...] = ("none", *BOUNDS)

    _bounded: tuple[str, Transform, torch.Tensor, ExactIndex] | None = None

    def _validate(self) -> None:
        check_choice(self.options["bound"], "bound", self.BOUNDS)

    # ---------------------------------------------------------------- bound (madlib.md §1, bounding.md)
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
        """x in float64, through T (then rounded to fp32, as the rows of T(E)) when a bound is set (madlib.md §1)."""
        if self.options["bound"] == "none":
            return x.double()
        if self._bounded is None:
            raise InvalidParameterError(
                f"mechanism 'madlib' with bound={self.options['bound']!r} has not been set up for a space; "
                "call mechanism.setup(space) first."
            )
        # rounded to fp32 like the searched rows T(E), so the metric is exactly that of the rows diam is taken over
        return self._bounded[1].apply(x).float().double()

    def perturb_positions(self, space: EmbeddingSpace, positions: torch.Tensor, streams: Streams) -> torch.Tensor:
        """:meth:`perturb` of rows ``positions`` of E; on the CPU without a bound, one call of the compiled kernel
        that reads the rows itself (it keeps each token's float64 noise in registers, so the batch needs no
        chunks and no gathered copy of its inputs)."""
        if backend.noise_reads_rows(space.device) and self.options["bound"] == "none" and not math.isinf(self.epsilon):
            return add_metric_laplace(space.E, streams, 1.0 / self.epsilon, rows=positions)
        return super().perturb_positions(space, positions, streams)

    def perturb(self, x: torch.Tensor, streams: Streams | torch.Generator) -> torch.Tensor:
        xt = self.transform_input(x) if self.options["bound"] != "none" else x
        if math.isinf(self.epsilon) or xt.shape[0] == 0:
            return xt.float()
        return add_metric_laplace(xt, streams, 1.0 / self.epsilon)

    def claim(self, space: EmbeddingSpace) -> Claim:
        rows = self.scale_metric_matrix(space)  # the searched rows; stats from the cache build no index
        stats = scale_stats(rows, store=space.store)

        def pair_bound(a: int, b: int) -> float:
            return self.epsilon * float(torch.linalg.vector_norm(rows[a].double() - rows[b].double()))

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
        rows = self.scale_metric_matrix(space)
        d = int(rows.shape[1])
        eps = self.epsilon
        stats = scale_stats(rows, store=space.store)
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
