/* Philox4x32-10 uniforms and normals for hf_textdp.rng, and madlib's noisy vectors for
 * hf_textdp.mechanisms.madlib (docs/mechanisms/randomness.md §1, §3, §4; docs/mechanisms/madlib.md, "Sampling").
 *
 * Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3" (SC 2011). Token i has key
 * (k0[i], k1[i]); block j of a draw has counter (start + j, pos[i], draw, extra[i * extra_stride]), and gives
 * uniforms 2j (words 0, 1) and 2j + 1 (words 2, 3), each u = (floor(x / 2^12) + 1/2) 2^-52 from the 64 bits
 * x = hi:lo: exact in float64, on the open interval (0, 1). The integers are those of the int64 tensor form
 * in rng.py bit for bit (the tests compare both on every call shape). Normals 2j and 2j + 1 are r cos 2πv and
 * r sin 2πv with r = sqrt(-2 ln u), (u, v) the uniforms of block j.
 *
 * ln, cos and sin are this file's own, in plain C loops the compiler vectorises: ln u = e ln 2 + 2 atanh s
 * (u = 2^e m, m in [√½, √2), s = (m − 1)/(m + 1), |s| < 0.172, the series to s^23), and for 2πv the
 * reduction is exact in v (4v = q + f, q an integer, |f| <= 1/2, both exact) before Taylor polynomials of
 * sin and cos on [−π/4, π/4] (to x^17 and x^16). Each is within a few ulp of the true value; the draw's law
 * is that of Box–Muller on the exact uniforms (the values may differ from torch's own functions by an ulp).
 * Built as ISO C: no contraction into FMA beyond the explicit fma() calls, the same bits in vector and scalar
 * code, so a token's draws never depend on the batch around it.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define M0 0xD2511F53u
#define M1 0xCD9E8D57u
#define W0 0x9E3779B9u
#define W1 0xBB67AE85u
#define CHUNK 256 /* blocks per pass: the row's uniforms stay in L1 */

/* 1 when built with OpenMP (the exported functions split their rows between `threads` threads of the team
 * torch's intra-op pool uses), else 0 (one thread per call) */
int philox_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

/* rows lo .. hi - 1 of i0 .. i1 - 1 for part p of m near-equal consecutive parts */
static inline void part_range(int64_t i0, int64_t i1, int64_t p, int64_t m, int64_t *lo, int64_t *hi) {
    *lo = i0 + (i1 - i0) * p / m;
    *hi = i0 + (i1 - i0) * (p + 1) / m;
}

/* In a function returning int: RANGE(lo, hi) (0, or nonzero when its buffer cannot be allocated) over rows i0 .. i1 - 1
 * split into consecutive parts, one per thread of `threads`; returns 0, or -1 when a part failed (its rows are then
 * not written) */
#define RETURN_PARTS(i0, i1, threads, RANGE)                                                                       \
    do {                                                                                                           \
        const int64_t m_ = (threads);                                                                              \
        int failed_ = 0;                                                                                           \
        _Pragma("omp parallel for num_threads(m_) if (m_ > 1) schedule(static, 1) reduction(| : failed_)")      \
        for (int64_t p_ = 0; p_ < m_; p_++) {                                                                      \
            int64_t lo_, hi_;                                                                                      \
            part_range((i0), (i1), p_, m_, &lo_, &hi_);                                                            \
            failed_ |= RANGE(lo_, hi_) != 0;                                                                       \
        }                                                                                                          \
        return failed_ ? -1 : 0;                                                                                   \
    } while (0)

static inline double uniform52(uint32_t hi, uint32_t lo) {
    return ((double)((((uint64_t)hi << 32) | lo) >> 12) + 0.5) * 0x1p-52;
}

#if defined(__AVX512F__) && defined(__AVX512DQ__)
#include <immintrin.h>

/* high and low 32 bits of the 16 products a_l * m */
static inline __m512i mulhi32(__m512i a, __m512i m) {
    const __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(a, m), 32);
    const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
    return _mm512_mask_blend_epi32(0xAAAA, even, odd);
}

