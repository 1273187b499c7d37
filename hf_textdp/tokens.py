"""Tokenize, classify and decode (space.md §1, §4).

Hugging Face tokenizers run through their fast backend with ``encode_special_tokens=True`` (text
that spells ``[CLS]`` is text), the template's special tokens added, and no truncation or padding
(a 5,000-token text is privatized whole, with no length warning). Static word vectors split text
into maximal runs of non-whitespace (``str.split()`` semantics) and keep the separators verbatim.

Decoding rebuilds the text word by word, so it reads like text. A *word* is one word of the
tokenizer's pre-tokenizer (``Encoding.word_ids``); which positions start a word is public (the
threat model's "subword pieces per word"). Each word's privatized ids are decoded together by the
tokenizer's own decoder (WordPiece ``##`` glued, byte-level BPE bytes joined, SentencePiece ``▁``
turned into spaces, the decoder's own clean-up applied), as they would read after some earlier
text, so a replaced word-initial token never shows a stray leading ``##``. Between words:

- where the tokens hold no whitespace (WordPiece, ``Whitespace`` pre-tokenizers), the original
  whitespace between words is copied, taken from the input's offsets; it never reaches the
  mechanism and is outside the guarantee, like the word boundaries (docs/threat_model.md). Other
  characters the tokenizer dropped (control characters) are not copied;
- where the tokens hold the whitespace (byte-level BPE, SentencePiece), it is part of a token's
  identity and is privatized with it, so only the decoded (privatized) tokens give the spacing.

In both cases two words that would otherwise run together (a replaced word-initial token that lacks
its own space, where the tokenizer's pre-tokenizer would read the two as one word) get one space, so
a new word starts where the original had a word boundary. Passthrough positions (the unknown token) decode
to the unknown token's own form, such as ``[UNK]``: the original characters of an unknown word are
not released. A static vector file's missing word is released as ``<unk>`` (``passthrough="placeholder"``,
the default) or verbatim (``passthrough="keep"``).
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from .errors import (
    HfTextDPError,
    InvalidParameterError,
    InvalidRowError,
    ParameterTypeError,
    TokenizerNotSupportedError,
)


__all__ = [
    "TokenizedRow",
    "WordLayout",
    "HFTokens",
    "backend_json",
    "WordTokens",
    "make_tokens",
    "UNKNOWN_WORD",
    "PASSTHROUGH_MODES",
]

_WS_SPLIT = re.compile(r"(\s+)")

# How a static vector file's missing word is released (config ``passthrough``): as UNKNOWN_WORD, or verbatim.
PASSTHROUGH_MODES = ("placeholder", "keep")
UNKNOWN_WORD = "<unk>"  # a static vector file has no unknown token of its own: this fixed form stands for one


@dataclass
class TokenizedRow:
    ids: np.ndarray  # int64 token ids (static: vocabulary row, -1 for an unknown word)
    pieces: list[str] | None = None  # static vectors: the words
    seps: list[str] | None = None  # static vectors: the separators, len(pieces) + 1


@dataclass
class WordLayout:
    """A batch's words (Hugging Face tokenizers), held flat: word k covers the batch's positions
    ``starts[k]:stops[k]`` and belongs to row ``rows[k]``; ``counts[r]`` words are row r's. Where the tokens
    hold no whitespace, ``seps`` (an object array of str) holds the input's whitespace: ``counts[r] + 1``
    strings a row (before each word, then after the last), rows one after another. ``offsets`` (int64
    ``[N, 2]``) are the positions' character offsets in their row's text (``(0, 0)`` for template special
    tokens), what selective privatization maps character spans with (``hf_textdp.sensitive``)."""

    starts: np.ndarray
    stops: np.ndarray
    rows: np.ndarray
    counts: np.ndarray
    seps: np.ndarray | None
    offsets: np.ndarray | None = None


def backend_json(tokenizer: Any) -> str:
    """The serialization of a Hugging Face tokenizer's fast (Rust) backend; refused for a slow tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise TokenizerNotSupportedError(
            f"model: the tokenizer {type(tokenizer).__name__} has no fast (Rust) backend; hf-textdp needs a fast "
            "tokenizer (PreTrainedTokenizerFast)."
        )
    text: str = backend.to_str()
    return text


