"""Issue 42 §5: progress bars under datasets' switches, audit's summary and --json, evaluate's last lines,
push's token from the environment (the flag warns), and the help strings filled."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hf_textdp.utils.progress import counted, progress_bar
from hf_textdp.utils.table import format_table


AUDIT = ["audit", "--epsilon", "1", "--n-select", "200", "--n-estimate", "500", "--seed", "7"]


def test_progress_bar_follows_datasets_switch(capsys: pytest.CaptureFixture[str]) -> None:
    import datasets

    datasets.disable_progress_bars()
    try:
        with progress_bar(total=3, desc="quiet-bar") as bar:
            bar.update(3)
        assert "quiet-bar" not in capsys.readouterr().err
    finally:
        datasets.enable_progress_bars()
    bar = progress_bar(total=3, desc="loud-bar")
    bar.update(3)
    bar.close()
    assert "loud-bar" in capsys.readouterr().err
    bar = progress_bar(total=3, desc="off-bar", enabled=False)
    bar.update(3)
    bar.close()
    assert "off-bar" not in capsys.readouterr().err


def test_counted_advances_the_bar() -> None:
    class Bar:
        n = 0

        def update(self, k: int) -> None:
            self.n += k

    bar = Bar()
    double = counted(lambda x: 2 * x, bar)
    assert [double(1), double(2)] == [2, 4]
    assert bar.n == 2


def test_format_table_pads_columns() -> None:
    lines = format_table(("name", "value"), [("a", "1.5"), ("long-name", "10")], right=[1], indent="  ")
    assert lines == ["  name       value", "  a            1.5", "  long-name     10"]


def test_audit_prints_a_summary_and_json_on_request(line_vocab: str, capsys: pytest.CaptureFixture[str]) -> None:
    from hf_textdp.cli import main

    assert main([*AUDIT, "--model", line_vocab]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].startswith("audit of ") and ": PASS, worst LCB/claim " in lines[0] and "α = 0.001" in lines[0]
    assert "pair w/w'" in lines[2] and "claim" in lines[2] and "LCB ln ratio" in lines[2]
    body = lines[3:-1]
    assert body and all(line.rstrip().endswith("pass") for line in body)
    assert lines[-1] == "  (raw result: --json)"
    assert len(lines) < 20
    assert "audit" in err  # the progress bar, on stderr
    assert main([*AUDIT, "--model", line_vocab, "--json"]) == 0
    raw = json.loads(capsys.readouterr().out)
    assert raw["passed"] is True and len(raw["rows"]) == len(body)


def test_audit_bar_silenced_by_datasets_env(line_vocab: str, tmp_path: Path) -> None:
    import os
    import subprocess

    env = {**os.environ, "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([*sys.path[:0], str(Path(__file__).parents[2]), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "hf_textdp.cli", *AUDIT, "--model", line_vocab]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "pair/s" not in proc.stderr and "audit:" not in proc.stderr
    assert proc.stdout.startswith("audit of ")


def test_push_token_flag_warns(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from hf_textdp.cli import main
    from hf_textdp.integrations import hub

    seen: list[object] = []
    monkeypatch.setattr(hub, "push_to_hub", lambda *a, **k: seen.append(k["token"]) or "https://hub/x")
    assert main(["push", "out", "me/x"]) == 0
    assert seen == [None]  # huggingface_hub resolves HF_TOKEN / the login itself
    assert "warning" not in capsys.readouterr().err
    assert main(["push", "out", "me/x", "--token", "hf_abc"]) == 0
    assert seen[-1] == "hf_abc"
    err = capsys.readouterr().err
    assert "shell history" in err and "HF_TOKEN" in err and "hf_abc" not in err


@pytest.mark.parametrize("has_matplotlib", [True, False])
def test_evaluate_says_plots_only_with_matplotlib(
    has_matplotlib: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    from hf_textdp.cli import main
    from hf_textdp.evaluation import recipe

    monkeypatch.setattr(recipe, "run_recipes", lambda *a, **k: [(tmp_path / "r", [tmp_path / "r" / "a.json"])])
    if not has_matplotlib:
        monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["evaluate", "x.yaml", "--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert ("and plots" in out) is has_matplotlib
    assert ("no plots" in out) is not has_matplotlib


HELPS = {
    "bench": ["rows of the text to privatize", "privacy parameter per token", "rows per privatize() call"],
    "push": ["as namespace/name", "create the repository private", "lands in the shell history"],
}


@pytest.mark.parametrize("command", sorted(HELPS))
def test_help_gaps_filled(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    from hf_textdp.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for phrase in HELPS[command]:
        assert phrase in text
