"""The counting pass (docs/mechanisms/users.md §4): each user's privatized tokens, before anything is released.

A budget needs each user's token count before its first row is released (its per-token ε depends on all its
rows), and ``bound="rows"`` needs each user's rows to choose from. :meth:`Privatizer.fit_users
<hf_textdp.Privatizer.fit_users>` tokenizes and classifies every row (and runs the detectors, with
``sensitive``), releases nothing, and feeds each batch's counts to a :class:`UserCounter`; :meth:`UserCounter.finish`
turns them into the :class:`~hf_textdp.users.table.UserTable` that the release reads.

Memory: per user, a hash and three counts (32 bytes), reduced batch by batch; with ``bound="rows"``, also 40 bytes
a row, cut to each user's ``max_rows`` lowest priorities as batches come (all rows with a budget and no
``max_rows``); with ``consistent="user"``, 40 bytes a (user, string) occurrence, reduced to one per distinct pair
(without ``bound="rows"``, whose kept rows are known only at the end).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .allocation import TokenBounds, choose_levels, keep_prefix
from .entities import EntityRuns
from .spec import UserSpec
from .table import UserTable, pair_keys


__all__ = ["BatchCounts", "UserCounter", "distinct_sensitive"]

#: rows buffered before they are reduced (per user, or to each user's max_rows)
_COMPACT = 1 << 20


@dataclass(frozen=True)
class BatchCounts:
    """One batch's counts: each row's user hash, row id, privatized sensitive and other tokens, and its sensitive
    strings (``None`` without ``consistent``); ``priority`` with ``bound="rows"``."""

    users: np.ndarray  # [n] uint64
    row_ids: np.ndarray  # [n] int64
    n_s: np.ndarray  # [n] int64, every sensitive occurrence
    n_o: np.ndarray  # [n] int64
    entities: EntityRuns | None = None
    priority: np.ndarray | None = None  # [n] uint64


def distinct_sensitive(n_rows: int, runs: EntityRuns) -> np.ndarray:
    """Each row's sensitive tokens counting each distinct string of the row once (``consistent="row"``)."""
    out = np.zeros(n_rows, dtype=np.int64)
    seen: set[tuple[int, bytes]] = set()
    for r, d, t in zip(runs.row.tolist(), runs.digest, runs.tokens, strict=True):
        if (r, d) not in seen:
            seen.add((r, d))
            out[r] += int(t.size)
    return out


def _reduce(keys: np.ndarray, *values: np.ndarray, how: str = "sum") -> tuple[np.ndarray, ...]:
    """Group ``values`` by ``keys``: sums (``how="sum"``) or minima (``"min"``); keys come back sorted."""
    uniq, inv = np.unique(keys, return_inverse=True)
    out = []
    for v in values:
        acc = np.zeros(uniq.size, dtype=v.dtype) if how == "sum" else np.full(uniq.size, np.iinfo(v.dtype).max)
        (np.add if how == "sum" else np.minimum).at(acc, inv, v)
        out.append(acc)
    return (uniq, *out)


def _firsts(keys: np.ndarray) -> np.ndarray:
    """Whether each entry of sorted ``keys`` is the first of its key."""
    return np.concatenate([[True], keys[1:] != keys[:-1]]) if keys.size else np.zeros(0, dtype=bool)


