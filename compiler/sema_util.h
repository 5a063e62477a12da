/* sema_util.h: what sema.c (the model block) and train_config.c (the train block) share:
 * constant folding, the checked-constant readers, matching a call's arguments to a
 * signature, and the words of messages. Private to those two files; the front end's
 * public entry points are in passes.h. Everything here is defined in sema.c, except
 * sema_train_block, which is train_config.c's.
 */
#ifndef CGC_SEMA_UTIL_H
#define CGC_SEMA_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "../grammar/ast.h"
#include "ir.h"

/* ---- messages ---- */

/* A number as a user would write it: 64, 0.001, 2.5e+30. Rotating static buffers. */
const char *sema_fmt_num(double v);
/* What E is, for "X must be ..., not <sema_describe(E)>": "64", "'adam'", "a list". */
const char *sema_describe(const AstExpr *e);
/* The first token of E: where an error about E as a whole (a wrong value) points. */
SrcLoc sema_expr_start(const AstExpr *e);
/* "; did you mean 'x'?" when a candidate is close to NAME, else "". */
const char *sema_did_you_mean(const char *name, const char *const *candidates);

/* ---- constants ---- */

/* Folds a constant expression of numbers (`1/255`, `2*64`): 1 with *OUT set, 0 when E is
 * not a constant (nothing reported), -1 after reporting an error in it. */
int sema_fold_const(Source *src, const AstExpr *e, double *out);

/* Ranges a real-valued setting may have. */
typedef enum RealRange { REAL_ANY, REAL_GE0, REAL_GT0, REAL_UNIT } RealRange;

/* Checked constants: 0 with *OUT set, or -1 after a diagnostic at E. WHAT names the
 * value in messages ("batch", "adam: beta1"). */
int sema_const_int(Source *src, const AstExpr *e, const char *what, int64_t lo, int64_t hi,
                   int64_t *out);
int sema_const_real(Source *src, const AstExpr *e, const char *what, RealRange range,
                    double *out);
int sema_const_bool(Source *src, const AstExpr *e, const char *what, bool *out);
/* One of NAMES (a NULL-terminated list), given as a bare name; its index in *OUT. */
int sema_const_choice(Source *src, const AstExpr *e, const char *what,
                      const char *const *names, int *out);

/* ---- calls ---- */

enum { MAX_PARAMS = 8 };

/* A call's signature: parameter names (NULL-terminated), the first NREQUIRED of which
 * must be given. */
typedef struct Signature {
    const char *name;
    const char *params[MAX_PARAMS + 1];
    int nrequired;
} Signature;

/* Matches CALL's arguments to SIG: OUT[i] is the expression given for parameter i, or
 * NULL. CALL may be a bare name (no arguments). False after reporting a mistake. */
bool sema_bind_args(Source *src, const Signature *sig, const AstExpr *call,
                    const AstExpr **out);

/* ---- the train block (train_config.c) ---- */

/* Checks every entry of TRAIN into P->cfg, reporting keys set twice. */
void sema_train_block(Source *src, IrProgram *p, const AstBlock *train);

#endif
