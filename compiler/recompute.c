/* recompute.c: activation checkpointing (the `checkpoint` key) on the training graphs.
 *
 * The backward pass reads forward values (activations) long after the forward made them,
 * so by default they all stay in memory from the forward to their backward readers.
 * Checkpointing keeps only some of them and recomputes the rest in the backward, as
 * torch.utils.checkpoint does: matrix products included, one segment at a time.
 *
 * Cuts. The train graph (and train_micro) starts with a copy of the forward pass, nodes
 * [0, nforward); after it comes the backward region. An activation is a forward node
 * that depends on a data input (others are parameters, their casts and constants, which
 * stay as they are). A cut is an activation c through which the forward narrows to one
 * value: no activation before c is read after c, except by nodes the backward does not
 * need (a batch norm's running statistics, the accuracy). A chain of layers has a cut
 * after every op; a residual block has them only where its branches meet.
 *
 * Schedules. A schedule keeps some cuts, k1 < k2 < ... < kr. They split the forward into
 * segments (start, k1], (k1, k2], ..., (kr, end): the backward recomputes, in each but
 * the last, every value it needs that lies strictly inside the segment (the ops that can
 * be recomputed: not leaves, assignments or collectives; anything else stays kept), and
 * reads the kept end cut; the last segment is kept whole. Every forward node is
 * recomputed at most once, so a schedule costs at most one extra forward pass.
 *
 * Memory, as the solver models it. While the backward works through segment (a, b], the
 * forward values live are the kept cuts up to a (with the unrecomputable values of
 * their segments), the kept cut b and the segment's recomputed values; later segments'
 * are gone. So a schedule's modelled peak is
 *     max( prefix(kr) + tail(kr),  max over segments (a, b] of prefix(a) + live(a, b) )
 * in bytes, with the batch symbol bound to cfg.batch. Gradients and temporaries are the
 * same for every schedule and are left out: driver/compile.c compiles the chosen
 * schedules and measures the planned peak itself.
 *
 * The solver. For a budget B on the modelled peak, a dynamic program over the cuts in
 * order finds the schedule with the fewest recomputed FLOPs: its state at a kept cut is
 * (prefix bytes, FLOPs so far), and only the Pareto-optimal states are carried, which
 * makes it exact for chains and for chains of residual blocks alike (the branches inside
 * a block are one segment or none). Solving for B = infinity, then for one byte less
 * than the last schedule's peak, and so on, enumerates the whole frontier of schedules
 * (peak against FLOPs), from nothing recomputed to the least memory. Each solve costs
 * about cuts^2 * states, so a model with more than MAX_CUTS cuts is solved over the
 * values its statements name (a layer's output, not the product and bias add inside
 * it), and beyond MAX_CUTS of those over MAX_CUTS evenly spaced: exact over that subset,
 * a heuristic for the whole. At most MAX_STATES states are carried per cut (those with
 * the smallest prefixes), a bound no model of a few hundred layers reaches.
 *
 * FLOPs: ir_node_flops's, at the configured batch.
 *
 * Rebuilding the graphs for a schedule: the forward stays as it is; before the first
 * backward node that reads a recomputed value, its copy (IrNode.recompute) is emitted,
 * reading the copies of its recomputed inputs (emitted first) and the originals of the
 * others; backward readers then read the copy. Reading one value of a segment thus
 * recomputes the segment's chain down to its kept cut at once, just before the backward
 * needs it. A copy is the same op on the same values (a dropout draws the same mask: its
 * counter and stream are inputs), so every gradient is unchanged bit for bit.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

enum { MAX_CUTS = 96, MAX_STATES = 1024, MAX_SCHEDULES = 512 };

/* ---- the forward, as checkpointing sees it ---- */

typedef struct Forward {
    const IrProgram *p;
    const IrGraph *g;
    int n;              /* forward nodes */
    bool *act;          /* an activation (depends on a data input) */
    bool *can;          /* an activation that may be recomputed */
    bool *read;         /* read by the backward of train or train_micro */
    double *bytes, *flops;
    int ncuts;
    int *cuts;          /* node ids, ascending */
} Forward;

