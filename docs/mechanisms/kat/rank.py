"""Known answers for postprocess.md (post-processing): rank (seed 003's fix), top2,
nearest_excluding_input. numpy/scipy only; a few seconds.

Optional: `python rank.py /path/to/model.safetensors` also prints the auto rank_c
statistic for a BERT input-embedding matrix (candidates = all ids except 0, 100-103).
"""
import sys
import numpy as np
from scipy import stats

np.set_printoptions(precision=10, suppress=True, linewidth=120)


def rank_r(u, lam, V):
    """Inverse-CDF truncated geometric: P(R=r) ∝ exp(-lam r), r = 0..V-1 (§7.4)."""
    u = np.asarray(u, dtype=np.float64)
    r = np.floor(-np.log1p(u * np.expm1(-lam * V)) / lam)
    return np.minimum(r, V - 1).astype(np.int64)


def rank_pmf(lam, V):
    r = np.arange(V)
    return np.exp(-lam * r) * (-np.expm1(-lam)) / (-np.expm1(-lam * V))


def rank_order(E, p):
    """Candidates ordered by rank relative to pivot p: p first, then (d^2 float64, id)."""
    d2 = ((E.astype(np.float64) - E[p].astype(np.float64)) ** 2).sum(1)
    ids = np.arange(len(E))
    others = ids[ids != p]
    order = others[np.lexsort((others, d2[others]))]
    return np.concatenate([[p], order])


def top2(E, z):
    d2 = ((E.astype(np.float64) - z) ** 2).sum(1)
    o = np.lexsort((np.arange(len(E)), d2))
    return o[0], o[1]


def median_rho1_subset(E, K=4096):
    """auto rank_c statistic: median of rho_1 over the fixed subset S (§7.4)."""
    E = E.astype(np.float64)
    V = len(E)
    S = np.arange(V) if V <= K else (np.arange(K) * V) // K
    sq = (E * E).sum(1)
    rho = np.empty(len(S))
    for a in range(0, len(S), 512):
        idx = S[a:a + 512]
        D = sq[idx, None] + sq[None, :] - 2 * E[idx] @ E.T
        D[np.arange(len(idx)), idx] = np.inf
        rho[a:a + 512] = np.sqrt(np.maximum(D.min(1), 0))
    return float(np.median(rho))


if __name__ == "__main__":
    print("== §7.4 truncated geometric: r = floor(-log1p(u*expm1(-lam*V))/lam) ==")
    lam, V = 0.5, 10
    us = [0.0, 0.3, 0.5, 0.9, 0.99, 0.999999]
    print(f"lam={lam} V={V} u={us} -> r={rank_r(us, lam, V).tolist()}")
    print("pmf(lam=0.5, V=10) =", rank_pmf(0.5, 10))
    print("P(r=0) = (1-e^-lam)/(1-e^-lam V):", rank_pmf(0.5, 10)[0])
    lam2, V2 = 1e-6, 30517
    print(f"lam={lam2} V={V2} u=[0.25,0.5,0.75] -> r={rank_r([0.25, 0.5, 0.75], lam2, V2).tolist()} (≈ uniform)")
    lam3 = 40.0
    print(f"lam={lam3} V={V2} u=[0.5, 1-1e-12] -> r={rank_r([0.5, 1 - 1e-12], lam3, V2).tolist()}")
    rng = np.random.default_rng(7)
    x = rank_r(rng.random(1_000_000), 0.5, 10)
    obs = np.bincount(x, minlength=10)
    print("MC 1e6 draws chi2 p =", stats.chisquare(obs, rank_pmf(0.5, 10) * 1e6).pvalue)

    print("\n== §7.4 P(pivot kept) = P(r=0) for auto rank_c = rho~/100, MiniLM rho~ = 0.98747 ==")
    for eps in [10, 40, 80, 120, 200, 500]:
        lam = 0.0098747 * eps
        print(f"eps={eps}: lam={lam:.6f} P(r=0)={rank_pmf(lam, 30517)[0]:.6f} "
              f"E[r]={(np.arange(30517) * rank_pmf(lam, 30517)).sum():.4f}")

    print("\n== §7.4 rank order with ties, vocabulary R6 (rows) ==")
    R6 = np.array([[0, 0], [1, 0], [0, 1], [-1, 0], [2, 0], [0, 0]], dtype=np.float32)
    for p in [0, 5, 4]:
        print(f"pivot {p}: order by rank = {rank_order(R6, p).tolist()}")
    # rank sampling distribution for pivot 0, lam = 0.7: P(output = order[r]) = pmf[r]
    pm = rank_pmf(0.7, 6)
    print("pivot 0, lam=0.7: P(output id) =",
          dict(zip(rank_order(R6, 0).tolist(), np.round(pm, 10).tolist())))

    print("\n== §7.3 top2 ==")
    z = np.array([0.45, 0.1])
    print("R6, z=(0.45,0.1): nearest two =", [int(i) for i in top2(R6, z)], "(0 and 5 tie at d; id 0 first)")
    z = np.array([0.6, 0.0])
    print("R6, z=(0.6,0.0): nearest two =", [int(i) for i in top2(R6, z)])

    print("\n== §7.7 nearest_excluding_input on a 2-token vocabulary {a=0, b=1} ==")
    print("P[M(a)=a] = 0, P[M(b)=a] = 1: ratio P[M(b)=a]/P[M(a)=a] = inf; output reveals input")
    # with madlib noise and plain nearest, P[M(a)=a] > 0: e.g. 1-D, eps=1, d(a,b)=1:
    # noise Laplace(1/eps) on a line: P[nearest = a | a] = 1 - 0.5 exp(-eps*0.5)
    print("1-D madlib eps=1, points 0 and 1, plain nearest: P[a|a] =", 1 - 0.5 * np.exp(-0.5),
          " P[a|b] =", 0.5 * np.exp(-0.5), " ratio =", (1 - 0.5 * np.exp(-0.5)) / (0.5 * np.exp(-0.5)),
          " <= e^1 =", np.e)

    if len(sys.argv) > 1:
        import json, struct
        with open(sys.argv[1], "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            h = json.loads(f.read(n))
            k = [k for k in h if "word_embeddings" in k][0]
            s, e = h[k]["data_offsets"]
            f.seek(8 + n + s)
            E = np.frombuffer(f.read(e - s), dtype=np.float32).reshape(h[k]["shape"])
        keep = np.array([i for i in range(len(E)) if i not in (0, 100, 101, 102, 103)])
        r = median_rho1_subset(E[keep])
        print(f"\nMiniLM: V={len(keep)} median rho_1 over S = {r:.6f}  auto rank_c = {r / 100:.8f}")
