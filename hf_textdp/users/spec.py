"""The ``user=`` setting of per-person accounting, validated (docs/mechanisms/users.md §1).

``{"column": name, "budget": B | None, "bound": "scale" | "rows", "max_rows": k, "keep_column": False}``:
``column`` names the column that says whose each row is; ``budget`` bounds each user's total ε (the sum of its
rows' ``dp_epsilon``); ``bound`` says how: ``"scale"`` lowers the user's per-token ε, ``"rows"`` keeps at most
``max_rows`` rows (and, with a budget, only as many as fit in it); ``keep_column`` keeps the user column in the
output (it is an identifier: dropped unless asked).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..errors import InvalidParameterError, ParameterTypeError
from ..sensitive import SensitiveSpec
from ..validation import check_bool, check_choice, check_float, check_int


__all__ = ["BOUNDS", "USER_KEYS", "UserSpec", "check_user_setting", "parse_user"]

BOUNDS = ("scale", "rows")
USER_KEYS = ("column", "budget", "bound", "max_rows", "keep_column")

Bound = Literal["scale", "rows"]


@dataclass(frozen=True, kw_only=True)
class UserSpec:
    """A validated ``user=`` setting.

    Args:
        column (`str`): the column holding each row's user (an int or a str).
        budget (`float`, *optional*): the bound on each user's total ε (``None``: reported, not bounded).
        bound (`str`, defaults to `"scale"`): ``"scale"`` (lower the user's per-token ε) or ``"rows"`` (keep at most
            ``max_rows`` rows, chosen with the key, and only as many as fit in ``budget``).
        max_rows (`int`, *optional*): the most rows kept of one user (``bound="rows"`` only).
        keep_column (`bool`, defaults to `False`): keep the user column in the output.
    """

    column: str
    budget: float | None = None
    bound: Bound = "scale"
    max_rows: int | None = None
    keep_column: bool = False

    @property
    def dropped_column(self) -> str | None:
        """The user column a finished output leaves out (an identifier, users.md §6): ``None`` with ``keep_column``."""
        return None if self.keep_column else self.column

    @property
    def needs_counts(self) -> bool:
        """Whether a release needs each user's counts first (a budget, or rows to choose): the counting pass."""
        return self.budget is not None or self.bound == "rows"

    def to_value(self) -> dict[str, Any]:
        """The JSON form (what a config stores); :func:`parse_user` reads it back to an equal spec."""
        out: dict[str, Any] = {"column": self.column, "budget": self.budget, "bound": self.bound}
        if self.max_rows is not None:
            out["max_rows"] = self.max_rows
        if self.keep_column:
            out["keep_column"] = True
        return out


def _name(key: str) -> str:
    return f'user["{key}"]'


def parse_user(value: Any) -> UserSpec:
    """Validate a ``user=`` dict (or a :class:`UserSpec`) into a :class:`UserSpec`.

    Raises:
        ParameterTypeError: the setting or one of its entries has the wrong type.
        InvalidParameterError: a missing or unknown key, a budget that is not finite and > 0, an unknown bound,
            ``max_rows`` with ``bound="scale"``, or ``bound="rows"`` with neither ``max_rows`` nor ``budget``.

    Example:

    >>> parse_user({"column": "customer_id", "budget": 50.0}).bound
    'scale'
    >>> parse_user({"column": "customer_id", "bound": "rows"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    hf_textdp.errors.InvalidParameterError: user["bound"] = 'rows' needs user["max_rows"] ...
    """
    if isinstance(value, UserSpec):
        return value
    if not isinstance(value, dict):
        raise ParameterTypeError(
            "user must be a dict such as {'column': 'customer_id', 'budget': 50.0} or None, got "
            f"{type(value).__name__}."
        )
    extra = sorted(str(k) for k in value if k not in USER_KEYS)
    if extra:
        raise InvalidParameterError(f"user: unknown keys {extra}; allowed keys: {sorted(USER_KEYS)}.")
    column = value.get("column")
    if not isinstance(column, str) or not column:
        raise InvalidParameterError(f"{_name('column')} is required: a non-empty str (a column name), got {column!r}.")
    budget = value.get("budget")
    if budget is not None:
        budget = check_float(budget, _name("budget"), minimum=0.0)
    bound = check_choice(value.get("bound", "scale"), _name("bound"), BOUNDS)
    max_rows = value.get("max_rows")
    if max_rows is not None:
        max_rows = check_int(max_rows, _name("max_rows"), minimum=1)
        if bound == "scale":
            raise InvalidParameterError(
                f"{_name('max_rows')} = {max_rows!r} applies to {_name('bound')} = 'rows' only; with 'scale' every "
                "row is kept and its per-token ε lowered."
            )
    if bound == "rows" and max_rows is None and budget is None:
        raise InvalidParameterError(
            f"{_name('bound')} = 'rows' needs {_name('max_rows')} (the most rows kept of one user) or "
            f"{_name('budget')} (rows are kept while they fit in it)."
        )
    keep = check_bool(value.get("keep_column", False), _name("keep_column"))
    return UserSpec(column=column, budget=budget, bound=bound, max_rows=max_rows, keep_column=keep)


def check_user_setting(user: Any, sensitive: SensitiveSpec | None) -> UserSpec | None:
    """The config's ``user`` value (a dict or a :class:`UserSpec`), parsed and validated against its ``sensitive``
    setting (``None`` without one).

    Raises:
        InvalidParameterError: ``sensitive["consistent"] = "user"`` without ``user``; a budget with
            ``sensitive["others"] = "keep"`` (those rows have no finite ε to bound).
    """
    if sensitive is not None and sensitive.consistent == "user" and user is None:
        raise InvalidParameterError(
            'sensitive["consistent"] = "user" takes each row\'s user from user["column"]; set user={"column": ...} '
            'or use sensitive["consistent"] = "row".'
        )
    if user is None:
        return None
    spec = parse_user(user)
    if spec.budget is not None and sensitive is not None and sensitive.others == "keep":
        raise InvalidParameterError(
            f'{_name("budget")} = {spec.budget!r} bounds the sum of dp_epsilon, but sensitive["others"] = "keep" '
            "releases the other positions unchanged (no finite ε); use others='privatize' or no budget."
        )
    return spec
