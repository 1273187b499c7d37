"""``privatize_dataset``: load, map with a :class:`Privatizer`, save atomically with the report, resume.

A saved output is the data (a .jsonl/.csv/.parquet file or a ``save_to_disk`` folder) plus its privacy
report (``OUTPUT.privacy_report.json`` beside a file, ``privacy_report.json`` inside a folder).

**Shards.** With an output, each split is privatized in shards of ``shard_size`` rows (row ids stay the
rows' indices in their split, so a seeded output does not depend on the shard size). Every shard is
written atomically (temporary sibling, ``fsync``, rename) into a hidden work folder beside the output::

    .OUTPUT.partial/
        manifest.json             what the job is: hashes of the config and of the input, sizes
        lock                      held by the running process; the kernel drops it when the process dies
        split-000/shard-00000.arrow, shard-00001.arrow, ...

When every shard is there, the data and the report are written inside the work folder and renamed into
place, then the work folder is removed. A run killed at any point (SIGKILL included) leaves either no
output, only the work folder, or the complete output. ``resume=True`` reuses the finished shards when the
manifest matches this run and computes only the missing ones; ``overwrite=True`` discards them.

**Nothing secret in the work folder or the output** (spec §10.5). The manifest holds no text and nothing
derived from the seed: not the seed, and not a hash of it, salted or not (a hash of a small seed is
inverted by trying seeds). It records only *whether* a seed was used. ``resume`` therefore cannot check
that the seed is the same one: resuming a seeded run with another seed still privatizes every row exactly
once, but the output is then neither run's reproducible output. A saved dataset gets a fresh random
fingerprint, because the in-process fingerprint is a hash of the seeded :class:`Privatizer`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .accounting import Totals
from .config import PrivatizerConfig
from .errors import (
    ColumnNotFoundError,
    HfTextDPError,
    InputFileError,
    InvalidParameterError,
    OutputExistsError,
    OutputNotWritableError,
    ParameterTypeError,
    ResumeError,
)
from .io.files import (
    atomic_path,
    atomic_write_arrow,
    atomic_write_text,
    dumps_json,
    fsync_tree,
    release_lock,
    try_lock,
)
from .io.paths import FILE_FORMATS, LOCK_NAME, MANIFEST_NAME, REPORT_NAME, report_path_for, work_dir_for
from .privatizer import Privatizer
from .rng import validate_secret_seed
from .space import CANDIDATE, STRUCTURAL, EmbeddingSpace
from .tokens import make_tokens
from .utils.logging import get_logger
from .validation import check_bool


__all__ = [
    "privatize_dataset",
    "report_path_for",
    "work_dir_for",
    "load_source",
    "save_output",
    "dataset_report",
    "FILE_FORMATS",
    "DEFAULT_SHARD_SIZE",
    "ROW_EPSILON_OUTLIER_MULTIPLE",
]

logger = get_logger(__name__)

DEFAULT_SHARD_SIZE = 10_000
MANIFEST_FORMAT = "hf_textdp/shards/v1"
_CARD_FIELDS = ("description", "citation", "homepage", "license")


# --------------------------------------------------------------------------- loading
def load_source(source: Any, *, split: str | None = None, streaming: bool = False) -> Any:
    """Load ``source`` (Dataset, DatasetDict, IterableDataset, file, folder or hub id)."""
    import datasets

    if isinstance(
        source, (datasets.Dataset, datasets.DatasetDict, datasets.IterableDataset, datasets.IterableDatasetDict)
    ):
        ds = source
    elif isinstance(source, (str, os.PathLike)):
        p = Path(source).expanduser()
        if p.is_file():
            fmt = FILE_FORMATS.get(p.suffix.lower())
            if fmt is None:
                raise InvalidParameterError(
                    f"source={str(source)!r}: unsupported file type {p.suffix!r}; allowed: {sorted(FILE_FORMATS)}."
                )
            if streaming:  # a stream reads the file as it goes and writes no Arrow copy
                _check_text_file(p)
                ds = datasets.load_dataset(fmt, data_files=str(p), split="train", streaming=True)
            else:
                ds = read_file_in_memory(p)
        elif p.is_dir():
            if (p / "dataset_dict.json").is_file() or (p / "state.json").is_file():
                ds = datasets.load_from_disk(str(p))
                if streaming:
                    ds = (
                        ds.to_iterable_dataset()
                        if isinstance(ds, datasets.Dataset)
                        else datasets.IterableDatasetDict({k: v.to_iterable_dataset() for k, v in ds.items()})
                    )
            else:
                ds = datasets.load_dataset(str(p), streaming=streaming)
        else:
            try:
                ds = datasets.load_dataset(str(source), streaming=streaming)
            except Exception as err:  # noqa: BLE001
                raise InvalidParameterError(
                    f"source={str(source)!r} is not an existing file or folder, and could not be loaded as a hub "
                    f"dataset offline ({type(err).__name__}: {str(err)[:200]})."
                ) from err
    else:
        raise ParameterTypeError(
            f"source must be a Dataset, DatasetDict, IterableDataset, a path or a hub id, got {type(source).__name__}."
        )
    if split is not None and isinstance(ds, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        if split not in ds:
            raise InvalidParameterError(f"split={split!r} is not in the dataset. Available splits: {sorted(ds)}.")
        ds = ds[split]
    return ds


_UTF8_CHUNK = 1 << 24


def _check_text_file(path: Path) -> None:
    """Refuse an empty file, or one that is not UTF-8, naming the file and the line of the first bad byte."""
    import codecs

    if path.suffix.lower() == ".parquet":
        if path.stat().st_size == 0:
            raise InputFileError(f"input file {str(path)!r} is empty (0 bytes); a .parquet file with rows is needed.")
        return
    decoder = codecs.getincrementaldecoder("utf-8")()
    content = False
    with path.open("rb") as f:
        while True:
            chunk = f.read(_UTF8_CHUNK)
            try:
                text = decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError:
                _raise_not_utf8(path)
            content = content or bool(text.strip())
            if not chunk:
                break
    if not content:
        raise InputFileError(
            f"input file {str(path)!r} is empty; allowed: a .jsonl file with one JSON object per line, a .csv file "
            "with a header row, or a .parquet file, with at least one row."
        )


def _raise_not_utf8(path: Path) -> None:
    """Find the first line that is not UTF-8 (slow path, only after the fast check failed) and raise."""
    with path.open("rb") as f:
        for lineno, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as err:
                raise InputFileError(
                    f"input file {str(path)!r}, line {lineno}, byte {err.start + 1}: 0x{line[err.start]:02x} is not "
                    "valid UTF-8; hf-textdp reads text files as UTF-8 (convert the file, e.g. with iconv -t UTF-8)."
                ) from None
    raise InputFileError(f"input file {str(path)!r} is not valid UTF-8.")  # pragma: no cover - split sequence


def read_file_in_memory(path: Path) -> Any:
    """A .jsonl/.json/.csv/.parquet file as an in-memory ``Dataset``.

    ``datasets.load_dataset`` would write an Arrow copy of the *original* text into ``HF_DATASETS_CACHE``,
    which outlives the run (a leak of the text we are about to privatize). Reading into memory writes
    nothing, so even a SIGKILL leaves no copy behind. Streaming (``streaming=True``) is the path for files
    larger than memory.
    """
    import datasets
    import pyarrow as pa
    from datasets.table import InMemoryTable

    _check_text_file(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(str(path))
        elif suffix == ".csv":
            import pandas as pd

            frame = pd.read_csv(str(path), encoding="utf-8", keep_default_na=False, dtype={})
            table = pa.Table.from_pandas(frame, preserve_index=False)
        else:
            with path.open("rb") as f:
                head = f.read(4096).lstrip()
            if head.startswith(b"["):  # a JSON array of objects (what datasets' json builder also reads)
                rows = json.loads(path.read_text(encoding="utf-8"))
                table = pa.Table.from_pylist(rows)
            else:
                import pyarrow.json as paj

                table = paj.read_json(str(path))
    except (pa.ArrowException, ValueError) as err:
        raise InputFileError(
            f"input file {str(path)!r} cannot be read as {suffix[1:]} ({type(err).__name__}: "
            f"{' '.join(str(err).split())[:200]})."
        ) from None
    if table.num_rows == 0:
        raise InputFileError(f"input file {str(path)!r} has no rows; at least one row is needed.")
    return datasets.Dataset(InMemoryTable(table))


def _columns(ds: Any) -> list[str]:
    cols = getattr(ds, "column_names", None)
    if cols is None and getattr(ds, "features", None) is not None:
        cols = list(ds.features)
    return list(cols or [])


# --------------------------------------------------------------------------- totals from outputs
def totals_from_columns(space: EmbeddingSpace, batches: Iterable[dict[str, list[Any]]], epsilon_token: Any) -> Totals:
    """Recompute the report totals from released columns (works after num_proc, a cache hit or a resume)."""
    totals = Totals()
    pad = space.pad_id
    for batch in batches:
        eps_col = batch.get("dp_epsilon")
        delta_col = batch.get("dp_delta")
        for j, (ids, n) in enumerate(zip(batch["input_ids"], batch["dp_tokens"], strict=True)):
            arr = np.asarray(ids, dtype=np.int64)
            cls, _ = space.classify(arr)
            structural = cls == STRUCTURAL
            padding = int((arr[structural] == pad).sum()) if pad is not None else 0
            totals.add_row(
                dp_tokens=int(n),
                special=int(structural.sum()) - padding,
                padding=padding,
                passthrough=int(arr.size - structural.sum() - int(n)),
                epsilon=None if eps_col is None else eps_col[j],
                delta=None if delta_col is None else delta_col[j],
            )
    return totals


def _totals_from_source(priv: Privatizer, source: Any, released: Any) -> Totals:
    """Totals of a ``postprocess="vector"`` output (no ``input_ids``): classify the input's tokens again.

    Only token classes are read from the input (as the privatizer did); no text leaves this function.
    """
    space = priv.space
    tokens = make_tokens(space)
    totals = Totals()
    rows_in = source.select_columns([priv.text_column]).iter(batch_size=1000)
    cols = [c for c in ("dp_tokens", "dp_epsilon", "dp_delta") if c in released.column_names]
    rows_out = released.select_columns(cols).iter(batch_size=1000)
    for batch_in, batch_out in zip(rows_in, rows_out, strict=True):
        for j, row in enumerate(tokens.encode(batch_in[priv.text_column])):
            cls, _ = space.classify(row.ids)
            structural = int((cls == STRUCTURAL).sum())
            n = int((cls == CANDIDATE).sum())
            totals.add_row(
                dp_tokens=n,
                special=structural,
                padding=0,
                passthrough=int(cls.size - structural - n),
                epsilon=batch_out["dp_epsilon"][j] if "dp_epsilon" in batch_out else None,
                delta=batch_out["dp_delta"][j] if "dp_delta" in batch_out else None,
            )
    return totals


ROW_EPSILON_OUTLIER_MULTIPLE = 10.0


def warn_row_epsilon_outliers(parts: dict[str, Any], multiple: float = ROW_EPSILON_OUTLIER_MULTIPLE) -> int:
    """Log one warning when rows have ``dp_epsilon`` above ``multiple`` × the median row's (a very long row).

    A row's ε grows with its number of tokens (basic composition), so one 200,000-character row has an ε a
    thousand times its neighbours'. The message names the split, the count, the first row indices and the
    figures, never any text. Returns the number of such rows.
    """
    eps_by_split = {
        name: np.asarray(part.data.column("dp_epsilon").to_numpy(zero_copy_only=False), dtype=np.float64)
        for name, part in parts.items()
        if "dp_epsilon" in getattr(part, "column_names", [])
    }
    values = [v[np.isfinite(v)] for v in eps_by_split.values()]
    if not values or sum(v.size for v in values) < 2:
        return 0
    median = float(np.median(np.concatenate(values)))
    if median <= 0:
        return 0
    limit = multiple * median
    count = 0
    for name, eps in eps_by_split.items():
        rows = np.flatnonzero(np.nan_to_num(eps, nan=0.0) > limit)
        if rows.size == 0:
            continue
        count += int(rows.size)
        first = ", ".join(str(int(r)) for r in rows[:5]) + (", ..." if rows.size > 5 else "")
        logger.warning(
            "%d row(s)%s have dp_epsilon above %g x the median row's (%.4g): rows %s (largest %.4g). Long rows "
            "compose more tokens; split them into shorter rows or check that they are meant to be one text.",
            rows.size,
            f" of split {name!r}" if name else "",
            multiple,
            median,
            first,
            float(np.nanmax(eps[rows])),
        )
    return count


def dataset_report(
    ds: Any, privatizers: dict[str, Privatizer], sources: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The report of a privatized Dataset/DatasetDict, totals recomputed from its columns.

    ``sources`` (split name → input Dataset) is needed only for ``postprocess="vector"`` outputs, which have
    no ``input_ids`` to count token classes from.
    """
    import datasets

    parts = dict(ds.items()) if isinstance(ds, datasets.DatasetDict) else {next(iter(privatizers)): ds}
    warn_row_epsilon_outliers(parts)
    totals = Totals()
    priv = next(iter(privatizers.values()))
    for name, part in parts.items():
        p = privatizers.get(name, priv)
        if "input_ids" not in part.column_names and sources is not None and name in sources:
            totals.merge(_totals_from_source(p, sources[name], part))
            continue
        cols = [c for c in ("input_ids", "dp_tokens", "dp_epsilon", "dp_delta") if c in part.column_names]
        batches = part.select_columns(cols).iter(batch_size=1000)
        totals.merge(totals_from_columns(p.space, batches, p.claim.epsilon_token))
    return priv.build_report(totals)


