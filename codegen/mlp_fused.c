/* mlp_fused.c: max-autotune's fully fused MLP passes (plan.h, "fully fused MLP passes").
 *
 * A narrow MLP's forward pass is a run of small GEMMs, one launch each, every one
 * reading back from memory what the one before has just written. The fused kernel runs
 * the whole run in one launch, in the manner of tiny-cuda-nn's fully fused MLP:
 *   - each warp owns 16 rows of the batch for the whole pass. A layer's output stays in
 *     the warp's registers: the accumulator fragments of mma.m16n8k16, rounded to the
 *     operands' type as the store rounds them, are exactly the A fragments of the next
 *     layer's product (two 16 x 8 output tiles make one 16 x 16 input slice), so no
 *     activation goes through memory on its way to the next layer;
 *   - each layer's weights ([n, k], at most 128 x 128) are copied whole into shared
 *     memory by cp.async and read as B fragments by every warp of the block. The copy
 *     starts as soon as the layer before has done its products, so that it lands while
 *     that layer's epilogue (bias, relu, the stores) runs;
 *   - the first layer's input may be wide (784 pixels): it streams through two
 *     shared-memory stages, k 32 at a time, as in the generated GEMMs (gemm_tc.c);
 *   - every layer's output is still stored, rounded once, bias and relu applied: the
 *     backward pass reads them. What the kernel saves is a launch per layer and the
 *     activations' reads.
 * Kernels depend on the layers' widths, epilogues and types and on the rows per block,
 * never on the batch (m is a parameter), and the comment lists the runs they serve.
 */
#include "codegen_impl.h"

#include <stdlib.h>
#include <string.h>

const int plan_mlp_rows[PLAN_MLP_SHAPES] = { 16, 32, 64 };

enum { STAGE_K = 32 };      /* the first layer's k per stage */

unsigned plan_mlp_grid(int shape, int64_t m)
{
    CGC_ASSERT(shape >= 0 && shape < PLAN_MLP_SHAPES);
    int64_t blocks = (m + plan_mlp_rows[shape] - 1) / plan_mlp_rows[shape];
    if (blocks > 0x7fffffff) blocks = 0x7fffffff;
    return blocks < 1 ? 1u : (unsigned)blocks;
}

int plan_mlp_at(const Plan *plan, PlanGraphId gid, int i)
{
    for (int c = 0; c < plan->nmlps; c++)
        if (plan->mlps[c].graph == gid && plan->mlps[c].first == i) return c;
    return -1;
}

/* ---- which runs qualify ---- */

static int round_up(int64_t n, int to) { return (int)((n + to - 1) / to * to); }

/* Step S as one layer of a run: a generable GEMM x @ W^T of concrete width at most
 * PLAN_MLP_MAX_WIDTH (and concrete k). */
static bool layer_ok(const PlanStep *s)
{
    if (s->kind != STEP_GEMM || !plan_gemm_generable(&s->gemm)) return false;
    const PlanGemm *g = &s->gemm;
    return !g->trans_a && g->trans_b && !IR_DIM_IS_SYM(g->n) && !IR_DIM_IS_SYM(g->k) &&
           g->n >= 1 && g->n <= PLAN_MLP_MAX_WIDTH && g->k >= 1;
}

/* Whether NEXT continues a run whose last layer is PREV: it reads PREV's output, which
 * is of the operands' type, for the same rows. */
static bool follows(const PlanGemm *prev, const PlanGemm *next)
{
    return next->a == prev->c && prev->c_type == prev->a_type && next->a_type == prev->a_type &&
           next->m == prev->m && next->k == prev->n;
}

/* ---- what a kernel depends on ---- */

typedef struct MlpLayer {
    int64_t n, k;
    DType c_type, bias_type;
    GemmEpilogue epilogue;
} MlpLayer;

typedef struct MlpSpec {
    DType in_type;
    int nlayers;
    MlpLayer layer[PLAN_MLP_MAX_LAYERS];
    int shape;
} MlpSpec;

static MlpSpec spec_of(const PlanGraph *pg, int first, int nlayers, int shape)
{
    MlpSpec s = { .in_type = pg->steps[first].gemm.a_type, .nlayers = nlayers, .shape = shape };
    for (int j = 0; j < nlayers; j++) {
        const PlanGemm *g = &pg->steps[first + j].gemm;
        bool epi = g->epilogue != GEMM_EPI_NONE;
        s.layer[j] = (MlpLayer){ .n = g->n, .k = g->k, .c_type = g->c_type,
                                 .bias_type = epi ? g->bias_type : g->c_type,
                                 .epilogue = g->epilogue };
    }
    return s;
}

