/* test_emu_models.c: every generated kernel of every model, run on the CUDA emulation
 * and compared node by node with the CPU reference executor.
 *
 * For each model in models/ and each precision (fp32, tf32, bf16, fp16), and once with
 * gradient accumulation (so that train_micro runs too): compile as the CLI does, build
 * the plan of each mode, compile its kernels with the emulator, and run the same steps on
 * both executors from the same seed, with the same random inputs (never zeros; labels in
 * range) and runtime scalars. After every graph run, every stored node value and every
 * persistent tensor must agree within the run's tolerance (see tolerance()), and the
 * counter of launches with `last` groups is back at 0 (plan.h). The modes:
 *   eager    one kernel per node;
 *   default  compile_program's pipeline (checkpoint, then compiler/fusion.c's groups),
 *            compared with the reference run on the same (fused, reordered) graphs;
 *   standin  fusion groups of this test's own making (standin_groups()), so that every
 *            path of the fused renderer runs whatever the fusion pass chooses: pointwise
 *            runs, reductions with their prologues, in-place ASSIGNs, multi launches;
 *            every kernel that may take fewer threads (PlanKernel.any_block) launched
 *            with a quarter of its block, as max-autotune may choose.
 *
 * With --cuda the same comparisons run on the first CUDA device instead (kernels compiled
 * by NVRTC, GEMMs by cuBLAS): the `gpu` test, which exits 77 where there is none.
 *
 * Usage: test_emu_models [--asan | --cuda] [--batches B,LAST] [--steps N] [--in-turn] [--skip MODEL]...
 *                        [--convs N] [--tf32-in-f32]
 *                        [MODEL[:PRECISION[:ACCUMULATE[:MODE]]]...];
 * with no case named, all of them but the skipped (MODE: eager, default, standin; all
 * three when absent);
 * B rows in each step but the last, LAST in it and in the evaluation (8 and 5 unless set);
 * N optimizer steps (3 unless set).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdlib.h>
#include <time.h>

#include "driver/compile.h"
#include "compiler/passes.h"
#include "driver/pipeline.h"
#include "runtime/cpu/exec.h"
#include "runtime/devexec.h"
#include "runtime/generate.h"
#include "runtime/predict.h"
#include "runtime/device.h"
#include "tests/check.h"
#include "tests/emu/attention_oracle.h"
#include "tests/emu/drift.h"
#include "tests/emu/emu_device.h"

enum { SHOW_NODES = 5, SHOW_VALUES = 4, MAX_CASES = 160 };
/* Optimizer steps per case (--steps): the last of them with the odd batch. */
static int steps = 3;
/* The batch of every step but the last, and of the last step and the evaluation; set by
 * --batches (boundary shapes: 64k+1 and 64k-1 rows cross a block or tile in the middle). */
static int64_t batch_size = 8, last_batch = 5;

/* Symbol k's value in a run of BATCH rows: the batch for symbol 0, and a different value
 * for every other symbol, so that a kernel reading the wrong symbol shows. */
static void bind_symbols(int64_t symvals[IR_MAX_SYMBOLS], int64_t batch)
{
    for (int k = 0; k < IR_MAX_SYMBOLS; k++) symvals[k] = batch + k;
}
/* Fixed on the emulation (a failure repeats); fresh per run with --cuda, printed, and
 * CGC_TEST_SEED repeats one. */
static uint64_t seed = 20261122;
/* --cuda: the same comparisons on the first CUDA device (label gpu). */
static bool on_cuda;
/* --in-turn: with no case named, each model in two precisions, fp32 and bf16 or tf32 and
 * fp16 by turns (a directory of models that exist for their shapes, not their types). */
static bool in_turn;
static int conv_algos;       /* --convs N: the emulation with a convolution library */
static bool tf32_in_f32;     /* --tf32-in-f32: its tf32 GEMMs unrounded (emu_device.h) */
static bool splits;          /* --splits: every case's train plan splits a sum (its model's
                              * widths and --batches are chosen so) */

typedef enum Mode { MODE_EAGER, MODE_DEFAULT, MODE_STANDIN, NUM_MODES } Mode;
static const char *const mode_name[NUM_MODES] = { "eager", "default", "standin" };

typedef struct Case {
    char model[64];          /* file name in models/ */
    char precision[16];
    int accumulate;          /* 0: as the file says */
    Mode mode;
} Case;

typedef struct Run {
    const Case *c;
    const IrProgram *p;
    const Plan *plan;
    CpuExec *cpu;
    DevExec *dev;
    float *buf;              /* room for the largest node or tensor */
    float *scratch;          /* as much again, for converted reference values */
    int step;
    int mismatches;          /* nodes and tensors reported in this case */
    int inherited;           /* nodes over the tolerance only through their inputs */
    int64_t symvals[IR_MAX_SYMBOLS];   /* of the graph run being compared */
    float **drift;           /* per node of that graph (drift.h); NULL: not known */
    float **stored;          /* per node of that graph, the device's value; NULL: not stored */
    float **before[2];       /* per tensor, the reference's and the device's value before it */
    float **tensor_drift;    /* per tensor, as last compared; NULL: none */
    int compared;            /* node values compared */
    int counter_checks;      /* runs after which the launch counter was read back */
    int attention_checks;    /* attention groups checked against attention in double */
} Run;

/* ---- tolerances ---- */

/* Relative L2 error allowed between device and reference values.
 *  - fp32: the kernels compute what the reference does in f32; only the order of
 *    additions in reductions differs (the reference accumulates in double), so errors
 *    stay at a few f32 ulps: 1e-5.
 *  - tf32: GEMM inputs are rounded to 10 mantissa bits; one ulp of f32 difference in an
 *    input can flip that rounding (2^-11 relative), and it propagates: 1e-3.
 *  - bf16, fp16: values are stored with 8 or 11 mantissa bits; a one-ulp f32 difference
 *    before a store can flip a rounding (2^-8 for bf16), and over a few steps of
 *    training such flips spread through the parameters: 2e-2.
 * Integer nodes (labels) must match exactly, whatever the precision. */
static double tolerance(const Run *r, const IrNode *n)
{
    if (n->dtype == DT_I32) return 0;
    const char *prec = r->c->precision;
    if (strcmp(prec, "fp32") == 0) return 1e-5;
    if (strcmp(prec, "tf32") == 0) return 1e-3;
    return 2e-2;
}

/* ---- inputs ---- */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, -0.05] U [0.05, 1]: random, and never zero. */
static float random_value(uint64_t *s)
{
    double u = (double)(splitmix(s) >> 11) / 9007199254740992.0;
    double v = 0.05 + 0.95 * u;
    return (float)(splitmix(s) & 1 ? v : -v);
}

static void *make_input(const IrProgram *p, int i, int64_t batch, uint64_t *s)
{
    int64_t symvals[IR_MAX_SYMBOLS];
    bind_symbols(symvals, batch);
    int64_t n = ir_numel(&p->inputs[i].shape, symvals);
    if (p->inputs[i].dtype == DT_I32) {
        int32_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
        int64_t classes = p->num_classes > 0 ? p->num_classes : 2;
        for (int64_t k = 0; k < n; k++) v[k] = (int32_t)(splitmix(s) % (uint64_t)classes);
        return v;
    }
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t k = 0; k < n; k++) v[k] = random_value(s);
    return v;
}

/* ---- comparing ---- */

typedef struct Diff {
    double err;              /* relative L2 error of the finite elements */
    int64_t nonfinite_bad;   /* elements where NaN or inf does not match */
    int64_t worst;           /* index of the largest absolute difference */
} Diff;

static bool same_nonfinite(float c, float d)
{
    if (isnan(c) || isnan(d)) return isnan(c) && isnan(d);
    return c == d;   /* both infinite, same sign */
}

