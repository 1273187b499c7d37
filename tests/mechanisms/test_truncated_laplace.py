"""truncated_laplace (laplace.md §8): sound calibration known answers, reference_code, sampler law, δ check.

Known answers are printed by ``docs/mechanisms/kat/additive.py`` (laplace.md §8.3, §8.4, §8.6, §8.7).
Statistical tests use fixed seeds and the levels of testing.md §1 (α = 1e-3, Bonferroni).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy import stats

from hf_textdp.errors import InvalidParameterError, UnknownOptionError
from hf_textdp.io.models import load_space
from hf_textdp.mechanisms import get_mechanism_class
from hf_textdp.mechanisms.gaussian import Gaussian
from hf_textdp.mechanisms.truncated_laplace import (
    TruncatedLaplace,
    reference_constants,
    sample_truncated_laplace,
    sound_constants,
    truncated_laplace_variance,
)
from tests.utils import write_vectors


ALPHA = 1e-3


def _space(folder, V: int, d: int, seed: int):
    E = (0.5 * np.random.default_rng(seed).standard_normal((V, d))).astype(np.float32)
    return load_space(str(write_vectors(folder / "vectors.txt", [f"w{i}" for i in range(V)], E)))


@pytest.fixture(scope="module")
def space384(tmp_path_factory):
    return _space(tmp_path_factory.mktemp("tl384"), 4, 384, 1384)


@pytest.fixture(scope="module")
def space300(tmp_path_factory):
    return _space(tmp_path_factory.mktemp("tl300"), 4, 300, 1300)


@pytest.fixture(scope="module")
def space16(tmp_path_factory):
    return _space(tmp_path_factory.mktemp("tl16"), 40, 16, 1016)


pytestmark = pytest.mark.usefixtures("private_textdp_cache")  # $HF_TEXTDP_CACHE under tmp_path


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def test_registered():
    assert get_mechanism_class("truncated_laplace") is TruncatedLaplace
    assert TruncatedLaplace(epsilon=1.0).delta == 1e-6


# --------------------------------------------------------------------------- laplace.md §8.6 table
# δ, ε, α, S, A, B, gain vs Laplace (%), Var ÷ Var_Gauss ; d = 384, bound clip, C = 1
TABLE_384 = [
    (1e-5, 0.05, 0.001275775908, 0.05006305817, 6134.075545, 1567.047406, 1.5359, 90.63),
    (1e-5, 0.1, 0.002551551815, 0.1002524458, 3339.110691, 783.6803763, 0.8940, 80.50),
    (1e-5, 0.5, 0.01275775908, 0.5063540232, 794.7554517, 156.7611518, 0.2431, 61.98),
    (1e-5, 1.0, 0.02551551815, 1.025632953, 425.039682, 78.38214331, 0.1358, 55.11),
    (1e-5, 10.0, 0.2551551815, 13.00576307, 52.45894798, 7.838355123, 0.0158, 30.73),
    (1e-6, 0.05, 0.001275775908, 0.05006305817, 7938.644522, 1567.61081, 0.2454, 63.86),
    (1e-6, 0.1, 0.002551551815, 0.1002524458, 4241.465702, 783.8210807, 0.1384, 58.19),
    (1e-6, 1.0, 0.02551551815, 1.025632953, 515.2815312, 78.38351892, 0.0194, 43.02),
    (1e-6, 10.0, 0.2551551815, 13.00576307, 61.48319626, 7.838365972, 0.0021, 26.23),
]


@pytest.mark.parametrize(
    "delta, epsilon, alpha, S, A, B, gain_pct, ratio_gauss",
    [pytest.param(*row, id=f"delta{row[0]:g}_eps{row[1]:g}") for row in TABLE_384],
)
def test_sound_calibration_table(space384, delta, epsilon, alpha, S, A, B, gain_pct, ratio_gauss):
    """T-calib: α, K, k, S, A, B, G of the laplace.md §8.6 table (relative 1e-9; G to its 4 printed decimals)."""
    details = TruncatedLaplace(epsilon=epsilon, delta=delta, clip_norm=1.0).details(space384)
    assert rel(details["alpha"], alpha) < 1e-9
    assert rel(details["K"], 19.59591794) < 1e-9 and details["k"] == 19
    assert rel(details["S"], S) < 1e-9
    assert rel(details["A"], A) < 1e-9
    assert rel(details["B"], B) < 1e-9
    assert abs(100 * details["variance_gain"] - gain_pct) <= 5e-5
    assert details["delta"] == delta
    # the seed's claim checked (laplace.md §8.6): 26–91 times the analytic Gaussian's variance at d = 384
    sigma = Gaussian(epsilon=epsilon, delta=delta, clip_norm=1.0).details(space384)["sigma"]
    assert abs(details["variance"] / sigma**2 - ratio_gauss) <= 5e-3


def test_sound_calibration_d300(space300):
    details = TruncatedLaplace(epsilon=0.1, delta=1e-5, clip_norm=1.0).details(space300)
    assert rel(details["alpha"], 0.002886751346) < 1e-9
    assert rel(details["A"], 2951.499258) < 1e-9
    assert rel(details["B"], 692.6821811) < 1e-9
    assert abs(100 * details["variance_gain"] - 0.8938) <= 5e-5
    assert rel(details["K"], 17.32050808) < 1e-9 and details["k"] == 17


def test_monte_carlo_example_constants():
    """laplace.md §8.3 example: d = 4, Δ∞ = 1, Δ₁ = 2.5, ε = 1, δ = 0.05 → α = 0.4, A = 6.422070."""
    c = sound_constants(epsilon=1.0, delta=0.05, l1_sensitivity=2.5, linf_sensitivity=1.0)
    assert abs(c.alpha - 0.4) < 1e-15 and abs(c.A - 6.422070) < 5e-7
    assert (c.k, c.r) == (2, 0.5)


# --------------------------------------------------------------------------- laplace.md §8.4 reference_code
@pytest.mark.parametrize(
    "epsilon, A, axis_delta",
    [
        pytest.param(0.05, 4.010241063, 0.2490, id="eps0.05"),
        pytest.param(0.1, 4.020552375, 0.2481, id="eps0.1"),
        pytest.param(0.5, 4.105672855, 0.2403, id="eps0.5"),
        pytest.param(1.0, 4.219171079, 0.2303, id="eps1"),
        pytest.param(5.0, 5.596464695, 0.1395, id="eps5"),
        pytest.param(9.0, 10.92090171, 0.0258, id="eps9"),
    ],
)
def test_reference_code_A(space384, epsilon, A, axis_delta):
    mech = TruncatedLaplace(epsilon=epsilon, calibration="reference_code", clip_norm=1.0)
    details = mech.details(space384)
    assert rel(details["A"], A) < 1e-9
    # true δ for the axis pair x = Ce₁, x' = −Ce₁ (D = 2C in one coordinate): the strip mass of laplace.md §8.3
    s = math.expm1(details["alpha"] * 2.0) / (2.0 * math.expm1(details["alpha"] * details["A"]))
    assert abs(s - axis_delta) <= 5e-5


def test_reference_code_boundary(space384):
    ok = TruncatedLaplace(epsilon=9.79, calibration="reference_code", clip_norm=1.0)
    assert rel(ok.details(space384)["A"], 28.48565771) < 1e-9
    with pytest.raises(InvalidParameterError, match="epsilon"):
        TruncatedLaplace(epsilon=9.8, calibration="reference_code", clip_norm=1.0).setup(space384)
    with pytest.raises(InvalidParameterError, match="epsilon"):
        reference_constants(epsilon=9.8, l1_sensitivity=2 * math.sqrt(384), dim=384)


def test_reference_code_claim(space16):
    claim = TruncatedLaplace(epsilon=1.0, delta=1e-5, calibration="reference_code").claim(space16)
    assert claim.guarantee == "dp" and not claim.certified
    assert claim.warnings == ("reference_code truncation is not private: δ ≥ 0.25 for an axis pair (laplace.md §8.4)",)
    assert claim.delta == 1e-5 and claim.delta_token == 1e-5  # the seed's nominal claim, as configured
    assert TruncatedLaplace(epsilon=1.0, calibration="reference_code").details(space16)["certified"] is False


def test_sound_claim(space16):
    claim = TruncatedLaplace(epsilon=2.0, delta=1e-7).claim(space16)
    assert (claim.guarantee, claim.metric, claim.epsilon_token, claim.delta_token) == ("dp", None, 2.0, 1e-7)
    assert claim.certified and claim.warnings == () and claim.pair_bound(0, 1) == 2.0


# --------------------------------------------------------------------------- T-law
def trlap_cdf(alpha: float, A: float):
    """F(z) = ½ + ½·sign(z)·(1 − e^{−α|z|})/(1 − e^{−αA}) on [−A, A] (laplace.md §8.5)."""

    def cdf(z):
        z = np.clip(z, -A, A)
        half = 0.5 * (-np.expm1(-alpha * np.abs(z))) / (-math.expm1(-alpha * A))
        return 0.5 + np.sign(z) * half

    return cdf


@pytest.mark.parametrize(
    "alpha, A, variance, seed",
    [
        pytest.param(1.0, 3.0, 1.214065, 41, id="a1_A3"),
        pytest.param(0.2, 1.0, 0.316789, 42, id="a0.2_A1"),
        pytest.param(0.05, 2.0, 1.300117, 43, id="a0.05_A2"),
    ],
)
def test_sampler_law(alpha, A, variance, seed):
    """T-law: 400,000 draws; max |z| ≤ A; KS against F at α; variance within 4 SE of the formula."""
    assert abs(truncated_laplace_variance(alpha, A) - variance) < 5e-7
    g = torch.Generator().manual_seed(seed)
    z = sample_truncated_laplace(g, 400_000, 1, alpha, A).numpy().ravel()
    assert float(np.abs(z).max()) <= A
    assert stats.kstest(z, trlap_cdf(alpha, A)).pvalue >= ALPHA
    se = math.sqrt((np.mean(z**4) - variance**2) / z.size)
    assert abs(np.mean(z * z) - variance) <= 4 * se


def test_sampler_endpoints():
    """v = 1 gives z = ±A exactly; v = 0 gives 0 (laplace.md §8.5)."""
    alpha, A = 0.3, 2.5
    v = torch.tensor([0.0, 1.0], dtype=torch.float64)
    z = -torch.log1p(v * math.expm1(-alpha * A)) / alpha
    assert z[0] == 0.0 and abs(float(z[1]) - A) < 1e-12


N_LAW, BATCH = 20_000, 1_000


def mech_draws(mech, space, seed: int, position: int = 2) -> np.ndarray:
    """Perturb N_LAW copies of one candidate (B = 1,000 per call) and subtract x̃ (clip computed here)."""
    mech.setup(space)
    x = space.E[[position] * BATCH]
    x64 = x.double().numpy()
    xt = x64 * min(1.0, mech.options["clip_norm"] / float(np.linalg.norm(x64[0])))
    g = torch.Generator().manual_seed(seed)
    return np.concatenate([mech.perturb(x, g).double().numpy() - xt for _ in range(N_LAW // BATCH)])


def mech_law_ok(z: np.ndarray, alpha: float, A: float) -> bool:
    """Support (up to fp32 rounding of the output), pooled KS at α/2, per-coordinate KS at α/(2d)."""
    n, d = z.shape
    if float(np.abs(z).max()) > A * (1 + 1e-6) + 1e-6:
        return False
    cdf = trlap_cdf(alpha, A)
    if stats.kstest(z.ravel(), cdf).pvalue < ALPHA / 2:
        return False
    return all(stats.kstest(z[:, j], cdf).pvalue >= ALPHA / (2 * d) for j in range(d))


class AlphaDoubled(TruncatedLaplace):
    def noise_constants(self, sensitivity, dim):
        c = super().noise_constants(sensitivity, dim)
        return replace(c, alpha=2 * c.alpha)


class AlphaFromL2(TruncatedLaplace):  # α = ε/Δ₂ (L2 in place of L1)
    def noise_constants(self, sensitivity, dim):
        return super().noise_constants(replace(sensitivity, l1=sensitivity.l2), dim)


class TightTruncation(TruncatedLaplace):  # A fixed at 2Δ∞
    def noise_constants(self, sensitivity, dim):
        return replace(super().noise_constants(sensitivity, dim), A=2 * sensitivity.linf)


LAW_KW = {"epsilon": 4.0, "delta": 1e-3, "clip_norm": 1.0}  # d = 16: Δ₁ = 8, Δ∞ = 2, α = 0.5


def test_mechanism_law(space16):
    mech = TruncatedLaplace(**LAW_KW)
    d = mech.details(space16)
    assert d["alpha"] == 0.5 and d["k"] == 4 and d["r"] == 0.0
    assert mech_law_ok(mech_draws(mech, space16, seed=44), d["alpha"], d["A"])


@pytest.mark.parametrize(
    "mutant", [AlphaDoubled, AlphaFromL2, TightTruncation], ids=["alpha_doubled", "alpha_l2", "A_2Dinf"]
)
def test_mechanism_law_rejects_mutants(space16, mutant):
    correct = TruncatedLaplace(**LAW_KW).details(space16)
    assert not mech_law_ok(mech_draws(mutant(**LAW_KW), space16, seed=45), correct["alpha"], correct["A"])


def test_independence(space16):
    """T-indep (as laplace.md §7): |r| < 5/√n across coordinates and across rows of one batch; no equal noise."""
    z = mech_draws(TruncatedLaplace(**LAW_KW), space16, seed=46)
    n = z.shape[0]
    assert abs(stats.pearsonr(z[:, 0], z[:, 1]).statistic) < 5 / math.sqrt(n)
    assert abs(stats.pearsonr(z[0::2, 0], z[1::2, 0]).statistic) < 5 / math.sqrt(n // 2)
    assert np.unique(z, axis=0).shape[0] == n


# --------------------------------------------------------------------------- T-delta
def hockey_stick(alpha: float, A: float, seed: int, n: int = 2_000_000) -> tuple[float, float]:
    """Monte Carlo E_P[(1 − e^ε q/p)+] for x = 0, x' = D = (1, 1, 0.5, 0), ε = 1 (laplace.md §8.3)."""
    diff = np.array([1.0, 1.0, 0.5, 0.0])
    y = sample_truncated_laplace(torch.Generator().manual_seed(seed), n, 4, alpha, A).numpy()
    inside = np.all(np.abs(y - diff) <= A, axis=1)
    ratio = np.where(inside, np.exp(alpha * (np.abs(y).sum(1) - np.abs(y - diff).sum(1))), 0.0)
    vals = np.maximum(0.0, 1.0 - math.e * ratio)
    return float(vals.mean()), float(vals.std() / math.sqrt(n))


