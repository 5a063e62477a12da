/* test_parser.c: the parser builds the AST docs/language.md describes, with the locations
 * diagnostics need, and refuses what it must refuse without crashing.
 *
 * The exact wording of syntax errors is checked by the golden files in diag/syntax; here
 * we check structure: block and statement kinds, names, a call's arguments and keys,
 * constant expressions as BINOP trees, units, string escapes, token locations, and the
 * limits on nesting and token size.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "grammar/ast.h"

#define CHECK_LOC(loc, l, c)            \
    do {                                \
        CHECK_EQ_INT((loc).line, (l));  \
        CHECK_EQ_INT((loc).col, (c));   \
    } while (0)

static AstFile *parse_text(const char *text, int *nerrors)
{
    Source *src = source_from_string("test.net", text, strlen(text));
    AstFile *file = parse_file(src);
    *nerrors = src->nerrors;
    source_free(src);
    return file;
}

static AstExpr *parse_text_value(const char *text, int *nerrors)
{
    Source *src = source_from_string("--value", text, strlen(text));
    AstExpr *e = parse_value(src);
    *nerrors = src->nerrors;
    source_free(src);
    return e;
}

/* Parses TEXT as a value that must be rejected with exactly one message. */
static void check_value_rejected(const char *text)
{
    int nerrors;
    AstExpr *e = parse_text_value(text, &nerrors);
    CHECK(e == NULL);
    CHECK_EQ_INT(nerrors, 1);
    ast_expr_free(e);
}

static void check_file_rejected(const char *text)
{
    int nerrors;
    AstFile *f = parse_text(text, &nerrors);
    CHECK(f == NULL);
    CHECK_EQ_INT(nerrors, 1);
    ast_free(f);
}

/* Whether E is a call of NAME with NARGS arguments, the checks failed if not: callers
 * look at its arguments only when it is. */
static bool check_call(const AstExpr *e, const char *name, int nargs)
{
    CHECK(e != NULL);
    if (!e) return false;
    CHECK_EQ_INT(e->kind, AST_CALL);
    CHECK_STR(e->name, name);
    CHECK_EQ_INT(e->nargs, nargs);
    return e->kind == AST_CALL && e->nargs == nargs;
}

/* Whether E is a BINOP (so has both operands), the check failed if not. */
static bool check_binop(const AstExpr *e)
{
    CHECK(e != NULL && e->kind == AST_BINOP);
    return e && e->kind == AST_BINOP;
}

static void check_num(const AstExpr *e, double value, const char *unit)
{
    CHECK(e != NULL);
    if (!e) return;
    CHECK_EQ_INT(e->kind, AST_NUM);
    CHECK_CLOSE(e->num, value, 0, 1e-15);
    CHECK_STR(e->unit, unit);
}

