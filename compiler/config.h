/* config.h: the training configuration, from the train block and the command line.
 *
 * train_config.c fills it from the file (docs/language.md's default for a key not given);
 * the command-line flags then override single keys through the same checks
 * (sema_train_entry), so a flag and a file entry can never mean different things; last,
 * sema_train_finish applies the rules that relate keys to each other.
 */
#ifndef CGC_CONFIG_H
#define CGC_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/diag.h"

typedef enum DataKind { DATA_SYNTHETIC, DATA_IDX, DATA_TEXT, DATA_TENSORS, DATA_CSV } DataKind;
typedef enum OptKind { OPT_SGD, OPT_ADAM, OPT_ADAMW } OptKind;
typedef enum SchedKind { SCHED_CONSTANT, SCHED_COSINE, SCHED_STEP } SchedKind;
typedef enum Precision { PREC_FP32, PREC_TF32, PREC_BF16, PREC_FP16 } Precision;
typedef enum CheckpointMode { CKPT_NONE, CKPT_ALL, CKPT_AUTO } CheckpointMode;

/* Where a device run's data set lives: on the device whole (never), or on the host, its
 * rows copied over as the steps need them (always), or the first where it fits (auto). */
typedef enum StreamMode { STREAM_AUTO, STREAM_ALWAYS, STREAM_NEVER } StreamMode;

typedef struct TrainConfig {
    /* data */
    DataKind data;
    char *data_dir;             /* DATA_IDX: the directory, DATA_TEXT: the file, DATA_TENSORS:
                                 * the training file, as written */
    char *data_test;            /* DATA_TENSORS, DATA_CSV: the test file, or NULL (the last tenth) */
    char *data_label;           /* DATA_CSV: the labels' column, or NULL */
    double data_scale;          /* DATA_IDX, DATA_TENSORS: integer features are multiplied by
                                 * this, DATA_CSV: every feature (default 1) */
    int64_t text_context;       /* DATA_TEXT: the bytes a window feeds (its length - 1) */
    int64_t synthetic_samples;  /* DATA_SYNTHETIC: default 4096 */
    SrcLoc data_loc;            /* where `data` was given, for errors found while loading;
                                 * {0,0} when a flag gave it */

    int64_t batch;              /* 64 */
    int64_t epochs;             /* 1; 0 when only `steps` limits the run */
    bool epochs_given;          /* set by the file or --epochs: `steps` alone means 0 epochs */
    int64_t steps;              /* 0 = no limit by steps */
    bool shuffle, drop_last;    /* true, true */

    /* optimizer: torch.optim's meanings */
    OptKind optimizer;          /* adamw */
    double lr;                  /* sgd: required; adam/adamw: 1e-3 */
    double momentum;            /* sgd: 0 */
    bool nesterov;              /* sgd: false */
    double beta1, beta2, eps;   /* 0.9, 0.999, 1e-8 */
    double weight_decay;        /* sgd/adam: 0; adamw: 0.01 */

    SchedKind schedule;         /* constant */
    int64_t warmup;             /* cosine: 0 */
    double min_lr;              /* cosine: 0 */
    int64_t step_every;         /* step: K */
    double gamma;               /* step: 0.1 */

    Precision precision;        /* fp32 */
    int64_t accumulate;         /* 1 */
    double clip_norm;           /* 0 = off */
    CheckpointMode checkpoint;  /* none */
    int64_t memory;             /* bytes; 0 = the device's free memory */
    uint64_t seed;              /* 0 */
    bool shard_optimizer;       /* shard = optimizer (false: none) */
    int64_t prefetch;           /* 2: micro-batches of rows read ahead on a host thread */
    bool prefetch_given;        /* set by the file or --prefetch, not the default */
    StreamMode stream;          /* auto: a device keeps the data set unless it cannot */
    int ranks;                  /* 1: the job's ranks, which its launch decides (not a key) */
    bool job;                   /* a rank of a job, even of one (a launcher started it, or
                                 * --nproc): the gradients are summed over the ranks */

    bool has_train_block;       /* false: compile, check and run one step on synthetic data */
    /* Where the file wrote the train block and its optimizer, schedule and precision keys
     * ({0,0}: not written, or the key given by a flag instead): the lines that the
     * training step's own nodes (the learning rate, Adam's shared factors, the loss
     * scale, the step counters) and so their kernels name (training.c). */
    SrcLoc train_loc, optimizer_loc, schedule_loc, precision_loc;
} TrainConfig;

/* The defaults of docs/language.md, "The train block". */
void config_defaults(TrainConfig *cfg);
/* Names for messages and dumps: "adamw", "cosine", "bf16", "auto". */
const char *config_optimizer_name(OptKind k);
const char *config_schedule_name(SchedKind k);
const char *config_precision_name(Precision p);
const char *config_checkpoint_name(CheckpointMode m);
/* Canonical descriptions, written as .net values with every argument spelled out
 * ("adamw(lr = 0.001, beta1 = 0.9, ...)"): shown to users and stored in checkpoints, so
 * that a resumed run can tell whether it continues the same training. */
void config_optimizer_str(const TrainConfig *cfg, char *buf, size_t n);
void config_schedule_str(const TrainConfig *cfg, char *buf, size_t n);
void config_data_str(const TrainConfig *cfg, char *buf, size_t n);

#endif
