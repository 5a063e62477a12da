/* cuda.c: the CUDA renderer: one kernel per IR node (the eager mode), and the helpers
 * (dimension expressions, literals, broadcast offsets, loops) that fused.c
 * renders fusion groups with, so that both write the same text for the same thing.
 *
 * Each function renders one op family into a KernelDraft: the parameters (outputs
 * first, then inputs, then seeds and runtime values, then the symbols the body uses)
 * and the body, with every static dimension written as a literal and each symbol as an
 * int64_t parameter sym<k>. Values are loaded as f32 (cgc_load) and stored rounded to
 * the output's dtype (cgc_store), so the math is the CPU executor's (exec_impl.h):
 * f32 arithmetic, sums accumulated in double, the same NaN rules. plan.c names the
 * drafts, shares identical ones and adds the comments naming the .net lines.
 *
 * Only identifiers of our own making reach the text: parameter names, sym<k>, literals.
 */
#include "codegen_impl.h"
#include "perf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


/* ---- dimensions as C expressions ---- */

/* Appends to BUF (of N bytes, holding a string) as snprintf would, asserting that the
 * text fits: BUF is sized for the longest expression (CUDA_DIMS_MAX, CUDA_OFFSET_MAX),
 * and a cut one would be wrong code. */
static void append_expr(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append_expr(char *buf, size_t n, const char *fmt, ...)
{
    size_t used = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf + used, n - used, fmt, ap);
    va_end(ap);
    CGC_ASSERT(len >= 0 && (size_t)len < n - used);
}

/* The product of dims [from, to) of S: literals multiplied out, symbols by name. */
void cuda_dims_expr(KernelDraft *d, const Shape *s, int from, int to, char *buf, size_t n)
{
    int64_t lit = 1;
    char syms[CUDA_DIMS_MAX] = "";
    for (int i = from; i < to; i++) {
        int64_t v = s->dim[i];
        if (!IR_DIM_IS_SYM(v)) {
            lit *= v;
            continue;
        }
        int k = IR_DIM_SYMBOL(v);
        CGC_ASSERT(k >= 0 && k < IR_MAX_SYMBOLS);
        d->symbols |= 1u << k;
        append_expr(syms, sizeof syms, "%ssym%d", syms[0] ? " * " : "", k);
    }
    buf[0] = '\0';
    if (!syms[0]) append_expr(buf, n, "%lld", (long long)lit);
    else if (lit == 1) append_expr(buf, n, "%s", syms);
    else append_expr(buf, n, "%s * %lld", syms, (long long)lit);
}

void cuda_numel_expr(KernelDraft *d, const Shape *s, char *buf, size_t n)
{
    cuda_dims_expr(d, s, 0, s->rank, buf, n);
}

/* ---- literals ---- */

/* V as a float literal that reads back as exactly (float)V: the shortest of %.6g..%.9g
 * that round-trips, always with a point or exponent; inf and nan through the prelude. */
void cuda_float_literal(double v, char *buf, size_t n)
{
    float f = (float)v;
    if (isnan(f)) {
        snprintf(buf, n, "CGC_NAN");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, n, f > 0 ? "CGC_INF" : "(-CGC_INF)");
        return;
    }
    char num[48];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(num, sizeof num, "%.*g", prec, (double)f);
        if (strtof(num, NULL) == f) break;
    }
    if (!strpbrk(num, ".eEn")) strcat(num, ".0");
    snprintf(buf, n, f < 0 || (f == 0 && signbit(f)) ? "(%sf)" : "%sf", num);
}

/* ---- launch geometry ---- */

void cuda_launch_elementwise(KernelDraft *d, const Shape *work)
{
    d->block = CUDA_BLOCK;
    d->any_block = true;        /* a grid-stride loop over WORK */
    d->work = *work;
    d->items_per_block = CUDA_BLOCK * CUDA_ITEMS_PER_THREAD;
    d->max_blocks = CUDA_MAX_BLOCKS;
}

/* One block per row (reductions, softmax): WORK is the shape of the rows. */
void cuda_launch_rows(KernelDraft *d, Shape work)
{
    d->block = CUDA_BLOCK;
    d->work = work;
    d->items_per_block = 1;
    d->max_blocks = CUDA_MAX_BLOCKS;
}

static void launch_single_block(KernelDraft *d, int block)
{
    d->block = block;
    d->work = ir_shape0();
    d->items_per_block = 1;
    d->max_blocks = 1;
}

/* ---- elementwise ops ---- */

/* The f32 expression of an elementwise op over locals x (unary), a, b (binary) and c, a,
 * b (select): ops.def's column EXPR, which the CPU executor compiles too. */
const char *cuda_elementwise_expr(IrOp op)
{
    const char *e = ir_op_info[op].expr;
    if (!e) CGC_INTERNAL("%s is not an elementwise op", ir_op_info[op].name);
    return e;
}

/* One operand of an elementwise kernel: a buffer, or a constant inlined as a literal. */
typedef struct Operand {
    const char *local;      /* "x", "a", "b", "c" */
    bool literal;
    char text[48];          /* the literal, or the parameter's name */
    Shape shape;
} Operand;

/* "i" when the operand has the output's shape, "0" when it is one element, else the
 * sum of the coordinates it does not broadcast times its strides. Sets bit j of *COORDS
 * for each coordinate i<j> it uses. */
void cuda_operand_offset(KernelDraft *d, const Shape *out, const Shape *in, char *buf,
                           size_t n, unsigned *coords)
{
    if (ir_shape_equal(out, in)) {
        snprintf(buf, n, "i");
        return;
    }
    if (ir_shape_is_one(in)) {
        snprintf(buf, n, "0");
        return;
    }
    int lead = out->rank - in->rank;
    buf[0] = '\0';
    for (int j = 0; j < in->rank; j++) {
        if (in->dim[j] == 1) continue;
        char stride[CUDA_DIMS_MAX];
        cuda_dims_expr(d, in, j + 1, in->rank, stride, sizeof stride);
        const char *sep = buf[0] ? " + " : "";
        *coords |= 1u << (j + lead);
        if (strcmp(stride, "1") == 0) append_expr(buf, n, "%si%d", sep, j + lead);
        else append_expr(buf, n, "%si%d * %s", sep, j + lead, stride);
    }
    if (!buf[0]) append_expr(buf, n, "0");
}

/* The coordinates i<j> of element INDEX of OUT that COORDS asks for, each statement
 * indented by INDENT. */
void cuda_render_coords(KernelDraft *d, const Shape *out, unsigned coords, const char *indent,
                        const char *index)
{
    int lo = 0;
    while (!(coords & (1u << lo))) lo++;
    if (out->rank == 1 || (lo == 0 && out->rank == 1)) {
        sb_printf(&d->body, "%sconst int64_t i0 = %s;\n", indent, index);
        return;
    }
    sb_printf(&d->body, "%sint64_t rest = %s;\n", indent, index);
    for (int j = out->rank - 1; j > lo; j--) {
        char dim[CUDA_DIMS_MAX];
        cuda_dims_expr(d, out, j, j + 1, dim, sizeof dim);
        if (coords & (1u << j))
            sb_printf(&d->body, "%sconst int64_t i%d = rest %% %s;\n", indent, j, dim);
        sb_printf(&d->body, "%srest /= %s;\n", indent, dim);
    }
    if (lo == 0) {
        sb_printf(&d->body, "%sconst int64_t i0 = rest;\n", indent);
    } else {
        char dim[CUDA_DIMS_MAX];
        cuda_dims_expr(d, out, lo, lo + 1, dim, sizeof dim);
        sb_printf(&d->body, "%sconst int64_t i%d = rest %% %s;\n", indent, lo, dim);
    }
}

/* out[i] = EXPR(operands) over OUT_SHAPE, each operand broadcast to it. */
static void render_map(KernelDraft *d, const Shape *out_shape, const Operand *ops, int nops,
                       const char *expr)
{
    char n[CUDA_DIMS_MAX], off[IR_MAX_IN][CUDA_OFFSET_MAX];
    unsigned coords = 0;
    cuda_numel_expr(d, out_shape, n, sizeof n);
    for (int k = 0; k < nops; k++)
        if (!ops[k].literal)
            cuda_operand_offset(d, out_shape, &ops[k].shape, off[k], sizeof off[k], &coords);
    sb_printf(&d->body, "    const int64_t n = %s;\n", n);
    sb_puts(&d->body, "    for (int64_t i = cgc_thread_index(); i < n; i += cgc_thread_count()) {\n");
    if (coords) cuda_render_coords(d, out_shape, coords, "        ", "i");
    for (int k = 0; k < nops; k++) {
        if (ops[k].literal)
            sb_printf(&d->body, "        const float %s = %s;\n", ops[k].local, ops[k].text);
        else
            sb_printf(&d->body, "        const float %s = cgc_load(%s[%s]);\n", ops[k].local,
                      ops[k].text, off[k]);
    }
    sb_printf(&d->body, "        cgc_store(&out[i], %s);\n", expr);
    sb_puts(&d->body, "    }\n");
}

/* A literal operand of an elementwise op is written into the kernel. */
static bool inlinable(const IrNode *in) { return ir_node_is_literal(in); }

