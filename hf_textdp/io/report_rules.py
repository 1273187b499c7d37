"""What a row's ε and a per-person report's figures must satisfy (issue 53 R3 for the releases of issue 56).

A plain release states each row's ε exactly: its plain bound, every privatized token at the report's ε_tok (or
each class's, selective.md §6). Per-person releases state less, and this module checks what they do state:

- ``user.bound = "scale"`` with a budget (users.md §3) releases each user's tokens at a level ε·2^(−j/8) that
  the report does not give per row, so a row's ε is at most its plain bound, and at most the budget;
- ``sensitive.consistent`` alone (selective.md §8) charges each distinct string in one row, so a row's ε is
  exactly ``n_o·ε_tok,o + k·ε_tok,s`` for a whole ``k`` between 0 and its ``n_s`` sensitive tokens;
- the ``users`` section (users.md §6): its summary against its figures, the largest user's ε against the budget
  and the rows (at least the largest row's, at most their sum, at least their mean per user), the rows per user
  against the rows, rows dropped only by ``bound="rows"`` (with at most ``max_rows`` kept a user); with the user
  column published, every figure recounted from the output's rows.

Numbers only: a message names figures, never a user id or a row's text.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import HfTextDPError


if TYPE_CHECKING:
    from ..users import UserSpec

# hf_textdp.users is imported where a users section is checked: it brings numpy, and the CLI's parser (which
# imports this module through ``report``) imports no heavy library (tests/cli/test_catalog.py)


__all__ = ["RTOL", "close", "row_rule", "user_faults"]

RTOL = 1e-9  # the JSON and CSV writers keep 10 significant decimals

#: a row's stated ε against its plain bound: (plain bound, stated ε, sensitive tokens, other tokens) -> agrees
RowRule = Callable[[float, float, int, int], bool]


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=RTOL, abs_tol=1e-12)


def _num(x: Any) -> float | None:
    """``x`` as a float when it is a finite number (not a bool), else ``None``."""
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None


def row_rule(report: dict[str, Any]) -> RowRule:
    """How each row's ``dp_epsilon`` must stand to its plain bound under the report's per-person settings (module
    doc): equal for a plain release."""
    users, sens = report.get("users") or {}, report.get("sensitive") or {}
    if users.get("bound") == "scale" and users.get("budget") is not None:  # a level per user: at most the plain bound
        return lambda want, got, n_s, n_o: 0.0 <= got <= want * (1 + RTOL) + 1e-12
    s, o = _num(sens.get("epsilon_token")), _num(sens.get("others_epsilon_token"))
    if sens.get("consistent") is not None and s is not None and o is not None and s > 0:

        def charged(want: float, got: float, n_s: int, n_o: int) -> bool:
            k = min(max(round((got - n_o * o) / s), 0), n_s)  # the sensitive tokens charged in this row
            return close(got, k * s + n_o * o)

        return charged
    return lambda want, got, n_s, n_o: close(want, got)


def user_faults(report: dict[str, Any], cols: dict[str, list[Any]] | None) -> list[str]:
    """The ``users`` section against itself, the budget, the report's totals and the output's rows (``None``:
    unreadable rows, the section and totals alone)."""
    section = report.get("users")
    if section is None:
        return []
    if not isinstance(section, dict):
        return [f"the users section is {type(section).__name__}, not a section"]
    from ..users import parse_user
    from ..users.report import section_summary

    try:
        spec = parse_user({k: section.get(k) for k in ("column", "budget", "bound")} | _optional(section))
        expected_summary = section_summary(section)
    except (HfTextDPError, KeyError, TypeError, ValueError) as err:
        return [f"the users section's setting or figures are not valid ({str(err)[:120]})"]
    faults = [] if section.get("summary") == expected_summary else ["users.summary does not state its own figures"]
    faults += _count_faults(section, report.get("totals") or {})
    faults += _epsilon_faults(section, cols)
    if cols is not None and section.get("published") and spec.column in cols:
        faults += _recount_faults(section, cols, spec)
    return faults


def _optional(section: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if section.get("max_rows") is not None:
        out["max_rows"] = section["max_rows"]
    if section.get("published"):
        out["keep_column"] = True
    return out


def _count_faults(section: dict[str, Any], totals: dict[str, Any]) -> list[str]:
    """Users and rows per user against the output's rows and the rows dropped."""
    counts = [section.get(k) for k in ("users", "rows_per_user_max", "rows_dropped", "users_with_rows_dropped")]
    counts.append(totals.get("rows"))
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in counts):
        return ["users.users, rows_per_user_max, rows_dropped, users_with_rows_dropped or totals.rows is not a count"]
    users, top, dropped, dropped_users, kept = (int(x or 0) for x in counts)
    median = _num(section.get("rows_per_user_median"))
    rows = kept + dropped
    if (users == 0) != (rows == 0) or users > rows:
        return [f"users.users is {users!r} for {rows!r} rows ({kept!r} in the output, {dropped!r} dropped)"]
    faults = []
    if users and not (top * users >= rows and top <= rows - users + 1):
        faults.append(f"users.rows_per_user_max is {top!r}, which {users!r} users and {rows!r} rows cannot give")
    if median is None or median > top or (users and median < 1):
        faults.append(f"users.rows_per_user_median is {median!r} with a maximum of {top!r}")
    if section.get("bound") != "rows" and dropped:
        faults.append(f"users.rows_dropped is {dropped!r} but bound {section.get('bound')!r} drops no row")
    if dropped_users > min(users, dropped) or (dropped > 0) != (dropped_users > 0):
        faults.append(f"users.users_with_rows_dropped is {dropped_users!r} for {dropped!r} rows dropped")
    max_rows = section.get("max_rows")
    if isinstance(max_rows, int) and kept > users * max_rows:
        faults.append(f"the output keeps more than users.max_rows = {max_rows!r} rows of a user")
    return faults