static Diff compare(const float *cpu, const float *dev, int64_t n)
{
    Diff df = { 0, 0, -1 };
    double num = 0, den = 0, worst = -1;
    for (int64_t i = 0; i < n; i++) {
        float c = cpu[i], d = dev[i];
        if (!isfinite(c) || !isfinite(d)) {
            if (!same_nonfinite(c, d)) df.nonfinite_bad++, df.worst = i, worst = INFINITY;
            continue;
        }
        double e = (double)d - c;
        num += e * e;
        den += (double)c * c;
        if (fabs(e) > worst) worst = fabs(e), df.worst = i;
    }
    /* An all-zero reference must be matched exactly (a masked gradient, say). */
    df.err = den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
    return df;
}

static bool diff_ok(const Diff *df, double tol)
{
    return df->nonfinite_bad == 0 && df->err <= tol;
}

static void show_values(const float *cpu, const float *dev, int64_t n, const Diff *df)
{
    fprintf(stderr, "      first values (cpu / emu):");
    for (int64_t i = 0; i < n && i < SHOW_VALUES; i++)
        fprintf(stderr, " [%lld] %.9g / %.9g", (long long)i, cpu[i], dev[i]);
    if (df->worst >= 0)
        fprintf(stderr, "\n      largest difference: [%lld] %.9g / %.9g", (long long)df->worst,
                cpu[df->worst], dev[df->worst]);
    fprintf(stderr, "\n");
}

/* Whether step ST computes node ID: its own step, or the launch of its fusion group (for
 * a multi-tensor set split over launches, the first of them). */
static bool step_computes(const IrGraph *g, const PlanStep *st, int id)
{
    int k = g->nodes[id].group;
    if (st->node == id || !k || !st->group) return st->node == id;
    int multi = g->groups[k - 1].multi;
    return st->group == k || (multi && g->groups[st->group - 1].multi == multi);
}

/* The plan step that computes node ID: its kernel (or GEMM) and description. */
static void describe_step(const Run *r, const IrGraph *g, int id, char *buf, size_t len)
{
    const PlanGraph *pg = plan_graph_of(r->plan, g);
    snprintf(buf, len, "no step (a view)");
    for (int s = 0; pg && s < pg->nsteps; s++) {
        const PlanStep *st = &pg->steps[s];
        if (!step_computes(g, st, id)) continue;
        const char *kernel = st->kind == STEP_GEMM ? "GEMM"
                                                   : r->plan->kernels[st->launch.kernel].name;
        snprintf(buf, len, "step %d, %s, \"%s\"", s, kernel, st->what ? st->what : "");
        return;
    }
}

/* Whether node ID is stored on the device, so devexec_value can read it: not an ASSIGN,
 * nor a value a fused kernel keeps in registers, nor one the choices in force leave
 * unwritten (the patches and transposes a convolution library skips). */
static bool has_buffer(Run *r, const IrGraph *g, int id)
{
    const PlanGraph *pg = plan_graph_of(r->plan, g);
    int b = pg->node_buffer[id];
    return b >= 0 && !devexec_unwritten(r->dev, (PlanGraphId)(pg - r->plan->graph), b);
}

/* The node's inputs at element I (the largest difference), where they have as many
 * elements: whether the difference came in with them or was made here. Uses the back
 * half of r->buf, which holds nothing at this point. */
static void show_inputs(Run *r, const IrGraph *g, const IrNode *node, int64_t i)
{
    if (i < 0) return;
    for (int k = 0; k < node->nin; k++) {
        int in = node->in[k];
        int64_t cn = 0, dn = 0;
        const void *cv = cpu_exec_value(r->cpu, in, &cn);
        if (!has_buffer(r, g, in)) continue;    /* kept in a fused kernel's registers */
        if (i >= cn || devexec_value(r->dev, g, in, r->scratch, &dn) != 0 || dn != cn) continue;
        double c = g->nodes[in].dtype == DT_I32 ? ((const int32_t *)cv)[i] : ((const float *)cv)[i];
        fprintf(stderr, "      input %d (%%%d %s): [%lld] %.9g / %.9g\n", k, in,
                ir_op_name(g->nodes[in].op), (long long)i, c, r->scratch[i]);
    }
}

static void report_node(Run *r, const IrGraph *g, int id, const float *cpu, int64_t n,
                        const Diff *df, double tol)
{
    const IrNode *node = &g->nodes[id];
    char step[256];
    describe_step(r, g, id, step, sizeof step);
    fprintf(stderr,
            "  MISMATCH %s %s accumulate %d, step %d, graph %s, node %%%d %s%s%s (%s), "
            ".net line %d, %s: relative L2 error %.3g > %.3g, %lld NaN/inf mismatches, "
            "%lld elements\n",
            r->c->model, r->c->precision, r->p->cfg.accumulate > 0 ? (int)r->p->cfg.accumulate : 1,
            r->step, g->name, id, ir_op_name(node->op), node->name ? " " : "",
            node->name ? node->name : "", ir_dtype_name(node->dtype), node->loc.line, step,
            df->err, tol, (long long)df->nonfinite_bad, (long long)n);
    show_values(cpu, r->buf, n, df);
    show_inputs(r, g, node, df->worst);
}

/* ---- drift: differences that come in with the inputs (drift.h) ---- */

/* Node ID's drift into a fresh array: observed from the values CPU and DEV. */
static float *observed_drift(const float *cpu, const float *dev, int64_t n)
{
    float *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    for (int64_t i = 0; i < n; i++) d[i] = (float)drift_rel(cpu[i], dev[i]);
    return d;
}

/* The tensor that node ID reads, directly (a READ) or through reshapes of its READ, or
 * -1. */
static int viewed_tensor(const IrGraph *g, int id)
{
    while (g->nodes[id].op == IR_RESHAPE) id = g->nodes[id].in[0];
    return g->nodes[id].op == IR_READ ? g->nodes[id].index : -1;
}

/* The bound on node ID's drift from its inputs' (drift.h), in a fresh array; NULL where
 * there is none. */
static float *bound_drift(Run *r, const IrGraph *g, int id, int64_t n)
{
    const IrNode *node = &g->nodes[id];
    DriftInput in[IR_MAX_INPUTS] = { 0 };
    for (int k = 0; k < node->nin; k++) {
        const IrNode *x = &g->nodes[node->in[k]];
        int64_t cn = 0;
        const void *ref = cpu_exec_value(r->cpu, node->in[k], &cn);
        const float *dev = r->stored[node->in[k]];
        int t = viewed_tensor(g, node->in[k]);   /* a tensor as read, not as G left it */
        if (t >= 0) ref = r->before[0][t], dev = r->before[1][t];
        in[k] = (DriftInput){ .shape = &x->shape, .drift = r->drift[node->in[k]],
                              .ref = x->dtype == DT_I32 ? NULL : ref, .dev = dev,
                              .index = x->dtype == DT_I32 ? ref : NULL };
    }
    int64_t cn = 0;
    const float *ref_out = node->dtype == DT_I32 ? NULL : cpu_exec_value(r->cpu, id, &cn);
    float *bound = malloc((size_t)(n ? n : 1) * sizeof *bound);
    if (drift_bound(node, in, ref_out, r->symvals, bound)) return bound;
    free(bound);
    return NULL;
}

/* Whether every element of DEV is within BOUND (NULL: none) plus TOL of CPU. */
static bool within(const float *cpu, const float *dev, int64_t n, const float *bound, double tol)
{
    if (!bound) return false;
    for (int64_t i = 0; i < n; i++)
        if (!same_nonfinite(cpu[i], dev[i]) &&
            !(isfinite(cpu[i]) && isfinite(dev[i]) && drift_rel(cpu[i], dev[i]) <= bound[i] + tol))
            return false;
    return true;
}

/* The node whose value G's ASSIGN stores into tensor T, or -1 when G stores none. */
static int assigned_value(const IrGraph *g, int t)
{
    for (int id = 0; g && id < g->nnodes; id++)
        if (g->nodes[id].op == IR_ASSIGN && g->nodes[id].index == t) return g->nodes[id].in[0];
    return -1;
}

