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

In both cases two words that would otherwise run together letter to letter (a replaced word-initial
token that lacks its own space) get one space, so a new word starts where the original had a word
boundary. Passthrough positions (the unknown token) decode to the unknown token's own form, such
as ``[UNK]``: the original characters of an unknown word are not released.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from .errors import TokenizerNotSupportedError


__all__ = ["TokenizedRow", "HFTokens", "WordTokens", "make_tokens"]

_WS_SPLIT = re.compile(r"(\s+)")


@dataclass
class TokenizedRow:
    ids: np.ndarray  # int64 token ids (static: vocabulary row, -1 for an unknown word)
    pieces: list[str] | None = None  # static vectors: the words
    seps: list[str] | None = None  # static vectors / HF words: separators, len(pieces or words) + 1
    words: list[tuple[int, int]] | None = None  # HF: each word's positions [start, stop) in the row


class HFTokens:
    """Tokenization and decoding with a Hugging Face tokenizer's fast backend."""

    def __init__(self, tokenizer: Any) -> None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise TokenizerNotSupportedError(
                f"model: the tokenizer {type(tokenizer).__name__} has no fast (Rust) backend; hf-textdp needs a fast "
                "tokenizer (PreTrainedTokenizerFast)."
            )
        tok = Tokenizer.from_str(backend.to_str())
        tok.no_truncation()
        tok.no_padding()
        tok.encode_special_tokens = True
        self._tok = tok
        self._decoder = tokenizer.backend_tokenizer
        self._spacing_in_tokens = _whitespace_in_tokens(tok)
        # decoding "a" + a word's ids and cutting "a" off gives the word as it reads after earlier text
        # (a WordPiece "##" piece glued, a "▁"/"Ġ" piece with its space) instead of as a text start
        self._anchor: list[int] = list(tok.encode("a", add_special_tokens=False).ids)
        self._anchor_text: str = self._decoder.decode(self._anchor, skip_special_tokens=False) if self._anchor else ""
        self._single_text: dict[int, str] = {}  # 2·id + at_start -> the text of a word of that one id

    def _encode_ids(self, texts: Sequence[str]) -> list[list[int]]:
        batch = texts if isinstance(texts, list) else list(texts)
        if hasattr(self._tok, "encode_batch_fast"):  # tokenizers >= 0.21: no offsets computed
            encs = self._tok.encode_batch_fast(batch, add_special_tokens=True)
        else:
            encs = self._tok.encode_batch(batch, add_special_tokens=True)
        return [e.ids for e in encs]

    def encode(self, texts: Sequence[str]) -> list[TokenizedRow]:
        return [TokenizedRow(np.asarray(ids, dtype=np.int64)) for ids in self._encode_ids(texts)]

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, list[TokenizedRow] | None]:
        """All rows' ids concatenated (int64), each row's length, and each row's word layout.

        The per-row records hold no ids (``ids`` is empty): only the positions of each word and, where
        the tokens hold no whitespace, the input's whitespace around the words (see :meth:`decode_flat`).
        """
        batch = texts if isinstance(texts, list) else list(texts)
        encs = self._tok.encode_batch(batch, add_special_tokens=True)
        per_row = [e.ids for e in encs]
        lengths = np.fromiter(map(len, per_row), dtype=np.int64, count=len(per_row))
        flat = np.fromiter(itertools.chain.from_iterable(per_row), dtype=np.int64, count=int(lengths.sum()))
        empty = np.zeros(0, dtype=np.int64)
        rows = []
        for text, enc in zip(batch, encs, strict=True):
            words, seps = _word_layout(text, enc.word_ids, enc.offsets, keep_spacing=not self._spacing_in_tokens)
            rows.append(TokenizedRow(empty, None, seps, words))
        return flat, lengths, rows

    def decode_flat(
        self, ids: np.ndarray, lengths: np.ndarray, drop: np.ndarray, rows: Sequence[TokenizedRow]
    ) -> list[str]:
        """Rebuild each row's text from its (privatized) ids, word by word (module docstring).

        Args:
            ids (`np.ndarray`): all rows' ids, concatenated, one to one with the input's tokenization.
            lengths (`np.ndarray`): each row's number of positions.
            drop (`np.ndarray`): bool per position; ``True`` positions (structural) are not decoded.
            rows (`Sequence[TokenizedRow]`): the layouts from :meth:`encode_flat` for the same rows.
        """
        counts = [len(row.words or ()) for row in rows]
        n_words = sum(counts)
        if n_words == 0:
            return [_join_words([], row.seps, spacing_in_tokens=self._spacing_in_tokens) for row in rows]
        # every word's global [start, stop), and whether it opens its row
        row_start = np.zeros(len(rows), dtype=np.int64)
        np.cumsum(lengths[:-1], out=row_start[1:])
        flat_words = itertools.chain.from_iterable(itertools.chain.from_iterable(r.words or () for r in rows))
        pairs = np.fromiter(flat_words, dtype=np.int64, count=2 * n_words).reshape(n_words, 2)
        pairs += np.repeat(row_start, counts)[:, None]
        first = np.zeros(n_words, dtype=bool)
        opens = np.cumsum(counts) - counts
        first[opens[np.asarray(counts) > 0]] = True
        at_start = first & self._spacing_in_tokens
        # a word of one kept id reads the same wherever it stands: its text comes from a per-id cache
        ws, we = pairs[:, 0], pairs[:, 1]
        single = (we - ws == 1) & ~drop[ws]
        texts: list[str] = [""] * n_words
        idx_single = np.nonzero(single)[0]
        keys = (ids[ws[idx_single]] * 2 + at_start[idx_single]).tolist()
        cache = self._single_text
        missing = sorted({k for k in keys if k not in cache})
        if missing:
            fresh = self._decode_words([[k >> 1] for k in missing], [bool(k & 1) for k in missing])
            cache.update(zip(missing, fresh, strict=True))
        for i, k in zip(idx_single.tolist(), keys, strict=True):
            texts[i] = cache[k]
        # the other words (several pieces, or a dropped position) decode together in one batch
        ids_l = ids.tolist()
        drop_l = drop.tolist()
        rest = np.nonzero(~single)[0].tolist()
        seqs = [[ids_l[j] for j in range(a, b) if not drop_l[j]] for a, b in pairs[rest].tolist()]
        for i, t in zip(rest, self._decode_words(seqs, at_start[rest].tolist()), strict=True):
            texts[i] = t
        out = []
        k = 0
        for row, m in zip(rows, counts, strict=True):
            out.append(_join_words(texts[k : k + m], row.seps, spacing_in_tokens=self._spacing_in_tokens))
            k += m
        return out

    def _decode_words(self, words: list[list[int]], at_start: list[bool]) -> list[str]:
        """Each word's ids decoded as they read after earlier text (behind the anchor, cut off again), or as a
        text start where ``at_start`` (the row's first word when the tokens hold the spacing) or empty."""
        starts = [s or not w for w, s in zip(words, at_start, strict=True)]
        seqs = [w if s else self._anchor + w for w, s in zip(words, starts, strict=True)]
        decoded: list[str] = self._decoder.decode_batch(seqs, skip_special_tokens=False) if seqs else []
        anchor, cut = self._anchor_text, len(self._anchor_text)
        return [d if s or not d.startswith(anchor) else d[cut:] for d, s in zip(decoded, starts, strict=True)]

    def decode(self, rows: Sequence[np.ndarray]) -> list[str]:
        """Decode kept ids (structural positions already removed) as one sequence, without the input's layout."""
        return self.decode_lists([r.tolist() for r in rows])

    def decode_lists(self, rows: Sequence[list[int]]) -> list[str]:
        """:meth:`decode` for rows given as lists of ints."""
        out: list[str] = self._decoder.decode_batch(rows, skip_special_tokens=False)
        return out


