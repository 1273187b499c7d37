"""Streaming: ``IterableDataset.map`` row ids, seeded equality with the in-memory path (testing.md §5), and
``streaming.save_streaming`` outputs: every format, the report from the written rows, resume after a crash."""

from __future__ import annotations

import json

import pytest

from hf_textdp import Privatizer, PrivatizerConfig, privacy_report, privatize_dataset
from hf_textdp.errors import OutputExistsError, ResumeError
from hf_textdp.io.paths import report_path_for, work_dir_for
from hf_textdp.io.reports import CONTENT_KEY
from hf_textdp.run.streaming import save_streaming
from tests.utils import corpus


SEED = 2**63 + 4242
N = 37  # not a multiple of any batch or shard size below
TEXTS = corpus(N, seed=58)


pytestmark = pytest.mark.usefixtures("isolated_datasets_cache")  # each test gets its own datasets cache


@pytest.fixture
def cfg(tiny_bert):
    return PrivatizerConfig(epsilon=3.0, model=tiny_bert)


def _source():
    import datasets

    return datasets.Dataset.from_dict({"text": TEXTS, "label": list(range(N))})


@pytest.fixture
def reference(cfg):
    """One plain in-memory ``Dataset.map`` with the seed."""
    return _source().map(Privatizer(cfg, seed=SEED), batched=True, with_indices=True)


def _rows(ds):
    return [dict(r) for r in ds]


# --------------------------------------------------------------------------- datasets' own semantics
@pytest.mark.parametrize("num_shards,batch_size", [(1, 4), (3, 5), (7, 1000)], ids=["1-shard", "3-shards", "7-shards"])
def test_iterable_map_with_indices_is_the_source_index(num_shards, batch_size):
    """datasets 5.x: ``IterableDataset.map(with_indices=True)`` counts rows from 0 in stream order, across data
    shards, exactly as ``Dataset.map`` does; ``load_state_dict`` restores the counter."""
    ds = _source()

    def idx(batch, indices):
        return {"idx": list(indices)}

    in_memory = ds.map(idx, batched=True, with_indices=True, batch_size=batch_size)["idx"]
    stream = ds.to_iterable_dataset(num_shards=num_shards).map(
        idx, batched=True, with_indices=True, batch_size=batch_size
    )
    assert [r["idx"] for r in stream] == in_memory == list(range(N))
    it = iter(stream)
    head = [next(it)["idx"] for _ in range(11)]
    state = stream.state_dict()
    again = ds.to_iterable_dataset(num_shards=num_shards).map(
        idx, batched=True, with_indices=True, batch_size=batch_size
    )
    again.load_state_dict(json.loads(json.dumps(state)))  # the state survives JSON (it is saved as such)
    assert head + [r["idx"] for r in again] == list(range(N))


# --------------------------------------------------------------------------- seeded equality
@pytest.mark.parametrize("num_shards,batch_size", [(1, 1), (3, 8), (5, 64)], ids=["1x1", "3x8", "5x64"])
def test_streamed_map_equals_in_memory_map(cfg, reference, num_shards, batch_size):
    priv = Privatizer(cfg, seed=SEED)
    stream = _source().to_iterable_dataset(num_shards=num_shards)
    out = stream.map(priv, batched=True, with_indices=True, batch_size=batch_size)
    assert _rows(out) == _rows(reference)


def test_privatize_dataset_streaming_equals_in_memory(cfg, reference):
    import datasets

    out = privatize_dataset(_source().to_iterable_dataset(num_shards=2), cfg, seed=SEED, streaming=True)
    assert isinstance(out, datasets.IterableDataset)
    assert _rows(out) == _rows(reference)


