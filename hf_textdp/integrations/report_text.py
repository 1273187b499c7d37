"""The privacy report in words: the three ε of a release, the per-token guarantee, what attacks recovered, and the
summary ``hf-textdp report`` prints (accounting.md §4; the numbers come from :mod:`hf_textdp.accounting`).

**One ε story, in the same words everywhere** (the ``privatize`` summary, ``hf-textdp report``, the dataset card,
README and getting_started): :func:`epsilon_lines` gives

- ``ε``: **your setting**, the ``epsilon`` you chose (per unit of embedding distance for metric DP);
- ``ε_tok``: the **per-token bound**, ε times the factor the mechanism's space gives it (``ε × diameter`` for
  madlib): two tokens' releases differ in probability by at most ``exp(ε_tok)``;
- ``dp_epsilon``: the **row bound**, ``dp_tokens × ε_tok`` (basic composition), the largest row's.

Each is a labelled :class:`EpsilonLine`, so a release with more classes (selective privatization) adds a line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


__all__ = [
    "EPSILON_LABELS",
    "EpsilonLine",
    "epsilon_lines",
    "epsilon_table",
    "format_report",
    "guarantee_statement",
    "recovery_statement",
    "READING",
]

#: the label of each ε, the same in every place that shows it
EPSILON_LABELS = {"ε": "your setting", "ε_tok": "per-token bound", "dp_epsilon": "row bound"}

#: how to read the three numbers, for whoever knows ε from DP-SGD (opacus: ε ≈ 1-10 per training run)
READING = (
    "ε_tok is what protects one token; the row bound adds up every token of a row changing at once, so it runs to "
    "thousands for real sentences and is not comparable to DP-SGD's ε. Choose ε by what it replaces and what an "
    "attacker recovers (hf-textdp calibrate; docs/attacks.md), not by these numbers alone."
)


def _g(x: Any) -> str:
    return "null" if x is None else f"{x:.4g}" if isinstance(x, float) else str(x)


@dataclass(frozen=True)
class EpsilonLine:
    """One labelled ε of a release: ``symbol`` (``ε``, ``ε_tok``, ``dp_epsilon``), its ``relation`` and value
    (``= 234``, ``≤ 1.17e+04``), its ``label`` (:data:`EPSILON_LABELS`) and how it follows (``how``)."""

    symbol: str
    value: str
    label: str
    how: str = ""

    def text(self, width: int = 0) -> str:
        """``ε_tok = 234   per-token bound = ε × diameter 2.34`` (``width`` aligns the labels)."""
        head = f"{self.symbol} {self.value}"
        return f"{head.ljust(width)}  {self.label}" + (f" = {self.how}" if self.how else "")


def _token_factor(report: dict[str, Any], eps: Any, tok: Any, sym: str = "ε") -> str:
    """How the per-token bound ``tok`` follows from the setting ``eps`` (named ``sym``) for the report's mechanism
    (read from the report, never re-derived)."""
    guarantee, mech = report.get("guarantee"), report.get("mechanism")
    details, scale = report.get("details") or {}, report.get("scale") or {}
    if guarantee == "dp":
        return f"{sym} (the noise is calibrated to one token)"
    if guarantee == "umldp":
        return (
            f"{sym} × diameter {_g(scale.get('diam'))} + ln(1/p) {_g(details.get('epsilon0'))}, sensitive tokens only"
        )
    factor = _g(tok / eps) if isinstance(eps, float) and isinstance(tok, float) and eps and math.isfinite(eps) else "?"
    classes = len((report.get("candidate_set") or {}).get("per_class") or [])
    widest = f", the widest of {classes} piece classes" if classes > 1 else ""
    if report.get("metric") == "mahalanobis":
        return f"{sym} × Mahalanobis diameter {factor}{widest}"
    if mech == "tem":
        return f"{sym} × min(diameter, γ) = {sym} × {factor}{widest}"
    if mech == "privemb":
        return f"{sym} × projected diameter / s = {sym} × {factor}{widest}"
    return f"{sym} × diameter {factor}{widest}"


def _row_line(report: dict[str, Any]) -> EpsilonLine:
    totals = report.get("totals") or {}
    label = EPSILON_LABELS["dp_epsilon"]
    kept = (report.get("sensitive") or {}).get("others") == "keep"
    if report.get("epsilon_token") is None or (totals.get("rows") and totals.get("max_row_dp_epsilon") is None):
        why = (
            "the other positions are released unchanged, with no finite ε"
            if kept
            else "the per-token numbers do not bound a row (uncertified calibration, or tokens released with no "
            "finite ε)"
        )
        return EpsilonLine("dp_epsilon", "null", label, f"none: {why}")
    if not totals.get("rows"):
        return EpsilonLine("dp_epsilon", "–", label, "dp_tokens × ε_tok (no rows released yet)")
    if report.get("sensitive"):  # each position at its own class's ε_tok (selective.md §6)
        how = "the sum of each position's ε_tok (sensitive or other), the largest row (basic composition)"
    else:
        how = f"{totals.get('max_row_dp_tokens')} tokens × ε_tok, the largest row (basic composition)"
    delta = totals.get("max_row_dp_delta")
    how += f" (dp_delta ≤ {_g(delta)})" if delta else ""
    return EpsilonLine("dp_epsilon", f"≤ {_g(totals.get('max_row_dp_epsilon'))}", label, how)


def _class_lines(report: dict[str, Any], eps: Any, tok: Any, sym: str, whose: str) -> list[EpsilonLine]:
    """The setting and the per-token bound of one class of positions (``whose``: "" or ", sensitive positions")."""
    lines = [EpsilonLine(sym, f"= {_g(eps)}", EPSILON_LABELS["ε"] + whose)]
    tok_sym = "ε_tok" + ("" if sym == "ε" else f",{sym[2:]}")
    if report.get("guarantee") == "none" or tok is None:
        return [*lines, EpsilonLine(tok_sym, "none", EPSILON_LABELS["ε_tok"] + whose, "this release proves no bound")]
    delta_tok = report.get("delta_token")
    value = f"= {_g(tok)}" + (f", δ_tok = {_g(delta_tok)}" if delta_tok else "")
    return [*lines, EpsilonLine(tok_sym, value, EPSILON_LABELS["ε_tok"] + whose, _token_factor(report, eps, tok, sym))]


def epsilon_lines(report: dict[str, Any]) -> list[EpsilonLine]:
    """The ε story of a report: your setting, the per-token bound with its factor, the row bound (module doc).

    Selective privatization (selective.md §6) states each class: the sensitive positions' ``ε_s`` and ``ε_tok,s``,
    then the other positions' ``ε`` and ``ε_tok``, or, with ``others="keep"``, that they were released unchanged
    (the config's ε is then named nowhere: no token was privatized at it).
    """
    sens = report.get("sensitive")
    if not sens:
        lines = _class_lines(report, report.get("epsilon"), report.get("epsilon_token"), "ε", "")
        return [*lines, _row_line(report)]
    lines = _class_lines(report, sens.get("epsilon"), sens.get("epsilon_token"), "ε_s", ", sensitive positions")
    if sens.get("others") == "keep":
        kept = (report.get("totals") or {}).get("kept_other_tokens", 0)
        lines.append(EpsilonLine("others", "unprotected", f"{kept} tokens released unchanged, no protection"))
    else:
        whose = ", other positions"
        lines += _class_lines(report, report.get("epsilon"), report.get("epsilon_token"), "ε", whose)
    return [*lines, _row_line(report)]


def epsilon_table(report: dict[str, Any], indent: str = "  ") -> list[str]:
    """:func:`epsilon_lines` as aligned text lines (the ``privatize`` summary and ``hf-textdp report``)."""
    lines = epsilon_lines(report)
    width = max(len(f"{x.symbol} {x.value}") for x in lines)
    return [indent + x.text(width) for x in lines]


def _recovery(a: dict[str, Any]) -> str:
    """``62.6 % [62.1, 63.0]``: a measured recovery with its 95 % interval."""
    lo, hi = a["ci95"]
    return f"{100 * a['value']:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]"


def recovery_statement(entry: dict[str, Any]) -> str:
    """One sentence: what each named attack recovered, with 95 % intervals, where it was measured, and that this is
    a lower bound on leakage (a stronger attack can recover more; docs/attacks.md §8)."""
    parts = []
    best: tuple[float, str] | None = None
    for name in ("identity", "bayes", "contextual", "inversion"):
        a = entry["attacks"].get(name)
        if a:
            parts.append(f"{name} {_recovery(a)}")
            best = max(best or (a["value"], name), (a["value"], name))
    extra = [f"; strongest: {best[1]}"] if best else []
    if entry.get("replaced"):  # the replaced tokens' recovery, by the attack strongest there
        name, a = max(entry["replaced"].items(), key=lambda kv: kv[1]["value"])
        extra.append(
            f"; of the {100 * entry['replacement_rate']:.1f} % replaced, {name} recovered {_recovery(a)} "
            "(the strongest there)"
        )
    ids = entry.get("identifiers")
    if ids and ids.get("attacks"):  # identifiers kept whole, by the attack strongest on them
        name, a = max(ids["attacks"].items(), key=lambda kv: kv[1]["value"])
        extra.append(
            f"; identifiers recovered whole (every token): {_recovery(a)} by {name} ({ids['set']}; {ids['record']})"
        )
    return (
        f"a lower bound on leakage from the named attacks: {', '.join(parts)} of the privatized tokens recovered"
        f"{''.join(extra)} ({entry['private']}, public text {', '.join(entry['public'])}; {entry['record']}; "
        "docs/attacks.md); a stronger attack can recover more"
    )


def guarantee_statement(report: dict[str, Any]) -> str:
    """One sentence saying what the report's mechanism proves per token, in its own terms (accounting.md §1).

    Read from the report (the claim the mechanism computed), never re-derived: metric DP names its
    metric, TEM its truncation γ, santext_plus the tokens it does not protect, and an uncertified or
    ``none`` guarantee says so. The numbers themselves are :func:`epsilon_lines`'.
    """
    guarantee, metric = report.get("guarantee"), report.get("metric")
    details = report.get("details") or {}
    if guarantee == "none":
        return "none: this output carries no privacy guarantee (see warnings)."
    if guarantee == "umldp":
        return (
            "UMLDP (santext_plus): sensitive tokens get ε·d(w, w') + ln(1/p) metric DP in the Euclidean distance "
            f"(ln(1/p) = {_g(details.get('epsilon0'))}); non-sensitive tokens are released unchanged with "
            "probability 1 - p and have NO finite ε. ε_tok bounds the sensitive tokens only."
        )
    if guarantee == "metric_dp":
        if metric == "mahalanobis":
            return (
                "metric DP in the Mahalanobis distance d_M(w, w') = ||M^(-1/2)(E_w - E_w')|| (not the Euclidean one): "
                "P[M(w) in S] <= exp(ε·d_M(w, w'))·P[M(w') in S], so at most exp(ε_tok) for any two tokens."
            )
        per_class = " within its piece class" if (report.get("candidate_set") or {}).get("per_class") else ""
        return (
            "metric DP in the Euclidean distance between embedding rows: P[M(w) in S] <= exp(ε·d(w, w'))·P[M(w') in S]"
            f" for any two candidate tokens w, w'{per_class}, so at most exp(ε_tok)."
        )
    what = "(ε, δ)-DP per token" if report.get("delta_token") else "ε-DP per token"
    return f"{what}: P[M(w) in S] <= exp(ε_tok)·P[M(w') in S] (+ δ_tok) for any two candidate tokens."


def _class_list(report: dict[str, Any]) -> str:
    """``word_initial ε_tok 187 (diam 2.34, …), continuation …`` from ``candidate_set.per_class``."""
    return ", ".join(
        f"{c['name']} ε_tok {_g(c.get('epsilon_token'))} (diam {_g(c.get('diam'))}, {c.get('size')} tokens)"
        for c in (report.get("candidate_set") or {}).get("per_class") or []
    )


def _candidate_lines(report: dict[str, Any]) -> list[str]:
    model = report.get("model") or {}
    cands = report.get("candidate_set") or {}
    lines = [
        f"  mechanism:   {report.get('mechanism')} + {report.get('postprocess')}, model {model.get('id')} "
        f"(d = {model.get('d')}, {cands.get('size')} candidate tokens)"
    ]
    outside = int(cands.get("inputs_outside") or 0)
    lines.append(
        f"  candidates:  {cands.get('setting') or 'all'}"
        + (f", scripts {'+'.join(cands['scripts'])}" if cands.get("scripts") else "")
        + (", all scripts" if cands.get("scripts_from") and not cands.get("scripts") else "")
        + (f" ({cands['scripts_from']})" if cands.get("scripts_from") not in (None, "given") else "")
        + (
            f"; {outside} vocabulary tokens outside the set are privatized, where they occur, as their nearest "
            "candidate (ε_tok bounds them; the metric bound ε·d holds between candidates)"
            if outside
            else ""
        )
    )
    if cands.get("per_class"):
        lines.append(
            f"  classes:     replacement stays inside the input's piece class, each its own metric space: "
            f"{_class_list(report)}"
        )
    return lines


def _sensitive_lines(report: dict[str, Any], sens: dict[str, Any], totals: dict[str, Any]) -> list[str]:
    """Selective privatization's lines (selective.md §6): each class's ε, the detectors that ran and the kinds none
    of them finds, what the selection reveals."""
    others = (
        f"others: {int(totals.get('dp_tokens') or 0) - int(totals.get('sensitive_tokens') or 0)} tokens at ε "
        f"{_g(report.get('epsilon'))}, ε_tok {_g(report.get('epsilon_token'))}"
        if sens.get("others") == "privatize"
        else f"others: {totals.get('kept_other_tokens', 0)} tokens released unchanged, no protection"
    )
    found = ", ".join(f"{d['name']} ({d['reads']})" for d in sens.get("detectors") or [])
    missing = ", ".join(sens.get("cannot_find") or []) or "none of the listed kinds"
    left = "; ".join(f"{x['name']}: {x['reason']}" for x in sens.get("left_out") or [])
    return [
        f"  sensitive:   {totals.get('sensitive_tokens', 0)} tokens at ε_s {_g(sens.get('epsilon'))} per token, ε_tok "
        f"{_g(sens.get('epsilon_token'))}; {others}",
        f"  detectors:   {found or 'none'}"
        + (f", span column {sens['column']!r}" if sens.get("column") else "")
        + f"; kinds none of them finds: {missing}"
        + (f"; left out of the default set: {left}" if left else ""),
        f"  selection:   {sens.get('statement')}",
    ]


def _guarantee_lines(report: dict[str, Any]) -> list[str]:
    """The per-token guarantee in words and how to read the numbers (with ``others="keep"`` no token was privatized
    at the config's ε: the guarantee names the sensitive positions alone), then the selective lines."""
    sens = report.get("sensitive")
    if sens and sens.get("others") == "keep":
        lines = [
            "  guarantee:   sensitive positions only (see sensitive); the other positions are released unchanged, "
            "with no protection"
        ]
    else:
        lines = [f"  guarantee:   {guarantee_statement(report)}"]
    lines.append(f"  reading:     {READING}")
    lines += _sensitive_lines(report, sens, report.get("totals") or {}) if sens else []
    return lines + ([f"  users:       {report['users']['summary']}"] if report.get("users") else [])  # users.md §6


def _release_lines(report: dict[str, Any]) -> list[str]:
    """Certification, token counts, measured recovery and the kept share."""
    totals = report.get("totals") or {}
    rows, dp_tokens = int(totals.get("rows") or 0), int(totals.get("dp_tokens") or 0)
    passthrough, kept_other = int(totals.get("passthrough_tokens") or 0), int(totals.get("kept_other_tokens") or 0)
    lines = [
        "  certified:   "
        + (
            "yes"
            if report.get("certified")
            else "NO: the stated ε/δ are not proven for this configuration (see warnings)"
        ),
        f"  tokens:      {dp_tokens} privatized, {passthrough + kept_other} unprotected ("
        + (f"{kept_other} released unchanged by others='keep', " if kept_other else "")
        + f"{passthrough} passed through), {totals.get('special_tokens', 0)} special; "
        f"{dp_tokens / rows if rows else 0.0:.1f} privatized per row on average",
    ]
    if report.get("measured_recovery"):
        lines.append(f"  attacks:     {recovery_statement(report['measured_recovery'])}")
    kept = totals.get("kept_tokens")
    if kept is not None and dp_tokens:
        lines.append(
            f"  kept:        {kept / dp_tokens:.1%} of privatized tokens kept, {1 - kept / dp_tokens:.1%} replaced"
        )
    else:
        lines.append(
            "  kept:        not recorded (the report holds nothing computed from the original text); expected "
            f"rate from the public matrix: hf-textdp calibrate --mechanism {report.get('mechanism')} --epsilons "
            f"{_g(report.get('epsilon'))}"
        )
    return lines


def format_report(report: dict[str, Any], *, source: str | None = None) -> str:
    """A readable summary of a privacy report: the three ε (:func:`epsilon_lines`), the per-token guarantee, what
    is not covered, and the kept/replaced share where the report knows it. ``hf-textdp report`` prints it."""
    lines = [f"Privacy report{f' for {source}' if source else ''}", *_candidate_lines(report)]
    lines.append("  epsilon:")
    lines.extend(epsilon_table(report, indent="    "))
    lines.extend(_guarantee_lines(report))
    lines.extend(_release_lines(report))
    for warning in report.get("warnings") or []:
        lines.append(f"  WARNING:     {warning}")
    lines.append("  not covered:")
    lines.extend(f"    - {item}" for item in report.get("not_covered") or [])
    lines.append("  (raw report: --json)")
    return "\n".join(lines) + "\n"
