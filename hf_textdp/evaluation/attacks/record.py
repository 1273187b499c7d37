"""An attack record's scores: per group of tokens and of words, the headline attack per group, whole spans."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .corpus import ReleasedCorpus
from .scoring import score_groups, span_recovery, token_groups, word_hits
from .settings import AttackSettings


__all__ = ["Hits", "span_scores", "grouped", "headline"]

Hits = tuple[npt.NDArray[np.bool_], "npt.NDArray[np.bool_] | None"]


def span_scores(
    private: ReleasedCorpus,
    hits: dict[str, Hits],
    spans: Sequence[tuple[int, int, int]],
    kinds: Sequence[str] | None,
    shared: npt.NDArray[np.bool_],
    new_row: npt.NDArray[np.int64],
    settings: AttackSettings,
) -> dict[str, Any]:
    """Whole-span recovery (scoring.span_recovery) of the spans in rows kept, overall and per kind."""
    keep = [i for i, (r, _, _) in enumerate(spans) if not shared[r]]
    kept = [(int(new_row[spans[i][0]]), spans[i][1], spans[i][2]) for i in keep]
    seed = settings.attacker_seed + 77
    out: dict[str, Any] = {
        "n_given": len(spans),
        "n_in_public_rows": len(spans) - len(kept),
        "attacks": span_recovery(private, hits, kept, settings.bootstrap, seed),
    }
    if kinds is not None:
        out["by_kind"] = {
            kind: span_recovery(
                private,
                hits,
                [s for s, i in zip(kept, keep, strict=True) if kinds[i] == kind],
                settings.bootstrap,
                seed,
            )
            for kind in dict.fromkeys(kinds[i] for i in keep)
        }
    return out


def grouped(
    c: ReleasedCorpus, hits: dict[str, Hits], frequent: npt.NDArray[np.bool_], resamples: int, seed: int
) -> dict[str, dict[str, dict[str, Any]]]:
    """Every attack's recovery per token group and per whole-word group (scoring.py)."""
    out = score_groups(hits, c.row_of, c.n_rows, token_groups(c, frequent), resamples, seed)
    w_hits, w_rows, w_groups = word_hits(c, hits)
    for name, per in score_groups(w_hits, w_rows, c.n_rows, w_groups, resamples, seed + 7).items():
        out[name].update(per)
    return out


def headline(top1: dict[str, dict[str, float]]) -> dict[str, str]:
    """Per group, the attack with the best top-1 in ``top1`` (held-out values); ties go to the earlier attack."""
    groups = next(iter(top1.values())).keys()
    out = {}
    for g in groups:
        vals = {a: v[g] for a, v in top1.items() if v.get(g) is not None and not np.isnan(v[g])}
        out[g] = max(vals, key=lambda a: vals[a]) if vals else "identity"
    return out
