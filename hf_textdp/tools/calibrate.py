"""Expected replacement rate and the ε for a target rate, from the public matrix alone (madlib.md §4).

The keep rate of a configured mechanism is K(ε) = Σ_w π(w)·P[M(w) = w], with π uniform over the
candidate set C or a public frequency table (never the text being privatized); the replacement rate
is 1 − K(ε). Nothing here reads private data: the tokens are drawn from C with a fixed, public
calibration seed.

- ``madlib`` with ``nearest`` (madlib.md §4): the Voronoi cell of w is convex and contains φ(w), so the
  ray φ(w) + s·u stays in it exactly for s < s(w, u) = min over c ≠ w with ⟨u, Δ_c⟩ > 0 of
  ‖Δ_c‖²/(2⟨u, Δ_c⟩), Δ_c = φ(c) − φ(w). The radius is Gamma(d, 1/ε), hence
  P[keep | w, u] = P(d, ε·s(w, u)) and the Rao–Blackwellised estimator
  K̂(ε) = (1/N)·Σᵢ P(d, ε·sᵢ) over N public pairs (wᵢ, uᵢ) gives every ε at once (two fp32 GEMMs of
  N × V, float64 ratios). K̂ is increasing in ε, so the ε for a target rate is found by bisection on
  log ε.
- Any other mechanism or post-processing step: plain Monte Carlo through the base-class interfaces
  (n public tokens, run through ``perturb`` + the step, or ``sample``; the fraction whose output is
  not the input), with the same keyed streams at every ε (common random numbers), bisection on log ε.

Example:

>>> from hf_textdp.tools.calibrate import calibrate
>>> res = calibrate(target_rate=0.5, model="sentence-transformers/all-MiniLM-L6-v2")   # doctest: +SKIP
>>> round(res.epsilon, 1)                                                               # doctest: +SKIP
76.4
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy import special

from ..config import PrivatizerConfig
from ..errors import HfTextDPError, InvalidParameterError, MissingExtraError, ParameterTypeError
from ..io.models import load_space
from ..mechanisms import get_mechanism_class
from ..mechanisms.base import AdditiveMechanism, Mechanism, SelectionMechanism
from ..mechanisms.madlib import Madlib
from ..postprocess import PostprocessStep
from ..rng import derive_row_seed, streams_for_rows, validate_seed
from ..scale import scale_stats
from ..search import exact_fp32_matmul
from ..space import DEFAULT_MODEL, EmbeddingSpace
from ..utils.logging import get_logger
from ..utils.progress import counted, progress_bar
from ..utils.table import format_table
from ..validation import check_epsilon, check_int, check_open_unit
from .audit import apply_step


__all__ = ["calibrate", "CalibrationResult", "madlib_cell_radii"]

logger = get_logger("hf_textdp.calibrate")  # the name its log lines have always carried (issue 38 moved the module)

_SPLIT = "hf_textdp/calibrate"
_MC_ROW = 256  # tokens per stream row in the Monte Carlo estimator
_REFINE = 8  # per draw, the smallest fp32-based radii re-checked in float64
_BLOCK_ELEMS = 2**22  # N × V block size of the radius computation (memory ≈ 5 × 8 × this bytes)
_RADII_MEMO: dict[tuple[str, int, int, int, str], np.ndarray] = {}  # public draws only: safe to keep


@dataclass(frozen=True, kw_only=True)
class CalibrationResult:
    """What :func:`calibrate` measured.

    Attributes:
        epsilon (`float` or `None`): the ε whose estimated replacement rate is ``target_rate``
            (``None`` when no target was asked for).
        epsilon_stderr (`float` or `None`): standard error of ``epsilon`` (delta method).
        rates (`dict[float, tuple[float, float]]`): ε → (estimated replacement rate, standard error),
            for every ε asked for and the solved one.
        estimator (`str`): ``"rao_blackwell"`` (madlib + nearest, madlib.md §4) or ``"monte_carlo"``.
        weighting (`str`): ``"uniform"`` or the SHA-256 of the public frequency table.
        median_rho1, diam (`float`): scale statistics of the space in the mechanism's metric.
        epsilon_median_rho1 (`float` or `None`): ``epsilon · median_rho1`` (dimensionless).
        V, d (`int`): candidate count and dimension.
        options (`dict`): the mechanism's options as the calibration ran it (defaults filled in).
    """

    mechanism: str
    postprocess: str
    target_rate: float | None
    epsilon: float | None
    epsilon_stderr: float | None
    rates: dict[float, tuple[float, float]]
    estimator: str
    n: int
    calibration_seed: int
    weighting: str
    median_rho1: float
    diam: float
    epsilon_median_rho1: float | None
    V: int
    d: int
    space_hash: str
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the rates as a list of ``{epsilon, replacement_rate, stderr}``)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "rates"}
        out["rates"] = [{"epsilon": e, "replacement_rate": r, "stderr": s} for e, (r, s) in sorted(self.rates.items())]
        return out


# --------------------------------------------------------------------------- the madlib estimator
def _duplicate_groups(E: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Group id of every row (exact duplicates share one) and whether a lower position has the same row."""
    _, inv = torch.unique(E.cpu(), dim=0, return_inverse=True)
    V = E.shape[0]
    first = torch.full((int(inv.max()) + 1,), V, dtype=torch.int64)
    first = first.scatter_reduce(0, inv, torch.arange(V), reduce="amin")
    return inv, first[inv] < torch.arange(V)


