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

#define BUCKETS 1024 /* victim choice: key buckets (smallest_k) */

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

static int64_t plan_one(const int64_t *ids, int64_t n, const int32_t *map, const int64_t *score,
                        const int32_t *pins, const uint8_t *held, int64_t nslots, int64_t *slots,
                        int64_t *victims, uint8_t *taken, cand_t *cand, int32_t *hist,
                        int64_t *evictable);

int64_t sr_cache_plan(const int64_t *ids, int64_t n, const int32_t *map, const int64_t *score,
                      const int32_t *pins, const uint8_t *held, int64_t nslots, int64_t *slots,
                      int64_t *victims, int64_t *evictable) {
    uint8_t *taken = malloc((size_t)(nslots > 0 ? nslots : 1));
    cand_t *cand = malloc(sizeof(cand_t) * (size_t)(nslots > 0 ? nslots : 1));
    int32_t *hist = malloc(sizeof(int32_t) * BUCKETS);
    int64_t k = -2;
    if (taken != NULL && cand != NULL && hist != NULL)
        k = plan_one(ids, n, map, score, pins, held, nslots, slots, victims, taken, cand, hist,
                     evictable);
    free(taken);
    free(cand);
    free(hist);
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

/* One call for a batch over all of a lookup's tables (shardrec_tiered/table_batch.py).
 *
 * `tab` holds TAB_FIELDS + ncols int64 per table: its first group row, its rows, its first
 * slot in the group, its slots, the addresses of its map / score / pins / held / dirty /
 * id_of_slot, of its store file mapped into memory (row r at `header + r * stride * 4`), its
 * policy (1: LFU), then its column blocks' addresses (`widths` shared by the tables).
 *
 * sr_cache_admit_tables: `ids` the batch's sorted distinct group rows. First every table's
 *   plan (as sr_cache_plan; nothing changes), so a refused batch changes nothing: returns
 *   1 + the first table whose rows outnumber its slots or whose evictable slots are too few
 *   (the caller then raises that table's error), -2 without memory, -3 for an id
 *   past the last table. Then per table:
 *   ticks[t] += 1, the held dirty victims' rows copied into the mapped store, the misses'
 *   rows copied from it into the victims' slots, the batch's scores (as sr_cache_install,
 *   no pins). Out: `slots` (each id's slot in its table), `group` (its slot in the group),
 *   `bounds` (ntab + 1: table t's ids are [bounds[t], bounds[t+1])), `counts_out` (2 per
 *   table: misses, rows written back). Returns 0. Runs without the GIL (ctypes).
 * sr_cache_pin_tables: pins[slot] += delta for each id's slot (the caller holds the pin lock).
 * sr_cache_dirty_tables: dirty[slot] = 1 for each id's slot. */
enum { T_ROW0, T_ROWS, T_SLOT0, T_SLOTS, T_MAP, T_SCORE, T_PINS, T_HELD, T_DIRTY, T_IDS, T_BASE,
       T_LFU, TAB_FIELDS };

#define AHEAD 8 /* rows fetched ahead of the copies (random rows: memory latency bound) */

static inline void touch(const void *p, size_t bytes, int write) {
    const char *c = (const char *)p;
    for (size_t o = 0; o < bytes; o += 64) {
        if (write) __builtin_prefetch(c + o, 1);
        else __builtin_prefetch(c + o, 0);
    }
    if (bytes > 0 && ((uintptr_t)(c + bytes - 1) >> 6) != ((uintptr_t)(c + ((bytes - 1) & ~(size_t)63)) >> 6)) {
        if (write) __builtin_prefetch(c + bytes - 1, 1);
        else __builtin_prefetch(c + bytes - 1, 0);
    }
}

#define FIELD(t, f) (tab[(t) * nfields + (f)])
#define PTR(type, t, f) ((type)(intptr_t)FIELD(t, f))

static void smallest_k(cand_t *cand, int64_t m, int64_t k, int64_t *victims, int32_t *hist) {
    /* The k smallest (key, slot) of cand[0, m) (in slot order) into victims, as select_k
     * would choose them: keys bucketed (empty slots, INT64_MIN, in a bucket of their own),
     * every bucket below the k-th candidate's taken whole, the rest chosen in its bucket. */
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t i = 0; i < m; i++) {
        if (cand[i].key == INT64_MIN) continue;
        if (cand[i].key < lo) lo = cand[i].key;
        if (cand[i].key > hi) hi = cand[i].key;
    }
    int shift = 0;
    if (hi >= lo)
        while ((((uint64_t)hi - (uint64_t)lo) >> shift) >= BUCKETS - 1) shift++;
    memset(hist, 0, sizeof(int32_t) * BUCKETS);
#define BUCKET(key) ((key) == INT64_MIN ? 0 : 1 + (int64_t)(((uint64_t)(key) - (uint64_t)lo) >> shift))
    for (int64_t i = 0; i < m; i++) hist[BUCKET(cand[i].key)]++;
    int64_t below = 0, t = 0;
    while (below + hist[t] < k) below += hist[t++];
    int64_t out = 0, rest = 0;
    for (int64_t i = 0; i < m; i++) {
        const int64_t b = BUCKET(cand[i].key);
        if (b < t) victims[out++] = cand[i].slot;
        else if (b == t) cand[rest++] = cand[i]; /* rest <= i: compacts in place */
    }
#undef BUCKET
    select_k(cand, rest, k - below);
    for (int64_t j = 0; j < k - below; j++) victims[out++] = cand[j].slot;
}

