/* Native passes of an MCH eviction round (mc/round_native.py wraps them).
 *
 * Every function answers exactly what its torch counterpart answers:
 *   sr_mc_coalesce      torch.unique(window, return_inverse, return_counts) + the max of
 *                       each id's window metadata (scatter_reduce amax), by one MSD radix
 *                       pass into small buckets (insertion-sorted; large ones by the LSD
 *                       radix sort);
 *   sr_mc_order_by_count  torch.argsort(counts, descending=True, stable=True), by a counting
 *                       sort (counts are window counts: 0 <= count <= window size);
 *   sr_mc_argsort_i64 / sr_mc_argsort_f32
 *                       idx[torch.argsort(values[idx], descending, stable=True)], by a stable
 *                       radix sort of order-preserving unsigned keys (-0.0 read as 0.0, as a
 *                       comparison sort sees it; no NaN).
 * Return values: 0 on success, -1 when a scratch allocation failed (the caller then uses torch).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIGITS 8

/* Stable ascending LSD radix sort of keys with a payload; one pass counts every digit, then
 * only the digits where the keys differ are passed over (wider digits for more keys: fewer
 * passes). Results end in keys/payload. */
static int radix_sort(uint64_t *keys, int64_t *payload, int64_t n) {
    if (n <= 1) return 0;
    const int RADIX_BITS = n > 20000 ? 14 : (n > 2000 ? 11 : 8);
    const int RADIX_SIZE = 1 << RADIX_BITS;
    const int RADIX_DIGITS = (64 + RADIX_BITS - 1) / RADIX_BITS;
    uint64_t differ = 0;
    for (int64_t i = 1; i < n; i++) differ |= keys[i] ^ keys[0];
    if (differ == 0) return 0;
    uint64_t *k2 = (uint64_t *)malloc((size_t)n * sizeof(uint64_t));
    int64_t *p2 = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    int64_t *count = (int64_t *)calloc((size_t)RADIX_DIGITS * RADIX_SIZE, sizeof(int64_t));
    if (!k2 || !p2 || !count) {
        free(k2);
        free(p2);
        free(count);
        return -1;
    }
    int digits[MAX_DIGITS];
    int nd = 0;
    for (int d = 0; d < RADIX_DIGITS; d++) {
        uint64_t digit_mask = ((uint64_t)(RADIX_SIZE - 1)) << (d * RADIX_BITS);
        if (differ & digit_mask) digits[nd++] = d;
    }
    for (int64_t i = 0; i < n; i++) {
        uint64_t k = keys[i];
        for (int t = 0; t < nd; t++) {
            int d = digits[t];
            count[d * RADIX_SIZE + ((k >> (d * RADIX_BITS)) & (RADIX_SIZE - 1))]++;
        }
    }
    uint64_t *ka = keys, *kb = k2;
    int64_t *pa = payload, *pb = p2;
    for (int t = 0; t < nd; t++) {
        int shift = digits[t] * RADIX_BITS;
        int64_t *c = count + digits[t] * RADIX_SIZE;
        int64_t sum = 0;
        for (int d = 0; d < RADIX_SIZE; d++) {
            int64_t v = c[d];
            c[d] = sum;
            sum += v;
        }
        for (int64_t i = 0; i < n; i++) {
            int64_t at = c[(ka[i] >> shift) & (RADIX_SIZE - 1)]++;
            kb[at] = ka[i];
            pb[at] = pa[i];
        }
        uint64_t *kt = ka;
        ka = kb;
        kb = kt;
        int64_t *pt = pa;
        pa = pb;
        pb = pt;
    }
    if (ka != keys) {
        memcpy(keys, ka, (size_t)n * sizeof(uint64_t));
        memcpy(payload, pa, (size_t)n * sizeof(int64_t));
    }
    free(k2);
    free(p2);
    free(count);
    return 0;
}

/* Sort keys ascending with their payload (not stable; callers group equal keys only): one
 * most-significant-digit pass over the highest differing bits into about n / 4 buckets, then
 * each bucket by insertion (small) or by the LSD radix sort (large). */
