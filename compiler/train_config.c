/* train_config.c: the train block and the command-line flags that override it.
 *
 * Each train key has one function that checks its value (a .net expression, folded
 * where a number is expected) and stores it in the program's TrainConfig. The file's
 * train block and every command-line flag reach those functions through
 * sema_train_entry, and --lr through sema_train_lr, so `--batch 0` is refused with the
 * words `batch = 0` gets and a flag can never mean something its key does not. Rules
 * that tie keys together (`steps` without `epochs`) depend on what was given in both
 * places, so they are applied once, by sema_train_finish, after the last override.
 */
#include "passes.h"
#include "sema_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef int (*EntryFn)(Source *src, TrainConfig *cfg, const AstExpr *v);

enum {
    MAX_BATCH = 1 << 20,
    MAX_COUNT = 1000000000,       /* epochs, steps, schedule lengths */
    MAX_SAMPLES = 1 << 24,
    MAX_CONTEXT = 1 << 20,        /* text windows */
    MAX_PREFETCH = 64,            /* micro-batches read ahead: each a slot of host memory */
};
#define MAX_SEED ((int64_t)1 << 53)            /* integers a double holds exactly */
#define MAX_MEMORY ((int64_t)1 << 50)          /* 1 PB */

/* The name of a call or bare name (`adam`, `adam(lr = 1)`), or NULL. */
static const char *callee(const AstExpr *v)
{
    return v->kind == AST_CALL || v->kind == AST_NAME ? v->name : NULL;
}

/* Which of NAMES V calls; reports a wrong kind or an unknown name. -1 after an error. */
static int entry_form(Source *src, const AstExpr *v, const char *key, const char *const *names,
                      const char *forms)
{
    const char *name = callee(v);
    if (!name) {
        diag_error(src, sema_expr_start(v), "%s must be %s, not %s", key, forms, sema_describe(v));
        return -1;
    }
    for (int i = 0; names[i]; i++)
        if (strcmp(name, names[i]) == 0) return i;
    diag_error(src, sema_expr_start(v), "unknown %s '%s'%s (expected %s)", key,
               diag_quote(name, 60), sema_did_you_mean(name, names), forms);
    return -1;
}

/* "adam: lr" into BUF, the WHAT of a call's argument. */
static const char *arg_what(const Signature *sig, int i, char *buf, size_t n)
{
    snprintf(buf, n, "%s: %s", sig->name, sig->params[i]);
    return buf;
}

/* The path of a data source: a non-empty string. */
static int data_path(Source *src, TrainConfig *cfg, const AstExpr *a, const char *what, const char *example)
{
    if (a->kind != AST_STR || !a->str[0]) {
        diag_error(src, a->loc, "%s must be a non-empty string such as \"%s\", not %s", what,
                   example, sema_describe(a));
        return -1;
    }
    free(cfg->data_dir);
    cfg->data_dir = xstrdup(a->str);
    return 0;
}

/* A string argument of a data form into *DST (freed first; NULL when not given). */
static int data_string(Source *src, TrainConfig *cfg, const AstExpr *a, const char *what,
                       const char *example, char **dst)
{
    char *keep = cfg->data_dir;
    cfg->data_dir = NULL;
    int rc = a ? data_path(src, cfg, a, what, example) : 0;
    free(*dst);
    *dst = cfg->data_dir;
    cfg->data_dir = keep;
    return rc;
}

/* tensors("TRAIN", test = "TEST", scale = S) and csv("FILE", test = "FILE2", label =
 * "COLUMN", scale = S): a file, another for the test split, the labels' column (csv). */
static int data_files(Source *src, TrainConfig *cfg, const AstExpr *v, bool csv)
{
    static const Signature tensors = {"tensors", {"train", "test", "scale"}, 1};
    static const Signature table = {"csv", {"file", "test", "label", "scale"}, 1};
    const AstExpr *args[MAX_PARAMS];
    if (!sema_bind_args(src, csv ? &table : &tensors, v, args)) return -1;
    double scale = 1;
    const AstExpr *scale_arg = args[csv ? 3 : 2];
    int rc = data_path(src, cfg, args[0], csv ? "csv: the file" : "tensors: the training file",
                       csv ? "train.csv" : "train.npz");
    rc |= data_string(src, cfg, args[1], csv ? "csv: test" : "tensors: test",
                      csv ? "test.csv" : "test.npz", &cfg->data_test);
    rc |= data_string(src, cfg, csv ? args[2] : NULL, "csv: label", "species", &cfg->data_label);
    if (scale_arg && sema_const_real(src, scale_arg, csv ? "csv: scale" : "tensors: scale", REAL_GT0,
                                     &scale) < 0)
        rc = -1;
    if (rc < 0) return -1;
    cfg->data = csv ? DATA_CSV : DATA_TENSORS;
    cfg->data_scale = scale;
    return 0;
}

