"""Plots of a recipe's results: accuracy against ε and against the replacement rate, one line per
privatizer, solid for ``train_and_test``, dashed for ``train_only``, the clean baseline in grey, the chance
level (majority class of the scored labels) dash-dotted in black. A panel with a small ε grid is ticked at
its own ε values, in plain numbers.

Each point carries an error bar of ±1 ``accuracy_std`` when its result records one, and the legend's
title says what that spread is (``accuracy_std_kind``: the standard deviation over folds or over noise
seeds, or a binomial standard error on a single test split). The clean baseline gets a grey band of the
same width.

With many privatizers (more than :data:`SPLIT_ABOVE`) and both settings, each plot is also written
once per setting (``accuracy_vs_epsilon__train_and_test.png``, …), half as many lines to tell apart."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from ..io.results import load_results
from .tasks import TASKS, chance_accuracy


if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_recipe", "plot_loss_curves", "recipe_figures", "SPLIT_ABOVE", "LINESTYLES", "LEGEND_HANDLELENGTH"]

#: privatizer lines above which each plot is also written once per setting
SPLIT_ABOVE = 6
#: line style of each setting, in the panels and in the legend
LINESTYLES: dict[str, Literal["-", "--", ":"]] = {"train_and_test": "-", "train_only": "--"}
#: at most this many distinct ε in a panel: its ε axis is ticked at exactly those values, in plain numbers
PLAIN_TICKS_UP_TO = 8
#: legend handle length in font sizes: long enough for three dashes of a ``--`` line. With matplotlib's
#: default (2) a handle holds one dash period, and its only gap sat under the point marker, so every
#: legend entry looked solid.
LEGEND_HANDLELENGTH = 4.0

_SPREAD_NAMES = {
    "std_over_folds": "std over CV folds",
    "std_over_noise_seeds": "std over noise seeds",
    "binomial_standard_error": "binomial s.e. on the test split",
}


class _Point(NamedTuple):
    epsilon: float
    rate: float | None
    accuracy: float
    std: float | None


def _std(res: dict[str, Any]) -> float | None:
    std = res.get("accuracy_std")
    return float(std) if isinstance(std, int | float) and math.isfinite(std) else None


def recipe_figures(folder: str | Path) -> list[tuple[Path, Figure]]:
    """The figures :func:`plot_recipe` writes, with their paths, not yet saved (close them when done)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = load_results(folder)
    tasks = sorted({r["task"] for r in results}, key=["mr", "cr", "mpqa", "sst5", "trec"].index)
    if not tasks:
        return []
    clean = {r["task"]: _Point(math.nan, None, r["accuracy"], _std(r)) for r in results if r["setting"] == "clean"}
    chance = {  # the majority-class rate of the scored labels, as the summary tables' row `chance`
        r["task"]: chance_accuracy(r["task"], protocol=r.get("protocol"), max_rows=r.get("max_rows"))
        for r in results
        if r["task"] in TASKS
    }
    lines: dict[tuple[str, str, str], list[_Point]] = defaultdict(list)
    spreads: dict[tuple[bool, str], set[str]] = defaultdict(set)  # (clean?, spread kind) -> tasks
    for r in results:
        if _std(r) is not None:
            spreads[(r["setting"] == "clean", str(r.get("accuracy_std_kind") or "accuracy_std"))].add(r["task"])
        if r["setting"] == "clean":
            continue
        rate = ((r.get("privacy") or {}).get("diagnostics") or {}).get("replacement_rate")
        lines[(r["task"], r["label"], r["setting"])].append(_Point(r["epsilon"], rate, r["accuracy"], _std(r)))
    labels = sorted({k[1] for k in lines})
    cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    colors = {lab: cmap(i % cmap.N) for i, lab in enumerate(labels)}
    settings = sorted({k[2] for k in lines})
    variants: list[tuple[str, set[str]]] = [("", set(settings))]
    if len(labels) > SPLIT_ABOVE and len(settings) > 1:
        variants += [(f"__{s}", {s}) for s in settings]
    note = _spread_note(spreads, tasks)
    figures = []
    has_rates = any(p.rate is not None for pts in lines.values() for p in pts)
    for xname, stem in (("epsilon", "accuracy_vs_epsilon"), ("rate", "accuracy_vs_replacement_rate")):
        if xname == "rate" and not has_rates:
            continue
        for suffix, shown in variants:
            subset = {k: v for k, v in lines.items() if k[2] in shown}
            fig = _figure(plt, subset, tasks, clean, colors, xname, title=suffix[2:], note=note, chance=chance)
            figures.append((Path(folder) / f"{stem}{suffix}.png", fig))
    return figures


