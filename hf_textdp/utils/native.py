"""Small C kernels, compiled once per machine with the system's C compiler and loaded with :mod:`ctypes`.

A kernel is a C file in ``hf_textdp/kernels/``. The first use compiles it with ``$CC`` (else ``cc``,
``gcc`` or ``clang``), ``-O3 -march=native -fno-math-errno``, into ``<cache>/native/<name>-<hash>.so``; the
hash covers the source, the flags and the CPU's model and feature flags, so a cache shared between machines
never loads another CPU's build. The folder is made private (mode 0700), and a library is loaded only when it and
its folder are this user's, writable by no one else, and its bytes have the SHA-256 recorded beside it
(``<name>-<hash>.so.sha256``) when it was built; otherwise it is built again (issue 53, R4). Without a
compiler, or with the native switch off (:mod:`hf_textdp.settings`), :func:`load_kernel` returns ``None`` and
callers run their torch form, more slowly: the same answers, and the same bits but for the normals, whose
logarithm, cosine and sine are the kernel's own (docs/mechanisms/randomness.md §4).
"""

from __future__ import annotations

import ctypes
import hashlib
import hmac
import os
import platform
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .. import settings
from .cache_path import cache_dir
from .file_trust import private_dir, untrusted
from .logging import get_logger


__all__ = ["check_index_range", "load_kernel", "native_enabled", "run_parts", "run_team"]

logger = get_logger(__name__)

_KERNELS = Path(__file__).resolve().parent.parent / "kernels"
_FLAG_SETS = (["-O3", "-march=native", "-fno-math-errno"], ["-O3", "-fno-math-errno"])
_loaded: dict[str, ctypes.CDLL | None] = {}
_LOCAL_INCLUDE = re.compile(r'\s*#\s*include\s+"([A-Za-z0-9_]+\.h)"')
_pool: ThreadPoolExecutor | None = None


def _reset_pool_after_fork() -> None:
    global _pool
    _pool = None  # a forked child inherits the executor but not its threads


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_pool_after_fork)


