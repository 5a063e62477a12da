/* repro.c: --emit's standalone reproducer: DIR/repro/repro.c and its Makefile.
 *
 * A GPU problem seen through cgc (a slow step, a fault, a wrong GEMM) is easier to share
 * and to study without cgc: the reproducer is one host C file that loads the module's
 * cubin with the driver API, lays out the plan's arena, fills it, and replays the
 * training step (train_micro accumulate - 1 times, then train) under CUDA events. It
 * needs only nvcc, cuBLAS and cuBLASLt to build, and a GPU to run.
 *
 * Everything the step does is resolved here, at generation time, into data tables (the
 * arena's offsets, the initial fills, the GEMMs) and straight-line code (one block per
 * launch, with its grid, block and arguments as numbers), for the batch of the train
 * config. The generated file holds no text from the .net file: kernel names (mangled
 * identifiers), numbers, .net line numbers, and the plan's sanitised source name and a
 * model name passed through the same sanitising; never PlanStep.what or tensor names.
 *
 * What does not depend on the plan, the fixed host code, is real C in the tree, compiled
 * by cgc's build (tests/codegen/repro_host.c) and embedded as strings (codegen.cmake): the
 * includes and the tables' types (codegen/repro/types.h), the mapping of the plan's
 * row-major GEMMs onto column-major cuBLAS and cuBLASLt (codegen/gemm_map.h, the one the
 * runtime uses), the code that replays the tables (codegen/repro/replay.h) and main
 * (codegen/repro/main.h). This file writes them, as they stand, between its own parts.
 *
 * In max-autotune the step is replayed with the choices --emit writes beside it
 * (PlanChoices: the tuned ones when cgc has them, else the plan's own): each launch's
 * grid, each GEMM's cuBLASLt algorithm or generated kernel, and each narrow MLP's forward
 * pass or input gradients as its fused kernel or its steps. The generated kernels they
 * name come from a second module, gemm_module.cu, which the Makefile then builds as well.
 */
#include "codegen_impl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "../base/text.h"
#include "../compiler/config.h"
#include "gemm_map.h"

/* IR_RT_TOTAL_STEPS as the replay states it: the length of run the schedules assume. */
enum { REPRO_TOTAL_STEPS = 1000, REPRO_WARMUP = 20, REPRO_STEPS = 200 };

typedef struct Repro {
    FILE *out;
    const Plan *plan;
    const IrProgram *p;
    int64_t symvals[IR_MAX_SYMBOLS];         /* symbol 0 at the train batch, the others 0 (as the trainer) */
    PlanLayout layout;
    char model[80];             /* model_name through the source-name sanitising */
    int ngemms;                 /* GEMM steps replayed: the rows of the GEMM table */
    const PlanChoices *choices; /* what each step runs (max-autotune's; else the plan's) */
    bool *used;                 /* per kernel: replayed (all of the step module's, and the
                                 * generated ones the choices name) */
    bool generated;             /* some of them are in gemm_module.cu */
} Repro;

static int64_t bind(const Repro *r, int64_t dim)
{
    return IR_DIM_IS_SYM(dim) ? r->symvals[IR_DIM_SYMBOL(dim)] : dim;
}

/* "[64, 784]": the shape with the symbols bound (symbol names are .net text). */
static void dims_str(const Repro *r, const Shape *s, char *buf, size_t n)
{
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < s->rank && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%" PRId64, i ? ", " : "", bind(r, s->dim[i]));
    if (used < n) snprintf(buf + used, n - used, "]");
}

static bool replays(const Repro *r, PlanGraphId g)
{
    if (!r->plan->graph[g].ir) return false;
    return g == PG_TRAIN || (g == PG_TRAIN_MICRO && r->p->cfg.accumulate > 1);
}

/* Times graph G runs in one training step. */
static int64_t runs_per_step(const Repro *r, PlanGraphId g)
{
    if (!replays(r, g)) return 0;
    return g == PG_TRAIN ? 1 : r->p->cfg.accumulate - 1;
}

static bool gemm_is_empty(const Repro *r, const PlanGemm *g)
{
    int64_t batch = g->batch.rank ? ir_numel(&g->batch, r->symvals) : 1;
    return plan_gemm_m(g, r->symvals) == 0 || bind(r, g->n) == 0 || batch == 0;
}

/* ---- what the choices make of a step (as runtime/devexec.c runs them) ---- */

static PlanStepChoice choice_at(const Repro *r, PlanGraphId gid, int i)
{
    const PlanStepChoice *c = r->choices->step[gid];
    return c ? c[i] : (PlanStepChoice){0};
}

/* Kernel K's threads per block as the runtime launches it: the choices' (they give every
 * launch of a kernel one), else its own. */
static int kernel_block(const Repro *r, int k)
{
    for (int gid = 0; gid < PG_NUM; gid++)
        for (int i = 0; r->choices->step[gid] && i < r->plan->graph[gid].nsteps; i++) {
            const PlanStep *s = &r->plan->graph[gid].steps[i];
            if (s->kind == STEP_LAUNCH && s->launch.kernel == k && r->choices->step[gid][i].block > 0)
                return r->choices->step[gid][i].block;
        }
    return r->plan->kernels[k].block;
}

/* The fused MLP run whose kernel is launched at step I of GID (its first layer's), or -1. */
static int fused_run(const Repro *r, PlanGraphId gid, int i)
{
    int run = plan_mlp_at(r->plan, gid, i);
    return run >= 0 && r->choices->mlp_shape[run] >= 0 ? run : -1;
}

/* The tile shape of reader I of GID's implicit-GEMM run when that run is on, else -1;
 * *RUN, *J: the run and which reader. */
static int window_tile(const Repro *r, PlanGraphId gid, int i, int *run, int *j)
{
    *run = plan_window_reader(r->plan, gid, i, j);
    return *run >= 0 ? r->choices->window_tile[*run * PLAN_WINDOW_MAX_READERS + *j] : -1;
}

/* Whether step I of GID is the UNFOLD or TRANSPOSE of an implicit-GEMM run that is on:
 * skipped. */
static bool window_skipped(const Repro *r, PlanGraphId gid, int i)
{
    int run = plan_window_skips(r->plan, gid, i);
    return run >= 0 && r->choices->window_tile[run * PLAN_WINDOW_MAX_READERS] >= 0;
}

