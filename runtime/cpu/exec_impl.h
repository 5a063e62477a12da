/* exec_impl.h: the executor's kernels for one element type.
 *
 * exec.c includes this file twice: with REAL float and with REAL double. SFX(name)
 * gives each function its type suffix (_f32, _f64), MATH(fn) names the libm function
 * of that type (expf or exp), KERNEL_ERF and KERNEL_EXP the erf and exp the kernels
 * compute too, in gelu, softmax and logsumexp (codegen/cgc_math.h's in f32, libm's in
 * f64), GEMM and GEMV the cblas routines and ROUND the rounding to a half format.
 * Everything here is static; the macros are undefined at the end, ready for the next
 * inclusion. Sums accumulate in double in both instances: the reference should be the
 * accurate one.
 *
 * No include guard, on purpose.
 */

/* ---- node values ---- */

/* The value of node ID as REAL; an i32 node is converted once per run. */
static const REAL *SFX(value)(CpuExec *e, const IrGraph *g, int id)
{
    Slot *s = &e->slots[id];
    if (g->nodes[id].dtype != DT_I32) return s->val;
    if (s->conv_run != e->run) {
        REAL *c = slot_reserve(e, &s->conv, (size_t)s->n * sizeof(REAL));
        const int32_t *v = s->val;
        for (int64_t i = 0; i < s->n; i++) c[i] = (REAL)v[i];
        s->conv_run = e->run;
    }
    return s->conv.p;
}

/* Where a node's REAL result is computed: its own buffer, the storage of the tensor it is
 * assigned to where in_place_plan allows (training, anomalies unchecked), or for an i32
 * node the conversion buffer, from which SFX(finish) stores the integers. */
static REAL *SFX(result)(CpuExec *e, const IrNode *node, Slot *s)
{
    int t = e->reuse && !e->detect_anomaly ? e->in_place[s - e->slots] : -1;
    if (t >= 0) return s->val = e->tensors[t];
    if (node->dtype == DT_I32) {
        s->val = slot_reserve(e, &s->own, (size_t)s->n * sizeof(int32_t));
        s->conv_run = e->run;
        return slot_reserve(e, &s->conv, (size_t)s->n * sizeof(REAL));
    }
    s->val = slot_reserve(e, &s->own, (size_t)s->n * sizeof(REAL));
    return s->val;
}

/* Rounds V[0..N) to format F; called with a constant F so that the rounding's
 * constants fold and the loop vectorizes. */
static inline __attribute__((always_inline)) void SFX(round_span)(REAL *restrict v, int64_t n,
                                                                  const HalfFormat *f)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) v[i] = ROUND(v[i], f);
}

/* V[0..N) rounded to F (NULL: left as is), serially. */
static void SFX(round_to)(REAL *v, int64_t n, const HalfFormat *f)
{
    if (f == &FMT_F16) SFX(round_span)(v, n, &FMT_F16);
    else if (f == &FMT_BF16) SFX(round_span)(v, n, &FMT_BF16);
    else CGC_ASSERT(f == NULL);
}

static void SFX(round_all)(REAL *v, int64_t n, const HalfFormat *f)
{
    int64_t tasks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t t = 0; t < tasks; t++)
        SFX(round_to)(v + t * CHUNK, n - t * CHUNK < CHUNK ? n - t * CHUNK : CHUNK, f);
}

/* Elementwise kernels round each span as they write it, while it is in cache. */
static bool SFX(rounds_in_span)(const IrNode *node)
{
    IrOpClass cls = ir_op_info[node->op].cls;
    return cls == IR_CLASS_UNARY || cls == IR_CLASS_BINARY || cls == IR_CLASS_TERNARY;
}

/* Stores a computed value in the node's dtype: integers for i32, rounded to the
 * format for f16 and bf16. */
static void SFX(finish)(CpuExec *e, const IrGraph *g, const IrNode *node, Slot *s)
{
    int64_t n = s->n;
    if (node->dtype == DT_I32) {
        const REAL *c = s->conv.p;
        int32_t *v = s->val;
        for (int64_t i = 0; i < n; i++) v[i] = to_int32(c[i]);
        return;
    }
    const HalfFormat *f = node_format(g, node);
    if (!f) return;
    if (moves_elements(node->op) && g->nodes[node->in[0]].dtype == node->dtype) return;
    if (SFX(rounds_in_span)(node)) return;
    SFX(round_all)(s->val, n, f);
}

/* ---- scalar functions ---- */

static inline REAL SFX(sigmoid)(REAL x)
{
    /* Two forms, so that exp never overflows. */
    if (x >= 0) return 1 / (1 + MATH(exp)(-x));
    REAL z = MATH(exp)(x);
    return z / (1 + z);
}

static inline REAL SFX(gelu)(REAL x)
{
    return (REAL)0.5 * x * (1 + KERNEL_ERF(x * (REAL)0.70710678118654752));
}

/* d/dx x*Phi(x) = Phi(x) + x*phi(x). */
static inline REAL SFX(gelu_grad)(REAL x)
{
    REAL cdf = (REAL)0.5 * (1 + KERNEL_ERF(x * (REAL)0.70710678118654752));
    REAL pdf = KERNEL_EXP((REAL)-0.5 * x * x) * (REAL)0.39894228040143268;
    return MATH(fma)(x, pdf, cdf);
}

/* 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). */
static inline REAL SFX(gelu_tanh)(REAL x)
{
    REAL u = (REAL)0.79788456080286536 * (x + (REAL)0.044715 * x * x * x);
    return (REAL)0.5 * x * (1 + MATH(tanh)(u));
}

static inline REAL SFX(gelu_tanh_grad)(REAL x)
{
    REAL k = (REAL)0.79788456080286536;
    REAL t = MATH(tanh)(k * (x + (REAL)0.044715 * x * x * x));
    REAL du = k * (1 + 3 * (REAL)0.044715 * x * x);
    return (REAL)0.5 * (1 + t) + (REAL)0.5 * x * (1 - t * t) * du;
}

/* d/dx x s(x) = s (1 + x (1 - s)). */
static inline REAL SFX(silu_grad)(REAL x)
{
    REAL s = SFX(sigmoid)(x);
    return s * (1 + x * (1 - s));
}