/* The drift tensor T may show after G: that of the value G assigns it, else its own. */
static const float *tensor_bound(Run *r, const IrGraph *g, int t)
{
    int v = assigned_value(g, t);
    return v >= 0 ? r->drift[v] : r->tensor_drift[t];
}

static float *copy_floats(const float *d, int64_t n)
{
    float *c = calloc((size_t)(n ? n : 1), sizeof *c);
    if (d) memcpy(c, d, (size_t)n * sizeof *c);
    return c;
}

static void free_arrays(float **d, int n)
{
    for (int i = 0; i < n; i++) free(d[i]), d[i] = NULL;
}

/* Compares node ID's stored value (an f32 view CPU of the reference's, N elements)
 * against BOUND (NULL: none), or with DERIVE the bound its inputs give, worked out only
 * for a value over its tolerance; returns 1 for a mismatch (reported). */
static int compare_value(Run *r, const IrGraph *g, int id, const float *cpu, int64_t n,
                         const float *bound, bool derive)
{
    double tol = tolerance(r, &g->nodes[id]);
    Diff df = compare(cpu, r->buf, n);
    check_count++;
    r->compared++;
    if (diff_ok(&df, tol)) return 0;
    float *derived = derive ? bound_drift(r, g, id, n) : NULL;
    bool explained = df.nonfinite_bad == 0 && within(cpu, r->buf, n, derive ? derived : bound, tol);
    free(derived);
    if (explained) {
        r->inherited++;
        return 0;
    }
    check_failures++;
    if (r->mismatches++ < SHOW_NODES) report_node(r, g, id, cpu, n, &df, tol);
    return 1;
}

/* Reference value of node ID as f32 (i32 nodes converted) into OUT. */
static const float *cpu_value_f32(Run *r, const IrGraph *g, int id, float *out, int64_t *n)
{
    const void *v = cpu_exec_value(r->cpu, id, n);
    if (g->nodes[id].dtype != DT_I32) return v;
    for (int64_t i = 0; i < *n; i++) out[i] = (float)((const int32_t *)v)[i];
    return out;
}

/* Node ID's stored value into r->buf and its reference into *CPU; false (reported) when
 * it cannot be read. */
static bool read_node(Run *r, const IrGraph *g, int id, float *scratch, const float **cpu,
                      int64_t *n)
{
    int64_t dn = -1;
    *cpu = cpu_value_f32(r, g, id, scratch, n);
    if (devexec_value(r->dev, g, id, r->buf, &dn) != 0) {
        fprintf(stderr, "  %s: reading node %%%d of %s failed\n", r->c->model, id, g->name);
        return false;
    }
    CHECK_EQ_INT(dn, *n);
    return dn == *n;
}

/* ---- attention groups against their own inputs ----
 * A fused attention rounds where the composition does not, so against the reference its
 * outputs pass within their inputs' drift, which in f16 and bf16 is wide. Here each
 * attention group's outputs are also recomputed in double from the values the device
 * stored for its inputs (attention_oracle.h), the error taken relative to the outputs'
 * magnitudes (the sums of their terms' absolute values). The allowance: f32 math in
 * another order (1e-5, the f32 tolerance; a tf32 model's attention multiplies in f32
 * too); in bf16 and f16, the tensor cores' P and dS rounded to the operands' type and the
 * outputs stored in it, a unit or two (2^-8, 2^-11): 1e-2 and 2e-3. */

/* Where the device holds attention operand ID of group K: the node whose value it is
 * (for a permute to heads that fusion cloned into the group, what it permutes; for a
 * product with its permute back in the group, that permute), and whether that value is
 * [N, T, H, D] rather than [N, H, T, D]. */
static int attention_value(const IrGraph *g, int k, int id, bool *interleaved)
{
    const IrNode *n = &g->nodes[id];
    *interleaved = true;
    if (n->op == IR_PERMUTE && n->group == k && g->nodes[n->in[0]].group != k) return n->in[0];
    for (int u = id + 1; n->group == k && u < g->nnodes; u++)
        if (g->nodes[u].op == IR_PERMUTE && g->nodes[u].in[0] == id && g->nodes[u].group == k)
            return u;
    *interleaved = false;
    return id;
}

/* The device's value of operand ID as [bh, t, d] (malloc'd), or NULL where it stored none. */
static float *attention_heads(Run *r, const IrGraph *g, int k, int id, const AttnRef *a)
{
    bool interleaved;
    const float *x = r->stored[attention_value(g, k, id, &interleaved)];
    if (!x) return NULL;
    int64_t n = a->bh * a->t * a->d, heads = g->nodes[id].shape.dim[1];
    float *out = malloc((size_t)n * sizeof *out);
    for (int64_t b = 0; b < a->bh; b++)
        for (int64_t i = 0; i < a->t; i++)
            for (int64_t e = 0; e < a->d; e++) {
                int64_t from = interleaved ? ((b / heads * a->t + i) * heads + b % heads) * a->d + e
                                           : (b * a->t + i) * a->d + e;
                out[(b * a->t + i) * a->d + e] = x[from];
            }
    return out;
}

/* What attention A's operands are: their sizes, scale and mask. */
static AttnRef attention_ref(const IrGraph *g, const IrAttention *a, const int64_t *symvals)
{
    const Shape *s = &g->nodes[a->q].shape;
    AttnRef ref = { .d = s->dim[s->rank - 1], .t = s->dim[s->rank - 2], .causal = a->causal,
                    .scale = a->scale };
    ref.bh = ir_numel(s, symvals) / (ref.t * ref.d);
    return ref;
}

/* Output ID of attention group K against REF, whose terms' magnitudes are MAG. */
static int attention_output(Run *r, const IrGraph *g, int k, const AttnRef *a, int id,
                            const double *ref, const double *mag)
{
    const IrNode *n = &g->nodes[id];
    int64_t count = ir_numel(&n->shape, r->symvals);
    double tol = n->dtype == DT_BF16 ? 1e-2 : n->dtype == DT_F16 ? 2e-3 : 1e-5;
    float *dev = attention_heads(r, g, k, id, a);
    double err = dev ? attn_ref_error(ref, mag, dev, count) : INFINITY;
    free(dev);
    if (err <= tol) return 0;
    check_failures++;
    r->mismatches++;
    fprintf(stderr, "  MISMATCH %s %s, step %d, graph %s, attention group g%d (%s): %%%d against "
                    "attention in double from the device's own inputs: relative L2 error %.3g > %.3g\n",
            r->c->model, r->c->precision, r->step, g->name, k, g->groups[k - 1].name, id, err, tol);
    return 1;
}

static int check_attention(Run *r, const IrGraph *g)
{
    IrSpan *span = ir_group_spans(g);
    int bad = 0;
    for (int k = 1; k <= g->ngroups; k++) {
        if (g->groups[k - 1].kind != IR_GROUP_ATTENTION) continue;
        IrAttention a = ir_attention_group(g, span, k);
        AttnRef ref = attention_ref(g, &a, r->symvals);
        int64_t n = ref.bh * ref.t * ref.d;
        float *q = attention_heads(r, g, k, a.q, &ref), *kk = attention_heads(r, g, k, a.k, &ref);
        float *v = attention_heads(r, g, k, a.v, &ref);
        float *dout = a.backward ? attention_heads(r, g, k, a.dout, &ref) : NULL;
        double *out = calloc((size_t)(3 * n + 1), sizeof *out), *mag = calloc((size_t)(3 * n + 1), sizeof *mag);
        if (!q || !kk || !v || (a.backward && !dout)) {
            fprintf(stderr, "  %s: attention group g%d reads a value the device did not store\n",
                    r->c->model, k);
            check_failures++;
            bad++;
        } else if (a.backward) {
            attn_ref_backward(&ref, q, kk, v, dout, out, mag);
            bad += attention_output(r, g, k, &ref, a.dq, out, mag) +
                   attention_output(r, g, k, &ref, a.dk, out + n, mag + n) +
                   attention_output(r, g, k, &ref, a.dv, out + 2 * n, mag + 2 * n);
        } else {
            attn_ref_forward(&ref, q, kk, v, out, mag);
            bad += attention_output(r, g, k, &ref, a.o, out, mag);
        }
        r->attention_checks++;
        free(q), free(kk), free(v), free(dout);
        free(out);
        free(mag);
    }
    free(span);
    return bad;
}

