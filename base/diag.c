/* diag.c: source loading and the one diagnostic path (see diag.h). */
#define _GNU_SOURCE   /* vasprintf */
#include "diag.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Longest stretch of a source line shown under a diagnostic; huge lines are windowed. */
enum { SHOWN_LINE_BYTES = 200 };

/* Every error reported, in any source: see diag_error_count. */
static int error_count;

int diag_error_count(void) { return error_count; }

Source *source_from_string(const char *path, const char *text, size_t len)
{
    /* A UTF-8 byte-order mark, which some editors write first, marks the encoding and is
     * no part of the text (as for Python and GCC). */
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) text += 3, len -= 3;
    Source *src = xcalloc(1, sizeof *src);
    src->path = xstrdup(path);
    src->text = xmalloc(len + 1);
    memcpy(src->text, text, len);
    src->text[len] = '\0';
    src->len = len;
    return src;
}

/* Reads all of FD (a regular file of SIZE bytes when it was opened) into a new buffer;
 * *LEN gets its length. A file that grew past SOURCE_MAX_BYTES since is cut there, and
 * *LEN says so by exceeding it. NULL, with errno set, on a read error. */
static char *read_all(int fd, size_t size, size_t *len)
{
    size_t cap = size + 1, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n == cap) {
            if (cap > SOURCE_MAX_BYTES) break;
            cap = 2 * cap < SOURCE_MAX_BYTES + 1 ? 2 * cap : SOURCE_MAX_BYTES + 1;
            buf = xrealloc(buf, cap);
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int saved = errno;
            free(buf);
            errno = saved;
            return NULL;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    *len = n;
    return buf;
}

static void too_large(const char *path, long long bytes)
{
    cgc_error("%s is %lld bytes; a .net file may be at most %zu MiB", path, bytes,
              SOURCE_MAX_BYTES >> 20);
}

