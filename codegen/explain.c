/* explain.c: what the passes decided, for people (--explain) and for scripts (--stats).
 *
 * Both read the compiled program and its plan; nothing here decides anything. The
 * precision reasons restate compiler/precision.c's table for each value of the forward
 * pass (the backward follows the forward's types), so the wording here must follow that
 * table when it changes.
 */
#include "compile.h"

#include <stdlib.h>
#include <string.h>

#include "../compiler/passes.h"

/* ---- shared facts ---- */

/* The distinct .net lines of group K's members, ascending, into LINES; returns how many. */
static int group_lines(const IrGraph *g, int k, int *lines, int max)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) {
        int line = g->nodes[i].loc.line;
        if (g->nodes[i].group != k || line <= 0) continue;
        int at = 0;
        while (at < n && lines[at] < line) at++;
        if (at < n && lines[at] == line) continue;
        if (n == max) break;
        memmove(&lines[at + 1], &lines[at], (size_t)(n - at) * sizeof *lines);
        lines[at] = line;
        n++;
    }
    return n;
}

/* Whether node I computes something a reader would call an op (not a leaf). */
static bool is_op(const IrNode *n)
{
    IrOpClass c = ir_op_info[n->op].cls;
    return c != IR_CLASS_LEAF || n->op == IR_RUNTIME;
}

static void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

/* ---- --stats ---- */

static void stats_group(FILE *out, const IrGraph *g, int k, bool first)
{
    fprintf(out, "%s\n    {\"name\": ", first ? "" : ",");
    json_string(out, g->groups[k - 1].name);
    fputs(", \"ops\": [", out);
    bool any = false;
    for (int i = 0; i < g->nnodes; i++) {
        if (g->nodes[i].group != k || !is_op(&g->nodes[i])) continue;
        fprintf(out, "%s\"%s\"", any ? ", " : "", ir_op_name(g->nodes[i].op));
        any = true;
    }
    int lines[64];
    int n = group_lines(g, k, lines, 64);
    fputs("], \"lines\": [", out);
    for (int i = 0; i < n; i++) fprintf(out, "%s%d", i ? ", " : "", lines[i]);
    fprintf(out, "], \"multi\": %d}", g->groups[k - 1].multi);
}

void compiled_write_stats(const Compiled *c, FILE *out)
{
    const IrProgram *p = c->p;
    int gemms = 0;
    int steps = compiled_steps_per_train(c, &gemms);
    fputs("{\n  \"model\": ", out);
    json_string(out, p->model_name ? p->model_name : "");
    fprintf(out, ",\n  \"mode\": \"%s\",\n  \"precision\": \"%s\",\n  \"checkpoint\": \"%s\",\n",
            plan_mode_name(c->plan->mode), config_precision_name(p->cfg.precision),
            config_checkpoint_name(p->cfg.checkpoint));
    fprintf(out, "  \"batch\": %lld,\n", (long long)c->symmax[0]);
    fprintf(out, "  \"kernels_per_step\": %d,\n  \"gemms_per_step\": %d,\n", steps, gemms);
    fprintf(out, "  \"peak_bytes\": %zu,\n  \"activation_bytes\": %zu,\n  \"persistent_bytes\": %zu,\n",
            c->layout.arena_bytes, compiled_activation_bytes(c), c->layout.persistent_bytes);
    fprintf(out, "  \"memory_budget\": %zu,\n  \"recomputed\": %d,\n", c->budget, c->nrecomputed);
    fputs("  \"fusion_groups\": [", out);
    const IrGraph *g = &p->train;
    for (int k = 1; k <= g->ngroups; k++) stats_group(out, g, k, k == 1);
    fputs(g->ngroups ? "\n  ]\n}\n" : "]\n}\n", out);
}

/* ---- --explain ---- */

/* The first reader of node ID in G, or -1. */
static int first_reader(const IrGraph *g, int id)
{
    for (int i = id + 1; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++)
            if (g->nodes[i].in[k] == id) return i;
    return -1;
}