/* What step I of GID, skipped by an implicit-GEMM run that is on, would have done. */
static const char *window_skip_text(const Plan *plan, PlanGraphId gid, int i)
{
    const PlanWindow *w = &plan->windows[plan_window_skips(plan, gid, i)];
    if (w->unfold == i) return "the patches, not written: their readers gather them from the image";
    if (w->transpose == i && w->epilogue >= 0)
        return "the transpose to NCHW, not run: the implicit GEMM computes its reader on the product";
    if (w->transpose == i) return "the transpose to NCHW, not run: the implicit GEMM stores its product so";
    if (w->epilogue == i) return "a pointwise group, not run: the implicit GEMM computes it as its epilogue";
    return "the gradient's transpose to channels last, not run: its GEMMs read it as NCHW";
}

/* The generated kernel GEMM step I of GID runs instead of the library, or -1; *TILE its
 * tile shape. */
static int gemm_kernel_tile(const Repro *r, PlanGraphId gid, int i, int *tile)
{
    int run, j;
    *tile = window_tile(r, gid, i, &run, &j);
    if (*tile >= 0) return r->plan->windows[run].kernel[j][*tile];
    *tile = choice_at(r, gid, i).tile - 1;
    return *tile >= 0 ? r->plan->graph[gid].steps[i].gemm.tile_kernel[*tile] : -1;
}

static int gemm_kernel(const Repro *r, PlanGraphId gid, int i)
{
    int tile;
    return gemm_kernel_tile(r, gid, i, &tile);
}

/* Whether GEMM step I of GID goes through cublasLtMatmul, as the runtime decides it. */
static bool through_lt(const Repro *r, PlanGraphId gid, int i)
{
    const PlanGemm *g = &r->plan->graph[gid].steps[i].gemm;
    int64_t batch = g->batch.rank ? ir_numel(&g->batch, r->symvals) : 1;
    return gemm_map_uses_lt(g->epilogue != GEMM_EPI_NONE, choice_at(r, gid, i).algo, batch, plan_gemm_k(g, r->symvals));
}

/* Whether step I of GID is a later layer of a fused run: the run's kernel, launched at
 * its first layer's step, computes it. */
static bool in_fused_run(const Repro *r, PlanGraphId gid, int i)
{
    int run = plan_mlp_layer_of(r->plan, gid, i);
    return run >= 0 && r->choices->mlp_shape[run] >= 0 && r->plan->mlps[run].step[0] != i;
}

/* Marks the kernels the replay launches (Repro.used). */
static void mark_used(Repro *r)
{
    const Plan *pl = r->plan;
    for (int k = 0; k < pl->gemm_kernels_from; k++) r->used[k] = true;
    for (PlanGraphId g = 0; g < PG_NUM; g++) {
        const PlanGraph *pg = &pl->graph[g];
        for (int i = 0; replays(r, g) && i < pg->nsteps; i++) {
            int run = fused_run(r, g, i), k = -1;
            if (in_fused_run(r, g, i)) continue;
            if (run >= 0) k = pl->mlps[run].kernel[r->choices->mlp_shape[run]];
            else if (pg->steps[i].kind == STEP_GEMM) k = gemm_kernel(r, g, i);
            if (k >= 0) r->used[k] = r->generated = true;
        }
    }
}


/* ---- the header comment and the fixed part ---- */

static void counts(const Repro *r, int64_t *launches, int64_t *gemms, int64_t *lt)
{
    *launches = *gemms = *lt = 0;
    for (int g = 0; g < PG_NUM; g++) {
        int64_t times = runs_per_step(r, (PlanGraphId)g);
        const PlanGraph *pg = &r->plan->graph[g];
        for (int i = 0; times && i < pg->nsteps; i++) {
            const PlanStep *s = &pg->steps[i];
            if (in_fused_run(r, (PlanGraphId)g, i) || window_skipped(r, (PlanGraphId)g, i)) continue;
            if (s->kind == STEP_LAUNCH) *launches += times;
            else if (gemm_is_empty(r, &s->gemm)) continue;
            else if (fused_run(r, (PlanGraphId)g, i) >= 0 || gemm_kernel(r, (PlanGraphId)g, i) >= 0)
                *launches += times;
            else {
                *gemms += times;
                if (through_lt(r, (PlanGraphId)g, i)) *lt += times;
            }
        }
        if (r->plan->step_state >= 0 && (g == PG_TRAIN || g == PG_TRAIN_MICRO))
            *launches += times;     /* cgc_step_advance after each micro-batch */
    }
}

