/* train.h: the training loop, on the CPU reference executor or on a device, and
 * checkpoints.
 *
 * train_run drives a lowered program: data order and batches, micro-batches for
 * accumulation, evaluation on the test split after every epoch, progress and metrics,
 * saving after every epoch and at the end, resuming. A checkpoint holds the tensors as
 * f32 whatever ran them, so it moves between the CPU and devices. */
#ifndef CGC_TRAIN_H
#define CGC_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "../compiler/ir.h"
#include "../codegen/plan.h"
#include "comm.h"
#include "device.h"

/* The metrics file as an output (base/outfile.h): appended to, a JSON object per epoch. */
#define TRAIN_METRICS_ROLE "write the metrics to"

/* Step times on a device (-v prints them; --bench reads them): device time between
 * events around each optimizer step, after TRAIN_TIMING_WARMUP steps of warm-up, for at
 * most TRAIN_TIMING_STEPS steps. */
enum { TRAIN_TIMING_WARMUP = 50, TRAIN_TIMING_STEPS = 500 };
typedef struct StepTimes {
    int n;                      /* steps timed; 0: the run was too short (or on the CPU) */
    double median_ms, p10_ms, p90_ms;
    /* The train graph's launches as run, with the choices in force (devexec_launches:
     * max-autotune's fused MLP runs change the plan's count), and of them GEMMs. */
    int launches, gemms;
} StepTimes;

typedef struct RunOptions {
    const char *net_path;
    Source *src;                /* for errors found while loading data */
    const char *save_path;      /* NULL: no saving */
    const char *resume_path;    /* NULL: start afresh */
    const char *metrics_path;   /* NULL: no metrics file; else TRAIN_METRICS_ROLE's output */
    const char *profile_path;   /* --profile: a trace of a few steps (profile.h) */
    int64_t stop_after;         /* stop after this global step as if interrupted; 0 = never */
    int64_t metrics_every;      /* also a metrics object every this many steps; 0 = never */
    bool quiet;
    bool verbose;               /* -v: on a device, also the median step time */
    bool detect_anomaly;        /* check every op's values; stop at the first NaN or inf
                                 * (on a device: every value the plan stores, after each
                                 * graph run, launch by launch) */
    StepTimes *step_times;      /* when not NULL: the step times of a device run */
    double tune_budget_s;       /* max-autotune: --tune-budget, the most seconds tuning may
                                 * take (0: 60) */
    const char *tune_file;      /* max-autotune: --tune-file, the choices file to read, or to
                                 * write when there is none, instead of the cache's (NULL) */
    /* Where to run: NULL is the CPU reference executor. A device runs PLAN (the plan whose
     * module it loaded), or, when PLAN is NULL, the eager plan built here; the kernels'
     * names are stable, so that plan matches a module built from an eager plan of P. */
    Device *device;
    const Plan *plan;
    /* The job's ranks (comm.h), or NULL for one. With several, each trains on its share
     * of every batch (the program compiled for cfg.ranks of them), rank 0 alone prints,
     * writes metrics, profiles and saves, and a resumed run reads the checkpoint on rank
     * 0, which sends it to the others. */
    Comm *comm;
} RunOptions;

/* Where a run is: everything besides tensors that a resumed run needs to continue
 * exactly (the data order of an epoch is a function of seed and epoch). */
typedef struct TrainProgress {
    int64_t epoch;              /* 0-based epoch in progress */
    int64_t batch_in_epoch;     /* micro-batches of this epoch already consumed */
    int64_t step;               /* optimizer steps taken (global step) */
    int64_t skipped;            /* fp16 steps skipped for inf/nan */
    double loss_sum;            /* sum of micro-batch losses this epoch */
    int64_t loss_count;
    double train_seconds;       /* training time this epoch, before an interruption */
} TrainProgress;

/* Trains P (already lowered) as P->cfg says. Returns the process exit status. */
int train_run(IrProgram *p, const RunOptions *o);

/* Before a launcher starts RANKS processes of this machine to train P (compiled for that
 * many): the checks each rank would make alone (the data there and readable, every rank
 * rows of its own in every micro-batch, parameters one MPI call can sum), made once, and
 * the memory the ranks hold together against what the machine has available. Loads the
 * data once. 0, or -1 after an error. */
int train_check_launch(IrProgram *p, const RunOptions *o, int ranks);

/* train_state.c: --save / --resume files (safetensors; see README). TENSORS[i] holds
 * persistent tensor i of P as f32 (ir_numel of its shape; a sharded state, IrTensor, of
 * its parameter's: every rank's slices): read by save, written by load.
 * TOTAL_STEPS: the optimizer steps the run spans (saved, and compared on resume). */
int train_state_save(const char *path, const IrProgram *p, float *const *tensors,
                    const TrainProgress *pr, int64_t total_steps);
/* Load checks every value against its tensor's range (IrTensor.range). */
int train_state_load(const char *path, const IrProgram *p, float *const *tensors,
                    TrainProgress *pr, int64_t total_steps);
/* Only the tensors, to use the model rather than continue its run (its progress is not
 * read); the same checks of each. */
int train_state_load_weights(const char *path, const IrProgram *p, float *const *tensors);
/* The step counters a loaded TENSORS holds against its progress PR, once PR itself is
 * known to be one a run could reach. 0, or -1 after an error naming the file PATH. */
int train_state_check_counters(const char *path, const IrProgram *p, float *const *tensors,
                               const TrainProgress *pr);

#endif
