"""Known answers for santext.md: santext, santext_plus, mahalanobis. numpy/scipy only.

Vocabularies: T5 (five points in R^2) and L12 (0, 1, 2.00..2.09 on a line), as in kat/tem.py.
"""
import numpy as np
from scipy import stats, special

np.set_printoptions(precision=10, suppress=True, linewidth=120)

T5 = np.array([[0, 0], [1, 0], [0, 1], [3, 0], [0, 4]], dtype=np.float64)
L12 = np.array([[0.0, 0]] + [[1.0, 0]] + [[2.0 + 0.01 * j, 0] for j in range(10)])


def dist(A, B=None):
    B = A if B is None else B
    return np.sqrt(((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))


def santext_matrix(E, eps, half=True, cols=None):
    D = dist(E)
    if cols is not None:
        D = D[:, cols]
    s = -D * (eps / 2.0 if half else eps)
    return special.softmax(s, axis=1)


def sensitive_set(counts, w):
    """n_S = floor(w V) least frequent, ties by smaller id first (§9.2)."""
    V = len(counts)
    nS = int(np.floor(w * V + 1e-12))
    order = np.lexsort((np.arange(V), counts))  # count ascending, then id ascending
    return np.sort(order[:nS])


def santext_plus_matrix(E, eps, counts, w, p):
    V = len(E)
    S = sensitive_set(counts, w)
    Q = santext_matrix(E, eps, cols=S)  # V x |S|
    P = np.zeros((V, V))
    sens = np.zeros(V, bool)
    sens[S] = True
    for x in range(V):
        q = 1.0 if sens[x] else p
        P[x, S] = q * Q[x]
        if not sens[x]:
            P[x, x] += 1 - p
    return P, S


def worst(P, E, eps, cols):
    D = dist(E)
    V = len(E)
    b = -np.inf
    for a in range(V):
        for c in range(V):
            if a != c:
                b = max(b, np.max(np.log(P[a, cols] / P[c, cols]) - eps * D[a, c]))
    return b


def worst_ratio(P, E, eps):
    D = dist(E)
    V = len(E)
    return max(np.max(np.log(P[a] / P[b])) / (eps * D[a, b]) for a in range(V) for b in range(V) if a != b)


if __name__ == "__main__":
    eps = 2.0
    print("== §9.1 santext on T5, eps=2 ==")
    P = santext_matrix(T5, eps)
    print(P)
    print("worst ln-ratio/(eps d) =", worst_ratio(P, T5, eps), "(<= 1)")
    PL = santext_matrix(L12, eps)
    PLm = santext_matrix(L12, eps, half=False)
    print("L12: P[0|0] =", PL[0, 0], " P[0|1] =", PL[1, 0],
          " worst ratio/(eps d): correct", worst_ratio(PL, L12, eps), " no-1/2 mutant", worst_ratio(PLm, L12, eps))
    rng = np.random.default_rng(9)
    n = 400_000
    G = rng.gumbel(size=(n, 5))
    x = np.argmax(-dist(T5)[0] * eps / 2 + G, axis=1)
    print("Gumbel-max MC for w=0, chi2 p =", stats.chisquare(np.bincount(x, minlength=5), P[0] * n).pvalue)

    print("\n== §9.2 santext_plus on T5, eps=2, counts=[50,7,3,3,900], w=0.6, p=0.3 ==")
    counts = np.array([50, 7, 3, 3, 900])
    Pp, S = santext_plus_matrix(T5, eps, counts, 0.6, 0.3)
    print("sensitive set V_S =", S.tolist())
    print(Pp)
    print("rows sum to", Pp.sum(1))
    e0 = worst(Pp, T5, eps, S)
    print("protected outputs: max_{x,x',y in V_S} ln(P[y|x]/P[y|x']) - eps d(x,x') =", e0,
          " <= ln(1/p) =", np.log(1 / 0.3))
    Pq, _ = santext_plus_matrix(T5, 0.5, counts, 0.6, 0.3)
    print("same with eps=0.5: excess =", worst(Pq, T5, 0.5, S), " <= ln(1/p); attained by x=0 (V_N), x'=1 (V_S)?",
          np.log(Pq[1, S] / Pq[0, S]) - 0.5 * 1.0)
    print("n_S for w=0.9, V=30517:", int(np.floor(0.9 * 30517 + 1e-12)),
          "; w=0.5:", int(np.floor(0.5 * 30517 + 1e-12)))
    P1, S1 = santext_plus_matrix(T5, eps, counts, 1.0, 0.3)
    print("w=1 equals santext:", np.allclose(P1, P), " |V_S| =", len(S1))

    print("\n== §9.3 mahalanobis on T5, lambda=0.2 ==")
    E = T5
    mu = E.mean(0)
    Sigma = (E - mu).T @ (E - mu) / len(E)
    m = E.shape[1]
    St = Sigma * (m / np.trace(Sigma))
    M = 0.2 * St + 0.8 * np.eye(m)
    ev, U = np.linalg.eigh(M)
    Mh = U @ np.diag(np.sqrt(ev)) @ U.T
    Mih = U @ np.diag(1 / np.sqrt(ev)) @ U.T
    print("Sigma (population, ddof=0) =\n", Sigma)
    print("Sigma~ = m Sigma / tr Sigma =\n", St)
    print("M = 0.2 Sigma~ + 0.8 I =\n", M)
    print("eig(M) =", ev, " M^{1/2} =\n", Mh)
    print("Euclidean-equivalent factor 1/sqrt(lambda_min(M)) =", 1 / np.sqrt(ev[0]),
          " <= 1/sqrt(0.8) =", 1 / np.sqrt(0.8))
    dM = dist(E @ Mih)
    print("d_M(0,1) =", dM[0, 1], " d_M(0,4) =", dM[0, 4], " diam_M =", dM.max(), " diam =", dist(E).max())

    # Monte Carlo: Z = Y M^{1/2} u (no re-normalisation), Y ~ Gamma(m, 1/eps)
    n = 200_000
    N = rng.standard_normal((n, m))
    u = N / np.linalg.norm(N, axis=1, keepdims=True)
    Y = rng.gamma(m, 1 / eps, size=n)
    Z = Y[:, None] * (u @ Mh)  # row-vector form, M symmetric
    W = Z @ Mih
    print("MC: ||M^{-1/2} Z|| mean =", np.linalg.norm(W, axis=1).mean(), " (m/eps =", m / eps, ")",
          " KS vs Gamma(m,1/eps) p =", stats.kstest(np.linalg.norm(W, axis=1), stats.gamma(m, scale=1 / eps).cdf).pvalue)
    ang = np.arctan2(W[:, 1], W[:, 0])
    print("MC: direction of M^{-1/2} Z uniform, KS p =", stats.kstest(ang, stats.uniform(-np.pi, 2 * np.pi).cdf).pvalue)
    print("E||Z||^2 = E[Y^2] tr(M)/m =", (m * (m + 1) / eps**2) * np.trace(M) / m, " MC:", (Z**2).sum(1).mean())
    # re-normalised variant (not the paper's): ||Z|| ~ Gamma(m, 1/eps) exactly; direction not uniform in M-frame
    Zr = Y[:, None] * (u @ Mh) / np.linalg.norm(u @ Mh, axis=1, keepdims=True)
    print("re-normalised variant: ||M^{-1/2} Z|| KS vs Gamma p =",
          stats.kstest(np.linalg.norm(Zr @ Mih, axis=1), stats.gamma(m, scale=1 / eps).cdf).pvalue)
