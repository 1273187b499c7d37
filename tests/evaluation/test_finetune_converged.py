"""Converged whole-model fine-tuning (issue 43): the plateau rule, training seeds on private units, and the
loss-threshold membership attack with its bootstrap intervals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hf_textdp.evaluation.convergence import LossLog, plateaued
from hf_textdp.evaluation.finetune_full import parse_full, run_full_finetune
from hf_textdp.evaluation.finetune_report import folder_tables, full_table, per_model_table
from hf_textdp.evaluation.membership import loss_threshold_attack
from hf_textdp.evaluation.tasks import SENTEVAL_DIR_ENV


def test_plateau_rule_stops_when_it_should():
    assert not plateaued([1.0], 0.02)  # one epoch: nothing to compare
    assert not plateaued([1.0, 0.9], 0.02)  # 10 % better: go on
    assert plateaued([1.0, 0.99], 0.02)  # 1 % better: stop
    assert plateaued([1.0, 1.05], 0.02)  # worse: stop
    assert not plateaued([1.0, 0.99], 0.0)  # the rule off: the cap decides
    log = LossLog()
    log.steps += [3.0, 1.0]
    assert log.close_epoch() == 2.0
    log.steps += [1.0, 1.0, 1.0]
    assert log.close_epoch() == 1.0 and log.epochs == [2.0, 1.0] and log.curve(2) == [2.0, 1.0, 1.0]


def test_membership_attack_separable_and_identical():
    rng = np.random.default_rng(0)
    members, others = rng.uniform(0.0, 0.5, 300), rng.uniform(1.0, 2.0, 300)
    out = loss_threshold_attack(members, others, resamples=200, seed=1)
    assert out["auc"] == 1.0 and out["tpr_at_fpr"] == 1.0 and out["auc_ci"] == pytest.approx([1.0, 1.0])
    a, b = rng.exponential(1.0, 1000), rng.exponential(1.0, 1000)
    out = loss_threshold_attack(a, b, resamples=300, seed=1)
    assert abs(out["auc"] - 0.5) < 0.04 and out["auc_ci"][0] < 0.5 < out["auc_ci"][1]
    assert out["tpr_at_fpr"] < 0.05
    for key, ci in (("auc", "auc_ci"), ("tpr_at_fpr", "tpr_ci")):
        assert out[ci][0] <= out[key] <= out[ci][1]
    # swapped groups: members with the higher losses give an AUC near 0
    assert loss_threshold_attack(others, members, resamples=0)["auc"] == 0.0
    with pytest.raises(ValueError, match="finite"):
        loss_threshold_attack([], [1.0])


def _raw(model: str) -> dict:
    return {
        "name": "ft_conv",
        "finetune": {
            "mode": "full",
            "model": model,
            "tasks": [{"name": "trec", "train_rows": 48, "test_rows": 24}],
            "training": {"epochs": 6, "plateau_tol": 0.5, "batch_size": 16, "max_length": 24, "learning_rate": 1e-3},
            "train_seeds": [0, 1],
            "private_train_seeds": [0, 1],
            "noise_seeds": [1111],
            "membership": {"rows": 20, "seed": 3, "resamples": 50},
        },
        "privatizers": [{"mechanism": "madlib", "epsilons": [50.0, 5.0]}],
    }


def test_parse_private_train_seeds_order_and_names(tiny_bert):
    rec = parse_full(_raw(tiny_bert))
    kinds = [(u.label, u.epsilon, u.noise_seed, u.train_seed) for u in rec.units]
    # every clean model first, then one cell after the other (in recipe order), all its seeds together
    assert kinds == [
        ("clean", None, None, 0),
        ("clean", None, None, 1),
        ("madlib", 50.0, 1111, 0),
        ("madlib", 50.0, 1111, 1),
        ("madlib", 5.0, 1111, 0),
        ("madlib", 5.0, 1111, 1),
    ]
    assert rec.units[2].file("train_only") == "trec__madlib__eps50__once__seed1111__train0__train_only.json"
    old = _raw(tiny_bert)
    del old["finetune"]["private_train_seeds"]
    units = parse_full(old).units
    # without the key: the old grid and file names (first training seed only, none in the name)
    assert [u.train_seed for u in units if u.epsilon is not None] == [0, 0]
    assert units[1].file("train_only") == "trec__madlib__eps50__once__seed1111__train_only.json"
    bad = _raw(tiny_bert)
    bad["finetune"]["membership"]["row"] = 3
    with pytest.raises(ValueError, match="membership"):
        parse_full(bad)


def test_converged_tiny_end_to_end(tiny_bert, shared_dir, tmp_path, monkeypatch):
    monkeypatch.setenv(SENTEVAL_DIR_ENV, str(shared_dir / "data" / "senteval"))
    raw = _raw(tiny_bert)
    only = lambda u: u.epsilon in (None, 50.0)  # noqa: E731
    written = run_full_finetune(raw, tmp_path / "ft_conv", only=only)
    recs = {p.name: json.loads(p.read_text()) for p in written}
    assert len(recs) == 2 + 2 * 2
    a = recs["trec__madlib__eps50__once__seed1111__train0__train_only.json"]
    b = recs["trec__madlib__eps50__once__seed1111__train1__train_only.json"]
    # the two training seeds give two models: distinct records, same noise
    assert (a["train_seed"], b["train_seed"]) == (0, 1) and a["noise_seed"] == b["noise_seed"] == 1111
    assert a["loss_curve"]["means"] != b["loss_curve"]["means"]
    for r in recs.values():
        # lr 1e-3 on 48 rows plateaus long before the cap of 6 epochs under a 50 % rule
        assert 2 <= r["epochs_run"] < 6 and r["stopped_on_plateau"] and len(r["epoch_losses"]) == r["epochs_run"]
        assert r["final_training_loss"] == r["epoch_losses"][-1]
        assert plateaued(r["epoch_losses"], 0.5) and not plateaued(r["epoch_losses"][:-1], 0.5)
        mia = r["membership"]["original"]
        assert mia["members"] == mia["nonmembers"] == 20
        assert mia["auc_ci"][0] <= mia["auc"] <= mia["auc_ci"][1] and 0.0 <= mia["tpr_at_fpr"] <= 1.0
        assert ("privatized" in r["membership"]) == (r["epsilon"] is not None)
    table = "\n".join(full_table(list(recs.values())))
    assert "MIA AUC" in table and "| trec | madlib | 50 | once | 2 |" in table and "ln 6 = 1.79" in table
    assert (tmp_path / "ft_conv" / "loss_curves.png").is_file()
    # the folder's README tables: the cell table, then one row per model with that model's own figures
    cells, per = folder_tables(tmp_path / "ft_conv").split("### Per model")
    assert "| trec | madlib | 50 | once | 2 |" in cells
    rows = [line for line in per.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 4  # 2 clean models, 2 madlib models (their two settings are one model)
    t_and_t = recs["trec__madlib__eps50__once__seed1111__train0__train_and_test.json"]
    auc = a["membership"]["original"]["auc"]
    assert any(
        row.startswith("| madlib | 50 | 1111 | 0 | ")
        and f"| {a['accuracy']:.1f} | {t_and_t['accuracy']:.1f} | " in row
        and f"| {auc:.3f} [" in row
        for row in rows
    )


def _model(task: str, label: str, setting: str, acc: float, train: int) -> dict:
    """A converged-fine-tune record with just the fields the tables read."""
    mia = {"auc": 0.6, "auc_ci": [0.55, 0.65], "tpr_at_fpr": 0.02, "tpr_ci": [0.0, 0.05]}
    return {
        "task": task, "label": label, "epsilon": None if label == "clean" else 80.0,
        "path": None if label == "clean" else "once", "noise_seed": None if label == "clean" else 1111,
        "train_seed": train, "setting": setting, "accuracy": acc, "epoch_losses": [0.7, 0.5],
        "membership": {"original": mia}, "wall_s": 10.0,
    }  # fmt: skip


def test_per_model_table_orders_models_and_names_tasks(tmp_path):
    recs = [
        _model("trec", "madlib", "train_and_test", 70.0, 1),
        _model("trec", "madlib", "train_only", 90.0, 1),
        _model("mr", "clean", "clean", 80.0, 0),
    ]
    rows = per_model_table(recs)
    # two tasks: a task column; clean first within mr, then trec's one madlib model with both accuracies
    assert rows[0].startswith("| task | mechanism |") and len(rows) == 4
    assert rows[2].startswith("| mr | clean | – | – | 0 | 80.0 | – | 0.700 → 0.500 | 0.600 [0.550, 0.650] | 2.0 [")
    assert rows[3].startswith("| trec | madlib | 80 | 1111 | 1 | 90.0 | 70.0 |")
    assert not per_model_table(recs[2:])[0].startswith("| task")
    with pytest.raises(FileNotFoundError, match="no converged fine-tune records"):
        folder_tables(tmp_path)
