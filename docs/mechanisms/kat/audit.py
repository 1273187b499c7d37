#!/usr/bin/env python3
"""Reference empirical privacy-loss audit (testing.md §3) and the power numbers of testing.md §1 and §4.

numpy + scipy only; runs in well under 30 s; prints every value that accounting.md and testing.md quote.
Outputs of a mechanism are integers (token ids) or reals (a released coordinate); reals are turned
into integers by a public binning fixed from the selection half before the estimation half is read.
"""
import math
import time

import numpy as np
from scipy import stats

# --------------------------------------------------------------------------------------------
# The audit
# --------------------------------------------------------------------------------------------

def cp_lower(k, n, a):
    """One-sided Clopper-Pearson lower bound: P[p >= lo] >= 1 - a."""
    k = np.asarray(k, dtype=float)
    return np.where(k > 0, stats.beta.ppf(a, np.maximum(k, 1e-300), n - k + 1), 0.0)


def cp_upper(k, n, a):
    """One-sided Clopper-Pearson upper bound: P[p <= hi] >= 1 - a."""
    k = np.asarray(k, dtype=float)
    return np.where(k < n, stats.beta.ppf(1 - a, k + 1, np.maximum(n - k, 1e-300)), 1.0)


def _events_from_selection(ya, yb, n_out, k_max):
    """Nested candidate events, chosen on the selection half only.

    Outputs are ranked by the smoothed empirical ratio P_a/P_b (add-1/2); events are the prefixes
    of the top-k_max outputs (sizes 1..k_max), i.e. the level sets of the estimated likelihood ratio.
    """
    ca = np.bincount(ya, minlength=n_out) + 0.5
    cb = np.bincount(yb, minlength=n_out) + 0.5
    seen = (np.bincount(ya, minlength=n_out) + np.bincount(yb, minlength=n_out)) > 0
    score = np.where(seen, np.log(ca / ca.sum()) - np.log(cb / cb.sum()), -np.inf)
    order = np.argsort(-score, kind="stable")
    order = order[np.isfinite(score[order])][:k_max]
    ev = np.zeros((len(order), n_out), dtype=bool)
    for i in range(len(order)):
        ev[i, order[: i + 1]] = True
    return ev


def audit_pair(sample, a, b, claim, n_sel, n_est, rng, alpha_each, delta=0.0, k_max=4,
               n_bins=32):
    """Audit one ordered-and-reversed pair. sample(x, n, rng) -> int array (token ids) or float array.

    Returns (max lower confidence bound of the log ratio, its point estimate, n_events tested).
    alpha_each is the level left for this pair; it is split over its 2*k_max events by Bonferroni,
    and each event's two one-sided CP bounds get alpha_event/2.
    """
    sa, sb = sample(a, n_sel, rng), sample(b, n_sel, rng)
    ea, eb = sample(a, n_est, rng), sample(b, n_est, rng)
    if np.issubdtype(np.asarray(sa).dtype, np.floating):
        # public binning from the selection half only: quantiles of the pooled selection sample
        edges = np.quantile(np.concatenate([sa, sb]), np.linspace(0, 1, n_bins + 1)[1:-1])
        sa, sb, ea, eb = (np.searchsorted(edges, s) for s in (sa, sb, ea, eb))
        n_out = n_bins
    else:
        n_out = int(max(sa.max(), sb.max(), ea.max(), eb.max())) + 1
    n_events = 2 * k_max
    a_ev = alpha_each / n_events / 2.0
    worst_lcb, worst_pt = -np.inf, -np.inf
    for (sx, sy, ex, ey) in ((sa, sb, ea, eb), (sb, sa, eb, ea)):
        ev = _events_from_selection(sx, sy, n_out, k_max)
        cx = np.bincount(ex, minlength=n_out)
        cy = np.bincount(ey, minlength=n_out)
        kx = ev @ cx
        ky = ev @ cy
        lo = cp_lower(kx, n_est, a_ev) - delta
        hi = cp_upper(ky, n_est, a_ev)
        with np.errstate(divide="ignore", invalid="ignore"):
            lcb = np.where(lo > 0, np.log(np.maximum(lo, 1e-300)) - np.log(hi), -np.inf)
            pt = np.where((kx > 0) & (ky > 0), np.log(kx / n_est) - np.log(np.maximum(ky, 1) / n_est),
                          np.where(kx > 0, np.inf, -np.inf))
        if len(lcb):
            worst_lcb = max(worst_lcb, float(lcb.max()))
            worst_pt = max(worst_pt, float(pt.max()))
    return worst_lcb, worst_pt


