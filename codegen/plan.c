/* plan.c: the plan: a buffer per value, a launch or GEMM per computing node (eager), or
 * per fusion group (default).
 *
 * For each graph of the program (train, train_micro, eval, forward) the nodes are
 * visited in order. READ, INPUT and same-dtype RESHAPE nodes are views of the buffer
 * they read (the persistent tensor, the input, the reshaped value), CONST nodes get a
 * PB_CONST buffer the runtime fills once, and every other node gets a buffer of its own
 * and one step: a GEMM for MATMUL, else a kernel that cuda.c renders. The ASSIGNs come
 * last, as copies, because IR semantics put every write after the whole step.
 *
 * In the default mode the members of a fusion group become one kernel (fused.c), launched
 * where the group's last member stands, and groups sharing a `multi` number one launch
 * (split when their parameters would not fit one kernel). Only members read outside
 * their group, or graph outputs, get buffers; the others live in registers, and ASSIGN
 * members store into their tensor inside the kernel, so they need no copy at the end.
 * A GEMM group is no kernel but one GEMM step whose cuBLASLt epilogue adds the bias and
 * applies the activation (gemm_group_step). Nodes outside any group are planned as in
 * eager.
 *
 * Kernels whose text is identical (same parameters, same body) are shared across nodes
 * and graphs: the first use names the kernel, and its comment lists every use with the
 * .net line it came from, so a reader can go from any kernel back to the model.
 */
#include "codegen_impl.h"

#include <stdlib.h>
#include <string.h>

#include "../base/text.h"

/* The Plan and what it owns besides its arrays; plan_build hands out &owner->plan. */
typedef struct PlanOwner {
    Plan plan;
    void **owned;           /* what the plan's strings and launch arguments point into */
    int nowned, capowned;
} PlanOwner;

/* Per kernel, while building: what makes two kernels the same, and who uses it. */
typedef struct KernelInfo {
    char *key;          /* block, parameters and body: everything but name and comment */
    char *signature;    /* the parameter list */
    char *body;
    char *head;         /* device functions before it */
    KernelUses uses;    /* the comment's lines */
} KernelInfo;

typedef struct Builder {
    PlanOwner *owner;
    Plan *plan;
    KernelInfo *info;
    int capbuffers, capkernels, capsteps;
    PlanGraph *graph;   /* the graph being built */
    PlanGraphId gid;
    IrSpan *span;       /* its groups' members (ir_group_spans) */
    RenderScratch *scratch;
    int *lse;           /* per node of the graph: the log-sum-exp buffer of an attention
                         * group's softmax (attention_step), or -1 */
    const int64_t *symmax;  /* the symbols' largest values, or NULL (plan_build) */
} Builder;

enum { MAX_LISTED_OPS = 10 };

const char *const codegen_graph_label[PG_NUM] = { "train", "train_micro", "eval", "forward", "decode" };

/* ---- what the plan owns ---- */

static void *own_block(Builder *b, void *p)
{
    PlanOwner *o = b->owner;
    if (o->nowned == o->capowned) {
        o->capowned = o->capowned ? o->capowned * 2 : 64;
        o->owned = xrealloc(o->owned, (size_t)o->capowned * sizeof *o->owned);
    }
    o->owned[o->nowned++] = p;
    return p;
}

static const char *own(Builder *b, char *s) { return own_block(b, s); }

