"""Selective privatization end to end (issue 39, docs/mechanisms/selective.md §6): the sensitive classes' law at
sensitive.epsilon, the row columns, the report, the CLI, batch invariance, the remote mask."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_textdp import PrivatizerConfig
from hf_textdp.config import PrivatizerConfig as _Config
from hf_textdp.errors import ColumnNotFoundError, InvalidParameterError
from hf_textdp.mechanisms.tem import tem_gamma
from hf_textdp.privatizer import Privatizer
from hf_textdp.rng import streams_for_rows
from tests.mechanisms.test_madlib import ALPHA, T1D, chi2_pvalue
from tests.mechanisms.test_tem import exp_mech_law
from tests.utils import write_vectors


SEED = 2**40 + 3939
X = np.array([[0.0], [1.0], [3.0]])  # the 1-D vocabulary of testing.md's T1D known answers


@pytest.fixture
def t1d(tmp_path: Path) -> str:
    return str(write_vectors(tmp_path / "t1d.txt", ["x0", "x1", "x2"], X))


def _alternating(word: str, n_words: int, n_rows: int) -> tuple[list[str], list[list[list[int]]]]:
    """Rows of ``n_words`` copies of ``word``; the span column marks the even-numbered words."""
    text = " ".join([word] * n_words)
    w = len(word)
    spans = [[k * (w + 1), k * (w + 1) + w] for k in range(0, n_words, 2)]
    return [text] * n_rows, [spans] * n_rows


def _class_counts(priv: Privatizer, word: str) -> tuple[np.ndarray, np.ndarray]:
    """Output counts of x0..x2 at the sensitive (even) and the other (odd) positions: 100 rows × 200 words."""
    texts, spans = _alternating(word, 200, 100)
    outs = priv.privatize(texts, spans=spans)
    sens, other = Counter(), Counter()
    for o in outs:
        words = o.split()
        sens.update(words[0::2])
        other.update(words[1::2])
    return np.array([sens[f"x{j}"] for j in range(3)]), np.array([other[f"x{j}"] for j in range(3)])


def _mutant(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutation: sensitive positions released at config.epsilon instead of sensitive.epsilon."""
    monkeypatch.setattr(_Config, "sensitive_config", lambda self: dataclasses.replace(self, sensitive=None))


@pytest.mark.parametrize("mutated", [False, True])
def test_madlib_sensitive_positions_follow_the_law_at_sensitive_epsilon(t1d, monkeypatch, mutated):
    """madlib on the 1-D vocabulary (0, 1, 3): sensitive positions (ε_s = 1) against T1D[1], the others (ε = 2)
    against T1D[2], χ² on 10,000 outputs per input and class (seed 2**40 + 3939), α/6 per test; the mutant that
    releases sensitive positions at config.epsilon is rejected at every input (α)."""
    if mutated:
        _mutant(monkeypatch)
    cfg = PrivatizerConfig(epsilon=2.0, model=t1d, sensitive={"epsilon": 1.0, "column": "spans", "detectors": []})
    priv = Privatizer(cfg, seed=SEED)
    for i in range(3):
        sens, other = _class_counts(priv, f"x{i}")
        assert sens.sum() == other.sum() == 10_000
        assert chi2_pvalue(other, np.array(T1D[2.0][i])) > ALPHA / 6
        p_sens = chi2_pvalue(sens, np.array(T1D[1.0][i]))
        assert (p_sens < ALPHA) if mutated else (p_sens > ALPHA / 6)


@pytest.mark.parametrize("mutated", [False, True])
def test_tem_sensitive_positions_follow_the_law_at_sensitive_epsilon(t1d, monkeypatch, mutated):
    """tem (β = 0.01, so γ > diam = 3 at both ε and the law is softmax(−ε·d/2)): as the madlib test."""
    if mutated:
        _mutant(monkeypatch)
    cfg = PrivatizerConfig(
        epsilon=2.0,
        mechanism="tem",
        model=t1d,
        options={"beta": 0.01},
        sensitive={"epsilon": 0.5, "column": "spans", "detectors": []},
    )
    priv = Privatizer(cfg, seed=SEED + 1)
    law = {e: exp_mech_law(X, e, tem_gamma(epsilon=e, beta=0.01, V=3)) for e in (0.5, 2.0)}
    assert all(tem_gamma(epsilon=e, beta=0.01, V=3) > 3 for e in law)
    for i in range(3):
        sens, other = _class_counts(priv, f"x{i}")
        assert chi2_pvalue(other, law[2.0][i]) > ALPHA / 6
        p_sens = chi2_pvalue(sens, law[0.5][i])
        assert (p_sens < ALPHA) if mutated else (p_sens > ALPHA / 6)


