"""The k-NN route of ``rank`` (postprocess.md §4 step 3) and the exact search for k > 1 (space.md §5).

* :meth:`ExactIndex.search` with k up to 256 equals the exact (Fraction) order on noisy madlib queries
  and on rows of E excluding themselves, with duplicate rows and constructed near ties, for every
  filter, chunk size and query block.
* :func:`rank_select_knn` equals the exact rank order from each pivot (Fraction arithmetic), with the
  neighbour cache cold and warm, whatever the batch; the cache stays O(V) and never changes an answer.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import torch

from hf_textdp.mechanisms.madlib import Madlib
from hf_textdp.postprocess.select import (
    _KNN_CACHE,
    KNN_CACHE_WIDTH,
    KNN_MIN_K,
    _neighbour_cache,
    clear_neighbour_caches,
    rank_select,
    rank_select_knn,
)
from hf_textdp.search import BF16_MAX_K, ExactIndex, FilterName
from hf_textdp.search.bf16 import _bf16_model_ok


_ORDERS: dict[tuple[bytes, bytes, int | None], list[int]] = {}


def _exact_order(E: np.ndarray, q: np.ndarray, exclude: int | None = None) -> list[int]:
    """Every position by (exact squared distance to q, position), Fraction arithmetic on near ties."""
    key = (E.tobytes(), q.tobytes(), exclude)
    if key not in _ORDERS:
        _ORDERS[key] = _exact_order_uncached(E, q, exclude)
    return _ORDERS[key]


def _exact_order_uncached(E: np.ndarray, q: np.ndarray, exclude: int | None) -> list[int]:
    D64 = ((E.astype(np.float64) - q.astype(np.float64)) ** 2).sum(1)
    order = np.lexsort((np.arange(len(E)), D64))
    keyed = []
    for i in order.tolist():
        if i == exclude:
            continue
        keyed.append((float(D64[i]), i))
    # resolve runs whose float64 values are within 1e-9 relative by exact arithmetic
    out: list[int] = []
    j = 0
    while j < len(keyed):
        run = [keyed[j]]
        while j + len(run) < len(keyed) and keyed[j + len(run)][0] <= run[-1][0] * (1 + 1e-9) + 1e-300:
            run.append(keyed[j + len(run)])
        if len(run) > 1:
            exact = sorted(
                (sum((Fraction(float(a)) - Fraction(float(b))) ** 2 for a, b in zip(q, E[i], strict=True)), i)
                for _, i in run
            )
            out += [i for _, i in exact]
        else:
            out.append(run[0][1])
        j += len(run)
    return out


@pytest.fixture(scope="module")
def tie_matrix() -> np.ndarray:
    """V = 700, d = 24, N(0, 1/d) fp32 (seed 7410): 30 exact duplicates (one triple), rows at 1 ulp of
    another row, and a shell of rows at equal float64 distance from row 0 (permuted coordinates)."""
    rng = np.random.default_rng(7410)
    V, d = 700, 24
    E = (rng.standard_normal((V, d)) / math.sqrt(d)).astype(np.float32)
    E[670:700] = E[10:40]  # duplicates of rows 10..39
    E[41] = E[10]  # row 10 has two copies
    E[50:60] = E[60:70]
    E[50:60, 0] = np.nextafter(E[50:60, 0], np.float32(np.inf))  # 1 ulp away from rows 60..69
    base = E[0].copy()
    for j in range(8):  # rows 100..107: the same offset from row 0 in permuted coordinates
        off = np.zeros(d, dtype=np.float32)
        off[j] = 0.25
        off[(j + 1) % d] = -0.125
        E[100 + j] = base + off
    return E


@pytest.fixture(scope="module")
def noisy_queries(tie_matrix: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(7411)
    Et = torch.from_numpy(tie_matrix)
    out = []
    for i, eps in enumerate((2.0, 20.0, 200.0, 5000.0)):
        w = torch.from_numpy(rng.integers(0, len(tie_matrix), 40))
        out.append(Madlib(epsilon=eps).perturb(Et[w], torch.Generator().manual_seed(7411 + i)))
    return torch.cat(out).numpy()


FILTERS: list[FilterName] = ["auto", "fp32", "bf16"]


def _skip_bf16(filt: FilterName) -> None:
    if filt == "bf16" and not _bf16_model_ok():
        pytest.skip("no exact bf16 matrix product on this build")


@pytest.mark.parametrize("filt", FILTERS)
@pytest.mark.parametrize("k", [3, 8, 16, 64, 256])
def test_search_k_equals_exact_order_noisy(tie_matrix: Any, noisy_queries: Any, filt: FilterName, k: int) -> None:
    """160 noisy madlib queries, k up to 256: the exact (distance, position) order."""
    _skip_bf16(filt)
    E, Q = tie_matrix, noisy_queries
    got = ExactIndex(torch.from_numpy(E), filter=filt).search(torch.from_numpy(Q), k).tolist()
    for b in range(len(Q)):
        assert got[b] == _exact_order(E, Q[b])[:k], f"query {b}"


@pytest.mark.parametrize("filt", FILTERS)
@pytest.mark.parametrize(("k", "chunk", "query_block"), [(16, None, None), (64, 64, 7), (255, 192, 33)])
def test_search_k_rows_excluding_themselves(
    tie_matrix: Any, filt: FilterName, k: int, chunk: int | None, query_block: int | None
) -> None:
    """The rank queries: rows of E (duplicates, 1-ulp neighbours, equidistant shells) excluding
    themselves, for several chunk sizes and query blocks."""
    _skip_bf16(filt)
    E = tie_matrix
    p = torch.tensor([0, 10, 41, 670, 50, 60, 100, 3, 699, 345] + list(range(200, 700, 25)))
    idx = ExactIndex(torch.from_numpy(E), filter=filt)
    got = idx.search(idx.E[p], k, exclude=p, chunk_size=chunk, query_block=query_block).tolist()
    for b, pv in enumerate(p.tolist()):
        assert got[b] == _exact_order(E, E[pv], exclude=pv)[:k], f"pivot {pv}"


def test_auto_filter_takes_fp32_above_bf16_max_k(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TEXTDP_SEARCH_FILTER", raising=False)
    idx = ExactIndex(torch.randn(1024, 256, generator=torch.Generator().manual_seed(7412)))
    assert idx._use_bf16(BF16_MAX_K + 1) is False
    assert idx._use_bf16(1) is idx._use_bf16(BF16_MAX_K)
    assert ExactIndex(torch.eye(4), filter="bf16")._use_bf16(64) is _bf16_model_ok()  # explicit: every k


def test_float64_distances_do_not_depend_on_the_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """The blocked float64 verification (its torch form; the compiled one sums in another order, within the
    same bound: tests/search/test_fused_filter.py) gives the unblocked values bit for bit."""
    import hf_textdp.search.verify as search

    monkeypatch.setenv("HF_TEXTDP_NATIVE", "0")
    g = torch.Generator().manual_seed(7413)
    idx = ExactIndex(torch.randn(300, 40, generator=g))
    Q = torch.randn(20, 40, generator=g)
    rows = torch.randint(0, 20, (1000,), generator=g)
    pos = torch.randint(0, 300, (1000,), generator=g)
    ref = ((Q.double()[rows] - idx.E.double()[pos]) ** 2).sum(1)
    for block in (1, 7, 256, 5000):
        monkeypatch.setattr(search, "_VERIFY_PAIRS", block)
        assert torch.equal(search.sqdist64(idx.E, Q, rows, pos), ref)


def _reference_ranks(E: np.ndarray, pivots: np.ndarray, ranks: np.ndarray) -> list[int]:
    orders: dict[int, list[int]] = {}
    out = []
    for p, r in zip(pivots.tolist(), ranks.tolist(), strict=True):
        if p not in orders:
            orders[p] = [p, *_exact_order(E, E[p], exclude=p)]
        out.append(orders[p][r])
    return out


@pytest.mark.parametrize("filt", ["auto", "fp32"])
def test_rank_select_knn_equals_exact_order_cold_and_warm(tie_matrix: Any, filt: FilterName) -> None:
    """Ranks 0..V−1 (both routes) from pivots with duplicates and near ties; then the same and new
    requests again, answered partly by the neighbour cache: the exact order every time."""
    E = tie_matrix
    V = len(E)
    idx = ExactIndex(torch.from_numpy(E), filter=filt)
    rng = np.random.default_rng(7414)
    pivots = np.concatenate([[0, 10, 41, 670, 50, 60, 100, 100, 100], rng.integers(0, V, 300)])
    ranks = np.concatenate([[1, 2, 3, 1, 1, 1, 1, 8, 300], rng.geometric(0.08, 300) - 1]).clip(0, V - 1)
    ranks[-20:] = rng.integers(0, V, 20)  # some beyond KNN_MAX_RANK
    ref = _reference_ranks(E, pivots, ranks)
    cold = rank_select_knn(idx, torch.from_numpy(pivots), torch.from_numpy(ranks))
    assert cold.tolist() == ref
    cache = _neighbour_cache(idx)
    assert cache.table.shape == (V, KNN_CACHE_WIDTH)  # O(V): never V × V
    assert int(cache.length.max()) <= KNN_CACHE_WIDTH
    assert int((cache.length > 0).sum()) > 0
    assert int(cache.length[cache.length > 0].min()) >= KNN_MIN_K
    # warm: repeated requests, larger ranks from cached pivots, and single-row batches
    ranks2 = np.minimum(ranks + 20, V - 1)
    for pv, rk in ((pivots, ranks), (pivots, ranks2)):
        ref2 = _reference_ranks(E, pv, rk)
        assert rank_select_knn(idx, torch.from_numpy(pv), torch.from_numpy(rk)).tolist() == ref2
    one = [
        int(rank_select_knn(idx, torch.tensor([p]), torch.tensor([r]))[0])
        for p, r in zip(pivots[:40], ranks2[:40], strict=True)
    ]
    assert one == _reference_ranks(E, pivots[:40], ranks2[:40])


def test_rank_select_knn_equals_rank_select_and_cache_is_per_index() -> None:
    """Away from float64 near ties both routes give the same candidates; a new index starts empty."""
    g = torch.Generator().manual_seed(7415)
    E = torch.randn(500, 16, generator=g)
    idx = ExactIndex(E)
    pivots = torch.randint(0, 500, (400,), generator=g)
    ranks = torch.randint(0, 300, (400,), generator=g)
    assert torch.equal(rank_select_knn(idx, pivots, ranks), rank_select(E, pivots, ranks))
    assert idx in _KNN_CACHE
    other = ExactIndex(E)
    assert other not in _KNN_CACHE
    assert torch.equal(rank_select_knn(other, pivots, ranks), rank_select(E, pivots, ranks))
    clear_neighbour_caches()  # what the bench does before each timed pass
    assert idx not in _KNN_CACHE and other not in _KNN_CACHE
    assert torch.equal(rank_select_knn(idx, pivots, ranks), rank_select(E, pivots, ranks))
    tiny = ExactIndex(torch.tensor([[0.0], [1.0]]))  # V = 2: rank 1 is the other row
    assert rank_select_knn(tiny, torch.tensor([0, 1, 1]), torch.tensor([1, 1, 0])).tolist() == [1, 0, 1]
