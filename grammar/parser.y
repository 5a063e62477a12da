/* parser.y: the .net grammar (docs/language.md, "Grammar"), building the AST of ast.h.
 *
 * A pure, LALR(1) parser with look-ahead correction (parse.lac full), so that the
 * "expected ..." part of a message lists exactly the tokens that could come next. The
 * first syntax error is reported through diag_error and parsing stops: one clear message
 * beats a cascade. Token aliases ("end of line", "(") make messages read naturally.
 *
 * Expressions cannot overflow anything: the lexer refuses brackets and unary minus nested
 * more than AST_MAX_NESTING deep, which bounds bison's stack (each nesting level holds at
 * most a dozen states, far below YYMAXDEPTH), and every expression value carries the
 * depth of its tree so that long operator chains, which the stack does not see, are
 * refused before the recursive passes after us (sema, ast_expr_free) could overflow.
 *
 * Every rule's action owns what it builds; %destructor frees what an aborted parse leaves
 * on the stack, so errors do not leak.
 */

%code requires {
#include <stdbool.h>

#include "ast.h"

#ifndef YY_TYPEDEF_YY_SCANNER_T
#define YY_TYPEDEF_YY_SCANNER_T
typedef void *yyscan_t;
#endif

/* Semantic values. Expression values carry their tree depth, the number of operations
 * (operators, calls, lists) on the longest path down; a leaf's is 0. */
typedef struct NumTok { double value; char *unit; } NumTok;
typedef struct ExprVal { AstExpr *e; int depth; } ExprVal;
typedef struct ArgVal { AstArg arg; int depth; } ArgVal;
typedef struct ArgsVal { AstArg *v; int n; int depth; } ArgsVal;
typedef struct StmtsVal { AstStmt *v; int n; } StmtsVal;
typedef struct EntriesVal { AstEntry *v; int n; } EntriesVal;

/* An open '(' or '[' the lexer is inside of. */
typedef struct LexBracket {
    char open;
    SrcLoc loc;
    int nest_after;     /* the nesting level once it closes */
} LexBracket;

/* The lexer's state, shared with the parser (for messages) and parse_file. */
typedef struct LexState {
    Source *src;
    int start_token;          /* START_FILE or START_VALUE, returned first */
    int line, col;            /* position of the next byte */
    LexBracket brackets[AST_MAX_NESTING];
    int nbrackets;
    LexBracket closed;        /* the bracket the last token closed; open is 0 if none */
    int nest;                 /* open brackets plus pending unary minuses */
    int minus_run;            /* unary minuses not yet closed by an operand's end */
    int nbraces;              /* open '{' and where the last one was */
    SrcLoc brace_loc;
    int prev_kind, cur_kind;  /* the last two tokens returned, for messages */
    SrcLoc prev_loc, cur_loc;
    char prev_text[48], cur_text[48];
    bool failed;              /* the lexer reported an error */
} LexState;

/* What a parse produced: a file or a value (the other stays NULL). */
typedef struct ParseOut {
    AstFile *file;
    AstExpr *value;
} ParseOut;
}

%code provides {
/* grammar/lexer.l */
int yylex(YYSTYPE *yylval, YYLTYPE *yylloc, yyscan_t scanner);
yyscan_t lex_open(LexState *st, const char *text, size_t len);
void lex_close(yyscan_t scanner);
LexState *lex_state(yyscan_t scanner);

/* grammar/ast.c: constructors the parser uses; they take ownership of their strings
 * and subtrees. */
AstExpr *ast_num(SrcLoc loc, double value, char *unit);
AstExpr *ast_str(SrcLoc loc, char *str);
AstExpr *ast_name(SrcLoc loc, char *name);
AstExpr *ast_call(SrcLoc loc, char *name, AstArg *args, int nargs);
AstExpr *ast_list(SrcLoc loc, AstArg *items, int nitems);
AstExpr *ast_binop(SrcLoc loc, int op, AstExpr *lhs, AstExpr *rhs);
AstExpr *ast_neg(SrcLoc loc, AstExpr *operand);
/* Grows an array of N elements so that one more fits (capacity doubles). */
void *ast_grow(void *items, int n, size_t size);
void ast_args_free(AstArg *args, int nargs);
void ast_type_free(AstType *type);
void ast_stmt_free(AstStmt *stmt);
void ast_entry_free(AstEntry *entry);
void ast_block_free(AstBlock *block);
}

