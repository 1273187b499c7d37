"""truncated_laplace: clip, add i.i.d. truncated Laplace noise, map back to a token (laplace.md §8).

Seed 001's "high-dimensional truncated Laplacian mechanism": each coordinate of T(φ(w)) (T of
bounding.md, default clipping) gets noise of density ``f(z) = e^{−α|z|}/B`` on ``[−A, A]`` (0 outside),
then the noisy vector is post-processed (postprocess.md). Seed 001 states only the density; the calibration
here is derived and proved in laplace.md §8.2–§8.3 (the truncated Laplace mechanism of Geng et al. 2020,
arXiv:1810.10935, extended to a product of coordinates):

    α = ε/Δ₁,  K = Δ₁/Δ∞,  k = ⌊K⌋,  r = Δ₁ − k·Δ∞,
    S = k·expm1(α·Δ∞) + expm1(α·r),   A = log1p(S/(2δ))/α,   B = −2·expm1(−α·A)/α.

On the overlap of the two supports the density ratio is ≤ exp(α‖x̃ − x̃'‖₁) ≤ e^ε; the mass outside
it is ≤ Σ_i expm1(α·D_i)/(2·expm1(αA)), which is convex in D and largest at the vertex (k
coordinates at Δ∞, one at r), where it equals δ. So the mechanism is (ε, δ)-DP per token (needs
2A ≥ Δ∞). ``calibration="reference_code"`` is seed 001's code (α = ε/Δ₁, A = −ln(1 − 2ε/√d)/α, no δ),
which is **not** private (δ ≥ 0.25 for an antipodal pair along an axis, laplace.md §8.4): reported
``certified: false``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..bounding import Sensitivity
from ..errors import InvalidParameterError, NumericalRangeError
from ..rng import Draw, Streams, as_streams
from .bounded import BoundedAdditiveMechanism, NativeNoise, Prepared


__all__ = [
    "TruncatedLaplace",
    "TruncatedLaplaceConstants",
    "sound_constants",
    "reference_constants",
    "variance_gain",
    "truncated_laplace_variance",
    "sample_truncated_laplace",
]


@dataclass(frozen=True)
class TruncatedLaplaceConstants:
    """Calibrated constants of the truncated Laplace noise (laplace.md §8.2, §8.4), float64.

    Attributes:
        alpha (`float`): the decay rate α = ε/Δ₁.
        A (`float`): the truncation half-width.
        B (`float`): the normaliser ∫_{−A}^{A} e^{−α|z|} dz.
        K, k, r, S (`float`, `int`, `float`, `float`): the sound calibration's intermediates (``None`` for
            ``reference_code``).
        variance (`float`): per-coordinate variance (2/α²)·(1 − G).
        variance_gain (`float`): G = (a + a²/2)/expm1(a), a = αA: Var ÷ Var of Laplace at the same α.
    """

    alpha: float
    A: float
    B: float
    variance: float
    variance_gain: float
    K: float | None = None
    k: int | None = None
    r: float | None = None
    S: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def variance_gain(a: float) -> float:
    """The variance gain G = (a + a²/2)/expm1(a), a = αA (laplace.md §8.2, §8.6).

    The truncated variance is (2/α²)·(1 − G): G is the fraction of the Laplace variance 2/α² (same α,
    same ε) that truncation removes ("gain vs Laplace" in the laplace.md §8.6 table).

    Example:

    >>> round(100 * variance_gain(8.519914), 4)
    0.894
    """
    return (a + 0.5 * a * a) / math.expm1(a)


def truncated_laplace_variance(alpha: float, A: float) -> float:
    """Per-coordinate variance of the density e^{−α|z|}/B on [−A, A] (laplace.md §8.2).

    Example:

    >>> round(truncated_laplace_variance(1.0, 3.0), 6)
    1.214065
    """
    return (2.0 / alpha**2) * (1.0 - variance_gain(alpha * A))


def _finish(alpha: float, A: float, **extra: Any) -> TruncatedLaplaceConstants:
    if not alpha * alpha > 0.0:  # ε/Δ₁ below ~1e-154: the variance 2/α² overflows, and the noise any float
        raise NumericalRangeError(
            f"epsilon: truncated_laplace's rate alpha = epsilon / Delta_1 = {alpha:.3g} is too small for float64 "
            "(2 / alpha**2 overflows); epsilon is far too small (use a larger epsilon)."
        )
    a = alpha * A
    B = -2.0 * math.expm1(-a) / alpha
    gain = variance_gain(a)
    return TruncatedLaplaceConstants(
        alpha=alpha, A=A, B=B, variance=(2.0 / alpha**2) * (1.0 - gain), variance_gain=gain, **extra
    )


def sound_constants(
    *, epsilon: float, delta: float, l1_sensitivity: float, linf_sensitivity: float
) -> TruncatedLaplaceConstants:
    """The sound calibration of laplace.md §8.2, with its precondition checks.

    Raises:
        InvalidParameterError: ε not finite > 0, δ ∉ (0, 1), not Δ₁ ≥ Δ∞ > 0, S not finite, or 2A < Δ∞.
        NumericalRangeError: α = ε/Δ₁ so small that 2/α² overflows.

    Example:

    >>> c = sound_constants(epsilon=0.1, delta=1e-5, l1_sensitivity=2 * 384**0.5, linf_sensitivity=2.0)
    >>> c.k, round(c.A, 6)
    (19, 3339.110691)
    """
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise InvalidParameterError(f"epsilon must be a finite float > 0, got {epsilon!r}.")
    if not 0.0 < delta < 1.0:
        raise InvalidParameterError(f"delta must be a float in (0, 1), got {delta!r}.")
    if not (math.isfinite(l1_sensitivity) and l1_sensitivity >= linf_sensitivity > 0):
        raise InvalidParameterError(
            f"sensitivity: truncated_laplace needs Delta_1 >= Delta_inf > 0, got Delta_1={l1_sensitivity!r}, "
            f"Delta_inf={linf_sensitivity!r}."
        )
    alpha = epsilon / l1_sensitivity
    K = l1_sensitivity / linf_sensitivity
    k = math.floor(K + 1e-12)  # K is an integer up to rounding when Δ₁ = k·Δ∞ exactly
    r = max(l1_sensitivity - k * linf_sensitivity, 0.0)
    try:
        S = k * math.expm1(alpha * linf_sensitivity) + math.expm1(alpha * r)
    except OverflowError:
        S = math.inf
    if not math.isfinite(S):
        raise InvalidParameterError(
            f"epsilon={epsilon!r} is too large for truncated_laplace: S = k·expm1(α·Δ∞) + expm1(α·r) overflows "
            f"(α·Δ∞ = {alpha * linf_sensitivity:.6g}); use a smaller epsilon."
        )
    A = math.log1p(S / (2.0 * delta)) / alpha
    if not 2.0 * A >= linf_sensitivity:
        raise InvalidParameterError(
            f"delta={delta!r} is too large for truncated_laplace at epsilon={epsilon!r}: the half-width A = {A:.6g} "
            f"gives 2A < Delta_inf = {linf_sensitivity:.6g}, where the proof of laplace.md §8.3 does not apply; use a "
            "smaller delta."
        )
    return _finish(alpha, A, K=K, k=k, r=r, S=S)


def reference_constants(*, epsilon: float, l1_sensitivity: float, dim: int) -> TruncatedLaplaceConstants:
    """Seed 001's code: α = ε/Δ₁, A = −ln(1 − 2ε/√d)/α, no δ (laplace.md §8.4; **not private**).

    Raises:
        InvalidParameterError: if ε ≥ √d/2 (the logarithm is undefined).

    Example:

    >>> round(reference_constants(epsilon=9.79, l1_sensitivity=2 * 384**0.5, dim=384).A, 6)
    28.485658
    """
    x = 2.0 * epsilon / math.sqrt(dim)
    if not x < 1.0:
        raise InvalidParameterError(
            f"epsilon must be < sqrt(d)/2 = {math.sqrt(dim) / 2:.10g} for calibration='reference_code' "
            f"(d = {dim}), got {epsilon!r}."
        )
    alpha = epsilon / l1_sensitivity
    return _finish(alpha, -math.log1p(-x) / alpha)


def sample_truncated_laplace(
    streams: Streams | torch.Generator, n: int, k: int, alpha: float, A: float, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """``[n, k]`` float64 draws of density e^{−α|z|}/B on [−A, A] by the inverse CDF (laplace.md §8.5).

    One uniform per coordinate (:attr:`~hf_textdp.rng.Draw.NOISE`): t = 2u − 1, sign s of t, v = |t|,
    ``z = s·(−log1p(v·expm1(−αA))/α)`` (|z| ≤ A exactly; log1p/expm1 keep small αA accurate).
    """
    u = as_streams(streams, n, device).uniforms(Draw.NOISE, k)
    return truncated_laplace_from_uniform(u, alpha, A)


def truncated_laplace_from_uniform(u: torch.Tensor, alpha: float, A: float) -> torch.Tensor:
    """The inverse CDF of :func:`sample_truncated_laplace`, elementwise on float64 uniforms ``u``."""
    t = 2.0 * u - 1.0
    s = torch.where(t < 0, -1.0, 1.0).to(torch.float64)
    v = t.abs()
    return s * (-torch.log1p(v * math.expm1(-alpha * A)) / alpha)


class TruncatedLaplace(BoundedAdditiveMechanism):
    """i.i.d. truncated Laplace noise on bounded embeddings: (ε, δ)-DP per token (laplace.md §8).

    Args:
        epsilon (`float`): the per-token DP parameter ε.
        delta (`float`, *optional*, defaults to `1e-6`): δ ∈ (0, 1).
        calibration (`str`, *optional*, defaults to `"sound"`): ``"sound"`` (laplace.md §8.2) or
            ``"reference_code"`` (seed 001's code, uncertified, raises for ε ≥ √d/2).
        bound, clip_norm, sensitivity, match_space, jl_k, jl_xi, jl_seed: as
            :class:`~hf_textdp.mechanisms.laplace.Laplace`. Uses Δ₁ and Δ∞ of the bound.

    Example:

    >>> mech = TruncatedLaplace(epsilon=1.0, delta=1e-6)
    >>> c = mech.noise_constants(Sensitivity(l1=2 * 384**0.5, l2=2.0, linf=2.0, exact=False), 384)
    >>> round(c.A, 6), round(c.B, 6)
    (515.281531, 78.383519)
    """

    name = "truncated_laplace"
    OPTIONS = {**BoundedAdditiveMechanism.OPTIONS, "calibration": "sound"}
    CALIBRATIONS = ("sound", "reference_code")
    USES_DELTA = True
    DEFAULT_DELTA = 1e-6

    def noise_constants(self, sensitivity: Sensitivity, dim: int) -> TruncatedLaplaceConstants:
        """α, A, B (and the sound calibration's K, k, r, S) for ``sensitivity`` in dimension ``dim``."""
        if self.options["calibration"] == "reference_code":
            return reference_constants(epsilon=self.epsilon, l1_sensitivity=sensitivity.l1, dim=dim)
        assert self.delta is not None
        return sound_constants(
            epsilon=self.epsilon, delta=self.delta, l1_sensitivity=sensitivity.l1, linf_sensitivity=sensitivity.linf
        )

    def calibrate(self, sensitivity: Sensitivity, dim: int) -> TruncatedLaplaceConstants:
        return self.noise_constants(sensitivity, dim)

    def sample_noise(self, streams: Streams, k: int) -> torch.Tensor:
        c: TruncatedLaplaceConstants = self._require_state().noise
        return truncated_laplace_from_uniform(streams.uniforms(Draw.NOISE, k), c.alpha, c.A)

    def native_noise(self) -> NativeNoise | None:
        """:meth:`sample_noise`'s z = sgn(2u − 1)·(−log1p(|2u − 1|·expm1(−αA))/α) for the compiled release."""
        c: TruncatedLaplaceConstants = self._require_state().noise
        return NativeNoise("laplace", c.alpha, mult=math.expm1(-c.alpha * c.A), divide=True)

    def warning_text(self) -> str:
        return "reference_code truncation is not private: δ ≥ 0.25 for an axis pair (laplace.md §8.4)"

    def noise_details(self, state: Prepared) -> dict[str, Any]:
        c: TruncatedLaplaceConstants = state.noise
        return c.to_dict()
