/* Exact integer keys of the exponential mechanism's sampler on CPUs with AVX2 (hf_textdp/cpu/int8_keys.py;
 * docs/mechanisms/tem.md, "Sampling"): the AVX2 form of kernels/int8_keys.c, same functions and results.
 *
 * For a token with integer vector I_x and a target column c with I_c (|values| <= 127), the key is
 * 2 S - N_c with S = sum_j I_x,j I_c,j. VPMADDWD multiplies pairs of signed 16-bit numbers and adds each
 * pair's two products into a 32-bit lane, exactly (|2 * 127 * 127| < 2^15 * 2^16, and no pair is
 * -32768 * -32768), so the coordinates are widened to int16 and S is an exact int32 sum from the
 * accumulator's start init_c (zero here). Columns come in blocks of NB = 64; int8_block_maxima writes each
 * (token, block) maximum key without storing the keys, int8_block_keys the NB keys of chosen blocks.
 *
 * Operands are 32-bit words of two int16 coordinates (2k, 2k + 1): tokens as q[tile][k][MR] or q_rows[G][K2],
 * columns as e[block][k][NB]; K2 words per vector. Built where the compiler targets AVX2 (no AVX-512 used).
 */
#include <stdint.h>

#include "kernel_common.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

#define MR 6
#define NB 64
#define SUB 16 /* columns per micro-tile: two vectors of 8 */

int int8_keys_tile(void) { return MR; }

DEFINE_OPENMP_PROBE(int8_keys_openmp)

#define ALL(M) M(0) M(1) M(2) M(3) M(4) M(5)
#define DECL(r) __m256i a##r##0 = _mm256_loadu_si256((const __m256i *)ib), a##r##1 = _mm256_loadu_si256((const __m256i *)(ib + 8));
#define STEP(r)                                                                                        \
    {                                                                                                  \
        const __m256i x = _mm256_set1_epi32((int)qk[r]);                                               \
        a##r##0 = _mm256_add_epi32(a##r##0, _mm256_madd_epi16(x, e0));                                 \
        a##r##1 = _mm256_add_epi32(a##r##1, _mm256_madd_epi16(x, e1));                                 \
    }
#define KEY(x, j) _mm256_sub_epi32(_mm256_slli_epi32(x, 1), _mm256_loadu_si256((const __m256i *)(nb + 8 * (j))))
#define MAXR(r)                                                                                        \
    {                                                                                                  \
        const __m256i m = _mm256_max_epi32(KEY(a##r##0, 0), KEY(a##r##1, 1));                          \
        mx[r] = s ? _mm256_max_epi32(mx[r], m) : m;                                                    \
    }

static inline int32_t hmax_epi32(__m256i x) {
    __m128i m = _mm_max_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0x4E));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0xB1));
    return _mm_cvtsi128_si32(m);
}

static void maxima_range(const uint32_t *q, const uint32_t *e, const int32_t *init, const int32_t *norms, int64_t K2,
                         int64_t blocks, int64_t t0, int64_t t1, int64_t pass, int32_t *out) {
    for (int64_t tb = t0; tb < t1; tb += pass) {
        const int64_t te = tb + pass < t1 ? tb + pass : t1;
        for (int64_t b = 0; b < blocks; b++) {
            const uint32_t *eblk = e + b * K2 * NB;
            for (int64_t t = tb; t < te; t++) {
                const uint32_t *qt = q + t * K2 * MR;
                __m256i mx[MR];
                for (int s = 0; s < NB / SUB; s++) {
                    const uint32_t *eb = eblk + s * SUB;
                    const int32_t *ib = init + b * NB + s * SUB, *nb = norms + b * NB + s * SUB;
                    ALL(DECL)
                    for (int64_t k = 0; k < K2; k++) {
                        const __m256i e0 = _mm256_loadu_si256((const __m256i *)(eb + k * NB));
                        const __m256i e1 = _mm256_loadu_si256((const __m256i *)(eb + k * NB + 8));
                        const uint32_t *qk = qt + k * MR;
                        ALL(STEP)
                    }
                    ALL(MAXR)
                }
                int32_t *o = out + t * MR * blocks + b;
                for (int r = 0; r < MR; r++)
                    o[r * blocks] = hmax_epi32(mx[r]);
            }
        }
    }
}

/* out[t * MR + r][b] = the largest key of block b for token r of tile t, tiles split between threads of the
 * OpenMP team (torch's own when built with -fopenmp). */
void int8_block_maxima(const uint32_t *q, const uint32_t *e, const int32_t *init, const int32_t *norms, int64_t K2,
                       int64_t blocks, int64_t t0, int64_t t1, int64_t pass, int64_t threads, int32_t *out) {
#define RANGE(lo, hi) maxima_range(q, e, init, norms, K2, blocks, lo, hi, pass, out)
    TEAM_SPLIT(t0, t1, threads, RANGE)
#undef RANGE
}

/* out[i][0 .. NB) = the keys of block blk[i] for token rows[i] of q_rows[G][K2], i in 0 .. n - 1. */
void int8_block_keys(const uint32_t *q_rows, const uint32_t *e, const int32_t *init, const int32_t *norms,
                     const int64_t *rows, const int64_t *blk, int64_t K2, int64_t n, int32_t *out) {
    for (int64_t i = 0; i < n; i++) {
        const uint32_t *qr = q_rows + rows[i] * K2;
        for (int s = 0; s < NB / SUB; s++) {
            const uint32_t *eb = e + blk[i] * K2 * NB + s * SUB;
            const int32_t *ib = init + blk[i] * NB + s * SUB, *nb = norms + blk[i] * NB + s * SUB;
            __m256i a0 = _mm256_loadu_si256((const __m256i *)ib), a1 = _mm256_loadu_si256((const __m256i *)(ib + 8));
            for (int64_t k = 0; k < K2; k++) {
                const __m256i x = _mm256_set1_epi32((int)qr[k]);
                a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(x, _mm256_loadu_si256((const __m256i *)(eb + k * NB))));
                a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(x, _mm256_loadu_si256((const __m256i *)(eb + k * NB + 8))));
            }
            int32_t *o = out + i * NB + s * SUB;
            _mm256_storeu_si256((__m256i *)o, KEY(a0, 0));
            _mm256_storeu_si256((__m256i *)(o + 8), KEY(a1, 1));
        }
    }
}


#include "int8_bounds.h"

#else
/* No AVX2 at build time: the Python side sees tile 0 and keeps the exact float product. */
int int8_keys_tile(void) { return 0; }
#endif
