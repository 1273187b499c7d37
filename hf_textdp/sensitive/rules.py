"""The built-in rules: one regular expression and an optional check per detector (docs/mechanisms/selective.md §3).

Each rule decides from the characters it matches and one character on either side, except ``context``, which
reads a cue word (``born``, ``MRN``, ``passport``, ``call`` …) and selects the value beside it, as Presidio's
context enhancement does. A check takes a match's text and returns the ``(start, end)`` parts of it that are kept.
No pattern matches ``"\\n"``, the row separator of a batch.

Phone numbers are matched by shape (digit groups, ``+``, ``(0)``, 7–15 digits) rather than validated against a
numbering plan (``phonenumbers``): a fictional, unallocated or foreign number is still an identifier to a reader,
and a national number has no region to validate against.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable


__all__ = ["RULES", "Check", "luhn_valid", "iban_valid", "trim_labels", "is_label"]

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


def iban_valid(text: str) -> bool:
    """ISO 13616's check: the IBAN (spaces ignored, any case) with its first four characters moved to the end,
    letters as 10–35, is 1 modulo 97.

    >>> iban_valid("GB82 WEST 1234 5698 7654 32"), iban_valid("GB82 WEST 1234 5698 7654 33")
    (True, False)
    """
    s = text.replace(" ", "").upper()
    if not 15 <= len(s) <= 34 or not s.isalnum() or not s.isascii():
        return False
    return int("".join(str(int(c, 36)) for c in s[4:] + s[:4])) % 97 == 1


_DIGIT_GROUP = re.compile(r"[0-9]+")


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
            if luhn_valid("".join(match[x:y] for x, y in groups[i:j])):
                found.append((groups[i][0], groups[j - 1][1]))
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


def _iban(match: str) -> list[tuple[int, int]]:
    return [(0, len(match))] if iban_valid(match) else []


def _group(name: str) -> Check:
    """A check keeping the named group of the rule's own pattern (the value beside a cue word)."""

    def check(match: str) -> list[tuple[int, int]]:
        m = _COMPILED_SELF[name].match(match)
        if m is None or m.start("v") < 0:
            return []
        return [(m.start("v"), len(match.rstrip(_URL_TAIL)))] if m.end("v") > m.start("v") else []

    return check


_MONTHS = (
    r"(?:jan(?:uary|\.)?|feb(?:ruary|\.)?|mar(?:ch|\.)?|apr(?:il|\.)?|may|june?|july?|aug(?:ust|\.)?|"
    r"sep(?:t(?:ember)?|\.)?|oct(?:ober|\.)?|nov(?:ember|\.)?|dec(?:ember|\.)?|januar|februar|märz|mai|juni|juli|"
    r"oktober|dezember|janvier|février|fevrier|mars|avril|juin|juillet|août|aout|septembre|octobre|novembre|"
    r"décembre|decembre)"
)
_DAY = r"(?:[0-3]?[0-9](?:st|nd|rd|th|er|\.)?)"
_STREET = (
    r"(?:street|st|road|rd|avenue|ave|lane|ln|drive|dr|boulevard|blvd|way|court|ct|place|pl|square|sq|terrace|"
    r"close|crescent|highway|hwy|parkway|pkwy|circle|cir|trail|row|gardens|grove|hill|park|mews|walk|alley)"
)
# the street suffixes of USPS Publication 28, appendix C1 (primary names, Title Case: matched case-sensitively, so
# that a capitalised "079 Roman Rest" is an address while a lower-case "2 men run" is not)
_USPS = (
    r"(?:Alley|Annex|Arcade|Avenue|Bayou|Beach|Bend|Bluffs?|Bottom|Boulevard|Branch|Bridge|Brooks?|Burgs?|"
    r"Bypass|Camp|Canyon|Cape|Causeway|Centers?|Circles?|Cliffs?|Club|Commons?|Corners?|Course|Courts?|"
    r"Coves?|Creek|Crescent|Crest|Crossing|Crossroads?|Curve|Dale|Dam|Divide|Drives?|Estates?|Expressway|"
    r"Extensions?|Falls?|Ferry|Fields?|Flats?|Fords?|Forest|Forges?|Forks?|Fort|Freeway|Gardens?|Gateway|"
    r"Glens?|Greens?|Groves?|Harbors?|Haven|Heights|Highway|Hills?|Hollow|Inlet|Islands?|Isle|Junctions?|"
    r"Keys?|Knolls?|Lakes?|Land|Landing|Lane|Lights?|Loaf|Locks?|Lodge|Loop|Mall|Manors?|Meadows?|Mews|"
    r"Mills?|Mission|Motorway|Mount|Mountains?|Neck|Orchard|Oval|Overpass|Parks?|Parkways?|Pass|Passage|"
    r"Path|Pike|Pines?|Place|Plains?|Plaza|Points?|Ports?|Prairie|Radial|Ramp|Ranch|Rapids?|Rest|Ridges?|"
    r"River|Roads?|Route|Row|Rue|Run|Shoals?|Shores?|Skyway|Springs?|Spurs?|Squares?|Station|Stravenue|"
    r"Stream|Streets?|Summit|Terrace|Throughway|Trace|Track|Trafficway|Trail|Trailer|Tunnel|Turnpike|"
    r"Underpass|Unions?|Valleys?|Via|Viaduct|Views?|Villages?|Ville|Vista|Walks?|Wall|Ways?|Wells?)"
)
_FR_STREET = r"(?:rue|avenue|av|boulevard|bd|place|chemin|allée|allee|impasse|quai|cours|route)"
_DE_STREET = r"(?:straße|strasse|str\.|weg|platz|allee|gasse)"
# words that do not stand between a house number and a street word ("2 hours to drive" is no address)
_NOT_NAME = (
    r"(?!(?:the|a|an|to|of|and|in|is|it|that|this|for|with|was|as|on|by|be|are|or|its|his|her|their|hours?|"
    r"minutes?|days?|weeks?|years?|times?|more|less|out)\b)"
)
_UNIT = r"(?:flat|apt\.?|apartment|unit|suite|ste\.?|appartement|app\.?|wohnung|whg\.?)[^\S\n]*#?[^\S\n]*[0-9]+[a-z]?"
_CUES = (
    r"born|dob|d\.o\.b\.?|date[^\S\n]+of[^\S\n]+birth|birthday|mrn|medical[^\S\n]+record(?:[^\S\n]+number)?|ssn|social[^\S\n]+security"
    r"(?:[^\S\n]+number)?|passport(?:[^\S\n]+number)?|licen[cs]e(?:[^\S\n]+number)?|iban|account(?:[^\S\n]+number)?|acct|order"
    r"(?:[^\S\n]+number)?|invoice|customer(?:[^\S\n]+(?:id|number))?|member(?:ship)?(?:[^\S\n]+(?:id|number))?|patient(?:[^\S\n]+id)?|"
    r"policy(?:[^\S\n]+number)?|call|phone|tel|mobile|text|lives[^\S\n]+at|address|user(?:name)?|login|handle|"
    r"nickname|id|ref(?:erence)?|ticket|case(?:[^\S\n]+number)?|e-?mail|card|ip"
)

