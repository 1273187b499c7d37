"""Accuracy: the fraction of predictions equal to their references (a local ``evaluate`` module).

Loaded by path so it works offline: ``evaluate.load("hf_textdp/evaluation/metrics/accuracy")``.
"""

from __future__ import annotations

from typing import Any

import datasets
import evaluate
import numpy as np


_DESCRIPTION = """
Accuracy is the proportion of correct predictions among all predictions:
Accuracy = (TP + TN) / (TP + TN + FP + FN). hf-textdp reports it in percent in its result files.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `int`): predicted labels.
    references (`list` of `int`): ground-truth labels.
    normalize (`bool`, defaults to `True`): if `False`, return the number of correct predictions.
    sample_weight (`list` of `float`, *optional*): sample weights.

Returns:
    accuracy (`float` or `int`): a fraction in [0, 1], or a count when `normalize=False`.

Examples:

    >>> import evaluate, os
    >>> acc = evaluate.load(os.path.dirname(__file__))  # doctest: +SKIP
    >>> acc.compute(references=[0, 1, 2, 0], predictions=[0, 1, 1, 0])  # doctest: +SKIP
    {'accuracy': 0.75}
"""

_CITATION = """
@article{scikit-learn,
  title={Scikit-learn: Machine Learning in {P}ython},
  author={Pedregosa, F. and Varoquaux, G. and Gramfort, A. and others},
  journal={Journal of Machine Learning Research},
  volume={12},
  pages={2825--2830},
  year={2011}
}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Accuracy(evaluate.Metric):  # type: ignore[misc]
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}
            ),
            reference_urls=["https://scikit-learn.org/stable/modules/generated/sklearn.metrics.accuracy_score.html"],
        )

    def _compute(
        self,
        predictions: list[int],
        references: list[int],
        normalize: bool = True,
        sample_weight: list[float] | None = None,
    ) -> dict[str, Any]:
        pred = np.asarray(predictions)
        ref = np.asarray(references)
        correct = (pred == ref).astype(np.float64)
        if sample_weight is not None:
            correct = correct * np.asarray(sample_weight, dtype=np.float64)
            total = float(np.sum(sample_weight))
        else:
            total = float(correct.size)
        if not normalize:
            return {"accuracy": float(correct.sum())}
        return {"accuracy": float(correct.sum() / total) if total else 0.0}
