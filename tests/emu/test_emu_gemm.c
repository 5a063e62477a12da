/* test_emu_gemm.c: max-autotune's generated tensor-core GEMMs (codegen/gemm_tc.c) and
 * fused MLPs (codegen/mlp_fused.c) on the CUDA emulation, each against the reference GEMM
 * (OpenBLAS in f32, the emulated device's library call).
 *
 * For each model and precision below: the max-autotune plan, every buffer filled with
 * random values exact in f16 and bf16 (k / 256, k in [-256, 256], never all zero), then
 * for every GEMM step of the training graphs that has generated kernels: the step through
 * the library, then through each tile shape's kernel with C first filled with
 * NaN, so that an element a kernel fails to write cannot pass. Three of the four batches
 * are no multiple of any tile, so every kernel meets partial tiles in m, and in k where
 * the batch is the GEMM's k (weight gradients); odd widths (10 logits) take the copy path
 * that is not cp.async. The emulation gives the mma fragments the PTX ISA's layout
 * (cuda_emu.h), so this checks the kernels' indexing, tiling, pipeline and epilogues.
 * Then every fused MLP run of the plan (codegen/mlp_fused.c) in each shape, with its
 * grid and with one block (the grid-stride loop over the rows), every layer's output
 * first NaN: layer by layer, against the reference GEMM fed the kernel's
 * own output of the layer before, so that each comparison sees one layer's rounding.
 * A convolution's GEMMs take the batch as more rows (PlanGemm.m_lead) or as more of the
 * contraction (k_lead): cnn.net's check that the kernels take the folded sizes.
 * With --cuda the same comparisons run on the first CUDA device, against cuBLAS (the
 * `gpu` test test_gpu_gemm, which exits 77 where there is none): that checks the
 * fragment layout itself on the hardware.
 *
 *     test_emu_gemm [--asan | --cuda] [MODEL:PRECISION:BATCH[:KEY=VALUE] ...]
 * (KEY=VALUE: a train-block setting, as "checkpoint=all")
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "driver/pipeline.h"
#include "runtime/devexec.h"
#include "runtime/device.h"
#include "tests/check.h"
#include "tests/emu/emu_device.h"

static bool asan, on_cuda;
static int cuda_arch;
static int tiles_left_out;   /* tile shapes a GEMM has no kernel for (tile_wasted) */
static int kernels_run[PLAN_GEMM_TILES], mlp_kernels_run[2][PLAN_MLP_SHAPES];   /* [backward] */
static int graphs_run;      /* backward runs checked inside their graph */
static int epilogues_run[GEMM_EPI_GELU_BIAS + 1];
static int folded_run[2];   /* kernels run on GEMMs with batch dims folded into [m, k] */
static int windows_run[2];  /* implicit-GEMM kernels run, gathering A (the product) or B */
static int windows_data_grad;   /* implicit-GEMM runs' kernels that gather no patches */
static int windows_in_graph;    /* implicit-GEMM runs checked inside their graph */
static int windows_nchw[2];     /* implicit-GEMM kernels run that store C or read A NCHW */
static int windows_epilogue[2]; /* implicit-GEMM kernels run that compute an epilogue; in a graph */
static int windows_followed;    /* runs of the eval graph checked in their graph */

/* ---- values: exact in f16 and bf16 ---- */

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float random_value(uint64_t *s) { return (float)((int)(next(s) % 513) - 256) / 256.0f; }

/* Every buffer of the plan (but views) filled with random values of its type; a batch
 * norm's running variances, which the evaluation takes the square root of, positive,
 * and integers (the labels) a class of the model, so that a whole evaluation is finite. */
static void fill_buffers(const Plan *plan, DevExec *e, const int64_t *symmax, uint64_t *rng)
{
    Device *d = devexec_device(e);
    for (int b = 0; b < plan->nbuffers; b++) {
        size_t bytes = plan_buffer_bytes(plan, b, symmax);
        DType t = plan->buffers[b].dtype;
        if (bytes == 0 || plan->buffers[b].kind == PB_COUNTER || plan->buffers[b].kind == PB_STEP)
            continue;
        int64_t n = (int64_t)(bytes / ir_dtype_size(t));
        void *v = malloc(bytes);
        float *x = malloc((size_t)n * sizeof *x);
        const char *what = plan->buffers[b].what, *var = ".running_var";
        bool variance = plan->buffers[b].kind == PB_TENSOR && strlen(what) > strlen(var) &&
                        strcmp(what + strlen(what) - strlen(var), var) == 0;
        for (int64_t i = 0; i < n; i++) x[i] = variance ? fabsf(random_value(rng)) : random_value(rng);
        if (t == DT_I32)
            for (int64_t i = 0; i < n; i++) ((int32_t *)v)[i] = (int32_t)(next(rng) % 4);   /* a class of every model here */
        else
            emu_narrow(v, x, n, t);     /* exact: every value is one of the type's */
        CHECK_EQ_INT(d->ops->upload(d, devexec_buffer(e, b), v, bytes), 0);
        free(x);
        free(v);
    }
}

/* ---- one GEMM ---- */

typedef struct Matrix {
    DevPtr at;
    size_t bytes;
    void *want, *got;
} Matrix;

static void poison(Device *d, Matrix *x)
{
    void *nan = malloc(x->bytes);
    memset(nan, 0xff, x->bytes);    /* NaN in f32, f16 and bf16 */
    CHECK_EQ_INT(d->ops->upload(d, x->at, nan, x->bytes), 0);
    free(nan);
}

/* N values of type T at V, as f32 (malloc'd). */
static float *widened(const void *v, int64_t n, DType t)
{
    float *f = malloc((size_t)n * sizeof *f);
    emu_widen(f, v, n, t, false);
    return f;
}

