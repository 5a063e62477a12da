/* kcache.c: the on-disk kernel cache; see kcache.h for the layout and the checks.
 *
 * Entry file: a 32-byte header, then the key, then the payload.
 *     "CGCKC01\n"  u64 key_len  u64 payload_len  u32 crc32(payload)  u32 crc32(key)
 * (native byte order: the cache is per machine). The file name hashes the key with two
 * zlib checksums (CRC-32 and Adler-32, 64 bits together); the name only has to spread
 * entries, since a load trusts nothing but the byte-for-byte key comparison. */
#define _GNU_SOURCE
#include "kcache.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

static bool cache_disabled(void)
{
    const char *v = getenv("CGC_NO_CACHE");
    return v && *v && strcmp(v, "0") != 0;
}

/* $XDG_CACHE_HOME when absolute (the XDG spec says to ignore a relative one), else
 * $HOME/.cache, else the password database's home. */
static bool cache_base(char *buf, size_t len)
{
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && xdg[0] == '/')
        return (size_t)snprintf(buf, len, "%s", xdg) < len;
    const char *home = getenv("HOME");
    if (!home || home[0] != '/') {
        struct passwd *pw = getpwuid(getuid());
        home = pw ? pw->pw_dir : NULL;
    }
    if (!home || home[0] != '/') return false;
    return (size_t)snprintf(buf, len, "%s/.cache", home) < len;
}

/* mkdir -p PATH (0700 for what it creates). */
static void make_parents(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *s = tmp + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        mkdir(tmp, 0700);
        *s = '/';
    }
    mkdir(tmp, 0700);
}

/* Creates (0700) and opens PARENT/NAME, refusing a symlink, a directory of another user,
 * or one that others may write. Returns the fd, or -1 with WHY. */
static int open_private_dir(int parent, const char *name, char *why, size_t why_len)
{
    if (mkdirat(parent, name, 0700) != 0 && errno != EEXIST) {
        snprintf(why, why_len, "cannot be created: %s", strerror(errno));
        return -1;
    }
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        struct stat st;
        if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
            snprintf(why, why_len, "is a symbolic link");
        else if (e == ENOTDIR)
            snprintf(why, why_len, "is not a directory");
        else
            snprintf(why, why_len, "cannot be opened: %s", strerror(e));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(why, why_len, "cannot be examined: %s", strerror(errno));
    } else if (st.st_uid != geteuid()) {
        snprintf(why, why_len, "belongs to uid %u, not to you (uid %u)", (unsigned)st.st_uid,
                 (unsigned)geteuid());
    } else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, why_len, "is group- or world-writable (mode %04o); chmod 700 it",
                 (unsigned)(st.st_mode & 07777));
    } else {
        return fd;
    }
    close(fd);
    return -1;
}

/* One warning per unusable directory, however many modules are compiled. */
static void warn_unusable(const char *dir, const char *why)
{
    static char warned[PATH_MAX + 256];
    char msg[sizeof warned];
    snprintf(msg, sizeof msg, "%s %s", dir, why);
    if (strcmp(msg, warned) == 0) return;
    snprintf(warned, sizeof warned, "%s", msg);
    fprintf(stderr,
            "cgc: warning: kernel cache directory %s %s; compiling without the cache "
            "(fix it, point XDG_CACHE_HOME elsewhere, or set CGC_NO_CACHE=1)\n",
            dir, why);
}

/* Opens the entry directory, into PATH; -1 when the cache is off (WHY says so, no
 * warning) or unusable (warned). */
static int open_cache(char *path, size_t len, char *why, size_t why_len)
{
    if (cache_disabled()) {
        snprintf(why, why_len, "the kernel cache is off (CGC_NO_CACHE is set)");
        return -1;
    }
    char base[PATH_MAX];
    if (!cache_base(base, sizeof base)) {
        snprintf(why, why_len, "no cache directory: neither XDG_CACHE_HOME nor a home is set");
        warn_unusable("(none)", "could be found: neither XDG_CACHE_HOME nor a home is set");
        return -1;
    }
    make_parents(base);
    int fd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, why_len, "%s cannot be opened: %s", base, strerror(errno));
        warn_unusable(base, "cannot be opened");
        return -1;
    }
    static const char *const parts[] = {"cgc", "nvrtc"};
    snprintf(path, len, "%s", base);
    for (int i = 0; i < 2; i++) {
        size_t used = strlen(path);
        snprintf(path + used, len - used, "/%s", parts[i]);
        char reason[256];
        int next = open_private_dir(fd, parts[i], reason, sizeof reason);
        close(fd);
        if (next < 0) {
            snprintf(why, why_len, "%s %s", path, reason);
            warn_unusable(path, reason);
            return -1;
        }
        fd = next;
    }
    return fd;
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

