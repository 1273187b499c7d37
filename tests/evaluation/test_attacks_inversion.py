"""The inversion attack, recovery by group of tokens, and the held-out headline (docs/attacks.md §3.2, §5).

Tiny random BERT models; fixed seeds. Each claim has a broken variant that the same check rejects.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_textdp import PrivatizerConfig
from hf_textdp.cli import main
from hf_textdp.errors import InvalidParameterError
from hf_textdp.evaluation.attacks import AttackSettings, run_attack
from hf_textdp.evaluation.attacks.corpus import ReleasedCorpus, RowLayout
from hf_textdp.evaluation.attacks.intervals import row_bootstrap
from hf_textdp.evaluation.attacks.inversion import InversionAttack, InversionBudget, load_encoder
from hf_textdp.evaluation.attacks.run import split_overlap
from hf_textdp.evaluation.attacks.scoring import frequent_mask, span_recovery, token_groups, word_hits
from tests.utils import corpus, write_jsonl


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """One torch thread: the tiny models' many small steps run ~10× faster than with threads on a busy machine."""
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


# the trained inversion models are kept in the cache: one fresh folder for this module, none from earlier runs
pytestmark = pytest.mark.usefixtures("module_textdp_cache")

FAST = dict(train_rows=150, bootstrap=200, epochs=1, neighbours=20, holdout_rows=100, inversion=True)


# --------------------------------------------------------------------------- scoring
def _toy(inputs: list[int], released: list[int], sizes: list[int], words: list[int]) -> ReleasedCorpus:
    local = np.concatenate([np.arange(s) for s in sizes])
    offsets = np.stack([local * 2, local * 2 + 1], 1)  # a row's token i covers its characters 2i … 2i+1
    ids = [np.zeros(s + 2, dtype=np.int64) for s in sizes]
    at = [np.arange(1, s + 1) for s in sizes]
    rows = RowLayout(ids, at, np.asarray(words), offsets)
    return ReleasedCorpus(np.asarray(inputs), np.asarray(released), np.asarray(sizes), [], rows)


def test_token_groups_and_words() -> None:
    c = _toy([0, 1, 2, 5, 6], [0, 3, 2, 5, 7], [3, 2], [0, 0, 1, 2, 2])
    g = token_groups(c, frequent_mask(np.array([9, 8, 0, 0, 0, 0, 1, 0]), 2))  # 0 and 1 are function words
    assert g["replaced"].tolist() == [False, True, False, False, True]
    assert g["replaced_function"].tolist() == [False, True, False, False, False]
    assert g["replaced_content"].tolist() == [False, False, False, False, True]
    hit = np.array([True, False, True, True, True])
    w, rows, wg = word_hits(c, {"a": (hit, None)})
    assert w["a"][0].tolist() == [False, True, True]  # word 0 has a missed piece
    assert rows.tolist() == [0, 0, 1] and wg["words_replaced"].tolist() == [True, False, True]


def test_span_recovery_needs_every_token() -> None:
    c = _toy([0, 1, 2, 5, 6], [0, 3, 2, 5, 7], [3, 2], [0, 0, 1, 2, 2])
    top1 = np.array([True, False, True, True, True])
    top5 = np.ones(5, dtype=bool)
    # spans: row 0 chars 0–3 (tokens 0, 1), row 0 chars 4–5 (token 2), row 1 chars 0–3 (tokens 3, 4), none
    spans = [(0, 0, 3), (0, 4, 5), (1, 0, 3), (1, 50, 60)]
    out = span_recovery(c, {"a": (top1, top5)}, spans, 0, 0)
    assert out["a"]["top1"]["value"] == pytest.approx(2 / 3) and out["a"]["top1"]["n"] == 3
    assert out["a"]["top5"]["value"] == 1.0


def test_private_rows_found_in_the_public_text_are_left_out() -> None:
    private = ['The film\'s "best" scene.', "unseen row"]
    kept, n = split_overlap(private, ["the film 's `` best '' scene ."])
    assert kept == ["unseen row"] and n == 1


