"""Python's cyclic garbage collector paused for the length of a block."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the block without cyclic collections, then restore the collector as it was.

    A batch's tokenizing and decoding allocate millions of small lists and tuples and free them at the end;
    none forms a cycle, yet every 700 allocations start a collection that walks the young objects, and
    the older generations' walks grow with the batch (27 % of the host time of MR, docs/performance.md).
    Reference counting still frees everything as usual; cycles made meanwhile wait for the next collection.

    Example:

    >>> with gc_paused():
    ...     gc.isenabled()
    False
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
