/* tune.c: the autotune choices file; see tune.h for the format. The parser is strict (a
 * file is taken whole or not at all) because what it holds decides which kernels run:
 * a choice that is read must be one that was written. */
#define _GNU_SOURCE
#include "tune.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/diag.h"
#include "../base/outfile.h"
#include "cachedir.h"

/* A plan has tens to hundreds of choices; the bounds keep a planted file from costing
 * more than a moment (duplicates are found by a scan per choice). */
enum { LINE_MAX_BYTES = 512, FILE_MAX_BYTES = 1 << 20, MAX_CHOICES = 8192, SLUG_MAX = 64 };

static const char *const kind_name[TUNE_NKINDS] = {"gemm", "kernel", "mlp", "window"};

/* ---- names ---- */

static bool token_char(int c)
{
    return isalnum(c) || strchr("_.:+=,-", c) != NULL;
}

static bool is_token(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > TUNE_TOKEN_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if (!token_char((unsigned char)s[i])) return false;
    return true;
}

/* The driver's device name: printable ASCII, no leading or trailing space. */
static bool is_device_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > TUNE_DEVICE_MAX || s[0] == ' ' || s[n - 1] == ' ') return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7e) return false;
    return true;
}

static bool fail(char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
    return false;
}

bool tune_init(TuneFile *t, const char *model, int arch, const char *device, uint64_t plan_hash,
               char *why, size_t why_len)
{
    memset(t, 0, sizeof *t);
    if (!is_token(model)) return fail(why, why_len, "model name '%.40s' cannot be stored", model);
    if (!is_device_name(device))
        return fail(why, why_len, "device name '%.40s' cannot be stored", device);
    if (arch < 10 || arch > 999) return fail(why, why_len, "architecture sm_%d", arch);
    snprintf(t->model, sizeof t->model, "%s", model);
    snprintf(t->device, sizeof t->device, "%s", device);
    t->arch = arch;
    t->plan_hash = plan_hash;
    t->tuning_ms = -1;
    return true;
}

void tune_free(TuneFile *t)
{
    free(t->choices);
    memset(t, 0, sizeof *t);
}

const TuneChoice *tune_find(const TuneFile *t, TuneKind kind, const char *key)
{
    for (int i = 0; i < t->nchoices; i++)
        if (t->choices[i].kind == kind && strcmp(t->choices[i].key, key) == 0) return &t->choices[i];
    return NULL;
}

bool tune_add(TuneFile *t, TuneKind kind, const char *key, const char *choice, double ms,
              char *why, size_t why_len)
{
    if ((unsigned)kind >= TUNE_NKINDS) return fail(why, why_len, "no such kind of choice");
    if (!is_token(key)) return fail(why, why_len, "key '%.40s' is not a token", key);
    if (!is_token(choice)) return fail(why, why_len, "choice '%.40s' is not a token", choice);
    if (!isfinite(ms)) return fail(why, why_len, "time of %s %s is not finite", kind_name[kind], key);
    if (tune_find(t, kind, key)) return fail(why, why_len, "%s %s is chosen twice", kind_name[kind], key);
    if (t->nchoices == MAX_CHOICES) return fail(why, why_len, "more than %d choices", MAX_CHOICES);
    if (t->nchoices == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        TuneChoice *c = realloc(t->choices, (size_t)cap * sizeof *c);
        if (!c) return fail(why, why_len, "out of memory");
        t->choices = c, t->cap = cap;
    }
    TuneChoice *c = &t->choices[t->nchoices++];
    c->kind = kind;
    snprintf(c->key, sizeof c->key, "%s", key);
    snprintf(c->choice, sizeof c->choice, "%s", choice);
    c->ms = ms < 0 ? -1 : ms;
    return true;
}

void tune_file_name(const char *model, int arch, const char *device, char *buf, size_t len)
{
    char slug[SLUG_MAX + 1];      /* cut short: the file says which device it is for */
    size_t n = 0;
    for (const char *s = device; *s && n < sizeof slug - 1; s++)
        slug[n++] = isalnum((unsigned char)*s) ? (char)tolower((unsigned char)*s) : '-';
    slug[n] = '\0';
    snprintf(buf, len, "%s.sm_%d.%s.tune", model, arch, slug);
}

/* ---- writing ---- */

