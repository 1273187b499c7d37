"""The base of post-processing steps (postprocess.md §1), ``nearest`` (§2) and helpers shared by the steps.

A step sees the noisy vectors, public data and fresh randomness from each token's keyed stream, never
the original token, so it preserves the mechanism's guarantee.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import torch

from ..errors import InvalidParameterError, UnknownOptionError
from ..rng import Draw, Streams


if TYPE_CHECKING:
    from ..mechanisms.base import AdditiveMechanism
    from ..space import EmbeddingSpace


__all__ = [
    "PostprocessStep",
    "Nearest",
    "ProjectedMechanism",
    "projection_of",
    "backproject_vectors",
    "token_uniforms",
]


class PostprocessStep(abc.ABC):
    """One post-processing step; ``OPTIONS`` declares its options and their defaults."""

    name: ClassVar[str] = ""
    OPTIONS: ClassVar[dict[str, Any]] = {}
    RELEASES_VECTORS: ClassVar[bool] = False
    UNSAFE: ClassVar[bool] = False

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            raise UnknownOptionError(
                f"options {unknown} are not accepted by postprocess {self.name!r}. "
                f"Its options: {sorted(self.OPTIONS)}."
            )
        self.options: dict[str, Any] = {**self.OPTIONS, **options}
        self._validate()

    def _validate(self) -> None:  # noqa: B027 - an optional hook, not an abstract method
        """Check ``self.options``."""

    def parameters(self) -> dict[str, Any]:
        return dict(self.options)

    def report_parameters(self, mechanism: AdditiveMechanism, space: EmbeddingSpace) -> dict[str, Any]:
        """The options as the privacy report shows them: :meth:`parameters`, plus resolved values."""
        return self.parameters()

    def check_mechanism(self, mechanism: AdditiveMechanism) -> None:
        """Raise :class:`InvalidParameterError` if this step does not apply to ``mechanism``.

        A step applies when the mechanism lists it in ``POSTPROCESS``; steps with further needs (a
        projection) check those too.
        """
        allowed = list(getattr(mechanism, "POSTPROCESS", ()))
        if self.name not in allowed:
            raise InvalidParameterError(
                f"postprocess={self.name!r} is not available for mechanism {mechanism.name!r}. Allowed: {allowed}."
            )

    @abc.abstractmethod
    def apply(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        streams: Streams,
    ) -> torch.Tensor:
        """Candidate positions ``[N]`` int64 (or vectors ``[N, k]`` when ``RELEASES_VECTORS``)."""


class Nearest(PostprocessStep):
    """The candidate nearest to z by the exact search of space.md §5 (ties: lowest id) — postprocess.md §2."""

    name = "nearest"

    def apply(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        streams: Streams,
    ) -> torch.Tensor:
        return mechanism.search_index(space).search(z, 1)[:, 0]


@runtime_checkable
class ProjectedMechanism(Protocol):
    """A mechanism whose noise lives in R^m after a public projection Φ ∈ R^{m×d} (``privemb``, privemb.md)."""

    def projection_matrix(self, space: EmbeddingSpace) -> torch.Tensor:
        """Φ ``[m, d]`` fp32."""
        ...


def projection_of(mechanism: AdditiveMechanism, space: EmbeddingSpace, what: str) -> torch.Tensor:
    if not isinstance(mechanism, ProjectedMechanism):
        raise InvalidParameterError(
            f"{what} needs a projected mechanism (one whose noise lives in R^m after a public projection, such as "
            f"'privemb'); mechanism {mechanism.name!r} has none. Allowed postprocess for it: "
            f"{list(mechanism.POSTPROCESS)}."
        )
    return mechanism.projection_matrix(space)


def backproject_vectors(y: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """x̂ = Φᵀy (the transpose, not the pseudo-inverse; postprocess.md §6) in float64, returned fp32 ``[N, d]``."""
    return (y.double() @ phi.to(y.device, torch.float64)).float()


def token_uniforms(streams: Streams, draw: Draw, z: torch.Tensor) -> torch.Tensor:
    """One float64 uniform on (0, 1) per vector: the first uniform of ``draw`` in each token's stream, on CPU."""
    if len(streams) != z.shape[0]:
        raise InvalidParameterError(f"streams hold {len(streams)} tokens but z has {z.shape[0]} vectors.")
    return streams.uniforms(draw, 1)[:, 0].cpu()
