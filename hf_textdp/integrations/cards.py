"""Cards for what hf-textdp publishes, rendered with ``huggingface_hub``'s card classes.

- A **dataset card** (:class:`huggingface_hub.DatasetCard`) for a privatized dataset, from the privacy
  report saved beside it (accounting.md §4): what was privatized, the guarantee and its unit, the scale,
  the totals, what is not covered, and how to load it.
- A **results card** (:class:`huggingface_hub.ModelCard` with :class:`~huggingface_hub.EvalResult`
  entries, i.e. ``model-index`` metadata) for a recipe's results folder: accuracy per (task,
  mechanism, ε, setting), the privacy summary of each privatizer and the exact command that
  produced it. ``evaluate.push_to_hub`` cannot run offline, so the model-index is generated here.

Example:

>>> from hf_textdp.integrations.cards import render_card                      # doctest: +SKIP
>>> print(render_card("results/senteval_bov_madlib"))            # doctest: +SKIP
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from huggingface_hub import DatasetCard, DatasetCardData, EvalResult, ModelCard, ModelCardData

from ..accounting import recovery_statement
from ..errors import InvalidParameterError
from ..io.reports import load_bound_report
from ..io.results import load_results
from ..sensitive.describe import card_fields
from ..version import __version__
from .card_selective import sensitive_rows


__all__ = [
    "dataset_card",
    "results_card",
    "render_card",
    "is_results_folder",
    "find_report",
    "original_columns",
    "ORIGINAL_SUFFIX",
]

_REPORT_NAME = "privacy_report.json"
ORIGINAL_SUFFIX = "_original"  # keep_original=True stores the input text in {text_column}_original
_FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")

_DATASET_TEMPLATE = """---
{{ card_data }}
---

# {{ pretty_name }}
{% if not_private_banner %}
{{ not_private_banner }}
{% endif %}
Text privatized token by token with hf-textdp
(mechanism `{{ mechanism }}`, {{ epsilon_intro }}{% if delta %}, δ = {{ delta }}{% endif %}).
Every privatized subword of `{{ model_id }}` was replaced by the output of the mechanism; special tokens
pass through unchanged.

## Privacy

| item | value |
|---|---|
| mechanism | `{{ mechanism }}` ({{ kind_line }}) |
| guarantee | `{{ guarantee }}`{% if certified %} (certified){% else %} (**not certified**){% endif %} |
| ε per token | {% if sensitive %}{{ sensitive.epsilon_row }}{% else %}{{ epsilon }}{% endif %} |
| δ per token | {{ delta_line }} |
| ε_token (pure-DP reading, ε·diam) | {{ epsilon_token }} |
| ε · median ρ₁ (scale) | {{ epsilon_median_rho1 }} |
| post-processing | `{{ postprocess }}` |
| rows / privatized tokens | {{ rows }} / {{ dp_tokens }} |
| largest per-row ε (basic composition) | {{ max_row_dp_epsilon }} |
| candidate set | `{{ candidate_setting }}`: {{ candidate_size }} tokens, sha256 `{{ candidate_sha }}` |
{% if sensitive %}| sensitive positions (selective) | {{ sensitive.line }} |
| other positions | {{ sensitive.others }} |
| detectors (reads: kinds found) | {{ sensitive.detectors }} |
| kinds no detector finds | {{ sensitive.cannot_find }} |
{% endif %}{% if users %}| per user | {{ users.summary }} |
{% endif %}
{% if not certified %}**Not certified.** The stated ε and δ are not proven for this configuration (see the
warnings), so the row columns `dp_epsilon` and `dp_delta` are null: no bound exists to put there.

{% endif %}{% if recovery %}**What an attacker recovers (a lower bound).** Measured on public benchmark text for
this exact configuration by the attacks named, so a stronger attack can recover more: {{ recovery }}.

{% endif %}{% if sensitive %}**Selective privatization.** {{ sensitive.statement }}

{% endif %}{% if users %}**Per user** (docs/mechanisms/users.md). {{ users.guarantee }}