def test_row_columns_sum_the_two_classes(t1d):
    """dp_epsilon = n_s·ε_s·diam + n_o·ε·diam (diam 3), not the larger class's bound times dp_tokens; with
    others='keep' dp_epsilon is null, dp_tokens counts the sensitive positions and the others are unchanged."""
    texts = ["x0 x1 x2 x0 x1", "x2 x2", "x1"]
    spans = [[[0, 2], [6, 8]], [], [[0, 2]]]
    priv = Privatizer(
        PrivatizerConfig(epsilon=2.0, model=t1d, sensitive={"epsilon": 0.5, "column": "spans", "detectors": []}), SEED
    )
    out = priv({"text": texts, "spans": spans}, [0, 1, 2])
    assert out["dp_sensitive_tokens"] == [2, 0, 1]
    assert out["dp_tokens"] == [5, 2, 1]
    assert out["dp_epsilon"] == pytest.approx([2 * 1.5 + 3 * 6.0, 2 * 6.0, 1.5])
    rep = priv.privacy_report()
    assert rep["sensitive"]["epsilon_token"] == pytest.approx(1.5) and rep["epsilon_token"] == pytest.approx(6.0)
    assert rep["totals"]["sensitive_tokens"] == 3 and rep["totals"]["max_row_dp_epsilon"] == pytest.approx(21.0)
    assert "same class (sensitive or other) at every position" in rep["row_guarantee"]

    keep = PrivatizerConfig(
        epsilon=2.0, model=t1d, sensitive={"epsilon": 0.5, "column": "spans", "detectors": [], "others": "keep"}
    )
    priv_k = Privatizer(keep, SEED)
    out_k = priv_k({"text": texts, "spans": spans}, [0, 1, 2])
    assert out_k["dp_tokens"] == [2, 0, 1] and out_k["dp_epsilon"] == [None, None, None]
    for src, o, row in zip(texts, out_k["text"], spans, strict=True):
        marked = {a for a, _ in row}
        starts = [m.start() for m in re.finditer(r"\S+", src)]
        for a, w_in, w_out in zip(starts, src.split(), o.split(), strict=True):
            if a not in marked:
                assert w_in == w_out
    # the sensitive draws do not depend on what the others get: keep and privatize agree there
    for o_p, o_k, row, src in zip(out["text"], out_k["text"], spans, texts, strict=True):
        starts = [m.start() for m in re.finditer(r"\S+", src)]
        marked = [k for k, a in enumerate(starts) if a in {s for s, _ in row}]
        assert [o_p.split()[k] for k in marked] == [o_k.split()[k] for k in marked]
    assert priv_k.privacy_report()["totals"]["kept_other_tokens"] == 5


def test_sensitive_word_missing_from_the_vector_file_is_never_verbatim(t1d):
    """passthrough='keep' releases unknown words verbatim, except a sensitive one, released as <unk>."""
    cfg = PrivatizerConfig(
        epsilon=2.0, model=t1d, passthrough="keep", sensitive={"epsilon": 1.0, "detectors": ["email"]}
    )
    out = Privatizer(cfg, SEED).privatize(["x0 zzz bob@example.com x1"])[0]
    words = out.split()
    assert words[1] == "zzz" and words[2] == "<unk>" and "bob@example.com" not in out


def test_spans_are_required_and_named(t1d):
    cfg = PrivatizerConfig(epsilon=2.0, model=t1d, sensitive={"epsilon": 1.0, "column": "spans", "detectors": []})
    priv = Privatizer(cfg, SEED)
    with pytest.raises(InvalidParameterError, match="spans"):
        priv.privatize(["x0 x1"])
    with pytest.raises(ColumnNotFoundError, match="'spans'"):
        priv({"text": ["x0 x1"]}, [0])


def test_remote_release_carries_the_mask(t1d):
    """The release service's handler reads a sensitive position p sent as -1 - p: the same draws as the local
    release with the mask."""
    cfg = PrivatizerConfig(epsilon=2.0, model=t1d, sensitive={"epsilon": 0.5, "column": "spans", "detectors": []})
    engine = Privatizer(cfg, SEED).engine
    engine.load()
    pos = torch.tensor([0, 1, 2, 0, 1, 2] * 50)
    sens = torch.tensor([True, False, True, False, True, False] * 50)
    keys = engine.row_keys([0, 1])
    local = engine.release_streams(pos, streams_for_rows(keys, [150, 150], engine.space.device), sens)
    sent = torch.where(sens, -1 - pos, pos).numpy()
    remote = engine.release_keyed(np.asarray(keys, dtype=np.int64), np.array([150, 150]), sent)
    assert remote.tolist() == local.tolist()
    plain = engine.release_streams(pos, streams_for_rows(keys, [150, 150], engine.space.device))
    assert plain.tolist() != local.tolist()  # the mask changes the law: a dropped mask would be seen


