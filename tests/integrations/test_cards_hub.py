"""Cards (huggingface_hub DatasetCard / ModelCard) and push_to_hub against a local stand-in of the Hub."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from hf_textdp.errors import HfTextDPError
from hf_textdp.integrations.cards import dataset_card, find_report, render_card, results_card
from hf_textdp.integrations.hub import detect_kind, push_to_hub
from tests.utils import bound_report


REPORT = {
    "report_version": 1,
    "hf_textdp_version": "0.1.0",
    "mechanism": "madlib",
    "parameters": {"bound": "none"},
    "postprocess": "nearest",
    "postprocess_parameters": {},
    "metric": "euclidean",
    "epsilon": 80.0,
    "delta": None,
    "guarantee": "metric_dp",
    "certified": True,
    "warnings": [],
    "epsilon_token": 187.23,
    "delta_token": 0.0,
    "details": {},
    "candidate_set": {"size": 30517, "sha256": "ab" * 32, "shape": [30517, 384]},
    "model": {"id": "sentence-transformers/all-MiniLM-L6-v2", "kind": "hf", "d": 384},
    "projection": None,
    "scale": {"median_rho1": 0.9854, "diam": 2.3404, "epsilon_median_rho1": 78.83, "epsilon_diam": 187.232},
    "totals": {"rows": 30, "dp_tokens": 700, "max_row_dp_epsilon": 4000.0},
    "not_covered": ["the length of each text (token count) is released unchanged."],
}


def _result(task, setting, label="madlib", epsilon=80.0, accuracy=70.0, rate=0.4):
    res = {
        "task": task,
        "task_title": task.upper(),
        "hub_id": {"mr": "cornell-movie-review-data/rotten_tomatoes", "trec": "CogComp/trec"}[task],
        "protocol": "cv" if task == "mr" else "split_cv",
        "setting": setting,
        "mechanism": "none" if setting == "clean" else "madlib",
        "label": "clean" if setting == "clean" else label,
        "epsilon": None if setting == "clean" else epsilon,
        "accuracy": accuracy,
        "accuracy_std": 1.0,
        "values": [accuracy],
        "encoder": {"name": "bag_of_vectors"},
        "classifier": {"kfold": 10, "c_grid": [0.25, 1.0, 4.0]},
        "recipe": {"name": "demo", "content": {"description": "A demo recipe."}},
        "command": "hf-textdp evaluate recipes/demo.yaml --output results/",
        "privacy": None,
    }
    if setting != "clean":
        res["privacy"] = {
            "guarantee": "metric_dp",
            "certified": True,
            "epsilon_token": 187.2,
            "scale": {"epsilon_median_rho1": 78.8},
            "diagnostics": {"replacement_rate": rate, "n_w_mean": 0.6, "s_w_mean": 1.7},
        }
    return res


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "results" / "demo"
    folder.mkdir(parents=True)
    for task in ("mr", "trec"):
        for setting in ("clean", "train_only", "train_and_test"):
            name = f"{task}__clean.json" if setting == "clean" else f"{task}__madlib__eps80__{setting}.json"
            (folder / name).write_text(json.dumps(_result(task, setting)))
    (folder / "accuracy_vs_epsilon.png").write_bytes(b"\x89PNG\r\n")
    return folder


@pytest.fixture
def private_output(tmp_path: Path) -> Path:
    out = tmp_path / "reviews_private.jsonl"
    out.write_text('{"text": "a secluded review", "dp_tokens": 3, "dp_epsilon": 561.69}\n')
    totals = {"rows": 1, "dp_tokens": 3, "max_row_dp_tokens": 3, "max_row_dp_epsilon": 561.69}  # as its rows say
    out.with_name(out.name + ".privacy_report.json").write_text(
        json.dumps(bound_report(out, REPORT | {"totals": totals}))
    )
    return out


# ----------------------------------------------------------------------------- cards
def test_dataset_card_has_privacy_section_and_metadata():
    card = dataset_card(REPORT, repo_id="me/reviews-private")
    text = str(card)
    assert "## Privacy" in text and "`madlib`" in text and "metric_dp" in text and "(certified)" in text
    assert "Not covered" in text and "token count" in text
    assert 'load_dataset("me/reviews-private")' in text
    meta = card.data.to_dict()
    assert "differential-privacy" in meta["tags"] and meta["hf_textdp"]["epsilon"] == 80.0
    assert meta["size_categories"] == "n<1K"


def test_dataset_card_uncertified_and_warnings():
    report = {**REPORT, "certified": False, "guarantee": "none", "warnings": ["postprocess reads the input"]}
    text = str(dataset_card(report))
    assert "**not certified**" in text and "NO guarantee" in text and "postprocess reads the input" in text


def test_render_card_from_saved_output(private_output):
    assert find_report(private_output) is not None
    assert "## Privacy" in str(render_card(private_output))


def test_results_card_model_index(results_dir):
    card = results_card(results_dir)
    text = str(card)
    assert "model-index" in text and "hf-textdp evaluate recipes/demo.yaml" in text
    assert "## Privacy" in text and "metric_dp" in text
    evals = card.data.eval_results
    assert len(evals) == 6 and {e.metric_type for e in evals} == {"accuracy"}
    assert {e.dataset_type for e in evals} == {"cornell-movie-review-data/rotten_tomatoes", "CogComp/trec"}
    meta = yaml.safe_load(text.split("---")[1])
    assert meta["model-index"][0]["results"]


def test_results_card_names_each_run_of_one_configuration(results_dir):
    """Records of one configuration that are separate runs (finetune_full: a path, a noise seed, a training
    seed each) get their own config and metric name, so the model index never repeats an unlabeled value."""
    for f in results_dir.glob("*.json"):
        f.unlink()
    runs = [("once", 1111), ("once", 2222), ("on_the_fly", 1111)]
    for path, seed in runs:
        rec = _result("mr", "train_only") | {"path": path, "noise_seed": seed, "train_seed": 0}
        (results_dir / f"mr__madlib__eps80__{path}__seed{seed}__train_only.json").write_text(json.dumps(rec))
    evals = results_card(results_dir).data.eval_results
    assert len(evals) == 3
    assert len({e.dataset_config for e in evals}) == 3 and len({e.metric_name for e in evals}) == 3
    assert "accuracy (train_only, on_the_fly, noise seed 1111, training seed 0)" in {e.metric_name for e in evals}
    assert all(e.metric_args["train_seed"] == 0 for e in evals)


def test_render_card_rejects_other_paths(tmp_path):
    (tmp_path / "plain.txt").write_text("x")
    with pytest.raises(HfTextDPError, match="neither"):
        render_card(tmp_path / "plain.txt")


def test_cli_card(results_dir, tmp_path, capsys):
    from hf_textdp.cli import main

    out = tmp_path / "cards" / "demo.md"
    assert main(["card", str(results_dir), "--output", str(out)]) == 0
    assert "model-index" in out.read_text()
    assert main(["card", str(tmp_path / "nope")]) == 2


def test_cli_card_refuses_an_existing_output_without_overwrite(results_dir, tmp_path, capsys):
    """Like privatize, card does not replace an existing --output unless --overwrite is given."""
    from hf_textdp.cli import main

    out = tmp_path / "card.md"
    out.write_text("kept\n")
    assert main(["card", str(results_dir), "--output", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"hf-textdp: error: --output {str(out)!r} already exists; pass --overwrite to replace it.\n"
    )
    assert out.read_text() == "kept\n"
    assert main(["card", str(results_dir), "--output", str(out), "--overwrite"]) == 0
    assert "model-index" in out.read_text()


# ----------------------------------------------------------------------------- push_to_hub, offline stand-in
@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """Replace HfApi.create_repo / upload_folder with copies into a local folder (no network)."""
    from huggingface_hub import HfApi

    root = tmp_path / "hub"
    calls: list[tuple[str, str]] = []

    def create_repo(self, repo_id, *, repo_type=None, private=None, exist_ok=False, **kwargs):
        (root / (repo_type or "model") / repo_id).mkdir(parents=True, exist_ok=True)
        calls.append(("create_repo", repo_id))
        return f"https://huggingface.co/{'datasets/' if repo_type == 'dataset' else ''}{repo_id}"

    def upload_folder(self, *, repo_id, folder_path, repo_type=None, commit_message=None, **kwargs):
        dest = root / (repo_type or "model") / repo_id
        shutil.copytree(folder_path, dest, dirs_exist_ok=True)
        calls.append(("upload_folder", commit_message or ""))

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    return root, calls


def test_push_dataset(fake_hub, private_output):
    root, calls = fake_hub
    url = push_to_hub(private_output, "me/reviews-private")
    assert url == "https://huggingface.co/datasets/me/reviews-private"
    repo = root / "dataset" / "me" / "reviews-private"
    assert (repo / "data" / "reviews_private.jsonl").is_file()
    assert json.loads((repo / "privacy_report.json").read_text())["mechanism"] == "madlib"
    assert "## Privacy" in (repo / "README.md").read_text()
    assert [c[0] for c in calls] == ["create_repo", "upload_folder"]


def test_push_saved_folder_with_config(fake_hub, tmp_path):
    root, _ = fake_hub
    folder = tmp_path / "saved"
    folder.mkdir()
    (folder / "data-00000-of-00001.arrow").write_bytes(b"arrow")
    (folder / "privacy_report.json").write_text(json.dumps(bound_report(folder, REPORT)))
    (folder / "privatizer_config.json").write_text(json.dumps({"mechanism": "madlib", "epsilon": 80.0}))
    push_to_hub(folder, "me/saved")
    repo = root / "dataset" / "me" / "saved"
    assert (repo / "data" / "data-00000-of-00001.arrow").is_file() and (repo / "privatizer_config.json").is_file()


def test_push_results(fake_hub, results_dir):
    root, _ = fake_hub
    push_to_hub(results_dir, "me/demo-results")
    repo = root / "model" / "me" / "demo-results"
    assert (repo / "mr__clean.json").is_file() and (repo / "accuracy_vs_epsilon.png").is_file()
    assert "model-index" in (repo / "README.md").read_text()


def test_push_config(fake_hub, tmp_path):
    root, _ = fake_hub
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "privatizer_config.json").write_text(json.dumps({"mechanism": "tem", "epsilon": 15.0, "model": "m"}))
    assert detect_kind(cfg) == "config"
    push_to_hub(cfg, "me/tem-config")
    readme = (root / "model" / "me" / "tem-config" / "README.md").read_text()
    assert "PrivatizerConfig.from_pretrained" in readme and '"epsilon": 15.0' in readme


@pytest.mark.parametrize(
    ("repo_id", "match"),
    [("noslash", "namespace/name"), ("a/b/c", "namespace/name"), ("/x", "namespace/name")],
    ids=["no-slash", "two-slashes", "empty-namespace"],
)
def test_push_rejects_bad_repo_id(fake_hub, private_output, repo_id, match):
    with pytest.raises(HfTextDPError, match=match):
        push_to_hub(private_output, repo_id)


def test_push_rejects_unknown_path(fake_hub, tmp_path):
    (tmp_path / "x.txt").write_text("x")
    with pytest.raises(HfTextDPError, match="not something hf-textdp publishes"):
        push_to_hub(tmp_path / "x.txt", "me/x")
    with pytest.raises(HfTextDPError, match="does not exist"):
        push_to_hub(tmp_path / "missing", "me/x")


def test_cli_push(fake_hub, private_output, capsys):
    from hf_textdp.cli import main

    root, _ = fake_hub
    assert main(["push", str(private_output), "me/cli-push"]) == 0
    assert (root / "dataset" / "me" / "cli-push" / "README.md").is_file()
    assert "pushed" in capsys.readouterr().out