def test_delta_monte_carlo():
    """T-delta: the hockey-stick divergence at the worst-case vertex is below δ + 4 SE (2·10⁶ draws)."""
    c = sound_constants(epsilon=1.0, delta=0.05, l1_sensitivity=2.5, linf_sensitivity=1.0)
    est, se = hockey_stick(c.alpha, c.A, seed=47)
    assert est <= 0.05 + 4 * se
    assert est > 0.045  # the bound is nearly tight here (exact product δ = 0.049212)
    # too tight a truncation (A = 2Δ∞) is caught by the same estimate
    bad, bad_se = hockey_stick(c.alpha, 2.0, seed=48)
    assert bad > 0.05 + 4 * bad_se


# --------------------------------------------------------------------------- mechanics, invalid parameters
def test_test_mode_and_empty(space16):
    mech = TruncatedLaplace(epsilon=math.inf, test_mode=True)
    mech.setup(space16)
    g = torch.Generator().manual_seed(3)
    state = g.get_state()
    y = mech.perturb(space16.E, g)
    assert torch.equal(g.get_state(), state)
    assert torch.equal(mech.search_index(space16).search(y, 1)[:, 0], torch.arange(space16.V))
    mech = TruncatedLaplace(epsilon=1.0)
    mech.setup(space16)
    assert mech.perturb(space16.E[:0], g).shape == (0, 16)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        pytest.param({"delta": 0.0}, InvalidParameterError, "delta", id="delta_zero"),
        pytest.param({"delta": 1.0}, InvalidParameterError, "delta", id="delta_one"),
        pytest.param({"delta": -1e-6}, InvalidParameterError, "delta", id="delta_negative"),
        pytest.param({"calibration": "analytic"}, InvalidParameterError, "calibration", id="calibration"),
        pytest.param({"bound": "unit", "clip_norm": 2.0}, InvalidParameterError, "clip_norm", id="clip_norm_unit"),
        pytest.param({"bound": "jl", "match_space": "raw"}, InvalidParameterError, "match_space", id="raw_jl"),
        pytest.param({"epsilon": -1.0}, InvalidParameterError, "epsilon", id="epsilon_negative"),
        pytest.param({"A": 3.0}, UnknownOptionError, "A", id="unknown_option"),
    ],
)
def test_invalid_parameters(kwargs, error, match):
    with pytest.raises(error, match=match):
        TruncatedLaplace(**{"epsilon": 1.0, **kwargs})


