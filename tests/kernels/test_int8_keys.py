"""The compiled integer keys of the exponential sampler (``hf_textdp/cpu/int8_keys.py``, ``kernels/int8_keys.c``).

The keys 2·I_x·I_c − N_c are exact integers, so the kernel's block maxima and hot-block keys must equal those
of torch's int8 product bit for bit, and the sampler's seeded outputs must be the same with the kernel on
and off. Runs where the kernel runs (a C compiler and AVX-512 VNNI, as on CI; a test checks that it builds
on such a CPU); the sampler's law tests (``tests/mechanisms/test_tem.py``, ``tests/mechanisms/test_santext.py``)
run with it on.
"""

from __future__ import annotations

import pytest
import torch

from hf_textdp.cpu import int8_keys as K
from hf_textdp.mechanisms.exponential import BLOCK, ExponentialSampler
from hf_textdp.rng import derive_row_seed, streams_for_rows
from hf_textdp.tools.bench import cpu_info, gemm_bounds
from hf_textdp.utils.native import _compiler


needs_kernel = pytest.mark.skipif(not K.int8_keys_available(), reason="no int8 key kernel here (needs AVX-512 VNNI)")


@pytest.fixture(autouse=True)
def kernel_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "1")


def test_kernel_builds_where_the_cpu_has_avx512_vnni() -> None:
    """On a CPU with AVX-512 VNNI and a C compiler the kernel builds, so the tests below cannot skip silently."""
    if "avx512_vnni" not in cpu_info()[1] or _compiler() is None:
        pytest.skip("not a CPU the kernel is for, or no C compiler")
    assert K.int8_keys_available()


@needs_kernel
@pytest.mark.parametrize(("V", "d", "G"), [(64 * 5, 384, 256), (64 * 3, 7, 5), (64, 1, 13), (64 * 7, 30, 64)])
def test_keys_equal_the_int8_product(V: int, d: int, G: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random int8 columns and tokens over the whole range [−127, 127] (seed 7120): every block maximum and every
    block's keys equal 2·I_x·I_c − N_c from torch's exact integer product."""
    g = torch.Generator().manual_seed(7120 + d)
    I_cols = torch.randint(-127, 128, (V, d), generator=g, dtype=torch.int8)
    I_cols[-1] = 127  # extremes: the largest |key|
    N = (I_cols.to(torch.int32) ** 2).sum(1).to(torch.int32)
    I_x = torch.randint(-127, 128, (G, d), generator=g, dtype=torch.int8)
    I_x[0] = -127
    packed = K.PackedTargets.build(I_cols, N)
    key = 2 * (I_x.to(torch.int64) @ I_cols.to(torch.int64).T) - N.to(torch.int64)
    for threads, openmp in ((1, 1), (2, 1), (2, 0)):  # 0: as a build without OpenMP (Python threads)
        monkeypatch.setattr(K._lib(), "int8_keys_openmp", lambda openmp=openmp: openmp)
        maxima, rows = K.block_key_maxima(packed, I_x, threads)
        assert torch.equal(maxima.to(torch.int64), key.view(G, -1, K.NB).amax(2))
    tok = torch.arange(G).repeat_interleave(V // K.NB)
    blk = torch.arange(V // K.NB).repeat(G)
    assert torch.equal(K.block_keys(packed, rows, tok, blk).to(torch.int64).view(G, V), key)


def sample(monkeypatch: pytest.MonkeyPatch, native: str, targets: torch.Tensor | None) -> torch.Tensor:
    monkeypatch.setenv("HF_TEXTDP_NATIVE", native)
    g = torch.Generator().manual_seed(7121)
    E = torch.randn(700, 24, generator=g) * 0.3
    sampler = ExponentialSampler(E, targets)
    assert (sampler._kernel_targets() is not None) == (native == "1")
    inputs = torch.randint(0, 700, (900,), generator=g)
    streams = streams_for_rows([derive_row_seed(2**40 + 5, r) for r in range(30)], [30] * 30)
    return sampler.sample(inputs, streams, scale=3.0, gamma=2.5)


@needs_kernel
@pytest.mark.parametrize("targets", [None, "subset"])
def test_sampler_outputs_same_with_the_kernel_on_and_off(monkeypatch: pytest.MonkeyPatch, targets: str | None) -> None:
    """900 seeded draws (700 rows, or a subset of 333 targets: a padded last block) are the same with the
    kernel and with torch's product."""
    tg = None if targets is None else torch.arange(0, 700, 2)[:333]
    assert tg is None or tg.numel() % BLOCK != 0
    on = sample(monkeypatch, "1", tg)
    off = sample(monkeypatch, "0", tg)
    assert torch.equal(on, off)
    assert on.unique().numel() > 50  # a real spread of outputs, not a constant


@needs_kernel
def test_bench_int8_bound_is_the_faster_product() -> None:
    """Where the sampler runs the key kernel, the int8 bound is the faster of torch._int_mm and the kernel."""
    sources: dict[str, float] = {}
    bounds = gemm_bounds(2000, 64, repeats=2, rows=48, sources=sources)
    assert {"int8", "int8 keys"} <= set(sources)
    assert bounds["int8"] == max(sources["int8"], sources["int8 keys"])


def test_very_wide_vectors_keep_torchs_product() -> None:
    """d = 70,000 (|I| ≤ 87): the kernel's int32 partial sums could exceed 2³¹, so the sampler keeps torch's
    exact product (its own limit, 4·d·q² < 2³¹, still holds)."""
    E = torch.randn(64, 70_000, generator=torch.Generator().manual_seed(7122))
    sampler = ExponentialSampler(E)
    assert 383 * 70_000 * int(sampler.I.abs().max()) >= 2**31
    assert sampler._kernel_targets() is None