class HFTokens:
    """Tokenization and decoding with a Hugging Face tokenizer's fast backend."""

    def __init__(self, tokenizer: Any) -> None:
        """``tokenizer``: a fast Hugging Face tokenizer, or its backend's serialization
        (``backend_tokenizer.to_str()``, kept in the disk cache by :mod:`hf_textdp.io.tokenizer_facts`: no
        ``transformers`` import)."""
        backend = tokenizer if isinstance(tokenizer, str) else backend_json(tokenizer)
        tok = Tokenizer.from_str(backend)
        tok.no_truncation()
        tok.no_padding()
        tok.encode_special_tokens = True
        self._tok = tok
        self._decoder = tok  # decoding reads none of the settings above
        self._spacing_in_tokens = _whitespace_in_tokens(tok)
        self._pre_tokenizer = tok.pre_tokenizer
        #: the normaliser's ``str -> str`` (``None``: the tokenizer has none); the detectors read what it leaves
        self.normalize: Callable[[str], str] | None = None if tok.normalizer is None else tok.normalizer.normalize_str
        self._pairs: dict[str, bool] = {}  # two characters -> whether the pre-tokenizer makes them one word
        # decoding "a" + a word's ids and cutting "a" off gives the word as it reads after earlier text
        # (a WordPiece "##" piece glued, a "▁"/"Ġ" piece with its space) instead of as a text start
        self._anchor: list[int] = list(tok.encode("a", add_special_tokens=False).ids)
        self._anchor_text: str = self._decoder.decode(self._anchor, skip_special_tokens=False) if self._anchor else ""
        size = 2 * tok.get_vocab_size(with_added_tokens=True)
        self._texts = np.empty(size, dtype=object)  # 2·id + at_start -> the text of a word of that one id
        self._known, self._lead, self._tail, self._empty = (np.zeros(size, dtype=bool) for _ in range(4))

    def _encode_ids(self, texts: Sequence[str]) -> list[list[int]]:
        batch = texts if isinstance(texts, list) else list(texts)
        fast = getattr(self._tok, "encode_batch_fast", None)  # tokenizers >= 0.21: no offsets computed
        encs = _encoded(fast or self._tok.encode_batch, batch)
        return [e.ids for e in encs]

    def encode(self, texts: Sequence[str]) -> list[TokenizedRow]:
        return [TokenizedRow(np.asarray(ids, dtype=np.int64)) for ids in self._encode_ids(texts)]

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, WordLayout]:
        """All rows' ids concatenated (int64), each row's length, and the batch's words (:class:`WordLayout`)."""
        batch = texts if isinstance(texts, list) else list(texts)
        encs = _encoded(self._tok.encode_batch, batch)
        per_row = [e.ids for e in encs]
        lengths = np.fromiter(map(len, per_row), dtype=np.int64, count=len(per_row))
        flat = np.fromiter(itertools.chain.from_iterable(per_row), dtype=np.int64, count=int(lengths.sum()))
        return flat, lengths, _word_layout(batch, encs, lengths, keep_spacing=not self._spacing_in_tokens)

    @property
    def spacing_in_tokens(self) -> bool:
        """Whether the tokens hold the input's spaces (byte-level BPE, SentencePiece)."""
        return self._spacing_in_tokens

    def token(self, token_id: int) -> str:
        """The vocabulary's form of one id (``"[UNK]"``)."""
        return str(self._tok.id_to_token(token_id))

    def decode_flat(
        self,
        ids: np.ndarray,
        lengths: np.ndarray,
        drop: np.ndarray,
        layout: WordLayout,
        replace: tuple[np.ndarray, Any] | None = None,
    ) -> list[str]:
        """Rebuild each row's text from its (privatized) ids, word by word (module docstring).

        Args:
            ids (`np.ndarray`): all rows' ids, concatenated, one to one with the input's tokenization.
            lengths (`np.ndarray`): each row's number of positions.
            drop (`np.ndarray`): bool per position; ``True`` positions (structural) are not decoded.
            layout (`WordLayout`): the words from :meth:`encode_flat` for the same rows.
            replace (`tuple`, *optional*): ``(words, texts)``: the words marked (bool per word) read ``texts``
                (a str, or one per word) whole (selective privatization's placeholder render).
        """
        starts, stops, counts = layout.starts, layout.stops, layout.counts
        n, W = counts.size, starts.size
        ends = np.cumsum(counts)  # row r's words are ends[r] - counts[r] … ends[r] - 1
        first = np.zeros(W, dtype=bool)
        first[(ends - counts)[counts > 0]] = True
        at_start = first & self._spacing_in_tokens
        texts = np.empty(W, dtype=object)
        lead = np.zeros(W, dtype=bool)  # the word starts with a character that may run into the one before
        tail = np.zeros(W, dtype=bool)  # … ends with one
        # a word of one kept id reads the same wherever it stands: its text comes from a per-id cache
        single = (stops - starts == 1) & ~drop[starts]
        idx = np.flatnonzero(single)
        keys = ids[starts[idx]] * 2 + at_start[idx]
        self._cache_words(keys)
        texts[idx], lead[idx], tail[idx] = self._texts[keys], self._lead[keys], self._tail[keys]
        # the other words (several pieces, or a dropped position) decode together in one batch
        rest = np.flatnonzero(~single)
        if rest.size:
            ids_l, drop_l = ids.tolist(), drop.tolist()
            spans = zip(starts[rest].tolist(), stops[rest].tolist(), strict=True)
            seqs = [[ids_l[j] for j in range(a, b) if not drop_l[j]] for a, b in spans]
            words = self._decode_words(seqs, at_start[rest].tolist())
            texts[rest] = words
            lead[rest], tail[rest] = _joinable_ends(words)
        empty = np.zeros(W, dtype=bool)
        empty[idx] = self._empty[keys]
        empty[rest] = [not t for t in texts[rest]]
        if replace is not None:
            mark = replace[0]
            texts[mark] = replace[1] if isinstance(replace[1], str) else replace[1][mark]
            empty[mark] = lead[mark] = tail[mark] = False
        # two words that would run together, with no whitespace between them, get a space
        seps = np.full(W + n, "", dtype=object) if layout.seps is None else layout.seps.copy()
        slot = np.arange(W) + layout.rows  # seps[slot[k]] stands before word k
        touch = np.zeros(W, dtype=bool)
        touch[1:] = ~first[1:] & tail[:-1] & lead[1:]
        touch &= seps[slot] == ""
        glue = [k for k in np.flatnonzero(touch).tolist() if self.run_together(texts[k - 1][-1], texts[k][0])]
        seps[slot[glue]] = " "
        # each row: seps[0], word 0, seps[1], word 1, …, the last separator
        parts = np.empty(2 * W + n, dtype=object)
        parts[2 * np.arange(W) + layout.rows] = seps[slot]
        parts[2 * np.arange(W) + layout.rows + 1] = texts
        parts[2 * ends + np.arange(n)] = seps[ends + np.arange(n)]
        part_list = parts.tolist()
        bound = (2 * ends + np.arange(n) + 1).tolist()
        out = ["".join(part_list[a:b]) for a, b in zip([0, *bound[:-1]], bound, strict=True)]
        # rows with a word that decodes to nothing keep the whitespace around it: the general path
        for r in np.unique(layout.rows[empty]).tolist():
            k0, k1 = int(ends[r] - counts[r]), int(ends[r])
            row_seps = None if layout.seps is None else layout.seps[k0 + r : k1 + r + 1].tolist()
            out[r] = _join_words(texts[k0:k1].tolist(), row_seps, self.run_together)
        return out

    def run_together(self, a: str, b: str) -> bool:
        """Whether character ``a`` followed by ``b`` is one word for this tokenizer's pre-tokenizer (BERT's splits
        only at punctuation, so ``luck`` + ``1991`` would read as one word; GPT-2's also between letters and
        digits): two decoded words that meet there, with no whitespace between them, get a space."""
        key = a + b
        hit = self._pairs.get(key)
        if hit is None:
            pre = self._pre_tokenizer
            hit = _may_join(a) and _may_join(b) and (pre is None or len(pre.pre_tokenize_str(key)) == 1)
            self._pairs[key] = hit
        return hit

    def _cache_words(self, keys: np.ndarray) -> None:
        """Fill the per-id cache (key 2·id + at_start) for ``keys``: text, its joinable ends and emptiness."""
        size = self._texts.size
        if keys.size and int(keys.max()) >= size:
            grow = max(2 * size, int(keys.max()) + 1)
            self._texts = np.concatenate([self._texts, np.empty(grow - size, dtype=object)])
            self._known, self._lead, self._tail, self._empty = (
                np.concatenate([a, np.zeros(grow - size, dtype=bool)])
                for a in (self._known, self._lead, self._tail, self._empty)
            )
        missing = np.unique(keys[~self._known[keys]])
        if missing.size:
            words = self._decode_words([[k] for k in (missing >> 1).tolist()], (missing & 1).astype(bool).tolist())
            self._texts[missing] = words
            self._lead[missing], self._tail[missing] = _joinable_ends(words)
            self._empty[missing] = [not w for w in words]
            self._known[missing] = True

    def _decode_words(self, words: list[list[int]], at_start: list[bool]) -> list[str]:
        """Each word's ids decoded as they read after earlier text (behind the anchor, cut off again), or as a
        text start where ``at_start`` (the row's first word when the tokens hold the spacing) or empty."""
        starts = [s or not w for w, s in zip(words, at_start, strict=True)]
        seqs = [w if s else self._anchor + w for w, s in zip(words, starts, strict=True)]
        decoded: list[str] = self._decoder.decode_batch(seqs, skip_special_tokens=False) if seqs else []
        anchor, cut = self._anchor_text, len(self._anchor_text)
        out = [d if s or not d.startswith(anchor) else d[cut:] for d, s in zip(decoded, starts, strict=True)]
        # where the tokens hold no whitespace, the space the decoder puts before a word is not the input's
        return out if self._spacing_in_tokens else [d.lstrip() for d in out]

    def decode(self, rows: Sequence[np.ndarray]) -> list[str]:
        """Decode kept ids (structural positions already removed) as one sequence, without the input's layout."""
        return self.decode_lists([r.tolist() for r in rows])

    def decode_lists(self, rows: Sequence[list[int]]) -> list[str]:
        """:meth:`decode` for rows given as lists of ints."""
        out: list[str] = self._decoder.decode_batch(rows, skip_special_tokens=False)
        return out


