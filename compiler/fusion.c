/* compiler/fusion.c: fusion groups, the kernels of the `default` mode (see ir.h, IrGroup).
 *
 * Eager mode launches one kernel per IR node; a training step of a small MLP is then a
 * few hundred launches, most of them elementwise ops on tensors that make a round trip
 * through memory. This pass groups nodes into kernels:
 *
 *  - pointwise groups: chains of elementwise ops over one work shape, a value kept in
 *    registers unless something outside the group reads it;
 *  - reduce groups: a reduction with the elementwise ops that feed it (its prologue), and
 *    sibling reductions over the same elements (the fp16 inf check and the clipping norm
 *    both read every gradient: one pass over it, not two);
 *  - row groups: chains of reductions along the last axis and the elementwise work
 *    around them, over the same rows (layernorm forward, or its backward's row part), in
 *    one block per row (see (1b));
 *  - scalar chains (learning-rate schedule, bias corrections, clip coefficient, loss
 *    scale) are cloned into every group that reads them: recomputing twenty flops per
 *    element is cheaper than a launch and a round trip through memory;
 *  - pooling's patches (a window's UNFOLD) are gathered from the image by the groups
 *    that read them rather than stored: a max pool is one kernel over its input;
 *  - a half value widened to f32 (a bf16 gradient that the norm's sum and the update
 *    read) is widened by each group that reads it rather than stored, each reading
 *    half the bytes;
 *  - in place: an ASSIGN joins the pointwise group computing its value, which then stores
 *    straight into the persistent tensor, provided every other reader of that tensor is
 *    ordered before the group (IR semantics: assignments land after the step);
 *  - multi-tensor launches: independent groups of one kind over static shapes that are
 *    ready at the same time (the per-parameter reductions, the per-parameter optimizer
 *    updates, the weight casts) share one launch; scalar groups held back only by the
 *    order of in-place writes (the loss-scale and step bookkeeping, which writes what the
 *    updates read) join it as its `last` groups, run after every other block is done;
 *  - GEMM groups: a matmul with the bias add and activation after it, where that saves
 *    the add's kernel (cuBLASLt epilogues; see (1c));
 *  - within a kernel's parameters: no group takes more than IR_GROUP_MAX_OPERANDS
 *    operands, so a merge that would need more is refused and a wide model (a sum of
 *    hundreds of layers, the optimizer of hundreds of parameters) fuses into more kernels
 *    rather than fewer impossible ones (see "operands" below).
 *
 * It works in four steps over each graph. (1) One backward sweep (consumers before
 * producers) builds clusters with a union-find: each elementwise node starts a cluster
 * and joins the cluster of its consumers when that is legal (see can_join), after first
 * merging the consumer clusters it would otherwise be stored for; every merge is refused
 * when a path leaves one cluster and re-enters the other, which would make the graph of
 * kernels cyclic. (2) Scalar chains are cloned into the clusters that read them; their
 * originals stay only where something else (a loss kernel, an ASSIGN, an output) needs
 * them; so are the pooling windows that only such clusters read, and widenings into the
 * groups beside their own that read them. (3) Tentative in-place ASSIGNs are checked
 * against the order constraints they need, and dropped where they would make a cycle.
 * (4) The kernels are ordered topologically, smallest original id first so that dumps
 * stay close to the unfused order, and the graph is rebuilt with each group's members
 * consecutive.
 */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* ---- node classes ---- */


static bool is_leaf(const IrNode *n) { return ir_node_is_placed(n); }

/* May be a member of any group (IrGroup's contract). */
static bool is_elementwise(const IrNode *n)
{
    return ir_op_is_elementwise(n->op) || ir_node_fuse(n) == IR_FUSE_SCALAR;
}

/* One value, recomputed wherever a group needs it rather than launched (never a random
 * draw: each clone would draw its own). */
static bool is_scalar(const IrNode *n)
{
    return is_elementwise(n) && ir_node_fuse(n) != IR_FUSE_RANDOM && ir_shape_is_one(&n->shape);
}

/* ---- state ---- */

/* A group being formed, kept at its union-find root. */
typedef struct Cluster {
    IrGroupKind kind;
    Shape work;
    int axis;
    bool reduce_to;
    bool recompute;         /* holds checkpointing's copies (same_phase) */
    int size;               /* members */
    int operands;           /* a bound on its operands (see "operands") */
} Cluster;

/* A node of the rebuilt graph before its id is known: an original node (index < n) or a
 * clone of a scalar one (src), with inputs in the same numbering. */
typedef struct WorkNode {
    int src;
    int group;              /* dense group index, or -1 */
    int in[IR_MAX_IN];
} WorkNode;

/* A unit with what orders it: the ready units of the rebuild (a unit's key is cleared
 * when it is emitted, perhaps while it is still in the heap as another's partner), and
 * units sorted by label or key. */
typedef struct Ready {
    int patience, key, unit;
} Ready;

static int by_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

typedef struct Fuser {
    IrProgram *p;
    const IrGraph *g;
    int n;
    int *use_off, *uses;    /* consumers of each node, CSR */
    bool *is_output;
    int *parent;            /* union-find over node ids; -1: in no cluster */
    int *next;              /* the members of a cluster, a circular list */
    Cluster *cl;            /* by root */
    bool *cloned;           /* a scalar, or pooling's patches, that only its readers'
                             * clones compute: dropped */
    bool *wide;             /* a scalar whose chain reads too much to be cloned */
    int **cone, *ncone;     /* per clonable scalar: the values its cloned chain reads */
    int *seen, stamp, *stack;
    int *ord;               /* per unit (a cluster's root, a node in none): its place in
                             * a topological order of the kernels' graph (see "order") */
    int *found, nfound;     /* the units a search reached */
    Ready *sorted;          /* relabel's scratch */
    int hub;                /* a node, or -1; see "order" */
    bool *to_hub, *from_hub;    /* per node: a path of nodes leads to the hub, from it */
    /* While a row group tries a merge (row_absorb), every write to parent, next and ord is
     * logged, so that an illegal merge is undone in time proportional to what it did. */
    bool logging;
    struct { int *slot, old; } *undo; int nundo, capundo;

    WorkNode *w; int nw, capw;
    Cluster *groups; int ngroups;       /* dense, from the roots */
    int *memo, *memo_group;             /* clone of scalar s in group memo_group[s] */

    int nunits;             /* groups, then one per work node (ngroups + w) */
    int **adj; int *nadj, *capadj;
    int *mark, mark_stamp;

    IrGraph *dst;
    int *newid;             /* work node -> id in dst, -1 until emitted */
    int nmulti;
    Ready *heap; int nheap;         /* rebuild: ready units, least patience and key first */
    int *pool, npool;       /* rebuild: ready units that may share a launch (some emitted) */
    int *waits;             /* rebuild: per unit, zero between uses */
} Fuser;

static const IrNode *src_node(const Fuser *f, int w) { return &f->g->nodes[f->w[w].src]; }

static void build_uses(Fuser *f)
{
    const IrGraph *g = f->g;
    f->use_off = xcalloc((size_t)f->n + 1, sizeof *f->use_off);
    for (int i = 0; i < f->n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) f->use_off[g->nodes[i].in[k] + 1]++;
    for (int i = 0; i < f->n; i++) f->use_off[i + 1] += f->use_off[i];
    f->uses = xmalloc((size_t)(f->use_off[f->n] + 1) * sizeof *f->uses);
    int *fill = xcalloc((size_t)f->n + 1, sizeof *fill);
    for (int i = 0; i < f->n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) {
            int x = g->nodes[i].in[k];
            f->uses[f->use_off[x] + fill[x]++] = i;
        }
    free(fill);
}

/* The hub of a training graph: the last forward value the backward reads (the model's
 * output, which the loss's gradient starts from), through which the forward pass leads
 * to the backward; -1 in a graph without a backward. */
static int find_hub(const Fuser *f)
{
    int nf = f->g->nforward;
    for (int v = nf - 1; v >= 0; v--)
        if (f->use_off[v] < f->use_off[v + 1] && f->uses[f->use_off[v + 1] - 1] >= nf) return v;
    return -1;
}

/* Which nodes reach the hub, and which the hub reaches, along the graph's own edges. */
static void find_hub_paths(Fuser *f)
{
    f->hub = find_hub(f);
    f->to_hub = xcalloc((size_t)f->n + 1, sizeof *f->to_hub);
    f->from_hub = xcalloc((size_t)f->n + 1, sizeof *f->from_hub);
    if (f->hub < 0) return;
    f->to_hub[f->hub] = f->from_hub[f->hub] = true;
    for (int v = f->hub - 1; v >= 0; v--)
        for (int k = f->use_off[v]; k < f->use_off[v + 1] && !f->to_hub[v]; k++)
            f->to_hub[v] = f->to_hub[f->uses[k]];
    for (int v = f->hub + 1; v < f->n; v++)
        for (int k = 0; k < f->g->nodes[v].nin && !f->from_hub[v]; k++)
            f->from_hub[v] = f->from_hub[f->g->nodes[v].in[k]];
}

static void fuser_init(Fuser *f, IrProgram *p, const IrGraph *g)
{
    memset(f, 0, sizeof *f);
    f->p = p, f->g = g, f->n = g->nnodes;
    size_t n = (size_t)f->n + 1;
    build_uses(f);
    find_hub_paths(f);
    f->is_output = xcalloc(n, sizeof *f->is_output);
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++)
        if (g->output[r] >= 0) f->is_output[g->output[r]] = true;
    f->parent = xmalloc(n * sizeof *f->parent);
    for (int i = 0; i < f->n; i++) f->parent[i] = -1;
    f->next = xmalloc(n * sizeof *f->next);
    f->cl = xcalloc(n, sizeof *f->cl);
    f->cloned = xcalloc(n, sizeof *f->cloned);
    f->seen = xcalloc(n, sizeof *f->seen);
    f->stack = xmalloc(n * sizeof *f->stack);
    f->ord = xmalloc(n * sizeof *f->ord);
    for (int i = 0; i < f->n; i++) f->ord[i] = i;
    f->found = xmalloc(n * sizeof *f->found);
    f->sorted = xmalloc(n * sizeof *f->sorted);
    f->wide = xcalloc(n, sizeof *f->wide);
    f->cone = xcalloc(n, sizeof *f->cone);
    f->ncone = xcalloc(n, sizeof *f->ncone);
}

static void fuser_free(Fuser *f)
{
    free(f->use_off), free(f->uses), free(f->is_output), free(f->parent), free(f->next);
    free(f->cl);
    free(f->cloned), free(f->seen), free(f->stack), free(f->w), free(f->groups);
    free(f->ord), free(f->found), free(f->sorted), free(f->undo);
    free(f->to_hub), free(f->from_hub);
    for (int v = 0; v < f->n; v++) free(f->cone[v]);
    free(f->wide), free(f->cone), free(f->ncone);
    free(f->memo), free(f->memo_group), free(f->mark), free(f->newid);
    for (int u = 0; u < f->nunits; u++) free(f->adj[u]);
    free(f->adj), free(f->nadj), free(f->capadj);
}

/* ---- clonable scalars ----
 *
 * A scalar chain cloned into a group brings along the values it reads. One that reads
 * many (the sum of every gradient's squared norm, which clipping and the fp16 inf check
 * need) would bring them all into every group that reads it, and no kernel takes that
 * many parameters: such a scalar is not cloned but computed once and read like any
 * other value. Each chain may read a share of IR_GROUP_MAX_OPERANDS such that a node
 * with every input a chain still fits one kernel. */
enum { CLONE_MAX_OPERANDS = IR_GROUP_MAX_OPERANDS / (IR_MAX_IN + 1) };
_Static_assert(CLONE_MAX_OPERANDS * IR_MAX_IN + 4 <= IR_GROUP_MAX_OPERANDS,
               "a node alone, every input a cloned chain, fits one kernel");

/* An f32 CONST: written into the kernel that reads it, not a parameter. */
static bool is_literal(const IrNode *n) { return ir_node_is_literal(n); }

/* A scalar that the clusters taking clones recompute (rather than read). */
static bool clonable(const Fuser *f, int v)
{
    return is_scalar(&f->g->nodes[v]) && !f->wide[v];
}

