"""The report totals recounted from released columns (``hf_textdp/run/totals.py``): the batch form counts what a
row-by-row count does, padding, empty rows, ids outside the vocabulary and selective columns included."""

from __future__ import annotations

import numpy as np

from hf_textdp.accounting import Totals
from hf_textdp.run.totals import totals_from_columns
from hf_textdp.space import CANDIDATE, STRUCTURAL


def _row_by_row(space, batches):  # type: ignore[no-untyped-def]
    """The count the batch form replaced, one row at a time."""
    totals = Totals()
    for batch in batches:
        sens = batch.get("dp_sensitive_tokens")
        for j, (ids, n) in enumerate(zip(batch["input_ids"], batch["dp_tokens"], strict=True)):
            arr = np.asarray(ids, dtype=np.int64)
            cls, _ = space.classify(arr)
            structural = cls == STRUCTURAL
            padding = int((arr[structural] == space.pad_id).sum()) if space.pad_id is not None else 0
            kept = int((cls == CANDIDATE).sum()) - int(n) if sens is not None else 0
            totals.add_row(
                dp_tokens=int(n),
                special=int(structural.sum()) - padding,
                padding=padding,
                passthrough=int(arr.size - structural.sum() - int(n)) - kept,
                epsilon=None if "dp_epsilon" not in batch else batch["dp_epsilon"][j],
                delta=None if "dp_delta" not in batch else batch["dp_delta"][j],
                sensitive=0 if sens is None else int(sens[j]),
                kept_other=kept,
            )
    return totals


def test_batch_count_equals_row_by_row(tiny_space) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(5801)
    V = int(tiny_space._id_class.size)
    pad = tiny_space.pad_id if tiny_space.pad_id is not None else 0
    for selective in (False, True):
        batches = []
        for _ in range(3):
            rows = [rng.integers(-2, V + 3, int(rng.integers(0, 12))).tolist() for _ in range(40)]
            rows[0] = []
            rows[1] = [pad, pad, *rows[1]]
            n = [int(rng.integers(0, 1 + len(r))) for r in rows]
            batch = {"input_ids": rows, "dp_tokens": n, "dp_epsilon": [1.5 * k for k in n], "dp_delta": [0.0] * 40}
            if selective:
                batch["dp_sensitive_tokens"] = [k // 2 for k in n]
            batches.append(batch)
        assert totals_from_columns(tiny_space, batches).to_dict() == _row_by_row(tiny_space, batches).to_dict()
