"""Base classes of the mechanisms: additive (noise on vectors) and selection (sample an id).

A mechanism is a small class with validated keyword-only parameters, registered by name
(``hf_textdp.mechanisms.register_mechanism``). Its math takes arrays and a ``torch.Generator`` and
returns arrays; it never sees a tokenizer, a dataset or a file. The meaning of a registered name
never changes: a changed privacy behaviour gets a new name (STYLE §1).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from ..accounting import Claim
from ..errors import InvalidParameterError, UnknownOptionError
from ..validation import check_epsilon, check_open_unit


if TYPE_CHECKING:
    from ..search import ExactIndex
    from ..space import EmbeddingSpace


__all__ = ["Mechanism", "AdditiveMechanism", "SelectionMechanism"]


class Mechanism(abc.ABC):
    """A per-token privacy mechanism.

    Subclasses set ``name``, ``kind``, ``OPTIONS`` (declared options with their defaults),
    ``USES_DELTA``/``DEFAULT_DELTA``, ``POSTPROCESS`` (allowed steps), and implement
    :meth:`_validate`, :meth:`claim` and the sampling method of their kind.
    """

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    OPTIONS: ClassVar[dict[str, Any]] = {}
    USES_DELTA: ClassVar[bool] = False
    DEFAULT_DELTA: ClassVar[float | None] = None
    POSTPROCESS: ClassVar[tuple[str, ...]] = ("nearest",)

    def __init__(self, *, epsilon: float, delta: float | None = None, test_mode: bool = False, **options: Any):
        self.test_mode = bool(test_mode)
        self.epsilon = check_epsilon(epsilon, allow_inf=self.test_mode)
        if delta is not None and not self.USES_DELTA:
            raise InvalidParameterError(
                f"delta: mechanism {self.name!r} uses no delta (it is a pure mechanism), got delta={delta!r}; "
                "leave delta=None."
            )
        if self.USES_DELTA:
            self.delta: float | None = check_open_unit(self.DEFAULT_DELTA if delta is None else delta, "delta")
        else:
            self.delta = None
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            raise UnknownOptionError(
                f"options {unknown} are not accepted by mechanism {self.name!r}. Its options: {sorted(self.OPTIONS)}."
            )
        self.options: dict[str, Any] = {**self.OPTIONS, **options}
        self._validate()

    # ---------------------------------------------------------------- hooks
    def _validate(self) -> None:  # noqa: B027 - optional hook
        """Check ``self.options`` (raise :class:`InvalidParameterError` naming the option)."""

    def setup(self, space: EmbeddingSpace) -> None:  # noqa: B027 - optional hook
        """Compute the public, data-independent constants this mechanism needs for ``space``."""

    @abc.abstractmethod
    def claim(self, space: EmbeddingSpace) -> Claim:
        """The per-token claim (spec §10.1), from the configuration and the public space only."""

    def details(self, space: EmbeddingSpace) -> dict[str, Any]:
        """Mechanism-specific report items (spec §2–§9 "Report")."""
        return {}

    def projection(self, space: EmbeddingSpace) -> dict[str, Any] | None:
        return None

    def parameters(self) -> dict[str, Any]:
        """Validated parameters with defaults filled in (for the report; never a seed)."""
        out: dict[str, Any] = {"epsilon": self.epsilon}
        if self.USES_DELTA:
            out["delta"] = self.delta
        out.update(self.options)
        return out

    def scale_metric_matrix(self, space: EmbeddingSpace) -> torch.Tensor:
        """Rows whose Euclidean geometry is the mechanism's metric (E; E·M^{-1/2} for Mahalanobis)."""
        return space.E


class AdditiveMechanism(Mechanism):
    """Adds noise to each token's vector: ``perturb(x, g) -> z`` (spec §2–§5)."""

    kind = "additive"
    POSTPROCESS: ClassVar[tuple[str, ...]] = ("nearest", "top2", "rank", "vector", "nearest_excluding_input")

    def inputs(self, space: EmbeddingSpace, positions: torch.Tensor) -> torch.Tensor:
        """The vectors to perturb for candidate ``positions`` (rows of E)."""
        return space.E[positions.to(space.E.device)]

    def search_index(self, space: EmbeddingSpace) -> ExactIndex:
        """The index that ``nearest`` searches (E by default; clipped or projected rows otherwise)."""
        return space.index

    def input_index(self, space: EmbeddingSpace) -> ExactIndex:
        """The raw rows of E (``backproject`` searches these)."""
        return space.index

    @abc.abstractmethod
    def perturb(self, x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        """Noisy vectors ``[n, k]`` fp32 for inputs ``x`` ``[n, d]`` fp32 (one row's tokens, in order)."""

    def perturb_rows(self, xs: Sequence[torch.Tensor], gens: Sequence[torch.Generator]) -> torch.Tensor:
        """:meth:`perturb` of several rows, concatenated (row i with generator ``gens[i]``).

        Equal to ``torch.cat([perturb(x, g) ...])``; a mechanism may do the elementwise work once for
        all rows, as long as each row's draws stay its own and in its order (spec §1.6).
        """
        return torch.cat([self.perturb(x, g) for x, g in zip(xs, gens, strict=True)], 0)

    def _keeps(self, owner: type, *names: str) -> bool:
        """Whether this object's class uses ``owner``'s own methods ``names`` (no subclass overrides them).

        A batched :meth:`perturb_rows` reproduces ``owner``'s row-by-row methods; a subclass that
        overrides one of them (a variant, or a deliberately broken one in a test) must get the row-by-row
        path, so that what runs is its own method.
        """
        cls = type(self)
        return all(getattr(cls, n) is getattr(owner, n) for n in names)


class SelectionMechanism(Mechanism):
    """Samples an output candidate for each token directly (spec §6, §9)."""

    kind = "selection"
    # "nearest" here means: release the sampled candidate as it is
    POSTPROCESS: ClassVar[tuple[str, ...]] = ("nearest",)

    @abc.abstractmethod
    def sample(self, space: EmbeddingSpace, positions: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        """Output positions ``[n]`` for input positions ``[n]`` (one row's tokens, in order)."""

    def row_groups(self, space: EmbeddingSpace, sizes: Sequence[int]) -> list[list[int]]:
        """Consecutive groups of rows that :meth:`sample_rows` takes together (default: each row alone).

        Grouping is a speed choice only: each row still draws from its own generator, in its own order
        (spec §1.6), and its outputs must not depend on the group.
        """
        return [[i] for i in range(len(sizes))]

    def sample_rows(
        self, space: EmbeddingSpace, parts: Sequence[torch.Tensor], gens: Sequence[torch.Generator]
    ) -> list[torch.Tensor]:
        """:meth:`sample` for several rows, row ``i`` with generator ``gens[i]``; equal to calling it per row."""
        return [self.sample(space, p, g) for p, g in zip(parts, gens, strict=True)]
