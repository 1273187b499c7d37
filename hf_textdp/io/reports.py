"""Reading the privacy report of a saved output; :func:`privacy_report`, the public accessor."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import InvalidParameterError, ParameterTypeError
from .paths import FILE_FORMATS, report_path_for


__all__ = ["read_report", "privacy_report"]


def read_report(output: str | os.PathLike[str]) -> dict[str, Any]:
    """The report saved beside (file) or inside (folder) the output ``output``."""
    if Path(output).is_file() and Path(output).suffix.lower() not in FILE_FORMATS:
        raise InvalidParameterError(
            f"output {str(output)!r} is a file of no output format hf-textdp writes: give an output folder, or a "
            f"{'/'.join(FILE_FORMATS)} output file with its .privacy_report.json beside it."
        )
    path = report_path_for(Path(output))
    if not path.is_file():
        raise InvalidParameterError(f"no privacy report found for {str(output)!r} (looked for {path}).")
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def privacy_report(obj: Any) -> dict[str, Any]:
    """The privacy report of a :class:`~hf_textdp.Privatizer` (or anything with ``privacy_report()``).

    Also accepts the path of a saved output (file or folder) and reads the report beside it.
    """
    if hasattr(obj, "privacy_report"):
        result: dict[str, Any] = obj.privacy_report()
        return result
    if isinstance(obj, (str, Path)):
        return read_report(obj)
    raise ParameterTypeError(
        f"privacy_report() takes a Privatizer, a PrivateTokenizer, a collator or a saved output path, "
        f"got {type(obj).__name__}."
    )
