/* compile.h: from a lowered program to a plan, in one call for the command line and the
 * tests: the passes after training lowering, in the pipeline's order (design.md),
 *
 *   checkpoint (cfg.checkpoint) -> fusion (default mode) -> plan_build -> memory plan
 *
 * and what --stats and --explain report about the result.
 *
 * checkpoint = all takes the schedule (compiler/passes.h) whose plan needs the fewest
 * activation bytes; auto the one with the fewest recomputed FLOPs whose planned
 * activation bytes (the peak of the training step's own buffers: activations,
 * gradients, temporaries) fit the budget: cfg.memory, else the device's free memory less
 * the persistent buffers, else (no device known) no budget, so nothing is recomputed.
 * When even the least memory does not fit, it says so (with the batch that would) and
 * keeps that plan.
 */
#ifndef CGC_COMPILE_H
#define CGC_COMPILE_H

#include <stdio.h>

#include "pipeline.h"
#include "../compiler/passes.h"
#include "../codegen/plan.h"

typedef struct CompileOptions {
    PlanMode mode;
    const char *net_path;       /* for the kernels' comments */
    int64_t symmax[IR_MAX_SYMBOLS];          /* symbol maxima of the memory plan; 0 = for symbol 0
                                 * the rows of a batch one rank takes (cfg.batch on one
                                 * rank), and 1 for others */
    size_t device_free;         /* bytes free on the device that will run it; 0 = unknown */
    bool stop_after_checkpoint; /* --dump-ir-after checkpoint: decide as MODE would, then
                                 * leave the graphs unfused and build no plan */
    bool quiet;                 /* no warnings (a compile repeated, as --bench's warm one,
                                 * has given them already) */
    const PassObserver *observer;   /* told after checkpoint and after fusion (in eager
                                 * mode, the same program twice); under checkpoint = auto
                                 * after every trial, the last being the one kept */
} CompileOptions;

typedef struct Compiled {
    IrProgram *p;               /* not owned */
    Plan *plan;
    PlanLayout layout;          /* memory reused (the plan the device runs) */
    int64_t symmax[IR_MAX_SYMBOLS];
    RecomputeChoices choices;   /* checkpointing's frontier (none with checkpoint = none) */
    const RecomputeSchedule *schedule;  /* the one applied (in choices), or NULL */
    int nrecomputed;            /* forward nodes the backward recomputes */
    char (*kept_words)[96];     /* per kept cut of the schedule: "h5 (line 10)", from the
                                 * graph before fusion renumbered it (malloc'd) */
    size_t budget;              /* checkpoint = auto: the activation budget; 0 = none */
    bool over_budget;           /* auto could not fit the budget */
} Compiled;

/* Runs the passes on P (which it changes) and builds and lays out the plan. Returns 0, or
 * -1 after an error. */
int compile_program(IrProgram *p, const CompileOptions *o, Compiled *out);
void compiled_free(Compiled *c);

/* The graph a run of C repeats: the training step's, or for inference (--predict) the
 * evaluation graph's. */
PlanGraphId compiled_main_graph(const Compiled *c);
/* Activation bytes: the largest training graph's own peak (layout.graph_bytes). */
size_t compiled_activation_bytes(const Compiled *c);
/* The segments the backward recomputes (kept cuts with something to recompute before them). */
int compiled_segments(const Compiled *c);
/* Launches (kernels and GEMMs) of one optimizer step's train graph; GEMMS: of which GEMMs. */
int compiled_steps_per_train(const Compiled *c, int *gemms);

/* explain.c: --stats FILE: one JSON object (mode, kernels_per_step,
 * gemms_per_step, peak_bytes, activation_bytes, fusion_groups [{name, ops, lines}], ...). */
void compiled_write_stats(const Compiled *c, FILE *out);
/* --explain: a readable report: precision of every tensor and why, fusion groups, the
 * recomputed tensors, the memory plan and its peak, kernels per step. */
void compiled_explain(const Compiled *c, bool on_gpus, FILE *out);
/* roofline.c: the performance model (codegen/perf.h) of the step C's run repeats: the
 * predicted time on each part, and on the last part the share of each kind of work and
 * the costliest launches. */
void compiled_explain_roofline(const Compiled *c, FILE *out);
/* --stats' "predicted": the same, each launch's bytes, FLOPs, time and bound per part. */
void compiled_write_roofline(const Compiled *c, FILE *out);
/* The model's time for that step on PART (codegen/perf.h). */
struct PerfPart;
double compiled_predicted_seconds(const Compiled *c, const struct PerfPart *part);

#endif
