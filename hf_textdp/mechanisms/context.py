"""The row context of a batch's privatized tokens, for contextual mechanisms (dp_mlm.md §3).

A context-free mechanism sees each token's candidate position only. A contextual one (``CONTEXTUAL =
True``, e.g. :class:`~hf_textdp.mechanisms.dp_mlm.DpMlm`) also reads, for privatized token i, the
input ids of its row and its index in that row. :class:`RowContext` holds them for a whole batch
without copying the rows per token; :meth:`RowContext.select` follows the release engine's split of a
batch into piece classes and chunks, so that token i keeps its own row and index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch


if TYPE_CHECKING:
    from ..rng import Streams


__all__ = ["RowContext", "ContextualSampler"]


@dataclass(frozen=True)
class RowContext:
    """The rows of a batch and where each privatized token stands in them.

    Attributes:
        ids (`torch.Tensor` `[T]` int64): all rows' token ids concatenated (the tokenizer's template
            special tokens included), on CPU.
        starts (`torch.Tensor` `[R]` int64): where each row starts in ``ids``.
        lengths (`torch.Tensor` `[R]` int64): each row's number of ids.
        row (`torch.Tensor` `[N]` int64): privatized token i's row (an index into ``starts``).
        index (`torch.Tensor` `[N]` int64): its index within that row.
        token (`torch.Tensor` `[N]` int64): its index among the whole batch's privatized tokens (the batch's
            context before :meth:`select` / :meth:`slice`).
        memo (`dict`): shared by a batch's context and every part of it: what one forward computed for the
            whole batch (``"once"``: the encoder's outputs of every row, read by each piece class).

    Example:

    >>> ctx = RowContext.from_rows([[101, 7, 8, 102], [101, 9, 102]], [[1, 2], [1]])
    >>> ctx.row.tolist(), ctx.index.tolist()
    ([0, 0, 1], [1, 2, 1])
    >>> ctx.select(torch.tensor([2])).row_ids(0).tolist()
    [101, 9, 102]
    """

    ids: torch.Tensor
    starts: torch.Tensor
    lengths: torch.Tensor
    row: torch.Tensor
    index: torch.Tensor
    token: torch.Tensor
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_rows(cls, rows: list[list[int]], positions: list[list[int]]) -> RowContext:
        """A context from each row's ids and the indices of its privatized tokens (rows in order)."""
        lengths = torch.tensor([len(r) for r in rows], dtype=torch.int64)
        starts = torch.cumsum(lengths, 0) - lengths
        ids = torch.tensor([i for r in rows for i in r], dtype=torch.int64)
        row = torch.tensor([k for k, p in enumerate(positions) for _ in p], dtype=torch.int64)
        index = torch.tensor([j for p in positions for j in p], dtype=torch.int64)
        return cls(ids, starts, lengths, row, index, torch.arange(row.numel()), {"tokens": (row, index)})

    @classmethod
    def from_flat(cls, flat: np.ndarray, lengths: np.ndarray, at: np.ndarray, row: np.ndarray) -> RowContext:
        """A context from a batch held flat: all ids ``flat``, each row's length, and each privatized token's flat
        index ``at`` and row ``row`` (the privatizer's arrays)."""
        lengths_t = torch.from_numpy(np.ascontiguousarray(lengths, dtype=np.int64))
        starts = torch.cumsum(lengths_t, 0) - lengths_t
        row_t = torch.from_numpy(np.ascontiguousarray(row, dtype=np.int64))
        at_t = torch.from_numpy(np.ascontiguousarray(at, dtype=np.int64))
        ids = torch.from_numpy(np.ascontiguousarray(flat, dtype=np.int64))
        index = at_t - starts[row_t]
        return cls(ids, starts, lengths_t, row_t, index, torch.arange(row_t.numel()), {"tokens": (row_t, index)})

    def __len__(self) -> int:
        return int(self.row.numel())

    def select(self, index: torch.Tensor) -> RowContext:
        """The context of a subset of the tokens (``index``: positions into this batch's tokens)."""
        index = index.cpu()
        return RowContext(
            self.ids, self.starts, self.lengths, self.row[index], self.index[index], self.token[index], self.memo
        )

    def slice(self, start: int, stop: int) -> RowContext:
        """The context of tokens ``start … stop − 1``."""
        sl = slice(start, stop)
        return RowContext(self.ids, self.starts, self.lengths, self.row[sl], self.index[sl], self.token[sl], self.memo)

    def row_ids(self, token: int) -> torch.Tensor:
        """The ids of token ``token``'s row."""
        r = int(self.row[token])
        a = int(self.starts[r])
        return self.ids[a : a + int(self.lengths[r])]


class ContextualSampler(Protocol):
    """A mechanism with ``CONTEXTUAL = True``: its ``sample`` also takes each token's row (the engine's hook)."""

    def sample(
        self, space: Any, positions: torch.Tensor, streams: Streams, context: RowContext | None = None
    ) -> torch.Tensor:
        """Output positions ``[n]`` for the tokens that ``context`` places in their rows."""
        ...
