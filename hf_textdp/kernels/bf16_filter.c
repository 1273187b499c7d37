/* The fused bf16 filter of the exact search on CPUs with AVX-512 BF16 (hf_textdp/cpu/bf16_filter.py;
 * docs/mechanisms/space.md §5.3, "The fused bf16 filter").
 *
 * A score is A_c = init_c + sum_j qh_j * eh_cj over bf16 pairs: VDPBF16PS forms each bf16 product exactly
 * in fp32 and adds it to an fp32 accumulator (round to nearest even, denormals flushed), so A_c is a sum
 * of d + 1 exact terms in fp32, in some order: the setting of the bound in bf16_filter.py, which holds
 * for every order and every summation tree. Positions come in blocks of NB = 32 consecutive ones;
 * block_maxima writes each (query, block) maximum without storing the scores and, when asked, keeps each
 * query's running candidate list (the positions within 2 beta of its running k-th largest maximum) while the
 * scores are still in registers; block_scores recomputes the NB scores of chosen (query, block) pairs.
 *
 * Operands are 32-bit words holding two bf16 numbers (coordinates 2k and 2k + 1): queries as
 * q[tile][k][MR] (MR queries per tile), rows as e[block][k][NB]; K2 words per vector.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernel_common.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AVX512VL__)
#include <immintrin.h>

#define MR 12
#define NB 32
#define MAX_REFINE 16 /* the largest k whose threshold and second cut the selection takes itself */

int bf16_filter_tile(void) { return MR; }

DEFINE_OPENMP_PROBE(bf16_filter_openmp)

#define DECL(r) __m512 a##r##0 = _mm512_loadu_ps(ib), a##r##1 = _mm512_loadu_ps(ib + 16);
#define STEP(r)                                                                                        \
    {                                                                                                  \
        __m512bh b = (__m512bh)_mm512_set1_epi32((int)qk[r]);                                          \
        a##r##0 = _mm512_dpbf16_ps(a##r##0, b, e0);                                                    \
        a##r##1 = _mm512_dpbf16_ps(a##r##1, b, e1);                                                    \
    }
