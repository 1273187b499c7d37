"""``Trainer`` trains on every output format the CLI writes (issue 57 item 1): a CSV output wrote ``input_ids`` as
text and ``DataCollatorWithPadding`` refused it, while getting_started said a CLI output "is a dataset like any
other". Each format is read back the way docs/getting_started.md says (CSV with the ``converters`` its write-time
warning names) and trains two steps of a tiny classifier on the private ids."""

from __future__ import annotations

import json
import logging
import math

import pytest

from hf_textdp.cli import main
from tests.utils import write_jsonl


TEXTS = [f"the film was {w} and the plot was {v}" for w in ("good", "dull", "fine", "long") for v in ("thin", "tight")]


def _load(output, fmt, cache):
    import datasets

    if fmt == "folder":
        return datasets.load_from_disk(str(output))
    if fmt == "csv":  # the converters the write-time warning names
        return datasets.load_dataset(
            "csv",
            data_files=str(output),
            split="train",
            cache_dir=cache,
            converters={"input_ids": json.loads, "attention_mask": json.loads},
        )
    return datasets.load_dataset(fmt, data_files=str(output), split="train", cache_dir=cache)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fmt", "name"), [("csv", "out.csv"), ("json", "out.jsonl"), ("parquet", "out.parquet"), ("folder", "out")]
)
def test_trainer_trains_on_each_cli_output_format(fmt, name, tiny_bert, tmp_path):
    pytest.importorskip("accelerate", reason="Trainer needs accelerate (pip install 'hf-textdp[train]')")
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
    )

    src = write_jsonl(tmp_path / "in.jsonl", TEXTS, label=[i % 2 for i in range(len(TEXTS))])
    output = tmp_path / name
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # the library root logger does not propagate to caplog's
    logging.getLogger("hf_textdp").addHandler(handler)
    try:
        assert main(["privatize", str(src), str(output), "--epsilon", "3", "--model", tiny_bert]) == 0
    finally:
        logging.getLogger("hf_textdp").removeHandler(handler)
    warned = [r.getMessage() for r in records if "CSV has no lists" in r.getMessage()]
    assert (len(warned) == 1) == (fmt == "csv")
    if fmt == "csv":
        assert 'converters={"input_ids": json.loads, "attention_mask": json.loads}' in warned[0]

    ds = _load(output, fmt, str(tmp_path / "cache"))
    assert isinstance(ds[0]["input_ids"], list) and isinstance(ds[0]["input_ids"][0], int)
    ds = ds.select_columns(["input_ids", "attention_mask", "label"]).rename_column("label", "labels")
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)
    args = TrainingArguments(
        str(tmp_path / "trainer"),
        max_steps=2,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
    )
    collator = DataCollatorWithPadding(AutoTokenizer.from_pretrained(tiny_bert))
    result = Trainer(model=model, args=args, train_dataset=ds, data_collator=collator).train()
    assert result.global_step == 2 and math.isfinite(result.training_loss)