char *tune_format(const TuneFile *t)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f) return NULL;
    fprintf(f, "# cgc autotune choices: model %s on %s (sm_%d).\n", t->model, t->device, t->arch);
    fprintf(f, "# Read back by cgc for the same plan; delete this file to tune again.\n");
    fprintf(f, "# A choice: KIND KEY CHOICE MS (the chosen candidate's median time; - when "
               "chosen\n# by heuristics, untimed).\n");
    fprintf(f, "cgc-autotune %d\nmodel %s\ndevice sm_%d %s\nplan %016llx\n", TUNE_VERSION,
            t->model, t->arch, t->device, (unsigned long long)t->plan_hash);
    if (!isfinite(t->tuning_ms) || t->tuning_ms < 0) fprintf(f, "tuning none\n");
    else fprintf(f, "tuning %.6g ms\n", t->tuning_ms);
    for (int i = 0; i < t->nchoices; i++) {
        const TuneChoice *c = &t->choices[i];
        fprintf(f, "%s %s %s ", kind_name[c->kind], c->key, c->choice);
        if (c->ms < 0) fprintf(f, "-\n");
        else fprintf(f, "%.6g\n", c->ms);
    }
    fprintf(f, "end %d\n", t->nchoices);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* ---- reading ---- */

/* The parser's position: the line being read, split into words. */
typedef struct Parser {
    int line;
    char raw[LINE_MAX_BYTES + 1];   /* the line as read, less a trailing CR */
    char buf[LINE_MAX_BYTES + 1];   /* the same, its words NUL-terminated */
    char *word[8];
    int nwords;
    const char *rest;               /* in raw: the line from its third word (device names) */
    char *why;
    size_t why_len;
} Parser;

static bool bad(Parser *p, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fail(p->why, p->why_len, "line %d: %s", p->line, msg);
}

static void split(Parser *p)
{
    p->nwords = 0;
    p->rest = "";
    memcpy(p->buf, p->raw, sizeof p->buf);
    char *s = p->buf;
    while (p->nwords < 8) {
        while (*s == ' ' || *s == '\t') s++;
        if (!*s) break;
        if (p->nwords == 2) p->rest = p->raw + (s - p->buf);
        p->word[p->nwords++] = s;
        while (*s && *s != ' ' && *s != '\t') s++;
        if (*s) *s++ = '\0';
    }
}

/* A time: "-" (untimed, -1) or a finite number >= 0. */
static bool parse_ms(const char *s, double *ms)
{
    if (strcmp(s, "-") == 0) {
        *ms = -1;
        return true;
    }
    char *end;
    *ms = strtod(s, &end);
    return end != s && *end == '\0' && isfinite(*ms) && *ms >= 0;
}

static bool parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi || !isdigit((unsigned char)s[0])) return false;
    *out = (int)v;
    return true;
}

/* The header lines, in order: each is checked by header_line's case for STAGE. */
enum { H_MAGIC, H_MODEL, H_DEVICE, H_PLAN, H_TUNING, H_CHOICES, H_DONE };

static bool header_line(Parser *p, int stage, TuneFile *t)
{
    char **w = p->word;
    switch (stage) {
    case H_MAGIC: {
        int v;
        if (p->nwords != 2 || strcmp(w[0], "cgc-autotune") != 0)
            return bad(p, "not a cgc autotune file (it starts 'cgc-autotune %d')", TUNE_VERSION);
        if (!parse_int(w[1], 0, INT_MAX, &v) || v != TUNE_VERSION)
            return bad(p, "format version '%.20s'; this cgc reads version %d", w[1], TUNE_VERSION);
        return true;
    }
    case H_MODEL:
        if (p->nwords != 2 || strcmp(w[0], "model") != 0 || !is_token(w[1]))
            return bad(p, "expected 'model NAME'");
        snprintf(t->model, sizeof t->model, "%s", w[1]);
        return true;
    case H_DEVICE: {
        if (p->nwords < 3 || strcmp(w[0], "device") != 0 || strncmp(w[1], "sm_", 3) != 0 ||
            !parse_int(w[1] + 3, 10, 999, &t->arch))
            return bad(p, "expected 'device sm_XX NAME'");
        /* the name is the rest of the line, its spaces included */
        if (!is_device_name(p->rest)) return bad(p, "the device name is not printable ASCII");
        snprintf(t->device, sizeof t->device, "%s", p->rest);
        return true;
    }
    case H_PLAN: {
        char *end;
        if (p->nwords != 2 || strcmp(w[0], "plan") != 0 || strlen(w[1]) != 16)
            return bad(p, "expected 'plan' and 16 hex digits");
        for (const char *s = w[1]; *s; s++)
            if (!isxdigit((unsigned char)*s)) return bad(p, "expected 'plan' and 16 hex digits");
        t->plan_hash = strtoull(w[1], &end, 16);
        return true;
    }
    case H_TUNING:
        if (p->nwords == 2 && strcmp(w[0], "tuning") == 0 && strcmp(w[1], "none") == 0) {
            t->tuning_ms = -1;
            return true;
        }
        if (p->nwords != 3 || strcmp(w[0], "tuning") != 0 || strcmp(w[2], "ms") != 0 ||
            !parse_ms(w[1], &t->tuning_ms) || t->tuning_ms < 0)
            return bad(p, "expected 'tuning none' or 'tuning T ms'");
        return true;
    }
    return bad(p, "internal: header stage %d", stage);
}

