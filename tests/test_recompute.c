/* test_recompute.c: activation checkpointing (compiler/recompute.c).
 *
 *  1. Gradients unchanged: every model in models/ at fp32, bf16 and fp16 (and mlp and
 *     resmlp with gradient accumulation, so that train_micro is rebuilt too) is compiled
 *     twice; one copy recomputes every candidate. Both train 10 optimizer steps on the
 *     CPU executor from the same seed on the same random batches: every persistent
 *     tensor and every run's loss must be bit-identical. The rebuilt graphs are checked
 *     for shape: the forward untouched, no backward node reads a recomputed node's
 *     original, and every recompute node is one copy of a candidate, reading the copies
 *     of its recomputed inputs and the originals of the others. n = 0 changes nothing.
 *  2. Peak memory (driver/compile.h, default mode): recomputing every candidate of
 *     mlp.net (fp16) must lower the planned activation bytes; `auto` with a budget
 *     between the two must fit it, and with a budget no plan reaches must warn and keep
 *     all.
 *  3. Candidate order: sorted by FLOPs per byte from this file's own copy of the cost
 *     table that recompute.c documents, ties by id.
 */
#define _GNU_SOURCE
#include <dirent.h>
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
static int copied_candidate(const IrGraph *g, int j, const int *copy_of, const bool *cand)
{
    const IrNode *n = &g->nodes[j];
    for (int c = 0; c < g->nforward; c++) {
        if (!cand[c] || !same_op(n, &g->nodes[c])) continue;
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
        copy_of[j] = node->recompute ? copied_candidate(g, j, copy_of, is_cand) : -1;
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

static void test_same_training(const char *path, const char *precision, const char *accumulate)
{
    char what[600];
    snprintf(what, sizeof what, "%s %s accumulate %s", path, precision, accumulate);
    printf("%s\n", what);
    Override ov[2] = { {"precision", "precision", precision}, {"accumulate", "accumulate", accumulate} };
    IrProgram *plain = compile_model(path, ov, 2), *ckpt = compile_model(path, ov, 2);
    if (!plain || !ckpt) return;
    int *cand = NULL;
    int n = recompute_candidates(ckpt, &cand);
    /* regression's one activation, tanh(linear), does not pay (see test_candidates), nor
     * do the relus of mlp and narrow_mlp in f32 (whose gradient reads their output, kept
     * anyway) */
    bool relu_mlp = strstr(path, "/mlp.net") || strstr(path, "/narrow_mlp.net");
    CHECK(n > 0 || strstr(path, "regression.net") || (relu_mlp && !strcmp(precision, "fp32")));
    if (!candidates_in(&ckpt->train, cand, n)) {
        free(cand);
        ir_program_free(plain);
        ir_program_free(ckpt);
        return;
    }
    recompute_apply(ckpt, cand, n);
    check_rebuilt(&plain->train, &ckpt->train, cand, n);
    if (plain->train_micro.nnodes) check_rebuilt(&plain->train_micro, &ckpt->train_micro, cand, n);
    CHECK_EQ_INT(ckpt->train.nnodes, plain->train.nnodes + n);   /* the backward reads each */
    int nruns = STEPS * (plain->cfg.accumulate > 1 ? (int)plain->cfg.accumulate : 1);
    double *la = calloc((size_t)nruns, sizeof *la), *lb = calloc((size_t)nruns, sizeof *lb);
    CpuExec *a = train(plain, la), *b = train(ckpt, lb);
    compare_runs(plain, a, b, la, lb, nruns, what);
    cpu_exec_free(a);
    cpu_exec_free(b);
    free(la);
    free(lb);
    free(cand);
    ir_program_free(plain);
    ir_program_free(ckpt);
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

/* ---- candidates ---- */

/* The cost table recompute.c documents, kept here on its own so that a change to
 * either shows. */
static double documented_cost(IrOp op)
{
    switch (op) {
    case IR_DIV: case IR_SQRT: case IR_RSQRT:
        return 4;
    case IR_EXP: case IR_LOG: case IR_TANH: case IR_SIGMOID: case IR_SILU: case IR_GELU:
    case IR_GELU_TANH: case IR_COS: case IR_POW: case IR_DROPOUT: case IR_GELU_GRAD:
    case IR_GELU_TANH_GRAD: case IR_SILU_GRAD:
        return 10;
    default:
        return 1;
    }
}

static double per_byte(const IrProgram *p, const IrNode *n)
{
    int64_t symvals[IR_MAX_SYMBOLS] = {p->cfg.batch, 1, 1, 1, 1, 1, 1, 1};
    int64_t numel = ir_numel(&n->shape, symvals);
    int size = n->dtype == DT_F16 || n->dtype == DT_BF16 ? 2 : 4;
    return (double)numel * documented_cost(n->op) / ((double)numel * size);
}

static bool read_by_backward(const IrGraph *g, int id)
{
    for (int i = g->nforward; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++)
            if (g->nodes[i].in[k] == id) return true;
    return false;
}

static bool recomputable_op(IrOp op)
{
    IrOpClass c = ir_op_info[op].cls;
    return c == IR_CLASS_UNARY || c == IR_CLASS_BINARY || c == IR_CLASS_TERNARY ||
           op == IR_BROADCAST || op == IR_DROPOUT;
}

static double bytes_of(const IrProgram *p, const IrNode *n)
{
    int64_t symvals[IR_MAX_SYMBOLS] = {p->cfg.batch, 1, 1, 1, 1, 1, 1, 1};
    return (double)ir_numel(&n->shape, symvals) * (n->dtype == DT_F16 || n->dtype == DT_BF16 ? 2 : 4);
}

/* Whether a member of SET reads forward node X. */
static bool read_by_set(const IrGraph *g, const bool *set, int x)
{
    for (int i = 0; i < g->nforward; i++)
        for (int k = 0; set[i] && k < g->nodes[i].nin; k++)
            if (g->nodes[i].in[k] == x) return true;
    return false;
}

/* passes.h's rule, restated: recomputable forward nodes, less those that neither the
 * backward nor a member reads and those with an input that is no leaf, not in the set,
 * not read by the backward, and at least as large, until none is left. Fills SET (per
 * forward node). */
static void paying_set(const IrProgram *p, const IrGraph *g, bool *set)
{
    for (int i = 0; i < g->nforward; i++) set[i] = recomputable_op(g->nodes[i].op);
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = 0; i < g->nforward; i++) {
            const IrNode *n = &g->nodes[i];
            if (set[i] && !read_by_backward(g, i) && !read_by_set(g, set, i))
                set[i] = false, changed = true;
            for (int k = 0; set[i] && k < n->nin; k++) {
                const IrNode *in = &g->nodes[n->in[k]];
                bool kept = ir_op_info[in->op].cls == IR_CLASS_LEAF || set[n->in[k]] ||
                            read_by_backward(g, n->in[k]);
                if (!kept && bytes_of(p, in) >= bytes_of(p, n)) set[i] = false, changed = true;
            }
        }
    }
}

/* Every candidate of PATH at PRECISION: sorted by the documented cost per byte (ties by
 * id), each a recomputable forward node the backward reads whose recomputation pays, and
 * none left out. Returns
 * how many, and whether an op named OP is among them in *HAS. */
static int check_candidates(const char *path, const char *precision, IrOp op, bool *has)
{
    Override ov[1] = { {"precision", "precision", precision} };
    IrProgram *p = compile_model(path, ov, 1);
    if (!p) return 0;
    const IrGraph *g = &p->train;
    int *cand = NULL;
    int n = recompute_candidates(p, &cand);
    if (!candidates_in(g, cand, n)) n = 0;
    int expected = 0, unsorted = 0;
    bool *set = calloc((size_t)g->nforward + 1, sizeof *set);
    paying_set(p, g, set);
    for (int i = 0; i < g->nforward; i++) expected += set[i];
    CHECK_EQ_INT(n, expected);
    *has = false;
    for (int k = 0; k < n; k++) {
        const IrNode *node = &g->nodes[cand[k]];
        CHECK(cand[k] < g->nforward && set[cand[k]]);
        CHECK(recomputable_op(node->op));
        *has |= node->op == op;
        if (k == 0) continue;
        double a = per_byte(p, &g->nodes[cand[k - 1]]), b = per_byte(p, node);
        unsorted += a > b || (a == b && cand[k - 1] >= cand[k]);
    }
    CHECK_EQ_INT(unsorted, 0);
    free(set);
    free(cand);
    ir_program_free(p);
    return n;
}

static void test_candidates(void)
{
    char mlp[600], resmlp[600], regression[600];
    snprintf(mlp, sizeof mlp, "%s/mlp.net", CGC_MODELS_DIR);
    snprintf(resmlp, sizeof resmlp, "%s/resmlp.net", CGC_MODELS_DIR);
    snprintf(regression, sizeof regression, "%s/regression.net", CGC_MODELS_DIR);
    bool has;
    /* mlp in fp16: the input casts; not the relus, whose gradient reads their output,
     * which the next layer's weight gradient keeps anyway (recomputing needs the input) */
    CHECK(check_candidates(mlp, "fp16", IR_CAST, &has) > 0);
    CHECK(has);
    CHECK(check_candidates(mlp, "fp16", IR_RELU, &has) > 0);
    CHECK(!has);
    /* Costlier ops among cheap ones: resmlp's dropouts (10) among layernorm's arithmetic
     * and casts. */
    CHECK(check_candidates(resmlp, "bf16", IR_DROPOUT, &has) > 0);
    CHECK(has);
    /* Recomputations that do not pay: regression's tanh(x @ W + b) would keep x @ W + b,
     * as large, instead of its output; so would mlp's bias adds. */
    CHECK(check_candidates(regression, "fp32", IR_TANH, &has) == 0);
    CHECK(!has);
    check_candidates(mlp, "fp32", IR_ADD, &has);
    CHECK(!has);
    /* In mlp at fp16 the f32 cast the loss reads (1 FLOP / 4 bytes) is cheapest of all. */
    Override ov[1] = { {"precision", "precision", "fp16"} };
    IrProgram *p = compile_model(mlp, ov, 1);
    if (!p) return;
    int *cand = NULL;
    int n = recompute_candidates(p, &cand);
    CHECK(n > 0 && candidates_in(&p->train, cand, n) && p->train.nodes[cand[0]].op == IR_CAST &&
          p->train.nodes[cand[0]].dtype == DT_F32);
    free(cand);
    ir_program_free(p);
}

/* ---- peak memory ---- */

static IrProgram *compile_mlp(const char *batch, const char *mode, const char *memory)
{
    char path[600];
    snprintf(path, sizeof path, "%s/mlp.net", CGC_MODELS_DIR);
    Override ov[4] = { {"precision", "precision", "fp16"}, {"batch", "batch", batch},
                       {"checkpoint", "checkpoint", mode}, {"memory", "memory", memory} };
    return compile_model(path, ov, memory ? 4 : 3);
}

static int compile_plan(IrProgram *p, Compiled *c)
{
    CompileOptions o = {.mode = PLAN_DEFAULT, .net_path = "mlp.net"};
    return compile_program(p, &o, c);
}

static size_t activation_bytes(const char *batch, const char *mode)
{
    IrProgram *p = compile_mlp(batch, mode, NULL);
    if (!p) return 0;
    Compiled c;
    CHECK_EQ_INT(compile_plan(p, &c), 0);
    size_t bytes = compiled_activation_bytes(&c);
    compiled_free(&c);
    ir_program_free(p);
    return bytes;
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

/* `auto` under BUDGET bytes: the plan it chose, and what it said. The caller frees c->p
 * after compiled_free. */
static void compile_auto(const char *batch, size_t budget, Compiled *c, const char **said)
{
    char memory[32];
    snprintf(memory, sizeof memory, "%zu", budget);
    IrProgram *p = compile_mlp(batch, "auto", memory);
    memset(c, 0, sizeof *c);
    *said = "";     /* read by the caller's checks, which fail without a compile */
    if (!p) return;
    capture_start();
    int rc = compile_plan(p, c);
    *said = capture_end();
    CHECK_EQ_INT(rc, 0);
}

static void free_compiled(Compiled *c)
{
    IrProgram *p = c->p;
    compiled_free(c);
    ir_program_free(p);
}

static void test_peak(const char *batch)
{
    size_t none = activation_bytes(batch, "none"), all = activation_bytes(batch, "all");
    printf("mlp.net fp16 batch %s: activation bytes none %zu, all %zu\n", batch, none, all);
    CHECK(none > 0);
    CHECK(all < none);
    if (!(all < none)) return;

    Compiled c;
    const char *said;
    size_t budget = all + (none - all) / 2;
    compile_auto(batch, budget, &c, &said);
    printf("  auto, budget %zu: %zu bytes, %d recomputed\n", budget, compiled_activation_bytes(&c), c.nrecomputed);
    CHECK(compiled_activation_bytes(&c) <= budget);
    CHECK(c.nrecomputed > 0);
    CHECK(c.budget == budget && !c.over_budget);
    CHECK(strstr(said, "warning") == NULL);
    free_compiled(&c);

    int *cand = NULL;
    IrProgram *p = compile_mlp(batch, "none", NULL);
    int n = p ? recompute_candidates(p, &cand) : 0;
    free(cand);
    ir_program_free(p);
    /* Not all - 1: recomputing fewer can need less than recomputing all (a copy keeps
     * its inputs alive until it is made), so only a budget below every plan is sure to
     * be out of reach. */
    compile_auto(batch, 1, &c, &said);
    printf("  auto, budget 1 byte: %zu bytes, %d of %d recomputed\n", compiled_activation_bytes(&c), c.nrecomputed, n);
    CHECK(c.over_budget);
    CHECK_EQ_INT(c.nrecomputed, n);
    CHECK(c.budget == 1 && strstr(said, "checkpoint = auto") != NULL);
    CHECK_EQ_INT(compiled_activation_bytes(&c), all);
    free_compiled(&c);
}

int main(void)
{
    find_models();
    static const char *const precisions[] = {"fp32", "bf16", "fp16"};
    for (int m = 0; m < nmodels; m++)
        for (int k = 0; k < 3; k++) test_same_training(model_paths[m], precisions[k], "1");
    char mlp[600];
    snprintf(mlp, sizeof mlp, "%s/mlp.net", CGC_MODELS_DIR);
    char resmlp[600];
    snprintf(resmlp, sizeof resmlp, "%s/resmlp.net", CGC_MODELS_DIR);
    test_same_training(mlp, "fp16", "2");
    test_same_training(resmlp, "bf16", "2");   /* dropout's counter is the micro-step */
    test_apply_none(mlp);
    test_candidates();
    /* Batches where mlp's activations outweigh its parameter gradients: at 64 or 256 rows
     * the gradient of h1.weight alone (f16, then f32) is larger than every activation
     * together, the step's peak is there, and recomputing cannot lower it. */
    test_peak("2048");
    test_peak("4096");
    return check_result();
}