/* GOT against WANT, N values of type T: within the rounding of T (one unit of C's type
 * for a different order of the f32 sums, and a little of the whole matrix's scale for
 * sums that cancel). Returns the mismatches, reporting the first. */
static int compare(const Matrix *x, DType t, int64_t n, const char *what)
{
    double scale = 0, rel = t == DT_F32 ? 1e-4 : t == DT_F16 ? 2e-3 : 1.6e-2;
    float *want = widened(x->want, n, t), *got = widened(x->got, n, t);
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double w = want[i], g = got[i];
        if (!(fabs(g - w) <= rel * fabs(w) + 1e-3 * scale)) {   /* NaN fails */
            if (bad++ == 0)
                fprintf(stderr, "  %s: element %lld is %.6g, the library's %.6g (scale %.3g)\n",
                        what, (long long)i, g, w, scale);
        }
    }
    free(want);
    free(got);
    return bad;
}

/* GOT against WANT as a whole, for values downstream of several layers on a GPU: the
 * relative L2 error within the tolerance of T (test_emu_models's). The hardware's fused
 * kernel and cuBLAS sum in different orders, so a value rounds one unit of T the other
 * way now and then, and the layers after it carry that on; each layer's own rounding is
 * held to compare() by check_mlp, and a step skipped or run out of order moves the whole
 * buffer. Returns 1 on a mismatch, reported. */
static int compare_l2(const Matrix *x, DType t, int64_t n, const char *what)
{
    double num = 0, den = 0, tol = t == DT_F32 ? 1e-5 : 2e-2;
    float *want = widened(x->want, n, t), *got = widened(x->got, n, t);
    for (int64_t i = 0; i < n; i++) {
        num += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        den += (double)want[i] * want[i];
    }
    double err = den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
    free(want);
    free(got);
    if (err <= tol) return 0;   /* NaN fails */
    fprintf(stderr, "  %s: relative L2 error %.3g > %.3g\n", what, err, tol);
    return 1;
}

/* Whether tile shape T gives no fewer blocks than a smaller one of the same warps for an
 * M x N GEMM, so that the plan leaves it out (gemm_tc.c's tile_dominated). */
static bool tile_wasted(int t, int64_t m, int64_t n)
{
    const PlanGemmTile *x = &plan_gemm_tiles[t];
    for (int u = 0; u < PLAN_GEMM_TILES; u++) {
        const PlanGemmTile *y = &plan_gemm_tiles[u];
        if (u != t && y->warps_m == x->warps_m && y->warps_n == x->warps_n && y->bm <= x->bm &&
            y->bn <= x->bn && plan_gemm_tile_grid(u, m, n) == plan_gemm_tile_grid(t, m, n))
            return true;
    }
    return false;
}

static void check_gemm(const Plan *plan, DevExec *e, const DevFeed *feed, PlanGraphId gid, int i)
{
    Device *d = devexec_device(e);
    const PlanStep *s = &plan->graph[gid].steps[i];
    GemmCall call = devexec_gemm_call(e, s);
    CHECK(call.aux == 0);   /* generated GEMMs have no aux output (plan_gemm_generable) */
    Matrix c = {.at = call.c, .bytes = (size_t)(call.m * call.n) * ir_dtype_size(s->gemm.c_type)};
    c.want = malloc(c.bytes);
    c.got = malloc(c.bytes);
    CHECK_EQ_INT(devexec_step(e, gid, i, feed, &(PlanStepChoice){0}), 0);
    CHECK_EQ_INT(d->ops->download(d, c.want, c.at, c.bytes), 0);
    for (int t = 0; t < PLAN_GEMM_TILES; t++) {
        CHECK_EQ_INT(s->gemm.tile_kernel[t] < 0, tile_wasted(t, call.m, call.n));
        if (s->gemm.tile_kernel[t] < 0) {
            tiles_left_out++;
            continue;
        }
        poison(d, &c);
        CHECK_EQ_INT(devexec_step(e, gid, i, feed, &(PlanStepChoice){.tile = t + 1}), 0);
        CHECK_EQ_INT(d->ops->download(d, c.got, c.at, c.bytes), 0);
        char what[256];
        snprintf(what, sizeof what, "%s (%s, m %lld n %lld k %lld)",
                 plan->kernels[s->gemm.tile_kernel[t]].name, s->what, (long long)call.m,
                 (long long)call.n, (long long)call.k);
        CHECK_EQ_INT(compare(&c, s->gemm.c_type, call.m * call.n, what), 0);
        kernels_run[t]++;
        int epi = (int)s->gemm.epilogue;     /* the plan's, an index here */
        CHECK(epi >= 0 && epi <= GEMM_EPI_GELU_BIAS);
        if (epi >= 0 && epi <= GEMM_EPI_GELU_BIAS) epilogues_run[epi]++;
        folded_run[0] += s->gemm.m_lead.rank > 0;
        folded_run[1] += s->gemm.k_lead.rank > 0;
    }
    free(c.want);
    free(c.got);
}

/* ---- one fused MLP run ----
 * Layer by layer: the fused kernel's outputs (every c_j first NaN), then each layer
 * through the library from the fused kernel's own output of the layer before (put back
 * in c_{j-1}; for a backward run, through the plan's own relu_grad step, PlanMlp.link),
 * so that each comparison sees one layer's rounding and no drift. */
/* Run R's kernel of SHAPE with one block, so that its grid-stride loop visits every
 * group of rows; the arguments in plan.h's order, written out again here. */
