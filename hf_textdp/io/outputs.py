"""Saving an output with its report atomically, and refusing outputs that exist or hold the input."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import datasets

from ..errors import HfTextDPError, InvalidParameterError, OutputExistsError, OutputNotWritableError
from ..utils.logging import get_logger
from .files import atomic_path, dumps_json, fsync_tree
from .paths import FILE_FORMATS, REPORT_NAME, report_path_for, work_dir_for
from .reports import bound_report


logger = get_logger("hf_textdp.outputs")


__all__ = [
    "check_not_input",
    "input_paths",
    "foreign_entries",
    "refuse_existing_output",
    "save_output",
    "output_errors",
]

#: the files ``save_to_disk`` and the report put in an output folder (and in each split's folder)
_OWN_OUTPUT_FILE = re.compile(
    rf"({re.escape(REPORT_NAME)}|dataset_info\.json|state\.json|dataset_dict\.json|data-\d{{5}}-of-\d{{5}}\.arrow)"
)


def foreign_entries(folder: Path) -> list[str]:
    """What the output folder ``folder`` holds that an hf-textdp output does not (links included): replacing the
    folder would delete these. Split folders are those its ``dataset_dict.json`` names."""
    try:
        splits = json.loads((folder / "dataset_dict.json").read_text(encoding="utf-8")).get("splits", [])
    except (OSError, ValueError, AttributeError):
        splits = []
    foreign: list[str] = []
    for child in sorted(folder.iterdir()):
        if child.is_symlink():
            foreign.append(child.name)
        elif child.is_dir() and child.name in splits:
            foreign += [
                f"{child.name}/{c.name}"
                for c in sorted(child.iterdir())
                if c.is_symlink() or not c.is_file() or not _OWN_OUTPUT_FILE.fullmatch(c.name)
            ]
        elif not (child.is_file() and _OWN_OUTPUT_FILE.fullmatch(child.name)):
            foreign.append(child.name)
    return foreign


#: the ``datasets`` features of list columns (``Sequence`` before datasets 4, ``List`` since)
_LIST_FEATURES = ("List", "LargeList", "Sequence")


def _write_csv(ds: datasets.Dataset, path: Path, batch_size: int = 10_000, *, shown_as: Path | None = None) -> None:
    """CSV with a header row, list cells as JSON arrays (``[101, 2023, 102]``, read back by ``json.loads``).

    ``Dataset.to_csv`` writes numpy's form of a list (``[ 101 2023  102]``), which no JSON or CSV reader parses.
    CSV has no lists, so ``load_dataset("csv")`` reads these cells as text, which ``Trainer``'s collators refuse:
    it warns, naming the reader's ``converters`` that give the lists back (``shown_as``: the output's name).
    """
    import pandas as pd

    lists = [n for n, f in ds.features.items() if isinstance(f, list) or type(f).__name__ in _LIST_FEATURES]
    if lists:
        converters = ", ".join(f'"{n}": json.loads' for n in lists)
        logger.warning(
            f"output {str(shown_as or path)!r}: CSV has no lists, so {', '.join(lists)} are written as JSON text "
            f'("[101, 2023, 102]"). To train on them, read them back with load_dataset("csv", data_files=..., '
            f"converters={{{converters}}}), or write .parquet or .jsonl, which keep the lists."
        )

    with open(path, "w", encoding="utf-8", newline="") as f:
        for i, batch in enumerate(ds.iter(batch_size=batch_size)):
            cells = {k: [json.dumps(v) if isinstance(v, list) else v for v in vals] for k, vals in batch.items()}
            pd.DataFrame(cells, columns=list(batch)).to_csv(f, header=i == 0, index=False)
        if ds.num_rows == 0:
            pd.DataFrame(columns=list(ds.column_names)).to_csv(f, index=False)


def check_not_input(output: Path, paths: Sequence[str | os.PathLike[str]]) -> None:
    """Refuse an output that is an input path, or a folder that holds one (replacing it would delete it)."""
    out = output.expanduser().resolve()
    for path in paths:
        p = Path(path).expanduser()
        if not p.exists():
            continue
        p = p.resolve()
        if p == out or out in p.parents:
            what = "is the input itself" if p == out else f"contains the input {str(p)!r}"
            raise OutputExistsError(f"output {str(output)!r} {what}; refusing to overwrite the input.")


def input_paths(source: Any, parts: dict[str, Any]) -> list[str]:
    """The paths a run reads: ``source`` when it is a path, and the splits' Arrow cache files."""
    paths: list[str] = [str(source)] if isinstance(source, (str, os.PathLike)) else []
    for part in parts.values():
        paths.extend(f["filename"] for f in getattr(part, "cache_files", None) or [])
    return paths


