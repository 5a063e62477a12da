/* fused.c: renders fusion groups (IrGraph.groups, see ir.h) as CUDA kernels.
 *
 * A group's members become locals of one loop body, in node order: member k is
 * `const float v<k>`, computed with cuda.c's elementwise expressions from its inputs:
 * other members by their locals, f32 constants as literals, runtime scalars as float
 * parameters rt<n>, and every other value (another kernel's result, a tensor, an input)
 * loaded from parameter in<n> into local x<n>, at the element that broadcasting pairs
 * with the work element i. A member whose dtype is f16, bf16 or i32 is rounded in its
 * register at once, as the CPU executor rounds it when it stores it, so that every later
 * member computes with the reference's number. Members read outside the group are stored
 * to out<n>; an ASSIGN member stores straight into its persistent tensor.
 *
 *  POINTWISE  one grid-stride loop over the work elements.
 *  REDUCE     the eager reductions' loop (a block per row, or per output element of a
 *             REDUCE_TO; threads stride over the reduced elements; sums in double through
 *             cgc_block_sum, maxima through cgc_block_max), with the prologue evaluated at
 *             each input element; several reductions of one group share the loop.
 *  multi      several static-shape groups in one launch. The grid walks "virtual blocks";
 *             each group owns a fixed range of them (pointwise: enough for its elements at
 *             pointwise_lanes per thread, capped; reduce: one per row), so any grid
 *             size stays correct and a block never straddles two groups (their barriers).
 *             A group's code is a device function that groups differing only in tensors
 *             and sizes share; its arguments are its row of the kernel's slots (plan.h,
 *             PlanKernel.packed), found by the block. Its `last` groups (ir.h) run after
 *             the loop, in the block that finishes last.
 *  vector     where every element a thread takes at once is a whole, aligned vector (a
 *             pointwise group; rows that four divide; a wide bias gradient's tile), four
 *             elements a thread (eight in a pointwise group of half-type tensors, so that
 *             their accesses are 16 bytes): each buffer read or written at element i is
 *             one cgc_load4 (cgc_load8) before the element code and one cgc_store4 after,
 *             the code once per lane j (x<n> is lane j of vq<n>, a stored value goes to
 *             vs<n>[j]).
 *  uniform    a pointwise group's values that are the same at every element (loads of
 *             single-element tensors, and members computed from those, runtime scalars
 *             and literals alone: an optimizer's step size, bias corrections, clipping
 *             factor) are `const float u<n>`, computed once before the loop. The compiler
 *             cannot hoist them itself: the loop's stores may alias the loads.
 */
#include "codegen_impl.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_POINTWISE_VBLOCKS = 1024 };

/* One kernel being rendered: the names of what it reads and writes, per graph node. */
typedef struct GroupKernel {
    const RenderCtx *ctx;
    KernelDraft *d;
    char (*param)[RENDER_PARAM_MAX];    /* per node: its parameter (in<n>, out<n>, rt<n>),
                                         * or the expression that reads it; "" */
    char (*value)[RENDER_VALUE_MAX];    /* per node: the expression of its value in the
                                         * group being rendered (v<k>, x<n>, u<k>, a
                                         * literal), "" */
    bool *uniform;                      /* per node: the same at every element of the group
                                         * being rendered, computed once (u<k>) */
    int nin, nout, nrt;
    bool seed, rank_row;
    bool counting;              /* parameters only counted (in `counted`), no draft */
    int counted;
    /* Rendering a pointwise group's vector path (render_pointwise): a value read or
     * stored at element i is lane j of a vector loaded before the loop over the four
     * lanes (vq<n>) or of an array stored after it (vs<n>), into these statements. */
    bool vector;
    int lanes;                  /* of the vector path: CUDA_VEC, or 8 (pointwise_lanes) */
    StrBuf vloads, vdecls, vstores;
    int nvec;
} GroupKernel;

static const IrGroup *group_of(const RenderCtx *ctx, int k)
{
    CGC_ASSERT(k >= 1 && k <= ctx->g->ngroups);
    return &ctx->g->groups[k - 1];
}

/* Group K's members, and the nodes between none (ir.h: members are consecutive). */
static IrSpan members(const RenderCtx *ctx, int k)
{
    CGC_ASSERT(k >= 1 && k <= ctx->g->ngroups);
    return ctx->span[k];
}

/* ---- scratch ---- */

RenderScratch *render_scratch_new(int nnodes)
{
    size_t n = (size_t)(nnodes ? nnodes : 1);
    RenderScratch *s = xmalloc(sizeof *s);
    *s = (RenderScratch){ xcalloc(n, sizeof *s->param), xcalloc(n, sizeof *s->value),
                          xcalloc(n, sizeof *s->phase), xcalloc(n, sizeof *s->local),
                          xcalloc(n, sizeof *s->need), xcalloc(n, sizeof *s->uniform) };
    return s;
}

void render_scratch_free(RenderScratch *s)
{
    if (!s) return;
    free(s->param), free(s->value), free(s->phase), free(s->local), free(s->need), free(s->uniform);
    free(s);
}

static void clean_entry(RenderScratch *s, int id)
{
    s->param[id][0] = s->value[id][0] = '\0';
    s->phase[id] = s->local[id] = 0;
    s->need[id] = s->uniform[id] = false;
}

void render_scratch_clean(const RenderCtx *ctx, int k)
{
    const IrSpan span = members(ctx, k);
    for (int id = span.first; id < span.end; id++) {
        clean_entry(ctx->scratch, id);
        for (int j = 0; j < ctx->g->nodes[id].nin; j++) clean_entry(ctx->scratch, ctx->g->nodes[id].in[j]);
    }
}

/* Placed members (ir_node_is_placed) are not computed: readers load them (or inline a
 * literal) like any value from outside. */
static bool placed(const IrNode *n) { return ir_node_is_placed(n); }

static bool inlinable(const IrNode *n) { return ir_node_is_literal(n); }


/* A member that stores its value into the persistent tensor it assigns. */
static bool is_effect(const IrNode *n) { return ir_node_fuse(n) == IR_FUSE_EFFECT; }

/* A member computed in registers (not placed). */
static bool computed_member(const IrGraph *g, int id, int k)
{
    return g->nodes[id].group == k && !placed(&g->nodes[id]);
}

/* Whether the group stores member ID (to a buffer, not a tensor). */
static bool stored(const GroupKernel *f, int id)
{
    const IrNode *n = &f->ctx->g->nodes[id];
    return !is_effect(n) && f->ctx->node_buffer[id] >= 0;
}

/* ---- parameters: outputs, then inputs, then seed and runtime values ---- */

/* Buffer parameter NAME: appended to the draft, or only counted. */
static void kernel_buffer(GroupKernel *f, const char *name, int buffer, DType t, bool is_const)
{
    if (f->counting) f->counted++;
    else draft_buffer(f->d, name, buffer, t, is_const);
}