static const char *ownf(Builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *ownf(Builder *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char buf[256];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return own(b, xstrdup(buf));
}

/* A table or binding name for the host plan: only [A-Za-z0-9_.] kept. */
static const char *plan_name(Builder *b, const char *s)
{
    char buf[80];
    size_t n = 0;
    for (; *s && n + 1 < sizeof buf; s++) {
        char c = *s;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.';
        buf[n++] = ok ? c : '_';
    }
    buf[n] = '\0';
    return own(b, xstrdup(buf));
}

/* The .net file's base name with anything but [A-Za-z0-9._-] replaced. */
static const char *source_base_name(Builder *b, const char *path)
{
    const char *base = path ? strrchr(path, '/') : NULL;
    char buf[80];
    text_sanitise(buf, sizeof buf, base ? base + 1 : path, "model.net");
    return own(b, xstrdup(buf));
}

/* ---- buffers ---- */

static int add_buffer(Builder *b, PlanBuffer buf)
{
    Plan *pl = b->plan;
    if (pl->nbuffers == b->capbuffers) {
        b->capbuffers = b->capbuffers ? b->capbuffers * 2 : 64;
        pl->buffers = xrealloc(pl->buffers, (size_t)b->capbuffers * sizeof *pl->buffers);
    }
    pl->buffers[pl->nbuffers] = buf;
    return pl->nbuffers++;
}

static const char *node_what(Builder *b, const IrNode *n, int id)
{
    return n->name ? plan_name(b, n->name) : ownf(b, "%%%d", id);
}

/* The buffer of node ID of G: a view, a constant, or storage of its own. */
static int node_buffer(Builder *b, const IrGraph *g, int id)
{
    const IrNode *n = &g->nodes[id];
    const Plan *pl = b->plan;
    PlanBuffer buf = { .kind = PB_NODE, .dtype = n->dtype, .shape = n->shape, .alias_of = -1,
                       .index = id, .graph = b->gid, .what = node_what(b, n, id) };
    switch (ir_op_info[n->op].family) {
    case IR_FAMILY_ASSIGN: return -1;
    case IR_FAMILY_READ: buf.alias_of = pl->tensor_buffer_base + n->index; break;
    case IR_FAMILY_INPUT: buf.alias_of = pl->input_buffer[n->index]; break;
    case IR_FAMILY_CONST:
        buf.kind = PB_CONST;
        buf.value = n->value;
        break;
    case IR_FAMILY_RESHAPE:
        if (g->nodes[n->in[0]].dtype == n->dtype)
            buf.alias_of = plan_buffer_root(pl, b->graph->node_buffer[n->in[0]]);
        break;
    /* A sum over the ranks is made in place, in its input's buffer (PlanCollective);
     * the slices of shard = optimizer have storage of their own. */
    case IR_FAMILY_COLLECTIVE:
        if (ir_op_info[n->op].slice == IR_SLICE_WHOLE) buf.alias_of = plan_buffer_root(pl, b->graph->node_buffer[n->in[0]]);
        break;
    case IR_FAMILY_RUNTIME: case IR_FAMILY_ELEMENTWISE: case IR_FAMILY_BROADCAST:
    case IR_FAMILY_DROPOUT: case IR_FAMILY_REDUCE: case IR_FAMILY_REDUCE_TO:
    case IR_FAMILY_TRANSPOSE: case IR_FAMILY_MATMUL: case IR_FAMILY_SOFTMAX:
    case IR_FAMILY_SOFTMAX_GRAD: case IR_FAMILY_CROSS_ENTROPY: case IR_FAMILY_CE_GRAD:
    case IR_FAMILY_COUNT_CORRECT: case IR_FAMILY_WINDOW: case IR_FAMILY_PERMUTE:
    case IR_FAMILY_EMBED: case IR_FAMILY_EMBED_GRAD: case IR_FAMILY_ARANGE:
    case IR_FAMILY_CAUSAL_MASK:
        break;   /* storage of its own */
    case IR_FAMILY_MODE_SWITCH: CGC_INTERNAL("a mode switch outlived training lowering");
    }
    return add_buffer(b, buf);
}

/* Whether node ID is computed by a step of its own: not placed, not a view of its input,
 * not an assignment (a copy or a kernel's store) nor a collective (the job's step). */
static bool computes(const IrGraph *g, int id)
{
    const IrNode *n = &g->nodes[id];
    switch (ir_node_fuse(n)) {
    case IR_FUSE_LEAF: case IR_FUSE_EFFECT: case IR_FUSE_COLLECTIVE:
        return false;
    case IR_FUSE_VIEW: return g->nodes[n->in[0]].dtype != n->dtype;
    case IR_FUSE_SCALAR: case IR_FUSE_POINTWISE: case IR_FUSE_RANDOM: case IR_FUSE_REDUCTION:
    case IR_FUSE_WINDOW: case IR_FUSE_MATMUL: case IR_FUSE_BARRIER:
        return true;
    }
    return true;
}

/* ---- kernels ---- */

/* Whether pointer parameter I of D may be __restrict__: no other parameter names the
 * same memory where one of the two is written (an in-place assignment reads the tensor
 * through one and writes it through another; the promise would then be false, and the
 * compiler free to reorder the read after the write). */
static bool may_restrict(const Plan *pl, const KernelDraft *d, int i)
{
    const DraftParam *p = &d->param[i];
    if (p->arg.kind != ARG_BUFFER) return true;   /* a pointer to nothing the plan holds */
    bool writes = plan_param_written(p->ctype);
    int root = plan_buffer_root(pl, p->arg.index);
    for (int j = 0; j < d->nparams; j++) {
        const DraftParam *q = &d->param[j];
        if (j == i || q->type != PP_PTR || q->arg.kind != ARG_BUFFER) continue;
        if ((writes || plan_param_written(q->ctype)) && plan_buffer_root(pl, q->arg.index) == root)
            return false;
    }
    return true;
}

/* D's parameter list; RESTRICT[i]: parameter i is __restrict__ (may_restrict). A packed
 * kernel's is its slots (plan.h). */
static char *draft_signature(const KernelDraft *d, const bool *restrict_)
{
    StrBuf s = { 0 };
    if (d->packed) {
        sb_printf(&s, "const __grid_constant__ cgc_slots<%d> slots", d->nparams);
        return s.s;
    }
    for (int i = 0; i < d->nparams; i++) {
        const DraftParam *p = &d->param[i];
        const char *qual = p->type != PP_PTR ? " " : restrict_[i] ? "__restrict__ " : "";
        sb_printf(&s, "%s%s%s%s", i ? ", " : "", p->ctype, qual, p->name);
    }
    return s.s ? s.s : xstrdup("");
}

/* Whether D's text holds anything a block shares: a barrier, shared memory or a
 * block-wide sum, whose order follows the block's warps. */
static bool block_wide(const KernelDraft *d)
{
    static const char *const shared[] = {"__syncthreads", "__shared__", "cgc_block_", "cgc_column_sum"};
    for (int i = 0; i < (int)(sizeof shared / sizeof shared[0]); i++)
        if ((d->body.s && strstr(d->body.s, shared[i])) || (d->head.s && strstr(d->head.s, shared[i])))
            return true;
    return false;
}

static int add_kernel(Builder *b, const KernelDraft *d)
{
    Plan *pl = b->plan;
    if (d->any_block && block_wide(d))
        CGC_INTERNAL("kernel %s is marked for any block but shares values across its block", d->name);
    bool *restrict_ = xcalloc((size_t)(d->nparams ? d->nparams : 1), sizeof *restrict_);
    for (int i = 0; i < d->nparams && !d->packed; i++)
        restrict_[i] = d->param[i].type == PP_PTR && may_restrict(pl, d, i);
    char *sig = draft_signature(d, restrict_);
    StrBuf key = { 0 };
    sb_printf(&key, "%s%d%c(%s){%s}", d->head.s ? d->head.s : "", d->block, d->any_block ? '*' : ' ', sig,
              d->body.s ? d->body.s : "");
    for (int k = 0; k < pl->nkernels; k++) {
        if (b->info[k].key && strcmp(b->info[k].key, key.s) == 0) {
            free(restrict_), free(sig);
            sb_free(&key);
            return k;
        }
    }
    if (pl->nkernels == b->capkernels) {
        b->capkernels = b->capkernels ? b->capkernels * 2 : 32;
        pl->kernels = xrealloc(pl->kernels, (size_t)b->capkernels * sizeof *pl->kernels);
        b->info = xrealloc(b->info, (size_t)b->capkernels * sizeof *b->info);
    }
    PlanKernel *k = &pl->kernels[pl->nkernels];
    KernelInfo *info = &b->info[pl->nkernels];
    memset(k, 0, sizeof *k);
    memset(info, 0, sizeof *info);
    char name[DRAFT_NAME_MAX + 16];
    snprintf(name, sizeof name, "%s", d->name);
    plan_unique_kernel_name(pl, name, sizeof name);
    k->name = xstrdup(name);
    k->block = d->block;
    k->any_block = d->any_block;
    k->packed = d->packed;
    k->nparams = d->nparams;
    plan_kernel_params(k, d->nparams);
    for (int i = 0; i < d->nparams; i++) {
        k->param[i] = d->param[i].type;
        k->param_ctype[i] = d->param[i].ctype;
        k->param_restrict[i] = restrict_[i];
    }
    free(restrict_);
    info->key = key.s;
    info->signature = sig;
    info->body = xstrdup(d->body.s ? d->body.s : "");
    info->head = xstrdup(d->head.s ? d->head.s : "");
    return pl->nkernels++;
}

/* Adds LINE to the comment of kernel K: where this use of it comes from. */
static void add_use_line(Builder *b, int k, const char *line)
{
    kernel_uses_add(&b->info[k].uses, "%s", line);
}

static void note_use(Builder *b, int k, const IrNode *n, int id, const char *what)
{
    char who[64] = "", line[256];
    if (n->name) {
        char m[40];
        codegen_mangle(m, sizeof m, n->name);
        snprintf(who, sizeof who, ", computes %s", m);
    }
    const char *src = b->plan->source_name;
    if (n->loc.line > 0)
        snprintf(line, sizeof line, "%s line %d: %s%s (%s graph, node %%%d)", src, n->loc.line,
                 what, who, codegen_graph_label[b->gid], id);
    else
        snprintf(line, sizeof line, "%s: %s%s (%s graph, node %%%d, no source line)", src, what,
                 who, codegen_graph_label[b->gid], id);
    add_use_line(b, k, line);
}

/* "mlp.net lines 6, 7: add, relu (train graph, nodes %8..%10)": group K's distinct
 * .net lines and op names, in order. */
static void note_group_use(Builder *b, int kernel, int k)
{
    const IrGraph *g = b->graph->ir;
    StrBuf lines = { 0 }, ops = { 0 };
    int first = b->span[k].first, last = b->span[k].end - 1, nlines = 0, nops = 0;
    for (int id = first; id <= last; id++) {
        const IrNode *n = &g->nodes[id];
        bool seen_line = n->loc.line <= 0, seen_op = false;
        for (int j = first; j < id; j++) {
            seen_line |= g->nodes[j].loc.line == n->loc.line;
            seen_op |= g->nodes[j].op == n->op;
        }
        if (!seen_line) sb_printf(&lines, "%s%d", nlines++ ? ", " : "", n->loc.line);
        if (seen_op || ir_node_is_placed(n)) continue;
        if (nops++ < MAX_LISTED_OPS) sb_printf(&ops, "%s%s", nops > 1 ? ", " : "", ir_op_name(n->op));
        else if (nops == MAX_LISTED_OPS + 1) sb_puts(&ops, ", ...");
    }
    char line[512];
    if (nlines)
        snprintf(line, sizeof line, "%s line%s %s: %s (%s graph, nodes %%%d..%%%d)",
                 b->plan->source_name, nlines > 1 ? "s" : "", lines.s, ops.s ? ops.s : "",
                 codegen_graph_label[b->gid], first, last);
    else
        snprintf(line, sizeof line, "%s: %s (%s graph, nodes %%%d..%%%d, no source line)",
                 b->plan->source_name, ops.s ? ops.s : "", codegen_graph_label[b->gid], first, last);
    add_use_line(b, kernel, line);
    sb_free(&lines);
    sb_free(&ops);
}

/* The kernel's final text: the device functions it calls, the comment of uses, the
 * signature, the body. */
static char *kernel_source(const PlanKernel *k, const KernelInfo *info)
{
    StrBuf s = { 0 };
    sb_puts(&s, info->head);
    kernel_uses_comment(&s, &info->uses, " */\n");
    sb_printf(&s, "extern \"C\" __global__ void __launch_bounds__(%d)\n%s(", k->block, k->name);
    if (strlen(info->signature) + strlen(k->name) < 96) {
        sb_puts(&s, info->signature);
    } else {   /* one parameter per line */
        const char *p = info->signature;
        sb_puts(&s, "\n    ");
        for (; *p; p++) {
            if (p[0] == ',' && p[1] == ' ') {
                sb_puts(&s, ",\n    ");
                p++;
            } else {
                sb_printf(&s, "%c", *p);
            }
        }
    }
    sb_printf(&s, ")\n{\n%s}\n", info->body);
    return s.s;
}

/* ---- steps ---- */

static PlanStep *add_step(Builder *b, PlanStepKind kind, const IrNode *n, int id,
                          const char *what)
{
    PlanGraph *pg = b->graph;
    if (pg->nsteps == b->capsteps) {
        b->capsteps = b->capsteps ? b->capsteps * 2 : 64;
        pg->steps = xrealloc(pg->steps, (size_t)b->capsteps * sizeof *pg->steps);
    }
    PlanStep *s = &pg->steps[pg->nsteps++];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->node = id;
    s->loc = n ? n->loc : (SrcLoc){ 0, 0 };
    s->what = what;
    return s;
}

/* A step launching kernel K as draft D describes, for node ID (N). Frees D (draft_free). */
static PlanStep *add_launch(Builder *b, int k, KernelDraft *d, const IrNode *n, int id,
                            const char *what)
{
    PlanStep *s = add_step(b, STEP_LAUNCH, n, id, what);
    s->launch.kernel = k;
    s->launch.work = d->work;
    s->launch.items_per_block = d->items_per_block;
    s->launch.max_blocks = d->max_blocks;
    s->launch.nargs = d->nparams;
    s->launch.arg = own_block(b, xmalloc((size_t)(d->nparams ? d->nparams : 1) * sizeof *s->launch.arg));
    for (int i = 0; i < d->nparams; i++) s->launch.arg[i] = d->param[i].arg;
    draft_free(d);
    return s;
}

/* A launch of draft D for node ID (N), described as WHAT in the host plan and as
 * OP_WORDS in the kernel's comment. Frees D (draft_free). */
static void launch_draft(Builder *b, KernelDraft *d, const IrNode *n, int id, const char *what,
                         const char *op_words)
{
    int k = add_kernel(b, d);
    note_use(b, k, n, id, op_words);
    add_launch(b, k, d, n, id, what);
}

static RenderCtx render_ctx(const Builder *b)
{
    return (RenderCtx){ .p = b->plan->p, .g = b->graph->ir, .node_buffer = b->graph->node_buffer,
                        .plan = b->plan, .span = b->span, .scratch = b->scratch,
                        .split = { 1, -1 } };
}

/* ---- split reductions ---- */

/* How sum node ID of XS in a launch of its own is split, with a buffer for its parts:
 * [count, nout] doubles. A REDUCE_TO: cuda_reduce_to_split; a sum or mean along an axis:
 * cuda_reduce_axis_split. A sum no buffer keeps, or a maximum, is not split. */
static ReduceSplit reduce_split(Builder *b, int id, const Shape *xs)
{
    const IrNode *n = &b->graph->ir->nodes[id];
    int count = 1;
    if (b->graph->node_buffer[id] < 0) return (ReduceSplit){ 1, -1 };
    if (ir_op_reduces_to_shape(n->op)) count = cuda_reduce_to_split(xs, &n->shape, b->symmax);
    else if (ir_op_info[n->op].combine == IR_COMBINE_ADD) count = cuda_reduce_axis_split(xs, n->axis, b->symmax);
    if (count < 2) return (ReduceSplit){ 1, -1 };
    Shape parts = { .rank = 2, .dim = { count, 2 * ir_numel(&n->shape, NULL) } };
    int buf = add_buffer(b, (PlanBuffer){ .kind = PB_NODE, .dtype = DT_F32, .shape = parts, .alias_of = -1,
                                          .index = id, .graph = b->gid,
                                          .what = ownf(b, "%s.parts", node_what(b, n, id)) });
    return (ReduceSplit){ count, buf };
}

/* The second pass of split sum node ID, after the launch of GROUP (0: its own). */
static void sum_parts_step(Builder *b, int id, ReduceSplit split, int group)
{
    const IrNode *n = &b->graph->ir->nodes[id];
    RenderCtx ctx = render_ctx(b);
    KernelDraft d;
    memset(&d, 0, sizeof d);
    cuda_render_reduce_parts(&ctx, id, split, &d);
    draft_root_args(b->plan, &d);
    int k = add_kernel(b, &d);
    note_use(b, k, n, id, "the parts of a split sum");
    const char *what = ownf(b, "sum the parts of %s %s", ir_op_name(n->op), node_what(b, n, id));
    PlanStep *s = add_launch(b, k, &d, n, id, what);
    s->group = group;
    s->sums_parts = split.count;
}

static void launch_node(Builder *b, int id)
{
    const IrNode *n = &b->graph->ir->nodes[id];
    RenderCtx ctx = render_ctx(b);
    if (ir_op_is_reduction(n->op)) ctx.split = reduce_split(b, id, &b->graph->ir->nodes[n->in[0]].shape);
    KernelDraft d;
    memset(&d, 0, sizeof d);
    cuda_render_node(&ctx, id, &d);
    draft_root_args(b->plan, &d);
    const char *what = ownf(b, "%s %s", ir_op_name(n->op), node_what(b, n, id));
    launch_draft(b, &d, n, id, what, ir_op_name(n->op));
    if (ctx.split.count > 1) sum_parts_step(b, id, ctx.split, 0);
}

/* A copy of buffer SRC into a new buffer of SHAPE and TYPE (broadcast, converted), for
 * a GEMM operand cuBLAS cannot take as it is. Returns the new buffer. */
static int materialise(Builder *b, int id, int src, DType src_type, const Shape *src_shape,
                       DType type, const Shape *shape, const char *role)
{
    const IrNode *n = &b->graph->ir->nodes[id];
    int buf = add_buffer(b, (PlanBuffer){ .kind = PB_NODE, .dtype = type, .shape = *shape,
                                          .alias_of = -1, .index = id, .graph = b->gid,
                                          .what = ownf(b, "%s.%s", node_what(b, n, id), role) });
    RenderCtx ctx = render_ctx(b);
    KernelDraft d;
    memset(&d, 0, sizeof d);
    char name[DRAFT_NAME_MAX];
    snprintf(name, sizeof name, "matmul_%s_%s_%d", role, codegen_graph_label[b->gid], id);
    cuda_render_copy(&ctx, name, buf, type, shape, src, src_type, src_shape, &d);
    launch_draft(b, &d, n, id, ownf(b, "prepare %s of matmul %s", role, node_what(b, n, id)),
                 "matmul operand copy");
    return buf;
}

/* Leading (batch) dims of S, without the last two. */
static Shape lead_dims(const Shape *s)
{
    Shape r = *s;
    r.rank = s->rank - 2;
    return r;
}

static bool all_ones(const Shape *s)
{
    for (int i = 0; i < s->rank; i++)
        if (s->dim[i] != 1) return false;
    return true;
}

/* One GEMM operand: buffer and whether it is batched, materialised when its batch
 * dims neither match C's nor are absent, or its type is not TYPE. */
static int gemm_operand(Builder *b, int id, int which, const Shape *c_lead, DType type,
                        bool *batched)
{
    const IrGraph *g = b->graph->ir;
    const IrNode *x = &g->nodes[g->nodes[id].in[which]];
    int buf = plan_buffer_root(b->plan, b->graph->node_buffer[g->nodes[id].in[which]]);
    Shape lead = lead_dims(&x->shape);
    *batched = !all_ones(&lead);
    if (x->dtype == type && (!*batched || ir_shape_equal(&lead, c_lead))) return buf;
    Shape full = *c_lead;
    full.dim[full.rank++] = x->shape.dim[x->shape.rank - 2];
    full.dim[full.rank++] = x->shape.dim[x->shape.rank - 1];
    if (!*batched) full = (Shape){ .rank = 2, .dim = { full.dim[full.rank - 2], full.dim[full.rank - 1] } };
    return materialise(b, id, buf, x->dtype, &x->shape, type, &full, which ? "b" : "a");
}

int64_t plan_gemm_k(const PlanGemm *g, const int64_t *symvals)
{
    int64_t k = IR_DIM_IS_SYM(g->k) ? symvals[IR_DIM_SYMBOL(g->k)] : g->k;
    return g->k_lead.rank ? k * ir_numel(&g->k_lead, symvals) : k;
}

int64_t plan_gemm_m(const PlanGemm *g, const int64_t *symvals)
{
    int64_t m = IR_DIM_IS_SYM(g->m) ? symvals[IR_DIM_SYMBOL(g->m)] : g->m;
    return g->m_lead.rank ? m * ir_numel(&g->m_lead, symvals) : m;
}

/* A batched GEMM of a batched A stored [batch..., m, k] and a shared B: one GEMM over
 * batch * m rows (PlanGemm.m_lead), which the library and the generated kernels run
 * faster than many small ones, and which can take an epilogue. */
static void fold_batch_into_rows(PlanGemm *gm)
{
    if (gm->batch.rank == 0 || !gm->a_batched || gm->b_batched || gm->trans_a) return;
    gm->m_lead = gm->batch;
    gm->batch.rank = 0;
    gm->a_batched = false;
}

/* An IR_MATMUL_BATCH_SUM operand: its batches, consecutive, are more rows of one matrix
 * (copied only to change its type). */
static int batch_sum_operand(Builder *b, int id, int which, DType type)
{
    const IrGraph *g = b->graph->ir;
    const IrNode *x = &g->nodes[g->nodes[id].in[which]];
    int buf = plan_buffer_root(b->plan, b->graph->node_buffer[g->nodes[id].in[which]]);
    if (x->dtype == type) return buf;
    return materialise(b, id, buf, x->dtype, &x->shape, type, &x->shape, which ? "b" : "a");
}

/* The GEMM of MATMUL node ID (C its own buffer, no epilogue). */
static PlanGemm plain_gemm(Builder *b, int id)
{
    const IrGraph *g = b->graph->ir;
    const IrNode *n = &g->nodes[id];
    const IrNode *a = &g->nodes[n->in[0]], *bn = &g->nodes[n->in[1]];
    /* cuBLAS takes f32, or two halves of one kind; anything else meets in f32 */
    DType type = a->dtype == bn->dtype && a->dtype != DT_I32 ? a->dtype : DT_F32;
    Shape c_lead = lead_dims(&n->shape);
    PlanGemm gm = { .trans_a = n->flags & IR_MATMUL_TRANS_A, .trans_b = n->flags & IR_MATMUL_TRANS_B,
                    .epilogue = GEMM_EPI_NONE, .bias = -1, .aux = -1 };
    if (n->flags & IR_MATMUL_BATCH_SUM) {
        gm.k_lead = lead_dims(&a->shape);
        gm.a = batch_sum_operand(b, id, 0, type);
        gm.b = batch_sum_operand(b, id, 1, type);
    } else {
        gm.a = gemm_operand(b, id, 0, &c_lead, type, &gm.a_batched);
        gm.b = gemm_operand(b, id, 1, &c_lead, type, &gm.b_batched);
    }
    gm.c = b->graph->node_buffer[id];
    gm.m = n->shape.dim[n->shape.rank - 2];
    gm.n = n->shape.dim[n->shape.rank - 1];
    gm.k = a->shape.dim[a->shape.rank - (gm.trans_a ? 2 : 1)];
    gm.batch = c_lead;
    fold_batch_into_rows(&gm);
    gm.a_type = gm.b_type = type;
    gm.c_type = n->dtype;
    gm.compute = type != DT_F32 ? GEMM_F32_ACCUM
                 : (n->flags & IR_MATMUL_TF32) ? GEMM_TF32 : GEMM_F32;
    return gm;
}

/* The GEMM of MATMUL node ID, after the copies of its operands that it needs (plain_gemm
 * adds those steps, so the GEMM's own step is added after it returns). */
static void gemm_node(Builder *b, int id)
{
    const IrNode *n = &b->graph->ir->nodes[id];
    PlanGemm gm = plain_gemm(b, id);
    add_step(b, STEP_GEMM, n, id, ownf(b, "matmul %s", node_what(b, n, id)))->gemm = gm;
}

/* GEMM group K (ir.h, IR_GROUP_GEMM), members MATMUL, ADD of the bias and perhaps an
 * activation, ending at LAST: one GEMM whose epilogue stores LAST; a stored ADD is the
 * aux output. The unstored members have no buffer. */
static void gemm_group_step(Builder *b, int k, int last)
{
    const IrGraph *g = b->graph->ir;
    int mm = last;
    while (ir_op_info[g->nodes[mm].op].fuse != IR_FUSE_MATMUL) mm--;
    int add = mm + 1;
    const IrNode *x = &g->nodes[add], *end = &g->nodes[last];
    CGC_ASSERT(g->nodes[mm].group == k && x->group == k && x->op == IR_ADD && last - mm <= 2);
    int bias = x->in[x->in[0] == mm];
    PlanGemm gm = plain_gemm(b, mm);
    gm.c = b->graph->node_buffer[last];
    gm.c_type = end->dtype;
    gm.bias = plan_buffer_root(b->plan, b->graph->node_buffer[bias]);
    gm.bias_type = g->nodes[bias].dtype;
    gm.epilogue = last == add ? GEMM_EPI_BIAS : end->op == IR_RELU ? GEMM_EPI_RELU_BIAS : GEMM_EPI_GELU_BIAS;
    gm.aux = last != add && b->graph->node_buffer[add] >= 0 ? b->graph->node_buffer[add] : -1;
    CGC_ASSERT(gm.c >= 0 && (end->op == IR_GELU_TANH || gm.aux < 0));
    PlanStep *s = add_step(b, STEP_GEMM, end, last, ownf(b, "%s", g->groups[k - 1].name));
    s->gemm = gm;
}

/* ---- assignments ---- */

/* An ASSIGN member of a fusion group: its kernel stores it. */
static bool in_kernel(const Builder *b, const IrNode *n)
{
    return b->plan->mode != PLAN_EAGER && n->group != 0;
}

static bool assigns(const IrNode *n, int tensor) { return ir_node_is_assign(n) && n->index == tensor; }

static bool assigned_in_graph(const IrGraph *g, int tensor)
{
    for (int id = 0; id < g->nnodes; id++)
        if (assigns(&g->nodes[id], tensor)) return true;
    return false;
}

/* Whether a fusion group's kernel assigns TENSOR in place (before the copies run). */
static bool assigned_in_place(const Builder *b, int tensor)
{
    const IrGraph *g = b->graph->ir;
    for (int id = 0; id < g->nnodes; id++)
        if (assigns(&g->nodes[id], tensor) && in_kernel(b, &g->nodes[id]))
            return true;
    return false;
}

/* A copy kernel's name says what it copies, since tensors of one shape share it:
 * "assign_f32_from_f16_512x784", "assign_f32_scalar", "assign_bf16_512x784". */
static void copy_name(char *name, size_t n, const char *verb, DType dst_type, DType src_type,
                      const Shape *shape)
{
    int at = snprintf(name, n, "%s_%s", verb, ir_dtype_name(dst_type));
    if (src_type != dst_type) at += snprintf(name + at, n - (size_t)at, "_from_%s", ir_dtype_name(src_type));
    if (shape->rank == 0) snprintf(name + at, n - (size_t)at, "_scalar");
    for (int i = 0; i < shape->rank && at < (int)n; i++)
        at += snprintf(name + at, n - (size_t)at, "%s%lld", i ? "x" : "_", (long long)shape->dim[i]);
}

static void copy_step(Builder *b, int id, const char *verb, int dst, int src, DType src_type,
                      const Shape *shape, const char *what, const char *op_words)
{
    char name[DRAFT_NAME_MAX];
    DType dst_type = b->plan->buffers[dst].dtype;
    copy_name(name, sizeof name, verb, dst_type, src_type, shape);
    RenderCtx ctx = render_ctx(b);
    KernelDraft d;
    memset(&d, 0, sizeof d);
    cuda_render_copy(&ctx, name, dst, dst_type, shape, src, src_type, shape, &d);
    launch_draft(b, &d, &b->graph->ir->nodes[id], id, what, op_words);
}

/* The ASSIGN copies, after every other step (an ASSIGN member of a fusion group stores
 * in place, in its kernel). A value that is a view of a tensor which
 * this graph also assigns is first saved in a buffer of its own, so that every copy
 * reads the step's values whatever the order (apply_assigns in runtime/cpu/exec.c). A
 * tensor assigned its own value needs no copy. */
static void assign_steps(Builder *b)
{
    const IrGraph *g = b->graph->ir;
    const Plan *pl = b->plan;
    int *src = xcalloc((size_t)g->nnodes, sizeof *src);
    for (int id = 0; id < g->nnodes; id++) {
        const IrNode *n = &g->nodes[id];
        src[id] = -1;
        if (!ir_node_is_assign(n) || in_kernel(b, n)) continue;
        const IrTensor *t = &pl->p->tensors[n->index];
        int dst = pl->tensor_buffer_base + n->index;
        src[id] = plan_buffer_root(pl, b->graph->node_buffer[n->in[0]]);
        int tensor = src[id] - pl->tensor_buffer_base;
        bool is_tensor = pl->buffers[src[id]].kind == PB_TENSOR;
        if (is_tensor && assigned_in_place(b, tensor))   /* the copy would read the new value */
            CGC_INTERNAL("%s graph: assign %%%d copies tensor %d, which a fused kernel already "
                         "assigned in place", g->name, id, tensor);
        if (src[id] == dst) src[id] = -1;
        else if (is_tensor && assigned_in_graph(g, tensor)) {
            DType type = pl->buffers[src[id]].dtype;
            int saved = add_buffer(b, (PlanBuffer){ .kind = PB_NODE, .dtype = type,
                                                    .shape = t->shape, .alias_of = -1, .index = id,
                                                    .graph = b->gid,
                                                    .what = ownf(b, "%%%d.saved", id) });
            copy_step(b, id, "save", saved, src[id], type, &t->shape,
                      ownf(b, "save %s", plan_name(b, pl->p->tensors[tensor].name)),
                      "save before the assignments");
            src[id] = saved;
        }
    }
    for (int id = 0; id < g->nnodes; id++) {
        const IrNode *n = &g->nodes[id];
        if (!ir_node_is_assign(n) || src[id] < 0) continue;
        const IrTensor *t = &pl->p->tensors[n->index];
        copy_step(b, id, "assign", pl->tensor_buffer_base + n->index, src[id],
                  pl->buffers[src[id]].dtype, &t->shape, ownf(b, "assign %s", plan_name(b, t->name)),
                  "assign");
    }
    free(src);
}

/* ---- fusion groups ---- */

/* A member whose value stays in registers: no buffer (STORED, ir_stored_members, says
 * who must store). Placed members (views, constants) keep theirs. */
static bool in_registers(const IrGraph *g, int id, const bool *stored)
{
    const IrNode *n = &g->nodes[id];
    return n->group != 0 && !ir_node_is_placed(n) && !stored[id];
}

/* When each group k (index k) launches: a group of its own at its last member; the groups
 * of a multi-tensor launch, which are consecutive (ir.h), together at the last member of
 * its last group. FROM: the first member of the launch's first group. */
typedef struct GroupLaunch {
    int *last, *at, *from;
} GroupLaunch;

static GroupLaunch group_launches(const IrGraph *g, const IrSpan *span)
{
    size_t n = (size_t)g->ngroups + 1;
    GroupLaunch l = { xmalloc(n * sizeof *l.last), xmalloc(n * sizeof *l.at), xmalloc(n * sizeof *l.from) };
    int nmulti = 0;
    for (int k = 1; k <= g->ngroups; k++)
        if (g->groups[k - 1].multi > nmulti) nmulti = g->groups[k - 1].multi;
    int *multi_at = xmalloc(((size_t)nmulti + 1) * sizeof *multi_at);
    int *multi_from = xmalloc(((size_t)nmulti + 1) * sizeof *multi_from);
    for (int m = 0; m <= nmulti; m++) multi_at[m] = -1, multi_from[m] = g->nnodes;
    for (int k = 1; k <= g->ngroups; k++) {
        int m = g->groups[k - 1].multi;
        l.last[k] = span[k].end - 1;
        if (l.last[k] > multi_at[m]) multi_at[m] = l.last[k];
        if (span[k].first < multi_from[m]) multi_from[m] = span[k].first;
    }
    for (int k = 1; k <= g->ngroups; k++) {
        int m = g->groups[k - 1].multi;
        l.at[k] = m ? multi_at[m] : l.last[k];
        l.from[k] = m ? multi_from[m] : span[k].first;
    }
    free(multi_at);
    free(multi_from);
    return l;
}

static void group_launches_free(GroupLaunch *l)
{
    free(l->last), free(l->at), free(l->from);
}

/* One launch of groups GROUPS[0..N) (one group, or a multi-tensor launch). */
static void launch_groups(Builder *b, const int *groups, int n, int last_member)
{
    const IrGraph *g = b->graph->ir;
    RenderCtx ctx = render_ctx(b);
    const IrGroup *first = &g->groups[groups[0] - 1];
    int to = n == 1 && first->kind == IR_GROUP_REDUCE ? fused_sum_member(&ctx, groups[0]) : -1;
    if (to >= 0) ctx.split = reduce_split(b, to, &first->work);
    KernelDraft d;
    memset(&d, 0, sizeof d);
    fused_render(&ctx, groups, n, &d);
    draft_root_args(b->plan, &d);
    int k = add_kernel(b, &d);
    for (int i = 0; i < n; i++) note_group_use(b, k, groups[i]);
    const char *what = ownf(b, "fused %s", d.name);
    add_launch(b, k, &d, &g->nodes[last_member], last_member, what)->group = groups[0];
    if (ctx.split.count > 1) sum_parts_step(b, to, ctx.split, groups[0]);
}

/* The groups of group K's multi-tensor launch, in node order, launched in as few kernels
 * as their parameters allow. */
static void launch_multi(Builder *b, int k, const GroupLaunch *l)
{
    const IrGraph *g = b->graph->ir;
    RenderCtx ctx = render_ctx(b);
    int multi = g->groups[k - 1].multi;
    int *groups = xmalloc((size_t)g->ngroups * sizeof *groups), n = 0;
    for (int id = l->from[k]; id <= l->at[k]; id++) {
        int j = g->nodes[id].group;
        if (j && g->groups[j - 1].multi == multi && l->last[j] == id) groups[n++] = j;
    }
    for (int from = 0; from < n;) {
        int to = from + fused_groups_that_fit(&ctx, groups + from, n - from);
        launch_groups(b, groups + from, to - from, l->last[groups[to - 1]]);
        from = to;
    }
    free(groups);
}

/* Checks the order the fusion pass promises (ir.h): no node outside a group reads one
 * of its members before the group's launch, and groups of one multi-tensor launch do not
 * read each other. */
static void check_group_order(const IrGraph *g, const GroupLaunch *l)
{
    for (int u = 0; u < g->nnodes; u++) {
        const IrNode *n = &g->nodes[u];
        for (int j = 0; j < n->nin; j++) {
            const IrNode *x = &g->nodes[n->in[j]];
            int k = x->group;
            if (k && !ir_node_is_placed(x) && n->group != k && u <= l->at[k])
                CGC_INTERNAL("%s graph: node %%%d reads %%%d of fusion group %d before the "
                             "group's kernel runs", g->name, u, n->in[j], k);
        }
    }
}

/* Attention group K (ir.h, IR_GROUP_ATTENTION), ending at LAST: one launch. The forward
 * stores its rows' log-sum-exp in a buffer of the plan's own, which the backward of the
 * same softmax reads (the forward's launch comes first: the backward reads its P). */
static void attention_step(Builder *b, int k, int last)
{
    const IrGraph *g = b->graph->ir;
    RenderCtx ctx = render_ctx(b);
    int sm = attention_lse_node(&ctx, k);
    if (b->lse[sm] < 0)
        b->lse[sm] = add_buffer(b, (PlanBuffer){ .kind = PB_NODE, .dtype = DT_F32,
                                                 .shape = attention_lse_shape(&ctx, k), .alias_of = -1,
                                                 .index = sm, .graph = b->gid,
                                                 .what = ownf(b, "%%%d.lse", sm) });
    KernelDraft d;
    memset(&d, 0, sizeof d);
    attention_render(&ctx, k, b->lse[sm], &d);
    draft_root_args(b->plan, &d);
    int kernel = add_kernel(b, &d);
    note_group_use(b, kernel, k);
    const char *what = ownf(b, "fused %s", g->groups[k - 1].name);
    add_launch(b, kernel, &d, &g->nodes[last], last, what)->group = k;
}

/* Classifier group K (ir.h, IR_GROUP_CLASSIFIER), ending at LAST: one launch, its rows'
 * losses in a buffer of the plan's own. */
static void classifier_step(Builder *b, int k, int last)
{
    const IrGraph *g = b->graph->ir;
    int loss = -1, grad = -1;
    for (int id = b->span[k].first; id < b->span[k].end; id++) {
        if (g->nodes[id].op == IR_CROSS_ENTROPY) loss = id;
        if (g->nodes[id].op == IR_CE_GRAD) grad = id;
    }
    CGC_ASSERT(loss >= 0 && grad >= 0);
    Shape rows = g->nodes[g->nodes[grad].in[1]].shape;
    rows.rank--;
    int partial = add_buffer(b, (PlanBuffer){ .kind = PB_NODE, .dtype = DT_F32, .shape = rows,
                                              .alias_of = -1, .index = loss, .graph = b->gid,
                                              .what = ownf(b, "%%%d.rows", loss) });
    RenderCtx ctx = render_ctx(b);
    KernelDraft d;
    memset(&d, 0, sizeof d);
    cuda_render_classifier(&ctx, loss, grad, partial, &d);
    draft_root_args(b->plan, &d);
    int kernel = add_kernel(b, &d);
    note_group_use(b, kernel, k);
    add_launch(b, kernel, &d, &g->nodes[last], last, ownf(b, "fused %s", g->groups[k - 1].name))->group = k;
}

/* Group K's step, at its last member ID: its own launch, or, at the last group of a
 * multi-tensor launch, that launch. */
static void group_step(Builder *b, int k, int id, const GroupLaunch *l)
{
    const IrGraph *g = b->graph->ir;
    if (g->groups[k - 1].kind == IR_GROUP_GEMM) gemm_group_step(b, k, id);
    else if (g->groups[k - 1].kind == IR_GROUP_ATTENTION) attention_step(b, k, id);
    else if (g->groups[k - 1].kind == IR_GROUP_CLASSIFIER) classifier_step(b, k, id);
    else if (!g->groups[k - 1].multi) launch_groups(b, &k, 1, id);
    else if (id == l->at[k]) launch_multi(b, k, l);
}

/* ---- graphs and the plan ---- */

static const IrGraph *program_graph(const IrProgram *p, PlanGraphId gid)
{
    const IrGraph *g[PG_NUM] = { &p->train, &p->train_micro, &p->eval, &p->forward, &p->decode };
    return g[gid]->nnodes > 0 ? g[gid] : NULL;
}

static void build_graph(Builder *b, PlanGraphId gid)
{
    const IrGraph *g = program_graph(b->plan->p, gid);
    PlanGraph *pg = &b->plan->graph[gid];
    pg->ir = g;
    if (!g) return;
    b->graph = pg;
    b->gid = gid;
    b->capsteps = 0;
    bool fused = b->plan->mode != PLAN_EAGER && g->ngroups > 0;
    b->span = ir_group_spans(g);
    b->scratch = render_scratch_new(g->nnodes);
    b->lse = xmalloc((size_t)g->nnodes * sizeof *b->lse);
    for (int id = 0; id < g->nnodes; id++) b->lse[id] = -1;
    GroupLaunch launch = group_launches(g, b->span);
    if (fused) check_group_order(g, &launch);
    pg->node_buffer = xmalloc((size_t)g->nnodes * sizeof *pg->node_buffer);
    bool *stored = ir_stored_members(g);
    for (int id = 0; id < g->nnodes; id++)
        pg->node_buffer[id] = fused && in_registers(g, id, stored) ? -1 : node_buffer(b, g, id);
    free(stored);
    for (int id = 0; id < g->nnodes; id++) {
        int k = fused ? g->nodes[id].group : 0;
        if (k) {
            if (launch.last[k] == id) group_step(b, k, id, &launch);
        } else if (computes(g, id)) {
            if (ir_op_info[g->nodes[id].op].fuse == IR_FUSE_MATMUL) gemm_node(b, id);
            else launch_node(b, id);
        }
    }
    assign_steps(b);
    group_launches_free(&launch);
    free(b->span);
    render_scratch_free(b->scratch);
    free(b->lse);
    b->lse = NULL;
    b->span = NULL;
    b->scratch = NULL;
}

static void add_tables(Builder *b)
{
    Plan *pl = b->plan;
    const IrProgram *p = pl->p;
    CGC_ASSERT(p->ninputs <= IR_MAX_INPUTS && p->nsyms <= IR_MAX_SYMBOLS);
    pl->tensor_buffer_base = pl->nbuffers;
    for (int i = 0; i < p->ntensors; i++)
        add_buffer(b, (PlanBuffer){ .kind = PB_TENSOR, .dtype = p->tensors[i].dtype, .shape = p->tensors[i].shape,
                                    .alias_of = -1, .index = i, .graph = -1,
                                    .what = plan_name(b, p->tensors[i].name) });
    for (int i = 0; i < p->ninputs; i++)
        pl->input_buffer[i] = add_buffer(
            b, (PlanBuffer){ .kind = PB_INPUT, .dtype = p->inputs[i].dtype, .shape = p->inputs[i].shape,
                             .alias_of = -1, .index = i, .graph = -1,
                             .what = plan_name(b, p->inputs[i].name) });
}

/* The counter of the launches that run `last` groups (plan.h's ABI), when any graph has
 * such a group. */
static void add_launch_counter(Builder *b)
{
    Plan *pl = b->plan;
    pl->launch_counter = -1;
    for (int gid = 0; gid < PG_NUM && pl->mode != PLAN_EAGER; gid++) {
        const IrGraph *g = program_graph(pl->p, (PlanGraphId)gid);
        for (int k = 0; g && k < g->ngroups && pl->launch_counter < 0; k++)
            if (g->groups[k].last || g->groups[k].kind == IR_GROUP_CLASSIFIER)
                pl->launch_counter = add_buffer(b, (PlanBuffer){
                    .kind = PB_COUNTER, .dtype = DT_I32, .shape = { .rank = 1, .dim = { 1 } },
                    .alias_of = -1, .index = 0, .graph = -1, .what = "cgc.launch_counter" });
    }
}

/* The device's step counter (plan.h, the data pipeline), in a plan that is captured. */
static void add_step_state(Builder *b)
{
    Plan *pl = b->plan;
    pl->step_state = -1;
    if (plan_mode_captures(pl->mode))
        pl->step_state = add_buffer(b, (PlanBuffer){
            .kind = PB_STEP, .dtype = DT_I32, .shape = { .rank = 1, .dim = { 4 } },
            .alias_of = -1, .index = 0, .graph = -1, .what = "cgc.step_state" });
}

const char *plan_mode_name(PlanMode mode)
{
    switch (mode) {
    case PLAN_EAGER: return "eager";
    case PLAN_DEFAULT: return "default";
    case PLAN_REDUCE_OVERHEAD: return "reduce-overhead";
    case PLAN_MAX_AUTOTUNE: return "max-autotune";
    }
    CGC_INTERNAL("unknown plan mode %d", (int)mode);
}

bool plan_mode_from_name(const char *name, PlanMode *out)
{
    static const PlanMode modes[] = {PLAN_EAGER, PLAN_DEFAULT, PLAN_REDUCE_OVERHEAD,
                                     PLAN_MAX_AUTOTUNE};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        if (strcmp(name, plan_mode_name(modes[i])) != 0) continue;
        *out = modes[i];
        return true;
    }
    return false;
}

