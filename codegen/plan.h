/* plan.h: the kernel plan: what a device runs for each graph of a program.
 *
 * codegen turns the graphs of a lowered IrProgram into
 *   - kernels: CUDA C source, one `extern "C" __global__` function each, readable and
 *     stable (golden-tested), compiled together into one module by NVRTC;
 *   - buffers: every value a step reads or writes (node results, persistent tensors,
 *     program inputs, constants), each with a dtype and a shape that may contain symbols
 *     (the batch); a runtime places them all in one device arena;
 *   - for each graph, the host plan: the ordered list of kernel launches and GEMM calls
 *     with the buffers and sizes they take.
 * In the eager mode every IR node that computes something becomes one launch or one
 * GEMM; RESHAPE and READ are views (no copy); the ASSIGNs of a graph are copies launched
 * after everything else (IR semantics: writes land after the step). In the default mode
 * each fusion group (IrGraph.groups, compiler/fusion.c) is one kernel, groups sharing a
 * `multi` number one launch, and only values read outside their group get buffers;
 * nodes outside any group are rendered as in eager.
 *
 * The kernel ABI, which codegen, the runtimes (runtime/device.h) and the CPU emulation of
 * CUDA (tests/emu) all keep:
 *   - 1-D grid and 1-D block; no dynamic shared memory; static __shared__ only.
 *   - Parameters are, in order, those of PlanKernel.param: device pointers (8 bytes),
 *     int64_t, uint64_t or float; a launch passes one PlanArg per parameter.
 *   - Kernels loop (grid-stride) over their work, so any grid size >= 1 is correct; the
 *     launch's grid is only a performance choice.
 *   - Storage: f32 as float, f16 and bf16 as 16-bit patterns (cgc_half, cgc_bf16 in the
 *     device prelude; math in f32, stores round to nearest even), i32 as int32_t.
 *   - Deterministic: no atomics in reductions, fixed reduction order, so a run repeats bit
 *     for bit on the same device.
 *   - A multi-tensor launch with `last` groups (ir.h) takes a last parameter `counter`
 *     (Plan.launch_counter): each block adds 1 when done, the block that sees
 *     gridDim.x - 1 runs the last groups and sets it back to 0. So it is 0 between
 *     launches, and one counter serves every such launch: launches never overlap (one
 *     stream, or one CUDA graph captured from it). The atomic only orders; it adds
 *     nothing to any result.
 */
#ifndef CGC_PLAN_H
#define CGC_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../compiler/ir.h"

/* Parameters of one kernel at most: a fusion group's kernel takes its operands (the
 * fusion pass keeps them within IR_GROUP_MAX_OPERANDS), a sym<k> per symbol and a
 * counter, an eager kernel a few. A multi-tensor kernel (PlanKernel.packed) takes up to
 * PLAN_MAX_SLOTS 8-byte slots instead: CUDA's 32,764 bytes of kernel parameters (since
 * CUDA 12.1, on sm_70 and later), so that a model's optimizer updates share one launch;
 * one with more is split into several kernels (plan.c). */
enum { PLAN_MAX_PARAMS = 256, PLAN_MAX_SLOTS = 4094, PLAN_MAX_PARAM_BYTES = 32764 };
_Static_assert(PLAN_MAX_PARAMS >= IR_GROUP_MAX_OPERANDS + IR_MAX_SYMBOLS + 1,
               "a fusion group's kernel fits its parameters");
_Static_assert(PLAN_MAX_SLOTS * 8 <= PLAN_MAX_PARAM_BYTES && PLAN_MAX_PARAMS <= PLAN_MAX_SLOTS,
               "a packed kernel's slots fit CUDA's kernel parameters");

typedef enum PlanMode {
    PLAN_EAGER,             /* one kernel or GEMM per IR op */
    PLAN_DEFAULT,           /* the fusion groups of the graphs (the program must have been
                             * through fusion_assign) */
    PLAN_REDUCE_OVERHEAD,   /* PLAN_DEFAULT's kernels, with the step counter on the device
                             * (Plan.step_state), so that a runtime can capture a training
                             * step once as a CUDA graph and replay it */
    PLAN_MAX_AUTOTUNE,      /* PLAN_REDUCE_OVERHEAD's plan; a runtime on a GPU then times
                             * each launch's grid and each GEMM's cuBLASLt algorithm and
                             * keeps the fastest (runtime/autotune.h) */
} PlanMode;

/* "eager", "default", "reduce-overhead", "max-autotune": --mode's names. */
const char *plan_mode_name(PlanMode mode);
/* The mode NAME names (plan_mode_name's inverse), into *OUT; false for none. */
bool plan_mode_from_name(const char *name, PlanMode *out);
/* The modes whose plans keep the step counter on the device and are captured as CUDA
 * graphs: reduce-overhead and max-autotune. */
bool plan_mode_captures(PlanMode mode);

/* ---- buffers ---- */

typedef enum PlanBufferKind {
    PB_NODE,     /* the value of one node of one graph */
    PB_TENSOR,   /* persistent tensor `index` (parameter or state), always f32 */
    PB_INPUT,    /* program input `index`, sized for the largest batch */
    PB_CONST,    /* a scalar constant `value`, written once when the arena is set up */
    PB_DATA,     /* a runtime buffer of the data pipeline (order, loss totals); see below */
    PB_COUNTER,  /* Plan.launch_counter: one 32-bit counter (i32 [1], used as unsigned int)
                  * in the persistent region, zero when the arena is allocated (Device's
                  * alloc zeroes); see the ABI below */
    PB_STEP,     /* Plan.step_state: the device's step counter, int64_t [2] (stored as
                  * i32 [4]) in the persistent region; see "the data pipeline" below */
} PlanBufferKind;

