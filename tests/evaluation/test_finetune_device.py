"""``hf-textdp evaluate --device`` and ``--no-resume`` reach the fine-tune recipes (they were dropped silently)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from hf_textdp.errors import InvalidParameterError
from hf_textdp.evaluation import finetune_full
from hf_textdp.evaluation.recipe import run_recipe_file
from tests.evaluation.test_finetune_converged import _raw


def _stub(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, str]]:
    """Replace data loading and training: each unit's call (unit, device) is recorded, its records are stubs."""
    calls: list[tuple[Any, str]] = []

    def run_unit(unit, splits, rec, model_dir, tokenizer, num_labels, device="cpu"):  # type: ignore[no-untyped-def]
        calls.append((unit, device))
        settings = ["clean"] if unit.epsilon is None else ["train_only", "train_and_test"]
        return {s: {"setting": s, "accuracy": 50.0, "wall_s": 0.0} for s in settings}

    monkeypatch.setattr(finetune_full, "_load_splits", lambda *a, **k: {})
    monkeypatch.setattr(finetune_full, "_run_unit", run_unit)
    return calls


def test_resume_skips_and_no_resume_recomputes(tiny_bert: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    calls = _stub(monkeypatch)
    raw = _raw(tiny_bert)
    only = lambda u: u.epsilon is None  # noqa: E731  (the two clean units)
    first = finetune_full.run_full_finetune(raw, tmp_path, only=only)
    assert len(first) == 2 and len(calls) == 2 and {d for _, d in calls} == {"cpu"}
    finetune_full.run_full_finetune(raw, tmp_path, only=only)
    assert len(calls) == 2  # resumed: nothing ran again
    json.loads(first[0].read_text())  # a real record file
    finetune_full.run_full_finetune(raw, tmp_path, only=only, resume=False)
    assert len(calls) == 4


def test_device_reaches_the_units(tiny_bert: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    calls = _stub(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    finetune_full.run_full_finetune(_raw(tiny_bert), tmp_path, only=lambda u: u.epsilon is None, device="cuda:1")
    assert [d for _, d in calls] == ["cuda:1", "cuda:1"]


def test_device_errors_name_the_parameter(tiny_bert: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    _stub(monkeypatch)
    with pytest.raises(InvalidParameterError, match="device must be"):
        finetune_full.run_full_finetune(_raw(tiny_bert), tmp_path, device="gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InvalidParameterError, match="CUDA is not available"):
        finetune_full.run_full_finetune(_raw(tiny_bert), tmp_path, device="cuda")


def test_frozen_finetune_recipe_refuses_cuda(tmp_path: Path):
    recipe = tmp_path / "frozen.yaml"
    recipe.write_text("name: frozen\nfinetune: {task: {name: trec}}\nprivatizers: []\n")
    with pytest.raises(InvalidParameterError, match="runs on the CPU only"):
        run_recipe_file(recipe, tmp_path / "out", device="cuda")
