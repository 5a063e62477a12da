/* test_recompute.c: activation checkpointing (compiler/recompute.c, driver/compile.c).
 *
 *  1. Gradients unchanged: every model in models/ at fp32, bf16 and fp16 (and mlp and
 *     resmlp with gradient accumulation, so that train_micro is rebuilt too) is compiled
 *     twice; one copy recomputes the least-memory schedule's values, and one more copy a
 *     schedule from the middle of the frontier. Each trains 10 optimizer steps on the
 *     CPU executor from the same seed on the same random batches: every persistent
 *     tensor and every run's loss must be bit-identical. The rebuilt graphs are checked
 *     for shape: the forward untouched, no backward node reads a recomputed node's
 *     original, and every recompute node is one copy of a recomputed node, reading the
 *     copies of its recomputed inputs and the originals of the others. n = 0 changes
 *     nothing.
 *  2. The cost model against a closed formula: on a 6-layer tanh MLP in f32, the FLOPs
 *     and the modelled peak of schedules keeping one or two layer outputs, from the
 *     layer sizes alone (matmul 2*N*K*W, add 1 and tanh 10 per element).
 *  3. The solver against brute force: on small models (a chain, resmlp with its residual
 *     branches and dropout, regression) every subset of the cuts is a schedule; the
 *     Pareto frontier of (FLOPs, modelled peak) over all of them must be the solver's.
 *  4. Planned memory (driver/compile.h, default mode) on 16- and 32-layer MLPs, resmlp
 *     and mlp: `all` lowers the activation bytes (to at most 45% of none's for 16 layers,
 *     40% for 32); `auto` fits every budget between the two with exactly the FLOPs of
 *     the first frontier schedule whose plan fits (found here by a linear scan), and
 *     never more than keeping every k-th layer's output (k = 2 .. 8) that fits the same
 *     budget; below every plan it warns, names a batch, and keeps the least memory.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "driver/compile.h"
#include "compiler/passes.h"
#include "driver/pipeline.h"
#include "runtime/cpu/exec.h"
#include "tests/check.h"

enum { STEPS = 10, BATCH = 16, MAX_MODELS = 16 };
static const uint64_t SEED = 20260417;

/* ---- compiling ---- */

static char model_paths[MAX_MODELS][512];
static int nmodels;

static int by_name(const void *a, const void *b)
{
    return strcmp(a, b);
}

static void find_models(void)
{
    DIR *dir = opendir(CGC_MODELS_DIR);
    CHECK(dir != NULL);
    for (struct dirent *e; dir && (e = readdir(dir)) && nmodels < MAX_MODELS;) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".net") == 0)
            snprintf(model_paths[nmodels++], sizeof model_paths[0], "%s/%s", CGC_MODELS_DIR, e->d_name);
    }
    if (dir) closedir(dir);
    qsort(model_paths, (size_t)nmodels, sizeof model_paths[0], by_name);
    CHECK(nmodels >= 3);
}

static IrProgram *compile_model(const char *path, const Override *ov, int nov)
{
    Source *src = source_load(path);
    CHECK(src != NULL);
    if (!src) return NULL;
    IrProgram *p = pipeline_compile(src, ov, nov);
    source_free(src);
    CHECK(p != NULL);
    return p;
}

/* Whether every one of the N candidates CAND is a forward node of G (a failed check for
 * each that is not): the checks below index per-forward-node arrays with them. */
static bool candidates_in(const IrGraph *g, const int *cand, int n)
{
    bool in = true;
    for (int k = 0; k < n; k++)
        if (cand[k] < 0 || cand[k] >= g->nforward) {
            fprintf(stderr, "candidate %d is node %d, not one of the %d forward nodes\n", k,
                    cand[k], g->nforward);
            CHECK(!"a candidate that is a forward node");
            in = false;
        }
    return in;
}

/* ---- structure of the rebuilt graphs ---- */

static bool same_op(const IrNode *a, const IrNode *b)
{
    return a->op == b->op && a->dtype == b->dtype && ir_shape_equal(&a->shape, &b->shape) &&
           a->nin == b->nin && a->axis == b->axis && a->value == b->value &&
           a->index == b->index && a->flags == b->flags && a->loc.line == b->loc.line &&
           a->loc.col == b->loc.col && (a->name && b->name ? strcmp(a->name, b->name) == 0 : a->name == b->name);
}