/* ---- elementwise spans (called by walk_run) ----
 * One span function per elementwise op, made from ops.def's EXPR: the same expression the
 * CUDA renderer prints, compiled here for REAL. Its math functions are type-generic
 * (exec.c includes <tgmath.h>), and its helpers are this file's. */

#define cgc_sigmoid SFX(sigmoid)
#define cgc_gelu SFX(gelu)
#define cgc_gelu_grad SFX(gelu_grad)
#define cgc_gelu_tanh SFX(gelu_tanh)
#define cgc_gelu_tanh_grad SFX(gelu_tanh_grad)
#define cgc_silu_grad SFX(silu_grad)
#define cgc_isfinite isfinite

typedef struct SFX(Elementwise) {
    REAL *out;
    const REAL *in[IR_MAX_IN];
    const HalfFormat *round;    /* the output's storage format, or NULL */
} SFX(Elementwise);

/* A unary op's operand has the output's shape, so it is read contiguously. */
#define SPAN_UNARY(name, ...)                                                              \
    SPAN_CLONES static void SFX(span_##name)(void *ctx, int64_t o, const int64_t *off,    \
                                             const int64_t *step, int64_t n)              \
    {                                                                                      \
        const SFX(Elementwise) *c = ctx;                                                   \
        REAL *restrict out = c->out + o;                                                   \
        const REAL *in = c->in[0] + off[0];                                                \
        _Pragma("omp simd")                                                                \
        for (int64_t i = 0; i < n; i++) {                                                  \
            REAL x = in[i];                                                                \
            out[i] = (__VA_ARGS__);                                                        \
        }                                                                                  \
        SFX(round_to)(out, n, c->round);                                                   \
    }

/* A binary op over a span: the loop inlined with constant strides at each call, so that
 * the same-shape, scalar and row-vector cases vectorize. */
#define SPAN_BINARY(name, ...)                                                             \
    static inline __attribute__((always_inline)) void                                     \
    SFX(loop_##name)(REAL *restrict out, const REAL *pa, int64_t sa, const REAL *pb,      \
                     int64_t sb, int64_t n)                                               \
    {                                                                                      \
        _Pragma("omp simd")                                                                \
        for (int64_t i = 0; i < n; i++) {                                                  \
            REAL a = pa[i * sa], b = pb[i * sb];                                           \
            out[i] = (__VA_ARGS__);                                                        \
        }                                                                                  \
    }                                                                                      \
    SPAN_CLONES static void SFX(span_##name)(void *ctx, int64_t o, const int64_t *off,    \
                                             const int64_t *step, int64_t n)              \
    {                                                                                      \
        const SFX(Elementwise) *c = ctx;                                                   \
        REAL *out = c->out + o;                                                            \
        const REAL *a = c->in[0] + off[0], *b = c->in[1] + off[1];                         \
        if (step[0] == 1 && step[1] == 1) SFX(loop_##name)(out, a, 1, b, 1, n);            \
        else if (step[0] == 1 && step[1] == 0) SFX(loop_##name)(out, a, 1, b, 0, n);       \
        else if (step[0] == 0 && step[1] == 1) SFX(loop_##name)(out, a, 0, b, 1, n);       \
        else SFX(loop_##name)(out, a, step[0], b, step[1], n);                             \
        SFX(round_to)(out, n, c->round);                                                   \
    }

#define SPAN_TERNARY(name, ...)                                                            \
    SPAN_CLONES static void SFX(span_##name)(void *ctx, int64_t o, const int64_t *off,    \
                                             const int64_t *step, int64_t n)              \
    {                                                                                      \
        const SFX(Elementwise) *e = ctx;                                                   \
        REAL *out = e->out + o;                                                            \
        const REAL *pc = e->in[0] + off[0], *pa = e->in[1] + off[1], *pb = e->in[2] + off[2]; \
        _Pragma("omp simd")                                                                \
        for (int64_t i = 0; i < n; i++) {                                                  \
            REAL c = pc[i * step[0]], a = pa[i * step[1]], b = pb[i * step[2]];            \
            out[i] = (__VA_ARGS__);                                                        \
        }                                                                                  \
        SFX(round_to)(out, n, e->round);                                                   \
    }

/* BROADCAST moves elements (broadcast_span below); its EXPR serves the renderer alone. */
#define SPAN_SHAPE(name, ...)

#define IR_OP(...)
#define IR_EW(name, arity, cls, family, fuse, attrs, shape, autocast, cost, diff, grad, meaning, \
              deriv, ...)                                                                      \
    SPAN_##cls(name, __VA_ARGS__)
#include "../../compiler/ops.def"

#define SPAN_ENTRY_UNARY(name) [IR_##name] = SFX(span_##name),
#define SPAN_ENTRY_BINARY(name) [IR_##name] = SFX(span_##name),
#define SPAN_ENTRY_TERNARY(name) [IR_##name] = SFX(span_##name),
#define SPAN_ENTRY_SHAPE(name)
static const SpanFn SFX(elementwise_span)[IR_NUM_OPS] = {
#define IR_OP(...)
#define IR_EW(name, arity, cls, ...) SPAN_ENTRY_##cls(name)
#include "../../compiler/ops.def"
};

#undef SPAN_UNARY
#undef SPAN_BINARY
#undef SPAN_TERNARY
#undef SPAN_SHAPE
#undef SPAN_ENTRY_UNARY
#undef SPAN_ENTRY_BINARY
#undef SPAN_ENTRY_TERNARY
#undef SPAN_ENTRY_SHAPE
#undef cgc_sigmoid
#undef cgc_gelu
#undef cgc_gelu_grad
#undef cgc_gelu_tanh
#undef cgc_gelu_tanh_grad
#undef cgc_silu_grad
#undef cgc_isfinite

static void SFX(broadcast_span)(void *ctx, int64_t o, const int64_t *off, const int64_t *step,
                                int64_t n)
{
    const SFX(Elementwise) *c = ctx;
    REAL *out = c->out + o;
    const REAL *x = c->in[0] + off[0];
    if (step[0] == 0)
        for (int64_t i = 0; i < n; i++) out[i] = x[0];
    else
        for (int64_t i = 0; i < n; i++) out[i] = x[i * step[0]];
}

/* Runs SPAN over NODE's output, its inputs broadcast to the output's shape. */
static void SFX(elementwise)(CpuExec *e, const IrGraph *g, const IrNode *node, const Dims *od,
                             REAL *out, SpanFn span)
{
    SFX(Elementwise) c = { .out = out };
    if (SFX(rounds_in_span)(node)) c.round = node_format(g, node);
    Dims in[IR_MAX_IN];
    for (int k = 0; k < node->nin; k++) {
        in[k] = bind_shape(&g->nodes[node->in[k]].shape, e->symvals);
        c.in[k] = SFX(value)(e, g, node->in[k]);
    }
    Walk w;
    walk_plan(&w, od, node->nin, in);
    walk_run(&w, span, &c);
}

/* ---- reductions ---- */

/* Four running sums (elements i, i+1, i+2, i+3 of every four), added pairwise at the end:
 * one running sum waits on each addition before the next. */
static double SFX(span_sum)(const REAL *x, int64_t n)
{
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += x[i];
        s1 += x[i + 1];
        s2 += x[i + 2];
        s3 += x[i + 3];
    }
    for (; i < n; i++) s0 += x[i];
    return (s0 + s1) + (s2 + s3);
}

/* NaN wins, as in torch.amax: once m is NaN no comparison replaces it. */
static double SFX(span_max)(const REAL *x, int64_t n)
{
    double m = x[0];
    for (int64_t i = 1; i < n; i++)
        if (x[i] > m || x[i] != x[i]) m = x[i];
    return m;
}

/* Rows of LEN contiguous elements: each row is cut into CHUNK-sized pieces reduced in
 * parallel, whose partials are then combined in order. */
static void SFX(reduce_rows)(CpuExec *e, IrOp op, REAL *out, const REAL *x, int64_t rows,
                             int64_t len)
{
    int64_t per_row = (len + CHUNK - 1) / CHUNK, tasks = rows * per_row;
    bool max = ir_op_info[op].combine == IR_COMBINE_MAX, mean = ir_op_info[op].mean;
    if (per_row == 1) {   /* short rows (a pooling window): a row per iteration */
#pragma omp parallel for schedule(static) if (rows * len >= PAR_MIN)
        for (int64_t r = 0; r < rows; r++) {
            double v = max ? SFX(span_max)(x + r * len, len) : SFX(span_sum)(x + r * len, len);
            out[r] = (REAL)(mean ? v / (double)len : v);
        }
        return;
    }
    double *part = buf_reserve(&e->scratch[2], (size_t)tasks * sizeof(double));
#pragma omp parallel for schedule(static) if (rows * len >= PAR_MIN)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t lo = (t % per_row) * CHUNK, n = len - lo < CHUNK ? len - lo : CHUNK;
        const REAL *span = x + (t / per_row) * len + lo;
        part[t] = max ? SFX(span_max)(span, n) : SFX(span_sum)(span, n);
    }
    for (int64_t r = 0; r < rows; r++) {
        const double *p = part + r * per_row;
        double acc = p[0];
        for (int64_t i = 1; i < per_row; i++)
            acc = max ? ((p[i] > acc || p[i] != p[i]) ? p[i] : acc) : acc + p[i];
        out[r] = (REAL)(mean ? acc / (double)len : acc);
    }
}

/* A non-last axis: each task owns up to COL_CHUNK columns of one outer block and adds
 * the LEN rows into them in order. */
static void SFX(reduce_cols)(IrOp op, REAL *out, const REAL *x, AxisPlan a)
{
    int64_t per = (a.inner + COL_CHUNK - 1) / COL_CHUNK, tasks = a.outer * per;
    bool max = ir_op_info[op].combine == IR_COMBINE_MAX, mean = ir_op_info[op].mean;
#pragma omp parallel for schedule(static) if (a.outer * a.len * a.inner >= PAR_MIN)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t o = t / per, lo = (t % per) * COL_CHUNK;
        int64_t w = a.inner - lo < COL_CHUNK ? a.inner - lo : COL_CHUNK;
        const REAL *base = x + o * a.len * a.inner + lo;
        double acc[COL_CHUNK];
        for (int64_t j = 0; j < w; j++) acc[j] = base[j];
        for (int64_t k = 1; k < a.len; k++) {
            const REAL *row = base + k * a.inner;
            if (max) {
                for (int64_t j = 0; j < w; j++)
                    if (row[j] > acc[j] || row[j] != row[j]) acc[j] = row[j];
            } else {
                for (int64_t j = 0; j < w; j++) acc[j] += row[j];
            }
        }
        REAL *dst = out + o * a.inner + lo;
        for (int64_t j = 0; j < w; j++)
            dst[j] = (REAL)(mean ? acc[j] / (double)a.len : acc[j]);
    }
}

