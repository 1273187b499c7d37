"""Resume: a partial run is reused only when it matches; a locked work folder is refused; kill -9 then
--resume gives the clean output (issue 7, testing.md §5)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import hf_textdp.run.sharded as sharded
from hf_textdp import PrivatizerConfig, privatize_dataset
from hf_textdp.errors import OutputExistsError, ResumeError
from hf_textdp.io.files import release_lock, try_lock
from hf_textdp.io.paths import report_path_for, work_dir_for
from hf_textdp.io.workdir import atomic_write_arrow as REAL_WRITE
from tests.utils import (
    CLI,
    LEAK_SEED,
    SEED_NEEDLES,
    corpus,
    make_canaries,
    read_jsonl,
    scan,
    small_jsonl,
    write_jsonl,
)


# each test gets its own datasets cache, so nothing leaks between tests or into ~/.cache
pytestmark = pytest.mark.usefixtures("isolated_datasets_cache")


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Make the (n+1)-th shard write raise KeyboardInterrupt, as a Ctrl-C in the middle of a run would."""
    count = {"n": 0}

    def write(path, table, **kwargs):
        if count["n"] >= n:
            raise KeyboardInterrupt
        count["n"] += 1
        REAL_WRITE(path, table, **kwargs)

    monkeypatch.setattr(sharded, "atomic_write_arrow", write)


# (id, first-run kwargs, resume kwargs, error type or None, message fragment)
RESUME_CASES: list[tuple[str, dict[str, Any], dict[str, Any], type[Exception] | None, str | None]] = [
    ("same-settings", {}, {}, None, None),
    ("other-epsilon", {}, {"epsilon": 3.0}, ResumeError, r"its PrivatizerConfig differs"),
    ("other-shard-size", {}, {"shard_size": 4}, ResumeError, r"its shard_size was 5, this run's is 4"),
    ("other-input", {}, {"n": 13}, ResumeError, r"its input differs"),
    ("seed-dropped", {}, {"seed": None}, ResumeError, r"it was seeded and this run is unseeded"),
    (
        "other-seed",
        {},
        {"seed": 2**40 + 8},
        ResumeError,
        r"it was privatized with another seed \(its seed verifier does not match",
    ),
    ("other-text-column", {}, {"text_column": "text2"}, ResumeError, r"its text_column was 'text'"),
    (
        "no-resume-flag",
        {},
        {"resume": False},
        OutputExistsError,
        r"a partial run exists in .*\(2 finished shard\(s\)\); pass resume=True \(--resume\)",
    ),
    ("overwrite-discards", {}, {"resume": False, "overwrite": True}, None, None),
]


@pytest.mark.parametrize(
    ("first", "second", "exc", "match"), [c[1:] for c in RESUME_CASES], ids=[c[0] for c in RESUME_CASES]
)
def test_resume_reuses_only_a_matching_partial_run(first, second, exc, match, tiny_bert, tmp_path, monkeypatch):
    import datasets

    def source(n: int) -> Any:
        texts = corpus(n, seed=41)
        return datasets.Dataset.from_dict({"text": texts, "text2": texts})

    output = tmp_path / "out"
    kwargs = {"seed": 2**40 + 7, "shard_size": 5, "output_dir": output}
    _interrupt_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        privatize_dataset(source(12), PrivatizerConfig(epsilon=2.0, model=tiny_bert), **kwargs, **first)
    work = work_dir_for(output)
    done = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes()) for p in (work / "split-000").iterdir()}
    assert sorted(done) == ["shard-00000.arrow", "shard-00001.arrow"] and not output.exists()

    second = dict(second)
    cfg = PrivatizerConfig(epsilon=second.pop("epsilon", 2.0), model=tiny_bert)
    ds = source(second.pop("n", 12))
    run_kwargs = {**kwargs, "resume": True, **second}
    written: list[str] = []

    def write(path: Path, table: Any, **kwargs: Any) -> None:
        written.append(Path(path).name)
        REAL_WRITE(path, table, **kwargs)

    monkeypatch.setattr(sharded, "atomic_write_arrow", write)
    seen = {}
    real_close = sharded.ShardedRun.close

    def close(self, *, keep):  # look at the shards just before the work folder goes
        seen.update({p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (work / "split-000").glob("*.arrow")})
        real_close(self, keep=keep)

    monkeypatch.setattr(sharded.ShardedRun, "close", close)
    if exc is not None:
        with pytest.raises(exc, match=match):
            privatize_dataset(ds, cfg, **run_kwargs)
        assert not output.exists()
        assert {p.name: p.read_bytes() for p in (work / "split-000").iterdir()} == {k: v[2] for k, v in done.items()}
        return
    result = privatize_dataset(ds, cfg, **run_kwargs)
    clean = privatize_dataset(ds, cfg, seed=2**40 + 7)  # one plain Dataset.map, no shards
    assert result["text"] == clean["text"] and result["input_ids"] == clean["input_ids"]
    assert not work.exists()
    if run_kwargs.get("overwrite"):
        assert written == ["shard-00000.arrow", "shard-00001.arrow", "shard-00002.arrow"]
    else:  # the finished shards were neither recomputed nor rewritten
        assert written == ["shard-00002.arrow"]
        assert {k: seen[k] for k in done} == {k: v[:2] for k, v in done.items()}


