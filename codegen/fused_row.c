/* fused_row.c: renders a row group (IR_GROUP_ROW, see ir.h) as one CUDA kernel.
 *
 * Layernorm forward is a mean over each row, a mean of the centred squares, a value per
 * row from it, then the row's elements normalised; its backward has the same shape. A
 * reduce kernel per reduction would read the row from memory once per kernel and write
 * every value in between. Here one block owns a row of work = [rows..., C] (grid-stride
 * over the rows), and the group's members split in two:
 *  - row values (rv<n>): one per row (the reductions, the [rows...] and [rows..., 1]
 *    values computed from them, scalars), held in a register by every thread of the block;
 *  - element values (v<n>): one per element of the row, which exist only inside a loop of
 *    the block's threads over the row.
 * A member's phase is how many block-wide reductions it waits for, one after another.
 * Phase p is one pass over the row: it stores the stored element values of phase p and
 * accumulates the reductions of phase-p values; the block reductions that end it (sums in
 * double through cgc_block_sum, maxima through cgc_block_max: a fixed order, no atomics,
 * as the reduce kernels) give the row values of phase p + 1. An element value a later
 * pass needs is recomputed there from the group's inputs, which costs loads of the row
 * (cached: a block's row is small) instead of a buffer written and read back, and keeps
 * nothing of the row's size alive across a barrier. Values of f16, bf16 or i32 members
 * are rounded in their registers at once, as fused.c does, so every member computes with
 * the reference executor's numbers.
 */
#include "codegen_impl.h"

#include <stdlib.h>

typedef struct RowKernel {
    const RenderCtx *ctx;
    KernelDraft *d;
    int k;                          /* the group */
    Shape work;
    int *phase;                     /* per member: the block reductions it waits for */
    int *local;                     /* per member: n of its local v<n> or rv<n> (acc<n>) */
    char (*param)[RENDER_PARAM_MAX];    /* per node: its parameter (in<n>, out<n>, rt<n>),
                                         * or the expression that reads it; "" */
    char (*value)[RENDER_VALUE_MAX];    /* per node: its value's expression where the code is */
    int nin, nout, nrt;
} RowKernel;

static const IrNode *node(const RowKernel *rk, int id) { return &rk->ctx->g->nodes[id]; }


/* The group's members, and the nodes between none (ir.h: members are consecutive). */
static IrSpan span_of(const RowKernel *rk) { return rk->ctx->span[rk->k]; }

static bool member(const RowKernel *rk, int id)
{
    return node(rk, id)->group == rk->k && !ir_node_is_placed(node(rk, id));
}

/* Shape S holds one value per row: [rows...], [rows..., 1], or a single value. */
static bool per_row(const RowKernel *rk, const Shape *s)
{
    Shape row = ir_shape_reduce(&rk->work, rk->work.rank - 1), row1 = rk->work;
    row1.dim[row1.rank - 1] = 1;
    return ir_shape_equal(s, &row) || ir_shape_equal(s, &row1) || ir_shape_is_one(s);
}

static bool row_member(const RowKernel *rk, int id)
{
    return member(rk, id) && per_row(rk, &node(rk, id)->shape);
}

static bool element_member(const RowKernel *rk, int id)
{
    return member(rk, id) && !per_row(rk, &node(rk, id)->shape);
}

static bool stored(const RowKernel *rk, int id)
{
    return rk->ctx->node_buffer[id] >= 0;
}

/* ---- parameters: outputs, then inputs, then runtime values ---- */

static void add_params(RowKernel *rk)
{
    const IrGraph *g = rk->ctx->g;
    for (int id = span_of(rk).first, end = span_of(rk).end; id < end; id++)
        if (member(rk, id) && stored(rk, id)) {
            snprintf(rk->param[id], sizeof rk->param[id], "out%d", rk->nout++);
            draft_buffer(rk->d, rk->param[id], rk->ctx->node_buffer[id], g->nodes[id].dtype, false);
        }
    for (int id = span_of(rk).first, end = span_of(rk).end; id < end; id++)
        for (int j = 0; member(rk, id) && j < g->nodes[id].nin; j++) {
            int in = g->nodes[id].in[j];
            const IrNode *x = &g->nodes[in];
            if (member(rk, in) || rk->param[in][0] || ir_node_is_literal(x)) continue;
            CGC_ASSERT(rk->ctx->node_buffer[in] >= 0);
            snprintf(rk->param[in], sizeof rk->param[in], "in%d", rk->nin++);
            draft_buffer(rk->d, rk->param[in], rk->ctx->node_buffer[in], x->dtype, true);
        }
    for (int id = span_of(rk).first, end = span_of(rk).end; id < end; id++)
        if (member(rk, id) && ir_node_fuse(&g->nodes[id]) == IR_FUSE_SCALAR) {
            char name[16];
            snprintf(name, sizeof name, "rt%d", rk->nrt++);
            cuda_runtime_value(rk->d, rk->ctx, id, name, rk->param[id], sizeof rk->param[id]);
        }
}

