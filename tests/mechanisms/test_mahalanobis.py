"""Tests of ``mahalanobis`` (mahalanobis.md): the matrices, the noise law, the claim, parameters.

Known answers are the numbers printed by ``docs/mechanisms/kat/santext.py`` (mahalanobis.md; hard-coded, never
recomputed by package code). Statistical tests follow testing.md §1: fixed seeds unique per test,
α = 1e-3 per test (Bonferroni within a test), KS asymptotic for n > 10,000.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats

from hf_textdp.errors import InvalidParameterError, ParameterTypeError, UnknownOptionError
from hf_textdp.mechanisms import get_mechanism_class
from hf_textdp.mechanisms.madlib import Madlib
from hf_textdp.mechanisms.mahalanobis import Mahalanobis
from hf_textdp.rng import streams_for_rows
from hf_textdp.space import EmbeddingSpace
from tests.utils import T5, make_space, row_key, synthetic_space


ALPHA = 1e-3

# mahalanobis.md, T5, λ = 0.2, ε = 2
SIGMA = [[1.36, -0.8], [-0.8, 2.4]]
SIGMA_TILDE = [[0.7234042553, -0.4255319149], [-0.4255319149, 1.2765957447]]
M_KAT = [[0.9446808511, -0.0851063830], [-0.0851063830, 1.0553191489]]
EIG_M = [0.8984948047, 1.1015051953]
M_HALF = [[0.9710125584, -0.0426082449], [-0.0426082449, 1.0264032767]]
INV_SQRT_LAMBDA_MIN = 1.0549751134
D_M_01, D_M_04, DIAM_M = 1.0326207535, 3.9079723954, 4.7754770965
E_NORM_SQ = 1.5


def reference_matrices(E: np.ndarray, lam: float) -> tuple[np.ndarray, ...]:
    """Independent numpy float64 reference of mahalanobis.md: (Σ, Σ̃, M, eig, M^{1/2}, M^{-1/2})."""
    mu = E.mean(0)
    S = (E - mu).T @ (E - mu) / len(E)
    d = E.shape[1]
    St = S * (d / np.trace(S))
    M = lam * St + (1 - lam) * np.eye(d)
    ev, U = np.linalg.eigh(M)
    return S, St, M, ev, U @ np.diag(np.sqrt(ev)) @ U.T, U @ np.diag(1 / np.sqrt(ev)) @ U.T


pytestmark = pytest.mark.usefixtures("module_textdp_cache")  # one fresh $HF_TEXTDP_CACHE per module


@pytest.fixture(scope="module")
def aniso16() -> EmbeddingSpace:
    """d = 16, V = 300, columns scaled from 0.1 to 4: a strongly anisotropic covariance."""
    rng = np.random.default_rng(7000)
    return synthetic_space(rng.standard_normal((300, 16)) * np.geomspace(0.1, 4.0, 16))


def setup_mech(space: EmbeddingSpace, cls: type[Mahalanobis] = Mahalanobis, **kwargs: Any) -> Mahalanobis:
    mech = cls(**{"epsilon": 2.0, **kwargs})
    mech.setup(space)
    return mech


# --------------------------------------------------------------------------- known answers
def test_reference_matches_spec_known_answers():
    S, St, M, ev, Mh, Mih = reference_matrices(T5, 0.2)
    np.testing.assert_allclose(S, SIGMA, rtol=1e-12)
    np.testing.assert_allclose(St, SIGMA_TILDE, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(M, M_KAT, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(ev, EIG_M, rtol=1e-9)
    np.testing.assert_allclose(Mh, M_HALF, rtol=1e-9, atol=1e-10)
    W = T5 @ Mih
    dM = np.sqrt(((W[:, None] - W[None]) ** 2).sum(-1))
    assert dM[0, 1] == pytest.approx(D_M_01, rel=1e-9)
    assert dM[0, 4] == pytest.approx(D_M_04, rel=1e-9)
    assert dM.max() == pytest.approx(DIAM_M, rel=1e-9)


def test_matrices_known_answers(t5):
    mats = setup_mech(t5, lam=0.2).matrices(t5)
    np.testing.assert_allclose(mats.sigma.numpy(), SIGMA, rtol=1e-12)
    np.testing.assert_allclose(mats.sigma_tilde.numpy(), SIGMA_TILDE, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(mats.M.numpy(), M_KAT, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(mats.eigenvalues.numpy(), EIG_M, rtol=1e-9)
    np.testing.assert_allclose(mats.M_half.numpy(), M_HALF, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose((mats.M_half @ mats.M_half).numpy(), M_KAT, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose((mats.M_inv_half @ mats.M_half).numpy(), np.eye(2), atol=1e-12)
    assert float(mats.eigenvalues[0]) >= 1 - 0.2


def test_claim_and_details_known_answers(t5):
    mech = setup_mech(t5, lam=0.2)
    claim = mech.claim(t5)
    assert claim.guarantee == "metric_dp" and claim.metric == "mahalanobis" and claim.certified
    assert claim.delta_token == 0.0 and claim.pair_bound is not None
    assert claim.pair_bound(0, 1) == pytest.approx(2.0 * D_M_01, rel=1e-9)
    assert claim.pair_bound(0, 4) == pytest.approx(2.0 * D_M_04, rel=1e-9)
    assert claim.epsilon_token == pytest.approx(2.0 * DIAM_M, rel=1e-6)  # diam of the fp32 matrix E·M^{-1/2}
    det = mech.details(t5)
    assert det["epsilon_euclidean_equivalent"] == pytest.approx(2.0 * INV_SQRT_LAMBDA_MIN, rel=1e-9)
    assert det["epsilon_euclidean_equivalent"] <= 2.0 / math.sqrt(0.8)
    assert det["noise"]["expected_squared_norm"] == pytest.approx(E_NORM_SQ, rel=1e-12)
    assert det["lam"] == 0.2
    assert det["metric_dp"] == {"epsilon": 2.0, "metric": "mahalanobis", "lam": 0.2}
    M_bytes = mech.matrices(t5).M.numpy().astype("<f8").tobytes()
    assert det["M_sha256"] == hashlib.sha256(M_bytes).hexdigest()
    assert setup_mech(t5, lam=0.3).details(t5)["M_sha256"] != det["M_sha256"]


def test_scale_metric_matrix_is_E_times_M_inv_half(t5):
    mech = setup_mech(t5, lam=0.2)
    W = mech.scale_metric_matrix(t5)
    assert W.dtype == torch.float32 and W.shape == (5, 2)
    np.testing.assert_allclose(W.numpy(), (T5 @ reference_matrices(T5, 0.2)[5]).astype(np.float32), rtol=1e-6)


# --------------------------------------------------------------------------- the noise law
def test_radius_in_M_frame_is_gamma(t5):
    """‖Z·M^{-1/2}‖ against Gamma(d = 2, scale 1/ε), n = 200,000, KS, α = 1e-3 (M^{-1/2} from the reference)."""
    mech = setup_mech(t5, lam=0.2)
    Z = mech.noise(torch.Generator().manual_seed(7101), 200_000).numpy()
    r = np.linalg.norm(Z @ reference_matrices(T5, 0.2)[5], axis=1)
    assert stats.kstest(r, stats.gamma(2, scale=0.5).cdf).pvalue > ALPHA


def test_direction_in_M_frame_is_uniform(t5):
    """Angle of Z·M^{-1/2} on T5's plane against uniform on (−π, π], n = 200,000, KS, α = 1e-3."""
    mech = setup_mech(t5, lam=0.2)
    W = mech.noise(torch.Generator().manual_seed(7102), 200_000).numpy() @ reference_matrices(T5, 0.2)[5]
    ang = np.arctan2(W[:, 1], W[:, 0])
    assert stats.kstest(ang, stats.uniform(-np.pi, 2 * np.pi).cdf).pvalue > ALPHA


