/* Floor kernels of benchmarks/_sharded_floor.py: the least work of a sharded step's lookup and
 * row-wise Adagrad update, one thread, plain vectorisable loops with a software prefetch of the
 * row a few ids ahead. Built (and cached) by shardrec_embedding's native loader. */
#include <math.h>
#include <stdint.h>

#define AHEAD 8

/* out[b, :] = sum of rows w[idx[j], :] for j in [offsets[b], offsets[b + 1]) */
void floor_pool(const float *w, const int64_t *idx, const int64_t *offsets, int64_t bags,
                int64_t cols, float *out) {
    int64_t n = offsets[bags];
    for (int64_t b = 0; b < bags; b++) {
        float *o = out + b * cols;
        for (int64_t c = 0; c < cols; c++) o[c] = 0.0f;
        for (int64_t j = offsets[b]; j < offsets[b + 1]; j++) {
            if (j + AHEAD < n) __builtin_prefetch(w + idx[j + AHEAD] * cols);
            const float *r = w + idx[j] * cols;
            for (int64_t c = 0; c < cols; c++) o[c] += r[c];
        }
    }
}

/* Row-wise Adagrad on the unique rows uniq[i] with their summed gradients g[i, :]:
 * m[u] += mean(g^2); w[u, :] -= lr / (sqrt(m[u]) + eps) * g. Reads and writes each row once. */
void floor_update(float *w, float *m, const int64_t *uniq, const float *g, int64_t n,
                  int64_t cols, float lr, float eps) {
    for (int64_t i = 0; i < n; i++) {
        if (i + AHEAD < n) __builtin_prefetch(w + uniq[i + AHEAD] * cols, 1);
        const float *gi = g + i * cols;
        float s = 0.0f;
        for (int64_t c = 0; c < cols; c++) s += gi[c] * gi[c];
        int64_t u = uniq[i];
        m[u] += s / (float)cols;
        float scale = lr / (sqrtf(m[u]) + eps);
        float *r = w + u * cols;
        for (int64_t c = 0; c < cols; c++) r[c] -= scale * gi[c];
    }
}
