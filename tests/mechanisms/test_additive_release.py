"""The compiled release of the additive mechanisms (laplace, gaussian, truncated_laplace: ``kernels/philox.c`` via
``BoundedAdditiveMechanism.perturb_positions``) and privemb's projected rows: bit for bit the tensor form's numbers,
on groups of mixed sizes across the chunks, odd and even dimensions, every bound the kernel takes and those it
hands back to the tensor form. Issue 58."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.cpu.noise import noise_kernel_available
from hf_textdp.io.models import load_space
from hf_textdp.mechanisms import get_mechanism_class
from hf_textdp.mechanisms import privemb as privemb_mod
from hf_textdp.mechanisms.base import AdditiveMechanism
from hf_textdp.mechanisms.bounded import BoundedAdditiveMechanism
from hf_textdp.mechanisms.laplace import Laplace
from hf_textdp.rng import streams_for_rows
from tests.utils import row_key, write_vectors


pytestmark = [
    pytest.mark.usefixtures("private_textdp_cache"),
    pytest.mark.skipif(not noise_kernel_available(), reason="no C compiler: the tensor form runs everywhere"),
]

#: tokens per group: 1,000 in all, so chunks of 256 (and privemb's larger ones) end inside groups
SIZES = [250, 1, 300, 49, 7, 393]


@pytest.fixture(scope="module", params=[(40, 384), (31, 15)], ids=["d384", "d15"])
def vectors(request, tmp_path_factory):
    """A word-vector file whose row norms spread from 0.2 to 3 times a normal vector's (clip scales about half)."""
    V, d = request.param
    E = np.random.default_rng(5801 + d).standard_normal((V, d)) * np.linspace(0.2, 3.0, V)[:, None]
    return str(write_vectors(tmp_path_factory.mktemp(f"d{d}") / "v.txt", [f"w{i}" for i in range(V)], E.astype("f4")))


@pytest.fixture(scope="module")
def space(vectors):
    return load_space(vectors)


def _batch(space, seed: int) -> tuple[torch.Tensor, object]:
    pos = torch.randint(0, space.V, (sum(SIZES),), generator=torch.Generator().manual_seed(seed))
    return pos, streams_for_rows([row_key(seed, i) for i in range(len(SIZES))], SIZES)


def _tensor_form(mech: AdditiveMechanism, space, pos, streams) -> torch.Tensor:
    return AdditiveMechanism.perturb_positions(mech, space, pos, streams)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("laplace", {}),
        ("laplace", {"bound": "vocab_exact"}),
        ("laplace", {"match_space": "raw"}),
        ("gaussian", {}),
        ("gaussian", {"bound": "vocab_exact", "calibration": "reference_code"}),
        ("truncated_laplace", {}),
        ("truncated_laplace", {"bound": "vocab_exact"}),
        ("laplace", {"bound": "observed_range"}),  # not the kernel's: the tensor form
        ("gaussian", {"bound": "minmax", "match_space": "raw"}),
    ],
)
def test_compiled_release_is_the_tensor_form_bit_for_bit(space, name, options):
    """Groups of mixed sizes (chunks of 256 end inside them), positions repeated, rows clipped and not: the kernel's
    fp32 vectors equal those of the per-chunk tensor form exactly (fails if T, the noise or a rounding differs)."""
    mech = get_mechanism_class(name)(epsilon=3.0, **options)
    mech.setup(space)
    pos, streams = _batch(space, 5802)
    got = mech.perturb_positions(space, pos, streams)
    want = _tensor_form(mech, space, pos, streams)
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert torch.equal(got, want)
    # each token's vector is its own: the second group alone gives its rows of the batch
    alone = mech.perturb_positions(space, pos[250:251], streams.slice(250, 251))
    assert torch.equal(alone, got[250:251])


def test_the_kernel_runs_for_clip(space, monkeypatch):
    """The default (clip) takes the compiled release: its tensor form is not called."""
    mech = Laplace(epsilon=3.0)
    mech.setup(space)
    monkeypatch.setattr(AdditiveMechanism, "perturb_positions", lambda *a: pytest.fail("tensor form ran"))
    pos, streams = _batch(space, 5803)
    assert mech.perturb_positions(space, pos, streams).shape == (pos.numel(), space.d)


class HalfLaplace(Laplace):
    """A deliberately changed noise: the kernel must not stand in for it."""

    def sample_noise(self, streams, k):
        return 0.5 * super().sample_noise(streams, k)


class Doubled(Laplace):
    def transform_input(self, x):
        return 2.0 * super().transform_input(x)


