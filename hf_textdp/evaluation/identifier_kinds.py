"""Identifiers as real text holds them, for the evidence of issue 54 (``inject_identifiers(..., phrasing=...)``).

Fifteen kinds (:data:`REAL_KINDS`): names of many origins (``faker``'s person lists of 14 Latin-script locales,
a quarter lower-cased), unusual emails, international phones (one- and two-digit groups, ``+``, ``(0)``), card
numbers, street addresses with UK/US/DE/FR postcodes and flat numbers, dates of birth with month names and
ordinals, IPv4/IPv6, URLs with query strings, handles and usernames, IBANs, SSNs, passport, licence, medical record
and order numbers. Each is set in a carrier phrase from one of two disjoint phrasings: ``"tuning"`` (what the
project may look at while improving the detectors) and ``"heldout"`` (never looked at while tuning; checked with
another seed). Everything random comes from the caller's ``numpy`` generator (``faker`` is seeded from it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..sensitive import luhn_valid


__all__ = ["REAL_KINDS", "PHRASINGS", "CARRIERS", "real_value", "make_faker"]

REAL_KINDS = (
    "name",
    "email",
    "phone",
    "card",
    "address",
    "date",
    "ip",
    "url",
    "handle",
    "iban",
    "ssn",
    "passport",
    "licence",
    "mrn",
    "order",
)
PHRASINGS = ("tuning", "heldout")
LOCALES = (
    "en_US",
    "en_GB",
    "en_IN",
    "de_DE",
    "fr_FR",
    "es_ES",
    "es_MX",
    "it_IT",
    "pl_PL",
    "tr_TR",
    "nl_NL",
    "pt_BR",
    "vi_VN",
    "id_ID",
)

CARRIERS: dict[str, dict[str, tuple[str, ...]]] = {
    "tuning": {
        "name": ("{} said", "by {}", "ask {}", "{} thinks"),
        "email": ("email {}", "write to {}"),
        "phone": ("call {}", "phone {}"),
        "card": ("card {}", "paid with {}"),
        "address": ("lives at {}", "ship to {}"),
        "date": ("born {}", "dob {}"),
        "ip": ("from {}", "ip {}"),
        "url": ("see {}", "link {}"),
        "handle": ("follow {}", "username {}"),
        "iban": ("iban {}", "pay to {}"),
        "ssn": ("ssn {}", "ssn: {}"),
        "passport": ("passport {}", "passport no. {}"),
        "licence": ("licence {}", "license: {}"),
        "mrn": ("mrn: {}", "patient {}"),
        "order": ("order {}", "ref {}"),
    },
    "heldout": {
        "name": ("according to {}", "{} wrote", "thanks to {}", "my friend {}"),
        "email": ("reach me at {}", "my mail is {}"),
        "phone": ("my number is {}", "ring {} anytime"),
        "card": ("the card ending {}", "{} was charged"),
        "address": ("send it to {}", "{} is my address"),
        "date": ("date of birth {}", "{} is my birthday"),
        "ip": ("logged in from {}", "server {}"),
        "url": ("check {} out", "go to {}"),
        "handle": ("i am {} online", "dm {}"),
        "iban": ("account {}", "transfer to {}"),
        "ssn": ("social security number {}",),
        "passport": ("passport number {}",),
        "licence": ("driving licence {}",),
        "mrn": ("medical record {}",),
        "order": ("order number {}", "tracking {}"),
    },
}


def make_faker(rng: np.random.Generator) -> Any:
    """A ``faker`` over :data:`LOCALES`, seeded from ``rng``."""
    from faker import Faker

    fake = Faker(list(LOCALES))
    fake.seed_instance(int(rng.integers(2**31)))
    return fake


def _pick(rng: np.random.Generator, options: tuple[str, ...] | list[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _digits(rng: np.random.Generator, n: int) -> str:
    return "".join(str(int(d)) for d in rng.integers(0, 10, size=n))


def _letters(rng: np.random.Generator, n: int) -> str:
    return "".join(chr(65 + int(i)) for i in rng.integers(0, 26, size=n))


def _name(rng: np.random.Generator, fake: Any) -> str:
    loc = fake[_pick(rng, LOCALES)]
    name = f"{loc.first_name()} {loc.last_name()}"
    return name.lower() if rng.random() < 0.25 else name


def _phone(rng: np.random.Generator) -> str:
    d = _digits(rng, 12)
    layouts = (
        f"+353 1 {d[:3]} {d[3:7]}",
        f"+44 (0)20 {d[:4]} {d[4:8]}",
        f"+49 30 {d[:8]}",
        f"+33 6 {d[:2]} {d[2:4]} {d[4:6]} {d[6:8]}",
        f"({d[:3]}) 555-{d[3:7]}",
        f"+1-{d[:3]}-555-{d[3:7]}",
        f"0{d[:3]} {d[3:6]} {d[6:10]}",
    )
    return _pick(rng, layouts)


def _card(rng: np.random.Generator) -> str:
    body = ("4" if rng.random() < 0.5 else str(int(rng.integers(51, 56)))) + _digits(rng, 13)
    body = body[:15]
    number = next(body + d for d in "0123456789" if luhn_valid(body + d))  # the check digit
    return _pick(rng, ("", " ", "-")).join(number[i : i + 4] for i in range(0, 16, 4))


def _address(rng: np.random.Generator, fake: Any) -> str:
    loc = _pick(rng, ("en_US", "en_GB", "de_DE", "fr_FR"))
    f = fake[loc]
    street = f.street_address().replace("\n", ", ")
    return f"{street}, {f.postcode()}" if rng.random() < 0.5 else street


def _date(rng: np.random.Generator, fake: Any) -> str:
    d = fake["en_US"].date_of_birth(minimum_age=18, maximum_age=90)
    suffix = {1: "st", 2: "nd", 3: "rd"}.get(d.day if d.day < 20 else d.day % 10, "th")
    layouts = (
        f"{d.day} {d:%B %Y}",
        f"{d:%B} {d.day}{suffix}, {d.year}",
        f"{d.day}{suffix} of {d:%B %Y}",
        f"{d:%d/%m/%Y}",
        f"{d:%Y-%m-%d}",
    )
    return _pick(rng, layouts)


def _handle(rng: np.random.Generator, fake: Any) -> str:
    user = fake["en_US"].user_name()
    first = fake[_pick(rng, LOCALES)].first_name().lower()
    forms = (f"@{user}", f"xX_{first}_Xx", f"u/{user}", f"{first}_{_digits(rng, 4)}", f"@{first}{_digits(rng, 2)}")
    return _pick(rng, forms)


def real_value(kind: str, rng: np.random.Generator, fake: Any) -> str:
    """One identifier of ``kind`` (one of :data:`REAL_KINDS`)."""
    if kind == "name":
        return _name(rng, fake)
    if kind == "email":
        local = _name(rng, fake).lower().replace(" ", _pick(rng, (".", "_", "")))
        local = "".join(c for c in local if c.isascii() and (c.isalnum() or c in "._")) or "zq"
        tail = _pick(rng, ("", _digits(rng, 2), "+news"))
        return f"{local}{tail}@{_pick(rng, ('example.com', 'mail.example.co.uk', 'example.org', 'post.example.de'))}"
    if kind == "phone":
        return _phone(rng)
    if kind == "card":
        return _card(rng)
    if kind == "address":
        return _address(rng, fake)
    if kind == "date":
        return _date(rng, fake)
    if kind == "ip":
        return str(fake["en_US"].ipv4_public() if rng.random() < 0.5 else fake["en_US"].ipv6())
    if kind == "url":
        host = _pick(rng, ("https://www.example.com", "http://shop.example.org", "example.net"))
        path = _pick(rng, ("account", "login", "p/view"))
        return f"{host}/{path}?user={fake['en_US'].user_name()}&id={_digits(rng, 5)}"
    if kind == "handle":
        return _handle(rng, fake)
    if kind == "iban":
        iban = fake[_pick(rng, ("de_DE", "en_GB", "fr_FR", "nl_NL"))].iban()
        return " ".join(iban[i : i + 4] for i in range(0, len(iban), 4)) if rng.random() < 0.5 else iban
    if kind == "ssn":
        return f"{_digits(rng, 3)}-{_digits(rng, 2)}-{_digits(rng, 4)}"
    if kind == "passport":
        return _pick(rng, (_letters(rng, 1) + _digits(rng, 8), _digits(rng, 9), _letters(rng, 2) + _digits(rng, 7)))
    if kind == "licence":
        last = fake["en_GB"].last_name().upper()[:5].ljust(5, "9")
        uk = f"{last}{_digits(rng, 6)}{_letters(rng, 2)}9{_letters(rng, 2)}"
        return _pick(rng, (uk, f"D{_digits(rng, 4)}-{_digits(rng, 5)}"))
    if kind == "mrn":
        return _pick(rng, (_letters(rng, 1) + _digits(rng, 7), _digits(rng, 8), f"MRN-{_digits(rng, 6)}"))
    if kind == "order":
        return _pick(rng, (f"#{_letters(rng, 1)}-{_digits(rng, 4)}-{_letters(rng, 3)}", f"ORD-{_digits(rng, 8)}"))
    raise ValueError(kind)
