"""The base of the DP additive mechanisms: clip (bounding.md), add noise calibrated to a sensitivity (laplace.md, §8).

For a candidate w, release ``y = T(φ(w)) + z`` with T a sensitivity-bounding transform of bounding.md
(default: clipping to the median row norm C, ``T(x) = x·min(1, C/‖x‖₂)``), then post-process y (postprocess.md;
default: the exact nearest row of T(E)). Subclasses (``laplace``, ``gaussian``, ``truncated_laplace``)
give the noise law and its calibration. ε is the per-token DP parameter, so ε_tok = ε.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from .. import backend
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
from ..utils.threads import torch_threads
from ..validation import check_choice
from .base import AdditiveMechanism


if TYPE_CHECKING:
    from ..space import EmbeddingSpace


__all__ = ["BoundedAdditiveMechanism", "NativeNoise", "Prepared", "MATCH_SPACES", "NOT_A_GUARANTEE"]

logger = get_logger(__name__)

MATCH_SPACES: tuple[str, ...] = ("clipped", "raw")
NOT_A_GUARANTEE = (
    "not a guarantee: calibration='reference_code' reproduces seed code whose stated privacy claim does not "
    "hold as computed (certified: false)."
)


@dataclass(frozen=True)
class Prepared:
    """Constants of a mechanism for one space (all public: from E and the configuration only)."""

    space_hash: str
    transform: Transform
    sensitivity: Sensitivity
    noise: Any  # b, σ, or TruncatedLaplaceConstants
    index: ExactIndex
    map_back: bool
    #: clip's factor f_c per row c of E (T(E_c) = E_c·f_c), for the compiled release; ``None`` for other bounds
    row_factor: torch.Tensor | None = None


@dataclass(frozen=True)
class NativeNoise:
    """A noise law the compiled release (``kernels/philox.c``) draws with the tensor form's numbers.

    ``kind="gaussian"``: z = G·scale, G the token's normals. ``kind="laplace"``: z = ±(L·scale) (``divide``:
    ±(L/scale)), + where u < ½, with L = log1p(|2u − 1|·mult) (torch's log1p, on the tensor form's chunks).
    """

    kind: str
    scale: float
    mult: float = -1.0
    divide: bool = False


#: bounds whose T the compiled release applies itself (x·f per row; ``vocab_exact``: x)
NATIVE_BOUNDS: tuple[str, ...] = ("clip", "vocab_exact")


class BoundedAdditiveMechanism(AdditiveMechanism):
    """Base of the DP additive mechanisms: transform (bounding.md), calibrate to a sensitivity, add noise.

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
    #: the ``sample_noise`` whose law the class's :meth:`native_noise` describes, as the class defined it (a subclass
    #: or a patched method is another law, which then draws itself)
    _native_law: ClassVar[Any] = None
    POSTPROCESS = ("nearest", "top2", "rank", "vector", "nearest_excluding_input")

    _state: Prepared | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "native_noise" in cls.__dict__:
            cls._native_law = cls.sample_noise

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
        """The transform T fitted to the public candidate rows of ``space`` (bounding.md §1)."""
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

    def prepare(self, space: EmbeddingSpace) -> Prepared:
        """Fit T, compute the sensitivity and the noise constants, and build the search index (cached)."""
        state = self._state
        if state is not None and state.space_hash == space.space_hash:
            return state
        transform = self.fit(space)
        sens = candidate_sensitivity(space.E, transform, self.sensitivity_kind(), store=space.store)
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
        state = Prepared(
            space_hash=space.space_hash,
            transform=transform,
            sensitivity=sens,
            noise=noise,
            index=index,
            map_back=raw and transform.bound == "minmax",
            row_factor=transform.row_factors(space.E) if transform.bound == "clip" else None,
        )
        self._state = state
        if not self.certified:
            warn_once(logger, f"uncertified:{self.name}", self.warning_text())
        return state

    def setup(self, space: EmbeddingSpace) -> None:
        self.prepare(space)

    def _require_state(self) -> Prepared:
        if self._state is None:
            raise InvalidParameterError(
                f"mechanism {self.name!r} has not been set up for a space; call mechanism.setup(space) first."
            )
        return self._state

    # ---------------------------------------------------------------- the mechanism
    @abc.abstractmethod
    def calibrate(self, sensitivity: Sensitivity, dim: int) -> Any:
        """The noise constants for ``sensitivity`` in dimension ``dim`` (float64; laplace.md §3, §8.2)."""

    @abc.abstractmethod
    def sample_noise(self, streams: Streams, k: int) -> torch.Tensor:
        """``[n, k]`` float64 noise, row i from ``streams`` token i's :attr:`~hf_textdp.rng.Draw.NOISE` draws."""

    def transform_input(self, x: torch.Tensor) -> torch.Tensor:
        """x̃ = T(x) in float64 (laplace.md §2)."""
        return self._require_state().transform.apply(x)

    def perturb(self, x: torch.Tensor, streams: Streams | torch.Generator) -> torch.Tensor:
        """``(T(x) + z).float()`` (laplace.md §4); z is fresh per token, from the token's own stream.

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

    def native_noise(self) -> NativeNoise | None:
        """The law of :meth:`sample_noise` for the compiled release, or ``None`` (the tensor form runs); it serves only
        while ``sample_noise`` is the one the defining class had (:attr:`_native_law`)."""
        return None

    def perturb_positions(self, space: EmbeddingSpace, positions: torch.Tensor, streams: Streams) -> torch.Tensor:
        """:meth:`perturb` of rows ``positions`` of E; on the CPU, for ``clip`` and ``vocab_exact``, by the compiled
        release: it reads the rows, applies T, draws the noise and rounds once to fp32 per token, the numbers of
        the tensor form bit for bit (the same float64 operations in the same order; Laplace's logarithm is
        torch's, on the tensor form's chunks)."""
        out = self._native_release(space, positions, streams)
        return super().perturb_positions(space, positions, streams) if out is None else out

    def _native_release(self, space: EmbeddingSpace, positions: torch.Tensor, streams: Streams) -> torch.Tensor | None:
        state, spec = self._state, self.native_noise()
        cls = type(self)
        if (
            spec is None
            or state is None
            or state.space_hash != space.space_hash
            or state.transform.bound not in NATIVE_BOUNDS
            or state.map_back
            or math.isinf(self.epsilon)
            or space.E.device.type != "cpu"
            or space.E.dtype != torch.float32
            or (cls.perturb, cls.transform_input, cls.inputs) != _NATIVE_STEPS
            or cls.sample_noise is not cls._native_law
        ):
            return None
        E, f, n = space.E, state.row_factor, int(positions.numel())
        if spec.kind == "gaussian":
            k0, k1, p = streams.k0, streams.k1, streams.position
            return backend.gaussian_release(k0, k1, p, Draw.NOISE, spec.scale, E, f, positions)
        k = int(E.shape[1])
        out = torch.empty((n, k), dtype=torch.float32)
        # log1p_ on the chunks of AdditiveMechanism.perturb_positions, on its threads: the tensor form's numbers
        c = self.perturb_chunk
        with torch_threads(1 if self.serial_small_ops else None):
            for s in range(0, n, c):
                e = min(n, s + c)
                sl = streams.slice(s, e)
                parts = backend.laplace_parts(sl.k0, sl.k1, sl.position, Draw.NOISE, k, spec.mult)
                if parts is None:
                    return None
                L = parts[0].log1p_()
                if not backend.laplace_release(L, parts[1], spec.scale, spec.divide, E, f, positions[s:e], out[s:e]):
                    return None
        return out

    def search_index(self, space: EmbeddingSpace) -> ExactIndex:
        """Rows of T(E) (``match_space="clipped"``) or of E (``"raw"``), as laplace.md §4."""
        return self.prepare(space).index

    def scale_metric_matrix(self, space: EmbeddingSpace) -> torch.Tensor:
        return space.E

    # ---------------------------------------------------------------- report
    def warning_text(self) -> str:
        return f"calibration='reference_code' of mechanism {self.name!r} is not certified."

    def delta_token(self) -> float:
        """δ_tok of accounting.md §1: the configured δ for certified (ε, δ) calibrations, else 0."""
        return float(self.delta) if (self.USES_DELTA and self.delta is not None) else 0.0

    def claim(self, space: EmbeddingSpace) -> Claim:
        """``guarantee="dp"``, ε_tok = ε, δ_tok = δ (accounting.md §1), from the configuration and E only."""
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
            rows_bounded=certified,
            warnings=() if certified else (self.warning_text(),),
            not_covered=() if certified else (NOT_A_GUARANTEE,),
            pair_bound=pair_bound,
        )

    def noise_details(self, state: Prepared) -> dict[str, Any]:
        return {}

    def details(self, space: EmbeddingSpace) -> dict[str, Any]:
        """Report items (laplace.md §5, §8.3): bound, transform, sensitivity, noise constants, calibration."""
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


#: the steps the compiled release implements (compared at call time: a subclass's or a patched step runs itself)
_NATIVE_STEPS = (
    BoundedAdditiveMechanism.perturb,
    BoundedAdditiveMechanism.transform_input,
    AdditiveMechanism.inputs,
)