bool plan_mode_captures(PlanMode mode)
{
    return mode == PLAN_REDUCE_OVERHEAD || mode == PLAN_MAX_AUTOTUNE;
}

static void add_data_kernels(Builder *b)
{
    Plan *pl = b->plan;
    PlanKernel dk[PDK_NUM];
    cuda_data_kernels(dk);
    pl->kernels = xrealloc(pl->kernels, (size_t)(pl->nkernels + PDK_NUM) * sizeof *pl->kernels);
    for (int i = 0; i < PDK_NUM; i++) {
        pl->data_kernel[i] = pl->nkernels;
        pl->kernels[pl->nkernels++] = dk[i];
    }
}

Plan *plan_build(const IrProgram *p, PlanMode mode, const char *net_path, const int64_t *symmax)
{
    PlanOwner *owner = xcalloc(1, sizeof *owner);
    Builder b = { .owner = owner, .plan = &owner->plan, .symmax = symmax };
    Plan *pl = b.plan;
    pl->p = p;
    pl->mode = mode;
    pl->source_name = source_base_name(&b, net_path);
    add_tables(&b);
    add_launch_counter(&b);
    add_step_state(&b);
    for (int gid = 0; gid < PG_NUM; gid++) build_graph(&b, (PlanGraphId)gid);
    plan_add_collectives(pl);
    for (int k = 0; k < pl->nkernels; k++) {
        pl->kernels[k].source = kernel_source(&pl->kernels[k], &b.info[k]);
        free(b.info[k].key);
        free(b.info[k].signature);
        free(b.info[k].body);
        free(b.info[k].head);
        sb_free(&b.info[k].uses.lines);
    }
    free(b.info);
    add_data_kernels(&b);
    for (int gid = 0; gid < PG_NUM; gid++)     /* none, unless max-autotune adds them */
        for (int i = 0; i < pl->graph[gid].nsteps; i++)
            for (int t = 0; t < PLAN_GEMM_TILES; t++) pl->graph[gid].steps[i].gemm.tile_kernel[t] = -1;
    pl->gemm_kernels_from = pl->nkernels;
    if (mode == PLAN_MAX_AUTOTUNE) plan_add_gemm_kernels(pl);
    plan_add_window_kernels(pl);    /* kernels in max-autotune; library runs in every mode */
    pl->mlp_kernels_from = pl->nkernels;
    if (mode == PLAN_MAX_AUTOTUNE) plan_add_mlp_kernels(pl);
    return pl;
}

