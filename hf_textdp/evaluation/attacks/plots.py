"""Plots of an attack results folder: recovery against ε per family, and the privacy/utility frontier."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from .records import read_records


__all__ = ["plot_attacks"]

_STYLES = {"identity": ":", "bayes": "--", "contextual": "-"}


def _by_label(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        out[r["label"]].append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r["epsilon"])
    return dict(sorted(out.items()))


def plot_attacks(folder: str | Path) -> list[Path]:
    """Draw ``recovery_vs_epsilon.png`` and ``frontier.png`` from the records in ``folder``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(folder)
    groups = _by_label(read_records(folder))
    if not groups:
        return []
    written = []
    n = len(groups)
    cols = 3
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False, sharey=True)
    for ax, (label, rs) in zip(axes.ravel(), groups.items(), strict=False):
        eps = [r["epsilon"] for r in rs]
        for attack, style in _STYLES.items():
            if attack not in rs[0]["attacks"]:
                continue
            v = [100 * r["attacks"][attack]["recovery_top1"]["value"] for r in rs]
            lo = [100 * r["attacks"][attack]["recovery_top1"]["ci95"][0] for r in rs]
            hi = [100 * r["attacks"][attack]["recovery_top1"]["ci95"][1] for r in rs]
            err = [[a - b for a, b in zip(v, lo, strict=True)], [b - a for a, b in zip(v, hi, strict=True)]]
            ax.errorbar(eps, v, yerr=err, linestyle=style, marker="o", ms=3, capsize=2, label=f"{attack} top-1")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("ε")
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    axes[0, 0].set_ylabel("tokens recovered (%)")
    axes[0, 0].legend(fontsize=7, handlelength=3)
    fig.suptitle("Recovery of the original token against ε (95 % row-bootstrap intervals)", fontsize=11)
    fig.tight_layout()
    path = folder / "recovery_vs_epsilon.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    fig, ax = plt.subplots(figsize=(7.5, 5))
    markers = "osD^v<>ph*"
    clean = None
    for i, (label, rs) in enumerate(groups.items()):
        rs = [r for r in rs if r.get("utility")]
        if not rs:
            continue
        x = [100 * r["recovery_top1"] for r in rs]
        y = [r["utility"]["accuracy"] for r in rs]
        ax.plot(x, y, marker=markers[i % len(markers)], linestyle="-" if i < 5 else "--", label=label)
        clean = clean or rs[0].get("utility", {}).get("clean_accuracy")
    if clean is not None:
        ax.axhline(clean, color="grey", linestyle=":", label=f"clean text ({clean:.1f})")
    ax.set_xlabel("best attack's top-1 recovery (% of tokens)")
    ax.set_ylabel(f"{next(iter(groups.values()))[0]['task'].upper()} accuracy, train_and_test (%)")
    ax.set_title("Privacy/utility frontier (left: less recovered; up: more accurate)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, handlelength=3)
    fig.tight_layout()
    path = folder / "frontier.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written
