"""The AVX2 integer keys of the exponential sampler (``kernels/int8_keys_avx2.c``) and the sampler with the AVX2
path forced (``HF_TEXTDP_CPU_ISA=avx2``), as on a CPU without VNNI.

The keys 2·I_x·I_c − N_c are exact integers: the AVX2 kernel's block maxima and keys must equal an int64 product
bit for bit, the sampler's seeded outputs must be the same with the AVX2 kernel, the VNNI kernel and no kernel,
and tem's and santext's laws on T5 hold with the AVX2 path (χ², testing.md §1: fixed seeds, α = 1e-3). Without
native int8 arithmetic the sampler never calls torch's emulated ``_int_mm``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_textdp import backend
from hf_textdp.cpu import int8_keys as K
from hf_textdp.cpu.features import cpu_flags
from hf_textdp.mechanisms.exponential import ExponentialSampler
from hf_textdp.mechanisms.santext import Santext
from hf_textdp.mechanisms.tem import Tem
from hf_textdp.rng import derive_row_seed, streams_for_rows
from hf_textdp.utils.native import _compiler
from tests.mechanisms.test_santext import SANTEXT_T5
from tests.mechanisms.test_tem import ALPHA, GAMMA_T5, TEM_T5, chi2_gof_pvalue, draw, exp_mech_law
from tests.utils import T5


needs_kernel = pytest.mark.skipif(K._load("avx2") is None, reason="no AVX2 key kernel here (needs AVX2, a compiler)")

pytestmark = pytest.mark.usefixtures("module_textdp_cache")


@pytest.fixture(autouse=True)
def avx2_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "1")
    monkeypatch.setenv("HF_TEXTDP_CPU_ISA", "avx2")


def test_kernel_builds_where_the_cpu_has_avx2() -> None:
    """On a CPU with AVX2 and FMA and a C compiler the AVX2 kernel builds and is the one chosen when forced."""
    if not {"avx2", "fma"} <= cpu_flags() or _compiler() is None:
        pytest.skip("not a CPU the kernel is for, or no C compiler")
    assert K.int8_keys_available() and K._kind() == "avx2"


@needs_kernel
@pytest.mark.parametrize(("V", "d", "G"), [(64 * 5, 384, 256), (64 * 3, 7, 5), (64, 1, 13), (64 * 7, 30, 64)])
def test_avx2_keys_equal_the_integer_product(V: int, d: int, G: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random int8 columns and tokens over [−127, 127] (seed 7150 + d), extremes included: every block maximum and
    every block's keys equal 2·I_x·I_c − N_c in int64, for 1 or 2 OpenMP threads and for Python threads."""
    g = torch.Generator().manual_seed(7150 + d)
    I_cols = torch.randint(-127, 128, (V, d), generator=g, dtype=torch.int8)
    I_cols[-1] = 127
    I_cols[0] = -127
    N = (I_cols.to(torch.int32) ** 2).sum(1).to(torch.int32)
    I_x = torch.randint(-127, 128, (G, d), generator=g, dtype=torch.int8)
    I_x[0] = -127
    packed = K.PackedTargets.build(I_cols, N, "avx2")
    assert packed.kind == "avx2"
    key = 2 * (I_x.to(torch.int64) @ I_cols.to(torch.int64).T) - N.to(torch.int64)
    lib = K._lib("avx2")
    for threads, openmp in ((1, 1), (2, 1), (2, 0)):  # 0: as a build without OpenMP (Python threads)
        monkeypatch.setattr(lib, "int8_keys_openmp", lambda openmp=openmp: openmp)
        maxima, rows = K.block_key_maxima(packed, I_x, threads)
        assert torch.equal(maxima.to(torch.int64), key.view(G, -1, K.NB).amax(2))
    tok = torch.arange(G).repeat_interleave(V // K.NB)
    blk = torch.arange(V // K.NB).repeat(G)
    assert torch.equal(K.block_keys(packed, rows, tok, blk).to(torch.int64).view(G, V), key)


def sample(targets: torch.Tensor | None) -> tuple[torch.Tensor, str | None]:
    g = torch.Generator().manual_seed(7151)
    E = torch.randn(700, 24, generator=g) * 0.3
    sampler = ExponentialSampler(E, targets)
    packed = sampler._kernel_targets()
    inputs = torch.randint(0, 700, (900,), generator=g)
    streams = streams_for_rows([derive_row_seed(2**40 + 6, r) for r in range(30)], [30] * 30)
    return sampler.sample(inputs, streams, scale=3.0, gamma=2.5), None if packed is None else packed.kind


@needs_kernel
@pytest.mark.parametrize("targets", [None, "subset"])
def test_sampler_outputs_same_with_every_key_path(monkeypatch: pytest.MonkeyPatch, targets: str | None) -> None:
    """900 seeded draws (700 rows, or 333 targets: a padded last block) are the same with the AVX2 kernel, with no
    kernel (the exact float product, torch's ``_int_mm`` refused) and, where the CPU has it, the VNNI kernel."""
    tg = None if targets is None else torch.arange(0, 700, 2)[:333]
    avx2, kind = sample(tg)
    assert kind == "avx2"
    monkeypatch.setattr(torch, "_int_mm", lambda *a: pytest.fail("torch._int_mm called without native int8"))
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "0")
    off, kind = sample(tg)
    assert kind is None and torch.equal(off, avx2)
    monkeypatch.undo()
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "1")
    monkeypatch.delenv("HF_TEXTDP_CPU_ISA", raising=False)
    if K._kind() == "vnni":
        vnni, kind = sample(tg)
        assert kind == "vnni" and torch.equal(vnni, avx2)
    assert avx2.unique().numel() > 50  # a real spread of outputs, not a constant


