"""Train a sentiment classifier with ``Trainer`` on privatized text, through each of hf-textdp's three paths.

0. ``clean``: the same training on the original text, the accuracy privacy is measured against.
1. ``preprocessed``: privatize the training set once with a ``PrivateTokenizer`` (``Dataset.map``), then
   train on the fixed private ids for any number of epochs: the budget is spent once.
2. ``collator``: ``DataCollatorWithPrivatization`` privatizes each batch as it is collated, with fresh
   noise every epoch; each epoch is a release and the accountant adds them up.
3. ``inputs_embeds``: ``DataCollatorForInputsEmbeds`` feeds the noisy vectors themselves
   (``postprocess="vector"``) to the model as ``inputs_embeds``.

The data are real: 2,000 movie reviews of MR (examples/data/mr_2000.jsonl, 1,000 per label), 1,600 to
train and 400 held out, scored on their clean text ("train on private, test on real") next to the
majority-class baseline. The model is the default one, all-MiniLM-L6-v2, and by default only its
**input-embedding matrix** (the space the text is privatized in): a sentence is the mean of its tokens'
rows, frozen, and ``Trainer`` trains a linear layer on it, so every path runs in seconds on a CPU.
``--full`` fine-tunes the whole model instead (AutoModelForSequenceClassification: better, and minutes
per epoch on a CPU; use ``--device cuda``).

    HF_HUB_OFFLINE=1 python examples/train_with_trainer.py
    HF_HUB_OFFLINE=1 python examples/train_with_trainer.py --full --epochs 3 --learning-rate 1e-4 --device cuda

``--data`` takes any .jsonl file with ``text`` and integer ``label`` fields; ``--limit`` rows are drawn at
random, stratified by label, and ``--test-fraction`` of them are held out. The sampling seed
``--data-seed`` is public; the privatization seed is a fresh secret. Needs ``accelerate`` (``Trainer``):
``pip install "hf-textdp[train]"``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any


DATA = Path(__file__).resolve().parent / "data" / "mr_2000.jsonl"
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def bag_of_embeddings(model_dir: str, num_labels: int) -> Any:
    """The mean of the model's input-embedding rows over a row's tokens (frozen), then a trained linear layer.

    It takes ``input_ids`` (paths 0-2) or the noisy vectors as ``inputs_embeds`` (path 3), in the same
    coordinates, and returns ``{"loss", "logits"}`` as ``Trainer`` expects.
    """
    import torch
    from transformers import AutoModel

    class BagOfEmbeddings(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            weight = AutoModel.from_pretrained(model_dir).get_input_embeddings().weight.detach().clone()
            self.embed = torch.nn.Embedding.from_pretrained(weight, freeze=True)
            self.head = torch.nn.Linear(weight.shape[1], num_labels)

        def forward(
            self,
            input_ids: Any = None,
            attention_mask: Any = None,
            inputs_embeds: Any = None,
            labels: Any = None,
            **_: Any,
        ) -> dict[str, Any]:
            vectors = self.embed(input_ids) if inputs_embeds is None else inputs_embeds
            mask = attention_mask.unsqueeze(-1).to(vectors.dtype)
            logits = self.head((vectors * mask).sum(1) / mask.sum(1).clamp(min=1.0))
            loss = None if labels is None else torch.nn.functional.cross_entropy(logits, labels)
            return {"loss": loss, "logits": logits}

    torch.manual_seed(0)
    return BagOfEmbeddings()


def stratified_sample(
    rows: list[dict[str, Any]], limit: int, test_fraction: float, seed: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``limit`` rows drawn at random with each label's share of ``rows``, split into (train, held-out).

    Each label's draw is split the same way, so both parts keep the label shares of the whole file.
    """
    rng = random.Random(seed)
    by_label: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_label.setdefault(r["label"], []).append(r)
    limit = min(limit, len(rows))
    train_rows: list[dict[str, Any]] = []
    test_rows: list[dict[str, Any]] = []
    for label in sorted(by_label):
        group = list(by_label[label])
        rng.shuffle(group)
        take = group[: round(limit * len(group) / len(rows))]
        n_test = round(len(take) * test_fraction)
        test_rows += take[:n_test]
        train_rows += take[n_test:]
    rng.shuffle(train_rows)
    rng.shuffle(test_rows)
    return train_rows, test_rows