def audit(sample, pairs, claim_fn, n_sel, n_est, seed, alpha=1e-3, delta=0.0, k_max=4):
    """Empirical privacy-loss audit.  Passes iff no lower confidence bound exceeds the claim.

    Returns dict(passed, worst_ratio = max over pairs of LCB/claim, per-pair rows).
    Family-wise error on a correct mechanism <= alpha (Bonferroni over pairs and events).
    """
    rng = np.random.default_rng(seed)
    rows = []
    for (a, b) in pairs:
        c = claim_fn(a, b)
        lcb, pt = audit_pair(sample, a, b, c, n_sel, n_est, rng, alpha / len(pairs), delta, k_max)
        rows.append((a, b, c, lcb, pt))
    worst = max(r[3] / r[2] for r in rows)
    return dict(passed=all(r[3] <= r[2] for r in rows), worst_ratio=worst, rows=rows)


# --------------------------------------------------------------------------------------------
# Toy mechanisms on a 1-D public vocabulary (d = 1) and their mutations
# --------------------------------------------------------------------------------------------

VOC = np.array([0.0, 1.0, 2.0, 3.0])          # madlib toy vocabulary (positions on a line)
EPS = 1.0


def nearest(z, voc=VOC):
    return np.abs(z[:, None] - voc[None, :]).argmin(axis=1)


def madlib(scale_mult=1.0, exclude_input=False, voc=VOC, eps=EPS):
    def sample(i, n, rng):
        # 1-D multivariate Laplace = Laplace(0, 1/eps): r ~ Gamma(1, 1/eps), sign uniform
        z = voc[i] + rng.laplace(0.0, scale_mult / eps, n)
        if not exclude_input:
            return nearest(z, voc)
        d = np.abs(z[:, None] - voc[None, :])
        d[:, i] = np.inf                               # unsafe nearest_excluding_input
        return d.argmin(axis=1)
    return sample


def laplace_vector(scale_mult=1.0, eps=EPS):
    def sample(i, n, rng):                            # postprocess="vector": the real is released
        return VOC[i] + rng.laplace(0.0, scale_mult / eps, n)
    return sample


EMVOC = np.concatenate([[0.0, 1.0], 2.0 + 0.01 * np.arange(10)])   # a point, its neighbour, a cluster


def expmech(half=True, eps=EPS, voc=EMVOC):
    """Exponential mechanism / TEM without truncation: P(y|x) ∝ exp(-eps*d(x,y)/2) (Gumbel-max)."""
    c = 0.5 if half else 1.0
    def sample(i, n, rng):
        s = -c * eps * np.abs(voc[None, :] - voc[i])
        return (s + rng.gumbel(size=(n, len(voc)))).argmax(axis=1)
    return sample


CLIP_VOC = np.array([-3.0, -0.5, 0.5, 3.0])     # raw 1-D "embeddings"; clip norm C = 1


def clipped_laplace(clip_input=True, eps=EPS, C=1.0):
    """§3 laplace with clipping, d = 1: Δ1 = 2C, noise Laplace(2C/eps); pure eps-DP per token."""
    def sample(i, n, rng):
        x = np.clip(CLIP_VOC[i], -C, C) if clip_input else CLIP_VOC[i]   # mutation: raw vector
        z = x + rng.laplace(0.0, 2 * C / eps, n)
        return nearest(z, np.clip(CLIP_VOC, -C, C))    # match_space="clipped"
    return sample


def madlib_nd(X, eps, scale_mult=1.0):
    """madlib in d dims: u uniform on the sphere (normalised Gaussian), r ~ Gamma(d, 1/eps), nearest."""
    V, d = X.shape
    def sample(i, n, rng):
        g = rng.standard_normal((n, d))
        z = X[i] + rng.gamma(d, scale_mult / eps, n)[:, None] * g / np.linalg.norm(g, axis=1, keepdims=True)
        return ((z[:, None, :] - X[None]) ** 2).sum(-1).argmin(1)
    return sample


