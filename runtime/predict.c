/* predict.c: a trained model's outputs for new inputs (predict.h). */
#include "predict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/outfile.h"
#include "../base/text.h"
#include "arrays.h"
#include "cpu/exec.h"
#include "data.h"
#include "devexec.h"
#include "safetensors.h"
#include "train.h"

const OutKind *predict_out_kind(const char *path)
{
    if (text_ends_with(path, ".npy")) return &out_npy;
    if (text_ends_with(path, ".safetensors")) return &st_tensors;
    return NULL;
}

/* What runs the prediction: the CPU reference executor or a device. */
typedef struct Runner {
    const IrProgram *p;
    CpuExec *cpu;       /* or */
    DevExec *dev;
} Runner;

/* The prediction of D's rows FIRST .. FIRST + ROWS - 1 into OUT (ROWS * PER floats), the
 * rows gathered into X. */
static int run_rows(Runner *r, const Dataset *d, int64_t first, int64_t rows, void *x, float *out,
                    int64_t per)
{
    const IrGraph *g = &r->p->eval;
    int id = g->output[IR_OUT_PREDICTION];
    data_gather(d, NULL, first, rows, 0, x, NULL);
    int64_t n = 0;
    if (r->cpu) {
        CpuFeed feed = { .symvals = { rows }, .inputs = { x } };
        const float *v = cpu_exec_run(r->cpu, g, &feed) == 0 ? cpu_exec_value(r->cpu, id, &n) : NULL;
        if (!v) return -1;
        memcpy(out, v, (size_t)n * sizeof *out);
    } else {
        DevFeed feed = { .symvals = { rows }, .inputs = { x } };
        if (devexec_run(r->dev, g, &feed) != 0 || devexec_value(r->dev, g, id, out, &n) != 0) return -1;
    }
    CGC_ASSERT(n == rows * per);
    return 0;
}

/* The prediction's shape for N rows. */
static Shape out_shape(const IrProgram *p, int64_t n)
{
    Shape s = p->eval.nodes[p->eval.output[IR_OUT_PREDICTION]].shape;
    for (int i = 0; i < s.rank; i++)
        if (IR_DIM_IS_SYM(s.dim[i])) s.dim[i] = n;
    return s;
}

/* A classifier's classes: C scores a row (the last dimension of the output shape S); 0
 * for another model. */
static int64_t classes(const IrProgram *p, const Shape *s)
{
    int64_t c = s->rank >= 2 ? s->dim[s->rank - 1] : 0;
    return p->num_classes > 0 && c == p->num_classes ? c : 0;
}

/* Where each batch's outputs go: PUT(CTX, OUT, FIRST, ROWS), OUT holding rows FIRST ..
 * FIRST + ROWS - 1; 0, or -1 after an error. */
typedef int (*PutRows)(void *ctx, const float *out, int64_t first, int64_t rows);

/* Every row of D through P's prediction, in batches, each batch to PUT. */
static int predict_rows(const IrProgram *p, const PredictOptions *o, float *const *tensors,
                        const Dataset *d, PutRows put, void *ctx)
{
    int64_t per = predict_row_values(p);
    Runner r = { .p = p };
    int rc = 0;
    if (o->device) {
        r.dev = devexec_new(o->plan, o->device, o->symmax, o->net_path);
        rc = r.dev ? 0 : -1;
        for (int i = 0; rc == 0 && i < p->ntensors; i++) rc = devexec_tensor_set(r.dev, i, tensors[i]);
    } else {
        r.cpu = cpu_exec_new(p, CPU_F32);
        for (int i = 0; i < p->ntensors; i++)
            memcpy(cpu_exec_tensor(r.cpu, i), tensors[i],
                   (size_t)ir_numel(&p->tensors[i].shape, NULL) * sizeof(float));
    }
    int64_t batch = o->device ? o->symmax[0] : p->cfg.batch;
    batch = batch > 0 ? batch : 1;
    void *x = xmalloc((size_t)(batch * d->x_row) * sizeof(float));   /* i32 tokens: as many */
    float *out = xmalloc((size_t)(batch * per) * sizeof *out);
    for (int64_t first = 0; first < d->n && rc == 0; first += batch) {
        int64_t rows = d->n - first < batch ? d->n - first : batch;
        rc = run_rows(&r, d, first, rows, x, out, per);
        if (rc == 0) rc = put(ctx, out, first, rows);
    }
    free(out);
    free(x);
    if (r.cpu) cpu_exec_free(r.cpu);
    devexec_free(r.dev);
    return rc;
}

typedef struct Whole {
    float *out;
    int64_t per;
} Whole;

static int put_whole(void *ctx, const float *out, int64_t first, int64_t rows)
{
    Whole *w = ctx;
    memcpy(w->out + first * w->per, out, (size_t)(rows * w->per) * sizeof *out);
    return 0;
}