# --------------------------------------------------------------------------- inversion
def test_public_rows_sharing_a_run_of_words_are_found() -> None:
    """A private review that a public task holds cut into sentences and re-tokenized is missed by exact matching
    and found by shared 8-word runs; unrelated rows and a run of 7 shared words are not flagged."""
    from hf_textdp.evaluation.attacks.run import in_public, shares_ngram

    private = [
        "the film 's sharp script , strong cast and brisk pace make it the best comedy of the year . go see it",
        "short one",
    ]
    public = [
        "The film's sharp script, strong cast and brisk pace make it the best comedy",  # a cut of the first
        "of the year.",  # the cut's other half: 3 words, shares no 8-word run
        "a sharp script , strong cast and brisk pace : what a product",  # 7 shared words in a row, not 8
        "Short one!",  # a short row equal to a short private row
        "what is the capital of france ?",
    ]
    assert in_public(private, public).tolist() == [False, True]  # exact matching finds only the short row
    assert shares_ngram(public, private, 8).tolist() == [True, False, False, True, False]
    assert shares_ngram(public, private, 7).tolist() == [True, False, True, True, False]
    with pytest.raises(InvalidParameterError, match="public_ngram"):
        shares_ngram(public, private, 0)


def test_inversion_recovers_an_identity_release(tiny_bert: str) -> None:
    """ε = ∞ (test mode): nothing is replaced, and the inversion attack names ≥ 99 % of the tokens."""
    config = PrivatizerConfig(mechanism="madlib", epsilon=float("inf"), model=tiny_bert, options={"test_mode": True})
    settings = AttackSettings(**FAST, contextual=False, inversion_rows=300, inversion_epochs=3, inversion_lr=1e-3)
    rec, _ = run_attack(config, corpus(100, seed=1), corpus(600, seed=2), seed=2**40 + 7, settings=settings)
    inv = rec["groups"]["inversion"]["all"]["top1"]
    assert rec["replacement_rate"] == 0.0 and inv["value"] >= 0.99, inv
    info = rec["inversion_model"]
    assert info["loss_curve"] and info["final_loss"] == info["loss_curve"][-1]["loss"]
    assert len(info["step_losses"]) == info["steps"]


def _world(
    cands: np.ndarray, n_rows: int, seed: int, leak: bool, cls: int, sep: int
) -> tuple[ReleasedCorpus, np.ndarray]:
    """Rows of 8 i.i.d. uniform inputs from the first 40 candidates, each replaced with probability ½.

    Not leaky: the replacement is a uniform draw from the same 40, independent of the input (the best any
    attacker can do on a replaced position is 1/39: the input is uniform over the 39 others). Leaky: the
    replacement is input + 40, which reveals the input.
    """
    rng = np.random.default_rng(seed)
    k = 40
    x = rng.integers(0, k, size=(n_rows, 8))
    swap = rng.random((n_rows, 8)) < 0.5
    y = np.where(swap, x + k if leak else rng.integers(0, k, size=(n_rows, 8)), x)
    ids = [np.concatenate([[cls], cands[r], [sep]]).astype(np.int64) for r in y]
    rows = RowLayout(ids, [np.arange(1, 9)] * n_rows, np.arange(8 * n_rows), np.full((8 * n_rows, 2), -1))
    c = ReleasedCorpus(x.ravel(), y.ravel(), np.full(n_rows, 8), [], rows)
    return c, np.asarray(swap.ravel() & (x.ravel() != y.ravel()))


@pytest.mark.parametrize("leak", [False, True])
def test_inversion_is_at_chance_when_replacements_ignore_the_input(tiny_bert: str, leak: bool) -> None:
    """Replaced positions whose release is independent of the input: no better than chance (1/39) within the
    interval. The leaky variant (the release determines the input) is recovered far above it, so the check can fail.
    """
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_bert)
    cand_ids = torch.arange(5, 85, dtype=torch.int64)  # a synthetic space: 80 candidates
    train, _ = _world(cand_ids.numpy(), 800, 0, leak, tok.cls_token_id, tok.sep_token_id)
    test, replaced = _world(cand_ids.numpy(), 600, 1, leak, tok.cls_token_id, tok.sep_token_id)
    inv = InversionAttack(
        load_encoder(tiny_bert),
        cand_ids,
        pad_id=tok.pad_token_id,
        budget=InversionBudget(rows=800, epochs=5, lr=1e-3, head_lr=1e-2, batch_rows=64),
        seed=3,
    )
    inv.fit([(train, 50.0)])
    pred = inv.predict(test, 50.0)
    hits = pred[replaced, 0] == test.inputs[replaced]
    rate, lo, hi = row_bootstrap(hits, np.bincount(test.row_of[replaced], minlength=test.n_rows), 1000, 5)
    if leak:
        assert lo > 0.5, (rate, lo, hi)
    else:
        assert lo <= 1 / 39, (rate, lo, hi)


