"""Measured recoveries of the attack recipes, quoted by privacy reports and dataset cards (docs/attacks.md).

``hf_textdp/data/attack_table.json`` holds, per configuration the attack recipes measured (model,
mechanism parameters, post-processing, candidate setting), how many private tokens each attack
recovered. A report whose configuration is in the table quotes it; nothing is computed from the data
being released; :func:`hf_textdp.accounting.recovery_statement` words it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from .candidates import parse_candidates
from .config import PrivatizerConfig


__all__ = ["TABLE_FILE", "config_key", "measured_recovery"]

TABLE_FILE = "attack_table.json"


def config_key(config: PrivatizerConfig) -> str:
    """The table's key of a configuration: everything that sets the release's law, as canonical JSON
    (the mechanism's parameters with their defaults filled in, so an option left at its default matches)."""
    mech, _ = config.build()
    return json.dumps(
        {
            "model": config.model,
            "mechanism": config.mechanism,
            "parameters": mech.parameters(),
            "postprocess": config.postprocess if mech.kind == "additive" else "none",
            "candidates": parse_candidates(config.candidates).to_value(),
        },
        sort_keys=True,
    )


@lru_cache(maxsize=1)
def _table() -> dict[str, dict[str, Any]]:
    path = resources.files("hf_textdp") / "data" / TABLE_FILE
    if not path.is_file():
        return {}
    raw = json.loads(path.read_text(encoding="utf-8"))
    return {e["key"]: e for e in raw.get("entries", [])}


def measured_recovery(config: PrivatizerConfig) -> dict[str, Any] | None:
    """The attack table's entry for ``config`` (without its key), or ``None`` when it was not measured."""
    entry = _table().get(config_key(config))
    return None if entry is None else {k: v for k, v in entry.items() if k != "key"}