def metric_claim(voc):
    return lambda a, b: EPS * abs(voc[a] - voc[b])


N_SEL, N_EST = 4_000, 20_000
PAIRS = [(0, 1), (1, 2), (0, 3)]
EMPAIRS = [(0, 1), (1, 2)]
CLPAIRS = [(0, 3), (1, 2)]


def run_case(name, sample, pairs, claim, seed):
    t = time.perf_counter()
    r = audit(sample, pairs, claim, N_SEL, N_EST, seed)
    t = time.perf_counter() - t
    print(f"{name:44s} passed={str(r['passed']):5s} worst LCB/claim={r['worst_ratio']:7.3f}"
          f"  ({t*1e3:.0f} ms)")
    for a, b, c, lcb, pt in r["rows"]:
        print(f"    pair ({a},{b}) claim={c:.3f}  max LCB={lcb:8.3f}  max point={pt:8.3f}")
    return r


def power(sample, pairs, claim, reps, seed0):
    fails = sum(not audit(sample, pairs, claim, N_SEL, N_EST, seed0 + s)["passed"] for s in range(reps))
    return fails / reps


def exact_madlib_ratios(scale_mult):
    """Exact singleton log ratios of the 1-D madlib toy (for the known answers)."""
    b = scale_mult / EPS
    mids = (VOC[:-1] + VOC[1:]) / 2
    cdf = lambda t, x: stats.laplace.cdf(t, loc=x, scale=b)
    P = np.array([np.diff(np.concatenate([[0.0], cdf(mids, x), [1.0]])) for x in VOC])
    return P