static bool spec_eq(const MlpSpec *x, const MlpSpec *y)
{
    if (x->in_type != y->in_type || x->nlayers != y->nlayers || x->shape != y->shape) return false;
    for (int j = 0; j < x->nlayers; j++) {
        const MlpLayer *a = &x->layer[j], *b = &y->layer[j];
        if (a->n != b->n || a->k != b->k || a->c_type != b->c_type ||
            a->bias_type != b->bias_type || a->epilogue != b->epilogue)
            return false;
    }
    return true;
}

/* "mlp_fused_bf16_784_128r_128r_128r_10_rows64": the operands' type, the first k, each
 * layer's width (r: bias + relu; b: bias), a type where it is not the operands', the
 * rows per block. */
static void spec_name(const MlpSpec *s, char *buf, size_t len)
{
    StrBuf o = { 0 };
    sb_printf(&o, "mlp_fused_%s_%lld", ir_dtype_name(s->in_type), (long long)s->layer[0].k);
    for (int j = 0; j < s->nlayers; j++) {
        const MlpLayer *l = &s->layer[j];
        sb_printf(&o, "_%lld%s", (long long)l->n,
                  l->epilogue == GEMM_EPI_RELU_BIAS ? "r" : l->epilogue == GEMM_EPI_BIAS ? "b" : "");
        if (l->epilogue != GEMM_EPI_NONE && l->bias_type != s->in_type)
            sb_printf(&o, "%s", ir_dtype_name(l->bias_type));
        if (l->c_type != s->in_type) sb_printf(&o, "to%s", ir_dtype_name(l->c_type));
    }
    sb_printf(&o, "_rows%d", plan_mlp_rows[s->shape]);
    snprintf(buf, len, "%s", o.s);
    sb_free(&o);
}

/* ---- the kernel's text ---- */

static const char *const IN = "        ";          /* a layer's braces */
static const char *const EPI = "            ";     /* a layer's epilogue, inside them */

/* Layer J's epilogue, inside its braces, on the accumulators acc[NT][4] of the warp's
 * rows r0 and r0 + 8: bias, relu, the store to c_J; and, unless it is the last layer, the
 * packing of the rounded values into the next layer's A fragments x[KS][4]. */
static void render_epilogue(StrBuf *o, const MlpSpec *s, int j)
{
    const MlpLayer *l = &s->layer[j];
    int nt = round_up(l->n, 8) / 8;
    sb_printf(o, "#pragma unroll\n"
                 "%sfor (int j = 0; j < %d; j++)\n"
                 "#pragma unroll\n"
                 "%s    for (int e = 0; e < 4; e++) {\n"
                 "%s        const int col = j * 8 + 2 * t + (e & 1);\n"
                 "%s        const int64_t row = e < 2 ? r0 : r0 + 8;\n"
                 "%s        float v = acc[j][e];\n",
              EPI, nt, EPI, EPI, EPI, EPI);
    bool pad = l->n % 8 != 0;
    if (l->epilogue != GEMM_EPI_NONE)
        sb_printf(o, "%s        v += %scgc_load(bias%d[col]);\n", EPI, pad ? "col >= N ? 0.0f : " : "", j);
    if (l->epilogue == GEMM_EPI_RELU_BIAS) sb_printf(o, "%s        v = v < 0.0f ? 0.0f : v;\n", EPI);
    sb_printf(o, "%s        if (row < m%s) cgc_store(&c%d[row * N + col], v);\n", EPI,
              pad ? " && col < N" : "", j);
    if (j + 1 < s->nlayers)
        sb_printf(o, "%s        acc[j][e] = %sv;   /* the next layer's input */\n", EPI,
                  pad ? "col >= N ? 0.0f : " : "");
    sb_printf(o, "%s    }\n", EPI);
    if (j + 1 == s->nlayers) return;
    int ks = round_up(l->n, 16) / 16;
    const char *bf = s->in_type == DT_BF16 ? "true" : "false";
    sb_printf(o, "%s/* two 16 x 8 output tiles are one 16 x 16 input slice (cgc_mma_16816's layouts) */\n"
                 "#pragma unroll\n"
                 "%sfor (int q = 0; q < %d; q++) {\n"
                 "%s    x[q][0] = cgc_pack2(acc[2 * q][0], acc[2 * q][1], %s);\n"
                 "%s    x[q][1] = cgc_pack2(acc[2 * q][2], acc[2 * q][3], %s);\n",
              EPI, EPI, ks, EPI, bf, EPI, bf);
    if (nt % 2 == 0)
        sb_printf(o, "%s    x[q][2] = cgc_pack2(acc[2 * q + 1][0], acc[2 * q + 1][1], %s);\n"
                     "%s    x[q][3] = cgc_pack2(acc[2 * q + 1][2], acc[2 * q + 1][3], %s);\n",
                  EPI, bf, EPI, bf);
    else    /* an odd number of tiles: the last slice's upper half is padding */
        sb_printf(o, "%s    x[q][2] = 2 * q + 1 < %d ? cgc_pack2(acc[2 * q + 1][0], acc[2 * q + 1][1], %s) : 0u;\n"
                     "%s    x[q][3] = 2 * q + 1 < %d ? cgc_pack2(acc[2 * q + 1][2], acc[2 * q + 1][3], %s) : 0u;\n",
                  EPI, nt, bf, EPI, nt, bf);
    sb_printf(o, "%s}\n", EPI);
}

