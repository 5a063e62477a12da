/* testfiles.h: a temporary directory, paths in it, and captured standard error, for the
 * C tests that write files and check the messages cgc gives about them. */
#ifndef CGC_TESTS_TESTFILES_H
#define CGC_TESTS_TESTFILES_H

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/check.h"

/* Made by main with mkdtemp. */
static char tmpdir[64];

static char *tmp_path(const char *name)
{
    static char bufs[4][256];
    static int next;
    char *b = bufs[next++ & 3];
    snprintf(b, sizeof bufs[0], "%s/%s", tmpdir, name);
    return b;
}

/* ---- capturing stderr ---- */

static int saved_stderr = -1;
static char captured[65536];   /* a tuning run with refusals says much */

/* The capture's own path, kept out of tmp_path's buffers, which callers hold. */
static const char *capture_path(void)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/stderr.txt", tmpdir);
    return path;
}

static void capture_start(void)
{
    fflush(stderr);
    saved_stderr = dup(2);
    int fd = open(capture_path(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
}

/* Restores stderr and returns what was written to it. */
static const char *capture_end(void)
{
    const char *path = capture_path();
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(captured, 1, sizeof captured - 1, f) : 0;
    if (f) fclose(f);
    captured[n] = '\0';
    unlink(path);
    return captured;
}

#endif