static int launch_one_block(const Plan *plan, DevExec *e, int r, int shape)
{
    const PlanMlp *run = &plan->mlps[r];
    const PlanStep *steps = plan->graph[run->graph].steps;
    int L = run->nlayers;
    DevPtr ptr[3 * PLAN_MLP_MAX_LAYERS + 1];
    void *args[3 * PLAN_MLP_MAX_LAYERS + 2];
    int64_t m = devexec_gemm_call(e, &steps[run->step[0]]).m;
    ptr[L] = devexec_buffer(e, steps[run->step[0]].gemm.a);
    for (int j = 0; j < L; j++) {
        const PlanGemm *g = &steps[run->step[j]].gemm;
        int aux = run->backward ? run->act[j] : g->bias;
        ptr[j] = devexec_buffer(e, g->c);
        ptr[L + 1 + j] = devexec_buffer(e, g->b);
        ptr[2 * L + 1 + j] = aux >= 0 ? devexec_buffer(e, aux) : 0;
    }
    for (int i = 0; i < 3 * L + 1; i++) args[i] = &ptr[i];
    args[3 * L + 1] = &m;
    return devexec_launch(e, run->kernel[shape], 1, args, "one block");
}

static void check_mlp(const Plan *plan, DevExec *e, const DevFeed *feed, int r)
{
    Device *d = devexec_device(e);
    const PlanMlp *run = &plan->mlps[r];
    const PlanStep *steps = plan->graph[run->graph].steps;
    Matrix c[PLAN_MLP_MAX_LAYERS];
    int64_t m = 0;
    /* C, and launch_one_block's arguments, hold PLAN_MLP_MAX_LAYERS layers */
    CHECK(run->nlayers >= 1 && run->nlayers <= PLAN_MLP_MAX_LAYERS);
    if (run->nlayers < 1 || run->nlayers > PLAN_MLP_MAX_LAYERS) return;
    for (int j = 0; j < run->nlayers; j++) {
        const PlanStep *st = &steps[run->step[j]];
        GemmCall call = devexec_gemm_call(e, st);
        m = call.m;
        c[j] = (Matrix){.at = call.c, .bytes = (size_t)(call.m * call.n) * ir_dtype_size(st->gemm.c_type)};
        c[j].want = malloc(c[j].bytes);
        c[j].got = malloc(c[j].bytes);
    }
    for (int k = 0; k < 2 * PLAN_MLP_SHAPES; k++) {   /* each shape, then each with one block */
        int shape = k % PLAN_MLP_SHAPES;
        for (int j = 0; j < run->nlayers; j++) poison(d, &c[j]);
        CHECK_EQ_INT(k < PLAN_MLP_SHAPES ? devexec_mlp(e, r, shape) : launch_one_block(plan, e, r, shape), 0);
        for (int j = 0; j < run->nlayers; j++)
            CHECK_EQ_INT(d->ops->download(d, c[j].got, c[j].at, c[j].bytes), 0);
        for (int j = 0; j < run->nlayers; j++) {
            const PlanStep *st = &steps[run->step[j]];
            if (j > 0) CHECK_EQ_INT(d->ops->upload(d, c[j - 1].at, c[j - 1].got, c[j - 1].bytes), 0);
            if (run->backward && j > 0)     /* layer j's input: g_j(c_{j-1}, act_j) */
                CHECK_EQ_INT(devexec_step(e, run->graph, run->link[j], feed, &(PlanStepChoice){0}), 0);
            GemmCall call = devexec_gemm_call(e, st);
            CHECK_EQ_INT(d->ops->gemm(d, &call, &(DeviceSite){"reference", st->what, "test", 0}), 0);
            CHECK_EQ_INT(d->ops->download(d, c[j].want, c[j].at, c[j].bytes), 0);
            char what[512];
            snprintf(what, sizeof what, "%s%s layer %d (%s, m %lld n %lld k %lld)",
                     plan->kernels[run->kernel[shape]].name, k < PLAN_MLP_SHAPES ? "" : " (one block)",
                     j, st->what, (long long)m, (long long)call.n, (long long)call.k);
            CHECK_EQ_INT(compare(&c[j], st->gemm.c_type, call.m * call.n, what), 0);
        }
        mlp_kernels_run[run->backward][shape]++;
    }
    for (int j = 0; j < run->nlayers; j++) {
        free(c[j].want);
        free(c[j].got);
    }
}

/* devexec_launches's counts, against what a timed run issues. */
typedef struct Issued {
    int launches, gemms;
} Issued;

static void count_issued(void *ctx, const DevTimedEvent *ev, double start, double end)
{
    (void)start, (void)end;
    Issued *n = ctx;
    n->launches++;
    n->gemms += ev->gemm;
}

/* ---- the backward runs inside their graph ----
 * The train graph run whole (devexec_run) with its steps, then again from the same
 * buffers with every backward run's fused kernel chosen: every value the graph stores
 * agrees within the rounding compare allows (on a GPU, compare_l2's). This is the
 * runtime's order on a whole plan (the kernel at its run's first layer, the later
 * layers' steps skipped, the relu_grad steps and the weight gradients' GEMMs between them
 * still run), where check_mlp checks each kernel on its own. The arena has no reuse, so every stored value is still there
 * after the run. Each run's launches and GEMMs, as the timing records them, are the ones
 * devexec_launches counts (--bench's and -v's "as run"), fewer by the later layers. */
/* Puts the candidates a graph check compares in force (ON) or not. */
typedef void (*ChooseFn)(const Plan *plan, DevExec *e, bool on);

/* Graph GID run whole from the same buffers twice, CHOOSE off then on: every value it
 * stores (but the buffers SKIP marks) agrees, bit for bit when EXACT, and the second run
 * issues FEWER launches, as many of them GEMMs fewer (devexec_launches's counts, against
 * what the timing records). Returns the values compared. */
