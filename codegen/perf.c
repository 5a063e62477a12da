/* perf.c: the roofline model of perf.h. */
#include "perf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/diag.h"
#include "codegen_impl.h"

/* Dense figures (no structured sparsity), SXM parts. */
const PerfPart perf_parts[] = {
    {"A100 SXM 40GB", 80, 108, 1555e9, 19.5e12, 156e12, 312e12, 2e-6},
    {"A100 SXM 80GB", 80, 108, 2039e9, 19.5e12, 156e12, 312e12, 2e-6},
    {"H100 SXM", 90, 132, 3350e9, 67e12, 494.7e12, 989.4e12, 2e-6},
    {"H200 SXM", 90, 132, 4800e9, 67e12, 494.7e12, 989.4e12, 2e-6},
};
const int perf_nparts = sizeof perf_parts / sizeof perf_parts[0];

const char perf_sources[] =
    "the parts' figures from NVIDIA's A100, H100 and H200 datasheets, dense;\n"
    "a launch's least time, 2 us, an estimate";

static const PerfPart *part_called(const char *name)
{
    for (int k = 0; k < perf_nparts; k++)
        if (strcmp(perf_parts[k].name, name) == 0) return &perf_parts[k];
    CGC_INTERNAL("no part %s in the table", name);
}

const PerfPart *perf_part_named(const char *model)
{
    if (strstr(model, "PCIe")) return NULL;
    if (strstr(model, "H200")) return part_called("H200 SXM");
    if (strstr(model, "H100")) return part_called("H100 SXM");
    if (strstr(model, "A100")) return part_called(strstr(model, "80GB") ? "A100 SXM 80GB" : "A100 SXM 40GB");
    return NULL;
}

const char *perf_bound_name(PerfBound b)
{
    static const char *const names[] = {"memory", "compute", "latency"};
    return names[b];
}

static double buffer_bytes(const Plan *plan, int b, const int64_t *symvals)
{
    return (double)plan_buffer_bytes(plan, plan_buffer_root(plan, b), symvals);
}

/* Attention group K's launch: the share of its scores its kernel must compute (a causal
 * kernel skips the masked ones, all but Tq (Tq + 1) / 2 of Tq^2 with keys as many as
 * queries; the composition's GEMMs compute them all) and its peak FLOP/s. */
typedef struct AttnCost {
    double share, peak;
} AttnCost;

static AttnCost attention_cost(const IrGraph *g, int k, const int64_t *symvals, const PerfPart *part)
{
    IrSpan *span = ir_group_spans(g);
    IrAttention a = ir_attention_group(g, span, k);
    free(span);
    const Shape *scores = &g->nodes[a.sm].shape;
    Shape tq = { 1, { scores->dim[scores->rank - 2] } }, tk = { 1, { scores->dim[scores->rank - 1] } };
    double q = (double)ir_numel(&tq, symvals), keys = (double)ir_numel(&tk, symvals);
    return (AttnCost){ .share = a.causal && q == keys && q > 0 ? (q + 1) / (2 * q) : 1,
                       .peak = attention_tensor_cores(g, &a) ? part->half : part->f32 };
}

/* The FLOPs of the nodes a launch computes: its fusion group's, or its node's. */
static double launch_flops(const PlanGraph *pg, const PlanStep *s, const int64_t *symvals)
{
    const IrGraph *g = pg->ir;
    if (!g || s->sums_parts || (s->group <= 0 && s->node < 0)) return 0;
    if (s->group <= 0) return ir_node_flops(g, &g->nodes[s->node], symvals);
    int multi = g->groups[s->group - 1].multi;   /* a multi-tensor launch: all its groups */
    double flops = 0;
    for (int id = 0; id < g->nnodes; id++) {
        int k = g->nodes[id].group;
        if (k == s->group || (multi && k > 0 && g->groups[k - 1].multi == multi))
            flops += ir_node_flops(g, &g->nodes[id], symvals);
    }
    return flops;
}

static void launch_cost(const Plan *plan, const PlanGraph *pg, const PlanStep *s,
                        const int64_t *symvals, PerfStep *out)
{
    const PlanLaunch *l = &s->launch;
    const PlanKernel *k = &plan->kernels[l->kernel];
    for (int i = 0; i < l->nargs; i++) {
        if (k->param[i] != PP_PTR || l->arg[i].kind != ARG_BUFFER) continue;
        bool written = plan_param_written(k->param_ctype[i]), again = false;
        for (int j = 0; j < i && k->packed && !again; j++)   /* a slot may repeat a tensor */
            again = k->param[j] == PP_PTR && l->arg[j].kind == ARG_BUFFER && l->arg[j].index == l->arg[i].index &&
                    plan_param_written(k->param_ctype[j]) == written;
        double bytes = again ? 0 : buffer_bytes(plan, l->arg[i].index, symvals);
        if (written) out->written += bytes;
        else out->read += bytes;
    }
    out->flops = launch_flops(pg, s, symvals);
    int64_t items = ir_numel(&l->work, symvals), per = l->items_per_block > 0 ? l->items_per_block : 1;
    int64_t blocks = (items + per - 1) / per;
    out->blocks = blocks < 1 ? 1 : l->max_blocks > 0 && blocks > l->max_blocks ? l->max_blocks : blocks;
    out->threads = (double)out->blocks * (k->block > 0 ? k->block : 1);
}