/* SUM, MEAN or MAX of X, seen as [outer, len, inner], over len into OUT [outer, inner]. */
static void SFX(reduce)(CpuExec *e, IrOp op, REAL *out, const REAL *x, AxisPlan a)
{
    if (a.outer * a.inner == 0) return;
    if (a.len == 0) {   /* an empty sum is 0; mean and max of nothing are NaN */
        bool sum = ir_op_info[op].combine == IR_COMBINE_ADD && !ir_op_info[op].mean;
        for (int64_t i = 0; i < a.outer * a.inner; i++) out[i] = sum ? 0 : NAN;
        return;
    }
    if (a.inner == 1) SFX(reduce_rows)(e, op, out, x, a.outer, a.len);
    else SFX(reduce_cols)(op, out, x, a);
}

/* Sums X down to OD by the passes of reduce_to_plan, through two scratch buffers. */
static void SFX(reduce_to)(CpuExec *e, REAL *out, const REAL *x, const Dims *xd,
                           const Dims *od)
{
    AxisPlan pass[IR_MAX_RANK];
    int npass = reduce_to_plan(xd, od, pass);
    if (npass == 0) {   /* only size-1 dimensions differ */
        memcpy(out, x, (size_t)dims_numel(od) * sizeof(REAL));
        return;
    }
    const REAL *src = x;
    for (int i = 0; i < npass; i++) {
        size_t bytes = (size_t)(pass[i].outer * pass[i].inner) * sizeof(REAL);
        REAL *dst = i == npass - 1 ? out : buf_reserve(&e->scratch[i % 2], bytes);
        SFX(reduce)(e, IR_SUM, dst, src, pass[i]);
        src = dst;
    }
}

/* ---- softmax along an axis: rows of LEN elements STRIDE apart ---- */

