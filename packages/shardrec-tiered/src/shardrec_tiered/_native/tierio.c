/* Row I/O of a tiered table's store file (shardrec_tiered/native_io.py).
 *
 * sr_tier_io: rows of the sorted unique `ids` between `buf` (n x row_bytes, packed) and the
 * file (`header + id * row_bytes`). With `base` NULL: one pread / pwrite per run of
 * consecutive ids, retried on EINTR and on partial transfers. With `base` the address of the
 * whole file mapped shared (sr_tier_map, `rows` rows after the header): one memcpy per run,
 * no system call (the kernel's page cache behind both is the same). Returns 0, or -1 at the
 * first failure (errno, a short read at the end of the file, an id past `rows` of a mapped
 * file): the caller repeats the I/O on its own path to report it.
 *
 * sr_tier_map / sr_tier_unmap: map `size` bytes of `fd` shared, read and write, for random
 * access (no readahead around a fault); NULL when the kernel refuses. */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int64_t sr_tier_io(int64_t fd, const int64_t *ids, int64_t n, int64_t row_bytes,
                   int64_t header, char *buf, int64_t write, char *base, int64_t rows) {
    int64_t i = 0;
    while (i < n) {
        int64_t j = i + 1;
        while (j < n && ids[j] == ids[j - 1] + 1) j++;
        const size_t len = (size_t)(j - i) * (size_t)row_bytes;
        const off_t off = (off_t)(header + ids[i] * row_bytes);
        char *p = buf + i * row_bytes;
        if (base != NULL) {
            if (ids[i] < 0 || ids[j - 1] >= rows) return -1;
            if (write) memcpy(base + off, p, len);
            else memcpy(p, base + off, len);
            i = j;
            continue;
        }
        size_t done = 0;
        while (done < len) {
            const ssize_t r = write ? pwrite((int)fd, p + done, len - done, off + (off_t)done)
                                    : pread((int)fd, p + done, len - done, off + (off_t)done);
            if (r < 0) {
                if (errno == EINTR) continue;
                return -1;
            }
            if (r == 0) return -1;
            done += (size_t)r;
        }
        i = j;
    }
    return 0;
}

void *sr_tier_map(int64_t fd, int64_t size) {
    void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, (size_t)size, MADV_RANDOM);
    return p;
}

int64_t sr_tier_unmap(void *p, int64_t size) { return munmap(p, (size_t)size); }