def _encoded(encode: Any, batch: list[str]) -> list[Any]:
    """``encode(batch, add_special_tokens=True)``, with a text the tokenizer cannot take named by its row instead
    of the tokenizer's ``TypeError``."""
    try:
        encs: list[Any] = encode(batch, add_special_tokens=True)
    except TypeError:
        fault = text_fault(batch, "row {} of the batch")
        if fault is None:
            raise
        raise fault from None
    return encs


def text_fault(texts: Sequence[Any], where: str) -> HfTextDPError | None:
    """Why a tokenizer refuses ``texts``: an entry that is not a str, or a lone surrogate (a str with no UTF-8
    form), named by ``where.format(i)``; ``None`` if neither. For after the tokenizer's ``TypeError`` only."""
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            return ParameterTypeError(f"{where.format(i)}: expected str, got {type(text).__name__}.")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            return InvalidRowError(
                f"{where.format(i)}: the text is not valid Unicode (a lone surrogate at character {err.start}); "
                "decode the source with errors='replace' or clean it first."
            )
    return None


def _whitespace_in_tokens(tok: Any) -> bool:
    """Whether the pre-tokenized words keep the input's spaces (byte-level BPE, SentencePiece) or drop them."""
    text = "a b"
    if tok.normalizer is not None:
        text = tok.normalizer.normalize_str(text)
    if tok.pre_tokenizer is None:
        return True  # the model sees the spaces
    covered = sum(end - begin for _, (begin, end) in tok.pre_tokenizer.pre_tokenize_str(text))
    return bool(covered >= len(text))


