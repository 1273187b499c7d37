/* Exact integer keys of the exponential mechanism's sampler on CPUs with AVX-512 VNNI
 * (hf_textdp/cpu/int8_keys.py; docs/mechanisms/tem.md, "Sampling").
 *
 * For a token with integer vector I_x and a target column c with I_c (int8, |values| <= 127), the key is
 * 2 S - N_c with S = sum_j I_x,j I_c,j: exact in int32. VPDPBUSD multiplies unsigned by signed bytes, so the
 * token is offset to a = I_x + 128 (1 .. 255) and each column's accumulator starts at -128 sum_j I_c,j,
 * which makes the sum S exactly. Columns come in blocks of NB = 64; int8_block_maxima writes each
 * (token, block) maximum key without storing the keys, int8_block_keys the NB keys of chosen blocks.
 *
 * Operands are 32-bit words of four bytes (coordinates 4k .. 4k + 3): tokens as q[tile][k][MR] (MR per
 * tile) or q_rows[G][K4], columns as e[block][k][NB]; K4 words per vector.
 */
#include <stdint.h>

#include "kernel_common.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512VNNI__)
#include <immintrin.h>

#define MR 4
#define NB 64

int int8_keys_tile(void) { return MR; }

DEFINE_OPENMP_PROBE(int8_keys_openmp)

#define DECL(r)                                                                                        \
    __m512i a##r##0 = _mm512_loadu_si512(ib), a##r##1 = _mm512_loadu_si512(ib + 16),                   \
            a##r##2 = _mm512_loadu_si512(ib + 32), a##r##3 = _mm512_loadu_si512(ib + 48);
#define STEP(r)                                                                                        \
    {                                                                                                  \
        const __m512i b = _mm512_set1_epi32((int)qk[r]);                                               \
        a##r##0 = _mm512_dpbusd_epi32(a##r##0, b, e0);                                                 \
        a##r##1 = _mm512_dpbusd_epi32(a##r##1, b, e1);                                                 \
        a##r##2 = _mm512_dpbusd_epi32(a##r##2, b, e2);                                                 \
        a##r##3 = _mm512_dpbusd_epi32(a##r##3, b, e3);                                                 \
    }
#define KEY(x, j) _mm512_sub_epi32(_mm512_slli_epi32(x, 1), _mm512_loadu_si512(nb + 16 * (j)))
#define STORE(r)                                                                                       \
    o[(r) * blocks] = _mm512_reduce_max_epi32(_mm512_max_epi32(_mm512_max_epi32(KEY(a##r##0, 0), KEY(a##r##1, 1)), \
                                                               _mm512_max_epi32(KEY(a##r##2, 2), KEY(a##r##3, 3))));
#define ALL(M) M(0) M(1) M(2) M(3)

static void maxima_range(const uint32_t *q, const uint32_t *e, const int32_t *init, const int32_t *norms, int64_t K4,
                         int64_t blocks, int64_t t0, int64_t t1, int64_t pass, int32_t *out) {
    for (int64_t tb = t0; tb < t1; tb += pass) {
        const int64_t te = tb + pass < t1 ? tb + pass : t1;
        for (int64_t b = 0; b < blocks; b++) {
            const uint32_t *eb = e + b * K4 * NB;
            const int32_t *ib = init + b * NB, *nb = norms + b * NB;
            for (int64_t t = tb; t < te; t++) {
                const uint32_t *qt = q + t * K4 * MR;
                ALL(DECL)
                /* unrolled by 4: 1.0 TOPS a core on Zen 5 against 0.79 rolled (GCC 12) */
#pragma GCC unroll 4
                for (int64_t k = 0; k < K4; k++) {
                    const __m512i e0 = _mm512_loadu_si512(eb + k * NB), e1 = _mm512_loadu_si512(eb + k * NB + 16);
                    const __m512i e2 = _mm512_loadu_si512(eb + k * NB + 32), e3 = _mm512_loadu_si512(eb + k * NB + 48);
                    const uint32_t *qk = qt + k * MR;
                    ALL(STEP)
                }
                int32_t *o = out + t * MR * blocks + b;
                ALL(STORE)
            }
        }
    }
}

/* out[t * MR + r][b] = the largest key of block b for token r of tile t, tiles split between threads of the
 * OpenMP team (torch's own when built with -fopenmp). */
void int8_block_maxima(const uint32_t *q, const uint32_t *e, const int32_t *init, const int32_t *norms, int64_t K4,
                       int64_t blocks, int64_t t0, int64_t t1, int64_t pass, int64_t threads, int32_t *out) {
#define RANGE(lo, hi) maxima_range(q, e, init, norms, K4, blocks, lo, hi, pass, out)
    TEAM_SPLIT(t0, t1, threads, RANGE)
#undef RANGE
}

/* out[i][0 .. NB) = the keys of block blk[i] for token rows[i] of q_rows[G][K4], i in 0 .. n - 1. */
void int8_block_keys(const uint32_t *q_rows, const uint32_t *e, const int32_t *init, const int32_t *norms,
                     const int64_t *rows, const int64_t *blk, int64_t K4, int64_t n, int32_t *out) {
    for (int64_t i = 0; i < n; i++) {
        const uint32_t *qr = q_rows + rows[i] * K4, *eb = e + blk[i] * K4 * NB;
        const int32_t *ib = init + blk[i] * NB, *nb = norms + blk[i] * NB;
        __m512i a0 = _mm512_loadu_si512(ib), a1 = _mm512_loadu_si512(ib + 16);
        __m512i a2 = _mm512_loadu_si512(ib + 32), a3 = _mm512_loadu_si512(ib + 48);
        for (int64_t k = 0; k < K4; k++) {
            const __m512i b = _mm512_set1_epi32((int)qr[k]);
            a0 = _mm512_dpbusd_epi32(a0, b, _mm512_loadu_si512(eb + k * NB));
            a1 = _mm512_dpbusd_epi32(a1, b, _mm512_loadu_si512(eb + k * NB + 16));
            a2 = _mm512_dpbusd_epi32(a2, b, _mm512_loadu_si512(eb + k * NB + 32));
            a3 = _mm512_dpbusd_epi32(a3, b, _mm512_loadu_si512(eb + k * NB + 48));
        }
        int32_t *o = out + i * NB;
        _mm512_storeu_si512(o, KEY(a0, 0));
        _mm512_storeu_si512(o + 16, KEY(a1, 1));
        _mm512_storeu_si512(o + 32, KEY(a2, 2));
        _mm512_storeu_si512(o + 48, KEY(a3, 3));
    }
}


#include "int8_bounds.h"

#else
/* No AVX-512 VNNI at build time: the Python side sees tile 0 and keeps torch's int8 product. */
int int8_keys_tile(void) { return 0; }
#endif