void plan_free(Plan *plan)
{
    if (!plan) return;
    PlanOwner *owner = (PlanOwner *)plan;
    for (int k = 0; k < plan->nkernels; k++) plan_kernel_free(&plan->kernels[k]);
    free(plan->kernels);
    free(plan->buffers);
    free(plan->mlps);
    for (int r = 0; r < plan->nwindows; r++) free(plan->windows[r].epi_arg);
    free(plan->windows);
    for (int g = 0; g < PG_NUM; g++) {
        free(plan->graph[g].steps);
        free(plan->graph[g].node_buffer);
        for (int c = 0; c < plan->graph[g].ncolls; c++) {
            PlanCollective *pc = &plan->graph[g].colls[c];
            free(pc->out);
            free(pc->member);
        }
        free(plan->graph[g].colls);
    }
    for (int i = 0; i < owner->nowned; i++) free(owner->owned[i]);
    free(owner->owned);
    free(owner);
}

void plan_choices_init(PlanChoices *c, const Plan *plan)
{
    memset(c, 0, sizeof *c);
    c->arch = 90;
    for (int g = 0; g < PG_NUM; g++)
        if ((g == PG_TRAIN || g == PG_TRAIN_MICRO) && plan->graph[g].ir)
            c->step[g] = xcalloc((size_t)plan->graph[g].nsteps + 1, sizeof *c->step[g]);
    c->mlp_shape = xcalloc((size_t)plan->nmlps + 1, sizeof *c->mlp_shape);
    for (int r = 0; r < plan->nmlps; r++) c->mlp_shape[r] = -1;
    size_t tiles = (size_t)plan->nwindows * PLAN_WINDOW_MAX_READERS;
    c->window_tile = xmalloc((tiles + 1) * sizeof *c->window_tile);
    for (size_t j = 0; j < tiles; j++) c->window_tile[j] = -1;
    c->window_conv = xmalloc((tiles + 1) * sizeof *c->window_conv);
    for (size_t j = 0; j < tiles; j++)
        c->window_conv[j] = plan->windows[j / PLAN_WINDOW_MAX_READERS].conv ? 0 : -1;
}