def test_expected_squared_norm(t5):
    """E‖Z‖² = d(d+1)·tr(M)/(d·ε²) = 1.5 on T5: the mean of n = 200,000 draws lies within 4 standard errors."""
    mech = setup_mech(t5, lam=0.2)
    x = torch.zeros((200_000, 2), dtype=torch.float32)
    sq = ((mech.perturb(x, torch.Generator().manual_seed(7103)).double()) ** 2).sum(1).numpy()
    se = sq.std(ddof=1) / math.sqrt(sq.size)
    assert abs(sq.mean() - E_NORM_SQ) <= 4 * se


def test_d16_projection_and_radius_match_madlib(aniso16):
    """d = 16, λ = 0.5: W = Z·M^{-1/2} is madlib noise. Its projection on a fixed unit vector against
    G₁ − G₂ (G ~ Gamma((d+1)/2, 1/ε), madlib.md §4; 20,000 reference draws, numpy seed 7105; two-sample KS) and
    ‖W‖ against Gamma(d, 1/ε) (KS); n = 20,000 draws (torch seed 7104), α/2 each (Bonferroni)."""
    eps, d, n = 2.0, 16, 20_000
    mech = setup_mech(aniso16, lam=0.5, epsilon=eps)
    Mih = reference_matrices(aniso16.E.double().numpy(), 0.5)[5]
    W = mech.noise(torch.Generator().manual_seed(7104), n).numpy() @ Mih
    v = np.arange(1.0, d + 1.0)
    v /= np.linalg.norm(v)
    rng = np.random.default_rng(7105)
    ref = rng.gamma((d + 1) / 2, 1 / eps, n) - rng.gamma((d + 1) / 2, 1 / eps, n)
    assert stats.ks_2samp(W @ v, ref).pvalue > ALPHA / 2
    assert stats.kstest(np.linalg.norm(W, axis=1), stats.gamma(d, scale=1 / eps).cdf).pvalue > ALPHA / 2


