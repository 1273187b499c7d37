"""The tables of full fine-tunes (finetune_full.py records): :func:`full_table` for every recipe; for converged
fine-tunes (records with ``epoch_losses`` and ``membership``) accuracy, final training loss beside ln(classes),
epochs run and the loss-threshold membership attack, as mean ± sample std over the models (noise × training
seeds) of each cell (:func:`converged_table`) and one row per model (:func:`per_model_table`);
:func:`folder_tables` renders both for a results folder."""

from __future__ import annotations

import math
import os
from collections import defaultdict
from typing import Any

import numpy as np

from ..io.results import load_results
from .tasks import TASKS


__all__ = ["converged_table", "folder_tables", "full_table", "per_model_table"]


def _ms(values: list[float], digits: int = 1) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{np.mean(values):.{digits}f} ± {np.std(values, ddof=1):.{digits}f}"


def _attack(models: list[dict[str, Any]], which: str, key: str, ci: str, scale: float) -> str:
    """Mean ± std of one attack figure over the models, and the mean of their 95 % bootstrap bounds."""
    runs = [m["membership"][which] for m in models if which in (m.get("membership") or {})]
    if not runs:
        return "–"
    lo = np.mean([r[ci][0] for r in runs]) * scale
    hi = np.mean([r[ci][1] for r in runs]) * scale
    digits = 2 if scale == 1 else 1
    return f"{_ms([r[key] * scale for r in runs], digits)} [{lo:.{digits}f}, {hi:.{digits}f}]"