static void add_outputs(GroupKernel *f, int k)
{
    const RenderCtx *ctx = f->ctx;
    const Shape *work = &group_of(ctx, k)->work;
    const IrSpan span = members(ctx, k);
    for (int id = span.first; id < span.end; id++) {
        const IrNode *n = &ctx->g->nodes[id];
        if (!computed_member(ctx->g, id, k) || (!stored(f, id) && !is_effect(n))) continue;
        if (ir_op_is_reduction(n->op) && ctx->split.count > 1) {   /* its parts instead */
            snprintf(f->param[id], sizeof f->param[id], "parts");
            if (f->counting) f->counted++;
            else cuda_split_parts_param(f->d, ctx->split, false);
            continue;
        }
        const Shape *shape = is_effect(n) ? &ctx->p->tensors[n->index].shape : &n->shape;
        CGC_ASSERT(ir_op_is_reduction(n->op) || ir_shape_equal(shape, work));
        snprintf(f->param[id], sizeof f->param[id], "out%d", f->nout++);
        if (is_effect(n))
            kernel_buffer(f, f->param[id], ctx->plan->tensor_buffer_base + n->index,
                          ctx->p->tensors[n->index].dtype, false);
        else
            kernel_buffer(f, f->param[id], ctx->node_buffer[id], n->dtype, false);
    }
}

static void add_inputs(GroupKernel *f, int k)
{
    const IrGraph *g = f->ctx->g;
    const IrSpan span = members(f->ctx, k);
    for (int id = span.first; id < span.end; id++) {
        if (!computed_member(g, id, k)) continue;
        for (int j = 0; j < g->nodes[id].nin; j++) {
            int in = g->nodes[id].in[j];
            const IrNode *x = &g->nodes[in];
            if (computed_member(g, in, k) || inlinable(x) || f->param[in][0]) continue;
            CGC_ASSERT(f->ctx->node_buffer[in] >= 0);
            snprintf(f->param[in], sizeof f->param[in], "in%d", f->nin++);
            kernel_buffer(f, f->param[in], f->ctx->node_buffer[in], x->dtype, true);
        }
    }
}

static void add_scalars(GroupKernel *f, int k)
{
    const IrGraph *g = f->ctx->g;
    const IrSpan span = members(f->ctx, k);
    for (int id = span.first; id < span.end; id++) {
        const IrNode *n = &g->nodes[id];
        if (!computed_member(g, id, k)) continue;
        if (ir_node_fuse(n) == IR_FUSE_RANDOM && !f->seed) {
            if (f->counting) f->counted++;
            else draft_param(f->d, PP_U64, "uint64_t", "seed", (PlanArg){ .kind = ARG_SEED });
            f->seed = true;
        }
        if (ir_node_fuse(n) == IR_FUSE_RANDOM && ir_shape_is_batched(&n->shape) && !f->rank_row) {
            if (f->counting) f->counted++;
            else draft_param(f->d, PP_U64, "uint64_t", "rank_row", (PlanArg){ .kind = ARG_RANK_ROW });
            f->rank_row = true;
        }
        if (ir_node_fuse(n) == IR_FUSE_SCALAR) {
            char name[16];
            snprintf(name, sizeof name, "rt%d", f->nrt++);
            if (f->counting) f->counted++;
            else cuda_runtime_value(f->d, f->ctx, id, name, f->param[id], sizeof f->param[id]);
        }
    }
}

/* ---- one element ---- */

/* EXPR (over locals x, a, b, c: cuda_elementwise_expr) with each local replaced by its
 * operand's value: identifiers are matched whole, number suffixes ("1.0f") left alone. */
void fused_substitute(StrBuf *out, const char *expr, const char *x, const char *a,
                      const char *b, const char *c)
{
    for (const char *s = expr; *s;) {
        const char *start = s;
        if (isalpha((unsigned char)*s) || *s == '_') {
            while (isalnum((unsigned char)*s) || *s == '_') s++;
            const char *rep = NULL;
            if (s - start == 1) rep = *start == 'x' ? x : *start == 'a' ? a : *start == 'b' ? b
                                                       : *start == 'c' ? c : NULL;
            if (rep) sb_puts(out, rep);
            else sb_printf(out, "%.*s", (int)(s - start), start);
        } else if (isdigit((unsigned char)*s)) {
            while (isalnum((unsigned char)*s) || *s == '.') s++;
            sb_printf(out, "%.*s", (int)(s - start), start);
        } else {
            sb_printf(out, "%c", *s++);
        }
    }
}

const char *fused_rounding(DType t)
{
    switch (t) {
    case DT_F16: return "cgc_round_f16";
    case DT_BF16: return "cgc_round_bf16";
    case DT_I32: return "cgc_round_i32";
    case DT_F32: return NULL;
    }
    CGC_INTERNAL("unknown dtype %d", (int)t);
}

/* The value of member ID, unrounded, from its operands' values. */
static void member_expr(const GroupKernel *f, int id, StrBuf *out)
{
    const IrNode *n = &f->ctx->g->nodes[id];
    const char *v[IR_MAX_IN] = { "", "", "" };
    for (int j = 0; j < n->nin; j++) v[j] = f->value[n->in[j]];
    IrFamily family = ir_op_info[n->op].family;
    if (family == IR_FAMILY_RUNTIME) {
        sb_puts(out, f->param[id]);
    } else if (family == IR_FAMILY_WINDOW) {   /* a gathered UNFOLD: the work is its patches' shape */
        cuda_window_entry(out, n, &f->ctx->g->nodes[n->in[0]].shape, f->param[n->in[0]], "i");
    } else if (family == IR_FAMILY_DROPOUT) {
        char p[48], scale[48], element[CUDA_DIMS_MAX + 64];
        cuda_float_literal(n->value, p, sizeof p);
        cuda_float_literal(1.0 / (1.0 - n->value), scale, sizeof scale);
        cuda_dropout_element(f->d, n, "i", element, sizeof element);
        sb_printf(out, "cgc_dropout_keep(seed, %d, cgc_to_counter(%s), %s, %s) ? %s * %s : 0.0f",
                  n->index, v[1], element, p, v[0], scale);
    } else if (n->nin == 3) {
        fused_substitute(out, cuda_elementwise_expr(n->op), "", v[1], v[2], v[0]);
    } else {
        fused_substitute(out, cuda_elementwise_expr(n->op), v[0], v[0], v[1], "");
    }
}

/* `const float VALUE = EXPR;` for member ID at INDENT, rounded to its dtype in the
 * register (a gathered window's value is exact). */
static void member_statement(GroupKernel *f, int id, const char *expr, const char *indent)
{
    const IrNode *n = &f->ctx->g->nodes[id];
    const char *round = ir_node_fuse(n) == IR_FUSE_WINDOW ? NULL : fused_rounding(n->dtype);
    sb_printf(&f->d->body, "%sconst float %s = %s%s%s%s;   /* %s */\n", indent, f->value[id],
              round ? round : "", round ? "(" : "", expr, round ? ")" : "", ir_op_name(n->op));
}

/* Loads every outside value group K reads at work element i, with the coordinates the
 * loads need, each statement indented by INDENT. */
