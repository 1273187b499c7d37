"""The Triton kernels (hf_textdp.gpu) under Triton's interpreter on CPU tensors, as CUDA runs them.

Run by tests/kernels/test_gpu_interpreted.py in a fresh interpreter with ``TRITON_INTERPRET=1`` (Triton reads it
when it is imported) and ``HF_TEXTDP_TRITON=interpret`` (the package's opt-in for CPU tensors). The
interpreter executes the kernels' own code with NumPy, program by program, so these check the kernels'
logic (counters, candidate lists, certification, overflow) without a GPU; tests/kernels/test_cuda.py checks the
same kernels on a GPU where one exists.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch


triton = pytest.importorskip("triton")

from hf_textdp.gpu import interpreting  # noqa: E402
from hf_textdp.gpu import nearest as gpu_nearest  # noqa: E402
from hf_textdp.gpu.philox import philox_uniforms  # noqa: E402
from hf_textdp.rng import Draw, derive_row_seed, streams_for_rows  # noqa: E402
from hf_textdp.search import ExactIndex  # noqa: E402


@pytest.fixture
def interpret(monkeypatch):
    assert interpreting(), (
        "TRITON_INTERPRET=1 HF_TEXTDP_TRITON=interpret (tests/kernels/test_gpu_interpreted.py sets them)"
    )
    monkeypatch.delenv("HF_TEXTDP_CUDA_TILES", raising=False)
    monkeypatch.delenv("HF_TEXTDP_SEARCH_FILTER", raising=False)


@pytest.mark.parametrize("extra", [0, "tensor"])
@pytest.mark.parametrize("start", [0, 9, 2**31 + 5])
def test_philox_kernel_equals_the_cpu_kernel(interpret, extra, start):
    keys = [derive_row_seed(2**40 + 1, r) for r in range(5)] + [2**63 - 1, 0]
    s = streams_for_rows(keys, [3, 1, 4, 2, 7, 2, 1])
    ext = torch.arange(len(s)) * 3 + 2**32 - 9 if extra == "tensor" else extra
    ref = s.uniforms(Draw.SAMPLER, 7, extra=ext, start=start)  # the compiled C kernel (or the tensor form)
    got = philox_uniforms(s.k0, s.k1, s.position, ext, int(Draw.SAMPLER), start, 4)
    assert got is not None
    assert torch.equal(got[:, :7], ref)


def _hard_queries(E: torch.Tensor, n: int, g: torch.Generator) -> torch.Tensor:
    """Near-duplicates, midpoints between two rows (near-ties), noisy rows and far-away queries."""
    V, d = E.shape
    q = E[torch.randint(0, V, (n,), generator=g)] + 0.3 * torch.randn(n, d, generator=g)
    a, b = torch.randint(0, V, (2, n // 4), generator=g)
    q[: n // 4] = (E[a] + E[b]) / 2
    q[n // 4 : n // 4 + 8] = E[5] + 1e-5 * torch.randn(8, d, generator=g)
    q[-8:] = 40.0 * torch.randn(8, d, generator=g)
    return q


def _brute_force(Q: torch.Tensor, E: torch.Tensor) -> torch.Tensor:
    D = ((Q.double()[:, None, :] - E.double()[None]) ** 2).sum(2)
    return D.argmin(1)  # the first (lowest) position among exact float64 ties


def _space(g: torch.Generator, V: int = 300, d: int = 20) -> torch.Tensor:
    E = torch.randn(V, d, generator=g)
    E[7] = E[5]  # duplicate rows: an exact tie, resolved to the lowest position
    E[40:60] = E[40] + 1e-3 * torch.randn(20, d, generator=g)  # a near-duplicate cluster
    return E


def test_fused_search_equals_float64_brute_force(interpret):
    g = torch.Generator().manual_seed(0)
    E = _space(g)
    Q = _hard_queries(E, 240, g)
    index = ExactIndex(E)
    assert index._use_tensor_cores()
    got = index.search(Q, 1)[:, 0]
    assert torch.equal(got, _brute_force(Q, E))
    assert index.fallback_queries >= 8  # the duplicate rows' queries cannot be certified: generic search


def test_fused_kernels_unflagged_answers_are_exact(interpret):
    g = torch.Generator().manual_seed(1)
    E = _space(g, V=500, d=24)
    Q = _hard_queries(E, 200, g)
    sq64 = (E.double() ** 2).sum(1)
    _, BN, BK, _, _, _ = gpu_nearest.tile_config()
    ops = gpu_nearest.TensorCoreOperands.build(E, sq64, BN, BK)
    res = gpu_nearest.fused_nearest(Q, E, math.sqrt(float(sq64.max())), ops)
    assert res is not None
    pos, flag = res
    ok = ~flag
    assert int(ok.sum()) >= 150
    assert torch.equal(pos[ok], _brute_force(Q, E)[ok])


def test_mutant_without_the_bound_is_caught(interpret, monkeypatch):
    """β = 0 keeps only the best bf16 score: on near-ties that is often the wrong row, and the test sees it."""
    g = torch.Generator().manual_seed(2)
    E = _space(g, V=500, d=24)
    Q = _hard_queries(E, 200, g)
    monkeypatch.setattr(gpu_nearest, "tensor_core_bound", lambda qh, qr, ops, d: torch.zeros_like(qh))
    got = ExactIndex(E).search(Q, 1)[:, 0]
    assert int((got != _brute_force(Q, E)).sum()) >= 1


def test_overflowing_candidate_lists_take_the_generic_search(interpret, monkeypatch):
    monkeypatch.setattr(gpu_nearest, "CAP", 2)
    g = torch.Generator().manual_seed(3)
    E = _space(g)
    Q = E[40:60] + 1e-4 * torch.randn(20, E.shape[1], generator=g)  # inside the cluster: many candidates
    index = ExactIndex(E)
    got = index.search(Q, 1)[:, 0]
    assert torch.equal(got, _brute_force(Q, E))
    assert index.fallback_queries >= 10


def test_int_scores_equal_the_torch_form(interpret):
    from hf_textdp.gpu.int_scores import IntOperands, int_scores

    g = torch.Generator().manual_seed(5)
    d, V, G = 40, 200, 37
    IT = torch.randint(-127, 128, (d, V), generator=g, dtype=torch.int8)
    NT = (IT.int() ** 2).sum(0).int()
    A = torch.randint(-127, 128, (G, d), generator=g, dtype=torch.int8)
    res = int_scores(A, IntOperands.build(IT, NT))
    assert res is not None
    key, kb = res
    ref = 2 * (A.int() @ IT.int()) - NT
    assert torch.equal(key, ref)
    ref_kb = torch.nn.functional.pad(ref, (0, 256 - V), value=-(2**30)).view(G, 4, 64).amax(2)[:, : kb.shape[1]]
    assert torch.equal(kb, ref_kb)


@pytest.mark.parametrize("gamma", [0.5, math.inf])
def test_sampler_bounds_equal_the_torch_form(interpret, monkeypatch, gamma):
    """The bound kernel's hot columns are the torch form's exactly; its lower bounds and cumulative weights
    differ only by ulps (torch's float64 square root on this CPU is not NumPy's everywhere; the sums' order)."""
    from hf_textdp.mechanisms.exponential import ExponentialSampler

    g = torch.Generator().manual_seed(14)
    E = torch.randn(700, 24, generator=g)  # 11 blocks of 64 targets, the last one partial
    E[300:340] = E[300]  # equal block maxima: the ties go to the lower block
    x_pos = torch.randint(0, 700, (40,), generator=g)
    got = ExponentialSampler(E)._bounds(x_pos, 1.5, gamma)
    monkeypatch.setenv("HF_TEXTDP_TRITON", "0")
    ref = ExponentialSampler(E)._bounds(x_pos, 1.5, gamma)
    assert torch.equal(got[0], ref[0])
    for a, b in zip(got[1:3], ref[1:3], strict=True):
        assert torch.allclose(a, b, rtol=1e-15, atol=1e-15)
    assert torch.allclose(got[3], ref[3], rtol=1e-13, atol=0.0)
    assert got[3].shape == (40, 4 * 64 + 11)


@pytest.mark.parametrize("cap", [4096, 1])
@pytest.mark.parametrize("mechanism", ["tem", "santext"])
def test_samplers_with_the_kernel_equal_the_torch_form(interpret, monkeypatch, mechanism, cap):
    """The kernels (block maxima, hot columns, the tries) give the torch form's outputs; with a cap of one
    try in the kernel, the rejected tokens go on in the torch loop from try 1 and still give them.

    The cap is the backend's (the one the mechanism passes to the kernel); the spy checks that the kernel
    really ran with it, so a cap set where the mechanism no longer reads it fails here."""
    from hf_textdp import backend
    from hf_textdp.gpu import sampler as gpu_sampler
    from hf_textdp.mechanisms.exponential import ExponentialSampler

    pending = []
    kernel = gpu_sampler.sample_tries

    def spy(*args, **kwargs):
        assert args[-1] == cap, f"the kernel ran with {args[-1]} tries, not the cap {cap}"
        out = kernel(*args, **kwargs)
        if out is not None:
            pending.append(int((out < 0).sum()))
        return out

    monkeypatch.setattr(backend, "CUDA_SAMPLER_TRIES", cap)
    monkeypatch.setattr(gpu_sampler, "sample_tries", spy)
    g = torch.Generator().manual_seed(6)
    E = torch.randn(300, 24, generator=g)
    inputs = torch.randint(0, 300, (150,), generator=g)
    streams = streams_for_rows([derive_row_seed(2**40 + 9, r) for r in range(3)], [50, 60, 40])
    gamma = 3.0 if mechanism == "tem" else math.inf
    scale = 2.0 if mechanism == "tem" else 0.3  # santext at a small scale: many first tries rejected
    got = ExponentialSampler(E).sample(inputs, streams, scale=scale, gamma=gamma)
    assert pending and (pending[0] > 0) == (cap == 1 and mechanism == "santext")
    monkeypatch.setenv("HF_TEXTDP_TRITON", "0")
    ref = ExponentialSampler(E).sample(inputs, streams, scale=scale, gamma=gamma)
    assert torch.equal(got, ref)


@pytest.mark.parametrize("mode", ["p", "l"])
def test_both_filter_modes_are_exact(interpret, monkeypatch, mode):
    """The preloaded queries' tile (K ≤ 4 BK) and the K loop (any K) give the same exact answers."""
    monkeypatch.setenv("HF_TEXTDP_CUDA_TILES", f"16,64,16,1,1,{mode}")
    g = torch.Generator().manual_seed(7)
    E = _space(g, V=260, d=40 if mode == "p" else 70)  # K = 48 (3 tiles of 16) or 80 (5: the loop)
    Q = _hard_queries(E, 120, g)
    got = ExactIndex(E).search(Q, 1)[:, 0]
    assert torch.equal(got, _brute_force(Q, E))


def test_the_accumulation_model_is_checked_before_use(interpret, monkeypatch):
    """A device whose products break the bound's model keeps the generic search (mutant: a model with no error)."""
    monkeypatch.setattr(gpu_nearest, "_model_checked", {})
    assert gpu_nearest.tensor_core_model_holds("cpu")
    monkeypatch.setattr(gpu_nearest, "_model_checked", {})
    monkeypatch.setattr(gpu_nearest, "U_ACC", 0.0)  # claims exact sums: fp32 accumulation refutes it
    assert not gpu_nearest.tensor_core_model_holds("cpu")
    g = torch.Generator().manual_seed(8)
    E = _space(g, V=200, d=16)
    Q = _hard_queries(E, 40, g)
    index = ExactIndex(E)
    assert not index._use_tensor_cores()
    assert torch.equal(index.search(Q, 1)[:, 0], _brute_force(Q, E))


@pytest.mark.parametrize("d", [7, 384])
def test_fused_noise_equals_the_torch_form(interpret, d):
    """fl32(x + r·G/‖G‖) of one kernel is the torch form's: float64 ulps of log/cos/sin/sum order only."""
    from hf_textdp.gpu.noise import metric_laplace_shift
    from hf_textdp.mechanisms.madlib import sample_metric_laplace

    g = torch.Generator().manual_seed(10)
    n = 400 if d == 7 else 60
    streams = streams_for_rows([derive_row_seed(2**40 + 3, r) for r in range(4)], [n // 4] * 4)
    x = torch.randn(n, d, generator=g)
    r = streams.gamma(Draw.RADIUS, float(d)).mul_(0.5)
    got = metric_laplace_shift(x, streams.k0, streams.k1, streams.position, r, int(Draw.NOISE))
    assert got is not None and got.dtype == torch.float32
    ref = (x.double() + sample_metric_laplace(streams, n, d, 0.5)).float()
    same = got == ref
    assert float(same.double().mean()) >= 0.999
    # where an ulp of float64 crossed an fp32 rounding boundary, the results are adjacent floats
    assert bool((got[~same] - ref[~same]).abs().le(torch.finfo(torch.float32).eps * ref[~same].abs() + 1e-45).all())
    # a mutant that forgets to normalise G (r·G instead of r·G/‖G‖) is far off
    G = streams.normals(Draw.NOISE, d)
    bad = (x.double() + r[:, None] * G).float()
    assert float((bad == got).double().mean()) < 0.5


def test_madlib_on_the_kernels_equals_the_torch_form(interpret, monkeypatch):
    """Madlib's release (noise kernel, then the fused search) gives the torch form's positions."""
    from hf_textdp.mechanisms.madlib import Madlib

    g = torch.Generator().manual_seed(11)
    E = _space(g, V=300, d=24)
    x = E[torch.randint(0, 300, (200,), generator=g)]
    streams = streams_for_rows([derive_row_seed(2**40 + 4, r) for r in range(5)], [40] * 5)
    mech = Madlib(epsilon=8.0)
    z = mech.perturb(x, streams)
    got = ExactIndex(E).search(z, 1)[:, 0]
    monkeypatch.setenv("HF_TEXTDP_TRITON", "0")
    z_ref = mech.perturb(x, streams)
    ref = ExactIndex(E).search(z_ref, 1)[:, 0]
    assert float((z == z_ref).double().mean()) >= 0.999
    assert torch.equal(got, ref)


def test_fused_search_reports_non_finite_queries(interpret):
    """The fused path flags a non-finite query (no up-front pass over the batch) and reports it as the generic does."""
    from hf_textdp.errors import NumericalRangeError

    g = torch.Generator().manual_seed(15)
    E = _space(g, V=200, d=16)
    Q = _hard_queries(E, 40, g)
    Q[3, 2] = float("inf")
    index = ExactIndex(E)
    assert index._use_tensor_cores()
    with pytest.raises(NumericalRangeError, match="epsilon"), np.errstate(invalid="ignore", over="ignore"):
        index.search(Q, 1)  # (NumPy warns of the inf − inf the kernels compute for that query: a GPU does not)


def test_flagged_queries_resolved_by_direct_distances_or_the_generic_search(interpret):
    """Flagged queries: separated answers and duplicate rows are resolved by float64 distances to every row;
    a near-tie of distinct rows within float64's error is left to the generic search."""
    g = torch.Generator().manual_seed(16)
    d = 8
    E = torch.randn(100, d, generator=g)
    E[:, 0] -= 100.0  # far from the near-tie below
    E[7] = E[5]  # duplicates: equal distances, the lower position
    E[20] = 0.0
    E[21] = 0.0
    E[21, 1] = 2.0**-20  # ‖q − e₂₁‖² = 2⁴⁰ + (1 − 2⁻²⁰)², ‖q − e₂₀‖² = 2⁴⁰ + 1: 2⁻¹⁹ apart, under float64's ulp
    Q = torch.stack([E[5] + 1e-3 * torch.randn(d, generator=g), E[50] + torch.randn(d, generator=g), torch.zeros(d)])
    Q[2, 0], Q[2, 1] = 2.0**20, 1.0
    index = ExactIndex(E)
    pos, done = index._resolve_few(Q)
    assert done.tolist() == [True, True, False]
    assert pos[:2].tolist() == _brute_force(Q[:2], E).tolist() and int(pos[0]) == 5
    # through the search, the unresolved one takes the generic search's answer
    assert index.search(Q, 1)[2, 0] == index._search_generic(Q[2:], 1, None, None, None)[0, 0]
    assert index.fallback_queries >= 2  # the fused verification flagged the twins' query and the near-tie
