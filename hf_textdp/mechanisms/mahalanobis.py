"""mahalanobis: the regularized Mahalanobis mechanism (Xu et al. 2020, arXiv:2010.11947; mahalanobis.md).

For a candidate w release ``z = φ(w) + Z`` with ``Z = R·(u·M^{1/2})``: R ~ Gamma(d, scale 1/ε) and
u uniform on the unit sphere, drawn exactly as madlib draws them (madlib.md §2), and

    M = λ·Σ̃ + (1 − λ)·I,   Σ̃ = Σ·d / tr(Σ),   Σ = (E − μ)ᵀ(E − μ) / V        (the paper's Eq. 3)

computed once in float64 from the public candidate rows E (μ their mean). Z has density
∝ exp(−ε‖Z‖_M) with ‖x‖_M = √(x·M⁻¹·xᵀ), because Z·M^{−1/2} = R·u is madlib's noise; there is no
re-normalisation after multiplying by M^{1/2} (that variant has no ε·d_M guarantee). Then
post-process z (postprocess.md; default: the exact Euclidean nearest candidate, as in the paper).

Guarantee: ε·d_M metric DP (pure, δ = 0) with d_M(w, w') = ‖(φ(w) − φ(w'))·M^{−1/2}‖₂; per token
ε_tok = ε·diam_M, the diameter of the rows of E·M^{−1/2}. In the Euclidean metric it is
(ε/√λ_min(M))·d metric DP, and λ_min(M) ≥ 1 − λ (mahalanobis.md, accounting.md §1). λ = 0 is madlib.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..accounting import Claim
from ..errors import InvalidParameterError
from ..rng import Streams
from ..scale import scale_stats
from ..utils.products import ROW_QUANTUM, rowwise_matmul
from ..utils.threads import torch_threads
from ..validation import check_open_unit
from .base import AdditiveMechanism
from .madlib import sample_madlib_noise


if TYPE_CHECKING:
    from ..space import EmbeddingSpace


__all__ = ["Mahalanobis", "MahalanobisMatrices", "mahalanobis_matrices"]

#: λ = 1 uses Σ̃ alone, which must be positive definite: λ_min(Σ̃) > SINGULAR_RTOL·λ_max(Σ̃).
SINGULAR_RTOL = 1e-9


@dataclass(frozen=True)
class MahalanobisMatrices:
    """The float64 matrices of mahalanobis.md (all ``[d, d]`` on CPU, except ``eigenvalues`` ``[d]``)."""

    mu: torch.Tensor
    sigma: torch.Tensor
    sigma_tilde: torch.Tensor
    M: torch.Tensor
    eigenvalues: torch.Tensor  # of M, ascending
    M_half: torch.Tensor
    M_inv_half: torch.Tensor

    @property
    def sha256(self) -> str:
        """SHA-256 of M as float64 little-endian, row-major (the report's ``M_sha256``)."""
        return hashlib.sha256(self.M.numpy().astype("<f8").tobytes()).hexdigest()


def mahalanobis_matrices(E: torch.Tensor, lam: float) -> MahalanobisMatrices:
    """μ, Σ, Σ̃, M, eig(M), M^{1/2}, M^{−1/2} in float64 from the candidate rows ``E`` (mahalanobis.md).

    Args:
        E (`torch.Tensor` `[V, d]`): the public candidate rows (special-token rows excluded).
        lam (`float`): λ ∈ [0, 1].

    Raises:
        InvalidParameterError: ``lam`` = 1 with a singular Σ̃, or all rows equal (tr Σ = 0).

    Example:

    >>> E = torch.tensor([[0.0, 0], [1, 0], [0, 1], [3, 0], [0, 4]])
    >>> m = mahalanobis_matrices(E, 0.2)
    >>> m.sigma.tolist()
    [[1.36, -0.8], [-0.8, 2.4]]
    >>> [round(x, 10) for x in m.eigenvalues.tolist()]
    [0.8984948047, 1.1015051953]
    """
    E64 = E.detach().to("cpu", torch.float64)
    V, d = E64.shape
    mu = E64.mean(0)
    C = E64 - mu
    sigma = (C.T @ C) / V
    sigma = (sigma + sigma.T) / 2.0  # exactly symmetric for eigh
    tr = float(torch.trace(sigma))
    if not tr > 0.0:
        raise InvalidParameterError(
            f"model: every candidate row is the same vector (trace of the covariance = {tr!r}); the Mahalanobis "
            "mechanism needs rows that vary."
        )
    sigma_tilde = sigma * (d / tr)  # trace d, like I: the divisor V vs V − 1 cancels here
    if lam == 1.0:
        with torch_threads(1):
            ev = torch.linalg.eigvalsh(sigma_tilde)
        if float(ev[0]) <= SINGULAR_RTOL * float(ev[-1]):
            raise InvalidParameterError(
                f"lam=1.0 needs a non-singular normalised covariance, but lambda_min/lambda_max = "
                f"{float(ev[0]) / float(ev[-1]):.3g} <= {SINGULAR_RTOL}; use lam in [0, 1)."
            )
    M = lam * sigma_tilde + (1.0 - lam) * torch.eye(d, dtype=torch.float64)
    # LAPACK's eigh rounds differently with the thread count: on one thread, M^{±1/2} (and so the noise) is
    # the same in every process, whether a forked worker (one thread) or the main one
    with torch_threads(1):
        evals, U = torch.linalg.eigh(M)
    M_half = (U * evals.sqrt()) @ U.T
    M_inv_half = (U * evals.rsqrt()) @ U.T
    return MahalanobisMatrices(
        mu=mu,
        sigma=sigma,
        sigma_tilde=sigma_tilde,
        M=M,
        eigenvalues=evals,
        M_half=(M_half + M_half.T) / 2.0,
        M_inv_half=(M_inv_half + M_inv_half.T) / 2.0,
    )


@dataclass
class _State:
    space: EmbeddingSpace
    mats: MahalanobisMatrices
    M_half: torch.Tensor  # float64 on the space's device
    metric_matrix: torch.Tensor  # E·M^{-1/2}, fp32, on the space's device


class Mahalanobis(AdditiveMechanism):
    """Mahalanobis-shaped multivariate Laplace noise on the model's input embeddings (mahalanobis.md).

    Args:
        epsilon (`float`): metric ε per unit of the Mahalanobis distance d_M.
        lam (`float`, *optional*, defaults to `0.2`): λ ∈ [0, 1], the weight of the normalised covariance
            in M (0 gives madlib; 1 raises when the covariance is singular).

    Example:

    >>> Mahalanobis(epsilon=2.0, lam=1.5)
    Traceback (most recent call last):
    ...
    hf_textdp.errors.InvalidParameterError: lam must be a float in [0, 1], got 1.5.
    """

    name = "mahalanobis"
    OPTIONS = {"lam": 0.2}
    # a chunk's product (R·u)·M^{1/2} is d multiply-adds a value: chunks of 2,048 tokens on all threads (6.3 MB of
    # float64 at d = 384) run it at the product's speed, where 256 on one thread took a sixth of a pass (MR, MiniLM)
    serial_small_ops = False
    perturb_chunk = 8 * ROW_QUANTUM

    lam: float

    def _validate(self) -> None:
        self.lam = check_open_unit(self.options["lam"], "lam", closed_low=True, closed_high=True)
        self.options["lam"] = self.lam
        self._state: _State | None = None

    # ---------------------------------------------------------------- public constants
    def setup(self, space: EmbeddingSpace) -> None:
        self._prepare(space)

    def _prepare(self, space: EmbeddingSpace) -> _State:
        st = self._state
        if st is not None and st.space is space:
            return st
        mats = self.compute_matrices(space.E)
        dev = space.E.device
        metric = (space.E.double() @ mats.M_inv_half.to(dev)).float().contiguous()
        st = _State(space=space, mats=mats, M_half=mats.M_half.to(dev), metric_matrix=metric)
        self._state = st
        return st

    def compute_matrices(self, E: torch.Tensor) -> MahalanobisMatrices:
        """The matrices of mahalanobis.md from the candidate rows (a hook: tests subclass it for broken variants)."""
        return mahalanobis_matrices(E, self.lam)

    def matrices(self, space: EmbeddingSpace) -> MahalanobisMatrices:
        """The float64 matrices of mahalanobis.md for ``space``."""
        return self._prepare(space).mats

    def scale_metric_matrix(self, space: EmbeddingSpace) -> torch.Tensor:
        """E·M^{−1/2} (fp32): its Euclidean distances are d_M, so ρ₁ and diam are taken in d_M."""
        return self._prepare(space).metric_matrix

    # ---------------------------------------------------------------- sampling
    def shape_noise(self, ru: torch.Tensor) -> torch.Tensor:
        """Z = (R·u)·M^{1/2} (row vectors, M symmetric); no re-normalisation (mahalanobis.md); each token's Z the
        same number in any batch (:func:`~hf_textdp.utils.products.rowwise_matmul`)."""
        assert self._state is not None
        return rowwise_matmul(ru, self._state.M_half.to(ru.device))

    def noise(self, streams: Streams | torch.Generator, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """``[n, d]`` float64 draws of Z: madlib's noise (madlib.md §2), then :meth:`shape_noise`."""
        if self._state is None:
            raise RuntimeError("Mahalanobis: call setup(space) before sampling (M depends on the space).")
        d = self._state.M_half.shape[0]
        return self.shape_noise(sample_madlib_noise(streams, n, d, self.epsilon, device))

    def perturb(self, x: torch.Tensor, streams: Streams | torch.Generator) -> torch.Tensor:
        if self._state is None:
            raise RuntimeError("Mahalanobis: call setup(space) before perturb (M depends on the space).")
        n = x.shape[0]
        if math.isinf(self.epsilon) or n == 0:
            return x.to(torch.float32).clone()
        return (x.double() + self.noise(streams, n, x.device)).float()

    # ---------------------------------------------------------------- accounting
    def claim(self, space: EmbeddingSpace) -> Claim:
        """ε·d_M metric DP; ε_tok = ε·diam_M, pair bound ε·d_M(w, w') (mahalanobis.md, accounting.md §1)."""
        st = self._prepare(space)
        eps = self.epsilon
        W64 = space.E.double().cpu() @ st.mats.M_inv_half

        def pair_bound(a: int, b: int) -> float:
            return eps * float(torch.linalg.vector_norm(W64[a] - W64[b]))

        return Claim(
            guarantee="metric_dp",
            metric="mahalanobis",
            epsilon=eps,
            delta=None,
            epsilon_token=math.nextafter(eps * self.diameter_m(space), math.inf),
            delta_token=0.0,
            certified=True,
            pair_bound=pair_bound,
        )

    def diameter_m(self, space: EmbeddingSpace) -> float:
        """An upper bound of diam_M in float64, never below it.

        The diameter is found on the fp32 rows of E·M^{−1/2}; the float64 rows differ from them by at most
        e = max_c ‖W64_c − W32_c‖, so by the triangle inequality diam64 ≤ diam32 + 2e (rounded up).
        """
        st = self._prepare(space)
        W64 = space.E.double().cpu() @ st.mats.M_inv_half
        err = float(torch.linalg.vector_norm(W64 - st.metric_matrix.double().cpu(), dim=1).max())
        return math.nextafter(scale_stats(st.metric_matrix, store=space.store).diam + 2.0 * err, math.inf)

    def details(self, space: EmbeddingSpace) -> dict[str, Any]:
        st = self._prepare(space)
        stats = scale_stats(st.metric_matrix, store=space.store)
        ev = st.mats.eigenvalues
        lam_min, lam_max = float(ev[0]), float(ev[-1])
        return {
            "metric_dp": {"epsilon": self.epsilon, "metric": "mahalanobis", "lam": self.lam},
            "lam": self.lam,
            "epsilon_euclidean_equivalent": self.epsilon / math.sqrt(lam_min),
            "M_sha256": st.mats.sha256,
            "M_eigenvalue_min": lam_min,
            "M_eigenvalue_max": lam_max,
            "diam_M": self.diameter_m(space),
            "diam_exact": stats.diam_exact,
            "noise": {
                "radius_M_mean": space.d / self.epsilon,
                "expected_squared_norm": (space.d + 1)
                * float(np.trace(st.mats.M.numpy()))
                / self.epsilon
                / self.epsilon,
            },
        }
