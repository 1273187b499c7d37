"""``vector`` and ``backproject`` (postprocess.md §5, §6): release vectors, or map projected ones back."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch

from ..errors import InvalidParameterError
from ..rng import Streams
from ..validation import check_choice
from .base import PostprocessStep, ProjectedMechanism, backproject_vectors, projection_of


if TYPE_CHECKING:
    from ..mechanisms.base import AdditiveMechanism
    from ..space import EmbeddingSpace


__all__ = ["Vector", "Backproject"]


class Vector(PostprocessStep):
    """Release the noisy vector itself as float32 (postprocess.md §5; ``inputs_embeds`` when k = d).

    Args:
        vector_space (`str`, *optional*, defaults to `"native"`): ``"native"`` releases z as the
            mechanism produced it (R^m for ``privemb``); ``"input"`` (projected mechanisms only) releases
            x̂ = Φᵀz ∈ R^d, usable as ``inputs_embeds`` (postprocess.md §6).
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
            phi = projection_of(mechanism, space, "vector_space='input'")
            return backproject_vectors(z, phi)
        return z.to(torch.float32).clone()


class Backproject(PostprocessStep):
    """Map y ∈ R^m back with x̂ = Φᵀy, then output the nearest raw row of E (postprocess.md §6).

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
        phi = projection_of(mechanism, space, "postprocess='backproject'")
        return mechanism.input_index(space).search(backproject_vectors(z, phi), 1)[:, 0]
