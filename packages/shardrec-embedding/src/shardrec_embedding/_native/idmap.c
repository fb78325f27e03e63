/* Native id -> slot hash map of the raw-id (dynamic) embedding tables.
 *
 * Open addressing with linear probing over a power-of-two array of buckets. A bucket is two
 * int64s, `{key, slot}`, side by side (one cache line holds four buckets, and the key and its
 * slot arrive together). A bucket is empty when its slot is negative: the emptiness mark lives
 * in the slot, so every int64 key (0, -1, INT64_MIN, ...) is a valid user id.
 * Deletion shifts the following buckets of the probe run back (no tombstones), so probe runs
 * stay as short as the load allows however many ids were evicted.
 *
 * The home bucket of a key is `mix(key) & mask` with MurmurHash3's 64-bit finalizer: a
 * bijection on 64 bits, so sequential or strided raw ids spread evenly.
 *
 * Called through ctypes by `shardrec_embedding.dynamic.id_map` (docs/design/dynamic-id-map.md);
 * no torch headers, compiled by `loader.py` on first use.
 */
#include <stdint.h>

#define SR_IDMAP_PREFETCH 16

static inline uint64_t sr_idmap_mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static inline int64_t sr_idmap_probe(const int64_t *buckets, uint64_t mask, int64_t key) {
    uint64_t h = sr_idmap_mix((uint64_t)key) & mask;
    for (uint64_t n = 0; n <= mask; n++) {
        const int64_t *b = buckets + 2 * h;
        if (b[1] < 0) return -1;
        if (b[0] == key) return (int64_t)h;
        h = (h + 1) & mask;
    }
    return -1;
}

/* out[i] = slot of ids[i], or -1 when absent. Returns the number found. */
int64_t sr_idmap_find(const int64_t *buckets, int64_t num_buckets, const int64_t *ids, int64_t n,
                      int64_t *out) {
    const uint64_t mask = (uint64_t)num_buckets - 1;
    int64_t found = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i + SR_IDMAP_PREFETCH < n) {
            uint64_t ahead = sr_idmap_mix((uint64_t)ids[i + SR_IDMAP_PREFETCH]) & mask;
            __builtin_prefetch(buckets + 2 * ahead, 0, 0);
        }
        int64_t h = sr_idmap_probe(buckets, mask, ids[i]);
        out[i] = h < 0 ? -1 : buckets[2 * h + 1];
        found += h >= 0;
    }
    return found;
}

/* Inserts ids[i] -> slots[i] (ids absent and distinct; callers guarantee it). Returns the
 * number inserted, or -(i + 1) when ids[i] was already present or no bucket was free. */
int64_t sr_idmap_insert(int64_t *buckets, int64_t num_buckets, const int64_t *ids,
                        const int64_t *slots, int64_t n) {
    const uint64_t mask = (uint64_t)num_buckets - 1;
    for (int64_t i = 0; i < n; i++) {
        uint64_t h = sr_idmap_mix((uint64_t)ids[i]) & mask;
        uint64_t steps = 0;
        while (buckets[2 * h + 1] >= 0) {
            if (buckets[2 * h] == ids[i] || ++steps > mask) return -(i + 1);
            h = (h + 1) & mask;
        }
        buckets[2 * h] = ids[i];
        buckets[2 * h + 1] = slots[i];
    }
    return n;
}

/* Removes ids (absent ones are skipped) by backward-shift deletion. Returns the number removed. */
int64_t sr_idmap_erase(int64_t *buckets, int64_t num_buckets, const int64_t *ids, int64_t n) {
    const uint64_t mask = (uint64_t)num_buckets - 1;
    int64_t removed = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t found = sr_idmap_probe(buckets, mask, ids[i]);
        if (found < 0) continue;
        removed++;
        uint64_t hole = (uint64_t)found;
        uint64_t j = hole;
        for (;;) {
            j = (j + 1) & mask;
            if (buckets[2 * j + 1] < 0) break;
            uint64_t home = sr_idmap_mix((uint64_t)buckets[2 * j]) & mask;
            /* The entry at j may fill the hole unless its home lies cyclically in (hole, j]. */
            uint64_t dist_home = (j - home) & mask, dist_hole = (j - hole) & mask;
            if (dist_home >= dist_hole) {
                buckets[2 * hole] = buckets[2 * j];
                buckets[2 * hole + 1] = buckets[2 * j + 1];
                hole = j;
            }
        }
        buckets[2 * hole] = 0;
        buckets[2 * hole + 1] = -1;
    }
    return removed;
}

/* The distinct ids among those with slots[i] < 0, in order of first appearance: written to
 * uniq[0..u) with their occurrence counts in counts[0..u); inverse[i] = the index in uniq of
 * ids[i] for each such i (other entries untouched). scratch: 2 * cap int64s, cap a power of
 * two > the number of missing ids. Returns u. */
int64_t sr_idmap_distinct_missing(const int64_t *ids, const int64_t *slots, int64_t n,
                                  int64_t *scratch, int64_t cap, int64_t *uniq, int64_t *counts,
                                  int64_t *inverse) {
    const uint64_t mask = (uint64_t)cap - 1;
    for (int64_t b = 0; b < cap; b++) scratch[2 * b + 1] = -1;
    int64_t u = 0;
    for (int64_t i = 0; i < n; i++) {
        if (slots[i] >= 0) continue;
        const int64_t key = ids[i];
        uint64_t h = sr_idmap_mix((uint64_t)key) & mask;
        for (;;) {
            int64_t *b = scratch + 2 * h;
            if (b[1] < 0) {
                b[0] = key;
                b[1] = u;
                uniq[u] = key;
                counts[u] = 1;
                inverse[i] = u++;
                break;
            }
            if (b[0] == key) {
                counts[b[1]]++;
                inverse[i] = b[1];
                break;
            }
            h = (h + 1) & mask;
        }
    }
    return u;
}

/* sr_idmap_find, and for every id found: last_seen[slot] = step, counts[slot] += 1 (the
 * dynamic table's per-slot metadata, updated in the same pass; a NULL array is skipped).
 * Returns the number found. */
int64_t sr_idmap_find_touch(const int64_t *buckets, int64_t num_buckets, const int64_t *ids,
                            int64_t n, int64_t *out, int64_t *last_seen, int64_t *counts,
                            int64_t step) {
    const uint64_t mask = (uint64_t)num_buckets - 1;
    int64_t found = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i + SR_IDMAP_PREFETCH < n) {
            uint64_t ahead = sr_idmap_mix((uint64_t)ids[i + SR_IDMAP_PREFETCH]) & mask;
            __builtin_prefetch(buckets + 2 * ahead, 0, 0);
        }
        int64_t h = sr_idmap_probe(buckets, mask, ids[i]);
        if (h < 0) {
            out[i] = -1;
            continue;
        }
        const int64_t slot = buckets[2 * h + 1];
        out[i] = slot;
        if (last_seen) last_seen[slot] = step;
        if (counts) counts[slot] += 1;
        found++;
    }
    return found;
}
