"""The compiled noise kernel (``hf_textdp/cpu/noise.py``, ``kernels/philox.c``).

Its logarithm, cosine and sine are its own, so its normals are compared with the torch form's (torch's
float64 functions) and with extended-precision references to within a few units of 2⁻⁵³ of the pair's
radius, at the extremes of the uniforms too; madlib's noisy vectors with the torch form's (equal in fp32
but where an ulp of float64 crosses an fp32 rounding boundary); and a token's draws do not depend on the
batch or on the thread split. The law of its draws is tested where the rng and madlib tests test it
(tests/core/test_rng.py, tests/mechanisms/test_madlib.py), which run this kernel on the CPU.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_textdp.cpu import noise
from hf_textdp.mechanisms.madlib import add_metric_laplace, sample_metric_laplace
from hf_textdp.rng import Draw, Streams, derive_row_seed, streams_for_rows
from hf_textdp.utils.native import _compiler


needs_kernel = pytest.mark.skipif(_compiler() is None, reason="no C compiler here")
U = 2.0**-53


@pytest.fixture(autouse=True)
def kernel_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "1")


def streams(n_rows: int = 5, size: int = 37) -> Streams:
    return streams_for_rows([derive_row_seed(2**40 + 7, r) for r in range(n_rows)], [size] * n_rows)


def torch_form(s: Streams, draw: int, n: int, extra: int | torch.Tensor = 0) -> torch.Tensor:
    """The normals of the int64 tensor form and torch's float64 functions (the kernel off)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_TEXTDP_NATIVE", "0")
        return s.normals(draw, n, extra)


def reference(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Box–Muller in extended precision (x87 long double): (pairs [n, 2], radii [n])."""
    ul, vl = u.astype(np.longdouble), v.astype(np.longdouble)
    r = np.sqrt(-2 * np.log(ul))
    t = 2 * np.pi * vl
    return np.stack([r * np.cos(t), r * np.sin(t)], 1), r


@needs_kernel
def test_kernel_builds_and_runs_here() -> None:
    assert noise.noise_kernel_available()
    assert noise.native_normals(*streams_parts(streams()), int(Draw.NOISE), 3) is not None


def streams_parts(s: Streams) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return s.k0, s.k1, s.position


@needs_kernel
@pytest.mark.parametrize("n", [1, 2, 9, 384, 513])
def test_normals_match_the_torch_form(n: int) -> None:
    s = streams()
    extra = torch.arange(len(s)) % 3
    for draw, ex in ((Draw.NOISE, 0), (Draw.SAMPLER, extra)):
        a, b = s.normals(draw, n, ex), torch_form(s, draw, n, ex)
        assert a.shape == b.shape == (len(s), n)
        blocks = (n + 1) // 2
        u = s.uniforms(draw, 2 * blocks, ex)[:, 0::2]
        r = torch.sqrt(-2.0 * torch.log(u)).repeat_interleave(2, 1)[:, :n]
        # both within a few 2⁻⁵³ of the pair's radius of the true value: of each other within 16
        assert float(((a - b).abs() / r).max()) <= 16 * U
        assert float((a == b).double().mean()) > 0.2  # most values the same bits: the same uniforms, pairing, order


@needs_kernel
@pytest.mark.parametrize("n", [2, 30, 32, 34, 768, 1000])
def test_normals_are_box_muller_of_the_streams_uniforms(n: int) -> None:
    """The kernel's own Philox rounds (16 counters a vector where the CPU has AVX-512, one at a time for the
    rest) give the stream's uniforms bit for bit: its normals are exactly its Box–Muller of those uniforms."""
    s = streams(3, 11)
    for draw, ex in ((Draw.NOISE, 0), (Draw.SAMPLER, torch.arange(len(s)) * 7 + 2**31)):
        z = s.normals(draw, n, ex)
        u = s.uniforms(draw, n, ex)  # the compiled philox.c, itself equal to the int64 tensor form
        ref = noise.box_muller(u[:, 0::2].reshape(-1), u[:, 1::2].reshape(-1))
        assert ref is not None
        assert torch.equal(z, ref.view(len(s), n))


