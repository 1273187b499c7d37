"""Resume does not trust what it can check (issue 53, R1 and R5): each shard's SHA-256 is recorded in a sealed
manifest; a copied, flipped, foreign or unrecorded shard is computed again (the output is byte-identical to a
clean run's), an edited manifest (``seeded: false``, a shard's hash, the seal itself) is refused with one line,
and a link inside the work folder is removed, never followed."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import hf_textdp.run.sharded as sharded_mod
import hf_textdp.run.streaming as streaming_mod
from hf_textdp import PrivatizerConfig, privatize_dataset
from hf_textdp.errors import OutputExistsError, ResumeError
from hf_textdp.io.integrity import file_sha256, seal_of
from hf_textdp.io.paths import work_dir_for
from hf_textdp.io.workdir import atomic_write_arrow as REAL_WRITE
from tests.utils import corpus, write_jsonl


pytestmark = pytest.mark.usefixtures("isolated_datasets_cache")
SEED = 2**40 + 7
N, SHARD = 40, 10  # 4 shards; a run is stopped after 3


def _source(tmp_path: Path) -> str:
    path = tmp_path / "in.jsonl"
    if not path.exists():
        write_jsonl(path, corpus(N, seed=61), label=list(range(N)))
    return str(path)


def _run(tmp_path: Path, model: str, output: Path, *, streaming: bool, epsilon: float = 2.0, **kw: Any) -> Any:
    kwargs: dict[str, Any] = {"seed": SEED, **kw}
    return privatize_dataset(
        _source(tmp_path),
        PrivatizerConfig(epsilon=epsilon, model=model),
        output_dir=output,
        shard_size=SHARD,
        streaming=streaming,
        **kwargs,
    )


def _stopped(
    tmp_path: Path, model: str, output: Path, monkeypatch: pytest.MonkeyPatch, *, streaming: bool, **kw: Any
) -> Path:
    """A run stopped (Ctrl-C) after 3 finished shards; returns its work folder."""
    module = streaming_mod if streaming else sharded_mod
    count = {"n": 0}

    def write(path: Any, table: Any, **kwargs: Any) -> None:
        if count["n"] >= 3:
            raise KeyboardInterrupt
        count["n"] += 1
        REAL_WRITE(path, table, **kwargs)

    monkeypatch.setattr(module, "atomic_write_arrow", write)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, model, output, streaming=streaming, **kw)
    monkeypatch.setattr(module, "atomic_write_arrow", REAL_WRITE)
    work = work_dir_for(output)
    assert sorted(p.name for p in (work / "split-000").glob("*.arrow")) == [f"shard-0000{k}.arrow" for k in range(3)]
    return work


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))


def _manifest(work: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((work / "manifest.json").read_text())
    return data


def _edit_manifest(work: Path, edit: Callable[[dict[str, Any]], None], *, reseal: bool = False) -> None:
    m = _manifest(work)
    edit(m)
    if reseal:  # what someone who knows the format but not the seed can do: seal it as an unseeded one
        m["seal"] = seal_of(m, None)
    (work / "manifest.json").write_text(json.dumps(m))


@pytest.fixture(scope="module")
def clean_bytes(tiny_bert: str, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The output of one uninterrupted seeded run (the in-memory and streaming outputs are equal)."""
    tmp = tmp_path_factory.mktemp("clean")
    _run(tmp, tiny_bert, tmp / "o.jsonl", streaming=False)
    return (tmp / "o.jsonl").read_bytes()


def _copy_shard(work: Path, tmp_path: Path, model: str, mp: pytest.MonkeyPatch, streaming: bool) -> None:
    src = work / "split-000" / "shard-00000.arrow"
    (work / "split-000" / "shard-00001.arrow").write_bytes(src.read_bytes())  # rows 10-19 carry rows 0-9


def _flip_shard(work: Path, tmp_path: Path, model: str, mp: pytest.MonkeyPatch, streaming: bool) -> None:
    _flip(work / "split-000" / "shard-00001.arrow")


