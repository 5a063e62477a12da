/* compiler/precision.c: precision assignment (autocast) on the forward graph.
 *
 * Mixed precision is decided here once, before autodiff, so that the backward pass
 * simply follows the forward's dtypes (autodiff keeps each gradient in its tensor's
 * dtype and casts it back across every CAST). The rules are torch.autocast's, so a
 * `precision = bf16` model computes what the same PyTorch model under
 * torch.autocast(dtype=torch.bfloat16) would. With H the half type (bf16 or fp16):
 *
 *   op                                  fp32   tf32               bf16 / fp16
 *   MATMUL                              as is  IR_MATMUL_TF32 set  operands cast to H, result H
 *   ADD(MATMUL, READ of rank-1 param)   as is  as is               bias cast to H too (F.linear
 *                                                                  autocasts x, W and b)
 *   UNFOLD read only by MATMULs         as is  as is               the image cast to H, the
 *   (a convolution's patches)                                      patches in H (conv2d
 *                                                                  autocasts its input; a
 *                                                                  gather commutes with the
 *                                                                  cast, on kh*kw times fewer
 *                                                                  values)
 *   EXP LOG RSQRT POW SOFTMAX           as is  as is               float inputs cast to f32
 *   LOG_SOFTMAX SUM MEAN MAX                                       (autocast's fp32 list:
 *   CROSS_ENTROPY COUNT_CORRECT                                    reductions, norms, losses)
 *   other elementwise, shape, dropout   as is  as is               ir_promote of the inputs:
 *                                                                  H stays H, H with f32 is f32
 *   the loss output                     f32    f32                 f32
 *
 * Parameters stay f32 (master weights); only their uses are cast. The training and
 * evaluation graphs then read a parameter's cast from a copy of it in H
 * (precision_copies), which the update writes beside the parameter: the same values,
 * cast once a step by the kernel that has the new value in hand rather than by a kernel
 * of their own at every micro-batch's forward. The graph is rebuilt rather than edited,
 * because casts are new nodes and ids must stay topological. Each node records the rule
 * that gave it its dtype (IrNode.dtype_why), which --explain prints.
 */
#include <stdlib.h>

#include "passes.h"

typedef struct Autocast {
    const IrProgram *p;
    const IrGraph *src;    /* the forward graph as sema built it */
    IrGraph *dst;          /* its rebuilt form */
    DType half;            /* DT_BF16 / DT_F16, or DT_F32 for tf32 */
    bool tf32;
    int *map;              /* src id -> dst id */
    int *as_half, *as_f32; /* src id -> dst id of its cast, made once; -1 until needed */
} Autocast;

/* OP is on autocast's fp32 list (as far as the IR has those ops): under bf16 and fp16
 * its float inputs are cast to f32. */
static bool precision_runs_in_f32(IrOp op)
{
    return ir_op_info[op].autocast == IR_AUTOCAST_F32;
}

/* Source node X as dtype T in the new graph, cast (once) for WHY; integers are left
 * alone. */
static int cast_to(Autocast *ac, int x, DType t, IrDtypeWhy why, SrcLoc loc)
{
    int y = ac->map[x];
    DType have = ac->dst->nodes[y].dtype;
    if (have == t || !ir_dtype_is_float(have))
        return y;
    int *cache = t == DT_F32 ? ac->as_f32 : ac->as_half;
    CGC_ASSERT(t == DT_F32 || t == ac->half);
    if (cache[x] < 0) {
        cache[x] = ir_cast(ac->dst, y, t, loc);
        ac->dst->nodes[cache[x]].dtype_why = why;
    }
    return cache[x];
}

static bool is_rank1_param_read(const Autocast *ac, int x)
{
    const IrNode *n = &ac->src->nodes[x];
    return ir_node_reads_tensor(n) >= 0 && ac->p->tensors[n->index].kind == IR_PARAM &&
           ac->p->tensors[n->index].shape.rank == 1;
}

/* The linear layer's bias add: matmul output plus a rank-1 parameter, either order. */
static bool is_bias_add(const Autocast *ac, const IrNode *n)
{
    if (n->op != IR_ADD)
        return false;
    const IrNode *a = &ac->src->nodes[n->in[0]], *b = &ac->src->nodes[n->in[1]];
    return (a->op == IR_MATMUL && is_rank1_param_read(ac, n->in[1])) ||
           (b->op == IR_MATMUL && is_rank1_param_read(ac, n->in[0]));
}