static void check_model_block(const AstBlock *b)
{
    CHECK_EQ_INT(b->kind, BLOCK_MODEL);
    CHECK_STR(b->name, "mlp");
    CHECK_LOC(b->loc, 2, 1);
    CHECK_LOC(b->name_loc, 2, 7);
    CHECK_EQ_INT(b->nstmts, 7);
    if (b->nstmts != 7) return;

    const AstStmt *x = &b->stmts[0];
    CHECK_EQ_INT(x->kind, STMT_INPUT);
    CHECK_STR(x->name, "x");
    CHECK_LOC(x->loc, 3, 5);
    CHECK_LOC(x->name_loc, 3, 11);
    CHECK_STR(x->type.dtype, "f32");
    CHECK_LOC(x->type.dtype_loc, 3, 14);
    CHECK_EQ_INT(x->type.ndims, 2);
    if (x->type.ndims == 2) {
        CHECK_STR(x->type.dims[0].sym, "N");
        CHECK_LOC(x->type.dims[0].loc, 3, 18);
        CHECK(x->type.dims[1].sym == NULL);
        CHECK_CLOSE(x->type.dims[1].value, 784, 0, 0);
        CHECK_LOC(x->type.dims[1].loc, 3, 21);
    }

    CHECK_EQ_INT(b->stmts[1].kind, STMT_INPUT);
    CHECK_STR(b->stmts[1].type.dtype, "i32");
    CHECK_EQ_INT(b->stmts[1].type.ndims, 1);

    /* h1 = relu(linear(x, 512)) */
    const AstStmt *h1 = &b->stmts[2];
    CHECK_EQ_INT(h1->kind, STMT_BIND);
    CHECK_STR(h1->name, "h1");
    CHECK_LOC(h1->loc, 6, 5);
    if (check_call(h1->expr, "relu", 1)) {
        CHECK_LOC(h1->expr->loc, 6, 14);
        const AstExpr *lin = h1->expr->args[0].value;
        CHECK(h1->expr->args[0].key == NULL);
        if (check_call(lin, "linear", 2)) {
            CHECK_LOC(lin->loc, 6, 19);
            CHECK_EQ_INT(lin->args[0].value->kind, AST_NAME);
            CHECK_STR(lin->args[0].value->name, "x");
            CHECK_LOC(lin->args[0].value->loc, 6, 26);
            check_num(lin->args[1].value, 512, "");
            CHECK_LOC(lin->args[1].value->loc, 6, 29);
        }
    }

    CHECK_EQ_INT(b->stmts[5].kind, STMT_OUTPUT);
    CHECK_STR(b->stmts[5].name, "logits");
    CHECK_LOC(b->stmts[5].name_loc, 10, 12);
    const AstStmt *loss = &b->stmts[6];
    CHECK_EQ_INT(loss->kind, STMT_LOSS);
    CHECK_LOC(loss->loc, 11, 5);
    if (check_call(loss->expr, "cross_entropy", 2)) CHECK_STR(loss->expr->args[1].value->name, "y");
}

static void check_train_block(const AstBlock *b)
{
    CHECK_EQ_INT(b->kind, BLOCK_TRAIN);
    CHECK(b->name == NULL);
    CHECK_LOC(b->loc, 14, 1);
    CHECK_EQ_INT(b->nentries, 8);
    if (b->nentries != 8) return;

    /* data = idx("fashion-mnist", scale = 1/255) */
    const AstEntry *data = &b->entries[0];
    CHECK_STR(data->key, "data");
    CHECK_LOC(data->key_loc, 15, 5);
    if (check_call(data->value, "idx", 2)) {
        const AstArg *dir = &data->value->args[0], *scale = &data->value->args[1];
        CHECK(dir->key == NULL);
        CHECK_EQ_INT(dir->value->kind, AST_STR);
        CHECK_STR(dir->value->str, "fashion-mnist");
        CHECK_LOC(dir->value->loc, 15, 21);
        CHECK_STR(scale->key, "scale");
        CHECK_LOC(scale->key_loc, 15, 38);
        CHECK_EQ_INT(scale->value->kind, AST_BINOP);
        CHECK_EQ_INT(scale->value->op, '/');
        CHECK_LOC(scale->value->loc, 15, 47);
        if (scale->value->kind == AST_BINOP) {
            check_num(scale->value->lhs, 1, "");
            check_num(scale->value->rhs, 255, "");
        }
    }

    check_num(b->entries[1].value, 64, "");
    /* optimizer = adamw(lr = 1e-3, weight_decay = 1e-4) */
    const AstExpr *opt = b->entries[3].value;
    if (check_call(opt, "adamw", 2)) {
        CHECK_STR(opt->args[0].key, "lr");
        check_num(opt->args[0].value, 1e-3, "");
        CHECK_STR(opt->args[1].key, "weight_decay");
        check_num(opt->args[1].value, 1e-4, "");
    }

    CHECK_EQ_INT(b->entries[5].value->kind, AST_NAME);
    CHECK_STR(b->entries[5].value->name, "fp16");
    check_num(b->entries[6].value, 1.0, "");
    CHECK_STR(b->entries[7].key, "seed");
    check_num(b->entries[7].value, 42, "");
}

