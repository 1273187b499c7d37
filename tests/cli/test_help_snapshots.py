"""Every ``--help`` text is the snapshot under tests/cli/help/ (issue 38: the CLI's split into one module
per command changes no help text). Regenerate a snapshot only for an intended CLI change:
``COLUMNS=100 hf-textdp COMMAND --help > tests/cli/help/COMMAND.txt``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


HELP = Path(__file__).parent / "help"
COMMANDS = [
    "privatize",
    "calibrate",
    "report",
    "audit",
    "env",
    "evaluate",
    "attack",
    "card",
    "push",
    "bench",
    "sample",
]

# one fresh interpreter (no mechanism a test registered), every help printed through main() as `--help` does
_SCRIPT = """
import contextlib, io, json, sys
from hf_textdp.cli import main
out = {}
for name in json.loads(sys.argv[1]):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            main(([] if name == "hf-textdp" else [name]) + ["--help"])
        except SystemExit as exc:
            assert exc.code == 0, (name, exc.code)
    out[name] = buf.getvalue()
print(json.dumps(out))
"""


def _help_texts(columns: int) -> dict[str, str]:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "COLUMNS": str(columns), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(root)}
    env.pop("LINES", None)
    names = ["hf-textdp", *COMMANDS]
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(names)],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def live_help() -> dict[str, str]:
    return _help_texts(100)


def test_every_command_has_a_snapshot():
    assert sorted(p.stem for p in HELP.glob("*.txt")) == sorted(["hf-textdp", *COMMANDS])


@pytest.mark.parametrize("name", ["hf-textdp", *COMMANDS])
def test_help_text_is_the_snapshot(live_help, name):
    assert live_help[name] == (HELP / f"{name}.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize("columns", [80, 100, 250])
def test_no_help_line_is_wider_than_100_characters(columns):
    """Issue 57 item 10: ``privatize --help`` had 218-character lines (its epilog), ``attack`` 294 (its description),
    and any help grew with the terminal."""
    for name, text in _help_texts(columns).items():
        widest = max(text.splitlines(), key=len)
        assert len(widest) <= 100, (name, columns, len(widest), widest)


def test_dash_capital_v_prints_the_version(capsys):
    from hf_textdp import __version__
    from hf_textdp.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["-V"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"hf-textdp {__version__}"
