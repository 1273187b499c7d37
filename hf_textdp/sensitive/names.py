"""The ``name`` detector: person names from public name statistics and the words around them (selective.md §3).

NER finds names by their shape and case, so it misses lower-case names (``isa tarantino``) and names opening a
message, and the rarity table (``rare``) misses names that are also moderately common words. This detector reads
the US Census Bureau's 1990 name lists (public domain; 5,163 given names and 88,799 surnames with the share of
people holding each, shipped as ``hf_textdp/data/census_names.tsv.gz``, built by ``scripts/census_names.py``) and
``wordfreq``'s English frequencies (Speer 2022), and decides from a word, its neighbours and a few cue words:

- a word is *given-like* when it is a census given name and either not a common English word (Zipf < 4.5) or
  common as a name relative to its frequency as a word (log10 of its population share minus its Zipf frequency
  ≥ −7.6: ``john``, ``mary``, not ``will``, ``may``, ``young``); *surname-like* likewise with Zipf < 3.5
  (``perez``, ``tarantino``, not ``white``, ``still``); *uncommon* when its Zipf frequency is below 3;
- selected, in this order: a given-like word followed by a surname-like or uncommon word, or by a listed word
  that is capitalised or not common (and a third such word); two adjacent surname-like words, one of them
  uncommon; two adjacent capitalised words, one name-like and the other listed, or a listed given name and a
  listed surname (``Will Young``); a name-like, capitalised or uncommon word after a cue (``hi``, ``dear``,
  ``thanks``, ``regards``, ``this is``, ``my name is``, ``mr``, ``said``, ``by``, ``from``, ``my husband`` …)
  with the word after it, or before one (``here``, ``writing``, ``said``); a capitalised name-like word inside
  a sentence; the one to three words ending a row after a dash (a signature); and then any uncommon word beside
  a selected one (foreign given names the lists lack).

Common words that are also names (``will``, ``young``, ``white``) are therefore selected only capitalised beside
another name, not wherever they occur; the ``context`` rule's cue words (``ssn``, ``iban``, ``ref``) never are.
The lists and the table are public and fixed; nothing is learnt from the input. The detector reads context (its
neighbours and cue words), so a word's selection can depend on other words of the row.
"""

from __future__ import annotations

import functools
import gzip
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from typing import NamedTuple

from .rare import zipf_lookup
from .rules import is_label
from .spans import RowSpans
from .view import fold


__all__ = ["NameDetector", "census_names"]

#: Zipf frequency below which a listed given name (surname) is name-like whatever its share; below UNCOMMON a word
#: is uncommon (set on the tuning set of issue 54 and the customer messages of seed 5403)
GIVEN_ZIPF, SURNAME_ZIPF, UNCOMMON_ZIPF = 4.5, 3.5, 3.0
#: log10(population share) − Zipf frequency at or above which a listed word is name-like however common
NAMENESS = -7.6
_SHARE_FLOOR = 3e-6  # the lists' shares are rounded to 0.001 %; a listed 0.000 % counts as 0.0003 %
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")
_GAP = re.compile(r"[\s,:;(\-–—.]*")  # what may stand between a cue and a name, or between two name words: "\s-"
_SENTENCE_END = frozenset('.!?:;"(\n')
_CUES_BEFORE = {
    ("hi",), ("hello",), ("hey",), ("dear",), ("thanks",), ("thank", "you"), ("regards",), ("cheers",),
    ("sincerely",), ("yours",), ("this", "is"), ("i'm",), ("i’m",), ("i", "am"), ("im",), ("my", "name", "is"),
    ("name", "is"), ("name",), ("called",), ("mr",), ("mrs",), ("ms",), ("miss",), ("dr",), ("prof",), ("sir",),
    ("madam",), ("said",), ("says",), ("asked",), ("by",), ("from",), ("cc",), ("attn",), ("contact",), ("ask",),
    ("signed",), ("my", "husband"), ("my", "wife"), ("my", "partner"), ("my", "son"), ("my", "daughter"),
    ("my", "mother"), ("my", "father"), ("my", "brother"), ("my", "sister"), ("my", "colleague"),
}  # fmt: skip
_NAME_WORD = r"[^\W\d_]+(?:['’.-][^\W\d_]+)*"
#: a dash, then one to three words (white space between them, so a long word is never split) ending the row
_SIGN_OFF = re.compile(rf"(?:^|\s)(?:--?|–|—)\s*({_NAME_WORD}(?:\s+{_NAME_WORD}){{0,2}})[.!]?\s*$")
_CUES_AFTER = frozenset({"here", "writing", "speaking", "said", "says", "asked"})


