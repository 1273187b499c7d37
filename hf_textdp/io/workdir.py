"""The hidden work folder of a sharded run: lock, manifest, finished shards, resume or take-over.

A run writing OUTPUT works in ``.OUTPUT.partial`` beside it (``paths.work_dir_for``). Its ``manifest.json``
says what the job is; a later run resumes it only when its own manifest matches, else refuses or clears it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..errors import HfTextDPError, OutputExistsError, ResumeError
from ..utils.logging import get_logger
from .files import atomic_open, atomic_write_text, dumps_json, release_lock, try_lock
from .paths import LOCK_NAME, MANIFEST_NAME


__all__ = [
    "DEFAULT_SHARD_SIZE",
    "SEED_CHECK_ROWS",
    "uncounted",
    "other_seed",
    "sha256_json",
    "privatizer_manifest",
    "shard_path",
    "atomic_write_arrow",
    "shard_rows",
    "manifest_mismatch",
    "lock_work_dir",
    "take_over_work_dir",
    "read_json_object",
    "WorkFolderRun",
]

logger = get_logger("hf_textdp.run.pipeline")  # the name these log lines have always carried

DEFAULT_SHARD_SIZE = 10_000

#: rows of a seeded partial run privatized again on resume, to check that the seed is the same
SEED_CHECK_ROWS = 4


@contextmanager
def uncounted(priv: Any) -> Iterator[None]:
    """Rows the privatizer ``priv`` privatizes inside are a check, not a release: its totals stay as they were."""
    totals = copy.deepcopy(priv.totals)
    try:
        yield
    finally:
        priv.totals = totals


def other_seed(again: Sequence[Any], kept: Sequence[Any]) -> str | None:
    """Why a seeded partial run cannot be continued with this run's seed (the seed is never stored): its released
    ``kept`` values of up to :data:`SEED_CHECK_ROWS` rows with privatized tokens all differ from the same rows
    privatized ``again``. One row that agrees is enough: a float64 near-tie may differ on another device."""
    if again and all(a != k for a, k in zip(again, kept, strict=True)):
        return (
            f"its rows were privatized with another seed ({len(again)} of its rows privatized again with this run's "
            "seed all differ); resume needs the seed of the partial run"
        )
    return None


def sha256_json(obj: Any) -> str:
    """The SHA-256 of ``obj`` as canonical JSON (what a manifest records of a config or an input)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def privatizer_manifest(fmt: str, priv: Any) -> dict[str, Any]:
    """The manifest keys of the privatizer ``priv``: no text and nothing derived from the seed (only whether
    there is one)."""
    return {
        "format": fmt,
        "config_sha256": sha256_json(priv.config.to_dict()),
        "space_sha256": priv.space.space_hash,
        "text_column": priv.text_column,
        "id_column": priv.id_column,
        "seeded": priv.seed is not None,
    }


def shard_path(work: Path, folder: str, k: int) -> Path:
    """The file of shard ``k`` of the split written into ``work/folder``."""
    return work / folder / f"shard-{k:05d}.arrow"


def atomic_write_arrow(path: str | os.PathLike[str], table: Any, *, max_chunksize: int = 1000) -> None:
    """Write a ``pyarrow.Table`` as an Arrow IPC stream (the format ``Dataset.from_file`` reads), atomically."""
    with atomic_open(path, "wb") as f, pa.ipc.new_stream(f, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=max_chunksize):
            writer.write_batch(batch)


def shard_rows(path: Path) -> int | None:
    """Rows of a finished shard file, or None when it is missing or unreadable."""
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

    Subclasses set ``output`` and ``work`` and give :meth:`manifest`, :meth:`mismatch`, :meth:`finished`,
    :meth:`compute` and :meth:`assemble`.
    """

    output: Path
    work: Path
    resumable: bool = True  # False: a failed run's shards are not kept (they could not be resumed)
    _lock: int | None = None

    def manifest(self) -> dict[str, Any]:
        raise NotImplementedError

    @staticmethod
    def mismatch(old: dict[str, Any], new: dict[str, Any]) -> str | None:
        raise NotImplementedError

    def finished(self) -> int:
        """The number of finished shards in the work folder."""
        raise NotImplementedError

    def refusal(self, old: dict[str, Any]) -> str | None:
        """Why a partial run whose manifest matches cannot be continued anyway (default: it can)."""
        return None

    def compute(self) -> None:
        raise NotImplementedError

    def assemble(self) -> Any:
        raise NotImplementedError

    def open(self, *, resume: bool, overwrite: bool) -> None:
        """Create or take over the work folder, locked: resume, refuse or clear what is in it; unlock on failure."""
        new = self.manifest()  # loads the model: a bad model fails before anything is written
        self.work.mkdir(parents=True, exist_ok=True)
        self._lock = lock_work_dir(self.work, self.output)
        try:
            old = read_json_object(self.work / MANIFEST_NAME)
            reason = None if old is None else (self.mismatch(old, new) or self.refusal(old))
            take_over_work_dir(
                self.work, self.output, new, old, reason, self.finished, resume=resume, overwrite=overwrite
            )
        except BaseException:
            release_lock(self._lock)
            self._lock = None
            raise

    def close(self, *, keep: bool) -> None:
        """Release the lock; remove the work folder unless ``keep`` and it holds finished shards to resume."""
        try:
            if not keep or self.finished() == 0:
                shutil.rmtree(self.work, ignore_errors=True)
        finally:
            release_lock(self._lock)
            self._lock = None

    def execute(self, *, resume: bool, overwrite: bool) -> Any:
        """Open, compute every missing shard, assemble; return what :meth:`assemble` returns."""
        self.open(resume=resume, overwrite=overwrite)
        keep = True
        try:
            self.compute()
            result = self.assemble()
            keep = False
        except HfTextDPError:
            # A bad row or parameter fails again at the same place on resume, and fixing the input changes
            # its fingerprint: the finished shards could never be reused.
            keep = False
            raise
        finally:  # anything else (KeyboardInterrupt, a full disk, a lost connection) keeps the shards for resume
            self.close(keep=keep and self.resumable)
        return result
