"""One ε story, in the same words everywhere (issue 57 item 6): the ``privatize`` summary, ``hf-textdp report``
and the dataset card state the user's ε, the per-token bound with its factor (ε_tok = ε × diameter for madlib)
and the row bound, each labelled, from one function (``integrations/report_text.epsilon_lines``)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from hf_textdp.cli import main
from hf_textdp.integrations.cards import dataset_card
from hf_textdp.integrations.report_text import EPSILON_LABELS, epsilon_lines
from hf_textdp.io.paths import report_path_for
from tests.utils import write_jsonl


TEXTS = ["the movie was good", "a dull and tedious film with a clumsy plot", "fine"]


@pytest.fixture(scope="module")
def outputs(tiny_bert, tmp_path_factory):
    """mechanism -> (output, the lines privatize printed, its report)."""
    folder = tmp_path_factory.mktemp("story")
    src = write_jsonl(folder / "in.jsonl", TEXTS)
    made = {}
    for mechanism in ("madlib", "laplace", "tem"):
        out = folder / f"{mechanism}.jsonl"
        args = ["privatize", str(src), str(out), "--epsilon", "3", "--model", tiny_bert, "--mechanism", mechanism]
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(args) == 0
        made[mechanism] = (out, buf.getvalue().splitlines(), json.loads(report_path_for(out).read_text("utf-8")))
    return made


@pytest.mark.parametrize("mechanism", ["madlib", "laplace", "tem"])
def test_summary_report_and_card_say_the_same_three_labelled_epsilons(mechanism, outputs, capsys):
    out, summary, report = outputs[mechanism]
    lines = epsilon_lines(report)
    assert [x.symbol for x in lines] == ["ε", "ε_tok", "dp_epsilon"]
    assert [x.label for x in lines] == list(EPSILON_LABELS.values())
    # the summary: a first line of counts with no ε on it, then the three lines, then where the report is
    assert "epsilon" not in summary[0] and "ε" not in summary[0]
    story = [s.strip() for s in summary[1:4]]
    assert [s.split()[0] for s in story] == ["ε", "ε_tok", "dp_epsilon"]
    assert summary[4].startswith(f"report: {report_path_for(out)}")
    # the report prints the very same lines; the card the same words
    assert main(["report", str(out)]) == 0
    printed = [s.strip() for s in capsys.readouterr().out.splitlines()]
    assert all(s in printed for s in story)
    card = str(dataset_card(report))
    for x in lines:
        assert f"`{x.symbol} {x.value}`: {x.label}" + (f" = {x.how}" if x.how else "") in card


def test_the_numbers_are_the_reports_own(outputs):
    _, _, report = outputs["madlib"]
    eps, tok, totals = report["epsilon"], report["epsilon_token"], report["totals"]
    mine, token, row = epsilon_lines(report)
    assert mine.value == "= 3"
    assert token.value == f"= {tok:.4g}" and token.how.startswith(f"ε × diameter {tok / eps:.4g}")
    assert tok / eps == pytest.approx(max(c["diam"] for c in report["candidate_set"]["per_class"]), rel=1e-12)
    assert row.value == f"≤ {totals['max_row_dp_epsilon']:.4g}"
    assert row.how.startswith(f"{totals['max_row_dp_tokens']} tokens × ε_tok, the largest row")
    assert totals["max_row_dp_epsilon"] == pytest.approx(totals["max_row_dp_tokens"] * tok, rel=1e-12)


def test_a_plain_dp_mechanism_says_its_factor_is_one(outputs):
    _, _, report = outputs["laplace"]
    _, token, _ = epsilon_lines(report)
    assert report["epsilon_token"] == report["epsilon"] and token.how.startswith("ε (the noise is calibrated")


def test_no_rows_and_no_guarantee_are_said_plainly():
    base = {"epsilon": 2.0, "guarantee": "none", "epsilon_token": None, "totals": {"rows": 0}}
    assert [x.value for x in epsilon_lines(base)] == ["= 2", "none", "null"]
    unbounded = {"epsilon": 2.0, "guarantee": "umldp", "epsilon_token": 5.0, "totals": {"rows": 3}}
    assert epsilon_lines(unbounded)[2].how.startswith("none: the per-token numbers do not bound a row")


@pytest.mark.parametrize("others", ["privatize", "keep"])
def test_selective_release_states_each_class(others, tiny_bert, tmp_path, capsys):
    """Selective privatization (selective.md §6): the sensitive positions' ε_s and ε_tok,s, then the others' ε and
    ε_tok, or with others="keep" that they are unprotected; the config's ε is then named nowhere."""
    src = write_jsonl(tmp_path / "in.jsonl", ["mail ann@example.com now", "the movie was good"])
    out = tmp_path / "out.jsonl"
    args = ["privatize", str(src), str(out), "--epsilon", "3", "--model", tiny_bert, "--sensitive-epsilon", "0.5"]
    assert main([*args, "--sensitive-detectors", "email", "--others", others]) == 0
    summary = capsys.readouterr().out
    report = json.loads(report_path_for(out).read_text("utf-8"))
    lines = epsilon_lines(report)
    sens = report["sensitive"]
    assert [(x.symbol, x.value) for x in lines[:2]] == [
        ("ε_s", "= 0.5"),
        ("ε_tok,s", f"= {sens['epsilon_token']:.4g}"),
    ]
    assert lines[1].how.startswith(f"ε_s × diameter {sens['epsilon_token'] / 0.5:.4g}")
    if others == "keep":
        assert [x.symbol for x in lines] == ["ε_s", "ε_tok,s", "others", "dp_epsilon"] and lines[3].value == "null"
        assert "= 3 " not in summary and "ε = 3" not in summary
    else:
        assert [x.symbol for x in lines] == ["ε_s", "ε_tok,s", "ε", "ε_tok", "dp_epsilon"]
        assert lines[2].value == "= 3" and lines[3].value == f"= {report['epsilon_token']:.4g}"
    for x in lines:  # the summary prints each of them
        assert f"{x.symbol} {x.value}" in summary