/* The candidate that recompute node J of G copies, given COPY_OF for earlier nodes (the
 * candidate each earlier recompute node copies, -1 for others), or -1 when none: same op
 * and attributes, each input a copy of the original's input when that is recomputed too
 * (CAND), else that input itself. */
static int copied_candidate(const IrGraph *g, int j, const int *copy_of, const bool *cand,
                            const int *copies)
{
    const IrNode *n = &g->nodes[j];
    for (int c = 0; c < g->nforward; c++) {
        /* identical forward nodes (a convolution's lowering makes some) are told apart by
         * which is copied already */
        if (!cand[c] || copies[c] || !same_op(n, &g->nodes[c])) continue;
        bool inputs = true;
        for (int k = 0; k < n->nin; k++) {
            int in = n->in[k], want = g->nodes[c].in[k];
            inputs &= cand[want] ? in >= g->nforward && copy_of[in] == want : in == want;
        }
        if (inputs) return c;
    }
    return -1;
}

/* G after checkpointing every candidate (CAND, N of them), against BEFORE (the graph
 * as lowered): the forward unchanged, no backward read of a candidate's original, every
 * recompute node a copy of a candidate (each copied once), the rest as before. */
static void check_rebuilt(const IrGraph *before, const IrGraph *g, const int *cand, int n)
{
    CHECK_EQ_INT(g->nforward, before->nforward);
    bool *is_cand = calloc((size_t)g->nforward + 1, sizeof *is_cand);
    for (int k = 0; k < n; k++) is_cand[cand[k]] = true;
    for (int i = 0; i < g->nforward; i++) CHECK(same_op(&g->nodes[i], &before->nodes[i]) && !g->nodes[i].recompute);
    int *copy_of = malloc((size_t)g->nnodes * sizeof *copy_of);
    int *copies = calloc((size_t)g->nforward + 1, sizeof *copies);
    int ncopies = 0, bad_reads = 0, bad_copies = 0;
    for (int j = g->nforward; j < g->nnodes; j++) {
        const IrNode *node = &g->nodes[j];
        for (int k = 0; k < node->nin; k++) bad_reads += node->in[k] < g->nforward && is_cand[node->in[k]];
        copy_of[j] = node->recompute ? copied_candidate(g, j, copy_of, is_cand, copies) : -1;
        if (node->recompute) {
            ncopies++;
            bad_copies += copy_of[j] < 0;
            if (copy_of[j] >= 0) copies[copy_of[j]]++;
        }
    }
    CHECK_EQ_INT(bad_reads, 0);
    CHECK_EQ_INT(bad_copies, 0);
    for (int k = 0; k < n; k++) CHECK(copies[cand[k]] <= 1);
    CHECK_EQ_INT(g->nnodes, before->nnodes + ncopies);
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++) {
        CHECK_EQ_INT(g->output[r] < 0, before->output[r] < 0);
        if (g->output[r] >= 0) CHECK(same_op(&g->nodes[g->output[r]], &before->nodes[before->output[r]]));
    }
    free(copies);
    free(copy_of);
    free(is_cand);
}

/* ---- training on the CPU ---- */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Random values for input I of P: class ids for i32 inputs, else uniform in [-1, 1]. */
static void *make_input(const IrProgram *p, int i, uint64_t *s)
{
    int64_t symvals[IR_MAX_SYMBOLS] = {BATCH, 1, 1, 1, 1, 1, 1, 1};
    int64_t n = ir_numel(&p->inputs[i].shape, symvals);
    if (p->inputs[i].dtype == DT_I32) {
        int32_t *v = malloc((size_t)n * sizeof *v);
        uint64_t classes = p->num_classes > 0 ? (uint64_t)p->num_classes : 2;
        for (int64_t k = 0; k < n; k++) v[k] = (int32_t)(splitmix(s) % classes);
        return v;
    }
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t k = 0; k < n; k++) v[k] = (float)((double)(splitmix(s) >> 11) / 4503599627370496.0 - 1.0);
    return v;
}

