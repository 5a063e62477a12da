/* drift.c: bounds on a node's difference from the reference that its inputs explain
 * (drift.h). */
#include "tests/emu/drift.h"

#include <math.h>
#include <stdlib.h>

double drift_rel(double c, double d)
{
    if (c == d || (isnan(c) && isnan(d))) return 0;
    return fabs(d - c) / fmax(fmax(fabs(c), fabs(d)), 1e-30);
}

/* Dimension J of S under SYMVALS. */
static int64_t dim_value(const Shape *s, int j, const int64_t *symvals)
{
    Shape one = { .rank = 1, .dim = { s->dim[j] } };
    return ir_numel(&one, symvals);
}

/* The element of IN (which broadcasts to OUT, NumPy rules) that OUT's element I reads. */
static int64_t broadcast_source(const Shape *in, const Shape *out, int64_t i,
                                const int64_t *symvals)
{
    int64_t src = 0, stride = 1;
    for (int j = out->rank - 1, k = in->rank - 1; j >= 0; j--, k--) {
        int64_t n = dim_value(out, j, symvals), at = i % n;
        i /= n;
        if (k < 0) continue;
        int64_t m = dim_value(in, k, symvals);
        src += (m == 1 ? 0 : at) * stride;
        stride *= m;
    }
    return src;
}

/* The output element of reduction N (input shape XS) that input element J goes to. */
static int64_t reduced_to(const IrNode *n, const Shape *xs, int64_t j, const int64_t *symvals)
{
    if (n->op == IR_REDUCE_TO) return broadcast_source(&n->shape, xs, j, symvals);
    if (n->axis == IR_AXIS_ALL) return 0;
    int64_t inner = 1;
    for (int k = n->axis + 1; k < xs->rank; k++) inner *= dim_value(xs, k, symvals);
    int64_t len = dim_value(xs, n->axis, symvals);
    return j / (inner * len) * inner + j % inner;
}

/* The larger of X's element J on the two executors, at most (drift.h); infinite where
 * it is not known. */
static double magnitude(const DriftInput *x, int64_t j)
{
    double d = x->drift[j], c = fabs(x->ref[j]);
    if (x->dev) return fmax(c, fabs(x->dev[j]));
    return d < 1 ? c / (1 - d) : INFINITY;
}

/* The absolute difference of X's element J from the reference's, at most. */
static double abs_difference(const DriftInput *x, int64_t j)
{
    return x->drift[j] == 0 ? 0 : x->drift[j] * magnitude(x, j);
}

/* ADD and SUB: |d(a + b)| <= |da| + |db|, relative to the reference's output, so that a
 * near-cancelling sum may show a large relative difference; any other elementwise op:
 * 2x the sum of its inputs' relative drifts. */
static bool elementwise_bound(const IrNode *n, const DriftInput *in, const float *ref_out,
                              const int64_t *symvals, float *out, int64_t count)
{
    bool additive = (n->op == IR_ADD || n->op == IR_SUB) && ref_out;
    bool comparison = n->op == IR_LESS || n->op == IR_EQUAL;
    /* a half result of inputs that differ may round to the neighbouring value */
    double flip = n->dtype == DT_BF16 ? 0x1p-8 : n->dtype == DT_F16 ? 0x1p-11 : 0;
    for (int k = 0; k < n->nin && additive; k++) additive = in[k].ref != NULL;
    for (int64_t i = 0; i < count; i++) {
        double sum = 0;
        for (int k = 0; k < n->nin; k++) {
            int64_t j = broadcast_source(in[k].shape, &n->shape, i, symvals);
            sum += additive ? abs_difference(&in[k], j) : in[k].drift[j];
        }
        if (comparison) out[i] = sum > 0 ? 2.0f : 0.0f;   /* any difference may flip it */
        else out[i] = additive ? (float)fmin(2.0, 2 * sum / fmax(fabs(ref_out[i]), 1e-30)) : (float)(2 * sum);
        if (sum > 0 && !comparison) out[i] += (float)flip;
    }
    return true;
}

/* Leading (batch) dims of S, without the last two. */
static Shape lead_of(const Shape *s)
{
    Shape r = *s;
    r.rank = s->rank - 2;
    return r;
}

