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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import PrivatizerConfig
from ..errors import HfTextDPError, InvalidParameterError, ParameterTypeError
from ..io.models import load_space
from ..mechanisms.base import Mechanism
from ..mechanisms.madlib import Madlib
from ..postprocess import PostprocessStep
from ..rng import validate_seed
from ..scale import scale_stats
from ..space import DEFAULT_MODEL, EmbeddingSpace
from ..utils.logging import get_logger
from ..utils.progress import counted, progress_bar
from ..validation import check_epsilon, check_int, check_open_unit
from .rate_estimators import Mixture, MonteCarlo, RaoBlackwell, bisect_log, madlib_cell_radii


__all__ = ["calibrate", "CalibrationResult", "madlib_cell_radii"]

logger = get_logger("hf_textdp.calibrate")  # the name its log lines have always carried (issue 38 moved the module)

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


def _epsilon_list(epsilons: Iterable[Any] | None) -> list[float]:
    if epsilons is None:
        return []
    if isinstance(epsilons, (str, bytes)) or not isinstance(epsilons, Iterable):
        raise ParameterTypeError(f"epsilons must be a list of floats > 0, got {type(epsilons).__name__}.")
    return [check_epsilon(e, "epsilons[]") for e in epsilons]


def _checked_arguments(
    target_rate: float | None,
    config: PrivatizerConfig | None,
    mechanism: str,
    model: str,
    options: dict[str, Any] | None,
    epsilons: Iterable[float] | None,
    n: int,
    calibration_seed: int,
) -> tuple[float | None, int, int, PrivatizerConfig, list[float]]:
    """:func:`calibrate`'s arguments checked: (target rate, n, seed, the configuration, the ε list)."""
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
    return target_rate, n, seed, base, eps_list


_Make = Callable[[float], tuple[Mechanism, PostprocessStep | None]]


def _maker(base: PrivatizerConfig, on: EmbeddingSpace) -> _Make:
    """The mechanism and post-processing step of ``base`` at a given ε, set up on the space ``on``."""

    def make(epsilon: float) -> tuple[Mechanism, PostprocessStep | None]:
        mech, step = dataclasses.replace(base, epsilon=float(epsilon)).build()
        mech.setup(on)
        return mech, step

    return make


def _draw_tokens(
    space: EmbeddingSpace, rng: np.random.Generator, n: int, frequencies: Mapping[Any, Any] | None
) -> tuple[np.ndarray, str]:
    """``n`` public candidate positions drawn uniformly or by the frequency table, and the weighting's name."""
    if frequencies is None:
        return rng.integers(0, space.V, n), "uniform"
    pi, weighting = _weights(space, frequencies)
    return rng.choice(space.V, n, p=pi), weighting


def _estimator(
    space: EmbeddingSpace,
    base: PrivatizerConfig,
    rng: np.random.Generator,
    w: np.ndarray,
    seed: int,
    weighting: str,
    rao_blackwell: bool,
) -> RaoBlackwell | MonteCarlo | Mixture:
    """The rate estimator of the draws ``w``: Rao–Blackwell from the cell radii (kept in ``_RADII_MEMO``),
    Monte Carlo, or per class (space.md §7: each draw is calibrated inside its own class's space) a mixture."""
    n, d = w.size, space.d
    parts = space.class_parts()
    cls_of, local = space.position_class(), space.local_positions()
    by_class = [(part, local[w[cls_of[w] == part.index]]) for part in parts]
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
        return RaoBlackwell(d, _RADII_MEMO[key])
    if len(parts) == 1:
        return MonteCarlo(_maker(base, space), space, w, seed)
    return Mixture(
        [(lw.size / n, MonteCarlo(_maker(base, part.space), part.space, lw, seed)) for part, lw in by_class if lw.size]
    )


def _solve_target(
    estimator: RaoBlackwell | MonteCarlo | Mixture,
    rate: Callable[[float], tuple[float, float]],
    target_rate: float,
    median_rho1: float,
    d: int,
    mechanism: str,
) -> float:
    """The ε whose estimated replacement rate is ``target_rate`` (bisection on log ε)."""
    if isinstance(estimator, RaoBlackwell):
        lo_rate, hi_rate = estimator.range()
        if not lo_rate < target_rate < hi_rate:
            raise InvalidParameterError(
                f"target_rate={target_rate} cannot be reached on this space: the estimated replacement rate of "
                f"madlib + nearest lies in ({lo_rate:.4g}, {hi_rate:.4g}) for all epsilon."
            )
        finite = estimator.radii[np.isfinite(estimator.radii) & (estimator.radii > 0)]
        start = d / float(np.median(finite)) if finite.size else 1.0
        return bisect_log(rate, target_rate, start, rel_tol=1e-12)
    start = 1.0 / median_rho1 if median_rho1 > 0 else 1.0
    try:
        return bisect_log(rate, target_rate, start, rel_tol=1e-3, max_iter=40)
    except HfTextDPError as err:
        raise InvalidParameterError(
            f"target_rate={target_rate}: calibration of mechanism {mechanism!r} failed: {err}"
        ) from err


# --------------------------------------------------------------------------- public entry point
def _evaluate(
    estimator: RaoBlackwell | MonteCarlo | Mixture,
    target_rate: float | None,
    eps_list: list[float],
    median_rho1: float,
    d: int,
    mechanism: str,
    progress: bool,
) -> tuple[float | None, float | None, dict[float, tuple[float, float]]]:
    """(the ε of ``target_rate``, its standard error, ε → (rate, standard error)) for the solved ε and ``eps_list``."""
    rate = counted(estimator.rate, bar := progress_bar(desc="calibrate", unit="rate", enabled=progress))
    epsilon: float | None = None
    epsilon_se: float | None = None
    rates: dict[float, tuple[float, float]] = {}
    if target_rate is not None:
        epsilon = _solve_target(estimator, rate, target_rate, median_rho1, d, mechanism)
        rates[epsilon] = rate(epsilon)
        slope = estimator.slope(epsilon)
        epsilon_se = abs(rates[epsilon][1] / slope) if slope != 0 and math.isfinite(slope) else None
    for e in eps_list:
        rates[e] = rate(e)
    bar.close()
    return epsilon, epsilon_se, rates


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
    target_rate, n, seed, base, eps_list = _checked_arguments(
        target_rate, config, mechanism, model, options, epsilons, n, calibration_seed
    )
    space = load_space(base.model, base.device, base.candidates)
    mech0, step0 = _maker(base, space)(eps_list[0] if eps_list else base.epsilon)
    if step0 is not None and step0.RELEASES_VECTORS:
        raise InvalidParameterError(
            f"postprocess={base.postprocess!r} releases vectors, not tokens: no token is 'replaced', so there is "
            "no replacement rate to calibrate."
        )
    stats = scale_stats(mech0.scale_metric_matrix(space), store=space.store)
    rng = np.random.default_rng(seed)
    w, weighting = _draw_tokens(space, rng, n, frequencies)
    mech_options = {k: v for k, v in mech0.parameters().items() if k not in ("epsilon", "delta")}
    rao_blackwell = (
        type(mech0) is Madlib and mech0.options.get("bound", "none") == "none" and base.postprocess == "nearest"
    )
    estimator = _estimator(space, base, rng, w, seed, weighting, rao_blackwell)

    epsilon, epsilon_se, rates = _evaluate(
        estimator, target_rate, eps_list, stats.median_rho1, space.d, base.mechanism, progress
    )
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
        V=space.V,
        d=space.d,
        space_hash=space.space_hash,
        options=mech_options,
    )
