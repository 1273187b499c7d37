"""Plots of a recipe's results: accuracy against ε and against the replacement rate, one line per
privatizer, solid for ``train_and_test``, dashed for ``train_only``, the clean baseline in grey.

With many privatizers (more than :data:`SPLIT_ABOVE`) and both settings, each plot is also written
once per setting (``accuracy_vs_epsilon__train_and_test.png``, …), half as many lines to tell apart."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..results import load_results


__all__ = ["plot_recipe", "SPLIT_ABOVE"]

#: privatizer lines above which each plot is also written once per setting
SPLIT_ABOVE = 6


def plot_recipe(folder: str | Path) -> list[Path]:
    """Write ``accuracy_vs_epsilon.png`` and ``accuracy_vs_replacement_rate.png`` into ``folder``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = load_results(folder)
    tasks = sorted({r["task"] for r in results}, key=["mr", "cr", "mpqa", "sst5", "trec"].index)
    if not tasks:
        return []
    clean = {r["task"]: r["accuracy"] for r in results if r["setting"] == "clean"}
    lines: dict[tuple[str, str, str], list[tuple[Any, Any, Any]]] = defaultdict(list)
    for r in results:
        if r["setting"] == "clean":
            continue
        rate = ((r.get("privacy") or {}).get("diagnostics") or {}).get("replacement_rate")
        lines[(r["task"], r["label"], r["setting"])].append((r["epsilon"], rate, r["accuracy"]))
    labels = sorted({k[1] for k in lines})
    cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    colors = {lab: cmap(i % cmap.N) for i, lab in enumerate(labels)}
    settings = sorted({k[2] for k in lines})
    variants: list[tuple[str, set[str]]] = [("", set(settings))]
    if len(labels) > SPLIT_ABOVE and len(settings) > 1:
        variants += [(f"__{s}", {s}) for s in settings]
    written = []
    has_rates = any(p[1] is not None for pts in lines.values() for p in pts)
    for xname, stem in (("epsilon", "accuracy_vs_epsilon"), ("rate", "accuracy_vs_replacement_rate")):
        if xname == "rate" and not has_rates:
            continue
        for suffix, shown in variants:
            subset = {k: v for k, v in lines.items() if k[2] in shown}
            path = Path(folder) / f"{stem}{suffix}.png"
            _draw(plt, subset, tasks, clean, colors, xname, path, title=suffix[2:])
            written.append(path)
    return written


def _draw(
    plt: Any,
    lines: dict[tuple[str, str, str], list[tuple[Any, Any, Any]]],
    tasks: list[str],
    clean: dict[str, float],
    colors: dict[str, Any],
    xname: str,
    path: Path,
    *,
    title: str = "",
) -> None:
    """One figure: a panel per task, a line per (privatizer, setting), one legend below the panels."""
    cols = min(len(tasks), 3)
    rows = math.ceil(len(tasks) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    for ax, task in zip(axes.ravel(), tasks, strict=False):  # extra axes are switched off below
        for (t, lab, setting), pts in sorted(lines.items()):
            if t != task:
                continue
            if xname == "rate":  # vector releases have no replacement rate
                pts = [p for p in pts if p[1] is not None]
            if not pts:
                continue
            pts = sorted(pts, key=lambda p: p[0] if xname == "epsilon" else p[1])
            xs = [p[0] if xname == "epsilon" else 100.0 * p[1] for p in pts]
            ax.plot(
                xs,
                [p[2] for p in pts],
                marker="o",
                ms=3,
                color=colors[lab],
                linestyle="-" if setting == "train_and_test" else "--",
                label=f"{lab} ({setting})",
            )
        if task in clean:
            ax.axhline(clean[task], color="grey", linewidth=1, label="clean")
        ax.set_title(f"{task} — {title}" if title else task)
        ax.set_ylabel("accuracy (%)")
        if xname == "epsilon":
            ax.set_xscale("log")
            ax.set_xlabel("ε (per token)")
        else:
            ax.set_xlabel("replacement rate (%)")
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(tasks) :]:
        ax.axis("off")
    handles, names = [], []
    for ax in axes.ravel():  # one legend entry per line over all panels (lines may exist for some tasks only)
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
            if name not in names:
                handles.append(handle)
                names.append(name)
    fig.tight_layout()
    # below the panels; savefig(bbox_inches="tight") grows the canvas to include it
    fig.legend(
        handles, names, loc="upper center", ncol=min(4, max(1, len(names))), fontsize=7, bbox_to_anchor=(0.5, 0.0)
    )
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