def test_id_column_keeps_each_rows_noise_after_a_shuffle(cfg, reference):
    """Where the stream's counter is not the source index (shuffle, DataLoader workers, split_dataset_by_node),
    an id column holding the source index gives every row the same draws as the in-memory run."""
    ds = _source().add_column("row_id", list(range(N)))
    stream = ds.to_iterable_dataset(num_shards=4).shuffle(seed=0, buffer_size=8)
    out = stream.map(Privatizer(cfg, seed=SEED, id_column="row_id"), batched=True, with_indices=True)
    by_id = {r["row_id"]: r for r in out}
    assert sorted(by_id) == list(range(N))
    for i, ref in enumerate(reference):
        got = dict(by_id[i])
        del got["row_id"]
        assert got == dict(ref)


# --------------------------------------------------------------------------- saved outputs
@pytest.mark.parametrize(
    "name", ["out.jsonl", "out.parquet", "out.csv", "out_folder"], ids=["jsonl", "parquet", "csv", "folder"]
)
def test_streamed_output_equals_the_in_memory_output(name, cfg, tmp_path):
    """Same bytes (jsonl, csv) or rows (parquet, folder), and the same report, as the in-memory sharded run."""
    import datasets

    src = tmp_path / "src.jsonl"
    _source().to_json(str(src))
    mem, streamed = tmp_path / "mem" / name, tmp_path / "stream" / name
    privatize_dataset(str(src), cfg, seed=SEED, output_dir=mem)
    out = privatize_dataset(str(src), cfg, seed=SEED, output_dir=streamed, streaming=True)
    assert isinstance(out, datasets.IterableDataset)
    # the same report, but for the content hash of outputs whose bytes may differ (parquet, folders)
    same_bytes = name.endswith((".jsonl", ".csv"))
    skip = () if same_bytes else (CONTENT_KEY,)
    assert {k: v for k, v in privacy_report(streamed).items() if k not in skip} == {
        k: v for k, v in privacy_report(mem).items() if k not in skip
    }
    assert privacy_report(streamed)["totals"]["rows"] == N
    assert not work_dir_for(streamed).exists()
    if name.endswith((".jsonl", ".csv")):
        assert streamed.read_bytes() == mem.read_bytes()
    elif name.endswith(".parquet"):
        assert _rows(datasets.Dataset.from_parquet(str(streamed))) == _rows(datasets.Dataset.from_parquet(str(mem)))
    else:
        assert _rows(datasets.load_from_disk(str(streamed))) == _rows(datasets.load_from_disk(str(mem)))
        assert report_path_for(streamed).is_file()


def test_small_shards_give_the_same_output(cfg, reference, tmp_path):
    import datasets

    priv = Privatizer(cfg, seed=SEED)
    stream = _source().to_iterable_dataset(num_shards=3).map(priv, batched=True, with_indices=True, batch_size=4)
    report = save_streaming(stream, tmp_path / "o.parquet", {"": priv}, shard_size=5)
    assert report["totals"]["rows"] == N
    assert _rows(datasets.Dataset.from_parquet(str(tmp_path / "o.parquet"))) == _rows(reference)


def test_dataset_dict_streams_to_a_folder_with_split_keys(cfg, tmp_path):
    import datasets

    dd = datasets.DatasetDict({"train": _source(), "test": _source().select(range(9))})
    mem = privatize_dataset(dd, cfg, seed=SEED)
    stream = datasets.IterableDatasetDict({k: v.to_iterable_dataset(num_shards=2) for k, v in dd.items()})
    privatize_dataset(stream, cfg, seed=SEED, streaming=True, output_dir=tmp_path / "dd")
    saved = datasets.load_from_disk(str(tmp_path / "dd"))
    assert sorted(saved) == ["test", "train"]
    for split in ("train", "test"):
        assert _rows(saved[split]) == _rows(mem[split])
    assert privacy_report(tmp_path / "dd")["totals"]["rows"] == N + 9


