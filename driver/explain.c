/* explain.c: what the passes decided, for people (--explain) and for scripts (--stats).
 *
 * Both read the compiled program and its plan; nothing here decides anything. The
 * precision of each value of the forward pass is explained by the rule the precision
 * pass recorded on it (IrNode.dtype_why; the backward follows the forward's types), each
 * kernel boundary by the rule the fusion pass recorded for it (IrGraph.boundaries).
 */
#include "compile.h"
#include "../runtime/device.h"

#include <stdlib.h>
#include <string.h>

#include "../base/text.h"
#include "../compiler/passes.h"

/* ---- shared facts ---- */

/* The distinct .net lines of group K's members, ascending, into *OUT (malloc'd); returns
 * how many. */
static int group_lines(const IrGraph *g, int k, int **out)
{
    int n = 0, *lines = xmalloc(((size_t)g->nnodes + 1) * sizeof *lines);
    for (int i = 0; i < g->nnodes; i++) {
        int line = g->nodes[i].loc.line;
        if (g->nodes[i].group != k || line <= 0) continue;
        int at = 0;
        while (at < n && lines[at] < line) at++;
        if (at < n && lines[at] == line) continue;
        memmove(&lines[at + 1], &lines[at], (size_t)(n - at) * sizeof *lines);
        lines[at] = line;
        n++;
    }
    *out = lines;
    return n;
}


/* Whether node I computes something a reader would call an op (not a placed leaf). */
static bool is_op(const IrNode *n) { return !ir_node_is_placed(n); }

/* A runtime scalar, which every kernel reading it computes. */
static bool is_scalar(const IrNode *n) { return ir_node_fuse(n) == IR_FUSE_SCALAR; }

/* ---- --stats ---- */

static void stats_group(FILE *out, const IrGraph *g, int k, bool first)
{
    fprintf(out, "%s\n    {\"name\": ", first ? "" : ",");
    text_json_string(out, g->groups[k - 1].name);
    fputs(", \"ops\": [", out);
    bool any = false;
    for (int i = 0; i < g->nnodes; i++) {
        if (g->nodes[i].group != k || !is_op(&g->nodes[i])) continue;
        fprintf(out, "%s\"%s\"", any ? ", " : "", ir_op_name(g->nodes[i].op));
        any = true;
    }
    int *lines, n = group_lines(g, k, &lines);
    fputs("], \"lines\": [", out);
    for (int i = 0; i < n; i++) fprintf(out, "%s%d", i ? ", " : "", lines[i]);
    free(lines);
    fprintf(out, "], \"multi\": %d}", g->groups[k - 1].multi);
}

void compiled_write_stats(const Compiled *c, FILE *out)
{
    const IrProgram *p = c->p;
    int gemms = 0;
    int steps = compiled_steps_per_train(c, &gemms);
    fputs("{\n  \"model\": ", out);
    text_json_string(out, p->model_name ? p->model_name : "");
    fprintf(out, ",\n  \"mode\": \"%s\",\n  \"precision\": \"%s\",\n  \"checkpoint\": \"%s\",\n",
            plan_mode_name(c->plan->mode), config_precision_name(p->cfg.precision),
            config_checkpoint_name(p->cfg.checkpoint));
    fprintf(out, "  \"batch\": %lld,\n  \"ranks\": %d,\n", (long long)c->symmax[0], p->cfg.ranks);
    fprintf(out, "  \"kernels_per_step\": %d,\n  \"gemms_per_step\": %d,\n", steps, gemms);
    fprintf(out, "  \"peak_bytes\": %zu,\n  \"activation_bytes\": %zu,\n  \"persistent_bytes\": %zu,\n",
            c->layout.arena_bytes, compiled_activation_bytes(c), c->layout.persistent_bytes);
    fprintf(out, "  \"memory_budget\": %zu,\n  \"recomputed\": %d,\n", c->budget, c->nrecomputed);
    fprintf(out, "  \"checkpoint_segments\": %d,\n  \"recomputed_flops\": %.0f,\n  \"forward_flops\": %.0f,\n",
            compiled_segments(c), c->schedule ? c->schedule->flops : 0, c->choices.forward_flops);
    compiled_write_roofline(c, out);
    fputs("  \"fusion_groups\": [", out);
    const IrGraph *g = &p->train;
    for (int k = 1; k <= g->ngroups; k++) stats_group(out, g, k, k == 1);
    fputs(g->ngroups ? "\n  ]\n}\n" : "]\n}\n", out);
}

/* ---- --explain ---- */