static void render_loads(GroupKernel *f, int k, const char *indent)
{
    const IrGraph *g = f->ctx->g;
    const Shape *work = &group_of(f->ctx, k)->work;
    StrBuf loads = { 0 };
    unsigned coords = 0;
    const IrSpan span = members(f->ctx, k);
    for (int id = span.first; id < span.end; id++) {
        if (!computed_member(g, id, k) || ir_node_fuse(&g->nodes[id]) == IR_FUSE_WINDOW) continue;   /* gathers */
        for (int j = 0; j < g->nodes[id].nin; j++) {
            int in = g->nodes[id].in[j];
            const IrNode *x = &g->nodes[in];
            if (computed_member(g, in, k) || f->value[in][0]) continue;
            if (inlinable(x)) {
                cuda_float_literal(x->value, f->value[in], sizeof f->value[in]);
                continue;
            }
            char off[CUDA_OFFSET_MAX];
            cuda_operand_offset(f->d, work, &x->shape, off, sizeof off, &coords);
            snprintf(f->value[in], sizeof f->value[in], "x%s", f->param[in] + 2);
            if (f->vector && strcmp(off, "i") == 0) {
                int q = f->nvec++;
                sb_printf(&f->vloads, "            const cgc_f%d vq%d = cgc_load%d(%s + i0);\n", f->lanes, q,
                          f->lanes, f->param[in]);
                sb_printf(&loads, "%sconst float %s = vq%d.x[j];\n", indent, f->value[in], q);
                continue;
            }
            sb_printf(&loads, "%sconst float %s = cgc_load(%s[%s]);\n", indent, f->value[in],
                      f->param[in], off);
        }
    }
    if (coords) cuda_render_coords(f->d, work, coords, indent, "i");
    if (loads.s) sb_puts(&f->d->body, loads.s);
    sb_free(&loads);
}

/* The members of group K at work element i (loads, values, stores); reductions are left
 * to the caller, which reads their inputs' values from f->value. */
static void render_element(GroupKernel *f, int k, const char *indent)
{
    const IrGraph *g = f->ctx->g;
    render_loads(f, k, indent);
    int local = 0;
    const IrSpan span = members(f->ctx, k);
    for (int id = span.first; id < span.end; id++) {
        const IrNode *n = &g->nodes[id];
        if (!computed_member(g, id, k) || ir_op_is_reduction(n->op) || is_effect(n) || f->uniform[id]) continue;
        CGC_ASSERT(ir_node_fuse(n) != IR_FUSE_RANDOM || ir_shape_equal(&n->shape, &group_of(f->ctx, k)->work));
        snprintf(f->value[id], sizeof f->value[id], "v%d", local++);
        StrBuf e = { 0 };
        member_expr(f, id, &e);
        member_statement(f, id, e.s, indent);
        sb_free(&e);
    }
    for (int id = span.first; id < span.end; id++) {
        const IrNode *n = &g->nodes[id];
        if (!computed_member(g, id, k) || ir_op_is_reduction(n->op) || (!is_effect(n) && !stored(f, id)))
            continue;
        const char *value = is_effect(n) ? f->value[n->in[0]] : f->value[id];
        const char *note = is_effect(n) ? "   /* in place */" : "";
        if (f->vector) {
            int q = f->nvec++;
            sb_printf(&f->vdecls, "            float vs%d[%d];\n", q, f->lanes);
            sb_printf(&f->vstores, "            cgc_store%d(%s + i0, vs%d);\n", f->lanes, f->param[id], q);
            sb_printf(&f->d->body, "%svs%d[j] = %s;%s\n", indent, q, value, note);
        } else {
            sb_printf(&f->d->body, "%scgc_store(&%s[i], %s);%s\n", indent, f->param[id], value, note);
        }
    }
}

/* Forgets the values of group K's members and loads but the uniform ones (ALL: those
 * too): another path or segment comes next. */
static void forget(GroupKernel *f, int k, bool all)
{
    const IrGraph *g = f->ctx->g;
    const IrSpan span = members(f->ctx, k);
    for (int id = span.first; id < span.end; id++)
        for (int j = -1; j < g->nodes[id].nin; j++) {
            int x = j < 0 ? id : g->nodes[id].in[j];
            if (!f->uniform[x] || all) f->value[x][0] = '\0', f->uniform[x] = false;
        }
}

static void forget_values(GroupKernel *f, int k) { forget(f, k, false); }

/* Whether generated code TEXT uses the identifier ID. */
static bool uses_identifier(const char *text, const char *id)
{
    size_t n = strlen(id);
    for (const char *p = text; (p = strstr(p, id)); p += n) {
        bool before = p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '_');
        bool after = isalnum((unsigned char)p[n]) || p[n] == '_';
        if (!before && !after) return true;
    }
    return false;
}

/* Whether generated code TEXT reads an element's index or coordinates (i, i<n>, j). */
static bool reads_index(const char *text)
{
    for (const char *s = text; *s;) {
        if (!isalpha((unsigned char)*s) && *s != '_') {
            s++;
            continue;
        }
        const char *start = s;
        while (isalnum((unsigned char)*s) || *s == '_') s++;
        size_t digits = strspn(start + 1, "0123456789");
        bool index = *start == 'i' && start + 1 + digits == s;
        if (index || (*start == 'j' && s == start + 1)) return true;
    }
    return false;
}

/* Whether outside value X of a group is the same at every element: a literal, or a
 * single element (a scalar, or a tensor of one). */
static bool uniform_input(const IrNode *x)
{
    return inlinable(x) || (ir_shape_is_static(&x->shape) && ir_numel(&x->shape, NULL) == 1);
}

/* Whether group K writes the buffer outside value IN is read from (updates it in place):
 * its value is then not the same before and after the element that writes it. */
static bool written_by(const GroupKernel *f, int k, int in)
{
    const RenderCtx *ctx = f->ctx;
    const Plan *plan = ctx->plan;
    int from = ctx->node_buffer[in];
    if (from < 0) return false;
    const IrSpan span = members(ctx, k);
    for (int id = span.first; id < span.end; id++) {
        const IrNode *n = &ctx->g->nodes[id];
        if (!computed_member(ctx->g, id, k)) continue;
        int to = is_effect(n) ? plan->tensor_buffer_base + n->index : stored(f, id) ? ctx->node_buffer[id] : -1;
        if (to >= 0 && plan_buffer_root(plan, to) == plan_buffer_root(plan, from)) return true;
    }
    return false;
}

/* The values of group K that are the same at every element, rendered once at INDENT
 * before its loop (u<n>): its single-element inputs, and the members computed from
 * uniform values alone (an optimizer's step size, bias corrections and clipping factor,
 * which the compiler could not hoist past the loop's stores). */
static void render_uniform(GroupKernel *f, int k, const char *indent)
{
    const IrGraph *g = f->ctx->g;
    const IrSpan span = members(f->ctx, k);
    int nu = 0;
    for (int id = span.first; id < span.end; id++) {
        const IrNode *n = &g->nodes[id];
        if (!computed_member(g, id, k) || ir_op_is_reduction(n->op) || is_effect(n)) continue;
        IrFuse fuse = ir_node_fuse(n);
        bool all = fuse != IR_FUSE_RANDOM && fuse != IR_FUSE_WINDOW &&
                   (ir_op_info[n->op].family == IR_FAMILY_RUNTIME || n->nin > 0);
        for (int j = 0; j < n->nin && all; j++) {
            int in = n->in[j];
            all = computed_member(g, in, k) ? f->uniform[in]
                                            : uniform_input(&g->nodes[in]) && !written_by(f, k, in);
        }
        if (!all) continue;
        for (int j = 0; j < n->nin; j++) {   /* its outside inputs first */
            int in = n->in[j];
            if (computed_member(g, in, k) || f->value[in][0]) continue;
            f->uniform[in] = true;
            if (inlinable(&g->nodes[in])) {
                cuda_float_literal(g->nodes[in].value, f->value[in], sizeof f->value[in]);
                continue;
            }
            snprintf(f->value[in], sizeof f->value[in], "u%d", nu++);
            sb_printf(&f->d->body, "%sconst float %s = cgc_load(%s[0]);\n", indent, f->value[in], f->param[in]);
        }
        StrBuf e = { 0 };
        member_expr(f, id, &e);
        if (reads_index(e.s)) {
            sb_free(&e);   /* it reads the element's index after all */
            continue;
        }
        f->uniform[id] = true;
        snprintf(f->value[id], sizeof f->value[id], "u%d", nu++);
        member_statement(f, id, e.s, indent);
        sb_free(&e);
    }
}

