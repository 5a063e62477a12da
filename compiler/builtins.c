/* builtins.c: the built-in functions of the model block (linear, conv2d, layernorm, relu,
 * cross_entropy, ...), each checked and lowered to IR primitives.
 *
 * One table, builtins[], lists them: each one's signature (parameter names, how many are
 * required), the function that lowers a call of it, the IR op it stands for, and whether
 * it creates parameters. sema.c calls builtins_lower_call for every call in an
 * expression; the call's arguments are matched to the signature (sema_bind_args), then
 * its lowering checks their kinds, ranks and shapes and reports any mistake at the
 * argument at fault, before ir.c's builders, which assert, ever see it. Layers with
 * parameters register them as `binding.weight` / `binding.bias`, after the statement's
 * binding; the compositions (layernorm, batchnorm, leaky_relu, mse) are written here as
 * simpler ops that fusion keeps together.
 */
#include "builtins.h"
#include "sema_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- built-in functions ---- */

typedef struct Builtin Builtin;
typedef int (*LowerFn)(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args);

struct Builtin {
    Signature sig;
    LowerFn lower;
    IrOp op;                /* the elementwise op, reduction or softmax it stands for */
    bool creates_params;
};

/* "linear: " style message prefix helper: the call's name. */
#define NAME_OF(fn) ((fn)->sig.name)

/* An argument that must be a float tensor of rank >= MIN_RANK. */
static int tensor_arg(Sema *S, const Builtin *fn, const AstExpr *e, int min_rank)
{
    int x = sema_lower_expr(S, e);
    if (x == POISON) return POISON;
    if (node_of(S, x)->shape.rank < min_rank) {
        diag_error(S->src, e->loc, "%s needs an argument with at least %d dimension%s, not %s in '%s'",
                   NAME_OF(fn), min_rank, min_rank == 1 ? "" : "s", sema_type_str(S, x), S->stmt_text);
        return POISON;
    }
    return x;
}

/* An axis of a rank-RANK value: negative counts from the end. -1 after an error. */
static int axis_arg(Sema *S, const Builtin *fn, const AstExpr *e, int x, int *axis)
{
    char what[64];
    snprintf(what, sizeof what, "%s: axis", NAME_OF(fn));
    int64_t a;
    if (sema_const_int(S->src, e, what, -IR_MAX_RANK - 100, IR_MAX_RANK + 100, &a) < 0) return -1;
    int rank = node_of(S, x)->shape.rank;
    if (a < -rank || a >= rank) {
        diag_error(S->src, e->loc, "%s: axis %lld is out of range for %s (rank %d) in '%s'",
                   NAME_OF(fn), (long long)a, sema_type_str(S, x), rank, S->stmt_text);
        return -1;
    }
    *axis = (int)(a < 0 ? a + rank : a);
    return 0;
}

static int lower_unary(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, fn, args[0], 0);
    return x == POISON ? POISON : ir_unary(S->g, fn->op, x, call->loc);
}

static int lower_gelu(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, fn, args[0], 0);
    IrOp op = IR_GELU;
    const AstExpr *approx = args[1];
    if (approx) {
        if (approx->kind == AST_STR && strcmp(approx->str, "tanh") == 0) {
            op = IR_GELU_TANH;
        } else if (!(approx->kind == AST_STR && strcmp(approx->str, "none") == 0)) {
            diag_error(S->src, approx->loc, "gelu: approximate must be \"none\" or \"tanh\", not %s",
                       sema_describe(approx));
            return POISON;
        }
    }
    return x == POISON ? POISON : ir_unary(S->g, op, x, call->loc);
}

/* leaky_relu(x, slope): x where x > 0, else slope * x, as torch's; a composition
 * (0 < x ? x : slope * x) that fusion keeps in one kernel and autodiff differentiates as
 * torch does: d where x > 0, else slope * d. */
static int lower_leaky_relu(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, fn, args[0], 0);
    double slope = 0.01;
    if ((args[1] && sema_const_real(S->src, args[1], "leaky_relu: slope", REAL_ANY, &slope) < 0) ||
        x == POISON)
        return POISON;
    SrcLoc loc = call->loc;
    int positive = ir_binary(S->g, IR_LESS, ir_const(S->g, 0, loc), x, loc);
    int scaled = ir_binary(S->g, IR_MUL, x, ir_const(S->g, slope, loc), loc);
    return ir_select(S->g, positive, x, scaled, loc);
}

/* The counter that keys dropout masks: the global micro-batch index, which the runtime
 * supplies (so a resumed run draws the masks the uninterrupted one would). One node
 * serves every dropout of the model. */
static int dropout_counter(Sema *S, SrcLoc loc)
{
    if (S->counter_node < 0) S->counter_node = ir_runtime(S->g, IR_RT_MICRO_STEP, loc);
    return S->counter_node;
}

static int lower_dropout(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, fn, args[0], 0);
    double p;
    if (sema_const_real(S->src, args[1], "dropout: p", REAL_UNIT, &p) < 0 || x == POISON)
        return POISON;
    if (p == 0) return x;
    int counter = dropout_counter(S, call->loc);
    return ir_dropout(S->g, x, counter, p, S->ndropout++, call->loc);
}

static int lower_softmax(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, fn, args[0], 1);
    if (x == POISON) return POISON;
    int axis = node_of(S, x)->shape.rank - 1;
    if (args[1] && axis_arg(S, fn, args[1], x, &axis) < 0) return POISON;
    return ir_softmax(S->g, fn->op, x, axis, call->loc);
}

static int lower_reduce(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, fn, args[0], 0);
    if (x == POISON) return POISON;
    int axis = IR_AXIS_ALL;
    if (args[1] && axis_arg(S, fn, args[1], x, &axis) < 0) return POISON;
    return ir_reduce(S->g, fn->op, x, axis, call->loc);
}

static int lower_matmul(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, fn, args[0], 2);
    int y = tensor_arg(S, fn, args[1], 2);
    if (x == POISON || y == POISON) return POISON;
    const Shape *sa = &node_of(S, x)->shape, *sb = &node_of(S, y)->shape;
    if (sa->dim[sa->rank - 1] != sb->dim[sb->rank - 2]) {
        diag_error(S->src, args[1]->loc,
                   "matmul: inner dimensions differ: %s @ %s in '%s'", sema_type_str(S, x),
                   sema_type_str(S, y), S->stmt_text);
        return POISON;
    }
    Shape la = *sa, lb = *sb, lead;
    la.rank -= 2;
    lb.rank -= 2;
    if (!ir_broadcast_shape(&la, &lb, &lead)) {
        diag_error(S->src, args[1]->loc,
                   "matmul: batch dimensions do not broadcast: %s @ %s in '%s'", sema_type_str(S, x),
                   sema_type_str(S, y), S->stmt_text);
        return POISON;
    }
    lead.dim[lead.rank++] = sa->dim[sa->rank - 2];
    lead.dim[lead.rank++] = sb->dim[sb->rank - 1];
    if (!sema_check_size(S, &lead, call->loc)) return POISON;
    return ir_matmul(S->g, x, y, 0, call->loc);
}