def test_private_tokenizer_refuses_sensitive(t1d):
    from hf_textdp.integrations.tokenizer import PrivateEncoder

    cfg = PrivatizerConfig(epsilon=2.0, model=t1d, sensitive={"epsilon": 1.0, "detectors": ["email"]})
    with pytest.raises(InvalidParameterError, match="selective privatization"):
        PrivateEncoder(None, cfg, SEED)


def test_config_round_trip_and_bad_values(tmp_path, t1d):
    cfg = PrivatizerConfig(epsilon=2.0, model=t1d, sensitive={"epsilon": 1, "detectors": ["card"]})
    assert cfg.to_dict()["sensitive"] == {"epsilon": 1.0, "detectors": ["card"], "others": "privatize"}
    cfg.save_pretrained(tmp_path)
    assert PrivatizerConfig.from_pretrained(tmp_path) == cfg
    with pytest.raises(InvalidParameterError, match='sensitive\\["epsilon"\\]'):
        PrivatizerConfig(epsilon=2.0, sensitive={"detectors": ["card"]})
    assert cfg.sensitive_config().epsilon == 1.0 and cfg.sensitive_config().sensitive is None
    assert not math.isclose(cfg.epsilon, cfg.sensitive_config().epsilon)


def test_tiny_bert_batch_invariance_and_classes(tiny_bert):
    """Class-preserving replacement (two piece classes) with sensitive classes on top: a seeded row's output and
    columns do not depend on the batch size (1, 3, all), under 'privatize' and 'keep'."""
    texts = [f"the cat 4111 1111 1111 1111 sat {k} times, mail a{k}@example.com" for k in range(7)]
    for others in ("privatize", "keep"):
        sens = {"epsilon": 1.0, "detectors": ["email", "card", "number"], "others": others}
        cfg = PrivatizerConfig(epsilon=5.0, model=tiny_bert, sensitive=sens)
        runs = []
        for bs in (1, 3, 7):
            priv = Privatizer(cfg, SEED)
            out: dict[str, list] = {}
            for a in range(0, 7, bs):
                part = priv({"text": texts[a : a + bs]}, list(range(a, min(a + bs, 7))))
                for k, v in part.items():
                    out.setdefault(k, []).extend(v)
            runs.append(out)
        assert runs[0] == runs[1] == runs[2]
        assert all(n > 0 for n in runs[0]["dp_sensitive_tokens"])
        assert len(Privatizer(cfg, SEED).engine.classes) == 2


def test_report_card_and_cli_report_show_both_classes(tmp_path, t1d, capsys):
    from hf_textdp import privatize_dataset
    from hf_textdp.cli import main
    from hf_textdp.integrations.cards import render_card

    src = tmp_path / "in.jsonl"
    rows = [{"text": "x0 x1 x2 mail bob@example.com", "spans": [[0, 2]]}, {"text": "x2 x2", "spans": []}]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    sens = {"epsilon": 0.5, "detectors": ["email"], "column": "spans"}
    privatize_dataset(str(src), PrivatizerConfig(epsilon=2.0, model=t1d, sensitive=sens), seed=SEED, output_dir=out)
    report = json.loads((tmp_path / "out.jsonl.privacy_report.json").read_text(encoding="utf-8"))
    assert report["totals"]["sensitive_tokens"] == 1  # x0 (the email is a passthrough word of this file)
    assert [(d["name"], d["reads"]) for d in report["sensitive"]["detectors"]] == [("email", "match")]
    assert report["sensitive"]["others_epsilon"] == 2.0
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "sensitive:   1 tokens at ε_s 0.5 per token, ε_tok 1.5; others: 4 tokens at ε 2, ε_tok 6" in text
    assert "detectors:   email (match), span column 'spans'; kinds none of them finds: URL, phone number" in text
    assert "Which positions are sensitive is visible" in text
    card = str(render_card(out))
    assert "sensitive positions (selective) | 1 tokens at ε = 0.5, ε_token 1.5" in card
    assert "other positions | 4 tokens at ε = 2, ε_token 6" in card
    assert "| ε per token | sensitive 0.5; others 2 |" in card
    assert "sensitive positions at ε_s = 0.5 per token, other positions at ε = 2 per token" in card
    assert "| detectors (reads: kinds found) | email (match: email address) |" in card
    assert "Which positions are sensitive is visible" in card
    yaml_block = card.split("---")[1]
    for line in ("epsilon: 0.5", "others: privatize", "others_epsilon: 2.0", "- email", "span_column: spans"):
        assert line in yaml_block, line
    # the span column (each identifier's character positions in the original) is not in the output
    assert all("spans" not in json.loads(line) for line in out.read_text(encoding="utf-8").splitlines())