void plan_choices_free(PlanChoices *c)
{
    for (int g = 0; g < PG_NUM; g++) free(c->step[g]);
    free(c->mlp_shape);
    free(c->window_tile);
    free(c->window_conv);
    memset(c, 0, sizeof *c);
}

bool plan_choices_generated(const PlanChoices *c, const Plan *plan)
{
    for (int r = 0; r < plan->nmlps; r++)
        if (c->mlp_shape[r] >= 0) return true;
    for (int r = 0; r < plan->nwindows; r++)
        if (c->window_tile[r * PLAN_WINDOW_MAX_READERS] >= 0) return true;
    for (int g = 0; g < PG_NUM; g++)
        for (int i = 0; c->step[g] && i < plan->graph[g].nsteps; i++)
            if (plan->graph[g].steps[i].kind == STEP_GEMM && c->step[g][i].tile > 0) return true;
    return false;
}

const PlanGraph *plan_graph_of(const Plan *plan, const IrGraph *g)
{
    for (int i = 0; i < PG_NUM; i++)
        if (plan->graph[i].ir && plan->graph[i].ir == g) return &plan->graph[i];
    return NULL;
}

size_t plan_buffer_bytes(const Plan *plan, int b, const int64_t *symmax)
{
    CGC_ASSERT(b >= 0 && b < plan->nbuffers);
    const PlanBuffer *buf = &plan->buffers[b];
    if (buf->alias_of >= 0) return 0;
    int64_t n = ir_numel(&buf->shape, symmax);
    CGC_ASSERT(n >= 0);
    return (size_t)n * ir_dtype_size(buf->dtype);
}

