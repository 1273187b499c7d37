"""Plots of an attack results folder: recovery against ε per family, the privacy/utility frontier, and the
inversion models' training loss curves."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from ..tasks import TASKS, chance_accuracy
from .records import inversion_model_id, inversion_pool, read_records


__all__ = ["plot_attacks", "attack_figures"]

_STYLES = {"identity": ":", "bayes": "--", "contextual": "-", "inversion": "-."}


def _by_label(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        out[r["label"]].append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r["epsilon"])
    return dict(sorted(out.items()))


def _coincide(a: list[tuple[float, float]], b: list[tuple[float, float]], tol: float = 0.05) -> bool:
    """Whether two families' frontier points lie on each other (same count, each within ``tol``)."""
    return len(a) == len(b) and all(
        abs(p - q) <= tol and abs(u - v) <= tol for (p, u), (q, v) in zip(a, b, strict=True)
    )


def plot_attacks(folder: str | Path) -> list[Path]:
    """Draw ``recovery_vs_epsilon.png``, ``frontier.png`` and (records with an inversion model)
    ``inversion_loss.png`` from the records in ``folder``."""
    import matplotlib.pyplot as plt

    written = []
    for path, fig in attack_figures(folder):
        fig.savefig(path, dpi=110, bbox_inches="tight")  # the frontier's legend lies right of the axes
        plt.close(fig)
        written.append(path)
    return written


def attack_figures(folder: str | Path) -> list[tuple[Path, Any]]:
    """The figures :func:`plot_attacks` writes, with their paths, not yet saved (close them when done).

    The frontier is :func:`_frontier_figure`'s."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(folder)
    groups = _by_label(read_records(folder))
    if not groups:
        return []
    figures: list[tuple[Path, Any]] = []
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
    figures.append((folder / "recovery_vs_epsilon.png", fig))

    figures.append((folder / "frontier.png", _frontier_figure(groups)))
    curves = _inversion_curves(read_records(folder))
    if curves:
        fig, ax = plt.subplots(figsize=(7, 4))
        for label, curve in curves.items():
            ax.plot([c["step"] for c in curve], [c["loss"] for c in curve], marker=".", label=label, gid="inversion")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("training loss (mean of the block's steps)")
        ax.set_yscale("log")
        ax.set_title("Inversion models: training loss (cross-entropy over the candidates)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        fig.tight_layout()
        figures.append((folder / "inversion_loss.png", fig))
    return figures


def _best_interval(r: dict[str, Any]) -> tuple[float, float]:
    """The 95 % interval (in %) of the record's best attack, the one its ``recovery_top1`` names."""
    best = min(r["attacks"].values(), key=lambda a: abs(a["recovery_top1"]["value"] - r["recovery_top1"]))
    lo, hi = best["recovery_top1"]["ci95"]
    return 100 * lo, 100 * hi


def _frontier_figure(groups: dict[str, list[dict[str, Any]]]) -> Any:
    """The privacy/utility frontier, one panel per family (issue 57 item 10: nine families on one axes hid each
    other's points and ε labels): the family's points with their intervals (x: the best attack's 95 %
    row-bootstrap interval; y: the accuracy's std over folds) and ε labels, the other families in grey behind,
    the clean-text and chance levels. A family on the same points as another says so in its panel's title."""
    import matplotlib.pyplot as plt

    families = {label: [r for r in rs if r.get("utility")] for label, rs in groups.items()}
    families = {label: rs for label, rs in families.items() if rs}
    points = {
        label: [(100 * r["recovery_top1"], r["utility"]["accuracy"]) for r in rs] for label, rs in families.items()
    }
    cols = min(3, max(1, len(families)))
    rows = (len(families) + cols - 1) // cols
    fig, axes = plt.subplots(
        rows, cols, figsize=(4.4 * cols, 3.4 * rows + 0.6), squeeze=False, sharex=True, sharey=True
    )
    first = next(iter(families.values()))[0]
    task = first["task"]
    clean = first["utility"].get("clean_accuracy")
    chance = chance_accuracy(task) if task in TASKS else None
    for k, (ax, (label, rs)) in enumerate(zip(axes.ravel(), families.items(), strict=False)):
        for other, pts in points.items():  # the other families, for context
            if other != label:
                ax.plot(*zip(*pts, strict=True), color="0.82", linewidth=1, zorder=1)
        x, y = zip(*points[label], strict=True)
        intervals = [_best_interval(r) for r in rs]
        xerr = [
            [xi - lo for xi, (lo, _) in zip(x, intervals, strict=True)],
            [hi - xi for xi, (_, hi) in zip(x, intervals, strict=True)],
        ]
        yerr = [r["utility"].get("accuracy_std") or 0.0 for r in rs]
        ax.errorbar(
            x,
            y,
            xerr=xerr,
            yerr=yerr,
            color=f"C{k % 10}",
            marker="o",
            ms=4,
            capsize=2,
            elinewidth=0.8,
            zorder=3,
            gid="family",
        )
        for n, (r, xi, yi) in enumerate(zip(rs, x, y, strict=True)):  # alternate sides: close points' labels
            ax.annotate(
                f"{r['epsilon']:g}",
                (xi, yi),
                xytext=(4, 3) if n % 2 == 0 else (4, -9),
                textcoords="offset points",
                fontsize=7,
                gid="epsilon",
            )
        same = next((o for o in points if o != label and o < label and _coincide(points[o], points[label])), None)
        ax.set_title(f"{label} (same points as {same})" if same else label, fontsize=10)
        if clean is not None:
            ax.axhline(clean, color="grey", linestyle=":", linewidth=1, gid="clean")
        if chance is not None:
            ax.axhline(chance, color="black", linestyle="-.", linewidth=0.8, gid="chance")
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(families) :]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel(f"{task.upper()} accuracy (%)")
    for ax in axes[-1, :]:
        ax.set_xlabel("best attack's top-1 recovery (%)")
    levels = [f"clean text {clean:.1f} (dotted)"] if clean is not None else []
    levels += [f"chance, the majority class of {task.upper()}, {chance:.1f} (dash-dot)"] if chance is not None else []
    fig.suptitle(
        "Privacy/utility frontier: left, less recovered; up, more accurate. Labels: ε; bars: the best attack's 95 % "
        "interval and the accuracy's std over folds; grey: the other families. " + "; ".join(levels),
        fontsize=9,
        wrap=True,
    )
    fig.tight_layout()
    return fig


def _inversion_curves(records: list[dict[str, Any]]) -> dict[str, list[dict[str, float]]]:
    """One loss curve per distinct inversion model (a model pooled over a family's ε serves several records)."""
    out: dict[str, list[dict[str, float]]] = {}
    seen: set[str] = set()
    for r in sorted(records, key=lambda r: (r.get("label", r["mechanism"]), r["epsilon"])):
        model = inversion_model_id(r)
        if model is None or model in seen:
            continue
        seen.add(model)
        out[f"{r.get('label', r['mechanism'])}, ε ∈ {{{inversion_pool(r)}}}"] = r["inversion_model"]["loss_curve"]
    return out
