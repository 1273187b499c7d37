"""Per-token claims, per-row totals and the privacy report (accounting.md).

A :class:`Claim` describes what one privatized token release guarantees; it is built from the
validated configuration and the public embedding space, never from data. :class:`Totals` adds up
what was released. :func:`build_report` turns both into the JSON report of accounting.md §4; the report in
words (``hf-textdp report``, the ε story) is :mod:`hf_textdp.integrations.report_text`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .rng import STREAM_VERSION
from .version import __version__


__all__ = [
    "Claim",
    "combine_class_claims",
    "Totals",
    "build_report",
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


def _num(x: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return float(x)


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