/* MATMUL: |a'b' - ab| <= |a' - a| |b'| + |a| |b' - b| term by term, so element (i, j) of
 * a batch differs by at most the sum over p of |da_ip| |b_pj| + |a_ip| |db_pj|
 * (magnitudes the larger of the two executors'), twice that relative to the reference.
 * An operand read as tf32 may differ by a tf32 unit (2^-10) of its magnitude besides: a
 * library may round it to nearest (as the reference does), truncate it, or multiply in
 * f32 (FAST_TF32 allows tensor cores, it does not demand them; cuDNN chooses per
 * algorithm), and a value that differs at all may round to the neighbouring tf32 value.
 * Plus the device's own order of the K additions, sqrt(K) units of f32 roundoff of
 * sum |a| |b| (as for a sum, below), and a half result's rounding to its neighbour.
 * Batches broadcast; IR_MATMUL_BATCH_SUM's terms run through every batch. */
static bool matmul_bound(const IrNode *n, const DriftInput *in, const float *ref_out,
                         const int64_t *symvals, float *out)
{
    if (!in[0].ref || !in[1].ref) return false;
    bool ta = n->flags & IR_MATMUL_TRANS_A, tb = n->flags & IR_MATMUL_TRANS_B;
    bool sum = n->flags & IR_MATMUL_BATCH_SUM;
    double tf32 = n->flags & IR_MATMUL_TF32 ? 0x1p-10 : 0;
    const Shape *as = in[0].shape, *bs = in[1].shape;
    Shape lead = lead_of(&n->shape), la = lead_of(as), lb = lead_of(bs);
    int64_t m = dim_value(&n->shape, n->shape.rank - 2, symvals);
    int64_t nn = dim_value(&n->shape, n->shape.rank - 1, symvals);
    int64_t k = dim_value(as, as->rank - (ta ? 2 : 1), symvals);
    int64_t batches = ir_numel(sum ? &la : &lead, symvals);
    int64_t per_a = m * k, per_b = k * nn;
    double rounding = sqrt((double)(sum ? batches * k : k)) * 0x1p-24;
    double flip = n->dtype == DT_BF16 ? 0x1p-8 : n->dtype == DT_F16 ? 0x1p-11 : 0;
    for (int64_t o = 0; o < ir_numel(&n->shape, symvals); o++) {
        int64_t t = o / (m * nn), i = o / nn % m, j = o % nn;
        double acc = 0, mag = 0;
        for (int64_t q = sum ? 0 : t; q < (sum ? batches : t + 1); q++) {
            int64_t oa = (sum ? q : broadcast_source(&la, &lead, q, symvals)) * per_a;
            int64_t ob = (sum ? q : broadcast_source(&lb, &lead, q, symvals)) * per_b;
            for (int64_t p = 0; p < k; p++) {
                int64_t a = oa + (ta ? p * m + i : i * k + p), b = ob + (tb ? j * k + p : p * nn + j);
                double ma = magnitude(&in[0], a), mb = magnitude(&in[1], b);
                double da = abs_difference(&in[0], a), db = abs_difference(&in[1], b);
                if (da != 0) acc += da * mb;
                if (db != 0) acc += ma * db;
                acc += 2 * tf32 * ma * mb;
                mag += ma * mb;
            }
        }
        double rel = (2 * acc + rounding * mag) / fmax(fabs(ref_out[o]), 1e-30);
        out[o] = (float)fmin(2.0, rel + (acc > 0 ? flip : 0));
    }
    return true;
}

/* SUM, MEAN and REDUCE_TO: 2 sum |d - c| over what element o sums, plus the device's own
 * rounding of an f32 sum of n terms, sqrt(n) units of roundoff of sum |x| (the random-walk
 * estimate, Higham 4.2: the worst case (n - 1) u would let a missing term pass), relative
 * to the reference's |sum| (REF_OUT), which a double sum all but cancels where batch
 * norm's gradient sums to zero; MAX: twice the largest drift. */
