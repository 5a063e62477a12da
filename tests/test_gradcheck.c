/* test_gradcheck.c: autodiff against central finite differences, op by op.
 *
 * For every differentiable op of ir.h's table this builds a tiny program straight from
 * the ir.c builders (no parser), with the leaves that need gradients as parameters:
 *     loss = SUM(op(params...) * W)        W fixed random weights of op's output shape
 * runs it through the CPU executor in f64, and compares every element of every
 * parameter's autodiff gradient with (loss(p + eps) - loss(p - eps)) / (2 eps).
 * Values are drawn away from the kinks (relu and abs at 0, ties of max/maximum, floor at
 * integers), where a finite difference means nothing. A parameter with no gradient
 * (autodiff gives -1, e.g. behind floor or a comparison) must have a zero difference.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>

#include "check.h"
#include "compiler/passes.h"
#include "runtime/cpu/exec.h"
#include "base/rng.h"

enum { MAX_PARAMS = 8, MAX_INPUT = 256 };
static const double FD_EPS = 1e-6, ATOL = 1e-5, RTOL = 1e-3;
static const SrcLoc L0 = {1, 1};

/* How a parameter's values are drawn: uniform magnitude in [lo, hi], random sign or not. */
typedef struct Range {
    double lo, hi;
    bool any_sign;
} Range;
static const Range SIGNED = {0.2, 1.0, true};     /* away from 0 */
static const Range POSITIVE = {0.5, 1.5, false};  /* log, sqrt, rsqrt, pow's base */

typedef struct Ctx {
    IrProgram *p;
    IrGraph *g;
    Range range[MAX_PARAMS];
    float input_f32[MAX_INPUT];     /* one f32 input at most */
    int32_t labels[MAX_INPUT];      /* one i32 input at most */
    const void *feed[2];
} Ctx;

static uint64_t case_counter;   /* every case draws different values */
static bool differentiated[IR_NUM_OPS];   /* ops some case differentiated */

static Shape dims(int rank, ...)
{
    Shape s = ir_shape0();
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank; i++)
        s.dim[s.rank++] = va_arg(ap, int);
    va_end(ap);
    return s;
}

static double draw(uint64_t counter, Range r)
{
    double u = rng_uniform(11, 7, 2 * counter);
    double mag = r.lo + (r.hi - r.lo) * u;
    bool negative = r.any_sign && rng_uniform(11, 7, 2 * counter + 1) < 0.5f;
    return negative ? -mag : mag;
}

static int param(Ctx *c, const char *name, Shape s, Range r)
{
    int t = ir_add_tensor(c->p, name, IR_PARAM, s, IR_INIT_ZEROS, 0, -1, L0);
    CHECK(t < MAX_PARAMS);
    if (t < MAX_PARAMS) c->range[t] = r;
    return ir_read(c->g, c->p, t, L0);
}

/* A float data input [N, cols] (N = 3): not differentiated, but shapes a gradient. */
static int data_input(Ctx *c, int cols)
{
    Shape s = dims(2, 0, cols);
    s.dim[0] = IR_SYM(0);
    int in = ir_add_input(c->p, "x", DT_F32, s, L0);
    for (int i = 0; i < 3 * cols; i++)
        c->input_f32[i] = (float)draw(1000 + (uint64_t)i, SIGNED);
    c->feed[in] = c->input_f32;
    return ir_input(c->g, c->p, in, L0);
}

/* i32 labels [3], each in [0, classes). */
static int labels_input(Ctx *c, int classes)
{
    int in = ir_add_input(c->p, "labels", DT_I32, dims(1, 3), L0);
    for (int i = 0; i < 3; i++)
        c->labels[i] = (int32_t)((i * 2 + 1) % classes);
    c->feed[in] = c->labels;
    return ir_input(c->g, c->p, in, L0);
}

static void ctx_init(Ctx *c)
{
    memset(c, 0, sizeof *c);
    c->p = ir_program_new();
    c->p->model_name = xstrdup("gradcheck");
    ir_add_symbol(c->p, "N", L0);
    c->g = &c->p->forward;
}

/* --- the check --- */

