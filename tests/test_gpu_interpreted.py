"""The GPU kernels' checks (tests/interpreted/check_gpu_kernels.py) under Triton's interpreter.

Triton decides at import whether its kernels are interpreted, so the checks run in a fresh process with
``TRITON_INTERPRET=1``; this test runs them and requires every one to pass (none skipped).
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
EXPECTED = 16  # philox (6), search (4 + 2 filter modes + the model check), sampler kernel (3)


@pytest.mark.slow
def test_gpu_kernels_under_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
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