/* ---- the groups' loops, from FIRST by STEP ---- */

/* Group K's element code at INDENT, taken out of the body; its values forgotten. */
static char *element_text(GroupKernel *f, int k, const char *indent)
{
    StrBuf *body = &f->d->body;
    size_t at = body->len;
    render_element(f, k, indent);
    char *text = xstrdup(body->len > at ? body->s + at : "");
    if (body->s) body->len = at, body->s[at] = '\0';
    forget_values(f, k);
    return text;
}

static void vector_state_free(GroupKernel *f)
{
    sb_free(&f->vloads), sb_free(&f->vdecls), sb_free(&f->vstores);
    f->nvec = 0;
}

/* The vector path from element i0 (its first lane): the vector loads, the code of LANE
 * (rendered with f->vector) for each of the f->lanes lanes j, the vector stores. Frees
 * the vector statements. */
static void emit_lanes(GroupKernel *f, const char *lane)
{
    StrBuf *body = &f->d->body;
    sb_printf(body, "%s%s#pragma unroll\n            for (int j = 0; j < %d; j++) {\n",
              f->vloads.s ? f->vloads.s : "", f->vdecls.s ? f->vdecls.s : "", f->lanes);
    if (uses_identifier(lane, "i")) sb_puts(body, "                const int64_t i = i0 + j;\n");
    sb_printf(body, "%s            }\n%s", lane, f->vstores.s ? f->vstores.s : "");
    vector_state_free(f);
}

/* The lanes of pointwise group K's vector path: 8 where it reads or writes an f16 or
 * bf16 tensor of its work's shape, so that those accesses are 16 bytes (an f32 one is
 * then two), else CUDA_VEC. Its elements per thread, as launches size their grids. */
static int pointwise_lanes(const RenderCtx *ctx, int k)
{
    const IrGraph *g = ctx->g;
    const IrGroup *gr = group_of(ctx, k);
    const IrSpan span = members(ctx, k);
    for (int id = span.first; id < span.end; id++) {
        const IrNode *n = &g->nodes[id];
        for (int j = -1; computed_member(g, id, k) && j < n->nin; j++) {
            const IrNode *x = j < 0 ? n : &g->nodes[n->in[j]];
            if ((x->dtype == DT_F16 || x->dtype == DT_BF16) && ir_shape_equal(&x->shape, &gr->work))
                return 8;
        }
    }
    return CUDA_VEC;
}

/* A pointwise group, pointwise_lanes elements a thread at a time: one vector access for
 * each buffer it reads or writes at element i (aligned: plan.h, the memory plan) and the
 * element code for each lane; in the tail, the element code one element at a time. A
 * group that reads and writes nothing at i is the plain loop. */
static void render_pointwise(GroupKernel *f, int k, const char *first, const char *step)
{
    StrBuf *body = &f->d->body;
    char n[CUDA_DIMS_MAX];
    cuda_numel_expr(f->d, &group_of(f->ctx, k)->work, n, sizeof n);
    sb_printf(body, "    const int64_t n = %s;\n", n);
    render_uniform(f, k, "    ");
    f->lanes = pointwise_lanes(f->ctx, k);
    f->vector = true;
    char *lane = element_text(f, k, "                ");
    f->vector = false;
    if (!f->nvec) {
        sb_printf(body, "    for (int64_t i = %s; i < n; i += %s) {\n", first, step);
        render_element(f, k, "        ");
        sb_puts(body, "    }\n");
    } else {
        char *one = element_text(f, k, "                ");
        sb_printf(body, "    for (int64_t i0 = (%s) * %d; i0 < n; i0 += (%s) * %d) {\n"
                        "        if (i0 + %d <= n) {\n", first, f->lanes, step, f->lanes, f->lanes);
        emit_lanes(f, lane);
        sb_printf(body, "        } else {\n"
                        "            for (int64_t i = i0; i < n; i++) {\n%s            }\n"
                        "        }\n    }\n", one);
        free(one);
    }
    free(lane);
    vector_state_free(f);
}

/* Group K's element code inside a reduction loop, preceded by its index `i` = INDEX when
 * it reads one. A group of constants reads none; an unused `i` would be a warning, so
 * then the row's BASE, which INDEX reads, is marked used instead. */
static void render_indexed_element(GroupKernel *f, int k, const char *index, const char *base)
{
    StrBuf *body = &f->d->body;
    size_t at = body->len;
    render_element(f, k, "            ");
    char *element = xstrdup(body->s + at);
    body->len = at;
    body->s[at] = '\0';
    if (uses_identifier(element, "i"))
        sb_printf(body, "            const int64_t i = %s;\n", index);
    else
        sb_printf(body, "            (void)%s;   /* constants only: no element is read */\n", base);
    sb_puts(body, element);
    free(element);
}

/* The statements adding group K's element values to its reductions' accumulators, at
 * INDENT: along an axis acc<r> (sums, in double) or m<r> (maxima, NaN wins); a
 * REDUCE_TO's acc, or lane j's acc[j] in a vector tile (TILE_LANES). */
static void render_accumulate(GroupKernel *f, int k, const char *indent, bool tile_lanes)
{
    const IrGraph *g = f->ctx->g;
    const IrSpan span = members(f->ctx, k);
    for (int id = span.first, r = 0; id < span.end; id++) {
        const IrNode *n = &g->nodes[id];
        if (!computed_member(g, id, k) || !ir_op_is_reduction(n->op)) continue;
        const char *v = f->value[n->in[0]];
        if (ir_op_reduces_to_shape(n->op))
            sb_printf(&f->d->body, "%sacc%s += (double)%s;\n", indent, tile_lanes ? "[j]" : "", v);
        else if (ir_op_info[n->op].combine == IR_COMBINE_MAX)
            sb_printf(&f->d->body, "%sm%d = cgc_max_nan(m%d, %s);\n", indent, r, r, v);
        else
            sb_printf(&f->d->body, "%sacc%d += (double)%s;\n", indent, r, v);
        r++;
    }
}

/* Group K's element code for the four lanes from element INDEX (aligned: a multiple of
 * four, as are the elements it reads and writes at i), each lane accumulating
 * (render_accumulate): the vector loads, the lanes, the vector stores. */
