"""Matrix products whose rows do not depend on the batch around them."""

from __future__ import annotations

import torch


__all__ = ["COL_QUANTUM", "ROW_QUANTUM", "rowwise_matmul"]

#: every product of :func:`rowwise_matmul` has a multiple of this many rows and of :data:`COL_QUANTUM` columns
ROW_QUANTUM = 256
COL_QUANTUM = 16


def rowwise_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x @ w`` (``[n, k]`` by ``[k, m]``) as one product of a multiple of :data:`ROW_QUANTUM` rows and of
    :data:`COL_QUANTUM` columns (zeros pad both), so that each row of the result is the same number in any batch.

    A BLAS sums a product's edge rows and columns (past a multiple of its micro-tile) in another order than the rest:
    with MKL's float64 product a token's row came out 4·10⁻¹² apart in a batch of 1, 3 or 7 rows, and at m = 55 its
    rows also depended on where in the batch they sat. Padded, MKL gives every row the same numbers at any size and
    offset (checked on the CPU for k, m from 1 to 3,000 on 1 and 2 threads; tests/core/test_products.py).

    Example:

    >>> x, w = torch.randn(7, 384, dtype=torch.float64), torch.randn(384, 55, dtype=torch.float64)
    >>> torch.equal(rowwise_matmul(x[2:5], w), rowwise_matmul(x, w)[2:5])
    True
    """
    n, m = x.shape[0], w.shape[1]
    rows, cols = -n % ROW_QUANTUM, -m % COL_QUANTUM
    if cols:
        w = torch.cat([w, w.new_zeros((w.shape[0], cols))], dim=1)
    if rows:
        x = torch.cat([x, x.new_zeros((rows, x.shape[1]))])
    out = x @ w
    return out if not (rows or cols) else out[:n, :m]