/* Runs G of P on E with a fresh random batch from RNG; returns the loss. */
static double run_graph(CpuExec *e, const IrProgram *p, const IrGraph *g, int64_t micro,
                        uint64_t *rng)
{
    CpuFeed f = {.symvals = {BATCH, 1, 1, 1, 1, 1, 1, 1}};
    f.runtime[IR_RT_TOTAL_STEPS] = STEPS;
    f.runtime[IR_RT_MICRO_STEP] = (double)micro;
    void *owned[16] = {0};
    for (int i = 0; i < p->ninputs; i++) f.inputs[i] = owned[i] = make_input(p, i, rng);
    CHECK_EQ_INT(cpu_exec_run(e, g, &f), 0);
    CHECK(g->output[IR_OUT_LOSS] >= 0);     /* -1: the executor would assert */
    double loss = g->output[IR_OUT_LOSS] >= 0 ? cpu_exec_scalar(e, g->output[IR_OUT_LOSS]) : NAN;
    for (int i = 0; i < p->ninputs; i++) free(owned[i]);
    return loss;
}

/* STEPS optimizer steps of P; LOSSES receives every graph run's loss. */
static CpuExec *train(const IrProgram *p, double *losses)
{
    CpuExec *e = cpu_exec_new(p, CPU_F32);
    cpu_exec_init_tensors(e, SEED);
    int accumulate = p->cfg.accumulate > 1 ? (int)p->cfg.accumulate : 1;
    uint64_t rng = SEED;
    int64_t micro = 0;
    for (int step = 0; step < STEPS; step++)
        for (int m = 0; m < accumulate; m++, micro++)
            losses[micro] = run_graph(e, p, m == accumulate - 1 ? &p->train : &p->train_micro, micro, &rng);
    return e;
}

static int64_t tensor_bytes(const IrProgram *p, int t)
{
    return ir_numel(&p->tensors[t].shape, NULL) * (int64_t)sizeof(float);
}

/* Bit-identical tensors and losses; and training moved the parameters (so the equality
 * says something). */
static void compare_runs(const IrProgram *p, CpuExec *plain, CpuExec *ckpt, const double *la,
                         const double *lb, int nruns, const char *what)
{
    int differ = 0, moved = 0;
    for (int t = 0; t < p->ntensors; t++) {
        int64_t bytes = tensor_bytes(p, t);
        if (memcmp(cpu_exec_tensor(plain, t), cpu_exec_tensor(ckpt, t), (size_t)bytes) != 0) {
            fprintf(stderr, "%s: tensor %s differs with checkpointing\n", what, p->tensors[t].name);
            differ++;
        }
    }
    CpuExec *init = cpu_exec_new(p, CPU_F32);
    cpu_exec_init_tensors(init, SEED);
    for (int t = 0; t < p->nparams; t++)
        moved += memcmp(cpu_exec_tensor(init, t), cpu_exec_tensor(plain, t), (size_t)tensor_bytes(p, t)) != 0;
    cpu_exec_free(init);
    CHECK_EQ_INT(differ, 0);
    CHECK_EQ_INT(moved, p->nparams);
    CHECK(memcmp(la, lb, (size_t)nruns * sizeof *la) == 0);
}

/* PATH at PRECISION with gradient accumulation ACCUMULATE, trained plainly and with the
 * schedule of index WHICH of its frontier (-1: the last, least memory): bit for bit. */
static void same_training(const char *path, const char *precision, const char *accumulate, int which)
{
    char what[600];
    snprintf(what, sizeof what, "%s %s accumulate %s schedule %d", path, precision, accumulate, which);
    printf("%s\n", what);
    Override ov[2] = { {"precision", "precision", precision}, {"accumulate", "accumulate", accumulate} };
    IrProgram *plain = compile_model(path, ov, 2), *ckpt = compile_model(path, ov, 2);
    if (!plain || !ckpt) return;
    RecomputeChoices rc;
    recompute_choices(ckpt, &rc);
    /* every model has something worth recomputing but regression, whose one hidden
     * layer would be recomputed from the input only to be kept beside the output */
    CHECK(rc.n >= 2 || strstr(path, "/regression.net"));
    const RecomputeSchedule *s = &rc.s[which < 0 || which >= rc.n ? rc.n - 1 : which];
    int n = s->nnodes;
    CHECK(n > 0 || rc.n < 2);
    if (candidates_in(&ckpt->train, s->nodes, n)) {
        recompute_apply(ckpt, s->nodes, n);
        check_rebuilt(&plain->train, &ckpt->train, s->nodes, n);
        if (plain->train_micro.nnodes) check_rebuilt(&plain->train_micro, &ckpt->train_micro, s->nodes, n);
        CHECK_EQ_INT(ckpt->train.nnodes, plain->train.nnodes + n);   /* each needed: one copy */
        int nruns = STEPS * (plain->cfg.accumulate > 1 ? (int)plain->cfg.accumulate : 1);
        double *la = calloc((size_t)nruns, sizeof *la), *lb = calloc((size_t)nruns, sizeof *lb);
        CpuExec *a = train(plain, la), *b = train(ckpt, lb);
        compare_runs(plain, a, b, la, lb, nruns, what);
        cpu_exec_free(a);
        cpu_exec_free(b);
        free(la);
        free(lb);
    }
    recompute_choices_free(&rc);
    ir_program_free(plain);
    ir_program_free(ckpt);
}

