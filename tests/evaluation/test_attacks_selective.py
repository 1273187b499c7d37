"""Identifier recovery against a selective release (issue 54 item 6): the attacker knows each position's class.

Tiny random BERT model; fixed seeds."""

from __future__ import annotations

import numpy as np
import pytest

from hf_textdp import PrivatizerConfig
from hf_textdp.evaluation.attacks import AttackSettings
from hf_textdp.evaluation.attacks.selective import KEPT, recover_identifiers, release_selective
from tests.utils import corpus


FAST = dict(train_rows=100, bootstrap=100, neighbours=20, holdout_rows=0, contextual=False)


def _rows(n: int) -> tuple[list[str], list[list[tuple[int, int]]]]:
    """Rows each holding an email (which the email rule selects) and a number-free word span (which none does)."""
    texts, spans = [], []
    for i, t in enumerate(corpus(n, seed=21)):
        head = f"mail ann{i}@example.com now "
        texts.append(head + t)
        first = t.split()[0]
        spans.append([(5, 5 + len(f"ann{i}@example.com")), (len(head), len(head) + len(first))])
    return texts, spans


@pytest.mark.slow
def test_selected_positions_are_marked_and_scored(tiny_bert: str) -> None:
    texts, spans = _rows(30)
    keep = PrivatizerConfig(
        mechanism="madlib",
        epsilon=200.0,
        model=tiny_bert,
        sensitive={"epsilon": 1.0, "detectors": ["email"], "others": "keep"},
    )
    uniform = PrivatizerConfig(mechanism="madlib", epsilon=200.0, model=tiny_bert)
    rel = {
        "keep": release_selective(keep, texts, 2**40 + 31),
        "uniform": release_selective(uniform, texts, 2**40 + 31),
    }
    k = rel["keep"]
    assert set(np.unique(k.epsilon)) == {1.0, KEPT} and k.sensitive.sum() > 0
    assert np.array_equal(k.epsilon == 1.0, k.sensitive)
    kept = ~k.sensitive
    assert np.array_equal(k.corpus.released[kept], k.corpus.inputs[kept])  # others released unchanged
    assert not rel["uniform"].sensitive.any() and set(np.unique(rel["uniform"].epsilon)) == {200.0}
    out = recover_identifiers(rel, spans, corpus(300, seed=22), AttackSettings(**FAST))
    assert set(out["laws"]) == {"1", "200"}  # one law per ε released through the mechanism
    per = out["releases"]["keep"]
    assert 0.0 < per["identifier_tokens_selected_pct"] < 100.0  # the emails, not the first words
    for attack in ("identity", "bayes"):
        tokens, whole = per[attack]["tokens"], per[attack]["identifiers"]
        assert whole["n"] == 60 and tokens["ci95"][0] <= tokens["top1"] <= tokens["ci95"][1]
        # the unselected first words are kept, hence recovered: at least half the identifiers come back whole
        assert whole["top1"] >= 50.0
    assert out["releases"]["uniform"]["identifier_tokens_selected_pct"] == 0.0
