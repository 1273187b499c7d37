"""Whole-model fine-tuning on privatized text: ``finetune: {mode: full}`` recipes.

Every layer of the model and a fresh classification head (``AutoModelForSequenceClassification``) are
trained with ``transformers.Trainer`` on privatized training text, and the one trained model is scored
twice: on clean test text (``train_only``) and on privatized test text (``train_and_test``; the test
split is privatized with ``privatize_dataset(..., split="test")``, so its noise differs from the
training noise). The training text takes one of two paths:

- ``once``: ``privatize_dataset(..., split="train")`` once; every epoch reuses the same private ids.
- ``on_the_fly``: ``DataCollatorWithPrivatization`` with ``PrivacyAccountingCallback``: fresh noise
  each epoch (each epoch is a release; the record holds the collator's per-example ε total).

Each unit is (task, privatizer, ε, noise seed, path), or (task, training seed) for clean; it writes one
JSON per setting (``{task}__{label}__eps{ε}__{path}__seed{s}__{setting}.json``) and is skipped when
they exist, so a killed run resumes. Records hold accuracy, the measured replacement rate (share of
privatized positions whose id changed, after truncation), the budget, the device and the wall time; never
text, ids or a private seed (the noise seeds are public benchmark seeds, ``allow_weak_seed=True``).
``device`` (``hf-textdp evaluate --device``) is where the model trains and is scored; the privatizers run
on the CPU, so a unit's private text is the same on every device.

Recipe layout (``recipes/finetune_full.yaml``)::

    name: finetune_full
    finetune:
      mode: full
      model: sentence-transformers/all-MiniLM-L6-v2
      tasks: [{name: trec, train_rows: 500}, {name: mr, train_rows: 500, test_rows: 500}]
      training: {epochs: 2, learning_rate: 1.0e-4, batch_size: 16, max_length: 48}
      train_seeds: [0, 1, 2]          # clean baselines; private units use the first
      noise_seeds: [1111, 2222, 3333]
    privatizers:
      - {mechanism: madlib, epsilons: [40, 60, 80, 120], on_the_fly: [60, 80]}

MR, CR and MPQA have no test split: a stratified held-out split of ``test_rows`` rows (sampling seed
``data_seed``) is drawn first and the training rows come from the rest.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import PrivatizerConfig
from ..io.models import resolve_model
from ..space import DEFAULT_MODEL, parse_device
from .common import provenance, recipe_from_dict, recipe_root, save_result, versions
from .plots import plot_loss_curves
from .tasks import TASKS, _stratified_subsample, chance_accuracy, load_task


__all__ = ["FULL_PROTOCOL", "Budget", "Unit", "FullRecipe", "parse_full", "run_full_finetune", "full_table"]

FULL_PROTOCOL = "finetune_full"
PATHS = ("once", "on_the_fly")
SETTINGS = ("train_only", "train_and_test")


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


@dataclass(frozen=True)
class Unit:
    """One trained model: clean (``label == "clean"``) or one privatizer at one ε, noise seed and path."""

    task: str
    label: str
    mechanism: str
    epsilon: float | None
    noise_seed: int | None
    path: str | None
    train_seed: int
    options: tuple[tuple[str, Any], ...] = ()
    #: the file name names the training seed (recipes with ``private_train_seeds``)
    tagged: bool = False

    def file(self, setting: str) -> str:
        if self.epsilon is None:
            return f"{self.task}__clean__train{self.train_seed}__clean.json"
        seeds = f"seed{self.noise_seed}" + (f"__train{self.train_seed}" if self.tagged else "")
        return f"{self.task}__{self.label}__eps{self.epsilon:g}__{self.path}__{seeds}__{setting}.json"

    def files(self) -> list[str]:
        return [self.file("clean")] if self.epsilon is None else [self.file(s) for s in SETTINGS]


@dataclass
class FullRecipe:
    """A parsed ``finetune: {mode: full}`` recipe."""

    name: str
    model: str
    tasks: list[dict[str, Any]]
    budget: Budget
    train_seeds: list[int]
    noise_seeds: list[int]
    data_seed: int
    data_dir: str | None
    units: list[Unit] = field(default_factory=list)
    private_train_seeds: list[int] | None = None
    membership: Membership | None = None


def parse_full(raw: dict[str, Any]) -> FullRecipe:
    """Parse and check a full fine-tuning recipe; its units in run order (clean first, then by task)."""
    ft = dict(raw["finetune"])
    known = {f for f in Budget.__dataclass_fields__}
    training = dict(ft.get("training") or {})
    unknown = set(training) - known
    if unknown:
        raise ValueError(f"finetune.training: unknown keys {sorted(unknown)} (known: {sorted(known)})")
    mia = ft.get("membership")
    if mia is not None and set(mia) - set(Membership.__dataclass_fields__):
        raise ValueError(
            f"finetune.membership: unknown keys {sorted(set(mia) - set(Membership.__dataclass_fields__))}"
        )
    private_seeds = ft.get("private_train_seeds")
    rec = FullRecipe(
        name=str(raw.get("name", FULL_PROTOCOL)),
        model=str(ft.get("model", DEFAULT_MODEL)),
        tasks=[dict(t) for t in ft["tasks"]],
        budget=Budget(**training),
        train_seeds=[int(s) for s in ft.get("train_seeds", [0])],
        noise_seeds=[int(s) for s in ft.get("noise_seeds", [1111])],
        data_seed=int(ft.get("data_seed", raw.get("seed", 1111))),
        data_dir=(raw.get("data") or {}).get("dir"),
        private_train_seeds=None if private_seeds is None else [int(s) for s in private_seeds],
        membership=None if mia is None else Membership(**mia),
    )
    for t in rec.tasks:
        if t["name"] not in TASKS:
            raise ValueError(f"unknown task {t['name']!r}")
    # the shared recipe parser checks the privatizer entries (mechanism, ε list, options)
    shell = recipe_from_dict(
        {"name": rec.name, "tasks": [t["name"] for t in rec.tasks], "privatizers": raw.get("privatizers") or []}
    )
    entries = list(zip(shell.privatizers, raw.get("privatizers") or [], strict=True))
    for spec, entry in entries:
        fly = {float(e) for e in entry.get("on_the_fly", [])}
        if not fly <= set(spec.epsilons):
            raise ValueError(f"{spec.name}: on_the_fly ε {sorted(fly)} must be among epsilons {spec.epsilons}")

    def cell(t: dict[str, Any], spec: Any, entry: dict[str, Any], seeds: list[int], tagged: bool) -> list[Unit]:
        fly = {float(e) for e in entry.get("on_the_fly", [])}
        options = tuple(sorted(spec.options.items()))
        return [
            Unit(t["name"], spec.name, spec.mechanism, eps, seed, path, train, options, tagged)
            for eps in spec.epsilons
            for path in (PATHS if eps in fly else PATHS[:1])
            for seed in seeds
            for train in (rec.private_train_seeds if tagged and rec.private_train_seeds else [rec.train_seeds[0]])
        ]

    if rec.private_train_seeds is not None:
        # training seeds on private units too: every clean model first, then one cell (privatizer, ε, path)
        # after the other, all its noise × training seeds together, privatizers and ε in recipe order (list the
        # cells that matter most first), so that a cut-short run leaves complete cells
        rec.units += [
            Unit(t["name"], "clean", "none", None, None, None, s) for t in rec.tasks for s in rec.train_seeds
        ]
        for t in rec.tasks:
            for spec, entry in entries:
                rec.units += cell(t, spec, entry, rec.noise_seeds, True)
        return rec
    # run order: one clean model per task, then every privatized unit of the first noise seed, then the
    # next seeds, then the other clean training seeds, so that a cut-short run still covers the grid
    rec.units += [Unit(t["name"], "clean", "none", None, None, None, rec.train_seeds[0]) for t in rec.tasks]
    for seed in rec.noise_seeds:
        for t in rec.tasks:
            for spec, entry in entries:
                rec.units += cell(t, spec, entry, [seed], False)
    rec.units += [
        Unit(t["name"], "clean", "none", None, None, None, s) for s in rec.train_seeds[1:] for t in rec.tasks
    ]
    return rec


@dataclass
class _Split:
    texts: list[str]
    labels: list[int]
    ids: list[list[int]]  # clean token ids, truncated to max_length


def _load_splits(rec: FullRecipe, task: dict[str, Any], tokenizer: Any, root: Path | None) -> dict[str, _Split]:
    """The task's train and test rows: stratified subsamples (a held-out test split for ``cv`` tasks)."""
    name = task["name"]
    data = load_task(name, data_dir=rec.data_dir, root=root)
    if TASKS[name].protocol == "cv":
        labels = data.labels["all"]
        test = _stratified_subsample(labels, int(task["test_rows"]), rec.data_seed)
        rest = np.setdiff1d(np.arange(labels.size), test)
        pools = {"train": rest, "test": test}
        source = {"train": "all", "test": "all"}
    else:
        pools = {s: np.arange(data.labels[s].size) for s in ("train", "test")}
        source = {"train": "train", "test": "test"}
    out = {}
    for split, pool in pools.items():
        limit = task.get(f"{split}_rows")
        if limit is not None and not (split == "test" and TASKS[name].protocol == "cv"):
            pool = pool[_stratified_subsample(data.labels[source[split]][pool], int(limit), rec.data_seed)]
        texts = [data.texts[source[split]][i] for i in pool]
        ids = tokenizer(texts, truncation=True, max_length=rec.budget.max_length)["input_ids"]
        out[split] = _Split(texts, [int(x) for x in data.labels[source[split]][pool]], [list(i) for i in ids])
    return out