/* Why forward node N has its dtype: the rule the precision pass recorded. */
static const char *precision_reason(const IrProgram *p, const IrNode *n)
{
    Precision prec = p->cfg.precision;
    bool half = prec == PREC_BF16 || prec == PREC_FP16;
    switch (n->dtype_why) {
    case IR_WHY_PRODUCT:
        return half ? "matrix product on tensor cores, half inputs, f32 accumulation"
               : prec == PREC_TF32 ? "matrix product: f32 storage, tf32 tensor-core math"
                                   : "matrix product in f32";
    case IR_WHY_BIAS: return "autocast: the bias of a linear layer joins its product's type";
    case IR_WHY_OPERAND: return "autocast: an operand of a matrix product";
    case IR_WHY_F32_READER: return "autocast: read by an op that runs in f32";
    case IR_WHY_LOSS: return "the loss is always f32";
    case IR_WHY_F32_LIST: return "autocast's f32 list (reductions, softmax, losses)";
    case IR_WHY_INTEGER: return "integer";
    case IR_WHY_FOLLOWS: break;
    }
    if (half && n->dtype != DT_F32) return "follows its inputs (half stays half)";
    return half ? "follows its inputs (f32 with anything is f32)" : "f32 model";
}

/* The type of P's half copies of its parameters (IR_COPY), or f32 when it keeps none. */
static DType copy_type(const IrProgram *p)
{
    for (int i = 0; i < p->ntensors; i++)
        if (p->tensors[i].kind == IR_COPY) return p->tensors[i].dtype;
    return DT_F32;
}

/* What the precision means for P's tensors: a prediction has no optimizer, gradients or
 * loss scale. */
static void explain_precision_rules(const IrProgram *p, FILE *out)
{
    const char *name = config_precision_name(p->cfg.precision);
    DType copies = copy_type(p);
    if (p->inference) {
        fprintf(out, "Precision (%s): parameters are f32.\n", name);
        if (copies != DT_F32)
            fprintf(out, "The prediction reads the casts of the weights from %s copies of them, made "
                         "from the checkpoint's\nweights.\n", ir_dtype_name(copies));
        return;
    }
    fprintf(out, "Precision (%s): parameters and optimizer state are f32 (master weights); "
                 "gradients follow the\nforward's types and reach the parameters as f32.\n", name);
    if (copies != DT_F32)
        fprintf(out, "Training and evaluation read the casts of the weights from %s copies of them, "
                     "which the\nupdate writes beside the weights (checkpoints hold none).\n",
                ir_dtype_name(copies));
    if (p->cfg.precision == PREC_FP16)
        fputs("fp16: the loss is scaled (GradScaler: 65536, x2 after 2000 good steps, x0.5 and the "
              "step skipped\non inf/nan gradients).\n", out);
}