@pytest.mark.parametrize("name", ["s.jsonl", "folder"])
def test_streamed_output_returns_the_saved_rows_not_a_second_release(cfg, tmp_path, name):
    """Without a seed, iterating a lazily mapped stream twice would draw fresh noise each time: the
    returned stream must read what was saved."""
    import datasets

    out = privatize_dataset(_source().to_iterable_dataset(), cfg, streaming=True, output_dir=tmp_path / name)
    assert isinstance(out, datasets.IterableDataset)
    first, second = list(out), list(out)
    assert first == second
    if name == "folder":
        saved = list(datasets.load_from_disk(str(tmp_path / name)))
    else:
        saved = list(datasets.load_dataset("json", data_files=str(tmp_path / name), split="train"))
    assert first == saved and len(first) == N


def test_streamed_output_is_not_read_whole_again_to_return_its_stream(cfg, tmp_path, monkeypatch):
    """The input checks (every line parsed) run on the source only, not on the output this run just wrote
    (issue 58 item 3: that second pass was 1.5-5 s of MR x 10's run); the returned stream is still the saved rows."""
    from hf_textdp.io import sources

    checked = []
    real = sources._check_structure
    monkeypatch.setattr(sources, "_check_structure", lambda path: (checked.append(path.name), real(path))[1])
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS), encoding="utf-8")
    out = privatize_dataset(str(src), cfg, seed=SEED, streaming=True, output_dir=tmp_path / "out.jsonl")
    assert checked == ["in.jsonl"]
    saved = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [dict(r) for r in out] == saved and len(saved) == N


def test_vector_output_report_counts_the_streamed_rows(tiny_bert, tmp_path):
    cfg = PrivatizerConfig(epsilon=3.0, model=tiny_bert, postprocess="vector")
    texts = TEXTS[:6] + ["zebra☃ ok"]
    import datasets

    ds = datasets.Dataset.from_dict({"text": texts})
    privatize_dataset(ds, cfg, seed=SEED, output_dir=tmp_path / "mem.parquet")
    privatize_dataset(ds.to_iterable_dataset(), cfg, seed=SEED, output_dir=tmp_path / "s.parquet", streaming=True)
    assert privacy_report(tmp_path / "s.parquet") == privacy_report(tmp_path / "mem.parquet")


def test_existing_output_is_refused_unless_overwrite(cfg, tmp_path):
    out = tmp_path / "o.jsonl"
    out.write_text("old\n")
    priv = Privatizer(cfg, seed=SEED)

    def stream():
        return _source().to_iterable_dataset().map(priv, batched=True, with_indices=True)

    with pytest.raises(OutputExistsError, match="already exists"):
        save_streaming(stream(), out, {"": priv})
    assert out.read_text() == "old\n" and not work_dir_for(out).exists()
    save_streaming(stream(), out, {"": priv}, overwrite=True)
    assert len(out.read_text().splitlines()) == N


# --------------------------------------------------------------------------- crash and resume
class _Crashing:
    """The privatizer, but the process 'dies' (RuntimeError) once a row id reaches ``crash_at``."""

    def __init__(self, priv, crash_at=None):
        self.priv, self.crash_at, self.seen = priv, crash_at, []

    def __call__(self, batch, indices):
        if self.crash_at is not None and max(indices) >= self.crash_at:
            raise RuntimeError("simulated crash")
        self.seen.extend(indices)
        return self.priv(batch, indices)


