"""The hidden work folder of a sharded run: lock, manifest, finished shards, resume or take-over.

A run writing OUTPUT works in ``.OUTPUT.partial`` beside it (``paths.work_dir_for``). Its ``manifest.json``
says what the job is and which shards are finished (sealed: :mod:`~hf_textdp.io.integrity`); a later run resumes
it only when its own manifest matches and the seal holds, else refuses or clears it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from filelock import BaseFileLock

from ..errors import HfTextDPError, OutputExistsError, ResumeError
from ..utils.logging import get_logger
from .files import atomic_open, release_lock, try_lock
from .integrity import SCRYPT_PARAMS, ShardLedger, other_seed, seal_problem, seed_verifier, unlink_links
from .model_files import model_fingerprint
from .paths import LOCK_NAME, MANIFEST_NAME


__all__ = [
    "DEFAULT_SHARD_SIZE",
    "SCRYPT_PARAMS",
    "seed_verifier",
    "other_seed",
    "sha256_json",
    "privatizer_manifest",
    "shard_path",
    "atomic_write_arrow",
    "manifest_mismatch",
    "lock_work_dir",
    "take_over_work_dir",
    "claim_work_dir",
    "TAMPERED",
    "remove_own_files",
    "read_json_object",
    "WorkFolderRun",
]

logger = get_logger("hf_textdp.pipeline")  # the name these log lines have always carried (issue 38 moved the pipeline)

DEFAULT_SHARD_SIZE = 10_000


def sha256_json(obj: Any) -> str:
    """The SHA-256 of ``obj`` as canonical JSON (what a manifest records of a config or an input)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def privatizer_manifest(fmt: str, priv: Any) -> dict[str, Any]:
    """The manifest keys of the privatizer ``priv``: no text, the model's files (every one, by content:
    :func:`~hf_textdp.io.model_files.model_fingerprint`), and of the seed only whether there is one and its salted
    scrypt verifier (:func:`seed_verifier`)."""
    return {
        "format": fmt,
        "config_sha256": sha256_json(priv.config.to_dict()),
        "space_sha256": priv.engine.space.space_hash,  # loads the model first: the fingerprint reads it offline
        "model_sha256": model_fingerprint(priv.config.model),
        "text_column": priv.text_column,
        "id_column": priv.id_column,
        "seeded": priv.seed is not None,
        "seed_verifier": None if priv.seed is None else seed_verifier(priv.seed),
    }


def shard_path(work: Path, folder: str, k: int) -> Path:
    """The file of shard ``k`` of the split written into ``work/folder``."""
    return work / folder / f"shard-{k:05d}.arrow"


def atomic_write_arrow(path: str | os.PathLike[str], table: Any, *, max_chunksize: int = 1000) -> None:
    """Write a ``pyarrow.Table`` as an Arrow IPC stream (the format ``Dataset.from_file`` reads), atomically."""
    with atomic_open(path, "wb") as f, pa.ipc.new_stream(f, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=max_chunksize):
            writer.write_batch(batch)


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
        "model_sha256": "its model's files differ from this run's (a weight, tokenizer or config file changed, or "
        "the model id resolves to another revision); resume needs the model of the partial run",
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


def lock_work_dir(work: Path, output: Path) -> BaseFileLock:
    """Take the lock of a sharded run's work folder (its descriptor), or say that another run holds it."""
    lock = try_lock(work / LOCK_NAME)
    if lock is None:
        raise OutputExistsError(
            f"output {str(output)!r}: another run is writing it (its work folder {str(work)!r} is "
            "locked); wait for it to finish or stop it."
        )
    return lock


#: how every reason of :func:`~hf_textdp.io.integrity.seal_problem` begins: rerunning with other settings cannot help
TAMPERED = "its manifest.json was"


