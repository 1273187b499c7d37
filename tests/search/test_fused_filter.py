"""The fused bf16 filter of the exact search (``hf_textdp/cpu/bf16_filter.py``, ``kernels/bf16_filter.c``).

Exactness (float64 brute force, Fraction arithmetic on near ties), the bound of
:func:`~hf_textdp.cpu.bf16_filter.fused_filter_bound` against float64 on every (query, row) pair, and
mutation checks: a filter without its 2β margin, and kernels that break the arithmetic model, must be
caught. Runs where the kernel runs (a C compiler and AVX-512 BF16 without AMX, as on CI); skipped
elsewhere, where the search keeps its torch filter (``tests/search/test_search_fast.py``).
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hf_textdp.cpu import bf16_filter as fused
from hf_textdp.cpu.distances import pair_sqdist
from hf_textdp.search import ExactIndex
from hf_textdp.search.verify import verify, verify_sorted
from hf_textdp.tools.bench import cpu_info, gemm_bounds
from hf_textdp.utils.native import _compiler
from tests.search.test_search_fast import GOLDEN_CONFIGS, _outputs_with_each_filter, brute64, exact_knn, static_fixture
from tests.search.test_search_fast import noisy_case as noisy_case  # noqa: PLC0414 - the fixture, under its own name
from tests.utils import N_CASES


F32 = np.float32
needs_kernel = pytest.mark.skipif(
    not fused.fused_filter_available(), reason="no fused bf16 kernel here (needs a C compiler, AVX-512 BF16, no AMX)"
)


def test_kernel_builds_where_the_cpu_has_avx512_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the CPU has AVX-512 BF16 and no AMX and a C compiler is found, the kernel builds and passes its
    model check, so the tests below cannot skip silently because of a broken kernel source."""
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "1")
    flags = set(cpu_info()[1])
    if "avx512_bf16" not in flags or "amx_bf16" in flags or _compiler() is None:
        pytest.skip("not a CPU the fused kernel is for, or no C compiler")
    assert fused.fused_filter_available()


@pytest.fixture(autouse=True)
def kernel_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "1")
    monkeypatch.delenv("HF_TEXTDP_SEARCH_FILTER", raising=False)


def torch_query_bounds(packed: fused.PackedRows, Q: torch.Tensor, q_rows: torch.Tensor) -> torch.Tensor:
    """The tensor form of the kernel's β per query: :func:`fused_filter_bound` of ‖q̂‖ and ‖q − q̂‖ in float64,
    ``q_rows`` the bf16 rows of ``fused._queries``."""
    q_hat = q_rows[:, : packed.d].double()
    return fused.fused_filter_bound(
        torch.linalg.vector_norm(q_hat, dim=1),
        torch.linalg.vector_norm(Q.double() - q_hat, dim=1),
        rho=packed.rho,
        e_hat=packed.e_hat,
        nu_max=packed.nu_max,
        d=packed.d,
    )


def fused_index(E: np.ndarray) -> ExactIndex:
    idx = ExactIndex(torch.from_numpy(E), filter="bf16")
    assert idx._packed_rows(1) is not None  # the search below runs the kernel
    return idx


def search(E: np.ndarray, Q: np.ndarray, k: int, **kw: Any) -> np.ndarray:
    return fused_index(E).search(torch.from_numpy(Q), k, **kw).numpy()


def wrong_nearest(E: np.ndarray, Q: np.ndarray) -> int:
    """How many nearest rows the search gets wrong against brute force (−1: it stopped, having kept fewer
    candidates than k for a query): what a mutation of the filter must make nonzero."""
    try:
        return int((search(E, Q, 1)[:, 0] != brute64(Q, E)[:, 0]).sum())
    except AssertionError as err:
        assert "fewer candidates than k" in str(err)
        return -1


@needs_kernel
@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("query_block", [None, 13, 500])
def test_fused_equals_float64_brute_force(noisy_case: Any, k: int, query_block: int | None) -> None:
    """2,000 madlib queries at ε from 0.5 to 5,000 (with 40 duplicate rows): brute force's answer."""
    E, Q = noisy_case
    assert np.array_equal(search(E, Q, k, query_block=query_block), brute64(Q, E, k))