/* Adds X to the list CONE of N entries (F->seen at F->stamp marks its entries). */
static void cone_add(Fuser *f, int *cone, int *n, int x)
{
    if (f->seen[x] == f->stamp) return;
    f->seen[x] = f->stamp;
    if (*n < CLONE_MAX_OPERANDS + 1) cone[*n] = x;
    (*n)++;
}

/* Scalar V's cone: the values its cloned chain reads (RUNTIME members are parameters
 * too); V is wide when they are more than CLONE_MAX_OPERANDS. Inputs come first. */
static void find_cone(Fuser *f, int v)
{
    const IrNode *n = &f->g->nodes[v];
    int *cone = xmalloc((CLONE_MAX_OPERANDS + 1) * sizeof *cone), count = 0;
    f->stamp++;
    if (ir_node_fuse(n) == IR_FUSE_SCALAR) cone_add(f, cone, &count, v);
    for (int k = 0; k < n->nin; k++) {
        int x = n->in[k];
        if (clonable(f, x))
            for (int i = 0; i < f->ncone[x]; i++) cone_add(f, cone, &count, f->cone[x][i]);
        else if (!is_literal(&f->g->nodes[x]))
            cone_add(f, cone, &count, x);
    }
    f->wide[v] = count > CLONE_MAX_OPERANDS;
    if (f->wide[v]) count = 0, free(cone), cone = NULL;
    f->cone[v] = cone, f->ncone[v] = count;
}

static void find_cones(Fuser *f)
{
    for (int v = 0; v < f->n; v++)
        if (is_scalar(&f->g->nodes[v])) find_cone(f, v);
}

/* What reading X from outside adds to a cluster's bound: its chain's values for a
 * clonable scalar (at least one, for a reader that reads it stored), else 1. */
static int read_weight(const Fuser *f, int x)
{
    if (is_literal(&f->g->nodes[x])) return 0;
    return clonable(f, x) && f->ncone[x] > 1 ? f->ncone[x] : 1;
}

/* Node V's bound alone: every read and every use crosses its edge; its own parameter
 * when it is an output, an ASSIGN (the tensor), a RUNTIME or a DROPOUT (the seed). */
static int node_bound(const Fuser *f, int v)
{
    const IrNode *n = &f->g->nodes[v];
    bool seed = false;
    int bound = f->use_off[v + 1] - f->use_off[v] + f->is_output[v] + ir_member_params(n, false, &seed);
    for (int k = 0; k < n->nin; k++) bound += read_weight(f, n->in[k]);
    return bound;
}

/* ---- (1) clusters ---- */

/* *SLOT = VALUE, logged for row_absorb's undo while it tries a merge. */
static void set(Fuser *f, int *slot, int value)
{
    if (f->logging) {
        if (f->nundo == f->capundo) {
            f->capundo = f->capundo ? 2 * f->capundo : 64;
            f->undo = xrealloc(f->undo, (size_t)f->capundo * sizeof *f->undo);
        }
        f->undo[f->nundo].slot = slot;
        f->undo[f->nundo++].old = *slot;
    }
    *slot = value;
}

static int find(Fuser *f, int v)
{
    while (f->parent[v] != v) {
        int up = f->parent[f->parent[v]];
        set(f, &f->parent[v], up);
        v = up;
    }
    return v;
}

static int cluster_of(Fuser *f, int v) { return f->parent[v] < 0 ? -1 : find(f, v); }

static void start_cluster(Fuser *f, int v, IrGroupKind kind, Shape work, int axis, bool reduce_to)
{
    set(f, &f->parent[v], v);
    set(f, &f->next[v], v);
    const IrNode *n = &f->g->nodes[v];
    f->cl[v] = (Cluster){ kind, work, axis, reduce_to, .recompute = n->recompute, .size = 1,
                          .operands = node_bound(f, v) };
}

/* Scalar chains are cloned into these; other clusters hold scalar nodes themselves. */
static bool takes_clones(const Cluster *c)
{
    if (c->kind == IR_GROUP_ATTENTION || c->kind == IR_GROUP_CLASSIFIER)
        return false;   /* their kernels read their operands as stored */
    return c->kind == IR_GROUP_REDUCE || !ir_shape_is_one(&c->work);
}

/* Consumer C of V reads V itself (rather than a clone of it, or being a clone itself). */
static bool reads_original(Fuser *f, int v, int c)
{
    if (!clonable(f, v)) return true;
    if (f->cloned[c]) return false;
    int k = cluster_of(f, c);
    return k < 0 || !takes_clones(&f->cl[k]);
}

/* ---- order ----
 *
 * Every merge must keep the graph of kernels acyclic: clusters A and B may become one only
 * when no path leaves one, runs through other kernels and enters the other (a detour).
 * Searching the whole graph for one at every merge would make the pass quadratic, so the
 * units (clusters, and nodes in none) carry labels in a topological order of that graph:
 * a path only climbs, so the search for a path from A to B looks only at units labelled
 * between the two, and none goes from the later to the earlier. When A and B merge, the
 * units between them that A reaches (F) and those that reach B (K), which are disjoint
 * as there is no detour, are relabelled K, A, B, F, with the labels they had among them
 * (Pearce and Kelly's dynamic topological order), and the merged cluster takes B's
 * label, the later of the two. That order is valid whether or not the merge then happens.
 * When A reaches nothing before B, nothing moves: the merged cluster at B's place is in
 * order already (a chain joining its consumer, the common case, costs no relabelling).
 * Labels start as node ids, which are topological (inputs come first). */

static int unit_of_node(Fuser *f, int v)
{
    int k = cluster_of(f, v);
    return k < 0 ? v : k;
}

/* Node X's next member in its unit: the cluster's circular list, or X alone. */
static int next_member(const Fuser *f, int x) { return f->parent[x] < 0 ? x : f->next[x]; }

/* Marks unit U found, once, and puts its members on the search stack: a path that enters
 * a kernel may leave it from any of its members. */
static void visit(Fuser *f, int u, int *sp)
{
    if (f->seen[u] == f->stamp) return;
    f->seen[u] = f->stamp;
    f->found[f->nfound++] = u;
    int x = u;
    do f->stack[(*sp)++] = x, x = next_member(f, x);
    while (x != u);
}

/* Whether a member of unit U lies on a path of nodes to the hub (TO) or from it. */
static bool hub_path(const Fuser *f, int u, const bool *on)
{
    int x = u;
    do {
        if (on[x]) return true;
        x = next_member(f, x);
    } while (x != u);
    return false;
}

/* Whether a path leaves unit FROM, runs through other units and enters unit TO (FROM
 * labelled before TO); FOUND lists the units it reached, when there is none. A path of
 * nodes from FROM to the hub and on to TO, the hub in neither, is one: the kernels'
 * graph being acyclic, such a path cannot come back into FROM or leave TO again. That
 * answers at once what the search would take the whole graph between them to find (a
 * forward value and the backward kernel that reads it). */
static bool detour(Fuser *f, int from, int to)
{
    if (f->hub >= 0 && unit_of_node(f, f->hub) != from && unit_of_node(f, f->hub) != to &&
        hub_path(f, from, f->to_hub) && hub_path(f, to, f->from_hub))
        return true;
    int sp = 0, hi = f->ord[to];
    f->stamp++;
    f->nfound = 0;
    int x = from;
    do {
        for (int k = f->use_off[x]; k < f->use_off[x + 1]; k++) {
            int u = unit_of_node(f, f->uses[k]);
            if (u != from && u != to && f->ord[u] < hi) visit(f, u, &sp);
        }
        x = next_member(f, x);
    } while (x != from);
    while (sp > 0) {
        x = f->stack[--sp];
        for (int k = f->use_off[x]; k < f->use_off[x + 1]; k++) {
            int u = unit_of_node(f, f->uses[k]);
            if (u == to) return true;
            if (f->ord[u] < hi) visit(f, u, &sp);
        }
    }
    return false;
}

/* Lists in FOUND the units labelled after FROM's that reach unit TO (not through FROM). */
static void reaching(Fuser *f, int from, int to)
{
    int sp = 0, lo = f->ord[from];
    f->stamp++;
    f->nfound = 0;
    int x = to;
    do {
        f->stack[sp++] = x;
        x = next_member(f, x);
    } while (x != to);
    f->seen[to] = f->stamp;
    while (sp > 0) {
        x = f->stack[--sp];
        const IrNode *n = &f->g->nodes[x];
        for (int k = 0; k < n->nin; k++) {
            int u = unit_of_node(f, n->in[k]);
            if (u != from && f->ord[u] > lo) visit(f, u, &sp);
        }
    }
}

/* The order's promise, checked once the merges that rely on it are done: every edge
 * between two units climbs. */
static void verify_order(Fuser *f)
{
    for (int v = 0; v < f->n; v++) {
        const IrNode *n = &f->g->nodes[v];
        for (int k = 0; k < n->nin; k++) {
            int a = unit_of_node(f, n->in[k]), b = unit_of_node(f, v);
            if (a != b && f->ord[a] >= f->ord[b])
                CGC_INTERNAL("fusion: graph %s, the kernels' order has %%%d (label %d) after its "
                             "reader %%%d (label %d)", f->g->name, n->in[k], f->ord[a], v, f->ord[b]);
        }
    }
}

static int by_label(const void *a, const void *b)
{
    const Ready *x = a, *y = b;
    return (x->key > y->key) - (x->key < y->key);
}

/* Relabels K (the found units that reach UPPER), LOWER, UPPER, then F (those LOWER
 * reaches, NF of them at SORTED), with their own labels in that order. */
static void relabel(Fuser *f, int lower, int upper, int nf)
{
    Ready *r = f->sorted;
    int n = nf;
    for (int i = 0; i < f->nfound; i++) r[n++] = (Ready){ 0, f->ord[f->found[i]], f->found[i] };
    qsort(r, (size_t)nf, sizeof *r, by_label);
    qsort(r + nf, (size_t)(n - nf), sizeof *r, by_label);
    /* the unit order: K (at r[nf..n)), lower, upper, F (at r[0..nf)) */
    int *units = xmalloc(((size_t)n + 2) * sizeof *units), *labels = xmalloc(((size_t)n + 2) * sizeof *labels);
    int m = 0;
    for (int i = nf; i < n; i++) units[m++] = r[i].unit;
    units[m++] = lower, units[m++] = upper;
    for (int i = 0; i < nf; i++) units[m++] = r[i].unit;
    for (int i = 0; i < m; i++) labels[i] = f->ord[units[i]];
    qsort(labels, (size_t)m, sizeof *labels, by_int);
    for (int i = 0; i < m; i++) f->ord[units[i]] = labels[i];
    free(units);
    free(labels);
}

/* Whether clusters A and B may merge without a cycle of kernels; if so, the order is
 * made ready for it (see "order"). */
static bool acyclic_merge(Fuser *f, int a, int b)
{
    int lower = f->ord[a] < f->ord[b] ? a : b, upper = lower == a ? b : a;
    if (detour(f, lower, upper)) return false;
    if (f->nfound == 0) return true;   /* nothing LOWER reaches lies before UPPER: in order */
    for (int i = 0; i < f->nfound; i++) f->sorted[i] = (Ready){ 0, f->ord[f->found[i]], f->found[i] };
    int nf = f->nfound;
    reaching(f, lower, upper);
    relabel(f, lower, upper, nf);
    return true;
}

/* Whether clusters A and B may share a kernel as far as checkpointing goes: its copies
 * have kernels of their own. With a forward node a copy would be computed (and kept) in
 * the forward again; with a backward one, that kernel's other inputs (the gradients
 * waiting for the copy) would be held live through the recomputation. */
static bool same_phase(const Cluster *a, const Cluster *b)
{
    return a->recompute == b->recompute;
}

/* ---- operands ----
 *
 * A cluster's kernel takes a parameter per value it reads from outside, per member it
 * stores, and a few more (ir_group_operands); no cluster may need more than
 * IR_GROUP_MAX_OPERANDS. Counting distinct values at every merge would cost time in
 * proportion to the cluster, so each cluster carries a bound instead, kept as clusters
 * merge: every read and use that crosses its edge counted once per edge. Only a merge
 * whose bound is over the limit counts exactly. */

/* Whether the clones of C, wherever they are made, read X itself: a clonable scalar's
 * clone reads the values of its chain that are not clonable. */
