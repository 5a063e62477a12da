/* compile.c: the passes after training lowering, then the plan (see compile.h).
 *
 * Checkpointing chooses among the schedules of compiler/recompute.c's frontier by
 * compiling them: each trial restores the graphs as training lowering left them,
 * applies a schedule, fuses, builds the plan and lays it out. The solver's memory model
 * orders the schedules; the planned activation bytes decide, because what a
 * recomputation saves depends on everything after it (which values fusion keeps in
 * registers, which buffers the planner lets share memory, the gradients). A trial takes
 * milliseconds; `auto` bisects the frontier for the first schedule whose plan fits,
 * `all` tries its last MAX_LEAST_TRIALS schedules.
 */
#include "compile.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../compiler/passes.h"

enum { NGRAPHS = 5 };

static IrGraph *program_graph(IrProgram *p, int i)
{
    IrGraph *g[NGRAPHS] = { &p->forward, &p->train, &p->train_micro, &p->eval, &p->decode };
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

/* One compilation with schedule S (NULL: none) applied. */
static void trial(IrProgram *p, const CompileOptions *o, const Saved *saved,
                  const RecomputeSchedule *s, Compiled *c)
{
    restore_graphs(p, saved);
    if (s) recompute_apply(p, s->nodes, s->nnodes);
    if (o->observer) o->observer->after(o->observer->ctx, PASS_CHECKPOINT, p);
    if (o->mode != PLAN_EAGER) fusion_assign(p);
    if (o->observer) o->observer->after(o->observer->ctx, PASS_FUSION, p);
    plan_free(c->plan);
    plan_layout_free(&c->layout);
    c->plan = plan_build(p, o->mode, o->net_path, c->symmax);
    plan_layout(c->plan, c->symmax, true, &c->layout);
    c->schedule = s;
    c->nrecomputed = s ? s->nnodes : 0;
}

/* The schedule among the last MAX_LEAST_TRIALS of the frontier (the least modelled
 * memory) whose plan needs the fewest activation bytes, ties to fewer FLOPs; Compiled
 * ends with it. */
enum { MAX_LEAST_TRIALS = 16 };
static void least_memory(IrProgram *p, const CompileOptions *o, const Saved *saved, Compiled *c)
{
    const RecomputeChoices *rc = &c->choices;
    int best = -1, from = rc->n > MAX_LEAST_TRIALS ? rc->n - MAX_LEAST_TRIALS : 0;
    size_t best_bytes = SIZE_MAX;
    for (int i = rc->n - 1; i >= from; i--) {
        trial(p, o, saved, &rc->s[i], c);
        if (compiled_activation_bytes(c) <= best_bytes) best = i, best_bytes = compiled_activation_bytes(c);
    }
    if (best != from) trial(p, o, saved, best >= 0 ? &rc->s[best] : NULL, c);
}

/* The warning of checkpoint = auto when even the least memory exceeds the budget, with
 * the batch that would fit (activations grow with the batch, about in proportion). */
static void warn_over_budget(const Compiled *c)
{
    char need[32], have[32];
    size_t bytes = compiled_activation_bytes(c);
    diag_format_bytes(bytes, need, sizeof need);
    diag_format_bytes(c->budget, have, sizeof have);
    int64_t batch = c->symmax[0], rows = (int64_t)((double)batch * (double)c->budget / (double)bytes);
    char fix[160];
    if (rows >= 1)
        snprintf(fix, sizeof fix, "a batch of at most about %lld rows, with `accumulate` to keep the "
                 "step's size, or a larger `memory`", (long long)rows);
    else
        snprintf(fix, sizeof fix, "a larger `memory` (not even one row fits)");
    cgc_warning("checkpoint = auto: the training step needs at least %s of activations and "
                "temporaries (the least any checkpointing schedule plans), more than the budget "
                "of %s; continuing with that plan (fix: %s)", need, have, fix);
}

static bool fits(const Compiled *c)
{
    return compiled_activation_bytes(c) <= c->budget;
}

/* checkpoint = auto: the frontier's first schedule (fewest FLOPs) whose plan fits the
 * budget, found by bisection: along the frontier the modelled peak falls, and the planned
 * bytes with it. When even the last does not fit, the least memory, with a warning. */
static void search(IrProgram *p, const CompileOptions *o, const Saved *saved, Compiled *c)
{
    trial(p, o, saved, NULL, c);
    if (p->cfg.memory > 0) c->budget = (size_t)p->cfg.memory;
    else if (o->device_free > c->layout.persistent_bytes)
        c->budget = o->device_free - c->layout.persistent_bytes;
    if (!c->budget || fits(c)) return;   /* no budget known, or none needed */
    const RecomputeChoices *rc = &c->choices;
    int lo = 0, hi = rc->n - 1;         /* lo does not fit (s[0] recomputes nothing) */
    trial(p, o, saved, &rc->s[hi], c);
    if (!fits(c)) {
        least_memory(p, o, saved, c);
        if (fits(c)) return;
        if (!o->quiet) warn_over_budget(c);
        c->over_budget = true;
        return;
    }
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        trial(p, o, saved, &rc->s[mid], c);
        if (fits(c)) hi = mid;
        else lo = mid;
    }
    if (c->schedule != &rc->s[hi]) trial(p, o, saved, &rc->s[hi], c);
}