@needs_kernel
def test_box_muller_accuracy_on_random_and_extreme_uniforms() -> None:
    g = torch.Generator().manual_seed(5)
    m = torch.randint(0, 2**52, (20_000,), generator=g, dtype=torch.int64)
    grid = (m.double() + 0.5) * 2.0**-52
    # the smallest and largest uniforms, and angles next to every multiple of π/4
    ext = torch.tensor([2.0**-53, 3 * 2.0**-53, 0.5, 1 - 2.0**-53, 1 - 3 * 2.0**-53], dtype=torch.float64)
    near = torch.tensor([j / 8 + d * 2.0**-52 for j in range(9) for d in (-1.5, -0.5, 0.5, 1.5)], dtype=torch.float64)
    near = near[(near > 0) & (near < 1)]
    u = torch.cat([grid, ext, torch.full_like(near, 0.3)])
    v = torch.cat([grid.flip(0), ext, near])
    z = noise.box_muller(u, v)
    assert z is not None
    ref, r = reference(u.numpy(), v.numpy())
    err = np.abs(z.numpy().astype(np.longdouble) - ref) / r[:, None]
    assert float(err.max()) <= 6 * U  # a few ulp of the radius (long double's own error is ~2⁻⁶⁴)
    # the smallest uniform gives the largest radius, √(106 ln 2); the largest the smallest, √(2⁻⁵²)
    assert float(z[-len(near) - 5 :][0].norm()) == pytest.approx(math.sqrt(106 * math.log(2)), rel=1e-15)
    assert float(z[-len(near) - 2].norm()) == pytest.approx(math.sqrt(2.0**-52), rel=1e-7)
    assert bool(torch.isfinite(z).all())


@needs_kernel
def test_mutation_wrong_angle_is_caught() -> None:
    """The check above fails on a transform that pairs the radius with the wrong angle (cos ↔ sin swapped)."""
    g = torch.Generator().manual_seed(6)
    u, v = torch.rand(1000, generator=g, dtype=torch.float64), torch.rand(1000, generator=g, dtype=torch.float64)
    z = noise.box_muller(u, v)
    assert z is not None
    ref, r = reference(u.numpy(), v.numpy())
    swapped = z.flip(1).numpy().astype(np.longdouble)
    assert float((np.abs(swapped - ref) / r[:, None]).max()) > 1e-3


@needs_kernel
def test_draws_do_not_depend_on_the_batch_or_the_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    s = streams(6, 700)  # 4,200 tokens × 384: split between threads
    full = s.normals(Draw.NOISE, 384)
    idx = torch.tensor([4199, 0, 17, 2100, 3])
    assert torch.equal(s.select(idx).normals(Draw.NOISE, 384), full[idx])
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert torch.equal(s.normals(Draw.NOISE, 384), full)
    x = torch.randn(len(s), 384, generator=torch.Generator().manual_seed(1))
    one = add_metric_laplace(x, s, 0.5)
    u = s.uniforms(Draw.NOISE, 384)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)  # three uneven parts on the OpenMP team …
    assert torch.equal(s.normals(Draw.NOISE, 384), full)
    assert torch.equal(add_metric_laplace(x, s, 0.5), one) and torch.equal(s.uniforms(Draw.NOISE, 384), u)
    monkeypatch.setattr(noise._lib(), "philox_openmp", lambda: 0)  # … and on Python threads (no OpenMP)
    assert torch.equal(s.normals(Draw.NOISE, 384), full)
    assert torch.equal(add_metric_laplace(x, s, 0.5), one) and torch.equal(s.uniforms(Draw.NOISE, 384), u)
    monkeypatch.undo()
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "1")
    assert torch.equal(add_metric_laplace(x, s, 0.5), one)
    assert torch.equal(add_metric_laplace(x[idx], s.select(idx), 0.5), one[idx])


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("d", [7, 384])
def test_metric_laplace_shift_matches_the_torch_form(dtype: torch.dtype, d: int) -> None:
    s = streams(8, 250)
    x = torch.randn(len(s), d, generator=torch.Generator().manual_seed(2), dtype=dtype)
    out = add_metric_laplace(x, s, 0.25)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_TEXTDP_NATIVE", "0")
        ref = (x.double() + sample_metric_laplace(s, len(s), d, 0.25)).float()
    assert out.dtype == torch.float32 and out.shape == ref.shape
    # the same fp32 value but where a float64 ulp crosses a rounding boundary: then one fp32 ulp apart
    differ = out != ref
    assert float(differ.double().mean()) < 1e-3
    ulp = torch.nextafter(ref.abs(), torch.tensor(math.inf)) - ref.abs()
    assert bool(((out - ref).abs() <= ulp).all())