static int entry_data(Source *src, TrainConfig *cfg, const AstExpr *v)
{
    static const char *const forms[] = {"idx", "synthetic", "text", "tensors", "csv", NULL};
    static const Signature idx = {"idx", {"dir", "scale"}, 1};
    static const Signature synthetic = {"synthetic", {"samples"}, 0};
    static const Signature text = {"text", {"file", "context"}, 2};
    int form = entry_form(src, v, "data", forms, "idx(\"DIR\", scale = S), synthetic(samples = K), "
                          "text(\"FILE\", context = T), tensors(\"TRAIN\", test = \"TEST\", scale = S) "
                          "or csv(\"FILE\", test = \"FILE2\", label = \"COLUMN\", scale = S)");
    if (form < 0) return -1;
    const AstExpr *args[MAX_PARAMS];
    char what[64];
    cfg->data_loc = v->loc;
    if (form >= 3) return data_files(src, cfg, v, form == 4);
    if (form == 1) {
        int64_t samples = 4096;
        if (!sema_bind_args(src, &synthetic, v, args)) return -1;
        if (args[0] && sema_const_int(src, args[0], arg_what(&synthetic, 0, what, sizeof what), 1,
                                 MAX_SAMPLES, &samples) < 0)
            return -1;
        cfg->data = DATA_SYNTHETIC;
        cfg->synthetic_samples = samples;
        return 0;
    }
    if (form == 2) {
        int64_t context = 0;
        if (!sema_bind_args(src, &text, v, args)) return -1;
        int rc = data_path(src, cfg, args[0], "text: the file", "input.txt");
        if (sema_const_int(src, args[1], "text: context", 1, MAX_CONTEXT, &context) < 0) rc = -1;
        if (rc < 0) return -1;
        cfg->data = DATA_TEXT;
        cfg->text_context = context;
        return 0;
    }
    if (!sema_bind_args(src, &idx, v, args)) return -1;
    double scale = 1;
    int rc = data_path(src, cfg, args[0], "idx: the data directory", "fashion-mnist");
    if (args[1] && sema_const_real(src, args[1], "idx: scale", REAL_GT0, &scale) < 0) rc = -1;
    if (rc < 0) return -1;
    cfg->data = DATA_IDX;
    cfg->data_scale = scale;
    return 0;
}

static int entry_batch(Source *src, TrainConfig *cfg, const AstExpr *v)
{
    return sema_const_int(src, v, "batch", 1, MAX_BATCH, &cfg->batch);
}

static int entry_epochs(Source *src, TrainConfig *cfg, const AstExpr *v)
{
    if (sema_const_int(src, v, "epochs", 1, MAX_COUNT, &cfg->epochs) < 0) return -1;
    cfg->epochs_given = true;
    return 0;
}

static int entry_steps(Source *src, TrainConfig *cfg, const AstExpr *v)
{
    return sema_const_int(src, v, "steps", 1, MAX_COUNT, &cfg->steps);
}

static int entry_shuffle(Source *src, TrainConfig *cfg, const AstExpr *v)
{
    return sema_const_bool(src, v, "shuffle", &cfg->shuffle);
}

static int entry_drop_last(Source *src, TrainConfig *cfg, const AstExpr *v)
{
    return sema_const_bool(src, v, "drop_last", &cfg->drop_last);
}

