/* sema.c: semantic analysis, from the syntax tree to the checked program.
 *
 * One walk over the model block, statement by statement, builds the `forward` graph
 * through ir.c's builders: names are resolved (visible after their line, bound once),
 * every expression gets a dtype and a shape, and every statement is checked (inputs,
 * bindings, the output, the loss). Calls of built-in functions are builtins.c's, which
 * checks and lowers them (builtins.h is the interface between the two). The train block
 * is train_config.c's; the helpers both use (constant folding, checked constants,
 * argument matching) are here, declared in sema_util.h.
 *
 * Every user mistake is reported here, at the token at fault, before anything is built
 * from it: ir.c's builders assert their preconditions, so a shape they would reject must
 * never reach them. After an error the offending binding is "poisoned" (node POISON):
 * later uses of it stay silent, so one mistake gives one message.
 */
#include "passes.h"
#include "builtins.h"
#include "sema_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The parser's limit on an input's dimensions is the one every Shape has. */
_Static_assert((int)AST_MAX_DIMS == (int)IR_MAX_RANK, "an input type fits a Shape");

/* Errors reported before sema stops checking the model. */
#define SEMA_MAX_ERRORS 50

/* ====================================================================================
 * Numbers: folding constant expressions, describing values in messages.
 * This and the next two sections are shared with train_config.c (see sema_util.h).
 * ==================================================================================== */

const char *sema_fmt_num(double v)
{
    static char bufs[4][40];
    static int next;
    char *b = bufs[next++ & 3];
    if (v == floor(v) && fabs(v) < 1e15)
        snprintf(b, sizeof bufs[0], "%.0f", v);
    else
        snprintf(b, sizeof bufs[0], "%.15g", v);
    return b;
}

const char *sema_describe(const AstExpr *e)
{
    static char bufs[2][200];
    static int next;
    char *b = bufs[next++ & 1];
    switch (e->kind) {
    case AST_NUM: snprintf(b, sizeof bufs[0], "%s%s", sema_fmt_num(e->num), e->unit); break;
    case AST_STR: snprintf(b, sizeof bufs[0], "the string \"%s\"", diag_quote(e->str, 60)); break;
    case AST_NAME: snprintf(b, sizeof bufs[0], "'%s'", diag_quote(e->name, 60)); break;
    case AST_CALL: snprintf(b, sizeof bufs[0], "%s(...)", diag_quote(e->name, 60)); break;
    case AST_LIST: snprintf(b, sizeof bufs[0], "a list"); break;
    case AST_BINOP:
    case AST_NEG: snprintf(b, sizeof bufs[0], "an expression"); break;
    }
    return b;
}

SrcLoc sema_expr_start(const AstExpr *e)
{
    while (e->kind == AST_BINOP) e = e->lhs;
    return e->loc;
}

/* Folds E as sema_fold_const does, at nesting DEPTH (lowering calls it part-way down an
 * expression, and the limit counts from the statement's top). Both operands are always
 * visited, so an error on either side is reported once, here, and a caller that gets 0
 * may lower the operands without meeting it again. */
static int fold_const_at(Source *src, const AstExpr *e, double *out, int depth)
{
    if (depth > AST_MAX_EXPR_DEPTH) {   /* the parser refuses deeper trees already */
        diag_error(src, e->loc, "expression too deep (more than %d nested operations); split "
                   "it over several statements", AST_MAX_EXPR_DEPTH);
        return -1;
    }
    double a = 0, b = 0;
    int ra, rb;
    switch (e->kind) {
    case AST_NUM:
        if (e->unit[0]) {
            diag_error(src, e->loc, "unexpected unit '%s' on a number: only memory takes a unit "
                       "(KB, MB, GB)", diag_quote(e->unit, 20));
            return -1;
        }
        *out = e->num;
        return 1;
    case AST_NEG:
        ra = fold_const_at(src, e->lhs, &a, depth + 1);
        if (ra == 1) *out = -a;
        return ra;
    case AST_BINOP:
        ra = fold_const_at(src, e->lhs, &a, depth + 1);
        rb = fold_const_at(src, e->rhs, &b, depth + 1);
        if (ra < 0 || rb < 0) return -1;
        if (ra == 0 || rb == 0) return 0;
        break;
    default:
        return 0;
    }
    switch (e->op) {
    case '+': *out = a + b; break;
    case '-': *out = a - b; break;
    case '*': *out = a * b; break;
    default:
        if (b == 0) {
            diag_error(src, e->loc, "division by zero in a constant expression");
            return -1;
        }
        *out = a / b;
        break;
    }
    if (!isfinite(*out)) {
        diag_error(src, e->loc, "constant expression overflows");
        return -1;
    }
    return 1;
}

