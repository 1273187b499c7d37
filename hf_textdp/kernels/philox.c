/* Philox4x32-10 uniforms for hf_textdp.rng (docs/mechanisms/randomness.md §1, §3, §4).
 *
 * Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3" (SC 2011). Token i has
 * key (k0[i], k1[i]); block j of a draw has counter (start + j, pos[i], draw, extra[i * extra_stride]).
 * Block j gives uniforms 2j (words 0, 1) and 2j + 1 (words 2, 3), each u = (floor(x / 2^12) + 1/2) 2^-52
 * from the 64 bits x = hi:lo: exact in float64, on the open interval (0, 1). The integers are those of
 * the int64 tensor form in rng.py bit for bit (the tests compare both on every call shape).
 */
#include <stdint.h>

#define M0 0xD2511F53u
#define M1 0xCD9E8D57u
#define W0 0x9E3779B9u
#define W1 0xBB67AE85u

static inline double uniform52(uint32_t hi, uint32_t lo) {
    return ((double)((((uint64_t)hi << 32) | lo) >> 12) + 0.5) * 0x1p-52;
}

/* rows i0 .. i1 - 1 of out[N][2 * blocks] */
void philox_uniforms(const int64_t *k0, const int64_t *k1, const int64_t *pos, const int64_t *extra,
                     int64_t extra_stride, int64_t draw, int64_t start, int64_t blocks, int64_t i0, int64_t i1,
                     double *out) {
    for (int64_t i = i0; i < i1; i++) {
        const uint32_t a = (uint32_t)k0[i], b = (uint32_t)k1[i], p = (uint32_t)pos[i];
        const uint32_t e = (uint32_t)extra[i * extra_stride];
        double *o = out + i * 2 * blocks;
        for (int64_t j = 0; j < blocks; j++) {
            uint32_t c0 = (uint32_t)(start + j), c1 = p, c2 = (uint32_t)draw, c3 = e, ka = a, kb = b;
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
            o[2 * j] = uniform52(c0, c1);
            o[2 * j + 1] = uniform52(c2, c3);
        }
    }
}
