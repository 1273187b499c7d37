"""The report check (issue 53 R3) on per-person releases (issue 56): a true report of a budgeted, consistent or
published-column release is accepted (its rows' ε are not the plain bound: levels, strings charged once), and a
forged one is refused in one line: a user's total above the budget, ε scaled with its bounds, a figure that the
published user column's rows contradict, a consistent release that claims to be plain."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hf_textdp import PrivatizerConfig, privacy_report, privatize_dataset
from hf_textdp.errors import OutputChangedError
from hf_textdp.integrations.cards import render_card
from hf_textdp.io.paths import report_path_for
from hf_textdp.users.report import section_summary
from tests.users.test_engines import SEED, _source


pytestmark = pytest.mark.usefixtures("isolated_datasets_cache")

SENSITIVE = {"epsilon": 1.0, "detectors": ["id"], "consistent": "user"}
CONFIGS: dict[str, dict[str, Any]] = {
    # a budget (levels), consistent pseudonyms and the user column kept: every check of report_rules applies
    "budget": {"user": {"column": "uid", "budget": 40.0, "keep_column": True}, "sensitive": SENSITIVE},
    # no budget: each row's ε is exactly n_o·ε_tok,o + k·ε_tok,s, k its sensitive tokens charged in it
    "consistent": {"user": {"column": "uid"}, "sensitive": SENSITIVE},
}


@pytest.fixture(scope="module")
def outputs(tiny_bert: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("users_reports")
    made = {}
    for name, kw in CONFIGS.items():
        out = folder / f"{name}.jsonl"
        cfg = PrivatizerConfig(epsilon=3.0, model=tiny_bert, **kw)
        privatize_dataset(_source(), cfg, seed=SEED, id_column="id", output_dir=out)
        made[name] = out
    return made


def _copy(out: Path, tmp_path: Path) -> Path:
    target = tmp_path / out.name
    shutil.copy(out, target)
    shutil.copy(report_path_for(out), report_path_for(target))
    return target


def _users(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """An edit of the users section whose summary is written again from the edited figures (so the summary check
    alone would not catch it)."""

    def edit(report: dict[str, Any]) -> None:
        change(report["users"])
        report["users"]["summary"] = section_summary(report["users"])

    return edit


def _scale_all(factor: float) -> Callable[[dict[str, Any]], None]:
    """ε, ε_tok, the scale and both classes' ε_tok times ``factor``: consistent in itself, not with the rows (the
    rows of a user whose cost fits at the configured ε are at the plain bound, which the lowered bound is under)."""

    def edit(r: dict[str, Any]) -> None:
        for key in ("epsilon", "epsilon_token"):
            r[key] *= factor
        r["scale"]["epsilon_diam"] *= factor
        r["sensitive"]["epsilon_token"] *= factor
        r["sensitive"]["others_epsilon_token"] *= factor

    return edit


def _lower_users(s: dict[str, Any]) -> None:
    s.update(user_epsilon_max=1.0, user_epsilon_median=1.0, share_at_budget=0.0)


FORGERIES: dict[str, tuple[str, Callable[[dict[str, Any]], None], str]] = {
    "user-total-above-budget": (
        "budget",
        _users(lambda s: s.update(user_epsilon_max=s["budget"] * 1.01)),
        r"users.user_epsilon_max is [\d.]+, above users.budget 40.0",
    ),
    "budget-lowered": (
        "budget",
        _users(lambda s: s.update(budget=s["user_epsilon_median"])),
        r"users.user_epsilon_max is [\d.]+, above users.budget",
    ),
    "user-totals-lowered": ("budget", _users(_lower_users), r"which the rows' dp_epsilon .* cannot give"),
    "epsilon-and-bounds-scaled": (
        "budget",
        _scale_all(1 / 20),
        r"row \d+'s dp_epsilon is .* where the report's bounds give",
    ),
    "epsilon-and-bounds-lowered-1-percent": (
        "budget",
        _scale_all(0.99),
        r"row \d+'s dp_epsilon is .* where the report's bounds give",
    ),
    "median-edited": (
        "budget",
        _users(lambda s: s.update(user_epsilon_median=s["user_epsilon_median"] * 0.99)),
        r"users.user_epsilon_median is .* but the published user column's rows give",
    ),
    "summary-edited": (
        "budget",
        lambda r: r["users"].update(summary=r["users"]["summary"].replace("budget 40", "budget 400")),
        r"users.summary does not state its own figures",
    ),
    "consistent-removed": (
        "consistent",
        lambda r: r["sensitive"].pop("consistent"),
        r"row \d+'s dp_epsilon is .* where the report's bounds give",
    ),
    "sensitive-bound-halved": (
        "consistent",
        lambda r: r["sensitive"].update(epsilon_token=r["sensitive"]["epsilon_token"] / 2),
        r"row \d+'s dp_epsilon is .* where the report's bounds give",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_true_per_person_report_is_consistent(name, outputs, tmp_path):
    out = _copy(outputs[name], tmp_path)
    report = privacy_report(str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    plain = [
        r["dp_sensitive_tokens"] * report["sensitive"]["epsilon_token"]
        + (r["dp_tokens"] - r["dp_sensitive_tokens"]) * report["sensitive"]["others_epsilon_token"]
        for r in rows
    ]
    # the plain rule would refuse these rows: some are charged less than every token (levels, strings once)
    assert sum(r["dp_epsilon"] < p * (1 - 1e-6) for r, p in zip(rows, plain, strict=True)) >= 5
    assert "epsilon" in str(render_card(str(out)))


@pytest.mark.slow
@pytest.mark.parametrize("case", list(FORGERIES))
def test_a_forged_per_person_report_is_refused(case, outputs, tmp_path):
    name, change, message = FORGERIES[case]
    out = _copy(outputs[name], tmp_path)
    path = report_path_for(out)
    report = json.loads(path.read_text())
    change(report)
    path.write_text(json.dumps(report))
    for read in (privacy_report, render_card):
        with pytest.raises(OutputChangedError, match=message):
            read(str(out))
