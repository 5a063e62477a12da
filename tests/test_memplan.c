/* test_memplan.c: the memory plan (codegen/memplan.c) and how the plan runner uses it
 * (runtime/devexec.c).
 *
 *  - every model in models/ at every precision, eager, default and reduce-overhead plans
 *    (GEMM epilogues, fused groups, the device step counter), with and without gradient
 *    accumulation (the train_micro graph), laid out with and without
 *    reuse, checked by a brute-force checker that shares no code with the planner: at
 *    every step of a graph the buffers live there are pairwise disjoint; persistent
 *    buffers (everything but node values, and every graph's outputs) overlap nothing;
 *    every buffer inside the arena and its graph's region; views at their root; offsets
 *    aligned; the same layout twice; reuse never larger, and smaller for mlp.net;
 *  - a hand-built plan whose peak is worked out by hand in the comments;
 *  - random plans (sizes, live ranges; nested ranges like the activations a backward
 *    reads), each buffer placed exactly where the greedy's definition, computed the slow
 *    way here, puts it;
 *  - max-autotune's fused MLP runs of narrow_mlp.net: which steps the backward run takes,
 *    and that it stops where a step between its layers would make running them all at
 *    its first step wrong (the plan edited so, then its runs found again);
 *  - the runner on a fake device: a plan too big for the free memory stops before any
 *    allocation with the numbers and the fixes; the padding it marks is exactly the bytes
 *    no buffer covers; reading a value the plan does not keep is an internal error.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "codegen/plan.h"
#include "compiler/passes.h"
#include "driver/pipeline.h"
#include "runtime/devexec.h"
#include "tests/testfiles.h"

enum { ALIGN = 256 };

static int root(const Plan *pl, int b)
{
    while (pl->buffers[b].alias_of >= 0) b = pl->buffers[b].alias_of;
    return b;
}

static bool disjoint(size_t a, size_t an, size_t b, size_t bn)
{
    return !an || !bn || a + an <= b || b + bn <= a;
}

/* ---- the brute-force checker ---- */

/* Whether buffer B (a root) must outlive graph runs: not a node value, or an output. */
static bool outlives_runs(const Plan *pl, int b)
{
    if (pl->buffers[b].kind != PB_NODE) return true;
    for (int g = 0; g < PG_NUM; g++) {
        const PlanGraph *pg = &pl->graph[g];
        for (int r = 0; pg->ir && r < IR_NUM_OUTPUT_ROLES; r++) {
            int id = pg->ir->output[r];
            if (id >= 0 && pg->node_buffer[id] >= 0 && root(pl, pg->node_buffer[id]) == b) return true;
        }
    }
    return false;
}

/* The root buffers step S names, into OUT (room for STEP_BUFFERS); the count. A GEMM
 * reads its epilogue's bias and writes its aux output as well as A, B and C. */
enum { STEP_BUFFERS = 5 + PLAN_MAX_SLOTS };
static int step_buffers(const Plan *pl, const PlanStep *s, int *out)
{
    int n = 0;
    if (s->kind == STEP_GEMM) {
        out[n++] = root(pl, s->gemm.a);
        out[n++] = root(pl, s->gemm.b);
        out[n++] = root(pl, s->gemm.c);
        if (s->gemm.bias >= 0) out[n++] = root(pl, s->gemm.bias);
        if (s->gemm.aux >= 0) out[n++] = root(pl, s->gemm.aux);
        return n;
    }
    for (int a = 0; a < s->launch.nargs; a++)
        if (s->launch.arg[a].kind == ARG_BUFFER) out[n++] = root(pl, s->launch.arg[a].index);
    return n;
}

/* What the convolution runs (PlanWindow, plan.h) have step S of graph G name besides its
 * own operands, into OUT; the count. Either form of a run may be chosen at run time, so a
 * reader names what both read and write: an implicit GEMM's reader the image for its
 * patches operand, the NCHW gradient where it reads that, and the storing reader the
 * TRANSPOSE's buffer and its epilogue group's buffers; a library's data gradient (the
 * reader without a patches operand) the FOLD's buffer. */
static int window_buffers(const Plan *pl, int g, int s, int *out)
{
    int n = 0;
    for (int r = 0; r < pl->nwindows; r++) {
        const PlanWindow *w = &pl->windows[r];
        for (int j = 0; j < w->nreaders && (int)w->graph == g; j++) {
            if (w->reader[j] != s) continue;
            if (w->operand[j] && w->image >= 0) out[n++] = root(pl, w->image);
            if (w->reads_grad[j] && w->grad >= 0) out[n++] = root(pl, w->grad);
            if (j == w->store_reader && w->store >= 0) out[n++] = root(pl, w->store);
            for (int a = 0; j == w->store_reader && a < w->epi_nargs; a++)
                if (w->epi_arg[a].kind == ARG_BUFFER) out[n++] = root(pl, w->epi_arg[a].index);
            if (w->conv && !w->operand[j] && w->fold_out >= 0) out[n++] = root(pl, w->fold_out);
        }
    }
    return n;
}

