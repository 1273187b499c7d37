"""Atomic outputs: an existing output or the input is never overwritten; a failed write leaves no output
(issue 7)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import hf_textdp.run.sharded as sharded
from hf_textdp import PrivatizerConfig, privatize_dataset
from hf_textdp.errors import OutputExistsError
from hf_textdp.io.paths import report_path_for, work_dir_for
from tests.utils import corpus, read_jsonl, small_jsonl


# each test gets its own datasets cache, so nothing leaks between tests or into ~/.cache
pytestmark = pytest.mark.usefixtures("isolated_datasets_cache")


def _siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


def test_existing_output_refused_then_overwritten(tiny_bert, tmp_path):
    src = small_jsonl(tmp_path)
    cfg = PrivatizerConfig(epsilon=2.0, model=tiny_bert)
    for output in (tmp_path / "o.jsonl", tmp_path / "o_dir"):
        if output.suffix:
            output.write_text("old\n")
        else:
            output.mkdir()
            (output / "keep.txt").write_text("old\n")
        before = sorted(p.name for p in tmp_path.iterdir())
        with pytest.raises(OutputExistsError, match=r"already exists; pass overwrite=True \(--overwrite\)"):
            privatize_dataset(str(src), cfg, seed=2**40 + 1, output_dir=output)
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, nothing removed
        if not output.suffix:  # a folder this package did not write is never emptied, even with overwrite
            with pytest.raises(OutputExistsError, match="not an hf-textdp output"):
                privatize_dataset(str(src), cfg, seed=2**40 + 1, output_dir=output, overwrite=True)
            assert (output / "keep.txt").read_text() == "old\n"
            (output / "keep.txt").unlink()  # an empty folder may be replaced
        privatize_dataset(str(src), cfg, seed=2**40 + 1, output_dir=output, overwrite=True)
        assert report_path_for(output).is_file()
        if output.suffix:
            assert len(read_jsonl(output)) == 12
        else:
            assert (output / "state.json").is_file()
        privatize_dataset(str(src), cfg, seed=2**40 + 2, output_dir=output, overwrite=True)  # an earlier output
        assert report_path_for(output).is_file()
    # no temporary siblings or work folders are left behind
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".")]


def test_overwrite_never_replaces_a_file_with_a_folder_output(tiny_bert, tmp_path):
    """A path without a file extension is a folder output: an existing file there is not replaced."""
    src = small_jsonl(tmp_path)
    notes = tmp_path / "notes"
    notes.write_text("mine\n")
    with pytest.raises(OutputExistsError, match="a file, where a folder output"):
        privatize_dataset(
            str(src), PrivatizerConfig(epsilon=2.0, model=tiny_bert), seed=2**40 + 1, output_dir=notes, overwrite=True
        )
    assert notes.read_text() == "mine\n"


@pytest.mark.parametrize(
    ("make_output", "what"),
    [
        (lambda src, tmp: src, "is the input itself"),
        (lambda src, tmp: tmp, "contains the input"),
        (lambda src, tmp: Path(os.path.relpath(src)), "is the input itself"),
    ],
    ids=["same-file", "parent-folder", "relative-path"],
)
def test_input_is_never_overwritten(make_output, what, tiny_bert, tmp_path):
    src = small_jsonl(tmp_path)
    content = src.read_bytes()
    for overwrite in (False, True):
        with pytest.raises(OutputExistsError, match=what):
            privatize_dataset(
                str(src),
                PrivatizerConfig(epsilon=2.0, model=tiny_bert),
                seed=2**40 + 1,
                output_dir=make_output(src, tmp_path),
                overwrite=overwrite,
            )
    assert src.read_bytes() == content


def test_loaded_dataset_folder_is_never_overwritten(tiny_bert, tmp_path):
    """A Dataset memory-mapped from a folder cannot be written over that folder, even with overwrite."""
    import datasets

    folder = tmp_path / "data"
    datasets.Dataset.from_dict({"text": corpus(5, seed=1)}).save_to_disk(str(folder))
    ds = datasets.load_from_disk(str(folder))
    with pytest.raises(OutputExistsError, match="contains the input"):
        privatize_dataset(
            ds, PrivatizerConfig(epsilon=2.0, model=tiny_bert), seed=2**40 + 1, output_dir=folder, overwrite=True
        )
    assert datasets.load_from_disk(str(folder))["text"] == corpus(5, seed=1)


def test_failure_while_writing_leaves_no_output(tiny_bert, tmp_path, monkeypatch):
    """The final write dies half-way: no output, no stray temporary; resume then reuses every shard."""
    import datasets

    src = small_jsonl(tmp_path)
    output = tmp_path / "o.jsonl"
    cfg = PrivatizerConfig(epsilon=2.0, model=tiny_bert)

    def broken(self, path, **kwargs):
        Path(path).write_text('{"text": "half a row')
        raise OSError(28, "No space left on device")

    real_to_json = datasets.Dataset.to_json
    monkeypatch.setattr(datasets.Dataset, "to_json", broken)
    with pytest.raises(OSError, match="No space left"):
        privatize_dataset(str(src), cfg, seed=2**40 + 1, output_dir=output, shard_size=5)
    assert not output.exists() and not report_path_for(output).exists()
    work = work_dir_for(output)
    assert sorted(p.name for p in (work / "split-000").iterdir()) == [f"shard-0000{k}.arrow" for k in range(3)]
    assert sorted(p.name for p in work.iterdir()) == ["lock", "manifest.json", "split-000"]  # no temporaries
    monkeypatch.setattr(datasets.Dataset, "to_json", real_to_json)
    calls = []
    monkeypatch.setattr(sharded, "atomic_write_arrow", lambda *a, **k: calls.append(a))
    privatize_dataset(str(src), cfg, seed=2**40 + 1, output_dir=output, shard_size=5, resume=True)
    assert calls == []  # every shard was reused
    # no hf_datasets_cache either: the source file is read into memory, leaving no Arrow copy of the original
    assert _siblings(output) == sorted(["in.jsonl", "o.jsonl", "o.jsonl.privacy_report.json"])


@pytest.mark.parametrize("output", [".", "..", "/", "./"])
def test_an_output_that_names_no_file_or_folder_is_refused(output, tiny_bert, tmp_path):
    from hf_textdp.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match=r"^output_dir must name the file or folder to write"):
        privatize_dataset(
            str(small_jsonl(tmp_path)), PrivatizerConfig(epsilon=2.0, model=tiny_bert), output_dir=output
        )
