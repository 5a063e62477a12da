/* codegen/memplan.c: the memory plan (plan.h): an offset in one arena for every buffer.
 *
 * The arena has two regions. The persistent region comes first: everything that must
 * hold its bytes between graph runs or after one, each buffer at an offset of its own,
 * in buffer order. That is every buffer that is not a node value (tensors, inputs,
 * constants written once when the arena is set up, data-pipeline buffers), and the
 * value of every graph output role (IrGraph.output), which the runtime reads after the
 * graph has run (the loss, skipped and correct scalars that cgc_track_loss and
 * cgc_track_eval add up, the predictions of the forward graph).
 *
 * The graph region follows, shared by every graph since graphs never run at the same
 * time. Within one graph a node buffer is live from the first step that names it (a
 * launch's ARG_BUFFER argument, a GEMM's a, b or c) to the last, inclusive: a step's
 * inputs and outputs are live together, so no kernel ever writes over what it reads.
 * A fused MLP run (max-autotune's candidate) may compute all its layers at its first
 * layer's step: every buffer its kernel names is named there too.
 * Buffers no step names are live nowhere and take no room (offset 0).
 *
 * Placement is the classic greedy for offline dynamic storage allocation: the graph's
 * buffers sorted by size, largest first (ties by buffer index, so the result is
 * deterministic), each at the lowest 256-aligned offset where it overlaps no buffer
 * already placed whose live range meets its own. It is not always optimal (the problem
 * is NP-hard) but within a few percent on the chains of activations and gradients that
 * training graphs are, and a reader can check it by hand. Finding that offset by walking
 * every placed buffer made the plan quadratic in the buffers (eager mode has one per op);
 * the placed buffers are instead kept in a segment tree over the steps, as unions of the
 * memory they take, so that a placement looks at a few merged sets rather than at every
 * buffer below it.
 *
 * Without reuse every buffer gets memory of its own: the persistent region as above,
 * then each graph's buffers one after another in buffer order, all of them, so that
 * every node's value can still be read after a run.
 */
#include "codegen_impl.h"

#include <stdlib.h>

enum { ALIGN = 256 };

static size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* ---- what outlives a graph run ---- */

/* Per buffer: whether it belongs to the persistent region (roots only). */
static bool *persistent_buffers(const Plan *plan)
{
    bool *keep = xcalloc((size_t)(plan->nbuffers ? plan->nbuffers : 1), sizeof *keep);
    for (int b = 0; b < plan->nbuffers; b++)
        if (plan->buffers[b].kind != PB_NODE) keep[plan_buffer_root(plan, b)] = true;
    for (int g = 0; g < PG_NUM; g++) {
        const PlanGraph *pg = &plan->graph[g];
        if (!pg->ir) continue;
        for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++) {
            int id = pg->ir->output[r];
            if (id >= 0 && pg->node_buffer[id] >= 0) keep[plan_buffer_root(plan, pg->node_buffer[id])] = true;
        }
    }
    return keep;
}

/* ---- liveness ---- */

typedef struct Live {
    int first, last;        /* steps; first < 0: no step names the buffer */
} Live;

/* Step I of graph G names buffer B. */
static void touch(const Plan *plan, PlanGraphId g, int i, int b, Live *live)
{
    CGC_ASSERT(b >= 0 && b < plan->nbuffers);
    b = plan_buffer_root(plan, b);
    const PlanBuffer *buf = &plan->buffers[b];
    if (buf->kind == PB_NODE && buf->graph != (int)g)
        CGC_INTERNAL("plan step %d of graph %d uses buffer %d (%s) of graph %d", i, (int)g, b,
                     buf->what, buf->graph);
    if (live[b].first < 0 || i < live[b].first) live[b].first = i;
    if (i > live[b].last) live[b].last = i;
}

/* Live ranges of the buffers graph G's steps name (indexed by buffer). A fused MLP run
 * (plan.h) may run its layers at its first step instead of their own: every buffer its
 * kernel names is also touched there. An implicit-GEMM reader (PlanWindow) may read the
 * image instead of the patches, or the NCHW gradient instead of its transpose: it
 * touches both; and the one that may store NCHW, the TRANSPOSE's buffer, and every
 * buffer of the epilogue group it may compute (PlanWindow.epilogue). Computed by a
 * convolution library, the data gradient writes the FOLD's buffer: it touches that too.
 * A collective over the ranks (PlanCollective) reads its inputs until the step that waits
 * for it, and writes its outputs once the step it follows has run: it touches both from
 * that step (where an output is so born, before the collective writes it: a runner
 * marks a buffer's bytes undefined where it is born) to the waiting one. */
