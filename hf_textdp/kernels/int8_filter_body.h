/* The int8 filter of the exact search (hf_textdp/cpu/int8_filter.py; docs/mechanisms/space.md §5.3, "The int8
 * filter"): the body of kernels/int8_filter.c (AVX-512 VNNI) and kernels/int8_filter_avx2.c (AVX2, which
 * defines INT8_FILTER_AVX2 first).
 *
 * Rows are quantised per row, e_c ~ s_c I_c (I_c int8 in [-127, 127]), queries per query, q ~ s_q I_q
 * (|I_q| <= QMAX). The integer dot S_c = sum_j I_q,j I_c,j is exact in int32: VPDPBUSD (VNNI) multiplies
 * unsigned by signed bytes, so the query goes in as a = I_q + OFFSET (1 .. 2 OFFSET - 1) and each row's
 * accumulator starts at init_c = -OFFSET sum_j I_c,j; on AVX2 VPMADDUBSW forms the same u8 x s8 products in
 * pairs, summed in int16 (at most 2 * 127 * 127 = 32,258 with OFFSET 64: never saturated), and VPMADDWD adds
 * the pairs into int32. From S_c, in fp32 with every step one rounding (cpu/int8_filter.py, int8_filter_bound):
 *   y = S_c s_c,  Up_c = fma(y, s_q, fma(a, rho_c, fma(b, n_c, -nu_c))),  Lo_c = the same with -a, -b,
 * where a >= ||s_q I_q||, b >= ||q - s_q I_q||, rho_c >= ||e_c - s_c I_c||, n_c >= ||e_c|| and nu_c = fp32 of
 * ||e_c||^2 / 2: t_c = q.e_c - ||e_c||^2 / 2 lies in [Lo_c - eta, Up_c + eta] (eta per query, the rounding).
 * The lists (kernel_common.h) keep each query's k largest block maxima of Lo and the positions whose Up
 * reaches cut_below of the k-th of them, eta as beta: a top-k position has Up_c + eta >= t_c >= t_(k) >=
 * Lo_(k) - eta.
 *
 * Operands: queries as 32-bit words of four bytes, q[tile][k][MR] and q_rows[B][K4]; per query qs[3 q ..]
 * = (s_q, a, b); rows as e[block][k][NB] words, init[V'], and per row s_c, -nu_c (-inf for padding rows, never
 * a candidate), rho_c, n_c.
 */
#ifndef HF_TEXTDP_INT8_FILTER_BODY_H
#define HF_TEXTDP_INT8_FILTER_BODY_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernel_common.h"

#define NB 64
#define MR 4

#if defined(INT8_FILTER_AVX2)
#define QMAX 63
#define OFFSET 64
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#define INT8_FILTER_BUILT 1
#endif
#else
#define QMAX 127
#define OFFSET 128
#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512VNNI__)
#define INT8_FILTER_BUILT 1
#endif
#endif

#ifdef INT8_FILTER_BUILT
#include <immintrin.h>

/* MR queries a tile (0 where the kernel is not built), the query range and the offset of their bytes */
int int8_filter_tile(void) { return MR; }
int int8_filter_qmax(void) { return QMAX; }
int int8_filter_offset(void) { return OFFSET; }

DEFINE_OPENMP_PROBE(int8_filter_openmp)

/* The rows' per-position constants. */
typedef struct {
    const uint32_t *e;
    const int32_t *init;
    const float *sc, *nnu, *rho, *nrm;
    int64_t K4, blocks;
} Rows;

/* Up and Lo of query (sq, ca, cb) at position j with integer dot S (the formulas of the header). */
static inline float score_up(int32_t S, const Rows *R, int64_t j, float sq, float ca, float cb) {
    const float y = (float)S * R->sc[j];
    return fmaf(y, sq, fmaf(ca, R->rho[j], fmaf(cb, R->nrm[j], R->nnu[j])));
}

static inline float score_lo(int32_t S, const Rows *R, int64_t j, float sq, float ca, float cb) {
    const float y = (float)S * R->sc[j];
    return fmaf(y, sq, fmaf(-ca, R->rho[j], fmaf(-cb, R->nrm[j], R->nnu[j])));
}

/* The tile's queries r with bit r of need set: block b's integer dots S[r][0 .. NB) into their lists (the
 * block's largest Lo into the top k, then the positions whose Up reaches the threshold), leaving out position
 * ex[q] of query q where ex is given. */
