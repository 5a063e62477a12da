/* compiler/autodiff.c: reverse-mode differentiation of the graph IR.
 *
 * The backward pass is built by the compiler, not written per model: given a scalar loss
 * node, autodiff() appends to the same graph the nodes that compute d loss / d T for every
 * persistent tensor T the loss reads. It is textbook reverse mode over a graph already in
 * topological order:
 *   1. mark the "active" nodes: those on a differentiable path from a READ of a persistent
 *      tensor to the loss (gradients of anything else are never built, so a branch fed
 *      only by data costs nothing);
 *   2. walk the nodes from the loss down to 0; each active node with an accumulated
 *      gradient ("adjoint") applies its op's derivative rule (ir.h's table, column
 *      "derivative", which this file must follow) and adds the result to the adjoints of
 *      its active inputs;
 *   3. the adjoints of the READ nodes, cast to f32, become the tensors' gradients (a
 *      tensor read twice gets the sum).
 * Every contribution is summed down to its input's shape (undoing broadcasting) and
 * stored in its input's dtype, as torch keeps a gradient in its tensor's dtype. Gradient
 * nodes carry the location of the forward node they differentiate, so kernels and
 * runtime errors in the backward pass still name a .net line.
 */
#include <math.h>
#include <stdlib.h>

#include "passes.h"

typedef struct Autodiff {
    IrGraph *g;
    int nforward;   /* nodes of G before any gradient node was appended */
    bool *active;   /* per forward node: its gradient is needed */
    int *adj;       /* per forward node: id of its accumulated gradient, or -1 */
} Autodiff;

/* --- which edges carry a gradient --- */

/* Ops whose derivative is zero everywhere it exists: they stop propagation. */
static bool op_has_zero_derivative(IrOp op)
{
    switch (op) {
    case IR_INPUT: case IR_READ: case IR_CONST: case IR_RUNTIME:
    case IR_SIGN: case IR_FLOOR: case IR_NONFINITE: case IR_LESS: case IR_EQUAL:
    case IR_COUNT_CORRECT: case IR_ASSIGN:
        return true;
    default:
        return false;
    }
}

/* Whether the gradient flows from node N into its input number SLOT: never into
 * conditions, counters and labels, nor into integers. */
static bool edge_carries_gradient(const IrGraph *g, const IrNode *n, int slot)
{
    if (op_has_zero_derivative(n->op))
        return false;
    if (n->op == IR_SELECT && slot == 0)
        return false;
    if ((n->op == IR_DROPOUT || n->op == IR_CROSS_ENTROPY) && slot == 1)
        return false;
    if (n->op == IR_CE_GRAD && slot == 2)
        return false;
    return ir_dtype_is_float(g->nodes[n->in[slot]].dtype);
}

/* Step 1: active = depends on a persistent tensor and reaches the loss. */
static void mark_active(Autodiff *ad, int loss)
{
    const IrGraph *g = ad->g;
    bool *depends = xcalloc((size_t)loss + 1, sizeof *depends);
    for (int i = 0; i <= loss; i++) {
        const IrNode *n = &g->nodes[i];
        depends[i] = n->op == IR_READ;
        for (int s = 0; s < n->nin; s++)
            if (edge_carries_gradient(g, n, s) && depends[n->in[s]])
                depends[i] = true;
    }
    bool *reaches = xcalloc((size_t)loss + 1, sizeof *reaches);
    reaches[loss] = true;
    for (int i = loss; i >= 0; i--) {
        const IrNode *n = &g->nodes[i];
        if (!reaches[i])
            continue;
        for (int s = 0; s < n->nin; s++)
            if (edge_carries_gradient(g, n, s))
                reaches[n->in[s]] = true;
    }
    for (int i = 0; i <= loss; i++)
        ad->active[i] = depends[i] && reaches[i];
    free(depends);
    free(reaches);
}

/* --- small builders --- */

/* Scalar V in dtype T, so that a constant factor does not promote a half gradient. */
static int scalar(Autodiff *ad, double v, DType t, SrcLoc loc)
{
    return ir_cast(ad->g, ir_const(ad->g, v, loc), t, loc);
}