/* Every stored node of G against the reference, in order, each one's drift recorded
 * for the nodes that read it. A READ, or a reshape of one, is what its readers saw: the
 * tensor before G ran; its stored view shows the tensor after, checked last, against
 * what G assigned. */
static int compare_nodes(Run *r, const IrGraph *g, float *scratch)
{
    int bad = 0;
    for (int id = 0; id < g->nnodes; id++) {
        const IrNode *node = &g->nodes[id];
        int64_t n = ir_numel(&node->shape, r->symvals);
        int t = viewed_tensor(g, id);
        if (t >= 0) {
            r->drift[id] = copy_floats(r->tensor_drift[t], n);
        } else if (!has_buffer(r, g, id)) {   /* an ASSIGN, or kept in registers */
            bool leaf = ir_op_info[node->op].cls == IR_CLASS_LEAF;   /* the same on both */
            r->drift[id] = leaf ? copy_floats(NULL, n) : bound_drift(r, g, id, n);
        } else {
            const float *cpu;
            if (!read_node(r, g, id, scratch, &cpu, &n)) {
                bad++;
                continue;
            }
            bad += compare_value(r, g, id, cpu, n, NULL, true);
            r->drift[id] = observed_drift(cpu, r->buf, n);
            r->stored[id] = copy_floats(r->buf, n);
        }
    }
    bad += check_attention(r, g);
    for (int id = 0; id < g->nnodes; id++) {
        const float *cpu;
        int64_t n;
        int t = viewed_tensor(g, id);
        if (t < 0 || !has_buffer(r, g, id)) continue;
        if (!read_node(r, g, id, scratch, &cpu, &n)) bad++;
        else bad += compare_value(r, g, id, cpu, n, tensor_bound(r, g, t), false);
    }
    return bad;
}

/* Every tensor against the reference after G ran (NULL: before any graph), within the
 * drift of what G assigned it; records each one's drift for the next graph. */
static int compare_tensors(Run *r, const IrGraph *g, const char *when)
{
    int bad = 0;
    for (int i = 0; i < r->p->ntensors; i++) {
        int64_t n = ir_numel(&r->p->tensors[i].shape, NULL);
        if (devexec_tensor_get(r->dev, i, r->buf) != 0) {
            bad++;
            continue;
        }
        const float *cpu = cpu_exec_tensor(r->cpu, i);
        IrNode f32 = { .dtype = DT_F32 };
        double tol = tolerance(r, &f32);
        Diff df = compare(cpu, r->buf, n);
        float *observed = observed_drift(cpu, r->buf, n);
        bool ok = diff_ok(&df, tol) ||
                  (df.nonfinite_bad == 0 && within(cpu, r->buf, n, tensor_bound(r, g, i), tol));
        free(r->tensor_drift[i]);
        r->tensor_drift[i] = observed;
        check_count++;
        if (ok) continue;
        check_failures++;
        bad++;
        if (r->mismatches++ >= SHOW_NODES) continue;
        fprintf(stderr, "  MISMATCH %s %s, %s, tensor %s: relative L2 error %.3g > %.3g, "
                        "%lld NaN/inf mismatches\n",
                r->c->model, r->c->precision, when, r->p->tensors[i].name, df.err, tol,
                (long long)df.nonfinite_bad);
        show_values(cpu, r->buf, n, &df);
    }
    return bad;
}

/* ---- stand-in fusion groups (mode standin) ----
 * Groups made here without reordering anything, to run every path of the fused renderer
 * whatever compiler/fusion.c chooses: maximal runs of consecutive elementwise nodes
 * (READ, INPUT and CONST leaves may sit between them, outside the group), with the
 * reductions that directly follow over the run's shape (a REDUCE group; a reduction on
 * its own too), ASSIGNs stored in place where that is safe, and chains of up to four
 * independent static-shape groups with nothing computed between them as one multi
 * launch. The rules are ir.h's (IrGroup): members broadcast to `work`, and members read
 * outside the group, DROPOUTs and ASSIGNs have exactly `work`. */

enum { MULTI_MAX = 4 };

static bool is_leaf(const IrNode *n)
{
    return n->op == IR_READ || n->op == IR_INPUT || n->op == IR_CONST;
}

static bool pointwise_op(const IrNode *n)
{
    return ir_op_is_elementwise(n->op) || n->op == IR_RUNTIME;
}

static bool is_reduce(const IrNode *n)
{
    return ir_op_info[n->op].cls == IR_CLASS_REDUCE;
}

static bool is_reduction(const IrNode *n)
{
    return is_reduce(n) || n->op == IR_REDUCE_TO;
}

static bool broadcasts_to(const Shape *s, const Shape *work)
{
    Shape out;
    return ir_broadcast_shape(s, work, &out) && ir_shape_equal(&out, work);
}

/* Whether a node after LAST (or a graph output) reads node ID. */
static bool read_after(const IrGraph *g, int id, int last)
{
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++)
        if (g->output[r] == id) return true;
    for (int u = last + 1; u < g->nnodes; u++)
        for (int j = 0; j < g->nodes[u].nin; j++)
            if (g->nodes[u].in[j] == id) return true;
    return false;
}

/* ASSIGN node A may store in place in a group spanning [FIRST, LAST]: every reader of
 * its tensor reads before the group or inside it. */
static bool assign_in_place_ok(const IrProgram *p, const IrGraph *g, int a, int first, int last,
                               const Shape *work)
{
    if (!ir_shape_equal(&p->tensors[g->nodes[a].index].shape, work)) return false;
    for (int rd = 0; rd < g->nnodes; rd++) {
        if (g->nodes[rd].op != IR_READ || g->nodes[rd].index != g->nodes[a].index) continue;
        for (int u = 0; u < g->nnodes; u++)
            for (int j = 0; j < g->nodes[u].nin; j++)
                if (g->nodes[u].in[j] == rd && u > last) return false;
    }
    (void)first;
    return true;
}

/* Whether nodes [FIRST, LAST] (the computing ones) make a valid group over WORK. */
static bool group_ok(const IrProgram *p, const IrGraph *g, int first, int last, const Shape *work)
{
    for (int id = first; id <= last; id++) {
        const IrNode *n = &g->nodes[id];
        if (is_leaf(n) || is_reduction(n)) continue;
        if (n->op == IR_ASSIGN) {
            if (!assign_in_place_ok(p, g, id, first, last, work)) return false;
            continue;
        }
        if (!broadcasts_to(&n->shape, work)) return false;
        bool exact = read_after(g, id, last) || n->op == IR_DROPOUT;
        if (exact && !ir_shape_equal(&n->shape, work)) return false;
    }
    return true;
}

static void mark_group(IrProgram *p, IrGraph *g, int first, int last, IrGroup gr)
{
    char name[64];
    snprintf(name, sizeof name, "standin_%s_%s_%d", gr.kind == IR_GROUP_REDUCE ? "reduce" : "map",
             g->name, first);
    gr.name = ir_intern(p, name);
    int k = ir_add_group(g, &gr);
    for (int id = first; id <= last; id++)
        if (!is_leaf(&g->nodes[id])) g->nodes[id].group = k;
}

/* The reductions from FIRST over input shape WORK: consecutive SUMs, MEANs and MAXes
 * along one axis (*AXIS), or one REDUCE_TO. Returns the last one's id, FIRST - 1 when
 * none. */
