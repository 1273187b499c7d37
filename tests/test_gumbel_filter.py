"""The filtered dense sampler and the k-NN rank step return the reference outputs (spec §6.4, §7.4).

``gumbel_max_rows`` must give, row by row, exactly ``gumbel_max_dense``'s columns and leave every
generator in the same state; ``rank_select_knn`` must give ``rank_select``'s candidates.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch

import hf_textdp.mechanisms.gumbel_filter as gf
from hf_textdp.mechanisms.gumbel_filter import group_rows, gumbel_max_rows, sampler_groups
from hf_textdp.mechanisms.tem import Tem, gumbel_max_dense
from hf_textdp.mt19937 import mirror_available
from hf_textdp.postprocess import rank_select, rank_select_knn
from hf_textdp.search import ExactIndex, _bf16_model_ok


pytestmark = pytest.mark.skipif(not _bf16_model_ok(), reason="no bf16 product with the model of the filter bound")


@pytest.fixture(params=["compiled", "torch"])
def scan(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Both scans of the filter: fused compiled kernels (numba) and torch ops; same outputs required."""
    if request.param == "torch":
        monkeypatch.setattr(gf, "mirror_available", lambda: False)
    elif not mirror_available():
        pytest.skip("numba is not installed")
    ran: list[str] = []
    for name in ("_scan_compiled", "_scan_torch"):
        orig = getattr(gf, name)

        def spy(*args: object, _orig: object = orig, _name: str = name) -> object:
            ran.append(_name)
            return _orig(*args)  # type: ignore[operator]

        monkeypatch.setattr(gf, name, spy)
    yield request.param
    assert ran and set(ran) == {f"_scan_{request.param}"}, ran


