"""What the SentEval runner (:mod:`.recipe`) and the fine-tuning runner (:mod:`.finetune`) share: recipe
parsing and validation, the result file names, and writing one result."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import evaluate

from ..candidates import DEFAULT_CANDIDATES, parse_candidates
from ..config import PrivatizerConfig
from ..errors import HfTextDPError, InputFileError, InvalidParameterError
from ..io.files import _finite
from ..space import DEFAULT_MODEL
from ..version import __version__
from .protocol import ClassifierConfig
from .tasks import TASKS


__all__ = [
    "PrivatizerSpec",
    "TaskEntry",
    "Recipe",
    "recipe_from_dict",
    "load_recipe",
    "result_name",
    "versions",
    "Metrics",
    "save_result",
    "SETTINGS",
    "METRICS_DIR",
]

SETTINGS: tuple[str, ...] = ("clean", "train_only", "train_and_test")
METRICS_DIR = Path(__file__).resolve().parent / "metrics"


@dataclass(frozen=True, kw_only=True)
class PrivatizerSpec:
    """One line in the plots: a mechanism with fixed options, over a grid of ε."""

    mechanism: str
    epsilons: tuple[float, ...]
    postprocess: str = "nearest"
    options: dict[str, Any] = field(default_factory=dict)
    delta: float | None = None
    model: str = DEFAULT_MODEL
    label: str = ""
    tasks: tuple[str, ...] | None = None  # restrict this line to some of the recipe's tasks
    candidates: str | dict[str, Any] = DEFAULT_CANDIDATES  # the candidate setting (space.md §6, §7)

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        return self.mechanism if self.postprocess == "nearest" else f"{self.mechanism}+{self.postprocess}"

    def config(self, epsilon: float, device: str = "cpu") -> PrivatizerConfig:
        """The privatizer config of this line at ``epsilon``."""
        return PrivatizerConfig(
            mechanism=self.mechanism,
            epsilon=epsilon,
            delta=self.delta,
            model=self.model,
            postprocess=self.postprocess,
            options=dict(self.options),
            device=device,
            candidates=self.candidates,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "epsilons": list(self.epsilons),
            "postprocess": self.postprocess,
            "options": dict(self.options),
            "delta": self.delta,
            "model": self.model,
            "label": self.name,
            "tasks": list(self.tasks) if self.tasks is not None else None,
            "candidates": self.candidates,
        }


@dataclass(frozen=True, kw_only=True)
class TaskEntry:
    name: str
    max_rows: int | dict[str, int] | None = None


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """A parsed recipe (the YAML layout: :mod:`hf_textdp.evaluation.recipe`)."""

    name: str
    description: str = ""
    path: Path | None = None
    seed: int = 1111
    data_dir: str | None = None
    tasks: tuple[TaskEntry, ...] = ()
    encoder: dict[str, Any] = field(default_factory=lambda: {"name": "bag_of_vectors"})
    classifier: ClassifierConfig = field(default_factory=ClassifierConfig)
    privatizers: tuple[PrivatizerSpec, ...] = ()
    batch_rows: int = 512
    rank_sample: int = 2000
    results_folder: str = ""  # folder name under --output; recipes on the same subsets may share one
    noise_seeds: tuple[int, ...] = ()  # repeat each privatization with these seeds (default: (seed,))
    lowercase: bool = False  # lowercase every text before privatizing and encoding (lowercase vector files)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def folder(self) -> str:
        return self.results_folder or self.name

    @property
    def sha256(self) -> str:
        return _raw_sha256(self.raw)

    @property
    def root(self) -> Path:
        """The repository root the recipe lives in (the folder above ``recipes/``)."""
        return recipe_root(self.path) or Path.cwd()


def _as_tuple_floats(value: Any, what: str) -> tuple[float, ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise InvalidParameterError(f"{what} must be a non-empty list of numbers, got {value!r}.")
    try:
        return tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"{what} must be a list of numbers, got {value!r}.") from None


def recipe_root(path: Path | None) -> Path | None:
    """The repository root a recipe file lives in (the folder above ``recipes/``); ``None`` without a file."""
    return None if path is None else path.resolve().parent.parent


def _model_path(model: str, path: Path | None) -> str:
    """A model named by a path relative to the repository root (e.g. a fetched vector file) made absolute.

    A recipe at ``<root>/recipes/x.yaml`` may name ``data/vectors/glove.txt``; it is used as
    ``<root>/data/vectors/glove.txt`` when that file exists, so the recipe runs from any folder. Anything
    else (a hub id, an absolute path, a file that is not there) is returned unchanged.
    """
    root = recipe_root(path)
    if root is None or Path(model).is_absolute():
        return model
    candidate = root / model
    return str(candidate) if candidate.is_file() else model


def _encoder_config(value: Any, path: Path | None) -> dict[str, Any]:
    cfg = dict(value or {"name": "bag_of_vectors"})
    if "model" in cfg:
        cfg["model"] = _model_path(str(cfg["model"]), path)
    return cfg


def _as_bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidParameterError(f"recipe: {what} must be true or false, got {value!r}.")
    return value


def _raw_sha256(raw: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()


def provenance(name: str, path: Path | None, raw: dict[str, Any], out_dir: Path) -> tuple[dict[str, Any], str]:
    """What every result records of the recipe that made it, and the command that reruns it.

    The CLI writes into ``<--output>/<recipe folder>``, so ``--output`` is the parent of ``out_dir``.
    """
    info = {"name": name, "path": str(path) if path else None, "sha256": _raw_sha256(raw), "content": raw}
    return info, f"hf-textdp evaluate {path or name + '.yaml'} --output {out_dir.parent}/"


def recipe_from_dict(raw: dict[str, Any], *, path: Path | None = None) -> Recipe:
    """Validate a recipe dict (as read from YAML)."""
    if not isinstance(raw, dict):
        raise InvalidParameterError(f"a recipe must be a mapping, got {type(raw).__name__}.")
    known = {
        "name",
        "description",
        "seed",
        "data",
        "tasks",
        "encoder",
        "classifier",
        "privatizers",
        "batch_rows",
        "rank_sample",
        "hub",
        "notes",
        "finetune",
        "results_folder",
        "noise_seeds",
        "lowercase",
    }
    unknown = sorted(set(raw) - known)
    if unknown:
        raise InvalidParameterError(f"recipe: unknown key(s) {unknown}. Allowed keys: {sorted(known)}.")
    name = str(raw.get("name") or (path.stem if path else "recipe"))
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise InvalidParameterError(f"recipe name must match [A-Za-z0-9_.-]+, got {name!r}.")
    tasks = []
    for item in raw.get("tasks") or []:
        entry: dict[str, Any] = {"name": item} if isinstance(item, str) else dict(item)
        if entry.get("name") not in TASKS:
            raise InvalidParameterError(f"recipe task {entry.get('name')!r} is unknown. Known tasks: {sorted(TASKS)}.")
        tasks.append(TaskEntry(name=str(entry["name"]), max_rows=entry.get("max_rows")))
    if not tasks:
        raise InvalidParameterError("recipe: tasks must list at least one of " + str(sorted(TASKS)) + ".")
    privs: list[PrivatizerSpec] = []
    for item in raw.get("privatizers") or []:
        item = dict(item)
        privs.append(
            PrivatizerSpec(
                mechanism=str(item["mechanism"]),
                epsilons=_as_tuple_floats(item.get("epsilons"), f"privatizers[{len(privs)}].epsilons"),
                postprocess=str(item.get("postprocess", "nearest")),
                options=dict(item.get("options") or {}),
                delta=item.get("delta"),
                model=_model_path(str(item.get("model", DEFAULT_MODEL)), path),
                label=str(item.get("label", "")),
                tasks=tuple(item["tasks"]) if item.get("tasks") else None,
                candidates=parse_candidates(item.get("candidates", DEFAULT_CANDIDATES)).to_value(),
            )
        )
        for eps in privs[-1].epsilons:  # a bad mechanism, ε or option fails now, before any task runs
            try:
                privs[-1].config(eps)
            except HfTextDPError as err:
                raise type(err)(f"recipe privatizers[{len(privs) - 1}]: {err}") from None
    clf = dict(raw.get("classifier") or {})
    if "c_grid" in clf:
        clf["c_grid"] = _as_tuple_floats(clf["c_grid"], "classifier.c_grid")
    data = raw.get("data") or {}
    return Recipe(
        name=name,
        description=str(raw.get("description", "")),
        path=path,
        seed=int(raw.get("seed", 1111)),
        data_dir=data.get("dir"),
        tasks=tuple(tasks),
        encoder=_encoder_config(raw.get("encoder"), path),
        classifier=ClassifierConfig(**clf),
        privatizers=tuple(privs),
        batch_rows=int(raw.get("batch_rows", 512)),
        rank_sample=int(raw.get("rank_sample", 2000)),
        results_folder=str(raw.get("results_folder") or ""),
        noise_seeds=tuple(int(x) for x in raw.get("noise_seeds") or ()),
        lowercase=_as_bool(raw.get("lowercase", False), "lowercase"),
        raw=raw,
    )


def parse_recipe_yaml(path: Path) -> Any:
    """The YAML document in the recipe file ``path``; a syntax error names the file, the line and the column."""
    try:
        import yaml
    except ImportError as err:
        raise InvalidParameterError("recipes need PyYAML: pip install 'hf-textdp[eval]'") from err
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise InputFileError(f"recipe {str(path)!r} is not valid YAML{where}: {problem}.") from None


def load_recipe_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a recipe YAML file as a mapping (not validated)."""
    p = Path(path)
    if not p.is_file():
        raise InvalidParameterError(f"recipe {str(p)!r} does not exist.")
    raw = parse_recipe_yaml(p)
    if not isinstance(raw, dict):
        raise InvalidParameterError(f"a recipe must be a mapping, got {type(raw).__name__}.")
    return raw


