#!/usr/bin/env python3
"""Known answers for space.md (setting, search), randomness.md and madlib.md.

Default run: numpy + scipy only, < 30 s. Prints every number quoted in §1/§2.
Optional:  --minilm PATH   (PATH = model.safetensors of all-MiniLM-L6-v2, or its folder)
           adds the MiniLM scale facts (~15 s); with --full also the exact
           full-vocabulary rho1 median and diameter (~2 min on 2 cores).
"""
import argparse, hashlib, json, math, os, struct, sys, time
from fractions import Fraction
import numpy as np
from scipy import integrate, optimize, special, stats

T0 = time.time()


def hdr(s):
    print("\n== " + s)


# ---------------------------------------------------------------- §1.6 randomness
def derive_row_seed(seed, row_id, split="", stream=0):
    assert 0 <= seed < 2**64 and 0 <= row_id < 2**63 and 0 <= stream < 2**63
    sb = split.encode("utf-8")
    key = (b"hf_textdp/rng/v1\x00" + seed.to_bytes(8, "little") + stream.to_bytes(8, "little")
           + len(sb).to_bytes(4, "little") + sb + row_id.to_bytes(8, "little"))
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") & (2**63 - 1)


hdr("§1.6 derive_row_seed(seed, row_id, split, stream)")
for args in [(0, 0, "", 0), (1, 0, "", 0), (1, 1, "", 0), (1, 2**40, "", 0),
             (2**64 - 1, 7, "", 0), (1, 0, "test", 0), (1, 0, "", 1), (42, 17, "train", 0)]:
    print("derive_row_seed%r = %d" % (args, derive_row_seed(*args)))


# ---------------------------------------------------------------- §1.5 exact search
U32 = 2.0 ** -24


def exact_sqdist(q, e):
    """exact squared distance of two fp32 vectors as a Fraction"""
    return sum((Fraction(float(a)) - Fraction(float(b))) ** 2 for a, b in zip(q, e))


def exact_knn(Q, E, k=1):
    """reference: exact arithmetic, ties by lowest index (for tiny cases)"""
    out = []
    for q in Q:
        D = [(exact_sqdist(q, e), i) for i, e in enumerate(E)]
        D.sort()
        out.append([i for _, i in D[:k]])
    return out


def fast_knn(Q, E, k=1, chunk=257):
    """§1.5 reference algorithm: fp32 chunked scores + bound, fp64 re-check, exact fallback"""
    Q = np.asarray(Q, np.float32); E = np.asarray(E, np.float32)
    V, d = E.shape
    E64 = E.astype(np.float64)
    n32 = (E64 ** 2).sum(1).astype(np.float32)
    R = float(np.sqrt((E64 ** 2).sum(1).max()))
    qn = np.sqrt((Q.astype(np.float64) ** 2).sum(1))
    eta = 2 * (d + 3) * U32 * (R * R + 2 * qn * R)
    S = np.empty((Q.shape[0], V), np.float32)
    for s in range(0, V, chunk):     # fp32 chunk scores  s~ = |e|^2 - 2 q.e
        S[:, s:s + chunk] = Q @ (np.float32(-2) * E[s:s + chunk]).T + n32[s:s + chunk]
    out, n_exact = [], 0
    for b in range(Q.shape[0]):
        mk = np.partition(S[b], k - 1)[k - 1]
        K = np.nonzero(S[b].astype(np.float64) <= float(mk) + 2 * eta[b])[0]
        q64 = Q[b].astype(np.float64)
        D = ((q64[None, :] - E64[K]) ** 2).sum(1)
        e64 = 2 * (d + 3) * 2.0 ** -53 * D
        order = np.lexsort((K, D))
        lo, hi = D - e64, D + e64
        top = order[:k]
        # shortcut valid iff top-k intervals are disjoint from each other and the rest
        ok = True
        srt = order[:min(len(order), k + 1)]
        for i in range(len(srt) - 1):
            if hi[srt[i]] >= lo[srt[i + 1]]:
                ok = False
        if len(order) > k and hi[order[k - 1]] >= lo[order[k:]].min():
            ok = False
        if ok:
            out.append([int(K[i]) for i in top])
        else:
            n_exact += 1
            ex = sorted((exact_sqdist(Q[b], E[c]), int(c)) for c in K)
            out.append([c for _, c in ex[:k]])
    return out, n_exact


