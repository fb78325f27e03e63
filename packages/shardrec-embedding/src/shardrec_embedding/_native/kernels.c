/* Native CPU kernels of shardrec-embedding: pooled lookup (forward), its dense-gradient
 * backward, the per-sample-weight gradient, and fused SGD / rowwise-Adagrad updates.
 *
 * Plain C11 + OpenMP, no torch headers: `loader.py` compiles this file on first use and calls
 * it through ctypes with raw data pointers. Every function is exported with a `sr_` prefix.
 * The fused rowwise-Adagrad / Adagrad update (sr_fused_update) is at the end of the file.
 *
 * Layout shared by all kernels (S segments, B bags per segment):
 *   segment s reads table `table[s]` (base pointer, `rows[s]` rows of `dim[s]` floats),
 *   bag (s, b) is `values[offsets[key[s] * B + b] : offsets[key[s] * B + b + 1]]`,
 *   and its pooled row lives at `out[b * out_stride + col[s] : ... + dim[s]]`.
 * A KJT gives exactly this: `offsets` are its `(F * B + 1,)` offsets and `key[s]` the KJT key
 * a segment reads, so no id is shifted or copied and the pooled rows land in their final
 * `(B, total_dim)` column block. A packed group is the special case S = 1, key 0.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <omp.h>
#ifdef __AVX__
#include <immintrin.h>
#endif

typedef struct {
    const float *table; /* (rows, dim) row-major */
    int64_t rows;
    int64_t dim;
    int64_t col;  /* first output column */
    int64_t key;  /* KJT key: bag b's ids are values[offsets[key * B + b] ...] */
    int64_t mean; /* 1: divide the bag's sum by its length */
} sr_segment;

/* Ids ahead whose rows are prefetched. Measured on the 26 x 100k x 64 benchmark (1 thread),
 * prefetching with the non-temporal hint: 4 ahead 17.8 ms, 16 ahead 12.1 ms, 32 ahead 10.4 ms,
 * 48 ahead 11.3 ms; prefetching only within a bag (not across bag boundaries) cost 18.5 ms.
 * Issue 28: prefetching into the L2 instead (`sr_prefetch_row`, locality 1) measured 7.4-7.7 ms
 * at 16 ahead and 7.7-8.4 at 32, against 9.8-10.3 ms non-temporal at 32 (266k ids over
 * 13 x 100k x 64, min of 5-7 calls, 4 interleaved rounds, AMD EPYC at load 10-14); 16 ids
 * ahead stayed until session 11.
 *
 * Since then it prefetches by cache lines of rows ahead, not ids, in two stages into the L2
 * (SR_FWD_FAR_LINES, then SR_FWD_NEAR_LINES: ids ahead = lines / lines per row, at least 1),
 * and the output row SR_FWD_OUT_AHEAD bags ahead for writing (column-wise outputs are 128-byte
 * pieces of (B, W) rows: a new line every bag). Session 11 (s11-colwise), one thread, min of
 * 11 interleaved calls, load 7-10, 26 x 100k x 32 (533k ids into (2048, 832)) / 13 x 100k x 64
 * (268k ids into (2048, 832)): 16 ids ahead (64 / 32 lines) 6.87 / 7.13 ms; 48 / 24 ids ahead
 * (both stages 96 lines) 5.43 / 5.87; + output prefetch 12 bags ahead 4.71 / 5.19; + near stage
 * at 48 lines 4.74 / 5.14 (the floor's contiguous-output loop: 4.2 / 6.7). */
#define SR_FWD_FAR_LINES 96
#define SR_FWD_NEAR_LINES 48
#define SR_FWD_OUT_AHEAD 12
/* Bags per work item: a block stays within one segment (one table) so the prefetch runs
 * across its bags; 64 and 2048 measured alike on one thread, 64 balances many threads. */
#define SR_BAG_BLOCK 64

static inline void sr_prefetch_row(const float *row, int64_t dim) {
    const char *p = (const char *)row;
    for (int64_t byte = 0; byte < dim * (int64_t)sizeof(float); byte += 64) {
        __builtin_prefetch(p + byte, 0, 1);
    }
}

static inline void sr_record_bad(int64_t *bad, int64_t pos) {
#pragma omp critical(sr_bad)
    {
        if (pos < *bad) *bad = pos;
    }
}

/* Pools bags [b0, b1) of one segment. DIM is a compile-time constant for the common widths
 * (the accumulator then lives in vector registers: 18.5 -> 10.4 ms against accumulating in
 * the output row with a runtime width), or `dim` for the generic path. */
#define SR_POOL_BLOCK(IDX, DIM)                                                                \
    {                                                                                          \
        const int64_t lim = offs[b1];                                                          \
        const int64_t row_lines = ((DIM) + 15) / 16;                                           \
        const int64_t far = SR_FWD_FAR_LINES / row_lines, near = SR_FWD_NEAR_LINES / row_lines; \
        const int64_t far_ids = far > 0 ? far : 1, near_ids = near > 0 ? near : 1;             \
        for (int64_t b = b0; b < b1; b++) {                                                    \
            float acc[DIM];                                                                    \
            for (int64_t d = 0; d < (DIM); d++) acc[d] = 0.0f;                                 \
            if (b + SR_FWD_OUT_AHEAD < b1) {                                                   \
                const char *o = (const char *)(out + (b + SR_FWD_OUT_AHEAD) * out_stride + col); \
                for (int64_t byte = 0; byte < (DIM) * 4; byte += 64)                           \
                    __builtin_prefetch(o + byte, 1, 3);                                        \
            }                                                                                  \
            const int64_t start = offs[b], end = offs[b + 1];                                  \
            for (int64_t j = start; j < end; j++) {                                            \
                if (j + far_ids < lim) {                                                       \
                    uint64_t ahead = (uint64_t)(int64_t)values[j + far_ids];                   \
                    if (ahead < (uint64_t)rows) sr_prefetch_row(table + ahead * (DIM), (DIM)); \
                }                                                                              \
                if (j + near_ids < lim) {                                                      \
                    uint64_t ahead = (uint64_t)(int64_t)values[j + near_ids];                  \
                    if (ahead < (uint64_t)rows) sr_prefetch_row(table + ahead * (DIM), (DIM)); \
                }                                                                              \
                uint64_t id = (uint64_t)(int64_t)values[j];                                    \
                if (id >= (uint64_t)rows) {                                                    \
                    sr_record_bad(bad_seg, j);                                                 \
                    continue;                                                                  \
                }                                                                              \
                const float *row = table + id * (DIM);                                         \
                const float w = psw ? psw[j] : 1.0f;                                           \
                _Pragma("omp simd")                                                            \
                for (int64_t d = 0; d < (DIM); d++) acc[d] += w * row[d];                      \
            }                                                                                  \
            const float scale = (mean && end > start) ? 1.0f / (float)(end - start) : 1.0f;  \
            float *dst = out + b * out_stride + col;                                           \
            _Pragma("omp simd")                                                                \
            for (int64_t d = 0; d < (DIM); d++) dst[d] = acc[d] * scale;                       \
        }                                                                                      \
    }

