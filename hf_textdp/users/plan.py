"""One batch under per-person accounting (docs/mechanisms/users.md §3–§5): which rows are kept, each row's level,
the consistent pseudonyms, the release by level, and each row's ``dp_epsilon``.

:class:`UserRelease` is what a :class:`~hf_textdp.Privatizer` holds for its ``user`` and ``consistent`` settings;
it reads the counting pass's :class:`~hf_textdp.users.table.UserTable` and releases through the engines of
:class:`~hf_textdp.users.levels.LevelEngines` (duck-typed: this layer sits below the release engine).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..accounting import Totals, selective_rows
from ..errors import InvalidParameterError
from ..mechanisms.context import RowContext
from .counting import BatchCounts
from .entities import EntityRuns, find_entities
from .fit import others_kept, per_person, spec_consistent
from .keys import entity_keys, row_priorities, user_keys
from .levels import LevelEngines
from .report import UserTotals
from .spec import UserSpec
from .table import UserTable, pair_keys


__all__ = ["UserBatch", "UserRelease", "blank_dropped"]


@dataclass
class UserBatch:
    """A batch's rows under per-person accounting: user hashes, kept rows, levels (and, after the release, each
    row's charged sensitive tokens under ``consistent``)."""

    users: np.ndarray  # [n] uint64 (zeros without a user setting: consistent="row" alone)
    row_ids: list[int]
    keep: np.ndarray  # [n] bool
    level: np.ndarray  # [n] int64
    charged_s: np.ndarray | None = None  # [n] int64: sensitive tokens charged (consistent)


