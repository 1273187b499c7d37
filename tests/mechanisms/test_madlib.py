"""madlib (madlib.md §6): the noise law, independence, the exact output law, known answers, exact search.

Statistical levels are testing.md §1's: each test at α = 1e-3, Bonferroni over the statistics it checks
(α/k each); KS exact for n ≤ 10,000 and asymptotic above; χ² with every expected count ≥ 5;
proportions by exact binomial tests. Every stochastic test uses its own literal seed. Sample sizes:
n = 20,000 for the laws (T-radius, T-angle, T-1D, T-two-word; d = 384 at ε = 100: 200,000), the
mutations at the sizes testing.md §4 gives (shape d − 1: d = 16, n = 2,000). Known answers are the numbers
printed by kat/madlib.py, hard-coded.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from scipy import special, stats

from hf_textdp.config import PrivatizerConfig
from hf_textdp.errors import InvalidParameterError
from hf_textdp.io.models import load_space
from hf_textdp.mechanisms.madlib import Madlib, sample_madlib_noise
from hf_textdp.postprocess import Nearest
from hf_textdp.privatizer import Privatizer
from hf_textdp.rng import Draw, Streams, as_streams, derive_row_seed, streams_for_rows
from hf_textdp.search import ExactIndex
from hf_textdp.tools.calibrate import calibrate
from tests.utils import N_CASES, one_row, row_key, write_vectors


ALPHA = 1e-3
Mutant = Callable[[int, int, float, torch.Generator], torch.Tensor]  # (n, d, ε, generator: a key is drawn from it)
NNCase = tuple[np.ndarray, np.ndarray, np.ndarray]


def ks_pvalue(x: np.ndarray, cdf: Callable[..., Any]) -> float:
    method = "exact" if len(x) <= 10_000 else "asymp"
    return float(stats.kstest(x, cdf, method=method).pvalue)


def chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """χ² goodness of fit, merging the smallest-expectation bins until every expected count is ≥ 5."""
    n = counts.sum()
    obs, exp = list(counts.astype(float)), list(probs * n)
    while len(exp) > 1 and min(exp) < 5:
        i = int(np.argmin(exp))
        j = i - 1 if i > 0 else i + 1
        obs[j] += obs.pop(i)
        exp[j] += exp.pop(i)
    if len(exp) < 2:
        return 1.0
    return float(stats.chisquare(obs, exp).pvalue)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- randomness.md randomness known answers
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((0, 0, "", 0), 2844346950793067545),
        ((1, 0, "", 0), 2603403363308340002),
        ((1, 1, "", 0), 3312101223593139308),
        ((1, 2**40, "", 0), 3304927415655724950),
        ((2**64 - 1, 7, "", 0), 7595776387040726130),
        ((1, 0, "test", 0), 8666367986693709129),
        ((1, 0, "", 1), 5920478931667868424),
        ((42, 17, "train", 0), 3880023052778407084),
    ],
    ids=["zero", "seed1", "row1", "row2^40", "seed-max", "split-test", "stream1", "train-17"],
)
def test_derive_row_seed_known_answers(args: tuple[Any, ...], expected: Any) -> None:
    assert derive_row_seed(*args) == expected


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((-1, 0, "", 0), r"seed must be an int in \[0, 2\*\*64\)"),
        ((2**64, 0, "", 0), r"seed must be an int in \[0, 2\*\*64\)"),
        ((0, -1, "", 0), r"row_id must be an int in \[0, 2\*\*63\)"),
        ((0, 2**63, "", 0), r"row_id must be an int in \[0, 2\*\*63\)"),
        ((0, 0, "", -1), r"stream must be an int in \[0, 2\*\*63\)"),
    ],
    ids=["seed-negative", "seed-too-big", "row-negative", "row-too-big", "stream-negative"],
)
def test_derive_row_seed_rejects(args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        derive_row_seed(*args)


# --------------------------------------------------------------------------- T-radius
RADIUS_CASES = [(d, eps) for d in (1, 2, 16, 384) for eps in (0.5, 10.0, 100.0)]


@pytest.mark.parametrize(("d", "eps"), RADIUS_CASES, ids=[f"d{d}-eps{e:g}" for d, e in RADIUS_CASES])
def test_t_radius(d: int, eps: float) -> None:
    """ε‖Z‖ ~ Gamma(d, 1): KS, n = 20,000, seed 6100 + index."""
    seed = 6100 + RADIUS_CASES.index((d, eps))
    Z = sample_madlib_noise(gen(seed), 20_000, d, eps)
    assert Z.dtype == torch.float64 and Z.shape == (20_000, d)
    r = eps * torch.linalg.vector_norm(Z, dim=1).numpy()
    assert ks_pvalue(r, stats.gamma(d).cdf) > ALPHA


@pytest.mark.parametrize(
    ("d", "eps", "rows", "seed"),
    [(16, 10.0, "zero", 6201), (384, 100.0, "zero", 6202), (384, 0.5, "random", 6203), (384, 100.0, "random", 6204)],
    ids=["d16-zero", "d384-zero", "d384-eps0.5-rows", "d384-eps100-rows"],
)
def test_t_radius_through_perturb(d: int, eps: float, rows: str, seed: int) -> None:
    """Through ``Madlib.perturb`` (fp32 in and out), ‖q − φ(w)‖ in float64: KS, n = 20,000."""
    if rows == "zero":
        x = torch.zeros((20_000, d), dtype=torch.float32)
    else:
        base = np.random.default_rng(seed).standard_normal((50, d)) / math.sqrt(d)
        x = torch.from_numpy(base.astype(np.float32))[torch.arange(20_000) % 50]
    q = Madlib(epsilon=eps).perturb(x, gen(seed))
    assert q.dtype == torch.float32 and q.shape == x.shape
    r = eps * torch.linalg.vector_norm(q.double() - x.double(), dim=1).numpy()
    assert ks_pvalue(r, stats.gamma(d).cdf) > ALPHA


def test_t_radius_spot_values() -> None:
    """kat/madlib.py: P[ε‖Z‖ ≤ 384] and the median of Gamma(384, 1) (scipy facts the test relies on)."""
    assert float(special.gammainc(384, 384)) == pytest.approx(0.5067862436, abs=5e-11)
    assert float(stats.gamma(384).median()) == pytest.approx(383.6667181559, abs=5e-10)


def _mut_shape(n: int, d: int, eps: float, g: torch.Generator) -> torch.Tensor:
    s = as_streams(g, n)
    G = s.normals(Draw.NOISE, d)
    r = s.gamma(Draw.RADIUS, float(d - 1)) / eps  # Gamma(d − 1) instead of Gamma(d)
    out: torch.Tensor = r[:, None] * G / torch.linalg.vector_norm(G, dim=1, keepdim=True)
    return out


def _mut_scale(n: int, d: int, eps: float, g: torch.Generator) -> torch.Tensor:
    return sample_madlib_noise(g, n, d, 0.98 * eps)


def _mut_rate_scale(n: int, d: int, eps: float, g: torch.Generator) -> torch.Tensor:
    return sample_madlib_noise(g, n, d, 1.0 / eps)  # Gamma(d, scale ε) instead of scale 1/ε


def _mut_gaussian(n: int, d: int, eps: float, g: torch.Generator) -> torch.Tensor:
    return as_streams(g, n).normals(Draw.NOISE, d) * (math.sqrt(d) / eps)  # E‖Z‖ ≈ d/ε


def _mut_laplace(n: int, d: int, eps: float, g: torch.Generator) -> torch.Tensor:
    u = as_streams(g, n).uniforms(Draw.NOISE, d) - 0.5
    return -torch.sign(u) * torch.log1p(-2 * u.abs()) / eps


def _mut_l1_direction(n: int, d: int, eps: float, g: torch.Generator) -> torch.Tensor:
    s = as_streams(g, n)
    G = s.normals(Draw.NOISE, d)
    r = s.gamma(Draw.RADIUS, float(d)) / eps
    out: torch.Tensor = r[:, None] * G / G.abs().sum(1, keepdim=True)
    return out


@pytest.mark.parametrize(
    ("mutant", "d", "n"),
    [
        (_mut_shape, 16, 2_000),
        (_mut_scale, 384, 20_000),
        (_mut_rate_scale, 16, 2_000),
        (_mut_gaussian, 16, 2_000),
        (_mut_laplace, 16, 2_000),
        (_mut_l1_direction, 16, 2_000),
    ],
    ids=[
        "shape-d-1",
        "scale-0.98",
        "rate-scale-confusion",
        "gaussian-matched-norm",
        "per-coordinate-laplace",
        "l1-normalised-direction",
    ],
)
def test_t_radius_rejects_mutations(mutant: Mutant, d: int, n: int) -> None:
    """The T-radius check (KS at α) rejects every mutation of the sampler (madlib.md §6, testing.md §4; ε = 10)."""
    eps = 10.0
    Z = mutant(n, d, eps, gen(6300))
    r = eps * torch.linalg.vector_norm(Z, dim=1).numpy()
    assert ks_pvalue(r, stats.gamma(d).cdf) < ALPHA


# --------------------------------------------------------------------------- T-angle
def _angle_checks(Z: torch.Tensor, d: int, v_row: np.ndarray, eps: float) -> list[float]:
    """p-values: (1+t)/2 vs Beta((d−1)/2, (d−1)/2) for v = e₁, 1/√d, φ(w)/‖φ(w)‖; radius ⊥ direction (χ², 16 df)."""
    Zn = Z.numpy()
    norms = np.linalg.norm(Zn, axis=1)
    U = Zn / norms[:, None]
    beta = stats.beta((d - 1) / 2, (d - 1) / 2)
    vs = [np.eye(d)[0], np.ones(d) / math.sqrt(d), v_row / np.linalg.norm(v_row)]
    ps = [ks_pvalue((1 + U @ v) / 2, beta.cdf) for v in vs]
    t = U[:, 0]
    qr = np.searchsorted(np.quantile(eps * norms, [0.2, 0.4, 0.6, 0.8]), eps * norms)
    qt = np.searchsorted(np.quantile(t, [0.2, 0.4, 0.6, 0.8]), t)
    table = np.zeros((5, 5))
    np.add.at(table, (qr, qt), 1)
    ps.append(float(stats.chi2_contingency(table, correction=False).pvalue))
    return ps


@pytest.mark.parametrize("d", [2, 16, 384])
def test_t_angle(d: int) -> None:
    """Direction uniform on the sphere and independent of the radius (n = 20,000, seed 6400 + d, α/4 each)."""
    Z = sample_madlib_noise(gen(6400 + d), 20_000, d, 10.0)
    v_row = np.random.default_rng(6400 + d).standard_normal(d).astype(np.float32).astype(np.float64)
    for p in _angle_checks(Z, d, v_row, 10.0):
        assert p > ALPHA / 4


def test_t_angle_d1() -> None:
    """d = 1: the sign is ±1 with probability ½ each (exact binomial test, n = 20,000, seed 6401)."""
    Z = sample_madlib_noise(gen(6401), 20_000, 1, 10.0).numpy()[:, 0]
    k = int((Z > 0).sum())
    assert (Z != 0).all()
    assert stats.binomtest(k, 20_000, 0.5).pvalue > ALPHA


def test_t_angle_spot_values() -> None:
    """kat/madlib.py: P[⟨u, v⟩ ≤ x] = Beta((d−1)/2, (d−1)/2) CDF at (1 + x)/2."""
    for d, x, p in ((2, 0.5, 0.6666666667), (16, 0.25, 0.8334149320), (384, 0.1, 0.9750417422)):
        assert float(stats.beta((d - 1) / 2, (d - 1) / 2).cdf((1 + x) / 2)) == pytest.approx(p, abs=5e-11)


def _mut_cube_direction(n: int, d: int, eps: float, g: torch.Generator) -> torch.Tensor:
    s = as_streams(g, n)
    C = s.uniforms(Draw.NOISE, d) * 2 - 1
    r = s.gamma(Draw.RADIUS, float(d)) / eps
    out: torch.Tensor = r[:, None] * C / torch.linalg.vector_norm(C, dim=1, keepdim=True)
    return out


def _mut_laplace_direction(n: int, d: int, eps: float, g: torch.Generator) -> torch.Tensor:
    s = as_streams(g, n)
    u = s.uniforms(Draw.NOISE, d) - 0.5
    L = -torch.sign(u) * torch.log1p(-2 * u.abs())
    r = s.gamma(Draw.RADIUS, float(d)) / eps
    out: torch.Tensor = r[:, None] * L / torch.linalg.vector_norm(L, dim=1, keepdim=True)
    return out


@pytest.mark.parametrize("mutant", [_mut_cube_direction, _mut_laplace_direction], ids=["cube", "laplace"])
def test_t_angle_rejects_mutations(mutant: Mutant) -> None:
    """kat/madlib.py power runs: d = 384, n = 20,000, v = e₁ (seed 6500)."""
    d = 384
    U = mutant(20_000, d, 10.0, gen(6500)).numpy()
    t = U[:, 0] / np.linalg.norm(U, axis=1)
    assert ks_pvalue((1 + t) / 2, stats.beta((d - 1) / 2, (d - 1) / 2).cdf) < ALPHA


# --------------------------------------------------------------------------- T-indep
def _two_copy_noise(
    key_of_row: Callable[[int], int], n_rows: int = 5000, d: int = 16
) -> tuple[np.ndarray, np.ndarray]:
    """Per row: two copies of one candidate through ``Madlib.perturb``; returns (Z1, Z2) [n_rows, d]."""
    mech = Madlib(epsilon=10.0)
    x = torch.from_numpy(np.random.default_rng(6600).standard_normal((1, d)).astype(np.float32)).repeat(2, 1)
    Z1, Z2 = np.empty((n_rows, d)), np.empty((n_rows, d))
    for r in range(n_rows):
        q = mech.perturb(x, key_of_row(r))
        z = (q.double() - x.double()).numpy()
        Z1[r], Z2[r] = z[0], z[1]
    return Z1, Z2


def _indep_ok(Z1: np.ndarray, Z2: np.ndarray) -> bool:
    """T-indep (a): Kendall τ of ⟨Z, v⟩ within rows and between rows k, k+1 not significant (α/2 each;
    a constant sequence counts as significant), and no two noise vectors equal."""
    v = np.ones(Z1.shape[1]) / math.sqrt(Z1.shape[1])
    a, b = Z1 @ v, Z2 @ v
    within = float(stats.kendalltau(a, b).pvalue)
    across = float(stats.kendalltau(a[:-1], a[1:]).pvalue)
    allz = np.concatenate([Z1, Z2])
    distinct = len(np.unique(allz, axis=0)) == len(allz)
    return within > ALPHA / 2 and across > ALPHA / 2 and distinct  # NaN p-values compare False


def test_t_indep_rows_and_positions() -> None:
    """(a) 5,000 seeded rows of two copies of one candidate (seed 6601)."""
    assert _indep_ok(*_two_copy_noise(lambda r: row_key(6601, r)))


def test_t_indep_rejects_shared_noise_and_reused_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutations: one noise vector per row; every row's key alike."""

    def shared(self: Madlib, x: torch.Tensor, streams: Streams | torch.Generator) -> torch.Tensor:
        n, d = x.shape
        first = as_streams(streams, n, x.device).select(torch.zeros(1, dtype=torch.int64))  # token 0's stream
        return (x.double() + sample_madlib_noise(first, 1, d, self.epsilon)).float()

    with monkeypatch.context() as m:
        m.setattr(Madlib, "perturb", shared)
        assert not _indep_ok(*_two_copy_noise(lambda r: row_key(6602, r), n_rows=500))
    assert not _indep_ok(*_two_copy_noise(lambda r: row_key(6603, 0), n_rows=500))