static void render_elementwise(const RenderCtx *ctx, int id, KernelDraft *d)
{
    static const char *const locals[][3] = { { "x" }, { "a", "b" }, { "c", "a", "b" } };
    static const char *const params[][3] = { { "in_x" }, { "in_a", "in_b" },
                                             { "in_cond", "in_a", "in_b" } };
    const IrNode *node = &ctx->g->nodes[id];
    int which = node->nin - 1;
    Operand ops[IR_MAX_IN];
    draft_buffer(d, "out", ctx->node_buffer[id], node->dtype, false);
    for (int k = 0; k < node->nin; k++) {
        const IrNode *in = &ctx->g->nodes[node->in[k]];
        ops[k] = (Operand){ .local = locals[which][k], .shape = in->shape };
        if (inlinable(in)) {
            ops[k].literal = true;
            cuda_float_literal(in->value, ops[k].text, sizeof ops[k].text);
            continue;
        }
        snprintf(ops[k].text, sizeof ops[k].text, "%s", params[which][k]);
        draft_buffer(d, params[which][k], ctx->node_buffer[node->in[k]], in->dtype, true);
    }
    render_map(d, &node->shape, ops, node->nin, cuda_elementwise_expr(node->op));
    cuda_launch_elementwise(d, &node->shape);
}

void cuda_render_copy(const RenderCtx *ctx, const char *name, int out, DType out_type,
                      const Shape *out_shape, int src, DType src_type, const Shape *src_shape,
                      KernelDraft *d)
{
    (void)ctx;
    snprintf(d->name, sizeof d->name, "%s", name);
    draft_buffer(d, "out", out, out_type, false);
    draft_buffer(d, "in_x", src, src_type, true);
    Operand op = { .local = "x", .shape = *src_shape };
    snprintf(op.text, sizeof op.text, "in_x");
    render_map(d, out_shape, &op, 1, "x");
    cuda_launch_elementwise(d, out_shape);
    draft_finish_symbols(d);
}

/* ---- shape ops ---- */

static void render_transpose(const RenderCtx *ctx, int id, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    const IrNode *x = &ctx->g->nodes[node->in[0]];
    char n[CUDA_DIMS_MAX], rows[CUDA_DIMS_MAX], cols[CUDA_DIMS_MAX];
    draft_buffer(d, "out", ctx->node_buffer[id], node->dtype, false);
    draft_buffer(d, "in_x", ctx->node_buffer[node->in[0]], x->dtype, true);
    cuda_numel_expr(d, &node->shape, n, sizeof n);
    cuda_dims_expr(d, &x->shape, x->shape.rank - 2, x->shape.rank - 1, rows, sizeof rows);
    cuda_dims_expr(d, &x->shape, x->shape.rank - 1, x->shape.rank, cols, sizeof cols);
    sb_printf(&d->body, "    const int64_t n = %s, rows = %s, cols = %s;   /* of the input */\n",
              n, rows, cols);
    sb_puts(&d->body,
            "    for (int64_t i = cgc_thread_index(); i < n; i += cgc_thread_count()) {\n"
            "        const int64_t r = i % rows, q = i / rows, col = q % cols, b = q / cols;\n"
            "        cgc_store(&out[i], cgc_load(in_x[(b * rows + r) * cols + col]));\n"
            "    }\n");
    cuda_launch_elementwise(d, &node->shape);
}

/* Output element i at its coordinates, read from the input where its axes sit: each
 * output axis, last first, peels its coordinate off i and adds it at the stride of the
 * input axis it came from. */
static void render_permute(const RenderCtx *ctx, int id, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    const IrNode *x = &ctx->g->nodes[node->in[0]];
    int rank = node->shape.rank;
    char n[CUDA_DIMS_MAX], dim[CUDA_DIMS_MAX], stride[CUDA_DIMS_MAX];
    draft_buffer(d, "out", ctx->node_buffer[id], node->dtype, false);
    draft_buffer(d, "in_x", ctx->node_buffer[node->in[0]], x->dtype, true);
    cuda_numel_expr(d, &node->shape, n, sizeof n);
    sb_printf(&d->body, "    const int64_t n = %s;\n", n);
    sb_puts(&d->body,
            "    for (int64_t i = cgc_thread_index(); i < n; i += cgc_thread_count()) {\n"
            "        int64_t q = i, at = 0;\n");
    for (int a = rank - 1; a >= 0; a--) {
        int from = ir_perm_axis(node, a);
        cuda_dims_expr(d, &x->shape, from + 1, rank, stride, sizeof stride);
        if (a == 0) {
            sb_printf(&d->body, "        at += q * (%s);\n", stride);
            break;
        }
        cuda_dims_expr(d, &node->shape, a, a + 1, dim, sizeof dim);
        sb_printf(&d->body, "        at += q %% (%s) * (%s);   /* axis %d: the input's %d */\n"
                            "        q /= (%s);\n", dim, stride, a, from, dim);
    }
    sb_puts(&d->body,
            "        cgc_store(&out[i], cgc_load(in_x[at]));\n"
            "    }\n");
    cuda_launch_elementwise(d, &node->shape);
}

/* ---- lookup tables ---- */

/* A thread per output element: its position's row of the table, NaN for an index
 * outside it (the CPU executor reports one as an error). */
static void render_embed(const RenderCtx *ctx, int id, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    const IrNode *t = &ctx->g->nodes[node->in[0]];
    char n[CUDA_DIMS_MAX];
    draft_buffer(d, "out", ctx->node_buffer[id], node->dtype, false);
    draft_buffer(d, "table", ctx->node_buffer[node->in[0]], t->dtype, true);
    draft_buffer(d, "index", ctx->node_buffer[node->in[1]], DT_I32, true);
    cuda_numel_expr(d, &node->shape, n, sizeof n);
    sb_printf(&d->body,
              "    const int64_t n = %s, rows = %lld, width = %lld;\n"
              "    for (int64_t i = cgc_thread_index(); i < n; i += cgc_thread_count()) {\n"
              "        const int32_t v = index[i / width];\n"
              "        const bool inside = v >= 0 && v < rows;\n"
              "        cgc_store(&out[i], inside ? cgc_load(table[v * width + i %% width]) : CGC_NAN);\n"
              "    }\n",
              n, (long long)t->shape.dim[0], (long long)t->shape.dim[1]);
    cuda_launch_elementwise(d, &node->shape);
}

/* A thread per element (v, j) of the table's gradient: d's column j summed over the
 * positions whose index is v, in position order, so that the sum is the CPU executor's
 * bit for bit and the same every run (no atomics). Reads every index once per element:
 * O(rows x width x positions), fine for the vocabularies of character models. */
static void render_embed_grad(const RenderCtx *ctx, int id, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    const IrNode *dn = &ctx->g->nodes[node->in[0]];
    char count[CUDA_DIMS_MAX];
    draft_buffer(d, "out", ctx->node_buffer[id], node->dtype, false);
    draft_buffer(d, "in_d", ctx->node_buffer[node->in[0]], dn->dtype, true);
    draft_buffer(d, "index", ctx->node_buffer[node->in[1]], DT_I32, true);
    cuda_numel_expr(d, &ctx->g->nodes[node->in[1]].shape, count, sizeof count);
    sb_printf(&d->body,
              "    const int64_t n = %lld, width = %lld, count = %s;\n"
              "    for (int64_t i = cgc_thread_index(); i < n; i += cgc_thread_count()) {\n"
              "        const int64_t v = i / width, j = i %% width;\n"
              "        float acc = 0.0f;\n"
              "        for (int64_t p = 0; p < count; p++)\n"
              "            if (index[p] == v) acc += cgc_load(in_d[p * width + j]);\n"
              "        cgc_store(&out[i], acc);\n"
              "    }\n",
              (long long)(node->shape.dim[0] * node->shape.dim[1]), (long long)node->shape.dim[1],
              count);
    cuda_launch_elementwise(d, &node->shape);
}

/* 0, 1, ..., n - 1. */
static void render_arange(const RenderCtx *ctx, int id, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    draft_buffer(d, "out", ctx->node_buffer[id], DT_I32, false);
    sb_printf(&d->body,
              "    for (int64_t i = cgc_thread_index(); i < %lld; i += cgc_thread_count())\n"
              "        out[i] = (int32_t)i;\n", (long long)node->shape.dim[0]);
    cuda_launch_elementwise(d, &node->shape);
}

/* X [.., T, T] with the mask's value where the column (i % T) is past the row. */
static void render_causal_mask(const RenderCtx *ctx, int id, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    const IrNode *x = &ctx->g->nodes[node->in[0]];
    char n[CUDA_DIMS_MAX], value[48];
    draft_buffer(d, "out", ctx->node_buffer[id], node->dtype, false);
    draft_buffer(d, "in_x", ctx->node_buffer[node->in[0]], x->dtype, true);
    cuda_numel_expr(d, &node->shape, n, sizeof n);
    cuda_float_literal(node->value, value, sizeof value);
    sb_printf(&d->body,
              "    const int64_t n = %s, t = %lld;\n"
              "    for (int64_t i = cgc_thread_index(); i < n; i += cgc_thread_count())\n"
              "        cgc_store(&out[i], i %% t > i / t %% t ? %s : cgc_load(in_x[i]));\n",
              n, (long long)node->shape.dim[node->shape.rank - 1], value);
    cuda_launch_elementwise(d, &node->shape);
}

