"""Recipes: what to privatize, on which SentEval tasks, and how to evaluate (``hf-textdp evaluate``).

A recipe is a YAML file::

    name: quick
    seed: 1111                       # noise seed of the benchmark (public data only; see below)
    data: {dir: ../shared/data/senteval}
    tasks:
      - {name: mr, max_rows: 300}
      - {name: trec, max_rows: {train: 300, test: 200}}
    encoder: {name: bag_of_vectors}  # or mean_pooling; model: a GloVe/word2vec file for static vectors
    lowercase: false                 # true: lowercase the texts first (for a lowercase vector file)
    classifier: {kfold: 5, inner_kfold: 3, c_grid: [0.25, 1, 4]}
    privatizers:
      - {mechanism: madlib, epsilons: [40, 120]}
      - {mechanism: madlib, postprocess: rank, label: madlib+rank, epsilons: [80]}

The runner writes one JSON per (task, privatizer, ε, setting) into the output folder and skips
those already there (so a killed run resumes), then the plots and the summary table. The seed is a
secret key when the text is private (decision D3); the SentEval data are public, so a benchmark
recipe may fix it to make its numbers reproducible. Never reuse a benchmark seed on private data.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections.abc import Callable, Collection
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ..accounting import Totals
from ..config import parse_device_name
from ..errors import InvalidParameterError
from ..io.paths import folder_inside
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
    load_recipe,
    parse_recipe_yaml,
    provenance,
    result_name,
    save_result,
    versions,
)
from .diagnostics import rank_histogram, rank_of_outputs
from .encoders import make_encoder
from .finetune import run_finetune
from .finetune_full import run_full_finetune
from .plots import plot_recipe
from .protocol import run_protocol, summarize
from .summary import write_summary
from .tasks import TaskData, load_task


__all__ = ["run_recipe", "run_recipe_file", "run_recipes", "recipe_units", "UnitKey"]

logger = get_logger(__name__)

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
            :func:`run_recipes` uses it to spread a recipe over worker processes.
        plots (`bool`, defaults to `True`): draw the plots when done.

    Returns the paths of the result files (existing ones included when ``resume``).
    """
    parse_device_name(device)

    out_dir = Path(output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda msg: logger.info(msg))
    metrics = Metrics()
    enc_cfg = dict(recipe.encoder)
    encoder = make_encoder(enc_cfg.pop("name", "bag_of_vectors"), **enc_cfg)
    written: list[Path] = []
    recipe_info, command = provenance(recipe.name, recipe.path, recipe.raw, out_dir)
    todo = set(recipe_units(recipe, out_dir, resume=resume) if only is None else only)
    bar = progress_bar(total=len(todo), desc=recipe.name, unit="unit", enabled=progress is not None)

    def base(task: TaskData, entry: TaskEntry) -> dict[str, Any]:
        return {
            "task": task.spec.name,
            "task_title": task.spec.title,
            "hub_id": task.spec.hub_id,
            "protocol": task.spec.protocol,
            "max_rows": entry.max_rows,
            "n_rows": {s: len(t) for s, t in task.texts.items()},
            "lowercase": recipe.lowercase,
            "encoder": encoder.describe(),
            "classifier": recipe.classifier.to_dict(),
            "recipe": recipe_info,
            "versions": versions(),
            "command": command,
        }

    def score(view_values: list[float], n_test: int, per_fold: bool) -> dict[str, Any]:
        mean, std, kind = summarize(view_values, n_test, per_fold)
        return {
            "accuracy": mean,
            "accuracy_std": std,
            "accuracy_std_kind": kind,
            "values": [100.0 * v for v in view_values],
        }

    clean_cache: dict[str, dict[str, npt.NDArray[np.float32]]] = {}

    def clean(task: TaskData) -> dict[str, npt.NDArray[np.float32]]:
        if task.spec.name not in clean_cache:
            t = time.perf_counter()
            clean_cache.clear()  # one task's features at a time
            clean_cache[task.spec.name] = _encode_splits(encoder, task.texts)
            say(f"{task.spec.name}: encoded clean text in {time.perf_counter() - t:.1f} s")
        return clean_cache[task.spec.name]

    for entry in recipe.tasks:
        data = load_task(
            entry.name, data_dir=recipe.data_dir, max_rows=entry.max_rows, seed=recipe.seed, root=recipe.root
        )
        if recipe.lowercase:
            data.texts = {split: [t.lower() for t in texts] for split, texts in data.texts.items()}
        spec = data.spec
        per_fold = spec.protocol == "cv"
        train_split = "all" if per_fold else "train"

        clean_path = out_dir / result_name(spec.name, None, None, "clean")
        wanted = [
            (i, eps)
            for i, pspec in enumerate(recipe.privatizers)
            if pspec.tasks is None or spec.name in pspec.tasks
            for eps in pspec.epsilons
            if only is None or (spec.name, i, eps) in only
        ]
        if only is not None and not wanted and (spec.name, None, None) not in only:
            continue

        def clean_accuracy(data: TaskData = data, entry: TaskEntry = entry, clean_path: Path = clean_path) -> float:
            """The clean baseline's accuracy: read from its file, or computed (and saved) now."""
            spec = data.spec
            per_fold = spec.protocol == "cv"
            if clean_path.exists() and (resume or only is not None and (spec.name, None, None) not in only):
                return float(json.loads(clean_path.read_text())["accuracy"])
            t = time.perf_counter()
            feats = clean(data)
            res = run_protocol(
                spec.protocol,
                feats["all" if per_fold else "train"],
                data.labels,
                {"clean": feats},
                recipe.classifier,
                dev=feats.get("dev"),
            )
            payload = {
                **base(data, entry),
                "setting": "clean",
                "mechanism": "none",
                "label": "clean",
                "epsilon": None,
                **score(res.values["clean"], res.n_test, per_fold),
                "chosen_c": res.chosen_c,
                "privacy": None,
                "timing_s": {"total": time.perf_counter() - t},
            }
            save_result(clean_path, payload)
            say(f"{spec.name}: clean {payload['accuracy']:.2f}")
            return float(payload["accuracy"])

        # a pooled private unit reads the baseline when it writes its files, by when the clean unit,
        # run in another worker, has usually saved it
        clean_acc: float | None = None
        if only is None or (spec.name, None, None) in only:
            clean_acc = clean_accuracy()
        written.append(clean_path)
        if (spec.name, None, None) in todo:
            bar.update(1)

        for index, epsilon in wanted:
            pspec = recipe.privatizers[index]
            paths = {
                s: out_dir / result_name(spec.name, pspec.name, epsilon, s) for s in ("train_only", "train_and_test")
            }
            if resume and all(p.exists() for p in paths.values()):
                written.extend(paths.values())
                continue
            seeds = recipe.noise_seeds or (recipe.seed,)
            runs = []
            for noise_seed in seeds:
                priv = _privatize_task(data, pspec, epsilon, recipe, metrics, noise_seed, device)
                t = time.perf_counter()
                feats_priv = _encode_splits(encoder, priv.texts)
                t_enc = time.perf_counter() - t
                feats = clean(data)
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
                runs.append((noise_seed, priv, res, t_enc, time.perf_counter() - t))
                say(
                    f"{spec.name}: {pspec.name} eps={epsilon:g} "
                    f"rate={priv.diagnostics['replacement_rate']:.3f} "
                    f"train_only={100 * np.mean(res.values['train_only']):.2f} "
                    f"train_and_test={100 * np.mean(res.values['train_and_test']):.2f} "
                    f"(privatize {priv.seconds:.0f} s, encode {t_enc:.0f} s, classify {runs[-1][4]:.0f} s)"
                )
            _, priv, res, _, _ = runs[0]
            diagnostics = dict(priv.diagnostics)
            if len(runs) > 1:
                rates = [r[1].diagnostics["replacement_rate"] for r in runs]
                diagnostics["replacement_rate"] = float(np.mean(rates))
                diagnostics["replacement_rate_per_seed"] = rates
            for setting, path in paths.items():
                if len(runs) == 1:
                    scored = score(res.values[setting], res.n_test, per_fold)
                else:
                    means = [float(np.mean(r[2].values[setting])) for r in runs]
                    scored = {
                        "accuracy": 100.0 * float(np.mean(means)),
                        "accuracy_std": 100.0 * float(np.std(means, ddof=1)),
                        "accuracy_std_kind": "std_over_noise_seeds",
                        "values": [100.0 * m for m in means],
                    }
                payload = {
                    **base(data, entry),
                    "setting": setting,
                    "mechanism": pspec.mechanism,
                    "label": pspec.name,
                    "postprocess": pspec.postprocess,
                    "options": dict(pspec.options),
                    "candidates": pspec.candidates,
                    "epsilon": epsilon,
                    "delta": priv.report.get("delta"),
                    **scored,
                    "per_seed": [
                        {
                            "noise_seed_index": i,
                            "accuracy": 100.0 * float(np.mean(r[2].values[setting])),
                            "values": [100.0 * v for v in r[2].values[setting]],
                            "replacement_rate": r[1].diagnostics["replacement_rate"],
                        }
                        for i, r in enumerate(runs)
                    ],
                    "clean_accuracy": clean_acc if clean_acc is not None else clean_accuracy(),
                    "chosen_c": res.chosen_c,
                    "privacy": {**_privacy_summary(priv.report), "diagnostics": diagnostics},
                    "privacy_report": priv.report,
                    "device": device.split(":")[0],
                    "timing_s": {
                        "privatize": sum(r[1].seconds for r in runs),
                        "encode_private": sum(r[3] for r in runs),
                        "classify": sum(r[4] for r in runs),
                    },
                }
                save_result(path, payload)
                written.append(path)
            bar.update(1)
    bar.close()
    if plots:
        _plot(out_dir)
    return written