static void write_header(Repro *r)
{
    const TrainConfig *c = &r->p->cfg;
    int64_t launches, gemms, lt;
    counts(r, &launches, &gemms, &lt);
    fprintf(r->out,
            "/* repro.c: a standalone reproducer of one cgc training step, written by `cgc --emit DIR`\n"
            " * for %s (this is DIR/repro/repro.c).\n"
            " *\n"
            " * It replays the training step of %s (model %s) as cgc plans it:\n"
            " *     mode %s, precision %s, batch %" PRId64 ", accumulate %" PRId64 ", seed %" PRIu64 ";\n",
            r->plan->source_name, r->plan->source_name, r->model,
            plan_mode_name(r->plan->mode), config_precision_name(c->precision),
            c->batch, c->accumulate, c->seed);
    if (c->accumulate > 1)
        fprintf(r->out, " *     a step: the graph train_micro %" PRId64 " time%s, then the graph train;\n",
                c->accumulate - 1, c->accumulate - 1 == 1 ? "" : "s");
    else
        fprintf(r->out, " *     a step: the graph train, once;\n");
    fprintf(r->out,
            " *     %" PRId64 " kernel launches and %" PRId64 " library GEMMs per step, %" PRId64
            " of them cuBLASLt matmuls.\n", launches, gemms, lt);
    if (r->plan->mode == PLAN_MAX_AUTOTUNE) {
        const PlanChoices *ch = r->choices;
        if (ch->device[0])
            fprintf(r->out, " * The autotune choices are those tuned on sm_%d (../autotune.tune)%s.\n",
                    ch->arch, r->generated ? ", some of\n * them generated kernels, from gemm_module.cu"
                                           : "");
        else
            fprintf(r->out, " * The autotune choices are the plan's own, as without a GPU "
                            "(../autotune.tune).\n");
    }
    if (r->plan->step_state >= 0)
        fprintf(r->out,
                " * As in training in this mode, the kernels read the micro-step from the device's\n"
                " * step counter, which cgc_step_advance moves after each micro-batch, and after the\n"
                " * warm-up one step is captured as a CUDA graph (stream capture, cuBLAS on a fixed\n"
                " * workspace); each timed step is then one launch of that graph.\n");
    fputs(" *\n"
          " * Build (nvcc, cuBLAS and cuBLASLt from the CUDA Toolkit; no GPU needed to build):\n"
          " *     make                  module.cubin (nvcc -cubin, cgc's NVRTC options) and repro\n"
          " *     make ARCH=sm_80       for another GPU; CUDA_HOME=... for another toolkit\n"
          " *     (in max-autotune, with generated kernels: gemm_module.cubin as well)\n"
          " * Run on an NVIDIA GPU (device 0; choose with CUDA_VISIBLE_DEVICES):\n"
          " *     ./repro [steps]       20 warm-up steps, then STEPS timed ones (default 200)\n"
          " * It prints the median, 10th and 90th percentile of the time per training step (CUDA\n"
          " * events around each step) and the launches and GEMMs per step.\n"
          " *\n"
          " * What it does, in order: loads module.cubin (beside this program; gemm_module.cubin\n"
          " * too where it is built) and looks up every kernel the step launches; allocates\n"
          " * the plan's arena, laid out as cgc lays it out\n"
          " * (codegen/memplan.c, buffers sharing memory, batch symbol at the train batch; cgc's\n"
          " * trainer sizes it for its evaluation batch too when that is larger, so its offsets\n"
          " * can differ from these); zeroes it (the launch counter included) and fills it\n"
          " * (fill_arena); builds the cuBLASLt descriptors; then runs the steps. The first\n"
          " * warm-up step waits after every launch and GEMM, so that a fault names its step.\n"
          " * Every CUDA, cuBLAS and cuBLASLt call is checked; a failure names the step and\n"
          " * kernel and exits with status 1.\n"
          " *\n"
          " * What it leaves out: the data pipeline (the epoch's shuffle, the batch gathers and\n"
          " * the loss totals, cgc_order_*, cgc_gather_* and cgc_track_*). The inputs are filled\n"
          " * once with random values and every step reads the same batch.\n"
          " *\n"
          " * The file, in order: the includes and the tables' types, this plan's constants and\n"
          " * tables, the GEMM mapping and the code that replays the tables, the step, main. All\n"
          " * but the plan's part is cgc's fixed host code, the same in every reproducer: its\n"
          " * source is codegen/repro/ and codegen/gemm_map.h (which cgc's runtime uses too).\n"
          " */\n\n", r->out);
}

/* Fixed host code (codegen/repro/, codegen/gemm_map.h; embedded by codegen.cmake), then
 * a blank line. */
static void write_fixed(Repro *r, const char *code)
{
    fputs(code, r->out);
    fputc('\n', r->out);
}

static void write_constants(Repro *r)
{
    const TrainConfig *c = &r->p->cfg;
    fprintf(r->out, "#define SOURCE_NAME \"%s\"\n", r->plan->source_name);
    fprintf(r->out, "#define CAPTURE %d   /* each timed step replayed as one CUDA graph (%s) */\n",
            r->plan->step_state >= 0, plan_mode_captures(r->plan->mode) ? plan_mode_name(r->plan->mode)
                                                                        : "not in this mode");
    fprintf(r->out,
            "enum {\n"
            "    BATCH = %" PRId64 ",   /* the batch symbol's value in every step */\n"
            "    ACCUMULATE = %" PRId64 ",   /* micro-batches per training step */\n"
            "    TOTAL_STEPS = %d,   /* IR_RT_TOTAL_STEPS: the run length the schedules assume */\n"
            "    WARMUP_STEPS = %d,\n"
            "    DEFAULT_STEPS = %d,\n"
            "    MAX_PARAMS = %d,   /* a kernel's parameters at most */\n"
            "    LT_ALGOS = %d,   /* cuBLASLt's algorithms max-autotune chooses among, at most */\n"
            "};\n"
            "static const uint64_t SEED = %" PRIu64 "ULL;   /* cfg.seed: kernels' Philox streams, "
            "the fills */\n\n",
            c->batch, c->accumulate, REPRO_TOTAL_STEPS, REPRO_WARMUP, REPRO_STEPS, PLAN_MAX_PARAMS,
            PLAN_GEMM_ALGOS, c->seed);
}

/* ---- kernels ---- */

/* The C initialiser of N numbers V[0..N), sixteen to a line. */
static void write_numbers(FILE *o, const int *v, int n)
{
    for (int i = 0; i < n; i++) fprintf(o, "%s%d", i == 0 ? "\n    " : i % 16 ? ", " : ",\n    ", v[i]);
}

static void write_kernels(Repro *r)
{
    const Plan *pl = r->plan;
    FILE *o = r->out;
    int n = 0, *block = xcalloc((size_t)pl->nkernels + 1, sizeof *block);
    int *module = xcalloc((size_t)pl->nkernels + 1, sizeof *module);
    int *packed = xcalloc((size_t)pl->nkernels + 1, sizeof *packed);
    fprintf(o, "/* ---- kernels: every kernel the step launches, looked up once in its module:\n"
               " * module.cubin, or gemm_module.cubin for the generated GEMM and fused MLP kernels\n"
               " * that max-autotune's choices name ---- */\n\n"
               "enum { NUM_MODULES = %d };\n"
               "static const char *const module_file[NUM_MODULES] = { \"module.cubin\"%s };\n\n"
               "enum {\n", r->generated ? 2 : 1, r->generated ? ", \"gemm_module.cubin\"" : "");
    for (int k = 0; k < pl->nkernels; k++) {
        if (!r->used[k]) continue;
        fprintf(o, "    K_%s,\n", pl->kernels[k].name);
        block[n] = kernel_block(r, k);
        packed[n] = pl->kernels[k].packed;
        module[n++] = k >= pl->gemm_kernels_from;
    }
    fprintf(o, "    NUM_KERNELS\n};\n\nstatic const char *const kernel_name[NUM_KERNELS] = {\n");
    for (int k = 0; k < pl->nkernels; k++)
        if (r->used[k]) fprintf(o, "    \"%s\",\n", pl->kernels[k].name);
    fprintf(o, "};\n\n/* threads per block: each kernel's __launch_bounds__, or fewer where the autotune\n"
               " * choices say; and its module */\n"
               "static const unsigned kernel_block[NUM_KERNELS] = {");
    write_numbers(o, block, n);
    fprintf(o, "\n};\nstatic const unsigned char kernel_module[NUM_KERNELS] = {");
    write_numbers(o, module, n);
    fprintf(o, "\n};\n/* 1: its parameters are one, the array of its arguments (cgc_slots) */\n"
               "static const unsigned char kernel_packed[NUM_KERNELS] = {");
    write_numbers(o, packed, n);
    fprintf(o, "\n};\n\nstatic CUfunction kernel[NUM_KERNELS];\n\n");
    free(block);
    free(module);
    free(packed);
}

