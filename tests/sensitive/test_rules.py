"""Issue 54 item 2: the built-in rules find real-world shapes (handles, addresses and postcodes, dates with month
names, whole URLs, phones with short groups, IBANs, IPv6, values beside cue words) and leave ordinary prose alone."""

from __future__ import annotations

import pytest

from hf_textdp.sensitive import parse_sensitive, sensitive_spans
from hf_textdp.sensitive.builtin import builtin_detector
from hf_textdp.sensitive.rules import iban_valid


def _found(rule: str, text: str) -> list[str]:
    return [text[a:b] for a, b in builtin_detector(rule).detect([text]).to_lists()[0]]


@pytest.mark.parametrize(
    "rule, text, expected",
    [
        ("phone", "call +353 1 625 9832 now", ["+353 1 625 9832"]),
        ("phone", "ring +44 (0)20 7946 0958.", ["+44 (0)20 7946 0958"]),
        ("phone", "tel +49 30 1234567", ["+49 30 1234567"]),
        ("phone", "or (415) 555-0142", ["(415) 555-0142"]),
        ("url", "see example.com/login?user=ann&id=7, then", ["example.com/login?user=ann&id=7"]),
        ("url", "at https://zqx.example/a?b=c&user=ann.", ["https://zqx.example/a?b=c&user=ann"]),
        ("ip", "from 2001:db8::8a2e:370:7334 and fe80::1", ["2001:db8::8a2e:370:7334", "fe80::1"]),
        ("iban", "iban GB82 WEST 1234 5698 7654 32 ok", ["GB82 WEST 1234 5698 7654 32"]),
        ("iban", "iban de89370400440532013000 ok", ["de89370400440532013000"]),
        ("handle", "follow @tanakak, xX_maria_Xx and u/zq-ann", ["@tanakak", "xX_maria_Xx", "u/zq-ann"]),
        ("address", "lives at 221b Baker Street, London", ["221b Baker Street"]),
        ("address", "at 12 rue de la Paix, 75002 Paris", ["12 rue de la Paix", "75002"]),
        ("address", "in der Hauptstraße 12a wohnt", ["Hauptstraße 12a"]),
        ("address", "flat 4, postcode SW1A 2AA", ["flat 4", "SW1A 2AA"]),
        ("address", "ship to 1600 pennsylvania avenue, DC 20500", ["1600 pennsylvania avenue", "DC 20500"]),
        ("address", "lives at 079 Roman Rest Suite 543, 80151", ["079 Roman Rest", "Suite 543", "80151"]),  # USPS
        ("address", "ship to 90, avenue Hervé today", ["90, avenue Hervé"]),  # French before the generic street
        ("address", "at 17 Elm Row Unit 4 today", ["17 Elm Row", "Unit 4"]),
        ("date", "born 3rd of March 1987, or on march 3, 1987", ["3rd of March 1987", "march 3, 1987"]),
        ("date", "on 12. Mai 1990 and 1987-03-12", ["12. Mai 1990", "1987-03-12"]),
        ("context", "MRN: QWXYZK and passport no. XKQWERTY", ["QWXYZK", "XKQWERTY"]),
        ("context", "my username is tanakak.", ["tanakak"]),
    ],
)
def test_rules_find_real_world_shapes(rule, text, expected):
    assert _found(rule, text) == expected


@pytest.mark.parametrize(
    "rule, text",
    [
        ("address", "it takes 2 hours to drive and 3 days on the road"),
        ("address", "the 2 men run to 3 points of view"),  # USPS suffixes count only in Title Case
        ("context", "in order to call it a day, the user of this film"),
        ("date", "march of the penguins may be the best film of may"),
        ("phone", "in 1 of 2 ways, 7 out of 10"),
        ("handle", "mail ann@example.com about it"),
        ("iban", "GB82 WEST 1234 5698 7654 33"),  # one digit off: the ISO 13616 check fails
        ("url", "the end. then a new start"),
    ],
)
def test_rules_leave_prose_alone(rule, text):
    assert _found(rule, text) == []


def test_cue_words_are_trimmed_off_a_span():
    from hf_textdp.sensitive.rules import trim_labels

    for text, kept in [
        ("iban DE89 3704", "DE89 3704"),
        ("ref A-12", "A-12"),
        ("mrn: 1234", "1234"),
        ("order number 55", "55"),
        ("John Smith iban", "John Smith"),
        ("iban", ""),
        ("orderly Paris", "orderly Paris"),
    ]:
        a, b = trim_labels(text, 0, len(text))
        assert text[a:b] == kept


def test_iban_check():
    assert iban_valid("FR14 2004 1010 0505 0001 3M02 606") and not iban_valid("FR14 2004 1010 0505 0001 3M02 607")


def test_no_rule_runs_from_one_row_into_the_next():
    """Rows are searched joined by a line feed: a match must stop at it (the address and date rules span spaces)."""
    spec = parse_sensitive({"epsilon": 1.0, "detectors": ["address", "date", "context", "phone"]})
    from hf_textdp.sensitive import build_detectors

    texts = ["see you at 12", "Baker Street", "on 3", "March", "MRN:", "QWXYZK", "+353", "1 625 9832"]
    found = sensitive_spans(build_detectors(spec), texts).to_lists()
    assert found[1] == found[3] == found[5] == []
