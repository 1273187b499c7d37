"""``hf-textdp bench`` runs and reports its fields (never its speed: timings are the machine's)."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest
import torch

from hf_textdp.cli import build_parser, main
from hf_textdp.tools import bench
from hf_textdp.tools.bench import DEFAULT_CASES, cases, format_table, load_texts, processes, run_bench, texts


CASE_FIELDS = {
    "name",
    "mechanism",
    "postprocess",
    "epsilon",
    "arithmetic",
    "tokens",
    "seconds",
    "tokens_per_s",
    "proposals_per_token",
    "bound_tokens_per_s",
    "fraction_fp32",
    "fraction_bf16",
    "fraction_int8",
    "fraction_own",
    "fraction_paired",
    "peak_rss_mb",
    "search_filter",
    "rounds",
    "per_token_reference",
    "error",
    "ops_per_token",
    "searched",
    "kernel",
    "kernel_name",
}
ROUND_FIELDS = {
    "tokens_per_s",
    "bound_fp32_tokens_per_s",
    "bound_bf16_tokens_per_s",
    "bound_int8_tokens_per_s",
    "fraction_own",
}
HEADER_FIELDS = {"cpu_model", "cpu_flags", "threads", "text_path", "text_file_rows", "text_is_sample", "bounds"}


def test_cli_bench_smoke(tiny_bert: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two cases on a tiny model and 24 rows of the packaged sample, default repeats: header, per-case
    columns, JSON fields, and fractions that are the rate over the bound of the arithmetic named."""
    from hf_textdp.search import bf16_filter_available, int8_filter_runs
    from hf_textdp.tools.bench.bounds import skipped_arithmetic

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
            str(texts._SAMPLE),
            "--json",
            str(out),
            "--no-cold-start",
        ]
    )
    assert code == 0
    table = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert HEADER_FIELDS <= set(report)
    assert report["rows"] == 24 and report["V"] > 100 and report["repeats"] == 3
    assert report["text_path"] == str(texts._SAMPLE) and report["text_file_rows"] == 30 and report["text_is_sample"]
    assert report["threads"] == torch.get_num_threads() and report["cpu_model"]
    assert set(report["cpu_flags"]) <= set(bench.CPU_FLAGS)
    assert set(report["bounds"]) == {"fp32", "bf16", "int8"}
    per_op = 2.0 * report["V"] * report["d"]
    for name in ("fp32", "bf16"):
        b = report["bounds"][name]
        assert b["ops_per_s"] > 0 and b["tokens_per_s"] == pytest.approx(b["ops_per_s"] / per_op)
    int8 = report["bounds"]["int8"]
    assert (int8["ops_per_s"] is not None and int8["ops_per_s"] > 0) or int8["note"]

    # header: the text used (with its rows), the CPU model and flags, torch threads, the three bounds
    lines = table.splitlines()
    assert lines[1].startswith(f"text {texts._SAMPLE} (30 rows, first 24; THE PACKAGED 30-ROW SAMPLE")
    assert lines[2].startswith(f"cpu {report['cpu_model']} (") and " flags " in lines[2]
    assert all(flag in lines[2] for flag in bench.CPU_FLAGS)  # present ones, then the absent ones after "not"
    assert lines[3].startswith(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; flags used by the kernels: "
    )
    assert [line.split()[0] for line in lines[5:8]] == ["fp32", "bf16", "int8"]

    # one row per case with its arithmetic and the fp32, bf16 and own fractions, as in the JSON
    columns = next(line for line in lines if line.startswith("case ")).split()
    assert columns == [
        "case",
        "arith",
        "filter",
        "tokens",
        "tokens/s",
        "fp32",
        "bf16",
        "own",
        "paired",
        "peak",
        "RSS",
        "kernel",
    ]
    assert [c["name"] for c in report["cases"]] == ["madlib/nearest", "tem"]
    for case in report["cases"]:
        assert set(case) == CASE_FIELDS
        assert case["error"] is None, case["error"]
        assert case["tokens"] > 0 and case["tokens_per_s"] > 0 and case["peak_rss_mb"] > 0
        assert len(case["rounds"]) == 3 and all(set(r) == ROUND_FIELDS for r in case["rounds"])
        bounds = case["bound_tokens_per_s"]
        assert set(bounds) == {"fp32", "bf16", "int8"}
        for name in ("fp32", "bf16"):
            assert case[f"fraction_{name}"] == pytest.approx(case["tokens_per_s"] / bounds[name])
            assert bounds[name] == max(r[f"bound_{name}_tokens_per_s"] for r in case["rounds"])
        assert case["fraction_own"] == case[f"fraction_{case['arithmetic']}"]
        # each case's bound is the product rate over its own work per token, never more than 2·V·d
        assert 0 < case["ops_per_token"] <= per_op
        for name in ("fp32", "bf16"):
            assert bounds[name] * case["ops_per_token"] <= report["bounds"][name]["ops_per_s"] * (1 + 1e-9)
        assert re.fullmatch(r"([\d,]+x\d+ \(\d+%\)(, )?)+", case["searched"]), case["searched"]
        row = next(line for line in lines if line.startswith(case["name"] + " ")).split()
        assert row[1] == case["arithmetic"]
        own = case["fraction_own"]
        assert row[5:8] == [f"{case['fraction_fp32']:.2f}", f"{case['fraction_bf16']:.2f}", f"{own:.2f}"]
    madlib, tem = report["cases"]
    if int8_filter_runs("cpu"):  # the search's int8 filter: held to the int8 bound where int8 is native (VNNI)
        expected = "fp32" if "int8" in skipped_arithmetic("cpu") else "int8"
    else:
        expected = "bf16" if bf16_filter_available("cpu") else "fp32"
    assert madlib["arithmetic"] == expected
    assert tem["arithmetic"] == "int8"
    assert madlib["search_filter"] in ("int8", "bf16", "fp32") and tem["search_filter"] == "int8"
    assert madlib["kernel_name"] in (
        "VNNI int8 filter",
        "AVX2 int8 filter",
        "AVX-512 bf16 fused filter",
        "AVX2 fp32 fused filter",
        "torch bf16",
        "torch fp32",
    )
    assert tem["kernel_name"] in ("VNNI keys", "AVX2 keys", "fp32 product")
    for case in report["cases"]:  # the kernel each case ran closes its row
        assert next(line for line in lines if line.startswith(case["name"] + " ")).endswith("  " + case["kernel_name"])
    ref = madlib["per_token_reference"]
    assert ref["tokens"] > 0 and ref["ratio"] > 0 and ref["agreement"] == 1.0
    assert report["cold_start"] is None and report["memory_run"] is None
    assert "per-token reference" in table


