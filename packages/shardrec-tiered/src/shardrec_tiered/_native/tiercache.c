/* A dense-id RowCache's admission in native code (shardrec_tiered/native_cache.py).
 *
 * The cache's bookkeeping is the RowCache's own tensors (cache.py): `map` (int32 per table
 * row: its slot or -1), per slot `id_of_slot` (int64), `held` / `dirty` (bool as bytes), `pins`
 * (int32), `score` (int64); the rows are `ncols` float32 column blocks (weight, then each
 * optimizer state), block c holding `widths[c]` floats per slot, contiguous.
 *
 * sr_cache_plan: slots of the distinct `ids` (-1 for a miss) and `k` victims for the misses:
 *   the evictable slots (not pinned, not hit by this batch) of lowest score, empty slots
 *   first. Changes nothing. Returns k, or -1 when fewer than k slots are evictable (their
 *   count in *evictable).
 * sr_cache_pack: the held, dirty victims' table rows sorted ascending and their rows packed
 *   (`stride` floats each) for the write-back. Changes nothing. Returns their count.
 * sr_cache_install: after the write-back: forgets the victims' rows, puts the read `rows` of
 *   the misses into them, scores every slot of the batch (LRU: `tick`; LFU: + its count) and,
 *   given `pins`, pins each (the caller holds the cache's pin lock). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t key;
    int64_t slot;
} cand_t;

static void select_k(cand_t *a, int64_t n, int64_t k) {
    /* Quickselect: the k smallest keys (ties by slot) in a[0, k). */
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        cand_t pivot = a[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (a[i].key < pivot.key || (a[i].key == pivot.key && a[i].slot < pivot.slot)) i++;
            while (a[j].key > pivot.key || (a[j].key == pivot.key && a[j].slot > pivot.slot)) j--;
            if (i <= j) {
                cand_t t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

int64_t sr_cache_plan(const int64_t *ids, int64_t n, const int32_t *map, const int64_t *score,
                      const int32_t *pins, const uint8_t *held, int64_t nslots, int64_t *slots,
                      int64_t *victims, int64_t *evictable) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        slots[i] = map[ids[i]];
        k += slots[i] < 0;
    }
    *evictable = 0;
    if (k == 0) return 0;
    uint8_t *taken = calloc((size_t)nslots, 1);
    cand_t *cand = malloc(sizeof(cand_t) * (size_t)nslots);
    if (taken == NULL || cand == NULL) {
        free(taken);
        free(cand);
        return -2;
    }
    for (int64_t i = 0; i < n; i++)
        if (slots[i] >= 0) taken[slots[i]] = 1;
    int64_t m = 0;
    for (int64_t s = 0; s < nslots; s++) {
        if (taken[s] || pins[s] > 0) continue;
        cand[m].key = held[s] ? score[s] : INT64_MIN;
        cand[m].slot = s;
        m++;
    }
    *evictable = m;
    if (m < k) {
        free(taken);
        free(cand);
        return -1;
    }
    select_k(cand, m, k);
    for (int64_t j = 0; j < k; j++) victims[j] = cand[j].slot;
    free(taken);
    free(cand);
    return k;
}

static int by_id(const void *a, const void *b) {
    const int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
    return (x > y) - (x < y);
}

int64_t sr_cache_pack(const int64_t *victims, int64_t k, const uint8_t *held,
                      const uint8_t *dirty, const int64_t *id_of_slot, float *const *cols,
                      const int64_t *widths, int64_t ncols, int64_t stride, int64_t *out_ids,
                      float *out_rows) {
    int64_t (*pairs)[2] = malloc(sizeof(int64_t[2]) * (size_t)(k > 0 ? k : 1));
    if (pairs == NULL) return -2;
    int64_t m = 0;
    for (int64_t j = 0; j < k; j++) {
        const int64_t v = victims[j];
        if (held[v] && dirty[v]) {
            pairs[m][0] = id_of_slot[v];
            pairs[m][1] = v;
            m++;
        }
    }
    qsort(pairs, (size_t)m, sizeof(int64_t[2]), by_id);
    for (int64_t r = 0; r < m; r++) {
        const int64_t v = pairs[r][1];
        out_ids[r] = pairs[r][0];
        float *dst = out_rows + r * stride;
        for (int64_t c = 0; c < ncols; c++) {
            memcpy(dst, cols[c] + v * widths[c], sizeof(float) * (size_t)widths[c]);
            dst += widths[c];
        }
    }
    free(pairs);
    return m;
}

void sr_cache_install(const int64_t *ids, int64_t n, int64_t *slots, const int64_t *victims,
                      int64_t k, const float *rows, int64_t stride, float *const *cols,
                      const int64_t *widths, int64_t ncols, int32_t *map, int64_t *id_of_slot,
                      uint8_t *held, uint8_t *dirty, int64_t *score, int64_t lfu, int64_t tick,
                      const int64_t *counts, int32_t *pins) {
    for (int64_t j = 0; j < k; j++) {
        const int64_t v = victims[j];
        if (held[v]) map[id_of_slot[v]] = -1;
        dirty[v] = 0;
    }
    int64_t j = 0;
    for (int64_t i = 0; i < n && j < k; i++) {
        if (slots[i] >= 0) continue;
        const int64_t v = victims[j];
        const float *src = rows + j * stride;
        for (int64_t c = 0; c < ncols; c++) {
            memcpy(cols[c] + v * widths[c], src, sizeof(float) * (size_t)widths[c]);
            src += widths[c];
        }
        id_of_slot[v] = ids[i];
        held[v] = 1;
        map[ids[i]] = (int32_t)v;
        score[v] = 0;
        slots[i] = v;
        j++;
    }
    for (int64_t i = 0; i < n; i++) {
        if (lfu) score[slots[i]] += counts != NULL ? counts[i] : 1;
        else score[slots[i]] = tick;
        if (pins != NULL) pins[slots[i]] += 1;
    }
}