@pytest.fixture(scope="module")
def madlib_record(tiny_bert: str) -> dict:
    config = PrivatizerConfig(mechanism="madlib", epsilon=200.0, model=tiny_bert)
    settings = AttackSettings(**FAST, inversion_rows=300, inversion_epochs=2, inversion_lr=1e-3)
    private = corpus(150, seed=1) + corpus(600, seed=2)[:5]  # five rows the attacker also holds
    spans = [(r, 0, len(t)) for r, t in enumerate(private)]  # every row whole, as one span
    rec, released = run_attack(config, private, corpus(600, seed=2), seed=2**40 + 123, settings=settings, spans=spans)
    rec["_released"] = released
    return rec


def test_record_groups_and_overlap(madlib_record: dict) -> None:
    rec = madlib_record
    assert rec["n_private_rows_in_public"] == 5 and rec["n_private_rows"] == 150
    assert set(rec["groups"]) == {"identity", "prior", "bayes", "contextual", "inversion"}
    ident = rec["groups"]["identity"]
    assert ident["replaced"]["top1"]["value"] == 0.0 and ident["kept"]["top1"]["value"] == 1.0
    n = {g: e["top1"]["n"] for g, e in ident.items()}
    assert n["replaced"] + n["kept"] == n["all"] == rec["n_private_tokens"]
    assert n["replaced_content"] + n["replaced_function"] == n["replaced"]
    for per in rec["groups"].values():
        for e in per.values():
            lo, hi = e["top1"]["ci95"]
            assert lo <= e["top1"]["value"] <= hi
    info = rec["inversion_model"]
    assert info["steps"] > 0 and len(info["loss_curve"]) >= 1 and rec["heldout_top1"]["inversion"]


def test_record_scores_given_spans(madlib_record: dict) -> None:
    """Whole rows as spans: the identity attack recovers exactly the rows with no replaced candidate token."""
    released, spans = madlib_record["_released"], madlib_record["spans"]
    assert spans["n_given"] == 155 and spans["n_in_public_rows"] == 5
    changed = np.bincount(released.row_of, weights=released.inputs != released.released, minlength=released.n_rows)
    scored = released.row_sizes > 0
    ident = spans["attacks"]["identity"]["top1"]
    assert ident["n"] == scored.sum() and ident["value"] == pytest.approx(np.mean(changed[scored] == 0))
    assert spans["attacks"]["inversion"]["top5"]["value"] >= spans["attacks"]["inversion"]["top1"]["value"]


def test_headline_is_never_below_identity(madlib_record: dict) -> None:
    """The headline attack of every group (chosen on held-out public rows) reaches the identity attack's
    recovery within its interval; the prior baseline as a headline would not (the check can fail)."""
    groups, head = madlib_record["groups"], madlib_record["headline"]
    for g, h in head.items():
        assert groups[h["attack"]][g]["top1"]["ci95"][1] >= groups["identity"][g]["top1"]["value"], g
    assert madlib_record["recovery_top1"] == groups[head["all"]["attack"]]["all"]["top1"]["value"]
    assert groups["prior"]["all"]["top1"]["ci95"][1] < groups["identity"]["all"]["top1"]["value"]


def test_recovery_table_cells(madlib_record: dict) -> None:
    """Each attack's cell is its top-1 on the replaced tokens then on all tokens, as in the record; the headline
    and the inversion model's final loss follow."""
    from hf_textdp.evaluation.attacks.summary import final_loss, recovery_table

    rec = {k: v for k, v in madlib_record.items() if k != "_released"}
    row = recovery_table([rec]).splitlines()[2].split(" | ")
    inv = rec["groups"]["inversion"]
    lo, hi = inv["replaced"]["top1"]["ci95"]
    assert row[7].startswith(f"{100 * inv['replaced']['top1']['value']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]<br>")
    assert f"<br>{100 * inv['all']['top1']['value']:.1f} [{100 * inv['all']['top1']['ci95'][0]:.1f}, " in row[7]
    assert row[8] == f"{rec['headline']['replaced']['attack']} / {rec['headline']['all']['attack']}"
    assert row[9] == f"{final_loss(rec['inversion_model'])[0]:.3f} |"
    info = {"budget": {"check_every": 100}, "final_loss": 0.4, "loss_curve": [{"step": 100, "loss": 0.9}]}
    assert final_loss(info) == (0.9, 100)
    info["loss_curve"] += [{"step": 200, "loss": 0.55}, {"step": 204, "loss": 0.4}]  # a 4-step tail
    assert final_loss(info) == (0.55, 100)
    info["loss_curve"][-1]["step"] = 300  # a full last block
    assert final_loss(info) == (0.4, 100)
    assert recovery_table([{k: v for k, v in rec.items() if k != "groups"}]) == ""