typedef struct PlanBuffer {
    PlanBufferKind kind;
    DType dtype;
    Shape shape;            /* symbols allowed; bytes = numel with the symbols' maxima */
    int alias_of;           /* -1, or the buffer whose memory this one is (views) */
    int index;              /* PB_TENSOR, PB_INPUT: table index; PB_NODE: node id */
    int graph;              /* PB_NODE: PlanGraphId of the node */
    double value;           /* PB_CONST */
    const char *what;       /* for the host plan and errors: "h1", "h1.weight", "%12" */
} PlanBuffer;

/* ---- kernels ---- */

typedef enum PlanParamType { PP_PTR, PP_I64, PP_U64, PP_F32 } PlanParamType;

typedef struct PlanKernel {
    char *name;             /* C identifier, unique in the plan, stable across runs */
    char *source;           /* the kernel's definition, without the prelude: a .cu file of
                             * its own is `#include "cgc_device.h"` then this text */
    int nparams;            /* at most PLAN_MAX_PARAMS, or PLAN_MAX_SLOTS when packed */
    PlanParamType *param;   /* [nparams] (plan_kernel_params allocates the three) */
    const char **param_ctype;   /* "float *", "const cgc_half *", "int64_t" */
    /* Which pointer parameters are __restrict__: no two of them may overlap where one
     * is written (the emulation checks each launch). A kernel that reads and writes one
     * tensor in place through two parameters has neither restrict. */
    bool *param_restrict;
    /* Whether the parameters are passed as one: a `const __grid_constant__ cgc_slots<N>`
     * (cgc_device.h) whose 8-byte slot i holds parameter i (a pointer, an integer, or a
     * float in its low 32 bits), so that the kernel may index them. A launch passes the
     * address of its N values, one after another, as the kernel's only parameter. */
    bool packed;
    int block;              /* threads per block; the kernel's __launch_bounds__ */
    /* Whether any block of whole warps up to `block` computes the same values: a
     * grid-stride loop with nothing shared across a block (no block-wide sum, barrier
     * or shared memory), so that max-autotune may launch it with fewer threads. */
    bool any_block;
} PlanKernel;

/* ---- steps ---- */

typedef enum PlanArgKind {
    ARG_BUFFER,             /* device address of buffer `index` */
    ARG_SYMBOL,             /* int64: value of symbol `index` in this run */
    ARG_SEED,               /* uint64: the run's seed (cfg.seed) */
    ARG_I64,                /* int64: `value` */
    ARG_F32,                /* float: `value` */
    ARG_RUNTIME,            /* float: runtime scalar `index` (IrRuntimeScalar) of this run */
    ARG_RANK_ROW,           /* uint64: this rank's first row of the micro-batch (0 with one
                             * rank): dropout masks are keyed by the micro-batch's rows */
    ARG_RANK,               /* int64: this process's rank in the job (0 with one): the
                             * slice of a parameter that IR_SHARD takes */
} PlanArgKind;

typedef struct PlanArg {
    PlanArgKind kind;
    int index;
    double value;
} PlanArg;

/* Launch geometry: blocks = ceil(numel(work) / items_per_block), clamped to
 * [1, max_blocks]; threads per block = the kernel's block. */
typedef struct PlanLaunch {
    int kernel;             /* index into Plan.kernels */
    Shape work;             /* symbols allowed */
    int64_t items_per_block;
    int64_t max_blocks;
    int nargs;              /* == the kernel's nparams */
    PlanArg *arg;           /* nargs of them, owned by the plan */
} PlanLaunch;

typedef enum GemmCompute {
    GEMM_F32,               /* fp32 inputs, fp32 math */
    GEMM_TF32,              /* fp32 inputs rounded to tf32 (CUBLAS_COMPUTE_32F_FAST_TF32) */
    GEMM_F32_ACCUM,         /* f16 or bf16 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F) */
} GemmCompute;

/* cuBLASLt epilogues (an IR_GROUP_GEMM group): after the product, in f32, add the bias
 * (a vector of n, of bias_type, broadcast over the m rows of C), then the activation, and
 * round once to C's type. GELU is the tanh form (cuBLASLt's). With `aux` >= 0 (GELU only)
 * the sum before the activation is also stored, rounded to C's type, in buffer `aux`
 * ([m, n], row-major like C). Only plain (batch rank 0) GEMMs take an epilogue. */
typedef enum GemmEpilogue {
    GEMM_EPI_NONE,
    GEMM_EPI_BIAS,          /* C = A@B + bias */
    GEMM_EPI_RELU_BIAS,     /* C = relu(A@B + bias) */
    GEMM_EPI_GELU_BIAS,     /* C = gelu_tanh(A@B + bias); aux = A@B + bias when aux >= 0 */
} GemmEpilogue;

/* The tile shapes of the generated tensor-core GEMMs (codegen/gemm_tc.c): a block
 * computes a BM x BN tile of C, its WARPS_M x WARPS_N warps a part each, k BK at a time. */