/* A choice line, or the end line (*DONE). */
static bool choice_line(Parser *p, TuneFile *t, bool *done)
{
    char **w = p->word;
    if (strcmp(w[0], "end") == 0) {
        int n;
        if (p->nwords != 2 || !parse_int(w[1], 0, INT_MAX, &n)) return bad(p, "expected 'end N'");
        if (n != t->nchoices)
            return bad(p, "'end %d' but the file has %d choices (edited or cut short?)", n,
                       t->nchoices);
        *done = true;
        return true;
    }
    int kind = 0;
    while (kind < TUNE_NKINDS && strcmp(w[0], kind_name[kind]) != 0) kind++;
    if (kind == TUNE_NKINDS)
        return bad(p, "'%.40s' is not a kind of choice (gemm, kernel or mlp) nor 'end'", w[0]);
    double ms;
    if (p->nwords != 4) return bad(p, "expected '%s KEY CHOICE MS'", kind_name[kind]);
    if (!parse_ms(w[3], &ms)) return bad(p, "time '%.40s' is not '-' nor a number >= 0", w[3]);
    char why[200];
    if (!tune_add(t, (TuneKind)kind, w[1], w[2], ms, why, sizeof why)) return bad(p, "%s", why);
    return true;
}

bool tune_parse(const char *text, size_t n, TuneFile *out, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    Parser p = {.why = why, .why_len = why_len};
    int stage = H_MAGIC;
    bool ok = true;
    for (size_t at = 0; ok && at < n;) {
        p.line++;
        const char *nl = memchr(text + at, '\n', n - at);
        size_t len = (nl ? (size_t)(nl - text) : n) - at;
        if (len > LINE_MAX_BYTES) {
            ok = bad(&p, "longer than %d bytes", LINE_MAX_BYTES);
            break;
        }
        memset(p.raw, 0, sizeof p.raw);
        memcpy(p.raw, text + at, len);
        at += len + (nl != NULL);
        if (strlen(p.raw) != len) {
            ok = bad(&p, "a NUL byte");
            break;
        }
        /* trailing blanks, and the CR of a CRLF checkout, mean nothing */
        while (len && (p.raw[len - 1] == '\r' || p.raw[len - 1] == ' ' || p.raw[len - 1] == '\t'))
            p.raw[--len] = '\0';
        split(&p);
        if (p.nwords == 0 || p.word[0][0] == '#') continue;
        if (stage == H_DONE) ok = bad(&p, "text after the 'end' line");
        else if (stage < H_CHOICES) ok = header_line(&p, stage++, out);
        else {
            bool done = false;
            ok = choice_line(&p, out, &done);
            if (done) stage = H_DONE;
        }
    }
    if (ok && stage != H_DONE)
        ok = fail(why, why_len, "%s", stage == H_MAGIC ? "empty: not a cgc autotune file"
                                                       : "no 'end' line: the file is cut short");
    if (!ok) tune_free(out);
    return ok;
}

bool tune_read(const char *path, TuneFile *out, bool *missing, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    /* O_NONBLOCK: a FIFO must not block the open (cachedir_read_fd refuses it) */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    *missing = fd < 0 && errno == ENOENT;
    if (fd < 0) {
        snprintf(why, why_len, "cannot be opened: %s", strerror(errno));
        return false;
    }
    char *text = NULL;
    size_t n = 0;
    const char *problem = cachedir_read_fd(fd, FILE_MAX_BYTES, false, &text, &n);
    if (problem) {
        bool kind = strcmp(problem, "is not a regular file") == 0 || strcmp(problem, "is too large") == 0;
        snprintf(why, why_len, "%s%s", problem,
                 kind ? " (a choices file is a regular file of at most 1 MiB)" : "");
        return false;
    }
    bool ok = tune_parse(text, n, out, why, why_len);
    free(text);
    return ok;
}

