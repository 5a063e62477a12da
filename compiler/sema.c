/* sema.c: semantic analysis, from the syntax tree to the checked program.
 *
 * One walk over the model block, statement by statement, builds the `forward` graph
 * through ir.c's builders: names are resolved (visible after their line, bound once),
 * every expression gets a dtype and a shape, built-in calls are checked (arity, keyword
 * names, argument kinds) and lowered to IR primitives, and parameters are registered as
 * `binding.weight` / `binding.bias`. The train block is train_config.c's; the helpers
 * both use (constant folding, checked constants, argument matching) are here, declared
 * in sema_util.h.
 *
 * Every user mistake is reported here, at the token at fault, before anything is built
 * from it: ir.c's builders assert their preconditions, so a shape they would reject must
 * never reach them. After an error the offending binding is "poisoned" (node POISON):
 * later uses of it stay silent, so one mistake gives one message.
 */
#include "passes.h"
#include "sema_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    POISON = -1,           /* the value of an expression that already had an error */
    NAME_BUF = 256,        /* shape and type strings in messages */
};

/* The parser's limit on an input's dimensions is the one every Shape has. */
_Static_assert((int)AST_MAX_DIMS == (int)IR_MAX_RANK, "an input type fits a Shape");

/* Tensors larger than this (elements, not counting symbolic dimensions) are refused, so
 * that nothing later tries to allocate absurd amounts of memory. */