static bool clone_reads(const Fuser *f, int x, int c)
{
    return clonable(f, c) && !clonable(f, x);
}

/* The bound of clusters A and B as one: theirs, less the edges between them (each seen
 * from the smaller side), which no longer cross; a use by a reader whose clones read the
 * value stays counted, as the value is stored for them. */
static int merged_bound(Fuser *f, int a, int b)
{
    int small = f->cl[a].size <= f->cl[b].size ? a : b, other = small == a ? b : a;
    int bound = f->cl[a].operands + f->cl[b].operands, x = small;
    do {
        const IrNode *n = &f->g->nodes[x];
        for (int k = 0; k < n->nin; k++)
            if (cluster_of(f, n->in[k]) == other)
                bound -= read_weight(f, n->in[k]) + !clone_reads(f, n->in[k], x);
        for (int k = f->use_off[x]; k < f->use_off[x + 1]; k++)
            if (cluster_of(f, f->uses[k]) == other)
                bound -= read_weight(f, x) + !clone_reads(f, x, f->uses[k]);
        x = f->next[x];
    } while (x != small);
    return bound;
}

/* 1 when X is new to the count being taken (F->seen at F->stamp). */
static int count_new(Fuser *f, int x)
{
    if (f->seen[x] == f->stamp) return 0;
    f->seen[x] = f->stamp;
    return 1;
}

/* Member X's share of the exact count of clusters A and B as one (a kernel that takes
 * clones when CLONES): its own parameters, and the values it reads that are new. */
static int member_operands(Fuser *f, int x, int a, int b, bool clones, bool *seed)
{
    const IrNode *n = &f->g->nodes[x];
    bool stored = f->is_output[x];
    for (int k = f->use_off[x]; k < f->use_off[x + 1] && !stored; k++) {
        int c = f->uses[k], kc = cluster_of(f, c);
        stored = (kc != a && kc != b && reads_original(f, x, c)) || clone_reads(f, x, c);
    }
    int count = ir_member_params(n, stored, seed);
    for (int k = 0; k < n->nin; k++) {
        int in = n->in[k], c = cluster_of(f, in);
        if (c == a || c == b || is_literal(&f->g->nodes[in])) continue;
        if (clones && clonable(f, in))
            for (int i = 0; i < f->ncone[in]; i++) count += count_new(f, f->cone[in][i]);
        else
            count += count_new(f, in);
    }
    return count;
}

/* The operands of clusters A and B as one kernel of B's kind, as ir_group_operands will
 * count them once the clones are made. */
static int exact_operands(Fuser *f, int a, int b)
{
    bool clones = takes_clones(&f->cl[b]), seed = false;
    int count = 0, roots[2] = { a, b };
    f->stamp++;
    for (int r = 0; r < 2; r++) {
        int x = roots[r];
        do {
            count += member_operands(f, x, a, b, clones, &seed);
            x = f->next[x];
        } while (x != roots[r]);
    }
    return count;
}

/* Whether B (a root) may absorb cluster A as far as its kernel's parameters go. */
static bool operands_fit(Fuser *f, int a, int b)
{
    return merged_bound(f, a, b) <= IR_GROUP_MAX_OPERANDS ||
           exact_operands(f, a, b) <= IR_GROUP_MAX_OPERANDS;
}

/* B absorbs A (B's work and kind stay); their member lists are spliced into one. */
static void merge(Fuser *f, int a, int b)
{
    f->cl[b].operands = merged_bound(f, a, b);
    f->cl[b].size += f->cl[a].size;
    f->cl[b].recompute |= f->cl[a].recompute;
    set(f, &f->parent[a], b);
    int t = f->next[a];
    set(f, &f->next[a], f->next[b]);
    set(f, &f->next[b], t);
    if (f->ord[a] > f->ord[b]) set(f, &f->ord[b], f->ord[a]);   /* the later place (see "order") */
}

/* Two consumer clusters of one value that may become one kernel. */
static bool siblings(const Cluster *a, const Cluster *b)
{
    if (a->kind != b->kind || !ir_shape_equal(&a->work, &b->work) || !same_phase(a, b)) return false;
    return a->kind == IR_GROUP_POINTWISE || (a->axis == b->axis && !a->reduce_to && !b->reduce_to);
}

/* Whether a member of cluster A reads a member of cluster B. */
static bool reads_cluster(Fuser *f, int a, int b)
{
    int x = a;
    do {
        const IrNode *n = &f->g->nodes[x];
        for (int j = 0; j < n->nin; j++)
            if (cluster_of(f, n->in[j]) == b) return true;
        x = f->next[x];
    } while (x != a);
    return false;
}

/* Sibling clusters A and B may become one kernel: the kernels' graph stays acyclic, and
 * reductions stay apart from what reads them. A reduction's value exists only when its
 * kernel ends, so in a reduce group no member may read another's (the gradient of
 * max(t) compares t with max(t), then sums the ties over the same elements). */
static bool may_merge(Fuser *f, int a, int b)
{
    if (f->cl[a].kind == IR_GROUP_REDUCE && (reads_cluster(f, a, b) || reads_cluster(f, b, a)))
        return false;
    return acyclic_merge(f, a, b);
}

/* V is read by several clusters over V's own shape: merge those that can be one kernel,
 * so that V is computed once and read from registers. */
static void merge_consumers(Fuser *f, int v)
{
    const Shape *s = &f->g->nodes[v].shape;
    for (int i = f->use_off[v]; i < f->use_off[v + 1]; i++) {
        int a = cluster_of(f, f->uses[i]);
        if (a < 0 || a == cluster_of(f, v) || !reads_original(f, v, f->uses[i]) ||
            !ir_shape_equal(&f->cl[a].work, s))
            continue;
        for (int j = i + 1; j < f->use_off[v + 1]; j++) {
            int b = cluster_of(f, f->uses[j]);
            a = cluster_of(f, f->uses[i]);
            if (b < 0 || b == a || b == cluster_of(f, v) || !reads_original(f, v, f->uses[j]) ||
                !siblings(&f->cl[a], &f->cl[b]))
                continue;
            if (operands_fit(f, b, a) && may_merge(f, a, b)) merge(f, b, a);
        }
    }
}

/* Whether V (alone in its cluster) may join consumer cluster B: a member read outside
 * its group is stored, and stored members and DROPOUTs must have exactly the work shape;
 * others only need to stretch to it. */
static bool can_join(Fuser *f, int v, int b)
{
    const IrNode *n = &f->g->nodes[v];
    if (takes_clones(&f->cl[b]) == is_scalar(n)) return false;
    bool stored = f->is_output[v];
    for (int k = f->use_off[v]; k < f->use_off[v + 1]; k++) {
        int c = f->uses[k];
        if (cluster_of(f, c) != b && reads_original(f, v, c)) stored = true;
    }
    const Shape *work = &f->cl[b].work;
    bool shape_ok = stored || ir_node_fuse(n) == IR_FUSE_RANDOM ? ir_shape_equal(&n->shape, work)
                                                  : ir_shape_fits(&n->shape, work);
    return shape_ok && same_phase(&f->cl[find(f, v)], &f->cl[b]) && operands_fit(f, find(f, v), b) &&
           acyclic_merge(f, find(f, v), b);
}

/* A scalar that only clusters taking clones read: dropped, each of them computes it. */
static bool only_cloned(Fuser *f, int v)
{
    if (f->is_output[v] || f->use_off[v] == f->use_off[v + 1]) return false;
    for (int k = f->use_off[v]; k < f->use_off[v + 1]; k++)
        if (reads_original(f, v, f->uses[k])) return false;
    return true;
}

static void cluster_elementwise(Fuser *f, int v)
{
    const IrNode *n = &f->g->nodes[v];
    if (is_scalar(n) && only_cloned(f, v)) {
        f->cloned[v] = true;
        return;
    }
    start_cluster(f, v, IR_GROUP_POINTWISE, n->shape, 0, false);
    merge_consumers(f, v);
    for (int k = f->use_off[v]; k < f->use_off[v + 1]; k++) {
        int b = cluster_of(f, f->uses[k]);
        if (b >= 0 && b != find(f, v) && reads_original(f, v, f->uses[k]) && can_join(f, v, b)) {
            merge(f, find(f, v), b);
            return;
        }
    }
}

static void cluster_node(Fuser *f, int v)
{
    const IrNode *n = &f->g->nodes[v];
    if (is_elementwise(n)) {
        cluster_elementwise(f, v);
    } else if (ir_op_is_reduction(n->op)) {
        start_cluster(f, v, IR_GROUP_REDUCE, f->g->nodes[n->in[0]].shape, n->axis,
                      ir_op_reduces_to_shape(n->op));
    } else if (ir_node_fuse(n) == IR_FUSE_EFFECT && is_elementwise(&f->g->nodes[n->in[0]])) {
        /* Tentative: in_place() keeps it only where the order allows. */
        start_cluster(f, v, IR_GROUP_POINTWISE, f->g->nodes[n->in[0]].shape, 0, false);
    }
}

/* ---- (1b) row groups ----
 *
 * Step (1) ends a kernel at every reduction, since a cluster never reads its own: a
 * layernorm is then three or four kernels forward (mean; centred square and its mean;
 * eps and rsqrt; normalise, scale, shift) and about six backward, each a pass over the
 * same rows. A row group (ir.h, IR_GROUP_ROW) runs such a chain in one block per row, in
 * phases split by block-wide reductions. Each cluster of reductions along the last axis
 * seeds one; it then absorbs, until nothing more fits, the neighbouring clusters over the
 * same rows (other row reductions, pointwise clusters over the rows' elements or over
 * one value per row) and the RESHAPEs between row shapes that connect them. Each merge
 * is tried whole and undone when it would make the kernels' graph cyclic or mix
 * checkpointing's phases. Nothing here knows a layernorm: any chain over rows fuses. */

/* S is one value per row of WORK: [rows...] or [rows..., 1]. */
static bool is_row_shape(const Shape *s, const Shape *work)
{
    Shape row = ir_shape_reduce(work, work->rank - 1), row1 = *work;
    row1.dim[row1.rank - 1] = 1;
    return ir_shape_equal(s, &row) || ir_shape_equal(s, &row1);
}

/* Computed once per row in a row group over WORK (rather than per element). */
static bool per_row(const Shape *s, const Shape *work)
{
    return is_row_shape(s, work) || ir_shape_is_one(s);
}

/* A work shape a row group can take: rows of a static length > 1, more than one row,
 * and one value per row ([rows...]) told apart from an operand broadcast along the rows:
 * over [4,4], a [4] could be either, so such works are left to step (1)'s clusters. */
static bool row_work(const Shape *work)
{
    if (work->rank < 2 || IR_DIM_IS_SYM(work->dim[work->rank - 1]) || work->dim[work->rank - 1] < 2)
        return false;
    Shape row = ir_shape_reduce(work, work->rank - 1);
    return !ir_shape_is_one(&row) && !ir_shape_fits(&row, work);
}

/* Reduction node V runs along the rows of WORK. */
static bool row_reduction(const Fuser *f, int v, const Shape *work)
{
    const IrNode *n = &f->g->nodes[v];
    if (!ir_shape_equal(&f->g->nodes[n->in[0]].shape, work)) return false;
    if (ir_op_reduces_to_shape(n->op)) return is_row_shape(&n->shape, work) && n->shape.rank == work->rank;
    return n->axis == work->rank - 1;
}

/* Node V may be a member of a row group over WORK (ir.h's contract). */
static bool row_member_ok(const Fuser *f, int v, const Shape *work)
{
    const IrNode *n = &f->g->nodes[v];
    if (ir_op_is_reduction(n->op)) return row_reduction(f, v, work);
    if (ir_node_fuse(n) == IR_FUSE_VIEW)
        return per_row(&n->shape, work) && per_row(&f->g->nodes[n->in[0]].shape, work) &&
               n->dtype == f->g->nodes[n->in[0]].dtype;
    if (!is_elementwise(n) || ir_node_fuse(n) == IR_FUSE_RANDOM) return false;
    if (!per_row(&n->shape, work)) return ir_shape_fits(&n->shape, work);
    for (int k = 0; k < n->nin; k++)   /* a row value reads row values */
        if (!per_row(&f->g->nodes[n->in[k]].shape, work)) return false;
    return true;
}

