"""Class-preserving replacement (docs/mechanisms/space.md §7): the class rule on three tokenizer families,
outputs that stay in their input's class for every mechanism and step, per-class claims and report,
per-class calibration, the law and the audit on a class space (with mutations), and seeded outputs
that do not depend on how a batch mixes classes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_textdp import Privatizer, PrivatizerConfig, audit, calibrate
from hf_textdp.accounting import format_report
from hf_textdp.errors import InvalidParameterError
from hf_textdp.integrations.cards import candidate_setting
from hf_textdp.io.models import load_space
from hf_textdp.mechanisms import list_mechanisms
from hf_textdp.mechanisms.madlib import Madlib
from hf_textdp.mechanisms.tem import Tem
from hf_textdp.postprocess import get_postprocess_class
from hf_textdp.space import EmbeddingSpace
from tests.mechanisms.test_tem import chi2_gof_pvalue, exp_mech_law
from tests.tools.test_audit_mechanisms import MadlibHalved
from tests.utils import FAMILIES, build_wordpiece_rows, corpus, write_jsonl


SEED = 2**40 + 7070
ALPHA = 1e-3  # level of every statistical test here (testing.md §1)
MARKER_RULE = {  # the class rule of space.md §7.1, written independently of the package
    "wordpiece": lambda t: int(t.startswith("##")),
    "bytelevel": lambda t: int(not t.startswith("\u0120")),
    "metaspace": lambda t: int(not t.startswith("\u2581")),
}

pytestmark = pytest.mark.usefixtures("module_textdp_cache")


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory) -> tuple[str, str]:
    return request.param, FAMILIES[request.param](tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module")
def wordpiece(tmp_path_factory) -> str:
    return FAMILIES["wordpiece"](tmp_path_factory.mktemp("wp_classes"))


@pytest.fixture(scope="module")
def public_corpus(tmp_path_factory) -> str:
    return str(write_jsonl(tmp_path_factory.mktemp("pub") / "public.jsonl", corpus(200, 77)))


# The cluster geometry of the audit fixture (C), 0, 1, 2.00, 2.01, …, 2.09, in each class; the continuation
# class sits 0.5 away on a second axis, so the two classes are different spaces of the same shape.
CLUSTER = np.concatenate([[0.0, 1.0], 2.0 + 0.01 * np.arange(10)])
INITIAL = [f"w{chr(97 + i)}" for i in range(12)]
CONTINUATION = [f"##w{chr(97 + i)}" for i in range(12)]


@pytest.fixture(scope="module")
def cluster_model(tmp_path_factory) -> str:
    rows = np.zeros((24, 2))
    rows[:12, 0] = CLUSTER
    rows[12:, 0] = CLUSTER
    rows[12:, 1] = 0.5
    return str(build_wordpiece_rows(tmp_path_factory.mktemp("cluster_wp"), INITIAL + CONTINUATION, rows))


def _classes_of(space: EmbeddingSpace, ids) -> np.ndarray:
    """Each id's class by the marker rule, from its token string (independent of space.token_class)."""
    tokens = space.tokenizer.convert_ids_to_tokens([int(i) for i in ids])
    return np.array([MARKER_RULE["wordpiece"](t) for t in tokens])


# --------------------------------------------------------------------------- the rule (§7.1)
def test_class_rule_on_three_families(family):
    name, folder = family
    space = load_space(folder, candidates="no_reserved")
    tokens = space.tokenizer.convert_ids_to_tokens(space.candidate_ids.tolist())
    expected = np.array([MARKER_RULE[name](t) for t in tokens])
    assert space.token_class is not None and space.piece_marker in ("##", "\u0120", "\u2581")
    np.testing.assert_array_equal(space.token_class, expected)
    parts = space.class_parts()
    assert [p.name for p in parts] == ["word_initial", "continuation"]
    assert sorted(np.concatenate([p.positions for p in parts]).tolist()) == list(range(space.V))
    for p in parts:  # a class space holds exactly its class's rows
        assert p.space.V == p.positions.size >= 2
        assert torch.equal(p.space.candidate_ids, space.candidate_ids[torch.from_numpy(p.positions)])
        assert torch.equal(p.space.E, space.E[torch.from_numpy(p.positions)])
    assert space.candidate_set_info()["classes"] == "preserve"
    mixed = load_space(folder, candidates={"set": "no_reserved", "classes": "mix"})
    assert mixed.token_class is None and len(mixed.class_parts()) == 1
    assert mixed.candidate_set_info()["classes"] == "mix"