/* Layer J >= 1's weights, whole, into the shared memory, by cp.async: issued by layer
 * J - 1 once every warp is done with its products (the caller's barrier), before its
 * epilogue; layer J waits for them. */
static void render_weights_load(StrBuf *o, const MlpSpec *s, int j)
{
    const MlpLayer *l = &s->layer[j];
    int np = round_up(l->n, 8), kp = round_up(l->k, 16);
    sb_printf(o, "%s    /* layer %d's weights come in while this layer's epilogue runs */\n"
                 "%s    cgc_tile_load<%d, %d, THREADS>((unsigned short (*)[%d + 8])smem, "
                 "(const unsigned short *)w%d, %lld, %lld, 0, 0);\n"
                 "%s    cgc_cp_async_commit();\n",
              IN, j, IN, np, kp, kp, j, (long long)l->n, (long long)l->k, IN);
}

/* Layer 0: the input streams through two stages of k STAGE_K. */
static void render_first(StrBuf *o, const MlpSpec *s)
{
    const MlpLayer *l = &s->layer[0];
    int np = round_up(l->n, 8);
    sb_printf(o, "%s{   /* layer 0: [m, %lld] -> [m, %lld] */\n", IN, (long long)l->k, (long long)l->n);
    sb_printf(o, "%s    enum { N = %lld, K = %lld, NP = %d, STEPS = (K + BK - 1) / BK };\n", IN,
              (long long)l->n, (long long)l->k, np);
    sb_printf(o, "%s    typedef unsigned short ARow[BK + 8];\n"
                 "%s    ARow *const sa = (ARow *)smem;            /* stage s: the input, rows [s * BM, s * BM + BM) */\n"
                 "%s    ARow *const sw = (ARow *)smem + 2 * BM;   /* stage s: w0, rows [s * NP, s * NP + NP) */\n"
                 "%s    const unsigned short *w16 = (const unsigned short *)w0;\n"
                 "%s    float acc[NP / 8][4] = {};\n"
                 "%s    __syncthreads();   /* the shared memory is free (the last layer of the rows before) */\n"
                 "%s    cgc_tile_load<BM, BK, THREADS>(sa, a16, m, K, m0, 0);\n"
                 "%s    cgc_tile_load<NP, BK, THREADS>(sw, w16, N, K, 0, 0);\n"
                 "%s    cgc_cp_async_commit();\n"
                 "%s    for (int step = 0; step < STEPS; step++) {\n"
                 "%s        const int s = step & 1;\n"
                 "%s        if (step + 1 < STEPS) {   /* the next stage, while this one is used */\n"
                 "%s            cgc_tile_load<BM, BK, THREADS>(sa + (s ^ 1) * BM, a16, m, K, m0, (step + 1) * BK);\n"
                 "%s            cgc_tile_load<NP, BK, THREADS>(sw + (s ^ 1) * NP, w16, N, K, 0, (step + 1) * BK);\n"
                 "%s        }\n"
                 "%s        cgc_cp_async_commit();\n"
                 "%s        cgc_cp_async_wait_prior();   /* this stage has landed */\n"
                 "%s        __syncthreads();\n"
                 "#pragma unroll\n"
                 "%s        for (int ks = 0; ks < BK; ks += 16) {\n"
                 "%s            uint32_t fa[4];   /* lane l gives row l %% 16 of the warp's, at k ks + l / 16 * 8 */\n"
                 "%s            cgc_ldmatrix(fa, 4, &sa[s * BM + warp * 16 + lane %% 16][ks + lane / 16 * 8], false);\n"
                 "%s            /* B's fragments: lanes 0-15 give row (n) l %% 8 of the tile, at k ks + l / 8 * 8 */\n"
                 "#pragma unroll\n"
                 "%s            for (int j = 0; j < NP / 8; j++) {\n"
                 "%s                uint32_t fb[2];\n"
                 "%s                cgc_ldmatrix(fb, 2, &sw[s * NP + j * 8 + lane %% 8][ks + lane / 8 %% 2 * 8], false);\n"
                 "%s                cgc_mma_16816(acc[j], fa, fb, %s);\n"
                 "%s            }\n"
                 "%s        }\n"
                 "%s        __syncthreads();   /* before the next loads overwrite this stage */\n"
                 "%s    }\n",
              IN, IN, IN, IN, IN, IN, IN, IN, IN, IN, IN, IN, IN, IN, IN, IN, IN, IN, IN, IN, IN, IN,
              IN, IN, IN, IN, s->in_type == DT_BF16 ? "true" : "false", IN, IN, IN, IN);
    if (s->nlayers > 1) render_weights_load(o, s, 1);   /* the loop's last barrier frees the stages */
    render_epilogue(o, s, 0);
    sb_printf(o, "%s}\n", IN);
}