static int compare_graph(const Plan *plan, DevExec *e, const DevFeed *feed, const int64_t *symmax, PlanGraphId gid,
                         ChooseFn choose, int fewer, int fewer_gemms, const bool *skip, bool exact, const char *with)
{
    Device *d = devexec_device(e);
    const IrGraph *train = plan->graph[gid].ir;
    int nb = plan->nbuffers, compared = 0;
    size_t *bytes = calloc((size_t)nb, sizeof *bytes);
    void **start = calloc((size_t)nb, sizeof *start);
    Matrix *x = calloc((size_t)nb, sizeof *x);
    for (int b = 0; b < nb; b++) {
        if (plan->buffers[b].alias_of >= 0 || !(bytes[b] = plan_buffer_bytes(plan, b, symmax))) continue;
        start[b] = malloc(bytes[b]);
        CHECK_EQ_INT(d->ops->download(d, start[b], devexec_buffer(e, b), bytes[b]), 0);
        x[b] = (Matrix){.at = devexec_buffer(e, b), .bytes = bytes[b], .want = malloc(bytes[b]),
                        .got = malloc(bytes[b])};
    }
    Issued counted[2];
    for (int pass = 0; pass < 2; pass++) {      /* the steps, then the candidates */
        for (int b = 0; b < nb; b++)
            if (start[b]) CHECK_EQ_INT(d->ops->upload(d, x[b].at, start[b], bytes[b]), 0);
        choose(plan, e, pass == 1);
        Issued issued = {0};
        counted[pass].launches = devexec_launches(e, gid, &counted[pass].gemms);
        CHECK_EQ_INT(devexec_timing_start(e), 0);
        CHECK_EQ_INT(devexec_run(e, train, feed), 0);
        CHECK_EQ_INT(devexec_timing_collect(e, count_issued, &issued), 0);
        CHECK_EQ_INT(issued.launches, counted[pass].launches);
        CHECK_EQ_INT(issued.gemms, counted[pass].gemms);
        for (int b = 0; b < nb; b++)
            if (start[b]) CHECK_EQ_INT(d->ops->download(d, pass ? x[b].got : x[b].want, x[b].at, bytes[b]), 0);
    }
    choose(plan, e, false);
    for (int b = 0; b < nb; b++) {
        const PlanBuffer *pb = &plan->buffers[b];
        if (!start[b] || (skip && skip[b]) || pb->kind != PB_NODE || pb->graph != (int)gid || pb->dtype == DT_I32)
            continue;
        char what[256];
        snprintf(what, sizeof what, "%s graph with %s: buffer %d (%s)", train->name, with, b, pb->what);
        int64_t n = (int64_t)(bytes[b] / ir_dtype_size(pb->dtype));
        if (exact && memcmp(x[b].want, x[b].got, bytes[b]) != 0)
            fprintf(stderr, "  %s: not the same bits\n", what);
        if (exact) CHECK(memcmp(x[b].want, x[b].got, bytes[b]) == 0);
        else CHECK_EQ_INT(on_cuda ? compare_l2(&x[b], pb->dtype, n, what) : compare(&x[b], pb->dtype, n, what), 0);
        compared++;
    }
    CHECK(compared > 0);
    CHECK_EQ_INT(counted[0].launches, plan->graph[gid].nsteps);
    CHECK_EQ_INT(counted[1].launches, counted[0].launches - fewer);
    CHECK_EQ_INT(counted[1].gemms, counted[0].gemms - fewer_gemms);
    for (int b = 0; b < nb; b++) {
        free(start[b]);
        free(x[b].want);
        free(x[b].got);
    }
    free(start);
    free(x);
    free(bytes);
    return compared;
}

static int compare_in_graph(const Plan *plan, DevExec *e, const DevFeed *feed, const int64_t *symmax,
                            ChooseFn choose, int fewer, int fewer_gemms, const bool *skip, bool exact,
                            const char *with)
{
    return compare_graph(plan, e, feed, symmax, PG_TRAIN, choose, fewer, fewer_gemms, skip, exact, with);
}

static void choose_backward_runs(const Plan *plan, DevExec *e, bool on)
{
    for (int r = 0; r < plan->nmlps; r++)
        devexec_choose_mlp(e, r, on && plan->mlps[r].backward && plan->mlps[r].graph == PG_TRAIN ? 0 : -1);
}

static void check_backward_in_graph(const Plan *plan, DevExec *e, const DevFeed *feed,
                                    const int64_t *symmax)
{
    int runs = 0, fewer = 0;    /* fewer: the launches the fused kernels save, their later layers */
    for (int r = 0; r < plan->nmlps; r++)
        if (plan->mlps[r].backward && plan->mlps[r].graph == PG_TRAIN) runs++, fewer += plan->mlps[r].nlayers - 1;
    if (runs == 0) return;
    compare_in_graph(plan, e, feed, symmax, choose_backward_runs, fewer, fewer, NULL, false,
                     "the fused backward kernels");
    graphs_run += runs;
}

/* ---- implicit-GEMM convolutions ----
 * Each reader's kernel in each tile shape against the library on the patches the UNFOLD
 * step made of the image and the channels-last gradient its TRANSPOSE step made (C first
 * NaN; a kernel that stores NCHW against the library's C transposed by the TRANSPOSE
 * step it replaces); then the train graph with every run on (the
 * UNFOLD skipped, its buffer NaN under the emulation: a reader still reading it would
 * fail) against the graph with the patches, each reader by the generated kernel of the
 * same tile shape: the same products in the same order, so every stored value must be
 * the same bits (against the library, a product rounded the other way now and then
 * moves the nearly cancelling sums of batch norm's backward far beyond any tolerance). */