def _foreign_shard(work: Path, tmp_path: Path, model: str, mp: pytest.MonkeyPatch, streaming: bool) -> None:
    """shard-00001 taken from an epsilon=50 run of the same input and seed."""
    other = _stopped(tmp_path, model, tmp_path / "e50.jsonl", mp, streaming=streaming, epsilon=50.0)
    (work / "split-000" / "shard-00001.arrow").write_bytes((other / "split-000" / "shard-00001.arrow").read_bytes())


def _unrecorded_shard(work: Path, tmp_path: Path, model: str, mp: pytest.MonkeyPatch, streaming: bool) -> None:
    """shard-00003 (not finished by the stopped run, so not recorded) dropped in from an epsilon=50 run."""
    other = _stopped(tmp_path, model, tmp_path / "e50.jsonl", mp, streaming=streaming, epsilon=50.0)
    (work / "split-000" / "shard-00003.arrow").write_bytes((other / "split-000" / "shard-00002.arrow").read_bytes())


def _deleted_shard(work: Path, tmp_path: Path, model: str, mp: pytest.MonkeyPatch, streaming: bool) -> None:
    (work / "split-000" / "shard-00001.arrow").unlink()


SHARD_CASES = {
    "copied": (_copy_shard, "shard-00001.arrow does not match the SHA-256"),
    "flipped-byte": (_flip_shard, "shard-00001.arrow does not match the SHA-256"),
    "foreign-epsilon": (_foreign_shard, "shard-00001.arrow does not match the SHA-256"),
    "unrecorded": (_unrecorded_shard, None),  # overwritten in stream order, or named by the in-memory run
    "deleted": (_deleted_shard, "the recorded shard split-000/shard-00001.arrow is missing"),
}


@pytest.mark.parametrize("streaming", [False, True], ids=["sharded", "streaming"])
@pytest.mark.parametrize("case", list(SHARD_CASES))
def test_a_changed_shard_is_computed_again_to_the_clean_output(
    case, streaming, clean_bytes, tiny_bert, tmp_path, monkeypatch, caplog
):
    output = tmp_path / "o.jsonl"
    work = _stopped(tmp_path, tiny_bert, output, monkeypatch, streaming=streaming)
    tamper, warning = SHARD_CASES[case]
    tamper(work, tmp_path, tiny_bert, monkeypatch, streaming)
    with caplog.at_level(logging.WARNING):
        _run(tmp_path, tiny_bert, output, streaming=streaming, resume=True)
    assert output.read_bytes() == clean_bytes
    if warning is not None:
        assert warning in caplog.text
    if case == "unrecorded" and not streaming:
        assert "shard-00003.arrow is not recorded in the manifest: computing it again" in caplog.text


def _seeded_false(m: dict[str, Any]) -> None:
    m["seeded"] = False


def _seeded_false_no_verifier(m: dict[str, Any]) -> None:
    m["seeded"] = False
    m["seed_verifier"] = None


def _hash_of_copied_shard(m: dict[str, Any]) -> None:
    m["shards"]["split-000/shard-00001.arrow"]["sha256"] = m["shards"]["split-000/shard-00000.arrow"]["sha256"]


MANIFEST_CASES = {
    # (edit, reseal as unseeded, seed of the resume, message)
    "seeded-false": (_seeded_false, False, None, r"its manifest.json was edited \(it says seeded=False but holds a"),
    "seeded-false-resealed": (_seeded_false, True, None, r"it says seeded=False but holds a seed verifier"),
    "seeded-false-no-verifier": (_seeded_false_no_verifier, False, None, "its seal does not match its content"),
    "shard-hash-edited": (_hash_of_copied_shard, False, SEED, "its seal does not match its content"),
    "shard-hash-edited-resealed": (_hash_of_copied_shard, True, SEED, "its seal does not match its content"),
}


