"""The unsafe step ``nearest_excluding_input`` (postprocess.md §7): it reads the input, so it voids every guarantee."""

from __future__ import annotations

import abc
import dataclasses
from typing import TYPE_CHECKING

import torch

from ..accounting import Claim
from ..errors import InvalidParameterError
from ..rng import Streams
from ..validation import check_bool
from .base import PostprocessStep


if TYPE_CHECKING:
    from ..mechanisms.base import AdditiveMechanism
    from ..space import EmbeddingSpace


__all__ = ["UNSAFE_WARNING", "UNSAFE_NOT_COVERED", "UnsafePostprocessStep", "NearestExcludingInput", "unsafe_claim"]


UNSAFE_WARNING = (
    "postprocess='nearest_excluding_input' reads the original token (seed 002's mapping): it is not "
    "post-processing and the output has NO privacy guarantee; dp_epsilon is null (postprocess.md §7)."
)
UNSAFE_NOT_COVERED = "no guarantee: the unsafe step makes the loss unbounded"


class UnsafePostprocessStep(PostprocessStep):
    """A step that reads the original tokens and so voids every guarantee (postprocess.md §7).

    It is run only through :meth:`apply_unsafe`, which receives the input positions; :meth:`apply`
    refuses. The privatizer wraps the mechanism's claim with :func:`unsafe_claim`.
    """

    UNSAFE = True

    def apply(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        streams: Streams,
    ) -> torch.Tensor:
        raise InvalidParameterError(
            f"postprocess={self.name!r} reads the original tokens; it runs only through "
            "apply_unsafe(z, mechanism, space, streams, input_positions)."
        )

    @abc.abstractmethod
    def apply_unsafe(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        streams: Streams,
        input_positions: torch.Tensor,
    ) -> torch.Tensor:
        """Like ``apply``, given the candidate positions ``[N]`` of the original tokens."""


class NearestExcludingInput(UnsafePostprocessStep):
    """Seed 002's mapping: the nearest candidate other than the input itself (postprocess.md §7). **No guarantee.**

    P[M(w) = w] = 0 while P[M(w') = w] > 0, so no ε bounds the loss; on a two-token vocabulary it
    reveals the input exactly. Exists only to reproduce seed 002, behind ``unsafe=True``.

    Args:
        unsafe (`bool`, defaults to `False`): must be ``True``, acknowledging that there is no guarantee.
    """

    name = "nearest_excluding_input"
    OPTIONS = {"unsafe": False}

    def _validate(self) -> None:
        if check_bool(self.options["unsafe"], "unsafe") is not True:
            raise InvalidParameterError(
                "postprocess='nearest_excluding_input' reads the original token and has no privacy guarantee "
                "(postprocess.md §7); it is only available with options={'unsafe': True}, got unsafe=False."
            )

    def apply_unsafe(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        streams: Streams,
        input_positions: torch.Tensor,
    ) -> torch.Tensor:
        self.check_mechanism(mechanism)
        if input_positions.shape != (z.shape[0],):
            raise InvalidParameterError(
                f"input_positions must have shape [{z.shape[0]}], got {tuple(input_positions.shape)}."
            )
        return mechanism.search_index(space).search(z, 1, exclude=input_positions.to(torch.int64))[:, 0]


def unsafe_claim(claim: Claim) -> Claim:
    """The claim of a mechanism run with an unsafe step: ``guarantee="none"`` (accounting.md §1, postprocess.md §7).

    No ε exists, so ``epsilon_token`` is ``None`` (rows get a null ``dp_epsilon``) and ``certified`` is
    false. ``pair_bound`` keeps the mechanism's nominal bound, which the audit shows to be violated.
    """
    return dataclasses.replace(
        claim,
        guarantee="none",
        metric=None,
        epsilon_token=None,
        delta_token=0.0,
        delta_per_projection=None,
        certified=False,
        warnings=(*claim.warnings, UNSAFE_WARNING),
        not_covered=(*claim.not_covered, UNSAFE_NOT_COVERED),
    )