static int lower_transpose(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, fn, args[0], 2);
    return x == POISON ? POISON : ir_transpose(S->g, x, call->loc);
}

/* permute(x, [2, 0, 1]): result axis i is x's axis dims[i] (negative: from the end), as
 * torch.permute. */
static int lower_permute(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, fn, args[0], 1);
    const AstExpr *list = args[1];
    if (x == POISON) return POISON;
    int rank = node_of(S, x)->shape.rank, perm[IR_MAX_RANK];
    if (list->kind != AST_LIST || list->nargs != rank) {
        diag_error(S->src, list->loc, "permute: the axes must be a list of all %d axes of %s "
                   "in their new order, such as [%s], in '%s'", rank, sema_type_str(S, x),
                   rank == 3 ? "0, 2, 1" : "1, 0", S->stmt_text);
        return POISON;
    }
    unsigned seen = 0;
    for (int i = 0; i < rank; i++) {
        int64_t a;
        const AstExpr *d = list->args[i].value;
        if (sema_const_int(S->src, d, "permute: an axis", -rank, rank - 1, &a) < 0) return POISON;
        if (a < 0) a += rank;   /* counted from the end, as torch.permute */
        if (seen >> a & 1) {
            diag_error(S->src, d->loc, "permute: axis %lld appears twice; each of the %d axes "
                       "of %s appears once", (long long)a, rank, sema_type_str(S, x));
            return POISON;
        }
        seen |= 1u << a;
        perm[i] = (int)a;
    }
    return ir_permute(S->g, x, perm, call->loc);
}

/* Symbols of S (with repeats) and the product of its numeric dimensions. */
static int64_t split_shape(const Shape *s, int64_t *syms, int *nsyms)
{
    *nsyms = 0;
    for (int i = 0; i < s->rank; i++)
        if (IR_DIM_IS_SYM(s->dim[i])) syms[(*nsyms)++] = s->dim[i];
    return sema_fixed_numel(s);
}

/* "[-1, 28, 28]" for a reshape target (HOLE marks the -1). */
static const char *target_str(const Sema *S, const Shape *t, int hole)
{
    static char buf[NAME_BUF];
    size_t len = 0;
    len += (size_t)snprintf(buf, sizeof buf, "[");
    for (int i = 0; i < t->rank && len < sizeof buf; i++) {
        char one[NAME_BUF];
        Shape d = {1, {t->dim[i]}};
        ir_shape_str(S->p, &d, one, sizeof one);
        one[strlen(one) - 1] = '\0';
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", i ? ", " : "",
                                i == hole ? "-1" : one + 1);
    }
    if (len < sizeof buf) snprintf(buf + len, sizeof buf - len, "]");
    return buf;
}

/* Reads reshape's list into *T; HOLE is the index of -1 or -1. False after an error. */
static bool reshape_target(Sema *S, const AstExpr *list, Shape *t, int *hole)
{
    *hole = -1;
    *t = ir_shape0();
    if (list->kind != AST_LIST) {
        diag_error(S->src, list->loc, "reshape: the shape must be a list such as [-1, 28, 28], not %s",
                   sema_describe(list));
        return false;
    }
    if (list->nargs > IR_MAX_RANK) {
        diag_error(S->src, list->args[IR_MAX_RANK].value->loc,
                   "reshape: a shape has at most %d dimensions; merge some of them into one",
                   IR_MAX_RANK);
        return false;
    }
    for (int i = 0; i < list->nargs; i++) {
        const AstExpr *d = list->args[i].value;
        if (d->kind == AST_NAME) {
            int k = ir_find_symbol(S->p, d->name);
            if (k < 0) {
                diag_error(S->src, d->loc, "reshape: '%s' is not a dimension symbol of the inputs",
                           diag_quote(d->name, 60));
                return false;
            }
            t->dim[t->rank++] = IR_SYM(k);
            continue;
        }
        int64_t v;
        double num;
        int r = sema_fold_const(S->src, d, &num);
        if (r < 0) return false;
        if (r == 1 && num == -1) {
            if (*hole >= 0) {
                diag_error(S->src, d->loc, "reshape: -1 may appear only once");
                return false;
            }
            *hole = t->rank;
            t->dim[t->rank++] = 1;
            continue;
        }
        if (sema_const_int(S->src, d, "reshape: a dimension", 1, MAX_ELEMENTS, &v) < 0)
            return false;
        t->dim[t->rank++] = v;
    }
    return true;
}

/* "N*2": symbols times a number, for what a -1 would have to stand for. */
static const char *product_str(const Sema *S, const int64_t *syms, int nsyms, int64_t k)
{
    static char buf[NAME_BUF];
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < nsyms && len < sizeof buf; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", i ? "*" : "",
                                S->p->syms[IR_DIM_SYMBOL(syms[i])].name);
    if (k != 1 && len < sizeof buf) snprintf(buf + len, sizeof buf - len, "*%lld", (long long)k);
    return buf;
}

/* Resolves the target's -1 (if any) so that it holds as many elements as X. */
static bool reshape_resolve(Sema *S, const AstExpr *list, int x, Shape *t, int hole)
{
    const Shape *xs = &node_of(S, x)->shape;
    int64_t xsyms[IR_MAX_RANK], tsyms[IR_MAX_RANK];
    int nx, nt;
    int64_t kx = split_shape(xs, xsyms, &nx), kt = split_shape(t, tsyms, &nt);
    bool ok = kx >= 0 && kt >= 0;
    /* Every symbol of the target must be one of X's; those left over go to the -1. */
    for (int i = 0; ok && i < nt; i++) {
        int j = 0;
        while (j < nx && xsyms[j] != tsyms[i]) j++;
        if (j == nx) ok = false;
        else xsyms[j] = xsyms[--nx];
    }
    if (ok && hole < 0) ok = nx == 0 && kx == kt;
    else if (ok) {
        ok = kx % kt == 0;
        if (ok && nx == 0) t->dim[hole] = kx / kt;
        else if (ok && nx == 1 && kx == kt) t->dim[hole] = xsyms[0];
        else if (ok) {
            diag_error(S->src, list->loc,
                       "reshape: cannot reshape %s into %s: -1 would be %s, but a symbolic "
                       "dimension can only be carried whole, in '%s'",
                       sema_type_str(S, x), target_str(S, t, hole), product_str(S, xsyms, nx, kx / kt),
                       S->stmt_text);
            return false;
        }
    }
    if (!ok)
        diag_error(S->src, list->loc, "reshape: cannot reshape %s into %s: the element counts "
                   "differ, in '%s'", sema_type_str(S, x), target_str(S, t, hole), S->stmt_text);
    return ok;
}