/* ---- phases ---- */

/* Each member's phase; returns the last. */
static int assign_phases(RowKernel *rk)
{
    const IrGraph *g = rk->ctx->g;
    int last = 0;
    for (int id = span_of(rk).first, end = span_of(rk).end; id < end; id++) {
        if (!member(rk, id)) continue;
        const IrNode *n = &g->nodes[id];
        int p = 0;
        for (int j = 0; j < n->nin; j++)
            if (member(rk, n->in[j]) && rk->phase[n->in[j]] > p) p = rk->phase[n->in[j]];
        rk->phase[id] = p + ir_op_is_reduction(n->op);
        if (rk->phase[id] > last) last = rk->phase[id];
    }
    return last;
}

/* Numbers the row members and the element members, each in node order. */
static void number_locals(RowKernel *rk)
{
    int rows = 0, elements = 0;
    for (int id = span_of(rk).first, end = span_of(rk).end; id < end; id++)
        if (member(rk, id) && ir_node_fuse(node(rk, id)) != IR_FUSE_VIEW)   /* a view: no local */
            rk->local[id] = per_row(rk, &node(rk, id)->shape) ? rows++ : elements++;
}

/* A reduction member accumulated in pass P (its input is a phase-P value). */
static bool reduced_in(const RowKernel *rk, int id, int p)
{
    return member(rk, id) && ir_op_is_reduction(node(rk, id)->op) && rk->phase[id] == p + 1;
}

/* Marks in NEED the element members pass P computes: those it stores, those its
 * reductions read, and what they are computed from. Returns whether the pass has work. */
static bool pass_needs(const RowKernel *rk, int p, bool *need)
{
    const IrGraph *g = rk->ctx->g;
    bool any = false;
    for (int id = span_of(rk).first, end = span_of(rk).end; id < end; id++) {
        need[id] = false;
        for (int j = 0; j < g->nodes[id].nin; j++) need[g->nodes[id].in[j]] = false;
    }
    for (int id = span_of(rk).first, end = span_of(rk).end; id < end; id++) {
        if (element_member(rk, id) && rk->phase[id] == p && stored(rk, id)) need[id] = any = true;
        if (reduced_in(rk, id, p)) need[g->nodes[id].in[0]] = any = true;
    }
    for (int id = span_of(rk).end - 1, first = span_of(rk).first; id >= first; id--)
        for (int j = 0; need[id] && element_member(rk, id) && j < g->nodes[id].nin; j++)
            if (element_member(rk, g->nodes[id].in[j])) need[g->nodes[id].in[j]] = true;
    return any;
}

/* ---- values ---- */

/* Member ID's value, unrounded, from its operands' values. */
static void member_expr(const RowKernel *rk, int id, StrBuf *out)
{
    const IrNode *n = node(rk, id);
    const char *v[IR_MAX_IN] = { "", "", "" };
    for (int j = 0; j < n->nin; j++) v[j] = rk->value[n->in[j]];
    if (ir_node_fuse(n) == IR_FUSE_SCALAR) sb_puts(out, rk->param[id]);
    else if (n->nin == 3) fused_substitute(out, cuda_elementwise_expr(n->op), "", v[1], v[2], v[0]);
    else fused_substitute(out, cuda_elementwise_expr(n->op), v[0], v[0], v[1], "");
}

/* `const float NAME = EXPR;`, rounded to ID's dtype, at INDENT. */
static void render_value(RowKernel *rk, int id, const char *name, const char *expr, const char *indent)
{
    const char *round = fused_rounding(node(rk, id)->dtype);
    snprintf(rk->value[id], sizeof rk->value[id], "%s", name);
    sb_printf(&rk->d->body, "%sconst float %s = %s%s%s%s;   /* %s */\n", indent, name,
              round ? round : "", round ? "(" : "", expr, round ? ")" : "",
              ir_op_name(node(rk, id)->op));
}

