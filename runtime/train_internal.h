/* train_internal.h: what train.c shares with the backends it drives (train.c holds the
 * CPU one, train_device.c the device one). Not for use outside runtime/train*.c.
 *
 * The loop itself (epochs, steps, micro-batches, reporting, saving) is the same
 * wherever the run happens; a backend does the data-dependent work: the order of an
 * epoch, one micro-batch, the running loss totals, evaluation, and the persistent
 * tensors as host f32 arrays for checkpoints.
 */
#ifndef CGC_TRAIN_INTERNAL_H
#define CGC_TRAIN_INTERNAL_H

#include <stdio.h>

#include "cpu/exec.h"
#include "data.h"
#include "generate.h"
#include "prefetch.h"
#include "profile.h"
#include "train.h"

enum { EVAL_BATCH = 1000 };

typedef struct EvalResult {
    double loss, accuracy;
    bool has_accuracy;
} EvalResult;

typedef struct Trainer Trainer;

/* One backend. Every function returns 0, or -1 after reporting. */
typedef struct TrainBackendOps {
    /* Makes the backend (t->backend) and its host tensor arrays (t->tensors). */
    int (*open)(Trainer *t);
    void (*close)(Trainer *t);
    const char *(*where)(const Trainer *t);     /* "the CPU", the device's name */
    bool emulated;                              /* tf32/bf16/fp16 emulated in f32 math */
    int (*init_tensors)(Trainer *t);            /* from the seed, as the CPU executor does */
    int (*pull_tensors)(Trainer *t);            /* t->tensors := the current values */
    int (*push_tensors)(Trainer *t);            /* the current values := t->tensors */
    /* Before the first micro-batch of PR->epoch (also when resuming mid-epoch): its data
     * order, and the running totals restarted from PR. */
    int (*epoch_begin)(Trainer *t, const TrainProgress *pr);
    /* Runs G on rows [start, start + count) of the epoch's order as micro-batch MICRO_STEP
     * of optimizer step PR->step, and adds its loss (and, for the step's last graph, the
     * skipped flag) to the running totals. */
    int (*micro_batch)(Trainer *t, const IrGraph *g, TrainProgress *pr, int64_t start,
                       int64_t count, int64_t micro_step);
    /* PR's loss_sum, loss_count and skipped := the running totals. WAIT false: the latest
     * values already at hand, without waiting (PR may be left as it is). Fails when a
     * loss that must be finite was not. */
    int (*read_totals)(Trainer *t, TrainProgress *pr, bool wait);
    int (*evaluate)(Trainer *t, EvalResult *r);
    /* A text model's sample after an epoch, to stdout, where the backend's model runs;
     * HOST: the CPU's, whose cost epoch_sample weighs first. */
    int (*sample)(Trainer *t, const GenerateOptions *g);
    bool host;
    double (*gemm_seconds)(const Trainer *t);   /* < 0: not measured */
    /* --profile on a device (NULL on the CPU, whose executor reports through
     * t->recording): time every launch and GEMM of the step about to run; after it, wait,
     * report them to t->profile, and set *START and *END to the step's span in the same
     * (device) time. */
    int (*profile_step_begin)(Trainer *t);
    int (*profile_step_end)(Trainer *t, double *start, double *end);
} TrainBackendOps;

struct Trainer {
    IrProgram *p;
    const RunOptions *o;
    const TrainBackendOps *ops;
    void *backend;              /* the backend's own state */
    float **tensors;            /* per persistent tensor: host f32 values (checkpoints) */
    DataSplits data;
    double load_seconds;        /* reading and converting the data */
    Prefetch *prefetch;         /* the backend's reader of the training rows, if it has one */
    const char *prefetch_why;   /* why it reads in the steps against the default, or NULL */
    int64_t micro_per_epoch;    /* micro-batches walked per epoch */
    int64_t steps_per_epoch;    /* optimizer steps per epoch */
    int64_t total_steps;        /* optimizer steps of the whole run */
    int64_t epochs;             /* epochs the run spans */
    int scale_tensor;           /* fp16: the loss scaler's scale (a tensor index), else -1 */
    FILE *metrics;
    Profile *profile;           /* --profile, until its trace is written */
    Profile *recording;         /* the profile during a step it records, else NULL */
    int64_t profile_from, profile_to;   /* the steps it records: [from, to), 0-based */
    bool live;                  /* stdout is a terminal: draw a progress bar */
    double last_draw;
    /* The job (RunOptions.comm): this process's rank of RANKS (rank 0 reports and
     * saves). LOSS_BASE: the epoch's loss sum when this run began it (not 0
     * when resumed mid-epoch), the same on every rank; each adds its own losses to it. */
    int rank, ranks;
    double loss_base;
    /* --metrics-every: the epoch's loss sum and count at the last step record. */
    double every_sum;
    int64_t every_count;
    /* The mean loss of the first step this run took (at FIRST_LOSS_STEP), once known: what
     * an epoch's mean loss is compared with, to tell a run that diverges. */
    bool first_loss_known, diverging_said;
    bool no_sample_said;        /* the epochs' text samples were said to be skipped */
    double first_loss;
    int64_t first_loss_step;
};

/* V[0 .. N) := their sums over the ranks. */
int train_sum_over_ranks(const Trainer *t, double *v, int n, const char *what);

extern const TrainBackendOps train_device_backend;   /* train_device.c */

/* --mode reduce-overhead on a device (train_device.c): a micro-batch of a train graph is
 * captured as a CUDA graph the second time it runs with a full batch, and replayed after
 * that. What decides it: */
typedef struct CaptureQuery {
    PlanMode mode;              /* the plan's */
    bool device_can;            /* the device records graphs (DeviceOps.capture_begin) */
    bool failed;                /* a capture failed earlier in this run */
    int64_t count, batch;       /* the micro-batch's rows; the configured batch */
    int64_t runs;               /* full micro-batches this graph has run so far */
    bool profiled;              /* the step is one --profile times */
    bool checked;               /* --detect-anomaly: every run's values are read back */
    bool streamed;              /* the data set streams from the host (TrainConfig.stream) */
} CaptureQuery;

/* NULL when the micro-batch is replayed from a graph (captured now if need be), else why
 * it runs launch by launch, as a sentence fragment. */
const char *train_capture_refusal(const CaptureQuery *q);

/* On a terminal, clears the progress bar's line, so that a message printed mid-epoch
 * (a capture, an error) starts a line of its own; the bar is drawn again below it at
 * its next update. */
void train_clear_progress(const Trainer *t);

/* Reports the first NaN or infinity of a run checked for them (--detect-anomaly), named
 * by the op that computed it, its .net line and the step (of a training graph; the
 * evaluation runs between epochs), MICRO_STEP the micro-batch's number; FROM says what
 * the op's inputs were ("values that were all finite"). Returns -1. */
int train_report_anomaly(const Trainer *t, const IrGraph *g, const CpuAnomaly *a,
                         int64_t micro_step, const char *from);

/* Reports a non-finite loss at optimizer step STEP (0-based); WHAT is "NaN",
 * "infinite", or "not finite". Returns -1. */
int train_loss_not_finite(const Trainer *t, int64_t step, const char *what);

#endif