/* ---- sliding windows (ir.h's IrWindow) ---- */

/* The geometry of window node NODE over image IMAGE as constants of the kernel. */
static void window_prelude(KernelDraft *d, const IrNode *node, const Shape *image)
{
    const IrWindow *w = &node->win;
    int64_t c = image->dim[1], h = image->dim[2], wd = image->dim[3];
    int64_t oh = ir_window_extent(h, w, 0), ow = ir_window_extent(wd, w, 1);
    int64_t cg = c / w->groups;
    sb_printf(&d->body,
              "    /* window %dx%d, stride %dx%d, padding %dx%d, dilation %dx%d, groups %d */\n"
              "    const int64_t H = %lld, W = %lld, OH = %lld, OW = %lld;\n"
              "    const int64_t KH = %d, KW = %d, SH = %d, SW = %d, PH = %d, PW = %d, DH = %d, DW = %d;\n"
              "    const int64_t KK = KH * KW, L = OH * OW;\n",
              w->kernel[0], w->kernel[1], w->stride[0], w->stride[1], w->pad[0], w->pad[1],
              w->dilation[0], w->dilation[1], w->groups, (long long)h, (long long)wd, (long long)oh,
              (long long)ow, w->kernel[0], w->kernel[1], w->stride[0], w->stride[1], w->pad[0],
              w->pad[1], w->dilation[0], w->dilation[1]);
    if (node->flags & IR_WINDOW_ROWS)   /* only the rows layout has channels in groups */
        sb_printf(&d->body, "    const int64_t C = %lld, G = %d, CG = %lld;\n", (long long)c, w->groups,
                  (long long)cg);
}

/* `patch(plane, l)` and `STEP`: where the KK entries of image plane n*C + c at output
 * position l start, and how far apart they are (1 in the rows layout, L in pooling's). */
static void window_patch_macro(KernelDraft *d, const IrNode *node)
{
    if (node->flags & IR_WINDOW_ROWS)
        sb_puts(&d->body, "    /* rows [N, G, L, CG*KK]: plane n*C + c, c = g*CG + cg */\n"
                          "#define patch(plane, l) (((((plane) / C) * G + ((plane) % C) / CG) * L + (l)) * CG * KK "
                          "+ (((plane) % C) % CG) * KK)\n"
                          "    const int64_t STEP = 1;\n");
    else
        sb_puts(&d->body, "    /* pooling [N, C, KK, OH, OW]: kernel offsets L apart */\n"
                          "#define patch(plane, l) ((plane) * KK * L + (l))\n"
                          "    const int64_t STEP = L;\n");
}

void cuda_window_entry(StrBuf *out, const IrNode *node, const Shape *image, const char *pixels,
                       const char *index)
{
    const IrWindow *w = &node->win;
    char outside[48];
    CGC_ASSERT(!(node->flags & IR_WINDOW_ROWS) && node->shape.rank == 5);
    cuda_float_literal(node->value, outside, sizeof outside);
    sb_printf(out, "cgc_window_entry(%s, %s, CgcWindow{%lld, %lld, %lld, %lld, %d, %d, %d, %d, %d, %d, %d, %d}, %s)",
              pixels, index, (long long)image->dim[2], (long long)image->dim[3],
              (long long)node->shape.dim[3], (long long)node->shape.dim[4], w->kernel[0], w->kernel[1],
              w->stride[0], w->stride[1], w->pad[0], w->pad[1], w->dilation[0], w->dilation[1], outside);
}

/* UNFOLD: a thread per entry, reading its pixel or the outside value. */
static void render_unfold(const RenderCtx *ctx, int id, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    const IrNode *x = &ctx->g->nodes[node->in[0]];
    char n[CUDA_DIMS_MAX];
    draft_buffer(d, "out", ctx->node_buffer[id], node->dtype, false);
    draft_buffer(d, "in_x", ctx->node_buffer[node->in[0]], x->dtype, true);
    cuda_numel_expr(d, &node->shape, n, sizeof n);
    bool rows = node->flags & IR_WINDOW_ROWS;
    if (rows) window_prelude(d, node, &x->shape);
    else sb_puts(&d->body, "    /* pooling's patches [N, C, KH*KW, OH, OW] */\n");
    sb_printf(&d->body, "    const int64_t n = %s;\n", n);
    sb_puts(&d->body, "    for (int64_t i = cgc_thread_index(); i < n; i += cgc_thread_count()) {\n");
    if (rows) {
        char outside[48];
        cuda_float_literal(node->value, outside, sizeof outside);
        sb_printf(&d->body,
                  "        const int64_t col = i %% (CG * KK), q = i / (CG * KK), l = q %% L, ng = q / L;\n"
                  "        const int64_t plane = (ng / G) * C + (ng %% G) * CG + col / KK, k = col %% KK;\n"
                  "        const int64_t h = (l / OW) * SH - PH + (k / KW) * DH;\n"
                  "        const int64_t w = (l %% OW) * SW - PW + (k %% KW) * DW;\n"
                  "        const bool inside = h >= 0 && h < H && w >= 0 && w < W;\n"
                  "        cgc_store(&out[i], inside ? cgc_load(in_x[(plane * H + h) * W + w]) : %s);\n",
                  outside);
    } else {
        sb_puts(&d->body, "        cgc_store(&out[i], ");
        cuda_window_entry(&d->body, node, &x->shape, "in_x", "i");
        sb_puts(&d->body, ");\n");
    }
    sb_puts(&d->body, "    }\n");
    cuda_launch_elementwise(d, &node->shape);
}

/* FOLD: a thread per pixel, gathering the entries that read it, kernel offsets in order
 * (no atomics: the sum's order is fixed, so the result is the same run after run). */
static void render_fold(const RenderCtx *ctx, int id, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    const IrNode *x = &ctx->g->nodes[node->in[0]];
    char n[CUDA_DIMS_MAX];
    draft_buffer(d, "out", ctx->node_buffer[id], node->dtype, false);
    draft_buffer(d, "in_x", ctx->node_buffer[node->in[0]], x->dtype, true);
    cuda_numel_expr(d, &node->shape, n, sizeof n);
    window_prelude(d, node, &node->shape);
    window_patch_macro(d, node);
    sb_printf(&d->body, "    const int64_t n = %s;\n", n);
    sb_puts(&d->body,
            "    for (int64_t i = cgc_thread_index(); i < n; i += cgc_thread_count()) {\n"
            "        const int64_t plane = i / (H * W), h = i / W % H, w = i % W;\n"
            "        float acc = 0.0f;\n"
            "        for (int64_t ki = 0; ki < KH; ki++) {\n"
            "            const int64_t th = h + PH - ki * DH, oh = th / SH;\n"
            "            if (th < 0 || th % SH != 0 || oh >= OH) continue;\n"
            "            for (int64_t kj = 0; kj < KW; kj++) {\n"
            "                const int64_t tw = w + PW - kj * DW, ow = tw / SW;\n"
            "                if (tw < 0 || tw % SW != 0 || ow >= OW) continue;\n"
            "                acc += cgc_load(in_x[patch(plane, oh * OW + ow) + (ki * KW + kj) * STEP]);\n"
            "            }\n"
            "        }\n"
            "        cgc_store(&out[i], acc);\n"
            "    }\n"
            "#undef patch\n");
    cuda_launch_elementwise(d, &node->shape);
}

void cuda_reduce_to_index(KernelDraft *d, const Shape *xs, const Shape *os, ReduceToIndex *ix)
{
    int lead = xs->rank - os->rank;
    memset(ix, 0, sizeof *ix);
    Shape rs = { 0 };   /* the reduced dimensions, outermost first */
    int red_dim[IR_MAX_RANK];
    for (int j = 0; j < xs->rank; j++) {
        bool reduced = j < lead || (os->dim[j - lead] == 1 && xs->dim[j] != 1);
        if (reduced) red_dim[rs.rank] = j, rs.dim[rs.rank++] = xs->dim[j];
    }
    char stride[CUDA_DIMS_MAX], dim[CUDA_DIMS_MAX];
    /* kept coordinates from o, innermost first */
    sb_puts(&ix->kept, "        int64_t rest = o;\n");
    for (int j = xs->rank - 1; j >= lead; j--) {
        if (os->dim[j - lead] == 1) continue;
        cuda_dims_expr(d, os, j - lead, j - lead + 1, dim, sizeof dim);
        cuda_dims_expr(d, xs, j + 1, xs->rank, stride, sizeof stride);
        sb_printf(&ix->kept, "        const int64_t k%d = rest %% %s;\n        rest /= %s;\n", j, dim, dim);
        sb_printf(&ix->base, "%sk%d * %s", ix->base.len ? " + " : "", j, stride);
    }
    if (!ix->base.len) sb_puts(&ix->base, "0");
    if (rs.rank) sb_puts(&ix->red, "            int64_t left = r;\n");
    for (int t = rs.rank - 1; t >= 0; t--) {
        int j = red_dim[t];
        cuda_dims_expr(d, xs, j, j + 1, dim, sizeof dim);
        cuda_dims_expr(d, xs, j + 1, xs->rank, stride, sizeof stride);
        sb_printf(&ix->red, "            const int64_t r%d = left %% %s;\n            left /= %s;\n", j, dim, dim);
        sb_printf(&ix->off, " + r%d * %s", j, stride);
    }
    if (!ix->red.len) sb_puts(&ix->red, "");
    if (!ix->off.len) sb_puts(&ix->off, "");
    cuda_numel_expr(d, os, ix->nout, sizeof ix->nout);
    cuda_numel_expr(d, &rs, ix->nred, sizeof ix->nred);
    ix->tiles = cuda_reduce_to_tiles(xs, os);
    ix->vec = cuda_reduce_to_vec(xs, os);
}

