/* compiler/boundaries.c: why the kernels of a fused graph are where they are.
 *
 * The last step of the fusion pass (fusion.c). For every pair of kernels (units, see
 * IrBoundary) that a value crosses, it records the first of fusion's rules that keeps the
 * two apart, in the order a reader checks them: the GEMMs and their epilogues, ops no
 * group takes, reductions, checkpointing's phases, the work shapes, row groups, values
 * read by several kernels, cycles. --explain words what is recorded here and decides
 * nothing itself.
 *
 * The rules are found on the finished graph rather than noted at each merge the greedy
 * sweep refused: the sweep may refuse one pair several times for different reasons
 * (before and after other merges), and the reason that matters is the one that holds for
 * the kernels as they are.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* The graph of units: which units each unit feeds, found once per graph. A view
 * (RESHAPE outside every group) is no kernel: an edge through one is the edge from what
 * it views. */
typedef struct Units {
    const IrGraph *g;
    int nunits;
    int *adj_off, *adj;         /* unit -> units it feeds (CSR; a unit may repeat) */
    int *readers;               /* node -> how many units read it (count_readers) */
    unsigned char *seen;
    int *stack;
} Units;

static bool is_op(const IrNode *n) { return !ir_node_is_placed(n); }

static bool is_scalar(const IrNode *n) { return ir_node_fuse(n) == IR_FUSE_SCALAR; }

static bool is_view(const IrNode *n) { return ir_node_fuse(n) == IR_FUSE_VIEW && n->group == 0; }

/* The unit computing node ID (through views), or -1 for a leaf or a scalar. */
static int unit_of(const IrGraph *g, int id)
{
    while (is_view(&g->nodes[id])) id = g->nodes[id].in[0];
    const IrNode *n = &g->nodes[id];
    if (n->group > 0) return n->group;
    return is_op(n) && !is_scalar(n) ? g->ngroups + 1 + id : -1;
}

/* The node behind input K of node C, views skipped. */
static int producer(const IrGraph *g, int c, int k)
{
    int id = g->nodes[c].in[k];
    while (is_view(&g->nodes[id])) id = g->nodes[id].in[0];
    return id;
}

/* For each node, the number of units that read it, a reader outside every kernel (-1)
 * counted as one: by producer, a stamp per unit. */
static void count_readers(Units *u)
{
    const IrGraph *g = u->g;
    int *off = xcalloc((size_t)g->nnodes + 1, sizeof *off), n = 0;
    for (int c = 0; c < g->nnodes; c++)
        if (!is_view(&g->nodes[c]))
            for (int k = 0; k < g->nodes[c].nin; k++) off[producer(g, c, k) + 1]++, n++;
    for (int i = 0; i < g->nnodes; i++) off[i + 1] += off[i];
    int *by = xmalloc(((size_t)n + 1) * sizeof *by), *at = xmalloc(((size_t)g->nnodes + 1) * sizeof *at);
    memcpy(at, off, (size_t)g->nnodes * sizeof *at);
    for (int c = 0; c < g->nnodes; c++)
        if (!is_view(&g->nodes[c]))
            for (int k = 0; k < g->nodes[c].nin; k++) by[at[producer(g, c, k)]++] = unit_of(g, c) + 1;
    int *stamp = xmalloc(((size_t)u->nunits + 1) * sizeof *stamp);
    for (int i = 0; i <= u->nunits; i++) stamp[i] = -1;
    u->readers = xcalloc((size_t)g->nnodes, sizeof *u->readers);
    for (int id = 0; id < g->nnodes; id++)
        for (int i = off[id]; i < off[id + 1]; i++)
            if (stamp[by[i]] != id) stamp[by[i]] = id, u->readers[id]++;
    free(stamp);
    free(at);
    free(by);
    free(off);
}

static void units_init(Units *u, const IrGraph *g)
{
    *u = (Units){ .g = g, .nunits = g->ngroups + 1 + g->nnodes };
    u->adj_off = xcalloc((size_t)u->nunits + 1, sizeof *u->adj_off);
    u->seen = xcalloc((size_t)u->nunits, 1);
    u->stack = xcalloc((size_t)u->nunits, sizeof *u->stack);
    int *count = xcalloc((size_t)u->nunits, sizeof *count);
    int nedges = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int c = 0; c < g->nnodes; c++) {
            int uc = unit_of(g, c);
            if (uc < 0 || is_view(&g->nodes[c])) continue;
            for (int k = 0; k < g->nodes[c].nin; k++) {
                int up = unit_of(g, producer(g, c, k));
                if (up < 0 || up == uc) continue;
                if (pass == 0) {
                    count[up]++;
                    nedges++;
                } else {
                    u->adj[u->adj_off[up] + count[up]++] = uc;
                }
            }
        }
        if (pass == 0) {
            for (int i = 0; i < u->nunits; i++) u->adj_off[i + 1] = u->adj_off[i] + count[i];
            u->adj = xcalloc((size_t)nedges + 1, sizeof *u->adj);
            memset(count, 0, (size_t)u->nunits * sizeof *count);
        }
    }
    free(count);
    count_readers(u);
}