def test_lam_zero_is_madlib(t5):
    """λ = 0 gives M = I and the very same draws as madlib (same generator state → identical vectors)."""
    mech = setup_mech(t5, lam=0.0)
    np.testing.assert_array_equal(mech.matrices(t5).M.numpy(), np.eye(2))
    x = t5.E[torch.tensor([0, 3, 4, 4])]
    a = mech.perturb(x, torch.Generator().manual_seed(7106))
    b = Madlib(epsilon=2.0).perturb(x, torch.Generator().manual_seed(7106))
    torch.testing.assert_close(a, b, rtol=0, atol=0)


class _Renormalised(Mahalanobis):
    def shape_noise(self, ru):
        y = super().shape_noise(ru)
        return y / torch.linalg.vector_norm(y, dim=1, keepdim=True) * torch.linalg.vector_norm(ru, dim=1, keepdim=True)


class _InverseRoot(Mahalanobis):
    def shape_noise(self, ru):
        assert self._state is not None
        return ru @ self.matrices(self._state.space).M_inv_half


@pytest.mark.parametrize(
    ("cls", "seed"),
    [
        pytest.param(_Renormalised, 7201, id="renormalised_direction"),
        pytest.param(_InverseRoot, 7202, id="M_inv_half"),
    ],
)
def test_mutants_fail_the_radius_test(aniso16, cls, seed):
    """Broken noise shapes (mahalanobis.md audit mutants): KS of ‖Z·M^{-1/2}‖ vs Gamma(16, 1/ε) rejects, n = 20,000."""
    mech = setup_mech(aniso16, cls, lam=0.9)
    Mih = reference_matrices(aniso16.E.double().numpy(), 0.9)[5]
    r = np.linalg.norm(mech.noise(torch.Generator().manual_seed(seed), 20_000).numpy() @ Mih, axis=1)
    assert stats.kstest(r, stats.gamma(16, scale=0.5).cdf).pvalue < ALPHA