static int msd_sort(uint64_t *keys, int64_t *payload, int64_t n) {
    if (n <= 1) return 0;
    uint64_t differ = 0;
    for (int64_t i = 1; i < n; i++) differ |= keys[i] ^ keys[0];
    if (differ == 0) return 0;
    int hi = 63 - __builtin_clzll(differ);
    int bits = 8;
    while (bits < 16 && ((int64_t)1 << (bits + 2)) < n) bits++;
    if (bits > hi + 1) bits = hi + 1;
    int shift = hi + 1 - bits;
    int64_t nb = (int64_t)1 << bits;
    uint64_t bmask = (uint64_t)(nb - 1);
    int64_t *start = (int64_t *)calloc((size_t)nb + 1, sizeof(int64_t));
    uint64_t *k2 = (uint64_t *)malloc((size_t)n * sizeof(uint64_t));
    int64_t *p2 = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    if (!start || !k2 || !p2) {
        free(start);
        free(k2);
        free(p2);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) start[((keys[i] >> shift) & bmask) + 1]++;
    for (int64_t b = 0; b < nb; b++) start[b + 1] += start[b];
    for (int64_t i = 0; i < n; i++) {
        int64_t at = start[(keys[i] >> shift) & bmask]++;
        k2[at] = keys[i];
        p2[at] = payload[i];
    }
    /* start[b] is now the end of bucket b (the start of b + 1) */
    int rc = 0;
    int64_t lo = 0;
    for (int64_t b = 0; b < nb && rc == 0; b++) {
        int64_t end = start[b], m = end - lo;
        if (m > 32) {
            rc = radix_sort(k2 + lo, p2 + lo, m);
        } else {
            for (int64_t i = lo + 1; i < end; i++) {
                uint64_t k = k2[i];
                int64_t p = p2[i], j = i - 1;
                while (j >= lo && k2[j] > k) {
                    k2[j + 1] = k2[j];
                    p2[j + 1] = p2[j];
                    j--;
                }
                k2[j + 1] = k;
                p2[j + 1] = p;
            }
        }
        lo = end;
    }
    if (rc == 0) {
        memcpy(keys, k2, (size_t)n * sizeof(uint64_t));
        memcpy(payload, p2, (size_t)n * sizeof(int64_t));
    }
    free(start);
    free(k2);
    free(p2);
    return rc;
}

static inline uint64_t key_i64(int64_t v) { return (uint64_t)v ^ 0x8000000000000000ULL; }

static inline uint64_t key_f32(float f) {
    if (f == 0.0f) f = 0.0f; /* -0.0 and 0.0 compare equal */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (uint64_t)u;
}

/* window (n ids) -> distinct ids ascending (uniq), their counts, and (when meta is not NULL)
 * the max of meta over each id's entries (meta_max); when inverse is not NULL, inverse[i] is
 * the index in uniq of window[i] (torch.unique's return_inverse). *n_uniq receives the number
 * of ids. */
int sr_mc_coalesce(const int64_t *window, const int64_t *meta, int64_t n, int64_t *uniq,
                   int64_t *counts, int64_t *meta_max, int64_t *inverse, int64_t *n_uniq) {
    *n_uniq = 0;
    if (n == 0) return 0;
    uint64_t *keys = (uint64_t *)malloc((size_t)n * sizeof(uint64_t));
    int64_t *payload = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    if (!keys || !payload) {
        free(keys);
        free(payload);
        return -1;
    }
    /* the payload is each entry's place in the window (meta is read through it) */
    for (int64_t i = 0; i < n; i++) {
        keys[i] = key_i64(window[i]);
        payload[i] = i;
    }
    if (msd_sort(keys, payload, n) != 0) {
        free(keys);
        free(payload);
        return -1;
    }
    int64_t u = -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t at = payload[i];
        if (i == 0 || keys[i] != keys[i - 1]) {
            u++;
            uniq[u] = (int64_t)(keys[i] ^ 0x8000000000000000ULL);
            counts[u] = 1;
            if (meta) meta_max[u] = meta[at];
        } else {
            counts[u]++;
            if (meta && meta[at] > meta_max[u]) meta_max[u] = meta[at];
        }
        if (inverse) inverse[at] = u;
    }
    *n_uniq = u + 1;
    free(keys);
    free(payload);
    return 0;
}

