"""The span column and the user column leave an output through one door, ``Privatizer.drop_columns``
(docs/mechanisms/users.md §6, selective.md §3): each is dropped unless asked for (``keep_spans=True``,
``user["keep_column"]``), the user column only once the per-user figures are recounted from the released rows."""

from __future__ import annotations

import datasets
import pytest

from hf_textdp import PrivatizerConfig, privatize_dataset
from hf_textdp.privatizer import Privatizer


SEED = 2**40 + 5151


def _source() -> datasets.Dataset:
    texts = ["x1 x0 x1", "x0 x1 x2", "x2 x2", "x1", "x0 x0 x2"]
    spans = [[[0, 2]], [], [[0, 2]], [], [[3, 5]]]
    return datasets.Dataset.from_dict({"text": texts, "uid": [1, 1, 2, 3, 3], "spans": spans})


@pytest.mark.parametrize("keep", [False, True])
def test_span_and_user_columns_leave_every_output_together(t1d, tmp_path, keep):
    sens = {"epsilon": 0.5, "column": "spans", "detectors": []}
    cfg = PrivatizerConfig(epsilon=2.0, model=t1d, user={"column": "uid", "keep_column": keep}, sensitive=sens)
    assert Privatizer(cfg, SEED, keep_spans=keep).drop_columns == ([] if keep else ["spans", "uid"])
    ds = _source()
    src = tmp_path / "src.jsonl"
    ds.to_json(str(src))
    kw = {"seed": SEED, "keep_spans": keep}
    memory = privatize_dataset(ds, cfg, **kw)
    stream = list(privatize_dataset(str(src), cfg, streaming=True, **kw))
    sharded, report = privatize_dataset(
        ds, cfg, output_dir=tmp_path / "sharded.parquet", shard_size=2, return_report=True, **kw
    )
    _, stream_report = privatize_dataset(
        str(src), cfg, output_dir=tmp_path / "stream.parquet", streaming=True, shard_size=2, return_report=True, **kw
    )
    for columns in (memory.column_names, list(stream[0]), sharded.column_names):
        assert ("spans" in columns) is keep and ("uid" in columns) is keep, columns
    assert memory["text"] == sharded["text"] == [r["text"] for r in stream]
    # the per-user figures were recounted from the work folder's rows, which kept the user column until then
    for rep in (report, stream_report):
        assert rep["users"]["users"] == 3 and rep["users"]["published"] is keep
        assert rep["users"]["rows_per_user_max"] == 2