def test_keep_mode_never_names_the_config_epsilon_and_counts_kept_tokens_unprotected(tmp_path, t1d, capsys):
    """Issue 54 item 5: with others='keep' no token is privatized at --epsilon; the summary line, report and card
    give the sensitive class's ε_s, call the others unprotected and count them so; --keep-spans keeps the spans."""
    from hf_textdp.cli import main
    from hf_textdp.integrations.cards import render_card

    src = tmp_path / "in.jsonl"
    rows = [{"text": "x0 x1 x2 x1", "spans": [[0, 2]]}, {"text": "x2 x2", "spans": []}]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    seed = tmp_path / "seed"
    seed.write_text(str(SEED), encoding="ascii")
    base = ["privatize", str(src), "", "--model", t1d, "--epsilon", "90", "--seed-file", str(seed)]
    base += ["--sensitive-epsilon", "1", "--sensitive-detectors", "none", "--sensitive-column", "spans"]
    out = tmp_path / "out.jsonl"
    base[2] = str(out)
    assert main([*base, "--others", "keep"]) == 0
    line = capsys.readouterr().out
    assert "epsilon=90" not in line and "90" not in line.split("report:")[0]
    assert "sensitive: 1 tokens at epsilon_s=1 per token; others: 5 tokens released unchanged, no protection" in line
    assert "detectors span column 'spans'; none finds: email address" in line
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "guarantee:   sensitive positions only (see sensitive); the other positions are released unchanged" in text
    assert "others: 5 tokens released unchanged, no protection" in text
    assert "tokens:      1 privatized, 5 unprotected (5 released unchanged by others='keep', 0 passed through)" in text
    assert "ε 90" not in text
    card = str(render_card(out))
    assert "| ε per token | sensitive 1; others released unchanged, no protection |" in card
    assert "ε = 90" not in card and "others: keep" in card.split("---")[1]
    assert all("spans" not in json.loads(r) for r in out.read_text(encoding="utf-8").splitlines())
    kept = tmp_path / "kept.jsonl"
    base[2] = str(kept)
    assert main([*base, "--keep-spans"]) == 0
    capsys.readouterr()
    assert [json.loads(r)["spans"] for r in kept.read_text(encoding="utf-8").splitlines()] == [[[0, 2]], []]


def test_saved_totals_of_keep_count_kept_and_passthrough_apart(tmp_path, t1d):
    """The totals a saved output's report recomputes from its columns (run/totals.py): with others='keep' the
    kept candidates are kept_other_tokens, not passthrough tokens."""
    from hf_textdp import privatize_dataset

    src = tmp_path / "in.jsonl"
    rows = [{"text": "x0 x1 x2 zzz", "spans": [[0, 2]]}, {"text": "x2 x2", "spans": [[3, 5]]}]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    sens = {"epsilon": 0.5, "column": "spans", "detectors": [], "others": "keep"}
    privatize_dataset(str(src), PrivatizerConfig(epsilon=2.0, model=t1d, sensitive=sens), seed=SEED, output_dir=out)
    totals = json.loads((tmp_path / "out.jsonl.privacy_report.json").read_text(encoding="utf-8"))["totals"]
    assert (totals["sensitive_tokens"], totals["kept_other_tokens"], totals["passthrough_tokens"]) == (2, 3, 1)
    assert totals["dp_tokens"] == 2 and totals["max_row_dp_epsilon"] is None


def test_a_spacy_pipeline_folder_is_part_of_the_fingerprint(tmp_path, t1d):
    """An edited spaCy pipeline folder named by a detector changes the pickled inputs (decision D4), so a cached
    map over the old pipeline's selection is not served."""
    folder = tmp_path / "pipeline"
    folder.mkdir()
    (folder / "config.cfg").write_text("[nlp]\n", encoding="utf-8")
    cfg = PrivatizerConfig(epsilon=2.0, model=t1d, sensitive={"epsilon": 1.0, "detectors": [f"spacy:{folder}"]})
    before = Privatizer(cfg, SEED)._inputs()
    assert str(folder.resolve()) in before
    (folder / "config.cfg").write_text("[nlp]\nlang = en\n", encoding="utf-8")
    assert Privatizer(cfg, SEED)._inputs() != before
