"""The ``user=`` setting and ``sensitive["consistent"]`` (docs/mechanisms/users.md §1): valid values, and each
invalid one with the message fragment that names it."""

from __future__ import annotations

import pytest

from hf_textdp import PrivatizerConfig
from hf_textdp.errors import InvalidParameterError, ParameterTypeError
from hf_textdp.users import parse_user


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"column": "uid"}, {"column": "uid", "budget": None, "bound": "scale"}),
        ({"column": "uid", "budget": 5}, {"column": "uid", "budget": 5.0, "bound": "scale"}),
        (
            {"column": "uid", "bound": "rows", "max_rows": 3, "keep_column": True},
            {"column": "uid", "budget": None, "bound": "rows", "max_rows": 3, "keep_column": True},
        ),
        ({"column": "uid", "bound": "rows", "budget": 2.0}, {"column": "uid", "budget": 2.0, "bound": "rows"}),
    ],
    ids=["column-only", "budget", "rows-max", "rows-budget"],
)
def test_valid_user_settings_round_trip(value, expected):
    spec = parse_user(value)
    assert spec.to_value() == expected
    assert parse_user(spec.to_value()) == spec


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ("uid", ParameterTypeError, "user must be a dict"),
        ({}, InvalidParameterError, r'user\["column"\] is required'),
        ({"column": "uid", "budgett": 1}, InvalidParameterError, r"unknown keys \['budgett'\]"),
        ({"column": "uid", "budget": -1}, InvalidParameterError, r'user\["budget"\] must be a finite float > 0'),
        ({"column": "uid", "budget": float("inf")}, InvalidParameterError, "finite"),
        ({"column": "uid", "bound": "cap"}, InvalidParameterError, r"must be one of \['scale', 'rows'\]"),
        ({"column": "uid", "bound": "rows"}, InvalidParameterError, r'needs user\["max_rows"\]'),
        ({"column": "uid", "max_rows": 2}, InvalidParameterError, "applies to .* 'rows' only"),
        ({"column": "uid", "bound": "rows", "max_rows": 0}, InvalidParameterError, "must be an int >= 1"),
        ({"column": "uid", "keep_column": "yes"}, ParameterTypeError, "keep_column"),
    ],
    ids=[
        "type",
        "no-column",
        "unknown-key",
        "negative-budget",
        "inf-budget",
        "bound",
        "rows-alone",
        "max-scale",
        "max-zero",
        "keep-type",
    ],
)
def test_invalid_user_settings_name_the_key(value, error, match):
    with pytest.raises(error, match=match):
        parse_user(value)


def test_config_checks_user_against_sensitive(t1d):
    with pytest.raises(InvalidParameterError, match=r'consistent"\] = "user" takes each row\'s user'):
        PrivatizerConfig(epsilon=1.0, model=t1d, sensitive={"epsilon": 0.5, "column": "s", "consistent": "user"})
    with pytest.raises(InvalidParameterError, match='others.* = "keep" releases the other positions unchanged'):
        PrivatizerConfig(
            epsilon=1.0,
            model=t1d,
            user={"column": "u", "budget": 3.0},
            sensitive={"epsilon": 0.5, "column": "s", "others": "keep"},
        )
    with pytest.raises(InvalidParameterError, match=r"consistent\"\] must be one of \[None, 'row', 'user'\]"):
        PrivatizerConfig(epsilon=1.0, model=t1d, sensitive={"epsilon": 0.5, "column": "s", "consistent": "yes"})
    cfg = PrivatizerConfig(
        epsilon=1.0, model=t1d, user={"column": "u"}, sensitive={"epsilon": 0.5, "column": "s", "consistent": "user"}
    )
    again = PrivatizerConfig.from_dict(cfg.to_dict())
    assert again == cfg and again.user_spec is not None and again.sensitive_spec.consistent == "user"
