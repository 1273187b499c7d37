"""tem: the Truncated Exponential Mechanism (Carvalho et al. 2021, arXiv:2107.07928; tem.md).

For a candidate w, TEM outputs y ∈ C with probability (tem.md §3, the paper's Algorithm 2)

    P[TEM(w) = y] = exp((ε/2)·f(w, y)) / Σ_{y'∈C} exp((ε/2)·f(w, y')),   f(w, y) = −min(d(w, y), γ),

where d is the Euclidean distance between rows of the public matrix E and γ the truncation
threshold of the paper's Theorem 3, taken with equality (tem.md §2):

    γ = max(0, (2/ε)·(log1p(−β) + ln(V − 1) − ln β)).

Guarantee: ε·d metric DP (pure, δ = 0), because t ↦ min(t, γ) is 1-Lipschitz; per token the loss
between any two candidates is at most ε·min(d(w, w'), γ), so ε_tok = ε·min(diam, γ) (tem.md §5,
accounting.md §1). The ½ in the exponent (a Gumbel of scale 2/ε in the paper) is what makes the factor ε.

Sampling is exact and never builds a V × V matrix: a rejection sampler whose proposal is bounded
by an exact integer product (:class:`~hf_textdp.mechanisms.exponential.ExponentialSampler`,
``sampler="dense"``, a handful of uniforms per token from its keyed stream), or the paper's list form
with one ⊥ element per row that stands for every candidate outside the γ-ball and is resolved
uniformly (Algorithm 3, ``sampler="list"``). Both have the law above; only the law is normative.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from ..accounting import Claim
from ..errors import InvalidParameterError
from ..rng import Streams, as_streams
from ..scale import scale_stats
from ..validation import check_choice, check_float, check_int, check_open_unit
from .base import SelectionMechanism
from .exponential import ExponentialSampler
from .tem_list import gumbel_max_list


if TYPE_CHECKING:
    from ..space import EmbeddingSpace


__all__ = ["Tem", "tem_gamma", "tem_beta_for_gamma"]


def tem_gamma(*, epsilon: float, beta: float, V: int) -> float:
    """Truncation threshold γ of TEM (seed 004 Theorem 3 with equality; tem.md §2), in float64.

    Args:
        epsilon (`float`): ε > 0.
        beta (`float`): β_TEM ∈ (0, 1), the utility failure probability (not PrivEmb's β).
        V (`int`): the number of candidates |C| ≥ 2.

    Returns:
        `float`: ``max(0, (2/ε)·(log1p(−β) + ln(V − 1) − ln β))``; the clamp applies when
        (1 − β)(V − 1) < β, and γ = 0 makes the output uniform over C.

    Example:

    >>> round(tem_gamma(epsilon=2.0, beta=0.2, V=5), 10)  # ln 16
    2.7725887222
    """
    return max(0.0, (2.0 / epsilon) * (math.log1p(-beta) + math.log(V - 1) - math.log(beta)))


def tem_beta_for_gamma(*, epsilon: float, gamma: float, V: int) -> float:
    """The β_TEM that a given γ implies: 1 / (1 + e^{εγ/2}/(V − 1)) (Theorem 3's bound on P[outside]).

    Example:

    >>> round(tem_beta_for_gamma(epsilon=2.0, gamma=math.log(16.0), V=5), 12)
    0.2
    """
    t = epsilon * gamma / 2.0 - math.log(V - 1)
    if t > 700.0:  # e^t overflows; β underflows to e^{-t}
        return math.exp(-t)
    return 1.0 / (1.0 + math.exp(t))


class Tem(SelectionMechanism):
    """Truncated Exponential Mechanism over the model's candidate set (tem.md).

    Args:
        epsilon (`float`): metric ε per unit of Euclidean distance between rows of E.
        beta (`float`, *optional*, defaults to `0.001`): β_TEM ∈ (0, 1), the probability that the
            output lies outside the γ-ball of the input (Theorem 3); sets γ (tem.md §2).
        gamma (`float`, *optional*, defaults to `None`): an explicit threshold γ ≥ 0 instead of β
            (giving both ``gamma`` and a non-default ``beta`` raises).
        sampler (`str`, *optional*, defaults to `"dense"`): ``"dense"`` (the exact rejection sampler over
            all of C) or ``"list"`` (the paper's ⊥ form, V uniforms a token; same law, other draws).
        chunk_size (`int`, *optional*, defaults to `4096`): candidates per chunk of the ``list`` sampler
            (memory only: outputs do not depend on it).

    Raises:
        InvalidParameterError: a value outside the allowed range (the message names it).

    Example:

    >>> mech = Tem(epsilon=2.0, beta=0.2)
    >>> round(mech.gamma_for(5), 10)
    2.7725887222
    >>> Tem(epsilon=2.0, sampler="exact")
    Traceback (most recent call last):
    ...
    hf_textdp.errors.InvalidParameterError: sampler must be one of ['dense', 'list'], got 'exact'.
    """

    name = "tem"
    OPTIONS = {"beta": 0.001, "gamma": None, "sampler": "dense", "chunk_size": 4096}
    SAMPLERS: ClassVar[tuple[str, ...]] = ("dense", "list")
    #: factor of ε in the exponent (the paper's Gumbel scale 2/ε); 1.0 would only give 2ε·d metric DP.
    EXPONENT_FACTOR: ClassVar[float] = 0.5

    beta: float | None
    gamma: float | None
    sampler: str
    chunk_size: int
    _sampler: tuple[EmbeddingSpace, ExponentialSampler] | None = None

    def _validate(self) -> None:
        opts = self.options
        self.beta = check_open_unit(opts["beta"], "beta")
        self.gamma = None if opts["gamma"] is None else check_float(opts["gamma"], "gamma", minimum=0.0, strict=False)
        if self.gamma is not None and self.beta != self.OPTIONS["beta"]:
            raise InvalidParameterError(
                f"gamma and beta: give one of them, got gamma={opts['gamma']!r} and beta={opts['beta']!r} "
                f"(beta sets gamma; leave beta at its default {self.OPTIONS['beta']} when gamma is given)."
            )
        self.sampler = check_choice(opts["sampler"], "sampler", self.SAMPLERS)
        self.chunk_size = check_int(opts["chunk_size"], "chunk_size", minimum=1)
        opts.update(beta=self.beta, gamma=self.gamma, chunk_size=self.chunk_size)

    # ---------------------------------------------------------------- the law
    def gamma_for(self, V: int) -> float:
        """γ for a candidate set of size V: the ``gamma`` option, or :func:`tem_gamma` from β."""
        if self.gamma is not None:
            return self.gamma
        assert self.beta is not None
        return tem_gamma(epsilon=self.epsilon, beta=self.beta, V=V)

    def score_scale(self) -> float:
        """The factor multiplying −min(d, γ) in the exponent: ε/2 (tem.md §3)."""
        return self.EXPONENT_FACTOR * self.epsilon

    def bottom_log_weight(self, n_out: torch.Tensor) -> torch.Tensor:
        """ln n_out: ⊥ carries the total weight n_out·e^{−εγ/2} of the candidates outside the ball."""
        return torch.log(n_out)

    def bottom_rank(self, u: torch.Tensor, n_out: torch.Tensor) -> torch.Tensor:
        """Which outside candidate ⊥ resolves to: k = ⌊u·n_out⌋, uniform over the n_out of them."""
        k = torch.floor(u * n_out.double()).to(torch.int64)
        return torch.minimum(k, (n_out - 1).clamp(min=0))

    # ---------------------------------------------------------------- sampling
    def sampler_for(self, space: EmbeddingSpace) -> ExponentialSampler:
        """The exact sampler over all of C for ``space`` (built once per space: O(V·d) int8, never V × V)."""
        cached = self._sampler
        if cached is None or cached[0] is not space:
            cached = (space, ExponentialSampler(space.E))
            self._sampler = cached
        return cached[1]

    def sample(
        self, space: EmbeddingSpace, positions: torch.Tensor, streams: Streams | torch.Generator
    ) -> torch.Tensor:
        """Output positions ``[n]`` for input positions ``[n]``, token i from ``streams[i]`` (tem.md §4)."""
        dev = space.E.device
        positions = positions.to(dev, torch.int64)
        if positions.numel() == 0 or math.isinf(self.epsilon):  # ε = ∞ only in test mode: no noise
            return positions.clone()
        st = as_streams(streams, positions.numel(), dev)
        gamma = self.gamma_for(space.V)
        if self.sampler == "list":
            index = space.index
            return gumbel_max_list(
                space.E[positions],
                index.n32,
                index.Em2T,
                scale=self.score_scale(),
                gamma=gamma,
                chunk_size=self.chunk_size,
                streams=st,
                bottom_log_weight=self.bottom_log_weight,
                bottom_rank=self.bottom_rank,
            )
        return self.sampler_for(space).sample(positions, st, scale=self.score_scale(), gamma=gamma)

    # ---------------------------------------------------------------- accounting
    def claim(self, space: EmbeddingSpace) -> Claim:
        """ε·d metric DP; ε_tok = ε·min(diam, γ) and pair bound ε·min(d(w, w'), γ) (tem.md §5, accounting.md §1)."""
        stats = scale_stats(space.E, store=space.store)
        gamma = self.gamma_for(space.V)
        eps = self.epsilon
        E64 = space.E.double()

        def pair_bound(a: int, b: int) -> float:
            return _times(eps, min(float(torch.linalg.vector_norm(E64[a] - E64[b])), gamma))

        return Claim(
            guarantee="metric_dp",
            metric="euclidean",
            epsilon=eps,
            delta=None,
            epsilon_token=_times(eps, min(stats.diam, gamma)),
            delta_token=0.0,
            certified=True,
            pair_bound=pair_bound,
        )

    def details(self, space: EmbeddingSpace) -> dict[str, Any]:
        gamma = self.gamma_for(space.V)
        if self.gamma is None:
            beta_tem = self.beta
        else:  # the utility level the given γ implies (Theorem 3)
            beta_tem = tem_beta_for_gamma(epsilon=self.epsilon, gamma=gamma, V=space.V)
        stats = scale_stats(space.E, store=space.store)
        return {
            "metric_dp": {"epsilon": self.epsilon, "metric": "euclidean"},
            "gamma": gamma,
            "gamma_source": "beta" if self.gamma is None else "gamma",
            "beta_tem": beta_tem,
            "truncates": bool(gamma < stats.diam),
            "diam_exact": stats.diam_exact,
        }


def _times(eps: float, dist: float) -> float:
    """ε·dist, with ∞·0 (test mode, ε = ∞) read as ∞ rather than NaN."""
    out = eps * dist
    return math.inf if math.isnan(out) else out
