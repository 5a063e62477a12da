/* codegen_impl.h: what the files of codegen/ share and nothing else sees.
 *
 * plan.c walks the graphs and owns the Plan; cuda.c renders one kernel per IR node into
 * a KernelDraft (text, parameters, launch geometry; draft.c), fused.c one kernel per
 * fusion group (or multi-tensor launch) with cuda.c's helpers; plan.c then shares
 * identical kernels and names them; emit.c prints and writes the result.
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
void sb_putn(StrBuf *b, const char *s, size_t n);   /* N bytes of S */
void sb_free(StrBuf *b);

/* ---- a kernel being rendered ---- */

enum { DRAFT_NAME_MAX = 80 };

/* KernelDraft.symbols and the coordinate sets of cuda_operand_offset are bits of an
 * unsigned: one per symbol, one per dimension. */
_Static_assert(IR_MAX_SYMBOLS <= 32 && IR_MAX_RANK <= 32, "symbol and coordinate bits fit an unsigned");

typedef struct DraftParam {
    PlanParamType type;
    const char *ctype;      /* static string: "float *", "const cgc_half *", "int64_t" */
    char name[16];          /* "out", "x", "sym0" */
    PlanArg arg;            /* what a launch passes */
} DraftParam;

typedef struct KernelDraft {
    char name[DRAFT_NAME_MAX];  /* the base name: op and what it computes */
    DraftParam *param;          /* [nparams], grown by draft_param; draft_free frees it */
    int nparams, capparams;
    bool packed;                /* PlanKernel.packed: the parameters are slots */
    unsigned symbols;           /* bit k: symbol k appears in the body (a sym<k> parameter) */
    StrBuf body;                /* the statements inside the braces, indented */
    StrBuf head;                /* device functions the body calls, before the kernel */
    int block;
    bool any_block;             /* PlanKernel.any_block */
    Shape work;
    int64_t items_per_block, max_blocks;
} KernelDraft;

/* Where the renderer finds buffers and the program. */
/* Per-node working memory of the fused renderers (fused.c, fused_row.c), for one graph:
 * allocated once, and left clean (every entry zero) after each kernel, so that a kernel
 * costs time in proportion to its own members rather than to the graph. */
enum { RENDER_PARAM_MAX = 24, RENDER_VALUE_MAX = 48 };
typedef struct RenderScratch {
    char (*param)[RENDER_PARAM_MAX];    /* its parameter, or the expression that reads it */
    char (*value)[RENDER_VALUE_MAX];    /* its value's expression where the code is */
    int *phase, *local;                 /* fused_row.c */
    bool *need;                         /* fused_row.c */
    bool *uniform;                      /* fused.c: its value the same at every element */
} RenderScratch;

/* A sum in two passes: a REDUCE_TO (cuda_reduce_to_split: COUNT > 1 blocks per tile,
 * each writing its column sums, double, to PARTS[s * nout + o]) or a reduction along an
 * axis (cuda_reduce_axis_split: COUNT blocks a row, PARTS[s * rows + r]); then a launch
 * that sums each output's parts. COUNT 1: one pass. */
typedef struct ReduceSplit {
    int count;
    int parts;                  /* buffer, or -1 */
} ReduceSplit;

typedef struct RenderCtx {
    const IrProgram *p;
    const IrGraph *g;
    const int *node_buffer;     /* per node of g */
    const Plan *plan;
    const IrSpan *span;         /* per group of g: its members (ir_group_spans) */
    RenderScratch *scratch;     /* for g's nodes, clean */
    ReduceSplit split;          /* the launch's REDUCE_TO, when it has one of its own */
} RenderCtx;

/* ---- cuda.c's helpers, shared with fused.c ---- */

enum { CUDA_BLOCK = 256, CUDA_ITEMS_PER_THREAD = 4, CUDA_MAX_BLOCKS = 65535 };
/* The elements of one vector access (the prelude's cgc_load4 and cgc_store4). */
enum { CUDA_VEC = 4 };

/* Appends a parameter (a buffer: its storage pointer type) to D; the launch passes ARG. */
/* "train", "train_micro", "eval", "forward": a graph in comments and the host plan. */
/* A shared kernel's comment lists its first uses, this many at most. */
enum { CODEGEN_MAX_LISTED_USES = 6 };

