"""Bayes inversion per token: the posterior over the input given the released token (docs/attacks.md §2).

An adversary who knows the mechanism, its parameters and the public embedding matrix, and holds a
public corpus, ranks the inputs x of a released token y by

    τ·log π(x) + log P[M(x) = y]

with π the public token frequencies (add-α smoothed), τ the prior's weight (τ = 1 is the posterior;
the attacker picks τ on their own privatized public text, since their prior is not the private
data's) and P the mechanism's law:

- exact for tem and santext (:class:`ExactLaw`): the exponential mechanism
  P[y | x] ∝ exp(−(ε/2)·min(d(x, y), γ)) over x's class (docs/mechanisms/tem.md §3, santext.md §1);
- fitted by simulation for every other mechanism (:class:`~.fitted.FittedLaw`).

For each distinct released token the attack keeps its ``k`` best inputs (a :class:`GuessLists`): the
top-1 guess, the top-5, and the candidate list of the contextual attack.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from ...mechanisms.base import Mechanism
from ...mechanisms.santext_plus import SantextPlus
from ...mechanisms.tem import Tem
from ...privatizer import Privatizer


__all__ = ["GuessLists", "ExactLaw", "log_prior", "has_exact_law", "with_identity", "sq_dist"]


def log_prior(counts: npt.NDArray[np.int64], alpha: float) -> npt.NDArray[np.float64]:
    """``log π``: public counts per candidate position, add-α smoothed (every candidate gets mass)."""
    c = counts.astype(np.float64) + alpha
    out: npt.NDArray[np.float64] = np.log(c) - np.log(c.sum())
    return out


@dataclass(frozen=True)
class GuessLists:
    """Each distinct released token's best inputs, best first.

    Attributes:
        released (`np.ndarray`): ``[U]`` sorted distinct released positions.
        guesses (`np.ndarray`): ``[U, k]`` input positions, ``-1`` where fewer than k are possible.
        scores (`np.ndarray`): ``[U, k]`` ``log π(x) + log P[y | x]``, ``-inf`` on padding.
        method (`str`): ``"exact"`` or ``"fitted"``.
    """

    released: npt.NDArray[np.int64]
    guesses: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float64]
    method: str

    def for_tokens(self, released: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """The lists of each token's released position (every position must be in ``self.released``)."""
        idx = np.searchsorted(self.released, released)
        if released.size and not np.array_equal(self.released[np.minimum(idx, self.released.size - 1)], released):
            raise ValueError("a released position has no guess list")
        return self.guesses[idx], self.scores[idx]


def has_exact_law(mech: Mechanism) -> bool:
    """Whether :class:`ExactLaw` applies: tem or santext (the exponential mechanism over a class)."""
    return isinstance(mech, Tem) and not isinstance(mech, SantextPlus)


def sq_dist(a: torch.Tensor, b: torch.Tensor, b_sq: torch.Tensor) -> torch.Tensor:
    return ((a * a).sum(1, keepdim=True) + b_sq[None, :] - 2.0 * (a @ b.T)).clamp_(min=0.0)


def class_maps(priv: Privatizer) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """For every candidate position: the index of the class the privatizer releases it in, and its
    position inside that class's space (the privatizer's own split, one class without it)."""
    V = int(priv.engine.space.V)
    part_of = np.full(V, -1, dtype=np.int64)
    local = np.full(V, -1, dtype=np.int64)
    for i, (part, _) in enumerate(priv.engine.class_mechanisms):
        part_of[part.positions] = i
        local[part.positions] = np.arange(part.positions.size)
    return part_of, local