def madlib_cell_radii(E: torch.Tensor, w: np.ndarray, U: np.ndarray) -> np.ndarray:
    """s(wᵢ, uᵢ) of madlib.md §4: how far the ray φ(wᵢ) + s·uᵢ stays in wᵢ's ``nearest`` cell.

    ``+∞`` when no candidate lies ahead in direction uᵢ; 0 when a lower-id exact duplicate of φ(wᵢ)
    exists (``nearest`` then never returns wᵢ); higher-id duplicates are ignored (ties go to wᵢ).
    Approximate radii come from two fp32 GEMMs per block of draws (TF32 off); for each draw the
    ``_REFINE`` smallest are recomputed in float64 from exact differences, and their minimum is s.

    Args:
        E (`torch.Tensor` `[V, d]`): candidate rows (fp32).
        w (`np.ndarray` `[N]`): positions of the tokens.
        U (`np.ndarray` `[N, d]`): unit directions (float64).
    """
    E = E.detach().to("cpu", torch.float32).contiguous()
    V, d = E.shape
    E64 = E.double()
    sq32 = (E64**2).sum(1).float()
    ET = E.T.contiguous()
    group, lower_dup = _duplicate_groups(E)
    has_dup = torch.bincount(group)[group] > 1
    N = len(w)
    out = np.empty(N, dtype=np.float64)
    block = max(1, min(N, _BLOCK_ELEMS // V))
    t = min(_REFINE, V)
    wt_all = torch.from_numpy(np.asarray(w, dtype=np.int64))
    U_all = torch.from_numpy(np.asarray(U, dtype=np.float64))
    for s0 in range(0, N, block):
        wt = wt_all[s0 : s0 + block]
        B = int(wt.numel())
        u64 = U_all[s0 : s0 + block]
        x64 = E64[wt]
        # fp32 filter: approximate radii, only used to pick each draw's `t` best candidates
        with exact_fp32_matmul():
            ud = u64.float() @ ET
            ud -= (u64 * x64).sum(1, keepdim=True).float()
            dd2 = E[wt] @ ET
        dd2.mul_(-2.0).add_(sq32[None, :]).add_(sq32[wt][:, None])
        ud[torch.arange(B), wt] = 0.0
        for r in torch.nonzero(has_dup[wt]).squeeze(1).tolist():  # rows whose w has exact duplicates
            ud[r, group == group[wt[r]]] = 0.0
        s = torch.where(ud > 0, dd2 / (2.0 * ud), math.inf)
        cand = torch.topk(s, t, dim=1, largest=False).indices  # [B, t]
        # float64 re-check of the best candidates (differences of fp32 values are exact in float64)
        delta = E64[cand] - x64[:, None, :]
        ud64 = (delta * u64[:, None, :]).sum(2)
        dd64 = (delta**2).sum(2)
        ok64 = (ud64 > 0) & (group[cand] != group[wt][:, None])
        s64 = torch.where(ok64, dd64 / (2.0 * torch.where(ok64, ud64, 1.0)), math.inf).min(1).values
        s64 = torch.where(lower_dup[wt], 0.0, s64)
        out[s0 : s0 + block] = s64.numpy()
    return out


def _keep_terms(d: int, epsilon: float, radii: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.where(np.isinf(radii), np.inf, epsilon * radii)
    return np.asarray(special.gammainc(d, x), dtype=np.float64)


class _RaoBlackwell:
    def __init__(self, d: int, radii: np.ndarray) -> None:
        self.d, self.radii, self.n = d, radii, radii.size

    def rate(self, epsilon: float) -> tuple[float, float]:
        k = _keep_terms(self.d, epsilon, self.radii)
        se = float(k.std(ddof=1) / math.sqrt(self.n)) if self.n > 1 else float("nan")
        return 1.0 - float(k.mean()), se

    def slope(self, epsilon: float) -> float:
        """d(replacement rate)/dε = −mean(s·gamma_pdf(d)(ε·s))."""
        r = self.radii
        fin = np.isfinite(r) & (r > 0)
        x = epsilon * r[fin]
        pdf = np.exp((self.d - 1) * np.log(x) - x - special.gammaln(self.d))
        return -float((r[fin] * pdf).sum() / self.n)

    def range(self) -> tuple[float, float]:
        """Replacement rates reachable as ε → ∞ and ε → 0."""
        return float((self.radii == 0).mean()), float(1.0 - np.isinf(self.radii).mean())


# --------------------------------------------------------------------------- the generic estimator
class _MonteCarlo:
    def __init__(self, make: Any, space: EmbeddingSpace, positions: np.ndarray, seed: int) -> None:
        self.make, self.space, self.seed = make, space, seed
        self.positions = torch.from_numpy(positions.astype(np.int64))
        self.n = int(self.positions.numel())
        self._memo: dict[float, tuple[float, float]] = {}

    def outputs(self, mech: Mechanism, step: PostprocessStep | None) -> torch.Tensor:
        space = self.space
        sizes = [int(p.numel()) for p in torch.split(self.positions, _MC_ROW)]
        # the same public streams at every ε: common random numbers make the rate smooth in ε
        keys = [derive_row_seed(self.seed, i, _SPLIT, 0) for i in range(len(sizes))]
        streams = streams_for_rows(keys, sizes, space.device)
        if isinstance(mech, SelectionMechanism):
            return mech.sample(space, self.positions, streams).cpu()
        assert isinstance(mech, AdditiveMechanism) and step is not None
        z = mech.perturb_positions(space, self.positions, streams)
        return apply_step(step, z, mech, space, streams, self.positions).cpu()

    def rate(self, epsilon: float) -> tuple[float, float]:
        if epsilon not in self._memo:
            mech, step = self.make(epsilon)
            out = self.outputs(mech, step)
            p = float((out != self.positions).double().mean())
            self._memo[epsilon] = (p, math.sqrt(p * (1.0 - p) / self.n))
        return self._memo[epsilon]

    def slope(self, epsilon: float) -> float:
        f = 1.1
        hi, lo = self.rate(epsilon * f)[0], self.rate(epsilon / f)[0]
        return (hi - lo) / (epsilon * f - epsilon / f)


class _Mixture:
    """Class-preserving replacement (space.md §7): each class's estimator, weighted by its share of the draws."""

    def __init__(self, parts: list[tuple[float, _MonteCarlo]]) -> None:
        self.parts = parts

    def rate(self, epsilon: float) -> tuple[float, float]:
        rates = [(w, est.rate(epsilon)) for w, est in self.parts]
        return sum(w * r for w, (r, _) in rates), math.sqrt(sum((w * se) ** 2 for w, (_, se) in rates))

    def slope(self, epsilon: float) -> float:
        return sum(w * est.slope(epsilon) for w, est in self.parts)


# --------------------------------------------------------------------------- helpers
def _weights(space: EmbeddingSpace, frequencies: Mapping[Any, Any]) -> tuple[np.ndarray, str]:
    """π over candidate positions from a public frequency table (token id or token string → weight)."""
    if not isinstance(frequencies, Mapping):
        raise ParameterTypeError(
            f"frequencies must be a mapping from token id (int) or token (str) to a weight, got "
            f"{type(frequencies).__name__}."
        )
    V = space.V
    max_id = int(space.candidate_ids.max())
    pos_of = np.full(max_id + 1, -1, dtype=np.int64)
    pos_of[space.candidate_ids.numpy()] = np.arange(V)
    w2i = space.word_to_id() if space.kind != "hf" else None
    pi = np.zeros(V, dtype=np.float64)
    dropped = 0
    for key, value in frequencies.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ParameterTypeError(
                f"frequencies: the weight of {key!r} must be a number, got {type(value).__name__}."
            )
        weight = float(value)
        if not math.isfinite(weight) or weight < 0:
            raise InvalidParameterError(f"frequencies: weights must be finite and >= 0, got {weight!r}.")
        if isinstance(key, str):
            tid = w2i.get(key, -1) if w2i is not None else space.tokenizer.convert_tokens_to_ids(key)
            tid = -1 if tid is None or tid == space.unk_id else int(tid)
        elif isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            tid = int(key)
        else:
            raise ParameterTypeError(
                f"frequencies: keys must be token ids (int) or tokens (str), got {type(key).__name__}."
            )
        p = pos_of[tid] if 0 <= tid <= max_id else -1
        if p < 0:
            dropped += 1
            continue
        pi[p] += weight
    total = pi.sum()
    if not total > 0:
        raise InvalidParameterError(
            "frequencies: no positive weight falls on a candidate token; give counts for tokens of the model."
        )
    if dropped:
        logger.info("calibrate: %d frequency entries are not candidate tokens and were ignored", dropped)
    nz = np.nonzero(pi)[0]
    h = hashlib.sha256(b"hf_textdp/frequencies/v1\x00")
    h.update(space.candidate_ids.numpy()[nz].astype("<i8").tobytes())
    h.update(pi[nz].astype("<f8").tobytes())
    return pi / total, h.hexdigest()


def _bisect_log(rate: Any, target: float, start: float, *, rel_tol: float, max_iter: int = 200) -> float:
    """Solve rate(ε) = target for a rate decreasing in ε by bracketing and bisection on log ε."""
    lo = hi = start
    r = rate(start)[0]
    steps = 0
    if r > target:  # too much replacement: increase ε
        while r > target:
            lo, hi = hi, hi * 4.0
            r = rate(hi)[0]
            steps += 1
            if steps > 60:
                raise InvalidParameterError(f"target_rate={target}: not reached for epsilon up to {hi:.3g}.")
    else:
        while r <= target:
            hi, lo = lo, lo / 4.0
            r = rate(lo)[0]
            steps += 1
            if steps > 60:
                raise InvalidParameterError(f"target_rate={target}: not reached for epsilon down to {lo:.3g}.")
    for _ in range(max_iter):
        if hi / lo - 1.0 <= rel_tol:
            break
        mid = math.sqrt(lo * hi)
        if rate(mid)[0] > target:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def _epsilon_list(epsilons: Iterable[Any] | None) -> list[float]:
    if epsilons is None:
        return []
    if isinstance(epsilons, (str, bytes)) or not isinstance(epsilons, Iterable):
        raise ParameterTypeError(f"epsilons must be a list of floats > 0, got {type(epsilons).__name__}.")
    return [check_epsilon(e, "epsilons[]") for e in epsilons]


# --------------------------------------------------------------------------- public entry point
def calibrate(
    *,
    target_rate: float | None = None,
    config: PrivatizerConfig | None = None,
    mechanism: str = "madlib",
    model: str = DEFAULT_MODEL,
    options: dict[str, Any] | None = None,
    epsilons: Iterable[float] | None = None,
    n: int = 4000,
    calibration_seed: int = 12345,
    frequencies: Mapping[Any, Any] | None = None,
    progress: bool = False,
) -> CalibrationResult:
    """Estimate replacement rates, and the ε for a target rate, from the public matrix only.

    Args:
        target_rate (`float`, *optional*): replacement rate in (0, 1) to solve for.
        config (`PrivatizerConfig`, *optional*): mechanism, model, post-processing and options to
            calibrate (its ε is ignored when ``target_rate`` or ``epsilons`` is given). Without it,
            ``mechanism``, ``model`` and ``options`` are used with ``postprocess="nearest"``.
        mechanism (`str`, defaults to `"madlib"`): the mechanism, without ``config``.
        model (`str`, *optional*): the model, without ``config`` (default: the default model).
        options (`dict`, *optional*): the mechanism's options, without ``config``.
        epsilons (`list[float]`, *optional*): ε values whose rates to report.
        n (`int`, defaults to `4000`): public draws (pairs (w, u) for madlib, tokens otherwise).
        calibration_seed (`int`, defaults to `12345`): public seed of those draws (not a secret).
        frequencies (`Mapping`, *optional*): public token frequencies (token id or token string →
            count) weighting the rate; uniform over the candidate set by default.
        progress (`bool`, defaults to `False`): a progress bar over the rate evaluations (``datasets``' switches).

    Returns:
        `CalibrationResult`.

    Raises:
        InvalidParameterError: a bad value, no ε to evaluate, an unreachable target, or a
            post-processing step that releases vectors (nothing is "replaced").
    """
    if target_rate is not None:
        target_rate = check_open_unit(target_rate, "target_rate")
    n = check_int(n, "n", minimum=2)
    seed = validate_seed(calibration_seed, "calibration_seed")
    if seed is None:
        raise InvalidParameterError("calibration_seed must be an int in [0, 2**64) (a public constant), got None.")
    eps_list = _epsilon_list(epsilons)

    if config is not None:
        if not isinstance(config, PrivatizerConfig):
            raise ParameterTypeError(f"config must be a PrivatizerConfig, got {type(config).__name__}.")
        base = config
    else:
        base = PrivatizerConfig(epsilon=1.0, mechanism=mechanism, model=model, options=dict(options or {}))
    if target_rate is None and not eps_list:
        if config is None:
            raise InvalidParameterError("calibrate needs target_rate or epsilons (or a config whose epsilon to use).")
        eps_list = [config.epsilon]
    if any(math.isinf(e) for e in eps_list):
        raise InvalidParameterError("epsilons must be finite.")

    def maker(on: EmbeddingSpace) -> Any:
        def make(epsilon: float) -> tuple[Mechanism, PostprocessStep | None]:
            mech, step = dataclasses.replace(base, epsilon=float(epsilon)).build()
            mech.setup(on)
            return mech, step

        return make

    space = load_space(base.model, base.device, base.candidates)
    mech0, step0 = maker(space)(eps_list[0] if eps_list else base.epsilon)
    if step0 is not None and step0.RELEASES_VECTORS:
        raise InvalidParameterError(
            f"postprocess={base.postprocess!r} releases vectors, not tokens: no token is 'replaced', so there is "
            "no replacement rate to calibrate."
        )
    stats = scale_stats(mech0.scale_metric_matrix(space), store=space.store)
    rng = np.random.default_rng(seed)
    V, d = space.V, space.d
    if frequencies is None:
        weighting = "uniform"
        w = rng.integers(0, V, n)
    else:
        pi, weighting = _weights(space, frequencies)
        w = rng.choice(V, n, p=pi)
    # class-preserving replacement (space.md §7): each draw is calibrated inside its own class's space
    parts = space.class_parts()
    cls_of, local = space.position_class(), space.local_positions()
    by_class = [(part, local[w[cls_of[w] == part.index]]) for part in parts]

    mech_options = {k: v for k, v in mech0.parameters().items() if k not in ("epsilon", "delta")}
    rao_blackwell = (
        type(mech0) is Madlib and mech0.options.get("bound", "none") == "none" and base.postprocess == "nearest"
    )
    estimator: _RaoBlackwell | _MonteCarlo | _Mixture
    if rao_blackwell:
        key = (space.space_hash, len(parts), n, seed, weighting)
        if key not in _RADII_MEMO:
            if len(_RADII_MEMO) >= 16:
                _RADII_MEMO.pop(next(iter(_RADII_MEMO)))
            g = rng.standard_normal((n, d))
            U = g / np.linalg.norm(g, axis=1, keepdims=True)
            _RADII_MEMO[key] = np.concatenate(
                [madlib_cell_radii(part.space.E, lw, U[cls_of[w] == part.index]) for part, lw in by_class if lw.size]
            )
        estimator = _RaoBlackwell(d, _RADII_MEMO[key])
    elif len(parts) == 1:
        estimator = _MonteCarlo(maker(space), space, w, seed)
    else:
        estimator = _Mixture(
            [(lw.size / n, _MonteCarlo(maker(part.space), part.space, lw, seed)) for part, lw in by_class if lw.size]
        )

    rate = counted(estimator.rate, bar := progress_bar(desc="calibrate", unit="rate", enabled=progress))
    epsilon: float | None = None
    epsilon_se: float | None = None
    rates: dict[float, tuple[float, float]] = {}
    if target_rate is not None:
        if isinstance(estimator, _RaoBlackwell):
            lo_rate, hi_rate = estimator.range()
            if not lo_rate < target_rate < hi_rate:
                raise InvalidParameterError(
                    f"target_rate={target_rate} cannot be reached on this space: the estimated replacement rate of "
                    f"madlib + nearest lies in ({lo_rate:.4g}, {hi_rate:.4g}) for all epsilon."
                )
            finite = estimator.radii[np.isfinite(estimator.radii) & (estimator.radii > 0)]
            start = d / float(np.median(finite)) if finite.size else 1.0
            epsilon = _bisect_log(rate, target_rate, start, rel_tol=1e-12)
        else:
            start = 1.0 / stats.median_rho1 if stats.median_rho1 > 0 else 1.0
            try:
                epsilon = _bisect_log(rate, target_rate, start, rel_tol=1e-3, max_iter=40)
            except HfTextDPError as err:
                raise InvalidParameterError(
                    f"target_rate={target_rate}: calibration of mechanism {base.mechanism!r} failed: {err}"
                ) from err
        rates[epsilon] = rate(epsilon)
        slope = estimator.slope(epsilon)
        epsilon_se = abs(rates[epsilon][1] / slope) if slope != 0 and math.isfinite(slope) else None
    for e in eps_list:
        rates[e] = rate(e)
    bar.close()
    return CalibrationResult(
        mechanism=base.mechanism,
        postprocess=base.postprocess,
        target_rate=target_rate,
        epsilon=epsilon,
        epsilon_stderr=epsilon_se,
        rates=rates,
        estimator="rao_blackwell" if rao_blackwell else "monte_carlo",
        n=n,
        calibration_seed=seed,
        weighting=weighting,
        median_rho1=stats.median_rho1,
        diam=stats.diam,
        epsilon_median_rho1=None if epsilon is None else epsilon * stats.median_rho1,
        V=V,
        d=d,
        space_hash=space.space_hash,
        options=mech_options,
    )


def format_calibration(result: CalibrationResult) -> str:
    """A readable summary of a :class:`CalibrationResult` (``hf-textdp calibrate`` prints it)."""
    defaults = get_mechanism_class(result.mechanism).OPTIONS
    opts = ", ".join(f"{k}={v}" for k, v in sorted(result.options.items()) if defaults.get(k, object()) != v)
    lines = [
        f"Calibration of {result.mechanism}{f' ({opts})' if opts else ''} + {result.postprocess} on the public "
        "embedding matrix "
        f"(V = {result.V}, d = {result.d}; no private data used)",
        f"  scale: median nearest-neighbour distance {result.median_rho1:.4g}, diameter {result.diam:.4g}",
        f"  estimator: {result.estimator}, {result.n} public draws (seed {result.calibration_seed}), "
        f"weighting {result.weighting}",
    ]
    if result.target_rate is not None and result.epsilon is not None:
        err = f" ± {result.epsilon_stderr:.2g}" if result.epsilon_stderr is not None else ""
        lines.append(f"  epsilon for a {result.target_rate:.0%} replacement rate: {result.epsilon:.4g}{err} per token")
    rows = [(f"{e:.4g}", f"{r:.1%}", f"{1 - r:.1%}", f"(± {se:.1%})") for e, (r, se) in sorted(result.rates.items())]
    lines += format_table(("epsilon", "replaced", "kept", "(± stderr)"), rows, right=(1, 2), indent="  ")
    lines.append(
        "  Rates are uniform over the candidate vocabulary unless frequencies are given; on real text they differ "
        "(frequent tokens weigh more). (raw result: --json)"
    )
    return "\n".join(lines) + "\n"


def plot_calibration(result: CalibrationResult, path: str | os.PathLike[str]) -> None:
    """Draw the replacement rate against ε (matplotlib, from the ``eval`` extra) into ``path``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise MissingExtraError("--plot needs matplotlib: pip install 'hf-textdp[eval]'.") from err
    items = sorted(result.rates.items())
    eps = [e for e, _ in items]
    rate = [r for _, (r, _s) in items]
    stderr = [s for _, (_r, s) in items]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.errorbar(eps, rate, yerr=stderr, marker="o", capsize=3)
    if result.target_rate is not None and result.epsilon is not None:
        ax.axhline(result.target_rate, color="grey", linestyle=":")
        ax.axvline(result.epsilon, color="grey", linestyle=":")
    ax.set_xlabel("epsilon (per token)")
    ax.set_ylabel("replacement rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{result.mechanism} + {result.postprocess} (V = {result.V}, d = {result.d})")
    fig.tight_layout()
    fig.savefig(os.fspath(path))
    plt.close(fig)