/* Cloned like the spans (KERNEL_EXP's fmaf wants the FMA unit): a contiguous softmax's
 * values in a loop the compiler vectorizes, then their sum in order. */
SPAN_CLONES static void SFX(softmax_row)(IrOp op, REAL *y, const REAL *x, int64_t len, int64_t stride)
{
    bool soft = op == IR_SOFTMAX;   /* else LOG_SOFTMAX */
    REAL m = x[0];
    for (int64_t k = 1; k < len; k++)
        if (x[k * stride] > m) m = x[k * stride];
    double s = 0;
    if (soft && stride == 1) {
        for (int64_t k = 0; k < len; k++) y[k] = KERNEL_EXP(x[k] - m);
        for (int64_t k = 0; k < len; k++) s += y[k];
    } else {
        for (int64_t k = 0; k < len; k++) {
            REAL z = KERNEL_EXP(x[k * stride] - m);
            s += z;
            if (soft) y[k * stride] = z;
        }
    }
    if (soft) {
        for (int64_t k = 0; k < len; k++) y[k * stride] = (REAL)(y[k * stride] / s);
    } else {
        REAL lse = m + (REAL)log(s);
        for (int64_t k = 0; k < len; k++) y[k * stride] = x[k * stride] - lse;
    }
}

/* SOFTMAX_GRAD: y (d - sum(d y)); LOG_SOFTMAX_GRAD: d - e^y sum(d), in a loop of its own
 * (no exp computed for the other). */
static void SFX(softmax_grad_row)(IrOp op, REAL *out, const REAL *d, const REAL *y,
                                  int64_t len, int64_t stride)
{
    bool soft = op == IR_SOFTMAX_GRAD;
    double s = 0;
    for (int64_t k = 0; k < len; k++)
        s += soft ? (double)d[k * stride] * y[k * stride] : d[k * stride];
    REAL sr = (REAL)s;
    for (int64_t k = 0; soft && k < len; k++) {
        int64_t i = k * stride;
        out[i] = y[i] * (d[i] - sr);
    }
    for (int64_t k = 0; !soft && k < len; k++) {
        int64_t i = k * stride;
        out[i] = d[i] - KERNEL_EXP(y[i]) * sr;
    }
}

/* Row r of [outer, len, inner] along the middle axis starts at this offset. */
static int64_t SFX(row_start)(AxisPlan a, int64_t r)
{
    return (r / a.inner) * a.len * a.inner + r % a.inner;
}

static void SFX(softmax)(IrOp op, REAL *y, const REAL *x, AxisPlan a)
{
    int64_t rows = a.outer * a.inner;
    if (a.len == 0) return;
#pragma omp parallel for schedule(static) if (rows * a.len >= PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t at = SFX(row_start)(a, r);
        SFX(softmax_row)(op, y + at, x + at, a.len, a.inner);
    }
}

static void SFX(softmax_grad)(IrOp op, REAL *out, const REAL *d, const REAL *y, AxisPlan a)
{
    int64_t rows = a.outer * a.inner;
#pragma omp parallel for schedule(static) if (rows * a.len >= PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t at = SFX(row_start)(a, r);
        SFX(softmax_grad_row)(op, out + at, d + at, y + at, a.len, a.inner);
    }
}

/* ---- losses and metrics over logits [N, C] and labels [N] ---- */

/* The exps a chunk at a time (a loop the compiler vectorizes), summed in order. */
SPAN_CLONES static double SFX(logsumexp)(const REAL *x, int64_t c)
{
    enum { LSE_CHUNK = 64 };
    REAL m = x[0], z[LSE_CHUNK];
    for (int64_t k = 1; k < c; k++)
        if (x[k] > m) m = x[k];
    double s = 0;
    for (int64_t k0 = 0; k0 < c; k0 += LSE_CHUNK) {
        int64_t n = c - k0 < LSE_CHUNK ? c - k0 : LSE_CHUNK;
        for (int64_t k = 0; k < n; k++) z[k] = KERNEL_EXP(x[k0 + k] - m);
        for (int64_t k = 0; k < n; k++) s += z[k];
    }
    return m + log(s);
}

static int SFX(check_labels)(const IrNode *node, const int32_t *labels, int64_t n, int64_t c)
{
    for (int64_t i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= c) return report_bad_label(node, labels[i], c);
    return 0;
}

/* The rows' terms are computed in parallel into TERMS (N of them) and added in order. */
static void SFX(cross_entropy)(REAL *out, double *terms, const REAL *x, const int32_t *labels,
                               int64_t n, int64_t c)
{
#pragma omp parallel for schedule(static) if (n * c >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) terms[i] = SFX(logsumexp)(x + i * c, c) - x[i * c + labels[i]];
    double total = 0;
    for (int64_t i = 0; i < n; i++) total += terms[i];
    out[0] = (REAL)(total / (double)n);
}

/* d (softmax(x) - onehot(label)) / N. */
static void SFX(ce_grad)(REAL *out, REAL d, const REAL *x, const int32_t *labels, int64_t n,
                         int64_t c)
{
    double scale = (double)d / (double)n;
#pragma omp parallel for schedule(static) if (n * c >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        const REAL *row = x + i * c;
        double lse = SFX(logsumexp)(row, c);
        for (int64_t k = 0; k < c; k++) {
            double p = exp((double)row[k] - lse) - (k == labels[i] ? 1.0 : 0.0);
            out[i * c + k] = (REAL)(scale * p);
        }
    }
}

/* Rows whose first maximal logit is at the label. */
static void SFX(count_correct)(REAL *out, const REAL *x, const int32_t *labels, int64_t n,
                               int64_t c)
{
    int64_t correct = 0;
    for (int64_t i = 0; i < n; i++) {
        const REAL *row = x + i * c;
        int64_t best = 0;
        for (int64_t k = 1; k < c; k++)
            if (row[k] > row[best]) best = k;
        correct += best == labels[i];
    }
    out[0] = (REAL)correct;
}

