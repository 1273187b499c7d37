"""The utility table of docs/candidates.md: old vs new candidate default at equal ε (issue 17).

Reads the result files of ``recipes/candidates_mr_trec.yaml`` and prints, per task, mechanism and ε,
accuracy (mean ± std over the noise seeds) for ``train_only`` / ``train_and_test`` and the measured
replacement rate, for the old default (``all``, classes mixed) and the new one (``no_reserved``,
class-preserving).

    python scripts/candidates_utility_table.py [results/candidates_mr_trec]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def cell(folder: Path, task: str, label: str, eps: int) -> str:
    parts = []
    rate = None
    for setting in ("train_only", "train_and_test"):
        path = folder / f"{task}__{label}__eps{eps}__{setting}.json"
        if not path.is_file():
            return "not run"
        r = json.loads(path.read_text(encoding="utf-8"))
        seeds = len(r.get("per_seed") or [1])
        std = f" ± {r['accuracy_std']:.1f}" if r.get("accuracy_std") is not None and seeds > 1 else ""
        parts.append(f"{r['accuracy']:.1f}{std}")
        rate = r["privacy"]["diagnostics"]["replacement_rate"]
    return f"{parts[0]} / {parts[1]} ({100 * rate:.0f} %, n = {seeds})"


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "results/candidates_mr_trec")
    print("| task | mechanism | ε | all, classes mixed (old default) | no_reserved, class-preserving (new default) |")
    print("|---|---|---|---|---|")
    for task in ("mr", "trec"):
        clean = json.loads((folder / f"{task}__clean.json").read_text(encoding="utf-8"))["accuracy"]
        print(f"| {task.upper()} | clean | | {clean:.1f} | {clean:.1f} |")
        for mech, grid in (("madlib", (60, 80)), ("tem", (10, 15))):
            for eps in grid:
                old, new = cell(folder, task, f"{mech}-all-mix", eps), cell(folder, task, f"{mech}-default", eps)
                print(f"| {task.upper()} | {mech} | {eps} | {old} | {new} |")


if __name__ == "__main__":
    main()
