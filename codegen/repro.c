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
 * The GEMM mapping (row-major plan, column-major cuBLAS) follows runtime/cuda/gemm.c,
 * which stays its source of truth; the generated file says so where it applies it.
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

#include "../compiler/config.h"

/* IR_RT_TOTAL_STEPS as the replay states it: the length of run the schedules assume. */
enum { REPRO_TOTAL_STEPS = 1000, REPRO_WARMUP = 20, REPRO_STEPS = 200 };

static const char *const graph_label[PG_NUM] = { "train", "train_micro", "eval", "forward" };

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
    return bind(r, g->m) == 0 || bind(r, g->n) == 0 || batch == 0;
}

/* ---- what the choices make of a step (as runtime/devexec.c runs them) ---- */

static PlanStepChoice choice_at(const Repro *r, PlanGraphId gid, int i)
{
    const PlanStepChoice *c = r->choices->step[gid];
    return c ? c[i] : (PlanStepChoice){0};
}

/* The fused MLP run whose kernel is launched at step I of GID (its first layer's), or -1. */
static int fused_run(const Repro *r, PlanGraphId gid, int i)
{
    int run = plan_mlp_at(r->plan, gid, i);
    return run >= 0 && r->choices->mlp_shape[run] >= 0 ? run : -1;
}

/* The generated kernel GEMM step I of GID runs instead of the library, or -1. */
static int gemm_kernel(const Repro *r, PlanGraphId gid, int i)
{
    PlanStepChoice c = choice_at(r, gid, i);
    return c.tile > 0 ? r->plan->graph[gid].steps[i].gemm.tile_kernel[c.tile - 1] : -1;
}

/* Whether GEMM step I of GID goes through cublasLtMatmul (runtime/cuda/gemm.c's rule):
 * an epilogue, or a plain GEMM given one of cuBLASLt's algorithms. */
static bool through_lt(const Repro *r, PlanGraphId gid, int i)
{
    const PlanGemm *g = &r->plan->graph[gid].steps[i].gemm;
    int64_t batch = g->batch.rank ? ir_numel(&g->batch, r->symvals) : 1;
    return g->epilogue != GEMM_EPI_NONE || (choice_at(r, gid, i).algo > 0 && batch == 1 && bind(r, g->k) > 0);
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
            if (in_fused_run(r, (PlanGraphId)g, i)) continue;
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
          " */\n", r->out);
}

/* The fixed part before the tables: includes, checks, the random fill. */
static const char repro_includes[] =
    "#include <cuda.h>\n"
    "#include <cublasLt.h>\n"
    "#include <cublas_v2.h>\n"
    "#include <math.h>\n"
    "#include <stdint.h>\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "#include <string.h>\n";

static const char repro_prelude[] =
    "#define CGC_INF HUGE_VALF   /* for float literals written as cgc writes them */\n"
    "#define CGC_NAN NAN\n"
    "\n"
    "/* ---- errors: every call checked, naming where the replay was ---- */\n"
    "\n"
    "static long training_step = -1;     /* of the replay; -1 while setting up */\n"
    "static int check_each_step;         /* wait after every launch and GEMM (first step) */\n"
    "static CUstream stream;\n"
    "\n"
    "static void where(const char *graph, int step, const char *name, int line)\n"
    "{\n"
    "    fprintf(stderr, \"repro: error: \");\n"
    "    if (training_step >= 0) fprintf(stderr, \"training step %ld, \", training_step + 1);\n"
    "    if (graph) fprintf(stderr, \"graph %s step %d (%s\", graph, step, name);\n"
    "    if (graph && line > 0) fprintf(stderr, \", \" SOURCE_NAME \" line %d\", line);\n"
    "    if (graph) fprintf(stderr, \"): \");\n"
    "    else if (name) fprintf(stderr, \"%s: \", name);\n"
    "}\n"
    "\n"
    "static void check_cu(CUresult r, const char *call, const char *graph, int step,\n"
    "                     const char *name, int line)\n"
    "{\n"
    "    if (r == CUDA_SUCCESS) return;\n"
    "    const char *ename = NULL, *text = NULL;\n"
    "    cuGetErrorName(r, &ename);\n"
    "    cuGetErrorString(r, &text);\n"
    "    where(graph, step, name, line);\n"
    "    fprintf(stderr, \"%s failed: %s (error %d%s%s)\\n\", call, ename ? ename : \"unnamed\", (int)r,\n"
    "            text ? \": \" : \"\", text ? text : \"\");\n"
    "    exit(1);\n"
    "}\n"
    "\n"
    "static void check_blas(cublasStatus_t s, const char *call, const char *graph, int step,\n"
    "                       const char *name, int line)\n"
    "{\n"
    "    if (s == CUBLAS_STATUS_SUCCESS) return;\n"
    "    where(graph, step, name, line);\n"
    "    fprintf(stderr, \"%s failed: %s (%s)\\n\", call, cublasGetStatusName(s), cublasGetStatusString(s));\n"
    "    exit(1);\n"
    "}\n"
    "\n"
    "/* Setup calls, named by what they were for: CU(\"the arena\", cuMemAlloc, &arena, n). */\n"
    "#define CU(what, fn, ...) check_cu(fn(__VA_ARGS__), #fn, NULL, 0, (what), 0)\n"
    "#define BLAS(what, fn, ...) check_blas(fn(__VA_ARGS__), #fn, NULL, 0, (what), 0)\n"
    "\n"
    "/* After a step's launch or GEMM: in the first warm-up step, wait for it and check. */\n"
    "static void settle(const char *graph, int step, const char *name, int line)\n"
    "{\n"
    "    if (check_each_step)\n"
    "        check_cu(cuStreamSynchronize(stream), \"cuStreamSynchronize\", graph, step, name, line);\n"
    "}\n"
    "\n";

