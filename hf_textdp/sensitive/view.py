"""What the detectors read: each text as the tokenizer sees it, with offsets back to the original (decision D14).

A tokenizer's normaliser deletes or rewrites characters before it splits a text (BERT's drops every format and
control character, Unicode category C; SentencePiece models apply NFKC), so an identifier with a zero-width space,
soft hyphen, word joiner or U+FEFF inside it is released whole while a pattern over the raw string misses it
(issue 53, S1). The detectors therefore read a *view* of each text, built character by character:

- dropped: format, control (other than tab, line feed and carriage return), unassigned, private-use and
  surrogate characters (categories Cf, Cc, Cn, Co, Cs) and combining marks (Mn, Me), whatever the tokenizer;
- rewritten: every other character to its NFKC form (full-width digits, ligatures, no-break spaces), any other
  white space to ``" "``, then through the tokenizer's normaliser where it has one; a change of case or accent
  alone is not applied (NER reads case; the patterns ignore it);
- reversed: a run after RIGHT-TO-LEFT OVERRIDE (U+202E) up to its POP DIRECTIONAL FORMATTING (U+202C) or the
  line's end, which displays backwards, is read in display order.

Spans found in the view map back to the original characters they came from (the first to the last, so a dropped
character inside an identifier is selected with it).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .spans import RowSpans


__all__ = ["TextView", "detection_view", "view_char", "fold"]

Normalize = Callable[[str], str]

_DROP = frozenset({"Cf", "Cc", "Cn", "Co", "Cs", "Mn", "Me"})
_KEEP_CONTROLS = frozenset("\t\n\r")
_RLO, _PDF = "\u202e", "\u202c"
# text made only of these characters reads the same in the view (printable ASCII and the three kept controls)
_PLAIN = re.compile(r"[^\x20-\x7e\t\n\r]")


def fold(s: str) -> str:
    """Case and accents removed: two strings equal under this differ only in what the view keeps as written."""
    return "".join(c for c in unicodedata.normalize("NFD", s) if not unicodedata.combining(c)).casefold()


def view_char(c: str, normalize: Normalize | None = None) -> str:
    """What character ``c`` reads as in the view (``""``: dropped), with ``normalize`` the tokenizer's normaliser.

    >>> view_char("\\u200b"), view_char("\\uff14"), view_char("\\u00a0"), view_char("É", str.lower)
    ('', '4', ' ', 'É')
    """
    if c in _KEEP_CONTROLS:
        return c
    if _dropped(c):
        return ""
    out = "".join(" " if x.isspace() else x for x in unicodedata.normalize("NFKC", c))
    if normalize is not None and out.strip():
        # what the normaliser makes of it, without the spaces or "▁" marks it may add around a character
        norm = "".join(x for x in normalize(out) if not (x.isspace() or x == "\u2581" or _dropped(x)))
        if not norm:
            return ""  # the tokenizer deletes it
        if fold(norm) != fold(out.strip()):  # more than case or accents changed: the tokenizer reads another
            out = norm
    return out


def _dropped(x: str) -> bool:
    return x not in _KEEP_CONTROLS and unicodedata.category(x) in _DROP


@dataclass(frozen=True)
class TextView:
    """The texts the detectors read and, per row, each view character's original index (``None``: the same)."""

    texts: list[str]
    maps: list[np.ndarray | None]

    def to_original(self, spans: RowSpans) -> RowSpans:
        """Spans of the view as spans of the original texts: from the first original character a span's view
        characters come from to the last (so dropped characters inside it are covered)."""
        if spans.rows.size == 0 or all(m is None for m in self.maps):
            return spans
        starts, ends = spans.starts.copy(), spans.ends.copy()
        triples = zip(spans.rows.tolist(), spans.starts.tolist(), spans.ends.tolist(), strict=True)
        for k, (r, a, b) in enumerate(triples):
            m = self.maps[r]
            if m is None:
                continue
            part = m[a:b]
            starts[k], ends[k] = int(part.min()), int(part.max()) + 1
        return RowSpans(spans.rows, starts, ends, spans.n_rows)


class _Table:
    """:func:`view_char` for one normaliser, cached per character."""

    def __init__(self, normalize: Normalize | None) -> None:
        self.normalize = normalize
        self.cache: dict[str, str] = {}

    def __call__(self, c: str) -> str:
        out = self.cache.get(c)
        if out is None:
            out = self.cache[c] = view_char(c, self.normalize)
        return out


def _reverse_overrides(text: str, parts: list[str]) -> tuple[list[str], np.ndarray]:
    """Each RLO run's characters (``parts`` per original character) in display order, and their indices."""
    order = np.arange(len(text))
    for m in re.finditer(f"{_RLO}([^{_PDF}\\n]*)", text):
        a, b = m.span(1)
        order[a:b] = order[a:b][::-1]
    parts = [parts[i] for i in order.tolist()]
    widths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    return parts, np.repeat(order, widths)


def _row_view(text: str, table: _Table, ascii_same: bool) -> tuple[str, np.ndarray | None]:
    if ascii_same and _PLAIN.search(text) is None:
        return text, None
    parts = [table(c) for c in text]
    if _RLO in text:
        parts, index = _reverse_overrides(text, parts)
        return "".join(parts), index
    view = "".join(parts)
    if len(view) == len(text) and all(len(p) == 1 for p in parts):
        return view, None
    widths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    return view, np.repeat(np.arange(len(text), dtype=np.int64), widths)


def detection_view(texts: Sequence[str], normalize: Normalize | None = None) -> TextView:
    """The view of ``texts`` the detectors read (module docstring); ``normalize``: the tokenizer's normaliser
    (``None``: a tokenizer without one, or whitespace words of a static vector file).

    >>> v = detection_view(["mail a\\u200b@b.example"])
    >>> v.texts[0], v.maps[0].tolist()[5:8]
    ('mail a@b.example', [5, 7, 8])
    """
    table = _Table(normalize)
    # printable ASCII reads as itself unless the normaliser changes more than its case
    ascii_same = all(table(chr(c)) == chr(c) for c in range(0x20, 0x7F))
    views = [_row_view(t, table, ascii_same) for t in texts]
    return TextView([v for v, _ in views], [m for _, m in views])
