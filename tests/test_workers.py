"""Worker processes on a GPU: ``datasets`` spawns them (CUDA does not survive a fork), with the same rows."""

from __future__ import annotations

import datasets
import multiprocess
import pytest

from hf_textdp import PrivatizerConfig, privatize_dataset
from hf_textdp.utils.workers import spawned_workers
from tests.utils import corpus


@pytest.mark.parametrize(
    ("device", "num_proc", "spawn"),
    [("cuda", 4, True), ("cuda:1", 2, True), ("cuda", 1, False), ("cuda", None, False), ("cpu", 4, False)],
)
def test_workers_spawn_only_for_a_gpu_with_several_workers(device, num_proc, spawn):
    before = multiprocess.get_start_method(allow_none=True)
    with spawned_workers(device, num_proc):
        inside = multiprocess.get_start_method(allow_none=True)
    assert (inside == "spawn") == spawn
    assert multiprocess.get_start_method(allow_none=True) == before  # restored


@pytest.mark.slow
def test_spawned_workers_write_the_forked_workers_rows(tiny_bert, tmp_path):
    """The sharded pipeline with spawned workers (as on a GPU, forced here on CPU) writes the same rows."""
    ds = datasets.Dataset.from_dict({"text": corpus(40, seed=12)})
    cfg = PrivatizerConfig(epsilon=3.0, model=tiny_bert)
    kwargs = {"seed": 2**40 + 31, "num_proc": 2, "batch_size": 8, "shard_size": 20}
    forked = privatize_dataset(ds, cfg, output_dir=tmp_path / "forked.jsonl", **kwargs)
    with spawned_workers("cuda", 2):  # the start method only: the privatizer still runs on CPU
        spawned = privatize_dataset(ds, cfg, output_dir=tmp_path / "spawned.jsonl", **kwargs)
    for col in ("text", "input_ids", "dp_tokens"):
        assert spawned[col] == forked[col]
