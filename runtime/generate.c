/* generate.c: sampling bytes from a byte model (generate.h). */
#include "generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/outfile.h"
#include "../base/rng.h"
#include "arrays.h"
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

/* What runs the model (the CPU reference executor or a device) and the context it has
 * seen: CTX's LEN bytes, the last T at most. */
typedef struct Predictor {
    const IrProgram *p;
    CpuExec *cpu;       /* or */
    DevExec *dev;
    float *logits;      /* dev: room for the prediction at batch 1 */
    int32_t *ctx, *window;   /* T bytes each: the context; the input to a run */
    int64_t t, len;
    bool failed;        /* a run failed (and said why) */
} Predictor;

/* Graph G's prediction (batch 1) after a run over PR->window at POSITION, or NULL. */
static const float *run(Predictor *pr, const IrGraph *g, int64_t position, int64_t *n)
{
    int id = g->output[IR_OUT_PREDICTION];
    const float *logits = pr->logits;
    if (pr->cpu) {
        CpuFeed feed = {.symvals = {1}, .inputs = {pr->window, pr->window}};
        feed.runtime[IR_RT_POSITION] = (double)position;
        logits = cpu_exec_run(pr->cpu, g, &feed) == 0 ? cpu_exec_value(pr->cpu, id, n) : NULL;
    } else {
        DevFeed feed = {.symvals = {1}, .inputs = {pr->window, pr->window}};
        feed.runtime[IR_RT_POSITION] = (double)position;
        if (devexec_run(pr->dev, g, &feed) != 0 || devexec_value(pr->dev, g, id, pr->logits, n) != 0)
            logits = NULL;
    }
    pr->failed |= !logits;
    return logits;
}

/* The decode graph (compiler/decode.c) at the context's last byte, its earlier bytes
 * in the caches: one position's work. */
static const float *decode_last(Predictor *pr, int64_t *n)
{
    pr->window[0] = pr->ctx[pr->len - 1];
    return run(pr, &pr->p->decode, pr->len - 1, n);
}

/* Appends byte B to the context and returns the logits of the byte after it (PREDICT),
 * or NULL after an error (or where !PREDICT, a run being needed only with a cache). With
 * the decode graph a full context restarts from its last T/2 bytes, which run again to
 * fill the caches (two positions a byte, amortized); else the window slides by a byte
 * and the evaluation graph runs it all. */
static const float *append(Predictor *pr, int32_t b, bool predict)
{
    int64_t n = 0;
    bool cached = pr->p->decode.nnodes > 0;
    int64_t keep = cached ? pr->t / 2 : pr->t - 1;
    if (pr->len == pr->t) {
        memmove(pr->ctx, pr->ctx + pr->t - keep, (size_t)keep * sizeof *pr->ctx);
        pr->len = keep;
        for (int64_t i = 1; cached && i <= keep; i++) {
            pr->len = i;
            if (!decode_last(pr, &n)) return NULL;
        }
    }
    pr->ctx[pr->len++] = b;
    if (cached) return decode_last(pr, &n);
    if (!predict) return NULL;
    memcpy(pr->window, pr->ctx, (size_t)pr->len * sizeof *pr->ctx);
    memset(pr->window + pr->len, 0, (size_t)(pr->t - pr->len) * sizeof *pr->window);
    const float *logits = run(pr, &pr->p->eval, 0, &n);
    return logits ? logits + (pr->len - 1) * (n / pr->t) : NULL;
}

/* The logits after the context, checked finite, or NULL. */
static const float *checked(const Predictor *pr, const float *at)
{
    for (int i = 0; at && i < BYTES; i++)
        if (!isfinite(at[i])) {
            cgc_error("generating text: the model's logit of byte %d at position %lld is %g: "
                      "its weights do not give a distribution to sample from", i,
                      (long long)pr->len - 1, at[i]);
            return NULL;
        }
    return at;
}

/* O's logits file, its header written for N rows of BYTES f32. */
static int logits_open(OutFile *f, const GenerateOptions *o, int64_t n)
{
    if (out_open(f, GENERATE_LOGITS_ROLE, o->logits_path, &out_npy) != 0) return -1;
    arrays_npy_header(f->f, "<f4", (const int64_t[]){ n, BYTES }, 2);
    return 0;
}

static int generate_with(Predictor *pr, const GenerateOptions *o, bool escape, FILE *out)
{
    const char *prompt = *o->prompt ? o->prompt : "\n";
    size_t plen = strlen(prompt), skip = plen > (size_t)pr->t ? plen - (size_t)pr->t : 0;
    pr->ctx = xcalloc((size_t)pr->t, sizeof *pr->ctx);
    pr->window = xcalloc((size_t)pr->t, sizeof *pr->window);
    const float *logits = NULL;
    for (size_t i = 0; i < plen; i++) {   /* the last T bytes of the prompt */
        put_byte((unsigned char)prompt[i], escape, out);
        if (i >= skip) logits = append(pr, (unsigned char)prompt[i], i + 1 == plen);
    }
    OutFile f = { 0 };
    int rc = o->logits_path ? logits_open(&f, o, o->tokens) : 0;
    for (int64_t i = 0; i < o->tokens && rc == 0; i++) {
        if (pr->failed || !checked(pr, logits)) {
            rc = -1;
            break;
        }
        if (f.f) fwrite(logits, sizeof *logits, BYTES, f.f);   /* little-endian, as '<f4' says */
        int b = sample_byte(logits, o, (uint64_t)i);
        put_byte(b, escape, out);
        fflush(out);
        if (i + 1 < o->tokens) logits = append(pr, b, true);
    }
    fputc('\n', out);
    if (f.f && rc == 0) rc = out_close(&f);
    else if (f.f) out_discard(&f);
    free(pr->ctx);
    free(pr->window);
    return rc;
}

int generate_text(const IrProgram *p, float *const *tensors, const GenerateOptions *o, bool escape,
                  FILE *out)
{
    Predictor pr = { .p = p, .cpu = cpu_exec_new(p, CPU_F32), .t = p->cfg.text_context };
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
    Predictor pr = { .p = p, .dev = dev, .t = p->cfg.text_context,
                     .logits = xmalloc((size_t)ir_numel(&n->shape, one) * sizeof(float)) };
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