/* The new graph's inputs of source node N (with casts where the table says so); may set
 * the tf32 bit on N. */
static void autocast_inputs(Autocast *ac, IrNode *n, int *in)
{
    bool half = ac->half != DT_F32;
    bool to_half = half && (ir_op_info[n->op].autocast == IR_AUTOCAST_HALF || is_bias_add(ac, n));
    bool to_f32 = half && precision_runs_in_f32(n->op);
    IrDtypeWhy why = is_bias_add(ac, n) ? IR_WHY_BIAS : IR_WHY_OPERAND;
    for (int k = 0; k < n->nin; k++) {
        if (to_half)
            in[k] = cast_to(ac, n->in[k], ac->half, why, n->loc);
        else if (to_f32)
            in[k] = cast_to(ac, n->in[k], DT_F32, IR_WHY_F32_READER, n->loc);
        else
            in[k] = ac->map[n->in[k]];
    }
    if (ac->tf32 && ir_op_info[n->op].autocast == IR_AUTOCAST_HALF)
        n->flags |= IR_MATMUL_TF32;
}

/* Source node X is a convolution's patches that only GEMMs read, to be made in H. */
static bool patches_in_half(const Autocast *ac, int x)
{
    const IrNode *n = &ac->src->nodes[x];
    if (ac->half == DT_F32 || n->op != IR_UNFOLD || !(n->flags & IR_WINDOW_ROWS) || n->value != 0.0)
        return false;
    bool read = false;
    for (int i = x + 1; i < ac->src->nnodes; i++)
        for (int k = 0; k < ac->src->nodes[i].nin; k++)
            if (ac->src->nodes[i].in[k] == x) {
                if (ir_op_info[ac->src->nodes[i].op].autocast != IR_AUTOCAST_HALF) return false;
                read = true;
            }
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++)
        if (ac->src->output[r] == x) return false;
    return read;
}

/* An elementwise node over inputs IN, by its class's builder. */
static int clone_elementwise(IrGraph *g, const IrNode *n, const int *in)
{
    if (n->op == IR_CAST) return ir_cast(g, in[0], n->dtype, n->loc);
    if (n->nin == 1) return ir_unary(g, n->op, in[0], n->loc);
    if (n->nin == 2) return ir_binary(g, n->op, in[0], in[1], n->loc);
    return ir_select(g, in[0], in[1], in[2], n->loc);
}

