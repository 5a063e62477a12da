/* recompute.c: activation checkpointing (the `checkpoint` key) on the training graphs.
 *
 * The backward pass reads forward values (activations) long after the forward made them,
 * so they stay in memory across the whole step. For cheap elementwise values it pays to
 * drop them after the forward and compute them again where the backward needs them: the
 * recomputation costs a few FLOPs per element, what it saves is the value's memory for
 * the time between the forward and its backward readers.
 *
 * The train graph (and train_micro) starts with a copy of the forward pass, nodes
 * [0, nforward); everything after it is the backward region (gradients, accumulation,
 * clipping, optimizer). A candidate is a forward node whose op is elementwise, BROADCAST,
 * CAST or DROPOUT (its mask is keyed by its counter input and stream, so a copy draws the
 * same mask), that the backward region reads or another candidate's copy does (the middle
 * of a chain, like gelu before dropout), and whose recomputation pays: each of its inputs
 * is a leaf, a candidate itself, a value the backward reads directly (kept anyway), or
 * smaller than it. Otherwise recomputing it would only keep its input instead
 * (recomputing `z = matmul + bias` keeps the matmul's output, as large as z, and adds a
 * backward copy). The set is found by starting from every elementwise forward node and
 * removing those that do not pay or are not needed until none is left. Checkpointing a set of candidates rebuilds the
 * graph: the forward stays as it is; before the first backward node that reads a chosen
 * candidate, a copy of it (IrNode.recompute) is emitted, reading the original forward
 * values of its inputs, or the copies of inputs that are chosen too (so recomputing a
 * chain keeps none of it); backward readers then read the copy. The copy is the same op
 * on the same values, so every gradient is unchanged bit for bit.
 *
 * Which candidates `auto` recomputes first (driver/compile.c takes a prefix of the
 * list): the cheapest, by FLOPs to recompute per byte no longer kept,
 *     flops = numel * op_cost(op),  bytes = numel * dtype size,
 * with the batch symbol bound to cfg.batch and other symbols to 1; ties by node id. The
 * op costs are ops.def's column COST: 1 for arithmetic, comparisons, selects, casts and
 * relu's kin; 4 for DIV, SQRT and RSQRT (multi-instruction on the special-function unit);
 * 10 for transcendental functions, the gradients that evaluate theirs again (GELU_GRAD;
 * TANH_GRAD works from the output: 1) and DROPOUT (a Philox draw per element).
 * For one op the element count cancels, so the order is the op's cost per byte of its
 * dtype: an f32 cast goes before an f16 relu, which goes before an f16 gelu.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* ---- candidates ---- */

/* FLOPs per element to recompute OP (ops.def, column COST). */
static int op_cost(IrOp op)
{
    return ir_op_info[op].cost;
}

/* Marks in READ every forward node of G that its backward region reads. */
static void mark_backward_reads(const IrGraph *g, bool *read)
{
    for (int i = g->nforward; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++)
            if (g->nodes[i].in[k] < g->nforward) read[g->nodes[i].in[k]] = true;
}

typedef struct Candidate {
    int id;
    double per_byte;   /* FLOPs to recompute per byte no longer kept */
} Candidate;

/* N's bytes with the batch symbol bound to cfg.batch and other symbols to 1. */
static double node_bytes(const IrProgram *p, const IrNode *n)
{
    int64_t symvals[IR_MAX_SYMBOLS];
    for (int k = 0; k < IR_MAX_SYMBOLS; k++) symvals[k] = k == 0 ? p->cfg.batch : 1;
    return (double)ir_numel(&n->shape, symvals) * (double)ir_dtype_size(n->dtype);
}

static double cost_per_byte(const IrProgram *p, const IrNode *n)
{
    double bytes = node_bytes(p, n);
    return bytes > 0 ? op_cost(n->op) / (double)ir_dtype_size(n->dtype) : 0;
}

/* Whether the backward needs a copy of X: it reads X, or the copy of a node in SET does. */
static bool needed(const IrGraph *g, const bool *set, const bool *read, int x)
{
    if (read[x]) return true;
    for (int i = x + 1; i < g->nforward; i++)
        for (int k = 0; set[i] && k < g->nodes[i].nin; k++)
            if (g->nodes[i].in[k] == x) return true;
    return false;
}

/* Whether recomputing forward node X of G saves memory when the nodes in SET are
 * recomputed and those in READ are read by the backward (the rule at the top). */
static bool pays(const IrProgram *p, const IrGraph *g, const bool *set, const bool *read, int x)
{
    const IrNode *n = &g->nodes[x];
    for (int k = 0; k < n->nin; k++) {
        int i = n->in[k];
        const IrNode *in = &g->nodes[i];
        bool kept = ir_op_info[in->op].cls == IR_CLASS_LEAF || set[i] || read[i];
        if (!kept && node_bytes(p, in) >= node_bytes(p, n)) return false;
    }
    return true;
}

