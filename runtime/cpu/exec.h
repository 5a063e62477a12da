/* exec.h: the CPU reference executor.
 *
 * Runs a graph of an IrProgram op by op on the CPU: the oracle every other backend is
 * checked against, and the fallback when no GPU is usable. It holds the persistent
 * tensors (parameters and state) of one program, in f32, or in f64 for gradient checks.
 * GEMMs go through OpenBLAS's cblas; the other ops are plain loops, parallel over both
 * cores where large, with fixed partitioning so every run gives the same bits.
 *
 * Mixed precision is emulated: a node whose dtype is f16 or bf16 has every element
 * rounded to that format (nearest even) when stored; MATMUL with IR_MATMUL_TF32 rounds
 * its inputs to tf32 first. Math is f32 (or f64) throughout.
 */
#ifndef CGC_CPU_EXEC_H
#define CGC_CPU_EXEC_H

#include <stdint.h>

#include "../../compiler/ir.h"

typedef enum CpuReal { CPU_F32, CPU_F64 } CpuReal;

typedef struct CpuExec CpuExec;

/* What one run of a graph is fed. */
typedef struct CpuFeed {
    int64_t symvals[IR_MAX_SYMBOLS];              /* value of each symbol (symvals[0]: the batch) */
    /* Per program input: float inputs point at f32 values, i32 inputs at int32_t, laid
     * out densely in the input's shape with the symbols bound. */
    const void *inputs[IR_MAX_INPUTS];
    double runtime[IR_NUM_RUNTIME];  /* IR_RUNTIME scalars */
    /* Several ranks: the row of the whole micro-batch that this run's first row is (its
     * rank's share starts there), else 0. Dropout draws by the element's place in the
     * whole micro-batch, so that the masks do not depend on how it is split. */
    int64_t first_row;
} CpuFeed;

CpuExec *cpu_exec_new(const IrProgram *p, CpuReal real);
void cpu_exec_free(CpuExec *e);

/* Sets every persistent tensor to its IrTensor init (uniform draws from rng.h's
 * RNG_INIT stream with SEED; counter = (tensor index << 40) + element). */
void cpu_exec_init_tensors(CpuExec *e, uint64_t seed);
/* The f32 initial values of persistent tensor I (as cpu_exec_init_tensors sets them in
 * CPU_F32) into OUT (ir_numel of its shape floats): the same bits for every backend. */
void cpu_tensor_init_values(const IrProgram *p, int i, uint64_t seed, float *out);

/* Every parameter's copy (IR_COPY) in TENSORS, per tensor f32 values (host arrays, or
 * the CPU_F32 executor's own) := its parameter's values rounded to the copy's type: what
 * the update would have written, after the parameters are set by other means (a
 * checkpoint read). */
void cpu_copies_refresh(const IrProgram *p, float *const *tensors);

/* The storage of persistent tensor I: float * for CPU_F32, double * for CPU_F64;
 * ir_numel(&p->tensors[i].shape, NULL) elements. Writable (checkpoints, tests). */
void *cpu_exec_tensor(CpuExec *e, int i);

/* Runs graph G once: computes every node, then applies the ASSIGNs. Returns 0, or -1
 * after printing an error (a label out of range, say) or, silently, at an anomaly. */
int cpu_exec_run(CpuExec *e, const IrGraph *g, const CpuFeed *feed);

/* The first value of a run that was not a number or was infinite (the node, in the graph
 * run, that computed it from finite inputs). */
typedef struct CpuAnomaly {
    int node;
    int64_t element;
    double value;
} CpuAnomaly;
/* With ON, every later run checks each node's values as it computes them and stops at the
 * first NaN or infinity, before the ASSIGNs (the tensors keep the last step's values).
 * Off, it costs one test per node. */
void cpu_exec_set_detect_anomaly(CpuExec *e, bool on);
/* The anomaly the last run stopped at, or NULL. */
const CpuAnomaly *cpu_exec_anomaly(const CpuExec *e);

/* With ON, a run hands a node's storage on to later nodes once its last reader has run
 * (through the reshapes that alias it), so that it needs about the memory live at once
 * rather than every node's: after the run only the graph's outputs (and the ASSIGNs'
 * values) can be read. Off (the default), every node's value stays readable. */
void cpu_exec_set_reuse(CpuExec *e, bool on);

/* After a run: the value of node ID of the graph last run (float * or double *, in the
 * node's shape with symbols bound by the feed), and its element count. Valid until the
 * next run. i32 nodes (labels) are given as int32_t *. With reuse on, outputs only. */
const void *cpu_exec_value(CpuExec *e, int id, int64_t *numel);
/* Scalar node value as a double (loss, correct count, skipped flag). */
double cpu_exec_scalar(CpuExec *e, int id);

/* Several ranks: the collectives that IR_ALLREDUCE, IR_REDUCE_SCATTER and IR_ALLGATHER
 * nodes ask for, and this rank's place (IR_SHARD). A bucket's values are gathered into
 * one buffer (REAL: float or double, as the executor computes) of N elements, or of RANKS
 * pieces of N for a reduce-scatter or an all-gather (comm.h's CommOp, in place), and
 * START is called as soon as the run has computed the last of them, so that it proceeds
 * while the run goes on; PROGRESS after each node while a bucket is in flight (MPI moves
 * only inside its calls); WAIT when the first of the bucket's nodes is needed, after
 * which BUF holds the result. Each returns 0, or -1 after reporting. Without them (the
 * default) the program runs as one rank, whose sum is the value itself. */
typedef struct CpuCollectives {
    void *ctx;
    int rank, ranks;
    int (*start)(void *ctx, int bucket, IrOp op, void *buf, int64_t n, CpuReal real);
    int (*progress)(void *ctx);
    int (*wait)(void *ctx, int bucket);
} CpuCollectives;
void cpu_exec_set_collectives(CpuExec *e, const CpuCollectives *c);   /* NULL: none */

/* Seconds spent in GEMM calls since creation (for the benchmark's GEMM share). */
double cpu_exec_gemm_seconds(const CpuExec *e);

/* --profile: while PROF is set, every op a run executes is reported to it (profile.h),
 * an ASSIGN when its copy is made; NULL (the default) stops it. */
typedef struct Profile Profile;
void cpu_exec_set_profile(CpuExec *e, Profile *prof);

/* Rounding used for emulation, exposed for tests: value to nearest-even f16 / bf16 /
 * tf32 (f16 overflows to inf as hardware does). */
float cpu_round_f16(float x);
float cpu_round_bf16(float x);
float cpu_round_tf32(float x);
/* The f32 executor's gelu_tanh (IR_GELU_TANH), for the emulated GEMM epilogue: one
 * definition, so that the two agree bit for bit. */
float cpu_gelu_tanh(float x);
/* The f32 executor's erf and exp, as its gelu and gelu_grad use them (exec.c). */
float cpu_erff(float x);
float cpu_expf(float x);

#endif
