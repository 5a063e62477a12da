/* config.c: dsl.md's defaults for the train block, and names for its enums. */
#include "config.h"

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
