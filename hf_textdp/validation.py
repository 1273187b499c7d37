"""Parameter checks shared by the config, the mechanisms and the post-processing steps.

Every check raises an :class:`~hf_textdp.errors.HfTextDPError` subclass whose message names the
parameter, the value and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import InvalidParameterError, ParameterTypeError


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
