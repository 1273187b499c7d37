"""Candidate settings: which tokens may be emitted, and the rules that decide it (space.md §6).

A :class:`CandidateSpec` names a setting (``all``, ``no_reserved``, ``public_vocab``) and an optional
script filter; the I/O layer (``hf_textdp.io.models``) applies it to a tokenizer's vocabulary with the
rules below. Every rule reads public token strings (and, for ``public_vocab``, a public file), never
the text being privatized.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import regex

from .errors import InvalidParameterError, ParameterTypeError


__all__ = [
    "CANDIDATE_SETS",
    "CLASS_MODES",
    "CLASS_NAMES",
    "SCRIPTS",
    "DEFAULT_CANDIDATES",
    "CandidateSpec",
    "parse_candidates",
    "is_reserved",
    "piece_scheme",
    "piece_scheme_of",
    "piece_text",
    "piece_classes",
    "script_ok",
    "ALL_SCRIPTS",
    "LANGUAGE_SCRIPTS",
    "language_scripts",
]

CandidateSet = Literal["all", "no_reserved", "public_vocab"]
CANDIDATE_SETS: tuple[str, ...] = ("all", "no_reserved", "public_vocab")
DEFAULT_CANDIDATES = "no_reserved"
# class-preserving replacement (space.md §7): "preserve" (default) or "mix" (one space over all of C)
CLASS_MODES: tuple[str, ...] = ("preserve", "mix")
# the two piece classes, by index: 0 starts a word (or carries no marker), 1 continues one
CLASS_NAMES: tuple[str, str] = ("word_initial", "continuation")
SCRIPTS: tuple[str, ...] = (
    "latin",
    "greek",
    "cyrillic",
    "arabic",
    "hebrew",
    "devanagari",
    "han",
    "hiragana",
    "katakana",
    "hangul",
    "thai",
)
# ``scripts=["all"]``: every script, stated (``None`` means: the scripts of the model's language, space.md §6.3)
ALL_SCRIPTS = "all"
# The scripts each language is written in, by the ISO 639-1 code a model card's ``language:`` gives (space.md §6.3).
_LATIN = (
    "af ca cs cy da de en es et eu fi fr ga gl hr hu id is it lt lv ms mt nl no nb nn pl pt ro sk sl sq sv sw tl tr vi"
)
LANGUAGE_SCRIPTS: dict[str, tuple[str, ...]] = {
    **{code: ("latin",) for code in _LATIN.split()},
    **{code: ("cyrillic",) for code in "be bg kk mk mn ru uk".split()},
    "sr": ("cyrillic", "latin"),
    "el": ("greek",),
    **{code: ("arabic",) for code in "ar fa ps ur".split()},
    "he": ("hebrew",),
    **{code: ("devanagari",) for code in "hi mr ne sa".split()},
    "zh": ("han",),
    "ja": ("han", "hiragana", "katakana"),
    "ko": ("hangul", "han"),
    "th": ("thai",),
}

# Placeholder rows that tokenizers reserve and pre-training never (or hardly) saw (space.md §6.2):
# BERT/WordPiece [unusedN], Gemma <unusedN>, T5/SentencePiece <extra_id_N>, Llama-3
# <|reserved_special_token_N|>, fairseq/XLM-R madewordN fillers.
_RESERVED = re.compile(
    r"\[unused\d+\]|<unused\d+>|<extra_id_\d+>|<\|reserved_special_token_\d+\|>|madeupword\d+",
)
# Characters every script filter keeps: whitespace and the Common-script characters (digits, punctuation,
# symbols) of Basic Latin, Latin-1 Supplement and General Punctuation (space.md §6.3).
_NEUTRAL = r"[\p{Script=Common}&&[\t\n\r\x20-\x7e\xa0-\xbf\xd7\xf7\u2010-\u205e]]"
# Phonetic notation, not running text: IPA, the phonetic extensions, spacing modifier letters (space.md §6.3).
_PHONETIC = (
    r"[\p{Block=IPA_Extensions}\p{Block=Phonetic_Extensions}\p{Block=Phonetic_Extensions_Supplement}"
    r"\p{Block=Spacing_Modifier_Letters}]"
)


@dataclass(frozen=True, kw_only=True)
class CandidateSpec:
    """A candidate setting (space.md §6).

    Args:
        set (`str`, defaults to `"no_reserved"`): ``"all"`` (every non-special row), ``"no_reserved"``
            (without placeholder rows such as ``[unusedN]``) or ``"public_vocab"`` (the no_reserved tokens
            that occur in ``vocab``).
        scripts (`tuple[str, ...]`, *optional*): keep only tokens whose characters are letters of these
            scripts, combining marks, or ASCII/Latin-1/General Punctuation digits, punctuation and symbols;
            ``("all",)`` keeps every script. Unset, the loader uses the scripts of the model's declared
            language (:func:`language_scripts`), or every script when it declares none.
        vocab (`str`, *optional*): ``public_vocab`` only: a public text file (one text or word per line) or
            JSON lines file (field ``text``). Never the data being privatized.
        classes (`str`, defaults to `"preserve"`): ``"preserve"`` replaces a word-initial token only by
            word-initial tokens and a continuation piece only by continuation pieces, each class its own
            metric space (space.md §7); ``"mix"`` uses one space over all of C. Static vectors have one class.

    Example:

    >>> parse_candidates("no_reserved").to_value()
    'no_reserved'
    >>> parse_candidates({"set": "all", "scripts": ["latin"]}).to_value()
    {'scripts': ['latin'], 'set': 'all'}
    >>> parse_candidates({"set": "all", "classes": "mix"}).to_value()
    {'classes': 'mix', 'set': 'all'}
    """

    set: str = DEFAULT_CANDIDATES
    scripts: tuple[str, ...] | None = None
    vocab: str | None = None
    classes: str = "preserve"

    def __post_init__(self) -> None:
        if self.set not in CANDIDATE_SETS:
            raise InvalidParameterError(f"candidates: unknown set {self.set!r}. Allowed: {list(CANDIDATE_SETS)}.")
        if self.scripts is not None:
            if isinstance(self.scripts, str) or not isinstance(self.scripts, Sequence) or not self.scripts:
                raise InvalidParameterError(
                    f"candidates: scripts must be a non-empty list of script names from {list(SCRIPTS)}, "
                    f"got {self.scripts!r}."
                )
            bad = [s for s in self.scripts if s not in SCRIPTS and s != ALL_SCRIPTS]
            if bad or (ALL_SCRIPTS in self.scripts and len(set(self.scripts)) > 1):
                raise InvalidParameterError(
                    f"candidates: unknown scripts {bad or list(self.scripts)}. Allowed: script names from "
                    f"{list(SCRIPTS)}, or ['all'] alone for every script."
                )
            object.__setattr__(self, "scripts", tuple(sorted(set(self.scripts))))
        if (self.set == "public_vocab") != (self.vocab is not None):
            raise InvalidParameterError(
                "candidates: set='public_vocab' needs vocab=<path of a public text or word file>, and vocab is "
                f"allowed only with it; got set={self.set!r}, vocab={self.vocab!r}."
            )
        if self.vocab is not None and (not isinstance(self.vocab, str) or not self.vocab):
            raise InvalidParameterError(f"candidates: vocab must be a non-empty path str, got {self.vocab!r}.")
        if self.classes not in CLASS_MODES:
            raise InvalidParameterError(
                f"candidates: classes must be one of {list(CLASS_MODES)}, got {self.classes!r}."
            )

    @property
    def script_filter(self) -> tuple[str, ...] | None:
        """The scripts the filter keeps, or ``None`` when every script is kept."""
        return None if self.scripts in (None, (ALL_SCRIPTS,)) else self.scripts

    @property
    def preserve_classes(self) -> bool:
        """Whether replacement stays inside the input token's piece class (space.md §7)."""
        return self.classes == "preserve"

    def to_value(self) -> str | dict[str, Any]:
        """The canonical config value: the set name alone, or a dict with sorted keys when more is set."""
        if self.scripts is None and self.vocab is None and self.preserve_classes:
            return self.set
        out: dict[str, Any] = {"set": self.set}
        if not self.preserve_classes:
            out["classes"] = self.classes
        if self.scripts is not None:
            out["scripts"] = list(self.scripts)
        if self.vocab is not None:
            out["vocab"] = self.vocab
        return dict(sorted(out.items()))

    @property
    def key(self) -> str:
        """A stable string for cache keys (the vocab file's identity is added by the loader)."""
        return json.dumps(self.to_value(), sort_keys=True)


