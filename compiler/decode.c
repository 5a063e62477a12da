/* decode.c: the decode graph, which runs a text model one position at a time (passes.h).
 *
 * Generating through the evaluation graph costs a whole window per byte: T positions
 * through every layer. In a causal model what earlier positions computed does not change
 * when a byte is appended, so only the new position needs computing, given the keys and
 * values each attention computed for the earlier ones: a KV cache. The decode graph is
 * the evaluation graph's prediction with the position axis cut to one position, which
 * the runtime scalar IR_RT_POSITION names:
 *
 *   - the token input [N, T] becomes [1, 1] (a batch of one), and arange(T), the
 *     positions a positional embedding looks up, becomes [position];
 *   - each attention (ir_attention_chain) writes its new rows of K and V into caches,
 *     persistent tensors [1, heads, T, D] (IR_CACHE), at row `position`, and multiplies
 *     the query by the whole caches, the keys past the position masked to -inf where the
 *     causal mask was: S = q Kc^T, P = softmax(S), O = P Vc;
 *   - every other op is carried over, its position axis one wide.
 *
 * The cut is sound only where every op keeps positions apart, which the pass checks as
 * it copies, following each node's position axis (pax): elementwise ops align it, a
 * reduction or softmax must not run along it, a matrix product may carry it as a row or
 * batch axis but not contract it, a reshape keeps the dimensions up to it, a permute
 * moves it. Anything else (attention with causal = false, a sum over positions, a weight
 * with a row per position read other than through arange(T)) leaves the model without a
 * decode graph, and the pass says why. The graph is made of the table's ops (SELECT,
 * EQUAL, LESS, ARANGE, ASSIGN), so the executors, fusion and the plan take it as it is.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "passes.h"

/* What an evaluation node is to an attention it belongs to. */
enum { ROLE_NONE, ROLE_SCORES, ROLE_MASK, ROLE_OUTPUT };
/* A position axis: none, or the cut cannot go through the node (refuse() said why). */
enum { NO_AXIS = -1, REFUSED = -2 };

typedef struct Decoder {
    IrProgram *p;
    const IrGraph *ev;      /* p->eval */
    IrGraph *g;             /* p->decode, being built */
    int64_t t;              /* the context: positions in a window */
    int *map;               /* per evaluation node: its decode node (-1: none yet) */
    int *pax;               /* per evaluation node: its position axis, or -1 */
    int *role, *chain;      /* per evaluation node: ROLE_*, and its attention */
    IrAttention *attn;
    int nattn;
    int position;           /* decode node: the position, f32 [] */
    char *why;
    size_t whylen;
} Decoder;

/* Records why evaluation node ID stops the cut; returns REFUSED. */
static int refuse(Decoder *d, int id, const char *fmt, ...)
{
    const IrNode *n = &d->ev->nodes[id];
    int at = snprintf(d->why, d->whylen, "the %s at line %d ", ir_op_name(n->op), n->loc.line);
    va_list ap;
    va_start(ap, fmt);
    if (at >= 0 && (size_t)at < d->whylen) vsnprintf(d->why + at, d->whylen - (size_t)at, fmt, ap);
    va_end(ap);
    return REFUSED;
}

/* S one position wide at axis PAX (-1: none) and a batch of one. */
static Shape cut(const Shape *s, int pax)
{
    Shape c = *s;
    for (int i = 0; i < c.rank; i++)
        if (IR_DIM_IS_SYM(c.dim[i]) || i == pax) c.dim[i] = 1;
    return c;
}

/* Evaluation node ID copied onto its inputs' decode nodes, its position axis PAX. */
static int copy(Decoder *d, int id, int pax)
{
    IrNode n = d->ev->nodes[id];
    n.group = 0;
    n.recompute = false;
    for (int i = 0; i < n.nin; i++) n.in[i] = d->map[n.in[i]];
    Shape s;
    if (!ir_node_shape(d->p, d->g, &n, &s)) s = cut(&n.shape, pax);
    if (s.rank < 0) CGC_INTERNAL("decode graph: %%%d's inputs admit no shape", id);
    n.shape = s;
    d->pax[id] = pax;
    return d->map[id] = ir_add_node(d->g, &n);
}

/* The axis of input K of node N that lands on N's axis A (broadcasting aligns the
 * trailing axes), or -1. */
static int aligned(const IrGraph *g, const IrNode *n, int k, int a)
{
    int at = a - (n->shape.rank - g->nodes[n->in[k]].shape.rank);
    return at >= 0 ? at : -1;
}

