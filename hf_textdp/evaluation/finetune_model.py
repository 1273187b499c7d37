"""One model of a full fine-tune (finetune_full.py): its training budget, training with ``Trainer`` (every layer
and a new head, the loss record of convergence.py), its accuracy and per-row losses on token-id rows, and the
loss-threshold membership attack on it (membership.py)."""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .finetune_data import Split


__all__ = [
    "CURVE_BLOCK",
    "Budget",
    "Membership",
    "accuracy",
    "membership_attack",
    "row_logits",
    "row_losses",
    "train_model",
]


@dataclass(frozen=True)
class Budget:
    """Training hyper-parameters shared by every unit."""

    epochs: float = 2.0
    learning_rate: float = 1e-4
    batch_size: int = 16
    max_length: int = 48
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    eval_batch_size: int = 64
    #: > 0: ``epochs`` is a cap and training stops once an epoch's mean loss improves by less than this
    #: share over the previous epoch's (convergence.py); the learning-rate schedule still spans the cap
    plateau_tol: float = 0.0


@dataclass(frozen=True)
class Membership:
    """The loss-threshold attack of every trained model (membership.py): ``rows`` training rows (a fixed
    draw, seed ``seed``) as members against as many rows of the test split as non-members."""

    rows: int = 500
    seed: int = 1111
    resamples: int = 1000
    fpr: float = 0.01


def row_logits(model: Any, ids: list[list[int]], pad_id: int, batch_size: int) -> torch.Tensor:
    """``[rows, classes]`` logits of ``model`` on token-id rows, in row order (batched by similar length)."""
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = torch.zeros((len(ids), int(model.config.num_labels)), dtype=torch.float32)
    where = next(model.parameters()).device
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            rows = [ids[i] for i in chunk]
            width = max(len(r) for r in rows)
            x = torch.full((len(rows), width), pad_id, dtype=torch.long)
            mask = torch.zeros_like(x)
            for k, r in enumerate(rows):
                x[k, : len(r)] = torch.tensor(r)
                mask[k, : len(r)] = 1
            out[chunk] = model(input_ids=x.to(where), attention_mask=mask.to(where)).logits.float().cpu()
    return out


def accuracy(model: Any, ids: list[list[int]], labels: list[int], pad_id: int, batch_size: int) -> float:
    """Accuracy in % of ``model`` on token-id rows."""
    if not ids:
        return 0.0
    pred = row_logits(model, ids, pad_id, batch_size).argmax(-1)
    return 100.0 * int((pred == torch.tensor(labels)).sum()) / len(ids)


def row_losses(model: Any, ids: list[list[int]], labels: list[int], pad_id: int, batch_size: int) -> np.ndarray:
    """Per-row cross-entropy of ``model`` (the membership attack's score)."""
    logits = row_logits(model, ids, pad_id, batch_size)
    losses = torch.nn.functional.cross_entropy(logits, torch.tensor(labels), reduction="none")
    return losses.numpy().astype(np.float64)


#: the loss curve of a record: means of this many consecutive optimizer steps
CURVE_BLOCK = 10


def train_model(
    model_dir: str,
    dataset: Any,
    collator: Any,
    budget: Budget,
    seed: int,
    num_labels: int,
    callbacks: list[Any] | None = None,
    device: str = "cpu",
    **extra: Any,
) -> tuple[Any, float, dict[str, Any]]:
    """Fine-tune every layer and a new head with ``Trainer``; (model, mean training loss, loss record).

    The loss record holds the per-epoch mean losses, the means of :data:`CURVE_BLOCK` steps, the epochs run
    and whether training stopped on the plateau rule (``budget.plateau_tol``, convergence.py).
    """
    from transformers import AutoModelForSequenceClassification, TrainingArguments
    from transformers.utils import logging as hf_logging

    from .convergence import LossLog, PlateauCallback, RecordingTrainer

    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=num_labels)
    log = LossLog()
    plateau = PlateauCallback(log, budget.plateau_tol)
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp,
            num_train_epochs=budget.epochs,
            per_device_train_batch_size=budget.batch_size,
            learning_rate=budget.learning_rate,
            weight_decay=budget.weight_decay,
            warmup_steps=budget.warmup_ratio,
            lr_scheduler_type="linear",
            seed=seed,
            use_cpu=device == "cpu",
            save_strategy="no",
            logging_strategy="no",
            report_to=[],
            disable_tqdm=True,
            train_sampling_strategy="group_by_length",
            dataloader_num_workers=0,
            **extra,
        )
        trainer = RecordingTrainer(
            model=model,
            args=args,
            train_dataset=dataset,
            data_collator=collator,
            callbacks=[*(callbacks or []), plateau],
        )
        trainer.loss_log = log
        loss = float(trainer.train().training_loss)
    if not math.isfinite(loss):
        raise RuntimeError(f"the training loss is not finite ({loss})")
    record = {
        "epoch_losses": log.epochs,
        "final_training_loss": log.epochs[-1] if log.epochs else loss,
        "epochs_run": len(log.epochs),
        "stopped_on_plateau": plateau.stopped_on_plateau,
        "loss_curve": {"block_steps": CURVE_BLOCK, "steps": len(log.steps), "means": log.curve(CURVE_BLOCK)},
    }
    return trainer.model, loss, record


def membership_attack(
    model: Any,
    train: Split,
    test: Split,
    private: tuple[list[list[int]], list[list[int]]] | None,
    mia: Membership,
    pad: int,
    batch_size: int,
) -> dict[str, Any]:
    """The loss-threshold attack on ``model`` (membership.py): a fixed draw of training rows (members)
    against as many test rows (non-members). ``original``: both scored on their clean text (did the model
    memorize the private rows?); ``privatized`` (the ``once`` path): members on the private ids the model
    was trained on, non-members on the privatized test text."""
    from .membership import loss_threshold_attack

    n = min(mia.rows, len(train.ids), len(test.ids))
    rng = np.random.default_rng(mia.seed)
    members = np.sort(rng.choice(len(train.ids), n, replace=False)).tolist()
    others = np.sort(rng.choice(len(test.ids), n, replace=False)).tolist()
    labels_m = [train.labels[i] for i in members]
    labels_n = [test.labels[i] for i in others]

    def attack(train_ids: list[list[int]], test_ids: list[list[int]]) -> dict[str, Any]:
        m = row_losses(model, [train_ids[i] for i in members], labels_m, pad, batch_size)
        o = row_losses(model, [test_ids[i] for i in others], labels_n, pad, batch_size)
        out = loss_threshold_attack(m, o, fpr=mia.fpr, resamples=mia.resamples, seed=mia.seed)
        return {**out, "member_loss_mean": float(m.mean()), "nonmember_loss_mean": float(o.mean())}

    result = {"members": "training rows", "nonmembers": "test split", "original": attack(train.ids, test.ids)}
    if private is not None:
        result["privatized"] = attack(*private)
    return result
