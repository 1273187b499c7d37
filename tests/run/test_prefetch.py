"""The streaming run's prefetch (``hf_textdp/run/prefetch.py``): items in order, errors where they were raised,
and a producer that stops with its consumer."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from hf_textdp.run.prefetch import ahead


def test_items_in_order_and_computed_ahead() -> None:
    """Every item, in order; while the consumer holds item i, the producer has already made item i + 1."""
    made: list[int] = []

    def items() -> Iterator[int]:
        for i in range(20):
            made.append(i)
            yield i

    got = []
    for i in ahead(items()):
        if i == 3:
            deadline = time.monotonic() + 5
            while len(made) < 5 and time.monotonic() < deadline:  # item 4 made, and one queued ahead of it
                time.sleep(0.01)
            assert len(made) >= 5
        got.append(i)
    assert got == list(range(20))


def test_an_error_reaches_the_consumer_at_its_item() -> None:
    def items() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("shard 3 is bad")

    got = []
    with pytest.raises(ValueError, match="shard 3 is bad"):
        for i in ahead(items()):
            got.append(i)
    assert got == [1, 2]


def test_the_producer_stops_when_the_consumer_stops() -> None:
    """The consumer leaves after two items: the producer ends (no thread left running) and makes at most the items
    it had begun."""
    made: list[int] = []

    def items() -> Iterator[int]:
        for i in range(1000):
            made.append(i)
            yield i

    gen = ahead(items(), name="prefetch-test")
    assert [next(gen), next(gen)] == [0, 1]
    gen.close()
    assert len(made) <= 4
    assert not any(t.name == "prefetch-test" for t in threading.enumerate())