def random_vocab(tmp_path: Path, seed: int, V: int = 200, d: int = 8) -> str:
    E = np.random.default_rng(seed).standard_normal((V, d)) / math.sqrt(d)
    return str(write_vectors(tmp_path / f"vocab_{seed}.txt", [f"w{i}" for i in range(V)], E))


def test_t_indep_repeated_word(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(b) One word ×60 at the ε that ``calibrate`` gives for replacement rate 0.5: ≥ 5 distinct
    outputs; shared noise across positions gives exactly 1 (seed 6604)."""
    model = random_vocab(tmp_path, 6604)
    eps = calibrate(target_rate=0.5, model=model).epsilon
    assert eps is not None
    text = " ".join(["w17"] * 60)
    priv = Privatizer(PrivatizerConfig(epsilon=eps, model=model), seed=2**40 + 6604)
    assert len(set(priv.privatize([text])[0].split())) >= 5

    def shared(self: Madlib, x: torch.Tensor, streams: Streams | torch.Generator) -> torch.Tensor:
        n, d = x.shape
        first = as_streams(streams, n, x.device).select(torch.zeros(1, dtype=torch.int64))  # token 0's stream
        return (x.double() + sample_madlib_noise(first, 1, d, self.epsilon)).float()

    monkeypatch.setattr(Madlib, "perturb", shared)
    # the release reads E's rows itself on the CPU (madlib.py, perturb_positions): route it through the mutation
    monkeypatch.setattr(
        Madlib, "perturb_positions", lambda self, space, p, st: self.perturb(self.inputs(space, p), st)
    )
    broken = Privatizer(PrivatizerConfig(epsilon=eps, model=model), seed=2**40 + 6604)
    assert len(set(broken.privatize([text])[0].split())) == 1


def test_t_indep_splits_and_streams(tmp_path: Path) -> None:
    """(c) Row 0 of split 'train' and of 'test' (same seed) get different noise; so do streams 0 and 1."""
    mech = Madlib(epsilon=10.0)
    x = torch.zeros((4, 16), dtype=torch.float32)
    z = {
        key: mech.perturb(x, row_key(6605, 0, split, stream))
        for key, (split, stream) in {"train": ("train", 0), "test": ("test", 0), "s1": ("train", 1)}.items()
    }
    assert not torch.equal(z["train"], z["test"]) and not torch.equal(z["train"], z["s1"])
    assert torch.equal(z["train"], mech.perturb(x, row_key(6605, 0, "train", 0)))  # reproducible
    # the same through the Privatizer: 200 tokens at an ε that replaces most of them
    model = random_vocab(tmp_path, 6606)
    text = " ".join(f"w{i % 200}" for i in range(200))
    cfg = PrivatizerConfig(epsilon=1.0, model=model)
    outs = [
        Privatizer(cfg, seed=2**40 + 6606, split=s, stream=k).privatize([text])[0]
        for s, k in (("train", 0), ("test", 0), ("train", 1), ("train", 0))
    ]
    assert outs[0] != outs[1] and outs[0] != outs[2] and outs[0] == outs[3]


# --------------------------------------------------------------------------- T-1D closed form
T1D = {
    1.0: [
        [0.6967346701, 0.2355976882, 0.0676676416],
        [0.3032653299, 0.5127949496, 0.1839397206],
        [0.0410424993, 0.1428972213, 0.8160602794],
    ],
    2.0: [
        [0.8160602794, 0.1747819011, 0.0091578194],
        [0.1839397206, 0.7483926378, 0.0676676416],
        [0.0033689735, 0.0642986681, 0.9323323584],
    ],
}
X_1D = [0.0, 1.0, 3.0]
CELLS_1D = [(-math.inf, 0.5), (0.5, 2.0), (2.0, math.inf)]


def lap_cdf(z: float, eps: float) -> float:
    if z == -math.inf:
        return 0.0
    if z == math.inf:
        return 1.0
    return 0.5 * math.exp(eps * z) if z < 0 else 1 - 0.5 * math.exp(-eps * z)


@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_t1d_closed_form_known_answers(eps: float) -> None:
    P = np.array([[lap_cdf(hi - x, eps) - lap_cdf(lo - x, eps) for lo, hi in CELLS_1D] for x in X_1D])
    np.testing.assert_allclose(P, T1D[eps], atol=5e-11)  # the table is quoted to 10 decimals
    worst = max(
        math.log(P[i, j] / P[k, j]) / (eps * abs(X_1D[i] - X_1D[k]))
        for i in range(3)
        for k in range(3)
        if i != k
        for j in range(3)
    )
    assert worst == pytest.approx(1.0, abs=1e-10)  # the bound is tight


@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_t1d_noise_law(eps: float) -> None:
    """d = 1: Z ~ Laplace(0, 1/ε), KS against F with n = 20,000 (seed 6700 + ε)."""
    z = sample_madlib_noise(gen(6700 + int(eps)), 20_000, 1, eps).numpy()[:, 0]
    assert ks_pvalue(z, np.vectorize(lambda t: lap_cdf(t, eps))) > ALPHA


@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_t1d_privatizer_output_law(tmp_path: Path, eps: float) -> None:
    """The real Privatizer on vocabulary φ = (0, 1, 3): output frequencies vs the exact table, χ² on
    n = 20,000 outputs per input (100 rows × 200 tokens, seed 6710 + ε), α/3 per input."""
    model = str(write_vectors(tmp_path / "t1d.txt", ["x0", "x1", "x2"], np.array([[0.0], [1.0], [3.0]])))
    priv = Privatizer(PrivatizerConfig(epsilon=eps, model=model), seed=2**40 + 6710 + int(eps))
    for i in range(3):
        outs = priv.privatize([" ".join([f"x{i}"] * 200)] * 100)
        counts = Counter(w for o in outs for w in o.split())
        obs = np.array([counts[f"x{j}"] for j in range(3)])
        assert obs.sum() == 20_000
        assert chi2_pvalue(obs, np.array(T1D[eps][i])) > ALPHA / 3
    assert priv.privacy_report()["totals"]["dp_tokens"] == 60_000


# --------------------------------------------------------------------------- T-two-word known answers
TWO_WORD = [
    (1, 1.0, 0.303265329856),
    (1, 2.0, 0.183939720586),
    (1, 4.0, 0.0676676416183),
    (2, 4.0, 0.103421536082),
    (16, 16.0, 0.0274531528917),
    (384, 40.0, 0.15372426475),
    pytest.param(384, 100.0, 0.00550254051476, marks=pytest.mark.slow),
]


@pytest.mark.parametrize(
    ("d", "eps", "p_flip"),
    TWO_WORD,
    ids=["d1-eps1", "d1-eps2", "d1-eps4", "d2-eps4", "d16-eps16", "d384-eps40", "d384-eps100"],
)
def test_two_word_known_answers(tmp_path: Path, d: int, eps: float, p_flip: float) -> None:
    """Two candidates at distance 1: P[M(a) = b] (madlib.md §6), exact binomial test through
    ``perturb`` + ``nearest``; n = 20,000 (d = 384, ε = 100: 200,000), seed 6800 + d + ε."""
    if d == 1:
        assert 0.5 * math.exp(-eps / 2) == pytest.approx(p_flip, rel=1e-11)
    E = np.zeros((2, d))
    E[1, 0] = 1.0
    space = load_space(str(write_vectors(tmp_path / "two.txt", ["a", "b"], E)))
    mech, step = Madlib(epsilon=eps), Nearest()
    n = 200_000 if (d, eps) == (384, 100.0) else 20_000
    flips = 0
    for rep in range(n // 20_000):
        pos = torch.zeros(20_000, dtype=torch.int64)
        st = one_row(row_key(6800 + d + int(eps), rep), 20_000)
        out = step.apply(mech.perturb(mech.inputs(space, pos), st), mech, space, st)
        flips += int((out == 1).sum())
    assert stats.binomtest(flips, n, p_flip).pvalue > ALPHA


# --------------------------------------------------------------------------- T-NN: exact search
def brute64(Q: np.ndarray, E: np.ndarray) -> np.ndarray:
    Q64, E64 = Q.astype(np.float64), E.astype(np.float64)
    out = np.empty(len(Q64), dtype=np.int64)
    for s in range(0, len(Q64), 250):
        out[s : s + 250] = ((Q64[s : s + 250, None, :] - E64[None]) ** 2).sum(-1).argmin(1)
    return out


@pytest.fixture(scope="module")
def nn_case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """E: V = 3,000, d = 32, N(0, 1/d) fp32; 500 madlib queries at each ε ∈ {0.5, 5, 50, 500} (seed 6900)."""
    rng = np.random.default_rng(6900)
    V, d = 3000, 32
    E = (rng.standard_normal((V, d)) / math.sqrt(d)).astype(np.float32)
    Et = torch.from_numpy(E)
    Qs = []
    for k, eps in enumerate((0.5, 5.0, 50.0, 500.0)):
        w = torch.from_numpy(rng.integers(0, V, 500))
        Qs.append(Madlib(epsilon=eps).perturb(Et[w], gen(6900 + k)))
    Q = torch.cat(Qs).numpy()
    return E, Q, brute64(Q, E)


def _search_all(index: ExactIndex, Q: np.ndarray, chunk: int, batch: int) -> np.ndarray:
    out = [
        index.search(torch.from_numpy(Q[s : s + batch]), 1, chunk_size=chunk)[:, 0].numpy()
        for s in range(0, len(Q), batch)
    ]
    return np.concatenate(out)


@pytest.mark.parametrize("chunk", [1, 7, 257, 3000])
@pytest.mark.parametrize("batch", [1, 64, "all"])
def test_t_nn_equals_float64_brute_force(nn_case: NNCase, chunk: int, batch: int | str) -> None:
    """``search`` equals float64 brute force for every chunk size and batch size. All 2,000 queries,
    except where one call per query or per 64 queries over 1- or 7-wide chunks would be slow: there
    the first 16 (batch 1) or 128 (batch 64) queries; batch 1 with chunk ≥ 257: the first 200.
    The narrow chunks run on one thread (thousands of tiny GEMMs are slow on a loaded multi-thread
    pool), which also checks that the result does not depend on the thread count."""
    E, Q, ref = nn_case
    n = len(Q)
    if batch == 1:
        n = 16 if chunk < 257 else 200
    elif batch == 64 and chunk < 257:
        n = 128
    b = n if isinstance(batch, str) else batch
    threads = torch.get_num_threads()
    try:
        if chunk < 257:
            torch.set_num_threads(1)
        got = _search_all(ExactIndex(torch.from_numpy(E)), Q[:n], chunk, b)
    finally:
        torch.set_num_threads(threads)
    assert np.array_equal(got, ref[:n])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_t_nn_cuda_equals_cpu(nn_case: NNCase) -> None:
    E, Q, ref = nn_case
    got = ExactIndex(torch.from_numpy(E), "cuda").search(torch.from_numpy(Q), 1)[:, 0].numpy()
    assert np.array_equal(got, ref)


def exact_knn(Q: np.ndarray, E: np.ndarray, k: int) -> list[list[int]]:
    out = []
    for q in Q:
        D = sorted(
            (sum((Fraction(float(a)) - Fraction(float(b))) ** 2 for a, b in zip(q, e, strict=True)), i)
            for i, e in enumerate(E)
        )
        out.append([i for _, i in D[:k]])
    return out


F32 = np.float32


@pytest.mark.parametrize(("E", "q", "k", "expected"), [c[1:] for c in N_CASES], ids=[c[0] for c in N_CASES])
def test_search_constructed_cases(E: np.ndarray, q: np.ndarray, k: int, expected: Any) -> None:
    """space.md §5 N1–N5 (kat/madlib.py), every chunk size."""
    for chunk in (1, 2, len(E)):
        got = ExactIndex(torch.from_numpy(E)).search(torch.from_numpy(q), k, chunk_size=chunk)[0].tolist()
        assert got == expected
    assert exact_knn(q, E, k)[0] == expected


def test_search_cases_reject_mutations() -> None:
    """The constructed cases catch: float64 without the exact fallback (N4), argmin over fp32 scores only
    (N5), tie-break by highest id (N1)."""
    E4, q4 = N_CASES[4][1], N_CASES[4][2]
    assert brute64(q4, E4)[0] == 0  # float64 brute force alone answers 0; exact is 1
    E5, q5 = N_CASES[5][1], N_CASES[5][2]
    s32 = q5 @ (F32(-2) * E5).T + (E5.astype(np.float64) ** 2).sum(1).astype(F32)
    assert int(np.argmin(s32[0])) == 0  # fp32 scores tie: the fp32-only argmin answers 0
    E1, q1 = N_CASES[0][1], N_CASES[0][2]
    d = ((q1.astype(np.float64) - E1) ** 2).sum(1)
    assert int(len(d) - 1 - np.argmin(d[::-1])) == 3  # highest-id tie-break answers 3; required 1


def test_search_k2_against_exact_arithmetic() -> None:
    """k = 2 on an integer grid full of ties and duplicates, against Fraction arithmetic (seed 6901)."""
    rng = np.random.default_rng(6901)
    E = rng.integers(-2, 3, (40, 3)).astype(F32)
    Q = (rng.integers(-4, 5, (200, 3)) / 2).astype(F32)
    ref = exact_knn(Q, E, 2)
    for chunk in (1, 7, 40):
        got = ExactIndex(torch.from_numpy(E)).search(torch.from_numpy(Q), 2, chunk_size=chunk).tolist()
        assert got == ref


# --------------------------------------------------------------------------- claim and test mode
def test_madlib_claim_line(line_vocab: str) -> None:
    """madlib.md §3, accounting.md §2: line vocabulary at ε = 2: ε_tok = ε·diam = 6, pair bound ε·d, δ = 0."""
    space = load_space(line_vocab)
    claim = Madlib(epsilon=2.0).claim(space)
    assert claim.guarantee == "metric_dp" and claim.metric == "euclidean" and claim.certified
    assert claim.epsilon_token == pytest.approx(6.0, rel=1e-12) and claim.delta_token == 0.0
    assert claim.pair_bound is not None and claim.pair_bound(0, 3) == pytest.approx(6.0, rel=1e-12)
    assert claim.row_epsilon(5) == pytest.approx(30.0, rel=1e-12)


def test_madlib_test_mode_infinite_epsilon(line_vocab: str) -> None:
    """ε = ∞ (test mode only): no draw, q = φ(w), so nearest returns w."""
    space = load_space(line_vocab)
    mech = Madlib(epsilon=math.inf, test_mode=True)
    g = gen(6950)
    state = g.get_state()
    pos = torch.arange(4)
    q = mech.perturb(mech.inputs(space, pos), g)
    assert torch.equal(q, space.E[pos]) and torch.equal(g.get_state(), state)
    assert Nearest().apply(q, mech, space, one_row(row_key(6950, 0), 4)).tolist() == [0, 1, 2, 3]
    with pytest.raises(InvalidParameterError, match="epsilon"):
        Madlib(epsilon=math.inf)


@pytest.mark.parametrize("d", [3, 300, 384])
def test_batched_perturb_equals_perturb_row_by_row(d):
    """One perturb() of several rows' tokens gives each row exactly its own perturb(x, key), and the
    noise is x + r·G/‖G‖ with G the token's NOISE normals and r its RADIUS Gamma(d)/ε (docs, "Sampling")."""
    g = torch.Generator().manual_seed(d)
    sizes = [1, 0, 17, 1, 1, 40, 2]
    xs = [torch.randn(n, d, generator=g) for n in sizes]
    keys = [row_key(100 + d, i) for i in range(len(sizes))]
    mech = Madlib(epsilon=7.5)
    st = streams_for_rows(keys, sizes)
    got = mech.perturb(torch.cat(xs), st)
    want = torch.cat([mech.perturb(x, k) for x, k in zip(xs, keys, strict=True)])
    assert got.dtype == torch.float32 and torch.equal(got, want)
    x = torch.cat(xs).double()
    G = st.normals(Draw.NOISE, d)
    r = st.gamma(Draw.RADIUS, float(d)) / 7.5
    assert torch.equal(got, (x + G * (r / torch.linalg.vector_norm(G, dim=1))[:, None]).float())
    # mutation check: the radius and direction read from the other draw kinds give other outputs
    G2 = st.normals(Draw.RADIUS, d)
    r2 = st.gamma(Draw.NOISE, float(d)) / 7.5
    assert not torch.equal(got, (x + G2 * (r2 / torch.linalg.vector_norm(G2, dim=1))[:, None]).float())