/* ---- the arena ---- */

static const char *kind_label(const PlanBuffer *b)
{
    switch (b->kind) {
    case PB_NODE: return codegen_graph_label[b->graph];
    case PB_TENSOR: return "tensor";
    case PB_INPUT: return "input";
    case PB_CONST: return "const";
    case PB_DATA: return "data";
    case PB_COUNTER: return "counter";
    case PB_STEP: return "step";
    }
    return "?";
}

static void write_arena(Repro *r)
{
    const Plan *pl = r->plan;
    fprintf(r->out,
            "/* ---- the arena: one allocation, every buffer at its offset ----\n"
            " * bN is buffer N of the plan, as DIR/host_plan.txt lists it; a view (no bytes of its\n"
            " * own) has the offset of the buffer it views. Buffers whose lives do not meet share\n"
            " * memory. Persistent buffers (tensors, inputs, constants, outputs) take the first\n"
            " * %zu bytes. */\n\n"
            "enum { NUM_BUFFERS = %d };\n"
            "static const size_t ARENA_BYTES = %zu;\n\n"
            "static const size_t offset_of[NUM_BUFFERS] = {\n",
            r->layout.persistent_bytes, pl->nbuffers, r->layout.arena_bytes);
    for (int b = 0; b < pl->nbuffers; b++) {
        const PlanBuffer *buf = &pl->buffers[b];
        char dims[160], offset[32];
        dims_str(r, &buf->shape, dims, sizeof dims);
        snprintf(offset, sizeof offset, "%zu,", r->layout.offset[b]);
        fprintf(r->out, "    %-12s /* b%d %s %s%s", offset, b, kind_label(buf), ir_dtype_name(buf->dtype),
                dims);
        if (buf->alias_of >= 0) fprintf(r->out, ", view of b%d */\n", buf->alias_of);
        else fprintf(r->out, ", %zu bytes */\n", plan_buffer_bytes(pl, b, r->symvals));
    }
    fprintf(r->out, "};\n\nstatic CUdeviceptr arena;\n\n");
}

/* ---- the fills ---- */

static const char *type_name(DType t)
{
    switch (t) {
    case DT_F32: return "T_F32";
    case DT_F16: return "T_F16";
    case DT_BF16: return "T_BF16";
    case DT_I32: return "T_I32";
    }
    return "T_F32";
}

static void fill_row(Repro *r, int b, DType t, const char *how, double value, const char *why)
{
    char lit[64];
    cuda_float_literal(value, lit, sizeof lit);
    int64_t n = ir_numel(&r->plan->buffers[b].shape, r->symvals);
    fprintf(r->out, "    { %d, %" PRId64 ", %s, %s, %s },   /* %s */\n", b, n, type_name(t), how, lit, why);
}

static void write_fills(Repro *r)
{
    const Plan *pl = r->plan;
    const IrProgram *p = r->p;
    fprintf(r->out, "/* ---- the fills: persistent tensors by their initialiser (in their dtype), the plan's constants\n"
                    " * in their dtype, the program inputs at random (fill_arena) ---- */\n\n"
                    "static const Fill fills[] = {\n");
    int n = 0;
    for (int i = 0; i < p->ntensors; i++) {
        const IrTensor *t = &p->tensors[i];
        int b = pl->tensor_buffer_base + i;
        char why[96];
        int len = snprintf(why, sizeof why, "tensor %d%s", i, t->kind == IR_PARAM ? ", a parameter" : "");
        if (t->loc.line > 0) snprintf(why + len, sizeof why - (size_t)len, ", line %d", t->loc.line);
        if (t->init == IR_INIT_ZEROS) continue;
        if (t->init == IR_INIT_UNIFORM) fill_row(r, b, t->dtype, "FILL_UNIFORM", t->init_value, why);
        else if (t->init == IR_INIT_NORMAL)   /* values to time: a uniform of its variance */
            fill_row(r, b, t->dtype, "FILL_UNIFORM", 1.7320508075688772 * t->init_value, why);
        else fill_row(r, b, t->dtype, "FILL_VALUE", t->init == IR_INIT_ONES ? 1.0 : t->init_value, why);
        n++;
    }
    for (int b = 0; b < pl->nbuffers; b++) {
        const PlanBuffer *buf = &pl->buffers[b];
        if (buf->kind != PB_CONST || buf->alias_of >= 0) continue;
        char why[48];
        snprintf(why, sizeof why, "a constant of %s", codegen_graph_label[buf->graph]);
        fill_row(r, b, buf->dtype, "FILL_VALUE", buf->value, why);
        n++;
    }
    for (int i = 0; i < p->ninputs; i++) {
        int b = pl->input_buffer[i];
        DType t = pl->buffers[b].dtype;
        char why[48];
        snprintf(why, sizeof why, "input %d, line %d", i, p->inputs[i].loc.line);
        if (t == DT_I32) fill_row(r, b, t, "FILL_LABELS", p->num_classes, why);
        else fill_row(r, b, t, "FILL_UNIT", 0, why);
        n++;
    }
    if (n == 0) fprintf(r->out, "    { 0, 0, T_F32, FILL_VALUE, 0.0f },   /* nothing to fill */\n");
    fprintf(r->out, "};\nenum { NUM_FILLS = %d };\n\n", n);
}