if __name__ == "__main__":
    t0 = time.perf_counter()
    print("== Clopper-Pearson known answers (one-sided, level a) ==")
    for k, n, a in [(0, 20000, 1e-3), (67, 20000, 1e-3 / 16), (498, 20000, 1e-3 / 16), (20000, 20000, 1e-3)]:
        print(f"  k={k:6d} n={n} a={a:.3e}: lo={float(cp_lower(k, n, a)):.6e} hi={float(cp_upper(k, n, a)):.6e}")

    print("\n== exact output laws of the 1-D madlib toy (vocabulary 0,1,2,3; eps=1) ==")
    for sm in (1.0, 0.5):
        P = exact_madlib_ratios(sm)
        lr = np.log(P[1] / P[0])
        print(f"  scale x{sm}: P(y|0)={np.round(P[0], 6).tolist()}  P(y|1)={np.round(P[1], 6).tolist()}")
        print(f"           max |log P(y|1)/P(y|0)| = {np.abs(lr).max():.6f} (claim eps*d = 1)")

    print(f"\n== audits: N_sel={N_SEL}, N_est={N_EST} per input, alpha=1e-3, k_max=4 ==")
    run_case("madlib 1-D, nearest (correct)", madlib(), PAIRS, metric_claim(VOC), 1)
    run_case("laplace 1-D, vector release (correct)", laplace_vector(), PAIRS, metric_claim(VOC), 2)
    run_case("MUT halved noise scale (madlib nearest)", madlib(0.5), PAIRS, metric_claim(VOC), 3)
    run_case("MUT halved noise scale (vector)", laplace_vector(0.5), PAIRS, metric_claim(VOC), 4)
    run_case("MUT excluded input (nearest_excluding_input)", madlib(exclude_input=True), PAIRS,
             metric_claim(VOC), 5)
    run_case("exp. mechanism exp(-eps d/2) (correct)", expmech(True), EMPAIRS, metric_claim(EMVOC), 6)
    run_case("MUT missing 1/2 in exponent", expmech(False), EMPAIRS, metric_claim(EMVOC), 7)
    run_case("clipped laplace, DP claim eps (correct)", clipped_laplace(True), CLPAIRS, lambda a, b: EPS, 8)
    run_case("MUT sensitivity on clipped, noise on raw", clipped_laplace(False), CLPAIRS, lambda a, b: EPS, 9)

    print("\n== exact worst log ratios of the EM toy ==")
    for half in (True, False):
        c = 0.5 if half else 1.0
        W = np.exp(-c * EPS * np.abs(EMVOC[:, None] - EMVOC[None, :]))
        P = W / W.sum(1, keepdims=True)
        worst = max(np.abs(np.log(P[a] / P[b])).max() / (EPS * abs(EMVOC[a] - EMVOC[b])) for a, b in EMPAIRS)
        print(f"  half={half}: max over pairs of (max_y |log ratio|)/(eps d) = {worst:.6f}")

    print("\n== 2-D madlib on a tiny random matrix (V=8, d=2, rng seed 0; eps = 1/d(w0,w1)) ==")
    X = np.random.default_rng(0).standard_normal((8, 2))
    d01 = float(np.linalg.norm(X[1] - X[0]))
    print(f"  X[0]={np.round(X[0], 6).tolist()} X[1]={np.round(X[1], 6).tolist()} d(w0,w1)={d01:.6f}")
    claim2 = lambda a, b: float(np.linalg.norm(X[a] - X[b])) / d01
    run_case("madlib 2-D nearest (correct)", madlib_nd(X, 1 / d01), [(0, 1)], claim2, 11)
    run_case("MUT halved noise, 2-D nearest", madlib_nd(X, 1 / d01, 0.5), [(0, 1)], claim2, 12)

    R = 50
    print(f"\n== power: failures out of {R} independent audits (seeds 1000+) ==")
    cases = [
        ("correct madlib 1-D nearest", madlib(), PAIRS, metric_claim(VOC)),
        ("correct exp. mechanism", expmech(True), EMPAIRS, metric_claim(EMVOC)),
        ("correct clipped laplace", clipped_laplace(True), CLPAIRS, lambda a, b: EPS),
        ("halved noise (1-D nearest)", madlib(0.5), PAIRS, metric_claim(VOC)),
        ("excluded input", madlib(exclude_input=True), PAIRS, metric_claim(VOC)),
        ("missing 1/2", expmech(False), EMPAIRS, metric_claim(EMVOC)),
        ("clipped/raw mismatch", clipped_laplace(False), CLPAIRS, lambda a, b: EPS),
        ("halved noise (2-D nearest)", madlib_nd(X, 1 / d01, 0.5), [(0, 1)], claim2),
    ]
    for k, (nm, s, p, c) in enumerate(cases):
        f = sum(not audit(s, p, c, N_SEL, N_EST, 1000 * (k + 1) + j)["passed"] for j in range(R))
        print(f"  {nm:30s}: {f}/{R}")

    print("\n== distribution-test power (two-sided one-sample KS, alpha = 1e-3) ==")
    K_A = stats.kstwobign.isf(1e-3)
    K_B = math.sqrt(math.log(2 / 0.01) / 2)        # DKW: power >= 0.99 when sqrt(N)*D >= K_A + K_B
    print(f"  K_alpha(1e-3)={K_A:.4f}  DKW margin for power 0.99={K_B:.4f}  N >= ((K_a+K_b)/D)^2")
    grid = lambda k: np.linspace(0, stats.gamma.isf(1e-12, k) * 1.2, 400001)
    for d in (2, 16, 32, 384):
        x = grid(d)
        D = np.abs(stats.gamma.cdf(x, d) - stats.gamma.cdf(x, d - 1)).max()
        print(f"  radius Gamma(d) vs Gamma(d-1), d={d:4d}: D={D:.6f}  N_0.99={math.ceil(((K_A + K_B) / D) ** 2)}")
    x = np.linspace(-6, 6, 400001)
    for d in (16, 384):
        D = np.abs(stats.norm.cdf(x) - stats.norm.cdf(x * math.sqrt(d))).max()
        print(f"  gaussian coord N(0,s^2) vs N(0,s^2/d), d={d}: D={D:.6f}  N_0.99={math.ceil(((K_A + K_B) / D) ** 2)}")
    rng = np.random.default_rng(5)
    for d in (16,):
        c = rng.uniform(-1, 1, (400000, d)); u1 = (c[:, 0] / np.linalg.norm(c, axis=1)) ** 2
        # exact law of u1^2 for a uniform direction: Beta(1/2, (d-1)/2)
        D = stats.kstest(u1, stats.beta(0.5, (d - 1) / 2).cdf).statistic
        print(f"  direction from the cube, u1^2 vs Beta(1/2,(d-1)/2), d={d}: D~{D:.4f} (MC 4e5)"
              f"  N_0.99={math.ceil(((K_A + K_B) / D) ** 2)}")
        g = rng.standard_normal((400000, d)); rr = np.linalg.norm(g, axis=1) / np.abs(g).sum(1)
        r = rng.gamma(d, 1.0, 400000)
        D = stats.kstest(r * rr, stats.gamma(d).cdf).statistic
        print(f"  direction g/||g||_1 (radius r*||g||_2/||g||_1) vs Gamma(d), d={d}: D~{D:.4f}"
              f"  N_0.99={math.ceil(((K_A + K_B) / D) ** 2)}")

    print("\n== §10 report known answers ==")
    import hashlib
    def scale_stats(E):
        E64 = E.astype(np.float64)
        D = np.sqrt(((E64[:, None, :] - E64[None]) ** 2).sum(-1))
        np.fill_diagonal(D, np.inf); rho1 = D.min(1)
        np.fill_diagonal(D, 0.0)
        return float(np.median(rho1)), float(D.max())
    for nm, E in (("line (4x1)", VOC.reshape(4, 1).astype("<f4")),
                  ("random (8x2, default_rng(0).standard_normal)", X.astype("<f4"))):
        h = hashlib.sha256(np.ascontiguousarray(E).tobytes()).hexdigest()
        med, diam = scale_stats(E)
        print(f"  {nm}: sha256={h}")
        print(f"      median rho1={med:.6f} diam={diam:.6f}; eps=2: eps*median rho1={2*med:.6f}"
              f" per-token eps*diam={2*diam:.6f}; 5-token row dp_epsilon={5*2*diam:.6f}")
    ids = np.array([0, 1, 2, 3], dtype="<i8")
    print(f"  ids sha256 (int64 LE [0,1,2,3]) = {hashlib.sha256(ids.tobytes()).hexdigest()}")

    print("\n== TEM per-token pure eps = eps*min(diam, gamma): exact check on random sets ==")
    rng = np.random.default_rng(7)
    worst = 0.0
    for t in range(200):
        E = rng.standard_normal((12, 3)); eps = rng.uniform(0.2, 5); gam = rng.uniform(0, 4)
        Dm = np.sqrt(((E[:, None] - E[None]) ** 2).sum(-1))
        L = np.exp(-eps * np.minimum(Dm, gam) / 2)      # TEM law: score -min(d, gamma), Gumbel 2/eps
        P = L / L.sum(1, keepdims=True)
        lr = np.abs(np.log(P[:, None, :]) - np.log(P[None, :, :])).max(-1)
        bound = eps * np.minimum(Dm, gam)
        np.fill_diagonal(bound, 1.0); np.fill_diagonal(lr, 0.0)
        worst = max(worst, (lr / bound).max())
        assert lr.max() <= eps * min(Dm.max(), gam) + 1e-12
    print(f"  max over 200 random sets of (log ratio)/(eps*min(d,gamma)) = {worst:.6f} (<= 1)")
    # Monte Carlo check that Gumbel-max with the ⊥ list version has that law (one set)
    E = rng.standard_normal((12, 3)); eps, gam = 2.0, 1.5
    Dm = np.sqrt(((E[:, None] - E[None]) ** 2).sum(-1)); w = 0
    inside = Dm[w] <= gam
    s = np.where(inside, -Dm[w], -np.inf)
    n = 200000
    sc = np.concatenate([np.tile(s, (n, 1)), np.full((n, 1), -gam + np.log((~inside).sum()) * 2 / eps)], 1)
    pick = (sc * eps / 2 + rng.gumbel(size=sc.shape)).argmax(1)
    out = np.where(pick < 12, pick, -1)
    bot = out == -1
    out[bot] = rng.choice(np.flatnonzero(~inside), bot.sum())
    emp = np.bincount(out, minlength=12) / n
    L = np.exp(-eps * np.minimum(Dm[w], gam) / 2); P = L / L.sum()
    print(f"  MC list-with-⊥ vs law: max |emp - P| = {np.abs(emp - P).max():.5f} (n={n})")
    print(f"  ln(1e6)={math.log(1e6):.6f} log2(1e6)={math.log2(1e6):.6f} log10(1e6)={math.log10(1e6):.6f}")
    print(f"\ntotal {time.perf_counter() - t0:.1f} s")
