"""Base classes of the mechanisms: additive (noise on vectors) and selection (sample an id).

A mechanism is a small class with validated keyword-only parameters, registered by name
(``hf_textdp.mechanisms.register_mechanism``). Its math takes arrays and the tokens' keyed streams
(:class:`~hf_textdp.rng.Streams`) and returns arrays; it never sees a tokenizer, a dataset or a file.
The meaning of a registered name never changes: a changed privacy behaviour gets a new name.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from ..accounting import Claim
from ..errors import InvalidParameterError, UnknownOptionError
from ..rng import Streams
from ..utils.threads import torch_threads
from ..validation import check_epsilon, check_open_unit


if TYPE_CHECKING:
    from ..search import ExactIndex
    from ..space import EmbeddingSpace


__all__ = ["Mechanism", "AdditiveMechanism", "SelectionMechanism", "PERTURB_CHUNK"]

#: tokens per :meth:`AdditiveMechanism.perturb` call in :meth:`~AdditiveMechanism.perturb_positions`
#: (a chunk's float64 noise, 256 × d × 8 bytes, stays in cache: 3× faster than one call at d = 384)
PERTURB_CHUNK = 256


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
        """The per-token claim (accounting.md §1), from the configuration and the public space only."""

    def details(self, space: EmbeddingSpace) -> dict[str, Any]:
        """Mechanism-specific report items (docs/mechanisms/ "Report")."""
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
    """Adds noise to each token's vector: ``perturb(x, g) -> z`` (docs/mechanisms/)."""

    kind = "additive"
    POSTPROCESS: ClassVar[tuple[str, ...]] = ("nearest", "top2", "rank", "vector", "nearest_excluding_input")
    #: :meth:`perturb_positions` on one intra-op thread on a CPU (the same values: its passes are elementwise or
    #: float64 products of a few hundred rows; ``False`` leaves torch's thread count)
    serial_small_ops: bool = True
    #: tokens per chunk of :meth:`perturb_positions` on a CPU
    perturb_chunk: int = PERTURB_CHUNK

    def inputs(self, space: EmbeddingSpace, positions: torch.Tensor) -> torch.Tensor:
        """The vectors to perturb for candidate ``positions`` (rows of E)."""
        return space.E[positions.to(space.E.device)]

    def search_index(self, space: EmbeddingSpace) -> ExactIndex:
        """The index that ``nearest`` searches (E by default; clipped or projected rows otherwise)."""
        return space.index

    def input_index(self, space: EmbeddingSpace) -> ExactIndex:
        """The raw rows of E (``backproject`` searches these)."""
        return space.index

    def perturb_positions(self, space: EmbeddingSpace, positions: torch.Tensor, streams: Streams) -> torch.Tensor:
        """``perturb(inputs(space, positions), streams)``, :attr:`perturb_chunk` tokens at a time.

        Token i's noise depends on its own stream only, so the chunks give exactly the vectors of one
        call, while each chunk's float64 intermediates stay in cache instead of paging in fresh memory.
        On a GPU the batch is one call: a few kernels over all its tokens.
        """
        n = int(positions.numel())
        if space.device.type != "cpu":  # a GPU wants the whole batch in one pass
            return self.perturb(self.inputs(space, positions), streams)
        # a chunk is a dozen elementwise passes over [256, d] float64 (transform, noise, sum): on one thread each,
        # as the search's serial_small_ops, since on shared cores a two-thread pass of a few hundred µs can wait a
        # scheduler slice for its second thread (laplace, MR: 5-25k tokens/s on two threads under load)
        with torch_threads(1 if self.serial_small_ops else None):
            c = self.perturb_chunk
            if n <= c:
                return self.perturb(self.inputs(space, positions), streams)
            chunks = [(positions[s : s + c], streams.slice(s, s + c)) for s in range(0, n, c)]
            return torch.cat([self.perturb(self.inputs(space, p), st) for p, st in chunks])

    @abc.abstractmethod
    def perturb(self, x: torch.Tensor, streams: Streams | torch.Generator) -> torch.Tensor:
        """Noisy vectors ``[n, k]`` fp32 for inputs ``x`` ``[n, d]`` fp32, token i drawing from ``streams[i]``.

        ``streams`` holds one keyed stream per vector (any rows, any order; a torch generator or an int
        key stands for one row of ``n`` tokens, see :func:`~hf_textdp.rng.as_streams`). Token i's noise
        depends on its own stream only, so any batch gives the same vectors.
        """


class SelectionMechanism(Mechanism):
    """Samples an output candidate for each token directly (tem.md, santext.md)."""

    kind = "selection"
    # "nearest" here means: release the sampled candidate as it is
    POSTPROCESS: ClassVar[tuple[str, ...]] = ("nearest",)

    @abc.abstractmethod
    def sample(
        self, space: EmbeddingSpace, positions: torch.Tensor, streams: Streams | torch.Generator
    ) -> torch.Tensor:
        """Output positions ``[n]`` for input positions ``[n]``, token i drawing from ``streams[i]``."""
