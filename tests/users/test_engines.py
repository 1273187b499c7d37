"""One configuration with users gives one output in every engine (issue 56 item 4): ``privatize_dataset`` in
memory and sharded, the CLI (whose flags give the API's config), streaming, a resumed sharded run and
``--engine ray`` write the same rows (``rows_sha256``, rows matched by id), without the user column, and the same
per-user report."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pytest

import hf_textdp.run.sharded as sharded
from hf_textdp import PrivatizerConfig, privacy_report, privatize_dataset
from hf_textdp.cli import main
from hf_textdp.io.workdir import atomic_write_arrow as REAL_WRITE
from tests.utils import corpus


pytestmark = pytest.mark.usefixtures("isolated_datasets_cache")

SEED = 2**40 + 8181
N = 45

CONFIGS: dict[str, dict[str, Any]] = {
    "scale-consistent": {
        "user": {"column": "uid", "budget": 40.0},
        "sensitive": {"epsilon": 1.0, "detectors": ["id"], "consistent": "user"},
    },
    "rows": {"user": {"column": "uid", "bound": "rows", "max_rows": 3, "budget": 60.0}},
}
FLAGS = {
    "scale-consistent": [
        "--user-column", "uid", "--user-budget", "40", "--sensitive-epsilon", "1", "--sensitive-detectors", "id",
        "--sensitive-consistent", "user",
    ],
    "rows": ["--user-column", "uid", "--user-bound", "rows", "--user-max-rows", "3", "--user-budget", "60"],
}  # fmt: skip


def _source() -> datasets.Dataset:
    """45 rows of 7 users (a Zipf law of rows); each user repeats its own id code in about half its rows (digits 1-9:
    the tiny tokenizer has no word-inner "##0", so a code with a 0 inside would be one [UNK], never sensitive)."""
    rng = np.random.default_rng(5)
    users = np.minimum(rng.zipf(1.5, N), 7) - 1
    lines = corpus(N, seed=3)
    texts = [
        f"{t} ref AB{int(u) + 1}9{int(u) + 2} ok" if rng.random() < 0.5 else t
        for t, u in zip(lines, users, strict=True)
    ]
    return datasets.Dataset.from_dict({"id": list(range(N)), "text": texts, "uid": [f"c{int(u)}" for u in users]})


def _config(name: str, model: str) -> PrivatizerConfig:
    return PrivatizerConfig(epsilon=3.0, model=model, **CONFIGS[name])


def rows_sha256(rows: Any) -> str:
    """The sha256 of the rows as JSON, sorted by id (Ray does not promise row order)."""
    plain = sorted((dict(r) for r in rows), key=lambda r: r["id"])
    return hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()


def _read(path: Path) -> datasets.Dataset:
    return datasets.Dataset.from_parquet(str(path))


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    count = {"n": 0}

    def write(path: Any, table: Any, **kwargs: Any) -> None:
        if count["n"] >= n:
            raise KeyboardInterrupt
        count["n"] += 1
        REAL_WRITE(path, table, **kwargs)

    monkeypatch.setattr(sharded, "atomic_write_arrow", write)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_local_engine_and_the_cli_give_one_output(name, tiny_bert, tmp_path, monkeypatch, capsys):
    cfg = _config(name, tiny_bert)
    ds = _source()
    src = tmp_path / "src.jsonl"
    ds.to_json(str(src))
    kw = {"seed": SEED, "id_column": "id"}
    memory = privatize_dataset(ds, cfg, **kw)
    assert "uid" not in memory.column_names and "dp_dropped" not in memory.column_names
    expected = rows_sha256(memory)
    if name == "rows":
        assert len(memory) < N  # the bound dropped rows

    out_sharded = tmp_path / "sharded.parquet"
    privatize_dataset(ds, cfg, output_dir=out_sharded, shard_size=7, **kw)
    out_stream = tmp_path / "stream.parquet"
    privatize_dataset(str(src), cfg, output_dir=out_stream, streaming=True, shard_size=7, **kw)
    out_resumed = tmp_path / "resumed.parquet"
    _interrupt_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        privatize_dataset(ds, cfg, output_dir=out_resumed, shard_size=7, **kw)
    monkeypatch.setattr(sharded, "atomic_write_arrow", REAL_WRITE)
    privatize_dataset(ds, cfg, output_dir=out_resumed, shard_size=7, resume=True, **kw)
    seed_file = tmp_path / "seed"
    seed_file.write_text(hex(SEED))
    out_cli = tmp_path / "cli.parquet"
    argv = ["privatize", str(src), str(out_cli), "--epsilon", "3", "--model", tiny_bert, "--seed-file", str(seed_file)]
    assert main([*argv, "--id-column", "id", *FLAGS[name]]) == 0
    line = capsys.readouterr().out
    assert " users (max user epsilon=" in line and ("rows dropped" in line) == (name == "rows")

    reports = []
    for path in (out_sharded, out_stream, out_resumed, out_cli):
        assert rows_sha256(_read(path)) == expected, path.name
        assert "uid" not in _read(path).column_names
        report = privacy_report(path)
        report.pop("content_sha256", None)
        reports.append(report["users"])
    assert all(r == reports[0] for r in reports)
    assert main(["report", str(out_sharded)]) == 0  # hf-textdp report and the card show the per-user figures
    assert f"  users:       {reports[0]['summary']}" in capsys.readouterr().out
    from hf_textdp.integrations.cards import render_card

    card = str(render_card(out_sharded))
    assert (
        f"| per user | {reports[0]['summary']} |" in card
        and "**Per user** (docs/mechanisms/users.md). For two datasets" in card
    )
    users = reports[0]
    assert users["users"] == len(set(ds["uid"])) and users["published"] is False
    if users["budget"] is not None and users["user_epsilon_max"] is not None:
        assert users["user_epsilon_max"] <= users["budget"]


def test_the_cli_flags_give_the_api_config(tiny_bert, tmp_path):
    """--user-* and --sensitive-consistent build the config that the API takes (saved beside nothing: parsed)."""
    from hf_textdp.cli.app import build_parser
    from hf_textdp.cli.parse import config_from_args

    for name, flags in FLAGS.items():
        args = build_parser().parse_args(["privatize", "in.jsonl", "out.parquet", "--epsilon", "3", "--model",
                                          tiny_bert, *flags])  # fmt: skip
        assert config_from_args(args) == _config(name, tiny_bert)


@pytest.fixture(scope="module")
def ray_session():
    import os

    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    ray.init(
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}},
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning:ray", "ignore::ResourceWarning", "ignore::DeprecationWarning")
@pytest.mark.parametrize("name", list(CONFIGS))
def test_engine_ray_gives_the_local_output(name, ray_session, tiny_bert, tmp_path):
    from hf_textdp.run.ray import privatize_ray_files

    cfg = _config(name, tiny_bert)
    ds = _source()
    src = tmp_path / "src.jsonl"
    ds.to_json(str(src))
    local = privatize_dataset(ds, cfg, seed=SEED, id_column="id", output_dir=tmp_path / "local.parquet")
    out = tmp_path / "ray.parquet"
    report = privatize_ray_files(src, out, cfg, seed=SEED, id_column="id", batch_size=7, concurrency=2)
    assert rows_sha256(_read(out)) == rows_sha256(local)
    assert "uid" not in _read(out).column_names and "dp_dropped" not in _read(out).column_names
    assert report["users"] == privacy_report(tmp_path / "local.parquet")["users"]