%code {
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bison's stack is bounded by the lexer's nesting limit (see the file comment). */
#define YYMAXDEPTH 10000

static void yyerror(YYLTYPE *loc, yyscan_t scanner, ParseOut *out, const char *msg);
static SrcLoc at(YYLTYPE loc) { return (SrcLoc){loc.first_line, loc.first_column}; }
static bool too_deep(yyscan_t scanner, int depth, YYLTYPE loc);
/* In an action: refuses the expression value V (freeing it) if its tree is too deep. */
#define LIMIT_DEPTH(v, loc)                                                             \
    do {                                                                                \
        if (too_deep(scanner, (v).depth, (loc))) {                                      \
            ast_expr_free((v).e);                                                       \
            YYABORT;                                                                    \
        }                                                                               \
    } while (0)
static ExprVal binop(int op, YYLTYPE loc, ExprVal lhs, ExprVal rhs);
static ArgsVal args_push(ArgsVal list, AstArg arg, int depth);
static AstType dims_push(yyscan_t scanner, AstType type, AstDim dim, YYLTYPE loc, bool *ok);
static AstFile *file_push(AstFile *file, AstBlock block);
static StmtsVal stmts_push(StmtsVal list, AstStmt stmt);
static EntriesVal entries_push(EntriesVal list, AstEntry entry);
}

%define api.pure full
%locations
%define parse.error custom
%define parse.lac full
%expect 0
%lex-param {yyscan_t scanner}
%parse-param {yyscan_t scanner} {ParseOut *out}

%union {
    char *text;
    NumTok num;
    ExprVal expr;
    ArgVal arg;
    ArgsVal args;
    AstDim dim;
    AstType type;
    AstStmt stmt;
    StmtsVal stmts;
    AstEntry entry;
    EntriesVal entries;
    AstBlock block;
    AstFile *file;
}

/* Returned once, first, to choose what is parsed: a file or a single value. */
%token START_FILE "start of file" START_VALUE "start of value"
%token END 0 "end of file"
%token NEWLINE "end of line"
%token <text> NAME "name"
%token <num> NUM "number"
%token <text> STRING "string"
%token MODEL "model" TRAIN "train" INPUT "input" OUTPUT "output" LOSS "loss"
%token LBRACE "{" RBRACE "}" LPAREN "(" RPAREN ")" LBRACKET "[" RBRACKET "]"
%token COMMA "," COLON ":" ASSIGN "=" PLUS "+" MINUS "-" STAR "*" SLASH "/"

%type <file> file blocks
%type <block> block
%type <stmts> body stmts
%type <stmt> stmt
%type <type> type dims
%type <dim> dim
%type <entries> entries_body entries
%type <entry> entry
%type <expr> expr primary value
%type <args> args_opt args items_opt items
%type <arg> arg

%destructor { free($$); } <text>
%destructor { free($$.unit); } <num>
%destructor { ast_expr_free($$.e); } <expr>
%destructor { free($$.arg.key); ast_expr_free($$.arg.value); } <arg>
%destructor { ast_args_free($$.v, $$.n); } <args>
%destructor { free($$.sym); } <dim>
%destructor { ast_type_free(&$$); } <type>
%destructor { ast_stmt_free(&$$); } <stmt>
%destructor { for (int i = 0; i < $$.n; i++) ast_stmt_free(&$$.v[i]); free($$.v); } <stmts>
%destructor { ast_entry_free(&$$); } <entry>
%destructor { for (int i = 0; i < $$.n; i++) ast_entry_free(&$$.v[i]); free($$.v); } <entries>
%destructor { ast_block_free(&$$); } <block>
%destructor { ast_free($$); } <file>

%left "+" "-"
%left "*" "/"
%precedence UMINUS

%%

/* start = START_FILE file | START_VALUE value */
start
    : START_FILE file           { out->file = $2; }
    | START_VALUE value         { out->value = $2.e; }
    ;

/* file = nls? (block (nls block)* nls?)? */
file
    : nls_opt                   { $$ = xcalloc(1, sizeof(AstFile)); }
    | nls_opt blocks nls_opt    { $$ = $2; }
    ;

blocks
    : block                     { $$ = file_push(xcalloc(1, sizeof(AstFile)), $1); }
    | blocks nls block          { $$ = file_push($1, $3); }
    ;