def _truncate(ids: Sequence[int], max_length: int) -> list[int]:
    """Cut a privatized row as the tokenizer cuts the clean one: keep the first tokens and the final special."""
    ids = list(ids)
    return ids if len(ids) <= max_length else ids[: max_length - 1] + ids[-1:]


def _rate(clean: list[list[int]], private: list[list[int]]) -> tuple[int, int]:
    """(changed, privatized) positions, leaving out the first and last (special) tokens."""
    changed = total = 0
    for a, b in zip(clean, private, strict=True):
        changed += sum(x != y for x, y in zip(a[1:-1], b[1:-1], strict=False))
        total += max(len(a) - 2, 0)
    return changed, total


class _CountingCollator:
    """Wraps a privatizing collator and counts, per batch, the positions whose id the noise changed."""

    def __init__(self, inner: Any, clean: list[list[int]]) -> None:
        self.inner = inner
        self.clean = clean
        self.changed = 0
        self.total = 0

    def __call__(self, features: list[dict[str, Any]]) -> Any:
        batch = self.inner(features)
        private = [row.tolist() for row in batch["input_ids"]]
        refs = [self.clean[int(f["idx"])] for f in features]
        c, t = _rate(refs, [p[: len(r)] for p, r in zip(private, refs, strict=True)])
        self.changed += c
        self.total += t
        return batch