static int lower_reshape(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, fn, args[0], 0);
    Shape t;
    int hole;
    if (!reshape_target(S, args[1], &t, &hole) || x == POISON) return POISON;
    if (!reshape_resolve(S, args[1], x, &t, hole)) return POISON;
    return ir_reshape(S->g, x, t, call->loc);
}

static int lower_flatten(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, fn, args[0], 2);
    if (x == POISON) return POISON;
    const Shape *xs = &node_of(S, x)->shape;
    Shape t = {2, {xs->dim[0], 1}};
    for (int i = 1; i < xs->rank; i++) {
        if (IR_DIM_IS_SYM(xs->dim[i])) {
            diag_error(S->src, args[0]->loc, "flatten: cannot flatten the symbolic dimension "
                       "%d of %s in '%s'", i, sema_type_str(S, x), S->stmt_text);
            return POISON;
        }
        t.dim[1] *= xs->dim[i];   /* bounded: fixed_numel of every value is <= 2^31 */
    }
    return ir_reshape(S->g, x, t, call->loc);
}

/* Registers tensor BINDING.SUFFIX of KIND (a parameter, or state saved with the model
 * and never trained) into *TENSOR and returns a READ of it. */
static int add_tensor(Sema *S, const char *suffix, IrTensorKind kind, Shape s, IrInit init,
                      double init_value, SrcLoc loc, int *tensor)
{
    char name[AST_MAX_TOKEN_BYTES + 48];
    snprintf(name, sizeof name, "%s.%s", S->stmt->name, suffix);
    /* A second binding of a name, already reported (check_new_name), is still lowered for
     * the errors in its expression; its tensors take names no binding can have. */
    for (int again = 2; ir_find_tensor(S->p, name) >= 0; again++) {
        CGC_ASSERT(diag_error_count() > 0);
        snprintf(name, sizeof name, "%s.%s (binding %d)", S->stmt->name, suffix, again);
    }
    *tensor = ir_add_tensor(S->p, name, kind, s, init, init_value, -1, loc);
    return ir_read(S->g, S->p, *tensor, loc);
}

static int add_param(Sema *S, const char *suffix, Shape s, IrInit init, double init_value,
                     SrcLoc loc)
{
    int t;
    return add_tensor(S, suffix, IR_PARAM, s, init, init_value, loc, &t);
}

/* The last dimension of X as a parameter size: it must be a number. */
static bool fixed_last_dim(Sema *S, const Builtin *fn, const AstExpr *arg, int x, int64_t *out)
{
    const Shape *xs = &node_of(S, x)->shape;
    int64_t d = xs->dim[xs->rank - 1];
    if (IR_DIM_IS_SYM(d)) {
        diag_error(S->src, arg->loc, "%s: the last dimension of its input must be a number, "
                   "but the input has shape %s in '%s'", NAME_OF(fn), sema_type_str(S, x), S->stmt_text);
        return false;
    }
    *out = d;
    return true;
}

/* embedding(tokens, vocab, dim, std = 1): the rows of NAME.weight [vocab, dim] (normal
 * with standard deviation std, 1 as nn.Embedding) at the i32 tokens, [..., dim]. */
static int lower_embedding(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int tokens = args[0]->kind == AST_NAME ? sema_lower_name(S, args[0], true)
                                           : sema_lower_expr(S, args[0]);
    int64_t vocab, dim;
    double std = 1.0;
    bool ok = tokens != POISON;
    if (ok && !is_int_value(S, tokens)) {
        diag_error(S->src, args[0]->loc, "embedding: tokens must be an i32 input, not %s in '%s'",
                   sema_type_str(S, tokens), S->stmt_text);
        ok = false;
    }
    ok &= sema_const_int(S->src, args[1], "embedding: vocab", 1, MAX_ELEMENTS, &vocab) == 0;
    ok &= sema_const_int(S->src, args[2], "embedding: dim", 1, MAX_ELEMENTS, &dim) == 0;
    if (args[3]) ok &= sema_const_real(S->src, args[3], "embedding: std", REAL_GT0, &std) == 0;
    if (!ok) return POISON;
    if (vocab * dim > MAX_ELEMENTS) {
        diag_error(S->src, args[1]->loc, "embedding: the table %s.weight [%lld, %lld] would have "
                   "more than 2^31 elements", S->stmt->name, (long long)vocab, (long long)dim);
        return POISON;
    }
    Shape ys = node_of(S, tokens)->shape;
    if (ys.rank + 1 > IR_MAX_RANK) {
        diag_error(S->src, args[0]->loc, "embedding: tokens %s have the most dimensions a tensor "
                   "may have; the rows would add one", sema_type_str(S, tokens));
        return POISON;
    }
    ys.dim[ys.rank++] = dim;
    if (!sema_check_size(S, &ys, call->loc)) return POISON;
    int w = add_param(S, "weight", (Shape){2, {vocab, dim}}, IR_INIT_NORMAL, std, call->loc);
    int in = ir_node_input(node_of(S, tokens));
    if (in >= 0 && (S->p->inputs[in].index_rows == 0 || vocab < S->p->inputs[in].index_rows))
        S->p->inputs[in].index_rows = vocab;
    return ir_embed(S->g, w, tokens, call->loc);
}

/* arange(n): i32 [n], 0 to n - 1, the positions a positional embedding looks up. */
static int lower_arange(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int64_t n;
    if (sema_const_int(S->src, args[0], "arange: n", 1, MAX_ELEMENTS, &n) < 0) return POISON;
    return ir_arange(S->g, n, call->loc);
}

/* Q, K or V of attention: [N, T, C] with T and C numbers, C divisible by HEADS. */
static bool attention_operand(Sema *S, const AstExpr *arg, int x, int64_t heads)
{
    const Shape *s = &node_of(S, x)->shape;
    bool ok = s->rank == 3 && !IR_DIM_IS_SYM(s->dim[1]) && !IR_DIM_IS_SYM(s->dim[2]);
    if (!ok || s->dim[2] % heads != 0) {
        diag_error(S->src, arg->loc, "attention: q, k and v must be [N, T, C] with T and C "
                   "numbers and C divisible by heads = %lld, not %s in '%s'", (long long)heads,
                   sema_type_str(S, x), S->stmt_text);
        return false;
    }
    return true;
}

/* X [N, T, C] as HEADS heads [N, heads, T, C / heads]. */
static int split_heads(IrGraph *g, int x, int64_t heads, SrcLoc loc)
{
    Shape s = g->nodes[x].shape;
    Shape split = { .rank = 4, .dim = { s.dim[0], s.dim[1], heads, s.dim[2] / heads } };
    return ir_permute(g, ir_reshape(g, x, split, loc), (const int[]){ 0, 2, 1, 3 }, loc);
}

/* attention(q, k, v, heads, causal): per head softmax(q k^T / sqrt(d) [+ mask]) v, the
 * heads concatenated back: a composition of reshapes, permutes, batched products, the
 * mask and a softmax, which autodiff, the executors and checkpointing take as they are. */
