"""Compute an iterator's next items in a thread while the caller works on the current one (issue 58 item 3).

A streaming run privatizes a batch (tokenizing, noise and search, decoding) and then writes it (an Arrow table, a
shard file, the progress file); the kernels and the tokenizer release the GIL, so with :func:`ahead` the next
batch is privatized while this one is written. The items come in their order, exactly as from the iterator
itself; an exception raised by the iterator reaches the caller at the item where it was raised.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar


__all__ = ["ahead"]

T = TypeVar("T")

_ITEM, _END, _ERROR = 0, 1, 2
#: seconds between the producer's checks that the consumer still wants items
_POLL_S = 0.1


def ahead(items: Iterable[T], depth: int = 1, *, name: str = "hf_textdp-prefetch") -> Iterator[T]:
    """The items of ``items``, in order, produced by a thread up to ``depth`` items ahead of the caller.

    When the caller stops early (an exception, ``close()``), the producer stops after the item it is computing,
    and the generator returns once the thread has ended, so nothing runs on after it.

    Example:

    >>> list(ahead(x * x for x in range(5)))
    [0, 1, 4, 9, 16]
    """
    box: queue.Queue[tuple[int, object]] = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()

    def put(entry: tuple[int, object]) -> bool:
        while not stop.is_set():
            try:
                box.put(entry, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((_ITEM, item)):
                    return
            put((_END, None))
        except BaseException as err:  # noqa: BLE001 - handed to the consumer, which re-raises it
            put((_ERROR, err))

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while True:
            kind, value = box.get()
            if kind == _ITEM:
                yield value  # type: ignore[misc]
            elif kind == _END:
                return
            else:
                raise value  # type: ignore[misc]
    finally:
        stop.set()
        thread.join()