def held_out_accuracy(model: Any, model_dir: str, rows: list[dict[str, Any]], batch_size: int = 64) -> float:
    """Accuracy of ``model`` on the clean text of ``rows`` (plain tokenizer, no privatization)."""
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    device = next(model.parameters()).device
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(rows), batch_size):
            chunk = rows[i : i + batch_size]
            enc = tokenizer([r["text"] for r in chunk], padding=True, truncation=True, return_tensors="pt")
            pred = model(**enc.to(device))["logits"].argmax(-1).tolist()
            correct += sum(int(p == r["label"]) for p, r in zip(pred, chunk, strict=True))
    return correct / max(len(rows), 1)


def model_folder(model: str) -> str:
    """A local folder for ``model`` (offline: a folder, a cached hub id, or the packaged default model)."""
    from hf_textdp.io.models import resolve_model

    return str(resolve_model(model)[1])


def train(
    model_dir: str,
    train_ds: Any,
    collator: Any,
    args: argparse.Namespace,
    name: str,
    callbacks: Any = None,
    **extra: Any,
) -> tuple[float, Any]:
    import torch
    from transformers import AutoModelForSequenceClassification, PrinterCallback, Trainer, TrainingArguments

    torch.manual_seed(0)
    if args.full:
        model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=args.num_labels)
    else:
        model = bag_of_embeddings(model_dir, args.num_labels)
    training_args = TrainingArguments(
        output_dir=str(Path(args.output_dir) / name),
        num_train_epochs=args.epochs,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        report_to=[],
        use_cpu=args.device == "cpu",
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        **extra,
    )
    trainer = Trainer(
        model=model, args=training_args, train_dataset=train_ds, data_collator=collator, callbacks=callbacks
    )
    trainer.remove_callback(PrinterCallback)  # its one dict of timings: the lines below say what matters
    loss = float(trainer.train().training_loss)
    if not math.isfinite(loss):
        raise RuntimeError(f"{name}: the training loss is not finite ({loss}).")
    return loss, trainer.model


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a model folder or a cached hub id")
    parser.add_argument("--full", action="store_true", help="fine-tune the whole model (slow on a CPU)")
    parser.add_argument("--data", default=str(DATA), help="a .jsonl file with text and label (default: MR 2,000)")
    parser.add_argument("--limit", type=int, default=2000, help="rows drawn at random, stratified by label")
    parser.add_argument("--test-fraction", type=float, default=0.2, help="share of the rows held out")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the (public) row sampling")
    parser.add_argument("--epochs", type=float, default=None, help="(default: 4, or 1 with --full)")
    parser.add_argument("--max-steps", type=int, default=-1, help="stop after this many steps (-1: full epochs)")
    parser.add_argument("--epsilon", type=float, default=100.0, help="madlib's ε (your setting)")
    parser.add_argument("--batch-size", type=int, default=None, help="(default: 64, or 16 with --full)")
    parser.add_argument("--learning-rate", type=float, default=None, help="(default: 3e-2, or 1e-4 with --full)")
    parser.add_argument("--paths", default="clean,preprocessed,collator,inputs_embeds")
    parser.add_argument("--seed-file", default=None, help="a file holding the secret seed (default: a fresh one)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (privatization and training)")
    parser.add_argument("--output-dir", default=None, help="Trainer output folder (default: a temporary one)")
    args = parser.parse_args(argv)
    args.epochs = args.epochs if args.epochs is not None else (1.0 if args.full else 4.0)
    args.learning_rate = args.learning_rate or (1e-4 if args.full else 3e-2)
    args.batch_size = args.batch_size or (16 if args.full else 64)
    return args