def brute64(Q, E):
    Q = np.asarray(Q, np.float64); E = np.asarray(E, np.float64)
    return np.argmin(((Q[:, None, :] - E[None]) ** 2).sum(-1), axis=1)


hdr("§1.5 constructed search cases (ids are positions in C)")
f32 = np.float32
# N1 duplicate rows: rows 1 and 3 identical, query = row 3 -> lowest id 1
E = np.array([[0, 0], [1, 2], [5, 5], [1, 2]], f32)
print("N1 duplicate rows, q = row 3 :", fast_knn([[1, 2]], E)[0][0][0], "(expected 1)")
# N2 exact midpoint
E = np.array([[0, 0, 0], [1, 0, 0], [9, 9, 9]], f32)
print("N2 exact midpoint q=(0.5,0,0):", fast_knn([[0.5, 0, 0]], E)[0][0][0], "(expected 0)")
# N3 top-2 with a 4-way tie
E = np.array([[1, 0], [0, 1], [-1, 0], [0, -1]], f32)
print("N3 top-2, q=(0,0)            :", fast_knn([[0, 0]], E, k=2)[0][0], "(expected [0, 1])")
print("N3 top-2, q=(0.25,0.25)      :", fast_knn([[0.25, 0.25]], E, k=2)[0][0], "(expected [0, 1])")
# N4 float64 cannot resolve, exact can
a = f32(2.0 ** -30 * (1 + 2.0 ** -23)); b = f32(-(2.0 ** -30))
E = np.array([[0, a], [0, b]], f32); q = np.array([[1, 0]], f32)
res, nex = fast_knn(q, E)
print("N4 E=[(0,2^-30(1+2^-23)),(0,-2^-30)], q=(1,0): exact ->", res[0][0],
      "| float64 brute force ->", int(brute64(q, E)[0]), "| exact path used:", nex == 1)
assert res[0][0] == 1 and exact_knn(q, E)[0][0] == 1 and brute64(q, E)[0] == 0

# N5 fp32 scores tie, exact order differs (catches "argmin over fp32 scores only")
E = np.array([[21, 39, -62], [21 + 2.0 ** -19, 39, -62]], f32); q = np.array([[1066, -1755, 3928]], f32)
s32 = (q @ (f32(-2) * E).T + (E.astype(np.float64) ** 2).sum(1).astype(f32))[0]
res, nex = fast_knn(q, E)
print("N5 E=[(21,39,-62),(21+2^-19,39,-62)], q=(1066,-1755,3928): result ->", res[0][0],
      "| fp32 scores", s32.tolist(), "-> fp32-only argmin", int(np.argmin(s32)),
      "| float64 brute force ->", int(brute64(q, E)[0]),
      "| exact D1-D0 = %.6f" % float(exact_sqdist(q[0], E[1]) - exact_sqdist(q[0], E[0])))
assert res[0][0] == 1 and exact_knn(q, E)[0][0] == 1 and np.argmin(s32) == 0

hdr("§1.5 random agreement with float64 brute force (V=3000, d=32)")
rng = np.random.default_rng(20240601)
V, d = 3000, 32
E = (rng.standard_normal((V, d)) / np.sqrt(d)).astype(f32)
tot, agree, nexact = 0, 0, 0
for eps in [0.5, 5.0, 50.0, 500.0]:
    w = rng.integers(0, V, 500)
    g = rng.standard_normal((500, d)); u = g / np.linalg.norm(g, axis=1, keepdims=True)
    r = rng.gamma(d, 1 / eps, 500)[:, None]
    Q = (E[w].astype(np.float64) + r * u).astype(f32)
    got, ne = fast_knn(Q, E)
    ref = brute64(Q, E)
    agree += sum(int(x[0] == y) for x, y in zip(got, ref)); tot += len(ref); nexact += ne
print("queries %d, equal to float64 brute force: %d, exact fallbacks: %d" % (tot, agree, nexact))