int sema_fold_const(Source *src, const AstExpr *e, double *out)
{
    return fold_const_at(src, e, out, 0);
}

/* "a, b or c" from a NULL-terminated list, into BUF. */
static const char *join_or(const char *const *names, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; names[i] && len < n; i++) {
        const char *sep = i == 0 ? "" : names[i + 1] ? ", " : " or ";
        len += (size_t)snprintf(buf + len, n - len, "%s%s", sep, names[i]);
    }
    return buf;
}

const char *sema_did_you_mean(const char *name, const char *const *candidates)
{
    static char buf[200];
    const char *best = diag_closest(name, candidates);
    if (!best) return "";
    snprintf(buf, sizeof buf, "; did you mean '%s'?", best);
    return buf;
}

/* ====================================================================================
 * Arguments of calls: positional and keyword arguments matched to a signature.
 * ==================================================================================== */

static int sig_nparams(const Signature *sig)
{
    int n = 0;
    while (sig->params[n]) n++;
    return n;
}

static int sig_find(const Signature *sig, const char *key)
{
    for (int i = 0; sig->params[i]; i++)
        if (strcmp(sig->params[i], key) == 0) return i;
    return -1;
}

static void report_unknown_keyword(Source *src, const Signature *sig, const AstArg *a)
{
    char list[200];
    const char *hint = sema_did_you_mean(a->key, sig->params);
    if (hint[0])
        diag_error(src, a->key_loc, "%s has no argument '%s'%s", sig->name,
                   diag_quote(a->key, 60), hint);
    else
        diag_error(src, a->key_loc, "%s has no argument '%s' (it takes %s)", sig->name,
                   diag_quote(a->key, 60), join_or(sig->params, list, sizeof list));
}

static void report_too_many(Source *src, const Signature *sig, const AstExpr *call,
                            const AstArg *extra)
{
    char list[200];
    int n = sig_nparams(sig);
    diag_error(src, extra->value->loc, "%s takes %d argument%s (%s), but %d %s given",
               sig->name, n, n == 1 ? "" : "s", join_or(sig->params, list, sizeof list),
               call->nargs, call->nargs == 1 ? "was" : "were");
}

bool sema_bind_args(Source *src, const Signature *sig, const AstExpr *call,
                    const AstExpr **out)
{
    int nparams = sig_nparams(sig), pos = 0;
    bool ok = true, seen_key = false;
    for (int i = 0; i < nparams; i++) out[i] = NULL;
    int nargs = call->kind == AST_CALL ? call->nargs : 0;
    for (int i = 0; i < nargs; i++) {
        const AstArg *a = &call->args[i];
        if (!a->key) {
            if (seen_key) {
                diag_error(src, a->value->loc, "%s: positional argument after a keyword argument",
                           sig->name);
                ok = false;
            } else if (pos >= nparams) {
                report_too_many(src, sig, call, a);
                return false;
            } else {
                out[pos++] = a->value;
            }
            continue;
        }
        seen_key = true;
        int k = sig_find(sig, a->key);
        if (k < 0) {
            report_unknown_keyword(src, sig, a);
            ok = false;
        } else if (out[k]) {
            diag_error(src, a->key_loc, "%s: argument '%s' is given twice", sig->name, a->key);
            ok = false;
        } else {
            out[k] = a->value;
        }
    }
    /* A missing argument after a misspelled keyword is the same mistake: say it once. */
    for (int i = 0; ok && i < sig->nrequired; i++) {
        if (!out[i]) {
            diag_error(src, call->loc, "%s: missing argument '%s'", sig->name, sig->params[i]);
            ok = false;
        }
    }
    return ok;
}

