"""Issue 53, S1 (decision D14): invisible and look-alike characters inside an identifier do not hide it from the
detectors, which read the text as the tokenizer sees it and map their spans back to the original characters."""

from __future__ import annotations

import unicodedata

import pytest
from tokenizers import normalizers

from hf_textdp import PrivatizerConfig
from hf_textdp.privatizer import Privatizer
from hf_textdp.sensitive import BUILTIN_DETECTORS, build_detectors, parse_sensitive, sensitive_spans
from hf_textdp.sensitive.view import detection_view, view_char


# one value per built-in kind; "sep" is the character the separator variants stand beside
VALUES = {
    "email": ("zqxann@zqxmail.example", "@"),
    "url": ("https://zqx.example/login?user=ann&id=7", "/"),
    "phone": ("+1 415 555 0142", " "),
    "card": ("4111 1111 1111 1111", " "),
    "ip": ("192.168.23.41", "."),
    "number": ("48213907", "2"),
    "id": ("AB1234567", "1"),
    "ipv6": ("2001:db8::8a2e:370:7334", ":"),
    "iban": ("GB82 WEST 1234 5698 7654 32", " "),
    "handle": ("@zq_ann_1987", "_"),
    "username": ("xX_maria_Xx", "_"),
    "address": ("221b Baker Street", " "),
    "postcode": ("SW1A 2AA", " "),
    "date": ("12th of March 1987", " "),
    "context": ("MRN: QWXYZK", " "),  # the value beside the cue is selected, not the cue
}
DETECTOR_OF = {"ipv6": "ip", "username": "handle", "postcode": "address"}