/* Why forward node ID has its dtype (precision.c's table, restated). */
static const char *precision_reason(const IrProgram *p, const IrGraph *g, int id)
{
    const IrNode *n = &g->nodes[id];
    Precision prec = p->cfg.precision;
    bool half = prec == PREC_BF16 || prec == PREC_FP16;
    if (n->op == IR_MATMUL)
        return half ? "matrix product on tensor cores, half inputs, f32 accumulation"
               : prec == PREC_TF32 ? "matrix product: f32 storage, tf32 tensor-core math"
                                   : "matrix product in f32";
    if (n->op == IR_CAST && n->dtype != DT_F32) {
        int r = first_reader(g, id);
        bool bias = r >= 0 && g->nodes[r].op == IR_ADD;
        return bias ? "autocast: the bias of a linear layer joins its product's type"
                    : "autocast: an operand of a matrix product";
    }
    if (n->op == IR_CAST) return "autocast: read by an op that runs in f32";
    if (id == g->output[IR_OUT_LOSS]) return "the loss is always f32";
    if (half && precision_runs_in_f32(n->op)) return "autocast's f32 list (reductions, softmax, losses)";
    if (!ir_dtype_is_float(n->dtype)) return "integer";
    if (half && n->dtype != DT_F32) return "follows its inputs (half stays half)";
    return half ? "follows its inputs (f32 with anything is f32)" : "f32 model";
}

static void explain_precision(const Compiled *c, FILE *out)
{
    const IrProgram *p = c->p;
    const IrGraph *g = &p->forward;
    char shape[96];
    fprintf(out, "Precision (%s): parameters and optimizer state are f32 (master weights); "
                 "gradients follow the\nforward's types and reach the parameters as f32.\n",
            config_precision_name(p->cfg.precision));
    if (p->cfg.precision == PREC_FP16)
        fputs("fp16: the loss is scaled (GradScaler: 65536, x2 after 2000 good steps, x0.5 and the "
              "step skipped\non inf/nan gradients).\n", out);
    for (int i = 0; i < p->ninputs; i++)
        fprintf(out, "  %-22s %-5s %-14s program input\n", p->inputs[i].name,
                ir_dtype_name(p->inputs[i].dtype), ir_shape_str(p, &p->inputs[i].shape, shape, sizeof shape));
    for (int id = 0; id < g->nnodes; id++) {
        const IrNode *n = &g->nodes[id];
        if (!is_op(n) || n->op == IR_RUNTIME || (n->shape.rank == 0 && n->op != IR_CROSS_ENTROPY))
            continue;
        char who[48];
        if (n->name) snprintf(who, sizeof who, "%s (%s)", n->name, ir_op_name(n->op));
        else snprintf(who, sizeof who, "%%%d %s", id, ir_op_name(n->op));
        fprintf(out, "  %-22s %-5s %-14s line %-3d %s\n", who, ir_dtype_name(n->dtype),
                ir_shape_str(p, &n->shape, shape, sizeof shape), n->loc.line,
                precision_reason(p, g, id));
    }
}

/* Group K's ops in order of first appearance, each with its count: "add x12, relu". */
static void print_op_counts(const IrGraph *g, int k, FILE *out)
{
    int count[IR_NUM_OPS] = { 0 };
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].group == k && is_op(&g->nodes[i])) count[g->nodes[i].op]++;
    int col = 8;
    bool first = true;
    for (int i = 0; i < g->nnodes; i++) {
        IrOp op = g->nodes[i].op;
        if (g->nodes[i].group != k || count[op] == 0) continue;
        char item[48];
        int len = count[op] > 1 ? snprintf(item, sizeof item, "%s x%d", ir_op_name(op), count[op])
                                : snprintf(item, sizeof item, "%s", ir_op_name(op));
        if (!first && col + len > 90) fputs(",\n        ", out), col = 8;
        else if (!first) col += fprintf(out, ", ");
        col += fprintf(out, "%s", item);
        first = false;
        count[op] = 0;   /* printed */
    }
}