static void render_reduce_lanes(GroupKernel *f, int k, const char *index, bool tile_lanes)
{
    StrBuf *body = &f->d->body;
    f->vector = true;
    f->lanes = CUDA_VEC;
    size_t at = body->len;
    render_element(f, k, "                ");
    render_accumulate(f, k, "                ", tile_lanes);
    char *lane = xstrdup(body->s + at);
    body->len = at, body->s[at] = '\0';
    forget_values(f, k);
    f->vector = false;
    sb_printf(body, "            const int64_t i0 = %s;\n", index);
    if (!f->nvec && !uses_identifier(lane, "i"))
        sb_puts(body, "            (void)i0;   /* constants only: no element is read */\n");
    emit_lanes(f, lane);
    free(lane);
}

/* Whether the rows of group K's reductions are whole vectors: contiguous (inner 1), of a
 * length that four divides whatever its symbols (their literal dimensions' product). */
static bool vector_rows(const IrGroup *gr)
{
    const Shape *w = &gr->work;
    bool all = gr->axis == IR_AXIS_ALL;
    if (w->rank == 0 || !(all || gr->axis == w->rank - 1)) return false;
    int64_t literal = 1;
    for (int i = all ? 0 : w->rank - 1; i < w->rank; i++)
        if (!IR_DIM_IS_SYM(w->dim[i])) literal *= w->dim[i];
    return literal % CUDA_VEC == 0;
}

/* Group K's reductions along its axis: one accumulator each (acc<n>: sums in double;
 * m<n>: maxima, NaN wins); rows that are whole vectors (vector_rows) read four elements
 * a thread at a time. A split sum (the launch's split) shares each row among blocks. */
static void render_reduce_axis(GroupKernel *f, int k, const char *first, const char *step)
{
    const IrGraph *g = f->ctx->g;
    const IrGroup *gr = group_of(f->ctx, k);
    bool split = f->ctx->split.count > 1;
    AxisExpr a = cuda_axis_expr(f->d, &gr->work, gr->axis);
    cuda_render_row_loop(f->d, &a, first, step, f->ctx->split.count);
    StrBuf fin = { 0 }, store = { 0 };
    const IrSpan span = members(f->ctx, k);
    for (int id = span.first, r = 0; id < span.end; id++) {
        const IrNode *n = &g->nodes[id];
        if (!computed_member(g, id, k) || !ir_op_is_reduction(n->op)) continue;
        CGC_ASSERT(!ir_op_reduces_to_shape(n->op) && (n->axis == gr->axis));
        bool max = ir_op_info[n->op].combine == IR_COMBINE_MAX;
        sb_printf(&f->d->body, max ? "        float m%d = -CGC_INF;\n" : "        double acc%d = 0.0;\n", r);
        if (max) sb_printf(&fin, "        m%d = cgc_block_max(m%d, true);\n", r, r);
        else sb_printf(&fin, "        acc%d = cgc_block_sum(acc%d);\n", r, r);
        if (stored(f, id)) {
            sb_puts(&store, "            ");
            if (max) sb_printf(&store, "cgc_store(&%s[r], len == 0 ? CGC_NAN : m%d);", f->param[id], r);
            else if (split) sb_printf(&store, cuda_row_sum_store(n, true), r);
            else sb_printf(&store, cuda_row_sum_store(n, false), f->param[id], r);
            sb_puts(&store, "\n");
        }
        r++;
    }
    CGC_ASSERT(fin.s);   /* a REDUCE group has a reduction */
    const char *from = split ? "from + " : "", *end = split ? "end" : "len";
    if (vector_rows(gr)) {
        sb_printf(&f->d->body, "        for (int64_t k0 = %sthreadIdx.x * %d; k0 < %s; k0 += blockDim.x * %d) {\n",
                  from, CUDA_VEC, end, CUDA_VEC);
        render_reduce_lanes(f, k, "base + k0", false);
    } else {
        sb_printf(&f->d->body, "        for (int64_t k = %sthreadIdx.x; k < %s; k += blockDim.x) {\n", from, end);
        render_indexed_element(f, k, "base + k * inner", "base");
        render_accumulate(f, k, "            ", false);
    }
    sb_printf(&f->d->body, "        }\n%s", fin.s);
    if (store.s) sb_printf(&f->d->body, "        if (threadIdx.x == 0) {\n%s        }\n", store.s);
    sb_puts(&f->d->body, "    }\n");
    sb_free(&fin), sb_free(&store);
}

int fused_reduce_to_member(const RenderCtx *ctx, int k)
{
    const IrGraph *g = ctx->g;
    const IrSpan span = members(ctx, k);
    for (int id = span.first; id < span.end; id++)
        if (computed_member(g, id, k) && ir_op_reduces_to_shape(g->nodes[id].op)) return id;
    return -1;
}

int fused_sum_member(const RenderCtx *ctx, int k)
{
    int to = fused_reduce_to_member(ctx, k);
    if (to >= 0) return to;
    const IrGraph *g = ctx->g;
    const IrSpan span = members(ctx, k);
    int found = -1, n = 0;
    for (int id = span.first; id < span.end; id++)
        if (computed_member(g, id, k) && ir_op_is_reduction(g->nodes[id].op)) found = id, n++;
    return n == 1 ? found : -1;
}

/* Group K's REDUCE_TO ID; returns the launch's work (cuda_reduce_to_work). */
static Shape render_reduce_to(GroupKernel *f, int k, int id, const char *first, const char *step)
{
    const IrNode *n = &f->ctx->g->nodes[id];
    ReduceToIndex ix;
    cuda_reduce_to_index(f->d, &group_of(f->ctx, k)->work, &n->shape, &ix);
    ix.split = f->ctx->split.count;
    cuda_reduce_to_open(f->d, &ix, first, step);
    StrBuf index = { 0 };
    sb_printf(&index, "base%s", ix.off.s);
    if (ix.vec > 1) {
        render_reduce_lanes(f, k, index.s, true);
    } else {
        render_indexed_element(f, k, index.s, "base");
        render_accumulate(f, k, "            ", false);
    }
    sb_puts(&f->d->body, "        }\n");
    sb_free(&index);
    cuda_reduce_to_close(f->d, &ix, stored(f, id) ? f->param[id] : NULL);
    Shape work = cuda_reduce_to_work(&ix, &n->shape);
    cuda_reduce_to_index_free(&ix);
    return work;
}

/* Group K's loop. Sets the launch geometry of a kernel of its own; returns the rows (or
 * output elements) of a reduction, else the elements, as a shape. */
static Shape render_group(GroupKernel *f, int k, const char *first, const char *step)
{
    const IrGroup *gr = group_of(f->ctx, k);
    Shape rows = gr->work;
    if (gr->kind == IR_GROUP_POINTWISE) {
        render_pointwise(f, k, first, step);
    } else {
        int to = fused_reduce_to_member(f->ctx, k);
        if (to >= 0) {
            rows = render_reduce_to(f, k, to, first, step);
        } else {
            render_reduce_axis(f, k, first, step);
            Shape out = ir_shape_reduce(&gr->work, gr->axis);
            rows = cuda_row_work(&out, f->ctx->split.count);
        }
    }
    forget(f, k, true);
    return rows;
}

/* ---- kernels ---- */

