"""The int8 filter of the exact search (``hf_textdp/cpu/int8_filter.py``, ``kernels/int8_filter_body.h``).

Every test runs on each kernel this CPU has: ``vnni`` (AVX-512 VNNI's VPDPBUSD) where the flags have it, and
``avx2`` (VPMADDUBSW/VPMADDWD) forced with ``HF_TEXTDP_CPU_ISA=avx2``, as an AVX2-only CPU runs it: exactness
against float64 brute force and Fraction arithmetic on near ties, ties to the lowest position, the bound of
:func:`~hf_textdp.cpu.int8_filter.int8_filter_bound` against float64 on every (query, row) pair (with rows and
queries at the ends of the int8 range, where an int16 pair sum could saturate), and a mutation check (the filter
without its quantisation margin must be caught).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hf_textdp.cpu import int8_filter as I8
from hf_textdp.cpu.features import cpu_flags
from hf_textdp.search import ExactIndex
from hf_textdp.utils.native import _compiler
from tests.search.test_search_fast import brute64, exact_knn, seeded_outputs, static_fixture
from tests.search.test_search_fast import noisy_case as noisy_case  # noqa: PLC0414 - the fixture, under its own name
from tests.utils import N_CASES


F32 = np.float32
KINDS = ["vnni", "avx2"]


@pytest.fixture(params=KINDS, autouse=True)
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each kernel in turn, where this CPU runs it (``avx2`` forced by the cpu_isa switch)."""
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "1")
    monkeypatch.delenv("HF_TEXTDP_SEARCH_FILTER", raising=False)
    monkeypatch.setenv("HF_TEXTDP_CPU_ISA", "avx2" if request.param == "avx2" else "native")
    if I8.kernel_kind() != request.param:
        pytest.skip(f"no {request.param} int8 filter kernel on this CPU")
    return str(request.param)


def test_kernels_build_where_the_cpu_has_them(kind: str) -> None:
    """Where the CPU has the flags and a C compiler is found, the kernel builds, so the tests below cannot skip
    silently because of a broken kernel source (the fixture only reaches here where it is this CPU's kind)."""
    flags = cpu_flags()
    if _compiler() is None:
        pytest.skip("no C compiler")
    if {"avx2", "fma"} <= flags:
        assert I8._load("avx2") is not None
    if "avx512_vnni" in flags:
        assert I8._load("vnni") is not None


def index(E: np.ndarray) -> ExactIndex:
    idx = ExactIndex(torch.from_numpy(E), filter="int8")
    assert idx._int8_rows(1) is not None  # the search below runs the kernel
    return idx


def search(E: np.ndarray, Q: np.ndarray, k: int, **kw: Any) -> np.ndarray:
    return index(E).search(torch.from_numpy(Q), k, **kw).numpy()


def rows_of(E: np.ndarray, kind: str) -> I8.Int8Rows:
    Et = torch.from_numpy(E)
    return I8.Int8Rows.build(Et, (Et.double() ** 2).sum(1), kind)


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("query_block", [None, 13])
def test_int8_equals_float64_brute_force(noisy_case: Any, k: int, query_block: int | None) -> None:
    """2,000 madlib queries at ε from 0.5 to 5,000 (with 40 duplicate rows: the lowest position wins)."""
    E, Q = noisy_case
    assert np.array_equal(search(E, Q, k, query_block=query_block), brute64(Q, E, k))


def test_int8_auto_takes_it_for_large_products(noisy_case: Any) -> None:
    """``filter="auto"`` takes the int8 filter once a product is large and the queries pay for packing the rows
    (not on a CPU with AMX's bf16 tiles), and gives the same answers."""
    E, Q = noisy_case
    big = np.tile(E, (3, 3))  # V·d ≥ 2¹⁸
    idx = ExactIndex(torch.from_numpy(big))
    assert idx._int8_rows(1, queries=1) is None  # one query does not pay for packing
    assert (idx._int8_rows(1) is not None) is ("amx_bf16" not in cpu_flags())
    Qb = np.tile(Q[:300], (1, 3))
    assert np.array_equal(idx.search(torch.from_numpy(Qb), 1).numpy(), brute64(Qb, big, 1))


def test_int8_ties_go_to_the_lowest_position() -> None:
    """Rows repeated at several positions, queries on them and between them: the lowest position first."""
    rng = np.random.default_rng(7241)
    base = rng.standard_normal((50, 24)).astype(F32)
    E = np.concatenate([base, base[::-1], base, rng.standard_normal((300, 24)).astype(F32)])
    Q = np.concatenate([base, base + F32(1e-3)]).astype(F32)
    got = search(E, Q, 3)
    assert np.array_equal(got, brute64(Q, E, 3))
    assert got[:50, 0].tolist() == list(range(50))
    assert got[:50, 1].tolist() == [99 - i for i in range(50)]