#define MAX_ELEMENTS ((int64_t)1 << 31)
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
    if (v != floor(v) || v < (double)lo) {
        diag_error(src, sema_expr_start(e), "%s must be %s, not %s", what, kind, sema_fmt_num(v));
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
typedef struct Binding {
    const char *name;   /* the AST's string: only used while sema runs */
    SrcLoc loc;
    int node;           /* its value in the forward graph, or POISON */
    int input;          /* input index when the name is an input, else -1 */
} Binding;

typedef enum BatchState { BATCH_UNSET, BATCH_SET, BATCH_BAD } BatchState;

typedef struct Sema {
    Source *src;
    IrProgram *p;
    IrGraph *g;
    const AstBlock *model;

    Binding *binds;
    int nbinds, capbinds;
    /* Names to bindings: an open-addressing table of indices into BINDS (-1: empty),
     * NSLOTS a power of two, at most half full, so a lookup costs the same in a model of
     * ten statements as in one of a hundred thousand. */
    int *slots;
    size_t nslots;

    bool too_many_inputs, too_many_symbols;   /* past IR_MAX_INPUTS, IR_MAX_SYMBOLS: said */
    BatchState batch;              /* the first input's first dimension */
    const AstStmt *batch_input;    /* the input that set it */

    const AstStmt *stmt;           /* the statement being checked */
    int stmt_first_node;           /* the first node it created */
    const AstExpr *param_call;     /* its parameter-creating call, if any */
    char stmt_text[96];            /* its source text, for shape errors */
    int depth;                     /* expression nesting while lowering */

    int ndropout;                  /* dropout nodes so far: each one's stream */
    int counter_node;              /* the RUNTIME micro_step node dropout keys on, or -1 */

    const AstStmt *output_stmt, *loss_stmt;
} Sema;

static const char *const reserved_names[] = {
    "model", "train", "input", "output", "loss", "true", "false", "cgc", NULL,
};

static const IrNode *node_of(const Sema *S, int id) { return &S->g->nodes[id]; }

/* "f32[N, 512]" for node ID. Rotating static buffers. */
static const char *type_str(const Sema *S, int id)
{
    static char bufs[4][NAME_BUF];
    static int next;
    char *b = bufs[next++ & 3], shape[NAME_BUF - 8];
    const IrNode *n = node_of(S, id);
    ir_shape_str(S->p, &n->shape, shape, sizeof shape);
    snprintf(b, NAME_BUF, "%s%s", ir_dtype_name(n->dtype), shape);
    return b;
}

static const char *shape_str(const Sema *S, const Shape *s)
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

static int lower_expr(Sema *S, const AstExpr *e);

static bool is_int_value(const Sema *S, int id) { return node_of(S, id)->dtype == DT_I32; }

/* A name as a value. Integer inputs are only good as cross_entropy labels (LABELS). */
static int lower_name(Sema *S, const AstExpr *e, bool labels)
{
    Binding *b = lookup(S, e->name, e->loc);
    if (!b || b->node == POISON) return POISON;
    if (!labels && is_int_value(S, b->node)) {
        diag_error(S->src, e->loc, "i32 value '%s' can only be used as cross_entropy labels",
                   e->name);
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

/* Product of the numeric dimensions of S, or -1 when it exceeds MAX_ELEMENTS. */
static int64_t fixed_numel(const Shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        if (IR_DIM_IS_SYM(s->dim[i])) continue;
        if (s->dim[i] > MAX_ELEMENTS || n * s->dim[i] > MAX_ELEMENTS) return -1;
        n *= s->dim[i];
    }
    return n;
}

/* Refuses results too large to ever allocate (broadcasting can multiply sizes). */
static bool check_size(Sema *S, const Shape *s, SrcLoc loc)
{
    if (fixed_numel(s) >= 0) return true;
    diag_error(S->src, loc, "the result %s would have more than 2^31 elements in '%s'",
               shape_str(S, s), S->stmt_text);
    return false;
}

/* `a OP b`: NumPy broadcasting. LOC is the operator. */
static int lower_binop(Sema *S, const AstExpr *e)
{
    int a = lower_expr(S, e->lhs);
    int b = lower_expr(S, e->rhs);
    if (a == POISON || b == POISON) return POISON;
    Shape s;
    if (!ir_broadcast_shape(&node_of(S, a)->shape, &node_of(S, b)->shape, &s)) {
        diag_error(S->src, e->loc, "cannot %s %s and %s in '%s'", op_verb(e->op), type_str(S, a),
                   type_str(S, b), S->stmt_text);
        return POISON;
    }
    if (!check_size(S, &s, e->loc)) return POISON;
    return ir_binary(S->g, binop_ir(e->op), a, b, e->loc);
}

static int lower_call(Sema *S, const AstExpr *call);

static int lower_expr_inner(Sema *S, const AstExpr *e)
{
    double v = 0;
    /* S->depth - 1 operations are above E (lower_expr has counted E itself), so that sema
     * takes every tree the parser does */
    int r = fold_const_at(S->src, e, &v, S->depth - 1);
    if (r < 0) return POISON;
    if (r == 1) return ir_const(S->g, v, sema_expr_start(e));
    switch (e->kind) {
    case AST_NAME: return lower_name(S, e, false);
    case AST_BINOP: return lower_binop(S, e);
    case AST_NEG: {
        int x = lower_expr(S, e->lhs);
        return x == POISON ? POISON : ir_unary(S->g, IR_NEG, x, e->loc);
    }
    case AST_CALL: return lower_call(S, e);
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

/* An expression as a tensor value: its node id, or POISON after an error. */
static int lower_expr(Sema *S, const AstExpr *e)
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

/* ---- built-in functions ---- */

typedef struct Builtin Builtin;
typedef int (*LowerFn)(Sema *S, const Builtin *b, const AstExpr *call, const AstExpr **args);

struct Builtin {
    Signature sig;
    LowerFn lower;
    IrOp op;                /* the elementwise op, reduction or softmax it stands for */
    bool creates_params;
};

/* "linear: " style message prefix helper: the call's name. */
#define FN(b) ((b)->sig.name)

/* An argument that must be a float tensor of rank >= MIN_RANK. */
static int tensor_arg(Sema *S, const Builtin *b, const AstExpr *e, int min_rank)
{
    int x = lower_expr(S, e);
    if (x == POISON) return POISON;
    if (node_of(S, x)->shape.rank < min_rank) {
        diag_error(S->src, e->loc, "%s needs an argument with at least %d dimension%s, not %s in '%s'",
                   FN(b), min_rank, min_rank == 1 ? "" : "s", type_str(S, x), S->stmt_text);
        return POISON;
    }
    return x;
}

/* An axis of a rank-RANK value: negative counts from the end. -1 after an error. */
static int axis_arg(Sema *S, const Builtin *b, const AstExpr *e, int x, int *axis)
{
    char what[64];
    snprintf(what, sizeof what, "%s: axis", FN(b));
    int64_t a;
    if (sema_const_int(S->src, e, what, -IR_MAX_RANK - 100, IR_MAX_RANK + 100, &a) < 0) return -1;
    int rank = node_of(S, x)->shape.rank;
    if (a < -rank || a >= rank) {
        diag_error(S->src, e->loc, "%s: axis %lld is out of range for %s (rank %d) in '%s'",
                   FN(b), (long long)a, type_str(S, x), rank, S->stmt_text);
        return -1;
    }
    *axis = (int)(a < 0 ? a + rank : a);
    return 0;
}

static int lower_unary(Sema *S, const Builtin *b, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, b, args[0], 0);
    return x == POISON ? POISON : ir_unary(S->g, b->op, x, call->loc);
}

static int lower_gelu(Sema *S, const Builtin *b, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, b, args[0], 0);
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
static int lower_leaky_relu(Sema *S, const Builtin *b, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, b, args[0], 0);
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

static int lower_dropout(Sema *S, const Builtin *b, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, b, args[0], 0);
    double p;
    if (sema_const_real(S->src, args[1], "dropout: p", REAL_UNIT, &p) < 0 || x == POISON)
        return POISON;
    if (p == 0) return x;
    int counter = dropout_counter(S, call->loc);
    return ir_dropout(S->g, x, counter, p, S->ndropout++, call->loc);
}

static int lower_softmax(Sema *S, const Builtin *b, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, b, args[0], 1);
    if (x == POISON) return POISON;
    int axis = node_of(S, x)->shape.rank - 1;
    if (args[1] && axis_arg(S, b, args[1], x, &axis) < 0) return POISON;
    return ir_softmax(S->g, b->op, x, axis, call->loc);
}

static int lower_reduce(Sema *S, const Builtin *b, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, b, args[0], 0);
    if (x == POISON) return POISON;
    int axis = IR_AXIS_ALL;
    if (args[1] && axis_arg(S, b, args[1], x, &axis) < 0) return POISON;
    return ir_reduce(S->g, b->op, x, axis, call->loc);
}

