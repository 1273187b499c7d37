"""The fused AVX2 fp32 filter of the exact search (``hf_textdp/cpu/avx2_filter.py``, ``kernels/avx2_filter.c``).

Every test forces the AVX2 path (``HF_TEXTDP_CPU_ISA=avx2``), so an AVX-512 machine (CI) runs the AVX2 kernel
as an AVX2-only CPU does: exactness against float64 brute force and Fraction arithmetic on near ties, ties to the
lowest position, the bound of :func:`~hf_textdp.cpu.bf16_filter.fused_filter_bound` (no input rounding) against
float64 on every (query, row) pair, and a mutation check (the filter without its 2β margin must be caught).
Runs where the kernel runs (a C compiler and AVX2 with FMA); a test checks that it builds on such a CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hf_textdp.cpu import avx2_filter as A
from hf_textdp.cpu import bf16_filter as fused
from hf_textdp.cpu.features import cpu_flags
from hf_textdp.search import ExactIndex, bf16_filter_available
from hf_textdp.utils.native import _compiler
from tests.search.test_search_fast import brute64, exact_knn, seeded_outputs, static_fixture
from tests.search.test_search_fast import noisy_case as noisy_case  # noqa: PLC0414 - the fixture, under its own name
from tests.utils import N_CASES


F32 = np.float32
needs_kernel = pytest.mark.skipif(
    not A.avx2_filter_available(), reason="no AVX2 filter kernel here (needs a C compiler, AVX2 and FMA)"
)


@pytest.fixture(autouse=True)
def avx2_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "1")
    monkeypatch.setenv("HF_TEXTDP_CPU_ISA", "avx2")
    monkeypatch.delenv("HF_TEXTDP_SEARCH_FILTER", raising=False)
    # the fp32 kernel: "auto" would take the int8 filter first (tests/search/test_int8_filter.py)
    monkeypatch.setattr(ExactIndex, "_int8_rows", lambda self, k, queries=0: None)


def test_kernel_builds_where_the_cpu_has_avx2() -> None:
    """Where the CPU has AVX2 and FMA and a C compiler is found, the kernel builds, so the tests below cannot
    skip silently because of a broken kernel source."""
    if not {"avx2", "fma"} <= cpu_flags() or _compiler() is None:
        pytest.skip("not a CPU the AVX2 kernel is for, or no C compiler")
    assert A.avx2_filter_available()


def index(E: np.ndarray) -> ExactIndex:
    idx = ExactIndex(torch.from_numpy(E))
    assert not idx._use_bf16(1) and idx._avx2_rows(1) is not None  # the search below runs the AVX2 kernel
    return idx


def search(E: np.ndarray, Q: np.ndarray, k: int, **kw: Any) -> np.ndarray:
    return index(E).search(torch.from_numpy(Q), k, **kw).numpy()


@needs_kernel
def test_forcing_avx2_hides_the_avx512_paths() -> None:
    """With HF_TEXTDP_CPU_ISA=avx2 neither bf16 filter runs (the fused kernel or torch's bf16 product, which an
    AVX2-only CPU emulates), and an explicit ``filter="fp32"`` keeps the torch reference filter."""
    assert not fused.fused_filter_available()
    assert not bf16_filter_available()
    E = np.random.default_rng(7140).standard_normal((500, 8)).astype(F32)
    assert index(E)._packed_rows(1) is None
    assert ExactIndex(torch.from_numpy(E), filter="fp32")._avx2_rows(1) is None


@needs_kernel
@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("query_block", [None, 13, 500])
def test_avx2_equals_float64_brute_force(noisy_case: Any, k: int, query_block: int | None) -> None:
    """2,000 madlib queries at ε from 0.5 to 5,000 (with 40 duplicate rows: the lowest position wins): brute
    force's answer."""
    E, Q = noisy_case
    assert np.array_equal(search(E, Q, k, query_block=query_block), brute64(Q, E, k))


@needs_kernel
def test_avx2_ties_go_to_the_lowest_position() -> None:
    """Rows repeated at several positions, queries on them and between them: the lowest position first."""
    rng = np.random.default_rng(7141)
    base = rng.standard_normal((50, 24)).astype(F32)
    E = np.concatenate([base, base[::-1], base, rng.standard_normal((300, 24)).astype(F32)])
    Q = np.concatenate([base, base + F32(1e-3)]).astype(F32)
    got = search(E, Q, 3)
    assert np.array_equal(got, brute64(Q, E, 3))
    assert got[:50, 0].tolist() == list(range(50))  # each query's own row, at its lowest position
    assert got[:50, 1].tolist() == [99 - i for i in range(50)]  # then the reversed copy (a lower position)