def test_int8_bound_missing_is_said(tiny_bert: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an int8 product (no ``torch._int_mm``, the compiled kernels off) the int8 bound is skipped with
    a note, and the sampler's ``own`` is its fp32 fraction (never an int8 bound it does not have)."""

    def no_int8(*args: object, **kwargs: object) -> torch.Tensor:
        raise RuntimeError("no int8 kernel here")

    monkeypatch.setattr(torch, "_int_mm", no_int8)
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "0")
    report = run_bench(
        model=tiny_bert, mechanisms=["tem"], text="sample", rows=8, repeats=1, reference_tokens=0, cold_start=False
    )
    int8 = report.bounds["int8"]
    assert int8["ops_per_s"] is None and "no int8 kernel here" in int8["note"]
    assert report.bounds["fp32"]["ops_per_s"] > 0
    (tem,) = report.cases
    assert tem.error is None and tem.arithmetic == "fp32" and tem.bound_tokens_per_s["int8"] is None
    assert tem.fraction_int8 is None and tem.fraction_own == tem.fraction_fp32 is not None
    assert tem.kernel_name == "fp32 product"  # HF_TEXTDP_NATIVE=0: no compiled key kernel
    table = format_table(report)
    assert "int8  not measured: torch._int_mm fails on cpu: no int8 kernel here" in table
    assert next(line for line in table.splitlines() if line.startswith("tem ")).split()[5:8] == [
        f"{tem.fraction_fp32:.2f}",
        f"{tem.fraction_bf16:.2f}",
        f"{tem.fraction_own:.2f}",
    ]


def test_repeats_default_is_three() -> None:
    assert build_parser().parse_args(["bench"]).repeats == 3
    assert inspect.signature(run_bench).parameters["repeats"].default == 3


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="VmHWM is Linux's")
def test_cli_child_peak_rss_is_its_own() -> None:
    """The CLI child's peak is read in a fresh interpreter: with 1 GiB live in this process first, the
    child (``hf-textdp --help``) still reports well under 1 GiB. ru_maxrss would not (exec on Linux folds
    the spawning process's high-water mark into the child's)."""
    big = torch.ones(2**28)  # 1 GiB of fp32, every page written
    assert processes._max_rss_bytes() >= 2**30
    res = processes._run_cli(["--help"], timeout=120)
    del big
    assert res["returncode"] == 0 and "privatize" in res["output"]
    assert res["peak_rss_source"] == "VmHWM"
    assert 1 < res["peak_rss_mb"] < 640  # the CLI imports torch, transformers and scipy: ~320 MB


