"""The exponential sampler's proposal bounds in C (``kernels/int8_bounds.h``) and its pooled tries
(``hf_textdp/mechanisms/sampler_tries.py``).

The C passes replace the tensor form of ``ExponentialSampler._bounds`` (kept for the GPU-less fallback and as
the reference): every hot block, hot column, lower bound and cumulative weight must be the same bit for bit, on
random rows, on rows with exact ties (equal block maxima across blocks, duplicated rows, a grid), with and without
truncation (γ = ∞, finite, 0), for a last block with padding and fewer blocks than HOT. The tries' grouping
(first round per group, later rounds pooled across groups) must not change any output: the same as one try at a
time, one token at a time.
"""

from __future__ import annotations

import math

import pytest
import torch

from hf_textdp.cpu import int8_keys as K
from hf_textdp.mechanisms import exponential as X
from hf_textdp.mechanisms import sampler_tries as T_
from hf_textdp.rng import derive_row_seed, streams_for_rows


KINDS = [
    pytest.param(
        "vnni", marks=pytest.mark.skipif(K._load("vnni") is None, reason="no VNNI key kernel here (AVX-512 VNNI)")
    ),
    pytest.param("avx2", marks=pytest.mark.skipif(K._load("avx2") is None, reason="no AVX2 key kernel here")),
]

LAWS = [(5.0, math.inf), (0.5, 1.0), (50.0, 0.0), (1e-3, 3.0), (1e4, math.inf)]


def _rows(case: str, g: torch.Generator) -> torch.Tensor:
    if case == "random":
        return torch.randn(1000, 16, generator=g)
    if case == "wide":
        return torch.randn(700, 384, generator=g)
    if case == "grid":  # few distinct values: many equal keys and distances
        return torch.randint(-2, 3, (130, 7), generator=g).float() / 2
    if case == "repeated-blocks":  # every block the same 64 rows: equal block maxima, ties broken by the lower block
        return torch.randn(64, 5, generator=g).repeat(5, 1)
    if case == "one-block":
        return torch.randn(64, 8, generator=g)
    assert case == "padded"  # two blocks, the second with one real column
    return torch.randn(65, 5, generator=g)


@pytest.fixture
def kind_forced(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "1")
    kind: str = request.param
    if kind == "avx2":
        monkeypatch.setenv("HF_TEXTDP_CPU_ISA", "avx2")
    return kind