/* Cluster K (a root) may join a row group over WORK. */
static bool row_candidate(const Fuser *f, int k, const Shape *work)
{
    const Cluster *c = &f->cl[k];
    if (!ir_shape_equal(&c->work, work) && !is_row_shape(&c->work, work)) return false;
    int x = k;
    do {
        if (!row_member_ok(f, x, work)) return false;
        x = f->next[x];
    } while (x != k);
    return true;
}

/* Cluster K (a root) seeds a row group: reductions along its rows. */
static bool row_seed(const Fuser *f, int k)
{
    const Cluster *c = &f->cl[k];
    return c->kind == IR_GROUP_REDUCE && row_work(&c->work) && row_candidate(f, k, &c->work);
}

/* Row group G absorbs RESHAPE node R (when R >= 0) and then cluster K (when K >= 0), or
 * neither when either merge is illegal. */
static bool row_absorb(Fuser *f, int g, int r, int k)
{
    Cluster saved_g = f->cl[g], saved_r = r >= 0 ? f->cl[r] : saved_g;
    f->logging = true;
    f->nundo = 0;
    bool ok = true;
    if (r >= 0) {
        start_cluster(f, r, IR_GROUP_POINTWISE, f->g->nodes[r].shape, 0, false);
        ok = same_phase(&f->cl[r], &f->cl[g]) && operands_fit(f, r, g) && acyclic_merge(f, r, g);
        if (ok) merge(f, r, g);
    }
    if (ok && k >= 0) {
        ok = same_phase(&f->cl[k], &f->cl[g]) && operands_fit(f, k, g) && acyclic_merge(f, k, g);
        if (ok) merge(f, k, g);
    }
    f->logging = false;
    if (!ok) {   /* undo, newest first; merges write only g's and r's clusters */
        while (f->nundo > 0) f->nundo--, *f->undo[f->nundo].slot = f->undo[f->nundo].old;
        f->cl[g] = saved_g;
        if (r >= 0) f->cl[r] = saved_r;
    }
    return ok;
}

/* RESHAPE R, outside any cluster, between row shapes of group G: the one cluster other
 * than G among R's input and readers (-1 when there is none), or -2 when R cannot join
 * (a reader outside any cluster, an output, two other clusters). */
static int reshape_partner(Fuser *f, int g, int r)
{
    if (f->is_output[r] || !row_member_ok(f, r, &f->cl[g].work)) return -2;
    int partner = -1;
    int in = f->g->nodes[r].in[0], kin = cluster_of(f, in);
    if (kin < 0) return -2;
    if (kin != g) partner = kin;
    for (int u = f->use_off[r]; u < f->use_off[r + 1]; u++) {
        int k = cluster_of(f, f->uses[u]);
        if (k < 0 || (k != g && partner >= 0 && k != partner)) return -2;
        if (k != g) partner = k;
    }
    return partner;
}

/* Tries to absorb neighbour node Y of row group G (a reader or input of a member): its
 * cluster, or a RESHAPE with the cluster on its other side. */
static bool row_absorb_neighbour(Fuser *f, int g, int y)
{
    const Shape *work = &f->cl[g].work;
    int k = cluster_of(f, y);
    if (k == g) return false;
    if (k >= 0) return row_candidate(f, k, work) && row_absorb(f, g, -1, k);
    if (ir_node_fuse(&f->g->nodes[y]) != IR_FUSE_VIEW) return false;
    int partner = reshape_partner(f, g, y);
    if (partner == -2 || (partner >= 0 && !row_candidate(f, partner, work))) return false;
    return row_absorb(f, g, y, partner);
}

/* One absorption around row group G; false when nothing more joins. */
static bool row_grow_once(Fuser *f, int g)
{
    int x = g;
    do {
        const IrNode *n = &f->g->nodes[x];
        for (int u = f->use_off[x]; u < f->use_off[x + 1]; u++)
            if (row_absorb_neighbour(f, g, f->uses[u])) return true;
        for (int k = 0; k < n->nin; k++)
            if (!is_leaf(&f->g->nodes[n->in[k]]) && row_absorb_neighbour(f, g, n->in[k])) return true;
        x = f->next[x];
    } while (x != g);
    return false;
}

static void row_groups(Fuser *f)
{
    for (int v = 0; v < f->n; v++) {
        if (f->parent[v] != v || !row_seed(f, v)) continue;
        bool grown = false;
        while (row_grow_once(f, v)) grown = true;
        if (grown) f->cl[v].kind = IR_GROUP_ROW, f->cl[v].axis = f->cl[v].work.rank - 1, f->cl[v].reduce_to = false;
    }
}

/* ---- (1c) GEMM groups ----
 *
 * A linear layer is a GEMM, then a kernel that adds the bias and applies the activation,
 * reading the GEMM's output back from memory. cuBLASLt's epilogues do that add and
 * activation as the GEMM stores its result (ir.h, IR_GROUP_GEMM). The pass forms such a
 * group only where it removes a launch: where step (1) made the bias add (with its
 * activation) a kernel of its own, holding nothing else but the bias's own computation
 * (a cast of the stored bias), which then becomes a small kernel of its own over the
 * bias, ready at the start like the weight casts and launched with them (were it not,
 * the count would stay as it was, never grow). Where the add
 * shares its kernel with more work (resmlp's residual add, the logits' cast to f32),
 * that kernel would remain, so the GEMM stays plain. */

/* A value of shape [m, n] whose element type cuBLASLt's epilogues take. */
static bool gemm_type(DType t) { return t == DT_F32 || t == DT_F16 || t == DT_BF16; }

/* The node's single reader, or -1 when it has none, several, or is an output. */
static int only_reader(const Fuser *f, int v)
{
    if (f->is_output[v] || f->use_off[v + 1] - f->use_off[v] != 1) return -1;
    return f->uses[f->use_off[v]];
}

/* BIAS is a vector over the n columns of matmul MM: [n] or [1, n], of MM's dtype. */
static bool gemm_bias_ok(const Fuser *f, int mm, int bias)
{
    const IrNode *m = &f->g->nodes[mm], *b = &f->g->nodes[bias];
    int64_t n = m->shape.dim[1];
    bool vec = (b->shape.rank == 1 && b->shape.dim[0] == n) ||
               (b->shape.rank == 2 && b->shape.dim[0] == 1 && b->shape.dim[1] == n);
    return vec && b->dtype == m->dtype && !is_scalar(b);
}

/* MM is a plain 2-D product read only by an ADD of a bias: that ADD, or -1. */
static int gemm_bias_add(const Fuser *f, int mm)
{
    const IrNode *m = &f->g->nodes[mm];
    const IrNode *a = &f->g->nodes[m->in[0]], *b = &f->g->nodes[m->in[1]];
    if (m->shape.rank != 2 || a->shape.rank != 2 || b->shape.rank != 2 || !gemm_type(m->dtype) ||
        IR_DIM_IS_SYM(m->shape.dim[1]) || m->shape.dim[1] < 2)
        return -1;
    int add = only_reader(f, mm);
    if (add < 0) return -1;
    const IrNode *x = &f->g->nodes[add];
    if (x->op != IR_ADD || x->dtype != m->dtype || !ir_shape_equal(&x->shape, &m->shape) ||
        x->in[0] == x->in[1])
        return -1;
    return gemm_bias_ok(f, mm, x->in[x->in[0] == mm]) ? add : -1;
}

/* The activation joining the GEMM group of ADD (in cluster K), or -1: a RELU when it is
 * ADD's only reader; a GELU_TANH that ADD also feeds elsewhere only with the aux output,
 * whose leading dimension n cuBLASLt wants a multiple of 8, and only in f32: cuBLASLt
 * applies the GELU to the unrounded sum, while the IR's GELU reads the stored ADD, which
 * f16 and bf16 round. */
static int gemm_activation(Fuser *f, int add, int k)
{
    const IrNode *x = &f->g->nodes[add];
    int only = only_reader(f, add);
    for (int u = f->use_off[add]; u < f->use_off[add + 1]; u++) {
        int r = f->uses[u];
        const IrNode *act = &f->g->nodes[r];
        if (cluster_of(f, r) != k || act->dtype != x->dtype) continue;
        if (act->op == IR_RELU && r == only) return r;
        bool aux_ok = x->shape.dim[1] % 8 == 0 && x->dtype == DT_F32;
        if (act->op == IR_GELU_TANH && (r == only || aux_ok)) return r;
    }
    return -1;
}

/* Cluster K holds exactly ADD, ACT (when >= 0) and possibly ADD's BIAS, the bias being
 * computed from leaves (a cast of the stored bias) for ADD alone. */
static bool gemm_cluster_exact(Fuser *f, int k, int add, int act, int bias)
{
    const IrNode *b = &f->g->nodes[bias];
    int x = k;
    do {
        if (x == bias) {
            if (only_reader(f, bias) != add) return false;
            for (int j = 0; j < b->nin; j++)
                if (!is_leaf(&f->g->nodes[b->in[j]])) return false;
        } else if (x != add && x != act) {
            return false;
        }
        x = f->next[x];
    } while (x != k);
    return true;
}

/* Makes MM (a cluster of its own, of kind GEMM), ADD and ACT (when >= 0) one GEMM group;
 * the bias, if it was in ADD's cluster, becomes a pointwise cluster of its own. */
static void gemm_form(Fuser *f, int mm, int add, int act, int bias)
{
    int k = find(f, add);
    bool bias_in = cluster_of(f, bias) == k;
    f->parent[add] = -1;
    if (act >= 0) f->parent[act] = -1;
    if (bias_in) {
        f->parent[bias] = -1;
        start_cluster(f, bias, IR_GROUP_POINTWISE, f->g->nodes[bias].shape, 0, false);
    }
    start_cluster(f, add, IR_GROUP_POINTWISE, f->g->nodes[add].shape, 0, false);
    merge(f, add, mm);
    if (act >= 0) {
        start_cluster(f, act, IR_GROUP_POINTWISE, f->g->nodes[act].shape, 0, false);
        merge(f, act, mm);
    }
}

/* Tries to make matmul MM the head of a GEMM group. */
static void gemm_group(Fuser *f, int mm)
{
    int add = gemm_bias_add(f, mm);
    int k = add < 0 ? -1 : cluster_of(f, add);
    if (k < 0 || f->cl[k].kind != IR_GROUP_POINTWISE || !ir_shape_equal(&f->cl[k].work, &f->g->nodes[mm].shape))
        return;
    const IrNode *x = &f->g->nodes[add];
    int bias = x->in[x->in[0] == mm], act = gemm_activation(f, add, k);
    int end = act >= 0 ? act : add;   /* stored by the epilogue: only a value someone reads */
    bool read = f->is_output[end] || f->use_off[end] < f->use_off[end + 1];
    if (!read || !gemm_cluster_exact(f, k, add, act, bias)) return;
    start_cluster(f, mm, IR_GROUP_GEMM, f->g->nodes[mm].shape, 0, false);
    if (same_phase(&f->cl[mm], &f->cl[k])) gemm_form(f, mm, add, act, bias);
    else f->parent[mm] = -1;   /* checkpointing's copy beside a forward node: stays plain */
}

static void gemm_groups(Fuser *f)
{
    for (int v = 0; v < f->n; v++)
        if (ir_node_fuse(&f->g->nodes[v]) == IR_FUSE_MATMUL && f->parent[v] < 0) gemm_group(f, v);
}

/* ---- (1d) attention groups ----
 *
 * Attention is a composition (builtins.c): S = Q K^T, scaled, causally masked, P =
 * softmax(S), O = P V; its backward dP = dO V^T, dV = P^T dO, dS = softmax_grad(dP, P),
 * masked and scaled, dQ = dS K, dK = dS^T Q. Run as such, P (T x T per head) is written by
 * the forward and read twice by the backward. The pass makes each chain one attention
 * group (ir.h, IR_GROUP_ATTENTION): the forward's kernel keeps S and P on chip and stores
 * O and each row's log-sum-exp, the backward's recomputes P from those. Both or neither:
 * a forward whose P something else reads stays a composition, and so does a chain whose
 * links other kernels also hold or read. The casts between the links (autocast's f32
 * softmax under bf16 and fp16) join the chains. */

enum { ATTN_MAX_MEMBERS = 16 };

