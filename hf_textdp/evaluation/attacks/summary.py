"""The summary table of an attack results folder (``README.md`` there)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...candidates import ALL_SCRIPTS, parse_candidates
from ...config import PrivatizerConfig
from ...errors import InvalidParameterError
from ...release import config_key
from .records import inversion_model_id, inversion_pool, read_records


__all__ = [
    "attack_table",
    "final_loss",
    "identifier_entries",
    "recovery_table",
    "table_entries",
    "write_attack_summary",
    "write_package_table",
]


def _pct(entry: dict[str, Any] | None) -> str:
    if not entry:
        return "–"
    lo, hi = entry["ci95"]
    return f"{100 * entry['value']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def attack_table(records: list[dict[str, Any]]) -> str:
    """One markdown row per (mechanism, ε): replacement, top-1 of each attack, Bayes top-5, N_w/S_w, accuracy."""
    head = (
        "| mechanism | ε | replaced % | identity top-1 | Bayes top-1 | contextual top-1 | Bayes top-5 | "
        "contextual top-5 | N_w | S_w | accuracy % |\n|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in sorted(records, key=lambda r: (r["label"], r["epsilon"])):
        a = r["attacks"]
        dn = r.get("deniability") or {}
        acc = r.get("utility") or {}
        lines.append(
            f"| {r['label']} | {r['epsilon']:g} | {100 * r['replacement_rate']:.1f} | "
            f"{_pct(a['identity']['recovery_top1'])} | {_pct(a['bayes']['recovery_top1'])} | "
            f"{_pct(a.get('contextual', {}).get('recovery_top1'))} | {_pct(a['bayes']['recovery_top5'])} | "
            f"{_pct(a.get('contextual', {}).get('recovery_top5'))} | "
            f"{dn.get('n_w_mean', float('nan')):.3f} | {dn.get('s_w_mean', float('nan')):.1f} | "
            f"{acc.get('accuracy', float('nan')):.1f} |"
        )
    return head + "\n".join(lines) + "\n"


_ATTACK_NAMES = {"identity": "identity", "prior": "prior", "bayes": "Bayes", "contextual": "contextual"}


def recovery_table(records: list[dict[str, Any]]) -> str:
    """Per (mechanism, ε): each attack's top-1 on the replaced tokens and on all tokens (95 % CI), the headline
    attack of each (chosen on held-out public rows) and the inversion model's final training loss."""
    detailed = [r for r in records if r.get("groups")]
    if not detailed:
        return ""
    names = [a for a in (*_ATTACK_NAMES, "inversion") if any(a in r["groups"] for r in detailed)]
    out = [
        "| mechanism | ε | replaced % | "
        + " | ".join(_ATTACK_NAMES.get(a, a) for a in names)
        + " | headline (replaced / all) | inversion loss |",
        "|---|---|---|" + "---|" * len(names) + "---|---|",
    ]
    for r in sorted(detailed, key=lambda r: (r.get("label", r["mechanism"]), r["epsilon"])):
        cells = []
        for a in names:
            g = r["groups"].get(a) or {}
            cells.append(
                f"{_pct((g.get('replaced') or {}).get('top1'))}<br>{_pct((g.get('all') or {}).get('top1'))}"
                if g
                else "–"
            )
        head = r.get("headline") or {}
        lead = " / ".join((head.get(k) or {}).get("attack", "–") for k in ("replaced", "all"))
        inv = r.get("inversion_model") or {}
        loss = f"{final_loss(inv)[0]:.3f}" if inv.get("final_loss") is not None else "–"
        out.append(
            f"| {r.get('label', r['mechanism'])} | {r['epsilon']:g} | {100 * r['replacement_rate']:.1f} | "
            + " | ".join(cells)
            + f" | {lead} | {loss} |"
        )
    return "\n".join(out) + "\n"


def record_candidates(record: dict[str, Any]) -> str | dict[str, Any]:
    """The candidate set an attack record was measured on: its resolved setting, or for a record made before
    candidates followed the model's language (no ``candidates_resolved``), every script unless given."""
    if "candidates_resolved" in record:
        value: str | dict[str, Any] = record["candidates_resolved"]
        return value
    spec = parse_candidates(record["candidates"])
    if spec.scripts is None and spec.set != "all":
        spec = replace(spec, scripts=(ALL_SCRIPTS,))
    return spec.to_value()