static void collective_touches(const Plan *plan, PlanGraphId g, Live *live)
{
    const PlanGraph *pg = &plan->graph[g];
    for (int c = 0; c < pg->ncolls && pg->nsteps > 0; c++) {
        const PlanCollective *pc = &pg->colls[c];
        CGC_ASSERT(pc->after >= 0);   /* its inputs are computed (collective.c) */
        int start = pc->after;
        int end = pc->wait < pg->nsteps ? pc->wait : pg->nsteps - 1;
        for (int m = 0; m < pc->nmembers; m++) {
            touch(plan, g, end, pc->member[m], live);
            touch(plan, g, start, pc->out[m], live);
            touch(plan, g, end, pc->out[m], live);
        }
    }
}

static Live *live_ranges(const Plan *plan, PlanGraphId g)
{
    Live *live = xmalloc((size_t)(plan->nbuffers ? plan->nbuffers : 1) * sizeof *live);
    for (int b = 0; b < plan->nbuffers; b++) live[b] = (Live){ -1, -1 };
    const PlanGraph *pg = &plan->graph[g];
    for (int i = 0; i < pg->nsteps; i++) {
        const PlanStep *s = &pg->steps[i];
        int run = plan_mlp_at(plan, g, i);
        if (run >= 0) {
            int arg[3 * PLAN_MLP_MAX_LAYERS + 1], n = plan_mlp_args(plan, run, arg);
            for (int a = 0; a < n; a++)
                if (arg[a] >= 0) touch(plan, g, i, arg[a], live);
        }
        int reader, window = plan_window_reader(plan, g, i, &reader);
        const PlanWindow *w = window >= 0 ? &plan->windows[window] : NULL;
        if (w && w->operand[reader]) touch(plan, g, i, w->image, live);
        if (w && w->reads_grad[reader]) touch(plan, g, i, w->grad, live);
        if (w && w->store_reader == reader) touch(plan, g, i, w->store, live);
        for (int a = 0; w && w->store_reader == reader && a < w->epi_nargs; a++)
            if (w->epi_arg[a].kind == ARG_BUFFER) touch(plan, g, i, w->epi_arg[a].index, live);
        if (w && w->conv && plan_window_conv_role(w, reader) == 'd') touch(plan, g, i, w->fold_out, live);
        if (s->kind == STEP_GEMM) {
            touch(plan, g, i, s->gemm.a, live);
            touch(plan, g, i, s->gemm.b, live);
            touch(plan, g, i, s->gemm.c, live);
            if (s->gemm.bias >= 0) touch(plan, g, i, s->gemm.bias, live);   /* epilogue operands */
            if (s->gemm.aux >= 0) touch(plan, g, i, s->gemm.aux, live);
            continue;
        }
        for (int a = 0; a < s->launch.nargs; a++)
            if (s->launch.arg[a].kind == ARG_BUFFER) touch(plan, g, i, s->launch.arg[a].index, live);
    }
    collective_touches(plan, g, live);
    return live;
}

void plan_first_steps(const Plan *plan, PlanGraphId g, int *first)
{
    Live *live = live_ranges(plan, g);
    for (int b = 0; b < plan->nbuffers; b++) first[b] = live[b].first;
    free(live);
}

/* ---- sets of occupied offsets ---- */

/* Disjoint, sorted, non-touching [lo, hi) ranges of the graph region: the union of the
 * memory of some placed buffers. Buffers are only ever added, so a set only grows. */
typedef struct Span {
    size_t lo, hi;
} Span;

typedef struct SpanSet {
    Span *span;
    int n, cap;
} SpanSet;