static bool read_all(int fd, void *buf, size_t n)
{
    for (char *p = buf; n > 0;) {
        ssize_t got = read(fd, p, n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        p += got, n -= (size_t)got;
    }
    return true;
}

/* Checks an opened entry against KEY; NULL when it matches (payload in *OUT), else what
 * is wrong with it. */
static const char *read_entry(int fd, const void *key, size_t key_len, void **out,
                              size_t *size)
{
    struct stat st;
    EntryHeader h;
    if (fstat(fd, &st) != 0) return "cannot be examined";
    if (!S_ISREG(st.st_mode)) return "is not a regular file";
    if (st.st_uid != geteuid()) return "belongs to another user";
    if ((uint64_t)st.st_size < HEADER_BYTES || !read_all(fd, &h, sizeof h))
        return "is truncated (no header)";
    if (memcmp(h.magic, MAGIC, sizeof MAGIC) != 0) return "is not a cgc cache entry";
    if (h.key_len != key_len || h.key_crc != crc_of(key, key_len))
        return "was written for another key";
    if (h.payload_len > ENTRY_MAX_BYTES) return "is corrupt (payload size)";
    if ((uint64_t)st.st_size != HEADER_BYTES + h.key_len + h.payload_len)
        return "is truncated or has trailing bytes";
    char *stored_key = malloc(key_len ? key_len : 1);
    void *payload = malloc(h.payload_len ? h.payload_len : 1);
    const char *problem = NULL;
    if (!stored_key || !payload)
        problem = "is too large to read";
    else if (!read_all(fd, stored_key, key_len) || !read_all(fd, payload, h.payload_len))
        problem = "could not be read whole";
    else if (memcmp(stored_key, key, key_len) != 0)
        problem = "was written for another key";
    else if (crc_of(payload, h.payload_len) != h.payload_crc)
        problem = "is corrupt (payload checksum mismatch)";
    free(stored_key);
    if (problem) {
        free(payload);
        return problem;
    }
    *out = payload;
    *size = h.payload_len;
    return NULL;
}

bool kcache_load(const void *key, size_t key_len, void **payload, size_t *size, bool verbose)
{
    char dir[PATH_MAX], why[PATH_MAX + 256], name[64];
    int dfd = open_cache(dir, sizeof dir, why, sizeof why);
    if (dfd < 0) return false;
    kcache_entry_name(key, key_len, name, sizeof name);
    /* O_NONBLOCK: a FIFO planted as an entry must not block the open (fstat refuses it) */
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    const char *problem = NULL;
    if (fd < 0) {
        if (errno != ENOENT) problem = errno == ELOOP ? "is a symbolic link" : "cannot be opened";
    } else {
        problem = read_entry(fd, key, key_len, payload, size);
        close(fd);
    }
    close(dfd);
    if (problem && verbose)
        fprintf(stderr, "cgc: note: kernel cache entry %s/%s %s; recompiling\n", dir, name,
                problem);
    return fd >= 0 && !problem;
}

/* ---- storing ---- */

static bool write_all(int fd, const void *buf, size_t n)
{
    for (const char *p = buf; n > 0;) {
        ssize_t put = write(fd, p, n);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) return false;
        p += put, n -= (size_t)put;
    }
    return true;
}

static bool write_entry(int fd, const void *key, size_t key_len, const void *payload,
                        size_t size)
{
    EntryHeader h;
    memcpy(h.magic, MAGIC, sizeof MAGIC);
    h.key_len = key_len;
    h.payload_len = size;
    h.payload_crc = crc_of(payload, size);
    h.key_crc = crc_of(key, key_len);
    return write_all(fd, &h, sizeof h) && write_all(fd, key, key_len) &&
           write_all(fd, payload, size);
}

void kcache_store(const void *key, size_t key_len, const void *payload, size_t size,
                  bool verbose)
{
    char dir[PATH_MAX], why[PATH_MAX + 256], name[64], tmp[128];
    int dfd = open_cache(dir, sizeof dir, why, sizeof why);
    if (dfd < 0) return;
    kcache_entry_name(key, key_len, name, sizeof name);
    /* A private temporary name, so that concurrent cgc processes never share one; the
     * rename makes the entry appear whole or not at all. No fsync: a torn entry after a
     * crash fails its checksum and is recompiled. */
    static unsigned counter;
    snprintf(tmp, sizeof tmp, ".tmp.%ld.%u.%s", (long)getpid(), counter++, name);
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    bool ok = fd >= 0 && write_entry(fd, key, key_len, payload, size);
    int err = errno;
    if (fd >= 0 && close(fd) != 0) ok = false;
    if (ok && renameat(dfd, tmp, dfd, name) != 0) {
        ok = false;
        err = errno;
    }
    if (!ok) {
        if (fd >= 0) unlinkat(dfd, tmp, 0);
        fprintf(stderr, "cgc: warning: cannot write kernel cache entry %s/%s: %s\n", dir, name,
                strerror(err));
    } else if (verbose) {
        fprintf(stderr, "cgc: note: cached the module as %s/%s\n", dir, name);
    }
    close(dfd);
}
