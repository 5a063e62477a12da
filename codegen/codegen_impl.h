/* codegen_impl.h: what the files of codegen/ share and nothing else sees.
 *
 * plan.c walks the graphs and owns the Plan; cuda.c renders one kernel per IR node into
 * a KernelDraft (text, parameters, launch geometry); plan.c then shares identical
 * kernels and names them; emit.c prints and writes the result.
 */
#ifndef CGC_CODEGEN_IMPL_H
#define CGC_CODEGEN_IMPL_H

#include <stdarg.h>
#include <string.h>

#include "plan.h"

/* ---- growable strings ---- */

typedef struct StrBuf {
    char *s;
    size_t len, cap;
} StrBuf;

void sb_printf(StrBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_puts(StrBuf *b, const char *s);
void sb_free(StrBuf *b);

/* ---- a kernel being rendered ---- */

enum { DRAFT_NAME_MAX = 80 };

typedef struct DraftParam {
    PlanParamType type;
    const char *ctype;      /* static string: "float *", "const cgc_half *", "int64_t" */
    char name[16];          /* "out", "x", "sym0" */
    PlanArg arg;            /* what a launch passes */
} DraftParam;

typedef struct KernelDraft {
    char name[DRAFT_NAME_MAX];  /* the base name: op and what it computes */
    DraftParam param[PLAN_MAX_PARAMS];
    int nparams;
    unsigned symbols;           /* bit k: symbol k appears in the body (a sym<k> parameter) */
    StrBuf body;                /* the statements inside the braces, indented */
    int block;
    Shape work;
    int64_t items_per_block, max_blocks;
} KernelDraft;

/* Where the renderer finds buffers and the program. */
typedef struct RenderCtx {
    const IrProgram *p;
    const IrGraph *g;
    const int *node_buffer;     /* per node of g */
    const Plan *plan;
} RenderCtx;

/* Renders node ID of CTX->g (a computing node, not a view, CONST, ASSIGN or MATMUL)
 * into D. */
void cuda_render_node(const RenderCtx *ctx, int id, KernelDraft *d);

/* A kernel that reads buffer SRC (shape SRC_SHAPE, dtype SRC_TYPE) broadcast to
 * OUT_SHAPE and stores it as OUT_TYPE into buffer OUT: ASSIGN copies and the operands
 * a GEMM needs materialised. NAME is the base name. */
void cuda_render_copy(const RenderCtx *ctx, const char *name, int out, DType out_type,
                      const Shape *out_shape, int src, DType src_type, const Shape *src_shape,
                      KernelDraft *d);

/* The data pipeline's kernels (plan.h), in PlanDataKernel order: name, parameters and
 * full source. */
void cuda_data_kernels(PlanKernel out[PDK_NUM]);

/* "x" -> "x", "h1.weight" -> "h1_weight", at most MAX - 1 characters. */
void codegen_mangle(char *dst, size_t max, const char *s);

#endif
