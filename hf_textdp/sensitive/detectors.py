"""Detectors by name, the spans of a batch, and what each detector reads (docs/mechanisms/selective.md §3–§5).

A detector has a ``name``, a ``reads_context`` flag (whether a position's selection can depend on words other
than the string it is part of) and ``detect(texts) -> RowSpans``. :func:`sensitive_spans` unions every
detector's spans with the user's span column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from .builtin import builtin_detector
from .defaults import KINDS, covered_kinds, default_left_out, resolve_detectors
from .models import PresidioDetector, SpacyDetector, presidio_pipeline
from .names import NameDetector
from .rare import RareDetector
from .spans import RowSpans, column_spans, union
from .spec import BUILTIN_DETECTORS, SensitiveSpec
from .view import Normalize, detection_view


__all__ = ["Detector", "build_detectors", "sensitive_spans", "detector_reads", "selection_info", "SELECTION_STATEMENT"]


class Detector(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def reads_context(self) -> bool: ...

    def detect(self, texts: Sequence[str]) -> RowSpans: ...


def build_detectors(spec: SensitiveSpec) -> list[Detector]:
    """The spec's detectors (the default set resolved), in order; optional ones import their library only when
    they first detect."""
    out: list[Detector] = []
    for name in resolve_detectors(spec):
        if name in BUILTIN_DETECTORS:
            out.append(builtin_detector(name))
        elif name.startswith("spacy:"):
            out.append(SpacyDetector(name, spec.labels))
        elif name == "rare" or name.startswith("rare:"):
            out.append(RareDetector(name))
        elif name == "name":
            out.append(NameDetector())
        else:
            out.append(PresidioDetector())
    return out


def sensitive_spans(
    detectors: Sequence[Detector],
    texts: Sequence[str],
    *,
    column: str | None = None,
    column_values: Sequence[Any] | None = None,
    row_ids: Sequence[int] | None = None,
    normalize: Normalize | None = None,
) -> RowSpans:
    """The union of every detector's spans and the user's spans (``column_values``, one entry per text).

    Detectors read each text as the tokenizer sees it (:func:`~hf_textdp.sensitive.view.detection_view`, decision
    D14) and their spans are mapped back to the original characters; the user's spans are the original's.

    Args:
        detectors (`list`): from :func:`build_detectors`.
        texts (`list[str]`): the batch's texts.
        column (`str`, *optional*): the span column's name (for errors).
        column_values (`list`, *optional*): that column's entries for the batch.
        row_ids (`list[int]`, *optional*): the rows' ids, named in errors (default: 0, 1, …).
        normalize (`callable`, *optional*): the tokenizer's normaliser (``str -> str``), if it has one.
    """
    parts: list[RowSpans] = []
    if detectors:
        view = detection_view(texts, normalize)
        parts = [view.to_original(d.detect(view.texts)) for d in detectors]
    if column_values is not None:
        ids = list(range(len(texts))) if row_ids is None else row_ids
        parts.append(column_spans(column_values, texts, column or "?", ids))
    return union(*parts) if parts else RowSpans.empty(len(texts))


def detector_reads(name: str) -> str:
    """``"context"`` for detectors that read words beside what they select (spaCy, Presidio, the cue words of
    the ``context`` rule and of ``name``), ``"match"`` for those that read only the characters they match and
    their two neighbours (the other built-in rules, ``rare``)."""
    if name in ("context", "name", "presidio") or name.startswith("spacy:"):
        return "context"
    return "match"


SELECTION_STATEMENT = (
    "Which positions are sensitive is visible: sensitive and other positions are released by separate mechanisms "
    "over separate classes, so the output shows each position's class. A 'match' detector decides from the "
    "characters of the string it matches alone; a 'context' detector (spaCy, Presidio, name) also reads the "
    "words around it, so a position's class can depend on other words of the row. User spans (the span column) are "
    "visible the same way. An identifier that no detector finds (and no span covers) is released like any other "
    "word: at the others' epsilon, or unchanged with others='keep'."
)


def _detector_info(name: str, labels: tuple[str, ...]) -> dict[str, Any]:
    info: dict[str, Any] = {"name": name, "reads": detector_reads(name), "covers": list(covered_kinds(name, labels))}
    if name == "presidio":
        info["pipeline"] = presidio_pipeline()
    return info


def selection_info(spec: SensitiveSpec) -> dict[str, Any]:
    """What the selection reveals and covers, as data for the report: each detector that ran (the default set
    resolved), what it reads and the kinds it finds, the kinds none of them finds, the default set's detectors left
    out here, the span column."""
    names = resolve_detectors(spec)
    detectors = [_detector_info(d, spec.labels) for d in names]
    covered = {k for d in detectors for k in d["covers"]}
    return {
        "detectors": detectors,
        "default_set": spec.is_default,
        "left_out": default_left_out(spec),
        "cannot_find": [k for k in KINDS if k not in covered],
        "column": spec.column,
        "labels": list(spec.labels) if any(d.startswith("spacy:") for d in names) else None,
        "render": spec.render,
        "statement": SELECTION_STATEMENT,
    }
