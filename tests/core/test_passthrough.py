"""Passthrough words of static vector files: ``passthrough="placeholder"`` (default) or ``"keep"``."""

from __future__ import annotations

import numpy as np
import pytest

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.errors import InvalidParameterError
from hf_textdp.tokens import UNKNOWN_WORD, WordTokens
from tests.utils import write_vectors


WORDS = ["the", "movie", "was", "good", "bad", "plot", "film", "great", "call", "me"]


@pytest.fixture
def glove(tmp_path):
    """A GloVe-style text file (no header) of 10 words, d = 5, seed 3904."""
    E = np.random.default_rng(3904).standard_normal((len(WORDS), 5))
    return str(write_vectors(tmp_path / "glove.tiny.5d.txt", WORDS, E))


TEXTS = ["the movie was good , call Zyxwv at zy@x.org", "bad  plot\t4111111111111111 film", "great"]
UNKNOWN = [",", "Zyxwv", "at", "zy@x.org", "4111111111111111"]


def test_placeholder_is_the_default_and_no_unknown_word_leaves(glove):
    cfg = PrivatizerConfig(epsilon=5.0, model=glove)
    assert cfg.passthrough == "placeholder"
    priv = Privatizer(cfg, seed=2**40 + 39)
    out = priv({"text": TEXTS}, [0, 1, 2])
    words = [t.split() for t in out["text"]]
    ids = out["input_ids"]
    for row_words, row_ids in zip(words, ids, strict=True):
        assert len(row_words) == len(row_ids)
        for w, i in zip(row_words, row_ids, strict=True):
            assert (w == UNKNOWN_WORD) if i == -1 else (w in WORDS)
    assert sum(i == -1 for row in ids for i in row) == len(UNKNOWN)
    assert not set(UNKNOWN) & {w for row in words for w in row}
    assert not any(u in t for u in ("Zyxwv", "zy@x.org", "4111111111111111") for t in out["text"])
    assert "\t" in out["text"][1] and "  " in out["text"][1]  # separators still copied
    assert priv.privacy_report()["totals"]["passthrough_tokens"] == len(UNKNOWN)


def test_keep_releases_them_verbatim_with_the_same_noise(glove):
    """The two modes differ only at passthrough positions: the privatized words come from the same draws."""
    seed = 2**40 + 39
    placeholder = Privatizer(PrivatizerConfig(epsilon=5.0, model=glove), seed=seed)({"text": TEXTS}, [0, 1, 2])
    keep = Privatizer(PrivatizerConfig(epsilon=5.0, model=glove, passthrough="keep"), seed=seed)
    out = keep({"text": TEXTS}, [0, 1, 2])
    assert out["input_ids"] == placeholder["input_ids"]
    for a, b, ids in zip(out["text"], placeholder["text"], out["input_ids"], strict=True):
        for wa, wb, i in zip(a.split(), b.split(), ids, strict=True):
            assert (wb == UNKNOWN_WORD and wa in UNKNOWN) if i == -1 else wa == wb
    assert keep.privacy_report()["totals"]["passthrough_tokens"] == len(UNKNOWN)


def test_word_tokens_modes():
    tokens = WordTokens({"a": 0, "b": 1})
    (row,) = tokens.encode([" a zz\tb "])
    assert row.pieces == ["a", "zz", "b"]  # the input's words: what selective privatization maps spans with
    assert tokens.decode_row([1, -1, 0], row, ["a", "b"]) == " b <unk>\ta "
    assert WordTokens({"a": 0}, "keep").decode_row([1, -1, 0], row, ["a", "b"]) == " b zz\ta "
    with pytest.raises(InvalidParameterError, match=r"passthrough must be one of \['placeholder', 'keep'\]"):
        WordTokens({}, "drop")


@pytest.mark.parametrize("value", ["drop", None, 1], ids=["unknown", "none", "int"])
def test_config_refuses_other_values(value):
    with pytest.raises(InvalidParameterError, match=r"passthrough must be one of \['placeholder', 'keep'\]"):
        PrivatizerConfig(epsilon=1.0, passthrough=value)


def test_config_round_trip(tmp_path):
    cfg = PrivatizerConfig(epsilon=1.0, passthrough="keep")
    cfg.save_pretrained(tmp_path)
    assert PrivatizerConfig.from_pretrained(tmp_path).passthrough == "keep"
    old = {k: v for k, v in cfg.to_dict().items() if k != "passthrough"}  # a config saved before the field
    assert PrivatizerConfig.from_dict(old).passthrough == "placeholder"


def test_hugging_face_unknown_token_is_released_as_itself_in_both_modes(tiny_bert):
    """A Hugging Face tokenizer's unknown token decodes to ``[UNK]`` whatever the setting."""
    texts = ["a film \u2603 here"]
    outs = [
        Privatizer(PrivatizerConfig(epsilon=5.0, model=tiny_bert, passthrough=mode), seed=2**40 + 1).privatize(texts)
        for mode in ("placeholder", "keep")
    ]
    assert outs[0] == outs[1] and "[UNK]" in outs[0][0] and "\u2603" not in outs[0][0]
