"""Where a saved output's report, work folder and manifest live (names only: no file is touched)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InvalidParameterError


FILE_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
REPORT_NAME = "privacy_report.json"
MANIFEST_NAME = "manifest.json"
LOCK_NAME = "lock"


def report_path_for(output: str | os.PathLike[str]) -> Path:
    """Where the report of a saved output lives."""
    output = Path(output)
    if output.suffix.lower() in FILE_FORMATS:
        return output.with_name(output.name + ".privacy_report.json")
    return output / REPORT_NAME


def work_dir_for(output: str | os.PathLike[str]) -> Path:
    """The hidden work folder of a sharded run writing ``output``: ``.OUTPUT.partial`` beside it."""
    output = Path(output)
    return output.with_name(f".{output.name}.partial")


def output_path(output: str | os.PathLike[str], param: str = "output_dir") -> Path:
    """``output`` as a path (``~`` expanded); one that names no file or folder (``.``, ``..``, ``/``) is refused."""
    path = Path(output).expanduser()
    if path.name in ("", ".", ".."):
        raise InvalidParameterError(
            f"{param} must name the file or folder to write (e.g. 'private.jsonl'), got {str(output)!r}."
        )
    return path


def folder_inside(root: str | os.PathLike[str], name: str, param: str) -> Path:
    """``root/name``, refused unless it stays inside ``root`` once resolved: ``name`` (a recipe's ``name`` or
    ``results_folder``, named by ``param``) may not be empty, absolute, or climb out with ``..`` or a link."""
    base = Path(root).expanduser()
    folder = base / name
    escapes = Path(name).is_absolute() or ".." in Path(name).parts or base.resolve() not in folder.resolve().parents
    if not name.strip() or escapes:
        raise InvalidParameterError(
            f"recipe {param} {name!r} must name a folder inside --output {str(root)!r} (a relative path without "
            "'..'); results are written only there."
        )
    return folder
