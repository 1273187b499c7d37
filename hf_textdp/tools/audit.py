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
per-pair keyed streams.

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
from typing import Any

import numpy as np
import torch
from scipy import stats

from ..accounting import Claim
from ..config import PrivatizerConfig
from ..errors import InvalidParameterError, ParameterTypeError
from ..io.models import load_space
from ..mechanisms.base import AdditiveMechanism, Mechanism, SelectionMechanism
from ..postprocess import PostprocessStep, UnsafePostprocessStep
from ..rng import Streams, derive_row_seed, fresh_seed, streams_for_rows, validate_seed
from ..search import ExactIndex
from ..space import EmbeddingSpace
from ..utils.progress import progress_bar
from ..validation import check_int, check_open_unit


__all__ = ["audit", "AuditResult", "AuditRow", "default_pairs", "clopper_pearson_lower", "clopper_pearson_upper"]

_SPLIT = "hf_textdp/audit"
_ROW = 4096  # draws per stream row
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


# --------------------------------------------------------------------------- statistics
def clopper_pearson_lower(k: np.ndarray, n: int, a: float) -> np.ndarray:
    """One-sided Clopper–Pearson lower bound: P[p ≥ lo] ≥ 1 − a (0 at k = 0)."""
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        lo = stats.beta.ppf(a, np.maximum(k, 1e-300), n - k + 1)
    return np.where(k > 0, lo, 0.0)


def clopper_pearson_upper(k: np.ndarray, n: int, a: float) -> np.ndarray:
    """One-sided Clopper–Pearson upper bound: P[p ≤ hi] ≥ 1 − a (1 at k = n)."""
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        hi = stats.beta.ppf(1.0 - a, k + 1, np.maximum(n - k, 1e-300))
    return np.where(k < n, hi, 1.0)


def _events(ya: np.ndarray, yb: np.ndarray, n_out: int, k_max: int) -> list[np.ndarray]:
    """Prefixes of the k_max outputs with the highest smoothed log ratio P_a/P_b (selection draws only)."""
    ca = np.bincount(ya, minlength=n_out).astype(np.float64)
    cb = np.bincount(yb, minlength=n_out).astype(np.float64)
    seen = (ca + cb) > 0
    pa = (ca + 0.5) / (ca + 0.5).sum()
    pb = (cb + 0.5) / (cb + 0.5).sum()
    score = np.where(seen, np.log(pa) - np.log(pb), -np.inf)
    order = np.argsort(-score, kind="stable")
    order = order[np.isfinite(score[order])][:k_max]
    return [order[: i + 1] for i in range(len(order))]


# --------------------------------------------------------------------------- helpers
def _center(mech: Mechanism, space: EmbeddingSpace, positions: torch.Tensor) -> torch.Tensor:
    """The noise-free pre-image f(w) of an additive mechanism's noisy vector (testing.md §3 step 2).

    ``mech.inputs`` (the vectors handed to ``perturb``), passed through the map ``perturb`` applies
    before adding noise when the mechanism exposes one (``transform_input`` for bounding.md bounds,
    ``project`` for projected mechanisms, or a ``transform_inputs(space, x)`` hook).
    """
    assert isinstance(mech, AdditiveMechanism)
    x: Any = mech.inputs(space, positions)
    for name in ("transform_input", "project"):
        fn = getattr(mech, name, None)
        if callable(fn):
            x = fn(x)
            break
    else:
        fn = getattr(mech, "transform_inputs", None)
        if callable(fn):
            x = fn(space, x)
    return torch.as_tensor(x).to(torch.float32)


def apply_step(
    step: PostprocessStep,
    z: torch.Tensor,
    mech: AdditiveMechanism,
    space: EmbeddingSpace,
    streams: Streams,
    positions: torch.Tensor,
) -> torch.Tensor:
    """Run a post-processing step; an unsafe one (postprocess.md §7) also receives the input positions."""
    if isinstance(step, UnsafePostprocessStep):
        return step.apply_unsafe(z, mech, space, streams, positions)
    return step.apply(z, mech, space, streams)


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


