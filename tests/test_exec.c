/* test_exec.c: the CPU reference executor against a naive double-precision evaluation.
 *
 * Each test builds a small program whose batch symbol N is bound at run time, runs it
 * in the executor (f32 and f64), and recomputes every computed node here, plainly and
 * in double, from the executor's own values of that node's inputs, so that a mismatch
 * points at one op. Derivative ops are also checked against central differences of
 * the executor's forward ops. Then: rounding bit patterns, dropout masks, ASSIGN
 * semantics, bad labels, determinism across thread counts, and buffer reuse across
 * batch sizes.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "compiler/ir.h"
#include "runtime/cpu/exec.h"
#include "base/rng.h"

enum { N = -1 };   /* a dimension written N is symbol 0, the batch (IR_SYM(0)) */
static const SrcLoc NOLOC = { 0, 0 };

static Shape shp(int rank, ...)
{
    Shape s = ir_shape0();
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank; i++) s.dim[i] = va_arg(ap, int);
    va_end(ap);
    s.rank = rank;
    return s;
}

static IrProgram *new_program(void)
{
    IrProgram *p = ir_program_new();
    ir_add_symbol(p, "N", NOLOC);
    p->cfg.seed = 1234;
    return p;
}

/* A program input and the node that reads it. */
static int input(IrProgram *p, const char *name, DType t, Shape s)
{
    int i = ir_add_input(p, name, t, s, NOLOC);
    return ir_input(&p->forward, p, i, NOLOC);
}

/* ---- feeding ---- */

typedef struct Feed {
    CpuFeed f;
    void *owned[IR_MAX_INPUTS];
} Feed;

static uint64_t lcg_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

static double lcg_uniform(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * (double)lcg_next(s) / 9007199254740992.0;
}

/* Data for every input of P: inputs named "pos..." get values in [0.5, 2] (for log,
 * sqrt, pow), i32 inputs class ids below 7, "bool..." zeros and ones, the rest [-2, 2]. */
static void feed_make(Feed *fd, const IrProgram *p, int64_t batch, uint64_t seed)
{
    memset(fd, 0, sizeof *fd);
    fd->f.symvals[0] = batch;
    fd->f.runtime[IR_RT_TOTAL_STEPS] = 1000;
    uint64_t s = seed;
    for (int i = 0; i < p->ninputs; i++) {
        const IrInput *in = &p->inputs[i];
        int64_t n = ir_numel(&in->shape, fd->f.symvals);
        if (in->dtype == DT_I32) {
            int32_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
            for (int64_t k = 0; k < n; k++) v[k] = (int32_t)(lcg_next(&s) % 7);
            fd->owned[i] = v;
        } else {
            float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
            bool pos = strncmp(in->name, "pos", 3) == 0, flag = strncmp(in->name, "bool", 4) == 0;
            for (int64_t k = 0; k < n; k++)
                v[k] = flag ? (float)(lcg_next(&s) % 2)
                            : (float)(pos ? lcg_uniform(&s, 0.5, 2) : lcg_uniform(&s, -2, 2));
            fd->owned[i] = v;
        }
        fd->f.inputs[i] = fd->owned[i];
    }
}

static void feed_free(Feed *fd)
{
    for (int i = 0; i < IR_MAX_INPUTS; i++) free(fd->owned[i]);
}

/* ---- node values as double arrays ---- */

typedef struct Arr {
    int rank;
    int64_t d[IR_MAX_RANK];
    int64_t n;
    double *v;
} Arr;

static Arr arr_shape(const Shape *s, const int64_t *sym)
{
    Arr a = { .rank = s->rank, .n = 1 };
    for (int i = 0; i < s->rank; i++) {
        a.d[i] = s->dim[i] < 0 ? sym[-s->dim[i] - 1] : s->dim[i];
        a.n *= a.d[i];
    }
    a.v = calloc((size_t)(a.n ? a.n : 1), sizeof(double));
    return a;
}

static Arr node_value(CpuExec *e, const IrGraph *g, int id, const int64_t *sym, CpuReal real)
{
    Arr a = arr_shape(&g->nodes[id].shape, sym);
    int64_t n;
    const void *v = cpu_exec_value(e, id, &n);
    CHECK_EQ_INT(n, a.n);
    CHECK(v != NULL || n == 0);
    for (int64_t i = 0; v && i < a.n && i < n; i++) {
        if (g->nodes[id].dtype == DT_I32) a.v[i] = ((const int32_t *)v)[i];
        else if (real == CPU_F64) a.v[i] = ((const double *)v)[i];
        else a.v[i] = ((const float *)v)[i];
    }
    return a;
}

static void unravel(int64_t flat, const Arr *a, int64_t *idx)
{
    for (int i = a->rank - 1; i >= 0; i--) {
        idx[i] = flat % a->d[i];
        flat /= a->d[i];
    }
}

/* Flat index into IN of the element NumPy broadcasting pairs with output index OIDX. */
static int64_t bcast_at(const Arr *in, const int64_t *oidx, int orank)
{
    int64_t flat = 0;
    for (int i = 0; i < in->rank; i++) {
        int64_t j = oidx[orank - in->rank + i];
        flat = flat * in->d[i] + (in->d[i] == 1 ? 0 : j);
    }
    return flat;
}

/* ---- the naive reference, op by op ---- */