def _plot(folder: Path) -> None:
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


# Rough relative cost of a unit (classifier fits dominate): bigger CV tasks and the samplers first,
# so that a pool of workers is not left waiting on one long unit at the end.
_TASK_COST = {"mpqa": 6.0, "mr": 5.0, "cr": 2.5, "trec": 2.5, "sst5": 1.0}
_SLOW_MECHANISMS = {"tem": 2.0, "santext": 2.0, "santext_plus": 2.0}


def _unit_cost(recipe: Recipe, unit: UnitKey) -> float:
    task, index, _ = unit
    cost = _TASK_COST.get(task, 1.0)
    if index is not None:
        cost *= _SLOW_MECHANISMS.get(recipe.privatizers[index].mechanism, 1.0)
    return cost


def _run_unit(recipe_path: str, output_dir: str, unit: UnitKey, device: str) -> list[str]:
    """Worker body of :func:`run_recipes`: a spawned process with one intra-op thread (the pool is the parallelism)."""
    torch.set_num_threads(1)
    recipe = load_recipe(recipe_path)
    written = run_recipe(recipe, output_dir, resume=True, device=device, only={unit}, plots=False)
    return [str(p) for p in written]


def run_recipes(
    paths: list[str | os.PathLike[str]],
    output_root: str | os.PathLike[str] = "results",
    *,
    jobs: int = 1,
    device: str = "cpu",
    resume: bool = True,
    progress: Callable[[str], None] | None = None,
) -> list[tuple[Path, list[Path]]]:
    """``hf-textdp evaluate R1 R2 ... --jobs N``: run recipes, spreading their units over N processes.

    The units of all SentEval recipes (:func:`recipe_units`) share one pool of ``jobs`` spawned
    worker processes: the clean baselines first, then the private units, longest first. Each unit
    writes its own files atomically, so an interrupted run resumes where it stopped. Fine-tuning
    recipes run one after the other in this process. A unit that fails does not stop the others;
    the failures are raised together at the end.

    Returns one (results folder, result files) pair per recipe. The summary table
    ``output_root/README.md`` is rewritten afterwards.
    """
    parse_device_name(device)
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise InvalidParameterError(f"jobs must be an integer >= 1, got {jobs!r}.")
    if jobs == 1:
        done = [
            run_recipe_file(p, output_root, resume=resume, progress=progress, device=device, summary=False)
            for p in paths
        ]
        write_summary(Path(output_root))
        return done
    say = progress or (lambda msg: logger.info(msg))
    recipes: list[tuple[Recipe, Path]] = []
    finetunes: list[str | os.PathLike[str]] = []
    for p in paths:
        if _finetune_raw(p) is not None:
            finetunes.append(p)
            continue
        recipe = load_recipe(p)
        param = "results_folder" if recipe.results_folder else "name"
        recipes.append((recipe, folder_inside(output_root, recipe.folder, param)))
    # one job per output file set: recipes sharing a results folder share their clean baselines
    phases: list[list[tuple[float, str, str, UnitKey, str]]] = [[], []]
    seen: set[tuple[str, str]] = set()
    for recipe, folder in recipes:
        folder.mkdir(parents=True, exist_ok=True)
        for unit in recipe_units(recipe, folder, resume=resume):
            index = unit[1]
            label = "clean" if index is None else f"{recipe.privatizers[index].name}@{unit[2]:g}"
            key = (str(folder), f"{unit[0]}/{label}")
            if key in seen:
                continue
            seen.add(key)
            job = (_unit_cost(recipe, unit), str(recipe.path), str(folder), unit, label)
            phases[0 if index is None else 1].append(job)
    failures: list[str] = []
    for phase in phases:
        phase.sort(key=lambda job: -job[0])
    # clean baselines first (the executor starts jobs in submission order); private units that finish
    # before their baseline compute it themselves
    jobs_in_order = phases[0] + phases[1]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {
            pool.submit(_run_unit, rp, where, unit, device): (where, unit, label)
            for _, rp, where, unit, label in jobs_in_order
        }
        bar = progress_bar(total=len(futures), desc="evaluate", unit="unit", enabled=progress is not None)
        for n, fut in enumerate(as_completed(futures), 1):
            bar.update(1)
            where, unit, label = futures[fut]
            name = f"{Path(where).name}: {unit[0]} {label}"
            err = fut.exception()
            if err is not None:
                failures.append(f"{name}: {type(err).__name__}: {err}")
                say(f"[{n}/{len(futures)}] FAILED {name}: {err}")
            else:
                say(f"[{n}/{len(futures)}] done {name}")
        bar.close()
    results: list[tuple[Path, list[Path]]] = []
    for recipe, folder in recipes:
        results.append((folder, _result_files(recipe, folder)))
        _plot(folder)
    for p in finetunes:
        results.append(run_recipe_file(p, output_root, resume=resume, progress=progress, device=device, summary=False))
    write_summary(Path(output_root))
    if failures:
        raise RuntimeError(f"{len(failures)} recipe unit(s) failed:\n" + "\n".join(failures))
    return results