enum { PLAN_GEMM_TILES = 4 };
typedef struct PlanGemmTile {
    int bm, bn, bk, warps_m, warps_n;
} PlanGemmTile;
extern const PlanGemmTile plan_gemm_tiles[PLAN_GEMM_TILES];

/* C[b] = op(A[b]) @ op(B[b]), row-major, for b < batch (numel of `batch`, symbols
 * allowed). op(A) is [m, k]: A is stored [m, k], or [k, m] when trans_a. op(B) is [k, n]:
 * B is stored [k, n], or [n, k] when trans_b. Strides are in elements between batches;
 * 0 broadcasts an operand over the batch. m, n, k are dims (IR encoding: < 0 is a
 * symbol). beta is 0: C is overwritten. */
typedef struct PlanGemm {
    int a, b, c;            /* buffers */
    bool trans_a, trans_b;
    int64_t m, n, k;
    Shape batch;            /* leading dims of C; rank 0 for a plain GEMM */
    Shape k_lead;           /* IR_MATMUL_BATCH_SUM: the operands' leading dims, folded into
                             * the contraction (plan_gemm_k); rank 0 otherwise */
    Shape m_lead;           /* a batched product whose B is shared and whose A is stored
                             * [batch..., m, k]: A's batches are consecutive rows of one
                             * matrix, and C's too, so the batch dims fold into the rows
                             * (plan_gemm_m) and the GEMM is a plain one (batch rank 0);
                             * a convolution's product, [N, L, C*kh*kw] @ W^T, is one.
                             * Rank 0 otherwise */
    bool a_batched, b_batched;  /* false: the operand is shared by every batch (stride 0) */
    DType a_type, b_type, c_type;
    GemmCompute compute;
    GemmEpilogue epilogue;  /* GEMM_EPI_NONE unless the step runs a GEMM group */
    int bias;               /* epilogue: the bias buffer ([n] or [1, n]); else -1 */
    DType bias_type;        /* epilogue: the bias buffer's dtype (C's type, or f32) */
    int aux;                /* GEMM_EPI_GELU_BIAS: the pre-activation buffer, or -1 */
    /* max-autotune: the generated tensor-core kernel per tile shape (plan_gemm_tiles)
     * that computes this GEMM, epilogue included; -1 where there is none (other modes,
     * graphs other than train and train_micro, GEMMs plan_gemm_generable refuses, and
     * a tile shape that a smaller one of the same warps beats at this GEMM's size:
     * as many blocks, less of C that is not there; gemm_tc.c's tile_dominated). */
    int tile_kernel[PLAN_GEMM_TILES];
} PlanGemm;

/* G's contraction length with the symbols bound: k, times the batches it runs through. */
int64_t plan_gemm_k(const PlanGemm *g, const int64_t *symvals);
/* G's rows with the symbols bound: m, times the batches folded into them (m_lead). */
int64_t plan_gemm_m(const PlanGemm *g, const int64_t *symvals);

typedef enum PlanStepKind { STEP_LAUNCH, STEP_GEMM } PlanStepKind;

typedef struct PlanStep {
    PlanStepKind kind;
    PlanLaunch launch;
    PlanGemm gemm;
    int node;               /* the IR node it computes (of this graph), or -1 */
    int group;              /* the fusion group (IrNode.group) it runs, or 0; a multi-tensor
                             * launch names its first group */
    SrcLoc loc;             /* its .net location, for errors ({0,0}: none) */
    const char *what;       /* "relu h1", "assign h1.weight", for the host plan/errors */
    int sums_parts;         /* > 0: the second pass of a split REDUCE_TO (node), summing
                             * this many parts that the step before computed (and the
                             * FLOPs) */
} PlanStep;

typedef enum PlanGraphId { PG_TRAIN, PG_TRAIN_MICRO, PG_EVAL, PG_FORWARD, PG_DECODE, PG_NUM } PlanGraphId;
/* Each graph's name: "train" ... "decode". */
extern const char *const codegen_graph_label[PG_NUM];

/* Several ranks: one bucket of collectives over the ranks (the IR_ALLREDUCE,
 * IR_REDUCE_SCATTER or IR_ALLGATHER nodes with one IrNode.index), each member read from
 * its input's buffer and written to its own (a sum's is its input's: it is made in
 * place). A runner starts it after step AFTER of its graph (-1: before the first), where
 * the last of its inputs has been computed, and makes step WAIT (nsteps: the graph's
 * end) and every later one wait for it. It runs beside the steps in between, which write
 * none of its inputs and name none of its outputs (the memory plan keeps both live from
 * AFTER to WAIT). A bucket whose results fusion orders before all its inputs are
 * computed runs as several, one member each. */
typedef struct PlanCollective {
    IrOp op;                /* its members' */
    int bucket;             /* IrNode.index of its members */
    int after, wait;        /* steps */
    int nmembers;
    int *member;            /* the members' input root buffers, in node order */
    int *out;               /* their own (for a sum, the same) */
} PlanCollective;

typedef struct PlanGraph {
    const IrGraph *ir;      /* NULL when the program has no such graph (train_micro) */
    PlanStep *steps;
    int nsteps;
    int *node_buffer;       /* per IR node: the buffer holding its value, or -1 (ASSIGN) */
    PlanCollective *colls;  /* by AFTER, then bucket */
    int ncolls;
} PlanGraph;