static int reductions_from(const IrGraph *g, int first, const Shape *work, int *axis)
{
    int last = first - 1;
    for (int id = first; id < g->nnodes && is_reduction(&g->nodes[id]); id++) {
        const IrNode *n = &g->nodes[id];
        if (!ir_shape_equal(&g->nodes[n->in[0]].shape, work)) break;
        if (n->op == IR_REDUCE_TO) return last < first ? id : last;
        if (last >= first && n->axis != *axis) break;
        *axis = n->axis;
        last = id;
    }
    return last;
}

/* A run of pointwise nodes (and leaves) from FIRST: the last node, and its work shape
 * (the largest member shape). */
static int pointwise_run(const IrGraph *g, int first, Shape *work)
{
    int last = first - 1;
    *work = g->nodes[first].shape;
    for (int id = first; id < g->nnodes; id++) {
        const IrNode *n = &g->nodes[id];
        if (is_leaf(n)) continue;
        if (!pointwise_op(n) && n->op != IR_ASSIGN) break;
        if (n->op != IR_ASSIGN) {
            Shape out;
            if (!ir_broadcast_shape(&n->shape, work, &out)) break;
            if (!ir_shape_equal(&out, work) && !ir_shape_equal(&out, &n->shape)) break;
            *work = out;
        }
        last = id;
    }
    return last;
}

/* One group from FIRST (a computing node) if the rules allow; returns the id after it. */
static int standin_group(IrProgram *p, IrGraph *g, int first)
{
    Shape work;
    int axis = IR_AXIS_ALL, last = pointwise_run(g, first, &work);
    if (last < first) {   /* a reduction on its own */
        work = g->nodes[g->nodes[first].in[0]].shape;
        last = reductions_from(g, first, &work, &axis);
        if (last < first || !group_ok(p, g, first, last, &work)) return first + 1;
        mark_group(p, g, first, last, (IrGroup){ .kind = IR_GROUP_REDUCE, .work = work, .axis = axis });
        return last + 1;
    }
    int red = last + 1;
    while (red < g->nnodes && is_leaf(&g->nodes[red])) red++;
    int red_last = red < g->nnodes ? reductions_from(g, red, &work, &axis) : red - 1;
    if (red_last >= red && group_ok(p, g, first, red_last, &work)) {
        mark_group(p, g, first, red_last, (IrGroup){ .kind = IR_GROUP_REDUCE, .work = work, .axis = axis });
        return red_last + 1;
    }
    for (int end = last; end > first; end--) {   /* shorter until the rules hold */
        if (!group_ok(p, g, first, end, &work)) continue;
        mark_group(p, g, first, end, (IrGroup){ .kind = IR_GROUP_POINTWISE, .work = work });
        return end + 1;
    }
    return first + 1;
}

static bool static_shape(const Shape *s)
{
    for (int i = 0; i < s->rank; i++)
        if (IR_DIM_IS_SYM(s->dim[i])) return false;
    return true;
}

/* Whether group B reads a member of group A (in G). */
static bool group_reads(const IrGraph *g, int b, int a)
{
    for (int id = 0; id < g->nnodes; id++) {
        if (g->nodes[id].group != b) continue;
        for (int j = 0; j < g->nodes[id].nin; j++)
            if (g->nodes[g->nodes[id].in[j]].group == a) return true;
    }
    return false;
}

/* Whether nothing but leaves lies between the last member of group A and group B. */
static bool adjacent(const IrGraph *g, int a, int b)
{
    int last = -1, first = -1;
    for (int id = 0; id < g->nnodes; id++) {
        if (g->nodes[id].group == a) last = id;
        if (g->nodes[id].group == b && first < 0) first = id;
    }
    for (int id = last + 1; id < first; id++)
        if (!is_leaf(&g->nodes[id])) return false;
    return last < first;
}

/* Chains of up to MULTI_MAX consecutive, independent, static-shape groups. */
static void standin_multi(IrGraph *g)
{
    int multi = 0;
    for (int k = 1; k <= g->ngroups;) {
        int n = 1;
        while (k + n <= g->ngroups && n < MULTI_MAX && static_shape(&g->groups[k + n - 1].work) &&
               static_shape(&g->groups[k - 1].work) && adjacent(g, k + n - 1, k + n)) {
            bool independent = true;
            for (int a = k; a < k + n; a++) independent &= !group_reads(g, k + n, a);
            if (!independent) break;
            n++;
        }
        if (n > 1) {
            multi++;
            for (int a = k; a < k + n; a++) g->groups[a - 1].multi = multi;
        }
        k += n;
    }
}

static void standin_groups(IrProgram *p)
{
    IrGraph *graphs[] = { &p->forward, &p->train, &p->train_micro, &p->eval };
    for (int i = 0; i < 4; i++) {
        IrGraph *g = graphs[i];
        for (int id = 0; id < g->nnodes;) {
            const IrNode *n = &g->nodes[id];
            if (is_leaf(n) || (!pointwise_op(n) && !is_reduction(n))) id++;
            else id = standin_group(p, g, id);
        }
        standin_multi(g);
    }
}

/* ---- running ---- */

/* The counter of the launches with `last` groups (plan.h) is 0 again after a run: the
 * next run's last blocks are elected by it. */
static void check_launch_counter(Run *r)
{
    if (r->plan->launch_counter < 0) return;
    Device *d = devexec_device(r->dev);
    uint32_t count = 1;
    CHECK_EQ_INT(d->ops->download(d, &count, devexec_buffer(r->dev, r->plan->launch_counter),
                                  sizeof count), 0);
    CHECK_EQ_INT(count, 0);
    r->counter_checks++;
}

/* On a GPU, each graph run starts from the reference's parameters and optimizer state.
 * cuBLAS sums in another order than the reference, so in bf16 a stored value now and
 * then rounds one unit the other way; Adam's first steps turn such a flip in a gradient
 * near zero into a whole learning-rate step of one weight, and from there a relu can
 * flip in the next step's forward pass. That drift is floating point, not a kernel's
 * fault: each run's own update is compared before the state is put back. (The emulation
 * sums as the reference does, so it keeps its state and is checked over all steps.) */
static void resync_tensors(Run *r)
{
    for (int i = 0; i < r->p->ntensors; i++)
        CHECK_EQ_INT(devexec_tensor_set(r->dev, i, cpu_exec_tensor(r->cpu, i)), 0);
    free_arrays(r->tensor_drift, r->p->ntensors);
}

/* Every tensor's value on both executors into r->before, for the drift of what reads it. */
static void keep_tensors(Run *r)
{
    int n = r->p->ntensors;
    for (int k = 0; k < 2; k++) r->before[k] = calloc((size_t)(n ? n : 1), sizeof *r->before[k]);
    for (int i = 0; i < n; i++) {
        int64_t count = ir_numel(&r->p->tensors[i].shape, NULL);
        r->before[0][i] = copy_floats(cpu_exec_tensor(r->cpu, i), count);
        r->before[1][i] = copy_floats(NULL, count);
        CHECK_EQ_INT(devexec_tensor_get(r->dev, i, r->before[1][i]), 0);
    }
}

