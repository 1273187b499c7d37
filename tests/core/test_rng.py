"""Keyed Philox4x32-10 streams (``hf_textdp.rng``, docs/mechanisms/randomness.md).

Known answers: Random123's three Philox4x32-10 test vectors, a pure-Python reference (a copy of
``docs/mechanisms/kat/philox.py``, never imported from shared) on random counters and keys, the 52-bit uniform
conversion at its extremes, and ``derive_row_seed`` (kept in test_madlib.py). Laws by KS at α = 1e-3
with fixed keys, and a mutation (a Gamma sampler of shape − 1) that the same KS rejects.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from scipy import stats

from hf_textdp import rng as rng_module
from hf_textdp.cpu.noise import native_uniforms
from hf_textdp.rng import Draw, Streams, _uniform52, as_streams, derive_row_seed, philox4x32, streams_for_rows
from hf_textdp.utils import native
from tests.utils import one_row, row_key


ALPHA = 1e-3
MASK = 0xFFFFFFFF
_REAL_KERNEL = rng_module.native_uniforms

# ----------------------------------------------------------- pure-Python reference (docs/mechanisms/kat/philox.py)
M0, M1 = 0xD2511F53, 0xCD9E8D57  # round multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85  # Weyl key increments


def ref_philox4x32_10(ctr: tuple[int, int, int, int], key: tuple[int, int]) -> tuple[int, int, int, int]:
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK, p1 & MASK, ((p0 >> 32) ^ c3 ^ k1) & MASK, p0 & MASK
        k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
    return c0, c1, c2, c3


def ref_uniform52(hi: int, lo: int) -> float:
    x = (hi << 32) | lo
    return ((x >> 12) + 0.5) * 2.0**-52


VECTORS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((MASK,) * 4, (MASK, MASK), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


def _t(*words: int, device: str = "cpu") -> list[torch.Tensor]:
    return [torch.tensor([w], dtype=torch.int64, device=device) for w in words]


# --------------------------------------------------------------------------- Philox known answers
@pytest.mark.parametrize(("ctr", "key", "want"), VECTORS, ids=["zeros", "ones", "pi"])
def test_random123_known_answers(ctr, key, want):
    assert ref_philox4x32_10(ctr, key) == want  # the reference copy itself
    got = philox4x32(*_t(*ctr), *_t(*key))
    assert tuple(int(w) for w in got) == want
    assert all(w.dtype == torch.int64 for w in got)


def test_random_counters_and_keys_match_the_reference():
    """500 random (counter, key) pairs, in one broadcast call, against the pure-Python reference."""
    rng = random.Random(20240)
    pairs = [
        (tuple(rng.getrandbits(32) for _ in range(4)), (rng.getrandbits(32), rng.getrandbits(32))) for _ in range(500)
    ]
    pairs += [((MASK, 0, MASK, 0), (0, MASK)), ((0, MASK, 0, MASK), (MASK, 0))]
    cols = [torch.tensor([p[0][i] for p in pairs], dtype=torch.int64) for i in range(4)]
    keys = [torch.tensor([p[1][i] for p in pairs], dtype=torch.int64) for i in range(2)]
    got = torch.stack(philox4x32(*cols, *keys), 1).tolist()
    want = [list(ref_philox4x32_10(c, k)) for c, k in pairs]
    assert got == want


def test_stream_words_follow_the_counter_layout():
    """Block j of draw kind D for the token at position p of key k is Philox((j, p, D, extra), (k_lo, k_hi))."""
    key = row_key(777, 3, "train", 2)
    s = one_row(key, 5)
    w = s.words(Draw.SAMPLER, 3, extra=7)
    for p in range(5):
        for j in range(3):
            want = ref_philox4x32_10((j, p, int(Draw.SAMPLER), 7), (key & MASK, key >> 32))
            assert tuple(int(w[i][p, j]) for i in range(4)) == want
    u = s.uniforms(Draw.NOISE, 5)
    for p in range(5):
        for j in range(5):
            c0, c1, c2, c3 = ref_philox4x32_10((j // 2, p, int(Draw.NOISE), 0), (key & MASK, key >> 32))
            hi, lo = (c0, c1) if j % 2 == 0 else (c2, c3)
            assert float(u[p, j]) == ref_uniform52(hi, lo)


# --------------------------------------------------------------------------- the compiled kernel
@pytest.fixture
def torch_form(monkeypatch: pytest.MonkeyPatch):
    """Run draws on the int64 tensor form, as where no C compiler is found."""
    monkeypatch.setattr(rng_module, "native_uniforms", lambda *args: None)


def _kernel_uniforms(s: Streams, draw: int, n: int, extra=0, start: int = 0) -> torch.Tensor:
    u = native_uniforms(s.k0, s.k1, s.position, draw, (n + 1) // 2, extra, start)
    assert u is not None, "the philox kernel did not build here (a C compiler is part of the test setup)"
    return u[:, :n]


def test_the_kernel_builds_and_caches(tmp_path, monkeypatch):
    """The kernel compiles into $HF_TEXTDP_CACHE/native once; HF_TEXTDP_NATIVE=0 turns it off."""
    monkeypatch.setenv("HF_TEXTDP_CACHE", str(tmp_path))
    monkeypatch.setattr(native, "_loaded", {})
    assert native.load_kernel("philox") is not None
    built = list((tmp_path / "native").glob("philox-*.so"))
    assert len(built) == 1
    monkeypatch.setattr(native, "_loaded", {})
    assert native.load_kernel("philox") is not None
    assert list((tmp_path / "native").glob("philox-*.so")) == built  # read back, not built again
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "0")
    assert native.load_kernel("philox") is None


@pytest.mark.parametrize(
    ("draw", "n", "extra", "start"),
    [
        (Draw.NOISE, 384, 0, 0),
        (Draw.RADIUS, 8, 0, 12),
        (Draw.SAMPLER, 3, "tensor", 0),
        (Draw.RANK, 1, 5, 0),
        (Draw.COIN, 7, "tensor", 2**31 + 5),
    ],
)
def test_kernel_equals_the_tensor_form(draw, n, extra, start):
    """Same bits from the C kernel and the int64 tensor form: random keys, positions, extras, odd counts,
    and enough tokens that the kernel splits the rows over threads."""
    g = torch.Generator().manual_seed(int(draw) * 1000 + n)
    keys = torch.randint(0, 2**62, (400,), generator=g).tolist()
    s = streams_for_rows(keys, torch.randint(1, 60, (400,), generator=g).tolist())
    ex = torch.randint(0, 2**32, (len(s),), generator=g) if extra == "tensor" else extra
    got = _kernel_uniforms(s, draw, n, ex, start)
    w = s.words(draw, (n + 1) // 2, ex, start)
    want = torch.stack([_uniform52(w[0], w[1]), _uniform52(w[2], w[3])], 2).reshape(len(s), -1)[:, :n]
    assert torch.equal(got, want)
    sub = torch.tensor([3, 0, 399, 17])  # addressable: a subset drawn alone equals its rows in the batch
    ex_sub = ex[sub] if isinstance(ex, torch.Tensor) else ex
    assert torch.equal(_kernel_uniforms(s.select(sub), draw, n, ex_sub, start), got[sub])


def test_kernel_follows_the_reference_at_the_extremes():
    """Keys and positions at their 32-bit extremes against the pure-Python reference."""
    k0 = torch.tensor([0, MASK, 0, MASK], dtype=torch.int64)
    k1 = torch.tensor([0, MASK, MASK, 0], dtype=torch.int64)
    pos = torch.tensor([0, MASK, 5, 2**31], dtype=torch.int64)
    u = _kernel_uniforms(Streams(k0, k1, pos), Draw.NOISE, 4, MASK)
    for i in range(4):
        for j in range(4):
            c = ref_philox4x32_10((j // 2, int(pos[i]), int(Draw.NOISE), MASK), (int(k0[i]), int(k1[i])))
            hi, lo = (c[0], c[1]) if j % 2 == 0 else (c[2], c[3])
            assert float(u[i, j]) == ref_uniform52(hi, lo)


@pytest.mark.usefixtures("torch_form")
def test_without_the_kernel_draws_are_the_same():
    """The fallback (no compiler): normals, Gamma and exponentials equal the kernel's, bit for bit."""
    s = streams_for_rows([row_key(5, 0), row_key(5, 1)], [30, 40])
    a = (s.normals(Draw.NOISE, 9), s.gamma(Draw.RADIUS, 384.0), s.exponentials(Draw.SAMPLER, 3, extra=2))
    rng_module.native_uniforms = _REAL_KERNEL
    try:
        b = (s.normals(Draw.NOISE, 9), s.gamma(Draw.RADIUS, 384.0), s.exponentials(Draw.SAMPLER, 3, extra=2))
    finally:
        rng_module.native_uniforms = lambda *args: None  # type: ignore[assignment]
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