/* Elementwise: the inputs' position axes agree once aligned, and an input without one is
 * one wide there (a value the same for every position). */
static int elementwise_axis(Decoder *d, int id)
{
    const IrNode *n = &d->ev->nodes[id];
    int pax = NO_AXIS;
    for (int k = 0; k < n->nin; k++) {
        int a = d->pax[n->in[k]];
        int at = a < 0 ? -1 : a + n->shape.rank - d->ev->nodes[n->in[k]].shape.rank;
        if (at >= 0 && pax >= 0 && at != pax) return refuse(d, id, "mixes one position with another");
        if (at >= 0) pax = at;
    }
    for (int k = 0; k < n->nin && pax >= 0; k++) {
        int at = aligned(d->ev, n, k, pax);
        if (d->pax[n->in[k]] < 0 && at >= 0 && d->ev->nodes[n->in[k]].shape.dim[at] != 1)
            return refuse(d, id, "reads a value with a row per position that is not "
                                 "computed from the positions (use arange)");
    }
    return pax;
}

/* A matrix product carries the position as a batch axis or as A's rows or B's columns,
 * from one side (the other the same for every position); it must not contract it. */
static int matmul_axis(Decoder *d, int id)
{
    const IrNode *n = &d->ev->nodes[id];
    int pa = d->pax[n->in[0]], pb = d->pax[n->in[1]], r = n->shape.rank;
    if (pa >= 0 && pb >= 0) return refuse(d, id, "multiplies two position-wise values");
    if (pa < 0 && pb < 0) return NO_AXIS;
    const Shape *a = &d->ev->nodes[n->in[0]].shape, *b = &d->ev->nodes[n->in[1]].shape;
    const Shape *own = pa >= 0 ? a : b, *other = pa >= 0 ? b : a;
    int p = pa >= 0 ? pa : pb;
    if (p < own->rank - 2) {   /* a batch axis: the other side one wide there, or without it */
        int at = p - own->rank + other->rank;
        if (at >= 0 && at < other->rank - 2 && other->dim[at] != 1)
            return refuse(d, id, "multiplies by a value with a row per position");
        return p + r - own->rank;
    }
    bool ta = n->flags & IR_MATMUL_TRANS_A, tb = n->flags & IR_MATMUL_TRANS_B;
    if (pa >= 0 && pa == (ta ? a->rank - 1 : a->rank - 2)) return r - 2;   /* A's rows */
    if (pb >= 0 && pb == (tb ? b->rank - 2 : b->rank - 1)) return r - 1;   /* B's columns */
    return refuse(d, id, "sums over the positions");
}

/* A reshape keeps the position axis where it keeps every dimension up to it. */
static int reshape_axis(Decoder *d, int id, int pax)
{
    const Shape *in = &d->ev->nodes[d->ev->nodes[id].in[0]].shape, *out = &d->ev->nodes[id].shape;
    bool kept = out->rank > pax;
    for (int i = 0; kept && i <= pax; i++) kept = in->dim[i] == out->dim[i];
    return kept ? pax : refuse(d, id, "merges the positions with another axis");
}

/* The position axis of evaluation node ID by its op's shape rule (ops.def): NO_AXIS, an
 * axis, or REFUSED. */
