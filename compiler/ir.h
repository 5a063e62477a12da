/* ir.h: the graph IR, the centre of cgc.
 *
 * A program is a few graphs (training step, evaluation, ...) over shared tables:
 * symbols (symbolic dimensions; symbol 0 is the batch), inputs (fed by the data), and
 * persistent tensors (parameters and optimizer state, which outlive a step). A graph is
 * an array of nodes in topological order; a node is an op, its inputs (earlier node
 * ids), the shape and dtype of the one tensor it produces, a few attributes, and the
 * .net location it came from. Every pass reads and writes this; ir_print() gives the one
 * stable text form that --dump-ir shows and the golden tests compare.
 *
 * Semantics a backend must keep:
 *  - Elementwise binary ops broadcast as NumPy does (trailing dimensions align, size 1
 *    stretches); the node's shape is the broadcast shape.
 *  - IR_READ sees a persistent tensor's value from before the step; every IR_ASSIGN of
 *    the graph takes effect after the whole graph has run (so reads and writes of one
 *    step never race).
 *  - Storage of a node's value is rounded to its dtype (round to nearest even for f16 and
 *    bf16); f32 math otherwise (or f64 when a reference executor runs in f64 for checks).
 *  - IR_DROPOUT draws its mask from rng_dropout_keep() (base/rng.h) keyed by
 *    (seed, attribute `stream`, the value of its counter input, element index), so any
 *    backend, and the backward pass, reproduce the same mask without storing it.
 */
#ifndef CGC_IR_H
#define CGC_IR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "../base/diag.h"

/* The IR's fixed sizes. Every array of one of these kinds is sized by its constant, and
 * each limit a .net file can reach is checked where the file is read (sema.c, the
 * parser), so that a program past the front end fits them all:
 *   IR_MAX_RANK     dimensions of a shape (Shape.dim)
 *   IR_MAX_IN       inputs of a node: the widest op's arity, which no file can change
 *   IR_MAX_SYMBOLS  dimension names of a program (IrProgram.syms): the batch and the
 *                   others; a feed's symvals[], a plan's symmax[], kernels' sym<k>
 *   IR_MAX_INPUTS   `input` statements of a program (IrProgram.inputs): a feed's inputs[] */
enum { IR_MAX_RANK = 8, IR_MAX_IN = 3, IR_MAX_SYMBOLS = 8, IR_MAX_INPUTS = 16 };

typedef enum DType { DT_F32, DT_F16, DT_BF16, DT_I32 } DType;

/* A dimension: >= 0 is a size; < 0 is symbol number -(dim + 1), i.e. -1 is symbol 0
 * (the batch). IR_SYM(k) makes one. */
#define IR_SYM(k) ((int64_t)(-(k)-1))
#define IR_DIM_IS_SYM(d) ((d) < 0)
#define IR_DIM_SYMBOL(d) ((int)(-(d)-1))

typedef struct Shape {
    int rank;                 /* 0 for a scalar */
    int64_t dim[IR_MAX_RANK];
} Shape;

/* Reductions over every axis (to a scalar) use this axis. */
#define IR_AXIS_ALL (-1000)

/* The ops: compiler/ops.def lists each once, with everything the passes, the renderers
 * and the executors need to know of it (its columns are described there). */
typedef enum IrOp {
#define IR_OP(name, ...) IR_##name,
#include "ops.def"
    IR_NUM_OPS
} IrOp;

typedef enum IrOpClass {
    IR_CLASS_LEAF, IR_CLASS_UNARY, IR_CLASS_BINARY, IR_CLASS_TERNARY, IR_CLASS_REDUCE,
    IR_CLASS_SHAPE, IR_CLASS_MATMUL, IR_CLASS_OTHER, IR_CLASS_EFFECT,
} IrOpClass;

/* The ops that share one implementation in every backend (ops.def, column FAMILY). */
typedef enum IrFamily {
    IR_FAMILY_INPUT, IR_FAMILY_READ, IR_FAMILY_CONST, IR_FAMILY_RUNTIME, IR_FAMILY_ELEMENTWISE,
    IR_FAMILY_BROADCAST, IR_FAMILY_DROPOUT, IR_FAMILY_REDUCE, IR_FAMILY_RESHAPE,
    IR_FAMILY_REDUCE_TO, IR_FAMILY_TRANSPOSE, IR_FAMILY_MATMUL, IR_FAMILY_SOFTMAX,
    IR_FAMILY_SOFTMAX_GRAD, IR_FAMILY_CROSS_ENTROPY, IR_FAMILY_CE_GRAD, IR_FAMILY_COUNT_CORRECT,
    IR_FAMILY_ASSIGN, IR_FAMILY_WINDOW, IR_FAMILY_MODE_SWITCH, IR_FAMILY_COLLECTIVE, IR_FAMILY_PERMUTE,
    IR_FAMILY_EMBED, IR_FAMILY_EMBED_GRAD, IR_FAMILY_ARANGE, IR_FAMILY_CAUSAL_MASK,
} IrFamily;

/* How an op runs, stores its value and fuses (ops.def, column FUSE). */
typedef enum IrFuse {
    IR_FUSE_LEAF, IR_FUSE_SCALAR, IR_FUSE_POINTWISE, IR_FUSE_RANDOM, IR_FUSE_REDUCTION,
    IR_FUSE_WINDOW, IR_FUSE_MATMUL, IR_FUSE_VIEW, IR_FUSE_BARRIER, IR_FUSE_COLLECTIVE,
    IR_FUSE_EFFECT,
} IrFuse;

