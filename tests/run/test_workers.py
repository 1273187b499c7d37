"""Worker processes on a GPU: ``datasets`` spawns them (CUDA does not survive a fork), with the same rows."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

import datasets
import multiprocess
import numpy as np
import pytest

from hf_textdp import Privatizer, PrivatizerConfig, privatize_dataset
from hf_textdp.run.release_service import ENV, GATHER_ENV, ReleaseService, RemoteRelease, serving
from hf_textdp.run.workers import SERVICE_SWITCH, spawned_workers, worker_threads
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


@pytest.mark.slow
@pytest.mark.parametrize("sharded", [False, True])
def test_release_service_workers_write_the_local_rows(tiny_bert, tmp_path, sharded):
    """Workers that send their batches to a release service in this process (as on a GPU: here the service
    runs on CPU) write exactly the rows of a run without workers, and the service answered them all."""
    ds = datasets.Dataset.from_dict({"text": corpus(60, seed=13)})
    cfg = PrivatizerConfig(epsilon=3.0, model=tiny_bert)
    seed = 2**40 + 37
    # sharded: 4 shards, so the workers of one pool write whole shards
    out = {"output_dir": tmp_path / "local.jsonl", "shard_size": 16} if sharded else {}
    local = privatize_dataset(ds, cfg, seed=seed, batch_size=8, **out)
    parent = Privatizer(cfg, seed=seed)
    parent.engine.load()  # loaded before the service runs, as the pipeline does
    out = {"output_dir": tmp_path / "served.jsonl", "shard_size": 16} if sharded else {}
    with spawned_workers("cuda", 2), serving(parent.engine.release_keyed) as service:
        served = privatize_dataset(ds, cfg, seed=seed, num_proc=2, batch_size=8, **out)
    assert service.batches >= 60 // 8
    for col in ("text", "input_ids", "dp_tokens"):
        assert served[col] == local[col]
    if sharded:
        assert (tmp_path / "served.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()


def test_release_service_answers_each_worker_its_part_of_one_call_and_raises_the_handlers_error():
    """Batches pending together go through one handler call, and each worker gets back its own part (in
    order); a handler's error reaches the worker that asked."""
    seen: list[int] = []
    gate = threading.Event()

    def handler(keys, sizes, positions):
        seen.append(len(sizes))
        gate.wait(10)
        if (positions < 0).any():
            raise ValueError("negative position")
        return positions * 10 + keys.repeat(sizes)

    with serving(handler) as service:
        a, b, c = (RemoteRelease(service.env_value) for _ in range(3))
        first = threading.Thread(target=c.release, args=(np.array([4]), np.array([1]), np.array([0])))
        first.start()
        while not seen:  # c's batch holds the service while a and b send theirs
            time.sleep(0.01)
        a._conn.send((np.array([1, 2]), np.array([2, 1]), np.array([5, 6, 7])))
        b._conn.send((np.array([3]), np.array([2]), np.array([8, 9])))
        time.sleep(0.2)
        gate.set()
        first.join()
        (sa, ra), (sb, rb) = a._conn.recv(), b._conn.recv()
        assert (sa, sb) == ("ok", "ok") and ra.tolist() == [51, 61, 72] and rb.tolist() == [83, 93]
        assert seen == [1, 3] and service.calls == 2 and service.batches == 3
        with pytest.raises(ValueError, match="negative position"):
            a.release(np.array([1]), np.array([1]), np.array([-1]))
        for client in (a, b, c):
            client.close()
    with pytest.raises(OSError):  # closed with the context: nothing listens any more
        RemoteRelease(service.env_value)


def test_release_service_refuses_a_client_without_the_key():
    with serving(lambda k, s, p: p) as service:
        with pytest.raises(multiprocessing.AuthenticationError):
            RemoteRelease(f"{service.address}:{'00' * 32}")


def test_worker_threads_size_the_pools_for_the_workers_and_restore_the_environment(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "3")  # the user's own setting stays
    with worker_threads(8):
        assert os.environ["OMP_NUM_THREADS"] == "2" and os.environ["RAYON_NUM_THREADS"] == "2"
        assert os.environ["MKL_NUM_THREADS"] == "3"
    assert "OMP_NUM_THREADS" not in os.environ and "RAYON_NUM_THREADS" not in os.environ
    assert os.environ["MKL_NUM_THREADS"] == "3"
    with worker_threads(32):  # more workers than cores: one thread each
        assert os.environ["OMP_NUM_THREADS"] == "1"