/* Optimizer arguments, by parameter name, into C. */
static int optimizer_arg(Source *src, const Signature *sig, int i, const AstExpr *e,
                         TrainConfig *c)
{
    char what[64];
    const char *key = sig->params[i];
    arg_what(sig, i, what, sizeof what);
    if (strcmp(key, "lr") == 0) return sema_const_real(src, e, what, REAL_GT0, &c->lr);
    if (strcmp(key, "momentum") == 0) return sema_const_real(src, e, what, REAL_GE0, &c->momentum);
    if (strcmp(key, "nesterov") == 0) return sema_const_bool(src, e, what, &c->nesterov);
    if (strcmp(key, "weight_decay") == 0)
        return sema_const_real(src, e, what, REAL_GE0, &c->weight_decay);
    if (strcmp(key, "beta1") == 0) return sema_const_real(src, e, what, REAL_UNIT, &c->beta1);
    if (strcmp(key, "beta2") == 0) return sema_const_real(src, e, what, REAL_UNIT, &c->beta2);
    if (strcmp(key, "eps") == 0) return sema_const_real(src, e, what, REAL_GE0, &c->eps);
    CGC_INTERNAL("optimizer argument %s has no check", key);
}

/* The optimizers, in OptKind's order. */
static const char *const optimizer_names[] = {"sgd", "adam", "adamw", NULL};
static const Signature optimizer_sigs[] = {
    {"sgd", {"lr", "momentum", "nesterov", "weight_decay"}, 1},
    {"adam", {"lr", "beta1", "beta2", "eps", "weight_decay"}, 0},
    {"adamw", {"lr", "beta1", "beta2", "eps", "weight_decay"}, 0},
};

/* Every optimizer setting takes the chosen optimizer's default unless given, so that
 * `--optimizer adam` replaces a file's adamw(weight_decay = 0.1) entirely. */
static int entry_optimizer(Source *src, TrainConfig *cfg, const AstExpr *v)
{
    int form = entry_form(src, v, "optimizer", optimizer_names,
                          "sgd(lr, ...), adam(...) or adamw(...)");
    if (form < 0) return -1;
    const Signature *sig = &optimizer_sigs[form];
    const AstExpr *args[MAX_PARAMS];
    if (!sema_bind_args(src, sig, v, args)) return -1;
    TrainConfig c = *cfg;
    c.optimizer = (OptKind)form;
    c.lr = 1e-3, c.momentum = 0, c.nesterov = false;
    c.beta1 = 0.9, c.beta2 = 0.999, c.eps = 1e-8;
    c.weight_decay = c.optimizer == OPT_ADAMW ? 0.01 : 0;
    int rc = 0;
    for (int i = 0; sig->params[i]; i++)
        if (args[i] && optimizer_arg(src, sig, i, args[i], &c) < 0) rc = -1;
    if (rc == 0 && c.nesterov && c.momentum == 0) {
        diag_error(src, args[2]->loc, "sgd: nesterov needs a momentum > 0");
        rc = -1;
    }
    if (rc == 0) {
        cfg->optimizer = c.optimizer, cfg->lr = c.lr, cfg->momentum = c.momentum;
        cfg->nesterov = c.nesterov, cfg->beta1 = c.beta1, cfg->beta2 = c.beta2;
        cfg->eps = c.eps, cfg->weight_decay = c.weight_decay;
    }
    return rc;
}

static int entry_schedule(Source *src, TrainConfig *cfg, const AstExpr *v)
{
    static const char *const names[] = {"constant", "cosine", "step", NULL};
    static const Signature sigs[] = {
        {"constant", {NULL}, 0},
        {"cosine", {"warmup", "min_lr"}, 0},
        {"step", {"every", "gamma"}, 1},
    };
    int form = entry_form(src, v, "schedule", names,
                          "constant, cosine(warmup, min_lr) or step(every, gamma)");
    if (form < 0) return -1;
    const AstExpr *args[MAX_PARAMS];
    if (!sema_bind_args(src, &sigs[form], v, args)) return -1;
    int64_t warmup = 0, every = 0;
    double min_lr = 0, gamma = 0.1;
    int rc = 0;
    if (form == 1) {
        if (args[0] && sema_const_int(src, args[0], "cosine: warmup", 0, MAX_COUNT, &warmup) < 0)
            rc = -1;
        if (args[1] && sema_const_real(src, args[1], "cosine: min_lr", REAL_GE0, &min_lr) < 0)
            rc = -1;
    } else if (form == 2) {
        if (sema_const_int(src, args[0], "step: every", 1, MAX_COUNT, &every) < 0) rc = -1;
        if (args[1] && sema_const_real(src, args[1], "step: gamma", REAL_GT0, &gamma) < 0) rc = -1;
    }
    if (rc < 0) return -1;
    cfg->schedule = form == 0 ? SCHED_CONSTANT : form == 1 ? SCHED_COSINE : SCHED_STEP;
    cfg->warmup = warmup, cfg->min_lr = min_lr, cfg->step_every = every, cfg->gamma = gamma;
    return 0;
}