static void units_free(Units *u)
{
    free(u->adj_off);
    free(u->adj);
    free(u->readers);
    free(u->seen);
    free(u->stack);
}

/* A unit other than FROM and TO on a path from FROM to TO, or -1: joining the two would
 * make the kernels' graph cyclic. */
static int detour_via(Units *u, int from, int to)
{
    for (int i = u->adj_off[from]; i < u->adj_off[from + 1]; i++) {
        int first = u->adj[i], sp = 0;
        if (first == to) continue;
        memset(u->seen, 0, (size_t)u->nunits);
        u->stack[sp++] = first;
        u->seen[first] = 1;
        bool found = false;
        while (sp > 0 && !found) {
            int x = u->stack[--sp];
            for (int j = u->adj_off[x]; j < u->adj_off[x + 1]; j++) {
                int v = u->adj[j];
                if (v == to) found = true;
                else if (!u->seen[v] && v != from) u->seen[v] = 1, u->stack[sp++] = v;
            }
        }
        if (found) return first;
    }
    return -1;
}

/* Whether unit U (a group) holds a reduction to a shape (not along an axis). */
static bool reduces_to_shape(const IrGraph *g, int u)
{
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].group == u && ir_op_reduces_to_shape(g->nodes[i].op)) return true;
    return false;
}

/* Matmul node MM's reader ADD adds a bias: a vector over MM's columns. */
static bool adds_bias(const IrGraph *g, int mm, const IrNode *add)
{
    const IrNode *m = &g->nodes[mm];
    const IrNode *b = &g->nodes[add->in[add->in[0] == mm]];
    int64_t n = m->shape.rank ? m->shape.dim[m->shape.rank - 1] : -1;
    return (b->shape.rank == 1 && b->shape.dim[0] == n) ||
           (b->shape.rank == 2 && b->shape.dim[0] == 1 && b->shape.dim[1] == n);
}

/* No fusion family takes it: it is a kernel of its own. */
static bool runs_alone(const IrGraph *g, const IrGroup *gr, int id)
{
    return !gr && !ir_op_is_elementwise(g->nodes[id].op) && !ir_op_is_reduction(g->nodes[id].op);
}

/* The GEMM rules: cuBLAS reads its operands from memory, and cuBLASLt's epilogues take a
 * bias add and ReLU or GELU and nothing else. Returns false when none applies. */
static bool gemm_split(const IrGraph *g, IrBoundary *b)
{
    const IrNode *P = &g->nodes[b->pn], *C = &g->nodes[b->cn];
    const IrGroup *gp = ir_unit_group(g, b->up), *gc = ir_unit_group(g, b->uc);
    if (C->op == IR_MATMUL) b->why = IR_SPLIT_GEMM_READS;
    else if (gc && gc->kind == IR_GROUP_GEMM) b->why = IR_SPLIT_INTO_GEMM_GROUP;
    else if (gp && gp->kind == IR_GROUP_GEMM) b->why = IR_SPLIT_EPILOGUE_ENDS;
    else if (P->op == IR_MATMUL && C->op == IR_ADD && adds_bias(g, b->pn, C)) b->why = IR_SPLIT_BIAS_NOT_ALONE;
    else if (P->op == IR_MATMUL) b->why = IR_SPLIT_NO_EPILOGUE;
    else return false;
    return true;
}

/* The attention rules: its kernels read their operands from memory and store their
 * products, and the backward recomputes the forward's P. Returns false when none applies. */
static bool attention_split(const IrGraph *g, IrBoundary *b)
{
    const IrGroup *gp = ir_unit_group(g, b->up), *gc = ir_unit_group(g, b->uc);
    bool from = gp && gp->kind == IR_GROUP_ATTENTION, into = gc && gc->kind == IR_GROUP_ATTENTION;
    IrOp op = g->nodes[b->pn].op;
    if (from && into && op != IR_MATMUL && op != IR_PERMUTE) b->why = IR_SPLIT_ATTENTION_BACKWARD;
    else if (into) b->why = IR_SPLIT_ATTENTION_READS;
    else if (from) b->why = IR_SPLIT_ATTENTION_STORES;
    else return false;
    return true;
}

