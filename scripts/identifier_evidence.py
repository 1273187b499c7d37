"""Identifiers found without being pointed at (issue 54 item 6): the default detector set against the answer key.

Two identifier-bearing MR sets (``identifier_set(..., kinds=REAL_KINDS, phrasing=...)``): ``tuning`` (seed 5401,
the carrier phrases the detectors may be tuned on) and ``heldout`` (seed 5402, other rows and other phrases, never
looked at while tuning). MiniLM, madlib, privatizer seed 2**40 + 5400, ε_s = 1. Releases:

- ``uniform``: every token at madlib ε = 100 (the quick start);
- ``default_keep``: the default detector set (no spans), identifiers at ε_s, other tokens released unchanged;
- ``default_privatize``: the default set, other tokens at ε = 100;
- ``spans_keep``: the injected spans alone (the answer key: an upper bound), other tokens unchanged.

Per kind: survived whole (the identifier's normal form, as the tokenizer normalises it, is in the released row's),
survived partially (≥ 50 % of the identifier's tokens released unchanged: the identity attack's top-1 with the
attacker knowing the selected positions), other tokens unchanged (positions outside every identifier, in the rows
holding the kind). Accuracy: bag-of-vectors, 5-fold CV on the released text.

Run: ``nice -n 10 python scripts/identifier_evidence.py --out results/selective``. The folder's README.md also
quotes ``attacks.json`` (``scripts/selective_attacks.py``) and ``timing.json`` (``scripts/selective_timing.py``)
where they are there; ``--readme-only`` rewrites it from the folder's JSON files alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


MODEL = "sentence-transformers/all-MiniLM-L6-v2"
EPS, EPS_S, PRIV_SEED = 100.0, 1.0, 2**40 + 5400
SETS = {"tuning": 5401, "heldout": 5402}
RELEASES = {
    "uniform": None,
    "default_keep": {"epsilon": EPS_S, "others": "keep"},
    "default_privatize": {"epsilon": EPS_S, "others": "privatize"},
    "spans_keep": {"epsilon": EPS_S, "detectors": [], "column": "spans", "others": "keep"},
}


def _scores(rows, released, tokenizer, normalize):
    """Per kind: identifiers, whole and partial survivors, other tokens and those unchanged."""
    special = set(tokenizer.all_special_ids)
    per: dict[str, dict[str, int]] = {}
    for row, text, ids_out in zip(rows, released["text"], released["input_ids"], strict=True):
        enc = tokenizer(row["text"], return_offsets_mapping=True)
        same = np.asarray(enc["input_ids"]) == np.asarray(ids_out)
        offs = enc["offset_mapping"]
        inside = np.zeros(len(offs), dtype=bool)
        out_norm = normalize(text)
        for (s, e), kind in zip(row["spans"], row["kinds"], strict=True):
            k = per.setdefault(kind, dict.fromkeys(("n", "whole", "partial", "other", "other_same"), 0))
            mine = np.array([b > a and a < e and s < b for a, b in offs])
            inside |= mine
            k["n"] += 1
            k["whole"] += normalize(row["text"][s:e]) in out_norm
            k["partial"] += bool(mine.any() and same[mine].mean() >= 0.5)
        real = [b > a and i not in special for (a, b), i in zip(offs, enc["input_ids"], strict=True)]
        other = ~inside & np.array(real)
        for kind in set(row["kinds"]):
            per[kind]["other"] += int(other.sum())
            per[kind]["other_same"] += int(same[other].sum())
    return per


def _accuracy(encoder, texts, labels):
    from hf_textdp.evaluation.protocol import ClassifierConfig, run_protocol

    X = encoder.encode(texts)
    res = run_protocol("cv", X, {"all": labels}, {"released": {"all": X}}, ClassifierConfig(kfold=5, inner_kfold=3))
    return float(np.mean(res.values["released"]) * 100.0)


def _run_set(name, seed, n, encoder, tokenizer, normalize):
    from hf_textdp import Privatizer, PrivatizerConfig
    from hf_textdp.evaluation.identifiers import REAL_KINDS, identifier_set

    rows = identifier_set("mr", seed=seed, n=n, kinds=REAL_KINDS, phrasing=name)
    texts, spans = [r["text"] for r in rows], [r["spans"] for r in rows]
    labels = np.asarray([r["label"] for r in rows], dtype=np.int64)
    out = {"rows": len(rows), "identifiers": sum(len(r["spans"]) for r in rows), "releases": {}}
    for rel, sens in RELEASES.items():
        t0 = time.time()
        priv = Privatizer(PrivatizerConfig(mechanism="madlib", epsilon=EPS, sensitive=sens), seed=PRIV_SEED)
        released = priv({"text": texts, "spans": spans}, list(range(len(rows))))
        secs = time.time() - t0
        report = priv.privacy_report()
        out["releases"][rel] = {
            "per_kind": _scores(rows, released, tokenizer, normalize),
            "accuracy_pct": _accuracy(encoder, released["text"], labels),
            "seconds": round(secs, 1),
            "detectors": [d["name"] for d in (report.get("sensitive") or {}).get("detectors") or []],
        }
        print(f"{name} {rel}: {secs:.0f} s", file=sys.stderr)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/selective")
    ap.add_argument("--rows", type=int, default=400)
    ap.add_argument("--readme-only", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.readme_only:
        result = json.loads((out / "summary.json").read_text(encoding="utf-8"))
        (out / "README.md").write_text(readme(result, _extras(out)), encoding="utf-8")
        return 0

    from hf_textdp.evaluation.encoders import BagOfVectorsEncoder

    start = time.time()
    encoder = BagOfVectorsEncoder(MODEL)
    tokenizer = encoder._tokenizer
    norm = tokenizer.backend_tokenizer.normalizer.normalize_str
    result = {
        "command": "nice -n 10 python scripts/identifier_evidence.py " + " ".join(argv or sys.argv[1:]),
        "model": MODEL,
        "epsilon": EPS,
        "sensitive_epsilon": EPS_S,
        "privatizer_seed": "2**40 + 5400",
        "sets": {name: _run_set(name, seed, args.rows, encoder, tokenizer, norm) for name, seed in SETS.items()},
    }
    result["run_time_s"] = round(time.time() - start, 1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "README.md").write_text(readme(result, _extras(out)), encoding="utf-8")
    print(f"done in {result['run_time_s']:.0f} s", file=sys.stderr)
    return 0


def _pct(a, b):
    return f"{100.0 * a / b:.1f}" if b else "—"


def kind_table(rel_scores) -> str:
    lines = ["| kind | n | survived whole % | partially % | other tokens unchanged % |", "|---|---:|---:|---:|---:|"]
    tot = dict.fromkeys(("n", "whole", "partial", "other", "other_same"), 0)
    for kind, k in sorted(rel_scores["per_kind"].items()):
        lines.append(
            f"| {kind} | {k['n']} | {_pct(k['whole'], k['n'])} | {_pct(k['partial'], k['n'])} | "
            f"{_pct(k['other_same'], k['other'])} |"
        )
        for key in tot:
            tot[key] += k[key]
    lines.append(
        f"| **all** | {tot['n']} | {_pct(tot['whole'], tot['n'])} | {_pct(tot['partial'], tot['n'])} | "
        f"{_pct(tot['other_same'], tot['other'])} |"
    )
    return "\n".join(lines)


def summary_table(result) -> str:
    lines = [
        "| set | release | survived whole % | partially % | other tokens unchanged % | accuracy % |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, s in result["sets"].items():
        for rel, r in s["releases"].items():
            k = r["per_kind"].values()
            n = sum(x["n"] for x in k)
            whole, partial = sum(x["whole"] for x in k), sum(x["partial"] for x in k)
            lines.append(
                f"| {name} | {rel} | {_pct(whole, n)} | {_pct(partial, n)} | "
                f"{_pct(sum(x['other_same'] for x in k), sum(x['other'] for x in k))} | {r['accuracy_pct']:.1f} |"
            )
    return "\n".join(lines)


def _extras(out):
    """The folder's attacks.json and timing.json, where they are there."""
    found = {}
    for name in ("attacks", "timing"):
        path = out / f"{name}.json"
        if path.exists():
            found[name] = json.loads(path.read_text(encoding="utf-8"))
    return found


