"""A law fitted to an additive mechanism, for the Bayes attack on released tokens (docs/attacks.md §2.2).

Noise-then-nearest has no closed-form law. Its shape does: the chance that x's noisy vector lands in
y's cell falls with the distance d(x, y) between their rows in the space the mechanism searches (E,
T(E) after a bound, or the projection; E for santext_plus, whose law mixes the exponential mechanism
with keeping the token). The attacker models

    log P[y | x] ≈ −λ·d(x, y) − log Σ_c exp(−λ·d(x, c))      (c over x's class)

and picks λ, with the prior's weight τ, where the posterior recovers the most tokens of public text
the attacker privatized with the real mechanism (:func:`~hf_textdp.evaluation.attacks.run.tune`): the
simulation fits the law. Inputs are searched among the ``neighbours`` nearest rows of each released
token (the neighbourhood the posterior is restricted to; the token itself is the first).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

from ...mechanisms.base import AdditiveMechanism
from ...privatizer import Privatizer
from .bayes import GuessLists, class_maps, sq_dist


__all__ = ["FittedLaw"]


class FittedLaw:
    """The fitted exponential law over each released token's neighbourhood (module docstring)."""

    method = "fitted"

    def __init__(self, priv: Privatizer, *, neighbours: int = 50, block: int = 1024) -> None:
        self.block = block
        self.neighbours = neighbours
        self.V = int(priv.engine.space.V)
        self.part_of, self.local = class_maps(priv)
        self.parts: list[tuple[npt.NDArray[np.int64], torch.Tensor, torch.Tensor]] = []
        for part, mech in priv.engine.class_mechanisms:
            index = mech.search_index(part.space) if isinstance(mech, AdditiveMechanism) else part.space.index
            R = index.E.float().cpu()
            self.parts.append((part.positions, R, (R * R).sum(1)))
        self.ys = np.zeros(0, dtype=np.int64)
        self.nb = np.zeros((0, neighbours), dtype=np.int64)
        self.nd = np.zeros((0, neighbours), dtype=np.float64)
        self.lambdas = np.zeros(0)
        self.log_z = np.zeros((0, self.V))

    def prepare(self, ys: npt.NDArray[np.int64], lambda_rho: tuple[float, ...]) -> None:
        """Neighbourhoods of the distinct released positions ``ys``, and log Z(x) for each λ of the grid.

        The grid is ``lambda_rho`` divided by ρ, the median distance from a released token's row to its
        nearest other row (λ·ρ is unit-free, so one grid serves every mechanism and ε).
        """
        self.ys = np.unique(ys)
        K = self.neighbours
        self.nb = np.full((self.ys.size, K), -1, dtype=np.int64)
        self.nd = np.full((self.ys.size, K), np.inf, dtype=np.float64)
        for i, (positions, R, sq) in enumerate(self.parts):
            rows_in = np.flatnonzero(self.part_of[self.ys] == i)
            kk = min(K, positions.size)
            for a in range(0, rows_in.size, self.block):
                rows = rows_in[a : a + self.block]
                d2 = sq_dist(R[torch.from_numpy(self.local[self.ys[rows]])], R, sq)
                top = torch.topk(d2, kk, dim=1, largest=False)
                self.nb[rows, :kk] = positions[top.indices.numpy()]
                self.nd[rows, :kk] = top.values.sqrt().double().numpy()
        # the token itself at distance 0 and first (float32 rounding leaves it a few ulps off)
        self.nd[self.nb == self.ys[:, None]] = 0.0
        order = np.argsort(self.nd, axis=1, kind="stable")
        self.nb, self.nd = np.take_along_axis(self.nb, order, 1), np.take_along_axis(self.nd, order, 1)
        rho = float(np.median(self.nd[:, 1])) if K > 1 and self.ys.size else 1.0
        self.lambdas = np.asarray(lambda_rho, dtype=np.float64) / max(rho, 1e-12)
        xs = np.unique(self.nb[self.nb >= 0])
        self.log_z = np.full((self.lambdas.size, self.V), np.nan)
        lam = torch.from_numpy(self.lambdas)[:, None, None]
        for i, (_, R, sq) in enumerate(self.parts):
            x_in = xs[self.part_of[xs] == i]
            for a in range(0, x_in.size, 128):
                x = x_in[a : a + 128]
                d = sq_dist(R[torch.from_numpy(self.local[x])], R, sq).sqrt_().double()
                self.log_z[:, x] = torch.logsumexp(-lam * d[None], dim=2).numpy()

    def self_log_lik(self, y: npt.NDArray[np.int64], lam: int) -> npt.NDArray[np.float64]:
        """log P[y | y] under the λ of grid index ``lam``."""
        out: npt.NDArray[np.float64] = -self.log_z[lam, y]
        return out

    def neighbourhood_scores(
        self, released: npt.NDArray[np.int64], logp: npt.NDArray[np.float64], tau: float, lam: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """Each released position's neighbourhood and its scores ``τ·log π(x) − λ·d(x, y) − log Z(x)``."""
        u = np.searchsorted(self.ys, released)
        nb, nd = self.nb[u], self.nd[u]
        ok = nb >= 0
        x = np.where(ok, nb, 0)
        sc = np.where(ok, tau * logp[x] - self.lambdas[lam] * nd - self.log_z[lam, x], -np.inf)
        return nb, sc

    def lists(
        self, ys: npt.NDArray[np.int64], logp: npt.NDArray[np.float64], tau: float, k: int, lam: int
    ) -> GuessLists:
        """Each distinct released position's ``k`` best inputs in its neighbourhood."""
        ys = np.unique(ys)
        nb, sc = self.neighbourhood_scores(ys, logp, tau, lam)
        order = np.argsort(-sc, axis=1, kind="stable")[:, :k]
        g, s = np.take_along_axis(nb, order, 1), np.take_along_axis(sc, order, 1)
        g = np.where(np.isfinite(s), g, -1)
        return GuessLists(ys, g, s, self.method)