@functools.lru_cache(maxsize=1)
def census_names() -> dict[str, tuple[float, float]]:
    """Each listed name (lower case) with its given-name share (the mean of the male and female shares) and its
    surname share, as fractions of the 1990 US population (``nan``: not in that list)."""
    raw = files("hf_textdp").joinpath("data/census_names.tsv.gz").read_bytes()
    out: dict[str, tuple[float, float]] = {}
    for line in gzip.decompress(raw).decode("ascii").splitlines()[1:]:
        name, male, female, surname = line.split("\t")
        given = (float(male or 0) + float(female or 0)) / 200.0 if male or female else math.nan
        out[name] = (given, float(surname) / 100.0 if surname else math.nan)
    return out


class _Word(NamedTuple):
    start: int
    end: int
    lower: str
    given: bool  # given-like
    surname: bool  # surname-like
    in_given: bool  # in the given-name list, however common
    in_surname: bool  # in the surname list, however common
    uncommon: bool
    zipf: float
    cap: bool

    @property
    def listed(self) -> bool:
        return self.in_given or self.in_surname


_Class = tuple[bool, bool, bool, bool, float]  # given-like, surname-like, in_given, in_surname, Zipf


def _name_like(share: float, zipf: float, limit: float) -> bool:
    if math.isnan(share):
        return False
    return zipf < limit or math.log10(max(share, _SHARE_FLOOR)) - zipf >= NAMENESS


@dataclass
class NameDetector:
    """Person names from the census lists, word frequencies and cue words (module docstring)."""

    name: str = "name"
    reads_context: bool = True
    _words: dict[str, _Class] = field(default_factory=dict, repr=False)

    def _classify(self, word: str, zipf: Callable[[str, str], float]) -> _Class:
        found = self._words.get(word)
        if found is None and is_label(word):  # "ssn", "iban", "ref": labels of a value, never part of a name
            found = self._words[word] = (False, False, False, False, 8.0)
        if found is None:
            z = float(zipf(word, "en"))
            given, surname = census_names().get(fold(word), (math.nan, math.nan))
            g_like, s_like = _name_like(given, z, GIVEN_ZIPF), _name_like(surname, z, SURNAME_ZIPF)
            found = self._words[word] = (g_like, s_like, not math.isnan(given), not math.isnan(surname), z)
        return found

    def _row_words(self, text: str, zipf: Callable[[str, str], float]) -> list[_Word]:
        out = []
        for m in _WORD.finditer(text):
            w = m.group()
            given, surname, in_given, in_surname, z = self._classify(w, zipf)
            cap = len(w) > 1 and w[0].isupper() and not w.isupper()
            out.append(
                _Word(m.start(), m.end(), w.lower(), given, surname, in_given, in_surname, z < UNCOMMON_ZIPF, z, cap)
            )
        return out

    def detect(self, texts: Sequence[str]) -> RowSpans:
        zipf = zipf_lookup(self.name)
        per_row = []
        for text in texts:
            words = self._row_words(text, zipf)
            chosen = _select(text, words)
            per_row.append([(w.start, w.end) for w, c in zip(words, chosen, strict=True) if c])
        return RowSpans.from_lists(per_row)


def _adjacent(text: str, a: _Word, b: _Word) -> bool:
    """Whether two consecutive words belong to one name: only white space or one hyphen between them."""
    return text[a.end : b.start].strip() in ("", "-")