static int SFX(loss_op)(CpuExec *e, const IrGraph *g, const IrNode *node, REAL *out)
{
    int logits = node->op == IR_CE_GRAD ? node->in[1] : node->in[0];
    int labels = node->op == IR_CE_GRAD ? node->in[2] : node->in[1];
    Dims ld = bind_shape(&g->nodes[logits].shape, e->symvals);
    CGC_ASSERT(ld.rank >= 2 && g->nodes[labels].dtype == DT_I32);
    int64_t c = ld.d[ld.rank - 1], n = dims_numel(&ld) / (c ? c : 1);   /* rows: every position */
    const REAL *x = SFX(value)(e, g, logits);
    const int32_t *y = e->slots[labels].val;
    if (SFX(check_labels)(node, y, n, c) != 0) return -1;
    if (node->op == IR_CROSS_ENTROPY) {
        double *terms = buf_reserve(&e->scratch[2], (size_t)n * sizeof(double));
        SFX(cross_entropy)(out, terms, x, y, n, c);
    } else if (node->op == IR_CE_GRAD) {
        SFX(ce_grad)(out, SFX(value)(e, g, node->in[0])[0], x, y, n, c);
    } else {
        SFX(count_correct)(out, x, y, n, c);
    }
    return 0;
}

/* ---- lookup tables ---- */

/* Rows of the table [V, D] at the indices; an index outside [0, V) is an error. */
static int SFX(embed)(CpuExec *e, const IrGraph *g, const IrNode *node, REAL *out)
{
    const Dims td = bind_shape(&g->nodes[node->in[0]].shape, e->symvals);
    const Dims id = bind_shape(&g->nodes[node->in[1]].shape, e->symvals);
    const REAL *table = SFX(value)(e, g, node->in[0]);
    const int32_t *index = e->slots[node->in[1]].val;
    int64_t rows = td.d[0], width = td.d[1], n = dims_numel(&id);
    for (int64_t p = 0; p < n; p++) {
        if (index[p] < 0 || index[p] >= rows) return report_bad_index(node, index[p], rows);
        memcpy(out + p * width, table + index[p] * width, (size_t)width * sizeof(REAL));
    }
    return 0;
}

/* Row v of OUT [V, D] is the sum of d's rows whose index is v, added in position order
 * (as the kernel adds them). Indices were checked by the EMBED. */
static void SFX(embed_grad)(CpuExec *e, const IrGraph *g, const IrNode *node, const Dims *od,
                            REAL *out)
{
    const Dims id = bind_shape(&g->nodes[node->in[1]].shape, e->symvals);
    const REAL *d = SFX(value)(e, g, node->in[0]);
    const int32_t *index = e->slots[node->in[1]].val;
    int64_t rows = od->d[0], width = od->d[1], n = dims_numel(&id);
    memset(out, 0, (size_t)(rows * width) * sizeof(REAL));
    for (int64_t p = 0; p < n; p++)
        if (index[p] >= 0 && index[p] < rows)
            for (int64_t j = 0; j < width; j++) out[index[p] * width + j] += d[p * width + j];
}

/* X [.., T, T] with node->value where the column is past the row: each row of T is its
 * first r + 1 values copied, the rest filled. */
static void SFX(causal_mask)(const IrNode *node, REAL *out, const REAL *x, const Dims *xd)
{
    int64_t t = xd->d[xd->rank - 1], rows = t ? dims_numel(xd) / t : 0;
#pragma omp parallel for schedule(static) if (rows * t >= PAR_MIN)
    for (int64_t i = 0; i < rows; i++) {
        int64_t keep = i % t + 1;
        memcpy(out + i * t, x + i * t, (size_t)keep * sizeof(REAL));
        for (int64_t c = keep; c < t; c++) out[i * t + c] = (REAL)node->value;
    }
}

/* ---- shape ops ---- */

/* Output element i read from the input at its coordinates, axis a of the output being
 * axis PERM(node, a) of the input XD: a row of the output's last axis at a time, its
 * start found from the row's coordinates, its elements a constant stride apart. */
static void SFX(permute)(const IrNode *node, REAL *out, const REAL *x, const Dims *xd)
{
    int64_t stride[IR_MAX_RANK], from[IR_MAX_RANK], dim[IR_MAX_RANK], s = 1;
    int last = xd->rank - 1;
    for (int a = last; a >= 0; a--) stride[a] = s, s *= xd->d[a];
    for (int a = 0; a <= last; a++) {
        dim[a] = xd->d[ir_perm_axis(node, a)];
        from[a] = stride[ir_perm_axis(node, a)];
    }
    int64_t len = dim[last], step = from[last], rows = len ? dims_numel(xd) / len : 0;
#pragma omp parallel for schedule(static) if (rows * len >= PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t q = r, at = 0;
        for (int a = last - 1; a >= 0; a--) {
            at += q % dim[a] * from[a];
            q /= dim[a];
        }
        for (int64_t j = 0; j < len; j++) out[r * len + j] = x[at + j * step];
    }
}

/* The last two dimensions swapped, by tiles so that both sides stay in cache. */
static void SFX(transpose)(REAL *out, const REAL *x, int64_t batch, int64_t rows, int64_t cols)
{
    enum { TILE = 32 };
    int64_t tiles = (rows + TILE - 1) / TILE;
#pragma omp parallel for schedule(static) if (batch * rows * cols >= PAR_MIN)
    for (int64_t t = 0; t < batch * tiles; t++) {
        int64_t b = t / tiles, i0 = (t % tiles) * TILE;
        const REAL *src = x + b * rows * cols;
        REAL *dst = out + b * rows * cols;
        int64_t i1 = i0 + TILE < rows ? i0 + TILE : rows;
        for (int64_t j0 = 0; j0 < cols; j0 += TILE) {
            int64_t j1 = j0 + TILE < cols ? j0 + TILE : cols;
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = j0; j < j1; j++) dst[j * rows + i] = src[i * cols + j];
        }
    }
}

/* ---- sliding windows ---- */

/* The KK entries of channel C's patch at output position L of image N into DST, STEP
 * apart. */
static void SFX(patch)(const WinGeo *g, REAL *dst, int64_t step, const REAL *x, int64_t n,
                       int64_t c, int64_t l, REAL outside)
{
    const IrWindow *w = &g->win;
    const REAL *src = x + (n * g->c + c) * g->h * g->w;
    int64_t oh = l / g->ow, ow = l % g->ow;
    for (int64_t ki = 0; ki < w->kernel[0]; ki++) {
        int64_t h = oh * w->stride[0] - w->pad[0] + ki * w->dilation[0];
        for (int64_t kj = 0; kj < w->kernel[1]; kj++) {
            int64_t v = ow * w->stride[1] - w->pad[1] + kj * w->dilation[1];
            bool in = h >= 0 && h < g->h && v >= 0 && v < g->w;
            dst[(ki * w->kernel[1] + kj) * step] = in ? src[h * g->w + v] : outside;
        }
    }
}

