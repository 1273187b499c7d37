/* The exponential sampler's proposal bounds from its exact integer keys (hf_textdp/cpu/int8_keys.py,
 * sampler_bounds; docs/mechanisms/tem.md, "Sampling"), included by kernels/int8_keys.c and int8_keys_avx2.c after
 * their int8_block_keys. It is the float64 part of ExponentialSampler._bounds_tensors in the same operations and
 * order, so every number is the same bit for bit: products, differences, sums and clamps are correctly rounded
 * (no -ffast-math; -std=c99 keeps GCC from fusing a product and a difference), and the two functions whose
 * rounding is torch's own (its float64 sqrt is not always the correctly rounded one, nor exp) are taken by the
 * caller in torch between the passes, on the whole buffer at once (torch's results do not depend on an element's
 * place in its tensor):
 *
 *   dlo(D, r) = min(max(sqrt(max(D, 0)) * s - r, 0), gamma)   for the exact integer D = N_x - key >= ||I_x - I_c||^2
 *
 * per block (its largest key, r = r_x + max r_c) and per column of the HOT blocks of largest key (ties: the
 * lower block), and m the smallest block bound. Pass one (in the key kernel's team, after each thread's block
 * maxima) writes the hot blocks and columns and max(D, 0) in cum (hot columns first, then the blocks); the
 * caller takes sqrt in place; pass two writes dlo_c, dlo_b and the exponents (dlo - m) * (-scale) in cum; the
 * caller takes exp in place; pass three zeroes the padding columns and the hot blocks, multiplies each block's
 * weight by its size and sums each row from the left, as torch.cumsum does.
 */
#ifndef HF_TEXTDP_INT8_BOUNDS_H
#define HF_TEXTDP_INT8_BOUNDS_H

#include <math.h>
#include <stdint.h>

#pragma STDC FP_CONTRACT OFF

typedef struct {
    const int64_t *Nx;      /* [G] N_x of each token */
    const double *rx;       /* [G] r_x */
    const double *rT;       /* [blocks * NB] r_c of each column (0 for padding) */
    const double *block_r;  /* [blocks] max r_c in each block */
    const double *size;     /* [blocks] columns in each block (float64) */
    double s, scale, gamma; /* s (1 - slack), the exponent's factor a, gamma */
    int64_t blocks, hot, Vt;
    int64_t *hot_blocks; /* out [G, hot] */
    int64_t *cols;       /* out [G, hot * NB] */
    double *dlo_c;       /* out [G, hot * NB] */
    double *dlo_b;       /* out [G, blocks] */
    double *cum;         /* out [G, hot * NB + blocks] */
} Bounds;

/* torch's clamp(max(., 0) .. gamma) of sq * s - r, sq the square root of the clamped integer distance. */
static inline double bound_dlo(double sq, double r, double s, double gamma) {
    double t = sq * s;
    t = t - r;
    t = t > 0.0 ? t : 0.0;
    return t < gamma ? t : gamma;
}

/* The hot blocks of one token: the `hot` largest of kb (ties: the lower block), largest first. */
static void bounds_hot(const int32_t *kb, int64_t blocks, int64_t hot, int64_t *out) {
    int64_t have = 0;
    for (int64_t b = 0; b < blocks; b++) {
        if (have == hot && kb[b] <= kb[out[hot - 1]])
            continue;
        int64_t i = have < hot ? have++ : hot - 1;
        while (i > 0 && kb[out[i - 1]] < kb[b]) {
            out[i] = out[i - 1];
            i--;
        }
        out[i] = b;
    }
}

static inline double clamped_distance(int64_t Nx, int32_t key) {
    const double t = (double)(Nx - (int64_t)key);
    return t > 0.0 ? t : 0.0;
}

/* Pass one for tokens g0 .. g1 - 1 (kb [G, blocks] their block maxima, q_rows [G][K] their packed rows): the hot
 * blocks and columns, and in cum the clamped integer distances max(N_x - key, 0) of the hot columns and blocks
 * (the caller takes their square roots in place, as the tensor form does). */
