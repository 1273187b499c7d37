/* The fused fp32 filter of the exact search on CPUs with AVX2 and FMA (hf_textdp/cpu/avx2_filter.py;
 * docs/mechanisms/space.md §5.3).
 *
 * A score is A_c = init_c + sum_j q_j * e_cj over the fp32 query and row, by one FMA chain per score
 * (each product exact inside the FMA, one rounding per step), starting from init_c = -fp32(||e_c||^2 / 2):
 * a sum of d + 1 terms in fp32, the setting of the bound in cpu/bf16_filter.py (fused_filter_bound, with no
 * input rounding). Positions come in blocks of NB = 16 consecutive ones; while a tile's scores of a block
 * are in registers, each query keeps its running candidate list (the positions within 2 beta of its running
 * k-th largest block maximum), so no score is written back.
 *
 * Operands: queries as q[tile][d][MR] (MR queries per tile), rows as e[block][d][NB], init[blocks * NB].
 * Built only where the compiler targets AVX2 and FMA (-march=native on such a CPU); no AVX-512 is used.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define MR 6
#define NB 16
#define MAX_REFINE 16 /* the largest k whose second cut list_candidates takes */

int avx2_filter_tile(void) { return MR; }

/* 1 when built with OpenMP (the tiles split between `threads` threads), else 0 (one thread per call) */
int avx2_filter_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

/* The smallest float >= x, for x not NaN: round to nearest, then one step up if that fell below. */
static inline float round_up_float(double x) {
    union {
        float f;
        uint32_t u;
    } v = {(float)x};
    if ((double)v.f >= x)
        return v.f;
    if (v.f == 0.0f)
        return 0x1p-149f;
    v.u = v.f > 0.0f ? v.u + 1 : v.u - 1; /* the next float up (from -inf: -FLT_MAX) */
    return v.f;
}

/* The fp32 threshold 2 beta below a score M that is the A of a real position (as kernels/bf16_filter.c):
 * thr = M - 2 beta, lowered by 2^-40 (|thr| + beta) for its own float64 rounding, then rounded up to fp32. */
static inline float cut_below(float M, double beta) {
    double thr = (double)M - 2.0 * beta;
    thr = thr - 0x1p-40 * ((thr < 0 ? -thr : thr) + beta);
    return round_up_float(thr);
}

/* Each query's running candidate list (kernels/bf16_filter.c, Lists): top[q][0 .. k) its k largest block maxima
 * so far (-inf while fewer), lim[q] = cut_below(top[q][k - 1], beta[q]) (-FLT_MAX while fewer than k), and the
 * positions whose score reached lim[q] when their block went by: cnt[q] of them in pos[q][0 .. cap), scores in
 * score[q][..] (-1: more than cap, dropped). */
typedef struct {
    const double *beta;
    int64_t k, cap;
    float *top, *lim, *score;
    int32_t *cnt, *pos;
} Lists;

/* Block b's scores s[0 .. NB) (the excluded position already -inf) into query q's list. */
static void add_block(const Lists *L, int64_t q, int64_t b, const float *s) {
    float m = s[0];
    for (int i = 1; i < NB; i++)
        m = s[i] > m ? s[i] : m;
    if (!(m >= L->lim[q]))
        return;
    const int64_t k = L->k;
    float *top = L->top + q * k;
    if (m > top[k - 1]) {
        int64_t i = k - 1;
        while (i > 0 && top[i - 1] < m) {
            top[i] = top[i - 1];
            i--;
        }
        top[i] = m;
        if (top[k - 1] > -__builtin_inff())
            L->lim[q] = cut_below(top[k - 1], L->beta[q]);
    }
    int32_t n = L->cnt[q];
    if (n < 0)
        return;
    const float lq = L->lim[q];
    int hits = 0;
    for (int i = 0; i < NB; i++)
        hits += s[i] >= lq;
    float *sc = L->score + q * L->cap;
    int32_t *p = L->pos + q * L->cap;
    if (n + hits > L->cap) { /* drop the listed positions that fell below the risen threshold */
        int32_t w = 0;
        for (int32_t i = 0; i < n; i++)
            if (sc[i] >= lq) {
                sc[w] = sc[i];
                p[w] = p[i];
                w++;
            }
        n = w;
        if (n + hits > L->cap) {
            L->cnt[q] = -1;
            return;
        }
    }
    for (int i = 0; i < NB; i++)
        if (s[i] >= lq) {
            sc[n] = s[i];
            p[n] = (int32_t)(b * NB + i);
            n++;
        }
    L->cnt[q] = n;
}

