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
#include <stdlib.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#define SR_IDMAP_STREAM 1
#endif
#if defined(__AVX512F__) && defined(__AVX512DQ__)
#include <immintrin.h>
#define SR_IDMAP_AVX512 1
#endif

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

/* key -> slot into the first empty bucket of key's probe run; 0 (nothing written) when key is
 * already present or no bucket is free. */
/* Slots from here on mark a *pending* entry: an id a training step's find pass met missing and
 * entered on the spot (sr_idmap_find_touch_pending), its slot still to be decided. Pending
 * entries live only inside one DynamicTable training step: the step's insertion gives each
 * its slot (sr_idmap_put overwrites a pending entry of its key) or drops it
 * (sr_idmap_drop_pending). Real slots are below it (a table's capacity). */
#define SR_IDMAP_PENDING ((int64_t)1 << 62)

static inline int sr_idmap_put(int64_t *buckets, uint64_t mask, int64_t key, int64_t slot) {
    uint64_t h = sr_idmap_mix((uint64_t)key) & mask;
    uint64_t steps = 0;
    while (buckets[2 * h + 1] >= 0) {
        if (buckets[2 * h] == key) {
            if (buckets[2 * h + 1] < SR_IDMAP_PENDING) return 0; /* present already */
            buckets[2 * h + 1] = slot; /* the step's pending entry of key gets its slot */
            return 1;
        }
        if (++steps > mask) return 0;
        h = (h + 1) & mask;
    }
    buckets[2 * h] = key;
    buckets[2 * h + 1] = slot;
    return 1;
}

/* Inserts ids[i] -> slots[i] (ids absent and distinct; callers guarantee it). Returns the
 * number inserted, or -(i + 1) when ids[i] was already present or no bucket was free. */
int64_t sr_idmap_insert(int64_t *buckets, int64_t num_buckets, const int64_t *ids,
                        const int64_t *slots, int64_t n) {
    const uint64_t mask = (uint64_t)num_buckets - 1;
    for (int64_t i = 0; i < n; i++) {
        if (i + SR_IDMAP_PREFETCH < n) {
            uint64_t ahead = sr_idmap_mix((uint64_t)ids[i + SR_IDMAP_PREFETCH]) & mask;
            __builtin_prefetch(buckets + 2 * ahead, 1, 0);
        }
        if (!sr_idmap_put(buckets, mask, ids[i], slots[i])) return -(i + 1);
    }
    return n;
}

/* Removes key (when present) by backward-shift deletion; returns 1 when it was present. Static
 * and inline: a call through the exported sr_idmap_erase cannot be inlined in a -fPIC
 * library (the symbol could be interposed), and the per-id callers loop over thousands. */
static inline int64_t sr_idmap_erase_one(int64_t *buckets, uint64_t mask, int64_t key) {
    int64_t found = sr_idmap_probe(buckets, mask, key);
    if (found < 0) return 0;
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
    return 1;
}

/* Removes ids (absent ones are skipped) by backward-shift deletion. Returns the number removed. */
int64_t sr_idmap_erase(int64_t *buckets, int64_t num_buckets, const int64_t *ids, int64_t n) {
    const uint64_t mask = (uint64_t)num_buckets - 1;
    int64_t removed = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i + SR_IDMAP_PREFETCH < n) {
            uint64_t ahead = sr_idmap_mix((uint64_t)ids[i + SR_IDMAP_PREFETCH]) & mask;
            __builtin_prefetch(buckets + 2 * ahead, 1, 0);
        }
        removed += sr_idmap_erase_one(buckets, mask, ids[i]);
    }
    return removed;
}

/* The index of key in the scratch set (open addressing, 2 int64s a bucket, mask + 1 buckets):
 * a new key becomes uniq[*u] with count 1, a known one counts once more. */
