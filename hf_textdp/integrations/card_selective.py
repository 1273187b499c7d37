"""The dataset card's rows for selective privatization (docs/mechanisms/selective.md): the sensitive class's ε and
count, what the other positions get, and what the selection reveals, read from the privacy report."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..sensitive.describe import card_fields


__all__ = ["sensitive_rows"]


def sensitive_rows(report: dict[str, Any], _fmt: Callable[[Any], str]) -> dict[str, Any] | None:
    """The card's selective-privatization rows (docs/mechanisms/selective.md): both classes and the selection;
    ``_fmt`` formats a number as the card does."""
    sens = report.get("sensitive")
    if not sens:
        return None
    totals = report.get("totals") or {}
    found = [f"{d['name']} ({d['reads']})" for d in sens.get("detectors") or []]
    if sens.get("column"):
        found.append(f"span column `{sens['column']}`")
    if sens.get("others") == "keep":
        others = f"{_fmt(totals.get('kept_other_tokens', 0))} tokens released **unchanged**, no protection"
    else:
        n_other = int(totals.get("dp_tokens") or 0) - int(totals.get("sensitive_tokens") or 0)
        others = f"{n_other} tokens at ε = {_fmt(report.get('epsilon'))}, ε_token {_fmt(report.get('epsilon_token'))}"
    return {
        "line": (
            f"{_fmt(totals.get('sensitive_tokens', 0))} tokens at ε = {_fmt(sens.get('epsilon'))}, ε_token "
            f"{_fmt(sens.get('epsilon_token'))}; selected by {', '.join(found) or 'none'}"
        ),
        "others": others,
        "statement": sens.get("statement"),
        **card_fields(report, _fmt),
    }
