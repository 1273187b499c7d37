"""Privacy diagnostics of a token-level text privatization (a local ``evaluate`` module).

Compares the privatized token ids (``predictions``) with the original ids (``references``), one to
one over the privatized positions, and reports the replacement rate and Feyisetan et al.'s N_w / S_w
statistics. Loaded by path: ``evaluate.load("hf_textdp/evaluation/metrics/privacy_diagnostics")``.
"""

from __future__ import annotations

from typing import Any

import datasets
import evaluate
import numpy as np


_DESCRIPTION = """
Diagnostics of what a token-level privatizer did, from the privatized positions only (special and
pass-through tokens excluded):

- replacement_rate: fraction of privatized positions whose token id changed.
- n_w_mean: mean over input token types (seen at least `min_count` times) of N_w, the fraction of the
  type's occurrences left unchanged (Feyisetan et al. 2020, "Privacy- and Utility-Preserving Textual
  Analysis via Calibrated Multivariate Perturbations", WSDM; arXiv 1910.08902).
- s_w_mean: mean over those types of S_w, the number of distinct outputs the type produced.
- s_w_per_occurrence_mean: mean of S_w divided by the type's occurrences (1 = every occurrence gave a
  different output), which compares runs of different sizes.
- epsilon_median_rho1: ε·median ρ₁ when `epsilon` and `median_rho1` are given (the dimensionless scale
  that decides the replacement rate; madlib.md §4).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `int`): privatized token ids, one per privatized position.
    references (`list` of `int`): the original token ids at the same positions.
    min_count (`int`, defaults to `5`): types seen fewer times are left out of the N_w / S_w means.
    epsilon (`float`, *optional*), median_rho1 (`float`, *optional*): for epsilon_median_rho1.

Returns:
    replacement_rate (`float`), n_tokens (`int`), n_w_mean (`float`), s_w_mean (`float`),
    s_w_per_occurrence_mean (`float`), n_types (`int`), epsilon_median_rho1 (`float` or `None`).

Examples:

    >>> import evaluate, os
    >>> diag = evaluate.load(os.path.dirname(__file__))  # doctest: +SKIP
    >>> r = diag.compute(references=[5, 5, 5, 7], predictions=[5, 9, 8, 7], min_count=1)  # doctest: +SKIP
    >>> r["replacement_rate"], r["s_w_mean"]  # doctest: +SKIP
    (0.5, 2.0)
"""

_CITATION = """
@inproceedings{feyisetan2020privacy,
  title={Privacy- and Utility-Preserving Textual Analysis via Calibrated Multivariate Perturbations},
  author={Feyisetan, Oluwaseyi and Balle, Borja and Drake, Thomas and Diethe, Tom},
  booktitle={Proceedings of the 13th International Conference on Web Search and Data Mining (WSDM)},
  year={2020}
}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class PrivacyDiagnostics(evaluate.Metric):  # type: ignore[misc]
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}
            ),
            reference_urls=["https://arxiv.org/abs/1910.08902"],
        )

    def _compute(
        self,
        predictions: list[int],
        references: list[int],
        min_count: int = 5,
        epsilon: float | None = None,
        median_rho1: float | None = None,
    ) -> dict[str, Any]:
        out = np.asarray(predictions, dtype=np.int64)
        ref = np.asarray(references, dtype=np.int64)
        n = int(ref.size)
        result: dict[str, Any] = {
            "n_tokens": n,
            "replacement_rate": float(np.mean(out != ref)) if n else 0.0,
            "epsilon_median_rho1": (
                float(epsilon * median_rho1) if epsilon is not None and median_rho1 is not None else None
            ),
        }
        if n == 0:
            result.update(n_w_mean=None, s_w_mean=None, s_w_per_occurrence_mean=None, n_types=0)
            return result
        order = np.lexsort((out, ref))
        ref_s, out_s = ref[order], out[order]
        types, starts, counts = np.unique(ref_s, return_index=True, return_counts=True)
        kept = np.add.reduceat((out_s == ref_s).astype(np.int64), starts)
        new_pair = np.ones(n, dtype=bool)
        new_pair[1:] = (ref_s[1:] != ref_s[:-1]) | (out_s[1:] != out_s[:-1])
        distinct = np.add.reduceat(new_pair.astype(np.int64), starts)
        sel = counts >= int(min_count)
        result["n_types"] = int(sel.sum())
        if sel.any():
            result["n_w_mean"] = float(np.mean(kept[sel] / counts[sel]))
            result["s_w_mean"] = float(np.mean(distinct[sel]))
            result["s_w_per_occurrence_mean"] = float(np.mean(distinct[sel] / counts[sel]))
        else:
            result.update(n_w_mean=None, s_w_mean=None, s_w_per_occurrence_mean=None)
        return result