_Static_assert(CUDA_BLOCK % CUDA_REDUCE_TILE == 0, "a tile's rows are whole warps");

/* Rows narrower than this many vector tiles keep one output a lane: their tiles, four
 * times as many, are what a split needs to fill the GPU within SPLIT_MAX parts. */
enum { VEC_MIN_TILES = 8 };

int cuda_reduce_to_vec(const Shape *xs, const Shape *os)
{
    if (xs->rank == 0 || os->rank == 0 || !ir_shape_is_static(os)) return 0;
    int64_t inner = os->dim[os->rank - 1];
    if (inner != xs->dim[xs->rank - 1] || inner < CUDA_REDUCE_TILE) return 0;
    bool wide = inner >= CUDA_REDUCE_TILE * CUDA_VEC * VEC_MIN_TILES;
    return wide && inner % CUDA_VEC == 0 ? CUDA_VEC : 1;
}

int64_t cuda_reduce_to_tiles(const Shape *xs, const Shape *os)
{
    int64_t width = CUDA_REDUCE_TILE * cuda_reduce_to_vec(xs, os);
    return width ? (ir_numel(os, NULL) + width - 1) / width : 0;
}

/* Split sums: below this many input elements one launch costs less than two; a block
 * sums this many rows of its tile at least; a tile is split this many ways at most. */
enum { SPLIT_MIN_ELEMENTS = 1 << 20, SPLIT_MIN_ROWS = 256, SPLIT_MAX = 64 };

int cuda_reduce_to_split(const Shape *xs, const Shape *os, const int64_t *symmax)
{
    int64_t tiles = cuda_reduce_to_tiles(xs, os);
    if (!tiles || !symmax || ir_numel(xs, symmax) < SPLIT_MIN_ELEMENTS) return 1;
    int64_t fill = perf_fill_threads() / CUDA_BLOCK, want = (fill + tiles - 1) / tiles;
    int64_t most = ir_numel(xs, symmax) / ir_numel(os, NULL) / SPLIT_MIN_ROWS;
    int64_t split = want < most ? want : most;
    return split < 2 ? 1 : split > SPLIT_MAX ? SPLIT_MAX : (int)split;
}

/* The first output of lane threadIdx.x % 32 in tile t: VEC consecutive outputs a lane. */
static void tile_output(KernelDraft *d, const ReduceToIndex *ix)
{
    if (ix->vec > 1)
        sb_printf(&d->body, "        const int64_t o = t * %d + threadIdx.x %% %d * %d;\n",
                  CUDA_REDUCE_TILE * ix->vec, CUDA_REDUCE_TILE, ix->vec);
    else
        sb_printf(&d->body, "        const int64_t o = t * %d + threadIdx.x %% %d;\n", CUDA_REDUCE_TILE,
                  CUDA_REDUCE_TILE);
}

void cuda_reduce_to_open(KernelDraft *d, const ReduceToIndex *ix, const char *first,
                         const char *step)
{
    sb_printf(&d->body, "    const int64_t nout = %s, nred = %s;\n", ix->nout, ix->nred);
    if (ix->split > 1)   /* block v sums rows [s * chunk, end) of tile t */
        sb_printf(&d->body, "    const int64_t chunk = (nred + %d) / %d;\n"
                            "    for (int64_t v = %s; v < %lld; v += %s) {\n"
                            "        const int64_t t = v / %d, s = v %% %d;\n"
                            "        const int64_t end = (s + 1) * chunk < nred ? (s + 1) * chunk : nred;\n",
                  ix->split - 1, ix->split, first, (long long)(ix->tiles * ix->split), step,
                  ix->split, ix->split);
    else if (ix->tiles)
        sb_printf(&d->body, "    for (int64_t t = %s; t < %lld; t += %s) {\n", first, (long long)ix->tiles, step);
    else
        sb_printf(&d->body, "    for (int64_t o = %s; o < nout; o += %s) {\n", first, step);
    if (ix->tiles) tile_output(d, ix);
    sb_puts(&d->body, ix->kept.s);
    sb_printf(&d->body, "        const int64_t base = %s;\n", ix->base.s);
    if (ix->vec > 1) sb_printf(&d->body, "        double acc[%d] = {};\n", ix->vec);
    else sb_puts(&d->body, "        double acc = 0.0;\n");
    bool split = ix->split > 1;
    if (ix->tiles)   /* a warp per row of the tile (of the block's rows, when split); lanes
                      * past the outputs sum nothing */
        sb_printf(&d->body, "        for (int64_t r = o < nout ? %sthreadIdx.x / %d : nred; r < %s; "
                            "r += blockDim.x / %d) {\n", split ? "s * chunk + " : "", CUDA_REDUCE_TILE,
                  split ? "end" : "nred", CUDA_REDUCE_TILE);
    else
        sb_puts(&d->body, "        for (int64_t r = threadIdx.x; r < nred; r += blockDim.x) {\n");
    sb_puts(&d->body, ix->red.s);
}

void cuda_reduce_to_close(KernelDraft *d, const ReduceToIndex *ix, const char *out)
{
    if (ix->tiles && ix->vec > 1) {   /* lane j of the vector: output o + j */
        sb_printf(&d->body, "        for (int j = 0; j < %d; j++) acc[j] = cgc_column_sum(acc[j]);\n", ix->vec);
        if (ix->split > 1 || out)
            sb_printf(&d->body, "        if (threadIdx.x < %d && o < nout)\n"
                                "            for (int j = 0; j < %d; j++) ", CUDA_REDUCE_TILE, ix->vec);
        if (ix->split > 1) sb_puts(&d->body, "parts[s * nout + o + j] = acc[j];\n");
        else if (out) sb_printf(&d->body, "cgc_store(&%s[o + j], (float)acc[j]);\n", out);
    } else if (ix->tiles) {
        sb_puts(&d->body, "        acc = cgc_column_sum(acc);\n");
        if (ix->split > 1)
            sb_printf(&d->body, "        if (threadIdx.x < %d && o < nout) parts[s * nout + o] = acc;\n",
                      CUDA_REDUCE_TILE);
        else if (out)
            sb_printf(&d->body, "        if (threadIdx.x < %d && o < nout) cgc_store(&%s[o], (float)acc);\n",
                      CUDA_REDUCE_TILE, out);
    } else {
        sb_puts(&d->body, "        acc = cgc_block_sum(acc);\n");
        if (out) sb_printf(&d->body, "        if (threadIdx.x == 0) cgc_store(&%s[o], (float)acc);\n", out);
    }
    sb_puts(&d->body, "    }\n");
}

Shape cuda_reduce_to_work(const ReduceToIndex *ix, const Shape *os)
{
    int64_t split = ix->split > 1 ? ix->split : 1;
    return ix->tiles ? (Shape){ .rank = 1, .dim = { ix->tiles * split } } : *os;
}

void cuda_reduce_to_index_free(ReduceToIndex *ix)
{
    sb_free(&ix->kept), sb_free(&ix->red), sb_free(&ix->base), sb_free(&ix->off);
}

void cuda_split_parts_param(KernelDraft *d, ReduceSplit split, bool is_const)
{
    draft_param(d, PP_PTR, is_const ? "const double *" : "double *", "parts",
                (PlanArg){ .kind = ARG_BUFFER, .index = split.parts });
}

void cuda_render_reduce_parts(const RenderCtx *ctx, int id, ReduceSplit split, KernelDraft *d)
{
    const IrNode *n = &ctx->g->nodes[id];
    int64_t nout = ir_numel(&n->shape, NULL);
    CGC_ASSERT(split.count > 1 && nout > 0);
    snprintf(d->name, sizeof d->name, "sum_parts_%lldx%d_%s", (long long)nout, split.count,
             ir_dtype_name(n->dtype));
    draft_buffer(d, "out", ctx->node_buffer[id], n->dtype, false);
    cuda_split_parts_param(d, split, true);
    /* a warp an output: lane j sums parts j, j + 32, ... in order, then the warp's lanes
     * in a fixed tree (the same bits every run) */
    sb_printf(&d->body, "    for (int64_t o = cgc_thread_index() / 32; o < %lld; o += cgc_thread_count() / 32) {\n"
                        "        double acc = 0.0;\n"
                        "        for (int s = threadIdx.x %% 32; s < %d; s += 32) acc += parts[s * %lld + o];\n"
                        "        acc = cgc_warp_sum(acc);\n"
                        "        if (threadIdx.x %% 32 == 0) cgc_store(&out[o], (float)acc);\n"
                        "    }\n", (long long)nout, split.count, (long long)nout);
    Shape lanes = { .rank = 1, .dim = { nout * 32 } };
    cuda_launch_elementwise(d, &lanes);
    d->items_per_block = CUDA_BLOCK;   /* a lane a thread */
}

