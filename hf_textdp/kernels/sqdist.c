/* Float64 squared distances of (query, row) pairs for the exact search's verification (hf_textdp/search/verify.py,
 * docs/mechanisms/space.md §5.4).
 *
 * D = sum_j (double(q_j) - double(e_j))^2: per term one subtraction, one multiplication and one addition,
 * each rounded to nearest (built as ISO C, so no contraction into FMA and no reassociation beyond the
 * eight explicit partial sums); the bound (d + 2) u64 D of §5.4 holds for any order of the additions.
 */
#include <stdint.h>

/* out[i] = D of query rows[i] (q[B][d], fp32) and row pos[i] (e[V][d], fp32), i in i0 .. i1 - 1 */
void pair_sqdist(const float *q, const float *e, const int64_t *rows, const int64_t *pos, int64_t d, int64_t i0,
                 int64_t i1, double *out) {
    for (int64_t i = i0; i < i1; i++) {
        const float *a = q + rows[i] * d, *b = e + pos[i] * d;
        if (i + 2 < i1) { /* rows of E are read at random: ask for the one after next ahead of time */
            const char *nb = (const char *)(e + pos[i + 2] * d);
            for (int64_t off = 0; off < d * 4; off += 64)
                __builtin_prefetch(nb + off);
        }
        double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t j = 0;
        for (; j + 8 <= d; j += 8) {
            for (int l = 0; l < 8; l++) {
                const double t = (double)a[j + l] - (double)b[j + l];
                acc[l] += t * t;
            }
        }
        double s = 0.0;
        for (; j < d; j++) {
            const double t = (double)a[j] - (double)b[j];
            s += t * t;
        }
        for (int l = 0; l < 8; l++)
            s += acc[l];
        out[i] = s;
    }
}

/* pair_sqdist over pairs 0 .. n - 1 split between `threads` threads of the OpenMP team (built with -fopenmp;
 * else one thread). */
void pair_sqdist_team(const float *q, const float *e, const int64_t *rows, const int64_t *pos, int64_t d, int64_t n,
                      int64_t threads, double *out) {
    const int m = threads > 1 ? (int)threads : 1;
#pragma omp parallel for num_threads(m) if (m > 1) schedule(static, 1)
    for (int p = 0; p < m; p++)
        pair_sqdist(q, e, rows, pos, d, n * p / m, n * (p + 1) / m, out);
}

/* The exact search's verification for k <= 16 (docs/mechanisms/space.md §5.4): candidate i is (query rows[i],
 * position pos[i]) at float64 distance D[i], certified to lie in [D - cD, D + cD] with c = coef (the err of
 * search/verify.py's verify_sorted, the same float64 operations). best[b][0 .. k) = query b's first k candidates in
 * (D, position) order; count[b] = its number of candidates (best's unused entries -1 when fewer than k);
 * tie[b] = 1 when one of those k intervals is not strictly below the next candidate's in that order (their
 * exact order is then open: the caller decides it exactly). Candidates in any order, repeats allowed.
 * top_d, top_p: scratch of B (k + 1) entries. */
void verify_top(const double *D, const int64_t *rows, const int64_t *pos, int64_t n, int64_t B, int64_t k,
                double coef, int64_t *best, int64_t *count, int8_t *tie, double *top_d, int64_t *top_p) {
    const int64_t m = k + 1; /* the first k and the one after them */
    for (int64_t b = 0; b < B; b++) {
        count[b] = 0;
        tie[b] = 0;
    }
    for (int64_t i = 0; i < n; i++) {
        const int64_t b = rows[i], have = count[b] < m ? count[b] : m;
        double *td = top_d + b * m;
        int64_t *tp = top_p + b * m;
        int dup = 0;
        for (int64_t j = 0; j < have; j++)
            dup |= tp[j] == pos[i];
        if (dup)
            continue;
        count[b]++;
        if (have == m && !(D[i] < td[m - 1] || (D[i] == td[m - 1] && pos[i] < tp[m - 1])))
            continue;
        int64_t j = have < m ? have : m - 1; /* insertion into the sorted prefix */
        while (j > 0 && (D[i] < td[j - 1] || (D[i] == td[j - 1] && pos[i] < tp[j - 1]))) {
            td[j] = td[j - 1];
            tp[j] = tp[j - 1];
            j--;
        }
        td[j] = D[i];
        tp[j] = pos[i];
    }
    for (int64_t b = 0; b < B; b++) {
        const double *td = top_d + b * m;
        const int64_t *tp = top_p + b * m, have = count[b] < m ? count[b] : m;
        for (int64_t r = 0; r < k; r++)
            best[b * k + r] = r < have ? tp[r] : -1;
        for (int64_t r = 0; r < k && r + 1 < have; r++) {
            const double e0 = coef * td[r], e1 = coef * td[r + 1];
            if (!(td[r] + e0 < td[r + 1] - e1))
                tie[b] = 1;
        }
    }
}