def _word_layout(texts: list[str], encs: Sequence[Any], lengths: np.ndarray, *, keep_spacing: bool) -> WordLayout:
    """The batch's words from the encodings' word ids and character offsets, and, with ``keep_spacing``,
    the whitespace around them.

    A word is a run of positions with the same word id; template special tokens (no word id, empty
    offsets) belong to no word and split runs, and a position with no word id but characters is a word
    of its own. A word's whitespace before it is that of the input between the end of everything before
    it in the row and its first character; characters other than whitespace there (dropped by the
    tokenizer's normalizer) are not kept.
    """
    N, n = int(lengths.sum()), len(texts)
    wid = np.fromiter(itertools.chain.from_iterable(e.word_ids for e in encs), dtype=np.float64, count=N)  # None: nan
    offsets = itertools.chain.from_iterable(itertools.chain.from_iterable(e.offsets for e in encs))
    off = np.fromiter(offsets, dtype=np.int64, count=2 * N).reshape(N, 2)
    skip = np.isnan(wid) & (off[:, 1] <= off[:, 0])
    opens = np.zeros(N, dtype=bool)
    opens[(np.cumsum(lengths) - lengths)[lengths > 0]] = True
    cont = np.zeros(N, dtype=bool)
    cont[1:] = (wid[1:] == wid[:-1]) & ~skip[:-1] & ~opens[1:]
    breaks = np.flatnonzero(~cont)
    starts = np.flatnonzero(~cont & ~skip)
    stops = np.append(breaks, N)[np.searchsorted(breaks, starts, side="right")]
    rows = np.repeat(np.arange(n, dtype=np.int64), lengths)[starts]
    counts = np.bincount(rows, minlength=n)
    if not keep_spacing:
        return WordLayout(starts, stops, rows, counts, None, off)
    # each word's last character: the largest offset end of its positions (skipped positions count -1)
    W = starts.size
    ends = np.maximum.reduceat(np.where(skip, -1, off[:, 1]), starts) if W else np.zeros(0, dtype=np.int64)
    # the gap before word k runs from the end of everything before it in its row; after the last word, to the
    # text's end
    shift = rows << 32
    reach = np.maximum.accumulate(ends + shift) - shift
    heads = np.cumsum(counts) - counts  # each row's first word
    last = heads + counts - 1
    lens = np.fromiter(map(len, texts), dtype=np.int64, count=n)
    begin = np.zeros(W + n, dtype=np.int64)
    stop = np.repeat(lens, counts + 1)
    slot = np.arange(W) + rows
    stop[slot] = off[starts, 0]
    begin[slot[1:]] = reach[:-1]
    begin[slot[heads[counts > 0]]] = 0
    tails = last + np.arange(n) + 1
    begin[tails[counts > 0]] = reach[last[counts > 0]]
    # most gaps are empty or one space (read from the batch's code points); the rest are sliced from the text
    text_of = np.repeat(np.arange(n), counts + 1)
    width = stop - begin
    seps = np.full(W + n, "", dtype=object)
    one = np.flatnonzero(width == 1)
    if one.size:
        codes = np.frombuffer("".join(texts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        space = one[codes[(np.cumsum(lens) - lens)[text_of[one]] + begin[one]] == 32]
        seps[space] = " "
        width[space] = 0
    other = np.flatnonzero(width > 0)
    gaps = zip(other.tolist(), text_of[other].tolist(), begin[other].tolist(), stop[other].tolist(), strict=True)
    for j, r, a, b in gaps:
        seps[j] = _only_space(texts[r][a:b])
    return WordLayout(starts, stops, rows, counts, seps, off)


def _only_space(s: str) -> str:
    return s if s.isspace() else "".join(c for c in s if c.isspace())


def _may_join(c: str) -> bool:
    """A character that may run into a neighbouring one as one word (:meth:`HFTokens.run_together` asks the
    pre-tokenizer): not whitespace, and not wide (CJK is written without spaces)."""
    return bool(c) and not c.isspace() and unicodedata.east_asian_width(c) not in "WF"


def _joinable_ends(words: Sequence[str]) -> tuple[list[bool], list[bool]]:
    """Whether each word starts, and whether it ends, with a character that :func:`_may_join` another."""
    return [bool(w) and _may_join(w[0]) for w in words], [bool(w) and _may_join(w[-1]) for w in words]


def _join_words(words: Sequence[str], seps: Sequence[str] | None, run_together: Callable[[str, str], bool]) -> str:
    """Join decoded words with the input's whitespace (``seps``) or the tokens' own (``seps=None``), where a
    word may decode to nothing (the whitespace around it is kept once); two words that would ``run_together``
    with nothing between them get a space."""
    parts: list[str] = []
    pending = seps[0] if seps else ""
    last = ""
    for k, word in enumerate(words):
        if k and seps:
            pending += seps[k]
        if not word:
            continue
        if parts and not pending and run_together(last, word[0]):
            pending = " "
        parts.append(pending)
        parts.append(word)
        pending = ""
        last = word[-1]
    parts.append(pending + (seps[-1] if seps and len(seps) > 1 else ""))
    return "".join(parts)


class WordTokens:
    """Exact whitespace words looked up in a static vector file's vocabulary (space.md §3).

    A word missing from the file (id -1) is a passthrough position: with ``passthrough="placeholder"`` (the
    default) it is released as :data:`UNKNOWN_WORD`, with ``"keep"`` as itself (no protection).
    """

    def __init__(self, word_to_id: dict[str, int], passthrough: str = "placeholder") -> None:
        if passthrough not in PASSTHROUGH_MODES:
            raise InvalidParameterError(f"passthrough must be one of {list(PASSTHROUGH_MODES)}, got {passthrough!r}.")
        self._w2i = word_to_id
        self.passthrough = passthrough

    def encode(self, texts: Sequence[str]) -> list[TokenizedRow]:
        rows = []
        get = self._w2i.get
        for text in texts:
            parts = _WS_SPLIT.split(text)
            # parts alternates: text, sep, text, sep, ..., text (leading/trailing may be "")
            words = parts[0::2]
            seps = parts[1::2]
            lead = ""
            if words and words[0] == "":
                words = words[1:]
                lead = seps[0] if seps else ""
                seps = seps[1:]
            trail = ""
            if words and words[-1] == "":
                words = words[:-1]
                trail = seps[-1] if seps else ""
                seps = seps[:-1]
            ids = np.fromiter((get(w, -1) for w in words), dtype=np.int64, count=len(words))
            rows.append(TokenizedRow(ids, words, [lead, *seps, trail]))
        return rows

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, list[TokenizedRow]]:
        """All rows' ids concatenated (int64), each row's length, and the per-row words and separators."""
        rows = self.encode(texts)
        lengths = np.fromiter((r.ids.size for r in rows), dtype=np.int64, count=len(rows))
        flat = np.concatenate([r.ids for r in rows]) if rows else np.zeros(0, dtype=np.int64)
        return flat, lengths, rows

    def decode_row(
        self, ids: Sequence[int], row: TokenizedRow, words: Sequence[str], sensitive: Sequence[bool] | None = None
    ) -> str:
        """Row ``row``'s text from its released ids: ``words[i]`` for an id ``i >= 0``, and for a passthrough
        position (``-1``) the placeholder or, with ``passthrough="keep"``, the input's word, unless ``sensitive``
        marks it (a sensitive word is never released verbatim); the input's separators between."""
        pieces = row.pieces or []
        if self.passthrough != "keep":
            out = [words[j] if j >= 0 else UNKNOWN_WORD for j in ids]
        else:
            marks = [False] * len(pieces) if sensitive is None else sensitive
            out = [
                words[j] if j >= 0 else UNKNOWN_WORD if s else w for j, w, s in zip(ids, pieces, marks, strict=True)
            ]
        return self.decode_words(out, row.seps or [""])

    @staticmethod
    def decode_words(words: Sequence[str], seps: Sequence[str]) -> str:
        out = [seps[0]]
        for w, s in zip(words, seps[1:], strict=False):
            out.append(w)
            out.append(s)
        return "".join(out)


def make_tokens(space: Any, passthrough: str = "placeholder") -> HFTokens | WordTokens:
    """The tokenization of ``space``; ``passthrough`` says how a static vector file's missing words are released
    (:class:`WordTokens`; a Hugging Face tokenizer's unknown token always decodes to its own form)."""
    if space.kind == "hf":
        return HFTokens(space.backend_json or space.tokenizer)
    return WordTokens(space.word_to_id(), passthrough)
