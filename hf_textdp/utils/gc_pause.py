"""Python's cyclic garbage collector paused for the length of a block."""

from __future__ import annotations

import atexit
import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager


__all__ = ["gc_frozen_imports", "gc_paused"]


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


@contextmanager
def gc_frozen_imports() -> Iterator[None]:
    """Import a command's libraries without cyclic collections, then freeze the objects they made.

    torch, datasets and transformers leave about 250,000 long-lived objects (modules, classes, functions);
    the collections their import's allocations start walk them again and again (0.3–0.5 s of a 1-row
    ``hf-textdp privatize`` on 2 cores, and 0.4 s more in the run after them, when the collector catches up).
    ``gc.freeze`` moves them to the permanent generation, which later collections skip; the collector then
    runs as before.
    """
    with gc_paused():
        yield
    if gc.get_freeze_count() == 0:  # once per process: a later freeze would also keep any cyclic garbage of the
        gc.freeze()  # commands run in between (a test session calling main() again and again)
        atexit.register(_thaw_for_nanobind)


def _thaw_for_nanobind() -> None:
    """At exit, move the frozen objects back where the interpreter's last collection frees them, when Triton was
    imported (transformers and the GPU kernels import it).

    Triton's bindings are nanobind modules, and nanobind reports every object of theirs still alive when the
    interpreter finalizes ("nanobind: leaked 4 instances / 64 types / 514 functions", about 30 lines on stderr
    after every ``evaluate``). Nothing leaks: Triton's objects sit in reference cycles that ``gc.freeze`` put
    in the permanent generation, which no collection visits, the last one included. Thawing costs one full
    collection at exit (about 0.13 s after torch, transformers and Triton), so it is done only where Triton's
    bindings are loaded.
    """
    if "triton._C.libtriton" in sys.modules:
        gc.unfreeze()
