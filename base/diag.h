/* diag.h: source files, locations and the one diagnostic path.
 *
 * Every error a user can cause is reported through diag_error():
 *     FILE:LINE:COL: error: MESSAGE
 *     <the source line>
 *     <spaces>^
 * LINE and COL are 1-based; COL counts characters (UTF-8 code points), not bytes.
 * Errors that are cgc's own bugs go through CGC_INTERNAL(), which names the C file
 * and line instead, so the two can never be confused.
 */
#ifndef CGC_DIAG_H
#define CGC_DIAG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* A position in a .net file. line == 0 means "no location" (command line, defaults). */
typedef struct SrcLoc {
    int line;
    int col;
} SrcLoc;

/* A loaded .net file: its name as given and its bytes (NUL-terminated copy). */
typedef struct Source {
    const char *path;   /* as the user wrote it, used in messages */
    char *text;         /* whole file, NUL-terminated; embedded NULs are kept in len */
    size_t len;
    int nerrors;        /* errors reported against this file so far */
    /* Byte offset of the start of each line, built on the first source_line_start so that
     * finding a line costs the same at the end of a long file as at its start. */
    size_t *line_starts;
    int nlines;
} Source;

/* The largest .net file source_load accepts: far beyond any real model, small enough
 * that reading it cannot exhaust memory. */
#define SOURCE_MAX_BYTES ((size_t)16 << 20)

/* Reads PATH, which must be a regular file of at most SOURCE_MAX_BYTES; otherwise prints
 * "cgc: error: ..." (cannot read it, not a regular file, too large) and returns NULL. */
Source *source_load(const char *path);
/* Wraps an in-memory text (tests); the text is copied. */
Source *source_from_string(const char *path, const char *text, size_t len);
void source_free(Source *src);
/* Start of line LINE (1-based) of SRC's text, or NULL when there is no such line. */
const char *source_line_start(Source *src, int line);

/* FILE:LINE:COL: error: MESSAGE, the line, a caret. Increments src->nerrors. */
void diag_error(Source *src, SrcLoc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void diag_verror(Source *src, SrcLoc loc, const char *fmt, va_list ap);
/* A follow-up line: "FILE:LINE:COL: note: MESSAGE" with its caret (e.g. "first bound here"). */
void diag_note(Source *src, SrcLoc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* An error that is not tied to a place in the file: "cgc: error: MESSAGE". */
void cgc_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "cgc: warning: MESSAGE": something the user should know that does not stop the run. */
void cgc_warning(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* In a job of several ranks, cgc_error and cgc_warning name RANK after their kind
 * ("cgc: error: rank 1: ..."), since every rank prints its own; -1 (the default) names
 * none. Errors in a .net file keep their FILE:LINE:COL form. */
void diag_set_rank(int rank);

/* Errors reported so far through diag_error and cgc_error, whatever their source (a
 * command-line value is a Source of its own): 0 means nothing has been said yet. */
int diag_error_count(void);

/* cgc's own bugs: "cgc: internal error at compiler/ir.c:123: MESSAGE", then abort(). */
#define CGC_INTERNAL(...) cgc_internal_error(__FILE__, __LINE__, __VA_ARGS__)
#define CGC_ASSERT(cond) \
    do { if (!(cond)) CGC_INTERNAL("assertion failed: %s", #cond); } while (0)
void cgc_internal_error(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));

/* Allocation that never returns NULL: on failure, "cgc: out of memory" and exit(1). */
void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

/* FNV-1a, 64 bits: hash H (FNV_BASIS to begin with) continued over N bytes at P. What
 * cgc hashes with: names, plans (the autotune cache's keys), programs across ranks. */
#define FNV_BASIS 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull
uint64_t fnv1a(uint64_t h, const void *p, size_t n);

/* "did you mean": the candidate closest to NAME by edit distance (case-insensitive; an
 * insertion, deletion, substitution or swap of two adjacent letters is one edit), or
 * NULL when none is close enough to be a plausible typo: at most a third of NAME's
 * length, and at least one edit. Candidates are a NULL-terminated array. */
const char *diag_closest(const char *name, const char *const *candidates);

/* For quoting user text in messages: at most MAX bytes of S, with "..." when cut.
 * Returns a pointer into one of a few rotating static buffers. */
const char *diag_quote(const char *s, size_t max);

/* N bytes for messages, in powers of 1024 as --memory reads them: "1.50 GB", "8.27 MB",
 * "3.0 KB", "12 bytes". */
void diag_format_bytes(size_t n, char *buf, size_t len);

/* Opens PATH for reading when it is a regular file, without waiting for a FIFO's writer:
 * the descriptor (blocking again), its status in *ST. -1 when it cannot be opened
 * (errno says why); -2 when it is something else, *ST saying what (file_kind). */
int open_regular(const char *path, struct stat *st);

/* What a file of mode MODE is, for messages: "a directory", "a FIFO (named pipe)", ... */
const char *file_kind(mode_t mode);

#endif
