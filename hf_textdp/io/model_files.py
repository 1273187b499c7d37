"""The identity of a model's files, as a resume compares it (issue 53, R2): every file, not only the embedding matrix.

A partial run is continued only with the model it started with. The embedding matrix alone does not say so: a
masked LM's other weights (dp_mlm), its tokenizer or config may change while the matrix stays, and a hub id
resolves to whatever revision is in the cache. :func:`model_fingerprint` is the SHA-256 over every file of the
model folder (hidden ones aside: ``.cache``, ``.git``) or of the vector file, each by its content, with the hub
revision. A file's hash is kept in the disk cache under its path and ``stat`` (size, modification and change
times, inode), so a large model is read once, and an edit, even one that restores the modification time, changes
the change time and is read again.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .cache import DiskCache
from .files import file_sha256
from .models import resolve_model


__all__ = ["model_fingerprint", "file_identity_sha256"]

_KIND = "file_sha256"


def file_identity_sha256(path: Path, store: DiskCache | None = None) -> str:
    """SHA-256 of the file at ``path`` (a link is read through), from the cache when its ``stat`` is unchanged."""
    st = path.stat()
    stamp = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}|{st.st_dev}"
    key = hashlib.sha256(stamp.encode("utf-8", "surrogatepass")).hexdigest()
    hit = store.load(_KIND, key) if store is not None else None
    if hit is not None and isinstance(hit.get("sha256"), str) and hit.get("stamp") == stamp:
        return str(hit["sha256"])
    digest = file_sha256(path)
    if store is not None:
        store.save(_KIND, key, {"stamp": stamp, "sha256": digest})
    return digest


def _files(folder: Path) -> list[Path]:
    """Every file under ``folder`` but hidden ones, sorted (links to files, as a hub snapshot holds, included)."""
    out: list[Path] = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out += [Path(root) / n for n in names if not n.startswith(".") and (Path(root) / n).is_file()]
    return sorted(out)


def model_fingerprint(model: str) -> str:
    """Hex SHA-256 of what ``model`` resolves to (offline): its kind, revision, and each file's relative path and
    content hash. Two runs with the same fingerprint read the same bytes."""
    kind, path, revision = resolve_model(model, local_only=True)
    store = DiskCache()
    h = hashlib.sha256(f"hf_textdp/model-files/v1\0{kind}\0{revision}\0".encode())
    files = [path] if kind == "file" else _files(path)
    for f in files:
        rel = f.name if kind == "file" else f.relative_to(path).as_posix()
        h.update(f"{rel}\0{file_identity_sha256(f, store)}\0".encode("utf-8", "surrogatepass"))
    return h.hexdigest()
