/* config.c: the train block's defaults (docs/language.md), and names for its enums. */
#include "config.h"

#include <stdio.h>
#include <string.h>

void config_defaults(TrainConfig *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->data = DATA_SYNTHETIC;
    cfg->data_scale = 1.0;
    cfg->synthetic_samples = 4096;
    cfg->batch = 64;
    cfg->epochs = 1;
    cfg->shuffle = true;
    cfg->drop_last = true;
    cfg->optimizer = OPT_ADAMW;
    cfg->lr = 1e-3;
    cfg->beta1 = 0.9;
    cfg->beta2 = 0.999;
    cfg->eps = 1e-8;
    cfg->weight_decay = 0.01;
    cfg->schedule = SCHED_CONSTANT;
    cfg->gamma = 0.1;
    cfg->precision = PREC_FP32;
    cfg->accumulate = 1;
    cfg->prefetch = 2;
    cfg->ranks = 1;
    cfg->checkpoint = CKPT_NONE;
}

const char *config_optimizer_name(OptKind k)
{
    static const char *const names[] = {"sgd", "adam", "adamw"};
    return names[k];
}

const char *config_schedule_name(SchedKind k)
{
    static const char *const names[] = {"constant", "cosine", "step"};
    return names[k];
}

const char *config_precision_name(Precision p)
{
    static const char *const names[] = {"fp32", "tf32", "bf16", "fp16"};
    return names[p];
}

const char *config_checkpoint_name(CheckpointMode m)
{
    static const char *const names[] = {"none", "all", "auto"};
    return names[m];
}

void config_optimizer_str(const TrainConfig *cfg, char *buf, size_t n)
{
    if (cfg->optimizer == OPT_SGD)
        snprintf(buf, n, "sgd(lr = %.9g, momentum = %.9g, nesterov = %s, weight_decay = %.9g)",
                 cfg->lr, cfg->momentum, cfg->nesterov ? "true" : "false", cfg->weight_decay);
    else
        snprintf(buf, n, "%s(lr = %.9g, beta1 = %.9g, beta2 = %.9g, eps = %.9g, weight_decay = %.9g)",
                 config_optimizer_name(cfg->optimizer), cfg->lr, cfg->beta1, cfg->beta2, cfg->eps,
                 cfg->weight_decay);
}

void config_schedule_str(const TrainConfig *cfg, char *buf, size_t n)
{
    switch (cfg->schedule) {
    case SCHED_CONSTANT: snprintf(buf, n, "constant"); break;
    case SCHED_COSINE:
        snprintf(buf, n, "cosine(warmup = %lld, min_lr = %.9g)", (long long)cfg->warmup, cfg->min_lr);
        break;
    case SCHED_STEP:
        snprintf(buf, n, "step(every = %lld, gamma = %.9g)", (long long)cfg->step_every, cfg->gamma);
        break;
    }
}

/* The path is as written (a relative one is found by the same search again). */
void config_data_str(const TrainConfig *cfg, char *buf, size_t n)
{
    if (cfg->data == DATA_IDX)
        snprintf(buf, n, "idx(\"%s\", scale = %.9g)", cfg->data_dir, cfg->data_scale);
    else if (cfg->data == DATA_TEXT)
        snprintf(buf, n, "text(\"%s\", context = %lld)", cfg->data_dir, (long long)cfg->text_context);
    else if (cfg->data == DATA_TENSORS && cfg->data_test)
        snprintf(buf, n, "tensors(\"%s\", test = \"%s\", scale = %.9g)", cfg->data_dir,
                 cfg->data_test, cfg->data_scale);
    else if (cfg->data == DATA_TENSORS)
        snprintf(buf, n, "tensors(\"%s\", scale = %.9g)", cfg->data_dir, cfg->data_scale);
    else if (cfg->data == DATA_CSV)
        snprintf(buf, n, "csv(\"%s\", test = \"%s\", label = \"%s\", scale = %.9g)", cfg->data_dir,
                 cfg->data_test ? cfg->data_test : "", cfg->data_label ? cfg->data_label : "",
                 cfg->data_scale);
    else
        snprintf(buf, n, "synthetic(samples = %lld)", (long long)cfg->synthetic_samples);
}