# --------------------------------------------------------------------------- uniforms
def test_uniform52_extremes():
    lo = _uniform52(*_t(0, 0))
    hi = _uniform52(*_t(MASK, MASK))
    assert lo.dtype == torch.float64
    assert float(lo) == 2.0**-53 == ref_uniform52(0, 0)
    assert float(hi) == 1 - 2.0**-53 == ref_uniform52(MASK, MASK)
    assert 0.0 < float(lo) and float(hi) < 1.0


def test_uniforms_never_zero_or_one():
    u = one_row(row_key(1, 0), 20_000).uniforms(Draw.NOISE, 50)
    assert bool((u > 0).all()) and bool((u < 1).all())
    assert bool(torch.isfinite(one_row(row_key(1, 1), 20_000).exponentials(Draw.NOISE, 50)).all())
    assert bool(torch.isfinite(one_row(row_key(1, 2), 20_000).normals(Draw.NOISE, 50)).all())


def test_uniform_law_and_start():
    u = one_row(row_key(2, 0), 100_000).uniforms(Draw.RANK, 3)
    assert stats.kstest(u.flatten().numpy(), "uniform").pvalue > ALPHA
    s = one_row(row_key(2, 1), 4)
    full = s.uniforms(Draw.SAMPLER, 10)
    assert torch.equal(s.uniforms(Draw.SAMPLER, 6, start=2), full[:, 4:10])
    assert torch.equal(s.uniforms(Draw.SAMPLER, 7), full[:, :7])  # an odd count is a prefix


