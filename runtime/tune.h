/* tune.h: the autotune choices file, one per device and model (also a lockfile a user names).
 *
 * --mode max-autotune times candidates on the device (cuBLASLt algorithms, generated GEMM
 * tiles, launch shapes) and keeps the fastest; the choices are written as a small text
 * file that a user can read, diff and commit, and read back on the next run of the same
 * plan instead of tuning again. It lives in cgc/tune/ of the user's cache (cachedir.h),
 * named MODEL.sm_ARCH.DEVICE.tune (DEVICE: the driver's name in lower case, other
 * characters as '-', at most 64 of them). What `cgc models/mlp.net --check --mode
 * max-autotune --emit DIR` writes (the heuristics' choices; 14 of its 18 choice lines
 * left out here, "..."):
 *
 *     # cgc autotune choices: model mlp on none (heuristics: nothing timed) (sm_90).
 *     # Read back by cgc for the same plan; delete this file to tune again.
 *     # A choice: KIND KEY CHOICE MS (the chosen candidate's median time; - when chosen
 *     # by heuristics, untimed).
 *     cgc-autotune 1
 *     model mlp
 *     device sm_90 none (heuristics: nothing timed)
 *     plan 7e6dbd6565eda5b8
 *     tuning none
 *     kernel cast_x items:2048 -
 *     gemm m64.n512.k784.b1.nt.f16.f16.f16.f32acc.relu_bias default -
 *     gemm m64.n10.k128.b1.nt.f16.f16.f16.f32acc.none default -
 *     ...
 *     mlp m64.f16_512_128r_10 steps -
 *     end 18
 *
 * A tuned file names the GPU on its device line, says `tuning T ms`, and gives each
 * timed choice its median in ms instead of '-'. The choices (autotune.c writes them and
 * refuses any other when reading back): a kernel's `items:N` (items per block) or
 * `items:N,block:B` (and B threads a block, a multiple of 32 under the kernel's own, for
 * a kernel that is PlanKernel.any_block); a GEMM's
 * `default` (the library's own algorithm), `lt_algo:K` (the K-th of cuBLASLt's list,
 * 1 to 8) or `tile:BMxBNxBK` (a generated kernel the plan has for it); a fused MLP run's
 * `steps` or `fused:rowsR` (R = 16, 32 or 64).
 *
 * `plan` is a hash of what the choices were made for (the generated module, the GEMM
 * calls and the training batch); `tuning` is the time tuning took ("tuning none" for
 * heuristics); `end N` closes the file with its number of choices, so that a truncated
 * file is told apart. Lines are at most 512 bytes, comments included; blank lines and
 * lines starting with '#' are ignored, as are blanks around words (one or more spaces or
 * tabs separate them). KIND is gemm, kernel or mlp; KEY and CHOICE are tokens of 1 to 127
 * characters from [A-Za-z0-9_.:+=,-]; no KIND and KEY twice, at most 8192 choices in a
 * file of at most 1 MiB. Numbers are read as strtod reads them (finite, >= 0). Anything
 * else refuses the whole file, with the line and what is wrong: cgc then says so, tunes
 * again and replaces it. */
#ifndef CGC_TUNE_H
#define CGC_TUNE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/outfile.h"

enum { TUNE_VERSION = 1, TUNE_TOKEN_MAX = 127, TUNE_DEVICE_MAX = 127 };

typedef enum TuneKind {
    TUNE_GEMM,      /* a GEMM call: the cuBLASLt algorithm or a generated kernel's tile */
    TUNE_KERNEL,    /* a generated kernel: its launch shape */
    TUNE_MLP,       /* a fully fused MLP pass, or not */
    TUNE_WINDOW,    /* a convolution's implicit GEMMs, or its patches */
    TUNE_NKINDS
} TuneKind;

typedef struct TuneChoice {
    TuneKind kind;
    char key[TUNE_TOKEN_MAX + 1];
    char choice[TUNE_TOKEN_MAX + 1];
    double ms;                      /* the chosen candidate's median time; < 0: untimed */
} TuneChoice;

typedef struct TuneFile {
    char model[TUNE_TOKEN_MAX + 1];
    int arch;                       /* 90 for sm_90 */
    char device[TUNE_DEVICE_MAX + 1];
    uint64_t plan_hash;
    double tuning_ms;               /* < 0: chosen by heuristics ("tuning none") */
    TuneChoice *choices;
    int nchoices, cap;
} TuneFile;

typedef enum TuneLoad {
    TUNE_FOUND,     /* read, and made for this plan */
    TUNE_MISSING,   /* no file yet */
    TUNE_REFUSED,   /* corrupt, or made for another plan or device: tune again */
    TUNE_NO_CACHE,  /* the cache is off or unusable (cachedir.h) */
} TuneLoad;

/* An empty file for MODEL on DEVICE (sm_ARCH) and the plan hashed as PLAN_HASH; false
 * (WHY) when a name is not one the format can hold. */
bool tune_init(TuneFile *t, const char *model, int arch, const char *device, uint64_t plan_hash,
               char *why, size_t why_len);
void tune_free(TuneFile *t);

/* Adds a choice; false (WHY) for a token the format cannot hold or a KIND and KEY that
 * is already there. */
bool tune_add(TuneFile *t, TuneKind kind, const char *key, const char *choice, double ms,
              char *why, size_t why_len);
const TuneChoice *tune_find(const TuneFile *t, TuneKind kind, const char *key);

/* The file's text, malloc'd. */
char *tune_format(const TuneFile *t);

/* Parses TEXT (N bytes) into *OUT (freed by tune_free); false with WHY ("line 7: ...") for
 * anything the format above does not allow, *OUT then empty. */
bool tune_parse(const char *text, size_t n, TuneFile *out, char *why, size_t why_len);

/* Reads the choices file at PATH (any file a user names, not the cache's) into *OUT;
 * false with WHY when it cannot be read (*MISSING: it is not there) or tune_parse
 * refuses it. */
bool tune_read(const char *path, TuneFile *out, bool *missing, char *why, size_t why_len);

/* The file name (no directory) for MODEL on DEVICE, sm_ARCH. */
void tune_file_name(const char *model, int arch, const char *device, char *buf, size_t len);

/* Reads the file for WANT's model, device and architecture into *OUT; TUNE_FOUND only
 * when its plan hash is WANT's too. PATH gets the file's path (for messages; empty with
 * no cache directory), WHY what is wrong on TUNE_REFUSED or TUNE_NO_CACHE. */
TuneLoad tune_load(const TuneFile *want, TuneFile *out, char *path, size_t path_len, char *why,
                   size_t why_len);

/* Writes T as its file, replacing any; 0, or -1 with WHY. PATH as for tune_load. */
int tune_store(const TuneFile *t, char *path, size_t path_len, char *why, size_t why_len);

/* The same two for a file at PATH that a user names (--tune-file), outside the cache:
 * tune_load_file reads it (tune_read; TUNE_MISSING when there is none, never
 * TUNE_NO_CACHE) and checks it as tune_load does; tune_store_file writes it as an output
 * of kind tune_choices (base/outfile.h), reporting any error itself. */
TuneLoad tune_load_file(const TuneFile *want, const char *path, TuneFile *out, char *why,
                        size_t why_len);
int tune_store_file(const TuneFile *t, const char *path);
/* out_check of tune_store_file's PATH: before tuning, so that the time is not spent for
 * nothing. 0, or -1 after an error. */
int tune_check_file(const char *path);

/* A choices file as an output: replaces only a file that tune_format wrote. */
extern const OutKind tune_choices;
#define TUNE_FILE_ROLE "write the choices to"

#endif