static void explain_precision(const Compiled *c, FILE *out)
{
    const IrProgram *p = c->p;
    const IrGraph *g = &p->forward;
    char shape[96];
    explain_precision_rules(p, out);
    for (int i = 0; i < p->ninputs; i++)
        fprintf(out, "  %-22s %-5s %-14s program input\n", p->inputs[i].name,
                ir_dtype_name(p->inputs[i].dtype), ir_shape_str(p, &p->inputs[i].shape, shape, sizeof shape));
    for (int id = 0; id < g->nnodes; id++) {
        const IrNode *n = &g->nodes[id];
        if (!is_op(n) || is_scalar(n) || (n->shape.rank == 0 && n->op != IR_CROSS_ENTROPY))
            continue;
        char who[48];
        if (n->name) snprintf(who, sizeof who, "%s (%s)", n->name, ir_op_name(n->op));
        else snprintf(who, sizeof who, "%%%d %s", id, ir_op_name(n->op));
        fprintf(out, "  %-22s %-5s %-14s line %-3d %s\n", who, ir_dtype_name(n->dtype),
                ir_shape_str(p, &n->shape, shape, sizeof shape), n->loc.line,
                precision_reason(p, n));
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
    const IrGraph *g = p->inference ? &p->eval : &p->train;
    char shape[96];
    if (!g->ngroups) {
        fprintf(out, "\nFusion: none (--mode %s: one kernel or GEMM per op).\n",
                plan_mode_name(c->plan->mode));
        return;
    }
    fprintf(out, "\nFusion groups of the %s graph (%d):\n", g->name, g->ngroups);
    int width = 28;     /* the name column: the longest name's */
    for (int k = 1; k <= g->ngroups; k++) {
        int len = (int)strlen(g->groups[k - 1].name);
        width = len > width ? len : width;
    }
    for (int k = 1; k <= g->ngroups; k++) {
        const IrGroup *gr = &g->groups[k - 1];
        fprintf(out, "  g%-3d %-*s %-9s %-14s", k, width, gr->name,
                ir_group_kind_name(gr->kind), ir_shape_str(p, &gr->work, shape, sizeof shape));
        int *lines, n = group_lines(g, k, &lines);
        fputs(" lines", out);
        for (int i = 0; i < n; i++) fprintf(out, "%s%d", i ? "," : " ", lines[i]);
        free(lines);
        if (!n) fputs(" -", out);
        if (gr->multi) fprintf(out, "  (multi-tensor launch %d%s)", gr->multi, gr->last ? ", last" : "");
        fputs("\n        ", out);
        print_op_counts(g, k, out);
        fputc('\n', out);
    }
}

/* ---- why neighbours were not fused ---- */

static void unit_label(const IrGraph *g, int u, char *buf, size_t n)
{
    const IrGroup *gr = ir_unit_group(g, u);
    if (gr) snprintf(buf, n, "g%d %s", u, gr->name);
    else snprintf(buf, n, "%%%d %s", u - g->ngroups - 1, ir_op_name(g->nodes[u - g->ngroups - 1].op));
}

/* The words for each rule of IrSplit; a %s or %d is the rule's data (split_words). */
static const char *const split_text[] = {
    [IR_SPLIT_ATTENTION_BACKWARD] = "the backward attention kernel recomputes the forward's "
                                    "probabilities from the rows' log-sum-exp, which that kernel stores",
    [IR_SPLIT_ATTENTION_READS] = "an attention kernel reads its operands (Q, K, V; dO, O) from memory",
    [IR_SPLIT_ATTENTION_STORES] = "an attention kernel stores its products (O; dQ, dK, dV) and nothing "
                                  "else is fused after them",
    [IR_SPLIT_CLASSIFIER] = "the fused classifier reads the logits from memory (a row's "
                            "log-sum-exp comes before its gradient) and its loss is whole only "
                            "when its launch ends",
    [IR_SPLIT_GEMM_READS] = "a GEMM (cuBLAS) reads its operands from memory; nothing is fused "
                            "into it before the product",
    [IR_SPLIT_INTO_GEMM_GROUP] = "a GEMM group holds the product, the bias add and the activation "
                                 "(cuBLASLt's epilogue) and nothing else",
    [IR_SPLIT_EPILOGUE_ENDS] = "cuBLASLt's epilogue ends at the bias add and activation",
    [IR_SPLIT_BIAS_NOT_ALONE] = "a plain GEMM: an epilogue takes a bias add (with ReLU or GELU) only "
                                "where the add's kernel does nothing else, and this one does more",
    [IR_SPLIT_NO_EPILOGUE] = "a plain GEMM: cuBLASLt's epilogues take a bias add and ReLU or "
                             "GELU, not this %s, so the product is stored and read back",
    [IR_SPLIT_OWN_KERNEL] = "%s runs as a kernel of its own (not fused in this build)",
    [IR_SPLIT_REDUCTION] = "a reduction is whole only when its kernel ends, so its readers "
                           "run in the next one",
    [IR_SPLIT_PHASE] = "checkpointing: recomputed values have kernels of their own, apart "
                       "from the forward's and from the backward's that wait for them",
    [IR_SPLIT_WORK_STRETCH] = "different work: %s against %s",
    [IR_SPLIT_WORK_EXACT] = "different work: %s against %s (what a kernel stores or assigns has "
                            "exactly its work)",
    [IR_SPLIT_ROW_ACROSS] = "a row group runs one block per row, after its row reductions; a "
                            "reduction across rows cannot join it",
    [IR_SPLIT_SHARED] = "%%%d %s is needed by %d kernels: computed in one, stored, and read "
                        "back by the others",
    [IR_SPLIT_CYCLE] = "joining them would make the kernels' graph cyclic (a path through %s)",
    [IR_SPLIT_TWO_REDUCTIONS] = "two reductions: a kernel holds one reduction and its prologue",
    [IR_SPLIT_GREEDY] = "not joined by the greedy sweep (no rule above forbids it)",
};

/* Boundary B as the fusion pass recorded it, in words. */
static void split_words(const IrProgram *p, const IrGraph *g, const IrBoundary *b, char *why, size_t len)
{
    const char *f = split_text[b->why];
    char x[96], y[96];
    switch (b->why) {
    case IR_SPLIT_NO_EPILOGUE: snprintf(why, len, f, ir_op_name(g->nodes[b->cn].op)); break;
    case IR_SPLIT_OWN_KERNEL: snprintf(why, len, f, ir_op_name(g->nodes[b->own].op)); break;
    case IR_SPLIT_WORK_STRETCH:
    case IR_SPLIT_WORK_EXACT:
        snprintf(why, len, f, ir_shape_str(p, ir_unit_work(g, b->up), x, sizeof x),
                 ir_shape_str(p, ir_unit_work(g, b->uc), y, sizeof y));
        break;
    case IR_SPLIT_SHARED: snprintf(why, len, f, b->pn, ir_op_name(g->nodes[b->pn].op), b->readers); break;
    case IR_SPLIT_CYCLE:
        unit_label(g, b->via, x, sizeof x);
        snprintf(why, len, f, x);
        break;
    default: snprintf(why, len, "%s", f); break;
    }
}

/* A kernel boundary: a value of unit UP read by unit UC, and why they are two. */
typedef struct Boundary {
    int up, uc;
    char why[200];
} Boundary;

/* One printed entry: the readers UCS each read from every unit of UPS, for reason WHY. */
typedef struct BoundaryLine {
    int *ups, nups;
    int *ucs, nucs;
    const char *why;
} BoundaryLine;

/* Prints units US, comma-separated, wrapped at 92 columns; groups by number alone when
 * there are more than two. Returns the column. */
static int print_units(const IrGraph *g, const int *us, int n, int col, FILE *out)
{
    for (int i = 0; i < n; i++) {
        char label[96];
        if (n > 2 && us[i] <= g->ngroups) snprintf(label, sizeof label, "g%d", us[i]);
        else unit_label(g, us[i], label, sizeof label);
        if (col + (int)strlen(label) + 2 > 92) col = fprintf(out, "\n       ");
        col += fprintf(out, "%s%s", i ? ", " : " ", label);
    }
    return col;
}

/* TEXT, indented by 8, wrapped at 92 columns. */
static void print_wrapped(const char *text, FILE *out)
{
    int col = fprintf(out, "       ");
    while (*text) {
        size_t w = strcspn(text, " ");
        if (col + (int)w + 1 > 92) col = fprintf(out, "\n       ");
        col += fprintf(out, " %.*s", (int)w, text);
        text += w;
        while (*text == ' ') text++;
    }
    fputc('\n', out);
}

static bool same_units(const int *a, int na, const int *b, int nb)
{
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

/* Every pair of kernels with a value between them in the train graph, and why they are
 * two: readers that read the same kernels for the same reason share one entry. */
static void explain_boundaries(const Compiled *c, FILE *out)
{
    const IrGraph *g = &c->p->train;
    if (!g->ngroups) return;
    int n = g->nboundaries, cap = n + 1;
    Boundary *e = xcalloc((size_t)cap, sizeof *e);
    for (int i = 0; i < n; i++) {
        e[i] = (Boundary){ .up = g->boundaries[i].up, .uc = g->boundaries[i].uc };
        split_words(c->p, g, &g->boundaries[i], e[i].why, sizeof e[i].why);
    }
    /* per reader and reason, the units it reads; then readers alike merged */
    BoundaryLine *lines = xcalloc((size_t)cap, sizeof *lines);
    int nlines = 0;
    bool *taken = xcalloc((size_t)cap, sizeof *taken);
    int *ups = xcalloc((size_t)cap, sizeof *ups);
    for (int i = 0; i < n; i++) {
        if (taken[i]) continue;
        int nups = 0;
        for (int j = i; j < n; j++)
            if (!taken[j] && e[j].uc == e[i].uc && strcmp(e[j].why, e[i].why) == 0)
                taken[j] = true, ups[nups++] = e[j].up;
        BoundaryLine *l = NULL;
        for (int k = 0; k < nlines && !l; k++)
            if (strcmp(lines[k].why, e[i].why) == 0 && same_units(lines[k].ups, lines[k].nups, ups, nups))
                l = &lines[k];
        if (!l) {
            l = &lines[nlines++];
            *l = (BoundaryLine){ .ups = xcalloc((size_t)nups, sizeof *ups), .nups = nups,
                                 .ucs = xcalloc((size_t)cap, sizeof *ups), .why = e[i].why };
            memcpy(l->ups, ups, (size_t)nups * sizeof *ups);
        }
        l->ucs[l->nucs++] = e[i].uc;
    }
    fprintf(out, "\nKernel boundaries of the train graph (%d): the kernels that read a value another "
                 "made, from\nwhich, and why they are not one kernel:\n", n);
    for (int k = 0; k < nlines; k++) {
        int col = print_units(g, lines[k].ucs, lines[k].nucs, fprintf(out, " "), out);
        col += fprintf(out, " <-");
        print_units(g, lines[k].ups, lines[k].nups, col, out);
        fputc('\n', out);
        print_wrapped(lines[k].why, out);
        free(lines[k].ups);
        free(lines[k].ucs);
    }
    free(lines);
    free(taken);
    free(ups);
    free(e);
}

static void explain_recompute(const Compiled *c, FILE *out)
{
    const IrProgram *p = c->p;
    const RecomputeSchedule *s = c->schedule;
    fprintf(out, "\nActivation checkpointing: checkpoint = %s", config_checkpoint_name(p->cfg.checkpoint));
    if (p->cfg.checkpoint == CKPT_AUTO) {
        char b[32];
        diag_format_bytes(c->budget, b, sizeof b);
        if (c->budget) fprintf(out, ", budget %s%s", b, c->over_budget ? " (not met)" : "");
        else fputs(", no budget known (no `memory`, no GPU)", out);
    }
    if (!s || s->nnodes == 0) {
        fputs("; nothing recomputed", out);
        if (c->choices.n) fprintf(out, " (of %d schedules on the frontier)", c->choices.n);
        fputc('\n', out);
        return;
    }
    double fwd = c->choices.forward_flops;
    fprintf(out, "; the schedule %d of %d on the frontier: %d segment%s recomputed in the backward, "
                 "%d values, %.3g FLOPs per micro-batch (%.0f%% of the forward's %.3g)\n",
            (int)(s - c->choices.s) + 1, c->choices.n, compiled_segments(c), compiled_segments(c) == 1 ? "" : "s", s->nnodes, s->flops,
            fwd > 0 ? 100 * s->flops / fwd : 0, fwd);
    const char *from = "the inputs";
    for (int k = 0, shown = 0; k < s->nkept; k++) {
        if (s->segment_nodes[k])    /* a kept cut with nothing to recompute before it: no segment */
            fprintf(out, "  segment %d: after %s, up to %s (kept): %d recomputed, %.3g FLOPs\n",
                    ++shown, from, c->kept_words[k], s->segment_nodes[k], s->segment_flops[k]);
        from = c->kept_words[k];
    }
    fprintf(out, "  after %s: kept as the forward left it\n", from);
}

/* The first node of G after ID that reads ID, through casts (autocast's), or -1. */
static int next_reader(const IrGraph *g, int id)
{
    for (int i = id + 1; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++)
            if (g->nodes[i].in[k] == id) return g->nodes[i].op == IR_CAST ? next_reader(g, i) : i;
    return -1;
}

/* The plan's implicit-GEMM candidate (PlanWindow) for the patches made at .net line
 * LINE (one convolution a statement: its line names it), or NULL. */
static const PlanWindow *implicit_candidate(const Plan *plan, int line)
{
    for (int r = 0; r < plan->nwindows; r++) {
        const PlanWindow *w = &plan->windows[r];
        if (plan->graph[w->graph].steps[w->unfold].loc.line == line) return w;
    }
    return NULL;
}

/* Group K of G as "sub_mul_add_line7 (sub, mul, add, relu)": its name and what its
 * members compute, into BUF. */
static void group_words(const IrGraph *g, int k, char *buf, size_t len)
{
    int at = snprintf(buf, len, "%s (", g->groups[k - 1].name);
    const char *sep = "";
    for (int id = 0; id < g->nnodes && at < (int)len; id++) {
        IrOp op = g->nodes[id].op;
        if (g->nodes[id].group != k || ir_node_is_placed(&g->nodes[id])) continue;
        at += snprintf(buf + at, len - (size_t)at, "%s%s", sep, ir_op_name(op));
        sep = ", ";
    }
    if (at < (int)len) snprintf(buf + at, len - (size_t)at, ")");
}

/* What W's product kernel does with the product where it computes its epilogue
 * (PlanWindow.epilogue): "" where it does not. */
static const char *epilogue_words(const Plan *plan, const PlanWindow *w)
{
    static char buf[512];
    char group[256];
    if (w->epilogue < 0) return "";
    const PlanGraph *pg = &plan->graph[w->graph];
    group_words(pg->ir, pg->steps[w->epilogue].group, group, sizeof group);
    snprintf(buf, sizeof buf, ";\n            the product never stored: its kernel computes the group %s on it "
                              "(no transpose, no kernel of its own)", group);
    return buf;
}

/* What the evaluation does with the convolution at .net line LINE where its product
 * follows training's implicit choice (PlanWindow.follows): "" where it does not. */
static const char *follower_words(const Plan *plan, int line)
{
    static char buf[512];
    char group[256];
    for (int r = 0; r < plan->nwindows; r++) {
        const PlanWindow *w = &plan->windows[r];
        const PlanGraph *pg = &plan->graph[w->graph];
        if (w->graph != PG_EVAL || w->follows < 0 || pg->steps[w->unfold].loc.line != line) continue;
        if (w->epilogue < 0) return ";\n            the evaluation's product the same, as training chooses";
        group_words(pg->ir, pg->steps[w->epilogue].group, group, sizeof group);
        snprintf(buf, sizeof buf, ";\n            the evaluation's product the same, as training chooses, its kernel "
                                  "computing the group %s", group);
        return buf;
    }
    return "";
}

/* Convolutions and pooling: each window's patches (UNFOLD) and what reads them. */
static void explain_windows(const Compiled *c, FILE *out)
{
    const IrProgram *p = c->p;
    const IrGraph *g = &p->forward;
    bool any = false;
    for (int id = 0; id < g->nnodes; id++) {
        const IrNode *n = &g->nodes[id];
        if (n->op != IR_UNFOLD) continue;
        if (!any) fputs("\nImages: convolutions and pooling over their windows' patches (im2col)\n", out);
        any = true;
        const IrWindow *w = &n->win;
        char ps[96], rs[96];
        int r = next_reader(g, id);
        ir_shape_str(p, &n->shape, ps, sizeof ps);
        ir_shape_str(p, r >= 0 ? &g->nodes[r].shape : &n->shape, rs, sizeof rs);
        fprintf(out, "  line %-4d %dx%d window, stride %dx%d, padding %dx%d, dilation %dx%d: patches %s\n",
                n->loc.line, w->kernel[0], w->kernel[1], w->stride[0], w->stride[1], w->pad[0],
                w->pad[1], w->dilation[0], w->dilation[1], ps);
        if (n->flags & IR_WINDOW_ROWS)
            fprintf(out, "            times the weight in one GEMM over every patch of the batch: "
                         "%s, channels last (NHWC); transposed to the language's NCHW\n", rs);
        const PlanWindow *cand = implicit_candidate(c->plan, n->loc.line);
        if ((n->flags & IR_WINDOW_ROWS) && cand && cand->implicit)
            fprintf(out, "            max-autotune's candidate: implicit GEMMs, the patches gathered from the "
                         "image, never written%s%s%s%s\n", cand->store_reader >= 0 && cand->epilogue < 0 ?
                         ";\n            the product stored NCHW by its kernel, no transpose" : "",
                    epilogue_words(c->plan, cand), cand->grad_transpose >= 0 ? ";\n"
                         "            its gradient read NCHW by the backward's GEMMs, no transpose" : "",
                    follower_words(c->plan, n->loc.line));
        if ((n->flags & IR_WINDOW_ROWS) && cand && cand->conv)
            fprintf(out, "            on a device with cuDNN: %s on the NCHW tensors, no patches, no "
                         "transpose%s\n            (the library's own algorithms; max-autotune times "
                         "each of its list%s)\n",
                    cand->nreaders == 1 ? "its forward call" : cand->fold >= 0 ? "forward, filter and data gradient calls"
                                                                             : "forward and filter gradient calls",
                    cand->fold >= 0 ? ", no col2im" : "", cand->implicit ? " against the steps and the implicit GEMMs"
                                                                          : " against the steps");
        if (!(n->flags & IR_WINDOW_ROWS))
            fprintf(out, "            %s over the kernel axis: %s%s\n", r >= 0 ? ir_op_name(g->nodes[r].op) : "?", rs,
                    n->group ? ", each kernel that reads the patches gathering them from the image (never "
                               "stored)" : "");
    }
}

static void explain_memory(const Compiled *c, FILE *out)
{
    char peak[32], pers[32], act[32];
    diag_format_bytes(c->layout.arena_bytes, peak, sizeof peak);
    diag_format_bytes(c->layout.persistent_bytes, pers, sizeof pers);
    diag_format_bytes(compiled_activation_bytes(c), act, sizeof act);
    char ranks[48] = "";
    if (c->p->cfg.ranks > 1) snprintf(ranks, sizeof ranks, " rows on each of %d ranks", c->p->cfg.ranks);
    bool infer = c->p->inference;
    fprintf(out, "\nMemory plan (batch %lld%s): peak %s = %s persistent (%s)\n  + %s for the %s's "
                 "activations and temporaries\n", (long long)c->symmax[0], ranks, peak, pers,
            infer ? "parameters and running statistics, inputs: no optimizer state"
                  : copy_type(c->p) != DT_F32 ? "parameters, optimizer state, half copies, inputs, data"
                                 : "parameters, optimizer state, inputs, data",
            act, infer ? "prediction" : "train step");
    if (!infer)
        fputs("  (a run with a test split lays the arena out for its evaluation batch too, up to\n"
              "  1000 rows, when that is larger than the training batch)\n", out);
    for (int gid = 0; gid < PG_NUM; gid++) {
        if (!c->plan->graph[gid].ir) continue;
        char b[32];
        diag_format_bytes(c->layout.graph_bytes[gid], b, sizeof b);
        fprintf(out, "  %-12s %s\n", codegen_graph_label[gid], b);
    }
}

static bool in_bucket(const IrNode *n) { return ir_node_fuse(n) == IR_FUSE_COLLECTIVE; }

/* Bytes of the buffer node N's collective runs on, per member: its value for a sum, one
 * slice per rank for the others. */
static int64_t bucket_member_bytes(const IrGraph *g, const IrNode *n, int ranks, const int64_t *symmax)
{
    IrSlice side = ir_op_info[n->op].slice;
    if (side == IR_SLICE_WHOLE) return ir_numel(&n->shape, symmax) * 4;
    const Shape *slice = side == IR_SLICE_IN ? &g->nodes[n->in[0]].shape : &n->shape;
    return (int64_t)ranks * ir_numel(slice, symmax) * 4;
}

/* One bucket of G: its members, bytes, and the time comm.h's model predicts for it (the
 * GPUs' when ON_GPUS). */
static double explain_bucket(const Compiled *c, const IrGraph *g, int b, bool on_gpus, FILE *out)
{
    int members = 0, ready = 0, ranks = c->p->cfg.ranks;
    IrOp op = IR_ALLREDUCE;
    int64_t bytes = 0;
    char names[160] = "";
    size_t used = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = &g->nodes[i];
        if (!in_bucket(n) || n->index != b) continue;
        members++;
        op = n->op;
        bytes += bucket_member_bytes(g, n, ranks, c->symmax);
        if (n->in[0] > ready) ready = n->in[0];
        if (used < sizeof names - 40)
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", members > 1 ? ", " : "",
                                     n->name ? n->name : "?");
        else if (used < sizeof names - 4)
            used += (size_t)snprintf(names + used, sizeof names - used, ", ...");
    }
    static const char *const what[] = {"sum", "reduce-scatter", "all-gather"};
    double t = on_gpus ? comm_predict_gpu(comm_op_of(op), bytes, ranks)
                       : comm_predict(comm_op_of(op), bytes, ranks);
    char size[32];
    diag_format_bytes((size_t)bytes, size, sizeof size);
    fprintf(out, "  bucket %d: %s of %d value%s, %s, ready after node %%%d of %d; predicted %.3f ms "
                 "(%s)\n", b, what[comm_op_of(op)], members, members == 1 ? "" : "s", size, ready,
            g->nnodes, t * 1e3, names);
    return t;
}