static __attribute__((noinline)) void add_blocks(const Lists *L, const Rows *R, const float *qs, const int64_t *ex,
                                                 int64_t t, int64_t b, const int32_t *S, uint32_t need) {
    float up[NB], lo[NB];
    for (; need; need &= need - 1) {
        const int r = __builtin_ctz(need);
        const int64_t q = t * MR + r, c = ex ? ex[q] - b * NB : -1;
        const float sq = qs[3 * q], ca = qs[3 * q + 1], cb = qs[3 * q + 2];
        const __m256 vsq = _mm256_set1_ps(sq), vca = _mm256_set1_ps(ca), vcb = _mm256_set1_ps(cb);
        const __m256 nca = _mm256_set1_ps(-ca), ncb = _mm256_set1_ps(-cb);
        for (int i = 0; i < NB; i += 8) { /* score_up and score_lo, eight positions a step */
            const int64_t j = b * NB + i;
            const __m256 y = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(S + r * NB + i))),
                                           _mm256_loadu_ps(R->sc + j));
            const __m256 rho = _mm256_loadu_ps(R->rho + j), nrm = _mm256_loadu_ps(R->nrm + j);
            const __m256 nnu = _mm256_loadu_ps(R->nnu + j);
            _mm256_storeu_ps(up + i, _mm256_fmadd_ps(y, vsq, _mm256_fmadd_ps(vca, rho, _mm256_fmadd_ps(vcb, nrm, nnu))));
            _mm256_storeu_ps(lo + i, _mm256_fmadd_ps(y, vsq, _mm256_fmadd_ps(nca, rho, _mm256_fmadd_ps(ncb, nrm, nnu))));
        }
        if (c >= 0 && c < NB)
            up[c] = lo[c] = -__builtin_inff();
        __m256 m8 = _mm256_loadu_ps(lo);
        for (int i = 8; i < NB; i += 8)
            m8 = _mm256_max_ps(m8, _mm256_loadu_ps(lo + i));
        float m4[8], m = -__builtin_inff();
        _mm256_storeu_ps(m4, m8);
        for (int l = 0; l < 8; l++)
            m = m4[l] > m ? m4[l] : m;
        if (m > -__builtin_inff())
            lists_take_max(L, q, m);
        lists_add(L, q, b * NB, up, NB);
    }
}

#if defined(INT8_FILTER_AVX2)
#define ALL(M) M(0) M(1) M(2) M(3)
#define SUB 16 /* positions a micro-step: two vectors of 8 */
#define DECL(r) __m256i a##r##0 = _mm256_loadu_si256((const __m256i *)ib), a##r##1 = _mm256_loadu_si256((const __m256i *)(ib + 8));
#define STEP(r)                                                                                        \
    {                                                                                                  \
        const __m256i x = _mm256_set1_epi32((int)qk[r]);                                               \
        a##r##0 = _mm256_add_epi32(a##r##0, _mm256_madd_epi16(_mm256_maddubs_epi16(x, e0), ones));     \
        a##r##1 = _mm256_add_epi32(a##r##1, _mm256_madd_epi16(_mm256_maddubs_epi16(x, e1), ones));     \
    }
/* the 8 Up of vector a##r##v at positions j0 + 8 v (as score_up) */
#define UPV(r, v)                                                                                      \
    _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(a##r##v), _mm256_loadu_ps(R->sc + j0 + 8 * (v))), \
                    _mm256_set1_ps(qs[3 * (t * MR + (r))]),                                            \
                    _mm256_fmadd_ps(_mm256_set1_ps(qs[3 * (t * MR + (r)) + 1]), _mm256_loadu_ps(R->rho + j0 + 8 * (v)), \
                                    _mm256_fmadd_ps(_mm256_set1_ps(qs[3 * (t * MR + (r)) + 2]),        \
                                                    _mm256_loadu_ps(R->nrm + j0 + 8 * (v)),            \
                                                    _mm256_loadu_ps(R->nnu + j0 + 8 * (v)))))