/* REDUCE_TO: output element o sums, in double, every input element that broadcasting
 * pairs with it; a block per output element or per tile (cuda_reduce_to_index). */
static void render_reduce_to(const RenderCtx *ctx, int id, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    const Shape *xs = &ctx->g->nodes[node->in[0]].shape, *os = &node->shape;
    ReduceToIndex ix;
    cuda_reduce_to_index(d, xs, os, &ix);
    ix.split = ctx->split.count;
    if (ix.split > 1) cuda_split_parts_param(d, ctx->split, false);
    else draft_buffer(d, "out", ctx->node_buffer[id], node->dtype, false);
    draft_buffer(d, "in_x", ctx->node_buffer[node->in[0]], ctx->g->nodes[node->in[0]].dtype, true);
    cuda_reduce_to_open(d, &ix, "blockIdx.x", "gridDim.x");
    if (ix.vec > 1)
        sb_printf(&d->body, "            const cgc_f4 q = cgc_load4(in_x + base%s);\n"
                            "            for (int j = 0; j < %d; j++) acc[j] += (double)q.x[j];\n        }\n",
                  ix.off.s, ix.vec);
    else
        sb_printf(&d->body, "            acc += (double)cgc_load(in_x[base%s]);\n        }\n", ix.off.s);
    cuda_reduce_to_close(d, &ix, "out");
    cuda_launch_rows(d, cuda_reduce_to_work(&ix, os));
    cuda_reduce_to_index_free(&ix);
}

/* ---- along an axis: X seen as [outer, len, inner] ---- */

AxisExpr cuda_axis_expr(KernelDraft *d, const Shape *x, int axis)
{
    AxisExpr a;
    if (axis == IR_AXIS_ALL) {
        snprintf(a.rows_n, sizeof a.rows_n, "1");
        cuda_numel_expr(d, x, a.len, sizeof a.len);
        snprintf(a.inner, sizeof a.inner, "1");
        a.rows = ir_shape0();
        return a;
    }
    CGC_ASSERT(axis >= 0 && axis < x->rank);
    cuda_dims_expr(d, x, axis, axis + 1, a.len, sizeof a.len);
    cuda_dims_expr(d, x, axis + 1, x->rank, a.inner, sizeof a.inner);
    a.rows = ir_shape_reduce(x, axis);
    cuda_numel_expr(d, &a.rows, a.rows_n, sizeof a.rows_n);
    return a;
}

void cuda_render_row_loop(KernelDraft *d, const AxisExpr *a, const char *first, const char *step,
                          int split)
{
    sb_printf(&d->body, "    const int64_t rows = %s, len = %s, inner = %s;\n", a->rows_n,
              a->len, a->inner);
    if (split > 1)   /* block v sums elements [from, end) of row r: chunks of whole vectors */
        sb_printf(&d->body, "    const int64_t chunk = (len + %d) / %d * %d;\n"
                            "    for (int64_t v = %s; v < rows * %d; v += %s) {\n"
                            "        const int64_t r = v / %d, s = v %% %d;\n"
                            "        const int64_t from = s * chunk, end = from + chunk < len ? from + chunk : len;\n",
                  split * CUDA_VEC - 1, split * CUDA_VEC, CUDA_VEC, first, split, step, split, split);
    else
        sb_printf(&d->body, "    for (int64_t r = %s; r < rows; r += %s) {\n", first, step);
    sb_puts(&d->body, "        const int64_t base = (r / inner) * len * inner + r % inner;\n");
}

/* Below this many elements a block, a split sum along an axis gains less than its second
 * launch costs; a row is split this many ways at most. */
enum { SPLIT_MIN_BLOCK_ELEMENTS = 16 * CUDA_BLOCK, SPLIT_ROW_MAX = 1024 };

int cuda_reduce_axis_split(const Shape *x, int axis, const int64_t *symmax)
{
    Shape rows = ir_shape_reduce(x, axis);
    if (!symmax || !ir_shape_is_static(&rows) || ir_numel(x, symmax) < SPLIT_MIN_ELEMENTS) return 1;
    int64_t nrows = ir_numel(&rows, NULL);
    int64_t fill = perf_fill_threads() / CUDA_BLOCK, want = (fill + nrows - 1) / nrows;
    int64_t most = ir_numel(x, symmax) / nrows / SPLIT_MIN_BLOCK_ELEMENTS;
    int64_t split = want < most ? want : most;
    return split < 2 ? 1 : split > SPLIT_ROW_MAX ? SPLIT_ROW_MAX : (int)split;
}

/* The start of an op along an axis of its one input x, out -> in_x: the parameters and
 * the loop over rows, a block each (a sum split SPLIT ways: `parts`, not `out`). */
static AxisExpr begin_row_op(const RenderCtx *ctx, int id, KernelDraft *d, ReduceSplit split)
{
    const IrNode *node = &ctx->g->nodes[id];
    const IrNode *x = &ctx->g->nodes[node->in[0]];
    if (split.count > 1) cuda_split_parts_param(d, split, false);
    else draft_buffer(d, "out", ctx->node_buffer[id], node->dtype, false);
    draft_buffer(d, "in_x", ctx->node_buffer[node->in[0]], x->dtype, true);
    AxisExpr a = cuda_axis_expr(d, &x->shape, node->axis);
    cuda_render_row_loop(d, &a, "blockIdx.x", "gridDim.x", split.count);
    return a;
}

const char *cuda_row_sum_store(const IrNode *n, bool split)
{
    if (split) return ir_op_info[n->op].mean ? "parts[s * rows + r] = acc%d / (double)len;"
                                             : "parts[s * rows + r] = acc%d;";
    return ir_op_info[n->op].mean ? "cgc_store(&%s[r], (float)(acc%d / (double)len));"
                                  : "cgc_store(&%s[r], (float)acc%d);";
}

static void render_reduce(const RenderCtx *ctx, int id, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    bool split = ctx->split.count > 1;
    AxisExpr a = begin_row_op(ctx, id, d, ctx->split);
    if (ir_op_info[node->op].combine == IR_COMBINE_MAX) {
        /* NaN wins (torch.amax); the max of nothing is NaN, as on the CPU */
        sb_puts(&d->body,
                "        float m = -CGC_INF;\n"
                "        for (int64_t k = threadIdx.x; k < len; k += blockDim.x)\n"
                "            m = cgc_max_nan(m, cgc_load(in_x[base + k * inner]));\n"
                "        m = cgc_block_max(m, true);\n"
                "        if (threadIdx.x == 0) cgc_store(&out[r], len == 0 ? CGC_NAN : m);\n"
                "    }\n");
    } else {
        sb_printf(&d->body,
                  "        double acc0 = 0.0;\n"
                  "        for (int64_t k = %sthreadIdx.x; k < %s; k += blockDim.x)\n"
                  "            acc0 += (double)cgc_load(in_x[base + k * inner]);\n"
                  "        acc0 = cgc_block_sum(acc0);\n"
                  "        if (threadIdx.x == 0) ", split ? "from + " : "", split ? "end" : "len");
        if (split) sb_printf(&d->body, cuda_row_sum_store(node, true), 0);
        else sb_printf(&d->body, cuda_row_sum_store(node, false), "out", 0);
        sb_puts(&d->body, "\n    }\n");
    }
    cuda_launch_rows(d, cuda_row_work(&a.rows, ctx->split.count));
}

Shape cuda_row_work(const Shape *rows, int split)
{
    return split > 1 ? (Shape){ .rank = 1, .dim = { ir_numel(rows, NULL) * split } } : *rows;
}

/* SOFTMAX and LOG_SOFTMAX: the row's maximum, the sum of exp(x - max) in double, then
 * the values (exec_impl.h's softmax_row); exp is cgc_expf, as the CPU executor's. */
static void render_softmax(const RenderCtx *ctx, int id, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    AxisExpr a = begin_row_op(ctx, id, d, (ReduceSplit){ 1, -1 });
    sb_puts(&d->body,
            "        float m = -CGC_INF;\n"
            "        for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {\n"
            "            const float v = cgc_load(in_x[base + k * inner]);\n"
            "            m = v > m ? v : m;\n"
            "        }\n"
            "        m = cgc_block_max(m, false);\n"
            "        double s = 0.0;\n"
            "        for (int64_t k = threadIdx.x; k < len; k += blockDim.x)\n"
            "            s += (double)cgc_expf(cgc_load(in_x[base + k * inner]) - m);\n"
            "        s = cgc_block_sum(s);\n");
    if (node->op == IR_SOFTMAX)
        sb_puts(&d->body,
                "        for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {\n"
                "            const float z = cgc_expf(cgc_load(in_x[base + k * inner]) - m);\n"
                "            cgc_store(&out[base + k * inner], (float)((double)z / s));\n"
                "        }\n    }\n");
    else
        sb_puts(&d->body,
                "        const float lse = m + (float)log(s);\n"
                "        for (int64_t k = threadIdx.x; k < len; k += blockDim.x)\n"
                "            cgc_store(&out[base + k * inner], cgc_load(in_x[base + k * inner]) - lse);\n"
                "    }\n");
    cuda_launch_rows(d, a.rows);
}

