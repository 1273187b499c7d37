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

#include "kernel_common.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define MR 6
#define NB 16

int avx2_filter_tile(void) { return MR; }

DEFINE_OPENMP_PROBE(avx2_filter_openmp)

/* Block b's scores s[0 .. NB) (the excluded position already -inf) into query q's list. */
static void add_block(const Lists *L, int64_t q, int64_t b, const float *s) {
    float m = s[0];
    for (int i = 1; i < NB; i++)
        m = s[i] > m ? s[i] : m;
    if (!(m >= L->lim[q]))
        return;
    lists_take_max(L, q, m);
    lists_add(L, q, b * NB, s, NB);
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
    lists_clear(L, t0 * MR, t1 * MR);
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
    const Lists L = {beta, k, cap, top, lim, score, cnt, pos};
#define RANGE(lo, hi) lists_range(q, e, init, ex, d, blocks, lo, hi, pass, &L)
    TEAM_SPLIT(t0, t1, threads, RANGE)
#undef RANGE
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