def converged_table(results: list[dict[str, Any]], below: str = "†") -> list[str]:
    """Markdown rows: one per (task, cell, path); a model's two records (train_only, train_and_test) are one
    model, so the training and attack columns come from its ``train_only`` (or ``clean``) record."""
    groups: dict[tuple[Any, ...], dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        groups[(r["task"], r["label"], r["epsilon"], r["path"])][r["setting"]].append(r)
    keys = sorted(groups, key=lambda k: (k[0], k[1] != "clean", k[1], -1.0 if k[2] is None else -k[2], str(k[3])))
    rows = [
        "| task | mechanism | ε | path | models | train rate % | train_only | train_and_test | final loss (ln K) "
        "| epochs (plateau) | MIA AUC original | TPR@1%FPR % original | MIA AUC privatized | TPR@1%FPR % privatized "
        "| unit s |",
        "|---|---|---:|---|---:|---:|---|---|---|---|---|---|---|---|---:|",
    ]
    total = 0.0

    def acc(group: list[dict[str, Any]]) -> str:
        if not group:
            return "–"
        values = [float(r["accuracy"]) for r in group]
        return _ms(values) + (below if np.mean(values) < float(group[0]["chance"]) else "")

    for task, label, eps, path in keys:
        g = groups[(task, label, eps, path)]
        models = g.get("clean") or g.get("train_only") or []
        total += sum(float(m["wall_s"]) for m in models)
        losses = [float(m["final_training_loss"]) for m in models if "final_training_loss" in m]
        epochs = [int(m["epochs_run"]) for m in models if "epochs_run" in m]
        stops = sum(bool(m.get("stopped_on_plateau")) for m in models)
        rate = "0" if label == "clean" else f"{np.mean([float(m['replacement_rate']['train']) for m in models]):.0f}"
        a, b = (g["clean"], g["clean"]) if label == "clean" else (g["train_only"], g["train_and_test"])
        ln_k = math.log(TASKS[task].num_labels)
        rows.append(
            f"| {task} | {label} | {'–' if eps is None else f'{eps:g}'} | {path or '–'} | {len(models)} | {rate} "
            f"| {acc(a)} | {acc(b)} | {_ms(losses, 3)} ({ln_k:.2f}) "
            f"| {_ms([float(e) for e in epochs])} ({stops}/{len(models)}) "
            f"| {_attack(models, 'original', 'auc', 'auc_ci', 1)} "
            f"| {_attack(models, 'original', 'tpr_at_fpr', 'tpr_ci', 100)} "
            f"| {_attack(models, 'privatized', 'auc', 'auc_ci', 1)} "
            f"| {_attack(models, 'privatized', 'tpr_at_fpr', 'tpr_ci', 100)} "
            f"| {sum(float(m['wall_s']) for m in models):.0f} |"
        )
    chance = {r["task"]: r["chance"] for r in results}
    classes = {t: TASKS[t].num_labels for t in chance}
    uniform = ", ".join(f"ln {k} = {math.log(k):.2f} for {t}" for t, k in sorted(classes.items()))
    rows += [
        "",
        "Mean ± sample std over the models of a cell (noise × training seeds; clean: training seeds). "
        f"final loss: the mean training loss of the last epoch, ln K in brackets ({uniform}, a uniform guess). "
        "epochs (plateau): epochs run (models that stopped on the plateau rule / models). MIA: loss-threshold "
        "attack, members = a fixed draw of training rows, non-members = as many test rows; original = both scored on "
        "their clean text, privatized = members on the private text the model was trained on, non-members on the "
        "privatized test text; brackets = the mean over models of the 95 % bootstrap bounds. unit s: wall time of "
        f"the cell's models (privatizing, training, scoring, attack); {total:.0f} s in all. Chance (majority class "
        "of the scored test rows): " + ", ".join(f"{t} {c:.1f} %" for t, c in sorted(chance.items())) + ".",
    ]
    return rows


def _one(run: dict[str, Any] | None, key: str, ci: str, scale: float) -> str:
    """One model's attack figure with its 95 % bootstrap interval."""
    if not run:
        return "–"
    digits = 3 if scale == 1 else 1
    lo, hi = (float(v) * scale for v in run[ci])
    return f"{float(run[key]) * scale:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def per_model_table(results: list[dict[str, Any]]) -> list[str]:
    """Markdown rows, one per trained model: its two accuracies, epoch losses, the attack with its own
    bootstrap intervals and its wall time. A model is keyed by (task, cell, ε, path, noise seed, training
    seed); its ``train_only`` (or ``clean``) record carries the training and attack figures. A task column
    is added when the records span more than one task."""
    models: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in results:
        key = (r["task"], r["label"], r["epsilon"], r["path"], r.get("noise_seed"), r.get("train_seed"))
        models[key][r["setting"]] = r
    keys = sorted(
        models,
        key=lambda k: (k[0], k[1] != "clean", k[1], -1.0 if k[2] is None else k[2], str(k[3]), k[4] or 0, k[5] or 0),
    )
    tasks = len({k[0] for k in keys}) > 1
    head = (
        "| mechanism | ε | noise seed | training seed | train_only | train_and_test | epoch losses "
        "| AUC original [95 %] | TPR@1%FPR % original [95 %] | AUC privatized [95 %] "
        "| TPR@1%FPR % privatized [95 %] | wall s |"
    )
    rule = "|---|---:|---:|---:|---:|---:|---|---|---|---|---|---:|"
    rows = ["| task " + head, "|---" + rule] if tasks else [head, rule]
    for key in keys:
        task, label, eps, _, noise, train = key
        m = models[key]
        main = m.get("clean") or m.get("train_only") or next(iter(m.values()))
        other = m.get("train_and_test")
        mia = main.get("membership") or {}
        losses = " → ".join(f"{float(v):.3f}" for v in main.get("epoch_losses", [])) or "–"
        second = "–" if other is None else f"{float(other['accuracy']):.1f}"
        rows.append(
            ("| " + task + " " if tasks else "")
            + f"| {label} | {'–' if eps is None else f'{eps:g}'} | {'–' if noise is None else noise} "
            f"| {'–' if train is None else train} | {float(main['accuracy']):.1f} "
            f"| {second} | {losses} "
            f"| {_one(mia.get('original'), 'auc', 'auc_ci', 1)} "
            f"| {_one(mia.get('original'), 'tpr_at_fpr', 'tpr_ci', 100)} "
            f"| {_one(mia.get('privatized'), 'auc', 'auc_ci', 1)} "
            f"| {_one(mia.get('privatized'), 'tpr_at_fpr', 'tpr_ci', 100)} "
            f"| {float(main['wall_s']):.0f} |"
        )
    return rows


def folder_tables(folder: str | os.PathLike[str], below: str = "†") -> str:
    """The cell table and the per-model table of the converged fine-tune records (``*.json``) in ``folder``,
    as the Markdown its README carries."""
    results = [r for r in load_results(os.fspath(folder)) if "membership" in r]
    if not results:
        raise FileNotFoundError(f"no converged fine-tune records (*.json with 'membership') in {str(folder)!r}")
    return "\n".join([*converged_table(results, below), "", "### Per model", "", *per_model_table(results)]) + "\n"


def full_table(results: list[dict[str, Any]], below: str = "†") -> list[str]:
    """Markdown table of full fine-tuning records: mean ± sample std over noise (or training) seeds.

    A cell whose mean is below the task's chance level carries ``below``. Records with a membership attack
    (converged recipes) get the wider table of finetune_report.py.
    """
    if any("membership" in r for r in results):
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
        return _ms(accs) + flag

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