/* Per buffer of graph G: the first and last step naming it (-1: none). A fused MLP run
 * (max-autotune) may run all its layers at its first layer's step: the buffers its
 * kernel names (each layer's weights and output, the first's input, the biases or the
 * activation values) are named there too; and a convolution run's readers name what
 * window_buffers says. */
static void step_span(const Plan *pl, int g, int *first, int *last)
{
    for (int b = 0; b < pl->nbuffers; b++) first[b] = last[b] = -1;
    const PlanGraph *pg = &pl->graph[g];
    int used[2 * STEP_BUFFERS + 4 * PLAN_MLP_MAX_LAYERS + 4 * PLAN_WINDOW_MAX_READERS];
    for (int s = 0; s < pg->nsteps; s++) {
        int n = step_buffers(pl, &pg->steps[s], used);
        n += window_buffers(pl, g, s, used + n);
        for (int r = 0; r < pl->nmlps; r++) {
            const PlanMlp *run = &pl->mlps[r];
            if ((int)run->graph != g || run->step[0] != s) continue;
            for (int j = 0; j < run->nlayers; j++) {
                const PlanGemm *gm = &pg->steps[run->step[j]].gemm;
                used[n++] = root(pl, gm->b);
                used[n++] = root(pl, gm->c);
                if (gm->bias >= 0) used[n++] = root(pl, gm->bias);
                if (run->act[j] >= 0) used[n++] = root(pl, run->act[j]);
            }
        }
        for (int i = 0; i < n; i++) {
            if (first[used[i]] < 0) first[used[i]] = s;
            last[used[i]] = s;
        }
    }
}

/* At every step of graph G, the buffers live there (named before and after, or now) are
 * pairwise disjoint in memory; each lies inside G's region, which starts at BASE.
 * Returns the overlaps seen. */
static int check_graph(const Plan *pl, int g, const PlanLayout *l, const int64_t *symmax, size_t base)
{
    int *first = xmalloc((size_t)pl->nbuffers * sizeof *first), *last = xmalloc((size_t)pl->nbuffers * sizeof *last);
    int *live = xmalloc((size_t)pl->nbuffers * sizeof *live);
    step_span(pl, g, first, last);
    int bad = 0;
    for (int b = 0; b < pl->nbuffers; b++) {
        size_t bytes = plan_buffer_bytes(pl, b, symmax);
        if (first[b] < 0 || outlives_runs(pl, b) || !bytes) continue;
        CHECK(l->offset[b] >= base && l->offset[b] + bytes <= base + l->graph_bytes[g]);
    }
    for (int s = 0; s < pl->graph[g].nsteps; s++) {
        int n = 0;
        for (int b = 0; b < pl->nbuffers; b++)
            if (first[b] >= 0 && first[b] <= s && s <= last[b]) live[n++] = b;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < i; j++)
                if (!disjoint(l->offset[live[i]], plan_buffer_bytes(pl, live[i], symmax),
                              l->offset[live[j]], plan_buffer_bytes(pl, live[j], symmax))) {
                    if (bad++ < 5)
                        fprintf(stderr, "  graph %d step %d: live buffers %d (%s) and %d (%s) overlap\n",
                                g, s, live[i], pl->buffers[live[i]].what, live[j], pl->buffers[live[j]].what);
                }
    }
    free(first);
    free(last);
    free(live);
    return bad;
}

/* Per buffer: whether a step of any graph names it (the others take no memory). */
static bool *named_by_steps(const Plan *pl)
{
    bool *named = xcalloc((size_t)pl->nbuffers, sizeof *named);
    int used[STEP_BUFFERS];
    for (int g = 0; g < PG_NUM; g++)
        for (int s = 0; s < pl->graph[g].nsteps; s++) {
            int n = step_buffers(pl, &pl->graph[g].steps[s], used);
            for (int i = 0; i < n; i++) named[used[i]] = true;
        }
    return named;
}