/* The first span of SET ending after X (or reaching it, with TOUCH). */
static int span_after(const SpanSet *set, size_t x, bool touch)
{
    int lo = 0, hi = set->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (set->span[mid].hi > x || (touch && set->span[mid].hi == x)) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* Adds [LO, HI) to SET: spans i..j-1, those it overlaps or touches, become one. */
static void span_add(SpanSet *set, size_t lo, size_t hi)
{
    int i = span_after(set, lo, true), j = i;
    while (j < set->n && set->span[j].lo <= hi) j++;
    if (i < j) {
        if (set->span[i].lo < lo) lo = set->span[i].lo;
        if (set->span[j - 1].hi > hi) hi = set->span[j - 1].hi;
    } else if (set->n == set->cap) {
        set->cap = set->cap ? 2 * set->cap : 4;
        set->span = xrealloc(set->span, (size_t)set->cap * sizeof *set->span);
    }
    memmove(&set->span[i + 1], &set->span[j], (size_t)(set->n - j) * sizeof *set->span);
    set->n += 1 - (j - i);
    set->span[i] = (Span){ lo, hi };
}

/* The lowest offset from X on where BYTES fit clear of SET. */
static size_t span_fit(const SpanSet *set, size_t x, size_t bytes)
{
    for (int i = span_after(set, x, false); i < set->n && set->span[i].lo < x + bytes; i++)
        x = set->span[i].hi;
    return x;
}

/* ---- placing one graph's buffers ---- */

typedef struct Item {
    int buffer;
    size_t bytes;
    Live live;
    size_t at;              /* offset in the graph region, once placed */
} Item;

static int by_size_desc(const void *pa, const void *pb)
{
    const Item *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    return a->buffer - b->buffer;
}

/* The placed items, by the steps they are live at: a segment tree over the graph's steps.
 * An item is stored at the O(log steps) nodes whose ranges its live range covers (whole,
 * not their parent's); node V's FULL set holds the memory of the items stored at V, its
 * SUB set that of the items stored anywhere in V's subtree. The items live with a range R
 * are those in the SUB sets of the nodes R covers and in the FULL sets of the nodes R
 * only reaches into (an item stored there is live over all of it): O(log steps) sets,
 * each a union of many items' memory. A placement climbs the spans of those sets below
 * its offset; where they interleave (nested live ranges stored at different levels) that
 * can still be many, which is why eager plans of very deep models grow faster than
 * linearly (BENCHMARKS.md). */
typedef struct Placed {
    int size;               /* leaves: a power of two, at least the steps */
    SpanSet *full, *sub;    /* per node, 1 .. 2 * size - 1; node v has children 2v, 2v+1 */
} Placed;

enum { MAX_SETS = 4 * 32 };     /* per query and level: two nodes covered, two reached into */

static void placed_add(Placed *t, int v, int lo, int hi, Live r, Span s)
{
    span_add(&t->sub[v], s.lo, s.hi);
    if (r.first <= lo && hi - 1 <= r.last) {
        span_add(&t->full[v], s.lo, s.hi);
        return;
    }
    int mid = lo + (hi - lo) / 2;
    if (r.first < mid) placed_add(t, 2 * v, lo, mid, r, s);
    if (r.last >= mid) placed_add(t, 2 * v + 1, mid, hi, r, s);
}

/* The sets holding the memory of every placed item live with R (node V covers [LO, HI)). */
static int placed_sets(const Placed *t, int v, int lo, int hi, Live r, const SpanSet **out, int n)
{
    if (r.first <= lo && hi - 1 <= r.last) {
        if (t->sub[v].n) out[n++] = &t->sub[v];
        return n;
    }
    if (t->full[v].n) out[n++] = &t->full[v];
    int mid = lo + (hi - lo) / 2;
    if (r.first < mid) n = placed_sets(t, 2 * v, lo, mid, r, out, n);
    if (r.last >= mid) n = placed_sets(t, 2 * v + 1, mid, hi, r, out, n);
    return n;
}

/* The lowest aligned offset where IT overlaps no placed item live with it: raised past
 * each set in turn until one round over all of them leaves it where it is. */
static size_t placed_fit(const Placed *t, const Item *it)
{
    const SpanSet *set[MAX_SETS];
    int n = placed_sets(t, 1, 0, t->size, it->live, set, 0);
    size_t at = 0, bytes = align_up(it->bytes);
    for (int clear = 0, i = 0; clear < n; i = i + 1 < n ? i + 1 : 0) {
        size_t to = span_fit(set[i], at, bytes);
        clear = to == at ? clear + 1 : 1;
        at = to;
    }
    return at;
}

/* Greedy placement of ITEMS, live within STEPS; returns the region's size. */
static size_t place_shared(Item *items, int n, int steps)
{
    qsort(items, (size_t)n, sizeof *items, by_size_desc);
    Placed t = { .size = 1 };
    while (t.size < steps) t.size *= 2;
    t.full = xcalloc(2 * (size_t)t.size, sizeof *t.full);
    t.sub = xcalloc(2 * (size_t)t.size, sizeof *t.sub);
    size_t peak = 0;
    for (int i = 0; i < n; i++) {
        items[i].at = placed_fit(&t, &items[i]);
        Span s = { items[i].at, align_up(items[i].at + items[i].bytes) };
        placed_add(&t, 1, 0, t.size, items[i].live, s);
        if (s.hi > peak) peak = s.hi;
    }
    for (int v = 0; v < 2 * t.size; v++) {
        free(t.full[v].span);
        free(t.sub[v].span);
    }
    free(t.full);
    free(t.sub);
    return peak;
}

/* Every item its own memory, in buffer order; returns the region's size. */
static size_t place_apart(Item *items, int n)
{
    size_t end = 0;
    for (int i = 0; i < n; i++) {
        items[i].at = end;
        end = align_up(end + items[i].bytes);
    }
    return end;
}

/* Places graph G's own buffers at BASE and up; returns the region's size. */
static size_t place_graph(const Plan *plan, PlanGraphId g, const bool *keep, const int64_t *symmax,
                          bool reuse, size_t base, size_t *offset)
{
    if (!plan->graph[g].ir) return 0;
    Live *live = live_ranges(plan, g);
    Item *items = xmalloc((size_t)(plan->nbuffers ? plan->nbuffers : 1) * sizeof *items);
    int n = 0;
    for (int b = 0; b < plan->nbuffers; b++) {
        const PlanBuffer *buf = &plan->buffers[b];
        if (buf->kind != PB_NODE || buf->alias_of >= 0 || keep[b] || buf->graph != (int)g) continue;
        size_t bytes = plan_buffer_bytes(plan, b, symmax);
        bool used = live[b].first >= 0 && bytes > 0;
        if (reuse && !used) continue;                   /* live nowhere: offset 0 */
        items[n++] = (Item){ .buffer = b, .bytes = bytes, .live = live[b] };
    }
    size_t size = reuse ? place_shared(items, n, plan->graph[g].nsteps) : place_apart(items, n);
    for (int i = 0; i < n; i++) offset[items[i].buffer] = base + items[i].at;
    free(items);
    free(live);
    return size;
}

/* ---- the arena ---- */

static size_t place_persistent(const Plan *plan, const bool *keep, const int64_t *symmax,
                               size_t *offset)
{
    size_t end = 0;
    for (int b = 0; b < plan->nbuffers; b++) {
        if (!keep[b] || plan->buffers[b].alias_of >= 0) continue;
        offset[b] = end;
        end = align_up(end + plan_buffer_bytes(plan, b, symmax));
    }
    return end;
}

void plan_layout(const Plan *plan, const int64_t *symmax, bool reuse, PlanLayout *out)
{
    memset(out, 0, sizeof *out);
    out->offset = xcalloc((size_t)(plan->nbuffers ? plan->nbuffers : 1), sizeof *out->offset);
    bool *keep = persistent_buffers(plan);
    out->persistent_bytes = place_persistent(plan, keep, symmax, out->offset);
    size_t graphs = 0;      /* reuse: the largest graph region; else their sum */
    for (int g = 0; g < PG_NUM; g++) {
        size_t base = out->persistent_bytes + (reuse ? 0 : graphs);
        out->graph_bytes[g] = place_graph(plan, (PlanGraphId)g, keep, symmax, reuse, base, out->offset);
        if (!reuse) graphs += out->graph_bytes[g];
        else if (out->graph_bytes[g] > graphs) graphs = out->graph_bytes[g];
    }
    for (int b = 0; b < plan->nbuffers; b++)
        if (plan->buffers[b].alias_of >= 0) out->offset[b] = out->offset[plan_buffer_root(plan, b)];
    out->arena_bytes = out->persistent_bytes + graphs;
    free(keep);
}

void plan_layout_free(PlanLayout *l)
{
    free(l->offset);
    memset(l, 0, sizeof *l);
}