/* shard = optimizer: the optimizer state a rank keeps, against what every rank would. */
static void explain_shard(const IrProgram *p, FILE *out)
{
    int64_t kept = 0, whole = 0;
    for (int i = 0; i < p->ntensors; i++) {
        const IrTensor *t = &p->tensors[i];
        if (!t->sharded) continue;
        kept += ir_numel(&t->shape, NULL) * 4;
        whole += ir_numel(&p->tensors[t->param_of].shape, NULL) * 4;
    }
    if (!whole) return;
    char k[32], w[32];
    diag_format_bytes((size_t)kept, k, sizeof k);
    diag_format_bytes((size_t)whole, w, sizeof w);
    fprintf(out, "  shard = optimizer: each rank keeps %s of optimizer state, a slice of every "
                 "tensor of it (%s unsharded), updates its slices of the parameters and "
                 "gathers the rest\n", k, w);
}

/* Several ranks: the collectives of the training step, bucket by bucket, each with the
 * time comm.h's model predicts for it: NCCL's ON_GPUS, else MPI's. */
static void explain_ranks(const Compiled *c, bool on_gpus, FILE *out)
{
    const IrProgram *p = c->p;
    const IrGraph *g = &p->train;
    int ranks = p->cfg.ranks, nbuckets = 0;
    if (ranks <= 1) return;
    for (int i = 0; i < g->nnodes; i++)
        if (in_bucket(&g->nodes[i]) && g->nodes[i].index >= nbuckets) nbuckets = g->nodes[i].index + 1;
    fprintf(out, "\nRanks: %d, each taking %lld or so of every batch's %lld rows; the training step's "
                 "collectives\n(%s), in buckets, each started as soon as the step has computed its "
                 "values:\n", ranks, (long long)(p->cfg.batch / ranks), (long long)p->cfg.batch,
            on_gpus ? "NCCL, one GPU a rank" : "MPI");
    double total = 0;
    for (int b = 0; b < nbuckets; b++) total += explain_bucket(c, g, b, on_gpus, out);
    if (on_gpus)
        fprintf(out, "  predicted %.3f ms per optimizer step, at %.0f GB/s of bus bandwidth and %.0f us "
                     "per collective (published nccl-tests figures for H100s on NVLink; on PCIe "
                     "about a tenth of the bandwidth)\n", total * 1e3, COMM_GPU_BANDWIDTH / 1e9,
                COMM_GPU_LATENCY_S * 1e6);
    else
        fprintf(out, "  predicted %.3f ms per optimizer step, at %.1f GB/s and %.1f us per message "
                     "(MPI over shared memory)\n", total * 1e3, COMM_BANDWIDTH / 1e9, COMM_LATENCY_S * 1e6);
    explain_shard(p, out);
}