typedef struct AttnChain {
    int member[ATTN_MAX_MEMBERS], n;
    bool ok;                /* every link so far is one */
} AttnChain;

typedef struct AttnMatch {
    int q, k, v, dout;      /* the operands the kernels read */
    int pv, sm;             /* O = P V; the softmax */
    bool causal;
    double scale;
    AttnChain fwd, bwd;
} AttnMatch;

static const IrNode *attn_node(const Fuser *f, int v) { return &f->g->nodes[v]; }

/* Node V joins chain C: it is a kernel of its own or in a pointwise cluster (which
 * attn_form checks holds nothing but links), is no output, and is in the chain's phase. */
static void attn_link(Fuser *f, AttnChain *c, int v)
{
    int k = cluster_of(f, v);
    bool alone = k < 0 || f->cl[k].kind == IR_GROUP_POINTWISE;
    bool phase = c->n == 0 || attn_node(f, v)->recompute == attn_node(f, c->member[0])->recompute;
    c->ok = c->ok && alone && phase && !f->is_output[v] && c->n < ATTN_MAX_MEMBERS;
    if (c->ok) c->member[c->n++] = v;
}

/* From V up through the casts whose only reader is the chain's next link. */
static int attn_up_casts(Fuser *f, AttnChain *c, int v, int reader)
{
    while (c->ok && attn_node(f, v)->op == IR_CAST && only_reader(f, v) == reader) {
        attn_link(f, c, v);
        reader = v;
        v = attn_node(f, v)->in[0];
    }
    return v;
}

/* From V down through the casts that are V's only reader. */
static int attn_down_casts(Fuser *f, AttnChain *c, int v)
{
    for (int r; c->ok && (r = only_reader(f, v)) >= 0 && attn_node(f, r)->op == IR_CAST; v = r)
        attn_link(f, c, r);
    return v;
}

/* The value of the scalar literal that multiplies the other input of MUL node X, into
 * *SCALE, and that other input; -1 when X is not such a product. */
static int attn_scaled(Fuser *f, int x, double *scale)
{
    const IrNode *n = attn_node(f, x);
    if (n->op != IR_MUL) return -1;
    for (int j = 0; j < 2; j++) {
        const IrNode *s = attn_node(f, n->in[j]);
        if (ir_node_is_literal(s) && ir_shape_is_one(&s->shape)) {
            *scale = s->value;
            return n->in[1 - j];
        }
    }
    return -1;
}

/* A MATMUL with exactly the transposes FLAGS (TF32 or not); no sum over the batch. */
static bool attn_matmul(const IrNode *n, int flags)
{
    return n->op == IR_MATMUL && (n->flags & ~IR_MATMUL_TF32) == flags;
}

/* A PERMUTE between a linear layer's [N, T, H, D] and attention's [N, H, T, D] (either
 * way): perm 0, 2, 1, 3. */
static bool attn_heads_permute(const IrNode *n)
{
    return n->op == IR_PERMUTE && n->shape.rank == 4 && ir_perm_axis(n, 0) == 0 &&
           ir_perm_axis(n, 1) == 2 && ir_perm_axis(n, 2) == 1 && ir_perm_axis(n, 3) == 3;
}

/* Product V's permute back to [N, T, H, D] joins chain C when it is V's only reader: the
 * kernel writes the product there, as the heads of each position side by side. */
static void attn_output_view(Fuser *f, AttnChain *c, int v)
{
    int r = only_reader(f, v);
    if (c->ok && r >= 0 && attn_heads_permute(attn_node(f, r)) && cluster_of(f, r) < 0 && !f->is_output[r])
        attn_link(f, c, r);
}

/* The forward chain ending at softmax SM, up to S = Q K^T; true when it is attention's. */
static bool attn_forward_up(Fuser *f, int sm, AttnMatch *m)
{
    const IrNode *s = attn_node(f, sm);
    if (s->op != IR_SOFTMAX || s->shape.rank < 3 || s->axis != s->shape.rank - 1) return false;
    AttnChain *c = &m->fwd;
    attn_link(f, c, sm);
    int x = attn_up_casts(f, c, s->in[0], sm), reader = c->member[c->n - 1];
    const IrNode *n = attn_node(f, x);
    m->causal = n->op == IR_CAUSAL_MASK && n->value == -INFINITY && only_reader(f, x) == reader;
    if (m->causal) attn_link(f, c, x), x = attn_up_casts(f, c, n->in[0], x), reader = c->member[c->n - 1];
    m->scale = 1;
    int y = attn_scaled(f, x, &m->scale);
    if (y >= 0 && only_reader(f, x) == reader)
        attn_link(f, c, x), x = attn_up_casts(f, c, y, x), reader = c->member[c->n - 1];
    n = attn_node(f, x);
    if (!attn_matmul(n, IR_MATMUL_TRANS_B) || only_reader(f, x) != reader) return false;
    attn_link(f, c, x);
    m->q = n->in[0], m->k = n->in[1];
    return c->ok;
}

/* Sorts reader R of a P value (the softmax or a cast of it) of match M: P V, P^T dO, the
 * softmax's gradient, or another cast; false for anything else. */
static bool attn_p_reader(Fuser *f, AttnMatch *m, int p, int r, int *pv, int *dv, int *sg)
{
    const IrNode *n = attn_node(f, r);
    if (n->op == IR_CAST) return false;   /* handled by the caller */
    if (attn_matmul(n, 0) && n->in[0] == p && *pv < 0) return *pv = r, true;
    if (attn_matmul(n, IR_MATMUL_TRANS_A) && n->in[0] == p && *dv < 0) return *dv = r, true;
    if (n->op == IR_SOFTMAX_GRAD && n->in[1] == m->sm && p == m->sm && *sg < 0) return *sg = r, true;
    return false;
}

/* The P values (the softmax and the casts of it) and their readers: one P V, and in a
 * training graph one P^T dO and one softmax gradient; nothing else. */
static bool attn_p_readers(Fuser *f, AttnMatch *m, int *dv, int *sg)
{
    int p[4] = { m->sm }, np = 1, pv = -1;
    *dv = *sg = -1;
    for (int i = 0; i < np; i++)
        for (int u = f->use_off[p[i]]; u < f->use_off[p[i] + 1]; u++) {
            int r = f->uses[u];
            if (attn_node(f, r)->op == IR_CAST && np < 4) {
                p[np++] = r;
                attn_link(f, &m->fwd, r);
            } else if (!attn_p_reader(f, m, p[i], r, &pv, dv, sg)) {
                return false;
            }
        }
    if (pv < 0 || (*dv < 0) != (*sg < 0) || f->is_output[m->sm]) return false;
    m->pv = pv;
    m->v = attn_node(f, pv)->in[1];
    attn_link(f, &m->fwd, pv);
    attn_output_view(f, &m->fwd, pv);
    return m->fwd.ok;
}

/* The shapes the kernels take: Q, K, V and O [lead..., T, D] alike, D at most 128. */
static bool attn_shapes(Fuser *f, const AttnMatch *m)
{
    const IrNode *q = attn_node(f, m->q), *k = attn_node(f, m->k), *v = attn_node(f, m->v);
    const IrNode *o = attn_node(f, m->pv);
    int r = q->shape.rank;
    int64_t d = q->shape.dim[r - 1], t = q->shape.dim[r - 2];
    return ir_shape_equal(&q->shape, &k->shape) && ir_shape_equal(&q->shape, &v->shape) &&
           ir_shape_equal(&q->shape, &o->shape) && !IR_DIM_IS_SYM(d) && !IR_DIM_IS_SYM(t) &&
           d >= 1 && d <= IR_ATTENTION_MAX_HEAD && q->dtype == k->dtype && q->dtype == v->dtype &&
           gemm_type(q->dtype);
}

/* The backward chain from the softmax's gradient SG and P^T dO (DV); true when it is
 * attention's. */
static bool attn_backward(Fuser *f, AttnMatch *m, int sg, int dv)
{
    AttnChain *c = &m->bwd;
    m->dout = attn_node(f, dv)->in[1];
    attn_link(f, c, dv);
    attn_link(f, c, sg);
    int dp = attn_up_casts(f, c, attn_node(f, sg)->in[0], sg);
    const IrNode *n = attn_node(f, dp);
    if (!attn_matmul(n, IR_MATMUL_TRANS_B) || n->in[0] != m->dout || n->in[1] != m->v ||
        only_reader(f, dp) != c->member[c->n - 1])
        return false;
    attn_link(f, c, dp);
    int x = attn_down_casts(f, c, sg), r = only_reader(f, x);
    if (m->causal) {
        if (r < 0 || attn_node(f, r)->op != IR_CAUSAL_MASK || attn_node(f, r)->value != 0) return false;
        attn_link(f, c, r);
        x = attn_down_casts(f, c, r), r = only_reader(f, x);
    }
    double scale = 1;
    if (m->scale != 1) {
        if (r < 0 || attn_scaled(f, r, &scale) != x || scale != m->scale) return false;
        attn_link(f, c, r);
        x = attn_down_casts(f, c, r);
    }
    int dq = -1, dk = -1;
    for (int u = f->use_off[x]; u < f->use_off[x + 1]; u++) {
        const IrNode *g = attn_node(f, f->uses[u]);
        if (attn_matmul(g, 0) && g->in[0] == x && g->in[1] == m->k && dq < 0) dq = f->uses[u];
        else if (attn_matmul(g, IR_MATMUL_TRANS_A) && g->in[0] == x && g->in[1] == m->q && dk < 0) dk = f->uses[u];
        else return false;
    }
    if (dq < 0 || dk < 0 || f->is_output[x]) return false;
    attn_link(f, c, dq);
    attn_link(f, c, dk);
    for (int i = 0, outs[3] = { dv, dq, dk }; i < 3; i++) attn_output_view(f, c, outs[i]);
    return c->ok;
}

static int by_node(const void *a, const void *b) { return by_int(a, b); }

static bool attn_member(const AttnMatch *m, int v)
{
    for (int i = 0; i < m->fwd.n; i++)
        if (m->fwd.member[i] == v) return true;
    for (int i = 0; i < m->bwd.n; i++)
        if (m->bwd.member[i] == v) return true;
    return false;
}

/* The pointwise clusters of M's links hold nothing else (the scale and a cast together,
 * say), so that taking the links leaves no cluster behind. */
static bool attn_clusters_closed(Fuser *f, const AttnMatch *m)
{
    const AttnChain *chains[2] = { &m->fwd, &m->bwd };
    for (int ci = 0; ci < 2; ci++)
        for (int i = 0; i < chains[ci]->n; i++) {
            int k = cluster_of(f, chains[ci]->member[i]), x = k;
            do {
                if (x >= 0 && !attn_member(m, x)) return false;
                x = x >= 0 ? f->next[x] : k;
            } while (x != k);
        }
    return true;
}

/* Makes the chains of M attention groups over S's shape, each in node order from its
 * first link (a product, in no cluster): every later link reads one before it (or, dV,
 * only values from outside), and joins with its whole pointwise cluster, which holds
 * only links. When a merge would close a cycle of kernels, everything is undone. */
static void attn_form(Fuser *f, AttnMatch *m)
{
    AttnChain *chains[2] = { &m->fwd, &m->bwd };
    Cluster saved[2][ATTN_MAX_MEMBERS];
    const Shape *work = &attn_node(f, m->sm)->shape;
    if (!attn_clusters_closed(f, m)) return;
    for (int ci = 0; ci < 2; ci++) {
        AttnChain *c = chains[ci];
        qsort(c->member, (size_t)c->n, sizeof *c->member, by_node);
        for (int i = 0; i < c->n; i++) saved[ci][i] = f->cl[c->member[i]];
        if (c->n > 0 && f->parent[c->member[0]] >= 0) return;
    }
    f->logging = true;
    f->nundo = 0;
    bool ok = true;
    for (int ci = 0; ci < 2 && ok; ci++) {
        AttnChain *c = chains[ci];
        int root = c->n > 0 ? c->member[0] : -1;
        if (root >= 0) start_cluster(f, root, IR_GROUP_ATTENTION, *work, 0, false);
        for (int i = 1; i < c->n && ok; i++) {
            int v = c->member[i], unit = cluster_of(f, v);
            if (unit == root) continue;   /* came with an earlier link's cluster */
            if (unit < 0) start_cluster(f, v, IR_GROUP_ATTENTION, *work, 0, false), unit = v;
            ok = acyclic_merge(f, unit, root);
            if (ok) merge(f, unit, root);
        }
    }
    f->logging = false;
    if (ok) return;
    while (f->nundo > 0) f->nundo--, *f->undo[f->nundo].slot = f->undo[f->nundo].old;
    for (int ci = 0; ci < 2; ci++)
        for (int i = 0; i < chains[ci]->n; i++) f->cl[chains[ci]->member[i]] = saved[ci][i];
}