def load_rows(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    with open(args.data, encoding="utf-8") as f:
        source = [json.loads(line) for line in f if line.strip()]
    source = [{"text": r["text"], "label": int(r["label"])} for r in source]
    train_rows, test_rows = stratified_sample(source, args.limit, args.test_fraction, args.data_seed)
    args.num_labels = max(r["label"] for r in source) + 1
    counts = [sum(r["label"] == k for r in test_rows) for k in range(args.num_labels)]
    what = "the whole model" if args.full else "a linear layer on the mean of its frozen input embeddings"
    print(
        f"data: {len(train_rows)} training rows, {len(test_rows)} held-out rows (labels {counts}) of "
        f"{Path(args.data).name}; majority baseline {max(counts) / max(len(test_rows), 1):.3f}\n"
        f"model: {args.model}, Trainer trains {what}; madlib ε = {args.epsilon:g} (your setting)"
    )
    return [{**r, "idx": i} for i, r in enumerate(train_rows)], test_rows


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from datasets import Dataset
    from transformers import AutoTokenizer, DataCollatorWithPadding
    from transformers.utils import logging as hf_logging

    from hf_textdp import (
        DataCollatorForInputsEmbeds,
        DataCollatorWithPrivatization,
        PrivateTokenizer,
        PrivatizerConfig,
        privacy_report,
    )
    from hf_textdp.integrations.collators import PrivacyAccountingCallback

    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        args.output_dir = args.output_dir or tmp
        rows, test_rows = load_rows(args)
        model_dir = model_folder(args.model)
        train_ds = Dataset.from_list(rows)
        # a secret key: keep it in a file (outside any repository) to reproduce the release
        seed = int(Path(args.seed_file).read_text(), 0) if args.seed_file else secrets.randbits(64)
        config = PrivatizerConfig(epsilon=args.epsilon, model=model_dir, device=args.device)
        paths = args.paths.split(",")

        def report(name: str, loss: float, model: Any, privacy: str) -> None:
            acc = held_out_accuracy(model, model_dir, test_rows)
            print(f"{name:>13}: held-out accuracy {acc:.3f}, loss {loss:.3f}; {privacy}")

        if "clean" in paths:  # 0. no privacy: the plain tokenizer's ids
            tokenizer = AutoTokenizer.from_pretrained(model_dir)
            clean = train_ds.map(lambda b: tokenizer(b["text"], truncation=True), batched=True)
            clean = clean.remove_columns(["text", "idx"])
            loss, model = train(model_dir, clean, DataCollatorWithPadding(tokenizer), args, "clean")
            report("clean", loss, model, "no privacy (the original text)")

        if "preprocessed" in paths:
            # 1. privatize once; every epoch then reuses the same private ids (no further privacy cost)
            ptok = PrivateTokenizer.from_pretrained(model_dir, config=config, seed=seed)
            private = train_ds.map(
                lambda batch, idx: ptok(batch["text"], indices=idx, truncation=True),
                batched=True,
                with_indices=True,
                remove_columns=["text"],
            )
            spent = max(private["dp_epsilon"])
            private = private.remove_columns(["dp_tokens", "dp_epsilon", "idx"])
            loss, model = train(model_dir, private, DataCollatorWithPadding(ptok.tokenizer), args, "preprocessed")
            report("preprocessed", loss, model, f"dp_epsilon ≤ {spent:.4g} (row bound, spent once)")

        collators = []
        if "collator" in paths:
            collators.append(("collator", DataCollatorWithPrivatization(None, config, seed=seed)))
        if "inputs_embeds" in paths:
            vector = PrivatizerConfig(epsilon=args.epsilon, model=model_dir, device=args.device, postprocess="vector")
            collators.append(("inputs_embeds", DataCollatorForInputsEmbeds(None, vector, seed=seed)))
        for name, collator in collators:
            # 2./3. privatize on the fly: fresh noise per epoch, each epoch a release the accountant adds up
            callbacks = [PrivacyAccountingCallback(collator)]  # set_epoch each epoch: fresh noise
            loss, model = train(model_dir, train_ds, collator, args, name, callbacks, remove_unused_columns=False)
            training = privacy_report(collator)["training"]
            spent = f"dp_epsilon ≤ {training['max_example_epsilon']:.4g} (row bound, {training['epochs']} epochs)"
            report(name, loss, model, spent)
    print(f"done in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
