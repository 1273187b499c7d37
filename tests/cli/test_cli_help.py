"""CLI help shows every option's default and allowed values; report/calibrate print summaries (issue 18)."""

from __future__ import annotations

import json

import pytest

from hf_textdp import PrivatizerConfig, privatize_dataset
from hf_textdp.cli import build_parser, main
from hf_textdp.mechanisms import list_mechanisms
from hf_textdp.postprocess import list_postprocess


def _subparser(name):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices[name]


@pytest.mark.parametrize("command", ["privatize", "report", "calibrate", "audit"])
def test_every_option_shows_its_default(command):
    p = _subparser(command)
    text = p.format_help()
    for action in p._actions:
        if not action.option_strings or action.dest == "help":
            continue
        shown = p._get_formatter()._get_help_string(action) % {"default": action.default}
        assert "default" in shown or "required" in shown, (command, action.option_strings, shown)
    if command != "report":
        for name in list_mechanisms():
            assert name in text
        for name in list_postprocess():
            assert name in text
        assert 'madlib: bound="none"' in text  # the options of each mechanism with their defaults


@pytest.mark.parametrize("command", ["privatize", "calibrate", "audit", "attack"])
def test_delta_help_shows_the_default_of_the_mechanisms_using_one(command):
    """--delta is not 'default: none': gaussian, privemb and truncated_laplace take their DEFAULT_DELTA."""
    from hf_textdp.mechanisms import get_mechanism_class

    action = next(a for a in _subparser(command)._actions if a.dest == "delta")
    users = [get_mechanism_class(n) for n in list_mechanisms() if get_mechanism_class(n).USES_DELTA]
    assert {c.name for c in users} >= {"gaussian", "privemb", "truncated_laplace"}
    assert "(default: none)" not in action.help
    for cls in users:
        assert cls.name in action.help and f"{cls.DEFAULT_DELTA:g}" in action.help


@pytest.fixture
def saved(tmp_path, tiny_bert):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": f"hello world {i}"}) + "\n" for i in range(5)))
    out = tmp_path / "out.jsonl"
    privatize_dataset(src, PrivatizerConfig(epsilon=2.0, model=tiny_bert), output_dir=out)
    return out


def test_report_prints_a_summary_and_json_on_request(saved, capsys):
    assert main(["report", str(saved)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"Privacy report for {saved}")
    assert "metric DP in the Euclidean distance" in text and "per-token bound = ε × diameter" in text
    assert "row bound = " in text and "tokens × ε_tok, the largest row" in text and "not covered:" in text
    assert "kept:        not recorded" in text
    assert main(["report", str(saved), "--json"]) == 0
    raw = json.loads(capsys.readouterr().out)
    assert raw["guarantee"] == "metric_dp" and raw["totals"]["rows"] == 5


def test_calibrate_summary_json_and_plot(tiny_bert, tmp_path, capsys):
    args = ["calibrate", "--model", tiny_bert, "--epsilons", "1,5,50"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert text.startswith("Calibration of madlib + nearest") and "replaced" in text and "kept" in text
    assert main([*args, "--json"]) == 0
    raw = json.loads(capsys.readouterr().out)
    assert [r["epsilon"] for r in raw["rates"]] == [1.0, 5.0, 50.0]
    plot = tmp_path / "rates.png"
    assert main([*args, "--plot", str(plot)]) == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_calibrate_plot_without_matplotlib(tiny_bert, tmp_path, capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_mpl(name, *a, **k):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    code = main(["calibrate", "--model", tiny_bert, "--epsilons", "1", "--plot", str(tmp_path / "x.png")])
    assert code == 2
    assert "--plot needs matplotlib: pip install 'hf-textdp[eval]'" in capsys.readouterr().err


def test_calibrate_plot_format_checked_before_the_work(tmp_path, capsys, monkeypatch):
    """An extension matplotlib cannot write fails up front, naming --plot and the formats allowed."""
    import importlib

    def no_work(**kwargs):
        raise AssertionError("calibrate ran before --plot was checked")

    calibrate_module = importlib.import_module(
        "hf_textdp.tools.calibrate"
    )  # the package exports a function of that name
    monkeypatch.setattr(calibrate_module, "calibrate", no_work)
    for name in ("rates.txt", "rates"):
        assert main(["calibrate", "--epsilons", "1", "--plot", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert (
            err.startswith("hf-textdp: error: --plot must end in a format matplotlib writes (")
            and err.count("\n") == 1
        )
        assert ".png" in err and ".svg" in err and f"got '{tmp_path / name}'" in err


@pytest.mark.parametrize("command", ["env", "card", "evaluate", "push", "bench"])
def test_every_command_describes_itself(command):
    assert _subparser(command).description


def test_debug_after_the_command_shows_the_traceback(tmp_path):
    """``--debug`` works after the command too; without it an error stays one line."""
    from hf_textdp.errors import HfTextDPError

    missing = str(tmp_path / "missing")
    assert main(["report", missing]) == 2
    with pytest.raises(HfTextDPError):
        main(["report", missing, "--debug"])
    with pytest.raises(HfTextDPError):
        main(["--debug", "report", missing])