static void write_constants(Repro *r)
{
    const TrainConfig *c = &r->p->cfg;
    fprintf(r->out, "\n%s\n#define SOURCE_NAME \"%s\"\n", repro_includes, r->plan->source_name);
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
            "};\n"
            "static const uint64_t SEED = %" PRIu64 "ULL;   /* cfg.seed: kernels' Philox streams, "
            "the fills */\n\n",
            c->batch, c->accumulate, REPRO_TOTAL_STEPS, REPRO_WARMUP, REPRO_STEPS, c->seed);
    fputs(repro_prelude, r->out);
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
    fprintf(o, "/* ---- kernels: every kernel the step launches, looked up once in its module:\n"
               " * module.cubin, or gemm_module.cubin for the generated GEMM and fused MLP kernels\n"
               " * that max-autotune's choices name ---- */\n\n"
               "enum { NUM_MODULES = %d };\n"
               "static const char *const module_file[NUM_MODULES] = { \"module.cubin\"%s };\n\n"
               "enum {\n", r->generated ? 2 : 1, r->generated ? ", \"gemm_module.cubin\"" : "");
    for (int k = 0; k < pl->nkernels; k++) {
        if (!r->used[k]) continue;
        fprintf(o, "    K_%s,\n", pl->kernels[k].name);
        block[n] = pl->kernels[k].block;
        module[n++] = k >= pl->gemm_kernels_from;
    }
    fprintf(o, "    NUM_KERNELS\n};\n\nstatic const char *const kernel_name[NUM_KERNELS] = {\n");
    for (int k = 0; k < pl->nkernels; k++)
        if (r->used[k]) fprintf(o, "    \"%s\",\n", pl->kernels[k].name);
    fprintf(o, "};\n\n/* threads per block: each kernel's __launch_bounds__; and its module */\n"
               "static const unsigned kernel_block[NUM_KERNELS] = {");
    write_numbers(o, block, n);
    fprintf(o, "\n};\nstatic const unsigned char kernel_module[NUM_KERNELS] = {");
    write_numbers(o, module, n);
    fprintf(o, "\n};\n\nstatic CUfunction kernel[NUM_KERNELS];\n\n");
    free(block);
    free(module);
}

/* ---- the arena ---- */