#define EXCL(r) (ex ? ex[t * MR + (r)] - b * NB : -1)
#define STORE(r) out[(t * MR + (r)) * blocks + b] = block_max(a##r##0, a##r##1, EXCL(r));
/* bit r of need: whether a score of query r reaches its list's threshold (excluded position included) */
#define GATE(r)                                                                                        \
    need |= (uint32_t)(_mm512_cmp_ps_mask(_mm512_max_ps(a##r##0, a##r##1), _mm512_set1_ps(L->lim[t * MR + (r)]), \
                                          _CMP_GE_OQ) != 0)                                            \
            << (r);
#define SAVE(r)                                                                                        \
    if (need >> (r) & 1u) {                                                                            \
        _mm512_storeu_ps(sc + (r) * NB, a##r##0);                                                      \
        _mm512_storeu_ps(sc + (r) * NB + 16, a##r##1);                                                 \
    }
#define ALL(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)

/* The largest of the block's NB scores (two vectors), leaving out position c of the block if 0 <= c < NB. */
static inline float block_max(__m512 x0, __m512 x1, int64_t c) {
    if (c >= 0 && c < NB) {
        const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
        if (c < 16)
            x0 = _mm512_mask_mov_ps(x0, (__mmask16)(1u << c), ninf);
        else
            x1 = _mm512_mask_mov_ps(x1, (__mmask16)(1u << (c - 16)), ninf);
    }
    return _mm512_reduce_max_ps(_mm512_max_ps(x0, x1));
}

/* Take block b's scores x0, x1 (without position c of the block if 0 <= c < NB; maximum m >= lim[q]) into
 * query q's list: m into its top k, then the positions that reach the (new) lim[q], after dropping those of
 * the list below it when it is full. */
static inline void add_block(const Lists *L, int64_t q, int64_t b, __m512 x0, __m512 x1, int64_t c, float m) {
    lists_take_max(L, q, m);
    const __m512 l = _mm512_set1_ps(L->lim[q]);
    __mmask16 k0 = _mm512_cmp_ps_mask(x0, l, _CMP_GE_OQ), k1 = _mm512_cmp_ps_mask(x1, l, _CMP_GE_OQ);
    if (c >= 0 && c < 16)
        k0 &= (__mmask16)~(1u << c);
    else if (c >= 16 && c < NB)
        k1 &= (__mmask16)~(1u << (c - 16));
    const int n0 = __builtin_popcount(k0), n1 = __builtin_popcount(k1);
    int32_t n = lists_room(L, q, n0 + n1);
    if (n < 0)
        return;
    float *s = L->score + q * L->cap;
    int32_t *p = L->pos + q * L->cap;
    const __m512i at = _mm512_add_epi32(_mm512_set1_epi32((int)(b * NB)),
                                        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
    _mm512_mask_storeu_ps(s + n, (__mmask16)((1u << n0) - 1), _mm512_maskz_compress_ps(k0, x0));
    _mm512_mask_storeu_epi32(p + n, (__mmask16)((1u << n0) - 1), _mm512_maskz_compress_epi32(k0, at));
    n += n0;
    _mm512_mask_storeu_ps(s + n, (__mmask16)((1u << n1) - 1), _mm512_maskz_compress_ps(k1, x1));
    _mm512_mask_storeu_epi32(p + n, (__mmask16)((1u << n1) - 1),
                             _mm512_maskz_compress_epi32(k1, _mm512_add_epi32(at, _mm512_set1_epi32(16))));
    L->cnt[q] = n + n1;
}

/* The block into the lists of the tile's queries r with bit r of need set whose maximum (without the excluded
 * position) reaches the threshold: their scores are sc[r][0 .. NB) (stored so that no accumulator is live
 * across the call). */
static __attribute__((noinline)) void add_blocks(const Lists *L, const int64_t *ex, int64_t t, int64_t b,
                                                 const float *sc, uint32_t need) {
    for (; need; need &= need - 1) {
        const int r = __builtin_ctz(need);
        const int64_t q = t * MR + r, c = ex ? ex[q] - b * NB : -1;
        const __m512 x0 = _mm512_loadu_ps(sc + r * NB), x1 = _mm512_loadu_ps(sc + r * NB + 16);
        const float m = block_max(x0, x1, c);
        if (m >= L->lim[q])
            add_block(L, q, b, x0, x1, c, m);
    }
}

/* The blocks that reach the thresholds into the lists (the maxima are not needed otherwise). */
#define LIST_ALL                                                                                       \
    {                                                                                                  \
        uint32_t need = 0;                                                                             \
        ALL(GATE)                                                                                      \
        if (need) {                                                                                    \
            float sc[MR * NB];                                                                         \
            ALL(SAVE)                                                                                  \
            add_blocks(L, ex, t, b, sc, need);                                                         \
        }                                                                                              \
    }
#define STORE_ALL ALL(STORE)

/* For tiles t0 .. t1 - 1: each block's scores of the tile's queries (DECL, STEP), then FINISH for the tile.
 * Tiles go in passes of `pass` tiles (their queries stay in cache while every block goes by). */
#define TILES(FINISH)                                                                                  \
    for (int64_t tb = t0; tb < t1; tb += pass) {                                                       \
        const int64_t te = tb + pass < t1 ? tb + pass : t1;                                            \
        for (int64_t b = 0; b < blocks; b++) {                                                         \
            const uint32_t *eb = e + b * K2 * NB;                                                      \
            const float *ib = init + b * NB;                                                           \
            for (int64_t t = tb; t < te; t++) {                                                        \
                const uint32_t *qt = q + t * K2 * MR;                                                  \
                ALL(DECL)                                                                              \
                for (int64_t k = 0; k < K2; k++) {                                                     \
                    const __m512bh e0 = (__m512bh)_mm512_loadu_si512(eb + k * NB);                     \
                    const __m512bh e1 = (__m512bh)_mm512_loadu_si512(eb + k * NB + 16);                \
                    const uint32_t *qk = qt + k * MR;                                                  \
                    ALL(STEP)                                                                          \
                }                                                                                      \
                FINISH                                                                                 \
            }                                                                                          \
        }                                                                                              \
    }

/* out[t * MR + r][b] = max of the NB scores of block b for query r of tile t, for tiles t0 .. t1 - 1, without
 * the position ex[t * MR + r] when ex is given (-1: none); with L, the lists instead (out not written). */
static void maxima_range(const uint32_t *q, const uint32_t *e, const float *init, const int64_t *ex, int64_t K2,
                         int64_t blocks, int64_t t0, int64_t t1, int64_t pass, const Lists *L, float *out) {
    if (L) {
        lists_clear(L, t0 * MR, t1 * MR);
        TILES(LIST_ALL)
    } else {
        TILES(STORE_ALL)
    }
}

/* maxima_range over tiles 0 .. tiles - 1, split between `threads` threads of the OpenMP team (the one
 * torch's intra-op pool uses when the library is built with -fopenmp: no second pool competes with it).
 * With beta (not NULL) each query keeps its running candidate list instead (Lists: k, cap and the arrays of
 * the tiles' queries, which start empty here) and out is not written. */
void block_maxima(const uint32_t *q, const uint32_t *e, const float *init, const int64_t *ex, int64_t K2,
                  int64_t blocks, int64_t t0, int64_t t1, int64_t pass, int64_t threads, const double *beta, int64_t k,
                  int64_t cap, float *top, float *lim, int32_t *cnt, int32_t *pos, float *score, float *out) {
    const Lists lists = {beta, k, cap, top, lim, score, cnt, pos};
    const Lists *L = beta ? &lists : NULL;
#define RANGE(lo, hi) maxima_range(q, e, init, ex, K2, blocks, lo, hi, pass, L, out)
    TEAM_SPLIT(t0, t1, threads, RANGE)
#undef RANGE
}

/* s[0 .. NB) = the scores of the block at eb (init ib) for the query row qr: two accumulator chains, even
 * and odd k, added at the end. */
static inline void score_block(const uint32_t *qr, const uint32_t *eb, const float *ib, int64_t K2, float *s) {
    __m512 a0 = _mm512_loadu_ps(ib), a1 = _mm512_loadu_ps(ib + 16);
    __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 1 < K2; k += 2) {
        const __m512bh b = (__m512bh)_mm512_set1_epi32((int)qr[k]);
        const __m512bh d = (__m512bh)_mm512_set1_epi32((int)qr[k + 1]);
        a0 = _mm512_dpbf16_ps(a0, b, (__m512bh)_mm512_loadu_si512(eb + k * NB));
        a1 = _mm512_dpbf16_ps(a1, b, (__m512bh)_mm512_loadu_si512(eb + k * NB + 16));
        c0 = _mm512_dpbf16_ps(c0, d, (__m512bh)_mm512_loadu_si512(eb + (k + 1) * NB));
        c1 = _mm512_dpbf16_ps(c1, d, (__m512bh)_mm512_loadu_si512(eb + (k + 1) * NB + 16));
    }
    if (k < K2) {
        const __m512bh b = (__m512bh)_mm512_set1_epi32((int)qr[k]);
        a0 = _mm512_dpbf16_ps(a0, b, (__m512bh)_mm512_loadu_si512(eb + k * NB));
        a1 = _mm512_dpbf16_ps(a1, b, (__m512bh)_mm512_loadu_si512(eb + k * NB + 16));
    }
    _mm512_storeu_ps(s, _mm512_add_ps(a0, c0));
    _mm512_storeu_ps(s + 16, _mm512_add_ps(a1, c1));
}

/* out[i][0 .. NB) = the scores of block blk[i] for query row rows[i] of q_rows[B][K2], i in i0 .. i1 - 1. */
void block_scores(const uint32_t *q_rows, const uint32_t *e, const float *init, const int64_t *rows,
                  const int64_t *blk, int64_t K2, int64_t i0, int64_t i1, float *out) {
    for (int64_t i = i0; i < i1; i++)
        score_block(q_rows + rows[i] * K2, e + blk[i] * K2 * NB, init + blk[i] * NB, K2, out + i * NB);
}

/* The first min(r, 16) of 16 lanes. */
static inline __mmask16 tail_mask(int64_t r) { return r >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << r) - 1); }

/* The largest of m[0 .. n) (n >= 1, no NaN). */
static inline float row_max(const float *m, int64_t n) {
    __m512 acc = _mm512_set1_ps(-__builtin_inff());
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 in = tail_mask(n - j);
        acc = _mm512_mask_max_ps(acc, in, acc, _mm512_maskz_loadu_ps(in, m + j));
    }
    return _mm512_reduce_max_ps(acc);
}