/* Layer J >= 1: the weights whole in shared memory (their copy issued by layer J - 1),
 * the input from the registers. */
static void render_layer(StrBuf *o, const MlpSpec *s, int j)
{
    const MlpLayer *l = &s->layer[j];
    int np = round_up(l->n, 8), kp = round_up(l->k, 16);
    sb_printf(o, "%s{   /* layer %d: [m, %lld] -> [m, %lld] */\n", IN, j, (long long)l->k, (long long)l->n);
    sb_printf(o, "%s    enum { N = %lld, K = %lld, NP = %d, KP = %d };\n", IN, (long long)l->n,
              (long long)l->k, np, kp);
    sb_printf(o, "%s    typedef unsigned short WRow[KP + 8];\n"
                 "%s    WRow *sw = (WRow *)smem;   /* w%d, NP x KP: the layer before began the copy */\n"
                 "%s    float acc[NP / 8][4] = {};\n"
                 "%s    cgc_cp_async_wait_all();\n"
                 "%s    __syncthreads();   /* every thread's part of the copy has landed */\n"
                 "#pragma unroll\n"
                 "%s    for (int q = 0; q < KP / 16; q++)\n"
                 "#pragma unroll\n"
                 "%s        for (int j = 0; j < NP / 8; j++) {\n"
                 "%s            uint32_t fb[2];   /* lanes 0-15 give row (n) l %% 8 of the tile, at k q * 16 + l / 8 * 8 */\n"
                 "%s            cgc_ldmatrix(fb, 2, &sw[j * 8 + lane %% 8][q * 16 + lane / 8 %% 2 * 8], false);\n"
                 "%s            cgc_mma_16816(acc[j], x[q], fb, %s);\n"
                 "%s        }\n",
              IN, IN, j, IN, IN, IN, IN, IN, IN, IN, IN,
              s->in_type == DT_BF16 ? "true" : "false", IN);
    if (j + 1 < s->nlayers) {
        sb_printf(o, "%s    __syncthreads();   /* every warp is done with w%d */\n", IN, j);
        render_weights_load(o, s, j + 1);
    }
    render_epilogue(o, s, j);
    sb_printf(o, "%s}\n", IN);
}

/* Halves of static shared memory: the first layer's two stages, or the widest later
 * layer's weights, whichever is larger (they take turns). */
static int smem_halves(const MlpSpec *s, int rows)
{
    int need = 2 * (rows + round_up(s->layer[0].n, 8)) * (STAGE_K + 8);
    for (int j = 1; j < s->nlayers; j++) {
        int w = round_up(s->layer[j].n, 8) * (round_up(s->layer[j].k, 16) + 8);
        if (w > need) need = w;
    }
    return need;
}

