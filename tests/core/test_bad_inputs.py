"""Bad inputs give one line naming the file, row or parameter and what is allowed (issue 18)."""

from __future__ import annotations

import json
import logging
import os
import subprocess

import pytest

from hf_textdp import HfTextDPError, PrivatizerConfig, privatize_dataset
from hf_textdp.errors import InputFileError, OutputNotWritableError
from hf_textdp.io.sources import read_file_in_memory
from hf_textdp.run.totals import ROW_EPSILON_OUTLIER_MULTIPLE
from tests.utils import CLI


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("empty.jsonl", b"", r"input file '.*empty\.jsonl' is empty; allowed: a \.jsonl file with one JSON object"),
        ("blank.jsonl", b"\n  \n", r"input file '.*blank\.jsonl' is empty"),
        ("empty.csv", b"", r"input file '.*empty\.csv' is empty"),
        ("header.csv", b"text,label\n", r"input file '.*header\.csv' has no rows"),
        ("empty.parquet", b"", r"input file '.*empty\.parquet' is empty \(0 bytes\)"),
        (
            "latin1.jsonl",
            b'{"text": "ok"}\n{"text": "fine"}\n{"text": "caf\xe9"}\n',
            r"input file '.*latin1\.jsonl', line 3, byte 14: 0xe9 is not valid UTF-8",
        ),
        ("latin1.csv", b"text\nok\ncaf\xe9\n", r"input file '.*latin1\.csv', line 3, byte 4: 0xe9 is not valid UTF-8"),
        ("broken.jsonl", b'{"text": "ok"}\n{"text": \n', r"input file '.*broken\.jsonl' cannot be read as jsonl"),
    ],
    ids=[
        "empty-jsonl",
        "blank-jsonl",
        "empty-csv",
        "header-only-csv",
        "empty-parquet",
        "latin1-jsonl",
        "latin1-csv",
        "broken-json",
    ],
)
def test_bad_input_files(tmp_path, name, content, match):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(InputFileError, match=match):
        read_file_in_memory(path)


def test_input_file_error_is_one_cli_line(tmp_path, tiny_bert):
    src = tmp_path / "empty.jsonl"
    src.write_text("")
    res = subprocess.run(
        [
            *CLI,
            "privatize",
            str(src),
            str(tmp_path / "o.jsonl"),
            "--epsilon",
            "1",
            "--model",
            tiny_bert,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=120,
    )
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "StopIteration" not in res.stderr
    assert res.stderr.startswith(f"hf-textdp: error: input file {str(src)!r} is empty")


@pytest.fixture
def source(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": f"hello world {i}"}) + "\n" for i in range(4)))
    return src


@pytest.mark.parametrize(
    ("output", "match"),
    [
        ("afile/out.jsonl", r"output '.*afile/out\.jsonl' cannot be written \('.*afile' is a file, not a folder\)"),
        ("afile/sub/out", r"output '.*afile/sub/out' cannot be written \('.*afile' is a file, not a folder\)"),
    ],
    ids=["file-parent", "file-grandparent"],
)
def test_unwritable_output_names_the_output_not_the_work_folder(tmp_path, source, tiny_bert, output, match):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OutputNotWritableError, match=match) as info:
        privatize_dataset(source, PrivatizerConfig(epsilon=1.0, model=tiny_bert), output_dir=tmp_path / output)
    assert ".partial" not in str(info.value)
    assert isinstance(info.value, PermissionError) and isinstance(info.value, HfTextDPError)


def test_unwritable_output_under_proc(tmp_path, source, tiny_bert):
    with pytest.raises(OutputNotWritableError, match=r"output '/proc/out\.jsonl' cannot be written \(") as info:
        privatize_dataset(source, PrivatizerConfig(epsilon=1.0, model=tiny_bert), output_dir="/proc/out.jsonl")
    assert ".partial" not in str(info.value)


def test_row_epsilon_outlier_warning(tmp_path, tiny_bert, caplog):
    src = tmp_path / "in.jsonl"
    rows = [{"text": "hello world again"} for _ in range(9)] + [{"text": "hello world " * 200}]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level(logging.WARNING, logger="hf_textdp"):
        privatize_dataset(src, PrivatizerConfig(epsilon=1.0, model=tiny_bert), output_dir=tmp_path / "o.jsonl")
    [record] = [r for r in caplog.records if "median" in r.getMessage()]
    msg = record.getMessage()
    assert f"1 row(s) have dp_epsilon above {ROW_EPSILON_OUTLIER_MULTIPLE:g} x the median row's" in msg
    assert "rows 9 " in msg and "hello" not in msg


def test_no_outlier_warning_for_even_rows(tmp_path, tiny_bert, caplog):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": "hello world " * (1 + i % 3)}) + "\n" for i in range(12)))
    with caplog.at_level(logging.WARNING, logger="hf_textdp"):
        privatize_dataset(src, PrivatizerConfig(epsilon=1.0, model=tiny_bert), output_dir=tmp_path / "o.jsonl")
    assert not [r for r in caplog.records if "median" in r.getMessage()]