/* N rebuilt in G over inputs IN by the builders, which derive its dtype from theirs. */
static int clone_node(IrGraph *g, const IrProgram *p, const IrNode *n, const int *in)
{
    switch (ir_op_info[n->op].family) {
    case IR_FAMILY_INPUT: case IR_FAMILY_READ: case IR_FAMILY_CONST: case IR_FAMILY_RUNTIME:
        return ir_add_node(g, n);
    case IR_FAMILY_ELEMENTWISE: return clone_elementwise(g, n, in);
    case IR_FAMILY_BROADCAST: return ir_broadcast(g, in[0], n->shape, n->loc);
    case IR_FAMILY_DROPOUT: return ir_dropout(g, in[0], in[1], n->value, n->index, n->loc);
    case IR_FAMILY_REDUCE: return ir_reduce(g, n->op, in[0], n->axis, n->loc);
    case IR_FAMILY_RESHAPE: return ir_reshape(g, in[0], n->shape, n->loc);
    case IR_FAMILY_REDUCE_TO: return ir_reduce_to(g, in[0], n->shape, n->loc);
    case IR_FAMILY_TRANSPOSE: return ir_transpose(g, in[0], n->loc);
    case IR_FAMILY_PERMUTE: {
        int perm[IR_MAX_RANK];
        for (int i = 0; i < n->shape.rank; i++) perm[i] = ir_perm_axis(n, i);
        return ir_permute(g, in[0], perm, n->loc);
    }
    case IR_FAMILY_EMBED: return ir_embed(g, in[0], in[1], n->loc);
    case IR_FAMILY_ARANGE: return ir_arange(g, n->shape.dim[0], n->loc);
    case IR_FAMILY_CAUSAL_MASK: return ir_causal_mask(g, in[0], n->value, n->loc);
    case IR_FAMILY_EMBED_GRAD: return ir_embed_grad(g, in[0], in[1], n->shape.dim[0], n->loc);
    case IR_FAMILY_MATMUL: return ir_matmul(g, in[0], in[1], n->flags, n->loc);
    case IR_FAMILY_SOFTMAX: return ir_softmax(g, n->op, in[0], n->axis, n->loc);
    case IR_FAMILY_SOFTMAX_GRAD: return ir_softmax_grad(g, n->op, in[0], in[1], n->axis, n->loc);
    case IR_FAMILY_CROSS_ENTROPY: return ir_cross_entropy(g, in[0], in[1], n->loc);
    case IR_FAMILY_CE_GRAD: return ir_ce_grad(g, in[0], in[1], in[2], n->loc);
    case IR_FAMILY_COUNT_CORRECT: return ir_count_correct(g, in[0], in[1], n->loc);
    case IR_FAMILY_WINDOW:
        return ir_op_info[n->op].shape == IR_SHAPE_WINDOW ? ir_unfold(g, in[0], n->win, n->flags, n->value, n->loc)
                                  : ir_fold(g, in[0], n->shape, n->win, n->flags, n->loc);
    case IR_FAMILY_MODE_SWITCH: return ir_mode_switch(g, in[0], in[1], n->loc);
    case IR_FAMILY_COLLECTIVE:
        return ir_collective(g, n->op, ir_cast(g, in[0], DT_F32, n->loc), n->shape, n->index, n->loc);
    case IR_FAMILY_ASSIGN:
        return ir_assign(g, p, n->index, ir_cast(g, in[0], DT_F32, n->loc), n->loc);
    }
    CGC_INTERNAL("precision: unknown op family");
}

/* The rule that gives node N of the new graph its dtype (HALF: bf16 or fp16). */
static IrDtypeWhy rule_of(const IrNode *n, bool half)
{
    if (ir_op_info[n->op].autocast == IR_AUTOCAST_HALF) return IR_WHY_PRODUCT;
    if (n->op == IR_CAST) return n->dtype == DT_F32 ? IR_WHY_F32_READER : IR_WHY_OPERAND;
    if (half && precision_runs_in_f32(n->op)) return IR_WHY_F32_LIST;
    if (!ir_dtype_is_float(n->dtype)) return IR_WHY_INTEGER;
    return IR_WHY_FOLLOWS;
}

/* The nodes of G from FIRST on, made for source node N as node ID: ID by its rule, the
 * rest (casts to f32 for a collective or an assignment) for their f32 reader. */
static void note_rules(IrGraph *g, int first, int id, bool half)
{
    for (int i = first; i < g->nnodes; i++)
        g->nodes[i].dtype_why = i == id ? rule_of(&g->nodes[i], half) : IR_WHY_F32_READER;
}

/* Node LOSS is the loss: that is its reason, unless it is a product or a cast. */
static void note_loss(IrGraph *g, int loss)
{
    IrDtypeWhy *why = &g->nodes[loss].dtype_why;
    if (*why == IR_WHY_FOLLOWS || *why == IR_WHY_F32_LIST || *why == IR_WHY_INTEGER) *why = IR_WHY_LOSS;
}

/* The loss output of G in f32, by a cast made for it where it is not. */
static void loss_in_f32(IrGraph *g)
{
    int loss = g->output[IR_OUT_LOSS];
    if (loss < 0) return;
    int out = ir_cast(g, loss, DT_F32, g->nodes[loss].loc);
    if (out != loss) g->nodes[out].dtype_why = IR_WHY_F32_READER;
    else note_loss(g, loss);
    g->output[IR_OUT_LOSS] = out;
}

