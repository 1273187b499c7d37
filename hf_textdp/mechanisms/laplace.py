"""laplace and gaussian: clip, add i.i.d. per-coordinate noise, map back to a token (spec §3).

Seed 001's baselines (Laplace and Gaussian mechanisms on clipped embeddings). For a candidate w,
release ``y = T(φ(w)) + z`` with T a sensitivity-bounding transform of spec §8 (default: clipping
to the median row norm C, ``T(x) = x·min(1, C/‖x‖₂)``), then post-process y (§7; default: the
exact nearest row of T(E)).

- ``laplace``: z_i i.i.d. Laplace(0, b) with b = Δ₁/ε (Dwork et al. 2006, Theorem 1; for ``clip``,
  Δ₁ = 2C√d because ‖v‖₁ ≤ √d‖v‖₂). Pure ε-DP per token: the density ratio of y under two
  candidates is ≤ exp(‖x̃ − x̃'‖₁/b) ≤ e^ε (spec §3.5).
- ``gaussian``: z_i i.i.d. N(0, σ²) with the analytic calibration of Balle & Wang 2018
  (arXiv:1805.06530, Theorem 8): σ is the smallest σ with
  ``Φ(Δ₂/(2σ) − εσ/Δ₂) − e^ε·Φ(−Δ₂/(2σ) − εσ/Δ₂) ≤ δ``; (ε, δ)-DP per token. ``classic`` is
  σ = Δ₂·√(2 ln(1.25/δ))/ε (Dwork & Roth 2014, Theorem A.1, needs ε < 1); ``reference_code`` is
  seed 001's code, σ = Δ₁/ε with no δ (uncertified, spec §3.3).

Here ε is the per-token DP parameter (any two candidates, not a metric guarantee), so
ε_tok = ε. Noise is drawn in float64 from each token's keyed stream and is fresh per token.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from scipy.special import log_ndtr

from ..accounting import Claim
from ..bounding import (
    BOUNDS,
    EXACT_ONLY_BOUNDS,
    SENSITIVITY_KINDS,
    Sensitivity,
    Transform,
    candidate_sensitivity,
    check_bound_options,
    fit_transform,
)
from ..errors import InvalidParameterError
from ..rng import Draw, Streams, as_streams
from ..search import ExactIndex
from ..utils.logging import get_logger, warn_once
from ..validation import check_choice
from .base import AdditiveMechanism


if TYPE_CHECKING:
    from ..space import EmbeddingSpace


__all__ = [
    "BoundedAdditiveMechanism",
    "Laplace",
    "Gaussian",
    "gaussian_delta",
    "analytic_gaussian_sigma",
    "classic_gaussian_sigma",
]

logger = get_logger(__name__)

MATCH_SPACES: tuple[str, ...] = ("clipped", "raw")
NOT_A_GUARANTEE = (
    "not a guarantee: calibration='reference_code' reproduces seed code whose stated privacy claim does not "
    "hold as computed (certified: false)."
)


# --------------------------------------------------------------------------- Gaussian calibration
def gaussian_delta(sigma: float, epsilon: float, l2_sensitivity: float) -> float:
    """δ(σ) of the Gaussian mechanism for an L2 shift Δ₂ (Balle & Wang 2018, Theorem 8; spec §3.3).

    ``Φ(Δ/(2σ) − εσ/Δ) − e^ε·Φ(−Δ/(2σ) − εσ/Δ)``, with ``e^ε·Φ(−u) = exp(ε + log_ndtr(−u))`` so that
    nothing overflows.
    """
    a = l2_sensitivity / (2.0 * sigma)
    b = epsilon * sigma / l2_sensitivity
    return math.exp(float(log_ndtr(a - b))) - math.exp(epsilon + float(log_ndtr(-a - b)))


def analytic_gaussian_sigma(*, epsilon: float, delta: float, l2_sensitivity: float, rtol: float = 1e-12) -> float:
    """The smallest σ with δ(σ) ≤ δ (analytic Gaussian mechanism, Balle & Wang 2018, Theorem 8).

    δ(σ) decreases in σ: start from [10⁻¹²·Δ₂, Δ₂], double the upper end until δ(hi) ≤ δ, bisect
    until ``hi − lo ≤ rtol·hi`` and return ``hi``, so δ(σ) ≤ δ holds for the returned σ (spec §3.3).

    Example:

    >>> round(analytic_gaussian_sigma(epsilon=1.0, delta=1e-5, l2_sensitivity=2.0), 8)
    7.46126327
    """
    lo, hi = 1e-12 * l2_sensitivity, l2_sensitivity
    while gaussian_delta(hi, epsilon, l2_sensitivity) > delta:
        hi *= 2.0
    while hi - lo > rtol * hi:
        mid = 0.5 * (lo + hi)
        if gaussian_delta(mid, epsilon, l2_sensitivity) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def classic_gaussian_sigma(*, epsilon: float, delta: float, l2_sensitivity: float) -> float:
    """σ = Δ₂·√(2 ln(1.25/δ))/ε (Dwork & Roth 2014, Theorem A.1; valid only for ε < 1).

    Raises:
        InvalidParameterError: if ε ≥ 1 (the theorem does not apply; use ``calibration="analytic"``).
    """
    if not epsilon < 1.0:
        raise InvalidParameterError(
            f"epsilon must be < 1 for calibration='classic' (Dwork & Roth 2014, Theorem A.1), got {epsilon!r}; "
            "use calibration='analytic', which holds for every epsilon and gives a smaller sigma."
        )
    return l2_sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


# --------------------------------------------------------------------------- shared base
@dataclass(frozen=True)
class _Prepared:
    """Constants of a mechanism for one space (all public: from E and the configuration only)."""

    space_hash: str
    transform: Transform
    sensitivity: Sensitivity
    noise: Any  # b, σ, or TruncatedLaplaceConstants
    index: ExactIndex
    map_back: bool


class BoundedAdditiveMechanism(AdditiveMechanism):
    """Base of the DP additive mechanisms: transform (§8), calibrate to a sensitivity, add noise.

    Subclasses define ``CALIBRATIONS``, :meth:`calibrate` (the noise constants for a sensitivity) and
    :meth:`sample_noise`; :meth:`transform_input` applies T. Each step is one small method so that a
    test can subclass it to build a deliberately broken variant.
    """

    OPTIONS: ClassVar[dict[str, Any]] = {
        "bound": "clip",
        "clip_norm": None,
        "sensitivity": "bound",
        "match_space": "clipped",
        "jl_k": None,
        "jl_xi": None,
        "jl_seed": None,
    }
    BOUNDS: ClassVar[tuple[str, ...]] = BOUNDS
    CALIBRATIONS: ClassVar[tuple[str, ...]] = ()
    UNCERTIFIED: ClassVar[tuple[str, ...]] = ("reference_code",)
    POSTPROCESS = ("nearest", "top2", "rank", "vector", "nearest_excluding_input")

    _state: _Prepared | None = None

    def _validate(self) -> None:
        o = self.options
        check_bound_options(
            o["bound"],
            clip_norm=o["clip_norm"],
            jl_k=o["jl_k"],
            jl_xi=o["jl_xi"],
            jl_seed=o["jl_seed"],
            allowed=self.BOUNDS,
        )
        if o["clip_norm"] is not None:
            o["clip_norm"] = float(o["clip_norm"])
        check_choice(o["sensitivity"], "sensitivity", SENSITIVITY_KINDS)
        check_choice(o["match_space"], "match_space", MATCH_SPACES)
        if o["match_space"] == "raw" and o["bound"] == "jl":
            raise InvalidParameterError(
                "match_space='raw' is not defined for bound='jl' (the projection has no inverse and its output "
                "lives in another dimension); use match_space='clipped'."
            )
        if "calibration" in self.OPTIONS:
            self._validate_calibration(o["calibration"])

    def _validate_calibration(self, calibration: Any) -> None:
        check_choice(calibration, "calibration", self.CALIBRATIONS)

    # ---------------------------------------------------------------- public constants
    @property
    def certified(self) -> bool:
        return self.options.get("calibration") not in self.UNCERTIFIED

    def fit(self, space: EmbeddingSpace) -> Transform:
        """The transform T fitted to the public candidate rows of ``space`` (spec §8.1)."""
        o = self.options
        return fit_transform(
            space.E,
            o["bound"],
            clip_norm=o["clip_norm"],
            jl_k=o["jl_k"],
            jl_xi=o["jl_xi"],
            jl_seed=o["jl_seed"],
            ids=space.candidate_ids,
        )

    def sensitivity_kind(self) -> str:
        """``"exact"`` for ``vocab_exact``/``jl`` (always), else the ``sensitivity`` option."""
        return "exact" if self.options["bound"] in EXACT_ONLY_BOUNDS else str(self.options["sensitivity"])

    def prepare(self, space: EmbeddingSpace) -> _Prepared:
        """Fit T, compute the sensitivity and the noise constants, and build the search index (cached)."""
        state = self._state
        if state is not None and state.space_hash == space.space_hash:
            return state
        transform = self.fit(space)
        sens = candidate_sensitivity(space.E, transform, self.sensitivity_kind())
        if not (sens.l1 > 0 and sens.l2 > 0 and sens.linf > 0):
            raise InvalidParameterError(
                f"bound={transform.bound!r}: the transformed candidates are all equal (sensitivity 0); "
                "choose another bound."
            )
        noise = self.calibrate(sens, transform.d_out) if not math.isinf(self.epsilon) else None
        raw = self.options["match_space"] == "raw"
        if raw:
            index = space.index
        else:
            rows = transform.apply(space.E).to(torch.float32)
            index = space.index if torch.equal(rows, space.E) else ExactIndex(rows, space.device)
        state = _Prepared(
            space_hash=space.space_hash,
            transform=transform,
            sensitivity=sens,
            noise=noise,
            index=index,
            map_back=raw and transform.bound == "minmax",
        )
        self._state = state
        if not self.certified:
            warn_once(logger, f"uncertified:{self.name}", self.warning_text())
        return state

    def setup(self, space: EmbeddingSpace) -> None:
        self.prepare(space)

    def _require_state(self) -> _Prepared:
        if self._state is None:
            raise InvalidParameterError(
                f"mechanism {self.name!r} has not been set up for a space; call mechanism.setup(space) first."
            )
        return self._state

    # ---------------------------------------------------------------- the mechanism
    @abc.abstractmethod
    def calibrate(self, sensitivity: Sensitivity, dim: int) -> Any:
        """The noise constants for ``sensitivity`` in dimension ``dim`` (float64; spec §3.3, §4.2)."""

    @abc.abstractmethod
    def sample_noise(self, streams: Streams, k: int) -> torch.Tensor:
        """``[n, k]`` float64 noise, row i from ``streams`` token i's :attr:`~hf_textdp.rng.Draw.NOISE` draws."""

    def transform_input(self, x: torch.Tensor) -> torch.Tensor:
        """x̃ = T(x) in float64 (spec §3.2)."""
        return self._require_state().transform.apply(x)

    def perturb(self, x: torch.Tensor, streams: Streams | torch.Generator) -> torch.Tensor:
        """``(T(x) + z).float()`` (spec §3.4); z is fresh per token, from the token's own stream.

        With ``match_space="raw"`` and ``bound="minmax"`` the noisy vector is mapped back with T⁻¹, so
        that ``nearest`` compares it with the raw rows (post-processing: the guarantee is unchanged).
        """
        state = self._require_state()
        if x.ndim != 2 or x.shape[1] != state.transform.d_in:
            raise InvalidParameterError(f"x must have shape [n, {state.transform.d_in}], got {tuple(x.shape)}.")
        xt = self.transform_input(x)
        n, k = xt.shape
        if n and not math.isinf(self.epsilon):
            xt = xt + self.sample_noise(as_streams(streams, n, x.device), k)
        if state.map_back:
            xt = state.transform.inverse(xt)
        return xt.to(torch.float32)

    def search_index(self, space: EmbeddingSpace) -> ExactIndex:
        """Rows of T(E) (``match_space="clipped"``) or of E (``"raw"``), as spec §3.4."""
        return self.prepare(space).index

    def scale_metric_matrix(self, space: EmbeddingSpace) -> torch.Tensor:
        return space.E

    # ---------------------------------------------------------------- report
    def warning_text(self) -> str:
        return f"calibration='reference_code' of mechanism {self.name!r} is not certified."

    def delta_token(self) -> float:
        """δ_tok of §10.1: the configured δ for certified (ε, δ) calibrations, else 0."""
        return float(self.delta) if (self.USES_DELTA and self.delta is not None) else 0.0

    def claim(self, space: EmbeddingSpace) -> Claim:
        """``guarantee="dp"``, ε_tok = ε, δ_tok = δ (spec §10.1), from the configuration and E only."""
        self.prepare(space)
        eps = self.epsilon
        certified = self.certified
        delta_tok = self.delta_token()

        def pair_bound(a: int, b: int) -> float:
            return eps

        return Claim(
            guarantee="dp",
            metric=None,
            epsilon=eps,
            delta=delta_tok if delta_tok > 0 else None,
            epsilon_token=eps,
            delta_token=delta_tok,
            certified=certified,
            warnings=() if certified else (self.warning_text(),),
            not_covered=() if certified else (NOT_A_GUARANTEE,),
            pair_bound=pair_bound,
        )

    def noise_details(self, state: _Prepared) -> dict[str, Any]:
        return {}

    def details(self, space: EmbeddingSpace) -> dict[str, Any]:
        """Report items of spec §3.5 / §4.3: bound, transform, sensitivity, noise constants, calibration."""
        state = self.prepare(space)
        sens = state.sensitivity
        out: dict[str, Any] = {
            "bound": state.transform.bound,
            "transform": state.transform.parameters(),
            "sensitivity": "exact" if sens.exact else "bound",
            "sensitivity_l1": sens.l1,
            "sensitivity_l2": sens.l2,
            "sensitivity_linf": sens.linf,
            "epsilon": self.epsilon,
            "match_space": self.options["match_space"],
            "certified": self.certified,
        }
        if "calibration" in self.OPTIONS:
            out["calibration"] = self.options["calibration"]
        if self.USES_DELTA:
            out["delta"] = self.delta_token() if self.delta_token() > 0 else None
        if state.noise is not None:
            out.update(self.noise_details(state))
        return out