static int lower_attention(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int q = sema_lower_expr(S, args[0]), k = sema_lower_expr(S, args[1]);
    int v = sema_lower_expr(S, args[2]);
    int64_t heads = 1;
    bool causal = false, ok = q != POISON && k != POISON && v != POISON;
    if (args[3]) ok &= sema_const_int(S->src, args[3], "attention: heads", 1, 1 << 16, &heads) == 0;
    if (args[4]) ok &= sema_const_bool(S->src, args[4], "attention: causal", &causal) == 0;
    if (!ok || !attention_operand(S, args[0], q, heads) || !attention_operand(S, args[1], k, heads) ||
        !attention_operand(S, args[2], v, heads))
        return POISON;
    const Shape *qs = &node_of(S, q)->shape;
    if (!ir_shape_equal(qs, &node_of(S, k)->shape) || !ir_shape_equal(qs, &node_of(S, v)->shape)) {
        diag_error(S->src, call->loc, "attention: q %s, k %s and v %s must have one shape in '%s'",
                   sema_type_str(S, q), sema_type_str(S, k), sema_type_str(S, v), S->stmt_text);
        return POISON;
    }
    Shape out = *qs;
    SrcLoc loc = call->loc;
    IrGraph *g = S->g;
    int scores = ir_matmul(g, split_heads(g, q, heads, loc), split_heads(g, k, heads, loc),
                           IR_MATMUL_TRANS_B, loc);                    /* [N, heads, T, T] */
    double scale = 1.0 / sqrt((double)(out.dim[2] / heads));       /* 1 / sqrt(head width) */
    scores = ir_binary(g, IR_MUL, scores, ir_const(g, scale, loc), loc);
    if (causal) scores = ir_causal_mask(g, scores, -INFINITY, loc);
    int p = ir_softmax(g, IR_SOFTMAX, scores, 3, loc);
    int o = ir_matmul(g, p, split_heads(g, v, heads, loc), 0, loc);   /* [N, heads, T, d] */
    return ir_reshape(g, ir_permute(g, o, (const int[]){ 0, 2, 1, 3 }, loc), out, loc);
}

/* linear's `tie = NAME`: the table NAME.weight of an embedding, [out, in], read again as
 * the weight (GPT-2's output projection shares the token embedding's table). */
static int tied_weight(Sema *S, const AstExpr *arg, int64_t out, int64_t in)
{
    char name[AST_MAX_TOKEN_BYTES + 16];
    int t = -1;
    if (arg->kind == AST_NAME) {
        snprintf(name, sizeof name, "%s.weight", arg->name);
        t = ir_find_tensor(S->p, name);
    }
    if (t < 0 || S->p->tensors[t].kind != IR_PARAM) {
        diag_error(S->src, arg->loc, "linear: tie names an earlier binding with a weight, such "
                   "as an embedding 'tok' (tie = tok), whose table this layer then uses, in '%s'",
                   S->stmt_text);
        return POISON;
    }
    const Shape *s = &S->p->tensors[t].shape;
    if (s->rank != 2 || s->dim[0] != out || s->dim[1] != in) {
        diag_error(S->src, arg->loc, "linear: the tied weight %s is [%lld, %lld], but this "
                   "layer needs [%lld, %lld] (out, in), in '%s'", name,
                   (long long)(s->rank == 2 ? s->dim[0] : 0), (long long)(s->rank == 2 ? s->dim[1] : 0),
                   (long long)out, (long long)in, S->stmt_text);
        return POISON;
    }
    return ir_read(S->g, S->p, t, arg->loc);
}

static int lower_linear(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, fn, args[0], 2);
    int64_t out, in = 0;
    bool bias = true, ok = x != POISON;
    ok &= sema_const_int(S->src, args[1], "linear: out", 1, MAX_ELEMENTS, &out) == 0;
    if (args[2]) ok &= sema_const_bool(S->src, args[2], "linear: bias", &bias) == 0;
    if (!ok || !fixed_last_dim(S, fn, args[0], x, &in)) return POISON;
    if (out * in > MAX_ELEMENTS) {
        diag_error(S->src, args[1]->loc, "linear: the weight %s.weight [%lld, %lld] would have "
                   "more than 2^31 elements", S->stmt->name, (long long)out, (long long)in);
        return POISON;
    }
    double bound = 1.0 / sqrt((double)in);
    int w = args[3] ? tied_weight(S, args[3], out, in)
                    : add_param(S, "weight", (Shape){2, {out, in}}, IR_INIT_UNIFORM, bound, call->loc);
    if (w == POISON) return POISON;
    int bnode = bias ? add_param(S, "bias", (Shape){1, {out}}, IR_INIT_UNIFORM, bound, call->loc)
                     : POISON;
    Shape ys = node_of(S, x)->shape;
    ys.dim[ys.rank - 1] = out;
    if (!sema_check_size(S, &ys, call->loc)) return POISON;
    int y = ir_matmul(S->g, x, w, IR_MATMUL_TRANS_B, call->loc);
    return bias ? ir_binary(S->g, IR_ADD, y, bnode, call->loc) : y;
}

/* mean over AXIS of X, reshaped to keep that axis (size 1) so that it broadcasts back. */
static int mean_keepdim(Sema *S, int x, int axis, SrcLoc loc)
{
    Shape keep = ir_shape_keepdim(&node_of(S, x)->shape, axis);
    int m = ir_reduce(S->g, IR_MEAN, x, axis, loc);
    return ir_reshape(S->g, m, keep, loc);
}

/* (x - mean) * rsqrt(var + eps) * weight + bias over the last axis, variance biased. */
static int lower_layernorm(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, fn, args[0], 1);
    double eps = 1e-5;
    int64_t d = 0;
    bool ok = x != POISON;
    if (args[1]) ok &= sema_const_real(S->src, args[1], "layernorm: eps", REAL_GT0, &eps) == 0;
    if (!ok || !fixed_last_dim(S, fn, args[0], x, &d)) return POISON;
    SrcLoc loc = call->loc;
    int w = add_param(S, "weight", (Shape){1, {d}}, IR_INIT_ONES, 0, loc);
    int bias = add_param(S, "bias", (Shape){1, {d}}, IR_INIT_ZEROS, 0, loc);
    int axis = node_of(S, x)->shape.rank - 1;
    int centered = ir_binary(S->g, IR_SUB, x, mean_keepdim(S, x, axis, loc), loc);
    int sq = ir_binary(S->g, IR_MUL, centered, centered, loc);
    int var = mean_keepdim(S, sq, axis, loc);
    int rstd = ir_unary(S->g, IR_RSQRT, ir_binary(S->g, IR_ADD, var, ir_const(S->g, eps, loc), loc), loc);
    int normed = ir_binary(S->g, IR_MUL, centered, rstd, loc);
    return ir_binary(S->g, IR_ADD, ir_binary(S->g, IR_MUL, normed, w, loc), bias, loc);
}