/* What reader J of W writes, with the GEMM CALL's elements: C (the TRANSPOSE's buffer
 * where it stores NCHW), or, where it computes W's epilogue, the group's outputs
 * instead; into X and T (their types). Returns how many. */
static int reader_writes(const Plan *plan, DevExec *e, const PlanWindow *w, int j, const GemmCall *call,
                         Matrix *x, DType *t)
{
    int n = 0;
    if (j != w->store_reader || w->epilogue < 0) {
        t[0] = plan->graph[w->graph].steps[w->reader[j]].gemm.c_type;
        x[n++] = (Matrix){.at = j == w->store_reader ? devexec_buffer(e, w->store) : call->c};
    }
    for (int a = 0; j == w->store_reader && a < w->epi_nargs; a++) {
        int k = -1;
        for (int tile = 0; k < 0 && tile < PLAN_GEMM_TILES; tile++) k = w->kernel[j][tile];
        if (w->epi_arg[a].kind != ARG_BUFFER || !plan_param_written(plan->kernels[k].param_ctype[8 + a])) continue;
        t[n] = plan->buffers[w->epi_arg[a].index].dtype;
        x[n++] = (Matrix){.at = devexec_buffer(e, w->epi_arg[a].index)};
    }
    for (int i = 0; i < n; i++) {
        x[i].bytes = (size_t)(call->m * call->n) * ir_dtype_size(t[i]);
        x[i].want = malloc(x[i].bytes);
        x[i].got = malloc(x[i].bytes);
    }
    return n;
}

static void check_window(const Plan *plan, DevExec *e, const DevFeed *feed, int r)
{
    Device *d = devexec_device(e);
    const PlanWindow *w = &plan->windows[r];
    CHECK_EQ_INT(devexec_step(e, w->graph, w->unfold, feed, NULL), 0);
    if (w->grad_transpose >= 0) CHECK_EQ_INT(devexec_step(e, w->graph, w->grad_transpose, feed, NULL), 0);
    for (int j = 0; j < w->nreaders; j++) {
        const PlanStep *s = &plan->graph[w->graph].steps[w->reader[j]];
        GemmCall call = devexec_gemm_call(e, s);
        bool nchw = j == w->store_reader, epi = nchw && w->epilogue >= 0;
        Matrix c[PLAN_MAX_PARAMS];
        DType ct[PLAN_MAX_PARAMS];
        int nc = reader_writes(plan, e, w, j, &call, c, ct);
        CHECK(nc > 0);
        CHECK_EQ_INT(devexec_step(e, w->graph, w->reader[j], feed, &(PlanStepChoice){0}), 0);
        if (nchw) CHECK_EQ_INT(devexec_step(e, w->graph, w->transpose, feed, NULL), 0);
        if (epi) CHECK_EQ_INT(devexec_step(e, w->graph, w->epilogue, feed, NULL), 0);
        for (int x = 0; x < nc; x++) CHECK_EQ_INT(d->ops->download(d, c[x].want, c[x].at, c[x].bytes), 0);
        for (int t = 0; t < PLAN_GEMM_TILES; t++) {
            if (w->kernel[j][t] < 0) continue;
            for (int x = 0; x < nc; x++) poison(d, &c[x]);
            CHECK_EQ_INT(devexec_window(e, r, j, t, feed), 0);
            for (int x = 0; x < nc; x++) {
                CHECK_EQ_INT(d->ops->download(d, c[x].got, c[x].at, c[x].bytes), 0);
                char what[512];
                snprintf(what, sizeof what, "%s (%s, m %lld n %lld k %lld)%s", plan->kernels[w->kernel[j][t]].name,
                         s->what, (long long)call.m, (long long)call.n, (long long)call.k,
                         epi ? ", an output of its epilogue" : "");
                CHECK_EQ_INT(compare(&c[x], ct[x], call.m * call.n, what), 0);
            }
            if (w->operand[j]) windows_run[w->operand[j] == 'b']++;
            else windows_data_grad++;
            windows_nchw[0] += nchw;
            windows_nchw[1] += w->reads_grad[j];
            windows_epilogue[0] += epi;
        }
        for (int x = 0; x < nc; x++) free(c[x].want), free(c[x].got);
    }
}

/* Each run of the train graph on, each reader by its smallest tile shape; or off, each
 * reader by the plain generated kernel of that shape. */
static void choose_windows(const Plan *plan, DevExec *e, bool on)
{
    for (int r = 0; r < plan->nwindows; r++) {
        const PlanWindow *w = &plan->windows[r];
        if (w->graph != PG_TRAIN || !w->implicit) continue;
        int tiles[PLAN_WINDOW_MAX_READERS];
        for (int j = 0; j < w->nreaders; j++) {
            tiles[j] = 0;
            while (w->kernel[j][tiles[j]] < 0) tiles[j]++;
            devexec_choose(e, w->graph, w->reader[j], &(PlanStepChoice){.tile = on ? 0 : tiles[j] + 1});
        }
        devexec_choose_window(e, r, on ? tiles : NULL);
    }
}

static void unchoose_windows(const Plan *plan, DevExec *e)
{
    for (int r = 0; r < plan->nwindows; r++)
        for (int j = 0; plan->windows[r].implicit && j < plan->windows[r].nreaders; j++)
            devexec_choose(e, plan->windows[r].graph, plan->windows[r].reader[j], &(PlanStepChoice){0});
}