static double sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2))); }
static double gelu_tanh(double x)
{
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double ref_unary(IrOp op, double x)
{
    switch (op) {
    case IR_NEG: return -x;
    case IR_EXP: return exp(x);
    case IR_LOG: return log(x);
    case IR_SQRT: return sqrt(x);
    case IR_RSQRT: return 1 / sqrt(x);
    case IR_ABS: return fabs(x);
    case IR_SIGN: return x > 0 ? 1 : x < 0 ? -1 : 0;
    case IR_RELU: return x > 0 ? x : 0;
    case IR_GELU: return gelu(x);
    case IR_GELU_TANH: return gelu_tanh(x);
    case IR_TANH: return tanh(x);
    case IR_SIGMOID: return sigmoid(x);
    case IR_SILU: return x * sigmoid(x);
    case IR_SOFTPLUS: return x > 20 ? x : log1p(exp(x));
    case IR_COS: return cos(x);
    case IR_FLOOR: return floor(x);
    case IR_NONFINITE: return isfinite(x) ? 0 : 1;
    default: return NAN;
    }
}

static double ref_binary(IrOp op, double a, double b)
{
    const double c = sqrt(2 / M_PI), k = 0.044715;
    switch (op) {
    case IR_ADD: return a + b;
    case IR_SUB: return a - b;
    case IR_MUL: return a * b;
    case IR_DIV: return a / b;
    case IR_MAXIMUM: return a >= b ? a : b;
    case IR_MINIMUM: return a <= b ? a : b;
    case IR_POW: return pow(a, b);
    case IR_LESS: return a < b;
    case IR_EQUAL: return a == b;
    case IR_RELU_GRAD: return b > 0 ? a : 0;
    case IR_GELU_GRAD:
        return a * (0.5 * (1 + erf(b / sqrt(2))) + b * exp(-b * b / 2) / sqrt(2 * M_PI));
    case IR_GELU_TANH_GRAD: {
        double t = tanh(c * (b + k * b * b * b));
        return a * (0.5 * (1 + t) + 0.5 * b * (1 - t * t) * c * (1 + 3 * k * b * b));
    }
    case IR_TANH_GRAD: return a * (1 - b * b);
    case IR_SIGMOID_GRAD: return a * b * (1 - b);
    case IR_SILU_GRAD: {
        double s = sigmoid(b);
        return a * (s + b * s * (1 - s));
    }
    default: return NAN;
    }
}

/* Elementwise ops and BROADCAST: every output element from its broadcast operands. */
static void ref_elementwise(const IrNode *nd, Arr *out, Arr *in)
{
    int64_t idx[IR_MAX_RANK];
    for (int64_t f = 0; f < out->n; f++) {
        unravel(f, out, idx);
        double x[3] = { 0, 0, 0 };
        for (int k = 0; k < nd->nin; k++) x[k] = in[k].v[bcast_at(&in[k], idx, out->rank)];
        switch (ir_op_info[nd->op].cls) {
        case IR_CLASS_UNARY: out->v[f] = ref_unary(nd->op, x[0]); break;
        case IR_CLASS_BINARY: out->v[f] = ref_binary(nd->op, x[0], x[1]); break;
        case IR_CLASS_TERNARY: out->v[f] = x[0] != 0 ? x[1] : x[2]; break;
        default: out->v[f] = x[0]; break;   /* BROADCAST */
        }
    }
}

/* SUM, MEAN, MAX over one axis or all. */
static void ref_reduce(const IrNode *nd, Arr *out, const Arr *x)
{
    int64_t idx[IR_MAX_RANK];
    for (int64_t f = 0; f < out->n; f++) out->v[f] = nd->op == IR_MAX ? -INFINITY : 0;
    for (int64_t f = 0; f < x->n; f++) {
        unravel(f, x, idx);
        int64_t o = 0;
        for (int i = 0; i < x->rank; i++)
            if (nd->axis != IR_AXIS_ALL && i != nd->axis) o = o * x->d[i] + idx[i];
        double v = x->v[f];
        if (nd->op == IR_MAX) out->v[o] = v > out->v[o] ? v : out->v[o];
        else out->v[o] += v;
    }
    int64_t len = nd->axis == IR_AXIS_ALL ? x->n : x->d[nd->axis];
    if (nd->op == IR_MEAN)
        for (int64_t f = 0; f < out->n; f++) out->v[f] /= (double)len;
}

/* Every input element added into the output element it broadcasts from. */
static void ref_reduce_to(Arr *out, const Arr *x)
{
    int64_t idx[IR_MAX_RANK];
    for (int64_t f = 0; f < x->n; f++) {
        unravel(f, x, idx);
        out->v[bcast_at(out, idx, x->rank)] += x->v[f];
    }
}

static void ref_transpose(Arr *out, const Arr *x)
{
    int64_t idx[IR_MAX_RANK];
    for (int64_t f = 0; f < x->n; f++) {
        unravel(f, x, idx);
        int64_t t = idx[x->rank - 1];
        idx[x->rank - 1] = idx[x->rank - 2];
        idx[x->rank - 2] = t;
        int64_t o = 0;
        for (int i = 0; i < out->rank; i++) o = o * out->d[i] + idx[i];
        out->v[o] = x->v[f];
    }
}

/* Each input element to where its coordinates land: output axis a is input axis perm[a]. */
static void ref_permute(const IrNode *nd, Arr *out, const Arr *x)
{
    int64_t idx[IR_MAX_RANK];
    for (int64_t f = 0; f < x->n; f++) {
        unravel(f, x, idx);
        int64_t o = 0;
        for (int a = 0; a < out->rank; a++) o = o * out->d[a] + idx[ir_perm_axis(nd, a)];
        out->v[o] = x->v[f];
    }
}

/* Element [.., r, c] of X, or the mask's value where c > r. */
static void ref_causal_mask(const IrNode *nd, Arr *out, const Arr *x)
{
    int64_t idx[IR_MAX_RANK];
    for (int64_t f = 0; f < x->n; f++) {
        unravel(f, x, idx);
        out->v[f] = idx[x->rank - 1] > idx[x->rank - 2] ? nd->value : x->v[f];
    }
}

/* Each position's row of the table; EMBED_GRAD: each row of d added to its index's row. */
static void ref_embed(const IrNode *nd, Arr *out, const Arr *in)
{
    const Arr *ix = &in[1];
    int64_t width = out->d[out->rank - 1];
    if (nd->op == IR_EMBED_GRAD) memset(out->v, 0, (size_t)out->n * sizeof(double));
    for (int64_t q = 0; q < ix->n; q++) {
        int64_t v = (int64_t)ix->v[q];
        for (int64_t j = 0; j < width; j++)
            if (nd->op == IR_EMBED) out->v[q * width + j] = in[0].v[v * width + j];
            else out->v[v * width + j] += in[0].v[q * width + j];
    }
}

/* Element (i, j) of the matrix at batch index BIDX of A, transposed when T. */
static double mat_at(const Arr *a, const int64_t *bidx, int brank, bool t, int64_t i, int64_t j)
{
    int64_t flat = 0;
    int nb = a->rank - 2;
    for (int q = 0; q < nb; q++) {
        int64_t jq = bidx[brank - nb + q];
        flat = flat * a->d[q] + (a->d[q] == 1 ? 0 : jq);
    }
    int64_t r = a->d[a->rank - 2], c = a->d[a->rank - 1];
    return t ? a->v[(flat * r + j) * c + i] : a->v[(flat * r + i) * c + j];
}

static void ref_matmul(const IrNode *nd, Arr *out, Arr *a, Arr *b)
{
    bool ta = nd->flags & IR_MATMUL_TRANS_A, tb = nd->flags & IR_MATMUL_TRANS_B;
    if (nd->flags & IR_MATMUL_TF32) {
        for (int64_t f = 0; f < a->n; f++) a->v[f] = cpu_round_tf32((float)a->v[f]);
        for (int64_t f = 0; f < b->n; f++) b->v[f] = cpu_round_tf32((float)b->v[f]);
    }
    int64_t k = a->d[a->rank - (ta ? 2 : 1)], idx[IR_MAX_RANK];
    if (nd->flags & IR_MATMUL_BATCH_SUM) {   /* the sum of the batches' products */
        int64_t batches = a->n / (a->d[a->rank - 1] * k), m = out->d[0], n = out->d[1];
        for (int64_t f = 0; f < out->n; f++) {
            double s = 0;
            for (int64_t q = 0; q < batches * k; q++)
                s += a->v[q * m + f / n] * b->v[q * n + f % n];
            out->v[f] = s;
        }
        return;
    }
    for (int64_t f = 0; f < out->n; f++) {
        unravel(f, out, idx);
        int64_t i = idx[out->rank - 2], j = idx[out->rank - 1];
        double s = 0;
        for (int64_t q = 0; q < k; q++)
            s += mat_at(a, idx, out->rank - 2, ta, i, q) * mat_at(b, idx, out->rank - 2, tb, q, j);
        out->v[f] = s;
    }
}

/* UNFOLD reads each entry's pixel; FOLD scatters each entry onto its pixel (ir.h's
 * definition, entry by entry: the executor walks the windows its own way). */
static void ref_window(const IrNode *nd, Arr *out, const Arr *x)
{
    bool unfold = nd->op == IR_UNFOLD;
    const Arr *img = unfold ? x : out, *cols = unfold ? out : x;
    for (int64_t f = 0; f < cols->n; f++) {
        int64_t px = ir_window_source(&nd->win, nd->flags, img->d, f);
        if (unfold) out->v[f] = px < 0 ? nd->value : x->v[px];
        else if (px >= 0) out->v[px] += x->v[f];
    }
}

/* Softmax family: for each element, the row along AXIS through it. */
static void ref_softmax(const IrNode *nd, Arr *out, const Arr *x, const Arr *y)
{
    int64_t idx[IR_MAX_RANK], stride = 1;
    for (int i = nd->axis + 1; i < x->rank; i++) stride *= x->d[i];
    int64_t len = x->d[nd->axis];
    for (int64_t f = 0; f < x->n; f++) {
        unravel(f, x, idx);
        int64_t base = f - idx[nd->axis] * stride;
        double s = 0, m = -INFINITY;
        for (int64_t q = 0; q < len; q++) m = fmax(m, x->v[base + q * stride]);
        for (int64_t q = 0; q < len; q++) {
            double xv = x->v[base + q * stride];
            if (nd->op == IR_SOFTMAX || nd->op == IR_LOG_SOFTMAX) s += exp(xv - m);
            else if (nd->op == IR_SOFTMAX_GRAD) s += xv * y->v[base + q * stride];
            else s += xv;
        }
        double xv = x->v[f];
        if (nd->op == IR_SOFTMAX) out->v[f] = exp(xv - m) / s;
        else if (nd->op == IR_LOG_SOFTMAX) out->v[f] = xv - m - log(s);
        else if (nd->op == IR_SOFTMAX_GRAD) out->v[f] = y->v[f] * (xv - s);
        else out->v[f] = xv - exp(y->v[f]) * s;
    }
}

static void ref_loss(const IrNode *nd, Arr *out, Arr *in)
{
    const Arr *x = nd->op == IR_CE_GRAD ? &in[1] : &in[0];
    const Arr *lab = nd->op == IR_CE_GRAD ? &in[2] : &in[1];
    int64_t c = x->d[x->rank - 1], n = x->n / c;   /* a row per label */
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        const double *row = x->v + i * c;
        int64_t label = (int64_t)lab->v[i], best = 0;
        if (label < 0 || label >= c) {     /* the executor's copy of the labels indexes here */
            CHECK(!"label within the classes");
            continue;
        }
        double s = 0;
        for (int64_t q = 0; q < c; q++) {
            s += exp(row[q]);
            if (row[q] > row[best]) best = q;
        }
        if (nd->op == IR_CROSS_ENTROPY) total += log(s) - row[label];
        if (nd->op == IR_COUNT_CORRECT) total += best == label;
        if (nd->op == IR_CE_GRAD)
            for (int64_t q = 0; q < c; q++)
                out->v[i * c + q] = in[0].v[0] * (exp(row[q]) / s - (q == label)) / (double)n;
    }
    if (nd->op == IR_CROSS_ENTROPY) out->v[0] = total / (double)n;
    if (nd->op == IR_COUNT_CORRECT) out->v[0] = total;
}

static double ref_round(DType t, double v)
{
    if (t == DT_F16) return cpu_round_f16((float)v);
    if (t == DT_BF16) return cpu_round_bf16((float)v);
    return v;
}