def take_over_work_dir(
    work: Path,
    output: Path,
    old: dict[str, Any] | None,
    reason: str | None,
    finished: Callable[[], int],
    *,
    resume: bool,
    overwrite: bool,
) -> bool:
    """Resume a sharded run's work folder (return ``True``), or clear it for a new run (``False``).

    ``old`` is the manifest found there (``None``: none) and ``reason`` why it cannot be resumed
    (``None``: it can). Shared by the in-memory and streaming sharded writers, which then write their manifest.
    """
    if old is not None:
        if resume and reason is None:
            logger.info("resuming %s: %d finished shard(s) in %s", output, finished(), work)
            return True
        if resume and not overwrite:
            rerun = "" if reason and reason.startswith(TAMPERED) else ", or rerun with the same settings"
            raise ResumeError(
                f"resume=True cannot continue the partial run in {str(work)!r}: {reason}. Pass "
                f"overwrite=True (--overwrite) to discard it and start over{rerun}."
            )
        if not resume and not overwrite:
            raise OutputExistsError(
                f"output {str(output)!r}: a partial run exists in {str(work)!r} "
                f"({finished()} finished shard(s)); pass resume=True (--resume) to continue it or "
                "overwrite=True (--overwrite) to start over."
            )
        logger.warning("discarding the partial run in %s (overwrite=True)", work)
    remove_own_files(work, keep_lock=True)
    return False


#: what a work folder holds that this package wrote: top level, and inside each ``split-NNN`` folder
_OWN_TOP = re.compile(r"(lock|manifest\.json|split-\d{3}|\..+\.tmp)")
_OWN_SPLIT = re.compile(r"(shard-\d{5}\.arrow|progress\.json|\..+\.tmp)")
#: the ``format`` of the manifests the sharded and streaming writers write
_MANIFEST_FORMATS = ("hf_textdp/shards/", "hf_textdp/stream/")


def _remove(path: Path) -> None:
    """Delete ``path``: a link (to anything) or a file is unlinked, a real folder removed with its contents."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def remove_own_files(work: Path, *, keep_lock: bool = False) -> list[str]:
    """Delete from the work folder ``work`` only what a run writes there (lock, manifest, ``split-NNN`` shards
    and progress, hidden ``.*.tmp`` temporaries), never following a link; remove ``work`` itself when nothing
    else is left. Return the names of the children left in place because this package did not write them."""
    left: list[str] = []
    if work.is_symlink() or not work.is_dir():
        return left
    for child in sorted(work.iterdir()):
        if child.name == LOCK_NAME and keep_lock:
            continue
        if not _OWN_TOP.fullmatch(child.name):
            left.append(child.name)
            continue
        if child.name.startswith("split-") and child.is_dir() and not child.is_symlink():
            for inner in sorted(child.iterdir()):
                if _OWN_SPLIT.fullmatch(inner.name):
                    _remove(inner)
                else:
                    left.append(f"{child.name}/{inner.name}")
            if not any(child.iterdir()):
                child.rmdir()
            continue
        _remove(child)
    if not keep_lock and not left:
        try:
            work.rmdir()
        except OSError:  # a file appeared meanwhile: leave the folder
            pass
    elif left:
        logger.warning("left %d file(s) this package did not write in %s: %s", len(left), work, ", ".join(left))
    return left


def is_own_work_dir(work: Path) -> bool:
    """Whether the existing folder ``work`` is a work folder this package created: it holds a manifest of
    one of its formats, or nothing but its lock (a run stopped between creating the folder and its manifest)."""
    manifest = read_json_object(work / MANIFEST_NAME)
    if manifest is not None:
        return str(manifest.get("format", "")).startswith(_MANIFEST_FORMATS)
    return all(child.name == LOCK_NAME and child.is_file() for child in work.iterdir())


def claim_work_dir(work: Path, output: Path) -> None:
    """Create the work folder ``work`` of the run writing ``output``, or check that the one there is this
    package's: a link there, a file, or a folder it did not create is refused (naming it), never entered."""
    hint = "; it is not an hf-textdp work folder, so nothing in it is touched: move it away or choose another output."
    if work.is_symlink():
        raise OutputExistsError(f"output {str(output)!r}: {str(work)!r} is a symbolic link" + hint)
    if work.exists() and not work.is_dir():
        raise OutputExistsError(f"output {str(output)!r}: {str(work)!r} is a file" + hint)
    if work.is_dir() and (work / MANIFEST_NAME).is_symlink():
        raise OutputExistsError(
            f"output {str(output)!r}: {str(work / MANIFEST_NAME)!r} is a symbolic link; a run never follows a link "
            "in its work folder, so nothing in it is touched: remove the link (or the folder) and run again."
        )
    if work.is_dir():
        if not is_own_work_dir(work):
            raise OutputExistsError(f"output {str(output)!r}: the folder {str(work)!r} exists" + hint)
        unlink_links(work)  # never read, written or locked through a link (a split-000 pointing elsewhere)
        return
    work.parent.mkdir(parents=True, exist_ok=True)
    try:
        work.mkdir()
    except FileExistsError:  # another run created it just now: check what it is
        claim_work_dir(work, output)


