"""Selective privatization, first part: the spec, the detectors, span union and the span → position map
(docs/mechanisms/selective.md)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from hf_textdp.errors import (
    InvalidParameterError,
    InvalidRowError,
    MissingExtraError,
    ModelNotFoundError,
    ParameterTypeError,
)
from hf_textdp.sensitive import (
    BUILTIN_DETECTORS,
    DEFAULT_SPACY_LABELS,
    RowSpans,
    build_detectors,
    column_spans,
    detector_reads,
    expand_words,
    luhn_valid,
    overlap_mask,
    parse_sensitive,
    selection_info,
    sensitive_mask,
    sensitive_spans,
    static_offsets,
    union,
)
from hf_textdp.sensitive.builtin import builtin_detector
from hf_textdp.sensitive.models import PresidioDetector, SpacyDetector


# --------------------------------------------------------------------------- the spec
@pytest.mark.parametrize(
    "spec, others, detectors",
    [
        ({"epsilon": 1.0, "detectors": ["email"]}, "privatize", ("email",)),
        ({"epsilon": 2, "column": "spans", "others": "keep"}, "keep", "default"),
        ({"epsilon": 2, "column": "spans", "detectors": []}, "privatize", ()),
        ({"epsilon": 1.0, "detectors": "default", "render": "placeholder"}, "privatize", "default"),
        ({"epsilon": 0.5, "detectors": ["spacy:en_core_web_sm", "card"], "labels": ["PERSON"]}, "privatize", None),
        ({"epsilon": 0.5, "detectors": ["presidio"], "column": "c"}, "privatize", ("presidio",)),
    ],
    ids=["builtin", "column-keep-default", "column-only", "spacy-labels", "presidio-column", "default-placeholder"],
)
def test_valid_specs(spec, others, detectors):
    parsed = parse_sensitive(spec)
    assert parsed.others == others and parsed.epsilon == float(spec["epsilon"])
    if detectors is not None:
        assert parsed.detectors == detectors
    assert parse_sensitive(parsed.to_value()) == parsed  # the stored form reads back to the same spec


def test_spacy_labels_default_and_given():
    assert parse_sensitive({"epsilon": 1.0, "detectors": ["spacy:x"]}).labels == DEFAULT_SPACY_LABELS
    given = parse_sensitive({"epsilon": 1.0, "detectors": ["spacy:x"], "labels": ["PERSON", "PERSON", "GPE"]})
    assert given.labels == ("PERSON", "GPE")


@pytest.mark.parametrize(
    "spec, error, match",
    [
        ([1.0], ParameterTypeError, r"sensitive must be a dict"),
        ({"detectors": ["email"]}, InvalidParameterError, r'sensitive\["epsilon"\] is required'),
        ({"epsilon": -1.0, "detectors": ["email"]}, InvalidParameterError, r'sensitive\["epsilon"\] must be a finite'),
        ({"epsilon": float("inf"), "detectors": ["email"]}, InvalidParameterError, r'sensitive\["epsilon"\]'),
        ({"epsilon": "1", "detectors": ["email"]}, ParameterTypeError, r'sensitive\["epsilon"\] must be a number'),
        ({"epsilon": 1.0, "detectors": "email"}, ParameterTypeError, r'sensitive\["detectors"\] must be a list'),
        ({"epsilon": 1.0, "detectors": ["emial"]}, InvalidParameterError, r"unknown detector 'emial'. Allowed"),
        ({"epsilon": 1.0, "detectors": ["spacy:"]}, InvalidParameterError, r"names no spaCy pipeline"),
        ({"epsilon": 1.0, "detectors": ["email", "email"]}, InvalidParameterError, r"named more than once"),
        ({"epsilon": 1.0, "detectors": []}, InvalidParameterError, r"nothing selects sensitive positions"),
        ({"epsilon": 1.0, "column": ""}, InvalidParameterError, r'sensitive\["column"\] must be a non-empty str'),
        ({"epsilon": 1.0, "detectors": ["email"], "others": "drop"}, InvalidParameterError, r'sensitive\["others"\]'),
        ({"epsilon": 1.0, "detectors": ["email"], "labels": ["PERSON"]}, InvalidParameterError, r"names none"),
        ({"epsilon": 1.0, "detectors": ["spacy:x"], "labels": []}, InvalidParameterError, r"at least one"),
        ({"epsilon": 1.0, "detectors": ["email"], "eps": 1}, InvalidParameterError, r"unknown keys \['eps'\]"),
    ],
    ids=[
        "not-dict",
        "no-epsilon",
        "negative",
        "infinite",
        "str-epsilon",
        "str-detectors",
        "unknown-detector",
        "empty-spacy",
        "repeated",
        "nothing",
        "empty-column",
        "bad-others",
        "labels-no-spacy",
        "empty-labels",
        "unknown-key",
    ],
)
def test_invalid_specs(spec, error, match):
    with pytest.raises(error, match=match):
        parse_sensitive(spec)


# --------------------------------------------------------------------------- built-in detectors
CASES = [
    ("email", "write to john.doe+x@mail.example.org.", ["john.doe+x@mail.example.org"]),
    ("email", "no @ here, a@b and x@@y.com", []),
    (
        "url",
        "see https://example.com/a?b=1). or www.test.org, not ftp:/x",
        ["https://example.com/a?b=1", "www.test.org"],
    ),
    ("phone", "call +1 (415) 555-0132 or 030 1234567 today", ["+1 (415) 555-0132", "030 1234567"]),
    ("phone", "in 1999 , 42 people , 12 34", []),
    ("card", "card 4111 1111 1111 1111 exp", ["4111 1111 1111 1111"]),
    ("card", "pay 5500-0000-0000-0004 now", ["5500-0000-0000-0004"]),
    ("card", "not 4111 1111 1111 1112, 12 4111111111111111", ["4111111111111111"]),
    ("ip", "from 192.168.0.1. and 2001:db8::1 but not 10.0.0.256 or 12:30:45 or ::", ["192.168.0.1", "2001:db8::1"]),
    ("number", "the 21st film of 1999 cost $3.5m", ["21", "1999", "3", "5"]),
    ("id", "ticket AB-12X9 and 21st , not abc or 123 or x_y", ["AB-12X9", "21st"]),
]


@pytest.mark.parametrize("name, text, found", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_builtin_detectors(name, text, found):
    spans = builtin_detector(name).detect([text]).to_lists()[0]
    assert [text[a:b] for a, b in spans] == found


def test_luhn_known_answers():
    """Luhn (ISO/IEC 7812-1 Annex B): the test numbers of the card networks pass; one digit off fails."""
    for number in ("4111111111111111", "5500000000000004", "340000000000009", "6011000000000004", "79927398713"):
        assert luhn_valid(number)
        last = str((int(number[-1]) + 1) % 10)
        assert not luhn_valid(number[:-1] + last)


def test_a_batch_finds_what_each_row_finds_alone():
    """Rows are searched joined by newlines: the spans equal those of each row alone, whatever the rows hold
    (newlines included), so no match runs from one row into the next. 300 random rows, seed 3901."""
    rng = np.random.default_rng(3901)
    alphabet = list("ab1234 5.-@:/\n+()x") + ["www.", "http://", "4111 1111 1111 1111", "a@b.co", "192.168.1.1"]
    texts = ["".join(rng.choice(alphabet, size=int(rng.integers(0, 30)))) for _ in range(300)]
    for name in BUILTIN_DETECTORS:
        batch = builtin_detector(name).detect(texts).to_lists()
        alone = [builtin_detector(name).detect([t]).to_lists()[0] for t in texts]
        assert batch == alone, name


def test_detectors_read_match_or_context():
    reads = {d: detector_reads(d) for d in BUILTIN_DETECTORS}
    assert reads.pop("context") == "context" and set(reads.values()) == {"match"}
    assert detector_reads("spacy:en_core_web_sm") == "context" and detector_reads("presidio") == "context"
    assert detector_reads("rare") == detector_reads("rare:3") == "match"
    info = selection_info(parse_sensitive({"epsilon": 1.0, "detectors": ["email", "presidio"], "column": "c"}))
    assert [(d["name"], d["reads"]) for d in info["detectors"]] == [("email", "match"), ("presidio", "context")]
    assert info["detectors"][0]["covers"] == ["email address"] and "person name" in info["detectors"][1]["covers"]
    assert info["column"] == "c" and "visible" in info["statement"] and info["labels"] is None
    assert "handle or username" in info["cannot_find"] and "email address" not in info["cannot_find"]
    assert info["default_set"] is False and info["left_out"] == []


# --------------------------------------------------------------------------- spans
def test_union_matches_the_union_of_character_sets():
    """The union of random spans (seed 3902, 200 rows) covers exactly the characters some span covers, as
    disjoint, sorted, non-touching spans."""
    rng = np.random.default_rng(3902)
    parts = []
    for _ in range(3):
        per_row = []
        for _ in range(200):
            k = int(rng.integers(0, 4))
            a = rng.integers(0, 40, size=k)
            per_row.append([(int(x), int(x + rng.integers(1, 8))) for x in a])
        parts.append(RowSpans.from_lists(per_row))
    merged = union(*parts).to_lists()
    for r in range(200):
        want = {c for p in parts for a, b in p.to_lists()[r] for c in range(a, b)}
        got = [c for a, b in merged[r] for c in range(a, b)]
        assert sorted(want) == got
        assert all(b0 < a1 for (_, b0), (a1, _) in zip(merged[r], merged[r][1:], strict=False))


def test_column_spans_accepts_pairs_and_none():
    spans = column_spans([[[0, 3], (5, 6)], None, []], ["abcdefg", "x", "yz"], "pii", [10, 11, 12])
    assert spans.to_lists() == [[(0, 3), (5, 6)], [], []]
    assert column_spans([np.array([[1, 2]])], ["abc"], "pii", [0]).to_lists() == [[(1, 2)]]


@pytest.mark.parametrize(
    "value, match",
    [
        ("0,3", r"row 7: column 'pii' must hold a list of \[start, end\] character spans, got str"),
        ([[0, 3, 4]], r"row 7: column 'pii': span 0 must be a pair"),
        ([[0.0, 3]], r"span 0 must hold ints, got \[float, int\]"),
        ([[2, 2]], r"span 0 = \[2, 2\] must satisfy 0 <= start < end <= 11"),
        ([[0, 1], [3, 12]], r"span 1 = \[3, 12\] must satisfy 0 <= start < end <= 11"),
        ([[-1, 2]], r"span 0 = \[-1, 2\]"),
        ([[True, 2]], r"must hold ints"),
    ],
    ids=["str", "triple", "float", "empty", "past-end", "negative", "bool"],
)
def test_column_spans_errors_name_row_and_column_not_text(value, match):
    text = "secret text"
    with pytest.raises(InvalidRowError, match=match) as info:
        column_spans([value], [text], "pii", [7])
    assert "secret" not in str(info.value)


# --------------------------------------------------------------------------- spans -> positions
def test_overlap_mask_matches_brute_force():
    """Random offsets and spans (seed 3903, 100 rows): a position is sensitive iff it has characters and shares
    one with a span of its row."""
    rng = np.random.default_rng(3903)
    lengths, offsets, per_row = [], [], []
    for _ in range(100):
        n = int(rng.integers(0, 12))
        a = rng.integers(0, 30, size=n)
        w = rng.integers(0, 4, size=n)  # width 0: a special token
        offsets.append(np.stack([a, a + w], axis=1))
        lengths.append(n)
        per_row.append(
            [(int(s), int(s + rng.integers(1, 6))) for s in rng.integers(0, 30, size=int(rng.integers(0, 3)))]
        )
    off = np.concatenate(offsets).astype(np.int64)
    spans = RowSpans.from_lists(per_row)
    got = overlap_mask(off, np.array(lengths), spans)
    want = []
    for r, o in enumerate(offsets):
        chars = {c for s, e in per_row[r] for c in range(s, e)}
        want += [any(c in chars for c in range(a, b)) for a, b in o.tolist()]
    assert got.tolist() == want


def test_whole_words_are_sensitive_together():
    mask = np.array([0, 1, 0, 0, 0, 0, 1], dtype=bool)
    starts, stops = np.array([0, 3, 5]), np.array([3, 5, 7])
    assert expand_words(mask, starts, stops).tolist() == [1, 1, 1, 0, 0, 1, 1]


def test_hugging_face_positions_from_offsets(tiny_bert):
    """Tiny WordPiece tokenizer: the email's and the number's positions are sensitive, a word with one sensitive
    piece is sensitive whole, and [CLS]/[SEP] never are."""
    from transformers import AutoTokenizer

    from hf_textdp.tokens import HFTokens

    tokens = HFTokens(AutoTokenizer.from_pretrained(tiny_bert))
    texts = ["mail ann@x.org today", "the zq7 film", "plain words"]
    flat, lengths, layout = tokens.encode_flat(texts)
    assert layout.offsets is not None and layout.offsets.shape == (flat.size, 2)
    spec = parse_sensitive({"epsilon": 1.0, "detectors": ["email", "number"]})
    spans = sensitive_spans(build_detectors(spec), texts)
    mask = sensitive_mask(layout.offsets, lengths, spans, (layout.starts, layout.stops))
    bounds = np.concatenate([[0], np.cumsum(lengths)])

    def split(r, m):
        """Row r's characters of the chosen positions, and of the others, in order."""
        off = layout.offsets[bounds[r] : bounds[r + 1]].tolist()
        flags = m[bounds[r] : bounds[r + 1]].tolist()
        chosen = "".join(texts[r][a:b] for (a, b), f in zip(off, flags, strict=True) if f)
        return chosen, "".join(texts[r][a:b] for (a, b), f in zip(off, flags, strict=True) if not f)

    assert not mask[bounds[:-1]].any() and not mask[bounds[1:] - 1].any()  # [CLS], [SEP]
    assert split(0, mask) == ("ann@x.org", "mailtoday")
    assert split(1, mask) == ("zq7", "thefilm")  # the number detector finds '7'; the word's other pieces follow
    assert split(2, mask) == ("", "plainwords")
    # without the whole-word rule only the digit's own piece is chosen
    n_pieces = int(layout.stops[layout.rows == 1][1] - layout.starts[layout.rows == 1][1])
    assert n_pieces > 1, "the test needs 'zq7' split into pieces"
    assert split(1, overlap_mask(layout.offsets, lengths, spans))[0] == "7"