/* The kernel of graph GID's step that runs fusion group K, or NULL. */
static const char *group_kernel(const Plan *pl, PlanGraphId gid, int k)
{
    const PlanGraph *pg = &pl->graph[gid];
    for (int i = 0; i < pg->nsteps; i++)
        if (pg->steps[i].kind == STEP_LAUNCH && pg->steps[i].group == k)
            return pl->kernels[pg->steps[i].launch.kernel].name;
    return NULL;
}

/* The group of the gradient of softmax SM, or of checkpointing's copy of it (the same
 * .net location), or 0. */
static int backward_group(const IrGraph *g, int sm)
{
    SrcLoc at = g->nodes[sm].loc;
    for (int u = sm + 1; u < g->nnodes; u++) {
        const IrNode *n = &g->nodes[u];
        SrcLoc of = n->op == IR_SOFTMAX_GRAD ? g->nodes[n->in[1]].loc : (SrcLoc){ 0, 0 };
        if (n->op == IR_SOFTMAX_GRAD && of.line == at.line && of.col == at.col) return n->group;
    }
    return 0;
}

/* How softmax SM's attention runs (fusion's decision, compiler/fusion.c). */
static void attention_line(const Compiled *c, PlanGraphId gid, const IrAttention *a, FILE *out)
{
    const IrGraph *g = c->plan->graph[gid].ir;
    int sm = a->sm;
    const Shape *s = &g->nodes[a->s].shape;
    int64_t heads = s->dim[1], t = s->dim[2], width = g->nodes[a->q].shape.dim[3];
    int64_t batch = c->p->cfg.batch;
    fprintf(out, "  line %-4d %lld head%s of width %lld over %lld positions%s: ", g->nodes[sm].loc.line,
            (long long)heads, heads == 1 ? "" : "s", (long long)width, (long long)t, a->causal ? ", causal" : "");
    int k = g->nodes[sm].group;
    if (k && g->groups[k - 1].kind == IR_GROUP_ATTENTION) {
        int kb = backward_group(g, sm);
        const char *fwd = group_kernel(c->plan, gid, k), *bwd = kb ? group_kernel(c->plan, gid, kb) : NULL;
        double lse = (double)(heads * t * 4 * batch);
        fprintf(out, "fused, %s%s%s; the probabilities never stored, the rows' log-sum-exp "
                     "[N, %lld, %lld] (f32) %.2f MB at batch %lld\n", fwd ? fwd : "?",
                bwd ? " and " : "", bwd ? bwd : "", (long long)heads, (long long)t, lse / 1e6,
                (long long)batch);
        return;
    }
    const char *why = c->plan->mode == PLAN_EAGER ? "eager runs each op alone"
                      : width > IR_ATTENTION_MAX_HEAD ? "its heads are wider than the fused kernels' 128"
                      : "not the whole chain the fused kernels take: another reader or op "
                        "among its links";
    double bytes = (double)(heads * t * t) * (double)ir_dtype_size(g->nodes[sm].dtype) * (double)batch;
    fprintf(out, "the composition (%s): scores and probabilities [N, %lld, %lld, %lld] stored, "
                 "the probabilities (%s) %.2f MB at batch %lld\n", why, (long long)heads,
            (long long)t, (long long)t, ir_dtype_name(g->nodes[sm].dtype), bytes / 1e6, (long long)batch);
}

