"""Known answers for tem.md (tem). numpy/scipy only, runs in a few seconds.

Prints every number §6 quotes. Tiny vocabulary T5 (five points in R^2):
    id 0 (0,0)  id 1 (1,0)  id 2 (0,1)  id 3 (3,0)  id 4 (0,4)
"""
import numpy as np
from scipy import stats

np.set_printoptions(precision=10, suppress=True, linewidth=120)

T5 = np.array([[0, 0], [1, 0], [0, 1], [3, 0], [0, 4]], dtype=np.float64)
# L12: audit vocabulary in R^1 (as R^2 rows): 0, 1 and ten points 2.00, 2.01, ..., 2.09
L12 = np.array([[0.0, 0]] + [[1.0, 0]] + [[2.0 + 0.01 * j, 0] for j in range(10)])


def gamma_tem(eps, beta, V):
    """gamma = (2/eps) ln((1-beta)(V-1)/beta), clamped at 0 (tem.md §2)."""
    return max(0.0, (2.0 / eps) * (np.log1p(-beta) + np.log(V - 1) - np.log(beta)))


def dist(E):
    return np.sqrt(((E[:, None, :] - E[None, :, :]) ** 2).sum(-1))


def tem_matrix(E, eps, gamma, half=True):
    """Exact P[y | w] = softmax_y(-(eps/2) min(d(w,y), gamma)) (dense form, §6.3)."""
    D = dist(E)
    s = -np.minimum(D, gamma) * (eps / 2.0 if half else eps)
    s -= s.max(1, keepdims=True)
    P = np.exp(s)
    return P / P.sum(1, keepdims=True)


def worst_ratio(P, E, eps):
    """max over w != w', y of ln(P[w,y]/P[w',y]) / (eps d(w,w'))."""
    D = dist(E)
    V = len(E)
    best = 0.0
    for a in range(V):
        for b in range(V):
            if a != b:
                best = max(best, np.max(np.log(P[a] / P[b])) / (eps * D[a, b]))
    return best


def list_sampler(E, w, eps, gamma, rng, n):
    """Appendix-B list version with the bottom element, resolved uniformly (§6.4)."""
    d = np.sqrt(((E - E[w]) ** 2).sum(1))
    inside = np.flatnonzero(d <= gamma)
    outside = np.flatnonzero(d > gamma)
    scores = list(-d[inside])
    if len(outside):
        scores.append(-gamma + (2.0 / eps) * np.log(len(outside)))
    scores = np.array(scores)
    G = rng.gumbel(size=(n, len(scores)))
    k = np.argmax(scores + (2.0 / eps) * G, axis=1)
    out = np.empty(n, dtype=int)
    m = k < len(inside)
    out[m] = inside[k[m]]
    nb = (~m).sum()
    if nb:
        out[~m] = outside[rng.integers(0, len(outside), size=nb)]
    return out


def dense_sampler(E, w, eps, gamma, rng, n):
    d = np.sqrt(((E - E[w]) ** 2).sum(1))
    G = rng.gumbel(size=(n, len(E)))
    return np.argmax(-np.minimum(d, gamma) + (2.0 / eps) * G, axis=1)


def chi2_check(samples, p, V):
    obs = np.bincount(samples, minlength=V)
    m = p > 0
    return stats.chisquare(obs[m], p[m] * len(samples)).pvalue


if __name__ == "__main__":
    print("== §6.2 gamma(eps, beta, V) ==")
    for eps, beta, V in [(1.0, 0.001, 30517), (10.0, 0.001, 30517), (20.0, 0.001, 30517),
                         (2.0, 0.2, 5), (2.0, 0.001, 5), (1.0, 0.9, 2)]:
        print(f"eps={eps:g} beta={beta:g} V={V}: gamma={gamma_tem(eps, beta, V):.10f}")
    print("(2) ln((1-0.001)(30516)/0.001) =", 2 * (np.log1p(-0.001) + np.log(30516) - np.log(0.001)))

    eps, beta = 2.0, 0.2
    g = gamma_tem(eps, beta, 5)
    print("\n== §6.6 T5, eps=2, beta=0.2, gamma=ln 16 =", g, "==")
    P = tem_matrix(T5, eps, g)
    print("P[w, y] (rows w = 0..4):")
    print(P)
    print("P[out of gamma-ball | w]:",
          [float(P[w][dist(T5)[w] > g].sum()) for w in range(5)], "<= beta =", beta)
    print("worst ln-ratio / (eps d) =", worst_ratio(P, T5, eps), "(claim: <= 1)")
    P2 = tem_matrix(T5, eps, g, half=False)
    print("no-1/2 mutant: P[0,.] =", P2[0], " worst ratio/(eps d) =", worst_ratio(P2, T5, eps))
    Pinf = tem_matrix(T5, eps, np.inf)
    print("untruncated EM (gamma=inf) P[0,.] =", Pinf[0])

    print("\n== §6.6 L12 audit vocabulary, eps=2, beta=0.001 ==")
    gL = gamma_tem(2.0, 0.001, 12)
    PL = tem_matrix(L12, 2.0, gL)
    PLm = tem_matrix(L12, 2.0, gL, half=False)
    print("gamma =", gL, "(> diam 2.09: no truncation)")
    print("P[0|0] =", PL[0, 0], " P[0|1] =", PL[1, 0], " ratio =", PL[0, 0] / PL[1, 0],
          " bound e^(eps d) =", np.exp(2.0))
    print("worst ln-ratio/(eps d): correct =", worst_ratio(PL, L12, 2.0),
          " no-1/2 mutant =", worst_ratio(PLm, L12, 2.0))
    print("mutant P[0|0] =", PLm[0, 0], " P[0|1] =", PLm[1, 0], " ratio =", PLm[0, 0] / PLm[1, 0])

    print("\n== Monte Carlo: list version with bottom == dense Gumbel == exact ==")
    rng = np.random.default_rng(6)
    n = 400_000
    for w in range(5):
        a = list_sampler(T5, w, eps, g, rng, n)
        b = dense_sampler(T5, w, eps, g, rng, n)
        print(f"w={w}: chi2 p list={chi2_check(a, P[w], 5):.3f} dense={chi2_check(b, P[w], 5):.3f}",
              "freq list", np.round(np.bincount(a, minlength=5) / n, 4))
    # gamma clamped to 0: only the input (and exact duplicates) are inside the ball
    P0 = tem_matrix(T5, eps, 0.0)
    print("\ngamma=0 (clamped): P[0,.] =", P0[0], "(uniform: exact distance is replaced by 0 for all)")
