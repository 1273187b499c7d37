"""Bad parameters: one error family, one CLI line, the parameter named, never the seed (issue 7)."""

from __future__ import annotations

import math
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hf_textdp import HfTextDPError, PrivatizerConfig, privatize_dataset
from hf_textdp.cli import main
from hf_textdp.errors import (
    InvalidParameterError,
    ModelNotFoundError,
    UnknownMechanismError,
    UnknownOptionError,
    UnknownPostprocessError,
    VectorFileError,
)
from hf_textdp.io.paths import work_dir_for
from tests.utils import CLI, LEAK_SEED, corpus, error_lines, write_jsonl


# each test gets its own datasets cache, so nothing leaks between tests or into ~/.cache
pytestmark = pytest.mark.usefixtures("isolated_datasets_cache")


def _ragged(tmp_path: Path) -> str:
    p = tmp_path / "ragged.txt"
    p.write_text("a 1.0 2.0\nb 1.0\n", encoding="utf-8")
    return str(p)


def _not_numbers(tmp_path: Path) -> str:
    p = tmp_path / "nan.txt"
    p.write_text("a 1.0 2.0\nb 1.0 x\n", encoding="utf-8")
    return str(p)


# (id, config kwargs or None, privatize_dataset kwargs, CLI args, error type, message fragment)
# Every message must name the parameter and the value (or what is wrong with it) and what is allowed.
PARAMETER_CASES = [
    (
        "eps-zero",
        {"epsilon": 0.0},
        {},
        ["--epsilon", "0"],
        InvalidParameterError,
        r"epsilon must be a finite float > 0.*got 0",
    ),
    ("eps-negative", {"epsilon": -2.0}, {}, ["--epsilon", "-2"], InvalidParameterError, r"epsilon.*> 0.*got -2"),
    ("eps-nan", {"epsilon": math.nan}, {}, ["--epsilon", "nan"], InvalidParameterError, r"epsilon.*got nan"),
    (
        "eps-inf-outside-test-mode",
        {"epsilon": math.inf},
        {},
        ["--epsilon", "inf"],
        InvalidParameterError,
        r"epsilon.*infinity only with options=\{'test_mode': True\}.*got inf",
    ),
    (
        "delta-zero",
        {"epsilon": 1.0, "mechanism": "gaussian", "delta": 0.0},
        {},
        ["--epsilon", "1", "--mechanism", "gaussian", "--delta", "0"],
        InvalidParameterError,
        r"delta must be a float in \(0, 1\).*got 0\.0",
    ),
    (
        "delta-above-one",
        {"epsilon": 1.0, "mechanism": "gaussian", "delta": 1.5},
        {},
        ["--epsilon", "1", "--mechanism", "gaussian", "--delta", "1.5"],
        InvalidParameterError,
        r"delta must be a float in \(0, 1\).*got 1\.5",
    ),
    (
        "delta-nan",
        {"epsilon": 1.0, "mechanism": "gaussian", "delta": math.nan},
        {},
        ["--epsilon", "1", "--mechanism", "gaussian", "--delta", "nan"],
        InvalidParameterError,
        r"delta must be a float in \(0, 1\).*got nan",
    ),
    (
        "beta-above-one",
        {"epsilon": 1.0, "mechanism": "privemb", "delta": 1e-6, "options": {"beta": 1.5}},
        {},
        ["--epsilon", "1", "--mechanism", "privemb", "--delta", "1e-6", "-o", "beta=1.5"],
        InvalidParameterError,
        r"beta must be a float in \(0, 1\), got 1\.5",
    ),
    (
        "beta-zero",
        {"epsilon": 1.0, "mechanism": "tem", "options": {"beta": 0.0}},
        {},
        ["--epsilon", "1", "--mechanism", "tem", "-o", "beta=0"],
        InvalidParameterError,
        r"beta must be a float in \(0, 1\), got 0",
    ),
    (
        "unknown-mechanism",
        {"epsilon": 1.0, "mechanism": "madlb"},
        {},
        ["--epsilon", "1", "--mechanism", "madlb"],
        UnknownMechanismError,
        r"Unknown mechanism 'madlb'.*madlib",
    ),
    (
        "unknown-postprocess",
        {"epsilon": 1.0, "postprocess": "nearst"},
        {},
        ["--epsilon", "1", "--postprocess", "nearst"],
        UnknownPostprocessError,
        r"Unknown postprocess 'nearst'.*nearest",
    ),
    (
        "postprocess-not-for-mechanism",
        {"epsilon": 1.0, "mechanism": "tem", "postprocess": "rank"},
        {},
        ["--epsilon", "1", "--mechanism", "tem", "--postprocess", "rank"],
        InvalidParameterError,
        r"postprocess='rank' is not available for mechanism 'tem'.*Allowed",
    ),
    (
        "option-of-another-mechanism",
        {"epsilon": 1.0, "options": {"beta": 0.5}},
        {},
        ["--epsilon", "1", "-o", "beta=0.5"],
        UnknownOptionError,
        r"\['beta'\].*'madlib'.*Allowed options",
    ),
    (
        "option-of-another-step",
        {"epsilon": 1.0, "options": {"rank_c": 3}},
        {},
        ["--epsilon", "1", "-o", "rank_c=3"],
        UnknownOptionError,
        r"'rank_c' belongs to another post-processing step",
    ),
    (
        "delta-for-pure-mechanism",
        {"epsilon": 1.0, "delta": 1e-6},
        {},
        ["--epsilon", "1", "--delta", "1e-6"],
        InvalidParameterError,
        r"delta: mechanism 'madlib' uses no delta",
    ),
    (
        "model-not-offline",
        {"epsilon": 1.0, "model": "no-such-org/no-such-model"},
        {},
        ["--epsilon", "1", "--model", "no-such-org/no-such-model"],
        ModelNotFoundError,
        r"model='no-such-org/no-such-model' cannot be resolved offline.*Allowed",
    ),
    (
        "vectors-ragged",
        {"epsilon": 1.0, "model": _ragged},
        {},
        ["--epsilon", "1", "--model", _ragged],
        VectorFileError,
        r"ragged\.txt line 2: ragged row with 1 values, expected 2",
    ),
    (
        "vectors-not-numbers",
        {"epsilon": 1.0, "model": _not_numbers},
        {},
        ["--epsilon", "1", "--model", _not_numbers],
        VectorFileError,
        r"nan\.txt line 2: 'x' is not a number",
    ),
    (
        "shard-size-zero",
        None,
        {"shard_size": 0},
        ["--epsilon", "1", "--shard-size", "0"],
        InvalidParameterError,
        r"shard_size must be an int >= 1, got 0",
    ),
    (
        "batch-size-zero",
        None,
        {"batch_size": 0},
        ["--epsilon", "1", "--batch-size", "0"],
        InvalidParameterError,
        r"batch_size must be an int >= 1, got 0",
    ),
    (
        "num-proc-zero",
        None,
        {"num_proc": 0},
        ["--epsilon", "1", "--num-proc", "0"],
        InvalidParameterError,
        r"num_proc must be an int >= 1 or None, got 0",
    ),
    (
        "seed-negative",
        None,
        {"seed": -5},
        ["--epsilon", "1", "--seed", "-5"],
        InvalidParameterError,
        r"seed must be an int in \[0, 2\*\*64\)",
    ),
    (
        "seed-not-int",
        None,
        {"seed": "abc"},
        ["--epsilon", "1", "--seed", "abc"],
        InvalidParameterError,
        r"seed must be an? int",
    ),
    (
        "split-unknown",
        None,
        {"split": "validation"},
        ["--epsilon", "1", "--split", "validation"],
        InvalidParameterError,
        r"split='validation' is not in the dataset. Available splits: \['test', 'train'\]",
    ),
]