@needs_kernel
@pytest.mark.parametrize("k", [1, 2])
def test_fused_near_ties_equal_exact_arithmetic(k: int) -> None:
    """Queries on bisectors of row pairs, nudged by 0 or ±1 ulp, against Fraction arithmetic (seed 7102)."""
    rng = np.random.default_rng(7102)
    E = rng.integers(-64, 65, (600, 16)).astype(F32) / F32(16)
    a, b = rng.integers(0, 600, 60), rng.integers(0, 600, 60)
    mid = ((E[a].astype(np.float64) + E[b]) / 2).astype(F32)
    Q = np.concatenate([mid, np.nextafter(mid, F32(np.inf)), np.nextafter(mid, F32(-np.inf))])
    assert search(E, Q, k).tolist() == exact_knn(Q, E, k)


@needs_kernel
@pytest.mark.parametrize(("E", "q", "k", "expected"), [c[1:] for c in N_CASES], ids=[c[0] for c in N_CASES])
def test_fused_constructed_cases(E: np.ndarray, q: np.ndarray, k: int, expected: Any) -> None:
    """The known answers N1–N5, alone (one padded block) and inside 3,000 far rows (many blocks)."""
    if -(-E.shape[0] // fused.NB) >= k:
        assert search(E, q, k)[0].tolist() == expected
    far = np.random.default_rng(7103).standard_normal((3000, E.shape[1])).astype(F32) * F32(1e6)
    assert search(np.concatenate([E, far]), q, k)[0].tolist() == expected


@needs_kernel
@pytest.mark.parametrize("scale", [2.0**-60, 2.0**-20, 1.0, 2.0**20])
def test_fused_extreme_magnitudes(noisy_case: Any, scale: float) -> None:
    """Scaling E and Q by a power of two scales every distance exactly: the same answers (tiny scales reach
    the flushed-to-zero products of β_abs)."""
    E, Q = noisy_case
    Es, Qs = (E * F32(scale)).astype(F32), (Q[:400] * F32(scale)).astype(F32)
    assert np.array_equal(search(Es, Qs, 1)[:, 0], brute64(Q[:400], E)[:, 0])


@needs_kernel
@pytest.mark.parametrize(("V", "d"), [(33, 7), (64, 5), (100, 1), (31, 384)])
def test_fused_odd_shapes_and_padding(V: int, d: int) -> None:
    """Odd d (a zero coordinate pads the last pair), V not a multiple of the block (padding rows have
    score −∞ and never come back) and batches not a multiple of the 12-query tile."""
    rng = np.random.default_rng(7110 + V + d)
    E = rng.standard_normal((V, d)).astype(F32)
    Q = (E[rng.integers(0, V, 37)] + rng.standard_normal((37, d)).astype(F32)).astype(F32)
    for k in (1, 2) if -(-V // fused.NB) >= 2 else (1,):
        assert np.array_equal(search(E, Q, k), brute64(Q, E, k))
    packed = fused_index(E)._packed_rows(1)
    assert packed is not None
    rows, pos, counts = fused.fused_candidates(packed, torch.from_numpy(Q), 1)
    assert int(pos.max()) < V and int(counts.min()) >= 1


@needs_kernel
def test_fused_bound_holds_on_random_data() -> None:
    """|t_c − Ã_c| ≤ β for every (query, row) pair of 300 × 4,000 heavy-tailed fp32 data, with the kernel's
    own scores against float64 t_c = q·e_c − ‖e_c‖²/2 (seed 7106); and β is not loose."""
    rng = np.random.default_rng(7106)
    E = (rng.standard_t(3, (4000, 40)) * 0.3).astype(F32)
    Q = (rng.standard_t(3, (300, 40)) * 5).astype(F32)
    idx = fused_index(E)
    packed = idx._packed_rows(1)
    assert packed is not None
    Qt = torch.from_numpy(Q)
    q_rows, _ = fused._queries(Qt, packed.K2)
    rows = torch.arange(300).repeat_interleave(packed.blocks)
    blocks = torch.arange(packed.blocks).repeat(300)
    A = fused.block_scores(packed, q_rows.view(torch.int32), rows, blocks).view(300, -1)[:, : idx.V].double()
    beta = torch_query_bounds(packed, Qt, q_rows)
    t = Qt.double() @ idx.E.double().T - idx.sq64 / 2
    err = (t - A).abs() / beta[:, None]
    assert float(err.max()) <= 1.0
    assert float(err.max()) > 0.05  # and β is not far above the worst error (0.51 of it here)


@needs_kernel
def test_block_maxima_same_for_every_thread_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each query's maxima are computed alone: 1, 2 or 3 threads, on OpenMP's or on Python's, give the same bits."""
    rng = np.random.default_rng(7111)
    E = torch.from_numpy(rng.standard_normal((1000, 64)).astype(F32))
    packed = fused.PackedRows.build(E, (E.double() ** 2).sum(1))
    tiles = fused.query_tiles(torch.from_numpy(rng.standard_normal((200, 64)).astype(F32)), packed.K2)
    one = fused.block_maxima(packed, tiles, 1)
    assert torch.equal(one, fused.block_maxima(packed, tiles, 2))
    assert torch.equal(one, fused.block_maxima(packed, tiles, 3))
    # a build without OpenMP: the parts run on Python threads, one call each
    monkeypatch.setattr(fused._lib(), "bf16_filter_openmp", lambda: 0)
    assert torch.equal(one, fused.block_maxima(packed, tiles, 2))


@needs_kernel
def test_mutation_filter_without_margin_is_caught(noisy_case: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation check: with β = 0 (the block maximum taken as exact) the filter loses true nearest rows on
    the brute-force case above (wrong answers, or none left to verify when a block's scores, summed in
    another order, all fall below its maximum), so that test would fail; with the real β it loses none."""
    E, Q = noisy_case
    monkeypatch.setattr(fused, "fused_filter_bound", lambda *a, **kw: torch.zeros(a[0].shape, dtype=torch.float64))
    assert wrong_nearest(E, Q) != 0


@needs_kernel
@pytest.mark.parametrize("broken", ["bf16 accumulator", "error of 2^-12", "no fp32 probe"])
def test_mutation_model_check_refuses_broken_kernels(broken: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation check: kernels whose scores round to bf16, or err beyond γ_n·Σ|terms|, fail the model check
    that runs before the kernel is first used (so the search keeps its torch filter)."""
    real = fused.block_scores

    def bad(*a: Any) -> torch.Tensor:
        S = real(*a)
        if broken == "bf16 accumulator":
            return S.bfloat16().float()
        if broken == "error of 2^-12":
            return S * (1 + 2.0**-12)
        return torch.where(S == 1.0 + 2.0**-20, torch.ones_like(S), S)

    assert fused._model_holds()
    monkeypatch.setattr(fused, "block_scores", bad)
    assert not fused._model_holds()


@needs_kernel
def test_kernel_off_keeps_the_torch_filter(noisy_case: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``HF_TEXTDP_NATIVE=0``: no packed rows, the torch bf16 filter runs, and the answers are the same."""
    E, Q = noisy_case
    on = search(E, Q[:500], 2)
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "0")
    idx = ExactIndex(torch.from_numpy(E), filter="bf16")
    assert idx._packed_rows(1) is None
    assert np.array_equal(idx.search(torch.from_numpy(Q[:500]), 2).numpy(), on)


@needs_kernel
def test_seeded_outputs_same_as_fp32_filter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Static vectors, every mechanism: the seeded outputs with the fused filter equal those with fp32."""
    model, texts = static_fixture(tmp_path)
    out = _outputs_with_each_filter(monkeypatch, model, texts)  # asserts the bf16 (fused) outputs == fp32's
    assert len(out) == len(GOLDEN_CONFIGS)


@needs_kernel
def test_bench_bf16_bound_is_the_faster_product() -> None:
    """Where the search runs the fused kernel, the bf16 bound is the faster of torch.mm and the kernel."""
    sources: dict[str, float] = {}
    bounds = gemm_bounds(2000, 64, repeats=2, rows=48, sources=sources)
    assert {"bf16 torch.mm", "bf16 fused"} <= set(sources)
    assert bounds["bf16"] == max(sources["bf16 torch.mm"], sources["bf16 fused"])
    assert all(math.isfinite(v) and v > 0 for v in sources.values())


@needs_kernel
def test_fused_cluster_overflows_the_list_and_refilters() -> None:
    """1,000 rows within 1e-4 of one point: the kernel's candidate list overflows (the tensor form takes
    over), the queries keep more than 256 candidates and are filtered again in fp32; still brute force's
    answer."""
    rng = np.random.default_rng(7104)
    d = 32
    base = rng.standard_normal(d)
    E = np.concatenate([base + 1e-4 * rng.standard_normal((1000, d)), rng.standard_normal((1000, d))]).astype(F32)
    Q = (base + 1e-4 * rng.standard_normal((50, d))).astype(F32)
    packed = fused_index(E)._packed_rows(1)
    assert packed is not None
    _, _, counts = fused.fused_candidates(packed, torch.from_numpy(Q), 1)
    assert int(counts.sum()) > max(1024, 8 * 50) and int(counts.max()) > 256
    assert np.array_equal(search(E, Q, 1)[:, 0], brute64(Q, E)[:, 0])


def test_pair_sqdist_within_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled float64 distances of the verification are within (d + 2)u₆₄·D of the exact rational
    distance (seed 7112; magnitudes spread over 2⁻³⁰ … 2³⁰), and ``None`` with the kernels off."""
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "1")
    if _compiler() is None:
        pytest.skip("no C compiler")
    rng = np.random.default_rng(7112)
    d = 45
    Q = (rng.standard_normal((20, d)) * 2.0 ** rng.integers(-30, 31, (20, d))).astype(F32)
    E = (rng.standard_normal((30, d)) * 2.0 ** rng.integers(-30, 31, (30, d))).astype(F32)
    rows, pos = torch.from_numpy(rng.integers(0, 20, 200)), torch.from_numpy(rng.integers(0, 30, 200))
    D = pair_sqdist(torch.from_numpy(Q), torch.from_numpy(E), rows, pos)
    assert D is not None
    for i in range(200):
        r, p = int(rows[i]), int(pos[i])
        exact = sum((Fraction(float(a)) - Fraction(float(b))) ** 2 for a, b in zip(Q[r], E[p], strict=True))
        assert abs(Fraction(float(D[i])) - exact) <= Fraction((d + 2) * 2.0**-53) * exact
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "0")
    assert pair_sqdist(torch.from_numpy(Q), torch.from_numpy(E), rows, pos) is None


@pytest.mark.parametrize("d,n", [(384, 4097), (45, 201), (7, 3), (16, 1)])
def test_pair_sqdist_is_its_documented_sum_for_every_pair(d: int, n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each D is exactly the documented float64 sum (partial sums over j = l mod 8, then the tail, then the eight
    partial sums in order; seed 7113), on one thread or a team: how the pairs are split changes no bit."""
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "1")
    if _compiler() is None:
        pytest.skip("no C compiler")
    rng = np.random.default_rng(7113)
    Q = (rng.standard_normal((50, d)) * 3).astype(F32)
    E = rng.standard_normal((70, d)).astype(F32)
    rows, pos = rng.integers(0, 50, n), rng.integers(0, 70, n)
    t = Q[rows].astype(np.float64) - E[pos].astype(np.float64)
    acc = np.zeros((n, 8))
    for j in range(0, d - d % 8, 8):
        acc = acc + t[:, j : j + 8] * t[:, j : j + 8]
    want = np.zeros(n)
    for j in range(d - d % 8, d):
        want = want + t[:, j] * t[:, j]
    for lane in range(8):
        want = want + acc[:, lane]
    got = pair_sqdist(torch.from_numpy(Q), torch.from_numpy(E), torch.from_numpy(rows), torch.from_numpy(pos))
    assert got is not None
    assert np.array_equal(got.numpy(), want)


@needs_kernel
def test_second_threshold_cuts_the_list_for_k2(noisy_case: Any) -> None:
    """k = 2: the kernel's second cut (at the 2nd largest candidate score − 2β) keeps fewer candidates than the
    block threshold alone, and every true top 2 is among them (brute force)."""
    E, Q = noisy_case
    packed = fused_index(E)._packed_rows(2)
    assert packed is not None
    Qt = torch.from_numpy(Q)
    rows, pos, _ = fused.fused_candidates(packed, Qt, 2)
    # the block threshold alone, in tensor operations (fused_candidates' overflow path)
    q_rows, q_tiles = fused._queries(Qt, packed.K2)
    beta = torch_query_bounds(packed, Qt, q_rows)
    M = fused.block_maxima(packed, q_tiles, 1)[: len(Q)]
    thr = M.topk(2, dim=1).values[:, 1].double() - 2.0 * beta
    lim = fused.round_up_fp32(thr - 2.0**-40 * (thr.abs() + beta))
    hr, hb = torch.nonzero(M >= lim[:, None], as_tuple=True)
    S = fused.block_scores(packed, q_rows.view(torch.int32), hr, hb)
    assert rows.numel() < int((S >= lim[hr][:, None]).sum())
    kept = set(zip(rows.tolist(), pos.tolist(), strict=True))
    top2 = brute64(Q, E, 2)
    assert all((i, int(c)) in kept for i in range(len(Q)) for c in top2[i])


@needs_kernel
@pytest.mark.parametrize("k", [1, 2])
def test_fused_exclude_equals_brute_force(noisy_case: Any, k: int) -> None:
    """Each query's own row excluded (as the scale statistics and the audit search): brute force's answer
    without that row; also for rows in the padded last block and for duplicates of the excluded row."""
    E, Q = noisy_case
    V = len(E)
    rng = np.random.default_rng(7113)
    ex = rng.integers(0, V, len(Q))
    ex[:50] = np.arange(V - 50, V)  # the last, padded block (V = 2,000 is not a multiple of 32)
    ex[50:90] = np.arange(100, 140)  # rows with exact duplicates at 1,960 … 1,999
    Qx = Q.copy()
    Qx[:90] = E[ex[:90]]  # queries on the excluded row itself: the row must not come back
    idx = fused_index(E)
    got = idx.search(torch.from_numpy(Qx), k, exclude=torch.from_numpy(ex)).numpy()
    D = ((Qx.astype(np.float64)[:, None, :] - E.astype(np.float64)[None]) ** 2).sum(-1)
    D[np.arange(len(Qx)), ex] = np.inf
    assert np.array_equal(got, np.argsort(D, axis=1, kind="stable")[:, :k])
    assert not np.any(got == ex[:, None])


@needs_kernel
@pytest.mark.parametrize(("V", "d", "kind"), [(3000, 96, "normal"), (5000, 64, "t3"), (4100, 100, "duplicates")])
def test_fused_diameter_equals_float64_pairs(V: int, d: int, kind: str) -> None:
    """The diameter from the kernel's farthest-pair candidates equals the float64 maximum over all pairs
    (seed 7114), with the candidates found by the kernel (not the fp32 pass)."""
    from hf_textdp.scale import diameter

    rng = np.random.default_rng(7114 + V)
    X = rng.standard_t(3, (V, d)) if kind == "t3" else rng.standard_normal((V, d))
    if kind == "duplicates":
        X[-100:] = X[:100]
    E = torch.from_numpy(X.astype(F32))
    assert V * d >= 2**18 and fused.farthest_pair_candidates(E, (E.double() ** 2).sum(1)) is not None
    E64 = E.double()
    ref = max(float(((E64[i] - E64) ** 2).sum(1).max()) for i in range(V)) ** 0.5
    assert diameter(E) == ref


@needs_kernel
@pytest.mark.parametrize(("B", "d"), [(1, 1), (37, 7), (5, 13), (300, 384)])
def test_prepared_queries_equal_the_torch_form(B: int, d: int) -> None:
    """The kernel's query preparation (vector groups of 8 coordinates and a scalar tail) gives the words of the
    torch form's bf16 rounding (to nearest even, halfway cases and subnormals included) bit for bit, and the
    bounds of the tensor form within float64 rounding."""
    rng = np.random.default_rng(7113 + d)
    Q = rng.standard_normal((B, d)).astype(F32)
    # fp32 values halfway between two bf16 numbers (the low 16 bits 0x8000): ties to even, both ways
    bits = Q.view(np.uint32)
    bits[:, ::3] = (bits[:, ::3] & np.uint32(0xFFFF0000)) | np.uint32(0x8000)
    bits[:, 1::5] = np.uint32(0x00018000)  # a subnormal halfway case: rounds to even, not flushed to zero
    bits[:, 2::7] = np.uint32(0x80000001)  # the smallest negative subnormal
    E = rng.standard_normal((100, d)).astype(F32)
    packed = fused.PackedRows.build(torch.from_numpy(E), (torch.from_numpy(E).double() ** 2).sum(1))
    Qt = torch.from_numpy(Q)
    q_rows, q_tiles, beta = fused._prepare(packed, Qt)
    ref_rows, ref_tiles = fused._queries(Qt, packed.K2)
    assert torch.equal(q_rows.view(torch.int16), ref_rows.view(torch.int16))
    assert torch.equal(q_tiles, ref_tiles)
    torch.testing.assert_close(beta, torch_query_bounds(packed, Qt, ref_rows), rtol=1e-13, atol=0)


@needs_kernel
@pytest.mark.parametrize("k", [2, 3])
def test_candidates_same_for_every_thread_split(noisy_case: Any, k: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The candidates split between 1, 2 or 3 parts, on OpenMP's threads or on Python's, are the same in the same
    order: the kernel's running lists (k = 2) and the selection after the maxima (k = 3)."""
    E, Q = noisy_case
    packed = fused_index(E)._packed_rows(k)
    assert packed is not None
    Qt = torch.from_numpy(Q[:700])
    one = fused.fused_candidates(packed, Qt, k, threads=1)
    for threads in (2, 3):
        other = fused.fused_candidates(packed, Qt, k, threads=threads)
        assert all(torch.equal(a, b) for a, b in zip(one, other, strict=True))
    monkeypatch.setattr(fused._lib(), "bf16_filter_openmp", lambda: 0)
    other = fused.fused_candidates(packed, Qt, k, threads=2)
    assert all(torch.equal(a, b) for a, b in zip(one, other, strict=True))


@needs_kernel
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("exclude", [False, True])
def test_running_lists_hold_the_true_top_k(noisy_case: Any, k: int, exclude: bool) -> None:
    """k ≤ LIST_K: the lists the kernel keeps while it scores hold each query's true top k (brute force, the
    excluded row left out), positions ascending within a query, about as many as the selection after the
    maxima keeps (both cut at 2β below a real score)."""
    E, Q = noisy_case
    assert k <= fused.LIST_K
    packed = fused_index(E)._packed_rows(k)
    assert packed is not None
    Qt = torch.from_numpy(Q)
    ex = torch.from_numpy(np.random.default_rng(7121).integers(0, len(E), len(Q))) if exclude else None
    rows, pos, dropped = fused._listed(packed, Qt, k, 2, ex)
    assert dropped.numel() == 0
    assert torch.equal(rows, torch.sort(rows, stable=True).values)
    same_row = rows[1:] == rows[:-1]
    assert bool((pos[1:][same_row] > pos[:-1][same_row]).all())
    D = ((Q.astype(np.float64)[:, None, :] - E.astype(np.float64)[None]) ** 2).sum(-1)
    if ex is not None:
        assert not bool((pos == ex[rows]).any())
        D[np.arange(len(Q)), ex.numpy()] = np.inf
    top = np.argsort(D, axis=1, kind="stable")[:, :k]
    kept = set(zip(rows.tolist(), pos.tolist(), strict=True))
    assert all((i, int(c)) in kept for i in range(len(Q)) for c in top[i])
    q_rows, q_tiles, bound = fused._prepare(packed, Qt)
    M = fused.block_maxima(packed, q_tiles, 2, ex)[: len(Q)]
    selected = fused._select(packed, M, None, bound, ex, k, q_rows, 1 << 18, 2)
    assert selected is not None
    assert abs(rows.numel() - selected[0].numel()) <= 0.01 * selected[0].numel()


@needs_kernel
def test_full_running_lists_fall_back_to_the_selection() -> None:
    """A list that outgrows its room (queries within 1e-4 of a cluster of 1,000 rows) is dropped: those queries
    alone take the block maxima and the selection, in their place among the others (queries in order), and the
    search still gives brute force's answer. The cluster comes after the other rows, so the other queries'
    running maxima are far above it when it goes by and their lists stay small."""
    rng = np.random.default_rng(7122)
    d = 32
    base = rng.standard_normal(d)
    E = np.concatenate([rng.standard_normal((1000, d)), base + 1e-4 * rng.standard_normal((1000, d))]).astype(F32)
    near = (base + 1e-4 * rng.standard_normal((20, d))).astype(F32)
    Q = torch.from_numpy(rng.standard_normal((40, d)).astype(F32))
    Q[1::2] = torch.from_numpy(near)  # odd queries in the cluster
    packed = fused_index(E)._packed_rows(1)
    assert packed is not None
    _, _, dropped = fused._listed(packed, Q, 1, 2, None)
    assert torch.equal(dropped, torch.arange(1, 40, 2))
    rows, pos, counts = fused.fused_candidates(packed, Q, 1)
    assert torch.equal(rows, torch.sort(rows, stable=True).values)
    sub_rows, sub_pos = fused._selected(packed, Q[1::2], 1, 1, None)
    odd = rows % 2 == 1
    assert torch.equal(rows[odd], 2 * sub_rows + 1) and torch.equal(pos[odd], sub_pos)
    assert int(counts[1::2].min()) > 32 * 3  # more than a list holds
    assert np.array_equal(search(E, Q.numpy(), 1)[:, 0], brute64(Q.numpy(), E)[:, 0])


@needs_kernel
def test_rows_whose_lists_overflow_stop_being_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster of 1,000 near-duplicate rows ahead of the others overflows every query's list (each such query
    pays the kernel twice): after 4,096 of them the index stops listing on these rows, and its answers stay
    brute force's."""
    rng = np.random.default_rng(7123)
    d = 32
    base = rng.standard_normal(d)
    E = np.concatenate([base + 1e-4 * rng.standard_normal((1000, d)), rng.standard_normal((1000, d))]).astype(F32)
    Q = rng.standard_normal((4200, d)).astype(F32)
    idx = fused_index(E)
    calls: list[int] = []
    real = fused.block_lists

    def counted(*a: Any, **kw: Any) -> None:
        calls.append(1)
        real(*a, **kw)

    monkeypatch.setattr(fused, "block_lists", counted)
    got = idx.search(torch.from_numpy(Q), 1).numpy()
    packed = idx._packed_rows(1)
    assert packed is not None and packed.listed[0] >= 4096 and 4 * packed.listed[1] > packed.listed[0]
    assert not packed.lists_pay
    n = len(calls)
    assert np.array_equal(idx.search(torch.from_numpy(Q[:500]), 1).numpy()[:, 0], got[:500, 0])
    assert len(calls) == n  # no more lists on these rows
    assert np.array_equal(got[:, 0], brute64(Q, E)[:, 0])


@needs_kernel
def test_mutation_lists_without_margin_are_caught(noisy_case: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation check: running lists cut at their k-th largest maximum itself (β = 0 in the lists only, the
    selection keeps its β) lose true nearest rows, so the brute-force tests would fail."""
    E, Q = noisy_case
    real = fused.RunningLists.empty

    def no_margin(bound: torch.Tensor, rows: int, k: int, cap: int) -> fused.RunningLists:
        return real(torch.zeros_like(bound), rows, k, cap)

    monkeypatch.setattr(fused.RunningLists, "empty", staticmethod(no_margin))
    assert wrong_nearest(E, Q) != 0


@needs_kernel
def test_nearest_verification_equals_the_sorted_form(noisy_case: Any) -> None:
    """The compiled k = 1 verification picks the sorted form's candidate on candidate lists in any order
    (shuffled, with repeats), and flags the rows whose order it cannot certify: duplicated rows of E (the
    same distance twice) must be flagged and then decided by position, as the sorted form does."""
    E, Q = noisy_case
    idx = fused_index(E)
    rng = np.random.default_rng(7114)
    B = 300
    Qt = torch.from_numpy(Q[:B])
    rows = torch.from_numpy(np.repeat(np.arange(B), 6))
    pos = torch.from_numpy(rng.integers(0, idx.V, rows.numel()))
    nearest = torch.from_numpy(brute64(Q[:B], E)[:, 0])
    pos[::6] = nearest  # the true nearest among each query's candidates
    # the noisy case's 40 duplicated rows: a query nearest to a row with a twin gets the twin too
    dup = [b for b in range(B) if (E == E[int(nearest[b])]).all(1).sum() > 1]
    assert dup, "the case has queries nearest to a duplicated row"
    twins = [
        int(np.flatnonzero((E == E[int(nearest[b])]).all(1) & (np.arange(idx.V) != int(nearest[b])))[0]) for b in dup
    ]
    order = torch.from_numpy(rng.permutation(rows.numel()))
    rows = torch.cat([rows[order], rows[:50], torch.tensor(dup)])
    pos = torch.cat([pos[order], pos[:50], torch.tensor(twins)])
    coef = idx.interval
    found = fused_nearest_of_pairs(Qt, idx, rows, pos, B, coef)
    assert found is not None
    best, tie = found
    assert torch.equal(best, verify_sorted(idx.E, idx.interval, Qt, rows, pos, 1, B)[:, 0])
    assert torch.equal(
        verify(idx.E, idx.interval, Qt, rows, pos, 1, B)[:, 0], nearest
    )  # brute force's: the lower position
    assert bool(tie[dup].all()) and int(tie.sum()) < B // 2


def fused_nearest_of_pairs(
    Q: torch.Tensor, idx: ExactIndex, rows: torch.Tensor, pos: torch.Tensor, B: int, coef: float
) -> tuple[torch.Tensor, torch.Tensor] | None:
    from hf_textdp.cpu.distances import top_of_pairs

    found = top_of_pairs(Q, idx.E, rows, pos, B, 1, coef)
    return None if found is None else (found[0][:, 0], found[2])


@needs_kernel
def test_mutation_verification_without_tie_flags_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation check: exact ties whose float64 distances round apart (a row and its coordinates reversed,
    a query on the diagonal: the same exact distance, summed in another order; coordinates spread over
    2⁻²⁰ … 2¹⁰ so the sums round) must go to exact arithmetic and the lower position (seed 7115); a
    verification that trusts the float64 order answers some of them wrongly."""
    from hf_textdp.search import verify as search_module

    rng = np.random.default_rng(7115)
    d = 16
    cases = []
    for _ in range(100):
        a = (rng.standard_normal(d) * 2.0 ** rng.integers(-20, 11, d)).astype(F32)
        cases.append((np.stack([a, a[::-1]]), np.full((1, d), rng.standard_normal(), dtype=F32)))
    assert all(exact_knn(q, E, 1) == [[0]] for E, q in cases)  # exact ties: the lower position
    assert all(search(E, q, 1).tolist() == [[0]] for E, q in cases)
    real = search_module.top_of_pairs

    def trusting(*args: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        found = real(*args)
        return None if found is None else (found[0], found[1], torch.zeros_like(found[2]))

    monkeypatch.setattr(search_module, "top_of_pairs", trusting)
    assert sum(search(E, q, 1).tolist() != [[0]] for E, q in cases) > 0


@needs_kernel
@pytest.mark.parametrize("k", [1, 2, 5, 16])
def test_threshold_in_the_kernel_equals_the_torch_steps(noisy_case: Any, k: int) -> None:
    """For k ≤ 16 the selection kernel derives each query's threshold itself (the k-th largest block maximum,
    repeats counted as torch's topk does): the same candidate lists as with the thresholds of the float64
    tensor steps passed in; rows with repeated maxima included."""
    E, Q = noisy_case
    packed = fused_index(E)._packed_rows(k)
    assert packed is not None
    q_rows, q_tiles, bound = fused._prepare(packed, torch.from_numpy(Q))
    M = fused.block_maxima(packed, q_tiles, 2)[: Q.shape[0]].clone()
    M[::7, 3:9] = M[::7].amax(1, keepdim=True)  # repeats of the largest maximum
    lim = fused._threshold(M, bound, k)
    ours = fused._select(packed, M, None, bound, None, k, q_rows, 1 << 18, 2)
    theirs = fused._select(packed, M, lim, bound, None, k, q_rows, 1 << 18, 2)
    assert ours is not None and theirs is not None
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
    assert ours[0].numel() >= Q.shape[0]


@needs_kernel
@pytest.mark.parametrize("k", [2, 4, 16])
def test_top_k_verification_equals_the_sorted_form(noisy_case: Any, k: int) -> None:
    """The compiled verification for k > 1: the sorted form's first k on shuffled candidate lists that hold
    each query's true top k, brute force's answer through the search's own ``verify``, and a flag wherever
    the sorted form needs exact arithmetic (duplicated rows of E)."""
    from hf_textdp.cpu.distances import top_of_pairs

    E, Q = noisy_case
    idx = fused_index(E)
    rng = np.random.default_rng(7116 + k)
    B = 200
    Qt = torch.from_numpy(Q[:B])
    truth = torch.from_numpy(brute64(Q[:B], E, k + 1))
    extra = torch.from_numpy(rng.integers(0, idx.V, (B, 5)))
    rows = torch.arange(B).repeat_interleave(k + 1 + 5)
    pos = torch.cat([truth, extra], 1).reshape(-1)
    keep = torch.tensor([i % (k + 6) <= k or int(pos[i]) not in truth[i // (k + 6)] for i in range(pos.numel())])
    rows, pos = rows[keep], pos[keep]  # no (query, position) pair twice, as in the search's lists
    order = torch.from_numpy(rng.permutation(rows.numel()))
    rows, pos = rows[order], pos[order]
    coef = idx.interval
    found = top_of_pairs(Qt, idx.E, rows, pos, B, k, coef)
    assert found is not None
    best, count, tie = found
    assert bool((count >= k).all())
    sorted_form = verify_sorted(idx.E, idx.interval, Qt, rows, pos, k, B)
    assert torch.equal(best[~tie], sorted_form[~tie])
    assert torch.equal(verify(idx.E, idx.interval, Qt, rows, pos, k, B), truth[:, :k])
    twins = [b for b in range(B) if any((E == E[int(p)]).all(1).sum() > 1 for p in truth[b, : k + 1])]
    assert not twins or bool(tie[twins].any())


def test_distance_kernels_refuse_indices_out_of_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled distances and verification index memory with the pairs: an index past the end is refused."""
    from hf_textdp.cpu.distances import top_of_pairs

    monkeypatch.setenv("HF_TEXTDP_NATIVE", "1")
    if _compiler() is None:
        pytest.skip("no C compiler")
    Q, E = torch.zeros(3, 4), torch.zeros(5, 4)
    ok = torch.tensor([0, 2])
    with pytest.raises(IndexError, match="rows must lie in"):
        pair_sqdist(Q, E, torch.tensor([0, 3]), ok)
    with pytest.raises(IndexError, match="pos must lie in"):
        pair_sqdist(Q, E, ok, torch.tensor([-1, 0]))
    with pytest.raises(IndexError, match="rows must lie in"):
        top_of_pairs(Q, E, ok, ok, 2, 1, 1e-13)
    assert pair_sqdist(Q, E, ok, ok) is not None
