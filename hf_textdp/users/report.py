"""The report's ``users`` section (docs/mechanisms/users.md §6): per-user figures from the released rows.

Every figure is recounted from the rows as they were released (the user column, ``dp_epsilon``, ``dp_delta`` and
``dp_dropped``), after ``num_proc`` workers, a resume or Ray, as the report's totals are: a user's ε is the sum of
its rows' ``dp_epsilon`` (basic composition over its rows). The section holds only aggregates (counts, maxima,
medians): no user id and no hash of one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .allocation import LEVELS_PER_OCTAVE
from .keys import user_keys
from .spec import UserSpec


__all__ = [
    "AT_BUDGET",
    "CONSISTENT_STATEMENT",
    "USER_NOT_COVERED",
    "UserTotals",
    "add_user_section",
    "per_person_report",
    "section_summary",
    "user_section",
    "user_totals_from_batches",
]

USER_NOT_COVERED = (
    "Which rows belong to one user and each user's number of rows and tokens: with a budget, a row's per-token ε "
    "(dp_epsilon / dp_tokens) follows from its user's token count, so rows at one level may share a user; with "
    "bound='rows', which rows were dropped. The guarantee is for the text of a user's rows, given these."
)

#: a user is "at the budget" when its ε is within one level of it (B·2^(−1/8) ≤ ε_u ≤ B, with the margin of §3)
AT_BUDGET = 2.0 ** (-1.0 / LEVELS_PER_OCTAVE) * (1.0 - 1e-9)


@dataclass
class UserTotals:
    """Per-user sums of released rows, reduced as they come (32 bytes a user)."""

    _parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    epsilon_null: bool = False
    has_delta: bool = False

    def add(
        self, users: np.ndarray, eps: np.ndarray | None, delta: np.ndarray | None, dropped: np.ndarray | None
    ) -> None:
        """Add rows: user hashes, their ``dp_epsilon`` (``None``: null), ``dp_delta`` and dropped flags."""
        n = users.size
        if not n:
            return
        self.epsilon_null |= eps is None or bool(np.isnan(eps).any())
        self.has_delta |= delta is not None
        drop = np.zeros(n, dtype=bool) if dropped is None else dropped.astype(bool)
        e = np.zeros(n) if eps is None else np.where(drop, 0.0, np.nan_to_num(eps))
        d = np.zeros(n) if delta is None else np.where(drop, 0.0, np.nan_to_num(delta))
        self._parts.append((users, e, d, (~drop).astype(np.int64), drop.astype(np.int64)))
        if len(self._parts) > 64:
            self._reduce()

    def _reduce(self) -> tuple[np.ndarray, ...]:
        if not self._parts:
            empty = np.zeros(0)
            return np.zeros(0, np.uint64), empty, empty, empty.astype(np.int64), empty.astype(np.int64)
        users = np.concatenate([p[0] for p in self._parts])
        uniq, inv = np.unique(users, return_inverse=True)
        sums = []
        for k in range(1, 5):
            col = np.concatenate([p[k] for p in self._parts])
            acc = np.zeros(uniq.size, dtype=col.dtype)
            np.add.at(acc, inv, col)
            sums.append(acc)
        reduced = (uniq, sums[0], sums[1], sums[2], sums[3])
        self._parts = [reduced]
        return reduced

    def merge(self, other: UserTotals) -> None:
        self._parts.extend(other._parts)
        self.epsilon_null |= other.epsilon_null
        self.has_delta |= other.has_delta

    def per_user(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(ε, δ, rows kept, rows dropped) of each user (in hash order)."""
        _, eps, delta, kept, dropped = self._reduce()
        return eps, delta, kept, dropped


def user_totals_from_batches(batches: Iterable[dict[str, list[Any]]], spec: UserSpec) -> UserTotals:
    """:class:`UserTotals` of released column batches (the user column, ``dp_epsilon``, ``dp_delta``,
    ``dp_dropped``)."""
    totals = UserTotals()
    for batch in batches:
        users = user_keys(batch[spec.column], spec.column)
        eps_col = batch.get("dp_epsilon")
        eps = None if eps_col is None or any(e is None for e in eps_col) else np.asarray(eps_col, dtype=np.float64)
        delta_col = batch.get("dp_delta")
        delta = None if delta_col is None else np.asarray([d or 0.0 for d in delta_col], dtype=np.float64)
        drop = batch.get("dp_dropped")
        totals.add(users, eps, delta, None if drop is None else np.asarray(drop, dtype=bool))
    return totals


def _g(x: float | None) -> str:
    return "null" if x is None else f"{x:.4g}"