static bool reduction_bound(const IrNode *n, const DriftInput *x, const float *ref_out,
                            const int64_t *symvals, float *out, int64_t count)
{
    bool max = n->op == IR_MAX;
    if (!max && !x->ref) return false;
    int64_t nx = ir_numel(x->shape, symvals);
    double *acc = calloc((size_t)(count ? count : 1), sizeof *acc);
    double *mag = calloc((size_t)(count ? count : 1), sizeof *mag);
    if (!acc || !mag) return free(acc), free(mag), false;
    for (int64_t j = 0; j < nx; j++) {
        int64_t o = reduced_to(n, x->shape, j, symvals);
        double v = max ? x->drift[j] : abs_difference(x, j);
        acc[o] = max ? fmax(acc[o], v) : acc[o] + v;
        if (!max) mag[o] += magnitude(x, j);
    }
    int64_t per = count ? nx / count : 0;   /* MEAN divides its sum by this */
    double rounding = sqrt((double)per) * 0x1p-24;
    for (int64_t o = 0; o < count; o++) {
        double scale = n->op == IR_MEAN && per ? 1.0 / (double)per : 1.0;
        double diff = 2 * acc[o] + rounding * mag[o];
        out[o] = max ? (float)(2 * acc[o])
                     : (float)fmin(2.0, diff * scale / fmax(fabs(ref_out[o]), 1e-30));
    }
    free(acc), free(mag);
    return true;
}

/* The image dims of window node N: its input's (UNFOLD) or its own (FOLD). */
static void window_image(const IrNode *n, const Shape *xs, const int64_t *symvals, int64_t dims[4])
{
    const Shape *img = n->op == IR_UNFOLD ? xs : &n->shape;
    for (int k = 0; k < 4; k++) dims[k] = dim_value(img, k, symvals);
}

/* The element of PERMUTE node N's input X that its element I copies. */
static int64_t permute_source(const IrNode *n, const Shape *x, const int64_t *symvals, int64_t i)
{
    int64_t stride[IR_MAX_RANK], s = 1, at = 0;
    for (int a = x->rank - 1; a >= 0; a--) stride[a] = s, s *= dim_value(x, a, symvals);
    for (int a = x->rank - 1; a >= 0; a--) {
        int64_t len = dim_value(x, ir_perm_axis(n, a), symvals);
        at += i % len * stride[ir_perm_axis(n, a)];
        i /= len;
    }
    return at;
}

/* Copies: UNFOLD (its pixel's drift, 0 outside the image), TRANSPOSE, PERMUTE and
 * CAUSAL_MASK (0 where it writes its constant). */
static bool copy_bound(const IrNode *n, const DriftInput *x, const int64_t *symvals, float *out,
                       int64_t count)
{
    int64_t dims[4], rows = 0, cols = 0;
    if (n->op == IR_UNFOLD) window_image(n, x->shape, symvals, dims);
    else rows = dim_value(&n->shape, n->shape.rank - 2, symvals), cols = dim_value(&n->shape, n->shape.rank - 1, symvals);
    for (int64_t i = 0; i < count; i++) {
        int64_t src = n->op == IR_UNFOLD ? ir_window_source(&n->win, n->flags, dims, i)
                      : n->op == IR_PERMUTE ? permute_source(n, x->shape, symvals, i)
                      : n->op == IR_CAUSAL_MASK ? (i % cols > i / cols % rows ? -1 : i)
                      : i / (rows * cols) * rows * cols + i % cols * rows + i / cols % rows;
        out[i] = src < 0 ? 0 : x->drift[src];
    }
    return true;
}

/* FOLD: a sum per pixel of the entries that read it, bounded as reduction_bound bounds
 * one. */
static bool fold_bound(const IrNode *n, const DriftInput *x, const float *ref_out,
                       const int64_t *symvals, float *out, int64_t count)
{
    if (!x->ref || !ref_out) return false;
    int64_t dims[4], nx = ir_numel(x->shape, symvals);
    window_image(n, x->shape, symvals, dims);
    double *acc = calloc((size_t)(count ? count : 1), sizeof *acc);
    double *mag = calloc((size_t)(count ? count : 1), sizeof *mag);
    if (!acc || !mag) return free(acc), free(mag), false;
    for (int64_t e = 0; e < nx; e++) {
        int64_t p = ir_window_source(&n->win, n->flags, dims, e);
        if (p < 0) continue;
        acc[p] += abs_difference(x, e);
        mag[p] += magnitude(x, e);
    }
    double rounding = sqrt((double)n->win.kernel[0] * n->win.kernel[1]) * 0x1p-24;
    for (int64_t o = 0; o < count; o++)
        out[o] = (float)fmin(2.0, (2 * acc[o] + rounding * mag[o]) / fmax(fabs(ref_out[o]), 1e-30));
    free(acc), free(mag);
    return true;
}

