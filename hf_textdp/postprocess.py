"""Post-processing of noisy vectors (spec §7): a registry of steps that map z to candidates.

A step is ``apply(z, mechanism, space, generators, sizes)``: it sees the noisy vectors, public data
and fresh randomness from each row's generator (``sizes[r]`` vectors belong to row r, in order), and
**never the original token** — that is why every step preserves the mechanism's guarantee (§7.1).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from .errors import InvalidParameterError, UnknownOptionError, UnknownPostprocessError


if TYPE_CHECKING:
    from .mechanisms.base import AdditiveMechanism
    from .space import EmbeddingSpace


__all__ = [
    "PostprocessStep",
    "Nearest",
    "register_postprocess",
    "get_postprocess_class",
    "list_postprocess",
    "postprocess_option_names",
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
                f"options {unknown} are not accepted by postprocess {self.name!r}. Its options: {sorted(self.OPTIONS)}."
            )
        self.options: dict[str, Any] = {**self.OPTIONS, **options}
        self._validate()

    def _validate(self) -> None:
        """Check ``self.options``."""

    def parameters(self) -> dict[str, Any]:
        return dict(self.options)

    @abc.abstractmethod
    def apply(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        generators: Sequence[torch.Generator],
        sizes: Sequence[int],
    ) -> torch.Tensor:
        """Candidate positions ``[N]`` int64 (or vectors ``[N, k]`` when ``RELEASES_VECTORS``)."""


class Nearest(PostprocessStep):
    """The candidate nearest to z by the exact search of spec §1.5 (ties: lowest id) — spec §7.2."""

    name = "nearest"

    def apply(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        generators: Sequence[torch.Generator],
        sizes: Sequence[int],
    ) -> torch.Tensor:
        return mechanism.search_index(space).search(z, 1)[:, 0]


_REGISTRY: dict[str, type[PostprocessStep]] = {}


def register_postprocess(name: str, cls: type[PostprocessStep], *, force: bool = False) -> None:
    if name in _REGISTRY and not force:
        raise InvalidParameterError(f"postprocess {name!r} is already registered; pass force=True to replace it.")
    _REGISTRY[name] = cls


def list_postprocess() -> list[str]:
    return sorted(_REGISTRY)


def get_postprocess_class(name: str) -> type[PostprocessStep]:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownPostprocessError(
            f"Unknown postprocess {name!r}. Registered post-processing steps: {list_postprocess()}."
        ) from None


def postprocess_option_names() -> set[str]:
    """Every option declared by some registered step (used to route ``options`` keys)."""
    names: set[str] = set()
    for cls in _REGISTRY.values():
        names |= set(cls.OPTIONS)
    return names


register_postprocess("nearest", Nearest)