/* Whether step S names buffer root B (any operand, argument or epilogue input). */
static bool step_names(const Plan *plan, const PlanStep *s, int b)
{
    if (s->kind == STEP_GEMM) {
        int x[5] = {s->gemm.a, s->gemm.b, s->gemm.c, s->gemm.bias, s->gemm.aux};
        for (int k = 0; k < 5; k++)
            if (x[k] >= 0 && plan_buffer_root(plan, x[k]) == b) return true;
        return false;
    }
    for (int a = 0; a < s->launch.nargs; a++)
        if (s->launch.arg[a].kind == ARG_BUFFER && plan_buffer_root(plan, s->launch.arg[a].index) == b) return true;
    return false;
}

/* The buffers that share buffer U's memory while an implicit-GEMM run on uses it in
 * steps FROM to TO (an NCHW store written early, a gradient read late): each named by a
 * step in between (liveness as the steps themselves name buffers, not the memory plan's
 * own). */
static int shared(const Plan *plan, const PlanWindow *w, const PlanLayout *lay, const int64_t *symmax,
                  int u, int from, int to)
{
    const PlanGraph *pg = &plan->graph[w->graph];
    size_t at = lay->offset[u], end = at + plan_buffer_bytes(plan, u, symmax);
    int bad = 0;
    for (int b = 0; b < plan->nbuffers; b++) {
        size_t bat = lay->offset[b], bend = bat + plan_buffer_bytes(plan, b, symmax);
        if (b == u || plan->buffers[b].alias_of >= 0 || bend == bat || bat >= end || at >= bend) continue;
        for (int i = from; i <= to; i++)
            if (step_names(plan, &pg->steps[i], b) && bad++ == 0)
                fprintf(stderr, "  buffer %d (%s), named at step %d, shares b%d's memory, which the "
                                "implicit GEMMs use from step %d to %d\n", b, plan->buffers[b].what, i + 1, u,
                        from + 1, to + 1);
    }
    return bad;
}

/* The memory plan with reuse, as training lays it out: nothing that a step names from a
 * run's UNFOLD to its last reader of the patches shares the image's memory, which an
 * implicit GEMM reads there; nor the memory of the NCHW store from the product to the
 * TRANSPOSE, or of the gradient from its TRANSPOSE to its last reader (the unshared
 * arena above cannot show this). */
static void check_window_liveness(const Plan *plan, const int64_t *symmax)
{
    PlanLayout lay;
    plan_layout(plan, symmax, true, &lay);
    for (int r = 0; r < plan->nwindows; r++) {
        const PlanWindow *w = &plan->windows[r];
        int patches = -1, grad = -1;    /* the last readers */
        if (!w->implicit) continue;
        for (int j = 0; j < w->nreaders; j++) {
            if (w->operand[j]) patches = w->reader[j];
            if (w->reads_grad[j]) grad = w->reader[j];
        }
        CHECK_EQ_INT(shared(plan, w, &lay, symmax, w->image, w->unfold, patches), 0);
        if (w->store_reader >= 0)
            CHECK_EQ_INT(shared(plan, w, &lay, symmax, w->store, w->reader[w->store_reader], w->transpose), 0);
        for (int a = 0; a < w->epi_nargs; a++)     /* the epilogue's, from the product to its step */
            if (w->epi_arg[a].kind == ARG_BUFFER)
                CHECK_EQ_INT(shared(plan, w, &lay, symmax, w->epi_arg[a].index, w->reader[w->store_reader],
                                    w->epilogue), 0);
        if (w->grad >= 0) CHECK_EQ_INT(shared(plan, w, &lay, symmax, w->grad, w->grad_transpose, grad), 0);
    }
    plan_layout_free(&lay);
}

static void check_windows_in_graph(const Plan *plan, DevExec *e, const DevFeed *feed, const int64_t *symmax)
{
    int runs = 0, readers = 0, transposes = 0, epilogues = 0;
    bool *skip = calloc((size_t)plan->nbuffers + 1, sizeof *skip);
    for (int r = 0; r < plan->nwindows; r++) {
        const PlanWindow *w = &plan->windows[r];
        if (w->graph != PG_TRAIN || !w->implicit) continue;
        runs++, readers += w->nreaders;
        const PlanStep *u = &plan->graph[PG_TRAIN].steps[w->unfold];
        skip[plan_buffer_root(plan, plan->graph[PG_TRAIN].node_buffer[u->node])] = true;
        if (w->grad_transpose >= 0) {   /* the gradient in channels-last order, never written */
            transposes++;
            skip[plan_buffer_root(plan, plan->graph[PG_TRAIN].node_buffer[
                plan->graph[PG_TRAIN].steps[w->grad_transpose].node])] = true;
        }
        if (w->store_reader < 0) continue;
        transposes++;       /* and the product in channels-last order, never written */
        skip[plan_buffer_root(plan, plan->graph[PG_TRAIN].steps[w->reader[w->store_reader]].gemm.c)] = true;
        if (w->epilogue < 0) continue;
        epilogues++;        /* and in NCHW order, held in registers for the epilogue */
        skip[w->store] = true;
    }
    if (runs > 0) {
        /* a launch fewer per run (the UNFOLD), per TRANSPOSE and per epilogue skipped;
         * the readers are still GEMMs */
        compare_in_graph(plan, e, feed, symmax, choose_windows, runs + transposes + epilogues, 0, skip, true,
                         "implicit GEMMs");
        windows_epilogue[1] += epilogues;
        unchoose_windows(plan, e);
        graphs_run += runs;
        windows_in_graph += runs;
    }
    free(skip);
}

/* Each run that follows a training run (PlanWindow.follows: the eval graph's) on, each
 * reader by its smallest tile shape, or off. */