/* ---- images: convolution, pooling, batch norm ---- */

/* An image [N, C, H, W] with C, H and W numbers, as convolution and pooling take it. */
static int image_arg(Sema *S, const Builtin *fn, const AstExpr *e)
{
    int x = sema_lower_expr(S, e);
    if (x == POISON) return POISON;
    const Shape *s = &node_of(S, x)->shape;
    bool ok = s->rank == 4;
    for (int i = 1; ok && i < 4; i++) ok = !IR_DIM_IS_SYM(s->dim[i]);
    if (!ok) {
        diag_error(S->src, e->loc, "%s needs an image [N, C, H, W] (channels, height and width "
                   "numbers), not %s in '%s'; a flat one becomes an image with reshape(x, "
                   "[-1, C, H, W])", NAME_OF(fn), sema_type_str(S, x), S->stmt_text);
        return POISON;
    }
    if (!ir_dtype_is_float(node_of(S, x)->dtype)) {
        diag_error(S->src, e->loc, "%s needs a float image, not %s in '%s'", NAME_OF(fn), sema_type_str(S, x),
                   S->stmt_text);
        return POISON;
    }
    return x;
}

/* One window size: a number, or [h, w]; each in [LO, HI]. False after an error. */
static bool pair_arg(Sema *S, const Builtin *fn, const AstExpr *e, const char *what, int64_t lo,
                     int32_t out[2])
{
    char name[64];
    snprintf(name, sizeof name, "%s: %s", NAME_OF(fn), what);
    const AstExpr *item[2] = {e, e};
    if (e->kind == AST_LIST) {
        if (e->nargs != 2) {
            diag_error(S->src, e->loc, "%s must be a number or a list [h, w] of two, not a list of %d",
                       name, e->nargs);
            return false;
        }
        item[0] = e->args[0].value, item[1] = e->args[1].value;
    }
    for (int i = 0; i < 2; i++) {
        int64_t v;
        if (sema_const_int(S->src, item[i], name, lo, 1 << 16, &v) < 0) return false;
        out[i] = (int32_t)v;
    }
    return true;
}

/* padding: a number, [h, w], or "same" (stride 1: the output as large as the input). */
static bool padding_arg(Sema *S, const Builtin *fn, const AstExpr *e, IrWindow *w)
{
    if (e->kind != AST_STR) return pair_arg(S, fn, e, "padding", 0, w->pad);
    if (strcmp(e->str, "same") != 0) {
        diag_error(S->src, e->loc, "%s: padding must be a number, [h, w] or \"same\", not %s",
                   NAME_OF(fn), sema_describe(e));
        return false;
    }
    for (int i = 0; i < 2; i++) {
        int64_t total = (int64_t)w->dilation[i] * (w->kernel[i] - 1);
        if (w->stride[i] != 1 || total % 2 != 0) {
            diag_error(S->src, e->loc, "%s: padding = \"same\" needs stride 1 and an odd kernel "
                       "extent (dilation * (kernel - 1) even), not kernel %d, stride %d, dilation "
                       "%d; give the padding as numbers", NAME_OF(fn), w->kernel[i], w->stride[i],
                       w->dilation[i]);
            return false;
        }
        if (total / 2 > 1 << 16) {
            diag_error(S->src, e->loc, "%s: padding = \"same\" would pad by %lld, more than %d",
                       NAME_OF(fn), (long long)(total / 2), 1 << 16);
            return false;
        }
        w->pad[i] = (int32_t)(total / 2);
    }
    return true;
}

/* Whether window W fits image X (else an error at the kernel argument KERNEL). */
static bool window_fits(Sema *S, const Builtin *fn, const AstExpr *kernel, int x, const IrWindow *w,
                        int flags)
{
    Shape s;
    if (ir_window_shape(&node_of(S, x)->shape, w, flags, &s)) {
        if (sema_fixed_numel(&s) >= 0) return true;
        diag_error(S->src, kernel->loc, "%s: the input's %dx%d windows (padding %dx%d, stride "
                   "%dx%d) would be %s, more than 2^31 elements a sample, in '%s'", NAME_OF(fn),
                   w->kernel[0], w->kernel[1], w->pad[0], w->pad[1], w->stride[0], w->stride[1],
                   sema_shape_str(S, &s), S->stmt_text);
        return false;
    }
    char dilation[48] = "";
    if (w->dilation[0] != 1 || w->dilation[1] != 1)
        snprintf(dilation, sizeof dilation, " (dilation %dx%d)", w->dilation[0], w->dilation[1]);
    diag_error(S->src, kernel->loc, "%s: the kernel %dx%d%s is larger than the input %s padded by "
               "%dx%d in '%s'", NAME_OF(fn), w->kernel[0], w->kernel[1], dilation, sema_type_str(S, x),
               w->pad[0], w->pad[1], S->stmt_text);
    return false;
}

/* The weights of conv2d: [out, C/groups, kh, kw] and [out], initialised as nn.Conv2d (as
 * nn.Linear, uniform in +-1/sqrt(fan_in), fan_in = C/groups * kh * kw). */
static void conv_params(Sema *S, SrcLoc loc, int64_t out, int64_t cg, const IrWindow *w, bool bias,
                        int *weight, int *bnode)
{
    double bound = 1.0 / sqrt((double)(cg * w->kernel[0] * w->kernel[1]));
    Shape ws = {4, {out, cg, w->kernel[0], w->kernel[1]}};
    *weight = add_param(S, "weight", ws, IR_INIT_UNIFORM, bound, loc);
    *bnode = bias ? add_param(S, "bias", (Shape){1, {out}}, IR_INIT_UNIFORM, bound, loc) : POISON;
}

/* conv2d's arguments into W, *OUT and *BIAS, checked against image X (POISON: the
 * arguments alone). */
static bool conv_args(Sema *S, const Builtin *fn, int x, const AstExpr **args, IrWindow *w,
                      int64_t *out, bool *bias)
{
    int64_t groups = 1;
    bool ok = sema_const_int(S->src, args[1], "conv2d: out", 1, MAX_ELEMENTS, out) == 0;
    ok &= pair_arg(S, fn, args[2], "kernel", 1, w->kernel);
    if (args[3]) ok &= pair_arg(S, fn, args[3], "stride", 1, w->stride);
    if (args[5]) ok &= pair_arg(S, fn, args[5], "dilation", 1, w->dilation);
    if (args[6]) ok &= sema_const_int(S->src, args[6], "conv2d: groups", 1, 1 << 16, &groups) == 0;
    if (args[7]) ok &= sema_const_bool(S->src, args[7], "conv2d: bias", bias) == 0;
    if (ok && args[4]) ok &= padding_arg(S, fn, args[4], w);
    if (!ok || x == POISON) return false;
    int64_t c = node_of(S, x)->shape.dim[1];
    if (c % groups != 0 || *out % groups != 0) {
        diag_error(S->src, args[6]->loc, "conv2d: groups = %lld must divide both the input "
                   "channels (%lld) and out (%lld) in '%s'", (long long)groups, (long long)c,
                   (long long)*out, S->stmt_text);
        return false;
    }
    w->groups = (int32_t)groups;
    if (*out * (c / groups) * w->kernel[0] * w->kernel[1] > MAX_ELEMENTS) {
        diag_error(S->src, args[1]->loc, "conv2d: the weight %s.weight would have more than "
                   "2^31 elements", S->stmt->name);
        return false;
    }
    return window_fits(S, fn, args[2], x, w, IR_WINDOW_ROWS);
}