static inline int64_t sr_idmap_dedup(int64_t *scratch, uint64_t mask, int64_t key, int64_t *u,
                                     int64_t *uniq, int64_t *counts) {
    uint64_t h = sr_idmap_mix((uint64_t)key) & mask;
    for (;;) {
        int64_t *b = scratch + 2 * h;
        if (b[1] < 0) {
            b[0] = key;
            b[1] = *u;
            uniq[*u] = key;
            counts[*u] = 1;
            return (*u)++;
        }
        if (b[0] == key) {
            counts[b[1]]++;
            return b[1];
        }
        h = (h + 1) & mask;
    }
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
    for (int64_t i = 0; i < n; i++)
        if (slots[i] < 0) inverse[i] = sr_idmap_dedup(scratch, mask, ids[i], &u, uniq, counts);
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


/* One training step's map pass: sr_idmap_find_touch, and the distinct missing ids in order of
 * first appearance collected on the way: uniq[0..u) with their occurrences in ucounts, and
 * out[i] = -2 - j for each occurrence i of uniq[j] (sr_idmap_fill_missing resolves those once
 * the new ids have slots). uniq, ucounts: room for n. Returns u, or -1 when the scratch set
 * could not be allocated. */
int64_t sr_idmap_find_touch_missing(const int64_t *buckets, int64_t num_buckets,
                                    const int64_t *ids, int64_t n, int64_t *out,
                                    int64_t *last_seen, int64_t *counts, int64_t step,
                                    int64_t *uniq, int64_t *ucounts) {
    /* sr_idmap_find_touch's loop, listing the missing positions on the way (in ucounts, room
     * for n, until the dedup needs it), so the dedup below visits only them, without a
     * data-dependent branch over all n positions */
    const uint64_t bmask = (uint64_t)num_buckets - 1;
    int64_t *missing_at = ucounts; /* positions of the missing ids, then overwritten */
    int64_t missing = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i + SR_IDMAP_PREFETCH < n) {
            uint64_t ahead = sr_idmap_mix((uint64_t)ids[i + SR_IDMAP_PREFETCH]) & bmask;
            __builtin_prefetch(buckets + 2 * ahead, 0, 0);
        }
        const int64_t h = sr_idmap_probe(buckets, bmask, ids[i]);
        if (h < 0) {
            missing_at[missing++] = i;
            continue;
        }
        const int64_t slot = buckets[2 * h + 1];
        out[i] = slot;
        if (last_seen) last_seen[slot] = step;
        if (counts) counts[slot] += 1;
    }
    if (missing == 0) return 0;
    int64_t cap = 2;
    while (cap <= 2 * missing) cap <<= 1;
    /* the scratch set, and the missing positions moved out of ucounts (which dedup fills) */
    int64_t *scratch = malloc((size_t)(cap * 2 + missing) * sizeof(int64_t));
    if (!scratch) return -1;
    int64_t *at = scratch + cap * 2;
    for (int64_t r = 0; r < missing; r++) at[r] = missing_at[r];
    const uint64_t mask = (uint64_t)cap - 1;
    for (int64_t b = 0; b < cap; b++) scratch[2 * b + 1] = -1;
    int64_t u = 0;
    for (int64_t r = 0; r < missing; r++) {
        const int64_t i = at[r];
        out[i] = -2 - sr_idmap_dedup(scratch, mask, ids[i], &u, uniq, ucounts);
    }
    free(scratch);
    return u;
}

/* out[i] = slot_of[-2 - out[i]] wherever out[i] <= -2 (sr_idmap_find_touch_missing's marks;
 * slot_of -1 for an id left without a slot). Returns the number of -1 written. */
int64_t sr_idmap_fill_missing(int64_t *out, int64_t n, const int64_t *slot_of) {
    int64_t unmapped = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t v = out[i];
        if (v <= -2) {
            const int64_t s = slot_of[-2 - v];
            out[i] = s;
            unmapped += s < 0;
        }
    }
    return unmapped;
}

/* ---- eviction: the k least recently seen candidates of a window ------------------------- */

/* sr_idmap_lru_pick for any spread of ages: a pass for the range of `seen`, a counting pass
 * over it, and the output pass. */
static int64_t sr_idmap_lru_pick_spread(const uint8_t *occupied, const int64_t *seen, int64_t n,
                                        int64_t step, int64_t ttl, int64_t k, int64_t *out) {
    int64_t lo = INT64_MAX, hi = INT64_MIN, cand = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t s = seen[i];
        const int ok = occupied[i] && s < step && (ttl < 0 || step - s > ttl);
        if (!ok) continue;
        cand++;
        lo = s < lo ? s : lo;
        hi = s > hi ? s : hi;
    }
    if (cand == 0 || k <= 0) return 0;
    if ((uint64_t)(hi - lo) >= (1ULL << 24)) return -1;
    const int64_t range = hi - lo + 1;
    int64_t *offset = calloc((size_t)range + 1, sizeof(int64_t));
    if (!offset) return -1;
    for (int64_t i = 0; i < n; i++) {
        const int64_t s = seen[i];
        if (occupied[i] && s < step && (ttl < 0 || step - s > ttl)) offset[s - lo]++;
    }
    const int64_t take = k < cand ? k : cand;
    /* threshold bucket t: counts below t are < take <= counts up to t; its quota the rest */
    int64_t below = 0, t = 0;
    for (; t < range; t++) {
        const int64_t c = offset[t];
        offset[t] = below;
        if (below + c >= take) break;
        below += c;
    }
    int64_t quota = take - below; /* taken from bucket t, in position order */
    for (int64_t i = 0; i < n; i++) {
        const int64_t s = seen[i];
        if (!(occupied[i] && s < step && (ttl < 0 || step - s > ttl))) continue;
        const int64_t b = s - lo;
        if (b < t) {
            out[offset[b]++] = i;
        } else if (b == t && quota > 0) {
            out[offset[b]++] = i;
            quota--;
        }
    }
    free(offset);
    return take;
}

/* Ages step - seen[i] below this are counted in the first pass (s10-dynstream). */
#define SR_IDMAP_LRU_AGES 64