/* The reference value of node ID from IN, the executor's values of its inputs. */
static void ref_node(const IrProgram *p, const IrNode *nd, const CpuFeed *feed, Arr *out,
                     Arr *in)
{
    switch (nd->op) {
    case IR_CONST: out->v[0] = nd->value; break;
    case IR_RUNTIME: out->v[0] = feed->runtime[nd->index]; break;
    case IR_CAST:
    case IR_RESHAPE: memcpy(out->v, in[0].v, (size_t)out->n * sizeof(double)); break;
    case IR_REDUCE_TO: ref_reduce_to(out, &in[0]); break;
    case IR_TRANSPOSE: ref_transpose(out, &in[0]); break;
    case IR_PERMUTE: ref_permute(nd, out, &in[0]); break;
    case IR_EMBED:
    case IR_EMBED_GRAD: ref_embed(nd, out, in); break;
    case IR_ARANGE:
        for (int64_t f = 0; f < out->n; f++) out->v[f] = (double)f;
        break;
    case IR_CAUSAL_MASK: ref_causal_mask(nd, out, &in[0]); break;
    case IR_MATMUL: ref_matmul(nd, out, &in[0], &in[1]); break;
    case IR_UNFOLD:
    case IR_FOLD: ref_window(nd, out, &in[0]); break;
    case IR_SOFTMAX:
    case IR_LOG_SOFTMAX:
    case IR_SOFTMAX_GRAD:
    case IR_LOG_SOFTMAX_GRAD: ref_softmax(nd, out, &in[0], &in[1]); break;
    case IR_CROSS_ENTROPY:
    case IR_CE_GRAD:
    case IR_COUNT_CORRECT: ref_loss(nd, out, in); break;
    case IR_DROPOUT:
        for (int64_t f = 0; f < out->n; f++)
            out->v[f] = rng_dropout_keep(p->cfg.seed, nd->index, (uint64_t)in[1].v[0],
                                         (uint64_t)f, nd->value)
                            ? in[0].v[f] / (1 - nd->value) : 0;
        break;
    case IR_ASSIGN: out->v[0] = 0; break;
    default:
        if (ir_op_info[nd->op].cls == IR_CLASS_REDUCE) ref_reduce(nd, out, &in[0]);
        else ref_elementwise(nd, out, in);
    }
    for (int64_t f = 0; f < out->n; f++) out->v[f] = ref_round(nd->dtype, out->v[f]);
}

/* ---- comparing a run with the reference ---- */

static double tol_for(CpuReal real, DType t)
{
    if (t == DT_F16) return 2e-3;     /* one half-ulp step either way of a rounding edge */
    if (t == DT_BF16) return 1.6e-2;
    return real == CPU_F64 ? 1e-12 : 2e-5;
}

/* Within TOL (absolute and relative); infinities must match exactly, NaN NaN. */
static bool close_enough(double got, double want, double tol)
{
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= tol + tol * fabs(want);
}

static bool compared[IR_NUM_OPS];   /* ops some node of a compared graph had */

/* Every computed node of G against the reference; one CHECK per node. */
static void compare_nodes(CpuExec *e, const IrProgram *p, const IrGraph *g, const CpuFeed *feed,
                          CpuReal real)
{
    for (int id = 0; id < g->nnodes; id++) {
        const IrNode *nd = &g->nodes[id];
        if (nd->op == IR_INPUT || nd->op == IR_READ) continue;
        compared[nd->op] = true;
        Arr in[IR_MAX_IN], got = node_value(e, g, id, feed->symvals, real);
        Arr want = arr_shape(&nd->shape, feed->symvals);
        for (int k = 0; k < nd->nin; k++) in[k] = node_value(e, g, nd->in[k], feed->symvals, real);
        ref_node(p, nd, feed, &want, in);
        double tol = tol_for(real, nd->dtype);
        int64_t bad = -1;
        for (int64_t f = 0; f < want.n && bad < 0; f++)
            if (!close_enough(got.v[f], want.v[f], tol)) bad = f;
        if (bad >= 0)
            fprintf(stderr, "node %%%d %s (%s, batch %" PRId64 "): element %" PRId64
                    " is %.17g, want %.17g\n", id, ir_op_info[nd->op].name,
                    real == CPU_F64 ? "f64" : "f32", feed->symvals[0], bad, got.v[bad],
                    want.v[bad]);
        CHECK(bad < 0);
        int64_t off = -1;   /* a value of a half type off its grid: a rounding skipped */
        for (int64_t f = 0; f < got.n && off < 0; f++)
            if (got.v[f] == got.v[f] && ref_round(nd->dtype, got.v[f]) != got.v[f]) off = f;
        if (off >= 0)
            fprintf(stderr, "node %%%d %s: element %" PRId64 " is %.17g, not a %s value\n", id,
                    ir_op_info[nd->op].name, off, got.v[off], ir_dtype_name(nd->dtype));
        CHECK(off < 0);
        for (int k = 0; k < nd->nin; k++) free(in[k].v);
        free(got.v);
        free(want.v);
    }
}

/* Runs P's forward graph on data from SEED with the batch bound to BATCH, compares. */
static void run_and_compare(CpuExec *e, const IrProgram *p, CpuReal real, int64_t batch,
                            uint64_t seed)
{
    Feed fd;
    feed_make(&fd, p, batch, seed);
    int rc = cpu_exec_run(e, &p->forward, &fd.f);
    CHECK_EQ_INT(rc, 0);
    if (rc == 0) compare_nodes(e, p, &p->forward, &fd.f, real);
    feed_free(&fd);
}

/* Both element types, batch 3. */
static void check_program(const IrProgram *p)
{
    for (int r = 0; r < 2; r++) {
        CpuReal real = r ? CPU_F64 : CPU_F32;
        CpuExec *e = cpu_exec_new(p, real);
        cpu_exec_init_tensors(e, 5);
        run_and_compare(e, p, real, 3, 77);
        cpu_exec_free(e);
    }
}

/* ---- the op tests ---- */

static void test_unary(void)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int x = input(p, "x", DT_F32, shp(2, N, 5));
    int pos = input(p, "pos", DT_F32, shp(2, N, 5));
    for (int op = 0; op < IR_NUM_OPS; op++) {   /* every unary op of the table but CAST's own */
        if (ir_op_info[op].cls != IR_CLASS_UNARY || op == IR_CAST) continue;
        bool positive = op == IR_LOG || op == IR_SQRT || op == IR_RSQRT;   /* their domains */
        ir_unary(g, (IrOp)op, positive ? pos : x, NOLOC);
    }
    int inf = ir_binary(g, IR_DIV, x, ir_const(g, 0, NOLOC), NOLOC);   /* +-inf */
    ir_unary(g, IR_NONFINITE, inf, NOLOC);
    ir_unary(g, IR_NONFINITE, ir_binary(g, IR_MUL, inf, ir_const(g, 0, NOLOC), NOLOC), NOLOC);
    ir_runtime(g, IR_RT_TOTAL_STEPS, NOLOC);
    check_program(p);
    ir_program_free(p);
}

/* Every binary op over shapes that broadcast in each of the executor's ways. */
static void test_binary(void)
{
    IrOp ops[IR_NUM_OPS];   /* every binary op of the table */
    int nops = 0;
    for (int op = 0; op < IR_NUM_OPS; op++)
        if (ir_op_info[op].cls == IR_CLASS_BINARY) ops[nops++] = (IrOp)op;
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int pairs[][2] = {
        { input(p, "a", DT_F32, shp(2, N, 4)), input(p, "b", DT_F32, shp(2, N, 4)) },
        { input(p, "c", DT_F32, shp(2, N, 4)), input(p, "bias", DT_F32, shp(1, 4)) },
        { input(p, "row", DT_F32, shp(1, 4)), input(p, "d", DT_F32, shp(2, N, 4)) },
        { input(p, "e", DT_F32, shp(2, N, 4)), input(p, "s", DT_F32, shp(0)) },
        { input(p, "col", DT_F32, shp(2, N, 1)), input(p, "r2", DT_F32, shp(2, 1, 5)) },
        { input(p, "m", DT_F32, shp(3, 2, 1, 3)), input(p, "k", DT_F32, shp(2, N, 1)) },
        { input(p, "big", DT_F32, shp(3, N, 2, 3)), input(p, "mid", DT_F32, shp(2, 2, 1)) },
    };
    int npairs = sizeof pairs / sizeof *pairs;
    for (int i = 0; i < npairs; i++)
        for (int k = 0; k < nops; k++)
            ir_binary(g, ops[k], pairs[i][0], pairs[i][1], NOLOC);
    /* EQUAL with equal values, POW with a positive base */
    ir_binary(g, IR_EQUAL, pairs[0][0], pairs[0][0], NOLOC);
    int pos = input(p, "pos", DT_F32, shp(2, N, 4));
    ir_binary(g, IR_POW, pos, pairs[0][1], NOLOC);
    ir_binary(g, IR_POW, pos, ir_const(g, 2, NOLOC), NOLOC);
    check_program(p);
    ir_program_free(p);
}

static void test_select_broadcast(void)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int cond = input(p, "bool", DT_F32, shp(2, N, 1));
    int a = input(p, "a", DT_F32, shp(2, N, 4)), b = input(p, "b", DT_F32, shp(1, 4));
    ir_select(g, cond, a, b, NOLOC);
    ir_select(g, b, cond, ir_const(g, 0.5, NOLOC), NOLOC);
    ir_broadcast(g, b, shp(3, 2, N, 4), NOLOC);
    ir_broadcast(g, cond, shp(3, 2, N, 4), NOLOC);
    ir_broadcast(g, ir_const(g, 3, NOLOC), shp(2, N, 2), NOLOC);
    check_program(p);
    ir_program_free(p);
}