static const char *kind_label(const PlanBuffer *b)
{
    switch (b->kind) {
    case PB_NODE: return graph_label[b->graph];
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

static const char fill_code[] =
    "/* A 64-bit linear congruential generator (Knuth's MMIX constants), seeded with SEED.\n"
    " * Enough for plausible values, and deliberately simple: it is not cgc's Philox\n"
    " * initialisation, so the values are not bit for bit those of a cgc run (the timing of\n"
    " * a step does not depend on them, except where fp16 loss scaling skips a step). */\n"
    "static uint64_t lcg_state;\n"
    "\n"
    "static float lcg_uniform(void)      /* in [0, 1) */\n"
    "{\n"
    "    lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;\n"
    "    return (float)(lcg_state >> 40) * 0x1p-24f;\n"
    "}\n"
    "\n"
    "static uint32_t f32_bits(float x)\n"
    "{\n"
    "    uint32_t u;\n"
    "    memcpy(&u, &x, sizeof u);\n"
    "    return u;\n"
    "}\n"
    "\n"
    "/* f32 to f16 bits, round to nearest even; overflow gives inf, as cgc's stores do. */\n"
    "static uint16_t f16_bits(float x)\n"
    "{\n"
    "    uint32_t u = f32_bits(x), sign = (u >> 16) & 0x8000u, mag = u & 0x7fffffffu;\n"
    "    if (mag > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);         /* NaN */\n"
    "    if (mag >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);        /* >= 65520: inf */\n"
    "    if (mag < 0x38800000u) {          /* below 2^-14: a multiple of 2^-24, or 0 */\n"
    "        uint32_t man = (mag & 0x7fffffu) | 0x800000u;\n"
    "        int shift = 126 - (int)(mag >> 23);\n"
    "        if (shift > 24) return (uint16_t)sign;\n"
    "        uint32_t q = man >> shift, rest = man & ((1u << shift) - 1), half = 1u << (shift - 1);\n"
    "        if (rest > half || (rest == half && (q & 1))) q++;\n"
    "        return (uint16_t)(sign | q);\n"
    "    }\n"
    "    uint32_t h = ((mag >> 23) - 112) << 10 | (mag & 0x7fffffu) >> 13, rest = mag & 0x1fffu;\n"
    "    if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;          /* carries into the exponent */\n"
    "    return (uint16_t)(sign | h);\n"
    "}\n"
    "\n"
    "/* f32 to bf16 bits, round to nearest even. */\n"
    "static uint16_t bf16_bits(float x)\n"
    "{\n"
    "    uint32_t u = f32_bits(x);\n"
    "    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);\n"
    "    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n"
    "}\n"
    "\n"
    "typedef enum Type { T_F32, T_F16, T_BF16, T_I32 } Type;\n"
    "typedef enum How {\n"
    "    FILL_VALUE,         /* every element `value` */\n"
    "    FILL_UNIFORM,       /* uniform in [-value, value] */\n"
    "    FILL_UNIT,          /* uniform in [0, 1): features, float targets */\n"
    "    FILL_LABELS,        /* integers uniform in [0, value): class labels (0 when value is 0) */\n"
    "} How;\n"
    "\n"
    "typedef struct Fill {\n"
    "    int buffer;\n"
    "    int64_t count;      /* elements */\n"
    "    Type type;\n"
    "    How how;\n"
    "    float value;\n"
    "} Fill;\n"
    "\n";

static const char fill_run[] =
    "\n"
    "/* The arena zeroed (tensors initialised to zeros, the launch counter, every value),\n"
    " * then each fill written: persistent tensors by their initialiser (f32), the plan's\n"
    " * constants in their dtype, the program inputs at random. */\n"
    "static void fill_arena(void)\n"
    "{\n"
    "    CU(\"zeroing the arena\", cuMemsetD8, arena, 0, ARENA_BYTES);\n"
    "    lcg_state = SEED;\n"
    "    for (int i = 0; i < NUM_FILLS; i++) {\n"
    "        const Fill *f = &fills[i];\n"
    "        size_t size = f->type == T_F16 || f->type == T_BF16 ? 2 : 4;\n"
    "        unsigned char *host = malloc((size_t)f->count * size + 1);\n"
    "        if (!host) {\n"
    "            fprintf(stderr, \"repro: error: out of host memory for the fill of b%d\\n\", f->buffer);\n"
    "            exit(1);\n"
    "        }\n"
    "        for (int64_t e = 0; e < f->count; e++) {\n"
    "            float v = f->value;\n"
    "            if (f->how == FILL_UNIFORM) v = (2.0f * lcg_uniform() - 1.0f) * f->value;\n"
    "            if (f->how == FILL_UNIT) v = lcg_uniform();\n"
    "            if (f->how == FILL_LABELS) {\n"
    "                int32_t classes = (int32_t)f->value, label = (int32_t)(lcg_uniform() * f->value);\n"
    "                v = classes > 0 ? (float)(label < classes ? label : classes - 1) : 0.0f;\n"
    "            }\n"
    "            uint16_t half;\n"
    "            int32_t i32;\n"
    "            switch (f->type) {\n"
    "            case T_F32: memcpy(host + e * 4, &v, 4); break;\n"
    "            case T_I32: i32 = (int32_t)v; memcpy(host + e * 4, &i32, 4); break;\n"
    "            case T_F16: half = f16_bits(v); memcpy(host + e * 2, &half, 2); break;\n"
    "            case T_BF16: half = bf16_bits(v); memcpy(host + e * 2, &half, 2); break;\n"
    "            }\n"
    "        }\n"
    "        CU(\"filling the arena\", cuMemcpyHtoD, arena + offset_of[f->buffer], host,\n"
    "           (size_t)f->count * size);\n"
    "        free(host);\n"
    "    }\n"
    "    /* the replay's stream does not wait for the legacy default stream */\n"
    "    check_cu(cuCtxSynchronize(), \"cuCtxSynchronize\", NULL, 0, \"filling the arena\", 0);\n"
    "}\n"
    "\n";

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
    fputs(fill_code, r->out);
    fprintf(r->out, "static const Fill fills[] = {\n");
    int n = 0;
    for (int i = 0; i < p->ntensors; i++) {
        const IrTensor *t = &p->tensors[i];
        int b = pl->tensor_buffer_base + i;
        char why[96];
        int len = snprintf(why, sizeof why, "tensor %d%s", i, t->kind == IR_PARAM ? ", a parameter" : "");
        if (t->loc.line > 0) snprintf(why + len, sizeof why - (size_t)len, ", line %d", t->loc.line);
        if (t->init == IR_INIT_ZEROS) continue;
        if (t->init == IR_INIT_UNIFORM) fill_row(r, b, DT_F32, "FILL_UNIFORM", t->init_value, why);
        else fill_row(r, b, DT_F32, "FILL_VALUE", t->init == IR_INIT_ONES ? 1.0 : t->init_value, why);
        n++;
    }
    for (int b = 0; b < pl->nbuffers; b++) {
        const PlanBuffer *buf = &pl->buffers[b];
        if (buf->kind != PB_CONST || buf->alias_of >= 0) continue;
        char why[48];
        snprintf(why, sizeof why, "a constant of %s", graph_label[buf->graph]);
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
    fprintf(r->out, "};\nenum { NUM_FILLS = %d };\n", n);
    fputs(fill_run, r->out);
}

/* ---- GEMMs ---- */

static const char gemm_code[] =
    "/* ---- GEMMs ----\n"
    " * The plan's GEMMs are row-major, cuBLAS's column-major. The mapping is cgc's, and\n"
    " * runtime/cuda/gemm.c in cgc's source is its source of truth; this file repeats it:\n"
    " *     row-major C [m, n] = op(A) @ op(B)  is computed as  column-major C^T = op(B)^T @ op(A)^T\n"
    " * (the same bytes), passing B first and A second, each with its own transpose:\n"
    " *     B stored [k, n] (ld n, op N) or, when trans_b, [n, k] (ld k, op T);\n"
    " *     A stored [m, k] (ld k, op N) or, when trans_a, [k, m] (ld m, op T);  C: ld n.\n"
    " * A GEMM with an epilogue goes through cublasLtMatmul with the same swap: cuBLASLt's A\n"
    " * is our B, its B our A, its D our C^T [n, m], so the bias (one value per column of C)\n"
    " * runs over D's n rows and the aux output (GELU's input) has D's layout, ld n. Scalars\n"
    " * alpha = 1 and beta = 0 are host floats; cuBLASLt gets a 32 MiB workspace and the\n"
    " * heuristic's first algorithm for the operands' alignments, or its lt_algo-th (of at\n"
    " * most LT_ALGOS) where max-autotune chose one, which also sends a plain GEMM through\n"
    " * cublasLtMatmul (epilogue DEFAULT, no bias). */\n"
    "\n"
    "enum { LT_WORKSPACE = 32 << 20, LT_ALGOS = %d };\n"
    "\n"
    "typedef struct Gemm {\n"
    "    const char *graph;          /* where it is, for messages */\n"
    "    int step, line;\n"
    "    int trans_a, trans_b;\n"
    "    int m, n, k, batch;         /* batch 1: a plain GEMM */\n"
    "    long long stride_a, stride_b, stride_c;   /* elements between batches; 0 broadcasts */\n"
    "    int a, b, c;                /* buffers */\n"
    "    cudaDataType a_type, b_type, c_type;\n"
    "    cublasComputeType_t compute;\n"
    "    int lt;                     /* through cublasLtMatmul with `epilogue` */\n"
    "    int lt_algo;                /* the heuristic's lt_algo-th algorithm; 0: its first */\n"
    "    cublasLtEpilogue_t epilogue;\n"
    "    int bias, aux;              /* buffers; -1 when none */\n"
    "    cudaDataType bias_type;\n"
    "    /* made once by gemm_setup (lt only) */\n"
    "    cublasLtMatmulDesc_t desc;\n"
    "    cublasLtMatrixLayout_t la, lb, lc;      /* cuBLASLt's A (our B), B (our A), C = D */\n"
    "    cublasLtMatmulAlgo_t algo;\n"
    "} Gemm;\n"
    "\n";

static const char gemm_run[] =
    "\n"
    "static cublasHandle_t blas;\n"
    "static cublasLtHandle_t blas_lt;\n"
    "static CUdeviceptr lt_workspace;\n"
    "\n"
    "#define GEMM_CHECK(g, name, fn, ...) \\\n"
    "    check_blas(fn(__VA_ARGS__), #fn, (g)->graph, (g)->step, (name), (g)->line)\n"
    "\n"
    "/* The largest power of two up to 256 dividing address P (cuBLASLt's heuristic assumes it). */\n"
    "static uint32_t alignment(CUdeviceptr p)\n"
    "{\n"
    "    uint32_t a = 1;\n"
    "    while (a < 256 && p % (2 * a) == 0) a *= 2;\n"
    "    return a;\n"
    "}\n"
    "\n"
    "static void lt_set(Gemm *g, cublasLtMatmulDescAttributes_t attr, const void *v, size_t size)\n"
    "{\n"
    "    GEMM_CHECK(g, \"cublasLtMatmul\", cublasLtMatmulDescSetAttribute, g->desc, attr, v, size);\n"
    "}\n"
    "\n"
    "static void lt_prefer(Gemm *g, cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,\n"
    "                      const void *v, size_t size)\n"
    "{\n"
    "    GEMM_CHECK(g, \"cublasLtMatmul\", cublasLtMatmulPreferenceSetAttribute, pref, attr, v, size);\n"
    "}\n"
    "\n"
    "/* A column-major ROWS x COLS layout with leading dimension LD. */\n"
    "static void lt_layout(Gemm *g, cublasLtMatrixLayout_t *l, cudaDataType t, int rows, int cols, int ld)\n"
    "{\n"
    "    GEMM_CHECK(g, \"cublasLtMatmul\", cublasLtMatrixLayoutCreate, l, t, (uint64_t)rows, (uint64_t)cols,\n"
    "               ld < 1 ? 1 : ld);\n"
    "}\n"
    "\n"
    "/* The descriptor, layouts and algorithm of cuBLASLt GEMM G, made once before timing. */\n"
    "static void lt_setup(Gemm *g)\n"
    "{\n"
    "    CUdeviceptr a = arena + offset_of[g->a], b = arena + offset_of[g->b], c = arena + offset_of[g->c];\n"
    "    GEMM_CHECK(g, \"cublasLtMatmul\", cublasLtMatmulDescCreate, &g->desc, g->compute, CUDA_R_32F);\n"
    "    cublasOperation_t op_a = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;   /* cuBLASLt's A: our B */\n"
    "    cublasOperation_t op_b = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;\n"
    "    lt_set(g, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a);\n"
    "    lt_set(g, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b);\n"
    "    lt_set(g, CUBLASLT_MATMUL_DESC_EPILOGUE, &g->epilogue, sizeof g->epilogue);\n"
    "    if (g->bias >= 0) {\n"
    "        const void *bias = (const void *)(uintptr_t)(arena + offset_of[g->bias]);\n"
    "        lt_set(g, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);\n"
    "        lt_set(g, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &g->bias_type, sizeof g->bias_type);\n"
    "    }\n"
    "    if (g->aux >= 0) {\n"
    "        void *aux = (void *)(uintptr_t)(arena + offset_of[g->aux]);\n"
    "        int64_t aux_ld = g->n;\n"
    "        lt_set(g, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);\n"
    "        lt_set(g, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);\n"
    "    }\n"
    "    lt_layout(g, &g->la, g->b_type, g->trans_b ? g->k : g->n, g->trans_b ? g->n : g->k,\n"
    "              g->trans_b ? g->k : g->n);\n"
    "    lt_layout(g, &g->lb, g->a_type, g->trans_a ? g->m : g->k, g->trans_a ? g->k : g->m,\n"
    "              g->trans_a ? g->m : g->k);\n"
    "    lt_layout(g, &g->lc, g->c_type, g->n, g->m, g->n);\n"
    "\n"
    "    cublasLtMatmulPreference_t pref;\n"
    "    GEMM_CHECK(g, \"cublasLtMatmul\", cublasLtMatmulPreferenceCreate, &pref);\n"
    "    uint64_t ws = LT_WORKSPACE;\n"
    "    uint32_t align_a = alignment(b), align_b = alignment(a), align_c = alignment(c);  /* Lt's A: our B */\n"
    "    lt_prefer(g, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);\n"
    "    lt_prefer(g, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a);\n"
    "    lt_prefer(g, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b);\n"
    "    lt_prefer(g, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c);\n"
    "    lt_prefer(g, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof align_c);\n"
    "    cublasLtMatmulHeuristicResult_t result[LT_ALGOS];\n"
    "    int found = 0, want = g->lt_algo > 0 ? g->lt_algo : 1;\n"
    "    GEMM_CHECK(g, \"cublasLtMatmul\", cublasLtMatmulAlgoGetHeuristic, blas_lt, g->desc, g->la, g->lb, g->lc,\n"
    "               g->lc, pref, LT_ALGOS, result, &found);\n"
    "    GEMM_CHECK(g, \"cublasLtMatmul\", cublasLtMatmulPreferenceDestroy, pref);\n"
    "    if (found == 0) {\n"
    "        where(g->graph, g->step, \"cublasLtMatmul\", g->line);\n"
    "        fprintf(stderr, \"cublasLtMatmulAlgoGetHeuristic found no algorithm\\n\");\n"
    "        exit(1);\n"
    "    }\n"
    "    if (found < want) {     /* another GPU or library: its last, as cgc's lt_gemm takes */\n"
    "        fprintf(stderr, \"repro: note: graph %s step %d: cuBLASLt lists %d algorithms here, not the \"\n"
    "                        \"%d-th that was tuned; using its last, as cgc does\\n\", g->graph, g->step, found,\n"
    "                want);\n"
    "        want = found;\n"
    "    }\n"
    "    g->algo = result[want - 1].algo;\n"
    "}\n"
    "\n"
    "static void gemm_setup(void)\n"
    "{\n"
    "    BLAS(\"cuBLAS\", cublasCreate, &blas);\n"
    "    BLAS(\"cuBLAS\", cublasSetStream, blas, (cudaStream_t)stream);\n"
    "    BLAS(\"cuBLAS\", cublasSetPointerMode, blas, CUBLAS_POINTER_MODE_HOST);\n"
    "    BLAS(\"cuBLASLt\", cublasLtCreate, &blas_lt);\n"
    "    CU(\"the cuBLASLt workspace\", cuMemAlloc, &lt_workspace, LT_WORKSPACE);\n"
    "#if CAPTURE\n"
    "    /* a graph capture may not allocate: cuBLAS gets the workspace too (one stream: the\n"
    "     * two never run at once), as cgc's runtime does */\n"
    "    BLAS(\"cuBLAS\", cublasSetWorkspace, blas, (void *)(uintptr_t)lt_workspace, LT_WORKSPACE);\n"
    "#endif\n"
    "    for (int i = 0; i < NUM_GEMMS; i++)\n"
    "        if (gemms[i].lt) lt_setup(&gemms[i]);\n"
    "}\n"
    "\n"
    "static void gemm_close(void)\n"
    "{\n"
    "    for (int i = 0; i < NUM_GEMMS; i++) {\n"
    "        Gemm *g = &gemms[i];\n"
    "        if (!g->lt) continue;\n"
    "        GEMM_CHECK(g, \"cublasLtMatmul\", cublasLtMatmulDescDestroy, g->desc);\n"
    "        GEMM_CHECK(g, \"cublasLtMatmul\", cublasLtMatrixLayoutDestroy, g->la);\n"
    "        GEMM_CHECK(g, \"cublasLtMatmul\", cublasLtMatrixLayoutDestroy, g->lb);\n"
    "        GEMM_CHECK(g, \"cublasLtMatmul\", cublasLtMatrixLayoutDestroy, g->lc);\n"
    "    }\n"
    "    CU(\"the cuBLASLt workspace\", cuMemFree, lt_workspace);\n"
    "    BLAS(\"cuBLASLt\", cublasLtDestroy, blas_lt);\n"
    "    BLAS(\"cuBLAS\", cublasDestroy, blas);\n"
    "}\n"
    "\n"
    "static void run_gemm(Gemm *g)\n"
    "{\n"
    "    const float alpha = 1.0f, beta = 0.0f;\n"
    "    const void *a = (const void *)(uintptr_t)(arena + offset_of[g->a]);\n"
    "    const void *b = (const void *)(uintptr_t)(arena + offset_of[g->b]);\n"
    "    void *c = (void *)(uintptr_t)(arena + offset_of[g->c]);\n"
    "    if (g->lt) {\n"
    "        GEMM_CHECK(g, \"cublasLtMatmul\", cublasLtMatmul, blas_lt, g->desc, &alpha, b, g->la, a, g->lb, &beta,\n"
    "                   c, g->lc, c, g->lc, &g->algo, (void *)(uintptr_t)lt_workspace, LT_WORKSPACE,\n"
    "                   (cudaStream_t)stream);\n"
    "        settle(g->graph, g->step, \"cublasLtMatmul\", g->line);\n"
    "        return;\n"
    "    }\n"
    "    cublasOperation_t op_b = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;\n"
    "    cublasOperation_t op_a = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;\n"
    "    int ldb = g->trans_b ? g->k : g->n, lda = g->trans_a ? g->m : g->k, ldc = g->n;\n"
    "    if (ldb == 0) ldb = 1;      /* k == 0: cuBLAS still wants ld >= 1 */\n"
    "    if (lda == 0) lda = 1;\n"
    "    if (g->batch == 1) {\n"
    "        GEMM_CHECK(g, \"cublasGemmEx\", cublasGemmEx, blas, op_b, op_a, g->n, g->m, g->k, &alpha, b, g->b_type,\n"
    "                   ldb, a, g->a_type, lda, &beta, c, g->c_type, ldc, g->compute, CUBLAS_GEMM_DEFAULT);\n"
    "        settle(g->graph, g->step, \"cublasGemmEx\", g->line);\n"
    "        return;\n"
    "    }\n"
    "    GEMM_CHECK(g, \"cublasGemmStridedBatchedEx\", cublasGemmStridedBatchedEx, blas, op_b, op_a, g->n, g->m,\n"
    "               g->k, &alpha, b, g->b_type, ldb, g->stride_b, a, g->a_type, lda, g->stride_a, &beta, c,\n"
    "               g->c_type, ldc, g->stride_c, g->batch, g->compute, CUBLAS_GEMM_DEFAULT);\n"
    "    settle(g->graph, g->step, \"cublasGemmStridedBatchedEx\", g->line);\n"
    "}\n"
    "\n";

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
    int64_t m = checked_int(bind(r, g->m)), n = checked_int(bind(r, g->n)), k = checked_int(bind(r, g->k));
    int64_t batch = checked_int(g->batch.rank ? ir_numel(&g->batch, r->symvals) : 1);
    FILE *o = r->out;
    fprintf(o, "    { .graph = \"%s\", .step = %d, .line = %d, .trans_a = %d, .trans_b = %d,\n"
               "      .m = %" PRId64 ", .n = %" PRId64 ", .k = %" PRId64 ", .batch = %" PRId64 ",",
            graph_label[gid], step, s->loc.line, g->trans_a, g->trans_b, m, n, k, batch);
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
    fprintf(r->out, gemm_code, PLAN_GEMM_ALGOS);
    fprintf(r->out, "static Gemm gemms[] = {\n");
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
    fprintf(r->out, "};\nenum { NUM_GEMMS = %d };\n", r->ngemms);
    fputs(gemm_run, r->out);
}

/* ---- the steps ---- */

static const char launch_code[] =
    "/* ---- launches ---- */\n"
    "\n"
    "/* One kernel parameter: the kernel reads as many bytes as its parameter's type. */\n"
    "typedef union Arg {\n"
    "    CUdeviceptr ptr;\n"
    "    int64_t i64;\n"
    "    uint64_t u64;\n"
    "    float f32;\n"
    "} Arg;\n"
    "\n"
    "#define PTR(b) { .ptr = arena + offset_of[b] }\n"
    "#define NO_PTR { .ptr = 0 }   /* a generated kernel's absent bias or aux */\n"
    "#define I64(v) { .i64 = (v) }\n"
    "#define U64(v) { .u64 = (v) }\n"
    "#define F32(v) { .f32 = (v) }\n"
    "\n"
    "static void launch(const char *graph, int step, int line, int k, unsigned grid, Arg *arg, int nargs)\n"
    "{\n"
    "    void *params[MAX_PARAMS];\n"
    "    for (int i = 0; i < nargs; i++) params[i] = &arg[i];\n"
    "    check_cu(cuLaunchKernel(kernel[k], grid, 1, 1, kernel_block[k], 1, 1, 0, stream, params, NULL),\n"
    "             \"cuLaunchKernel\", graph, step, kernel_name[k], line);\n"
    "    settle(graph, step, kernel_name[k], line);\n"
    "}\n"
    "\n";

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
    case ARG_RUNTIME:
        CGC_ASSERT(a->index == IR_RT_TOTAL_STEPS || a->index == IR_RT_MICRO_STEP);
        fprintf(o, a->index == IR_RT_TOTAL_STEPS ? "F32((float)TOTAL_STEPS)" : "F32((float)micro_step)");
        return;
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
    fprintf(r->out, " };\n        launch(\"%s\", %d, %d, K_%s, %u, a, %d);\n    }\n", graph_label[gid], step,
            line, kernel, grid, n);
}

