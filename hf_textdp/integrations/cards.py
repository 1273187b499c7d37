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

import os
from pathlib import Path
from typing import Any

from huggingface_hub import DatasetCard, DatasetCardData, EvalResult, ModelCard, ModelCardData

from ..errors import InvalidParameterError
from ..io.columns import ORIGINAL_SUFFIX, original_columns
from ..io.reports import load_bound_report
from ..io.results import load_results
from ..sensitive.describe import card_fields
from ..version import __version__
from .card_selective import sensitive_rows
from .report_text import READING, epsilon_lines, recovery_statement


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

{% for e in epsilon_lines %}- `{{ e.symbol }} {{ e.value }}`: {{ e.label }}{% if e.how %} = {{ e.how }}{% endif %}
{% endfor %}
{{ reading }}

| item | value |
|---|---|
| mechanism | `{{ mechanism }}` ({{ kind_line }}) |
| guarantee | `{{ guarantee }}`{% if certified %} (certified){% else %} (**not certified**){% endif %} |
| post-processing | `{{ postprocess }}` |
| rows / privatized tokens | {{ rows }} / {{ dp_tokens }} |
| scale: ε · median ρ₁ (ε times the median distance to a nearest neighbour) | {{ epsilon_median_rho1 }} |
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
indistinguishable up to e^(ε·d(w, w')) ≤ e^ε_tok (metric DP) or e^ε_tok (DP). A row's bound is ε_tok
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


def _card_data(report: dict[str, Any], pretty_name: str | None, original_columns: list[str]) -> DatasetCardData:
    """The card's YAML metadata: its name, size category and tags, and the ``hf_textdp`` block (mechanism, ε, δ,
    guarantee, model, candidate set; the original columns and the sensitive settings where there are)."""
    totals = report.get("totals") or {}
    model = report.get("model") or {}
    cand = report.get("candidate_set") or {}
    mechanism = str(report.get("mechanism"))
    return DatasetCardData(
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
    data = _card_data(report, pretty_name, original_columns)
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
        guarantee=guarantee,
        certified=bool(report.get("certified")),
        epsilon_lines=epsilon_lines(report),
        reading=READING,
        epsilon_median_rho1=_fmt(scale.get("epsilon_median_rho1")),
        postprocess=report.get("postprocess"),
        rows=_fmt(totals.get("rows")),
        dp_tokens=_fmt(totals.get("dp_tokens")),
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


_SETTING_ORDER = {"clean": 0, "train_only": 1, "train_and_test": 2}
_ROW_KEYS = ("task", "label", "epsilon", "setting", "accuracy", "rate")
_PRIVACY_KEYS = ("label", "epsilon", "guarantee", "certified", "epsilon_token", "epsilon_median_rho1", "n_w", "s_w")


def _result_order(r: dict[str, Any]) -> tuple[Any, ...]:
    return (
        r["task"],
        r["label"] != "clean",
        r["label"],
        r["epsilon"] or 0,
        _SETTING_ORDER[r["setting"]],
        str(r.get("path") or ""),
        r.get("noise_seed") or 0,
        r.get("train_seed") or 0,
    )


def _eval_result(r: dict[str, Any], run: list[str]) -> Any:
    """The ``model-index`` entry of one result record."""
    task_type, task_name = _TASK_TYPES.get(r["task"], ("text-classification", r["task"]))
    eps = r.get("epsilon")
    config = r["setting"] if r["setting"] == "clean" else f"{r['label']}-eps{eps:g}-{r['setting']}"
    if run:
        config += "-" + "-".join(v.replace(" ", "") for v in run)
    return EvalResult(
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


def _result_row(r: dict[str, Any], run: list[str], diag: dict[str, Any]) -> dict[str, str]:
    """The accuracy table's row of one result record (its replacement rate where the record has one)."""
    rate = diag.get("replacement_rate")
    if rate is None and isinstance(r.get("replacement_rate"), dict):  # finetune_full: % of the training text
        train_rate = r["replacement_rate"].get("train")
        rate = None if train_rate is None else train_rate / 100.0
    return {
        "task": r["task"],
        "label": r["label"],
        "epsilon": _fmt(r.get("epsilon")),
        "setting": ", ".join([r["setting"], *run]),
        "accuracy": f"{r['accuracy']:.2f} ± {r.get('accuracy_std') or 0:.2f}",
        "rate": "–" if rate is None else f"{100 * rate:.1f} %",
    }


def _privacy_row(r: dict[str, Any], diag: dict[str, Any]) -> dict[str, str]:
    """The privacy table's row of one privatizer (its report's guarantee and scale, and N_w, S_w)."""
    p = r["privacy"]
    return {
        "label": r["label"],
        "epsilon": _fmt(r.get("epsilon")),
        "guarantee": p.get("guarantee"),
        "certified": _fmt(p.get("certified")),
        "epsilon_token": _fmt(p.get("epsilon_token")),
        "epsilon_median_rho1": _fmt((p.get("scale") or {}).get("epsilon_median_rho1")),
        "n_w": _fmt(diag.get("n_w_mean"), 3),
        "s_w": _fmt(diag.get("s_w_mean"), 3),
    }


def _table(rows: Any, keys: tuple[str, ...]) -> list[str]:
    return ["| " + " | ".join(str(row[k]) for k in keys) + " |" for row in rows]


def results_card(folder: str | os.PathLike[str], *, model_name: str | None = None) -> Any:
    """A :class:`huggingface_hub.ModelCard` with ``model-index`` eval results for a recipe's results folder."""
    results = load_results(Path(folder))
    if not results:
        raise InvalidParameterError(f"{str(folder)!r} holds no hf-textdp evaluate results (result JSONs).")
    content = (results[0].get("recipe") or {}).get("content") or {}
    results.sort(key=_result_order)
    evals, rows = [], []
    privacy: dict[tuple[str, Any], dict[str, Any]] = {}
    for r in results:
        run = _run_labels(r)  # one record per model (finetune_full): name its path and seeds
        diag = (r.get("privacy") or {}).get("diagnostics") or {}
        evals.append(_eval_result(r, run))
        rows.append(_result_row(r, run, diag))
        if r.get("privacy") and (r["label"], r.get("epsilon")) not in privacy:
            privacy[(r["label"], r.get("epsilon"))] = _privacy_row(r, diag)
    static = _static_vectors(results)
    data = ModelCardData(
        model_name=model_name or f"hf-textdp-{Path(folder).name}",
        eval_results=evals,
        datasets=sorted({str(r.get("hub_id")) for r in results if r.get("hub_id")}),
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
        rows=_table(rows, _ROW_KEYS),
        privacy=_table(privacy.values(), _PRIVACY_KEYS),
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
