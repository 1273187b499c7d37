"""The GPU kernels' checks (tests/kernels/interpreted/check_gpu_kernels.py) under Triton's interpreter.

Triton decides at import whether its kernels are interpreted, so the checks run in a fresh process with
``TRITON_INTERPRET=1`` (and ``HF_TEXTDP_TRITON=interpret``, the package's opt-in); this test runs them
and requires every one to pass (none skipped).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


pytest.importorskip("triton")

CHECKS = Path(__file__).parent / "interpreted" / "check_gpu_kernels.py"
EXPECTED = 25  # philox (6), search (6 + 2 filter modes + the model check), sampler kernels (7), noise (3)


@pytest.mark.slow
def test_gpu_kernels_under_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "HF_TEXTDP_TRITON": "interpret", "HF_HUB_OFFLINE": "1"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(CHECKS), "-q", "-p", "no:cacheprovider", "-W", "error"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    m = re.search(r"(\d+) passed", proc.stdout)
    assert m and int(m.group(1)) == EXPECTED and "skipped" not in proc.stdout.splitlines()[-1], tail


def test_the_interpreter_alone_does_not_reroute_the_cpu_path(monkeypatch):
    """``TRITON_INTERPRET=1`` set for someone's own kernels leaves the package's CPU and GPU paths alone."""
    from hf_textdp.gpu import triton_ready

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("HF_TEXTDP_TRITON", raising=False)
    assert not triton_ready("cpu") and not triton_ready("cuda")
    monkeypatch.setenv("HF_TEXTDP_TRITON", "interpret")
    assert triton_ready("cpu") and not triton_ready("cuda")
    monkeypatch.setenv("HF_TEXTDP_TRITON", "0")
    assert not triton_ready("cpu")