/* ====================================================================================
 * Checked constants: integers, reals, booleans and names from a fixed set.
 * WHAT names the value in messages ("batch", "adam: beta1").
 * ==================================================================================== */

int sema_const_int(Source *src, const AstExpr *e, const char *what, int64_t lo, int64_t hi,
                   int64_t *out)
{
    const char *kind = lo == 1 ? "a positive integer" : lo == 0 ? "a non-negative integer"
                                                                 : "an integer";
    double v = 0;
    int r = sema_fold_const(src, e, &v);
    if (r < 0) return -1;
    if (r == 0) {
        diag_error(src, sema_expr_start(e), "%s must be %s, not %s", what, kind, sema_describe(e));
        return -1;
    }
    if (v != floor(v) || (v < (double)lo && lo >= 0)) {
        diag_error(src, sema_expr_start(e), "%s must be %s, not %s", what, kind, sema_fmt_num(v));
        return -1;
    }
    if (v < (double)lo) {
        diag_error(src, sema_expr_start(e), "%s must be at least %lld, not %s", what, (long long)lo,
                   sema_fmt_num(v));
        return -1;
    }
    if (v > (double)hi) {
        diag_error(src, sema_expr_start(e), "%s must be at most %lld, not %s", what, (long long)hi,
                   sema_fmt_num(v));
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

static bool in_range(double v, RealRange r)
{
    switch (r) {
    case REAL_ANY: return true;
    case REAL_GE0: return v >= 0;
    case REAL_GT0: return v > 0;
    case REAL_UNIT: return v >= 0 && v < 1;
    }
    return false;
}

static const char *range_text(RealRange r)
{
    switch (r) {
    case REAL_ANY: return "a number";
    case REAL_GE0: return "a number >= 0";
    case REAL_GT0: return "a number > 0";
    case REAL_UNIT: return "a number in [0, 1)";
    }
    return "a number";
}

int sema_const_real(Source *src, const AstExpr *e, const char *what, RealRange range,
                    double *out)
{
    double v = 0;
    int r = sema_fold_const(src, e, &v);
    if (r < 0) return -1;
    if (r == 0 || !in_range(v, range)) {
        diag_error(src, sema_expr_start(e), "%s must be %s, not %s", what, range_text(range),
                   r ? sema_fmt_num(v) : sema_describe(e));
        return -1;
    }
    *out = v;
    return 0;
}

int sema_const_bool(Source *src, const AstExpr *e, const char *what, bool *out)
{
    if (e->kind == AST_NAME && strcmp(e->name, "true") == 0) return *out = true, 0;
    if (e->kind == AST_NAME && strcmp(e->name, "false") == 0) return *out = false, 0;
    diag_error(src, sema_expr_start(e), "%s must be true or false, not %s", what, sema_describe(e));
    return -1;
}

int sema_const_choice(Source *src, const AstExpr *e, const char *what,
                      const char *const *names, int *out)
{
    char list[200];
    join_or(names, list, sizeof list);
    if (e->kind != AST_NAME) {
        diag_error(src, sema_expr_start(e), "%s must be %s, not %s", what, list, sema_describe(e));
        return -1;
    }
    for (int i = 0; names[i]; i++)
        if (strcmp(e->name, names[i]) == 0) return *out = i, 0;
    diag_error(src, sema_expr_start(e), "unknown %s '%s'%s (expected %s)", what,
               diag_quote(e->name, 60), sema_did_you_mean(e->name, names), list);
    return -1;
}

/* ====================================================================================
 * The model block.
 * ==================================================================================== */

/* A name bound in the model: an input or a binding. */
struct Binding {
    const char *name;   /* the AST's string: only used while sema runs */
    SrcLoc loc;
    int node;           /* its value in the forward graph, or POISON */
    int input;          /* input index when the name is an input, else -1 */
};

static const char *const reserved_names[] = {
    "model", "train", "input", "output", "loss", "true", "false", "cgc", NULL,
};

const char *sema_type_str(const Sema *S, int id)
{
    static char bufs[4][NAME_BUF];
    static int next;
    char *b = bufs[next++ & 3], shape[NAME_BUF - 8];
    const IrNode *n = node_of(S, id);
    ir_shape_str(S->p, &n->shape, shape, sizeof shape);
    snprintf(b, NAME_BUF, "%s%s", ir_dtype_name(n->dtype), shape);
    return b;
}

const char *sema_shape_str(const Sema *S, const Shape *s)
{
    static char bufs[2][NAME_BUF];
    static int next;
    return ir_shape_str(S->p, s, bufs[next++ & 1], NAME_BUF);
}

/* ---- the statement's text, quoted in shape errors ---- */

static bool is_continuation_byte(unsigned char c) { return (c & 0xC0) == 0x80; }

/* Copies the statement's first line (from its first token to a comment or the end of the
 * line) into S->stmt_text, cut to a readable length, with "..." when anything is left. */
static void capture_stmt_text(Sema *S, const AstStmt *st)
{
    char *out = S->stmt_text;
    size_t cap = sizeof S->stmt_text - 4, n = 0;
    out[0] = '\0';
    const char *p = source_line_start(S->src, st->loc.line);
    if (!p) return;
    const char *end = S->src->text + S->src->len;
    for (int c = 1; c < st->loc.col && p < end && *p != '\n'; c++) {
        p++;
        while (p < end && is_continuation_byte((unsigned char)*p)) p++;
    }
    bool in_string = false, cut = false;
    int open = 0;
    for (; p < end && *p != '\n' && *p != '\r'; p++) {
        if (*p == '"' && (!in_string || p[-1] != '\\')) in_string = !in_string;
        if (!in_string && *p == '#') break;
        if (!in_string && (*p == '(' || *p == '[')) open++;
        if (!in_string && (*p == ')' || *p == ']')) open--;
        if ((unsigned char)*p < 0x20) continue;
        if (n == cap) {
            cut = true;
            break;
        }
        out[n++] = *p;
    }
    while (n > 0 && (out[n - 1] == ' ' || out[n - 1] == '\t')) n--;
    while (cut && n > 0 && is_continuation_byte((unsigned char)out[n])) n--;
    if (cut || open > 0) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

/* ---- names ---- */

/* FNV-1a. */
static size_t hash_name(const char *name)
{
    uint64_t h = 14695981039346656037u;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        h = (h ^ *c) * 1099511628211u;
    return (size_t)h;
}

/* The slot holding NAME's binding, or the empty slot where it would go. */
static int *binding_slot(const Sema *S, const char *name)
{
    size_t mask = S->nslots - 1;
    for (size_t i = hash_name(name) & mask;; i = (i + 1) & mask) {
        int *slot = &S->slots[i];
        if (*slot < 0 || strcmp(S->binds[*slot].name, name) == 0) return slot;
    }
}

static Binding *find_binding(Sema *S, const char *name)
{
    if (S->nslots == 0) return NULL;
    int b = *binding_slot(S, name);
    return b < 0 ? NULL : &S->binds[b];
}

/* Doubles the table (or makes the first one) and puts every binding back in it. */
static void grow_slots(Sema *S)
{
    free(S->slots);
    S->nslots = S->nslots ? 2 * S->nslots : 64;
    S->slots = xmalloc(S->nslots * sizeof *S->slots);
    for (size_t i = 0; i < S->nslots; i++) S->slots[i] = -1;
    for (int b = 0; b < S->nbinds; b++) *binding_slot(S, S->binds[b].name) = b;
}

/* Binds NAME, which check_new_name has found unbound. */
static void bind(Sema *S, const char *name, SrcLoc loc, int node, int input)
{
    if (S->nbinds == S->capbinds) {
        S->capbinds = S->capbinds ? 2 * S->capbinds : 16;
        S->binds = xrealloc(S->binds, (size_t)S->capbinds * sizeof *S->binds);
    }
    S->binds[S->nbinds++] = (Binding){name, loc, node, input};
    if (2 * (size_t)S->nbinds > S->nslots) {
        grow_slots(S);
        return;
    }
    int *slot = binding_slot(S, name);
    CGC_ASSERT(*slot < 0);
    *slot = S->nbinds - 1;
}

/* Checks that NAME may be bound here; reports why not. A name bound twice poisons the
 * first binding too, since later uses cannot tell which one was meant. */
static bool check_new_name(Sema *S, const char *name, SrcLoc loc)
{
    for (int i = 0; reserved_names[i]; i++) {
        if (strcmp(name, reserved_names[i]) == 0) {
            diag_error(S->src, loc, "'%s' is reserved and cannot be bound", name);
            return false;
        }
    }
    Binding *b = find_binding(S, name);
    if (!b) return true;
    diag_error(S->src, loc, "'%s' is already bound", diag_quote(name, 60));
    diag_note(S->src, b->loc, "'%s' is first bound here", diag_quote(name, 60));
    b->node = POISON;
    return false;
}

/* The statement, after the current one, that binds NAME (for "used before bound"). */
static const AstStmt *later_binding(const Sema *S, const char *name)
{
    bool after = false;
    for (int i = 0; i < S->model->nstmts; i++) {
        const AstStmt *st = &S->model->stmts[i];
        if (st == S->stmt) after = true;
        else if (after && (st->kind == STMT_BIND || st->kind == STMT_INPUT) &&
                 strcmp(st->name, name) == 0)
            return st;
    }
    return NULL;
}

static void report_unknown_name(Sema *S, const char *name, SrcLoc loc)
{
    const AstStmt *later = later_binding(S, name);
    if (later) {
        diag_error(S->src, loc, "'%s' is used before it is bound (on line %d)",
                   diag_quote(name, 60), later->name_loc.line);
        return;
    }
    const char **cands = xmalloc((size_t)(S->nbinds + 1) * sizeof *cands);
    for (int i = 0; i < S->nbinds; i++) cands[i] = S->binds[i].name;
    cands[S->nbinds] = NULL;
    diag_error(S->src, loc, "unknown name '%s'%s", diag_quote(name, 60),
               sema_did_you_mean(name, cands));
    free(cands);
}

/* The binding NAME refers to, or NULL after reporting that there is none. */
static Binding *lookup(Sema *S, const char *name, SrcLoc loc)
{
    Binding *b = find_binding(S, name);
    if (!b) report_unknown_name(S, name, loc);
    return b;
}

/* ---- expressions ---- */

int sema_lower_name(Sema *S, const AstExpr *e, bool labels)
{
    Binding *b = lookup(S, e->name, e->loc);
    if (!b || b->node == POISON) return POISON;
    if (!labels && is_int_value(S, b->node)) {
        diag_error(S->src, e->loc, "i32 value '%s' can only be used as cross_entropy labels or "
                   "embedding tokens", e->name);
        return POISON;
    }
    return b->node;
}

static const char *op_verb(int op)
{
    switch (op) {
    case '+': return "add";
    case '-': return "subtract";
    case '*': return "multiply";
    default: return "divide";
    }
}

static IrOp binop_ir(int op)
{
    switch (op) {
    case '+': return IR_ADD;
    case '-': return IR_SUB;
    case '*': return IR_MUL;
    default: return IR_DIV;
    }
}

int64_t sema_fixed_numel(const Shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        if (IR_DIM_IS_SYM(s->dim[i])) continue;
        if (s->dim[i] > MAX_ELEMENTS || n * s->dim[i] > MAX_ELEMENTS) return -1;
        n *= s->dim[i];
    }
    return n;
}

bool sema_check_size(Sema *S, const Shape *s, SrcLoc loc)
{
    if (sema_fixed_numel(s) >= 0) return true;
    diag_error(S->src, loc, "the result %s would have more than 2^31 elements in '%s'",
               sema_shape_str(S, s), S->stmt_text);
    return false;
}

/* `a OP b`: NumPy broadcasting. LOC is the operator. */
static int lower_binop(Sema *S, const AstExpr *e)
{
    int a = sema_lower_expr(S, e->lhs);
    int b = sema_lower_expr(S, e->rhs);
    if (a == POISON || b == POISON) return POISON;
    Shape s;
    if (!ir_broadcast_shape(&node_of(S, a)->shape, &node_of(S, b)->shape, &s)) {
        diag_error(S->src, e->loc, "cannot %s %s and %s in '%s'", op_verb(e->op), sema_type_str(S, a),
                   sema_type_str(S, b), S->stmt_text);
        return POISON;
    }
    if (!sema_check_size(S, &s, e->loc)) return POISON;
    return ir_binary(S->g, binop_ir(e->op), a, b, e->loc);
}

static int lower_expr_inner(Sema *S, const AstExpr *e)
{
    double v = 0;
    /* S->depth - 1 operations are above E (sema_lower_expr has counted E itself), so that sema
     * takes every tree the parser does */
    int r = fold_const_at(S->src, e, &v, S->depth - 1);
    if (r < 0) return POISON;
    if (r == 1) return ir_const(S->g, v, sema_expr_start(e));
    switch (e->kind) {
    case AST_NAME: return sema_lower_name(S, e, false);
    case AST_BINOP: return lower_binop(S, e);
    case AST_NEG: {
        int x = sema_lower_expr(S, e->lhs);
        return x == POISON ? POISON : ir_unary(S->g, IR_NEG, x, e->loc);
    }
    case AST_CALL: return builtins_lower_call(S, e);
    case AST_STR:
        diag_error(S->src, e->loc, "a string is not a tensor value");
        return POISON;
    case AST_LIST:
        diag_error(S->src, e->loc, "a list is not a tensor value (lists are reshape's shapes)");
        return POISON;
    case AST_NUM: break;   /* folded above */
    }
    CGC_INTERNAL("unexpected expression kind %d", (int)e->kind);
}

int sema_lower_expr(Sema *S, const AstExpr *e)
{
    if (S->depth > AST_MAX_EXPR_DEPTH) {   /* the parser refuses deeper trees already */
        diag_error(S->src, e->loc, "expression too deep (more than %d nested operations); "
                   "split it over several statements", AST_MAX_EXPR_DEPTH);
        return POISON;
    }
    S->depth++;
    int v = lower_expr_inner(S, e);
    S->depth--;
    return v;
}

/* ---- statements ---- */

static const char *const dtype_names[] = {"f32", "f16", "bf16", "i32", NULL};
static const DType dtype_values[] = {DT_F32, DT_F16, DT_BF16, DT_I32};

static bool input_dtype(Sema *S, const AstType *t, DType *out)
{
    for (int i = 0; dtype_names[i]; i++)
        if (strcmp(t->dtype, dtype_names[i]) == 0) return *out = dtype_values[i], true;
    char list[64];
    diag_error(S->src, t->dtype_loc, "unknown type '%s'%s (types are %s)", diag_quote(t->dtype, 60),
               sema_did_you_mean(t->dtype, dtype_names), join_or(dtype_names, list, sizeof list));
    return false;
}

/* The first dimension of every input is the batch symbol, set by the first input. */
static bool check_batch_dim(Sema *S, const AstStmt *st, const AstDim *d)
{
    const char *what = d->sym ? d->sym : sema_fmt_num(d->value);
    if (S->batch == BATCH_UNSET) {
        S->batch = d->sym ? BATCH_SET : BATCH_BAD;
        S->batch_input = st;
        if (!d->sym)
            diag_error(S->src, d->loc, "the first dimension of input '%s' must be the batch "
                       "symbol (a name such as N), not %s", st->name, what);
        return d->sym != NULL;
    }
    const AstDim *batch = &S->batch_input->type.dims[0];
    if (S->batch == BATCH_BAD || (d->sym && strcmp(d->sym, batch->sym) == 0)) return true;
    diag_error(S->src, d->loc, "the first dimension of input '%s' must be the batch symbol '%s' "
               "(as in input '%s'), not %s", st->name, batch->sym, S->batch_input->name, what);
    return false;
}

/* A dimension name the program does not have yet must fit in IR_MAX_SYMBOLS. */
static bool check_symbol_room(Sema *S, const AstDim *d)
{
    if (ir_find_symbol(S->p, d->sym) >= 0 || S->p->nsyms < IR_MAX_SYMBOLS) return true;
    if (!S->too_many_symbols)   /* said once: every later new name is the same mistake */
        diag_error(S->src, d->loc, "'%s' would be dimension name %d: a model may use at most %d "
                   "(the batch included); write this dimension as a number, or reuse a name",
                   diag_quote(d->sym, 60), IR_MAX_SYMBOLS + 1, IR_MAX_SYMBOLS);
    S->too_many_symbols = true;
    return false;
}

/* One dimension of an input type into *OUT; *NUMEL accumulates the numeric ones. */
static bool input_dim(Sema *S, const AstStmt *st, int i, int64_t *out, int64_t *numel)
{
    const AstDim *d = &st->type.dims[i];
    if (i == 0 && !check_batch_dim(S, st, d)) return false;
    if (d->sym) {
        if (!check_symbol_room(S, d)) return false;
        *out = IR_SYM(ir_add_symbol(S->p, d->sym, d->loc));
        return true;
    }
    if (d->value != floor(d->value) || d->value < 1) {
        diag_error(S->src, d->loc, "a dimension must be a positive integer or a name, not %s",
                   sema_fmt_num(d->value));
        return false;
    }
    if (d->value > (double)MAX_ELEMENTS || *numel * (int64_t)d->value > MAX_ELEMENTS) {
        diag_error(S->src, d->loc, "input '%s' is too large: more than 2^31 elements (not "
                   "counting its symbolic dimensions)", st->name);
        return false;
    }
    *out = (int64_t)d->value;
    *numel *= *out;
    return true;
}

static bool input_shape(Sema *S, const AstStmt *st, Shape *s)
{
    const AstType *t = &st->type;
    *s = ir_shape0();
    if (t->ndims == 0) {
        diag_error(S->src, t->dtype_loc, "input '%s' needs dimensions, the first being the batch "
                   "(e.g. %s[N, 784])", st->name, t->dtype);
        return false;
    }
    CGC_ASSERT(t->ndims <= AST_MAX_DIMS);   /* the parser refuses more */
    int64_t numel = 1;
    for (int i = 0; i < t->ndims; i++) {
        if (!input_dim(S, st, i, &s->dim[i], &numel)) return false;
        s->rank++;
    }
    return true;
}

/* The program's inputs must fit in IR_MAX_INPUTS. */
static bool check_input_room(Sema *S, const AstStmt *st)
{
    if (S->p->ninputs < IR_MAX_INPUTS) return true;
    if (!S->too_many_inputs)   /* said once: every later input is the same mistake */
        diag_error(S->src, st->name_loc, "input '%s' would be input %d: a model takes at most %d; "
                   "combine some of them into one input with more features",
                   diag_quote(st->name, 60), IR_MAX_INPUTS + 1, IR_MAX_INPUTS);
    S->too_many_inputs = true;
    return false;
}

static void check_input(Sema *S, const AstStmt *st)
{
    bool fresh = check_new_name(S, st->name, st->name_loc);
    if (!check_input_room(S, st)) {
        if (fresh) bind(S, st->name, st->name_loc, POISON, -1);   /* later uses stay silent */
        return;
    }
    DType t = DT_F32;
    bool ok = input_dtype(S, &st->type, &t);
    Shape s;
    ok &= input_shape(S, st, &s);
    if (!fresh) return;
    if (!ok) {
        bind(S, st->name, st->name_loc, POISON, -1);
        return;
    }
    int idx = ir_add_input(S->p, st->name, t, s, st->name_loc);
    bind(S, st->name, st->name_loc, ir_input(S->g, S->p, idx, st->name_loc), idx);
}

static void begin_stmt(Sema *S, const AstStmt *st)
{
    S->stmt = st;
    S->stmt_first_node = S->g->nnodes;
    S->param_call = NULL;
    S->depth = 0;
    capture_stmt_text(S, st);
}

static void check_bind(Sema *S, const AstStmt *st)
{
    bool fresh = check_new_name(S, st->name, st->name_loc);
    int v = sema_lower_expr(S, st->expr);
    if (!fresh) return;
    /* The node that computes the binding carries its name in dumps and kernels (the
     * program keeps the string: the syntax tree is freed after sema); a binding that
     * merely renames an earlier value creates no node of its own. */
    if (v != POISON && v >= S->stmt_first_node) S->g->nodes[v].name = ir_intern(S->p, st->name);
    bind(S, st->name, st->name_loc, v, -1);
}

/* `output` and `loss` appear once; a second one is reported with the first. */
static bool check_once(Sema *S, const AstStmt *st, const AstStmt **first, const char *what)
{
    if (*first) {
        diag_error(S->src, st->loc, "only one %s statement per model", what);
        diag_note(S->src, (*first)->loc, "the first %s statement is here", what);
        return false;
    }
    *first = st;
    return true;
}

static void check_output(Sema *S, const AstStmt *st)
{
    if (!check_once(S, st, &S->output_stmt, "output")) return;
    Binding *b = lookup(S, st->name, st->name_loc);
    if (!b || b->node == POISON) return;
    if (is_int_value(S, b->node)) {
        diag_error(S->src, st->name_loc, "i32 value '%s' can only be used as cross_entropy "
                   "labels or embedding tokens", st->name);
        return;
    }
    S->g->output[IR_OUT_PREDICTION] = b->node;
}

static void check_loss(Sema *S, const AstStmt *st)
{
    bool first = check_once(S, st, &S->loss_stmt, "loss");
    int v = sema_lower_expr(S, st->expr);
    if (!first || v == POISON) return;
    if (node_of(S, v)->shape.rank != 0) {
        diag_error(S->src, st->expr->loc, "the loss must be a scalar, but '%s' has type %s",
                   S->stmt_text, sema_type_str(S, v));
        return;
    }
    S->g->output[IR_OUT_LOSS] = v;
}

static void check_stmt(Sema *S, const AstStmt *st)
{
    begin_stmt(S, st);
    switch (st->kind) {
    case STMT_INPUT: check_input(S, st); break;
    case STMT_BIND: check_bind(S, st); break;
    case STMT_OUTPUT: check_output(S, st); break;
    case STMT_LOSS: check_loss(S, st); break;
    }
}

static void check_model(Source *src, IrProgram *p, const AstBlock *model)
{
    Sema S;
    memset(&S, 0, sizeof S);
    S.src = src;
    S.p = p;
    S.g = &p->forward;
    S.model = model;
    S.counter_node = -1;
    p->model_name = xstrdup(model->name ? model->name : "model");
    bool stopped = false;
    for (int i = 0; i < model->nstmts && !stopped; i++) {
        check_stmt(&S, &model->stmts[i]);
        /* Past this many, more messages help nobody, and each one searches the names
         * bound so far for a suggestion: a file of errors would take quadratic time. */
        stopped = src->nerrors >= SEMA_MAX_ERRORS;
    }
    const char *mname = diag_quote(p->model_name, 60);
    if (stopped) {
        diag_note(src, (SrcLoc){0, 0}, "too many errors; stopped after %d", SEMA_MAX_ERRORS);
    } else {
        if (!S.output_stmt)
            diag_error(src, model->loc, "model '%s' has no output statement (add 'output NAME')", mname);
        if (!S.loss_stmt)
            diag_error(src, model->loc, "model '%s' has no loss statement (add 'loss EXPR')", mname);
    }
    free(S.binds);
    free(S.slots);
}

/* ====================================================================================
 * The file.
 * ==================================================================================== */

/* The one block of KIND; a second one is reported with the first. */
static const AstBlock *only_block(Source *src, const AstFile *file, AstBlockKind kind,
                                  const char *what)
{
    const AstBlock *first = NULL;
    for (int i = 0; i < file->nblocks; i++) {
        const AstBlock *b = &file->blocks[i];
        if (b->kind != kind) continue;
        if (!first) {
            first = b;
            continue;
        }
        diag_error(src, b->loc, "only one %s block per file", what);
        diag_note(src, first->loc, "the first %s block is here", what);
    }
    return first;
}

IrProgram *sema_check(Source *src, const AstFile *file)
{
    int errors = src->nerrors;
    const AstBlock *model = only_block(src, file, BLOCK_MODEL, "model");
    const AstBlock *train = only_block(src, file, BLOCK_TRAIN, "train");
    if (!model) diag_error(src, (SrcLoc){1, 1}, "no model block in %s", src->path);
    IrProgram *p = ir_program_new();   /* cfg starts from config_defaults */
    if (model) check_model(src, p, model);
    if (train) sema_train_block(src, p, train);
    if (src->nerrors > errors) {
        ir_program_free(p);
        return NULL;
    }
#ifndef NDEBUG
    ir_verify(p, &p->forward);
#endif
    return p;
}