static void add_params(GroupKernel *f, const int *groups, int n)
{
    for (int i = 0; i < n; i++) add_outputs(f, groups[i]);
    for (int i = 0; i < n; i++) add_inputs(f, groups[i]);
    for (int i = 0; i < n; i++) add_scalars(f, groups[i]);
}

static void kernel_name(const RenderCtx *ctx, const int *groups, int n, KernelDraft *d)
{
    const IrGroup *gr = group_of(ctx, groups[0]);
    char base[DRAFT_NAME_MAX - 16];
    if (gr->name) codegen_mangle(base, sizeof base, gr->name);
    else snprintf(base, sizeof base, "fused_%s_%d", ctx->g->name, groups[0]);
    if (n > 1) snprintf(d->name, sizeof d->name, "%s_x%d", base, n);
    else snprintf(d->name, sizeof d->name, "%s", base);
}

/* Virtual blocks of group K in a multi-tensor launch: a row (or a tile of a REDUCE_TO)
 * each for a reduction, else enough for CUDA_ITEMS_PER_THREAD elements per thread
 * (capped: the segment loops). */
static int64_t virtual_blocks(const RenderCtx *ctx, int k)
{
    const IrGroup *gr = group_of(ctx, k);
    int64_t n = ir_numel(&gr->work, NULL);
    CGC_ASSERT(n >= 0);   /* static shapes only */
    if (gr->kind == IR_GROUP_REDUCE) {
        int to = fused_reduce_to_member(ctx, k);
        const Shape *os = to >= 0 ? &ctx->g->nodes[to].shape : NULL;
        int64_t tiles = os ? cuda_reduce_to_tiles(&gr->work, os) : 0;
        if (tiles) return tiles;
        Shape rows = os ? *os : ir_shape_reduce(&gr->work, gr->axis);
        n = ir_numel(&rows, NULL);
        return n > 0 ? n : 1;
    }
    int64_t per = CUDA_BLOCK * pointwise_lanes(ctx, k), v = (n + per - 1) / per;
    return v < 1 ? 1 : v > MAX_POINTWISE_VBLOCKS ? MAX_POINTWISE_VBLOCKS : v;
}

/* Appends TEXT to D's body, every line indented by INDENT more (a segment's code inside
 * the virtual-block loop and its branch, a last group inside its block). */
static void append_indented(KernelDraft *d, const char *text, const char *indent)
{
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
        sb_printf(&d->body, "%s%.*s", len > 1 ? indent : "", (int)len, line);
        line += len;
    }
}

/* The `last` groups GROUPS[0..N) of a multi-tensor launch (ir.h): they write in place
 * tensors that the other segments read, so they wait for every block of the grid, any
 * grid size, with CUDA's threadFenceReduction pattern. Each block, once its threads are
 * past their segments, makes its writes visible (__threadfence) and counts itself off;
 * the block that counts last knows every other block has finished reading, fences so
 * that it sees their writes, runs the groups (scalars: thread 0 does the work), and sets
 * the counter back to 0 for the next launch. */
static void render_last_groups(GroupKernel *f, const int *groups, int n)
{
    KernelDraft *d = f->d;
    sb_puts(&d->body, "    /* The last block to finish runs what follows: it writes tensors the segments\n"
                      "     * above read, so it must wait until every block is done with them. */\n");
    cuda_render_last_block(d, f->ctx->plan);
    StrBuf outer = d->body;
    for (int i = 0; i < n; i++) {
        const IrGroup *gr = group_of(f->ctx, groups[i]);
        CGC_ASSERT(gr->kind == IR_GROUP_POINTWISE && ir_shape_is_one(&gr->work));
        char name[DRAFT_NAME_MAX];
        codegen_mangle(name, sizeof name, gr->name ? gr->name : "group");
        d->body = (StrBuf){ 0 };
        render_group(f, groups[i], "threadIdx.x", "blockDim.x");
        StrBuf seg = d->body;
        d->body = outer;
        sb_printf(&d->body, "    { /* %s */\n", name);
        append_indented(d, seg.s, "    ");
        sb_puts(&d->body, "    }\n");
        sb_free(&seg);
        outer = d->body;
    }
    sb_puts(&d->body, "    if (threadIdx.x == 0) *counter = 0u;   /* for the next launch */\n");
}

/* Moves GROUPS' `last` groups (the final ones, ir.h) after the others; returns how many
 * are not last. */
static int split_last(const RenderCtx *ctx, const int *groups, int n, int *order)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!group_of(ctx, groups[i])->last) order[m++] = groups[i];
    for (int i = 0, k = m; i < n; i++)
        if (group_of(ctx, groups[i])->last) order[k++] = groups[i];
    return m;
}

/* ---- a multi-tensor launch's segments as shared device functions ---- */

/* A draft's parameters in the order of their names, for param_named. */
typedef struct ParamName {
    const char *name;
    int index;
} ParamName;

static int compare_names(const void *a, const void *b)
{
    return strcmp(((const ParamName *)a)->name, ((const ParamName *)b)->name);
}

static ParamName *param_names(const KernelDraft *d)
{
    ParamName *pn = xmalloc((size_t)(d->nparams ? d->nparams : 1) * sizeof *pn);
    for (int j = 0; j < d->nparams; j++) pn[j] = (ParamName){ d->param[j].name, j };
    qsort(pn, (size_t)d->nparams, sizeof *pn, compare_names);
    return pn;
}