/* block = "model" NAME "{" body "}" | "train" "{" entries_body "}" */
block
    : MODEL NAME "{" body "}" {
        $$ = (AstBlock){.kind = BLOCK_MODEL, .loc = at(@1), .name = $2, .name_loc = at(@2),
                        .stmts = $4.v, .nstmts = $4.n};
    }
    | TRAIN "{" entries_body "}" {
        $$ = (AstBlock){.kind = BLOCK_TRAIN, .loc = at(@1), .entries = $3.v,
                        .nentries = $3.n};
    }
    ;

/* body = nls? (stmt (nls stmt)* nls?)? */
body
    : nls_opt                   { $$ = (StmtsVal){0}; }
    | nls_opt stmts nls_opt     { $$ = $2; }
    ;

stmts
    : stmt                      { $$ = stmts_push((StmtsVal){0}, $1); }
    | stmts nls stmt            { $$ = stmts_push($1, $3); }
    ;

/* stmt = "input" NAME ":" type | NAME "=" expr | "output" NAME | "loss" expr */
stmt
    : INPUT NAME ":" type {
        $$ = (AstStmt){.kind = STMT_INPUT, .loc = at(@1), .name = $2, .name_loc = at(@2),
                       .type = $4};
    }
    | NAME "=" expr {
        $$ = (AstStmt){.kind = STMT_BIND, .loc = at(@1), .name = $1, .name_loc = at(@1),
                       .expr = $3.e};
    }
    | OUTPUT NAME {
        $$ = (AstStmt){.kind = STMT_OUTPUT, .loc = at(@1), .name = $2, .name_loc = at(@2)};
    }
    | LOSS expr {
        $$ = (AstStmt){.kind = STMT_LOSS, .loc = at(@1), .expr = $2.e};
    }
    ;

/* type = NAME "[" dim ("," dim)* "]" */
type
    : NAME "[" dims "]"         { $$ = $3; $$.dtype = $1; $$.dtype_loc = at(@1); }
    ;

dims
    : dim {
        bool ok;
        $$ = dims_push(scanner, (AstType){0}, $1, @1, &ok);
        (void)ok;  /* one dimension always fits */
    }
    | dims "," dim {
        bool ok;
        $$ = dims_push(scanner, $1, $3, @3, &ok);
        if (!ok) YYABORT;
    }
    ;

/* dim = NUMBER | NAME */
dim
    : NUM {
        bool has_unit = $1.unit[0] != '\0';
        if (has_unit)
            diag_error(lex_state(scanner)->src, at(@1), "a dimension cannot have a unit ('%s')",
                       diag_quote($1.unit, 32));
        free($1.unit);
        if (has_unit) YYABORT;
        $$ = (AstDim){.value = $1.value, .loc = at(@1)};
    }
    | NAME                      { $$ = (AstDim){.sym = $1, .loc = at(@1)}; }
    ;

/* entries_body = nls? (entry (nls entry)* nls?)? */
entries_body
    : nls_opt                   { $$ = (EntriesVal){0}; }
    | nls_opt entries nls_opt   { $$ = $2; }
    ;

entries
    : entry                     { $$ = entries_push((EntriesVal){0}, $1); }
    | entries nls entry         { $$ = entries_push($1, $3); }
    ;

/* entry = NAME "=" expr */
entry
    : NAME "=" expr             { $$ = (AstEntry){.key = $1, .key_loc = at(@1), .value = $3.e}; }
    ;

/* value = expr   (a command-line value) */
value
    : expr
    ;

/* expr = expr ("+" | "-" | "*" | "/") expr | "-" expr | primary */
expr
    : expr "+" expr             { $$ = binop('+', @2, $1, $3); LIMIT_DEPTH($$, @2); }
    | expr "-" expr             { $$ = binop('-', @2, $1, $3); LIMIT_DEPTH($$, @2); }
    | expr "*" expr             { $$ = binop('*', @2, $1, $3); LIMIT_DEPTH($$, @2); }
    | expr "/" expr             { $$ = binop('/', @2, $1, $3); LIMIT_DEPTH($$, @2); }
    | "-" expr %prec UMINUS     { $$ = (ExprVal){ast_neg(at(@1), $2.e), $2.depth + 1}; LIMIT_DEPTH($$, @1); }
    | primary
    ;