def _config(r: dict[str, Any]) -> PrivatizerConfig:
    return PrivatizerConfig(
        mechanism=r["mechanism"],
        epsilon=r["epsilon"],
        delta=r.get("delta"),
        options=r.get("options") or {},
        model=r["model"],
        postprocess=r["postprocess"],
        candidates=record_candidates(r),
    )


def _split_public(r: dict[str, Any]) -> list[str]:
    """The private task's share that joined the public text (a recipe's ``private_split``), as the table names it."""
    split = (r.get("public_filter") or {}).get("private_split")
    if not split:
        return []
    rest = 1 - float(split)
    return [f"{r['task'].upper()} (the other half)" if rest == 0.5 else f"{r['task'].upper()} (the other {rest:.0%})"]


def table_entries(records: list[dict[str, Any]], folder: str) -> list[dict[str, Any]]:
    """The package's attack-table entries (hf_textdp/io/attack_table.py, keyed by release.config_key) for these
    records."""
    out = []
    for r in sorted(records, key=lambda r: (r["label"], r["epsilon"])):
        out.append(
            {
                "key": config_key(_config(r)),
                "private": f"{r['task'].upper()}, {r['n_private_rows']:,} rows, {r['n_private_tokens']:,} tokens",
                "public": [t.upper() for t in r["public_tasks"]] + _split_public(r),
                "replacement_rate": r["replacement_rate"],
                "attacks": {name: a["recovery_top1"] for name, a in r["attacks"].items()},
                **(
                    {"replaced": {name: g["replaced"]["top1"] for name, g in r["groups"].items() if "replaced" in g}}
                    if r.get("groups")
                    else {}
                ),
                "record": f"{folder}/{r['task']}__{r['label']}__eps{r['epsilon']:g}.json",
            }
        )
    return out


def identifier_entries(records: list[dict[str, Any]], folder: str) -> dict[str, dict[str, Any]]:
    """Per configuration key, the identifier recovery of an identifier-set record (records with ``spans``): the
    share of injected identifiers whose every token each attack names first, and where it was measured."""
    out = {}
    for r in records:
        if not (r.get("spans") or {}).get("attacks"):
            continue
        info = r.get("identifiers") or {}
        out[config_key(_config(r))] = {
            "set": f"{info.get('n_identifiers', 0):,} identifiers injected in {info.get('rows', 0):,} "
            f"{r['task'].upper()} rows ({', '.join(info.get('kinds', []))})",
            "attacks": {name: a["top1"] for name, a in r["spans"]["attacks"].items() if a.get("top1")},
            "record": f"{folder}/{r['task']}__{r['label']}__eps{r['epsilon']:g}.json",
        }
    return out


