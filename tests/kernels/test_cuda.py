"""The GPU path on a real GPU: fused exact search, the tensor-core model behind its bound, Philox bits.

Skipped without CUDA (CI has none); tests/kernels/test_gpu_interpreted.py runs the same kernels under Triton's
interpreter everywhere. The seeded CPU/CUDA comparisons of whole privatizers are in tests/core/test_rng.py.
"""

from __future__ import annotations

import math

import pytest
import torch


pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _brute_force(Q: torch.Tensor, E: torch.Tensor) -> torch.Tensor:
    """argmin of Σ(q − e)² in float64, ties to the lowest position (direct sums, on the GPU)."""
    Q64, E64 = Q.double().cuda(), E.double().cuda()
    out = []
    for s in range(0, Q64.shape[0], 64):
        D = ((Q64[s : s + 64, None, :] - E64[None]) ** 2).sum(2)
        out.append(D.argmin(1))
    return torch.cat(out).cpu()


def _hard_case(V: int, d: int, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    E = torch.randn(V, d, generator=g) * torch.exp(torch.randn(V, 1, generator=g) * 0.3)
    E[7] = E[5]
    E[100:140] = E[100] + 1e-3 * torch.randn(40, d, generator=g)
    Q = E[torch.randint(0, V, (n,), generator=g)] + 0.5 * torch.randn(n, d, generator=g)
    a, b = torch.randint(0, V, (2, n // 4), generator=g)
    Q[: n // 4] = (E[a] + E[b]) / 2
    Q[n // 4 : n // 4 + 16] = E[5] + 1e-6 * torch.randn(16, d, generator=g)
    Q[-16:] = 1e3 * torch.randn(16, d, generator=g)
    return E, Q


@pytest.mark.parametrize(("V", "d"), [(3000, 64), (30522, 384)])
def test_fused_search_equals_float64_brute_force(V, d):
    from hf_textdp.gpu import triton_ready
    from hf_textdp.gpu.nearest import tensor_core_model_holds
    from hf_textdp.search import ExactIndex

    assert triton_ready("cuda"), "the CUDA path needs Triton"
    assert tensor_core_model_holds("cuda"), "the run-time check of the accumulation model failed on this GPU"
    E, Q = _hard_case(V, d, 4096, seed=V)
    index = ExactIndex(E, "cuda")
    got = index.search(Q, 1)[:, 0]
    assert torch.equal(got, _brute_force(Q, E))
    assert index.fallback_queries >= 16  # the duplicate rows' queries took the generic search


def test_tensor_core_products_within_the_assumed_model():
    """bf16 products with fp32 accumulation by tl.dot err by at most n·U_ACC·Σ|terms| (the bound's model)."""
    import triton
    import triton.language as tl

    from hf_textdp.gpu.nearest import U_ACC

    @triton.jit
    def mm(a_ptr, b_ptr, c_ptr, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), tl.float32)
        for k0 in tl.static_range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
            b = tl.load(b_ptr + (k0 + rk)[:, None] * (tl.num_programs(1) * BN) + rn[None, :])
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + rm[:, None] * (tl.num_programs(1) * BN) + rn[None, :], acc)

    g = torch.Generator().manual_seed(9)
    M, N, K = 256, 512, 384
    scale_a = torch.exp2(torch.randint(-8, 9, (M, K), generator=g).double())
    scale_b = torch.exp2(torch.randint(-8, 9, (K, N), generator=g).double())
    a = (torch.randn(M, K, generator=g, dtype=torch.float64) * scale_a).to(torch.bfloat16)
    b = (torch.randn(K, N, generator=g, dtype=torch.float64) * scale_b).to(torch.bfloat16)
    c = torch.empty(M, N, device="cuda")
    mm[(M // 128, N // 128)](a.cuda(), b.cuda(), c, K=K, BM=128, BN=128, BK=64)
    exact = a.double() @ b.double()  # float64: error far below the tolerance
    terms = a.double().abs() @ b.double().abs()
    n = K + K // 16
    gamma = n * U_ACC / (1 - n * U_ACC)
    err = (c.double().cpu() - exact).abs()
    assert bool((err <= gamma * terms + 1e-300).all())
    assert float(err.max()) > 0  # the sums do round somewhere: the check compares real arithmetic


def test_philox_kernel_on_cuda_equals_cpu_kernel():
    from hf_textdp.rng import Draw, streams_for_rows

    keys, sizes = [3, 2**63 - 1, 12345678901234], [40, 1, 300]
    cpu, gpu = streams_for_rows(keys, sizes), streams_for_rows(keys, sizes, "cuda")
    extra = torch.arange(len(cpu)) * 7 + 2**32 - 3
    for start in (0, 5, 2**31 + 1):
        a = cpu.uniforms(Draw.SAMPLER, 9, extra=extra, start=start)
        b = gpu.uniforms(Draw.SAMPLER, 9, extra=extra.cuda(), start=start)
        assert torch.equal(a, b.cpu())


def test_generic_and_fused_paths_agree_on_noisy_queries():
    from hf_textdp.search import ExactIndex

    g = torch.Generator().manual_seed(4)
    E = torch.randn(20000, 128, generator=g)
    Q = E[torch.randint(0, 20000, (20000,), generator=g)] + 2.0 * torch.randn(20000, 128, generator=g)
    index = ExactIndex(E, "cuda")
    fused = index.search(Q, 1)[:, 0]
    generic = index._search_generic(Q.cuda(), 1, None, None, None)[:, 0]
    assert torch.equal(fused, generic)
    assert math.isfinite(float(fused.double().mean()))


def test_fused_noise_on_cuda_equals_the_cpu_form():
    """madlib's fused noise kernel on the GPU against the CPU torch form: ulps of log/cos/sin only."""
    from hf_textdp.mechanisms.madlib import add_metric_laplace
    from hf_textdp.rng import derive_row_seed, streams_for_rows

    g = torch.Generator().manual_seed(12)
    keys, sizes = [derive_row_seed(2**40 + 5, r) for r in range(8)], [500] * 8
    x = torch.randn(4000, 384, generator=g)
    cpu = add_metric_laplace(x, streams_for_rows(keys, sizes), 0.1)
    gpu = add_metric_laplace(x.cuda(), streams_for_rows(keys, sizes, "cuda"), 0.1).cpu()
    same = gpu == cpu
    assert float(same.double().mean()) >= 0.999
    assert bool((gpu[~same] - cpu[~same]).abs().le(torch.finfo(torch.float32).eps * cpu[~same].abs()).all())


@pytest.mark.parametrize("gamma", [3.0, math.inf])
def test_sampler_kernels_on_cuda_equal_the_cpu_form(gamma):
    """TEM/SanText's exact sampler (int8 bounds, hot columns, the tries kernel) on the GPU gives the CPU's ids."""
    from hf_textdp.mechanisms.exponential import ExponentialSampler
    from hf_textdp.rng import derive_row_seed, streams_for_rows

    g = torch.Generator().manual_seed(13)
    E = torch.randn(5000, 64, generator=g)
    inputs = torch.randint(0, 5000, (6000,), generator=g)
    keys, sizes = [derive_row_seed(2**40 + 6, r) for r in range(6)], [1000] * 6
    cpu = ExponentialSampler(E).sample(inputs, streams_for_rows(keys, sizes), scale=1.5, gamma=gamma)
    gpu = ExponentialSampler(E.cuda()).sample(inputs, streams_for_rows(keys, sizes, "cuda"), scale=1.5, gamma=gamma)
    assert float((gpu.cpu() == cpu).double().mean()) >= 0.999
