"""Compare privatizers of one results folder at equal ε and at equal replacement rate.

Accuracy at a given replacement rate is read off each line by linear interpolation between its
measured (rate, accuracy) points; rates outside a line's measured range give no value.

Run: ``python -m hf_textdp.evaluation.compare results/seed_claims --rates 0.2,0.5,0.8``.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..io.results import load_results


__all__ = ["curves", "accuracy_at_rate", "main"]


def curves(results: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[tuple[float, float, float]]]:
    """(task, label, setting) → sorted [(ε, replacement rate, accuracy %)]."""
    out: dict[tuple[str, str, str], list[tuple[float, float, float]]] = defaultdict(list)
    for r in results:
        if r["setting"] == "clean":
            continue
        rate = ((r.get("privacy") or {}).get("diagnostics") or {}).get("replacement_rate")
        if rate is None:
            continue
        out[(r["task"], r["label"], r["setting"])].append((float(r["epsilon"]), float(rate), float(r["accuracy"])))
    return {k: sorted(v) for k, v in out.items()}


def accuracy_at_rate(points: list[tuple[float, float, float]], rate: float) -> float | None:
    """Accuracy interpolated linearly in the replacement rate; ``None`` outside the measured range."""
    pts = sorted((p[1], p[2]) for p in points)
    rates = np.array([p[0] for p in pts])
    accs = np.array([p[1] for p in pts])
    if rates.size == 0 or rate < rates.min() or rate > rates.max():
        return None
    return float(np.interp(rate, rates, accs))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="compare privatizers at equal epsilon and equal replacement rate")
    parser.add_argument("folder")
    parser.add_argument("--rates", default="0.2,0.4,0.6,0.8,0.95")
    args = parser.parse_args(argv)
    results = load_results(args.folder)
    clean = {r["task"]: r["accuracy"] for r in results if r["setting"] == "clean"}
    cv = curves(results)
    rates = [float(x) for x in args.rates.split(",")]
    print("## accuracy (%) at equal epsilon: eps -> acc (replacement rate %)")
    for (task, label, setting), pts in sorted(cv.items()):
        cells = ", ".join(f"{e:g}: {a:.1f} ({100 * r:.0f})" for e, r, a in pts)
        print(f"{task} clean={clean.get(task, float('nan')):.1f} {label} {setting}: {cells}")
    print("## accuracy (%) at equal replacement rate (linear interpolation)")
    print("task setting label " + " ".join(f"r={r:g}" for r in rates))
    for (task, label, setting), pts in sorted(cv.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
        vals = [accuracy_at_rate(pts, r) for r in rates]
        print(f"{task} {setting} {label} " + " ".join("–" if v is None else f"{v:.1f}" for v in vals))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
