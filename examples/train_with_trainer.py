"""Fine-tune a classifier with ``Trainer`` on privatized text, through each of hf-textdp's three paths.

1. ``preprocessed``: privatize the dataset once with a ``PrivateTokenizer`` (``Dataset.map``), then train
   on the fixed private ids for any number of epochs: the budget is spent once.
2. ``collator``: ``DataCollatorWithPrivatization`` privatizes each batch as it is collated, with fresh
   noise every epoch; each epoch is a release and the accountant adds them up.
3. ``inputs_embeds``: ``DataCollatorForInputsEmbeds`` feeds the noisy vectors themselves
   (``postprocess="vector"``) to the model as ``inputs_embeds``.

Each path trains on privatized text and is scored on held-out rows of clean text (the usual
"train on private, test on real" setting), next to the majority-class baseline of those rows.

Run it (offline; by default it builds a tiny random BERT and a toy sentiment set in a temporary folder):

    HF_HUB_OFFLINE=1 python examples/train_with_trainer.py --epochs 2
    HF_HUB_OFFLINE=1 python examples/train_with_trainer.py --model sentence-transformers/all-MiniLM-L6-v2 \\
        --data ../shared/data/senteval/mr.jsonl --limit 2000 --max-steps 100

``--data`` takes a .jsonl file with ``text`` and integer ``label`` fields. ``--limit`` rows are drawn at
random, stratified by label, from the whole file (MR is sorted by label: its first 2,000 rows are all
positive), and ``--test-fraction`` of them (stratified too) are held out for the accuracy. The
sampling seed ``--data-seed`` is public; the privatization seed is a fresh secret. Needs ``accelerate``
(``Trainer``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import secrets
import tempfile
from pathlib import Path
from typing import Any


POSITIVE = "good great wonderful funny moving brilliant charming fresh smart touching".split()
NEGATIVE = "bad awful boring dull tedious clumsy stale silly flat lifeless".split()
NEUTRAL = "the a movie film story plot actor script scene music ending is was very quite and but".split()


def toy_data(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Sentences whose label is which polarity word list they draw from."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = i % 2
        words = [rng.choice(NEUTRAL) for _ in range(rng.randint(4, 10))]
        for _ in range(2):
            words.insert(rng.randrange(len(words) + 1), rng.choice(POSITIVE if label else NEGATIVE))
        rows.append({"text": " ".join(words), "label": label})
    return rows


def build_tiny_model(folder: Path, corpus: list[str]) -> str:
    """A WordPiece tokenizer trained on ``corpus`` and a random 1-layer BERT, saved in ``folder``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(corpus, trainers.WordPieceTrainer(vocab_size=300, special_tokens=specials))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=128,
    )
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(fast),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        pad_token_id=fast.pad_token_id,
    )
    BertModel(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return str(folder)


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
            pred = model(**enc.to(device)).logits.argmax(-1).tolist()
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
    from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=args.num_labels)
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
    loss = float(trainer.train().training_loss)
    if not math.isfinite(loss):
        raise RuntimeError(f"{name}: the training loss is not finite ({loss}).")
    return loss, trainer.model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        default="tiny",
        help="'tiny' (built here), a model folder or a cached hub id, e.g. sentence-transformers/all-MiniLM-L6-v2",
    )
    parser.add_argument("--data", default=None, help="a .jsonl file with text and label (default: toy sentences)")
    parser.add_argument(
        "--limit", type=int, default=320, help="rows drawn at random, stratified by label (train + held-out)"
    )
    parser.add_argument("--test-fraction", type=float, default=0.2, help="share of the rows held out for accuracy")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the (public) row sampling")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--max-steps", type=int, default=-1, help="stop after this many steps (-1: full epochs)")
    parser.add_argument("--epsilon", type=float, default=100.0, help="per-token ε of madlib")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--paths", default="preprocessed,collator,inputs_embeds")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (privatization and training)")
    parser.add_argument("--output-dir", default=None, help="Trainer output folder (default: a temporary one)")
    args = parser.parse_args(argv)

    from datasets import Dataset
    from transformers import DataCollatorWithPadding
    from transformers.utils import logging as hf_logging

    from hf_textdp import (
        DataCollatorForInputsEmbeds,
        DataCollatorWithPrivatization,
        PrivateTokenizer,
        PrivatizerConfig,
        privacy_report,
    )
    from hf_textdp.integrations.collators import PrivacyAccountingCallback
    from hf_textdp.utils.logging import set_verbosity_info

    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    set_verbosity_info()  # the collators' one line per epoch: "hf_textdp: epoch E: max per-example ε = ..."
    with tempfile.TemporaryDirectory() as tmp:
        if args.output_dir is None:
            args.output_dir = tmp
        if args.data is None:
            source = toy_data(args.limit)
        else:
            with open(args.data, encoding="utf-8") as f:
                source = [json.loads(line) for line in f if line.strip()]
        source = [{"text": r["text"], "label": int(r["label"])} for r in source]
        train_rows, test_rows = stratified_sample(source, args.limit, args.test_fraction, args.data_seed)
        rows = [{**r, "idx": i} for i, r in enumerate(train_rows)]
        args.num_labels = max(r["label"] for r in source) + 1
        counts = [sum(r["label"] == k for r in test_rows) for k in range(args.num_labels)]
        print(
            f"data: {len(rows)} training rows, {len(test_rows)} held-out rows (labels {counts}), "
            f"majority baseline {max(counts) / max(len(test_rows), 1):.3f}"
        )
        model_dir = (
            build_tiny_model(Path(tmp) / "tiny", [r["text"] for r in rows])
            if args.model == "tiny"
            else (model_folder(args.model))
        )
        train_ds = Dataset.from_list(rows)
        seed = secrets.randbits(
            64
        )  # a secret key: keep it (e.g. in a file) to reproduce the release, never publish it
        config = PrivatizerConfig(epsilon=args.epsilon, model=model_dir, device=args.device)
        paths = args.paths.split(",")

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
            acc = held_out_accuracy(model, model_dir, test_rows)
            print(
                f"preprocessed: loss={loss:.4f} held-out accuracy={acc:.3f} max per-example ε={spent:.4g} "
                "(spent once, any number of epochs)"
            )

        collators = []
        if "collator" in paths:
            collators.append(("collator", DataCollatorWithPrivatization(None, config, seed=seed)))
        if "inputs_embeds" in paths:
            vector = PrivatizerConfig(epsilon=args.epsilon, model=model_dir, device=args.device, postprocess="vector")
            collators.append(("inputs_embeds", DataCollatorForInputsEmbeds(None, vector, seed=seed)))
        for name, collator in collators:
            # 2./3. privatize on the fly: fresh noise per epoch, each epoch a release the accountant adds up
            callbacks = [PrivacyAccountingCallback(collator)]  # set_epoch each epoch: fresh noise, one log line
            loss, model = train(model_dir, train_ds, collator, args, name, callbacks, remove_unused_columns=False)
            acc = held_out_accuracy(model, model_dir, test_rows)
            training = privacy_report(collator)["training"]
            print(
                f"{name}: loss={loss:.4f} held-out accuracy={acc:.3f} "
                f"max per-example ε={training['max_example_epsilon']:.4g} "
                f"over {training['epochs']} epoch(s), {training['releases']} releases"
            )


if __name__ == "__main__":
    main()