/* Candidates: window positions i with occupied[i] && seen[i] < step (and, when ttl >= 0,
 * step - seen[i] > ttl). Writes the positions of the min(k, candidates) candidates smallest
 * in (seen, position) order to out, in that order (a counting sort on `seen`: the same list
 * as sorting the key seen * n + position). Returns their number, or -1 when the candidates'
 * seen values span more than 2^24 steps (the caller then sorts).
 * Two passes when every candidate was seen in the last SR_IDMAP_LRU_AGES steps (a table whose
 * ids churn, as in the stream regime): the first pass counts the candidates per age into a
 * fixed histogram (four copies, so consecutive equal ages do not wait on one counter), the
 * second writes them out; else the three passes of sr_idmap_lru_pick_spread. */
int64_t sr_idmap_lru_pick(const uint8_t *occupied, const int64_t *seen, int64_t n, int64_t step,
                          int64_t ttl, int64_t k, int64_t *out) {
    enum { AGES = SR_IDMAP_LRU_AGES };
    int64_t hist[4][AGES] = {{0}};
    int64_t cand = 0, far = 0;
    const uint64_t min_age = ttl < 0 ? 1 : (uint64_t)ttl + 1;
    for (int64_t i = 0; i < n; i++) {
        const int64_t s = seen[i];
        const uint64_t age = (uint64_t)step - (uint64_t)s; /* > 0 whenever s < step */
        const int ok = occupied[i] && s < step && age >= min_age;
        const int near = age < AGES;
        cand += ok;
        far += ok & !near;
        hist[i & 3][ok & near ? age : 0]++; /* age 0 collects the non-candidates */
    }
    if (cand == 0 || k <= 0) return 0;
    if (far) return sr_idmap_lru_pick_spread(occupied, seen, n, step, ttl, k, out);
    const int64_t take = k < cand ? k : cand;
    /* oldest first: ages above the threshold age t are all taken; t gives its first quota */
    int64_t offset[AGES];
    int64_t below = 0, t = AGES - 1;
    for (; t >= 1; t--) {
        const int64_t c = hist[0][t] + hist[1][t] + hist[2][t] + hist[3][t];
        offset[t] = below;
        if (below + c >= take) break;
        below += c;
    }
    int64_t quota = take - below;
    for (int64_t i = 0; i < n; i++) {
        const int64_t s = seen[i];
        const uint64_t age = (uint64_t)step - (uint64_t)s;
        if (!(occupied[i] && s < step && age >= min_age)) continue;
        if ((int64_t)age > t) {
            out[offset[age]++] = i;
        } else if ((int64_t)age == t && quota > 0) {
            out[offset[age]++] = i;
            quota--;
        }
    }
    return take;
}

/* ---- lazy-free reset rows: the counter-based initializer -------------------------------- */

#ifdef SR_IDMAP_AVX512
static inline __m512i sr_idmap_mix8(__m512i x) {
    x = _mm512_xor_si512(x, _mm512_srli_epi64(x, 33));
    x = _mm512_mullo_epi64(x, _mm512_set1_epi64((long long)0xff51afd7ed558ccdULL));
    x = _mm512_xor_si512(x, _mm512_srli_epi64(x, 33));
    x = _mm512_mullo_epi64(x, _mm512_set1_epi64((long long)0xc4ceb9fe1a85ec53ULL));
    return _mm512_xor_si512(x, _mm512_srli_epi64(x, 33));
}

/* One reset row of sr_idmap_init_rows (dim a multiple of 16, the row 64-byte aligned) in
 * AVX-512 (s10-dynstream): eight column pairs' hashes a vector, their two 24-bit halves
 * converted (exactly: below 2^24) and interleaved into one line of 16 floats, scaled by 2^-24
 * (exact), then span * u and lo + that as two rounded operations (no FMA), as the scalar
 * loop; each line streamed to memory whole. The same floats as the scalar loop. */
static inline void sr_idmap_init_row_avx512(float *row, int64_t dim, uint64_t key, float lo,
                                            float span) {
    const uint64_t g2 = 0xD1B54A32D192ED03ULL;
    const __m512i lanes = _mm512_set_epi64(8, 7, 6, 5, 4, 3, 2, 1);
    const __m512i step = _mm512_set1_epi64((long long)(8 * g2));
    const __m512i mask24 = _mm512_set1_epi64(0xFFFFFF);
    const __m512i interleave =
        _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512 scale = _mm512_set1_ps(0x1p-24f), vspan = _mm512_set1_ps(span),
                 vlo = _mm512_set1_ps(lo);
    /* key + (p + 1) * g2 for the pairs p of the first line */
    __m512i arg = _mm512_add_epi64(_mm512_set1_epi64((long long)key),
                                   _mm512_mullo_epi64(lanes, _mm512_set1_epi64((long long)g2)));
    for (int64_t c = 0; c < dim; c += 16) {
        const __m512i h = sr_idmap_mix8(arg);
        arg = _mm512_add_epi64(arg, step);
        const __m256 high = _mm512_cvtepu64_ps(_mm512_srli_epi64(h, 40));
        const __m256 low = _mm512_cvtepu64_ps(_mm512_and_si512(_mm512_srli_epi64(h, 8), mask24));
        const __m512 u = _mm512_permutex2var_ps(_mm512_castps256_ps512(high), interleave,
                                                _mm512_castps256_ps512(low));
        const __m512 v = _mm512_add_ps(vlo, _mm512_mul_ps(vspan, _mm512_mul_ps(u, scale)));
        _mm512_stream_ps(row + c, v);
    }
}
#endif


