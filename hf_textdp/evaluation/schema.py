"""The recipe file: read with a size and alias limit, and checked against one schema (issue 53 Y1, Y2).

Every recipe kind (SentEval, fine-tuning, attacks) is one YAML mapping. :func:`read_recipe_file` refuses a
file over :data:`MAX_RECIPE_BYTES` (every result records the recipe it came from) and a document whose
aliases expand past :data:`MAX_RECIPE_NODES` nodes (a few hundred bytes of nested aliases can stand for
gigabytes); :func:`check_recipe` validates the mapping against :class:`RecipeSchema` (pydantic, strict
types, unknown keys refused), and a refusal names the key, the value and what is allowed.
Sections only one runner reads (``finetune``, ``attack``, ``utility``, ``identifiers``, ``encoder``, ``hub``,
``notes``) are mappings here, checked in full by that runner.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import InputFileError, InvalidParameterError
from .tasks import TASKS


__all__ = ["MAX_RECIPE_BYTES", "MAX_RECIPE_NODES", "RecipeSchema", "check_recipe", "read_recipe_file"]

#: the largest recipe file read (the largest shipped recipe is about 3 KB)
MAX_RECIPE_BYTES = 256 * 1024
#: the most YAML nodes a recipe may hold once its aliases are expanded
MAX_RECIPE_NODES = 100_000
_SEED_LIMIT = 2**32  # numpy's seeds
# the names pydantic gives the branches of a union in an error's location (``int``, ``dict[str,int]``, ...)
_UNION_TAG = re.compile(r"^(int|str|float|bool|none|list|dict)$|\[|^[A-Z]\w*Schema$")


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


def _known_task(name: str) -> str:
    if name not in TASKS:
        raise ValueError(f"unknown task. Known tasks: {sorted(TASKS)}")
    return name


class TaskSchema(_Strict):
    """One ``tasks`` entry: a task name, with at most ``max_rows`` rows (or ``{split: rows}``)."""

    name: str
    max_rows: int | dict[str, int] | None = Field(None, description="rows kept (an int >= 1, or one per split)")

    @field_validator("name")
    @classmethod
    def _task(cls, value: str) -> str:
        return _known_task(value)

    @field_validator("max_rows")
    @classmethod
    def _positive(cls, value: int | dict[str, int] | None) -> int | dict[str, int] | None:
        counts = value.values() if isinstance(value, dict) else [] if value is None else [value]
        if any(v < 1 for v in counts):
            raise ValueError("max_rows must be an int >= 1 or a mapping of split to an int >= 1")
        return value


class ClassifierSchema(_Strict):
    """``classifier``: the logistic regression's folds, penalty grid, iterations and seed."""

    kfold: int = Field(10, ge=2, le=1000)
    inner_kfold: int = Field(10, ge=2, le=1000)
    c_grid: list[float] = Field([0.25, 0.5, 1.0, 2.0, 4.0, 8.0], min_length=1)
    max_iter: int = Field(1000, ge=1)
    seed: int = Field(1111, ge=0, lt=_SEED_LIMIT)

    @field_validator("c_grid")
    @classmethod
    def _positive_grid(cls, value: list[float]) -> list[float]:
        if not all(0 < c < float("inf") for c in value):
            raise ValueError("c_grid must hold finite numbers > 0")
        return value