/* Member ID (not a reduction) as a local NAME; a RESHAPE is its input's value. */
static void render_member(RowKernel *rk, int id, const char *name, const char *indent)
{
    if (ir_node_fuse(node(rk, id)) == IR_FUSE_VIEW) {
        memcpy(rk->value[id], rk->value[node(rk, id)->in[0]], sizeof rk->value[id]);
        return;
    }
    StrBuf e = { 0 };
    member_expr(rk, id, &e);
    render_value(rk, id, name, e.s, indent);
    sb_free(&e);
}

/* Outside values the members read, one per row, loaded once per row (at r; a single
 * value at 0); f32 constants become literals. */
static void render_row_loads(RowKernel *rk)
{
    const IrGraph *g = rk->ctx->g;
    for (int id = span_of(rk).first, end = span_of(rk).end; id < end; id++)
        for (int j = 0; member(rk, id) && j < g->nodes[id].nin; j++) {
            int in = g->nodes[id].in[j];
            const IrNode *x = &g->nodes[in];
            if (member(rk, in) || rk->value[in][0]) continue;
            if (ir_node_is_literal(x)) {
                cuda_float_literal(x->value, rk->value[in], sizeof rk->value[in]);
            } else if (per_row(rk, &x->shape)) {
                snprintf(rk->value[in], sizeof rk->value[in], "x%s", rk->param[in] + 2);
                sb_printf(&rk->d->body, "        const float %s = cgc_load(%s[%s]);\n", rk->value[in],
                          rk->param[in], ir_shape_is_one(&x->shape) ? "0" : "r");
            } else {
                CGC_ASSERT(element_member(rk, id) || ir_op_is_reduction(g->nodes[id].op));
            }
        }
}

/* The row members of phase P that are not reductions, then the stores of those of
 * phase P (reductions included) that are stored. */
static void render_row_values(RowKernel *rk, int p)
{
    const IrGraph *g = rk->ctx->g;
    StrBuf stores = { 0 };
    for (int id = span_of(rk).first, end = span_of(rk).end; id < end; id++) {
        if (!row_member(rk, id) || rk->phase[id] != p) continue;
        if (!ir_op_is_reduction(g->nodes[id].op)) {
            char name[16];
            snprintf(name, sizeof name, "rv%d", rk->local[id]);
            render_member(rk, id, name, "        ");
        }
        if (stored(rk, id))
            sb_printf(&stores, "            cgc_store(&%s[r], %s);\n", rk->param[id], rk->value[id]);
    }
    if (stores.s) sb_printf(&rk->d->body, "        if (threadIdx.x == 0) {\n%s        }\n", stores.s);
    sb_free(&stores);
}

/* Loads of the outside values pass P's element members and reductions read at element
 * i, with the coordinates they need. */
static void render_element_loads(RowKernel *rk, int p, const bool *need)
{
    const IrGraph *g = rk->ctx->g;
    StrBuf loads = { 0 };
    unsigned coords = 0;
    for (int id = span_of(rk).first, end = span_of(rk).end; id < end; id++) {
        if (!need[id] && !reduced_in(rk, id, p)) continue;
        if (!member(rk, id)) continue;
        for (int j = 0; j < g->nodes[id].nin; j++) {
            int in = g->nodes[id].in[j];
            if (member(rk, in) || rk->value[in][0]) continue;
            char off[CUDA_OFFSET_MAX];
            cuda_operand_offset(rk->d, &rk->work, &g->nodes[in].shape, off, sizeof off, &coords);
            snprintf(rk->value[in], sizeof rk->value[in], "x%s", rk->param[in] + 2);
            sb_printf(&loads, "            const float %s = cgc_load(%s[%s]);\n", rk->value[in],
                      rk->param[in], off);
        }
    }
    if (coords) cuda_render_coords(rk->d, &rk->work, coords, "            ", "i");
    if (loads.s) sb_puts(&rk->d->body, loads.s);
    sb_free(&loads);
}

/* Pass P over the row: its element values, their stores, its reductions' accumulators;
 * then the block reductions, which give the row values of phase P + 1. */