def test_resume_after_a_crash_writes_every_row_once(cfg, reference, tmp_path):
    import datasets

    out = tmp_path / "o.parquet"
    priv = Privatizer(cfg, seed=SEED)

    def stream(fn):
        return _source().to_iterable_dataset(num_shards=2).map(fn, batched=True, with_indices=True, batch_size=5)

    first = _Crashing(priv, crash_at=27)
    with pytest.raises(RuntimeError, match="simulated crash"):
        save_streaming(stream(first), out, {"": priv}, shard_size=10)
    work = work_dir_for(out)
    assert not out.exists() and sorted(p.name for p in (work / "split-000").glob("*.arrow")) == [
        "shard-00000.arrow",
        "shard-00001.arrow",
    ]
    # nothing secret in the work folder: no text, no seed
    for path in work.rglob("*.json"):
        text = path.read_text()
        assert str(SEED) not in text and hex(SEED)[2:] not in text and TEXTS[0] not in text

    with pytest.raises(OutputExistsError, match="partial run"):
        save_streaming(stream(priv), out, {"": priv}, shard_size=10)
    other = Privatizer(PrivatizerConfig(epsilon=4.0, model=cfg.model), seed=SEED)
    with pytest.raises(ResumeError, match="PrivatizerConfig differs"):
        save_streaming(stream(other), out, {"": other}, resume=True, shard_size=10)

    other_seed = Privatizer(cfg, seed=SEED + 1)
    with pytest.raises(ResumeError, match="privatized with another seed"):
        save_streaming(stream(other_seed), out, {"": other_seed}, resume=True, shard_size=10)

    second = _Crashing(priv)
    report = save_streaming(stream(second), out, {"": priv}, resume=True, shard_size=10)
    # Continued from the last finished shard: datasets restarts at its last checkpoint, at most one shard and
    # one map batch back, and skips what was already yielded; recomputed rows are not written again. (The seed
    # check privatizes the first shard's rows again first, and writes nothing.)
    resumed = set(second.seen) - set(range(10))
    assert set(range(20, N)) <= resumed and min(resumed) >= 20 - 10 - 5
    assert report["totals"]["rows"] == N and not work.exists()
    assert _rows(datasets.Dataset.from_parquet(str(out))) == _rows(reference)

    with pytest.raises(OutputExistsError, match="nothing to resume"):
        save_streaming(stream(priv), out, {"": priv}, resume=True)


def test_a_bad_row_discards_the_partial_run(cfg, tmp_path):
    import datasets

    from hf_textdp.errors import InvalidRowError

    ds = datasets.Dataset.from_dict({"text": TEXTS[:12] + [None] + TEXTS[12:20]})
    priv = Privatizer(cfg, seed=SEED)
    stream = ds.to_iterable_dataset().map(priv, batched=True, with_indices=True, batch_size=4)
    with pytest.raises(InvalidRowError, match="row 12"):
        save_streaming(stream, tmp_path / "o.jsonl", {"": priv}, shard_size=4)
    assert not work_dir_for(tmp_path / "o.jsonl").exists() and not (tmp_path / "o.jsonl").exists()


def test_the_cli_does_not_build_a_stream_it_discards(cfg, tmp_path, monkeypatch):
    """Issue 58 item 3: ``hf-textdp privatize --streaming`` prints the report and never reads its output back through
    ``load_dataset`` (1.4 s after MR x 10); ``privatize_dataset`` still returns that stream, and the file and
    report are the same either way."""
    import datasets

    import hf_textdp.run.pipeline as pipeline
    from hf_textdp.cli import main

    src = tmp_path / "src.jsonl"
    _source().to_json(str(src))
    built: list[object] = []
    real = pipeline.stream_saved_output
    monkeypatch.setattr(pipeline, "stream_saved_output", lambda out: built.append(out) or real(out))
    seed_file = tmp_path / "seed"
    seed_file.write_text(str(SEED))
    cli_out, api_out = tmp_path / "cli.jsonl", tmp_path / "api.jsonl"
    args = ["privatize", str(src), str(cli_out), "--streaming", "--model", cfg.model, "--epsilon", "3"]
    assert main([*args, "--seed-file", str(seed_file)]) == 0
    assert built == [] and cli_out.read_bytes()
    out = privatize_dataset(str(src), cfg, seed=SEED, output_dir=api_out, streaming=True)
    assert isinstance(out, datasets.IterableDataset) and built == [api_out]
    assert cli_out.read_bytes() == api_out.read_bytes()
    assert privacy_report(cli_out)["totals"] == privacy_report(api_out)["totals"]
