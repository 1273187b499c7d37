"""Identifier recovery in the attacks: the identifier rows of a recipe, whole-span scores per kind, the summary table.

Tiny random BERT model; fixed seeds.
"""

from __future__ import annotations

import numpy as np
import pytest

from hf_textdp import PrivatizerConfig
from hf_textdp.errors import InvalidParameterError
from hf_textdp.evaluation.attacks import AttackSettings, run_attack
from hf_textdp.evaluation.attacks.identifier_rows import identifier_rows
from hf_textdp.evaluation.attacks.run import in_public
from hf_textdp.evaluation.attacks.summary import identifier_table
from tests.utils import corpus


FAST = dict(train_rows=100, bootstrap=100, epochs=1, neighbours=20, holdout_rows=50, contextual=False)


def test_identifier_rows_skip_public_rows_and_mark_the_spans() -> None:
    texts = corpus(60, seed=3)
    public = texts[:40] + corpus(50, seed=4)  # the first 40 private sentences are public: never drawn
    labels = np.arange(60, dtype=np.int64)
    rows = identifier_rows({"rows": 15, "seed": 11}, texts, labels, public)
    assert len(rows.texts) == 15 and rows.labels.min() >= 40 and not in_public(rows.texts, public).any()
    assert rows.info["rows_in_public"] == 40 and rows.info["n_identifiers"] == len(rows.spans) == len(rows.kinds)
    assert sum(rows.info["per_kind"].values()) == len(rows.spans)
    for (r, a, b), _kind in zip(rows.spans, rows.kinds, strict=True):
        assert rows.texts[r][a:b].strip() and rows.texts[r][a:b] not in texts[rows.labels[r]]
    again = identifier_rows({"rows": 15, "seed": 11}, texts, labels, public)
    assert again.texts == rows.texts and again.spans == rows.spans  # one seed, one set


@pytest.mark.parametrize(
    ("block", "match"),
    [
        ({"rows": 5}, "rows and seed required"),
        ({"rows": 5, "seed": 1, "n": 3}, "identifiers takes"),
        ({"rows": 21, "seed": 1}, r"identifiers.rows must be 1\.\.20"),
    ],
)
def test_identifier_rows_errors(block: dict, match: str) -> None:
    texts = corpus(60, seed=3)
    with pytest.raises(InvalidParameterError, match=match):
        identifier_rows(block, texts, np.zeros(60, dtype=np.int64), texts[:40])


@pytest.fixture(scope="module")
def marked_record(tiny_bert: str) -> dict:
    texts = corpus(80, seed=5)
    rows = identifier_rows({"rows": 40, "seed": 9}, texts, np.zeros(80, dtype=np.int64), corpus(300, seed=6))
    # ε = 300 keeps 25-45 % of the identifiers whole on the tiny model (its tokenizer is trained anew each session,
    # so its vocabulary varies); at ε = 200 as few as 3 of 68 were kept, and some sessions kept none
    config = PrivatizerConfig(mechanism="madlib", epsilon=300.0, model=tiny_bert)
    rec, released = run_attack(
        config,
        rows.texts,
        corpus(300, seed=6),
        seed=2**40 + 5,
        settings=AttackSettings(**FAST),
        spans=rows.spans,
        span_kinds=rows.kinds,
    )
    rec["_released"], rec["_rows"] = released, rows
    return rec


def test_span_recovery_per_kind(marked_record: dict) -> None:
    """Per kind, the identity attack recovers exactly the identifiers none of whose candidate tokens changed."""
    released, rows, spans = marked_record["_released"], marked_record["_rows"], marked_record["spans"]
    off, starts = released.rows.offsets, released.starts
    changed = released.inputs != released.released
    expect: dict[str, list[bool]] = {}
    for (r, a, b), kind in zip(rows.spans, rows.kinds, strict=True):
        idx = np.arange(starts[r], starts[r + 1])
        o = off[idx]
        inside = idx[(o[:, 0] < b) & (o[:, 1] > a) & (o[:, 1] > o[:, 0])]
        if inside.size:
            expect.setdefault(kind, []).append(not changed[inside].any())
    assert set(spans["by_kind"]) == set(expect)
    for kind, got in expect.items():
        ident = spans["by_kind"][kind]["identity"]["top1"]
        assert ident["n"] == len(got) and ident["value"] == pytest.approx(np.mean(got)), kind
        assert set(spans["by_kind"][kind]) == {"identity", "prior", "bayes"}
    assert (
        sum(spans["by_kind"][k]["identity"]["top1"]["n"] for k in expect) == spans["attacks"]["identity"]["top1"]["n"]
    )
    assert 0 < np.mean(np.concatenate([np.array(v) for v in expect.values()])) < 1  # the check can fail both ways


def test_identifier_table_lists_every_kind(marked_record: dict) -> None:
    rec = {**marked_record, "label": "madlib", "selection": "uniform"}
    table = identifier_table([rec])
    kinds = list(rec["spans"]["by_kind"])
    assert table.splitlines()[0].endswith(" | ".join(kinds) + " |")
    assert table.count("| madlib | 300 | uniform |") == 3  # one line per attack
    assert identifier_table([{k: v for k, v in rec.items() if k != "spans"}]) == ""


def test_span_kinds_need_one_kind_per_span(tiny_bert: str) -> None:
    config = PrivatizerConfig(mechanism="madlib", epsilon=200.0, model=tiny_bert)
    with pytest.raises(InvalidParameterError, match="span_kinds: one kind per span"):
        run_attack(config, ["a row"], ["other"], spans=[(0, 0, 1)], span_kinds=["name", "city"])
