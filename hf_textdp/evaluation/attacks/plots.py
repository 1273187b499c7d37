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

    The frontier labels every point with its ε, offsets a family whose points lie on another's (and says so
    in its legend entry), and draws the task's chance level (majority class)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import offset_copy

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

    fig, ax = plt.subplots(figsize=(11.5, 6))
    markers = "osD^v<>ph*"
    clean = None
    drawn: dict[str, list[tuple[float, float]]] = {}  # family -> its points, to tell coinciding families
    for i, (label, rs) in enumerate(groups.items()):
        rs = [r for r in rs if r.get("utility")]
        if not rs:
            continue
        x = [100 * r["recovery_top1"] for r in rs]
        y = [r["utility"]["accuracy"] for r in rs]
        same = next((other for other, pts in drawn.items() if _coincide(pts, list(zip(x, y, strict=True)))), None)
        drawn[label] = list(zip(x, y, strict=True))
        # a family on the same points as one drawn before is offset by a few points and says so in the legend
        shift = offset_copy(ax.transData, fig=fig, x=4, y=-4, units="points") if same else ax.transData
        ax.plot(
            x,
            y,
            marker=markers[i % len(markers)],
            linestyle="-" if i < 5 else "--",
            label=f"{label} (same points as {same}, offset)" if same else label,
            transform=shift,
        )
        for r, xi, yi in zip(rs, x, y, strict=True):  # ε of every point; an offset family's below its points
            ax.annotate(
                f"{r['epsilon']:g}",
                (xi, yi),
                xytext=(6, -11) if same else (3, 3),
                textcoords="offset points",
                fontsize=6,
                gid="epsilon",
            )
        clean = clean or rs[0].get("utility", {}).get("clean_accuracy")
    if clean is not None:
        ax.axhline(clean, color="grey", linestyle=":", label=f"clean text ({clean:.1f})")
    task = next(iter(groups.values()))[0]["task"]
    if task in TASKS:
        chance = chance_accuracy(task)
        label = f"chance: majority class of {task.upper()} ({chance:.1f})"
        ax.axhline(chance, color="black", linestyle="-.", linewidth=1, label=label, gid="chance")
    ax.text(0.99, 0.01, "point labels: ε", transform=ax.transAxes, ha="right", va="bottom", fontsize=8)
    ax.set_xlabel("best attack's top-1 recovery (% of tokens)")
    ax.set_ylabel(f"{next(iter(groups.values()))[0]['task'].upper()} accuracy, train_and_test (%)")
    ax.set_title("Privacy/utility frontier (left: less recovered; up: more accurate)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, handlelength=3, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # off the points
    fig.tight_layout()
    figures.append((folder / "frontier.png", fig))
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