static int position_axis(Decoder *d, int id)
{
    const IrNode *n = &d->ev->nodes[id];
    int p0 = n->nin > 0 ? d->pax[n->in[0]] : -1;
    switch (ir_op_info[n->op].shape) {
    case IR_SHAPE_BROADCAST: return elementwise_axis(d, id);
    case IR_SHAPE_IN0:
        if (ir_op_info[n->op].attrs == IR_ATTRS_AXIS && p0 >= 0 && n->axis == p0)
            return refuse(d, id, "runs along the positions");
        if (ir_op_info[n->op].attrs == IR_ATTRS_MASK_VALUE && p0 >= 0)
            return refuse(d, id, "is not attention's causal mask");
        return p0;
    case IR_SHAPE_REDUCE:
        if (p0 >= 0 && (n->axis == p0 || n->axis == IR_AXIS_ALL))
            return refuse(d, id, "reduces over the positions");
        return p0 < 0 ? NO_AXIS : p0 - (n->axis < p0);
    case IR_SHAPE_MATMUL: return matmul_axis(d, id);
    case IR_SHAPE_TRANSPOSE:
        return p0 < n->shape.rank - 2 ? p0 : 2 * n->shape.rank - 3 - p0;
    case IR_SHAPE_PERMUTE:
        for (int q = 0; p0 >= 0 && q < n->shape.rank; q++)
            if (ir_perm_axis(n, q) == p0) return q;
        return NO_AXIS;
    case IR_SHAPE_EMBED:
        if (d->pax[n->in[0]] >= 0) return refuse(d, id, "looks up a position-wise table");
        return d->pax[n->in[1]];
    case IR_SHAPE_OWN:
        if (n->nin == 0) return NO_AXIS;
        if (ir_node_fuse(n) == IR_FUSE_VIEW && p0 >= 0) return reshape_axis(d, id, p0);
        if (ir_op_is_elementwise(n->op) && p0 >= 0)   /* a broadcast: trailing axes aligned */
            return p0 + n->shape.rank - d->ev->nodes[n->in[0]].shape.rank;
        return p0 < 0 ? NO_AXIS : refuse(d, id, "sums over the positions");
    case IR_SHAPE_IN1: case IR_SHAPE_SCALAR: case IR_SHAPE_WINDOW: case IR_SHAPE_IMAGE:
    case IR_SHAPE_ASSIGN:
        break;
    }
    bool any = false;
    for (int k = 0; k < n->nin; k++) any |= d->pax[n->in[k]] >= 0;
    return any ? refuse(d, id, "mixes the positions") : NO_AXIS;
}

/* ---- the attention's caches ---- */

/* The position as an f32 [] decode node. */
static int position(Decoder *d, SrcLoc loc)
{
    if (d->position < 0) d->position = ir_runtime(d->g, IR_RT_POSITION, loc);
    return d->position;
}

/* Positions 0..T-1 as f32 of shape S ([T] or [T, 1]). */
static int positions(Decoder *d, int rank, SrcLoc loc)
{
    Shape s = { .rank = rank, .dim = { d->t, 1 } };
    return ir_reshape(d->g, ir_cast(d->g, ir_arange(d->g, d->t, loc), DT_F32, loc), s, loc);
}

/* ROW (a decode node [1, heads, 1, D]) written at the position into a new cache tensor
 * NAME [1, heads, T, D]: the whole cache after the write, as ROW's dtype. */
static int cache_write(Decoder *d, const char *name, int row, SrcLoc loc)
{
    Shape s = d->g->nodes[row].shape;
    s.dim[2] = d->t;
    int t = ir_add_tensor(d->p, name, IR_CACHE, s, IR_INIT_ZEROS, 0, -1, loc);
    int here = ir_binary(d->g, IR_EQUAL, positions(d, 2, loc), position(d, loc), loc);
    int cache = ir_select(d->g, here, row, ir_read(d->g, d->p, t, loc), loc);
    ir_assign(d->g, d->p, t, cache, loc);
    return ir_cast(d->g, cache, d->g->nodes[row].dtype, loc);
}

/* Attention A's S = q Kc^T, for evaluation node ID (its S = Q K^T). */
static int scores(Decoder *d, int id, int a)
{
    const IrNode *n = &d->ev->nodes[id];
    char name[64];
    snprintf(name, sizeof name, "cgc.cache.keys.%d", a);
    if (d->pax[n->in[0]] != 2 || d->pax[n->in[1]] != 2)
        return refuse(d, id, "is attention over another axis than the positions");
    int keys = cache_write(d, name, d->map[n->in[1]], n->loc);
    d->pax[id] = 2;
    return d->map[id] = ir_matmul(d->g, d->map[n->in[0]], keys, n->flags, n->loc);
}

/* Attention A's O = P Vc, for evaluation node ID (its O = P V). */
static int output(Decoder *d, int id, int a)
{
    const IrNode *n = &d->ev->nodes[id];
    char name[64];
    snprintf(name, sizeof name, "cgc.cache.values.%d", a);
    if (d->pax[n->in[1]] != 2) return refuse(d, id, "is attention over another axis than the positions");
    int values = cache_write(d, name, d->map[n->in[1]], n->loc);
    d->pax[id] = 2;
    return d->map[id] = ir_matmul(d->g, d->map[n->in[0]], values, n->flags, n->loc);
}

/* The causal mask as the keys past the position set to the mask's value. */
static int mask(Decoder *d, int id)
{
    const IrNode *n = &d->ev->nodes[id];
    int later = ir_binary(d->g, IR_LESS, position(d, n->loc), positions(d, 1, n->loc), n->loc);
    int m = ir_select(d->g, later, ir_const(d->g, n->value, n->loc), d->map[n->in[0]], n->loc);
    d->g->nodes[m].dtype = n->dtype;
    d->pax[id] = 2;
    return d->map[id] = m;
}