def parse_candidates(value: Any) -> CandidateSpec:
    """A :class:`CandidateSpec` from a set name, a mapping ``{"set", "scripts", "vocab"}`` or a spec.

    Raises:
        InvalidParameterError / ParameterTypeError: naming ``candidates`` and what is allowed.
    """
    if isinstance(value, CandidateSpec):
        return value
    if isinstance(value, str):
        return CandidateSpec(set=value)
    if isinstance(value, Mapping):
        extra = sorted(set(value) - {"set", "scripts", "vocab", "classes"})
        if extra:
            raise InvalidParameterError(
                f"candidates: unknown keys {extra}; allowed keys: ['classes', 'scripts', 'set', 'vocab']."
            )
        scripts = value.get("scripts")
        return CandidateSpec(
            set=value.get("set", DEFAULT_CANDIDATES),
            scripts=tuple(scripts) if isinstance(scripts, (list, tuple)) else scripts,
            vocab=value.get("vocab"),
            classes=value.get("classes", "preserve"),
        )
    raise ParameterTypeError(
        f"candidates must be a set name {list(CANDIDATE_SETS)} or a dict with keys set/scripts/vocab/classes, got "
        f"{type(value).__name__}."
    )


def is_reserved(token: str) -> bool:
    """Whether ``token`` is a placeholder row (space.md §6.2).

    >>> [is_reserved(t) for t in ("[unused12]", "<extra_id_0>", "unused", "##12")]
    [True, True, False, False]
    """
    return _RESERVED.fullmatch(token) is not None