/* Which attributes of a node its op reads (ops.def, column ATTRS). */
typedef enum IrAttrs {
    IR_ATTRS_NO_ATTR, IR_ATTRS_INPUT_NAME, IR_ATTRS_TENSOR_NAME, IR_ATTRS_TARGET_NAME,
    IR_ATTRS_CONST_VALUE, IR_ATTRS_RUNTIME_NAME, IR_ATTRS_P_STREAM, IR_ATTRS_MATMUL_FLAGS,
    IR_ATTRS_AXIS, IR_ATTRS_WINDOW, IR_ATTRS_WINDOW_OUTSIDE, IR_ATTRS_BUCKET, IR_ATTRS_PERM,
    IR_ATTRS_MASK_VALUE,
} IrAttrs;

/* How a node's shape follows from its inputs (ops.def, column SHAPE). */
typedef enum IrShapeRule {
    IR_SHAPE_OWN, IR_SHAPE_IN0, IR_SHAPE_IN1, IR_SHAPE_BROADCAST, IR_SHAPE_REDUCE,
    IR_SHAPE_MATMUL, IR_SHAPE_TRANSPOSE, IR_SHAPE_SCALAR, IR_SHAPE_ASSIGN, IR_SHAPE_WINDOW,
    IR_SHAPE_IMAGE, IR_SHAPE_PERMUTE, IR_SHAPE_EMBED,
} IrShapeRule;

/* What an op runs in under bf16 or fp16 autocast (ops.def, column AUTOCAST). */
typedef enum IrAutocast { IR_AUTOCAST_FOLLOW, IR_AUTOCAST_F32, IR_AUTOCAST_HALF } IrAutocast;

/* How a reduction combines two elements (ops.def, IR_RD's COMBINE); NONE for the ops that
 * are not reductions. */
typedef enum IrCombine { IR_COMBINE_NONE, IR_COMBINE_ADD, IR_COMBINE_MAX } IrCombine;

/* Which side of a collective is this rank's slice of the whole (ops.def, IR_CL's SLICE);
 * NOT_COLLECTIVE for the other ops. */
typedef enum IrSlice { IR_SLICE_NOT_COLLECTIVE, IR_SLICE_WHOLE, IR_SLICE_IN, IR_SLICE_OUT } IrSlice;

typedef struct IrOpInfo {
    const char *name;       /* as in the table: "RELU_GRAD"; ir_op_name() prints "relu_grad" */
    int arity;
    IrOpClass cls;
    IrFamily family;
    IrFuse fuse;
    IrAttrs attrs;
    IrShapeRule shape;
    IrAutocast autocast;
    int cost;               /* FLOPs per element to recompute it */
    unsigned diff;          /* bit k: input k receives a gradient */
    bool backward_only;     /* a gradient op (GRAD NOT_NEEDED): never differentiated */
    const char *meaning;
    const char *derivative;
    const char *expr;       /* the elementwise expression (ops.def, EXPR), or NULL */
    IrCombine combine;      /* a reduction's (IR_RD) */
    bool mean;              /* a reduction's: its result divided by the count */
    IrSlice slice;          /* a collective's (IR_CL) */
} IrOpInfo;

extern const IrOpInfo ir_op_info[IR_NUM_OPS];
const char *ir_op_name(IrOp op);          /* lower case, as dumps print it */

/* MATMUL flags. IR_MATMUL_BATCH_SUM sums over the batch instead of keeping it: both
 * operands have the same leading dimensions, a is transposed and b is not, and the
 * result [m, n] = sum over b of a[b]^T @ b[b], one GEMM whose contraction runs through
 * the batches (a weight's gradient over every position of a sequence or an image). */
enum { IR_MATMUL_TRANS_A = 1, IR_MATMUL_TRANS_B = 2, IR_MATMUL_TF32 = 4, IR_MATMUL_BATCH_SUM = 8 };

/* A sliding window over the last two dimensions (H, W) of an image [N, C, H, W], as
 * torch.nn.Unfold takes it: output position (oh, ow) and kernel offset (ki, kj) read
 * pixel (oh*stride[0] - pad[0] + ki*dilation[0], ow*stride[1] - pad[1] + kj*dilation[1]),
 * OH = (H + 2*pad[0] - dilation[0]*(kernel[0] - 1) - 1) / stride[0] + 1, OW likewise.
 * UNFOLD's layouts (IrNode.flags):
 *   IR_WINDOW_ROWS  a convolution's GEMM operand: one row per output position, columns
 *                   (c, ki, kj) as a weight [O, C/G, KH, KW] flattens: [N, L, C*KH*KW]
 *                   with L = OH*OW, or with G = groups > 1, [N, G, L, C/G*KH*KW]
 *   otherwise       pooling's: [N, C, KH*KW, OH, OW] (groups 1), reduced over axis 2:
 *                   each kernel offset's positions consecutive, as the image's pixels are */
typedef struct IrWindow {
    int32_t kernel[2], stride[2], pad[2], dilation[2];
    int32_t groups;
} IrWindow;
enum { IR_WINDOW_ROWS = 1 };

/* Scalars the runtime supplies to IR_RUNTIME nodes. */
typedef enum IrRuntimeScalar {
    IR_RT_TOTAL_STEPS,      /* optimizer steps the whole run will take (schedules) */
    IR_RT_MICRO_STEP,       /* global index of the micro-batch being run: optimizer step *
                             * accumulate + micro-batch within the step (dropout's counter;
                             * a resumed run recomputes it, so no state tensor holds it) */
    IR_RT_RANK_SHARE,       /* several ranks: this rank's rows of the micro-batch over all
                             * of its rows (1 with one rank) */
    IR_RT_POSITION,         /* the decode graph: the position it computes, 0 to T - 1 */
    IR_NUM_RUNTIME,
} IrRuntimeScalar;

/* Why the precision pass (compiler/precision.c) gave a forward value its dtype, as it
 * decided; --explain prints it. */