static void test_reductions(void)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int x = input(p, "x", DT_F32, shp(3, N, 4, 5));
    IrOp ops[] = { IR_SUM, IR_MEAN, IR_MAX };
    int axes[] = { 0, 1, 2, IR_AXIS_ALL };
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++) ir_reduce(g, ops[i], x, axes[k], NOLOC);
    Shape targets[] = { shp(2, 4, 5), shp(3, N, 1, 5), shp(3, 1, 4, 1), shp(1, 5),
                        shp(0), shp(3, N, 4, 1), shp(2, 4, 1), shp(3, 1, 1, 5) };
    for (size_t i = 0; i < sizeof targets / sizeof *targets; i++)
        ir_reduce_to(g, x, targets[i], NOLOC);
    int y = input(p, "y", DT_F32, shp(4, 2, 1, N, 3));
    ir_reduce_to(g, y, shp(2, 1, 3), NOLOC);
    ir_reduce_to(g, y, shp(4, 2, 1, 1, 1), NOLOC);
    ir_reduce_to(g, y, shp(4, 1, 1, N, 1), NOLOC);
    check_program(p);
    ir_program_free(p);
}

/* Shapes that cross the executor's task boundaries (exec.c: COL_CHUNK columns of a
 * reduction over a non-last axis, CHUNK elements of elementwise work, PAR_MIN for
 * threads), each more than once and with a remainder, against the plain loops above. */
static void test_boundary_shapes(void)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int x = input(p, "x", DT_F32, shp(3, 40, 3, 2 * 256 + 5));   /* 62k elements: threads too */
    for (int axis = 0; axis < 3; axis++) ir_reduce(g, IR_SUM, x, axis, NOLOC);
    ir_reduce(g, IR_MAX, x, 1, NOLOC);
    ir_reduce(g, IR_MEAN, x, 0, NOLOC);
    ir_reduce_to(g, x, shp(1, 2 * 256 + 5), NOLOC);
    ir_reduce_to(g, x, shp(2, 3, 2 * 256 + 5), NOLOC);
    ir_softmax(g, IR_SOFTMAX, x, 1, NOLOC);
    int w = input(p, "w", DT_F32, shp(2, 5, 2 * 4096 + 7)), b = input(p, "b", DT_F32, shp(1, 2 * 4096 + 7));
    ir_binary(g, IR_ADD, w, b, NOLOC);
    ir_reduce(g, IR_SUM, w, 1, NOLOC);
    ir_reduce(g, IR_SUM, w, 0, NOLOC);
    check_program(p);
    ir_program_free(p);
}

static void test_softmax(void)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int x = input(p, "x", DT_F32, shp(3, N, 4, 5));
    int d = input(p, "d", DT_F32, shp(3, N, 4, 5));
    for (int axis = 0; axis < 3; axis++) {
        int s = ir_softmax(g, IR_SOFTMAX, x, axis, NOLOC);
        int l = ir_softmax(g, IR_LOG_SOFTMAX, x, axis, NOLOC);
        ir_softmax_grad(g, IR_SOFTMAX_GRAD, d, s, axis, NOLOC);
        ir_softmax_grad(g, IR_LOG_SOFTMAX_GRAD, d, l, axis, NOLOC);
    }
    check_program(p);
    ir_program_free(p);
}

static void test_matmul(void)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int a = input(p, "a", DT_F32, shp(3, N, 4, 6));
    int w = input(p, "w", DT_F32, shp(2, 6, 5));
    int wt = input(p, "wt", DT_F32, shp(2, 5, 6));
    int at = input(p, "at", DT_F32, shp(3, N, 6, 4));
    int bb = input(p, "bb", DT_F32, shp(3, N, 6, 5));
    int a2 = input(p, "a2", DT_F32, shp(2, 4, 6));
    int b4 = input(p, "b4", DT_F32, shp(4, 2, 1, 6, 5));
    int x = input(p, "x", DT_F32, shp(2, N, 6));
    ir_matmul(g, a, w, 0, NOLOC);                      /* folded into one GEMM */
    ir_matmul(g, a, wt, IR_MATMUL_TRANS_B, NOLOC);
    ir_matmul(g, at, w, IR_MATMUL_TRANS_A, NOLOC);     /* batched, a transposed */
    ir_matmul(g, at, wt, IR_MATMUL_TRANS_A | IR_MATMUL_TRANS_B, NOLOC);
    ir_matmul(g, a, bb, 0, NOLOC);                     /* both batched */
    ir_matmul(g, a2, bb, 0, NOLOC);                    /* a broadcast over the batch */
    ir_matmul(g, a, b4, 0, NOLOC);                     /* [N,4,6] @ [2,1,6,5] */
    ir_matmul(g, x, wt, IR_MATMUL_TRANS_B, NOLOC);     /* a linear layer */
    ir_matmul(g, x, x, IR_MATMUL_TRANS_A, NOLOC);      /* its weight gradient shape */
    ir_matmul(g, at, bb, IR_MATMUL_TRANS_A | IR_MATMUL_BATCH_SUM, NOLOC);  /* over N too */
    ir_matmul(g, a, w, IR_MATMUL_TF32, NOLOC);
    check_program(p);
    ir_program_free(p);
}

/* Convolution and pooling windows in both layouts: strides, padding, dilation, groups,
 * rectangular kernels, and each window's FOLD. */
static void test_windows(void)
{
    static const IrWindow wins[] = {
        {{3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
        {{2, 3}, {2, 1}, {0, 1}, {1, 2}, 1},
        {{3, 2}, {2, 3}, {1, 1}, {2, 1}, 2},
        {{1, 1}, {1, 1}, {0, 0}, {1, 1}, 4},
        {{5, 6}, {1, 1}, {0, 0}, {1, 1}, 1},
    };
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int img = input(p, "img", DT_F32, shp(4, N, 4, 5, 6));
    for (size_t i = 0; i < sizeof wins / sizeof *wins; i++)
        for (int rows = 0; rows < 2; rows++) {
            if (!rows && wins[i].groups != 1) continue;
            int flags = rows ? IR_WINDOW_ROWS : 0;
            int u = ir_unfold(g, img, wins[i], flags, rows ? 0 : -INFINITY, NOLOC);
            ir_fold(g, ir_binary(g, IR_MUL, u, u, NOLOC), g->nodes[img].shape, wins[i], flags, NOLOC);
        }
    ir_unfold(g, img, wins[1], 0, 0.5, NOLOC);
    check_program(p);
    ir_program_free(p);
}

static void test_shape_ops(void)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int x = input(p, "x", DT_F32, shp(3, N, 4, 5));
    int r = ir_reshape(g, x, shp(2, N, 20), NOLOC);
    ir_unary(g, IR_NEG, r, NOLOC);
    ir_transpose(g, x, NOLOC);
    ir_transpose(g, r, NOLOC);
    int big = input(p, "big", DT_F32, shp(2, 70, 45));   /* more than one 32x32 tile */
    ir_transpose(g, big, NOLOC);
    ir_permute(g, x, (int[]){2, 0, 1}, NOLOC);     /* [5, N, 4]: the batch in the middle */
    ir_permute(g, r, (int[]){1, 0}, NOLOC);
    check_program(p);
    ir_program_free(p);
}

static void test_losses(void)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int logits = input(p, "logits", DT_F32, shp(2, N, 7));
    int labels = input(p, "lab", DT_I32, shp(1, N));
    int d = input(p, "d", DT_F32, shp(0));
    ir_cross_entropy(g, logits, labels, NOLOC);
    ir_ce_grad(g, d, logits, labels, NOLOC);
    ir_count_correct(g, logits, labels, NOLOC);
    /* floored logits tie often: the first maximum must win (200 rows, so that some tie
     * at their label) */
    ir_count_correct(g, ir_unary(g, IR_FLOOR, logits, NOLOC), labels, NOLOC);
    int many = input(p, "many", DT_F32, shp(2, 200, 7)), many_lab = input(p, "many_lab", DT_I32, shp(1, 200));
    ir_count_correct(g, ir_unary(g, IR_FLOOR, many, NOLOC), many_lab, NOLOC);
    /* a table of 7 rows at indices [N, 3], and its gradient back into 7 rows (indices
     * repeat: rows add up) */
    int table = input(p, "table", DT_F32, shp(2, 7, 5)), ix = input(p, "ix", DT_I32, shp(2, N, 3));
    ir_embed(g, table, ix, NOLOC);
    ir_embed_grad(g, input(p, "drows", DT_F32, shp(3, N, 3, 5)), ix, 7, NOLOC);
    /* positions 0..6 as indices; attention's mask over [N, 2, 4, 4] scores, -inf and 0 */
    ir_embed(g, table, ir_arange(g, 7, NOLOC), NOLOC);
    int scores = input(p, "scores", DT_F32, shp(4, N, 2, 4, 4));
    ir_causal_mask(g, scores, -INFINITY, NOLOC);
    ir_causal_mask(g, scores, 0.0, NOLOC);
    /* sequences: logits [N, 3, 7] with a label per position, the mean over all of them */
    int seq = input(p, "seq", DT_F32, shp(3, N, 3, 7)), seq_lab = input(p, "seq_lab", DT_I32, shp(2, N, 3));
    ir_cross_entropy(g, seq, seq_lab, NOLOC);
    ir_ce_grad(g, d, seq, seq_lab, NOLOC);
    ir_count_correct(g, seq, seq_lab, NOLOC);
    /* more classes than the logsumexp takes at once (64), and not a multiple of them */
    int wide = input(p, "wide", DT_F32, shp(2, N, 130)), wide_lab = input(p, "wide_lab", DT_I32, shp(1, N));
    ir_cross_entropy(g, wide, wide_lab, NOLOC);
    ir_ce_grad(g, d, wide, wide_lab, NOLOC);
    check_program(p);
    ir_program_free(p);
}