/* The k-th largest of m[0 .. n) counting repeats, as torch's topk (1 <= k <= MAX_REFINE <= n, no NaN): the
 * k largest so far kept in order, and only the values above the k-th of them read one by one. */
static inline float row_kth(const float *m, int64_t n, int64_t k) {
    if (k == 1)
        return row_max(m, n);
    float top[MAX_REFINE];
    int64_t have = 0;
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        const __mmask16 in = tail_mask(n - j0);
        const __m512 mj = _mm512_maskz_loadu_ps(in, m + j0);
        uint32_t hit = have < k ? in : _mm512_mask_cmp_ps_mask(in, mj, _mm512_set1_ps(top[k - 1]), _CMP_GT_OQ);
        for (; hit; hit &= hit - 1)
            keep_largest(top, &have, k, m[j0 + __builtin_ctz(hit)]);
    }
    return top[k - 1];
}

/* For each query b and block j with maxima[b][j] >= lim[b] (lim NULL, for k <= MAX_REFINE: the threshold
 * fused_candidates would compute from the query's k-th largest maximum): the block's positions whose score (as
 * block_scores) is >= lim[b], appended as (b, position) to rows and pos, queries and positions in order
 * (without the position ex[b] when ex is given).
 * Then, for k <= MAX_REFINE, the query's list is cut again at the k-th largest of these scores, Mk: k of its
 * positions have scores >= Mk, so the k-th best t is >= Mk - beta and a top-k position scores >= Mk - 2 beta
 * (cpu/bf16_filter.py, fused_candidates; the same float64 arithmetic and rounding up to fp32 as there).
 * Returns how many, or -1 if that would exceed cap. */