typedef enum IrDtypeWhy {
    IR_WHY_FOLLOWS,         /* the type of its inputs */
    IR_WHY_PRODUCT,         /* a matrix product: tensor cores under tf32, bf16 and fp16 */
    IR_WHY_BIAS,            /* a cast: a linear layer's bias joins its product's type */
    IR_WHY_OPERAND,         /* a cast: an operand of a matrix product */
    IR_WHY_F32_READER,      /* a cast: read by an op that runs in f32 */
    IR_WHY_LOSS,            /* the loss, always f32 */
    IR_WHY_F32_LIST,        /* autocast's f32 list: inputs cast to f32 */
    IR_WHY_INTEGER,         /* not a float: left alone */
} IrDtypeWhy;

typedef struct IrNode {
    IrOp op;
    DType dtype;
    Shape shape;
    int nin;
    int in[IR_MAX_IN];      /* ids of earlier nodes of the same graph */
    int axis;               /* reductions, softmax: >= 0, or IR_AXIS_ALL */
    double value;           /* CONST: the value; DROPOUT: p; UNFOLD: read outside the image */
    int index;              /* INPUT, READ, ASSIGN: table index; DROPOUT: stream; RUNTIME: which */
    int flags;              /* MATMUL: IR_MATMUL_*; UNFOLD, FOLD: IR_WINDOW_ROWS; PERMUTE:
                             * the permutation, 3 bits an axis (ir_perm_axis) */
    IrWindow win;           /* UNFOLD, FOLD: the window */
    SrcLoc loc;             /* the .net token this node came from; {0,0} for none */
    const char *name;       /* optional: the binding it computes ("h1"), for dumps; a
                             * table's name or ir_intern'ed, so it outlives the AST */
    int group;              /* fusion (compiler/fusion.c): 0 = a kernel (or GEMM) of its
                             * own, else k for the graph's groups[k - 1] */
    bool recompute;         /* checkpointing (compiler/recompute.c) inserted it: the
                             * backward's copy of a forward node, recomputed, not kept */
    IrDtypeWhy dtype_why;   /* forward graph: the precision pass's reason for dtype */
} IrNode;

/* A fusion group: nodes of one graph that codegen renders as one kernel. Members of a
 * group are consecutive in the graph's node order (the fusion pass reorders to make them
 * so). A member whose value is read outside the group (or is a graph output) is stored;
 * every other member lives only in registers.
 *
 *   IR_GROUP_POINTWISE  one thread per element of `work`. Members are elementwise (unary,
 *                       binary, select, BROADCAST, DROPOUT), RUNTIME leaves, and ASSIGNs.
 *                       Every member's shape broadcasts to `work` and a member computed at
 *                       a smaller shape is evaluated where the element needs it (so scalar
 *                       chains, like a learning-rate schedule, are recomputed per element
 *                       rather than launched); stored members, DROPOUTs and ASSIGNs have
 *                       exactly `work`. A pooling UNFOLD (not the rows layout) of shape
 *                       `work`, unstored, may be a member too: each element reads its entry
 *                       from the image. An ASSIGN member stores its value straight into
 *                       the persistent tensor (in place): the pass orders every other
 *                       reader of that tensor before the group, which keeps IR semantics
 *                       (writes land after the step's reads).
 *   IR_GROUP_REDUCE     one or more reductions over input shape `work`: SUMs, MEANs and MAXes
 *                       along one `axis` (or IR_AXIS_ALL), or a single REDUCE_TO; plus a
 *                       pointwise prologue (members as above, no ASSIGN) evaluated at the
 *                       reductions' input elements. Stored prologue members have `work`.
 *
 *   IR_GROUP_ROW        one block per row of `work` = [rows..., C], the row being the last
 *                       axis (`axis` = rank - 1): layernorm forward or backward in one
 *                       kernel. Members: pointwise members as above (no ASSIGN, no DROPOUT)
 *                       whose shapes broadcast to `work`, and row values (one per row, of
 *                       shape [rows...] or [rows..., 1]; no work has a [rows...] that would
 *                       also broadcast to it, such as [4] over [4, 4], so the two readings
 *                       never meet); RESHAPEs between [rows...] and [rows..., 1]; and
 *                       reductions along the row (SUM, MEAN or MAX over axis rank - 1 of a
 *                       value of shape `work`, or REDUCE_TO from `work` to [rows..., 1]).
 *                       Unlike a reduce group, members may read the group's own reductions:
 *                       the kernel runs in phases split by block-wide reductions, and a
 *                       value of shape `work` needed in a later phase is recomputed there
 *                       from the group's inputs. Stored members have shape `work` or a row
 *                       shape ([rows...] or [rows..., 1]). `rows` may contain symbols.
 *   IR_GROUP_GEMM       one cuBLASLt matmul with its epilogue: first a MATMUL of two 2-D
 *                       operands (no batch dimensions), then an ADD of the matmul and a bias
 *                       of shape [n] or [1, n] computed outside the group, then optionally
 *                       RELU or GELU_TANH of that sum (cuBLASLt's BIAS, RELU_BIAS, GELU_BIAS
 *                       and GELU_AUX_BIAS epilogues; its GELU is the tanh form). The last
 *                       member is stored; the ADD may be stored too, only under GELU_TANH
 *                       and in f32 (the aux output that gelu_tanh_grad reads: cuBLASLt's
 *                       GELU reads the unrounded sum, the IR's the stored ADD, which a half
 *                       type would round); the MATMUL never is.
 *                       `work` is the matmul's shape [m, n]. Its meaning differs from its
 *                       members' in one respect, cuBLASLt's: members that are not stored are
 *                       not rounded to their dtype. The f32 accumulator goes through the bias
 *                       add and the activation in f32 and is rounded once, on store. Every
 *                       backend keeps this rule (the CPU executor included), so the fused
 *                       program still runs bit for bit alike on the CPU and the emulation.
 *   IR_GROUP_ATTENTION  attention's composition (builtins.c) as one kernel in the manner of
 *                       FlashAttention (codegen/attention.c). The forward group is the chain
 *                       S = Q K^T, its scale, its causal mask, P = softmax(S), O = P V (with
 *                       the casts between them), Q, K and V [lead..., T, D]; it stores only
 *                       O, and, where a backward group reads it, each row's log-sum-exp of
 *                       S in a buffer of the plan's own (plan.h, PlanGraph.lse). The
 *                       backward group is the chain dP = dO V^T, dV = P^T dO, dS =
 *                       softmax_grad(dP, P), its mask and scale, dQ = dS K, dK = dS^T Q; it
 *                       stores dQ, dK and dV. It reads P from its forward group without
 *                       that group storing it (ir_stored_members): its kernel recomputes P
 *                       from Q, K and the log-sum-exp, and the rows' sums of dP P as those
 *                       of dO O (O being P V). `work` is S's shape. Like a GEMM's, the
 *                       kernel's rounding is not the members': S and P stay in f32, and the
 *                       CPU executor, which runs the members, agrees within rounding, not
 *                       bit for bit.
 *   IR_GROUP_CLASSIFIER the fused classifier: a CROSS_ENTROPY and the CE_GRAD of the same
 *                       logits and labels, in one pass over the logits (codegen/cuda.c): a
 *                       warp per row finds the row's log-sum-exp once, writes the row's
 *                       gradient and its loss, into a buffer of the plan's own, and the
 *                       launch's last block (the launch counter, as `last` groups use it)
 *                       adds the rows' losses in order, so the loss does not depend on the
 *                       grid. `work` is the logits' shape; both members are stored.
 *
 * Groups with the same nonzero `multi` form one multi-tensor launch (horizontal fusion):
 * they are consecutive, of one kind (but for the `last` groups below, pointwise, which may
 * close a multi of reduce groups), independent of each other, and their shapes have no
 * symbols; their work shapes may differ (a scalar update beside a [512, 784] one; reduce
 * groups over different input shapes, along the same axis). Only pointwise and reduce
 * groups take part. One exception to independence: the multi's final groups (one or
 * more, after all the others) may have `last` set (pointwise groups of scalars, such as
 * the loss-scale and step-counter bookkeeping after the optimizer updates); they may read
 * what the other groups read and write in place a tensor they read, because they run only
 * after all of those have finished: every block, when done, counts itself off on a device
 * counter, and the block that counts last runs the `last` groups, one after another (and
 * resets the counter). They read nothing the other groups compute, nor each other's
 * results. That is ordering, not a reduction, so results stay deterministic. (Several:
 * the bookkeeping is independent scalar groups, the scaler's and the step counter's.)
 *
 * Every group takes at most IR_GROUP_MAX_OPERANDS operands (ir_group_operands): a kernel's
 * parameters are few (codegen's PLAN_MAX_PARAMS leaves room for these, the symbols and a
 * counter), so the fusion pass leaves apart what would need more, however wide the model. */