static void test_same_training(const char *path, const char *precision, const char *accumulate)
{
    same_training(path, precision, accumulate, -1);
    same_training(path, precision, accumulate, 1);
}

static bool same_graph(const IrGraph *a, const IrGraph *b)
{
    return a->nnodes == b->nnodes && a->nforward == b->nforward &&
           memcmp(a->output, b->output, sizeof a->output) == 0 &&
           memcmp(a->nodes, b->nodes, (size_t)a->nnodes * sizeof *a->nodes) == 0;
}

/* n = 0 leaves the graphs exactly as they are. */
static void test_apply_none(const char *path)
{
    Override ov[1] = { {"accumulate", "accumulate", "2"} };
    IrProgram *p = compile_model(path, ov, 1);
    if (!p) return;
    IrGraph train, micro;
    ir_graph_init(&train, "train");
    ir_graph_init(&micro, "train_micro");
    ir_graph_copy(&train, &p->train, "train");
    ir_graph_copy(&micro, &p->train_micro, "train_micro");
    recompute_apply(p, NULL, 0);
    CHECK(p->train_micro.nnodes > 0);
    CHECK(same_graph(&p->train, &train));
    CHECK(same_graph(&p->train_micro, &micro));
    ir_graph_free(&train);
    ir_graph_free(&micro);
    ir_program_free(p);
}

/* ---- generated models ---- */

static char tmpdir[64];

/* A tanh MLP of LAYERS hidden layers of WIDTH (inputs 784, 10 classes) at BATCH rows, in
 * f32: written to the test's directory; returns its path (static). */
static const char *write_mlp(int layers, int width, int batch)
{
    static char path[160];
    snprintf(path, sizeof path, "%s/mlp%d_%d_%d.net", tmpdir, layers, width, batch);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return path;
    fprintf(f, "model deep {\n    input x: f32[N, 784]\n    input y: i32[N]\n");
    fprintf(f, "    h1 = tanh(linear(x, %d))\n", width);
    for (int i = 2; i <= layers; i++) fprintf(f, "    h%d = tanh(linear(h%d, %d))\n", i, i - 1, width);
    fprintf(f, "    logits = linear(h%d, 10)\n    output logits\n    loss cross_entropy(logits, y)\n}\n"
               "train {\n    data = synthetic\n    batch = %d\n    optimizer = sgd(lr = 0.01)\n}\n",
            layers, batch);
    fclose(f);
    return path;
}

/* The forward node of P named NAME, or -1. */
static int named(const IrProgram *p, const char *name)
{
    for (int i = 0; i < p->train.nforward; i++)
        if (p->train.nodes[i].name && strcmp(p->train.nodes[i].name, name) == 0) return i;
    return -1;
}

/* ---- the cost model against a closed formula ---- */

enum { CF_LAYERS = 6, CF_WIDTH = 64, CF_BATCH = 32 };

/* FLOPs of hidden layer I (1-based) of the closed-form MLP: matmul, bias add, tanh. */
static double layer_flops(int i)
{
    double k = i == 1 ? 784 : CF_WIDTH, nw = (double)CF_BATCH * CF_WIDTH;
    return 2 * CF_BATCH * k * CF_WIDTH + nw * 1 + nw * 10;
}