static void attention_groups(Fuser *f)
{
    for (int v = 0; v < f->n; v++) {
        if (attn_node(f, v)->op != IR_SOFTMAX || f->parent[v] >= 0) continue;
        AttnMatch m = { .sm = v, .fwd.ok = true, .bwd.ok = true };
        int dv, sg;
        if (!attn_forward_up(f, v, &m) || !attn_p_readers(f, &m, &dv, &sg) || !attn_shapes(f, &m))
            continue;
        if (dv < 0 || attn_backward(f, &m, sg, dv)) attn_form(f, &m);
    }
}

/* ---- (1e) the fused classifier ----
 *
 * The loss (CROSS_ENTROPY) and its gradient (CE_GRAD) each read every logit: two passes
 * over what is, at a real vocabulary, the largest activation of a language model. Where
 * both read the same logits and labels, they become one classifier group (ir.h,
 * IR_GROUP_CLASSIFIER): one pass, each row's log-sum-exp found once. */

/* The CROSS_ENTROPY of CE_GRAD node G's logits and labels, or -1. */
static int classifier_loss(Fuser *f, int g)
{
    const IrNode *n = &f->g->nodes[g];
    for (int u = f->use_off[n->in[1]]; u < f->use_off[n->in[1] + 1]; u++) {
        int c = f->uses[u];
        const IrNode *x = &f->g->nodes[c];
        if (x->op == IR_CROSS_ENTROPY && x->in[0] == n->in[1] && x->in[1] == n->in[2] &&
            f->parent[c] < 0 && x->recompute == n->recompute)
            return c;
    }
    return -1;
}

static void classifier_groups(Fuser *f)
{
    for (int g = 0; g < f->n; g++) {
        if (f->g->nodes[g].op != IR_CE_GRAD || f->parent[g] >= 0) continue;
        int loss = classifier_loss(f, g);
        if (loss < 0) continue;
        const Shape *work = &f->g->nodes[g].shape;
        start_cluster(f, loss, IR_GROUP_CLASSIFIER, *work, 0, false);
        start_cluster(f, g, IR_GROUP_CLASSIFIER, *work, 0, false);
        if (acyclic_merge(f, g, loss)) merge(f, g, loss);
        else f->parent[loss] = f->parent[g] = -1;
    }
}

/* ---- (2) work nodes and clones ---- */

static int add_work(Fuser *f, WorkNode wn)
{
    if (f->nw == f->capw) {
        f->capw = f->capw ? 2 * f->capw : 64;
        f->w = xrealloc(f->w, (size_t)f->capw * sizeof *f->w);
    }
    f->w[f->nw] = wn;
    return f->nw++;
}

/* The originals, with dense group numbers from the cluster roots. */
static void make_work(Fuser *f)
{
    int *dense = xmalloc(((size_t)f->n + 1) * sizeof *dense);
    f->groups = xmalloc(((size_t)f->n + 1) * sizeof *f->groups);
    for (int i = 0; i < f->n; i++) {
        dense[i] = -1;
        if (f->parent[i] == i) dense[i] = f->ngroups, f->groups[f->ngroups++] = f->cl[i];
    }
    for (int i = 0; i < f->n; i++) {
        WorkNode wn = { .src = i, .group = f->parent[i] < 0 ? -1 : dense[find(f, i)] };
        memcpy(wn.in, f->g->nodes[i].in, sizeof wn.in);
        add_work(f, wn);
    }
    free(dense);
}

/* The copy of scalar node S in group GI, made once per group with its scalar inputs. */
static int clone_scalar(Fuser *f, int gi, int s)
{
    if (f->memo_group[s] == gi) return f->memo[s];
    const IrNode *n = &f->g->nodes[s];
    WorkNode wn = { .src = s, .group = gi };
    for (int k = 0; k < n->nin; k++)
        wn.in[k] = clonable(f, n->in[k]) ? clone_scalar(f, gi, n->in[k]) : n->in[k];
    f->memo_group[s] = gi;
    return f->memo[s] = add_work(f, wn);
}

static void clone_scalars(Fuser *f)
{
    f->memo = xmalloc(((size_t)f->n + 1) * sizeof *f->memo);
    f->memo_group = xmalloc(((size_t)f->n + 1) * sizeof *f->memo_group);
    for (int i = 0; i < f->n; i++) f->memo_group[i] = -1;
    for (int i = 0; i < f->n; i++) {
        int gi = f->w[i].group;
        if (gi < 0 || !takes_clones(&f->groups[gi])) continue;
        for (int k = 0; k < f->g->nodes[i].nin; k++) {
            int x = f->g->nodes[i].in[k];
            if (clonable(f, x)) {
                int c = clone_scalar(f, gi, x);
                f->w[i].in[k] = c;
            }
        }
    }
}

/* A permute of a linear layer's [N, T, H, D] to attention's heads whose every reader is an
 * attention group is never stored: each of those groups takes a clone of it among its
 * members, and its kernels read the layer's output in place, a head's rows H heads apart. */
static bool head_view(const Fuser *f, int u)
{
    const IrNode *n = &f->g->nodes[u];
    if (!attn_heads_permute(n) || f->is_output[u] || f->use_off[u] == f->use_off[u + 1] ||
        f->parent[u] >= 0)
        return false;
    for (int k = f->use_off[u]; k < f->use_off[u + 1]; k++) {
        int gi = f->w[f->uses[k]].group;
        if (gi < 0 || f->groups[gi].kind != IR_GROUP_ATTENTION) return false;
    }
    return true;
}

/* A pooling UNFOLD that every reader takes in a pointwise or reduce group over exactly its
 * patches is never stored: each of those groups gathers the entries it reads from the
 * image (a clone of the UNFOLD among its members), so that the patches, as large as the
 * image or larger, make no round trip through memory and launch no kernel of their own.
 * The rows layout is a GEMM's operand and stays stored. */
static bool gathered(const Fuser *f, int u)
{
    const IrNode *n = &f->g->nodes[u];
    if (n->op != IR_UNFOLD || (n->flags & IR_WINDOW_ROWS) || f->is_output[u] ||
        f->use_off[u] == f->use_off[u + 1])
        return false;
    for (int k = f->use_off[u]; k < f->use_off[u + 1]; k++) {
        int gi = f->w[f->uses[k]].group;
        if (gi < 0) return false;
        const Cluster *c = &f->groups[gi];
        if ((c->kind != IR_GROUP_POINTWISE && c->kind != IR_GROUP_REDUCE) || !ir_shape_equal(&c->work, &n->shape))
            return false;
    }
    return true;
}

/* The clone of UNFOLD U in group GI, made once per group (clones come after f->n). */
static int clone_gather(Fuser *f, int gi, int u)
{
    for (int w = f->n; w < f->nw; w++)
        if (f->w[w].src == u && f->w[w].group == gi) return w;
    WorkNode wn = { .src = u, .group = gi };
    memcpy(wn.in, f->g->nodes[u].in, sizeof wn.in);
    return add_work(f, wn);
}

/* A widening of a value stored anyway (a one-FLOP unary op whose input's type is
 * narrower, not computed by a kernel's registers: a bf16 product cast to f32). */
static bool widening(const Fuser *f, int v)
{
    const IrNode *n = &f->g->nodes[v], *x = &f->g->nodes[n->in[0]];
    return is_elementwise(n) && !is_scalar(n) && ir_op_info[n->op].arity == 1 && ir_op_info[n->op].cost <= 1 &&
           ir_node_fuse(n) != IR_FUSE_RANDOM && !f->is_output[v] && !is_elementwise(x) &&
           ir_dtype_size(x->dtype) < ir_dtype_size(n->dtype);
}

/* Widening V's readers outside its own group (in it, or none) each compute it among
 * their members when they are all pointwise or reduce groups over V's shape: nothing
 * stores the wide value, and each reads the narrow one, half the bytes. V in no group
 * is then dropped. */
static void spread_widening(Fuser *f, int v)
{
    const Shape *s = &f->g->nodes[v].shape;
    int own = f->w[v].group, outside = 0;
    for (int k = f->use_off[v]; k < f->use_off[v + 1]; k++) {
        int gi = f->w[f->uses[k]].group;
        if (gi >= 0 && gi == own) continue;
        if (gi < 0 || (f->groups[gi].kind != IR_GROUP_POINTWISE && f->groups[gi].kind != IR_GROUP_REDUCE) ||
            !ir_shape_equal(&f->groups[gi].work, s))
            return;
        outside++;
    }
    if (!outside) return;
    f->cloned[v] = own < 0;
    for (int k = f->use_off[v]; k < f->use_off[v + 1]; k++) {
        int c = f->uses[k], gi = f->w[c].group;
        if (gi == own) continue;
        int clone = clone_gather(f, gi, v);
        for (int j = 0; j < f->g->nodes[c].nin; j++)
            if (f->w[c].in[j] == v) f->w[c].in[j] = clone;
    }
}

/* Pooling's gathered patches and attention's head views, each cloned into its readers;
 * widenings into the groups that read them (spread_widening). */
static void clone_gathers(Fuser *f)
{
    for (int u = 0; u < f->n; u++) {
        if (widening(f, u)) spread_widening(f, u);
        if (!gathered(f, u) && !head_view(f, u)) continue;
        f->cloned[u] = true;
        for (int k = f->use_off[u]; k < f->use_off[u + 1]; k++) {
            int c = f->uses[k], clone = clone_gather(f, f->w[c].group, u);
            for (int j = 0; j < f->g->nodes[c].nin; j++)
                if (f->w[c].in[j] == u) f->w[c].in[j] = clone;
        }
    }
}

/* ---- (3) the graph of kernels, and in-place assignments ---- */

static bool dropped(const Fuser *f, int w) { return w < f->n && f->cloned[w]; }

/* The kernel (unit) work node W runs in: its group, its own, or none (leaves and dropped
 * nodes, which launch nothing). */
static int unit_of(const Fuser *f, int w)
{
    if (f->w[w].group >= 0) return f->w[w].group;
    if (dropped(f, w) || is_leaf(src_node(f, w))) return -1;
    return f->ngroups + w;
}

static void add_edge(Fuser *f, int from, int to)
{
    if (f->nadj[from] == f->capadj[from]) {
        f->capadj[from] = f->capadj[from] ? 2 * f->capadj[from] : 4;
        f->adj[from] = xrealloc(f->adj[from], (size_t)f->capadj[from] * sizeof **f->adj);
    }
    f->adj[from][f->nadj[from]++] = to;
}

static void build_units(Fuser *f)
{
    f->nunits = f->ngroups + f->nw;
    f->adj = xcalloc((size_t)f->nunits, sizeof *f->adj);
    f->nadj = xcalloc((size_t)f->nunits, sizeof *f->nadj);
    f->capadj = xcalloc((size_t)f->nunits, sizeof *f->capadj);
    f->mark = xcalloc((size_t)f->nunits, sizeof *f->mark);
    for (int w = 0; w < f->nw; w++) {
        int u = unit_of(f, w);
        for (int k = 0; u >= 0 && k < src_node(f, w)->nin; k++) {
            int x = unit_of(f, f->w[w].in[k]);
            if (x >= 0 && x != u) add_edge(f, x, u);
        }
    }
}

/* Marks (with mark_stamp) every unit reachable from unit FROM. */
static void mark_reachable(Fuser *f, int from)
{
    int *stack = xmalloc((size_t)f->nunits * sizeof *stack), sp = 0;
    f->mark_stamp++;
    stack[sp++] = from;
    while (sp > 0) {
        int u = stack[--sp];
        for (int k = 0; k < f->nadj[u]; k++) {
            int v = f->adj[u][k];
            if (f->mark[v] != f->mark_stamp) f->mark[v] = f->mark_stamp, stack[sp++] = v;
        }
    }
    free(stack);
}