def _whitespace_in_tokens(tok: Any) -> bool:
    """Whether the pre-tokenized words keep the input's spaces (byte-level BPE, SentencePiece) or drop them."""
    text = "a b"
    if tok.normalizer is not None:
        text = tok.normalizer.normalize_str(text)
    if tok.pre_tokenizer is None:
        return True  # the model sees the spaces
    covered = sum(end - begin for _, (begin, end) in tok.pre_tokenizer.pre_tokenize_str(text))
    return bool(covered >= len(text))


def _word_layout(
    text: str, word_ids: Sequence[int | None], offsets: Sequence[tuple[int, int]], *, keep_spacing: bool
) -> tuple[list[tuple[int, int]], list[str] | None]:
    """Each word's positions [start, stop) and, with ``keep_spacing``, the whitespace around the words.

    Template special tokens (no word, empty offsets) belong to no word. ``seps[0]`` is the whitespace
    before the first word, ``seps[k]`` that between words k - 1 and k, ``seps[-1]`` that after the last;
    characters other than whitespace between words (dropped by the tokenizer's normalizer) are not kept.
    """
    words: list[tuple[int, int]] = []
    spans: list[tuple[int, int]] = []
    prev: int | None = None
    for j, (w, (b, e)) in enumerate(zip(word_ids, offsets, strict=True)):
        if w is None:
            if e <= b:
                prev = None
                continue
        elif w == prev and words and words[-1][1] == j:
            words[-1] = (words[-1][0], j + 1)
            spans[-1] = (spans[-1][0], max(spans[-1][1], e))
            continue
        words.append((j, j + 1))
        spans.append((b, e))
        prev = w
    if not keep_spacing:
        return words, None
    seps = []
    end = 0
    for b, e in spans:
        seps.append(_only_space(text[end:b]) if b > end else "")
        end = max(end, e)
    seps.append(_only_space(text[end:]))
    return words, seps