static int lower_matmul(Sema *S, const Builtin *b, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, b, args[0], 2);
    int y = tensor_arg(S, b, args[1], 2);
    if (x == POISON || y == POISON) return POISON;
    const Shape *sa = &node_of(S, x)->shape, *sb = &node_of(S, y)->shape;
    if (sa->dim[sa->rank - 1] != sb->dim[sb->rank - 2]) {
        diag_error(S->src, args[1]->loc,
                   "matmul: inner dimensions differ: %s @ %s in '%s'", type_str(S, x),
                   type_str(S, y), S->stmt_text);
        return POISON;
    }
    Shape la = *sa, lb = *sb, lead;
    la.rank -= 2;
    lb.rank -= 2;
    if (!ir_broadcast_shape(&la, &lb, &lead)) {
        diag_error(S->src, args[1]->loc,
                   "matmul: batch dimensions do not broadcast: %s @ %s in '%s'", type_str(S, x),
                   type_str(S, y), S->stmt_text);
        return POISON;
    }
    lead.dim[lead.rank++] = sa->dim[sa->rank - 2];
    lead.dim[lead.rank++] = sb->dim[sb->rank - 1];
    if (!check_size(S, &lead, call->loc)) return POISON;
    return ir_matmul(S->g, x, y, 0, call->loc);
}

static int lower_transpose(Sema *S, const Builtin *b, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, b, args[0], 2);
    return x == POISON ? POISON : ir_transpose(S->g, x, call->loc);
}

/* Symbols of S (with repeats) and the product of its numeric dimensions. */
static int64_t split_shape(const Shape *s, int64_t *syms, int *nsyms)
{
    *nsyms = 0;
    for (int i = 0; i < s->rank; i++)
        if (IR_DIM_IS_SYM(s->dim[i])) syms[(*nsyms)++] = s->dim[i];
    return fixed_numel(s);
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
                       type_str(S, x), target_str(S, t, hole), product_str(S, xsyms, nx, kx / kt),
                       S->stmt_text);
            return false;
        }
    }
    if (!ok)
        diag_error(S->src, list->loc, "reshape: cannot reshape %s into %s: the element counts "
                   "differ, in '%s'", type_str(S, x), target_str(S, t, hole), S->stmt_text);
    return ok;
}