/* The persistent tensor that work node W is a view of (a READ, or RESHAPEs of one), or -1. */
static int viewed_tensor(const Fuser *f, int w)
{
    const IrNode *n = src_node(f, w);
    if (is_leaf(n)) return ir_node_tensor(n);
    return ir_node_fuse(n) == IR_FUSE_VIEW ? viewed_tensor(f, f->w[w].in[0]) : -1;
}

/* The readers of each persistent tensor, as (work node, the view it reads) pairs: CSR
 * over tensors, so that an ASSIGN looks at its tensor's readers only. */
typedef struct Readers {
    int *off;               /* per tensor, ntensors + 1 */
    int (*at)[2];           /* { reader, view } */
} Readers;

/* Every input x of a live work node w that views a tensor t (VIEW, per work node): with
 * AT, stored at AT[SLOT[t]++]; without, counted in SLOT[t + 1]. */
static void collect_reads(const Fuser *f, const int *view, int *slot, int (*at)[2])
{
    for (int w = 0; w < f->nw; w++) {
        for (int k = 0; !dropped(f, w) && k < src_node(f, w)->nin; k++) {
            int x = f->w[w].in[k], t = view[x];
            if (t < 0) continue;
            if (!at) slot[t + 1]++;
            else at[slot[t]][0] = w, at[slot[t]++][1] = x;
        }
    }
}

static Readers tensor_readers(const Fuser *f)
{
    int nt = f->p->ntensors;
    int *view = xmalloc((size_t)(f->nw ? f->nw : 1) * sizeof *view);
    for (int w = 0; w < f->nw; w++) view[w] = viewed_tensor(f, w);
    Readers r = { xcalloc((size_t)nt + 1, sizeof *r.off), NULL };
    collect_reads(f, view, r.off, NULL);
    for (int t = 0; t < nt; t++) r.off[t + 1] += r.off[t];
    r.at = xmalloc(((size_t)r.off[nt] + 1) * sizeof *r.at);
    int *slot = xmalloc(((size_t)nt + 1) * sizeof *slot);
    memcpy(slot, r.off, ((size_t)nt + 1) * sizeof *slot);
    collect_reads(f, view, slot, r.at);
    free(slot);
    free(view);
    return r;
}

/* Whether ASSIGN A (tentatively in its value's group) can store in place: every other
 * reader of the tensor must run before the group (then constrained so), and readers in
 * the group must read it at the element they compute. */
static bool in_place_ok(Fuser *f, const Readers *r, int a, bool commit)
{
    int gi = f->w[a].group, t = src_node(f, a)->index;
    if (f->w[f->w[a].in[0]].group != gi) return false;
    if (!commit) mark_reachable(f, gi);
    for (int i = r->off[t]; i < r->off[t + 1]; i++) {
        int w = r->at[i][0], x = r->at[i][1];
        if (w == a) continue;
        int u = unit_of(f, w);
        /* an ASSIGN left as a copy runs after every kernel (plan.c), so it would see
         * the new value: no in-place store of a tensor another copy reads */
        if (u != gi && ir_node_fuse(src_node(f, w)) == IR_FUSE_EFFECT) return false;
        if (u == gi && !ir_shape_equal(&src_node(f, x)->shape, &f->groups[gi].work)) return false;
        if (u == gi || u < 0) continue;
        if (commit) add_edge(f, u, gi);
        else if (f->mark[u] == f->mark_stamp) return false;
    }
    return true;
}

static void place_assigns(Fuser *f)
{
    Readers r = tensor_readers(f);
    for (int a = 0; a < f->n; a++) {
        if (ir_node_fuse(&f->g->nodes[a]) != IR_FUSE_EFFECT || f->w[a].group < 0) continue;
        if (in_place_ok(f, &r, a, false)) {
            in_place_ok(f, &r, a, true);
        } else {
            f->w[a].group = -1;   /* codegen copies it after the step, as in eager */
            add_edge(f, unit_of(f, f->w[a].in[0]), unit_of(f, a));
        }
    }
    free(r.off), free(r.at);
}

/* ---- names ---- */

/* The parameter (or, failing that, the tensor) an ASSIGN of tensor T is about. */
static const char *tensor_subject(const IrProgram *p, int t)
{
    const IrTensor *x = &p->tensors[t];
    if (x->kind == IR_STATE && x->param_of >= 0) return p->tensors[x->param_of].name;
    return strncmp(x->name, "cgc.", 4) == 0 ? x->name + 4 : x->name;
}

/* The tensor the elements of node V end up assigned to, following consumers of V's shape
 * (or its slices', through collectives) breadth first (a gradient's reductions are named
 * for its parameter); NULL when none. */
static const char *assigned_subject(Fuser *f, int v)
{
    enum { LIMIT = 256 };
    int queue[LIMIT], head = 0, tail = 0;
    f->stamp++;
    queue[tail++] = v;
    while (head < tail) {
        int x = queue[head++];
        const Shape *shape = &f->g->nodes[x].shape;
        if (ir_node_fuse(&f->g->nodes[x]) == IR_FUSE_EFFECT) return tensor_subject(f->p, f->g->nodes[x].index);
        for (int k = f->use_off[x]; k < f->use_off[x + 1] && tail < LIMIT; k++) {
            int c = f->uses[k];
            const IrNode *u = &f->g->nodes[c];
            bool same = ir_node_fuse(u) == IR_FUSE_EFFECT || ir_op_info[u->op].family == IR_FAMILY_COLLECTIVE ||
                        ir_shape_equal(&u->shape, shape);
            if (same && f->seen[c] != f->stamp) f->seen[c] = f->stamp, queue[tail++] = c;
        }
    }
    return NULL;
}

static const char *const role_names[IR_NUM_OUTPUT_ROLES] = {
    "loss", "prediction", "correct", "skipped", "grad_norm",
};

/* What a group without an ASSIGN is about: a binding it computes, an output, a tensor it
 * reads, the tensor its values end up in, or its .net line. */
static const char *subject_of(Fuser *f, const int *m, int nm, const Shape *work, char *line)
{
    for (int i = nm - 1; i >= 0; i--)
        if (m[i] < f->n && src_node(f, m[i])->name) return src_node(f, m[i])->name;
    for (int i = 0; i < nm; i++)
        for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++)
            if (m[i] < f->n && f->g->output[r] == m[i]) return role_names[r];
    for (int i = 0; i < nm; i++)
        for (int k = 0; k < src_node(f, m[i])->nin; k++) {
            const IrNode *x = src_node(f, f->w[m[i]].in[k]);
            const char *table = ir_node_table_name(f->p, x);
            if (table && ir_shape_equal(&x->shape, work)) return table;
        }
    for (int pass = 0; pass < 2; pass++)   /* from values over the work shape, then results */
        for (int i = nm - 1; i >= 0; i--) {
            const Shape *s = &src_node(f, m[i])->shape;
            bool start = m[i] < f->n && (pass ? !ir_shape_is_one(s) : ir_shape_equal(s, work));
            const char *t = start ? assigned_subject(f, m[i]) : NULL;
            if (t) return t;
        }
    int at = src_node(f, m[0])->loc.line;
    snprintf(line, 16, "line%d", at);
    return at ? line : NULL;
}

static void append(char *buf, size_t len, const char *s)
{
    size_t at = strlen(buf);
    if (at && at + 1 < len) buf[at++] = '_', buf[at] = 0;
    for (; *s && at + 1 < len; s++) buf[at++] = isalnum((unsigned char)*s) ? *s : '_';
    buf[at] = 0;
}

/* What the group's members compute: up to three distinct ops, in order (casts only when
 * there is nothing else). */
static void name_ops(Fuser *f, const int *m, int nm, char *buf, size_t len)
{
    const char *seen[3];
    int ns = 0;
    for (int i = 0; i < nm && ns < 3; i++) {
        const IrNode *n = src_node(f, m[i]);
        IrFuse fu = ir_node_fuse(n);
        if (m[i] >= f->n || n->op == IR_CAST || fu == IR_FUSE_EFFECT || fu == IR_FUSE_VIEW) continue;
        bool dup = false;
        for (int k = 0; k < ns; k++) dup |= seen[k] == ir_op_name(n->op);
        if (!dup) append(buf, len, seen[ns++] = ir_op_name(n->op));
    }
    if (!ns) append(buf, len, "cast");
}

static const char *group_name(Fuser *f, const int *m, int nm, const Shape *work)
{
    char buf[64] = "", line[16];
    const char *subject = NULL;
    bool param = false;
    for (int i = 0; i < nm && !subject; i++) {
        const IrNode *n = src_node(f, m[i]);
        if (ir_node_fuse(n) != IR_FUSE_EFFECT) continue;
        subject = tensor_subject(f->p, n->index);
        int t = ir_find_tensor(f->p, subject);
        param = t >= 0 && f->p->tensors[t].kind == IR_PARAM;
    }
    if (subject) {
        append(buf, sizeof buf, param ? config_optimizer_name(f->p->cfg.optimizer) : "update");
    } else {
        name_ops(f, m, nm, buf, sizeof buf);
        subject = subject_of(f, m, nm, work, line);
    }
    if (subject) append(buf, sizeof buf, subject);
    if (isdigit((unsigned char)buf[0])) buf[0] = '_';
    return ir_intern(f->p, buf);
}

/* A GEMM group: "gemm_bias", its activation, and what it computes ("gemm_bias_relu_h1"). */
/* "attention_a1", "attention_grad_a1": the backward holds the softmax's gradient. */
static const char *attention_group_name(Fuser *f, const int *m, int nm, const Shape *work)
{
    char buf[64] = "attention", line[16];
    for (int i = 0; i < nm; i++)
        if (src_node(f, m[i])->op == IR_SOFTMAX_GRAD) append(buf, sizeof buf, "grad");
    const char *subject = subject_of(f, m, nm, work, line);
    if (subject) append(buf, sizeof buf, subject);
    return ir_intern(f->p, buf);
}

static const char *gemm_group_name(Fuser *f, const int *m, int nm, const Shape *work)
{
    char buf[64] = "gemm_bias", line[16];
    for (int i = 0; i < nm; i++) {
        IrOp op = src_node(f, m[i])->op;
        if (op == IR_RELU || op == IR_GELU_TANH) append(buf, sizeof buf, op == IR_RELU ? "relu" : "gelu");
    }
    const char *subject = subject_of(f, m, nm, work, line);
    if (subject) append(buf, sizeof buf, subject);
    return ir_intern(f->p, buf);
}

/* ---- (4) order and rebuild ---- */

typedef struct Unit {
    int key;                /* smallest original id among its nodes; -1 for no unit */
    int indeg;
    int *members, nmembers; /* groups: work nodes, in a topological order */
} Unit;

/* Members by original id, which is topological (a clone takes the id of its original,
 * which comes before every reader). Insertion sort: groups are small. */
static void sort_by_src(const Fuser *f, int *m, int nm)
{
    for (int i = 1; i < nm; i++)
        for (int j = i; j > 0 && f->w[m[j - 1]].src > f->w[m[j]].src; j--) {
            int t = m[j]; m[j] = m[j - 1]; m[j - 1] = t;
        }
}

static Unit *make_units(Fuser *f)
{
    Unit *u = xcalloc((size_t)f->nunits, sizeof *u);
    for (int i = 0; i < f->nunits; i++) u[i].key = -1;
    for (int w = 0; w < f->nw; w++) {
        int k = unit_of(f, w);
        if (k < 0) continue;
        Unit *x = &u[k];
        x->members = xrealloc(x->members, (size_t)(x->nmembers + 1) * sizeof *x->members);
        x->members[x->nmembers++] = w;
        if (w < f->n && (x->key < 0 || w < x->key)) x->key = w;   /* clones do not count */
    }
    for (int i = 0; i < f->nunits; i++) {
        sort_by_src(f, u[i].members, u[i].nmembers);
        for (int k = 0; k < f->nadj[i]; k++) u[f->adj[i][k]].indeg++;
    }
    return u;
}