static void choose_followers(const Plan *plan, DevExec *e, bool on)
{
    for (int r = 0; r < plan->nwindows; r++) {
        const PlanWindow *w = &plan->windows[r];
        if (w->follows < 0) continue;
        int tiles[PLAN_WINDOW_MAX_READERS];
        for (int j = 0; j < w->nreaders; j++)
            for (tiles[j] = 0; w->kernel[j][tiles[j]] < 0;) tiles[j]++;
        devexec_choose_window(e, r, on ? tiles : NULL);
    }
}

/* The eval graph with its following runs on against the same graph with the steps (the
 * UNFOLD, the product by the library's GEMM, the TRANSPOSE, the epilogue's group): the
 * products summed in another order, so every stored value within compare()'s rounding
 * rather than bit for bit, and a launch fewer per step skipped. */
static void check_followers_in_graph(const Plan *plan, DevExec *e, const DevFeed *feed, const int64_t *symmax)
{
    const PlanGraph *pg = &plan->graph[PG_EVAL];
    int runs = 0, fewer = 0;
    bool *skip = calloc((size_t)plan->nbuffers + 1, sizeof *skip);
    for (int r = 0; pg->ir && r < plan->nwindows; r++) {
        const PlanWindow *w = &plan->windows[r];
        if (w->follows < 0) continue;
        CHECK_EQ_INT(w->graph, PG_EVAL);
        runs++;
        fewer += 1 + (w->transpose >= 0) + (w->epilogue >= 0);
        skip[plan_buffer_root(plan, pg->node_buffer[pg->steps[w->unfold].node])] = true;   /* never written */
        skip[plan_buffer_root(plan, pg->steps[w->reader[w->store_reader]].gemm.c)] = true;
        if (w->epilogue >= 0) skip[w->store] = true;
    }
    if (runs > 0) {
        compare_graph(plan, e, feed, symmax, PG_EVAL, choose_followers, fewer, 0, skip, false,
                      "implicit GEMMs as training chose them");
        windows_followed += runs;
    }
    free(skip);
}

/* ---- one case ---- */

/* The plan's module on the device this run checks: built into a .so (SO) for the
 * emulation, or compiled by NVRTC and loaded on cuda:0. */
static int open_device(const Plan *plan, char *so, size_t so_len, Device **d)
{
    if (!on_cuda) return emu_build_plan(plan, asan, so, so_len) == 0 ? emu_device_open(so, d) : -1;
    char *source = plan_module_source(plan);
    CudaCompileResult r = {0};
    int rc = cuda_compile(source, plan->p->model_name, &(CudaCompileOptions){.arch = cuda_arch}, &r);
    free(source);
    if (rc == 0) rc = cuda_open(0, r.cubin, r.cubin_size, d);
    free(r.cubin);
    return rc;
}

/* MODEL in PRECISION at BATCH, and with KEY set to VALUE where KEY is not NULL (a
 * training setting: "checkpoint", "accumulate"). */
static void check_case(const char *model, const char *precision, int64_t batch, const char *key,
                       const char *value)
{
    printf("%s, %s, batch %lld%s%s%s%s\n", model, precision, (long long)batch, key ? ", " : "",
           key ? key : "", key ? " " : "", key ? value : "");
    fflush(stdout);
    char path[4200], b[32];
    snprintf(path, sizeof path, "%s/%s.net", CGC_MODELS_DIR, model);
    snprintf(b, sizeof b, "%lld", (long long)batch);
    Override ov[3] = {{"precision", "precision", precision}, {"batch", "batch", b}, {key, key, value}};
    Source *src = source_load(path);
    IrProgram *p = src ? pipeline_compile(src, ov, key ? 3 : 2) : NULL;
    CHECK(p != NULL);
    if (!p) {
        if (src) source_free(src);
        return;
    }
    Compiled compiled;
    CHECK_EQ_INT(compile_program(p, &(CompileOptions){.mode = PLAN_MAX_AUTOTUNE, .net_path = path},
                                 &compiled), 0);
    const Plan *plan = compiled.plan;
    CHECK(plan != NULL);
    char so[256] = "";
    Device *d = NULL;
    DevExec *e = NULL;
    int64_t symmax[IR_MAX_SYMBOLS] = {batch};
    if (plan && open_device(plan, so, sizeof so, &d) == 0) e = devexec_new_unshared(plan, d, symmax, path);
    CHECK(e != NULL);
    /* the generated kernels against the steps: a GPU's cuDNN stays off (test_emu_cnn_library
     * and, on a GPU, test_gpu_models hold its calls to the CPU executor) */
    for (int r = 0; e && r < plan->nwindows; r++) devexec_choose_window_conv(e, r, NULL);
    if (e) {
        DevFeed feed = {.symvals = {batch}};
        uint64_t rng = (uint64_t)batch * 1000003u + (uint64_t)strlen(model);
        CHECK_EQ_INT(devexec_bind(e, &feed), 0);
        fill_buffers(plan, e, symmax, &rng);
        double seconds;
        CHECK(!devexec_gemm_kernels_loaded(e));     /* not with the plan's module */
        CHECK_EQ_INT(devexec_load_gemm_kernels(e, &seconds), 0);
        CHECK_EQ_INT(devexec_load_gemm_kernels(e, &seconds), 0);   /* once: no second load */
        if (!on_cuda) CHECK_EQ_INT(emu_device_kernel_loads(d), 1);
        int gemms = 0;
        for (int gid = PG_TRAIN; gid <= PG_TRAIN_MICRO; gid++)
            for (int i = 0; i < plan->graph[gid].nsteps; i++) {
                const PlanStep *s = &plan->graph[gid].steps[i];
                if (s->kind != STEP_GEMM || s->gemm.tile_kernel[0] < 0) continue;
                check_gemm(plan, e, &feed, (PlanGraphId)gid, i);
                gemms++;
            }
        CHECK(gemms > 0);   /* every model here has f16 or bf16 GEMMs in its step */
        for (int r = 0; r < plan->nmlps; r++) check_mlp(plan, e, &feed, r);
        check_backward_in_graph(plan, e, &feed, symmax);
        for (int r = 0; r < plan->nwindows; r++)
            if (plan->windows[r].implicit) check_window(plan, e, &feed, r);
        check_windows_in_graph(plan, e, &feed, symmax);
        fill_buffers(plan, e, symmax, &rng);     /* not the weights the steps above left */
        check_followers_in_graph(plan, e, &feed, symmax);
        check_window_liveness(plan, symmax);
        devexec_free(e);
    }
    if (d) d->ops->close(d);
    if (so[0] && !on_cuda) emu_remove_build(so);
    compiled_free(&compiled);
    ir_program_free(p);
    source_free(src);
}