/* TUNE_FOUND when OUT, as read, was made for WANT's model, device and plan; else
 * TUNE_REFUSED with WHY, OUT freed. */
static TuneLoad match(const TuneFile *want, TuneFile *out, char *why, size_t why_len)
{
    const char *other = strcmp(out->model, want->model) != 0     ? "another model"
                        : out->arch != want->arch                ? "another architecture"
                        : strcmp(out->device, want->device) != 0 ? "another device"
                        : out->plan_hash != want->plan_hash      ? "another plan"
                                                                 : NULL;
    if (!other) return TUNE_FOUND;
    snprintf(why, why_len, "was written for %s", other);
    tune_free(out);
    return TUNE_REFUSED;
}

TuneLoad tune_load_file(const TuneFile *want, const char *path, TuneFile *out, char *why,
                        size_t why_len)
{
    bool missing;
    if (!tune_read(path, out, &missing, why, why_len)) return missing ? TUNE_MISSING : TUNE_REFUSED;
    return match(want, out, why, why_len);
}

/* T as NAME in directory DFD (closed here), whole or not at all, a new file with MODE
 * less the umask; PATH for messages. */
static int write_in(int dfd, const char *name, const TuneFile *t, mode_t mode, const char *path,
                    char *why, size_t why_len)
{
    char *text = tune_format(t);
    int err = text ? cachedir_write(dfd, name, text, strlen(text), mode) : ENOMEM;
    free(text);
    close(dfd);
    if (err) snprintf(why, why_len, "cannot write %s: %s", path, strerror(err));
    return err ? -1 : 0;
}

/* Whether FD begins as tune_format's files do. */
static bool is_choices(int fd)
{
    static const char head[] = "# cgc autotune choices";
    char buf[sizeof head - 1];
    return pread(fd, buf, sizeof buf, 0) == (ssize_t)sizeof buf &&
           memcmp(buf, head, sizeof buf) == 0;
}

const OutKind tune_choices = {"a choices file (written by cgc's max-autotune)", is_choices,
                              false};

int tune_check_file(const char *path)
{
    return out_check(TUNE_FILE_ROLE, path, &tune_choices);
}

int tune_store_file(const TuneFile *t, const char *path)
{
    char *text = tune_format(t);
    if (!text) {
        cgc_error("cannot %s %s: out of memory", TUNE_FILE_ROLE, path);
        return -1;
    }
    int rc = out_write(TUNE_FILE_ROLE, path, &tune_choices, text, strlen(text));
    free(text);
    return rc;
}

/* ---- the file in the cache ---- */

static int open_dir(char *path, size_t path_len, char *why, size_t why_len)
{
    return cachedir_open("tune", "autotune", "tuning without keeping the choices", path,
                         path_len, why, why_len);
}

TuneLoad tune_load(const TuneFile *want, TuneFile *out, char *path, size_t path_len, char *why,
                   size_t why_len)
{
    char dir[PATH_MAX], name[2 * TUNE_TOKEN_MAX + 32];
    memset(out, 0, sizeof *out);
    if (path_len) path[0] = '\0';
    int dfd = open_dir(dir, sizeof dir, why, why_len);
    if (dfd < 0) return TUNE_NO_CACHE;
    tune_file_name(want->model, want->arch, want->device, name, sizeof name);
    snprintf(path, path_len, "%s/%s", dir, name);
    char *text = NULL;
    size_t n = 0;
    bool missing;
    const char *problem = cachedir_read(dfd, name, FILE_MAX_BYTES, &text, &n, &missing);
    close(dfd);
    if (missing) return TUNE_MISSING;
    if (problem) {
        snprintf(why, why_len, "%s", problem);
        return TUNE_REFUSED;
    }
    bool parsed = tune_parse(text, n, out, why, why_len);
    free(text);
    return parsed ? match(want, out, why, why_len) : TUNE_REFUSED;
}

int tune_store(const TuneFile *t, char *path, size_t path_len, char *why, size_t why_len)
{
    char dir[PATH_MAX], name[2 * TUNE_TOKEN_MAX + 32];
    if (path_len) path[0] = '\0';
    int dfd = open_dir(dir, sizeof dir, why, why_len);
    if (dfd < 0) return -1;
    tune_file_name(t->model, t->arch, t->device, name, sizeof name);
    snprintf(path, path_len, "%s/%s", dir, name);
    return write_in(dfd, name, t, 0600, path, why, why_len);
}
