"""Empirical privacy-loss audit (testing.md §3) of every registered mechanism, with broken controls (testing.md §4).

Each registered mechanism gets one passing audit and at least one failing broken variant (a small
subclass overriding one hook). Sizes are testing.md §3's: n_select = 4,000, n_estimate = 20,000, α = 1e-3,
k_max = 4; every audit uses its own literal seed (testing.md §1). Pure-DP mechanisms run on fixture (D),
metric-DP ones on (A)/(B)/(C).

Observed worst LCB/claim (this file's seeds):

| mechanism | fixture, release | correct | broken control | mutant |
|---|---|---|---|---|
| madlib | (C), nearest | 0.875 | radius Gamma(d, 1/(2ε)) | 1.820 |
| laplace | (D), nearest | 0.915 | b halved | 1.874 |
| laplace | (D) on the diagonal of R⁴, orthant event | 0.720 | b = Δ₂/ε | 1.618 |
| gaussian | (D), nearest, δ = 1e-6 | 0.131 | — | — |
| gaussian | (D), tail z > 3.7, δ = 1e-2 | 0.633 | Δ₂ = C (missing factor 2) | 2.103 |
| truncated_laplace | (D), nearest | 0.908 | α doubled | 1.811 |
| truncated_laplace | (D) on the axis of R⁹, vector | 0.199 | ``reference_code`` | 4.686 |
| privemb | (B), m = 2, pair (4, 7), nearest | 0.712 | s halved | 1.508 |
| privemb | (B), m = 2, pair (4, 7), nearest | — | noise s = 1 + β, certified claim | 1.656 |
| tem | (C) | 0.761 | missing ½ | 1.529 |
| santext | (C) | 0.700 | missing ½ | 1.569 |
| santext_plus | (C), w = 0.5 (UMLDP, ε·d + ln(1/p)) | 0.317 | p applied to V_S tokens | 1.302 |
| santext_plus | (C), w = 1 (metric DP) | 0.706 | missing ½ | 1.551 |
| mahalanobis | (B), λ = 1, nearest | 0.724 | M^{−1/2} in place of M^{1/2} | 1.278 |
| mahalanobis | (B), λ = 1, nearest | — | re-normalised direction | 1.137 (n_estimate = 200,000) |

Notes. Gaussian: at δ = 1e-6 the Δ₂ = C mutant is out of reach of n = 20,000 (best expected
LCB/claim 0.74 even over every tail threshold), so its control runs at δ = 1e-2 with a public
tail event. ``b = Δ₂/ε`` equals b = Δ₁/ε in 1-D, so that control runs on (D) laid along the
diagonal of R⁴, where the orthant event reaches the L1 bound. ``reference_code`` needs ε < √d/2,
so it runs on (D) laid along the first axis of R⁹. The privemb control "``certify=False`` with
m = 2, β = 0.1" is expressed as the seed's noise scale s = 1 + β under the certified claim
(s = L̂ = 2.348 for projection_seed = 3): ``certify=False`` alone also lowers its own pair bound,
so its claim ε·‖Φ(φ(w) − φ(w'))‖/s is exact and the audit has nothing to catch.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hf_textdp.bounding import Sensitivity
from hf_textdp.io.models import load_space
from hf_textdp.mechanisms import list_mechanisms
from hf_textdp.mechanisms.base import AdditiveMechanism, Mechanism
from hf_textdp.mechanisms.gaussian import Gaussian, analytic_gaussian_sigma
from hf_textdp.mechanisms.laplace import Laplace
from hf_textdp.mechanisms.madlib import Madlib, sample_madlib_noise
from hf_textdp.mechanisms.mahalanobis import Mahalanobis
from hf_textdp.mechanisms.privemb import Privemb
from hf_textdp.mechanisms.santext import Santext
from hf_textdp.mechanisms.santext_plus import SantextPlus
from hf_textdp.mechanisms.tem import Tem
from hf_textdp.mechanisms.truncated_laplace import TruncatedLaplace, TruncatedLaplaceConstants
from hf_textdp.postprocess import Nearest, PostprocessStep, get_postprocess_class
from hf_textdp.rng import Streams
from hf_textdp.space import EmbeddingSpace
from hf_textdp.tools.audit import AuditResult, audit
from tests.utils import write_vectors


LINE_PAIRS = [(0, 1), (1, 2), (0, 3)]
CLUSTER_PAIRS = [(0, 1), (1, 2)]
CLIP_PAIRS = [(0, 3), (1, 2)]


class OrthantStep(PostprocessStep):
    """Public post-processing for pure/approximate-DP audits: 2 if min zᵢ > T, 1 if max zᵢ < −T, else 0.

    The orthant events {all zᵢ > T} are where i.i.d. Laplace noise attains the L1 bound exactly
    (P ratio e^{Σ|Δᵢ|/b}), which ``nearest`` over collinear points cannot express in d > 1; in 1-D
    it is a tail event at a threshold T chosen (public, before any draw) for power.
    """

    name = "test_orthant"

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def apply(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        streams: Streams,
    ) -> torch.Tensor:
        hi = z.amin(dim=1) > self.threshold
        lo = z.amax(dim=1) < -self.threshold
        return torch.where(hi, 2, torch.where(lo, 1, 0)).to(torch.int64)


def vector_step() -> PostprocessStep:
    return get_postprocess_class("vector")()


def run(mech: Mechanism, step: PostprocessStep | None, space: EmbeddingSpace, pairs: Any, seed: int) -> AuditResult:
    res = audit((mech, step), space, pairs, n_select=4000, n_estimate=20000, alpha=1e-3, seed=seed)
    print(f"{mech.name} seed={seed}: passed={res.passed} worst_ratio={res.worst_ratio:.3f}")
    return res


# --------------------------------------------------------------------------- fixtures
# line_space (A), tiny_space (B) and cluster_space (C) are in conftest.py.
@pytest.fixture
def clip_space(tmp_path: Path) -> EmbeddingSpace:
    """(D) raw 1-D values −3, −0.5, 0.5, 3 (audited with clip_norm = 1)."""
    path = write_vectors(tmp_path / "clip.txt", ["r0", "r1", "r2", "r3"], np.array([[-3.0], [-0.5], [0.5], [3.0]]))
    return load_space(str(path))


@pytest.fixture
def axis_space(tmp_path: Path) -> EmbeddingSpace:
    """(D) on the first axis of R⁹ (√d/2 > ε = 1, so ``reference_code`` can be built): ±3·e₁, ±0.5·e₁."""
    E = np.zeros((4, 9))
    E[:, 0] = [-3.0, -0.5, 0.5, 3.0]
    path = write_vectors(tmp_path / "axis.txt", ["a0", "a1", "a2", "a3"], E)
    return load_space(str(path))


def test_every_registered_mechanism_is_covered() -> None:
    assert set(list_mechanisms()) <= set(COVERED)


# --------------------------------------------------------------------------- madlib (also in test_audit.py)
class MadlibHalved(Madlib):
    """Mutation: radius Gamma(d, 1/(2ε))."""

    def perturb(self, x: torch.Tensor, streams: Streams | torch.Generator) -> torch.Tensor:
        n, d = x.shape
        return (x.double() + sample_madlib_noise(streams, n, d, 2.0 * self.epsilon, x.device)).float()


def test_madlib_cluster_passes(cluster_space: EmbeddingSpace) -> None:
    assert run(Madlib(epsilon=1.0), Nearest(), cluster_space, CLUSTER_PAIRS, 7101).passed


def test_madlib_cluster_halved_fails(cluster_space: EmbeddingSpace) -> None:
    assert not run(MadlibHalved(epsilon=1.0), Nearest(), cluster_space, CLUSTER_PAIRS, 7102).passed


# --------------------------------------------------------------------------- laplace (laplace.md §7), fixture (D)
class LaplaceHalved(Laplace):
    """Mutation: b halved."""

    def noise_scale(self, sensitivity: Sensitivity) -> float:
        return 0.5 * super().noise_scale(sensitivity)


class LaplaceL2(Laplace):
    """Mutation: b = Δ₂/ε (L2 in place of L1)."""

    def noise_scale(self, sensitivity: Sensitivity) -> float:
        return sensitivity.l2 / self.epsilon


def test_laplace_clip_passes(clip_space: EmbeddingSpace) -> None:
    res = run(Laplace(epsilon=1.0, clip_norm=1.0), Nearest(), clip_space, CLIP_PAIRS, 7201)
    assert res.passed and res.guarantee == "dp"


def test_laplace_halved_fails(clip_space: EmbeddingSpace) -> None:
    assert not run(LaplaceHalved(epsilon=1.0, clip_norm=1.0), Nearest(), clip_space, CLIP_PAIRS, 7202).passed


def test_laplace_l2_fails(diag_space: EmbeddingSpace) -> None:
    mech = LaplaceL2(epsilon=1.0, clip_norm=1.0)
    assert not run(mech, OrthantStep(0.5), diag_space, CLIP_PAIRS, 7203).passed


@pytest.fixture
def diag_space(tmp_path: Path) -> EmbeddingSpace:
    """(D) along the diagonal of R⁴, where Δ₁ = 2C√d is attained: ±3·𝟙/2, ±0.5·𝟙/2."""
    E = np.outer([-3.0, -0.5, 0.5, 3.0], np.full(4, 0.5))
    path = write_vectors(tmp_path / "diag.txt", ["g0", "g1", "g2", "g3"], E)
    return load_space(str(path))


def test_laplace_diag_passes(diag_space: EmbeddingSpace) -> None:
    """Δ₁ = 2C√d = 4 is attained by the pair (0, 3): the orthant event has ratio exactly e^ε."""
    assert run(Laplace(epsilon=1.0, clip_norm=1.0), OrthantStep(0.5), diag_space, CLIP_PAIRS, 7204).passed


# --------------------------------------------------------------------------- gaussian (laplace.md §7), fixture (D)
class GaussianMissingTwo(Gaussian):
    """Mutation: Δ₂ = C (missing the factor 2 of Δ₂ = 2C)."""

    def noise_scale(self, sensitivity: Sensitivity) -> float:
        assert self.delta is not None
        return analytic_gaussian_sigma(epsilon=self.epsilon, delta=self.delta, l2_sensitivity=0.5 * sensitivity.l2)


def test_gaussian_clip_passes(clip_space: EmbeddingSpace) -> None:
    assert run(Gaussian(epsilon=1.0, clip_norm=1.0), Nearest(), clip_space, CLIP_PAIRS, 7301).passed


# At δ = 1e-6 the halved σ is out of reach of n = 20,000 (best LCB/claim 0.74 even with the optimal
# tail event); at δ = 1e-2 and the tail event z > 3.7 it is 1.90 in expectation (slack δ included).
GAUSS: dict[str, Any] = {"epsilon": 1.0, "delta": 1e-2, "clip_norm": 1.0}


def test_gaussian_tail_passes(clip_space: EmbeddingSpace) -> None:
    res = run(Gaussian(**GAUSS), OrthantStep(3.7), clip_space, CLIP_PAIRS, 7303)
    assert res.passed and res.delta_slack == 1e-2


def test_gaussian_missing_two_fails(clip_space: EmbeddingSpace) -> None:
    assert not run(GaussianMissingTwo(**GAUSS), OrthantStep(3.7), clip_space, CLIP_PAIRS, 7302).passed


# --------------------------------------------------------------------------- truncated_laplace (laplace.md §8.7)
class TruncatedDoubledAlpha(TruncatedLaplace):
    """Mutation: α doubled (A kept)."""

    def noise_constants(self, sensitivity: Sensitivity, dim: int) -> TruncatedLaplaceConstants:
        c = super().noise_constants(sensitivity, dim)
        return dataclasses.replace(c, alpha=2.0 * c.alpha)


def test_truncated_laplace_clip_passes(clip_space: EmbeddingSpace) -> None:
    assert run(TruncatedLaplace(epsilon=1.0, clip_norm=1.0), Nearest(), clip_space, CLIP_PAIRS, 7401).passed


def test_truncated_laplace_doubled_alpha_fails(clip_space: EmbeddingSpace) -> None:
    res = run(TruncatedDoubledAlpha(epsilon=1.0, clip_norm=1.0), Nearest(), clip_space, CLIP_PAIRS, 7402)
    assert not res.passed


def test_truncated_laplace_axis_sound_passes(axis_space: EmbeddingSpace) -> None:
    assert run(TruncatedLaplace(epsilon=1.0, clip_norm=1.0), vector_step(), axis_space, CLIP_PAIRS, 7403).passed


def test_truncated_laplace_reference_code_fails(axis_space: EmbeddingSpace) -> None:
    mech = TruncatedLaplace(epsilon=1.0, clip_norm=1.0, calibration="reference_code")
    assert not run(mech, vector_step(), axis_space, CLIP_PAIRS, 7404).passed


# --------------------------------------------------------------------------- privemb (privemb.md §8)
class PrivembHalved(Privemb):
    """Mutation: s halved."""

    def _radius_scale(self) -> float:
        return 0.5 * super()._radius_scale()


class PrivembSeedScale(Privemb):
    """Mutation: the certified claim (s = L̂) with the seed's noise s = 1 + β (as ``certify=False``)."""

    def _radius_scale(self) -> float:
        return (1.0 + float(self.options["beta"])) / self.epsilon