static void write_launch(Repro *r, PlanGraphId gid, int step, const PlanStep *s)
{
    const PlanLaunch *l = &s->launch;
    const PlanKernel *k = &r->plan->kernels[l->kernel];
    CGC_ASSERT(l->nargs == k->nparams && l->nargs <= PLAN_MAX_PARAMS);
    int64_t work = ir_numel(&l->work, r->symvals), tuned = choice_at(r, gid, step - 1).items;
    int64_t items = tuned > 0 ? tuned : l->items_per_block;
    unsigned grid = plan_launch_grid_items(l, items, r->symvals);   /* as the runtime launches it */
    FILE *o = r->out;
    fprintf(o, "    {   /* %d/%d", step, r->plan->graph[gid].nsteps);
    if (s->loc.line > 0) fprintf(o, ", line %d", s->loc.line);
    fprintf(o, ": %s, %u block%s: ceil(%" PRId64 " / %" PRId64 ") in [1, %" PRId64 "]%s */\n",
            k->name, grid, grid == 1 ? "" : "s", work, items, l->max_blocks,
            tuned > 0 && tuned != l->items_per_block ? " (items per block: the autotune choice)" : "");
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
 * a block per tile of C), as runtime/devexec.c launches it. */
static void write_gemm_launch(Repro *r, PlanGraphId gid, int step, const PlanStep *s, int k)
{
    const PlanGemm *g = &s->gemm;
    int tile = choice_at(r, gid, step - 1).tile - 1;
    int64_t m = bind(r, g->m), n = bind(r, g->n);
    unsigned grid = plan_gemm_tile_grid(tile, m, n);
    char shape[32];
    plan_gemm_tile_name(tile, shape, sizeof shape);
    FILE *o = r->out;
    fprintf(o, "    {   /* by the generated kernel (the autotune choice): %u block%s, one per %s tile of C */\n"
               "        Arg a[] = {", grid, grid == 1 ? "" : "s", shape);
    int ptr[5] = {g->c, g->a, g->b, g->bias, g->aux};
    for (int i = 0; i < 5; i++) {
        arg_sep(o, i);
        write_ptr(o, ptr[i]);
    }
    int64_t dims[3] = {m, n, bind(r, g->k)};
    for (int i = 0; i < 3; i++) {
        arg_sep(o, 5 + i);
        fprintf(o, "I64(%" PRId64 ")", dims[i]);
    }
    end_launch(r, gid, step, s->loc.line, r->plan->kernels[k].name, grid, 8);
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
    fprintf(o, ", m %" PRId64 ", n %" PRId64 ", k %" PRId64, bind(r, g->m), bind(r, g->n), bind(r, g->k));
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
    int64_t m = bind(r, st->gemm.m);
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
            graph_label[gid], pg->nsteps, graph_label[gid]);
    bool counted = r->plan->step_state >= 0 && (gid == PG_TRAIN || gid == PG_TRAIN_MICRO);
    for (int i = 0; i < pg->nsteps; i++) {
        const PlanStep *s = &pg->steps[i];
        if (in_fused_run(r, gid, i)) {
            fprintf(o, "    /* %d/%d: computed by the fused kernel launched at step %d */\n", i + 1, pg->nsteps,
                    r->plan->mlps[plan_mlp_layer_of(r->plan, gid, i)].step[0] + 1);
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
                   "    }\n", r->plan->step_state, graph_label[gid], pg->nsteps + 1);
    fprintf(o, "}\n\n");
}

