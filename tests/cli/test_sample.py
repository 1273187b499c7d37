"""``hf-textdp sample`` writes the bundled sample from any folder (issue 57 item 2: outside the repository the
quick start's ``hf_textdp/data/sample.jsonl`` did not exist). The wheel test (tests/core/test_packaging.py) runs
it from an installed wheel outside the checkout."""

from __future__ import annotations

import json
from pathlib import Path

from hf_textdp.cli import main


ROOT = Path(__file__).resolve().parents[2]


def test_sample_writes_the_packaged_rows_in_the_current_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["sample"]) == 0
    written = (tmp_path / "sample.jsonl").read_bytes()
    assert written == (ROOT / "hf_textdp" / "data" / "sample.jsonl").read_bytes()
    rows = [json.loads(line) for line in written.decode().splitlines()]
    assert len(rows) == 30 and set(rows[0]) == {"id", "text"}
    assert "wrote sample.jsonl: 30 public movie reviews" in capsys.readouterr().out
    assert main(["sample"]) == 0  # the same bytes again: nothing to refuse


def test_sample_refuses_other_data_and_other_formats(tmp_path, capsys):
    mine = tmp_path / "mine.jsonl"
    mine.write_text('{"text": "my own"}\n')
    assert main(["sample", str(mine)]) == 2
    assert "already exists and holds other data; pass --overwrite" in capsys.readouterr().err
    assert mine.read_text() == '{"text": "my own"}\n'
    assert main(["sample", str(mine), "--overwrite"]) == 0 and mine.read_text().count("\n") == 30
    assert main(["sample", str(tmp_path / "s.csv")]) == 2
    assert "output must be a .jsonl file, got" in capsys.readouterr().err


def test_the_sample_ships_in_the_package_data():
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    assert "data/*.jsonl" in data["hf_textdp"]