/* Everything plan.h promises of a layout, checked the slow way. */
static void check_layout(const Plan *pl, const PlanLayout *l, const int64_t *symmax, bool reuse)
{
    bool *named = named_by_steps(pl);
    CHECK(l->arena_bytes % ALIGN == 0 && l->persistent_bytes % ALIGN == 0);
    size_t graphs = 0;
    for (int g = 0; g < PG_NUM; g++) {
        CHECK(l->graph_bytes[g] % ALIGN == 0);
        if (reuse) graphs = l->graph_bytes[g] > graphs ? l->graph_bytes[g] : graphs;
        else graphs += l->graph_bytes[g];
    }
    CHECK_EQ_INT(l->arena_bytes, l->persistent_bytes + graphs);
    for (int b = 0; b < pl->nbuffers; b++) {
        size_t bytes = plan_buffer_bytes(pl, b, symmax);
        CHECK(l->offset[b] % ALIGN == 0);
        CHECK(l->offset[b] + bytes <= l->arena_bytes);
        if (pl->buffers[b].alias_of >= 0) CHECK_EQ_INT(l->offset[b], l->offset[root(pl, b)]);
        bool keep = outlives_runs(pl, b);
        if (pl->buffers[b].alias_of >= 0 || !bytes || (reuse && !keep && !named[b])) continue;
        if (keep) CHECK(l->offset[b] + bytes <= l->persistent_bytes);
        for (int c = 0; c < b; c++) {     /* persistent (or unshared): nothing else there */
            bool keep_c = outlives_runs(pl, c);
            if (!(keep || keep_c || !reuse) || pl->buffers[c].alias_of >= 0) continue;
            if (reuse && !keep_c && !named[c]) continue;
            bool ok = disjoint(l->offset[b], bytes, l->offset[c], plan_buffer_bytes(pl, c, symmax));
            if (!ok) fprintf(stderr, "  buffers %d (%s) and %d (%s) overlap\n", b, pl->buffers[b].what,
                             c, pl->buffers[c].what);
            CHECK(ok);
        }
    }
    size_t base = l->persistent_bytes;     /* graphs share one region, or (no reuse) stack */
    for (int g = 0; g < PG_NUM; g++) {
        if (pl->graph[g].ir) CHECK_EQ_INT(check_graph(pl, g, l, symmax, base), 0);
        if (!reuse) base += l->graph_bytes[g];
    }
    free(named);
}

static bool same_layout(const Plan *pl, const PlanLayout *a, const PlanLayout *b)
{
    bool same = a->arena_bytes == b->arena_bytes && a->persistent_bytes == b->persistent_bytes &&
                memcmp(a->graph_bytes, b->graph_bytes, sizeof a->graph_bytes) == 0;
    return same && memcmp(a->offset, b->offset, (size_t)pl->nbuffers * sizeof *a->offset) == 0;
}

/* ---- every model at every precision ---- */

/* FILE compiled at PRECISION, batch 64, accumulating ACCUMULATE micro-batches ("1": none). */
static Plan *compile_model_acc(const char *file, const char *precision, const char *accumulate,
                               PlanMode mode, IrProgram **p, Source **src)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", CGC_MODELS_DIR, file);
    Override ov[3] = {{"precision", "precision", precision}, {"batch", "batch", "64"},
                      {"accumulate", "accumulate", accumulate}};
    *src = source_load(path);
    *p = *src ? pipeline_compile(*src, ov, 3) : NULL;
    CHECK(*p != NULL);
    if (*p && mode != PLAN_EAGER) fusion_assign(*p);
    return *p ? plan_build(*p, mode, path, NULL) : NULL;
}

static Plan *compile_model(const char *file, const char *precision, PlanMode mode, IrProgram **p,
                           Source **src)
{
    return compile_model_acc(file, precision, "1", mode, p, src);
}

static void test_model(const char *file, const char *precision, const char *accumulate, PlanMode mode)
{
    IrProgram *p;
    Source *src;
    Plan *pl = compile_model_acc(file, precision, accumulate, mode, &p, &src);
    if (!pl) return;
    CHECK(strcmp(accumulate, "1") == 0 || pl->graph[PG_TRAIN_MICRO].nsteps > 0);
    CHECK(mode != PLAN_MAX_AUTOTUNE || pl->nmlps > 0 || pl->nwindows > 0);
    bool implicit = false;   /* the window_buffers model has something to check */
    for (int r = 0; r < pl->nwindows; r++) implicit |= pl->windows[r].implicit;
    CHECK(mode != PLAN_MAX_AUTOTUNE || strcmp(file, "cnn.net") != 0 || implicit);
    int64_t symmax[IR_MAX_SYMBOLS] = {64};
    PlanLayout shared, again, apart;
    plan_layout(pl, symmax, true, &shared);
    plan_layout(pl, symmax, true, &again);
    plan_layout(pl, symmax, false, &apart);
    check_layout(pl, &shared, symmax, true);
    check_layout(pl, &apart, symmax, false);
    CHECK(same_layout(pl, &shared, &again));
    CHECK(shared.arena_bytes <= apart.arena_bytes);
    CHECK_EQ_INT(shared.persistent_bytes, apart.persistent_bytes);
    if (strcmp(file, "mlp.net") == 0) CHECK(shared.arena_bytes < apart.arena_bytes);
    printf("%s %s accumulate %s, %s plan, batch 64: arena %zu bytes with reuse, %zu without (persistent %zu, train %zu)\n",
           file, precision, accumulate, plan_mode_name(mode), shared.arena_bytes, apart.arena_bytes, shared.persistent_bytes,
           shared.graph_bytes[PG_TRAIN]);
    plan_layout_free(&shared);
    plan_layout_free(&again);
    plan_layout_free(&apart);
    plan_free(pl);
    ir_program_free(p);
    source_free(src);
}

