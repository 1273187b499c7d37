"""The bench's text: SentEval MR beside the checkout, a file given (``--text``, or the ``bench_text`` setting),
or the packaged 30-row sample when asked for by name."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ... import settings
from ...errors import InvalidParameterError


__all__ = ["SAMPLE_TEXT", "load_texts"]


#: ``text=`` value that asks for the packaged 30-row sample (a path to a file named so reads ``./sample``)
SAMPLE_TEXT = "sample"

_MR_RELATIVE = Path("shared") / "data" / "senteval" / "mr.jsonl"

_PACKAGE = Path(__file__).resolve().parents[2]  # hf_textdp/

_SAMPLE = _PACKAGE / "data" / "sample.jsonl"


def _default_text() -> Path:
    """:func:`hf_textdp.settings.bench_text`, else SentEval MR under the current directory or beside the checkout."""
    env = settings.bench_text()
    if env:
        return Path(env)
    for root in (Path.cwd(), _PACKAGE, *_PACKAGE.parents):
        for cand in (root / _MR_RELATIVE, root.parent / _MR_RELATIVE):
            if cand.is_file():
                return cand
    checkout = _PACKAGE.parent
    raise InvalidParameterError(
        f"text: SentEval MR not found at {checkout.parent / _MR_RELATIVE} (nor under the current directory); "
        "give a text file with --text FILE (text= in Python; a .jsonl with a field 'text' or one row per line), "
        f"or --text {SAMPLE_TEXT} for the packaged 30-row sample, which is not representative."
    )


def _resolve_text(text: str | os.PathLike[str] | None) -> Path:
    if isinstance(text, str) and text == SAMPLE_TEXT:
        return _SAMPLE
    path = Path(text) if text is not None else _default_text()
    if not path.is_file():
        where = "" if text is not None else f" (${settings.BENCH_TEXT})"
        raise InvalidParameterError(
            f"text: {str(path)!r}{where} is not an existing file (a .jsonl with a field 'text', or one row per "
            f"line); give another with --text FILE, or --text {SAMPLE_TEXT} for the packaged 30-row sample."
        )
    return path


def _read_rows(path: Path, *, one_word: bool) -> list[str]:
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        out = []
        for no, line in enumerate(lines, 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            value = obj.get("text") if isinstance(obj, dict) else obj
            if not isinstance(value, str):
                raise InvalidParameterError(f"text: {path.name} line {no} has no string field 'text'.")
            out.append(value)
    else:
        out = [line for line in lines if line.strip()]
    if one_word:
        out = [w for t in out for w in t.split()]
    if not out:
        raise InvalidParameterError(f"text: {path.name} holds no rows.")
    return out


def _is_sample(path: Path) -> bool:
    return path.resolve() == _SAMPLE


def _text_detail(file_rows: int, used: int, *, one_word: bool, sample: bool) -> str:
    unit = "words (one per row)" if one_word else "rows"
    use = f"first {used:,}" if used <= file_rows else f"cycled {used / file_rows:.1f} times to {used:,} rows"
    return f"{file_rows:,} {unit}, {use}" + ("; THE PACKAGED 30-ROW SAMPLE, not representative" if sample else "")


def _load(text: str | os.PathLike[str] | None, rows: int | None, one_word: bool) -> tuple[Path, int, list[str], str]:
    """(the file, its rows, ``rows`` of them cycling through the file, their description)."""
    path = _resolve_text(text)
    out = _read_rows(path, one_word=one_word)
    file_rows = len(out)
    if rows is not None:
        out = [out[i % file_rows] for i in range(rows)]
    detail = _text_detail(file_rows, len(out), one_word=one_word, sample=_is_sample(path))
    return path, file_rows, out, f"{path.name} ({detail})"


def load_texts(
    text: str | os.PathLike[str] | None = None, rows: int | None = 4000, *, one_word: bool = False
) -> tuple[list[str], str]:
    """Rows of text for the bench and a description of where they came from.

    Args:
        text (`str`, *optional*): a .jsonl file (field ``text``) or a plain text file (one row per
            line), or ``"sample"`` (:data:`SAMPLE_TEXT`) for the packaged 30-row sample. Default:
            :data:`hf_textdp.settings.BENCH_TEXT`, else SentEval MR (``shared/data/senteval/mr.jsonl`` under the
            current directory or beside the checkout).
        rows (`int`, *optional*, defaults to 4000): rows to use (cycling through the file when it is
            shorter; the description says so); ``None`` for the whole file.
        one_word (`bool`, defaults to `False`): make every row a single whitespace word of the text.

    Raises:
        InvalidParameterError: the file is missing or holds no rows, or no ``text`` was given and
            SentEval MR is not found (the bench never falls back to the sample on its own).
    """
    if rows is not None and rows < 1:
        raise InvalidParameterError(f"rows must be an int >= 1, got {rows}.")
    _, _, out, source = _load(text, rows, one_word)
    return out, source