static void batch_symbols(const IrProgram *p, int64_t *symvals)
{
    for (int k = 0; k < IR_MAX_SYMBOLS; k++) symvals[k] = k == 0 ? p->cfg.batch : 1;
}

static double numel(const IrProgram *p, const Shape *s)
{
    int64_t symvals[IR_MAX_SYMBOLS];
    batch_symbols(p, symvals);
    return (double)ir_numel(s, symvals);
}

/* FLOPs to compute node N of G once, at the configured batch. */
static double node_flops(const IrProgram *p, const IrGraph *g, const IrNode *n)
{
    int64_t symvals[IR_MAX_SYMBOLS];
    batch_symbols(p, symvals);
    return ir_node_flops(g, n, symvals);
}

static bool recomputable(IrOp op)
{
    const IrOpInfo *o = &ir_op_info[op];
    return o->cls != IR_CLASS_LEAF && o->cls != IR_CLASS_EFFECT && o->family != IR_FAMILY_COLLECTIVE;
}

static void mark_backward_reads(const IrGraph *g, bool *read)
{
    for (int i = g->nforward; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++)
            if (g->nodes[i].in[k] < g->nforward) read[g->nodes[i].in[k]] = true;
}

/* At most MAX_CUTS cuts, for very deep models (the rule at the top): the values a
 * statement names, then, if still too many, evenly spaced among them. */
static void thin_cuts(Forward *f)
{
    if (f->ncuts <= MAX_CUTS) return;
    int named = 0;
    for (int k = 0; k < f->ncuts; k++) named += f->g->nodes[f->cuts[k]].name != NULL;
    if (named >= 2) {       /* else, nothing named: spaced among all */
        int n = 0;
        for (int k = 0; k < f->ncuts; k++)
            if (f->g->nodes[f->cuts[k]].name) f->cuts[n++] = f->cuts[k];
        f->ncuts = n;
    }
    if (f->ncuts <= MAX_CUTS) return;
    for (int k = 0; k < MAX_CUTS; k++) f->cuts[k] = f->cuts[(int64_t)k * f->ncuts / MAX_CUTS];
    f->ncuts = MAX_CUTS;
}

/* The cuts of F (the rule at the top): RELEVANT marks the nodes the backward needs (it
 * reads them, or a relevant node does); LAST[u], the last relevant reader of u. */
static void find_cuts(Forward *f)
{
    const IrGraph *g = f->g;
    bool *relevant = xcalloc((size_t)f->n + 1, sizeof *relevant);
    int *last = xmalloc(((size_t)f->n + 1) * sizeof *last);
    for (int v = 0; v < f->n; v++) last[v] = v, relevant[v] = f->read[v];
    for (int w = f->n - 1; w >= 0; w--)
        for (int k = 0; relevant[w] && k < g->nodes[w].nin; k++) relevant[g->nodes[w].in[k]] = true;
    for (int w = 0; w < f->n; w++)
        for (int k = 0; relevant[w] && k < g->nodes[w].nin; k++)
            last[g->nodes[w].in[k]] = w;
    f->cuts = xmalloc(((size_t)f->n + 1) * sizeof *f->cuts);
    int reach = -1;     /* the last relevant reader of any activation so far */
    for (int c = 0; c < f->n; c++) {
        if (f->act[c] && relevant[c] && reach <= c) f->cuts[f->ncuts++] = c;
        if (f->act[c] && last[c] > reach) reach = last[c];
    }
    free(last);
    free(relevant);
    thin_cuts(f);
}