/* SOFTMAX_GRAD: y (d - sum(d y)); LOG_SOFTMAX_GRAD: d - e^y sum(d). */
static void render_softmax_grad(const RenderCtx *ctx, int id, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    const IrNode *dn = &ctx->g->nodes[node->in[0]], *yn = &ctx->g->nodes[node->in[1]];
    bool soft = node->op == IR_SOFTMAX_GRAD;
    draft_buffer(d, "out", ctx->node_buffer[id], node->dtype, false);
    draft_buffer(d, "in_d", ctx->node_buffer[node->in[0]], dn->dtype, true);
    draft_buffer(d, "in_y", ctx->node_buffer[node->in[1]], yn->dtype, true);
    AxisExpr a = cuda_axis_expr(d, &dn->shape, node->axis);
    cuda_render_row_loop(d, &a, "blockIdx.x", "gridDim.x", 1);
    sb_printf(&d->body,
              "        double s = 0.0;\n"
              "        for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {\n"
              "            const int64_t at = base + k * inner;\n"
              "            s += %s;\n"
              "        }\n"
              "        const float sum = (float)cgc_block_sum(s);\n"
              "        for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {\n"
              "            const int64_t at = base + k * inner;\n"
              "            const float dv = cgc_load(in_d[at]), y = cgc_load(in_y[at]);\n"
              "            cgc_store(&out[at], %s);\n"
              "        }\n    }\n",
              soft ? "(double)cgc_load(in_d[at]) * (double)cgc_load(in_y[at])"
                   : "(double)cgc_load(in_d[at])",
              soft ? "y * (dv - sum)" : "dv - cgc_expf(y) * sum");
    cuda_launch_rows(d, a.rows);
}

/* ---- losses and metrics: logits [..., C], labels i32 [...]: a row per position ---- */

/* Declares n (rows) and c, and opens the loop over rows r, from FIRST by STEP. */
static void render_loss_head(KernelDraft *d, const Shape *logits, const char *first, const char *step)
{
    char n[CUDA_DIMS_MAX], c[CUDA_DIMS_MAX];
    cuda_dims_expr(d, logits, 0, logits->rank - 1, n, sizeof n);
    cuda_dims_expr(d, logits, logits->rank - 1, logits->rank, c, sizeof c);
    sb_printf(&d->body, "    const int64_t n = %s, c = %s;\n", n, c);
    sb_printf(&d->body, "    for (int64_t r = %s; r < n; r += %s) {\n", first, step);
}

/* Row r's lse (in double) and label, the row's logits read by the lanes of a warp: the
 * maximum, then the sum of exp(x - max) in double, as the CPU executor's softmax row; a
 * NaN logit makes the sum, and so lse, NaN. */
static void render_lse(KernelDraft *d)
{
    sb_puts(&d->body,
            "        float m = -CGC_INF;\n"
            "        for (int64_t k = lane; k < c; k += 32) {\n"
            "            const float v = cgc_load(logits[r * c + k]);\n"
            "            m = v > m ? v : m;\n"
            "        }\n"
            "        m = cgc_warp_max(m);\n"
            "        double s = 0.0;\n"
            "        for (int64_t k = lane; k < c; k += 32) s += (double)cgc_expf(cgc_load(logits[r * c + k]) - m);\n"
            "        s = cgc_warp_sum(s);\n"
            "        const double lse = (double)m + log(s);\n"
            "        const int32_t label = labels[r];\n");
}

static void add_loss_inputs(const RenderCtx *ctx, const IrNode *node, KernelDraft *d, int first)
{
    const IrNode *lg = &ctx->g->nodes[node->in[first]], *lb = &ctx->g->nodes[node->in[first + 1]];
    CGC_ASSERT(lg->shape.rank >= 2 && lb->dtype == DT_I32);
    draft_buffer(d, "logits", ctx->node_buffer[node->in[first]], lg->dtype, true);
    draft_buffer(d, "labels", ctx->node_buffer[node->in[first + 1]], DT_I32, true);
}

/* One block adds a term per row of (logits, labels) into its threads' `part`: a row per
 * thread, or (WARP) a row per warp, its lane 0 adding; the caller renders the row body
 * between begin and end. */
static void begin_row_sum(const RenderCtx *ctx, int id, KernelDraft *d, bool warp)
{
    const IrNode *node = &ctx->g->nodes[id];
    draft_buffer(d, "out", ctx->node_buffer[id], node->dtype, false);
    add_loss_inputs(ctx, node, d, 0);
    sb_puts(&d->body, "    if (blockIdx.x != 0) return;\n    double part = 0.0;\n");
    if (warp) sb_puts(&d->body, "    const int lane = threadIdx.x & 31;\n");
    render_loss_head(d, &ctx->g->nodes[node->in[0]].shape, warp ? "threadIdx.x >> 5" : "threadIdx.x",
                     warp ? "blockDim.x >> 5" : "blockDim.x");
}

/* Closes the row loop and stores RESULT (an expression of the block's `total`); BLOCK
 * threads. */
static void end_row_sum(KernelDraft *d, const char *result, int block)
{
    sb_printf(&d->body,
              "    }\n"
              "    const double total = cgc_block_sum(part);\n"
              "    if (threadIdx.x == 0) cgc_store(&out[0], %s);\n", result);
    launch_single_block(d, block);
}

/* Mean over the rows of logsumexp - logit[label], in double, by one block of 32 warps, a
 * row per warp. A label out of range makes the loss NaN (the CPU executor reports it as
 * an error). */
static void render_cross_entropy(const RenderCtx *ctx, int id, KernelDraft *d)
{
    begin_row_sum(ctx, id, d, true);
    render_lse(d);
    sb_puts(&d->body,
            "        if (lane == 0)\n"
            "            part += (label < 0 || label >= c) ? (double)CGC_NAN\n"
            "                                              : lse - (double)cgc_load(logits[r * c + label]);\n");
    end_row_sum(d, "(float)(total / (double)n)", 1024);
}

/* CE_GRAD node GRAD's rows: d (softmax(x) - onehot(label)) / N, a row per warp (its lanes
 * read the row's logits and write its gradient, in turn), each row's lines ending with
 * ROW_END (the classifier's loss), grid-stride. */
static void render_ce_grad_rows(const RenderCtx *ctx, int grad, const char *row_end, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[grad];
    const IrNode *dn = &ctx->g->nodes[node->in[0]];
    draft_buffer(d, "out", ctx->node_buffer[grad], node->dtype, false);
    draft_buffer(d, "in_d", ctx->node_buffer[node->in[0]], dn->dtype, true);
    add_loss_inputs(ctx, node, d, 1);
    const Shape *ls = &ctx->g->nodes[node->in[1]].shape;
    char n[CUDA_DIMS_MAX];
    cuda_dims_expr(d, ls, 0, ls->rank - 1, n, sizeof n);
    sb_printf(&d->body, "    const double scale = (double)cgc_load(in_d[0]) / (double)(%s);\n", n);
    sb_puts(&d->body, "    const int lane = threadIdx.x & 31;\n");
    render_loss_head(d, ls, "cgc_thread_index() >> 5", "cgc_thread_count() >> 5");
    render_lse(d);
    sb_puts(&d->body,
            "        const bool bad = label < 0 || label >= c;\n"
            "        for (int64_t k = lane; k < c; k += 32) {\n"
            "            const double p = exp((double)cgc_load(logits[r * c + k]) - lse) - (k == label ? 1.0 : 0.0);\n"
            "            cgc_store(&out[r * c + k], bad ? CGC_NAN : (float)(scale * p));\n"
            "        }\n");
    sb_puts(&d->body, row_end);
    sb_puts(&d->body, "    }\n");
    cuda_launch_rows(d, ir_shape_reduce(ls, ls->rank - 1));
    d->items_per_block = CUDA_BLOCK / 32;
}

static void render_ce_grad(const RenderCtx *ctx, int id, KernelDraft *d)
{
    render_ce_grad_rows(ctx, id, "", d);
    d->any_block = true;        /* a warp a row, grid-stride: no block shares anything */
}

void cuda_render_last_block(KernelDraft *d, const Plan *plan)
{
    draft_param(d, PP_PTR, "unsigned int *", "counter",
                (PlanArg){ .kind = ARG_BUFFER, .index = plan->launch_counter });
    sb_puts(&d->body, "    __shared__ bool last_block;\n"
                      "    __syncthreads();\n"
                      "    if (threadIdx.x == 0) {\n"
                      "        __threadfence();\n"
                      "        last_block = atomicAdd(counter, 1u) == gridDim.x - 1;\n"
                      "    }\n"
                      "    __syncthreads();\n"
                      "    if (!last_block) return;\n"
                      "    __threadfence();\n");
}

