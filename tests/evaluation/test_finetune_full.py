"""Whole-model fine-tuning recipes (``finetune: {mode: full}``): one tiny run end to end, both paths."""

from __future__ import annotations

import json

import pytest

from hf_textdp.evaluation.finetune_full import parse_full, run_full_finetune
from hf_textdp.evaluation.finetune_report import full_table
from hf_textdp.evaluation.recipe import run_recipe_file
from hf_textdp.evaluation.summary import folder_markdown, summary_markdown
from hf_textdp.evaluation.tasks import SENTEVAL_DIR_ENV


def _raw(model: str) -> dict:
    return {
        "name": "ft_full",
        "finetune": {
            "mode": "full",
            "model": model,
            "tasks": [
                {"name": "trec", "train_rows": 48, "test_rows": 24},
                {"name": "mr", "train_rows": 40, "test_rows": 20},
            ],
            "training": {"epochs": 2, "batch_size": 16, "max_length": 24, "learning_rate": 1e-3},
            "train_seeds": [0],
            "noise_seeds": [1111],
        },
        "privatizers": [{"mechanism": "madlib", "epsilons": [5.0, 50.0], "on_the_fly": [50.0]}],
    }


def test_parse_full_units_and_errors(tiny_bert):
    rec = parse_full(_raw(tiny_bert))
    kinds = [(u.task, u.label, u.epsilon, u.path) for u in rec.units]
    assert kinds[:2] == [("trec", "clean", None, None), ("mr", "clean", None, None)]
    assert ("trec", "madlib", 50.0, "on_the_fly") in kinds and ("trec", "madlib", 5.0, "on_the_fly") not in kinds
    assert len(kinds) == 2 + 2 * 3
    bad = _raw(tiny_bert)
    bad["privatizers"][0]["on_the_fly"] = [7.0]
    with pytest.raises(ValueError, match="on_the_fly"):
        parse_full(bad)
    bad = _raw(tiny_bert)
    bad["finetune"]["training"]["epoch"] = 1
    with pytest.raises(ValueError, match="unknown keys"):
        parse_full(bad)


def test_full_finetune_tiny_end_to_end(tiny_bert, shared_dir, tmp_path, monkeypatch):
    monkeypatch.setenv(SENTEVAL_DIR_ENV, str(shared_dir / "data" / "senteval"))
    raw = _raw(tiny_bert)
    only = lambda u: u.task == "trec" and u.epsilon in (None, 50.0)  # noqa: E731
    written = run_full_finetune(raw, tmp_path / "ft_full", only=only)
    names = sorted(p.name for p in written)
    assert names == sorted(
        [
            "trec__clean__train0__clean.json",
            *[
                f"trec__madlib__eps50__{p}__seed1111__{s}.json"
                for p in ("once", "on_the_fly")
                for s in ("train_only", "train_and_test")
            ],
        ]
    )
    recs = {p.name: json.loads(p.read_text()) for p in written}
    for name, r in recs.items():
        assert 0.0 <= r["accuracy"] <= 100.0 and r["task"] == "trec" and r["protocol"] == "finetune_full"
        assert r["n_rows"] == {"train": 48, "test": 24} and r["budget"]["max_length"] == 24 and r["wall_s"] > 0
        if "clean" not in name:
            assert r["noise_seed"] == 1111 and r["epsilon"] == 50.0 and r["path"] in ("once", "on_the_fly")
            assert 0.0 <= r["replacement_rate"]["train"] <= 100.0 and 0.0 <= r["replacement_rate"]["test"] <= 100.0
    fly = recs["trec__madlib__eps50__on_the_fly__seed1111__train_only.json"]["training_privacy"]
    once = recs["trec__madlib__eps50__once__seed1111__train_only.json"]["training_privacy"]
    # two epochs of fresh noise: each example (cut to max_length) released twice, against one release of the
    # whole row for the once path
    assert fly["epochs"] == 2 and fly["releases"] == 2 * 48 and once["releases"] == 1
    assert fly["max_example_epsilon"] > 0 and once["max_example_epsilon"] > 0
    # the test split gets its own noise: the one model's two scores come from different test text
    a = recs["trec__madlib__eps50__once__seed1111__train_and_test.json"]
    assert a["clean_test_accuracy"] == recs["trec__madlib__eps50__once__seed1111__train_only.json"]["accuracy"]
    # resumable: a second run trains nothing and returns the same files
    mtimes = {p: p.stat().st_mtime_ns for p in written}
    assert sorted(run_full_finetune(raw, tmp_path / "ft_full", only=only)) == sorted(written)
    assert all(p.stat().st_mtime_ns == m for p, m in mtimes.items())
    table = "\n".join(full_table(list(recs.values())))
    assert "| trec | madlib | 50 | on_the_fly | 1 |" in table and "| trec | clean |" in table
    assert "[`ft_full`](ft_full/README.md)" in summary_markdown(tmp_path)
    folder_readme = folder_markdown(tmp_path / "ft_full")
    assert folder_readme is not None and "# `ft_full`" in folder_readme and "on_the_fly" in folder_readme
    # no text of the task in any record
    lines = (shared_dir / "data" / "senteval" / "trec.train.jsonl").read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["text"] for line in lines]
    blob = "\n".join(p.read_text() for p in written)
    assert not any(len(t) > 25 and t in blob for t in texts)


def test_recipe_file_dispatches_full_mode(tiny_bert, shared_dir, tmp_path, monkeypatch):
    import yaml

    monkeypatch.setenv(SENTEVAL_DIR_ENV, str(shared_dir / "data" / "senteval"))
    raw = _raw(tiny_bert)
    raw["finetune"]["tasks"] = [{"name": "mr", "train_rows": 32, "test_rows": 16}]
    raw["privatizers"] = []
    path = tmp_path / "ft_full.yaml"
    path.write_text(yaml.safe_dump(raw))
    folder, written = run_recipe_file(path, tmp_path / "results")
    assert [p.name for p in written] == ["mr__clean__train0__clean.json"]
    assert json.loads(written[0].read_text())["n_rows"] == {"train": 32, "test": 16}
    assert (tmp_path / "results" / "README.md").is_file()