def test_static_offsets_point_at_the_words():
    from hf_textdp.tokens import WordTokens

    texts = ["  call 555 1234\tnow ", "", "a@b.co", "x\n\ny  z"]
    rows = WordTokens({"call": 0}).encode(texts)
    off, n = static_offsets([r.pieces for r in rows], [r.seps for r in rows])
    assert n.tolist() == [len(t.split()) for t in texts]
    words = [w for t in texts for w in t.split()]
    row_of = np.repeat(np.arange(len(texts)), n)
    assert [texts[r][a:b] for r, (a, b) in zip(row_of.tolist(), off.tolist(), strict=True)] == words
    spans = sensitive_spans([builtin_detector("phone")], texts)
    assert sensitive_mask(off, n, spans).tolist() == [False, True, True, False, False, False, False, False]


# --------------------------------------------------------------------------- optional detectors
def _ruler_pipeline(folder):
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns(
        [
            {"label": "PERSON", "pattern": [{"LOWER": "ada"}, {"LOWER": "lovelace"}]},
            {"label": "GPE", "pattern": "Paris"},
            {"label": "PRODUCT", "pattern": "Widget"},
        ]
    )
    nlp.to_disk(folder)
    return str(folder)


def test_spacy_detector_with_a_blank_pipeline(tmp_path):
    """A blank English pipeline with an EntityRuler (no downloaded model): PERSON and GPE are found, PRODUCT is
    not one of the default labels; with labels=['PRODUCT'] only it is."""
    path = _ruler_pipeline(tmp_path / "ruler")
    texts = ["Ada Lovelace lived near Paris .", "a Widget", "nobody"] * 300  # several nlp.pipe batches
    (det,) = build_detectors(parse_sensitive({"epsilon": 1.0, "detectors": [f"spacy:{path}"]}))
    assert isinstance(det, SpacyDetector) and det.reads_context
    found = det.detect(texts).to_lists()
    assert [[texts[0][a:b] for a, b in found[0]], found[1], found[2]] == [["Ada Lovelace", "Paris"], [], []]
    assert found[3:] == found[:-3]
    spec = parse_sensitive({"epsilon": 1.0, "detectors": [f"spacy:{path}"], "labels": ["PRODUCT"]})
    (only,) = build_detectors(spec)
    assert [[t[a:b] for a, b in s] for t, s in zip(texts[:3], only.detect(texts[:3]).to_lists(), strict=True)] == [
        [],
        ["Widget"],
        [],
    ]


