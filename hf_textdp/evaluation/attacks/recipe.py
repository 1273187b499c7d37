"""Attack recipes: every mechanism family on a private SentEval task, with public text from the others.

A recipe (``recipes/attacks_*.yaml``) names the private task, the public tasks, the release key, the
adversary (:class:`~hf_textdp.evaluation.attacks.AttackSettings`), the utility protocol and the
privatizers (the evaluation recipes' ``privatizers`` list). Each (mechanism, ε) writes one JSON record
``<task>__<label>__eps<ε>.json`` under the results folder (kept and skipped on a rerun), then the
summary table and the plots are drawn from all the records there.

An ``identifiers`` block (``rows``, ``seed``, optional ``kinds``, ``per_row``) makes the private set the
identifier-bearing set (identifier_rows.py): the records then hold ``identifiers`` (the set, no text) and
``spans`` (whole-identifier recovery per attack and per kind) and ``selection`` (``"uniform"``: every candidate
token privatized; a privatizer entry has no ``sensitive`` setting yet, so no recipe releases selectively).

``private_split`` (a fraction): the private task's rows are split with the seed; that share stays private (the
pool ``max_private_rows`` and the identifier rows are drawn from), the rest joins the public text, so the adversary
holds in-domain text that is not the private text. ``public_ngram`` (a number of words): public rows that share a
run of that many words with a row of the private pool are dropped (``shares_ngram``: SST-5 holds MR's reviews cut
into sentences, which exact matching misses).

``attack: {inversion_pool: family}`` trains one inversion model per privatizer entry, on pairs pooled over that
entry's ε list; a mapping from privatizer label to ε list (``{madlib: [40, 60, 80, 120]}``) names each entry's
pool (the release's ε among them; another recipe that pooled the same way reads the cached model back); a list
of ε pools every entry over the same ε.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidParameterError
from ...io.files import dumps_json
from ...io.paths import folder_inside
from ..common import Recipe, load_recipe_yaml, recipe_from_dict, result_name, versions
from ..encoders import make_encoder
from ..protocol import ClassifierConfig, run_protocol, summarize
from ..tasks import load_task
from .identifier_rows import IdentifierRows, identifier_rows
from .plots import plot_attacks
from .run import AttackSettings, in_public, run_attack, shares_ngram
from .summary import write_attack_summary


__all__ = ["AttackRecipe", "load_attack_recipe", "run_attack_recipe"]

_KEYS = {
    "name",
    "description",
    "private",
    "public",
    "seed",
    "data",
    "results_folder",
    "attack",
    "utility",
    "privatizers",
    "max_private_rows",
    "max_public_rows",
    "identifiers",
    "private_split",
    "public_ngram",
}


def _texts(task: Any) -> list[str]:
    return [t for split in task.texts for t in task.texts[split]]


class _Utility:
    """Accuracy of a classifier trained and tested on texts (``train_and_test``, CV), one encoder per model.

    The recipe's ``utility`` block names the encoder and the classifier; the clean accuracy of the
    private texts is scored once per model, beside the first release scored with it.
    """

    def __init__(self, spec: dict[str, Any], texts: list[str], labels: np.ndarray) -> None:
        self.encoder_name = str(spec.get("encoder", "bag_of_vectors"))
        clf_opts: dict[str, Any] = {
            k: (tuple(v) if k == "c_grid" else v) for k, v in (spec.get("classifier") or {}).items()
        }
        self.classifier = ClassifierConfig(**clf_opts)
        self.texts, self.labels = texts, labels
        self._encoders: dict[str, Any] = {}
        self._clean: dict[str, float] = {}

    def _score(self, texts: list[str], model: str) -> dict[str, Any]:
        if model not in self._encoders:
            self._encoders[model] = make_encoder(self.encoder_name, model)
        feats = self._encoders[model].encode(texts)
        res = run_protocol("cv", feats, {"all": self.labels}, {"train_and_test": {"all": feats}}, self.classifier)
        mean, std, kind = summarize(res.values["train_and_test"], res.n_test, True)
        return {"accuracy": mean, "accuracy_std": std, "accuracy_std_kind": kind}

    def __call__(self, released: list[str], model: str) -> dict[str, Any]:
        """The released texts' accuracy, with the clean texts' beside it."""
        out = self._score(released, model)
        if model not in self._clean:
            self._clean[model] = self._score(self.texts, model)["accuracy"]
        return {**out, "classifier": self.classifier.to_dict(), "clean_accuracy": self._clean[model]}


@dataclass(frozen=True)
class AttackRecipe:
    """A validated attack recipe (the YAML layout: module docstring)."""

    raw: dict[str, Any]
    recipe: Recipe  # name, privatizers and root, parsed as the evaluation recipes parse them
    private_task: str
    public_tasks: list[str]
    seed: int
    settings: AttackSettings
    # ``inversion_pool: family`` (True): each privatizer entry pools over its own ε list; a mapping: label → pool
    family_pool: bool | dict[str, tuple[float, ...]] = False

    def settings_for(self, label: str, epsilons: Sequence[float]) -> AttackSettings:
        """The adversary for one privatizer entry: its inversion pool under ``family`` or a mapping."""
        if isinstance(self.family_pool, dict):
            pool = self.family_pool.get(label, self.settings.inversion_pool)
        elif self.family_pool:
            pool = tuple(float(e) for e in epsilons)
        else:
            return self.settings
        return replace(self.settings, inversion_pool=pool)


def load_attack_recipe(path: str | Path) -> AttackRecipe:
    """Read and validate an attack recipe."""
    raw = load_recipe_yaml(path)
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise InvalidParameterError(f"attack recipe: unknown key(s) {unknown}. Allowed keys: {sorted(_KEYS)}.")
    private_task = str(raw.get("private", ""))
    public_tasks = [str(t) for t in raw.get("public") or []]
    if not public_tasks or private_task in public_tasks:
        raise InvalidParameterError(
            f"attack recipe: public must list tasks other than the private one ({private_task!r}), got {public_tasks}."
        )
    recipe = recipe_from_dict(
        {
            "name": raw.get("name", Path(path).stem),
            "tasks": [private_task, *public_tasks],
            "privatizers": raw.get("privatizers"),
        },
        path=Path(path),
    )
    opts: dict[str, Any] = dict(raw.get("attack") or {})
    family_pool: bool | dict[str, tuple[float, ...]] = False
    given = opts.get("inversion_pool")
    if given == "family":
        family_pool = bool(opts.pop("inversion_pool"))
    elif isinstance(given, dict):
        family_pool = {str(k): tuple(float(e) for e in v) for k, v in opts.pop("inversion_pool").items()}
        labels = {spec.name for spec in recipe.privatizers}
        if set(family_pool) - labels:
            raise InvalidParameterError(
                f"attack recipe: inversion_pool names {sorted(set(family_pool) - labels)}, which no privatizer entry "
                f"is; the entries' labels are {sorted(labels)}."
            )
    elif isinstance(given, str):
        raise InvalidParameterError(
            f"attack recipe: inversion_pool must be a list of ε, 'family' or a mapping from privatizer label to a "
            f"list of ε, got {given!r}."
        )
    opts = {k: (tuple(v) if k in ("taus", "lambda_rho", "inversion_pool") else v) for k, v in opts.items()}
    unknown_opts = sorted(set(opts) - set(AttackSettings.__dataclass_fields__) - {"attacker_seed"})
    if unknown_opts:
        raise InvalidParameterError(
            f"attack recipe: unknown attack option(s) {unknown_opts}. Allowed: {sorted(AttackSettings().to_dict())}."
        )
    return AttackRecipe(
        raw, recipe, private_task, public_tasks, int(raw.get("seed", 1111)), AttackSettings(**opts), family_pool
    )


@dataclass
class _Pools:
    """The attack's text: the private rows and their labels, the public text, what the filters did, the marked
    identifiers (an ``identifiers`` recipe) and which private rows occur in the public tasks (left out)."""

    private: list[str]
    labels: Any
    public: list[str]
    filtered: dict[str, Any]
    marked: IdentifierRows | None
    shared: Any


def _pools(parsed: AttackRecipe, progress: Callable[[str], None]) -> _Pools:
    """Plan: the private and public text, split, filtered and capped as the recipe says."""
    raw, root, seed, private_task = parsed.raw, parsed.recipe.root, parsed.seed, parsed.private_task
    data_dir = (raw.get("data") or {}).get("dir")
    split = raw.get("private_split")
    max_private = raw.get("max_private_rows")
    priv_task = load_task(
        private_task, data_dir=data_dir, root=root, max_rows=None if split else max_private, seed=seed
    )
    private_texts, labels = priv_task.texts["all"], priv_task.labels["all"]
    public: list[str] = []
    for name in parsed.public_tasks:
        public.extend(_texts(load_task(name, data_dir=data_dir, root=root)))
    filtered: dict[str, Any] = {}
    if split:
        order = np.random.default_rng(seed).permutation(len(private_texts))
        k = int(round(float(split) * len(private_texts)))
        keep, give = np.sort(order[:k]), np.sort(order[k:])
        public.extend(private_texts[i] for i in give)
        private_texts, labels = [private_texts[i] for i in keep], labels[keep]
        filtered.update(
            private_split=float(split), private_pool_rows=len(private_texts), public_from_private=len(give)
        )
        progress(f"{private_task}: {len(private_texts)} rows private, {len(give)} given to the public text")
    if raw.get("public_ngram"):
        n = int(raw["public_ngram"])
        drop = shares_ngram(public, private_texts, n)
        public = [t for t, d in zip(public, drop, strict=True) if not d]
        filtered.update(public_ngram=n, public_rows_dropped=int(drop.sum()))
        progress(f"{int(drop.sum())} public rows share a run of {n} words with a private row: left out")
    if split and max_private and not raw.get("identifiers") and len(private_texts) > int(max_private):
        pick = np.sort(np.random.default_rng(seed + 1).permutation(len(private_texts))[: int(max_private)])
        private_texts, labels = [private_texts[i] for i in pick], labels[pick]
    marked: IdentifierRows | None = None
    if raw.get("identifiers"):
        marked = identifier_rows(dict(raw["identifiers"]), private_texts, labels, public)
        private_texts, labels = marked.texts, marked.labels
        progress(
            f"identifier set: {len(private_texts)} {private_task} rows not in the public tasks, "
            f"{marked.info['n_identifiers']} identifiers"
        )
    # private rows that occur anywhere in the public tasks (SST-5 holds MR's reviews) are left out
    shared = in_public(private_texts, public)
    if shared.any():
        progress(f"{int(shared.sum())} {private_task} rows also occur in the public tasks: left out")
        private_texts = [t for t, s in zip(private_texts, shared, strict=True) if not s]
        labels = labels[~shared]
    if raw.get("max_public_rows"):
        keep = np.sort(np.random.default_rng(seed).permutation(len(public))[: int(raw["max_public_rows"])])
        public = [public[i] for i in keep]
    return _Pools(private_texts, labels, public, filtered, marked, shared)


def _attack_one(
    parsed: AttackRecipe,
    pools: _Pools,
    utility: _Utility,
    spec: Any,
    eps: float,
    settings: Any,
    path: str | Path,
    out: Path,
    progress: Callable[[str], None],
) -> None:
    """Run: one privatizer at one ε attacked, its utility measured, its record written to ``out``."""
    private_task, marked = parsed.private_task, pools.marked
    config = spec.config(eps)
    progress(f"{spec.name} ε={eps:g}: attacking {len(pools.private):,} {private_task} rows")
    t = time.perf_counter()
    record, released = run_attack(
        config,
        pools.private,
        pools.public,
        seed=parsed.seed,
        settings=settings,
        keep_texts=True,
        spans=None if marked is None else marked.spans,
        span_kinds=None if marked is None else marked.kinds,
        progress=progress,
    )
    if marked is not None:
        record.update(identifiers=marked.info, selection="uniform")
    t_util = time.perf_counter()
    record["utility"] = utility(released.texts, spec.model)
    record["timing_s"]["utility"] = time.perf_counter() - t_util
    record.update(
        public_filter=pools.filtered,
        n_private_rows_in_public=int(pools.shared.sum()),
        task=private_task,
        public_tasks=parsed.public_tasks,
        label=spec.name,
        recipe=parsed.raw,
        versions=versions(),
        command=f"hf-textdp attack --recipe {path}",
        wall_s=time.perf_counter() - t,
    )
    out.write_text(dumps_json(record), encoding="utf-8")
    recovered = ", ".join(f"{a} {e['recovery_top1']['value']:.3f}" for a, e in record["attacks"].items())
    progress(f"wrote {out}: {recovered}, accuracy {record['utility']['accuracy']:.1f} ({record['wall_s']:.0f} s)")


def run_attack_recipe(
    path: str | Path, output: str | Path = "results", *, resume: bool = True, progress: Callable[[str], None] = print
) -> Path:
    """Run an attack recipe; returns its results folder."""
    parsed = load_attack_recipe(path)
    raw, recipe = parsed.raw, parsed.recipe
    key = "results_folder" if raw.get("results_folder") else "name"
    folder = folder_inside(output, str(raw.get("results_folder") or recipe.name), key)
    folder.mkdir(parents=True, exist_ok=True)
    pools = _pools(parsed, progress)
    utility = _Utility(raw.get("utility") or {}, pools.private, pools.labels)
    for spec in recipe.privatizers:
        settings = parsed.settings_for(spec.name, spec.epsilons)
        for eps in spec.epsilons:
            out = folder / result_name(parsed.private_task, spec.name, eps, "attack").replace("__attack.json", ".json")
            if resume and out.is_file():
                progress(f"kept {out}")
                continue
            _attack_one(parsed, pools, utility, spec, eps, settings, path, out, progress)
    plot_attacks(folder)
    write_attack_summary(folder)
    return folder