/* docs/language.md's first file is models/mlp.net, verbatim. */
static void test_complete_example(void)
{
    int nerrors;
    Source *mlp = source_load(CGC_MODELS_DIR "/mlp.net");
    CHECK(mlp != NULL);
    if (!mlp) return;
    AstFile *f = parse_text(mlp->text, &nerrors);
    source_free(mlp);
    CHECK(f != NULL);
    CHECK_EQ_INT(nerrors, 0);
    if (!f) return;
    CHECK_EQ_INT(f->nblocks, 2);
    if (f->nblocks == 2) {
        check_model_block(&f->blocks[0]);
        check_train_block(&f->blocks[1]);
    }
    ast_free(f);
}

static void test_numbers_and_units(void)
{
    static const struct { const char *text; double value; const char *unit; } cases[] = {
        {"64", 64, ""},      {"0.5", 0.5, ""},    {"1e-3", 1e-3, ""}, {"2.5E+4", 2.5e4, ""},
        {"512MB", 512, "MB"}, {"1e-3x", 1e-3, "x"}, {"3GB", 3, "GB"},   {"7e5KB", 7e5, "KB"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int nerrors;
        AstExpr *e = parse_text_value(cases[i].text, &nerrors);
        CHECK(e != NULL);
        if (e) check_num(e, cases[i].value, cases[i].unit);
        ast_expr_free(e);
    }
    check_value_rejected("1e");
    check_value_rejected("1e+");
    check_value_rejected("1.");
    check_value_rejected("1e999");
}

static void test_strings(void)
{
    int nerrors;
    AstExpr *e = parse_text_value("\"a\\\"b\\\\c d\"", &nerrors);
    CHECK(e != NULL);
    if (e) {
        CHECK_EQ_INT(e->kind, AST_STR);
        CHECK_STR(e->str, "a\"b\\c d");
    }
    ast_expr_free(e);
    e = parse_text_value("\"\xc3\xa9t\xc3\xa9\"", &nerrors);  /* UTF-8 inside a string is fine */
    CHECK(e != NULL);
    if (e) CHECK_STR(e->str, "\xc3\xa9t\xc3\xa9");
    ast_expr_free(e);
    check_value_rejected("\"a\\nb\"");
    check_value_rejected("\"abc");
    check_value_rejected("\"abc\\\"");
    check_value_rejected("\"a\tb\x01\"");
}

static void test_precedence(void)
{
    int nerrors;
    /* 1 + 2 * 3: + at the root */
    AstExpr *e = parse_text_value("1 + 2 * 3", &nerrors);
    CHECK(e && e->kind == AST_BINOP && e->op == '+');
    if (e && check_binop(e)) CHECK(e->rhs->kind == AST_BINOP && e->rhs->op == '*');
    ast_expr_free(e);
    /* 1 - 2 - 3 is (1 - 2) - 3 */
    e = parse_text_value("1 - 2 - 3", &nerrors);
    CHECK(e && e->kind == AST_BINOP && e->op == '-' && e->lhs->kind == AST_BINOP);
    if (e && check_binop(e)) check_num(e->rhs, 3, "");
    ast_expr_free(e);
    /* -2 * 3 is (-2) * 3; the NEG's location is its '-' */
    e = parse_text_value("-2 * 3", &nerrors);
    CHECK(e && e->kind == AST_BINOP && e->op == '*' && e->lhs->kind == AST_NEG);
    if (e && check_binop(e)) CHECK_LOC(e->lhs->loc, 1, 1);
    ast_expr_free(e);
    /* (1 + 2) * 3 */
    e = parse_text_value("(1 + 2) * 3", &nerrors);
    CHECK(e && e->kind == AST_BINOP && e->op == '*' && e->lhs->kind == AST_BINOP && e->lhs->op == '+');
    if (e) CHECK_LOC(e->loc, 1, 9);
    ast_expr_free(e);
    e = parse_text_value("- - x", &nerrors);
    CHECK(e && e->kind == AST_NEG && e->lhs && e->lhs->kind == AST_NEG && e->lhs->lhs &&
          e->lhs->lhs->kind == AST_NAME);
    ast_expr_free(e);
}

static void test_calls_and_lists(void)
{
    int nerrors;
    AstExpr *e = parse_text_value("sgd(lr = 0.1)", &nerrors);
    CHECK(e != NULL);
    if (e && check_call(e, "sgd", 1)) {
        CHECK_STR(e->args[0].key, "lr");
        CHECK_LOC(e->args[0].key_loc, 1, 5);
    }
    ast_expr_free(e);
    /* keyword before positional is recorded in order; sema complains */
    e = parse_text_value("f(k = 1, a, [1, 2,],)", &nerrors);
    CHECK(e != NULL);
    if (e && check_call(e, "f", 3)) {
        CHECK_STR(e->args[0].key, "k");
        CHECK(e->args[1].key == NULL);
        const AstExpr *list = e->args[2].value;
        CHECK_EQ_INT(list->kind, AST_LIST);
        CHECK_EQ_INT(list->nargs, 2);
        CHECK_LOC(list->loc, 1, 13);
        if (list->nargs > 0) CHECK(list->args[0].key == NULL);
    }
    ast_expr_free(e);
    e = parse_text_value("reshape(x, [-1, 784])", &nerrors);
    CHECK(e != NULL);
    if (e && check_call(e, "reshape", 2)) {
        const AstExpr *list = e->args[1].value;
        CHECK(list->kind == AST_LIST && list->nargs == 2);
        if (list->kind == AST_LIST && list->nargs == 2) CHECK_EQ_INT(list->args[0].value->kind, AST_NEG);
    }
    ast_expr_free(e);
    e = parse_text_value("f()", &nerrors);
    CHECK(e && e->kind == AST_CALL && e->nargs == 0);
    ast_expr_free(e);
    check_value_rejected("1 2");       /* trailing garbage */
    check_value_rejected("adam(lr = 3e-4");
    check_value_rejected("");
    check_value_rejected("f(a = )");
}

/* Columns count characters: a tab is one, a UTF-8 character is one. */
static void test_locations(void)
{
    int nerrors;
    AstFile *f = parse_text("model m {\n\tx = \"\xc3\xa9\" + y\n}", &nerrors);
    CHECK(f != NULL);
    if (f && f->nblocks == 1 && f->blocks[0].nstmts == 1) {
        const AstExpr *e = f->blocks[0].stmts[0].expr;
        CHECK_LOC(f->blocks[0].stmts[0].loc, 2, 2);
        if (check_binop(e)) {
            CHECK_LOC(e->loc, 2, 10);
            CHECK_LOC(e->lhs->loc, 2, 6);
            CHECK_LOC(e->rhs->loc, 2, 12);
        }
    }
    ast_free(f);
    /* A call spanning lines: newlines inside ( ) do not end the statement. */
    f = parse_text("model m {\n  y = f(a,\n        b)\n  loss y\n}\n", &nerrors);
    CHECK(f != NULL);
    if (f && f->nblocks == 1 && f->blocks[0].nstmts == 2 && check_call(f->blocks[0].stmts[0].expr, "f", 2))
        CHECK_LOC(f->blocks[0].stmts[0].expr->args[1].value->loc, 3, 9);
    ast_free(f);
}

static void test_file_shapes(void)
{
    int nerrors;
    AstFile *f = parse_text("", &nerrors);
    CHECK(f != NULL && f->nblocks == 0);
    ast_free(f);
    f = parse_text("# only a comment\n\n   # and another", &nerrors);
    CHECK(f != NULL && f->nblocks == 0);
    ast_free(f);
    /* no newline at the end; a one-line block; an empty train block */
    f = parse_text("model m { loss x }\ntrain {}", &nerrors);
    CHECK(f != NULL);
    if (f) {
        CHECK_EQ_INT(f->nblocks, 2);
        if (f->nblocks == 2) {
            CHECK_EQ_INT(f->blocks[0].nstmts, 1);
            CHECK_EQ_INT(f->blocks[1].nentries, 0);
        }
    }
    ast_free(f);
    f = parse_text("model m {\r\n  x = 1\r\n}\r\n", &nerrors);  /* CRLF line ends */
    CHECK(f != NULL && f->nblocks == 1);
    ast_free(f);
    check_file_rejected("model m {\n  x = 1\n} train {\n}\n");
    check_file_rejected("model m {\n  x = 1\n");
    check_file_rejected("model m {\n  input x: f32[N, 1, 2, 3, 4, 5, 6, 7, 8]\n}\n");
    check_file_rejected("model m {\n  input x: f32[2KB]\n}\n");
    check_file_rejected("model m {\n  x = 1\r}\n");
}

static char *repeat(const char *head, const char *unit, int n, const char *tail)
{
    size_t lh = strlen(head), lu = strlen(unit), lt = strlen(tail);
    char *s = malloc(lh + lu * (size_t)n + lt + 1), *p = s;
    memcpy(p, head, lh);
    p += lh;
    for (int i = 0; i < n; i++, p += lu) memcpy(p, unit, lu);
    memcpy(p, tail, lt + 1);
    return s;
}

/* Parses TEXT as a value; checks it is accepted iff OK. */
static void check_value_accepted(char *text, int ok)
{
    int nerrors;
    AstExpr *e = parse_text_value(text, &nerrors);
    CHECK_EQ_INT(e != NULL, ok);
    CHECK_EQ_INT(nerrors, !ok);
    ast_expr_free(e);
    free(text);
}

static void test_limits(void)
{
    /* AST_MAX_NESTING levels of brackets and unary minus are fine, one more is not */
    char *open = repeat("", "(", AST_MAX_NESTING, "1");
    char *close = repeat(open, ")", AST_MAX_NESTING, "");
    free(open);
    check_value_accepted(close, 1);
    open = repeat("", "(", AST_MAX_NESTING + 1, "1");
    check_value_accepted(open, 0);
    check_value_accepted(repeat("", "-", AST_MAX_NESTING, "1"), 1);
    check_value_accepted(repeat("", "-", AST_MAX_NESTING + 1, "1"), 0);
    check_value_accepted(repeat("", "-(", AST_MAX_NESTING / 2 + 1, "1"), 0);
    check_value_accepted(repeat("", "[", 100000, ""), 0);
    /* operands of a sum are not nested: many of them are fine, up to the tree limit */
    check_value_accepted(repeat("1", " + -1", 999, ""), 1);
    check_value_accepted(repeat("1", "+1", 1000, ""), 1);
    check_value_accepted(repeat("1", "+1", 1001, ""), 0);
    /* long tokens */
    check_value_accepted(repeat("", "a", AST_MAX_TOKEN_BYTES, ""), 1);
    check_value_accepted(repeat("", "a", AST_MAX_TOKEN_BYTES + 1, ""), 0);
    check_value_accepted(repeat("\"", "s", AST_MAX_TOKEN_BYTES + 1, "\""), 0);
    check_value_accepted(repeat("", "9", AST_MAX_TOKEN_BYTES + 1, ""), 0);
    /* many arguments are a flat list */
    check_value_accepted(repeat("f(0", ", 1", 100000, ")"), 1);
}

int main(void)
{
    test_complete_example();
    test_numbers_and_units();
    test_strings();
    test_precedence();
    test_calls_and_lists();
    test_locations();
    test_file_shapes();
    test_limits();
    return check_result();
}
