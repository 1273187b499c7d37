"""The collector pauses of hf_textdp/utils/gc_pause.py: blocks run without cyclic collections, and a command's
imports are frozen once per process (issue 41, cold start)."""

from __future__ import annotations

import gc
import subprocess
import sys

from hf_textdp.utils.gc_pause import gc_frozen_imports, gc_paused


def test_gc_paused_restores_the_collector() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # restored as it was: off
    finally:
        gc.enable()


_FREEZE = """
import gc
from hf_textdp.utils.gc_pause import gc_frozen_imports
with gc_frozen_imports():
    assert not gc.isenabled()
    import json, decimal  # noqa: F401 - something to import
first = gc.get_freeze_count()
junk = [[i] for i in range(5000)]
with gc_frozen_imports():
    pass
print(gc.isenabled(), first > 0, gc.get_freeze_count() == first)
"""


def test_gc_frozen_imports_freezes_once_per_process() -> None:
    # in a fresh interpreter: the first block freezes what exists, a second one (main() called again) does not
    out = subprocess.run([sys.executable, "-c", _FREEZE], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["True", "True", "True"]
    assert gc.isenabled()
    with gc_frozen_imports():
        assert not gc.isenabled()
    assert gc.isenabled()
