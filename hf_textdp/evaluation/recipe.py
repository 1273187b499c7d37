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

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import torch

from ..config import parse_device_name
from ..errors import InvalidParameterError
from ..io.paths import folder_inside
from ..utils.logging import get_logger
from ..utils.progress import progress_bar
from .common import SETTINGS, Recipe, load_recipe, load_recipe_yaml, result_name
from .finetune import run_finetune
from .finetune_full import run_full_finetune
from .senteval import UnitKey, plot_folder, recipe_units, run_recipe
from .summary import write_summary


__all__ = ["run_recipe", "run_recipe_file", "run_recipes", "recipe_units", "UnitKey"]

logger = get_logger(__name__)


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
    failures = _run_pool(_plan_jobs(recipes, resume), jobs, device, say, progress is not None)
    results: list[tuple[Path, list[Path]]] = []
    for recipe, folder in recipes:
        results.append((folder, _result_files(recipe, folder)))
        plot_folder(folder)
    for p in finetunes:
        results.append(run_recipe_file(p, output_root, resume=resume, progress=progress, device=device, summary=False))
    write_summary(Path(output_root))
    if failures:
        raise RuntimeError(f"{len(failures)} recipe unit(s) failed:\n" + "\n".join(failures))
    return results


_Job = tuple[float, str, str, UnitKey, str]  # (cost, recipe path, results folder, unit, label)


def _plan_jobs(recipes: list[tuple[Recipe, Path]], resume: bool) -> list[_Job]:
    """Every recipe's units still to run, one job per output file set (recipes sharing a results folder share
    their clean baselines): the clean baselines first, then the private units, longest first."""
    phases: list[list[_Job]] = [[], []]
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
            phases[0 if index is None else 1].append(
                (_unit_cost(recipe, unit), str(recipe.path), str(folder), unit, label)
            )
    for phase in phases:
        phase.sort(key=lambda job: -job[0])
    return phases[0] + phases[1]


def _run_pool(jobs_in_order: list[_Job], jobs: int, device: str, say: Callable[[str], None], bar: bool) -> list[str]:
    """Run the jobs on ``jobs`` spawned workers (the executor starts them in submission order: private units that
    finish before their baseline compute it themselves); returns the failures, one line each."""
    failures: list[str] = []
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {
            pool.submit(_run_unit, rp, where, unit, device): (where, unit, label)
            for _, rp, where, unit, label in jobs_in_order
        }
        progress = progress_bar(total=len(futures), desc="evaluate", unit="unit", enabled=bar)
        for n, fut in enumerate(as_completed(futures), 1):
            progress.update(1)
            where, unit, label = futures[fut]
            name = f"{Path(where).name}: {unit[0]} {label}"
            err = fut.exception()
            if err is not None:
                failures.append(f"{name}: {type(err).__name__}: {err}")
                say(f"[{n}/{len(futures)}] FAILED {name}: {err}")
            else:
                say(f"[{n}/{len(futures)}] done {name}")
        progress.close()
    return failures


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
    raw = load_recipe_yaml(p) if p.is_file() else None  # checked against the recipe schema
    return raw if raw is not None and "finetune" in raw else None


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
            plot_folder(folder)
    else:
        recipe = load_recipe(p)
        folder = folder_inside(output_root, recipe.folder, "results_folder" if recipe.results_folder else "name")
        written = run_recipe(recipe, folder, resume=resume, progress=progress, device=device)
    if summary:
        write_summary(Path(output_root))
    return folder, written