/* Schedule keeping h<A> (and h<B> when B > 0) of P, against the formula. */
static void check_formula(const IrProgram *p, int a, int b)
{
    double u = (double)CF_BATCH * CF_WIDTH * 4, logits = (double)CF_BATCH * 10 * 4;
    int kept[2], n = 0;
    char name[16];
    snprintf(name, sizeof name, "h%d", a);
    kept[n++] = named(p, name);
    if (b > 0) {
        snprintf(name, sizeof name, "h%d", b);
        kept[n++] = named(p, name);
    }
    double flops = 0, peak;
    for (int i = 1; i < a; i++) flops += layer_flops(i);
    if (b > 0) {
        for (int i = a + 1; i < b; i++) flops += layer_flops(i);
        peak = fmax(fmax(a * u, u + (b - a) * u), 2 * u + (CF_LAYERS - b) * u + logits);
    } else {
        peak = fmax(a * u, u + (CF_LAYERS - a) * u + logits);
    }
    RecomputeSchedule s;
    recompute_schedule(p, kept, n, &s);
    if (s.flops != flops || s.peak != peak)
        fprintf(stderr, "keeping h%d h%d: flops %.0f (formula %.0f), peak %.0f (formula %.0f)\n",
                a, b, s.flops, flops, s.peak, peak);
    CHECK(s.flops == flops);
    CHECK(s.peak == peak);
    CHECK_EQ_INT(s.nkept, n);
    recompute_schedule_free(&s);
}

static void test_formula(void)
{
    const char *path = write_mlp(CF_LAYERS, CF_WIDTH, CF_BATCH);
    IrProgram *p = compile_model(path, NULL, 0);
    if (!p) return;
    RecomputeSchedule none;
    recompute_schedule(p, NULL, 0, &none);
    CHECK(none.flops == 0 && none.nnodes == 0);
    CHECK(none.peak == CF_LAYERS * (double)CF_BATCH * CF_WIDTH * 4 + CF_BATCH * 10 * 4);
    recompute_schedule_free(&none);
    RecomputeChoices rc;
    recompute_choices(p, &rc);
    for (int i = 1; i <= CF_LAYERS; i++) {    /* every layer's output is a cut */
        char name[16];
        snprintf(name, sizeof name, "h%d", i);
        bool cut = false;
        for (int c = 0; c < rc.ncuts; c++) cut |= rc.cuts[c] == named(p, name);
        CHECK(cut);
    }
    CHECK(rc.n >= 3);
    recompute_choices_free(&rc);
    for (int a = 1; a <= CF_LAYERS; a++) {
        check_formula(p, a, 0);
        for (int b = a + 1; b <= CF_LAYERS; b++) check_formula(p, a, b);
    }
    ir_program_free(p);
}

/* ---- the solver against brute force ---- */

typedef struct Point {
    double flops, peak;
} Point;

static int by_flops(const void *a, const void *b)
{
    const Point *x = a, *y = b;
    if (x->flops != y->flops) return x->flops < y->flops ? -1 : 1;
    return (x->peak > y->peak) - (x->peak < y->peak);
}

enum { MAX_BRUTE_CUTS = 16 };

static void test_frontier_exact(const char *path, const char *precision)
{
    Override ov[1] = { {"precision", "precision", precision} };
    IrProgram *p = compile_model(path, ov, 1);
    if (!p) return;
    RecomputeChoices rc;
    recompute_choices(p, &rc);
    printf("%s %s: %d cuts, %d schedules on the frontier\n", path, precision, rc.ncuts, rc.n);
    CHECK(rc.ncuts >= 3 && rc.ncuts <= MAX_BRUTE_CUTS);
    if (rc.ncuts < 3 || rc.ncuts > MAX_BRUTE_CUTS) {
        recompute_choices_free(&rc);
        ir_program_free(p);
        return;
    }
    int total = 1 << rc.ncuts, nf = 0;
    Point *pt = malloc((size_t)total * sizeof *pt);
    int kept[MAX_BRUTE_CUTS];
    for (int mask = 0; mask < total; mask++) {
        int n = 0;
        for (int c = 0; c < rc.ncuts; c++)
            if (mask >> c & 1) kept[n++] = rc.cuts[c];
        RecomputeSchedule s;
        recompute_schedule(p, kept, n, &s);
        pt[mask] = (Point){ s.flops, s.peak };
        recompute_schedule_free(&s);
    }
    qsort(pt, (size_t)total, sizeof *pt, by_flops);
    for (int i = 0; i < total; i++)     /* fewer FLOPs first: each point under every earlier one */
        if (nf == 0 || pt[i].peak < pt[nf - 1].peak) pt[nf++] = pt[i];
    CHECK_EQ_INT(rc.n, nf);
    int differ = 0;
    for (int i = 0; i < nf && i < rc.n; i++)
        if (rc.s[i].flops != pt[i].flops || rc.s[i].peak != pt[i].peak) {
            fprintf(stderr, "frontier point %d: solver %.0f FLOPs %.0f bytes, brute force %.0f %.0f\n",
                    i, rc.s[i].flops, rc.s[i].peak, pt[i].flops, pt[i].peak);
            differ++;
        }
    CHECK_EQ_INT(differ, 0);
    free(pt);
    recompute_choices_free(&rc);
    ir_program_free(p);
}