/* ---- the fused backward run's steps ---- */

/* PL's fused MLP runs found again (plan_add_mlp_kernels) after an edit: the ones there
 * and their kernels dropped first. Returns the train graph's backward run from step AT
 * (0-based; -1: the first such run), or NULL. */
static const PlanMlp *find_runs_again(Plan *pl, int at)
{
    for (int k = pl->mlp_kernels_from; k < pl->nkernels; k++) plan_kernel_free(&pl->kernels[k]);
    pl->nkernels = pl->mlp_kernels_from;
    free(pl->mlps);
    pl->mlps = NULL;
    pl->nmlps = 0;
    plan_add_mlp_kernels(pl);
    for (int r = 0; r < pl->nmlps; r++)
        if (pl->mlps[r].backward && pl->mlps[r].graph == PG_TRAIN && (at < 0 || pl->mlps[r].step[0] == at))
            return &pl->mlps[r];
    return NULL;
}

/* The input gradients of narrow_mlp (layers 10-128-128-128): GEMM steps B, B + 3 and B + 6
 * (0-based), linked by the relu_grad launches B + 2 and B + 5 with masks h3 and h2; the
 * weight gradients' GEMMs B + 1 and B + 4 between them. Each edit below makes one of
 * those steps write what the kernel reads, or touch a layer's output before its own step,
 * or share the kernel's memory; the run from step B must stop before that layer (a run
 * may then start at the layer refused: the steps before it do not matter to it). */
static void test_backward_run(void)
{
    IrProgram *p;
    Source *src;
    Plan *pl = compile_model("narrow_mlp.net", "bf16", PLAN_MAX_AUTOTUNE, &p, &src);
    if (!pl) return;
    const PlanMlp *run = find_runs_again(pl, -1);
    CHECK(run != NULL);
    if (!run) goto done;
    const int b = run->step[0];
    CHECK_EQ_INT(run->nlayers, 3);
    CHECK(run->step[1] == b + 3 && run->step[2] == b + 6);
    CHECK(run->link[0] == -1 && run->link[1] == b + 2 && run->link[2] == b + 5);
    CHECK(run->act[0] == -1 && run->act[1] >= 0 && run->act[2] >= 0 &&
          strcmp(pl->buffers[run->act[1]].what, "h3") == 0 &&
          strcmp(pl->buffers[run->act[2]].what, "h2") == 0);
    CHECK(run->grad[1] == IR_RELU_GRAD && run->grad[2] == IR_RELU_GRAD);
    PlanStep *steps = pl->graph[PG_TRAIN].steps;
    /* the edits below take these steps' fields as they are described above */
    bool as_described = pl->graph[PG_TRAIN].nsteps > b + 6 && run->nlayers == 3 && run->act[2] >= 0;
    for (int i = b; as_described && i <= b + 6; i++)
        as_described = steps[i].kind == (i == b + 2 || i == b + 5 ? STEP_LAUNCH : STEP_GEMM);
    CHECK(as_described);
    if (!as_described) goto done;
    int c1 = steps[b + 3].gemm.c, w1 = steps[b + 3].gemm.b, c0 = steps[b].gemm.c, act2 = run->act[2];
    struct { const char *what; int *field, value, layers; } edits[] = {
        {"dW4 reads c1 before layer 1", &steps[b + 1].gemm.a, c1, 1},
        {"dW4 writes w1", &steps[b + 1].gemm.c, w1, 1},
        {"dW3 writes act2 (h2)", &steps[b + 4].gemm.c, act2, 2},
        {"layer 2's weights are c0", &steps[b + 6].gemm.b, c0, 2},
        {"layer 2 writes w1", &steps[b + 6].gemm.c, w1, 2},
    };
    for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++) {
        int was = *edits[e].field;
        *edits[e].field = edits[e].value;
        run = find_runs_again(pl, b);
        int layers = run ? run->nlayers : 1;    /* a run of 1 is none */
        if (layers != edits[e].layers)
            fprintf(stderr, "  %s: a run of %d layers, want %d\n", edits[e].what, layers, edits[e].layers);
        CHECK_EQ_INT(layers, edits[e].layers);
        *edits[e].field = was;
    }
    /* the relu_grad launch between layers 0 and 1 writes w1 (its bias gradient's output) */
    PlanLaunch *link = &steps[b + 2].launch;
    int out = -1;
    for (int a = 0; a < link->nargs && out < 0; a++)
        if (link->arg[a].kind == ARG_BUFFER && strncmp(pl->kernels[link->kernel].param_ctype[a], "const ", 6) != 0 &&
            link->arg[a].index != steps[b + 3].gemm.a)
            out = a;
    CHECK(out >= 0);
    if (out >= 0) {
        int was = link->arg[out].index;
        link->arg[out].index = w1;
        run = find_runs_again(pl, b);
        CHECK(run == NULL);
        link->arg[out].index = was;
    }
    run = find_runs_again(pl, b);      /* as built */
    CHECK(run != NULL && run->nlayers == 3);