def _attack_part(a) -> str:
    lines = [
        "\n## What an attacker recovers (held-out set, the attacker knowing the selected positions)\n",
        f"`{a['command']}` ({a['run_time_s']:.0f} s): `scripts/selective_attacks.py`'s docstring defines the "
        f"attacks; {a['n_identifiers']} identifiers of `{a['identifier_set']}`; public text {a['public']}; laws "
        f"per ε: {json.dumps(a['laws'])}. Top-1 %, 95 % row-bootstrap intervals.\n",
        "| release | identifier tokens selected % | attack | identifier tokens | identifiers whole "
        "| Bayes ≠ identity % |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for name, per in a["releases"].items():
        for attack in ("identity", "bayes"):
            t, w = per[attack]["tokens"], per[attack]["identifiers"]
            lines.append(
                f"| {name} | {per['identifier_tokens_selected_pct']:.1f} | {attack} | {t['top1']:.1f} "
                f"({t['ci95'][0]:.1f}–{t['ci95'][1]:.1f}) | {w['top1']:.1f} ({w['ci95'][0]:.1f}–{w['ci95'][1]:.1f}) | "
                f"{per['bayes_not_identity_pct']:.1f} |"
            )
    return "\n".join(lines)


def _timing_part(t) -> str:
    per = ", ".join(f"{k} {v}" for k, v in t["detection_alone_s"].items())
    return (
        f"\n## Time on all of MR ({t['rows']} rows, one run)\n\n`{t['command']}`; load average (1, 5, 15 min) "
        f"{t['loadavg_before']} before, {t['loadavg_after']} after, {t['cpus']} CPUs shared.\n\n"
        "| release | num_proc 1 (s) | num_proc 2 (s) |\n|---|---:|---:|\n"
        f"| madlib ε = 100 | {t['madlib_num_proc_1_s']} | {t['madlib_num_proc_2_s']} |\n"
        f"| default set, others at ε = 100 | {t['default_set_num_proc_1_s']} | {t['default_set_num_proc_2_s']} |\n\n"
        f"num_proc 2 releases the same rows as num_proc 1: {t['default_set_num_proc_1_equals_2']}. Detection alone, "
        f"one process, seconds: {per} (total {t['detection_alone_total_s']})."
    )


def readme(result, extras=None) -> str:
    parts = [
        "# Identifiers found without being pointed at\n",
        "Generated by `scripts/identifier_evidence.py` (issue 54 item 6); the script's docstring defines every "
        "column.\n",
        f"- command: `{result['command']}` (repository root, nice'd, shared 2-core CPU), {result['run_time_s']:.0f} s",
        f"- model {result['model']}, madlib ε = {result['epsilon']:g} for the others, ε_s = "
        f"{result['sensitive_epsilon']:g}, privatizer seed {result['privatizer_seed']}",
        "- sets: `identifier_set('mr', seed, n, kinds=REAL_KINDS, phrasing)`: `tuning` (seed 5401) and `heldout` "
        "(seed 5402, other carrier phrases, never used while tuning)\n",
        summary_table(result),
    ]
    for name, s in result["sets"].items():
        for rel in ("default_keep", "default_privatize"):
            parts.append(f"\n## {name}: {rel} ({s['rows']} rows, {s['identifiers']} identifiers)\n")
            parts.append(kind_table(s["releases"][rel]))
    extras = extras or {}
    if "attacks" in extras:
        parts.append(_attack_part(extras["attacks"]))
    if "timing" in extras:
        parts.append(_timing_part(extras["timing"]))
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