/* What the compiler writes to stderr between capture_start and capture_end. */
static FILE *capture_file;
static int saved_stderr;
static char captured[4096];

static void capture_start(void)
{
    fflush(stderr);
    capture_file = tmpfile();
    CHECK(capture_file != NULL);
    saved_stderr = dup(2);
    if (capture_file) dup2(fileno(capture_file), 2);
}

static const char *capture_end(void)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    size_t n = 0;
    if (capture_file) {
        rewind(capture_file);
        n = fread(captured, 1, sizeof captured - 1, capture_file);
        fclose(capture_file);
    }
    captured[n] = '\0';
    return captured;
}

/* ---- planned memory ---- */

/* PATH (with OV) compiled by compile_program in the default mode; *BYTES its planned
 * activation bytes. The caller frees c->p after compiled_free. */
static void compile_path(const char *path, const Override *ov, int nov, Compiled *c, const char **said)
{
    IrProgram *p = compile_model(path, ov, nov);
    memset(c, 0, sizeof *c);
    *said = "";
    if (!p) return;
    capture_start();
    int rc = compile_program(p, &(CompileOptions){.mode = PLAN_DEFAULT, .net_path = path}, c);
    *said = capture_end();
    CHECK_EQ_INT(rc, 0);
}

static void free_compiled(Compiled *c)
{
    IrProgram *p = c->p;
    compiled_free(c);
    ir_program_free(p);
}

static size_t policy_bytes(const char *path, const char *precision, const char *policy)
{
    Override ov[2] = { {"precision", "precision", precision}, {"checkpoint", "checkpoint", policy} };
    Compiled c;
    const char *said;
    compile_path(path, ov, 2, &c, &said);
    size_t bytes = c.p ? compiled_activation_bytes(&c) : 0;
    if (c.p) free_compiled(&c);
    return bytes;
}

/* The planned activation bytes of PATH with schedule S applied, compiled here step by
 * step as a trial of compile.c does (the oracle of `auto`'s choice). */
static size_t planned_with(const char *path, const RecomputeSchedule *s)
{
    IrProgram *p = compile_model(path, NULL, 0);
    if (!p) return 0;
    recompute_apply(p, s->nodes, s->nnodes);
    fusion_assign(p);
    Plan *plan = plan_build(p, PLAN_DEFAULT, path, NULL);
    int64_t symmax[IR_MAX_SYMBOLS] = {p->cfg.batch, 1, 1, 1, 1, 1, 1, 1};
    PlanLayout l;
    plan_layout(plan, symmax, true, &l);
    size_t a = l.graph_bytes[PG_TRAIN], b = l.graph_bytes[PG_TRAIN_MICRO];
    plan_layout_free(&l);
    plan_free(plan);
    ir_program_free(p);
    return a > b ? a : b;
}

/* `all` lowers PATH's planned activation bytes to at most PERCENT of none's. */
static void test_all_lowers(const char *path, const char *precision, int percent)
{
    size_t none = policy_bytes(path, precision, "none"), all = policy_bytes(path, precision, "all");
    printf("%s %s: activation bytes none %zu, all %zu (%.1f%%)\n", path, precision, none, all,
           none ? 100.0 * (double)all / (double)none : 0);
    CHECK(none > 0 && all > 0);
    CHECK((double)all * 100 <= (double)none * percent);
}

enum { MAX_K = 8 };

/* `auto` on PATH (an MLP of LAYERS from write_mlp) at budgets between `all` and `none`
 * and at every baseline's own bytes: it fits, with the FLOPs of the first frontier
 * schedule whose plan fits, and no more than any baseline that fits. */
