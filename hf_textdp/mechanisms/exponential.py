"""An exact sampler of the exponential mechanism on embedding distances (docs/mechanisms/tem.md, "Sampling").

Target law, for an input row x and target rows e_c (c = 0 … V′ − 1):

    P(c | x) = w_c / Σ_c′ w_c′,   w_c = exp(−a·min(d_c, γ)),   d_c = ‖x − e_c‖₂,

the law of TEM (a = ε/2, γ from β), SanText (γ = ∞) and SanText+'s sensitive draw (targets V_S).
It is sampled by rejection from a proposal that bounds every w_c from above; the proposal is built
from an *exact integer* product, so it is the same on every device and for every batch:

1. **Quantize** (once per space): I = round(E/s) with one scale s = max|E|/q (q ≤ 127, int8), and for
   every row r_c = ‖e_c − s·I_c‖ (rounded up). For x and e_c quantized this way,
   d̂_c = s·‖I_x − I_c‖ is computed from the int32 product I_x·I_cᵀ without rounding, and the triangle
   inequality gives d_c ≥ d̂_c − r_x − r_c.
2. **Bound**: the targets are cut in blocks of 64 consecutive columns; block b's bound is
   τ_b = exp(−a·min(dlo_b, γ)) with dlo_b the smallest lower bound in the block (from the block's
   largest integer score). The ``HOT`` blocks with the smallest integer distance get a bound per column
   τ_c instead. Every w_c ≤ its bound τ.
3. **Propose and accept** (try t, two Philox blocks of :attr:`~hf_textdp.rng.Draw.SAMPLER` with
   extra = t): u₁ picks a hot column ∝ τ_c or a cold block ∝ (size·τ_b) by the inverse CDF, u₂ a
   column uniformly in that block, and the column is accepted iff log u₃ < −a·(min(d_c, γ) −
   min(dlo, γ)), i.e. with probability w_c/τ, with d_c in float64. A rejected token tries again
   (:mod:`~hf_textdp.mechanisms.sampler_tries`: a group's first round, then rounds pooled across groups). Steps
   1–2 depend on the input alone: on the CPU the tokens with the same input share one proposal.

With the CPU's key kernel, step 2's float64 part runs in C too (``kernels/int8_bounds.h``), the tensor form's
operations in its order, with torch's own square roots and exponentials: the same bounds bit for bit.

A column is proposed with probability τ/H and accepted with w_c/τ, so the output law is ∝ w_c exactly
(von Neumann 1951). Expected tries are H/Σw, close to 1 where mass is concentrated. Only the float64
exponentials and logarithms may differ by an ulp between devices: an output differs only at such a
near-tie. No V × V matrix: memory is O(G·V′) for a group of G tokens.
"""

from __future__ import annotations

import math

import torch

from .. import backend
from ..errors import InvalidParameterError
from ..rng import Draw, Streams
from ..utils.threads import torch_threads
from .sampler_tries import Law, Pending, Pool, run_round


__all__ = ["ExponentialSampler"]

#: target columns per block of the proposal
BLOCK = 64
#: blocks per token whose columns get their own bound
HOT = 4
#: tokens per integer product (CPU: the [G, V′] int32 scores stay near the cache; a GPU takes many more at
#: once, so that a group is a few large kernels rather than many small ones)
GROUP = 256
#: with the compiled key kernel no [G, V′] scores are written: a CPU group is larger (fewer passes over the
#: bounds), up to GROUP_KERNEL tokens and GROUP_KERNEL_BYTES for one [G, V′/64] float64 temporary. Measured with
#: the bounds in tensor operations (tem, 4,000 MR rows, paired passes): MiniLM 45k tokens/s at 256, 54-55k at
#: 512-706; GloVe-300 52k at 256, 54-55k at 512, but 37-39k at 768-2,048 (temporaries past ~3 MB). With the bounds
#: in C (kernels/int8_bounds.h: no tensor passes over them) larger groups gain again (tem, 2,000 MR rows, MiniLM,
#: paired passes at load 4: 3.56 s at 706 tokens a group, 3.28 s at 2,048)
GROUP_KERNEL = 2048
GROUP_KERNEL_BYTES = 8 * 2**20
GROUP_CUDA = 32768
#: a GPU group's [G, V′] int32 keys stay within this many bytes (32,768 tokens of MiniLM's 23,695 targets
#: take 3.1 GB; a 128k vocabulary gets 8,192 tokens a group)
GROUP_CUDA_BYTES = 4 * 2**30
#: tries drawn at once for every token in the first round, then for the tokens still pending (one round instead
#: of one per try: most tokens accept within 1–3 tries, a few need many). Measured (tem, MiniLM, MR, ε = 10): a
#: try accepts with probability ≈ 0.3, 34% of the tokens are pending after 3 tries, 6% after 9; 3 and 3 evaluate
#: ≈ 4.7 distances a token, 2 and 8 ≈ 6.5
FIRST_TRIES = 3
MORE_TRIES = 3
#: tokens still pending after their group's first round wait until this many of them (or a group's count) run
#: their next rounds together (fewer, larger rounds; the same outputs)
POOL = 2048
_SLACK = 1e-12  # relative slack on the float64 roundings of d̂ and r