# projection_seed = 3 gives L̂ = 2.348 on (B), reached by the pair (4, 7), far above 1 + β = 1.1
PRIVEMB: dict[str, Any] = {"m": 2, "beta": 0.1, "projection_seed": 3}
PRIVEMB_PAIR = [(4, 7)]


def _privemb_epsilon(space: EmbeddingSpace) -> float:
    """ε with claim exactly 1 for the pair (4, 7) (claim = ε‖Φ(φ₄ − φ₇)‖/L̂ = ε‖φ₄ − φ₇‖ there)."""
    E64 = space.E.double()
    return 1.0 / float(torch.linalg.vector_norm(E64[4] - E64[7]))


def test_privemb_tiny_passes(tiny_space: EmbeddingSpace) -> None:
    mech = Privemb(epsilon=_privemb_epsilon(tiny_space), **PRIVEMB)
    res = run(mech, Nearest(), tiny_space, PRIVEMB_PAIR, 7501)
    assert res.passed and res.rows[0].claim == pytest.approx(1.0, rel=1e-5)


def test_privemb_halved_fails(tiny_space: EmbeddingSpace) -> None:
    mech = PrivembHalved(epsilon=_privemb_epsilon(tiny_space), **PRIVEMB)
    assert not run(mech, Nearest(), tiny_space, PRIVEMB_PAIR, 7502).passed


