"""Measured recoveries of the attack recipes, quoted by privacy reports and dataset cards (docs/attacks.md).

``hf_textdp/data/attack_table.json`` holds, per configuration the attack recipes measured (model,
mechanism parameters, post-processing, candidate setting), how many private tokens each named attack
recovered: a lower bound on leakage from those attacks, never a measurement of all an adversary can
recover. A report whose configuration is in the table quotes it; nothing is computed from the data being
released; :func:`hf_textdp.integrations.report_text.recovery_statement` words it. The key of a configuration is
:func:`hf_textdp.release_report.config_key`'s.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any


__all__ = ["TABLE_FILE", "lookup"]

TABLE_FILE = "attack_table.json"


@lru_cache(maxsize=1)
def _table() -> dict[str, dict[str, Any]]:
    path = resources.files("hf_textdp") / "data" / TABLE_FILE
    if not path.is_file():
        return {}
    raw = json.loads(path.read_text(encoding="utf-8"))
    return {e["key"]: e for e in raw.get("entries", [])}


def lookup(key: str) -> dict[str, Any] | None:
    """The table's entry under ``key`` (without the key), or ``None`` when that configuration was not measured."""
    entry = _table().get(key)
    return None if entry is None else {k: v for k, v in entry.items() if k != "key"}
