"""Per-token claims, per-row totals and the privacy report (accounting.md).

A :class:`Claim` describes what one privatized token release guarantees; it is built from the
validated configuration and the public embedding space, never from data. :class:`Totals` adds up
what was released. :func:`build_report` turns both into the JSON report of accounting.md §4.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import InvalidParameterError
from .rng import STREAM_VERSION
from .version import __version__


__all__ = [
    "Claim",
    "combine_class_claims",
    "refuse_overflowing_epsilon",
    "Totals",
    "build_report",
    "format_report",
    "guarantee_statement",
    "recovery_statement",
    "NOT_COVERED",
    "ROW_GUARANTEE",
    "SELECTIVE_ROW_GUARANTEE",
    "selective_rows",
]

NOT_COVERED = [
    "The length of each text in tokens, word boundaries, the number of subword pieces per word, and the whitespace "
    "between words where the tokens hold none (WordPiece): the output text copies it from the input.",
    "The positions and identities of special and padding tokens.",
    "Passthrough tokens: the unknown token appears with its position, and so does a static-vector file's unknown "
    "word, as <unk> (passthrough='placeholder', the default) or verbatim (passthrough='keep'). They have no "
    "protection, and the report counts them.",
    "Columns other than the text column (labels, ids, metadata).",
    "Several rows from one person. Their losses add up.",
    "Releases outside this object: other runs without the same seed, other configs, or keep_original=True.",
    "An embedding matrix, sensitive-word list or calibration input that is not public. The guarantee assumes E "
    "and every data-independent choice are public.",
    "Floating-point and implementation side channels: Mironov's (2012) attack on released floats (vector), "
    "timing and memory. The claims hold in exact real arithmetic.",
    "An adversary who knows the seed (the key of every row's Philox stream).",
]

ROW_GUARANTEE = (
    "For two rows x, x' of the same length with the same special and passthrough positions and tokens, and any "
    "set S of outputs: P[M(x) in S] <= exp(dp_epsilon) * P[M(x') in S] + dp_delta (basic composition over the "
    "row's privatized positions)."
)

SELECTIVE_ROW_GUARANTEE = (
    "Selective privatization: for two rows x, x' of the same length with the same special and passthrough "
    "positions and tokens and the same class (sensitive or other) at every position, and any set S of outputs: "
    "P[M(x) in S] <= exp(dp_epsilon) * P[M(x') in S] + dp_delta, where dp_epsilon sums each privatized "
    "position's own class's epsilon_token (sensitive positions at sensitive.epsilon, the others at epsilon; basic "
    "composition). With others='keep' the other positions are released unchanged and dp_epsilon is null."
)

COMPOSITION = {"within_row": "basic", "across_rows": "parallel", "across_releases": "basic"}


@dataclass(frozen=True, kw_only=True)
class Claim:
    """The per-token promise of a configured mechanism (accounting.md §1).

    ``P[M(w) ∈ S] ≤ exp(epsilon_token)·P[M(w') ∈ S] + delta_token`` for all candidates w, w';
    metric-DP mechanisms also promise ``pair_bound(w, w')`` = ε·d(w, w').
    """

    guarantee: str  # "metric_dp", "dp", "umldp" or "none"
    metric: str | None
    epsilon: float
    delta: float | None
    epsilon_token: float | None
    delta_token: float
    certified: bool
    delta_per_projection: float | None = None
    # False: the per-token numbers bound no row (an uncertified calibration; santext_plus's unprotected tokens)
    rows_bounded: bool = True
    warnings: tuple[str, ...] = ()
    not_covered: tuple[str, ...] = ()
    pair_bound: Callable[[int, int], float] | None = field(default=None, compare=False, repr=False)

    def row_epsilon(self, dp_tokens: int) -> float | None:
        """``dp_epsilon`` of a row: one product (bit-identical across batch sizes); null when no bound exists
        (guarantee ``none``, or an uncertified calibration: accounting.md §2)."""
        if self.epsilon_token is None or not self.rows_bounded:
            return None
        return float(dp_tokens) * self.epsilon_token

    def row_delta(self, dp_tokens: int) -> float | None:
        """``dp_delta`` of a row, present only when δ_tok > 0; null when the row has no bound."""
        if self.delta_token <= 0 or not self.rows_bounded:
            return None
        return float(dp_tokens) * self.delta_token


CLASS_NOT_COVERED = (
    "Each position's piece class (word-initial or continuation): replacement stays inside the input token's "
    "class. The class follows from the word boundaries and pieces per word, which are released already."
)


def combine_class_claims(claims: Sequence[Claim], class_of: Sequence[int], local: Sequence[int]) -> Claim:
    """One claim for class-preserving replacement over per-class claims (accounting.md §1.3, space.md §7).

    Each class is its own metric space, so a token's loss is bounded by its class's ``epsilon_token``;
    the row columns use the largest (``dp_epsilon = dp_tokens · max_c ε_tok,c``), a bound for every
    position whatever its class. ``pair_bound(a, b)`` (positions in C) is the class's own bound for two
    candidates of one class and ∞ across classes, whose pairs differ in a released class.
    """
    first = claims[0]
    eps_tok = [c.epsilon_token for c in claims]
    pair = None
    if all(c.pair_bound is not None for c in claims):

        def pair(a: int, b: int) -> float:
            ca, cb = class_of[a], class_of[b]
            if ca != cb:
                return math.inf
            bound = claims[ca].pair_bound
            assert bound is not None
            return bound(local[a], local[b])

    def unique(items: Sequence[str]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(items))

    return Claim(
        guarantee=first.guarantee,
        metric=first.metric,
        epsilon=first.epsilon,
        delta=first.delta,
        epsilon_token=None if any(e is None for e in eps_tok) else max(e for e in eps_tok if e is not None),
        delta_token=max(c.delta_token for c in claims),
        certified=all(c.certified for c in claims),
        delta_per_projection=max(
            (c.delta_per_projection for c in claims if c.delta_per_projection is not None), default=None
        ),
        rows_bounded=all(c.rows_bounded for c in claims),
        warnings=unique([w for c in claims for w in c.warnings]),
        not_covered=unique([*[n for c in claims for n in c.not_covered], CLASS_NOT_COVERED]),
        pair_bound=pair,
    )


def selective_rows(
    n_sens: np.ndarray, n_other: np.ndarray, sens: Claim, other: Claim | None
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Each row's ``(dp_epsilon, dp_delta)`` under selective privatization (selective.md §6): the sum over its
    positions of their class's per-token bound, ``n_s·ε_tok,s + n_o·ε_tok,o`` (basic composition; not the
    largest class's bound times the count). ``other`` is ``None`` with ``others="keep"``: the rows have no
    finite ε (``None``), as a class released unchanged has none."""
    e_s, e_o = sens.row_epsilon(1), None if other is None else other.row_epsilon(1)
    ns, no = n_sens.astype(np.float64), n_other.astype(np.float64)
    with np.errstate(invalid="ignore"):  # 0 · ∞ is nan, as for a Python float (ε = ∞ in test mode)
        eps = None if e_s is None or e_o is None else ns * e_s + no * e_o
        deltas = None
        if other is None or not other.rows_bounded or not sens.rows_bounded:
            deltas = None
        elif sens.delta_token > 0 or other.delta_token > 0:
            deltas = ns * sens.delta_token + no * other.delta_token
    return eps, deltas


@dataclass
class Totals:
    """What was released, added up over rows (accounting.md §4 ``totals``)."""

    rows: int = 0
    dp_tokens: int = 0
    special_tokens: int = 0
    padding_tokens: int = 0
    passthrough_tokens: int = 0
    max_row_dp_tokens: int = 0
    max_row_dp_epsilon: float | None = 0.0
    max_row_dp_delta: float | None = None
    #: selective privatization: positions released as sensitive, and other candidate positions released
    #: unchanged (``others="keep"``); both 0 without ``sensitive``
    sensitive_tokens: int = 0
    kept_other_tokens: int = 0

    def add_row(
        self,
        *,
        dp_tokens: int,
        special: int,
        padding: int,
        passthrough: int,
        epsilon: float | None,
        delta: float | None,
        sensitive: int = 0,
        kept_other: int = 0,
    ) -> None:
        self.rows += 1
        self.sensitive_tokens += sensitive
        self.kept_other_tokens += kept_other
        self.dp_tokens += dp_tokens
        self.special_tokens += special
        self.padding_tokens += padding
        self.passthrough_tokens += passthrough
        self.max_row_dp_tokens = max(self.max_row_dp_tokens, dp_tokens)
        if epsilon is None:
            self.max_row_dp_epsilon = None
        elif self.max_row_dp_epsilon is not None:
            self.max_row_dp_epsilon = max(self.max_row_dp_epsilon, epsilon)
        if delta is not None:
            self.max_row_dp_delta = delta if self.max_row_dp_delta is None else max(self.max_row_dp_delta, delta)

    def add_rows(
        self,
        dp_tokens: np.ndarray,
        special: np.ndarray,
        padding: np.ndarray,
        passthrough: np.ndarray,
        epsilon: np.ndarray | None,
        delta: np.ndarray | None,
        sensitive: np.ndarray | None = None,
        kept_other: np.ndarray | None = None,
    ) -> None:
        """:meth:`add_row` for a batch's rows at once (int arrays; ``epsilon``/``delta`` None: the rows have none).

        A row without privatized tokens adds ε = δ = 0 (or nan, 0 · ∞), which never raises a maximum.
        """
        if dp_tokens.size == 0:
            return
        if sensitive is not None:
            self.sensitive_tokens += int(sensitive.sum())
        if kept_other is not None:
            self.kept_other_tokens += int(kept_other.sum())
        some = dp_tokens > 0
        self.rows += int(dp_tokens.size)
        self.dp_tokens += int(dp_tokens.sum())
        self.special_tokens += int(special.sum())
        self.padding_tokens += int(padding.sum())
        self.passthrough_tokens += int(passthrough.sum())
        self.max_row_dp_tokens = max(self.max_row_dp_tokens, int(dp_tokens.max()))
        if epsilon is None:
            self.max_row_dp_epsilon = None
        elif self.max_row_dp_epsilon is not None and some.any():
            self.max_row_dp_epsilon = max(self.max_row_dp_epsilon, float(epsilon[some].max()))
        if delta is not None:
            top = float(delta[some].max()) if some.any() else 0.0
            self.max_row_dp_delta = top if self.max_row_dp_delta is None else max(self.max_row_dp_delta, top)

    def merge(self, other: Totals) -> None:
        self.rows += other.rows
        self.dp_tokens += other.dp_tokens
        self.special_tokens += other.special_tokens
        self.padding_tokens += other.padding_tokens
        self.passthrough_tokens += other.passthrough_tokens
        self.sensitive_tokens += other.sensitive_tokens
        self.kept_other_tokens += other.kept_other_tokens
        self.max_row_dp_tokens = max(self.max_row_dp_tokens, other.max_row_dp_tokens)
        if self.max_row_dp_epsilon is None or other.max_row_dp_epsilon is None:
            self.max_row_dp_epsilon = None
        else:
            self.max_row_dp_epsilon = max(self.max_row_dp_epsilon, other.max_row_dp_epsilon)
        if other.max_row_dp_delta is not None:
            self.max_row_dp_delta = (
                other.max_row_dp_delta
                if self.max_row_dp_delta is None
                else max(self.max_row_dp_delta, other.max_row_dp_delta)
            )

    def to_dict(self) -> dict[str, Any]:
        selective = {"sensitive_tokens": self.sensitive_tokens, "kept_other_tokens": self.kept_other_tokens}
        return {
            **(selective if self.sensitive_tokens or self.kept_other_tokens else {}),
            "rows": self.rows,
            "dp_tokens": self.dp_tokens,
            "special_tokens": self.special_tokens,
            "padding_tokens": self.padding_tokens,
            "passthrough_tokens": self.passthrough_tokens,
            "max_row_dp_tokens": self.max_row_dp_tokens,
            "max_row_dp_epsilon": self.max_row_dp_epsilon,
            "max_row_dp_delta": self.max_row_dp_delta,
        }


def refuse_overflowing_epsilon(claim: Claim, epsilon: float, claim_at: Callable[[float], Claim]) -> None:
    """Refuse an ``epsilon`` whose per-token bound ``claim.epsilon_token`` (ε·diam, …) overflows to infinity:
    such a release carries no privacy (the noise is nothing next to the space) and its report could state no
    bound. ``claim_at(e)`` is the claim at another epsilon; the message names the largest finite one, found by
    bisection on a log scale (ε_tok grows with ε)."""
    if claim.epsilon_token is None or math.isfinite(claim.epsilon_token) or math.isinf(epsilon):
        return  # epsilon = inf is the documented test mode (no noise), which says so itself
    lo, hi = min(1.0, epsilon / 2), float(epsilon)
    for _ in range(80):
        mid = math.sqrt(lo) * math.sqrt(hi)  # the geometric mean, without overflowing lo·hi
        if not lo < mid < hi:
            break
        tok = claim_at(mid).epsilon_token
        lo, hi = (mid, hi) if tok is not None and math.isfinite(tok) else (lo, mid)
    raise InvalidParameterError(
        f"epsilon too large: the release would carry no privacy (its per-token bound epsilon_token overflows to "
        f"infinity at epsilon={epsilon!r}); the largest epsilon with a finite bound here is {lo!r}."
    )


def _num(x: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return float(x)


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


def build_report(
    *,
    mechanism: str,
    parameters: dict[str, Any],
    postprocess: str,
    postprocess_parameters: dict[str, Any],
    claim: Claim,
    details: dict[str, Any],
    candidate_set: dict[str, Any],
    model: dict[str, Any],
    scale: dict[str, Any],
    totals: Totals,
    projection: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
    measured_recovery: dict[str, Any] | None = None,
    sensitive: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Assemble the report of accounting.md §4 (JSON-ready; never holds the seed or any text).

    ``measured_recovery``: the attack table's entry for this configuration (hf_textdp/io/attack_table.py),
    quoted as it is; absent when the configuration was not measured.
    """
    report: dict[str, Any] = {
        "report_version": 1,
        "hf_textdp_version": __version__,
        "stream_version": STREAM_VERSION,
        "mechanism": mechanism,
        "parameters": dict(sorted(parameters.items())),
        "postprocess": postprocess,
        "postprocess_parameters": dict(sorted(postprocess_parameters.items())),
        "metric": claim.metric,
        "epsilon": _num(claim.epsilon),
        "delta": _num(claim.delta) if claim.delta else None,
        "delta_per_projection": claim.delta_per_projection,
        "guarantee": claim.guarantee,
        "certified": claim.certified,
        "warnings": list(claim.warnings),
        "epsilon_token": _num(claim.epsilon_token),
        "delta_token": _num(claim.delta_token) if claim.epsilon_token is not None else None,
        "details": details,
        "row_guarantee": ROW_GUARANTEE,
        "composition": dict(COMPOSITION),
        "candidate_set": candidate_set,
        "model": model,
        "projection": projection,
        "scale": scale,
        "totals": totals.to_dict(),
        "not_covered": NOT_COVERED + list(claim.not_covered),
    }
    if sensitive is not None:  # selective privatization (selective.md §6): both classes and what selection shows
        report["sensitive"] = sensitive
        report["row_guarantee"] = SELECTIVE_ROW_GUARANTEE
        report["not_covered"].append(sensitive["statement"])
    if training is not None:
        report["training"] = training
    if measured_recovery is not None:
        report["measured_recovery"] = measured_recovery
    return report


def _g(x: Any) -> str:
    return "null" if x is None else f"{x:.4g}" if isinstance(x, float) else str(x)


def guarantee_statement(report: dict[str, Any]) -> str:
    """One sentence saying what the report's mechanism proves per token, in its own terms (accounting.md §1).

    Read from the report (the claim the mechanism computed), never re-derived: metric DP names its
    metric, TEM its truncation γ, santext_plus the tokens it does not protect, and an uncertified or
    ``none`` guarantee says so.
    """
    mech, guarantee, metric = report.get("mechanism"), report.get("guarantee"), report.get("metric")
    eps, eps_tok = report.get("epsilon"), report.get("epsilon_token")
    details = report.get("details") or {}
    scale = report.get("scale") or {}
    if guarantee == "none":
        return "none: this output carries no privacy guarantee (see warnings)."
    if guarantee == "umldp":
        return (
            f"UMLDP (santext_plus): sensitive tokens get ε·d(w, w') + ln(1/p) metric DP in the Euclidean distance "
            f"(ε = {_g(eps)}, ln(1/p) = {_g(details.get('epsilon0'))}); non-sensitive tokens are released unchanged "
            "with probability 1 - p and have NO finite ε. ε_tok below bounds the sensitive tokens only."
        )
    if guarantee == "metric_dp":
        if metric == "mahalanobis":
            head = (
                f"metric DP in the Mahalanobis distance d_M(w, w') = ||M^(-1/2)(E_w - E_w')|| (not the Euclidean "
                f"one): P[M(w) in S] <= exp(ε·d_M(w, w'))·P[M(w') in S], ε = {_g(eps)}"
            )
            formula, basis = "ε·diam_M", f"diam_M = {_g(details.get('diam_M'))}"
        else:
            head = (
                f"metric DP in the Euclidean distance between embedding rows: P[M(w) in S] <= "
                f"exp(ε·d(w, w'))·P[M(w') in S], ε = {_g(eps)}"
            )
            if mech == "tem":
                formula, basis = "ε·min(diam, γ)", f"diam = {_g(scale.get('diam'))}, γ = {_g(details.get('gamma'))}"
            else:
                formula, basis = "ε·diam", f"diam = {_g(scale.get('diam'))}"
        if (report.get("candidate_set") or {}).get("per_class"):
            tok = f"ε_tok = {formula} over each piece class's own space, the largest {_g(eps_tok)} (see classes)"
        else:
            tok = f"ε_tok = {formula} = {_g(eps_tok)} ({basis})"
        return f"{head}; {tok}."
    delta_tok = report.get("delta_token")
    what = f"(ε, δ)-DP per token, δ_tok = {_g(delta_tok)}" if delta_tok else "ε-DP per token"
    return f"{what}: ε_tok = {_g(eps_tok)} for any two candidate tokens."


def _class_list(report: dict[str, Any]) -> str:
    """``word_initial ε_tok 187 (diam 2.34, …), continuation …`` from ``candidate_set.per_class``."""
    return ", ".join(
        f"{c['name']} ε_tok {_g(c.get('epsilon_token'))} (diam {_g(c.get('diam'))}, {c.get('size')} tokens)"
        for c in (report.get("candidate_set") or {}).get("per_class") or []
    )


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


def format_report(report: dict[str, Any], *, source: str | None = None) -> str:
    """A readable summary of a privacy report: what was guaranteed, per-token and per-row ε, what is not
    covered, and the kept/replaced share where the report knows it. ``hf-textdp report`` prints it."""
    totals = report.get("totals") or {}
    model = report.get("model") or {}
    cands = report.get("candidate_set") or {}
    rows = int(totals.get("rows") or 0)
    dp_tokens = int(totals.get("dp_tokens") or 0)
    lines = [f"Privacy report{f' for {source}' if source else ''}"]
    lines.append(
        f"  mechanism:   {report.get('mechanism')} + {report.get('postprocess')}, model {model.get('id')} "
        f"(d = {model.get('d')}, {cands.get('size')} candidate tokens)"
    )
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
    sens = report.get("sensitive")
    kept_others = bool(sens and sens.get("others") == "keep")
    if kept_others:  # no token was privatized at the config's epsilon: it names no token's guarantee
        lines.append(
            "  guarantee:   sensitive positions only (see sensitive); the other positions are released unchanged, "
            "with no protection"
        )
    else:
        lines.append(f"  guarantee:   {guarantee_statement(report)}")
    lines.extend(_sensitive_lines(report, sens, totals) if sens else [])
    lines.extend([f"  users:       {report['users']['summary']}"] if report.get("users") else [])  # users.md §6
    certified = report.get("certified")
    lines.append(
        "  certified:   "
        + ("yes" if certified else "NO: the stated ε/δ are not proven for this configuration (see warnings)")
    )
    eps_tok = report.get("epsilon_token")
    if eps_tok is None:
        lines.append("  per row:     no finite dp_epsilon (dp_epsilon is null)")
    elif rows and totals.get("max_row_dp_epsilon") is None:
        lines.append(
            "  per row:     no row bound (dp_epsilon is null): the per-token numbers above do not bound a row "
            "(uncertified calibration, or tokens released with no finite ε)"
        )
    else:
        mean = dp_tokens / rows if rows else 0.0
        lines.append(
            f"  per row:     dp_epsilon = dp_tokens x ε_tok (basic composition); {rows} rows, "
            f"{mean:.1f} privatized tokens per row on average, largest row dp_epsilon "
            f"{_g(totals.get('max_row_dp_epsilon'))} ({totals.get('max_row_dp_tokens')} tokens)"
            + (f", largest dp_delta {_g(totals.get('max_row_dp_delta'))}" if totals.get("max_row_dp_delta") else "")
        )
        lines.append(
            "               the per-token statement above is the meaningful one; the row figure is a worst case "
            "over all pairs of rows of the same length"
        )
    passthrough, kept_other = int(totals.get("passthrough_tokens") or 0), int(totals.get("kept_other_tokens") or 0)
    lines.append(
        f"  tokens:      {dp_tokens} privatized, {passthrough + kept_other} unprotected ("
        + (f"{kept_other} released unchanged by others='keep', " if kept_other else "")
        + f"{passthrough} passed through), {totals.get('special_tokens', 0)} special"
    )
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
    for warning in report.get("warnings") or []:
        lines.append(f"  WARNING:     {warning}")
    lines.append("  not covered:")
    lines.extend(f"    - {item}" for item in report.get("not_covered") or [])
    lines.append("  (raw report: --json)")
    return "\n".join(lines) + "\n"
