"""Small C kernels, compiled once per machine with the system's C compiler and loaded with :mod:`ctypes`.

A kernel is a C file in ``hf_textdp/kernels/``. The first use compiles it with ``$CC`` (else ``cc``,
``gcc`` or ``clang``), ``-O3 -march=native``, into ``<cache>/native/<name>-<hash>.so``; the hash covers
the source, the flags and the CPU's model and feature flags, so a cache shared between machines never
loads another CPU's build. Without a compiler, or with ``HF_TEXTDP_NATIVE=0``, :func:`load_kernel`
returns ``None`` and callers run their torch form, which gives the same bits more slowly.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from .cache_path import cache_dir
from .logging import get_logger


__all__ = ["load_kernel", "native_enabled"]

logger = get_logger(__name__)

_KERNELS = Path(__file__).resolve().parent.parent / "kernels"
_FLAG_SETS = (["-O3", "-march=native"], ["-O3"])
_loaded: dict[str, ctypes.CDLL | None] = {}


def native_enabled() -> bool:
    """False when ``HF_TEXTDP_NATIVE`` is ``0``/``false``/``no``/``off``: every kernel then runs its torch form."""
    return os.environ.get("HF_TEXTDP_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


def _cpu_id() -> str:
    """The CPU's model and feature flags (Linux), else the platform: part of the build's cache key."""
    try:
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    wanted = [ln for ln in lines if ln.split(":")[0].strip() in ("model name", "flags", "Features")]
    return "\n".join(sorted(set(wanted))) or platform.platform()


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and (path := shutil.which(name)):
            return path
    return None


def _build(name: str, source: str, compiler: str) -> Path | None:
    folder = cache_dir() / "native"
    machine = [platform.machine(), _cpu_id()]
    for flags in _FLAG_SETS:
        key = hashlib.sha256("\0".join([source, *flags, *machine]).encode()).hexdigest()
        target = folder / f"{name}-{key[:20]}.so"
        if target.is_file():
            return target
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
        os.close(fd)
        cmd = [compiler, *flags, "-std=c99", "-shared", "-fPIC", "-x", "c", "-", "-o", tmp]
        try:
            done = subprocess.run(cmd, input=source.encode(), capture_output=True, timeout=120, check=False)
            if done.returncode == 0:
                os.replace(tmp, target)  # atomic: a concurrent process loads a whole file or builds its own
                return target
            logger.debug("%s: %s failed: %s", name, " ".join(flags), done.stderr.decode(errors="replace")[-500:])
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return None


def load_kernel(name: str) -> ctypes.CDLL | None:
    """The compiled ``kernels/<name>.c`` (built on first use, then cached), or ``None`` where it cannot be."""
    if not native_enabled():
        return None
    if name in _loaded:
        return _loaded[name]
    lib: ctypes.CDLL | None = None
    compiler = _compiler()
    try:
        source = (_KERNELS / f"{name}.c").read_text(encoding="utf-8")
        path = _build(name, source, compiler) if compiler else None
        lib = ctypes.CDLL(str(path)) if path else None
    except OSError as err:
        logger.debug("%s: cannot build or load the kernel: %s", name, err)
        lib = None
    if lib is None:
        logger.info(
            "no C compiler could build the %s kernel (%s); its torch form runs instead (same output, slower)",
            name,
            compiler or "no cc, gcc or clang on PATH",
        )
    _loaded[name] = lib
    return lib