/* ---- the data pipeline (runtime kernels that are not IR ops) ----
 * The dataset lives on the device for the whole run; these kernels are part of every
 * plan's module, named as below, with these parameters. STATE, where a kernel takes it, is
 * the step counter of a reduce-overhead plan (the PB_STEP buffer), or NULL (0):
 *     state[0] = the micro-step about to run (IR_RT_MICRO_STEP: optimizer step *
 *                accumulate + micro-batch), state[1] = its first row in the epoch's order.
 * With it the training step reads nothing the host passes per step, and so can be
 * captured once and replayed: the host writes the state only where the sequence jumps
 * (an epoch's start, a resumed run), and cgc_step_advance moves it after each micro-batch.
 * In such a plan, the train graphs' kernels that read IR_RT_MICRO_STEP read state[0]
 * through a parameter `const int64_t *` instead of taking it as a float.
 *   cgc_order_draws(int32_t *draws, int64_t n, uint64_t seed, int64_t epoch)
 *       draws[k] = rng_below(seed, RNG_SHUFFLE, (epoch << 40) + k, n - k) for k < n - 1
 *   cgc_order_shuffle(int32_t *order, const int32_t *draws, int64_t n, int64_t shuffle)
 *       order = identity, then (when shuffle) Fisher-Yates swaps order[n-1-k] with
 *       order[draws[k]] for k = 0.. n-2 (one thread: data_order()'s exact sequence)
 *   cgc_gather_f32(float *out, const float *data, const int32_t *order, int64_t start,
 *                  int64_t count, int64_t row, const int64_t *state, int64_t stride,
 *                  int64_t base)
 *       out[r, c] = data[base + order[first + r] * stride + c] for c < row,
 *       first = state ? state[1] : start (stride = row, base 0: whole rows; a text's
 *       windows overlap their labels: stride = row + 1, base = the epoch's phase, + 1 for
 *       the labels)
 *   cgc_gather_i32(int32_t *out, const int32_t *data, const int32_t *order, ...)  same
 *       (order NULL (0): rows first + r in file order)
 *   cgc_track_loss(double *totals, const float *loss, const float *skipped, int64_t step,
 *                  int64_t check_finite, const int64_t *state, int64_t accumulate,
 *                  int64_t weight_num, int64_t weight_den)
 *       totals[0] += loss * (weight_num / weight_den, in double: what a rank's loss weighs,
 *       1 / 1 with one rank); totals[1] += 1; totals[2] += skipped (skipped may be NULL);
 *       when check_finite and loss is not finite and totals[3] < 0: totals[3] = the
 *       optimizer step (state ? state[0] / accumulate : step)
 *   cgc_step_advance(int64_t *state, int64_t rows)
 *       state[0] += 1; state[1] += rows (after a micro-batch of ROWS rows)
 *   cgc_track_eval(double *totals, const float *loss, const float *correct, int64_t count)
 *       totals[0] += loss * count; totals[1] += correct (correct may be NULL)
 * Each is launched with grid 1 and its kernel's block unless PlanKernel says otherwise;
 * Plan.data_kernel[] gives their indices. */
typedef enum PlanDataKernel {
    PDK_ORDER_DRAWS, PDK_ORDER_SHUFFLE, PDK_GATHER_F32, PDK_GATHER_I32, PDK_TRACK_LOSS,
    PDK_TRACK_EVAL, PDK_STEP_ADVANCE, PDK_NUM,
} PlanDataKernel;
/* The most parameters a data kernel takes (cgc_track_loss and the gathers take 9). */
enum { PLAN_DATA_KERNEL_MAX_PARAMS = 9 };

/* ---- fully fused MLP passes (codegen/mlp_fused.c) ----
 * max-autotune's other candidate for a narrow MLP's passes, in the manner of
 * tiny-cuda-nn: a chain of GEMM steps of a training graph (its layers), each layer's
 * input made from the layer before's output, run as one kernel that keeps every layer's
 * activations in registers and each weight matrix in shared memory. Every layer is a
 * plain GEMM, f16 or bf16 with f32 accumulation, at most PLAN_MLP_MAX_WIDTH wide in n,
 * its k the layer before's n (the first layer's k is free: its input streams through
 * shared memory), and every output but the last of the operands' type. Two kinds:
 *   - forward: consecutive steps c_j = x_j @ W_j^T (W stored [n, k]), no epilogue or
 *     bias + relu, x_0 = a, x_j = c_{j-1};
 *   - backward (the input gradients): steps c_j = x_j @ W_j (W stored [k, n]), no
 *     epilogue, x_0 = a, x_j = g_j(c_{j-1}, act_j): g_j the gradient of the layer's
 *     activation (relu_grad: act_j > 0 ? c_{j-1} : 0; tanh_grad, sigmoid_grad,
 *     gelu_grad, gelu_tanh_grad, silu_grad), act_j the activation's output or input as
 *     g_j takes it, which a launch step between them (PlanMlp.link) computes into layer
 *     j's A; the
 *     steps between the layers (that launch, the weight gradients' GEMMs) neither write
 *     what the kernel reads nor touch a c_j before its layer, so the kernel can run every
 *     layer at the first one's step. Those steps still run: the kernel does not store x_j.
 * The kernel writes every layer's output c_j, rounded once, as its step would; what it
 * saves is a launch per layer and the reads of the activations.
 * Its parameters, in order (plan_mlp_args): c_0 .. c_{L-1} (the outputs), a (the input),
 * w_0 .. w_{L-1}, then per layer bias_j (forward) or act_j (backward; act_0 is 0),
 * 0 where a layer has none, all device pointers, and m (int64_t). A block computes
 * plan_mlp_rows[shape] rows (grid-stride), one warp per 16 rows; any grid >= 1 is
 * correct, plan_mlp_grid gives one block per rows. sm_80 and later, like the GEMMs. */