@pytest.mark.slow
def test_run_bench_cold_start_and_memory_run(tiny_bert: str, tmp_path: Path) -> None:
    """The cold CLI run (30 rows) and the whole-file CLI run are fresh interpreters that succeed and
    report their own peak RSS."""
    text = tmp_path / "rows.txt"
    text.write_text("".join(f"a short review number {i} of a film\n" for i in range(40)), encoding="utf-8")
    report = run_bench(
        model=tiny_bert, mechanisms=["madlib"], text=text, rows=40, repeats=1, reference_tokens=0, memory_run=True
    )
    for run in (report.cold_start, report.memory_run):
        assert run is not None and run["returncode"] == 0, run
        assert run["seconds"] > 0 and run["peak_rss_mb"] > 0 and run["peak_rss_source"] in ("VmHWM", "ru_maxrss")
    assert report.cold_start is not None and report.cold_start["rows"] == 30
    table = format_table(report)
    assert "time to first output" in table and "(its own)" in table
    assert report.memory_run is not None and report.memory_run["text"] == "rows.txt"


def test_load_texts_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """jsonl and plain text, cycling to ``rows`` (and saying so), one word per row, and the packaged
    sample only when asked for by name."""
    j = tmp_path / "t.jsonl"
    j.write_text('{"text": "a b"}\n\n{"text": "c"}\n', encoding="utf-8")
    texts, source = load_texts(j, 5)
    assert texts == ["a b", "c", "a b", "c", "a b"] and source == "t.jsonl (2 rows, cycled 2.5 times to 5 rows)"
    assert load_texts(j, None, one_word=True)[0] == ["a", "b", "c"]
    t = tmp_path / "t.txt"
    t.write_text("x y\n\nz\n", encoding="utf-8")
    assert load_texts(t, None) == (["x y", "z"], "t.txt (2 rows, first 2)")
    texts, source = load_texts("sample", 3)
    assert len(texts) == 3 and source.startswith("sample.jsonl (30 rows, first 3; THE PACKAGED 30-ROW SAMPLE")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sample").write_text("a local file named sample\n", encoding="utf-8")
    assert load_texts("./sample", None)[0] == ["a local file named sample"]  # a path, not the keyword
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"label": 1}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="line 1 has no string field 'text'"):
        load_texts(bad)