enum { IR_GROUP_MAX_OPERANDS = 240 };
/* The widest head an attention group's kernels take (D of Q [lead..., T, D]). */
enum { IR_ATTENTION_MAX_HEAD = 128 };

typedef enum IrGroupKind {
    IR_GROUP_POINTWISE, IR_GROUP_REDUCE, IR_GROUP_ROW, IR_GROUP_GEMM, IR_GROUP_ATTENTION,
    IR_GROUP_CLASSIFIER,
} IrGroupKind;

typedef struct IrGroup {
    IrGroupKind kind;
    const char *name;       /* a C identifier (ir_intern'ed): what it fuses, "bias_relu_h1",
                             * "adamw_h1_weight"; codegen's kernel name */
    Shape work;             /* see above */
    int axis;               /* IR_GROUP_REDUCE: the axis (IR_AXIS_ALL), unused for REDUCE_TO */
    int multi;              /* 0, or the multi-tensor launch it belongs to */
    bool last;              /* multi-tensor launches only: this group runs after every other
                             * group of its launch has finished (the launch's last block to
                             * finish runs it; see below) */
} IrGroup;

/* A kernel boundary of a fused graph that stays: unit UC reads a value (node PN) of unit
 * UP, through node CN, and the first rule of the fusion pass that keeps the two apart.
 * A unit is a kernel: group K is unit K (1..ngroups); a node that no group holds and that
 * runs as a kernel of its own (a GEMM, a collective) is unit ngroups + 1 + its id. */
typedef enum IrSplit {
    IR_SPLIT_ATTENTION_BACKWARD,/* the reader is a backward attention group and the value
                                 * its forward's P, which it recomputes */
    IR_SPLIT_ATTENTION_READS,   /* the reader is an attention group: its operands come from memory */
    IR_SPLIT_ATTENTION_STORES,  /* the producer is an attention group: it stores its products */
    IR_SPLIT_CLASSIFIER,        /* the fused classifier reads the logits from memory, and its
                                 * loss is whole only when its launch ends */
    IR_SPLIT_GEMM_READS,        /* the reader is a MATMUL: its operands come from memory */
    IR_SPLIT_INTO_GEMM_GROUP,   /* the reader is a GEMM group: product, bias, activation only */
    IR_SPLIT_EPILOGUE_ENDS,     /* the producer is a GEMM group: its epilogue ends there */
    IR_SPLIT_BIAS_NOT_ALONE,    /* a bias add whose kernel does more than an epilogue can */
    IR_SPLIT_NO_EPILOGUE,       /* a MATMUL read by an op no epilogue takes (CN) */
    IR_SPLIT_OWN_KERNEL,        /* node OWN runs as a kernel of its own (no fusion family) */
    IR_SPLIT_REDUCTION,         /* a reduction's value exists only when its kernel ends */
    IR_SPLIT_PHASE,             /* checkpointing's copies have kernels of their own */
    IR_SPLIT_WORK_STRETCH,      /* the value does not stretch to the reader's work */
    IR_SPLIT_WORK_EXACT,        /* both groups store, and their works differ */
    IR_SPLIT_ROW_ACROSS,        /* a reduction across the rows of a row group */
    IR_SPLIT_SHARED,            /* READERS kernels read PN: stored once, read back */
    IR_SPLIT_CYCLE,             /* joining would close a cycle of kernels through unit VIA */
    IR_SPLIT_TWO_REDUCTIONS,    /* a kernel holds one reduction group */
    IR_SPLIT_GREEDY,            /* no rule forbids it; the greedy sweep did not join them */
} IrSplit;

