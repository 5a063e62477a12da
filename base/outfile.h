/* outfile.h: every file cgc writes, under one set of rules.
 *
 * An output lands on a new file, or replaces a regular file that holds what the output
 * holds (a checkpoint over a checkpoint, JSON over JSON: its OutKind tells), through any
 * symbolic links (the link stays). It never lands on an input of the run (out_protect: the
 * model's source, the checkpoint resumed), on the file of another output, or on anything
 * but a regular file: a directory, a device, a FIFO, a socket. Each output is checked
 * before any work is done (out_reserve) and again when it is written.
 *
 * A file is written into a temporary file beside it (TARGET.tmp.XXXXXX) and renamed over
 * it once whole, so a failed write leaves the old file as it was; every write, the flush
 * and the close are checked, and a failure is an error naming the file. Opening never
 * waits: a FIFO is refused before it is opened. Messages name an output by its ROLE, the
 * words before its path: "cannot save to PATH: ...", "cannot write --stats to PATH: ...".
 */
#ifndef CGC_OUTFILE_H
#define CGC_OUTFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct OutKind {
    const char *holds;             /* what it may replace: "a JSON file"; NULL: any file */
    bool (*replaceable)(int fd);   /* whether the existing regular file FD holds that */
    bool durable;                  /* synced to the disk before the rename, and the rename too */
} OutKind;

/* JSON (--stats, --metrics, --profile): replaces an empty file, or one that begins with
 * '{' or '[' and has no NUL byte in its first bytes (which a checkpoint has). */
extern const OutKind out_json;
/* A NumPy array (.npy): replaces an empty file or one that begins with NumPy's magic. */
extern const OutKind out_npy;
/* Generated files in a directory the user gave for them (--emit): any regular file. */
extern const OutKind out_generated;

/* PATH is an input of this run, WHAT for messages ("the model's source"): no output may
 * land on it but one of kind MAY (NULL: none), as a run may save over the checkpoint it
 * resumed. A PATH that cannot be found protects nothing. */
void out_protect(const char *path, const char *what, const OutKind *may);
/* out_protect (no kind may replace it) for a file the run has opened to read once its
 * outputs were reserved (a data file): -1, after an error, when an output's place is it. */
int out_protect_read(const char *path, const char *what);
/* WHAT for the data and rows a run reads. */
#define OUT_READ_BY_RUN "a file this run reads"

/* Whether an output of KIND can be written to PATH: the rules above, and a directory that
 * exists and can be written. 0, or -1 after an error. */
int out_check(const char *role, const char *path, const OutKind *kind);
/* out_check, and PATH's place reserved for ROLE: another role's output there is refused.
 * For the run's own outputs, checked once before it starts (out_protect's inputs and
 * these reservations last as long as the process). */
int out_reserve(const char *role, const char *path, const OutKind *kind);

/* A file being written: write to F, then out_close or out_discard. */
typedef struct OutFile {
    FILE *f;
    const char *role, *path;
    const OutKind *kind;
    char *target;   /* where it lands: PATH, or the file a link names */
    char *tmp;      /* written here, renamed over TARGET */
} OutFile;

/* Checks PATH again and opens the temporary file; removes what an earlier, interrupted
 * write to it left. 0, or -1 after an error (*O then holds nothing to close). */
int out_open(OutFile *o, const char *role, const char *path, const OutKind *kind);
/* Flushes, checks every write, closes and renames. 0, or -1 after an error, with the
 * temporary file removed and the old file as it was. */
int out_close(OutFile *o);
/* Removes the temporary file: nothing is written. */
void out_discard(OutFile *o);

/* The whole file at once: out_open, N bytes of TEXT, out_close. */
int out_write(const char *role, const char *path, const OutKind *kind, const char *text,
              size_t n);

/* An output appended to in place, line by line, so that it can be followed while it is
 * written (--metrics): PATH checked as out_check does, created when missing, opened
 * without waiting. NULL after an error. */
FILE *out_append(const char *role, const char *path, const OutKind *kind);
/* Flushes F (from out_append) and checks every write so far; with CLOSE, closes it too.
 * 0, or -1 after an error naming ROLE and PATH. */
int out_flush(FILE *f, const char *role, const char *path, bool close);

/* Flushes the standard output and checks every write to it (cgc --dump-ir > FILE on a
 * full disk). 0, or -1 after an error. */
int out_stdout_done(void);

#endif