class UserRelease:
    """The per-person side of one privatizer (its ``user`` and ``sensitive["consistent"]`` settings).

    Args:
        spec (`UserSpec`, *optional*): the ``user`` setting (``None``: ``consistent="row"`` alone).
        consistent (`str`, *optional*): ``"row"``, ``"user"`` or ``None``.
        secret (`int`): the key of row priorities and pseudonyms: the seed, or a secret drawn per privatizer.
        engine: the privatizer's release engine (level 0).
    """

    def __init__(self, spec: UserSpec | None, consistent: str | None, secret: int, engine: Any) -> None:
        self.spec = spec
        self.consistent = consistent
        self.secret = secret
        self.levels = LevelEngines(engine)
        self.table: UserTable | None = None
        self.totals = UserTotals()  # per-user sums of this process's rows (users.md §6)

    @classmethod
    def of(cls, config: Any, seed: int | None, secret: int | None, engine: Any) -> UserRelease | None:
        """The per-person side of a privatizer of ``config`` (``None`` without ``user`` or ``consistent``), keyed by
        its seed, or without one by ``secret`` (:func:`~hf_textdp.users.fit.user_secret`)."""
        if not per_person(config):
            return None
        key = seed if seed is not None else secret
        assert key is not None
        return cls(config.user, spec_consistent(config), key, engine)

    def state(self, secret: int | None) -> dict[str, Any]:
        """The pickled part of a privatizer (users.md §4): an unseeded run's ``secret`` and the counts."""
        return {"user_secret": secret, "user_table": None if self.table is None else self.table.to_state()}

    def restore(self, state: dict[str, Any]) -> None:
        """The counts of a pickled :meth:`state`."""
        if state.get("user_table") is not None:
            self.table = UserTable.from_state(state["user_table"])

    @property
    def needs_counts(self) -> bool:
        return self.consistent == "user" or (self.spec is not None and self.spec.needs_counts)

    # ---------------------------------------------------------------- phase 1: rows and levels
    def batch(self, values: Sequence[Any] | None, row_ids: Sequence[int], *, counting: bool = False) -> UserBatch:
        """The plan of a batch's rows from their users (``values``, the user column) and row ids (``counting``: for
        the counting pass, which keeps every row at level 0).

        Raises:
            InvalidParameterError: the release needs the counting pass and it has not run.
        """
        n = len(row_ids)
        ids = [int(r) for r in row_ids]
        if self.spec is None:
            return UserBatch(np.zeros(n, np.uint64), ids, np.ones(n, bool), np.zeros(n, np.int64))
        if values is None:
            raise InvalidParameterError(
                f"users: user['column'] = {self.spec.column!r} needs each text's user: privatize(texts, users=[...]) "
                "(one per text), or a batch with that column."
            )
        users = user_keys(values, self.spec.column, ids)
        if counting or not self.needs_counts:
            return UserBatch(users, ids, np.ones(n, bool), np.zeros(n, np.int64))
        if self.table is None:
            raise InvalidParameterError(self._fit_message())
        idx = self.table.index(users, ids)
        keep = np.ones(n, dtype=bool)
        if self.table.threshold is not None:
            keep = row_priorities(self.secret, self.levels.base.split, ids) <= self.table.threshold[idx]
        return UserBatch(users, ids, keep, self.table.level[idx].astype(np.int64))

    def _fit_message(self) -> str:
        assert self.spec is not None
        what = (
            f"user['budget'] = {self.spec.budget!r}"
            if self.spec.budget is not None
            else "user['bound'] = 'rows'"
            if self.spec.bound == "rows"
            else "sensitive['consistent'] = 'user'"
        )
        return (
            f"{what} needs each user's counts before any row is released (a first counting pass): call "
            "priv.fit_users(dataset) on the whole split before dataset.map(priv, ...), or use privatize_dataset "
            "(or the CLI), which counts first."
        )

    def counts(self, batch: UserBatch, n_s: np.ndarray, n_o: np.ndarray, runs: EntityRuns | None) -> BatchCounts:
        """A batch's counts for the counting pass."""
        prio = None
        if self.spec is not None and self.spec.bound == "rows":
            prio = row_priorities(self.secret, self.levels.base.split, batch.row_ids)
        return BatchCounts(batch.users, np.asarray(batch.row_ids, np.int64), n_s, n_o, runs, prio)

    def entities(
        self, flat: np.ndarray, lengths: np.ndarray, marked: np.ndarray | None, cand: np.ndarray
    ) -> EntityRuns | None:
        """The batch's sensitive strings (``None`` without ``consistent``)."""
        if self.consistent is None or marked is None:
            return None
        return find_entities(flat, lengths, marked, cand)

    # ---------------------------------------------------------------- phase 2: the release
    def release(
        self,
        batch: UserBatch,
        runs: EntityRuns | None,
        positions: torch.Tensor,
        sizes: np.ndarray,
        sensitive: torch.Tensor | None,
        context: RowContext | None,
    ) -> torch.Tensor:
        """Release a batch's privatized tokens (``positions``, rows of ``sizes``) by level, each consistent
        pseudonym once, copied to every occurrence (selective.md §8). Returns positions (or vectors) on CPU."""
        base = self.levels.base
        row_keys = np.asarray(base.row_keys(batch.row_ids), dtype=np.int64)
        n_tok = int(positions.numel())
        row_of = np.repeat(np.arange(sizes.size), sizes)
        in_run = np.zeros(n_tok, dtype=bool)
        ent = _Pseudonyms.none() if runs is None else self._pseudonyms(batch, runs, row_keys)
        for t in ent.tokens:
            in_run[t] = True
        out: torch.Tensor | None = None
        for level in np.unique(batch.level[batch.keep]).tolist():
            engine = self.levels.at(level)
            rows = np.flatnonzero((batch.level == level) & batch.keep)
            idx = np.flatnonzero(np.isin(row_of, rows) & ~in_run)
            res = engine.release_keys(
                row_keys[rows].tolist(),
                np.bincount(row_of[idx], minlength=sizes.size)[rows].tolist(),
                positions[idx],
                None if sensitive is None else sensitive[idx],
                None if context is None else context.select(torch.from_numpy(idx)),
            )
            out = _put(out, idx, res, n_tok)
            sel = [k for k, r in enumerate(ent.row) if batch.level[r] == level]
            if sel:
                out = self._release_pseudonyms(engine, ent, sel, positions, context is not None, out, n_tok)
        return out if out is not None else torch.empty(0, dtype=torch.int64)

    def _pseudonyms(self, batch: UserBatch, runs: EntityRuns, row_keys: np.ndarray) -> _Pseudonyms:
        """Each sensitive string's key (scope: the user, or the row's own key) and whether its row is charged
        for it; the strings of one key in a batch are released once."""
        base = self.levels.base
        scopes = batch.users[runs.row] if self.consistent == "user" else row_keys[runs.row].astype(np.uint64)
        keys = entity_keys(self.secret, base.split, base.stream, scopes.tolist(), runs.digest)
        first_in_row = np.zeros(len(runs), dtype=bool)
        seen: set[tuple[int, int]] = set()
        for k, (r, key) in enumerate(zip(runs.row.tolist(), keys, strict=True)):
            if (r, key) not in seen:
                seen.add((r, key))
                first_in_row[k] = True
        charged = first_in_row
        if self.consistent == "user":
            assert self.table is not None
            rows = np.asarray(batch.row_ids, dtype=np.int64)[runs.row]
            charged = first_in_row & self.table.charged(pair_keys(batch.users[runs.row], runs.digest), rows)
        batch.charged_s = np.zeros(batch.keep.size, dtype=np.int64)
        sizes = np.asarray([t.size for t in runs.tokens], dtype=np.int64)
        np.add.at(batch.charged_s, runs.row[charged], sizes[charged])
        return _Pseudonyms(runs.row.tolist(), keys, runs.tokens, runs.ids, runs.at)

    @staticmethod
    def _release_pseudonyms(
        engine: Any,
        ent: _Pseudonyms,
        sel: list[int],
        positions: torch.Tensor,
        contextual: bool,
        out: torch.Tensor | None,
        n_tok: int,
    ) -> torch.Tensor:
        """Release the pseudonyms ``sel`` (one draw per distinct key, from its first occurrence's tokens) and copy
        each to all its occurrences."""
        first: dict[int, int] = {}
        for k in sel:
            first.setdefault(ent.keys[k], k)
        uniq = list(first.values())
        idx = np.concatenate([ent.tokens[k] for k in uniq])
        context = None
        if contextual:  # a contextual mechanism reads the string alone: the same context at every occurrence
            lengths = np.asarray([ent.ids[k].size for k in uniq], dtype=np.int64)
            starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            at = np.concatenate([ent.at[k] + s for k, s in zip(uniq, starts.tolist(), strict=True)])
            row = np.repeat(np.arange(len(uniq)), [ent.tokens[k].size for k in uniq])
            context = RowContext.from_flat(np.concatenate([ent.ids[k] for k in uniq]), lengths, at, row)
        sizes = [int(ent.tokens[k].size) for k in uniq]
        res = engine.release_keys(
            [ent.keys[k] for k in uniq], sizes, positions[idx], torch.ones(idx.size, dtype=torch.bool), context
        )
        chunks = dict(zip([ent.keys[k] for k in uniq], torch.split(res, sizes), strict=True))
        for k in sel:
            out = _put(out, ent.tokens[k], chunks[ent.keys[k]], n_tok)
        assert out is not None
        return out

    # ---------------------------------------------------------------- accounting
    def row_columns(
        self, result: dict[str, list[Any]], batch: UserBatch, sizes: np.ndarray, n_sens: np.ndarray | None
    ) -> tuple[np.ndarray | None, np.ndarray | None, bool]:
        """Each row's ``(dp_epsilon, dp_delta, has_delta)`` at its level (:meth:`row_epsilon`; ``sizes``: each row's
        privatized tokens), and the ``dp_dropped`` column of ``bound="rows"`` in ``result`` (users.md §3)."""
        n_other = sizes - (0 if n_sens is None else n_sens)
        out = self.row_epsilon(batch, n_sens, n_other, others_kept(self.levels.base.config))
        if self.spec is not None and self.spec.bound == "rows":
            result["dp_dropped"] = (~batch.keep).tolist()
        return out

    def add_rows(self, totals: Totals, batch: UserBatch, columns: tuple[Any, ...]) -> None:
        """Count a batch in ``totals`` (``columns``: :meth:`Totals.add_rows`'s, per row) without its dropped rows,
        which are not released (users.md §3), and, with a user setting, each user's sums (users.md §6)."""
        eps, deltas = columns[4], columns[5]
        if not batch.keep.all():
            columns = tuple(None if c is None else c[batch.keep] for c in columns)
        totals.add_rows(*columns)
        if self.spec is not None:
            self.totals.add(batch.users, eps, deltas, ~batch.keep)

    def row_epsilon(
        self, batch: UserBatch, n_sens: np.ndarray | None, n_other: np.ndarray, keep_others: bool
    ) -> tuple[np.ndarray | None, np.ndarray | None, bool]:
        """Each row's ``(dp_epsilon, dp_delta, has_delta)`` at its level (users.md §2), with each consistent
        pseudonym's tokens counted in its charged row only (selective.md §8)."""
        n = n_other.size
        charged = batch.charged_s if batch.charged_s is not None else n_sens
        eps: np.ndarray | None = np.zeros(n)
        deltas: np.ndarray | None = np.zeros(n)
        has_delta = False
        for level in np.unique(batch.level).tolist():
            engine = self.levels.at(level)
            rows = batch.level == level
            claim, sens_claim = engine.claim, engine.sensitive_claim
            if charged is None:
                e1, d1 = claim.row_epsilon(1), claim.row_delta(1)
                with np.errstate(invalid="ignore"):
                    e = None if e1 is None else n_other[rows].astype(np.float64) * e1
                    d = None if d1 is None else n_other[rows].astype(np.float64) * d1
                has_delta |= claim.delta_token > 0
            else:
                other = None if keep_others else claim
                e, d = selective_rows(charged[rows], n_other[rows], sens_claim, other)
                has_delta |= sens_claim.delta_token > 0 or (not keep_others and claim.delta_token > 0)
            eps = None if eps is None or e is None else _assign(eps, rows, e)
            deltas = None if deltas is None or d is None else _assign(deltas, rows, d)
        return eps, deltas, has_delta