typedef struct IrBoundary {
    int up, uc;             /* the producing and the reading unit */
    int pn, cn;             /* the value read and the node reading it (views skipped) */
    IrSplit why;
    int own;                /* IR_SPLIT_OWN_KERNEL: the node that runs alone */
    int readers;            /* IR_SPLIT_SHARED: how many kernels read PN */
    int via;                /* IR_SPLIT_CYCLE: a unit on a path from UP to UC */
} IrBoundary;

/* What the runtime reads back from a graph after it runs. */
typedef enum IrOutputRole {
    IR_OUT_LOSS,        /* scalar loss of the batch (unscaled) */
    IR_OUT_PREDICTION,  /* the model's output */
    IR_OUT_CORRECT,     /* scalar: rows predicted right (eval graph, integer labels) */
    IR_OUT_SKIPPED,     /* scalar: 1 when an fp16 step was skipped for inf/nan */
    IR_OUT_GRAD_NORM,   /* scalar: global gradient L2 norm before clipping */
    IR_NUM_OUTPUT_ROLES,
} IrOutputRole;

typedef struct IrGraph {
    const char *name;       /* "forward", "train", "train_micro", "eval" */
    IrNode *nodes;
    int nnodes, cap;
    int output[IR_NUM_OUTPUT_ROLES];   /* node id per role, -1 when absent */
    int nforward;           /* train, train_micro: nodes [0, nforward) are the forward pass
                             * (a copy of the forward graph); 0 for the others. Fusion
                             * interleaves forward and backward nodes, so after it this
                             * counts only the leading nodes that are all forward */
    IrGroup *groups;        /* fusion groups (IrNode.group); none in eager mode */
    int ngroups;
    IrBoundary *boundaries; /* the fusion pass's: each pair of units a value crosses, once */
    int nboundaries;
} IrGraph;

/* Unit U's group (IrBoundary's numbering), or NULL for a node that runs alone. */
const IrGroup *ir_unit_group(const IrGraph *g, int u);
/* The shape unit U works over: its group's work, or the node's shape. */
const Shape *ir_unit_work(const IrGraph *g, int u);

typedef struct IrSymbol {
    const char *name;       /* as written in the .net file ("N") */
    SrcLoc loc;             /* first use */
} IrSymbol;

typedef struct IrInput {
    const char *name;
    DType dtype;
    Shape shape;            /* first dimension is symbol 0, the batch */
    SrcLoc loc;
    int64_t index_rows;     /* i32 indices of embeddings: the fewest rows of their tables
                             * (values must be below it); 0 when no embedding reads it */
} IrInput;

/* IR_COPY: a parameter's value in the half type (param_of; precision.c), what the
 * training and evaluation graphs read in place of a cast of it: written by the update
 * beside the parameter, never saved, so made again from the parameter by whatever sets
 * parameters otherwise (a checkpoint read). IR_CACHE: the decode graph's keys and values
 * of earlier positions (decode.c): zeros when generation starts, after every other
 * tensor, never saved. */
typedef enum IrTensorKind { IR_PARAM, IR_STATE, IR_COPY, IR_CACHE } IrTensorKind;
typedef enum IrInit {
    IR_INIT_ZEROS,
    IR_INIT_ONES,
    IR_INIT_UNIFORM,        /* uniform in [-init_value, init_value] from the seed */
    IR_INIT_CONST,          /* every element init_value */
    IR_INIT_NORMAL,         /* normal, standard deviation init_value, from the seed */
} IrInit;

/* The values a persistent tensor holds between steps, and so in a checkpoint (a resumed
 * one is checked against them, runtime/train_state.c). */
typedef enum IrRange {
    IR_RANGE_FINITE,        /* any finite number: the default */
    IR_RANGE_NONNEG,        /* finite and >= 0: second moments, running variances */
    IR_RANGE_POSITIVE,      /* finite and > 0: the loss scale */
    IR_RANGE_COUNT,         /* a whole number >= 0: counters */
    IR_RANGE_ANY,           /* inf and NaN too: what a step fp16 skips may leave */
} IrRange;

/* "a finite number >= 0": what R allows, for messages. */
const char *ir_range_text(IrRange r);
bool ir_range_holds(IrRange r, float v);

/* The step counters training lowering keeps (compiler/training.c): every step, and every
 * step the optimizer took (not those fp16's scaler skipped). */
#define IR_TRAIN_STEP "cgc.train.step"
#define IR_OPTIM_STEP "cgc.optim.step"

/* A tensor that lives across steps: a parameter, optimizer/training state, a parameter's
 * half copy or a decode cache. Of fixed (non-symbolic) shape, f32 but for the copies.
 * Parameters and state are saved by --save under `name` (ir_tensor_saved). */