class ExactLaw:
    """The exponential mechanism's law on each class (tem, santext), for scoring inputs of released tokens.

    Class by class (the release never leaves an input's class, space.md §7): with s = ε/2 and γ the
    class's truncation (∞ for santext), log P[y | x] = −s·min(d(x, y), γ) − log Z(x), with
    log Z(x) = logsumexp_c −s·min(d(x, c), γ) over the class. Distances in float32 (an attack, not a
    guarantee); blocks of rows, never a V × V matrix.
    """

    method = "exact"

    def __init__(self, priv: Privatizer, *, block: int = 1024) -> None:
        self.block = block
        self.parts: list[tuple[npt.NDArray[np.int64], torch.Tensor, torch.Tensor, float, float, torch.Tensor]] = []
        self.part_of, self.local = class_maps(priv)
        for part, mech in priv.engine.class_mechanisms:
            assert isinstance(mech, Tem)
            s, gamma = mech.score_scale(), mech.gamma_for(part.space.V)
            E = part.space.E.float().cpu()
            sq = (E * E).sum(1)
            log_z = torch.empty(part.space.V, dtype=torch.float64)
            for a in range(0, part.space.V, block):
                d = sq_dist(E[a : a + block], E, sq).sqrt_().clamp_(max=gamma)
                log_z[a : a + block] = torch.logsumexp(-s * d.double(), dim=1)
            self.parts.append((part.positions, E, sq, s, gamma, log_z))
        self.lambdas = np.asarray([self.parts[0][3]])  # one law, ε/2: the grid has one point

    def prepare(self, ys: npt.NDArray[np.int64], lambda_rho: tuple[float, ...]) -> None:
        """Nothing to fit: the law is exact (the interface of :class:`~.fitted.FittedLaw`)."""

    def self_log_lik(self, y: npt.NDArray[np.int64], lam: int = 0) -> npt.NDArray[np.float64]:
        """log P[y | y] for each position."""
        out = np.empty(y.size, dtype=np.float64)
        for i, (_, _, _, _, _, log_z) in enumerate(self.parts):
            m = self.part_of[y] == i
            out[m] = -log_z[torch.from_numpy(self.local[y[m]])].numpy()
        return out

    def lists(
        self, ys: npt.NDArray[np.int64], logp: npt.NDArray[np.float64], tau: float, k: int, lam: int = 0
    ) -> GuessLists:
        """Each distinct released position's ``k`` best inputs by ``tau·log π(x) + log P[y | x]``."""
        ys = np.unique(ys)
        guesses = np.full((ys.size, k), -1, dtype=np.int64)
        scores = np.full((ys.size, k), -np.inf, dtype=np.float64)
        for i, (positions, E, sq, s, gamma, log_z) in enumerate(self.parts):
            rows_in = np.flatnonzero(self.part_of[ys] == i)
            base = tau * torch.from_numpy(logp[positions]) - log_z
            kk = min(k, positions.size)
            for a in range(0, rows_in.size, self.block):
                rows = rows_in[a : a + self.block]
                d = sq_dist(E[torch.from_numpy(self.local[ys[rows]])], E, sq).sqrt_().clamp_(max=gamma)
                top = torch.topk(base[None, :] - s * d.double(), kk, dim=1)
                guesses[rows, :kk] = positions[top.indices.numpy()]
                scores[rows, :kk] = top.values.numpy()
        return GuessLists(ys, guesses, scores, self.method)


def with_identity(lists: GuessLists, self_score: npt.NDArray[np.float64]) -> GuessLists:
    """The lists with each released position itself among its guesses (in the last place when it was missing).

    ``self_score[u]`` is the score of guessing ``lists.released[u]`` itself; lists are re-sorted by score.
    """
    g, sc = lists.guesses.copy(), lists.scores.copy()
    missing = ~(g == lists.released[:, None]).any(1)
    free = (g < 0).any(1)
    slot = np.where(free, np.argmax(g < 0, axis=1), g.shape[1] - 1)
    rows = np.flatnonzero(missing)
    g[rows, slot[rows]] = lists.released[rows]
    sc[rows, slot[rows]] = self_score[rows]
    order = np.argsort(-np.where(g >= 0, sc, -np.inf), axis=1, kind="stable")
    return GuessLists(lists.released, np.take_along_axis(g, order, 1), np.take_along_axis(sc, order, 1), lists.method)