static char *module_source(const Plan *plan, int from, int to)
{
    StrBuf s = { 0 };
    sb_puts(&s, plan_device_prelude);
    for (int k = from; k < to; k++) {
        sb_puts(&s, "\n");
        sb_puts(&s, plan->kernels[k].source);
    }
    return s.s;
}

char *plan_module_source(const Plan *plan) { return module_source(plan, 0, plan->gemm_kernels_from); }

char *plan_gemm_module_source(const Plan *plan)
{
    if (plan->gemm_kernels_from == plan->nkernels) return NULL;
    return module_source(plan, plan->gemm_kernels_from, plan->nkernels);
}

/* ---- the plan's hash ---- */

static uint64_t fnv_i64(uint64_t h, int64_t v) { return fnv1a(h, &v, sizeof v); }

static uint64_t fnv_str(uint64_t h, const char *s) { return fnv1a(h, s, strlen(s) + 1); }

static uint64_t fnv_shape(uint64_t h, const Shape *s)
{
    h = fnv_i64(h, s->rank);
    for (int i = 0; i < s->rank; i++) h = fnv_i64(h, s->dim[i]);
    return h;
}

/* Field by field (never a struct's bytes: padding is not part of the plan). */
static uint64_t fnv_step(uint64_t h, const PlanStep *s)
{
    h = fnv_i64(h, s->kind);
    if (s->kind == STEP_LAUNCH) {
        const PlanLaunch *l = &s->launch;
        h = fnv_shape(fnv_i64(h, l->kernel), &l->work);
        return fnv_i64(fnv_i64(h, l->items_per_block), l->max_blocks);
    }
    const PlanGemm *g = &s->gemm;
    const int64_t f[] = {g->m, g->n, g->k, g->trans_a, g->trans_b, g->a_batched, g->b_batched,
                         g->a_type, g->b_type, g->c_type, g->compute, g->epilogue,
                         g->bias >= 0, g->bias_type, g->aux >= 0};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) h = fnv_i64(h, f[i]);
    h = fnv_shape(h, &g->batch);
    /* plans without these hash as before */
    if (g->k_lead.rank) h = fnv_shape(h, &g->k_lead);
    return g->m_lead.rank ? fnv_shape(fnv_i64(h, 'm'), &g->m_lead) : h;
}

