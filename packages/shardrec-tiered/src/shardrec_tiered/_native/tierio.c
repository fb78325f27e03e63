/* Positioned row I/O of a tiered table's store file (shardrec_tiered/native_io.py).
 *
 * sr_tier_io: rows of the sorted unique `ids` between `buf` (n x row_bytes, packed) and the
 * file (`header + id * row_bytes`), one pread / pwrite per run of consecutive ids, retried
 * on EINTR and on partial transfers. Returns 0, or -1 at the first failure (errno, a short
 * read at the end of the file): the caller repeats the I/O on its own path to report it. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

int64_t sr_tier_io(int64_t fd, const int64_t *ids, int64_t n, int64_t row_bytes,
                   int64_t header, char *buf, int64_t write) {
    int64_t i = 0;
    while (i < n) {
        int64_t j = i + 1;
        while (j < n && ids[j] == ids[j - 1] + 1) j++;
        const size_t len = (size_t)(j - i) * (size_t)row_bytes;
        const off_t off = (off_t)(header + ids[i] * row_bytes);
        char *p = buf + i * row_bytes;
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
