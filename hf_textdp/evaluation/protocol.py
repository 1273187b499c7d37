"""The SentEval classifier protocol: logistic regression on frozen features, penalty chosen by CV.

Both private settings share one training run: the classifier is trained (and its penalty chosen) on
privatized training features, then scored on clean test features (``train_only``) and on privatized
test features (``train_and_test``). The clean baseline trains and tests on clean features.

Folds follow SentEval: ``StratifiedKFold(k, shuffle=True, random_state=seed)`` (seed 1111). SentEval
draws its folds over rows sorted by (length, label); we draw them over the source order, so fold
membership differs from SentEval's while the protocol is the same.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from .tasks import Protocol


__all__ = ["ClassifierConfig", "ProtocolResult", "stratified_folds", "select_c", "run_protocol"]

Features = npt.NDArray[np.float32]
Labels = npt.NDArray[np.int64]


@dataclass(frozen=True, kw_only=True)
class ClassifierConfig:
    """Logistic-regression settings.

    Attributes:
        kfold (`int`, defaults to `10`): outer folds for ``cv`` tasks, folds of the penalty search for
            ``split_cv`` tasks (SentEval's recommended k = 10).
        inner_kfold (`int`, defaults to `10`): inner folds choosing the penalty within each outer
            training part (``cv`` tasks).
        c_grid (`tuple[float, ...]`): inverse L2 penalties tried (SentEval's scikit-learn grid is
            2^-2 … 2^3 for the CV tasks).
        max_iter (`int`, defaults to `1000`), seed (`int`, defaults to `1111`).
    """

    kfold: int = 10
    inner_kfold: int = 10
    c_grid: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
    max_iter: int = 1000
    seed: int = 1111

    def to_dict(self) -> dict[str, Any]:
        return {
            "kfold": self.kfold,
            "inner_kfold": self.inner_kfold,
            "c_grid": list(self.c_grid),
            "max_iter": self.max_iter,
            "seed": self.seed,
            "model": "sklearn.linear_model.LogisticRegression (lbfgs) after StandardScaler",
            "penalty_search": "one warm-started regularisation path per inner fold, C ascending",
        }


@dataclass
class ProtocolResult:
    """Accuracies (fractions) per fold (``cv``) or the single test score (split tasks), per test view."""

    values: dict[str, list[float]] = field(default_factory=dict)  # test view -> per-fold accuracies
    chosen_c: list[float] = field(default_factory=list)
    n_test: int = 0


def stratified_folds(labels: Labels, k: int, seed: int) -> list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]:
    """(train, test) row numbers of SentEval's outer folds: ``StratifiedKFold(k, shuffle=True, seed)``.

    Example:

    >>> import numpy as np
    >>> folds = stratified_folds(np.array([0, 1] * 10), 5, 1111)
    >>> len(folds), sorted(np.concatenate([te for _, te in folds]).tolist()) == list(range(20))
    (5, True)
    """
    from sklearn.model_selection import StratifiedKFold

    k = max(2, min(k, int(np.bincount(labels).max())))
    skf = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    return [(tr.astype(np.int64), te.astype(np.int64)) for tr, te in skf.split(np.zeros(labels.size), labels)]


def _fit(X: Features, y: Labels, c: float, max_iter: int) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=max_iter))
    model.fit(X, y)
    return model


def _score(model: Any, X: Features, y: Labels) -> float:
    return float(np.mean(model.predict(X) == y))


def _min_class(y: Labels) -> int:
    counts = np.bincount(y)
    return int(counts[counts > 0].min())


def select_c(X: Features, y: Labels, config: ClassifierConfig, k: int) -> float:
    """The penalty with the best mean accuracy over a stratified k-fold of (X, y); ties: the first in the grid."""
    from sklearn.exceptions import ConvergenceWarning

    if len(config.c_grid) == 1:
        return float(config.c_grid[0])
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    k = max(2, min(k, _min_class(y)))
    folds = stratified_folds(y, k, config.seed)
    # One regularisation path per fold: the same estimator (scaler fitted on the fold's training part,
    # then lbfgs), C visited in increasing order, each fit started from the previous solution. The
    # optimum of each fit is the same as from a cold start (a strictly convex problem); the path
    # needs 2-4x fewer lbfgs iterations.
    order = sorted(range(len(config.c_grid)), key=lambda i: config.c_grid[i])
    acc = np.zeros((len(config.c_grid), len(folds)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for f, (tr, te) in enumerate(folds):
            scaler = StandardScaler().fit(X[tr])
            Z_tr, Z_te = scaler.transform(X[tr]), scaler.transform(X[te])
            model = LogisticRegression(max_iter=config.max_iter, warm_start=True)
            for i in order:
                model.set_params(C=config.c_grid[i])
                model.fit(Z_tr, y[tr])
                acc[i, f] = float(np.mean(model.predict(Z_te) == y[te]))
    best_c, best = float(config.c_grid[0]), -1.0
    for i, c in enumerate(config.c_grid):  # ties: the first in the grid
        mean = float(acc[i].mean())
        if mean > best + 1e-12:
            best_c, best = float(c), mean
    return best_c


def run_protocol(
    protocol: Protocol,
    train: Features,
    labels: dict[str, Labels],
    tests: dict[str, dict[str, Features]],
    config: ClassifierConfig,
    *,
    dev: Features | None = None,
) -> ProtocolResult:
    """Score a classifier trained on ``train`` against each test view.

    Args:
        protocol (`str`): ``cv``, ``split_dev`` or ``split_cv`` (see :mod:`.tasks`).
        train (`np.ndarray`): training features (``all`` rows for ``cv``, the train split otherwise).
        labels (`dict`): labels by split (``all`` for ``cv``; ``train``, ``test`` and ``dev`` otherwise).
        tests (`dict`): view name → split name → features. For ``cv`` the split is ``all`` and row
            numbers are shared with ``train``; otherwise ``test``.
        dev (`np.ndarray`, *optional*): dev features for ``split_dev`` (same view as ``train``).
    """
    from sklearn.exceptions import ConvergenceWarning
    from threadpoolctl import threadpool_limits

    result = ProtocolResult(values={view: [] for view in tests})
    # One BLAS thread: many small fits on a shared machine run ~40x slower with spinning BLAS threads.
    with warnings.catch_warnings(), threadpool_limits(limits=1):
        warnings.simplefilter("ignore", ConvergenceWarning)
        if protocol == "cv":
            y = labels["all"]
            for tr, te in stratified_folds(y, config.kfold, config.seed):
                c = select_c(train[tr], y[tr], config, config.inner_kfold)
                model = _fit(train[tr], y[tr], c, config.max_iter)
                result.chosen_c.append(c)
                for view, feats in tests.items():
                    result.values[view].append(_score(model, feats["all"][te], y[te]))
            result.n_test = int(y.size)
            return result
        y_tr, y_te = labels["train"], labels["test"]
        if protocol == "split_dev":
            if dev is None:
                raise ValueError("split_dev needs dev features")
            y_dev = labels["dev"]
            scores = [
                (_score(_fit(train, y_tr, c, config.max_iter), dev, y_dev), -i, c) for i, c in enumerate(config.c_grid)
            ]
            c = float(max(scores)[2])
        else:
            c = select_c(train, y_tr, config, config.kfold)
        model = _fit(train, y_tr, c, config.max_iter)
        result.chosen_c.append(c)
        for view, feats in tests.items():
            result.values[view].append(_score(model, feats["test"], y_te))
        result.n_test = int(y_te.size)
        return result


def summarize(values: Sequence[float], n_test: int, per_fold: bool) -> tuple[float, float, str]:
    """(mean %, std %, kind of std): the std over folds, or the binomial standard error of one score."""
    arr = np.asarray(values, dtype=np.float64) * 100.0
    mean = float(arr.mean())
    if per_fold and arr.size > 1:
        return mean, float(arr.std(ddof=1)), "std_over_folds"
    p = mean / 100.0
    return mean, float(100.0 * np.sqrt(max(p * (1 - p), 0.0) / max(n_test, 1))), "binomial_standard_error"