def test_static_vectors_have_one_class(tmp_path):
    from tests.utils import tiny_random_vocabulary

    space = load_space(str(tiny_random_vocabulary(tmp_path / "v.txt")), candidates="no_reserved")
    assert space.token_class is None and [p.name for p in space.class_parts()] == ["all"]


def test_a_class_too_small_falls_back_to_one_space(tmp_path, caplog):
    """A class of fewer than 2 candidates is no metric space: one space over all of C, said in the report."""
    rows = np.arange(5, dtype=np.float64).reshape(-1, 1).repeat(2, 1)
    folder = build_wordpiece_rows(tmp_path / "m", ["wa", "wb", "wc", "wd", "##we"], rows)
    space = load_space(str(folder), candidates="no_reserved")
    assert space.token_class is None
    info = space.candidate_set_info()
    assert info["classes"] == "mix" and "continuation 1" in info["classes_note"]
    assert "fewer than 2 candidates" in caplog.text


# --------------------------------------------------------------------------- every output stays in its class
def _class_changes(priv: Privatizer, texts: list[str]) -> tuple[int, int, int]:
    """(positions whose class changed, positions replaced, privatized positions) over ``texts``."""
    out = priv({"text": texts}, list(range(len(texts))))
    tok = priv.engine.space.tokenizer
    changed = replaced = total = 0
    for text, ids in zip(texts, out["input_ids"], strict=True):
        inp = tok(text)["input_ids"]
        assert len(inp) == len(ids)
        a, b = np.array(inp), np.array(ids)
        cand = priv.engine.space.is_member(a)
        ca, cb = _classes_of(priv.engine.space, a[cand]), _classes_of(priv.engine.space, b[cand])
        changed += int((ca != cb).sum())
        replaced += int((a[cand] != b[cand]).sum())
        total += int(cand.sum())
    return changed, replaced, total


# dp_mlm needs a masked LM (its class preservation: tests/mechanisms/test_dp_mlm.py)
CASES = [(m, "nearest") for m in list_mechanisms() if m not in ("tem", "santext", "santext_plus", "dp_mlm")]
CASES += [("madlib", "top2"), ("madlib", "rank"), ("tem", None), ("santext", None), ("santext_plus", None)]
LOW_EPS = {"madlib": 3.0, "mahalanobis": 3.0, "privemb": 3.0, "tem": 1.0, "santext": 1.0, "santext_plus": 1.0}


@pytest.mark.parametrize(("mechanism", "postprocess"), CASES, ids=lambda v: str(v))
def test_every_output_stays_in_its_input_class(wordpiece, public_corpus, mechanism, postprocess):
    """At an ε that replaces most tokens, no output leaves its input's class; with classes='mix' many do
    (the check can fail)."""
    options = {"frequency_corpus": public_corpus, "p": 1.0} if mechanism == "santext_plus" else {}
    eps = LOW_EPS.get(mechanism, 10.0)
    texts = corpus(30, 11)
    kw = dict(mechanism=mechanism, epsilon=eps, model=wordpiece, options=options)
    if postprocess is not None:
        kw["postprocess"] = postprocess
    preserved = Privatizer(PrivatizerConfig(**kw), seed=SEED)
    changed, replaced, total = _class_changes(preserved, texts)
    assert total > 300 and replaced > 0.3 * total
    assert changed == 0
    mixed = Privatizer(PrivatizerConfig(**kw, candidates={"set": "no_reserved", "classes": "mix"}), seed=SEED)
    changed_mix, _, _ = _class_changes(mixed, texts)
    assert changed_mix > 0.02 * total