#define ALL(M) M(0) M(1) M(2) M(3) M(4) M(5)
#define DECL(r) __m256 a##r##0 = _mm256_loadu_ps(ib), a##r##1 = _mm256_loadu_ps(ib + 8);
#define STEP(r)                                                                                        \
    {                                                                                                  \
        const __m256 x = _mm256_broadcast_ss(qk + (r));                                                \
        a##r##0 = _mm256_fmadd_ps(x, e0, a##r##0);                                                     \
        a##r##1 = _mm256_fmadd_ps(x, e1, a##r##1);                                                     \
    }
/* bit r of need: whether a score of query r reaches its list's threshold (excluded position included) */
#define GATE(r)                                                                                        \
    need |= (uint32_t)(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_max_ps(a##r##0, a##r##1),              \
                                                         _mm256_broadcast_ss(L->lim + t * MR + (r)), _CMP_GE_OQ)) != 0) \
            << (r);
#define SAVE(r)                                                                                        \
    if (need >> (r) & 1u) {                                                                            \
        _mm256_storeu_ps(sc + (r) * NB, a##r##0);                                                      \
        _mm256_storeu_ps(sc + (r) * NB + 8, a##r##1);                                                  \
    }

/* The tile's queries r with bit r of need set: block b's scores sc[r][..] into their lists (no accumulator is
 * live across the call). */
static __attribute__((noinline)) void add_blocks(const Lists *L, const int64_t *ex, int64_t t, int64_t b, float *sc,
                                                 uint32_t need) {
    for (; need; need &= need - 1) {
        const int r = __builtin_ctz(need);
        const int64_t q = t * MR + r, c = ex ? ex[q] - b * NB : -1;
        if (c >= 0 && c < NB)
            sc[r * NB + c] = -__builtin_inff();
        add_block(L, q, b, sc + r * NB);
    }
}

/* The lists of the queries of tiles t0 .. t1 - 1 (emptied here), tiles in passes of `pass` (their queries stay
 * in cache while every block goes by), leaving out position ex[q] of query q where ex is given (-1: none). */
static void lists_range(const float *q, const float *e, const float *init, const int64_t *ex, int64_t d,
                        int64_t blocks, int64_t t0, int64_t t1, int64_t pass, const Lists *L) {
    for (int64_t i = t0 * MR; i < t1 * MR; i++) {
        for (int64_t j = 0; j < L->k; j++)
            L->top[i * L->k + j] = -__builtin_inff();
        L->lim[i] = -__FLT_MAX__;
        L->cnt[i] = 0;
    }
    for (int64_t tb = t0; tb < t1; tb += pass) {
        const int64_t te = tb + pass < t1 ? tb + pass : t1;
        for (int64_t b = 0; b < blocks; b++) {
            const float *eb = e + b * d * NB;
            const float *ib = init + b * NB;
            for (int64_t t = tb; t < te; t++) {
                const float *qt = q + t * d * MR;
                ALL(DECL)
                for (int64_t k = 0; k < d; k++) {
                    const __m256 e0 = _mm256_loadu_ps(eb + k * NB), e1 = _mm256_loadu_ps(eb + k * NB + 8);
                    const float *qk = qt + k * MR;
                    ALL(STEP)
                }
                uint32_t need = 0;
                ALL(GATE)
                if (need) {
                    float sc[MR * NB];
                    ALL(SAVE)
                    add_blocks(L, ex, t, b, sc, need);
                }
            }
        }
    }
}

/* lists_range over tiles t0 .. t1 - 1, split between `threads` threads of the OpenMP team (torch's own when the
 * library is built with -fopenmp). */
void avx2_lists(const float *q, const float *e, const float *init, const int64_t *ex, int64_t d, int64_t blocks,
                int64_t t0, int64_t t1, int64_t pass, int64_t threads, const double *beta, int64_t k, int64_t cap,
                float *top, float *lim, int32_t *cnt, int32_t *pos, float *score) {
    const int64_t tiles = t1 - t0, want = threads < tiles ? threads : tiles;
    const int n = want > 1 ? (int)want : 1;
    const Lists L = {beta, k, cap, top, lim, score, cnt, pos};
#pragma omp parallel num_threads(n) if (n > 1)
    {
#ifdef _OPENMP
        const int64_t p = omp_get_thread_num(), m = omp_get_num_threads();
#else
        const int64_t p = 0, m = 1;
#endif
        lists_range(q, e, init, ex, d, blocks, t0 + tiles * p / m, t0 + tiles * (p + 1) / m, pass, &L);
    }
}

/* top[0 .. *have) holds the k largest values seen so far, in decreasing order (repeats counted): take v in. */
static inline void keep_largest(float *top, int64_t *have, int64_t k, float v) {
    if (*have == k && !(v > top[k - 1]))
        return;
    int64_t i = *have < k ? (*have)++ : k - 1;
    while (i > 0 && top[i - 1] < v) {
        top[i] = top[i - 1];
        i--;
    }
    top[i] = v;
}

/* The candidates of the lists of queries 0 .. B - 1 (kernels/bf16_filter.c, list_candidates): each query's listed
 * positions whose score reaches cut_below of its k-th largest block maximum, then, for k <= MAX_REFINE, of the
 * k-th largest of those scores too, appended as (query, position) to rows and out in order. Queries whose list
 * was dropped have none. Returns how many. */
int64_t avx2_list_candidates(int64_t B, int64_t k, int64_t cap, const float *top, const double *beta,
                             const int32_t *cnt, const int32_t *pos, const float *score, int64_t *rows, int64_t *out) {
    int64_t n = 0;
    for (int64_t b = 0; b < B; b++) {
        if (cnt[b] < 0)
            continue;
        const float *s = score + b * cap;
        const int32_t *p = pos + b * cap;
        const float kth = top[b * k + k - 1];
        float l = kth > -__builtin_inff() ? cut_below(kth, beta[b]) : -__FLT_MAX__;
        if (k <= MAX_REFINE) {
            float best[MAX_REFINE];
            int64_t have = 0;
            for (int32_t i = 0; i < cnt[b]; i++)
                if (s[i] >= l)
                    keep_largest(best, &have, k, s[i]);
            if (have == k) {
                const float l2 = cut_below(best[k - 1], beta[b]);
                l = l2 > l ? l2 : l;
            }
        }
        for (int32_t i = 0; i < cnt[b]; i++)
            if (s[i] >= l) {
                rows[n] = b;
                out[n] = p[i];
                n++;
            }
    }
    return n;
}

/* s[i][0 .. NB) = the scores of block blk[i] for query row qr[rows[i]] (d fp32 each), i in 0 .. n - 1, by the
 * same FMA chain as the lists (for the tests). */
void avx2_block_scores(const float *q_rows, const float *e, const float *init, const int64_t *rows,
                       const int64_t *blk, int64_t d, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) {
        const float *qr = q_rows + rows[i] * d, *eb = e + blk[i] * d * NB, *ib = init + blk[i] * NB;
        __m256 a0 = _mm256_loadu_ps(ib), a1 = _mm256_loadu_ps(ib + 8);
        for (int64_t k = 0; k < d; k++) {
            const __m256 x = _mm256_broadcast_ss(qr + k);
            a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(eb + k * NB), a0);
            a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(eb + k * NB + 8), a1);
        }
        _mm256_storeu_ps(out + i * NB, a0);
        _mm256_storeu_ps(out + i * NB + 8, a1);
    }
}

#else
/* No AVX2 and FMA at build time: the Python side sees tile 0 and keeps the torch filter. */
int avx2_filter_tile(void) { return 0; }
#endif