def test_spacy_missing_pipeline_is_one_line(tmp_path):
    pytest.importorskip("spacy")
    (det,) = build_detectors(parse_sensitive({"epsilon": 1.0, "detectors": [f"spacy:{tmp_path / 'none'}"]}))
    with pytest.raises(ModelNotFoundError, match=r"no spaCy pipeline .* is installed") as info:
        det.detect(["x"])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "module, detector, extra",
    [("spacy", "spacy:en_core_web_sm", "spacy"), ("presidio_analyzer", "presidio", "presidio")],
    ids=["spacy", "presidio"],
)
def test_a_missing_extra_names_it(monkeypatch, module, detector, extra):
    """Imported only when named: building the detector imports nothing; detecting without the package raises
    one line naming the extra to install."""
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    (det,) = build_detectors(parse_sensitive({"epsilon": 1.0, "detectors": [detector]}))
    assert isinstance(det, (SpacyDetector, PresidioDetector))
    with pytest.raises(MissingExtraError, match=rf"pip install 'hf-textdp\[{extra}\]'") as info:
        det.detect(["x"])
    assert "\n" not in str(info.value) and isinstance(info.value, ImportError)


def test_presidio_without_an_english_pipeline_refuses_to_download(monkeypatch):
    """Presidio's engine downloads a missing pipeline; with no English pipeline installed the detector refuses and
    names the install lines instead (its engine is never built)."""
    pytest.importorskip("presidio_analyzer")
    from hf_textdp.sensitive import models

    monkeypatch.setattr(models, "english_ner_pipelines", lambda: ())
    with pytest.raises(MissingExtraError, match=r"English spaCy pipeline with NER.*spacy download en_core_web_sm"):
        PresidioDetector().detect(["x"])