uint64_t plan_hash(const Plan *plan)
{
    uint64_t h = fnv_str(FNV_BASIS, plan_mode_name(plan->mode));
    for (int k = 0; k < plan->nkernels; k++) {
        const PlanKernel *pk = &plan->kernels[k];
        h = fnv_i64(fnv_str(fnv_str(h, pk->name), pk->source), pk->block);
    }
    for (int gid = 0; gid < PG_NUM; gid++) {
        const PlanGraph *pg = &plan->graph[gid];
        h = fnv_i64(h, pg->nsteps);
        for (int i = 0; i < pg->nsteps; i++) h = fnv_step(h, &pg->steps[i]);
    }
    return h;
}

unsigned plan_launch_grid(const PlanLaunch *l, const int64_t *symvals)
{
    return plan_launch_grid_items(l, l->items_per_block, symvals);
}

unsigned plan_launch_grid_items(const PlanLaunch *l, int64_t items, const int64_t *symvals)
{
    int64_t work = ir_numel(&l->work, symvals), per = items > 0 ? items : 1;
    int64_t blocks = (work + per - 1) / per;
    if (l->max_blocks > 0 && blocks > l->max_blocks) blocks = l->max_blocks;
    if (blocks > 0x7fffffff) blocks = 0x7fffffff;
    return blocks < 1 ? 1u : (unsigned)blocks;
}
