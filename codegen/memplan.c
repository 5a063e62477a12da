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
 * training graphs are, and a reader can check it by hand.
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
 * kernel names is also touched there. */
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
    return live;
}

void plan_first_steps(const Plan *plan, PlanGraphId g, int *first)
{
    Live *live = live_ranges(plan, g);
    for (int b = 0; b < plan->nbuffers; b++) first[b] = live[b].first;
    free(live);
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

static bool meet(Live a, Live b) { return a.first <= b.last && b.first <= a.last; }

/* (at, buffer) order of placed items. */
static bool before(const Item *a, const Item *b)
{
    return a->at != b->at ? a->at < b->at : a->buffer < b->buffer;
}

/* Places IT at the lowest aligned offset clear of every placed item live with it, and
 * links it among them. The walk goes up the placed items in offset order (NEXT links them
 * from HEAD), skipping those not live with IT, until a gap below the next one holds it;
 * everything walked before the last item that pushed IT up lies below IT, so linking it
 * resumes from there. */
static void place_one(Item *items, int *next, int *head, int i)
{
    Item *it = &items[i];
    int *link = head;
    it->at = 0;
    for (int *p = head; *p >= 0; p = &next[*p]) {
        const Item *o = &items[*p];
        if (!meet(o->live, it->live)) continue;
        if (it->at + it->bytes <= o->at) break;                 /* fits in the gap below */
        size_t end = align_up(o->at + o->bytes);
        if (end > it->at) it->at = end, link = &next[*p];
    }
    while (*link >= 0 && before(&items[*link], it)) link = &next[*link];
    next[i] = *link;
    *link = i;
}

/* Greedy placement of ITEMS; returns the region's size. Keeping the placed items in offset
 * order makes each placement one walk up those below it, with no sort; the walk still
 * makes the whole placement quadratic in the buffers at worst. */
static size_t place_shared(Item *items, int n)
{
    qsort(items, (size_t)n, sizeof *items, by_size_desc);
    int *next = xmalloc((size_t)(n ? n : 1) * sizeof *next), head = -1;
    size_t peak = 0;
    for (int i = 0; i < n; i++) {
        place_one(items, next, &head, i);
        if (items[i].at + items[i].bytes > peak) peak = items[i].at + items[i].bytes;
    }
    free(next);
    return align_up(peak);
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
    size_t size = reuse ? place_shared(items, n) : place_apart(items, n);
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
