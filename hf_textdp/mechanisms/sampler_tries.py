"""The proposals and acceptance tests of the exponential sampler's tokens (docs/mechanisms/tem.md, "Sampling").

:class:`~hf_textdp.mechanisms.exponential.ExponentialSampler` bounds each token's weights in groups; the tokens
then try: try t of a token reads two Philox blocks of :attr:`~hf_textdp.rng.Draw.SAMPLER` with extra = t (u₁
picks a hot column or a cold block by the inverse CDF of the proposal, u₂ a column in the block, u₃ accepts),
and the token's output is its first accepted try. A try depends on the token's key, position and t only, so
tries can run in any grouping: a round runs tries t … t + T − 1 of every token still pending at once, and the
tokens still pending after their group's first round wait in a :class:`Pool` with those of later groups, whose
next rounds then run together (fewer, larger rounds; the outputs of trying one at a time). Where the CPU's
key kernel is built, the proposed columns come from its C picker (``kernels/int8_bounds.h``, the numbers of
:func:`_pick` bit for bit, without copying a shared proposal per token).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from .. import backend
from ..rng import Draw, Streams


__all__ = ["Pending", "Pool", "run_round"]

#: target columns per block of the proposal (ExponentialSampler's)
BLOCK = 64


@dataclasses.dataclass(frozen=True)
class Pending:
    """Tokens that try from try ``t`` on: their places in the output, inputs and streams, and the proposals (hot
    columns ``cols`` and their lower bounds ``dlo_c``, the blocks' lower bounds ``dlo_b``, cumulative weights
    ``cum``) of each token, or of each distinct input with ``row`` the row of each token's (a group's tokens with
    the same input share one proposal)."""

    index: torch.Tensor
    x_pos: torch.Tensor
    streams: Streams
    cols: torch.Tensor
    dlo_c: torch.Tensor
    dlo_b: torch.Tensor
    cum: torch.Tensor
    t: int
    row: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.index.numel())

    def select(self, keep: torch.Tensor | slice, t: int) -> Pending:
        """The tokens ``keep`` (a bool mask, indices or a slice), trying from ``t`` on."""
        s = self.streams
        streams = Streams(s.k0[keep], s.k1[keep], s.position[keep])
        if self.row is not None:  # the shared proposals stay; only the tokens' rows are selected
            rows = (self.cols, self.dlo_c, self.dlo_b, self.cum)
            return Pending(self.index[keep], self.x_pos[keep], streams, *rows, t, self.row[keep])
        return Pending(
            self.index[keep], self.x_pos[keep], streams, self.cols[keep], self.dlo_c[keep], self.dlo_b[keep],
            self.cum[keep], t,
        )  # fmt: skip

    def own_rows(self) -> Pending:
        """The same tokens, each with its own copy of its proposal (``row`` None)."""
        if self.row is None:
            return self
        r = self.row
        return Pending(
            self.index, self.x_pos, self.streams, self.cols[r], self.dlo_c[r], self.dlo_b[r], self.cum[r], self.t
        )

    @staticmethod
    def cat(parts: list[Pending]) -> Pending:
        """The tokens of ``parts`` (all trying from the same ``t``) as one: sharing the proposals where every part
        reads the same ones through ``row``, else each with its own."""
        if len(parts) == 1:
            return parts[0]
        assert len({p.t for p in parts}) == 1, "pooled tokens try from the same try on"
        first = parts[0]
        shared = all(p.row is not None and p.cum is first.cum for p in parts)
        parts = parts if shared else [p.own_rows() for p in parts]

        def cat(name: str) -> torch.Tensor:
            return torch.cat([getattr(p, name) for p in parts])

        streams = Streams(*(torch.cat([getattr(p.streams, n) for p in parts]) for n in ("k0", "k1", "position")))
        if shared:
            rows = (first.cols, first.dlo_c, first.dlo_b, first.cum)
            return Pending(cat("index"), cat("x_pos"), streams, *rows, first.t, cat("row"))
        return Pending(
            cat("index"), cat("x_pos"), streams, cat("cols"), cat("dlo_c"), cat("dlo_b"), cat("cum"), first.t
        )


#: ``distances(x_pos [n], target columns [n, T])``: float64 ‖e_x − e_c‖ ``[n, T]``
Distances = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclasses.dataclass(frozen=True)
class Law:
    """What a round needs of the sampler: the blocks' sizes (float64), the real columns ``Vt``, the targets'
    positions in E, ``scale`` (a) and ``gamma`` of P(c | x) ∝ exp(−a·min(d_c, γ)), and the distances."""

    block_size: torch.Tensor
    Vt: int
    targets: torch.Tensor
    scale: float
    gamma: float
    distances: Distances


def _pick(p: Pending, u: torch.Tensor, law: Law) -> tuple[torch.Tensor, torch.Tensor]:
    """The columns ``[n, T]`` that the tries with uniforms ``u`` ``[n, T, 3]`` propose, and their lower bounds: u₁ by
    the inverse CDF of the proposal (a hot column, or a block), u₂ uniformly in the block."""
    cum = p.cum if p.row is None else p.cum.index_select(0, p.row)
    target = u[:, :, 0] * cum[:, -1:]
    k = torch.searchsorted(cum, target.contiguous(), right=True).clamp_(max=cum.shape[1] - 1)
    n_hot = p.cols.shape[1]
    is_hot = k < n_hot
    kh = k.clamp(max=n_hot - 1)
    b = (k - n_hot).clamp(min=0)
    size = law.block_size[b]
    col_cold = b * BLOCK + torch.floor(u[:, :, 1] * size).to(torch.int64).clamp_(max=BLOCK - 1)
    if p.row is None:
        hot_col, hot_dlo, cold_dlo = p.cols.gather(1, kh), p.dlo_c.gather(1, kh), p.dlo_b.gather(1, b)
    else:
        r = p.row[:, None]
        hot_col, hot_dlo, cold_dlo = p.cols[r, kh], p.dlo_c[r, kh], p.dlo_b[r, b]
    col = torch.where(is_hot, hot_col, col_cold).clamp_(max=law.Vt - 1)
    dlo = torch.where(is_hot, hot_dlo, cold_dlo)
    return col, dlo


def run_round(p: Pending, T: int, law: Law, out: torch.Tensor) -> Pending:
    """Tries ``p.t … p.t + T − 1`` of every token of ``p``: each token's first accepted one goes to ``out`` at its
    place; returns the tokens that accepted none (trying from ``p.t + T`` on)."""
    n = len(p)
    dev = p.cum.device
    tries = torch.arange(p.t, p.t + T, device=dev)
    rows = torch.arange(n, device=dev).repeat_interleave(T)
    u = p.streams.select(rows).uniforms(Draw.SAMPLER, 3, extra=tries.repeat(n)).view(n, T, 3)
    picked = backend.sampler_pick((p.cols, p.dlo_c, p.dlo_b, p.cum), p.row, u, law.block_size, law.Vt)
    col, dlo = picked if picked is not None else _pick(p, u, law)
    dist = law.distances(p.x_pos, law.targets[col])  # [n, T]
    gap = (dist.clamp(max=law.gamma) - dlo).clamp_(min=0.0)
    ok = u[:, :, 2].log() < -law.scale * gap  # [n, T]
    done = ok.any(1)
    first = ok.to(torch.int8).argmax(1)
    acc = torch.nonzero(done).squeeze(1)
    out[p.index[acc]] = col[acc, first[acc]]
    return p.select(torch.nonzero(~done).squeeze(1), p.t + T)


class Pool:
    """Tokens still pending after their first round: once ``limit`` of them wait (and at :meth:`finish`) they run
    rounds of ``T`` tries, ``limit`` tokens a round at most, until each has accepted. Tokens that read shared
    proposals keep reading them (the caller finishes the pool before those proposals change)."""

    def __init__(self, law: Law, out: torch.Tensor, T: int, limit: int) -> None:
        self.law, self.out, self.T, self.limit = law, out, T, limit
        self.parts: list[Pending] = []
        self.n = 0

    def add(self, p: Pending) -> None:
        if len(p):
            self.parts.append(p)
            self.n += len(p)
        if self.n >= self.limit and self.parts[0].row is None:
            self.finish()

    def finish(self) -> None:
        """Run every waiting token's rounds until each has accepted."""
        if not self.parts:
            return
        p = Pending.cat(self.parts)
        self.parts, self.n = [], 0
        while len(p):
            rest = [
                run_round(p.select(slice(a, a + self.limit), p.t), self.T, self.law, self.out)
                for a in range(0, len(p), self.limit)
            ]
            p = Pending.cat(rest)