static void fill_tensors(Ctx *c, CpuExec *e, int weights)
{
    case_counter += 1000;
    for (int t = 0; t < c->p->ntensors; t++) {
        double *v = cpu_exec_tensor(e, t);
        int64_t n = ir_numel(&c->p->tensors[t].shape, NULL);
        Range r = t == weights ? SIGNED : c->range[t];
        for (int64_t i = 0; i < n; i++)
            v[i] = draw(case_counter + (uint64_t)(t * 100 + i), r);
    }
}

static double run_loss(CpuExec *e, const IrGraph *g, const CpuFeed *feed)
{
    CHECK(cpu_exec_run(e, g, feed) == 0);
    return cpu_exec_scalar(e, g->output[IR_OUT_LOSS]);
}

/* Compares tensor T's autodiff gradient AD (NULL: none) with finite differences. */
static int compare_param(const char *name, Ctx *c, CpuExec *e, const CpuFeed *feed, int t,
                         const double *ad)
{
    double *v = cpu_exec_tensor(e, t);
    int64_t n = ir_numel(&c->p->tensors[t].shape, NULL);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double saved = v[i];
        v[i] = saved + FD_EPS;
        double plus = run_loss(e, c->g, feed);
        v[i] = saved - FD_EPS;
        double minus = run_loss(e, c->g, feed);
        v[i] = saved;
        double fd = (plus - minus) / (2 * FD_EPS), got = ad ? ad[i] : 0;
        check_count++;
        if (!(fabs(fd - got) <= ATOL + RTOL * fabs(fd))) {
            check_failures++;
            if (bad++ < 4)
                fprintf(stderr, "%s: d loss / d %s[%lld]: autodiff %.10g, finite difference %.10g\n",
                        name, c->p->tensors[t].name, (long long)i, got, fd);
        }
    }
    return bad;
}

/* Finishes the program around OUT (loss = SUM(OUT * W)), differentiates it and checks
 * every parameter. */
static void gradcheck(const char *name, Ctx *c, int out)
{
    IrProgram *p = c->p;
    IrGraph *g = c->g;
    for (int i = 0; i < g->nnodes; i++) differentiated[g->nodes[i].op] = true;
    int w = ir_add_tensor(p, "weights", IR_STATE, g->nodes[out].shape, IR_INIT_ZEROS, 0, -1, L0);
    int prod = ir_binary(g, IR_MUL, out, ir_read(g, p, w, L0), L0);
    int loss = ir_reduce(g, IR_SUM, prod, IR_AXIS_ALL, L0);
    g->output[IR_OUT_LOSS] = loss;
    int grads[MAX_PARAMS + 1];
    autodiff(g, p, loss, ir_const(g, 1, L0), grads);
    ir_verify(p, g);

    CpuExec *e = cpu_exec_new(p, CPU_F64);
    cpu_exec_init_tensors(e, 5);
    fill_tensors(c, e, w);
    CpuFeed feed = {.symvals = {3}};
    feed.inputs[0] = c->feed[0], feed.inputs[1] = c->feed[1];
    run_loss(e, g, &feed);
    double *ad[MAX_PARAMS] = {0};
    for (int t = 0; t < p->nparams; t++) {
        if (grads[t] < 0)
            continue;
        int64_t n;
        const double *v = cpu_exec_value(e, grads[t], &n);
        CHECK_EQ_INT(n, ir_numel(&p->tensors[t].shape, NULL));
        CHECK(v != NULL);
        /* compare_param reads the parameter's elements: a gradient of another size is none */
        if (!v || n != ir_numel(&p->tensors[t].shape, NULL)) continue;
        ad[t] = xmalloc((size_t)n * sizeof *ad[t]);
        memcpy(ad[t], v, (size_t)n * sizeof *ad[t]);
    }
    int bad = 0;
    for (int t = 0; t < p->nparams; t++)
        bad += compare_param(name, c, e, &feed, t, ad[t]);
    if (bad)
        fprintf(stderr, "%s: %d mismatches\n", name, bad);
    for (int t = 0; t < p->nparams; t++)
        free(ad[t]);
    cpu_exec_free(e);
    ir_program_free(p);
}

