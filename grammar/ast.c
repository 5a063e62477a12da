/* ast.c: building and freeing the syntax tree, and the two ways into the parser.
 *
 * parse_file and parse_value run the same bison parser (grammar/parser.y) over the same
 * flex lexer (grammar/lexer.l); a first pseudo-token tells the grammar whether it is
 * reading a whole file or a single expression given on the command line. The
 * constructors are declared in the parser's header (parser.h), the private interface of
 * the front end; they take ownership of the strings and subtrees they are given, so the
 * parser's actions never copy.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"
#include "parser.h"

/* --- constructors --- */

static AstExpr *expr_new(AstExprKind kind, SrcLoc loc)
{
    AstExpr *e = xcalloc(1, sizeof *e);
    e->kind = kind;
    e->loc = loc;
    return e;
}

AstExpr *ast_num(SrcLoc loc, double value, char *unit)
{
    AstExpr *e = expr_new(AST_NUM, loc);
    e->num = value;
    e->unit = unit ? unit : xstrdup("");
    return e;
}

AstExpr *ast_str(SrcLoc loc, char *str)
{
    AstExpr *e = expr_new(AST_STR, loc);
    e->str = str;
    return e;
}

AstExpr *ast_name(SrcLoc loc, char *name)
{
    AstExpr *e = expr_new(AST_NAME, loc);
    e->name = name;
    return e;
}

AstExpr *ast_call(SrcLoc loc, char *name, AstArg *args, int nargs)
{
    AstExpr *e = expr_new(AST_CALL, loc);
    e->name = name;
    e->args = args;
    e->nargs = nargs;
    return e;
}

AstExpr *ast_list(SrcLoc loc, AstArg *items, int nitems)
{
    AstExpr *e = expr_new(AST_LIST, loc);
    e->args = items;
    e->nargs = nitems;
    return e;
}

AstExpr *ast_binop(SrcLoc loc, int op, AstExpr *lhs, AstExpr *rhs)
{
    CGC_ASSERT(op == '+' || op == '-' || op == '*' || op == '/');
    AstExpr *e = expr_new(AST_BINOP, loc);
    e->op = op;
    e->lhs = lhs;
    e->rhs = rhs;
    return e;
}

AstExpr *ast_neg(SrcLoc loc, AstExpr *operand)
{
    AstExpr *e = expr_new(AST_NEG, loc);
    e->lhs = operand;
    return e;
}

/* Capacity is implicit: the next power of two at or above N, so growing when N reaches
 * one keeps appends amortised O(1) without storing a capacity beside every array. */
void *ast_grow(void *items, int n, size_t size)
{
    CGC_ASSERT(n >= 0 && n < INT_MAX / 2);
    if (n != 0 && (n & (n - 1)) != 0) return items;
    size_t cap = n == 0 ? 1 : 2 * (size_t)n;
    return xrealloc(items, cap * size);
}

/* --- freeing --- */

void ast_args_free(AstArg *args, int nargs)
{
    for (int i = 0; i < nargs; i++) {
        free(args[i].key);
        ast_expr_free(args[i].value);
    }
    free(args);
}

/* Recursion depth is bounded by the parser's limits on nesting and tree depth. */
void ast_expr_free(AstExpr *e)
{
    if (!e) return;
    free(e->unit);
    free(e->str);
    free(e->name);
    ast_expr_free(e->lhs);
    ast_expr_free(e->rhs);
    ast_args_free(e->args, e->nargs);
    free(e);
}

void ast_type_free(AstType *type)
{
    free(type->dtype);
    for (int i = 0; i < type->ndims; i++) free(type->dims[i].sym);
    free(type->dims);
}

void ast_stmt_free(AstStmt *stmt)
{
    free(stmt->name);
    ast_type_free(&stmt->type);
    ast_expr_free(stmt->expr);
}

void ast_entry_free(AstEntry *entry)
{
    free(entry->key);
    ast_expr_free(entry->value);
}

void ast_block_free(AstBlock *block)
{
    free(block->name);
    for (int i = 0; i < block->nstmts; i++) ast_stmt_free(&block->stmts[i]);
    free(block->stmts);
    for (int i = 0; i < block->nentries; i++) ast_entry_free(&block->entries[i]);
    free(block->entries);
}

void ast_free(AstFile *file)
{
    if (!file) return;
    for (int i = 0; i < file->nblocks; i++) ast_block_free(&file->blocks[i]);
    free(file->blocks);
    free(file);
}

/* --- parsing --- */

/* Runs the parser over SRC's whole text; START says what the text is. False after a
 * diagnostic. */
static bool parse(Source *src, int start, ParseOut *out)
{
    if (src->len > INT_MAX - 2) {  /* flex counts in int */
        diag_error(src, (SrcLoc){0, 0}, "file too large (%zu bytes)", src->len);
        return false;
    }
    LexState st = {.src = src, .start_token = start};
    yyscan_t scanner = lex_open(&st, src->text, src->len);
    int errors_before = src->nerrors;
    int status = yyparse(scanner, out);
    lex_close(scanner);
    if (status == 0) return true;
    CGC_ASSERT(src->nerrors > errors_before);  /* every failed parse says why */
    return false;
}

AstFile *parse_file(Source *src)
{
    ParseOut out = {0};
    return parse(src, START_FILE, &out) ? out.file : NULL;
}

AstExpr *parse_value(Source *src)
{
    ParseOut out = {0};
    return parse(src, START_VALUE, &out) ? out.value : NULL;
}
