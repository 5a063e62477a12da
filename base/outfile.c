/* outfile.c: the rules of outfile.h, for every file cgc writes. */
#define _GNU_SOURCE
#include "outfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "diag.h"

/* ---- kinds ---- */

static bool is_json(int fd)
{
    char buf[64];
    ssize_t n = pread(fd, buf, sizeof buf, 0);
    if (n < 0) return false;
    if (memchr(buf, '\0', (size_t)n)) return false;
    ssize_t i = 0;
    while (i < n && strchr(" \t\r\n", buf[i])) i++;
    return i == n || buf[i] == '{' || buf[i] == '[';
}

const OutKind out_json = {"a JSON file", is_json, false};

static bool is_npy(int fd)
{
    char buf[6];
    ssize_t n = pread(fd, buf, sizeof buf, 0);
    return n == 0 || (n == 6 && memcmp(buf, "\x93NUMPY", 6) == 0);
}

const OutKind out_npy = {"a NumPy file", is_npy, false};
const OutKind out_generated = {NULL, NULL, false};

/* ---- the files the rules know ---- */

/* An input no output may land on (ROLE NULL), known by its device and inode; or an
 * output reserved for ROLE, known by its place (the file may be replaced, and its inode
 * given to another, while the run goes on). */
typedef struct Known {
    char *key;            /* inode_key()'s or place_key()'s */
    const char *role;     /* the output's */
    const char *what;     /* the input's, for messages; an output's: its path as given */
    const OutKind *may;   /* the kind of output that may replace the input */
} Known;

static Known *known;
static int nknown, capknown;

/* The directory PATH is in ("." for a bare name), malloc'd. */
static char *out_parent_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? xstrndup(path, slash == path ? 1 : (size_t)(slash - path)) : xstrdup(".");
}

/* PATH's device and inode (links followed), malloc'd; NULL when it does not exist. */
static char *inode_key(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) return NULL;
    char *key = xmalloc(48);
    snprintf(key, 48, "%ju:%ju", (uintmax_t)st.st_dev, (uintmax_t)st.st_ino);
    return key;
}

/* TARGET's place, malloc'd: the canonical path of its directory and its name (TARGET is
 * no link: target_of resolved it); NULL when the directory is missing. */
static char *place_key(const char *target)
{
    char *dir = out_parent_dir(target), *real = realpath(dir, NULL);
    free(dir);
    if (!real) return NULL;
    const char *slash = strrchr(target, '/'), *name = slash ? slash + 1 : target;
    char *key = xmalloc(strlen(real) + strlen(name) + 2);
    sprintf(key, "%s/%s", real, name);
    free(real);
    return key;
}

static void remember(char *key, const char *role, const char *what, const OutKind *may)
{
    if (nknown == capknown) {
        capknown = capknown ? 2 * capknown : 8;
        known = xrealloc(known, (size_t)capknown * sizeof *known);
    }
    known[nknown++] = (Known){key, role, what, may};
}

void out_protect(const char *path, const char *what, const OutKind *may)
{
    char *key = inode_key(path);
    if (key) remember(key, NULL, what, may);
}

int out_protect_read(const char *path, const char *what)
{
    out_protect(path, what, NULL);
    char *real = realpath(path, NULL), *place = real ? place_key(real) : NULL;
    int rc = 0;
    for (int i = 0; i < nknown && place && rc == 0; i++)
        if (known[i].role && strcmp(known[i].key, place) == 0) {
            cgc_error("cannot %s %s: it is %s (%s), which cgc would not write over; give another "
                      "name", known[i].role, known[i].what, what, path);
            rc = -1;
        }
    free(real);
    free(place);
    return rc;
}

/* Refuses TARGET (PATH for messages) when it is an input that KIND may not replace, or the
 * place of another role's output; with RESERVE, reserves its place for ROLE. 0 or -1. */
static int check_known(const char *role, const char *path, const char *target,
                       const OutKind *kind, bool reserve)
{
    char *inode = inode_key(target), *place = place_key(target);
    bool mine = false;
    int rc = 0;
    for (int i = 0; i < nknown && rc == 0; i++) {
        const Known *k = &known[i];
        if (!k->role && inode && strcmp(k->key, inode) == 0 && k->may != kind) {
            cgc_error("cannot %s %s: it is %s, which cgc would not write over; give another "
                      "name", role, path, k->what);
            rc = -1;
        } else if (k->role && place && strcmp(k->key, place) == 0 && strcmp(k->role, role) != 0) {
            cgc_error("cannot %s %s: that is the file cgc is told to %s; give each output a "
                      "file of its own", role, path, k->role);
            rc = -1;
        } else if (k->role && place && strcmp(k->key, place) == 0) {
            mine = true;
        }
    }
    if (rc == 0 && reserve && !mine && place) {
        remember(place, role, xstrdup(path), NULL);
        place = NULL;
    }
    free(inode);
    free(place);
    return rc;
}