static void bounds_pass_one(const Bounds *B, const int32_t *kb, const uint32_t *q_rows, const uint32_t *e,
                            const int32_t *init, const int32_t *norms, int64_t K, int64_t g0, int64_t g1) {
    const int64_t nb = B->blocks, hot = B->hot, nh = hot * NB, width = nh + nb;
    int32_t keys[NB];
    for (int64_t g = g0; g < g1; g++) {
        const int32_t *k = kb + g * nb;
        const int64_t Nx = B->Nx[g];
        double *cm = B->cum + g * width;
        for (int64_t b = 0; b < nb; b++)
            cm[nh + b] = clamped_distance(Nx, k[b]);
        int64_t *hb = B->hot_blocks + g * hot;
        bounds_hot(k, nb, hot, hb);
        for (int64_t h = 0; h < hot; h++) {
            const int64_t zero = 0, blk = hb[h];
            int8_block_keys(q_rows + g * K, e, init, norms, &zero, &blk, K, 1, keys);
            int64_t *cl = B->cols + g * nh + h * NB;
            for (int64_t j = 0; j < NB; j++) {
                cl[j] = blk * NB + j;
                cm[h * NB + j] = clamped_distance(Nx, keys[j]);
            }
        }
    }
}

/* Pass two for tokens g0 .. g1 - 1, once cum holds the square roots: the lower bounds dlo_c and dlo_b, m the
 * smallest of dlo_b, and in cum the exponents (dlo - m) * (-scale) (the caller takes exp in place). */
static void bounds_pass_two(const Bounds *B, int64_t g0, int64_t g1) {
    const int64_t nb = B->blocks, hot = B->hot, nh = hot * NB, width = nh + nb;
    const double s = B->s, gamma = B->gamma, ns = -B->scale;
    for (int64_t g = g0; g < g1; g++) {
        double *cm = B->cum + g * width, *db = B->dlo_b + g * nb, *dc = B->dlo_c + g * nh;
        const int64_t *cl = B->cols + g * nh;
        const double rx = B->rx[g];
        double m = INFINITY;
        for (int64_t b = 0; b < nb; b++) {
            const double v = bound_dlo(cm[nh + b], rx + B->block_r[b], s, gamma);
            db[b] = v;
            m = v < m ? v : m;
        }
        for (int64_t j = 0; j < nh; j++) {
            dc[j] = bound_dlo(cm[j], rx + B->rT[cl[j]], s, gamma);
            cm[j] = (dc[j] - m) * ns;
        }
        for (int64_t b = 0; b < nb; b++)
            cm[nh + b] = (db[b] - m) * ns;
    }
}

/* Pass three for tokens g0 .. g1 - 1, once cum holds the exponentials: the proposal's cumulative weights. */
static void bounds_pass_three(const Bounds *B, int64_t g0, int64_t g1) {
    const int64_t nb = B->blocks, hot = B->hot, nh = hot * NB, width = nh + nb;
    for (int64_t g = g0; g < g1; g++) {
        double *cm = B->cum + g * width;
        const int64_t *cl = B->cols + g * nh, *hb = B->hot_blocks + g * hot;
        for (int64_t j = 0; j < nh; j++)
            if (cl[j] >= B->Vt)
                cm[j] = 0.0;
        for (int64_t b = 0; b < nb; b++)
            cm[nh + b] = cm[nh + b] * B->size[b];
        for (int64_t h = 0; h < hot; h++)
            cm[nh + hb[h]] = 0.0;
    }
    /* each row's sum from the left, four rows at a time (four independent chains; each row's order unchanged) */
    int64_t g = g0;
    for (; g + 4 <= g1; g += 4) {
        double *c0 = B->cum + g * width, *c1 = c0 + width, *c2 = c1 + width, *c3 = c2 + width;
        double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
        for (int64_t j = 0; j < width; j++) {
            a0 += c0[j];
            a1 += c1[j];
            a2 += c2[j];
            a3 += c3[j];
            c0[j] = a0;
            c1[j] = a1;
            c2[j] = a2;
            c3[j] = a3;
        }
    }
    for (; g < g1; g++) {
        double *cm = B->cum + g * width, acc = 0.0;
        for (int64_t j = 0; j < width; j++) {
            acc += cm[j];
            cm[j] = acc;
        }
    }
}

