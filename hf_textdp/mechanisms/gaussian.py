"""gaussian: clip, add i.i.d. Gaussian noise, map back to a token (laplace.md).

Seed 001's second baseline (base in :mod:`~hf_textdp.mechanisms.bounded`): z_i i.i.d. N(0, σ²) with
the analytic calibration of Balle & Wang 2018 (arXiv:1805.06530, Theorem 8): σ is the smallest σ with
``Φ(Δ₂/(2σ) − εσ/Δ₂) − e^ε·Φ(−Δ₂/(2σ) − εσ/Δ₂) ≤ δ``; (ε, δ)-DP per token. ``classic`` is
σ = Δ₂·√(2 ln(1.25/δ))/ε (Dwork & Roth 2014, Theorem A.1, needs ε < 1); ``reference_code`` is
seed 001's code, σ = Δ₁/ε with no δ (uncertified, laplace.md §3).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..bounding import Sensitivity
from ..errors import InvalidParameterError
from ..rng import Draw, Streams
from .bounded import BoundedAdditiveMechanism, NativeNoise, Prepared


__all__ = ["Gaussian", "gaussian_delta", "analytic_gaussian_sigma", "classic_gaussian_sigma"]


def gaussian_delta(sigma: float, epsilon: float, l2_sensitivity: float) -> float:
    """δ(σ) of the Gaussian mechanism for an L2 shift Δ₂ (Balle & Wang 2018, Theorem 8; laplace.md §3).

    ``Φ(Δ/(2σ) − εσ/Δ) − e^ε·Φ(−Δ/(2σ) − εσ/Δ)``, with ``e^ε·Φ(−u) = exp(ε + log_ndtr(−u))`` so that
    nothing overflows.
    """
    from scipy.special import log_ndtr  # scipy only where the gaussian mechanism calibrates (cold start)

    a = l2_sensitivity / (2.0 * sigma)
    b = epsilon * sigma / l2_sensitivity
    return math.exp(float(log_ndtr(a - b))) - math.exp(epsilon + float(log_ndtr(-a - b)))


def analytic_gaussian_sigma(*, epsilon: float, delta: float, l2_sensitivity: float, rtol: float = 1e-12) -> float:
    """The smallest σ with δ(σ) ≤ δ (analytic Gaussian mechanism, Balle & Wang 2018, Theorem 8).

    δ(σ) decreases in σ: start from [10⁻¹²·Δ₂, Δ₂], double the upper end until δ(hi) ≤ δ, bisect
    until ``hi − lo ≤ rtol·hi`` and return ``hi``, so δ(σ) ≤ δ holds for the returned σ (laplace.md §3).

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


class Gaussian(BoundedAdditiveMechanism):
    """i.i.d. Gaussian noise on bounded embeddings: (ε, δ)-DP per token (laplace.md).

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
        """σ for the configured calibration (laplace.md §3)."""
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

    def native_noise(self) -> NativeNoise | None:
        """:meth:`sample_noise`'s z = G·σ for the compiled release."""
        return NativeNoise("gaussian", float(self._require_state().noise))

    def delta_token(self) -> float:
        # reference_code states no δ (laplace.md §3): seed 001's code ignores it
        return 0.0 if self.options["calibration"] == "reference_code" else super().delta_token()

    def warning_text(self) -> str:
        return (
            "calibration='reference_code' is seed 001's code (sigma = Delta_1/epsilon, delta ignored): uncertified "
            "and no delta is stated; it is larger than the analytic sigma, so it wastes utility (laplace.md §3)."
        )

    def noise_details(self, state: Prepared) -> dict[str, Any]:
        sigma = float(state.noise)
        return {"sigma": sigma, "noise_variance": sigma * sigma}