@pytest.mark.parametrize("streaming", [False, True], ids=["sharded", "streaming"])
@pytest.mark.parametrize("case", list(MANIFEST_CASES))
def test_an_edited_manifest_is_refused(case, streaming, tiny_bert, tmp_path, monkeypatch):
    output = tmp_path / "o.jsonl"
    work = _stopped(tmp_path, tiny_bert, output, monkeypatch, streaming=streaming)
    edit, reseal, seed, message = MANIFEST_CASES[case]
    if case.startswith("shard-hash"):
        _copy_shard(work, tmp_path, tiny_bert, monkeypatch, streaming)
    _edit_manifest(work, edit, reseal=reseal)
    with pytest.raises(ResumeError, match=message) as err:
        _run(tmp_path, tiny_bert, output, streaming=streaming, resume=True, seed=seed)
    assert "\n" not in str(err.value) and "--overwrite" in str(err.value)
    assert not output.exists()
    _run(tmp_path, tiny_bert, output, streaming=streaming, overwrite=True)  # what the message says works
    assert output.is_file()


def test_an_unseeded_manifest_edited_by_hand_is_refused(tiny_bert, tmp_path, monkeypatch):
    output = tmp_path / "o.jsonl"
    work = _stopped(tmp_path, tiny_bert, output, monkeypatch, streaming=False, seed=None)
    _edit_manifest(work, _hash_of_copied_shard)
    with pytest.raises(ResumeError, match="its seal does not match its content"):
        _run(tmp_path, tiny_bert, output, streaming=False, resume=True, seed=None)


def test_the_manifest_records_each_shard_hash_and_a_seal_keyed_by_the_seed(tiny_bert, tmp_path, monkeypatch):
    work = _stopped(tmp_path, tiny_bert, tmp_path / "o.jsonl", monkeypatch, streaming=False)
    m = _manifest(work)
    assert m["format"] == "hf_textdp/shards/v2" and m["seal"]["kind"] == "hmac-sha256"
    assert sorted(m["shards"]) == [f"split-000/shard-0000{k}.arrow" for k in range(3)]
    for rel, rec in m["shards"].items():
        assert rec == {"rows": SHARD, "sha256": file_sha256(work / rel)}
    assert m["seal"] != seal_of(m, None)  # not an unseeded seal: recomputing it needs the seed
    assert str(SEED) not in json.dumps(m) and format(SEED, "x") not in json.dumps(m)


# ---------------------------------------------------------------- R5: no link followed inside the work folder
@pytest.mark.parametrize("streaming", [False, True], ids=["sharded", "streaming"])
@pytest.mark.parametrize("where", ["split-000", "split-000/shard-00001.arrow", "manifest.json", "lock"])
def test_a_link_inside_the_work_folder_is_removed_never_followed(
    where, streaming, clean_bytes, tiny_bert, tmp_path, monkeypatch
):
    output = tmp_path / "o.jsonl"
    work = _stopped(tmp_path, tiny_bert, output, monkeypatch, streaming=streaming)
    target = tmp_path / "theirs"
    target.mkdir()
    (target / "keep.txt").write_text("mine\n")
    victim = target / "keep.txt"
    link = work / where
    if where == "split-000":
        for p in link.iterdir():  # the split folder moved aside, a link to someone's folder in its place
            p.rename(target / p.name)
        link.rmdir()
        link.symlink_to(target, target_is_directory=True)
    else:
        link.unlink()
        link.symlink_to(victim)
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    if where == "manifest.json":  # without its manifest the folder cannot be told to be a run's: refused
        with pytest.raises(OutputExistsError, match=r"manifest.json' is a symbolic link; a run never follows"):
            _run(tmp_path, tiny_bert, output, streaming=streaming, resume=True)
        assert {p.name: p.read_bytes() for p in target.iterdir()} == before
        return
    _run(tmp_path, tiny_bert, output, streaming=streaming, resume=True)
    assert output.read_bytes() == clean_bytes
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before  # nothing written through the link
    assert not work.exists()