/* primary = NUMBER | STRING | NAME | NAME "(" args? ")" | "(" expr ")" | "[" items? "]" */
primary
    : NUM                       { $$ = (ExprVal){ast_num(at(@1), $1.value, $1.unit), 0}; }
    | STRING                    { $$ = (ExprVal){ast_str(at(@1), $1), 0}; }
    | NAME                      { $$ = (ExprVal){ast_name(at(@1), $1), 0}; }
    | NAME "(" args_opt ")" {
        $$ = (ExprVal){ast_call(at(@1), $1, $3.v, $3.n), $3.depth + 1};
        LIMIT_DEPTH($$, @1);
    }
    | "(" expr ")"              { $$ = $2; }
    | "[" items_opt "]" {
        $$ = (ExprVal){ast_list(at(@1), $2.v, $2.n), $2.depth + 1};
        LIMIT_DEPTH($$, @1);
    }
    ;

/* args = arg ("," arg)* ","?   (positional before keyword is sema's concern) */
args_opt
    : %empty                    { $$ = (ArgsVal){0}; }
    | args
    | args ","
    ;

args
    : arg                       { $$ = args_push((ArgsVal){0}, $1.arg, $1.depth); }
    | args "," arg              { $$ = args_push($1, $3.arg, $3.depth); }
    ;

/* arg = expr | NAME "=" expr */
arg
    : expr                      { $$ = (ArgVal){{.value = $1.e}, $1.depth}; }
    | NAME "=" expr             { $$ = (ArgVal){{.key = $1, .key_loc = at(@1), .value = $3.e}, $3.depth}; }
    ;

/* items = expr ("," expr)* ","? */
items_opt
    : %empty                    { $$ = (ArgsVal){0}; }
    | items
    | items ","
    ;

items
    : expr                      { $$ = args_push((ArgsVal){0}, (AstArg){.value = $1.e}, $1.depth); }
    | items "," expr            { $$ = args_push($1, (AstArg){.value = $3.e}, $3.depth); }
    ;

/* nls = NEWLINE+ */
nls_opt
    : %empty
    | nls
    ;

nls
    : NEWLINE
    | nls NEWLINE
    ;

%%

/* --- building values --- */

static bool too_deep(yyscan_t scanner, int depth, YYLTYPE loc)
{
    if (depth <= AST_MAX_EXPR_DEPTH) return false;
    diag_error(lex_state(scanner)->src, at(loc), "expression too deep (more than %d nested "
               "operations); split it over several statements", AST_MAX_EXPR_DEPTH);
    return true;
}

static ExprVal binop(int op, YYLTYPE loc, ExprVal lhs, ExprVal rhs)
{
    int depth = (lhs.depth > rhs.depth ? lhs.depth : rhs.depth) + 1;
    return (ExprVal){ast_binop(at(loc), op, lhs.e, rhs.e), depth};
}

static ArgsVal args_push(ArgsVal list, AstArg arg, int depth)
{
    list.v = ast_grow(list.v, list.n, sizeof *list.v);
    list.v[list.n++] = arg;
    if (depth > list.depth) list.depth = depth;
    return list;
}

/* Appends DIM unless the type already has AST_MAX_DIMS (then *OK is false and DIM and
 * TYPE are freed, ready for YYABORT). */
static AstType dims_push(yyscan_t scanner, AstType type, AstDim dim, YYLTYPE loc, bool *ok)
{
    *ok = type.ndims < AST_MAX_DIMS;
    if (!*ok) {
        diag_error(lex_state(scanner)->src, at(loc), "too many dimensions: an input has at "
                   "most %d; merge some of them into one", AST_MAX_DIMS);
        free(dim.sym);
        ast_type_free(&type);
        return (AstType){0};
    }
    type.dims = ast_grow(type.dims, type.ndims, sizeof *type.dims);
    type.dims[type.ndims++] = dim;
    return type;
}

static StmtsVal stmts_push(StmtsVal list, AstStmt stmt)
{
    list.v = ast_grow(list.v, list.n, sizeof *list.v);
    list.v[list.n++] = stmt;
    return list;
}

static EntriesVal entries_push(EntriesVal list, AstEntry entry)
{
    list.v = ast_grow(list.v, list.n, sizeof *list.v);
    list.v[list.n++] = entry;
    return list;
}

static AstFile *file_push(AstFile *file, AstBlock block)
{
    file->blocks = ast_grow(file->blocks, file->nblocks, sizeof *file->blocks);
    file->blocks[file->nblocks++] = block;
    return file;
}

/* --- syntax errors ---
 * Messages quote tokens with single quotes, as the lexer's do: "unexpected '=', expected
 * ')' or ','". Groups of tokens that all start one thing read as that thing ("an
 * expression", "a statement"). */

enum { MAX_LISTED = 6 };

