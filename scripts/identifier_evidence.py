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
holding the kind). Accuracy: bag-of-vectors, 5-fold CV on the released text. ``--time`` also times the default
set's detection beside a madlib pass over all of MR in one run.

Run: ``nice -n 10 python scripts/identifier_evidence.py --out results/selective [--time]``.
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


def _time_mr(data_dir=None):
    """The default set's detection and a madlib pass over all of MR, in this one process."""
    from hf_textdp import Privatizer, PrivatizerConfig
    from hf_textdp.evaluation.tasks import load_task
    from hf_textdp.sensitive import build_detectors, parse_sensitive, sensitive_spans

    texts = list(load_task("mr", data_dir=data_dir).texts["all"])
    priv = Privatizer(PrivatizerConfig(mechanism="madlib", epsilon=EPS), seed=PRIV_SEED)
    priv.privatize(texts[:10])  # load the model outside the timing
    t0 = time.time()
    priv({"text": texts}, list(range(len(texts))))
    madlib = time.time() - t0
    dets = build_detectors(parse_sensitive({"epsilon": EPS_S}))
    sensitive_spans(dets, texts[:10])  # load the NER pipeline outside the timing
    per = {}
    for d in dets:
        t0 = time.time()
        for i in range(0, len(texts), 1000):
            sensitive_spans([d], texts[i : i + 1000])
        per[d.name] = round(time.time() - t0, 2)
    total = round(sum(per.values()), 1)
    return {"rows": len(texts), "madlib_pass_s": round(madlib, 1), "default_set_s": total, "per_detector_s": per}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/selective")
    ap.add_argument("--rows", type=int, default=400)
    ap.add_argument("--time", action="store_true")
    args = ap.parse_args(argv)

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
    if args.time:
        result["timing_mr"] = _time_mr()
    result["run_time_s"] = round(time.time() - start, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "README.md").write_text(readme(result), encoding="utf-8")
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


def readme(result) -> str:
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
    if "timing_mr" in result:
        t = result["timing_mr"]
        parts.append(
            f"\n## Time on all of MR ({t['rows']} rows, one run)\n\nmadlib pass {t['madlib_pass_s']} s; default "
            f"detector set {t['default_set_s']} s (per detector: {json.dumps(t['per_detector_s'])})"
        )
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
