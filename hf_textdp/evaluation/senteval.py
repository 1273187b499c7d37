"""One SentEval recipe run (:func:`run_recipe`): for each task, the clean baseline and every (privatizer, ε),
each privatized with every noise seed, encoded, classified and recorded as one JSON per setting.

The jobs are apart: :meth:`_RecipeRun.plan` says which units a task still needs, :func:`_privatize_task`
privatizes a task's splits, :meth:`_RecipeRun.run_private` encodes and classifies them, and
:meth:`_RecipeRun.record_private` writes the results (:mod:`.recipe` spreads units over processes).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..accounting import Totals
from ..config import parse_device_name
from ..privatizer import Privatizer
from ..space import CANDIDATE
from ..tokens import make_tokens
from ..utils.logging import get_logger
from ..utils.progress import progress_bar
from .common import (
    SETTINGS,
    Metrics,
    PrivatizerSpec,
    Recipe,
    TaskEntry,
    provenance,
    result_name,
    save_result,
    versions,
)
from .diagnostics import rank_histogram, rank_of_outputs
from .encoders import make_encoder
from .plots import plot_recipe
from .protocol import ProtocolResult, run_protocol, summarize
from .tasks import TaskData, load_task


__all__ = ["run_recipe", "recipe_units", "plot_folder", "UnitKey"]

logger = get_logger("hf_textdp.evaluation.recipe")  # the name its log lines have always carried

UnitKey = tuple[str, int | None, float | None]
"""One unit of work: (task, privatizer index, ε); (task, None, None) is the clean baseline."""


@dataclass
class _Privatized:
    texts: dict[str, list[str]]
    report: dict[str, Any]
    diagnostics: dict[str, Any]
    seconds: float


def _privatize_task(
    data: TaskData,
    spec: PrivatizerSpec,
    epsilon: float,
    recipe: Recipe,
    metrics: Metrics,
    seed: int,
    device: str = "cpu",
) -> _Privatized:

    config = spec.config(epsilon, device)
    t0 = time.perf_counter()
    texts: dict[str, list[str]] = {}
    totals = Totals()
    orig_pos: list[npt.NDArray[np.int64]] = []
    new_pos: list[npt.NDArray[np.int64]] = []
    priv: Privatizer | None = None
    for split, split_texts in data.texts.items():
        # public benchmark data with the recipe's public seed (e.g. 1111): not a privacy key, so a small
        # seed is allowed here; never reuse it on private data
        priv = Privatizer(config, seed=seed, split=f"senteval/{data.spec.name}/{split}", allow_weak_seed=True)
        space = priv.engine.space
        tokens = make_tokens(space)
        out_texts: list[str] = []
        for start in range(0, len(split_texts), recipe.batch_rows):
            chunk = split_texts[start : start + recipe.batch_rows]
            rows = list(range(start, start + len(chunk)))
            out = priv({"text": chunk}, rows)
            out_texts.extend(out["text"])
            for enc, ids in zip(tokens.encode(chunk), out["input_ids"], strict=True):
                cls, pos = space.classify(enc.ids)
                _, pos_new = space.classify(np.asarray(ids, dtype=np.int64))
                mask = cls == CANDIDATE
                orig_pos.append(pos[mask])
                new_pos.append(pos_new[mask])
        texts[split] = out_texts
        totals.merge(priv.totals)
    assert priv is not None
    seconds = time.perf_counter() - t0
    report = priv.engine.build_report(totals)
    ref = np.concatenate(orig_pos) if orig_pos else np.zeros(0, dtype=np.int64)
    out_ids = np.concatenate(new_pos) if new_pos else np.zeros(0, dtype=np.int64)
    diag = metrics.diagnostics.compute(
        predictions=out_ids.tolist(),
        references=ref.tolist(),
        min_count=5,
        epsilon=epsilon,
        median_rho1=report["scale"]["median_rho1"],
    )
    rng = np.random.default_rng(recipe.seed)
    sample = rng.choice(ref.size, size=min(recipe.rank_sample, ref.size), replace=False) if ref.size else ref
    ranks = rank_of_outputs(priv.engine.space.E, ref[sample], out_ids[sample])
    diag["rank_histogram"] = rank_histogram(ranks)
    diag["tokens_per_second"] = float(ref.size / seconds) if seconds > 0 else None
    return _Privatized(texts=texts, report=report, diagnostics=diag, seconds=seconds)


def _encode_splits(encoder: Any, texts: dict[str, list[str]]) -> dict[str, npt.NDArray[np.float32]]:
    return {split: encoder.encode(t) for split, t in texts.items()}


def _privacy_summary(report: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "mechanism",
        "epsilon",
        "delta",
        "guarantee",
        "certified",
        "epsilon_token",
        "delta_token",
        "metric",
        "postprocess",
        "warnings",
    )
    out = {k: report.get(k) for k in keys}
    out["scale"] = report.get("scale")
    out["max_row_dp_epsilon"] = (report.get("totals") or {}).get("max_row_dp_epsilon")
    return out


@dataclass
class _SeedRun:
    """One noise seed of a private unit: the privatized task, its protocol result and its timings."""

    noise_seed: int
    priv: _Privatized
    res: ProtocolResult
    encode_s: float
    classify_s: float


def _score(values: list[float], n_test: int, per_fold: bool) -> dict[str, Any]:
    mean, std, kind = summarize(values, n_test, per_fold)
    return {"accuracy": mean, "accuracy_std": std, "accuracy_std_kind": kind, "values": [100.0 * v for v in values]}


def _seed_score(runs: list[_SeedRun], setting: str, per_fold: bool) -> dict[str, Any]:
    """One run's score, or the mean ± std over the noise seeds' mean accuracies."""
    if len(runs) == 1:
        return _score(runs[0].res.values[setting], runs[0].res.n_test, per_fold)
    means = [float(np.mean(r.res.values[setting])) for r in runs]
    return {
        "accuracy": 100.0 * float(np.mean(means)),
        "accuracy_std": 100.0 * float(np.std(means, ddof=1)),
        "accuracy_std_kind": "std_over_noise_seeds",
        "values": [100.0 * m for m in means],
    }


class _RecipeRun:
    """The state of one :func:`run_recipe` call: the encoder, the metrics, the clean features of the current task
    and the files written."""

    def __init__(
        self,
        recipe: Recipe,
        out_dir: Path,
        *,
        resume: bool,
        say: Callable[[str], None],
        device: str,
        only: Collection[UnitKey] | None,
    ) -> None:
        self.recipe, self.out_dir, self.resume, self.say, self.device, self.only = (
            recipe,
            out_dir,
            resume,
            say,
            device,
            only,
        )
        self.metrics = Metrics()
        enc_cfg = dict(recipe.encoder)
        self.encoder = make_encoder(enc_cfg.pop("name", "bag_of_vectors"), **enc_cfg)
        self.recipe_info, self.command = provenance(recipe.name, recipe.path, recipe.raw, out_dir)
        self.written: list[Path] = []
        self._clean: dict[str, dict[str, npt.NDArray[np.float32]]] = {}

    # ---------------------------------------------------------------- plan
    def plan(self, spec_name: str) -> list[tuple[int, float]]:
        """The (privatizer index, ε) units of task ``spec_name`` this call runs."""
        return [
            (i, eps)
            for i, pspec in enumerate(self.recipe.privatizers)
            if pspec.tasks is None or spec_name in pspec.tasks
            for eps in pspec.epsilons
            if self.only is None or (spec_name, i, eps) in self.only
        ]

    def load(self, entry: TaskEntry) -> TaskData:
        recipe = self.recipe
        data = load_task(
            entry.name, data_dir=recipe.data_dir, max_rows=entry.max_rows, seed=recipe.seed, root=recipe.root
        )
        if recipe.lowercase:
            data.texts = {split: [t.lower() for t in texts] for split, texts in data.texts.items()}
        return data

    # ---------------------------------------------------------------- run
    def clean_features(self, task: TaskData) -> dict[str, npt.NDArray[np.float32]]:
        if task.spec.name not in self._clean:
            t = time.perf_counter()
            self._clean.clear()  # one task's features at a time
            self._clean[task.spec.name] = _encode_splits(self.encoder, task.texts)
            self.say(f"{task.spec.name}: encoded clean text in {time.perf_counter() - t:.1f} s")
        return self._clean[task.spec.name]

    def clean_accuracy(self, data: TaskData, entry: TaskEntry) -> float:
        """The clean baseline's accuracy: read from its file, or computed (and saved) now."""
        spec, only = data.spec, self.only
        clean_path = self.out_dir / result_name(spec.name, None, None, "clean")
        per_fold = spec.protocol == "cv"
        if clean_path.exists() and (self.resume or only is not None and (spec.name, None, None) not in only):
            return float(json.loads(clean_path.read_text())["accuracy"])
        t = time.perf_counter()
        feats = self.clean_features(data)
        res = run_protocol(
            spec.protocol,
            feats["all" if per_fold else "train"],
            data.labels,
            {"clean": feats},
            self.recipe.classifier,
            dev=feats.get("dev"),
        )
        payload = {
            **self.base(data, entry),
            "setting": "clean",
            "mechanism": "none",
            "label": "clean",
            "epsilon": None,
            **_score(res.values["clean"], res.n_test, per_fold),
            "chosen_c": res.chosen_c,
            "privacy": None,
            "timing_s": {"total": time.perf_counter() - t},
        }
        save_result(clean_path, payload)
        self.say(f"{spec.name}: clean {payload['accuracy']:.2f}")
        return float(payload["accuracy"])

    def run_private(self, data: TaskData, pspec: PrivatizerSpec, epsilon: float) -> list[_SeedRun]:
        """Privatize, encode and classify the task once per noise seed."""
        spec, recipe = data.spec, self.recipe
        train_split = "all" if spec.protocol == "cv" else "train"
        runs = []
        for noise_seed in recipe.noise_seeds or (recipe.seed,):
            priv = _privatize_task(data, pspec, epsilon, recipe, self.metrics, noise_seed, self.device)
            t = time.perf_counter()
            feats_priv = _encode_splits(self.encoder, priv.texts)
            t_enc = time.perf_counter() - t
            feats = self.clean_features(data)
            t = time.perf_counter()
            tests = {"train_only": feats, "train_and_test": feats_priv}
            res = run_protocol(
                spec.protocol,
                feats_priv[train_split],
                data.labels,
                tests,
                recipe.classifier,
                dev=feats_priv.get("dev"),
            )
            runs.append(_SeedRun(noise_seed, priv, res, t_enc, time.perf_counter() - t))
            self.say(
                f"{spec.name}: {pspec.name} eps={epsilon:g} "
                f"rate={priv.diagnostics['replacement_rate']:.3f} "
                f"train_only={100 * np.mean(res.values['train_only']):.2f} "
                f"train_and_test={100 * np.mean(res.values['train_and_test']):.2f} "
                f"(privatize {priv.seconds:.0f} s, encode {t_enc:.0f} s, classify {runs[-1].classify_s:.0f} s)"
            )
        return runs

    # ---------------------------------------------------------------- record
    def base(self, task: TaskData, entry: TaskEntry) -> dict[str, Any]:
        """The fields every result of ``task`` records: the task, the encoder, the classifier, the recipe."""
        return {
            "task": task.spec.name,
            "task_title": task.spec.title,
            "hub_id": task.spec.hub_id,
            "protocol": task.spec.protocol,
            "max_rows": entry.max_rows,
            "n_rows": {s: len(t) for s, t in task.texts.items()},
            "lowercase": self.recipe.lowercase,
            "encoder": self.encoder.describe(),
            "classifier": self.recipe.classifier.to_dict(),
            "recipe": self.recipe_info,
            "versions": versions(),
            "command": self.command,
        }

    def record_private(
        self,
        data: TaskData,
        entry: TaskEntry,
        pspec: PrivatizerSpec,
        epsilon: float,
        runs: list[_SeedRun],
        clean_acc: float | None,
    ) -> None:
        """Write one result per setting (``train_only``, ``train_and_test``) of a private unit."""
        first = runs[0]
        diagnostics = dict(first.priv.diagnostics)
        if len(runs) > 1:
            rates = [r.priv.diagnostics["replacement_rate"] for r in runs]
            diagnostics["replacement_rate"] = float(np.mean(rates))
            diagnostics["replacement_rate_per_seed"] = rates
        per_fold = data.spec.protocol == "cv"
        for setting in ("train_only", "train_and_test"):
            path = self.out_dir / result_name(data.spec.name, pspec.name, epsilon, setting)
            payload = {
                **self.base(data, entry),
                "setting": setting,
                "mechanism": pspec.mechanism,
                "label": pspec.name,
                "postprocess": pspec.postprocess,
                "options": dict(pspec.options),
                "candidates": pspec.candidates,
                "epsilon": epsilon,
                "delta": first.priv.report.get("delta"),
                **_seed_score(runs, setting, per_fold),
                "per_seed": [
                    {
                        "noise_seed_index": i,
                        "accuracy": 100.0 * float(np.mean(r.res.values[setting])),
                        "values": [100.0 * v for v in r.res.values[setting]],
                        "replacement_rate": r.priv.diagnostics["replacement_rate"],
                    }
                    for i, r in enumerate(runs)
                ],
                "clean_accuracy": clean_acc if clean_acc is not None else self.clean_accuracy(data, entry),
                "chosen_c": first.res.chosen_c,
                "privacy": {**_privacy_summary(first.priv.report), "diagnostics": diagnostics},
                "privacy_report": first.priv.report,
                "device": self.device.split(":")[0],
                "timing_s": {
                    "privatize": sum(r.priv.seconds for r in runs),
                    "encode_private": sum(r.encode_s for r in runs),
                    "classify": sum(r.classify_s for r in runs),
                },
            }
            save_result(path, payload)
            self.written.append(path)

    # ---------------------------------------------------------------- one task
    def run_task(self, entry: TaskEntry, todo: set[UnitKey], bar: Any) -> None:
        data = self.load(entry)
        name, only = data.spec.name, self.only
        wanted = self.plan(name)
        if only is not None and not wanted and (name, None, None) not in only:
            return
        # a pooled private unit reads the baseline when it writes its files, by when the clean unit,
        # run in another worker, has usually saved it
        clean_acc = self.clean_accuracy(data, entry) if only is None or (name, None, None) in only else None
        self.written.append(self.out_dir / result_name(name, None, None, "clean"))
        if (name, None, None) in todo:
            bar.update(1)
        for index, epsilon in wanted:
            pspec = self.recipe.privatizers[index]
            paths = [
                self.out_dir / result_name(name, pspec.name, epsilon, s) for s in ("train_only", "train_and_test")
            ]
            if self.resume and all(p.exists() for p in paths):
                self.written.extend(paths)
                continue
            runs = self.run_private(data, pspec, epsilon)
            self.record_private(data, entry, pspec, epsilon, runs, clean_acc)
            bar.update(1)


