"""Reading the privacy report of a saved output; :func:`privacy_report`, the public accessor."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ..errors import InvalidParameterError, OutputChangedError, ParameterTypeError
from .paths import FILE_FORMATS, REPORT_NAME, report_path_for
from .report_checks import check_report


__all__ = [
    "CONTENT_KEY",
    "bound_report",
    "content_hashes",
    "verify_output",
    "load_bound_report",
    "read_report",
    "privacy_report",
]

#: the report key binding it to its output: the file's SHA-256, or each file's (relative path: SHA-256) of a folder
CONTENT_KEY = "output_sha256"
#: the files of a folder output that say what its data is (an added one changes the dataset)
_DATA_NAMES = ("state.json", "dataset_info.json", "dataset_dict.json")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def content_hashes(output: str | os.PathLike[str]) -> str | dict[str, str]:
    """What binds a report to the output ``output``: a file's SHA-256, or for a folder the SHA-256 of each file
    in it (relative POSIX path: hash), its report and hidden files left out."""
    root = Path(output)
    if not root.is_dir():
        return _sha256_file(root)
    files = (p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    return {
        p.relative_to(root).as_posix(): _sha256_file(p)
        for p in sorted(files)
        if p.relative_to(root).as_posix() != REPORT_NAME
    }


def bound_report(report: dict[str, Any], output: str | os.PathLike[str]) -> dict[str, Any]:
    """``report`` with :data:`CONTENT_KEY` set to the content hashes of the written ``output`` (what every writer
    saves beside or inside its output, and :func:`verify_output` checks)."""
    return report | {CONTENT_KEY: content_hashes(output)}


def verify_output(output: str | os.PathLike[str], report: dict[str, Any]) -> None:
    """Refuse an output whose content is not what ``report`` was written for (:data:`CONTENT_KEY`): a changed or
    replaced file, or a folder with a changed, missing or added data file. Files a folder output never holds
    (``privatizer_config.json``, a card) may be added beside its data."""
    recorded = report.get(CONTENT_KEY)
    path = Path(output)
    what = "folder" if path.is_dir() else "file"
    if recorded is None:
        raise OutputChangedError(
            f"output {str(output)!r}: its privacy report records no content hash (an older hf-textdp wrote it), so "
            f"it cannot vouch for this {what}; privatize the input again to get a report bound to its output."
        )
    current = content_hashes(path)
    if isinstance(recorded, dict) and isinstance(current, dict):
        names = {k: k.rsplit("/", 1)[-1] for k in current if k not in recorded}
        data = [k for k, name in names.items() if name in _DATA_NAMES or name.startswith("data-")]
        same = all(current.get(k) == v for k, v in recorded.items()) and not data
    else:
        same = recorded == current
    if not same:
        raise OutputChangedError(
            f"output {str(output)!r}: this {what} changed after it was privatized (its content differs from the "
            "SHA-256 its privacy report records), so the report does not describe it."
        )


def load_bound_report(path: str | os.PathLike[str], report_path: str | os.PathLike[str]) -> dict[str, Any]:
    """The report at ``report_path`` of the output ``path`` (or of the output beside it, when ``path`` is the report
    file itself), verified to describe that output (:func:`verify_output`)."""
    report: dict[str, Any] = json.loads(Path(report_path).read_text(encoding="utf-8"))
    output = Path(path)
    if output == Path(report_path) and output.name.endswith(".privacy_report.json"):
        output = output.with_name(output.name.removesuffix(".privacy_report.json"))
    verify_output(output, report)
    check_report(report, output)
    return report


def read_report(output: str | os.PathLike[str], *, verify: bool = True) -> dict[str, Any]:
    """The report saved beside (file) or inside (folder) the output ``output``; with ``verify`` (the default),
    only when the output is still what the report was written for (:func:`verify_output`) and the report agrees
    with itself and the output's rows (:func:`~hf_textdp.io.report_checks.check_report`)."""
    if Path(output).is_file() and Path(output).suffix.lower() not in FILE_FORMATS:
        raise InvalidParameterError(
            f"output {str(output)!r} is a file of no output format hf-textdp writes: give an output folder, or a "
            f"{'/'.join(FILE_FORMATS)} output file with its .privacy_report.json beside it."
        )
    path = report_path_for(Path(output))
    if not path.is_file():
        raise InvalidParameterError(f"no privacy report found for {str(output)!r} (looked for {path}).")
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if verify:
        verify_output(output, loaded)
        check_report(loaded, output)
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