static void explain_groups(const Compiled *c, FILE *out)
{
    const IrProgram *p = c->p;
    const IrGraph *g = &p->train;
    char shape[96];
    if (!g->ngroups) {
        fprintf(out, "\nFusion: none (--mode %s: one kernel or GEMM per op).\n",
                plan_mode_name(c->plan->mode));
        return;
    }
    fprintf(out, "\nFusion groups of the train graph (%d):\n", g->ngroups);
    for (int k = 1; k <= g->ngroups; k++) {
        const IrGroup *gr = &g->groups[k - 1];
        fprintf(out, "  g%-3d %-28s %-9s %-14s", k, gr->name,
                ir_group_kind_name(gr->kind), ir_shape_str(p, &gr->work, shape, sizeof shape));
        int lines[64];
        int n = group_lines(g, k, lines, 64);
        fputs(" lines", out);
        for (int i = 0; i < n; i++) fprintf(out, "%s%d", i ? "," : " ", lines[i]);
        if (!n) fputs(" -", out);
        if (gr->multi) fprintf(out, "  (multi-tensor launch %d%s)", gr->multi, gr->last ? ", last" : "");
        fputs("\n        ", out);
        print_op_counts(g, k, out);
        fputc('\n', out);
    }
}

static void explain_recompute(const Compiled *c, FILE *out)
{
    const IrProgram *p = c->p;
    const IrGraph *g = &p->train;
    fprintf(out, "\nActivation checkpointing: checkpoint = %s", config_checkpoint_name(p->cfg.checkpoint));
    if (p->cfg.checkpoint == CKPT_AUTO) {
        char b[32];
        diag_format_bytes(c->budget, b, sizeof b);
        if (c->budget) fprintf(out, ", budget %s%s", b, c->over_budget ? " (not met)" : "");
        else fputs(", no budget known (no `memory`, no GPU): nothing recomputed", out);
    }
    fprintf(out, "; %d forward values recomputed in the backward\n", c->nrecomputed);
    for (int id = 0; id < g->nnodes; id++) {
        const IrNode *n = &g->nodes[id];
        if (!n->recompute) continue;
        char shape[96];
        fprintf(out, "  %-22s %-5s %-14s line %d\n", n->name ? n->name : ir_op_name(n->op),
                ir_dtype_name(n->dtype), ir_shape_str(p, &n->shape, shape, sizeof shape), n->loc.line);
    }
}

static void explain_memory(const Compiled *c, FILE *out)
{
    char peak[32], pers[32], act[32];
    diag_format_bytes(c->layout.arena_bytes, peak, sizeof peak);
    diag_format_bytes(c->layout.persistent_bytes, pers, sizeof pers);
    diag_format_bytes(compiled_activation_bytes(c), act, sizeof act);
    fprintf(out, "\nMemory plan (batch %lld): peak %s = %s persistent (parameters, optimizer "
                 "state, inputs, data)\n  + %s for the train step's activations and temporaries\n",
            (long long)c->symmax[0], peak, pers, act);
    fputs("  (a run with a test split lays the arena out for its evaluation batch too, up to\n"
          "  1000 rows, when that is larger than the training batch)\n", out);
    static const char *const names[PG_NUM] = { "train", "train_micro", "eval", "forward" };
    for (int gid = 0; gid < PG_NUM; gid++) {
        if (!c->plan->graph[gid].ir) continue;
        char b[32];
        diag_format_bytes(c->layout.graph_bytes[gid], b, sizeof b);
        fprintf(out, "  %-12s %s\n", names[gid], b);
    }
}

void compiled_explain(const Compiled *c, FILE *out)
{
    const IrProgram *p = c->p;
    int gemms = 0;
    int steps = compiled_steps_per_train(c, &gemms);
    fprintf(out, "cgc explain: model %s, mode %s, precision %s, batch %lld\n\n",
            p->model_name ? p->model_name : "?", plan_mode_name(c->plan->mode),
            config_precision_name(p->cfg.precision), (long long)c->symmax[0]);
    explain_precision(c, out);
    explain_groups(c, out);
    explain_recompute(c, out);
    explain_memory(c, out);
    fprintf(out, "\nKernels per training step: %d launches, of which %d GEMMs (plus the data "
                 "pipeline's 2 gathers and 1 loss tracker)\n", steps, gemms);
}