/* SOFTMAX: exp(x - lse) moves by a factor of at most exp(|dx| + the row's largest |dx|)
 * (the log-sum-exp moves by at most the largest): twice |dx| + that largest, relative. */
static bool softmax_bound(const IrNode *n, const DriftInput *x, const int64_t *symvals, float *out,
                          int64_t count)
{
    if (!x->ref) return false;
    int64_t len = dim_value(&n->shape, n->axis, symvals), rows = len ? count / len : 0;
    double *worst = calloc((size_t)(rows ? rows : 1), sizeof *worst);
    if (!worst) return false;
    for (int64_t j = 0; j < count; j++) {
        int64_t r = reduced_to(n, &n->shape, j, symvals);
        worst[r] = fmax(worst[r], abs_difference(x, j));
    }
    for (int64_t i = 0; i < count; i++)
        out[i] = (float)fmin(2.0, 2 * (abs_difference(x, i) + worst[reduced_to(n, &n->shape, i, symvals)]));
    free(worst);
    return true;
}

/* SOFTMAX_GRAD: y (d - s) with s = sum over the row of d y. |ds| is at most a product's
 * sum of |dd| |y| + |d| |dy| (and the sum's rounding, as a matrix product's), and so
 * |d out| <= |dy| (|d| + |s|) + |y| (|dd| + |ds|), plus a unit of f32 roundoff of |y| (|d|
 * + |s|) for the subtraction, which cancels where d is near s; twice that relative to the
 * reference. */
static bool softmax_grad_bound(const IrNode *n, const DriftInput *in, const float *ref_out,
                               const int64_t *symvals, float *out, int64_t count)
{
    const DriftInput *d = &in[0], *y = &in[1];
    if (!d->ref || !y->ref || !ref_out) return false;
    int64_t len = dim_value(&n->shape, n->axis, symvals), rows = len ? count / len : 0;
    double *ds = calloc((size_t)(rows ? rows : 1), sizeof *ds);
    double *s = calloc((size_t)(rows ? rows : 1), sizeof *s);
    if (!ds || !s) return free(ds), free(s), false;
    for (int64_t j = 0; j < count; j++) {
        int64_t r = reduced_to(n, &n->shape, j, symvals);
        ds[r] += abs_difference(d, j) * magnitude(y, j) + magnitude(d, j) * abs_difference(y, j);
        s[r] += magnitude(d, j) * magnitude(y, j);
    }
    double rounding = sqrt((double)len) * 0x1p-24;
    for (int64_t i = 0; i < count; i++) {
        int64_t r = reduced_to(n, &n->shape, i, symvals);
        double my = magnitude(y, i), spread = magnitude(d, i) + s[r];
        double diff = abs_difference(y, i) * spread + my * (abs_difference(d, i) + ds[r] + rounding * s[r]) +
                      my * spread * 0x1p-24;
        out[i] = (float)fmin(2.0, 2 * diff / fmax(fabs(ref_out[i]), 1e-30));
    }
    free(ds), free(s);
    return true;
}

/* EMBED_GRAD: row v of the table's gradient sums the rows of d whose index is v, in
 * position order on both executors: bounded as reduction_bound bounds a sum, over the
 * positions the reference's indices send to v. */
static bool embed_grad_bound(const IrNode *n, const DriftInput *in, const float *ref_out,
                             const int64_t *symvals, float *out, int64_t count)
{
    const DriftInput *d = &in[0], *ix = &in[1];
    if (!d->ref || !ix->index || !ref_out) return false;
    int64_t rows = dim_value(&n->shape, 0, symvals), width = dim_value(&n->shape, 1, symvals);
    int64_t positions = ir_numel(ix->shape, symvals);
    double *acc = calloc((size_t)(count ? count : 1), sizeof *acc);
    double *mag = calloc((size_t)(count ? count : 1), sizeof *mag);
    int64_t *uses = calloc((size_t)(rows ? rows : 1), sizeof *uses);
    if (!acc || !mag || !uses) return free(acc), free(mag), free(uses), false;
    for (int64_t p = 0; p < positions; p++) {
        int64_t v = ix->index[p];
        if (v < 0 || v >= rows) continue;
        uses[v]++;
        for (int64_t j = 0; j < width; j++) {
            acc[v * width + j] += abs_difference(d, p * width + j);
            mag[v * width + j] += magnitude(d, p * width + j);
        }
    }
    for (int64_t o = 0; o < count; o++) {
        double rounding = sqrt((double)uses[o / width]) * 0x1p-24;
        out[o] = (float)fmin(2.0, (2 * acc[o] + rounding * mag[o]) / fmax(fabs(ref_out[o]), 1e-30));
    }
    free(acc), free(mag), free(uses);
    return true;
}