/* The uses of a kernel that its comment lists (draft.c): where each comes from. */
typedef struct KernelUses {
    StrBuf lines;       /* the listed ones, each ending in a newline */
    int n;              /* every use noted, listed or not */
} KernelUses;
/* Notes one more use; the first CODEGEN_MAX_LISTED_USES keep their line (no newline). */
void kernel_uses_add(KernelUses *u, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends to OUT the comment's opening that lists U: "/\* USE", "\n * USE" for each
 * other, "\n * and N more uses" for the rest, then CLOSE (" *\/\n" to end the comment,
 * "\n" to go on with it); nothing when U has no use. */
void kernel_uses_comment(StrBuf *out, const KernelUses *u, const char *close);

/* "float *", "const cgc_half *": a pointer to values of T (f32, f16, bf16, i32). */
const char *cuda_storage_ctype(DType t, bool is_const);
DraftParam *draft_param(KernelDraft *d, PlanParamType type, const char *ctype, const char *name,
                        PlanArg arg);
void draft_buffer(KernelDraft *d, const char *name, int buffer, DType t, bool is_const);
/* Frees D's text and parameters (D itself is the caller's). */
void draft_free(KernelDraft *d);
/* Every buffer D's arguments name resolved to the buffer that owns its memory. */
void draft_root_args(const Plan *pl, KernelDraft *d);
/* NAME, or the first of NAME_2, NAME_3, ... that no kernel of PL has yet (in place, in
 * LEN bytes). */
void plan_unique_kernel_name(const Plan *pl, char *name, size_t len);
/* Appends the parameter NAME through which the kernel reads IR_RUNTIME node ID of
 * CTX->g, and writes its value as an f32 expression into EXPR: the float parameter
 * itself, or, for the micro-step of a train graph in a plan with a device step counter
 * (plan.h), a read of state[0] through the pointer parameter NAME. */
void cuda_runtime_value(KernelDraft *d, const RenderCtx *ctx, int id, const char *name,
                        char *expr, size_t len);
/* Writes into BUF the element index dropout NODE keys the mask of its element I (a C
 * expression) by: I itself, or, where its masks run over the batch's rows
 * (ir_shape_is_batched: its kernels then take the rank's first row, a uint64 parameter
 * rank_row, ARG_RANK_ROW), I past the elements of the rank's earlier rows, as the CPU
 * executor keys them. */
void cuda_dropout_element(KernelDraft *d, const IrNode *node, const char *i, char *buf, size_t n);
/* Appends a sym<k> parameter for every symbol the body used: the sizes come last. */
void draft_finish_symbols(KernelDraft *d);

/* The longest C expressions of dimensions, from the IR's limits: a product of at most
 * IR_MAX_RANK dimensions, each factor "sym<k>" (k < IR_MAX_SYMBOLS, written with its
 * separator " * " in 8 characters) but for one literal of at most 20 digits; and an
 * operand's offset, a sum of at most IR_MAX_RANK terms " + i<j> * PRODUCT". Buffers of
 * these sizes hold any such text; the writers assert it, since a cut would change the
 * generated code. */
enum {
    CUDA_DIMS_MAX = IR_MAX_RANK * 8 + 24,
    CUDA_OFFSET_MAX = IR_MAX_RANK * (CUDA_DIMS_MAX + 9) + 1,
};
_Static_assert(IR_MAX_SYMBOLS <= 100, "sym<k> has at most two digits");

/* The product of dims [from, to) of S as C: literals multiplied out, symbols sym<k>. BUF
 * holds CUDA_DIMS_MAX bytes. */
void cuda_dims_expr(KernelDraft *d, const Shape *s, int from, int to, char *buf, size_t n);
void cuda_numel_expr(KernelDraft *d, const Shape *s, char *buf, size_t n);
/* V as a float literal that reads back as exactly (float)V. */
void cuda_float_literal(double v, char *buf, size_t n);
/* Pooling's UNFOLD NODE (not the rows layout) at entry INDEX, read from IMAGE (a pointer
 * expression): cgc_window_entry's call, into OUT. The UNFOLD kernel stores it; a fused
 * kernel computes it where it reads the patches (compiler/fusion.c). */
void cuda_window_entry(StrBuf *out, const IrNode *node, const Shape *image, const char *pixels,
                       const char *index);
/* The f32 expression of an elementwise op over locals x (unary), a, b (binary), c, a, b
 * (select). */
const char *cuda_elementwise_expr(IrOp op);
/* The offset of IN's element paired with element i of OUT (IN broadcasts to OUT), into
 * BUF of CUDA_OFFSET_MAX bytes; sets bit j of *COORDS for each coordinate i<j> it uses. */
void cuda_operand_offset(KernelDraft *d, const Shape *out, const Shape *in, char *buf, size_t n,
                         unsigned *coords);
/* Declares the coordinates i<j> of element INDEX of OUT that COORDS asks for. */
void cuda_render_coords(KernelDraft *d, const Shape *out, unsigned coords, const char *indent,
                        const char *index);

void cuda_launch_elementwise(KernelDraft *d, const Shape *work);
void cuda_launch_rows(KernelDraft *d, Shape work);   /* a block per row of WORK */

/* X seen as [outer, len, inner] along an axis (or IR_AXIS_ALL). */
typedef struct AxisExpr {
    char rows_n[CUDA_DIMS_MAX], len[CUDA_DIMS_MAX], inner[CUDA_DIMS_MAX];
    Shape rows;     /* the shape of the rows: X without the axis */
} AxisExpr;
AxisExpr cuda_axis_expr(KernelDraft *d, const Shape *x, int axis);
/* The loop over rows r from FIRST by STEP (eager: blockIdx.x, gridDim.x) and `base`,
 * the offset of the row's element 0; its elements are `inner` apart. SPLIT > 1: a sum
 * split across blocks (cuda_reduce_axis_split); the loop is over blocks' shares v, each
 * of row r's elements [from, end) (whole vectors but the last), its part s. */
void cuda_render_row_loop(KernelDraft *d, const AxisExpr *a, const char *first, const char *step,
                          int split);
/* How many blocks share each row of a sum of X along AXIS (or IR_AXIS_ALL) in a launch of
 * its own, the symbols at their largest (SYMMAX; NULL: unknown): 1 where the rows fill the
 * largest part of perf.h or the sum is small, or where the rows are not static (the parts'
 * buffer is [split, rows]); else enough to fill that part, each block summing 4096
 * elements at least. Each block's sum (divided by the row's length for a mean) goes to
 * parts[s * rows + r]; cuda_render_reduce_parts adds them. */
int cuda_reduce_axis_split(const Shape *x, int axis, const int64_t *symmax);
/* The statement that stores row r's sum acc<n> of reduction N (a printf format: SPLIT, of
 * the one number n; else of the output's name, then n). */
const char *cuda_row_sum_store(const IrNode *n, bool split);
/* The blocks' work of a launch over ROWS split SPLIT ways. */
Shape cuda_row_work(const Shape *rows, int split);

/* REDUCE_TO of XS down to OS: for output element o, `kept` (statements) gives the k<j>
 * and `base` the offset of its first input element; for reduced element r, `red`
 * (statements) gives the r<j> and `off` (" + ...") the rest of the input offset.
 * A block sums one output element, its threads reading elements of it; or, where
 * consecutive outputs read consecutive inputs (cuda_reduce_to_tiles), a tile of
 * CUDA_REDUCE_TILE outputs, each warp's lanes reading one row of the tile: a bias
 * gradient's sum over the batch reads whole rows then, not one element per row. Where
 * the rows are a multiple of CUDA_VEC long (and wide: cuda_reduce_to_vec), each lane
 * takes that many consecutive outputs, one vector access a row (cgc_load4), summed into
 * `acc[j]`, lane j of the vector. */
enum { CUDA_REDUCE_TILE = 32 };
typedef struct ReduceToIndex {
    StrBuf kept, red, base, off;
    char nout[CUDA_DIMS_MAX], nred[CUDA_DIMS_MAX];
    int64_t tiles;   /* > 0: summed by tiles, this many */
    int vec;         /* tiles: the outputs a lane takes (1, or CUDA_VEC) */
    int split;       /* > 1: each tile's rows in this many chunks, a block each, whose
                      * column sums go to parameter `parts` (ReduceSplit) */
} ReduceToIndex;
void cuda_reduce_to_index(KernelDraft *d, const Shape *xs, const Shape *os, ReduceToIndex *ix);
void cuda_reduce_to_index_free(ReduceToIndex *ix);
/* The tiles of a REDUCE_TO of XS to OS, or 0 where it is summed a block per output: tiles
 * need a static OS whose innermost dimension is XS's, kept, and a tile wide at least. */
int64_t cuda_reduce_to_tiles(const Shape *xs, const Shape *os);
/* The outputs a lane of such a tile takes (0: no tiles). */
int cuda_reduce_to_vec(const Shape *xs, const Shape *os);
/* The loop over IX's outputs (or tiles) from FIRST by STEP, a block each, opened up to
 * the body of the loop over reduced elements r, which sums into the double `acc`; the
 * caller renders the body and closes that loop, then cuda_reduce_to_close sums the
 * block's parts and stores the output in OUT (unless NULL) and closes the outer loop. */
void cuda_reduce_to_open(KernelDraft *d, const ReduceToIndex *ix, const char *first,
                         const char *step);
void cuda_reduce_to_close(KernelDraft *d, const ReduceToIndex *ix, const char *out);
/* How many blocks share each tile of a REDUCE_TO of XS to OS in a launch of its own, the
 * symbols at their largest (SYMMAX; NULL: unknown): 1 where the tiles alone fill the
 * largest part of perf.h (perf_fill_threads) or the sum is small (a second launch costs
 * more than it saves), else enough to fill it, each block summing 256 rows at least. */
int cuda_reduce_to_split(const Shape *xs, const Shape *os, const int64_t *symmax);
/* The parameter `parts` of SPLIT (doubles: its buffer holds them as pairs of f32). */
void cuda_split_parts_param(KernelDraft *d, ReduceSplit split, bool is_const);
/* The second pass of a sum node ID split as SPLIT (a REDUCE_TO, or a reduction along an
 * axis): each output the sum of its parts, in a fixed order. */
void cuda_render_reduce_parts(const RenderCtx *ctx, int id, ReduceSplit split, KernelDraft *d);
/* The work a REDUCE_TO launch spreads over blocks: OS's elements, or IX's tiles (times
 * its split). */
Shape cuda_reduce_to_work(const ReduceToIndex *ix, const Shape *os);

/* Renders node ID of CTX->g (a computing node, not a view, CONST, ASSIGN or MATMUL)
 * into D. */
void cuda_render_node(const RenderCtx *ctx, int id, KernelDraft *d);

/* The fused classifier of CROSS_ENTROPY node LOSS and CE_GRAD node GRAD of CTX->g (ir.h,
 * IR_GROUP_CLASSIFIER) into D, its rows' losses in buffer PARTIAL (f32, one per row). */
void cuda_render_classifier(const RenderCtx *ctx, int loss, int grad, int partial, KernelDraft *d);
/* Appends to D the parameter `counter` (PLAN's launch counter) and the gate after which
 * only the launch's last block to finish goes on (CUDA's threadFenceReduction: each
 * block fences its writes and counts itself off; the last fences again to see theirs).
 * That block must set *counter back to 0 for the next launch. */
void cuda_render_last_block(KernelDraft *d, const Plan *plan);

/* A kernel that reads buffer SRC (shape SRC_SHAPE, dtype SRC_TYPE) broadcast to
 * OUT_SHAPE and stores it as OUT_TYPE into buffer OUT: ASSIGN copies and the operands
 * a GEMM needs materialised. NAME is the base name. */
void cuda_render_copy(const RenderCtx *ctx, const char *name, int out, DType out_type,
                      const Shape *out_shape, int src, DType src_type, const Shape *src_shape,
                      KernelDraft *d);

/* ---- fused.c ---- */

RenderScratch *render_scratch_new(int nnodes);
void render_scratch_free(RenderScratch *s);
/* Cleans the scratch entries of group K's members and of what they read: every entry a
 * kernel of K can have touched. */
void render_scratch_clean(const RenderCtx *ctx, int k);

/* Renders fusion groups GROUPS[0..N) of CTX->g into D: one group (N = 1) as one kernel,
 * or the groups of one multi-tensor launch as one kernel with a segment each. D's name
 * is the first group's (with "_x<N>" for a multi). */
void fused_render(const RenderCtx *ctx, const int *groups, int n, KernelDraft *d);
/* Renders pointwise group K of CTX->g as another kernel's epilogue into D (named as the
 * group): D's parameters are the group's (outputs, inputs, seed and runtime values,
 * symbols), and its body the group's code at work element `i` (an int64_t the caller
 * defines), where every value the group reads from buffer root FROM is VALUE (an f32
 * expression: that buffer's element i, as a load of it would give). */
void fused_render_epilogue(const RenderCtx *ctx, int k, int from, const char *value, KernelDraft *d);
/* Group K's REDUCE_TO (its only reduction then), or -1. */
int fused_reduce_to_member(const RenderCtx *ctx, int k);
/* The sum a launch of REDUCE group K alone may split (plan.c): its REDUCE_TO, or its one
 * reduction along its axis; -1 where it has several. */
int fused_sum_member(const RenderCtx *ctx, int k);
/* How many of the groups of one multi-tensor launch, GROUPS[0..N) in its order, one
 * kernel takes from the front (at least one): as many as keep its slots (PlanKernel.packed:
 * each group's parameters, those it shares with others counted again, and a segment's
 * first virtual block, their count and its sizes; the counter of `last` groups) within
 * PLAN_MAX_SLOTS. The groups' shapes are static, so no symbol adds a parameter; each
 * group alone fits (IR_GROUP_MAX_OPERANDS). Counted as fused_render would add them, in
 * time proportional to the groups, so that a launch of any width splits cheaply. */
int fused_groups_that_fit(const RenderCtx *ctx, const int *groups, int n);
/* EXPR (cuda_elementwise_expr's locals x, a, b, c) over the given operand values. */
void fused_substitute(StrBuf *out, const char *expr, const char *x, const char *a,
                      const char *b, const char *c);
/* The function that rounds an f32 register to T as a store would, or NULL for f32. */
const char *fused_rounding(DType t);

/* ---- fused_row.c ---- */

/* Renders row group K (IR_GROUP_ROW) of CTX->g into D, named already: parameters, body
 * and launch geometry (a block per row). */
void fused_render_row(const RenderCtx *ctx, int k, KernelDraft *d);

/* ---- attention.c ---- */

/* Renders attention group K of CTX->g (ir.h, IR_GROUP_ATTENTION) into D: its kernel,
 * parameters and launch geometry; LSE is the buffer of its rows' log-sum-exp, which the
 * forward writes and the backward reads. */
void attention_render(const RenderCtx *ctx, int k, int lse, KernelDraft *d);
/* Whether attention A of G runs on the tensor cores (f16 and bf16 operands) rather than
 * the CUDA cores (f32). */
bool attention_tensor_cores(const IrGraph *g, const IrAttention *a);
/* The softmax node whose log-sum-exp attention group K writes or reads, and its shape
 * (the scores' without the keys' axis). */
int attention_lse_node(const RenderCtx *ctx, int k);
Shape attention_lse_shape(const RenderCtx *ctx, int k);

/* The data pipeline's kernels (plan.h), in PlanDataKernel order: name, parameters and
 * full source. */
void cuda_data_kernels(PlanKernel out[PDK_NUM]);

/* "x" -> "x", "h1.weight" -> "h1_weight", at most MAX - 1 characters. */
void codegen_mangle(char *dst, size_t max, const char *s);

/* ---- repro.c: the reproducer's fixed host code ---- */

/* codegen/repro/types.h, codegen/gemm_map.h, codegen/repro/replay.h and
 * codegen/repro/main.h, embedded at build time (codegen.cmake): repro.c writes each as it
 * stands into every reproducer. */
extern const char repro_types[], repro_gemm_map[], repro_replay[], repro_main[];

#endif