/* Patches of image X (UNFOLD): every entry is the pixel its window position reads, or
 * the node's value outside the image. A task per row of the rows layout (its channels'
 * patches side by side), per plane of pooling's. */
static void SFX(unfold)(const IrNode *node, REAL *out, const REAL *x, const Dims *image)
{
    WinGeo g = win_geo(node, image);
    REAL outside = (REAL)node->value;
    int64_t positions = g.oh * g.ow, groups = g.rows ? g.win.groups : 1;
    int64_t cg = g.c / groups, tasks = g.rows ? g.n * groups * positions : g.n * g.c;
#pragma omp parallel for schedule(static) if (g.n * g.c * positions * g.kk >= PAR_MIN)
    for (int64_t t = 0; t < tasks; t++) {
        if (g.rows) {   /* row (n, group, l): cg patches of kk */
            int64_t l = t % positions, ng = t / positions, n = ng / groups;
            for (int64_t c = 0; c < cg; c++)
                SFX(patch)(&g, out + t * cg * g.kk + c * g.kk, 1, x, n, ng % groups * cg + c, l, outside);
        } else {        /* plane (n, c): [KK, OH, OW] */
            for (int64_t l = 0; l < positions; l++)
                SFX(patch)(&g, out + t * g.kk * positions + l, positions, x, t / g.c, t % g.c, l, outside);
        }
    }
}

/* Adds the KK entries SRC (STEP apart) of the patch at output position L to the pixels of
 * plane ACC they read. */
static void SFX(unpatch)(const WinGeo *g, double *acc, const REAL *src, int64_t step, int64_t l)
{
    const IrWindow *w = &g->win;
    int64_t oh = l / g->ow, ow = l % g->ow;
    for (int64_t ki = 0; ki < w->kernel[0]; ki++) {
        int64_t h = oh * w->stride[0] - w->pad[0] + ki * w->dilation[0];
        if (h < 0 || h >= g->h) continue;
        for (int64_t kj = 0; kj < w->kernel[1]; kj++) {
            int64_t v = ow * w->stride[1] - w->pad[1] + kj * w->dilation[1];
            if (v >= 0 && v < g->w) acc[h * g->w + v] += src[(ki * w->kernel[1] + kj) * step];
        }
    }
}

/* The image whose patches X holds (FOLD): each entry is added to the pixel it read (in
 * double; entries outside the image go nowhere), reading X in order: a task per image
 * and group of the rows layout, per plane of pooling's. Each pixel sums its entries by
 * position, then kernel offset, whatever the thread count. */
static void SFX(fold)(const IrNode *node, REAL *out, const REAL *x, const Dims *image)
{
    WinGeo g = win_geo(node, image);
    int64_t plane = g.h * g.w, positions = g.oh * g.ow, groups = g.rows ? g.win.groups : 1;
    int64_t cg = g.rows ? g.c / groups : 1, tasks = g.n * g.c / cg;
#pragma omp parallel if (g.n * g.c * positions * g.kk >= PAR_MIN)
    {
        double *acc = xmalloc((size_t)(cg * plane > 0 ? cg * plane : 1) * sizeof *acc);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; t++) {   /* planes [t * cg, (t + 1) * cg) */
            memset(acc, 0, (size_t)(cg * plane) * sizeof *acc);
            const REAL *src = x + t * cg * positions * g.kk;
            for (int64_t l = 0; l < positions; l++)
                for (int64_t c = 0; c < cg; c++)
                    if (g.rows) SFX(unpatch)(&g, acc + c * plane, src + (l * cg + c) * g.kk, 1, l);
                    else SFX(unpatch)(&g, acc, src + l, positions, l);
            for (int64_t i = 0; i < cg * plane; i++) out[t * cg * plane + i] = (REAL)acc[i];
        }
        free(acc);
    }
}

/* ---- matrix products ---- */

/* One BLAS call: C[m, n] (rows LDC apart) = op(A) op(B). A single row (one position's
 * decode) is B times it, a GEMV, which does not pack B as GEMM would. */
static void SFX(blas_product)(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const REAL *a,
                              int lda, const REAL *b, int ldb, REAL *c, int64_t ldc)
{
    if (m == 1)
        GEMV(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, (int)(tb ? n : k), (int)(tb ? k : n),
             1, b, ldb, a, 1, 0, c, 1);
    else
        GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
             (int)m, (int)n, (int)k, 1, a, lda, b, ldb, 0, c, (int)ldc);
}

/* Whether BLAS can take COUNT products C[m, n] = op(A) op(B), the Cs one after another: 0
 * when it can and there is work, 1 when the Cs are empty or zero (done), -1 after an
 * error. */
static int SFX(gemm_check)(int64_t count, int64_t m, int64_t n, int64_t k, REAL *c)
{
    if (m == 0 || n == 0) return 1;
    if (k == 0) {
        memset(c, 0, (size_t)(count * m * n) * sizeof(REAL));
        return 1;
    }
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
        cgc_error("matrix product of %lld x %lld by %lld x %lld is too large for BLAS",
                  (long long)m, (long long)k, (long long)k, (long long)n);
        return -1;
    }
    return blas_load() ? 0 : -1;
}

/* C[m, n] = op(A) op(B) through cblas, timed. The larger of m and n is cut into parts
 * that a parallel loop hands to single-threaded BLAS calls: one thread pool (ours)
 * instead of OpenBLAS's and OpenMP's fighting over the cores. The parts depend on the
 * shape only, so the bits do not depend on the thread count. */
static int SFX(gemm)(CpuExec *e, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                     const REAL *a, const REAL *b, REAL *c)
{
    int ok = SFX(gemm_check)(1, m, n, k, c);
    if (ok != 0) return ok < 0 ? -1 : 0;
    GemmSplit sp = gemm_split(m, n, k);
    int lda = (int)(ta ? m : k), ldb = (int)(tb ? k : n);
    double t0 = clock_seconds();
#pragma omp parallel for schedule(static) if (sp.parts > 1) num_threads(blas.threads)
    for (int part = 0; part < sp.parts; part++) {
        int64_t lo = part * sp.size, hi = lo + sp.size < sp.total ? lo + sp.size : sp.total;
        /* a row block of C takes rows of op(A); a column block takes columns of op(B) */
        const REAL *pa = sp.rows ? a + (ta ? lo : lo * k) : a;
        const REAL *pb = sp.rows ? b : b + (tb ? lo * k : lo);
        REAL *pc = c + (sp.rows ? lo * n : lo);
        SFX(blas_product)(ta, tb, sp.rows ? hi - lo : m, sp.rows ? n : hi - lo, k, pa, lda, pb,
                          ldb, pc, n);
    }
    e->gemm_seconds += clock_seconds() - t0;
    return 0;
}