def test_kernel_off_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "0")
    s = streams(1, 3)
    assert not noise.noise_kernel_available()
    assert noise.native_normals(*streams_parts(s), int(Draw.NOISE), 2) is None
    assert noise.native_metric_laplace_shift(torch.zeros(3, 4), *streams_parts(s), torch.ones(3), 1) is None
    assert noise.box_muller(torch.full((1,), 0.5), torch.full((1,), 0.5)) is None


@needs_kernel
def test_madlib_reads_the_rows_itself_with_the_same_result() -> None:
    """madlib's CPU release gives the kernel E and the positions (no gathered copy, no chunks): the same
    vectors as perturbing the gathered rows, and within an fp32 ulp of the tensor form."""
    from hf_textdp.mechanisms.madlib import Madlib
    from tests.utils import synthetic_space

    E = np.random.default_rng(8).standard_normal((300, 24)).astype(np.float32)
    space = synthetic_space(E)
    mech = Madlib(epsilon=3.0)
    positions = torch.from_numpy(np.random.default_rng(9).integers(0, 300, 700))
    s = streams(7, 100)
    out = mech.perturb_positions(space, positions, s)
    assert torch.equal(out, mech.perturb(space.E[positions], s))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_TEXTDP_NATIVE", "0")
        ref = mech.perturb_positions(space, positions, s)
    ulp = torch.nextafter(ref.abs(), torch.tensor(math.inf)) - ref.abs()
    assert bool(((out - ref).abs() <= ulp).all())
    with pytest.raises(IndexError, match="rows must lie"):
        noise.native_metric_laplace_shift(space.E, s.k0, s.k1, s.position, torch.ones(len(s)), 1, rows=positions + 300)


@needs_kernel
def test_same_bits_without_native_vector_code(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Built with the portable flags only (``-O3 -fno-math-errno``: no AVX-512 rounds, libm's ``fma``), the
    kernel gives the same uniforms and normals bit for bit as the machine's own build."""
    from hf_textdp.utils import native

    s = streams(4, 300)
    ref_u, ref_z = s.uniforms(Draw.NOISE, 386), s.normals(Draw.NOISE, 385)
    monkeypatch.setenv("HF_TEXTDP_CACHE", str(tmp_path))
    monkeypatch.setattr(native, "_FLAG_SETS", (native._FLAG_SETS[1],))
    monkeypatch.setattr(native, "_loaded", {})
    noise._lib.cache_clear()
    try:
        u, z = s.uniforms(Draw.NOISE, 386), s.normals(Draw.NOISE, 385)
        assert list((tmp_path / "native").glob("philox-*.so"))  # the portable build ran
    finally:
        noise._lib.cache_clear()  # the next use reloads the machine's build
    assert torch.equal(u, ref_u) and torch.equal(z, ref_z)