int open_regular(const char *path, struct stat *st)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -1;
    if (fstat(fd, st) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return -2;
    }
    (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

const char *file_kind(mode_t m)
{
    return S_ISREG(m) ? "a regular file" : S_ISDIR(m) ? "a directory"
         : S_ISFIFO(m) ? "a FIFO (named pipe)" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket"
         : S_ISLNK(m) ? "a symbolic link" : "not a regular file";
}

Source *source_load(const char *path)
{
    struct stat st;
    int fd = open_regular(path, &st);
    if (fd == -1) {
        cgc_error("cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    /* Checked before reading: /dev/zero or a huge file would otherwise be read until
     * memory runs out. */
    if (fd == -2) {
        cgc_error("%s: not a regular file but %s", path, file_kind(st.st_mode));
        return NULL;
    }
    if ((uintmax_t)st.st_size > SOURCE_MAX_BYTES) {
        too_large(path, (long long)st.st_size);
        close(fd);
        return NULL;
    }
    size_t len = 0;
    char *buf = read_all(fd, (size_t)st.st_size, &len);
    int saved = errno;
    close(fd);
    if (!buf) {
        cgc_error("cannot read %s: %s", path, strerror(saved));
        return NULL;
    }
    if (len > SOURCE_MAX_BYTES) {
        too_large(path, (long long)len);
        free(buf);
        return NULL;
    }
    Source *src = source_from_string(path, buf, len);
    free(buf);
    return src;
}

void source_free(Source *src)
{
    if (!src) return;
    free((char *)src->path);
    free(src->text);
    free(src->line_starts);
    free(src);
}

static void index_lines(Source *src)
{
    const char *p = src->text, *end = src->text + src->len;
    int n = 1;
    for (const char *nl; (nl = memchr(p, '\n', (size_t)(end - p))); p = nl + 1) n++;
    src->line_starts = xmalloc((size_t)n * sizeof *src->line_starts);
    src->nlines = 0;
    src->line_starts[src->nlines++] = 0;
    p = src->text;
    for (const char *nl; (nl = memchr(p, '\n', (size_t)(end - p))); p = nl + 1)
        src->line_starts[src->nlines++] = (size_t)(nl + 1 - src->text);
}

const char *source_line_start(Source *src, int line)
{
    if (!src->line_starts) index_lines(src);
    if (line < 1 || line > src->nlines) return NULL;
    return src->text + src->line_starts[line - 1];
}

static int is_utf8_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

/* Prints the source line and a caret under column COL. Control bytes are shown as '?'
 * so that a malformed file cannot garble the terminal; tabs are kept so the caret lines up. */
static void show_line(Source *src, SrcLoc loc)
{
    const char *p = source_line_start(src, loc.line);
    if (!p) return;
    const char *end = src->text + src->len;
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) eol = end;
    if (eol > p && eol[-1] == '\r') eol--;

    /* Byte offset of the caret's character. */
    const char *caret = p;
    for (int c = 1; c < loc.col && caret < eol; c++) {
        caret++;
        while (caret < eol && is_utf8_continuation((unsigned char)*caret)) caret++;
    }
    /* Window long lines around the caret. */
    const char *from = p, *to = eol;
    if (to - from > SHOWN_LINE_BYTES) {
        from = caret - SHOWN_LINE_BYTES / 2 > p ? caret - SHOWN_LINE_BYTES / 2 : p;
        while (from > p && is_utf8_continuation((unsigned char)*from)) from--;
        to = from + SHOWN_LINE_BYTES < eol ? from + SHOWN_LINE_BYTES : eol;
    }
    for (const char *q = from; q < to; q++) {
        unsigned char c = (unsigned char)*q;
        fputc((c < 0x20 && c != '\t') || c == 0x7f ? '?' : c, stderr);
    }
    fputc('\n', stderr);
    for (const char *q = from; q < caret && q < to; q++) {
        if (is_utf8_continuation((unsigned char)*q)) continue;
        fputc(*q == '\t' ? '\t' : ' ', stderr);
    }
    fputs("^\n", stderr);
}

/* FMT's message, malloc'd (NULL when out of memory). A diagnostic is then written by one
 * fprintf, one write on unbuffered stderr, so that processes sharing stderr (the ranks
 * under mpirun) never split each other's lines. */
static char *message(const char *fmt, va_list ap)
{
    char *msg;
    return vasprintf(&msg, fmt, ap) < 0 ? NULL : msg;
}

static void report(Source *src, SrcLoc loc, const char *kind, const char *fmt, va_list ap)
{
    char *msg = message(fmt, ap);
    fflush(stdout);
    if (loc.line > 0)
        fprintf(stderr, "%s:%d:%d: %s: %s\n", src->path, loc.line, loc.col, kind, msg ? msg : fmt);
    else
        fprintf(stderr, "%s: %s: %s\n", src->path, kind, msg ? msg : fmt);
    free(msg);
    if (loc.line > 0) show_line(src, loc);
}

void diag_verror(Source *src, SrcLoc loc, const char *fmt, va_list ap)
{
    report(src, loc, "error", fmt, ap);
    src->nerrors++;
    error_count++;
}

void diag_error(Source *src, SrcLoc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_verror(src, loc, fmt, ap);
    va_end(ap);
}

void diag_note(Source *src, SrcLoc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report(src, loc, "note", fmt, ap);
    va_end(ap);
}

/* The rank of a job of several that this process is (diag_set_rank), or -1. */
static int job_rank = -1;

void diag_set_rank(int rank) { job_rank = rank; }

/* "cgc: KIND: [rank R: ]MESSAGE" on stderr, after whatever stdout holds. */
static void report_plain(const char *kind, const char *fmt, va_list ap)
{
    char *msg = message(fmt, ap), rank[32] = "";
    if (job_rank >= 0) snprintf(rank, sizeof rank, "rank %d: ", job_rank);
    fflush(stdout);
    fprintf(stderr, "cgc: %s: %s%s\n", kind, rank, msg ? msg : fmt);
    free(msg);
}

void cgc_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report_plain("error", fmt, ap);
    va_end(ap);
    error_count++;
}

void cgc_warning(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report_plain("warning", fmt, ap);
    va_end(ap);
}

void cgc_internal_error(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fprintf(stderr, "cgc: internal error at %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputs("\nThis is a bug in cgc, not in your model; please report it.\n", stderr);
    va_end(ap);
    abort();
}

/* Without allocating: the message is all that is left to do. */
static void out_of_memory(double bytes)
{
    fflush(stdout);
    fprintf(stderr, "cgc: error: out of memory: %.3g MB more were refused; free memory, or "
                    "raise this process's limit (ulimit -d, ulimit -v)\n", bytes / 1e6);
    exit(1);
}

uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * FNV_PRIME;
    return h;
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) out_of_memory((double)n);
    return p;
}