int main(int argc, char **argv)
{
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "--asan") == 0) asan = true, first = 2;
    if (argc > 1 && strcmp(argv[1], "--cuda") == 0) on_cuda = true, first = 2;
    if (on_cuda) {
        CudaDeviceInfo info;
        char why[256];
        if (cuda_probe(&info, 1, why, sizeof why) < 1) {
            printf("skipped: no usable CUDA device: %s\n", why);
            return 77;
        }
        cuda_arch = info.cc_major * 10 + info.cc_minor;
        printf("on cuda:0, %s (sm_%d)\n", info.name, cuda_arch);
        if (cuda_arch < 80) {
            printf("skipped: the generated GEMMs need sm_80 or later\n");
            return 77;
        }
    }
    if (first < argc) {
        for (int a = first; a < argc; a++) {
            char model[64], precision[16], key[32], value[32];
            long long batch;
            int n = sscanf(argv[a], "%63[^:]:%15[^:]:%lld:%31[^=]=%31s", model, precision, &batch, key, value);
            if (n != 3 && n != 5) {
                fprintf(stderr, "usage: test_emu_gemm [--asan | --cuda] [MODEL:PRECISION:BATCH[:KEY=VALUE] ...]\n");
                return 2;
            }
            check_case(model, precision, batch, n == 5 ? key : NULL, n == 5 ? value : NULL);
        }
        return check_result();
    }
    check_case("mlp", "fp16", 37, NULL, NULL);       /* nt with bias + relu, nn, tn; n = 10; MLP 512-128-10 */
    check_case("mlp", "bf16", 64, NULL, NULL);       /* whole tiles in m, cp.async for every k */
    check_case("resmlp", "bf16", 20, NULL, NULL);    /* layer widths 256 and 512 */
    check_case("resmlp", "fp16", 33, NULL, NULL);
    check_case("narrow_mlp", "bf16", 70, NULL, NULL);  /* fused MLP 784-128-128-128-10, back 10-128-128-128 */
    check_case("../tests/models/odd_mlp", "fp16", 45, NULL, NULL);  /* fused MLP 37-24-10-40-6, back 6-40-10-24 */
    /* checkpointing moves the backward's steps about: the input gradients' run is steps
     * 15, 17 and 20, an optimizer update and weight casts before it */
    check_case("narrow_mlp", "bf16", 33, "checkpoint", "all");
    /* accumulation: the train_micro graph's runs too (check_mlp) */
    check_case("narrow_mlp", "fp16", 24, "accumulate", "2");
    /* the input gradients through silu, gelu (both forms), tanh and sigmoid */
    check_case("../tests/models/act_mlp", "fp16", 37, NULL, NULL);
    check_case("../tests/models/act_mlp", "bf16", 16, NULL, NULL);
    /* convolutions: the product over [N * L] rows (m_lead), the weight gradient summed
     * over them (k_lead); L = 784 and 196, k = 9 and 288 */
    check_case("cnn", "bf16", 3, NULL, NULL);
    /* a convolution with a bias (added after the transpose, so that its implicit GEMMs
     * still store and read NCHW), a 1x1 one, and one of two groups (no implicit form) */
    check_case("../tests/emu/models/image_windows", "bf16", 8, NULL, NULL);
    /* convolutions with a bias and a relu after them: the implicit GEMMs compute that
     * group on their product (PlanWindow.epilogue), the first's image strided, dilated */
    check_case("../tests/emu/models/conv_chain", "bf16", 8, NULL, NULL);
    for (int t = 0; t < PLAN_GEMM_TILES; t++) CHECK(kernels_run[t] > 0);
    CHECK(tiles_left_out > 0);
    for (int s = 0; s < PLAN_MLP_SHAPES; s++) {
        CHECK(mlp_kernels_run[0][s] >= 6);     /* forward: 3 models, 2 grids */
        /* backward: narrow_mlp 3 cases (2 graphs in one), odd_mlp, act_mlp twice; 2 grids */
        CHECK(mlp_kernels_run[1][s] >= 14);
    }
    CHECK(graphs_run >= 6);
    CHECK(epilogues_run[GEMM_EPI_NONE] > 0 && epilogues_run[GEMM_EPI_RELU_BIAS] > 0);
    CHECK(folded_run[0] > 0 && folded_run[1] > 0);
    CHECK(windows_run[0] > 0 && windows_run[1] > 0 && windows_in_graph >= 2);
    CHECK(windows_nchw[0] > 0 && windows_nchw[1] > 0 && windows_data_grad > 0);
    CHECK(windows_epilogue[0] > 0 && windows_epilogue[1] > 0 && windows_followed > 0);
    return check_result();
}