@pytest.mark.parametrize(
    ("text", "env", "match"),
    [
        (None, None, r"SentEval MR not found at .*no/such/mr\.jsonl .*--text FILE.*--text sample"),
        ("missing.jsonl", None, r"'missing\.jsonl' is not an existing file .*--text FILE.*--text sample"),
        (None, "gone.jsonl", r"'gone\.jsonl' \(\$HF_TEXTDP_BENCH_TEXT\) is not an existing file"),
    ],
    ids=["no-mr", "missing-file", "missing-env-file"],
)
def test_cli_bench_refuses_missing_text(
    tiny_bert: str,
    text: str | None,
    env: str | None,
    match: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No text, no bench: one line naming the path and how to pass --text, never the sample in silence."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(texts, "_MR_RELATIVE", Path("no") / "such" / "mr.jsonl")
    if env is None:
        monkeypatch.delenv("HF_TEXTDP_BENCH_TEXT", raising=False)
    else:
        monkeypatch.setenv("HF_TEXTDP_BENCH_TEXT", env)
    args = ["bench", "--model", tiny_bert, "--no-cold-start", "--rows", "4", "--repeats", "1"]
    assert main(args + ([] if text is None else ["--text", text])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hf-textdp: error: text: ")
    assert re.search(match, err), err
    with pytest.raises(ValueError, match=match):
        load_texts(text)


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
        cases._parse_case(case)


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


def test_work_per_token_follows_the_classes_and_the_projected_space(tiny_bert: str) -> None:
    """One space: 2·V·d per token exactly; privemb: 2·V·m in its projected space; class-preserving: between
    the smallest and the largest class's 2·n·d, below the whole space's (each token scores its class only)."""
    from hf_textdp import Privatizer, PrivatizerConfig

    texts = load_texts("sample", 30)[0]

    def work(**kw: object) -> tuple[float, str, Privatizer]:
        priv = Privatizer(PrivatizerConfig(epsilon=10.0, model=tiny_bert, **kw), seed=1, allow_weak_seed=True)  # type: ignore[arg-type]
        priv.privatize(texts[:2])
        ops, shapes = bench.work_per_token(priv, texts)
        return ops, shapes, priv

    ops, shapes, priv = work(candidates={"classes": "mix"})
    V, d = priv.engine.space.V, priv.engine.space.d
    assert ops == 2.0 * V * d and shapes == f"{V:,}x{d} (100%)"
    ops, shapes, priv = work(mechanism="privemb", candidates={"classes": "mix"})
    m = priv.engine.mechanism.search_index(priv.engine.space).d
    assert m != d and ops == 2.0 * V * m  # the projected dimension, not the model's
    ops, shapes, priv = work()
    sizes = [part.space.V for part, _ in priv.engine.class_mechanisms]
    assert len(sizes) == 2 and sum(sizes) == V
    assert 2.0 * min(sizes) * d < ops < 2.0 * max(sizes) * d < 2.0 * V * d
    assert shapes.count("%") == 2


def test_kernel_only_pass_times_the_device_part(tiny_bert: str) -> None:
    """``kernel_only``: every privatized token of the rows in one call, and fractions of the case's bounds."""
    report = bench.run_bench(
        model=tiny_bert,
        mechanisms=["madlib/nearest"],
        text="sample",
        rows=24,
        repeats=2,
        bound_repeats=1,
        reference_tokens=0,
        cold_start=False,
        kernel_only=True,
    )
    case = report.cases[0]
    assert case.error is None and case.kernel is not None
    k = case.kernel
    assert k["tokens"] == case.tokens and k["passes"] == 2 and k["fallback_queries"] == 0
    assert k["tokens_per_s"] == pytest.approx(k["tokens"] / k["seconds"])
    for a in ("fp32", "bf16"):
        assert k[f"fraction_{a}"] == pytest.approx(k["tokens_per_s"] / case.bound_tokens_per_s[a])
    assert k["fraction_own"] == pytest.approx(k[f"fraction_{case.arithmetic}"])
    assert "kernel only (noise and search" in bench.format_table(report)
    # default: kernel-only on a GPU only
    assert bench.run_bench(
        model=tiny_bert, mechanisms=["tem"], text="sample", rows=4, repeats=1, bound_repeats=1, reference_tokens=0,
        cold_start=False,
    ).cases[0].kernel is None  # fmt: skip


def test_bench_never_times_or_divides_by_emulated_arithmetic(tiny_bert: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU whose flags lack bf16 and int8 (AVX2 and FMA only): the bench times only fp32 (the product timing is
    mocked: a bf16 or int8 product would be named to it), prints why bf16 and int8 were skipped, holds every
    case, the sampler too, to fp32, and names the kernel each case ran."""
    from hf_textdp.cpu import features
    from hf_textdp.cpu.avx2_filter import avx2_filter_available
    from hf_textdp.cpu.int8_keys import int8_keys_available
    from hf_textdp.tools.bench import bounds
    from hf_textdp.tools.bench import run as bench_run

    monkeypatch.setattr(features, "cpu_flags", lambda: frozenset({"sse4_2", "avx", "avx2", "fma", "f16c"}))
    timed: list[str] = []

    def fake_best(products: dict[str, object], repeats: int) -> dict[str, float]:
        timed.extend(products)
        return dict.fromkeys(products, 0.01)

    def emulated(*args: object, **kwargs: object) -> None:
        raise AssertionError("an emulated int8 product ran")

    monkeypatch.setattr(bounds, "_best_seconds", fake_best)
    monkeypatch.setattr(bench_run, "calibrate_rows", lambda V, d, device="cpu": bounds.MIN_BOUND_ROWS)
    monkeypatch.setattr(torch, "_int_mm", emulated)
    printed: list[str] = []
    report = run_bench(
        model=tiny_bert,
        mechanisms=["madlib/nearest", "tem"],
        text="sample",
        rows=8,
        repeats=1,
        reference_tokens=0,
        cold_start=False,
        progress=printed.append,
    )
    assert timed and set(timed) == {"fp32"}
    assert set(report.skipped) == {"bf16", "int8"} and report.flags_used == ["avx2", "fma"]
    for name in ("bf16", "int8"):
        assert report.bounds[name]["ops_per_s"] is None and "not native on this CPU" in report.bounds[name]["note"]
        assert any(line.startswith(f"{name} bound skipped: not native on this CPU") for line in printed)
    madlib, tem = report.cases
    for case in (madlib, tem):
        assert case.error is None, case.error
        assert case.arithmetic == "fp32" and case.fraction_bf16 is None and case.fraction_int8 is None
        assert case.fraction_own == case.fraction_fp32 is not None
        assert all(v is None for a, v in case.bound_tokens_per_s.items() if a != "fp32")
    assert madlib.kernel_name == ("AVX2 fp32 fused filter" if avx2_filter_available() else "torch fp32")
    assert tem.kernel_name == ("AVX2 keys" if int8_keys_available() else "fp32 product")
    table = format_table(report)
    assert "  bf16  skipped: not native on this CPU" in table and "  int8  skipped: not native on this CPU" in table
    assert "flags used by the kernels: avx2 fma" in table
    for case in (madlib, tem):
        row = next(line for line in table.splitlines() if line.startswith(case.name + " ")).split()
        assert row[5:8] == [f"{case.fraction_fp32:.2f}", "-", f"{case.fraction_own:.2f}"]
        assert " of bf16" not in next(line for line in printed if line.startswith(case.name + ":"))
        assert case.kernel_name in table


def test_bound_rows_come_from_a_calibration() -> None:
    """The bound products' rows follow the time one fp32 product takes, within [MIN_BOUND_ROWS, BOUND_ROWS]."""
    from hf_textdp.tools.bench import bounds

    assert bounds.calibrate_rows(2000, 64, seconds=1e-9) == bounds.MIN_BOUND_ROWS
    assert bounds.calibrate_rows(2000, 64, seconds=1e3) == bounds.BOUND_ROWS
    mid = bounds.calibrate_rows(2000, 64, seconds=0.02)
    assert bounds.MIN_BOUND_ROWS <= mid <= bounds.BOUND_ROWS and mid % 64 == 0


def test_default_rows_follow_the_fp32_bound() -> None:
    """Without --rows, a pass is sized from the fp32 bound: twice the rate gives twice the rows, within limits."""
    from hf_textdp.tools.bench import run as bench_run

    texts_ = ["x" * 100] * 10  # 25 tokens a row at four characters a token
    V, d = 30000, 384
    ops = 2.0 * V * d * 2000  # fp32 bound: 2,000 tokens/s over all V; half of it for 6 s is 6,000 tokens
    assert bench_run.sized_rows(texts_, ops, V, d) == 6000 // 25 * 1
    assert bench_run.sized_rows(texts_, 2 * ops, V, d) == 2 * (6000 // 25)
    assert bench_run.sized_rows(texts_, 1.0, V, d) == bench_run.MIN_ROWS
    assert bench_run.sized_rows(texts_, 1e6 * ops, V, d) == bench_run.MAX_ROWS
    assert build_parser().parse_args(["bench"]).rows is None


def test_shared_proposals_are_said(tiny_bert: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sampler whose tokens with the same input share one proposal: the case counts the proposals of its timed
    passes against its tokens (the distinct inputs of each call: here 3 words in 40 rows), and the table says that
    the fractions count a full product per token and gives ``own`` per proposal; without sharing it says nothing."""
    text = tmp_path / "rep.jsonl"
    text.write_text("".join(json.dumps({"text": "good good movie bad"}) + "\n" for _ in range(40)))
    report = run_bench(
        model=tiny_bert, mechanisms=["tem"], text=str(text), rows=40, repeats=2, reference_tokens=0, cold_start=False
    )
    (tem,) = report.cases
    assert tem.error is None and tem.proposals_per_token is not None
    ids = tiny_bert_ids(tiny_bert, "good good movie bad")
    assert tem.proposals_per_token == len(set(ids)) / (40 * len(ids))  # one call a pass: each input once
    line = next(x for x in format_table(report).splitlines() if x.startswith("  tem: one proposal per distinct"))
    assert f"{tem.proposals_per_token:.2f} a token" in line
    assert f"own per proposal {tem.fraction_own * tem.proposals_per_token:.2f}" in line

    from hf_textdp.mechanisms.exponential import ExponentialSampler

    real_init = ExponentialSampler.__init__

    def unshared(self: ExponentialSampler, *args: object, **kwargs: object) -> None:
        real_init(self, *args, **kwargs)  # type: ignore[arg-type]
        self.share_inputs = False

    monkeypatch.setattr(ExponentialSampler, "__init__", unshared)
    report = run_bench(
        model=tiny_bert, mechanisms=["tem"], text=str(text), rows=40, repeats=1, reference_tokens=0, cold_start=False
    )
    assert report.cases[0].proposals_per_token == 1.0
    assert "one proposal per distinct input" not in format_table(report)


def tiny_bert_ids(model: str, text: str) -> list[int]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model)(text, add_special_tokens=False)["input_ids"]
