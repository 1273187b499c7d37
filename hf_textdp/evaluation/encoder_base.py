"""The interface every SentEval encoder implements (:mod:`.encoders`, :mod:`.static_encoder`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse

from ..space import DEFAULT_MODEL


__all__ = ["Encoder", "mean_of_rows"]


class Encoder:
    """Maps texts to a float32 feature matrix ``[n, d]``."""

    name: str = ""

    def __init__(self, model: str = DEFAULT_MODEL) -> None:
        self.model = model

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model}


def mean_of_rows(
    E: npt.NDArray[np.float32], rows: Sequence[Sequence[int] | npt.NDArray[np.int64]]
) -> npt.NDArray[np.float32]:
    """``[len(rows), d]``: for each text, the mean of the rows of ``E`` it lists (the zero vector for none).

    One sparse (texts × V) count matrix times E, so repeated ids weigh as often as they occur.
    """
    r = np.repeat(np.arange(len(rows), dtype=np.int64), [len(ids) for ids in rows])
    c = np.concatenate([np.asarray(ids, dtype=np.int64) for ids in rows]) if rows else np.zeros(0, dtype=np.int64)
    counts = sparse.csr_matrix((np.ones(r.size, dtype=np.float32), (r, c)), shape=(len(rows), E.shape[0]))
    lengths = np.asarray(counts.sum(axis=1)).ravel()
    feats = np.asarray(counts @ E, dtype=np.float32)
    nonzero = lengths > 0
    feats[nonzero] /= lengths[nonzero, None]
    return feats