done:
    plan_free(pl);
    ir_program_free(p);
    source_free(src);
}

/* ---- a plan built by hand ---- */

static PlanBuffer f32_buffer(PlanBufferKind kind, int64_t n, int graph, int alias_of)
{
    return (PlanBuffer){ .kind = kind, .dtype = DT_F32, .shape = { .rank = 1, .dim = { n } },
                         .alias_of = alias_of, .graph = graph, .what = "hand" };
}

/* A launch naming buffers BUFS[0..NBUF), its arguments kept in ARGS. */
static PlanStep launch_of(int nbuf, const int *bufs, PlanArg *args)
{
    PlanStep s = { .kind = STEP_LAUNCH, .node = -1, .what = "hand" };
    s.launch.nargs = nbuf;
    s.launch.arg = args;
    for (int i = 0; i < nbuf; i++) s.launch.arg[i] = (PlanArg){ .kind = ARG_BUFFER, .index = bufs[i] };
    return s;
}

/* Train: A = f(W); B = g(A) as a GEMM; C = h(view of B); D = k(C), D the loss. Eval: one
 * step writing X. E is never used.
 *   buffer  kind    bytes  live (train steps)
 *   0 W     tensor  1024   persistent
 *   1 A     node    4096   0..1
 *   2 B     node    4096   1..2
 *   3 C     node    2048   2..3
 *   4 D     node    4096   persistent (an output)
 *   5 E     node     256   nowhere
 *   6 B'    view of B
 *   7 X     node   16384   eval step 0
 * Persistent: W at 0, D at 1024: 5120 bytes. Train, largest first: A at 0; B meets A
 * (step 1) so 4096; C meets B but not A, so 0; peak 8192. Eval: X at 0, 16384. Arena
 * 5120 + 16384 = 21504. Without reuse: train 4096 + 4096 + 2048 + 256 = 10496, eval
 * 16384, arena 5120 + 26880 = 32000. */
static void test_hand_plan(void)
{
    PlanBuffer bufs[8] = {
        f32_buffer(PB_TENSOR, 256, -1, -1), f32_buffer(PB_NODE, 1024, PG_TRAIN, -1),
        f32_buffer(PB_NODE, 1024, PG_TRAIN, -1), f32_buffer(PB_NODE, 512, PG_TRAIN, -1),
        f32_buffer(PB_NODE, 1024, PG_TRAIN, -1), f32_buffer(PB_NODE, 64, PG_TRAIN, -1),
        f32_buffer(PB_NODE, 1024, PG_TRAIN, 2), f32_buffer(PB_NODE, 4096, PG_EVAL, -1),
    };
    IrGraph train, eval;
    memset(&train, 0, sizeof train);
    memset(&eval, 0, sizeof eval);
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++) train.output[r] = eval.output[r] = -1;
    train.nnodes = 5;
    train.output[IR_OUT_LOSS] = 3;
    eval.nnodes = 1;
    int train_nodes[5] = {1, 2, 3, 4, 5}, eval_nodes[1] = {7};
    int s0[2] = {1, 0}, s2[2] = {3, 6}, s3[2] = {4, 3}, x[1] = {7};
    PlanArg a0[2], a2[2], a3[2], ax[1];
    PlanStep train_steps[4] = {launch_of(2, s0, a0), { .kind = STEP_GEMM, .node = -1, .what = "hand" },
                               launch_of(2, s2, a2), launch_of(2, s3, a3)};
    train_steps[1].gemm = (PlanGemm){ .a = 1, .b = 0, .c = 2 };
    PlanStep eval_steps[1] = {launch_of(1, x, ax)};
    Plan pl;
    memset(&pl, 0, sizeof pl);
    pl.buffers = bufs;
    pl.nbuffers = 8;
    pl.graph[PG_TRAIN] = (PlanGraph){ .ir = &train, .steps = train_steps, .nsteps = 4, .node_buffer = train_nodes };
    pl.graph[PG_EVAL] = (PlanGraph){ .ir = &eval, .steps = eval_steps, .nsteps = 1, .node_buffer = eval_nodes };
    int64_t symmax[IR_MAX_SYMBOLS] = {1};
    PlanLayout l;
    plan_layout(&pl, symmax, true, &l);
    check_layout(&pl, &l, symmax, true);
    CHECK_EQ_INT(l.persistent_bytes, 5120);
    CHECK_EQ_INT(l.offset[0], 0);
    CHECK_EQ_INT(l.offset[4], 1024);
    CHECK_EQ_INT(l.offset[1], 5120);
    CHECK_EQ_INT(l.offset[2], 5120 + 4096);
    CHECK_EQ_INT(l.offset[3], 5120);
    CHECK_EQ_INT(l.offset[5], 0);
    CHECK_EQ_INT(l.offset[6], l.offset[2]);
    CHECK_EQ_INT(l.offset[7], 5120);
    CHECK_EQ_INT(l.graph_bytes[PG_TRAIN], 8192);
    CHECK_EQ_INT(l.graph_bytes[PG_EVAL], 16384);
    CHECK_EQ_INT(l.arena_bytes, 21504);
    plan_layout_free(&l);
    plan_layout(&pl, symmax, false, &l);
    check_layout(&pl, &l, symmax, false);
    CHECK_EQ_INT(l.graph_bytes[PG_TRAIN], 10496);
    CHECK_EQ_INT(l.arena_bytes, 32000);
    plan_layout_free(&l);
}