int64_t predict_row_values(const IrProgram *p)
{
    Shape s = out_shape(p, 1);
    return ir_numel(&s, NULL);
}

int predict_values(const IrProgram *p, const PredictOptions *o, float *const *tensors,
                   const Dataset *d, float *out)
{
    Whole w = { out, predict_row_values(p) };
    return predict_rows(p, o, tensors, d, put_whole, &w);
}

/* The output file, written batch by batch: an .npy array, or a safetensors file of the
 * output under its binding's name and, for a classifier, each row's class (kept until
 * the output's bytes are written). */
typedef struct Stream {
    bool npy;
    OutFile npy_file;
    StStream st;
    int64_t per, classes;
    int32_t *cls;               /* classes: a class a row */
} Stream;

static int stream_open(Stream *w, const IrProgram *p, const char *path, int64_t n)
{
    Shape s = out_shape(p, n);
    w->npy = text_ends_with(path, ".npy");
    w->per = predict_row_values(p);
    w->classes = w->npy ? 0 : classes(p, &s);
    if (w->npy) {
        if (out_open(&w->npy_file, PREDICT_OUT_ROLE, path, &out_npy) != 0) return -1;
        arrays_npy_header(w->npy_file.f, "<f4", s.dim, s.rank);
        return 0;
    }
    const char *name = p->eval.nodes[p->eval.output[IR_OUT_PREDICTION]].name;
    StTensor t[2] = { { .name = name ? name : "output", .dtype = "F32", .rank = s.rank },
                      { .name = "class", .dtype = "I32", .rank = s.rank - 1 } };
    memcpy(t[0].shape, s.dim, sizeof(int64_t) * (size_t)s.rank);
    memcpy(t[1].shape, s.dim, sizeof(int64_t) * (size_t)(s.rank - 1));
    if (st_stream_open(&w->st, PREDICT_OUT_ROLE, &st_tensors, path, t, w->classes ? 2 : 1) != 0)
        return -1;
    if (w->classes) w->cls = xmalloc((size_t)(n * (w->per / w->classes) + 1) * sizeof *w->cls);
    return 0;
}

static int put_stream(void *ctx, const float *out, int64_t first, int64_t rows)
{
    Stream *w = ctx;
    size_t bytes = (size_t)(rows * w->per) * sizeof *out;
    if (w->npy) {
        fwrite(out, 1, bytes, w->npy_file.f);   /* a failed write is out_close's to report */
        return 0;
    }
    st_stream_write(&w->st, out, bytes);
    int64_t c = w->classes, scored = rows * w->per / (c ? c : 1), at = first * w->per / (c ? c : 1);
    for (int64_t r = 0; c && r < scored; r++) {
        int32_t best = 0;
        for (int32_t k = 1; k < c; k++)
            if (out[r * c + k] > out[r * c + best]) best = k;
        w->cls[at + r] = best;
    }
    return 0;
}

/* Closes W: the file whole (RC 0), or none, the old one as it was. */
static int stream_close(Stream *w, int rc, int64_t n)
{
    if (w->npy) return rc == 0 ? out_close(&w->npy_file) : (out_discard(&w->npy_file), rc);
    if (rc == 0 && w->classes)
        st_stream_write(&w->st, w->cls, (size_t)(n * w->per / w->classes) * sizeof *w->cls);
    free(w->cls);
    return rc == 0 ? st_stream_close(&w->st) : (st_stream_discard(&w->st), rc);
}

int predict_run(const IrProgram *p, Source *src, const char *weights, const PredictOptions *o)
{
    CGC_ASSERT(p->inference);
    float **tensors = xcalloc((size_t)p->ntensors + 1, sizeof *tensors);
    for (int i = 0; i < p->ntensors; i++)
        tensors[i] = xcalloc((size_t)ir_numel(&p->tensors[i].shape, NULL), sizeof(float));
    DataSplits in;
    int rc = train_state_load_weights(weights, p, tensors) == 0 &&
             data_load_inputs(p, src, o->input, &in) == 0 ? 0 : -1;
    if (rc == 0) {
        const Dataset d = in.train;
        Stream w = {0};
        rc = stream_open(&w, p, o->out, d.n);
        if (rc == 0) rc = stream_close(&w, predict_rows(p, o, tensors, &d, put_stream, &w), d.n);
        if (rc == 0 && !o->quiet)
            printf("cgc: %lld rows of %s predicted%s, written to %s\n", (long long)d.n, o->input,
                   w.classes ? " (with each row's class)" : "", o->out);
        data_free(&in);
    }
    for (int i = 0; i < p->ntensors; i++) free(tensors[i]);
    free(tensors);
    return rc;
}