/* ---- where an output lands ---- */

/* Whether the existing regular file TARGET holds what KIND may replace. */
static bool holds_kind(const char *target, const OutKind *kind)
{
    if (!kind->replaceable) return true;
    int fd = open(target, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    bool ok = fd >= 0 && kind->replaceable(fd);
    if (fd >= 0) close(fd);
    return ok;
}

/* Where an output of KIND to PATH lands (malloc'd): PATH when nothing is there, else the
 * regular file it names, through a symbolic link, when that holds what KIND may replace.
 * NULL after an error. */
static char *target_of(const char *role, const char *path, const OutKind *kind)
{
    struct stat st;
    size_t len = strlen(path);
    if (len == 0) {
        cgc_error("cannot %s '': an empty path names no file; give the name of a file", role);
        return NULL;
    }
    if (path[len - 1] == '/') {
        cgc_error("cannot %s %s: the path ends in '/', so it names a directory; give the name "
                  "of a file", role, path);
        return NULL;
    }
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return xstrdup(path);
        cgc_error("cannot %s %s: %s", role, path, strerror(errno));
        return NULL;
    }
    char *target = S_ISLNK(st.st_mode) ? realpath(path, NULL) : xstrdup(path);
    if (!target) {
        cgc_error("cannot %s %s: it is a symbolic link to nothing that exists; give the path "
                  "of a file", role, path);
        return NULL;
    }
    if (stat(target, &st) != 0 || !S_ISREG(st.st_mode)) {
        cgc_error("cannot %s %s: it is %s; give the name of a new file or of %s", role, path,
                  stat(target, &st) == 0 ? file_kind(st.st_mode) : "unreadable",
                  kind->holds ? kind->holds : "a regular file");
        free(target);
        return NULL;
    }
    if (!holds_kind(target, kind)) {
        cgc_error("cannot %s %s: the file exists and is not %s, which cgc would not write "
                  "over; remove it or give another name", role, path, kind->holds);
        free(target);
        return NULL;
    }
    return target;
}

/* TARGET, with PATH for messages: refused as target_of and check_known refuse, or in a
 * directory that cannot be written. */
static int check_target(const char *role, const char *path, const char *target,
                        const OutKind *kind, bool reserve)
{
    if (check_known(role, path, target, kind, reserve) != 0) return -1;
    char *dir = out_parent_dir(target);
    int ok = access(dir, W_OK | X_OK) == 0;
    if (!ok) cgc_error("cannot %s %s: directory %s is missing or not writable", role, path, dir);
    free(dir);
    return ok ? 0 : -1;
}

static int check(const char *role, const char *path, const OutKind *kind, bool reserve)
{
    char *target = target_of(role, path, kind);
    int rc = target ? check_target(role, path, target, kind, reserve) : -1;
    free(target);
    return rc;
}

int out_check(const char *role, const char *path, const OutKind *kind)
{
    return check(role, path, kind, false);
}

int out_reserve(const char *role, const char *path, const OutKind *kind)
{
    return check(role, path, kind, true);
}

/* ---- writing through a temporary file ---- */

/* Removes what an interrupted write to TARGET left: TARGET.tmp.XXXXXX, regular files. */
static void remove_stale_temps(const char *target)
{
    char *dir = out_parent_dir(target);
    const char *slash = strrchr(target, '/'), *base = slash ? slash + 1 : target;
    size_t blen = strlen(base);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        const char *name = e->d_name;
        if (strncmp(name, base, blen) != 0 || strncmp(name + blen, ".tmp.", 5) != 0 ||
            strlen(name + blen + 5) != 6)
            continue;
        char *tmp = xmalloc(strlen(dir) + strlen(name) + 2);
        sprintf(tmp, "%s/%s", dir, name);
        struct stat st;
        if (lstat(tmp, &st) == 0 && S_ISREG(st.st_mode)) unlink(tmp);
        free(tmp);
    }
    if (d) closedir(d);
    free(dir);
}