static void forward_init(Forward *f, const IrProgram *p)
{
    const IrGraph *g = &p->train;
    CGC_ASSERT(!p->train_micro.nnodes || p->train_micro.nforward == g->nforward);
    *f = (Forward){ .p = p, .g = g, .n = g->nforward };
    size_t n = (size_t)f->n + 1;
    f->act = xcalloc(n, sizeof *f->act);
    f->can = xcalloc(n, sizeof *f->can);
    f->read = xcalloc(n, sizeof *f->read);
    f->bytes = xcalloc(n, sizeof *f->bytes);
    f->flops = xcalloc(n, sizeof *f->flops);
    mark_backward_reads(g, f->read);
    if (p->train_micro.nnodes) mark_backward_reads(&p->train_micro, f->read);
    for (int v = 0; v < f->n; v++) {
        const IrNode *x = &g->nodes[v];
        f->act[v] = ir_node_input(x) >= 0;   /* the data's */
        for (int k = 0; k < x->nin; k++) f->act[v] |= f->act[x->in[k]];
        f->can[v] = f->act[v] && recomputable(x->op);
        bool leaf = ir_op_info[x->op].cls == IR_CLASS_LEAF;     /* inputs: not the step's memory */
        f->bytes[v] = leaf ? 0 : numel(p, &x->shape) * ir_dtype_size(x->dtype);
        f->flops[v] = f->act[v] ? node_flops(p, g, x) : 0;
    }
    find_cuts(f);
}

static void forward_free(Forward *f)
{
    free(f->act);
    free(f->can);
    free(f->read);
    free(f->bytes);
    free(f->flops);
    free(f->cuts);
}

/* ---- segments ----
 * What a segment ending at cut node END costs, as sums over node ranges: for each node v
 * below END, whether the segment recomputes it depends only on END (its readers lie at
 * or before END, the cut), so one scan down from END serves every segment ending there.
 * Sums[k] hold the totals over nodes [0, k). */
typedef struct Sums {
    double *recomputed;     /* bytes of recomputed values the backward reads */
    double *kept;           /* bytes of values the segment keeps (read, not recomputable) */
    double *flops;          /* FLOPs recomputed */
} Sums;

/* Marks in CHOSEN the nodes below END that a segment ending there recomputes (given its
 * start, those after it), and in KEPT those it keeps; fills S if not NULL. */
static void segment_scan(const Forward *f, int end, bool *chosen, bool *kept, Sums *s)
{
    const IrGraph *g = f->g;
    bool *needed = xcalloc((size_t)f->n + 1, sizeof *needed);
    for (int v = end - 1; v >= 0; v--) {
        bool need = f->read[v] || needed[v];
        chosen[v] = need && f->can[v];
        kept[v] = need && f->act[v] && !f->can[v];
        for (int k = 0; chosen[v] && k < g->nodes[v].nin; k++) needed[g->nodes[v].in[k]] = true;
    }
    free(needed);
    if (!s) return;
    s->recomputed[0] = s->kept[0] = s->flops[0] = 0;
    for (int v = 0; v < end; v++) {
        s->recomputed[v + 1] = s->recomputed[v] + (chosen[v] && f->read[v] ? f->bytes[v] : 0);
        s->kept[v + 1] = s->kept[v] + (kept[v] ? f->bytes[v] : 0);
        s->flops[v + 1] = s->flops[v] + (chosen[v] ? f->flops[v] : 0);
    }
}

/* The segment [FIRST, END] from S (filled for END): the bytes the backward holds while
 * it works through it (kept, with END itself, and recomputed) and the FLOPs. */
typedef struct Segment {
    double recomputed, kept, flops;
} Segment;

static Segment segment_cost(const Forward *f, const Sums *s, int first, int end)
{
    return (Segment){ s->recomputed[end] - s->recomputed[first],
                      s->kept[end] - s->kept[first] + f->bytes[end], s->flops[end] - s->flops[first] };
}

/* The first node of the segment that starts after boundary A: 0 for the start (A = 0),
 * else the node after cut A - 1. */
static int segment_first(const Forward *f, int a)
{
    return a == 0 ? 0 : f->cuts[a - 1] + 1;
}

/* Bytes of the last segment, from node FIRST on: everything the backward reads, kept. */
static double tail_bytes(const Forward *f, int first)
{
    double t = 0;
    for (int v = first; v < f->n; v++) t += f->act[v] && f->read[v] ? f->bytes[v] : 0;
    return t;
}

/* ---- a schedule ---- */

static Sums sums_new(const Forward *f)
{
    size_t n = (size_t)f->n + 1;
    return (Sums){ xcalloc(n, sizeof(double)), xcalloc(n, sizeof(double)), xcalloc(n, sizeof(double)) };
}

