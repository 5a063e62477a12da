/* csv.c: the CSV reader of csv.h. */
#include "csv.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/diag.h"
#include "../base/outfile.h"

/* What ended a field: a comma, the record's end, or an error (reported). */
enum { ENDS_FIELD, ENDS_RECORD, ENDS_BADLY };

typedef struct Scan {
    const char *path;
    const char *p, *end;
    int64_t line;       /* of the byte at p, from 1 */
    char *buf;          /* the field being read, unquoted */
    size_t len, cap;
} Scan;

static void put(Scan *s, char c)
{
    if (s->len + 1 >= s->cap) s->buf = xrealloc(s->buf, s->cap = s->cap ? 2 * s->cap : 256);
    s->buf[s->len++] = c;
}

/* At a record's end: a newline (LF or CRLF, consumed) or the file's end. */
static bool record_end(Scan *s)
{
    if (s->p == s->end) return true;
    if (*s->p == '\r' && s->p + 1 < s->end && s->p[1] == '\n') s->p++;
    if (*s->p != '\n') return false;
    s->p++, s->line++;
    return true;
}

/* A quoted field, from its opening quote to its closing one. */
static int quoted(Scan *s)
{
    int64_t opened = s->line;
    for (s->p++;; s->p++) {
        if (s->p == s->end) {
            cgc_error("%s: line %lld: a quoted field is not closed", s->path, (long long)opened);
            return ENDS_BADLY;
        }
        if (*s->p == '"' && (s->p + 1 == s->end || s->p[1] != '"')) break;
        if (*s->p == '"') s->p++;   /* "" is a quote */
        if (*s->p == '\n') s->line++;
        put(s, *s->p);
    }
    s->p++;
    if (s->p < s->end && *s->p == ',') return s->p++, ENDS_FIELD;
    if (record_end(s)) return ENDS_RECORD;
    cgc_error("%s: line %lld: text after a field's closing quote", s->path, (long long)s->line);
    return ENDS_BADLY;
}

/* The field at S->p into S->buf (NUL-terminated): what ended it. */
static int field(Scan *s)
{
    s->len = 0;
    int ends = ENDS_RECORD;
    if (s->p < s->end && *s->p == '"') {
        ends = quoted(s);
    } else {
        while (s->p < s->end && *s->p != ',' && *s->p != '\n') put(s, *s->p++);
        if (s->len > 0 && s->buf[s->len - 1] == '\r') s->len--;   /* CRLF */
        if (s->p < s->end && *s->p == ',') s->p++, ends = ENDS_FIELD;
        else if (s->p < s->end) s->p++, s->line++;
    }
    put(s, '\0');
    s->len--;
    return ends;
}

/* Skips blank lines (empty, or a lone CR). */
static void skip_blank(Scan *s)
{
    while (s->p < s->end && (*s->p == '\n' || (*s->p == '\r' && s->p + 1 < s->end && s->p[1] == '\n'))) {
        s->p += *s->p == '\r' ? 2 : 1;
        s->line++;
    }
}

static int scan(Scan *s, CsvField on_field, CsvRecord on_record, void *ctx)
{
    if (s->end - s->p >= 3 && memcmp(s->p, "\xef\xbb\xbf", 3) == 0) s->p += 3;
    for (int64_t record = 0;; record++) {
        skip_blank(s);
        if (s->p == s->end) return 0;
        int64_t line = s->line;
        int col = 0, ends = ENDS_FIELD;
        while (ends == ENDS_FIELD) {
            ends = field(s);
            if (ends == ENDS_BADLY || on_field(ctx, record, line, col++, s->buf, s->len) != 0) return -1;
        }
        if (on_record(ctx, record, line, col) != 0) return -1;
    }
}

int csv_read(const char *path, CsvField on_field, CsvRecord on_record, void *ctx)
{
    struct stat st;
    int fd = open_regular(path, &st);
    if (fd == -2) cgc_error("%s is %s, not a CSV file", path, file_kind(st.st_mode));
    else if (fd < 0) cgc_error("%s: cannot open: %s", path, strerror(errno));
    if (fd >= 0 && out_protect_read(path, OUT_READ_BY_RUN) != 0) close(fd), fd = -1;
    if (fd < 0) return -1;
    size_t n = (size_t)st.st_size;
    void *map = n ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    int err = errno;
    close(fd);
    if (map == MAP_FAILED) {
        cgc_error("%s: cannot map the file: %s", path, strerror(err));
        return -1;
    }
    const char *bytes = map ? (const char *)map : "";
    Scan s = { path, bytes, bytes + n, 1, NULL, 0, 0 };
    int rc = scan(&s, on_field, on_record, ctx);
    free(s.buf);
    if (map) munmap(map, n);
    return rc;
}