/* BATCHES products of [m, k] by [k, n], each too small to cut (gemm_split), their
 * operands where walk W puts them: the threads take whole products, one BLAS call each.
 * Each product's bits are gemm's for it. */
static int SFX(gemm_batches)(CpuExec *e, const Walk *w, int64_t batches, bool ta, bool tb,
                             int64_t m, int64_t n, int64_t k, const REAL *a, const REAL *b,
                             REAL *out)
{
    int ok = SFX(gemm_check)(batches, m, n, k, out);
    if (ok != 0) return ok < 0 ? -1 : 0;
    int lda = (int)(ta ? m : k), ldb = (int)(tb ? k : n);
    double t0 = clock_seconds();
#pragma omp parallel for schedule(static) num_threads(blas.threads)
    for (int64_t i = 0; i < batches; i++) {
        int64_t off[IR_MAX_IN];
        walk_offsets(w, i, off);
        SFX(blas_product)(ta, tb, m, n, k, a + off[0] * m * k, lda, b + off[1] * k * n, ldb,
                          out + i * m * n, n);
    }
    e->gemm_seconds += clock_seconds() - t0;
    return 0;
}

/* A copy of X rounded to tf32, as tensor cores read their inputs. */
static const REAL *SFX(tf32_copy)(Buf *buf, const REAL *x, int64_t n)
{
    REAL *c = buf_reserve(buf, (size_t)n * sizeof(REAL));
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) c[i] = ROUND(x[i], &FMT_TF32);
    return c;
}

/* Batched a @ b over the last two dimensions, leading dimensions broadcast. When b is
 * one matrix and a is not transposed, a's batches are consecutive rows and the whole
 * product is a single GEMM (the usual [N, in] @ W^T of a linear layer). */
static int SFX(matmul)(CpuExec *e, const IrGraph *g, const IrNode *node, const Dims *od,
                       REAL *out)
{
    Dims ad = bind_shape(&g->nodes[node->in[0]].shape, e->symvals);
    Dims bd = bind_shape(&g->nodes[node->in[1]].shape, e->symvals);
    const REAL *a = SFX(value)(e, g, node->in[0]), *b = SFX(value)(e, g, node->in[1]);
    bool ta = node->flags & IR_MATMUL_TRANS_A, tb = node->flags & IR_MATMUL_TRANS_B;
    int64_t m = od->d[od->rank - 2], n = od->d[od->rank - 1];
    int64_t k = ad.d[ad.rank - (ta ? 2 : 1)];
    if (node->flags & IR_MATMUL_TF32) {
        a = SFX(tf32_copy)(&e->scratch[0], a, dims_numel(&ad));
        b = SFX(tf32_copy)(&e->scratch[1], b, dims_numel(&bd));
    }
    if (node->flags & IR_MATMUL_BATCH_SUM) {   /* [batch * k, m]^T @ [batch * k, n] */
        Dims lead = dims_prefix(&ad, 2);
        return SFX(gemm)(e, true, false, m, n, k * dims_numel(&lead), a, b, out);
    }
    Dims ob = dims_prefix(od, 2), batch_dims[2] = { dims_prefix(&ad, 2), dims_prefix(&bd, 2) };
    int64_t batches = dims_numel(&ob);
    if (batches == 0) return 0;
    if (dims_numel(&batch_dims[1]) == 1 && !ta && dims_numel(&batch_dims[0]) == batches)
        return SFX(gemm)(e, ta, tb, batches * m, n, k, a, b, out);
    Walk w;
    walk_plan(&w, &ob, 2, batch_dims);
    if (gemm_split(m, n, k).parts == 1)
        return SFX(gemm_batches)(e, &w, batches, ta, tb, m, n, k, a, b, out);
    for (int64_t i = 0; i < batches; i++) {
        int64_t off[IR_MAX_IN];
        walk_offsets(&w, i, off);
        if (SFX(gemm)(e, ta, tb, m, n, k, a + off[0] * m * k, b + off[1] * k * n,
                      out + i * m * n) != 0)
            return -1;
    }
    return 0;
}

/* ---- dropout ---- */

/* Keeps each element with probability 1 - p, scaled by 1/(1 - p); the mask is a pure
 * function of (seed, stream, counter, element), so the backward pass redraws it. */
static void SFX(dropout)(const CpuExec *e, const IrNode *node, REAL *out, const REAL *x,
                         double counter_value, int64_t n)
{
    double p = node->value;
    uint64_t seed = e->p->cfg.seed, counter = to_counter(counter_value);
    REAL scale = (REAL)(1.0 / (1.0 - p));
    int64_t rows = e->symvals[0];
    bool batched = ir_shape_is_batched(&node->shape) && rows > 0;
    uint64_t first = batched ? (uint64_t)(e->feed->first_row * (n / rows)) : 0;
    /* Each element costs a Philox block: worth threads well below PAR_MIN. */
#pragma omp parallel for schedule(static) if (n >= PAR_MIN / 16)
    for (int64_t i = 0; i < n; i++)
        out[i] = rng_dropout_keep(seed, node->index, counter, first + (uint64_t)i, p) ? x[i] * scale : 0;
}

/* ---- one node ---- */

/* Leaves and aliases (a same-dtype RESHAPE, an UNFOLD's twin: ir_unfold_twin), whose
 * value is placed rather than computed. True when done. */