#define FINISH(r)                                                                                      \
    {                                                                                                  \
        _mm256_storeu_si256((__m256i *)(S + (r) * NB + s * SUB), a##r##0);                             \
        _mm256_storeu_si256((__m256i *)(S + (r) * NB + s * SUB + 8), a##r##1);                         \
        const __m256 m = _mm256_max_ps(UPV(r, 0), UPV(r, 1));                                          \
        mx[r] = s ? _mm256_max_ps(mx[r], m) : m;                                                       \
    }
#define GATE(r)                                                                                        \
    need |= (uint32_t)(_mm256_movemask_ps(_mm256_cmp_ps(mx[r], _mm256_broadcast_ss(L->lim + t * MR + (r)), \
                                                         _CMP_GE_OQ)) != 0)                            \
            << (r);

/* One tile's scores of block b: the integer dots of each SUB positions, their Up maxima, then the lists. */
static inline void tile_block(const uint32_t *qt, const Rows *R, const float *qs, const int64_t *ex, const Lists *L,
                              int64_t t, int64_t b) {
    const __m256i ones = _mm256_set1_epi16(1);
    int32_t S[MR * NB];
    __m256 mx[MR];
    for (int s = 0; s < NB / SUB; s++) {
        const int64_t j0 = b * NB + s * SUB;
        const uint32_t *eb = R->e + b * R->K4 * NB + s * SUB;
        const int32_t *ib = R->init + j0;
        ALL(DECL)
        for (int64_t k = 0; k < R->K4; k++) {
            const __m256i e0 = _mm256_loadu_si256((const __m256i *)(eb + k * NB));
            const __m256i e1 = _mm256_loadu_si256((const __m256i *)(eb + k * NB + 8));
            const uint32_t *qk = qt + k * MR;
            ALL(STEP)
        }
        ALL(FINISH)
    }
    uint32_t need = 0;
    ALL(GATE)
    if (need)
        add_blocks(L, R, qs, ex, t, b, S, need);
}
#else
#define ALL(M) M(0) M(1) M(2) M(3)
#define DECL(r)                                                                                        \
    __m512i a##r##0 = _mm512_loadu_si512(ib), a##r##1 = _mm512_loadu_si512(ib + 16),                   \
            a##r##2 = _mm512_loadu_si512(ib + 32), a##r##3 = _mm512_loadu_si512(ib + 48);
#define STEP(r)                                                                                        \
    {                                                                                                  \
        const __m512i x = _mm512_set1_epi32((int)qk[r]);                                               \
        a##r##0 = _mm512_dpbusd_epi32(a##r##0, x, e0);                                                 \
        a##r##1 = _mm512_dpbusd_epi32(a##r##1, x, e1);                                                 \
        a##r##2 = _mm512_dpbusd_epi32(a##r##2, x, e2);                                                 \
        a##r##3 = _mm512_dpbusd_epi32(a##r##3, x, e3);                                                 \
    }
/* the 16 Up of vector a##r##v at positions j0 + 16 v (as score_up) */
#define UPV(r, v)                                                                                      \
    _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(a##r##v), _mm512_loadu_ps(R->sc + j0 + 16 * (v))), \
                    _mm512_set1_ps(qs[3 * (t * MR + (r))]),                                            \
                    _mm512_fmadd_ps(_mm512_set1_ps(qs[3 * (t * MR + (r)) + 1]), _mm512_loadu_ps(R->rho + j0 + 16 * (v)), \
                                    _mm512_fmadd_ps(_mm512_set1_ps(qs[3 * (t * MR + (r)) + 2]),        \
                                                    _mm512_loadu_ps(R->nrm + j0 + 16 * (v)),           \
                                                    _mm512_loadu_ps(R->nnu + j0 + 16 * (v)))))
#define GATE(r)                                                                                        \
    need |= (uint32_t)(_mm512_cmp_ps_mask(_mm512_max_ps(_mm512_max_ps(UPV(r, 0), UPV(r, 1)),           \
                                                        _mm512_max_ps(UPV(r, 2), UPV(r, 3))),          \
                                          _mm512_set1_ps(L->lim[t * MR + (r)]), _CMP_GE_OQ) != 0)      \
            << (r);
#define SAVE(r)                                                                                        \
    if (need >> (r) & 1u) {                                                                            \
        _mm512_storeu_si512(S + (r) * NB, a##r##0);                                                    \
        _mm512_storeu_si512(S + (r) * NB + 16, a##r##1);                                               \
        _mm512_storeu_si512(S + (r) * NB + 32, a##r##2);                                               \
        _mm512_storeu_si512(S + (r) * NB + 48, a##r##3);                                               \
    }

/* One tile's scores of block b: the integer dots, their Up maxima, then the lists of the queries that pass. */
static inline void tile_block(const uint32_t *qt, const Rows *R, const float *qs, const int64_t *ex, const Lists *L,
                              int64_t t, int64_t b) {
    const int64_t j0 = b * NB;
    const uint32_t *eb = R->e + b * R->K4 * NB;
    const int32_t *ib = R->init + j0;
    ALL(DECL)
#pragma GCC unroll 4
    for (int64_t k = 0; k < R->K4; k++) {
        const __m512i e0 = _mm512_loadu_si512(eb + k * NB), e1 = _mm512_loadu_si512(eb + k * NB + 16);
        const __m512i e2 = _mm512_loadu_si512(eb + k * NB + 32), e3 = _mm512_loadu_si512(eb + k * NB + 48);
        const uint32_t *qk = qt + k * MR;
        ALL(STEP)
    }
    uint32_t need = 0;
    ALL(GATE)
    if (need) {
        int32_t S[MR * NB];
        ALL(SAVE)
        add_blocks(L, R, qs, ex, t, b, S, need);
    }
}
#endif

/* The lists of the queries of tiles t0 .. t1 - 1 (emptied here), tiles in passes of `pass` (their queries stay in
 * cache while every block goes by). */
static void lists_range(const uint32_t *q, const float *qs, const Rows *R, const int64_t *ex, int64_t t0, int64_t t1,
                        int64_t pass, const Lists *L) {
    lists_clear(L, t0 * MR, t1 * MR);
    for (int64_t tb = t0; tb < t1; tb += pass) {
        const int64_t te = tb + pass < t1 ? tb + pass : t1;
        for (int64_t b = 0; b < R->blocks; b++)
            for (int64_t t = tb; t < te; t++)
                tile_block(q + t * R->K4 * MR, R, qs, ex, L, t, b);
    }
}

/* lists_range over tiles t0 .. t1 - 1 split between `threads` threads of the OpenMP team; the lists' beta is each
 * query's eta. */
void int8_lists(const uint32_t *q, const float *qs, const uint32_t *e, const int32_t *init, const float *sc,
                const float *nnu, const float *rho, const float *nrm, const int64_t *ex, int64_t K4, int64_t blocks,
                int64_t t0, int64_t t1, int64_t pass, int64_t threads, const double *eta, int64_t k, int64_t cap,
                float *top, float *lim, int32_t *cnt, int32_t *pos, float *score) {
    const Rows R = {e, init, sc, nnu, rho, nrm, K4, blocks};
    const Lists L = {eta, k, cap, top, lim, score, cnt, pos};
#define RANGE(lo, hi) lists_range(q, qs, &R, ex, lo, hi, pass, &L)
    TEAM_SPLIT(t0, t1, threads, RANGE)
#undef RANGE
}

/* up[i][0 .. NB), lo[i][..] = Up and Lo of block blk[i] for query rows[i] (q_rows[B][K4] words, qs), by scalar
 * integer dots and the same fp32 steps as the lists (for the tests). */
void int8_block_bounds(const uint32_t *q_rows, const float *qs, const uint32_t *e, const int32_t *init,
                       const float *sc, const float *nnu, const float *rho, const float *nrm, const int64_t *rows,
                       const int64_t *blk, int64_t K4, int64_t n, float *up, float *lo) {
    const Rows R = {e, init, sc, nnu, rho, nrm, K4, 0};
    for (int64_t i = 0; i < n; i++) {
        const int64_t q = rows[i];
        const uint8_t *a = (const uint8_t *)(q_rows + q * K4);
        for (int c = 0; c < NB; c++) {
            const int64_t j = blk[i] * NB + c;
            int32_t S = init[j];
            for (int64_t k = 0; k < K4; k++) {
                const int8_t *w = (const int8_t *)(e + (blk[i] * K4 + k) * NB + c);
                for (int l = 0; l < 4; l++)
                    S += (int32_t)a[4 * k + l] * (int32_t)w[l];
            }
            up[i * NB + c] = score_up(S, &R, j, qs[3 * q], qs[3 * q + 1], qs[3 * q + 2]);
            lo[i * NB + c] = score_lo(S, &R, j, qs[3 * q], qs[3 * q + 1], qs[3 * q + 2]);
        }
    }
}

/* Query b of Q[B][d] (fp32): s = fp32(max_j |q_j| / QMAX) (0 for a zero query), I_j = round(q_j fl(1 / s)) within
 * +-QMAX (any integers would do: the residual below is what the bound uses), its bytes I_j + OFFSET in q_rows[b]
 * (OFFSET past d), and in float64 the norms a = s sqrt(sum I_j^2) (the sum exact) and b = ||q - s I|| (each
 * residual exact: s I_j has at most 31 significant bits and lies within 2^8 of q_j; the sum of squares rounds,
 * which the caller's slack covers). Eight coordinates a step (AVX2, in both builds). */
static void prepare_query(const float *Q, int64_t d, int64_t K4, int64_t b, uint8_t *row, float *s_out, double *ab) {
    const float *q = Q + b * d;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 mx = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= d; j += 8)
        mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(q + j)));
    float top[8];
    _mm256_storeu_ps(top, mx);
    float t = 0.0f;
    for (int l = 0; l < 8; l++)
        t = top[l] > t ? top[l] : t;
    for (; j < d; j++)
        t = fabsf(q[j]) > t ? fabsf(q[j]) : t;
    const float s = (float)((double)t / QMAX), inv = s > 0.0f ? 1.0f / s : 0.0f;
    const __m256 vinv = _mm256_set1_ps(inv), hi = _mm256_set1_ps((float)QMAX), lo = _mm256_set1_ps(-(float)QMAX);
    const __m256d vs = _mm256_set1_pd((double)s);
    __m256d si = _mm256_setzero_pd(), sr = _mm256_setzero_pd();
    int32_t iv[8];
    for (j = 0; j + 8 <= d; j += 8) {
        const __m256 x = _mm256_loadu_ps(q + j);
        __m256 v = _mm256_round_ps(_mm256_mul_ps(x, vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
        for (int h = 0; h < 2; h++) {
            const __m128 xh = h ? _mm256_extractf128_ps(x, 1) : _mm256_castps256_ps128(x);
            const __m128 vh = h ? _mm256_extractf128_ps(v, 1) : _mm256_castps256_ps128(v);
            const __m256d vd = _mm256_cvtps_pd(vh);
            const __m256d r = _mm256_sub_pd(_mm256_cvtps_pd(xh), _mm256_mul_pd(vs, vd)); /* exact */
            si = _mm256_add_pd(si, _mm256_mul_pd(vd, vd));
            sr = _mm256_add_pd(sr, _mm256_mul_pd(r, r));
        }
        _mm256_storeu_si256((__m256i *)iv, _mm256_cvtps_epi32(v));
        for (int l = 0; l < 8; l++)
            row[j + l] = (uint8_t)(iv[l] + OFFSET);
    }
    double a4[4], r4[4];
    _mm256_storeu_pd(a4, si);
    _mm256_storeu_pd(r4, sr);
    double isq = a4[0] + a4[1] + a4[2] + a4[3], rr = r4[0] + r4[1] + r4[2] + r4[3];
    for (; j < d; j++) {
        float v = nearbyintf(q[j] * inv);
        v = v > QMAX ? QMAX : (v < -QMAX ? -QMAX : v);
        const double r = (double)q[j] - (double)s * (double)v;
        isq += (double)v * (double)v;
        rr += r * r;
        row[j] = (uint8_t)((int)v + OFFSET);
    }
    for (j = d; j < 4 * K4; j++)
        row[j] = OFFSET;
    *s_out = s;
    ab[2 * b] = (double)s * sqrt(isq);
    ab[2 * b + 1] = sqrt(rr);
}

/* The queries Q[B][d] for the kernel: q_rows[B][K4] words of prepare_query's bytes, q_tiles[ceil(B / MR)][K4][MR]
 * the same by tile (padding queries OFFSET bytes), qs[3 b] = s (the query's a and b follow, filled by the caller
 * once rounded up) and ab[2 b ..] = (a, b) in float64; queries split between `threads` threads. */
void prepare_int8_queries(const float *Q, int64_t B, int64_t d, int64_t K4, int64_t threads, uint32_t *q_rows,
                          uint32_t *q_tiles, float *qs, double *ab) {
    const int n = threads > 1 && B >= 256 ? (int)threads : 1;
    const int64_t tiles = (B + MR - 1) / MR;
#pragma omp parallel for num_threads(n) if (n > 1) schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        for (int64_t r = 0; r < MR; r++) {
            const int64_t b = t * MR + r;
            if (b < B)
                prepare_query(Q, d, K4, b, (uint8_t *)(q_rows + b * K4), qs + 3 * b, ab);
            for (int64_t k = 0; k < K4; k++)
                q_tiles[(t * K4 + k) * MR + r] = b < B ? q_rows[b * K4 + k] : 0x01010101u * OFFSET;
        }
    }
}

#else
/* Not built for this CPU: the Python side sees tile 0 and keeps the other filters. */
int int8_filter_tile(void) { return 0; }
#endif

#endif
