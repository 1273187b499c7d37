"""Atomic writes: write to a temporary sibling, then rename over the destination."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


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


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary sibling + ``os.replace``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@contextmanager
def atomic_path(path: str | os.PathLike[str], *, is_dir: bool) -> Iterator[Path]:
    """Yield a temporary sibling of ``path``; on success move it into place (replacing ``path``).

    On any exception the temporary sibling is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    tmp = tmp_dir if is_dir else tmp_dir / path.name
    try:
        yield tmp
        if path.is_dir() and not path.is_symlink():
            backup = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, backup / "old")
            os.replace(tmp, path)
            shutil.rmtree(backup, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp_dir.exists():
            shutil.rmtree(tmp_dir, ignore_errors=True)
