"""Public token counts for santext_plus (santext.md §2), read from files by the I/O layer.

``frequencies=<path>`` (a JSON object or a two-column TSV) and ``frequency_corpus=<path>`` (public text,
tokenized as privatization tokenizes) become count sources (:class:`FileCounts`, :class:`CorpusCounts`)
before the mechanism is built (:func:`resolve_count_options`); the mechanism only sees counts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..errors import InvalidParameterError
from ..mechanisms.santext import candidate_tokens, check_counts, mapping_counts, parse_count
from ..space import CANDIDATE
from ..tokens import make_tokens


if TYPE_CHECKING:
    from ..space import EmbeddingSpace


__all__ = [
    "load_frequencies",
    "corpus_texts",
    "check_not_input",
    "FileCounts",
    "CorpusCounts",
    "resolve_count_options",
]


def load_frequencies(path: str | os.PathLike[str]) -> dict[str, int | float]:
    """Read public token counts from a JSON object ``{"token": count}`` or a two-column TSV file.

    The format is decided by content: a file whose first non-blank character is ``{`` is JSON; any
    other file is TSV, one ``token<TAB>count`` per line (split at the last tab, blank lines skipped).

    Raises:
        InvalidParameterError: the file is missing or malformed (the message names the line).
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise InvalidParameterError(
            f"frequencies: {str(path)!r} is not an existing file; allowed: a mapping token -> count, or the path "
            "of a JSON object or a two-column TSV file."
        )
    text = p.read_text(encoding="utf-8-sig")
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise InvalidParameterError(
                f"frequencies: {p.name} is not valid JSON ({err.msg} at line {err.lineno})."
            ) from err
        if not isinstance(data, dict):
            raise InvalidParameterError(f"frequencies: {p.name} must hold a JSON object token -> count.")
        return check_counts(data)
    out: dict[str, int | float] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if "\t" not in line:
            raise InvalidParameterError(
                f"frequencies: {p.name} line {lineno} is not 'token<TAB>count' (no tab found)."
            )
        token, raw = line.rsplit("\t", 1)
        try:
            value: int | float = int(raw.strip())
        except ValueError:
            try:
                value = float(raw.strip())
            except ValueError:
                raise InvalidParameterError(
                    f"frequencies: {p.name} line {lineno}: the count {raw.strip()!r} is not a number."
                ) from None
        out[token] = parse_count(value, f"{p.name} line {lineno}")
    return out


def corpus_texts(path: Path, block: int = 1024, *, param: str = "frequency_corpus") -> Iterator[list[str]]:
    """Yield lists of texts from a plain-text file (one text per line) or JSON lines (the ``text`` field).

    ``param`` names the option in error messages.
    """
    is_jsonl = path.suffix.lower() in (".jsonl", ".ndjson")
    buf: list[str] = []
    with path.open(encoding="utf-8-sig") as fh:
        for lineno, line in enumerate(fh, start=1):
            line = line.rstrip("\r\n")
            if is_jsonl:
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as err:
                    raise InvalidParameterError(
                        f"{param}: {path.name} line {lineno} is not valid JSON ({err.msg})."
                    ) from err
                text = obj.get("text") if isinstance(obj, dict) else obj
                if not isinstance(text, str):
                    raise InvalidParameterError(f"{param}: {path.name} line {lineno} has no string field 'text'.")
                buf.append(text)
            else:
                buf.append(line)
            if len(buf) >= block:
                yield buf
                buf = []
    if buf:
        yield buf


def check_not_input(frequency_corpus: Any, input_source: Any, *, param: str = "frequency_corpus") -> None:
    """Raise if ``frequency_corpus`` is the dataset being privatized (santext.md §2, space.md §6.1).

    The mechanism never sees the input dataset, so the pipeline calls this with its own source: two
    paths are the same file or folder, two strings (hub ids) are equal, or two ``datasets`` objects
    have the same fingerprint.

    Raises:
        InvalidParameterError: naming ``param`` (``frequency_corpus``, or ``candidates vocab`` for space.md §6.1).

    Example:

    >>> check_not_input("public_corpus.txt", "reviews.jsonl")
    >>> check_not_input("reviews.jsonl", "./reviews.jsonl")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    hf_textdp.errors.InvalidParameterError: frequency_corpus must be public text, not the dataset being ...
    """
    if frequency_corpus is None or input_source is None:
        return
    same = False
    fa, fb = getattr(frequency_corpus, "_fingerprint", None), getattr(input_source, "_fingerprint", None)
    if fa is not None and fb is not None:
        same = fa == fb
    elif isinstance(frequency_corpus, (str, os.PathLike)) and isinstance(input_source, (str, os.PathLike)):
        a, b = Path(frequency_corpus).expanduser(), Path(input_source).expanduser()
        if os.fspath(frequency_corpus) == os.fspath(input_source):
            same = True
        elif a.exists() and b.exists():
            same = os.path.samefile(a, b)
        else:
            same = a.resolve() == b.resolve()
    if same:
        shown = os.fspath(frequency_corpus) if isinstance(frequency_corpus, (str, os.PathLike)) else "<dataset>"
        raise InvalidParameterError(
            f"{param} must be public text, not the dataset being privatized (got the input itself, {str(shown)!r})."
        )


class FileCounts:
    """``frequencies=<path>``: the counts of a JSON or TSV file, read once (errors as :func:`load_frequencies`)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.counts = load_frequencies(path)
        self.option = os.fspath(path)
        self.description = f"file {Path(path).name}"

    def candidate_counts(self, space: EmbeddingSpace) -> npt.NDArray[Any]:
        return mapping_counts(self.counts, candidate_tokens(space))


class CorpusCounts:
    """``frequency_corpus=<path>``: candidate counts of a public text or JSON lines file, tokenized as privatized."""

    def __init__(self, corpus: str | os.PathLike[str]) -> None:
        path = Path(corpus).expanduser()
        if not path.is_file():
            raise InvalidParameterError(
                f"frequency_corpus: {os.fspath(corpus)!r} is not an existing file; allowed: the path of a public "
                "text file (one text per line) or a JSON lines file with a 'text' field."
            )
        self.path = path
        self.option = os.fspath(corpus)
        self.description = f"corpus {path.name}"

    def candidate_counts(self, space: EmbeddingSpace) -> npt.NDArray[Any]:
        tokens = make_tokens(space)
        counts = np.zeros(space.V, dtype=np.int64)
        for texts in corpus_texts(self.path):
            for row in tokens.encode(texts):
                cls, pos = space.classify(row.ids)
                own = (cls == CANDIDATE) & space.is_member(row.ids)  # not inputs mapped to a candidate
                counts += np.bincount(pos[own], minlength=space.V)
        return counts


def resolve_count_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with a ``frequencies`` or ``frequency_corpus`` path replaced by its count source.

    Only when exactly one of them is given: the mechanism reports the other cases.
    """
    out = dict(options)
    freq, corpus = out.get("frequencies"), out.get("frequency_corpus")
    if (freq is None) == (corpus is None):
        return out
    if isinstance(freq, (str, os.PathLike)):
        out["frequencies"] = FileCounts(freq)
    elif isinstance(corpus, (str, os.PathLike)):
        out["frequency_corpus"] = CorpusCounts(corpus)
    return out