@pytest.mark.parametrize("kind_forced", KINDS, indirect=True)
@pytest.mark.parametrize("case", ["random", "wide", "grid", "repeated-blocks", "one-block", "padded"])
def test_c_bounds_equal_the_tensor_bounds_bit_for_bit(
    kind_forced: str, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 7300: the C passes' (cols, dlo_c, dlo_b, cum) equal the tensor form's from the same block maxima, for
    37 and 300 tokens (duplicates included), one and two threads, OpenMP's team and Python threads."""
    g = torch.Generator().manual_seed(7300)
    E = _rows(case, g)
    s = X.ExponentialSampler(E)
    packed = s._kernel_targets()
    assert packed is not None and packed.kind == kind_forced
    for G in (37, 300):
        x = torch.randint(0, E.shape[0], (G,), generator=g)
        x[1] = x[0]
        for scale, gamma in LAWS:
            for threads, openmp in ((1, 1), (2, 1), (2, 0)):
                monkeypatch.setattr(K._lib(kind_forced), "int8_keys_openmp", lambda openmp=openmp: openmp)
                s._key_threads = threads
                s.bounds_in_kernel = True
                fast = s._bounds(x, scale, gamma)
                s.bounds_in_kernel = False
                ref = s._bounds(x, scale, gamma)
                for name, a, b in zip(("cols", "dlo_c", "dlo_b", "cum"), fast, ref, strict=True):
                    assert a.dtype == b.dtype and torch.equal(a, b), (case, G, scale, gamma, threads, openmp, name)


def _sample(E: torch.Tensor, positions: torch.Tensor, keys: list[int], sizes: list[int], share: bool) -> torch.Tensor:
    s = X.ExponentialSampler(E)
    s.share_inputs = share
    return s.sample(positions, streams_for_rows(keys, sizes), scale=3.0, gamma=2.5)


def test_pooled_tries_give_the_outputs_of_one_try_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 7310, 600 tokens in 3 rows over 300 inputs (many repeated): small groups whose pending tokens are pooled
    (a small pool: many flushes; a large one: one), with a proposal per distinct input or per token, give the outputs
    of one try a round, and of each token sampled alone."""
    g = torch.Generator().manual_seed(7310)
    E = torch.randn(300, 12, generator=g)
    positions = torch.randint(0, 300, (600,), generator=g)
    keys, sizes = [derive_row_seed(2**40 + 7, i) for i in range(3)], [100, 200, 300]
    monkeypatch.setattr(X, "GROUP", 48)
    monkeypatch.setattr(X, "GROUP_KERNEL", 48)
    outs = {}
    for first, more, pool in ((1, 1, 1), (3, 3, 1), (3, 3, 10**6), (2, 8, 100), (5, 2, 7)):
        monkeypatch.setattr(X, "FIRST_TRIES", first)
        monkeypatch.setattr(X, "MORE_TRIES", more)
        monkeypatch.setattr(X, "POOL", pool)
        for share in (True, False):
            outs[(first, more, pool, share)] = _sample(E, positions, keys, sizes, share)
    ref = outs[(1, 1, 1, False)]
    for k, v in outs.items():
        assert torch.equal(v, ref), k
    s = X.ExponentialSampler(E)
    st = streams_for_rows(keys, sizes)
    alone = torch.cat([s.sample(positions[i : i + 1], st.slice(i, i + 1), scale=3.0, gamma=2.5) for i in range(600)])
    assert torch.equal(alone, ref)


@pytest.mark.parametrize("kind_forced", KINDS, indirect=True)
@pytest.mark.parametrize("case", ["random", "repeated-blocks", "padded"])
def test_c_pick_equals_the_tensor_pick(kind_forced: str, case: str) -> None:
    """Seed 7320: the C picker's proposed columns and lower bounds equal the tensor form's (``_pick``) bit for bit,
    with proposals shared through rows and owned by each token, for uniforms over (0, 1) and at its ends (u₁ at
    the largest float64 below 1 and at 2⁻⁵³, and where u₁ times the total is a cumulative weight: the ties of the
    search, and equal weights of zero-weight columns)."""
    g = torch.Generator().manual_seed(7320)
    E = _rows(case, g)
    s = X.ExponentialSampler(E)
    distinct = torch.unique(torch.randint(0, E.shape[0], (50,), generator=g))
    for scale, gamma in LAWS:
        proposal = s._bounds(distinct, scale, gamma)
        n, T = 200, 3
        row = torch.randint(0, int(distinct.numel()), (n,), generator=g)
        u = torch.rand((n, T, 3), generator=g, dtype=torch.float64).clamp_(min=2.0**-53)
        u[:20, :, :2] = 1.0 - 2.0**-53
        u[20:40, :, :2] = 2.0**-53
        cum = proposal[3][row[40:120]]  # u₁ that land on a cumulative weight exactly (ties of searchsorted)
        j = torch.randint(0, cum.shape[1] - 1, (80, T), generator=g)
        u[40:120, :, 0] = (cum.gather(1, j) / cum[:, -1:]).clamp_(2.0**-53, 1.0 - 2.0**-53)
        law = T_.Law(s.block_size, s.Vt, s.targets, scale, gamma, s._distances)
        streams = streams_for_rows([1], [n])
        shared = T_.Pending(torch.arange(n), distinct[row], streams, *proposal, 0, row)
        for p in (shared, shared.own_rows()):
            picked = K.sampler_pick((p.cols, p.dlo_c, p.dlo_b, p.cum), p.row, u, s.block_size, s.Vt)
            assert picked is not None
            ref = T_._pick(p, u, law)
            assert torch.equal(picked[0], ref[0]) and torch.equal(picked[1], ref[1]), (case, scale, gamma)
