/* bench.h: --bench, eager set against a compiled mode on the same model.
 *
 * For each of the two modes: the front end and the passes are run from the source, the
 * plan is built, and the module is compiled by NVRTC twice: cold (NVRTC even when the
 * kernel cache holds the module) and warm (from the cache). It reports kernels and GEMMs
 * per training step, the planned memory peak and activation bytes, and the cold and
 * warm compile times (front end + passes + module), then the ratios.
 *
 * Step times need a GPU: on the CPU the two modes run the same IR through the same
 * reference executor, so there is nothing of the modes' to time, and --bench says so. On
 * a GPU each mode trains the model (its data, its batch) for the warm-up and up to 200
 * more steps, quietly, and the median, p10 and p90 of the device time between events
 * around each step are set side by side (train.h, StepTimes). */
#ifndef CGC_BENCH_H
#define CGC_BENCH_H

#include <stdbool.h>

#include "../codegen/plan.h"
#include "pipeline.h"

typedef struct BenchOptions {
    const char *net_path;
    Source *src;
    const Override *overrides;
    int noverrides;
    PlanMode mode;              /* the compiled mode set against eager */
    const char *device;         /* --device */
    int arch;                   /* NVRTC's target as 90; 0: the default; -1: no compiles */
    double tune_budget_s;       /* max-autotune: --tune-budget (0: the default) */
} BenchOptions;

/* Runs the comparison and prints it. Returns 0, or 1 after an error in the model. */
int bench_run(const BenchOptions *o);

#endif