/* order = torch.argsort(counts, descending=True, stable=True) for 0 <= counts[i] <= max_count. */
int sr_mc_order_by_count(const int64_t *counts, int64_t n, int64_t max_count, int64_t *order) {
    int64_t *start = (int64_t *)calloc((size_t)(max_count + 2), sizeof(int64_t));
    if (!start) return -1;
    for (int64_t i = 0; i < n; i++) start[max_count - counts[i] + 1]++;
    for (int64_t d = 1; d <= max_count + 1; d++) start[d] += start[d - 1];
    for (int64_t i = 0; i < n; i++) order[start[max_count - counts[i]]++] = i;
    free(start);
    return 0;
}

static int argsort_keys(uint64_t *keys, const int64_t *idx, int64_t n, int descending,
                        int64_t *out) {
    for (int64_t i = 0; i < n; i++) {
        if (descending) keys[i] = ~keys[i];
        out[i] = idx[i];
    }
    return radix_sort(keys, out, n);
}

/* out = idx[argsort(values[idx], descending, stable=True)] for int64 values. */
int sr_mc_argsort_i64(const int64_t *values, const int64_t *idx, int64_t n, int descending,
                      int64_t *out) {
    uint64_t *keys = (uint64_t *)malloc((size_t)(n > 0 ? n : 1) * sizeof(uint64_t));
    if (!keys) return -1;
    for (int64_t i = 0; i < n; i++) keys[i] = key_i64(values[idx[i]]);
    int rc = argsort_keys(keys, idx, n, descending, out);
    free(keys);
    return rc;
}

/* out = idx[argsort(values[idx], descending, stable=True)] for float32 values (no NaN). */
int sr_mc_argsort_f32(const float *values, const int64_t *idx, int64_t n, int descending,
                      int64_t *out) {
    uint64_t *keys = (uint64_t *)malloc((size_t)(n > 0 ? n : 1) * sizeof(uint64_t));
    if (!keys) return -1;
    for (int64_t i = 0; i < n; i++) keys[i] = key_f32(values[idx[i]]);
    int rc = argsort_keys(keys, idx, n, descending, out); /* ~key: high bits equal, harmless */
    free(keys);
    return rc;
}

/* The base policy's metadata update and the built-in scores of one round, for decay 1
 * (torch.pow(x, 1.0) is x as float32):
 *   held window ids (held[i] != 0, in order, at slots[h]) add their count to counts[slot] and
 *   set last[slot] (window metadata win_last[order[i]]); the reserved slot Z-1 gets counts
 *   INT64_MAX and last cur; the others' counts / last go to new_counts / new_last, in order;
 *   scores over [slots 0..Z-1 | new ids]: kind 0 LFU counts (int64, scores_i), kind 1 LRU
 *   -(float)(cur - last + 1), kind 2 DistanceLFU (float)counts / (float)(cur - last + 1)
 *   (float32, scores_f). counts / last / win_last are NULL when the policy lacks them.
 *   *nan_seen (when not NULL and new ids exist) says whether a score is NaN.
 * Returns the number of new ids. */
int64_t sr_mc_update_scores(int64_t z, int64_t *counts, int64_t *last, const int64_t *win_counts,
                            const uint8_t *held, const int64_t *slots, const int64_t *win_last,
                            const int64_t *order, int64_t u, int64_t cur, int kind,
                            float *scores_f, int64_t *scores_i, int64_t *new_counts,
                            int64_t *new_last, int64_t *nan_seen) {
    int64_t h = 0, m = 0;
    for (int64_t i = 0; i < u; i++) {
        int64_t lv = win_last ? win_last[order[i]] : 0;
        if (held[i]) {
            int64_t s = slots[h++];
            if (counts) counts[s] = (int64_t)((uint64_t)counts[s] + (uint64_t)win_counts[i]);
            if (last) last[s] = lv;
        } else {
            if (counts) new_counts[m] = win_counts[i];
            if (last) new_last[m] = lv;
            m++;
        }
    }
    if (counts) counts[z - 1] = INT64_MAX;
    if (last) last[z - 1] = cur;
    if (m == 0) return 0; /* no new id: nothing competes, no score is read */
    int64_t nan = 0;
    for (int64_t j = 0; j < z + m; j++) {
        int64_t c = 0, l = 0;
        if (j < z) {
            if (counts) c = counts[j];
            if (last) l = last[j];
        } else {
            if (counts) c = new_counts[j - z];
            if (last) l = new_last[j - z];
        }
        int64_t d = (int64_t)((uint64_t)cur - (uint64_t)l + 1u);
        if (kind == 0)
            scores_i[j] = c;
        else if (kind == 1)
            scores_f[j] = -(float)d;
        else {
            scores_f[j] = (float)c / (float)d;
            nan |= (c == 0) & (d == 0); /* 0 / 0: the only NaN these scores can hold */
        }
    }
    if (nan_seen) *nan_seen = nan;
    return m;
}