/* The index of the parameter, of the N in PN, named by the LEN bytes at NAME, or -1. */
static int param_named(const ParamName *pn, int n, const char *name, size_t len)
{
    for (int lo = 0, hi = n; lo < hi;) {
        int mid = (lo + hi) / 2, c = strncmp(pn[mid].name, name, len);
        if (c == 0 && pn[mid].name[len] == '\0') return pn[mid].index;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* Whether the LEN bytes at T are a load's local (render_loads: x and its parameter's
 * number). */
static bool is_load_local(const char *t, size_t len)
{
    if (len < 2 || t[0] != 'x') return false;
    for (size_t i = 1; i < len; i++)
        if (!isdigit((unsigned char)t[i])) return false;
    return true;
}

/* The sizes a segment's first line declares, `const int64_t n = 5;` or `const int64_t
 * rows = 2, len = 3, inner = 1;`: arguments of its function, so that its text does not
 * depend on them. */
enum { MAX_SEGMENT_SIZES = 4 };
typedef struct SegmentSizes {
    int n;
    char name[MAX_SEGMENT_SIZES][8];
    long long value[MAX_SEGMENT_SIZES];
} SegmentSizes;

/* SEG's sizes into *Z (none when its first line is not such a declaration); returns
 * where the rest of SEG begins. */
static const char *segment_sizes(const char *seg, SegmentSizes *z)
{
    static const char decl[] = "    const int64_t ";
    z->n = 0;
    if (strncmp(seg, decl, sizeof decl - 1) != 0) return seg;
    for (const char *c = seg + sizeof decl - 1; z->n < MAX_SEGMENT_SIZES;) {
        const char *t = c;
        while (isalpha((unsigned char)*c)) c++;
        size_t len = (size_t)(c - t);
        if (len == 0 || len >= sizeof z->name[0] || strncmp(c, " = ", 3) != 0 ||
            !isdigit((unsigned char)c[3]))
            break;
        char *end;
        z->value[z->n] = strtoll(c + 3, &end, 10);
        memcpy(z->name[z->n], t, len);
        z->name[z->n++][len] = '\0';
        if (strncmp(end, ";\n", 2) == 0) return end + 2;
        if (strncmp(end, ", ", 2) != 0) break;
        c = end + 2;
    }
    z->n = 0;
    return seg;
}

/* A segment's code SEG (naming the NPN parameters PN), after its sizes, as the body of a
 * device function, into OUT: every parameter it names becomes p0, p1, ... in order of first use
 * (their indices into USED, the count into *NUSED), and the locals its loads name after
 * them x0, x1, ... likewise. So segments that differ only in their tensors and sizes
 * have one text. */
static void segment_body(const ParamName *pn, int npn, const char *seg, StrBuf *out, int *used,
                         int *nused)
{
    *nused = 0;
    char locals[PLAN_MAX_PARAMS][16];
    int nlocals = 0;
    for (const char *c = seg; *c;) {
        if (!isalpha((unsigned char)*c) && *c != '_') {
            const char *t = c;   /* a number's letters (1e-08f) are not a name */
            if (isdigit((unsigned char)*c))
                while (isalnum((unsigned char)*c) || *c == '_' || *c == '.') c++;
            else
                c++;
            sb_putn(out, t, (size_t)(c - t));
            continue;
        }
        const char *t = c;
        while (isalnum((unsigned char)*c) || *c == '_') c++;
        size_t len = (size_t)(c - t);
        int j = param_named(pn, npn, t, len), k = 0;
        if (j >= 0) {
            while (k < *nused && used[k] != j) k++;
            if (k == *nused) used[(*nused)++] = j;
            sb_printf(out, "p%d", k);
        } else if (is_load_local(t, len) && len < sizeof locals[0]) {
            while (k < nlocals && (strlen(locals[k]) != len || memcmp(locals[k], t, len) != 0)) k++;
            if (k == nlocals) snprintf(locals[nlocals++], sizeof locals[0], "%.*s", (int)len, t);
            sb_printf(out, "x%d", k);
        } else {
            sb_putn(out, t, len);
        }
    }
}

/* One group of a multi-tensor kernel: its code as a shared device function, the
 * parameters of the draft that a call of it passes, and its virtual blocks. */
typedef struct Segment {
    char fn[32];                        /* cgc_seg_<hash of its text> */
    SegmentSizes z;
    int used[PLAN_MAX_PARAMS], nused;   /* the draft's parameters, as p0, p1, ... */
    int64_t nvb;
} Segment;

/* Segment code SEG (naming D's parameters) as a __noinline__ device function in D's head,
 * added there once, under a guard named by its text's hash, so that the module holds each
 * function once however many kernels call it; its name, sizes and parameters into *S. */
static void segment_function(KernelDraft *d, const ParamName *pn, const char *seg, Segment *s)
{
    StrBuf body = { 0 }, decl = { 0 };
    segment_body(pn, d->nparams, segment_sizes(seg, &s->z), &body, s->used, &s->nused);
    sb_puts(&decl, "const int64_t b, const int64_t nvb");
    for (int k = 0; k < s->z.n; k++) sb_printf(&decl, ", const int64_t %s", s->z.name[k]);
    for (int k = 0; k < s->nused; k++) {
        const DraftParam *p = &d->param[s->used[k]];
        sb_printf(&decl, ", %s%sp%d", p->ctype, p->type == PP_PTR ? "" : " ", k);
    }
    uint64_t h = fnv1a(fnv1a(FNV_BASIS, decl.s, strlen(decl.s)), body.s, strlen(body.s));
    snprintf(s->fn, sizeof s->fn, "cgc_seg_%016llx", (unsigned long long)h);
    if (!d->head.s || !strstr(d->head.s, s->fn))
        sb_printf(&d->head, "#ifndef %s_DEFINED\n#define %s_DEFINED\n"
                            "__device__ __noinline__ void %s(%s)\n{\n%s}\n#endif\n\n",
                  s->fn, s->fn, s->fn, decl.s, body.s);
    sb_free(&body);
    sb_free(&decl);
}

/* The C expression of slot J of the slots at T (`const uint64_t *`) as parameter P's
 * type. */
static void slot_value(char *buf, size_t len, const DraftParam *p, const char *t, int j)
{
    switch (p->type) {
    case PP_PTR: snprintf(buf, len, "(%s)%s[%d]", p->ctype, t, j); break;
    case PP_I64: snprintf(buf, len, "(int64_t)%s[%d]", t, j); break;
    case PP_U64: snprintf(buf, len, "%s[%d]", t, j); break;
    case PP_F32: snprintf(buf, len, "cgc_slot_float(%s[%d])", t, j); break;
    }
}

/* D's parameters become slots (PlanKernel.packed): first those of OLD[0..NOLD) that the
 * kernel's own text LAST names (declared as locals of the same name), then the table of
 * the N segments SEG in ORDER: a row each, of the segment's first virtual block, their
 * count, its sizes and its parameters. The rows of segments of one function are
 * consecutive, their virtual blocks too (in that order from 0), so that a block finds
 * its row by a binary search (cgc_segment). Writes the declarations into DECLS and the
 * loop over the virtual blocks into LOOP. */
static void segment_table(KernelDraft *d, const DraftParam *old, int nold, const char *last,
                          const Segment *seg, const int *order, int n, StrBuf *decls, StrBuf *loop)
{
    for (int j = 0; j < nold; j++) {
        if (!uses_identifier(last, old[j].name)) continue;
        char v[96];
        slot_value(v, sizeof v, &old[j], "slots.v", d->nparams);
        sb_printf(decls, "    %s%sconst %s = %s;\n", old[j].ctype, old[j].type == PP_PTR ? "" : " ",
                  old[j].name, v);
        draft_param(d, old[j].type, old[j].ctype, old[j].name, old[j].arg);
    }
    int64_t start = 0;
    for (int i = 0; i < n;) {
        const Segment *first = &seg[order[i]];
        int run = 0, stride = 2 + first->z.n + first->nused, base = d->nparams;
        for (; i + run < n && strcmp(seg[order[i + run]].fn, first->fn) == 0; run++) {
            const Segment *s = &seg[order[i + run]];
            draft_param(d, PP_I64, "int64_t", "vb", (PlanArg){ .kind = ARG_I64, .value = (double)start });
            draft_param(d, PP_I64, "int64_t", "nvb", (PlanArg){ .kind = ARG_I64, .value = (double)s->nvb });
            for (int k = 0; k < s->z.n; k++)
                draft_param(d, PP_I64, "int64_t", s->z.name[k], (PlanArg){ .kind = ARG_I64, .value = (double)s->z.value[k] });
            for (int k = 0; k < s->nused; k++) {
                const DraftParam *p = &old[s->used[k]];
                draft_param(d, p->type, p->ctype, p->name, p->arg);
            }
            start += s->nvb;
        }
        sb_printf(loop, "        %sif (vb < %lld) {   /* %d segment%s of %s: rows of %d slots from slot %d */\n"
                        "            const uint64_t *s = cgc_segment(slots.v + %d, %d, %d, vb);\n"
                        "            %s(vb - (int64_t)s[0], (int64_t)s[1]",
                  i ? "} else " : "", (long long)start, run, run == 1 ? "" : "s", first->fn, stride, base,
                  base, run, stride, first->fn);
        for (int k = 0; k < first->z.n; k++) sb_printf(loop, ", (int64_t)s[%d]", 2 + k);
        for (int k = 0; k < first->nused; k++) {
            char v[96];
            slot_value(v, sizeof v, &old[first->used[k]], "s", 2 + first->z.n + k);
            sb_printf(loop, ", %s", v);
        }
        sb_puts(loop, ");\n");
        i += run;
    }
}

/* The groups of one launch as one kernel (PlanKernel.packed): each group's code a device
 * function shared by the groups (and kernels) whose code differs only in its tensors and
 * sizes, called with the arguments of its row of the parameters' table; the `last`
 * groups after them (render_last_groups). */
static void render_multi(GroupKernel *f, const int *all, int nall)
{
    KernelDraft *d = f->d;
    int *groups = xmalloc((size_t)nall * sizeof *groups);
    int n = split_last(f->ctx, all, nall, groups);
    Segment *seg = xcalloc((size_t)(n ? n : 1), sizeof *seg);
    int *order = xmalloc((size_t)(n ? n : 1) * sizeof *order), norder = 0;
    int64_t total = 0;
    ParamName *pn = param_names(d);
    for (int i = 0; i < n; i++) {
        const IrGroup *gr = group_of(f->ctx, groups[i]);
        bool pointwise = gr->kind == IR_GROUP_POINTWISE;
        render_group(f, groups[i], pointwise ? "b * blockDim.x + threadIdx.x" : "b",
                     pointwise ? "nvb * (int64_t)blockDim.x" : "nvb");
        segment_function(d, pn, d->body.s ? d->body.s : "", &seg[i]);
        sb_free(&d->body);
        seg[i].nvb = virtual_blocks(f->ctx, groups[i]);
        total += seg[i].nvb;
    }
    for (int i = 0; i < n; i++) {   /* by function, in order of first use */
        int first = 0;
        while (strcmp(seg[first].fn, seg[i].fn) != 0) first++;
        for (int j = i; j < n && first == i; j++)
            if (strcmp(seg[j].fn, seg[i].fn) == 0) order[norder++] = j;
    }
    if (n < nall) render_last_groups(f, groups + n, nall - n);
    StrBuf last = d->body, decls = { 0 }, loop = { 0 };
    d->body = (StrBuf){ 0 };
    DraftParam *old = d->param;
    int nold = d->nparams;
    d->param = NULL, d->nparams = d->capparams = 0;
    segment_table(d, old, nold, last.s ? last.s : "", seg, order, n, &decls, &loop);
    if (decls.s) sb_puts(&d->body, decls.s);
    if (n)
        sb_printf(&d->body, "    for (int64_t vb = blockIdx.x; vb < %lld; vb += gridDim.x) {\n%s        }\n    }\n",
                  (long long)total, loop.s);
    if (last.s) sb_puts(&d->body, last.s);
    bool pointwise = n == nall;     /* `last` groups share their block's counter */
    for (int i = 0; i < n; i++) pointwise &= group_of(f->ctx, groups[i])->kind == IR_GROUP_POINTWISE;
    free(old), free(seg), free(order), free(groups), free(pn);
    sb_free(&last), sb_free(&decls), sb_free(&loop);
    d->block = CUDA_BLOCK;
    d->any_block = pointwise;       /* each segment strides by its blocks' threads */
    d->work = (Shape){ .rank = 1, .dim = { total } };
    d->items_per_block = 1;
    d->max_blocks = CUDA_MAX_BLOCKS;
}

void fused_render(const RenderCtx *ctx, const int *groups, int n, KernelDraft *d)
{
    CGC_ASSERT(n >= 1);
    if (n == 1 && group_of(ctx, groups[0])->kind == IR_GROUP_ROW) {   /* fused_row.c */
        kernel_name(ctx, groups, n, d);
        fused_render_row(ctx, groups[0], d);
        draft_finish_symbols(d);
        return;
    }
    GroupKernel f = { .ctx = ctx, .d = d, .param = ctx->scratch->param, .value = ctx->scratch->value,
                      .uniform = ctx->scratch->uniform };
    kernel_name(ctx, groups, n, d);
    d->packed = n > 1;
    add_params(&f, groups, n);
    if (n > 1) {
        render_multi(&f, groups, n);
    } else {
        const IrGroup *gr = group_of(ctx, groups[0]);
        if (gr->kind == IR_GROUP_POINTWISE) {
            render_group(&f, groups[0], "cgc_thread_index()", "cgc_thread_count()");
            cuda_launch_elementwise(d, &gr->work);
            d->items_per_block = CUDA_BLOCK * pointwise_lanes(ctx, groups[0]);
        } else {
            cuda_launch_rows(d, render_group(&f, groups[0], "blockIdx.x", "gridDim.x"));
        }
    }
    draft_finish_symbols(d);
    for (int i = 0; i < n; i++) render_scratch_clean(ctx, groups[i]);
}

void fused_render_epilogue(const RenderCtx *ctx, int k, int from, const char *value, KernelDraft *d)
{
    CGC_ASSERT(group_of(ctx, k)->kind == IR_GROUP_POINTWISE && strlen(value) < RENDER_PARAM_MAX);
    GroupKernel f = { .ctx = ctx, .d = d, .param = ctx->scratch->param, .value = ctx->scratch->value,
                      .uniform = ctx->scratch->uniform };
    const IrGraph *g = ctx->g;
    const IrSpan span = members(ctx, k);
    for (int id = span.first; id < span.end; id++)
        for (int j = 0; computed_member(g, id, k) && j < g->nodes[id].nin; j++) {
            int in = g->nodes[id].in[j], b = ctx->node_buffer[in];
            if (computed_member(g, in, k) || b < 0 || plan_buffer_root(ctx->plan, b) != from) continue;
            CGC_ASSERT(ir_shape_equal(&g->nodes[in].shape, &group_of(ctx, k)->work));
            snprintf(f.param[in], sizeof f.param[in], "%s", value);    /* no parameter: */
            snprintf(f.value[in], sizeof f.value[in], "%s", value);    /* no load */
        }
    kernel_name(ctx, &k, 1, d);
    add_params(&f, &k, 1);
    render_element(&f, k, "    ");
    draft_finish_symbols(d);
    render_scratch_clean(ctx, k);
}

int fused_groups_that_fit(const RenderCtx *ctx, const int *groups, int n)
{
    GroupKernel f = { .ctx = ctx, .counting = true, .param = ctx->scratch->param };
    bool counter = false;
    int fit = 0;
    for (int slots = 0; fit < n; fit++) {
        int before = f.counted;
        add_outputs(&f, groups[fit]);
        add_inputs(&f, groups[fit]);
        add_scalars(&f, groups[fit]);
        render_scratch_clean(ctx, groups[fit]);
        f.seed = f.rank_row = false;
        bool last = group_of(ctx, groups[fit])->last;
        slots += f.counted - before + (last ? !counter : 2 + MAX_SEGMENT_SIZES);
        counter |= last;
        if (fit > 0 && slots > PLAN_MAX_SLOTS) break;
    }
    return fit;
}