{% endif %}**Unit of privacy.** The guarantee is per token: two texts that differ in one token w → w' are
indistinguishable up to e^(ε·d(w, w')) (metric DP) or e^ε (DP). A row's total is the per-token value
times its number of privatized tokens (`dp_epsilon` column); releases of the same rows compose.
{% if warnings %}
**Warnings**

{% for w in warnings %}- {{ w }}
{% endfor %}
{% endif %}
**Not covered**

{% for line in not_covered %}- {{ line }}
{% endfor %}

The full report is `privacy_report.json` in this repository. The noise seed is a secret key and is
not published.

## How to use

```python
from datasets import load_dataset

ds = load_dataset("{{ repo_id }}")
```

Produced by `hf-textdp {{ hf_textdp_version }}`.
"""

_RESULTS_TEMPLATE = """---
{{ card_data }}
---

# {{ title }}

{{ description }}

Produced with hf-textdp {{ hf_textdp_version }}:

```bash
{{ command }}
```

Encoder `{{ encoder }}`; classifier: {{ classifier }}. Settings: `train_only` privatizes the training text and
tests on clean text; `train_and_test` privatizes both. Accuracy in %, mean over folds (± std over folds) for
MR/CR/MPQA, single test score (± binomial standard error) for SST-5 and TREC-6.

## Results

| task | mechanism | ε | setting | accuracy | replacement rate |
|---|---|---:|---|---:|---:|
{% for line in rows %}{{ line }}
{% endfor %}

## Privacy

| mechanism | ε | guarantee | certified | ε_token | ε · median ρ₁ | N_w | S_w |
|---|---:|---|---|---:|---:|---:|---:|
{% for line in privacy %}{{ line }}
{% endfor %}

ε is per token (the unit of privacy is one token); see each result JSON's `privacy_report` for the
full report (accounting.md), including what the guarantee does not cover. The benchmark noise seed is fixed
in the recipe because the SentEval data are public; never reuse it on private text.
"""


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def find_report(path: str | os.PathLike[str]) -> Path | None:
    """The privacy report of a saved output (``OUTPUT.privacy_report.json`` or ``OUTPUT/privacy_report.json``)."""
    p = Path(path)
    if p.is_dir():
        cand = p / _REPORT_NAME
        return cand if cand.is_file() else None
    if p.name.endswith(".privacy_report.json") and p.is_file():
        return p
    cand = p.with_name(p.name + ".privacy_report.json")
    return cand if cand.is_file() else None


def is_results_folder(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a folder of ``hf-textdp evaluate`` result JSONs."""
    p = Path(path)
    return p.is_dir() and bool(load_results(p))


def candidate_setting(cand: dict[str, Any]) -> str:
    """The candidate setting in words, e.g. ``no_reserved, scripts latin`` (space.md §6); ``all`` for old reports."""
    parts = [str(cand.get("setting") or "all")]
    if cand.get("scripts"):
        parts.append("scripts " + "+".join(cand["scripts"]))
    vocab = cand.get("vocab")
    if isinstance(vocab, dict):
        parts.append(f"vocab {vocab.get('name')}")
    if cand.get("inputs_outside"):
        parts.append(
            f"{cand['inputs_outside']} vocabulary tokens outside it privatized, where they occur, as their nearest "
            "candidate"
        )
    per_class = cand.get("per_class")
    if per_class:
        parts.append(
            "class-preserving (each piece class its own space: "
            + "; ".join(f"{c['name']} {c['size']} tokens, ε_tok {_fmt(c.get('epsilon_token'))}" for c in per_class)
            + ")"
        )
    elif cand.get("classes") == "mix":
        parts.append("classes mixed")
    return ", ".join(parts)


def _size_category(rows: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if rows < limit:
            return name
    return "n>1M"


def dataset_card(
    report: dict[str, Any],
    *,
    repo_id: str = "USER/DATASET",
    pretty_name: str | None = None,
    original_columns: list[str] | None = None,
) -> Any:
    """A :class:`huggingface_hub.DatasetCard` for a privatized dataset, from its privacy report.

    Args:
        original_columns (`list[str]`, *optional*): columns of the data that hold the original text
            (``*_original``); the card then says first, plainly, that they and the dataset are not private.
    """
    original_columns = sorted(original_columns or [])
    totals = report.get("totals") or {}
    scale = report.get("scale") or {}
    model = report.get("model") or {}
    cand = report.get("candidate_set") or {}
    mechanism = str(report.get("mechanism"))
    data = DatasetCardData(
        pretty_name=pretty_name or f"Privatized text ({mechanism}, epsilon={_fmt(report.get('epsilon'))})",
        size_categories=_size_category(int(totals.get("rows") or 0)),
        tags=[
            "differential-privacy",
            "hf-textdp",
            f"dp-mechanism:{mechanism}",
            "privatized-text",
            *(["not-private", "contains-original-text"] if original_columns else []),
        ],
        hf_textdp={
            "mechanism": mechanism,
            "epsilon": report.get("epsilon"),
            "delta": report.get("delta"),
            "guarantee": report.get("guarantee"),
            "certified": report.get("certified"),
            "postprocess": report.get("postprocess"),
            "model": model.get("id"),
            "candidate_set_sha256": cand.get("sha256"),
            "candidates": candidate_setting(cand),
            "report_version": report.get("report_version"),
            **({"original_columns": original_columns, "private": False} if original_columns else {}),
            **({"sensitive": card_fields(report, _fmt)["yaml"]} if report.get("sensitive") else {}),
        },
    )
    guarantee = str(report.get("guarantee"))
    kind_line = {
        "metric_dp": f"ε·d metric DP, metric {report.get('metric') or 'euclidean'}",
        "dp": "(ε, δ)-DP per token" if report.get("delta") else "ε-DP per token",
        "umldp": "utility-optimized metric LDP",
        "none": "NO guarantee",
    }.get(guarantee, guarantee)
    return DatasetCard.from_template(
        data,
        template_str=_DATASET_TEMPLATE,
        pretty_name=data.pretty_name,
        mechanism=mechanism,
        kind_line=kind_line,
        epsilon=_fmt(report.get("epsilon")),
        delta=report.get("delta"),
        delta_line=_fmt(report.get("delta_token") if report.get("delta_token") else report.get("delta")),
        guarantee=guarantee,
        certified=bool(report.get("certified")),
        epsilon_token=_fmt(report.get("epsilon_token")),
        epsilon_median_rho1=_fmt(scale.get("epsilon_median_rho1")),
        postprocess=report.get("postprocess"),
        rows=_fmt(totals.get("rows")),
        dp_tokens=_fmt(totals.get("dp_tokens")),
        max_row_dp_epsilon=_fmt(totals.get("max_row_dp_epsilon")),
        candidate_size=_fmt(cand.get("size")),
        candidate_setting=candidate_setting(cand),
        candidate_sha=cand.get("sha256"),
        model_id=model.get("id"),
        warnings=list(report.get("warnings") or []),
        not_covered=list(report.get("not_covered") or []),
        repo_id=repo_id,
        hf_textdp_version=report.get("hf_textdp_version"),
        not_private_banner=_not_private_banner(original_columns),
        recovery=recovery_statement(report["measured_recovery"]) if report.get("measured_recovery") else None,
        sensitive=(sens := sensitive_rows(report, _fmt)),
        epsilon_intro=sens["intro"] if sens else f"ε = {_fmt(report.get('epsilon'))} per token",
        users={**report["users"], "guarantee": report.get("user_guarantee")} if report.get("users") else None,
    )


def _not_private_banner(columns: list[str]) -> str:
    """The card's first words when the data holds the original text: plainly, that it is not private."""
    if not columns:
        return ""
    many = len(columns) > 1
    names = ", ".join(f"`{c}`" for c in columns)
    return (
        f"> **This dataset is NOT private.** The column{'s' if many else ''} {names} "
        f"hold{'' if many else 's'} the original, unprivatized input text\n"
        "> (`keep_original=True`; publishing them takes `allow_original=True`). No privacy guarantee applies\n"
        f"> to {'these columns' if many else 'this column'}, and while {'they are' if many else 'it is'} published "
        "none applies to the rows either:\n"
        "> the guarantee below describes the privatized columns alone.\n"
    )


_TASK_TYPES = {
    "mr": ("text-classification", "sentiment"),
    "cr": ("text-classification", "sentiment"),
    "mpqa": ("text-classification", "opinion polarity"),
    "sst5": ("text-classification", "fine-grained sentiment"),
    "trec": ("text-classification", "question classification"),
}


def _static_vectors(results: list[dict[str, Any]]) -> str | None:
    """The vector file's name when the results were made on static word vectors (no hub base model), else None."""
    for r in results:
        for model in ((r.get("privacy_report") or {}).get("model") or {}, r.get("encoder") or {}):
            if model.get("kind") in ("glove", "word2vec"):
                return str(model.get("id") or model.get("model") or "static vectors")
    return None


def _run_labels(r: dict[str, Any]) -> list[str]:
    """What tells apart records of one configuration that are separate runs (path, noise and training seed)."""
    labels = [str(r["path"])] if r.get("path") else []
    if r.get("noise_seed") is not None:
        labels.append(f"noise seed {r['noise_seed']}")
    if r.get("train_seed") is not None:
        labels.append(f"training seed {r['train_seed']}")
    return labels


def results_card(folder: str | os.PathLike[str], *, model_name: str | None = None) -> Any:
    """A :class:`huggingface_hub.ModelCard` with ``model-index`` eval results for a recipe's results folder."""
    results = load_results(Path(folder))
    if not results:
        raise InvalidParameterError(f"{str(folder)!r} holds no hf-textdp evaluate results (result JSONs).")
    recipe = results[0].get("recipe") or {}
    content = recipe.get("content") or {}
    name = model_name or f"hf-textdp-{Path(folder).name}"
    order = {"clean": 0, "train_only": 1, "train_and_test": 2}
    results.sort(
        key=lambda r: (
            r["task"],
            r["label"] != "clean",
            r["label"],
            r["epsilon"] or 0,
            order[r["setting"]],
            str(r.get("path") or ""),
            r.get("noise_seed") or 0,
            r.get("train_seed") or 0,
        )
    )
    evals = []
    rows = []
    privacy: dict[tuple[str, Any], dict[str, Any]] = {}
    for r in results:
        task_type, task_name = _TASK_TYPES.get(r["task"], ("text-classification", r["task"]))
        eps = r.get("epsilon")
        config = r["setting"] if r["setting"] == "clean" else f"{r['label']}-eps{eps:g}-{r['setting']}"
        run = _run_labels(r)  # one record per model (finetune_full): name its path and seeds
        if run:
            config += "-" + "-".join(v.replace(" ", "") for v in run)
        evals.append(
            EvalResult(
                task_type=task_type,
                task_name=task_name,
                dataset_type=str(r.get("hub_id") or r["task"]),
                dataset_name=str(r.get("task_title") or r["task"]),
                dataset_config=config,
                dataset_split="senteval-cv" if r.get("protocol") == "cv" else "test",
                metric_type="accuracy",
                metric_name=f"accuracy ({', '.join([r['setting'], *run])})",
                metric_value=round(float(r["accuracy"]), 2),
                metric_args={"epsilon": eps, "mechanism": r.get("mechanism"), "setting": r["setting"]}
                | {k: r[k] for k in ("path", "noise_seed", "train_seed") if r.get(k) is not None},
            )
        )
        diag = (r.get("privacy") or {}).get("diagnostics") or {}
        rate = diag.get("replacement_rate")
        if rate is None and isinstance(r.get("replacement_rate"), dict):  # finetune_full: % of the training text
            train_rate = r["replacement_rate"].get("train")
            rate = None if train_rate is None else train_rate / 100.0
        rows.append(
            {
                "task": r["task"],
                "label": r["label"],
                "epsilon": _fmt(eps),
                "setting": ", ".join([r["setting"], *run]),
                "accuracy": f"{r['accuracy']:.2f} ± {r.get('accuracy_std') or 0:.2f}",
                "rate": "–" if rate is None else f"{100 * rate:.1f} %",
            }
        )
        if r.get("privacy") and (r["label"], eps) not in privacy:
            p = r["privacy"]
            privacy[(r["label"], eps)] = {
                "label": r["label"],
                "epsilon": _fmt(eps),
                "guarantee": p.get("guarantee"),
                "certified": _fmt(p.get("certified")),
                "epsilon_token": _fmt(p.get("epsilon_token")),
                "epsilon_median_rho1": _fmt((p.get("scale") or {}).get("epsilon_median_rho1")),
                "n_w": _fmt(diag.get("n_w_mean"), 3),
                "s_w": _fmt(diag.get("s_w_mean"), 3),
            }
    datasets = sorted({str(r.get("hub_id")) for r in results if r.get("hub_id")})
    static = _static_vectors(results)
    data = ModelCardData(
        model_name=name,
        eval_results=evals,
        datasets=datasets,
        metrics=["accuracy"],
        tags=["differential-privacy", "hf-textdp", "senteval"],
        library_name="hf-textdp",
        base_model=None if static else "sentence-transformers/all-MiniLM-L6-v2",
    )
    first = results[0]
    clf = first.get("classifier") or {}
    return ModelCard.from_template(
        data,
        template_str=_RESULTS_TEMPLATE,
        title=f"hf-textdp results: {Path(folder).name}",
        description=" ".join(str(content.get("description", "")).split()),
        command=first.get("command", ""),
        encoder=str((first.get("encoder") or {}).get("name")) + (f"` on `{static}" if static else ""),
        classifier=f"logistic regression, {clf.get('kfold')}-fold, C grid {clf.get('c_grid')}",
        rows=[
            "| " + " | ".join(str(r[k]) for k in ("task", "label", "epsilon", "setting", "accuracy", "rate")) + " |"
            for r in rows
        ],
        privacy=[
            "| "
            + " | ".join(
                str(p[k])
                for k in (
                    "label",
                    "epsilon",
                    "guarantee",
                    "certified",
                    "epsilon_token",
                    "epsilon_median_rho1",
                    "n_w",
                    "s_w",
                )
            )
            + " |"
            for p in privacy.values()
        ],
        hf_textdp_version=__version__,
    )


def render_card(path: str | os.PathLike[str], *, repo_id: str = "USER/DATASET") -> Any:
    """The card for ``path``: a results folder gives a results card, a privatized output a dataset card.

    Raises:
        InvalidParameterError: ``path`` is neither (no privacy report and no result JSONs).
    """
    p = Path(path)
    if is_results_folder(p):
        return results_card(p)
    report_path = find_report(p)
    if report_path is None:
        raise InvalidParameterError(
            f"path={str(p)!r} is neither a privatized output with its privacy report (OUTPUT.privacy_report.json "
            "or OUTPUT/privacy_report.json) nor a folder of hf-textdp evaluate results."
        )
    report = load_bound_report(p, report_path)  # refuses an output changed since it was privatized
    return dataset_card(report, repo_id=repo_id, original_columns=original_columns(p))


def original_columns(path: str | os.PathLike[str]) -> list[str]:
    """The ``*_original`` columns (the input text kept by ``keep_original=True``) of a saved output.

    Reads only column names: a .jsonl/.json file's keys (every line), a .csv header, a .parquet schema,
    or a ``save_to_disk`` folder's ``dataset_info.json`` features (each split's, for a ``DatasetDict``),
    falling back to the schema of its Arrow files.
    """
    return sorted(c for c in _column_names(Path(path)) if c.endswith(ORIGINAL_SUFFIX))


def _column_names(p: Path) -> set[str]:
    names: set[str] = set()
    if p.is_dir():
        infos = sorted(p.rglob("dataset_info.json"))
        for info in infos:
            try:
                features = json.loads(info.read_text(encoding="utf-8")).get("features") or {}
            except (OSError, ValueError):
                features = {}
            names.update(features)
        if not infos:
            for f in sorted(p.rglob("*")):
                if f.is_file() and f.suffix in (".arrow", *_FILE_SUFFIXES) and not f.name.startswith("."):
                    names |= _column_names(f)
        return names
    suffix = p.suffix.lower()
    if suffix == ".json":
        try:
            whole = json.loads(p.read_text(encoding="utf-8", errors="replace"))
        except ValueError:
            whole = None  # JSON Lines under a .json name: read line by line below
        if isinstance(whole, dict):
            return set(whole)  # a dict of columns
        if isinstance(whole, list):
            return {k for r in whole if isinstance(r, dict) for k in r}
    if suffix in (".jsonl", ".json"):
        with p.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict):
                    names.update(row)
    elif suffix == ".csv":
        with p.open(encoding="utf-8", errors="replace", newline="") as fh:
            names.update(next(csv.reader(fh), []))
    elif suffix in (".parquet", ".arrow"):
        try:
            if suffix == ".parquet":
                names.update(pq.read_schema(p).names)
            else:
                with pa.memory_map(str(p)) as src:
                    names.update(pa.ipc.open_stream(src).schema.names)
        except Exception:  # noqa: BLE001 - not a readable table: no column names to check
            pass
    return names
