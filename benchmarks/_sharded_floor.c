/* Floor kernels of benchmarks/_sharded_floor.py: the least work of a sharded step's lookup and
 * row-wise Adagrad update, one thread, plain vectorisable loops with a two-stage software prefetch
 * (into L2 64 rows ahead, into L1 16 ahead: the scheme of shardrec's own update kernel). Built (and cached) by shardrec_embedding's native loader. */
#include <math.h>
#include <stdint.h>

#define AHEAD 16    /* rows prefetched into L1 for use (read, or write in the update) */
#define FAR_AHEAD 64 /* rows read into L2 before that: more reads in flight than L1 allows */
#define LINE_FLOATS 16 /* 64-byte cache lines */

/* Prefetch every cache line of the row `r` of `cols` floats (rw: 1 when it will be written;
 * loc: 3 into L1, 2 into L2). */
#define PREFETCH_ROW(r, cols, rw, loc)                                                         \
    for (int64_t _c = 0; _c < (cols); _c += LINE_FLOATS) __builtin_prefetch((r) + _c, (rw), (loc))

/* out[b, :] = sum of rows w[idx[j], :] for j in [offsets[b], offsets[b + 1]) */
void floor_pool(const float *w, const int64_t *idx, const int64_t *offsets, int64_t bags,
                int64_t cols, float *out) {
    int64_t n = offsets[bags];
    for (int64_t b = 0; b < bags; b++) {
        float *o = out + b * cols;
        for (int64_t c = 0; c < cols; c++) o[c] = 0.0f;
        for (int64_t j = offsets[b]; j < offsets[b + 1]; j++) {
            if (j + FAR_AHEAD < n) PREFETCH_ROW(w + idx[j + FAR_AHEAD] * cols, cols, 0, 2);
            if (j + AHEAD < n) PREFETCH_ROW(w + idx[j + AHEAD] * cols, cols, 0, 3);
            const float *r = w + idx[j] * cols;
            for (int64_t c = 0; c < cols; c++) o[c] += r[c];
        }
    }
}

/* Row-wise Adagrad on the unique rows uniq[i]: m[u] += mean(g^2); w[u, :] -= lr / (sqrt(m[u]) +
 * eps) * g, with g the gradient row i % gn of a small block g[gn, cols] that stays in cache: the
 * row and its momentum are read and written once, and no per-row gradient travels from memory
 * (issue 28's floor: "reading and writing ... rows plus momentum"; the summed gradients are an
 * intermediate a fused kernel need not write out). */
void floor_update(float *w, float *m, const int64_t *uniq, const float *g, int64_t n,
                  int64_t gn, int64_t cols, float lr, float eps) {
    for (int64_t i = 0; i < n; i++) {
        if (i + FAR_AHEAD < n) {
            PREFETCH_ROW(w + uniq[i + FAR_AHEAD] * cols, cols, 0, 2);
            __builtin_prefetch(m + uniq[i + FAR_AHEAD], 0, 2);
        }
        if (i + AHEAD < n) {
            PREFETCH_ROW(w + uniq[i + AHEAD] * cols, cols, 1, 3);
            __builtin_prefetch(m + uniq[i + AHEAD], 1, 3);
        }
        const float *gi = g + (i % gn) * cols;
        float s = 0.0f;
        for (int64_t c = 0; c < cols; c++) s += gi[c] * gi[c];
        int64_t u = uniq[i];
        m[u] += s / (float)cols;
        float scale = lr / (sqrtf(m[u]) + eps);
        float *r = w + u * cols;
        for (int64_t c = 0; c < cols; c++) r[c] -= scale * gi[c];
    }
}
