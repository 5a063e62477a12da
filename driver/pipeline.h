/* pipeline.h: the whole front of the compiler in one call, for the command line and for
 * tests: parse -> sema -> train-key overrides -> precision -> training lowering. */
#ifndef CGC_PIPELINE_H
#define CGC_PIPELINE_H

#include "../base/diag.h"
#include "../compiler/ir.h"

/* One command-line override of a train key: KEY NULL means --lr. FLAG is the flag
 * without its dashes ("batch"), used as the file name in messages ("--batch:1:1: ..."). */
typedef struct Override {
    const char *key;
    const char *flag;
    const char *value;
} Override;

/* The passes in order, as --dump-ir-after names them. The first three run here; the
 * rest in compile_program (driver/compile.h), which also builds the plan. */
typedef enum PipelinePass {
    PASS_SEMA, PASS_PRECISION, PASS_TRAINING, PASS_CHECKPOINT, PASS_FUSION, PASS_NUM,
} PipelinePass;
extern const char *const pipeline_pass_names[PASS_NUM];   /* "sema", "precision", ... */

/* Compiles SRC with the overrides applied in order (an --lr override last, after any
 * --optimizer, which resets the learning rate). Returns the lowered program, or NULL
 * after diagnostics. */
IrProgram *pipeline_compile(Source *src, const Override *overrides, int noverrides);
/* The same, stopping after pass LAST (at most PASS_TRAINING), for a job of RANKS ranks
 * (cfg.ranks and cfg.job: training lowering sums the gradients over them, even over one),
 * or for no job when RANKS is 0: a plain run of one process, which sums nothing. */
IrProgram *pipeline_compile_until(Source *src, const Override *overrides, int noverrides,
                                  PipelinePass last, int ranks);

/* Called with the program after each pass (--emit writes the IR of each): here after
 * sema, precision and training; compile_program (driver/compile.h) after checkpoint and
 * fusion. */
typedef struct PassObserver {
    void (*after)(void *ctx, PipelinePass pass, const IrProgram *p);
    void *ctx;
} PassObserver;

/* pipeline_compile for RANKS ranks (0: no job), telling OBS (NULL: no one) after each of its passes. */
IrProgram *pipeline_compile_observed(Source *src, const Override *overrides, int noverrides,
                                     int ranks, const PassObserver *obs);

#endif
