"""What the plots show (issue 42 item 7, issue 57 item 10): ε on every frontier point, one panel per family with
its intervals, coinciding families named, plain ε ticks, and a chance line wherever accuracy is plotted. Checked on
the matplotlib figures."""

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


def _frontier(folder):
    from hf_textdp.evaluation.attacks.plots import attack_figures

    figures = attack_figures(folder)
    fig = dict((p.name, f) for p, f in figures)["frontier.png"]
    fig.canvas.draw()
    return figures, fig, [ax for ax in fig.axes if ax.get_title()]


def test_frontier_labels_every_point_with_its_epsilon_in_one_panel_per_family(attack_folder):
    """Issue 57 item 10: nine families on one axes hid each other's points and ε labels. One panel per family,
    every point labelled with its ε, families on the same points as another named in their panel's title."""
    from hf_textdp.evaluation.attacks.records import read_records

    figures, fig, panels = _frontier(attack_folder)
    try:
        records = [r for r in read_records(attack_folder) if r.get("utility")]
        families = sorted({r["label"] for r in records})
        assert [ax.get_title().split(" (")[0] for ax in panels] == families
        for ax in panels:
            family = ax.get_title().split(" (")[0]
            mine = {
                (round(100 * r["recovery_top1"], 6), round(r["utility"]["accuracy"], 6)): f"{r['epsilon']:g}"
                for r in records
                if r["label"] == family
            }
            labels = {
                (round(t.xy[0], 6), round(t.xy[1], 6)): t.get_text() for t in ax.texts if t.get_gid() == "epsilon"
            }
            assert labels == mine  # one label per point of the family, on it, naming its ε
            chance = [line for line in ax.get_lines() if line.get_gid() == "chance"]
            assert len(chance) == 1 and chance[0].get_ydata()[0] == pytest.approx(50.0, abs=0.1)  # MR is balanced
        titles = [ax.get_title() for ax in panels]
        assert "tem (same points as santext)" in titles and "truncated_laplace (same points as laplace)" in titles
        assert sum("same points" in t for t in titles) == 2
        assert "chance, the majority class of MR" in fig._suptitle.get_text()
    finally:
        _close(figures)


def test_frontier_draws_each_points_intervals(attack_folder):
    """x: the best attack's 95 % row-bootstrap interval; y: the accuracy's std over folds (issue 57 item 10)."""
    from hf_textdp.evaluation.attacks.records import read_records

    figures, _, panels = _frontier(attack_folder)
    try:
        records = {r["label"]: [] for r in read_records(attack_folder) if r.get("utility")}
        for r in sorted(read_records(attack_folder), key=lambda r: r["epsilon"]):
            if r.get("utility"):
                records[r["label"]].append(r)
        for ax in panels:
            rs = records[ax.get_title().split(" (")[0]]
            [bars] = [c for c in ax.containers if c.lines[0].get_gid() == "family"]
            x_segments, y_segments = (c.get_segments() for c in bars.lines[2])
            assert len(x_segments) == len(y_segments) == len(rs)
            for r, xs, ys in zip(rs, x_segments, y_segments, strict=True):
                best = [a for a in r["attacks"].values() if a["recovery_top1"]["value"] == r["recovery_top1"]][0]
                lo, hi = best["recovery_top1"]["ci95"]
                assert [round(v, 6) for v in xs[:, 0]] == [round(100 * lo, 6), round(100 * hi, 6)]
                std = r["utility"]["accuracy_std"]
                assert ys[:, 1] == pytest.approx([r["utility"]["accuracy"] - std, r["utility"]["accuracy"] + std])
    finally:
        _close(figures)


def test_frontier_of_distinct_families_names_no_coincidence(attack_folder):
    for p in [*attack_folder.glob("mr__tem__*.json"), *attack_folder.glob("mr__truncated_laplace__*.json")]:
        p.unlink()
    figures, _, panels = _frontier(attack_folder)
    try:
        assert len(panels) == 7 and not any("same points" in ax.get_title() for ax in panels)
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
