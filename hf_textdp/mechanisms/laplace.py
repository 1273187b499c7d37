"""laplace: clip, add i.i.d. per-coordinate Laplace noise, map back to a token (laplace.md).

Seed 001's baseline (the Laplace mechanism on clipped embeddings; the base and the transforms are in
:mod:`~hf_textdp.mechanisms.bounded`): z_i i.i.d. Laplace(0, b) with b = Δ₁/ε (Dwork et al. 2006,
Theorem 1; for ``clip``, Δ₁ = 2C√d because ‖v‖₁ ≤ √d‖v‖₂). Pure ε-DP per token: the density ratio
of y under two candidates is ≤ exp(‖x̃ − x̃'‖₁/b) ≤ e^ε (laplace.md §5). Noise is drawn in float64 from
each token's keyed stream and is fresh per token.
"""

from __future__ import annotations

from typing import Any

import torch

from ..bounding import Sensitivity
from ..errors import InvalidParameterError
from ..rng import Draw, Streams
from .bounded import BoundedAdditiveMechanism, NativeNoise, Prepared


__all__ = ["Laplace"]


class Laplace(BoundedAdditiveMechanism):
    """i.i.d. Laplace noise on bounded embeddings: pure ε-DP per token (laplace.md).

    Args:
        epsilon (`float`): the per-token DP parameter ε.
        bound (`str`, *optional*, defaults to `"clip"`): transform of bounding.md (``"clip"``,
            ``"vocab_exact"``, ``"observed_range"``, ``"minmax"``, ``"unit"``, ``"jl"``).
        clip_norm (`float`, *optional*): C for ``bound="clip"`` (default: median candidate row norm).
        sensitivity (`str`, *optional*, defaults to `"bound"`): ``"bound"`` (closed form, bounding.md §2) or
            ``"exact"`` (over the transformed candidates, bounding.md §3).
        match_space (`str`, *optional*, defaults to `"clipped"`): ``"clipped"`` (nearest row of T(E))
            or ``"raw"`` (nearest row of E).
        calibration (`str`, *optional*, defaults to `"sound"`): only ``"sound"``, b = Δ₁/ε.
        jl_k, jl_xi, jl_seed: JL options, only with ``bound="jl"`` (bounding.md §2).

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
        """b = Δ₁/ε (laplace.md §3)."""
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

    def native_noise(self) -> NativeNoise | None:
        """:meth:`sample_noise`'s z = L·(sgn(u − ½)·(−b)), L = log1p(−2|u − ½|), for the compiled release."""
        return NativeNoise("laplace", float(self._require_state().noise), mult=-1.0)

    def noise_details(self, state: Prepared) -> dict[str, Any]:
        b = float(state.noise)
        return {"b": b, "noise_variance": 2.0 * b * b}
