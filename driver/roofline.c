/* roofline.c: --explain's and --stats' performance model: each launch and GEMM of the
 * step the run repeats, priced by codegen/perf.h on each GPU part it knows, before
 * anything runs. */
#include "compile.h"

#include <stdlib.h>
#include <string.h>

#include "../base/text.h"
#include "../codegen/perf.h"

enum { KINDS = 9, TOP_STEPS = 12 };

/* What kind of work step S of PG is: a GEMM, or a launch by the kind of group it runs. */
static const char *step_kind(const PlanGraph *pg, const PlanStep *s)
{
    if (s->kind == STEP_GEMM) return "GEMMs";
    if (!pg->ir || s->group <= 0) return "single ops";
    const IrGroup *gr = &pg->ir->groups[s->group - 1];
    if (gr->multi) return "multi-tensor updates";
    switch (gr->kind) {
    case IR_GROUP_POINTWISE: return "pointwise";
    case IR_GROUP_REDUCE: return "reductions";
    case IR_GROUP_ROW: return "rows (norms, softmax)";
    case IR_GROUP_GEMM: return "GEMMs";
    case IR_GROUP_ATTENTION: return "attention";
    case IR_GROUP_CLASSIFIER: return "the classifier";
    }
    return "other";
}

/* The symbols' values the model prices: the batch, one rank's share of it. */
static void step_symbols(const Compiled *c, int64_t *symvals)
{
    int ranks = c->p->cfg.ranks > 1 ? c->p->cfg.ranks : 1;
    for (int k = 0; k < IR_MAX_SYMBOLS; k++) symvals[k] = c->symmax[k];
    symvals[0] = (c->p->cfg.batch + ranks - 1) / ranks;
}

/* Graph GID's step on PART: its time, and each step's into STEPS when not NULL. */
static double graph_seconds(const Compiled *c, PlanGraphId gid, const PerfPart *part, PerfStep *steps)
{
    int64_t symvals[IR_MAX_SYMBOLS];
    step_symbols(c, symvals);
    double total = 0;
    for (int i = 0; i < c->plan->graph[gid].nsteps; i++) {
        PerfStep s = perf_step(c->plan, gid, i, symvals, part);
        if (steps) steps[i] = s;
        total += s.seconds;
    }
    return total;
}

static void print_shares(const PlanGraph *pg, const PerfStep *steps, double total, FILE *out)
{
    const char *names[KINDS] = {0};
    double seconds[KINDS] = {0};
    int n = 0;
    for (int i = 0; i < pg->nsteps; i++) {
        const char *kind = step_kind(pg, &pg->steps[i]);
        int k = 0;
        while (k < n && strcmp(names[k], kind) != 0) k++;
        if (k == n && n < KINDS) names[n++] = kind;
        if (k < n) seconds[k] += steps[i].seconds;
    }
    for (int k = 0; k < n; k++)
        fprintf(out, "%s%s %.0f%%", k ? ", " : "  by kind: ", names[k], total > 0 ? 100 * seconds[k] / total : 0);
    fputc('\n', out);
}

/* The costliest step not yet TAKEN (the first of equals), or -1. */
static int costliest(const PerfStep *steps, int n, const bool *taken)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && (best < 0 || steps[i].seconds > steps[best].seconds)) best = i;
    return best;
}

static void print_costliest(const Compiled *c, const PlanGraph *pg, const PerfStep *steps, FILE *out)
{
    int n = pg->nsteps;
    bool *taken = xcalloc((size_t)n + 1, sizeof *taken);
    for (int r = 0; r < n && r < TOP_STEPS; r++) {
        int i = costliest(steps, n, taken);
        taken[i] = true;
        const PlanStep *s = &pg->steps[i];
        const PerfStep *p = &steps[i];
        fprintf(out, "    %8.1f us  %-8s %9.2f MB %9.2f MFLOP %7lld blocks  ", p->seconds * 1e6,
                perf_bound_name(p->bound), (p->read + p->written) / 1e6, p->flops / 1e6,
                (long long)p->blocks);
        if (s->kind == STEP_GEMM) fprintf(out, "GEMM %s", s->what ? s->what : "");
        else fputs(c->plan->kernels[s->launch.kernel].name, out);
        if (s->loc.line > 0) fprintf(out, " (line %d)", s->loc.line);
        fputc('\n', out);
    }
    if (n > TOP_STEPS) fprintf(out, "    ... and %d more\n", n - TOP_STEPS);
    free(taken);
}