@pytest.mark.parametrize("d", [384, 1100])
def test_int_product_without_native_int8_is_exact_and_avoids_int_mm(d: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forced AVX2 (no native int8): the sampler's product is a float one, never torch's emulated ``_int_mm``, and
    equals the int64 product at the extremes (fp32 while d·127² < 2²⁴, float64 above: d = 1,100)."""
    monkeypatch.setattr(torch, "_int_mm", lambda *a: pytest.fail("torch._int_mm called without native int8"))
    g = torch.Generator().manual_seed(7152 + d)
    A = torch.randint(-127, 128, (32, d), generator=g, dtype=torch.int8)
    B = torch.randint(-127, 128, (d, 64), generator=g, dtype=torch.int8)
    A[0], B[:, 0] = 127, 127
    A[1], B[:, 1] = -127, 127
    got = backend.int_product(A, B)
    assert got.dtype == torch.int32
    assert torch.equal(got.to(torch.int64), A.to(torch.int64) @ B.to(torch.int64))
    assert int(got[0, 0]) == d * 127 * 127


@needs_kernel
@pytest.mark.parametrize("w", range(5))
def test_tem_law_with_the_avx2_path(t5, w: int) -> None:
    """tem on T5 (ε = 2, β = 0.2) with the AVX2 key kernel: χ² of n = 200,000 draws from input w against the exact
    row, α = 1e-3 (seeds 7160 + w)."""
    mech = Tem(epsilon=2.0, beta=0.2)
    packed = mech.sampler_for(t5)._kernel_targets()
    assert packed is not None and packed.kind == "avx2"
    counts = draw(mech, t5, w, 200_000, seed=7160 + w)
    np.testing.assert_allclose(exp_mech_law(T5, 2.0, GAMMA_T5), TEM_T5, rtol=1e-9, atol=1e-10)
    assert chi2_gof_pvalue(counts, TEM_T5[w]) > ALPHA


@needs_kernel
@pytest.mark.parametrize("w", range(5))
def test_santext_law_with_the_avx2_path(t5, w: int) -> None:
    """santext on T5 (ε = 2) with the AVX2 key kernel: χ² of n = 200,000 draws from input w against the exact row,
    α = 1e-3 (seeds 7170 + w)."""
    mech = Santext(epsilon=2.0)
    packed = mech.sampler_for(t5)._kernel_targets()
    assert packed is not None and packed.kind == "avx2"
    counts = draw(mech, t5, w, 200_000, seed=7170 + w)
    assert chi2_gof_pvalue(counts, SANTEXT_T5[w]) > ALPHA
