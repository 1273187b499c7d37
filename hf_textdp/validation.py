"""Parameter checks shared by the config, the mechanisms and the post-processing steps.

Every check raises an :class:`~hf_textdp.errors.HfTextDPError` subclass whose message names the
parameter, the value and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import HfTextDPError, InvalidParameterError, InvalidRowError, ParameterTypeError


__all__ = [
    "check_epsilon",
    "check_sensitive_epsilon",
    "check_open_unit",
    "check_float",
    "check_int",
    "check_choice",
    "check_bool",
    "is_int",
    "row_id_fault",
    "check_row_ids",
    "repeated_id_error",
]


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParameterTypeError(f"{name} must be a number, got {type(value).__name__} ({value!r}).")
    return float(value)


def check_epsilon(value: Any, name: str = "epsilon", *, allow_inf: bool = False) -> float:
    """ε: a finite number > 0 (int accepted, bool refused); +∞ only with ``allow_inf`` (test mode)."""
    x = _number(value, name)
    if math.isnan(x) or x <= 0 or (math.isinf(x) and not allow_inf):
        extra = "" if allow_inf else " (infinity only with options={'test_mode': True})"
        raise InvalidParameterError(f"{name} must be a finite float > 0{extra}, got {value!r}.")
    return x


def check_sensitive_epsilon(sensitive_epsilon: float, epsilon: float, others: str) -> None:
    """Refuse a sensitive ε weaker (larger) than the others' ε (issue 53, S2): selective privatization exists to
    protect sensitive positions more, so ε_s > ε (the same mechanism on the same space, so the same scale) is a
    mistake, most often the two values swapped. With ``others="keep"`` the other positions have no ε to compare."""
    if others == "privatize" and sensitive_epsilon > epsilon:
        raise InvalidParameterError(
            f'sensitive["epsilon"]={sensitive_epsilon!r} is larger than epsilon={epsilon!r}: sensitive positions '
            "would be less protected than the others. Allowed: sensitive epsilon <= epsilon (equal gives both the "
            'same protection), or others="keep" to leave the others unchanged.'
        )


def check_open_unit(value: Any, name: str, *, closed_high: bool = False, closed_low: bool = False) -> float:
    """A number in (0, 1) (or with closed ends as asked)."""
    x = _number(value, name)
    lo_ok = x >= 0 if closed_low else x > 0
    hi_ok = x <= 1 if closed_high else x < 1
    if math.isnan(x) or not (lo_ok and hi_ok):
        interval = ("[" if closed_low else "(") + "0, 1" + ("]" if closed_high else ")")
        raise InvalidParameterError(f"{name} must be a float in {interval}, got {value!r}.")
    return x


def check_float(value: Any, name: str, *, minimum: float | None = None, strict: bool = True) -> float:
    """A finite number, optionally > (or >=) ``minimum``."""
    x = _number(value, name)
    if not math.isfinite(x):
        raise InvalidParameterError(f"{name} must be a finite float, got {value!r}.")
    if minimum is not None and (x <= minimum if strict else x < minimum):
        op = ">" if strict else ">="
        raise InvalidParameterError(f"{name} must be a finite float {op} {minimum}, got {value!r}.")
    return x


def check_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterTypeError(f"{name} must be an int, got {type(value).__name__} ({value!r}).")
    if minimum is not None and value < minimum:
        raise InvalidParameterError(f"{name} must be an int >= {minimum}, got {value!r}.")
    return int(value)


def check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise ParameterTypeError(f"{name} must be True or False, got {type(value).__name__} ({value!r}).")
    return value


def check_choice(value: Any, name: str, allowed: Sequence[Any]) -> Any:
    if value not in allowed:
        raise InvalidParameterError(f"{name} must be one of {list(allowed)}, got {value!r}.")
    return value


def is_int(value: Any) -> bool:
    """A Python or NumPy integer, not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def row_id_fault(value: Any) -> str | None:
    """What is wrong with an example id (an int in [0, 2**63)), without echoing it (an id may be a user's
    number): its type, "a negative int" or "an int >= 2**63"; ``None`` for a valid id."""
    if not is_int(value):
        return type(value).__name__
    if int(value) < 0:
        return "a negative int"
    return "an int >= 2**63" if int(value) >= 2**63 else None


def check_row_ids(
    values: Sequence[Any], name: str, *, column: bool = False, indices: Sequence[int] | None = None
) -> list[int]:
    """Each example id as an int in [0, 2**63) (docs/mechanisms/randomness.md): the one row-id check of the
    :class:`~hf_textdp.Privatizer`, the ``PrivateTokenizer`` and the collators.

    ``column=True``: the ids come from the dataset column ``name`` (``id_column``), so a bad one is an
    :class:`InvalidRowError` naming its row (by the map's ``indices`` where given) and a repeated one is refused
    (two rows with one id share their noise). Otherwise ``name`` is a call argument or a feature field: a
    ``ParameterTypeError`` for a value that is no int, an ``InvalidParameterError`` for an int out of range.
    A message names the kind of the fault, never the value (an id may be a user's number).
    """
    ids: list[int] = []
    for i, value in enumerate(values):
        fault = row_id_fault(value)
        if fault is not None:
            raise _id_error(fault, value, name, f"{row_name(i, indices)}: " if column else "", column)
        ids.append(int(value))
    if column and len(set(ids)) < len(ids):
        seen: dict[int, int] = {}
        for i, r in enumerate(ids):
            if r in seen:
                raise repeated_id_error(f"{row_name(seen[r], indices)} and {row_name(i, indices)}", name, r)
            seen[r] = i
    return ids


def _id_error(fault: str, value: Any, name: str, where: str, column: bool) -> HfTextDPError:
    said = f"id_column={name!r}" if column else name
    message = f"{where}{said} must hold ints in [0, 2**63), got {fault}."
    if column:
        return InvalidRowError(message)
    return InvalidParameterError(message) if is_int(value) else ParameterTypeError(message)


def row_name(i: int, indices: Sequence[int] | None) -> str:
    """Row ``i`` of a batch, named by its dataset index where the map passes the indices."""
    return f"row {i} of the batch" if indices is None else f"row {int(indices[i])}"


def repeated_id_error(rows: str, id_column: str, value: int) -> InvalidRowError:
    """The error for an id that two ``rows`` hold (named, e.g. ``"rows 2 and 6"``): they would share their noise."""
    return InvalidRowError(
        f"{rows}: id_column={id_column!r} holds the id {value} twice; ids must be unique (two rows with one id "
        "would share their noise)."
    )