void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) out_of_memory((double)count * (double)size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p) out_of_memory((double)n);
    return p;
}

char *xstrdup(const char *s) { return xstrndup(s, strlen(s)); }

char *xstrndup(const char *s, size_t n)
{
    char *d = xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static int same_letter(char a, char b) { return (a | 0x20) == (b | 0x20); }

/* Optimal string alignment distance, case-insensitive: insertions, deletions,
 * substitutions and swaps of two adjacent letters ("bacth" for "batch") cost 1 each, a
 * swapped pair is not edited again. Gives up (returning LIMIT+1) on long names. */
static size_t edit_distance(const char *a, const char *b, size_t limit)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return limit + 1;
    /* Rows i-2, i-1 and i of the distance matrix between prefixes. */
    size_t rows[3][65];
    size_t *before = rows[0], *prev = rows[1], *cur = rows[2];
    for (size_t j = 0; j <= lb; j++) prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t best = prev[j - 1] + !same_letter(a[i - 1], b[j - 1]);
            if (prev[j] + 1 < best) best = prev[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            if (i > 1 && j > 1 && same_letter(a[i - 1], b[j - 2]) &&
                same_letter(a[i - 2], b[j - 1]) && before[j - 2] + 1 < best)
                best = before[j - 2] + 1;
            cur[j] = best;
        }
        size_t *t = before;
        before = prev, prev = cur, cur = t;
    }
    return prev[lb];
}

const char *diag_closest(const char *name, const char *const *candidates)
{
    size_t len = strlen(name);
    /* A typo is at most a third of the name, and at least one edit is allowed. */
    size_t limit = len / 3 > 0 ? len / 3 : 1;
    const char *best = NULL;
    size_t best_d = limit + 1;
    for (const char *const *c = candidates; *c; c++) {
        size_t d = edit_distance(name, *c, limit);
        if (d < best_d) {
            best_d = d;
            best = *c;
        }
    }
    return best;
}

const char *diag_quote(const char *s, size_t max)
{
    static char bufs[4][128];
    static int next;
    char *b = bufs[next++ & 3];
    if (max > sizeof bufs[0] - 4) max = sizeof bufs[0] - 4;
    size_t n = strlen(s);
    if (n <= max) {
        memcpy(b, s, n + 1);
    } else {
        size_t cut = max;
        while (cut > 0 && is_utf8_continuation((unsigned char)s[cut])) cut--;
        memcpy(b, s, cut);
        memcpy(b + cut, "...", 4);
    }
    return b;
}

void diag_format_bytes(size_t n, char *buf, size_t len)
{
    if (n >= (size_t)1 << 30) snprintf(buf, len, "%.2f GB", (double)n / (double)((size_t)1 << 30));
    else if (n >= (size_t)1 << 20) snprintf(buf, len, "%.2f MB", (double)n / (double)((size_t)1 << 20));
    else if (n >= 1024) snprintf(buf, len, "%.1f KB", (double)n / 1024.0);
    else snprintf(buf, len, "%zu bytes", n);
}
