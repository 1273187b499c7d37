/* Float64 squared distances of (query, row) pairs for the exact search's verification (hf_textdp/search.py,
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
