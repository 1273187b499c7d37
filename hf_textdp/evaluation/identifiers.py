"""An identifier-bearing evaluation set: SentEval sentences with injected identifiers (issues 39 and 40).

Each row is a MR or CR sentence (its label kept) with one to three identifiers inserted at word boundaries,
each in a short carrier phrase (``"call {phone}"``, ``"in {city}"``), and the injected character spans recorded
apart from the text (``spans``, ``kinds``) for scoring survival and recovery. The spans are in the
``[[start, end], ...]`` form of ``sensitive={"column": ...}``.

Kinds and their values:

- ``name``: a first and a last name from the ``faker`` package's en_US lists (US Census and SSA name
  lists);
- ``email``: ``first.last@domain`` (lower case, sometimes two digits) at a reserved example domain (RFC 2606);
- ``phone``: a US number in the fictional 555-01XX block, in one of four common layouts;
- ``card``: a 16-digit number with a Visa (4) or Mastercard (51–55) prefix and a valid Luhn check digit,
  grouped by spaces or dashes or not at all;
- ``city``: a real city from the ``faker`` package's de_DE and en_IN city lists;
- ``id``: two or three capital letters and six digits, with an optional dash.

Everything random comes from ``numpy.random.default_rng(seed)``: one seed and one ``faker`` version give the
same set (the rows record the version). Needs the eval extra (``pip install 'hf-textdp[eval]'``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidParameterError, MissingExtraError
from ..io.files import atomic_write_text
from ..validation import check_int
from .identifier_kinds import CARRIERS, PHRASINGS, REAL_KINDS, make_faker, real_value
from .tasks import load_task


__all__ = [
    "KINDS",
    "REAL_KINDS",
    "IdentifierLists",
    "identifier_lists",
    "inject_identifiers",
    "identifier_set",
    "write_identifier_set",
]

KINDS = ("name", "email", "phone", "card", "city", "id")
SOURCES = ("mr", "cr")

_CARRIERS: dict[str, tuple[str, ...]] = {
    "name": ("{} said", "by {}", "ask {}", "{} thinks"),
    "email": ("email {}", "write to {}", "contact {}"),
    "phone": ("call {}", "phone {}", "text {}"),
    "card": ("card {}", "paid with {}", "charged to {}"),
    "city": ("in {}", "from {}", "near {}"),
    "id": ("id {}", "ref {}", "ticket {}"),
}
_DOMAINS = ("example.com", "example.org", "example.net", "mail.example.com")  # reserved (RFC 2606)
_LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ"  # no I or O (read as digits)
_WORD_START = re.compile(r"\S+")


@dataclass(frozen=True)
class IdentifierLists:
    """The public lists names and cities are drawn from, and where they come from."""

    first_names: tuple[str, ...]
    last_names: tuple[str, ...]
    cities: tuple[str, ...]
    source: str


def identifier_lists() -> IdentifierLists:
    """The ``faker`` package's en_US first and last names and its de_DE and en_IN cities, in the package's order.

    Raises:
        MissingExtraError: ``faker`` is not installed.
    """
    try:
        import faker
        from faker.providers.address.de_DE import Provider as GermanAddress
        from faker.providers.address.en_IN import Provider as IndianAddress
        from faker.providers.person.en_US import Provider as Person
    except ImportError as err:
        raise MissingExtraError(
            "the identifier set draws names and cities from faker, which is not installed: "
            "pip install 'hf-textdp[eval]'."
        ) from err
    cities = tuple(dict.fromkeys([*IndianAddress.cities, *GermanAddress.cities]))
    return IdentifierLists(
        first_names=tuple(dict.fromkeys(Person.first_names)),
        last_names=tuple(dict.fromkeys(Person.last_names)),
        cities=cities,
        source=f"faker {faker.VERSION}: person.en_US first_names/last_names, address.en_IN + address.de_DE cities",
    )


def _luhn_digit(body: str) -> str:
    """The check digit that makes ``body`` + digit pass the Luhn check (ISO/IEC 7812-1 Annex B)."""
    total = 0
    for k, c in enumerate(reversed(body)):
        d = int(c)
        if k % 2 == 0:  # doubled: these digits stand at odd places from the right once the check digit is added
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return str((10 - total % 10) % 10)


def _digits(rng: np.random.Generator, n: int) -> str:
    return "".join(str(int(d)) for d in rng.integers(0, 10, size=n))


def _value(kind: str, rng: np.random.Generator, lists: IdentifierLists) -> str:
    """One identifier of ``kind``."""
    if kind == "name":
        first = lists.first_names[rng.integers(len(lists.first_names))]
        return f"{first} {lists.last_names[rng.integers(len(lists.last_names))]}"
    if kind == "email":
        first = lists.first_names[rng.integers(len(lists.first_names))]
        last = lists.last_names[rng.integers(len(lists.last_names))]
        tail = _digits(rng, 2) if rng.random() < 0.5 else ""
        local = re.sub(r"[^a-z0-9.]", "", f"{first}.{last}{tail}".lower())
        return f"{local}@{_DOMAINS[rng.integers(len(_DOMAINS))]}"
    if kind == "phone":
        area, line = str(int(rng.integers(201, 990))), "01" + _digits(rng, 2)
        layouts = (f"+1 ({area}) 555-{line}", f"{area}-555-{line}", f"({area}) 555 {line}", f"+1 {area} 555 {line}")
        return layouts[rng.integers(len(layouts))]
    if kind == "card":
        prefix = "4" if rng.random() < 0.5 else str(int(rng.integers(51, 56)))
        body = prefix + _digits(rng, 15 - len(prefix))
        number = body + _luhn_digit(body)
        sep = ("", " ", "-")[rng.integers(3)]
        return sep.join(number[i : i + 4] for i in range(0, 16, 4))
    if kind == "city":
        return lists.cities[rng.integers(len(lists.cities))]
    if kind == "id":
        letters = "".join(_LETTERS[i] for i in rng.integers(len(_LETTERS), size=int(rng.integers(2, 4))))
        return letters + ("-" if rng.random() < 0.5 else "") + _digits(rng, 6)
    raise InvalidParameterError(f"kinds: unknown kind {kind!r}. Allowed: {list(KINDS)}.")


def inject_identifiers(
    texts: Sequence[str],
    *,
    seed: int,
    kinds: Sequence[str] = KINDS,
    per_row: tuple[int, int] = (1, 3),
    lists: IdentifierLists | None = None,
    phrasing: str | None = None,
) -> list[dict[str, Any]]:
    """Insert ``per_row[0]``..``per_row[1]`` identifiers of distinct ``kinds`` into each text, at word boundaries.

    With ``phrasing`` (``"tuning"`` or ``"heldout"``) the kinds are :data:`~.identifier_kinds.REAL_KINDS` and the
    carrier phrases that phrasing's (:mod:`.identifier_kinds`); without it, :data:`KINDS` as above.

    Returns one dict per text: ``text`` (with the identifiers), ``spans`` (``[[start, end], ...]`` of each
    injected identifier, sorted) and ``kinds`` (each span's kind).

    Example:

    >>> rows = inject_identifiers(["a fine film"], seed=7, kinds=["card"], per_row=(1, 1))
    >>> (a, b), = rows[0]["spans"]
    >>> len(rows[0]["text"][a:b].replace(" ", "").replace("-", ""))
    16
    """
    allowed = KINDS if phrasing is None else REAL_KINDS
    if phrasing is not None and phrasing not in PHRASINGS:
        raise InvalidParameterError(f"phrasing must be one of {list(PHRASINGS)} or None, got {phrasing!r}.")
    bad = [k for k in kinds if k not in allowed]
    if bad or not kinds:
        raise InvalidParameterError(f"kinds must be a non-empty subset of {list(allowed)}, got {list(kinds)}.")
    lo, hi = per_row
    if not 1 <= lo <= hi <= len(kinds):
        raise InvalidParameterError(f"per_row must satisfy 1 <= low <= high <= {len(kinds)} (kinds), got {per_row}.")
    lists = lists or identifier_lists()
    rng = np.random.default_rng(seed)
    fake = None if phrasing is None else make_faker(rng)
    carriers = _CARRIERS if phrasing is None else CARRIERS[phrasing]
    out = []
    for text in texts:
        k = int(rng.integers(lo, hi + 1))
        chosen = [kinds[i] for i in rng.choice(len(kinds), size=k, replace=False)]
        # insertion points: before each word, or after the last one
        points = [m.start() for m in _WORD_START.finditer(text)]
        points.append(len(text.rstrip()))
        inserts = []
        for kind in chosen:
            value = _value(kind, rng, lists) if fake is None else real_value(kind, rng, fake)
            carrier = carriers[kind][rng.integers(len(carriers[kind]))]
            inserts.append((points[rng.integers(len(points))], kind, carrier, value))
        inserts.sort(key=lambda x: x[0])  # stable: two at one point keep their draw order
        parts: list[str] = []
        spans: list[tuple[int, int, str]] = []
        length, prev, last = 0, 0, ""  # characters so far, where the text was left, the last character
        for at, kind, carrier, value in inserts:
            piece = text[prev:at]
            parts.append(piece)
            length, prev, last = length + len(piece), at, (piece[-1:] or last)
            before, after = carrier.split("{}")
            lead = " " if last and not last.isspace() else ""  # a phrase never runs into what stands before it
            trail = " " if at < len(text) and not text[at].isspace() else ""  # … nor into the word after it
            phrase = f"{lead}{before}{value}{after}{trail}"
            start = length + len(lead) + len(before)
            spans.append((start, start + len(value), kind))
            parts.append(phrase)
            length, last = length + len(phrase), phrase[-1]
        parts.append(text[prev:])
        spans.sort()
        out.append({"text": "".join(parts), "spans": [[a, b] for a, b, _ in spans], "kinds": [c for _, _, c in spans]})
    return out


def identifier_set(
    source: str = "mr",
    *,
    seed: int,
    n: int | None = None,
    kinds: Sequence[str] = KINDS,
    per_row: tuple[int, int] = (1, 3),
    data_dir: str | None = None,
    phrasing: str | None = None,
) -> list[dict[str, Any]]:
    """The identifier-bearing set from SentEval's ``source`` (``"mr"`` or ``"cr"``): :func:`inject_identifiers` over
    its sentences (a stratified subsample of ``n`` rows drawn with ``seed``, or all), each row with its
    ``label``, ``source_row``, ``seed`` and the lists' ``lists_source``; ``phrasing`` as in
    :func:`inject_identifiers` (then pass ``kinds=REAL_KINDS``).

    Raises:
        InvalidParameterError: an unknown source or kind, or a missing SentEval file.
        MissingExtraError: ``faker`` is not installed.
    """
    if source not in SOURCES:
        raise InvalidParameterError(f"source must be one of {list(SOURCES)}, got {source!r}.")
    if n is not None:
        check_int(n, "n", minimum=1)
    lists = identifier_lists()
    data = load_task(source, data_dir=data_dir, max_rows=n, seed=seed)
    texts, labels, rows = data.texts["all"], data.labels["all"], data.source_rows["all"]
    injected = inject_identifiers(texts, seed=seed, kinds=kinds, per_row=per_row, lists=lists, phrasing=phrasing)
    return [
        {**row, "label": int(label), "source_row": int(r), "seed": seed, "lists_source": lists.source}
        for row, label, r in zip(injected, labels.tolist(), rows.tolist(), strict=True)
    ]


def write_identifier_set(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write the set as JSON Lines (atomic); returns the path."""
    path = Path(path)
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows))
    return path