typedef struct IrTensor {
    const char *name;       /* params: "h1.weight"; state: "cgc.adam.exp_avg.h1.weight";
                             * copies: "cgc.bf16.h1.weight" */
    IrTensorKind kind;
    DType dtype;
    Shape shape;
    IrInit init;
    double init_value;
    SrcLoc loc;
    int param_of;           /* state tensors and copies: the parameter they belong to, or -1 */
    bool sharded;           /* shard = optimizer: state that holds this rank's slice of
                             * param_of's values (IR_SHARD's shape), not all of them */
    IrRange range;          /* the values it may hold between steps */
} IrTensor;

typedef struct IrProgram {
    const char *model_name;  /* owned (malloc'd); freed by ir_program_free */
    IrSymbol *syms;      int nsyms;      /* syms[0] is the batch */
    IrInput *inputs;     int ninputs;
    IrTensor *tensors;   int ntensors, captensors;   /* parameters first, in source order */
    int nparams;
    int num_classes;     /* C when the loss is cross_entropy over [N, C] logits, else 0 */
    int prediction_input_labels; /* input index of the labels the loss compares to, or -1 */
    IrGraph forward;     /* sema: training-mode forward pass and loss */
    IrGraph train;       /* training.c: one optimizer step (forward, backward, update) */
    IrGraph train_micro; /* training.c: accumulate > 1 only: forward, backward, += grads */
    IrGraph eval;        /* training.c: dropout off, loss, prediction, correct count */
    IrGraph decode;      /* decode.c, for generation only: one position of the prediction */
    bool inference;      /* inference.c cut it to the prediction: no optimizer state */
    TrainConfig cfg;
    /* The batch statistics (batchnorm) with the fewest values per channel in one row of
     * the batch, and where: with one ([N, C]), a batch of one row has no unbiased
     * variance, which the trainer refuses. stats_per_row 0: the model has none. */
    int64_t stats_per_row;
    SrcLoc stats_loc;
    char **strings;      int nstrings, capstrings;   /* ir_intern's pool */
    int *string_slots;   int capslots;               /* its hash table: indices, -1 free */
    int *string_tensor;  /* per pool string: the tensor of that name, or -1 */
} IrProgram;

/* --- tables and shapes (ir.c) --- */
const char *ir_dtype_name(DType t);      /* "f32" ... */
bool ir_dtype_is_float(DType t);
size_t ir_dtype_size(DType t);           /* bytes per element: 4, or 2 for the halves */
DType ir_promote(DType a, DType b);      /* f32 wins; two different halves give f32 */
int64_t ir_numel(const Shape *s, const int64_t *symvals);  /* symvals[k] binds symbol k */
/* FLOPs to compute node N of G once, symbol k at SYMVALS[k]: a matrix product's
 * 2 * numel(a) * (columns of the result); any other op numel * its table COST (1 for
 * arithmetic, 4 for a division or root, 10 for a transcendental function or a random
 * draw) over the larger of its input and output. */
double ir_node_flops(const IrGraph *g, const IrNode *n, const int64_t *symvals);
bool ir_shape_equal(const Shape *a, const Shape *b);
bool ir_shape_is_static(const Shape *s);   /* no symbolic dimension */
bool ir_shape_is_one(const Shape *s);      /* every dimension 1: one element, a scalar too */
bool ir_shape_is_batched(const Shape *s);  /* rows of the batch: dimension 0 is symbol 0 */
/* Questions the passes and backends ask of an op, answered from ops.def's columns. */
static inline IrFuse ir_node_fuse(const IrNode *n) { return ir_op_info[n->op].fuse; }
/* Each output element from the inputs' elements at its broadcast position (FUSE
 * POINTWISE or RANDOM): what a pointwise fusion group computes. */
bool ir_op_is_elementwise(IrOp op);
/* FUSE REDUCTION: the ops a reduce or row group is built around. */
bool ir_op_is_reduction(IrOp op);
/* A reduction to the node's own shape (SHAPE OWN: undoing a broadcast), not along an
 * axis. */
bool ir_op_reduces_to_shape(IrOp op);
/* FUSE LEAF: its value is placed before the step (data, a persistent tensor, a
 * constant), so no kernel computes it and a group reads it as an operand. */
bool ir_node_is_placed(const IrNode *n);
/* An f32 constant: written into the kernel that reads it, not passed as an operand. */
bool ir_node_is_literal(const IrNode *n);
/* The program input N reads (ATTRS INPUT_NAME), or -1. */
int ir_node_input(const IrNode *n);
/* The persistent tensor N reads or writes (ATTRS TENSOR_NAME or TARGET_NAME), or -1. */
int ir_node_tensor(const IrNode *n);
/* The persistent tensor whose storage placed leaf N is (a READ), or -1. */
int ir_node_reads_tensor(const IrNode *n);
/* An assignment (FUSE EFFECT): N writes persistent tensor n->index after the step. */
bool ir_node_is_assign(const IrNode *n);
/* The name of the input or persistent tensor N's index names, or NULL. */
const char *ir_node_table_name(const IrProgram *p, const IrNode *n);
/* The kernel parameters group member N brings of its own: its output when STORED (an
 * EFFECT's is the tensor it writes), a SCALAR's value, and the seed of the first RANDOM
 * member (*SEED, shared by the kernel's members). */
int ir_member_params(const IrNode *n, bool stored, bool *seed);
/* Whether V, not finite, is what node N holds by definition, not by an overflow: the
 * -inf a max pooling's window reads outside the image (--detect-anomaly passes it). */
bool ir_nonfinite_by_design(const IrNode *n, double v);
/* NumPy broadcast of A and B into OUT; false when they do not broadcast (a symbol only
 * matches itself or 1). */
bool ir_broadcast_shape(const Shape *a, const Shape *b, Shape *out);
/* S stretches (NumPy rules) to exactly WORK: a group member of shape S may be computed
 * over WORK. */
