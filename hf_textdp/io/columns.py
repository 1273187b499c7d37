"""Which columns a saved output holds, from its names alone (no row is read): the ``*_original`` columns that
``keep_original=True`` adds, which ``report``, ``card`` and ``push`` must name as not private."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


__all__ = ["ORIGINAL_SUFFIX", "original_columns"]

ORIGINAL_SUFFIX = "_original"  # keep_original=True stores the input text in {text_column}_original
_FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


def original_columns(path: str | os.PathLike[str]) -> list[str]:
    """The ``*_original`` columns (the input text kept by ``keep_original=True``) of a saved output.

    Reads only column names: a .jsonl/.json file's keys (every line), a .csv header, a .parquet schema,
    or a ``save_to_disk`` folder's ``dataset_info.json`` features (each split's, for a ``DatasetDict``),
    falling back to the schema of its Arrow files.
    """
    return sorted(c for c in _column_names(Path(path)) if c.endswith(ORIGINAL_SUFFIX))


def _column_names(p: Path) -> set[str]:
    names: set[str] = set()
    if p.is_dir():
        infos = sorted(p.rglob("dataset_info.json"))
        for info in infos:
            try:
                features = json.loads(info.read_text(encoding="utf-8")).get("features") or {}
            except (OSError, ValueError):
                features = {}
            names.update(features)
        if not infos:
            for f in sorted(p.rglob("*")):
                if f.is_file() and f.suffix in (".arrow", *_FILE_SUFFIXES) and not f.name.startswith("."):
                    names |= _column_names(f)
        return names
    suffix = p.suffix.lower()
    if suffix == ".json":
        try:
            whole = json.loads(p.read_text(encoding="utf-8", errors="replace"))
        except ValueError:
            whole = None  # JSON Lines under a .json name: read line by line below
        if isinstance(whole, dict):
            return set(whole)  # a dict of columns
        if isinstance(whole, list):
            return {k for r in whole if isinstance(r, dict) for k in r}
    if suffix in (".jsonl", ".json"):
        with p.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict):
                    names.update(row)
    elif suffix == ".csv":
        with p.open(encoding="utf-8", errors="replace", newline="") as fh:
            names.update(next(csv.reader(fh), []))
    elif suffix in (".parquet", ".arrow"):
        try:
            if suffix == ".parquet":
                names.update(pq.read_schema(p).names)
            else:
                with pa.memory_map(str(p)) as src:
                    names.update(pa.ipc.open_stream(src).schema.names)
        except Exception:  # noqa: BLE001 - not a readable table: no column names to check
            pass
    return names
