/* ast.h: the syntax tree the parser (grammar/parser.y) builds and sema reads.
 *
 * The tree is exactly what the file says, nothing resolved: names are strings, types
 * are names, numbers are doubles. Every node keeps the location of the token that an
 * error about it should point at (see each field's comment).
 */
#ifndef CGC_AST_H
#define CGC_AST_H

#include "../base/diag.h"

typedef enum AstExprKind {
    AST_NUM,    /* 64, 1e-3, 512MB: num, unit ("" or the letters glued to the number) */
    AST_STR,    /* "fashion-mnist": str (escapes already resolved) */
    AST_NAME,   /* h1, true: name */
    AST_CALL,   /* f(a, key = v): name, args */
    AST_BINOP,  /* a + b: op is one of '+' '-' '*' '/', lhs, rhs; loc is the operator */
    AST_NEG,    /* -a: lhs; loc is the '-' */
    AST_LIST,   /* [a, b]: items in args (keys NULL); loc is the '[' */
} AstExprKind;

typedef struct AstExpr AstExpr;

typedef struct AstArg {
    char *key;          /* NULL for a positional argument */
    SrcLoc key_loc;     /* the key token, when there is one */
    AstExpr *value;
} AstArg;

struct AstExpr {
    AstExprKind kind;
    SrcLoc loc;         /* the token an error about this expression points at */
    double num;         /* AST_NUM */
    char *unit;         /* AST_NUM: suffix letters, "" when none */
    char *str;          /* AST_STR */
    char *name;         /* AST_NAME, AST_CALL */
    int op;             /* AST_BINOP */
    AstExpr *lhs, *rhs; /* AST_BINOP, AST_NEG (lhs) */
    AstArg *args;       /* AST_CALL, AST_LIST */
    int nargs;
};

/* One dimension of an input type: a positive integer or a symbol. */
typedef struct AstDim {
    char *sym;          /* NULL for a number */
    double value;       /* when sym is NULL; sema checks it is a positive integer */
    SrcLoc loc;
} AstDim;

typedef struct AstType {
    char *dtype;        /* as written; sema checks f32 f16 bf16 i32 */
    SrcLoc dtype_loc;
    AstDim *dims;
    int ndims;
} AstType;

typedef enum AstStmtKind {
    STMT_INPUT,   /* input NAME: TYPE */
    STMT_BIND,    /* NAME = EXPR */
    STMT_OUTPUT,  /* output NAME */
    STMT_LOSS,    /* loss EXPR */
} AstStmtKind;

typedef struct AstStmt {
    AstStmtKind kind;
    SrcLoc loc;         /* the statement's first token */
    char *name;         /* INPUT, BIND, OUTPUT */
    SrcLoc name_loc;
    AstType type;       /* INPUT */
    AstExpr *expr;      /* BIND, LOSS */
} AstStmt;

/* `KEY = VALUE` inside train { }. */
typedef struct AstEntry {
    char *key;
    SrcLoc key_loc;
    AstExpr *value;
} AstEntry;

typedef enum AstBlockKind { BLOCK_MODEL, BLOCK_TRAIN } AstBlockKind;

typedef struct AstBlock {
    AstBlockKind kind;
    SrcLoc loc;         /* the `model` / `train` keyword */
    char *name;         /* model name; NULL for train */
    SrcLoc name_loc;
    AstStmt *stmts;     /* BLOCK_MODEL */
    int nstmts;
    AstEntry *entries;  /* BLOCK_TRAIN */
    int nentries;
} AstBlock;

/* A whole file: its blocks in source order. Sema checks there is exactly one model
 * block and at most one train block. */
typedef struct AstFile {
    AstBlock *blocks;
    int nblocks;
} AstFile;

/* grammar/parser.y: parses SRC. On any syntax error, reports it through diag_error and
 * returns NULL (src->nerrors > 0). Never crashes, whatever the bytes. */
AstFile *parse_file(Source *src);
void ast_free(AstFile *file);
/* Parses SRC's whole text as one expression (a command-line value such as "adam(lr =
 * 3e-4)" or "512MB", given with the flag's name as the source path). NULL after a
 * diagnostic. */
AstExpr *parse_value(Source *src);
void ast_expr_free(AstExpr *e);

/* Limits that keep hostile input from exhausting the stack or memory; exceeding one is a
 * diagnostic at the token where it happens. */
enum {
    AST_MAX_NESTING = 200,       /* brackets and unary minus nested */
    AST_MAX_TOKEN_BYTES = 4096,  /* one identifier, number or string */
    AST_MAX_DIMS = 8,            /* dimensions of an input type: IR_MAX_RANK (sema.c checks) */
    /* Operations on a path through one expression's tree: long chains like a+b+c+... grow
     * the tree but not the nesting the lexer counts, and the passes over it recurse. */
    AST_MAX_EXPR_DEPTH = 1000,
};

#endif