def _mid(v: str, c: str) -> str:
    return v[: len(v) // 2] + c + v[len(v) // 2 :]


def _at(v: str, sep: str, c: str, after: bool) -> str:
    k = v.index(sep) + (1 if after else 0)
    return v[:k] + c + v[k:]


FULLWIDTH = {chr(c): chr(c + 0xFEE0) for c in range(0x21, 0x7F)}  # "!".."~" -> U+FF01..U+FF5E (NFKC: back)

VARIANTS = {
    "zwsp-middle": lambda v, s: _mid(v, "\u200b"),
    "zwsp-before-sep": lambda v, s: _at(v, s, "\u200b", False),
    "zwsp-after-sep": lambda v, s: _at(v, s, "\u200b", True),
    "soft-hyphen": lambda v, s: _mid(v, "\u00ad"),
    "word-joiner": lambda v, s: _mid(v, "\u2060"),
    "bom": lambda v, s: _mid(v, "\ufeff"),
    "zwnj": lambda v, s: _mid(v, "\u200c"),
    "zwj": lambda v, s: _mid(v, "\u200d"),
    "lrm": lambda v, s: _mid(v, "\u200e"),
    "rlm": lambda v, s: _at(v, s, "\u200f", True),
    "invisible-times": lambda v, s: _mid(v, "\u2062"),
    "mongolian-vowel-sep": lambda v, s: _mid(v, "\u180e"),
    "tag-char": lambda v, s: _mid(v, "\U000e0041"),
    "bell-control": lambda v, s: _mid(v, "\x07"),
    "combining-grapheme-joiner": lambda v, s: _mid(v, "\u034f"),
    "variation-selector": lambda v, s: _mid(v, "\ufe0f"),
    "combining-accent": lambda v, s: _mid(v, "\u0301"),
    "zwsp-everywhere": lambda v, s: "\u200b".join(v),
    "lre-embedding": lambda v, s: v[:2] + "\u202a" + v[2:-2] + "\u202c" + v[-2:],
    "rlo-reversed": lambda v, s: "\u202e" + v[::-1] + "\u202c",
    "fullwidth": lambda v, s: "".join(FULLWIDTH.get(c, c) for c in v),
    "nbsp-or-fullwidth-sep": lambda v, s: v.replace(" ", "\u00a0") if s == " " else v.replace(s, FULLWIDTH[s], 1),
}
NORMALIZERS = {"bert": normalizers.BertNormalizer(lowercase=True).normalize_str, "none": None}


def _visible_range(text: str, start: int, end: int, kind: str) -> tuple[int, int]:
    """The first and one past the last character of ``text[start:end]`` that the view keeps (for ``context``:
    of the value beside the cue)."""
    kept = [
        i for i in range(start, end) if view_char(text[i]) and (kind != "context" or view_char(text[i]) in "QWXYZK")
    ]
    return min(kept), max(kept) + 1


def _found_whole(kind: str, value: str, normalize) -> bool:
    text = f"please note {value} today"
    a, b = _visible_range(text, len("please note "), len("please note ") + len(value), kind)
    det = build_detectors(parse_sensitive({"epsilon": 1.0, "detectors": [DETECTOR_OF.get(kind, kind)]}))
    spans = sensitive_spans(det, [text], normalize=normalize).to_lists()[0]
    return any(s <= a and b <= e for s, e in spans)


@pytest.mark.parametrize("normalizer", list(NORMALIZERS))
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("kind", list(VALUES))
def test_every_kind_is_found_whole_through_every_evasion(kind, variant, normalizer):
    value, sep = VALUES[kind]
    assert _found_whole(kind, value, NORMALIZERS[normalizer])  # the plain value: found as one span
    evaded = VARIANTS[variant](value, sep)
    assert evaded != value
    assert _found_whole(kind, evaded, NORMALIZERS[normalizer]), ascii(evaded)


def test_every_builtin_kind_has_a_value():
    assert set(BUILTIN_DETECTORS) <= {DETECTOR_OF.get(k, k) for k in VALUES}


def test_the_view_drops_reverses_and_maps_back():
    v = detection_view(["x \u202emoc.elpmaxe@nna\u202c y", "a\u00adb \uff14\uff12", "plain"])
    assert v.texts == ["x ann@example.com y", "ab 42", "plain"]
    assert v.maps[2] is None  # plain ASCII: no map
    assert v.maps[0].tolist()[2:5] == [17, 16, 15]  # "ann" stands at the run's end, read backwards
    assert [unicodedata.category(c) for c in "\u200b\u00ad\u2060\ufeff"] == ["Cf"] * 4


def test_the_view_follows_the_tokenizers_normaliser():
    nfkc = normalizers.NFKC().normalize_str
    # a change of case or accent alone is not applied; a rewrite to another character is
    assert view_char("É", normalizers.BertNormalizer(lowercase=True).normalize_str) == "É"
    assert view_char("\u2460", nfkc) == "1"  # CIRCLED DIGIT ONE
    drop_x = normalizers.Replace("x", "").normalize_str
    assert view_char("x", drop_x) == "" and view_char("y", drop_x) == "y"
    # a normaliser that marks spaces or prepends "▁" (SentencePiece) does not make every character a mark
    sp = normalizers.Sequence([normalizers.Replace(" ", "\u2581"), normalizers.Prepend("\u2581")]).normalize_str
    assert detection_view(["call 555 0142"], sp).texts == ["call 555 0142"]


@pytest.mark.parametrize("model", ["tiny_bert", "tiny_gpt2", "static"])
def test_the_release_selects_an_evaded_email(model, request, tmp_path):
    """End to end, others kept: the email with a zero-width space before its "@" is selected like the plain one
    (issue 53's reproduction), with a WordPiece, a byte-level BPE (no normaliser) and static word vectors."""
    if model == "static":
        import numpy as np

        from tests.utils import write_vectors

        words = ["write", "to", "today", "a", "b", "c"]
        path = str(write_vectors(tmp_path / "v.txt", words, np.arange(12.0).reshape(6, 2)))
    else:
        path = request.getfixturevalue(model)
    sens = {"epsilon": 1.0, "detectors": ["email", "phone", "card", "number"], "others": "keep"}
    # static vectors: the email is not in the file; passthrough="keep" would release it verbatim unless selected
    extra = {"passthrough": "keep"} if model == "static" else {}
    priv = Privatizer(PrivatizerConfig(epsilon=50.0, model=path, sensitive=sens, **extra), seed=2**40 + 5301)
    texts = ["write to zqxann@zqxmail.example today", "write to zqxann\u200b@zqxmail.example today"]
    out = priv({"text": texts}, [0, 1])
    plain, evaded = out["dp_sensitive_tokens"]
    assert evaded >= plain and (plain > 0 or model == "static")  # GPT-2 keeps the ZWSP as bytes: selected too
    assert "zqxann" not in out["text"][1] and "zqxmail" not in out["text"][1]
    assert out["text"][1].startswith("write to ") and out["text"][1].endswith(" today")


@pytest.mark.parametrize("variant", ["zwsp-middle", "soft-hyphen", "word-joiner", "bom", "zwsp-everywhere"])
@pytest.mark.parametrize("detector", ["name", "spacy"])
def test_names_are_found_whole_through_evasions_by_name_and_ner(detector, variant):
    """Issue 53 S1 for the context detectors too: ``name`` and spaCy's NER read the same view as the rules, so a
    format character inside a name hides nothing from them."""
    if detector == "spacy":
        pytest.importorskip("spacy")
        from hf_textdp.sensitive import best_english_ner

        pipeline = best_english_ner()
        if pipeline is None:
            pytest.skip("no English spaCy pipeline with NER is installed (pip install 'hf-textdp[ner]')")
        detector = f"spacy:{pipeline}"
    else:
        pytest.importorskip("wordfreq")
    value = VARIANTS[variant]("Margaret Thompson", " ")
    text = f"Hello, this is {value} from the billing team."
    a, b = _visible_range(text, len("Hello, this is "), len("Hello, this is ") + len(value), "name")
    det = build_detectors(parse_sensitive({"epsilon": 1.0, "detectors": [detector]}))
    spans = sensitive_spans(det, [text], normalize=NORMALIZERS["bert"]).to_lists()[0]
    covered = {i for s, e in spans for i in range(s, e)}
    assert {i for i in range(a, b) if view_char(text[i]) not in ("", " ")} <= covered, (ascii(text), spans)