static bool multi_candidate(const Fuser *f, int unit)
{
    return unit < f->ngroups && ir_shape_is_static(&f->groups[unit].work) &&
           f->groups[unit].kind != IR_GROUP_ROW &&   /* ir.h: not in multi-tensor launches */
           f->groups[unit].kind != IR_GROUP_GEMM && f->groups[unit].kind != IR_GROUP_ATTENTION &&
           f->groups[unit].kind != IR_GROUP_CLASSIFIER;
}

static bool same_launch_kind(const Fuser *f, int a, int b)
{
    const Cluster *x = &f->groups[a], *y = &f->groups[b];
    if (x->kind != y->kind || x->recompute != y->recompute) return false;
    return x->kind == IR_GROUP_POINTWISE || (x->axis == y->axis && x->reduce_to == y->reduce_to);
}

static bool ready(const Unit *u) { return u->key >= 0 && u->indeg == 0 && u->nmembers > 0; }

static int patience(const Fuser *f, int k);


/* The order in which ready units run: least patience, then smallest key. */
static bool runs_before(Ready a, Ready b)
{
    return a.patience != b.patience ? a.patience < b.patience : a.key < b.key;
}

static void heap_push(Fuser *f, Ready r)
{
    int i = f->nheap++;
    for (; i > 0 && runs_before(r, f->heap[(i - 1) / 2]); i = (i - 1) / 2) f->heap[i] = f->heap[(i - 1) / 2];
    f->heap[i] = r;
}

static int heap_pop(Fuser *f)
{
    Ready top = f->heap[0], r = f->heap[--f->nheap];
    int i = 0;
    for (int c; (c = 2 * i + 1) < f->nheap; i = c) {
        if (c + 1 < f->nheap && runs_before(f->heap[c + 1], f->heap[c])) c++;
        if (!runs_before(f->heap[c], r)) break;
        f->heap[i] = f->heap[c];
    }
    if (f->nheap) f->heap[i] = r;
    return top.unit;
}

static bool multi_candidate(const Fuser *f, int unit);

/* Unit K has just become ready (or was at the start): it joins the heap and, when it may
 * share a launch, the pool. */
static void became_ready(Fuser *f, const Unit *units, int k)
{
    if (!ready(&units[k])) return;
    heap_push(f, (Ready){ patience(f, k), units[k].key, k });
    if (multi_candidate(f, k)) f->pool[f->npool++] = k;
}

static void emit_node(Fuser *f, int w, int group)
{
    IrNode n = *src_node(f, w);
    for (int k = 0; k < n.nin; k++) {
        n.in[k] = f->newid[f->w[w].in[k]];
        CGC_ASSERT(n.in[k] >= 0);
    }
    n.group = group;
    f->newid[w] = ir_add_node(f->dst, &n);
}

/* Leaves are placed just before their first reader (they launch nothing). */
static void emit_leaves(Fuser *f, const Unit *u)
{
    for (int i = 0; i < u->nmembers; i++) {
        const WorkNode *wn = &f->w[u->members[i]];
        for (int k = 0; k < src_node(f, u->members[i])->nin; k++)
            if (f->newid[wn->in[k]] < 0 && is_leaf(src_node(f, wn->in[k])))
                emit_node(f, wn->in[k], 0);
    }
}

static void emit_unit(Fuser *f, Unit *units, int k, int multi, bool last)
{
    Unit *u = &units[k];
    int group = 0;
    if (k < f->ngroups) {
        const Cluster *c = &f->groups[k];
        const char *name = c->kind == IR_GROUP_GEMM ? gemm_group_name(f, u->members, u->nmembers, &c->work)
                           : c->kind == IR_GROUP_ATTENTION ? attention_group_name(f, u->members, u->nmembers, &c->work)
                           : c->kind == IR_GROUP_CLASSIFIER ? ir_intern(f->p, "classifier")
                                                            : group_name(f, u->members, u->nmembers, &c->work);
        IrGroup gr = { .kind = c->kind, .name = name,
                       .work = c->work, .axis = c->kind == IR_GROUP_REDUCE || c->kind == IR_GROUP_ROW ? c->axis : 0,
                       .multi = multi, .last = last };
        group = ir_add_group(f->dst, &gr);
    }
    for (int i = 0; i < u->nmembers; i++) emit_node(f, u->members[i], group);
    u->key = -1;
    for (int i = 0; i < f->nadj[k]; i++) {
        int v = f->adj[k][i];
        if (--units[v].indeg == 0) became_ready(f, units, v);
    }
}

/* How long unit K waits once ready: 0 not at all; 1 a group that could share a launch,
 * so that its partners (the reductions of every gradient, say) become ready too; 2 a
 * group of checkpointing's copies, which is ready as soon as the forward values it
 * reads are, but should run as late as possible, just before the backward reads it,
 * or it would be kept as long as the original it replaces. */
static int patience(const Fuser *f, int k)
{
    if (k < f->ngroups ? f->groups[k].recompute : src_node(f, k - f->ngroups)->recompute) return 2;
    return multi_candidate(f, k) ? 1 : 0;
}

/* The ready unit that waits least, the smallest key among those, or -1. Units emitted
 * as another's partners are still in the heap: they are passed over. */
static int next_unit(Fuser *f, const Unit *units)
{
    while (f->nheap > 0) {
        int k = heap_pop(f);
        if (ready(&units[k])) return k;
    }
    return -1;
}

/* Whether group C reads a value that a unit of BATCH[0..NB) computes. */
static bool reads_from(const Fuser *f, const Unit *units, int c, const int *batch, int nb)
{
    for (int i = 0; i < units[c].nmembers; i++) {
        int w = units[c].members[i];
        for (int k = 0; k < src_node(f, w)->nin; k++)
            for (int b = 0; b < nb; b++)
                if (unit_of(f, f->w[w].in[k]) == batch[b]) return true;
    }
    return false;
}

/* The groups that may run last in the launch of BATCH[0..NB) (ir.h, IrGroup.last), into
 * LAST; returns how many. A scalar pointwise group qualifies when everything it waits
 * for is in the batch and none of it is a value the batch computes: what holds it back is
 * then only the order of in-place writes (it writes a tensor the batch reads: the loss
 * scale and step counters after the optimizer updates), and running after every block
 * of the launch has finished keeps that order without a launch of its own. */
static int last_groups(Fuser *f, const Unit *units, const int *batch, int nb, int *last)
{
    int nc = 0, nl = 0;
    for (int b = 0; b < nb; b++)
        for (int k = 0; k < f->nadj[batch[b]]; k++) {
            int v = f->adj[batch[b]][k];
            if (f->waits[v]++ == 0 && v < f->ngroups) last[nc++] = v;
        }
    qsort(last, (size_t)nc, sizeof *last, by_int);
    for (int i = 0; i < nc; i++) {
        int c = last[i];
        const Cluster *x = &f->groups[c];
        bool scalar = x->kind == IR_GROUP_POINTWISE && ir_shape_is_one(&x->work);
        if (scalar && units[c].key >= 0 && f->waits[c] == units[c].indeg &&
            x->recompute == f->groups[batch[0]].recompute && !reads_from(f, units, c, batch, nb))
            last[nl++] = c;
    }
    for (int b = 0; b < nb; b++)
        for (int k = 0; k < f->nadj[batch[b]]; k++) f->waits[f->adj[batch[b]][k]] = 0;
    return nl;
}

static int by_key(const void *a, const void *b)
{
    const Ready *x = a, *y = b;
    return (x->key > y->key) - (x->key < y->key);
}

/* Units U[0..N) by key (keys are distinct: each is a node of its unit). */
static void sort_by_key(const Unit *units, int *u, int n)
{
    Ready *r = xmalloc((size_t)(n ? n : 1) * sizeof *r);
    for (int i = 0; i < n; i++) r[i] = (Ready){ 0, units[u[i]].key, u[i] };
    qsort(r, (size_t)n, sizeof *r, by_key);
    for (int i = 0; i < n; i++) u[i] = r[i].unit;
    free(r);
}

/* Emits unit K and, when it can share a launch, every other group ready now that is of
 * the same kind over a static shape (ready together means independent), then the groups
 * that may run last in that launch. */
static void emit_with_partners(Fuser *f, Unit *units, int k)
{
    int *batch = xmalloc((size_t)f->nunits * sizeof *batch), nb = 0;
    int *last = xmalloc((size_t)f->nunits * sizeof *last), nl = 0;
    batch[nb++] = k;
    int kept = 0;
    for (int j = 0; multi_candidate(f, k) && j < f->npool; j++) {
        int i = f->pool[j];
        if (i == k || !ready(&units[i])) continue;
        f->pool[kept++] = i;
        if (same_launch_kind(f, k, i)) batch[nb++] = i;
    }
    if (multi_candidate(f, k)) f->npool = kept;
    sort_by_key(units, batch, nb);   /* as the order elsewhere */
    if (multi_candidate(f, k)) nl = last_groups(f, units, batch, nb, last);
    int multi = nb + nl > 1 ? ++f->nmulti : 0;
    for (int i = 0; i < nb; i++) emit_leaves(f, &units[batch[i]]);
    for (int i = 0; i < nl; i++) emit_leaves(f, &units[last[i]]);
    for (int i = 0; i < nb; i++) emit_unit(f, units, batch[i], multi, false);
    for (int i = 0; i < nl; i++) emit_unit(f, units, last[i], multi, true);
    free(batch);
    free(last);
}

static void rebuild(Fuser *f, IrGraph *dst)
{
    Unit *units = make_units(f);
    f->heap = xmalloc((size_t)(f->nunits + 1) * sizeof *f->heap);
    f->pool = xmalloc((size_t)(f->nunits + 1) * sizeof *f->pool);
    f->waits = xcalloc((size_t)f->nunits + 1, sizeof *f->waits);
    for (int k = 0; k < f->nunits; k++) became_ready(f, units, k);
    f->dst = dst;
    f->newid = xmalloc((size_t)f->nw * sizeof *f->newid);
    for (int w = 0; w < f->nw; w++) f->newid[w] = -1;
    for (int k; (k = next_unit(f, units)) >= 0;) emit_with_partners(f, units, k);
    for (int w = 0; w < f->n; w++)   /* leaves nothing reads */
        if (f->newid[w] < 0 && is_leaf(src_node(f, w))) emit_node(f, w, 0);
    for (int w = 0; w < f->n; w++)
        if (f->newid[w] < 0 && !dropped(f, w))
            CGC_INTERNAL("fusion: graph %s, node %%%d was not placed (a cycle of kernels)",
                         f->g->name, w);
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++)
        dst->output[r] = f->g->output[r] < 0 ? -1 : f->newid[f->g->output[r]];
    dst->nforward = 0;
    for (int i = 0; i < f->nunits; i++) free(units[i].members);
    free(units);
    free(f->heap), free(f->pool), free(f->waits);
}

/* nforward (train graphs): the rebuilt forward pass is the nodes before the first one
 * that came from the backward; fused groups may straddle, so it is where the first
 * backward node now stands. */
static int forward_count(const Fuser *f, int nforward)
{
    int first = f->dst->nnodes;
    for (int w = 0; w < f->nw; w++)
        if (f->w[w].src >= nforward && f->newid[w] >= 0 && f->newid[w] < first) first = f->newid[w];
    return nforward ? first : 0;
}

static void fuse_graph(IrProgram *p, IrGraph *g)
{
    if (g->nnodes == 0) return;
    Fuser f;
    fuser_init(&f, p, g);
    find_cones(&f);
    for (int v = f.n - 1; v >= 0; v--) cluster_node(&f, v);
    row_groups(&f);
    verify_order(&f);
    gemm_groups(&f);
    attention_groups(&f);
    classifier_groups(&f);
    make_work(&f);
    clone_scalars(&f);
    clone_gathers(&f);
    build_units(&f);
    place_assigns(&f);
    IrGraph dst;
    ir_graph_init(&dst, g->name);
    rebuild(&f, &dst);
    dst.nforward = forward_count(&f, g->nforward);
    fuser_free(&f);
    ir_graph_free(g);
    *g = dst;
    ir_verify(p, g);
    fusion_boundaries(g);
}

void fusion_assign(IrProgram *p)
{
    IrGraph *graphs[] = { &p->forward, &p->train, &p->train_micro, &p->eval, &p->decode };
    for (size_t i = 0; i < sizeof graphs / sizeof *graphs; i++) fuse_graph(p, graphs[i]);
}