/* ---- the pass ---- */

/* Marks the attentions among the evaluation nodes NEEDED; REFUSED for one the cut cannot
 * take. */
static int find_attention(Decoder *d, const bool *needed)
{
    const IrGraph *ev = d->ev;
    for (int id = 0; id < ev->nnodes; id++) {
        IrAttention a;
        if (!needed[id] || !ir_attention_chain(ev, id, &a)) continue;
        if (!a.causal) return refuse(d, id, "is attention with causal = false: each position "
                                            "sees later ones, which a cache cannot hold");
        d->attn = xrealloc(d->attn, (size_t)(d->nattn + 1) * sizeof *d->attn);
        d->attn[d->nattn] = a;
        d->role[a.s] = ROLE_SCORES, d->role[a.mask] = ROLE_MASK, d->role[a.o] = ROLE_OUTPUT;
        d->chain[a.s] = d->chain[a.mask] = d->chain[a.o] = d->nattn++;
    }
    return 0;
}

/* Evaluation node ID onto the decode graph: its decode node, or REFUSED. */
static int decode_node(Decoder *d, int id)
{
    const IrNode *n = &d->ev->nodes[id];
    switch (d->role[id]) {
    case ROLE_SCORES: return scores(d, id, d->chain[id]);
    case ROLE_MASK: return mask(d, id);
    case ROLE_OUTPUT: return output(d, id, d->chain[id]);
    }
    if (n->op == IR_ARANGE && n->shape.dim[0] == d->t) {   /* the positions */
        int at = ir_cast(d->g, position(d, n->loc), DT_I32, n->loc);
        d->pax[id] = 0;
        return d->map[id] = ir_reshape(d->g, at, (Shape){ .rank = 1, .dim = { 1 } }, n->loc);
    }
    if (ir_op_info[n->op].attrs == IR_ATTRS_INPUT_NAME)
        return copy(d, id, n->shape.rank >= 2 && n->shape.dim[1] == d->t ? 1 : -1);
    int pax = position_axis(d, id);
    return pax == REFUSED ? REFUSED : copy(d, id, pax);
}

static int build(Decoder *d)
{
    int out = d->ev->output[IR_OUT_PREDICTION];
    const Shape *ps = out >= 0 ? &d->ev->nodes[out].shape : NULL;
    if (!ps || ps->rank != 3 || ps->dim[1] != d->t) {
        snprintf(d->why, d->whylen, "its prediction is not [N, %lld, V]", (long long)d->t);
        return -1;
    }
    bool *needed = ir_cone(d->ev, out);
    int rc = find_attention(d, needed) == REFUSED ? -1 : 0;
    for (int id = 0; rc == 0 && id < d->ev->nnodes; id++)
        if (needed[id]) rc = decode_node(d, id) == REFUSED ? -1 : 0;
    free(needed);
    if (rc == 0 && d->pax[out] != 1) {
        snprintf(d->why, d->whylen, "its prediction's positions do not stay on their axis");
        rc = -1;
    }
    if (rc == 0) d->g->output[IR_OUT_PREDICTION] = d->map[out];
    return rc;
}

int decode_lower(IrProgram *p, char *why, size_t n)
{
    CGC_ASSERT(n > 0 && p->decode.nnodes == 0);
    int count = p->eval.nnodes, ntensors = p->ntensors;
    Decoder d = { .p = p, .ev = &p->eval, .g = &p->decode, .t = p->cfg.text_context,
                  .map = xmalloc((size_t)count * sizeof(int)), .pax = xmalloc((size_t)count * sizeof(int)),
                  .role = xcalloc((size_t)count, sizeof(int)), .chain = xcalloc((size_t)count, sizeof(int)),
                  .position = -1, .why = why, .whylen = n };
    *why = '\0';
    for (int i = 0; i < count; i++) d.map[i] = -1, d.pax[i] = -1;
    int rc = p->cfg.data == DATA_TEXT ? build(&d) : -1;
    if (rc != 0 && !*why) snprintf(why, n, "it does not train on text");
    if (rc == 0) ir_verify(p, &p->decode);
    else {   /* as it was: no decode graph, no caches */
        ir_graph_free(&p->decode);
        ir_graph_init(&p->decode, "decode");
        ir_drop_tensors(p, ntensors);
    }
    free(d.map), free(d.pax), free(d.role), free(d.chain), free(d.attn);
    return rc;
}