/* --- elementwise ops --- */

/* Whether OP gives NaN on signed values in the CPU executor (in f64): its domain is then
 * the positive numbers (log, sqrt, rsqrt, pow's base), and its values are drawn there. */
static bool needs_positive(IrOp op)
{
    IrProgram *p = ir_program_new();
    IrGraph *g = &p->train;
    Shape s = dims(1, 8);
    int t = ir_add_tensor(p, "a", IR_PARAM, s, IR_INIT_ZEROS, 0, -1, L0);
    int a = ir_read(g, p, t, L0);
    int y = ir_op_info[op].arity == 1 ? ir_unary(g, op, a, L0) : ir_binary(g, op, a, a, L0);
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++) g->output[r] = -1;
    CpuExec *e = cpu_exec_new(p, CPU_F64);
    double *v = cpu_exec_tensor(e, t);
    for (int i = 0; i < 8; i++) v[i] = draw(9000 + (uint64_t)i, SIGNED);
    CHECK_EQ_INT(cpu_exec_run(e, g, &(CpuFeed){ .symvals = { 0 } }), 0);
    int64_t n = 0;
    const double *out = cpu_exec_value(e, y, &n);
    CHECK(out != NULL || n == 0);
    bool nan = false;
    for (int64_t i = 0; out && i < n; i++) nan |= isnan(out[i]);
    cpu_exec_free(e);
    ir_program_free(p);
    return nan;
}

/* Every unary op of the table (but CAST, built by ir_cast: cast_op below). */
static void unary_ops(void)
{
    int checked = 0;
    for (int op = 0; op < IR_NUM_OPS; op++) {
        if (ir_op_info[op].cls != IR_CLASS_UNARY || op == IR_CAST) continue;
        Ctx c;
        ctx_init(&c);
        int a = param(&c, "a", dims(2, 3, 4), needs_positive(op) ? POSITIVE : SIGNED);
        /* times a, so that the zero-derivative ops still leave a gradient to check */
        int y = ir_binary(c.g, IR_MUL, ir_unary(c.g, op, a, L0), a, L0);
        gradcheck(ir_op_info[op].name, &c, y);
        checked++;
    }
    CHECK(checked >= 16);
}

/* A real CAST node f32 -> f32 (ir_cast would hand back its input): in f64 the executor's
 * rounding to a half type would defeat the finite difference. */
static void cast_op(void)
{
    Ctx c;
    ctx_init(&c);
    int a = param(&c, "a", dims(2, 3, 4), SIGNED);
    IrNode n = c.g->nodes[a];
    n.op = IR_CAST, n.nin = 1, n.in[0] = a, n.index = 0, n.name = NULL;
    gradcheck("CAST", &c, ir_add_node(c.g, &n));
}

typedef struct ShapePair {
    Shape a, b;
} ShapePair;

/* Every binary op of the table but the gradient ops (never differentiated), over
 * broadcasting shapes. */
static void binary_ops(void)
{
    ShapePair shapes[] = {
        {dims(2, 3, 4), dims(2, 3, 4)}, {dims(2, 3, 4), dims(1, 4)}, {dims(1, 4), dims(2, 3, 4)},
        {dims(2, 3, 1), dims(2, 1, 4)}, {dims(0), dims(2, 3, 4)},  {dims(2, 3, 4), dims(0)},
    };
    int checked = 0;
    for (int op = 0; op < IR_NUM_OPS; op++) {
        if (ir_op_info[op].cls != IR_CLASS_BINARY || ir_op_info[op].backward_only) continue;
        bool positive = needs_positive(op);
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            Ctx c;
            ctx_init(&c);
            int a = param(&c, "a", shapes[k].a, positive ? POSITIVE : SIGNED);
            int b = param(&c, "b", shapes[k].b, SIGNED);
            char name[64];
            snprintf(name, sizeof name, "%s shapes #%zu", ir_op_info[op].name, k);
            int y = ir_binary(c.g, op, a, b, L0);
            /* plus a, so that the zero-derivative ops still leave a gradient to check */
            gradcheck(name, &c, ir_op_info[op].diff ? y : ir_binary(c.g, IR_ADD, y, a, L0));
        }
        checked++;
    }
    CHECK(checked >= 9);
}

