"""``utils.products.rowwise_matmul``: a row's product is the same number in any batch, at any size and offset."""

from __future__ import annotations

import pytest
import torch

from hf_textdp.utils import products
from hf_textdp.utils.products import rowwise_matmul


SHAPES = [(384, 384), (384, 55), (384, 7), (15, 55), (16, 16)]  # mahalanobis and JL at d = 384, privemb's m, tests'
SIZES, OFFSETS = (1, 3, 7, 13, 255, 257, 1000), (0, 1, 17, 999)


def _mismatches(k: int, m: int, threads: int) -> int:
    g = torch.Generator().manual_seed(1000 * k + m)
    w = torch.randn(k, m, generator=g, dtype=torch.float64)
    x = torch.randn(2100, k, generator=g, dtype=torch.float64) * 3.0
    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        whole = rowwise_matmul(x, w)
        return sum(not torch.equal(rowwise_matmul(x[o : o + n], w), whole[o : o + n]) for n in SIZES for o in OFFSETS)
    finally:
        torch.set_num_threads(prev)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("k", "m"), SHAPES)
def test_rows_do_not_depend_on_the_batch(k, m, threads):
    assert _mismatches(k, m, threads) == 0


def test_unpadded_products_do_depend_on_the_batch(monkeypatch):
    """The broken variant (no padding) is caught where the BLAS treats edge rows apart (MKL, the CPU wheels' BLAS)."""
    if "mkl" not in torch.__config__.show().lower():
        pytest.skip("the edge-row behaviour checked here is MKL's")
    monkeypatch.setattr(products, "ROW_QUANTUM", 1)
    monkeypatch.setattr(products, "COL_QUANTUM", 1)
    assert sum(_mismatches(k, m, 1) for k, m in SHAPES) > 0


def test_values_are_the_product():
    g = torch.Generator().manual_seed(7)
    x, w = torch.randn(5, 9, generator=g, dtype=torch.float64), torch.randn(9, 3, generator=g, dtype=torch.float64)
    got = rowwise_matmul(x, w)
    assert got.shape == (5, 3) and torch.allclose(got, x @ w, rtol=1e-14, atol=1e-14)
