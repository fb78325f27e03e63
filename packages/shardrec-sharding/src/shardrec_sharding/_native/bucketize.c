/* Row bucketization in one pass over the ids (strategies/_bucketize_native.py).
 *
 * Segment j reads seg_ids[j] ids from values[seg_start[j]] in bags of lengths[j * batch + b]
 * (n ids in all). Each id goes to the shard whose rows hold it: shard = first[j] + id / block[j]
 * when the segment's blocks are uniform (block[j] > 0), else the last of the segment's shards
 * (starts[first[j] .. first[j] + nshards[j]), sorted) whose start is <= id. The shard's rank gets
 * the id minus the shard's start (a local row), appended to its row of `out` (world x n, int32
 * or int64) in (segment, bag) order; counts[(rank * segments + j) * batch + b] counts them and
 * totals[rank * segments + j] sums them per segment. Weights (float32) follow their ids.
 * `order` (optional): order[k] = the segment-major position of the k-th id sent (ranks in
 * order). Returns n, or a negative number when an id lies outside its table's shards or the
 * bags do not cover the segments (the caller then takes its torch path).
 * Two ranks: the running counts stay in registers (an array indexed by the id's rank made every
 * id wait on the previous one's store); a segment whose table is rows [0, block) on rank 0 and
 * [block, end) on rank 1 (row_wise's usual split), with int32 out, takes a loop with
 * no shard lookup and no branch: one range check, and the local row written on both ranks'
 * rows, kept (counted) on one. 266k ids: 1.35 -> 0.61 ms (docs/bench/sharded.md, session 11).
 */
#include <stdint.h>
#include <string.h>

#define SR_BK_MAX_WORLD 64

typedef struct {
    int64_t block, first, count;
    double inv; /* 1 / block */
} sr_bk_seg;

static inline int64_t sr_bk_shard(int64_t id, const sr_bk_seg *g, const int64_t *starts) {
    if (g->block > 0) {
        /* id / block by a multiplication (a 64-bit division costs tens of cycles), corrected
         * to the exact quotient: the double's error is far below one for ids under 2**52 */
        int64_t q = (int64_t)((double)id * g->inv);
        if (q * g->block > id) q--;
        else if ((q + 1) * g->block <= id) q++;
        return g->first + q;
    }
    int64_t lo = 0, hi = g->count - 1; /* the last start <= id */
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) >> 1;
        if (starts[g->first + mid] <= id) lo = mid; else hi = mid - 1;
    }
    return g->first + lo;
}

static inline int64_t sr_bk_id(const void *values, int values_i32, int64_t i) {
    return values_i32 ? (int64_t)((const int32_t *)values)[i] : ((const int64_t *)values)[i];
}

/* One segment of the two-block split (header): its ids from values[at] in bags len[0 .. batch),
 * rows [0, blk) to rank 0's row r0 (local = id), [blk, end) to rank 1's row r1 (id - blk), the
 * running counts pos[0], pos[1] in registers, per-bag counts into c0 / c1, sums into *t0 / *t1.
 * Returns 0, or -1 for an id outside [0, end). Always inlined, and called with weights NULL or
 * not, so that neither loop tests for weights per id. */
static inline __attribute__((always_inline)) int sr_bk_two_blocks(
    const void *values, int values_i32, int64_t at, const int64_t *len, int64_t batch,
    int64_t blk, int64_t end, int32_t *r0, int32_t *r1, const float *weights, float *w0,
    float *w1, int64_t *pos, int64_t *c0, int64_t *c1, int64_t *t0, int64_t *t1) {
    int64_t p0 = pos[0], p1 = pos[1];
    for (int64_t b = 0; b < batch; b++) {
        int64_t stop = at + len[b], b0 = p0, b1 = p1;
        for (int64_t i = at; i < stop; i++) {
            int64_t id = sr_bk_id(values, values_i32, i);
            if ((uint64_t)id >= (uint64_t)end) return -1;
            int64_t one = id >= blk;
            int32_t local = (int32_t)(id - (one ? blk : 0));
            r0[p0] = local; /* written on both rows, kept on one: no branch */
            r1[p1] = local;
            if (weights) {
                w0[p0] = weights[i];
                w1[p1] = weights[i];
            }
            p1 += one;
            p0 += 1 - one;
        }
        c0[b] = p0 - b0;
        c1[b] = p1 - b1;
        *t0 += p0 - b0;
        *t1 += p1 - b1;
        at = stop;
    }
    pos[0] = p0;
    pos[1] = p1;
    return 0;
}

