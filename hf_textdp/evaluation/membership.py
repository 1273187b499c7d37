"""Loss-threshold membership inference (Yeom et al., CSF 2018, §3.2: the attacker guesses "member" when the
model's loss on a row is below a threshold), scored over every threshold: ROC AUC and the true-positive
rate at a fixed false-positive rate (Carlini et al., S&P 2022, §III-B: TPR at low FPR), each with a
percentile bootstrap interval that resamples members and non-members separately (rows are the units).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.metrics import roc_auc_score, roc_curve


__all__ = ["loss_threshold_attack", "tpr_at_fpr"]

FloatArray = npt.NDArray[np.float64]


def tpr_at_fpr(labels: npt.NDArray[np.int64], scores: FloatArray, fpr: float) -> float:
    """The highest true-positive rate of any threshold whose false-positive rate is at most ``fpr``."""
    f, t, _ = roc_curve(labels, scores)
    return float(t[f <= fpr + 1e-12].max())


def _figures(member: FloatArray, nonmember: FloatArray, fpr: float) -> tuple[float, float]:
    labels = np.r_[np.ones(member.size, np.int64), np.zeros(nonmember.size, np.int64)]
    scores = -np.r_[member, nonmember]  # a lower loss is more "member"
    return float(roc_auc_score(labels, scores)), tpr_at_fpr(labels, scores, fpr)


def loss_threshold_attack(
    member_losses: npt.ArrayLike,
    nonmember_losses: npt.ArrayLike,
    *,
    fpr: float = 0.01,
    resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Any]:
    """AUC and TPR at ``fpr`` of the loss-threshold attack, with percentile bootstrap intervals.

    Args:
        member_losses: per-row losses of rows the model was trained on.
        nonmember_losses: per-row losses of held-out rows of the same distribution.
        fpr: the false-positive rate of the reported TPR.
        resamples: bootstrap resamples (members and non-members each drawn with replacement).
        seed: the resampling seed.
        level: the interval's confidence level.

    Returns:
        ``{"auc", "auc_ci", "tpr_at_fpr", "tpr_ci", "fpr", "members", "nonmembers", "resamples", "seed"}``.
    """
    m = np.asarray(member_losses, dtype=np.float64)
    n = np.asarray(nonmember_losses, dtype=np.float64)
    if m.size == 0 or n.size == 0 or not (np.isfinite(m).all() and np.isfinite(n).all()):
        raise ValueError(f"need finite losses of both groups (members {m.size}, non-members {n.size})")
    auc, tpr = _figures(m, n, fpr)
    rng = np.random.default_rng(seed)
    boot = np.array([_figures(rng.choice(m, m.size), rng.choice(n, n.size), fpr) for _ in range(resamples)]).reshape(
        -1, 2
    )
    tail = 100 * (1 - level) / 2
    lo, hi = (np.percentile(boot, [tail, 100 - tail], axis=0) if resamples else np.array([[auc, tpr]] * 2)).tolist()
    return {
        "auc": auc,
        "auc_ci": [lo[0], hi[0]],
        "tpr_at_fpr": tpr,
        "tpr_ci": [lo[1], hi[1]],
        "fpr": fpr,
        "members": int(m.size),
        "nonmembers": int(n.size),
        "resamples": resamples,
        "seed": seed,
    }