# --------------------------------------------------------------------------- saving
def _check_not_input(output: Path, paths: Sequence[str | os.PathLike[str]]) -> None:
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


def _input_paths(source: Any, parts: dict[str, Any]) -> list[str]:
    paths: list[str] = [str(source)] if isinstance(source, (str, os.PathLike)) else []
    for part in parts.values():
        paths.extend(f["filename"] for f in getattr(part, "cache_files", None) or [])
    return paths


def save_output(ds: Any, output: Path, report: dict[str, Any], *, tmp_root: Path | None = None) -> None:
    """Write ``ds`` and its report to ``output`` (format from the extension, else a ``save_to_disk`` folder).

    Both are written under ``tmp_root`` (default: beside ``output``) and renamed into place, the report
    first, so an output that exists is complete and has its report.
    """
    import datasets

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
                ds.to_csv(str(tmp), index=False)
            else:
                ds.to_parquet(str(tmp))
            report_tmp = tmp.with_name(report_path_for(output).name)
            report_tmp.write_text(dumps_json(report), encoding="utf-8")
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
        (tmp / REPORT_NAME).write_text(dumps_json(report), encoding="utf-8")


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


# --------------------------------------------------------------------------- sharded runs
class _Shifted:
    """``Privatizer.__call__`` with the shard's first row added to ``datasets``' 0-based indices.

    Row r of a split keeps row id r whatever shard it falls in, so its noise (docs/mechanisms/randomness.md) is the
    same as in a single ``Dataset.map``. Picklable for ``num_proc`` workers; hashes as the privatizer plus the offset.
    """

    def __init__(self, priv: Privatizer, offset: int) -> None:
        self.priv = priv
        self.offset = offset

    def __call__(self, batch: dict[str, list[Any]], indices: Sequence[int]) -> dict[str, list[Any]]:
        return self.priv(batch, [self.offset + int(i) for i in indices])