void compiled_explain_roofline(const Compiled *c, FILE *out)
{
    PlanGraphId gid = compiled_main_graph(c);
    const PlanGraph *pg = &c->plan->graph[gid];
    int64_t symvals[IR_MAX_SYMBOLS];
    step_symbols(c, symvals);
    fprintf(out, "\nPerformance model: graph %s at batch %lld, each launch and GEMM at its part's peak "
                 "bandwidth\nand throughput: predictions, before anything runs (%s):\n",
            codegen_graph_label[gid], (long long)symvals[0], perf_sources);
    for (int k = 0; k < perf_nparts; k++)
        fprintf(out, "  %-14s sm_%d  %8.3f ms\n", perf_parts[k].name, perf_parts[k].arch,
                graph_seconds(c, gid, &perf_parts[k], NULL) * 1e3);
    const PerfPart *last = &perf_parts[perf_nparts - 1];
    PerfStep *steps = xcalloc((size_t)pg->nsteps + 1, sizeof *steps);
    double total = graph_seconds(c, gid, last, steps);
    fprintf(out, "  on the %s:\n", last->name);
    print_shares(pg, steps, total, out);
    fputs("  the costliest, with their bound, the bytes they move and the FLOPs they do:\n", out);
    print_costliest(c, pg, steps, out);
    free(steps);
}

static void stats_launch(const Compiled *c, PlanGraphId gid, int i, const int64_t *symvals, FILE *out)
{
    const PlanGraph *pg = &c->plan->graph[gid];
    const PlanStep *s = &pg->steps[i];
    PerfStep p = perf_step(c->plan, gid, i, symvals, &perf_parts[0]);
    fprintf(out, "%s\n      {\"kernel\": ", i ? "," : "");
    text_json_string(out, s->kind == STEP_GEMM ? "GEMM" : c->plan->kernels[s->launch.kernel].name);
    fputs(", \"what\": ", out);
    text_json_string(out, s->what ? s->what : "");
    fprintf(out, ", \"line\": %d, \"kind\": \"%s\", \"bytes_read\": %.0f, \"bytes_written\": %.0f, "
                 "\"flops\": %.0f, \"blocks\": %lld, \"threads\": %.0f, \"seconds\": [", s->loc.line,
            step_kind(pg, s), p.read, p.written, p.flops, (long long)p.blocks, p.threads);
    for (int k = 0; k < perf_nparts; k++)
        fprintf(out, "%s%.9g", k ? ", " : "", perf_step(c->plan, gid, i, symvals, &perf_parts[k]).seconds);
    fputs("], \"bound\": [", out);
    for (int k = 0; k < perf_nparts; k++)
        fprintf(out, "%s\"%s\"", k ? ", " : "", perf_bound_name(perf_step(c->plan, gid, i, symvals, &perf_parts[k]).bound));
    fputs("]}", out);
}

double compiled_predicted_seconds(const Compiled *c, const PerfPart *part)
{
    return graph_seconds(c, compiled_main_graph(c), part, NULL);
}

void compiled_write_roofline(const Compiled *c, FILE *out)
{
    PlanGraphId gid = compiled_main_graph(c);
    int64_t symvals[IR_MAX_SYMBOLS];
    step_symbols(c, symvals);
    fprintf(out, "  \"predicted\": {\n    \"graph\": \"%s\",\n    \"batch\": %lld,\n    \"parts\": [",
            codegen_graph_label[gid], (long long)symvals[0]);
    for (int k = 0; k < perf_nparts; k++) {
        fprintf(out, "%s{\"name\": \"%s\", \"arch\": %d, \"step_s\": %.9g}", k ? ", " : "",
                perf_parts[k].name, perf_parts[k].arch, graph_seconds(c, gid, &perf_parts[k], NULL));
    }
    fputs("],\n    \"launches\": [", out);
    for (int i = 0; i < c->plan->graph[gid].nsteps; i++) stats_launch(c, gid, i, symvals, out);
    fputs("\n    ]\n  },\n", out);
}