/* Storage in f16 and bf16: casts, ops on half values, and half views of them. */
static void test_half_storage(void)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int x = input(p, "x", DT_F32, shp(2, N, 6));
    int y = input(p, "y", DT_F32, shp(1, 6));
    for (int t = 0; t < 2; t++) {
        DType half = t ? DT_BF16 : DT_F16;
        int hx = ir_cast(g, x, half, NOLOC), hy = ir_cast(g, y, half, NOLOC);
        int sum = ir_binary(g, IR_ADD, hx, hy, NOLOC);           /* stays half */
        ir_unary(g, IR_EXP, sum, NOLOC);
        ir_reshape(g, sum, shp(3, N, 2, 3), NOLOC);               /* an alias */
        ir_transpose(g, sum, NOLOC);
        ir_reduce(g, IR_SUM, sum, 1, NOLOC);
        ir_reduce_to(g, sum, shp(1, 6), NOLOC);                   /* sums: rounded */
        ir_cast(g, sum, DT_F32, NOLOC);
        ir_binary(g, IR_MUL, sum, x, NOLOC);                      /* promoted to f32 */
    }
    check_program(p);
    ir_program_free(p);
}

/* ---- rounding ---- */

static uint32_t bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

#define CHECK_ROUND(fn, x, want) CHECK_EQ_INT(bits(fn(x)), bits(want))

static void test_rounding(void)
{
    /* f16: exact values, the largest finite, overflow, subnormals, ties to even */
    CHECK_ROUND(cpu_round_f16, 1.0f, 1.0f);
    CHECK_ROUND(cpu_round_f16, 65504.0f, 65504.0f);
    CHECK_ROUND(cpu_round_f16, 65519.0f, 65504.0f);
    CHECK_ROUND(cpu_round_f16, 65520.0f, INFINITY);
    CHECK_ROUND(cpu_round_f16, -65520.0f, -INFINITY);
    CHECK_ROUND(cpu_round_f16, 1e9f, INFINITY);
    CHECK_ROUND(cpu_round_f16, 0x1p-24f, 0x1p-24f);            /* smallest subnormal */
    CHECK_ROUND(cpu_round_f16, 0x1p-25f, 0.0f);                /* tie: to even, 0 */
    CHECK_ROUND(cpu_round_f16, 0x1.8p-25f, 0x1p-24f);
    CHECK_ROUND(cpu_round_f16, 0x1.8p-24f, 0x1p-23f);          /* 1.5 units: to 2 */
    CHECK_ROUND(cpu_round_f16, 0x1.4p-23f, 0x1p-23f);          /* 2.5 units: to 2 */
    CHECK_ROUND(cpu_round_f16, -0x1.8p-24f, -0x1p-23f);
    CHECK_ROUND(cpu_round_f16, 0x1.ff8p-15f, 0x1.ff8p-15f);    /* largest subnormal */
    CHECK_ROUND(cpu_round_f16, 0x1.ffcp-15f, 0x1p-14f);        /* rounds up to normal */
    CHECK_ROUND(cpu_round_f16, 1.0f / 3.0f, 0x1.554p-2f);      /* 0x3555 */
    CHECK_ROUND(cpu_round_f16, 1.0f + 0x1p-11f, 1.0f);         /* tie: to even */
    CHECK_ROUND(cpu_round_f16, 1.0f + 0x1.8p-10f, 1.0f + 0x1p-9f);
    CHECK_ROUND(cpu_round_f16, 1.0f + 0x1.01p-11f, 1.0f + 0x1p-10f);    /* just above the tie */
    CHECK_ROUND(cpu_round_f16, -0.0f, -0.0f);
    CHECK_ROUND(cpu_round_f16, INFINITY, INFINITY);
    CHECK(isnan(cpu_round_f16(NAN)));
    /* bf16 */
    CHECK_ROUND(cpu_round_bf16, 1.0f, 1.0f);
    CHECK_ROUND(cpu_round_bf16, 1.0f / 3.0f, 0x1.56p-2f);      /* 0x3EAB */
    CHECK_ROUND(cpu_round_bf16, 1.0f + 0x1p-8f, 1.0f);
    CHECK_ROUND(cpu_round_bf16, 1.0f + 0x1.8p-7f, 1.0f + 0x1p-6f);
    CHECK_ROUND(cpu_round_bf16, 65504.0f, 65536.0f);
    CHECK_ROUND(cpu_round_bf16, 0x1.fcp127f, 0x1.fcp127f);
    CHECK_ROUND(cpu_round_bf16, 0x1.fep127f, 0x1.fep127f);     /* largest finite: (2 - 2^-7) 2^127 */
    CHECK_ROUND(cpu_round_bf16, 0x1.fe8p127f, 0x1.fep127f);    /* below the halfway point */
    CHECK_ROUND(cpu_round_bf16, 0x1.ffp127f, INFINITY);        /* halfway to 2^128: ties to even */
    CHECK_ROUND(cpu_round_bf16, 0x1p-133f, 0x1p-133f);         /* smallest subnormal */
    CHECK_ROUND(cpu_round_bf16, 0x1p-134f, 0.0f);
    CHECK_ROUND(cpu_round_bf16, 0x1.8p-133f, 0x1p-132f);
    CHECK(isnan(cpu_round_bf16(NAN)));
    /* tf32: 10 mantissa bits, f32's range */
    CHECK_ROUND(cpu_round_tf32, 1.0f / 3.0f, 0x1.554p-2f);
    CHECK_ROUND(cpu_round_tf32, 1.0f + 0x1p-11f, 1.0f);
    CHECK_ROUND(cpu_round_tf32, 1.0f + 0x1.8p-10f, 1.0f + 0x1p-9f);
    CHECK_ROUND(cpu_round_tf32, 65520.0f, 65536.0f);
    CHECK_ROUND(cpu_round_tf32, 0x1.ffcp127f, 0x1.ffcp127f);
    CHECK_ROUND(cpu_round_tf32, 0x1.fffffep127f, INFINITY);
}

/* ---- the f32 executor's erf and exp (exec.c's polynomials) ---- */

/* |GOT - WANT| in units in the last place of WANT as a float (subnormals: 2^-149). */
static double ulps(float got, double want)
{
    int e;
    frexp(want, &e);
    return fabs((double)got - want) / ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
}

/* The worst error of F against REF (libm in double) over X from LO's bits on, every
 * STEP-th float, COUNT of them. */
static double worst_ulps(float (*f)(float), double (*ref)(double), float lo, uint32_t step,
                         uint32_t count, float *where)
{
    double worst = 0;
    uint32_t u;
    memcpy(&u, &lo, sizeof u);
    for (uint32_t i = 0; i < count; i++, u += step) {
        float x;
        memcpy(&x, &u, sizeof x);
        double want = ref(x);
        if (isnan(x) || fabs(want) > FLT_MAX) continue;
        double d = ulps(f(x), want);
        if (d > worst) worst = d, *where = x;
    }
    return worst;
}

static void test_erf_exp(void)
{
    /* every 997th float of either sign, then every float near the seams: erf's two
     * forms meet at 1 and it is clamped at 4; exp's results turn subnormal below -87.3 */
    static const struct { float lo; uint32_t step, count; } erf_spans[] = {
        {0.0f, 997, 4300000}, {0.99f, 1, 200000}, {3.9f, 1, 100000}, {-1.01f, 1, 200000},
    }, exp_spans[] = {
        {0.0f, 997, 1130000}, {-0.0f, 997, 1130000}, {-88.0f, 1, 300000},
        {88.5f, 1, 100000}, {-103.5f, 1, 100000},
    };
    float where = 0;
    for (size_t i = 0; i < sizeof erf_spans / sizeof erf_spans[0]; i++) {
        double w = worst_ulps(cpu_erff, erf, erf_spans[i].lo, erf_spans[i].step, erf_spans[i].count, &where);
        if (w > 1.0) fprintf(stderr, "erf: %.3f ulp at %a\n", w, where);
        CHECK(w <= 1.0);
    }
    for (size_t i = 0; i < sizeof exp_spans / sizeof exp_spans[0]; i++) {
        double w = worst_ulps(cpu_expf, exp, exp_spans[i].lo, exp_spans[i].step, exp_spans[i].count, &where);
        if (w > 1.1) fprintf(stderr, "exp: %.3f ulp at %a\n", w, where);
        CHECK(w <= 1.1);
    }
    CHECK(isnan(cpu_erff(NAN)) && isnan(cpu_expf(NAN)));
    CHECK(cpu_erff(INFINITY) == 1.0f && cpu_erff(-INFINITY) == -1.0f);
    CHECK(signbit(cpu_erff(-0.0f)) && cpu_erff(-0.0f) == 0.0f);
    CHECK(cpu_expf(-INFINITY) == 0.0f && cpu_expf(-105.0f) == 0.0f);
    CHECK(cpu_expf(INFINITY) == INFINITY && cpu_expf(88.73f) == INFINITY);
    CHECK(cpu_expf(88.72f) < INFINITY && cpu_expf(0.0f) == 1.0f);
}