PieceScheme = Literal["wordpiece", "bytelevel", "metaspace", "words"]


def piece_scheme(tokenizer: Any) -> tuple[str, str]:
    """(scheme, marker) of a fast tokenizer's subword pieces (space.md §6.4).

    ``wordpiece`` marks continuations with ``##`` (its decoder's prefix); ``bytelevel`` marks a leading
    space with ``Ġ``; ``metaspace`` (SentencePiece) marks it with ``▁``; anything else is ``words``
    (no marker: every token is word-initial).
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return "words", ""
    return piece_scheme_of(backend.to_str())


def piece_scheme_of(backend: str) -> tuple[str, str]:
    """:func:`piece_scheme` of a fast tokenizer's backend serialization (``backend_tokenizer.to_str()``)."""
    data = json.loads(backend)

    def types(node: Any) -> list[dict[str, Any]]:
        if not isinstance(node, dict):
            return []
        inner = node.get("decoders") or node.get("pretokenizers") or []
        return [node] + [t for sub in inner for t in types(sub)]

    parts = types(data.get("decoder")) + types(data.get("pre_tokenizer"))
    model = data.get("model") or {}
    for node in parts:
        if node.get("type") == "WordPiece":
            return "wordpiece", str(node.get("prefix") or model.get("continuing_subword_prefix") or "##")
    for node in parts:
        if node.get("type") == "ByteLevel":
            return "bytelevel", "\u0120"
        if node.get("type") == "Metaspace":
            return "metaspace", str(node.get("replacement") or "\u2581")
    if model.get("type") == "WordPiece":
        return "wordpiece", str(model.get("continuing_subword_prefix") or "##")
    return "words", ""


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte ↔ printable-unicode table, inverted."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


_BYTES = _byte_decoder()