class ExponentialSampler:
    """Exact rejection sampler of P(c | x) ∝ exp(−a·min(‖x − e_c‖, γ)) over target rows of ``E``.

    Args:
        E (`torch.Tensor` `[V, d]` fp32): the rows that inputs come from (the candidate matrix).
        targets (`torch.Tensor` `[V′]` int64, *optional*): positions of the target rows in ``E``
            (default: all of them, in order).

    Example:

    >>> E = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> from hf_textdp.rng import streams_for_rows
    >>> s = ExponentialSampler(E)
    >>> s.sample(torch.tensor([0, 1, 2]), streams_for_rows([2**40], [3]), scale=1e6, gamma=math.inf).tolist()
    [0, 1, 2]
    """

    def __init__(self, E: torch.Tensor, targets: torch.Tensor | None = None) -> None:
        if E.ndim != 2 or E.shape[0] < 1:
            raise InvalidParameterError(f"E must be 2-D with at least one row, got shape {tuple(E.shape)}.")
        self.device = E.device
        self.E = E.to(torch.float32).contiguous()
        V, d = self.E.shape
        self.d = d
        # the int32 product is exact while 4·d·q² < 2³¹ (|2·I_x·I_c| and N_x + N_c both fit)
        q = min(127, int(math.isqrt((2**31 - 1) // (4 * d))))
        if q < 1:
            raise InvalidParameterError(f"dimension d = {d} is too large for the exact integer product.")
        E64 = self.E.double()
        top = float(E64.abs().max())
        self.s = top / q if top > 0 else 1.0
        Q = torch.round(E64 / self.s)
        self.r = (torch.linalg.vector_norm(E64 - Q * self.s, dim=1) * (1.0 + _SLACK)).contiguous()
        self.I = Q.to(torch.int8)
        self.N = (Q * Q).sum(1).to(torch.int64)  # exact: integers below 2⁵³
        # the key kernel's int32 partial sums start at −128·Σ_j I_c,j and add products of (I_x + 128) ≤ 255 by
        # I_c: all within 383·d·max|I| in magnitude, which must stay below 2³¹ (d up to ~44,000 at |I| ≤ 127)
        self._kernel_fits = 383 * d * int(Q.abs().max()) < 2**31
        tg = torch.arange(V, device=self.device) if targets is None else targets.to(self.device, torch.int64)
        self.targets = tg
        Vt = int(tg.numel())
        if Vt < 1:
            raise InvalidParameterError("targets must hold at least one position.")
        self.Vt = Vt
        self.nb = -(-Vt // BLOCK)
        pad = self.nb * BLOCK - Vt
        dpad = max(16, -(-d // 8) * 8) - d  # K ≥ 16, a multiple of 8 (CUDA's int8 product; zeros change nothing)
        IT = torch.nn.functional.pad(self.I[tg].to(torch.int8), (0, dpad, 0, pad))
        self.IT = IT.T.contiguous()  # [d', V″] int8
        big = torch.iinfo(torch.int32).max // 2
        self.NT = torch.cat([self.N[tg], torch.full((pad,), big, dtype=torch.int64, device=self.device)]).to(
            torch.int32
        )
        self.rT = torch.cat([self.r[tg], torch.zeros(pad, dtype=torch.float64, device=self.device)])
        self.block_r = self.rT.view(self.nb, BLOCK).amax(1)
        sizes = torch.full((self.nb,), BLOCK, dtype=torch.float64, device=self.device)
        sizes[-1] = BLOCK - pad
        self.block_size = sizes
        self.dpad = dpad
        self._int_ops: backend.IntOperands | None = None
        self._packed: backend.KeyKernel | None = None
        #: run everything but the key kernel on one thread (see :meth:`sample`)
        self.serial_small_ops = True
        self._key_threads: int | None = None
        #: with the compiled key kernel, the bounds too in C (:func:`hf_textdp.cpu.int8_keys.sampler_bounds`); off:
        #: in tensor operations from the kernel's block maxima (the same numbers; the tests compare the two)
        self.bounds_in_kernel = True
        #: on the CPU (no Triton), the tokens with the same input share one proposal (its keys and bounds are a
        #: function of the input alone; each token still tries from its own stream): a batch of 1,000 MR rows,
        #: 22,663 tokens of MiniLM's word-start class, holds 4,091 distinct inputs
        self.share_inputs = True
        #: proposals computed so far (keys and bounds of one input): one per distinct input of a call where they are
        #: shared, else one per token (``hf-textdp bench`` reports the ratio to the tokens)
        self.proposals = 0
        self._bound_targets: backend.BoundTargets | None = None

    def _int_operands(self) -> backend.IntOperands:
        if self._int_ops is None or not self._int_ops.fits():
            self._int_ops = backend.IntOperands.build(self.IT[: self.d], self.NT)
        return self._int_ops

    def _kernel_targets(self) -> backend.KeyKernel | None:
        """The targets packed for the compiled key kernel (:class:`~hf_textdp.backend.KeyKernel`), or ``None`` where
        it does not run (not a CPU, no VNNI or AVX2 or compiler, native switch off, too wide for its int32 sums)."""
        if self.device.type != "cpu" or not self._kernel_fits:
            return None
        if self._packed is None:
            self._packed = backend.KeyKernel.build(self.IT[: self.d].T, self.NT)
        return self._packed

    # ---------------------------------------------------------------- the sampler
    def sample(self, inputs: torch.Tensor, streams: Streams, *, scale: float, gamma: float) -> torch.Tensor:
        """Target indices ``[N]`` (into ``targets``) for input positions ``[N]`` (rows of ``E``)."""
        inputs = inputs.to(self.device, torch.int64)
        N = int(inputs.numel())
        if len(streams) != N:
            raise InvalidParameterError(f"streams hold {len(streams)} tokens but {N} inputs were given.")
        out = torch.empty(N, dtype=torch.int64, device=self.device)
        if self.device.type == "cpu":
            group = GROUP
            if self._kernel_targets() is not None:
                group = max(GROUP, min(GROUP_KERNEL, GROUP_KERNEL_BYTES // (8 * self.nb)))
        else:
            group = max(GROUP, min(GROUP_CUDA, GROUP_CUDA_BYTES // (4 * self.nb * BLOCK)))
        # with the key kernel, the many medium-sized passes around it run on one thread and only the kernel uses
        # every core: on a CPU shared with other processes each multi-threaded pass can wait a scheduler slice
        # for its second thread (as the search's serial_small_ops; the same results)
        threads = torch.get_num_threads()
        serial = (
            self.serial_small_ops and self.device.type == "cpu" and threads > 1 and self._kernel_targets() is not None
        )
        self._key_threads = threads
        law = Law(self.block_size, self.Vt, self.targets, scale, gamma, self._distances)
        pool = Pool(law, out, MORE_TRIES, max(POOL, group))
        with torch_threads(1 if serial else None):
            if self.share_inputs and self.device.type == "cpu" and not backend.triton_runs(self.device):
                self._sample_shared(inputs, streams, group, law, pool)  # (the GPU's tries kernel reads token rows)
            else:
                self.proposals += N
                for s in range(0, N, group):
                    e = min(s + group, N)
                    index = torch.arange(s, e, device=self.device)
                    pool.add(self._group(inputs[s:e], streams.slice(s, e), index, law, out))
            pool.finish()
        return out

    def _sample_shared(self, inputs: torch.Tensor, streams: Streams, group: int, law: Law, pool: Pool) -> None:
        """:meth:`sample` with one proposal per distinct input (its keys and bounds depend on the input alone), in
        groups of ``group`` distinct inputs; their tokens make their first round ``group`` tokens at a time."""
        distinct, inv = torch.unique(inputs, return_inverse=True)
        self.proposals += int(distinct.numel())
        order = torch.argsort(inv, stable=True)  # the tokens by input
        starts = torch.cumsum(torch.bincount(inv, minlength=int(distinct.numel())), 0).tolist()
        starts.insert(0, 0)
        for a in range(0, int(distinct.numel()), group):
            b = min(a + group, int(distinct.numel()))
            cols, dlo_c, dlo_b, cum = self._bounds(distinct[a:b], law.scale, law.gamma)
            tokens = order[starts[a] : starts[b]]
            for s in range(0, int(tokens.numel()), group):
                tok = tokens[s : s + group]
                p = Pending(tok, inputs[tok], streams.select(tok), cols, dlo_c, dlo_b, cum, 0, inv[tok] - a)
                pool.add(run_round(p, FIRST_TRIES, law, pool.out))
            pool.finish()  # before the next group's proposals

    def _bounds(self, x_pos: torch.Tensor, scale: float, gamma: float) -> tuple[torch.Tensor, ...]:
        """Per token: hot columns ``[G, HOT·BLOCK]`` and their lower bounds, the cold blocks' lower bounds, and
        the cumulative weights of the proposal ``[G, HOT·BLOCK + nb]`` (hot columns first)."""
        hot_n = min(HOT, self.nb)
        fused = None
        if backend.triton_runs(self.device):
            fused = backend.cuda_int_keys(self.I[x_pos], self._int_operands())
        if fused is not None:  # the same integers and bounds in GPU kernels (gpu/int_scores.py, gpu/sampler.py)
            key, kb = fused
            cols, dlo_c, dlo_b, cum = backend.cuda_sampler_bounds(
                key, kb, x_pos, self.N, self.r, self.rT, self.block_r, self.block_size, self.s * (1.0 - _SLACK),
                scale, gamma, self.Vt, hot_n,
            )  # fmt: skip
            return cols, dlo_c, dlo_b, cum
        packed = self._kernel_targets()
        threads = self._key_threads or torch.get_num_threads()
        if packed is not None and self.bounds_in_kernel:  # keys and bounds in the compiled kernel: the same numbers
            if self._bound_targets is None:
                self._bound_targets = backend.BoundTargets(
                    self.rT, self.block_r, self.block_size, self.s * (1.0 - _SLACK), self.Vt
                )
            token = (self.N[x_pos], self.r[x_pos])
            _, cols, dlo_c, dlo_b, cum = packed.sampler_bounds(
                self._bound_targets, self.I[x_pos], token, (scale, gamma, hot_n), threads
            )
            return cols, dlo_c, dlo_b, cum
        return self._bounds_tensors(x_pos, scale, gamma, packed, threads)

    def _bounds_tensors(
        self, x_pos: torch.Tensor, scale: float, gamma: float, packed: backend.KeyKernel | None, threads: int
    ) -> tuple[torch.Tensor, ...]:
        """:meth:`_bounds` in tensor operations, from the key kernel's block maxima (``packed``) or torch's product."""
        G = int(x_pos.numel())
        hot_n = min(HOT, self.nb)
        if packed is not None:  # the block maxima and hot keys by the compiled kernel: the same integers
            kb, token_rows = packed.block_maxima(self.I[x_pos], threads)
        else:
            Mp = -(-G // 32) * 32  # a few row counts only, so the product's kernels are reused
            A = torch.zeros((Mp, self.d + self.dpad), dtype=torch.int8, device=self.device)
            A[:G, : self.d] = self.I[x_pos]
            S = backend.int_product(A, self.IT)[:G]  # exact int32 I_x·I_c
            key = torch.add(-self.NT, S, alpha=2, out=S)  # 2·I_x·I_c − N_c = N_x − ‖I_x − I_c‖², in place, one pass
            kb = key.view(G, self.nb, BLOCK).amax(2)  # per block: the smallest integer distance
        # hot blocks: the smallest integer distance, ties by block index (exact integers: any device)
        unique = kb.to(torch.int64) * self.nb - torch.arange(self.nb, device=self.device)
        hot = unique.topk(hot_n, 1, sorted=True).indices
        cols = (hot[:, :, None] * BLOCK + torch.arange(BLOCK, device=self.device)).reshape(G, -1)
        if packed is not None:
            hot_key = packed.block_keys(token_rows, torch.arange(G).repeat_interleave(hot_n), hot.reshape(-1))
            hot_key = hot_key.view(G, hot_n * BLOCK)
        else:
            hot_key = key.gather(1, cols)
        Nx = self.N[x_pos]
        rx = self.r[x_pos]
        dlo_c = self._dlo(Nx[:, None] - hot_key, rx[:, None] + self.rT[cols]).clamp_(max=gamma)
        dlo_b = self._dlo(Nx[:, None] - kb, rx[:, None] + self.block_r[None, :]).clamp_(max=gamma)
        # bounds relative to the largest one, so that they never all underflow (the ratios are unchanged)
        m = dlo_b.amin(1, keepdim=True)
        tau_c = torch.where(cols < self.Vt, torch.exp(-scale * (dlo_c - m)), 0.0)
        Hb = torch.exp(-scale * (dlo_b - m)).mul_(self.block_size[None, :])
        Hb.scatter_(1, hot, 0.0)
        cum = torch.cumsum(torch.cat([tau_c, Hb], 1), 1)
        return cols, dlo_c, dlo_b, cum

    def _distances(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """Float64 ‖e_x − e_c‖ ``[n, T]`` for rows ``x`` ``[n]`` and ``c`` ``[n, T]`` of E: on the CPU by the compiled
        kernel of the search's verification (no ``[n, T, d]`` float64 copies), else in tensor operations; the
        two may differ by an ulp (the sum's order), which moves an acceptance only at an exact near-tie."""
        n, T = c.shape
        D = backend.pair_sqdist(self.E, self.E, x.repeat_interleave(T), c.reshape(-1))
        if D is not None:
            return D.sqrt_().view(n, T)
        dist: torch.Tensor = torch.linalg.vector_norm(self.E[x].double()[:, None, :] - self.E[c].double(), dim=2)
        return dist

    def _dlo(self, dist2: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """A lower bound of d_c from the exact integer ‖I_x − I_c‖² and r_x + r_c (float64)."""
        dhat = dist2.to(torch.float64).clamp_(min=0).sqrt_().mul_(self.s * (1.0 - _SLACK))
        return dhat.sub_(r).clamp_(min=0.0)

    def _group(
        self, x_pos: torch.Tensor, streams: Streams, index: torch.Tensor, law: Law, out: torch.Tensor
    ) -> Pending:
        """The bounds of a group of tokens (``index``: their places in ``out``) and its first round of tries: the
        accepted tokens' outputs into ``out``; returns the others (sampler_tries.py)."""
        cols, dlo_c, dlo_b, cum = self._bounds(x_pos, law.scale, law.gamma)
        p = Pending(index, x_pos, streams, cols, dlo_c, dlo_b, cum, 0)
        cap = backend.CUDA_SAMPLER_TRIES
        fused = backend.cuda_sample_tries(
            cum, cols, dlo_c, dlo_b, self.block_size, self.E, x_pos, self.targets, streams.k0, streams.k1,
            streams.position, law.scale, law.gamma, int(Draw.SAMPLER), cap,
        )  # fmt: skip
        if fused is not None:  # one GPU kernel ran every token's tries up to a cap; the rare rest go on in the pool
            out[index] = fused
            return p.select(fused < 0, cap)
        return run_round(p, FIRST_TRIES, law, out)