# a label and its value: "MRN: …", "passport no. …"; the value beside a user name's cue needs no separator
_NAME_CUES = (
    r"(?:user[^\S\n]*name|login|handle|nickname|screen[^\S\n]*name)[^\S\n]+(?:is[^\S\n]+)?"
    r"(?!(?:the|a|an|of|to|and|in|is|it|that|this|for|with|was|as|on|by|them|him|her|me|you|us)\b)(?=\S)"
)

# name -> (pattern, check, flags); every pattern is compiled with re.IGNORECASE unless flags say otherwise
RULES: dict[str, tuple[str, Check | None, int]] = {
    "email": (r"(?<![\w.%+-])[\w.%+-]+@[^\W_](?:[\w-]*[^\W_])?(?:\.[^\W_](?:[\w-]*[^\W_])?)+", None, 0),
    "url": (
        r"(?<![\w/@.])(?:(?:https?://|ftp://|www\.)[^\s<>]+|(?:[a-z0-9-]+\.)+(?:com|org|net|edu|gov|io|co|info|biz|"
        r"me|ly|dev|app|uk|de|fr|eu|example)(?::[0-9]+)?/[^\s<>]*)",
        _url,
        re.IGNORECASE,
    ),
    "phone": (
        r"(?<![\w+.:])(?:\+[0-9]{1,3}[ .-]?(?:\(0\)[ .-]?)?(?:\([0-9]{1,4}\)[ .-]?)?[0-9]{1,5}"
        r"|(?:\([0-9]{1,4}\)[ .-]?)?[0-9]{2,5})(?:[ .-]?[0-9]{1,5}){1,6}(?![\w:]|\.[0-9])",
        _phone,
        0,
    ),
    "card": (r"(?<![0-9])[0-9]+(?:[ -][0-9]+)*(?![0-9])", _card, 0),
    "ip": (
        r"(?<![\w.:])(?:[0-9]{1,3}(?:\.[0-9]{1,3}){3}|[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){2,7}(?:%\w+)?)(?![\w:]|\.[0-9])",
        _ip,
        re.IGNORECASE,
    ),
    "number": (r"\d+", None, 0),
    "id": (r"(?<![\w-])(?=[\w-]*\d)(?=[\w-]*[^\W\d_])[\w-]+", None, 0),
    "iban": (r"(?<![\w])[a-z]{2}[0-9]{2}(?: ?[a-z0-9]{4}){2,7}(?: ?[a-z0-9]{1,3})?(?![\w])", _iban, re.IGNORECASE),
    "handle": (
        r"(?<![\w@.])@[^\W_](?:[\w.]*\w)?(?!@|\.\w)|(?<![\w/])u/[\w-]{3,}|(?<![\w-])(?=\w*[^\W\d_])\w*[^\W_]_\w+",
        None,
        re.IGNORECASE,
    ),
    "address": (
        # French first: "90, avenue Hervé" is more than its number and street word
        rf"(?<![\w])[0-9]{{1,4}}(?:[^\S\n]?(?:bis|ter))?,?[^\S\n]+{_FR_STREET}[^\S\n]+(?:(?:de|du|des|la|le|les|l'|d')[^\S\n]*)*"
        r"[\w'-]+(?:[^\S\n]+(?-i:[A-Z])[\w'-]+){0,2}"
        rf"|(?<![\w])[0-9]{{1,5}}[a-z]?(?:[-/][0-9]+)?,?[^\S\n]+(?:{_NOT_NAME}[\w'.-]+[^\S\n]+){{0,3}}?{_STREET}\b\.?"
        rf"|(?<![\w])[0-9]{{1,5}}[a-z]?,?(?:[^\S\n]+(?-i:[A-Z])[\w'.-]+){{1,3}}[^\S\n]+(?-i:{_USPS})\b"
        rf"|(?<![\w])[0-9]{{1,5}}[a-z]?,?(?:[^\S\n]+{_NOT_NAME}[\w'.-]+){{1,3}}[^\S\n]+{_UNIT}\b"
        rf"|(?<![\w])[\w-]*{_DE_STREET}[^\S\n]+[0-9]{{1,4}}[a-z]?\b"
        rf"|(?<![\w]){_UNIT}\b"
        r"|(?<![\w])[a-z]{1,2}[0-9][a-z0-9]?[^\S\n]?[0-9][a-z]{2}(?![\w])"  # UK postcode
        r"|(?<![\w])(?:(?-i:[A-Z]{2})[^\S\n])?[0-9]{5}(?:-[0-9]{4})?(?![\w])",  # US ZIP (and state), DE/FR five digits
        None,
        re.IGNORECASE,
    ),
    "date": (
        rf"(?<![\w])(?:{_DAY}[^\S\n]+(?:of[^\S\n]+|de[^\S\n]+)?{_MONTHS}(?:,?[^\S\n]+[0-9]{{2,4}})?|{_MONTHS}[^\S\n]+{_DAY}(?:,?[^\S\n]+[0-9]{{2,4}})?"
        rf"|{_MONTHS}[^\S\n]+[0-9]{{4}}|[0-9]{{1,4}}[./-][0-9]{{1,2}}[./-][0-9]{{1,4}})(?![\w])",
        None,
        re.IGNORECASE,
    ),
    "context": (
        rf"(?<![\w])(?:(?:{_CUES})(?:[^\S\n]*(?:no\.?|nr\.?|number|#)[^\S\n]*[:#=]?|[^\S\n]*[:=])|{_NAME_CUES})[^\S\n]*(?P<v>[^\s,;]+)",
        _group("context"),
        re.IGNORECASE,
    ),
}
#: the context rule's cue words at the start or end of a span (``iban``, ``ref``, ``mrn:``): labels of a value, not
#: part of it; :func:`trim_labels` takes them off NER entities that swallow them
_LABELS_AT_START = re.compile(rf"^(?:(?:{_CUES})\b(?:[^\S\n]*(?:no\.?|nr\.?|number)\b)?[\s:#=.,;-]*)+", re.IGNORECASE)
_LABELS_AT_END = re.compile(rf"(?:[\s:#=.,;-]*\b(?:{_CUES}))+$", re.IGNORECASE)


_LABEL_WORD = re.compile(rf"(?:{_CUES})", re.IGNORECASE)


def is_label(word: str) -> bool:
    """Whether ``word`` is one of the context rule's cue words (``iban``, ``ssn``, ``ref``): a label, never a name."""
    return _LABEL_WORD.fullmatch(word) is not None


def trim_labels(text: str, start: int, end: int) -> tuple[int, int]:
    """``text[start:end]`` without the cue words that open or close it (``"iban DE89 …"`` → ``"DE89 …"``); an
    empty span (``start == end``) where it holds nothing else."""
    m = _LABELS_AT_START.match(text, start, end)
    if m is not None:
        start = m.end()
    m = _LABELS_AT_END.search(text, start, end)
    if m is not None:
        end = m.start()
    return start, max(start, end)


#: rules whose selection reads a word beside the value (the cue), not only the value's own characters
READS_CONTEXT = frozenset({"context"})
_COMPILED_SELF = {name: re.compile(p, f) for name, (p, c, f) in RULES.items() if name in READS_CONTEXT}