# --------------------------------------------------------------------------- derive_row_seed
def test_derive_row_seed_known_answers_and_docstring():
    assert derive_row_seed(0, 0, "", 0) == 2844346950793067545
    assert derive_row_seed(1, 0, "", 0) == 2603403363308340002
    assert derive_row_seed(42, 17, "train", 0) == 3880023052778407084
    assert 0 <= derive_row_seed(2**64 - 1, 2**63 - 1, "é", 2**63 - 1) < 2**63


def test_different_rows_splits_and_streams_differ():
    keys = {row_key(5, r, s, k) for r in range(3) for s in ("train", "test") for k in (0, 1)}
    assert len(keys) == 12
    draws = {tuple(one_row(k, 2).uniforms(Draw.NOISE, 4).flatten().tolist()) for k in keys}
    assert len(draws) == 12
    s = one_row(row_key(5, 0), 3)
    assert len({tuple(s.uniforms(d, 2).flatten().tolist()) for d in Draw}) == len(Draw)  # kinds never share blocks
    assert not torch.equal(s.uniforms(Draw.SAMPLER, 2, extra=0), s.uniforms(Draw.SAMPLER, 2, extra=1))


# --------------------------------------------------------------------------- addressability
def test_any_subset_drawn_alone_equals_the_batch():
    keys = [row_key(99, r) for r in range(6)]
    sizes = [3, 0, 7, 1, 40, 2]
    big = streams_for_rows(keys, sizes)
    assert len(big) == sum(sizes)
    assert big.position.tolist() == [p for n in sizes for p in range(n)]

    def everything(s: Streams) -> list[torch.Tensor]:
        return [
            s.uniforms(Draw.NOISE, 5),
            s.normals(Draw.NOISE, 5),
            s.exponentials(Draw.RANK, 3),
            s.gamma(Draw.RADIUS, 2.5),
            s.uniforms(Draw.SAMPLER, 4, extra=3),
        ]

    full = everything(big)
    # via select: an arbitrary subset, in an arbitrary order
    idx = torch.tensor([50, 0, 11, 3, 12, 49, 4])
    for a, b in zip(everything(big.select(idx)), full, strict=True):
        assert torch.equal(a, b[idx])
    mask = torch.zeros(len(big), dtype=torch.bool)
    mask[::3] = True
    for a, b in zip(everything(big.select(mask)), full, strict=True):
        assert torch.equal(a, b[mask])
    # via streams_for_rows of a sub-batch with the same keys: rows 2 and 4 alone, and row 3 alone
    starts = np.cumsum([0, *sizes])
    sub = streams_for_rows([keys[2], keys[4]], [sizes[2], sizes[4]])
    rows = torch.cat([torch.arange(starts[2], starts[3]), torch.arange(starts[4], starts[5])])
    for a, b in zip(everything(sub), full, strict=True):
        assert torch.equal(a, b[rows])
    alone = as_streams(keys[3], 1)
    for a, b in zip(everything(alone), full, strict=True):
        assert torch.equal(a, b[starts[3] : starts[4]])


