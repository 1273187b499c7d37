"""How a budget is met (docs/mechanisms/users.md §3): each user's level of per-token ε (``bound="scale"``) or the
rows it keeps (``bound="rows"``), from its token counts only.

**Levels.** Level j releases at ``λ_j = 2^(−j/8)`` times the configured ε (and ε_s): a fixed geometric grid, so
a run builds at most one mechanism per level used (a handful: one per factor of 2^(1/8) between its users' token
counts) and a user's ε is at most 9.1 % below the exact allocation ``B / cost``. A user gets the smallest j whose
cost ``n_s·ε_tok,s(j) + n_o·ε_tok,o(j)`` is at most ``B·(1 − 10⁻⁹)``, the per-token bounds read from the
mechanisms' own claims at that level (never assumed linear in ε); the margin keeps the rows' float sum at or
under B.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import InvalidParameterError


__all__ = ["LEVELS_PER_OCTAVE", "MAX_LEVEL", "SLACK", "choose_levels", "keep_prefix", "level_scale"]

LEVELS_PER_OCTAVE = 8
MAX_LEVEL = 64 * LEVELS_PER_OCTAVE  # λ = 2^-64: below it a user would need more than 2^64 times its budget
#: the relative margin under the budget: the sum of a user's rows (floats, in any order) stays at or under B
SLACK = 1e-9

TokenBounds = Callable[[int], tuple[float, float]]


def level_scale(level: int) -> float:
    """λ_j = 2^(−j/8), the factor on ε (and ε_s) at level j (exact for j a multiple of 8)."""
    return float(2.0 ** (-level / LEVELS_PER_OCTAVE))


def _cost(n_s: np.ndarray, n_o: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    t_s, t_o = bounds
    with np.errstate(invalid="ignore"):  # 0 · ∞ (a class with no tokens at ε = ∞) counts nothing
        c_s = np.where(n_s > 0, n_s.astype(np.float64) * t_s, 0.0)
        c_o = np.where(n_o > 0, n_o.astype(np.float64) * t_o, 0.0)
    return np.asarray(c_s + c_o, dtype=np.float64)


def choose_levels(n_s: np.ndarray, n_o: np.ndarray, budget: float, bounds_at: TokenBounds) -> np.ndarray:
    """Each user's level (int16): the smallest j with ``n_s·t_s(j) + n_o·t_o(j) ≤ budget·(1 − SLACK)``, where
    ``bounds_at(j) = (t_s(j), t_o(j))`` are the per-token bounds of the sensitive and other classes at level j.

    The search starts at ``⌊8·log2(cost_0 / B)⌋``, where the cost would meet the budget if the bounds were linear
    in ε, and steps up until the cost fits; ``bounds_at`` is asked once per level tried.

    Raises:
        InvalidParameterError: a user that no level below :data:`MAX_LEVEL` fits in the budget.

    Example:

    >>> choose_levels(np.array([0, 0, 0]), np.array([1, 10, 100]), 9.0, lambda j: (0.0, 2.0 * 2 ** (-j / 8))).tolist()
    [0, 10, 36]
    """
    limit = budget * (1.0 - SLACK)
    cache: dict[int, tuple[float, float]] = {}

    def at(j: int) -> tuple[float, float]:
        if j not in cache:
            cache[j] = bounds_at(j)
        return cache[j]

    cost0 = _cost(n_s, n_o, at(0))
    with np.errstate(divide="ignore"):
        guess = np.floor(LEVELS_PER_OCTAVE * np.log2(np.maximum(cost0, 1e-300) / budget))
    level = np.where(cost0 <= limit, 0, np.clip(guess, 0, MAX_LEVEL)).astype(np.int64)
    pending = np.flatnonzero(cost0 > limit)
    while pending.size:
        over = []
        for j in np.unique(level[pending]).tolist():
            if j > MAX_LEVEL:
                raise InvalidParameterError(
                    f"user['budget'] = {budget!r} is met by no per-token ε down to 2^-64 of the configured one for "
                    "some user; raise the budget or use bound='rows'."
                )
            sel = pending[level[pending] == j]
            fits = _cost(n_s[sel], n_o[sel], at(j)) <= limit
            over.append(sel[~fits])
        pending = np.concatenate(over) if over else pending[:0]
        level[pending] += 1
    return level.astype(np.int16)


def keep_prefix(
    user: np.ndarray, priority: np.ndarray, cost: np.ndarray, max_rows: int | None, budget: float | None
) -> np.ndarray:
    """``bound="rows"``: which rows are kept (bool, in the given order). Each user's rows in ``priority`` order
    are kept while there are at most ``max_rows`` of them and their costs sum to at most ``budget·(1 − SLACK)``:
    a prefix, so a user's kept rows are those at or under one priority.

    Example:

    >>> keep_prefix(np.array([1, 1, 1, 2]), np.array([3, 1, 2, 9]), np.array([1.0, 1, 1, 5]), 2, None).tolist()
    [False, True, True, True]
    """
    order = np.lexsort((priority, user))
    u, c = user[order], cost[order]
    first = np.concatenate([[True], u[1:] != u[:-1]]) if u.size else np.zeros(0, dtype=bool)
    group = np.cumsum(first) - 1
    rank = np.arange(u.size) - np.flatnonzero(first)[group]
    keep = np.ones(u.size, dtype=bool)
    if max_rows is not None:
        keep &= rank < max_rows
    if budget is not None:  # each user's running cost, summed within the user (no cancellation across users)
        keep &= _running_sum(c, rank) <= budget * (1.0 - SLACK)
    out = np.empty(u.size, dtype=bool)
    out[order] = keep
    return out


def _running_sum(cost: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Each row's cost plus its user's earlier rows' (rows sorted by user, ``rank`` the index within the user): one
    vector step per rank, so no sum crosses users (a global cumsum minus an offset would cancel digits)."""
    running = cost.astype(np.float64).copy()
    by_rank = np.argsort(rank, kind="stable")
    bounds = np.searchsorted(rank[by_rank], np.arange(int(rank.max(initial=0)) + 2))
    for r in range(1, bounds.size - 1):
        idx = by_rank[bounds[r] : bounds[r + 1]]
        running[idx] += running[idx - 1]
    return running