@pytest.mark.parametrize("k", [1, 2])
def test_int8_near_ties_equal_exact_arithmetic(k: int) -> None:
    """Queries on bisectors of row pairs, nudged by 0 or ±1 ulp, against Fraction arithmetic (seed 7242)."""
    rng = np.random.default_rng(7242)
    E = rng.integers(-64, 65, (600, 16)).astype(F32) / F32(16)
    a, b = rng.integers(0, 600, 60), rng.integers(0, 600, 60)
    mid = ((E[a].astype(np.float64) + E[b]) / 2).astype(F32)
    Q = np.concatenate([mid, np.nextafter(mid, F32(np.inf)), np.nextafter(mid, F32(-np.inf))])
    assert search(E, Q, k).tolist() == exact_knn(Q, E, k)


@pytest.mark.parametrize(("E", "q", "k", "expected"), [c[1:] for c in N_CASES], ids=[c[0] for c in N_CASES])
def test_int8_constructed_cases(E: np.ndarray, q: np.ndarray, k: int, expected: Any) -> None:
    """The known answers N1–N5, alone and inside 3,000 far rows (many blocks)."""
    assert search(E, q, k)[0].tolist() == expected
    far = np.random.default_rng(7243).standard_normal((3000, E.shape[1])).astype(F32) * F32(1e6)
    assert search(np.concatenate([E, far]), q, k)[0].tolist() == expected


@pytest.mark.parametrize("scale", [2.0**-60, 2.0**-20, 1.0, 2.0**20])
def test_int8_extreme_magnitudes(noisy_case: Any, scale: float) -> None:
    """Scaling E and Q by a power of two scales every distance exactly: the same answers (tiny scales reach the
    gradual underflow that the bound's absolute term covers)."""
    E, Q = noisy_case
    Es, Qs = (E * F32(scale)).astype(F32), (Q[:400] * F32(scale)).astype(F32)
    assert np.array_equal(search(Es, Qs, 1)[:, 0], brute64(Q[:400], E)[:, 0])


@pytest.mark.parametrize(("V", "d"), [(65, 7), (64, 5), (100, 1), (31, 384), (130, 6)])
def test_int8_odd_shapes_and_padding(V: int, d: int, kind: str) -> None:
    """V not a multiple of the 64-row block (padding rows score −∞ and never come back), d not a multiple of 4,
    batches not a multiple of the 4-query tile, zero rows and a zero query."""
    rng = np.random.default_rng(7244 + V + d)
    E = rng.standard_normal((V, d)).astype(F32)
    E[3] = 0.0
    Q = (E[rng.integers(0, V, 37)] + rng.standard_normal((37, d)).astype(F32)).astype(F32)
    Q[0] = 0.0
    for k in (1, 2, 3):
        assert np.array_equal(search(E, Q, k), brute64(Q, E, k))
    _, pos, dropped = I8.int8_candidates(rows_of(E, kind), torch.from_numpy(Q), 1)
    assert int(pos.max()) < V and dropped.numel() == 0


@pytest.mark.parametrize("case", ["heavy-tailed", "range-ends"])
def test_int8_bound_holds_on_every_pair(case: str, kind: str) -> None:
    """t_c = q·e_c − ‖e_c‖²/2 (float64) lies in [Lo_c − η, Up_c + η] for every (query, row) pair of 300 × 4,000
    heavy-tailed fp32 data (seed 7245), and of rows and queries whose every coordinate quantises to ±127 (±63 on
    AVX2) with aligned signs: the largest integer dots, where a saturated int16 pair sum would show; and the
    margin is not loose (the widest gap is more than a tenth of the interval's half-width)."""
    rng = np.random.default_rng(7245)
    if case == "heavy-tailed":
        E = (rng.standard_t(3, (4000, 40)) * 0.3).astype(F32)
        Q = (rng.standard_t(3, (300, 40)) * 5).astype(F32)
    else:
        signs = np.where(rng.random((4000, 40)) < 0.9, 1.0, -1.0)
        E = (signs * rng.uniform(0.999, 1.0, (4000, 40))).astype(F32)
        Q = (np.where(rng.random((300, 40)) < 0.95, 1.0, -1.0) * rng.uniform(0.999, 1.0, (300, 40))).astype(F32)
    rows = rows_of(E, kind)
    Qt = torch.from_numpy(Q)
    qi = torch.arange(300).repeat_interleave(rows.blocks)
    blocks = torch.arange(rows.blocks).repeat(300)
    up, lo, eta = I8.block_bounds(rows, Qt, qi, blocks)
    up, lo = up.view(300, -1)[:, :4000].double(), lo.view(300, -1)[:, :4000].double()
    t = Qt.double() @ torch.from_numpy(E).double().T - (torch.from_numpy(E).double() ** 2).sum(1) / 2
    assert bool((t <= up + eta[:, None]).all()) and bool((t >= lo - eta[:, None]).all())
    assert float(torch.minimum(up - t, t - lo).div((up - lo) / 2).min()) < 0.9  # the margin is used


