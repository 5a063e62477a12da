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
 *      gradient ("adjoint") applies its op's derivative rule (compiler/ops.def, column
 *      GRAD: a generic rule, or one of the grad_ functions below) and adds the result to
 *      the adjoints of its active inputs;
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

/* Whether the gradient flows from node N into its input number SLOT: as the table's DIFF
 * says (never into conditions, counters and labels, nor through ops whose derivative is
 * zero wherever it exists), and never into integers. */
static bool edge_carries_gradient(const IrGraph *g, const IrNode *n, int slot)
{
    return (ir_op_info[n->op].diff >> slot & 1) && ir_dtype_is_float(g->nodes[n->in[slot]].dtype);
}

/* Step 1: active = depends on a persistent tensor and reaches the loss. */
static void mark_active(Autodiff *ad, int loss)
{
    const IrGraph *g = ad->g;
    bool *depends = xcalloc((size_t)loss + 1, sizeof *depends);
    for (int i = 0; i <= loss; i++) {
        const IrNode *n = &g->nodes[i];
        depends[i] = ir_node_reads_tensor(n) >= 0;
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

/* D has the shape of a reduction of SHAPE over AXIS; that shape with the axis kept (size
 * 1), which broadcasts against SHAPE. */
static int keepdim(Autodiff *ad, int d, Shape shape, int axis, SrcLoc loc)
{
    return axis == IR_AXIS_ALL ? d : ir_reshape(ad->g, d, ir_shape_keepdim(&shape, axis), loc);
}

/* D has the shape of a reduction of SHAPE over AXIS; stretch it back to SHAPE. */
static int unreduce(Autodiff *ad, int d, Shape shape, int axis, SrcLoc loc)
{
    return broadcast_to(ad, keepdim(ad, d, shape, axis, loc), shape, loc);
}

/* Number of elements a reduction of SHAPE over AXIS folds into one, as a scalar node. */
static int reduced_count(Autodiff *ad, Shape shape, int axis, SrcLoc loc)
{
    Shape reduced = {0};
    for (int k = 0; k < shape.rank; k++)
        if (axis == IR_AXIS_ALL || k == axis) reduced.dim[reduced.rank++] = shape.dim[k];
    return ir_count(ad->g, &reduced, loc);
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

/* --- derivative rules: the grad_ functions that ops.def's FN(name) names --- */

/* Contribution C flows into N's only differentiable input. */
static void to_input(Autodiff *ad, const IrNode *n, int c)
{
    accumulate(ad, n->in[0], c, n->loc);
}

static void grad_neg(Autodiff *ad, const IrNode *n, int y, int d)
{
    to_input(ad, n, ir_unary(ad->g, IR_NEG, d, n->loc));
}

/* d / (2y) */
static void grad_sqrt(Autodiff *ad, const IrNode *n, int y, int d)
{
    IrGraph *g = ad->g;
    int two_y = ir_binary(g, IR_MUL, scalar(ad, 2, n->dtype, n->loc), y, n->loc);
    to_input(ad, n, ir_binary(g, IR_DIV, d, two_y, n->loc));
}

/* -d * y^3 / 2 */
static void grad_rsqrt(Autodiff *ad, const IrNode *n, int y, int d)
{
    IrGraph *g = ad->g;
    SrcLoc loc = n->loc;
    int y3 = ir_binary(g, IR_MUL, ir_binary(g, IR_MUL, y, y, loc), y, loc);
    to_input(ad, n, ir_binary(g, IR_MUL, ir_binary(g, IR_MUL, d, y3, loc),
                              scalar(ad, -0.5, n->dtype, loc), loc));
}

/* -d * sin x, with sin x = cos(x - pi/2): the IR has no SIN */
static void grad_cos(Autodiff *ad, const IrNode *n, int y, int d)
{
    IrGraph *g = ad->g;
    SrcLoc loc = n->loc;
    int shifted = ir_binary(g, IR_SUB, n->in[0], scalar(ad, M_PI / 2, n->dtype, loc), loc);
    int sin = ir_unary(g, IR_COS, shifted, loc);
    to_input(ad, n, ir_unary(g, IR_NEG, ir_binary(g, IR_MUL, d, sin, loc), loc));
}

/* The broadcasting binary ops; accumulate() sums each side down to its shape. */
static void grad_add(Autodiff *ad, const IrNode *n, int y, int d)
{
    accumulate(ad, n->in[0], d, n->loc);
    accumulate(ad, n->in[1], d, n->loc);
}

static void grad_sub(Autodiff *ad, const IrNode *n, int y, int d)
{
    accumulate(ad, n->in[0], d, n->loc);
    if (ad->active[n->in[1]])
        accumulate(ad, n->in[1], ir_unary(ad->g, IR_NEG, d, n->loc), n->loc);
}

static void grad_mul(Autodiff *ad, const IrNode *n, int y, int d)
{
    int a = n->in[0], b = n->in[1];
    if (ad->active[a]) accumulate(ad, a, ir_binary(ad->g, IR_MUL, d, b, n->loc), n->loc);
    if (ad->active[b]) accumulate(ad, b, ir_binary(ad->g, IR_MUL, d, a, n->loc), n->loc);
}

/* d/b and -d*a/b^2 = -(d/b) * y */
static void grad_div(Autodiff *ad, const IrNode *n, int y, int d)
{
    IrGraph *g = ad->g;
    SrcLoc loc = n->loc;
    int a = n->in[0], b = n->in[1];
    bool da = ad->active[a], db = ad->active[b];
    int d_over_b = ir_binary(g, IR_DIV, d, b, loc);
    if (da) accumulate(ad, a, d_over_b, loc);
    if (db) accumulate(ad, b, ir_unary(g, IR_NEG, ir_binary(g, IR_MUL, d_over_b, y, loc), loc), loc);
}

/* d * b * a^(b-1) and d * y * ln a */
static void grad_pow(Autodiff *ad, const IrNode *n, int y, int d)
{
    IrGraph *g = ad->g;
    SrcLoc loc = n->loc;
    int a = n->in[0], b = n->in[1];
    bool da = ad->active[a], db = ad->active[b];
    if (da) {
        int b_minus_1 = ir_binary(g, IR_SUB, b, scalar(ad, 1, g->nodes[b].dtype, loc), loc);
        int slope = ir_binary(g, IR_MUL, b, ir_binary(g, IR_POW, a, b_minus_1, loc), loc);
        accumulate(ad, a, ir_binary(g, IR_MUL, d, slope, loc), loc);
    }
    if (db) {
        int slope = ir_binary(g, IR_MUL, y, ir_unary(g, IR_LOG, a, loc), loc);
        accumulate(ad, b, ir_binary(g, IR_MUL, d, slope, loc), loc);
    }
}

/* MAXIMUM and MINIMUM: the gradient goes to the winner, to A on ties. */
static void grad_minmax(Autodiff *ad, const IrNode *n, int y, int d)
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

/* SELECT: the branch taken gets d, the other 0; the condition gets nothing. */
static void grad_select(Autodiff *ad, const IrNode *n, int y, int d)
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
static void grad_sum(Autodiff *ad, const IrNode *n, int y, int d)
{
    to_input(ad, n, unreduce(ad, d, ad->g->nodes[n->in[0]].shape, n->axis, n->loc));
}

static void grad_mean(Autodiff *ad, const IrNode *n, int y, int d)
{
    IrGraph *g = ad->g;
    Shape xs = g->nodes[n->in[0]].shape;
    int count = ir_cast(g, reduced_count(ad, xs, n->axis, n->loc), n->dtype, n->loc);
    to_input(ad, n, unreduce(ad, ir_binary(g, IR_DIV, d, count, n->loc), xs, n->axis, n->loc));
}

static void grad_max(Autodiff *ad, const IrNode *n, int y, int d)
{
    IrGraph *g = ad->g;
    SrcLoc loc = n->loc;
    int x = n->in[0];
    Shape xs = g->nodes[x].shape;
    /* the maxima and the shares broadcast within EQUAL and MUL: no copy at x's size */
    int mask = ir_binary(g, IR_EQUAL, x, keepdim(ad, y, xs, n->axis, loc), loc);
    int ties = ir_reduce(g, IR_SUM, mask, n->axis, loc);
    int share = keepdim(ad, ir_binary(g, IR_DIV, d, ties, loc), xs, n->axis, loc);
    to_input(ad, n, ir_binary(g, IR_MUL, share, mask, loc));
}

static void grad_reshape(Autodiff *ad, const IrNode *n, int y, int d)
{
    to_input(ad, n, ir_reshape(ad->g, d, ad->g->nodes[n->in[0]].shape, n->loc));
}

static void grad_reduce_to(Autodiff *ad, const IrNode *n, int y, int d)
{
    to_input(ad, n, broadcast_to(ad, d, ad->g->nodes[n->in[0]].shape, n->loc));
}

static void grad_transpose(Autodiff *ad, const IrNode *n, int y, int d)
{
    to_input(ad, n, ir_transpose(ad->g, d, n->loc));
}

/* d permuted back: axis perm[i] of the input is axis i of d. */
static void grad_permute(Autodiff *ad, const IrNode *n, int y, int d)
{
    int inverse[IR_MAX_RANK];
    for (int i = 0; i < n->shape.rank; i++) inverse[ir_perm_axis(n, i)] = i;
    to_input(ad, n, ir_permute(ad->g, d, inverse, n->loc));
}

/* d through the same mask, zero where the scores were masked. */
static void grad_causal_mask(Autodiff *ad, const IrNode *n, int y, int d)
{
    to_input(ad, n, ir_causal_mask(ad->g, d, 0.0, n->loc));
}

/* d's rows added into the table's, by the same indices. */
static void grad_embed(Autodiff *ad, const IrNode *n, int y, int d)
{
    int64_t rows = ad->g->nodes[n->in[0]].shape.dim[0];
    to_input(ad, n, ir_embed_grad(ad->g, d, n->in[1], rows, n->loc));
}

/* IR_MATMUL_BATCH_SUM for b's gradient when b is one matrix that a's batches share (a
 * linear layer or convolution over many positions): one GEMM through every batch rather
 * than a product per batch summed after. Only where the GEMM's a is transposed and its
 * b not (PLAIN: the forward's a was not transposed). */
static int sum_batch(const Autodiff *ad, const IrNode *n, bool plain)
{
    const Shape *a = &ad->g->nodes[n->in[0]].shape, *b = &ad->g->nodes[n->in[1]].shape;
    return plain && b->rank == 2 && a->rank > 2 ? IR_MATMUL_BATCH_SUM : 0;
}

/* MATMUL y = op(A) @ op(B), op() transposing when the flag says so. With a = op(A) and
 * b = op(B): da = d @ b^T and db = a^T @ d. When A itself is transposed, dA = da^T =
 * b @ d^T; likewise dB = db^T = d^T @ a. Each case is one matmul with the right flags,
 * so no transpose is materialised; the tf32 bit is kept. accumulate() sums over the batch
 * dimensions an operand was broadcast along. */
static void grad_matmul(Autodiff *ad, const IrNode *n, int y, int d)
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
        int sum = sum_batch(ad, n, !ta);
        int dB = !tb ? ir_matmul(ad->g, A, d, (ta ? 0 : TA) | tf32 | sum, n->loc)   /* a^T @ d */
                     : ir_matmul(ad->g, d, A, TA | (ta ? TB : 0) | tf32 | sum, n->loc); /* d^T @ a */
        accumulate(ad, B, dB, n->loc);
    }
}

/* Each pixel gathers the gradient of every patch entry that read it; entries that read
 * outside the image (padding) have nowhere to go. */
static void grad_unfold(Autodiff *ad, const IrNode *n, int y, int d)
{
    Shape image = ad->g->nodes[n->in[0]].shape;
    to_input(ad, n, ir_fold(ad->g, d, image, n->win, n->flags, n->loc));
}

static void grad_fold(Autodiff *ad, const IrNode *n, int y, int d)
{
    to_input(ad, n, ir_unfold(ad->g, d, n->win, n->flags, 0, n->loc));
}

static void grad_softmax(Autodiff *ad, const IrNode *n, int y, int d)
{
    to_input(ad, n, ir_softmax_grad(ad->g, IR_SOFTMAX_GRAD, d, y, n->axis, n->loc));
}

static void grad_log_softmax(Autodiff *ad, const IrNode *n, int y, int d)
{
    to_input(ad, n, ir_softmax_grad(ad->g, IR_LOG_SOFTMAX_GRAD, d, y, n->axis, n->loc));
}

/* The same counter, p and stream: the same mask, drawn again. */
static void grad_dropout(Autodiff *ad, const IrNode *n, int y, int d)
{
    to_input(ad, n, ir_dropout(ad->g, d, n->in[1], n->value, n->index, n->loc));
}

static void grad_cross_entropy(Autodiff *ad, const IrNode *n, int y, int d)
{
    to_input(ad, n, ir_ce_grad(ad->g, d, n->in[0], n->in[1], n->loc));
}

/* --- the table's rules, one function per op --- */

#define NONE
#define D to_input(ad, n, d)
#define DX(op) to_input(ad, n, ir_binary(ad->g, IR_##op, d, n->in[0], n->loc))
#define DY(op) to_input(ad, n, ir_binary(ad->g, IR_##op, d, y, n->loc))
#define D_TIMES(op, v)                                                                      \
    to_input(ad, n, ir_binary(ad->g, IR_MUL, d, ir_unary(ad->g, IR_##op, v, n->loc), n->loc))
#define FN(name) grad_##name(ad, n, y, d)
#define NOT_NEEDED \
    CGC_INTERNAL("autodiff: %s is a gradient op, never differentiated", ir_op_info[n->op].name)
#define IR_OP(name, arity, cls, family, fuse, attrs, shape, autocast, cost, diff, grad, meaning,   \
              deriv)                                                                      \
    static void rule_##name(Autodiff *ad, const IrNode *n, int y, int d)                  \
    {                                                                                       \
        int x = n->in[0];                                                                   \
        (void)x, (void)y, (void)d;                                                          \
        grad;                                                                               \
    }
#include "ops.def"

typedef void GradRule(Autodiff *ad, const IrNode *n, int y, int d);
static GradRule *const grad_rule[IR_NUM_OPS] = {
#define IR_OP(name, ...) [IR_##name] = rule_##name,
#include "ops.def"
};

/* Step 2 for one node: its adjoint D flows into its inputs. */
static void backprop_node(Autodiff *ad, int id)
{
    IrNode n = ad->g->nodes[id];   /* a copy: builders may move the node array */
    grad_rule[n.op](ad, &n, id, ad->adj[id]);
}

/* Step 3: a tensor's gradient is the f32 sum of the adjoints of all its READs. */
static void collect_tensor_grads(Autodiff *ad, int *grads)
{
    for (int i = 0; i < ad->nforward; i++) {
        IrNode n = ad->g->nodes[i];
        if (ir_node_reads_tensor(&n) < 0 || !ad->active[i] || ad->adj[i] < 0)
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
