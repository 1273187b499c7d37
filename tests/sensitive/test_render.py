"""Issue 54 item 5: sensitive={"render": "placeholder"} releases each sensitive word (a run of words with no
character between them, such as an email's pieces) as one placeholder, with input_ids set to the unknown token."""

from __future__ import annotations

import numpy as np
import pytest

from hf_textdp import PrivatizerConfig
from hf_textdp.privatizer import Privatizer


TEXTS = ["mrn a1973060 and mail ann@example.com today", "a1973060, then"]
SENS = {"epsilon": 1.0, "detectors": ["id", "email"], "others": "keep"}


@pytest.mark.parametrize("model, unk", [("tiny_bert", "[UNK]"), ("tiny_gpt2", "<|endoftext|>")])
def test_each_sensitive_word_is_one_placeholder(model, unk, request):
    path = request.getfixturevalue(model)
    token = Privatizer(PrivatizerConfig(epsilon=50.0, model=path, sensitive=SENS), seed=2**40 + 5401)
    place = Privatizer(
        PrivatizerConfig(epsilon=50.0, model=path, sensitive={**SENS, "render": "placeholder"}), seed=2**40 + 5401
    )
    a, b = token({"text": TEXTS}, [0, 1]), place({"text": TEXTS}, [0, 1])
    assert b["text"] == [f"mrn {unk} and mail {unk} today", f"{unk}, then"]
    assert a["dp_sensitive_tokens"] == b["dp_sensitive_tokens"] and b["dp_sensitive_tokens"][0] > 2
    unk_id = place.engine.space.unk_id
    for ids_a, ids_b in zip(a["input_ids"], b["input_ids"], strict=True):
        assert len(ids_a) == len(ids_b)  # one to one with the input's tokenization
        changed = np.asarray(ids_a) != np.asarray(ids_b)
        assert np.all(np.asarray(ids_b)[changed] == unk_id)


def test_static_vectors_release_a_sensitive_word_as_unk(tmp_path):
    from tests.utils import write_vectors

    path = str(write_vectors(tmp_path / "v.txt", ["mail", "and", "today", "mrn"], np.arange(8.0).reshape(4, 2)))
    cfg = PrivatizerConfig(epsilon=50.0, model=path, sensitive={**SENS, "render": "placeholder"}, passthrough="keep")
    out = Privatizer(cfg, seed=2**40 + 5402)({"text": TEXTS}, [0, 1])
    assert out["text"][0] == "mrn <unk> and mail <unk> today"
