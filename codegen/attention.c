/* attention.c: attention groups (ir.h, IR_GROUP_ATTENTION) as kernels in the manner of
 * FlashAttention.
 *
 * The forward group's kernel (cgc_attention_forward, cgc_device.h) runs a tile of queries
 * of one head per block: keys and values a tile at a time through shared memory, the
 * scores and probabilities of that tile only in registers and shared memory, with an
 * online softmax, so the T x T matrices of the composition are never stored; it stores O
 * and each row's log-sum-exp. The backward group's kernel (cgc_attention_backward)
 * recomputes the probabilities from Q, K and the log-sum-exp, and sums dK and dV in key
 * blocks, dQ in query blocks, so that nothing is summed by atomics and a run repeats bit
 * for bit. Under the causal mask the tiles past the diagonal are skipped whole.
 *
 * f16 and bf16 operands run on the tensor cores (cgc_attention_forward_tc and
 * cgc_attention_backward_tc: mma.sync with f32 accumulation, the scores' accumulators
 * turned into P's fragments in registers, P and dS rounded to the operands' type as the
 * products take them, as FlashAttention does); f32 operands run SIMT in f32. The
 * composition's casts are the kernels' loads and stores.
 *
 * The kernels depend on the head width, the tile (from the width: shared memory is
 * 48 KiB), the mask, the types, and the sizes and scale written into the body, so the
 * layers of one shape share theirs.
 */
#include "codegen_impl.h"

#include <stdio.h>

/* Where a kernel finds a tensor of heads: a buffer, its heads interleaving HEADS to a
 * position (1: each head's rows consecutive; H: a linear layer's [N, T, H, D] in place,
 * cgc_device.h's CgcAttnHeads), of its type. */
typedef struct AttnView {
    int buffer;
    int64_t heads;
    DType dtype;
} AttnView;

/* Operand ID of group K: its own buffer, or, for a permute to heads that fusion cloned
 * into the group (head_view), the buffer of what it permutes. */
static AttnView input_view(const RenderCtx *ctx, int k, int id)
{
    const IrNode *n = &ctx->g->nodes[id];
    if (n->op == IR_PERMUTE && n->group == k)
        return (AttnView){ ctx->node_buffer[n->in[0]], n->shape.dim[1], n->dtype };
    return (AttnView){ ctx->node_buffer[id], 1, n->dtype };
}

/* Product ID of group K as stored: its own buffer, or that of its permute back to
 * [N, T, H, D] where the group holds one. */
static AttnView output_view(const RenderCtx *ctx, int k, int id)
{
    const IrGraph *g = ctx->g;
    for (int u = id + 1; u < ctx->span[k].end; u++)
        if (g->nodes[u].op == IR_PERMUTE && g->nodes[u].in[0] == id)
            return (AttnView){ ctx->node_buffer[u], g->nodes[u].shape.dim[2], g->nodes[u].dtype };
    return (AttnView){ ctx->node_buffer[id], 1, g->nodes[id].dtype };
}

static void view_param(KernelDraft *d, const char *name, AttnView v, bool is_const)
{
    draft_buffer(d, name, v.buffer, v.dtype, is_const);
}

static IrAttention attn_parts(const RenderCtx *ctx, int k)
{
    return ir_attention_group(ctx->g, ctx->span, k);
}

/* The head width D, T and the tiles (a block's own rows by the other side's), which keep
 * the staged tiles within 48 KiB of shared memory: in f32 the backward's 32 by 32, 16 by
 * 16 past D = 64, and the forward's 32 queries by 32 keys, 16 keys past D = 64; on the
 * tensor cores (f16, bf16) 64 rows by 64, past D = 64 by 32 (forward) or 16 (backward). */
typedef struct AttnShape {
    int64_t d, t;
    int rows, cols;
} AttnShape;

bool attention_tensor_cores(const IrGraph *g, const IrAttention *a)
{
    return g->nodes[a->q].dtype != DT_F32;
}

static AttnShape attn_shape(const IrGraph *g, const IrAttention *a)
{
    const Shape *s = &g->nodes[a->q].shape;
    AttnShape x = { .d = s->dim[s->rank - 1], .t = s->dim[s->rank - 2] };
    bool wide = x.d > 64, half = attention_tensor_cores(g, a);
    if (a->backward && half) x.rows = 64, x.cols = wide ? 16 : 64;
    else if (a->backward) x.rows = x.cols = wide ? 16 : 32;
    else if (half) x.rows = 64, x.cols = wide ? 32 : 64;
    else x.rows = 32, x.cols = wide ? 16 : 32;
    return x;
}