enum { PLAN_MLP_MAX_LAYERS = 8, PLAN_MLP_MAX_WIDTH = 128, PLAN_MLP_SHAPES = 3 };
extern const int plan_mlp_rows[PLAN_MLP_SHAPES];     /* 16, 32, 64 */

typedef struct PlanMlp {
    PlanGraphId graph;
    bool backward;
    int nlayers;
    int step[PLAN_MLP_MAX_LAYERS];  /* layer j's GEMM step of the graph, ascending; the
                                     * kernel runs at step[0] and the others are skipped */
    int link[PLAN_MLP_MAX_LAYERS];  /* backward, j >= 1: the launch step that computes
                                     * x_j = g_j(c_{j-1}, act_j); else -1 */
    int act[PLAN_MLP_MAX_LAYERS];   /* backward, j >= 1: the buffer act_j; else -1 */
    IrOp grad[PLAN_MLP_MAX_LAYERS]; /* backward, j >= 1: g_j (IR_RELU_GRAD, ...) */
    int kernel[PLAN_MLP_SHAPES];    /* the fused kernel per shape (Plan.kernels) */
} PlanMlp;

/* ---- implicit-GEMM convolutions (codegen/gemm_tc.c) ----
 * max-autotune's other candidate for a convolution's patches: an UNFOLD step of a
 * training graph into rows (groups 1, its kernel storing nothing else) whose every reader
 * is a GEMM step with generated kernels that reads the patches as the [N*OH*OW, C*kh*kw]
 * matrix, as its A (the product, patches @ W^T) or its B (the weight gradient, summed
 * over the batch: dY^T @ patches). Each reader has kernels that gather the operand's
 * tiles from the image itself (cgc_patch_load, cgc_device.h), taking the image for that
 * operand and otherwise the generated GEMMs' ABI. All or nothing: with the run on, the
 * UNFOLD step is skipped and every reader runs its implicit kernel, so the patches,
 * kh*kw times the image, are neither written nor read. The memory plan keeps the image
 * live until the last reader either way.
 * The product's layout: where the product ([N, OH*OW, out], channels last) is read only
 * by a TRANSPOSE step into the language's NCHW [N, out, OH*OW], its reader's implicit
 * kernels store C in that order, into the TRANSPOSE's buffer, and the run skips the
 * TRANSPOSE too; the memory plan counts that buffer live from the reader on. And the
 * product's gradient: where the weight gradient reads the gradient [N, out, OH*OW] through
 * a TRANSPOSE to channels last, and the only other readers of that transpose are GEMMs
 * reading it as A (the data gradient, dY @ W, whose FOLD stays), those GEMMs join the
 * run and its kernels read the NCHW gradient as that matrix (cgc_nchw_load): the
 * TRANSPOSE is skipped too, and the gradient kept live to its last reader.
 * The product's epilogue: where the NCHW product's only reader is one pointwise fusion
 * group over exactly its elements (a bias, an activation, a cast: PlanWindow.epilogue),
 * and no step between the product and that group names what the group reads or writes,
 * the storing reader's implicit kernels compute the group at each element of C they hold
 * (fused.c, fused_render_epilogue) and store its outputs instead of C; the run skips the
 * group's step too, and the memory plan counts the group's buffers live from the reader
 * on.
 * A convolution library (runtime/device.h, ConvCall: cuDNN on a GPU) is the run's other
 * form: where the product stores NCHW, the weight gradient and the data gradient read
 * the NCHW gradient, and the data gradient's only reader is a FOLD (col2im) over the
 * same window into the image's gradient, each reader is one library call on the NCHW
 * tensors themselves (the forward, the filter gradient, the data gradient into the
 * FOLD's buffer) and the UNFOLD, both TRANSPOSEs and the FOLD are skipped. Such runs are
 * found in every mode and graph (PlanWindow.conv), the implicit GEMMs only where the
 * readers have generated kernels (PlanWindow.implicit: max-autotune's training graphs,
 * and the evaluation's products of the convolutions whose training run has them: those
 * runs are not timed but follow the training run's choice, each with its own epilogue,
 * a batch norm's inference form for one; the forward graph, which the device does not
 * run, has none). */