def test_as_streams_sources():
    key = row_key(3, 1)
    assert torch.equal(as_streams(key, 4).k0, one_row(key, 4).k0)
    g1, g2 = torch.Generator().manual_seed(8), torch.Generator().manual_seed(8)
    a, b = as_streams(g1, 3), as_streams(g2, 3)
    assert torch.equal(a.k0, b.k0) and torch.equal(a.k1, b.k1)
    c = as_streams(g1, 3)  # the generator advanced: another key
    assert not (torch.equal(a.k0, c.k0) and torch.equal(a.k1, c.k1))
    with pytest.raises(Exception, match="streams hold"):
        as_streams(one_row(key, 2), 3)
    with pytest.raises(Exception, match="int key"):
        as_streams(-1, 3)


def test_large_batches_are_chunked_identically():
    """More blocks than one tensor op holds (2¹⁸): the chunked words equal the per-token ones."""
    s = streams_for_rows([row_key(4, 0), row_key(4, 1)], [300, 200])
    u = s.uniforms(Draw.SAMPLER, 1200)  # 500 × 600 blocks > 2¹⁸
    idx = torch.tensor([0, 299, 300, 499])
    assert torch.equal(s.select(idx).uniforms(Draw.SAMPLER, 1200), u[idx])


# --------------------------------------------------------------------------- laws (KS, α = 1e-3, fixed keys)
def test_normals_law():
    z = one_row(row_key(11, 0), 50_000).normals(Draw.NOISE, 4).numpy()
    assert z.dtype == np.float64
    assert stats.kstest(z.ravel(), "norm").pvalue > ALPHA / 2
    assert stats.kstest(z[:, 1], "norm").pvalue > ALPHA / 2  # the sine half of Box–Muller alone


def test_exponentials_law():
    e = one_row(row_key(12, 0), 100_000).exponentials(Draw.NOISE, 2).numpy()
    assert stats.kstest(e.ravel(), "expon").pvalue > ALPHA


GAMMA_SHAPES = [1.0, 2.0, 16.0, 384.0]