void attention_render(const RenderCtx *ctx, int k, int lse, KernelDraft *d)
{
    const IrGraph *g = ctx->g;
    IrAttention a = attn_parts(ctx, k);
    AttnShape x = attn_shape(g, &a);
    const Shape *qs = &g->nodes[a.q].shape;
    DType in = g->nodes[a.q].dtype;
    DType out = g->nodes[a.backward ? a.dq : a.o].dtype;
    snprintf(d->name, sizeof d->name, "attention_%s_d%lld%s_%s", a.backward ? "bwd" : "fwd",
             (long long)x.d, a.causal ? "_causal" : "", ir_dtype_name(in));
    if (out != in) {
        size_t at = strlen(d->name);
        snprintf(d->name + at, sizeof d->name - at, "_to_%s", ir_dtype_name(out));
    }
    AttnView q = input_view(ctx, k, a.q), kv = input_view(ctx, k, a.k), v = input_view(ctx, k, a.v);
    AttnView o = output_view(ctx, a.backward ? ctx->g->nodes[a.sm].group : k, a.o);
    AttnView none = { -1, 1, DT_F32 }, dout = none, dq = none, dk = none, dv = none;
    if (a.backward) {
        dout = input_view(ctx, k, a.dout);
        dq = output_view(ctx, k, a.dq), dk = output_view(ctx, k, a.dk), dv = output_view(ctx, k, a.dv);
        view_param(d, "dq", dq, false), view_param(d, "dk", dk, false), view_param(d, "dv", dv, false);
    } else {
        view_param(d, "o", o, false);
        draft_buffer(d, "lse", lse, DT_F32, false);
    }
    view_param(d, "q", q, true), view_param(d, "k", kv, true), view_param(d, "v", v, true);
    if (a.backward) {
        view_param(d, "o", o, true), view_param(d, "dout", dout, true);
        draft_buffer(d, "lse", lse, DT_F32, true);
    }
    char bh[CUDA_DIMS_MAX], scale[32];
    cuda_dims_expr(d, qs, 0, qs->rank - 2, bh, sizeof bh);
    cuda_float_literal((float)a.scale, scale, sizeof scale);
    sb_printf(&d->body, "    const int64_t bh = %s, t = %lld;\n", bh, (long long)x.t);
    sb_printf(&d->body, "    const CgcAttnHeads hs = { %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld };\n",
              (long long)q.heads, (long long)kv.heads, (long long)v.heads, (long long)o.heads,
              (long long)dout.heads, (long long)dq.heads, (long long)dk.heads, (long long)dv.heads);
    if (a.backward && in != DT_F32)   /* 64 rows a block, the tensor cores' */
        sb_printf(&d->body, "    cgc_attention_backward_half<%lld, %d, %s>(dq, dk, dv, q, k, v, o, dout, "
                  "lse, hs, bh, t, %s);\n", (long long)x.d, x.cols, a.causal ? "true" : "false", scale);
    else if (a.backward)
        sb_printf(&d->body, "    cgc_attention_backward<%lld, %d, %s>(dq, dk, dv, q, k, v, o, dout, lse, "
                  "hs, bh, t, %s);\n", (long long)x.d, x.rows, a.causal ? "true" : "false", scale);
    else if (in != DT_F32)   /* the query tile is the tensor cores' own (64) */
        sb_printf(&d->body, "    cgc_attention_forward_half<%lld, %d, %s>(o, lse, q, k, v, hs, bh, t, %s);\n",
                  (long long)x.d, x.cols, a.causal ? "true" : "false", scale);
    else
        sb_printf(&d->body, "    cgc_attention_forward<%lld, %d, %d, %s>(o, lse, q, k, v, hs, bh, t, %s);\n",
                  (long long)x.d, x.rows, x.cols, a.causal ? "true" : "false", scale);
    draft_finish_symbols(d);
    int64_t tiles = (x.t + x.rows - 1) / x.rows;
    Shape work = *qs;
    work.dim[work.rank - 2] = a.backward ? 2 * tiles : tiles;
    work.rank--;
    d->block = 128;
    d->work = work;
    d->items_per_block = 1;
    d->max_blocks = CUDA_MAX_BLOCKS;
}

int attention_lse_node(const RenderCtx *ctx, int k)
{
    return attn_parts(ctx, k).sm;
}

Shape attention_lse_shape(const RenderCtx *ctx, int k)
{
    IrAttention a = attn_parts(ctx, k);
    Shape s = ctx->g->nodes[a.q].shape;
    s.rank--;
    return s;
}