@pytest.fixture
def dict_source(tmp_path):
    """A save_to_disk DatasetDict folder (train/test), small."""
    import datasets

    path = tmp_path / "src"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"text": corpus(6, seed=1)}),
            "test": datasets.Dataset.from_dict({"text": corpus(4, seed=2)}),
        }
    ).save_to_disk(str(path))
    return path


def _resolve(value: Any, tmp_path: Path) -> Any:
    return value(tmp_path) if callable(value) else value


@pytest.mark.parametrize(
    ("config", "kwargs", "argv", "exc", "match"),
    [case[1:] for case in PARAMETER_CASES],
    ids=[case[0] for case in PARAMETER_CASES],
)
def test_bad_parameters_raise_one_family(config, kwargs, argv, exc, match, tiny_bert, dict_source, tmp_path, capsys):
    """API: the exact error type, a ValueError of the family. CLI: one line, exit 2, no traceback, no output."""
    output = tmp_path / "out"
    if config is not None:
        config = {k: _resolve(v, tmp_path) for k, v in config.items()}
        config.setdefault("model", tiny_bert)
        with pytest.raises(exc, match=match) as info:
            privatize_dataset(dict_source, PrivatizerConfig(**config), output_dir=output, **kwargs)
    else:
        with pytest.raises(exc, match=match) as info:
            privatize_dataset(dict_source, PrivatizerConfig(epsilon=1.0, model=tiny_bert), output_dir=output, **kwargs)
    assert isinstance(info.value, HfTextDPError) and isinstance(info.value, ValueError)
    assert not output.exists() and not work_dir_for(output).exists()

    argv = [_resolve(a, tmp_path) for a in argv]
    if "--model" not in argv:
        argv += ["--model", tiny_bert]
    capsys.readouterr()
    code = main(["privatize", str(dict_source), str(output), *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = error_lines(err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert not output.exists() and not work_dir_for(output).exists()


def test_seed_is_not_echoed_in_errors(tiny_bert, dict_source, tmp_path, capsys):
    """A seed out of range is named, its value is not (it is a secret key)."""
    seed = 2**64 + LEAK_SEED
    with pytest.raises(InvalidParameterError) as info:
        privatize_dataset(dict_source, PrivatizerConfig(epsilon=1.0, model=tiny_bert), seed=seed)
    assert str(seed) not in str(info.value) and str(LEAK_SEED) not in str(info.value)
    assert main(["privatize", str(dict_source), str(tmp_path / "o"), "--epsilon", "1", "--seed", str(seed)]) == 2
    assert str(seed) not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--epsilon", "abc"], r"argument --epsilon: invalid float value: 'abc'"),
        (["--shard-size", "ten"], r"argument --shard-size: invalid int value: 'ten'"),
        (["--epsilon", "1", "--seed", "1", "--seed-file", "f"], r"--seed and --seed-file are mutually exclusive"),
        (["--epsilon", "1", "--seed-file", "/no/such/seed"], r"--seed-file '/no/such/seed' cannot be read"),
        (["--engine", "spark"], r"argument --engine: invalid choice: 'spark'"),
        ([], r"--epsilon is required"),
    ],
    ids=[
        "eps-not-a-number",
        "shard-size-not-int",
        "seed-and-seed-file",
        "seed-file-missing",
        "bad-engine",
        "no-epsilon",
    ],
)
def test_cli_usage_errors_are_one_line(argv, match, tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", ["a b"])
    code: Any
    try:
        code = main(["privatize", str(src), str(tmp_path / "o.jsonl"), *argv])
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2
    lines = error_lines(err)
    assert len(lines) == 1 and "Traceback" not in err
    assert re.search(match, lines[0]), lines[0]


@pytest.mark.slow
def test_cli_error_in_a_real_process_is_one_line(tiny_bert, tmp_path):
    """The console entry point itself: exit 2, one stderr line, no traceback (also for errors inside map)."""
    src = write_jsonl(tmp_path / "in.jsonl", ["ok"] * 3, other=[1, 2, 3])
    env = {**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
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
            "--text-column",
            "other",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert error_lines(res.stderr) == ["hf-textdp: error: row 0: expected str in column 'other', got int."]
    assert not (tmp_path / "o.jsonl").exists() and not work_dir_for(tmp_path / "o.jsonl").exists()
