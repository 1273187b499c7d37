"""Sensitivity bounding: transforms T of the embedding rows and their sensitivities (bounding.md).

The additive DP mechanisms (``laplace``, ``gaussian``, ``truncated_laplace``; laplace.md, §8) perturb
``T(φ(w))`` and calibrate their noise to a sensitivity of T over the candidate set C. Seed 002
(sensitivity bounding for embeddings) proposes the transforms; bounding.md §1 checks each:

- ``clip``: ``T(x) = x·min(1, C/‖x‖₂)`` (seed 001), C = ``clip_norm`` or the median row norm;
  stated Δ₁ = 2C√d, Δ₂ = Δ∞ = 2C (‖v‖₁ ≤ √d‖v‖₂, ‖v‖∞ ≤ ‖v‖₂).
- ``vocab_exact``: ``T(x) = x``; the exact sensitivities over the raw candidates (bounding.md §3).
- ``observed_range``: ``clamp(x, −v_max, v_max)``, v_max = max |E_wk| over C; stated 2d·v_max,
  2√d·v_max, 2·v_max (the identity on candidates, so the exact values are ``vocab_exact``'s).
- ``minmax``: ``(x_k − lo_k)/(hi_k − lo_k)`` per column; stated d, √d, 1; affine and invertible.
- ``unit``: ``x/‖x‖₂``; stated Δ₁ = 2√d (not seed 002's 2: u and −u with u = (1, …, 1)/√d are at
  L1 distance 2√d), Δ₂ = Δ∞ = 2.
- ``jl``: ``A·x`` with a public Rademacher matrix ``A ∈ {±1/√k}^{k×d}`` (Johnson–Lindenstrauss);
  seed 002's Δ ≤ d'(b − a) assumes a range bound that a linear map of unbounded vectors does not
  give, so only the exact value (bounding.md §3) is used.

Soundness (bounding.md §1): every parameter (C, v_max, lo/hi, the JL matrix) is computed from the
public matrix E over C, never from the text being privatized; this module only ever sees E. The exact
sensitivities over all candidate pairs (bounding.md §3) are computed by sensitivity.py.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from .errors import InvalidParameterError
from .memo import Store, matrix_key, memoised
from .sensitivity import Sensitivity, exact_sensitivity
from .utils.products import rowwise_matmul
from .validation import check_choice, check_float, check_int, check_open_unit


__all__ = [
    "BOUNDS",
    "EXACT_ONLY_BOUNDS",
    "SENSITIVITY_KINDS",
    "DEFAULT_JL_XI",
    "DEFAULT_JL_SEED",
    "Sensitivity",
    "Transform",
    "check_bound_options",
    "fit_transform",
    "jl_dimension",
    "jl_matrix",
    "exact_sensitivity",
    "candidate_sensitivity",
]

BOUNDS: tuple[str, ...] = ("clip", "vocab_exact", "observed_range", "minmax", "unit", "jl")
# bounds whose sensitivity is always the exact one (laplace.md §1 `sensitivity`: "ignored (always exact)")
EXACT_ONLY_BOUNDS: tuple[str, ...] = ("vocab_exact", "jl")
SENSITIVITY_KINDS: tuple[str, ...] = ("bound", "exact")
DEFAULT_JL_XI = 0.9
DEFAULT_JL_SEED = 0


# --------------------------------------------------------------------------- validation
#: the smallest ``clip_norm`` accepted: a row of that norm in up to 10⁶ dimensions has its largest coordinate
#: ≥ 1e-33, a normal float32 (≥ 2⁻¹²⁶ ≈ 1.2e-38); near 1e-45 clipped rows collapse to zero (float32 underflow) and
#: the exact search falls back to rational arithmetic for every tie (measured: no answer within minutes)
MIN_CLIP_NORM = 1e-30


def check_bound_options(
    bound: Any,
    *,
    clip_norm: Any = None,
    jl_k: Any = None,
    jl_xi: Any = None,
    jl_seed: Any = None,
    allowed: tuple[str, ...] = BOUNDS,
) -> None:
    """Validate ``bound`` and the options that belong to it (laplace.md §1, bounding.md §2).

    ``clip_norm`` is accepted only with ``bound="clip"``, ``jl_k``/``jl_xi``/``jl_seed`` only with
    ``bound="jl"`` (``None`` means "not given").

    Raises:
        InvalidParameterError: naming the option, its value and what is allowed.

    Example:

    >>> check_bound_options("unit", clip_norm=1.0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    hf_textdp.errors.InvalidParameterError: clip_norm is only accepted with bound='clip', got bound='unit' (...).
    """
    check_choice(bound, "bound", allowed)
    if clip_norm is not None:
        if bound != "clip":
            raise InvalidParameterError(
                f"clip_norm is only accepted with bound='clip', got bound={bound!r} (clip_norm={clip_norm!r})."
            )
        if check_float(clip_norm, "clip_norm", minimum=0.0) < MIN_CLIP_NORM:
            raise InvalidParameterError(
                f"clip_norm must be >= {MIN_CLIP_NORM:g}, got {clip_norm!r}: rows clipped shorter than that lose "
                "their float32 digits (they underflow) and the exact search cannot tell them apart."
            )
    for name, value in (("jl_k", jl_k), ("jl_xi", jl_xi), ("jl_seed", jl_seed)):
        if value is not None and bound != "jl":
            raise InvalidParameterError(
                f"{name} is only accepted with bound='jl', got bound={bound!r} ({name}={value!r})."
            )
    if jl_k is not None:
        check_int(jl_k, "jl_k", minimum=1)
    if jl_xi is not None:
        check_open_unit(jl_xi, "jl_xi")
    if jl_seed is not None:
        check_int(jl_seed, "jl_seed", minimum=0)


# --------------------------------------------------------------------------- JL
def jl_dimension(V: int, xi: float = DEFAULT_JL_XI) -> int:
    """k = ⌈8·ln V / (ξ² − 2ξ³/3)⌉ (bounding.md §2; 255 for MiniLM's V = 30,517 at ξ = 0.9).

    Example:

    >>> jl_dimension(30517), jl_dimension(30517, 0.5)
    (255, 496)
    """
    return math.ceil(8.0 * math.log(V) / (xi**2 - 2.0 * xi**3 / 3.0))


def jl_matrix(k: int, d: int, seed: int = DEFAULT_JL_SEED) -> npt.NDArray[np.float32]:
    """The public JL matrix ``A ∈ {±1/√k}^{k×d}`` as float32 (bounding.md §2; never from the noise seed)."""
    signs = np.random.default_rng(seed).integers(0, 2, size=(k, d)) * 2 - 1
    matrix: npt.NDArray[np.float32] = (signs / math.sqrt(k)).astype(np.float32)
    return matrix


# --------------------------------------------------------------------------- transforms
@dataclass(frozen=True, eq=False)
class Transform:
    """A fitted sensitivity-bounding transform T (bounding.md §2); build it with :func:`fit_transform`.

    Attributes:
        bound (`str`): one of :data:`BOUNDS`.
        d_in (`int`), d_out (`int`): input and output dimensions (``d_out = jl_k`` for ``jl``).
        key (`str`): hex SHA-256 of the matrix and the parameters (the cache key).
        clip_norm, v_max, lo, hi, matrix: the public parameters of the bound that uses them.
    """

    bound: str
    d_in: int
    d_out: int
    key: str
    clip_norm: float | None = None
    clip_norm_source: str | None = None
    v_max: float | None = None
    lo: npt.NDArray[np.float64] | None = field(default=None, repr=False)
    hi: npt.NDArray[np.float64] | None = field(default=None, repr=False)
    matrix: npt.NDArray[np.float32] | None = field(default=None, repr=False)
    jl_xi: float | None = None
    jl_seed: int | None = None

    @property
    def invertible(self) -> bool:
        """Whether T⁻¹ exists on all of R^d (only ``minmax``: ``match_space="raw"`` maps back)."""
        return self.bound in ("minmax", "vocab_exact")

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """T(x) in float64 for ``x`` of shape ``[n, d_in]`` (any float dtype)."""
        x = x.to(torch.float64)
        if self.bound == "vocab_exact":
            return x.clone()
        if self.bound in ("clip", "unit"):
            return self._by_norm(x, torch.linalg.vector_norm(x, dim=1, keepdim=True))
        if self.bound == "observed_range":
            assert self.v_max is not None
            return x.clamp(-self.v_max, self.v_max)
        if self.bound == "minmax":
            lo, span = self._lo_span(x.device)
            return (x - lo) / span
        assert self.bound == "jl" and self.matrix is not None
        return rowwise_matmul(x, torch.from_numpy(self.matrix).to(device=x.device, dtype=torch.float64).T)

    def _by_norm(self, x: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
        """``clip`` and ``unit`` given the vectors' norms ``[n, 1]`` (float64)."""
        if self.bound == "unit":
            return x / norm
        return x * self._clip_factor(norm)

    def _clip_factor(self, norm: torch.Tensor) -> torch.Tensor:
        """``clip``'s factor min(1, C/‖x‖) for float64 norms (any shape)."""
        assert self.bound == "clip" and self.clip_norm is not None
        # T(0) = 0: a row with norm ≤ C is multiplied by exactly 1 (unchanged bit for bit)
        return torch.where(norm > self.clip_norm, self.clip_norm / norm, torch.ones_like(norm))

    def row_factors(self, x: torch.Tensor) -> torch.Tensor:
        """For ``clip``: f ``[n]`` float64 with T(x)_i = x_i·f_i, the numbers of :meth:`apply` (a row's norm does not
        depend on the rows around it). For the kernels that read rows and scale them themselves."""
        return self._clip_factor(torch.linalg.vector_norm(x.to(torch.float64), dim=1))

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        """T⁻¹(y) in float64 (``minmax`` and ``vocab_exact`` only)."""
        y = y.to(torch.float64)
        if self.bound == "vocab_exact":
            return y.clone()
        if self.bound != "minmax":
            raise InvalidParameterError(f"bound={self.bound!r} is not invertible; only 'minmax' maps back.")
        lo, span = self._lo_span(y.device)
        return y * span + lo

    def _lo_span(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.lo is not None and self.hi is not None
        lo = torch.from_numpy(self.lo).to(device)
        return lo, torch.from_numpy(self.hi).to(device) - lo

    def stated(self) -> Sensitivity | None:
        """The closed-form sensitivities of bounding.md §2, or ``None`` for ``vocab_exact``/``jl``."""
        d = self.d_out
        if self.bound == "clip":
            assert self.clip_norm is not None
            C = self.clip_norm
            return Sensitivity(l1=2.0 * C * math.sqrt(d), l2=2.0 * C, linf=2.0 * C, exact=False)
        if self.bound == "observed_range":
            assert self.v_max is not None
            v = self.v_max
            return Sensitivity(l1=2.0 * d * v, l2=2.0 * math.sqrt(d) * v, linf=2.0 * v, exact=False)
        if self.bound == "minmax":
            return Sensitivity(l1=float(d), l2=math.sqrt(d), linf=1.0, exact=False)
        if self.bound == "unit":
            return Sensitivity(l1=2.0 * math.sqrt(d), l2=2.0, linf=2.0, exact=False)
        return None

    def parameters(self) -> dict[str, Any]:
        """Public transform parameters for the report (hashes for the vectors and matrices)."""
        out: dict[str, Any] = {"bound": self.bound, "d": self.d_out}
        if self.bound == "clip":
            out["clip_norm"] = self.clip_norm
            out["clip_norm_source"] = self.clip_norm_source
        elif self.bound == "observed_range":
            out["v_max"] = self.v_max
        elif self.bound == "minmax":
            assert self.lo is not None and self.hi is not None
            out["lo_hi_sha256"] = hashlib.sha256(
                self.lo.astype("<f8").tobytes() + self.hi.astype("<f8").tobytes()
            ).hexdigest()
        elif self.bound == "jl":
            assert self.matrix is not None
            out["jl_k"] = self.d_out
            out["jl_xi"] = self.jl_xi
            out["jl_seed"] = self.jl_seed
            out["jl_sha256"] = hashlib.sha256(self.matrix.astype("<f4").tobytes()).hexdigest()
        return out


def _matrix_digest(E: torch.Tensor) -> str:
    return matrix_key(b"hf_textdp/bound/v1\x00", E)


_TRANSFORMS: dict[str, Transform] = {}


def fit_transform(
    E: torch.Tensor,
    bound: str,
    *,
    clip_norm: float | None = None,
    jl_k: int | None = None,
    jl_xi: float | None = None,
    jl_seed: int | None = None,
    ids: torch.Tensor | None = None,
) -> Transform:
    """Fit the transform ``bound`` to the public candidate rows E (bounding.md §2), float64 throughout.

    Args:
        E (`torch.Tensor` of shape `[V, d]`): the candidate rows (fp32).
        bound (`str`): one of :data:`BOUNDS`.
        clip_norm (`float`, *optional*): C for ``clip``; defaults to the median row norm (``numpy.median``).
        jl_k (`int`, *optional*): output dimension for ``jl``; defaults to :func:`jl_dimension` of V, ``jl_xi``.
        jl_xi (`float`, *optional*, defaults to `0.9`): ξ of the JL dimension formula.
        jl_seed (`int`, *optional*, defaults to `0`): seed of the public JL matrix.
        ids (`torch.Tensor`, *optional*): candidate ids, to name a zero row in the ``unit`` error.

    Returns:
        `Transform`, cached per (matrix hash, parameters).

    Raises:
        InvalidParameterError: an option given with the wrong bound, a constant column (``minmax``) or
            a zero row (``unit``).

    Example:

    >>> import torch
    >>> T = fit_transform(torch.tensor([[3.0, 4.0], [0.0, 2.0], [0.0, 1.0]]), "clip")
    >>> T.clip_norm, T.apply(torch.tensor([[3.0, 4.0]])).tolist()
    (2.0, [[1.2000000000000002, 1.6]])
    """
    check_bound_options(bound, clip_norm=clip_norm, jl_k=jl_k, jl_xi=jl_xi, jl_seed=jl_seed)
    if E.ndim != 2 or E.shape[0] < 1:
        raise InvalidParameterError(f"E must be a 2-D matrix with at least one row, got shape {tuple(E.shape)}.")
    params = {"bound": bound, "clip_norm": clip_norm, "jl_k": jl_k, "jl_xi": jl_xi, "jl_seed": jl_seed}
    key = hashlib.sha256((_matrix_digest(E) + json.dumps(params, sort_keys=True)).encode("utf-8")).hexdigest()
    cached = _TRANSFORMS.get(key)
    if cached is not None:
        return cached
    T = _fit(E.detach().cpu().to(torch.float64).numpy(), bound, key, clip_norm, jl_k, jl_xi, jl_seed, ids)
    _TRANSFORMS[key] = T
    return T


def _fit(
    E64: npt.NDArray[np.float64],
    bound: str,
    key: str,
    clip_norm: float | None,
    jl_k: int | None,
    jl_xi: float | None,
    jl_seed: int | None,
    ids: torch.Tensor | None,
) -> Transform:
    """The transform ``bound`` with its public parameters computed from the float64 rows E64 (bounding.md §2)."""
    V, d = int(E64.shape[0]), int(E64.shape[1])
    if bound == "clip":
        C, source = _clip_norm(E64, clip_norm)
        return Transform(bound, d, d, key, clip_norm=C, clip_norm_source=source)
    if bound == "observed_range":
        return Transform(bound, d, d, key, v_max=float(np.abs(E64).max()))
    if bound == "minmax":
        lo, hi = _column_range(E64)
        return Transform(bound, d, d, key, lo=lo, hi=hi)
    if bound == "unit":
        _check_no_zero_row(E64, ids)
    if bound in ("vocab_exact", "unit"):
        return Transform(bound, d, d, key)
    xi = DEFAULT_JL_XI if jl_xi is None else float(jl_xi)
    seed = DEFAULT_JL_SEED if jl_seed is None else int(jl_seed)
    k = jl_dimension(V, xi) if jl_k is None else int(jl_k)
    return Transform(bound, d, k, key, matrix=jl_matrix(k, d, seed), jl_xi=xi, jl_seed=seed)


def _clip_norm(E64: npt.NDArray[np.float64], clip_norm: float | None) -> tuple[float, str]:
    """``clip``'s C and where it came from: the given value, else the median candidate row norm."""
    if clip_norm is not None:
        return float(clip_norm), "given"
    C = float(np.median(np.linalg.norm(E64, axis=1)))
    if not C > 0:
        raise InvalidParameterError(
            "clip_norm: the median candidate row norm is 0; pass clip_norm= (a finite float > 0)."
        )
    return C, "median"


def _column_range(E64: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``minmax``'s per-column lo and hi; a constant column has no (x − lo)/(hi − lo)."""
    lo, hi = E64.min(axis=0), E64.max(axis=0)
    constant = np.nonzero(hi == lo)[0]
    if constant.size:
        raise InvalidParameterError(
            f"bound='minmax': column {int(constant[0])} of the candidate matrix is constant "
            f"({constant.size} constant column(s)), so (x − lo)/(hi − lo) is undefined; use another bound."
        )
    return lo, hi


def _check_no_zero_row(E64: npt.NDArray[np.float64], ids: torch.Tensor | None) -> None:
    """``unit`` needs every candidate row non-zero (x/‖x‖); the error names the first zero row's id."""
    zero = np.nonzero(~(np.linalg.norm(E64, axis=1) > 0))[0]
    if zero.size:
        p = int(zero[0])
        who = f"id {int(ids[p])}" if ids is not None else f"position {p}"
        raise InvalidParameterError(
            f"bound='unit': the candidate row of token {who} has norm 0, so x/‖x‖ is undefined; use another bound."
        )


_SENS: dict[str, Sensitivity] = {}


def candidate_sensitivity(
    E: torch.Tensor,
    transform: Transform,
    kind: str = "bound",
    *,
    chunk_size: int | None = None,
    store: Store | None = None,
) -> Sensitivity:
    """The sensitivity a mechanism calibrates to: stated (bounding.md §2) or exact over T(E) (bounding.md §3).

    ``kind="bound"`` gives the closed form of bounding.md §2, except for ``vocab_exact`` and ``jl``, which are
    always exact. Exact values are cached per ``transform.key`` in memory and in ``store`` (kind
    ``"sensitivity"``); they depend on the public matrix only.

    Args:
        E (`torch.Tensor`): the candidate rows the transform was fitted to.
        transform (`Transform`): from :func:`fit_transform` on E.
        kind (`str`, defaults to `"bound"`): ``"bound"`` or ``"exact"``.
        store (`Store`, *optional*): persistent cache (e.g. :class:`hf_textdp.io.cache.DiskCache`).
    """
    check_choice(kind, "sensitivity", SENSITIVITY_KINDS)
    if kind == "bound":
        stated = transform.stated()
        if stated is not None:
            return stated
    return memoised(
        _SENS,
        store,
        "sensitivity",
        transform.key,
        lambda: exact_sensitivity(transform.apply(E), chunk_size=chunk_size),
        lambda raw: Sensitivity(**raw),
        Sensitivity.to_dict,
    )
