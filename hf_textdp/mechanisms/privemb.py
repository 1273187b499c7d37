"""privemb: Gaussian projection, then multivariate Laplace noise in R^m (seed 000, PrivEmb; privemb.md).

Paper: Feyisetan and Kasiviswanathan, "Private Release of Text Embedding Vectors", TrustNLP workshop at
NAACL 2021 (no arXiv version), Algorithm 1 and Proposition 5; noise density as in Feyisetan et al. 2020
(arXiv:1910.08902, Eq. 1) with the scale s of privemb.md §4.

For a candidate w with input row x = φ(w) ∈ R^d, release ``y = Φx + κ`` where Φ ∈ R^{m×d} is a public
Gaussian matrix with entries N(0, 1/m) (drawn from ``numpy.random.default_rng(projection_seed)``,
independent of the noise seed) and κ has density ``p(z) ∝ exp(−ε‖z‖₂/s)`` on R^m: ‖κ‖ ~ Gamma(m,
scale s/ε) (an exact Marsaglia–Tsang draw from the token's keyed stream), direction uniform on the sphere.

The projection dimension is ``m = ⌈(√(log₂ d) + √(ln(1/δ)))² / β²⌉`` (privemb.md §2; the reading that
reproduces seed 000's appendix dimensions), so δ is used for m even when it is not charged.

Guarantee (privemb.md §6). For the fixed public Φ the privacy loss between w and w' is at most
ε‖Φ(x_w − x_{w'})‖₂/s. With ``certify=True`` (default) s = L̂, the exact largest stretch
‖Φ(x − x')‖/‖x − x'‖ over candidate pairs (privemb.md §4), so the mechanism is **pure ε·d metric DP**
(δ = 0). With ``certify=False`` s = 1 + β (seed 000, Proposition 5): the metric claim is the seed's
unproven (ε, δ)-metric DP with δ charged once per Φ; the pure bound above still holds exactly.
Per token, ε_tok = ε·diam_Φ/s with diam_Φ the largest ‖Φ(x − x')‖ over candidate pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt
import torch

from ..accounting import Claim
from ..errors import InvalidParameterError
from ..rng import Streams, as_streams
from ..search import ExactIndex
from ..utils.products import rowwise_matmul
from ..utils.threads import torch_threads
from ..validation import check_bool, check_int, check_open_unit
from .base import PERTURB_CHUNK, AdditiveMechanism
from .madlib import sample_metric_laplace
from .projection import ProjectionStats, phi_sha256, projection_dim, projection_matrix, projection_stats


if TYPE_CHECKING:
    from ..space import EmbeddingSpace


__all__ = ["Privemb", "sample_privemb_noise"]

#: bytes of the float64 table ΦE (every row of E projected once) kept per space at most; above it each batch of
#: tokens is projected on its own (13 MB at m = 55 for MiniLM's 30,522 rows)
TABLE_BYTES = 256 * 2**20
#: float64 values of a chunk of :meth:`Privemb.perturb_positions` on the CPU (its rows and noise stay in cache)
CHUNK_VALUES = 2**18


# --------------------------------------------------------------------------- privemb.md §5
def sample_privemb_noise(
    streams: Streams | torch.Generator, n: int, m: int, scale: float, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """``[n, m]`` float64 draws of density ∝ exp(−‖z‖/scale) in R^m (privemb.md §5, scale = s/ε).

    The direction is m normalised normals, the radius an exact Gamma(m, scale) draw
    (:func:`~hf_textdp.mechanisms.madlib.sample_metric_laplace`), from each token's keyed stream.
    """
    return sample_metric_laplace(streams, n, m, scale, device)


@dataclass
class _State:
    """Everything privemb derives from (config, space): public and data independent."""

    space_hash: str
    d: int
    m: int
    phi: npt.NDArray[np.float32]
    sha256: str
    stats: ProjectionStats
    s: float
    _phi_t: dict[str, torch.Tensor]
    _index: ExactIndex | None = None
    _table: torch.Tensor | None = None

    def phi_on(self, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        key = f"{device}/{dtype}"
        if key not in self._phi_t:
            self._phi_t[key] = torch.from_numpy(self.phi).to(device=device, dtype=dtype)
        return self._phi_t[key]


class Privemb(AdditiveMechanism):
    """PrivEmb: public Gaussian projection to R^m plus multivariate Laplace noise there (privemb.md).

    Args:
        epsilon (`float`): metric ε per unit of Euclidean distance between rows of E.
        delta (`float`, *optional*, defaults to `1e-6`): used for m (privemb.md §2); charged once per Φ
            (``delta_per_projection``) only when ``certify=False``.
        beta (`float`, *optional*, defaults to `0.9`): distortion β ∈ (0, 1) (seed 000's experiments).
        m (`int`, *optional*): projection dimension ≥ 1; ``None`` → privemb.md §2's formula.
        projection_seed (`int`, *optional*, defaults to `0`): public seed of Φ, never the noise seed.
        certify (`bool`, *optional*, defaults to `True`): noise scale s = L̂ (exact, pure ε·d metric DP)
            instead of the seed's s = 1 + β.

    Example:

    >>> mech = Privemb(epsilon=10.0, beta=0.9)
    >>> mech.parameters()["delta"], mech.options["certify"]
    (1e-06, True)
    """

    name = "privemb"
    OPTIONS = {"beta": 0.9, "m": None, "projection_seed": 0, "certify": True}
    USES_DELTA = True
    DEFAULT_DELTA = 1e-6
    # AdditiveMechanism's literal makes mypy infer a 5-tuple; the declared type (Mechanism) is tuple[str, ...]
    POSTPROCESS: ClassVar[tuple[str, ...]] = ("nearest", "vector", "backproject")

    def _validate(self) -> None:
        self.options["beta"] = check_open_unit(self.options["beta"], "beta")
        if self.options["m"] is not None:
            self.options["m"] = check_int(self.options["m"], "m", minimum=1)
        self.options["projection_seed"] = check_int(self.options["projection_seed"], "projection_seed", minimum=0)
        self.options["certify"] = check_bool(self.options["certify"], "certify")
        self._states: dict[str, _State] = {}
        self._active: _State | None = None

    # ---------------------------------------------------------------- public constants
    def projection_dim(self, d: int) -> int:
        """m for input dimension d: the ``m`` option, or privemb.md §2's formula from β, δ and d."""
        if self.options["m"] is not None:
            return int(self.options["m"])
        assert self.delta is not None
        return projection_dim(beta=self.options["beta"], delta=self.delta, d=d)

    def _state(self, space: EmbeddingSpace) -> _State:
        key = space.space_hash
        st = self._states.get(key)
        if st is None:
            d = space.d
            m = self.projection_dim(d)
            phi = projection_matrix(m, d, self.options["projection_seed"])
            stats = projection_stats(space.E, phi, store=space.store)
            s = stats.L_hat if self.options["certify"] else 1.0 + self.options["beta"]
            if s <= 0.0:
                raise InvalidParameterError(
                    f"model: every pair of the {space.V} candidate rows of {space.model_id!r} is equal or "
                    "annihilated by the projection (L_hat = 0), so privemb's noise scale is 0; "
                    "use a different projection_seed or m."
                )
            st = _State(
                space_hash=key,
                d=d,
                m=m,
                phi=phi,
                sha256=phi_sha256(phi),
                stats=stats,
                s=s,
                _phi_t={},
            )
            self._states[key] = st
        self._active = st
        return st

    def setup(self, space: EmbeddingSpace) -> None:
        """Draw Φ and compute L̂ and diam_Φ for ``space`` (cached); ``perturb`` uses this space's Φ."""
        self._state(space)

    @property
    def s(self) -> float:
        """The noise scale s (L̂ or 1 + β) of the space last passed to :meth:`setup`."""
        return self._require().s

    def _require(self) -> _State:
        if self._active is None:
            raise InvalidParameterError(
                "privemb: Φ and s depend on the embedding space; call setup(space) before perturb()."
            )
        return self._active

    def projection_matrix(self, space: EmbeddingSpace) -> torch.Tensor:
        """Φ ``[m, d]`` fp32 on the space's device (public; used by ``backproject`` and ``vector``)."""
        return self._state(space).phi_on(space.device, torch.float32)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """The pre-noise map ``Φx`` in float64, ``[n, m]``, for inputs ``[n, d]`` (after :meth:`setup`)."""
        st = self._require()
        return rowwise_matmul(x.double(), st.phi_on(x.device, torch.float64).T)

    def projected_rows(self, space: EmbeddingSpace) -> torch.Tensor | None:
        """ΦE: every row of E projected in float64, ``[V, m]``, by one product (cached per space); ``None`` on a
        GPU or where it would exceed :data:`TABLE_BYTES`.

        A batch's tokens then read their rows instead of paying a product per batch; the rows are those of a batch's
        own :meth:`project` (:func:`~hf_textdp.utils.products.rowwise_matmul`: a row's product does not depend on the
        rows around it).
        """
        st = self._state(space)
        if st._table is None and space.device.type == "cpu" and space.V * st.m * 8 <= TABLE_BYTES:
            st._table = self.project(space.E)
        return st._table

    def search_index(self, space: EmbeddingSpace) -> ExactIndex:
        """Exact index over P_E = E·Φᵀ (computed in float64, stored fp32): ``nearest`` in R^m (privemb.md §7)."""
        st = self._state(space)
        if st._index is None:
            table = self.projected_rows(space)
            if table is None:
                table = self.project(space.E)
            st._index = ExactIndex(table.float(), space.device)
        return st._index

    # ---------------------------------------------------------------- sampling (privemb.md §5)
    def _radius_scale(self) -> float:
        """Scale of the Gamma(m, ·) radius: s/ε."""
        return self.s / self.epsilon

    def sample_noise(self, streams: Streams, n: int) -> torch.Tensor:
        """``[n, m]`` float64 noise for n tokens (subclasses may override for broken variants)."""
        return sample_privemb_noise(streams, n, self._require().m, self._radius_scale(), streams.device)

    def perturb(self, x: torch.Tensor, streams: Streams | torch.Generator) -> torch.Tensor:
        st = self._require()
        n, d = x.shape
        if d != st.d:
            raise InvalidParameterError(
                f"x must have {st.d} columns (the space of setup()), got shape {tuple(x.shape)}."
            )
        p = self.project(x)
        if math.isinf(self.epsilon) or n == 0:
            return p.float()
        return (p + self.sample_noise(as_streams(streams, n, x.device), n)).float()

    def perturb_positions(self, space: EmbeddingSpace, positions: torch.Tensor, streams: Streams) -> torch.Tensor:
        """``fl32(ΦE[p_i] + κ_i)`` for rows ``positions`` of E: on the CPU the rows of :meth:`projected_rows` (no
        product per batch) and the noise of chunks of :data:`CHUNK_VALUES` values, written into one output."""
        table = self.projected_rows(space)
        if table is None or math.isinf(self.epsilon):
            return super().perturb_positions(space, positions, streams)
        st = self._state(space)
        n = int(positions.numel())
        out = torch.empty((n, st.m), dtype=torch.float32)
        step = max(PERTURB_CHUNK, CHUNK_VALUES // st.m)
        with torch_threads(1 if self.serial_small_ops else None):
            for s in range(0, n, step):
                e = min(n, s + step)
                p = table[positions[s:e].to(table.device)]
                out[s:e] = p.add_(self.sample_noise(streams.slice(s, e), e - s))  # rounded once to fp32
        return out

    # ---------------------------------------------------------------- claim and report (privemb.md §6)
    def claim(self, space: EmbeddingSpace) -> Claim:
        st = self._state(space)
        eps, s = self.epsilon, st.s
        certify = bool(self.options["certify"])
        phi64 = st.phi.astype(np.float64)
        E = space.E

        def pair_bound(a: int, b: int) -> float:
            dx = E[a].cpu().numpy().astype(np.float64) - E[b].cpu().numpy().astype(np.float64)
            return eps * float(np.linalg.norm(phi64 @ dx)) / s

        warnings: tuple[str, ...] = ()
        not_covered: tuple[str, ...] = ()
        if not certify:
            beta = self.options["beta"]
            warnings = (
                f"privemb certify=False: s = 1 + beta = {1.0 + beta} is seed 000's calibration; its (epsilon, "
                f"delta)-metric DP claim (delta = {self.delta} once per projection) rests on an unproven bound "
                f"(privemb.md §6). For this projection L_hat = {st.stats.L_hat:.6g}"
                + (" > 1 + beta: the metric claim fails for some pair." if st.stats.L_hat > 1.0 + beta else ".")
                + " The pure per-token bound epsilon_token holds exactly.",
            )
            not_covered = ("privemb: the metric claim holds with probability 1 - delta over Phi unless certified.",)
        return Claim(
            guarantee="metric_dp",
            metric="euclidean",
            epsilon=eps,
            delta=None,  # the per-token release is pure for the fixed Φ; δ is per projection
            epsilon_token=eps * st.stats.diam_projected / s,
            delta_token=0.0,
            certified=certify,
            delta_per_projection=0.0 if certify else self.delta,
            warnings=warnings,
            not_covered=not_covered,
            pair_bound=pair_bound,
        )

    def details(self, space: EmbeddingSpace) -> dict[str, Any]:
        st = self._state(space)
        scale = st.s / self.epsilon
        return {
            "beta": self.options["beta"],
            "projection_seed": self.options["projection_seed"],
            "d": st.d,
            "noise": {"radius_mean": st.m * scale, "radius_sd": math.sqrt(st.m) * scale},
        }

    def projection(self, space: EmbeddingSpace) -> dict[str, Any] | None:
        st = self._state(space)
        out: dict[str, Any] = {"m": st.m, "sha256": st.sha256, "s": st.s}
        if self.options["certify"]:
            out["L_hat"] = st.stats.L_hat
        out["diam_projected"] = st.stats.diam_projected
        return out