static int broadcast_to(Autodiff *ad, int x, Shape s, SrcLoc loc)
{
    if (ir_shape_equal(&ad->g->nodes[x].shape, &s))
        return x;
    return ir_broadcast(ad->g, x, s, loc);
}

/* D has the shape of a reduction of SHAPE over AXIS; stretch it back to SHAPE. */
static int unreduce(Autodiff *ad, int d, Shape shape, int axis, SrcLoc loc)
{
    if (axis != IR_AXIS_ALL)
        d = ir_reshape(ad->g, d, ir_shape_keepdim(&shape, axis), loc);
    return broadcast_to(ad, d, shape, loc);
}

/* Number of elements a reduction of SHAPE over AXIS folds into one, as a scalar node.
 * Static sizes make a constant; a symbolic size (the batch) is only known when the graph
 * runs, so it is counted there: the sum of ones over a tensor of just those dimensions. */
static int reduced_count(Autodiff *ad, Shape shape, int axis, SrcLoc loc)
{
    double fixed = 1;
    Shape symbolic = {0};
    for (int k = 0; k < shape.rank; k++) {
        if (axis != IR_AXIS_ALL && k != axis)
            continue;
        if (IR_DIM_IS_SYM(shape.dim[k]))
            symbolic.dim[symbolic.rank++] = shape.dim[k];
        else
            fixed *= (double)shape.dim[k];
    }
    int count = ir_const(ad->g, fixed, loc);
    if (symbolic.rank == 0)
        return count;
    int ones = ir_broadcast(ad->g, ir_const(ad->g, 1, loc), symbolic, loc);
    int n = ir_reduce(ad->g, IR_SUM, ones, IR_AXIS_ALL, loc);
    return fixed == 1 ? n : ir_binary(ad->g, IR_MUL, count, n, loc);
}

/* Adds contribution C to the adjoint of node X, summed to X's shape, in X's dtype. */
static void accumulate(Autodiff *ad, int x, int c, SrcLoc loc)
{
    if (!ad->active[x])
        return;
    IrNode in = ad->g->nodes[x];
    c = ir_reduce_to(ad->g, c, in.shape, loc);
    c = ir_cast(ad->g, c, in.dtype, loc);
    ad->adj[x] = ad->adj[x] < 0 ? c : ir_binary(ad->g, IR_ADD, ad->adj[x], c, loc);
}

/* --- derivative rules, one function per op class (ir.h's "derivative" column) --- */

/* The unary elementwise ops; Y is the node's own value, X its input. */
static int unary_grad(Autodiff *ad, const IrNode *n, int y, int d)
{
    IrGraph *g = ad->g;
    SrcLoc loc = n->loc;
    int x = n->in[0];
    DType t = n->dtype;
    switch (n->op) {
    case IR_NEG: return ir_unary(g, IR_NEG, d, loc);
    case IR_EXP: return ir_binary(g, IR_MUL, d, y, loc);
    case IR_LOG: return ir_binary(g, IR_DIV, d, x, loc);
    case IR_SQRT: /* d / (2y) */
        return ir_binary(g, IR_DIV, d, ir_binary(g, IR_MUL, scalar(ad, 2, t, loc), y, loc), loc);
    case IR_RSQRT: { /* -d * y^3 / 2 */
        int y3 = ir_binary(g, IR_MUL, ir_binary(g, IR_MUL, y, y, loc), y, loc);
        return ir_binary(g, IR_MUL, ir_binary(g, IR_MUL, d, y3, loc), scalar(ad, -0.5, t, loc), loc);
    }
    case IR_ABS: return ir_binary(g, IR_MUL, d, ir_unary(g, IR_SIGN, x, loc), loc);
    /* from the output: relu(x) > 0 exactly where x > 0, and the pre-activation need not
     * be kept (with the relu in a GEMM epilogue, it is never stored) */
    case IR_RELU: return ir_binary(g, IR_RELU_GRAD, d, y, loc);
    case IR_GELU: return ir_binary(g, IR_GELU_GRAD, d, x, loc);
    case IR_GELU_TANH: return ir_binary(g, IR_GELU_TANH_GRAD, d, x, loc);
    case IR_TANH: return ir_binary(g, IR_TANH_GRAD, d, y, loc);
    case IR_SIGMOID: return ir_binary(g, IR_SIGMOID_GRAD, d, y, loc);
    case IR_SILU: return ir_binary(g, IR_SILU_GRAD, d, x, loc);
    case IR_COS: { /* -d * sin x, with sin x = cos(x - pi/2): the IR has no SIN */
        int shifted = ir_binary(g, IR_SUB, x, scalar(ad, M_PI / 2, t, loc), loc);
        int sin = ir_unary(g, IR_COS, shifted, loc);
        return ir_unary(g, IR_NEG, ir_binary(g, IR_MUL, d, sin, loc), loc);
    }
    case IR_CAST: return d;   /* accumulate() casts it back to the input's dtype */
    default: CGC_INTERNAL("autodiff: no derivative for op %s", ir_op_info[n->op].name);
    }
}

