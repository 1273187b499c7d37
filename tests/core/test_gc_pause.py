"""The collector pauses of hf_textdp/utils/gc_pause.py: blocks run without cyclic collections, and a command's
imports are frozen once per process (issue 41, cold start)."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

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


def test_no_nanobind_leak_report_after_freezing_triton():
    """Issue 53: ``evaluate`` ended with ~30 lines of "nanobind: leaked …". Triton's bindings (nanobind) report
    their objects still alive at exit, and ``gc.freeze`` had put the cycles holding them where no collection goes;
    the exit hook thaws them when Triton is loaded."""
    pytest.importorskip("triton")
    code = (
        "from hf_textdp.utils.gc_pause import gc_frozen_imports\n"
        "with gc_frozen_imports():\n"
        "    import triton, triton.language\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "nanobind" not in done.stderr, done.stderr[:500]
    frozen_only = "import gc, triton, triton.language\ngc.freeze()\n"  # the report this test guards against
    assert (
        "nanobind: leaked"
        in subprocess.run([sys.executable, "-c", frozen_only], capture_output=True, text=True).stderr
    )
