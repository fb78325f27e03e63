/* The send buffer of a sharded collection's shared dynamic-table id exchange, in one native
 * pass over all its tables (shardrec_sharding/_dynamic_exchange.py, which has the same layout
 * in torch ops as the fallback; the results are identical).
 *
 * sr_route_pack: `ids` holds every dynamic table's ids of the batch, table after table
 *   (`lens[t]` each). Table t is replicated when `parts[t]` == 0 (its ids go to every rank);
 *   otherwise id x goes to rank `owners[base[t] + p]`, p = mix64(x ^ salt) mod parts[t]
 *   (mix64: MurmurHash3's fmix64; the modulo of the hash read as a signed int64, made
 *   non-negative, as torch.remainder does), or, when `bounded[t]` (a bucketed table,
 *   shardrec_sharding/id_buckets.py), with b = bounds + base[t] + t (parts[t] + 1 id bounds)
 *   and u = x read as uint64: p = the part whose [b[p], b[p+1]) holds u when u < b[parts[t]],
 *   else u mod parts[t] (fbgemm's block bucketization, TorchRec's rule). Writes:
 *   - counts (world, T): ids of table t sent to rank d;
 *   - send: one block per rank d: [0 (the flag), counts[d][0..T), table 0's ids for d,
 *     table 1's ...], each table's ids in their order in `ids` (a stable grouping);
 *   - where (n): for an id of a partitioned table, its position in the way-back buffer
 *     (one block per rank d: [flag, the slots of the partitioned tables' ids sent to d, in
 *     the same order]); -1 for an id of a replicated table;
 *   - dest (n): scratch.
 *   Returns the number of ids written to `send` past the headers. */
#include <stdint.h>
#include <stdlib.h>

static inline uint64_t fmix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDULL;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ULL;
    x ^= x >> 33;
    return x;
}

/* The part of u among the P parts with id bounds b[0..P] (u < b[P]): the last p with
 * b[p] <= u, by binary search. */
static inline int64_t bucket_part(uint64_t u, const int64_t *b, int64_t P) {
    int64_t lo = 0, hi = P; /* b[lo] <= u < b[hi] */
    while (hi - lo > 1) {
        int64_t mid = (lo + hi) >> 1;
        if ((uint64_t)b[mid] <= u) lo = mid;
        else hi = mid;
    }
    return lo;
}

int64_t sr_route_pack(const int64_t *ids, const int64_t *lens, int64_t T, const int64_t *parts,
                      const int64_t *base, const int64_t *owners, const int64_t *bounded,
                      const int64_t *bounds, int64_t world, int64_t salt,
                      int64_t *counts, int64_t *send, int64_t *where, int64_t *dest) {
    int64_t W = world;
    for (int64_t i = 0; i < W * T; i++) counts[i] = 0;
    /* pass 1: each id's rank, counted */
    int64_t at = 0;
    for (int64_t t = 0; t < T; t++) {
        int64_t n = lens[t], p = parts[t];
        if (p == 0) {
            for (int64_t d = 0; d < W; d++) counts[d * T + t] += n;
        } else if (p == 1) {
            int64_t r = owners[base[t]];
            for (int64_t i = 0; i < n; i++) dest[at + i] = r;
            counts[r * T + t] += n;
        } else if (bounded[t]) {
            const int64_t *own = owners + base[t];
            const int64_t *b = bounds + base[t] + t;
            uint64_t end = (uint64_t)b[p];
            int64_t *c = counts + t;
            for (int64_t i = 0; i < n; i++) {
                uint64_t u = (uint64_t)ids[at + i];
                int64_t q = u < end ? bucket_part(u, b, p) : (int64_t)(u % (uint64_t)p);
                int64_t r = own[q];
                dest[at + i] = r;
                c[r * T]++;
            }
        } else {
            const int64_t *own = owners + base[t];
            int64_t *c = counts + t;
            for (int64_t i = 0; i < n; i++) {
                int64_t h = (int64_t)fmix64((uint64_t)(ids[at + i] ^ salt));
                int64_t q = h % p;
                if (q < 0) q += p;
                int64_t r = own[q];
                dest[at + i] = r;
                c[r * T]++;
            }
        }
        at += n;
    }
    /* cursors: where each (rank, table) run starts in `send` and in the way back */
    int64_t *cur = (int64_t *)malloc(sizeof(int64_t) * (size_t)(2 * W * T + 1));
    if (cur == NULL) return -1;
    int64_t *back = cur + W * T;
    int64_t pos = 0, ret = 0, total = 0;
    for (int64_t d = 0; d < W; d++) {
        send[pos] = 0;
        for (int64_t t = 0; t < T; t++) send[pos + 1 + t] = counts[d * T + t];
        pos += 1 + T;
        ret += 1;
        for (int64_t t = 0; t < T; t++) {
            int64_t c = counts[d * T + t];
            cur[d * T + t] = pos;
            pos += c;
            total += c;
            back[d * T + t] = ret;
            if (parts[t] != 0) ret += c;
        }
    }
    /* pass 2: the ids into their runs, in order */
    at = 0;
    for (int64_t t = 0; t < T; t++) {
        int64_t n = lens[t];
        if (parts[t] == 0) {
            for (int64_t d = 0; d < W; d++) {
                int64_t *out = send + cur[d * T + t];
                for (int64_t i = 0; i < n; i++) out[i] = ids[at + i];
            }
            for (int64_t i = 0; i < n; i++) where[at + i] = -1;
        } else {
            for (int64_t i = 0; i < n; i++) {
                int64_t k = dest[at + i] * T + t;
                send[cur[k]++] = ids[at + i];
                where[at + i] = back[k]++;
            }
        }
        at += n;
    }
    free(cur);
    return total;
}