/* ---- GEMMs ---- */

static const char *cuda_type(DType t)
{
    switch (t) {
    case DT_F32: return "CUDA_R_32F";
    case DT_F16: return "CUDA_R_16F";
    case DT_BF16: return "CUDA_R_16BF";
    case DT_I32: break;
    }
    CGC_INTERNAL("a GEMM operand of type %s", ir_dtype_name(t));
}

static const char *compute_type(GemmCompute c)
{
    return c == GEMM_TF32 ? "CUBLAS_COMPUTE_32F_FAST_TF32" : "CUBLAS_COMPUTE_32F";
}

static const char *lt_epilogue(const PlanGemm *g)
{
    switch (g->epilogue) {
    case GEMM_EPI_RELU_BIAS: return "CUBLASLT_EPILOGUE_RELU_BIAS";
    case GEMM_EPI_GELU_BIAS: return g->aux >= 0 ? "CUBLASLT_EPILOGUE_GELU_AUX_BIAS" : "CUBLASLT_EPILOGUE_GELU_BIAS";
    case GEMM_EPI_BIAS: return "CUBLASLT_EPILOGUE_BIAS";
    case GEMM_EPI_NONE: break;
    }
    return "CUBLASLT_EPILOGUE_DEFAULT";
}

static int64_t checked_int(int64_t v)
{
    CGC_ASSERT(v >= 0 && v <= 0x7fffffff);      /* cuBLAS takes int sizes */
    return v;
}

/* Whether step I of GID is a row of the GEMM table: a GEMM the library computes. */
static bool library_gemm(const Repro *r, PlanGraphId gid, int i)
{
    const PlanStep *s = &r->plan->graph[gid].steps[i];
    return s->kind == STEP_GEMM && !gemm_is_empty(r, &s->gemm) && fused_run(r, gid, i) < 0 &&
           !in_fused_run(r, gid, i) && gemm_kernel(r, gid, i) < 0;
}

/* One row of the GEMM table: step STEP (1-based) of GID. */
static void gemm_row(Repro *r, PlanGraphId gid, int step, const PlanStep *s)
{
    const PlanGemm *g = &s->gemm;
    int64_t m = checked_int(plan_gemm_m(g, r->symvals)), n = checked_int(bind(r, g->n)), k = checked_int(plan_gemm_k(g, r->symvals));
    int64_t batch = checked_int(g->batch.rank ? ir_numel(&g->batch, r->symvals) : 1);
    FILE *o = r->out;
    fprintf(o, "    { .graph = \"%s\", .step = %d, .line = %d, .trans_a = %d, .trans_b = %d,\n"
               "      .m = %" PRId64 ", .n = %" PRId64 ", .k = %" PRId64 ", .batch = %" PRId64 ",",
            codegen_graph_label[gid], step, s->loc.line, g->trans_a, g->trans_b, m, n, k, batch);
    if (g->batch.rank)
        fprintf(o, " .stride_a = %" PRId64 ", .stride_b = %" PRId64 ", .stride_c = %" PRId64 ",",
                g->a_batched ? m * k : 0, g->b_batched ? k * n : 0, m * n);
    fprintf(o, "\n      .a = %d, .b = %d, .c = %d, .a_type = %s, .b_type = %s, .c_type = %s,\n"
               "      .compute = %s",
            g->a, g->b, g->c, cuda_type(g->a_type), cuda_type(g->b_type), cuda_type(g->c_type),
            compute_type(g->compute));
    if (g->epilogue != GEMM_EPI_NONE) {
        CGC_ASSERT(g->batch.rank == 0 && g->bias >= 0);
        fprintf(o, ",\n      .lt = 1, .epilogue = %s, .bias = %d, .bias_type = %s, .aux = %d",
                lt_epilogue(g), g->bias, cuda_type(g->bias_type), g->aux);
    } else if (through_lt(r, gid, step - 1)) {
        fprintf(o, ",\n      .lt = 1, .epilogue = CUBLASLT_EPILOGUE_DEFAULT, .bias = -1, .aux = -1");
    }
    int algo = choice_at(r, gid, step - 1).algo;
    if (algo > 0) fprintf(o, ", .lt_algo = %d", algo);
    fprintf(o, " },\n");
}

/* The graphs of a step in the order they run: the GEMM table's rows follow it, so that
 * write_steps numbers them as it writes the calls. */
static const PlanGraphId replay_order[] = { PG_TRAIN_MICRO, PG_TRAIN };

static void write_gemms(Repro *r)
{
    fprintf(r->out, "/* ---- GEMMs: those the library computes, in the order the step runs them ---- */\n\n"
                    "static Gemm gemms[] = {\n");
    for (size_t o = 0; o < sizeof replay_order / sizeof replay_order[0]; o++) {
        PlanGraphId gid = replay_order[o];
        if (!replays(r, gid)) continue;
        const PlanGraph *pg = &r->plan->graph[gid];
        for (int i = 0; i < pg->nsteps; i++) {
            if (!library_gemm(r, gid, i)) continue;
            gemm_row(r, gid, i + 1, &pg->steps[i]);
            r->ngemms++;
        }
    }
    if (r->ngemms == 0) fprintf(r->out, "    { .graph = \"none\" },   /* no GEMM in the step */\n");
    fprintf(r->out, "};\nenum { NUM_GEMMS = %d };\n\n", r->ngemms);
}

/* ---- the steps ---- */

static void write_arg(Repro *r, const PlanKernel *k, int i, const PlanArg *a)
{
    char lit[64];
    FILE *o = r->out;
    switch (a->kind) {
    case ARG_BUFFER: fprintf(o, "PTR(%d)", a->index); return;
    case ARG_SYMBOL: fprintf(o, "I64(%" PRId64 ")", r->symvals[a->index]); return;
    case ARG_SEED: fprintf(o, "U64(SEED)"); return;
    case ARG_I64:
        if (k->param[i] == PP_U64) fprintf(o, "U64(%" PRIu64 "ULL)", (uint64_t)(int64_t)a->value);
        else fprintf(o, "I64(%" PRId64 ")", (int64_t)a->value);
        return;
    case ARG_F32:
        cuda_float_literal(a->value, lit, sizeof lit);
        fprintf(o, "F32(%s)", lit);
        return;
    case ARG_RUNTIME:   /* the step replayed as the job's one rank: its share is all */
        CGC_ASSERT(a->index == IR_RT_TOTAL_STEPS || a->index == IR_RT_MICRO_STEP ||
                   a->index == IR_RT_RANK_SHARE);
        fprintf(o, a->index == IR_RT_TOTAL_STEPS ? "F32((float)TOTAL_STEPS)"
                   : a->index == IR_RT_MICRO_STEP ? "F32((float)micro_step)" : "F32(1.0f)");
        return;
    case ARG_RANK_ROW: fprintf(o, "U64(0ULL)"); return;     /* the one rank's rows are all */
    case ARG_RANK: fprintf(o, "I64(0)"); return;
    }
}