/* SELECT: the condition (from a comparison) gets no gradient; a and b broadcast. */
static void select_op(void)
{
    Ctx c;
    ctx_init(&c);
    int cond = ir_binary(c.g, IR_LESS, param(&c, "c", dims(2, 3, 1), SIGNED), ir_const(c.g, 0, L0), L0);
    int a = param(&c, "a", dims(2, 3, 4), SIGNED);
    int b = param(&c, "b", dims(1, 4), SIGNED);
    gradcheck("SELECT", &c, ir_select(c.g, cond, a, b, L0));
}

/* The same value used many times: contributions must add up. */
static void reuse(void)
{
    Ctx c;
    ctx_init(&c);
    int a = param(&c, "a", dims(2, 3, 4), SIGNED);
    int sq = ir_binary(c.g, IR_MUL, a, a, L0);
    int y = ir_binary(c.g, IR_ADD, sq, ir_unary(c.g, IR_TANH, ir_binary(c.g, IR_SUB, a, sq, L0), L0), L0);
    gradcheck("reuse", &c, y);
}

/* --- reductions and shape ops --- */

static void reductions(void)
{
    static const IrOp ops[] = {IR_SUM, IR_MEAN, IR_MAX};
    static const int axes[] = {0, 1, 2, IR_AXIS_ALL};
    for (size_t i = 0; i < 3; i++) {
        for (size_t k = 0; k < 4; k++) {
            Ctx c;
            ctx_init(&c);
            int a = param(&c, "a", dims(3, 2, 3, 4), SIGNED);
            char name[64];
            snprintf(name, sizeof name, "%s axis %d", ir_op_info[ops[i]].name, axes[k]);
            gradcheck(name, &c, ir_reduce(c.g, ops[i], a, axes[k], L0));
        }
    }
}

/* MEAN over the batch axis: a count only known when the graph runs. */
static void mean_over_batch(void)
{
    for (int all = 0; all < 2; all++) {
        Ctx c;
        ctx_init(&c);
        int x = data_input(&c, 4);
        int a = param(&c, "a", dims(1, 4), SIGNED);
        int y = ir_binary(c.g, IR_MUL, ir_unary(c.g, IR_TANH, x, L0), a, L0);
        y = ir_binary(c.g, IR_MUL, y, a, L0);
        gradcheck(all ? "MEAN all over [N, 4]" : "MEAN axis 0 over [N, 4]", &c,
                  ir_reduce(c.g, IR_MEAN, y, all ? IR_AXIS_ALL : 0, L0));
    }
}

/* torch.amax splits the gradient evenly among tied maxima (a finite difference cannot
 * see this, so the values are checked directly). */
static void max_ties(void)
{
    Ctx c;
    ctx_init(&c);
    int a = param(&c, "a", dims(2, 2, 3), SIGNED);
    int m = ir_reduce(c.g, IR_MAX, a, 1, L0);
    int loss = ir_reduce(c.g, IR_SUM, m, IR_AXIS_ALL, L0);
    c.g->output[IR_OUT_LOSS] = loss;
    int grads[1];
    autodiff(c.g, c.p, loss, ir_const(c.g, 1, L0), grads);
    CpuExec *e = cpu_exec_new(c.p, CPU_F64);
    double *v = cpu_exec_tensor(e, 0);
    const double values[6] = {1, 3, 3, 2, 2, 2}, want[6] = {0, 0.5, 0.5, 1.0 / 3, 1.0 / 3, 1.0 / 3};
    memcpy(v, values, sizeof values);
    CpuFeed feed = {.symvals = {3}};
    CHECK(cpu_exec_run(e, c.g, &feed) == 0);
    int64_t n;
    const double *got = cpu_exec_value(e, grads[0], &n);
    CHECK_EQ_INT(n, 6);
    CHECK(got != NULL);
    for (int i = 0; got && i < 6 && n == 6; i++)
        CHECK_CLOSE(got[i], want[i], 1e-15, 0);
    cpu_exec_free(e);
    ir_program_free(c.p);
}

