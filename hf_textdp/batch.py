"""A batch of texts as the release reads it (:meth:`hf_textdp.Privatizer.read_batch`): tokenized, classified and
marked, with the batch's tokens held flat (space.md §1, selective.md §4). The release and the per-person counting
pass (docs/mechanisms/users.md §4) read batches the same way, so they count exactly the tokens that are released.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


__all__ = ["TokenBatch"]


class TokenBatch(NamedTuple):
    """One batch: the flat token ids, each row's length, the rows' words, each position's class and position in
    the candidate space, its row, the candidate mask, each row's candidate count, and the sensitive marks."""

    flat: np.ndarray  # [T] int64 token ids, the rows one after another
    lengths: np.ndarray  # [n] tokens per row
    rows: Any  # the words: a WordLayout (HFTokens) or a list of TokenizedRow (WordTokens)
    cls: np.ndarray  # [T] each position's class (space.py: STRUCTURAL, PASSTHROUGH, CANDIDATE)
    pos: np.ndarray  # [T] each position's index in the candidate set
    row_of: np.ndarray  # [T] each position's row
    cand: np.ndarray  # [T] bool, the candidate positions
    sizes: np.ndarray  # [n] candidate positions per row
    marked: np.ndarray | None  # [T] bool, the sensitive positions (None without ``sensitive``)