# bound check: |s~ - s| <= eta on random data (max ratio)
Q = Q.astype(f32)
S32 = (Q @ (f32(-2) * E).T + (E.astype(np.float64) ** 2).sum(1).astype(f32)).astype(np.float64)
S64 = (E.astype(np.float64) ** 2).sum(1)[None, :] - 2 * Q.astype(np.float64) @ E.astype(np.float64).T
R = np.sqrt((E.astype(np.float64) ** 2).sum(1).max()); qn = np.sqrt((Q.astype(np.float64) ** 2).sum(1))
eta = 2 * (d + 3) * U32 * (R * R + 2 * qn * R)
print("max |s~ - s| / eta on these queries: %.4f (must be < 1)" % (np.abs(S32 - S64) / eta[:, None]).max())


# ---------------------------------------------------------------- §2 madlib
hdr("§2 scale facts: |Z| ~ Gamma(d, scale 1/eps)")
for dd in [1, 50, 300, 384]:
    for eps in [10, 40, 80, 100, 120, 200]:
        if dd != 384 and eps not in (10, 100):
            continue
        print("d=%3d eps=%5g  E|Z|=d/eps=%.4f  sd|Z|=sqrt(d)/eps=%.4f  sd<Z,v>=sqrt(d+1)/eps=%.4f"
              % (dd, eps, dd / eps, math.sqrt(dd) / eps, math.sqrt(dd + 1) / eps))


def p_flip_radial(d, delta, eps):
    """P[<Z,v> > delta/2] by integrating the Gamma radius against the angular tail"""
    if d == 1:
        return 0.5 * math.exp(-eps * delta / 2)
    a = delta / 2

    def f(r):
        t = a / r
        if t >= 1:
            return 0.0
        return stats.gamma.pdf(r, d, scale=1 / eps) * 0.5 * special.betainc((d - 1) / 2, 0.5, 1 - t * t)
    lo = a
    hi = (d + 60 * math.sqrt(d) + 200) / eps
    mode = (d - 1) / eps
    pts = [p for p in (mode, mode - 5 * math.sqrt(d) / eps, mode + 5 * math.sqrt(d) / eps) if lo < p < hi]
    v, _ = integrate.quad(f, lo, hi, points=pts or None, limit=400, epsabs=0, epsrel=1e-12)
    return v


def p_flip_gammadiff(d, delta, eps):
    """P[G1 - G2 > delta/2], G1, G2 iid Gamma((d+1)/2, scale 1/eps)"""
    k = (d + 1) / 2
    a = delta / 2
    f = lambda y: stats.gamma.pdf(y, k, scale=1 / eps) * stats.gamma.sf(y + a, k, scale=1 / eps)
    hi = (k + 60 * math.sqrt(k) + 200) / eps
    m = (k - 1) / eps
    v, _ = integrate.quad(f, 0, hi, points=[m] if 0 < m < hi else None, limit=400, epsabs=0, epsrel=1e-12)
    return v


hdr("§2 T-1D: d = 1, vocabulary phi = (0, 1, 3), P[M(i) = j] (rows i, cols j)")


def lap_cdf(z, eps):
    return 0.5 * math.exp(eps * z) if z < 0 else 1 - 0.5 * math.exp(-eps * z)


x = [0.0, 1.0, 3.0]
cells = [(-math.inf, 0.5), (0.5, 2.0), (2.0, math.inf)]
for eps in [1.0, 2.0]:
    P = np.array([[(lap_cdf(hi - xi, eps) if hi < math.inf else 1.0) - (lap_cdf(lo - xi, eps) if lo > -math.inf else 0.0)
                   for (lo, hi) in cells] for xi in x])
    print("eps=%g" % eps)
    for i in range(3):
        print("   M(%d): " % i + "  ".join("%.10f" % p for p in P[i]))
    worst = max(math.log(P[i, j] / P[k, j]) / (eps * abs(x[i] - x[k])) for i in range(3) for k in range(3) if i != k for j in range(3))
    print("   max_{i,k,j} ln(P[i,j]/P[k,j]) / (eps*|x_i-x_k|) = %.10f  (<= 1)" % worst)