def _matrix(kind: str, V: int, d: int, g: torch.Generator) -> torch.Tensor:
    if kind == "gauss":
        return torch.randn(V, d, generator=g) / math.sqrt(d)
    if kind == "ties":  # small integers: many exactly equal distances, and duplicate rows
        E = torch.randint(-2, 3, (V, d), generator=g).float()
        E[V // 2 :: 7] = E[1]
        return E
    # "far": large norms, so the fp32 error bound is wide and the exact fallback runs
    return 300.0 + torch.randint(0, 4, (V, d), generator=g).float() * 0.5


def _compare(E: torch.Tensor, scale: float, gamma: float, chunk: int, sizes: list[int], seed: int) -> None:
    index = ExactIndex(E, filter="fp32")
    g = torch.Generator().manual_seed(seed)
    xs = [E[torch.randint(0, E.shape[0], (n,), generator=g)] for n in sizes]
    ref_g = [torch.Generator().manual_seed(seed * 100 + i) for i in range(len(sizes))]
    new_g = [torch.Generator().manual_seed(seed * 100 + i) for i in range(len(sizes))]
    ref = [
        gumbel_max_dense(x, index.n32, index.Em2T, scale=scale, gamma=gamma, chunk_size=chunk, g=gg)
        for x, gg in zip(xs, ref_g, strict=True)
    ]
    got = gumbel_max_rows(xs, new_g, index, index.n32, index.Em2T, scale=scale, gamma=gamma, chunk_size=chunk)
    for a, b, g1, g2 in zip(ref, got, ref_g, new_g, strict=True):
        assert torch.equal(a, b)
        assert torch.equal(g1.get_state(), g2.get_state())  # the same uniforms were drawn


@pytest.mark.parametrize("kind", ["gauss", "ties", "far"])
@pytest.mark.parametrize(
    ("scale", "gamma", "chunk"),
    [(5.0, math.inf, 4096), (0.5, math.inf, 97), (20.0, 0.4, 300), (1e4, math.inf, 1000), (3.0, 0.0, 512)],
)
def test_filtered_sampler_equals_reference(kind: str, scale: float, gamma: float, chunk: int, scan: str) -> None:
    g = torch.Generator().manual_seed(7)
    E = _matrix(kind, 1500, 12, g)
    _compare(E, scale, gamma, chunk, [5, 1, 17, 0, 3], seed=3)


def test_exact_fallback_runs_and_agrees(monkeypatch: pytest.MonkeyPatch, scan: str) -> None:
    calls = []
    orig = gf._exact_fallback

    def spy(*args: object, **kwargs: object) -> None:
        calls.append(1)
        orig(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(gf, "_exact_fallback", spy)
    E = _matrix("far", 800, 8, torch.Generator().manual_seed(1))
    _compare(E, 2.0, math.inf, 256, [20, 20], seed=5)
    assert calls, "the test matrix should make some intervals overlap"


def test_rows_do_not_depend_on_their_group(scan: str) -> None:
    E = _matrix("gauss", 2000, 16, torch.Generator().manual_seed(2))
    index = ExactIndex(E)
    xs = [E[:9], E[100:103], E[500:530]]
    together = gumbel_max_rows(
        xs, [torch.Generator().manual_seed(i) for i in range(3)], index, index.n32, index.Em2T,
        scale=4.0, gamma=math.inf, chunk_size=512,
    )  # fmt: skip
    for i, x in enumerate(xs):
        alone = gumbel_max_rows(
            [x], [torch.Generator().manual_seed(i)], index, index.n32, index.Em2T,
            scale=4.0, gamma=math.inf, chunk_size=512,
        )[0]  # fmt: skip
        assert torch.equal(alone, together[i])


@pytest.mark.parametrize("scale", [5.0, 40.0])
def test_many_tokens_and_small_buffers(monkeypatch: pytest.MonkeyPatch, scan: str, scale: float) -> None:
    """Hundreds of tokens per row, candidate buffers forced to grow mid-chunk, odd word offsets."""
    monkeypatch.setattr(gf, "CAP_PER_TOKEN", 0)
    E = _matrix("gauss", 3000, 24, torch.Generator().manual_seed(12))
    index = ExactIndex(E, filter="fp32")
    xs = [E[torch.randint(0, 3000, (n,), generator=torch.Generator().manual_seed(n))] for n in (150, 90)]
    ref_g = [torch.Generator().manual_seed(40 + i) for i in range(2)]
    new_g = [torch.Generator().manual_seed(40 + i) for i in range(2)]
    for g in (ref_g[1], new_g[1]):
        torch.randint(0, 5, (3,), generator=g)  # 3 words: the row's pairs start at an odd word
    ref = [
        gumbel_max_dense(x, index.n32, index.Em2T, scale=scale, gamma=math.inf, chunk_size=700, g=g)
        for x, g in zip(xs, ref_g, strict=True)
    ]
    got = gumbel_max_rows(xs, new_g, index, index.n32, index.Em2T, scale=scale, gamma=math.inf, chunk_size=700)
    for a, b, g1, g2 in zip(ref, got, ref_g, new_g, strict=True):
        assert torch.equal(a, b)
        assert torch.equal(g1.get_state(), g2.get_state())


def test_sampler_groups_spread_small_batches() -> None:
    assert [len(g) for g in sampler_groups([1] * 800, 256, threads=2)] == [100] * 8
    assert [len(g) for g in sampler_groups([25] * 1000, 256, threads=2)][:3] == [10, 10, 10]  # capped at 256
    assert sampler_groups([1] * 10, 256, threads=2) == [list(range(10))]  # never below 32 tokens
    for sizes in ([3, 0, 500, 2, 2], [1] * 77, []):
        groups = sampler_groups(sizes, 256, threads=4)
        assert sum(groups, []) == list(range(len(sizes)))


def test_group_rows() -> None:
    assert group_rows([3, 4, 0, 9, 2], 8) == [[0, 1, 2], [3], [4]]
    assert group_rows([], 8) == []
    assert sum(group_rows([1] * 1000, 256), []) == list(range(1000))


def test_tem_sample_rows_equals_sample(scan: str) -> None:
    from tests.utils import synthetic_space

    space = synthetic_space(_matrix("gauss", 600, 8, torch.Generator().manual_seed(4)).numpy())
    mech = Tem(epsilon=8.0, chunk_size=128)
    parts = [torch.tensor([1, 2, 3]), torch.tensor([5]), torch.tensor([7, 7, 100, 599])]
    rows = mech.sample_rows(space, parts, [torch.Generator().manual_seed(i) for i in range(3)])
    index = space.index
    for i, p in enumerate(parts):
        assert torch.equal(rows[i], mech.sample(space, p, torch.Generator().manual_seed(i)))
        ref = gumbel_max_dense(
            space.E[p], index.n32, index.Em2T, scale=4.0, gamma=mech.gamma_for(space.V), chunk_size=128,
            g=torch.Generator().manual_seed(i),
        )  # fmt: skip
        assert torch.equal(rows[i], ref)


# --------------------------------------------------------------------------- §7.4 rank via k-NN
@pytest.mark.parametrize("kind", ["gauss", "ties"])
def test_rank_knn_equals_full_row(kind: str) -> None:
    E = _matrix(kind, 400, 6, torch.Generator().manual_seed(9))
    index = ExactIndex(E)
    g = torch.Generator().manual_seed(0)
    pivots = torch.randint(0, 400, (300,), generator=g)
    ranks = torch.randint(0, 400, (300,), generator=g)
    ranks[:150] = torch.randint(0, 20, (150,), generator=g)
    want = rank_select(E, pivots, ranks)
    assert torch.equal(rank_select_knn(index, pivots, ranks, max_rank=64), want)
    assert torch.equal(rank_select_knn(index, pivots, ranks, max_rank=399), want)


def test_rank_knn_r6_known_order() -> None:
    R6 = torch.tensor([[0, 0], [1, 0], [0, 1], [-1, 0], [2, 0], [0, 0]], dtype=torch.float32)
    index = ExactIndex(R6)
    orders = {0: [0, 5, 1, 2, 3, 4], 5: [5, 0, 1, 2, 3, 4], 4: [4, 1, 0, 5, 2, 3]}
    for pivot, order in orders.items():
        got = rank_select_knn(index, torch.full((6,), pivot), torch.arange(6))
        assert got.tolist() == order


def test_scan_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TEXTDP_SAMPLER_SCAN", "torch")
    assert not gf._compiled_scan()
    monkeypatch.setenv("HF_TEXTDP_SAMPLER_SCAN", "auto")
    assert gf._compiled_scan() == mirror_available()
