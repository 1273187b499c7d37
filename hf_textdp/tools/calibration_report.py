"""What ``hf-textdp calibrate`` shows of a :class:`~hf_textdp.tools.calibrate.CalibrationResult`: a readable
summary with the table of rates, and the replacement rate against ε drawn with matplotlib."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import MissingExtraError
from ..mechanisms import get_mechanism_class
from ..utils.table import format_table


if TYPE_CHECKING:
    from .calibrate import CalibrationResult


__all__ = ["format_calibration", "plot_calibration"]


def format_calibration(result: CalibrationResult) -> str:
    """A readable summary of a :class:`CalibrationResult` (``hf-textdp calibrate`` prints it)."""
    defaults = get_mechanism_class(result.mechanism).OPTIONS
    opts = ", ".join(f"{k}={v}" for k, v in sorted(result.options.items()) if defaults.get(k, object()) != v)
    lines = [
        f"Calibration of {result.mechanism}{f' ({opts})' if opts else ''} + {result.postprocess} on the public "
        "embedding matrix "
        f"(V = {result.V}, d = {result.d}; no private data used)",
        f"  scale: median nearest-neighbour distance {result.median_rho1:.4g}, diameter {result.diam:.4g}",
        f"  estimator: {result.estimator}, {result.n} public draws (seed {result.calibration_seed}), "
        f"weighting {result.weighting}",
    ]
    if result.target_rate is not None and result.epsilon is not None:
        err = f" ± {result.epsilon_stderr:.2g}" if result.epsilon_stderr is not None else ""
        lines.append(f"  epsilon for a {result.target_rate:.0%} replacement rate: {result.epsilon:.4g}{err} per token")
    rows = [(f"{e:.4g}", f"{r:.1%}", f"{1 - r:.1%}", f"(± {se:.1%})") for e, (r, se) in sorted(result.rates.items())]
    lines += format_table(("epsilon", "replaced", "kept", "(± stderr)"), rows, right=(1, 2), indent="  ")
    lines.append(
        "  Rates are uniform over the candidate vocabulary unless frequencies are given; on real text they differ "
        "(frequent tokens weigh more). (raw result: --json)"
    )
    return "\n".join(lines) + "\n"


def plot_calibration(result: CalibrationResult, path: str | os.PathLike[str]) -> None:
    """Draw the replacement rate against ε (matplotlib, from the ``eval`` extra) into ``path``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise MissingExtraError("--plot needs matplotlib: pip install 'hf-textdp[eval]'.") from err
    items = sorted(result.rates.items())
    eps = [e for e, _ in items]
    rate = [r for _, (r, _s) in items]
    stderr = [s for _, (_r, s) in items]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.errorbar(eps, rate, yerr=stderr, marker="o", capsize=3)
    if result.target_rate is not None and result.epsilon is not None:
        ax.axhline(result.target_rate, color="grey", linestyle=":")
        ax.axvline(result.epsilon, color="grey", linestyle=":")
    ax.set_xlabel("epsilon (per token)")
    ax.set_ylabel("replacement rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{result.mechanism} + {result.postprocess} (V = {result.V}, d = {result.d})")
    fig.tight_layout()
    fig.savefig(os.fspath(path))
    plt.close(fig)