enum { PLAN_WINDOW_MAX_READERS = 4 };
typedef struct PlanWindow {
    PlanGraphId graph;
    int unfold;                     /* the UNFOLD launch step */
    int image;                      /* the buffer the UNFOLD reads */
    int nreaders;
    int reader[PLAN_WINDOW_MAX_READERS];    /* the GEMM steps, ascending */
    char operand[PLAN_WINDOW_MAX_READERS];  /* 'a' or 'b': the reader's operand that is the
                                             * patches, and the image in its kernels; 0 for
                                             * a data gradient, which reads none */
    int kernel[PLAN_WINDOW_MAX_READERS][PLAN_GEMM_TILES];   /* per tile shape; -1: none */
    int store_reader;               /* the reader that stores NCHW, or -1 */
    int transpose;                  /* its TRANSPOSE step, skipped with the run (or -1) */
    int store;                      /* the TRANSPOSE's buffer, its kernels' C (or -1) */
    int follows;                    /* an evaluation graph's run: the training
                                     * run of the same convolution whose implicit choice
                                     * it takes (autotune.c); -1 for a training run */
    int epilogue;                   /* the pointwise group step computed in the storing
                                     * reader's kernels, skipped with the run (or -1) */
    int epi_nargs;                  /* its arguments in those kernels, after the GEMM ABI's */
    PlanArg *epi_arg;               /* owned by the plan */
    int grad_transpose;             /* the gradient's TRANSPOSE step, skipped with the run (or -1) */
    int grad;                       /* the gradient [N, out, OH*OW], its readers' A (or -1) */
    bool reads_grad[PLAN_WINDOW_MAX_READERS];   /* the reader's A is that gradient */
    bool implicit;                  /* every reader has a kernel of some tile shape */
    bool conv;                      /* the library can run it (above) */
    int fold;                       /* conv: the data gradient's FOLD step, or -1 */
    int fold_out;                   /* conv: its buffer, the image's gradient (or -1) */
    Shape image_shape;              /* [N, C, H, W], symbols allowed */
    IrWindow win;                   /* the UNFOLD's window */
} PlanWindow;

typedef struct Plan {
    const IrProgram *p;
    PlanMode mode;
    const char *source_name;    /* the .net file's base name, sanitised, for comments */
    PlanBuffer *buffers;   int nbuffers;
    PlanKernel *kernels;   int nkernels;
    PlanGraph graph[PG_NUM];
    int data_kernel[PDK_NUM];
    int input_buffer[IR_MAX_INPUTS];       /* per program input: its PB_INPUT buffer */
    int tensor_buffer_base;     /* buffers [base, base + ntensors) are the tensors */
    int launch_counter;         /* the PB_COUNTER buffer, or -1 when no launch has `last`
                                 * groups */
    int step_state;             /* the PB_STEP buffer (reduce-overhead), or -1 */
    int gemm_kernels_from;      /* kernels [gemm_kernels_from, nkernels) are the generated
                                 * GEMMs (max-autotune's candidates; none elsewhere): a
                                 * module of their own, compiled only when tuning or the
                                 * choices need it (plan_gemm_module_source);
                                 * the implicit GEMMs, then the fused MLP kernels, are
                                 * part of it */
    int mlp_kernels_from;       /* of those, [mlp_kernels_from, nkernels) are the fused
                                 * MLP kernels */
    PlanMlp *mlps;              /* max-autotune: the fused MLP candidates; none elsewhere */
    int nmlps;
    PlanWindow *windows;        /* max-autotune: the implicit-GEMM candidates; none elsewhere */
    int nwindows;
} Plan;

/* ---- max-autotune's choices ----
 * A step's tunable choice: for a launch, the items per block of its kernel (0: the
 * plan's) and its threads per block (0: the kernel's `block`; fewer only where the kernel
 * is any_block), which every launch of that kernel then takes; for a GEMM, the library's
 * algorithm (0: its own; K >= 1: the K-th of cuBLASLt's heuristic list, best first) or,
 * with TILE >= 1, the plan's generated kernel of tile shape TILE - 1
 * (PlanGemm.tile_kernel) instead of the library. None changes what is computed: kernels
 * loop over their work whatever the grid, and every algorithm and kernel computes the
 * same product (to the rounding of its own order of accumulation). */
enum { PLAN_GEMM_ALGOS = 8 };       /* cuBLASLt's algorithms a GEMM chooses among, at most */
typedef struct PlanStepChoice {
    int64_t items;
    int block;
    int algo;
    int tile;
} PlanStepChoice;

/* The choices of a whole plan, as read from a choices file (runtime/autotune.h,
 * autotune_resolve): what the runtime puts in force and what --emit's reproducer
 * replays. */
typedef struct PlanChoices {
    PlanStepChoice *step[PG_NUM];   /* per step of the training graphs; NULL for the others */
    int *mlp_shape;                 /* per fused MLP run (Plan.mlps): its shape, -1 its steps */
    /* per implicit-GEMM run (Plan.windows), [r * PLAN_WINDOW_MAX_READERS + j]: reader j's
     * tile shape, or -1 for all of them: the run off, the UNFOLD step and the readers' own
     * choices */
    int *window_tile;
    /* per implicit-GEMM run, [r * PLAN_WINDOW_MAX_READERS + j]: with the run computed by a
     * convolution library (PlanWindow.conv), reader j's algorithm (0: the library's own
     * choice; K >= 1: the K-th of its list, ConvCall.algo), or -1 for all of them: not by
     * the library. Initially 0 where the run can be (a device without a library runs the
     * steps), -1 elsewhere; at most one of window_tile and window_conv is on. */
    int *window_conv;
    int arch;                       /* what they were made for: 90 for sm_90 */
    char device[128];               /* the GPU they were timed on, or "" (heuristics) */
} PlanChoices;

/* Every step and run with the plan's own choice (items 0, algo 0, tile 0, shape -1). */
void plan_choices_init(PlanChoices *c, const Plan *plan);
void plan_choices_free(PlanChoices *c);
/* Whether C runs any generated GEMM or fused MLP kernel (they need that module). */
bool plan_choices_generated(const PlanChoices *c, const Plan *plan);

/* ---- building (codegen/plan.c, codegen/cuda.c) ---- */