def run_recipe(
    recipe: Recipe,
    output_dir: str | os.PathLike[str],
    *,
    resume: bool = True,
    progress: Callable[[str], None] | None = None,
    device: str = "cpu",
    only: Collection[UnitKey] | None = None,
    plots: bool = True,
) -> list[Path]:
    """Run a recipe; write result JSONs, plots and the summary into ``output_dir``.

    Args:
        device (`str`, defaults to `"cpu"`): where the privatizers run (``"cuda"`` for a GPU). Seeded
            outputs depend on the device type (tem.md §4), so each result records it.
        only (`Collection[UnitKey]`, *optional*): run just these units (see :func:`recipe_units`);
            :func:`~.recipe.run_recipes` uses it to spread a recipe over worker processes.
        plots (`bool`, defaults to `True`): draw the plots when done.

    Returns the paths of the result files (existing ones included when ``resume``).
    """
    parse_device_name(device)
    out_dir = Path(output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda msg: logger.info(msg))
    run = _RecipeRun(recipe, out_dir, resume=resume, say=say, device=device, only=only)
    todo = set(recipe_units(recipe, out_dir, resume=resume) if only is None else only)
    bar = progress_bar(total=len(todo), desc=recipe.name, unit="unit", enabled=progress is not None)
    for entry in recipe.tasks:
        run.run_task(entry, todo, bar)
    bar.close()
    if plots:
        plot_folder(out_dir)
    return run.written


def plot_folder(folder: Path) -> None:
    """The plots of a results folder; a warning instead when matplotlib is missing."""
    try:
        plot_recipe(folder)
    except ImportError:
        logger.warning("matplotlib is not installed: no plots (pip install 'hf-textdp[eval]')")


def recipe_units(recipe: Recipe, output_dir: str | os.PathLike[str], *, resume: bool = True) -> list[UnitKey]:
    """The units of a recipe still to run: clean baselines first, then (task, privatizer, ε).

    A private unit writes both settings' files; with ``resume`` the units whose files all exist
    are left out.
    """
    out_dir = Path(output_dir)
    units: list[UnitKey] = []
    for entry in recipe.tasks:
        if not (resume and (out_dir / result_name(entry.name, None, None, "clean")).exists()):
            units.append((entry.name, None, None))
    for entry in recipe.tasks:
        for i, pspec in enumerate(recipe.privatizers):
            if pspec.tasks is not None and entry.name not in pspec.tasks:
                continue
            for eps in pspec.epsilons:
                files = [out_dir / result_name(entry.name, pspec.name, eps, s) for s in SETTINGS[1:]]
                if not (resume and all(f.exists() for f in files)):
                    units.append((entry.name, i, eps))
    return units