def test_int8_lists_same_for_every_thread_split(noisy_case: Any, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each query's list is kept alone: 1, 2 or 3 threads, on OpenMP's or on Python's, give the same candidates."""
    E, Q = noisy_case
    rows = rows_of(E, kind)
    Qt = torch.from_numpy(Q)
    one = I8.int8_candidates(rows, Qt, 2, 1)
    for threads in (2, 3):
        got = I8.int8_candidates(rows, Qt, 2, threads)
        assert all(torch.equal(x, y) for x, y in zip(one, got, strict=True))
    monkeypatch.setattr(I8._load(kind), "int8_filter_openmp", lambda: 0)
    got = I8.int8_candidates(rows, Qt, 2, 2)
    assert all(torch.equal(x, y) for x, y in zip(one, got, strict=True))


def test_mutation_filter_without_quantisation_margin_is_caught(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation check: rows whose residual norms ρ_c and norms n_c are taken as 0 (the int8 score taken as exact)
    lose true nearest rows on near ties, so the brute-force tests would fail; with the real margin none is lost."""
    rng = np.random.default_rng(7246)
    E = (rng.standard_normal((2000, 96)) * 3).astype(F32)
    a, b = rng.integers(0, 2000, 300), rng.integers(0, 2000, 300)
    Q = ((E[a].astype(np.float64) + E[b]) / 2 + rng.standard_normal((300, 96)) * 0.3).astype(F32)
    expected = brute64(Q, E)[:, 0]
    assert np.array_equal(search(E, Q, 1)[:, 0], expected)
    build = I8.Int8Rows.build

    def no_margin(E: torch.Tensor, sq64: torch.Tensor, kind: str) -> I8.Int8Rows:
        r = build(E, sq64, kind)
        return dataclasses.replace(r, rho=torch.zeros_like(r.rho), nrm=torch.zeros_like(r.nrm))

    monkeypatch.setattr(I8.Int8Rows, "build", staticmethod(no_margin))
    try:
        wrong = int((search(E, Q, 1)[:, 0] != expected).sum())
    except AssertionError as err:  # a query left with no candidate at all
        assert "fewer candidates than k" in str(err)
        wrong = -1
    assert wrong != 0


@pytest.mark.parametrize("k", [1, 2])
def test_int8_exclude_equals_brute_force(noisy_case: Any, k: int) -> None:
    """Each query's own row excluded: brute force's answer without that row, also for rows in the padded last
    block and for duplicates of the excluded row."""
    E, Q = noisy_case
    V = len(E)
    rng = np.random.default_rng(7247)
    ex = rng.integers(0, V, len(Q))
    ex[:50] = np.arange(V - 50, V)
    ex[50:90] = np.arange(100, 140)
    Qx = Q.copy()
    Qx[:90] = E[ex[:90]]
    got = index(E).search(torch.from_numpy(Qx), k, exclude=torch.from_numpy(ex)).numpy()
    D = ((Qx.astype(np.float64)[:, None, :] - E.astype(np.float64)[None]) ** 2).sum(-1)
    D[np.arange(len(Qx)), ex] = np.inf
    assert np.array_equal(got, np.argsort(D, axis=1, kind="stable")[:, :k])


def test_int8_cluster_overflows_the_list_and_refilters(kind: str) -> None:
    """1,000 identical rows ahead of the others: each query's list outgrows its room, another filter takes those
    queries, and the answer is still brute force's (the lowest of the identical positions)."""
    rng = np.random.default_rng(7248)
    d = 32
    base = rng.standard_normal(d)
    E = np.concatenate([np.repeat(base[None], 1000, 0), rng.standard_normal((1000, d))]).astype(F32)
    Q = (base + 1e-2 * rng.standard_normal((50, d))).astype(F32)
    _, _, dropped = I8.int8_candidates(rows_of(E, kind), torch.from_numpy(Q), 1)
    assert dropped.numel() == 50
    assert search(E, Q, 1)[:, 0].tolist() == [0] * 50


def test_seeded_outputs_same_as_the_torch_fp32_filter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Static vectors, every mechanism: the seeded outputs with the int8 filter equal those with the torch fp32
    filter."""
    model, texts = static_fixture(tmp_path)
    monkeypatch.setenv("HF_TEXTDP_SEARCH_FILTER", "int8")
    fast = seeded_outputs(model, texts)
    monkeypatch.setenv("HF_TEXTDP_SEARCH_FILTER", "fp32")
    assert seeded_outputs(model, texts) == fast
    assert len(fast) > 5