static int entry_precision(Source *src, TrainConfig *cfg, const AstExpr *v)
{
    static const char *const names[] = {"fp32", "tf32", "bf16", "fp16", NULL};
    int k;
    if (sema_const_choice(src, v, "precision", names, &k) < 0) return -1;
    cfg->precision = (Precision)k;
    return 0;
}

static int entry_accumulate(Source *src, TrainConfig *cfg, const AstExpr *v)
{
    return sema_const_int(src, v, "accumulate", 1, MAX_BATCH, &cfg->accumulate);
}

static int entry_prefetch(Source *src, TrainConfig *cfg, const AstExpr *v)
{
    cfg->prefetch_given = true;
    return sema_const_int(src, v, "prefetch", 0, MAX_PREFETCH, &cfg->prefetch);
}

static int entry_stream(Source *src, TrainConfig *cfg, const AstExpr *v)
{
    static const char *const names[] = {"auto", "always", "never", NULL};
    int k;
    if (sema_const_choice(src, v, "stream", names, &k) < 0) return -1;
    cfg->stream = (StreamMode)k;
    return 0;
}

static int entry_clip_norm(Source *src, TrainConfig *cfg, const AstExpr *v)
{
    return sema_const_real(src, v, "clip_norm", REAL_GE0, &cfg->clip_norm);
}

static int entry_checkpoint(Source *src, TrainConfig *cfg, const AstExpr *v)
{
    static const char *const names[] = {"none", "all", "auto", NULL};
    int k;
    if (sema_const_choice(src, v, "checkpoint", names, &k) < 0) return -1;
    cfg->checkpoint = (CheckpointMode)k;
    return 0;
}

/* optimizer: with several ranks, each keeps and updates a slice of every parameter's
 * optimizer state (ZeRO stage 1); with one rank, nothing changes. */
static int entry_shard(Source *src, TrainConfig *cfg, const AstExpr *v)
{
    static const char *const names[] = {"none", "optimizer", NULL};
    int k;
    if (sema_const_choice(src, v, "shard", names, &k) < 0) return -1;
    cfg->shard_optimizer = k == 1;
    return 0;
}

/* Bytes, or a number glued to KB, MB or GB (powers of 1024): 512MB, 1.5GB. */
static int entry_memory(Source *src, TrainConfig *cfg, const AstExpr *v)
{
    static const char *const units[] = {"KB", "MB", "GB", NULL};
    double scale = 1, bytes;
    if (v->kind == AST_NEG && v->lhs->kind == AST_NUM && v->lhs->unit[0]) {
        diag_error(src, v->loc, "memory must be between 1 byte and 1024 TB, not -%s%s",
                   sema_fmt_num(v->lhs->num), v->lhs->unit);
        return -1;
    }
    if (v->kind == AST_NUM && v->unit[0]) {
        int k = 0;
        while (units[k] && strcmp(units[k], v->unit) != 0) k++;
        if (!units[k]) {
            bool other_case = strcasecmp(v->unit, "kb") == 0 || strcasecmp(v->unit, "mb") == 0 ||
                              strcasecmp(v->unit, "gb") == 0;
            diag_error(src, v->loc, "unknown memory unit '%s'%s (units are KB, MB and GB, powers "
                       "of 1024; a plain number is bytes)", diag_quote(v->unit, 20),
                       other_case ? sema_did_you_mean(v->unit, units) : "");
            return -1;
        }
        scale = pow(1024, k + 1);
        bytes = v->num * scale;
    } else {
        int r = sema_fold_const(src, v, &bytes);
        if (r < 0) return -1;
        if (r == 0) {
            diag_error(src, sema_expr_start(v), "memory must be a number of bytes or a size "
                       "such as 512MB, not %s", sema_describe(v));
            return -1;
        }
    }
    if (!(bytes >= 1) || bytes > (double)MAX_MEMORY) {
        diag_error(src, sema_expr_start(v), "memory must be between 1 byte and 1024 TB, not %s",
                   sema_describe(v));
        return -1;
    }
    cfg->memory = (int64_t)llround(bytes);
    return 0;
}

