"""What the plots show (issue 42 item 7): ε on every frontier point, coinciding families offset and named, plain
ε ticks for a small grid, and a chance line wherever accuracy is plotted. Checked on the matplotlib figures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest


pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]


def _close(figures):
    import matplotlib.pyplot as plt

    for _, fig in figures:
        plt.close(fig)


@pytest.fixture
def attack_folder(tmp_path):
    """The records of the measured attack run (results/attacks): tem and santext lie on the same points, and so
    do laplace and truncated_laplace."""
    for p in (ROOT / "results" / "attacks").glob("mr__*.json"):
        shutil.copy(p, tmp_path / p.name)
    return tmp_path


def test_frontier_labels_every_point_with_its_epsilon_and_offsets_coinciding_families(attack_folder):
    from hf_textdp.evaluation.attacks.plots import attack_figures
    from hf_textdp.evaluation.attacks.records import read_records

    figures = attack_figures(attack_folder)
    try:
        fig = dict((p.name, f) for p, f in figures)["frontier.png"]
        ax = fig.axes[0]
        records = [r for r in read_records(attack_folder) if r.get("utility")]
        labels = [t for t in ax.texts if t.get_gid() == "epsilon"]
        assert len(labels) == len(records)  # one per point
        pts = {(round(t.xy[0], 6), round(t.xy[1], 6)): t.get_text() for t in labels}
        for r in records:  # each label sits on its point and names that point's ε
            xy = (round(100 * r["recovery_top1"], 6), round(r["utility"]["accuracy"], 6))
            assert xy in pts
        eps_of = {}
        for r in records:
            eps_of.setdefault((round(100 * r["recovery_top1"], 6), round(r["utility"]["accuracy"], 6)), set()).add(
                f"{r['epsilon']:g}"
            )
        texts = {}
        for t in labels:
            texts.setdefault((round(t.xy[0], 6), round(t.xy[1], 6)), set()).add(t.get_text())
        assert texts == eps_of
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "tem (same points as santext, offset)" in legend and "santext" in legend
        assert "truncated_laplace (same points as laplace, offset)" in legend
        assert sum("same points" in t for t in legend) == 2
        tem = next(line for line in ax.get_lines() if line.get_label().startswith("tem "))
        santext = next(line for line in ax.get_lines() if line.get_label() == "santext")
        shown = tem.get_transform().transform(tem.get_xydata()) - santext.get_transform().transform(
            santext.get_xydata()
        )
        assert (abs(shown) > 1).all()  # drawn apart on the canvas (pixels), though the data coincide
        chance = [line for line in ax.get_lines() if line.get_gid() == "chance"]
        assert len(chance) == 1 and chance[0].get_ydata()[0] == pytest.approx(50.0, abs=0.1)  # MR is balanced
        assert any(t.startswith("chance: majority class of MR") for t in legend)
    finally:
        _close(figures)


def test_frontier_of_distinct_families_has_no_offset(attack_folder):
    from hf_textdp.evaluation.attacks.plots import attack_figures

    for p in [*attack_folder.glob("mr__tem__*.json"), *attack_folder.glob("mr__truncated_laplace__*.json")]:
        p.unlink()
    figures = attack_figures(attack_folder)
    try:
        ax = dict((p.name, f) for p, f in figures)["frontier.png"].axes[0]
        assert not any("same points" in t.get_text() for t in ax.get_legend().get_texts())
    finally:
        _close(figures)


def _write_results(folder: Path, epsilons: list[float]) -> None:
    (folder / "mr__clean.json").write_text(json.dumps({"task": "mr", "setting": "clean", "accuracy": 75.0}))
    for eps in epsilons:
        res = {
            "task": "mr",
            "setting": "train_and_test",
            "label": "madlib",
            "epsilon": eps,
            "accuracy": 50.0 + eps / 10,
        }
        (folder / f"mr__madlib__eps{eps:g}__train_and_test.json").write_text(json.dumps(res))


def test_accuracy_plot_small_grid_has_plain_epsilon_ticks_and_a_chance_line(tmp_path):
    from hf_textdp.evaluation.plots import recipe_figures

    _write_results(tmp_path, [40.0, 80.0])
    figures = recipe_figures(tmp_path)
    try:
        fig = dict((p.name, f) for p, f in figures)["accuracy_vs_epsilon.png"]
        fig.canvas.draw()
        ax = fig.axes[0]
        assert list(ax.get_xticks()) == [40.0, 80.0]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["40", "80"]  # not 4×10^1
        assert not [t.get_text() for t in ax.get_xticklabels(minor=True) if t.get_text()]
        chance = [line for line in ax.get_lines() if line.get_gid() == "chance"]
        assert len(chance) == 1 and chance[0].get_ydata()[0] == pytest.approx(50.0, abs=0.1)
        assert "chance (majority class)" in [t.get_text() for t in fig.legends[0].get_texts()]
    finally:
        _close(figures)


def test_accuracy_plot_large_grid_keeps_log_ticks(tmp_path):
    from hf_textdp.evaluation.plots import PLAIN_TICKS_UP_TO, recipe_figures

    grid = [float(2**k) for k in range(PLAIN_TICKS_UP_TO + 1)] + [40.0]
    _write_results(tmp_path, grid)
    figures = recipe_figures(tmp_path)
    try:
        fig = dict((p.name, f) for p, f in figures)["accuracy_vs_epsilon.png"]
        fig.canvas.draw()
        ax = fig.axes[0]
        assert list(ax.get_xticks()) != grid  # matplotlib's log locator
        # issue 57 item 10: ticks in plain numbers (ε = 40 read 4×10^1), at 1, 2, 5 × 10^k, none unlabelled
        shown = [t.get_text() for t in ax.get_xticklabels() if 1 <= t.get_position()[0] <= 256]
        assert shown == ["1", "2", "5", "10", "20", "50", "100", "200"]
        assert not [t for t in ax.get_xticklabels(minor=True) if t.get_text()]
    finally:
        _close(figures)


def test_inversion_loss_curves_one_per_model(tmp_path):
    """A model pooled over a family's ε serves several records: one curve per model, its points the record's."""
    from hf_textdp.evaluation.attacks.plots import attack_figures

    curve_a = [{"step": 25, "epoch": 1, "loss": 4.0, "s": 1.0}, {"step": 50, "epoch": 1, "loss": 2.5, "s": 2.0}]
    curve_b = [{"step": 25, "epoch": 1, "loss": 3.0, "s": 1.0}]
    src = json.loads((ROOT / "results" / "attacks" / "mr__madlib__eps80.json").read_text())
    for label, eps, curve, pool in [
        ("madlib", 40, curve_a, [40, 80]),
        ("madlib", 80, curve_a, [40, 80]),
        ("tem", 15, curve_b, []),
    ]:
        rec = dict(src, label=label, mechanism=label, epsilon=eps, inversion_model={"loss_curve": curve, "pool": pool})
        (tmp_path / f"mr__{label}__eps{eps}.json").write_text(json.dumps(rec))
    figures = attack_figures(tmp_path)
    try:
        ax = dict((p.name, f) for p, f in figures)["inversion_loss.png"].axes[0]
        lines = {line.get_label(): line for line in ax.get_lines() if line.get_gid() == "inversion"}
        assert set(lines) == {"madlib, ε ∈ {40, 80}", "tem, ε ∈ {15}"}
        assert list(lines["madlib, ε ∈ {40, 80}"].get_ydata()) == [4.0, 2.5]
    finally:
        _close(figures)
    for p in tmp_path.glob("*.json"):
        rec = json.loads(p.read_text())
        rec.pop("inversion_model")
        p.write_text(json.dumps(rec))
    figures = attack_figures(tmp_path)
    try:
        assert "inversion_loss.png" not in {p.name for p, _ in figures}
    finally:
        _close(figures)


def test_selective_frontier_has_error_bars_and_no_two_markers_on_one_spot():
    """Issue 57 item 10: results/selective/frontier.png drew madlib's and privemb's selective_keep releases on one
    spot (both 0 % surviving, 63.4 %), with no error bars; the folds' std is in every record."""
    import runpy

    import numpy as np

    script = runpy.run_path(str(ROOT / "scripts" / "identifier_evidence.py"), run_name="evidence")
    records = json.loads((ROOT / "results" / "selective" / "summary.json").read_text(encoding="utf-8"))["records"]
    fig = script["frontier_figure"](records)
    try:
        fig.canvas.draw()
        ax = fig.axes[0]
        released = [r for r in records if r["mechanism"] != "none"]
        spots, bars = [], 0
        for container in ax.containers:  # one errorbar container per release
            (line, _caps, (segments,)) = container
            x, y = line.get_xdata()[0], line.get_ydata()[0]
            spots.append(tuple(np.round(line.get_transform().transform((x, y)), 1)))
            bars += len(segments.get_segments())
        assert len(spots) == len(released) == bars
        assert len(set(spots)) == len(spots)  # every marker on its own spot
        lo, hi = ax.get_ylim()
        assert all(
            lo < r["accuracy_pct"] - r["accuracy_sd"] and r["accuracy_pct"] + r["accuracy_sd"] < hi for r in released
        )
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