/* The rules of the groups' shapes and kinds (can_join, same_phase, the row groups).
 * Returns false when none applies. */
static bool group_split(const IrGraph *g, IrBoundary *b)
{
    const IrNode *P = &g->nodes[b->pn], *C = &g->nodes[b->cn];
    const IrGroup *gp = ir_unit_group(g, b->up), *gc = ir_unit_group(g, b->uc);
    if (runs_alone(g, gp, b->pn)) b->why = IR_SPLIT_OWN_KERNEL, b->own = b->pn;
    else if (runs_alone(g, gc, b->cn)) b->why = IR_SPLIT_OWN_KERNEL, b->own = b->cn;
    else if (ir_op_is_reduction(P->op) && !(gp && gc && gp->kind == IR_GROUP_ROW)) b->why = IR_SPLIT_REDUCTION;
    else if (P->recompute != C->recompute) b->why = IR_SPLIT_PHASE;
    else if (!ir_shape_fits(&P->shape, ir_unit_work(g, b->uc))) b->why = IR_SPLIT_WORK_STRETCH;
    else if (gp && gc && !ir_shape_equal(&gp->work, &gc->work)) b->why = IR_SPLIT_WORK_EXACT;
    else if (gp && gc && gp->kind == IR_GROUP_ROW && gc->kind == IR_GROUP_REDUCE &&
             (reduces_to_shape(g, b->uc) || gc->axis != gc->work.rank - 1))
        b->why = IR_SPLIT_ROW_ACROSS;
    else return false;
    return true;
}

/* Records, in B, the first rule that keeps B->up and B->uc apart. */
static void classify(Units *u, IrBoundary *b)
{
    const IrGraph *g = u->g;
    const IrGroup *gp = ir_unit_group(g, b->up), *gc = ir_unit_group(g, b->uc);
    bool classifier = (gp && gp->kind == IR_GROUP_CLASSIFIER) || (gc && gc->kind == IR_GROUP_CLASSIFIER);
    if (classifier) {
        b->why = IR_SPLIT_CLASSIFIER;
        return;
    }
    if (attention_split(g, b) || gemm_split(g, b) || group_split(g, b)) return;
    if (u->readers[b->pn] > 1) {
        b->why = IR_SPLIT_SHARED;
        b->readers = u->readers[b->pn];
    } else if ((b->via = detour_via(u, b->up, b->uc)) >= 0) {
        b->why = IR_SPLIT_CYCLE;
    } else if (gp && gc && gp->kind == IR_GROUP_REDUCE && gc->kind == IR_GROUP_REDUCE) {
        b->why = IR_SPLIT_TWO_REDUCTIONS;
    } else {
        b->why = IR_SPLIT_GREEDY;
    }
}

/* Each pair of units once, in the order of the first read: a group's members are
 * consecutive (ir_verify), so a unit's reads end before the next unit's begin and one mark
 * per producing unit (the last reader that recorded it) is enough. */
void fusion_boundaries(IrGraph *g)
{
    free(g->boundaries);
    g->boundaries = NULL;
    g->nboundaries = 0;
    if (!g->ngroups) return;
    Units u;
    units_init(&u, g);
    g->boundaries = xcalloc((size_t)u.adj_off[u.nunits] + 1, sizeof *g->boundaries);
    int *mark = xmalloc((size_t)u.nunits * sizeof *mark);
    for (int i = 0; i < u.nunits; i++) mark[i] = -1;
    for (int cn = 0; cn < g->nnodes; cn++) {
        int uc = unit_of(g, cn);
        if (uc < 0 || is_view(&g->nodes[cn])) continue;
        for (int k = 0; k < g->nodes[cn].nin; k++) {
            int pn = producer(g, cn, k), up = unit_of(g, pn);
            if (up < 0 || up == uc || mark[up] == uc) continue;
            mark[up] = uc;
            IrBoundary *b = &g->boundaries[g->nboundaries++];
            *b = (IrBoundary){ .up = up, .uc = uc, .pn = pn, .cn = cn, .own = -1, .via = -1 };
            classify(&u, b);
        }
    }
    free(mark);
    units_free(&u);
}