/* The fused classifier (ir.h, IR_GROUP_CLASSIFIER): LOSS (a CROSS_ENTROPY) and GRAD (the
 * CE_GRAD of the same logits and labels) in one pass: GRAD's rows as render_ce_grad
 * writes them, each row's loss (as render_cross_entropy's) into PARTIAL[row] (f32), and
 * the launch's last block (cuda_render_last_block) adds those in order: the same loss on
 * any grid. */
void cuda_render_classifier(const RenderCtx *ctx, int loss, int grad, int partial, KernelDraft *d)
{
    const IrNode *g = &ctx->g->nodes[grad];
    snprintf(d->name, sizeof d->name, "classifier_%s", ir_dtype_name(ctx->g->nodes[g->in[1]].dtype));
    draft_buffer(d, "loss", ctx->node_buffer[loss], ctx->g->nodes[loss].dtype, false);
    draft_buffer(d, "partial", partial, DT_F32, false);
    render_ce_grad_rows(ctx, grad, "        if (lane == 0)\n"
                                   "            partial[r] = bad ? CGC_NAN : (float)(lse - (double)cgc_load(logits[r * c + label]));\n", d);
    sb_puts(&d->body, "    /* The last block to finish adds the rows' losses, in order. */\n");
    cuda_render_last_block(d, ctx->plan);
    sb_puts(&d->body,
            "    double total = 0.0;\n"
            "    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) total += (double)partial[i];\n"
            "    total = cgc_block_sum(total);\n"
            "    if (threadIdx.x == 0) {\n"
            "        cgc_store(&loss[0], (float)(total / (double)n));\n"
            "        *counter = 0u;   /* for the next launch */\n"
            "    }\n");
    draft_finish_symbols(d);
}

/* Rows whose first maximal logit is at the label, counted by one block. */
static void render_count_correct(const RenderCtx *ctx, int id, KernelDraft *d)
{
    begin_row_sum(ctx, id, d, false);
    sb_puts(&d->body,
            "        int64_t best = 0;\n"
            "        for (int64_t k = 1; k < c; k++)\n"
            "            if (cgc_load(logits[r * c + k]) > cgc_load(logits[r * c + best])) best = k;\n"
            "        part += best == labels[r] ? 1.0 : 0.0;\n");
    end_row_sum(d, "(float)total", CUDA_BLOCK);
}

/* ---- the rest ---- */

void cuda_dropout_element(KernelDraft *d, const IrNode *node, const char *i, char *buf, size_t n)
{
    if (!ir_shape_is_batched(&node->shape)) {
        snprintf(buf, n, "(uint64_t)%s", i);
        return;
    }
    char row[CUDA_DIMS_MAX];
    cuda_dims_expr(d, &node->shape, 1, node->shape.rank, row, sizeof row);
    snprintf(buf, n, "rank_row * (uint64_t)(%s) + (uint64_t)%s", row, i);
}

static void render_dropout(const RenderCtx *ctx, int id, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    const IrNode *x = &ctx->g->nodes[node->in[0]], *ctr = &ctx->g->nodes[node->in[1]];
    char n[CUDA_DIMS_MAX], p[48], scale[48], element[CUDA_DIMS_MAX + 64];
    draft_buffer(d, "out", ctx->node_buffer[id], node->dtype, false);
    draft_buffer(d, "in_x", ctx->node_buffer[node->in[0]], x->dtype, true);
    draft_buffer(d, "counter", ctx->node_buffer[node->in[1]], ctr->dtype, true);
    draft_param(d, PP_U64, "uint64_t", "seed", (PlanArg){ .kind = ARG_SEED });
    if (ir_shape_is_batched(&node->shape))
        draft_param(d, PP_U64, "uint64_t", "rank_row", (PlanArg){ .kind = ARG_RANK_ROW });
    cuda_numel_expr(d, &node->shape, n, sizeof n);
    cuda_dropout_element(d, node, "i", element, sizeof element);
    cuda_float_literal(node->value, p, sizeof p);
    cuda_float_literal(1.0 / (1.0 - node->value), scale, sizeof scale);
    sb_printf(&d->body,
              "    const int64_t n = %s;\n"
              "    const uint64_t step = cgc_to_counter(cgc_load(counter[0]));\n"
              "    for (int64_t i = cgc_thread_index(); i < n; i += cgc_thread_count()) {\n"
              "        const bool keep = cgc_dropout_keep(seed, %d, step, %s, %s);\n"
              "        cgc_store(&out[i], keep ? cgc_load(in_x[i]) * %s : 0.0f);\n"
              "    }\n",
              n, node->index, element, p, scale);
    cuda_launch_elementwise(d, &node->shape);
}

void cuda_runtime_value(KernelDraft *d, const RenderCtx *ctx, int id, const char *name,
                        char *expr, size_t len)
{
    const IrNode *node = &ctx->g->nodes[id];
    const Plan *pl = ctx->plan;
    bool train = ctx->g == pl->graph[PG_TRAIN].ir || ctx->g == pl->graph[PG_TRAIN_MICRO].ir;
    CGC_ASSERT(ir_node_fuse(node) == IR_FUSE_SCALAR);
    if (pl->step_state >= 0 && train && node->index == IR_RT_MICRO_STEP) {
        draft_param(d, PP_PTR, "const int64_t *", name,
                    (PlanArg){ .kind = ARG_BUFFER, .index = pl->step_state });
        snprintf(expr, len, "((float)%s[0])", name);
    } else {
        draft_param(d, PP_F32, "float", name, (PlanArg){ .kind = ARG_RUNTIME, .index = node->index });
        snprintf(expr, len, "%s", name);
    }
}

static void render_runtime(const RenderCtx *ctx, int id, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    char value[64];
    draft_buffer(d, "out", ctx->node_buffer[id], node->dtype, false);
    cuda_runtime_value(d, ctx, id, "value", value, sizeof value);
    sb_printf(&d->body, "    if (blockIdx.x == 0 && threadIdx.x == 0) cgc_store(&out[0], %s);\n", value);
    launch_single_block(d, 32);
}

/* shard = optimizer: this rank's slice of x, S elements from rank * S, zeros past x's end
 * (ops.def). */
static void render_shard(const RenderCtx *ctx, int id, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    const IrNode *x = &ctx->g->nodes[node->in[0]];
    char n[CUDA_DIMS_MAX], s[CUDA_DIMS_MAX];
    draft_buffer(d, "out", ctx->node_buffer[id], node->dtype, false);
    draft_buffer(d, "in_x", ctx->node_buffer[node->in[0]], x->dtype, true);
    draft_param(d, PP_I64, "int64_t", "rank", (PlanArg){ .kind = ARG_RANK });
    cuda_numel_expr(d, &x->shape, n, sizeof n);
    cuda_numel_expr(d, &node->shape, s, sizeof s);
    sb_printf(&d->body,
              "    const int64_t n = %s, s = %s, first = rank * s;\n"
              "    for (int64_t i = cgc_thread_index(); i < s; i += cgc_thread_count())\n"
              "        cgc_store(&out[i], first + i < n ? cgc_load(in_x[first + i]) : 0.0f);\n",
              n, s);
    cuda_launch_elementwise(d, &node->shape);
}

/* A RESHAPE that changes the dtype (a same-dtype one is a view): the elements in order. */
static void render_reshape(const RenderCtx *ctx, int id, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    const IrNode *x = &ctx->g->nodes[node->in[0]];
    draft_buffer(d, "out", ctx->node_buffer[id], node->dtype, false);
    draft_buffer(d, "in_x", ctx->node_buffer[node->in[0]], x->dtype, true);
    Operand op = { .local = "x", .shape = node->shape };
    snprintf(op.text, sizeof op.text, "in_x");
    render_map(d, &node->shape, &op, 1, "x");
    cuda_launch_elementwise(d, &node->shape);
}

static void base_name(const RenderCtx *ctx, int id, const char *what, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    char who[40];
    if (node->name) codegen_mangle(who, sizeof who, node->name);
    else snprintf(who, sizeof who, "%s_%d", ctx->g->name, id);
    char tag[32];
    codegen_mangle(tag, sizeof tag, what);
    snprintf(d->name, sizeof d->name, "%s_%s", tag, who);
}

/* The kernel of NODE's family; false for the families that have none (leaves and views
 * are buffers, ASSIGNs copies, MATMULs GEMM calls: plan.c never asks). */