@pytest.mark.parametrize("shape", GAMMA_SHAPES, ids=[f"shape{s:g}" for s in GAMMA_SHAPES])
def test_gamma_law(shape):
    """Marsaglia–Tsang Gamma(shape, 1): KS, n = 50,000, key row_key(13, index)."""
    x = one_row(row_key(13, GAMMA_SHAPES.index(shape)), 50_000).gamma(Draw.RADIUS, shape).numpy()
    assert x.dtype == np.float64 and (x > 0).all()
    assert stats.kstest(x, stats.gamma(shape).cdf).pvalue > ALPHA


def _shape_minus_one(s: Streams, shape: float) -> torch.Tensor:
    """Mutation: the Gamma sampler run with shape − 1 (Gamma(1) for shape 2 via −log u)."""
    return s.gamma(Draw.RADIUS, shape - 1.0) if shape - 1.0 >= 1.0 else s.exponentials(Draw.RADIUS, 1)[:, 0]


@pytest.mark.parametrize("shape", [2.0, 16.0, 384.0], ids=["shape2", "shape16", "shape384"])
def test_gamma_law_rejects_shape_minus_one(shape):
    """The same KS (same key and n) rejects a Gamma sampler of shape − 1."""
    x = _shape_minus_one(one_row(row_key(13, GAMMA_SHAPES.index(shape)), 50_000), shape).numpy()
    assert stats.kstest(x, stats.gamma(shape).cdf).pvalue < ALPHA


def test_gamma_rejects_small_shape():
    with pytest.raises(Exception, match="shape"):
        one_row(row_key(1, 0), 2).gamma(Draw.RADIUS, 0.5)


# --------------------------------------------------------------------------- CPU and CUDA
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_draws_equal_cpu():
    """The same keys and counters give the same words on CUDA; uniforms (exact) equal, transforms to an ulp."""
    keys, sizes = [row_key(21, r) for r in range(4)], [5, 0, 300, 17]
    cpu, gpu = streams_for_rows(keys, sizes), streams_for_rows(keys, sizes, "cuda")
    for a, b in zip(cpu.words(Draw.NOISE, 9, extra=2), gpu.words(Draw.NOISE, 9, extra=2), strict=True):
        assert torch.equal(a, b.cpu())
    assert torch.equal(cpu.uniforms(Draw.SAMPLER, 33), gpu.uniforms(Draw.SAMPLER, 33).cpu())
    torch.testing.assert_close(cpu.normals(Draw.NOISE, 8), gpu.normals(Draw.NOISE, 8).cpu(), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(
        cpu.exponentials(Draw.RANK, 8), gpu.exponentials(Draw.RANK, 8).cpu(), rtol=1e-13, atol=0
    )
    torch.testing.assert_close(cpu.gamma(Draw.RADIUS, 16.0), gpu.gamma(Draw.RADIUS, 16.0).cpu(), rtol=1e-12, atol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(
    ("mechanism", "options"),
    [("madlib", {}), ("tem", {}), ("privemb", {"m": 8})],
    ids=["madlib", "tem", "privemb"],
)
def test_cuda_privatization_equals_cpu(tiny_bert, mechanism, options):
    """A few rows of a tiny model privatized on CPU and on CUDA with the same seed give the same tokens
    (outputs may differ only at a float64 near-tie, which these rows do not hit)."""
    from hf_textdp import Privatizer, PrivatizerConfig

    texts = ["the movie was good", "a terrible plot, but great music", "short"]
    outs = []
    for device in ("cpu", "cuda"):
        cfg = PrivatizerConfig(mechanism=mechanism, epsilon=20.0, model=tiny_bert, device=device, options=options)
        outs.append(Privatizer(cfg, seed=2**40 + 2024)({"text": texts}, [0, 1, 2])["input_ids"])
    assert outs[0] == outs[1]


def test_gamma_law_helper_is_exact_for_shape_one():
    """Sanity of the mutation helper: shape 1 is the exponential law (what the shape − 1 mutant draws for 2)."""
    x = _shape_minus_one(one_row(row_key(14, 0), 50_000), 2.0).numpy()
    assert stats.kstest(x, "expon").pvalue > ALPHA
    assert math.isfinite(float(x.max()))