/* the uniforms of 64-bit words hi:lo for lanes 0-7 (half 0) or 8-15 (half 1) of two vectors of words */
static inline __m512d uniform52x8(__m512i hi, __m512i lo, int half) {
    const __m512i idx = half ? _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8)
                             : _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i x = _mm512_permutex2var_epi32(lo, idx, hi); /* 64-bit lanes lo | hi << 32 */
    const __m512d top = _mm512_cvtepu64_pd(_mm512_srli_epi64(x, 12));
    return _mm512_mul_pd(_mm512_add_pd(top, _mm512_set1_pd(0.5)), _mm512_set1_pd(0x1p-52));
}

/* blocks j .. j + 15: the same words as the scalar rounds below, 16 counters a vector */
static inline void uniform_pairs16(uint32_t ka0, uint32_t kb0, uint32_t p, uint32_t draw, uint32_t e, int64_t j,
                                   double *restrict u, double *restrict v) {
    const __m512i m0 = _mm512_set1_epi32((int)M0), m1 = _mm512_set1_epi32((int)M1);
    __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)j),
                                  _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
    __m512i c1 = _mm512_set1_epi32((int)p), c2 = _mm512_set1_epi32((int)draw), c3 = _mm512_set1_epi32((int)e);
    uint32_t ka = ka0, kb = kb0;
    for (int r = 0; r < 10; r++) {
        const __m512i h0 = mulhi32(c0, m0), h1 = mulhi32(c2, m1);
        const __m512i l0 = _mm512_mullo_epi32(c0, m0), l1 = _mm512_mullo_epi32(c2, m1);
        c0 = _mm512_xor_si512(_mm512_xor_si512(h1, c1), _mm512_set1_epi32((int)ka));
        c2 = _mm512_xor_si512(_mm512_xor_si512(h0, c3), _mm512_set1_epi32((int)kb));
        c1 = l1;
        c3 = l0;
        ka += W0;
        kb += W1;
    }
    _mm512_storeu_pd(u, uniform52x8(c0, c1, 0));
    _mm512_storeu_pd(u + 8, uniform52x8(c0, c1, 1));
    _mm512_storeu_pd(v, uniform52x8(c2, c3, 0));
    _mm512_storeu_pd(v + 8, uniform52x8(c2, c3, 1));
}
#endif

/* uniforms u[j], v[j] of blocks start .. start + n - 1 of one token */
static void uniform_pairs(uint32_t ka0, uint32_t kb0, uint32_t p, uint32_t draw, uint32_t e, int64_t start,
                          int64_t n, double *restrict u, double *restrict v) {
    int64_t j = 0;
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    for (; j + 16 <= n; j += 16)
        uniform_pairs16(ka0, kb0, p, draw, e, start + j, u + j, v + j);
#endif
    for (; j < n; j++) {
        uint32_t c0 = (uint32_t)(start + j), c1 = p, c2 = draw, c3 = e, ka = ka0, kb = kb0;
        for (int r = 0; r < 10; r++) {
            const uint64_t p0 = (uint64_t)M0 * c0, p1 = (uint64_t)M1 * c2;
            const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ ka, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ kb;
            c0 = n0;
            c1 = (uint32_t)p1;
            c2 = n2;
            c3 = (uint32_t)p0;
            ka += W0;
            kb += W1;
        }
        u[j] = uniform52(c0, c1);
        v[j] = uniform52(c2, c3);
    }
}