def test_vector_release_is_not_split(wordpiece):
    """postprocess='vector' releases noisy vectors before any token is chosen: one space."""
    priv = Privatizer(PrivatizerConfig(epsilon=5.0, model=wordpiece, postprocess="vector"), seed=SEED)
    assert [c.name for c in priv.engine.classes] == ["all"]
    assert priv.privacy_report()["candidate_set"]["per_class"] is None


# --------------------------------------------------------------------------- per-class claims and report (§7.3)
def _diam(E: torch.Tensor) -> float:
    X = E.double().numpy()
    return float(np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)).max())


def test_per_class_claims_report_and_row_columns(wordpiece):
    eps = 2.0
    priv = Privatizer(PrivatizerConfig(epsilon=eps, model=wordpiece), seed=SEED)
    texts = corpus(5, 3)
    out = priv({"text": texts}, list(range(len(texts))))
    report = priv.privacy_report()
    per_class = report["candidate_set"]["per_class"]
    assert [c["name"] for c in per_class] == ["word_initial", "continuation"]
    assert sum(c["size"] for c in per_class) == report["candidate_set"]["size"] == priv.engine.space.V
    for c, part in zip(per_class, priv.engine.classes, strict=True):
        assert c["marker"] == "##"
        assert c["diam"] == pytest.approx(_diam(part.space.E), rel=1e-6)  # float64 brute force
        assert c["epsilon_token"] == pytest.approx(eps * c["diam"], rel=1e-12)
    largest = max(c["epsilon_token"] for c in per_class)
    assert report["epsilon_token"] == largest
    assert min(c["epsilon_token"] for c in per_class) < largest  # the classes are different spaces
    assert out["dp_epsilon"] == [k * largest for k in out["dp_tokens"]]
    text = format_report(report)
    assert (
        "classes:" in text
        and "word_initial ε_tok" in text
        and "over each piece class's own space, the largest" in text
    )
    assert "class-preserving" in candidate_setting(report["candidate_set"])
    assert any("piece class" in item for item in report["not_covered"])


def test_pair_bound_holds_within_a_class_only(cluster_model):
    priv = Privatizer(PrivatizerConfig(epsilon=1.0, model=cluster_model), seed=SEED)
    claim = priv.engine.claim
    assert claim.pair_bound is not None
    pos = {
        t: i
        for i, t in enumerate(
            priv.engine.space.tokenizer.convert_ids_to_tokens(priv.engine.space.candidate_ids.tolist())
        )
    }
    assert claim.pair_bound(pos["wa"], pos["wb"]) == pytest.approx(1.0)  # ε·|0 − 1|
    assert claim.pair_bound(pos["##wa"], pos["##wc"]) == pytest.approx(2.0)
    assert claim.pair_bound(pos["wa"], pos["##wa"]) == math.inf  # different classes: no claim


# --------------------------------------------------------------------------- the law on a class space
def _counts(priv: Privatizer, position: int, n: int, row: int) -> np.ndarray:
    """Outputs (positions in C) of ``n`` releases of the candidate at ``position`` through the privatizer."""
    out = priv.engine.release_positions([torch.full((n,), position, dtype=torch.int64)], [row])[0]
    return np.bincount(out.numpy(), minlength=priv.engine.space.V)