static void shape_ops(void)
{
    Ctx c;
    ctx_init(&c);
    gradcheck("RESHAPE", &c, ir_reshape(c.g, param(&c, "a", dims(2, 3, 4), SIGNED), dims(3, 2, 2, 3), L0));
    ctx_init(&c);
    gradcheck("BROADCAST [4] -> [3, 4]", &c, ir_broadcast(c.g, param(&c, "a", dims(1, 4), SIGNED), dims(2, 3, 4), L0));
    ctx_init(&c);
    gradcheck("BROADCAST [3, 1] -> [2, 3, 4]", &c,
              ir_broadcast(c.g, param(&c, "a", dims(2, 3, 1), SIGNED), dims(3, 2, 3, 4), L0));
    ctx_init(&c);
    gradcheck("REDUCE_TO [2, 3, 4] -> [3, 1]", &c,
              ir_reduce_to(c.g, param(&c, "a", dims(3, 2, 3, 4), SIGNED), dims(2, 3, 1), L0));
    ctx_init(&c);
    gradcheck("TRANSPOSE", &c, ir_transpose(c.g, param(&c, "a", dims(3, 2, 3, 4), SIGNED), L0));
    ctx_init(&c);
    gradcheck("PERMUTE 1,2,0", &c, ir_permute(c.g, param(&c, "a", dims(3, 2, 3, 4), SIGNED), (int[]){1, 2, 0}, L0));
}

/* --- matmul --- */

/* Shape [.., rows, cols] of an operand, stored transposed when TRANS says so. */
static Shape operand(Shape batch, int rows, int cols, bool trans)
{
    Shape s = batch;
    s.dim[s.rank++] = trans ? cols : rows;
    s.dim[s.rank++] = trans ? rows : cols;
    return s;
}

static void matmul_case(int flags, Shape batch_a, Shape batch_b)
{
    Ctx c;
    ctx_init(&c);
    bool ta = flags & IR_MATMUL_TRANS_A, tb = flags & IR_MATMUL_TRANS_B;
    int a = param(&c, "a", operand(batch_a, 3, 4, ta), SIGNED);
    int b = param(&c, "b", operand(batch_b, 4, 2, tb), SIGNED);
    char name[96];
    snprintf(name, sizeof name, "MATMUL%s%s batch ranks %d, %d", ta ? " trans_a" : "",
             tb ? " trans_b" : "", batch_a.rank, batch_b.rank);
    gradcheck(name, &c, ir_matmul(c.g, a, b, flags, L0));
}

static void matmuls(void)
{
    for (int flags = 0; flags < 4; flags++) {
        matmul_case(flags, dims(0), dims(0));
        matmul_case(flags, dims(1, 2), dims(0));        /* B broadcast along A's batch */
        matmul_case(flags, dims(0), dims(1, 2));        /* A broadcast along B's batch */
        matmul_case(flags, dims(2, 2, 1), dims(1, 3));  /* both broadcast */
    }
}

/* --- sliding windows: convolution and pooling --- */