# --------------------------------------------------------------------------- candidate set only
def test_covariance_uses_candidate_rows_only(tiny_bert):
    """Σ comes from E restricted to C: the special-token rows of the full matrix do not enter M."""
    from hf_textdp.io.models import load_space

    space = load_space(tiny_bert)
    assert space.E_full is not None and space.E_full.shape[0] > space.V
    mats = setup_mech(space, lam=0.2).matrices(space)
    cand = space.E_full[space.candidate_ids].double().numpy()
    np.testing.assert_allclose(mats.sigma.numpy(), reference_matrices(cand, 0.2)[0], rtol=1e-10, atol=1e-14)
    every_row = reference_matrices(space.E_full.double().numpy(), 0.2)[0]
    assert not np.allclose(mats.sigma.numpy(), every_row, rtol=1e-10, atol=1e-14)


# --------------------------------------------------------------------------- parameters
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        pytest.param({"lam": -0.1}, InvalidParameterError, "lam", id="lam_negative"),
        pytest.param({"lam": 1.1}, InvalidParameterError, "lam", id="lam_above_one"),
        pytest.param({"lam": math.nan}, InvalidParameterError, "lam", id="lam_nan"),
        pytest.param({"lam": "0.2"}, ParameterTypeError, "lam", id="lam_str"),
        pytest.param({"lam": True}, ParameterTypeError, "lam", id="lam_bool"),
        pytest.param({"epsilon": 0.0}, InvalidParameterError, "epsilon", id="epsilon_zero"),
        pytest.param({"bound": "clip"}, UnknownOptionError, "bound", id="unknown_option"),
        pytest.param({"delta": 1e-6}, InvalidParameterError, "delta", id="delta_given"),
    ],
)
def test_invalid_parameters(kwargs, error, match):
    with pytest.raises(error, match=match):
        Mahalanobis(**{"epsilon": 2.0, **kwargs})


def test_lam_one_singular_covariance_raises(tmp_path):
    space = make_space(tmp_path, np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [4.0, 4.0]]))
    with pytest.raises(InvalidParameterError, match="lam"):
        setup_mech(space, lam=1.0)
    setup_mech(space, lam=0.99)  # regularised: fine


def test_lam_one_nonsingular_is_allowed(t5):
    mats = setup_mech(t5, lam=1.0).matrices(t5)
    np.testing.assert_allclose(mats.M.numpy(), SIGMA_TILDE, rtol=1e-9, atol=1e-10)


def test_identical_rows_raise(tmp_path):
    space = synthetic_space(np.ones((3, 2)))
    with pytest.raises(InvalidParameterError, match="model"):
        setup_mech(space)


def test_perturb_needs_setup_and_test_mode(t5):
    with pytest.raises(RuntimeError, match="setup"):
        Mahalanobis(epsilon=2.0).perturb(torch.zeros((1, 2)), torch.Generator())
    mech = setup_mech(t5, epsilon=math.inf, test_mode=True)
    x = t5.E[:3]
    assert torch.equal(mech.perturb(x, torch.Generator()), x)


def test_registered_under_its_name():
    assert get_mechanism_class("mahalanobis") is Mahalanobis


# --------------------------------------------------------------------------- end to end
def test_privatizer_end_to_end(tmp_path):
    from hf_textdp import Privatizer, PrivatizerConfig
    from tests.utils import write_vectors

    words = ["the", "movie", "was", "good", "bad", "plot", "film", "great"]
    E = np.random.default_rng(7300).standard_normal((len(words), 4)) * np.array([0.5, 1.0, 2.0, 3.0])
    path = write_vectors(tmp_path / "vec.txt", words, E)
    cfg = PrivatizerConfig(mechanism="mahalanobis", epsilon=20.0, model=str(path), options={"lam": 0.5})
    priv = Privatizer(cfg, seed=2**40 + 1)
    batch = {"text": ["the movie was good", "bad plot zzz"]}
    out = priv(batch, [0, 1])
    assert {"text", "input_ids", "dp_tokens", "dp_epsilon"} <= set(out)
    assert out["dp_tokens"] == [4, 2]
    assert out["text"][1].endswith(" <unk>")  # a missing word: the placeholder, never the word
    assert Privatizer(cfg, seed=2**40 + 1)(batch, [0, 1])["text"] == out["text"]
    report = priv.privacy_report()
    json.dumps(report, allow_nan=False)
    assert report["guarantee"] == "metric_dp"
    assert report["metric"] == "mahalanobis"
    # ε_tok = ε·diam_M from a float64 upper bound of diam_M (never below the fp32 matrix's diameter)
    diam_m = report["details"]["diam_M"]
    assert report["scale"]["diam"] <= diam_m == pytest.approx(report["scale"]["diam"], rel=1e-6)
    assert report["epsilon_token"] == math.nextafter(20.0 * diam_m, math.inf)


