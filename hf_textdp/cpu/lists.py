"""The exact search filters' running candidate lists on the Python side (``kernels/kernel_common.h``, ``Lists``):
the arrays a kernel keeps them in, its arguments, and the candidates read back (:func:`list_candidates`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch


__all__ = ["RunningLists", "padded_exclude"]


@dataclasses.dataclass
class RunningLists:
    """Each query's candidate list, kept by a filter kernel while the scores are in registers: ``beta`` the query's
    margin, ``top`` its k largest block maxima so far, ``lim`` the threshold 2β below the k-th of them, ``cnt`` how
    many positions (−1: more than ``cap``, dropped), ``pos`` and ``score`` them (in position order)."""

    beta: torch.Tensor
    top: torch.Tensor
    lim: torch.Tensor
    cnt: torch.Tensor
    pos: torch.Tensor
    score: torch.Tensor

    @classmethod
    def empty(cls, bound: torch.Tensor, rows: int, k: int, cap: int) -> RunningLists:
        """Room for the lists of ``rows`` queries (tile padding included) with margins ``bound``, ``cap`` positions
        each (the kernel empties them)."""
        beta = torch.zeros(rows, dtype=torch.float64)
        beta[: bound.numel()] = bound
        return cls(
            beta=beta,
            top=torch.empty((rows, k), dtype=torch.float32),
            lim=torch.empty(rows, dtype=torch.float32),
            cnt=torch.empty(rows, dtype=torch.int32),
            pos=torch.empty((rows, cap), dtype=torch.int32),
            score=torch.empty((rows, cap), dtype=torch.float32),
        )

    def args(self) -> list[Any]:
        """The kernel's arguments beta … score."""
        k, cap = self.top.shape[1], self.pos.shape[1]
        t = (self.top, self.lim, self.cnt, self.pos, self.score)
        return [self.beta.data_ptr(), k, cap, *(x.data_ptr() for x in t)]

    def candidates(self, lib: Any, B: int, refine: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(query rows, positions) of the first ``B`` queries: their listed positions that reach the final threshold,
        then, for k ≤ ``refine``, the second cut at the k-th largest listed score (``lib.list_candidates``); and the
        queries whose list was dropped (the caller filters them another way)."""
        cap = self.pos.shape[1]
        rows, pos = torch.empty(B * cap, dtype=torch.int64), torch.empty(B * cap, dtype=torch.int64)
        n = lib.list_candidates(
            B, self.top.shape[1], cap, refine, self.top.data_ptr(), self.beta.data_ptr(), self.cnt.data_ptr(),
            self.pos.data_ptr(), self.score.data_ptr(), rows.data_ptr(), pos.data_ptr(),
        )  # fmt: skip
        return rows[:n], pos[:n], torch.nonzero(self.cnt[:B] < 0).squeeze(1)


def padded_exclude(exclude: torch.Tensor | None, rows: int) -> torch.Tensor | None:
    """``exclude`` (a position per query, −1: none) as int64 over ``rows`` queries (tile padding: −1), or ``None``."""
    if exclude is None:
        return None
    ex = torch.full((rows,), -1, dtype=torch.int64)
    ex[: exclude.numel()] = exclude
    return ex