/* conv2d as a matrix product over the patches: unfold x into rows [N, L, C*kh*kw] (L
 * output positions; [N, G, L, C/G*kh*kw] with G groups), multiply by the weight seen as
 * [out, C*kh*kw] ([G, out/G, C/G*kh*kw]), turn [N, L, out] into [N, out, OH, OW], and
 * add the bias per channel there: the transpose is then the product's only reader and
 * the gradient's transpose the GEMMs' only input, which an implicit GEMM may replace by
 * storing or reading NCHW itself (codegen/plan.h, PlanWindow). */
static int lower_conv2d(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int x = image_arg(S, fn, args[0]);
    int64_t out;
    bool bias = true;
    IrWindow w = {{1, 1}, {1, 1}, {0, 0}, {1, 1}, 1};
    if (!conv_args(S, fn, x, args, &w, &out, &bias)) return POISON;
    const Shape *xs = &node_of(S, x)->shape;
    int64_t groups = w.groups, cg = xs->dim[1] / groups, k = cg * w.kernel[0] * w.kernel[1];
    Shape ys = {4, {xs->dim[0], out, ir_window_extent(xs->dim[2], &w, 0), ir_window_extent(xs->dim[3], &w, 1)}};
    if (!sema_check_size(S, &ys, call->loc)) return POISON;
    SrcLoc loc = call->loc;
    int weight, bnode;
    conv_params(S, loc, out, cg, &w, bias, &weight, &bnode);
    int cols = ir_unfold(S->g, x, w, IR_WINDOW_ROWS, 0, loc);
    Shape wm = groups == 1 ? (Shape){2, {out, k}} : (Shape){3, {groups, out / groups, k}};
    int y = ir_matmul(S->g, cols, ir_reshape(S->g, weight, wm, loc), IR_MATMUL_TRANS_B, loc);
    y = ir_reshape(S->g, ir_transpose(S->g, y, loc), ys, loc);
    if (bias) y = ir_binary(S->g, IR_ADD, y, ir_reshape(S->g, bnode, (Shape){3, {out, 1, 1}}, loc), loc);
    return y;
}

/* max_pool2d and avg_pool2d: the window's patches [N, C, kh*kw, OH, OW] reduced over
 * axis 2. Max pooling reads -inf outside the image; average pooling 0, and divides by
 * the whole window (torch's count_include_pad). Padding at most half the kernel, as torch
 * requires, so that no window lies wholly outside. */
static int lower_pool(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int x = image_arg(S, fn, args[0]);
    IrWindow w = {{1, 1}, {1, 1}, {0, 0}, {1, 1}, 1};
    bool ok = x != POISON && pair_arg(S, fn, args[1], "kernel", 1, w.kernel);
    if (ok) memcpy(w.stride, w.kernel, sizeof w.stride);
    if (ok && args[2]) ok = pair_arg(S, fn, args[2], "stride", 1, w.stride);
    if (ok && args[3]) ok = pair_arg(S, fn, args[3], "padding", 0, w.pad);
    if (!ok) return POISON;
    for (int i = 0; i < 2; i++)
        if (w.pad[i] > w.kernel[i] / 2) {
            diag_error(S->src, args[3]->loc, "%s: padding %d is more than half the kernel (%d) in "
                       "'%s'", NAME_OF(fn), w.pad[i], w.kernel[i], S->stmt_text);
            return POISON;
        }
    if (!window_fits(S, fn, args[1], x, &w, 0)) return POISON;
    double outside = ir_op_info[fn->op].combine == IR_COMBINE_MAX ? -INFINITY : 0;
    int patches = ir_unfold(S->g, x, w, 0, outside, call->loc);
    return ir_reduce(S->g, fn->op, patches, 2, call->loc);
}

/* [N, C, H, W] to [N, C]: the mean over each channel's H*W. */
static int lower_global_avg_pool(Sema *S, const Builtin *fn, const AstExpr *call,
                                 const AstExpr **args)
{
    int x = image_arg(S, fn, args[0]);
    if (x == POISON) return POISON;
    const Shape *s = &node_of(S, x)->shape;
    Shape flat = {3, {s->dim[0], s->dim[1], s->dim[2] * s->dim[3]}};
    return ir_reduce(S->g, IR_MEAN, ir_reshape(S->g, x, flat, call->loc), 2, call->loc);
}

/* Per-channel mean of V [N, C, ...] as [C]: over its trailing axes one at a time, then
 * the batch (no reshape of V, so that fusion keeps the image's shape throughout). */
static int channel_mean(Sema *S, int v, SrcLoc loc)
{
    for (int axis = node_of(S, v)->shape.rank - 1; axis >= 2; axis--)
        v = ir_reduce(S->g, IR_MEAN, v, axis, loc);
    return ir_reduce(S->g, IR_MEAN, v, 0, loc);
}

/* A per-channel [C] value shaped [C, 1, ...] to broadcast over X [N, C, ...]. */
static int per_channel(Sema *S, int v, int x, SrcLoc loc)
{
    Shape s = {node_of(S, x)->shape.rank - 1, {node_of(S, v)->shape.dim[0], 1, 1, 1, 1, 1, 1, 1}};
    return ir_reshape(S->g, v, s, loc);
}

/* (x - mean) * rsqrt(var + eps) * weight + bias, per channel. */
static int normalize(Sema *S, int x, int mean, int var, int weight, int bias, double eps,
                     SrcLoc loc)
{
    int centered = ir_binary(S->g, IR_SUB, x, per_channel(S, mean, x, loc), loc);
    int rstd = ir_unary(S->g, IR_RSQRT, ir_binary(S->g, IR_ADD, var, ir_const(S->g, eps, loc), loc), loc);
    int scale = ir_binary(S->g, IR_MUL, rstd, weight, loc);
    int y = ir_binary(S->g, IR_MUL, centered, per_channel(S, scale, x, loc), loc);
    return ir_binary(S->g, IR_ADD, y, per_channel(S, bias, x, loc), loc);
}

/* STATE := (1 - m) * STATE + m * V, as torch's running statistics move. */
static void running_update(Sema *S, int tensor, int state, int v, double m, SrcLoc loc)
{
    int kept = ir_binary(S->g, IR_MUL, state, ir_const(S->g, 1 - m, loc), loc);
    int moved = ir_binary(S->g, IR_MUL, v, ir_const(S->g, m, loc), loc);
    ir_assign(S->g, S->p, tensor, ir_cast(S->g, ir_binary(S->g, IR_ADD, kept, moved, loc), DT_F32, loc), loc);
}