static void rebuild(Autocast *ac)
{
    const IrGraph *src = ac->src;
    for (int i = 0; i < src->nnodes; i++) {
        IrNode n = src->nodes[i];
        int in[IR_MAX_IN] = {0};
        if (patches_in_half(ac, i))
            in[0] = cast_to(ac, n.in[0], ac->half, IR_WHY_OPERAND, n.loc);
        else
            autocast_inputs(ac, &n, in);
        int before = ac->dst->nnodes;
        int id = clone_node(ac->dst, ac->p, &n, in);
        if (id >= before) {   /* a new node, not an input handed back unchanged */
            ac->dst->nodes[id].name = n.name;
            note_rules(ac->dst, before, id, ac->half != DT_F32);
        }
        ac->map[i] = id;
    }
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++)
        ac->dst->output[r] = src->output[r] < 0 ? -1 : ac->map[src->output[r]];
    loss_in_f32(ac->dst);
}

static int *filled(int n, int value)
{
    int *a = xmalloc((size_t)(n ? n : 1) * sizeof *a);
    for (int i = 0; i < n; i++)
        a[i] = value;
    return a;
}

void precision_assign(IrProgram *p)
{
    Precision prec = p->cfg.precision;
    if (prec == PREC_FP32) {   /* nothing cast: each value's rule only */
        IrGraph *g = &p->forward;
        for (int i = 0; i < g->nnodes; i++) g->nodes[i].dtype_why = rule_of(&g->nodes[i], false);
        if (g->output[IR_OUT_LOSS] >= 0) note_loss(g, g->output[IR_OUT_LOSS]);
        return;
    }
    int n = p->forward.nnodes;
    IrGraph dst;
    ir_graph_init(&dst, p->forward.name);
    Autocast ac = {
        .p = p, .src = &p->forward, .dst = &dst,
        .half = prec == PREC_BF16 ? DT_BF16 : prec == PREC_FP16 ? DT_F16 : DT_F32,
        .tf32 = prec == PREC_TF32,
        .map = filled(n, -1), .as_half = filled(n, -1), .as_f32 = filled(n, -1),
    };
    rebuild(&ac);
    ir_graph_free(&p->forward);
    p->forward = dst;
    free(ac.map);
    free(ac.as_half);
    free(ac.as_f32);
    ir_verify(p, &p->forward);
}

/* The copy of parameter P in T, made once (COPY[P], -1 until then). */
static int copy_of(IrProgram *p, int *copy, int param, DType t)
{
    if (copy[param] < 0) copy[param] = ir_add_copy(p, param, t);
    CGC_ASSERT(p->tensors[copy[param]].dtype == t);
    return copy[param];
}

/* Node ID of G, a cast of a parameter to a half type, reads the parameter's copy instead. */
static void read_copy(IrProgram *p, IrGraph *g, int id, int *copy)
{
    IrNode *n = &g->nodes[id];
    if (n->op != IR_CAST || n->dtype == DT_F32) return;
    int w = ir_node_reads_tensor(&g->nodes[n->in[0]]);
    if (w < 0 || p->tensors[w].kind != IR_PARAM) return;
    int c = copy_of(p, copy, w, n->dtype);
    n->op = IR_READ;
    n->nin = 0;
    n->in[0] = 0;
    n->index = c;
    n->name = p->tensors[c].name;
}

/* After every ASSIGN of G to a parameter that has a copy, the copy's: the value's cast. */
static void assign_copies(IrProgram *p, IrGraph *g, const int *copy)
{
    int n = g->nnodes;
    for (int id = 0; id < n; id++) {
        IrNode a = g->nodes[id];
        if (!ir_node_is_assign(&a) || a.index >= p->nparams || copy[a.index] < 0) continue;
        int c = copy[a.index];
        ir_assign(g, p, c, ir_cast(g, a.in[0], p->tensors[c].dtype, a.loc), a.loc);
    }
}

void precision_copies(IrProgram *p)
{
    if (p->cfg.precision != PREC_BF16 && p->cfg.precision != PREC_FP16) return;
    int *copy = filled(p->nparams ? p->nparams : 1, -1);
    IrGraph *graphs[] = {&p->train, &p->train_micro, &p->eval};
    for (int k = 0; k < 3; k++)
        for (int id = 0; id < graphs[k]->nnodes; id++) read_copy(p, graphs[k], id, copy);
    assign_copies(p, &p->train, copy);   /* the one graph that updates parameters */
    for (int k = 0; k < 3; k++)
        if (graphs[k]->nnodes) ir_verify(p, graphs[k]);
    free(copy);
}
