"""PrivateTokenizer (issue 9): equality with the plain tokenizer, shapes for any ε, seeds, saving, workers."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_textdp import PrivateTokenizer, PrivatizerConfig, privacy_report
from hf_textdp.errors import InvalidParameterError, ParameterTypeError, TokenizerNotSupportedError
from hf_textdp.space import CANDIDATE
from hf_textdp.validation import check_row_ids
from tests.utils import corpus


HUGE = 1e9  # madlib noise ~ d/ε ≈ 1e-8: the nearest row is the input's own row
SEED = 2**40 + 977

CALLS = [
    pytest.param({}, id="plain"),
    pytest.param({"padding": True}, id="padding"),
    pytest.param({"padding": "max_length", "max_length": 24, "truncation": True}, id="pad-max-length"),
    pytest.param({"truncation": True, "max_length": 7}, id="truncation"),
    pytest.param({"truncation": True, "max_length": 7, "padding_side": "left", "padding": True}, id="left-padding"),
    pytest.param({"padding": True, "return_tensors": "pt"}, id="tensors"),
    pytest.param({"padding": True, "pad_to_multiple_of": 8, "return_special_tokens_mask": True}, id="multiple-of"),
    pytest.param(
        {"truncation": True, "max_length": 9, "stride": 2, "return_overflowing_tokens": True, "padding": True},
        id="overflow",
    ),
]


@pytest.fixture(params=["tiny_bert", "tiny_gpt2"])
def model(request):
    return request.getfixturevalue(request.param)


def _plain(model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    if tok.pad_token is None:  # GPT-2: pad with the end-of-text token, as users do
        tok.pad_token = tok.eos_token
    return tok


def _equal(a, b):
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return a == b


@pytest.mark.parametrize("kwargs", CALLS)
def test_huge_epsilon_equals_plain_tokenizer(model, kwargs):
    tok = _plain(model)
    ptok = PrivateTokenizer(tok, PrivatizerConfig(epsilon=HUGE, model=model), seed=SEED)
    texts = corpus(12, seed=21) + ["", "x"]
    got = ptok(texts, indices=list(range(len(texts))), **kwargs)
    want = tok(texts, split_special_tokens=True, **kwargs)
    for key in want.keys():
        assert _equal(got[key], want[key]), key
    assert set(got.keys()) == set(want.keys()) | {"dp_tokens", "dp_epsilon"}


def test_huge_epsilon_pairs_and_split_words(tiny_bert):
    tok = _plain(tiny_bert)
    ptok = PrivateTokenizer(tok, PrivatizerConfig(epsilon=HUGE, model=tiny_bert), seed=SEED)
    a, b = corpus(6, seed=22), corpus(6, seed=23)
    for kwargs in (
        {},
        {"truncation": True, "max_length": 10, "padding": True},
        {"truncation": "only_second", "max_length": 64},
    ):
        got = ptok(a, b, indices=list(range(6)), **kwargs)
        want = tok(a, b, **kwargs)
        for key in want.keys():
            assert got[key] == want[key], key
    words = [t.split() for t in a]
    got = ptok(words, is_split_into_words=True, indices=list(range(6)), truncation=True, max_length=8)
    assert got["input_ids"] == tok(words, is_split_into_words=True, truncation=True, max_length=8)["input_ids"]
    single = ptok(a[0], b[0], indices=4)  # one example: unbatched like the plain tokenizer
    assert single["input_ids"] == tok(a[0], b[0])["input_ids"] and isinstance(single["dp_epsilon"], float)


@pytest.mark.parametrize("kwargs", CALLS)
def test_shapes_masks_and_specials_equal_for_small_epsilon(model, kwargs):
    tok = _plain(model)
    ptok = PrivateTokenizer(tok, PrivatizerConfig(epsilon=0.5, model=model))
    texts = corpus(10, seed=24)
    got = ptok(texts, **kwargs)
    want = tok(texts, split_special_tokens=True, **kwargs)
    for key in want.keys():
        if key != "input_ids":
            assert _equal(got[key], want[key]), key
    ids_got, ids_want = (np.asarray(got["input_ids"], dtype=object), np.asarray(want["input_ids"], dtype=object))
    assert ids_got.shape == ids_want.shape
    space, claim = ptok._encoder.engine.space, ptok._encoder.engine.claim
    changed = 0
    for j, enc in enumerate(want.encodings):
        seq = np.array([s is not None for s in enc.sequence_ids])
        g, w = np.asarray(list(got["input_ids"][j])), np.asarray(list(want["input_ids"][j]))
        assert (g[~seq] == w[~seq]).all()  # template specials and padding untouched
        cls, _ = space.classify(w)
        n_cand = int((seq & (cls == CANDIDATE)).sum())
        assert int(got["dp_tokens"][j]) == n_cand  # only kept positions count (accounting.md §2)
        assert float(got["dp_epsilon"][j]) == pytest.approx(claim.row_epsilon(n_cand), rel=1e-6)
        changed += int((g != w).sum())
    assert changed > 0  # ε = 0.5 changes tokens


def test_truncation_counts_only_kept_positions(tiny_bert):
    ptok = PrivateTokenizer(None, PrivatizerConfig(epsilon=3.0, model=tiny_bert), seed=SEED)
    text = " ".join(["good movie"] * 200)
    full = ptok(text, indices=0)
    cut = ptok(text, indices=0, truncation=True, max_length=10)
    assert len(cut["input_ids"]) == 10 and cut["dp_tokens"] == 8
    assert full["dp_tokens"] > 300
    eps_tok = ptok._encoder.engine.claim.epsilon_token
    assert cut["dp_epsilon"] == 8 * eps_tok
    left = ptok(text, indices=0, truncation=True, max_length=10, truncation_side="left")
    assert len(left["input_ids"]) == 10


def test_spelled_special_tokens_are_text(tiny_bert):
    ptok = PrivateTokenizer(None, PrivatizerConfig(epsilon=HUGE, model=tiny_bert), seed=SEED)
    got = ptok("hello [CLS] world", indices=0)
    special = set(ptok.tokenizer.all_special_ids)
    assert sum(i in special for i in got["input_ids"]) == 2  # the template's [CLS] and [SEP] only
    kept = ptok("hello [CLS] world", indices=0, split_special_tokens=False)  # the caller's choice wins
    assert sum(i in special for i in kept["input_ids"]) == 3


def test_seeded_output_independent_of_batch_composition(tiny_bert):
    ptok = PrivateTokenizer(None, PrivatizerConfig(epsilon=2.0, model=tiny_bert), seed=SEED)
    texts = corpus(9, seed=25)
    batch = ptok(texts, indices=list(range(100, 109)), padding=True, truncation=True, max_length=12)
    for i in (0, 4, 8):
        alone = ptok([texts[i]], indices=[100 + i], truncation=True, max_length=12)["input_ids"][0]
        assert batch["input_ids"][i][: len(alone)] == alone
    shuffled = ptok(texts[::-1], indices=list(range(108, 99, -1)), truncation=True, max_length=12)
    unpadded = [r[: len(s)] for r, s in zip(batch["input_ids"], shuffled["input_ids"][::-1], strict=True)]
    assert shuffled["input_ids"][::-1] == unpadded
    other = ptok(texts, indices=list(range(200, 209)), truncation=True, max_length=12)
    assert other["input_ids"] != [r[: len(s)] for r, s in zip(batch["input_ids"], other["input_ids"], strict=True)]
    reseeded = PrivateTokenizer(None, PrivatizerConfig(epsilon=2.0, model=tiny_bert), seed=SEED + 1)
    assert (
        reseeded(texts, indices=list(range(100, 109)))["input_ids"]
        != ptok(texts, indices=list(range(100, 109)))["input_ids"]
    )


def test_seeded_call_needs_indices(tiny_bert):
    ptok = PrivateTokenizer(None, PrivatizerConfig(epsilon=2.0, model=tiny_bert), seed=SEED)
    with pytest.raises(InvalidParameterError, match="indices"):
        ptok(["good movie"])
    with pytest.raises(InvalidParameterError, match="indices has 1 entries"):
        ptok(["a", "b"], indices=[0])


def test_unseeded_calls_draw_fresh_noise(tiny_bert):
    ptok = PrivateTokenizer(None, PrivatizerConfig(epsilon=0.5, model=tiny_bert))
    text = [" ".join(corpus(5, seed=26))]
    assert ptok(text)["input_ids"] != ptok(text)["input_ids"]


@pytest.mark.parametrize("stream", [-1, True, 2**63, "0"])
def test_bad_stream_refused_by_tokenizer_and_encoder(tiny_bert, stream):
    from hf_textdp.integrations.encoder import PrivateEncoder

    cfg = PrivatizerConfig(epsilon=1.0, model=tiny_bert)
    for build in (PrivateTokenizer, PrivateEncoder):
        with pytest.raises(InvalidParameterError, match=r"stream must be an int in \[0, 2\*\*63\)"):
            build(None, cfg, stream=stream)


@pytest.mark.parametrize(
    "build, error, match",
    [
        (
            lambda m, g: PrivatizerConfig(epsilon=1.0, model=m, postprocess="vector"),
            InvalidParameterError,
            "DataCollatorForInputsEmbeds",
        ),
        (lambda m, g: "mismatch", TokenizerNotSupportedError, "vocabulary"),
    ],
    ids=["vector-refused", "vocab-mismatch"],
)
def test_refused_configurations(tiny_bert, tiny_gpt2, build, error, match):
    cfg = build(tiny_bert, tiny_gpt2)
    with pytest.raises(error, match=match):
        if cfg == "mismatch":
            ptok = PrivateTokenizer(_plain(tiny_gpt2), PrivatizerConfig(epsilon=1.0, model=tiny_bert))
            ptok(["good movie"])
        else:
            PrivateTokenizer(None, cfg)


def test_targets_are_refused(tiny_bert):
    ptok = PrivateTokenizer(None, PrivatizerConfig(epsilon=1.0, model=tiny_bert))
    with pytest.raises(InvalidParameterError, match="text_target"):
        ptok(["good movie"], text_target=["bad plot"])


def test_delegation_decode_and_attributes(tiny_bert):
    tok = _plain(tiny_bert)
    ptok = PrivateTokenizer(tok, PrivatizerConfig(epsilon=HUGE, model=tiny_bert), seed=SEED)
    enc = ptok(["good movie", "bad plot"], indices=[0, 1])
    assert ptok.batch_decode(enc["input_ids"], skip_special_tokens=True) == ["good movie", "bad plot"]
    assert ptok.decode(enc["input_ids"][0]) == tok.decode(enc["input_ids"][0])
    assert ptok.pad_token_id == tok.pad_token_id and len(ptok) == len(tok)
    assert "seed" not in repr(ptok).replace("seeded", "") and str(SEED) not in repr(ptok)


def test_report_counts_examples(tiny_bert):
    ptok = PrivateTokenizer(None, PrivatizerConfig(epsilon=2.0, model=tiny_bert))
    texts = corpus(5, seed=27)
    enc = ptok(texts, padding=True)
    rep = privacy_report(ptok)
    assert rep["totals"]["rows"] == 5
    assert rep["totals"]["dp_tokens"] == sum(enc["dp_tokens"])
    assert rep["totals"]["padding_tokens"] == sum(m.count(0) for m in enc["attention_mask"])
    assert rep["totals"]["max_row_dp_epsilon"] == max(enc["dp_epsilon"])
    json.dumps(rep, allow_nan=False)


def test_report_counts_an_example_once_over_its_overflow_windows(tiny_bert):
    """Windows count their own tokens; the report's per-example loss is their union's (training.md)."""
    ptok = PrivateTokenizer(None, PrivatizerConfig(epsilon=2.0, model=tiny_bert), seed=2**40 + 9)
    text = " ".join(corpus(8, seed=31))
    whole = ptok(text, indices=0)["dp_tokens"]
    enc = ptok(text, indices=0, truncation=True, max_length=12, stride=4, return_overflowing_tokens=True)
    assert len(enc["dp_tokens"]) > 2 and sum(enc["dp_tokens"]) > whole  # overlapping windows
    rep = privacy_report(ptok)["totals"]
    assert rep["rows"] == 2 and rep["max_row_dp_tokens"] == whole  # the whole call, then the windows: one each
    assert rep["max_row_dp_epsilon"] == pytest.approx(whole * ptok._encoder.engine.claim.epsilon_token)
    assert rep["max_row_dp_epsilon"] > max(enc["dp_epsilon"])


def _scan_for_seed(folder: Path, seed: int) -> None:
    for f in folder.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert str(seed).encode() not in data and format(seed, "x").encode() not in data, f.name


def test_save_and_from_pretrained_round_trip(tiny_bert, tmp_path):
    cfg = PrivatizerConfig(epsilon=3.0, model=tiny_bert)
    ptok = PrivateTokenizer(_plain(tiny_bert), cfg, seed=918273645, allow_weak_seed=True)
    files = ptok.save_pretrained(tmp_path / "saved")
    names = {Path(f).name for f in files}
    assert "privatizer_config.json" in names and "tokenizer.json" in names
    _scan_for_seed(tmp_path / "saved", 918273645)
    loaded = PrivateTokenizer.from_pretrained(tmp_path / "saved", seed=918273645, allow_weak_seed=True)
    assert loaded.config == cfg
    texts = corpus(4, seed=28)
    assert loaded(texts, indices=[0, 1, 2, 3])["input_ids"] == ptok(texts, indices=[0, 1, 2, 3])["input_ids"]
    # a model folder with an explicit config
    direct = PrivateTokenizer.from_pretrained(tiny_bert, config=cfg, seed=918273645, allow_weak_seed=True)
    assert direct(texts, indices=[0, 1, 2, 3])["input_ids"] == ptok(texts, indices=[0, 1, 2, 3])["input_ids"]


def test_push_to_hub_publishes_tokenizer_and_config(tiny_bert, tmp_path, monkeypatch):
    """Offline stand-in for the Hub: create_repo records the repo, upload_folder copies the folder."""
    from huggingface_hub import HfApi

    hub = tmp_path / "hub"
    calls = {}

    def create_repo(self, repo_id, **kwargs):
        calls["create"] = (repo_id, kwargs)
        (hub / repo_id).mkdir(parents=True, exist_ok=True)

    def upload_folder(self, *, repo_id, folder_path, **kwargs):
        calls["upload"] = kwargs
        shutil.copytree(folder_path, hub / repo_id, dirs_exist_ok=True)
        return "commit-url"

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    cfg = PrivatizerConfig(epsilon=3.0, model=tiny_bert)
    ptok = PrivateTokenizer(None, cfg, seed=918273645, allow_weak_seed=True)
    assert ptok.push_to_hub("me/private-tok", private=True) == "commit-url"
    assert calls["create"] == ("me/private-tok", {"private": True, "exist_ok": True})
    published = hub / "me" / "private-tok"
    assert (published / "privatizer_config.json").is_file() and (published / "tokenizer.json").is_file()
    _scan_for_seed(published, 918273645)
    again = PrivateTokenizer.from_pretrained(published, seed=918273645, allow_weak_seed=True)
    assert again.config == cfg
    assert again(["good movie"], indices=[3])["input_ids"] == ptok(["good movie"], indices=[3])["input_ids"]


def test_pickles_cheaply_and_keeps_its_noise_key(tiny_bert, tmp_path):
    ptok = PrivateTokenizer.from_pretrained(
        tiny_bert, config=PrivatizerConfig(epsilon=2.0, model=tiny_bert), seed=2**40 + 5
    )
    before = ptok(["good movie"], indices=[7])["input_ids"]
    blob = pickle.dumps(ptok)
    assert len(blob) < 2000  # config, seed and source path only: no matrix, no tokenizer
    assert pickle.loads(blob)(["good movie"], indices=[7])["input_ids"] == before
    unseeded = PrivateTokenizer(None, PrivatizerConfig(epsilon=2.0, model=tiny_bert))
    unseeded(["x"])
    assert len(pickle.dumps(unseeded)) < 2000
    assert pickle.dumps(unseeded) != pickle.dumps(
        PrivateTokenizer(None, PrivatizerConfig(epsilon=2.0, model=tiny_bert))
    )


def test_dataset_map_batch_size_independent(tiny_bert):
    from datasets import Dataset

    ptok = PrivateTokenizer(None, PrivatizerConfig(epsilon=2.0, model=tiny_bert), seed=SEED)
    ds = Dataset.from_dict({"text": corpus(11, seed=29)})

    def fn(batch, idx):
        return ptok(batch["text"], indices=idx, truncation=True, max_length=16)

    a = ds.map(fn, batched=True, with_indices=True, batch_size=3, load_from_cache_file=False)
    b = ds.map(fn, batched=True, with_indices=True, batch_size=7, load_from_cache_file=False)
    assert a["input_ids"] == b["input_ids"]
    assert set(a.column_names) >= {"input_ids", "attention_mask", "dp_tokens", "dp_epsilon"}
    assert max(len(r) for r in a["input_ids"]) <= 16


class _Collate:
    """A picklable collate_fn: tokenizes a batch of rows and returns the ids with the worker id."""

    def __init__(self, ptok):
        self.ptok = ptok

    def __call__(self, rows):
        info = torch.utils.data.get_worker_info()
        enc = self.ptok([r["text"] for r in rows], padding=True, return_tensors="pt")
        return info.id if info is not None else -1, enc["input_ids"]


def test_dataloader_workers_draw_independent_noise(tiny_bert):
    from torch.utils.data import DataLoader

    ptok = PrivateTokenizer(None, PrivatizerConfig(epsilon=0.5, model=tiny_bert))
    text = " ".join(corpus(3, seed=30))
    rows = [{"text": text}] * 8
    loader = DataLoader(rows, batch_size=4, num_workers=2, collate_fn=_Collate(ptok))
    out = list(loader)
    assert sorted(w for w, _ in out) == [0, 1]
    assert not torch.equal(out[0][1], out[1][1])  # identical rows, different workers: different noise


@pytest.mark.parametrize(
    ("text", "pair", "error", "match"),
    [
        (["ok", None], None, "ParameterTypeError", r"text\[1\]: expected str, got NoneType"),
        (["a\ud800b"], None, "InvalidRowError", r"text\[0\]: .* \(a lone surrogate at character 1\)"),
        (["ok"], ["x\udc00"], "InvalidRowError", r"text_pair\[0\]: .* \(a lone surrogate at character 1\)"),
    ],
    ids=["none", "surrogate", "surrogate-pair"],
)
def test_texts_the_tokenizer_refuses_are_named(tiny_bert, text, pair, error, match):
    """The wrapped tokenizer's TypeError ("TextEncodeInput must be Union[...]") becomes an error naming the entry."""
    from hf_textdp import errors

    ptok = PrivateTokenizer(None, PrivatizerConfig(epsilon=3.0, model=tiny_bert), seed=SEED)
    with pytest.raises(getattr(errors, error), match=match):
        ptok(text, pair, indices=list(range(len(text))))


@pytest.mark.parametrize(
    ("value", "error", "said"),
    [
        ("3", ParameterTypeError, "str"),
        (True, ParameterTypeError, "bool"),
        (np.bool_(True), ParameterTypeError, "bool"),
        (-1, InvalidParameterError, "a negative int"),
        (2**63, InvalidParameterError, "an int >= 2\\*\\*63"),
    ],
)
def test_check_row_ids_names_the_fault_with_its_error_class(value, error, said):
    with pytest.raises(error, match=f"indices must hold ints in \\[0, 2\\*\\*63\\), got {said}\\.$"):
        check_row_ids([0, value], "indices")
    assert check_row_ids([np.int64(7)], "indices") == [7]