/* The plan of P (lowered by training_lower) in MODE. NET_PATH names the source in the
 * kernels' comments (only its base name, with anything but [A-Za-z0-9._-] replaced).
 * SYMMAX (or NULL: unknown) gives the symbols' largest values, which choose how
 * reductions over the batch are split (cuda_reduce_to_split); the plan stays correct
 * at any value. Never fails for a program that passed ir_verify (internal errors abort). */
Plan *plan_build(const IrProgram *p, PlanMode mode, const char *net_path, const int64_t *symmax);
void plan_free(Plan *plan);

const PlanGraph *plan_graph_of(const Plan *plan, const IrGraph *g);   /* NULL if none */

/* Blocks for launch L with the symbols at SYMVALS: ceil(numel(work) / items_per_block),
 * clamped to [1, max_blocks] (and to a 32-bit grid). The runtime's and the reproducer's. */
unsigned plan_launch_grid(const PlanLaunch *l, const int64_t *symvals);
/* The same with ITEMS per block instead of L's (max-autotune's choice). */
unsigned plan_launch_grid_items(const PlanLaunch *l, int64_t items, const int64_t *symvals);

/* A hash of what an autotune choice is made for: the mode, every kernel's name, source
 * and block, and every step (launch geometry, GEMM shapes and types) of every graph.
 * Two plans with the same hash run the same kernels and GEMMs (FNV-1a, 64 bits). */
uint64_t plan_hash(const Plan *plan);

/* ---- generated tensor-core GEMMs (codegen/gemm_tc.c) ----
 * A max-autotune plan also holds, for each plain GEMM of its training graphs with f16 or
 * bf16 operands (f32 accumulation) and no epilogue or bias + relu, one kernel per tile
 * shape that computes it with its epilogue fused (PlanGemm.tile_kernel); the tuner times
 * them against the library. Their parameters, in order: c, a, b, bias, aux (device
 * pointers; 0 where the GEMM has none; aux is never used today), m, n, k (int64_t). Any grid >= 1 is correct (a block loops over the
 * tiles of C); plan_gemm_tile_grid gives one block per tile. They need sm_80 or later
 * (mma.sync m16n8k16, cp.async). */
bool plan_gemm_generable(const PlanGemm *g);
/* "64x64x32": tile TILE's name, as the choices file writes it. */
void plan_gemm_tile_name(int tile, char *buf, size_t len);
unsigned plan_gemm_tile_grid(int tile, int64_t m, int64_t n);
/* Adds the kernels to PLAN (plan_build does, for max-autotune, once every GEMM step's
 * tile_kernel is -1; they come last, from Plan.gemm_kernels_from) and sets the
 * tile_kernel of the GEMMs they compute. */
void plan_add_gemm_kernels(Plan *plan);

/* The runs of PLAN's training graphs that qualify get a PlanWindow each (Plan.windows)
 * and their kernels, after the generated GEMMs (plan_build does, for max-autotune). */
void plan_add_window_kernels(Plan *plan);
/* The graphs' collectives (PlanGraph.colls) from their IR_ALLREDUCE, IR_REDUCE_SCATTER
 * and IR_ALLGATHER nodes (codegen/collective.c). */
void plan_add_collectives(Plan *plan);
/* The run of graph GID whose UNFOLD is step I, or -1. */
int plan_window_at(const Plan *plan, PlanGraphId gid, int i);
/* The run of graph GID that skips step I when on (its UNFOLD, a TRANSPOSE or its
 * epilogue), or -1. */
int plan_window_skips(const Plan *plan, PlanGraphId gid, int i);
/* The run of graph GID that has step I for a reader, or -1; *J: which reader. */
int plan_window_reader(const Plan *plan, PlanGraphId gid, int i, int *j);
/* Whether implicit-GEMM run R skips step I of its graph when the library runs it (its
 * UNFOLD, a TRANSPOSE or the FOLD). */
bool plan_window_conv_skips(const Plan *plan, int r, int i);
/* What the library computes for reader J of run R: 'f' the forward (the product), 'w'
 * the filter gradient, 'd' the data gradient. */
char plan_window_conv_role(const PlanWindow *w, int j);

/* ---- fully fused MLP passes (codegen/mlp_fused.c; PlanMlp above) ---- */
/* One block per plan_mlp_rows[SHAPE] rows of M. */
unsigned plan_mlp_grid(int shape, int64_t m);
/* The runs of PLAN's training graphs that qualify get a PlanMlp each (Plan.mlps) and
 * their kernels, after the generated GEMMs (plan_build does, for max-autotune). */
void plan_add_mlp_kernels(Plan *plan);
/* The run of graph GID whose kernel runs at step I (its first layer), or -1. */
int plan_mlp_at(const Plan *plan, PlanGraphId gid, int i);
/* The run of graph GID that has step I for a layer, or -1. */
int plan_mlp_layer_of(const Plan *plan, PlanGraphId gid, int i);
/* Run R's kernel's buffer parameters in order (plan.h's ABI above), -1 for a null
 * pointer, into BUF[3 * PLAN_MLP_MAX_LAYERS + 1]; returns how many (3 * nlayers + 1). */
int plan_mlp_args(const Plan *plan, int r, int *buf);

/* The buffer whose memory B is: B, or the root of the view B. */
int plan_buffer_root(const Plan *plan, int b);
/* Whether a kernel writes through a parameter of C type CTYPE: a pointer without const
 * (NULL counts as written). */