static char *render(const MlpSpec *s, const char *name, const char *uses)
{
    int rows = plan_mlp_rows[s->shape], warps = rows / 16, ks_max = 1;
    for (int j = 0; j + 1 < s->nlayers; j++)
        if (round_up(s->layer[j].n, 16) / 16 > ks_max) ks_max = round_up(s->layer[j].n, 16) / 16;
    StrBuf o = { 0 };
    sb_puts(&o, uses);
    sb_printf(&o, " *\n * A fully fused MLP forward pass of %d layers on tensor cores, %s operands:\n",
              s->nlayers, ir_dtype_name(s->in_type));
    for (int j = 0; j < s->nlayers; j++) {
        const MlpLayer *l = &s->layer[j];
        char input[16];
        snprintf(input, sizeof input, j ? "c%d" : "a", j - 1);
        sb_printf(&o, " *   c%d [m, %lld] %s = ", j, (long long)l->n, ir_dtype_name(l->c_type));
        if (l->epilogue == GEMM_EPI_NONE)
            sb_printf(&o, "%s @ w%d^T\n", input, j);
        else
            sb_printf(&o, "%s%s @ w%d^T + bias%d [%lld] %s%s\n",
                      l->epilogue == GEMM_EPI_RELU_BIAS ? "relu(" : "", input, j, j,
                      (long long)l->n, ir_dtype_name(l->bias_type),
                      l->epilogue == GEMM_EPI_RELU_BIAS ? ")" : "");
    }
    sb_printf(&o, " * A block per %d rows (grid-stride), a warp per 16 of them: its activations stay in\n"
                  " * its registers from layer to layer; each layer's weights are copied whole into\n"
                  " * shared memory, while the layer before runs its epilogue; layer 0's input streams\n"
                  " * through two stages of k %d. Every output is stored (the backward pass reads\n"
                  " * them), rounded once. */\n",
              rows, STAGE_K);
    sb_printf(&o, "extern \"C\" __global__ void __launch_bounds__(%d)\n%s(\n", 32 * warps, name);
    for (int j = 0; j < s->nlayers; j++)
        sb_printf(&o, "    %s__restrict__ c%d,\n", cuda_storage_ctype(s->layer[j].c_type, false), j);
    sb_printf(&o, "    %s__restrict__ a,\n", cuda_storage_ctype(s->in_type, true));
    for (int j = 0; j < s->nlayers; j++)
        sb_printf(&o, "    %s__restrict__ w%d,\n", cuda_storage_ctype(s->in_type, true), j);
    for (int j = 0; j < s->nlayers; j++)
        sb_printf(&o, "    %s__restrict__ bias%d,\n", cuda_storage_ctype(s->layer[j].bias_type, true), j);
    sb_puts(&o, "    int64_t m)\n{\n");
    sb_printf(&o, "    enum { BM = %d, THREADS = %d, BK = %d };\n", rows, 32 * warps, STAGE_K);
    sb_printf(&o, "    __shared__ __align__(16) unsigned short smem[%d];\n", smem_halves(s, rows));
    sb_puts(&o, "    const unsigned short *a16 = (const unsigned short *)a;\n"
                "    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;\n"
                "    for (int64_t m0 = (int64_t)blockIdx.x * BM; m0 < m; m0 += (int64_t)gridDim.x * BM) {\n"
                "        const int64_t r0 = m0 + warp * 16 + g;   /* this thread's rows: r0 and r0 + 8 */\n");
    sb_printf(&o, "        uint32_t x[%d][4];   /* the warp's 16 rows of the next layer's input, as A fragments */\n",
              ks_max);
    render_first(&o, s);
    for (int j = 1; j < s->nlayers; j++) render_layer(&o, s, j);
    sb_puts(&o, "    }\n}\n");
    return o.s;
}

/* ---- adding them to a plan ---- */

typedef struct MlpKernel {
    MlpSpec spec;
    KernelUses uses;
    int kernel;
} MlpKernel;

