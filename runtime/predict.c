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

/* Each row's likeliest class of a classifier's scores OUT ([n, classes]), or NULL. */
static int32_t *classes_of(const IrProgram *p, const float *out, const Shape *s)
{
    int64_t c = s->rank >= 2 ? s->dim[s->rank - 1] : 0;
    if (p->num_classes <= 0 || c != p->num_classes) return NULL;
    int64_t rows = ir_numel(s, NULL) / c;
    int32_t *cls = xmalloc((size_t)(rows ? rows : 1) * sizeof *cls);
    for (int64_t r = 0; r < rows; r++) {
        int32_t best = 0;
        for (int32_t k = 1; k < c; k++)
            if (out[r * c + k] > out[r * c + best]) best = k;
        cls[r] = best;
    }
    return cls;
}

static int write_npy(const char *path, const float *out, const Shape *s)
{
    OutFile f;
    if (out_open(&f, PREDICT_OUT_ROLE, path, &out_npy) != 0) return -1;
    arrays_npy_header(f.f, "<f4", s->dim, s->rank);
    fwrite(out, sizeof *out, (size_t)ir_numel(s, NULL), f.f);
    return out_close(&f);
}

/* The output under its binding's name and, for a classifier, "class". */
static int write_st(const IrProgram *p, const char *path, const float *out, const Shape *s,
                    const int32_t *cls)
{
    const char *name = p->eval.nodes[p->eval.output[IR_OUT_PREDICTION]].name;
    StTensor t[2] = { { .name = name ? name : "output", .dtype = "F32", .rank = s->rank, .data = out },
                      { .name = "class", .dtype = "I32", .rank = s->rank - 1, .data = cls } };
    memcpy(t[0].shape, s->dim, sizeof(int64_t) * (size_t)s->rank);
    memcpy(t[1].shape, s->dim, sizeof(int64_t) * (size_t)(s->rank - 1));
    return st_write(PREDICT_OUT_ROLE, &st_tensors, path, t, cls ? 2 : 1, NULL, 0);
}

/* Every row of D through R, in batches of at most BATCH, into OUT. */
static int run_all(Runner *r, const Dataset *d, int64_t batch, float *out, int64_t per)
{
    void *x = xmalloc((size_t)(batch * d->x_row) * sizeof(float));   /* i32 tokens: as many */
    int rc = 0;
    for (int64_t first = 0; first < d->n && rc == 0; first += batch) {
        int64_t rows = d->n - first < batch ? d->n - first : batch;
        rc = run_rows(r, d, first, rows, x, out + first * per, per);
    }
    free(x);
    return rc;
}

int64_t predict_row_values(const IrProgram *p)
{
    Shape s = out_shape(p, 1);
    return ir_numel(&s, NULL);
}

int predict_values(const IrProgram *p, const PredictOptions *o, float *const *tensors,
                   const Dataset *d, float *out)
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
    if (rc == 0) rc = run_all(&r, d, batch > 0 ? batch : 1, out, per);
    if (r.cpu) cpu_exec_free(r.cpu);
    devexec_free(r.dev);
    return rc;
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
        Shape s = out_shape(p, d.n);
        float *out = xmalloc((size_t)(d.n * predict_row_values(p)) * sizeof *out);
        rc = predict_values(p, o, tensors, &d, out);
        bool npy = text_ends_with(o->out, ".npy");
        int32_t *cls = rc == 0 && !npy ? classes_of(p, out, &s) : NULL;
        if (rc == 0) rc = npy ? write_npy(o->out, out, &s) : write_st(p, o->out, out, &s, cls);
        if (rc == 0 && !o->quiet)
            printf("cgc: %lld rows of %s predicted%s, written to %s\n", (long long)d.n, o->input,
                   cls ? " (with each row's class)" : "", o->out);
        free(cls);
        free(out);
        data_free(&in);
    }
    for (int i = 0; i < p->ntensors; i++) free(tensors[i]);
    free(tensors);
    return rc;
}