/* Runs G on both executors with the same feed, then compares everything. */
static int run_graph(Run *r, const IrGraph *g, int64_t batch, int64_t micro_step, uint64_t *rng,
                     float *scratch)
{
    CpuFeed cf = { .symvals = { 0 } };
    DevFeed df = { .symvals = { 0 } };
    void *inputs[IR_MAX_INPUTS] = { 0 };
    bind_symbols(cf.symvals, batch);
    bind_symbols(df.symvals, batch);
    for (int i = 0; i < r->p->ninputs; i++) {
        inputs[i] = make_input(r->p, i, batch, rng);
        cf.inputs[i] = df.inputs[i] = inputs[i];
    }
    cf.runtime[IR_RT_TOTAL_STEPS] = df.runtime[IR_RT_TOTAL_STEPS] = 10;
    cf.runtime[IR_RT_MICRO_STEP] = df.runtime[IR_RT_MICRO_STEP] = (double)micro_step;
    keep_tensors(r);
    int rc = cpu_exec_run(r->cpu, g, &cf);
    CHECK_EQ_INT(rc, 0);
    int drc = devexec_run(r->dev, g, &df);
    CHECK_EQ_INT(drc, 0);
    check_launch_counter(r);
    bind_symbols(r->symvals, batch);
    r->drift = calloc((size_t)g->nnodes, sizeof *r->drift);
    r->stored = calloc((size_t)g->nnodes, sizeof *r->stored);
    int bad = rc == 0 && drc == 0 ? compare_nodes(r, g, scratch) : 1;
    char when[64];
    snprintf(when, sizeof when, "after %s of step %d", g->name, r->step);
    bad += compare_tensors(r, g, when);
    free_arrays(r->drift, g->nnodes);
    free_arrays(r->stored, g->nnodes);
    free(r->drift);
    free(r->stored);
    r->drift = r->stored = NULL;
    for (int k = 0; k < 2; k++) free_arrays(r->before[k], r->p->ntensors), free(r->before[k]);
    if (on_cuda) resync_tensors(r);
    for (int i = 0; i < r->p->ninputs; i++) free(inputs[i]);
    return bad;
}

static int64_t largest_node(const IrProgram *p, const IrGraph *g, int64_t batch)
{
    int64_t symvals[IR_MAX_SYMBOLS], most = 1;
    bind_symbols(symvals, batch);
    for (int id = 0; g && id < g->nnodes; id++) {
        int64_t n = ir_numel(&g->nodes[id].shape, symvals);
        if (n > most) most = n;
    }
    for (int i = 0; i < p->ntensors; i++) {
        int64_t n = ir_numel(&p->tensors[i].shape, NULL);
        if (n > most) most = n;
    }
    return most;
}

/* The steps: accumulate micro-batches per optimizer step (train_micro for all but the
 * last), the last step with an odd batch, then an evaluation. */
static int run_steps(Run *r)
{
    const IrProgram *p = r->p;
    int accumulate = p->cfg.accumulate > 1 ? (int)p->cfg.accumulate : 1;
    uint64_t rng = seed;
    float *scratch = r->scratch;
    int bad = 0;
    int64_t micro = 0;
    for (r->step = 0; r->step < steps && !bad; r->step++) {
        int64_t batch = r->step == steps - 1 ? last_batch : batch_size;
        for (int m = 0; m < accumulate && !bad; m++, micro++) {
            const IrGraph *g = m == accumulate - 1 ? &p->train : &p->train_micro;
            bad += run_graph(r, g, batch, micro, &rng, scratch);
        }
    }
    if (!bad) bad += run_graph(r, &p->eval, last_batch, micro, &rng, scratch);
    return bad;
}

static IrProgram *compile_case(const Case *c, const char *path)
{
    Source *src = source_load(path);
    if (!src) return NULL;
    char acc[16];
    snprintf(acc, sizeof acc, "%d", c->accumulate);
    Override ov[2] = { { "precision", "precision", c->precision },
                       { "accumulate", "accumulate", acc } };
    IrProgram *p = pipeline_compile(src, ov, c->accumulate > 0 ? 2 : 1);
    source_free(src);
    char why[256];   /* a text model generates through its decode graph (check_generate) */
    if (p && p->cfg.data == DATA_TEXT && decode_lower(p, why, sizeof why) != 0) {
        fprintf(stderr, "  %s: no decode graph: %s\n", c->model, why);
        CHECK(false);
    }
    return p;
}

static int64_t largest(const IrProgram *p)
{
    int64_t a = largest_node(p, &p->train, batch_size), b = largest_node(p, &p->eval, batch_size);
    int64_t m = p->train_micro.nnodes ? largest_node(p, &p->train_micro, batch_size) : 0;
    a = a > b ? a : b;
    return a > m ? a : m;
}

/* models/ of the source tree, or $CGC_MODELS_DIR (the GPU machine runs the build in a
 * copy of the tree at another path). */
static const char *models_dir(void)
{
    const char *env = getenv("CGC_MODELS_DIR");
    return env && *env ? env : CGC_MODELS_DIR;
}

static CudaDeviceInfo cuda_info;

/* The plan's kernels on the device this run compares: compiled by NVRTC and loaded on
 * cuda:0, or built into a .so (SO) for the emulation. */
static int open_device(const Plan *plan, bool asan, char *so, size_t so_len, Device **d)
{
    if (!on_cuda) {
        if (emu_build_plan(plan, asan, so, so_len) != 0) return -1;
        return emu_device_open(so, d);
    }
    snprintf(so, so_len, "cuda:0");
    char *source = plan_module_source(plan);
    CudaCompileOptions o = {.arch = cuda_info.cc_major * 10 + cuda_info.cc_minor};
    CudaCompileResult r = {0};
    int rc = cuda_compile(source, plan->p->model_name, &o, &r);
    free(source);
    if (rc == 0) rc = cuda_open(0, r.cubin, r.cubin_size, d);
    free(r.cubin);
    return rc;
}

/* The plan of C's mode for P (which the passes change). */
static Plan *build_plan(const Case *c, IrProgram *p, const char *path, Compiled *compiled)
{
    memset(compiled, 0, sizeof *compiled);
    CompileOptions o = { .mode = PLAN_DEFAULT, .net_path = path };
    bind_symbols(o.symmax, batch_size);
    switch (c->mode) {
    case MODE_EAGER: return plan_build(p, PLAN_EAGER, path, o.symmax);
    case MODE_STANDIN:
        standin_groups(p);
        return plan_build(p, PLAN_DEFAULT, path, o.symmax);
    default: break;
    }
    if (compile_program(p, &o, compiled) != 0) return NULL;
    Plan *plan = compiled->plan;
    compiled->plan = NULL;   /* the case owns it */
    return plan;
}

/* Launches of the train graph and how many are GEMMs; fusion groups of the train graph. */
static void print_plan_summary(const Plan *plan, const Run *r)
{
    const PlanGraph *pg = &plan->graph[PG_TRAIN];
    int gemms = 0, fused = 0, split = 0;
    for (int i = 0; i < pg->nsteps; i++) {
        gemms += pg->steps[i].kind == STEP_GEMM;
        fused += pg->steps[i].group != 0;
        split += pg->steps[i].sums_parts > 0;
    }
    printf("  %d node values compared; train graph: %d launches (%d GEMMs, %d fused kernels, "
           "%d groups, %d split sums)\n", r->compared, pg->nsteps, gemms, fused,
           pg->ir ? pg->ir->ngroups : 0, split);
    if (splits) CHECK(split > 0);
}

/* A text model's --generate on the device against the CPU executor's from the same weights
 * (the device's after the steps), greedy and sampled (temperature 0.8, top-k 40): the same
 * bytes. In f32 only: a half type's roundings may break a near tie between two logits
 * the other way, which is no bug. */
static void check_generate(Run *r)
{
    const IrProgram *p = r->p;
    if (p->cfg.data != DATA_TEXT || strcmp(r->c->precision, "fp32") != 0) return;
    float **tensors = calloc((size_t)p->ntensors, sizeof *tensors);
    for (int i = 0; i < p->ntensors; i++) {
        tensors[i] = malloc((size_t)ir_numel(&p->tensors[i].shape, NULL) * sizeof(float));
        CHECK_EQ_INT(devexec_tensor_get(r->dev, i, tensors[i]), 0);
    }
    for (int sampled = 0; sampled < 2; sampled++) {
        GenerateOptions o = { .prompt = "The ", .tokens = 100, .temperature = sampled ? 0.8 : 0,
                              .top_k = sampled ? 40 : 0, .seed = 7 };
        char *cpu = NULL, *dev = NULL;
        size_t ncpu = 0, ndev = 0;
        FILE *fc = open_memstream(&cpu, &ncpu), *fd = open_memstream(&dev, &ndev);
        CHECK_EQ_INT(generate_text(p, tensors, &o, true, fc), 0);
        CHECK_EQ_INT(generate_text_device(p, r->dev, &o, true, fd), 0);
        fclose(fc);
        fclose(fd);
        bool same = ncpu == ndev && memcmp(cpu, dev, ncpu) == 0;
        CHECK(same);
        printf("  --generate on the device (%s): %s%s", sampled ? "sampled" : "greedy",
               same ? "the CPU's bytes: " : "MISMATCH, the CPU's: ", cpu);
        if (!same) printf("  the device's: %s", dev);
        free(cpu), free(dev);
    }
    for (int i = 0; i < p->ntensors; i++) free(tensors[i]);
    free(tensors);
}

