"""``privatize_dataset``: every source kind, every output format with its report, shards, the CLI end to end."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

import hf_textdp.run.pipeline as pipeline
from hf_textdp import Privatizer, PrivatizerConfig, privacy_report, privatize_dataset
from hf_textdp.errors import InvalidParameterError
from hf_textdp.io.paths import report_path_for, work_dir_for
from tests.utils import CLI, corpus


SEED = 2**63 + 12345
N = 24
TEXTS = corpus(N, seed=81)


pytestmark = pytest.mark.usefixtures("isolated_datasets_cache")  # each test gets its own datasets cache


@pytest.fixture
def cfg(tiny_bert):
    return PrivatizerConfig(epsilon=3.0, model=tiny_bert)


@pytest.fixture
def reference(cfg):
    """What one plain ``Dataset.map`` with the seed gives (noise key ``""``)."""
    import datasets

    ds = datasets.Dataset.from_dict({"text": TEXTS, "label": list(range(N))})
    return ds.map(Privatizer(cfg, seed=SEED), batched=True, with_indices=True)


def _source(kind: str, tmp_path: Path) -> Any:
    import datasets

    ds = datasets.Dataset.from_dict({"text": TEXTS, "label": list(range(N))})
    if kind == "dataset":
        return ds
    if kind == "folder":
        ds.save_to_disk(str(tmp_path / "src"))
        return str(tmp_path / "src")
    path = tmp_path / f"src.{kind}"
    {
        "jsonl": lambda: ds.to_json(str(path)),
        "csv": lambda: ds.to_csv(str(path), index=False),
        "parquet": lambda: ds.to_parquet(str(path)),
    }[kind]()
    return str(path)


SOURCES = ["dataset", "jsonl", "csv", "parquet", "folder"]


@pytest.mark.parametrize("kind", SOURCES)
def test_every_source_kind_gives_the_same_rows(kind, cfg, reference, tmp_path):
    out = privatize_dataset(_source(kind, tmp_path), cfg, seed=SEED)
    assert len(out) == N
    for col in ("text", "label", "input_ids", "attention_mask", "dp_tokens", "dp_epsilon"):
        assert out[col] == reference[col], col


def test_dataset_dict_uses_the_split_name_as_noise_key(cfg, tmp_path):
    import datasets

    dd = datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict({"text": TEXTS}), "test": datasets.Dataset.from_dict({"text": TEXTS})}
    )
    out = privatize_dataset(dd, cfg, seed=SEED, output_dir=tmp_path / "out", shard_size=10)
    assert isinstance(out, datasets.DatasetDict) and sorted(out) == ["test", "train"]
    for split in ("train", "test"):
        ref = dd[split].map(Privatizer(cfg, seed=SEED, split=split), batched=True, with_indices=True)
        assert out[split]["input_ids"] == ref["input_ids"]
        one = privatize_dataset(dd, cfg, seed=SEED, split=split)  # split= selects and keys the same way
        assert one["input_ids"] == ref["input_ids"]
    assert out["train"]["text"] != out["test"]["text"]  # same texts, different keys: the noise differs
    saved = datasets.load_from_disk(str(tmp_path / "out"))
    assert saved["train"]["text"] == out["train"]["text"]
    report = privacy_report(tmp_path / "out")
    assert report["totals"]["rows"] == 2 * N


def test_dataset_dict_to_a_file_is_refused_before_any_work(cfg, tmp_path):
    import datasets

    dd = datasets.DatasetDict(
        {"a": datasets.Dataset.from_dict({"text": ["x"]}), "b": datasets.Dataset.from_dict({"text": ["y"]})}
    )
    with pytest.raises(InvalidParameterError, match=r"splits \['a', 'b'\] needs a folder output.*or split="):
        privatize_dataset(dd, cfg, output_dir=tmp_path / "o.jsonl")
    assert os.listdir(tmp_path) == []


def _read_back(output: Path) -> list[dict[str, Any]]:
    import datasets

    if output.suffix == ".jsonl":
        return [json.loads(line) for line in output.read_text(encoding="utf-8").split("\n") if line]
    if output.suffix == ".parquet":
        rows: list[dict[str, Any]] = datasets.Dataset.from_parquet(str(output)).to_list()
        return rows
    if output.suffix == ".csv":
        import csv

        with open(output, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    rows = datasets.load_from_disk(str(output)).to_list()
    return rows


@pytest.mark.parametrize("name", ["out.jsonl", "out.parquet", "out.csv", "out"])
def test_every_output_format_with_its_report(name, cfg, reference, tmp_path):
    output = tmp_path / "results" / name
    ret = privatize_dataset(_source("jsonl", tmp_path), cfg, seed=SEED, output_dir=output, shard_size=7)
    rows = _read_back(output)
    assert len(rows) == len(ret) == N
    assert [r["text"] for r in rows] == reference["text"] == ret["text"]
    if name != "out.csv":  # CSV has no lists; the others keep the types
        assert [r["input_ids"] for r in rows] == reference["input_ids"]
    else:  # list cells are JSON arrays
        assert [json.loads(r["input_ids"]) for r in rows] == reference["input_ids"]
        assert [int(r["dp_tokens"]) for r in rows] == reference["dp_tokens"]
    report_file = report_path_for(output)
    assert report_file == (
        output / "privacy_report.json" if output.suffix == "" else output.with_name(name + ".privacy_report.json")
    )
    report = json.loads(report_file.read_text())
    assert report == privacy_report(output)
    assert report["totals"]["rows"] == N and report["totals"]["dp_tokens"] == sum(reference["dp_tokens"])
    assert report["totals"]["special_tokens"] == 2 * N
    assert sorted(os.listdir(output.parent)) == sorted([name, report_file.name] if output.suffix else [name])
    assert not work_dir_for(output).exists()


def test_shard_size_and_batch_size_do_not_change_the_output(cfg, tmp_path):
    src = _source("parquet", tmp_path)
    a = privatize_dataset(src, cfg, seed=SEED, output_dir=tmp_path / "a.parquet", shard_size=1, batch_size=3)
    b = privatize_dataset(src, cfg, seed=SEED, output_dir=tmp_path / "b.parquet", shard_size=N, batch_size=1000)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert a["input_ids"] == b["input_ids"]


def test_folder_output_gets_the_input_card_fields(cfg, tmp_path):
    import datasets

    ds = datasets.Dataset.from_dict({"text": TEXTS[:3]})
    ds.info.description = "public description"
    ds.info.license = "cc-by-4.0"
    out = privatize_dataset(ds, cfg, seed=SEED, output_dir=tmp_path / "out")
    info = json.loads((tmp_path / "out" / "dataset_info.json").read_text())
    assert info["description"] == "public description" and info["license"] == "cc-by-4.0"
    assert out.info.license == "cc-by-4.0"


def test_vector_output_has_a_report(tiny_bert, tmp_path):
    """postprocess="vector" releases no ids: the report counts token classes from the input instead."""
    import datasets

    cfg = PrivatizerConfig(epsilon=3.0, model=tiny_bert, postprocess="vector")
    ds = datasets.Dataset.from_dict({"text": TEXTS[:6] + ["zebra☃ ok"]})
    out = privatize_dataset(ds, cfg, seed=SEED, output_dir=tmp_path / "v.parquet", shard_size=4)
    assert "input_ids" not in out.column_names and set(out["text"]) == {""}
    totals = privacy_report(tmp_path / "v.parquet")["totals"]
    assert totals["rows"] == 7 and totals["dp_tokens"] == sum(out["dp_tokens"])
    assert totals["special_tokens"] == 14 and totals["passthrough_tokens"] == 1


def test_streaming_output_goes_through_save_streaming(cfg, tmp_path, monkeypatch):
    """An IterableDataset output is handed to ``streaming.save_streaming`` (owned by the streaming module)."""
    calls = []
    real = pipeline.save_streaming

    def spy(ds, output, privs, **kw):
        calls.append((output, kw))
        return real(ds, output, privs, **kw)

    monkeypatch.setattr(pipeline, "save_streaming", spy)
    privatize_dataset(
        _source("jsonl", tmp_path), cfg, seed=SEED, streaming=True, output_dir=tmp_path / "s.jsonl", shard_size=7
    )
    assert calls == [(tmp_path / "s.jsonl", {"resume": False, "overwrite": False, "shard_size": 7})]


# --------------------------------------------------------------------------- the CLI, end to end
@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_cli_end_to_end(fmt, cfg, reference, tiny_bert, tmp_path):
    src = _source(fmt, tmp_path)
    seed_file = tmp_path / "seed"
    seed_file.write_text(hex(SEED))
    output = tmp_path / f"out.{fmt}"
    env = {**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    res = subprocess.run(
        [
            *CLI,
            "privatize",
            src,
            str(output),
            "--epsilon",
            "3",
            "--model",
            tiny_bert,
            "--seed-file",
            str(seed_file),
            "--shard-size",
            "10",
            "--batch-size",
            "4",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"wrote {output}: {N} rows, {sum(reference['dp_tokens'])} privatized tokens (madlib")
    assert str(report_path_for(output)) in res.stdout
    rows = _read_back(output)
    assert [r["text"] for r in rows] == reference["text"]
    assert [r["input_ids"] for r in rows] == reference["input_ids"]
    assert [r["label"] for r in rows] == list(range(N))
    assert json.loads(report_path_for(output).read_text())["totals"]["rows"] == N


# ---------------------------------------------------------------- issue 55 item 3: one check, the report returned
@pytest.mark.parametrize("streaming", [False, True])
def test_return_report_gives_the_report_saved_with_the_output(streaming, cfg, tmp_path):
    src = _source("jsonl", tmp_path)
    out = tmp_path / "out.jsonl"
    ds, report = privatize_dataset(src, cfg, seed=SEED, output_dir=out, streaming=streaming, return_report=True)
    saved = json.loads(report_path_for(out).read_text(encoding="utf-8"))
    assert report == {k: v for k, v in saved.items() if k != "output_sha256"}  # the saved one binds the output too
    assert report["totals"]["rows"] == N == sum(1 for _ in ds)
    with pytest.raises(InvalidParameterError, match="^return_report=True needs output_dir"):
        privatize_dataset(src, cfg, seed=SEED, return_report=True)


def test_each_input_is_checked_once(cfg, tmp_path, monkeypatch):
    """The source path is compared with the public files once, not before and again after loading."""
    vocab = tmp_path / "public.txt"
    vocab.write_text("good\nmovie\n", encoding="utf-8")
    cfg = PrivatizerConfig(epsilon=3.0, model=cfg.model, candidates={"set": "public_vocab", "vocab": str(vocab)})
    src = _source("jsonl", tmp_path)
    seen: list[tuple[str, str]] = []
    real = pipeline.check_public
    monkeypatch.setattr(pipeline, "check_public", lambda p, s, **kw: seen.append((str(p), str(s))) or real(p, s, **kw))
    privatize_dataset(src, cfg, seed=SEED, output_dir=tmp_path / "out.jsonl")
    assert seen.count((str(vocab), src)) == 1
    assert len(seen) == len(set(seen))
