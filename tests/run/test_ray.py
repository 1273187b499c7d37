"""Ray Data (``hf_textdp.run.ray``): seeded outputs equal the single-process output whatever the block layout, a
lost worker loses no row and duplicates none, and ``hf-textdp privatize --engine ray`` end to end.

One local Ray session (``ray.init(num_cpus=4)``) serves the whole module: starting Ray takes seconds. The
tests are skipped only when Ray is not installed (``pip install 'hf-textdp[ray]'``).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.errors import ColumnNotFoundError, InvalidParameterError, MissingExtraError
from hf_textdp.io.reports import CONTENT_KEY
from tests.utils import corpus


ROOT = Path(__file__).resolve().parents[2]
SEED = 2**63 + 777
N = 40
TEXTS = corpus(N, seed=91)

# Ray's own advice (e.g. "the operator only received 1 input(s)" for a one-block layout) is not ours to fix,
# and older Rays leave their helper processes to the garbage collector (ResourceWarning).
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning:ray"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    # Test functions are pickled by reference (tests.run.test_ray.*): the workers need the repository on their path.
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    ray.init(
        num_cpus=4,  # logical CPUs: two actors plus the read and write tasks, on any machine
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}},
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def cfg(tiny_bert):
    return PrivatizerConfig(epsilon=3.0, model=tiny_bert)


def _source():
    import datasets

    return datasets.Dataset.from_dict({"id": list(range(N)), "text": TEXTS})


@pytest.fixture(scope="module")
def reference(cfg):
    """The single-process output: ``Dataset.map`` with row ids = indices (= the id column)."""
    out = _source().map(Privatizer(cfg, seed=SEED), batched=True, with_indices=True)
    return [dict(r) for r in out]


def _plain(row):
    return {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in row.items()}


# --------------------------------------------------------------------------- no Ray, no cluster
def test_missing_ray_raises_missing_extra_with_the_install_line(cfg, monkeypatch):
    from hf_textdp.run.ray import privatize_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    monkeypatch.setitem(sys.modules, "ray.data", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'hf-textdp\[ray\]'") as info:
        privatize_ray(object(), cfg, id_column="id", seed=SEED)
    assert isinstance(info.value.__cause__, ImportError) and isinstance(info.value, ImportError)


def test_cli_without_ray_fails_in_one_line(cfg, tmp_path, monkeypatch, capsys):
    from hf_textdp.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)
    src = tmp_path / "src.parquet"
    _source().to_parquet(str(src))
    capsys.readouterr()
    code = main(
        ["privatize", str(src), str(tmp_path / "o.parquet"), "--engine", "ray", "--epsilon", "3", "--model", cfg.model]
    )
    err = capsys.readouterr().err
    assert code == 2 and "pip install 'hf-textdp[ray]'" in err and len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------- with Ray
def test_seed_needs_an_id_column_and_columns_are_checked(ray_session, cfg):
    from hf_textdp.run.ray import privatize_ray

    ds = ray_session.data.from_arrow(_source().data.table)
    with pytest.raises(InvalidParameterError, match="id_column is required with a seed"):
        privatize_ray(ds, cfg, seed=SEED)
    with pytest.raises(ColumnNotFoundError, match="text_column='body'"):
        privatize_ray(ds, cfg, text_column="body", id_column="id", seed=SEED)
    with pytest.raises(InvalidParameterError, match="concurrency"):
        privatize_ray(ds, cfg, id_column="id", seed=SEED, concurrency=(3, 1))


@pytest.mark.slow
def test_every_block_layout_gives_the_single_process_output(ray_session, cfg, reference):
    """Layouts of 1, 3 and 7 blocks (and batches of 3 rows across them) in one Ray run: one actor pool start."""
    import pyarrow as pa

    table = _source().data.table
    layouts = [
        ray_session.data.from_arrow(table.append_column("layout", pa.array([k] * N))).repartition(k) for k in (1, 3, 7)
    ]
    from hf_textdp.run.ray import privatize_ray, ray_report

    out = privatize_ray(layouts[0].union(*layouts[1:]), cfg, id_column="id", seed=SEED, batch_size=3, concurrency=2)
    out = out.materialize()  # run once: the rows and the report below read the same blocks
    rows = [_plain(r) for r in out.take_all()]
    for k in (1, 3, 7):
        got = sorted((r for r in rows if r["layout"] == k), key=lambda r: r["id"])
        assert [{c: v for c, v in r.items() if c != "layout"} for r in got] == reference, f"layout {k}"
    totals = ray_report(out, cfg)["totals"]
    assert totals["rows"] == 3 * N and totals["dp_tokens"] == 3 * sum(r["dp_tokens"] for r in reference)


def _kill_once(batch, marker, victim):
    """Kill this worker process (SIGKILL, as a lost node would) the first time it sees row ``victim``."""
    if victim in batch.column("id").to_pylist():
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return batch
        with open(f"/proc/{os.getpid()}/cmdline", "rb") as f:
            os.write(fd, f.read().replace(b"\0", b" "))
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)
    return batch


@pytest.mark.slow
def test_a_killed_worker_loses_no_row_and_duplicates_none(ray_session, cfg, reference, tmp_path):
    """SIGKILL the actor mid-run: Ray Data restarts it (max_restarts=-1) and retries its batches."""
    from hf_textdp.run.ray import privatize_ray

    marker = tmp_path / "killed"
    ds = ray_session.data.from_arrow(_source().data.table).repartition(8)
    # A task stage fused into the actor stage (Ray Data fuses map -> actor map): the kill hits the actor.
    ds = ds.map_batches(_kill_once, fn_kwargs={"marker": str(marker), "victim": 23}, batch_format="pyarrow")
    out = privatize_ray(ds, cfg, id_column="id", seed=SEED, batch_size=4, concurrency=2)
    rows = sorted((_plain(r) for r in out.take_all()), key=lambda r: r["id"])
    assert marker.is_file(), "the worker was not killed"
    assert "_PrivatizeBatches" in marker.read_text()  # the process title: an actor of the privatizing pool
    assert [r["id"] for r in rows] == list(range(N))  # every row exactly once
    assert rows == reference


@pytest.mark.slow
def test_cli_engine_ray_equals_the_local_engine(ray_session, cfg, tmp_path, capsys):
    """``--engine ray`` writes the local engine's rows (matched by id: Ray does not promise row order), types and
    report, to a parquet file or a folder of parquet files with the report inside."""
    import datasets
    import pyarrow.parquet as pq

    from hf_textdp import privacy_report
    from hf_textdp.cli import main

    src = tmp_path / "src.jsonl"
    _source().to_json(str(src))
    seed_file = tmp_path / "seed"
    seed_file.write_text(hex(SEED))
    common = ["--epsilon", "3", "--model", cfg.model, "--seed-file", str(seed_file), "--id-column", "id"]
    local, distributed, folder = tmp_path / "local.parquet", tmp_path / "ray.parquet", tmp_path / "ray_folder"
    assert main(["privatize", str(src), str(local), *common]) == 0
    argv = ["privatize", str(src), str(distributed), *common, "--engine", "ray", "--num-proc", "2"]
    assert main([*argv, "--batch-size", "7"]) == 0
    assert "with Ray: 40 rows" in capsys.readouterr().out
    table = pq.read_table(distributed)
    ids = table.column("id").to_pylist()
    table = table.take(sorted(range(len(ids)), key=ids.__getitem__))  # (Table.sort_by warns in some pyarrows)
    assert table.equals(pq.read_table(local), check_metadata=True)
    # each report is bound to its own file (privacy_report verifies the hash); the rest of the two reports is equal
    ray_report, local_report = privacy_report(distributed), privacy_report(local)
    assert ray_report.pop(CONTENT_KEY) and local_report.pop(CONTENT_KEY)
    assert ray_report == local_report
    assert main(argv) == 2  # the output exists now
    assert "already exists" in capsys.readouterr().err

    assert main(["privatize", str(src), str(folder), *common, "--engine", "ray"]) == 0
    rows = datasets.load_dataset("parquet", data_files=str(folder / "*.parquet"), split="train")
    assert sorted((dict(r) for r in rows), key=lambda r: r["id"]) == [
        dict(r) for r in datasets.Dataset.from_parquet(str(local))
    ]
    folder_report, local_report = privacy_report(folder), privacy_report(local)  # each bound to its own output
    assert folder_report.pop(CONTENT_KEY) and local_report.pop(CONTENT_KEY)
    assert folder_report == local_report
