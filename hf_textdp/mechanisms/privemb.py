"""privemb: Gaussian projection, then multivariate Laplace noise in R^m (seed 000, PrivEmb; spec §5).

Paper: Feyisetan and Kasiviswanathan, "Private Release of Text Embedding Vectors", TrustNLP workshop at
NAACL 2021 (no arXiv version), Algorithm 1 and Proposition 5; noise density as in Feyisetan et al. 2020
(arXiv:1910.08902, Eq. 1) with the scale s of spec §5.4.

For a candidate w with input row x = φ(w) ∈ R^d, release ``y = Φx + κ`` where Φ ∈ R^{m×d} is a public
Gaussian matrix with entries N(0, 1/m) (drawn from ``numpy.random.default_rng(projection_seed)``,
independent of the noise seed) and κ has density ``p(z) ∝ exp(−ε‖z‖₂/s)`` on R^m: ‖κ‖ ~ Gamma(m,
scale s/ε) (an exact Marsaglia–Tsang draw from the token's keyed stream), direction uniform on the sphere.

The projection dimension is ``m = ⌈(√(log₂ d) + √(ln(1/δ)))² / β²⌉`` (spec §5.2; the reading that
reproduces seed 000's appendix dimensions), so δ is used for m even when it is not charged.

Guarantee (spec §5.6). For the fixed public Φ the privacy loss between w and w' is at most
ε‖Φ(x_w − x_{w'})‖₂/s. With ``certify=True`` (default) s = L̂, the exact largest stretch
‖Φ(x − x')‖/‖x − x'‖ over candidate pairs (spec §5.4), so the mechanism is **pure ε·d metric DP**
(δ = 0). With ``certify=False`` s = 1 + β (seed 000, Proposition 5): the metric claim is the seed's
unproven (ε, δ)-metric DP with δ charged once per Φ; the pure bound above still holds exactly.
Per token, ε_tok = ε·diam_Φ/s with diam_Φ the largest ‖Φ(x − x')‖ over candidate pairs.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt
import torch

from ..accounting import Claim
from ..errors import InvalidParameterError
from ..io.cache import cache_dir
from ..io.files import atomic_write_text
from ..rng import Streams, as_streams
from ..search import ExactIndex
from ..utils.logging import get_logger
from ..validation import check_bool, check_int, check_open_unit
from .base import AdditiveMechanism
from .madlib import sample_metric_laplace


if TYPE_CHECKING:
    from ..space import EmbeddingSpace


__all__ = [
    "Privemb",
    "ProjectionStats",
    "projection_dim",
    "projection_matrix",
    "phi_sha256",
    "lipschitz_exact",
    "projection_stats",
    "sample_privemb_noise",
]

logger = get_logger(__name__)

U64 = 2.0**-53
_BLOCK_ENTRIES = 2**22  # float64 entries per [chunk, V] block of the L̂ pass (32 MiB per array)
_REFINE = 8  # pairs recomputed per block at least (spec §5.4: "at least the 8 largest")


# --------------------------------------------------------------------------- §5.2, §5.3
def projection_dim(*, beta: float, delta: float, d: int) -> int:
    """The projection dimension of spec §5.2: ``m = ⌈(√(log₂ d) + √(ln(1/δ)))² / β²⌉``.

    Seed 000 (PrivEmb) sets ω = √(log d) without naming the base; base 2 for d and the natural log for δ
    reproduce its appendix dimensions. The ceiling is taken because m is a lower bound.

    Args:
        beta (`float`): distortion β ∈ (0, 1).
        delta (`float`): failure probability δ ∈ (0, 1).
        d (`int`): input dimension, ≥ 1.

    Returns:
        `int`: m ≥ 1.

    Example:

    >>> projection_dim(beta=0.9, delta=1e-6, d=384)
    55
    >>> projection_dim(beta=0.5, delta=1e-5, d=768)
    169
    """
    beta = check_open_unit(beta, "beta")
    delta = check_open_unit(delta, "delta")
    d = check_int(d, "d", minimum=1)
    x = (math.sqrt(math.log2(d)) + math.sqrt(math.log(1.0 / delta))) ** 2 / (beta * beta)
    return max(1, math.ceil(x))


def projection_matrix(m: int, d: int, projection_seed: int) -> npt.NDArray[np.float32]:
    """Φ ∈ R^{m×d} of spec §5.3: ``default_rng(projection_seed).standard_normal((m, d)) / √m`` as fp32.

    Drawn on CPU with numpy (PCG64) in float64, divided, then cast, so Φ is the same on every device
    and for every torch version. Entries are N(0, 1/m).

    Example:

    >>> phi = projection_matrix(8, 16, 12345)
    >>> phi.shape, phi.dtype, phi_sha256(phi)[:16]
    ((8, 16), dtype('float32'), '179623bdff12ff1a')
    """
    m = check_int(m, "m", minimum=1)
    d = check_int(d, "d", minimum=1)
    projection_seed = check_int(projection_seed, "projection_seed", minimum=0)
    rng = np.random.default_rng(projection_seed)
    phi: npt.NDArray[np.float32] = (rng.standard_normal((m, d)) / math.sqrt(m)).astype(np.float32)
    return np.ascontiguousarray(phi)


def phi_sha256(phi: npt.NDArray[np.float32]) -> str:
    """Hex SHA-256 of Φ as little-endian fp32 in C order (the report's ``projection.sha256``)."""
    return hashlib.sha256(np.ascontiguousarray(phi, dtype="<f4").tobytes()).hexdigest()


# --------------------------------------------------------------------------- §5.4
@dataclass(frozen=True)
class ProjectionStats:
    """Exact constants of Φ over the rows of E (spec §5.4, §5.6).

    Attributes:
        L_hat (`float`): max over pairs with x ≠ x' of ‖Φ(x − x')‖/‖x − x'‖ (0 if every pair is equal).
        L_pair (`tuple[int, int]`): the lexicographically first pair (i < j) attaining ``L_hat``.
        diam_projected (`float`): diam_Φ, the max over pairs of ‖Φ(x − x')‖.
        diam_pair (`tuple[int, int]`): the first pair attaining ``diam_projected``.
    """

    L_hat: float
    L_pair: tuple[int, int]
    diam_projected: float
    diam_pair: tuple[int, int]


def _as_float64_tensor(E: torch.Tensor | npt.NDArray[Any]) -> torch.Tensor:
    t = torch.as_tensor(E)
    return t.to(torch.float32).to(torch.float64)


def lipschitz_exact(
    E: torch.Tensor | npt.NDArray[Any], phi: npt.NDArray[np.float32], *, chunk_size: int | None = None
) -> ProjectionStats:
    """Exact L̂ and diam_Φ over all pairs of rows of E, float64, never V × V in memory (spec §5.4).

    Rows are processed in blocks of ``chunk_size`` against the later rows (memory O(chunk·V)). Each
    block computes the Gram-formula ratios ``R = ‖Φ(x_i − x_j)‖² / ‖x_i − x_j‖²`` as a filter, then
    recomputes, by differences in float64 and one pair at a time, every pair with ``R ≥ (1 − 10⁻⁶)·max R``
    (at least the 8 largest) and every cancellation-prone pair (``‖x_i − x_j‖² < 10⁻⁶(‖x_i‖² + ‖x_j‖²)``).
    The maximum is taken over the recomputed values only, so the result does not depend on
    ``chunk_size``. Rows are centred before the filter (distances are translation invariant; the
    recomputation uses the raw rows), which only reduces cancellation.

    Args:
        E (`torch.Tensor` or `np.ndarray` of shape `[V, d]`): the input rows (fp32 values).
        phi (`np.ndarray` of shape `[m, d]`): Φ (fp32).
        chunk_size (`int`, *optional*): rows per block; by default about 4M float64 entries per block.

    Returns:
        `ProjectionStats`: L̂, diam_Φ and the pairs attaining them.
    """
    X_raw = _as_float64_tensor(E)
    V, d = X_raw.shape
    if phi.ndim != 2 or phi.shape[1] != d:
        raise InvalidParameterError(f"phi must have shape [m, {d}], got {tuple(phi.shape)}.")
    if chunk_size is None:
        chunk_size = max(1, min(V, _BLOCK_ENTRIES // max(V, 1)))
    chunk_size = check_int(chunk_size, "chunk_size", minimum=1)
    phi64 = torch.from_numpy(np.asarray(phi, dtype=np.float32)).to(X_raw.device, torch.float64)
    X = X_raw - X_raw.mean(0, keepdim=True)
    P = X @ phi64.T
    sx = (X * X).sum(1)
    sp = (P * P).sum(1)
    m = phi64.shape[0]
    err_q = 4.0 * (m + 3) * U64 * 2.0 * float(sp.max())  # absolute bound on the Gram error of Q2
    X_np = X_raw.cpu().numpy()
    phi_np = np.asarray(phi, dtype=np.float32).astype(np.float64)

    best_l, arg_l = 0.0, (0, 1)
    best_q, arg_q = -1.0, (0, 1)
    for i0 in range(0, V - 1, chunk_size):
        i1 = min(i0 + chunk_size, V)
        D2 = sx[i0:i1, None] + sx[None, i0:] - 2.0 * (X[i0:i1] @ X[i0:].T)
        Q2 = sp[i0:i1, None] + sp[None, i0:] - 2.0 * (P[i0:i1] @ P[i0:].T)
        rows = torch.arange(i1 - i0, device=X.device)[:, None]
        cols = torch.arange(V - i0, device=X.device)[None, :]
        valid = cols > rows  # pairs (i, j) with j > i
        if not bool(valid.any()):
            continue
        tiny = D2 < 1e-6 * (sx[i0:i1, None] + sx[None, i0:])
        ninf = torch.full_like(D2, -math.inf)
        R = torch.where(valid & ~tiny, Q2 / torch.where(D2 > 0, D2, torch.ones_like(D2)), ninf)
        Qv = torch.where(valid, Q2, ninf)
        rmax, qmax = float(R.max()), float(Qv.max())
        lpairs = _pick(R, (1.0 - 1e-6) * rmax if rmax > 0 else math.inf)
        lpairs |= {(int(a), int(b)) for a, b in torch.nonzero(valid & tiny).tolist()}
        qpairs = _pick(Qv, qmax - 1e-6 * abs(qmax) - 2.0 * err_q)
        for a, b in sorted(lpairs):
            ia, jb = i0 + a, i0 + b
            dx = X_np[ia] - X_np[jb]
            nd = float(np.linalg.norm(dx))
            if nd == 0.0:
                continue
            val = float(np.linalg.norm(phi_np @ dx)) / nd
            if val > best_l:
                best_l, arg_l = val, (ia, jb)
        for a, b in sorted(qpairs):
            ia, jb = i0 + a, i0 + b
            val = float(np.linalg.norm(phi_np @ (X_np[ia] - X_np[jb])))
            if val > best_q:
                best_q, arg_q = val, (ia, jb)
    return ProjectionStats(L_hat=best_l, L_pair=arg_l, diam_projected=max(best_q, 0.0), diam_pair=arg_q)


def _pick(S: torch.Tensor, threshold: float) -> set[tuple[int, int]]:
    """Local (row, col) pairs of S with S ≥ threshold, plus the ``_REFINE`` largest finite entries."""
    vals, idx = torch.topk(S.reshape(-1), min(_REFINE, S.numel()))
    ncol = S.shape[1]
    out = {(f // ncol, f % ncol) for f, v in zip(idx.tolist(), vals.tolist(), strict=True) if math.isfinite(v)}
    if math.isfinite(threshold):
        out |= {(int(a), int(b)) for a, b in torch.nonzero(S >= threshold).tolist()}
    return out


_STATS_MEMO: dict[str, ProjectionStats] = {}


def projection_stats(E: torch.Tensor, phi: npt.NDArray[np.float32]) -> ProjectionStats:
    """:func:`lipschitz_exact`, cached by (SHA-256 of E, SHA-256 of Φ) in memory and on disk.

    The values depend on the public matrices only. The disk cache lives under
    ``$HF_TEXTDP_CACHE/privemb`` (default ``~/.cache/hf_textdp/privemb``).
    """
    h = hashlib.sha256(b"hf_textdp/privemb/lipschitz/v1\x00")
    h.update(np.asarray(E.shape, dtype="<i8").tobytes())
    h.update(E.detach().cpu().numpy().astype("<f4").tobytes())
    h.update(phi_sha256(phi).encode())
    key = h.hexdigest()
    if key in _STATS_MEMO:
        return _STATS_MEMO[key]
    path = cache_dir() / "privemb" / f"{key}.json"
    if path.is_file():
        try:
            raw = json.loads(path.read_text())
            stats = ProjectionStats(
                L_hat=float(raw["L_hat"]),
                L_pair=(int(raw["L_pair"][0]), int(raw["L_pair"][1])),
                diam_projected=float(raw["diam_projected"]),
                diam_pair=(int(raw["diam_pair"][0]), int(raw["diam_pair"][1])),
            )
            _STATS_MEMO[key] = stats
            return stats
        except (OSError, ValueError, TypeError, KeyError, IndexError):
            pass
    stats = lipschitz_exact(E, phi)
    _STATS_MEMO[key] = stats
    try:
        atomic_write_text(path, json.dumps(asdict(stats), sort_keys=True))
    except OSError as err:
        logger.debug("could not write the privemb cache: %s", err)
    return stats


# --------------------------------------------------------------------------- §5.5
def sample_privemb_noise(
    streams: Streams | torch.Generator, n: int, m: int, scale: float, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """``[n, m]`` float64 draws of density ∝ exp(−‖z‖/scale) in R^m (spec §5.5, scale = s/ε).

    The direction is m normalised normals, the radius an exact Gamma(m, scale) draw
    (:func:`~hf_textdp.mechanisms.madlib.sample_metric_laplace`), from each token's keyed stream.
    """
    return sample_metric_laplace(streams, n, m, scale, device)


@dataclass
class _State:
    """Everything privemb derives from (config, space): public and data independent."""

    space_hash: str
    d: int
    m: int
    phi: npt.NDArray[np.float32]
    sha256: str
    stats: ProjectionStats
    s: float
    _phi_t: dict[str, torch.Tensor]
    _index: ExactIndex | None = None

    def phi_on(self, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        key = f"{device}/{dtype}"
        if key not in self._phi_t:
            self._phi_t[key] = torch.from_numpy(self.phi).to(device=device, dtype=dtype)
        return self._phi_t[key]


class Privemb(AdditiveMechanism):
    """PrivEmb: public Gaussian projection to R^m plus multivariate Laplace noise there (spec §5).

    Args:
        epsilon (`float`): metric ε per unit of Euclidean distance between rows of E.
        delta (`float`, *optional*, defaults to `1e-6`): used for m (§5.2); charged once per Φ
            (``delta_per_projection``) only when ``certify=False``.
        beta (`float`, *optional*, defaults to `0.9`): distortion β ∈ (0, 1) (seed 000's experiments).
        m (`int`, *optional*): projection dimension ≥ 1; ``None`` → §5.2's formula.
        projection_seed (`int`, *optional*, defaults to `0`): public seed of Φ, never the noise seed.
        certify (`bool`, *optional*, defaults to `True`): noise scale s = L̂ (exact, pure ε·d metric DP)
            instead of the seed's s = 1 + β.

    Example:

    >>> mech = Privemb(epsilon=10.0, beta=0.9)
    >>> mech.parameters()["delta"], mech.options["certify"]
    (1e-06, True)
    """

    name = "privemb"
    OPTIONS = {"beta": 0.9, "m": None, "projection_seed": 0, "certify": True}
    USES_DELTA = True
    DEFAULT_DELTA = 1e-6
    # AdditiveMechanism's literal makes mypy infer a 5-tuple; the declared type (Mechanism) is tuple[str, ...]
    POSTPROCESS: ClassVar[tuple[str, ...]] = ("nearest", "vector", "backproject")

    def _validate(self) -> None:
        self.options["beta"] = check_open_unit(self.options["beta"], "beta")
        if self.options["m"] is not None:
            self.options["m"] = check_int(self.options["m"], "m", minimum=1)
        self.options["projection_seed"] = check_int(self.options["projection_seed"], "projection_seed", minimum=0)
        self.options["certify"] = check_bool(self.options["certify"], "certify")
        self._states: dict[str, _State] = {}
        self._active: _State | None = None

    # ---------------------------------------------------------------- public constants
    def projection_dim(self, d: int) -> int:
        """m for input dimension d: the ``m`` option, or §5.2's formula from β, δ and d."""
        if self.options["m"] is not None:
            return int(self.options["m"])
        assert self.delta is not None
        return projection_dim(beta=self.options["beta"], delta=self.delta, d=d)

    def _state(self, space: EmbeddingSpace) -> _State:
        key = space.space_hash
        st = self._states.get(key)
        if st is None:
            d = space.d
            m = self.projection_dim(d)
            phi = projection_matrix(m, d, self.options["projection_seed"])
            stats = projection_stats(space.E, phi)
            s = stats.L_hat if self.options["certify"] else 1.0 + self.options["beta"]
            if s <= 0.0:
                raise InvalidParameterError(
                    f"model: every pair of the {space.V} candidate rows of {space.model_id!r} is equal or "
                    "annihilated by the projection (L_hat = 0), so privemb's noise scale is 0; "
                    "use a different projection_seed or m."
                )
            st = _State(
                space_hash=key,
                d=d,
                m=m,
                phi=phi,
                sha256=phi_sha256(phi),
                stats=stats,
                s=s,
                _phi_t={},
            )
            self._states[key] = st
        self._active = st
        return st

    def setup(self, space: EmbeddingSpace) -> None:
        """Draw Φ and compute L̂ and diam_Φ for ``space`` (cached); ``perturb`` uses this space's Φ."""
        self._state(space)

    @property
    def s(self) -> float:
        """The noise scale s (L̂ or 1 + β) of the space last passed to :meth:`setup`."""
        return self._require().s

    def _require(self) -> _State:
        if self._active is None:
            raise InvalidParameterError(
                "privemb: Φ and s depend on the embedding space; call setup(space) before perturb()."
            )
        return self._active

    def projection_matrix(self, space: EmbeddingSpace) -> torch.Tensor:
        """Φ ``[m, d]`` fp32 on the space's device (public; used by ``backproject`` and ``vector``)."""
        return self._state(space).phi_on(space.device, torch.float32)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """The pre-noise map ``Φx`` in float64, ``[n, m]``, for inputs ``[n, d]`` (after :meth:`setup`)."""
        st = self._require()
        return x.double() @ st.phi_on(x.device, torch.float64).T

    def search_index(self, space: EmbeddingSpace) -> ExactIndex:
        """Exact index over P_E = E·Φᵀ (computed in float64, stored fp32): ``nearest`` in R^m (§5.7)."""
        st = self._state(space)
        if st._index is None:
            P = (space.E.double() @ st.phi_on(space.E.device, torch.float64).T).float()
            st._index = ExactIndex(P, space.device)
        return st._index

    # ---------------------------------------------------------------- sampling (§5.5)
    def _radius_scale(self) -> float:
        """Scale of the Gamma(m, ·) radius: s/ε."""
        return self.s / self.epsilon

    def sample_noise(self, streams: Streams, n: int) -> torch.Tensor:
        """``[n, m]`` float64 noise for n tokens (subclasses may override for broken variants)."""
        return sample_privemb_noise(streams, n, self._require().m, self._radius_scale(), streams.device)

    def perturb(self, x: torch.Tensor, streams: Streams | torch.Generator) -> torch.Tensor:
        st = self._require()
        n, d = x.shape
        if d != st.d:
            raise InvalidParameterError(
                f"x must have {st.d} columns (the space of setup()), got shape {tuple(x.shape)}."
            )
        p = self.project(x)
        if math.isinf(self.epsilon) or n == 0:
            return p.float()
        return (p + self.sample_noise(as_streams(streams, n, x.device), n)).float()

    # ---------------------------------------------------------------- claim and report (§5.6)
    def claim(self, space: EmbeddingSpace) -> Claim:
        st = self._state(space)
        eps, s = self.epsilon, st.s
        certify = bool(self.options["certify"])
        phi64 = st.phi.astype(np.float64)
        E = space.E

        def pair_bound(a: int, b: int) -> float:
            dx = E[a].cpu().numpy().astype(np.float64) - E[b].cpu().numpy().astype(np.float64)
            return eps * float(np.linalg.norm(phi64 @ dx)) / s

        warnings: tuple[str, ...] = ()
        not_covered: tuple[str, ...] = ()
        if not certify:
            beta = self.options["beta"]
            warnings = (
                f"privemb certify=False: s = 1 + beta = {1.0 + beta} is seed 000's calibration; its (epsilon, "
                f"delta)-metric DP claim (delta = {self.delta} once per projection) rests on an unproven bound "
                f"(spec §5.6). For this projection L_hat = {st.stats.L_hat:.6g}"
                + (" > 1 + beta: the metric claim fails for some pair." if st.stats.L_hat > 1.0 + beta else ".")
                + " The pure per-token bound epsilon_token holds exactly.",
            )
            not_covered = ("privemb: the metric claim holds with probability 1 - delta over Phi unless certified.",)
        return Claim(
            guarantee="metric_dp",
            metric="euclidean",
            epsilon=eps,
            delta=None,  # the per-token release is pure for the fixed Φ; δ is per projection
            epsilon_token=eps * st.stats.diam_projected / s,
            delta_token=0.0,
            certified=certify,
            delta_per_projection=0.0 if certify else self.delta,
            warnings=warnings,
            not_covered=not_covered,
            pair_bound=pair_bound,
        )

    def details(self, space: EmbeddingSpace) -> dict[str, Any]:
        st = self._state(space)
        scale = st.s / self.epsilon
        return {
            "beta": self.options["beta"],
            "projection_seed": self.options["projection_seed"],
            "d": st.d,
            "noise": {"radius_mean": st.m * scale, "radius_sd": math.sqrt(st.m) * scale},
        }

    def projection(self, space: EmbeddingSpace) -> dict[str, Any] | None:
        st = self._state(space)
        out: dict[str, Any] = {"m": st.m, "sha256": st.sha256, "s": st.s}
        if self.options["certify"]:
            out["L_hat"] = st.stats.L_hat
        out["diam_projected"] = st.stats.diam_projected
        return out
