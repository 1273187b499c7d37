"""The built-in detectors: regular expressions with a check, no model (docs/mechanisms/selective.md §3).

Each reads the characters of what it matches and one character on either side (to find where a run starts
and stops), never the rest of the text: whether a position is selected depends on the string it is part of
alone. A batch is searched as one string (the rows joined by ``"\\n"``, which no pattern can match), so the cost
is one C-level scan per detector, and a match never runs from one row into the next.

- ``email``: ``local@domain.tld`` (letters, digits, ``._%+-`` before the ``@``; dotted labels after).
- ``url``: ``http://``, ``https://``, ``ftp://`` or ``www.`` up to the next whitespace, trailing punctuation
  (``.,;:!?)]'"``) left out.
- ``phone``: an optional ``+country`` code and ``(area)`` code, then groups of digits with optional ``" "``,
  ``"-"`` or ``"."`` separators, 7 to 15 digits in all (E.164's maximum).
- ``card``: 13 to 19 digits in groups separated by single spaces or dashes that pass the Luhn check
  (ISO/IEC 7812-1 Annex B); within a longer run of groups, each run of consecutive groups is tried, longest
  first.
- ``ip``: an IPv4 or IPv6 address, checked by :mod:`ipaddress`.
- ``number``: any run of digits.
- ``id``: a run of letters, digits, ``_`` and ``-`` holding at least one letter and one digit.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .spans import RowSpans


__all__ = ["PatternDetector", "builtin_detector", "luhn_valid"]

# a check takes a match's text and returns the (start, end) parts of it that are kept
Check = Callable[[str], list[tuple[int, int]]]


def luhn_valid(digits: str) -> bool:
    """The Luhn check (ISO/IEC 7812-1 Annex B) of a string of ASCII digits.

    >>> luhn_valid("4111111111111111"), luhn_valid("4111111111111112")
    (True, False)
    """
    total = 0
    for k, c in enumerate(reversed(digits)):
        d = ord(c) - 48
        if k % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card(match: str) -> list[tuple[int, int]]:
    """The card numbers in a run of digit groups: runs of consecutive groups with 13–19 digits in all that pass
    the Luhn check, longest first, left to right, not overlapping."""
    if len(match) < 13:  # most digit runs (years, counts) end here
        return []
    groups = [(m.start(), m.end()) for m in _DIGIT_GROUP.finditer(match)]
    digits = [b - a for a, b in groups]
    found: list[tuple[int, int]] = []
    taken = [False] * len(groups)
    for width in range(len(groups), 0, -1):
        for i in range(len(groups) - width + 1):
            j = i + width
            if any(taken[i:j]) or not 13 <= sum(digits[i:j]) <= 19:
                continue
            a, b = groups[i][0], groups[j - 1][1]
            if luhn_valid("".join(match[x:y] for x, y in groups[i:j])):
                found.append((a, b))
                taken[i:j] = [True] * width
    return sorted(found)


def _phone(match: str) -> list[tuple[int, int]]:
    n = sum(c.isdigit() for c in match)
    return [(0, len(match))] if 7 <= n <= 15 else []


def _ip(match: str) -> list[tuple[int, int]]:
    if not any(c not in ":" for c in match):  # "::" alone is an address, but in text it is punctuation
        return []
    try:
        ipaddress.ip_address(match)
    except ValueError:
        return []
    return [(0, len(match))]


_URL_TAIL = ".,;:!?)]'\""


def _url(match: str) -> list[tuple[int, int]]:
    end = len(match.rstrip(_URL_TAIL))
    return [(0, end)] if end > len("www.") else []


_DIGIT_GROUP = re.compile(r"[0-9]+")

# No pattern matches "\n" (the row separator of a batch): every class excludes it.
_PATTERNS: dict[str, tuple[str, Check | None]] = {
    "email": (r"(?<![\w.%+-])[\w.%+-]+@[^\W_](?:[\w-]*[^\W_])?(?:\.[^\W_](?:[\w-]*[^\W_])?)+", None),
    "url": (r"(?<![\w/])(?:https?://|ftp://|www\.)[^\s<>]+", _url),
    "phone": (
        r"(?<![\w+.:])(?:\+[0-9]{1,3}[ .-]?)?(?:\([0-9]{1,4}\)[ .-]?)?[0-9]{2,5}(?:[ .-]?[0-9]{2,5}){1,5}"
        r"(?![\w:]|\.[0-9])",
        _phone,
    ),
    "card": (r"(?<![0-9])[0-9]+(?:[ -][0-9]+)*(?![0-9])", _card),
    "ip": (
        r"(?<![\w.:])(?:[0-9]{1,3}(?:\.[0-9]{1,3}){3}|[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7})(?![\w:]|\.[0-9])",
        _ip,
    ),
    "number": (r"\d+", None),
    "id": (r"(?<![\w-])(?=[\w-]*\d)(?=[\w-]*[^\W\d_])[\w-]+", None),
}


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
        pattern, check = _PATTERNS[name]
        det = _COMPILED[name] = PatternDetector(name, re.compile(pattern), check)
    return det