class PrivatizerSchema(_Strict):
    """One ``privatizers`` entry: a mechanism over a grid of ε (the values are checked by ``PrivatizerConfig``)."""

    mechanism: str
    epsilons: list[float] = Field(min_length=1)
    postprocess: str = "nearest"
    options: dict[str, Any] = Field(default_factory=dict)
    delta: float | None = None
    model: str | None = None
    label: str = ""
    tasks: list[str] | None = None
    candidates: str | dict[str, Any] | None = None
    on_the_fly: list[float] | None = None  # whole-model fine-tuning: the ε trained with collators

    @field_validator("tasks")
    @classmethod
    def _tasks(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else [_known_task(t) for t in value]


class RecipeSchema(_Strict):
    """Every key a recipe may hold, with its type and range (one schema for every recipe kind)."""

    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    seed: int = Field(1111, ge=0, lt=_SEED_LIMIT)
    data: dict[str, Any] | None = None
    tasks: list[TaskSchema] | None = None  # an entry may be the task's name alone
    encoder: dict[str, Any] | None = None
    classifier: ClassifierSchema | None = None
    privatizers: list[PrivatizerSchema] | None = None
    batch_rows: int = Field(512, ge=1)
    rank_sample: int = Field(2000, ge=1)
    hub: dict[str, Any] | None = None
    notes: Any = None
    finetune: dict[str, Any] | None = None
    results_folder: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]+$")
    noise_seeds: list[int] | None = None
    lowercase: bool = False
    # attack recipes (evaluation/attacks/recipe.py)
    private: str | None = None
    public: list[str] | None = None
    private_split: float | None = Field(None, gt=0, lt=1)
    max_private_rows: int | None = Field(None, ge=1)
    max_public_rows: int | None = Field(None, ge=1)
    public_ngram: int | None = Field(None, ge=1)
    attack: dict[str, Any] | None = None
    utility: dict[str, Any] | None = None
    identifiers: dict[str, Any] | None = None

    @field_validator("tasks", mode="before")
    @classmethod
    def _task_names(cls, value: Any) -> Any:
        return [{"name": t} if isinstance(t, str) else t for t in value] if isinstance(value, list) else value

    @field_validator("private")
    @classmethod
    def _private(cls, value: str | None) -> str | None:
        return None if value is None else _known_task(value)

    @field_validator("public")
    @classmethod
    def _public(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else [_known_task(t) for t in value]

    @field_validator("noise_seeds")
    @classmethod
    def _seeds(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and not all(0 <= s < _SEED_LIMIT for s in value):
            raise ValueError("noise_seeds must hold ints in [0, 2**32)")
        return value


def check_recipe(raw: Any, where: str = "recipe") -> RecipeSchema:
    """Validate a recipe mapping against :class:`RecipeSchema`.

    Raises:
        InvalidParameterError: naming the key (``classifier.kfold``, ``tasks[0]``), the value and what is allowed.
    """
    if not isinstance(raw, dict):
        raise InvalidParameterError(f"a recipe must be a mapping, got {type(raw).__name__}.")
    try:
        schema = RecipeSchema.model_validate(raw)
    except ValidationError as err:
        raise InvalidParameterError(_message(err, raw, where)) from None
    size = len(json.dumps(raw, default=str))
    if size > MAX_RECIPE_BYTES:
        raise InvalidParameterError(
            f"{where} is {size:,} bytes as JSON; a recipe may be at most {MAX_RECIPE_BYTES:,} bytes (every result "
            "records the recipe it came from)."
        )
    return schema


def _message(err: ValidationError, raw: dict[str, Any], where: str) -> str:
    """One line for the first error: ``{where}: {key} = {value}: {what is allowed}``."""
    first = err.errors(include_url=False)[0]
    loc = [p for p in first["loc"] if isinstance(p, int) or not _UNION_TAG.search(p)]
    if first["type"] == "extra_forbidden":
        unknown = sorted(str(k) for k in raw if k not in RecipeSchema.model_fields) if len(loc) == 1 else [loc[-1]]
        inside = f" in {_key(loc[:-1])}" if len(loc) > 1 else ""
        allowed = sorted(_model_at(loc[:-1]).model_fields)
        return f"{where}: unknown key(s) {unknown}{inside}. Allowed keys: {allowed}."
    value = _short(first.get("input"))
    what = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}: {_key(loc)} = {value}: {what}."


def _key(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_NESTED: dict[str, type[BaseModel]] = {
    "classifier": ClassifierSchema,
    "privatizers": PrivatizerSchema,
    "tasks": TaskSchema,
}


def _model_at(loc: list[Any]) -> type[BaseModel]:
    """The schema of the mapping at ``loc`` (the recipe, or one of its nested sections)."""
    model: type[BaseModel] = RecipeSchema
    for part in loc:
        if isinstance(part, str) and part in model.model_fields:
            model = _NESTED.get(part, model)
    return model


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}... ({len(text):,} characters)"


def read_recipe_file(path: Path) -> Any:
    """The YAML document in the recipe file ``path``, read with the size and alias limits; a syntax error names the
    file, the line and the column."""
    try:
        import yaml
    except ImportError as err:
        raise InvalidParameterError("recipes need PyYAML: pip install 'hf-textdp[eval]'") from err
    size = path.stat().st_size
    if size > MAX_RECIPE_BYTES:
        raise InputFileError(
            f"recipe {str(path)!r} is {size:,} bytes; a recipe may be at most {MAX_RECIPE_BYTES:,} bytes (every "
            "result records the recipe it came from)."
        )
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_bounded_loader(yaml, str(path)))  # noqa: S506
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise InputFileError(f"recipe {str(path)!r} is not valid YAML{where}: {problem}.") from None


def _bounded_loader(yaml: Any, name: str) -> Any:
    """A ``yaml.SafeLoader`` that counts each node as often as aliases repeat it and refuses a document of more
    than :data:`MAX_RECIPE_NODES` (and an alias to a node that holds it)."""

    class BoundedLoader(yaml.SafeLoader):  # type: ignore[misc,name-defined]
        def __init__(self, stream: Any) -> None:
            super().__init__(stream)
            self._sizes: dict[int, int] = {}

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):  # the anchored node, counted again where the alias stands
                target = self.anchors.get(self.peek_event().anchor)
                if target is not None and id(target) not in self._sizes:
                    raise InputFileError(f"recipe {name!r}: an alias refers to a node that contains it.")
                return super().compose_node(parent, index)
            node = super().compose_node(parent, index)
            if isinstance(node, yaml.SequenceNode):
                children = node.value
            elif isinstance(node, yaml.MappingNode):
                children = [n for pair in node.value for n in pair]
            else:
                children = []
            size = 1 + sum(self._sizes[id(c)] for c in children)
            if size > MAX_RECIPE_NODES:
                raise InputFileError(
                    f"recipe {name!r}: its aliases expand to more than {MAX_RECIPE_NODES:,} YAML nodes (at line "
                    f"{node.start_mark.line + 1}); write the values out instead of nesting aliases."
                )
            self._sizes[id(node)] = size
            return node

    return BoundedLoader
