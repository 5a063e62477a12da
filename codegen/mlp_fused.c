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
 *   - each layer's weights ([n, k] here, at most 128 x 128) are copied whole into shared
 *     memory by cp.async and read as B fragments by every warp of the block. The copy
 *     starts as soon as the layer before has done its products, so that it lands while
 *     that layer's epilogue (bias, relu, the stores) runs;
 *   - the first layer's input may be wide (784 pixels): it streams through two
 *     shared-memory stages, k 32 at a time, as in the generated GEMMs (gemm_tc.c);
 *   - every layer's output is still stored, rounded once, bias and relu applied: the
 *     backward pass reads them. What the kernel saves is a launch per layer and the
 *     activations' reads.
 * The backward pass's input gradients are such a chain too, read the other way: layer
 * j's input is the gradient of the forward layer's activation, g(c_{j-1}, h) (relu_grad:
 * h > 0 ? c_{j-1} : 0; tanh, sigmoid, gelu and silu's too), h the activation's output
 * or input, computed in registers by the expression the plan's own kernels use
 * (cuda_elementwise_expr); its weights are used as stored, [k, n], so their copy is read
 * by ldmatrix .trans. The chain's layers are not consecutive steps: between two of them
 * the plan runs the gradient g (fused with the bias gradient's sum) and the weight
 * gradient's GEMM. Those still run where they are; the kernel runs every layer at the
 * first one's step, which backward_run checks is the same computation (can_move), and
 * memplan keeps its outputs live from there.
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
        if (plan->mlps[c].graph == gid && plan->mlps[c].step[0] == i) return c;
    return -1;
}

int plan_mlp_layer_of(const Plan *plan, PlanGraphId gid, int i)
{
    for (int c = 0; c < plan->nmlps; c++)
        for (int j = 0; j < plan->mlps[c].nlayers; j++)
            if (plan->mlps[c].graph == gid && plan->mlps[c].step[j] == i) return c;
    return -1;
}

int plan_mlp_args(const Plan *plan, int r, int *buf)
{
    CGC_ASSERT(r >= 0 && r < plan->nmlps);
    const PlanMlp *run = &plan->mlps[r];
    const PlanStep *steps = plan->graph[run->graph].steps;
    int L = run->nlayers;
    buf[L] = steps[run->step[0]].gemm.a;
    for (int j = 0; j < L; j++) {
        const PlanGemm *g = &steps[run->step[j]].gemm;
        buf[j] = g->c;
        buf[L + 1 + j] = g->b;
        buf[2 * L + 1 + j] = run->backward ? run->act[j] : g->bias;
    }
    return 3 * L + 1;
}

/* ---- which runs qualify ---- */

static int round_up(int64_t n, int to) { return (int)((n + to - 1) / to * to); }

/* Step S as one layer of a run: a generable GEMM of concrete width n at most
 * PLAN_MLP_MAX_WIDTH and concrete k, A untransposed, its rows one dim (follows compares
 * them); forward x @ W^T, backward x @ W without an epilogue. */
static bool layer_ok(const PlanStep *s, bool backward)
{
    if (s->kind != STEP_GEMM || !plan_gemm_generable(&s->gemm)) return false;
    const PlanGemm *g = &s->gemm;
    return !g->trans_a && g->m_lead.rank == 0 && g->k_lead.rank == 0 && g->trans_b == !backward && (!backward || g->epilogue == GEMM_EPI_NONE) &&
           !IR_DIM_IS_SYM(g->n) && !IR_DIM_IS_SYM(g->k) && g->n >= 1 && g->n <= PLAN_MLP_MAX_WIDTH &&
           g->k >= 1;
}

/* Whether NEXT can take its input from PREV's output, which is of the operands' type,
 * for the same rows. */
static bool follows(const PlanGemm *prev, const PlanGemm *next)
{
    return prev->c_type == prev->a_type && next->a_type == prev->a_type && next->m == prev->m &&
           next->k == prev->n;
}

/* ---- forward runs ---- */

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

/* The forward run that starts at step I of PG, into RUN; returns its layers (0 or 1:
 * none). */
static int forward_run(const PlanGraph *pg, int i, PlanMlp *run)
{
    if (!layer_ok(&pg->steps[i], false)) return 0;
    int n = 1;
    while (n < PLAN_MLP_MAX_LAYERS && i + n < pg->nsteps && layer_ok(&pg->steps[i + n], false) &&
           pg->steps[i + n].gemm.a == pg->steps[i + n - 1].gemm.c &&
           follows(&pg->steps[i + n - 1].gemm, &pg->steps[i + n].gemm) &&
           !reads_run_output(&pg->steps[i], n, &pg->steps[i + n].gemm))
        n++;
    run->nlayers = n;
    for (int j = 0; j < n; j++) run->step[j] = i + j, run->link[j] = run->act[j] = -1;
    return n;
}

/* ---- backward runs ---- */

static bool same(const Plan *plan, int a, int b)
{
    return a >= 0 && b >= 0 && plan_buffer_root(plan, a) == plan_buffer_root(plan, b);
}

/* Whether step S writes buffer B (a launch writes through its kernel's parameters that
 * are not const). */
static bool step_writes(const Plan *plan, const PlanStep *s, int b)
{
    if (s->kind == STEP_GEMM) return same(plan, s->gemm.c, b) || same(plan, s->gemm.aux, b);
    const PlanKernel *k = &plan->kernels[s->launch.kernel];
    for (int a = 0; a < s->launch.nargs; a++)
        if (s->launch.arg[a].kind == ARG_BUFFER && same(plan, s->launch.arg[a].index, b) &&
            plan_param_written(k->param_ctype[a]))
            return true;
    return false;
}

/* Whether step S reads or writes buffer B. */
static bool step_names(const Plan *plan, const PlanStep *s, int b)
{
    if (s->kind == STEP_GEMM)
        return same(plan, s->gemm.a, b) || same(plan, s->gemm.b, b) || same(plan, s->gemm.c, b) ||
               same(plan, s->gemm.bias, b) || same(plan, s->gemm.aux, b);
    for (int a = 0; a < s->launch.nargs; a++)
        if (s->launch.arg[a].kind == ARG_BUFFER && same(plan, s->launch.arg[a].index, b)) return true;
    return false;
}

/* Whether OP is an activation's gradient g(d, act) a backward run can apply in its
 * kernel: a gradient op, elementwise in f32 on d and one activation value
 * (cuda_elementwise_expr's a and b), as the plan's own step computes it. */
static bool link_op(IrOp op)
{
    const IrOpInfo *o = &ir_op_info[op];
    return o->backward_only && o->fuse == IR_FUSE_POINTWISE && o->arity == 2 && o->expr;
}

/* The next layer of a backward run whose last layer is step P of PG: a later GEMM step
 * whose A is the value g(c_P, act) (link_op) that a launch step between them stores (a
 * member of that step's fusion group, its operands read from memory). Sets *LINK (that
 * step), *ACT (the buffer) and *GRAD (g); -1: none. */
static int next_layer(const Plan *plan, const PlanGraph *pg, int p, int *link, int *act, IrOp *grad)
{
    const PlanGemm *prev = &pg->steps[p].gemm;
    const IrGraph *ir = pg->ir;
    for (int l = p + 1; l < pg->nsteps; l++) {
        const PlanStep *ls = &pg->steps[l];
        if (ls->kind != STEP_LAUNCH || ls->group <= 0) continue;
        for (int id = 0; id < ir->nnodes; id++) {
            const IrNode *n = &ir->nodes[id];
            if (n->group != ls->group || !link_op(n->op) || !ir_member_stored(ir, id)) continue;
            /* both operands loaded from memory, as the kernel has them: a member of the
             * group would be used unrounded (fp16 rounds a tiny positive h to 0) */
            if (ir->nodes[n->in[0]].group == ls->group || ir->nodes[n->in[1]].group == ls->group) continue;
            int x = pg->node_buffer[id], y = pg->node_buffer[n->in[1]];
            if (!same(plan, pg->node_buffer[n->in[0]], prev->c) || y < 0 || x < 0 ||
                !ir_shape_equal(&n->shape, &ir->nodes[n->in[0]].shape) ||
                !ir_shape_equal(&n->shape, &ir->nodes[n->in[1]].shape))
                continue;
            for (int s = l + 1; s < pg->nsteps; s++) {
                const PlanGemm *g = &pg->steps[s].gemm;
                if (pg->steps[s].kind == STEP_GEMM && same(plan, g->a, x) && layer_ok(&pg->steps[s], true) &&
                    follows(prev, g) && n->dtype == g->a_type) {
                    *link = l, *act = y, *grad = n->op;
                    return s;
                }
            }
        }
    }
    return -1;
}

/* Whether layer S of a backward run (RUN so far), its input made by step LINK from the
 * run's last output and ACT, can run at the run's first step: no step between them but
 * the run's layers writes what the kernel reads for it (its weights, ACT, the last
 * output) or its input, but LINK, and none names its output. */
static bool can_move(const Plan *plan, const PlanGraph *pg, const PlanMlp *run, int s, int link, int act)
{
    const PlanGemm *g = &pg->steps[s].gemm, *prev = &pg->steps[run->step[run->nlayers - 1]].gemm;
    for (int t = run->step[0] + 1, j = 1; t < s; t++) {
        if (j < run->nlayers && t == run->step[j]) {
            j++;
            continue;
        }
        const PlanStep *ts = &pg->steps[t];
        if (step_writes(plan, ts, g->b) || step_writes(plan, ts, act) || step_names(plan, ts, g->c) ||
            (t != link && (step_writes(plan, ts, prev->c) || step_writes(plan, ts, g->a))))
            return false;
    }
    return true;
}

/* Whether layer S of a backward run (RUN so far), its activation value ACT, shares
 * memory with what the kernel writes while it reads: its weights or ACT an earlier
 * output, its output the run's input, an earlier layer's output, weights or activation
 * value, or its own weights or ACT. (The kernel's parameters are __restrict__, and
 * blocks write while others read. No plan of today's language has such a layer: each is
 * a node of its own.) */
static bool aliases_run(const Plan *plan, const PlanGraph *pg, const PlanMlp *run, int s, int act)
{
    const PlanGemm *g = &pg->steps[s].gemm;
    if (same(plan, g->c, pg->steps[run->step[0]].gemm.a) || same(plan, g->c, g->b) || same(plan, g->c, act))
        return true;
    for (int j = 0; j < run->nlayers; j++) {
        const PlanGemm *l = &pg->steps[run->step[j]].gemm;
        if (same(plan, g->b, l->c) || same(plan, act, l->c) || same(plan, g->c, l->c) ||
            same(plan, g->c, l->b) || same(plan, g->c, run->act[j]))
            return true;
    }
    return false;
}

/* The backward run that starts at step I of PG, into RUN; returns its layers. */
static int backward_run(const Plan *plan, const PlanGraph *pg, int i, PlanMlp *run)
{
    if (!layer_ok(&pg->steps[i], true)) return 0;
    run->nlayers = 1;
    run->step[0] = i;
    run->link[0] = run->act[0] = -1;
    while (run->nlayers < PLAN_MLP_MAX_LAYERS) {
        int link, act;
        IrOp grad;
        int s = next_layer(plan, pg, run->step[run->nlayers - 1], &link, &act, &grad);
        if (s < 0 || !can_move(plan, pg, run, s, link, act) || aliases_run(plan, pg, run, s, act)) break;
        run->step[run->nlayers] = s;
        run->link[run->nlayers] = link;
        run->grad[run->nlayers] = grad;
        run->act[run->nlayers++] = act;
    }
    return run->nlayers;
}

/* ---- what a kernel depends on ---- */

typedef struct MlpLayer {
    int64_t n, k;
    DType c_type;
    DType aux_type;             /* forward: the bias's type; backward: the activation value's */
    GemmEpilogue epilogue;
    IrOp grad;                  /* backward, j >= 1: the gradient that makes its input */
} MlpLayer;

typedef struct MlpSpec {
    bool backward;
    DType in_type;
    int nlayers;
    MlpLayer layer[PLAN_MLP_MAX_LAYERS];
    int shape;
} MlpSpec;

static MlpSpec spec_of(const Plan *plan, const PlanMlp *run, int shape)
{
    const PlanStep *steps = plan->graph[run->graph].steps;
    MlpSpec s = { .backward = run->backward, .in_type = steps[run->step[0]].gemm.a_type,
                  .nlayers = run->nlayers, .shape = shape };
    for (int j = 0; j < run->nlayers; j++) {
        const PlanGemm *g = &steps[run->step[j]].gemm;
        DType aux = g->c_type;
        if (run->act[j] >= 0) aux = plan->buffers[run->act[j]].dtype;
        else if (g->epilogue != GEMM_EPI_NONE) aux = g->bias_type;
        s.layer[j] = (MlpLayer){ .n = g->n, .k = g->k, .c_type = g->c_type, .aux_type = aux,
                                 .epilogue = g->epilogue,
                                 .grad = run->backward && j > 0 ? run->grad[j] : IR_RELU_GRAD };
    }
    return s;
}

static bool spec_eq(const MlpSpec *x, const MlpSpec *y)
{
    if (x->backward != y->backward || x->in_type != y->in_type || x->nlayers != y->nlayers ||
        x->shape != y->shape)
        return false;
    for (int j = 0; j < x->nlayers; j++) {
        const MlpLayer *a = &x->layer[j], *b = &y->layer[j];
        if (a->n != b->n || a->k != b->k || a->c_type != b->c_type ||
            a->aux_type != b->aux_type || a->epilogue != b->epilogue || a->grad != b->grad)
            return false;
    }
    return true;
}

/* "mlp_fused_bf16_784_128r_128r_128r_10_rows64": the operands' type, the first k, each
 * layer's width (r: bias + relu; b: bias), a type where it is not the operands', the
 * rows per block. A backward pass is "mlp_fused_bwd_...", each layer's width followed by
 * its input's gradient where that is not relu's ("_24tanh": tanh_grad), and the
 * activation values' type where it is not the operands'. */
static void spec_name(const MlpSpec *s, char *buf, size_t len)
{
    StrBuf o = { 0 };
    sb_printf(&o, "mlp_fused_%s%s_%lld", s->backward ? "bwd_" : "", ir_dtype_name(s->in_type),
              (long long)s->layer[0].k);
    for (int j = 0; j < s->nlayers; j++) {
        const MlpLayer *l = &s->layer[j];
        sb_printf(&o, "_%lld%s", (long long)l->n,
                  l->epilogue == GEMM_EPI_RELU_BIAS ? "r" : l->epilogue == GEMM_EPI_BIAS ? "b" : "");
        if (s->backward && j > 0 && l->grad != IR_RELU_GRAD) {
            const char *g = ir_op_name(l->grad);    /* "tanh_grad" */
            sb_printf(&o, "%.*s", (int)(strlen(g) - strlen("_grad")), g);
        }
        bool aux = s->backward ? j > 0 : l->epilogue != GEMM_EPI_NONE;
        if (aux && l->aux_type != s->in_type)
            sb_printf(&o, "%s%s", s->backward ? "act" : "", ir_dtype_name(l->aux_type));
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
 * packing of the rounded values (backward: g_{J+1}(them, act_{J+1})) into the next
 * layer's A fragments x[KS][4]. */
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
    if (j + 1 < s->nlayers && s->backward) {   /* cuda_elementwise_expr, as the step's kernel */
        IrOp grad = s->layer[j + 1].grad;
        StrBuf g = { 0 };
        fused_substitute(&g, cuda_elementwise_expr(grad), "", "d", "h", "");
        sb_printf(o, "%s        /* the next layer's input: %s(c%d as stored, act%d), as the plan's own step makes it */\n"
                     "%s        const bool in = row < m%s;\n"
                     "%s        const float d = %s(v), h = in ? cgc_load(act%d[row * N + col]) : 0.0f;\n"
                     "%s        acc[j][e] = in ? (%s) : 0.0f;\n",
                  EPI, ir_op_name(grad), j, j + 1, EPI, pad ? " && col < N" : "", EPI,
                  fused_rounding(s->in_type), j + 1, EPI, g.s);
        sb_free(&g);
    } else if (j + 1 < s->nlayers) {
        sb_printf(o, "%s        acc[j][e] = %sv;   /* the next layer's input */\n", EPI,
                  pad ? "col >= N ? 0.0f : " : "");
    }
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

/* Layer J >= 1's weights, whole, into the shared memory as they are stored ([n, k]
 * forward, [k, n] backward), by cp.async: issued by layer J - 1 once every warp is done
 * with its products (the caller's barrier), before its epilogue; layer J waits for
 * them. */
static void render_weights_load(StrBuf *o, const MlpSpec *s, int j)
{
    const MlpLayer *l = &s->layer[j];
    int np = round_up(l->n, 8), kp = round_up(l->k, 16);
    int rows = s->backward ? kp : np, cols = s->backward ? np : kp;   /* as W is stored */
    sb_printf(o, "%s    /* layer %d's weights come in while this layer's epilogue runs */\n"
                 "%s    cgc_tile_load<%d, %d, THREADS>((unsigned short (*)[%d + 8])smem, "
                 "(const unsigned short *)w%d, %lld, %lld, 0, 0);\n"
                 "%s    cgc_cp_async_commit();\n",
              IN, j, IN, rows, cols, cols, j, (long long)(s->backward ? l->k : l->n),
              (long long)(s->backward ? l->n : l->k), IN);
}

/* Layer 0: the input streams through two stages of k STAGE_K, and so do its weights:
 * rows of n, k along them (forward), or rows of k, n along them (backward), as stored. */
static void render_first(StrBuf *o, const MlpSpec *s)
{
    const MlpLayer *l = &s->layer[0];
    int np = round_up(l->n, 8);
    bool bwd = s->backward;
    sb_printf(o, "%s{   /* layer 0: [m, %lld] -> [m, %lld] */\n", IN, (long long)l->k, (long long)l->n);
    sb_printf(o, "%s    enum { N = %lld, K = %lld, NP = %d, STEPS = (K + BK - 1) / BK };\n", IN,
              (long long)l->n, (long long)l->k, np);
    sb_printf(o, "%s    typedef unsigned short ARow[BK + 8];\n"
                 "%s    typedef unsigned short WRow[%s + 8];\n"
                 "%s    ARow *const sa = (ARow *)smem;            /* stage s: the input, rows [s * BM, s * BM + BM) */\n"
                 "%s    WRow *const sw = (WRow *)(sa + 2 * BM);   /* stage s: w0, rows [s * %s, s * %s + %s) */\n"
                 "%s    const unsigned short *w16 = (const unsigned short *)w0;\n"
                 "%s    float acc[NP / 8][4] = {};\n"
                 "%s    __syncthreads();   /* the shared memory is free (the last layer of the rows before) */\n"
                 "%s    cgc_tile_load<BM, BK, THREADS>(sa, a16, m, K, m0, 0);\n",
              IN, IN, bwd ? "NP" : "BK", IN, IN, bwd ? "BK" : "NP", bwd ? "BK" : "NP", bwd ? "BK" : "NP",
              IN, IN, IN, IN);
    sb_printf(o, bwd ? "%s    cgc_tile_load<BK, NP, THREADS>(sw, w16, K, N, 0, 0);\n"
                     : "%s    cgc_tile_load<NP, BK, THREADS>(sw, w16, N, K, 0, 0);\n", IN);
    sb_printf(o, "%s    cgc_cp_async_commit();\n"
                 "%s    for (int step = 0; step < STEPS; step++) {\n"
                 "%s        const int s = step & 1;\n"
                 "%s        if (step + 1 < STEPS) {   /* the next stage, while this one is used */\n"
                 "%s            cgc_tile_load<BM, BK, THREADS>(sa + (s ^ 1) * BM, a16, m, K, m0, (step + 1) * BK);\n",
              IN, IN, IN, IN, IN);
    sb_printf(o, bwd ? "%s            cgc_tile_load<BK, NP, THREADS>(sw + (s ^ 1) * BK, w16, K, N, (step + 1) * BK, 0);\n"
                     : "%s            cgc_tile_load<NP, BK, THREADS>(sw + (s ^ 1) * NP, w16, N, K, 0, (step + 1) * BK);\n",
              IN);
    sb_printf(o, "%s        }\n"
                 "%s        cgc_cp_async_commit();\n"
                 "%s        cgc_cp_async_wait_prior();   /* this stage has landed */\n"
                 "%s        __syncthreads();\n"
                 "#pragma unroll\n"
                 "%s        for (int ks = 0; ks < BK; ks += 16) {\n"
                 "%s            uint32_t fa[4];   /* lane l gives row l %% 16 of the warp's, at k ks + l / 16 * 8 */\n"
                 "%s            cgc_ldmatrix(fa, 4, &sa[s * BM + warp * 16 + lane %% 16][ks + lane / 16 * 8], false);\n",
              IN, IN, IN, IN, IN, IN, IN);
    if (bwd)
        sb_printf(o, "%s            /* B's fragments, transposed: lane l gives k row ks + l %% 16 of the stage, at n j * 8 */\n", IN);
    else
        sb_printf(o, "%s            /* B's fragments: lanes 0-15 give row (n) l %% 8 of the tile, at k ks + l / 8 * 8 */\n", IN);
    sb_printf(o, "#pragma unroll\n"
                 "%s            for (int j = 0; j < NP / 8; j++) {\n"
                 "%s                uint32_t fb[2];\n", IN, IN);
    if (bwd)
        sb_printf(o, "%s                cgc_ldmatrix(fb, 2, &sw[s * BK + ks + lane %% 16][j * 8], true);\n", IN);
    else
        sb_printf(o, "%s                cgc_ldmatrix(fb, 2, &sw[s * NP + j * 8 + lane %% 8][ks + lane / 8 %% 2 * 8], false);\n", IN);
    sb_printf(o, "%s                cgc_mma_16816(acc[j], fa, fb, %s);\n"
                 "%s            }\n"
                 "%s        }\n"
                 "%s        __syncthreads();   /* before the next loads overwrite this stage */\n"
                 "%s    }\n",
              IN, s->in_type == DT_BF16 ? "true" : "false", IN, IN, IN, IN);
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
    bool bwd = s->backward;
    sb_printf(o, "%s    typedef unsigned short WRow[%s + 8];\n"
                 "%s    WRow *sw = (WRow *)smem;   /* w%d, %s: the layer before began the copy */\n"
                 "%s    float acc[NP / 8][4] = {};\n"
                 "%s    cgc_cp_async_wait_all();\n"
                 "%s    __syncthreads();   /* every thread's part of the copy has landed */\n"
                 "#pragma unroll\n"
                 "%s    for (int q = 0; q < KP / 16; q++)\n"
                 "#pragma unroll\n"
                 "%s        for (int j = 0; j < NP / 8; j++) {\n",
              IN, bwd ? "NP" : "KP", IN, j, bwd ? "KP x NP" : "NP x KP", IN, IN, IN, IN, IN);
    if (bwd)
        sb_printf(o, "%s            uint32_t fb[2];   /* transposed: lane l gives k row q * 16 + l %% 16, at n j * 8 */\n"
                     "%s            cgc_ldmatrix(fb, 2, &sw[q * 16 + lane %% 16][j * 8], true);\n", IN, IN);
    else
        sb_printf(o, "%s            uint32_t fb[2];   /* lanes 0-15 give row (n) l %% 8 of the tile, at k q * 16 + l / 8 * 8 */\n"
                     "%s            cgc_ldmatrix(fb, 2, &sw[j * 8 + lane %% 8][q * 16 + lane / 8 %% 2 * 8], false);\n", IN, IN);
    sb_printf(o, "%s            cgc_mma_16816(acc[j], x[q], fb, %s);\n"
                 "%s        }\n",
              IN, s->in_type == DT_BF16 ? "true" : "false", IN);
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
    int np = round_up(s->layer[0].n, 8);
    int need = 2 * rows * (STAGE_K + 8) + (s->backward ? 2 * STAGE_K * (np + 8) : 2 * np * (STAGE_K + 8));
    for (int j = 1; j < s->nlayers; j++) {
        int n = round_up(s->layer[j].n, 8), k = round_up(s->layer[j].k, 16);
        int w = s->backward ? k * (n + 8) : n * (k + 8);
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
    sb_printf(&o, " *\n * A fully fused MLP %s pass of %d layers on tensor cores, %s operands:\n",
              s->backward ? "backward" : "forward", s->nlayers, ir_dtype_name(s->in_type));
    for (int j = 0; j < s->nlayers; j++) {
        const MlpLayer *l = &s->layer[j];
        char input[64];
        snprintf(input, sizeof input, j ? "c%d" : "a", j - 1);
        sb_printf(&o, " *   c%d [m, %lld] %s = ", j, (long long)l->n, ir_dtype_name(l->c_type));
        if (s->backward && j > 0)
            sb_printf(&o, "%s(c%d, act%d %s) @ w%d\n", ir_op_name(l->grad), j - 1, j,
                      ir_dtype_name(l->aux_type), j);
        else if (s->backward)
            sb_printf(&o, "a @ w0\n");
        else if (l->epilogue == GEMM_EPI_NONE)
            sb_printf(&o, "%s @ w%d^T\n", input, j);
        else
            sb_printf(&o, "%s%s @ w%d^T + bias%d [%lld] %s%s\n",
                      l->epilogue == GEMM_EPI_RELU_BIAS ? "relu(" : "", input, j, j,
                      (long long)l->n, ir_dtype_name(l->aux_type),
                      l->epilogue == GEMM_EPI_RELU_BIAS ? ")" : "");
    }
    if (s->backward)
        sb_puts(&o, " * the input gradients of a chain of layers: each next input is the gradient of the\n"
                    " * layer's activation (relu_grad(d, y) = y > 0 ? d : 0, ...) of c as stored, the\n"
                    " * same bits as the plan's own steps, which still compute it (with the bias\n"
                    " * gradients) from the stored c_j. act0 is unused (0).\n");
    sb_printf(&o, " * A block per %d rows (grid-stride), a warp per 16 of them: its activations stay in\n"
                  " * its registers from layer to layer; each layer's weights are copied whole into\n"
                  " * shared memory, while the layer before runs its epilogue; layer 0's input streams\n"
                  " * through two stages of k %d. Every output is stored, rounded once: %s\n"
                  " * read them. */\n",
              rows, STAGE_K, s->backward ? "the plan's later steps" : "the backward pass's steps");
    sb_printf(&o, "extern \"C\" __global__ void __launch_bounds__(%d)\n%s(\n", 32 * warps, name);
    for (int j = 0; j < s->nlayers; j++)
        sb_printf(&o, "    %s__restrict__ c%d,\n", cuda_storage_ctype(s->layer[j].c_type, false), j);
    sb_printf(&o, "    %s__restrict__ a,\n", cuda_storage_ctype(s->in_type, true));
    for (int j = 0; j < s->nlayers; j++)
        sb_printf(&o, "    %s__restrict__ w%d,\n", cuda_storage_ctype(s->in_type, true), j);
    for (int j = 0; j < s->nlayers; j++)
        sb_printf(&o, "    %s__restrict__ %s%d,\n", cuda_storage_ctype(s->layer[j].aux_type, true),
                  s->backward ? "act" : "bias", j);
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
    plan_kernel_params(k, PLAN_MAX_PARAMS);
    int n = 0;
    for (int j = 0; j < s->nlayers; j++) k->param_ctype[n++] = cuda_storage_ctype(s->layer[j].c_type, false);
    k->param_ctype[n++] = cuda_storage_ctype(s->in_type, true);
    for (int j = 0; j < s->nlayers; j++) k->param_ctype[n++] = cuda_storage_ctype(s->in_type, true);
    for (int j = 0; j < s->nlayers; j++) k->param_ctype[n++] = cuda_storage_ctype(s->layer[j].aux_type, true);
    for (int i = 0; i < n; i++) {
        k->param[i] = PP_PTR;
        k->param_restrict[i] = true;
    }
    k->param[n] = PP_I64;
    k->param_ctype[n++] = "int64_t";
    k->nparams = n;
}

void plan_add_mlp_kernels(Plan *plan)
{
    MlpKernel *mk = NULL;
    int n = 0, cap = 0;
    for (int gid = PG_TRAIN; gid <= PG_TRAIN_MICRO; gid++) {   /* the graphs tuned */
        const PlanGraph *pg = &plan->graph[gid];
        for (int i = 0; i < pg->nsteps; i++) {
            PlanMlp run = { .graph = (PlanGraphId)gid };
            if (plan_mlp_layer_of(plan, (PlanGraphId)gid, i) >= 0) continue;   /* a later layer */
            if (forward_run(pg, i, &run) < 2) {
                run.backward = true;
                if (backward_run(plan, pg, i, &run) < 2) continue;
            }
            for (int shape = 0; shape < PLAN_MLP_SHAPES; shape++) {
                MlpSpec s = spec_of(plan, &run, shape);
                int k = 0;
                while (k < n && !spec_eq(&mk[k].spec, &s)) k++;
                if (k == n) {
                    if (n == cap) {
                        cap = cap ? 2 * cap : 8;
                        mk = xrealloc(mk, (size_t)cap * sizeof *mk);
                    }
                    mk[n++] = (MlpKernel){ .spec = s, .kernel = plan->nkernels + k };
                }
                run.kernel[shape] = mk[k].kernel;
                const PlanStep *a = &pg->steps[run.step[0]], *z = &pg->steps[run.step[run.nlayers - 1]];
                if (run.backward) {
                    StrBuf lines = { 0 };
                    for (int j = 0; j < run.nlayers; j++)
                        sb_printf(&lines, "%s%d", j ? ", " : "", pg->steps[run.step[j]].loc.line);
                    kernel_uses_add(&mk[k].uses, "%s lines %s: %s .. %s (%s graph, input gradients)",
                                    plan->source_name, lines.s, a->what, z->what, codegen_graph_label[gid]);
                    sb_free(&lines);
                } else {
                    kernel_uses_add(&mk[k].uses, "%s lines %d-%d: %s .. %s (%s graph)", plan->source_name,
                                    a->loc.line, z->loc.line, a->what, z->what, codegen_graph_label[gid]);
                }
            }
            plan->mlps = xrealloc(plan->mlps, (size_t)(plan->nmlps + 1) * sizeof *plan->mlps);
            plan->mlps[plan->nmlps++] = run;
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