@dataclass
class _Split:
    name: str
    data: Any  # datasets.Dataset
    priv: Privatizer
    folder: str

    def ranges(self, shard_size: int) -> list[tuple[int, int]]:
        n = len(self.data)
        return [(a, min(a + shard_size, n)) for a in range(0, n, shard_size)] or [(0, 0)]


def _sha256_json(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def _shard_rows(path: Path) -> int | None:
    """Rows of a finished shard file, or None when it is missing or unreadable."""
    import pyarrow as pa

    if not path.is_file():
        return None
    try:
        with pa.memory_map(str(path)) as source:
            return int(pa.ipc.open_stream(source).read_all().num_rows)
    except (OSError, pa.ArrowException):
        return None


def manifest_mismatch(
    old: dict[str, Any], new: dict[str, Any], *, format_reason: str, own_reasons: dict[str, str]
) -> str | None:
    """Why the manifest ``old`` of a work folder cannot be resumed by the run ``new`` (``None``: it can).

    Checked in order: the format, the privatizer's settings (config, matrix, columns, seeded or not),
    the writer's ``own_reasons`` (key: why a different value blocks resuming), the splits. Shared by
    the in-memory and streaming sharded writers.
    """
    reasons = {
        "format": format_reason,
        "config_sha256": "its PrivatizerConfig differs from this run's",
        "space_sha256": "its model's embedding matrix differs from this run's",
        "text_column": f"its text_column was {old.get('text_column')!r}, this run's is {new['text_column']!r}",
        "id_column": f"its id_column was {old.get('id_column')!r}, this run's is {new['id_column']!r}",
        "seeded": "it was "
        + ("seeded" if old.get("seeded") else "unseeded")
        + " and this run is "
        + ("seeded" if new["seeded"] else "unseeded"),
        **own_reasons,
        "splits": "its splits differ from this run's",
    }
    for key, reason in reasons.items():
        if old.get(key) != new[key]:
            return reason
    return None


def lock_work_dir(work: Path, output: Path) -> int:
    """Take the lock of a sharded run's work folder (its descriptor), or say that another run holds it."""
    lock = try_lock(work / LOCK_NAME)
    if lock is None:
        raise OutputExistsError(
            f"output {str(output)!r}: another run is writing it (its work folder {str(work)!r} is "
            "locked); wait for it to finish or stop it."
        )
    return lock


def take_over_work_dir(
    work: Path,
    output: Path,
    new: dict[str, Any],
    old: dict[str, Any] | None,
    reason: str | None,
    finished: Callable[[], int],
    *,
    resume: bool,
    overwrite: bool,
) -> None:
    """Resume a sharded run's work folder, or clear it and write the ``new`` manifest.

    ``old`` is the manifest found there (``None``: none) and ``reason`` why it cannot be resumed
    (``None``: it can). Shared by the in-memory and streaming sharded writers.
    """
    if old is not None:
        if resume and reason is None:
            logger.info("resuming %s: %d finished shard(s) in %s", output, finished(), work)
            return
        if resume and not overwrite:
            raise ResumeError(
                f"resume=True cannot continue the partial run in {str(work)!r}: {reason}. Pass "
                "overwrite=True (--overwrite) to discard it and start over, or rerun with the same settings."
            )
        if not resume and not overwrite:
            raise OutputExistsError(
                f"output {str(output)!r}: a partial run exists in {str(work)!r} "
                f"({finished()} finished shard(s)); pass resume=True (--resume) to continue it or "
                "overwrite=True (--overwrite) to start over."
            )
        logger.warning("discarding the partial run in %s (overwrite=True)", work)
    for child in work.iterdir():
        if child.name == LOCK_NAME:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    atomic_write_text(work / MANIFEST_NAME, dumps_json(new))


def read_json_object(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``, or ``None`` when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class WorkFolderRun:
    """What the in-memory and the streaming sharded writers share: the locked work folder beside
    ``output``, whose manifest decides whether a partial run is resumed, refused or cleared
    (:func:`take_over_work_dir`), and its removal when the run ends.

    Subclasses set ``output`` and ``work`` and give :meth:`manifest`, :meth:`_mismatch` and
    :meth:`_finished`.
    """

    output: Path
    work: Path
    _lock: int | None = None

    def manifest(self) -> dict[str, Any]:
        raise NotImplementedError

    @staticmethod
    def _mismatch(old: dict[str, Any], new: dict[str, Any]) -> str | None:
        raise NotImplementedError

    def _finished(self) -> int:
        raise NotImplementedError

    def _refusal(self, old: dict[str, Any]) -> str | None:
        """Why a partial run whose manifest matches cannot be continued anyway (default: it can)."""
        return None

    def _lock_and_take_over(self, new: dict[str, Any], *, resume: bool, overwrite: bool) -> None:
        """Lock the existing work folder, then resume, refuse or clear what is in it; unlock on failure."""
        self._lock = lock_work_dir(self.work, self.output)
        try:
            old = read_json_object(self.work / MANIFEST_NAME)
            reason = None if old is None else (self._mismatch(old, new) or self._refusal(old))
            take_over_work_dir(
                self.work, self.output, new, old, reason, self._finished, resume=resume, overwrite=overwrite
            )
        except BaseException:
            release_lock(self._lock)
            self._lock = None
            raise

    def close(self, *, keep: bool) -> None:
        """Release the lock; remove the work folder unless ``keep`` and it holds finished shards to resume."""
        try:
            if not keep or self._finished() == 0:
                shutil.rmtree(self.work, ignore_errors=True)
        finally:
            release_lock(self._lock)
            self._lock = None


class _ShardedRun(WorkFolderRun):
    """One ``privatize_dataset(..., output_dir=...)`` call over in-memory or memory-mapped splits."""

    def __init__(
        self,
        splits: list[_Split],
        output: Path,
        config: PrivatizerConfig,
        *,
        is_dict: bool,
        text_column: str,
        id_column: str | None,
        shard_size: int,
        batch_size: int,
        num_proc: int | None,
    ) -> None:
        self.splits = splits
        self.output = output
        self.work = work_dir_for(output)
        self.config = config
        self.is_dict = is_dict
        self.text_column = text_column
        self.id_column = id_column
        self.shard_size = shard_size
        self.batch_size = batch_size
        self.num_proc = num_proc

    # ---------------------------------------------------------------- the manifest
    def manifest(self) -> dict[str, Any]:
        """What this run is, with no text and nothing derived from the seed (only whether there is one)."""
        priv = self.splits[0].priv
        inputs = [
            {
                "split": s.name,
                "rows": len(s.data),
                "columns": s.data.column_names,
                "fingerprint": getattr(s.data, "_fingerprint", None),
            }
            for s in self.splits
        ]
        return {
            "format": MANIFEST_FORMAT,
            "config_sha256": _sha256_json(self.config.to_dict()),
            "space_sha256": priv.space.space_hash,
            "text_column": self.text_column,
            "id_column": self.id_column,
            "seeded": priv.seed is not None,
            "shard_size": self.shard_size,
            "input_sha256": _sha256_json(inputs),
            "splits": [
                {"name": s.name, "folder": s.folder, "rows": len(s.data), "shards": len(s.ranges(self.shard_size))}
                for s in self.splits
            ],
        }

    @staticmethod
    def _mismatch(old: dict[str, Any], new: dict[str, Any]) -> str | None:
        return manifest_mismatch(
            old,
            new,
            format_reason="it was written in another work-folder format",
            own_reasons={
                "shard_size": f"its shard_size was {old.get('shard_size')!r}, this run's is {new['shard_size']!r}",
                "input_sha256": "its input differs from this run's (rows, columns, files or splits)",
            },
        )

    def _shard_path(self, split: _Split, k: int) -> Path:
        return self.work / split.folder / f"shard-{k:05d}.arrow"

    def _finished(self) -> int:
        return sum(1 for _ in self.work.glob("split-*/shard-*.arrow")) if self.work.is_dir() else 0

    # ---------------------------------------------------------------- the work folder
    def open(self, *, resume: bool, overwrite: bool) -> None:
        """Create or take over the work folder, locked; write the manifest."""
        new = self.manifest()
        self.work.parent.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(exist_ok=True)
        self._lock_and_take_over(new, resume=resume, overwrite=overwrite)

    # ---------------------------------------------------------------- the work
    def compute(self) -> None:
        """Privatize every shard that is not finished yet, writing each atomically."""
        reused = written = 0
        for split in self.splits:
            ranges = split.ranges(self.shard_size)
            for k, (a, b) in enumerate(ranges):
                path = self._shard_path(split, k)
                if _shard_rows(path) == b - a:
                    reused += 1
                    continue
                atomic_write_arrow(path, self._privatize(split, a, b, k, len(ranges)))
                written += 1
        logger.info("%s: %d shard(s) privatized, %d reused", self.output, written, reused)

    def _privatize(self, split: _Split, a: int, b: int, k: int, n_shards: int) -> Any:
        data = split.data if (a, b) == (0, len(split.data)) else split.data.select(range(a, b))
        label = split.name or "rows"
        res = data.map(
            _Shifted(split.priv, a),
            batched=True,
            with_indices=True,
            batch_size=self.batch_size,
            num_proc=self.num_proc if self.num_proc and b - a > 1 else None,
            keep_in_memory=True,  # the shard file is the only copy; nothing goes to the datasets cache
            load_from_cache_file=False,
            desc=f"Privatizing {label} shard {k + 1}/{n_shards} ({self.config.mechanism}, "
            f"epsilon={self.config.epsilon:g})",
        )
        if len(res) != b - a:  # pragma: no cover - an invariant of Dataset.map
            raise RuntimeError(f"shard {k} of split {split.name!r}: {len(res)} rows out for {b - a} in.")
        if getattr(res, "_indices", None) is not None:
            res = res.flatten_indices(keep_in_memory=True)
        # The map's schema metadata carries its in-process fingerprint, a hash of the seeded privatizer:
        # keep only the features.
        return res.data.table.replace_schema_metadata(res.features.arrow_schema.metadata)

    def _load(self, *, in_memory: bool) -> dict[str, Any]:
        import datasets

        out: dict[str, Any] = {}
        for split in self.splits:
            shards = [
                datasets.Dataset.from_file(str(self._shard_path(split, k)), in_memory=in_memory)
                for k in range(len(split.ranges(self.shard_size)))
            ]
            ds = shards[0] if len(shards) == 1 else datasets.concatenate_datasets(shards)
            for key in _CARD_FIELDS:  # the input's card fields (never row text) carry over
                setattr(ds.info, key, getattr(split.data.info, key, None) or getattr(ds.info, key))
            out[split.name] = ds
        return out

    def assemble(self) -> tuple[Any, dict[str, Any]]:
        """Write the output and its report atomically; return (the dataset to hand back, the report)."""
        import datasets

        parts = self._load(in_memory=False)
        out: Any = datasets.DatasetDict(parts) if self.is_dict else parts[self.splits[0].name]
        privatizers = {s.name: s.priv for s in self.splits}
        report = dataset_report(out, privatizers, {s.name: s.data for s in self.splits})
        save_output(out, self.output, report, tmp_root=self.work)
        if FILE_FORMATS.get(self.output.suffix.lower()) is None:
            return datasets.load_from_disk(str(self.output)), report
        # A file output cannot be memory-mapped back with its types (CSV has no lists): hand back the
        # shards, read into memory before the work folder goes.
        mem = self._load(in_memory=True)
        return (datasets.DatasetDict(mem) if self.is_dict else mem[self.splits[0].name]), report


# --------------------------------------------------------------------------- the pipeline
def privatize_dataset(
    source: Any,
    config: PrivatizerConfig,
    *,
    text_column: str = "text",
    split: str | None = None,
    num_proc: int | None = None,
    seed: int | None = None,
    allow_weak_seed: bool = False,
    id_column: str | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    streaming: bool = False,
    resume: bool = False,
    overwrite: bool = False,
    batch_size: int = 1000,
    shard_size: int = DEFAULT_SHARD_SIZE,
) -> Any:
    """Privatize the ``text_column`` of a dataset; optionally save it with its privacy report.

    Args:
        source: a ``Dataset``, ``DatasetDict``, ``IterableDataset``, hub id, local dataset folder, or a
            .jsonl/.csv/.parquet file.
        config (`PrivatizerConfig`): what to privatize with.
        text_column (`str`, defaults to `"text"`): the column to privatize.
        split (`str`, *optional*): select one split of a ``DatasetDict``; also the noise key.
        num_proc (`int`, *optional*): worker processes for ``Dataset.map``.
        seed (`int`, *optional*): secret key for reproducible noise (never saved; ≥ 64 random bits).
        allow_weak_seed (`bool`, defaults to `False`): accept a seed below 2**32 (it can be searched), for
            public benchmark data only.
        id_column (`str`, *optional*): int column used as the row id instead of the index.
        output_dir (`str`, *optional*): where to save (file by extension, else a folder). Refused when it
            exists (unless ``overwrite``) or when it is, or contains, the input.
        streaming (`bool`, defaults to `False`): stream the source (``IterableDataset``).
        resume (`bool`, defaults to `False`): continue a killed run from its finished shards (the same
            config, input, shard size and, to reproduce a clean run, the same seed: the seed is not stored,
            so it cannot be checked).
        overwrite (`bool`, defaults to `False`): replace an existing output (and discard a partial run).
        batch_size (`int`, defaults to `1000`): rows per ``map`` batch (outputs do not depend on it).
        shard_size (`int`, defaults to `10000`): rows per shard of a saved output, the unit of ``resume``
            (outputs do not depend on it).

    Returns:
        The same kind as ``source`` (a file or path source gives a ``Dataset``), with the text replaced
        and the columns ``input_ids``, ``attention_mask``, ``dp_tokens``, ``dp_epsilon`` (``dp_delta``).
        With a folder output it is the saved dataset (memory-mapped); with a file output, the same rows in
        memory; with ``streaming=True`` and an output, a stream over the saved output (iterating it reads
        the saved rows and never privatizes the source again). The report is
        ``hf_textdp.privacy_report(output_dir)``.

    Raises:
        OutputExistsError: the output exists, is the input, or a partial run exists (see ``resume``).
        ResumeError: ``resume=True`` found a partial run of another config or input.
        ColumnNotFoundError, InvalidRowError, InvalidParameterError: bad columns, rows or parameters (a
            seed below 2**32 without ``allow_weak_seed=True``).

    Example:

    >>> ds = privatize_dataset("reviews.jsonl", PrivatizerConfig(epsilon=10.0), seed=secrets.randbits(64),
    ...                        output_dir="reviews.private.jsonl")      # doctest: +SKIP
    """
    import datasets

    if not isinstance(config, PrivatizerConfig):
        raise ParameterTypeError(f"config must be a PrivatizerConfig, got {type(config).__name__}.")
    if num_proc is not None and (isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1):
        raise InvalidParameterError(f"num_proc must be an int >= 1 or None, got {num_proc!r}.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidParameterError(f"batch_size must be an int >= 1, got {batch_size!r}.")
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
        raise InvalidParameterError(f"shard_size must be an int >= 1, got {shard_size!r}.")
    for name, value in (("streaming", streaming), ("resume", resume), ("overwrite", overwrite)):
        check_bool(value, name)
    validate_secret_seed(seed, allow_weak_seed=allow_weak_seed)  # fail before loading anything
    output = Path(output_dir).expanduser() if output_dir is not None else None
    if output is not None:
        _check_not_input(output, _input_paths(source, {}))
        if output.exists() and not overwrite and not (resume and streaming):
            raise OutputExistsError(
                f"output {str(output)!r} already exists"
                + (" (a finished run: there is nothing to resume)" if resume else "")
                + "; pass overwrite=True (--overwrite) to replace it."
            )
    ds = load_source(source, split=split, streaming=streaming)
    is_dict = isinstance(ds, (datasets.DatasetDict, datasets.IterableDatasetDict))
    parts: dict[str, Any] = dict(ds.items()) if is_dict else {split or "": ds}
    if output is not None:
        _check_not_input(output, _input_paths(source, parts))
        if is_dict and output.suffix.lower() in FILE_FORMATS:
            raise InvalidParameterError(
                f"output {str(output)!r}: a dataset with splits {sorted(parts)} needs a folder output (no "
                "extension) or split=."
            )
    privatizers: dict[str, Privatizer] = {}
    for name, part in parts.items():
        cols = _columns(part)
        if cols and text_column not in cols:
            raise ColumnNotFoundError(
                f"text_column={text_column!r} is not in the dataset. Current columns in the dataset: {cols}."
            )
        if id_column is not None and cols and id_column not in cols:
            raise ColumnNotFoundError(
                f"id_column={id_column!r} is not in the dataset. Current columns in the dataset: {cols}."
            )
        privatizers[name] = Privatizer(
            config,
            seed=seed,
            text_column=text_column,
            id_column=id_column,
            split=name,
            allow_weak_seed=allow_weak_seed,
        )
    iterable = isinstance(ds, (datasets.IterableDataset, datasets.IterableDatasetDict))

    if output is None or iterable:
        results: dict[str, Any] = {}
        for name, part in parts.items():
            kwargs: dict[str, Any] = {"batched": True, "with_indices": True, "batch_size": batch_size}
            if isinstance(part, datasets.Dataset):
                kwargs["num_proc"] = num_proc
                kwargs["desc"] = f"Privatizing {name or 'rows'} ({config.mechanism}, epsilon={config.epsilon:g})"
            results[name] = part.map(privatizers[name], **kwargs)
        out: Any
        if is_dict:
            kind = datasets.DatasetDict if isinstance(ds, datasets.DatasetDict) else datasets.IterableDatasetDict
            out = kind(results)
        else:
            out = results[split or ""]
        if output is not None:
            from .streaming import save_streaming

            with output_errors(output):
                save_streaming(out, output, privatizers, resume=resume, overwrite=overwrite, shard_size=shard_size)
            # a stream over the saved rows: iterating the mapped stream again would privatize the source
            # a second time (fresh noise without a seed: a second release of the same text)
            return load_source(output, streaming=True)
        return out

    for priv in privatizers.values():
        priv.space  # noqa: B018 - load the model now: a bad model fails before anything is written
    splits = [_Split(name, part, privatizers[name], f"split-{i:03d}") for i, (name, part) in enumerate(parts.items())]
    run = _ShardedRun(
        splits,
        output,
        config,
        is_dict=is_dict,
        text_column=text_column,
        id_column=id_column,
        shard_size=shard_size,
        batch_size=batch_size,
        num_proc=num_proc,
    )
    with output_errors(output):
        run.open(resume=resume, overwrite=overwrite)
        keep = True
        try:
            run.compute()
            result, report = run.assemble()
            keep = False
        except HfTextDPError:
            # A bad row or parameter fails again at the same place on resume, and fixing the input changes
            # its fingerprint: the finished shards could never be reused.
            keep = False
            raise
        finally:  # anything else (KeyboardInterrupt, a full disk, ...) keeps the finished shards for resume
            run.close(keep=keep)
    totals = report["totals"]
    logger.info(
        "privatized %d rows (%s, epsilon=%g per token) into %s",
        totals["rows"],
        config.mechanism,
        config.epsilon,
        output,
    )
    return result
