"""``report``, ``card`` and ``privacy_report(path)`` refuse a report edited by hand (issue 53, R3): its ε_tok
against ε and the model's diameter, each row's ε against its tokens, its classes against the output's columns."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hf_textdp import PrivatizerConfig, privacy_report, privatize_dataset
from hf_textdp.errors import OutputChangedError
from hf_textdp.integrations.cards import render_card
from hf_textdp.io.paths import report_path_for
from tests.utils import CLI, error_lines, write_jsonl


pytestmark = pytest.mark.usefixtures("isolated_datasets_cache")
SEED = 2**40 + 5
TEXTS = [f"write to user{i}@mail{i}.example about the film {i}" for i in range(12)]
SELECTIVE = {"epsilon": 1.0, "detectors": ["email"]}


def _output(tmp_path: Path, model: str, name: str, sensitive: dict[str, Any] | None = None) -> Path:
    src = write_jsonl(tmp_path / "in.jsonl", TEXTS, label=list(range(len(TEXTS))))
    out = tmp_path / name
    privatize_dataset(
        str(src), PrivatizerConfig(epsilon=10.0, model=model, sensitive=sensitive), seed=SEED, output_dir=out
    )
    return out


def _edit(out: Path, change: Callable[[dict[str, Any]], None]) -> None:
    path = report_path_for(out)
    report = json.loads(path.read_text())
    change(report)
    path.write_text(json.dumps(report))


@pytest.mark.parametrize(
    "name", ["o.jsonl", "o.csv", "o.parquet", "folder"], ids=["jsonl", "csv", "parquet", "save_to_disk"]
)
@pytest.mark.parametrize("sensitive", [None, SELECTIVE, SELECTIVE | {"others": "keep"}], ids=["plain", "priv", "keep"])
def test_a_true_report_is_consistent(name, sensitive, tiny_bert, tmp_path):
    out = _output(tmp_path, tiny_bert, name, sensitive)
    assert privacy_report(str(out))["epsilon"] == 10.0
    assert "epsilon" in str(render_card(str(out)))


def test_a_selective_release_whose_detectors_found_nothing_is_consistent(tiny_bert, tmp_path):
    """No identifier found: the totals leave ``sensitive_tokens`` out and every row's ``dp_sensitive_tokens`` is 0
    (the check read the missing total as a contradiction, issue 56's engine tests on main)."""
    out = _output(tmp_path, tiny_bert, "o.jsonl", {"epsilon": 1.0, "detectors": ["card"]})
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["dp_sensitive_tokens"] for r in rows} == {0}
    assert "sensitive_tokens" not in json.loads(report_path_for(out).read_text())["totals"]
    assert privacy_report(str(out))["epsilon"] == 10.0


def _scale_both(r: dict[str, Any]) -> None:
    """ε and ε_tok (and the scale) divided by 20 together: consistent in itself, not with the rows."""
    r["epsilon"] /= 20
    r["epsilon_token"] /= 20
    r["scale"]["epsilon_diam"] /= 20


FORGERIES: dict[str, tuple[dict[str, Any] | None, Callable[[dict[str, Any]], None], str]] = {
    "epsilon-10-to-0.5": (None, lambda r: r.update(epsilon=0.5), r"epsilon_token .* is more than epsilon 0.5 ×"),
    "epsilon-and-bound-scaled": (None, _scale_both, r"row 0's dp_epsilon is .* where the report's bounds give"),
    "rows-changed": (None, lambda r: r["totals"].update(rows=3), r"totals.rows is 3 but the output's rows give 12"),
    "keep-to-privatize": (
        SELECTIVE | {"others": "keep"},
        lambda r: r["sensitive"].update(others="privatize"),
        r"sensitive.others is 'privatize' but totals.kept_other_tokens is \d+",
    ),
    "selective-section-added": (
        None,
        lambda r: r.update(
            sensitive={"epsilon": 1.0, "others": "privatize", "others_epsilon_token": r["epsilon_token"]}
        ),
        r"the report is selective but the output has no dp_sensitive_tokens",
    ),
}


@pytest.mark.parametrize("case", list(FORGERIES))
def test_a_forged_report_is_refused(case, tiny_bert, tmp_path):
    sensitive, change, message = FORGERIES[case]
    out = _output(tmp_path, tiny_bert, "o.jsonl", sensitive)
    _edit(out, change)
    for read in (privacy_report, render_card):
        with pytest.raises(OutputChangedError, match=message):
            read(str(out))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for command in ("report", "card"):
        done = subprocess.run([*CLI, command, str(out)], capture_output=True, text=True, env=env)
        assert done.returncode == 2 and done.stdout == "", done.stderr[-1000:]
        (line,) = error_lines(done.stderr)
        assert "its privacy report contradicts itself or the output" in line and "privatize the input again" in line
        assert "user0" not in done.stderr and "mail0" not in done.stderr  # figures only, never row text