def test_resume_of_vectors_checks_the_seed_on_the_released_vectors(tiny_bert, tmp_path, monkeypatch):
    """postprocess="vector" releases no input_ids: the seed check compares the released vectors."""
    import datasets

    ds = datasets.Dataset.from_dict({"text": corpus(12, seed=43)})
    cfg = PrivatizerConfig(epsilon=2.0, model=tiny_bert, postprocess="vector")
    kwargs = {"shard_size": 5, "output_dir": tmp_path / "out"}
    _interrupt_after(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        privatize_dataset(ds, cfg, seed=2**40 + 7, **kwargs)
    monkeypatch.setattr(sharded, "atomic_write_arrow", REAL_WRITE)
    with pytest.raises(ResumeError, match="privatized with another seed"):
        privatize_dataset(ds, cfg, seed=2**40 + 8, resume=True, **kwargs)
    resumed = privatize_dataset(ds, cfg, seed=2**40 + 7, resume=True, **kwargs)
    assert resumed["inputs_embeds"] == privatize_dataset(ds, cfg, seed=2**40 + 7)["inputs_embeds"]


@pytest.mark.parametrize("streaming", [False, True])
def test_resume_with_another_seed_is_refused_at_epsilon_100(streaming, tiny_bert, tmp_path, monkeypatch):
    """At epsilon = 100 most tokens are kept under any seed, so re-privatized rows agree by chance: the check
    compares the seed with the manifest's salted scrypt verifier instead (issue 37)."""
    import hf_textdp.run.streaming as streaming_mod
    from hf_textdp.io.workdir import read_json_object

    src = str(write_jsonl(tmp_path / "in.jsonl", corpus(30, seed=5)))
    cfg = PrivatizerConfig(epsilon=100.0, model=tiny_bert)
    output = tmp_path / "o.jsonl"
    kwargs: dict[str, Any] = {"output_dir": output, "shard_size": 10, "streaming": streaming}
    if streaming:
        calls = {"n": 0}

        def write(path, table, **kw):
            if calls["n"] >= 1:
                raise KeyboardInterrupt
            calls["n"] += 1
            REAL_WRITE(path, table, **kw)

        monkeypatch.setattr(streaming_mod, "atomic_write_arrow", write)
    else:
        _interrupt_after(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        privatize_dataset(src, cfg, seed=2**40 + 7, **kwargs)
    manifest = read_json_object(work_dir_for(output) / "manifest.json")
    assert manifest is not None and manifest["seed_verifier"]["kdf"] == "scrypt"
    assert str(2**40 + 7) not in json.dumps(manifest) and format(2**40 + 7, "x") not in json.dumps(manifest)
    monkeypatch.setattr(streaming_mod if streaming else sharded, "atomic_write_arrow", REAL_WRITE)
    for other in (2**40 + 8, 2**41, 2**63 + 12345):
        with pytest.raises(ResumeError, match="privatized with another seed"):
            privatize_dataset(src, cfg, seed=other, resume=True, **kwargs)
    privatize_dataset(src, cfg, seed=2**40 + 7, resume=True, **kwargs)
    assert [r["text"] for r in read_jsonl(output)] == privatize_dataset(src, cfg, seed=2**40 + 7)["text"]


def test_resume_with_nothing_to_resume_then_of_a_finished_output(tiny_bert, tmp_path):
    src = small_jsonl(tmp_path)
    cfg = PrivatizerConfig(epsilon=2.0, model=tiny_bert)
    output = tmp_path / "o.parquet"
    privatize_dataset(str(src), cfg, seed=2**40 + 1, output_dir=output, resume=True)  # no partial run: a fresh run
    assert output.is_file() and not work_dir_for(output).exists()
    with pytest.raises(OutputExistsError, match="nothing to resume"):
        privatize_dataset(str(src), cfg, seed=2**40 + 1, output_dir=output, resume=True)


def test_a_locked_work_folder_is_refused(tiny_bert, tmp_path):
    """Two runs never write one output: the second sees the first's lock (dropped by the kernel on death)."""
    src = small_jsonl(tmp_path)
    output = tmp_path / "o.jsonl"
    work = work_dir_for(output)
    work.mkdir()
    fd = try_lock(work / "lock")
    assert fd is not None
    try:
        for resume in (True, False):
            with pytest.raises(OutputExistsError, match="another run is writing it"):
                privatize_dataset(
                    str(src),
                    PrivatizerConfig(epsilon=2.0, model=tiny_bert),
                    output_dir=output,
                    resume=resume,
                    overwrite=not resume,
                )
    finally:
        release_lock(fd)
    privatize_dataset(str(src), PrivatizerConfig(epsilon=2.0, model=tiny_bert), output_dir=output)
    assert output.is_file() and not work.exists()


def _stat(folder: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for p in folder.glob("shard-*.arrow"):
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        out[p.name] = (st.st_ino, st.st_mtime_ns)
    return out


def _wait_for_shards(
    proc: subprocess.Popen[bytes], folder: Path, predicate: Any, timeout: float = 240.0
) -> dict[str, tuple[int, int]]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        shards = _stat(folder)
        if predicate(shards):
            return shards
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (rc={proc.returncode}) before the expected shards appeared")
        time.sleep(0.02)
    raise AssertionError("timed out waiting for shards")


@pytest.mark.slow
def test_sigkill_then_resume_gives_the_clean_output(tiny_bert, tmp_path):
    """SIGKILL the CLI after 3 of 15 shards: no output, only the work folder (which leaks nothing). --resume
    keeps the recorded ones of those shard files untouched (same inode and mtime while it writes the others) and
    the result is byte-identical to a clean run with the same seed."""
    canaries = make_canaries(3)
    n = 3000
    texts = corpus(n, seed=51)
    for k, c in enumerate(canaries):
        texts[k * 997] = f"the movie {c.decode()} was good"
    src = write_jsonl(tmp_path / "in.jsonl", texts, label=list(range(n)))
    seed_file = tmp_path / "seed.txt"
    seed_file.write_text(f"{LEAK_SEED}\n")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    output = out_dir / "o.jsonl"
    work = work_dir_for(output)
    env = {
        **os.environ,
        "HF_DATASETS_CACHE": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
        "HF_TEXTDP_CACHE": str(tmp_path / "textdp_cache"),
    }
    argv = [
        *CLI,
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
        "200",
    ]

    logs = tmp_path / "logs"
    logs.mkdir()
    with open(logs / "run1.err", "wb") as err1:  # files, not pipes: a full pipe would stall the run
        proc = subprocess.Popen(argv, env=env, stdout=err1, stderr=err1)
        try:
            killed_at = _wait_for_shards(proc, work / "split-000", lambda s: len(s) >= 3)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not output.exists() and not report_path_for(output).exists()
    left = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*"))
    finished = _stat(work / "split-000")
    assert set(killed_at) <= set(finished) and len(finished) < 15
    # only the work folder: manifest, lock, whole shards, and at most one temporary of the shard in progress
    assert [x for x in left if not x.startswith(".o.jsonl.partial")] == []
    assert all(x.endswith((".arrow", ".tmp", "manifest.json", "lock", "split-000", ".partial")) for x in left), left
    manifest = json.loads((work / "manifest.json").read_text())
    assert manifest["seeded"] is True and manifest["shard_size"] == 200 and manifest["splits"][0]["rows"] == n
    assert scan([out_dir], canaries + SEED_NEEDLES) == {}  # neither text nor seed in the work folder
    # a shard is reused only once the manifest records its SHA-256 (issue 53): the kill may fall between a
    # shard's rename and its record, and that one shard is computed again
    recorded = {k: v for k, v in finished.items() if f"split-000/{k}" in manifest["shards"]}
    assert len(finished) - len(recorded) <= 1

    with open(logs / "run2.out", "wb") as out2, open(logs / "run2.err", "wb") as err2:
        proc = subprocess.Popen([*argv, "--resume"], env=env, stdout=out2, stderr=err2)
        try:
            later = _wait_for_shards(proc, work / "split-000", lambda s: bool(set(s) - set(finished)))
            proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, (logs / "run2.err").read_text()
    assert "wrote" in (logs / "run2.out").read_text()
    assert {k: later[k] for k in recorded} == recorded  # (a) finished, recorded shards not rewritten
    assert not work.exists()

    ref = tmp_path / "ref.jsonl"
    import datasets

    ref_ds = datasets.load_dataset("json", data_files=str(src), split="train", cache_dir=str(tmp_path / "cache"))
    privatize_dataset(
        ref_ds, PrivatizerConfig(epsilon=3.0, model=tiny_bert), seed=LEAK_SEED, allow_weak_seed=True, output_dir=ref
    )
    assert output.read_bytes() == ref.read_bytes()  # (b) equal to a clean single run, shard size 10,000
    assert scan([out_dir, logs], canaries + SEED_NEEDLES) == {}
