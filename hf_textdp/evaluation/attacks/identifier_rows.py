"""The private rows of an identifier-recovery recipe: task sentences outside the public text, with identifiers.

An attack recipe's ``identifiers`` block (``rows``, ``seed``, optional ``kinds`` and ``per_row``) makes its
private set the identifier-bearing set of :mod:`hf_textdp.evaluation.identifiers` built here: of the private
task's sentences that do *not* occur in the public text (SST-5 holds most of MR's reviews), ``rows`` drawn
with ``seed``, each with one to three identifiers injected (``inject_identifiers``, same seed). The injected
spans and kinds go to :func:`~hf_textdp.evaluation.attacks.run.run_attack`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import InvalidParameterError
from ..identifiers import KINDS, identifier_lists, inject_identifiers
from .run import in_public


__all__ = ["IdentifierRows", "identifier_rows"]

_BLOCK_KEYS = {"rows", "seed", "kinds", "per_row"}


@dataclass(frozen=True)
class IdentifierRows:
    """The private texts with identifiers, their labels, the spans ``(row, start, end)`` and kinds, and the set's
    description for the record (no text)."""

    texts: list[str]
    labels: npt.NDArray[np.int64]
    spans: list[tuple[int, int, int]]
    kinds: list[str]
    info: dict[str, Any]


def identifier_rows(
    block: dict[str, Any], texts: Sequence[str], labels: npt.NDArray[np.int64], public: Sequence[str]
) -> IdentifierRows:
    """Draw ``block["rows"]`` of ``texts`` that are not in ``public`` (seed ``block["seed"]``) and inject identifiers.

    Raises:
        InvalidParameterError: an unknown key, a missing ``rows`` or ``seed``, or fewer usable rows than asked.
    """
    unknown = sorted(set(block) - _BLOCK_KEYS)
    missing = sorted({"rows", "seed"} - set(block))
    if unknown or missing:
        raise InvalidParameterError(
            f"attack recipe: identifiers takes {sorted(_BLOCK_KEYS)} (rows and seed required), got {sorted(block)}."
        )
    n, seed = int(block["rows"]), int(block["seed"])
    kinds = tuple(block.get("kinds") or KINDS)
    lo, hi = block.get("per_row") or (1, 3)
    outside = np.flatnonzero(~in_public(texts, public))
    if not 1 <= n <= outside.size:
        raise InvalidParameterError(
            f"attack recipe: identifiers.rows must be 1..{outside.size} (the private rows not in the public text), "
            f"got {n}."
        )
    chosen = np.sort(np.random.default_rng(seed).choice(outside, size=n, replace=False))
    lists = identifier_lists()
    rows = inject_identifiers(
        [texts[i] for i in chosen], seed=seed, kinds=kinds, per_row=(int(lo), int(hi)), lists=lists
    )
    spans = [(r, int(a), int(b)) for r, row in enumerate(rows) for a, b in row["spans"]]
    span_kinds = [k for row in rows for k in row["kinds"]]
    info = {
        "rows": n,
        "seed": seed,
        "kinds": list(kinds),
        "per_row": [int(lo), int(hi)],
        "n_identifiers": len(spans),
        "per_kind": {k: span_kinds.count(k) for k in kinds},
        "rows_outside_public": int(outside.size),
        "rows_in_public": int(len(texts) - outside.size),
        "lists_source": lists.source,
    }
    return IdentifierRows([row["text"] for row in rows], labels[chosen], spans, span_kinds, info)
