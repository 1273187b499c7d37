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
from ..errors import HfTextDPError, InvalidParameterError
from ..io.files import _finite
from ..space import DEFAULT_MODEL
from ..version import __version__
from .protocol import ClassifierConfig
from .schema import PrivatizerSchema, check_recipe, read_recipe_file
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


def _raw_sha256(raw: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()


def provenance(name: str, path: Path | None, raw: dict[str, Any], out_dir: Path) -> tuple[dict[str, Any], str]:
    """What every result records of the recipe that made it, and the command that reruns it.

    The CLI writes into ``<--output>/<recipe folder>``, so ``--output`` is the parent of ``out_dir``.
    """
    info = {"name": name, "path": str(path) if path else None, "sha256": _raw_sha256(raw), "content": raw}
    return info, f"hf-textdp evaluate {path or name + '.yaml'} --output {out_dir.parent}/"


def recipe_from_dict(raw: dict[str, Any], *, path: Path | None = None) -> Recipe:
    """Validate a recipe dict (as read from YAML) against the recipe schema (:mod:`.schema`) and build it."""
    schema = check_recipe(raw)
    name = schema.name or (path.stem if path else "recipe")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise InvalidParameterError(f"recipe name must match [A-Za-z0-9_.-]+, got {name!r}.")
    if not schema.tasks:
        raise InvalidParameterError("recipe: tasks must list at least one of " + str(sorted(TASKS)) + ".")
    privs = tuple(_privatizer_spec(i, entry, path) for i, entry in enumerate(schema.privatizers or []))
    clf = schema.classifier.model_dump() if schema.classifier is not None else {}
    if "c_grid" in clf:
        clf["c_grid"] = tuple(clf["c_grid"])
    return Recipe(
        name=name,
        description=schema.description,
        path=path,
        seed=schema.seed,
        data_dir=(schema.data or {}).get("dir"),
        tasks=tuple(TaskEntry(name=t.name, max_rows=t.max_rows) for t in schema.tasks),
        encoder=_encoder_config(schema.encoder, path),
        classifier=ClassifierConfig(**clf),
        privatizers=privs,
        batch_rows=schema.batch_rows,
        rank_sample=schema.rank_sample,
        results_folder=schema.results_folder or "",
        noise_seeds=tuple(schema.noise_seeds or ()),
        lowercase=schema.lowercase,
        raw=raw,
    )


def _privatizer_spec(index: int, entry: PrivatizerSchema, path: Path | None) -> PrivatizerSpec:
    """One ``privatizers`` entry; a bad mechanism, ε or option fails now, before any task runs."""
    spec = PrivatizerSpec(
        mechanism=entry.mechanism,
        epsilons=tuple(entry.epsilons),
        postprocess=entry.postprocess,
        options=dict(entry.options),
        delta=entry.delta,
        model=_model_path(entry.model or DEFAULT_MODEL, path),
        label=entry.label,
        tasks=tuple(entry.tasks) if entry.tasks else None,
        candidates=parse_candidates(entry.candidates or DEFAULT_CANDIDATES).to_value(),
    )
    for eps in spec.epsilons:
        try:
            spec.config(eps)
        except HfTextDPError as err:
            raise type(err)(f"recipe privatizers[{index}]: {err}") from None
    return spec


def parse_recipe_yaml(path: Path) -> Any:
    """The YAML document in the recipe file ``path``, read with the size and alias limits of :mod:`.schema`."""
    return read_recipe_file(path)


def load_recipe_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a recipe YAML file as a mapping, checked against the recipe schema (:func:`~.schema.check_recipe`)."""
    p = Path(path)
    if not p.is_file():
        raise InvalidParameterError(f"recipe {str(p)!r} does not exist.")
    raw = read_recipe_file(p)
    check_recipe(raw, f"recipe {str(p)!r}")
    assert isinstance(raw, dict)
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