/* Before argument I of a launch's argument list: six to a line. */
static void arg_sep(FILE *o, int i)
{
    fprintf(o, "%s", i == 0 ? " " : i % 6 ? ", " : ",\n                   ");
}

/* The end of a launch: the call, with N arguments written. */
static void end_launch(Repro *r, PlanGraphId gid, int step, int line, const char *kernel, unsigned grid,
                       int n)
{
    if (n == 0) fprintf(r->out, " I64(0)");     /* C has no empty arrays; nothing is passed */
    fprintf(r->out, " };\n        launch(\"%s\", %d, %d, K_%s, %u, a, %d);\n    }\n", codegen_graph_label[gid], step,
            line, kernel, grid, n);
}

static void write_launch(Repro *r, PlanGraphId gid, int step, const PlanStep *s)
{
    const PlanLaunch *l = &s->launch;
    const PlanKernel *k = &r->plan->kernels[l->kernel];
    CGC_ASSERT(l->nargs == k->nparams && l->nargs <= (k->packed ? PLAN_MAX_SLOTS : PLAN_MAX_PARAMS));
    int64_t work = ir_numel(&l->work, r->symvals), tuned = choice_at(r, gid, step - 1).items;
    int64_t items = tuned > 0 ? tuned : l->items_per_block;
    unsigned grid = plan_launch_grid_items(l, items, r->symvals);   /* as the runtime launches it */
    FILE *o = r->out;
    fprintf(o, "    {   /* %d/%d", step, r->plan->graph[gid].nsteps);
    if (s->loc.line > 0) fprintf(o, ", line %d", s->loc.line);
    int threads = choice_at(r, gid, step - 1).block;
    fprintf(o, ": %s, %u block%s: ceil(%" PRId64 " / %" PRId64 ") in [1, %" PRId64 "]%s", k->name, grid,
            grid == 1 ? "" : "s", work, items, l->max_blocks,
            tuned > 0 && tuned != l->items_per_block ? " (items per block: the autotune choice)" : "");
    if (threads > 0) fprintf(o, ", of %d threads (the autotune choice)", threads);
    fprintf(o, " */\n");
    fprintf(o, "        Arg a[] = {");
    for (int i = 0; i < l->nargs; i++) {
        arg_sep(o, i);
        write_arg(r, k, i, &l->arg[i]);
    }
    end_launch(r, gid, step, s->loc.line, k->name, grid, l->nargs);
}

/* PTR(B), or NO_PTR when B < 0. */
static void write_ptr(FILE *o, int b)
{
    if (b >= 0) fprintf(o, "PTR(%d)", b);
    else fprintf(o, "NO_PTR");
}

/* GEMM step STEP of GID by generated kernel K (plan.h's ABI: c, a, b, bias, aux, m, n, k;
 * a block per tile of C; an implicit GEMM takes the image for the patches, the NCHW
 * gradient for its transpose, and, storing NCHW, the TRANSPOSE's buffer for C, then its
 * epilogue's arguments), as runtime/devexec.c launches it. */
static void write_gemm_launch(Repro *r, PlanGraphId gid, int step, const PlanStep *s, int k)
{
    const PlanGemm *g = &s->gemm;
    int tile, run, j;
    gemm_kernel_tile(r, gid, step - 1, &tile);
    bool implicit = window_tile(r, gid, step - 1, &run, &j) >= 0;
    int64_t m = plan_gemm_m(g, r->symvals), n = bind(r, g->n);
    unsigned grid = plan_gemm_tile_grid(tile, m, n);
    char shape[32];
    plan_gemm_tile_name(tile, shape, sizeof shape);
    FILE *o = r->out;
    fprintf(o, "    {   /* by the generated %skernel (the autotune choice): %u block%s, one per %s tile of C */\n"
               "        Arg a[] = {", implicit ? "implicit-GEMM " : "", grid, grid == 1 ? "" : "s", shape);
    int ptr[5] = {g->c, g->a, g->b, g->bias, g->aux};
    if (implicit) ptr[r->plan->windows[run].operand[j] == 'a' ? 1 : 2] = r->plan->windows[run].image;
    if (implicit && r->plan->windows[run].reads_grad[j]) ptr[1] = r->plan->windows[run].grad;
    if (implicit && j == r->plan->windows[run].store_reader) ptr[0] = r->plan->windows[run].store;
    for (int i = 0; i < 5; i++) {
        arg_sep(o, i);
        write_ptr(o, ptr[i]);
    }
    int64_t dims[3] = {m, n, plan_gemm_k(g, r->symvals)};
    for (int i = 0; i < 3; i++) {
        arg_sep(o, 5 + i);
        fprintf(o, "I64(%" PRId64 ")", dims[i]);
    }
    const PlanWindow *w = implicit && j == r->plan->windows[run].store_reader ? &r->plan->windows[run] : NULL;
    int nepi = w ? w->epi_nargs : 0;    /* its epilogue's, after the ABI's */
    for (int i = 0; i < nepi; i++) {
        arg_sep(o, 8 + i);
        write_arg(r, &r->plan->kernels[k], 8 + i, &w->epi_arg[i]);
    }
    end_launch(r, gid, step, s->loc.line, r->plan->kernels[k].name, grid, 8 + nepi);
}