/* CROSS_ENTROPY: a row's log-sum-exp moves by at most its largest |dx|, and so does the
 * label's logit: the mean of twice each row's largest |dx|, twice that relative to the
 * reference's loss. */
/* The rows of LOGITS ([rows..., classes]) and their length. */
static int64_t logit_rows(const DriftInput *logits, const int64_t *symvals, int64_t *cols)
{
    *cols = dim_value(logits->shape, logits->shape->rank - 1, symvals);
    return *cols ? ir_numel(logits->shape, symvals) / *cols : 0;
}

static bool cross_entropy_bound(const DriftInput *logits, const float *ref_out,
                                const int64_t *symvals, float *out)
{
    if (!logits->ref || !ref_out) return false;
    int64_t cols, rows = logit_rows(logits, symvals, &cols);
    double total = 0;
    for (int64_t r = 0; r < rows; r++) {
        double worst = 0;
        for (int64_t c = 0; c < cols; c++) worst = fmax(worst, abs_difference(logits, r * cols + c));
        total += 2 * worst;
    }
    out[0] = (float)fmin(2.0, 2 * total / (double)(rows ? rows : 1) / fmax(fabs(ref_out[0]), 1e-30));
    return true;
}

/* COUNT_CORRECT: a row's prediction may change where the reference's largest logit
 * leads the next by no more than twice the row's largest absolute difference; the count
 * moves by at most the number of such rows. */
static bool count_correct_bound(const DriftInput *logits, const float *ref_out,
                                const int64_t *symvals, float *out)
{
    if (!logits->ref || !ref_out) return false;
    int64_t cols, rows = logit_rows(logits, symvals, &cols), open = 0;
    for (int64_t r = 0; r < rows; r++) {
        double top = -INFINITY, next = -INFINITY, worst = 0;
        for (int64_t c = 0; c < cols; c++) {
            double v = logits->ref[r * cols + c];
            if (v > top) next = top, top = v;
            else if (v > next) next = v;
            worst = fmax(worst, abs_difference(logits, r * cols + c));
        }
        open += top - next <= 2 * worst;
    }
    out[0] = (float)fmin(2.0, (double)open / fmax(fabs(ref_out[0]), 1.0));
    return true;
}

bool drift_bound(const IrNode *n, const DriftInput *in, const float *ref_out,
                 const int64_t *symvals, float *out)
{
    for (int k = 0; k < n->nin; k++)
        if (!in[k].drift) return false;
    int64_t count = ir_numel(&n->shape, symvals);
    if (ir_op_is_elementwise(n->op)) return elementwise_bound(n, in, ref_out, symvals, out, count);
    if (n->op == IR_RESHAPE) {
        for (int64_t i = 0; i < count; i++) out[i] = in[0].drift[i];
        return true;
    }
    if (ir_op_is_reduction(n->op)) return reduction_bound(n, &in[0], ref_out, symvals, out, count);
    if (n->op == IR_MATMUL && ref_out) return matmul_bound(n, in, ref_out, symvals, out);
    if (n->op == IR_UNFOLD || n->op == IR_TRANSPOSE || n->op == IR_PERMUTE || n->op == IR_CAUSAL_MASK)
        return copy_bound(n, &in[0], symvals, out, count);
    if (n->op == IR_FOLD) return fold_bound(n, &in[0], ref_out, symvals, out, count);
    if (n->op == IR_CROSS_ENTROPY) return cross_entropy_bound(&in[0], ref_out, symvals, out);
    if (n->op == IR_COUNT_CORRECT) return count_correct_bound(&in[0], ref_out, symvals, out);
    if (n->op == IR_SOFTMAX) return softmax_bound(n, &in[0], symvals, out, count);
    if (n->op == IR_SOFTMAX_GRAD) return softmax_grad_bound(n, in, ref_out, symvals, out, count);
    if (n->op == IR_EMBED_GRAD) return embed_grad_bound(n, in, ref_out, symvals, out, count);
    return false;
}
