/* train_state.c: the state of a training run on disk (--save and --resume).
 *
 * A checkpoint is one safetensors file. Parameters keep their names (docs/language.md,
 * "The model block": `h1.weight`, F32, PyTorch's shapes), so `safetensors.torch.load_file`
 * reads a model that PyTorch can use directly. Everything else a resumed run needs is in
 * the same file: optimizer and training state as F32 tensors named `cgc.*` (Adam's
 * moments, step counters, the fp16 loss scale), and the position in the data as
 * metadata strings (epoch, batch within it, global step). Random numbers are counter-
 * based, so there is no generator state to store. Doubles are written in C's hex-float
 * form so that they read back to the same bits.
 *
 * A resumed run continues the same training: the checkpoint records the configuration
 * (data, seed, batch, accumulation, order, optimizer, schedule, precision, clipping) and
 * --resume refuses a run that differs in any of it. Only the run's length (epochs,
 * steps) may change; when it does, cgc says so, since a cosine schedule then follows the
 * new length.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/exec.h"
#include "safetensors.h"
#include "train.h"

_Static_assert((int)ST_MAX_RANK >= (int)IR_MAX_RANK, "every tensor of a program fits a checkpoint");

enum { FORMAT_VERSION = 1 };

enum { MAX_META = 24, META_TEXT = 1024 };

typedef struct MetaBuf {
    StMeta meta[MAX_META];
    char text[MAX_META][META_TEXT];
    int n;
} MetaBuf;

static void meta_add(MetaBuf *m, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void meta_add(MetaBuf *m, const char *key, const char *fmt, ...)
{
    CGC_ASSERT(m->n < MAX_META);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->text[m->n], META_TEXT, fmt, ap);
    va_end(ap);
    m->meta[m->n] = (StMeta){key, m->text[m->n]};
    m->n++;
}

/* The configuration a resumed run must share with the saved one: metadata key ("cgc."
 * and the train key that sets it, which the hint names) and its canonical text. */
typedef struct Setting {
    const char *key;
    char value[META_TEXT];
    bool makes_state;   /* it decides which state tensors a run keeps */
} Setting;

enum { NUM_SETTINGS = 10 };