@pytest.mark.parametrize("mechanism", ["santext", "tem"])
@pytest.mark.parametrize("token", ["wb", "##wc"])
def test_selection_law_on_a_class_space(cluster_model, mechanism, token):
    """χ² (n = 100,000, α = 1e-3) of the privatizer's outputs against the exact law of the input's class
    space alone (12 rows; tem with the γ of V = 12); the whole-space mechanism (classes='mix') is rejected."""
    eps = 3.0
    cfg = PrivatizerConfig(mechanism=mechanism, epsilon=eps, model=cluster_model)
    priv = Privatizer(cfg, seed=SEED)
    tokens = priv.engine.space.tokenizer.convert_ids_to_tokens(priv.engine.space.candidate_ids.tolist())
    w = tokens.index(token)
    part = next(p for p in priv.engine.classes if w in p.positions)
    E = part.space.E.double().numpy()
    gamma = Tem(epsilon=eps).gamma_for(part.space.V) if mechanism == "tem" else math.inf
    law = np.zeros(priv.engine.space.V)
    law[part.positions] = exp_mech_law(E, eps, gamma)[int(np.flatnonzero(part.positions == w)[0])]
    counts = _counts(priv, w, 100_000, row=5)
    assert chi2_gof_pvalue(counts, law) > ALPHA
    # mutation: the same token through the whole space's mechanism
    mixed = Privatizer(dataclass_replace(cfg, candidates={"set": "no_reserved", "classes": "mix"}), seed=SEED)
    bad = _counts(mixed, w, 20_000, row=5)
    assert bad[law == 0].sum() > 0


def dataclass_replace(cfg: PrivatizerConfig, **changes) -> PrivatizerConfig:
    return PrivatizerConfig(**{**cfg.to_dict(), **changes})


# --------------------------------------------------------------------------- the audit on class spaces
def _ids(space: EmbeddingSpace, *tokens: str) -> list[int]:
    return [int(space.tokenizer.convert_tokens_to_ids(t)) for t in tokens]


def test_audit_runs_inside_each_class_and_catches_a_halved_madlib(cluster_model):
    """The cluster pairs of fixture (C) in both classes: madlib passes, the halved-radius mutation fails."""
    space = load_space(cluster_model, candidates="no_reserved")
    pairs = [
        _ids(space, "wa", "wb"),
        _ids(space, "wb", "wc"),
        _ids(space, "##wa", "##wb"),
        _ids(space, "##wb", "##wc"),
    ]
    nearest = get_postprocess_class("nearest")()
    good = audit((Madlib(epsilon=1.0), nearest), space, pairs, n_select=4000, n_estimate=20000, seed=7301)
    assert good.passed and len(good.rows) == 4
    assert [r.claim for r in good.rows] == pytest.approx([1.0, 1.0, 1.0, 1.0])
    bad = audit((MadlibHalved(epsilon=1.0), nearest), space, pairs, n_select=4000, n_estimate=20000, seed=7302)
    assert not bad.passed
    with pytest.raises(InvalidParameterError, match="across classes"):
        audit((Madlib(epsilon=1.0), nearest), space, [_ids(space, "wa", "##wa")], seed=7303)


# santext_plus with w = 1: every token sensitive, so metric DP in each class (UMLDP gives non-sensitive tokens no
# bound; test_audit_mechanisms audits that case on pairs inside V_S)
CLASS_AUDIT_OPTIONS = {"santext_plus": {"frequencies": {"wa": 5, "wb": 3, "##wa": 4, "##wb": 2}, "w": 1.0}}
CLASS_AUDITS = ["tem", "santext", "santext_plus", "laplace", "gaussian", "truncated_laplace", "privemb", "mahalanobis"]


@pytest.mark.parametrize("mechanism", CLASS_AUDITS)
def test_config_audit_passes_on_class_spaces(cluster_model, mechanism):
    """A config audit (default pairs of each class) of the other families on the class spaces."""
    options = CLASS_AUDIT_OPTIONS.get(mechanism, {})
    cfg = PrivatizerConfig(mechanism=mechanism, epsilon=2.0, model=cluster_model, options=options)
    res = audit(cfg, cluster_model, n_select=2000, n_estimate=10000, seed=7310)
    assert res.passed
    space = load_space(cluster_model, candidates="no_reserved")
    classes = {int(c) for c in _classes_of(space, [r.w for r in res.rows])}
    assert classes == {0, 1}  # pairs of both classes were audited
    for r in res.rows:
        assert _classes_of(space, [r.w])[0] == _classes_of(space, [r.w_prime])[0]