static bool expects(const yysymbol_kind_t *v, int n, yysymbol_kind_t kind)
{
    for (int i = 0; i < n; i++)
        if (v[i] == kind) return true;
    return false;
}

/* A token kind as messages name it: punctuation and keywords quoted as written. */
static const char *symbol_desc(yysymbol_kind_t kind, char *buf, size_t size)
{
    switch (kind) {
    case YYSYMBOL_NAME: return "name";
    case YYSYMBOL_NUM: return "number";
    case YYSYMBOL_STRING: return "string";
    case YYSYMBOL_NEWLINE: return "end of line";
    case YYSYMBOL_YYEOF: return "end of file";
    default: snprintf(buf, size, "'%s'", yysymbol_name(kind)); return buf;
    }
}

/* The token the parser choked on, as written where that helps. */
static void describe_unexpected(const LexState *st, yysymbol_kind_t kind, char *buf,
                                size_t size)
{
    switch (kind) {
    case YYSYMBOL_NAME:
    case YYSYMBOL_NUM: snprintf(buf, size, "'%s'", st->cur_text); break;
    case YYSYMBOL_STRING: snprintf(buf, size, "string %s", st->cur_text); break;
    default: {
        char name[32];
        snprintf(buf, size, "%s", symbol_desc(kind, name, sizeof name));
        break;
    }
    }
}

/* Removes the kinds in GROUP from V when all of KEY are there; true if it did. */
static bool take_group(yysymbol_kind_t *v, int *n, const yysymbol_kind_t *key, int nkey,
                       const yysymbol_kind_t *group, int ngroup)
{
    for (int i = 0; i < nkey; i++)
        if (!expects(v, *n, key[i])) return false;
    int kept = 0;
    for (int i = 0; i < *n; i++)
        if (!expects(group, ngroup, v[i])) v[kept++] = v[i];
    *n = kept;
    return true;
}

/* Appends ", expected A, B or C" to MSG, or nothing when the list would be too long to
 * help. Tokens that start an expression or a statement read as "an expression" and "a
 * statement"; binary operators (and the '(' of a call) as "an operator", listed last. */
static void append_expected(char *msg, size_t size, yysymbol_kind_t *v, int n)
{
    static const yysymbol_kind_t expr_key[] = {YYSYMBOL_NUM, YYSYMBOL_NAME, YYSYMBOL_LPAREN,
                                               YYSYMBOL_MINUS};
    static const yysymbol_kind_t expr_group[] = {YYSYMBOL_NUM, YYSYMBOL_STRING, YYSYMBOL_NAME,
                                                 YYSYMBOL_LPAREN, YYSYMBOL_LBRACKET,
                                                 YYSYMBOL_MINUS};
    static const yysymbol_kind_t stmt_key[] = {YYSYMBOL_NAME, YYSYMBOL_INPUT, YYSYMBOL_OUTPUT,
                                               YYSYMBOL_LOSS};
    static const yysymbol_kind_t op_key[] = {YYSYMBOL_PLUS, YYSYMBOL_MINUS, YYSYMBOL_STAR,
                                             YYSYMBOL_SLASH};
    static const yysymbol_kind_t op_group[] = {YYSYMBOL_PLUS, YYSYMBOL_MINUS, YYSYMBOL_STAR,
                                               YYSYMBOL_SLASH, YYSYMBOL_LPAREN};
    const char *names[YYNTOKENS + 3];
    char bufs[YYNTOKENS][32];
    int count = 0;
    if (take_group(v, &n, expr_key, 4, expr_group, 6)) names[count++] = "an expression";
    if (take_group(v, &n, stmt_key, 4, stmt_key, 4)) names[count++] = "a statement";
    bool operators = take_group(v, &n, op_key, 4, op_group, 5);
    for (int i = 0; i < n; i++) names[count++] = symbol_desc(v[i], bufs[i], sizeof bufs[i]);
    if (operators) names[count++] = "an operator";
    if (count > MAX_LISTED || count == 0) return;
    size_t len = strlen(msg);
    for (int i = 0; i < count && len < size; i++) {
        const char *sep = i == 0 ? ", expected " : i == count - 1 ? " or " : ", ";
        len += (size_t)snprintf(msg + len, size - len, "%s%s", sep, names[i]);
    }
}

static bool is_keyword(int kind)
{
    return kind == MODEL || kind == TRAIN || kind == INPUT || kind == OUTPUT || kind == LOSS;
}

