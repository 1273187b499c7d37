"""The candidate restriction of a model (its kept ids, the remap of inputs outside C, the piece classes) is kept
in the disk cache: a warm start reads it instead of checking every token's script and searching again."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from hf_textdp.io import candidate_sets, models


SPEC = {"set": "no_reserved", "scripts": ["latin"]}


def _same(a: object, b: object) -> None:
    for name in ("candidate_ids", "remap_ids", "remap_pos", "token_class"):
        x, y = getattr(a, name), getattr(b, name)
        if x is None or y is None:
            assert x is None and y is None, name
        elif isinstance(x, torch.Tensor):
            assert torch.equal(x, y), name
        else:
            assert np.array_equal(np.asarray(x), np.asarray(y)) and np.asarray(x).dtype == np.asarray(y).dtype, name
    assert a.candidates == b.candidates  # type: ignore[attr-defined]


def test_warm_start_reads_the_restriction(
    tiny_bert: str, private_textdp_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(models, "_CACHE", {})
    first = models.load_space(tiny_bert, "cpu", SPEC)
    assert len(list((private_textdp_cache / "candidates").glob("*.json"))) == 1

    def recomputed(*args: object, **kwargs: object) -> None:
        raise AssertionError("the restriction was computed again")

    monkeypatch.setattr(models, "_CACHE", {})  # a new process: only the disk cache is warm
    monkeypatch.setattr(candidate_sets, "restrict", recomputed)
    _same(first, models.load_space(tiny_bert, "cpu", SPEC))


def test_another_setting_or_a_damaged_entry_computes_again(
    tiny_bert: str, private_textdp_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(models, "_CACHE", {})
    first = models.load_space(tiny_bert, "cpu", SPEC)
    models.load_space(tiny_bert, "cpu", {"set": "all"})
    entries = sorted((private_textdp_cache / "candidates").glob("*.json"))
    assert len(entries) == 2  # one entry per setting
    for entry in entries:
        entry.write_text('{"cand": "not a list"}')
    monkeypatch.setattr(models, "_CACHE", {})
    _same(first, models.load_space(tiny_bert, "cpu", SPEC))  # computed again from the model, and rewritten
    assert sum(e.read_text() != '{"cand": "not a list"}' for e in entries) == 1  # the setting loaded, rewritten