/* MAXIMUM and MINIMUM: the gradient goes to the winner, to A on ties. */
static void minmax_grad(Autodiff *ad, const IrNode *n, int d)
{
    IrGraph *g = ad->g;
    int a = n->in[0], b = n->in[1];
    int b_wins = n->op == IR_MAXIMUM ? ir_binary(g, IR_LESS, a, b, n->loc)
                                     : ir_binary(g, IR_LESS, b, a, n->loc);
    int zero = scalar(ad, 0, n->dtype, n->loc);
    if (ad->active[a])
        accumulate(ad, a, ir_select(g, b_wins, zero, d, n->loc), n->loc);
    if (ad->active[b])
        accumulate(ad, b, ir_select(g, b_wins, d, zero, n->loc), n->loc);
}

/* The broadcasting binary ops; accumulate() sums each side down to its shape. */
static void binary_grad(Autodiff *ad, const IrNode *n, int y, int d)
{
    IrGraph *g = ad->g;
    SrcLoc loc = n->loc;
    int a = n->in[0], b = n->in[1];
    bool da = ad->active[a], db = ad->active[b];
    switch (n->op) {
    case IR_ADD:
        if (da) accumulate(ad, a, d, loc);
        if (db) accumulate(ad, b, d, loc);
        return;
    case IR_SUB:
        if (da) accumulate(ad, a, d, loc);
        if (db) accumulate(ad, b, ir_unary(g, IR_NEG, d, loc), loc);
        return;
    case IR_MUL:
        if (da) accumulate(ad, a, ir_binary(g, IR_MUL, d, b, loc), loc);
        if (db) accumulate(ad, b, ir_binary(g, IR_MUL, d, a, loc), loc);
        return;
    case IR_DIV: { /* d/b and -d*a/b^2 = -(d/b) * y */
        int d_over_b = ir_binary(g, IR_DIV, d, b, loc);
        if (da) accumulate(ad, a, d_over_b, loc);
        if (db) accumulate(ad, b, ir_unary(g, IR_NEG, ir_binary(g, IR_MUL, d_over_b, y, loc), loc), loc);
        return;
    }
    case IR_POW: /* d * b * a^(b-1) and d * y * ln a */
        if (da) {
            int b_minus_1 = ir_binary(g, IR_SUB, b, scalar(ad, 1, g->nodes[b].dtype, loc), loc);
            int slope = ir_binary(g, IR_MUL, b, ir_binary(g, IR_POW, a, b_minus_1, loc), loc);
            accumulate(ad, a, ir_binary(g, IR_MUL, d, slope, loc), loc);
        }
        if (db) {
            int slope = ir_binary(g, IR_MUL, y, ir_unary(g, IR_LOG, a, loc), loc);
            accumulate(ad, b, ir_binary(g, IR_MUL, d, slope, loc), loc);
        }
        return;
    case IR_MAXIMUM: case IR_MINIMUM:
        minmax_grad(ad, n, d);
        return;
    default:
        CGC_INTERNAL("autodiff: no derivative for op %s", ir_op_info[n->op].name);
    }
}

