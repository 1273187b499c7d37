"""torch's intra-op thread count for the length of a block."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


__all__ = ["torch_threads"]


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` intra-op threads (``None``: unchanged), then restore the count.

    Example:

    >>> with torch_threads(1):
    ...     torch.get_num_threads()
    1
    """
    prev = torch.get_num_threads()
    if n is None or n == prev:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(prev)
