"""The law of per-person releases (issue 56, docs/mechanisms/users.md §3, selective.md §8).

Under ``bound="scale"`` a user's tokens follow their mechanism at the user's lowered ε; under ``consistent`` every
occurrence of a sensitive string equals one draw whose law is the mechanism's at ε_s. χ² at the levels of
docs/mechanisms/testing.md (α = 1e-3, Bonferroni over the three inputs), on the 1-D vocabulary (0, 1, 3) whose
madlib laws are testing.md's T1D known answers; each test also runs its mutation and asserts it is caught.
"""

from __future__ import annotations

from collections import Counter

import datasets
import numpy as np
import pytest

import hf_textdp.users.plan as plan_module
from hf_textdp import PrivatizerConfig
from hf_textdp.privatizer import Privatizer
from hf_textdp.users import LevelEngines
from tests.mechanisms.test_madlib import ALPHA, T1D, chi2_pvalue


SEED = 2**40 + 5656


def _scale_rows(n_rows: int, n_words: int) -> datasets.Dataset:
    """User u{i} has ``n_rows`` rows of ``n_words`` copies of x{i}."""
    texts, users = [], []
    for i in range(3):
        texts += [" ".join([f"x{i}"] * n_words)] * n_rows
        users += [f"u{i}"] * n_rows
    return datasets.Dataset.from_dict({"text": texts, "uid": users})


@pytest.mark.parametrize("mutated", [False, True], ids=["scaled", "mutant-keeps-unscaled-epsilon"])
def test_scaled_user_tokens_follow_the_law_at_the_lowered_epsilon(t1d, monkeypatch, mutated):
    """madlib ε = 2 (ε_tok = 6 on diam 3); each user has 10,000 tokens and the budget 6·10,000·0.505, so its level
    is 8 (λ = 1/2): its tokens must follow T1D[1.0] (χ² at α/3 per input, seed 2**40 + 5656), and the mutant that
    keeps the configured ε (every level releases as level 0) is rejected at every input (p < α)."""
    budget = 6.0 * 10_000 * 0.505
    cfg = PrivatizerConfig(epsilon=2.0, model=t1d, user={"column": "uid", "budget": budget})
    priv = Privatizer(cfg, seed=SEED)
    ds = _scale_rows(100, 100)
    table = priv.fit_users(ds)
    assert table.level.tolist() == [8, 8, 8]
    if mutated:  # the levels are counted, but every level releases as level 0
        monkeypatch.setattr(LevelEngines, "at", lambda self, level: self.base)
    out = ds.map(priv, batched=True, with_indices=True, batch_size=64)
    for i in range(3):
        rows = out.filter(lambda r, i=i: r["uid"] == f"u{i}")
        counts = Counter(w for t in rows["text"] for w in t.split())
        obs = np.array([counts[f"x{j}"] for j in range(3)])
        assert obs.sum() == 10_000
        p = chi2_pvalue(obs, np.array(T1D[1.0][i]))
        assert (p < ALPHA) if mutated else (p > ALPHA / 3)
        if not mutated:  # the rows' ε at the lowered level: 100 tokens × ε_tok 3 each, 30,000 ≤ the budget
            assert rows["dp_epsilon"] == pytest.approx([300.0] * 100, rel=1e-12)
            assert sum(rows["dp_epsilon"]) <= budget


def _consistent_rows(n_users: int) -> datasets.Dataset:
    """Each user has two rows ``x{i} x0 x{i} x0 x{i}`` whose words 0, 2 and 4 are marked: six occurrences of one
    sensitive string per user; inputs i = 0, 1, 2 for a third of the users each."""
    texts, users, spans = [], [], []
    marks = [[0, 2], [6, 8], [12, 14]]
    for u in range(3 * n_users):
        i = u % 3
        for _ in range(2):
            texts.append(f"x{i} x0 x{i} x0 x{i}")
            users.append(u)
            spans.append(marks)
    return datasets.Dataset.from_dict({"text": texts, "uid": users, "spans": spans})


def _fresh_keys(secret, split, stream, scopes, digests):
    """The mutation: every occurrence gets a key of its own (no consistency)."""
    return [int(k) for k in np.random.default_rng(len(digests)).integers(0, 2**62, len(digests))]


@pytest.mark.slow
@pytest.mark.parametrize("mutated", [False, True], ids=["consistent", "mutant-one-draw-per-occurrence"])
def test_consistent_occurrences_are_one_draw_at_the_sensitive_law(t1d, monkeypatch, mutated):
    """consistent="user", ε_s = 1: per user, all six occurrences equal one draw, and the 2,000 draws per input
    follow T1D[1.0] (χ² at α/3, seed 2**40 + 5657); the mutant that draws every occurrence apart is caught by the
    equality check."""
    if mutated:
        monkeypatch.setattr(plan_module, "entity_keys", _fresh_keys)
    cfg = PrivatizerConfig(
        epsilon=2.0,
        model=t1d,
        user={"column": "uid"},
        sensitive={"epsilon": 1.0, "column": "spans", "detectors": [], "consistent": "user"},
    )
    priv = Privatizer(cfg, seed=SEED + 1)
    ds = _consistent_rows(2000)
    priv.fit_users(ds)
    out = ds.map(priv, batched=True, with_indices=True, batch_size=100)
    words = [t.split() for t in out["text"]]
    draws: dict[int, set[str]] = {}
    for w, u in zip(words, out["uid"], strict=True):
        draws.setdefault(u, set()).update([w[0], w[2], w[4]])
    equal = all(len(v) == 1 for v in draws.values())
    if mutated:
        assert not equal
        return
    assert equal
    for i in range(3):
        obs = Counter(next(iter(draws[u])) for u in draws if u % 3 == i)
        counts = np.array([obs[f"x{j}"] for j in range(3)])
        assert counts.sum() == 2000
        assert chi2_pvalue(counts, np.array(T1D[1.0][i])) > ALPHA / 3