bool ir_shape_fits(const Shape *s, const Shape *work);
/* "[N, 784]" into BUF (which it returns), symbols by name. */
const char *ir_shape_str(const IrProgram *p, const Shape *s, char *buf, size_t n);
Shape ir_shape0(void);                   /* the scalar shape [] */
Shape ir_shape_reduce(const Shape *s, int axis);     /* axis removed, or [] for ALL */
Shape ir_shape_keepdim(const Shape *s, int axis);    /* axis set to 1, or all 1s for ALL */

/* --- program and graph building (ir.c). Builders check their preconditions with
 * CGC_ASSERT: callers (sema) report user errors before building. --- */
IrProgram *ir_program_new(void);
void ir_program_free(IrProgram *p);
/* A copy of S owned by P (freed with it), for names that must outlive their source: the
 * tables' names and IrNode.name. Equal strings give the same pointer. */
const char *ir_intern(IrProgram *p, const char *s);
/* Symbol NAME's number, adding it when new (at most IR_MAX_SYMBOLS in all). */
int ir_add_symbol(IrProgram *p, const char *name, SrcLoc loc);
int ir_find_symbol(const IrProgram *p, const char *name);   /* -1 when absent */
/* Input number ninputs, of at most IR_MAX_INPUTS. */
int ir_add_input(IrProgram *p, const char *name, DType t, Shape s, SrcLoc loc);
int ir_add_tensor(IrProgram *p, const char *name, IrTensorKind kind, Shape s, IrInit init,
                  double init_value, int param_of, SrcLoc loc);
int ir_find_tensor(const IrProgram *p, const char *name);   /* -1 when absent */
/* Parameter PARAM's copy in half type T (IR_COPY): its initial values are the
 * parameter's, rounded to T. */
int ir_add_copy(IrProgram *p, int param, DType t);
/* Whether a checkpoint holds T: parameters and state, not copies or caches. */
bool ir_tensor_saved(const IrTensor *t);
/* Removes the tensors after the first N (not parameters); their names name none again. */
void ir_drop_tensors(IrProgram *p, int n);
/* Keeps the tensors KEEP marks (in order; a state's parameter with it), renumbering what
 * reads them; no graph may read one that goes. */
void ir_keep_tensors(IrProgram *p, const bool *keep);

void ir_graph_init(IrGraph *g, const char *name);
void ir_graph_free(IrGraph *g);
void ir_graph_copy(IrGraph *dst, const IrGraph *src, const char *name);
/* Appends a fully described node and returns its id. */
int ir_add_node(IrGraph *g, const IrNode *n);
/* Appends group GR and returns its number k (>= 1: IrNode.group's value). */
int ir_add_group(IrGraph *g, const IrGroup *gr);
/* Whether node ID of G has a value in memory after its kernel: a node in no group, or a
 * group member that a node outside its group reads, or a graph output (IrGroup). */
bool ir_member_stored(const IrGraph *g, int id);
/* ir_member_stored of every node of G at once, in time proportional to G (malloc'd). */
bool *ir_stored_members(const IrGraph *g);
/* The operands of every group of G, into COUNT[k - 1] for group k: what its kernel takes
 * as parameters, the symbols aside. A parameter per value it reads from outside (an f32
 * CONST is written into the kernel instead), per member it stores or ASSIGN it makes (the
 * tensor), per RUNTIME member, and one seed for its DROPOUTs. */
void ir_group_operands(const IrGraph *g, int *count);
/* Where each group's members are: nodes [first, end) of the graph, members being
 * consecutive (ir_verify checks it). A group with no member has first == end == 0. */
typedef struct IrSpan {
    int first, end;
} IrSpan;
/* Per group k, span[k] (span[0] unused), in time proportional to G (malloc'd). */
IrSpan *ir_group_spans(const IrGraph *g);
/* What an attention computes, by its nodes (-1 where there is none): the forward's S =
 * Q K^T (s), scaled by SCALE and masked (CAUSAL, mask), P = softmax(S) (sm), O = P V (o); the
 * backward's dP = dO V^T, dV = P^T dO, dQ = dS K and dK = dS^T Q. */
typedef struct IrAttention {
    bool backward, causal;
    double scale;
    int s, mask, sm, q, k, v, o;
    int dout, dq, dk, dv;
} IrAttention;
/* Attention group K's parts, read from its members (and, for a backward group, O from its
 * forward group's). An internal error where K is not a whole chain. */
IrAttention ir_attention_group(const IrGraph *g, const IrSpan *span, int k);
/* The composition (builtins.c) whose softmax is SM, in any graph, through the precision's
 * casts: false where SM is not attention's softmax over the scaled, masked products. Its
 * O is the first product P V after SM. */
bool ir_attention_chain(const IrGraph *g, int sm, IrAttention *a);
/* The nodes of G that node OUT reads, directly or not, and OUT (malloc'd flags). */
bool *ir_cone(const IrGraph *g, int out);
const char *ir_group_kind_name(IrGroupKind kind);   /* "pointwise", "reduce", "row", "gemm" */
/* Member ID of a GEMM group that is not stored: it stays in cuBLASLt's f32 accumulator,
 * not rounded to its dtype (IR_GROUP_GEMM). */
bool ir_gemm_unrounded(const IrGraph *g, int id);

int ir_input(IrGraph *g, const IrProgram *p, int input, SrcLoc loc);
int ir_read(IrGraph *g, const IrProgram *p, int tensor, SrcLoc loc);
int ir_const(IrGraph *g, double value, SrcLoc loc);
int ir_runtime(IrGraph *g, IrRuntimeScalar which, SrcLoc loc);
int ir_unary(IrGraph *g, IrOp op, int x, SrcLoc loc);
int ir_binary(IrGraph *g, IrOp op, int a, int b, SrcLoc loc);  /* broadcasting */
int ir_select(IrGraph *g, int cond, int a, int b, SrcLoc loc);
int ir_cast(IrGraph *g, int x, DType t, SrcLoc loc);           /* x itself when same */
/* The number of elements of shape S as a scalar node: a constant where S is static; a
 * symbolic size (the batch) is only known when the graph runs, so it is counted there,
 * the sum of ones over a tensor of just those dimensions. */