@pytest.mark.parametrize(
    "kwargs, match",
    [
        pytest.param({"epsilon": math.nan}, "epsilon", id="epsilon_nan"),
        pytest.param({"epsilon": 1e6}, "epsilon", id="S_overflows"),
        pytest.param({"delta": 1.0}, "delta", id="delta_one"),
        pytest.param({"l1_sensitivity": 0.5}, "sensitivity", id="l1_below_linf"),
        pytest.param({"linf_sensitivity": 0.0, "l1_sensitivity": 0.0}, "sensitivity", id="zero_sensitivity"),
    ],
)
def test_sound_preconditions(kwargs, match):
    args = {"epsilon": 1.0, "delta": 1e-5, "l1_sensitivity": 2.5, "linf_sensitivity": 1.0, **kwargs}
    with pytest.raises(InvalidParameterError, match=match):
        sound_constants(**args)


@pytest.mark.parametrize("epsilon", [1e-300, 1e-200])
def test_epsilon_too_small_for_float64_is_named(epsilon):
    """α = ε/Δ₁ whose square underflows: a NumericalRangeError naming epsilon (was a ZeroDivisionError)."""
    from hf_textdp.errors import NumericalRangeError

    with pytest.raises(NumericalRangeError, match="epsilon"):
        sound_constants(epsilon=epsilon, delta=1e-6, l1_sensitivity=2 * 384**0.5, linf_sensitivity=2.0)
    assert sound_constants(epsilon=1e-100, delta=1e-6, l1_sensitivity=2 * 384**0.5, linf_sensitivity=2.0).alpha > 0