/* Whether the dimensions of X [N, C, ...] after the batch are numbers (else an error). */
static bool fixed_after_batch(Sema *S, const AstExpr *arg, int x)
{
    const Shape *xs = &node_of(S, x)->shape;
    for (int i = 1; i < xs->rank; i++)
        if (IR_DIM_IS_SYM(xs->dim[i])) {
            diag_error(S->src, arg->loc, "batchnorm: dimension %d of %s must be a number in "
                       "'%s'", i, sema_type_str(S, x), S->stmt_text);
            return false;
        }
    return true;
}

/* The running statistics (state, saved, not trained) of batchnorm X, moved toward MEAN
 * and the unbiased VAR, var * n / (n - 1), n the values per channel (all but dimension 1
 * of X, the batch counted when the graph runs); *RMEAN and *RVAR read them. */
static void running_stats(Sema *S, int x, int mean, int var, double m, SrcLoc loc, int *rmean,
                          int *rvar)
{
    Shape cs = {1, {node_of(S, x)->shape.dim[1]}};
    int t_mean, t_var, t_count;
    *rmean = add_tensor(S, "running_mean", IR_STATE, cs, IR_INIT_ZEROS, 0, loc, &t_mean);
    *rvar = add_tensor(S, "running_var", IR_STATE, cs, IR_INIT_ONES, 0, loc, &t_var);
    int count = add_tensor(S, "num_batches_tracked", IR_STATE, ir_shape0(), IR_INIT_ZEROS, 0, loc,
                           &t_count);
    Shape per_channel_values = ir_shape_reduce(&node_of(S, x)->shape, 1);
    int n = ir_count(S->g, &per_channel_values, loc);
    int unbiased = ir_binary(S->g, IR_DIV, ir_binary(S->g, IR_MUL, var, n, loc),
                             ir_binary(S->g, IR_SUB, n, ir_const(S->g, 1, loc), loc), loc);
    S->p->tensors[t_var].range = IR_RANGE_NONNEG;
    S->p->tensors[t_count].range = IR_RANGE_COUNT;
    running_update(S, t_mean, *rmean, mean, m, loc);
    running_update(S, t_var, *rvar, unbiased, m, loc);
    ir_assign(S->g, S->p, t_count, ir_binary(S->g, IR_ADD, count, ir_const(S->g, 1, loc), loc), loc);
}

/* Records, for the trainer, batch statistics over X [N, C, ...] at LOC when its rows hold
 * fewer values per channel than any so far (IrProgram.stats_per_row). */
static void note_values_per_row(Sema *S, int x, SrcLoc loc)
{
    const Shape *xs = &node_of(S, x)->shape;
    int64_t per_row = 1;
    for (int i = 2; i < xs->rank; i++) per_row *= xs->dim[i];
    if (S->p->stats_per_row == 0 || per_row < S->p->stats_per_row) {
        S->p->stats_per_row = per_row;
        S->p->stats_loc = loc;
    }
}

/* batchnorm as torch's BatchNorm1d/2d: over every dimension but the channels (1). While
 * training, the batch's mean and biased variance normalize, and the running statistics
 * move toward the mean and the unbiased variance; in evaluation the running statistics
 * normalize (a MODE_SWITCH between the two). */
static int lower_batchnorm(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, fn, args[0], 2);
    double m = 0.1, eps = 1e-5;
    bool ok = x != POISON;
    if (args[1]) ok &= sema_const_real(S->src, args[1], "batchnorm: momentum", REAL_UNIT, &m) == 0;
    if (args[2]) ok &= sema_const_real(S->src, args[2], "batchnorm: eps", REAL_GT0, &eps) == 0;
    if (!ok || !fixed_after_batch(S, args[0], x)) return POISON;
    SrcLoc loc = call->loc;
    Shape cs = {1, {node_of(S, x)->shape.dim[1]}};
    int weight = add_param(S, "weight", cs, IR_INIT_ONES, 0, loc);
    int bias = add_param(S, "bias", cs, IR_INIT_ZEROS, 0, loc);
    int mean = channel_mean(S, x, loc);
    int centered = ir_binary(S->g, IR_SUB, x, per_channel(S, mean, x, loc), loc);
    int var = channel_mean(S, ir_binary(S->g, IR_MUL, centered, centered, loc), loc);
    int rmean, rvar;
    running_stats(S, x, mean, var, m, loc, &rmean, &rvar);
    note_values_per_row(S, x, loc);
    int train = normalize(S, x, mean, var, weight, bias, eps, loc);
    int eval = normalize(S, x, rmean, rvar, weight, bias, eps, loc);
    return ir_mode_switch(S->g, train, eval, loc);
}

/* Labels: an i32 input of shape [N]. Anything else is reported at the argument. */
static int labels_arg(Sema *S, const AstExpr *e)
{
    int y = e->kind == AST_NAME ? sema_lower_name(S, e, true) : sema_lower_expr(S, e);
    if (y == POISON) return POISON;
    if (!is_int_value(S, y)) {
        diag_error(S->src, e->loc, "cross_entropy: labels must be an i32 input ([N], or [N, T] "
                   "for a sequence), not %s in '%s'", sema_type_str(S, y), S->stmt_text);
        return POISON;
    }
    return y;
}

static int lower_cross_entropy(Sema *S, const Builtin *fn, const AstExpr *call,
                               const AstExpr **args)
{
    int logits = sema_lower_expr(S, args[0]);
    int labels = labels_arg(S, args[1]);
    if (logits == POISON || labels == POISON) return POISON;
    const Shape *ls = &node_of(S, logits)->shape, *ys = &node_of(S, labels)->shape;
    if (ls->rank < 2 || IR_DIM_IS_SYM(ls->dim[ls->rank - 1])) {
        diag_error(S->src, args[0]->loc, "cross_entropy: logits must have shape [N, C] (or [N, T, "
                   "C] for a sequence) with C a number, not %s in '%s'", sema_type_str(S, logits),
                   S->stmt_text);
        return POISON;
    }
    bool match = ys->rank == ls->rank - 1;
    for (int i = 0; match && i < ys->rank; i++) match = ys->dim[i] == ls->dim[i];
    if (!match) {
        diag_error(S->src, args[1]->loc, "cross_entropy: labels %s do not match logits %s: "
                   "labels take the logits' shape without its last dimension, in '%s'",
                   sema_type_str(S, labels), sema_type_str(S, logits), S->stmt_text);
        return POISON;
    }
    if (S->p->num_classes == 0) {
        S->p->num_classes = (int)ls->dim[ls->rank - 1];
        S->p->prediction_input_labels = ir_node_input(node_of(S, labels));
    }
    return ir_cross_entropy(S->g, logits, labels, call->loc);
}

