"""Empirical privacy-loss audit (testing.md §3): is any output event more likely than the claim allows?

For each pair of candidates (w, w') the audit draws outputs of M(w) and M(w') through the
mechanism's own interfaces (``perturb`` + the post-processing step, or ``sample``), chooses up to
2·k_max candidate events on a *selection* half, and bounds the log probability ratio of each event
on an independent *estimation* half with one-sided Clopper–Pearson bounds, Bonferroni-corrected over
pairs and events. The claim under test is the mechanism's exact pairwise bound ``pair_bound(w, w')``
(accounting.md §1) with slack δ_tok. A correct mechanism fails with probability ≤ α whatever the sample
sizes; the sizes set only the power (testing.md §3 lists the fixtures and the power measured).

Vector outputs (``postprocess="vector"`` and the like) are reduced to the scalar ⟨z, u⟩ with the
public unit vector u from f(w) to f(w'), f being the noise-free release map, then binned at the
pooled quantiles of the selection draws (a public choice fixed before the estimation draws are read).

The reference implementation is ``docs/mechanisms/kat/audit.py``; this one makes batched torch draws from
per-pair keyed streams (audit_sampler.py) and tests each pair in audit_stats.py.

Example:

>>> from hf_textdp import PrivatizerConfig
>>> from hf_textdp.tools.audit import audit
>>> result = audit(PrivatizerConfig(epsilon=1.0, model="line.txt"), "line.txt", seed=1)  # doctest: +SKIP
>>> result.passed, round(result.worst_ratio, 3)                                           # doctest: +SKIP
(True, 0.9)
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch

from ..accounting import Claim
from ..config import PrivatizerConfig
from ..errors import InvalidParameterError, ParameterTypeError
from ..io.models import load_space
from ..mechanisms.base import AdditiveMechanism, Mechanism, SelectionMechanism
from ..postprocess import PostprocessStep
from ..rng import fresh_seed, validate_seed
from ..search import ExactIndex
from ..space import EmbeddingSpace
from ..utils.progress import progress_bar
from ..validation import check_int, check_open_unit
from .audit_sampler import Sampler
from .audit_stats import audit_pair


__all__ = ["audit", "AuditResult", "AuditRow", "default_pairs"]

_EXACT_DIAMETER_LIMIT = 4096


@dataclass(frozen=True, kw_only=True)
class AuditRow:
    """One audited pair.

    Attributes:
        w, w_prime (`int`): the candidate token ids.
        distance (`float`): d(w, w') in the mechanism's metric (float64).
        claim (`float`): ``pair_bound(w, w')``, the largest log ratio the mechanism promises.
        lcb (`float`): the largest lower confidence bound of a log ratio over the tested events
            (``-inf`` when no event's lower bound is positive).
        point (`float`): the largest point estimate ln(k_a/k_b) over the tested events.
        event (`tuple[int, ...]`): the event reaching ``lcb``: token ids, or bin indices for vectors.
        event_direction (`tuple[int, int]`): (a, b) with the event more likely under M(a).
        event_outputs (`str`): ``"ids"`` or ``"bins"``.
    """

    w: int
    w_prime: int
    distance: float
    claim: float
    lcb: float
    point: float
    event: tuple[int, ...] = ()
    event_direction: tuple[int, int] = (0, 0)
    event_outputs: str = "ids"

    @property
    def ratio(self) -> float:
        """``lcb / claim`` (``+inf`` when the claim is 0 and the bound positive)."""
        if self.claim > 0:
            return self.lcb / self.claim
        return math.inf if self.lcb > 0 else -math.inf

    def to_dict(self) -> dict[str, Any]:
        return {
            "w": self.w,
            "w_prime": self.w_prime,
            "distance": self.distance,
            "claim": self.claim,
            "lcb": self.lcb,
            "point": self.point,
            "ratio": self.ratio,
            "event": list(self.event),
            "event_direction": list(self.event_direction),
            "event_outputs": self.event_outputs,
        }


@dataclass(frozen=True, kw_only=True)
class AuditResult:
    """Verdict of :func:`audit`: ``passed`` iff every lower confidence bound is ≤ its pair's claim."""

    passed: bool
    worst_ratio: float
    alpha: float
    n_select: int
    n_estimate: int
    rows: tuple[AuditRow, ...]
    k_max: int = 4
    n_bins: int = 32
    mechanism: str = ""
    postprocess: str | None = None
    guarantee: str = ""
    delta_slack: float = 0.0
    unsafe: bool = field(default=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "worst_ratio": self.worst_ratio,
            "alpha": self.alpha,
            "n_select": self.n_select,
            "n_estimate": self.n_estimate,
            "k_max": self.k_max,
            "n_bins": self.n_bins,
            "mechanism": self.mechanism,
            "postprocess": self.postprocess,
            "guarantee": self.guarantee,
            "delta_slack": self.delta_slack,
            "unsafe": self.unsafe,
            "rows": [r.to_dict() for r in self.rows],
        }


# --------------------------------------------------------------------------- the pairs
def _resolve_space(
    space: EmbeddingSpace | str, device: str, candidates: str | dict[str, Any] = "all"
) -> EmbeddingSpace:
    if isinstance(space, EmbeddingSpace):
        return space
    if isinstance(space, str):
        return load_space(space, device, candidates)
    raise ParameterTypeError(f"space must be an EmbeddingSpace or a model string, got {type(space).__name__}.")


def _metric_index(mech: Mechanism, space: EmbeddingSpace) -> tuple[torch.Tensor, ExactIndex]:
    M = mech.scale_metric_matrix(space)
    if M is space.E:
        return M, space.index
    return M, ExactIndex(M, M.device)


def _diameter_pair(M: torch.Tensor, block: int = 512) -> tuple[int, int]:
    """The farthest pair: exact (float64, blocked) for V ≤ 4,096, else by repeated farthest-point sweeps."""
    M64 = M.detach().cpu().double()
    V = M64.shape[0]
    if V <= _EXACT_DIAMETER_LIMIT:
        best = (-1.0, 0, 1)
        for s in range(0, V, block):
            D = ((M64[s : s + block, None, :] - M64[None, :, :]) ** 2).sum(2)
            flat = int(torch.argmax(D))
            i, j = divmod(flat, V)
            if float(D[i, j]) > best[0]:
                best = (float(D[i, j]), s + i, j)
        _, a, b = best
        return (a, b) if a < b else (b, a)
    i = int(torch.argmax(((M64 - M64.mean(0)) ** 2).sum(1)))
    best = (-1.0, i, i)
    for _ in range(4):
        dist = ((M64 - M64[i]) ** 2).sum(1)
        j = int(torch.argmax(dist))
        if float(dist[j]) <= best[0]:
            break
        best = (float(dist[j]), i, j)
        i = j
    _, a, b = best
    return (a, b) if a < b else (b, a)


def default_pairs(mech: Mechanism, space: EmbeddingSpace) -> list[tuple[int, int]]:
    """testing.md §3 default pairs (candidate ids): the three lowest ids with their nearest neighbour, and
    the diameter pair, in the mechanism's metric (duplicates removed)."""
    M, index = _metric_index(mech, space)
    k = min(3, space.V)
    pos = torch.arange(k)
    nn = index.search(M[pos], 1, exclude=pos)[:, 0].cpu()
    pairs_pos = [(int(a), int(b)) for a, b in zip(pos.tolist(), nn.tolist(), strict=True)]
    pairs_pos.append(_diameter_pair(M))
    seen: set[frozenset[int]] = set()
    out = []
    ids = space.candidate_ids
    for a, b in pairs_pos:
        key = frozenset((a, b))
        if a == b or key in seen:
            continue
        seen.add(key)
        out.append((int(ids[a]), int(ids[b])))
    return out


def _positions(space: EmbeddingSpace, pairs: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    cls, pos = space.classify(np.asarray([t for p in pairs for t in p], dtype=np.int64))
    if (pos < 0).any():
        bad = [int(t) for t, p in zip([t for pr in pairs for t in pr], pos.tolist(), strict=True) if p < 0]
        raise InvalidParameterError(f"pairs: ids {bad[:5]} are not candidate tokens of this space (V={space.V}).")
    return [(int(pos[2 * i]), int(pos[2 * i + 1])) for i in range(len(pairs))]


def _pair_claim(mech: Mechanism, claim: Claim, a: int, b: int) -> float:
    """The claim under test for positions (a, b): the pair bound, else ε_tok."""
    if claim.pair_bound is not None:
        return float(claim.pair_bound(a, b))
    if claim.epsilon_token is not None:
        return float(claim.epsilon_token)
    raise InvalidParameterError(
        f"mechanism {mech.name!r} makes no per-pair claim (guarantee {claim.guarantee!r}); nothing to audit."
    )


# --------------------------------------------------------------------------- the audit
class _Plan(NamedTuple):
    """One class's audit: its set-up mechanism, space and claim, and the candidate-position pairs to test."""

    mech: Mechanism
    space: EmbeddingSpace
    claim: Claim
    pairs: list[tuple[int, int]]


def _target(
    config_or_mechanism: PrivatizerConfig | tuple[Mechanism, PostprocessStep | None], space: EmbeddingSpace | str
) -> tuple[Mechanism, PostprocessStep | None, EmbeddingSpace, str | None]:
    """What to audit: the mechanism, its post-processing step, the space and the step's name (``None``
    for a selection mechanism built from a config)."""
    if isinstance(config_or_mechanism, PrivatizerConfig):
        mech, step = config_or_mechanism.build()
        sp = _resolve_space(space, config_or_mechanism.device, config_or_mechanism.candidates)
        postprocess: str | None = config_or_mechanism.postprocess if mech.kind == "additive" else None
    elif (
        isinstance(config_or_mechanism, tuple)
        and len(config_or_mechanism) == 2
        and isinstance(config_or_mechanism[0], Mechanism)
    ):
        mech, step = config_or_mechanism
        sp = _resolve_space(space, "cpu")
        postprocess = step.name if step is not None else None
    else:
        raise ParameterTypeError(
            "config_or_mechanism must be a PrivatizerConfig or a (mechanism, postprocess step) pair, got "
            f"{type(config_or_mechanism).__name__}."
        )
    if isinstance(mech, AdditiveMechanism) and not isinstance(step, PostprocessStep):
        raise InvalidParameterError("config_or_mechanism: an additive mechanism needs a post-processing step.")
    if not isinstance(mech, (AdditiveMechanism, SelectionMechanism)):
        raise ParameterTypeError(f"mechanism must be additive or selection, got kind {mech.kind!r}.")
    return mech, step, sp, postprocess


def _plans(
    mech: Mechanism, step: PostprocessStep | None, sp: EmbeddingSpace, pairs: Sequence[Sequence[int]] | None
) -> list[_Plan]:
    """The audit of each class. Class-preserving replacement (space.md §7): each class is its own space with its
    own mechanism and claim, so each pair is audited inside its class; a pair across classes has no claim."""
    if pairs is not None:
        if isinstance(pairs, (str, bytes)) or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in pairs):
            raise ParameterTypeError("pairs must be a list of (w, w') candidate id pairs.")
        if not pairs:
            raise InvalidParameterError("pairs must hold at least one pair.")
        _positions(sp, [(int(p[0]), int(p[1])) for p in pairs])  # every id a candidate (raises naming the others)
    vectors = step is not None and step.RELEASES_VECTORS
    parts = [sp.whole_part()] if vectors else sp.class_parts()
    plans = []
    for part in parts:
        m = mech if len(parts) == 1 else copy.deepcopy(mech)
        m.setup(part.space)
        claim: Claim = m.claim(part.space)
        if pairs is None:
            id_pairs = default_pairs(m, part.space)
        else:
            members = set(part.space.candidate_ids.tolist())
            id_pairs = [(int(p[0]), int(p[1])) for p in pairs if int(p[0]) in members and int(p[1]) in members]
        if id_pairs:
            plans.append(_Plan(m, part.space, claim, _positions(part.space, id_pairs)))
    if pairs is not None and sum(len(plan.pairs) for plan in plans) < len(pairs):
        raise InvalidParameterError(
            "pairs: every pair must hold two candidates of one piece class; with class-preserving replacement "
            "(candidates classes='preserve') a pair across classes differs in a released class and has no claim."
        )
    return plans


def _audit_rows(
    plans: list[_Plan],
    step: PostprocessStep | None,
    seed: int | None,
    n_select: int,
    n_estimate: int,
    alpha: float,
    k_max: int,
    n_bins: int,
    progress: bool,
) -> list[AuditRow]:
    """Test every pair of every plan at the family-wise level ``alpha`` (Bonferroni over pairs and events)."""
    n_pairs = sum(len(plan.pairs) for plan in plans)
    a_ev = alpha / (n_pairs * 2 * k_max * 2)
    rows = []
    bar = progress_bar(total=n_pairs, desc="audit", unit="pair", enabled=progress)
    for m, part_space, claim, pos_pairs in plans:
        delta = float(claim.delta_token or 0.0)
        sampler = Sampler(m, step, part_space, fresh_seed() if seed is None else seed)
        M = m.scale_metric_matrix(part_space).detach().cpu().double()
        ids = part_space.candidate_ids
        for a, b in pos_pairs:
            c = _pair_claim(m, claim, a, b)
            lcb, pt, event, direction = audit_pair(sampler, a, b, n_select, n_estimate, a_ev, delta, k_max, n_bins)
            if not sampler.vectors:
                event = tuple(int(ids[o]) for o in event)
            rows.append(
                AuditRow(
                    w=int(ids[a]),
                    w_prime=int(ids[b]),
                    distance=float(torch.linalg.vector_norm(M[a] - M[b])),
                    claim=c,
                    lcb=lcb,
                    point=pt,
                    event=event,
                    event_direction=(int(ids[direction[0]]), int(ids[direction[1]])),
                    event_outputs="bins" if sampler.vectors else "ids",
                )
            )
            bar.update(1)
    bar.close()
    return rows


def audit(
    config_or_mechanism: PrivatizerConfig | tuple[Mechanism, PostprocessStep | None],
    space: EmbeddingSpace | str,
    pairs: Sequence[Sequence[int]] | None = None,
    *,
    n_select: int = 4000,
    n_estimate: int = 20000,
    alpha: float = 1e-3,
    k_max: int = 4,
    n_bins: int = 32,
    seed: int | None = None,
    progress: bool = False,
) -> AuditResult:
    """Empirical privacy-loss audit of a configured mechanism (testing.md §3).

    Args:
        config_or_mechanism (`PrivatizerConfig` or `(Mechanism, PostprocessStep | None)`): what to
            audit. A config is built (its ``model`` is not loaded: ``space`` is audited).
        space (`EmbeddingSpace` or `str`): the candidate space (or a ``model=`` string to load, over the
            config's ``candidates`` setting, space.md §6).
        pairs (`list[tuple[int, int]]`, *optional*): candidate token ids to audit; default: the
            three lowest ids with their nearest neighbours, and the diameter pair.
        n_select (`int`, defaults to `4000`): draws per input that choose the events.
        n_estimate (`int`, defaults to `20000`): independent draws per input that bound them.
        alpha (`float`, defaults to `1e-3`): family-wise level (Bonferroni over pairs and events).
        k_max (`int`, defaults to `4`): largest event size; 2·k_max events per pair.
        n_bins (`int`, defaults to `32`): bins of a scalar projection for vector releases.
        seed (`int`, *optional*): makes the draws reproducible; ``None`` draws fresh OS entropy.
        progress (`bool`, defaults to `False`): show a progress bar over the pairs (``datasets``' switches apply).

    Returns:
        `AuditResult` with ``passed`` (every lower confidence bound ≤ its claim), ``worst_ratio``
        (max over pairs of max LCB / claim) and one row per pair.

    An unsafe step (``nearest_excluding_input``) has no claim of its own; it is audited against the
    claim the mechanism makes with a safe step, and fails.
    """
    n_select = check_int(n_select, "n_select", minimum=1)
    n_estimate = check_int(n_estimate, "n_estimate", minimum=1)
    alpha = check_open_unit(alpha, "alpha")
    k_max = check_int(k_max, "k_max", minimum=1)
    n_bins = check_int(n_bins, "n_bins", minimum=2)
    seed = validate_seed(seed)
    mech, step, sp, postprocess = _target(config_or_mechanism, space)
    plans = _plans(mech, step, sp, pairs)
    rows = _audit_rows(plans, step, seed, n_select, n_estimate, alpha, k_max, n_bins, progress)
    return AuditResult(
        passed=all(r.lcb <= r.claim for r in rows),
        worst_ratio=max(r.ratio for r in rows),
        alpha=alpha,
        n_select=n_select,
        n_estimate=n_estimate,
        rows=tuple(rows),
        k_max=k_max,
        n_bins=n_bins,
        mechanism=mech.name,
        postprocess=postprocess,
        guarantee=plans[0].claim.guarantee,
        delta_slack=max(float(plan.claim.delta_token or 0.0) for plan in plans),
        unsafe=bool(getattr(step, "UNSAFE", False)) or plans[0].claim.guarantee == "none",
    )
