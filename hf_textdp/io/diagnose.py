"""What is wrong with an input file, in words that name a line, a column and a type but never quote a value.

A reader's own message (pyarrow's ``Could not convert 'the row's text' ...``, pandas' tokenizer errors) may
carry the text being privatized, so it never reaches an error: these checks find the line and say what is
wrong instead. They read the file once, a line at a time.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


__all__ = ["json_kind", "rows_problem", "json_lines_problem", "json_array_problem", "csv_problem", "longest_line"]

_LINE_BLOCK = 1 << 20


def json_kind(value: Any) -> str:
    """The JSON name of ``value``'s type (``number`` for int and float, which one column may mix)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def rows_problem(rows: Iterable[tuple[int, Any]], where: str) -> str | None:
    """The first row of ``rows`` ((number, parsed value) pairs) that is not an object, or whose column holds
    another JSON type than the column's first non-null value (what Arrow cannot put in one column); ``where``
    names the number (``line``, ``row``)."""
    first: dict[str, tuple[str, int]] = {}
    for n, row in rows:
        if not isinstance(row, dict):
            return f"{where} {n} is a JSON {json_kind(row)}, not an object (one object per {where} is needed)"
        for column, value in row.items():
            kind = json_kind(value)
            if kind == "null":
                continue
            seen = first.setdefault(str(column), (kind, n))
            if seen[0] != kind:
                return f"column {str(column)!r} holds a {kind} at {where} {n} and a {seen[0]} at {where} {seen[1]}"
    return None


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with path.open("rb") as f:
        yield from enumerate(f, 1)


def json_lines_problem(path: Path) -> str | None:
    """What makes the JSON Lines file ``path`` unreadable: a line that is not JSON (with json's reason and the
    column, never the text), not an object, or a column of mixed types; ``None`` when nothing is found."""

    def parsed() -> Iterator[tuple[int, Any]]:
        for n, line in _lines(path):
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as err:  # err.msg is json's reason alone ("Expecting ',' delimiter")
                raise _Found(f"line {n}, column {err.colno}: not valid JSON ({err.msg})") from None
            except UnicodeDecodeError:
                raise _Found(f"line {n}: not valid UTF-8") from None

    try:
        return rows_problem(parsed(), "line")
    except _Found as found:
        return str(found)


def json_array_problem(rows: Any) -> str | None:
    """What makes a JSON array ``rows`` (parsed) unreadable as a table: not an array, a row that is not an
    object, or a column of mixed types (rows numbered from 0)."""
    if not isinstance(rows, list):
        return f"the file holds a JSON {json_kind(rows)}, not an array of objects"
    return rows_problem(enumerate(rows), "row")


def csv_problem(path: Path) -> str | None:
    """The first record of the CSV file ``path`` with another number of fields than its header (pandas would
    shift such a row's values into the wrong columns, or stop with a message quoting nothing useful)."""
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            return None
        for record in reader:
            if record and len(record) != len(header):
                return f"line {reader.line_num} has {len(record)} field(s) and the header line {len(header)}"
    return None


def longest_line(path: Path) -> int:
    """The length in bytes of the longest line of ``path``, read in 1 MiB blocks."""
    longest = run = 0
    with path.open("rb") as f:
        while block := f.read(_LINE_BLOCK):
            start = 0
            while (end := block.find(b"\n", start)) != -1:
                longest = max(longest, run + end - start)
                run, start = 0, end + 1
            run += len(block) - start
    return max(longest, run)


class _Found(Exception):
    """Carries a problem found while parsing, out of the generator :func:`rows_problem` reads."""
