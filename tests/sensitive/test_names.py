"""Issue 54 (names in customer messages): the ``name`` detector, census name lists with word frequencies and cue
words, finds lower-case names and names opening a message, and leaves common words that are also names alone."""

from __future__ import annotations

import sys

import pytest

from hf_textdp.errors import MissingExtraError
from hf_textdp.sensitive import build_detectors, detector_reads, parse_sensitive
from hf_textdp.sensitive.names import NameDetector, census_names


pytest.importorskip("wordfreq")


def _found(*texts: str) -> list[list[str]]:
    spans = NameDetector().detect(list(texts)).to_lists()
    return [[t[a:b] for a, b in row] for t, row in zip(texts, spans, strict=True)]


def test_census_lists_hold_given_names_and_surnames_with_their_shares():
    names = census_names()
    assert len(names) == 91910
    given, surname = names["john"]
    assert given == pytest.approx((0.03271 + 0.00012) / 2) and surname == pytest.approx(0.0001)
    assert names["tarantino"][1] == pytest.approx(0.00001)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Hi, this is isa tarantino. My order has not arrived.", ["isa", "tarantino"]),  # lower case, after a cue
        ("Tiffany Perez writing again about my refund", ["Tiffany", "Perez"]),  # opening the message
        ("can someone help? i'm rémy aubert and i still wait", ["rémy", "aubert"]),  # accents, uncommon words
        ("please cancel it, thank you. -- melek wiener", ["melek", "wiener"]),  # a signature after a dash
        ("my name is niamh raight and I need help", ["niamh", "raight"]),  # names the lists lack, after a cue
        ("we met Will Young at the station", ["Will", "Young"]),  # common words, capitalised beside each other
        ("the director adam sandler made it", ["adam", "sandler"]),  # given name and surname, lower case
    ],
)
def test_names_are_found_without_ner(text, name):
    assert _found(text)[0] == name


def test_common_words_that_are_also_names_are_left_alone():
    text = "i will be young once , the white walls still stand and may rose above the mark -- at once funny ."
    assert _found(text) == [[]]


def test_name_is_a_context_detector_of_the_default_set():
    spec = parse_sensitive({"epsilon": 1.0, "detectors": ["name"]})
    assert [d.name for d in build_detectors(spec)] == ["name"]
    assert detector_reads("name") == "context"


def test_name_without_wordfreq_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "wordfreq", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'hf-textdp\[ner\]'"):
        NameDetector().detect(["x"])


def test_cue_words_of_the_context_rule_are_never_name_words():
    assert _found("ask mira ssn 503-07-6767 about it", "the director adam sandler iban")[0:2] == [
        ["mira"],
        ["adam", "sandler"],
    ]


def test_long_rows_take_linear_time():
    """No pattern splits a long word many ways (the signature rule once read words separated by optional space:
    cubic in the word's length, 20 s for this row's 800 letters)."""
    import time

    text = "-- " + "a" * 800 + "1 " + "word " * 4000
    t0 = time.perf_counter()
    NameDetector().detect([text])
    assert time.perf_counter() - t0 < 2.0