/* The re-sort after a round, in place: keys (z slots, sorted except the e slots listed in
 * fresh, which hold new keys absent elsewhere and are given sorted by key) become sorted as a
 * stable argsort would order them (held slots first on equal keys), and the nbuf other
 * buffers (rows first, then metadata; z int64 each) follow. position[rows[p] - row_offset] = p
 * for the new order (position may be NULL: not kept). Two passes: the held slots compacted to the front, then merged with the
 * new ones from the back. Returns -1 when a scratch allocation failed (nothing changed). */
int64_t sr_mc_merge_slots(int64_t *keys, int64_t **bufs, int64_t nbuf, int64_t z,
                          const int64_t *fresh, int64_t e, int64_t row_offset,
                          int64_t *position) {
    if (e == 0) return z; /* nothing new: already sorted */
    uint8_t *is_fresh = (uint8_t *)calloc((size_t)(z > 0 ? z : 1), 1);
    int64_t *saved = (int64_t *)malloc((size_t)(e > 0 ? e : 1) * (size_t)(nbuf + 1) * 8);
    if (!is_fresh || !saved) {
        free(is_fresh);
        free(saved);
        return -1;
    }
    for (int64_t j = 0; j < e; j++) {
        is_fresh[fresh[j]] = 1;
        saved[j] = keys[fresh[j]];
        for (int64_t b = 0; b < nbuf; b++) saved[(b + 1) * e + j] = bufs[b][fresh[j]];
    }
    int64_t w = 0;
    for (int64_t i = 0; i < z; i++) {
        if (is_fresh[i]) continue;
        if (w != i) {
            keys[w] = keys[i];
            for (int64_t b = 0; b < nbuf; b++) bufs[b][w] = bufs[b][i];
        }
        w++;
    }
    int64_t i = z - e - 1, j = e - 1;
    for (int64_t p = z - 1; p >= 0; p--) {
        if (j >= 0 && (i < 0 || saved[j] >= keys[i])) {
            keys[p] = saved[j];
            for (int64_t b = 0; b < nbuf; b++) bufs[b][p] = saved[(b + 1) * e + j];
            j--;
        } else {
            if (p != i) {
                keys[p] = keys[i];
                for (int64_t b = 0; b < nbuf; b++) bufs[b][p] = bufs[b][i];
            }
            i--;
        }
        if (position && nbuf > 0) position[bufs[0][p] - row_offset] = p;
    }
    free(is_fresh);
    free(saved);
    return z;
}

/* The round's window ids against the slots, by one merge of two sorted arrays:
 * uniq (u distinct ids, ascending) and sorted (z slots, ascending, empty = INT64_MAX).
 * For each window id in the order given (order[i] indexes uniq), as
 * torch.searchsorted(sorted[:-1], id) does: the slot s of its lower bound among the first
 * z - 1 slots; held[i] = sorted[s] == id; ids[i] = uniq[order[i]]; held slots are written to
 * slots in that order. Returns the number of held ids (-1: allocation failed). */
int64_t sr_mc_match_slots(const int64_t *sorted, int64_t z, const int64_t *uniq, int64_t u,
                          const int64_t *order, uint8_t *held, int64_t *slots, int64_t *ids) {
    int64_t *bound = (int64_t *)malloc((size_t)(u > 0 ? u : 1) * sizeof(int64_t));
    if (!bound) return -1;
    int64_t s = 0, lim = z - 1;
    for (int64_t k = 0; k < u; k++) {
        while (s < lim && sorted[s] < uniq[k]) s++;
        bound[k] = s;
    }
    int64_t h = 0;
    for (int64_t i = 0; i < u; i++) {
        int64_t k = order[i];
        int64_t v = uniq[k];
        ids[i] = v;
        int hit = sorted[bound[k]] == v;
        held[i] = (uint8_t)hit;
        if (hit) slots[h++] = bound[k];
    }
    free(bound);
    return h;
}