@needs_kernel
@pytest.mark.parametrize("k", [1, 2])
def test_avx2_near_ties_equal_exact_arithmetic(k: int) -> None:
    """Queries on bisectors of row pairs, nudged by 0 or ±1 ulp, against Fraction arithmetic (seed 7142)."""
    rng = np.random.default_rng(7142)
    E = rng.integers(-64, 65, (600, 16)).astype(F32) / F32(16)
    a, b = rng.integers(0, 600, 60), rng.integers(0, 600, 60)
    mid = ((E[a].astype(np.float64) + E[b]) / 2).astype(F32)
    Q = np.concatenate([mid, np.nextafter(mid, F32(np.inf)), np.nextafter(mid, F32(-np.inf))])
    assert search(E, Q, k).tolist() == exact_knn(Q, E, k)


@needs_kernel
@pytest.mark.parametrize(("E", "q", "k", "expected"), [c[1:] for c in N_CASES], ids=[c[0] for c in N_CASES])
def test_avx2_constructed_cases(E: np.ndarray, q: np.ndarray, k: int, expected: Any) -> None:
    """The known answers N1–N5, alone and inside 3,000 far rows (many blocks)."""
    assert search(E, q, k)[0].tolist() == expected
    far = np.random.default_rng(7143).standard_normal((3000, E.shape[1])).astype(F32) * F32(1e6)
    assert search(np.concatenate([E, far]), q, k)[0].tolist() == expected


@needs_kernel
@pytest.mark.parametrize("scale", [2.0**-60, 2.0**-20, 1.0, 2.0**20])
def test_avx2_extreme_magnitudes(noisy_case: Any, scale: float) -> None:
    """Scaling E and Q by a power of two scales every distance exactly: the same answers (tiny scales reach
    the gradual underflow that β_abs covers)."""
    E, Q = noisy_case
    Es, Qs = (E * F32(scale)).astype(F32), (Q[:400] * F32(scale)).astype(F32)
    assert np.array_equal(search(Es, Qs, 1)[:, 0], brute64(Q[:400], E)[:, 0])


@needs_kernel
@pytest.mark.parametrize(("V", "d"), [(33, 7), (16, 5), (100, 1), (31, 384)])
def test_avx2_odd_shapes_and_padding(V: int, d: int) -> None:
    """V not a multiple of the 16-row block (padding rows score −∞ and never come back), batches not a multiple
    of the 6-query tile."""
    rng = np.random.default_rng(7144 + V + d)
    E = rng.standard_normal((V, d)).astype(F32)
    Q = (E[rng.integers(0, V, 37)] + rng.standard_normal((37, d)).astype(F32)).astype(F32)
    for k in (1, 2, 3):
        assert np.array_equal(search(E, Q, k), brute64(Q, E, k))
    rows = index(E)._avx2_rows(1)
    assert rows is not None
    _, pos, dropped = A.avx2_candidates(rows, torch.from_numpy(Q), 1)
    assert int(pos.max()) < V and dropped.numel() == 0


@needs_kernel
def test_avx2_bound_holds_on_random_data() -> None:
    """|t_c − Ã_c| ≤ β for every (query, row) pair of 300 × 4,000 heavy-tailed fp32 data, with the kernel's own
    scores against float64 t_c = q·e_c − ‖e_c‖²/2 (seed 7145); and β is not loose."""
    rng = np.random.default_rng(7145)
    E = (rng.standard_t(3, (4000, 40)) * 0.3).astype(F32)
    Q = (rng.standard_t(3, (300, 40)) * 5).astype(F32)
    idx = index(E)
    rows = idx._avx2_rows(1)
    assert rows is not None
    Qt = torch.from_numpy(Q)
    qi = torch.arange(300).repeat_interleave(rows.blocks)
    blocks = torch.arange(rows.blocks).repeat(300)
    S = A.block_scores(rows, Qt, qi, blocks).view(300, -1)[:, : idx.V].double()
    beta = A.query_bounds(rows, Qt)
    t = Qt.double() @ idx.E.double().T - idx.sq64 / 2
    err = (t - S).abs() / beta[:, None]
    assert float(err.max()) <= 1.0
    assert float(err.max()) > 1e-3  # β is a worst case of d + 1 roundings; not orders of magnitude above