# --------------------------------------------------------------------------- calibration per class
@pytest.mark.parametrize("mechanism", ["madlib", "tem"])
def test_calibration_matches_the_privatizer_per_class(wordpiece, mechanism):
    """The calibrated rate (Rao-Blackwell for madlib, a per-class Monte Carlo mixture for tem) agrees with
    the privatizer's measured replacement rate on uniformly drawn candidates (4 standard errors)."""
    eps = 12.0 if mechanism == "madlib" else 3.0
    cfg = PrivatizerConfig(mechanism=mechanism, epsilon=eps, model=wordpiece)
    result = calibrate(config=cfg, epsilons=[eps], n=4000, calibration_seed=11)
    rate, se = result.rates[eps]
    priv = Privatizer(cfg, seed=SEED)
    w = torch.from_numpy(np.random.default_rng(5).integers(0, priv.engine.space.V, 20_000))
    out = priv.engine.release_positions([w], [3])[0]
    measured = float((out != w).double().mean())
    assert abs(rate - measured) < 4 * math.hypot(se, math.sqrt(measured * (1 - measured) / w.numel()))
    mixed = calibrate(
        config=dataclass_replace(cfg, candidates={"classes": "mix"}), epsilons=[eps], n=4000, calibration_seed=11
    )
    assert mixed.rates[eps][0] != rate  # the class spaces are calibrated, not the whole space


# --------------------------------------------------------------------------- seeded outputs
def test_seeded_outputs_do_not_depend_on_how_a_batch_mixes_classes(wordpiece):
    priv = Privatizer(PrivatizerConfig(mechanism="tem", epsilon=2.0, model=wordpiece), seed=SEED)
    texts = corpus(12, 21)
    together = priv({"text": texts}, list(range(12)))["input_ids"]
    alone = [priv({"text": [t]}, [i])["input_ids"][0] for i, t in enumerate(texts)]
    assert together == alone
    reversed_ = priv({"text": texts[::-1]}, list(range(12))[::-1])["input_ids"][::-1]
    assert together == reversed_


# --------------------------------------------------------------------------- config and CLI
def test_config_value_round_trip_and_cli_flag(tmp_path, wordpiece):
    cfg = PrivatizerConfig(epsilon=3.0, candidates={"set": "no_reserved", "classes": "mix"})
    assert cfg.candidates == {"classes": "mix", "set": "no_reserved"}
    assert PrivatizerConfig(epsilon=3.0).candidates == "no_reserved"  # preserve is the default
    with pytest.raises(InvalidParameterError, match="classes must be one of"):
        PrivatizerConfig(epsilon=3.0, candidates={"classes": "split"})
    from hf_textdp.cli import main

    src = write_jsonl(tmp_path / "in.jsonl", ["the movie was good", "a bad film"])
    reports = {}
    for classes in ("mix", "preserve"):
        out = tmp_path / f"{classes}.jsonl"
        argv = ["privatize", str(src), str(out), "--epsilon", "3", "--model", wordpiece, "--seed", str(SEED)]
        assert main([*argv, "--candidate-classes", classes]) == 0
        reports[classes] = json.loads(Path(f"{out}.privacy_report.json").read_text(encoding="utf-8"))
    assert reports["mix"]["candidate_set"]["classes"] == "mix" and reports["mix"]["candidate_set"]["per_class"] is None
    report = reports["preserve"]
    assert [c["name"] for c in report["candidate_set"]["per_class"]] == ["word_initial", "continuation"]
