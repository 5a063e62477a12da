/* cachedir.c: cgc's private cache directories; see cachedir.h for where and the checks. */
#define _GNU_SOURCE
#include "cachedir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* One warning per unusable directory and problem, however often it is opened. */
static void warn_unusable(const char *what, const char *dir, const char *why,
                          const char *afterwards)
{
    static char warned[PATH_MAX + 512];
    char msg[sizeof warned];
    snprintf(msg, sizeof msg, "%s %s %s", what, dir, why);
    if (strcmp(msg, warned) == 0) return;
    snprintf(warned, sizeof warned, "%s", msg);
    fprintf(stderr,
            "cgc: warning: %s directory %s %s; %s (fix it, point XDG_CACHE_HOME elsewhere, "
            "or set CGC_NO_CACHE=1)\n",
            what, dir, why, afterwards);
}

int cachedir_open(const char *sub, const char *what, const char *afterwards, char *path,
                  size_t len, char *why, size_t why_len)
{
    if (cache_disabled()) {
        snprintf(why, why_len, "the %s is off (CGC_NO_CACHE is set)", what);
        return -1;
    }
    char base[PATH_MAX];
    if (!cache_base(base, sizeof base)) {
        snprintf(why, why_len, "no cache directory: neither XDG_CACHE_HOME nor a home is set");
        warn_unusable(what, "(none)", "could be found: neither XDG_CACHE_HOME nor a home is set",
                      afterwards);
        return -1;
    }
    make_parents(base);
    int fd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, why_len, "%s cannot be opened: %s", base, strerror(errno));
        warn_unusable(what, base, "cannot be opened", afterwards);
        return -1;
    }
    const char *const parts[] = {"cgc", sub};
    snprintf(path, len, "%s", base);
    for (int i = 0; i < 2; i++) {
        size_t used = strlen(path);
        snprintf(path + used, len - used, "/%s", parts[i]);
        char reason[256];
        int next = open_private_dir(fd, parts[i], reason, sizeof reason);
        close(fd);
        if (next < 0) {
            snprintf(why, why_len, "%s %s", path, reason);
            warn_unusable(what, path, reason, afterwards);
            return -1;
        }
        fd = next;
    }
    return fd;
}

const char *cachedir_read_fd(int fd, size_t max, bool own, char **out, size_t *size)
{
    struct stat st;
    const char *problem = NULL;
    char *buf = NULL;
    if (fstat(fd, &st) != 0) problem = "cannot be examined";
    else if (!S_ISREG(st.st_mode)) problem = "is not a regular file";
    else if (own && st.st_uid != geteuid()) problem = "belongs to another user";
    else if ((size_t)st.st_size > max) problem = "is too large";
    else if (!(buf = malloc((size_t)st.st_size + 1))) problem = "is too large to read";
    size_t got = 0;
    while (!problem && got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) problem = "could not be read whole";
        else got += (size_t)r;
    }
    close(fd);
    if (problem) {
        free(buf);
        return problem;
    }
    buf[got] = '\0';
    *out = buf;
    *size = got;
    return NULL;
}

const char *cachedir_read(int dfd, const char *name, size_t max, char **out, size_t *size,
                          bool *missing)
{
    *missing = false;
    /* O_NONBLOCK: a FIFO planted as an entry must not block the open (fstat refuses it) */
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        *missing = errno == ENOENT;
        return errno == ELOOP ? "is a symbolic link" : *missing ? "does not exist" : "cannot be opened";
    }
    return cachedir_read_fd(fd, max, true, out, size);
}

int cachedir_write(int dfd, const char *name, const void *buf, size_t n, mode_t mode)
{
    /* A temporary name beside NAME's, private to this process, so that concurrent cgc
     * processes never share one and a leftover says whose it was. No fsync: a file torn
     * by a crash fails its reader's checks and is made again. */
    static unsigned counter;
    char tmp[128];
    snprintf(tmp, sizeof tmp, ".%.64s.tmp.%ld.%u", name, (long)getpid(), counter++);
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0) return errno;
    int err = 0;
    for (const char *p = buf; n > 0 && !err;) {
        ssize_t put = write(fd, p, n);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) err = put < 0 ? errno : EIO;
        else p += put, n -= (size_t)put;
    }
    if (close(fd) != 0 && !err) err = errno;
    if (!err && renameat(dfd, tmp, dfd, name) != 0) err = errno;
    if (err) unlinkat(dfd, tmp, 0);
    return err;
}