def _spread_note(spreads: dict[tuple[bool, str], set[str]], tasks: list[str]) -> str:
    """The legend title: which spread the bars (and the clean band) show, for which tasks."""
    parts = []
    for kind in sorted({k for _, k in spreads}):
        bars, band = spreads.get((False, kind), set()), spreads.get((True, kind), set())
        with_bars = ", ".join(t for t in tasks if t in bars)
        band_only = ", ".join(t for t in tasks if t in band - bars)
        where = "; ".join(filter(None, [with_bars, band_only and f"clean only: {band_only}"]))
        parts.append(f"±1 {_SPREAD_NAMES.get(kind, kind)} ({where})")
    return "error bars and grey clean band: " + "; ".join(parts) if parts else ""


def plot_recipe(folder: str | Path) -> list[Path]:
    """Write ``accuracy_vs_epsilon.png`` and ``accuracy_vs_replacement_rate.png`` into ``folder``."""
    import matplotlib.pyplot as plt

    written = []
    for path, fig in recipe_figures(folder):
        fig.savefig(path, dpi=110, bbox_inches="tight")  # the legend lies below the canvas: grow it
        plt.close(fig)
        written.append(path)
    return written


def _x(p: _Point, xname: str) -> float:
    """The point's x: ε, or the replacement rate in % (only called on points that have one)."""
    if xname == "epsilon":
        return float(p.epsilon)
    assert p.rate is not None
    return 100.0 * p.rate


def _draw_lines(
    ax: Any,
    task: str,
    lines: dict[tuple[str, str, str], list[_Point]],
    colors: dict[str, Any],
    xname: str,
    entries: dict[str, Any],
) -> None:
    """``task``'s panel: a line per (privatizer, setting) with its error bars; each line's legend entry."""
    from matplotlib.lines import Line2D

    for (t, lab, setting), pts in sorted(lines.items()):
        if t != task:
            continue
        if xname == "rate":  # vector releases have no replacement rate
            pts = [p for p in pts if p.rate is not None]
        if not pts:
            continue
        pts = sorted(pts, key=lambda p: _x(p, xname))
        xs = [_x(p, xname) for p in pts]
        stds = [math.nan if p.std is None else p.std for p in pts]
        style = LINESTYLES.get(setting, ":")
        ax.errorbar(
            xs,
            [p.accuracy for p in pts],
            yerr=None if all(math.isnan(s) for s in stds) else stds,
            marker="o",
            ms=3,
            color=colors[lab],
            linestyle=style,
            elinewidth=0.8,
            capsize=2,
        )
        # a proxy without the marker: on a short handle the marker hid the dash gap
        entries.setdefault(f"{lab} ({setting})", Line2D([], [], color=colors[lab], linestyle=style))