def write_package_table(
    folders: str | Path | Sequence[str | Path], target: str | Path, identifiers: str | Path | None = None
) -> Path:
    """Write ``target`` (the package's ``data/attack_table.json``) from the records in ``folders`` (one or more
    results folders; a configuration measured in two of them is refused), with the identifier recovery of the
    records in ``identifiers`` (an identifier-set folder) beside the entry of the same configuration."""
    paths = [Path(folders)] if isinstance(folders, (str, Path)) else [Path(f) for f in folders]
    entries = [e for f in paths for e in table_entries(read_records(f), f"results/{f.name}")]
    keys = [e["key"] for e in entries]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise InvalidParameterError(f"attack table: configurations measured in more than one folder: {twice}.")
    if identifiers is not None:
        found = identifier_entries(read_records(identifiers), f"results/{Path(identifiers).name}")
        missing = sorted(set(found) - set(keys))
        if missing:
            raise InvalidParameterError(
                f"attack table: identifier records of configurations without a token-level entry: {missing}."
            )
        for e in entries:
            if e["key"] in found:
                e["identifiers"] = found[e["key"]]
    target = Path(target)
    target.write_text(
        json.dumps({"version": 1, "entries": entries}, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )
    return target


_GROUPS = ("all", "replaced", "replaced_content", "replaced_function", "kept", "words_all", "words_replaced")


def group_table(record: dict[str, Any]) -> str:
    """One record's top-1 / top-5 per attack and group of tokens (scoring.py), the headline attack marked *."""
    groups = record.get("groups") or {}
    head = {g: h["attack"] for g, h in (record.get("headline") or {}).items()}
    cols = [g for g in _GROUPS if any(g in per for per in groups.values())]
    out = [
        f"**{record.get('label', record['mechanism'])} ε = {record['epsilon']:g}** "
        f"({100 * record['replacement_rate']:.1f} % replaced; top-1 %, then top-5 %, [95 % CI]; * = headline)\n",
        "| attack | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for name, per in groups.items():
        cells = []
        for g in cols:
            e = per.get(g) or {}
            star = "*" if head.get(g) == name else ""
            t5 = f"<br>{_pct(e.get('top5'))}" if e.get("top5") else ""
            cells.append(f"{_pct(e.get('top1'))}{star}{t5}")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    n: dict[str, Any] = next(iter(groups.values()), {})
    out.append(
        "| tokens (words) | " + " | ".join(f"{(n.get(g) or {}).get('top1', {}).get('n', 0):,}" for g in cols) + " |"
    )
    return "\n".join(out) + "\n"


def final_loss(info: dict[str, Any]) -> tuple[float, int]:
    """The inversion model's final training loss as the summaries quote it: the last full block's mean and its
    length in steps (a tail of fewer than ``check_every`` steps after it is too short to read alone)."""
    curve = info.get("loss_curve") or []
    every = int((info.get("budget") or {}).get("check_every", 25))
    if len(curve) >= 2 and curve[-1]["step"] - curve[-2]["step"] < every:
        return float(curve[-2]["loss"]), every
    if curve:
        prev = curve[-2]["step"] if len(curve) >= 2 else 0
        return float(curve[-1]["loss"]), int(curve[-1]["step"] - prev)
    return float(info["final_loss"]), 0


def inversion_summary(record: dict[str, Any]) -> str:
    """The inversion model's budget, stop and loss curve (one record)."""
    info = record.get("inversion_model")
    if not info:
        return ""
    b = info["budget"]
    loss, steps = final_loss(info)
    curve = info.get("loss_curve") or []
    pts = ", ".join(f"{c['step']}: {c['loss']:.2f}" for c in curve)
    return (
        f"Inversion model ({record['model']}): {info['train_windows']:,} windows ({info['train_tokens']:,} tokens) of "
        f"public text privatized under the attacker's key; budget rows {b['rows']:,}, epochs {b['epochs']}, max "
        f"length {b['max_length']}, lr {b['lr']:g} (head {b['head_lr']:g}), {b['batch_rows']} windows a step"
        + (f", at most {b['max_minutes']:g} minutes" if b.get("max_minutes") else "")
        + f"; ran {info['steps']} steps ({info['epochs_run']} epoch(s), {info['train_s'] / 60:.1f} min), stopped by "
        f"{info['stopped']}; final training loss {loss:.3f} (mean of the last {steps} "
        f"steps).\n\nLoss curve (step: mean loss of the "
        f"last {b['check_every']} steps): {pts}.\n"
    )


def identifier_table(records: list[dict[str, Any]]) -> str:
    """Whole-identifier recovery (records with ``spans``): per release, attack and kind, top-1 and top-5 %."""
    marked = [r for r in records if (r.get("spans") or {}).get("by_kind")]
    if not marked:
        return ""
    kinds = list(dict.fromkeys(k for r in marked for k in r["spans"]["by_kind"]))
    out = [
        "| mechanism | ε | selection | replaced % | attack | all | " + " | ".join(kinds) + " |",
        "|---|---|---|---|---|---|" + "---|" * len(kinds),
    ]
    for r in sorted(marked, key=lambda r: (r.get("label", ""), r["epsilon"])):
        sp = r["spans"]
        for name, entry in sp["attacks"].items():
            cells = [entry] + [sp["by_kind"][k].get(name) or {} for k in kinds]
            text = [f"{_pct(c.get('top1'))}" + (f"<br>{_pct(c['top5'])}" if c.get("top5") else "") for c in cells]
            out.append(
                f"| {r.get('label', r['mechanism'])} | {r['epsilon']:g} | {r.get('selection', 'uniform')} | "
                f"{100 * r['replacement_rate']:.1f} | {name} | " + " | ".join(text) + " |"
            )
    first = marked[0]["spans"]
    n = [first["attacks"]["identity"]["top1"]["n"]] + [first["by_kind"][k]["identity"]["top1"]["n"] for k in kinds]
    out.append("| identifiers | | | | | " + " | ".join(f"{v:,}" for v in n) + " |")
    return "\n".join(out) + "\n"


def write_attack_summary(folder: str | Path) -> Path:
    folder = Path(folder)
    records = read_records(folder)
    text = (
        "# What an attacker recovers\n\n"
        "Generated by `hf-textdp attack --recipe …` from the records in this folder (one JSON per mechanism and ε).\n"
        "Top-1 / top-5: % of the private candidate tokens whose original the attack names first / among its first\n"
        "five, with 95 % row-bootstrap intervals. N_w: mean fraction of a word type's occurrences left unchanged;\n"
        "S_w: mean number of distinct outputs per type (Feyisetan et al. 2020; types seen ≥ 5 times).\n"
        "Accuracy: bag-of-vectors logistic regression trained and tested on the released text (10-fold CV).\n\n"
        + attack_table(records)
        + (
            "\n## Recovery by attack\n\nTop-1 % on the replaced tokens (first line) and on all tokens (second), "
            "[95 % row-bootstrap CI]. A lower bound on leakage: what these attacks recover, not all an adversary "
            "can. The headline attack of each group is the best on held-out public rows.\n\n" + recovery_table(records)
            if any(r.get("groups") for r in records)
            else ""
        )
        + "\n![recovery against ε](recovery_vs_epsilon.png)\n\n![privacy/utility frontier](frontier.png)\n"
        + (
            "\n![inversion models' training loss](inversion_loss.png)\n"
            if any((r.get("inversion_model") or {}).get("loss_curve") for r in records)
            else ""
        )
    )
    detailed = [r for r in records if r.get("groups")]
    if detailed:
        text += (
            "\n## By group of tokens\n\nreplaced: the release differs from the input; replaced_content / "
            "replaced_function: replaced inputs outside / among the attacker's 100 most frequent public tokens; "
            "words_*: whole words (every piece recovered). The headline attack of each group is the best on "
            "held-out public rows the attacker privatized, never chosen on the private rows. Private rows that "
            "also occur in the public tasks are left out.\n\n"
        )
        models: dict[str, str] = {}  # one pooled inversion model serves several records: described once
        for r in sorted(detailed, key=lambda r: (r.get("label", ""), r["epsilon"])):
            about, model = inversion_summary(r), inversion_model_id(r)
            if model is not None and model in models:
                about = f"Inversion model: the one pooled over ε ∈ {models[model]} (described above).\n"
            elif model is not None:
                models[model] = inversion_pool(r)
            text += group_table(r) + "\n" + about + "\n"
            if r.get("command"):
                text += f"Command: `{r['command']}`; wall time {r.get('wall_s', 0) / 60:.1f} min.\n\n"
    ids = identifier_table(records)
    if ids:
        info = next(r["identifiers"] for r in records if r.get("identifiers"))
        text += (
            "\n## Identifiers\n\nThe share of injected identifiers whose every candidate token the attack names "
            "first (top-1, then top-5 below it; % [95 % row-bootstrap CI]). Private set: "
            f"{info['rows']:,} rows of the private task that are not in the public text (seed {info['seed']}), with "
            f"{info['n_identifiers']:,} identifiers injected ({info['lists_source']}). selection: uniform = every "
            "candidate token privatized.\n\n" + ids
        )
    path = folder / "README.md"
    path.write_text(text, encoding="utf-8")
    return path
