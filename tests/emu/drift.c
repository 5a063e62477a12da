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

static bool elementwise_bound(const IrNode *n, const DriftInput *in, const int64_t *symvals,
                              float *out, int64_t count)
{
    for (int64_t i = 0; i < count; i++) {
        double sum = 0;
        for (int k = 0; k < n->nin; k++)
            sum += in[k].drift[broadcast_source(in[k].shape, &n->shape, i, symvals)];
        out[i] = (float)(2 * sum);
    }
    return true;
}

/* SUM, MEAN and REDUCE_TO: 2 sum |x| drift over what element o sums, relative to the
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
        double v = max ? x->drift[j] : fabs(x->ref[j]) * x->drift[j];
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
    if (ir_op_is_elementwise(n->op)) return elementwise_bound(n, in, symvals, out, count);
    if (n->op == IR_RESHAPE) {
        for (int64_t i = 0; i < count; i++) out[i] = in[0].drift[i];
        return true;
    }
    if (ir_op_is_reduction(n->op)) return reduction_bound(n, &in[0], ref_out, symvals, out, count);
    return false;
}