/* SELECT: the branch taken gets d, the other 0; the condition gets nothing. */
static void select_grad(Autodiff *ad, const IrNode *n, int d)
{
    int c = n->in[0], a = n->in[1], b = n->in[2];
    int zero = scalar(ad, 0, n->dtype, n->loc);
    if (ad->active[a])
        accumulate(ad, a, ir_select(ad->g, c, d, zero, n->loc), n->loc);
    if (ad->active[b])
        accumulate(ad, b, ir_select(ad->g, c, zero, d, n->loc), n->loc);
}

/* SUM, MEAN, MAX over one axis or all of them. MAX splits d evenly among the elements
 * equal to the maximum, as torch.amax does. */
static int reduce_grad(Autodiff *ad, const IrNode *n, int y, int d)
{
    IrGraph *g = ad->g;
    SrcLoc loc = n->loc;
    int x = n->in[0];
    Shape xs = g->nodes[x].shape;
    switch (n->op) {
    case IR_SUM:
        return unreduce(ad, d, xs, n->axis, loc);
    case IR_MEAN: {
        int count = ir_cast(g, reduced_count(ad, xs, n->axis, loc), n->dtype, loc);
        return unreduce(ad, ir_binary(g, IR_DIV, d, count, loc), xs, n->axis, loc);
    }
    case IR_MAX: {
        int mask = ir_binary(g, IR_EQUAL, x, unreduce(ad, y, xs, n->axis, loc), loc);
        int ties = ir_reduce(g, IR_SUM, mask, n->axis, loc);
        int share = unreduce(ad, ir_binary(g, IR_DIV, d, ties, loc), xs, n->axis, loc);
        return ir_binary(g, IR_MUL, share, mask, loc);
    }
    default:
        CGC_INTERNAL("autodiff: no derivative for op %s", ir_op_info[n->op].name);
    }
}

static int shape_grad(Autodiff *ad, const IrNode *n, int d)
{
    IrGraph *g = ad->g;
    Shape xs = g->nodes[n->in[0]].shape;
    switch (n->op) {
    case IR_RESHAPE: return ir_reshape(g, d, xs, n->loc);
    case IR_BROADCAST: return d;   /* accumulate() reduces it to the input's shape */
    case IR_REDUCE_TO: return broadcast_to(ad, d, xs, n->loc);
    case IR_TRANSPOSE: return ir_transpose(g, d, n->loc);
    default: CGC_INTERNAL("autodiff: no derivative for op %s", ir_op_info[n->op].name);
    }
}

/* MATMUL y = op(A) @ op(B), op() transposing when the flag says so. With a = op(A) and
 * b = op(B): da = d @ b^T and db = a^T @ d. When A itself is transposed, dA = da^T =
 * b @ d^T; likewise dB = db^T = d^T @ a. Each case is one matmul with the right flags,
 * so no transpose is materialised; the tf32 bit is kept. accumulate() sums over the batch
 * dimensions an operand was broadcast along. */
static void matmul_grad(Autodiff *ad, const IrNode *n, int d)
{
    int A = n->in[0], B = n->in[1];
    bool ta = n->flags & IR_MATMUL_TRANS_A, tb = n->flags & IR_MATMUL_TRANS_B;
    int tf32 = n->flags & IR_MATMUL_TF32;
    enum { TA = IR_MATMUL_TRANS_A, TB = IR_MATMUL_TRANS_B };
    if (ad->active[A]) {
        int dA = !ta ? ir_matmul(ad->g, d, B, (tb ? 0 : TB) | tf32, n->loc)   /* d @ b^T */
                     : ir_matmul(ad->g, B, d, (tb ? TA : 0) | TB | tf32, n->loc); /* b @ d^T */
        accumulate(ad, A, dA, n->loc);
    }
    if (ad->active[B]) {
        int dB = !tb ? ir_matmul(ad->g, A, d, (ta ? 0 : TA) | tf32, n->loc)   /* a^T @ d */
                     : ir_matmul(ad->g, d, A, TA | (ta ? TB : 0) | tf32, n->loc); /* d^T @ a */
        accumulate(ad, B, dB, n->loc);
    }
}