static void setting(Setting *s, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void setting(Setting *s, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    s->key = key;
    s->makes_state = false;
    vsnprintf(s->value, META_TEXT, fmt, ap);
    va_end(ap);
}

static void describe_config(const TrainConfig *c, Setting s[NUM_SETTINGS])
{
    char optimizer[META_TEXT], schedule[META_TEXT], data[META_TEXT];
    config_optimizer_str(c, optimizer, sizeof optimizer);
    config_schedule_str(c, schedule, sizeof schedule);
    config_data_str(c, data, sizeof data);
    setting(&s[0], "cgc.data", "%s", data);
    setting(&s[1], "cgc.seed", "%llu", (unsigned long long)c->seed);
    setting(&s[2], "cgc.batch", "%lld", (long long)c->batch);
    setting(&s[3], "cgc.accumulate", "%lld", (long long)c->accumulate);
    setting(&s[4], "cgc.shuffle", "%s", c->shuffle ? "true" : "false");
    setting(&s[5], "cgc.drop_last", "%s", c->drop_last ? "true" : "false");
    setting(&s[6], "cgc.optimizer", "%s", optimizer);
    setting(&s[7], "cgc.schedule", "%s", schedule);
    setting(&s[8], "cgc.precision", "%s", config_precision_name(c->precision));
    setting(&s[9], "cgc.clip_norm", "%.9g", c->clip_norm);
    s[3].makes_state = s[6].makes_state = s[8].makes_state = true;   /* accum, moments, scaler */
}

/* Tensor I's shape in a checkpoint: a sharded state's is its parameter's, the state of
 * every rank's slices (so that a run of any number of ranks, sharded or not, resumes). */
static const Shape *stored_shape(const IrProgram *p, int i)
{
    const IrTensor *d = &p->tensors[i];
    return d->sharded ? &p->tensors[d->param_of].shape : &d->shape;
}

int train_state_save(const char *path, const IrProgram *p, float *const *tensors,
                    const TrainProgress *pr, int64_t total_steps)
{
    int n = 0;
    StTensor *t = xcalloc((size_t)(p->ntensors ? p->ntensors : 1), sizeof *t);
    for (int i = 0; i < p->ntensors; i++) {
        if (!ir_tensor_saved(&p->tensors[i])) continue;
        const Shape *shape = stored_shape(p, i);
        t[n].name = p->tensors[i].name;
        t[n].dtype = "F32";
        t[n].rank = shape->rank;
        memcpy(t[n].shape, shape->dim, sizeof(int64_t) * (size_t)shape->rank);
        t[n++].data = tensors[i];
    }
    MetaBuf m = {0};
    Setting config[NUM_SETTINGS];
    describe_config(&p->cfg, config);
    meta_add(&m, "format", "cgc-checkpoint-%d", FORMAT_VERSION);
    meta_add(&m, "cgc.model", "%s", p->model_name);
    for (int i = 0; i < NUM_SETTINGS; i++) meta_add(&m, config[i].key, "%s", config[i].value);
    meta_add(&m, "cgc.total_steps", "%lld", (long long)total_steps);
    meta_add(&m, "cgc.epoch", "%lld", (long long)pr->epoch);
    meta_add(&m, "cgc.batch_in_epoch", "%lld", (long long)pr->batch_in_epoch);
    meta_add(&m, "cgc.step", "%lld", (long long)pr->step);
    meta_add(&m, "cgc.skipped", "%lld", (long long)pr->skipped);
    meta_add(&m, "cgc.loss_sum", "%a", pr->loss_sum);
    meta_add(&m, "cgc.loss_count", "%lld", (long long)pr->loss_count);
    int rc = st_save(path, t, n, m.meta, m.n);
    free(t);
    return rc;
}

/* Metadata KEY as an integer within [lo, hi], or -1 after an error. */
static int meta_int(const StFile *f, const char *path, const char *key, long long lo,
                    long long hi, long long *out)
{
    const char *s = st_meta(f, key);
    char *end;
    if (!s) {
        cgc_error("%s: not a cgc checkpoint: no '%s' in its metadata", path, key);
        return -1;
    }
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) {
        cgc_error("%s: metadata '%s' is '%s', not a number in [%lld, %lld]", path, key,
                  diag_quote(s, 40), lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* Every setting of the saved run must be this run's too; with STATE_ONLY, those that
 * decide which state tensors it keeps. */
static int check_settings(const StFile *f, const char *path, const TrainConfig *c,
                          bool state_only)
{
    Setting now[NUM_SETTINGS];
    describe_config(c, now);
    for (int i = 0; i < NUM_SETTINGS; i++) {
        if (state_only && !now[i].makes_state) continue;
        const char *saved = st_meta(f, now[i].key);
        if (!saved) {
            cgc_error("%s: not a cgc checkpoint: no '%s' in its metadata", path, now[i].key);
            return -1;
        }
        if (strcmp(saved, now[i].value) == 0) continue;
        cgc_error("%s was saved with %s %s, this run has %s; a resumed run continues the same "
                  "training, so set %s to '%s' (only epochs and steps may change)", path,
                  now[i].key + 4, diag_quote(saved, 100), diag_quote(now[i].value, 100),
                  now[i].key + 4, diag_quote(saved, 100));
        return -1;
    }
    return 0;
}

static int load_tensors(const StFile *f, const char *path, const IrProgram *p,
                        float *const *tensors)
{
    char want[128], got[128];
    for (int i = 0; i < st_count(f); i++)   /* inference has no use for the training's state */
        if (ir_find_tensor(p, st_get(f, i)->name) < 0 &&
            !(p->inference && strncmp(st_get(f, i)->name, "cgc.", 4) == 0)) {
            cgc_error("%s: tensor '%s' is not part of this model and optimizer (was it saved "
                      "from another model, or with another optimizer?)", path,
                      diag_quote(st_get(f, i)->name, 60));
            return -1;
        }
    for (int i = 0; i < p->ntensors; i++) {
        const IrTensor *d = &p->tensors[i];
        if (!ir_tensor_saved(d)) continue;
        const Shape *want_shape = stored_shape(p, i);
        const StTensor *t = st_find(f, d->name);
        if (!t) {
            cgc_error("%s: no tensor '%s' (was it saved from another model, or with another "
                      "optimizer?)", path, d->name);
            return -1;
        }
        Shape s = ir_shape0();
        s.rank = t->rank;
        for (int k = 0; k < t->rank && k < IR_MAX_RANK; k++) s.dim[k] = t->shape[k];
        if (strcmp(t->dtype, "F32") != 0 || t->rank > IR_MAX_RANK || !ir_shape_equal(&s, want_shape)) {
            cgc_error("%s: tensor '%s' is %s%s, the model's is F32%s", path, d->name, t->dtype,
                      t->rank > IR_MAX_RANK ? "[...]" : ir_shape_str(p, &s, got, sizeof got),
                      ir_shape_str(p, want_shape, want, sizeof want));
            return -1;
        }
        memcpy(tensors[i], t->data, (size_t)ir_numel(want_shape, NULL) * sizeof(float));
    }
    cpu_copies_refresh(p, tensors);   /* not saved: made from the parameters again */
    return 0;
}

/* A step counter as an f32 tensor counts exactly to 2^24, where adding 1 no longer changes
 * it. */
static float f32_count(int64_t n)
{
    return n < (1 << 24) ? (float)n : (float)(1 << 24);
}

/* Every loaded value within its tensor's range (IrTensor.range): a run saves nothing else,
 * so a file that holds another was changed or damaged after it was saved. */
static int check_values(const char *path, const IrProgram *p, float *const *tensors)
{
    for (int i = 0; i < p->ntensors; i++) {
        const IrTensor *d = &p->tensors[i];
        if (!ir_tensor_saved(d)) continue;
        int64_t n = ir_numel(stored_shape(p, i), NULL);
        for (int64_t k = 0; k < n; k++) {
            if (ir_range_holds(d->range, tensors[i][k])) continue;
            cgc_error("%s: tensor '%s' holds %g at element %lld, where a run saves only %s: "
                      "the file was changed or damaged after it was saved; resume from "
                      "another checkpoint", path, d->name, tensors[i][k], (long long)k,
                      ir_range_text(d->range));
            return -1;
        }
    }
    return 0;
}

int train_state_check_counters(const char *path, const IrProgram *p, float *const *tensors,
                               const TrainProgress *pr)
{
    const struct {
        const char *name;
        int64_t steps;
    } counters[] = {{IR_TRAIN_STEP, pr->step}, {IR_OPTIM_STEP, pr->step - pr->skipped}};
    for (size_t c = 0; c < sizeof counters / sizeof counters[0]; c++) {
        int i = ir_find_tensor(p, counters[c].name);
        if (i < 0 || tensors[i][0] == f32_count(counters[c].steps)) continue;
        cgc_error("%s: tensor '%s' is %g, but its metadata says the run had taken %lld steps "
                  "(cgc.step, of which cgc.skipped skipped): the file was changed or damaged "
                  "after it was saved; resume from another checkpoint", path,
                  counters[c].name, tensors[i][0], (long long)counters[c].steps);
        return -1;
    }
    return 0;
}

/* The checkpoint PATH, its format and model checked against P, or NULL after an error. */
static StFile *open_checkpoint(const char *path, const IrProgram *p)
{
    StFile *f = st_load(path);
    if (!f) return NULL;
    const char *format = st_meta(f, "format"), *model = st_meta(f, "cgc.model");
    if (!format || strcmp(format, "cgc-checkpoint-1") != 0)
        cgc_error("%s: not a cgc checkpoint (metadata 'format' is %s%s%s); a run resumes from "
                  "a file that cgc saved", path, format ? "'" : "", format ? diag_quote(format, 40) : "missing",
                  format ? "'" : "");
    else if (!model)
        cgc_error("%s: not a cgc checkpoint: no 'cgc.model' in its metadata", path);
    else if (strcmp(model, p->model_name) != 0)
        cgc_error("%s was saved from model '%s', this is model '%s'; a run resumes only from a "
                  "checkpoint of its own model", path, diag_quote(model, 60), p->model_name);
    else
        return f;
    st_free(f);
    return NULL;
}

int train_state_load_weights(const char *path, const IrProgram *p, float *const *tensors)
{
    StFile *f = open_checkpoint(path, p);
    if (!f) return -1;
    int rc = check_settings(f, path, &p->cfg, true) || load_tensors(f, path, p, tensors) != 0 ||
             check_values(path, p, tensors) != 0 ? -1 : 0;
    st_free(f);
    return rc;
}

int train_state_load(const char *path, const IrProgram *p, float *const *tensors,
                    TrainProgress *pr, int64_t total_steps)
{
    StFile *f = open_checkpoint(path, p);
    if (!f) return -1;
    int rc = -1;
    long long epoch, bie, step, skipped, count, saved_total;
    const long long big = 1ll << 50;
    const char *loss_sum = st_meta(f, "cgc.loss_sum");
    if (meta_int(f, path, "cgc.epoch", 0, big, &epoch) ||
        meta_int(f, path, "cgc.batch_in_epoch", 0, big, &bie) ||
        meta_int(f, path, "cgc.step", 0, big, &step) || meta_int(f, path, "cgc.skipped", 0, big, &skipped) ||
        meta_int(f, path, "cgc.loss_count", 0, big, &count) ||
        meta_int(f, path, "cgc.total_steps", 1, big, &saved_total))
        goto out;
    /* Another optimizer, precision or accumulation keeps other state tensors: the clearer
     * reason when they differ. Then the tensors (another model's), then the rest. */
    if (check_settings(f, path, &p->cfg, true) || load_tensors(f, path, p, tensors) != 0 ||
        check_settings(f, path, &p->cfg, false))
        goto out;
    char *end;
    double sum = loss_sum ? strtod(loss_sum, &end) : 0;
    if (!loss_sum || !*loss_sum || *end) {
        cgc_error("%s: metadata 'cgc.loss_sum' is missing or not a number", path);
        goto out;
    }
    *pr = (TrainProgress){epoch, bie, step, skipped, sum, count, 0};
    if (check_values(path, p, tensors) != 0) goto out;
    if (saved_total != total_steps)
        fprintf(stderr, "cgc: note: %s was saved from a run of %lld steps; this run spans %lld, "
                "and the learning-rate schedule follows the new length\n", path, saved_total,
                (long long)total_steps);
    rc = 0;
out:
    st_free(f);
    return rc;
}
