"""Reliability, third pass (issue 37): nothing this package did not write is deleted or overwritten, a
report describes only its own output, resume's seed check cannot pass by chance, errors carry no text."""

from __future__ import annotations

import os

import pytest

from hf_textdp import PrivatizerConfig, privatize_dataset
from hf_textdp.errors import OutputExistsError
from hf_textdp.io.paths import work_dir_for
from tests.utils import small_jsonl


pytestmark = pytest.mark.usefixtures("isolated_datasets_cache")
SEED = 2**40 + 1


# ---------------------------------------------------------------- 1. the work folder and --overwrite
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_symlink_at_the_work_folder_is_refused_and_its_target_kept(overwrite, tiny_bert, tmp_path):
    src = small_jsonl(tmp_path)
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "chapter1.tex").write_text("mine\n")
    output = tmp_path / "out.jsonl"
    work_dir_for(output).symlink_to(thesis, target_is_directory=True)
    with pytest.raises(OutputExistsError, match=r"\.out\.jsonl\.partial' is a symbolic link; it is not an hf-textdp"):
        privatize_dataset(
            str(src),
            PrivatizerConfig(epsilon=100.0, model=tiny_bert),
            seed=SEED,
            output_dir=output,
            shard_size=5,
            overwrite=overwrite,
        )
    assert sorted(p.name for p in thesis.iterdir()) == ["chapter1.tex"] and not output.exists()


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_foreign_folder_at_the_work_folder_is_refused_and_kept(overwrite, tiny_bert, tmp_path):
    src = small_jsonl(tmp_path)
    output = tmp_path / "out.jsonl"
    work = work_dir_for(output)
    work.mkdir()
    (work / "notes.txt").write_text("mine\n")
    with pytest.raises(
        OutputExistsError, match=r"the folder '.*\.out\.jsonl\.partial' exists; it is not an hf-textdp"
    ):
        privatize_dataset(
            str(src),
            PrivatizerConfig(epsilon=100.0, model=tiny_bert),
            seed=SEED,
            output_dir=output,
            shard_size=5,
            overwrite=overwrite,
        )
    assert sorted(p.name for p in work.iterdir()) == ["notes.txt"]


def test_cleanup_deletes_only_what_a_run_wrote(tmp_path):
    from hf_textdp.io.workdir import remove_own_files

    work = tmp_path / ".o.jsonl.partial"
    (work / "split-000").mkdir(parents=True)
    for name in ("lock", "manifest.json", "split-000/shard-00000.arrow", "split-000/progress.json", "theirs.txt"):
        (work / name).write_text("x")
    (work / "split-000" / "theirs.txt").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    os.symlink(outside, work / ".planted.tmp")  # a link with a temporary's name: unlinked, never followed
    assert remove_own_files(work) == ["split-000/theirs.txt", "theirs.txt"]
    assert sorted(str(p.relative_to(work)) for p in work.rglob("*")) == [
        "split-000",
        "split-000/theirs.txt",
        "theirs.txt",
    ]
    assert (outside / "keep").is_file()


def test_overwrite_refuses_an_output_folder_holding_foreign_files(tiny_bert, tmp_path):
    src = small_jsonl(tmp_path)
    cfg = PrivatizerConfig(epsilon=100.0, model=tiny_bert)
    output = tmp_path / "out"
    privatize_dataset(str(src), cfg, seed=SEED, output_dir=output)
    (output / "my_notes.txt").write_text("mine\n")
    with pytest.raises(OutputExistsError, match=r"holding files no hf-textdp output holds \('my_notes.txt'\)"):
        privatize_dataset(str(src), cfg, seed=SEED, output_dir=output, overwrite=True)
    assert (output / "my_notes.txt").read_text() == "mine\n"
    (output / "my_notes.txt").unlink()
    privatize_dataset(str(src), cfg, seed=SEED, output_dir=output, overwrite=True)  # its own output: replaced