def _privatize(
    split: _Split, config: PrivatizerConfig, seed: int, name: str, max_length: int
) -> tuple[list[list[int]], float]:
    """``privatize_dataset`` of one split (noise key = ``name``): truncated private ids and the max row ε."""
    from datasets import Dataset

    from ..run.pipeline import privatize_dataset

    ds = Dataset.from_dict({"text": split.texts})
    # public benchmark data with public seeds (1111, ...): not a privacy key; never reuse them on private data
    out = privatize_dataset(ds, config, split=name, seed=seed, allow_weak_seed=True)
    ids = [_truncate(r, max_length) for r in out["input_ids"]]
    return ids, float(max(out["dp_epsilon"]))


def _logits(model: Any, ids: list[list[int]], pad_id: int, batch_size: int) -> torch.Tensor:
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


def _accuracy(model: Any, ids: list[list[int]], labels: list[int], pad_id: int, batch_size: int) -> float:
    """Accuracy in % of ``model`` on token-id rows."""
    if not ids:
        return 0.0
    pred = _logits(model, ids, pad_id, batch_size).argmax(-1)
    return 100.0 * int((pred == torch.tensor(labels)).sum()) / len(ids)


def _row_losses(model: Any, ids: list[list[int]], labels: list[int], pad_id: int, batch_size: int) -> np.ndarray:
    """Per-row cross-entropy of ``model`` (the membership attack's score)."""
    logits = _logits(model, ids, pad_id, batch_size)
    losses = torch.nn.functional.cross_entropy(logits, torch.tensor(labels), reduction="none")
    return losses.numpy().astype(np.float64)