def test_privemb_seed_scale_fails(tiny_space: EmbeddingSpace) -> None:
    mech = PrivembSeedScale(epsilon=_privemb_epsilon(tiny_space), **PRIVEMB)
    assert not run(mech, Nearest(), tiny_space, PRIVEMB_PAIR, 7503).passed


# --------------------------------------------------------------------------- tem (tem.md §6), santext (santext.md §1)
class TemMissingHalf(Tem):
    EXPONENT_FACTOR = 1.0


class SantextMissingHalf(Santext):
    EXPONENT_FACTOR = 1.0


def test_tem_cluster_passes(cluster_space: EmbeddingSpace) -> None:
    assert run(Tem(epsilon=1.0), None, cluster_space, CLUSTER_PAIRS, 7601).passed


def test_tem_missing_half_fails(cluster_space: EmbeddingSpace) -> None:
    assert not run(TemMissingHalf(epsilon=1.0), None, cluster_space, CLUSTER_PAIRS, 7602).passed


def test_santext_cluster_passes(cluster_space: EmbeddingSpace) -> None:
    assert run(Santext(epsilon=1.0), None, cluster_space, CLUSTER_PAIRS, 7701).passed


def test_santext_missing_half_fails(cluster_space: EmbeddingSpace) -> None:
    assert not run(SantextMissingHalf(epsilon=1.0), None, cluster_space, CLUSTER_PAIRS, 7702).passed