class _Sampler:
    """Draws outputs of one configured mechanism from fresh, counted row streams."""

    def __init__(self, mech: Mechanism, step: PostprocessStep | None, space: EmbeddingSpace, seed: int) -> None:
        self.mech, self.step, self.space, self.seed = mech, step, space, seed
        self.counter = 0
        self.vectors = bool(step is not None and step.RELEASES_VECTORS)

    def _streams(self, m: int) -> Streams:
        key = derive_row_seed(self.seed, self.counter, _SPLIT, 0)
        self.counter += 1
        return streams_for_rows([key], [m], self.space.device)

    def draw(self, position: int, n: int, u: torch.Tensor | None = None) -> np.ndarray:
        """``n`` outputs of M(position): candidate positions; for vector releases the vectors
        ``[n, k]`` (``u`` None) or their projections ⟨z, u⟩ (float64)."""
        mech, step, space = self.mech, self.step, self.space
        parts: list[np.ndarray] = []
        for s in range(0, n, _ROW):
            m = min(_ROW, n - s)
            st = self._streams(m)
            pos = torch.full((m,), position, dtype=torch.int64)
            if isinstance(mech, SelectionMechanism):
                out = mech.sample(space, pos, st)
                parts.append(out.cpu().numpy().astype(np.int64))
                continue
            assert isinstance(mech, AdditiveMechanism) and step is not None
            z = mech.perturb(mech.inputs(space, pos), st)
            out = apply_step(step, z, mech, space, st, pos).cpu()
            if not self.vectors:
                parts.append(out.numpy().astype(np.int64))
            elif u is None:
                parts.append(out.double().numpy())
            else:
                parts.append((out.double() @ u).numpy())
        return np.concatenate(parts)

    def direction(self, a: int, b: int, va: np.ndarray, vb: np.ndarray) -> torch.Tensor:
        """Public unit vector from f(a) to f(b) in the released coordinates (vector releases).

        f is the release map applied to the noise-free vectors (``_center``; the identity for
        ``vector``, Φᵀ for input-space releases). If that cannot be evaluated in the released
        coordinates, the difference of the two selection means is used instead: it too is fixed
        before any estimation draw is read.
        """
        assert isinstance(self.mech, AdditiveMechanism) and self.step is not None
        k = va.shape[1]
        diff: torch.Tensor | None = None
        try:
            c = _center(self.mech, self.space, torch.tensor([a, b]))
            f = self.step.apply(c, self.mech, self.space, streams_for_rows([0], [2])).cpu().double()
            if f.ndim == 2 and f.shape == (2, k):
                diff = f[1] - f[0]
        except Exception:  # noqa: BLE001 - fall back to the selection means below
            diff = None
        if diff is None:
            diff = torch.from_numpy(vb.mean(0) - va.mean(0))
        norm = float(torch.linalg.vector_norm(diff))
        if not norm > 0:
            u = torch.zeros(k, dtype=torch.float64)
            u[0] = 1.0
            return u
        return diff / norm