hdr("§2 T-two-word: two candidates at distance delta, P[M(a) = b]")
cases = [(1, 1.0, 1.0), (1, 1.0, 2.0), (1, 1.0, 4.0), (2, 1.0, 4.0), (16, 1.0, 16.0),
         (384, 1.0, 40.0), (384, 1.0, 100.0)]
for (dd, delta, eps) in cases:
    pa = p_flip_radial(dd, delta, eps)
    pb = p_flip_gammadiff(dd, delta, eps)
    print("d=%3d delta=%g eps=%5g  P = %.12g   (gamma-difference form %.12g, rel diff %.1e)"
          % (dd, delta, eps, pa, pb, abs(pa - pb) / pa))

hdr("§2 Monte Carlo confirmation of the two-word values (numpy, n per case)")
rng = np.random.default_rng(7)
for (dd, delta, eps) in [(2, 1.0, 4.0), (16, 1.0, 16.0), (384, 1.0, 40.0), (384, 1.0, 100.0)]:
    n = 200_000 if dd < 384 else 100_000
    tot = 0
    for _ in range(n // 20000):
        g = rng.standard_normal((20000, dd)); u1 = g[:, 0] / np.linalg.norm(g, axis=1)
        r = rng.gamma(dd, 1 / eps, 20000)
        tot += int((r * u1 > delta / 2).sum())
    p = p_flip_radial(dd, delta, eps); phat = tot / n
    print("d=%3d eps=%5g  MC %.5f  exact %.5f  z = %.2f" % (dd, eps, phat, p, (phat - p) / math.sqrt(p * (1 - p) / n)))

hdr("§2 calibrate known answers (two candidates, uniform weights)")
print("d=1,  delta=1: eps for replacement rate 0.25 = 2 ln 2 = %.10f" % (2 * math.log(2)))
e16 = optimize.brentq(lambda e: p_flip_radial(16, 1.0, e) - 0.25, 0.01, 100, xtol=1e-12)
print("d=16, delta=1: eps for replacement rate 0.25 = %.8f" % e16)
print("d=16, delta=1: replacement rate at eps=16  = %.10f" % p_flip_radial(16, 1.0, 16.0))
# Rao-Blackwellised direction estimator on the same two-word space (check it converges)
rng = np.random.default_rng(11)
g = rng.standard_normal((200_000, 16)); t = g[:, 0] / np.linalg.norm(g, axis=1)
s = np.where(t > 0, 1.0 / (2 * np.where(t > 0, t, 1)), np.inf)
keep = special.gammainc(16, np.minimum(16.0 * s, 1e300)).mean()
print("direction estimator, n=200000: replacement at eps=16 = %.5f (exact %.5f)" % (1 - keep, p_flip_radial(16, 1.0, 16.0)))

hdr("§2 T-radius / T-angle / T-indep: power of the tests against broken samplers")
KS_ALPHA = 1e-3


def dir_uniform(rng, n, d):
    g = rng.standard_normal((n, d)); return g / np.linalg.norm(g, axis=1, keepdims=True)


def t_radius_p(rr, d, eps):
    return stats.kstest(eps * rr, stats.gamma(d).cdf).pvalue


def t_angle_p(t, d):
    return stats.kstest((1 + t) / 2, stats.beta((d - 1) / 2, (d - 1) / 2).cdf).pvalue


def power(fn, reps=20):
    return sum(fn(np.random.default_rng(1000 + i)) < KS_ALPHA for i in range(reps)) / reps


n, d, eps = 20_000, 384, 100.0
muts = {
    "correct sampler (T-radius)": lambda g: t_radius_p(g.gamma(d, 1 / eps, n), d, eps),
    "radius Gamma(d-1) (T-radius)": lambda g: t_radius_p(g.gamma(d - 1, 1 / eps, n), d, eps),
    "radius Gamma(d, 1/(0.98 eps)) (T-radius)": lambda g: t_radius_p(g.gamma(d, 1 / (0.98 * eps), n), d, eps),
    "Gaussian noise, matched mean norm (T-radius)": lambda g: t_radius_p(np.sqrt(g.chisquare(d, n)) * (math.sqrt(d) / eps), d, eps),
    "iid Laplace coords, scale 1/eps (T-radius)": lambda g: t_radius_p(np.linalg.norm(g.laplace(0, 1 / eps, (n, d)), axis=1), d, eps),
    "correct sampler (T-angle, v=e1)": lambda g: t_angle_p(dir_uniform(g, n, d)[:, 0], d),
    "cube-normalised direction (T-angle, v=e1)": lambda g: t_angle_p((lambda x: x[:, 0] / np.linalg.norm(x, axis=1))(g.uniform(-1, 1, (n, d))), d),
    "Laplace-normalised direction (T-angle, v=e1)": lambda g: t_angle_p((lambda x: x[:, 0] / np.linalg.norm(x, axis=1))(g.laplace(0, 1, (n, d))), d),
}
for name, fn in muts.items():
    reps = 10 if "correct" in name else 5
    print("%-48s rejection rate at alpha=%g, n=%d: %.2f" % (name, KS_ALPHA, n, power(fn, reps)))

# T-angle exact CDF spot values
for dd, tt in [(2, 0.5), (16, 0.25), (384, 0.1)]:
    print("T-angle CDF: P[<u,v> <= %g] for d=%d = %.10f" % (tt, dd, stats.beta((dd - 1) / 2, (dd - 1) / 2).cdf((1 + tt) / 2)))
print("T-radius CDF: P[eps|Z| <= d] for d=384 = %.10f ; median of Gamma(384,1) = %.10f"
      % (special.gammainc(384, 384), stats.gamma(384).median()))


# ---------------------------------------------------------------- optional: MiniLM facts
def load_minilm(path):
    if os.path.isdir(path):
        path = os.path.join(path, "model.safetensors")
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); base = 8 + n
        m = h["embeddings.word_embeddings.weight"]; a, b = m["data_offsets"]
        f.seek(base + a)
        W = np.frombuffer(f.read(b - a), dtype="<f4").reshape(m["shape"]).copy()
    return W