/* The most rows of a batch one rank takes (the runtime's shares differ by one at most). */
static int64_t rank_rows(const TrainConfig *c)
{
    return (c->batch + c->ranks - 1) / c->ranks;
}

/* Compiled.kept_words from TRAIN, the train graph as training lowering left it. */
static void describe_kept(Compiled *c, const IrGraph *train)
{
    int n = c->schedule ? c->schedule->nkept : 0;
    c->kept_words = xmalloc(((size_t)n + 1) * sizeof *c->kept_words);
    for (int k = 0; k < n; k++) {
        const IrNode *x = &train->nodes[c->schedule->kept[k]];
        if (x->name) snprintf(c->kept_words[k], sizeof c->kept_words[k], "%s (line %d)", x->name, x->loc.line);
        else snprintf(c->kept_words[k], sizeof c->kept_words[k], "the %s of line %d", ir_op_name(x->op), x->loc.line);
    }
}

int compile_program(IrProgram *p, const CompileOptions *o, Compiled *out)
{
    memset(out, 0, sizeof *out);
    out->p = p;
    for (int k = 0; k < IR_MAX_SYMBOLS; k++)
        out->symmax[k] = o->symmax[k] > 0 ? o->symmax[k] : k == 0 ? rank_rows(&p->cfg) : 1;
    /* the forward's FLOPs are counted before fusion interleaves it with the backward */
    if (p->cfg.checkpoint != CKPT_NONE) recompute_choices(p, &out->choices);
    else out->choices.forward_flops = recompute_forward_flops(p);
    Saved saved;
    save_graphs(p, &saved);
    switch (p->cfg.checkpoint) {
    case CKPT_NONE: trial(p, o, &saved, NULL, out); break;
    case CKPT_ALL: least_memory(p, o, &saved, out); break;
    case CKPT_AUTO: search(p, o, &saved, out); break;
    }
    describe_kept(out, &saved.g[1]);    /* program_graph's train */
    if (o->stop_after_checkpoint) {
        restore_graphs(p, &saved);
        if (out->schedule) recompute_apply(p, out->schedule->nodes, out->schedule->nnodes);
        plan_free(out->plan);
        out->plan = NULL;
        plan_layout_free(&out->layout);
    }
    free_saved(&saved);
    return 0;
}

void compiled_free(Compiled *c)
{
    plan_free(c->plan);
    plan_layout_free(&c->layout);
    recompute_choices_free(&c->choices);
    free(c->kept_words);
    memset(c, 0, sizeof *c);
}

PlanGraphId compiled_main_graph(const Compiled *c) { return c->p->inference ? PG_EVAL : PG_TRAIN; }

size_t compiled_activation_bytes(const Compiled *c)
{
    size_t a = c->layout.graph_bytes[compiled_main_graph(c)], b = c->layout.graph_bytes[PG_TRAIN_MICRO];
    return a > b ? a : b;
}

int compiled_segments(const Compiled *c)
{
    int n = 0;
    for (int k = 0; c->schedule && k < c->schedule->nkept; k++) n += c->schedule->segment_nodes[k] > 0;
    return n;
}

int compiled_steps_per_train(const Compiled *c, int *gemms)
{
    CGC_ASSERT(c->plan);
    const PlanGraph *g = &c->plan->graph[compiled_main_graph(c)];
    int ng = 0;
    for (int i = 0; i < g->nsteps; i++) ng += g->steps[i].kind == STEP_GEMM;
    if (gemms) *gemms = ng;
    return g->nsteps;
}