def test_a_gpu_run_with_workers_serves_them_unless_switched_off(monkeypatch):
    """spawned_workers starts the release service (named in the workers' environment) only given a release,
    on CUDA with several workers, and not with HF_TEXTDP_RELEASE_SERVICE_OFF=1."""
    monkeypatch.delenv(ENV, raising=False)
    for device, num_proc, release, off, served in [
        ("cuda", 4, lambda k, s, p: p, "", True),
        ("cuda", 4, None, "", False),
        ("cuda", 1, lambda k, s, p: p, "", False),
        ("cpu", 4, lambda k, s, p: p, "", False),
        ("cuda", 4, lambda k, s, p: p, "1", False),
    ]:
        monkeypatch.setenv(SERVICE_SWITCH, off)
        with spawned_workers(device, num_proc, release):
            assert (ENV in os.environ) == served
        assert ENV not in os.environ


def test_release_service_answers_a_malformed_request_or_an_unpicklable_error_and_goes_on():
    class Unpicklable(Exception):
        def __reduce__(self):
            raise TypeError("cannot pickle")

    def handler(keys, sizes, positions):
        if positions[0] == 13:
            raise Unpicklable("thirteen")
        return positions

    with serving(handler) as service:
        client = RemoteRelease(service.env_value)
        with pytest.raises(TypeError, match="1-d int64 arrays"):
            client.release(np.array([1]), np.array([2]), np.array([5]))  # sizes do not add up
        with pytest.raises(TypeError, match="1-d int64 arrays"):
            client.release(np.array([1]), np.array([1]), np.array([5], dtype=np.int32))
        with pytest.raises(RuntimeError, match="Unpicklable: thirteen"):
            client.release(np.array([1]), np.array([1]), np.array([13]))
        assert client.release(np.array([1]), np.array([1]), np.array([7])).tolist() == [7]  # still serving
        client.close()


@pytest.mark.slow
def test_a_pool_of_workers_writes_the_shards_of_one_process(tiny_bert, tmp_path):
    """With num_proc and as many shards, pool workers privatize whole shards: the same output file, byte for
    byte, as one process; fewer shards are split among the workers by Dataset.map, with the same rows."""
    ds = datasets.Dataset.from_dict({"text": corpus(70, seed=14)})
    cfg = PrivatizerConfig(epsilon=4.0, model=tiny_bert)
    kwargs = {"seed": 2**40 + 41, "batch_size": 8}
    one = privatize_dataset(ds, cfg, output_dir=tmp_path / "one.jsonl", shard_size=15, **kwargs)
    pool = privatize_dataset(ds, cfg, output_dir=tmp_path / "pool.jsonl", shard_size=15, num_proc=3, **kwargs)
    assert (tmp_path / "pool.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert pool["text"] == one["text"]
    single = privatize_dataset(ds, cfg, output_dir=tmp_path / "single.jsonl", num_proc=3, **kwargs)
    assert single["input_ids"] == one["input_ids"]


def test_release_service_gathers_batches_for_a_while_when_asked(monkeypatch):
    """HF_TEXTDP_RELEASE_GATHER_MS: a batch waits for the other workers' batches, released in the same call."""
    sizes_seen: list[int] = []

    def handler(keys, sizes, positions):
        sizes_seen.append(len(sizes))
        return positions

    monkeypatch.setenv(GATHER_ENV, "800")
    with serving(handler) as service:
        assert service.gather_s == 0.8
        a, b = RemoteRelease(service.env_value), RemoteRelease(service.env_value)
        time.sleep(0.1)  # both connections accepted
        a._conn.send((np.array([1]), np.array([1]), np.array([5])))
        time.sleep(0.2)  # within the 800 ms window
        b._conn.send((np.array([2]), np.array([1]), np.array([6])))
        assert a._conn.recv()[1].tolist() == [5] and b._conn.recv()[1].tolist() == [6]
        assert sizes_seen == [2] and service.calls == 1
        for client in (a, b):
            client.close()
    monkeypatch.setenv(GATHER_ENV, "soon")
    with pytest.raises(ValueError, match="HF_TEXTDP_RELEASE_GATHER_MS must be a number of milliseconds"):
        ReleaseService(handler)
