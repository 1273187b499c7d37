"""A resume compares the model's files, not only its embedding matrix (issue 53, R2): a changed weight outside
the embedding (dp_mlm's head, an encoder layer), even with its modification time restored, or a hub id that now
resolves to another revision, refuses the resume."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

import hf_textdp.run.sharded as sharded_mod
from hf_textdp import PrivatizerConfig, privatize_dataset
from hf_textdp.errors import ResumeError
from hf_textdp.io.model_files import model_fingerprint
from hf_textdp.io.workdir import atomic_write_arrow as REAL_WRITE
from tests.utils import corpus, write_jsonl


pytestmark = pytest.mark.usefixtures("isolated_datasets_cache", "private_textdp_cache")
SEED = 2**40 + 9
FILES_DIFFER = r"its model's files differ from this run's"


def _stopped_run(tmp_path: Path, model: str, monkeypatch: pytest.MonkeyPatch, **cfg: Any) -> dict[str, Any]:
    """Run 30 rows in shards of 10, stopped after the first shard; returns the kwargs to run it again."""
    src = write_jsonl(tmp_path / "in.jsonl", corpus(30, seed=3))
    kwargs: dict[str, Any] = {
        "config": PrivatizerConfig(epsilon=5.0, model=model, **cfg),
        "seed": SEED,
        "output_dir": tmp_path / "o.jsonl",
        "shard_size": 10,
    }
    count = {"n": 0}

    def write(path: Any, table: Any, **kw: Any) -> None:
        if count["n"] >= 1:
            raise KeyboardInterrupt
        count["n"] += 1
        REAL_WRITE(path, table, **kw)

    monkeypatch.setattr(sharded_mod, "atomic_write_arrow", write)
    with pytest.raises(KeyboardInterrupt):
        privatize_dataset(str(src), **kwargs)
    monkeypatch.setattr(sharded_mod, "atomic_write_arrow", REAL_WRITE)
    return {"ds": str(src), **kwargs}


def _resume(run: dict[str, Any]) -> Any:
    kwargs = dict(run)
    return privatize_dataset(kwargs.pop("ds"), kwargs.pop("config"), resume=True, **kwargs)


def _change_weight(folder: Path, keep_times: bool) -> None:
    """Add 0.5 to one non-embedding weight of ``folder/model.safetensors`` (optionally restoring its times)."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    st = path.stat()
    tensors = load_file(str(path))
    name = next(n for n in sorted(tensors) if "embeddings" not in n and n.endswith(".weight"))
    tensors[name] = tensors[name] + 0.5
    save_file(tensors, str(path), metadata={"format": "pt"})
    if keep_times:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("keep_times", [False, True], ids=["edited", "edited-mtime-restored"])
def test_a_changed_weight_outside_the_embedding_refuses_the_resume(keep_times, tiny_bert, tmp_path, monkeypatch):
    model = tmp_path / "model"
    shutil.copytree(tiny_bert, model)
    run = _stopped_run(tmp_path, str(model), monkeypatch)
    before = model_fingerprint(str(model))
    _change_weight(model, keep_times)
    assert model_fingerprint(str(model)) != before
    with pytest.raises(ResumeError, match=FILES_DIFFER):
        _resume(run)


def test_dp_mlm_head_changed_between_kill_and_resume_is_refused(tmp_path, monkeypatch):
    from tests.mechanisms.mlm_models import build_tiny_bert_mlm

    model = build_tiny_bert_mlm(tmp_path / "mlm")
    run = _stopped_run(tmp_path, str(model), monkeypatch, mechanism="dp_mlm")
    _change_weight(model, keep_times=True)  # the first non-embedding weight: the MLM head or an encoder layer
    with pytest.raises(ResumeError, match=FILES_DIFFER):
        _resume(run)


def _hub_snapshot(cache: Path, repo: str, revision: str, source: Path) -> None:
    """A model in the Hugging Face cache layout: snapshots/<revision>/ and refs/main naming it."""
    root = cache / f"models--{repo.replace('/', '--')}"
    shutil.copytree(source, root / "snapshots" / revision)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(revision)


def test_a_hub_id_resolving_to_another_revision_refuses_the_resume(tiny_bert, tmp_path, monkeypatch):
    """An unpinned hub id: the cache's refs/main moved to a new revision (same embedding matrix) between kill and
    resume."""
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    old, new = "a" * 40, "b" * 40
    _hub_snapshot(cache, "org/tiny", old, Path(tiny_bert))
    run = _stopped_run(tmp_path, "org/tiny", monkeypatch)
    _hub_snapshot(cache, "org/tiny", new, Path(tiny_bert))
    _change_weight(cache / "models--org--tiny" / "snapshots" / new, keep_times=False)
    with pytest.raises(ResumeError, match=FILES_DIFFER):
        _resume(run)
    (cache / "models--org--tiny" / "refs" / "main").write_text(old)  # back at the partial run's revision
    _resume(run)
    assert (tmp_path / "o.jsonl").is_file()