/* Row slots[r] + row_offset of w (row stride `stride` floats) becomes the table's uniform
 * initializer drawn by a counter-based generator (docs/dynamic.md, "Reset rows"):
 *   key_r = mix(seed ^ mix(slot + generation * G1))
 *   h_p   = mix(key_r + (p + 1) * G2)              for column pairs p = 0, 1, ...
 *   u_2p  = (h_p >> 40) * 2^-24,  u_2p+1 = ((h_p >> 8) & (2^24 - 1)) * 2^-24
 *   w[row][j] = lo + span * u_j                   (float32, two rounded operations)
 * The torch twin (`dynamic/reset.py`) computes the same floats. Rows are independent: the
 * loop runs on `threads` OpenMP threads only past 4M floats: below that one thread writes
 * faster than a team starts (and a loaded machine makes a team spin). */
int64_t sr_idmap_init_rows(float *w, int64_t stride, int64_t dim, const int64_t *slots, int64_t k,
                        int64_t row_offset, int64_t seed, int64_t generation, float lo,
                        float span, int64_t threads) {
    const uint64_t g1 = 0x9E3779B97F4A7C15ULL, g2 = 0xD1B54A32D192ED03ULL;

#pragma omp parallel num_threads(threads) if (k * dim > (1 << 22))
    {
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < k; r++) {
        const uint64_t slot = (uint64_t)slots[r];
        const uint64_t key =
            sr_idmap_mix((uint64_t)seed ^ sr_idmap_mix(slot + (uint64_t)generation * g1));
        float *row = w + (slot + (uint64_t)row_offset) * (uint64_t)stride;
        const int64_t full = dim / 2; /* whole pairs */
#ifdef SR_IDMAP_AVX512
        if ((dim & 15) == 0 && ((uintptr_t)row & 63) == 0) {
            sr_idmap_init_row_avx512(row, dim, key, lo, span);
            continue;
        }
#endif
#ifdef SR_IDMAP_STREAM
        /* Whole rows of 16-byte-aligned floats: drawn into a buffer (a branch-free loop the
         * compiler vectorizes) and streamed to memory, skipping the read of lines about to be
         * overwritten whole (a freed row is cold: the read would be a DRAM miss). */
        if ((dim & 3) == 0 && ((uintptr_t)row & 15) == 0) {
            float buf[128];
            for (int64_t c = 0; c < full; c += 64) {
                const int64_t np = full - c < 64 ? full - c : 64;
                for (int64_t p = 0; p < np; p++) {
                    const uint64_t h = sr_idmap_mix(key + (uint64_t)(c + p + 1) * g2);
                    buf[2 * p] = lo + span * ((float)(h >> 40) * 0x1p-24f);
                    buf[2 * p + 1] = lo + span * ((float)((h >> 8) & 0xFFFFFFULL) * 0x1p-24f);
                }
                for (int64_t q = 0; q < 2 * np; q += 4)
                    _mm_stream_ps(row + 2 * c + q, _mm_loadu_ps(buf + q));
            }
            continue;
        }
#endif
        for (int64_t p = 0; p < full; p++) {
            const uint64_t h = sr_idmap_mix(key + (uint64_t)(p + 1) * g2);
            row[2 * p] = lo + span * ((float)(h >> 40) * 0x1p-24f);
            row[2 * p + 1] = lo + span * ((float)((h >> 8) & 0xFFFFFFULL) * 0x1p-24f);
        }
        if (dim & 1) {
            const uint64_t h = sr_idmap_mix(key + (uint64_t)(full + 1) * g2);
            row[dim - 1] = lo + span * ((float)(h >> 40) * 0x1p-24f);
        }
    }
#ifdef SR_IDMAP_STREAM
    _mm_sfence(); /* each thread's streamed rows are visible before the caller reads them */
#endif
    }
    return k;
}

/* ---- sorted managed-collision slots: the order after a round ---------------------------- */

/* keys[0..z) is sorted except at the e slots that took new keys: those are fresh[0..e), listed
 * in ascending order of their new keys, and flagged in is_fresh. Writes order[p] = the slot
 * that goes to place p, the permutation a stable argsort of keys gives (kept keys never equal a
 * new key), and position[rows[order[p]] - row_offset] = p (the new place of each row). */