/* The tile of C a library's kernel takes, for the blocks it runs; the least of K a part of
 * a split GEMM sums. */
enum { GEMM_TILE = 128, GEMM_SPLIT_K = 512 };

/* The SMs of the largest part. */
static int most_sms(void)
{
    int sms = 0;
    for (int k = 0; k < perf_nparts; k++)
        if (perf_parts[k].sms > sms) sms = perf_parts[k].sms;
    return sms;
}

/* A GEMM whose tiles of C cannot fill the largest part is split along K, as cuBLAS's
 * heuristics do (split-K): parts of GEMM_SPLIT_K of it at least, as many as fill the
 * SMs, each writing its partial C in f32 and the last pass reading them back. */
static void gemm_cost(const Plan *plan, const PlanGemm *g, const int64_t *symvals, PerfStep *out)
{
    double batch = (double)ir_numel(&g->batch, symvals);
    double m = (double)plan_gemm_m(g, symvals), k = (double)plan_gemm_k(g, symvals);
    Shape ns = { 1, { g->n } };
    double n = (double)ir_numel(&ns, symvals);
    double tiles = batch * ceil(m / GEMM_TILE) * ceil(n / GEMM_TILE);
    double splits = fmin(floor(k / GEMM_SPLIT_K), ceil(most_sms() / tiles));
    if (splits < 2) splits = 1;
    out->read = buffer_bytes(plan, g->a, symvals) + buffer_bytes(plan, g->b, symvals) +
                (g->bias >= 0 ? buffer_bytes(plan, g->bias, symvals) : 0);
    out->written = buffer_bytes(plan, g->c, symvals) + (g->aux >= 0 ? buffer_bytes(plan, g->aux, symvals) : 0);
    if (splits > 1) {
        double partials = splits * batch * m * n * 4;
        out->read += partials, out->written += partials;
    }
    out->flops = 2 * batch * m * n * k;
    out->blocks = (int64_t)(tiles * splits);
}

/* Threads an SM needs in flight for a streaming kernel to reach about the peak: half the
 * 2048 it holds (Little's law: the bytes in flight that hide memory's latency). */
enum { FULL_THREADS_PER_SM = 1024 };

int64_t perf_fill_threads(void) { return (int64_t)most_sms() * FULL_THREADS_PER_SM; }

/* The share of the part's peak step P can use: its threads against those that fill the
 * SMs; a GEMM, its tiles against the SMs (one tile an SM at a time). */
static double fill(const PlanStep *s, const PerfStep *p, const PerfPart *part)
{
    double f = s->kind == STEP_GEMM ? (double)p->blocks / part->sms
                                    : p->threads / ((double)part->sms * FULL_THREADS_PER_SM);
    return f < 1 ? f : 1;
}

/* Step S's attention group, or 0. */
static int attention_group(const PlanGraph *pg, const PlanStep *s)
{
    bool attn = s->kind != STEP_GEMM && pg->ir && !s->sums_parts && s->group > 0 &&
                pg->ir->groups[s->group - 1].kind == IR_GROUP_ATTENTION;
    return attn ? s->group : 0;
}

/* The peak FLOP/s for step S: a GEMM's tensor-core type, else the CUDA cores' f32. */
static double peak_flops(const PlanStep *s, const PerfPart *part)
{
    if (s->kind != STEP_GEMM) return part->f32;
    switch ((GemmCompute)s->gemm.compute) {
    case GEMM_F32: return part->f32;
    case GEMM_TF32: return part->tf32;
    case GEMM_F32_ACCUM: return part->half;
    }
    return part->f32;
}

PerfStep perf_step(const Plan *plan, PlanGraphId gid, int i, const int64_t *symvals, const PerfPart *part)
{
    const PlanGraph *pg = &plan->graph[gid];
    CGC_ASSERT(i >= 0 && i < pg->nsteps);
    const PlanStep *s = &pg->steps[i];
    PerfStep p = { 0 };
    if (s->kind == STEP_GEMM) gemm_cost(plan, &s->gemm, symvals, &p);
    else launch_cost(plan, pg, s, symvals, &p);
    double peak = peak_flops(s, part);
    int attn = attention_group(pg, s);
    if (attn) {
        AttnCost a = attention_cost(pg->ir, attn, symvals, part);
        p.flops *= a.share, peak = a.peak;
    }
    double memory = (p.read + p.written) / part->bandwidth, compute = p.flops / peak;
    double ideal = memory > compute ? memory : compute;
    double share = fill(s, &p, part);
    p.seconds = ideal / share;
    p.bound = memory > compute ? PERF_MEMORY : PERF_COMPUTE;
    if (share < 0.5) p.bound = PERF_LATENCY;   /* too few threads: memory's latency shows */
    if (p.seconds < part->launch_s) {
        p.seconds = part->launch_s;
        p.bound = PERF_LATENCY;
    }
    return p;
}