# --------------------------------------------------------------------------- santext_plus (santext.md §2)
COUNTS = {f"c{i}": i + 1 for i in range(12)}  # ascending: V_S = the first ⌊w·V⌋ candidates


class SantextPlusMissingHalf(SantextPlus):
    EXPONENT_FACTOR = 1.0


class SantextPlusKeepsSensitive(SantextPlus):
    """Mutation: the sanitisation probability p applied to V_S tokens too."""

    def sanitise_mask(self, u: torch.Tensor, is_sensitive: torch.Tensor) -> torch.Tensor:
        return u < self.p


def test_santext_plus_umldp_passes(cluster_space: EmbeddingSpace) -> None:
    """w = 0.5: V_S = c0..c5; protected-output ratio vs ε·d + ln(1/p) on pairs inside V_S."""
    res = run(SantextPlus(epsilon=1.0, w=0.5, p=0.3, frequencies=COUNTS), None, cluster_space, CLUSTER_PAIRS, 7801)
    assert res.passed and res.guarantee == "umldp"
    assert res.rows[0].claim == pytest.approx(1.0 + math.log(1 / 0.3), rel=1e-9)


def test_santext_plus_sanitises_sensitive_with_p_fails(cluster_space: EmbeddingSpace) -> None:
    mech = SantextPlusKeepsSensitive(epsilon=1.0, w=0.5, p=0.3, frequencies=COUNTS)
    assert not run(mech, None, cluster_space, CLUSTER_PAIRS, 7802).passed


