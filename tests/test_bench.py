"""``hf-textdp bench`` runs and reports its fields (never its speed: timings are the machine's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_textdp import bench
from hf_textdp.bench import DEFAULT_CASES, format_table, load_texts, run_bench
from hf_textdp.cli import main


CASE_FIELDS = {
    "name",
    "mechanism",
    "postprocess",
    "epsilon",
    "tokens",
    "seconds",
    "tokens_per_s",
    "bound_tokens_per_s",
    "fraction_of_bound",
    "fraction_paired",
    "peak_rss_mb",
    "search_filter",
    "rounds",
    "per_token_reference",
    "error",
}


def test_cli_bench_smoke(tiny_bert: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two cases on a tiny model and 24 rows of the packaged sample: table, JSON and every field."""
    out = tmp_path / "bench.json"
    code = main(
        [
            "bench",
            "--model",
            tiny_bert,
            "--mechanism",
            "madlib/nearest",
            "--mechanism",
            "tem",
            "--rows",
            "24",
            "--batch-size",
            "10",
            "--text",
            str(bench._SAMPLE),
            "--json",
            str(out),
            "--no-cold-start",
        ]
    )
    assert code == 0
    table = capsys.readouterr().out
    for needle in ("fp32 bound", "madlib/nearest", "tem", "fraction", "per-token reference", "peak RSS"):
        assert needle in table
    report = json.loads(out.read_text())
    assert report["rows"] == 24 and report["V"] > 100 and report["bound_flops"] > 0
    assert [c["name"] for c in report["cases"]] == ["madlib/nearest", "tem"]
    for case in report["cases"]:
        assert set(case) == CASE_FIELDS
        assert case["error"] is None, case["error"]
        assert case["tokens"] > 0 and case["tokens_per_s"] > 0 and case["fraction_of_bound"] > 0
        assert case["fraction_paired"] > 0
        assert len(case["rounds"]) == 1 and case["peak_rss_mb"] > 0
    madlib, tem = report["cases"]
    assert madlib["search_filter"] in ("bf16", "fp32") and tem["search_filter"] == "int8"
    ref = madlib["per_token_reference"]
    assert ref["tokens"] > 0 and ref["ratio"] > 0 and ref["agreement"] == 1.0
    assert report["cold_start"] is None and report["memory_run"] is None


@pytest.mark.slow
def test_run_bench_cold_start_and_memory_run(tiny_bert: str, tmp_path: Path) -> None:
    """The cold CLI run (30 rows) and the whole-file CLI run are subprocesses that succeed."""
    text = tmp_path / "rows.txt"
    text.write_text("".join(f"a short review number {i} of a film\n" for i in range(40)), encoding="utf-8")
    report = run_bench(model=tiny_bert, mechanisms=["madlib"], text=text, rows=40, reference_tokens=0, memory_run=True)
    for run in (report.cold_start, report.memory_run):
        assert run is not None and run["returncode"] == 0, run
        assert run["seconds"] > 0 and run["peak_rss_mb"] > 0
    assert report.cold_start is not None and report.cold_start["rows"] == 30
    assert "time to first output" in format_table(report)


def test_load_texts_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """jsonl and plain text, cycling to ``rows``, one word per row, and the packaged sample when
    SentEval MR (shared/) is absent."""
    j = tmp_path / "t.jsonl"
    j.write_text('{"text": "a b"}\n\n{"text": "c"}\n', encoding="utf-8")
    assert load_texts(j, 5)[0] == ["a b", "c", "a b", "c", "a b"]
    assert load_texts(j, None, one_word=True)[0] == ["a", "b", "c"]
    t = tmp_path / "t.txt"
    t.write_text("x y\n\nz\n", encoding="utf-8")
    assert load_texts(t, None)[0] == ["x y", "z"]
    monkeypatch.delenv("HF_TEXTDP_BENCH_TEXT", raising=False)
    monkeypatch.setattr(bench, "_MR_RELATIVE", Path("no") / "such" / "file.jsonl")
    texts, source = load_texts(None, 3)
    assert len(texts) == 3 and source.startswith("sample.jsonl")
    with pytest.raises(ValueError, match="not an existing file"):
        load_texts(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"label": 1}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="line 1 has no string field 'text'"):
        load_texts(bad)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--mechanism", "madlb"], "Unknown mechanism 'madlb'"),
        (["--mechanism", "tem/top2"], "selection mechanism and takes no post-processing"),
        (["--rows", "0"], "rows, batch_size, repeats and bound_repeats must be >= 1"),
    ],
    ids=["unknown-mechanism", "selection-with-postprocess", "zero-rows"],
)
def test_cli_bench_bad_arguments(
    tiny_bert: str, args: list[str], match: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--model", tiny_bert, "--no-cold-start", *args]) == 2
    assert match in capsys.readouterr().err


def test_default_cases_are_registered() -> None:
    for case in DEFAULT_CASES:
        bench._parse_case(case)


def test_bench_static_vectors_one_word_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A vector file as the model: one word per row, and the vector-file load figures."""
    import numpy as np

    from tests.utils import WORDS, write_vectors

    monkeypatch.setenv("HF_TEXTDP_CACHE", str(tmp_path / "cache"))
    words = sorted(set(WORDS))
    vec = write_vectors(tmp_path / "v.txt", words, np.random.default_rng(7200).standard_normal((len(words), 6)))
    text = tmp_path / "t.txt"
    text.write_text("the movie was good\nthe plot was boring and slow\n", encoding="utf-8")
    report = run_bench(
        model=str(vec), mechanisms=["madlib"], text=text, rows=12, one_word=True, cold_start=False, reference_tokens=5
    )
    assert report.rows == 12 and report.cases[0].error is None and report.cases[0].tokens > 0
    vl = report.vector_load
    assert vl is not None and vl["rows"] == len(words) and vl["d"] == 6
    assert vl["read_s"] >= 0 and vl["parse_s"] > 0 and vl["cached_s"] > 0
    assert "vector file" in format_table(report)