/* The writes of a round that admitted e > 0 new ids, in one pass (the torch ops it replaces:
 * gathers of the old ids and rows, the new ids' places, the index put of the new ids, the
 * freed slots ordered by their new ids, the row of every window id).
 * Window ids: uniq (u, ascending, distinct) in the order by_count; held[i] marks the held
 * ones, at slots held_slots (in that order); the others are the candidates, numbered in that
 * order. Candidate selected[k] takes slot evicted[k]:
 *   old_ids[k] = sorted[evicted[k]], rows[k] = mapping[evicted[k]],
 *   new_at[k] = its place in uniq, sorted[evicted[k]] = uniq[new_at[k]];
 *   by_key = evicted ordered by new_at (ascending: the new ids' order);
 *   when uniq_rows is not NULL, the row each uniq id reads after the round: a held id its
 *   slot's row unless its slot went to a new id (then miss), a new id its slot's row, the
 *   rest miss.
 * Returns the number of old ids that were real (not INT64_MAX), or -1 when a scratch
 * allocation failed (nothing changed). */
int64_t sr_mc_apply_round(int64_t *sorted, const int64_t *mapping, const int64_t *uniq,
                          int64_t u, const int64_t *by_count, const uint8_t *held,
                          const int64_t *held_slots, const int64_t *evicted,
                          const int64_t *selected, int64_t e, int64_t miss, int64_t *old_ids,
                          int64_t *rows, int64_t *new_at, int64_t *by_key,
                          int64_t *uniq_rows) {
    int64_t *cand = (int64_t *)malloc((size_t)(u > 0 ? u : 1) * sizeof(int64_t));
    int64_t *slot_of = (int64_t *)malloc((size_t)(u > 0 ? u : 1) * sizeof(int64_t));
    if (!cand || !slot_of) {
        free(cand);
        free(slot_of);
        return -1;
    }
    int64_t m = 0;
    for (int64_t i = 0; i < u; i++)
        if (!held[i]) cand[m++] = by_count[i];
    for (int64_t i = 0; i < u; i++) slot_of[i] = -1;
    int64_t real = 0;
    for (int64_t k = 0; k < e; k++) {
        int64_t s = evicted[k];
        int64_t at = cand[selected[k]];
        old_ids[k] = sorted[s];
        real += sorted[s] != INT64_MAX;
        rows[k] = mapping[s];
        new_at[k] = at;
        sorted[s] = uniq[at];
        slot_of[at] = s;
    }
    int64_t w = 0;
    for (int64_t i = 0; i < u; i++)
        if (slot_of[i] >= 0) by_key[w++] = slot_of[i];
    if (uniq_rows) {
        for (int64_t i = 0; i < u; i++) uniq_rows[i] = miss;
        int64_t h = 0;
        for (int64_t i = 0; i < u; i++) {
            if (!held[i]) continue;
            int64_t s = held_slots[h++];
            int64_t at = by_count[i];
            if (sorted[s] == uniq[at]) uniq_rows[at] = mapping[s];
        }
        for (int64_t k = 0; k < e; k++) uniq_rows[new_at[k]] = rows[k];
    }
    free(cand);
    free(slot_of);
    return real;
}

/* out[i] = src[idx[i]] (every idx in range; the caller's torch gather, without its
 * TensorIterator: several times faster for int64 vectors of ~40k). */
void sr_mc_gather(const int64_t *src, const int64_t *idx, int64_t n, int64_t *out) {
    for (int64_t i = 0; i < n; i++) out[i] = src[idx[i]];
}

/* dst[dst_at[k]] = src[src_at[k]] for k < n (int64 vectors; indices in range). */
void sr_mc_copy_at(int64_t *dst, const int64_t *dst_at, const int64_t *src, const int64_t *src_at,
                   int64_t n) {
    for (int64_t k = 0; k < n; k++) dst[dst_at[k]] = src[src_at[k]];
}