def run_parts(call: Callable[[int, int], object], n: int, parts: int) -> None:
    """``call(lo, hi)`` over ``parts`` near-equal consecutive ranges of ``0 … n``, in parallel threads.

    For kernel calls through :mod:`ctypes`, which releases the GIL during each call, so the parts run on
    as many cores; ``parts ≤ 1`` makes one call on the calling thread.
    """
    global _pool
    parts = max(1, min(parts, n))
    if parts == 1:
        call(0, n)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="hf_textdp_native")
    cuts = [n * p // parts for p in range(parts + 1)]
    for done in [_pool.submit(call, cuts[p], cuts[p + 1]) for p in range(parts)]:
        done.result()


def check_index_range(index: Any, n: int, name: str) -> None:
    """Kernels index memory with ``index`` (a tensor of ints): refuse values outside [0, n) instead of reading past
    the end of the array."""
    if index.numel() and not 0 <= int(index.min()) <= int(index.max()) < n:
        raise IndexError(f"{name} must lie in [0, {n}), got values outside it.")


def native_enabled() -> bool:
    """False when the native switch is off (:func:`hf_textdp.settings.native_enabled`): every kernel then runs
    its torch form."""
    return settings.native_enabled()


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


def _sidecar(target: Path) -> Path:
    """Where the SHA-256 of a built library is kept: ``<name>-<key>.so.sha256`` beside it."""
    return target.with_name(target.name + ".sha256")


def _verified(target: Path) -> bool:
    """Whether the built library ``target`` may be loaded (issue 53, R4): it and its folder are this user's and
    writable by no one else (:func:`~hf_textdp.utils.file_trust.untrusted`), and its bytes have the SHA-256
    recorded when it was built. A failing one is logged, naming it, and built again."""
    if not target.is_file() and not target.is_symlink():
        return False
    if not _sidecar(target).exists() and not _sidecar(target).is_symlink():  # built by a version before the hash
        logger.info(
            "the compiled kernel %s has no recorded SHA-256 (an older version built it): building it again", target
        )
        return False
    why = untrusted(target) or untrusted(_sidecar(target))
    if why is None:
        try:
            recorded = _sidecar(target).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            recorded = ""
        if hmac.compare_digest(recorded, _file_sha256(target)):
            return True
        why = "its SHA-256 is not the one recorded when it was built"
    logger.warning("the compiled kernel %s is not loaded (%s): building it again", target, why)
    return False


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _install(tmp: str, target: Path) -> None:
    """Move the library built at ``tmp`` to ``target`` (any file or link there replaced), then record its hash."""
    digest = _file_sha256(Path(tmp))
    os.chmod(tmp, 0o700)
    os.replace(tmp, target)  # atomic: a concurrent process loads a whole file or builds its own
    fd, side = tempfile.mkstemp(suffix=".tmp", dir=target.parent)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(digest + "\n")
    os.replace(side, _sidecar(target))


def _build(name: str, source: str, compiler: str, openmp: bool) -> Path | None:
    folder = cache_dir() / "native"
    machine = [platform.machine(), _cpu_id()]
    flag_sets = [[*_FLAG_SETS[0], "-fopenmp"], *_FLAG_SETS] if openmp else _FLAG_SETS
    for flags in flag_sets:
        key = hashlib.sha256("\0".join([source, *flags, *machine]).encode()).hexdigest()
        target = folder / f"{name}-{key[:20]}.so"
        if _verified(target):
            return target
        private_dir(folder)  # built where only this user can write (mode 0700)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
        os.close(fd)
        cmd = [compiler, *flags, "-std=c99", "-shared", "-fPIC", "-x", "c", "-", "-o", tmp]
        try:
            done = subprocess.run(cmd, input=source.encode(), capture_output=True, timeout=120, check=False)
            if done.returncode == 0:
                _install(tmp, target)
                return target
            logger.debug("%s: %s failed: %s", name, " ".join(flags), done.stderr.decode(errors="replace")[-500:])
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return None


def _inline_headers(source: str) -> str:
    """``source`` with each ``#include "x.h"`` line replaced by ``kernels/x.h``, itself so expanded (the kernels'
    shared helpers; each header guards against a second inclusion): the compiler reads the source from its
    standard input, and the build's hash then covers the headers too."""
    lines = []
    for line in source.splitlines(keepends=True):
        m = _LOCAL_INCLUDE.match(line)
        lines.append(_inline_headers((_KERNELS / m.group(1)).read_text(encoding="utf-8")) + "\n" if m else line)
    return "".join(lines)


def run_team(call: Callable[[int, int, int], object], n: int, parts: int, *, openmp: bool) -> None:
    """``call(lo, hi, team)`` over ``0 … n`` on ``parts`` threads: one call with an OpenMP team of ``parts``
    where the kernel was built with OpenMP, else :func:`run_parts` with ``team = 1`` per call."""
    if openmp:
        call(0, n, parts)
    else:
        run_parts(lambda lo, hi: call(lo, hi, 1), n, parts)


def load_kernel(name: str, *, openmp: bool = False) -> ctypes.CDLL | None:
    """The compiled ``kernels/<name>.c`` (built on first use, then cached), or ``None`` where it cannot be.

    ``openmp=True`` builds with ``-fopenmp`` where the compiler can (else without): the library then
    needs ``libgomp.so.1``, which resolves to the copy torch has already loaded, so the kernel's parallel
    regions run on torch's own OpenMP threads.
    """
    if not native_enabled():
        return None
    if name in _loaded:
        return _loaded[name]
    lib: ctypes.CDLL | None = None
    compiler = _compiler()
    try:
        source = _inline_headers((_KERNELS / f"{name}.c").read_text(encoding="utf-8"))
        path = _build(name, source, compiler, openmp) if compiler else None
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
