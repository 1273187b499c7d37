"""How a selective release describes itself: each class's ε and the detectors that ran (issue 54 item 5).

Read from a privacy report's ``sensitive`` section and totals, for the summary line and the dataset card
(``hf-textdp report`` words the same in :func:`hf_textdp.accounting.format_report`). The config's ``epsilon`` is
named only as the others' ε, and only when they were privatized at it; kept tokens are called unprotected.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


__all__ = ["class_epsilons", "detectors_summary", "card_fields"]

Fmt = Callable[[Any], str]


def _g(x: Any) -> str:
    return "null" if x is None else f"{x:.4g}" if isinstance(x, float) else str(x)


def class_epsilons(report: dict[str, Any], fmt: Fmt = _g) -> str:
    """``"sensitive: 12 tokens at epsilon_s=1 per token; others: 80 tokens at epsilon=90 per token"`` or
    ``"…; others: 80 tokens released unchanged, no protection"``."""
    sens = report.get("sensitive") or {}
    totals = report.get("totals") or {}
    n_sens = int(totals.get("sensitive_tokens") or 0)
    head = f"sensitive: {n_sens} tokens at epsilon_s={fmt(sens.get('epsilon'))} per token"
    if sens.get("others") == "keep":
        return f"{head}; others: {totals.get('kept_other_tokens', 0)} tokens released unchanged, no protection"
    n_other = int(totals.get("dp_tokens") or 0) - n_sens
    return f"{head}; others: {n_other} tokens at epsilon={fmt(report.get('epsilon'))} per token"


def detectors_summary(sens: dict[str, Any]) -> str:
    """``"detectors email, …, rare; none finds: person name"`` (and the default set's detectors left out)."""
    names = [d["name"] for d in sens.get("detectors") or []]
    if sens.get("column"):
        names.append(f"span column {sens['column']!r}")
    out = f"detectors {', '.join(names) or 'none'}"
    missing = sens.get("cannot_find") or []
    out += f"; none finds: {', '.join(missing)}" if missing else "; every listed kind has a detector"
    left = [x["name"] for x in sens.get("left_out") or []]
    return out + (f"; left out of the default set here: {', '.join(left)}" if left else "")


def card_fields(report: dict[str, Any], fmt: Fmt) -> dict[str, Any]:
    """The card's selective fields: the intro's ε wording, the ε row, the detectors row and the YAML block."""
    sens = report.get("sensitive") or {}
    others_eps = report.get("epsilon") if sens.get("others") == "privatize" else None
    others = (
        f"other positions at ε = {fmt(others_eps)} per token"
        if others_eps is not None
        else "other positions released unchanged, no protection"
    )
    covers = [f"{d['name']} ({d['reads']}: {', '.join(d.get('covers') or [])})" for d in sens.get("detectors") or []]
    return {
        "intro": f"sensitive positions at ε_s = {fmt(sens.get('epsilon'))} per token, {others}",
        "epsilon_row": f"sensitive {fmt(sens.get('epsilon'))}; others "
        + (fmt(others_eps) if others_eps is not None else "released unchanged, no protection"),
        "detectors": "; ".join(covers) or "none",
        "cannot_find": ", ".join(sens.get("cannot_find") or []) or "none of the listed kinds",
        "yaml": {
            "epsilon": sens.get("epsilon"),
            "epsilon_token": sens.get("epsilon_token"),
            "detectors": [d["name"] for d in sens.get("detectors") or []],
            "span_column": sens.get("column"),
            "others": sens.get("others"),
            "others_epsilon": others_eps,
            "render": sens.get("render", "token"),
        },
    }