def user_section(totals: UserTotals, spec: UserSpec) -> dict[str, Any]:
    """The report's ``users`` section: users, rows per user, per-user ε and δ, the share at the budget, rows
    dropped, whether the user column is published, and a one-line ``summary``."""
    eps, delta, kept, dropped = totals.per_user()
    rows = kept + dropped
    n = int(rows.size)
    has_eps = n > 0 and not totals.epsilon_null
    at_budget = None
    if spec.budget is not None and has_eps:
        at_budget = float(np.mean(eps >= spec.budget * AT_BUDGET))
    section: dict[str, Any] = {
        "column": spec.column,
        "published": spec.keep_column,
        "bound": spec.bound,
        "budget": spec.budget,
        "max_rows": spec.max_rows,
        "levels_per_octave": LEVELS_PER_OCTAVE if spec.bound == "scale" and spec.budget is not None else None,
        "users": n,
        "rows_per_user_max": int(rows.max()) if n else 0,
        "rows_per_user_median": float(np.median(rows)) if n else 0.0,
        "user_epsilon_max": float(eps.max()) if has_eps else None,
        "user_epsilon_median": float(np.median(eps)) if has_eps else None,
        "user_delta_max": float(delta.max()) if n and totals.has_delta else None,
        "share_at_budget": at_budget,
        "rows_dropped": int(dropped.sum()),
        "users_with_rows_dropped": int((dropped > 0).sum()),
    }
    section["summary"] = section_summary(section)
    return section


def section_summary(s: dict[str, Any]) -> str:
    """The section's one-line ``summary``, from its own figures (the report check recomputes it)."""
    budget = "no budget (reported, not bounded)"
    if s["budget"] is not None:
        how = "per-token ε lowered per user" if s["bound"] == "scale" else "rows kept while they fit"
        budget = f"budget {_g(s['budget'])} ({how}; {_g(100 * (s['share_at_budget'] or 0.0))} % of users at it)"
    if s["max_rows"] is not None:
        budget += f", at most {s['max_rows']} rows a user"
    dropped = ""
    if s["bound"] == "rows":
        dropped = f", {s['rows_dropped']} rows dropped ({s['users_with_rows_dropped']} users)"
    column = "kept in the output (user['keep_column'])" if s["published"] else "dropped from the output"
    return (
        f"{s['users']} users ({s['column']!r}, an identifier: {column}); rows per user max {s['rows_per_user_max']}, "
        f"median {_g(s['rows_per_user_median'])}; user ε (sum of its rows' dp_epsilon) max "
        f"{_g(s['user_epsilon_max'])}, median {_g(s['user_epsilon_median'])}; {budget}{dropped}"
    )


def add_user_section(report: dict[str, Any], section: dict[str, Any]) -> dict[str, Any]:
    """``report`` with its ``users`` section, the user-level guarantee and what it does not cover."""
    report["users"] = section
    report["user_guarantee"] = (
        "For two datasets that differ only in the text of one user's rows (the same rows, lengths, special and "
        "passthrough positions and classes), and any set S of outputs: P[M(D) in S] <= exp(eps_u) * P[M(D') in S] "
        "+ delta_u, where eps_u (delta_u) is the sum of that user's rows' dp_epsilon (dp_delta): basic "
        "composition over its rows" + (", at most the budget" if section["budget"] is not None else "") + "."
    )
    report["not_covered"] = [
        n for n in report.get("not_covered", []) if not n.startswith("Several rows from one person")
    ] + [USER_NOT_COVERED]
    return report


CONSISTENT_STATEMENT = (
    "Consistent pseudonyms (sensitive.consistent = {scope!r}): each distinct sensitive string of a {scope} is one "
    "draw, counted once, and every occurrence shows it; which sensitive positions hold the same string (the "
    "equality pattern) is visible and not covered: the bound compares only data with the same pattern "
    "(selective.md §8)."
)


def per_person_report(report: dict[str, Any], config: Any, users: UserTotals | None) -> dict[str, Any]:
    """``report`` with what per-person settings add: the ``users`` section (given the rows' ``users`` sums) and
    the consistent pseudonyms' statement (selective.md §8)."""
    spec = config.user_spec
    if users is not None and spec is not None:
        add_user_section(report, user_section(users, spec))
    consistent = None if config.sensitive is None else config.sensitive.consistent
    if consistent is not None and report.get("sensitive") is not None:
        statement = CONSISTENT_STATEMENT.format(scope=consistent)
        report["sensitive"]["consistent"] = consistent
        report["sensitive"]["consistent_statement"] = statement
        report["not_covered"].append(statement)
    return report
