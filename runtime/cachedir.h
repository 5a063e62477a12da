/* cachedir.h: cgc's private directories under the user's cache, shared by the kernel
 * cache (runtime/cuda/kcache.c: cgc/nvrtc/) and the autotune choices (runtime/tune.c:
 * cgc/tune/).
 *
 * Where: $XDG_CACHE_HOME/cgc/SUB/ when XDG_CACHE_HOME is an absolute path, else
 * ~/.cache/cgc/SUB/ ($HOME, else the password database). CGC_NO_CACHE=1 turns them off.
 *
 * The cgc/ and SUB/ directories are created 0700, opened with O_NOFOLLOW | O_DIRECTORY,
 * and must belong to the current user and not be group- or world-writable. A directory
 * that fails a check is unusable: one warning naming it and the problem (per directory
 * and problem, however often it is asked for), and the caller goes on without it.
 * Files are read through cachedir_read (regular files of the user, never through a
 * symbolic link) and written whole or not at all (cachedir_write). */
#ifndef CGC_CACHEDIR_H
#define CGC_CACHEDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Opens cgc/SUB, its path into PATH: the directory's fd, or -1 when the caches are off
 * (WHY says so; no warning) or the directory is unusable (WHY says why; warned once,
 * naming WHAT, e.g. "kernel cache", and what the caller does without it, AFTERWARDS,
 * e.g. "compiling without the cache"). */
int cachedir_open(const char *sub, const char *what, const char *afterwards, char *path,
                  size_t len, char *why, size_t why_len);

/* Reads NAME of directory DFD whole (at most MAX bytes) into a malloc'd, NUL-terminated
 * *OUT of *SIZE bytes. Returns NULL on success; else *MISSING tells a file that is not
 * there from one refused, and the return value says what is wrong ("is a symbolic link",
 * "is truncated", ...). */
const char *cachedir_read(int dfd, const char *name, size_t max, char **out, size_t *size,
                          bool *missing);
/* The same for open file FD (closed here), not necessarily in the cache: a regular file
 * of at most MAX bytes and, when OWN, of the current user. */
const char *cachedir_read_fd(int fd, size_t max, bool own, char **out, size_t *size);

/* Writes N bytes of BUF as NAME in directory DFD, replacing any file there: through a
 * private temporary file beside it and a rename, so that readers see the old file or the
 * new one whole. A new file gets MODE less the umask: 0600 in the cache, 0666 for a file
 * of the user's. Returns 0, or an errno value. */
int cachedir_write(int dfd, const char *name, const void *buf, size_t n, mode_t mode);

#endif