/* --predict's rows on the device against the CPU executor's: the program recompiled for
 * inference (compiler/inference.c) and planned in the case's mode, the trained device's
 * weights, 37 rows of features (whole batches and a ragged last one): the same outputs
 * within f32's tolerance. In f32, for models whose first input is f32 features. */
static void check_predict(Run *r, const char *path, bool asan)
{
    const Case *c = r->c;
    if (strcmp(c->precision, "fp32") != 0 || r->p->cfg.data == DATA_TEXT || r->p->inputs[0].dtype != DT_F32)
        return;
    IrProgram *q = compile_case(c, path);
    CHECK(q != NULL);
    if (!q) return;
    inference_lower(q);
    Compiled compiled;
    Plan *plan = build_plan(c, q, path, &compiled);
    Device *d = NULL;
    char so[256];
    int64_t symmax[IR_MAX_SYMBOLS], per = 1;
    bind_symbols(symmax, batch_size);
    CHECK_EQ_INT(plan ? open_device(plan, asan, so, sizeof so, &d) : -1, 0);
    for (int k = 1; k < q->inputs[0].shape.rank; k++) per *= q->inputs[0].shape.dim[k];
    Dataset ds = { .n = 37, .x_row = per, .x = malloc(sizeof(float) * (size_t)(37 * per)) };
    for (int64_t i = 0; i < ds.n * per; i++) ds.x[i] = (float)((i * 7919 % 2003) / 1001.5 - 1.0);
    float **tensors = calloc((size_t)q->ntensors + 1, sizeof *tensors);
    for (int i = 0; i < q->ntensors; i++) {
        tensors[i] = malloc((size_t)ir_numel(&q->tensors[i].shape, NULL) * sizeof(float));
        CHECK_EQ_INT(devexec_tensor_get(r->dev, ir_find_tensor(r->p, q->tensors[i].name), tensors[i]), 0);
    }
    int64_t n = ds.n * predict_row_values(q);
    float *cpu = malloc(sizeof(float) * (size_t)n), *dev = malloc(sizeof(float) * (size_t)n);
    PredictOptions on_cpu = { 0 }, on_dev = { .device = d, .plan = plan, .symmax = symmax, .net_path = path };
    bool ran = d && predict_values(q, &on_cpu, tensors, &ds, cpu) == 0 &&
               predict_values(q, &on_dev, tensors, &ds, dev) == 0;
    CHECK(ran);
    double err = 0, mag = 0;
    for (int64_t i = 0; ran && i < n; i++) {
        err = fmax(err, fabs((double)cpu[i] - dev[i]));
        mag = fmax(mag, fabs((double)cpu[i]));
    }
    CHECK(ran && err <= 1e-5 * (mag > 1 ? mag : 1));
    printf("  --predict on the device: %lld rows, %d launches a batch, against the CPU's: max "
           "difference %.3g (largest output %.3g)\n", (long long)ds.n,
           plan ? plan->graph[PG_EVAL].nsteps : 0, err, mag);
    for (int i = 0; i < q->ntensors; i++) free(tensors[i]);
    free(tensors), free(cpu), free(dev), free(ds.x);
    if (d) d->ops->close(d);
    plan_free(plan);
    compiled_free(&compiled);
    ir_program_free(q);
}

/* With --convs, the library computed every convolution it can: forward, filter and data
 * gradients as the plan's runs have them. */
static void check_convs(const Plan *plan, Device *d)
{
    if (!conv_algos || on_cuda) return;
    int want[CONV_KINDS] = {0};
    for (int r = 0; r < plan->nwindows; r++)
        for (int j = 0; plan->windows[r].conv && j < plan->windows[r].nreaders; j++) {
            char role = plan_window_conv_role(&plan->windows[r], j);
            want[role == 'f' ? CONV_FORWARD : role == 'd' ? CONV_DATA_GRAD : CONV_FILTER_GRAD]++;
        }
    int runs = 0;
    for (int k = 0; k < CONV_KINDS; k++) {
        printf("  %d %s calls (%s in the plan)\n", emu_device_conv_calls(d, (ConvKind)k),
               (const char *[]){"forward", "data gradient", "filter gradient"}[k], want[k] ? "some" : "none");
        CHECK(want[k] == 0 || emu_device_conv_calls(d, (ConvKind)k) > 0);
        runs += want[k];
    }
    CHECK(runs > 0);     /* a case run with --convs has convolutions the library takes */
}

/* Every launch of a kernel that may take fewer threads a block, in every graph of PLAN,
 * with a quarter of its block and of its items per block (max-autotune's smallest
 * candidate); returns how many kernels. */
static int quarter_blocks(const Plan *plan, DevExec *e)
{
    int n = 0;
    bool *seen = calloc((size_t)plan->nkernels + 1, sizeof *seen);
    for (int gid = 0; seen && gid < PG_NUM; gid++)
        for (int i = 0; i < plan->graph[gid].nsteps; i++) {
            const PlanStep *s = &plan->graph[gid].steps[i];
            const PlanKernel *k = s->kind == STEP_LAUNCH ? &plan->kernels[s->launch.kernel] : NULL;
            if (!k || !k->any_block || s->launch.max_blocks == 1) continue;
            int64_t items = s->launch.items_per_block / 4;
            devexec_choose(e, (PlanGraphId)gid, i, &(PlanStepChoice){.items = items > 0 ? items : 1,
                                                                    .block = k->block / 4});
            n += !seen[s->launch.kernel];
            seen[s->launch.kernel] = true;
        }
    free(seen);
    return n;
}