# --------------------------------------------------------------------------- laplace
class Laplace(BoundedAdditiveMechanism):
    """i.i.d. Laplace noise on bounded embeddings: pure ε-DP per token (spec §3).

    Args:
        epsilon (`float`): the per-token DP parameter ε.
        bound (`str`, *optional*, defaults to `"clip"`): transform of spec §8 (``"clip"``,
            ``"vocab_exact"``, ``"observed_range"``, ``"minmax"``, ``"unit"``, ``"jl"``).
        clip_norm (`float`, *optional*): C for ``bound="clip"`` (default: median candidate row norm).
        sensitivity (`str`, *optional*, defaults to `"bound"`): ``"bound"`` (closed form, §8.2) or
            ``"exact"`` (over the transformed candidates, §8.3).
        match_space (`str`, *optional*, defaults to `"clipped"`): ``"clipped"`` (nearest row of T(E))
            or ``"raw"`` (nearest row of E).
        calibration (`str`, *optional*, defaults to `"sound"`): only ``"sound"``, b = Δ₁/ε.
        jl_k, jl_xi, jl_seed: JL options, only with ``bound="jl"`` (spec §8.2).

    Example:

    >>> mech = Laplace(epsilon=10.0)
    >>> mech.noise_scale(Sensitivity(l1=2 * 384**0.5, l2=2.0, linf=2.0, exact=False))  # doctest: +ELLIPSIS
    3.9191835884...
    """

    name = "laplace"
    OPTIONS = {**BoundedAdditiveMechanism.OPTIONS, "calibration": "sound"}
    CALIBRATIONS = ("sound",)

    def _validate_calibration(self, calibration: Any) -> None:
        if calibration == "reference_code":
            raise InvalidParameterError(
                "calibration='reference_code' does not exist for laplace: seed 001's Laplace scale b = 2C√d/ε is "
                "already the sound one for clipped vectors, so it would be the same mechanism; allowed: ['sound']."
            )
        super()._validate_calibration(calibration)

    def noise_scale(self, sensitivity: Sensitivity) -> float:
        """b = Δ₁/ε (spec §3.3)."""
        return sensitivity.l1 / self.epsilon

    def calibrate(self, sensitivity: Sensitivity, dim: int) -> float:
        return self.noise_scale(sensitivity)

    def sample_noise(self, streams: Streams, k: int) -> torch.Tensor:
        """Laplace(0, b) by its inverse CDF from one uniform per coordinate: z = −b·sgn(u − ½)·log1p(−2|u − ½|).

        u is never ½ nor 0 nor 1 (52-bit uniforms on the open interval), so z is always finite.
        """
        b = float(self._require_state().noise)
        t = streams.uniforms(Draw.NOISE, k).sub_(0.5)
        return t.abs().mul_(-2.0).log1p_().mul_(t.sign().mul_(-b))

    def noise_details(self, state: _Prepared) -> dict[str, Any]:
        b = float(state.noise)
        return {"b": b, "noise_variance": 2.0 * b * b}