static void render_pass(RowKernel *rk, int p, const bool *need)
{
    const IrGraph *g = rk->ctx->g;
    StrBuf acc = { 0 }, fin = { 0 };
    sb_printf(&rk->d->body, "        /* pass %d over the row */\n", p);
    for (int id = span_of(rk).first, end = span_of(rk).end; id < end; id++) {
        if (!reduced_in(rk, id, p)) continue;
        const IrNode *n = &g->nodes[id];
        bool max = ir_op_info[n->op].combine == IR_COMBINE_MAX;
        int r = rk->local[id];
        sb_printf(&rk->d->body, max ? "        float m%d = -CGC_INF;\n" : "        double acc%d = 0.0;\n", r);
        if (max) sb_printf(&fin, "        m%d = cgc_block_max(m%d, true);\n", r, r);
        else sb_printf(&fin, "        acc%d = cgc_block_sum(acc%d);\n", r, r);
    }
    sb_puts(&rk->d->body, "        for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {\n"
                          "            const int64_t i = base + k;\n");
    render_element_loads(rk, p, need);
    for (int id = span_of(rk).first, end = span_of(rk).end; id < end; id++) {
        if (!need[id] || !element_member(rk, id)) continue;
        char name[16];
        snprintf(name, sizeof name, "v%d", rk->local[id]);
        render_member(rk, id, name, "            ");
        if (rk->phase[id] == p && stored(rk, id))
            sb_printf(&rk->d->body, "            cgc_store(&%s[i], %s);\n", rk->param[id], rk->value[id]);
    }
    for (int id = span_of(rk).first, end = span_of(rk).end; id < end; id++) {
        if (!reduced_in(rk, id, p)) continue;
        const char *x = rk->value[g->nodes[id].in[0]];
        int r = rk->local[id];
        if (ir_op_info[g->nodes[id].op].combine == IR_COMBINE_MAX) sb_printf(&acc, "            m%d = cgc_max_nan(m%d, %s);\n", r, r, x);
        else sb_printf(&acc, "            acc%d += (double)%s;\n", r, x);
    }
    sb_printf(&rk->d->body, "%s        }\n%s", acc.s ? acc.s : "", fin.s ? fin.s : "");
    sb_free(&acc), sb_free(&fin);
}

/* The values of the reductions pass P accumulated. */
static void render_reduced(RowKernel *rk, int p)
{
    const IrGraph *g = rk->ctx->g;
    for (int id = span_of(rk).first, end = span_of(rk).end; id < end; id++) {
        if (!reduced_in(rk, id, p)) continue;
        char name[16], expr[48];
        int r = rk->local[id];
        snprintf(name, sizeof name, "rv%d", r);
        const IrOpInfo *op = &ir_op_info[g->nodes[id].op];
        if (op->combine == IR_COMBINE_MAX) snprintf(expr, sizeof expr, "m%d", r);
        else if (op->mean) snprintf(expr, sizeof expr, "(float)(acc%d / (double)len)", r);
        else snprintf(expr, sizeof expr, "(float)acc%d", r);
        render_value(rk, id, name, expr, "        ");
    }
}

/* Forgets the element values and their loads at the end of a pass (they were locals of
 * its loop); row values stay. */
static void forget(RowKernel *rk, int id)
{
    if (!per_row(rk, &node(rk, id)->shape)) rk->value[id][0] = 0;
}

static void forget_element_values(RowKernel *rk)
{
    const IrGraph *g = rk->ctx->g;
    for (int id = span_of(rk).first, end = span_of(rk).end; id < end; id++) {
        forget(rk, id);
        for (int j = 0; j < g->nodes[id].nin; j++) forget(rk, g->nodes[id].in[j]);
    }
}

static void render_body(RowKernel *rk)
{
    int last = assign_phases(rk);
    number_locals(rk);
    bool *need = rk->ctx->scratch->need;
    AxisExpr a = cuda_axis_expr(rk->d, &rk->work, rk->work.rank - 1);
    sb_printf(&rk->d->body, "    const int64_t rows = %s, len = %s;\n", a.rows_n, a.len);
    sb_puts(&rk->d->body, "    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {\n"
                          "        const int64_t base = r * len;\n");
    render_row_loads(rk);
    for (int p = 0; p <= last; p++) {
        render_row_values(rk, p);
        if (!pass_needs(rk, p, need)) continue;
        render_pass(rk, p, need);
        render_reduced(rk, p);
        forget_element_values(rk);
    }
    sb_puts(&rk->d->body, "    }\n");
    cuda_launch_rows(rk->d, a.rows);
}

void fused_render_row(const RenderCtx *ctx, int k, KernelDraft *d)
{
    const IrGroup *gr = &ctx->g->groups[k - 1];
    CGC_ASSERT(gr->kind == IR_GROUP_ROW && gr->axis == gr->work.rank - 1);
    RenderScratch *s = ctx->scratch;
    RowKernel rk = { .ctx = ctx, .d = d, .k = k, .work = gr->work, .phase = s->phase,
                     .local = s->local, .param = s->param, .value = s->value };
    add_params(&rk);
    render_body(&rk);
    render_scratch_clean(ctx, k);
}