def read_json_object(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``, or ``None`` when it is missing, a link (never followed), unreadable or not an
    object."""
    if path.is_symlink():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class WorkFolderRun:
    """What the in-memory and the streaming sharded writers share: the locked work folder beside
    ``output``, whose manifest decides whether a partial run is resumed, refused or cleared
    (:func:`take_over_work_dir`), the sealed record of its finished shards (:attr:`ledger`), and its removal
    when the run ends.

    Subclasses set ``output``, ``work`` and ``seed`` and give :meth:`manifest`, :meth:`mismatch`,
    :meth:`finished`, :meth:`compute` and :meth:`assemble`.
    """

    output: Path
    work: Path
    seed: int | None = None  # the run's secret seed: checks and seals a seeded manifest, never written
    resumable: bool = True  # False: a failed run's shards are not kept (they could not be resumed)
    _lock: BaseFileLock | None = None
    _ledger: ShardLedger | None = None

    @property
    def ledger(self) -> ShardLedger:
        """The manifest in use (the resumed one, or this run's), with its verified shards."""
        assert self._ledger is not None, "open() first"
        return self._ledger

    def manifest(self) -> dict[str, Any]:
        raise NotImplementedError

    @staticmethod
    def mismatch(old: dict[str, Any], new: dict[str, Any]) -> str | None:
        raise NotImplementedError

    def finished(self) -> int:
        """The number of finished shards in the work folder."""
        raise NotImplementedError

    def refusal(self, old: dict[str, Any]) -> str | None:
        """Why a partial run whose manifest matches cannot be continued anyway: another seed (:func:`other_seed`),
        or a manifest edited since it was sealed (:func:`~hf_textdp.io.integrity.seal_problem`)."""
        return other_seed(old, self.seed) or seal_problem(old, self.seed)

    def compute(self) -> None:
        raise NotImplementedError

    def assemble(self) -> Any:
        raise NotImplementedError

    def open(self, *, resume: bool, overwrite: bool) -> None:
        """Create or take over the work folder, locked: resume, refuse or clear what is in it; unlock on failure."""
        new = self.manifest()  # loads the model: a bad model fails before anything is written
        claim_work_dir(self.work, self.output)
        self._lock = lock_work_dir(self.work, self.output)
        try:
            old = read_json_object(self.work / MANIFEST_NAME)
            reason = None if old is None else (self.mismatch(old, new) or self.refusal(old))
            resumed = take_over_work_dir(
                self.work, self.output, old, reason, self.finished, resume=resume, overwrite=overwrite
            )
            self._ledger = ShardLedger(self.work, old if resumed and old is not None else new, self.seed)
            if not resumed:
                self._ledger.write()
        except BaseException:
            release_lock(self._lock)
            self._lock = None
            raise

    def close(self, *, keep: bool) -> None:
        """Release the lock; remove the work folder unless ``keep`` and it holds finished shards to resume."""
        try:
            if not keep or self.finished() == 0:
                with contextlib.suppress(OSError):  # cleanup never hides the run's own outcome
                    remove_own_files(self.work)
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
