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

This module parses the recipe into units, runs each unit (its training text, training, scoring) and records
it; the rows and their private ids are in finetune_data.py, training and scoring one model in
finetune_model.py, the tables in finetune_report.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import PrivatizerConfig
from ..io.models import resolve_model
from ..space import DEFAULT_MODEL, parse_device
from .common import provenance, recipe_from_dict, recipe_root, save_result, versions
from .finetune_data import CountingCollator, Split, changed_positions, privatize_split
from .finetune_model import Budget, Membership, accuracy, membership_attack, train_model
from .plots import plot_loss_curves
from .tasks import TASKS, _stratified_subsample, chance_accuracy, load_task


__all__ = ["FULL_PROTOCOL", "Budget", "Unit", "FullRecipe", "parse_full", "run_full_finetune"]

FULL_PROTOCOL = "finetune_full"
PATHS = ("once", "on_the_fly")
SETTINGS = ("train_only", "train_and_test")


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


def _load_splits(rec: FullRecipe, task: dict[str, Any], tokenizer: Any, root: Path | None) -> dict[str, Split]:
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
        out[split] = Split(texts, [int(x) for x in data.labels[source[split]][pool]], [list(i) for i in ids])
    return out


@dataclass
class _TrainingData:
    """What ``Trainer`` reads for one unit, and what the training text measures before and after training."""

    dataset: Any
    collator: Any
    callbacks: list[Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: the ``once`` path: the private training ids, their ``training_privacy`` and changed positions
    private_ids: list[list[int]] | None = None
    privacy: dict[str, Any] | None = None
    changed: int = 0
    total: int = 0
    #: the ``on_the_fly`` path: the collator that privatizes and counts each batch
    counting: CountingCollator | None = None

    def measured(self) -> tuple[dict[str, Any] | None, int, int]:
        """After training: the ``training_privacy`` record and the (changed, privatized) positions."""
        if self.counting is None:
            return self.privacy, self.changed, self.total
        training = self.counting.inner.privacy_report()["training"]
        privacy = {k: training[k] for k in ("epochs", "releases", "max_example_epsilon")}
        return privacy, self.counting.changed, self.counting.total


def _training_data(
    unit: Unit, train: Split, config: PrivatizerConfig | None, budget: Budget, tokenizer: Any
) -> _TrainingData:
    """The clean ids (clean units), the ids privatized once (``once``), or the texts with a collator that
    privatizes each batch afresh (``on_the_fly``)."""
    from datasets import Dataset
    from transformers import DataCollatorWithPadding

    from ..integrations.collators import DataCollatorWithPrivatization, PrivacyAccountingCallback

    if config is None:
        dataset = Dataset.from_dict({"input_ids": train.ids, "labels": train.labels})
        return _TrainingData(dataset, DataCollatorWithPadding(tokenizer))
    assert unit.noise_seed is not None
    if unit.path == "once":
        train_ids, max_eps = privatize_split(train, config, unit.noise_seed, "train", budget.max_length)
        changed, total = changed_positions(train.ids, train_ids)
        privacy = {"epochs": budget.epochs, "releases": 1, "max_example_epsilon": max_eps}
        dataset = Dataset.from_dict({"input_ids": train_ids, "labels": train.labels})
        collator = DataCollatorWithPadding(tokenizer)
        return _TrainingData(dataset, collator, private_ids=train_ids, privacy=privacy, changed=changed, total=total)
    inner = DataCollatorWithPrivatization(
        tokenizer,
        config,
        seed=unit.noise_seed,
        split="train",
        allow_weak_seed=True,
        max_length=budget.max_length,
    )
    counting = CountingCollator(inner, train.ids)
    dataset = Dataset.from_dict(
        {
            "text": train.texts,
            "label": train.labels,
            "idx": list(range(len(train.texts))),
            "length": [len(i) for i in train.ids],
        }
    )
    return _TrainingData(
        dataset,
        counting,
        callbacks=[PrivacyAccountingCallback(inner)],
        extra={"remove_unused_columns": False},
        counting=counting,
    )


def _score(
    model: Any,
    unit: Unit,
    splits: dict[str, Split],
    config: PrivatizerConfig | None,
    rec: FullRecipe,
    pad: int,
    private_train_ids: list[list[int]] | None,
) -> tuple[dict[str, float], float | None, dict[str, Any] | None]:
    """The trained model's test accuracies by setting (clean test text; for a private unit also the test split
    privatized with its own noise), that split's replacement rate, and the membership attack (when asked)."""
    b = rec.budget
    train, test = splits["train"], splits["test"]
    accs = {"train_only": accuracy(model, test.ids, test.labels, pad, b.eval_batch_size)}
    test_rate = None
    test_ids = None
    if config is not None and unit.noise_seed is not None:
        test_ids, _ = privatize_split(test, config, unit.noise_seed, "test", b.max_length)
        accs["train_and_test"] = accuracy(model, test_ids, test.labels, pad, b.eval_batch_size)
        c, t = changed_positions(test.ids, test_ids)
        test_rate = 100.0 * c / max(t, 1)
    if rec.membership is None:
        return accs, test_rate, None
    private = None if private_train_ids is None or test_ids is None else (private_train_ids, test_ids)
    return accs, test_rate, membership_attack(model, train, test, private, rec.membership, pad, b.eval_batch_size)


def _records(
    unit: Unit,
    rec: FullRecipe,
    n_rows: dict[str, int],
    device: str,
    measured: dict[str, Any],
    accs: dict[str, float],
    rates: dict[str, float | None],
) -> dict[str, dict[str, Any]]:
    """The unit's records by setting: what was trained (``measured``: loss, curve, times, privacy) and scored."""
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
        "n_rows": n_rows,
        "chance": _chance(unit.task, n_rows["test"]),
        "budget": asdict(rec.budget),
        "model": rec.model,
        "device": device if device == "cpu" else f"{device} ({torch.cuda.get_device_name(device)})",
        **measured,
    }
    if unit.epsilon is None:
        return {"clean": {**base, "setting": "clean", "accuracy": accs["train_only"]}}
    return {
        s: {
            **base,
            "setting": s,
            "accuracy": accs[s],
            "clean_test_accuracy": accs["train_only"],
            "replacement_rate": dict(rates),
        }
        for s in SETTINGS
    }