static const IrWindow windows[] = {
    {{3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
    {{2, 3}, {2, 1}, {0, 1}, {1, 2}, 1},
    {{3, 2}, {2, 3}, {1, 1}, {2, 1}, 2},
};

/* UNFOLD of an image in both layouts (the outside value is a constant: no gradient), and
 * FOLD of patches. */
static void window_ops(void)
{
    for (size_t i = 0; i < sizeof windows / sizeof *windows; i++)
        for (int rows = 0; rows < 2; rows++) {
            if (!rows && windows[i].groups != 1) continue;
            int flags = rows ? IR_WINDOW_ROWS : 0;
            Ctx c;
            ctx_init(&c);
            char name[64];
            snprintf(name, sizeof name, "UNFOLD window %zu%s", i, rows ? " rows" : "");
            int img = param(&c, "img", dims(4, 2, 4, 5, 6), SIGNED);
            gradcheck(name, &c, ir_unfold(c.g, img, windows[i], flags, 0.5, L0));
            ctx_init(&c);
            Shape image = dims(4, 2, 4, 5, 6), cols;
            CHECK(ir_window_shape(&image, &windows[i], flags, &cols));
            snprintf(name, sizeof name, "FOLD window %zu%s", i, rows ? " rows" : "");
            gradcheck(name, &c, ir_fold(c.g, param(&c, "cols", cols, SIGNED), image, windows[i],
                                        flags, L0));
        }
}

/* conv2d as sema builds it, over a batch of images only known when the graph runs (the
 * weight's gradient sums over the batch: IR_MATMUL_BATCH_SUM). */
static void conv_tanh(void)
{
    Ctx c;
    ctx_init(&c);
    IrGraph *g = c.g;
    int flat = data_input(&c, 2 * 5 * 6);
    Shape image = dims(4, 0, 2, 5, 6);
    image.dim[0] = IR_SYM(0);
    int x = ir_reshape(g, flat, image, L0);
    IrWindow w = windows[1];
    int cols = ir_unfold(g, x, w, IR_WINDOW_ROWS, 0, L0);
    int weight = param(&c, "weight", dims(2, 3, 2 * 6), SIGNED);
    int bias = param(&c, "bias", dims(1, 3), SIGNED);
    int y = ir_binary(g, IR_ADD, ir_matmul(g, cols, weight, IR_MATMUL_TRANS_B, L0), bias, L0);
    int t = ir_unary(g, IR_TANH, ir_transpose(g, y, L0), L0);
    gradcheck("conv tanh", &c, ir_reduce(g, IR_SUM, t, 0, L0));
}

/* max pooling: patches with -inf outside, reduced by MAX (values drawn apart: no ties). */
static void max_pool(void)
{
    Ctx c;
    ctx_init(&c);
    IrWindow w = {{3, 2}, {2, 2}, {1, 1}, {1, 1}, 1};
    int img = param(&c, "img", dims(4, 2, 3, 5, 6), SIGNED);
    int u = ir_unfold(c.g, img, w, 0, -INFINITY, L0);
    gradcheck("max pool", &c, ir_reduce(c.g, IR_MAX, u, 2, L0));
}

/* --- softmax, losses, dropout, a layernorm --- */

static void softmaxes(void)
{
    for (int axis = 0; axis < 2; axis++) {
        for (int log = 0; log < 2; log++) {
            Ctx c;
            ctx_init(&c);
            int a = param(&c, "a", dims(2, 3, 4), SIGNED);
            char name[64];
            snprintf(name, sizeof name, "%s axis %d", log ? "LOG_SOFTMAX" : "SOFTMAX", axis);
            gradcheck(name, &c, ir_softmax(c.g, log ? IR_LOG_SOFTMAX : IR_SOFTMAX, a, axis, L0));
        }
    }
}

static void cross_entropy(void)
{
    Ctx c;
    ctx_init(&c);
    int logits = param(&c, "logits", dims(2, 3, 5), SIGNED);
    gradcheck("CROSS_ENTROPY", &c, ir_cross_entropy(c.g, logits, labels_input(&c, 5), L0));
    ctx_init(&c);   /* a sequence: [1, 3, 5] logits, a label per position */
    logits = param(&c, "logits", dims(3, 1, 3, 5), SIGNED);
    int labels = ir_reshape(c.g, labels_input(&c, 5), dims(2, 1, 3), L0);
    gradcheck("CROSS_ENTROPY over a sequence", &c, ir_cross_entropy(c.g, logits, labels, L0));
}

/* A table's rows at indices 1, 3, 1: row 1 gathers twice, so its gradient adds two. */
static void embed(void)
{
    Ctx c;
    ctx_init(&c);
    int table = param(&c, "table", dims(2, 4, 3), SIGNED);
    int rows = ir_embed(c.g, table, labels_input(&c, 4), L0);
    gradcheck("EMBED", &c, ir_binary(c.g, IR_MUL, rows, rows, L0));
}

/* Attention's causal softmax: the masked scores get no gradient, the rest a softmax's. */
static void causal_mask(void)
{
    Ctx c;
    ctx_init(&c);
    int a = param(&c, "scores", dims(3, 2, 3, 3), SIGNED);
    int masked = ir_causal_mask(c.g, a, -INFINITY, L0);
    gradcheck("CAUSAL_MASK", &c, ir_softmax(c.g, IR_SOFTMAX, masked, 2, L0));
    /* masked to 0 and weighed: a gradient let through the mask would show */
    ctx_init(&c);
    a = param(&c, "scores", dims(3, 2, 3, 3), SIGNED);
    int w = param(&c, "w", dims(3, 2, 3, 3), SIGNED);
    gradcheck("CAUSAL_MASK to 0", &c, ir_binary(c.g, IR_MUL, ir_causal_mask(c.g, a, 0.0, L0), w, L0));
}

static void dropout(void)
{
    Ctx c;
    ctx_init(&c);
    int a = param(&c, "a", dims(2, 3, 4), SIGNED);
    gradcheck("DROPOUT", &c, ir_dropout(c.g, a, ir_const(c.g, 3, L0), 0.4, 1, L0));
}

/* What sema makes of layernorm(x): statistics over the last axis, then scale and shift. */
static void layernorm(void)
{
    Ctx c;
    ctx_init(&c);
    IrGraph *g = c.g;
    int x = param(&c, "x", dims(2, 3, 4), SIGNED);
    int w = param(&c, "weight", dims(1, 4), SIGNED);
    int b = param(&c, "bias", dims(1, 4), SIGNED);
    Shape col = dims(2, 3, 1);
    int mean = ir_reshape(g, ir_reduce(g, IR_MEAN, x, 1, L0), col, L0);
    int xc = ir_binary(g, IR_SUB, x, mean, L0);
    int var = ir_reshape(g, ir_reduce(g, IR_MEAN, ir_binary(g, IR_MUL, xc, xc, L0), 1, L0), col, L0);
    int r = ir_unary(g, IR_RSQRT, ir_binary(g, IR_ADD, var, ir_const(g, 1e-5, L0), L0), L0);
    int y = ir_binary(g, IR_MUL, ir_binary(g, IR_MUL, xc, r, L0), w, L0);
    gradcheck("layernorm", &c, ir_binary(g, IR_ADD, y, b, L0));
}

/* A linear layer and tanh over data, as sema builds linear(x, 3). */
static void linear_tanh(void)
{
    Ctx c;
    ctx_init(&c);
    IrGraph *g = c.g;
    int x = data_input(&c, 4);
    int w = param(&c, "weight", dims(2, 3, 4), SIGNED);
    int b = param(&c, "bias", dims(1, 3), SIGNED);
    int h = ir_binary(g, IR_ADD, ir_matmul(g, x, w, IR_MATMUL_TRANS_B, L0), b, L0);
    int y = ir_unary(g, IR_TANH, h, L0);
    gradcheck("linear tanh", &c, ir_reduce(g, IR_SUM, y, 0, L0));
}

/* Every op that passes a gradient on (ops.def's DIFF) has a case above, so that a new
 * row of the table is not differentiated unchecked. Leaves pass nothing (their gradients
 * are collected, not ruled), and training lowering resolves a mode switch before any
 * backend runs, to the training value that its D rule passes d to. */
static void every_rule_checked(void)
{
    for (int op = 0; op < IR_NUM_OPS; op++) {
        const IrOpInfo *o = &ir_op_info[op];
        bool rule = o->diff && !o->backward_only && o->cls != IR_CLASS_LEAF &&
                    o->family != IR_FAMILY_MODE_SWITCH;
        if (rule && !differentiated[op])
            fprintf(stderr, "no gradcheck case differentiates %s (ops.def DIFF %u): add one\n",
                    o->name, o->diff);
        CHECK(!rule || differentiated[op]);
    }
}

int main(void)
{
    unary_ops();
    cast_op();
    binary_ops();
    select_op();
    reuse();
    reductions();
    mean_over_batch();
    max_ties();
    shape_ops();
    matmuls();
    window_ops();
    conv_tanh();
    max_pool();
    softmaxes();
    cross_entropy();
    embed();
    causal_mask();
    dropout();
    layernorm();
    linear_tanh();
    every_rule_checked();
    return check_result();
}
