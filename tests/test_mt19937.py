"""torch's CPU stream reproduced outside torch (hf_textdp.mt19937): same numbers, same end state."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_textdp.mt19937 import TorchMT, kernels, mirror_available


pytestmark = pytest.mark.skipif(kernels() is None, reason="numba is not installed")


def _advance(g: torch.Generator, how: str) -> None:
    if how == "odd":  # one 32-bit word: later pairs straddle the words differently
        torch.randint(0, 5, (1,), generator=g)
    elif how == "float32":
        torch.rand(7, generator=g)
    elif how == "block":
        torch.rand(624, dtype=torch.float64, generator=g)


def test_mirror_is_available_here() -> None:
    assert mirror_available()


@pytest.mark.parametrize("how", ["fresh", "odd", "float32", "block"])
@pytest.mark.parametrize("n", [1, 2, 311, 312, 313, 623, 5000])
def test_fill_uniform_equals_torch(how: str, n: int) -> None:
    k = kernels()
    for seed in (0, 1, 2**63 - 1, 987654321):
        ref_g = torch.Generator().manual_seed(seed)
        new_g = torch.Generator().manual_seed(seed)
        _advance(ref_g, how)
        _advance(new_g, how)
        ref = [torch.empty(m, dtype=torch.float64).uniform_(0.0, 1.0, generator=ref_g).numpy() for m in (n, 3)]
        st = TorchMT([new_g])
        got = [np.empty(m, dtype=np.float64) for m in (n, 3)]
        for a in got:  # two calls in a row: the counters carry over
            k.fill_uniform(st.mt[0], st.pos[0], st.raw[0], a)
        st.store([new_g])
        for a, b in zip(ref, got, strict=True):
            assert np.array_equal(a, b)
        assert torch.equal(ref_g.get_state(), new_g.get_state())
        # and the generator goes on with torch's own next numbers
        a, b = (torch.rand(5, dtype=torch.float64, generator=x) for x in (ref_g, new_g))
        assert torch.equal(a, b)


def test_snapshot_restores_an_earlier_state() -> None:
    gens = [torch.Generator().manual_seed(s) for s in (4, 5)]
    before = [g.get_state() for g in gens]
    st = TorchMT(gens)
    snap = st.snapshot()
    out = np.empty(1000, dtype=np.float64)
    kernels().fill_uniform(st.mt[1], st.pos[1], st.raw[1], out)
    assert torch.equal(st.state_tensor(1, snap), before[1])
    assert torch.equal(st.state_tensor(0), before[0])  # row 0 did not draw
    assert not torch.equal(st.state_tensor(1), before[1])


def test_a_wrong_stream_is_caught() -> None:
    """Mutation check: a conversion that swaps the two words differs from torch at once."""
    g = torch.Generator().manual_seed(11)
    ref = torch.rand(4, dtype=torch.float64, generator=torch.Generator().manual_seed(11)).numpy()
    st = TorchMT([g])
    raw = np.empty(8, dtype=np.uint32)
    k = kernels()
    tmp = np.empty(4, dtype=np.float64)
    mt, pos, rw = st.mt[0].copy(), st.pos[0].copy(), st.raw[0].copy()
    k.fill_uniform(mt, pos, rw, tmp)
    assert np.array_equal(tmp, ref)
    # the same words with a and b swapped: what a mirror with the wrong word order would give
    words = rw[: 8 if pos[1] >= 8 else 0]
    if words.size:
        raw[:] = words
        swapped = (((raw[1::2].astype(np.uint64) & 0x1FFFFF) << 32) | raw[0::2]).astype(np.float64) * 2.0**-53
        assert not np.array_equal(swapped, ref)


def test_a_failing_compiler_falls_back_to_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    import hf_textdp.mt19937 as m

    class Broken:
        def __getattr__(self, name: str) -> object:
            def fail(*args: object) -> None:
                raise RuntimeError("cannot cache function: no locator available")

            return fail

    monkeypatch.setattr(m, "kernels", lambda: Broken())
    m.mirror_available.cache_clear()
    try:
        assert m.mirror_available() is False
    finally:
        monkeypatch.undo()
        m.mirror_available.cache_clear()
    assert m.mirror_available()