/* Each attention of the training graph (else of the evaluation's): its heads and
 * positions, and how it runs. */
static void explain_attention(const Compiled *c, FILE *out)
{
    PlanGraphId gid = c->plan->graph[PG_TRAIN].ir ? PG_TRAIN : PG_EVAL;
    const IrGraph *g = c->plan->graph[gid].ir;
    bool any = false;
    for (int id = 0; g && id < g->nnodes; id++) {
        IrAttention a;
        if (g->nodes[id].recompute || !ir_attention_chain(g, id, &a)) continue;
        if (!any) fputs("\nAttention (the composition's softmax and products, or one kernel each way "
                        "in the manner of FlashAttention):\n", out);
        any = true;
        attention_line(c, gid, &a, out);
    }
}

/* The train graph's sums split across blocks (cuda_reduce_to_split), by line. */
static void explain_splits(const Compiled *c, FILE *out)
{
    const PlanGraph *pg = &c->plan->graph[PG_TRAIN];
    int n = 0;
    for (int i = 0; i < pg->nsteps; i++) {
        const PlanStep *s = &pg->steps[i];
        if (s->sums_parts <= 0) continue;
        if (!n++)
            fprintf(out, "\nSums split across blocks (too few columns to fill the GPU: each tile's rows\n"
                         "shared by blocks, their sums in double added in order by a second launch):\n");
        fprintf(out, "  %s (line %d): %d parts\n", s->what, s->loc.line, s->sums_parts);
    }
}