def blank_dropped(
    texts: list[str], spans: list[Any] | None, plan: UserBatch | None
) -> tuple[list[str], list[Any] | None]:
    """A row dropped by ``bound="rows"`` (users.md §3) goes on as an empty text without spans: nothing of it is
    tokenized, detected or released."""
    if plan is None or plan.keep.all():
        return texts, spans
    keep = plan.keep.tolist()
    texts = [t if k else "" for t, k in zip(texts, keep, strict=True)]
    if spans is not None:
        spans = [s if k else [] for s, k in zip(spans, keep, strict=True)]
    return texts, spans


@dataclass
class _Pseudonyms:
    row: list[int]
    keys: list[int]
    tokens: list[np.ndarray]
    ids: list[np.ndarray]
    at: list[np.ndarray]

    @classmethod
    def none(cls) -> _Pseudonyms:
        return cls([], [], [], [], [])


def _assign(target: np.ndarray, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    target[rows] = values
    return target


def _put(out: torch.Tensor | None, idx: np.ndarray, res: torch.Tensor, n_tok: int) -> torch.Tensor:
    """Write ``res`` at ``idx`` of the batch's result (created on first use, shaped like ``res``'s rows)."""
    if out is None:
        out = torch.zeros((n_tok, *res.shape[1:]), dtype=res.dtype)
    if idx.size:
        out[torch.from_numpy(idx)] = res
    return out
