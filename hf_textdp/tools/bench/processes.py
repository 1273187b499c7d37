"""What the bench measures in fresh processes and in memory: peak RSS, the CLI's time to first output and
whole-file peak RSS, and a vector file's read, parse and cached load."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ...io import vectors


__all__ = []


class _RssSampler:
    """Peak resident set size of this process while a block runs, sampled every 20 ms (Linux /proc; else ru_maxrss)."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._paused = False
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def current() -> int:
        try:
            with open("/proc/self/statm", encoding="ascii") as fh:
                return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return _max_rss_bytes()

    def _sample(self) -> None:
        with self._lock:
            if not self._paused:
                self.peak = max(self.peak, self.current())

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self._sample()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Leave a block out of the peak (the bound products: their operands are not the case's memory)."""
        self._sample()
        with self._lock:
            self._paused = True
        try:
            yield
        finally:
            with self._lock:
                self._paused = False

    def __enter__(self) -> _RssSampler:
        self.peak = self.current()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def _max_rss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # macOS reports bytes, Linux KiB


def _mb(nbytes: float) -> float:
    return round(nbytes / 2**20, 1)


def _cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("HF_DATASETS_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    return env


#: ``python -c _LAUNCHER PEAK_FILE ARGS``: runs ``hf-textdp ARGS`` and, at exit, writes the process's own
#: peak RSS to PEAK_FILE. It reads VmHWM, the high-water mark of the memory map, which exec starts
#: empty. ru_maxrss cannot serve (getrusage of the child itself, wait4 on its pid, or RUSAGE_CHILDREN):
#: on Linux, exec folds the high-water mark of the map it replaces — the bench's own, through
#: subprocess's vfork — into the child's ru_maxrss, so every child would report at least the bench's peak.
_LAUNCHER = """\
import atexit, json, resource, runpy, sys
peak_file = sys.argv.pop(1)
def _write_peak():
    try:
        with open('/proc/self/status', encoding='ascii') as fh:
            kib = next(int(line.split()[1]) for line in fh if line.startswith('VmHWM:'))
        peak, source = kib * 1024, 'VmHWM'
    except (OSError, StopIteration, ValueError, IndexError):
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak, source = (rss if sys.platform == 'darwin' else rss * 1024), 'ru_maxrss'
    with open(peak_file, 'w', encoding='utf-8') as fh:
        json.dump({'peak_rss_bytes': peak, 'source': source}, fh)
atexit.register(_write_peak)
runpy.run_module('hf_textdp.cli', run_name='__main__', alter_sys=True)
"""


def _run_cli(args: list[str], timeout: float) -> dict[str, Any]:
    """Run ``hf-textdp ARGS`` in a fresh interpreter: wall seconds, exit code and the child's own peak RSS.

    ``peak_rss_mb`` is ``None`` when the child did not reach its exit handlers (killed, timed out);
    ``peak_rss_source`` says how it was read (``VmHWM`` on Linux, else the child's ru_maxrss).
    """
    with tempfile.TemporaryDirectory(prefix="hf_textdp_bench_rss_") as tmp:
        peak_file = Path(tmp) / "peak.json"
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(peak_file), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_cli_env(),
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        wall = time.perf_counter() - t0
        try:
            peak: dict[str, Any] | None = json.loads(peak_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            peak = None
    result: dict[str, Any] = {
        "seconds": wall,
        "returncode": proc.returncode,
        "peak_rss_mb": None if peak is None else _mb(peak["peak_rss_bytes"]),
        "peak_rss_source": None if peak is None else peak["source"],
    }
    if proc.returncode != 0:
        result["error"] = (stderr.decode("utf-8", "replace").strip().splitlines() or ["?"])[-1][:300]
    else:
        result["output"] = stdout.decode("utf-8", "replace").strip()[:300]
    return result


def _vector_load(path: Path) -> dict[str, Any]:
    """Reading a vector file once (bytes), parsing it (cache off) and loading it from the parse cache."""
    t0 = time.perf_counter()
    path.read_bytes()
    read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    vec = vectors.read_vectors(path, cache=False)
    parse_s = time.perf_counter() - t0
    vectors.read_vectors(path, cache=True)  # make sure the cache holds it
    t0 = time.perf_counter()
    vectors.read_vectors(path, cache=True)
    cached_s = time.perf_counter() - t0
    return {
        "file_mb": _mb(path.stat().st_size),
        "rows": len(vec.words),
        "d": int(vec.matrix.shape[1]),
        "read_s": read_s,
        "parse_s": parse_s,
        "cached_s": cached_s,
    }


def _privatize_cli(
    rows: Sequence[str] | Path, model: str, device: str, epsilon: float, timeout: float
) -> dict[str, Any]:
    """``hf-textdp privatize`` of ``rows`` (or a .jsonl file) in a fresh interpreter (seed 1), as :func:`_run_cli`."""
    with tempfile.TemporaryDirectory(prefix="hf_textdp_bench_") as tmp:
        src = rows if isinstance(rows, Path) else Path(tmp) / "in.jsonl"
        if not isinstance(rows, Path):
            src.write_text("".join(json.dumps({"text": t}) + "\n" for t in rows), encoding="utf-8")
        argv = ["privatize", str(src), str(Path(tmp) / "out.jsonl"), "--epsilon", str(epsilon), "--model", model]
        # public benchmark text with a public seed: not a privacy key
        return _run_cli([*argv, "--device", device, "--seed", "1", "--allow-weak-seed"], timeout=timeout)