static void set_params(PlanKernel *k, const MlpSpec *s)
{
    int n = 0;
    for (int j = 0; j < s->nlayers; j++) k->param_ctype[n++] = cuda_storage_ctype(s->layer[j].c_type, false);
    k->param_ctype[n++] = cuda_storage_ctype(s->in_type, true);
    for (int j = 0; j < s->nlayers; j++) k->param_ctype[n++] = cuda_storage_ctype(s->in_type, true);
    for (int j = 0; j < s->nlayers; j++) k->param_ctype[n++] = cuda_storage_ctype(s->layer[j].bias_type, true);
    for (int i = 0; i < n; i++) k->param[i] = PP_PTR;
    k->param[n] = PP_I64;
    k->param_ctype[n++] = "int64_t";
    k->nparams = n;
}

/* Whether step NEXT's weights or bias is the output of one of the N steps from FIRST: the
 * fused kernel reads a layer's weights whole while the outputs before it are still being
 * written, block by block, so such a step cannot join the run. (No layer of today's
 * language is such: a weight that is an activation has the batch for a dimension, and
 * layer_ok wants concrete sizes. This keeps it so.) */
static bool reads_run_output(const PlanStep *first, int n, const PlanGemm *next)
{
    for (int j = 0; j < n; j++)
        if (next->b == first[j].gemm.c || (next->bias >= 0 && next->bias == first[j].gemm.c))
            return true;
    return false;
}

/* The length of the run that starts at step I of PG (0 or 1: none). */
static int run_length(const PlanGraph *pg, int i)
{
    if (!layer_ok(&pg->steps[i])) return 0;
    int n = 1;
    while (n < PLAN_MLP_MAX_LAYERS && i + n < pg->nsteps && layer_ok(&pg->steps[i + n]) &&
           follows(&pg->steps[i + n - 1].gemm, &pg->steps[i + n].gemm) &&
           !reads_run_output(&pg->steps[i], n, &pg->steps[i + n].gemm))
        n++;
    return n;
}

void plan_add_mlp_kernels(Plan *plan)
{
    MlpKernel *mk = NULL;
    int n = 0, cap = 0;
    for (int gid = PG_TRAIN; gid <= PG_TRAIN_MICRO; gid++) {   /* the graphs tuned */
        const PlanGraph *pg = &plan->graph[gid];
        for (int i = 0; i < pg->nsteps; i++) {
            int len = run_length(pg, i);
            if (len < 2) continue;
            plan->mlps = xrealloc(plan->mlps, (size_t)(plan->nmlps + 1) * sizeof *plan->mlps);
            PlanMlp *run = &plan->mlps[plan->nmlps++];
            *run = (PlanMlp){ .graph = (PlanGraphId)gid, .first = i, .nlayers = len };
            for (int shape = 0; shape < PLAN_MLP_SHAPES; shape++) {
                MlpSpec s = spec_of(pg, i, len, shape);
                int k = 0;
                while (k < n && !spec_eq(&mk[k].spec, &s)) k++;
                if (k == n) {
                    if (n == cap) {
                        cap = cap ? 2 * cap : 8;
                        mk = xrealloc(mk, (size_t)cap * sizeof *mk);
                    }
                    mk[n++] = (MlpKernel){ .spec = s, .kernel = plan->nkernels + k };
                }
                run->kernel[shape] = mk[k].kernel;
                const PlanStep *a = &pg->steps[i], *z = &pg->steps[i + len - 1];
                kernel_uses_add(&mk[k].uses, "%s lines %d-%d: %s .. %s (%s graph)", plan->source_name,
                                a->loc.line, z->loc.line, a->what, z->what, codegen_graph_label[gid]);
            }
            i += len - 1;
        }
    }
    plan->kernels = xrealloc(plan->kernels, (size_t)(plan->nkernels + n + 1) * sizeof *plan->kernels);
    for (int k = 0; k < n; k++) {
        PlanKernel *pk = &plan->kernels[plan->nkernels++];
        char name[256];
        memset(pk, 0, sizeof *pk);
        spec_name(&mk[k].spec, name, sizeof name);
        pk->name = xstrdup(name);
        pk->block = 2 * plan_mlp_rows[mk[k].spec.shape];    /* a warp per 16 rows */
        set_params(pk, &mk[k].spec);
        StrBuf uses = { 0 };
        kernel_uses_comment(&uses, &mk[k].uses, "\n");
        pk->source = render(&mk[k].spec, name, uses.s);
        sb_free(&uses);
        sb_free(&mk[k].uses.lines);
    }
    free(mk);
}