static bool render_family(const RenderCtx *ctx, int id, KernelDraft *d)
{
    switch (ir_op_info[ctx->g->nodes[id].op].family) {
    case IR_FAMILY_ELEMENTWISE: case IR_FAMILY_BROADCAST: render_elementwise(ctx, id, d); return true;
    case IR_FAMILY_REDUCE: render_reduce(ctx, id, d); return true;
    case IR_FAMILY_RESHAPE: render_reshape(ctx, id, d); return true;
    case IR_FAMILY_REDUCE_TO: render_reduce_to(ctx, id, d); return true;
    case IR_FAMILY_TRANSPOSE: render_transpose(ctx, id, d); return true;
    case IR_FAMILY_PERMUTE: render_permute(ctx, id, d); return true;
    case IR_FAMILY_EMBED: render_embed(ctx, id, d); return true;
    case IR_FAMILY_ARANGE: render_arange(ctx, id, d); return true;
    case IR_FAMILY_CAUSAL_MASK: render_causal_mask(ctx, id, d); return true;
    case IR_FAMILY_EMBED_GRAD: render_embed_grad(ctx, id, d); return true;
    case IR_FAMILY_SOFTMAX: render_softmax(ctx, id, d); return true;
    case IR_FAMILY_SOFTMAX_GRAD: render_softmax_grad(ctx, id, d); return true;
    case IR_FAMILY_CROSS_ENTROPY: render_cross_entropy(ctx, id, d); return true;
    case IR_FAMILY_CE_GRAD: render_ce_grad(ctx, id, d); return true;
    case IR_FAMILY_COUNT_CORRECT: render_count_correct(ctx, id, d); return true;
    case IR_FAMILY_DROPOUT: render_dropout(ctx, id, d); return true;
    case IR_FAMILY_RUNTIME: render_runtime(ctx, id, d); return true;
    case IR_FAMILY_WINDOW:
        if (ir_op_info[ctx->g->nodes[id].op].shape == IR_SHAPE_WINDOW) render_unfold(ctx, id, d);
        else render_fold(ctx, id, d);
        return true;
    case IR_FAMILY_COLLECTIVE:
        if (ir_op_info[ctx->g->nodes[id].op].fuse == IR_FUSE_COLLECTIVE) return false;   /* the job's */
        render_shard(ctx, id, d);
        return true;
    case IR_FAMILY_MODE_SWITCH:
    case IR_FAMILY_INPUT: case IR_FAMILY_READ: case IR_FAMILY_CONST: case IR_FAMILY_MATMUL:
    case IR_FAMILY_ASSIGN:
        return false;
    }
    return false;
}

void cuda_render_node(const RenderCtx *ctx, int id, KernelDraft *d)
{
    const IrNode *node = &ctx->g->nodes[id];
    if (!render_family(ctx, id, d))
        CGC_INTERNAL("no CUDA kernel for %s (node %%%d)", ir_op_info[node->op].name, id);
    char what[48];
    IrFamily f = ir_op_info[node->op].family;
    if (f == IR_FAMILY_REDUCE && node->axis == IR_AXIS_ALL)
        snprintf(what, sizeof what, "%s_all", ir_op_name(node->op));
    else if (f == IR_FAMILY_REDUCE || f == IR_FAMILY_SOFTMAX || f == IR_FAMILY_SOFTMAX_GRAD)
        snprintf(what, sizeof what, "%s_axis%d", ir_op_name(node->op), node->axis);
    else
        snprintf(what, sizeof what, "%s", ir_op_name(node->op));
    base_name(ctx, id, what, d);
    draft_finish_symbols(d);
}

/* ---- the data pipeline (plan.h lists what each computes) ---- */

typedef struct DataKernelSpec {
    const char *name;
    int block;
    const char *params;         /* "TYPE NAME" pairs separated by ", " */
    const char *body;
} DataKernelSpec;

/* The batch gathers, f32 and i32 alike: rows [first, first + count) of the epoch's order
 * (FIRST from the step state when the step counter lives on the device). */
#define GATHER_PARAMS \
    "const int32_t *order, int64_t start, int64_t count, int64_t row, const int64_t *state, " \
    "int64_t stride, int64_t base"
#define GATHER_BODY \
    "    const int64_t first = state ? state[1] : start;\n" \
    "    for (int64_t i = cgc_thread_index(); i < count * row; i += cgc_thread_count()) {\n" \
    "        const int64_t r = i / row, col = i % row;\n" \
    "        const int64_t src = order ? (int64_t)order[first + r] : first + r;\n" \
    "        out[i] = data[base + src * stride + col];\n" \
    "    }\n"

static const DataKernelSpec data_kernels[PDK_NUM] = {
    [PDK_ORDER_DRAWS] = {
        "cgc_order_draws", 256, "int32_t *draws, int64_t n, uint64_t seed, int64_t epoch",
        "    /* draw k bounds the swap of position n - 1 - k: data_order()'s sequence */\n"
        "    for (int64_t k = cgc_thread_index(); k < n - 1; k += cgc_thread_count())\n"
        "        draws[k] = (int32_t)cgc_rng_below(seed, CGC_RNG_SHUFFLE,\n"
        "                                          ((uint64_t)epoch << 40) + (uint64_t)k,\n"
        "                                          (uint64_t)(n - k));\n" },
    [PDK_ORDER_SHUFFLE] = {
        "cgc_order_shuffle", 1,
        "int32_t *__restrict__ order, const int32_t *__restrict__ draws, int64_t n, int64_t shuffle",
        "    /* one thread: Fisher-Yates is sequential */\n"
        "    if (blockIdx.x != 0 || threadIdx.x != 0) return;\n"
        "    for (int64_t i = 0; i < n; i++) order[i] = (int32_t)i;\n"
        "    if (!shuffle) return;\n"
        "    for (int64_t k = 0; k < n - 1; k++) {\n"
        "        const int64_t i = n - 1 - k, j = draws[k];\n"
        "        const int32_t t = order[i];\n"
        "        order[i] = order[j];\n"
        "        order[j] = t;\n"
        "    }\n" },
    [PDK_GATHER_F32] = {
        "cgc_gather_f32", 256,
        "float *out, const float *data, " GATHER_PARAMS, GATHER_BODY },
    [PDK_GATHER_I32] = {
        "cgc_gather_i32", 256,
        "int32_t *out, const int32_t *data, " GATHER_PARAMS, GATHER_BODY },
    [PDK_TRACK_LOSS] = {
        "cgc_track_loss", 1,
        "double *totals, const float *loss, const float *skipped, int64_t step, int64_t check_finite, "
        "const int64_t *state, int64_t accumulate, int64_t weight_num, int64_t weight_den",
        "    if (blockIdx.x != 0 || threadIdx.x != 0) return;\n"
        "    totals[0] += (double)loss[0] * ((double)weight_num / (double)weight_den);\n"
        "    totals[1] += 1.0;\n"
        "    if (skipped) totals[2] += (double)skipped[0];\n"
        "    if (check_finite && !cgc_isfinite(loss[0]) && totals[3] < 0.0)\n"
        "        totals[3] = (double)(state ? state[0] / accumulate : step);\n" },
    [PDK_TRACK_EVAL] = {
        "cgc_track_eval", 1, "double *totals, const float *loss, const float *correct, int64_t count",
        "    if (blockIdx.x != 0 || threadIdx.x != 0) return;\n"
        "    totals[0] += (double)loss[0] * (double)count;\n"
        "    if (correct) totals[1] += (double)correct[0];\n" },
    [PDK_STEP_ADVANCE] = {
        "cgc_step_advance", 1, "int64_t *state, int64_t rows",
        "    if (blockIdx.x != 0 || threadIdx.x != 0) return;\n"
        "    state[0] += 1;\n"
        "    state[1] += rows;\n" },
};

/* Splits "TYPE NAME, TYPE NAME" into the kernel's parameter table. */
static void data_kernel_params(const char *params, PlanKernel *k)
{
    static const char *const ctypes[] = { "int32_t *", "const int32_t *", "float *",
                                          "const float *", "double *", "int64_t *",
                                          "const int64_t *", "int64_t", "uint64_t" };
    const char *s = params;
    while (*s) {
        size_t best = 0;
        const char *ctype = NULL;
        for (size_t i = 0; i < sizeof ctypes / sizeof ctypes[0]; i++) {
            size_t n = strlen(ctypes[i]);
            bool pointer = ctypes[i][n - 1] == '*';
            if (strncmp(s, ctypes[i], n) == 0 && (pointer || s[n] == ' ') && n > best)
                best = n, ctype = ctypes[i];
        }
        CGC_ASSERT(ctype && k->nparams < PLAN_MAX_PARAMS);
        k->param_ctype[k->nparams] = ctype;
        k->param[k->nparams++] = strchr(ctype, '*') ? PP_PTR
                                 : strcmp(ctype, "uint64_t") == 0 ? PP_U64 : PP_I64;
        const char *comma = strchr(s, ',');
        s = comma ? comma + 2 : s + strlen(s);
    }
}

void cuda_data_kernels(PlanKernel out[PDK_NUM])
{
    for (int i = 0; i < PDK_NUM; i++) {
        const DataKernelSpec *spec = &data_kernels[i];
        PlanKernel *k = &out[i];
        memset(k, 0, sizeof *k);
        k->name = xstrdup(spec->name);
        k->block = spec->block;
        plan_kernel_params(k, PLAN_MAX_PARAMS);
        data_kernel_params(spec->params, k);
        for (int p = 0; p < k->nparams; p++)   /* as the parameter list says */
            k->param_restrict[p] = k->param[p] == PP_PTR && strstr(spec->params, "__restrict__");
        StrBuf src = { 0 };
        sb_printf(&src, "/* data pipeline: %s (see codegen/plan.h) */\n", spec->name);
        sb_printf(&src, "extern \"C\" __global__ void __launch_bounds__(%d) %s(%s)\n{\n%s}\n",
                  spec->block, spec->name, spec->params, spec->body);
        k->source = src.s;
    }
}