static int64_t plan_one(const int64_t *ids, int64_t n, const int32_t *map, const int64_t *score,
                        const int32_t *pins, const uint8_t *held, int64_t nslots, int64_t *slots,
                        int64_t *victims, uint8_t *taken, cand_t *cand, int32_t *hist,
                        int64_t *evictable) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        slots[i] = map[ids[i]];
        k += slots[i] < 0;
    }
    *evictable = 0;
    if (k == 0) return 0;
    memset(taken, 0, (size_t)nslots);
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
    if (m < k) return -1;
    smallest_k(cand, m, k, victims, hist);
    return k;
}

int64_t sr_cache_admit_tables(const int64_t *ids, int64_t n, const int64_t *counts,
                              const int64_t *tab, int64_t ntab, int64_t nfields,
                              const int64_t *widths, int64_t ncols, int64_t stride,
                              int64_t header, int64_t *ticks, int64_t *slots, int64_t *group,
                              int64_t *bounds, int64_t *counts_out) {
    int64_t most = 0, i = 0, evictable = 0;
    for (int64_t t = 0; t < ntab; t++) {
        bounds[t] = i;
        const int64_t end = FIELD(t, T_ROW0) + FIELD(t, T_ROWS);
        while (i < n && ids[i] < end) i++;
        if (FIELD(t, T_SLOTS) > most) most = FIELD(t, T_SLOTS);
    }
    bounds[ntab] = i;
    if (i != n) return -3; /* an id past the last table (the caller checked them) */
    int64_t *victims = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    int64_t *local = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    int64_t *miss = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    uint8_t *taken = malloc((size_t)(most > 0 ? most : 1));
    cand_t *cand = malloc(sizeof(cand_t) * (size_t)(most > 0 ? most : 1));
    int32_t *hist = malloc(sizeof(int32_t) * BUCKETS);
    int64_t status = 0;
    if (victims == NULL || local == NULL || miss == NULL || taken == NULL || cand == NULL ||
        hist == NULL) {
        status = -2;
        goto done;
    }
    for (int64_t t = 0; t < ntab; t++) {
        const int64_t a = bounds[t], b = bounds[t + 1];
        counts_out[2 * t] = counts_out[2 * t + 1] = 0;
        if (a == b) continue;
        const int64_t nslots = FIELD(t, T_SLOTS);
        if (b - a > nslots || ids[a] < FIELD(t, T_ROW0)) {
            status = 1 + t;
            goto done;
        }
        for (int64_t j = a; j < b; j++) local[j] = ids[j] - FIELD(t, T_ROW0);
        const int64_t k = plan_one(local + a, b - a, PTR(const int32_t *, t, T_MAP),
                                   PTR(const int64_t *, t, T_SCORE), PTR(const int32_t *, t, T_PINS),
                                   PTR(const uint8_t *, t, T_HELD), nslots, slots + a,
                                   victims + a, taken, cand, hist, &evictable);
        if (k < 0) {
            status = 1 + t;
            goto done;
        }
        counts_out[2 * t] = k;
    }
    const size_t row_bytes = sizeof(float) * (size_t)stride;
    for (int64_t t = 0; t < ntab; t++) {
        const int64_t a = bounds[t], b = bounds[t + 1];
        if (a == b) continue;
        ticks[t] += 1;
        const int64_t k = counts_out[2 * t];
        int32_t *map = PTR(int32_t *, t, T_MAP);
        int64_t *score = PTR(int64_t *, t, T_SCORE);
        uint8_t *held = PTR(uint8_t *, t, T_HELD), *dirty = PTR(uint8_t *, t, T_DIRTY);
        int64_t *id_of_slot = PTR(int64_t *, t, T_IDS);
        char *base = PTR(char *, t, T_BASE) + header;
        float *const *cols = (float *const *)&tab[t * nfields + TAB_FIELDS];
        int64_t written = 0;
        for (int64_t j = a; j < a + k; j++) {  /* write back, then forget, the victims */
            if (j + AHEAD < a + k) {  /* rows at random places: fetch a few ahead */
                const int64_t w = victims[j + AHEAD];
                if (held[w] && dirty[w]) {
                    touch(base + (size_t)id_of_slot[w] * row_bytes, row_bytes, 1);
                    for (int64_t c = 0; c < ncols; c++)
                        touch(cols[c] + w * widths[c], sizeof(float) * (size_t)widths[c], 0);
                }
            }
            const int64_t v = victims[j];
            if (!held[v]) continue;
            if (dirty[v]) {
                float *dst = (float *)(base + (size_t)id_of_slot[v] * row_bytes);
                for (int64_t c = 0; c < ncols; c++) {
                    memcpy(dst, cols[c] + v * widths[c], sizeof(float) * (size_t)widths[c]);
                    dst += widths[c];
                }
                written++;
            }
            map[id_of_slot[v]] = -1;
            dirty[v] = 0;
        }
        counts_out[2 * t + 1] = written;
        int64_t j = a;
        for (int64_t r = a; r < b && j < a + k; r++)  /* the misses, in order */
            if (slots[r] < 0) miss[j++] = r;
        for (j = a; j < a + k; j++) {  /* the misses' rows into the victims */
            if (j + AHEAD < a + k) {
                const int64_t w = victims[j + AHEAD];
                touch(base + (size_t)local[miss[j + AHEAD]] * row_bytes, row_bytes, 0);
                for (int64_t c = 0; c < ncols; c++)
                    touch(cols[c] + w * widths[c], sizeof(float) * (size_t)widths[c], 1);
            }
            const int64_t r = miss[j], v = victims[j];
            dirty[v] = 0;
            const float *src = (const float *)(base + (size_t)local[r] * row_bytes);
            for (int64_t c = 0; c < ncols; c++) {
                memcpy(cols[c] + v * widths[c], src, sizeof(float) * (size_t)widths[c]);
                src += widths[c];
            }
            id_of_slot[v] = local[r];
            held[v] = 1;
            map[local[r]] = (int32_t)v;
            score[v] = 0;
            slots[r] = v;
        }
        const int64_t lfu = FIELD(t, T_LFU), slot0 = FIELD(t, T_SLOT0);
        for (int64_t r = a; r < b; r++) {
            if (lfu) score[slots[r]] += counts != NULL ? counts[r] : 1;
            else score[slots[r]] = ticks[t];
            group[r] = slots[r] + slot0;
        }
    }
done:
    free(victims);
    free(local);
    free(miss);
    free(taken);
    free(cand);
    free(hist);
    return status;
}

void sr_cache_pin_tables(const int64_t *slots, const int64_t *bounds, const int64_t *tab,
                         int64_t ntab, int64_t nfields, int64_t delta) {
    for (int64_t t = 0; t < ntab; t++) {
        int32_t *pins = PTR(int32_t *, t, T_PINS);
        for (int64_t r = bounds[t]; r < bounds[t + 1]; r++) pins[slots[r]] += (int32_t)delta;
    }
}

void sr_cache_dirty_tables(const int64_t *slots, const int64_t *bounds, const int64_t *tab,
                           int64_t ntab, int64_t nfields) {
    for (int64_t t = 0; t < ntab; t++) {
        uint8_t *dirty = PTR(uint8_t *, t, T_DIRTY);
        for (int64_t r = bounds[t]; r < bounds[t + 1]; r++) dirty[slots[r]] = 1;
    }
}
