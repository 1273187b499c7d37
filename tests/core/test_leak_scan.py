"""Leak scan: no text or seed in any file a run writes; the saved fingerprint is random (accounting.md §5, §7)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from hf_textdp import Privatizer, PrivatizerConfig, privatize_dataset
from hf_textdp.cli import main
from tests.utils import LEAK_SEED, SEED_NEEDLES, corpus, make_canaries, scan, write_jsonl


# each test gets its own datasets cache, so nothing leaks between tests or into ~/.cache
pytestmark = pytest.mark.usefixtures("isolated_datasets_cache")


def test_scanner_finds_what_it_looks_for(tmp_path):
    (tmp_path / "seed.txt").write_text(f"seed={LEAK_SEED}")
    (tmp_path / "hex.bin").write_bytes(b"\x00" + hex(LEAK_SEED).encode() + b"\x00")
    (tmp_path / "le.bin").write_bytes(b"xx" + LEAK_SEED.to_bytes(8, "little"))
    import pyarrow as pa
    import pyarrow.parquet as pq

    can = make_canaries(1)[0]
    pq.write_table(pa.table({"t": [can.decode() * 3]}), tmp_path / "t.parquet", compression="snappy")
    hits = scan([tmp_path], [can, *SEED_NEEDLES])
    assert set(hits) == {str(tmp_path / n) for n in ("seed.txt", "hex.bin", "le.bin", "t.parquet")}


LEAK_CASES = [
    ("api-folder", "api", "out", False),
    ("api-jsonl", "api", "out.jsonl", False),
    ("api-parquet", "api", "out.parquet", False),
    ("api-csv-keep-original", "api", "out.csv", True),
    ("api-folder-keep-original", "api", "out", True),
    ("cli-folder", "cli", "out", False),
    ("cli-jsonl", "cli", "out.jsonl", False),
    ("cli-parquet-keep-original", "cli", "out.parquet", True),
]


@pytest.mark.parametrize(("how", "name", "keep"), [c[1:] for c in LEAK_CASES], ids=[c[0] for c in LEAK_CASES])
def test_leak_scan(how, name, keep, tiny_bert, tmp_path, monkeypatch, capsys, isolated_datasets_cache):
    """Plant canary words and seed 918273645; grep every file the run writes (output, report, work folder,
    datasets cache, HF_TEXTDP_CACHE, logs, stderr). Canaries appear only with keep_original (then they must:
    the scanner can fail); the seed never."""
    import datasets

    canaries = make_canaries(4)
    texts = corpus(40, seed=61)
    for k, c in enumerate(canaries):
        texts[k * 9] = f"a review of {c.decode()} by someone"
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    src = write_jsonl(inputs / "in.jsonl", texts, label=list(range(40)))
    seed_file = inputs / "seed.txt"
    seed_file.write_text(str(LEAK_SEED))
    out_root = tmp_path / "outputs"
    out_root.mkdir()
    output = out_root / name
    textdp_cache = tmp_path / "textdp_cache"
    monkeypatch.setenv("HF_TEXTDP_CACHE", str(textdp_cache))
    log = logging.getLogger("hf_textdp")
    stream = _ListHandler()
    log.addHandler(stream)
    old_level = log.level
    log.setLevel(logging.DEBUG)
    capsys.readouterr()
    try:
        cfg = PrivatizerConfig(epsilon=3.0, model=tiny_bert, keep_original=keep)
        if how == "api":
            result = privatize_dataset(
                str(src), cfg, seed=LEAK_SEED, allow_weak_seed=True, output_dir=output, shard_size=16
            )
            in_process = privatize_dataset(
                str(src), cfg, seed=LEAK_SEED, allow_weak_seed=True
            )  # a plain map: its cache file is scanned too
            assert len(result) == len(in_process) == 40
        else:
            argv = [
                "privatize",
                str(src),
                str(output),
                "--epsilon",
                "3",
                "--model",
                tiny_bert,
                "--seed-file",
                str(seed_file),
                "--allow-weak-seed",  # the leak scan needs this fixed (small) seed
                "--shard-size",
                "16",
            ]
            assert main(argv + (["--keep-original"] if keep else [])) == 0
    finally:
        log.removeHandler(stream)
        log.setLevel(old_level)
    captured = capsys.readouterr()
    logs = tmp_path / "captured.log"
    logs.write_text("\n".join(stream.lines) + captured.out + captured.err, encoding="utf-8")

    # the input's own datasets cache files hold its text by definition; everything else must not
    own = datasets.load_dataset("json", data_files=str(src), split="train").cache_files
    own_files = [f["filename"] for f in own]
    roots = [out_root, isolated_datasets_cache, textdp_cache, logs]
    hits = scan(roots, canaries + SEED_NEEDLES, allowed=own_files)
    assert all(Path(f).is_file() and f.startswith(str(isolated_datasets_cache)) for f in own_files)
    assert scan(own_files, canaries) != {}  # the input cache does hold the canaries (the scan can see them)
    written = sorted(str(p.relative_to(out_root)) for p in out_root.rglob("*") if p.is_file())
    if name.endswith((".jsonl", ".parquet", ".csv")):
        assert written == [name, name + ".privacy_report.json"]
    else:
        assert written == sorted(
            ["out/data-00000-of-00001.arrow", "out/dataset_info.json", "out/state.json", "out/privacy_report.json"]
        )
    assert scan(roots, SEED_NEEDLES) == {}  # the seed: nowhere, ever
    if keep:  # the original text is in the data files (and may be in the cache of a plain map), nowhere else
        data_files = [str(p) for p in output.rglob("*.arrow")] if output.is_dir() else [str(output)]
        assert {f for f in hits if not f.startswith(str(isolated_datasets_cache))} == set(data_files), hits
        assert all(set(hits[f]) == set(canaries) for f in data_files)
    else:
        assert hits == {}, hits
    if how == "cli":
        assert "wrote" in captured.out


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def test_saved_fingerprint_is_random_not_the_in_process_one(tiny_bert, tmp_path):
    """accounting.md §5: the in-process fingerprint hashes the seeded privatizer; the saved one is fresh randomness."""
    import datasets

    ds = datasets.Dataset.from_dict({"text": corpus(20, seed=71)})
    cfg = PrivatizerConfig(epsilon=3.0, model=tiny_bert)
    in_process = privatize_dataset(ds, cfg, seed=LEAK_SEED, allow_weak_seed=True)._fingerprint
    direct = ds.map(
        Privatizer(cfg, seed=LEAK_SEED, allow_weak_seed=True), batched=True, with_indices=True
    )._fingerprint
    saved = []
    for k in range(2):
        out = privatize_dataset(ds, cfg, seed=LEAK_SEED, allow_weak_seed=True, output_dir=tmp_path / f"o{k}")
        state = json.loads((tmp_path / f"o{k}" / "state.json").read_text())
        saved.append(state["_fingerprint"])
        assert out._fingerprint not in (in_process, direct)  # the returned dataset derives from the random one
        assert state["_fingerprint"] not in (in_process, direct)
        assert len(state["_fingerprint"]) == 32
        assert out["text"] == privatize_dataset(ds, cfg, seed=LEAK_SEED, allow_weak_seed=True)["text"]
    assert saved[0] != saved[1]  # two identical seeded runs: unrelated fingerprints
    hits = scan([tmp_path], [in_process.encode(), direct.encode()])
    assert hits == {}
