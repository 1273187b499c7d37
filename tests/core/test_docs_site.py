"""The documentation site builds with warnings as errors (``mkdocs build --strict``, issue 42).

mkdocs-material and mkdocstrings[python] are the ``docs`` extra; without them the test is skipped. The API
reference (docs/api.md) is generated from the docstrings of the public names, so a broken docstring, a
page missing from the nav or a broken link between pages fails here.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]


#: the widest code line the site's column shows whole in a 1280-pixel window is about 115 characters
#: (docs/stylesheets/extra.css widens it; screenshots in issue 57's note): code lines stay within 100
CODE_WIDTH = 100
#: pages whose code blocks may scroll: docs/performance.md quotes `hf-textdp bench`'s tables as printed
SCROLLING_PAGES = {"performance"}


def _build(config_dir: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=config_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs", reason="the docs extra (pip install -e '.[docs]')")
    pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra (pip install -e '.[docs]')")
    pytest.importorskip("material", reason="the docs extra (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    res = _build(ROOT, out)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "WARNING" not in res.stderr
    return out


@pytest.mark.slow
def test_mkdocs_build_strict(site):
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("PrivatizerConfig", "Privatizer", "privatize_dataset", "privacy_report", "HfTextDPError"):
        assert f'id="hf_textdp.{name}"' in api, name
    assert (site / "results" / "index.html").is_file()
    assert (site / "stylesheets" / "extra.css").is_file()


@pytest.mark.slow
def test_no_code_line_in_the_built_pages_is_wider_than_the_column(site):
    """Issue 57 item 7: code was written ~118 characters wide in a ~75-character column, so the selective
    page's ``"others": "keep"`` was off-screen."""
    widest: list[tuple[int, str, str]] = []
    for page in sorted(site.rglob("index.html")):
        name = page.parent.relative_to(site).as_posix()
        if name in SCROLLING_PAGES:
            continue
        for block in re.findall(r"<pre[^>]*>(.*?)</pre>", page.read_text(encoding="utf-8"), re.S):
            for line in html.unescape(re.sub(r"<[^>]+>", "", block)).splitlines():
                widest.append((len(line), name, line))
    assert len(widest) > 200  # every page's code was read
    assert max(widest)[0] <= CODE_WIDTH, sorted(widest)[-5:]


@pytest.mark.slow
def test_a_dead_link_fails_the_strict_build(tmp_path):
    """The site's link checks (mkdocs.yml `validation`) turn a link to a missing folder, which mkdocs only
    notes by default (`../benchmarks/results/` was one), into a warning, so --strict fails."""
    yaml = pytest.importorskip("yaml")
    pytest.importorskip("mkdocs", reason="the docs extra (pip install -e '.[docs]')")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8").replace("!!python", "#"))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [the results](../benchmarks/results/).\n")
    mini = {"site_name": "dead-link check", "docs_dir": "docs", "validation": config["validation"]}
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(mini))
    res = _build(tmp_path, tmp_path / "site")
    assert res.returncode != 0 and "benchmarks/results" in res.stderr


def test_every_docs_page_is_in_the_nav():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8").replace("!!python", "#"))

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for v in node.values():
                yield from pages(v)
        elif isinstance(node, list):
            for v in node:
                yield from pages(v)

    listed = set(pages(config["nav"]))
    on_disk = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk == listed
