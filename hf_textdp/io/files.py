"""Atomic writes: write to a temporary sibling, flush it to disk, then rename over the destination.

A rename within one file system is atomic, so a reader (or a run killed with SIGKILL half-way) sees
either the old content or the new one, never a torn file. ``fsync`` of the file before the rename
and of the folder after it makes the result survive a power cut too.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from filelock import BaseFileLock, FileLock, Timeout


__all__ = [
    "dumps_json",
    "atomic_open",
    "atomic_write_text",
    "atomic_path",
    "replace_path",
    "fsync_dir",
    "fsync_tree",
    "try_lock",
    "release_lock",
    "stat_identity",
    "refuse_existing_file",
    "write_user_file",
]


def stat_identity(path: str | os.PathLike[str]) -> str:
    """What identifies a file, or a folder's top-level files, without reading them: the resolved path and each
    file's size and modification time (``make``'s test), so an edited or replaced file gives another identity."""
    p = Path(path).expanduser().resolve()
    files = sorted(c for c in p.iterdir() if c.is_file()) if p.is_dir() else [p] if p.is_file() else []
    stats = ((f.name, f.stat()) for f in files)
    return "|".join([str(p), *(f"{name}:{st.st_size}:{st.st_mtime_ns}" for name, st in stats)])


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of the file at ``path`` (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def dumps_json(obj: Any) -> str:
    """JSON with sorted keys, two-space indent, and no NaN/Infinity (they become null first)."""
    return json.dumps(_finite(obj), sort_keys=True, indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


# --------------------------------------------------------------------------- durability
def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Flush a folder's entries (the renames into it) to disk; a no-op where folders cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # Windows cannot open folders
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(path: str | os.PathLike[str]) -> None:
    """Flush every file under ``path`` (or ``path`` itself when it is a file) and the folders to disk."""
    path = Path(path)
    if path.is_file():
        _fsync_file(path)
        return
    for root, _dirs, files in os.walk(path):
        for name in files:
            _fsync_file(Path(root) / name)
        fsync_dir(root)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


# --------------------------------------------------------------------------- atomic writes
@contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "wb", **kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path`` for writing; on success flush it and rename it onto ``path``.

    On any exception (or if the process dies) ``path`` keeps its old content and the temporary file is
    removed (or, after SIGKILL, left as a hidden ``.NAME.*.tmp`` sibling).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (temporary sibling + ``os.replace``)."""
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(text)


def replace_path(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], *, trash_dir: str | os.PathLike[str]
) -> None:
    """Move ``src`` onto ``dst``; an existing ``dst`` folder (or a file where a folder goes) is moved aside first.

    A file replaces a file in one atomic rename. A folder cannot be renamed over a non-empty folder, so the
    old one is first renamed into ``trash_dir`` (on the same file system) and deleted after: a crash in
    between leaves no ``dst`` at all, never a mixture of old and new.
    """
    src, dst = Path(src), Path(dst)
    if dst.is_symlink() or (dst.exists() and not (dst.is_file() and src.is_file())):
        old = Path(tempfile.mkdtemp(prefix=".old.", dir=trash_dir))
        os.replace(dst, old / "old")
        os.replace(src, dst)
        fsync_dir(dst.parent)
        shutil.rmtree(old, ignore_errors=True)
        return
    os.replace(src, dst)
    fsync_dir(dst.parent)


@contextmanager
def atomic_path(
    path: str | os.PathLike[str], *, is_dir: bool, tmp_root: str | os.PathLike[str] | None = None
) -> Iterator[Path]:
    """Yield a temporary path to write ``path``'s new content at; on success move it into place.

    The temporary lies in a fresh hidden folder in ``tmp_root`` (default: ``path``'s parent; it must be on
    the same file system). On any exception the temporary is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    root = Path(tmp_root) if tmp_root is not None else path.parent
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=root))
    tmp = staging / "new" if is_dir else staging / path.name
    try:
        yield tmp
        fsync_tree(tmp)
        replace_path(tmp, path, trash_dir=staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def refuse_existing_file(path: str | os.PathLike[str] | None, *, overwrite: bool, param: str) -> None:
    """Refuse a user-named output file ``path`` (the option ``param``) that exists, unless ``overwrite``; a
    folder is refused even then (replacing it would delete what it holds)."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir() and not p.is_symlink():
        raise _output_exists(f"{param} {str(path)!r} is a folder; give the path of a file to write.")
    if (p.exists() or p.is_symlink()) and not overwrite:
        raise _output_exists(f"{param} {str(path)!r} already exists; pass --overwrite to replace it.")


def write_user_file(path: str | os.PathLike[str], text: str, *, overwrite: bool, param: str) -> None:
    """Write ``text`` to the user-named file ``path`` (the option ``param``): refused when it exists without
    ``overwrite``; written atomically, so a link there is replaced by the new file and its target is untouched."""
    refuse_existing_file(path, overwrite=overwrite, param=param)
    atomic_write_text(path, text)


def _output_exists(message: str) -> Exception:
    from ..errors import OutputExistsError  # errors imports nothing of io; kept local as files.py is a leaf

    return OutputExistsError(message)


# --------------------------------------------------------------------------- locking
def try_lock(path: str | os.PathLike[str]) -> BaseFileLock | None:
    """Take an exclusive advisory lock on ``path`` (created if needed) with ``filelock``; None if it is held.

    The lock is the operating system's (``flock`` on POSIX, ``msvcrt`` on Windows), so it dies with the
    process (SIGKILL included): a killed run never leaves a stale lock.
    """
    lock = FileLock(os.fspath(path), timeout=0, thread_local=False)  # released by any thread, as an fd was
    try:
        lock.acquire()
    except Timeout:
        return None
    return lock


def release_lock(lock: BaseFileLock | None) -> None:
    """Release a lock taken by :func:`try_lock` (None: nothing to release)."""
    if lock is not None:
        lock.release(force=True)
