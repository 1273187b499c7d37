"""Reading a results folder of ``hf-textdp evaluate`` (one JSON per result): used by the cards, the hub
and the evaluation's plots and summaries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


__all__ = ["load_results"]


def load_results(folder: str | Path) -> list[dict[str, Any]]:
    """Every result JSON in ``folder`` (not recursive), sorted by task, label, setting and ε."""
    out = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            res = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(res, dict) and "task" in res and "setting" in res:
            res["_path"] = str(path)
            out.append(res)
    return out
