"""The built-in detectors: regular expressions with a check, no model (docs/mechanisms/selective.md §3).

Each reads the characters of what it matches and one character on either side (to find where a run starts
and stops), never the rest of the text: whether a position is selected depends on the string it is part of
alone. A batch is searched as one string (the rows joined by ``"\\n"``, which no pattern can match), so the cost
is one C-level scan per detector, and a match never runs from one row into the next.

The rules themselves, one pattern and check each, are in :mod:`.rules` (``email``, ``url``, ``phone``, ``card``,
``ip``, ``number``, ``id``, ``iban``, ``handle``, ``address``, ``date``, ``context``); docs/mechanisms/selective.md
§3 tabulates what each finds.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .rules import READS_CONTEXT, RULES, Check, luhn_valid
from .spans import RowSpans


__all__ = ["PatternDetector", "builtin_detector", "luhn_valid"]


@dataclass(frozen=True)
class PatternDetector:
    """A built-in detector: a compiled pattern and an optional check of each match (module docstring)."""

    name: str
    pattern: re.Pattern[str]
    check: Check | None = None
    reads_context: bool = False

    def detect(self, texts: Sequence[str]) -> RowSpans:
        """The spans this detector finds in each of ``texts``."""
        n = len(texts)
        joined = "\n".join(texts)
        starts: list[int] = []
        ends: list[int] = []
        check = self.check
        for m in self.pattern.finditer(joined):
            a = m.start()
            if check is None:
                starts.append(a)
                ends.append(m.end())
                continue
            for x, y in check(m.group()):
                starts.append(a + x)
                ends.append(a + y)
        if not starts:
            return RowSpans.empty(n)
        lens = np.fromiter(map(len, texts), dtype=np.int64, count=n)
        base = np.cumsum(lens + 1) - (lens + 1)  # where each row starts in the joined string
        s = np.asarray(starts, dtype=np.int64)
        e = np.asarray(ends, dtype=np.int64)
        rows = np.searchsorted(base, s, side="right") - 1
        return RowSpans(rows, s - base[rows], e - base[rows], n)


_COMPILED: dict[str, PatternDetector] = {}


def builtin_detector(name: str) -> PatternDetector:
    """The built-in detector called ``name`` (one of :data:`~hf_textdp.sensitive.spec.BUILTIN_DETECTORS`)."""
    det = _COMPILED.get(name)
    if det is None:
        pattern, check, flags = RULES[name]
        det = _COMPILED[name] = PatternDetector(name, re.compile(pattern, flags), check, name in READS_CONTEXT)
    return det