int64_t sr_row_bucketize(
    const void *values, int values_i32, const int64_t *seg_start, const int64_t *seg_ids,
    const int64_t *lengths, int64_t segments, int64_t batch, const int64_t *block,
    const int64_t *first, const int64_t *nshards, const int64_t *starts, const int64_t *ends,
    const int64_t *rank, int64_t world, int64_t n, void *out, int out_i32,
    const float *weights, float *out_weights, int64_t *counts, int64_t *totals, int64_t *order) {
    int64_t pos[SR_BK_MAX_WORLD];
    if (world < 1 || world > SR_BK_MAX_WORLD) return -1;
    int64_t all = 0;
    for (int64_t j = 0; j < segments; j++) { /* the bags must cover exactly the segment */
        int64_t t = 0;
        for (int64_t b = 0; b < batch; b++) {
            if (lengths[j * batch + b] < 0) return -1;
            t += lengths[j * batch + b];
        }
        if (t != seg_ids[j]) return -1;
        all += t;
    }
    if (all != n) return -1;
    memset(pos, 0, sizeof(pos));
    memset(counts, 0, sizeof(int64_t) * (size_t)(world * segments * batch));
    memset(totals, 0, sizeof(int64_t) * (size_t)(world * segments));
    int64_t *o64 = (int64_t *)out;
    int32_t *o32 = (int32_t *)out;
    for (int64_t j = 0; j < segments; j++) {
        sr_bk_seg g = {block[j], first[j], nshards[j], block[j] > 0 ? 1.0 / (double)block[j] : 0.0};
        int64_t last = g.first + g.count;
        int64_t at = seg_start[j];
        const int64_t *len = lengths + j * batch;
        if (world == 2 && out_i32 && g.block > 0 && g.count == 2 &&
            rank[g.first] == 0 && rank[g.first + 1] == 1 && starts[g.first] == 0 &&
            starts[g.first + 1] == g.block && ends[g.first] == g.block &&
            ends[g.first + 1] > g.block && ends[g.first + 1] <= 2 * g.block) {
            /* the common row_wise table: rows [0, block) on rank 0, [block, end) on rank 1 */
            int64_t *c0 = counts + j * batch, *c1 = counts + (segments + j) * batch;
            int64_t *t0 = totals + j, *t1 = totals + segments + j;
            int64_t blk = g.block, end = ends[g.first + 1];
            int bad = weights ? sr_bk_two_blocks(values, values_i32, at, len, batch, blk, end, o32,
                                                 o32 + n, weights, out_weights,
                                                 out_weights + n, pos, c0, c1, t0, t1)
                              : sr_bk_two_blocks(values, values_i32, at, len, batch, blk, end, o32,
                                                 o32 + n, NULL, NULL, NULL, pos, c0, c1, t0, t1);
            if (bad) return -1;
            continue;
        }
        if (world == 2) { /* running counts in registers: no store-to-load chain per id */
            int64_t p0 = pos[0], p1 = pos[1];
            for (int64_t b = 0; b < batch; b++) {
                int64_t stop = at + len[b], b0 = p0, b1 = p1;
                for (int64_t i = at; i < stop; i++) {
                    int64_t id = sr_bk_id(values, values_i32, i);
                    if (id < 0) return -1;
                    int64_t s = sr_bk_shard(id, &g, starts);
                    if (s >= last || id >= ends[s] || id < starts[s]) return -1;
                    int64_t one = rank[s]; /* 0 or 1 (checked by the caller) */
                    int64_t k = one ? n + p1 : p0;
                    p1 += one;
                    p0 += 1 - one;
                    int64_t local = id - starts[s];
                    if (out_i32) o32[k] = (int32_t)local; else o64[k] = local;
                    if (weights) out_weights[k] = weights[i];
                }
                counts[j * batch + b] = p0 - b0;
                counts[(segments + j) * batch + b] = p1 - b1;
                totals[j] += p0 - b0;
                totals[segments + j] += p1 - b1;
                at = stop;
            }
            pos[0] = p0;
            pos[1] = p1;
            continue;
        }
        for (int64_t b = 0; b < batch; b++) {
            int64_t stop = at + len[b];
            int64_t bag_count[SR_BK_MAX_WORLD];
            for (int64_t d = 0; d < world; d++) bag_count[d] = pos[d];
            for (int64_t i = at; i < stop; i++) {
                int64_t id = sr_bk_id(values, values_i32, i);
                if (id < 0) return -1;
                int64_t s = sr_bk_shard(id, &g, starts);
                if (s >= last || id >= ends[s] || id < starts[s]) return -1;
                int64_t d = rank[s];
                int64_t k = d * n + pos[d]++;
                int64_t local = id - starts[s];
                if (out_i32) o32[k] = (int32_t)local; else o64[k] = local;
                if (weights) out_weights[k] = weights[i];
            }
            for (int64_t d = 0; d < world; d++) {
                int64_t c = pos[d] - bag_count[d];
                counts[(d * segments + j) * batch + b] = c;
                totals[d * segments + j] += c;
            }
            at = stop;
        }
    }
    if (order) {
        int64_t base[SR_BK_MAX_WORLD];
        int64_t acc = 0;
        for (int64_t d = 0; d < world; d++) { base[d] = acc; acc += pos[d]; }
        int64_t i_major = 0;
        for (int64_t j = 0; j < segments; j++) {
            sr_bk_seg g = {block[j], first[j], nshards[j], block[j] > 0 ? 1.0 / (double)block[j] : 0.0};
            int64_t at = seg_start[j];
            for (int64_t i = at; i < at + seg_ids[j]; i++) {
                int64_t d = rank[sr_bk_shard(sr_bk_id(values, values_i32, i), &g, starts)];
                order[base[d]++] = i_major++;
            }
        }
    }
    return n;
}
