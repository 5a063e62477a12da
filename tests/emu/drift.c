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
    for (int k = 0; k < n->nin && additive; k++) additive = in[k].ref != NULL;
    for (int64_t i = 0; i < count; i++) {
        double sum = 0;
        for (int k = 0; k < n->nin; k++) {
            int64_t j = broadcast_source(in[k].shape, &n->shape, i, symvals);
            sum += additive ? abs_difference(&in[k], j) : in[k].drift[j];
        }
        out[i] = additive ? (float)fmin(2.0, 2 * sum / fmax(fabs(ref_out[i]), 1e-30)) : (float)(2 * sum);
    }
    return true;
}

/* MATMUL of 2-D A and B: |a'b' - ab| <= |a' - a| |b'| + |a| |b' - b| term by term, so
 * element (i, j) differs by at most the sum over p of |da_ip| |b_pj| + |a_ip| |db_pj|
 * (magnitudes the larger of the two executors'), twice that relative to the reference. */
static bool matmul_bound(const IrNode *n, const DriftInput *in, const float *ref_out,
                         const int64_t *symvals, float *out)
{
    if (n->shape.rank != 2 || in[0].shape->rank != 2 || !in[0].ref || !in[1].ref) return false;
    bool ta = n->flags & IR_MATMUL_TRANS_A, tb = n->flags & IR_MATMUL_TRANS_B;
    int64_t m = dim_value(&n->shape, 0, symvals), nn = dim_value(&n->shape, 1, symvals);
    int64_t k = dim_value(in[0].shape, ta ? 0 : 1, symvals);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < nn; j++) {
            double acc = 0;
            for (int64_t p = 0; p < k; p++) {
                int64_t a = ta ? p * m + i : i * k + p, b = tb ? j * k + p : p * nn + j;
                double da = abs_difference(&in[0], a), db = abs_difference(&in[1], b);
                if (da != 0) acc += da * magnitude(&in[1], b);
                if (db != 0) acc += magnitude(&in[0], a) * db;
            }
            out[i * nn + j] = (float)fmin(2.0, 2 * acc / fmax(fabs(ref_out[i * nn + j]), 1e-30));
        }
    return true;
}

/* SUM, MEAN and REDUCE_TO: 2 sum |d - c| over what element o sums, relative to the
 * reference's |sum| (REF_OUT); MAX: twice the largest drift. */
static bool reduction_bound(const IrNode *n, const DriftInput *x, const float *ref_out,
                            const int64_t *symvals, float *out, int64_t count)
{
    bool max = n->op == IR_MAX;
    if (!max && !x->ref) return false;
    int64_t nx = ir_numel(x->shape, symvals);
    double *acc = calloc((size_t)(count ? count : 1), sizeof *acc);
    if (!acc) return false;
    for (int64_t j = 0; j < nx; j++) {
        int64_t o = reduced_to(n, x->shape, j, symvals);
        double v = max ? x->drift[j] : abs_difference(x, j);
        acc[o] = max ? fmax(acc[o], v) : acc[o] + v;
    }
    int64_t per = count ? nx / count : 0;   /* MEAN divides its sum by this */
    for (int64_t o = 0; o < count; o++) {
        double scale = n->op == IR_MEAN && per ? 1.0 / (double)per : 1.0;
        out[o] = max ? (float)(2 * acc[o])
                     : (float)fmin(2.0, 2 * acc[o] * scale / fmax(fabs(ref_out[o]), 1e-30));
    }
    free(acc);
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
    return false;
}