int64_t sr_idmap_merge_order(const int64_t *keys, int64_t z, const int64_t *fresh, int64_t e,
                             const uint8_t *is_fresh, const int64_t *rows, int64_t row_offset,
                             int64_t *order, int64_t *position) {
    int64_t i = 0, j = 0;
    for (int64_t p = 0; p < z; p++) {
        while (i < z && is_fresh[i]) i++;
        int64_t src;
        if (j < e && (i >= z || keys[fresh[j]] < keys[i])) {
            src = fresh[j++];
        } else {
            src = i++;
        }
        order[p] = src;
        position[rows[src] - row_offset] = p;
    }
    return z;
}

/* buf[p] = buf[order[p]] for p in [0, z), through tmp (z int64s). */
int64_t sr_idmap_permute(int64_t *buf, const int64_t *order, int64_t z, int64_t *tmp) {
    for (int64_t p = 0; p < z; p++) tmp[p] = buf[order[p]];
    for (int64_t p = 0; p < z; p++) buf[p] = tmp[p];
    return z;
}

static float sr_idmap_quickselect_f32(float *tmp, int64_t n, int64_t want) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        /* median of three as the pivot */
        const int64_t mid = lo + (hi - lo) / 2;
        float a = tmp[lo], b = tmp[mid], c = tmp[hi];
        float pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (tmp[i] < pivot) i++;
            while (tmp[j] > pivot) j--;
            if (i <= j) {
                const float t = tmp[i];
                tmp[i] = tmp[j];
                tmp[j] = t;
                i++;
                j--;
            }
        }
        if (want <= j) {
            hi = j;
        } else if (want >= i) {
            lo = i;
        } else {
            return tmp[want];
        }
    }
    return tmp[want];
}