def test_batched_perturb_equals_perturb_row_by_row(aniso16):
    """One perturb() of several rows' tokens gives each row exactly its own perturb(x, key) (batch invariance)."""
    mech = setup_mech(aniso16, epsilon=3.0)
    sizes = [2, 0, 1, 9, 1]
    g = torch.Generator().manual_seed(9)
    xs = [aniso16.E[torch.randint(0, aniso16.V, (n,), generator=g)] for n in sizes]
    keys = [row_key(9, i) for i in range(len(sizes))]
    got = mech.perturb(torch.cat(xs), streams_for_rows(keys, sizes))
    want = torch.cat([mech.perturb(x, k) for x, k in zip(xs, keys, strict=True)])
    assert got.dtype == torch.float32 and torch.equal(got, want)

    class Unshaped(Mahalanobis):  # a broken variant overriding shape_noise: its own hook is what runs
        def shape_noise(self, ru):
            return ru

    bad = setup_mech(aniso16, Unshaped, epsilon=3.0)
    rows = bad.perturb(torch.cat(xs), streams_for_rows(keys, sizes))
    assert torch.equal(rows, torch.cat([bad.perturb(x, k) for x, k in zip(xs, keys, strict=True)]))
    assert not torch.equal(rows, want)


def test_matrices_do_not_depend_on_the_thread_count():
    """M^{±1/2} bit for bit on 1 and 2 intra-op threads (a forked num_proc worker runs one thread)."""
    from hf_textdp.mechanisms.mahalanobis import mahalanobis_matrices

    g = torch.Generator().manual_seed(31)
    E = torch.randn(3000, 384, generator=g) * torch.linspace(0.2, 3.0, 384)
    prev = torch.get_num_threads()
    out = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            out.append(mahalanobis_matrices(E, 0.2))
    finally:
        torch.set_num_threads(prev)
    for name in ("M_half", "M_inv_half", "eigenvalues"):
        assert torch.equal(getattr(out[0], name), getattr(out[1], name)), name


def test_noise_of_a_token_does_not_depend_on_its_batch():
    """Z of each token bit for bit alike in batches of 1, 3, 7, 250, 2,000 and 2,239 tokens and through
    perturb_positions' chunks: a BLAS sums a product's rows past its micro-tile's multiple in another order (MKL:
    4e-12 apart), which products of a multiple of ROW_QUANTUM rows avoid (unpadded, the small batches differ)."""
    rng = np.random.default_rng(7300)
    space = synthetic_space(rng.standard_normal((400, 384)) * np.geomspace(0.05, 2.0, 384))
    mech = setup_mech(space, epsilon=5.0)
    sizes = [1, 3, 7, 250, 2000, 2239]
    streams = streams_for_rows([row_key(73, i) for i in range(len(sizes))], sizes)
    whole = mech.noise(streams, len(streams))
    starts = np.cumsum([0, *sizes])
    parts = torch.cat([mech.noise(streams.slice(a, b), b - a) for a, b in zip(starts[:-1], starts[1:], strict=True)])
    assert torch.equal(parts, whole)
    pos = torch.from_numpy(rng.integers(0, space.V, len(streams)))
    x = space.E[pos].double()
    want = (x + whole).float()
    assert len(streams) > 2 * mech.perturb_chunk  # several chunks, the last one short
    assert torch.equal(mech.perturb_positions(space, pos, streams), want)
