"""The work folder's advisory lock (io/files.py, ``filelock``): exclusive, freed on release and on death."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from hf_textdp.io.files import release_lock, try_lock


def test_lock_is_exclusive_and_released(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    first = try_lock(path)
    assert first is not None
    assert try_lock(path) is None  # held (even by this process, through another handle)
    done = threading.Thread(target=release_lock, args=(first,))  # any thread may release it
    done.start()
    done.join()
    again = try_lock(path)
    assert again is not None
    release_lock(again)
    release_lock(None)


def test_lock_dies_with_a_killed_process(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    code = (
        "import os, signal, sys; from hf_textdp.io.files import try_lock; "
        f"assert try_lock({str(path)!r}) is not None; print('held', flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout == "held\n" and proc.returncode == -9
    lock = try_lock(path)
    assert lock is not None  # no stale lock left behind
    release_lock(lock)