def _audit_pair(
    sampler: _Sampler,
    a: int,
    b: int,
    n_select: int,
    n_estimate: int,
    a_ev: float,
    delta: float,
    k_max: int,
    n_bins: int,
) -> tuple[float, float, tuple[int, ...], tuple[int, int]]:
    sa, sb = sampler.draw(a, n_select), sampler.draw(b, n_select)
    if sampler.vectors:
        u = sampler.direction(a, b, sa, sb)
        sa, sb = sa @ u.numpy(), sb @ u.numpy()
        ea, eb = sampler.draw(a, n_estimate, u), sampler.draw(b, n_estimate, u)
        edges = np.quantile(np.concatenate([sa, sb]), np.linspace(0.0, 1.0, n_bins + 1)[1:-1])
        sa, sb, ea, eb = (np.searchsorted(edges, x) for x in (sa, sb, ea, eb))
        n_out = n_bins
    else:
        ea, eb = sampler.draw(a, n_estimate), sampler.draw(b, n_estimate)
        n_out = int(max(sa.max(), sb.max(), ea.max(), eb.max())) + 1
    best_lcb, best_pt = -math.inf, -math.inf
    best_event: tuple[int, ...] = ()
    best_dir = (a, b)
    for sx, sy, ex, ey, direction in ((sa, sb, ea, eb, (a, b)), (sb, sa, eb, ea, (b, a))):
        events = _events(sx, sy, n_out, k_max)
        if not events:
            continue
        cx = np.bincount(ex, minlength=n_out)
        cy = np.bincount(ey, minlength=n_out)
        kx = np.array([cx[e].sum() for e in events], dtype=np.float64)
        ky = np.array([cy[e].sum() for e in events], dtype=np.float64)
        lo = clopper_pearson_lower(kx, n_estimate, a_ev) - delta
        hi = clopper_pearson_upper(ky, n_estimate, a_ev)
        with np.errstate(divide="ignore", invalid="ignore"):
            lcb = np.where(lo > 0, np.log(np.maximum(lo, 1e-300)) - np.log(hi), -np.inf)
            pt = np.where(
                (kx > 0) & (ky > 0),
                np.log(kx / n_estimate) - np.log(np.maximum(ky, 1) / n_estimate),
                np.where(kx > 0, np.inf, -np.inf),
            )
        i = int(np.argmax(lcb))
        if lcb[i] > best_lcb or not best_event:
            best_lcb, best_event, best_dir = float(lcb[i]), tuple(int(o) for o in events[i]), direction
        best_pt = max(best_pt, float(pt.max()))
    return best_lcb, best_pt, best_event, best_dir


# --------------------------------------------------------------------------- public entry point
def _pair_claim(mech: Mechanism, claim: Claim, a: int, b: int) -> float:
    """The claim under test for positions (a, b): the pair bound, else ε_tok."""
    if claim.pair_bound is not None:
        return float(claim.pair_bound(a, b))
    if claim.epsilon_token is not None:
        return float(claim.epsilon_token)
    raise InvalidParameterError(
        f"mechanism {mech.name!r} makes no per-pair claim (guarantee {claim.guarantee!r}); nothing to audit."
    )


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
    if pairs is not None:
        if isinstance(pairs, (str, bytes)) or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in pairs):
            raise ParameterTypeError("pairs must be a list of (w, w') candidate id pairs.")
        if not pairs:
            raise InvalidParameterError("pairs must hold at least one pair.")
        _positions(sp, [(int(p[0]), int(p[1])) for p in pairs])  # every id a candidate (raises naming the others)
    # Class-preserving replacement (space.md §7): each class is its own space with its own mechanism and
    # claim, so each pair is audited inside its class; a pair across classes has no claim.
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
            plans.append((m, part.space, claim, _positions(part.space, id_pairs)))
    n_pairs = sum(len(plan[3]) for plan in plans)
    if pairs is not None and n_pairs < len(pairs):
        raise InvalidParameterError(
            "pairs: every pair must hold two candidates of one piece class; with class-preserving replacement "
            "(candidates classes='preserve') a pair across classes differs in a released class and has no claim."
        )
    a_ev = alpha / (n_pairs * 2 * k_max * 2)
    rows = []
    bar = progress_bar(total=n_pairs, desc="audit", unit="pair", enabled=progress)
    for m, part_space, claim, pos_pairs in plans:
        delta = float(claim.delta_token or 0.0)
        sampler = _Sampler(m, step, part_space, fresh_seed() if seed is None else seed)
        M = m.scale_metric_matrix(part_space).detach().cpu().double()
        ids = part_space.candidate_ids
        for a, b in pos_pairs:
            c = _pair_claim(m, claim, a, b)
            lcb, pt, event, direction = _audit_pair(sampler, a, b, n_select, n_estimate, a_ev, delta, k_max, n_bins)
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
        guarantee=plans[0][2].guarantee,
        delta_slack=max(float(plan[2].delta_token or 0.0) for plan in plans),
        unsafe=bool(getattr(step, "UNSAFE", False)) or plans[0][2].guarantee == "none",
    )