#: the loss curve of a record: means of this many consecutive optimizer steps
CURVE_BLOCK = 10


def _train(
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


def _run_unit(
    unit: Unit,
    splits: dict[str, _Split],
    rec: FullRecipe,
    model_dir: str,
    tokenizer: Any,
    num_labels: int,
    device: str = "cpu",
) -> dict[str, dict[str, Any]]:
    """Train one model and score it; the records by setting."""
    from datasets import Dataset
    from transformers import DataCollatorWithPadding

    from ..integrations.collators import DataCollatorWithPrivatization, PrivacyAccountingCallback

    b = rec.budget
    train, test = splits["train"], splits["test"]
    t0 = time.perf_counter()
    extra: dict[str, Any] = {}
    info: dict[str, Any] = {}
    if unit.epsilon is None:
        train_ids = train.ids
        dataset = Dataset.from_dict({"input_ids": train_ids, "labels": train.labels})
        collator: Any = DataCollatorWithPadding(tokenizer)
    else:
        config = PrivatizerConfig(
            mechanism=unit.mechanism, epsilon=unit.epsilon, model=rec.model, options=dict(unit.options)
        )
        assert unit.noise_seed is not None
        if unit.path == "once":
            train_ids, max_eps = _privatize(train, config, unit.noise_seed, "train", b.max_length)
            changed, total = _rate(train.ids, train_ids)
            info["training_privacy"] = {"epochs": b.epochs, "releases": 1, "max_example_epsilon": max_eps}
            dataset = Dataset.from_dict({"input_ids": train_ids, "labels": train.labels})
            collator = DataCollatorWithPadding(tokenizer)
        else:
            inner = DataCollatorWithPrivatization(
                tokenizer,
                config,
                seed=unit.noise_seed,
                split="train",
                allow_weak_seed=True,
                max_length=b.max_length,
            )
            collator = _CountingCollator(inner, train.ids)
            dataset = Dataset.from_dict(
                {
                    "text": train.texts,
                    "label": train.labels,
                    "idx": list(range(len(train.texts))),
                    "length": [len(i) for i in train.ids],
                }
            )
            extra = {"remove_unused_columns": False, "callbacks": [PrivacyAccountingCallback(inner)]}
    callbacks = extra.pop("callbacks", None)
    seconds_privatize = time.perf_counter() - t0
    model, loss, curve = _train(
        model_dir, dataset, collator, b, unit.train_seed, num_labels, callbacks, device=device, **extra
    )
    if unit.path == "on_the_fly":
        changed, total = collator.changed, collator.total
        training = collator.inner.privacy_report()["training"]
        info["training_privacy"] = {k: training[k] for k in ("epochs", "releases", "max_example_epsilon")}
    pad = int(tokenizer.pad_token_id)
    accs = {"train_only": _accuracy(model, test.ids, test.labels, pad, b.eval_batch_size)}
    test_rate = None
    test_ids = None
    if unit.epsilon is not None and unit.noise_seed is not None:
        test_ids, _ = _privatize(test, config, unit.noise_seed, "test", b.max_length)
        accs["train_and_test"] = _accuracy(model, test_ids, test.labels, pad, b.eval_batch_size)
        c, t = _rate(test.ids, test_ids)
        test_rate = 100.0 * c / max(t, 1)
    if rec.membership is not None:
        private = None if unit.path != "once" or test_ids is None else (train_ids, test_ids)
        info["membership"] = _membership(model, train, test, private, rec.membership, pad, b.eval_batch_size)
    wall = time.perf_counter() - t0
    base = {
        "protocol": FULL_PROTOCOL,
        "task": unit.task,
        "task_title": TASKS[unit.task].title,
        "mechanism": unit.mechanism,
        "label": unit.label,
        "epsilon": unit.epsilon,
        "options": dict(unit.options),
        "noise_seed": unit.noise_seed,
        "train_seed": unit.train_seed,
        "path": unit.path,
        "n_rows": {"train": len(train.ids), "test": len(test.ids)},
        "chance": _chance(unit.task, len(test.ids)),
        "budget": asdict(b),
        "model": rec.model,
        "device": device if device == "cpu" else f"{device} ({torch.cuda.get_device_name(device)})",
        "training_loss": loss,
        **curve,
        "wall_s": round(wall, 1),
        "privatize_s": round(seconds_privatize, 1),
        **info,
    }
    if unit.epsilon is None:
        return {"clean": {**base, "setting": "clean", "accuracy": accs["train_only"]}}
    train_rate = 100.0 * changed / max(total, 1)
    return {
        s: {
            **base,
            "setting": s,
            "accuracy": accs[s],
            "clean_test_accuracy": accs["train_only"],
            "replacement_rate": {"train": train_rate, "test": test_rate},
        }
        for s in SETTINGS
    }


def _membership(
    model: Any,
    train: _Split,
    test: _Split,
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
        m = _row_losses(model, [train_ids[i] for i in members], labels_m, pad, batch_size)
        o = _row_losses(model, [test_ids[i] for i in others], labels_n, pad, batch_size)
        out = loss_threshold_attack(m, o, fpr=mia.fpr, resamples=mia.resamples, seed=mia.seed)
        return {**out, "member_loss_mean": float(m.mean()), "nonmember_loss_mean": float(o.mean())}

    result = {"members": "training rows", "nonmembers": "test split", "original": attack(train.ids, test.ids)}
    if private is not None:
        result["privatized"] = attack(*private)
    return result


def _chance(task: str, test_rows: int) -> float:
    """Majority-class rate (%) of the scored test rows (a stratified draw keeps the class shares)."""
    if TASKS[task].protocol == "cv":
        return chance_accuracy(task, protocol="cv", max_rows=test_rows)
    return chance_accuracy(task, protocol=FULL_PROTOCOL, max_rows={"test": test_rows})


def run_full_finetune(
    raw: dict[str, Any],
    output_dir: str | os.PathLike[str],
    *,
    recipe_path: Path | None = None,
    progress: Callable[[str], None] | None = None,
    only: Callable[[Unit], bool] | None = None,
    device: str = "cpu",
    resume: bool = True,
) -> list[Path]:
    """Run a full fine-tuning recipe (module docstring). Returns the result files that exist.

    ``device``: where the model trains and is scored (``cpu``, ``cuda`` or ``cuda:N``). With ``resume`` the
    units whose files exist are skipped; without it every unit is recomputed.
    """
    from transformers import AutoTokenizer

    where = parse_device(device)  # the name, and CUDA's presence for a cuda device
    say = progress or (lambda msg: None)
    rec = parse_full(raw)
    out_dir = Path(output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model_dir = str(resolve_model(rec.model)[1])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    root = recipe_root(recipe_path)
    recipe_info, command = provenance(rec.name, recipe_path, raw, out_dir)
    splits: dict[str, dict[str, _Split]] = {}
    written: list[Path] = []
    todo = [u for u in rec.units if only is None or only(u)]
    for n, unit in enumerate(todo, 1):
        paths = [out_dir / f for f in unit.files()]
        if resume and all(p.exists() for p in paths):
            written += paths
            continue
        task = next(t for t in rec.tasks if t["name"] == unit.task)
        if unit.task not in splits:
            splits[unit.task] = _load_splits(rec, task, tokenizer, root)
        on = torch.cuda.device(where) if where.type == "cuda" else contextlib.nullcontext()
        with on:
            records = _run_unit(
                unit, splits[unit.task], rec, model_dir, tokenizer, TASKS[unit.task].num_labels, device
            )
        for setting, record in records.items():
            path = out_dir / unit.file(setting)
            save_result(path, {**record, "recipe": recipe_info, "versions": versions(), "command": command})
            written.append(path)
        accs = " / ".join(f"{r['accuracy']:.1f}" for r in records.values())
        rate = next(iter(records.values())).get("replacement_rate") or {}
        say(
            f"[{n}/{len(todo)}] {unit.task} {unit.label} eps={unit.epsilon} seed={unit.noise_seed} "
            f"path={unit.path} acc={accs} rate={rate.get('train', 0):.0f}% "
            f"({next(iter(records.values()))['wall_s']:.0f} s)"
        )
    finished = [json.loads(p.read_text(encoding="utf-8")) for p in written]
    if any("loss_curve" in r for r in finished):
        plot_loss_curves(finished, out_dir / "loss_curves.png")
    return written


def _mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{np.mean(values):.1f} ± {np.std(values, ddof=1):.1f}"


def full_table(results: list[dict[str, Any]], below: str = "†") -> list[str]:
    """Markdown table of full fine-tuning records: mean ± sample std over noise (or training) seeds.

    A cell whose mean is below the task's chance level carries ``below``. Records with a membership attack
    (converged recipes) get the wider table of finetune_report.py.
    """
    if any("membership" in r for r in results):
        from .finetune_report import converged_table

        return converged_table(results, below)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        groups[(r["task"], r["label"], r["epsilon"], r["path"], r["setting"])].append(r)
    rows = [
        "| task | mechanism | ε | path | n | train rate % | train_only | train_and_test |",
        "|---|---|---:|---|---:|---:|---|---|",
    ]
    keys = sorted(
        {k[:4] for k in groups},
        key=lambda k: (k[0], k[1] != "clean", k[1], -1.0 if k[2] is None else k[2], str(k[3])),
    )

    def cell(group: list[dict[str, Any]]) -> str:
        if not group:
            return "–"
        accs = [float(r["accuracy"]) for r in group]
        flag = below if np.mean(accs) < float(group[0]["chance"]) else ""
        return _mean_std(accs) + flag

    for task, label, eps, path in keys:
        if label == "clean":
            g = groups[(task, label, eps, path, "clean")]
            rows.append(f"| {task} | clean | – | – | {len(g)} | 0 | {cell(g)} | {cell(g)} |")
            continue
        a, b = groups[(task, label, eps, path, "train_only")], groups[(task, label, eps, path, "train_and_test")]
        rates = [float(r["replacement_rate"]["train"]) for r in a]
        rows.append(
            f"| {task} | {label} | {eps:g} | {path} | {len(a)} | {np.mean(rates):.0f} | {cell(a)} | {cell(b)} |"
        )
    chance = {r["task"]: r["chance"] for r in results}
    rows += [
        "",
        "Chance (majority class of the scored test rows): "
        + ", ".join(f"{t} {c:.1f} %" for t, c in sorted(chance.items()))
        + ".",
    ]
    return rows