/* ---- the greedy placement against its definition ---- */

static uint64_t rng_state;

static int rnd(int n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((rng_state >> 33) % (uint64_t)n);
}

/* The placement memplan.c promises, computed from its definition the slow way: buffers by
 * size (largest first, then index), each at the lowest of 0 and the aligned ends of those
 * placed before it where it overlaps none of them that is live at a step it is. */
static void reference_offsets(int n, const size_t *bytes, const int *first, const int *last,
                              size_t *at, size_t *peak)
{
    int *order = xmalloc((size_t)n * sizeof *order);
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++)         /* insertion sort: size descending, index ascending */
        for (int j = i; j > 0 && bytes[order[j]] > bytes[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    *peak = 0;
    for (int k = 0; k < n; k++) {
        int b = order[k];
        size_t best = SIZE_MAX;
        for (int c = -1; c < k; c++) {
            size_t x = c < 0 ? 0 : (at[order[c]] + bytes[order[c]] + ALIGN - 1) / ALIGN * ALIGN;
            bool clear = x < best;
            for (int j = 0; j < k && clear; j++) {
                int o = order[j];
                bool live_together = first[o] <= last[b] && first[b] <= last[o];
                if (live_together && !disjoint(x, bytes[b], at[o], bytes[o])) clear = false;
            }
            if (clear) best = x;
        }
        at[b] = best;
        if (best + bytes[b] > *peak) *peak = best + bytes[b];
    }
    *peak = (*peak + ALIGN - 1) / ALIGN * ALIGN;
    free(order);
}

/* N node buffers of one graph of STEPS steps, with random sizes and live ranges (NESTED:
 * buffer i live from step i to STEPS - 1 - i, the shape of activations kept for the
 * backward), each named by a launch at its first and last step: plan_layout must place
 * every one where the reference does. */
static void random_plan(int n, int steps, bool nested)
{
    static const int64_t sizes[] = {1, 16, 64, 65, 100, 256, 512, 1000, 1024};
    PlanBuffer *bufs = xmalloc((size_t)n * sizeof *bufs);
    int *first = xmalloc((size_t)n * sizeof *first), *last = xmalloc((size_t)n * sizeof *last);
    size_t *bytes = xmalloc((size_t)n * sizeof *bytes), *at = xmalloc((size_t)n * sizeof *at);
    for (int i = 0; i < n; i++) {
        bufs[i] = f32_buffer(PB_NODE, sizes[rnd(nested ? 2 : 9) + (nested ? 6 : 0)], PG_TRAIN, -1);
        bytes[i] = (size_t)bufs[i].shape.dim[0] * 4;
        first[i] = nested ? i % (steps / 2) : rnd(steps);
        last[i] = nested ? steps - 1 - first[i] : first[i] + rnd(steps - first[i]);
    }
    PlanStep *st = xmalloc((size_t)steps * sizeof *st);
    PlanArg *args = xmalloc(2 * (size_t)n * sizeof *args);
    int *named = xmalloc(2 * (size_t)n * sizeof *named), used = 0;
    for (int s = 0; s < steps; s++) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (first[i] == s || last[i] == s) named[used + k++] = i;
        st[s] = launch_of(k, &named[used], &args[used]);
        used += k;
    }
    IrGraph train;
    memset(&train, 0, sizeof train);
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++) train.output[r] = -1;
    Plan pl;
    memset(&pl, 0, sizeof pl);
    pl.buffers = bufs;
    pl.nbuffers = n;
    pl.graph[PG_TRAIN] = (PlanGraph){ .ir = &train, .steps = st, .nsteps = steps };
    int64_t symmax[IR_MAX_SYMBOLS] = {1};
    PlanLayout l;
    plan_layout(&pl, symmax, true, &l);
    size_t peak;
    reference_offsets(n, bytes, first, last, at, &peak);
    int wrong = 0;
    for (int i = 0; i < n; i++) wrong += l.offset[i] != at[i];
    if (wrong || l.graph_bytes[PG_TRAIN] != peak)
        fprintf(stderr, "  %d buffers, %d steps%s: %d placed apart from the reference, region %zu, reference %zu\n",
                n, steps, nested ? ", nested" : "", wrong, l.graph_bytes[PG_TRAIN], peak);
    CHECK_EQ_INT(wrong, 0);
    CHECK_EQ_INT(l.graph_bytes[PG_TRAIN], peak);
    CHECK_EQ_INT(l.persistent_bytes, 0);
    plan_layout_free(&l);
    free(bufs), free(first), free(last), free(bytes), free(at), free(st), free(args), free(named);
}