def _only_space(s: str) -> str:
    return s if s.isspace() else "".join(c for c in s if c.isspace())


def _run_together(left: str, right: str) -> bool:
    """Two letters that would read as one word; wide (CJK) letters are written without spaces."""
    return (
        left.isalpha()
        and right.isalpha()
        and unicodedata.east_asian_width(left) not in "WF"
        and unicodedata.east_asian_width(right) not in "WF"
    )


def _join_words(words: Sequence[str], seps: Sequence[str] | None, *, spacing_in_tokens: bool) -> str:
    """Join decoded words with the input's whitespace (``seps``) or the tokens' own (``seps=None``)."""
    parts: list[str] = []
    pending = seps[0] if seps else ""
    last = ""
    for k, word in enumerate(words):
        if not spacing_in_tokens:
            word = word.lstrip()  # the decoder's own space between words; the tokens hold none
        if k and seps:
            pending += seps[k]
        if not word:
            continue
        if parts and not pending and not word[0].isspace() and _run_together(last, word[0]):
            pending = " "
        parts.append(pending)
        parts.append(word)
        pending = ""
        last = word[-1]
    parts.append(pending + (seps[-1] if seps and len(seps) > 1 else ""))
    return "".join(parts)


class WordTokens:
    """Exact whitespace words looked up in a static vector file's vocabulary (space.md §3)."""

    def __init__(self, word_to_id: dict[str, int]) -> None:
        self._w2i = word_to_id

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

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, list[TokenizedRow] | None]:
        """All rows' ids concatenated (int64), each row's length, and the per-row words and separators."""
        rows = self.encode(texts)
        lengths = np.fromiter((r.ids.size for r in rows), dtype=np.int64, count=len(rows))
        flat = np.concatenate([r.ids for r in rows]) if rows else np.zeros(0, dtype=np.int64)
        return flat, lengths, rows

    @staticmethod
    def decode_words(words: Sequence[str], seps: Sequence[str]) -> str:
        out = [seps[0]]
        for w, s in zip(words, seps[1:], strict=False):
            out.append(w)
            out.append(s)
        return "".join(out)


def make_tokens(space: Any) -> HFTokens | WordTokens:
    if space.kind == "hf":
        return HFTokens(space.tokenizer)
    return WordTokens(space.word_to_id())