def test_inversion_model_id_keeps_families_apart() -> None:
    """Records of one pooled model share an id; two families whose models trained alike (same curve, wall times
    included) do not, so the summaries describe and draw each family's model."""
    from hf_textdp.evaluation.attacks.records import inversion_model_id

    curve = [{"step": 100, "loss": 0.9, "s": 50.0}]
    model = {"loss_curve": curve, "pool": [150.0, 200.0]}
    laplace = [
        {"label": "laplace", "mechanism": "laplace", "epsilon": e, "inversion_model": model} for e in (150.0, 200.0)
    ]
    twin = dict(laplace[0], label="truncated_laplace", mechanism="truncated_laplace")
    assert inversion_model_id(laplace[0]) == inversion_model_id(laplace[1]) is not None
    assert inversion_model_id(twin) != inversion_model_id(laplace[0])
    assert inversion_model_id({"label": "x", "mechanism": "x", "epsilon": 1.0}) is None


def test_inversion_pool_reuses_one_model(tiny_bert: str) -> None:
    settings = AttackSettings(
        **FAST, contextual=False, inversion_rows=100, inversion_epochs=1, inversion_pool=(100.0, 200.0)
    )
    said: list[str] = []
    recs = []
    for eps in (200.0, 100.0):
        config = PrivatizerConfig(mechanism="madlib", epsilon=eps, model=tiny_bert)
        rec, _ = run_attack(config, corpus(40, seed=1), corpus(400, seed=2), settings=settings, progress=said.append)
        recs.append(rec)
    assert any("is reused" in m for m in said)
    assert recs[0]["inversion_model"] == recs[1]["inversion_model"] and recs[0]["inversion_model"]["pool"] == [
        100.0,
        200.0,
    ]
    bad = PrivatizerConfig(mechanism="madlib", epsilon=50.0, model=tiny_bert)
    with pytest.raises(InvalidParameterError, match="inversion_pool"):
        run_attack(bad, corpus(10, seed=1), corpus(100, seed=2), settings=settings)