def _run_unit(
    unit: Unit,
    splits: dict[str, Split],
    rec: FullRecipe,
    model_dir: str,
    tokenizer: Any,
    num_labels: int,
    device: str = "cpu",
) -> dict[str, dict[str, Any]]:
    """Train one model and score it; the records by setting."""
    b = rec.budget
    t0 = time.perf_counter()
    config = None
    if unit.epsilon is not None:
        config = PrivatizerConfig(
            mechanism=unit.mechanism, epsilon=unit.epsilon, model=rec.model, options=dict(unit.options)
        )
    data = _training_data(unit, splits["train"], config, b, tokenizer)
    seconds_privatize = time.perf_counter() - t0
    model, loss, curve = train_model(
        model_dir,
        data.dataset,
        data.collator,
        b,
        unit.train_seed,
        num_labels,
        data.callbacks,
        device=device,
        **data.extra,
    )
    privacy, changed, total = data.measured()
    accs, test_rate, membership = _score(
        model, unit, splits, config, rec, int(tokenizer.pad_token_id), data.private_ids
    )
    wall = time.perf_counter() - t0
    measured: dict[str, Any] = {
        "training_loss": loss,
        **curve,
        "wall_s": round(wall, 1),
        "privatize_s": round(seconds_privatize, 1),
    }
    if privacy is not None:
        measured["training_privacy"] = privacy
    if membership is not None:
        measured["membership"] = membership
    n_rows = {"train": len(splits["train"].ids), "test": len(splits["test"].ids)}
    rates = {"train": 100.0 * changed / max(total, 1), "test": test_rate}
    return _records(unit, rec, n_rows, device, measured, accs, rates)


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
    splits: dict[str, dict[str, Split]] = {}
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