static void write_steps(Repro *r)
{
    fprintf(r->out, "enum { MAX_PARAMS = %d };   /* a kernel's parameters at most */\n\n",
            PLAN_MAX_PARAMS);
    fputs(launch_code, r->out);
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

static const char main_code[] =
    "/* ---- main ---- */\n"
    "\n"
    "static int by_value(const void *pa, const void *pb)\n"
    "{\n"
    "    float a = *(const float *)pa, b = *(const float *)pb;\n"
    "    return a < b ? -1 : a > b;\n"
    "}\n"
    "\n"
    "/* Quantile Q of the N sorted values, interpolated between the two nearest ranks. */\n"
    "static double quantile(const float *sorted, int n, double q)\n"
    "{\n"
    "    double pos = q * (n - 1);\n"
    "    int lo = (int)pos, hi = lo + 1 < n ? lo + 1 : lo;\n"
    "    return sorted[lo] + (pos - lo) * (sorted[hi] - sorted[lo]);\n"
    "}\n"
    "\n"
    "/* FILE beside this program (argv[0]'s directory), or in the current one. */\n"
    "static void cubin_path(const char *argv0, const char *file, char *path, size_t n)\n"
    "{\n"
    "    const char *slash = strrchr(argv0, '/');\n"
    "    if (slash) snprintf(path, n, \"%.*s/%s\", (int)(slash - argv0), argv0, file);\n"
    "    else snprintf(path, n, \"%s\", file);\n"
    "}\n"
    "\n"
    "int main(int argc, char **argv)\n"
    "{\n"
    "    long steps = DEFAULT_STEPS;\n"
    "    char *end = NULL;\n"
    "    if (argc == 2) steps = strtol(argv[1], &end, 10);\n"
    "    if (argc > 2 || (end && (*end || end == argv[1])) || steps < 1 || steps > 10000000) {\n"
    "        fprintf(stderr, \"usage: %s [steps]   (timed training steps, 1 to 10000000; default %d)\\n\",\n"
    "                argv[0], DEFAULT_STEPS);\n"
    "        return 2;\n"
    "    }\n"
    "    CUdevice dev;\n"
    "    CUcontext ctx;\n"
    "    CUmodule module[NUM_MODULES];\n"
    "    char name[100] = \"\", path[4096];\n"
    "    CU(\"the CUDA driver\", cuInit, 0);\n"
    "    CU(\"device 0\", cuDeviceGet, &dev, 0);\n"
    "    CU(\"device 0\", cuDeviceGetName, name, (int)sizeof name, dev);\n"
    "    CU(\"device 0\", cuDevicePrimaryCtxRetain, &ctx, dev);      /* shared with cuBLAS */\n"
    "    CU(\"device 0\", cuCtxSetCurrent, ctx);\n"
    "    CU(\"the stream\", cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);\n"
    "    for (int i = 0; i < NUM_MODULES; i++) {\n"
    "        cubin_path(argv[0], module_file[i], path, sizeof path);\n"
    "        CU(path, cuModuleLoad, &module[i], path);     /* make builds it, for ARCH */\n"
    "    }\n"
    "    for (int k = 0; k < NUM_KERNELS; k++)\n"
    "        check_cu(cuModuleGetFunction(&kernel[k], module[kernel_module[k]], kernel_name[k]),\n"
    "                 \"cuModuleGetFunction\", NULL, 0, kernel_name[k], 0);\n"
    "    CU(\"the arena\", cuMemAlloc, &arena, ARENA_BYTES ? ARENA_BYTES : 256);\n"
    "    fill_arena();\n"
    "    gemm_setup();\n"
    "    /* the step counter (CAPTURE) starts at micro-step 0, row 0: the arena is zeroed */\n"
    "\n"
    "    check_each_step = 1;\n"
    "    for (training_step = 0; training_step < WARMUP_STEPS; training_step++) {\n"
    "        run_training_step(training_step);\n"
    "        check_each_step = 0;\n"
    "    }\n"
    "    training_step = -1;\n"
    "    CU(\"the warm-up steps\", cuStreamSynchronize, stream);\n"
    "#if CAPTURE\n"
    "    /* One training step recorded, not run: from now on each step is one graph launch. */\n"
    "    CUgraph graph;\n"
    "    CUgraphExec graph_exec;\n"
    "    size_t graph_nodes = 0;\n"
    "    CU(\"the step's CUDA graph\", cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);\n"
    "    run_training_step(WARMUP_STEPS);\n"
    "    CU(\"the step's CUDA graph\", cuStreamEndCapture, stream, &graph);\n"
    "    CU(\"the step's CUDA graph\", cuGraphGetNodes, graph, NULL, &graph_nodes);\n"
    "    CU(\"the step's CUDA graph\", cuGraphInstantiateWithFlags, &graph_exec, graph, 0);\n"
    "#endif\n"
    "\n"
    "    CUevent *mark = malloc((size_t)(steps + 1) * sizeof *mark);  /* mark[i]: before timed step i */\n"
    "    float *ms = malloc((size_t)steps * sizeof *ms);\n"
    "    if (!mark || !ms) {\n"
    "        fprintf(stderr, \"repro: error: out of host memory for %ld steps\\n\", steps);\n"
    "        return 1;\n"
    "    }\n"
    "    for (long i = 0; i <= steps; i++) CU(\"the timing events\", cuEventCreate, &mark[i], CU_EVENT_DEFAULT);\n"
    "    for (long i = 0; i < steps; i++) {\n"
    "        training_step = WARMUP_STEPS + i;\n"
    "        CU(\"the timing events\", cuEventRecord, mark[i], stream);\n"
    "#if CAPTURE\n"
    "        CU(\"the step's CUDA graph\", cuGraphLaunch, graph_exec, stream);\n"
    "#else\n"
    "        run_training_step(training_step);\n"
    "#endif\n"
    "    }\n"
    "    CU(\"the timing events\", cuEventRecord, mark[steps], stream);\n"
    "    training_step = -1;\n"
    "    CU(\"the timed steps\", cuEventSynchronize, mark[steps]);\n"
    "    for (long i = 0; i < steps; i++)\n"
    "        CU(\"the timing events\", cuEventElapsedTime, &ms[i], mark[i], mark[i + 1]);\n"
    "    qsort(ms, (size_t)steps, sizeof *ms, by_value);\n"
    "\n"
    "    printf(\"%s: \" SOURCE_NAME \" (model \" MODEL_NAME \"), mode \" MODE \", \" PRECISION\n"
    "           \", batch %d, accumulate %d\\n\", name, BATCH, ACCUMULATE);\n"
    "    printf(\"per training step: %d kernel launches and %d library GEMMs (%d of them cuBLASLt matmuls)\\n\",\n"
    "           LAUNCHES_PER_STEP, GEMMS_PER_STEP, LT_GEMMS_PER_STEP);\n"
    "#if CAPTURE\n"
    "    printf(\"each timed step replayed as one CUDA graph of %zu nodes (captured after the warm-up)\\n\",\n"
    "           graph_nodes);\n"
    "#endif\n"
    "    printf(\"ms per step over %ld steps after %d warm-up: median %.4f, p10 %.4f, p90 %.4f\\n\", steps,\n"
    "           WARMUP_STEPS, quantile(ms, (int)steps, 0.5), quantile(ms, (int)steps, 0.1),\n"
    "           quantile(ms, (int)steps, 0.9));\n"
    "    printf(\"arena %.2f MiB; not replayed: the data pipeline (shuffle, batch gathers, loss totals):\\n\"\n"
    "           \"the inputs were filled once with random values and every step reads that batch\\n\",\n"
    "           (double)ARENA_BYTES / (1 << 20));\n"
    "\n"
    "    for (long i = 0; i <= steps; i++) CU(\"the timing events\", cuEventDestroy, mark[i]);\n"
    "#if CAPTURE\n"
    "    CU(\"the step's CUDA graph\", cuGraphExecDestroy, graph_exec);\n"
    "    CU(\"the step's CUDA graph\", cuGraphDestroy, graph);\n"
    "#endif\n"
    "    free(mark);\n"
    "    free(ms);\n"
    "    gemm_close();\n"
    "    CU(\"the arena\", cuMemFree, arena);\n"
    "    for (int i = 0; i < NUM_MODULES; i++) CU(module_file[i], cuModuleUnload, module[i]);\n"
    "    CU(\"the stream\", cuStreamDestroy, stream);\n"
    "    CU(\"device 0\", cuDevicePrimaryCtxRelease, dev);\n"
    "    return 0;\n"
    "}\n";

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
    fputs(main_code, r->out);
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
    codegen_sanitise(r.model, sizeof r.model, plan->p->model_name, "model");
    plan_layout(plan, r.symvals, true, &r.layout);
    write_header(&r);
    write_constants(&r);
    write_kernels(&r);
    write_arena(&r);
    write_fills(&r);
    write_gemms(&r);
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
