"""The selective figures the README and docs/selective.md quote are results/selective's (issue 54 item 6): the
folder's README.md is what ``scripts/identifier_evidence.py --readme-only`` writes from its JSON files, and each
figure of the README's "Protecting identifiers" table and of docs/selective.md's table is the one summary.json
and attacks.json hold, to the digit shown."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results" / "selective"
#: the release labels of docs/selective.md's table and of the README's table, and the summary's keys
DOCS_LABELS = {
    "uniform": "uniform",
    "default set, others kept": "default_keep",
    "default set, others at ε = 100": "default_privatize",
    "spans (upper bound), others kept": "spans_keep",
}
README_LABELS = {
    "uniform madlib ε = 100": "uniform",
    "default set, others kept": "default_keep",
    "default set, others at ε = 100": "default_privatize",
}


def _script():
    spec = importlib.util.spec_from_file_location("identifier_evidence", ROOT / "scripts" / "identifier_evidence.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def figures() -> dict[tuple[str, str], list[str]]:
    """(set, release) -> [whole %, partially %, other tokens unchanged %, accuracy %] as the script prints them."""
    summary = json.loads((RESULTS / "summary.json").read_text(encoding="utf-8"))
    rows = _script().summary_table(summary).splitlines()[2:]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    return {(c[0], c[1]): c[2:] for c in cells}


def _table(text: str, header: str) -> list[list[str]]:
    """The rows of the markdown table whose header line starts with ``header``, as lists of cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    out = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        out.append([c.strip() for c in line.strip().strip("|").split("|")])
    return out


def test_the_folder_readme_is_the_scripts_output():
    script = _script()
    summary = json.loads((RESULTS / "summary.json").read_text(encoding="utf-8"))
    assert (RESULTS / "README.md").read_text(encoding="utf-8") == script.readme(summary, script._extras(RESULTS))


def test_docs_selective_quotes_the_summary(figures):
    rows = _table((ROOT / "docs" / "selective.md").read_text(encoding="utf-8"), "| set | release | survived whole")
    quoted = {(r[0], DOCS_LABELS[r[1]]): r[2:] for r in rows}
    assert quoted == figures


def test_readme_quotes_the_held_out_summary_and_the_attack(figures):
    attacks = json.loads((RESULTS / "attacks.json").read_text(encoding="utf-8"))["releases"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = _table(readme, "| release | survived whole")
    assert [r[0] for r in rows] == list(README_LABELS)
    for label, *cells in rows:
        release = README_LABELS[label]
        bayes = f"{attacks[release]['bayes']['tokens']['top1']:.1f}"
        assert [c.removesuffix(" %") for c in cells] == [*figures["heldout", release][:3], bayes], label
    summary = json.loads((RESULTS / "summary.json").read_text(encoding="utf-8"))["sets"]["heldout"]
    said = re.search(r"On (\d+) held-out\s+MR rows with (\d+) generated identifiers", readme)
    assert said is not None and said.groups() == (str(summary["rows"]), str(summary["identifiers"]))


def test_docs_selective_quotes_the_timing():
    timing = json.loads((RESULTS / "timing.json").read_text(encoding="utf-8"))
    docs = (ROOT / "docs" / "selective.md").read_text(encoding="utf-8")
    rows = _table(docs, "| release | num_proc 1 | num_proc 2 |")
    assert rows == [
        ["madlib, every token", f"{timing['madlib_num_proc_1_s']} s", f"{timing['madlib_num_proc_2_s']} s"],
        [
            "default set (ε_s = 1), others at ε = 100",
            f"{timing['default_set_num_proc_1_s']} s",
            f"{timing['default_set_num_proc_2_s']} s",
        ],
    ]
    ner = next(s for name, s in timing["detection_alone_s"].items() if name.startswith("spacy:"))
    words = " ".join(docs.split())
    assert f"detection alone takes {timing['detection_alone_total_s']} s of it, {ner} s spaCy's NER" in words
    before, after = timing["loadavg_before"][0], timing["loadavg_after"][0]
    assert f"load average {before:g} before, {after:g} after" in words