int ir_count(IrGraph *g, const Shape *s, SrcLoc loc);
int ir_dropout(IrGraph *g, int x, int counter, double p, int stream, SrcLoc loc);
int ir_reduce(IrGraph *g, IrOp op, int x, int axis, SrcLoc loc);
int ir_reshape(IrGraph *g, int x, Shape s, SrcLoc loc);
int ir_broadcast(IrGraph *g, int x, Shape s, SrcLoc loc);
int ir_reduce_to(IrGraph *g, int x, Shape s, SrcLoc loc);     /* x itself when same */
int ir_transpose(IrGraph *g, int x, SrcLoc loc);
/* X with its axes reordered: result axis i is X's axis PERM[i] (a permutation of
 * 0..rank-1), kept in the node's flags, 3 bits an axis (ir_perm_axis). */
int ir_permute(IrGraph *g, int x, const int *perm, SrcLoc loc);
int ir_perm_axis(const IrNode *n, int i);
/* TABLE [V, D]'s rows at the i32 INDEX (any shape): [..., D]. EMBED_GRAD: D's rows
 * [..., D] summed into a table of V rows, by INDEX. */
int ir_embed(IrGraph *g, int table, int index, SrcLoc loc);
/* i32 [N]: 0, 1, ..., N - 1. */
int ir_arange(IrGraph *g, int64_t n, SrcLoc loc);
/* X [.., T, T] with VALUE above the diagonal (-INFINITY: a causal attention's scores). */
int ir_causal_mask(IrGraph *g, int x, double value, SrcLoc loc);
int ir_embed_grad(IrGraph *g, int d, int index, int64_t rows, SrcLoc loc);
int ir_matmul(IrGraph *g, int a, int b, int flags, SrcLoc loc);
/* The shape UNFOLD makes of IMAGE [N, C, H, W] (IrWindow), or false when the window does
 * not fit it: a kernel larger than the padded image, channels not divisible by groups. */
bool ir_window_shape(const Shape *image, const IrWindow *w, int flags, Shape *out);
/* Output positions of window W along dimension AXIS (0: height, 1: width) of an image
 * IN long: (IN + 2*pad - dilation*(kernel - 1) - 1) / stride + 1, or -1 when the kernel
 * overruns the padded image. */
int64_t ir_window_extent(int64_t in, const IrWindow *w, int axis);
/* The pixel (flat index into the image IMAGE, dims bound) that entry E (flat) of UNFOLD's
 * layout FLAGS reads, or -1 outside the image: the definition above, element by element,
 * for tests and checks (the executors walk the windows their own way). */
int64_t ir_window_source(const IrWindow *w, int flags, const int64_t image[4], int64_t e);
int ir_unfold(IrGraph *g, int x, IrWindow w, int flags, double outside, SrcLoc loc);
/* The first node of G before UNFOLD ID that is the same UNFOLD of the same image (window,
 * layout, outside value), or -1: fusion gives each kernel that gathers a pool's patches a
 * copy of its UNFOLD, which an executor that stores them computes once. */
int ir_unfold_twin(const IrGraph *g, int id);
/* The image of shape IMAGE that UNFOLD (W, FLAGS) of it would give X's shape. */
int ir_fold(IrGraph *g, int x, Shape image, IrWindow w, int flags, SrcLoc loc);
/* (train, eval), both of one shape, in their promoted dtype. */
int ir_mode_switch(IrGraph *g, int train, int eval, SrcLoc loc);
int ir_softmax(IrGraph *g, IrOp op, int x, int axis, SrcLoc loc);   /* SOFTMAX, LOG_SOFTMAX */
int ir_softmax_grad(IrGraph *g, IrOp op, int d, int y, int axis, SrcLoc loc);
int ir_cross_entropy(IrGraph *g, int logits, int labels, SrcLoc loc);
int ir_ce_grad(IrGraph *g, int d, int logits, int labels, SrcLoc loc);
int ir_count_correct(IrGraph *g, int logits, int labels, SrcLoc loc);
int ir_assign(IrGraph *g, const IrProgram *p, int tensor, int value, SrcLoc loc);
/* X (f32) summed over the ranks of the job, in bucket BUCKET (>= 0). */
int ir_allreduce(IrGraph *g, int x, int bucket, SrcLoc loc);
/* OP (of the COLLECTIVE family) of X (f32), of SHAPE, in bucket BUCKET (>= 0; SHARD, which
 * sends nothing: -1). */
int ir_collective(IrGraph *g, IrOp op, int x, Shape shape, int bucket, SrcLoc loc);

/* --- text form (ir.c) --- */
/* The stable text form of one graph, with the program's tables first. */
void ir_print(FILE *out, const IrProgram *p, const IrGraph *g);
/* Structural check (ids in range and earlier, arities, shapes agree with the op's rule);
 * on a violation reports CGC_INTERNAL naming the node. Passes call it in debug builds. */
void ir_verify(const IrProgram *p, const IrGraph *g);
/* The shape N's op produces from its inputs in G, by the table's rule (ops.def, SHAPE);
 * false where the shape is the node's own attribute (RESHAPE, BROADCAST, REDUCE_TO,
 * leaves). A rank of -1 says the inputs admit no shape. */
bool ir_node_shape(const IrProgram *p, const IrGraph *g, const IrNode *n, Shape *s);

#endif