static void run_case(const Case *c, bool asan)
{
    char path[4096 + sizeof c->model + 1], so[256];
    snprintf(path, sizeof path, "%.4096s/%.*s", models_dir(), (int)sizeof c->model - 1, c->model);
    printf("%s %s accumulate %d, %s%s\n", c->model, c->precision, c->accumulate ? c->accumulate : 1,
           mode_name[c->mode], asan ? " (asan)" : "");
    fflush(stdout);
    IrProgram *p = compile_case(c, path);
    CHECK(p != NULL);
    if (!p) return;
    Compiled compiled;
    Plan *plan = build_plan(c, p, path, &compiled);
    CHECK(plan != NULL);
    Device *d = NULL;
    int opened = plan ? open_device(plan, asan, so, sizeof so, &d) : -1;
    CHECK_EQ_INT(opened, 0);
    if (opened != 0) {
        CHECK(!"kernels built and loaded");
        plan_free(plan);
        compiled_free(&compiled);
        ir_program_free(p);
        return;
    }
    int64_t symmax[IR_MAX_SYMBOLS];
    bind_symbols(symmax, batch_size);
    Run r = { .c = c, .p = p, .plan = plan };
    if (conv_algos && !on_cuda) emu_device_convs(d, conv_algos, NULL);
    if (tf32_in_f32 && !on_cuda) emu_device_tf32_in_f32(d, true);
    r.dev = devexec_new_unshared(plan, d, symmax, path);
    CHECK(r.dev != NULL);
    if (r.dev && c->mode == MODE_STANDIN)
        printf("  %d kernels launched with a quarter of their block\n", quarter_blocks(plan, r.dev));
    if (r.dev) {
        r.cpu = cpu_exec_new(p, CPU_F32);
        r.buf = malloc(2 * (size_t)largest(p) * sizeof(float));
        r.scratch = r.buf + largest(p);
        cpu_exec_init_tensors(r.cpu, seed);
        CHECK_EQ_INT(devexec_init_tensors(r.dev, seed), 0);
        r.tensor_drift = calloc((size_t)(p->ntensors ? p->ntensors : 1), sizeof *r.tensor_drift);
        int bad = compare_tensors(&r, NULL, "after initialisation");
        if (!bad) bad = run_steps(&r);
        if (bad) fprintf(stderr, "  %s %s: %d mismatches (kernels %s)\n", c->model,
                         c->precision, r.mismatches, on_cuda ? "on cuda:0" : so);
        else if (!on_cuda) emu_remove_build(so);
        print_plan_summary(plan, &r);
        /* a plan whose step bookkeeping runs as `last` groups had its counter read back
         * (models with nothing to keep across steps, such as plain SGD in fp32, have none) */
        if (plan->launch_counter >= 0) CHECK(r.counter_checks > 0);
        /* a plan with fused attention had every one checked in double (check_attention) */
        int attention = 0;
        const IrGraph *train = plan->graph[PG_TRAIN].ir;
        for (int k = 0; plan->mode != PLAN_EAGER && train && k < train->ngroups; k++)
            attention += train->groups[k].kind == IR_GROUP_ATTENTION;
        if (attention) {
            CHECK(r.attention_checks >= attention);
            printf("  %d attention kernel runs checked against attention in double\n", r.attention_checks);
        }
        check_convs(plan, d);
        if (!bad) check_generate(&r);
        if (!bad) check_predict(&r, path, asan);
        if (r.inherited)
            printf("  %d node values over the tolerance only through their inputs "
                   "(see tests/emu/drift.h)\n", r.inherited);
        free_arrays(r.tensor_drift, p->ntensors);
        free(r.tensor_drift);
        free(r.buf);
        cpu_exec_free(r.cpu);
        devexec_free(r.dev);
    }
    d->ops->close(d);
    plan_free(plan);
    compiled_free(&compiled);
    ir_program_free(p);
}

/* ---- cases ---- */

static int case_order(const void *a, const void *b)
{
    const Case *x = a, *y = b;
    return strcmp(x->model, y->model);
}

/* --skip MODEL: left out of the run over every model (a large one that a test of its own
 * runs at a small batch). */
static const char *skipped[8];
static int nskipped;

static bool is_skipped(const char *file)
{
    for (int i = 0; i < nskipped; i++)
        if (strncmp(file, skipped[i], strlen(skipped[i])) == 0 && strcmp(file + strlen(skipped[i]), ".net") == 0)
            return true;
    return false;
}

/* Every .net of models/ but the skipped ones, sorted. */
static int list_models(Case *out, int max)
{
    DIR *dir = opendir(models_dir());
    if (!dir) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(dir)) && n < max;) {
        size_t len = strlen(e->d_name);
        if (len > 4 && len < sizeof out[0].model && strcmp(e->d_name + len - 4, ".net") == 0 &&
            !is_skipped(e->d_name))
            memcpy(out[n++].model, e->d_name, len + 1);
    }
    closedir(dir);
    qsort(out, (size_t)n, sizeof *out, case_order);
    return n;
}

static int all_cases(Case *cases, int max)
{
    static const char *precisions[] = { "fp32", "bf16", "tf32", "fp16" };
    Case models[32] = { 0 };
    int nmodels = list_models(models, 32), n = 0;
    for (int m = 0; m < nmodels; m++)
        for (int k = 0; k < 4; k++) {
            if (in_turn && k != m % 2 * 2 && k != m % 2 * 2 + 1) continue;
            for (int mode = 0; mode < NUM_MODES && n < max; mode++) {
                cases[n] = models[m];
                cases[n].mode = (Mode)mode;
                snprintf(cases[n++].precision, sizeof cases[0].precision, "%s", precisions[k]);
            }
        }
    /* gradient accumulation: train_micro, with and without loss scaling (on mlp.net,
     * where the directory has it) */
    bool has_mlp = false;
    for (int m = 0; m < nmodels; m++) has_mlp |= strcmp(models[m].model, "mlp.net") == 0;
    for (int mode = 0; mode < NUM_MODES && n + 2 <= max && has_mlp; mode++) {
        Case acc = { "mlp.net", "fp32", 2, (Mode)mode };
        cases[n++] = acc;
        snprintf(acc.precision, sizeof acc.precision, "fp16");
        cases[n++] = acc;
    }
    return n;
}

/* "mlp", "mlp:fp16", "mlp:fp16:2" or "mlp:fp16:0:standin" into OUT (all modes when none
 * is named); returns how many cases, or 0 for an unknown mode. */
static int parse_case(const char *arg, Case *out)
{
    Case c = { "", "fp32", 0, MODE_EAGER };
    char buf[sizeof c.model - 4];
    snprintf(buf, sizeof buf, "%s", arg);
    char *prec = strchr(buf, ':'), *acc = NULL, *mode = NULL;
    if (prec) *prec++ = '\0';
    if (prec && (acc = strchr(prec, ':'))) *acc++ = '\0';
    if (acc && (mode = strchr(acc, ':'))) *mode++ = '\0';
    snprintf(c.model, sizeof c.model, "%.*s%s", (int)sizeof buf - 1, buf,
             strstr(buf, ".net") ? "" : ".net");
    if (prec) snprintf(c.precision, sizeof c.precision, "%s", prec);
    if (acc) c.accumulate = atoi(acc);
    int n = 0;
    for (int m = 0; m < NUM_MODES; m++) {
        if (mode && strcmp(mode, mode_name[m]) != 0) continue;
        out[n] = c;
        out[n++].mode = (Mode)m;
    }
    if (!n) fprintf(stderr, "test_emu_models: unknown mode '%s' (eager, default, standin)\n", mode);
    return n;
}

int main(int argc, char **argv)
{
    bool asan = false;
    Case cases[MAX_CASES];
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--asan") == 0) asan = true;
        else if (strcmp(argv[i], "--cuda") == 0) on_cuda = true;
        else if (strcmp(argv[i], "--in-turn") == 0) in_turn = true;
        else if (strcmp(argv[i], "--convs") == 0 && i + 1 < argc) conv_algos = atoi(argv[++i]);
        else if (strcmp(argv[i], "--tf32-in-f32") == 0) tf32_in_f32 = true;
        else if (strcmp(argv[i], "--splits") == 0) splits = true;
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc && atoi(argv[i + 1]) >= 1) steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--skip") == 0 && i + 1 < argc && nskipped < 8) skipped[nskipped++] = argv[++i];
        else if (strcmp(argv[i], "--batches") == 0) {
            long long b = 0, l = 0;
            char end = 0;
            if (i + 1 >= argc || sscanf(argv[++i], "%lld,%lld%c", &b, &l, &end) != 2 || l < 1 || b < l) {
                fprintf(stderr, "test_emu_models: --batches wants B,LAST (0 < LAST <= B)\n");
                return 2;
            }
            batch_size = b, last_batch = l;
        }
        else if (n + NUM_MODES <= MAX_CASES) {
            int got = parse_case(argv[i], cases + n);
            if (!got) return 2;
            n += got;
        }
    }
    if (on_cuda) {
        char why[256];
        if (cuda_probe(&cuda_info, 1, why, sizeof why) < 1) {
            printf("skipped: no usable CUDA device: %s\n", why);
            return 77;
        }
        seed = (uint64_t)time(NULL);
        printf("on cuda:0, %s\n", cuda_info.name);
    }
    if (getenv("CGC_TEST_SEED")) seed = strtoull(getenv("CGC_TEST_SEED"), NULL, 10);
    printf("seed %llu (CGC_TEST_SEED=%llu repeats this run)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    if (n == 0) n = all_cases(cases, MAX_CASES);
    CHECK(n > 0);
    for (int i = 0; i < n; i++) run_case(&cases[i], asan);
    return check_result();
}