static int64_t select_range(const float *maxima, const float *lim, const double *beta, const int64_t *ex, int64_t k,
                            int64_t b0, int64_t b1, int64_t blocks, const uint32_t *q_rows, const uint32_t *e,
                            const float *init, int64_t K2, int64_t cap, int64_t *rows, int64_t *pos, float *scores) {
    int64_t n = 0;
    float s[NB];
    for (int64_t b = b0; b < b1; b++) {
        const float *m = maxima + b * blocks;
        /* without lim: the threshold of fused_candidates from the row's k-th largest maximum */
        const float l = lim ? lim[b] : cut_below(row_kth(m, blocks, k), beta[b]);
        const int64_t start = n;
        float top[MAX_REFINE];
        int64_t have = 0;
        for (int64_t j0 = 0; j0 < blocks; j0 += 16) { /* the blocks whose maximum reaches l, 16 tested at once */
            const __mmask16 in = tail_mask(blocks - j0);
            const __m512 mj = _mm512_maskz_loadu_ps(in, m + j0);
            uint32_t hit = _mm512_mask_cmp_ps_mask(in, mj, _mm512_set1_ps(l), _CMP_GE_OQ);
            for (; hit; hit &= hit - 1) {
                const int64_t j = j0 + __builtin_ctz(hit);
                score_block(q_rows + b * K2, e + j * K2 * NB, init + j * NB, K2, s);
                for (int c = 0; c < NB; c++) {
                    if (s[c] >= l && !(ex && ex[b] == j * NB + c)) {
                        if (n >= cap)
                            return -1;
                        rows[n] = b;
                        pos[n] = j * NB + c;
                        scores[n] = s[c];
                        n++;
                        if (k <= MAX_REFINE)
                            keep_largest(top, &have, k, s[c]);
                    }
                }
            }
        }
        if (k <= MAX_REFINE && have == k) {
            const float l2 = cut_below(top[k - 1], beta[b]);
            if (l2 > l) {
                int64_t w = start;
                for (int64_t i = start; i < n; i++) {
                    if (scores[i] >= l2) {
                        rows[w] = rows[i];
                        pos[w] = pos[i];
                        scores[w] = scores[i];
                        w++;
                    }
                }
                n = w;
            }
        }
    }
    return n;
}

/* select_range over queries 0 .. B - 1 in `threads` consecutive parts on the OpenMP team: part p writes its
 * candidates from rows + p cap, pos + p cap, scores + p cap (queries in order) and how many, or -1 when they
 * would exceed cap, to counts[p]. */
void select_candidates(const float *maxima, const float *lim, const double *beta, const int64_t *ex, int64_t k,
                       int64_t B, int64_t blocks, const uint32_t *q_rows, const uint32_t *e, const float *init,
                       int64_t K2, int64_t threads, int64_t cap, int64_t *rows, int64_t *pos, float *scores,
                       int64_t *counts) {
    const int n = threads > 1 ? (int)threads : 1;
#pragma omp parallel for num_threads(n) if (n > 1) schedule(static, 1)
    for (int p = 0; p < n; p++)
        counts[p] = select_range(maxima, lim, beta, ex, k, B * p / n, B * (p + 1) / n, blocks, q_rows, e, init, K2,
                                 cap, rows + p * cap, pos + p * cap, scores + p * cap);
}