static void sums_free(Sums *s)
{
    free(s->recomputed);
    free(s->kept);
    free(s->flops);
}

/* S for F with cut boundaries BOUND[0..n) (indices into F->cuts, ascending): its nodes,
 * FLOPs and modelled peak, from the sums the solver uses. */
static void schedule_make(const Forward *f, const int *bound, int n, RecomputeSchedule *s)
{
    memset(s, 0, sizeof *s);
    s->kept = xmalloc(((size_t)n + 1) * sizeof *s->kept);
    s->segment_nodes = xcalloc((size_t)n + 1, sizeof *s->segment_nodes);
    s->segment_flops = xcalloc((size_t)n + 1, sizeof *s->segment_flops);
    s->nodes = xmalloc(((size_t)f->n + 1) * sizeof *s->nodes);
    bool *chosen = xcalloc((size_t)f->n + 1, sizeof *chosen);
    bool *kept = xcalloc((size_t)f->n + 1, sizeof *kept);
    Sums sum = sums_new(f);
    double prefix = 0;
    for (int k = 0; k < n; k++) {
        int end = f->cuts[bound[k]], first = segment_first(f, k ? bound[k - 1] + 1 : 0);
        segment_scan(f, end, chosen, kept, &sum);
        for (int v = first; v < end; v++)
            if (chosen[v]) s->nodes[s->nnodes++] = v, s->segment_nodes[k]++;
        Segment seg = segment_cost(f, &sum, first, end);
        s->peak = fmax(s->peak, prefix + seg.kept + seg.recomputed);
        prefix += seg.kept;
        s->segment_flops[k] = seg.flops;
        s->flops += s->segment_flops[k];
        s->kept[s->nkept++] = end;
    }
    s->peak = fmax(s->peak, prefix + tail_bytes(f, segment_first(f, n ? bound[n - 1] + 1 : 0)));
    sums_free(&sum);
    free(chosen);
    free(kept);
}

void recompute_schedule(const IrProgram *p, const int *kept, int n, RecomputeSchedule *s)
{
    Forward f;
    forward_init(&f, p);
    bool *keep = xcalloc((size_t)f.n + 1, sizeof *keep);
    for (int k = 0; k < n; k++)
        if (kept[k] >= 0 && kept[k] < f.n) keep[kept[k]] = true;
    int *bound = xmalloc(((size_t)f.ncuts + 1) * sizeof *bound), nb = 0;
    for (int c = 0; c < f.ncuts; c++)
        if (keep[f.cuts[c]]) bound[nb++] = c;
    schedule_make(&f, bound, nb, s);
    free(bound);
    free(keep);
    forward_free(&f);
}

void recompute_schedule_free(RecomputeSchedule *s)
{
    free(s->kept);
    free(s->nodes);
    free(s->segment_nodes);
    free(s->segment_flops);
    memset(s, 0, sizeof *s);
}

/* ---- the solver ---- */

typedef struct State {
    double prefix, flops;
    int from, at;       /* the boundary and state it extends; -1 for the start */
} State;

typedef struct States {
    State *s;
    int n, cap;
} States;

static int by_prefix(const void *a, const void *b)
{
    const State *x = a, *y = b;
    if (x->prefix != y->prefix) return x->prefix < y->prefix ? -1 : 1;
    return (x->flops > y->flops) - (x->flops < y->flops);
}

static void states_add(States *l, State s)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->s = xrealloc(l->s, (size_t)l->cap * sizeof *l->s);
    }
    l->s[l->n++] = s;
}

/* Keeps L's Pareto-optimal states: by prefix ascending, each with fewer FLOPs than all
 * before it; at most MAX_STATES. */
static void states_prune(States *l)
{
    if (l->n == 0) return;
    qsort(l->s, (size_t)l->n, sizeof *l->s, by_prefix);
    int n = 0;
    for (int i = 0; i < l->n && n < MAX_STATES; i++)
        if (n == 0 || l->s[i].flops < l->s[n - 1].flops) l->s[n++] = l->s[i];
    l->n = n;
}

/* The schedule with the fewest recomputed FLOPs whose modelled peak is at most BUDGET,
 * into OUT; false when none is. Boundary 0 is the start, boundary c + 1 cut c. */