/* A GEMM step: its row of the table, or its generated kernel. */
static void write_gemm_call(Repro *r, PlanGraphId gid, int step, const PlanStep *s, int row)
{
    const PlanGemm *g = &s->gemm;
    FILE *o = r->out;
    fprintf(o, "    /* %d/%d", step, r->plan->graph[gid].nsteps);
    if (s->loc.line > 0) fprintf(o, ", line %d", s->loc.line);
    if (gemm_is_empty(r, g)) {
        fprintf(o, ": GEMM into b%d skipped: it has no elements (as cgc skips it) */\n", g->c);
        return;
    }
    static const char *const act[] = { "", "", "relu", "gelu_tanh" };
    const char *f = g->epilogue == GEMM_EPI_NONE ? "" : act[g->epilogue];
    fprintf(o, ": b%d %s = %s%sb%d %s%s @ b%d %s%s", g->c, ir_dtype_name(g->c_type), f, *f ? "(" : "", g->a,
            ir_dtype_name(g->a_type), g->trans_a ? "^T" : "", g->b, ir_dtype_name(g->b_type),
            g->trans_b ? "^T" : "");
    if (g->epilogue != GEMM_EPI_NONE) fprintf(o, " + b%d %s", g->bias, ir_dtype_name(g->bias_type));
    fprintf(o, "%s", *f ? ")" : "");
    if (g->aux >= 0) fprintf(o, ", b%d = the sum before gelu", g->aux);
    fprintf(o, ", m %" PRId64 ", n %" PRId64 ", k %" PRId64, plan_gemm_m(g, r->symvals), bind(r, g->n), plan_gemm_k(g, r->symvals));
    if (g->batch.rank) fprintf(o, ", batch %" PRId64, ir_numel(&g->batch, r->symvals));
    int k = gemm_kernel(r, gid, step - 1);
    if (k >= 0) {
        fprintf(o, " */\n");
        write_gemm_launch(r, gid, step, s, k);
    } else {
        fprintf(o, " */\n    run_gemm(&gemms[%d]);\n", row);
    }
}

/* Fused MLP run RUN of GID in one launch of its kernel of the chosen shape, at its first
 * layer's step (plan.h's ABI: plan_mlp_args, then m; a block per plan_mlp_rows rows), as
 * runtime/devexec.c launches it. */
static void write_mlp_launch(Repro *r, PlanGraphId gid, int run)
{
    const PlanMlp *mlp = &r->plan->mlps[run];
    const PlanStep *steps = r->plan->graph[gid].steps, *st = &steps[mlp->step[0]];
    int shape = r->choices->mlp_shape[run], L = mlp->nlayers;
    const PlanKernel *k = &r->plan->kernels[mlp->kernel[shape]];
    int64_t m = plan_gemm_m(&st->gemm, r->symvals);
    FILE *o = r->out;
    fprintf(o, "    /* ");
    for (int j = 0; j < L; j++) fprintf(o, "%s%d", j ? ", " : "", mlp->step[j] + 1);
    fprintf(o, "/%d", r->plan->graph[gid].nsteps);
    bool lines = true;
    for (int j = 0; j < L; j++) lines = lines && steps[mlp->step[j]].loc.line > 0;
    for (int j = 0; lines && j < L; j++)
        fprintf(o, "%s %d", j ? "," : ", lines", steps[mlp->step[j]].loc.line);
    if (m == 0) {
        fprintf(o, ": a fused MLP pass skipped: it has no rows (as cgc skips it) */\n");
        return;
    }
    unsigned grid = plan_mlp_grid(shape, m);
    fprintf(o, ": %d GEMM layers of a narrow MLP's %s, m %" PRId64 ", in one\n"
               "     * launch of its fused kernel (the autotune choice): %u block%s of %d rows */\n"
               "    {\n        Arg a[] = {", L, mlp->backward ? "input gradients" : "forward pass", m, grid,
            grid == 1 ? "" : "s", plan_mlp_rows[shape]);
    int ptr[3 * PLAN_MLP_MAX_LAYERS + 1], n = plan_mlp_args(r->plan, run, ptr);
    for (int i = 0; i < n; i++) {
        arg_sep(o, i);
        write_ptr(o, ptr[i]);
    }
    arg_sep(o, n);
    fprintf(o, "I64(%" PRId64 ")", m);
    end_launch(r, gid, mlp->step[0] + 1, st->loc.line, k->name, grid, n + 1);
}

/* One function per replayed graph, its steps in order. */
static void write_graph(Repro *r, PlanGraphId gid, int *row)
{
    const PlanGraph *pg = &r->plan->graph[gid];
    FILE *o = r->out;
    fprintf(o, "/* The graph %s: %d steps. */\n"
               "static void run_%s(int64_t micro_step)\n{\n"
               "    (void)micro_step;   /* IR_RT_MICRO_STEP: dropout's counter, as in training */\n",
            codegen_graph_label[gid], pg->nsteps, codegen_graph_label[gid]);
    bool counted = r->plan->step_state >= 0 && (gid == PG_TRAIN || gid == PG_TRAIN_MICRO);
    for (int i = 0; i < pg->nsteps; i++) {
        const PlanStep *s = &pg->steps[i];
        if (in_fused_run(r, gid, i)) {
            fprintf(o, "    /* %d/%d: computed by the fused kernel launched at step %d */\n", i + 1, pg->nsteps,
                    r->plan->mlps[plan_mlp_layer_of(r->plan, gid, i)].step[0] + 1);
        } else if (window_skipped(r, gid, i)) {
            fprintf(o, "    /* %d/%d: %s */\n", i + 1, pg->nsteps, window_skip_text(r->plan, gid, i));
        } else if (fused_run(r, gid, i) >= 0) {
            write_mlp_launch(r, gid, fused_run(r, gid, i));
        } else if (s->kind == STEP_LAUNCH) {
            write_launch(r, gid, i + 1, s);
        } else {
            write_gemm_call(r, gid, i + 1, s, *row);
            if (library_gemm(r, gid, i)) (*row)++;
        }
    }
    if (counted)
        fprintf(o, "    {   /* the device's step counter, which the kernels read the micro-step from\n"
                   "         * (zero with the arena), moves on as training moves it */\n"
                   "        Arg a[] = { PTR(%d), I64(BATCH) };\n"
                   "        launch(\"%s\", %d, 0, K_cgc_step_advance, 1, a, 2);\n"
                   "    }\n", r->plan->step_state, codegen_graph_label[gid], pg->nsteps + 1);
    fprintf(o, "}\n\n");
}