/* The proposals of T tries for each of n tokens (run_round's tensor form in sampler_tries.py, the same numbers):
 * token i reads the proposal row row[i] (i where row is NULL) of cum [., width], cols and dlo_c [., hot * NB] and
 * dlo_b [., blocks], with its uniforms u[i][t][0 .. 3). The column is the first whose cumulative weight exceeds
 * u0 * the row's total (torch.searchsorted(right=True), at most width - 1): a hot column, or in block b the column
 * b * NB + min(floor(u1 * size_b), NB - 1); then at most Vt - 1. Writes col[i][t] and its lower bound dlo[i][t]. */
void int8_sampler_pick(const Bounds *B, const int64_t *row, const double *u, int64_t n, int64_t T, int64_t *col,
                       double *dlo) {
    const int64_t nb = B->blocks, nh = B->hot * NB, width = nh + nb;
    for (int64_t i = 0; i < n; i++) {
        const int64_t r = row ? row[i] : i;
        const double *cm = B->cum + r * width;
        for (int64_t t = 0; t < T; t++) {
            const double *ut = u + (i * T + t) * 3;
            const double target = ut[0] * cm[width - 1];
            int64_t lo = 0, hi = width; /* the number of cm[j] <= target */
            while (lo < hi) {
                const int64_t mid = lo + (hi - lo) / 2;
                if (cm[mid] <= target)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            const int64_t k = lo < width - 1 ? lo : width - 1;
            int64_t c;
            double d;
            if (k < nh) {
                c = B->cols[r * nh + k];
                d = B->dlo_c[r * nh + k];
            } else {
                const int64_t b = k - nh;
                int64_t j = (int64_t)floor(ut[1] * B->size[b]);
                j = j < NB - 1 ? j : NB - 1;
                c = b * NB + j;
                d = B->dlo_b[r * nb + b];
            }
            col[i * T + t] = c < B->Vt - 1 ? c : B->Vt - 1;
            dlo[i * T + t] = d;
        }
    }
}

/* int8_block_maxima, then pass one for the tokens of each thread's tiles (G tokens in all). */
void int8_sampler_bounds(const uint32_t *q, const uint32_t *q_rows, const uint32_t *e, const int32_t *init,
                         const int32_t *norms, int64_t K, int64_t t0, int64_t t1, int64_t pass, int64_t threads,
                         int64_t G, int32_t *kb, const Bounds *B) {
#define RANGE(lo, hi)                                                                                  \
    {                                                                                                  \
        maxima_range(q, e, init, norms, K, B->blocks, lo, hi, pass, kb);                               \
        const int64_t g0_ = (lo) * MR, g1_ = (hi) * MR < G ? (hi) * MR : G;                            \
        bounds_pass_one(B, kb, q_rows, e, init, norms, K, g0_, g1_);                                   \
    }
    TEAM_SPLIT(t0, t1, threads, RANGE)
#undef RANGE
}

/* Pass two (step 2) or three (step 3) for tokens g0 .. g1 - 1, split between `threads` threads of the team. */
void int8_sampler_bounds_step(const Bounds *B, int64_t step, int64_t g0, int64_t g1, int64_t threads) {
#define RANGE(lo, hi)                                                                                  \
    {                                                                                                  \
        if (step == 2)                                                                                 \
            bounds_pass_two(B, lo, hi);                                                                \
        else                                                                                           \
            bounds_pass_three(B, lo, hi);                                                              \
    }
    TEAM_SPLIT(g0, g1, threads, RANGE)
#undef RANGE
}

#endif
