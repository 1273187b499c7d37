"""Selective privatization: which positions are sensitive (docs/mechanisms/selective.md).

The ``sensitive=`` setting (:func:`parse_sensitive`), the detectors that find identifiers in text
(:func:`build_detectors`), the union of their spans with the user's span column (:func:`sensitive_spans`), and
the mapping of character spans to token positions (:func:`sensitive_mask`).
"""

from __future__ import annotations

from .builtin import luhn_valid
from .defaults import KINDS, best_english_ner, english_ner_pipelines, resolve_detectors
from .detectors import Detector, build_detectors, detector_reads, selection_info, sensitive_spans
from .positions import expand_words, overlap_mask, sensitive_mask, static_offsets
from .spans import RowSpans, column_spans, union
from .spec import BUILTIN_DETECTORS, DEFAULT_SPACY_LABELS, SensitiveSpec, parse_sensitive
from .view import detection_view


__all__ = [
    "BUILTIN_DETECTORS",
    "DEFAULT_SPACY_LABELS",
    "Detector",
    "KINDS",
    "best_english_ner",
    "detection_view",
    "english_ner_pipelines",
    "resolve_detectors",
    "RowSpans",
    "SensitiveSpec",
    "build_detectors",
    "column_spans",
    "detector_reads",
    "expand_words",
    "luhn_valid",
    "overlap_mask",
    "parse_sensitive",
    "selection_info",
    "sensitive_mask",
    "sensitive_spans",
    "static_offsets",
    "union",
]