/* ln u for u in (0, 1), u >= 2^-53 (normal) */
static inline double log_unit(double u) {
    uint64_t b;
    memcpy(&b, &u, 8);
    int64_t ex = (int64_t)(b >> 52) - 1023;
    const uint64_t mb = (b & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull;
    double m;
    memcpy(&m, &mb, 8); /* u = 2^ex m, m in [1, 2) */
    const int64_t big = m > 1.4142135623730951;
    m = big ? 0.5 * m : m; /* exact */
    ex += big;
    const double s = (m - 1.0) / (m + 1.0), s2 = s * s; /* m − 1 exact (Sterbenz) */
    double p = 2.0 / 23;
    p = fma(p, s2, 2.0 / 21);
    p = fma(p, s2, 2.0 / 19);
    p = fma(p, s2, 2.0 / 17);
    p = fma(p, s2, 2.0 / 15);
    p = fma(p, s2, 2.0 / 13);
    p = fma(p, s2, 2.0 / 11);
    p = fma(p, s2, 2.0 / 9);
    p = fma(p, s2, 2.0 / 7);
    p = fma(p, s2, 2.0 / 5);
    p = fma(p, s2, 2.0 / 3);
    const double lm = fma(s * s2, p, 2.0 * s); /* 2 atanh s = ln m */
    const double e = (double)ex;
    /* ln 2 = LN2_HI + LN2_LO, LN2_HI with 32 bits: e LN2_HI exact for |e| < 2^20 */
    return fma(e, 0x1.62e42feep-1, fma(e, 0x1.a39ef35793c76p-33, lm));
}

/* sin and cos of 2πv for v in (0, 1) */
static inline void sincos_turn(double v, double *sn, double *cs) {
    const double w = 4.0 * v;                 /* exact */
    const int64_t q = (int64_t)(w + 0.5);     /* the nearest quadrant, 0 .. 4 */
    const double f = w - (double)q;           /* exact, |f| <= 1/2 */
    const double x = f * 1.5707963267948966; /* the angle left, |x| <= π/4 */
    const double x2 = x * x;
    double ps = 1.0 / 355687428096000.0; /* 1/17! */
    ps = fma(ps, x2, -1.0 / 1307674368000.0);
    ps = fma(ps, x2, 1.0 / 6227020800.0);
    ps = fma(ps, x2, -1.0 / 39916800.0);
    ps = fma(ps, x2, 1.0 / 362880.0);
    ps = fma(ps, x2, -1.0 / 5040.0);
    ps = fma(ps, x2, 1.0 / 120.0);
    ps = fma(ps, x2, -1.0 / 6.0);
    const double s = fma(x * x2, ps, x);
    double pc = 1.0 / 20922789888000.0; /* 1/16! */
    pc = fma(pc, x2, -1.0 / 87178291200.0);
    pc = fma(pc, x2, 1.0 / 479001600.0);
    pc = fma(pc, x2, -1.0 / 3628800.0);
    pc = fma(pc, x2, 1.0 / 40320.0);
    pc = fma(pc, x2, -1.0 / 720.0);
    pc = fma(pc, x2, 1.0 / 24.0);
    pc = fma(pc, x2, -0.5);
    const double c = fma(x2, pc, 1.0);
    /* 2πv = qπ/2 + x: quadrant 1 swaps to (c, −s), 2 negates both, 3 gives (−c, s) */
    const int64_t odd = q & 1, neg_s = (q >> 1) & 1, neg_c = ((q + 1) >> 1) & 1;
    const double a = odd ? c : s, b = odd ? s : c;
    *sn = neg_s ? -a : a;
    *cs = neg_c ? -b : b;
}

/* z[2j] = r cos 2πv[j], z[2j + 1] = r sin 2πv[j], r = sqrt(-2 ln u[j]), for j < n (exported for the tests) */
void box_muller(const double *restrict u, const double *restrict v, int64_t n, double *restrict z) {
    for (int64_t j = 0; j < n; j++) {
        double sn, cs;
        sincos_turn(v[j], &sn, &cs);
        const double r = sqrt(-2.0 * log_unit(u[j]));
        z[2 * j] = r * cs;
        z[2 * j + 1] = r * sn;
    }
}

/* normals 2 start .. 2 (start + n) - 1 of one token into z */
static void normal_pairs(uint32_t ka, uint32_t kb, uint32_t p, uint32_t draw, uint32_t e, int64_t start, int64_t n,
                         double *restrict z) {
    double u[CHUNK], v[CHUNK];
    for (int64_t j0 = 0; j0 < n; j0 += CHUNK) {
        const int64_t m = n - j0 < CHUNK ? n - j0 : CHUNK;
        uniform_pairs(ka, kb, p, draw, e, start + j0, m, u, v);
        box_muller(u, v, m, z + 2 * j0);
    }
}

/* rows i0 .. i1 - 1 of out[N][2 * blocks]: the uniforms of blocks start .. start + blocks - 1 */
static void uniforms_range(const int64_t *k0, const int64_t *k1, const int64_t *pos, const int64_t *extra,
                           int64_t extra_stride, int64_t draw, int64_t start, int64_t blocks, int64_t i0, int64_t i1,
                           double *out) {
    double u[CHUNK], v[CHUNK];
    for (int64_t i = i0; i < i1; i++) {
        double *o = out + i * 2 * blocks;
        for (int64_t j0 = 0; j0 < blocks; j0 += CHUNK) {
            const int64_t m = blocks - j0 < CHUNK ? blocks - j0 : CHUNK;
            uniform_pairs((uint32_t)k0[i], (uint32_t)k1[i], (uint32_t)pos[i], (uint32_t)draw,
                          (uint32_t)extra[i * extra_stride], start + j0, m, u, v);
            for (int64_t j = 0; j < m; j++) {
                o[2 * (j0 + j)] = u[j];
                o[2 * (j0 + j) + 1] = v[j];
            }
        }
    }
}

/* the same on `threads` threads (the rows split in consecutive parts: each row's values do not depend on it) */
void philox_uniforms(const int64_t *k0, const int64_t *k1, const int64_t *pos, const int64_t *extra,
                     int64_t extra_stride, int64_t draw, int64_t start, int64_t blocks, int64_t i0, int64_t i1,
                     int64_t threads, double *out) {
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static, 1)
    for (int64_t p = 0; p < threads; p++) {
        int64_t lo, hi;
        part_range(i0, i1, p, threads, &lo, &hi);
        uniforms_range(k0, k1, pos, extra, extra_stride, draw, start, blocks, lo, hi, out);
    }
}