def test_pooled_run_releases_only_the_rows_bayes_reads(tiny_bert: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pooled inversion model releases its own rows per ε, so the single-ε training split releases only the
    ``train_rows`` that Bayes and the contextual model read; rows are keyed by index, so those rows are the first
    rows of the longer release (a release keyed by batch position would fail the equality below)."""
    from hf_textdp import Privatizer
    from hf_textdp.evaluation.attacks import run as run_module
    from hf_textdp.evaluation.attacks.run import first_rows

    config = PrivatizerConfig(mechanism="madlib", epsilon=100.0, model=tiny_bert)
    texts = corpus(60, seed=3)
    priv = Privatizer(config, seed=2**40 + 9, split="s", allow_weak_seed=True)
    whole = first_rows(run_module.release_corpus(priv, texts, batch_rows=7, keep_rows=True), 25)
    part = run_module.release_corpus(priv, texts[:25], batch_rows=1000, keep_rows=True)
    assert np.array_equal(whole.inputs, part.inputs) and np.array_equal(whole.released, part.released)
    assert np.array_equal(whole.row_sizes, part.row_sizes)

    sizes: list[int] = []
    real = run_module.release_corpus

    def spy(p: Privatizer, rows: list[str], **kw: object) -> ReleasedCorpus:
        sizes.append(len(rows))
        return real(p, rows, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(run_module, "release_corpus", spy)
    settings = AttackSettings(
        **{**FAST, "train_rows": 50}, contextual=False, inversion_rows=120, inversion_epochs=1, inversion_pool=(100.0,)
    )
    run_attack(config, corpus(20, seed=1), corpus(400, seed=2), settings=settings)
    assert sizes[:3] == [20, 200, 50]  # private, statistics, training split: train_rows of the 100 training rows
    sizes.clear()
    run_attack(config, corpus(20, seed=1), corpus(400, seed=2), settings=replace(settings, inversion_pool=()))
    assert sizes[:3] == [20, 200, 100]  # a single-ε model reads every training row


def test_inversion_model_is_kept_in_the_cache(tiny_bert: str, private_textdp_cache: Path) -> None:
    """A second run with the same public rows and budget reads the trained model back (same predictions, no
    training); another budget, or the cache switched off, trains anew."""
    settings = AttackSettings(**FAST, contextual=False, inversion_rows=100, inversion_epochs=1)
    config = PrivatizerConfig(mechanism="madlib", epsilon=150.0, model=tiny_bert)
    runs = []
    for s in (settings, settings, replace(settings, inversion_lr=3e-4), replace(settings, inversion_cache=False)):
        said: list[str] = []
        rec, _ = run_attack(
            config, corpus(40, seed=1), corpus(400, seed=2), seed=2**40 + 5, settings=s, progress=said.append
        )
        runs.append((rec, any("read the model trained earlier" in m for m in said)))
    assert [read for _, read in runs] == [False, True, False, False]
    saved = list((private_textdp_cache / "attacks" / "inversion").glob("*.pt"))
    assert len(saved) == 2  # the two budgets; the run with the cache off wrote nothing
    first, again = runs[0][0], runs[1][0]
    assert first["groups"]["inversion"] == again["groups"]["inversion"]
    assert first["inversion_model"]["step_losses"] == again["inversion_model"]["step_losses"]
    assert runs[2][0]["inversion_model"]["budget"]["lr"] == 3e-4


def test_inversion_precision_follows_the_cpu(tiny_bert: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 autocast only where the CPU has native bf16: HF_TEXTDP_CPU_ISA=avx2 hides it, so fp32 runs."""
    from hf_textdp.cpu.features import native_bf16

    cands = torch.arange(5, 45, dtype=torch.int64)
    inv = InversionAttack(load_encoder(tiny_bert), cands, budget=InversionBudget(bf16=True))
    assert inv.precision() == ("bf16" if native_bf16() else "fp32")
    monkeypatch.setenv("HF_TEXTDP_CPU_ISA", "avx2")
    assert inv.precision() == "fp32"
    monkeypatch.delenv("HF_TEXTDP_CPU_ISA")
    assert InversionAttack(load_encoder(tiny_bert), cands, budget=InversionBudget()).precision() == "fp32"


def test_recipe_family_pool(tmp_path: Path) -> None:
    """``inversion_pool: family``: each privatizer entry pools over its own ε list; another string is refused."""
    from hf_textdp.evaluation.attacks.recipe import load_attack_recipe

    body = (
        "name: t\nprivate: mr\npublic: [trec]\nattack: {inversion: true, inversion_pool: %s}\n"
        "privatizers:\n  - {mechanism: madlib, epsilons: [40, 80]}\n  - {mechanism: tem, epsilons: [10, 15, 20]}\n"
    )
    path = tmp_path / "r.yaml"
    path.write_text(body % "family")

    def pools() -> list[tuple[float, ...]]:
        parsed = load_attack_recipe(path)
        return [parsed.settings_for(s.name, s.epsilons).inversion_pool for s in parsed.recipe.privatizers]

    assert pools() == [(40.0, 80.0), (10.0, 15.0, 20.0)]
    path.write_text(body % "[40, 80]")
    assert pools() == [(40.0, 80.0), (40.0, 80.0)]
    path.write_text(body % "{tem: [5, 10, 15, 20]}")  # madlib: no pool
    assert pools() == [(), (5.0, 10.0, 15.0, 20.0)]
    path.write_text(body % "{temm: [5, 10]}")
    with pytest.raises(InvalidParameterError, match=r"inversion_pool names \['temm'\]"):
        load_attack_recipe(path)
    path.write_text(body % "families")
    with pytest.raises(InvalidParameterError, match="inversion_pool must be a list of ε, 'family' or a mapping"):
        load_attack_recipe(path)
    for bad, match in [
        ("private_split: 1.5", "private_split = 1.5: Input should be less than 1"),
        ("private_split: half", "private_split = 'half': Input should be a valid number"),
        ("public_ngram: 0", "public_ngram = 0: Input should be greater than or equal to 1"),
    ]:  # refused on loading, before any task is read
        path.write_text(body % "family" + bad + "\n")
        with pytest.raises(InvalidParameterError, match=match):
            load_attack_recipe(path)


def test_cli_attack_inversion(tmp_path: Path, tiny_bert: str, capsys: pytest.CaptureFixture[str]) -> None:
    private = write_jsonl(tmp_path / "private.jsonl", corpus(40, seed=5))
    public = write_jsonl(tmp_path / "public.jsonl", corpus(200, seed=6))
    out = tmp_path / "attack.json"
    args = ["attack", "--private", str(private), "--public", str(public), "--mechanism", "madlib"]
    code = main(
        args + ["--epsilon", "200", "--model", tiny_bert, "--no-contextual", "--inversion", "--output", str(out)]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "inversion" in printed and "headline" in printed
    rec = json.loads(out.read_text())
    assert set(rec["attacks"]) == {"identity", "prior", "bayes", "inversion"}