static int by_cost(const void *a, const void *b)
{
    const Candidate *x = a, *y = b;
    if (x->per_byte != y->per_byte) return x->per_byte < y->per_byte ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

int recompute_candidates(const IrProgram *p, int **nodes)
{
    const IrGraph *g = &p->train;
    CGC_ASSERT(!p->train_micro.nnodes || p->train_micro.nforward == g->nforward);
    bool *read = xmalloc((size_t)(g->nforward ? g->nforward : 1) * sizeof *read);
    memset(read, 0, (size_t)g->nforward * sizeof *read);
    mark_backward_reads(g, read);
    if (p->train_micro.nnodes) mark_backward_reads(&p->train_micro, read);
    bool *set = xmalloc((size_t)(g->nforward ? g->nforward : 1) * sizeof *set);
    for (int i = 0; i < g->nforward; i++) set[i] = ir_op_is_elementwise(g->nodes[i].op);
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = 0; i < g->nforward; i++)
            if (set[i] && (!pays(p, g, set, read, i) || !needed(g, set, read, i)))
                set[i] = false, changed = true;
    }
    Candidate *c = xmalloc((size_t)(g->nforward ? g->nforward : 1) * sizeof *c);
    int n = 0;
    for (int i = 0; i < g->nforward; i++)
        if (set[i]) c[n++] = (Candidate){i, cost_per_byte(p, &g->nodes[i])};
    free(set);
    qsort(c, (size_t)n, sizeof *c, by_cost);
    *nodes = xmalloc((size_t)(n ? n : 1) * sizeof **nodes);
    for (int k = 0; k < n; k++) (*nodes)[k] = c[k].id;
    free(c);
    free(read);
    return n;
}

/* ---- rebuilding a graph ---- */

typedef struct Rebuild {
    const IrGraph *old;
    IrGraph *new;
    const bool *chosen;   /* per forward node: recomputed in the backward */
    int *copy;            /* per forward node: its copy in NEW, or -1 while none */
    int *map;             /* per OLD node: its id in NEW */
} Rebuild;

/* The id in NEW that a backward node reads for OLD node ID: a chosen forward node's copy
 * (emitted now if this is its first reader), else the node itself. */
static int backward_input(Rebuild *r, int id);

/* Emits the recomputed copy of chosen forward node ID, its chosen inputs first. */
static int emit_copy(Rebuild *r, int id)
{
    IrNode n = r->old->nodes[id];
    for (int k = 0; k < n.nin; k++) n.in[k] = backward_input(r, n.in[k]);
    n.recompute = true;
    return r->copy[id] = ir_add_node(r->new, &n);
}

static int backward_input(Rebuild *r, int id)
{
    if (id >= r->old->nforward || !r->chosen[id]) return r->map[id];
    return r->copy[id] >= 0 ? r->copy[id] : emit_copy(r, id);
}

static void rebuild_graph(IrGraph *g, const bool *chosen)
{
    IrGraph out;
    ir_graph_init(&out, g->name);
    int *copy = xmalloc((size_t)(g->nforward ? g->nforward : 1) * sizeof *copy);
    int *map = xmalloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof *map);
    for (int i = 0; i < g->nforward; i++) copy[i] = -1;
    Rebuild r = {g, &out, chosen, copy, map};
    for (int i = 0; i < g->nforward; i++) map[i] = ir_add_node(&out, &g->nodes[i]);
    for (int i = g->nforward; i < g->nnodes; i++) {
        IrNode n = g->nodes[i];
        for (int k = 0; k < n.nin; k++) n.in[k] = backward_input(&r, n.in[k]);
        map[i] = ir_add_node(&out, &n);
    }
    for (int role = 0; role < IR_NUM_OUTPUT_ROLES; role++)
        out.output[role] = g->output[role] < 0 ? -1 : map[g->output[role]];
    out.nforward = g->nforward;
    free(copy);
    free(map);
    ir_graph_free(g);
    *g = out;
}

void recompute_apply(IrProgram *p, const int *nodes, int n)
{
    if (n == 0) return;
    IrGraph *graphs[2] = { &p->train, &p->train_micro };
    int nforward = p->train.nforward;
    bool *chosen = xmalloc((size_t)(nforward ? nforward : 1) * sizeof *chosen);
    memset(chosen, 0, (size_t)nforward * sizeof *chosen);
    for (int k = 0; k < n; k++) {
        CGC_ASSERT(nodes[k] >= 0 && nodes[k] < nforward);
        CGC_ASSERT(ir_op_is_elementwise(p->train.nodes[nodes[k]].op));
        chosen[nodes[k]] = true;
    }
    for (int i = 0; i < 2; i++) {
        if (!graphs[i]->nnodes) continue;
        /* Before fusion: groups would not survive the renumbering. */
        CGC_ASSERT(graphs[i]->ngroups == 0 && graphs[i]->nforward == nforward);
        rebuild_graph(graphs[i], chosen);
        ir_verify(p, graphs[i]);
    }
    free(chosen);
}