# --------------------------------------------------------------------------- gaussian
class Gaussian(BoundedAdditiveMechanism):
    """i.i.d. Gaussian noise on bounded embeddings: (ε, δ)-DP per token (spec §3).

    Args:
        epsilon (`float`): the per-token DP parameter ε.
        delta (`float`, *optional*, defaults to `1e-6`): δ ∈ (0, 1).
        calibration (`str`, *optional*, defaults to `"analytic"`): ``"analytic"`` (Balle & Wang 2018),
            ``"classic"`` (needs ε < 1) or ``"reference_code"`` (seed 001's σ = Δ₁/ε; uncertified).
        bound, clip_norm, sensitivity, match_space, jl_k, jl_xi, jl_seed: as :class:`Laplace`.

    Example:

    >>> mech = Gaussian(epsilon=1.0, delta=1e-5)
    >>> round(mech.noise_scale(Sensitivity(l1=2 * 384**0.5, l2=2.0, linf=2.0, exact=False)), 8)
    7.46126327
    """

    name = "gaussian"
    OPTIONS = {**BoundedAdditiveMechanism.OPTIONS, "calibration": "analytic"}
    CALIBRATIONS = ("analytic", "classic", "reference_code")
    USES_DELTA = True
    DEFAULT_DELTA = 1e-6

    def _validate_calibration(self, calibration: Any) -> None:
        super()._validate_calibration(calibration)
        if calibration == "classic" and not self.epsilon < 1.0:
            raise InvalidParameterError(
                f"epsilon must be < 1 for calibration='classic' (Dwork & Roth 2014, Theorem A.1), got "
                f"{self.epsilon!r}; use calibration='analytic'."
            )

    def noise_scale(self, sensitivity: Sensitivity) -> float:
        """σ for the configured calibration (spec §3.3)."""
        calibration = self.options["calibration"]
        assert self.delta is not None
        if calibration == "analytic":
            return analytic_gaussian_sigma(epsilon=self.epsilon, delta=self.delta, l2_sensitivity=sensitivity.l2)
        if calibration == "classic":
            return classic_gaussian_sigma(epsilon=self.epsilon, delta=self.delta, l2_sensitivity=sensitivity.l2)
        # seed 001's code: the Gaussian standard deviation is set to the Laplace scale Δ₁/ε, δ ignored
        return sensitivity.l1 / self.epsilon

    def calibrate(self, sensitivity: Sensitivity, dim: int) -> float:
        return self.noise_scale(sensitivity)

    def sample_noise(self, streams: Streams, k: int) -> torch.Tensor:
        sigma = float(self._require_state().noise)
        return streams.normals(Draw.NOISE, k).mul_(sigma)

    def delta_token(self) -> float:
        # reference_code states no δ (spec §3.3): seed 001's code ignores it
        return 0.0 if self.options["calibration"] == "reference_code" else super().delta_token()

    def warning_text(self) -> str:
        return (
            "calibration='reference_code' is seed 001's code (sigma = Delta_1/epsilon, delta ignored): uncertified "
            "and no delta is stated; it is larger than the analytic sigma, so it wastes utility (spec §3.3)."
        )

    def noise_details(self, state: _Prepared) -> dict[str, Any]:
        sigma = float(state.noise)
        return {"sigma": sigma, "noise_variance": sigma * sigma}
