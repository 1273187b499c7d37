"""Tokenize, classify and decode (DESIGN §1 steps 1, 2, 5; spec §1.1, §1.4).

Hugging Face tokenizers run through their fast backend with ``encode_special_tokens=True`` (text
that spells ``[CLS]`` is text), the template's special tokens added, and no truncation or padding
(a 5,000-token text is privatized whole, with no length warning). Static word vectors split text
into maximal runs of non-whitespace (``str.split()`` semantics) and keep the separators verbatim.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import TokenizerNotSupportedError


__all__ = ["TokenizedRow", "HFTokens", "WordTokens", "make_tokens"]

_WS_SPLIT = re.compile(r"(\s+)")


@dataclass
class TokenizedRow:
    ids: np.ndarray  # int64 token ids (static: vocabulary row, -1 for an unknown word)
    pieces: list[str] | None = None  # static vectors: the words
    seps: list[str] | None = None  # static vectors: separators, len(pieces) + 1


class HFTokens:
    """Tokenization and decoding with a Hugging Face tokenizer's fast backend."""

    def __init__(self, tokenizer: Any) -> None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise TokenizerNotSupportedError(
                f"model: the tokenizer {type(tokenizer).__name__} has no fast (Rust) backend; hf-textdp needs a fast "
                "tokenizer (PreTrainedTokenizerFast)."
            )
        from tokenizers import Tokenizer

        tok = Tokenizer.from_str(backend.to_str())
        tok.no_truncation()
        tok.no_padding()
        tok.encode_special_tokens = True
        self._tok = tok
        self._decoder = tokenizer.backend_tokenizer

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
        """All rows' ids concatenated (int64), each row's length, and no per-row records (not needed)."""
        per_row = self._encode_ids(texts)
        lengths = np.fromiter(map(len, per_row), dtype=np.int64, count=len(per_row))
        flat = np.fromiter(itertools.chain.from_iterable(per_row), dtype=np.int64, count=int(lengths.sum()))
        return flat, lengths, None

    def decode(self, rows: Sequence[np.ndarray]) -> list[str]:
        """Decode kept ids (structural positions already removed), no clean-up of spaces."""
        return self.decode_lists([r.tolist() for r in rows])

    def decode_lists(self, rows: Sequence[list[int]]) -> list[str]:
        """:meth:`decode` for rows given as lists of ints."""
        out: list[str] = self._decoder.decode_batch(rows, skip_special_tokens=False)
        return out


class WordTokens:
    """Exact whitespace words looked up in a static vector file's vocabulary (spec §1.3)."""

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