/* The f64 executor rounds doubles to f16 directly: 1 + 2^-11 + 2^-40 is above the
 * tie and must round up, where rounding through float would land on the tie. */
static void test_no_double_rounding(void)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int x = input(p, "x", DT_F32, shp(1, N));
    int sum = ir_binary(g, IR_ADD, x, ir_const(g, 0x1p-40, NOLOC), NOLOC);
    int h = ir_cast(g, sum, DT_F16, NOLOC);
    float one = 1.0f + 0x1p-11f;
    CpuFeed feed = { .symvals = { 1 }, .inputs = { &one } };
    for (int r = 0; r < 2; r++) {
        CpuExec *e = cpu_exec_new(p, r ? CPU_F64 : CPU_F32);
        CHECK_EQ_INT(cpu_exec_run(e, g, &feed), 0);
        /* in f32 the small term is lost, so the tie rounds to even */
        CHECK_CLOSE(cpu_exec_scalar(e, h), r ? 1.0 + 0x1p-10 : 1.0, 0, 0);
        cpu_exec_free(e);
    }
    ir_program_free(p);
}

/* ---- derivatives against central differences (f64) ---- */

/* Checks node GRAD (the gradient of scalar LOSS with respect to input 0, [N, C]) by
 * moving each element of input 0 by +-H. Inputs are multiples of 2^-8 and H = 2^-12,
 * so the moved values are exact in the f32 feed. */
static void check_fd(IrProgram *p, int loss, int grad, const char *what)
{
    const double h = 0x1p-12;
    CpuExec *e = cpu_exec_new(p, CPU_F64);
    Feed fd;
    feed_make(&fd, p, 2, 99);
    float *x = fd.owned[0];
    int64_t n = ir_numel(&p->inputs[0].shape, fd.f.symvals);
    for (int64_t i = 0; i < n; i++) x[i] = roundf(x[i] * 256) / 256 + 0x1p-9f;  /* off 0 */
    CHECK_EQ_INT(cpu_exec_run(e, &p->forward, &fd.f), 0);
    int64_t gn;
    const double *g0 = cpu_exec_value(e, grad, &gn);
    CHECK(g0 != NULL && gn == n);   /* the gradient has input 0's elements, read below */
    if (!g0 || gn != n) {
        feed_free(&fd);
        cpu_exec_free(e);
        return;
    }
    double *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
    memcpy(got, g0, (size_t)n * sizeof *got);
    for (int64_t i = 0; i < n; i++) {
        float keep = x[i];
        x[i] = keep + (float)h;
        cpu_exec_run(e, &p->forward, &fd.f);
        double up = cpu_exec_scalar(e, loss);
        x[i] = keep - (float)h;
        cpu_exec_run(e, &p->forward, &fd.f);
        double down = cpu_exec_scalar(e, loss);
        x[i] = keep;
        want[i] = (up - down) / (2 * h);
    }
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= 1e-6 + 1e-6 * fabs(want[i]))) {
            if (!bad++)
                fprintf(stderr, "%s: d/dx[%" PRId64 "] is %.12g, differences say %.12g\n", what,
                        i, got[i], want[i]);
        }
    CHECK(bad == 0);
    free(want);
    free(got);
    feed_free(&fd);
    cpu_exec_free(e);
}

/* loss = sum(d * f(x)) for elementwise f, its gradient GRAD_OP(d, x or f(x)). */
static void fd_elementwise(IrOp f, IrOp grad_op, bool takes_output)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int x = input(p, "x", DT_F32, shp(2, N, 3));
    int d = input(p, "d", DT_F32, shp(2, N, 3));
    int y = ir_unary(g, f, x, NOLOC);
    int loss = ir_reduce(g, IR_SUM, ir_binary(g, IR_MUL, d, y, NOLOC), IR_AXIS_ALL, NOLOC);
    int grad = ir_binary(g, grad_op, d, takes_output ? y : x, NOLOC);
    check_fd(p, loss, grad, ir_op_info[grad_op].name);
    ir_program_free(p);
}

static void fd_softmax(IrOp f, IrOp grad_op, int axis)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int x = input(p, "x", DT_F32, shp(2, N, 4));
    int d = input(p, "d", DT_F32, shp(2, N, 4));
    int y = ir_softmax(g, f, x, axis, NOLOC);
    int loss = ir_reduce(g, IR_SUM, ir_binary(g, IR_MUL, d, y, NOLOC), IR_AXIS_ALL, NOLOC);
    int grad = ir_softmax_grad(g, grad_op, d, y, axis, NOLOC);
    check_fd(p, loss, grad, ir_op_info[grad_op].name);
    ir_program_free(p);
}

static void fd_cross_entropy(void)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int x = input(p, "x", DT_F32, shp(2, N, 7));
    int labels = input(p, "lab", DT_I32, shp(1, N));
    int d = ir_const(g, 0.75, NOLOC);
    int loss = ir_binary(g, IR_MUL, d, ir_cross_entropy(g, x, labels, NOLOC), NOLOC);
    check_fd(p, loss, ir_ce_grad(g, d, x, labels, NOLOC), "ce_grad");
    ir_program_free(p);
}

static void test_derivatives(void)
{
    fd_elementwise(IR_RELU, IR_RELU_GRAD, false);
    fd_elementwise(IR_GELU, IR_GELU_GRAD, false);
    fd_elementwise(IR_GELU_TANH, IR_GELU_TANH_GRAD, false);
    fd_elementwise(IR_TANH, IR_TANH_GRAD, true);
    fd_elementwise(IR_SIGMOID, IR_SIGMOID_GRAD, true);
    fd_elementwise(IR_SILU, IR_SILU_GRAD, false);
    for (int axis = 0; axis < 2; axis++) {
        fd_softmax(IR_SOFTMAX, IR_SOFTMAX_GRAD, axis);
        fd_softmax(IR_LOG_SOFTMAX, IR_LOG_SOFTMAX_GRAD, axis);
    }
    fd_cross_entropy();
}

/* ---- dropout ---- */

static int64_t count_nonzero(CpuExec *e, int id)
{
    int64_t n, k = 0;
    const float *v = cpu_exec_value(e, id, &n);
    CHECK(v != NULL || n == 0);
    for (int64_t i = 0; v && i < n; i++) k += v[i] != 0;
    return k;
}

static void test_dropout(void)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int x = input(p, "pos", DT_F32, shp(2, N, 1000));
    int c5 = ir_const(g, 5, NOLOC), c6 = ir_const(g, 6, NOLOC);
    int a = ir_dropout(g, x, c5, 0.3, 0, NOLOC);
    int again = ir_dropout(g, x, c5, 0.3, 0, NOLOC);     /* same key: same mask */
    int next = ir_dropout(g, x, c6, 0.3, 0, NOLOC);      /* next micro-step */
    int other = ir_dropout(g, x, c5, 0.3, 1, NOLOC);     /* another dropout node */
    CpuExec *e = cpu_exec_new(p, CPU_F32);
    Feed fd;
    feed_make(&fd, p, 40, 3);
    CHECK_EQ_INT(cpu_exec_run(e, g, &fd.f), 0);
    compare_nodes(e, p, g, &fd.f, CPU_F32);
    int64_t n, nb, nn, no;
    const float *va = cpu_exec_value(e, a, &n), *vb = cpu_exec_value(e, again, &nb);
    const float *vn = cpu_exec_value(e, next, &nn), *vo = cpu_exec_value(e, other, &no);
    /* the four masks are read N elements each */
    bool same_size = va && vb && vn && vo && nb == n && nn == n && no == n;
    CHECK(same_size);
    if (!same_size) n = 0;
    CHECK(!same_size || memcmp(va, vb, (size_t)n * sizeof *va) == 0);
    int64_t diff_next = 0, diff_other = 0;
    for (int64_t i = 0; i < n; i++) {
        diff_next += (va[i] != 0) != (vn[i] != 0);
        diff_other += (va[i] != 0) != (vo[i] != 0);
    }
    /* independent masks disagree on 2 p (1 - p) = 42% of the elements */
    CHECK(diff_next > n / 3 && diff_other > n / 3);
    /* kept count within 6 sigma of the binomial mean: n = 40000, p = 0.3 */
    double mean = 0.7 * (double)n, sigma = sqrt((double)n * 0.3 * 0.7);
    int64_t kept = count_nonzero(e, a);
    CHECK(fabs((double)kept - mean) <= 6 * sigma);
    feed_free(&fd);
    cpu_exec_free(e);
    ir_program_free(p);
}