/* the bf16 word of q (round to nearest even, as torch's conversion; NaN kept quiet), adding its square and the
 * square of its rounding error, in float64, to *sh and *sr */
static inline uint16_t round_bf16(float q, double *sh, double *sr) {
    uint32_t u;
    memcpy(&u, &q, 4);
    const uint16_t h = (u & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC0 : (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    const uint32_t w = (uint32_t)h << 16;
    float hf;
    memcpy(&hf, &w, 4);
    const double x = (double)hf, r = (double)q - x;
    *sh += x * x;
    *sr += r * r;
    return h;
}

/* prepare_queries for the queries of tile t: coordinate j's squares go to lane j mod 8, in whole groups of 8
 * as in the tail (the same float64 steps as the scalar round_bf16, no contraction) */
static void prepare_tile(const float *Q, int64_t B, int64_t d, int64_t K2, int64_t t, uint16_t *q_rows,
                         uint32_t *q_tiles, double *qh, double *qr) {
    const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7FFF);
    const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
    const __m256i qnan = _mm256_set1_epi32(0x7FC0);
    for (int64_t b = t * MR; b < B && b < (t + 1) * MR; b++) {
        const float *q = Q + b * d;
        uint16_t *o = q_rows + b * 2 * K2;
        __m512d vh = _mm512_setzero_pd(), vr = _mm512_setzero_pd();
        int64_t j0 = 0;
        for (; j0 + 8 <= d; j0 += 8) {
            const __m256 v = _mm256_loadu_ps(q + j0);
            const __m256i u = _mm256_castps_si256(v);
            const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
            __m256i h = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, half), lsb), 16);
            h = _mm256_mask_blend_epi32(_mm256_cmpgt_epu32_mask(_mm256_and_si256(u, abs_mask), inf), h, qnan);
            _mm_storeu_si128((__m128i *)(o + j0), _mm256_cvtepi32_epi16(h));
            const __m512d x = _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
            const __m512d r = _mm512_sub_pd(_mm512_cvtps_pd(v), x);
            vh = _mm512_add_pd(vh, _mm512_mul_pd(x, x));
            vr = _mm512_add_pd(vr, _mm512_mul_pd(r, r));
        }
        double sh[8], sr[8];
        _mm512_storeu_pd(sh, vh);
        _mm512_storeu_pd(sr, vr);
        for (int l = 0; j0 + l < d; l++)
            o[j0 + l] = round_bf16(q[j0 + l], sh + l, sr + l);
        for (int64_t j = d; j < 2 * K2; j++)
            o[j] = 0;
        double a = 0.0, c = 0.0;
        for (int l = 0; l < 8; l++) {
            a += sh[l];
            c += sr[l];
        }
        qh[b] = sqrt(a);
        qr[b] = sqrt(c);
    }
    for (int64_t kk = 0; kk < K2; kk++)
        for (int64_t r = 0; r < MR; r++) {
            const int64_t b = t * MR + r;
            uint32_t w = 0;
            if (b < B)
                memcpy(&w, q_rows + b * 2 * K2 + 2 * kk, 4);
            q_tiles[(t * K2 + kk) * MR + r] = w;
        }
}

/* The queries Q[B][d] (fp32) for the kernel: q_rows[B][2 K2] their bf16 roundings (to nearest even, as
 * torch's conversion; an odd d padded with a zero), q_tiles[ceil(B / MR)][K2][MR] the same words by tile
 * (padding queries zero), and in float64 the norms qh[b] = ||q^_b|| and qr[b] = ||q_b - q^_b||; tiles split
 * between `threads` threads of the OpenMP team. */
void prepare_queries(const float *Q, int64_t B, int64_t d, int64_t K2, int64_t threads, uint16_t *q_rows,
                     uint32_t *q_tiles, double *qh, double *qr) {
    const int64_t tiles = (B + MR - 1) / MR;
    const int n = threads > 1 && tiles >= 16 ? (int)threads : 1;
#pragma omp parallel for num_threads(n) if (n > 1) schedule(static)
    for (int64_t t = 0; t < tiles; t++)
        prepare_tile(Q, B, d, K2, t, q_rows, q_tiles, qh, qr);
}

#else
/* No AVX-512 BF16 at build time: the Python side sees tile 0 and keeps its torch filter. */
int bf16_filter_tile(void) { return 0; }
#endif
