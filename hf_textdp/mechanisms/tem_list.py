"""TEM's list sampler: Gumbel-max over chunks of C with one ⊥ element per row (tem.md §4).

The paper's list form (Carvalho et al. 2021, arXiv:2107.07928, Algorithm 3): every candidate inside
the γ-ball of the input gets score −(ε/2)·d plus a Gumbel; the candidates outside it are merged into
one ⊥ element of weight n_out·e^{−εγ/2}, resolved uniformly among them. Same law as the dense sampler.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..rng import Draw, Streams, as_streams
from ..search import exact_fp32_matmul


__all__ = ["chunk_distances", "gumbel_max_list"]


def chunk_distances(x: torch.Tensor, x_sq: torch.Tensor, n32: torch.Tensor, em2t: torch.Tensor) -> torch.Tensor:
    """fp32 distances ``[B, c]`` via ‖x‖² + ‖e‖² − 2x·eᵀ, clamped at 0, square-rooted (tem.md §4).

    Args:
        x (`torch.Tensor` `[B, d]` fp32): the inputs' rows.
        x_sq (`torch.Tensor` `[B]` fp32): their squared norms (rounded from float64).
        n32 (`torch.Tensor` `[c]` fp32): the chunk's squared norms (rounded from float64).
        em2t (`torch.Tensor` `[d, c]` fp32): −2·Eᵀ for the chunk (exact in fp32).

    Call it inside :func:`~hf_textdp.search.exact_fp32_matmul` (no TF32 / bf16).
    """
    D = torch.addmm(n32, x, em2t)
    D.add_(x_sq[:, None]).clamp_(min=0.0).sqrt_()
    return D


def _neg_log_neg_log(u: torch.Tensor) -> torch.Tensor:
    """In place: u ↦ log(−log u), so that ``s − result`` adds a standard Gumbel (u = 0 gives +inf)."""
    return u.log_().neg_().log_()


def _chunk_uniforms(streams: Streams, c0: int, c1: int) -> torch.Tensor:
    """Uniforms ``[B, c1 − c0]`` of columns c0 … c1 − 1 (column c is uniform c of the :attr:`Draw.SAMPLER` draw)."""
    odd = c0 % 2
    return streams.uniforms(Draw.SAMPLER, c1 - c0 + odd, start=c0 // 2)[:, odd:]


def _bottom_columns(
    arg: torch.Tensor,
    rows: torch.Tensor,
    k: torch.Tensor,
    out_counts: torch.Tensor,
    chunk_size: int,
    x: torch.Tensor,
    x_sq: torch.Tensor,
    n32: torch.Tensor,
    em2t: torch.Tensor,
    gamma: float,
) -> None:
    """For the ``rows`` where ⊥ won, ``arg`` becomes the k-th column outside the γ-ball (in increasing order): the
    chunks holding it are recomputed, by the first pass's call (:func:`gumbel_max_list`, under its fp32 mode)."""
    if not rows.numel():
        return
    V = n32.shape[0]
    cum = torch.cumsum(out_counts, 1)  # outside columns up to and including each chunk
    kr = k[rows]
    chunk_of = (cum[rows] <= kr[:, None]).sum(1)  # first chunk whose cumulative count exceeds k
    before = torch.where(chunk_of > 0, cum[rows, (chunk_of - 1).clamp(min=0)], torch.zeros_like(kr))
    for ci in torch.unique(chunk_of).tolist():
        c0 = ci * chunk_size  # the first pass's starts: range(0, V, chunk_size)
        c1 = min(c0 + chunk_size, V)
        dist = chunk_distances(x, x_sq, n32[c0:c1], em2t[:, c0:c1])  # same call as the first pass
        sel = chunk_of == ci
        rr = rows[sel]
        outside = dist[rr] > gamma
        if not bool((outside.sum(1) == out_counts[rr, ci]).all()):
            raise AssertionError("tem list sampler: recomputed distances differ from the first pass")
        target = (kr[sel] - before[sel])[:, None]
        j = torch.argmax((torch.cumsum(outside.to(torch.int64), 1) > target).to(torch.int8), dim=1)
        arg[rr] = j + c0


def gumbel_max_list(
    x: torch.Tensor,
    n32: torch.Tensor,
    em2t: torch.Tensor,
    *,
    scale: float,
    gamma: float,
    chunk_size: int,
    streams: Streams | torch.Generator,
    bottom_log_weight: Callable[[torch.Tensor], torch.Tensor] | None = None,
    bottom_rank: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """TEM's list form with the ⊥ element (seed 004 Algorithm 3; tem.md §4 ``sampler="list"``).

    Gumbel-max over the scores ``−scale·d`` of the columns inside the γ-ball L_w and one ⊥ per row with
    score ``−scale·γ + ln n_out`` (absent when n_out = 0); if ⊥ wins, the k-th column (in increasing
    order) outside the ball is returned, k = ⌊u·n_out⌋ for a float64 uniform u. Equal in law to
    :class:`ExponentialSampler`. Column c's Gumbel uses uniform c of the token's :attr:`Draw.SAMPLER`
    draw; ⊥'s Gumbel and u are uniforms 0 and 1 of its ``extra=1`` draw. The complement of L_w is never
    stored: the chunks holding a winning ⊥'s k-th outside column are recomputed.

    Args:
        bottom_log_weight (`callable`, *optional*): ``n_out ↦ ln n_out`` (float64 tensor); a hook for tests.
        bottom_rank (`callable`, *optional*): ``(u, n_out) ↦ k``; a hook for tests.

    Returns:
        `torch.Tensor` `[B]` int64: column indices, on ``x``'s device.
    """
    B = x.shape[0]
    V = n32.shape[0]
    dev = x.device
    st = as_streams(streams, B, dev)
    x_sq = (x.double() ** 2).sum(1).float()
    best = torch.full((B,), -math.inf, dtype=torch.float64, device=dev)
    arg = torch.zeros(B, dtype=torch.int64, device=dev)
    starts = list(range(0, V, chunk_size))
    out_counts = torch.zeros((B, len(starts)), dtype=torch.int64, device=dev)
    with exact_fp32_matmul():
        for ci, c0 in enumerate(starts):
            c1 = min(c0 + chunk_size, V)
            dist = chunk_distances(x, x_sq, n32[c0:c1], em2t[:, c0:c1])
            outside = dist > gamma
            out_counts[:, ci] = outside.sum(1)
            s = dist.double().mul_(-scale)
            s.masked_fill_(outside, -math.inf)
            s.sub_(_neg_log_neg_log(_chunk_uniforms(st, c0, c1)))
            m, j = s.max(dim=1)
            upd = m > best
            best = torch.where(upd, m, best)
            arg = torch.where(upd, j + c0, arg)
        n_out = out_counts.sum(1)
        n_out64 = n_out.double()
        log_w = torch.log(n_out64) if bottom_log_weight is None else bottom_log_weight(n_out64)
        ub = st.uniforms(Draw.SAMPLER, 2, extra=1)
        u_b, u_k = ub[:, 0].clone(), ub[:, 1]
        s_b = (-scale * gamma) + log_w - _neg_log_neg_log(u_b)
        s_b = torch.where(n_out > 0, s_b, torch.full_like(s_b, -math.inf))
        won = s_b > best
        if bottom_rank is None:
            k = torch.floor(u_k * n_out64).to(torch.int64)
            k = torch.minimum(k, (n_out - 1).clamp(min=0))
        else:
            k = bottom_rank(u_k, n_out)
        _bottom_columns(arg, torch.nonzero(won).squeeze(1), k, out_counts, chunk_size, x, x_sq, n32, em2t, gamma)
    return arg