static void test_random_plans(void)
{
    rng_state = 1;
    for (int trial = 0; trial < 400; trial++) random_plan(1 + rnd(80), 1 + rnd(70), false);
    random_plan(300, 40, false);
    random_plan(400, 1000, false);
    random_plan(200, 400, true);
    random_plan(500, 90, true);
}

/* ---- the runner on a fake device ---- */

typedef struct Fake {
    Device base;
    int allocs;
    unsigned char *mem;
    size_t bytes;
    unsigned char *marked;      /* per arena byte: handed to mark_unused */
} Fake;

static int fake_alloc(Device *d, size_t bytes, DevPtr *out)
{
    Fake *f = (Fake *)d;
    f->allocs++;
    f->mem = xcalloc(bytes, 1);
    f->marked = xcalloc(bytes, 1);
    f->bytes = bytes;
    *out = (DevPtr)(uintptr_t)f->mem;
    return 0;
}

static void fake_free(Device *d, DevPtr p)
{
    Fake *f = (Fake *)d;
    CHECK(p == (DevPtr)(uintptr_t)f->mem);
    free(f->mem);
    free(f->marked);
    f->mem = f->marked = NULL;
}

static void fake_mark_unused(Device *d, DevPtr p, size_t bytes)
{
    Fake *f = (Fake *)d;
    size_t at = (size_t)(p - (DevPtr)(uintptr_t)f->mem);
    CHECK(at + bytes <= f->bytes);
    for (size_t i = at; i < at + bytes && i < f->bytes; i++) f->marked[i]++;
}

static int fake_upload(Device *d, DevPtr dst, const void *src, size_t bytes)
{
    (void)d;
    memcpy((void *)(uintptr_t)dst, src, bytes);
    return 0;
}

static int fake_download(Device *d, void *dst, DevPtr src, size_t bytes)
{
    (void)d;
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return 0;
}

static int fake_kernel(Device *d, const char *name, void **handle)
{
    (void)d;
    *handle = (void *)name;
    return 0;
}

static int fake_launch(Device *d, void *k, unsigned grid, unsigned block, void **args,
                       const DeviceSite *site)
{
    (void)d, (void)k, (void)grid, (void)block, (void)args, (void)site;
    return 0;
}

static int fake_gemm(Device *d, const GemmCall *g, const DeviceSite *site)
{
    (void)d, (void)g, (void)site;
    return 0;
}

static const DeviceOps fake_ops = {
    .alloc = fake_alloc, .free = fake_free, .mark_unused = fake_mark_unused,
    .upload = fake_upload, .download = fake_download, .kernel = fake_kernel,
    .launch = fake_launch, .gemm = fake_gemm,
};

static void fake_open(Fake *f, size_t free_bytes)
{
    memset(f, 0, sizeof *f);
    f->base.ops = &fake_ops;
    snprintf(f->base.name, sizeof f->base.name, "Fake GPU");
    f->base.free_bytes = free_bytes;
}

/* Every arena byte is either some buffer's or marked unused, exactly once. */
static void check_padding(const Plan *pl, DevExec *e, Fake *f, const int64_t *symmax)
{
    unsigned char *owned = xcalloc(f->bytes, 1);
    for (int b = 0; b < pl->nbuffers; b++) {
        size_t at = (size_t)(devexec_buffer(e, b) - (DevPtr)(uintptr_t)f->mem);
        size_t bytes = plan_buffer_bytes(pl, b, symmax);
        for (size_t i = at; i < at + bytes && i < f->bytes; i++) owned[i] = 1;
    }
    size_t wrong = 0, marked = 0;
    for (size_t i = 0; i < f->bytes; i++) {
        wrong += owned[i] ? f->marked[i] != 0 : f->marked[i] != 1;
        marked += f->marked[i] != 0;
    }
    CHECK_EQ_INT(wrong, 0);
    CHECK(marked > 0);      /* alignment leaves gaps in any real plan */
    free(owned);
}

