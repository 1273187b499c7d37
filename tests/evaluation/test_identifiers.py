"""The identifier-bearing evaluation set (hf_textdp/evaluation/identifiers.py)."""

from __future__ import annotations

import json
import re

import pytest

from hf_textdp.errors import InvalidParameterError, MissingExtraError
from hf_textdp.sensitive import build_detectors, luhn_valid, parse_sensitive, sensitive_spans


pytest.importorskip("faker")

from hf_textdp.evaluation.identifiers import (  # noqa: E402
    KINDS,
    identifier_lists,
    identifier_set,
    inject_identifiers,
    write_identifier_set,
)


SENTENCES = [
    'the rock is destined to be the 21st century\'s new " conan " . ',
    "effective but too-tepid biopic",
    "",
    "it practically plays almost everything you give it .",
] * 50

SHAPES = {
    "email": re.compile(r"^[a-z0-9.]+@(mail\.)?example\.(com|org|net)$"),
    "phone": re.compile(r"^(\+1 )?\(?[0-9]{3}\)?[ -]555[ -]01[0-9]{2}$"),
    "id": re.compile(r"^[A-Z]{2,3}-?[0-9]{6}$"),
}


def test_spans_point_at_the_injected_identifiers():
    """Every span holds an identifier of its kind, inside a carrier phrase; the sentence's own words are all
    still there, in order (200 rows, seed 3905)."""
    lists = identifier_lists()
    rows = inject_identifiers(SENTENCES, seed=3905)
    counts = dict.fromkeys(KINDS, 0)
    for source, row in zip(SENTENCES, rows, strict=True):
        text, spans, kinds = row["text"], row["spans"], row["kinds"]
        assert 1 <= len(spans) <= 3 and len(set(kinds)) == len(kinds) and spans == sorted(spans)
        for (a, b), kind in zip(spans, kinds, strict=True):
            value = text[a:b]
            counts[kind] += 1
            assert value == value.strip() and (a == 0 or text[a - 1] == " ")
            if kind == "name":
                first, last = value.split(" ")
                assert first in lists.first_names and last in lists.last_names
            elif kind == "city":
                assert value in lists.cities
            elif kind == "card":
                digits = re.sub(r"[ -]", "", value)
                assert len(digits) == 16 and digits[0] in "45" and luhn_valid(digits)
            else:
                assert SHAPES[kind].match(value), (kind, value)
        # the sentence's words, in order, are what is left once the spans and carrier words are taken out
        words = iter(text.split())
        assert all(any(w == x for x in words) for w in source.split())
    assert all(c > 20 for c in counts.values()), counts


def test_same_seed_same_set_and_another_seed_another():
    a = inject_identifiers(SENTENCES, seed=11)
    assert inject_identifiers(SENTENCES, seed=11) == a
    assert inject_identifiers(SENTENCES, seed=12) != a


def test_builtin_detectors_cover_every_email_phone_and_card():
    """The detectors of issue 39's first "Done when" find every injected email, phone and card number."""
    rows = inject_identifiers(SENTENCES, seed=3906, kinds=["email", "phone", "card", "name"], per_row=(2, 4))
    texts = [r["text"] for r in rows]
    spec = parse_sensitive({"epsilon": 1.0, "detectors": ["email", "phone", "card", "number"]})
    found = sensitive_spans(build_detectors(spec), texts).to_lists()
    missed = 0
    for row, spans in zip(rows, found, strict=True):
        for (a, b), kind in zip(row["spans"], row["kinds"], strict=True):
            if kind != "name":
                covered = set().union(*(range(x, y) for x, y in spans)) if spans else set()
                missed += not set(range(a, b)) <= covered
    assert missed == 0


def test_identifier_set_from_mr(tmp_path, shared_dir):
    rows = identifier_set("mr", seed=3907, n=40, data_dir=str(shared_dir / "data" / "senteval"))
    assert len(rows) == 40
    source = (shared_dir / "data" / "senteval" / "mr.jsonl").read_text(encoding="utf-8").splitlines()
    for row in rows:
        original = json.loads(source[row["source_row"]])
        assert row["label"] == original["label"] and row["seed"] == 3907 and "faker" in row["lists_source"]
        assert all(w in row["text"] for w in original["text"].split())
    path = write_identifier_set(rows, tmp_path / "ids.jsonl")
    assert [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] == rows
    assert identifier_set("mr", seed=3907, n=40, data_dir=str(shared_dir / "data" / "senteval")) == rows


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"kinds": ["ssn"]}, r"kinds must be a non-empty subset"),
        ({"kinds": []}, r"kinds must be a non-empty subset"),
        ({"kinds": ["name"], "per_row": (1, 2)}, r"per_row must satisfy 1 <= low <= high <= 1"),
        ({"per_row": (0, 1)}, r"per_row must satisfy"),
    ],
    ids=["unknown-kind", "no-kind", "too-many", "zero"],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(InvalidParameterError, match=match):
        inject_identifiers(["a b"], seed=1, **kwargs)


def test_bad_source():
    with pytest.raises(InvalidParameterError, match=r"source must be one of \['mr', 'cr'\], got 'sst5'"):
        identifier_set("sst5", seed=1)


def test_faker_missing_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "faker", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'hf-textdp\[eval\]'"):
        identifier_lists()


def test_real_kinds_with_both_phrasings():
    """Issue 54 item 6: the fifteen real-world kinds, each span on its value, in two disjoint phrasings; one seed
    gives one set."""
    from hf_textdp.evaluation.identifier_kinds import CARRIERS, REAL_KINDS

    texts = ["a fine film with a weak ending"] * 60
    a = inject_identifiers(texts, seed=5401, kinds=REAL_KINDS, per_row=(2, 3), phrasing="tuning")
    assert a == inject_identifiers(texts, seed=5401, kinds=REAL_KINDS, per_row=(2, 3), phrasing="tuning")
    seen = {k for r in a for k in r["kinds"]}
    assert seen == set(REAL_KINDS)
    for r in a:
        for s, e in r["spans"]:
            value = r["text"][s:e]
            assert value == value.strip() and value not in texts[0]
    for kind in REAL_KINDS:  # no carrier phrase of the held-out set is a tuning one
        assert not set(CARRIERS["tuning"][kind]) & set(CARRIERS["heldout"][kind])
    with pytest.raises(InvalidParameterError, match="phrasing"):
        inject_identifiers(texts, seed=1, kinds=REAL_KINDS, phrasing="other")