/* mkstemp makes a file 0600; an output gets what any new file of the user would, 0666
 * less the umask. */
static void give_default_mode(int fd)
{
    mode_t mask = umask(0);
    umask(mask);
    (void)fchmod(fd, 0666 & ~mask);
}

/* A rename is only durable once the directory entry is on the disk too. */
static bool sync_parent_dir(const char *path)
{
    char *dir = out_parent_dir(path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0) return false;
    bool ok = fsync(fd) == 0;
    close(fd);
    return ok;
}

int out_open(OutFile *o, const char *role, const char *path, const OutKind *kind)
{
    memset(o, 0, sizeof *o);
    char *target = target_of(role, path, kind);
    if (!target) return -1;
    if (check_target(role, path, target, kind, false) != 0) {
        free(target);
        return -1;
    }
    remove_stale_temps(target);
    static const char suffix[] = ".tmp.XXXXXX";
    size_t len = strlen(target);
    char *tmp = xmalloc(len + sizeof suffix);
    memcpy(tmp, target, len);
    memcpy(tmp + len, suffix, sizeof suffix);
    int fd = mkostemp(tmp, O_CLOEXEC);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "wb");
    if (!f) {
        cgc_error("cannot %s %s: %s", role, path, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        free(tmp);
        free(target);
        return -1;
    }
    give_default_mode(fd);
    *o = (OutFile){f, role, path, kind, target, tmp};
    return 0;
}

static void out_free(OutFile *o)
{
    free(o->target);
    free(o->tmp);
    memset(o, 0, sizeof *o);
}

void out_discard(OutFile *o)
{
    if (!o->f) return;
    fclose(o->f);
    unlink(o->tmp);
    out_free(o);
}

/* Flushes F: whether every write to it succeeded, with the first failure's errno in *ERR
 * (when a write failed before, errno still holds why: nothing since has failed). */
static bool flushed(FILE *f, int *err)
{
    int before = errno;
    errno = 0;
    bool ok = fflush(f) == 0 && !ferror(f);
    *err = errno ? errno : before;
    return ok;
}

int out_close(OutFile *o)
{
    int err;
    bool ok = flushed(o->f, &err);
    if (ok && o->kind->durable && fsync(fileno(o->f)) != 0) {
        ok = false;
        err = errno;
    }
    if (fclose(o->f) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (ok && rename(o->tmp, o->target) != 0) {
        ok = false;
        err = errno;
    }
    if (!ok) unlink(o->tmp);
    if (ok && o->kind->durable && !sync_parent_dir(o->target)) {
        ok = false;
        err = errno;
    }
    if (!ok)
        cgc_error("cannot %s %s: %s", o->role, o->path,
                  err ? strerror(err) : "a write failed (is the disk full?)");
    out_free(o);
    return ok ? 0 : -1;
}

int out_write(const char *role, const char *path, const OutKind *kind, const char *text,
              size_t n)
{
    OutFile o;
    if (out_open(&o, role, path, kind) != 0) return -1;
    if (n) (void)fwrite(text, 1, n, o.f);   /* out_close checks it */
    return out_close(&o);
}

/* ---- appended in place ---- */

FILE *out_append(const char *role, const char *path, const OutKind *kind)
{
    char *target = target_of(role, path, kind);
    if (!target) return NULL;
    FILE *f = NULL;
    if (check_target(role, path, target, kind, false) == 0) {
        int fd = open(target, O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0666);
        struct stat st;
        if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
            close(fd);   /* what was checked has been replaced since */
            fd = -1;
            errno = EINVAL;
        }
        if (fd >= 0) (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        f = fd < 0 ? NULL : fdopen(fd, "a");
        if (!f) {
            cgc_error("cannot %s %s: %s", role, path, strerror(errno));
            if (fd >= 0) close(fd);
        }
    }
    free(target);
    return f;
}

int out_flush(FILE *f, const char *role, const char *path, bool close)
{
    int err;
    bool ok = flushed(f, &err);
    if (close && fclose(f) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (!ok)
        cgc_error("cannot %s %s: %s", role, path,
                  err ? strerror(err) : "a write failed (is the disk full?)");
    return ok ? 0 : -1;
}

int out_stdout_done(void)
{
    int err;
    if (flushed(stdout, &err)) return 0;
    cgc_error("cannot write the standard output: %s",
              err ? strerror(err) : "a write failed (is the disk full?)");
    return -1;
}
