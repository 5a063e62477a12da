/* builtins.h: what sema.c (names, statements, shapes) and builtins.c (the built-in
 * functions) share while the model block is checked: the checking state, the few helpers
 * of sema.c that lowering a call needs, and the one entry into builtins.c. Private to
 * those two files; the front end's public entry points are in passes.h.
 */
#ifndef CGC_BUILTINS_H
#define CGC_BUILTINS_H

#include <stdbool.h>
#include <stdint.h>

#include "../grammar/ast.h"
#include "ir.h"

enum {
    POISON = -1,           /* the value of an expression that already had an error */
    NAME_BUF = 256,        /* shape and type strings in messages */
};

/* Tensors larger than this (elements, not counting symbolic dimensions) are refused, so
 * that nothing later tries to allocate absurd amounts of memory. */
#define MAX_ELEMENTS ((int64_t)1 << 31)

/* A name bound in the model (sema.c's). */
typedef struct Binding Binding;

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

static inline const IrNode *node_of(const Sema *S, int id) { return &S->g->nodes[id]; }

static inline bool is_int_value(const Sema *S, int id) { return node_of(S, id)->dtype == DT_I32; }

/* ---- sema.c ---- */

/* An expression as a tensor value: its node id, or POISON after an error. */
int sema_lower_expr(Sema *S, const AstExpr *e);
/* A name as a value. Integer inputs are only good as cross_entropy labels (LABELS). */
int sema_lower_name(Sema *S, const AstExpr *e, bool labels);
/* "f32[N, 512]" for node ID. Rotating static buffers. */
const char *sema_type_str(const Sema *S, int id);
/* "[N, 512]" for S. Rotating static buffers. */
const char *sema_shape_str(const Sema *S, const Shape *s);
/* Product of the numeric dimensions of S, or -1 when it exceeds MAX_ELEMENTS. */
int64_t sema_fixed_numel(const Shape *s);
/* Refuses results too large to ever allocate (broadcasting can multiply sizes). */
bool sema_check_size(Sema *S, const Shape *s, SrcLoc loc);

/* ---- builtins.c ---- */

/* A call of a built-in function, checked (arity, keywords, argument kinds) and lowered to
 * IR primitives: its value, or POISON after reporting what is wrong. */
int builtins_lower_call(Sema *S, const AstExpr *call);

#endif
