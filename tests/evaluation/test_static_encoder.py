"""The bag-of-vectors encoder on a static vector file, and the recipe keys the GloVe recipe uses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hf_textdp.errors import HfTextDPError
from hf_textdp.evaluation import load_task, recipe_from_dict
from hf_textdp.evaluation.common import load_recipe
from hf_textdp.evaluation.encoders import BagOfVectorsEncoder, make_encoder
from hf_textdp.evaluation.recipe import run_recipe
from hf_textdp.evaluation.static_encoder import StaticBagOfVectorsEncoder, is_vector_file
from hf_textdp.evaluation.tasks import SENTEVAL_DIR_ENV
from tests.utils import write_vectors


def test_mean_of_known_words_oov_skipped(tmp_path):
    E = np.array([[1.0, 0.0], [0.0, 2.0], [4.0, 4.0]], dtype=np.float32)
    path = write_vectors(tmp_path / "v.txt", ["good", "bad", "film"], E)
    enc = make_encoder("bag_of_vectors", str(path))
    assert isinstance(enc, StaticBagOfVectorsEncoder)
    feats = enc.encode(["good  film !", "bad", "? ! Good", "good good bad\tfilm"])
    assert feats.dtype == np.float32 and feats.shape == (4, 2)
    np.testing.assert_allclose(feats[0], [2.5, 2.0])  # "!" is out of vocabulary: skipped
    np.testing.assert_allclose(feats[1], [0.0, 2.0])
    np.testing.assert_allclose(feats[2], [0.0, 0.0])  # no known word (lookup is exact: "Good" is unknown)
    np.testing.assert_allclose(feats[3], [1.5, 1.5])  # repeated words count each time
    assert enc.last_oov_rate == pytest.approx(4 / 11)  # 11 words, 7 in the file
    desc = enc.describe()
    assert desc["name"] == "bag_of_vectors" and desc["model"] == "v.txt" and desc["kind"] == "glove"
    assert desc["d"] == 2 and len(desc["file_sha256"]) == 64 and desc["oov"] == "skipped"


def test_word2vec_file_and_dispatch(tmp_path):
    E = np.eye(3, dtype=np.float32)
    path = write_vectors(tmp_path / "v.w2v", ["x", "y", "z"], E, fmt="word2vec")
    assert is_vector_file(str(path)) and not is_vector_file(str(tmp_path / "missing.txt"))
    enc = make_encoder("bag_of_vectors", str(path))
    np.testing.assert_allclose(enc.encode(["x z"])[0], [0.5, 0.0, 0.5])
    assert enc.describe()["kind"] == "word2vec"
    with pytest.raises(HfTextDPError, match="vector file"):
        StaticBagOfVectorsEncoder(str(tmp_path))  # a folder is not a vector file
    assert not isinstance(enc, BagOfVectorsEncoder)


def test_recipe_lowercase_and_root_relative_model(tmp_path):
    root = tmp_path / "repo"
    (root / "recipes").mkdir(parents=True)
    (root / "data").mkdir()
    write_vectors(root / "data" / "v.txt", ["a"], np.ones((1, 2)))
    raw = {
        "name": "g",
        "tasks": ["trec"],
        "lowercase": True,
        "encoder": {"name": "bag_of_vectors", "model": "data/v.txt"},
        "privatizers": [{"mechanism": "madlib", "model": "data/v.txt", "epsilons": [1]}],
    }
    recipe = recipe_from_dict(raw, path=root / "recipes" / "g.yaml")
    assert recipe.lowercase is True
    assert recipe.encoder["model"] == str(root / "data" / "v.txt")
    assert recipe.privatizers[0].model == str(root / "data" / "v.txt")
    # no such file under the root, or no recipe path: unchanged
    raw2 = {**raw, "encoder": {"name": "bag_of_vectors", "model": "data/none.txt"}}
    assert recipe_from_dict(raw2, path=root / "recipes" / "g.yaml").encoder["model"] == "data/none.txt"
    assert recipe_from_dict(raw).privatizers[0].model == "data/v.txt"
    assert recipe_from_dict({"name": "g", "tasks": ["trec"]}).lowercase is False
    with pytest.raises(HfTextDPError, match="lowercase"):
        recipe_from_dict({**raw, "lowercase": "yes"})


def test_glove_recipe_end_to_end(shared_dir, tmp_path, monkeypatch):
    """A tiny lowercase vector file over the words of 60 TREC rows: privatized and encoded with it."""
    monkeypatch.delenv(SENTEVAL_DIR_ENV, raising=False)
    data_dir = shared_dir / "data" / "senteval"
    task = load_task("trec", data_dir=data_dir, max_rows={"train": 60, "test": 30}, seed=1111)
    words = sorted({w for texts in task.texts.values() for t in texts for w in t.lower().split() if w.isalpha()})
    E = np.random.default_rng(5).standard_normal((len(words), 8)).astype(np.float32)
    vec = write_vectors(tmp_path / "lower.txt", words, E)
    raw = {
        "name": "tiny_glove",
        "seed": 1111,
        "data": {"dir": str(data_dir)},
        "lowercase": True,
        "tasks": [{"name": "trec", "max_rows": {"train": 60, "test": 30}}],
        "encoder": {"name": "bag_of_vectors", "model": str(vec)},
        "classifier": {"kfold": 2, "inner_kfold": 2, "c_grid": [1.0]},
        "privatizers": [{"mechanism": "madlib", "model": str(vec), "epsilons": [0.5, 1000.0]}],
        "rank_sample": 20,
    }
    out = tmp_path / "res" / "tiny_glove"
    run_recipe(recipe_from_dict(raw), out, plots=False)
    clean = json.loads((out / "trec__clean.json").read_text())
    assert clean["lowercase"] is True and clean["encoder"]["kind"] == "glove"
    assert clean["encoder"]["model"] == "lower.txt"
    hi = json.loads((out / "trec__madlib__eps1000__train_and_test.json").read_text())
    lo = json.loads((out / "trec__madlib__eps0.5__train_and_test.json").read_text())
    assert hi["privacy_report"]["model"]["kind"] == "glove"
    assert hi["privacy"]["diagnostics"]["replacement_rate"] < 0.05  # "What" was lowercased, so it is a candidate
    assert lo["privacy"]["diagnostics"]["replacement_rate"] > hi["privacy"]["diagnostics"]["replacement_rate"]
    assert hi["accuracy"] == pytest.approx(clean["accuracy"], abs=1e-9)  # nothing replaced: the clean features


def test_shipped_glove_recipe_names_the_fetched_file():
    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "glove_senteval.yaml")
    assert recipe.lowercase and Path(recipe.encoder["model"]).name == "glove.840B.300d_filtered.txt"
    assert {p.model for p in recipe.privatizers} == {recipe.encoder["model"]}


def test_summary_names_a_vector_file_encoder(tmp_path):
    from hf_textdp.evaluation.summary import folder_markdown

    folder = tmp_path / "g"
    folder.mkdir()
    base = {"task": "cr", "protocol": "cv", "max_rows": None, "setting": "clean", "label": "clean", "epsilon": None}
    enc = {"name": "bag_of_vectors", "model": "glove.840B.300d_filtered.txt", "kind": "glove"}
    (folder / "cr__clean.json").write_text(json.dumps({**base, "accuracy": 80.0, "encoder": enc}))
    assert "Encoder: `bag_of_vectors` on `glove.840B.300d_filtered.txt`;" in folder_markdown(folder)
    enc = {"name": "bag_of_vectors", "model": "sentence-transformers/all-MiniLM-L6-v2"}
    (folder / "cr__clean.json").write_text(json.dumps({**base, "accuracy": 80.0, "encoder": enc}))
    assert "Encoder: `bag_of_vectors`;" in folder_markdown(folder)


def test_results_card_on_static_vectors_names_no_hub_base_model(tmp_path):
    """A results card of GloVe runs names the vector file, not MiniLM, and no hub base model."""
    import shutil

    from hf_textdp.integrations.cards import results_card

    src = Path(__file__).resolve().parents[2] / "results" / "glove_senteval"
    folder = tmp_path / "glove"
    folder.mkdir()
    for name in ("cr__clean.json", "cr__madlib__eps10__train_only.json", "cr__madlib__eps10__train_and_test.json"):
        shutil.copy(src / name, folder / name)
    card = results_card(folder)
    assert card.data.base_model is None
    assert "Encoder `bag_of_vectors` on `glove.840B.300d_filtered.txt`" in str(card)