/* rows i0 .. i1 - 1 of out[N][2 * blocks]: the normals of blocks start .. start + blocks - 1, on `threads`
 * threads */
void philox_normals(const int64_t *k0, const int64_t *k1, const int64_t *pos, const int64_t *extra,
                    int64_t extra_stride, int64_t draw, int64_t start, int64_t blocks, int64_t i0, int64_t i1,
                    int64_t threads, double *out) {
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static, 1)
    for (int64_t p = 0; p < threads; p++) {
        int64_t lo, hi;
        part_range(i0, i1, p, threads, &lo, &hi);
        for (int64_t i = lo; i < hi; i++)
            normal_pairs((uint32_t)k0[i], (uint32_t)k1[i], (uint32_t)pos[i], (uint32_t)draw,
                         (uint32_t)extra[i * extra_stride], start, blocks, out + i * 2 * blocks);
    }
}

/* madlib's release fl32(x_i + G_i r_i / ||G_i||) for tokens i0 .. i1 - 1, x_i row i of x[][k] (or row rows[i]
 * when rows is given; fp32, or float64 when x_f64), G_i the token's first k normals of `draw`, r_i = radius[i]:
 * out[N][k] fp32. Returns 0, or -1 when the row buffer cannot be allocated (nothing written). */
static int shift_range(const int64_t *k0, const int64_t *k1, const int64_t *pos, int64_t draw, const double *radius,
                       const void *x, const int64_t *rows, int64_t x_f64, int64_t k, int64_t i0, int64_t i1,
                       float *out) {
    const int64_t blocks = (k + 1) / 2;
    double *buf = malloc((size_t)(2 * blocks) * sizeof(double));
    if (buf == NULL)
        return -1;
    const int64_t row_bytes = k * (x_f64 ? 8 : 4);
    for (int64_t i = i0; i < i1; i++) {
        if (rows && i + 1 < i1) /* the next token's row, gathered from anywhere in x: on its way while this one's
                                   normals are drawn */
            for (int64_t b = 0; b < row_bytes; b += 64)
                __builtin_prefetch((const char *)x + rows[i + 1] * row_bytes + b);
        normal_pairs((uint32_t)k0[i], (uint32_t)k1[i], (uint32_t)pos[i], (uint32_t)draw, 0, 0, blocks, buf);
        double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t j = 0;
        for (; j + 8 <= k; j += 8)
            for (int l = 0; l < 8; l++)
                acc[l] += buf[j + l] * buf[j + l];
        double ss = 0.0;
        for (; j < k; j++)
            ss += buf[j] * buf[j];
        for (int l = 0; l < 8; l++)
            ss += acc[l];
        const double scale = radius[i] / sqrt(ss);
        float *o = out + i * k;
        const int64_t xi = rows ? rows[i] : i;
        if (x_f64) {
            const double *xr = (const double *)x + xi * k;
            for (j = 0; j < k; j++)
                o[j] = (float)(xr[j] + buf[j] * scale);
        } else {
            const float *xr = (const float *)x + xi * k;
            for (j = 0; j < k; j++)
                o[j] = (float)((double)xr[j] + buf[j] * scale);
        }
    }
    free(buf);
    return 0;
}