static void test_budgets(const char *path, int layers)
{
    IrProgram *p = compile_model(path, NULL, 0);
    if (!p) return;
    RecomputeChoices rc;
    recompute_choices(p, &rc);
    size_t *planned = malloc((size_t)rc.n * sizeof *planned);
    for (int i = 0; i < rc.n; i++) planned[i] = planned_with(path, &rc.s[i]);
    size_t base_bytes[MAX_K + 1];
    double base_flops[MAX_K + 1];
    for (int k = 2; k <= MAX_K; k++) {  /* keep every k-th layer's output */
        int kept[64], n = 0;
        for (int i = k; i < layers && n < 64; i += k) {
            char name[16];
            snprintf(name, sizeof name, "h%d", i);
            kept[n++] = named(p, name);
        }
        RecomputeSchedule s;
        recompute_schedule(p, kept, n, &s);
        base_bytes[k] = planned_with(path, &s);
        base_flops[k] = s.flops;
        recompute_schedule_free(&s);
    }
    size_t none = planned[0], all = policy_bytes(path, "fp32", "all");
    size_t budgets[5 + MAX_K];
    int nb = 0;
    for (int t = 1; t <= 9; t += 2) budgets[nb++] = all + (none - all) * (size_t)t / 10;
    for (int k = 2; k <= MAX_K; k++) budgets[nb++] = base_bytes[k];
    for (int b = 0; b < nb; b++) {
        char memory[32];
        snprintf(memory, sizeof memory, "%zu", budgets[b]);
        Override ov[2] = { {"checkpoint", "checkpoint", "auto"}, {"memory", "memory", memory} };
        Compiled c;
        const char *said;
        compile_path(path, ov, 2, &c, &said);
        if (!c.p) continue;
        int first = 0;
        while (first < rc.n && planned[first] > budgets[b]) first++;
        double flops = c.schedule ? c.schedule->flops : 0;
        printf("  auto, budget %zu: %zu bytes, %.3g FLOPs recomputed\n", budgets[b],
               compiled_activation_bytes(&c), flops);
        CHECK(compiled_activation_bytes(&c) <= budgets[b] && !c.over_budget);
        CHECK(strstr(said, "warning") == NULL);
        CHECK(first < rc.n && flops == rc.s[first < rc.n ? first : 0].flops);
        for (int k = 2; k <= MAX_K; k++)
            if (base_bytes[k] <= budgets[b] && flops > base_flops[k]) {
                fprintf(stderr, "auto recomputes %.0f FLOPs, keeping every %d-th layer %.0f\n",
                        flops, k, base_flops[k]);
                CHECK(!"auto no costlier than a baseline that fits");
            }
        free_compiled(&c);
    }
    /* below every plan: a warning naming the batch that would fit, and the least memory */
    Override ov[2] = { {"checkpoint", "checkpoint", "auto"}, {"memory", "memory", "1"} };
    Compiled c;
    const char *said;
    compile_path(path, ov, 2, &c, &said);
    if (c.p) {
        CHECK(c.over_budget && c.budget == 1);
        CHECK(strstr(said, "checkpoint = auto") != NULL && strstr(said, "not even one row") != NULL);
        CHECK_EQ_INT(compiled_activation_bytes(&c), all);
        free_compiled(&c);
    }
    free(planned);
    recompute_choices_free(&rc);
    ir_program_free(p);
}

int main(void)
{
    find_models();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cgc_recompute_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    static const char *const precisions[] = {"fp32", "bf16", "fp16"};
    for (int m = 0; m < nmodels; m++)
        for (int k = 0; k < 3; k++) test_same_training(model_paths[m], precisions[k], "1");
    char mlp[600], resmlp[600];
    snprintf(mlp, sizeof mlp, "%s/mlp.net", CGC_MODELS_DIR);
    snprintf(resmlp, sizeof resmlp, "%s/resmlp.net", CGC_MODELS_DIR);
    test_same_training(mlp, "fp16", "2");
    test_same_training(resmlp, "bf16", "2");   /* dropout's counter is the micro-step */
    test_apply_none(mlp);
    test_formula();
    test_frontier_exact(write_mlp(3, 32, 16), "fp32");
    test_frontier_exact(resmlp, "fp32");        /* residual branches, dropout */
    test_frontier_exact(mlp, "fp16");
    /* activations dominate: batch 8192 (only planned, never run) */
    char deep16[160];
    snprintf(deep16, sizeof deep16, "%s", write_mlp(15, 512, 8192));
    test_all_lowers(deep16, "fp32", 45);
    test_all_lowers(write_mlp(31, 512, 8192), "fp32", 40);
    test_all_lowers(resmlp, "bf16", 80);
    test_budgets(deep16, 15);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_result();
}