/* Forward: out[b, col:col+dim] = pool(table[ids of bag (s, b)]) for every segment s.
 * Ids outside [0, rows) are skipped and the smallest offending position of each segment is
 * written to bad[s] (the caller fills bad with INT64_MAX and raises). Parallel over blocks of
 * SR_BAG_BLOCK bags, segment-major (one table at a time stays warm in the last-level cache).
 * The generic width keeps its accumulator in a variable-length array on the stack: callers
 * route dims above ops.MAX_DIM (1024, 4 KiB of stack) to the torch path. */
#define SR_DEFINE_FORWARD(NAME, IDX)                                                           \
    void NAME(const sr_segment *segs, int64_t num_segments, int64_t batch, const IDX *values,  \
              const int64_t *offsets, const float *psw, float *out, int64_t out_stride,        \
              int64_t *bad, int num_threads) {                                                 \
        int64_t blocks = (batch + SR_BAG_BLOCK - 1) / SR_BAG_BLOCK;                            \
        int64_t items = num_segments * blocks;                                                 \
        _Pragma("omp parallel for schedule(static) num_threads(num_threads)")                  \
        for (int64_t item = 0; item < items; item++) {                                         \
            const sr_segment *sg = &segs[item / blocks];                                       \
            int64_t *bad_seg = &bad[item / blocks];                                            \
            const int64_t b0 = (item % blocks) * SR_BAG_BLOCK;                                 \
            const int64_t b1 = b0 + SR_BAG_BLOCK < batch ? b0 + SR_BAG_BLOCK : batch;          \
            const int64_t dim = sg->dim, rows = sg->rows, col = sg->col;                       \
            const int64_t mean = sg->mean;                                                     \
            const float *table = sg->table;                                                    \
            const int64_t *offs = offsets + sg->key * batch;                                   \
            switch (dim) {                                                                     \
                case 16: SR_POOL_BLOCK(IDX, 16) break;                                         \
                case 32: SR_POOL_BLOCK(IDX, 32) break;                                         \
                case 64: SR_POOL_BLOCK(IDX, 64) break;                                         \
                case 128: SR_POOL_BLOCK(IDX, 128) break;                                       \
                default: SR_POOL_BLOCK(IDX, dim) break;                                        \
            }                                                                                  \
        }                                                                                      \
    }

SR_DEFINE_FORWARD(sr_pooled_forward_i64, int64_t)
SR_DEFINE_FORWARD(sr_pooled_forward_i32, int32_t)

/* Scatter: target[s][id] += alpha * scale * grad[b, col:col+dim] for every id of every bag,
 * scale = psw[j] (or 1) times 1 / bag length for MEAN. `targets[s]` is a (rows, dim) buffer
 * per segment: a dense gradient (alpha = 1) or the weight itself (fused SGD, alpha = -lr).
 * Race-free without atomics: thread t owns the rows with id % T == t and skips the others
 * (every thread reads all ids; only owned rows are touched). Ids were range-checked in
 * forward; out-of-range ones are skipped here anyway.
 * stamps (NULL: the targets were zeroed by the caller): per segment, one byte per target row;
 * a row whose byte is not `stamp` is zeroed on its first touch here and its byte set to
 * `stamp`, so a reused gradient buffer needs no full zero beforehand: the arithmetic of every
 * row is exactly zero-then-accumulate, as with a zeroed buffer (see sr_grad_clear_stale). */
#ifndef SR_SCATTER_AHEAD
#define SR_SCATTER_AHEAD 16
#endif
/* A read prefetch into the L2 this many ids ahead as well (as the one-pass update's row loop,
 * SR_ROW_FAR below): more lines in flight than the write prefetch alone. */
#ifndef SR_SCATTER_FAR
#define SR_SCATTER_FAR 64
#endif
#ifndef SR_SCATTER_LOCALITY
#define SR_SCATTER_LOCALITY 3
#endif
static inline void sr_prefetch_write(const float *row, int64_t dim) {
    const char *p = (const char *)row;
    for (int64_t byte = 0; byte < dim * (int64_t)sizeof(float); byte += 64) {
        __builtin_prefetch(p + byte, 1, SR_SCATTER_LOCALITY);
    }
}

