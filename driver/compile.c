/* compile.c: the passes after training lowering, then the plan (see compile.h).
 *
 * checkpoint = auto is a search: each trial restores the graphs as training lowering
 * left them, recomputes the K cheapest candidates, fuses, builds the plan and lays it
 * out, and K grows until the activation bytes fit the budget. Trials are whole
 * compilations because what a recomputation saves depends on everything after it
 * (which values fusion keeps in registers, which buffers the planner lets share memory);
 * a model has tens of candidates and a trial takes milliseconds.
 */
#include "compile.h"

#include <stdlib.h>
#include <string.h>

#include "../compiler/passes.h"

enum { NGRAPHS = 4 };

static IrGraph *program_graph(IrProgram *p, int i)
{
    IrGraph *g[NGRAPHS] = { &p->forward, &p->train, &p->train_micro, &p->eval };
    return g[i];
}

typedef struct Saved {
    IrGraph g[NGRAPHS];
} Saved;

static void save_graphs(IrProgram *p, Saved *s)
{
    for (int i = 0; i < NGRAPHS; i++) {
        ir_graph_init(&s->g[i], program_graph(p, i)->name);
        ir_graph_copy(&s->g[i], program_graph(p, i), program_graph(p, i)->name);
    }
}

static void restore_graphs(IrProgram *p, const Saved *s)
{
    for (int i = 0; i < NGRAPHS; i++) ir_graph_copy(program_graph(p, i), &s->g[i], s->g[i].name);
}

static void free_saved(Saved *s)
{
    for (int i = 0; i < NGRAPHS; i++) ir_graph_free(&s->g[i]);
}

/* One compilation with the first K candidates recomputed. */
static void trial(IrProgram *p, const CompileOptions *o, const Saved *s, const int *cand, int k,
                  Compiled *c)
{
    restore_graphs(p, s);
    recompute_apply(p, cand, k);
    if (o->observer) o->observer->after(o->observer->ctx, PASS_CHECKPOINT, p);
    if (o->mode != PLAN_EAGER) fusion_assign(p);
    if (o->observer) o->observer->after(o->observer->ctx, PASS_FUSION, p);
    plan_free(c->plan);
    plan_layout_free(&c->layout);
    c->plan = plan_build(p, o->mode, o->net_path);
    plan_layout(c->plan, c->symmax, true, &c->layout);
    c->nrecomputed = k;
}

/* checkpoint = auto: the smallest K whose plan fits the budget, else every candidate. */
static void search(IrProgram *p, const CompileOptions *o, const Saved *s, const int *cand, int n,
                   Compiled *c)
{
    trial(p, o, s, cand, 0, c);
    if (p->cfg.memory > 0) c->budget = (size_t)p->cfg.memory;
    else if (o->device_free > c->layout.persistent_bytes)
        c->budget = o->device_free - c->layout.persistent_bytes;
    if (!c->budget) return;   /* no budget known: nothing to fit */
    for (int k = 0; compiled_activation_bytes(c) > c->budget; k++) {
        if (k == n) {
            char need[32], have[32];
            diag_format_bytes(compiled_activation_bytes(c), need, sizeof need);
            diag_format_bytes(c->budget, have, sizeof have);
            if (!o->quiet)
                cgc_warning("checkpoint = auto: the training step needs %s of activations and "
                            "temporaries even with all %d recomputable activations "
                            "recomputed, more than the budget of %s; continuing with that plan "
                            "(fixes: a smaller batch, a lower precision, or a larger `memory`)",
                            need, n, have);
            c->over_budget = true;
            return;
        }
        trial(p, o, s, cand, k + 1, c);
    }
}

/* The most rows of a batch one rank takes (the runtime's shares differ by one at most). */
static int64_t rank_rows(const TrainConfig *c)
{
    return (c->batch + c->ranks - 1) / c->ranks;
}

int compile_program(IrProgram *p, const CompileOptions *o, Compiled *out)
{
    memset(out, 0, sizeof *out);
    out->p = p;
    for (int k = 0; k < IR_MAX_SYMBOLS; k++)
        out->symmax[k] = o->symmax[k] > 0 ? o->symmax[k] : k == 0 ? rank_rows(&p->cfg) : 1;
    int *cand = NULL;
    int n = recompute_candidates(p, &cand);
    Saved saved;
    save_graphs(p, &saved);
    switch (p->cfg.checkpoint) {
    case CKPT_NONE: trial(p, o, &saved, cand, 0, out); break;
    case CKPT_ALL: trial(p, o, &saved, cand, n, out); break;
    case CKPT_AUTO: search(p, o, &saved, cand, n, out); break;
    }
    if (o->stop_after_checkpoint) {
        restore_graphs(p, &saved);
        recompute_apply(p, cand, out->nrecomputed);
        plan_free(out->plan);
        out->plan = NULL;
        plan_layout_free(&out->layout);
    }
    free_saved(&saved);
    out->recomputed = xmalloc((size_t)(out->nrecomputed ? out->nrecomputed : 1) * sizeof *cand);
    if (out->nrecomputed) memcpy(out->recomputed, cand, (size_t)out->nrecomputed * sizeof *cand);
    free(cand);
    return 0;
}

void compiled_free(Compiled *c)
{
    plan_free(c->plan);
    plan_layout_free(&c->layout);
    free(c->recomputed);
    memset(c, 0, sizeof *c);
}

size_t compiled_activation_bytes(const Compiled *c)
{
    size_t a = c->layout.graph_bytes[PG_TRAIN], b = c->layout.graph_bytes[PG_TRAIN_MICRO];
    return a > b ? a : b;
}

int compiled_steps_per_train(const Compiled *c, int *gemms)
{
    CGC_ASSERT(c->plan);
    const PlanGraph *g = &c->plan->graph[PG_TRAIN];
    int ng = 0;
    for (int i = 0; i < g->nsteps; i++) ng += g->steps[i].kind == STEP_GEMM;
    if (gemms) *gemms = ng;
    return g->nsteps;
}