ap = argparse.ArgumentParser()
ap.add_argument("--minilm", default=None)
ap.add_argument("--full", action="store_true")
args = ap.parse_args()
print("\n(elapsed %.1f s)" % (time.time() - T0))
if args.minilm:
    hdr("MiniLM (all-MiniLM-L6-v2) scale facts")
    W = load_minilm(args.minilm)
    specials = [0, 100, 101, 102, 103]          # [PAD] [UNK] [CLS] [SEP] [MASK]
    ids = np.array([i for i in range(W.shape[0]) if i not in specials], np.int64)
    E = np.ascontiguousarray(W[ids]); V, d = E.shape
    hsh = hashlib.sha256(b"hf_textdp/space/v1\x00" + V.to_bytes(8, "little") + d.to_bytes(8, "little")
                         + ids.astype("<i8").tobytes() + E.astype("<f4").tobytes()).hexdigest()
    print("V = %d candidates, d = %d, space_hash = %s" % (V, d, hsh))
    E64 = E.astype(np.float64); sq = (E64 ** 2).sum(1); nr = np.sqrt(sq)
    print("row norm min/median/max = %.4f / %.4f / %.4f" % (nr.min(), np.median(nr), nr.max()))
    sub = np.arange(0, V, 15)                      # fixed public subsample
    rho = np.empty(len(sub))
    E32 = E.astype(np.float32)
    for s in range(0, len(sub), 512):
        blk = sub[s:s + 512]
        D = sq[blk][:, None] + sq[None, :] - 2 * (E32[blk] @ E32.T).astype(np.float64)
        D[np.arange(len(blk)), blk] = np.inf
        rho[s:s + 512] = np.sqrt(np.maximum(D.min(1), 0))
    print("median rho1 over every 15th candidate (n=%d) = %.4f" % (len(sub), np.median(rho)))
    rng = np.random.default_rng(12345)
    N = 4000
    Wd = rng.integers(0, V, N); U = dir_uniform(rng, N, d)
    S = np.empty(N)
    for s in range(0, N, 500):
        w = Wd[s:s + 500]; u = U[s:s + 500]; xw = E64[w]
        ud = (u.astype(np.float32) @ E32.T).astype(np.float64) - (u * xw).sum(1, keepdims=True)
        dd2 = sq[None, :] - 2 * (xw.astype(np.float32) @ E32.T).astype(np.float64) + sq[w][:, None]
        ud[np.arange(len(w)), w] = 0
        with np.errstate(divide="ignore", invalid="ignore"):
            sm = np.where(ud > 0, dd2 / (2 * ud), np.inf)
        S[s:s + 500] = sm.min(1)
    print("keep rate K(eps) (uniform over C; direction estimator, N=%d):" % N)
    for eps in [10, 20, 40, 60, 80, 100, 120, 150, 200, 300, 500, 1000]:
        k = special.gammainc(d, eps * S)
        print("   eps=%5d  keep %.3f  replace %.3f  (se %.3f)" % (eps, k.mean(), 1 - k.mean(), k.std() / math.sqrt(N)))
    for tgt in [0.9, 0.5, 0.1]:
        e = optimize.brentq(lambda e: 1 - special.gammainc(d, e * S).mean() - tgt, 1, 5000)
        print("   eps for replacement rate %.1f = %.1f" % (tgt, e))
    # direct simulation check of the estimator
    print("direct simulation (exact nearest, 3000 uniform tokens per eps):")
    nsq32 = sq.astype(np.float32)
    for eps in [40, 80, 120]:
        M = 3000; w = rng.integers(0, V, M); uu = dir_uniform(rng, M, d)
        q = (E64[w] + rng.gamma(d, 1 / eps, M)[:, None] * uu).astype(np.float32)
        out = np.concatenate([(nsq32[None, :] - 2 * (q[i:i + 500] @ E32.T)).argmin(1) for i in range(0, M, 500)])
        kk = (out == w).mean()
        print("   eps=%d  keep %.3f +- %.3f   (estimator %.3f)" % (eps, kk, math.sqrt(kk * (1 - kk) / M),
                                                                  special.gammainc(d, eps * S).mean()))
    # §1.5 filter statistics on madlib queries
    print("§1.5 filter on madlib queries (1000 per eps): max |s~ - s|/eta, |K_b| stats")
    R = float(np.sqrt(sq.max())); n32 = sq.astype(np.float32); Em2 = (np.float32(-2) * E32)
    for eps in [1, 10, 40, 100, 1000, 1e5]:
        B = 1000; w = rng.integers(0, V, B); uu = dir_uniform(rng, B, d)
        q = (E64[w] + rng.gamma(d, 1 / eps, B)[:, None] * uu).astype(np.float32)
        qn = np.sqrt((q.astype(np.float64) ** 2).sum(1))
        s32 = q @ Em2.T + n32[None, :]
        sx = sq[None, :] - 2 * (q.astype(np.float64) @ E64.T)
        eta = 2 * (d + 3) * U32 * (R * R + 2 * qn * R)
        ratio = (np.abs(s32.astype(np.float64) - sx) / eta[:, None]).max()
        K = (s32.astype(np.float64) <= s32.min(1).astype(np.float64)[:, None] + 2 * eta[:, None]).sum(1)
        print("   eps=%-6g max ratio %.4f  rows with |K|=1: %.3f  max |K| %d" % (eps, ratio, (K == 1).mean(), K.max()))
    if args.full:
        rho = np.empty(V); far = np.empty(V)
        for s in range(0, V, 1024):
            D = sq[s:s + 1024, None] + sq[None, :] - 2 * (E64[s:s + 1024] @ E64.T)
            ix = np.arange(s, min(s + 1024, V))
            D[np.arange(len(ix)), ix] = np.inf; rho[s:s + 1024] = np.sqrt(np.maximum(D.min(1), 0))
            D[np.arange(len(ix)), ix] = -np.inf; far[s:s + 1024] = np.sqrt(np.maximum(D.max(1), 0))
        print("FULL: rho1 min/median/max = %.4f / %.4f / %.4f ; diam = %.4f ; 2 max|e - mean| = %.4f"
              % (rho.min(), np.median(rho), rho.max(), far.max(), 2 * np.linalg.norm(E64 - E64.mean(0), axis=1).max()))
    print("(elapsed %.1f s)" % (time.time() - T0))