/* mean((pred - target)^2) over every element, after broadcasting. */
static int lower_mse(Sema *S, const Builtin *fn, const AstExpr *call, const AstExpr **args)
{
    int pred = sema_lower_expr(S, args[0]);
    int target = sema_lower_expr(S, args[1]);
    if (pred == POISON || target == POISON) return POISON;
    Shape s;
    if (!ir_broadcast_shape(&node_of(S, pred)->shape, &node_of(S, target)->shape, &s)) {
        diag_error(S->src, args[1]->loc, "mse: target %s does not match prediction %s in '%s'",
                   sema_type_str(S, target), sema_type_str(S, pred), S->stmt_text);
        return POISON;
    }
    if (!sema_check_size(S, &s, call->loc)) return POISON;
    int diff = ir_binary(S->g, IR_SUB, pred, target, call->loc);
    int sq = ir_binary(S->g, IR_MUL, diff, diff, call->loc);
    return ir_reduce(S->g, IR_MEAN, sq, IR_AXIS_ALL, call->loc);
}

#define UNARY(name, op) {{name, {"x"}, 1}, lower_unary, op, false}
static const Builtin builtins[] = {
    {{"linear", {"x", "out", "bias", "tie"}, 2}, lower_linear, IR_MATMUL, true},
    {{"layernorm", {"x", "eps"}, 1}, lower_layernorm, IR_MEAN, true},
    UNARY("relu", IR_RELU),
    {{"gelu", {"x", "approximate"}, 1}, lower_gelu, IR_GELU, false},
    UNARY("tanh", IR_TANH),
    UNARY("sigmoid", IR_SIGMOID),
    UNARY("silu", IR_SILU),
    UNARY("softplus", IR_SOFTPLUS),
    {{"leaky_relu", {"x", "slope"}, 1}, lower_leaky_relu, IR_SELECT, false},
    UNARY("exp", IR_EXP),
    UNARY("log", IR_LOG),
    UNARY("sqrt", IR_SQRT),
    UNARY("abs", IR_ABS),
    {{"dropout", {"x", "p"}, 2}, lower_dropout, IR_DROPOUT, false},
    {{"softmax", {"x", "axis"}, 1}, lower_softmax, IR_SOFTMAX, false},
    {{"log_softmax", {"x", "axis"}, 1}, lower_softmax, IR_LOG_SOFTMAX, false},
    {{"sum", {"x", "axis"}, 1}, lower_reduce, IR_SUM, false},
    {{"mean", {"x", "axis"}, 1}, lower_reduce, IR_MEAN, false},
    {{"max", {"x", "axis"}, 1}, lower_reduce, IR_MAX, false},
    {{"matmul", {"a", "b"}, 2}, lower_matmul, IR_MATMUL, false},
    {{"transpose", {"x"}, 1}, lower_transpose, IR_TRANSPOSE, false},
    {{"embedding", {"tokens", "vocab", "dim", "std"}, 3}, lower_embedding, IR_EMBED, true},
    {{"arange", {"n"}, 1}, lower_arange, IR_ARANGE, false},
    {{"attention", {"q", "k", "v", "heads", "causal"}, 3}, lower_attention, IR_SOFTMAX, false},
    {{"permute", {"x", "dims"}, 2}, lower_permute, IR_PERMUTE, false},
    {{"reshape", {"x", "shape"}, 2}, lower_reshape, IR_RESHAPE, false},
    {{"flatten", {"x"}, 1}, lower_flatten, IR_RESHAPE, false},
    {{"conv2d", {"x", "out", "kernel", "stride", "padding", "dilation", "groups", "bias"}, 3}, lower_conv2d, IR_UNFOLD, true},
    {{"max_pool2d", {"x", "kernel", "stride", "padding"}, 2}, lower_pool, IR_MAX, false},
    {{"avg_pool2d", {"x", "kernel", "stride", "padding"}, 2}, lower_pool, IR_MEAN, false},
    {{"global_avg_pool", {"x"}, 1}, lower_global_avg_pool, IR_MEAN, false},
    {{"batchnorm", {"x", "momentum", "eps"}, 1}, lower_batchnorm, IR_MODE_SWITCH, true},
    {{"cross_entropy", {"logits", "labels"}, 2}, lower_cross_entropy, IR_CROSS_ENTROPY, false},
    {{"mse", {"pred", "target"}, 2}, lower_mse, IR_MEAN, false},
};
#undef UNARY
enum { NUM_BUILTINS = sizeof builtins / sizeof builtins[0] };

static const Builtin *find_builtin(const char *name)
{
    for (int i = 0; i < NUM_BUILTINS; i++)
        if (strcmp(builtins[i].sig.name, name) == 0) return &builtins[i];
    return NULL;
}

static void report_unknown_function(Sema *S, const AstExpr *call)
{
    const char *names[NUM_BUILTINS + 1];
    for (int i = 0; i < NUM_BUILTINS; i++) names[i] = builtins[i].sig.name;
    names[NUM_BUILTINS] = NULL;
    diag_error(S->src, call->loc, "unknown function '%s'%s", diag_quote(call->name, 60),
               sema_did_you_mean(call->name, names));
}

/* Parameters are named after the statement's binding, so a parameter-creating call needs
 * one, and only one such call fits in a statement. */
static bool check_param_call(Sema *S, const Builtin *fn, const AstExpr *call)
{
    if (S->stmt->kind != STMT_BIND) {
        diag_error(S->src, call->loc, "%s creates parameters, which are named after a binding: "
                   "write it as 'NAME = %s(...)' on a line of its own", NAME_OF(fn), NAME_OF(fn));
        return false;
    }
    if (S->param_call) {
        char makers[256] = "";   /* the table's calls that create parameters */
        for (int i = 0, n = 0; i < NUM_BUILTINS && n < (int)sizeof makers; i++)
            if (builtins[i].creates_params)
                n += snprintf(makers + n, sizeof makers - (size_t)n, "%s%s", n ? ", " : "",
                              NAME_OF(&builtins[i]));
        diag_error(S->src, call->loc, "only one call that creates parameters (%s) may appear in "
                   "a statement; bind this %s to a name of its own", makers, NAME_OF(fn));
        diag_note(S->src, S->param_call->loc, "'%s' already gets its parameters from this %s",
                  S->stmt->name, S->param_call->name);
        return false;
    }
    S->param_call = call;
    return true;
}

int builtins_lower_call(Sema *S, const AstExpr *call)
{
    const Builtin *fn = find_builtin(call->name);
    if (!fn) {
        report_unknown_function(S, call);
        return POISON;
    }
    if (fn->creates_params && !check_param_call(S, fn, call)) return POISON;
    const AstExpr *args[MAX_PARAMS];
    if (!sema_bind_args(S->src, &fn->sig, call, args)) return POISON;
    return fn->lower(S, fn, call, args);
}