/* In a child: reads node ID of G; returns whether it died with MESSAGE on stderr. */
static bool value_aborts(DevExec *e, const IrGraph *g, int id, const char *message)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(tmp_path("child.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 2);
        float *out = xmalloc((size_t)1 << 24);
        int64_t n;
        devexec_value(e, g, id, out, &n);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    FILE *fp = fopen(tmp_path("child.txt"), "rb");
    char text[2048] = "";
    size_t n = fp ? fread(text, 1, sizeof text - 1, fp) : 0;
    if (fp) fclose(fp);
    text[n] = '\0';
    bool ok = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(text, message);
    if (!ok) fprintf(stderr, "  reading node %d: status %d, stderr: %s\n", id, status, text);
    return ok;
}

static void test_runner(const char *precision, bool lower_precision_fix)
{
    IrProgram *p;
    Source *src;
    Plan *pl = compile_model("mlp.net", precision, PLAN_EAGER, &p, &src);
    if (!pl) return;
    int64_t symmax[IR_MAX_SYMBOLS] = {64};
    PlanLayout l;
    plan_layout(pl, symmax, true, &l);
    Fake f;
    fake_open(&f, l.arena_bytes - 1);       /* one byte short */
    capture_start();
    DevExec *e = devexec_new(pl, &f.base, symmax, "models/mlp.net");
    const char *err = capture_end();
    CHECK(e == NULL);
    CHECK_EQ_INT(f.allocs, 0);
    CHECK(strstr(err, "cgc: error: models/mlp.net: the plan needs ") != NULL);
    CHECK(strstr(err, "at batch 64) but Fake GPU has ") != NULL);
    const char *want = lower_precision_fix
        ? "fixes: a smaller batch, checkpoint = auto, or a lower precision (bf16)\n"
        : "fixes: a smaller batch, or checkpoint = auto\n";
    CHECK(strstr(err, want) != NULL);
    fputs(err, stdout);
    devexec_free(e);

    fake_open(&f, l.arena_bytes);           /* just fits */
    e = devexec_new(pl, &f.base, symmax, "models/mlp.net");
    CHECK(e != NULL);
    if (e) {
        CHECK_EQ_INT(f.allocs, 1);
        CHECK_EQ_INT(devexec_arena_bytes(e), l.arena_bytes);
        check_padding(pl, e, &f, symmax);
        DevFeed feed;
        memset(&feed, 0, sizeof feed);
        feed.symvals[0] = 64;
        CHECK_EQ_INT(devexec_run(e, &p->train, &feed), 0);
        float loss;
        CHECK_EQ_INT(devexec_value(e, &p->train, p->train.output[IR_OUT_LOSS], &loss, NULL), 0);
        int hidden = -1, assign = -1;       /* a value the plan lets others overwrite */
        for (int id = 0; id < p->train.nnodes; id++) {
            const IrNode *n = &p->train.nodes[id];
            if (n->op == IR_MATMUL && hidden < 0) hidden = id;
            if (n->op == IR_ASSIGN && assign < 0) assign = id;
        }
        CHECK(hidden >= 0 && assign >= 0);
        if (hidden >= 0) CHECK(value_aborts(e, &p->train, hidden, "is not an output"));
        if (assign >= 0) CHECK(value_aborts(e, &p->train, assign, "has no buffer"));
        devexec_free(e);
    }
    plan_layout_free(&l);
    plan_free(pl);
    ir_program_free(p);
    source_free(src);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cgc_memplan_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    static const char *const models[] = {"mlp.net", "narrow_mlp.net", "resmlp.net", "regression.net"};
    static const char *const precisions[] = {"fp32", "tf32", "bf16", "fp16"};
    static const PlanMode modes[] = {PLAN_EAGER, PLAN_DEFAULT, PLAN_REDUCE_OVERHEAD};
    for (int m = 0; m < 4; m++)
        for (int k = 0; k < 4; k++)
            for (int mode = 0; mode < 3; mode++) {
                test_model(models[m], precisions[k], "1", modes[mode]);
                if (k == 3) test_model(models[m], precisions[k], "2", modes[mode]);
            }
    /* max-autotune: a fused MLP run's buffers live from its first layer's step (mlp
     * 512-128-10; narrow 4 layers, and its input gradients 10-128-128-128) */
    test_model("mlp.net", "fp16", "1", PLAN_MAX_AUTOTUNE);
    test_model("narrow_mlp.net", "bf16", "1", PLAN_MAX_AUTOTUNE);
    test_model("narrow_mlp.net", "fp16", "2", PLAN_MAX_AUTOTUNE);
    /* the convolution runs: implicit GEMMs reading the image, storing NCHW, reading the
     * NCHW gradient, computing an epilogue; a library's data gradient into the FOLD */
    for (int k = 0; k < 4; k++)
        for (int mode = 0; mode < 3; mode++) test_model("cnn.net", precisions[k], "1", modes[mode]);
    test_model("cnn.net", "bf16", "1", PLAN_MAX_AUTOTUNE);
    test_model("cnn.net", "fp16", "2", PLAN_MAX_AUTOTUNE);
    test_backward_run();
    test_hand_plan();
    test_random_plans();
    test_runner("fp32", true);
    test_runner("fp16", false);
    int rc = check_result();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return rc;
}