/* ---- persistent tensors ---- */

static void test_init(void)
{
    IrProgram *p = new_program();
    ir_add_tensor(p, "z", IR_PARAM, shp(1, 3), IR_INIT_ZEROS, 0, -1, NOLOC);
    ir_add_tensor(p, "w", IR_PARAM, shp(2, 4, 5), IR_INIT_UNIFORM, 0.5, -1, NOLOC);
    ir_add_tensor(p, "o", IR_STATE, shp(1, 2), IR_INIT_ONES, 0, 1, NOLOC);
    ir_add_tensor(p, "c", IR_STATE, shp(0), IR_INIT_CONST, 0.25, -1, NOLOC);
    for (int r = 0; r < 2; r++) {
        CpuExec *e = cpu_exec_new(p, r ? CPU_F64 : CPU_F32);
        cpu_exec_init_tensors(e, 42);
        double w[20], lo = 1, hi = -1;
        for (int i = 0; i < 20; i++) {
            w[i] = r ? ((double *)cpu_exec_tensor(e, 1))[i] : ((float *)cpu_exec_tensor(e, 1))[i];
            double u = rng_uniform(42, RNG_INIT, (1ull << 40) + (uint64_t)i);
            CHECK_CLOSE(w[i], (2 * u - 1) * 0.5, 1e-7, 0);
            lo = fmin(lo, w[i]), hi = fmax(hi, w[i]);
        }
        CHECK(lo >= -0.5 && hi <= 0.5 && hi - lo > 0.3);   /* spread, not constant */
        double z = r ? ((double *)cpu_exec_tensor(e, 0))[2] : ((float *)cpu_exec_tensor(e, 0))[2];
        double o = r ? ((double *)cpu_exec_tensor(e, 2))[1] : ((float *)cpu_exec_tensor(e, 2))[1];
        double c = r ? ((double *)cpu_exec_tensor(e, 3))[0] : ((float *)cpu_exec_tensor(e, 3))[0];
        CHECK(z == 0 && o == 1 && c == 0.25);
        cpu_exec_free(e);
    }
    ir_program_free(p);
}

static double tensor_at(CpuExec *e, int t, int i) { return ((float *)cpu_exec_tensor(e, t))[i]; }

/* Reads see the values from before the step, whatever the order of the ASSIGNs: an ASSIGN
 * takes effect after the graph: a READ after an assigned value is computed sees
 * the old values, swaps swap. REUSE on (as training runs), a value is computed in its
 * tensor's storage where nothing reads the old values after it (exec.c, in_place_plan),
 * a select of the new or the old element too; the results are the same. */
static void check_assign(bool reuse)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int t0 = ir_add_tensor(p, "a", IR_STATE, shp(1, 3), IR_INIT_CONST, 2, -1, NOLOC);
    int t1 = ir_add_tensor(p, "b", IR_STATE, shp(1, 3), IR_INIT_ZEROS, 0, -1, NOLOC);
    int t2 = ir_add_tensor(p, "c", IR_STATE, shp(1, 3), IR_INIT_ONES, 0, -1, NOLOC);
    int t3 = ir_add_tensor(p, "d", IR_STATE, shp(1, 3), IR_INIT_CONST, 7, -1, NOLOC);
    int t4 = ir_add_tensor(p, "e", IR_STATE, shp(1, 3), IR_INIT_CONST, 5, -1, NOLOC);
    int t5 = ir_add_tensor(p, "f", IR_STATE, shp(1, 3), IR_INIT_CONST, 3, -1, NOLOC);
    int r0 = ir_read(g, p, t0, NOLOC), one = ir_const(g, 1, NOLOC);
    ir_assign(g, p, t0, ir_binary(g, IR_ADD, r0, one, NOLOC), NOLOC);
    ir_assign(g, p, t1, r0, NOLOC);                       /* b := old a */
    int late = ir_binary(g, IR_MUL, ir_read(g, p, t0, NOLOC), one, NOLOC);
    ir_assign(g, p, t2, ir_read(g, p, t3, NOLOC), NOLOC); /* c and d swap */
    ir_assign(g, p, t3, ir_read(g, p, t2, NOLOC), NOLOC);
    int r4 = ir_read(g, p, t4, NOLOC), r5 = ir_read(g, p, t5, NOLOC);   /* in place: e *= 3 */
    ir_assign(g, p, t4, ir_binary(g, IR_ADD, ir_binary(g, IR_MUL, r4, ir_const(g, 3, NOLOC), NOLOC),
                                  ir_const(g, 0, NOLOC), NOLOC), NOLOC);
    int keep = ir_binary(g, IR_LESS, r5, ir_const(g, 4, NOLOC), NOLOC);  /* f doubles while < 4 */
    ir_assign(g, p, t5, ir_select(g, keep, ir_binary(g, IR_MUL, r5, ir_const(g, 2, NOLOC), NOLOC), r5,
                                  NOLOC), NOLOC);
    g->output[IR_OUT_PREDICTION] = late;
    CpuExec *e = cpu_exec_new(p, CPU_F32);
    cpu_exec_set_reuse(e, reuse);
    cpu_exec_init_tensors(e, 0);
    CpuFeed feed = { .symvals = { 1 } };
    CHECK_EQ_INT(cpu_exec_run(e, g, &feed), 0);
    CHECK_CLOSE(((const float *)cpu_exec_value(e, late, NULL))[1], 2, 0, 0);
    CHECK(tensor_at(e, t0, 0) == 3 && tensor_at(e, t1, 2) == 2);
    CHECK(tensor_at(e, t2, 0) == 7 && tensor_at(e, t3, 1) == 1);
    CHECK(tensor_at(e, t4, 2) == 15 && tensor_at(e, t5, 0) == 6);
    CHECK_EQ_INT(cpu_exec_run(e, g, &feed), 0);
    CHECK_CLOSE(((const float *)cpu_exec_value(e, late, NULL))[0], 3, 0, 0);
    CHECK(tensor_at(e, t0, 1) == 4 && tensor_at(e, t1, 0) == 3);
    CHECK(tensor_at(e, t2, 2) == 1 && tensor_at(e, t3, 0) == 7);
    CHECK(tensor_at(e, t4, 0) == 45 && tensor_at(e, t5, 1) == 6);
    compared[IR_ASSIGN] = true;   /* against the values written above */
    cpu_exec_free(e);
    ir_program_free(p);
}

static void test_assign(void)
{
    check_assign(false);
    check_assign(true);
}

/* --detect-anomaly: the run stops at the first node whose value is not finite, names it
 * and the first bad element, and applies no ASSIGN; off, the same run completes. The
 * input is finite, so the first bad value is log's, at the one negative element. */
static void test_anomaly(void)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int x = input(p, "x", DT_F32, shp(2, N, 3));
    int t = ir_add_tensor(p, "t", IR_STATE, shp(0), IR_INIT_CONST, 5, -1, NOLOC);
    int shifted = ir_binary(g, IR_SUB, x, ir_const(g, 1, NOLOC), NOLOC);
    int bad = ir_unary(g, IR_LOG, shifted, NOLOC);
    int later = ir_unary(g, IR_EXP, bad, NOLOC);
    ir_assign(g, p, t, ir_binary(g, IR_ADD, ir_read(g, p, t, NOLOC), ir_const(g, 1, NOLOC), NOLOC), NOLOC);
    float xs[6] = { 2, 3, 4, 5, 0.5f, 6 };   /* element 4: log(0.5 - 1) is NaN */
    CpuFeed feed = { .symvals = { 2 }, .inputs = { xs } };
    CpuExec *e = cpu_exec_new(p, CPU_F32);
    cpu_exec_init_tensors(e, 0);
    CHECK_EQ_INT(cpu_exec_run(e, g, &feed), 0);            /* off: NaN flows on */
    CHECK(cpu_exec_anomaly(e) == NULL);
    CHECK(tensor_at(e, t, 0) == 6);
    cpu_exec_set_detect_anomaly(e, true);
    CHECK_EQ_INT(cpu_exec_run(e, g, &feed), -1);
    const CpuAnomaly *a = cpu_exec_anomaly(e);
    CHECK(a != NULL);
    if (a) {
        CHECK_EQ_INT(a->node, bad);
        CHECK_EQ_INT(a->element, 4);
        CHECK(isnan(a->value));
        CHECK(a->node != later);
    }
    CHECK(tensor_at(e, t, 0) == 6);                        /* the step's ASSIGN not applied */
    xs[4] = 1e30f;                                          /* finite everywhere: completes */
    CHECK_EQ_INT(cpu_exec_run(e, g, &feed), 0);
    CHECK(cpu_exec_anomaly(e) == NULL);
    CHECK(tensor_at(e, t, 0) == 7);
    cpu_exec_free(e);
    ir_program_free(p);
}

