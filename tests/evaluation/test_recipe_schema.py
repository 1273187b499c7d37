"""The recipe file's limits and schema (issue 53 Y1, Y2): an alias bomb, an oversized file and bad values are
refused when the recipe is read, with a message naming the key, the value and what is allowed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hf_textdp.errors import InputFileError, InvalidParameterError
from hf_textdp.evaluation.common import load_recipe
from hf_textdp.evaluation.schema import MAX_RECIPE_BYTES, MAX_RECIPE_NODES


HEAD = "name: r\ntasks: [mr]\n"


def _bomb(levels: int = 9) -> str:
    """Nested aliases: nine levels of nine references expand to 9**9 (387 million) strings."""
    lines = ['  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, cur in zip("abcdefgh", "bcdefghi"[: levels - 1], strict=False):
        lines.append(f"  {cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    return HEAD + "notes:\n" + "\n".join(lines) + "\n"


def test_an_alias_bomb_under_notes_is_refused_quickly(tmp_path: Path) -> None:
    text = _bomb()
    assert len(text.encode()) < 700
    path = tmp_path / "bomb.yaml"
    path.write_text(text, encoding="utf-8")
    start = time.perf_counter()
    with pytest.raises(InputFileError, match=rf"aliases expand to more than {MAX_RECIPE_NODES:,} YAML nodes"):
        load_recipe(path)
    assert time.perf_counter() - start < 5.0


def test_a_few_aliases_are_still_read(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(HEAD + "notes:\n  a: &a [1, 2]\n  b: [*a, *a]\n", encoding="utf-8")
    assert load_recipe(path).raw["notes"]["b"] == [[1, 2], [1, 2]]


def test_an_alias_inside_its_own_node_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text(HEAD + "notes: &n [1, *n]\n", encoding="utf-8")
    with pytest.raises(InputFileError, match="an alias refers to a node that contains it"):
        load_recipe(path)


def test_a_10_mb_recipe_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(HEAD + "notes: " + "x" * 10_000_000 + "\n", encoding="utf-8")
    with pytest.raises(
        InputFileError, match=rf"is 10,000,\d{{3}} bytes; a recipe may be at most {MAX_RECIPE_BYTES:,}"
    ):
        load_recipe(path)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (
            "name: r\ntasks: [mr]\nclassifier: {kfold: -3}\n",
            r"classifier\.kfold = -3: Input should be greater than or equal to 2\.$",
        ),
        (
            "name: r\ntasks: [{name: mr, max_rows: '40'}]\n",
            r"tasks\[0\]\.max_rows = '40': Input should be a valid integer\.$",
        ),
        ("name: r\ntasks: mr\n", r"tasks = 'mr': Input should be a valid list\.$"),
        ("name: r\ntasks: [mr]\nseed: 1.5e300\n", r"seed = '1\.5e300': Input should be a valid integer\.$"),
        ("name: r\ntasks: [mr]\nseed: 1.5e+300\n", r"seed = 1\.5e\+300: Input should be a valid integer\.$"),
        ("name: r\ntasks: [mr]\nseed: -1\n", r"seed = -1: Input should be greater than or equal to 0\.$"),
        ("name: r\ntasks: [mr, nope]\n", r"tasks\[1\]\.name = 'nope': unknown task\. Known tasks: \['cr', "),
        (
            "name: r\ntasks: [mr]\nclassifier: {kfolds: 3}\n",
            r"unknown key\(s\) \['kfolds'\] in classifier\. Allowed keys:",
        ),
    ],
    ids=[
        "kfold",
        "max_rows-str",
        "tasks-str",
        "seed-huge",
        "seed-float",
        "seed-negative",
        "task-unknown",
        "classifier-key",
    ],
)
def test_bad_values_are_refused_naming_key_value_and_what_is_allowed(tmp_path: Path, body: str, match: str) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(InvalidParameterError, match=rf"^recipe '{path}': {match}"):
        load_recipe(path)