def _x_axis(ax: Any, task: str, lines: dict[tuple[str, str, str], list[_Point]], xname: str) -> None:
    """The panel's x axis: ε on a log scale (the grid's own values as plain ticks when it is small), or the
    replacement rate."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, FuncFormatter, LogLocator, NullLocator

    if xname == "epsilon":
        ax.set_xscale("log")
        ax.set_xlabel("ε (per token)")
        grid = sorted({p.epsilon for (t, _, _), pts in lines.items() if t == task for p in pts})
        if 0 < len(grid) <= PLAIN_TICKS_UP_TO:  # a small grid: its own ε as plain ticks, not 4×10^1
            ax.xaxis.set_major_locator(FixedLocator(grid))
            ax.xaxis.set_major_formatter(FixedFormatter([f"{e:g}" for e in grid]))
        else:  # a large one: 1, 2, 5 × 10^k, written as plain numbers (40, not 4×10^1)
            ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.xaxis.set_minor_locator(NullLocator())
    else:
        ax.set_xlabel("replacement rate (%)")


def _figure(
    plt: Any,
    lines: dict[tuple[str, str, str], list[_Point]],
    tasks: list[str],
    clean: dict[str, _Point],
    colors: dict[str, Any],
    xname: str,
    *,
    title: str = "",
    note: str = "",
    chance: dict[str, float] | None = None,
) -> Figure:
    """One figure: a panel per task, a line per (privatizer, setting), one legend below the panels."""
    from matplotlib.lines import Line2D

    cols = min(len(tasks), 3)
    rows = math.ceil(len(tasks) / cols)
    fig: Figure
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    entries: dict[str, Line2D] = {}  # legend name -> handle, over all panels (lines may exist for some tasks only)
    for ax, task in zip(axes.ravel(), tasks, strict=False):  # extra axes are switched off below
        _draw_lines(ax, task, lines, colors, xname, entries)
        if task in clean:
            base = clean[task]
            ax.axhline(base.accuracy, color="grey", linewidth=1)
            if base.std is not None:
                ax.axhspan(base.accuracy - base.std, base.accuracy + base.std, color="grey", alpha=0.15, lw=0)
            entries.setdefault("clean", Line2D([], [], color="grey", linewidth=1))
        if chance and task in chance:
            ax.axhline(chance[task], color="black", linestyle="-.", linewidth=0.8, gid="chance")
            entries.setdefault("chance (majority class)", Line2D([], [], color="black", linestyle="-.", linewidth=0.8))
        ax.set_title(f"{task} — {title}" if title else task)
        ax.set_ylabel("accuracy (%)")
        _x_axis(ax, task, lines, xname)
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(tasks) :]:
        ax.axis("off")
    fig.tight_layout()
    names = sorted(entries, key=lambda n: (n in ("clean", "chance (majority class)"), n))
    fig.legend(
        [entries[n] for n in names],
        names,
        loc="upper center",
        ncol=min(4, max(1, len(names))),
        fontsize=7,
        title=note or None,
        title_fontsize=7,
        handlelength=LEGEND_HANDLELENGTH,
        bbox_to_anchor=(0.5, 0.0),  # below the panels; savefig(bbox_inches="tight") grows the canvas
    )
    return fig


def plot_loss_curves(records: list[dict[str, Any]], path: str | Path) -> Path | None:
    """``path``: the training-loss curves of fine-tuned models (records with ``loss_curve``, finetune_full.py),
    one panel per task, a thin line per model (means of ``block_steps`` optimizer steps against epochs), one
    colour per cell (privatizer and ε), and ln(classes), the loss of a uniform guess, dashed in black."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    models = [r for r in records if r.get("loss_curve") and r.get("setting") in ("clean", "train_only")]
    if not models:
        return None
    tasks = sorted({r["task"] for r in models})
    cells = sorted({(r["label"], r["epsilon"] or 0.0) for r in models}, key=lambda c: (c[0] != "clean", c))
    palette = plt.get_cmap("tab10")
    colors = {c: palette(i % 10) for i, c in enumerate(cells)}
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.0 * len(tasks), 4.0), squeeze=False)
    for ax, task in zip(axes.ravel(), tasks, strict=True):
        for r in (r for r in models if r["task"] == task):
            curve = r["loss_curve"]
            per_epoch = curve["steps"] / max(r["epochs_run"], 1)
            xs = [
                min((i + 0.5) * curve["block_steps"], curve["steps"]) / per_epoch for i in range(len(curve["means"]))
            ]
            ax.plot(xs, curve["means"], color=colors[(r["label"], r["epsilon"] or 0.0)], linewidth=0.8, alpha=0.8)
        ax.axhline(math.log(TASKS[task].num_labels), color="black", linestyle="--", linewidth=0.8)
        ax.set_title(f"{task}: training loss (means of {models[0]['loss_curve']['block_steps']} steps)")
        ax.set_xlabel("epoch")
        ax.set_ylabel("cross-entropy")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    handles = [Line2D([], [], color=colors[c]) for c in cells] + [Line2D([], [], color="black", linestyle="--")]
    names = [lab if lab == "clean" else f"{lab} ε={eps:g}" for lab, eps in cells] + ["ln(classes): uniform guess"]
    fig.legend(handles, names, loc="upper center", ncol=min(4, len(names)), fontsize=7, bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out