@dataclass
class UserCounter:
    """Counts of the rows seen so far, reduced as they come (see the module's memory note)."""

    spec: UserSpec
    consistent: str | None = None
    _users: list[np.ndarray] = field(default_factory=list)  # per batch, reduced: user, rows, n_s, n_o
    _rows: list[np.ndarray] = field(default_factory=list)  # bound="rows": user, priority, row id, n_s, n_o
    _pairs: list[np.ndarray] = field(default_factory=list)  # consistent="user": pair, user, row id, priority, tokens
    _buffered: int = 0

    def add(self, batch: BatchCounts) -> None:
        """Add one batch's counts."""
        n = batch.users.size
        n_s = batch.n_s
        if self.consistent is not None:
            assert batch.entities is not None
            n_s = distinct_sensitive(n, batch.entities)
        if self.consistent == "user":
            assert batch.entities is not None
            self._add_pairs(batch, batch.entities)
            n_s_user = np.zeros(n, dtype=np.int64)  # counted per pair at the end
        else:
            n_s_user = n_s
        ones = np.ones(n, np.uint64)
        self._users.append(
            np.stack(_reduce(batch.users, ones, n_s_user.astype(np.uint64), batch.n_o.astype(np.uint64)))
        )
        if self.spec.bound == "rows":
            assert batch.priority is not None
            cols = (batch.users, batch.priority, batch.row_ids, n_s, batch.n_o)
            self._rows.append(np.stack([c.astype(np.uint64) for c in cols]))
        self._buffered += n
        if self._buffered > _COMPACT:
            self._compact()

    def _add_pairs(self, batch: BatchCounts, runs: EntityRuns) -> None:
        users = batch.users[runs.row]
        pairs = pair_keys(users, runs.digest)
        rows = batch.row_ids[runs.row]
        prio = batch.priority[runs.row] if batch.priority is not None else np.zeros(rows.size, np.uint64)
        ntok = np.asarray([t.size for t in runs.tokens], dtype=np.int64)
        self._pairs.append(
            np.stack([pairs, users, rows.astype(np.uint64), prio.astype(np.uint64), ntok.astype(np.uint64)])
        )

    def _compact(self) -> None:
        """Reduce the buffers: users to one entry each, rows to each user's ``max_rows`` lowest priorities, pairs to
        their first row (their first occurrence, when no row can be dropped)."""
        if self._users:
            u = np.concatenate(self._users, axis=1)
            self._users = [np.stack(_reduce(u[0], u[1], u[2], u[3]))]
        if self._rows and self.spec.max_rows is not None:
            r = np.concatenate(self._rows, axis=1)
            order = np.lexsort((r[1], r[0]))
            r = r[:, order]
            first = _firsts(r[0])
            rank = np.arange(r.shape[1]) - np.flatnonzero(first)[np.cumsum(first) - 1]
            self._rows = [r[:, rank < self.spec.max_rows]]
        if self._pairs and self.spec.bound != "rows":
            p = np.concatenate(self._pairs, axis=1)
            order = np.lexsort((p[2], p[0]))  # by pair, then row id: the first of each pair is its first row
            p = p[:, order]
            first = _firsts(p[0])
            self._pairs = [p[:, first]]
        self._buffered = 0

    def finish(self, bounds_at: TokenBounds) -> UserTable:
        """The table the release reads; ``bounds_at(j)`` gives the (sensitive, other) per-token bounds at level j."""
        self._compact()
        u = self._users[0] if self._users else np.zeros((4, 0), dtype=np.uint64)
        users, rows, n_s, n_o = u[0], u[1].astype(np.int64), u[2].astype(np.int64), u[3].astype(np.int64)
        threshold = None
        if self.spec.bound == "rows":  # the costs matter only against a budget
            threshold = self._thresholds(users, bounds_at(0) if self.spec.budget is not None else (0.0, 0.0))
        pairs = first_row = None
        if self.consistent == "user":
            pairs, first_row, n_s = self._charged_pairs(users, threshold)
        level = np.zeros(users.size, dtype=np.int16)
        if self.spec.bound == "scale" and self.spec.budget is not None:
            level = choose_levels(n_s, n_o, self.spec.budget, bounds_at)
        return UserTable(users=users, rows=rows, level=level, threshold=threshold, pairs=pairs, first_row=first_row)

    def _thresholds(self, users: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
        """``bound="rows"``: each user's kept-row threshold (the priority of its last kept row; 0: none kept)."""
        r = np.concatenate(self._rows, axis=1) if self._rows else np.zeros((5, 0), dtype=np.uint64)
        cost = r[3].astype(np.float64) * bounds[0] + r[4].astype(np.float64) * bounds[1]
        keep = keep_prefix(r[0], r[1], np.where(r[3] + r[4] > 0, cost, 0.0), self.spec.max_rows, self.spec.budget)
        threshold = np.zeros(users.size, dtype=np.uint64)
        idx = np.searchsorted(users, r[0][keep])
        np.maximum.at(threshold, idx, r[1][keep])
        return threshold

    def _charged_pairs(
        self, users: np.ndarray, threshold: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``consistent="user"``: each pair's charged row (its first kept row) and each user's sensitive tokens,
        each distinct string counted once."""
        p = np.concatenate(self._pairs, axis=1) if self._pairs else np.zeros((5, 0), dtype=np.uint64)
        if threshold is not None:  # only occurrences in kept rows count
            p = p[:, p[3] <= threshold[np.searchsorted(users, p[1])]]
        pairs, first_row = _reduce(p[0], p[2].astype(np.int64), how="min")
        _, owner, ntok = _reduce(p[0], p[1], p[4], how="min")  # one user and one length per pair
        n_s = np.zeros(users.size, dtype=np.int64)
        np.add.at(n_s, np.searchsorted(users, owner), ntok.astype(np.int64))
        return pairs, first_row, n_s
