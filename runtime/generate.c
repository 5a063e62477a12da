/* generate.c: sampling bytes from a byte model (generate.h). */
#include "generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/rng.h"
#include "cpu/exec.h"
#include "data.h"
#include "devexec.h"
#include "train.h"

enum { BYTES = 256 };

/* The likeliest byte first (the lower byte first among equals): ORDER := 0..255 so. */
static void rank_bytes(const float *logits, int order[BYTES])
{
    for (int i = 0; i < BYTES; i++) {
        int j = i;
        for (; j > 0 && logits[order[j - 1]] < logits[i]; j--) order[j] = order[j - 1];
        order[j] = i;
    }
}

/* A byte drawn from LOGITS (finite) as O says, with draw number DRAW. */
static int sample_byte(const float *logits, const GenerateOptions *o, uint64_t draw)
{
    int order[BYTES];
    rank_bytes(logits, order);
    if (o->temperature == 0) return order[0];
    int k = o->top_k > 0 && o->top_k < BYTES ? (int)o->top_k : BYTES;
    double w[BYTES], total = 0;
    for (int j = 0; j < k; j++)
        total += w[j] = exp(((double)logits[order[j]] - logits[order[0]]) / o->temperature);
    double u = rng_uniform(o->seed, RNG_SAMPLE, o->first_draw + draw) * total;
    for (int j = 0; j < k - 1; j++)
        if ((u -= w[j]) < 0) return order[j];
    return order[k - 1];
}

static void put_byte(int b, bool escape, FILE *out)
{
    bool plain = b < 0x7f ? b >= 0x20 || b == '\n' || b == '\t' : false;
    fputc(escape && !plain ? '?' : b, out);
}

/* What runs the evaluation graph: the CPU reference executor or a device. */
typedef struct Predictor {
    const IrProgram *p;
    CpuExec *cpu;       /* or */
    DevExec *dev;
    float *logits;      /* dev: room for the prediction at batch 1 */
} Predictor;

/* The prediction's logits over the window (batch 1) after a run, or NULL. */
static const float *run_window(Predictor *pr, int32_t *ctx, const int32_t *zeros, int64_t *n)
{
    const IrGraph *g = &pr->p->eval;
    int id = g->output[IR_OUT_PREDICTION];
    if (pr->cpu) {
        CpuFeed feed = {.symvals = {1}, .inputs = {ctx, zeros}};
        if (cpu_exec_run(pr->cpu, g, &feed) != 0) return NULL;
        return cpu_exec_value(pr->cpu, id, n);
    }
    DevFeed feed = {.symvals = {1}, .inputs = {ctx, zeros}};
    if (devexec_run(pr->dev, g, &feed) != 0 || devexec_value(pr->dev, g, id, pr->logits, n) != 0)
        return NULL;
    return pr->logits;
}

/* The evaluation graph over the context CTX (LEN bytes, the rest of the window zeros):
 * the logits at position LEN - 1, or NULL after an error. */
static const float *predict(Predictor *pr, int32_t *ctx, const int32_t *zeros, int64_t len)
{
    int64_t n = 0;
    const float *logits = run_window(pr, ctx, zeros, &n);
    if (!logits) return NULL;
    const float *at = logits + (len - 1) * (n / pr->p->cfg.text_context);
    for (int i = 0; i < BYTES; i++)
        if (!isfinite(at[i])) {
            cgc_error("generating text: the model's logit of byte %d at position %lld is %g: "
                      "its weights do not give a distribution to sample from", i,
                      (long long)len - 1, at[i]);
            return NULL;
        }
    return at;
}

static int generate_with(Predictor *pr, const GenerateOptions *o, bool escape, FILE *out)
{
    int64_t t = pr->p->cfg.text_context, len = 0;
    const char *prompt = *o->prompt ? o->prompt : "\n";
    int32_t *ctx = xcalloc((size_t)t, sizeof *ctx), *zeros = xcalloc((size_t)t, sizeof *zeros);
    for (const char *c = prompt; *c; c++) {   /* the last T bytes of the prompt */
        if (len == t) memmove(ctx, ctx + 1, (size_t)(t - 1) * sizeof *ctx), len--;
        ctx[len++] = (unsigned char)*c;
        put_byte((unsigned char)*c, escape, out);
    }
    int rc = 0;
    for (int64_t i = 0; i < o->tokens && rc == 0; i++) {
        const float *logits = predict(pr, ctx, zeros, len);
        if (!logits) {
            rc = -1;
            break;
        }
        int b = sample_byte(logits, o, (uint64_t)i);
        if (len == t) memmove(ctx, ctx + 1, (size_t)(t - 1) * sizeof *ctx), len--;
        ctx[len++] = b;
        put_byte(b, escape, out);
        fflush(out);
    }
    fputc('\n', out);
    free(ctx);
    free(zeros);
    return rc;
}

int generate_text(const IrProgram *p, float *const *tensors, const GenerateOptions *o, bool escape,
                  FILE *out)
{
    Predictor pr = { .p = p, .cpu = cpu_exec_new(p, CPU_F32) };
    for (int i = 0; i < p->ntensors; i++)
        memcpy(cpu_exec_tensor(pr.cpu, i), tensors[i],
               (size_t)ir_numel(&p->tensors[i].shape, NULL) * sizeof(float));
    int rc = generate_with(&pr, o, escape, out);
    cpu_exec_free(pr.cpu);
    return rc;
}

int generate_text_device(const IrProgram *p, DevExec *dev, const GenerateOptions *o, bool escape,
                         FILE *out)
{
    const IrNode *n = &p->eval.nodes[p->eval.output[IR_OUT_PREDICTION]];
    int64_t one[IR_MAX_SYMBOLS] = { 1 };
    Predictor pr = { .p = p, .dev = dev, .logits = xmalloc((size_t)ir_numel(&n->shape, one) * sizeof(float)) };
    int rc = generate_with(&pr, o, escape, out);
    free(pr.logits);
    return rc;
}

/* The weights TENSORS on D's arena for PLAN, then generate_text_device. */
static int generate_on(const IrProgram *p, const GenerateDevice *d, float *const *tensors,
                       const GenerateOptions *o)
{
    DevExec *e = devexec_new(d->plan, d->device, d->symmax, d->net_path);
    int rc = e ? 0 : -1;
    for (int i = 0; rc == 0 && i < p->ntensors; i++) rc = devexec_tensor_set(e, i, tensors[i]);
    if (rc == 0) rc = generate_text_device(p, e, o, false, stdout);
    devexec_free(e);
    return rc;
}

int generate_run(const IrProgram *p, Source *src, const char *path, const GenerateOptions *o,
                 const GenerateDevice *d)
{
    CGC_ASSERT(p->cfg.data == DATA_TEXT);
    if (data_check_text_inputs(p, src) != 0) return -1;
    float **tensors = xcalloc((size_t)p->ntensors, sizeof *tensors);
    for (int i = 0; i < p->ntensors; i++)
        tensors[i] = xcalloc((size_t)ir_numel(&p->tensors[i].shape, NULL), sizeof(float));
    int rc = train_state_load_weights(path, p, tensors);
    if (rc == 0 && d) rc = generate_on(p, d, tensors, o);
    else if (rc == 0) rc = generate_text(p, tensors, o, false, stdout);
    for (int i = 0; i < p->ntensors; i++) free(tensors[i]);
    free(tensors);
    return rc;
}