@needs_kernel
def test_avx2_lists_same_for_every_thread_split(noisy_case: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each query's list is kept alone: 1, 2 or 3 threads, on OpenMP's or on Python's, give the same candidates."""
    E, Q = noisy_case
    rows = index(E)._avx2_rows(2)
    assert rows is not None
    Qt = torch.from_numpy(Q)
    one = A.avx2_candidates(rows, Qt, 2, 1)
    for threads in (2, 3):
        got = A.avx2_candidates(rows, Qt, 2, threads)
        assert all(torch.equal(x, y) for x, y in zip(one, got, strict=True))
    monkeypatch.setattr(A._lib(), "avx2_filter_openmp", lambda: 0)  # a build without OpenMP: Python threads
    got = A.avx2_candidates(rows, Qt, 2, 2)
    assert all(torch.equal(x, y) for x, y in zip(one, got, strict=True))


@needs_kernel
def test_mutation_filter_without_margin_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation check: with β = 0 (the fp32 score taken as exact) the filter loses true nearest rows on the near
    ties of :func:`test_avx2_near_ties_equal_exact_arithmetic` (on a larger d, where the fp32 sums err), so
    that test would fail; with the real β it loses none."""
    rng = np.random.default_rng(7146)
    E = (rng.standard_normal((2000, 96)) * 3).astype(F32)
    a, b = rng.integers(0, 2000, 300), rng.integers(0, 2000, 300)
    mid = ((E[a].astype(np.float64) + E[b]) / 2).astype(F32)
    Q = np.concatenate([mid, np.nextafter(mid, F32(np.inf)), np.nextafter(mid, F32(-np.inf))])
    expected = brute64(Q, E)[:, 0]
    assert np.array_equal(search(E, Q, 1)[:, 0], expected)
    monkeypatch.setattr(A, "fused_filter_bound", lambda *a, **kw: torch.zeros(a[0].shape, dtype=torch.float64))
    try:
        wrong = int((search(E, Q, 1)[:, 0] != expected).sum())
    except AssertionError as err:  # a query left with no candidate at all
        assert "fewer candidates than k" in str(err)
        wrong = -1
    assert wrong != 0


@needs_kernel
@pytest.mark.parametrize("k", [1, 2])
def test_avx2_exclude_equals_brute_force(noisy_case: Any, k: int) -> None:
    """Each query's own row excluded: brute force's answer without that row, also for rows in the padded last
    block and for duplicates of the excluded row."""
    E, Q = noisy_case
    V = len(E)
    rng = np.random.default_rng(7147)
    ex = rng.integers(0, V, len(Q))
    ex[:50] = np.arange(V - 50, V)
    ex[50:90] = np.arange(100, 140)  # rows with exact duplicates at 1,960 … 1,999
    Qx = Q.copy()
    Qx[:90] = E[ex[:90]]  # queries on the excluded row itself: the row must not come back
    got = index(E).search(torch.from_numpy(Qx), k, exclude=torch.from_numpy(ex)).numpy()
    D = ((Qx.astype(np.float64)[:, None, :] - E.astype(np.float64)[None]) ** 2).sum(-1)
    D[np.arange(len(Qx)), ex] = np.inf
    assert np.array_equal(got, np.argsort(D, axis=1, kind="stable")[:, :k])


@needs_kernel
def test_avx2_cluster_overflows_the_list_and_refilters() -> None:
    """1,000 identical rows ahead of the others: each query's list outgrows its room, the torch fp32 filter takes
    those queries, and the answer is still brute force's (the lowest of the identical positions)."""
    rng = np.random.default_rng(7148)
    d = 32
    base = rng.standard_normal(d)
    E = np.concatenate([np.repeat(base[None], 1000, 0), rng.standard_normal((1000, d))]).astype(F32)
    Q = (base + 1e-2 * rng.standard_normal((50, d))).astype(F32)
    rows = index(E)._avx2_rows(1)
    assert rows is not None
    _, _, dropped = A.avx2_candidates(rows, torch.from_numpy(Q), 1)
    assert dropped.numel() == 50
    assert np.array_equal(search(E, Q, 1)[:, 0], brute64(Q, E)[:, 0])
    assert search(E, Q, 1)[:, 0].tolist() == [0] * 50


@needs_kernel
def test_seeded_outputs_same_as_the_torch_fp32_filter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Static vectors, every mechanism: the seeded outputs with the AVX2 kernel (``auto``) equal those with the
    torch fp32 filter."""
    model, texts = static_fixture(tmp_path)
    monkeypatch.setenv("HF_TEXTDP_SEARCH_FILTER", "auto")
    fast = seeded_outputs(model, texts)
    monkeypatch.setenv("HF_TEXTDP_SEARCH_FILTER", "fp32")
    assert seeded_outputs(model, texts) == fast
    assert len(fast) > 5
