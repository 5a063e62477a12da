/* kcache.c: the on-disk kernel cache; see kcache.h for the layout and the checks.
 *
 * Entry file: a 32-byte header, then the key, then the payload.
 *     "CGCKC01\n"  u64 key_len  u64 payload_len  u32 crc32(payload)  u32 crc32(key)
 * (native byte order: the cache is per machine). The file name hashes the key with two
 * zlib checksums (CRC-32 and Adler-32, 64 bits together); the name only has to spread
 * entries, since a load trusts nothing but the byte-for-byte key comparison. */
#define _GNU_SOURCE
#include "kcache.h"

#include "../cachedir.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

enum { HEADER_BYTES = 32 };
#define ENTRY_MAX_BYTES ((uint64_t)1 << 30)   /* far beyond any module; bounds a read */
static const char MAGIC[8] = {'C', 'G', 'C', 'K', 'C', '0', '1', '\n'};

typedef struct EntryHeader {
    char magic[8];
    uint64_t key_len, payload_len;
    uint32_t payload_crc, key_crc;
} EntryHeader;
_Static_assert(sizeof(EntryHeader) == HEADER_BYTES, "entry header is 32 bytes");

/* zlib's checksums (crc32, adler32) take uInt lengths: feed long buffers in pieces. */
static uint32_t checksum(uLong (*update)(uLong, const Bytef *, uInt), const void *p, size_t n)
{
    uLong c = update(0L, Z_NULL, 0);
    for (const Bytef *b = p; n > 0;) {
        uInt step = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = update(c, b, step);
        b += step, n -= step;
    }
    return (uint32_t)c;
}

static uint32_t crc_of(const void *p, size_t n) { return checksum(crc32, p, n); }
static uint32_t adler_of(const void *p, size_t n) { return checksum(adler32, p, n); }

void kcache_entry_name(const void *key, size_t key_len, char *buf, size_t len)
{
    snprintf(buf, len, "%08x%08x.cubin", (unsigned)crc_of(key, key_len),
             (unsigned)adler_of(key, key_len));
}

/* ---- the directory ---- */

/* Opens the entry directory, into PATH; -1 when the cache is off (WHY says so, no
 * warning) or unusable (warned). */
static int open_cache(char *path, size_t len, char *why, size_t why_len)
{
    return cachedir_open("nvrtc", "kernel cache", "compiling without the cache", path, len,
                         why, why_len);
}

bool kcache_dir(char *buf, size_t len)
{
    char why[PATH_MAX + 256];
    int fd = open_cache(buf, len, why, sizeof why);
    if (fd < 0) {
        snprintf(buf, len, "%s", why);
        return false;
    }
    close(fd);
    return true;
}

/* ---- loading ---- */

/* Checks entry bytes E (N of them) against KEY; NULL when it matches (a copy of the
 * payload in *OUT), else what is wrong with it. */
static const char *check_entry(const char *e, size_t n, const void *key, size_t key_len,
                               void **out, size_t *size)
{
    EntryHeader h;
    if (n < HEADER_BYTES) return "is truncated (no header)";
    memcpy(&h, e, sizeof h);
    if (memcmp(h.magic, MAGIC, sizeof MAGIC) != 0) return "is not a cgc cache entry";
    if (h.key_len != key_len || h.key_crc != crc_of(key, key_len))
        return "was written for another key";
    if (h.payload_len > ENTRY_MAX_BYTES) return "is corrupt (payload size)";
    if ((uint64_t)n != HEADER_BYTES + h.key_len + h.payload_len)
        return "is truncated or has trailing bytes";
    if (memcmp(e + HEADER_BYTES, key, key_len) != 0) return "was written for another key";
    const char *payload = e + HEADER_BYTES + key_len;
    if (crc_of(payload, h.payload_len) != h.payload_crc)
        return "is corrupt (payload checksum mismatch)";
    if (!(*out = malloc(h.payload_len ? h.payload_len : 1))) return "is too large to read";
    memcpy(*out, payload, h.payload_len);
    *size = h.payload_len;
    return NULL;
}

bool kcache_load(const void *key, size_t key_len, void **payload, size_t *size, bool verbose)
{
    char dir[PATH_MAX], why[PATH_MAX + 256], name[64];
    int dfd = open_cache(dir, sizeof dir, why, sizeof why);
    if (dfd < 0) return false;
    kcache_entry_name(key, key_len, name, sizeof name);
    char *entry = NULL;
    size_t n = 0;
    bool missing;
    const char *problem = cachedir_read(dfd, name, HEADER_BYTES + key_len + ENTRY_MAX_BYTES,
                                        &entry, &n, &missing);
    if (!problem) problem = check_entry(entry, n, key, key_len, payload, size);
    free(entry);
    close(dfd);
    if (problem && !missing && verbose)
        fprintf(stderr, "cgc: note: kernel cache entry %s/%s %s; recompiling\n", dir, name,
                problem);
    return !problem;
}

/* ---- storing ---- */

void kcache_store(const void *key, size_t key_len, const void *payload, size_t size,
                  bool verbose)
{
    char dir[PATH_MAX], why[PATH_MAX + 256], name[64];
    int dfd = open_cache(dir, sizeof dir, why, sizeof why);
    if (dfd < 0) return;
    kcache_entry_name(key, key_len, name, sizeof name);
    EntryHeader h;
    memcpy(h.magic, MAGIC, sizeof MAGIC);
    h.key_len = key_len;
    h.payload_len = size;
    h.payload_crc = crc_of(payload, size);
    h.key_crc = crc_of(key, key_len);
    size_t n = HEADER_BYTES + key_len + size;
    char *entry = malloc(n);
    int err = ENOMEM;
    if (entry) {
        memcpy(entry, &h, sizeof h);
        memcpy(entry + HEADER_BYTES, key, key_len);
        memcpy(entry + HEADER_BYTES + key_len, payload, size);
        err = cachedir_write(dfd, name, entry, n, 0600);   /* a torn entry fails its checksum */
        free(entry);
    }
    if (err)
        fprintf(stderr, "cgc: warning: cannot write kernel cache entry %s/%s: %s\n", dir, name,
                strerror(err));
    else if (verbose)
        fprintf(stderr, "cgc: note: cached the module as %s/%s\n", dir, name);
    close(dfd);
}
