"""The attack records of a results folder (one JSON per mechanism and ε, written by the recipes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


__all__ = ["read_records"]


def read_records(folder: str | Path) -> list[dict[str, Any]]:
    """Every attack record in a results folder."""
    out = []
    for p in sorted(Path(folder).glob("*.json")):
        rec = json.loads(p.read_text(encoding="utf-8"))
        if isinstance(rec, dict) and "attacks" in rec and "recovery_top1" in rec:
            out.append(rec)
    return out
