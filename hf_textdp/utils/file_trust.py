"""Whether a cached file may be trusted: owned by this user and writable by no one else (issue 53, R4).

The cache (``HF_TEXTDP_CACHE``) holds values a report's bounds are computed from and compiled kernels this
process loads. Another user who can write there could change both, so an entry is read only from a folder and
file that this user owns and that neither the group nor others may write; the folders this package creates are
made so (mode 0700). Windows has no POSIX owner: there these checks pass.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .logging import get_logger


__all__ = ["private_dir", "untrusted"]

logger = get_logger(__name__)

_OPEN = stat.S_IWGRP | stat.S_IWOTH


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def untrusted(path: Path) -> str | None:
    """Why the file ``path`` (and its folder) cannot be trusted (``None``: it can): a link, another owner, or a
    mode that lets the group or others write it."""
    uid = _uid()
    for p in (path.parent, path):
        try:
            st = p.lstat()
        except OSError as err:
            return f"{p} cannot be read ({err.strerror})"
        if stat.S_ISLNK(st.st_mode):
            return f"{p} is a symbolic link"
        if uid is not None and st.st_uid != uid:
            return f"{p} belongs to another user (uid {st.st_uid})"
        if uid is not None and st.st_mode & _OPEN:
            return f"{p} may be written by its group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def private_dir(path: Path) -> Path:
    """Create the folder ``path`` (and its parents) with mode 0700, or make an existing one of this user's 0700
    when its group or others may write it (a folder of someone else's is left as it is: :func:`untrusted` then
    refuses what it holds)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    uid = _uid()
    try:
        st = path.lstat()
        if uid is not None and st.st_uid == uid and not stat.S_ISLNK(st.st_mode) and st.st_mode & _OPEN:
            os.chmod(path, 0o700)
            logger.info("made the cache folder %s private (mode 700)", path)
    except OSError as err:
        logger.debug("cannot check the cache folder %s: %s", path, err)
    return path