def _epsilon_faults(section: dict[str, Any], cols: dict[str, list[Any]] | None) -> list[str]:
    """The largest and median user's ε against the budget, the share at it, and the rows' ε."""
    from ..users.report import AT_BUDGET

    stated, median, share = (section.get(k) for k in ("user_epsilon_max", "user_epsilon_median", "share_at_budget"))
    budget, users = _num(section.get("budget")), int(section.get("users") or 0)  # parse_user checked the budget
    eps = None if cols is None else cols.get("dp_epsilon")
    null_rows = eps is not None and any(e is None for e in eps)
    if stated is None:
        if median is not None or share is not None or (eps and not null_rows):
            return ["users.user_epsilon_max is null but the section or the rows have a user ε"]
        return []
    top, mid = _num(stated), _num(median)
    if top is None or mid is None or not 0 <= mid <= top:
        return [f"users.user_epsilon_max {stated!r} or user_epsilon_median {median!r} is not an ε at most the max"]
    faults = []
    if budget is not None and top > budget:
        faults.append(f"users.user_epsilon_max is {top!r}, above users.budget {budget!r}")
    at = _num(share)
    if (budget is None) != (share is None) or (share is not None and (at is None or not 0 <= at <= 1)):
        faults.append(f"users.share_at_budget is {share!r} with users.budget {budget!r}")
    elif budget is not None and at is not None and users and (at > 0) != (top >= budget * AT_BUDGET):
        faults.append(f"users.share_at_budget is {share!r} but the largest user's ε is {top!r} of a budget {budget!r}")
    if null_rows:
        return [*faults, "users.user_epsilon_max is a number but rows' dp_epsilon are null"]
    if not eps:
        return faults
    total, largest = math.fsum(eps), float(max(eps))
    if top < largest * (1 - RTOL) or top > total * (1 + RTOL) + 1e-12 or top * users < total * (1 - RTOL):
        faults.append(
            f"users.user_epsilon_max is {top!r}, which the rows' dp_epsilon (largest {largest!r}, sum {total!r} over "
            f"{users!r} users) cannot give"
        )
    return faults


def _recount_faults(section: dict[str, Any], cols: dict[str, list[Any]], spec: UserSpec) -> list[str]:
    """With the user column published, the section recounted from the output's rows (every figure; only the ε
    and δ maxima when rows were dropped, which the output no longer holds)."""
    from ..users import user_section, user_totals_from_batches

    batch = {k: v for k, v in cols.items() if k in (spec.column, "dp_epsilon", "dp_delta")}
    try:
        recount = user_section(user_totals_from_batches([batch], spec), spec)
    except HfTextDPError:
        return [f"the published user column {spec.column!r} holds a value that names no user"]
    keys = ["user_epsilon_max", "user_delta_max"] if section.get("rows_dropped") else list(recount)
    for key in keys:
        want, got = recount[key], section.get(key)
        a, b = _num(want), _num(got)
        same = close(a, b) if a is not None and b is not None else want == got
        if key != "summary" and not same:
            return [f"users.{key} is {got!r} but the published user column's rows give {want!r}"]
    return []