#define SR_DEFINE_SCATTER(NAME, IDX)                                                           \
    void NAME(const sr_segment *segs, float *const *targets, int64_t num_segments,            \
              int64_t batch, const IDX *values, const int64_t *offsets, const float *psw,      \
              const float *grad, int64_t grad_stride, float alpha, uint8_t *const *stamps,      \
              int stamp, int num_threads) {                                                    \
        _Pragma("omp parallel num_threads(num_threads)")                                       \
        {                                                                                      \
            const uint64_t nt = (uint64_t)omp_get_num_threads();                               \
            const uint64_t me = (uint64_t)omp_get_thread_num();                                \
            for (int64_t s = 0; s < num_segments; s++) {                                       \
                const sr_segment *sg = &segs[s];                                               \
                const int64_t dim = sg->dim, rows = sg->rows;                                  \
                float *target = targets[s];                                                    \
                uint8_t *marks = stamps ? stamps[s] : NULL;                                    \
                const int64_t *offs = offsets + sg->key * batch;                               \
                const int64_t lim = offs[batch];                                               \
                for (int64_t b = 0; b < batch; b++) {                                          \
                    int64_t start = offs[b], end = offs[b + 1];                                \
                    if (end <= start) continue;                                                \
                    const float *g = grad + b * grad_stride + sg->col;                         \
                    const float bag_scale =                                                    \
                        sg->mean ? alpha / (float)(end - start) : alpha;                       \
                    for (int64_t j = start; j < end; j++) {                                    \
                        if (j + SR_SCATTER_FAR < lim) {                                        \
                            uint64_t far = (uint64_t)(int64_t)values[j + SR_SCATTER_FAR];      \
                            if (far % nt == me && far < (uint64_t)rows)                        \
                                sr_prefetch_row(target + far * dim, dim);                      \
                        }                                                                      \
                        if (j + SR_SCATTER_AHEAD < lim) {                                      \
                            uint64_t ahead = (uint64_t)(int64_t)values[j + SR_SCATTER_AHEAD];  \
                            if (ahead % nt == me && ahead < (uint64_t)rows)                    \
                                sr_prefetch_write(target + ahead * dim, dim);                  \
                        }                                                                      \
                        uint64_t id = (uint64_t)(int64_t)values[j];                            \
                        if (id % nt != me || id >= (uint64_t)rows) continue;                   \
                        float *dst = target + id * dim;                                        \
                        const float sc = psw ? bag_scale * psw[j] : bag_scale;                 \
                        if (marks && marks[id] != (uint8_t)stamp) {                            \
                            /* first touch: exactly 0.0f + sc * g, the zeroed row's sum */     \
                            marks[id] = (uint8_t)stamp;                                        \
                            _Pragma("omp simd")                                                \
                            for (int64_t d = 0; d < dim; d++) dst[d] = 0.0f + sc * g[d];       \
                            continue;                                                          \
                        }                                                                      \
                        _Pragma("omp simd")                                                    \
                        for (int64_t d = 0; d < dim; d++) dst[d] += sc * g[d];                 \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }

SR_DEFINE_SCATTER(sr_pooled_scatter_i64, int64_t)
SR_DEFINE_SCATTER(sr_pooled_scatter_i32, int32_t)

/* The other half of a stamped scatter: every row whose byte is neither 0 nor `stamp` (written
 * by an earlier scatter, not by this one) is zeroed and its byte cleared. Afterwards the buffer
 * holds exactly what zeros + this scatter would: rows with byte 0 are zero, rows with byte
 * `stamp` hold this scatter's sums. buffer: (rows, dim) fp32, marks: (rows,). */
void sr_grad_clear_stale(float *buffer, uint8_t *marks, int64_t rows, int64_t dim, int stamp,
                         int num_threads) {
#pragma omp parallel num_threads(num_threads)
    {
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            if (marks[r] != 0 && marks[r] != (uint8_t)stamp) {
                marks[r] = 0;
                float *row = buffer + r * dim;
#ifdef __AVX__
                if (dim % 8 == 0 && ((uintptr_t)row & 31) == 0) {
                    const __m256 zero = _mm256_setzero_ps();
                    for (int64_t d = 0; d < dim; d += 8) _mm256_stream_ps(row + d, zero);
                    continue;
                }
#endif
                memset(row, 0, (size_t)dim * sizeof(float));
            }
        }
#ifdef __AVX__
        _mm_sfence();
#endif
    }
}

/* Gradient of each per-sample weight: out[j] += <table row of id j, grad[b, col:col+dim]>
 * over every segment reading id j (a feature read by two tables gets both), SUM pooling.
 * `out` is zeroed by the caller. Parallel over bags: all segments of bag b run on one thread,
 * so the positions j of a shared feature are never written by two threads. */
#define SR_DEFINE_PSW_GRAD(NAME, IDX)                                                          \
    void NAME(const sr_segment *segs, int64_t num_segments, int64_t batch, const IDX *values,  \
              const int64_t *offsets, const float *grad, int64_t grad_stride, float *out,      \
              int num_threads) {                                                               \
        _Pragma("omp parallel for schedule(static) num_threads(num_threads)")                  \
        for (int64_t b = 0; b < batch; b++) {                                                  \
            for (int64_t s = 0; s < num_segments; s++) {                                       \
                const sr_segment *sg = &segs[s];                                               \
                const int64_t *offs = offsets + sg->key * batch;                               \
                const float *g = grad + b * grad_stride + sg->col;                             \
                for (int64_t j = offs[b]; j < offs[b + 1]; j++) {                              \
                    uint64_t id = (uint64_t)(int64_t)values[j];                                \
                    if (id >= (uint64_t)sg->rows) continue;                                    \
                    const float *row = sg->table + id * sg->dim;                               \
                    float acc = 0.0f;                                                          \
                    _Pragma("omp simd reduction(+ : acc)")                                     \
                    for (int64_t d = 0; d < sg->dim; d++) acc += row[d] * g[d];                \
                    out[j] += acc;                                                             \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }

SR_DEFINE_PSW_GRAD(sr_psw_grad_i64, int64_t)
SR_DEFINE_PSW_GRAD(sr_psw_grad_i32, int32_t)

/* One rowwise-Adagrad row update from its summed gradient g: m += mean(g^2),
 * w -= lr / (sqrt(m) + eps) * g. */
static inline void sr_adagrad_row(float *w, float *m, const float *g, float g_scale,
                                  int64_t dim, float lr, float eps) {
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t d = 0; d < dim; d++) sq += g[d] * g[d];
    const float acc = *m + g_scale * g_scale * sq / (float)dim;
    *m = acc;
    const float mult = lr / (sqrtf(acc) + eps) * g_scale;
#pragma omp simd
    for (int64_t d = 0; d < dim; d++) w[d] -= mult * g[d];
}

static inline void sr_prefetch_rw(const float *row, int64_t dim) {
    const char *p = (const char *)row;
    for (int64_t byte = 0; byte < dim * (int64_t)sizeof(float); byte += 64) {
        __builtin_prefetch(p + byte, 1, 0);
    }
}

/* ---- One-pass fused updates: bucketed counting sort, then one pass over the touched rows ----
 *
 * sr_fused_update runs rowwise Adagrad or (elementwise) Adagrad over one packed weight
 * (rows, dim) from a pooled lookup's output gradient, in place, in three steps:
 *
 * 1. Sort (stable counting sort, no comparisons): the batch's ids are bucketed by
 *    `row >> shift` (a bucket is W = 2^shift consecutive rows, 128 unless the weight has more
 *    than 2^29 rows); each id becomes one 12-byte entry {bag, row - bucket base, scale} in
 *    bucket order, input order kept within a bucket. `scale` is the id's factor on its bag's
 *    gradient: 1 / bag length for MEAN, times its per-sample weight. Out-of-range ids are
 *    skipped (the forward already refused them).
 * 2. Per bucket (contiguous bucket ranges per thread, so no two threads share a row): the
 *    touched rows are listed in the order of their first entry; a row seen once keeps a
 *    pointer to its grad_out row, a repeated row's gradients are summed in input order into
 *    scratch (the first two as sc0 * g0 + sc1 * g1, then += sc * g: the previous kernel's
 *    order).
 * 3. One tight loop reads and writes each touched row and its state once, vectorised over
 *    dim, bucket after bucket (rows of one bucket lie within W rows), not in id order,
 *    prefetched SR_ROW_FAR and SR_ROW_AHEAD rows ahead.
 *
 * Steps 2 and 3 alternate by chunks of consecutive buckets (at most `cap` touched rows, so
 * the sums stay in the L2 cache). SGD does not come here: it needs no sum per row and the
 * scatter kernel above measured faster (docs/design/native-kernels.md).
 *
 * Workspace: starts (buckets + 1) int32, entries (N) sr_entry, and per thread: 2W int32
 * (counts and first items; zeroed once by the caller, counts returned zeroed), `cap`
 * sr_items and cap x dim floats (cap >= 2W). N must be below 2^31 (the caller checks). */
typedef struct {
    int32_t goff; /* the id's gradient row: grad + goff (floats); the caller keeps it < 2^31 */
    int32_t local;
    float scale;
} sr_entry;

/* One (table, KJT key) pair of a packed group for the one-pass update: bag b of the segment
 * is values[offsets[key * B + b] ...] (table-local ids), its rows are row0 + id (ids outside
 * [0, rows) are skipped) and its gradient is grad[b * grad_stride + col ...]. A packed
 * group's contiguous `(num_bags, D)` gradient is one segment: key 0, row0 0, col 0. */
typedef struct {
    int64_t key;
    int64_t row0;
    int64_t rows;
    int64_t col;
    int64_t mean;
} sr_update_segment;

#define SR_KIND_ROWWISE_ADAGRAD 1
#define SR_KIND_ADAGRAD 2

/* Elementwise Adagrad on one row, torch's order: m += g * g; w += (g / (sqrt(m) + eps)) * -lr. */
static inline void sr_adagrad_elem_row(float *w, float *m, const float *g, float g_scale,
                                       int64_t dim, float lr, float eps) {
#pragma omp simd
    for (int64_t d = 0; d < dim; d++) {
        const float gd = g_scale * g[d];
        const float md = m[d] + gd * gd;
        m[d] = md;
        w[d] += (gd / (sqrtf(md) + eps)) * -lr;
    }
}

/* The counting sort of step 1 over every segment's ids, segments in order, bags in order,
 * ids in order (a segment list over a KJT is the same input order as its ids concatenated). */
#define SR_DEFINE_BUCKET_SORT(NAME, IDX)                                                       \
    static void NAME(const sr_update_segment *segs, int64_t num_segments, int64_t batch,       \
                     const IDX *values, const int64_t *offsets, const float *psw,              \
                     int64_t grad_stride, int64_t shift, int64_t buckets, int32_t *starts,     \
                     sr_entry *entries) {                                                      \
        memset(starts, 0, (size_t)(buckets + 1) * sizeof(int32_t));                            \
        for (int64_t s = 0; s < num_segments; s++) {                                           \
            const int64_t *offs = offsets + segs[s].key * batch;                               \
            const uint64_t seg_rows = (uint64_t)segs[s].rows;                                  \
            const int64_t row0 = segs[s].row0;                                                 \
            for (int64_t j = offs[0]; j < offs[batch]; j++) {                                  \
                const uint64_t u = (uint64_t)(int64_t)values[j];                               \
                if (u < seg_rows) starts[(((int64_t)u + row0) >> shift) + 1]++;                \
            }                                                                                  \
        }                                                                                      \
        for (int64_t k = 1; k <= buckets; k++) starts[k] += starts[k - 1];                     \
        /* starts[k] = first entry of bucket k; the scatter advances it to the bucket's end,   \
         * so afterwards bucket k is [k ? starts[k - 1] : 0, starts[k]). */                    \
        const int64_t mask = ((int64_t)1 << shift) - 1;                                        \
        for (int64_t s = 0; s < num_segments; s++) {                                           \
            const sr_update_segment *sg = &segs[s];                                            \
            const int64_t *offs = offsets + sg->key * batch;                                   \
            const uint64_t seg_rows = (uint64_t)sg->rows;                                      \
            for (int64_t b = 0; b < batch; b++) {                                              \
                const int64_t start = offs[b], end = offs[b + 1];                              \
                if (end <= start) continue;                                                    \
                const float bag_scale = sg->mean ? 1.0f / (float)(end - start) : 1.0f;         \
                const int32_t goff = (int32_t)(b * grad_stride + sg->col);                     \
                for (int64_t j = start; j < end; j++) {                                        \
                    const uint64_t u = (uint64_t)(int64_t)values[j];                           \
                    if (u >= seg_rows) continue;                                               \
                    const int64_t r = (int64_t)u + sg->row0;                                   \
                    sr_entry *e = &entries[starts[r >> shift]++];                              \
                    e->goff = goff;                                                            \
                    e->local = (int32_t)(r & mask);                                            \
                    e->scale = psw ? bag_scale * psw[j] : bag_scale;                           \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }

SR_DEFINE_BUCKET_SORT(sr_bucket_sort_i64, int64_t)
SR_DEFINE_BUCKET_SORT(sr_bucket_sort_i32, int32_t)

/* One touched row of a chunk: its gradient (a row of grad_out times scale, or its sum in the
 * chunk's scratch with scale 1). */
typedef struct {
    int64_t row;
    const float *g;
    float scale;
} sr_item;

typedef struct {
    int64_t kind, dim, shift;
    float *weight, *state;
    const float *grad;
    /* The gradient in two row pieces (session 12, s12-rowwise): an entry's goff at or past
     * split_off reads grad1 + (goff - split_off) instead (one piece: grad1 = grad, 0). */
    const float *grad1;
    int64_t split_off;
    const sr_entry *entries;
    int64_t num_entries;
    float lr, eps;
} sr_update_args;

/* Per-thread scratch: count and first are (W,) int32 (count zero between buckets), items and
 * acc hold one chunk (`cap` rows). */
typedef struct {
    int32_t *count, *first;
    sr_item *items;
    float *acc;
    int64_t nitems, nacc;
} sr_chunk;

/* Rows ahead whose row and state are prefetched in a chunk's update loop, in two stages: a read
 * prefetch into the L2 (locality 1) SR_ROW_FAR rows ahead for the row, its state and its
 * gradient, then a write prefetch (into the L1, exclusive) SR_ROW_AHEAD rows ahead for the row
 * and its state. Measured (session 4) on the bare loop over 269k of 800k rows, ascending: none
 * 17.7 ms, write prefetch 16 ahead 13.1, 32 ahead 14.7. Session 10 (bare loop, 2 MB pages, the
 * gradient rows in random order as here, min of 9, load 6-7): write prefetch 16 ahead alone
 * 13.9-17.6 ms; L2 read prefetch alone 16 / 32 / 48 ahead 9.5-11.8 / 9.3-9.7 / 9.6-10.9; L2 64
 * ahead + write 16 ahead 9.2-9.4, + write 8 ahead 9.4-11.1, L2 96 / 128 ahead + write 16
 * 9.3-9.8 / 9.7-9.9. The write prefetch alone kept too few lines in flight (the L1's miss
 * buffers); the L2's hold more (sr_prefetch_row: locality 1). The gradient row is prefetched
 * at the far stage only: a second prefetch 16 ahead cost 3-6% (12.19 -> 11.43 ms without it).
 * Session 11 (s11-colwise): the write stage pays at dim 64 but not at dim 32 (2 lines a row:
 * the far stage alone keeps enough in flight). One-pass update of 533k ids over 26 x 100k x 32
 * (the column-wise rank's), median of 11-15 interleaved calls, load 15-16: 14.5-16.0 ms with
 * the write stage, 13.5-14.4 without; 268k ids over 13 x 100k x 64: 11.6 with it, 12.6
 * without. So rows narrower than SR_ROW_WRITE_MIN_DIM floats skip it. */
#define SR_ROW_AHEAD 16
#define SR_ROW_FAR 64
#define SR_ROW_WRITE_MIN_DIM 64

/* An entry's gradient row: grad + goff, or in the second piece (sr_update_args). */
static inline const float *sr_grad_row(const sr_update_args *a, int32_t goff) {
    return goff < a->split_off ? a->grad + goff : a->grad1 + (goff - a->split_off);
}

/* Entries ahead whose gradient rows sr_bucket_gather prefetches into the L2. */
#define SR_GRAD_AHEAD 16

/* Appends bucket k's touched rows (entries [lo, hi)) to the chunk in the order of their first
 * entry: a row seen once points at its grad_out row, a repeated row at its gradient sum,
 * accumulated here in input order (sc0 * g0 + sc1 * g1, then += sc * g). first[l] is row l's
 * item while the bucket is listed. (Until session 10 a bitmap listed the rows in ascending
 * order after the entries: the same sums, an extra pass; the rows of one bucket lie within
 * W rows (32 KB at dim 64), so their order does not matter to the update loop.) */
static inline __attribute__((always_inline)) void sr_bucket_gather_dim(
    const sr_update_args *a, int64_t k, int64_t lo, int64_t hi, sr_chunk *c, int64_t dim) {
    const int64_t row0 = k << a->shift, n0 = c->nitems;
    const sr_entry *entries = a->entries;
    int32_t *count = c->count, *first = c->first;
    for (int64_t e = lo; e < hi; e++) {
        /* the gradient rows of the ids ahead (possibly in the next bucket): a repeated row
         * reads its gradients here, a once-seen row in the chunk's update loop soon after */
        if (e + SR_GRAD_AHEAD < a->num_entries)
            sr_prefetch_row(sr_grad_row(a, entries[e + SR_GRAD_AHEAD].goff), dim);
        const sr_entry en = entries[e];
        const int32_t l = en.local;
        const int32_t n = count[l]++;
        const float *g = sr_grad_row(a, en.goff);
        if (n == 0) {
            const int64_t r = row0 + l;
            if (c->nitems < SR_ROW_FAR) { /* rows the update loop's far prefetch misses */
                sr_prefetch_row(a->weight + r * dim, dim);
                if (a->kind == SR_KIND_ROWWISE_ADAGRAD) {
                    __builtin_prefetch(&a->state[r], 0, 1);
                } else {
                    sr_prefetch_row(a->state + r * dim, dim);
                }
            }
            first[l] = (int32_t)c->nitems;
            sr_item *it = &c->items[c->nitems++];
            it->row = r;
            it->g = g;
            it->scale = en.scale;
            continue;
        }
        /* repeated: sum into a scratch row, which then replaces the item's gradient */
        sr_item *it = &c->items[first[l]];
        const float sc = en.scale;
        float *acc;
        if (n == 1) {
            const float *g0 = it->g;
            const float sc0 = it->scale;
            acc = c->acc + c->nacc++ * dim;
#pragma omp simd
            for (int64_t d = 0; d < dim; d++) acc[d] = sc0 * g0[d];
            it->g = acc;
            it->scale = 1.0f;
        } else {
            acc = (float *)it->g; /* this chunk's scratch */
        }
#pragma omp simd
        for (int64_t d = 0; d < dim; d++) acc[d] += sc * g[d];
    }
    for (int64_t i = n0; i < c->nitems; i++) count[c->items[i].row - row0] = 0;
}

/* sr_bucket_gather_dim with constant dims 32 and 64 (straight-line sums; the same values). */
static void sr_bucket_gather(const sr_update_args *a, int64_t k, int64_t lo, int64_t hi,
                             sr_chunk *c) {
    if (a->dim == 32) {
        sr_bucket_gather_dim(a, k, lo, hi, c, 32);
    } else if (a->dim == 64) {
        sr_bucket_gather_dim(a, k, lo, hi, c, 64);
    } else {
        sr_bucket_gather_dim(a, k, lo, hi, c, a->dim);
    }
}

/* The chunk's update loop for one rule and row width: inlined by sr_chunk_update with
 * constants for the common (rule, dim) pairs, so that their row loops are straight-line
 * vector code (no trip-count tests, no remainder). Session 11 (s11-colwise2): the main
 * thread's backward at the column-wise rank's shape (532k ids, 26 x 100k x 32) 12.5-12.9 ->
 * 10.8-11.6 ms, at 13 x 100k x 64 10.3-10.9 -> 9.0-9.1; bitwise the same weights and state as
 * the runtime-width loop with gcc -O3 -march=native here (torch.equal; the sum of squares'
 * vector reduction kept its order). */
static inline __attribute__((always_inline)) void sr_chunk_rows(const sr_update_args *a,
                                                                 sr_chunk *c, int rowwise,
                                                                 int64_t dim) {
    const int64_t n = c->nitems;
    const sr_item *items = c->items;
    const int write_stage = dim >= SR_ROW_WRITE_MIN_DIM;
    for (int64_t i = 0; i < n; i++) {
        if (i + SR_ROW_FAR < n) {
            const int64_t r = items[i + SR_ROW_FAR].row;
            sr_prefetch_row(a->weight + r * dim, dim);
            if (rowwise) {
                __builtin_prefetch(&a->state[r], 0, 1);
            } else {
                sr_prefetch_row(a->state + r * dim, dim);
            }
            sr_prefetch_row(items[i + SR_ROW_FAR].g, dim);
        }
        if (write_stage && i + SR_ROW_AHEAD < n) {
            const int64_t r = items[i + SR_ROW_AHEAD].row;
            sr_prefetch_rw(a->weight + r * dim, dim);
            if (rowwise) {
                __builtin_prefetch(&a->state[r], 1, 0);
            } else {
                sr_prefetch_rw(a->state + r * dim, dim);
            }
        }
        const int64_t r = items[i].row;
        if (rowwise) {
            sr_adagrad_row(a->weight + r * dim, &a->state[r], items[i].g, items[i].scale, dim,
                           a->lr, a->eps);
        } else {
            sr_adagrad_elem_row(a->weight + r * dim, a->state + r * dim, items[i].g,
                                items[i].scale, dim, a->lr, a->eps);
        }
    }
}

#ifdef __AVX512F__
/* ---- Rowwise Adagrad at dim 32, 16 rows at a time (AVX-512) ----
 *
 * sr_adagrad_row's sum of squares is a vector reduction whose order gcc picks: at dims 32 and
 * 64 (gcc -O3 -march=native, inlined in sr_chunk_rows until session 12) it summed the row's
 * 16-float pieces lane by lane, g[l]^2 + g[l + 16]^2 (+ g[l + 32]^2 + g[l + 48]^2), then the
 * 16 lanes one after the other: 15 dependent adds a row. Session 12 (s12-colwise) writes that
 * order out and runs it on 16 rows at once: their lane vectors transposed, one vector add per
 * lane sums all 16 rows, and the momentum, sqrt and division run as one vector (IEEE-exact
 * per lane). Bitwise the same weights and state as before (torch.equal against main, random
 * batches with repeated rows, both widths); the serial lane sums were ~25% of the dim-32 row
 * loop (replacing them by one add: 10.3 -> 7.7 ms at the column-wise rank's 533k ids); the
 * update at that shape 9.6-10.4 -> 8.2-8.5 ms. The functions take dim 64 too (the same order),
 * but there the block measured slower (7.9 -> 9.5 ms, with or without the write stage), so
 * dim 64 keeps sr_chunk_rows. */
#define SR_ROWS_BLOCK 16

/* One row in that order (the rows left over after the 16-row blocks). */
static inline __attribute__((always_inline)) void sr_adagrad_row_fixed(
    float *w, float *m, const float *g, float g_scale, float lr, float eps, int64_t dim) {
    float lane[16];
#pragma omp simd
    for (int l = 0; l < 16; l++) lane[l] = g[l] * g[l];
    for (int64_t p = 16; p < dim; p += 16) {
#pragma omp simd
        for (int l = 0; l < 16; l++) lane[l] += g[p + l] * g[p + l];
    }
    float sq = lane[0];
    for (int l = 1; l < 16; l++) sq += lane[l];
    const float acc = *m + g_scale * g_scale * sq / (float)dim;
    *m = acc;
    const float mult = lr / (sqrtf(acc) + eps) * g_scale;
#pragma omp simd
    for (int64_t d = 0; d < dim; d++) w[d] -= mult * g[d];
}

/* 16 x 16 floats transposed in registers: lane l of v[r] -> lane r of v[l]. */
static inline __attribute__((always_inline)) void sr_transpose16(__m512 v[16]) {
    __m512 t[16];
    for (int k = 0; k < 16; k += 2) {
        t[k] = _mm512_unpacklo_ps(v[k], v[k + 1]);
        t[k + 1] = _mm512_unpackhi_ps(v[k], v[k + 1]);
    }
    for (int k = 0; k < 16; k += 4) {
        v[k] = _mm512_shuffle_ps(t[k], t[k + 2], 0x44);
        v[k + 1] = _mm512_shuffle_ps(t[k], t[k + 2], 0xEE);
        v[k + 2] = _mm512_shuffle_ps(t[k + 1], t[k + 3], 0x44);
        v[k + 3] = _mm512_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
    }
    for (int k = 0; k < 4; k++) {
        t[k] = _mm512_shuffle_f32x4(v[k], v[k + 4], 0x88);
        t[k + 4] = _mm512_shuffle_f32x4(v[k], v[k + 4], 0xDD);
        t[k + 8] = _mm512_shuffle_f32x4(v[k + 8], v[k + 12], 0x88);
        t[k + 12] = _mm512_shuffle_f32x4(v[k + 8], v[k + 12], 0xDD);
    }
    for (int k = 0; k < 4; k++) {
        v[k] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0x88);
        v[k + 8] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0xDD);
        v[k + 4] = _mm512_shuffle_f32x4(t[k + 4], t[k + 12], 0x88);
        v[k + 12] = _mm512_shuffle_f32x4(t[k + 4], t[k + 12], 0xDD);
    }
}

/* sr_adagrad_row_fixed on the 16 items `it` (distinct rows), as one block. */
static inline __attribute__((always_inline)) void sr_adagrad_rows16(const sr_update_args *a,
                                                                    const sr_item *it,
                                                                    int64_t dim) {
    __m512 v[16];
    float ms[16], gs[16], mu[16];
    for (int r = 0; r < 16; r++) {
        const float *g = it[r].g;
        __m512 x = _mm512_loadu_ps(g);
        __m512 lane = _mm512_mul_ps(x, x);
        for (int64_t p = 16; p < dim; p += 16) {
            x = _mm512_loadu_ps(g + p);
            lane = _mm512_add_ps(lane, _mm512_mul_ps(x, x));
        }
        v[r] = lane;
        ms[r] = a->state[it[r].row];
        gs[r] = it[r].scale;
    }
    sr_transpose16(v);
    __m512 sq = v[0];
    for (int l = 1; l < 16; l++) sq = _mm512_add_ps(sq, v[l]);
    const __m512 g_scale = _mm512_loadu_ps(gs);
    const __m512 scaled = _mm512_mul_ps(_mm512_mul_ps(g_scale, g_scale), sq);
    const __m512 acc =
        _mm512_add_ps(_mm512_loadu_ps(ms), _mm512_div_ps(scaled, _mm512_set1_ps((float)dim)));
    const __m512 root = _mm512_add_ps(_mm512_sqrt_ps(acc), _mm512_set1_ps(a->eps));
    _mm512_storeu_ps(ms, acc);
    _mm512_storeu_ps(mu, _mm512_mul_ps(_mm512_div_ps(_mm512_set1_ps(a->lr), root), g_scale));
    for (int r = 0; r < 16; r++) {
        a->state[it[r].row] = ms[r];
        float *w = a->weight + it[r].row * dim;
        const float *g = it[r].g;
        const __m512 mult = _mm512_set1_ps(mu[r]);
        for (int64_t p = 0; p < dim; p += 16) {
            const __m512 step = _mm512_mul_ps(mult, _mm512_loadu_ps(g + p));
            _mm512_storeu_ps(w + p, _mm512_sub_ps(_mm512_loadu_ps(w + p), step));
        }
    }
}

/* sr_chunk_rows for rowwise Adagrad at dim 32 or 64 (the same prefetch stages), 16 rows at a
 * time. */
static inline __attribute__((always_inline)) void sr_chunk_rows16(const sr_update_args *a,
                                                                  const sr_chunk *c,
                                                                  int64_t dim) {
    const int64_t n = c->nitems;
    const sr_item *items = c->items;
    const int write_stage = dim >= SR_ROW_WRITE_MIN_DIM;
    int64_t i = 0;
    for (; i + SR_ROWS_BLOCK <= n; i += SR_ROWS_BLOCK) {
        for (int64_t j = i; j < i + SR_ROWS_BLOCK; j++) {
            if (j + SR_ROW_FAR < n) {
                const int64_t r = items[j + SR_ROW_FAR].row;
                sr_prefetch_row(a->weight + r * dim, dim);
                __builtin_prefetch(&a->state[r], 0, 1);
                sr_prefetch_row(items[j + SR_ROW_FAR].g, dim);
            }
            if (write_stage && j + SR_ROW_AHEAD < n) {
                const int64_t r = items[j + SR_ROW_AHEAD].row;
                sr_prefetch_rw(a->weight + r * dim, dim);
                __builtin_prefetch(&a->state[r], 1, 0);
            }
        }
        sr_adagrad_rows16(a, items + i, dim);
    }
    for (; i < n; i++) {
        const int64_t r = items[i].row;
        sr_adagrad_row_fixed(a->weight + r * dim, &a->state[r], items[i].g, items[i].scale,
                             a->lr, a->eps, dim);
    }
}

/* Not inlined: sr_chunk_update's other loops keep the code they had before. */
static __attribute__((noinline)) void sr_chunk_rows32(const sr_update_args *a,
                                                      const sr_chunk *c) {
    sr_chunk_rows16(a, c, 32);
}
#endif

static void sr_chunk_update(const sr_update_args *a, sr_chunk *c) {
    const int rowwise = a->kind == SR_KIND_ROWWISE_ADAGRAD;
    if (rowwise && a->dim == 32) {
#ifdef __AVX512F__
        sr_chunk_rows32(a, c);
#else
        sr_chunk_rows(a, c, 1, 32);
#endif
    } else if (rowwise && a->dim == 64) {
        sr_chunk_rows(a, c, 1, 64); /* sr_chunk_rows16 at 64: 8.2 -> 9.9 ms (session 12) */
    } else {
        sr_chunk_rows(a, c, rowwise, a->dim);
    }
    c->nitems = 0;
    c->nacc = 0;
}

/* Steps 2 and 3 over the sorted entries (threads split the buckets). */
static void sr_fused_apply(const sr_update_args *args, int64_t buckets, const int32_t *starts,
                           int32_t *local_ws, sr_item *items_ws, float *acc_ws, int64_t cap,
                           int num_threads) {
    const int64_t width = (int64_t)1 << args->shift, dim = args->dim;
#pragma omp parallel num_threads(num_threads)
    {
        const int64_t nt = omp_get_num_threads(), me = omp_get_thread_num();
        const int64_t k0 = buckets * me / nt, k1 = buckets * (me + 1) / nt;
        int32_t *base = local_ws + me * 2 * width;
        sr_chunk chunk = {base,
                          base + width,
                          items_ws + me * cap,
                          acc_ws + me * cap * dim,
                          0,
                          0};
        for (int64_t k = k0; k < k1; k++) {
            const int64_t lo = k ? starts[k - 1] : 0, hi = starts[k];
            if (lo == hi) continue;
            if (chunk.nitems + width > cap) sr_chunk_update(args, &chunk);
            sr_bucket_gather(args, k, lo, hi, &chunk);
        }
        sr_chunk_update(args, &chunk);
    }
}

/* One packed group's update from its own ids (group rows) and a `(num_bags, D)` gradient
 * with row stride grad_stride: a single segment. */
void sr_fused_update(int64_t kind, float *weight, float *state, int64_t rows, int64_t dim,
                     const int64_t *ids, const int64_t *offsets, int64_t num_bags,
                     const float *psw, int64_t mean, const float *grad, int64_t grad_stride,
                     float lr, float eps, int64_t shift, int32_t *starts, sr_entry *entries,
                     int32_t *local_ws, sr_item *items_ws, float *acc_ws, int64_t cap,
                     int num_threads) {
    if (num_bags <= 0 || rows <= 0) return;
    const int64_t buckets = ((rows - 1) >> shift) + 1;
    const sr_update_segment seg = {0, 0, rows, 0, mean};
    sr_bucket_sort_i64(&seg, 1, num_bags, ids, offsets, psw, grad_stride, shift, buckets, starts,
                       entries);
    const int64_t total = starts[buckets - 1]; /* the sorted entries */
    const sr_update_args args = {kind, dim,     shift, weight, state, grad,
                                 grad, INT64_MAX, entries, total, lr, eps};
    sr_fused_apply(&args, buckets, starts, local_ws, items_ws, acc_ws, cap, num_threads);
}

/* The same update straight from a KJT and the lookup's `(B, total_dim)` output gradient: the
 * segments of one packed group (table-local ids, no shift, no gradient copy). The gradient may
 * lie in two row pieces with the same row stride: offsets from split_off on (the second
 * piece's first row times grad_stride) read grad1 (one piece: grad1 = grad, split_off past
 * every offset, e.g. INT64_MAX). */
#define SR_DEFINE_SEGMENT_UPDATE(NAME, SORT, IDX)                                              \
    void NAME(int64_t kind, float *weight, float *state, int64_t rows, int64_t dim,            \
              const sr_update_segment *segs, int64_t num_segments, int64_t batch,              \
              const IDX *values, const int64_t *offsets, const float *psw, const float *grad,  \
              const float *grad1, int64_t split_off, int64_t grad_stride, float lr, float eps, \
              int64_t shift, int32_t *starts,                                                  \
              sr_entry *entries, int32_t *local_ws, sr_item *items_ws, float *acc_ws,          \
              int64_t cap, int num_threads) {                                                  \
        if (batch <= 0 || rows <= 0 || num_segments <= 0) return;                              \
        const int64_t buckets = ((rows - 1) >> shift) + 1;                                     \
        SORT(segs, num_segments, batch, values, offsets, psw, grad_stride, shift, buckets,     \
             starts, entries);                                                                 \
        const int64_t total = starts[buckets - 1];                                             \
        const sr_update_args args = {kind,  dim,       shift,   weight, state, grad,           \
                                     grad1, split_off, entries, total,  lr,    eps};           \
        sr_fused_apply(&args, buckets, starts, local_ws, items_ws, acc_ws, cap, num_threads);  \
    }

SR_DEFINE_SEGMENT_UPDATE(sr_fused_update_segments_i64, sr_bucket_sort_i64, int64_t)
SR_DEFINE_SEGMENT_UPDATE(sr_fused_update_segments_i32, sr_bucket_sort_i32, int32_t)

/* The same update in two calls (session 11, s11-colwise): step 1 (the sort) needs only the ids,
 * the offsets, the per-sample weights and the gradient's row stride, not the gradient, so a
 * lookup can run it in forward (on a helper thread, while its rank waits for the pooled
 * all-to-all) into its own starts / entries, and its backward runs steps 2 and 3 from them:
 * sr_fused_sort_segments_* then sr_fused_apply_sorted give bitwise the same weights and state
 * as sr_fused_update_segments_* (the same entries in the same order). Neither reads or
 * writes anything else; the sort is single-threaded. */
#define SR_DEFINE_SEGMENT_SORT(NAME, SORT, IDX)                                                \
    void NAME(int64_t rows, const sr_update_segment *segs, int64_t num_segments,               \
              int64_t batch, const IDX *values, const int64_t *offsets, const float *psw,      \
              int64_t grad_stride, int64_t shift, int32_t *starts, sr_entry *entries) {        \
        if (batch <= 0 || rows <= 0 || num_segments <= 0) return;                              \
        const int64_t buckets = ((rows - 1) >> shift) + 1;                                     \
        SORT(segs, num_segments, batch, values, offsets, psw, grad_stride, shift, buckets,     \
             starts, entries);                                                                 \
    }

SR_DEFINE_SEGMENT_SORT(sr_fused_sort_segments_i64, sr_bucket_sort_i64, int64_t)
SR_DEFINE_SEGMENT_SORT(sr_fused_sort_segments_i32, sr_bucket_sort_i32, int32_t)

void sr_fused_apply_sorted(int64_t kind, float *weight, float *state, int64_t rows, int64_t dim,
                           const float *grad, const float *grad1, int64_t split_off, float lr,
                           float eps, int64_t shift,
                           const int32_t *starts, const sr_entry *entries, int32_t *local_ws,
                           sr_item *items_ws, float *acc_ws, int64_t cap, int num_threads) {
    if (rows <= 0) return;
    const int64_t buckets = ((rows - 1) >> shift) + 1;
    const int64_t total = starts[buckets - 1];
    const sr_update_args args = {kind, dim,       shift,   weight, state, grad,
                                 grad1, split_off, entries, total, lr,    eps};
    sr_fused_apply(&args, buckets, starts, local_ws, items_ws, acc_ws, cap, num_threads);
}