void compiled_explain(const Compiled *c, bool on_gpus, FILE *out)
{
    const IrProgram *p = c->p;
    int gemms = 0;
    int steps = compiled_steps_per_train(c, &gemms);
    fprintf(out, "cgc explain: model %s, mode %s, precision %s, batch %lld\n\n",
            p->model_name ? p->model_name : "?", plan_mode_name(c->plan->mode),
            config_precision_name(p->cfg.precision), (long long)p->cfg.batch);
    explain_precision(c, out);
    explain_groups(c, out);
    explain_boundaries(c, out);
    explain_recompute(c, out);
    explain_windows(c, out);
    explain_attention(c, out);
    explain_splits(c, out);
    explain_memory(c, out);
    explain_ranks(c, on_gpus, out);
    compiled_explain_roofline(c, out);
    if (p->inference)
        fprintf(out, "\nKernels per batch predicted: %d launches, of which %d GEMMs\n", steps, gemms);
    else
        fprintf(out, "\nKernels per training step: %d launches, of which %d GEMMs (plus the data "
                     "pipeline's 2 gathers, 1 loss tracker%s)\n", steps, gemms,
                c->plan->step_state >= 0 ? " and 1 step advance" : "");
    if (plan_mode_captures(c->plan->mode))
        fprintf(out, "%s: on a GPU, each micro-batch's launches are captured as one CUDA "
                     "graph at the\nsecond full batch and replayed from then on (the step "
                     "counter lives on the device).\n", plan_mode_name(c->plan->mode));
}