def piece_text(token: str, scheme: str, marker: str) -> tuple[bool, str | None]:
    """(has the marker, the token's characters without it) for a token string (space.md §6.4).

    For ``bytelevel`` the characters are the UTF-8 decoding of its bytes, ``None`` when the bytes are
    not whole characters (a piece of a multi-byte character).

    >>> piece_text("##ing", "wordpiece", "##"), piece_text("\u2581the", "metaspace", "\u2581")
    ((True, 'ing'), (True, 'the'))
    """
    has = bool(marker) and token.startswith(marker)
    body = token[len(marker) :] if has else token
    if scheme == "bytelevel":
        try:
            return has, bytes(_BYTES[c] for c in body).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            return has, None
    if scheme == "metaspace":
        body = body.replace(marker, " ")
    return has, body


def piece_classes(strings: Sequence[str], scheme: str, marker: str) -> npt.NDArray[np.int8]:
    """The piece class of each token string, as an index into :data:`CLASS_NAMES` (space.md §7.1).

    WordPiece marks continuations (``##``); byte-level BPE (``Ġ``) and SentencePiece (``▁``) mark a
    word start, so there an unmarked piece continues a word (or is a text's first piece). ``words``
    (static vectors) has one class: every token is word-initial.

    >>> piece_classes(["the", "##ing", ","], "wordpiece", "##").tolist()
    [0, 1, 0]
    >>> piece_classes(["\u0120the", "ing"], "bytelevel", "\u0120").tolist()
    [0, 1]
    """
    has = np.fromiter((bool(marker) and t.startswith(marker) for t in strings), dtype=bool, count=len(strings))
    marks_continuation = scheme == "wordpiece"
    out: npt.NDArray[np.int8] = (has if marks_continuation else ~has).astype(np.int8)
    if scheme == "words":
        out[:] = 0
    return out


def _compat(char: str) -> bool:
    """A letter or digit that is a compatibility form of another (``ᵢ``, ``ₕ``, ``²``, ``ﬁ``, fullwidth ``Ａ``)."""
    return unicodedata.category(char)[0] in "LN" and unicodedata.normalize("NFKC", char) != char


def language_scripts(languages: Sequence[str]) -> tuple[str, ...] | None:
    """The scripts of ``languages`` (ISO 639-1 codes, ``en`` or ``en-US``), or ``None`` when none is given or one
    is not in :data:`LANGUAGE_SCRIPTS` (then no script may be left out; space.md §6.3).

    >>> language_scripts(["en"]), language_scripts(["en", "ru"]), language_scripts(["xx"]), language_scripts([])
    (('latin',), ('cyrillic', 'latin'), None, None)
    """
    found: set[str] = set()
    for lang in languages:
        scripts = LANGUAGE_SCRIPTS.get(str(lang).lower().replace("_", "-").split("-")[0])
        if scripts is None:
            return None
        found.update(scripts)
    return tuple(sorted(found)) or None


def script_ok(text: str | None, scripts: Sequence[str]) -> bool:
    """Whether every character of ``text`` is a letter of ``scripts``, a combining mark, or neutral (space.md §6.3).

    >>> script_ok("café", ["latin"]), script_ok("вода", ["latin"]), script_ok("₹", ["latin"]), script_ok("", ["latin"])
    (True, False, False, False)
    >>> script_ok("ɣ", ["latin"]), script_ok("ᵢ", ["latin"]), script_ok("naïve", ["latin"])
    (False, False, True)
    """
    if not text or any(_compat(c) for c in text):
        return False
    return _script_pattern(tuple(scripts)).fullmatch(text) is not None


@functools.lru_cache(maxsize=64)
def _script_pattern(scripts: tuple[str, ...]) -> regex.Pattern[str]:
    """:func:`script_ok`'s pattern for ``scripts``, compiled once (it runs on every token of a vocabulary)."""
    letters = "".join(rf"\p{{Script={s.capitalize()}}}" for s in scripts)
    return regex.compile(rf"(?V1)(?:[[{letters}\p{{Script=Inherited}}]--{_PHONETIC}]|{_NEUTRAL})+")