static int sr_idmap_cmp_f32(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The k-th smallest (k >= 1) of the n floats x (no NaN); tmp: room for n floats. A sorted
 * sample of 1024 brackets the answer between two of its values; one branch-free pass counts
 * the values below the bracket and copies those inside it to tmp, where a quickselect finds
 * the answer (a quickselect over all of x when the bracket misses). */
float sr_idmap_kth_f32(const float *x, int64_t n, int64_t k, float *tmp) {
    enum { SAMPLE = 1024, MARGIN = 48 };
    if (n > 8 * SAMPLE) {
        float sample[SAMPLE];
        for (int64_t s = 0; s < SAMPLE; s++) sample[s] = x[(s * n) / SAMPLE];
        qsort(sample, SAMPLE, sizeof(float), sr_idmap_cmp_f32);
        const int64_t at = (k * SAMPLE) / n;
        const float low = sample[at - MARGIN < 0 ? 0 : at - MARGIN];
        const float high = sample[at + MARGIN >= SAMPLE ? SAMPLE - 1 : at + MARGIN];
        int64_t below = 0, inside = 0;
        for (int64_t i = 0; i < n; i++) {
            const float v = x[i];
            below += v < low;
            tmp[inside] = v;
            inside += (v >= low) & (v <= high);
        }
        if (below < k && k <= below + inside)
            return sr_idmap_quickselect_f32(tmp, inside, k - 1 - below);
    }
    for (int64_t i = 0; i < n; i++) tmp[i] = x[i];
    return sr_idmap_quickselect_f32(tmp, n, k - 1);
}

/* ---- a step's freed and admitted slots, map and metadata in one pass each ---------------- */

static inline void sr_idmap_prefetch_meta(int64_t s, const int64_t *slot_ids,
                                          const uint8_t *occupied, const int64_t *last_seen,
                                          const int64_t *counts, const uint8_t *stamps) {
    if (stamps) __builtin_prefetch(stamps + s, 1, 0);
    __builtin_prefetch(slot_ids + s, 1, 0);
    __builtin_prefetch(occupied + s, 1, 0);
    __builtin_prefetch(last_seen + s, 1, 0);
    __builtin_prefetch(counts + s, 1, 0);
}

/* stamps (every writer below; NULL when the table keeps none): the slot's byte of
 * sr_idmap_find_stamp_pending becomes 0, so a later sr_idmap_stamps_sync leaves the last_seen
 * written here alone (s12-dynres). */

/* For each of slots[0..k), in one pass: its id leaves the map (as sr_idmap_erase) and its
 * slot_ids, occupied, last_seen and counts become 0. The slot's metadata lines and then its
 * id's bucket are fetched ahead (two dependent misses per slot, overlapped across slots).
 * Returns the number of ids removed. */
int64_t sr_idmap_free_slots(int64_t *buckets, int64_t num_buckets, const int64_t *slots,
                            int64_t k, int64_t *slot_ids, uint8_t *occupied, int64_t *last_seen,
                            int64_t *counts, uint8_t *stamps) {
    const uint64_t mask = (uint64_t)num_buckets - 1;
    int64_t removed = 0;
    for (int64_t i = 0; i < k; i++) {
        if (i + 2 * SR_IDMAP_PREFETCH < k)
            sr_idmap_prefetch_meta(slots[i + 2 * SR_IDMAP_PREFETCH], slot_ids, occupied,
                                   last_seen, counts, stamps);
        if (i + SR_IDMAP_PREFETCH < k) {
            const uint64_t id = (uint64_t)slot_ids[slots[i + SR_IDMAP_PREFETCH]];
            __builtin_prefetch(buckets + 2 * (sr_idmap_mix(id) & mask), 1, 0);
        }
        const int64_t s = slots[i];
        const int64_t id = slot_ids[s];
        slot_ids[s] = 0;
        occupied[s] = 0;
        last_seen[s] = 0;
        counts[s] = 0;
        if (stamps) stamps[s] = 0;
        removed += sr_idmap_erase_one(buckets, mask, id);
    }
    return removed;
}

/* In one pass: ids[i] -> slots[i] enters the map (as sr_idmap_insert: ids absent and
 * distinct) and the slot's slot_ids, occupied, last_seen and counts become ids[i], 1, step
 * and occurrences[i]. Returns k, or -(i + 1) as sr_idmap_insert. */
int64_t sr_idmap_admit_slots(int64_t *buckets, int64_t num_buckets, const int64_t *ids,
                             const int64_t *slots, const int64_t *occurrences, int64_t k,
                             int64_t step, int64_t *slot_ids, uint8_t *occupied,
                             int64_t *last_seen, int64_t *counts, uint8_t *stamps) {
    const uint64_t mask = (uint64_t)num_buckets - 1;
    for (int64_t i = 0; i < k; i++) {
        if (i + SR_IDMAP_PREFETCH < k) {
            sr_idmap_prefetch_meta(slots[i + SR_IDMAP_PREFETCH], slot_ids, occupied, last_seen,
                                   counts, stamps);
            const uint64_t ahead = sr_idmap_mix((uint64_t)ids[i + SR_IDMAP_PREFETCH]) & mask;
            __builtin_prefetch(buckets + 2 * ahead, 1, 0);
        }
        if (!sr_idmap_put(buckets, mask, ids[i], slots[i])) return -(i + 1);
        const int64_t s = slots[i];
        slot_ids[s] = ids[i];
        occupied[s] = 1;
        last_seen[s] = step;
        counts[s] = occurrences[i];
        if (stamps) stamps[s] = 0;
    }
    return k;
}

/* A full table's eviction and admission: each victim slot slots[i] (occupied) loses its id from
 * the map (as sr_idmap_erase) and takes ids[i] (absent, distinct; as sr_idmap_put), its
 * slot_ids, occupied, last_seen and counts becoming ids[i], 1, step and occurrences[i]: the
 * state of sr_idmap_free_slots followed by sr_idmap_admit_slots on the same slots, without
 * zeroing the metadata first or fetching its lines twice. Two loops (all erasures, then all
 * insertions), each with one bucket fetched ahead per slot: interleaving an erasure and an
 * insertion per slot measured ~50% slower (docs/bench/dynamic.md, s9-dynstream). Returns k,
 * or -(i + 1) when ids[i] could not be inserted (present already, or no bucket free). */
int64_t sr_idmap_replace_slots(int64_t *buckets, int64_t num_buckets, const int64_t *slots,
                               const int64_t *ids, const int64_t *occurrences, int64_t k,
                               int64_t step, int64_t *slot_ids, uint8_t *occupied,
                               int64_t *last_seen, int64_t *counts, uint8_t *stamps) {
    const uint64_t mask = (uint64_t)num_buckets - 1;
    for (int64_t i = 0; i < k; i++) {
        /* the victim's slot_ids entry two distances ahead, then its old id's bucket */
        if (i + 2 * SR_IDMAP_PREFETCH < k)
            __builtin_prefetch(slot_ids + slots[i + 2 * SR_IDMAP_PREFETCH], 0, 3);
        if (i + SR_IDMAP_PREFETCH < k) {
            const uint64_t old = (uint64_t)slot_ids[slots[i + SR_IDMAP_PREFETCH]];
            __builtin_prefetch(buckets + 2 * (sr_idmap_mix(old) & mask), 1, 0);
        }
        sr_idmap_erase_one(buckets, mask, slot_ids[slots[i]]);
    }
    for (int64_t i = 0; i < k; i++) {
        if (i + SR_IDMAP_PREFETCH < k) {
            const uint64_t fresh = (uint64_t)ids[i + SR_IDMAP_PREFETCH];
            __builtin_prefetch(buckets + 2 * (sr_idmap_mix(fresh) & mask), 1, 0);
        }
        const int64_t s = slots[i];
        if (!sr_idmap_put(buckets, mask, ids[i], s)) return -(i + 1);
        slot_ids[s] = ids[i];
        occupied[s] = 1;
        last_seen[s] = step;
        counts[s] = occurrences[i];
        if (stamps) stamps[s] = 0;
    }
    return k;
}

/* Of the n scores (no NaN), the n - pivot dropped are those below `threshold` (the
 * (n - pivot)-th smallest) and, of those equal to it, the last ones by index. Writes the
 * dropped indices below pivot to losers and the kept indices from pivot on, minus pivot, to
 * winners, each ascending; out_counts = {losers, winners}. Each list is written one entry
 * past its count: room for min(pivot, n - pivot) + 1 losers and n - pivot + 1 winners. */
int64_t sr_idmap_split_f32(const float *scores, int64_t n, int64_t pivot, float threshold,
                           int64_t *losers, int64_t *winners, int64_t *out_counts) {
    int64_t below = 0, equal = 0;
    for (int64_t i = 0; i < n; i++) {
        below += scores[i] < threshold;
        equal += scores[i] == threshold;
    }
    int64_t keep_equal = equal - ((n - pivot) - below); /* the first ties stay */
    int64_t nl = 0, nw = 0;
    for (int64_t i = 0; i < n; i++) {
        const float v = scores[i];
        int dropped = v < threshold;
        if (v == threshold) {
            dropped = keep_equal <= 0;
            keep_equal--;
        }
        if (i < pivot) {
            losers[nl] = i;
            nl += dropped;
        } else {
            winners[nw] = i - pivot;
            nw += !dropped;
        }
    }
    out_counts[0] = nl;
    out_counts[1] = nw;
    return nl;
}

/* ---- s10-dynstream: a freed slot's optimizer state, zeroed in one prefetched pass --------- */

/* Rows rows[r] + row_offset of s (row stride `stride` floats, the first `width` floats of
 * each) become value: the optimizer-state reset of freed slots (rowwise state: width 1, one
 * float a row). Prefetched ahead: the rows are random lines of an array of MiBs. Returns k. */
int64_t sr_idmap_fill_rows(float *s, int64_t stride, int64_t width, const int64_t *rows,
                           int64_t k, int64_t row_offset, float value) {
    for (int64_t r = 0; r < k; r++) {
        if (r + SR_IDMAP_PREFETCH < k)
            __builtin_prefetch(s + (rows[r + SR_IDMAP_PREFETCH] + row_offset) * stride, 1, 0);
        float *row = s + (rows[r] + row_offset) * stride;
        for (int64_t j = 0; j < width; j++) row[j] = value;
    }
    return k;
}

/* ---- s10-dynstream: a step's missing ids entered as pending in its find pass ------------- */

/* sr_idmap_find_touch_missing without the scratch set: a missing id is entered into the map
 * itself at the empty bucket that ended its probe (the line is in cache), as a pending entry
 * of slot SR_IDMAP_PENDING + j for uniq[j]; a later occurrence in the batch finds it and
 * counts once more. So the distinct missing ids and their occurrences come out of the one
 * pass, the same uniq / ucounts / marks as sr_idmap_find_touch_missing. The caller
 * guarantees room (ids held + n < num_buckets) and resolves every pending entry before the
 * map is used otherwise. Returns u. */
/* s11-dynres: the find pass's prefetch distance (a power of two: the ring of home buckets).
 * 32 ids ahead keeps about 18 bucket lines in flight in the resident regime (57% of a
 * Zipf(1.05) batch's ids are distinct), where 16 left the probe waiting on its first bucket:
 * the pass alone, caches flushed, 8 tables x 40,960 ids, 3.97 -> 3.33 ms without the touch,
 * 4.60 -> 4.34 with it (95% full); 4.08 -> 3.76 at 50% (docs/bench/dynamic.md). The
 * buckets are prefetched into L2 (prefetcht2: read, low locality) instead of for writing into
 * L1 (prefetchw): the L1's few miss buffers stay free for the touch's stores, whose lines
 * cannot be prefetched (the slot is known only at the probe): 4.27 -> 3.81 ms (95%), 3.35 ->
 * 2.99 ms (50%). A pending entry written into a prefetched line finds it in L2. */
#define SR_IDMAP_FIND_AHEAD 32

/* The pass itself, for sr_idmap_find_touch_pending (the touch into last_seen, int64 per slot)
 * and sr_idmap_find_stamp_pending (s12-dynres: the touch into a byte per slot); inlined into
 * each with the other array NULL, so each loop carries only its own touch. */
static inline int64_t sr_idmap_find_pending_pass(int64_t *buckets, int64_t num_buckets,
                                                 const int64_t *ids, int64_t n, int64_t *out,
                                                 int64_t *last_seen, uint8_t *stamps,
                                                 uint8_t stamp, int64_t *counts, int64_t step,
                                                 int64_t *uniq, int64_t *ucounts) {
    const uint64_t mask = (uint64_t)num_buckets - 1;
    int64_t u = 0;
    uint64_t ring[SR_IDMAP_FIND_AHEAD]; /* home buckets of ids[i .. i + FIND_AHEAD), hashed once */
    for (int64_t j = 0; j < SR_IDMAP_FIND_AHEAD && j < n; j++) {
        ring[j] = sr_idmap_mix((uint64_t)ids[j]) & mask;
        __builtin_prefetch(buckets + 2 * ring[j], 0, 1);
    }
    for (int64_t i = 0; i < n; i++) {
        uint64_t h = ring[i & (SR_IDMAP_FIND_AHEAD - 1)];
        if (i + SR_IDMAP_FIND_AHEAD < n) {
            const uint64_t ahead = sr_idmap_mix((uint64_t)ids[i + SR_IDMAP_FIND_AHEAD]) & mask;
            ring[i & (SR_IDMAP_FIND_AHEAD - 1)] = ahead;
            __builtin_prefetch(buckets + 2 * ahead, 0, 1);
        }
        const int64_t key = ids[i];
        int64_t *b = buckets + 2 * h;
        while (b[1] >= 0 && b[0] != key) {
            h = (h + 1) & mask;
            b = buckets + 2 * h;
        }
        if (b[1] < 0) { /* missing: enter it, pending */
            b[0] = key;
            b[1] = SR_IDMAP_PENDING + u;
            uniq[u] = key;
            ucounts[u] = 1;
            out[i] = -2 - u;
            u++;
            continue;
        }
        const int64_t slot = b[1];
        if (slot >= SR_IDMAP_PENDING) { /* missing, met before in this batch */
            ucounts[slot - SR_IDMAP_PENDING]++;
            out[i] = -2 - (slot - SR_IDMAP_PENDING);
            continue;
        }
        out[i] = slot;
        if (last_seen) last_seen[slot] = step;
        if (stamps) stamps[slot] = stamp;
        if (counts) counts[slot] += 1;
    }
    return u;
}

int64_t sr_idmap_find_touch_pending(int64_t *buckets, int64_t num_buckets, const int64_t *ids,
                                    int64_t n, int64_t *out, int64_t *last_seen,
                                    int64_t *counts, int64_t step, int64_t *uniq,
                                    int64_t *ucounts) {
    return sr_idmap_find_pending_pass(buckets, num_buckets, ids, n, out, last_seen, NULL, 0,
                                      counts, step, uniq, ucounts);
}

/* ---- s12-dynres: the LRU touch into a byte per slot ---------------------------------------- */

/* sr_idmap_find_touch_pending with the touch written as stamps[slot] = stamp (1..255: the step
 * less a base the caller keeps, `dynamic/stamps.py`) instead of last_seen[slot] = step: a
 * byte per slot is 1/8 of last_seen's lines (a 100k table: 1,563 lines instead of 12,500,
 * of which a resident step touched ~10,400), few enough to stay in L2 through the pass. The
 * caller folds the stamps into last_seen (sr_idmap_stamps_sync) before anything reads it.
 * Returns u, as sr_idmap_find_touch_pending. */
int64_t sr_idmap_find_stamp_pending(int64_t *buckets, int64_t num_buckets, const int64_t *ids,
                                    int64_t n, int64_t *out, uint8_t *stamps, int64_t stamp,
                                    int64_t *counts, int64_t *uniq, int64_t *ucounts) {
    return sr_idmap_find_pending_pass(buckets, num_buckets, ids, n, out, NULL, stamps,
                                      (uint8_t)stamp, counts, 0, uniq, ucounts);
}

/* For each of the n slots with stamps[i] != 0: last_seen[i] = base + stamps[i], and the stamp
 * becomes 0. Eight stamps are tested at a time (most words of a resident table's stamps are
 * set, a stream table's few). Returns the number of slots written. */
int64_t sr_idmap_stamps_sync(uint8_t *stamps, int64_t n, int64_t *last_seen, int64_t base) {
    int64_t written = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t word;
        __builtin_memcpy(&word, stamps + i, 8);
        if (!word) continue;
        for (int64_t j = i; j < i + 8; j++) {
            const uint8_t s = stamps[j];
            if (s) {
                last_seen[j] = base + s;
                written++;
            }
        }
        __builtin_memset(stamps + i, 0, 8);
    }
    for (; i < n; i++) {
        const uint8_t s = stamps[i];
        if (s) {
            last_seen[i] = base + s;
            stamps[i] = 0;
            written++;
        }
    }
    return written;
}

/* Removes the pending entries of ids (an id whose entry has a real slot, or none, is left
 * alone): the ids a step did not admit, or every one after a failed step. Returns the number
 * removed. */
int64_t sr_idmap_drop_pending(int64_t *buckets, int64_t num_buckets, const int64_t *ids,
                              int64_t n) {
    const uint64_t mask = (uint64_t)num_buckets - 1;
    int64_t removed = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t h = sr_idmap_probe(buckets, mask, ids[i]);
        if (h >= 0 && buckets[2 * h + 1] >= SR_IDMAP_PENDING)
            removed += sr_idmap_erase_one(buckets, mask, ids[i]);
    }
    return removed;
}