static bool SFX(place)(CpuExec *e, const IrGraph *g, const IrNode *node, Slot *s)
{
    if (ir_node_reads_tensor(node) >= 0) {
        CGC_ASSERT(node->index < e->p->ntensors);
        s->val = e->tensors[node->index];
        return true;
    }
    if (ir_node_input(node) >= 0 && node->dtype == DT_I32) {
        const void *src = e->feed->inputs[node->index];
        size_t bytes = (size_t)s->n * sizeof(int32_t);
        CGC_ASSERT(src || bytes == 0);
        s->val = slot_reserve(e, &s->own, bytes);
        if (bytes) memcpy(s->val, src, bytes);
        return true;
    }
    if (ir_node_fuse(node) == IR_FUSE_VIEW && g->nodes[node->in[0]].dtype == node->dtype) {
        s->val = e->slots[node->in[0]].val;
        return true;
    }
    int twin = ir_unfold_twin(g, (int)(node - g->nodes));
    if (twin >= 0) {   /* kept alive for this reader by release_plan */
        s->val = e->slots[twin].val;
        return true;
    }
    return false;
}

static void SFX(input)(CpuExec *e, const IrNode *node, REAL *out, int64_t n)
{
    CGC_ASSERT(node->index >= 0 && node->index < e->p->ninputs);
    const float *src = e->feed->inputs[node->index];
    CGC_ASSERT(src || n == 0);
    for (int64_t i = 0; i < n; i++) out[i] = src[i];
}

static int SFX(elementwise_node)(CpuExec *e, const IrGraph *g, const IrNode *node,
                                 const Dims *od, REAL *out)
{
    CGC_ASSERT(SFX(elementwise_span)[node->op]);
    SFX(elementwise)(e, g, node, od, out, SFX(elementwise_span)[node->op]);
    return 0;
}

static int SFX(runtime_scalar)(CpuExec *e, const IrNode *node, REAL *out)
{
    CGC_ASSERT(node->index >= 0 && node->index < IR_NUM_RUNTIME);
    out[0] = (REAL)e->feed->runtime[node->index];
    return 0;
}

/* NODE's value into OUT, by its op's family (ops.def). READ, and some INPUTs and RESHAPEs,
 * are placed instead (SFX(place)). */
static int SFX(compute)(CpuExec *e, const IrGraph *g, const IrNode *node, const Dims *od,
                        REAL *out)
{
    int64_t n = dims_numel(od);
    Dims xd = node->nin > 0 ? bind_shape(&g->nodes[node->in[0]].shape, e->symvals) : *od;
    const REAL *x = node->nin > 0 ? SFX(value)(e, g, node->in[0]) : NULL;
    switch (ir_op_info[node->op].family) {
    case IR_FAMILY_ELEMENTWISE: return SFX(elementwise_node)(e, g, node, od, out);
    case IR_FAMILY_REDUCE: SFX(reduce)(e, node->op, out, x, axis_plan(&xd, node->axis)); return 0;
    case IR_FAMILY_MATMUL: return SFX(matmul)(e, g, node, od, out);
    case IR_FAMILY_INPUT: SFX(input)(e, node, out, n); return 0;
    case IR_FAMILY_READ: CGC_INTERNAL("a READ is placed, never computed");
    case IR_FAMILY_CONST: out[0] = (REAL)node->value; return 0;
    case IR_FAMILY_RUNTIME: return SFX(runtime_scalar)(e, node, out);
    case IR_FAMILY_RESHAPE: memcpy(out, x, (size_t)n * sizeof(REAL)); return 0;
    case IR_FAMILY_BROADCAST: SFX(elementwise)(e, g, node, od, out, SFX(broadcast_span)); return 0;
    case IR_FAMILY_REDUCE_TO: SFX(reduce_to)(e, out, x, &xd, od); return 0;
    case IR_FAMILY_TRANSPOSE: {
        Dims batch = dims_prefix(&xd, 2);
        SFX(transpose)(out, x, dims_numel(&batch), xd.d[xd.rank - 2], xd.d[xd.rank - 1]);
        return 0;
    }
    case IR_FAMILY_PERMUTE: SFX(permute)(node, out, x, &xd); return 0;
    case IR_FAMILY_EMBED: return SFX(embed)(e, g, node, out);
    case IR_FAMILY_ARANGE:
        for (int64_t i = 0; i < n; i++) out[i] = (REAL)i;
        return 0;
    case IR_FAMILY_CAUSAL_MASK: SFX(causal_mask)(node, out, x, &xd); return 0;
    case IR_FAMILY_EMBED_GRAD: SFX(embed_grad)(e, g, node, od, out); return 0;
    case IR_FAMILY_DROPOUT:
        SFX(dropout)(e, node, out, x, SFX(value)(e, g, node->in[1])[0], n);
        return 0;
    case IR_FAMILY_SOFTMAX: SFX(softmax)(node->op, out, x, axis_plan(&xd, node->axis)); return 0;
    case IR_FAMILY_SOFTMAX_GRAD:
        SFX(softmax_grad)(node->op, out, x, SFX(value)(e, g, node->in[1]), axis_plan(&xd, node->axis));
        return 0;
    case IR_FAMILY_CROSS_ENTROPY: case IR_FAMILY_CE_GRAD: case IR_FAMILY_COUNT_CORRECT:
        return SFX(loss_op)(e, g, node, out);
    case IR_FAMILY_ASSIGN: out[0] = 0; return 0;   /* the copy happens after the graph */
    case IR_FAMILY_WINDOW:
        if (ir_op_info[node->op].shape == IR_SHAPE_WINDOW) SFX(unfold)(node, out, x, &xd);
        else SFX(fold)(node, out, x, od);
        return 0;
    case IR_FAMILY_COLLECTIVE: return collective_value(e, g, (int)(node - g->nodes), out);
    case IR_FAMILY_MODE_SWITCH: break;   /* resolved by training lowering */
    }
    CGC_INTERNAL("the CPU executor has no kernel for %s", ir_op_info[node->op].name);
}

/* Computes node ID of G into its slot. Returns 0, or -1 after an error. */
static int SFX(exec_node)(CpuExec *e, const IrGraph *g, int id)
{
    const IrNode *node = &g->nodes[id];
    Slot *s = &e->slots[id];
    Dims od = bind_shape(&node->shape, e->symvals);
    s->n = dims_numel(&od);
    if (SFX(place)(e, g, node, s)) return 0;
    REAL *out = SFX(result)(e, node, s);
    if (SFX(compute)(e, g, node, &od, out) != 0) return -1;
    SFX(finish)(e, g, node, s);
    return 0;
}

#undef REAL
#undef SFX
#undef MATH
#undef KERNEL_ERF
#undef KERNEL_EXP
#undef GEMM
#undef GEMV
#undef ROUND
