/* Helpers shared by the kernels (hf_textdp/utils/native.py inlines this file where a kernel includes it, so a
 * kernel's build hash covers it): the OpenMP probe and team split, and the exact search filters' running
 * candidate lists (docs/mechanisms/space.md §5.3; cpu/bf16_filter.py, fused_candidates).
 *
 * A filter scores positions in blocks; each query keeps its k largest block maxima so far and the positions
 * whose score reached the threshold 2 beta below the k-th of them when their block went by. The final k-th
 * largest maximum is at least every earlier one, so every position that reaches the final threshold is listed.
 */
#ifndef HF_TEXTDP_KERNEL_COMMON_H
#define HF_TEXTDP_KERNEL_COMMON_H

#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#define OPENMP_BUILT 1
#else
#define OPENMP_BUILT 0
#endif

/* int NAME(void): 1 when the kernel was built with OpenMP (its work split between `threads` threads of torch's
 * own team), else 0 (one thread per call; the Python side splits the work between its own threads) */
#define DEFINE_OPENMP_PROBE(NAME)                                                                      \
    int NAME(void) { return OPENMP_BUILT; }

/* RANGE(lo, hi) over lo .. hi splitting t0 .. t1 between min(threads, t1 - t0) threads of the OpenMP team */
#define TEAM_SPLIT(t0, t1, threads, RANGE)                                                             \
    {                                                                                                  \
        const int64_t tiles_ = (t1) - (t0), want_ = (threads) < tiles_ ? (threads) : tiles_;           \
        const int n_ = want_ > 1 ? (int)want_ : 1;                                                     \
        _Pragma("omp parallel num_threads(n_) if (n_ > 1)") {                                          \
            const int64_t p_ = team_rank(), m_ = team_size();                                          \
            RANGE((t0) + tiles_ * p_ / m_, (t0) + tiles_ * (p_ + 1) / m_);                             \
        }                                                                                              \
    }

static inline int64_t team_rank(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static inline int64_t team_size(void) {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
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

/* The fp32 threshold 2 beta below a score M that is the score of a real position (cpu/bf16_filter.py,
 * _threshold): thr = M - 2 beta, lowered by 2^-40 (|thr| + beta) for its own float64 rounding, then rounded up
 * to fp32 (for an fp32 score x: x >= thr exactly when x >= the result). */
static inline float cut_below(float M, double beta) {
    double thr = (double)M - 2.0 * beta;
    thr = thr - 0x1p-40 * ((thr < 0 ? -thr : thr) + beta);
    return round_up_float(thr);
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

/* Each query q's running candidate list: top[q][0 .. k) its k largest block maxima so far (-inf while fewer),
 * lim[q] = cut_below(top[q][k - 1], beta[q]) (-FLT_MAX while fewer than k), and the positions whose score
 * reached lim[q] when their block went by: cnt[q] of them in pos[q][0 .. cap), scores in score[q][..] (-1: more
 * than cap, the list is dropped and the caller filters that query another way). */
typedef struct {
    const double *beta;
    int64_t k, cap;
    float *top, *lim, *score;
    int32_t *cnt, *pos;
} Lists;

/* Empty the lists of queries q0 .. q1 - 1. */
static inline void lists_clear(const Lists *L, int64_t q0, int64_t q1) {
    for (int64_t i = q0; i < q1; i++) {
        for (int64_t j = 0; j < L->k; j++)
            L->top[i * L->k + j] = -__builtin_inff();
        L->lim[i] = -__FLT_MAX__;
        L->cnt[i] = 0;
    }
}

/* A block maximum m of query q into its top k, raising lim[q] when the k-th of them rises. */
static inline void lists_take_max(const Lists *L, int64_t q, float m) {
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
}

/* Room for `hits` more positions in query q's list: its length once the positions below the (risen) lim[q] are
 * dropped, or -1 (the list dropped) when even then they would not fit or it was dropped before. */
static inline int32_t lists_room(const Lists *L, int64_t q, int hits) {
    int32_t n = L->cnt[q];
    if (n < 0 || n + hits <= L->cap)
        return n;
    const float lq = L->lim[q];
    float *s = L->score + q * L->cap;
    int32_t *p = L->pos + q * L->cap;
    int32_t w = 0;
    for (int32_t i = 0; i < n; i++)
        if (s[i] >= lq) {
            s[w] = s[i];
            p[w] = p[i];
            w++;
        }
    if (w + hits > L->cap) {
        L->cnt[q] = -1;
        return -1;
    }
    L->cnt[q] = w;
    return w;
}

/* Positions base .. base + ns - 1 with scores s[0 .. ns) into query q's list: those that reach lim[q] (after
 * lists_take_max of their block's maximum). */
static inline void lists_add(const Lists *L, int64_t q, int64_t base, const float *s, int ns) {
    const float lq = L->lim[q];
    int hits = 0;
    for (int i = 0; i < ns; i++)
        hits += s[i] >= lq;
    int32_t n = hits ? lists_room(L, q, hits) : -1;
    if (n < 0)
        return;
    float *sc = L->score + q * L->cap;
    int32_t *p = L->pos + q * L->cap;
    for (int i = 0; i < ns; i++)
        if (s[i] >= lq) {
            sc[n] = s[i];
            p[n] = (int32_t)(base + i);
            n++;
        }
    L->cnt[q] = n;
}

/* The candidates of the lists of queries 0 .. B - 1: each query's listed positions whose score reaches cut_below
 * of its k-th largest block maximum, then, for k <= refine (the scores are those the maxima were taken of), of
 * the k-th largest of those scores too (k of them reach it, so the k-th best exact score is within beta of it),
 * appended as (query, position) to rows and out in order. Queries whose list was dropped have none. Returns
 * how many. */
int64_t list_candidates(int64_t B, int64_t k, int64_t cap, int64_t refine, const float *top, const double *beta,
                        const int32_t *cnt, const int32_t *pos, const float *score, int64_t *rows, int64_t *out) {
    int64_t n = 0;
    float best[16];
    if (refine > 16)
        refine = 16;
    for (int64_t b = 0; b < B; b++) {
        if (cnt[b] < 0)
            continue;
        const float *s = score + b * cap;
        const int32_t *p = pos + b * cap;
        const float kth = top[b * k + k - 1];
        float l = kth > -__builtin_inff() ? cut_below(kth, beta[b]) : -__FLT_MAX__;
        if (k <= refine) {
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

#endif