def refuse_existing_output(output: Path, *, resume: bool = False, overwrite: bool = False) -> None:
    """Raise :class:`OutputExistsError` when ``output`` exists, or, with ``overwrite``, when it exists and is not
    something an earlier run wrote.

    ``overwrite`` replaces a file output, an empty folder or an output folder (one that holds its
    ``privacy_report.json``); any other folder, or a file where a folder output goes, is refused: replacing it
    would delete files this package never wrote.
    """
    if not output.exists() and not output.is_symlink():
        return
    if not overwrite:
        raise OutputExistsError(
            f"output {str(output)!r} already exists"
            + (" (a finished run: there is nothing to resume)" if resume else "")
            + "; pass overwrite=True (--overwrite) to replace it."
        )
    folder_output = output.suffix.lower() not in FILE_FORMATS
    if output.is_dir() and not output.is_symlink():
        if not any(output.iterdir()):
            return
        foreign = foreign_entries(output)
        if (output / REPORT_NAME).is_file() and not foreign:
            return
        what = (
            f"a folder holding files no hf-textdp output holds ({', '.join(map(repr, foreign[:3]))}"
            + (", ..." if len(foreign) > 3 else "")
            + ")"
            if (output / REPORT_NAME).is_file()
            else "a folder that is not an hf-textdp output (it holds no privacy_report.json)"
        )
    elif not folder_output:
        return
    else:
        what = "a file, where a folder output (a path without a .jsonl/.json/.csv/.parquet extension) goes"
    raise OutputExistsError(
        f"output {str(output)!r} is {what}; overwrite=True (--overwrite) replaces only an earlier output or an "
        "empty folder. Choose another output path, or remove it yourself."
    )


def save_output(ds: Any, output: Path, report: dict[str, Any], *, tmp_root: Path | None = None) -> None:
    """Write ``ds`` and its report to ``output`` (format from the extension, else a ``save_to_disk`` folder).

    Both are written under ``tmp_root`` (default: beside ``output``) and renamed into place, the report
    first, so an output that exists is complete and has its report; the report records the output's content
    hashes (:func:`~hf_textdp.io.reports.content_hashes`), which ``report``, ``card`` and ``push`` verify.
    """
    output = Path(output)
    fmt = FILE_FORMATS.get(output.suffix.lower())
    if fmt is not None:
        if isinstance(ds, datasets.DatasetDict):
            raise InvalidParameterError(
                f"output {str(output)!r}: a DatasetDict with splits {sorted(ds)} needs a folder output (no extension) "
                "or split=."
            )
        with atomic_path(output, is_dir=False, tmp_root=tmp_root) as tmp:
            if fmt == "json":
                ds.to_json(str(tmp), lines=True, force_ascii=False)
            elif fmt == "csv":
                _write_csv(ds, tmp, shown_as=output)
            else:
                ds.to_parquet(str(tmp))
            report_tmp = tmp.with_name(report_path_for(output).name)
            report_tmp.write_text(dumps_json(bound_report(report, tmp)), encoding="utf-8")
            fsync_tree(report_tmp)
            os.replace(report_tmp, report_path_for(output))
        return
    # The in-process fingerprint is derived from the (secret) seed: publish a random one instead.
    if isinstance(ds, datasets.DatasetDict):
        ds = datasets.DatasetDict({k: _refingerprint(v) for k, v in ds.items()})
    else:
        ds = _refingerprint(ds)
    with atomic_path(output, is_dir=True, tmp_root=tmp_root) as tmp:
        ds.save_to_disk(str(tmp))
        (tmp / REPORT_NAME).write_text(dumps_json(bound_report(report, tmp)), encoding="utf-8")


def _refingerprint(ds: Any) -> Any:
    ds = ds.flatten_indices() if getattr(ds, "_indices", None) is not None else ds
    ds._fingerprint = secrets.token_hex(16)
    return ds


@contextlib.contextmanager
def output_errors(output: Path) -> Iterator[None]:
    """Turn an ``OSError`` met while writing ``output`` into one line that names the output.

    The hidden work folder (``.OUTPUT.partial``) is an implementation detail: the message names the
    output the user asked for, and an ancestor that is in the way (a file where a folder should be).
    """
    try:
        yield
    except HfTextDPError:
        raise
    except OSError as err:
        work = work_dir_for(output)
        where = ""
        if err.filename is not None:
            culprit = Path(os.fsdecode(err.filename))
            if culprit != output and culprit != work and work not in culprit.parents and output not in culprit.parents:
                where = f" at {str(culprit)!r}"
        reason = err.strerror or type(err).__name__
        blocker = next((a for a in output.parents if a.exists()), None)
        if blocker is not None and not blocker.is_dir():
            reason, where = f"{str(blocker)!r} is a file, not a folder", ""
        raise OutputNotWritableError(
            f"output {str(output)!r} cannot be written ({reason}{where}); choose an output path in an existing, "
            "writable folder with free space."
        ) from err