static bool is_keyword_symbol(yysymbol_kind_t kind)
{
    return kind == YYSYMBOL_MODEL || kind == YYSYMBOL_TRAIN || kind == YYSYMBOL_INPUT ||
           kind == YYSYMBOL_OUTPUT || kind == YYSYMBOL_LOSS;
}

/* `input = 3`, `model loss {`: a keyword where a name belongs. */
static bool report_keyword_as_name(LexState *st, yysymbol_kind_t got,
                                   const yysymbol_kind_t *v, int n)
{
    bool name_wanted = expects(v, n, YYSYMBOL_NAME);
    if (is_keyword_symbol(got) && name_wanted) {
        diag_error(st->src, st->cur_loc, "'%s' is a keyword and cannot be used as a name",
                   st->cur_text);
        return true;
    }
    if (got == YYSYMBOL_ASSIGN && is_keyword(st->prev_kind)) {
        diag_error(st->src, st->prev_loc, "'%s' is a keyword and cannot be used as a name",
                   st->prev_text);
        return true;
    }
    return false;
}

/* `outptu logits`: a misspelled statement keyword reads as a name, so the parser wants
 * '=' after it. Said plainly when the name is close to a keyword. */
static bool report_misspelled_keyword(LexState *st, yysymbol_kind_t got,
                                      const yysymbol_kind_t *v, int n)
{
    static const char *const statements[] = {"input", "output", "loss", NULL};
    if (st->prev_kind != NAME || got != YYSYMBOL_NAME) return false;
    if (n != 1 || v[0] != YYSYMBOL_ASSIGN) return false;
    const char *closest = diag_closest(st->prev_text, statements);
    if (!closest) return false;
    diag_error(st->src, st->prev_loc, "unknown statement '%s' (did you mean '%s'?)",
               st->prev_text, closest);
    return true;
}

/* At the end of the file, the bracket or brace still open says more than "unexpected
 * end of file". */
static bool report_unclosed(LexState *st, yysymbol_kind_t got, const yysymbol_kind_t *v,
                            int n)
{
    if (got != YYSYMBOL_YYEOF) return false;
    if (st->nbrackets > 0) {
        const LexBracket *b = &st->brackets[st->nbrackets - 1];
        diag_error(st->src, b->loc, "'%c' is never closed", b->open);
        return true;
    }
    if (st->nbraces > 0 && expects(v, n, YYSYMBOL_RBRACE)) {
        diag_error(st->src, st->brace_loc, "'{' is never closed");
        return true;
    }
    return false;
}

/* After the message for a missing ')' or ']', points at the bracket it would close (which
 * the lexer has already closed if the unexpected token is the wrong closer). */
static void note_open_bracket(LexState *st, const yysymbol_kind_t *v, int n)
{
    const LexBracket *b = st->closed.open ? &st->closed
                          : st->nbrackets > 0 ? &st->brackets[st->nbrackets - 1]
                                              : NULL;
    if (!b) return;
    yysymbol_kind_t closer = b->open == '(' ? YYSYMBOL_RPAREN : YYSYMBOL_RBRACKET;
    if (expects(v, n, closer)) diag_note(st->src, b->loc, "to match this '%c'", b->open);
}

static int yyreport_syntax_error(const yypcontext_t *ctx, yyscan_t scanner, ParseOut *out)
{
    (void)out;
    LexState *st = lex_state(scanner);
    yysymbol_kind_t got = yypcontext_token(ctx);
    yysymbol_kind_t expected[YYNTOKENS];
    int n = yypcontext_expected_tokens(ctx, expected, YYNTOKENS);
    if (n < 0) n = 0;
    if (report_unclosed(st, got, expected, n)) return 0;
    if (report_keyword_as_name(st, got, expected, n)) return 0;
    if (report_misspelled_keyword(st, got, expected, n)) return 0;

    char what[96], msg[512];
    describe_unexpected(st, got, what, sizeof what);
    snprintf(msg, sizeof msg, "unexpected %s", what);
    append_expected(msg, sizeof msg, expected, n);
    diag_error(st->src, at(*yypcontext_location(ctx)), "%s", msg);
    note_open_bracket(st, expected, n);
    return 0;
}

/* With parse.error custom, bison calls yyerror only when its stack is exhausted, which
 * the lexer's nesting limit should make impossible; say where, all the same. */
static void yyerror(YYLTYPE *loc, yyscan_t scanner, ParseOut *out, const char *msg)
{
    (void)out;
    diag_error(lex_state(scanner)->src, at(*loc), "expression nested too deeply (%s)", msg);
}
