"""Markdown tables straight from a results folder's JSON records (for results/FINDINGS.md).

Every cell is read from ``<folder>/<task>__<label>__eps<ε>__<setting>.json``: accuracy (mean ± standard
deviation over the noise seeds when the recipe ran several) for ``train_only`` / ``train_and_test``,
the measured replacement rate, and † where the accuracy is below chance (the task's majority-class
rate, as results/README.md marks it).

    python scripts/results_table.py results/glove_senteval                  # every (label, ε)
    python scripts/results_table.py results/glove_senteval --delta privemb madlib   # A − B at equal ε
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from typing import Any

from hf_textdp.evaluation.summary import BELOW_CHANCE, TASK_ORDER, _chance
from hf_textdp.io.results import load_results


def _acc(r: dict[str, Any]) -> str:
    chance = _chance(r)
    flag = BELOW_CHANCE if chance is not None and r["accuracy"] < chance else ""
    std = r.get("accuracy_std")
    sd = f" ± {std:.1f}" if r.get("accuracy_std_kind") == "std_over_noise_seeds" and std is not None else ""
    return f"{r['accuracy']:.1f}{flag}{sd}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--delta", nargs=2, metavar=("A", "B"), help="accuracy of label A minus label B at equal ε")
    args = ap.parse_args()
    results = load_results(args.folder)
    by: dict[tuple[str, str, float | None, str], dict[str, Any]] = {}
    for r in results:
        by[(r["task"], r["label"], r["epsilon"], r["setting"])] = r
    tasks = [t for t in TASK_ORDER if any(r["task"] == t for r in results)]
    head = "| mechanism | ε | " + " | ".join(tasks) + " |\n|---|---:|" + "---|" * len(tasks)
    if args.delta:
        a, b = args.delta
        eps = sorted({e for (_, lab, e, _) in by if lab == a} & {e for (_, lab, e, _) in by if lab == b})
        print(head.replace("mechanism", f"{a} − {b}"))
        for e in eps:
            cells = []
            for t in tasks:
                parts = []
                for s in ("train_only", "train_and_test"):
                    ra, rb = by.get((t, a, e, s)), by.get((t, b, e, s))
                    parts.append("–" if ra is None or rb is None else f"{ra['accuracy'] - rb['accuracy']:+.1f}")
                cells.append(" / ".join(parts))
            print(f"| {a} − {b} | {e:g} | " + " | ".join(cells) + " |")
        return
    print(head)
    clean = [by.get((t, "clean", None, "clean")) for t in tasks]
    print("| clean | – | " + " | ".join("–" if c is None else f"{c['accuracy']:.1f}" for c in clean) + " |")
    chance = defaultdict(lambda: "–")
    for t in tasks:
        r = next(r for r in results if r["task"] == t)
        ch = _chance(r)
        chance[t] = "–" if ch is None else f"{ch:.1f}"
    print("| chance (majority class) | – | " + " | ".join(chance[t] for t in tasks) + " |")
    combos = sorted({(r["label"], r["epsilon"]) for r in results if r["setting"] != "clean"})
    for label, e in combos:
        cells = []
        for t in tasks:
            ra, rb = by.get((t, label, e, "train_only")), by.get((t, label, e, "train_and_test"))
            if ra is None or rb is None:
                cells.append("not run")
                continue
            rate = rb["privacy"]["diagnostics"]["replacement_rate"]
            cells.append(f"{_acc(ra)} / {_acc(rb)} ({100 * rate:.0f})")
        print(f"| {label} | {e:g} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