static int lower_reshape(Sema *S, const Builtin *b, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, b, args[0], 0);
    Shape t;
    int hole;
    if (!reshape_target(S, args[1], &t, &hole) || x == POISON) return POISON;
    if (!reshape_resolve(S, args[1], x, &t, hole)) return POISON;
    return ir_reshape(S->g, x, t, call->loc);
}

static int lower_flatten(Sema *S, const Builtin *b, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, b, args[0], 2);
    if (x == POISON) return POISON;
    const Shape *xs = &node_of(S, x)->shape;
    Shape t = {2, {xs->dim[0], 1}};
    for (int i = 1; i < xs->rank; i++) {
        if (IR_DIM_IS_SYM(xs->dim[i])) {
            diag_error(S->src, args[0]->loc, "flatten: cannot flatten the symbolic dimension "
                       "%d of %s in '%s'", i, type_str(S, x), S->stmt_text);
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
static bool fixed_last_dim(Sema *S, const Builtin *b, const AstExpr *arg, int x, int64_t *out)
{
    const Shape *xs = &node_of(S, x)->shape;
    int64_t d = xs->dim[xs->rank - 1];
    if (IR_DIM_IS_SYM(d)) {
        diag_error(S->src, arg->loc, "%s: the last dimension of its input must be a number, "
                   "but the input has shape %s in '%s'", FN(b), type_str(S, x), S->stmt_text);
        return false;
    }
    *out = d;
    return true;
}

static int lower_linear(Sema *S, const Builtin *b, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, b, args[0], 2);
    int64_t out, in = 0;
    bool bias = true, ok = x != POISON;
    ok &= sema_const_int(S->src, args[1], "linear: out", 1, MAX_ELEMENTS, &out) == 0;
    if (args[2]) ok &= sema_const_bool(S->src, args[2], "linear: bias", &bias) == 0;
    if (!ok || !fixed_last_dim(S, b, args[0], x, &in)) return POISON;
    if (out * in > MAX_ELEMENTS) {
        diag_error(S->src, args[1]->loc, "linear: the weight %s.weight [%lld, %lld] would have "
                   "more than 2^31 elements", S->stmt->name, (long long)out, (long long)in);
        return POISON;
    }
    double bound = 1.0 / sqrt((double)in);
    int w = add_param(S, "weight", (Shape){2, {out, in}}, IR_INIT_UNIFORM, bound, call->loc);
    int bnode = bias ? add_param(S, "bias", (Shape){1, {out}}, IR_INIT_UNIFORM, bound, call->loc)
                     : POISON;
    Shape ys = node_of(S, x)->shape;
    ys.dim[ys.rank - 1] = out;
    if (!check_size(S, &ys, call->loc)) return POISON;
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
static int lower_layernorm(Sema *S, const Builtin *b, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, b, args[0], 1);
    double eps = 1e-5;
    int64_t d = 0;
    bool ok = x != POISON;
    if (args[1]) ok &= sema_const_real(S->src, args[1], "layernorm: eps", REAL_GT0, &eps) == 0;
    if (!ok || !fixed_last_dim(S, b, args[0], x, &d)) return POISON;
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
static int image_arg(Sema *S, const Builtin *b, const AstExpr *e)
{
    int x = lower_expr(S, e);
    if (x == POISON) return POISON;
    const Shape *s = &node_of(S, x)->shape;
    bool ok = s->rank == 4;
    for (int i = 1; ok && i < 4; i++) ok = !IR_DIM_IS_SYM(s->dim[i]);
    if (!ok) {
        diag_error(S->src, e->loc, "%s needs an image [N, C, H, W] (channels, height and width "
                   "numbers), not %s in '%s'; a flat one becomes an image with reshape(x, "
                   "[-1, C, H, W])", FN(b), type_str(S, x), S->stmt_text);
        return POISON;
    }
    if (!ir_dtype_is_float(node_of(S, x)->dtype)) {
        diag_error(S->src, e->loc, "%s needs a float image, not %s in '%s'", FN(b), type_str(S, x),
                   S->stmt_text);
        return POISON;
    }
    return x;
}

/* One window size: a number, or [h, w]; each in [LO, HI]. False after an error. */
static bool pair_arg(Sema *S, const Builtin *b, const AstExpr *e, const char *what, int64_t lo,
                     int32_t out[2])
{
    char name[64];
    snprintf(name, sizeof name, "%s: %s", FN(b), what);
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
static bool padding_arg(Sema *S, const Builtin *b, const AstExpr *e, IrWindow *w)
{
    if (e->kind != AST_STR) return pair_arg(S, b, e, "padding", 0, w->pad);
    if (strcmp(e->str, "same") != 0) {
        diag_error(S->src, e->loc, "%s: padding must be a number, [h, w] or \"same\", not %s",
                   FN(b), sema_describe(e));
        return false;
    }
    for (int i = 0; i < 2; i++) {
        int64_t total = (int64_t)w->dilation[i] * (w->kernel[i] - 1);
        if (w->stride[i] != 1 || total % 2 != 0) {
            diag_error(S->src, e->loc, "%s: padding = \"same\" needs stride 1 and an odd kernel "
                       "extent (dilation * (kernel - 1) even), not kernel %d, stride %d, dilation "
                       "%d; give the padding as numbers", FN(b), w->kernel[i], w->stride[i],
                       w->dilation[i]);
            return false;
        }
        if (total / 2 > 1 << 16) {
            diag_error(S->src, e->loc, "%s: padding = \"same\" would pad by %lld, more than %d",
                       FN(b), (long long)(total / 2), 1 << 16);
            return false;
        }
        w->pad[i] = (int32_t)(total / 2);
    }
    return true;
}

/* Whether window W fits image X (else an error at the kernel argument KERNEL). */
static bool window_fits(Sema *S, const Builtin *b, const AstExpr *kernel, int x, const IrWindow *w,
                        int flags)
{
    Shape s;
    if (ir_window_shape(&node_of(S, x)->shape, w, flags, &s)) {
        if (fixed_numel(&s) >= 0) return true;
        diag_error(S->src, kernel->loc, "%s: the input's %dx%d windows (padding %dx%d, stride "
                   "%dx%d) would be %s, more than 2^31 elements a sample, in '%s'", FN(b),
                   w->kernel[0], w->kernel[1], w->pad[0], w->pad[1], w->stride[0], w->stride[1],
                   shape_str(S, &s), S->stmt_text);
        return false;
    }
    char dilation[48] = "";
    if (w->dilation[0] != 1 || w->dilation[1] != 1)
        snprintf(dilation, sizeof dilation, " (dilation %dx%d)", w->dilation[0], w->dilation[1]);
    diag_error(S->src, kernel->loc, "%s: the kernel %dx%d%s is larger than the input %s padded by "
               "%dx%d in '%s'", FN(b), w->kernel[0], w->kernel[1], dilation, type_str(S, x),
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
static bool conv_args(Sema *S, const Builtin *b, int x, const AstExpr **args, IrWindow *w,
                      int64_t *out, bool *bias)
{
    int64_t groups = 1;
    bool ok = sema_const_int(S->src, args[1], "conv2d: out", 1, MAX_ELEMENTS, out) == 0;
    ok &= pair_arg(S, b, args[2], "kernel", 1, w->kernel);
    if (args[3]) ok &= pair_arg(S, b, args[3], "stride", 1, w->stride);
    if (args[5]) ok &= pair_arg(S, b, args[5], "dilation", 1, w->dilation);
    if (args[6]) ok &= sema_const_int(S->src, args[6], "conv2d: groups", 1, 1 << 16, &groups) == 0;
    if (args[7]) ok &= sema_const_bool(S->src, args[7], "conv2d: bias", bias) == 0;
    if (ok && args[4]) ok &= padding_arg(S, b, args[4], w);
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
    return window_fits(S, b, args[2], x, w, IR_WINDOW_ROWS);
}

/* conv2d as a matrix product over the patches: unfold x into rows [N, L, C*kh*kw] (L
 * output positions; [N, G, L, C/G*kh*kw] with G groups), multiply by the weight seen as
 * [out, C*kh*kw] ([G, out/G, C/G*kh*kw]), turn [N, L, out] into [N, out, OH, OW], and
 * add the bias per channel there: the transpose is then the product's only reader and
 * the gradient's transpose the GEMMs' only input, which an implicit GEMM may replace by
 * storing or reading NCHW itself (codegen/plan.h, PlanWindow). */
static int lower_conv2d(Sema *S, const Builtin *b, const AstExpr *call, const AstExpr **args)
{
    int x = image_arg(S, b, args[0]);
    int64_t out;
    bool bias = true;
    IrWindow w = {{1, 1}, {1, 1}, {0, 0}, {1, 1}, 1};
    if (!conv_args(S, b, x, args, &w, &out, &bias)) return POISON;
    const Shape *xs = &node_of(S, x)->shape;
    int64_t groups = w.groups, cg = xs->dim[1] / groups, k = cg * w.kernel[0] * w.kernel[1];
    Shape ys = {4, {xs->dim[0], out, ir_window_extent(xs->dim[2], &w, 0), ir_window_extent(xs->dim[3], &w, 1)}};
    if (!check_size(S, &ys, call->loc)) return POISON;
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
static int lower_pool(Sema *S, const Builtin *b, const AstExpr *call, const AstExpr **args)
{
    int x = image_arg(S, b, args[0]);
    IrWindow w = {{1, 1}, {1, 1}, {0, 0}, {1, 1}, 1};
    bool ok = x != POISON && pair_arg(S, b, args[1], "kernel", 1, w.kernel);
    if (ok) memcpy(w.stride, w.kernel, sizeof w.stride);
    if (ok && args[2]) ok = pair_arg(S, b, args[2], "stride", 1, w.stride);
    if (ok && args[3]) ok = pair_arg(S, b, args[3], "padding", 0, w.pad);
    if (!ok) return POISON;
    for (int i = 0; i < 2; i++)
        if (w.pad[i] > w.kernel[i] / 2) {
            diag_error(S->src, args[3]->loc, "%s: padding %d is more than half the kernel (%d) in "
                       "'%s'", FN(b), w.pad[i], w.kernel[i], S->stmt_text);
            return POISON;
        }
    if (!window_fits(S, b, args[1], x, &w, 0)) return POISON;
    double outside = b->op == IR_MAX ? -INFINITY : 0;
    int patches = ir_unfold(S->g, x, w, 0, outside, call->loc);
    return ir_reduce(S->g, b->op, patches, 2, call->loc);
}

/* [N, C, H, W] to [N, C]: the mean over each channel's H*W. */
static int lower_global_avg_pool(Sema *S, const Builtin *b, const AstExpr *call,
                                 const AstExpr **args)
{
    int x = image_arg(S, b, args[0]);
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
                       "'%s'", i, type_str(S, x), S->stmt_text);
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
static int lower_batchnorm(Sema *S, const Builtin *b, const AstExpr *call, const AstExpr **args)
{
    int x = tensor_arg(S, b, args[0], 2);
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
    int y = e->kind == AST_NAME ? lower_name(S, e, true) : lower_expr(S, e);
    if (y == POISON) return POISON;
    if (!is_int_value(S, y) || node_of(S, y)->shape.rank != 1) {
        diag_error(S->src, e->loc, "cross_entropy: labels must be an i32 input of shape [N], "
                   "not %s in '%s'", type_str(S, y), S->stmt_text);
        return POISON;
    }
    return y;
}

static int lower_cross_entropy(Sema *S, const Builtin *b, const AstExpr *call,
                               const AstExpr **args)
{
    int logits = lower_expr(S, args[0]);
    int labels = labels_arg(S, args[1]);
    if (logits == POISON || labels == POISON) return POISON;
    const Shape *ls = &node_of(S, logits)->shape;
    if (ls->rank != 2 || IR_DIM_IS_SYM(ls->dim[1])) {
        diag_error(S->src, args[0]->loc, "cross_entropy: logits must have shape [N, C] with C a "
                   "number, not %s in '%s'", type_str(S, logits), S->stmt_text);
        return POISON;
    }
    if (ls->dim[0] != node_of(S, labels)->shape.dim[0]) {
        diag_error(S->src, args[1]->loc, "cross_entropy: labels %s do not match logits %s in '%s'",
                   type_str(S, labels), type_str(S, logits), S->stmt_text);
        return POISON;
    }
    if (S->p->num_classes == 0) {
        S->p->num_classes = (int)ls->dim[1];
        S->p->prediction_input_labels = node_of(S, labels)->op == IR_INPUT
                                            ? node_of(S, labels)->index : -1;
    }
    return ir_cross_entropy(S->g, logits, labels, call->loc);
}

/* mean((pred - target)^2) over every element, after broadcasting. */
static int lower_mse(Sema *S, const Builtin *b, const AstExpr *call, const AstExpr **args)
{
    int pred = lower_expr(S, args[0]);
    int target = lower_expr(S, args[1]);
    if (pred == POISON || target == POISON) return POISON;
    Shape s;
    if (!ir_broadcast_shape(&node_of(S, pred)->shape, &node_of(S, target)->shape, &s)) {
        diag_error(S->src, args[1]->loc, "mse: target %s does not match prediction %s in '%s'",
                   type_str(S, target), type_str(S, pred), S->stmt_text);
        return POISON;
    }
    if (!check_size(S, &s, call->loc)) return POISON;
    int diff = ir_binary(S->g, IR_SUB, pred, target, call->loc);
    int sq = ir_binary(S->g, IR_MUL, diff, diff, call->loc);
    return ir_reduce(S->g, IR_MEAN, sq, IR_AXIS_ALL, call->loc);
}

#define UNARY(name, op) {{name, {"x"}, 1}, lower_unary, op, false}
static const Builtin builtins[] = {
    {{"linear", {"x", "out", "bias"}, 2}, lower_linear, IR_MATMUL, true},
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
static bool check_param_call(Sema *S, const Builtin *b, const AstExpr *call)
{
    if (S->stmt->kind != STMT_BIND) {
        diag_error(S->src, call->loc, "%s creates parameters, which are named after a binding: "
                   "write it as 'NAME = %s(...)' on a line of its own", FN(b), FN(b));
        return false;
    }
    if (S->param_call) {
        diag_error(S->src, call->loc, "only one call that creates parameters (linear, conv2d, layernorm, batchnorm) "
                   "may appear in a statement; bind this %s to a name of its own", FN(b));
        diag_note(S->src, S->param_call->loc, "'%s' already gets its parameters from this %s",
                  S->stmt->name, S->param_call->name);
        return false;
    }
    S->param_call = call;
    return true;
}

static int lower_call(Sema *S, const AstExpr *call)
{
    const Builtin *b = find_builtin(call->name);
    if (!b) {
        report_unknown_function(S, call);
        return POISON;
    }
    if (b->creates_params && !check_param_call(S, b, call)) return POISON;
    const AstExpr *args[MAX_PARAMS];
    if (!sema_bind_args(S->src, &b->sig, call, args)) return POISON;
    return b->lower(S, b, call, args);
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
    int v = lower_expr(S, st->expr);
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
        diag_error(S->src, st->name_loc, "i32 value '%s' can only be used as cross_entropy labels",
                   st->name);
        return;
    }
    S->g->output[IR_OUT_PREDICTION] = b->node;
}

static void check_loss(Sema *S, const AstStmt *st)
{
    bool first = check_once(S, st, &S->loss_stmt, "loss");
    int v = lower_expr(S, st->expr);
    if (!first || v == POISON) return;
    if (node_of(S, v)->shape.rank != 0) {
        diag_error(S->src, st->expr->loc, "the loss must be a scalar, but '%s' has type %s",
                   S->stmt_text, type_str(S, v));
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
