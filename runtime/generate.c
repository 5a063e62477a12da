/* generate.c: sampling bytes from a byte model (generate.h). */
#include "generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/rng.h"
#include "cpu/exec.h"
#include "data.h"
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

/* The evaluation graph over the context CTX (LEN bytes, the rest of the window zeros):
 * the logits at position LEN - 1, or NULL after an error. */
static const float *predict(CpuExec *e, const IrProgram *p, int32_t *ctx, const int32_t *zeros,
                            int64_t len)
{
    CpuFeed feed = {.symvals = {1}, .inputs = {ctx, zeros}};
    if (cpu_exec_run(e, &p->eval, &feed) != 0) return NULL;
    int64_t n = 0;
    const float *logits = cpu_exec_value(e, p->eval.output[IR_OUT_PREDICTION], &n);
    const float *at = logits + (len - 1) * (n / p->cfg.text_context);
    for (int i = 0; i < BYTES; i++)
        if (!isfinite(at[i])) {
            cgc_error("generating text: the model's logit of byte %d at position %lld is %g: "
                      "its weights do not give a distribution to sample from", i,
                      (long long)len - 1, at[i]);
            return NULL;
        }
    return at;
}

int generate_text(const IrProgram *p, float *const *tensors, const GenerateOptions *o, bool escape,
                  FILE *out)
{
    int64_t t = p->cfg.text_context, len = 0;
    const char *prompt = *o->prompt ? o->prompt : "\n";
    int32_t *ctx = xcalloc((size_t)t, sizeof *ctx), *zeros = xcalloc((size_t)t, sizeof *zeros);
    for (const char *c = prompt; *c; c++) {   /* the last T bytes of the prompt */
        if (len == t) memmove(ctx, ctx + 1, (size_t)(t - 1) * sizeof *ctx), len--;
        ctx[len++] = (unsigned char)*c;
        put_byte((unsigned char)*c, escape, out);
    }
    CpuExec *e = cpu_exec_new(p, CPU_F32);
    for (int i = 0; i < p->ntensors; i++)
        memcpy(cpu_exec_tensor(e, i), tensors[i], (size_t)ir_numel(&p->tensors[i].shape, NULL) * sizeof(float));
    int rc = 0;
    for (int64_t i = 0; i < o->tokens && rc == 0; i++) {
        const float *logits = predict(e, p, ctx, zeros, len);
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
    cpu_exec_free(e);
    free(ctx);
    free(zeros);
    return rc;
}

int generate_run(const IrProgram *p, Source *src, const char *path, const GenerateOptions *o)
{
    CGC_ASSERT(p->cfg.data == DATA_TEXT);
    if (data_check_text_inputs(p, src) != 0) return -1;
    float **tensors = xcalloc((size_t)p->ntensors, sizeof *tensors);
    for (int i = 0; i < p->ntensors; i++)
        tensors[i] = xcalloc((size_t)ir_numel(&p->tensors[i].shape, NULL), sizeof(float));
    int rc = train_state_load_weights(path, p, tensors);
    if (rc == 0) rc = generate_text(p, tensors, o, false, stdout);
    for (int i = 0; i < p->ntensors; i++) free(tensors[i]);
    free(tensors);
    return rc;
}