def _after_cue(text: str, words: list[_Word], i: int) -> bool:
    """Whether a cue of one to three words ends just before word ``i`` (only punctuation between)."""
    if i == 0 or _GAP.fullmatch(text[words[i - 1].end : words[i].start]) is None:
        return False
    return any(tuple(w.lower for w in words[max(i - k, 0) : i]) in _CUES_BEFORE for k in (1, 2, 3))


def _before_cue(text: str, words: list[_Word], i: int) -> bool:
    """Whether word ``i`` is followed by a cue (``here``, ``said`` …), only punctuation between."""
    if i + 1 >= len(words) or _GAP.fullmatch(text[words[i].end : words[i + 1].start]) is None:
        return False
    return words[i + 1].lower in _CUES_AFTER


def _opens_sentence(text: str, start: int) -> bool:
    """Whether the word at ``start`` opens the text, a sentence, a quotation or a bracket."""
    j = start
    while j > 0 and text[j - 1].isspace():
        j -= 1
    return j == 0 or text[j - 1] in _SENTENCE_END


def _tail(w: _Word) -> bool:
    """Can follow a given name in a name: surname-like, uncommon, or listed and capitalised or not common."""
    return w.surname or w.uncommon or (w.listed and (w.cap or w.zipf < GIVEN_ZIPF))


def _capital_pair(a: _Word, b: _Word) -> bool:
    """Two capitalised words, one name-like and the other listed, or a listed given name and a listed surname."""
    return (a.listed and (a.given or a.surname or b.surname)) or (a.in_given and b.in_surname)


def _select(text: str, words: list[_Word]) -> list[bool]:
    """Which words of a row are selected (the rules of the module docstring, in its order)."""
    n = len(words)
    sel = [False] * n
    nxt = [i + 1 < n and _adjacent(text, words[i], words[i + 1]) for i in range(n)]
    for i, w in enumerate(words):
        if w.given and nxt[i] and _tail(words[i + 1]):
            sel[i] = sel[i + 1] = True
            third = words[i + 2] if nxt[i + 1] else None
            if third is not None and (third.surname or third.uncommon) and (third.cap or third.zipf < SURNAME_ZIPF):
                sel[i + 2] = True
        if nxt[i] and w.surname and words[i + 1].surname and (w.uncommon or words[i + 1].uncommon):
            sel[i] = sel[i + 1] = True
        if w.cap and nxt[i] and words[i + 1].cap and _capital_pair(w, words[i + 1]):
            sel[i] = sel[i + 1] = True
        name_like = w.given or w.surname or (w.cap and (w.listed or w.uncommon))
        if (name_like or w.uncommon) and _after_cue(text, words, i):
            sel[i] = True
            if nxt[i] and (_tail(words[i + 1]) or words[i + 1].listed or words[i + 1].cap):
                sel[i + 1] = True
        if (name_like or w.uncommon) and _before_cue(text, words, i):
            sel[i] = True
        if w.cap and (w.given or w.surname) and not _opens_sentence(text, w.start):
            sel[i] = True
    _sign_off(text, words, sel)
    _extend(sel, words, nxt)
    return sel


def _sign_off(text: str, words: list[_Word], sel: list[bool]) -> None:
    """The one to three words that end a row after a dash (``-- Ann Lee``, ``— ann``) are a signature when each is
    listed, uncommon or capitalised, and one is name-like or uncommon."""
    m = _SIGN_OFF.search(text)
    if m is None:
        return
    last = [i for i, w in enumerate(words) if w.start >= m.start(1)]
    run = [words[i] for i in last]
    if all(w.listed or w.uncommon or w.cap for w in run) and any(w.given or w.surname or w.uncommon for w in run):
        for i in last:
            sel[i] = True


def _extend(sel: list[bool], words: list[_Word], nxt: list[bool]) -> None:
    """Uncommon words beside a selected word join it (one pass forward, one backward: names of up to four words)."""
    for i in range(len(words) - 1):
        if nxt[i] and sel[i] and not sel[i + 1] and words[i + 1].uncommon:
            sel[i + 1] = True
    for i in range(len(words) - 1, 0, -1):
        if nxt[i - 1] and sel[i] and not sel[i - 1] and words[i - 1].uncommon:
            sel[i - 1] = True