/* metric_laplace_shift's rows i0 .. i1 - 1 on `threads` threads: 0, or -1 when a part's buffer cannot be
 * allocated (its rows are then not written) */
int metric_laplace_shift(const int64_t *k0, const int64_t *k1, const int64_t *pos, int64_t draw,
                         const double *radius, const void *x, const int64_t *rows, int64_t x_f64, int64_t k,
                         int64_t i0, int64_t i1, int64_t threads, float *out) {
#define RANGE(lo, hi) shift_range(k0, k1, pos, draw, radius, x, rows, x_f64, k, lo, hi, out)
    RETURN_PARTS(i0, i1, threads, RANGE);
#undef RANGE
}

/* The Laplace-type noises of the additive mechanisms (docs/mechanisms/laplace.md §4, §8.1): for tokens i0 .. i1 - 1
 * and j < k, from the token's uniform u_j of `draw` (those of philox_uniforms, start 0, extra 0):
 * w[i][j] = |2u − 1|·mult (exact for mult = −1; Laplace's −2|u − ½|, the truncated law's |2u − 1|·expm1(−αA)) and
 * neg[i][j] = (u < ½), the sign of u − ½. The logarithm log1p(w) is taken by the caller (torch's own). */
void laplace_parts(const int64_t *k0, const int64_t *k1, const int64_t *pos, int64_t draw, int64_t k, double mult,
                   int64_t i0, int64_t i1, int64_t threads, double *w, uint8_t *neg) {
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static, 1)
    for (int64_t p = 0; p < threads; p++) {
        int64_t lo, hi;
        part_range(i0, i1, p, threads, &lo, &hi);
        double u[CHUNK], v[CHUNK], x[2 * CHUNK];
        const int64_t blocks = (k + 1) / 2;
        for (int64_t i = lo; i < hi; i++) {
            for (int64_t j0 = 0; j0 < blocks; j0 += CHUNK) {
                const int64_t m = blocks - j0 < CHUNK ? blocks - j0 : CHUNK;
                const int64_t c0 = 2 * j0, c1 = 2 * (j0 + m) < k ? 2 * (j0 + m) : k;
                uniform_pairs((uint32_t)k0[i], (uint32_t)k1[i], (uint32_t)pos[i], (uint32_t)draw, 0, j0, m, u, v);
                for (int64_t j = 0; j < m; j++) {
                    x[2 * j] = u[j];
                    x[2 * j + 1] = v[j];
                }
                double *wi = w + i * k + c0;
                uint8_t *ni = neg + i * k + c0;
                for (int64_t c = 0; c < c1 - c0; c++) {
                    wi[c] = fabs(2.0 * x[c] - 1.0) * mult;
                    ni[c] = x[c] < 0.5;
                }
            }
        }
    }
}