static bool solve(const Forward *f, double budget, RecomputeSchedule *out)
{
    int nb = f->ncuts + 1;
    States *at = xcalloc((size_t)nb, sizeof *at);
    states_add(&at[0], (State){ 0, 0, -1, -1 });
    bool *chosen = xcalloc((size_t)f->n + 1, sizeof *chosen), *kept = xcalloc((size_t)f->n + 1, sizeof *kept);
    Sums s = sums_new(f);
    for (int b = 1; b < nb; b++) {
        int end = f->cuts[b - 1];
        segment_scan(f, end, chosen, kept, &s);
        for (int a = 0; a < b; a++) {
            Segment seg = segment_cost(f, &s, segment_first(f, a), end);
            for (int i = 0; i < at[a].n; i++) {
                const State *x = &at[a].s[i];
                if (x->prefix + seg.kept + seg.recomputed <= budget)
                    states_add(&at[b], (State){ x->prefix + seg.kept, x->flops + seg.flops, a, i });
            }
        }
        states_prune(&at[b]);
    }
    int best = -1, best_i = -1;
    double best_flops = INFINITY, best_peak = INFINITY;
    for (int a = 0; a < nb; a++) {
        double tail = tail_bytes(f, segment_first(f, a));
        for (int i = 0; i < at[a].n; i++) {
            const State *x = &at[a].s[i];
            double peak = x->prefix + tail;
            if (peak <= budget && (x->flops < best_flops || (x->flops == best_flops && peak < best_peak)))
                best = a, best_i = i, best_flops = x->flops, best_peak = peak;
        }
    }
    if (best >= 0) {
        int *bound = xmalloc((size_t)nb * sizeof *bound), n = 0;
        for (int a = best, i = best_i; a > 0;) {
            const State *x = &at[a].s[i];
            bound[n++] = a - 1;
            a = x->from, i = x->at;
        }
        for (int k = 0; k < n / 2; k++) {
            int t = bound[k];
            bound[k] = bound[n - 1 - k], bound[n - 1 - k] = t;
        }
        schedule_make(f, bound, n, out);
        free(bound);
    }
    for (int b = 0; b < nb; b++) free(at[b].s);
    free(at);
    free(chosen);
    free(kept);
    sums_free(&s);
    return best >= 0;
}

void recompute_choices(const IrProgram *p, RecomputeChoices *c)
{
    memset(c, 0, sizeof *c);
    Forward f;
    forward_init(&f, p);
    c->forward_flops = recompute_forward_flops(p);
    c->ncuts = f.ncuts;
    c->cuts = xmalloc(((size_t)f.ncuts + 1) * sizeof *c->cuts);
    if (f.ncuts) memcpy(c->cuts, f.cuts, (size_t)f.ncuts * sizeof *f.cuts);
    c->s = xmalloc(MAX_SCHEDULES * sizeof *c->s);
    RecomputeSchedule s;
    for (double budget = INFINITY; c->n < MAX_SCHEDULES && solve(&f, budget, &s); budget = s.peak - 0.5) {
        if (c->n > 0 && c->s[c->n - 1].flops >= s.flops)    /* as cheap, less memory */
            recompute_schedule_free(&c->s[--c->n]);
        c->s[c->n++] = s;
    }
    forward_free(&f);
}

double recompute_forward_flops(const IrProgram *p)
{
    Forward f;
    forward_init(&f, p);
    double flops = 0;
    for (int v = 0; v < f.n; v++) flops += f.flops[v];
    forward_free(&f);
    return flops;
}

void recompute_choices_free(RecomputeChoices *c)
{
    for (int i = 0; i < c->n; i++) recompute_schedule_free(&c->s[i]);
    free(c->s);
    free(c->cuts);
    memset(c, 0, sizeof *c);
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
    bool *chosen = xcalloc((size_t)nforward + 1, sizeof *chosen);
    for (int k = 0; k < n; k++) {
        CGC_ASSERT(nodes[k] >= 0 && nodes[k] < nforward);
        CGC_ASSERT(recomputable(p->train.nodes[nodes[k]].op));
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