/* ---- errors ---- */

/* Runs G with stderr captured into BUF. */
static int run_capturing(CpuExec *e, const IrGraph *g, const CpuFeed *feed, char *buf, size_t n)
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    CHECK(tmp != NULL);     /* nowhere to capture stderr: the message checks fail */
    if (!tmp) {
        buf[0] = '\0';
        return cpu_exec_run(e, g, feed);
    }
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    int rc = cpu_exec_run(e, g, feed);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t len = fread(buf, 1, n - 1, tmp);
    buf[len] = 0;
    fclose(tmp);
    return rc;
}

static void test_bad_labels(void)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int logits = input(p, "logits", DT_F32, shp(2, N, 10));
    int labels = input(p, "lab", DT_I32, shp(1, N));
    int loss = ir_cross_entropy(g, logits, labels, (SrcLoc){ 12, 10 });
    g->nodes[loss].name = "loss";
    for (int r = 0; r < 2; r++) {
        CpuExec *e = cpu_exec_new(p, r ? CPU_F64 : CPU_F32);
        Feed fd;
        feed_make(&fd, p, 4, 1);
        char msg[512];
        CHECK_EQ_INT(run_capturing(e, g, &fd.f, msg, sizeof msg), 0);
        ((int32_t *)fd.owned[1])[2] = 12;
        CHECK_EQ_INT(run_capturing(e, g, &fd.f, msg, sizeof msg), -1);
        CHECK_STR(msg, "cgc: error: label 12 out of range for 10 classes at line 12 of the "
                       ".net file (loss)\n");
        ((int32_t *)fd.owned[1])[2] = -1;
        CHECK_EQ_INT(run_capturing(e, g, &fd.f, msg, sizeof msg), -1);
        CHECK(strstr(msg, "label -1 out of range") != NULL);
        feed_free(&fd);
        cpu_exec_free(e);
    }
    ir_program_free(p);
}

/* ---- determinism and reuse ---- */

/* A program big enough for every parallel path (more than PAR_MIN elements). */
static IrProgram *big_program(void)
{
    IrProgram *p = new_program();
    IrGraph *g = &p->forward;
    int x = input(p, "x", DT_F32, shp(2, N, 200));
    int w = input(p, "w", DT_F32, shp(2, 128, 200));
    int bias = input(p, "bias", DT_F32, shp(1, 128));
    int lab = input(p, "lab", DT_I32, shp(1, N));
    int h = ir_binary(g, IR_ADD, ir_matmul(g, x, w, IR_MATMUL_TRANS_B, NOLOC), bias, NOLOC);
    h = ir_cast(g, ir_unary(g, IR_GELU, h, NOLOC), DT_F16, NOLOC);
    int s = ir_softmax(g, IR_LOG_SOFTMAX, ir_cast(g, h, DT_F32, NOLOC), 1, NOLOC);
    ir_cross_entropy(g, s, lab, NOLOC);
    /* products big enough to be split: by rows with a transposed, by columns with b */
    ir_matmul(g, x, x, IR_MATMUL_TRANS_A, NOLOC);
    ir_matmul(g, w, x, IR_MATMUL_TRANS_B, NOLOC);
    ir_reduce(g, IR_SUM, x, IR_AXIS_ALL, NOLOC);
    ir_reduce(g, IR_MAX, x, 1, NOLOC);
    ir_reduce_to(g, x, shp(1, 200), NOLOC);
    ir_transpose(g, x, NOLOC);
    ir_dropout(g, x, ir_const(g, 3, NOLOC), 0.1, 2, NOLOC);
    return p;
}

/* Node ID's value after a run with SYMVALS, or NULL after a failed check when it does not
 * hold the node's elements (what snapshot copies and same_bits compares); its bytes. */
static const void *whole_value(CpuExec *e, const IrGraph *g, int id, const int64_t *symvals,
                               CpuReal real, size_t *bytes)
{
    int64_t n, want = ir_numel(&g->nodes[id].shape, symvals);
    const void *v = cpu_exec_value(e, id, &n);
    if (!v || n != want) {
        fprintf(stderr, "node %%%d: %lld elements, want %lld\n", id, (long long)n, (long long)want);
        CHECK(!"a node value of its shape's elements");
        return NULL;
    }
    *bytes = (size_t)n * (g->nodes[id].dtype == DT_I32 ? 4 : real == CPU_F64 ? 8 : 4);
    return v;
}

/* Copies of every node value, to compare bit for bit. */
static void **snapshot(CpuExec *e, const IrGraph *g, const int64_t *symvals, CpuReal real)
{
    int nnodes = g->nnodes > 0 ? g->nnodes : 1;
    void **v = calloc((size_t)nnodes, sizeof *v);
    for (int id = 0; id < g->nnodes; id++) {
        size_t bytes = 0;
        const void *src = whole_value(e, g, id, symvals, real, &bytes);
        v[id] = src ? malloc(bytes + 1) : NULL;
        if (src) memcpy(v[id], src, bytes);
    }
    return v;
}

static int same_bits(CpuExec *e, const IrGraph *g, const int64_t *symvals, CpuReal real, void **v)
{
    int diff = 0;
    for (int id = 0; id < g->nnodes; id++) {
        size_t bytes = 0;
        const void *now = whole_value(e, g, id, symvals, real, &bytes);
        diff += !now || !v[id] || memcmp(now, v[id], bytes) != 0;
        free(v[id]);
    }
    free(v);
    return diff == 0;
}

static void test_determinism(void)
{
    IrProgram *p = big_program();
    for (int r = 0; r < 2; r++) {
        CpuReal real = r ? CPU_F64 : CPU_F32;
        CpuExec *e = cpu_exec_new(p, real);
        Feed fd;
        feed_make(&fd, p, 200, 8);
        omp_set_num_threads(2);
        CHECK_EQ_INT(cpu_exec_run(e, &p->forward, &fd.f), 0);
        compare_nodes(e, p, &p->forward, &fd.f, real);
        void **first = snapshot(e, &p->forward, fd.f.symvals, real);
        CHECK_EQ_INT(cpu_exec_run(e, &p->forward, &fd.f), 0);
        CHECK(same_bits(e, &p->forward, fd.f.symvals, real, first));
        void **two = snapshot(e, &p->forward, fd.f.symvals, real);
        omp_set_num_threads(1);
        CHECK_EQ_INT(cpu_exec_run(e, &p->forward, &fd.f), 0);
        CHECK(same_bits(e, &p->forward, fd.f.symvals, real, two));
        omp_set_num_threads(2);
        CHECK(cpu_exec_gemm_seconds(e) > 0);
        feed_free(&fd);
        cpu_exec_free(e);
    }
    ir_program_free(p);
}

/* One executor, batch sizes growing and shrinking: every run still right. */
static void test_buffer_reuse(void)
{
    IrProgram *p = big_program();
    IrGraph *g = &p->forward;
    int y = input(p, "y", DT_F32, shp(3, N, 4, 5));
    ir_reduce_to(g, y, shp(3, 1, 4, 1), NOLOC);
    ir_matmul(g, y, y, IR_MATMUL_TRANS_B, NOLOC);
    ir_softmax(g, IR_SOFTMAX, y, 0, NOLOC);
    static const int64_t batches[] = { 3, 70, 2, 150, 1, 5 };
    for (int r = 0; r < 2; r++) {
        CpuReal real = r ? CPU_F64 : CPU_F32;
        CpuExec *e = cpu_exec_new(p, real);
        for (size_t i = 0; i < sizeof batches / sizeof *batches; i++)
            run_and_compare(e, p, real, batches[i], 100 + i);
        cpu_exec_free(e);
    }
    ir_program_free(p);
}

/* Every op the executor computes met the reference above, so that a new row of the
 * table does not reach the executor unchecked. Placed leaves are not computed, training
 * lowering resolves a mode switch before any backend runs, and a job's sums and slices
 * are checked where there is a job (tests/e2e/ranks.sh: R ranks against one). */
static void every_kernel_compared(void)
{
    for (int op = 0; op < IR_NUM_OPS; op++) {
        const IrOpInfo *o = &ir_op_info[op];
        bool computed = o->fuse != IR_FUSE_LEAF && o->family != IR_FAMILY_MODE_SWITCH &&
                        o->family != IR_FAMILY_COLLECTIVE;
        if (computed && !compared[op])
            fprintf(stderr, "no test compares %s with the reference executor: add it\n", o->name);
        CHECK(!computed || compared[op]);
    }
}

int main(void)
{
    test_rounding();
    test_erf_exp();
    test_no_double_rounding();
    test_derivatives();
    test_dropout();
    test_init();
    test_assign();
    test_anomaly();
    test_bad_labels();
    test_determinism();
    test_buffer_reuse();
    test_half_storage();
    test_unary();
    test_binary();
    test_select_broadcast();
    test_reductions();
    test_boundary_shapes();
    test_softmax();
    test_matmul();
    test_windows();
    test_shape_ops();
    test_losses();
    every_kernel_compared();
    return check_result();
}