static void write_steps(Repro *r)
{
    fprintf(r->out, "/* ---- the step: a function per graph it runs, then the step ---- */\n\n");
    int row = 0;
    for (size_t o = 0; o < sizeof replay_order / sizeof replay_order[0]; o++)
        if (replays(r, replay_order[o])) write_graph(r, replay_order[o], &row);
    CGC_ASSERT(row == r->ngemms);
    fprintf(r->out,
            "/* One training step: ACCUMULATE micro-batches, the last through the graph train.\n"
            " * The micro-step counter runs on across steps, as in training. */\n"
            "static void run_training_step(long step)\n"
            "{\n"
            "    for (int k = 0; k < ACCUMULATE; k++) {\n"
            "        int64_t micro_step = (int64_t)step * ACCUMULATE + k;\n"
            "%s"
            "    }\n"
            "}\n\n",
            replays(r, PG_TRAIN_MICRO) ? "        if (k < ACCUMULATE - 1) run_train_micro(micro_step);\n"
                                         "        else run_train(micro_step);\n"
                                       : "        run_train(micro_step);\n");
}

/* ---- main ---- */

static void write_main(Repro *r)
{
    int64_t launches, gemms, lt;
    counts(r, &launches, &gemms, &lt);
    fprintf(r->out,
            "#define MODEL_NAME \"%s\"\n#define MODE \"%s\"\n#define PRECISION \"%s\"\n"
            "enum { LAUNCHES_PER_STEP = %" PRId64 ", GEMMS_PER_STEP = %" PRId64
            ", LT_GEMMS_PER_STEP = %" PRId64 " };\n\n",
            r->model, plan_mode_name(r->plan->mode),
            config_precision_name(r->p->cfg.precision), launches, gemms, lt);
    fputs(repro_main, r->out);
}

/* R for PLAN with CHOICES (NULL: the plan's own, in *OWN), its kernels marked. */
static void repro_init(Repro *r, FILE *out, const Plan *plan, const PlanChoices *choices, PlanChoices *own)
{
    if (!choices) plan_choices_init(own, plan);
    *r = (Repro){ .out = out, .plan = plan, .p = plan->p, .choices = choices ? choices : own };
    CGC_ASSERT(plan->graph[PG_TRAIN].ir && plan->p->nsyms <= IR_MAX_SYMBOLS);
    if (plan->p->nsyms > 0) r->symvals[0] = plan->p->cfg.batch;
    r->used = xcalloc((size_t)plan->nkernels + 1, sizeof *r->used);
    mark_used(r);
}

static void repro_free(Repro *r, const PlanChoices *choices, PlanChoices *own)
{
    free(r->used);
    if (!choices) plan_choices_free(own);
}

bool plan_repro_uses_gemm_module(const Plan *plan, const PlanChoices *choices)
{
    Repro r;
    PlanChoices own;
    repro_init(&r, NULL, plan, choices, &own);
    bool generated = r.generated;
    repro_free(&r, choices, &own);
    return generated;
}

void plan_write_repro(FILE *out, const Plan *plan, const PlanChoices *choices)
{
    Repro r;
    PlanChoices own;
    repro_init(&r, out, plan, choices, &own);
    text_sanitise(r.model, sizeof r.model, plan->p->model_name, "model");
    plan_layout(plan, r.symvals, true, &r.layout);
    write_header(&r);
    write_fixed(&r, repro_types);
    write_constants(&r);
    write_kernels(&r);
    write_arena(&r);
    write_fills(&r);
    write_gemms(&r);
    write_fixed(&r, repro_gemm_map);
    write_fixed(&r, repro_replay);
    write_steps(&r);
    write_main(&r);
    plan_layout_free(&r.layout);
    repro_free(&r, choices, &own);
}

void plan_write_repro_makefile(FILE *out, const Plan *plan, const PlanChoices *choices, int arch)
{
    bool generated = plan_repro_uses_gemm_module(plan, choices);
    /* max-autotune's choices were made for one architecture (tuned there, or --check's
     * --arch): build for it unless told otherwise */
    if (choices) arch = choices->arch;
    else if (arch <= 0) arch = 90;
    const char *cubins = generated ? "module.cubin gemm_module.cubin" : "module.cubin";
    fprintf(out,
            "# Makefile of the reproducer of %s (see repro.c), generated by cgc --emit.\n"
            "#   make [ARCH=sm_80] [CUDA_HOME=/usr/local/cuda]   then, on a GPU: ./repro [steps]\n"
            "# Needs nvcc, cuBLAS and cuBLASLt; no GPU or driver to build (libcuda from the stubs).\n",
            plan->source_name);
    if (generated)
        fputs("# gemm_module.cu: the generated GEMM and fused MLP kernels that max-autotune's\n"
              "# choices name (sm_80 or later).\n", out);
    fprintf(out,
            "CUDA_HOME ?= /usr/local/cuda\n"
            "NVCC ?= $(CUDA_HOME)/bin/nvcc\n"
            "ARCH ?= sm_%d\n", arch);
    fputs("# cgc's NVRTC options (runtime/cuda/nvrtc.c) but -default-device, which nvcc lacks and\n"
          "# the module does not need: its device functions say __device__.\n"
          "MODULE_FLAGS = -cubin -arch=$(ARCH) --ftz=false --prec-div=true --prec-sqrt=true --fmad=false\n"
          "HOST_FLAGS = -x c -O2 -Xcompiler -Wall,-Wextra\n"
          "LIBS = -L$(CUDA_HOME)/lib64/stubs -lcuda -lcublas -lcublasLt \\\n"
          "       -Xlinker -rpath -Xlinker $(CUDA_HOME)/lib64\n"
          "\n", out);
    fprintf(out, "all: %s repro\n\n", cubins);
    fputs("%.cubin: %.cu\n"
          "\t$(NVCC) $(MODULE_FLAGS) -o $@ $<\n"
          "\n"
          "repro: repro.c\n"
          "\t$(NVCC) $(HOST_FLAGS) -o $@ repro.c $(LIBS)\n"
          "\n"
          "run: all\n"
          "\t./repro\n"
          "\n", out);
    fprintf(out, "clean:\n\trm -f %s repro\n\n.PHONY: all run clean\n", cubins);
}
