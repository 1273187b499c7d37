"""How ``datasets`` starts its ``num_proc`` worker processes when the privatizer runs on a GPU."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


__all__ = ["spawned_workers"]


@contextmanager
def spawned_workers(device: str, num_proc: int | None) -> Iterator[None]:
    """On a CUDA ``device`` with several workers, ``Dataset.map``'s pool spawns them instead of forking.

    CUDA does not survive a fork: a worker forked from a parent that has used the GPU (the pipeline loads
    the model before it writes anything, so that a bad model fails first) cannot use it. Spawned workers
    start fresh and rebuild the privatizer from its pickled configuration, as forked ones do. The start
    method of ``multiprocess`` (the pool ``datasets`` uses) is restored afterwards. CPU runs keep the
    platform's default.
    """
    if not num_proc or num_proc < 2 or not device.startswith("cuda"):
        yield
        return
    import multiprocess

    prev = multiprocess.get_start_method(allow_none=True)
    multiprocess.set_start_method("spawn", force=True)
    try:
        yield
    finally:
        multiprocess.set_start_method(prev, force=True)