def _result_files(recipe: Recipe, folder: Path) -> list[Path]:
    """The result files of a recipe that exist in ``folder``."""
    files = []
    for entry in recipe.tasks:
        files.append(folder / result_name(entry.name, None, None, "clean"))
        for pspec in recipe.privatizers:
            if pspec.tasks is None or entry.name in pspec.tasks:
                files += [
                    folder / result_name(entry.name, pspec.name, e, s) for e in pspec.epsilons for s in SETTINGS[1:]
                ]
    return [f for f in files if f.exists()]


def _finetune_raw(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The parsed YAML of a fine-tuning recipe (one with a ``finetune`` key); ``None`` for anything else."""
    p = Path(path)
    raw = parse_recipe_yaml(p) if p.is_file() else None
    return raw if isinstance(raw, dict) and "finetune" in raw else None


def run_recipe_file(
    path: str | os.PathLike[str],
    output_root: str | os.PathLike[str] = "results",
    *,
    resume: bool = True,
    progress: Callable[[str], None] | None = None,
    device: str = "cpu",
    summary: bool = True,
) -> tuple[Path, list[Path]]:
    """``hf-textdp evaluate``: run a SentEval or fine-tuning recipe into ``output_root/<folder>``.

    Returns the recipe's results folder and the result files. The summary table
    ``output_root/README.md`` is rewritten afterwards (unless ``summary=False``).
    """
    p = Path(path)
    raw = _finetune_raw(p)
    if raw is not None:
        key = "results_folder" if raw.get("results_folder") else "name"
        folder = folder_inside(output_root, str(raw.get(key) or p.stem), key)
        if (raw["finetune"] or {}).get("mode") == "full":  # the whole model, Trainer (finetune_full.py)
            written = run_full_finetune(raw, folder, recipe_path=p, progress=progress, device=device, resume=resume)
        else:
            if device != "cpu":
                raise InvalidParameterError(
                    f"device={device!r}: a frozen-encoder finetune recipe ({p}) runs on the CPU only; "
                    "use device='cpu' (whole-model recipes, finetune: {mode: full}, take a CUDA device)."
                )
            written = run_finetune(raw, folder, recipe_path=p, progress=progress, resume=resume)
            _plot(folder)
    else:
        recipe = load_recipe(p)
        folder = folder_inside(output_root, recipe.folder, "results_folder" if recipe.results_folder else "name")
        written = run_recipe(recipe, folder, resume=resume, progress=progress, device=device)
    if summary:
        write_summary(Path(output_root))
    return folder, written