@pytest.mark.parametrize("cls", [HalfLaplace, Doubled], ids=["sample_noise", "transform_input"])
def test_a_subclass_that_changes_a_step_gets_the_tensor_form(space, cls):
    mech = cls(epsilon=3.0)
    mech.setup(space)
    pos, streams = _batch(space, 5804)
    got = mech.perturb_positions(space, pos, streams)
    assert torch.equal(got, _tensor_form(mech, space, pos, streams))
    plain = Laplace(epsilon=3.0)
    plain.setup(space)
    assert not torch.equal(got, BoundedAdditiveMechanism.perturb_positions(plain, space, pos, streams))


def test_clip_factors_are_those_of_apply(space):
    mech = Laplace(epsilon=3.0)
    state = mech.prepare(space)
    assert state.row_factor is not None and (state.row_factor < 1).any() and (state.row_factor == 1).any()
    assert torch.equal(space.E.double() * state.row_factor[:, None], state.transform.apply(space.E))


# --------------------------------------------------------------------------- privemb
def test_privemb_projected_rows_do_not_depend_on_the_batch(space):
    """ΦE is one product of every row, and a batch's projection gives each token its row's float64 numbers whatever
    the batch's size (BLAS rounds a product's rows past a multiple of its micro-tile on their own: utils.products)."""
    mech = get_mechanism_class("privemb")(epsilon=3.0)
    table = mech.projected_rows(space)
    assert table is not None and table.dtype == torch.float64
    phi = mech.projection_matrix(space).double()
    assert torch.allclose(table, space.E.double() @ phi.T, rtol=1e-12, atol=1e-12)
    assert torch.equal(mech.search_index(space).E, table.float())
    g = torch.Generator().manual_seed(125)
    for n in (1, 3, 7, 13, 300):
        idx = torch.randint(0, space.V, (n,), generator=g)
        assert torch.equal(mech.project(space.E[idx]), table[idx]), n


def test_privemb_release_is_the_tensor_form(space, monkeypatch):
    """Chunks of privemb.CHUNK_VALUES values (made small: several chunks, ending inside groups) give the vectors of
    the per-chunk projection (utils.products: a row's projection does not depend on its batch)."""
    monkeypatch.setattr(privemb_mod, "CHUNK_VALUES", 300 * 55)
    mech = get_mechanism_class("privemb")(epsilon=3.0, m=55)
    mech.setup(space)
    pos, streams = _batch(space, 5805)
    pos, streams = pos[:768], streams.slice(0, 768)
    got = mech.perturb_positions(space, pos, streams)
    assert torch.equal(got, _tensor_form(mech, space, pos, streams))


def test_privemb_without_a_table_projects_each_batch(space, monkeypatch):
    monkeypatch.setattr(privemb_mod, "TABLE_BYTES", 0)
    mech = get_mechanism_class("privemb")(epsilon=3.0)
    mech.setup(space)
    assert mech.projected_rows(space) is None
    pos, streams = _batch(space, 5806)
    assert mech.perturb_positions(space, pos, streams).shape == (pos.numel(), mech.projection_dim(space.d))


@pytest.mark.parametrize("name", ["laplace", "gaussian", "truncated_laplace", "privemb"])
def test_end_to_end_output_equals_the_tensor_form(vectors, space, monkeypatch, name):
    """Privatized rows through the whole pipeline: the same text with the kernels and with the tensor form."""
    texts = [" ".join(f"w{(7 * r + j) % space.V}" for j in range(3 + r % 9)) for r in range(60)]
    cfg = PrivatizerConfig(mechanism=name, epsilon=5.0, model=vectors)

    def run() -> list[str]:
        return Privatizer(cfg, seed=2**40 + 77, split="t", allow_weak_seed=True).privatize(texts)

    got = run()
    cls = type(get_mechanism_class(name)(epsilon=5.0))
    monkeypatch.setattr(cls, "perturb_positions", AdditiveMechanism.perturb_positions)
    assert got == run()


def test_without_the_native_switch_the_tensor_form_runs(space, monkeypatch):
    """``HF_TEXTDP_NATIVE=0``: no kernel runs, and laplace's vectors are the same (its uniforms are the same bits
    every way; gaussian's normals are the kernel's own functions, within an ulp of torch's, randomness.md §4)."""
    mech = get_mechanism_class("laplace")(epsilon=3.0)
    mech.setup(space)
    pos, streams = _batch(space, 5807)
    got = mech.perturb_positions(space, pos, streams)
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "0")
    assert torch.equal(mech.perturb_positions(space, pos, streams), got)