static int entry_seed(Source *src, TrainConfig *cfg, const AstExpr *v)
{
    int64_t seed;
    if (sema_const_int(src, v, "seed", 0, MAX_SEED, &seed) < 0) return -1;
    cfg->seed = (uint64_t)seed;
    return 0;
}

static const struct {
    const char *key;
    EntryFn fn;
} train_keys[] = {
    {"data", entry_data},           {"batch", entry_batch},
    {"epochs", entry_epochs},       {"steps", entry_steps},
    {"shuffle", entry_shuffle},     {"drop_last", entry_drop_last},
    {"optimizer", entry_optimizer}, {"schedule", entry_schedule},
    {"precision", entry_precision}, {"accumulate", entry_accumulate},
    {"clip_norm", entry_clip_norm}, {"checkpoint", entry_checkpoint},
    {"memory", entry_memory},       {"seed", entry_seed},
    {"shard", entry_shard},         {"prefetch", entry_prefetch},
    {"stream", entry_stream},
};
enum { NUM_TRAIN_KEYS = sizeof train_keys / sizeof train_keys[0] };

static int train_key_index(const char *key)
{
    for (int i = 0; i < NUM_TRAIN_KEYS; i++)
        if (strcmp(train_keys[i].key, key) == 0) return i;
    return -1;
}

int sema_train_entry(Source *src, IrProgram *p, const char *key, SrcLoc key_loc,
                     const AstExpr *value)
{
    int k = train_key_index(key);
    if (k < 0) {
        const char *names[NUM_TRAIN_KEYS + 1];
        for (int i = 0; i < NUM_TRAIN_KEYS; i++) names[i] = train_keys[i].key;
        names[NUM_TRAIN_KEYS] = NULL;
        diag_error(src, key_loc, "unknown train key '%s'%s", diag_quote(key, 60),
                   sema_did_you_mean(key, names));
        return -1;
    }
    return train_keys[k].fn(src, &p->cfg, value);
}

void sema_train_key_loc(TrainConfig *cfg, const char *key, SrcLoc loc)
{
    if (strcmp(key, "optimizer") == 0) cfg->optimizer_loc = loc;
    else if (strcmp(key, "schedule") == 0) cfg->schedule_loc = loc;
    else if (strcmp(key, "precision") == 0) cfg->precision_loc = loc;
    else if (strcmp(key, "data") == 0) cfg->data_loc = loc;
}

void sema_train_block(Source *src, IrProgram *p, const AstBlock *train)
{
    const AstEntry *seen[NUM_TRAIN_KEYS] = {0};
    p->cfg.has_train_block = true;
    p->cfg.train_loc = train->loc;
    for (int i = 0; i < train->nentries; i++) {
        const AstEntry *e = &train->entries[i];
        int k = train_key_index(e->key);
        if (k >= 0 && seen[k]) {
            diag_error(src, e->key_loc, "'%s' is set twice in the train block", e->key);
            diag_note(src, seen[k]->key_loc, "'%s' is first set here", e->key);
            continue;
        }
        if (k >= 0) seen[k] = e;
        if (sema_train_entry(src, p, e->key, e->key_loc, e->value) == 0)
            sema_train_key_loc(&p->cfg, e->key, e->key_loc);
    }
}

int sema_train_lr(Source *src, IrProgram *p, const AstExpr *value)
{
    const Signature *sig = &optimizer_sigs[p->cfg.optimizer];
    CGC_ASSERT(strcmp(sig->params[0], "lr") == 0);
    return optimizer_arg(src, sig, 0, value, &p->cfg);
}

void sema_train_finish(TrainConfig *cfg)
{
    /* docs/language.md: without a train block, compile, check and run one step. */
    if (!cfg->has_train_block && cfg->steps == 0) cfg->steps = 1;
    /* `steps` alone limits the run; with `epochs` too, whichever ends first. */
    if (cfg->steps > 0 && !cfg->epochs_given) cfg->epochs = 0;
}