bool plan_param_written(const char *ctype);
/* Room for N parameters in K's tables (zeroed); plan_kernel_free frees them. */
void plan_kernel_params(PlanKernel *k, int n);
/* Frees what K holds (its name, source and parameter tables), not K. */
void plan_kernel_free(PlanKernel *k);
/* Bytes of buffer B when symbol k is at most SYMMAX[k]; 0 for views. */
size_t plan_buffer_bytes(const Plan *plan, int b, const int64_t *symmax);

/* The prelude every kernel includes: cgc_device.h (types, f16/bf16 conversions, Philox,
 * block reductions). Compiled as CUDA by NVRTC and nvcc, and as C++ by the emulation
 * (which defines CGC_EMULATE first). */
extern const char plan_device_prelude[];

/* The module for NVRTC: the prelude, then every kernel but the generated GEMMs.
 * malloc'd. */
char *plan_module_source(const Plan *plan);
/* The generated GEMMs' module: the prelude, then those kernels; NULL when the plan has
 * none. malloc'd. Kept apart so that a run that does not use them does not compile them:
 * they are most of max-autotune's compile time. */
char *plan_gemm_module_source(const Plan *plan);

/* ---- memory planning (codegen/memplan.c) ----
 * Liveness over the final step order gives every buffer an offset in one arena. Buffers
 * that outlive a step (persistent tensors, inputs, constants, data-pipeline buffers, and
 * every graph's output values) sit first, each at its own offset. Then each graph's
 * buffers: a buffer is live from the first step that touches it to the last (inclusive),
 * and two buffers of one graph share memory only when their live ranges do not meet;
 * buffers of different graphs share freely, since graphs never run at the same time.
 * Offsets are 256-byte aligned, and so is the arena: kernels access four elements of a
 * buffer at once from any element a multiple of four (cgc_load4). Views take their
 * root's offset. */
typedef struct PlanLayout {
    size_t *offset;             /* per buffer (malloc'd) */
    size_t arena_bytes;         /* the peak: everything the plan needs at once */
    size_t persistent_bytes;    /* the first region */
    size_t graph_bytes[PG_NUM]; /* the peak of each graph's own buffers (without reuse:
                                 * their sum, and the graphs' regions are stacked) */
} PlanLayout;

/* Lays out PLAN for symbols up to SYMMAX. REUSE false gives every buffer memory of its
 * own (every node's value stays readable after a run: the per-node tests). */
void plan_layout(const Plan *plan, const int64_t *symmax, bool reuse, PlanLayout *out);
/* Per buffer, into FIRST (nbuffers entries): the first step of graph G that names it, as
 * the layout counts liveness (a fused MLP run's buffers at its first step; root buffers
 * only), or -1. */
void plan_first_steps(const Plan *plan, PlanGraphId g, int *first);
void plan_layout_free(PlanLayout *l);

/* ---- inspection (codegen/emit.c) ---- */

/* The host plan as text: buffers with dtype, shape and bytes, then per graph the ordered
 * launches (kernel, grid rule, arguments) and GEMM calls. Stable. */
void plan_print(FILE *out, const Plan *plan);

/* --emit DIR: creates DIR if needed and writes cgc_device.h, one NAME.cu per kernel
 * (each compiles alone: `nvcc -cubin -arch=sm_90 NAME.cu`), host_plan.txt, and the
 * standalone reproducer DIR/repro/ (module.cu, repro.c, Makefile, and gemm_module.cu
 * when CHOICES name a generated kernel; below) when the plan has a train graph. The
 * reproducer's Makefile builds for CHOICES' architecture, else for sm_ARCH (0: sm_90).
 * Each file is an output of PLAN_EMIT_ROLE (base/outfile.h). Returns 0, or -1 after an
 * error naming the file. */
#define PLAN_EMIT_ROLE "write the generated file"
int plan_emit(const Plan *plan, const char *dir, const PlanChoices *choices, int arch);

/* The reproducer (codegen/repro.c): one host C file that loads the module's cubin with the
 * driver API, lays out the arena (plan_layout, reuse on, the batch symbol at cfg.batch),
 * fills it, and replays the training step (train_micro accumulate - 1 times, then train)
 * with CUDA events around each step; and the Makefile that builds it and the cubin with
 * nvcc alone. The text holds no .net text but sanitised names. Needs the train graph.
 * CHOICES (max-autotune's; NULL: the plan's own) decide each step's grid, library
 * algorithm or generated kernel; when they name a generated kernel the reproducer also
 * loads gemm_module.cubin, built from gemm_module.cu (plan_gemm_module_source), which
 * plan_repro_uses_gemm_module says. */
void plan_write_repro(FILE *out, const Plan *plan, const PlanChoices *choices);
void plan_write_repro_makefile(FILE *out, const Plan *plan, const PlanChoices *choices, int arch);
bool plan_repro_uses_gemm_module(const Plan *plan, const PlanChoices *choices);

/* For the CPU emulation of CUDA: C++ source with one
 *   extern "C" void cgc_emu_thunk_NAME(void **args)
 * per kernel, which calls NAME with its arguments unpacked from ARGS (as cuLaunchKernel's
 * kernelParams: args[i] points at parameter i's value). */
void plan_emit_emu_thunks(FILE *out, const Plan *plan);

#endif