def load_recipe(path: str | os.PathLike[str]) -> Recipe:
    """Read and validate a recipe YAML file."""
    return recipe_from_dict(load_recipe_yaml(path), path=Path(path))


def _eps_tag(epsilon: float) -> str:
    return f"{epsilon:g}".replace("+", "")


def result_name(task: str, label: str | None, epsilon: float | None, setting: str) -> str:
    """File name of one result: ``{task}__{label}__eps{ε}__{setting}.json`` (``{task}__clean.json``)."""
    if setting == "clean":
        return f"{task}__clean.json"
    assert label is not None and epsilon is not None
    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", label)
    return f"{task}__{safe}__eps{_eps_tag(epsilon)}__{setting}.json"


def versions() -> dict[str, str]:
    out = {"hf_textdp": __version__}
    for mod in ("torch", "transformers", "tokenizers", "datasets", "evaluate", "sklearn", "numpy", "scipy"):
        try:
            out[mod] = str(__import__(mod).__version__)
        except ImportError:
            out[mod] = "not installed"
    return out


class Metrics:
    """The two local evaluate modules, loaded once by path (works offline)."""

    def __init__(self) -> None:
        self.accuracy = evaluate.load(str(METRICS_DIR / "accuracy"))
        self.diagnostics = evaluate.load(str(METRICS_DIR / "privacy_diagnostics"))


def _git_commit_hash() -> str | None:
    """HEAD of the git checkout around the working directory (``None`` outside one), as ``evaluate.save`` asks
    git for it, but with git's stderr ('fatal: not a git repository') sent to /dev/null."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False)
        return done.stdout.decode().strip()

    try:
        return git("rev-parse", "HEAD") if git("rev-parse", "--is-inside-work-tree") == "true" else None
    except OSError:  # git is not installed
        return None


def save_result(path: Path, result: dict[str, Any]) -> None:
    """Write ``result`` with the fields ``evaluate.save`` adds (``_timestamp``, ``_git_commit_hash``, versions),
    atomically. Not by ``evaluate.save`` itself: its git lookup prints git's complaint outside a checkout."""
    data = {
        **_finite(result),
        "_timestamp": datetime.now().isoformat(),
        "_git_commit_hash": _git_commit_hash(),
        "_evaluate_version": evaluate.__version__,
        "_python_version": sys.version,
        "_interpreter_path": sys.executable,
    }
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)