/* Softmax family, dropout and the loss. */
static int other_grad(Autodiff *ad, const IrNode *n, int y, int d)
{
    IrGraph *g = ad->g;
    switch (n->op) {
    case IR_SOFTMAX:
        return ir_softmax_grad(g, IR_SOFTMAX_GRAD, d, y, n->axis, n->loc);
    case IR_LOG_SOFTMAX:
        return ir_softmax_grad(g, IR_LOG_SOFTMAX_GRAD, d, y, n->axis, n->loc);
    case IR_DROPOUT: /* same counter, p and stream: the same mask, drawn again */
        return ir_dropout(g, d, n->in[1], n->value, n->index, n->loc);
    case IR_CROSS_ENTROPY:
        return ir_ce_grad(g, d, n->in[0], n->in[1], n->loc);
    default:
        CGC_INTERNAL("autodiff: no derivative for op %s", ir_op_info[n->op].name);
    }
}

/* Step 2 for one node: its adjoint D flows into its inputs. */
static void backprop_node(Autodiff *ad, int id)
{
    IrNode n = ad->g->nodes[id];   /* a copy: builders may move the node array */
    int d = ad->adj[id];
    switch (ir_op_info[n.op].cls) {
    case IR_CLASS_UNARY:
        accumulate(ad, n.in[0], unary_grad(ad, &n, id, d), n.loc);
        break;
    case IR_CLASS_BINARY:
        binary_grad(ad, &n, id, d);
        break;
    case IR_CLASS_TERNARY:
        select_grad(ad, &n, d);
        break;
    case IR_CLASS_REDUCE:
        accumulate(ad, n.in[0], reduce_grad(ad, &n, id, d), n.loc);
        break;
    case IR_CLASS_SHAPE:
        accumulate(ad, n.in[0], shape_grad(ad, &n, d), n.loc);
        break;
    case IR_CLASS_MATMUL:
        matmul_grad(ad, &n, d);
        break;
    case IR_CLASS_OTHER:
        accumulate(ad, n.in[0], other_grad(ad, &n, id, d), n.loc);
        break;
    case IR_CLASS_LEAF: case IR_CLASS_EFFECT:
        break;   /* READs are collected by the caller; nothing else is active */
    }
}

/* Step 3: a tensor's gradient is the f32 sum of the adjoints of all its READs. */
static void collect_tensor_grads(Autodiff *ad, int *grads)
{
    for (int i = 0; i < ad->nforward; i++) {
        IrNode n = ad->g->nodes[i];
        if (n.op != IR_READ || !ad->active[i] || ad->adj[i] < 0)
            continue;
        int c = ir_cast(ad->g, ad->adj[i], DT_F32, n.loc);
        int *gr = &grads[n.index];
        *gr = *gr < 0 ? c : ir_binary(ad->g, IR_ADD, *gr, c, n.loc);
    }
}

void autodiff(IrGraph *g, const IrProgram *p, int loss, int dloss, int *grads)
{
    CGC_ASSERT(loss >= 0 && loss < g->nnodes && dloss >= 0 && dloss < g->nnodes);
    CGC_ASSERT(g->nodes[loss].shape.rank == 0 && ir_dtype_is_float(g->nodes[loss].dtype));
    for (int i = 0; i < p->ntensors; i++)
        grads[i] = -1;
    Autodiff ad = {.g = g, .nforward = g->nnodes};
    ad.active = xcalloc((size_t)g->nnodes, sizeof *ad.active);
    ad.adj = xmalloc((size_t)g->nnodes * sizeof *ad.adj);
    for (int i = 0; i < g->nnodes; i++)
        ad.adj[i] = -1;
    mark_active(&ad, loss);
    if (ad.active[loss]) {
        ad.adj[loss] = ir_cast(g, dloss, g->nodes[loss].dtype, g->nodes[loss].loc);
        for (int i = loss; i >= 0; i--)
            if (ad.active[i] && ad.adj[i] >= 0)
                backprop_node(&ad, i);
        collect_tensor_grads(&ad, grads);
    }
    free(ad.active);
    free(ad.adj);
}