def test_santext_plus_w1_passes(cluster_space: EmbeddingSpace) -> None:
    res = run(SantextPlus(epsilon=1.0, w=1.0, p=0.3, frequencies=COUNTS), None, cluster_space, CLUSTER_PAIRS, 7803)
    assert res.passed and res.guarantee == "metric_dp"


def test_santext_plus_w1_missing_half_fails(cluster_space: EmbeddingSpace) -> None:
    mech = SantextPlusMissingHalf(epsilon=1.0, w=1.0, p=0.3, frequencies=COUNTS)
    assert not run(mech, None, cluster_space, CLUSTER_PAIRS, 7804).passed


# --------------------------------------------------------------------------- mahalanobis (mahalanobis.md)
class MahalanobisInverse(Mahalanobis):
    """Mutation: M^{−1/2} in place of M^{1/2}."""

    def shape_noise(self, ru: torch.Tensor) -> torch.Tensor:
        assert self._state is not None
        return ru @ self._state.mats.M_inv_half.to(ru.device, ru.dtype)


class MahalanobisRenormalised(Mahalanobis):
    """Mutation: the direction M^{1/2}u re-normalised to unit length (‖Z‖ ~ Gamma(d, 1/ε))."""

    def shape_noise(self, ru: torch.Tensor) -> torch.Tensor:
        z = super().shape_noise(ru)
        r = torch.linalg.vector_norm(ru, dim=1, keepdim=True)
        out: torch.Tensor = z / torch.linalg.vector_norm(z, dim=1, keepdim=True) * r
        return out


def _maha_eps(space: EmbeddingSpace, lam: float) -> float:
    M = Mahalanobis(epsilon=1.0, lam=lam).scale_metric_matrix(space).double()
    return 1.0 / float(torch.linalg.vector_norm(M[0] - M[1]))


MAHA_LAM = 1.0


def test_mahalanobis_tiny_passes(tiny_space: EmbeddingSpace) -> None:
    res = run(
        Mahalanobis(epsilon=_maha_eps(tiny_space, MAHA_LAM), lam=MAHA_LAM), Nearest(), tiny_space, [(0, 1)], 7901
    )
    assert res.passed and res.rows[0].claim == pytest.approx(1.0, rel=1e-6)


def test_mahalanobis_inverse_fails(tiny_space: EmbeddingSpace) -> None:
    mech = MahalanobisInverse(epsilon=_maha_eps(tiny_space, MAHA_LAM), lam=MAHA_LAM)
    assert not run(mech, Nearest(), tiny_space, [(0, 1)], 7902).passed


def test_mahalanobis_renormalised_fails(tiny_space: EmbeddingSpace) -> None:
    """The re-normalised direction exceeds the claim only narrowly (expected LCB/claim ≈ 1.03 at
    n_estimate = 20,000: rejected by about 1 seed in 10 on the v2 streams), so this control estimates
    with n_estimate = 200,000 (LCB/claim 1.08–1.15 over seeds 7903–7908), same α and n_select."""
    mech = MahalanobisRenormalised(epsilon=_maha_eps(tiny_space, MAHA_LAM), lam=MAHA_LAM)
    res = audit((mech, Nearest()), tiny_space, [(0, 1)], n_select=4000, n_estimate=200_000, alpha=1e-3, seed=7903)
    assert not res.passed and res.worst_ratio > 1.0


COVERED = (
    "madlib",
    "laplace",
    "gaussian",
    "truncated_laplace",
    "privemb",
    "tem",
    "santext",
    "santext_plus",
    "mahalanobis",
    "dp_mlm",  # contextual (its input is the row): law and ratio bound in tests/mechanisms/test_dp_mlm.py
)
