"""The attack records of a results folder (one JSON per mechanism and ε, written by the recipes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


__all__ = ["inversion_model_id", "inversion_pool", "read_records"]


def read_records(folder: str | Path) -> list[dict[str, Any]]:
    """Every attack record in a results folder."""
    out = []
    for p in sorted(Path(folder).glob("*.json")):
        rec = json.loads(p.read_text(encoding="utf-8"))
        if isinstance(rec, dict) and "attacks" in rec and "recovery_top1" in rec:
            out.append(rec)
    return out


def inversion_model_id(record: dict[str, Any]) -> str | None:
    """Which trained inversion model a record used (one pooled over a family's ε serves several records): the
    record's privatizer label, the model's pool and its loss curve, serialised; ``None`` for a record without one.
    The label keeps two families apart whose models trained alike (laplace and truncated_laplace release the same
    tokens at ε = 150–350, and training is deterministic: only the curves' wall times would tell them apart)."""
    info = record.get("inversion_model") or {}
    curve = info.get("loss_curve")
    if not curve:
        return None
    return json.dumps([record.get("label", record["mechanism"]), inversion_pool(record), curve], sort_keys=True)


def inversion_pool(record: dict[str, Any]) -> str:
    """The ε the record's inversion model was trained on, as the summaries print them (``40, 60, 80, 120``)."""
    info = record.get("inversion_model") or {}
    return ", ".join(f"{e:g}" for e in (info.get("pool") or [record["epsilon"]]))