/* token i's input x̃ = x[row]·f[row] in float64 (x fp32; f NULL: x̃ = x) into xt[k] */
static inline void bounded_input(const float *x, const double *f, int64_t row, int64_t k, double *restrict xt) {
    const float *xr = x + row * k;
    if (f) {
        const double fr = f[row];
        for (int64_t j = 0; j < k; j++)
            xt[j] = (double)xr[j] * fr;
    } else
        for (int64_t j = 0; j < k; j++)
            xt[j] = (double)xr[j];
}

/* The Laplace-type releases fl32(x̃_i + z_i) for tokens i0 .. i1 - 1 into out[][k]: x̃ of bounded_input for row
 * rows[i], z_ij = ±(L_ij·scale) (divide 0) or ±(L_ij/scale) (divide 1), + where neg[i][j], L = log1p(w) of
 * laplace_parts: Laplace's L·(sgn(u − ½)·(−b)) and the truncated law's sgn(2u − 1)·(−L/α), each rounded once
 * as in the tensor form. Returns 0, or -1 when a row buffer cannot be allocated. */
int laplace_release(const double *L, const uint8_t *neg, double scale, int64_t divide, const float *x,
                    const double *f, const int64_t *rows, int64_t k, int64_t i0, int64_t i1, float *out) {
    double *xt = malloc((size_t)k * sizeof(double));
    if (xt == NULL)
        return -1;
    for (int64_t i = i0; i < i1; i++) {
        bounded_input(x, f, rows[i], k, xt);
        const double *Li = L + i * k;
        const uint8_t *ni = neg + i * k;
        float *o = out + i * k;
        for (int64_t j = 0; j < k; j++) {
            const double a = divide ? Li[j] / scale : Li[j] * scale;
            o[j] = (float)(xt[j] + (ni[j] ? a : -a));
        }
    }
    free(xt);
    return 0;
}

/* The Gaussian release fl32(x̃_i + G_i·σ) for tokens i0 .. i1 - 1 into out[][k]: G_i the token's first k normals of
 * `draw` (those of philox_normals, extra 0), x̃ of bounded_input for row rows[i]. Returns 0, or -1 when a buffer
 * cannot be allocated (nothing written). */
static int gaussian_range(const int64_t *k0, const int64_t *k1, const int64_t *pos, int64_t draw, double sigma,
                          const float *x, const double *f, const int64_t *rows, int64_t k, int64_t i0, int64_t i1,
                          float *out) {
    const int64_t blocks = (k + 1) / 2;
    double *buf = malloc((size_t)(2 * blocks + k) * sizeof(double));
    if (buf == NULL)
        return -1;
    double *xt = buf + 2 * blocks;
    for (int64_t i = i0; i < i1; i++) {
        normal_pairs((uint32_t)k0[i], (uint32_t)k1[i], (uint32_t)pos[i], (uint32_t)draw, 0, 0, blocks, buf);
        bounded_input(x, f, rows[i], k, xt);
        float *o = out + i * k;
        for (int64_t j = 0; j < k; j++)
            o[j] = (float)(xt[j] + buf[j] * sigma);
    }
    free(buf);
    return 0;
}

/* gaussian_range's tokens i0 .. i1 - 1 on `threads` threads: 0, or -1 when a part's buffer cannot be allocated */
int gaussian_release(const int64_t *k0, const int64_t *k1, const int64_t *pos, int64_t draw, double sigma,
                     const float *x, const double *f, const int64_t *rows, int64_t k, int64_t i0, int64_t i1,
                     int64_t threads, float *out) {
#define RANGE(lo, hi) gaussian_range(k0, k1, pos, draw, sigma, x, f, rows, k, lo, hi, out)
    RETURN_PARTS(i0, i1, threads, RANGE);
#undef RANGE
}
