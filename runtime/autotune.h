/* autotune.h: --mode max-autotune's tuner: times the candidates of each step of the
 * training graphs on the device and keeps the fastest (the choices file: tune.h).
 *
 * The candidates, today:
 *   - a launch's grid: its kernel's items per block times 1, 2, 4 or 8 (fewer, fuller
 *     blocks; the kernels loop over their work, so every grid computes the same values);
 *     where the kernel is PlanKernel.any_block (a grid-stride loop sharing nothing
 *     across its block), also with a half and a quarter of its block's threads, the items
 *     per block scaled alike (so 256 threads x 4 items, 128 x 4, 64 x 4, then fuller);
 *     single-block launches have no choice;
 *   - a plain GEMM's algorithm: cuBLAS's own (cublasGemmEx) or each of cuBLASLt's
 *     heuristic list (DeviceOps.gemm_algos); a GEMM with an epilogue chooses among the
 *     list alone. Batched GEMMs have no choice;
 *   - on sm_80 and later, for GEMMs with f16 or bf16 operands, the plan's generated
 *     tensor-core kernels, one per tile shape, the epilogue fused (codegen/gemm_tc.c):
 *     their module is compiled when tuning starts (AutotuneReport.gemm_compile_s), and
 *     by a later run only when its choices name one;
 *   - on sm_80 and later, for each run of GEMMs that is a narrow MLP's forward pass or
 *     its input gradients (Plan.mlps, codegen/mlp_fused.c), its layers' GEMM steps,
 *     each by the choice just made for it, against the run's fully fused kernel with 16,
 *     32 or 64 rows per block (in the same module as the generated GEMMs). Its key names
 *     the batch and the layers ("m64.f16_512_128r_10": k 512, widths 128 with bias +
 *     relu, then 10; "m256.bwd_bf16_10_128_128_128": the input gradients from a width
 *     of 10), its choice is "steps" or "fused:rows16" (32, 64);
 *   - on sm_80 and later, for each convolution whose patches only generated GEMMs read
 *     (Plan.windows, codegen/gemm_tc.c): the UNFOLD step and its readers, each by the
 *     choice just made for it, against the readers' implicit-GEMM kernels gathering from
 *     the image, each reader's fastest tile shape, the UNFOLD skipped. Its key names the
 *     batch and, per reader, its GEMM's key and the patches its kernels gather (hashed
 *     where longer than a token); its choice is "patches" or "implicit:64x64x32+32x64x32"
 *     (a tile shape per reader);
 *   - where the device has a convolution library (DeviceOps.conv: cuDNN), for each such
 *     run it can compute (PlanWindow.conv), each call's algorithms (conv_algos) against
 *     the steps (its FOLD added to them) and the implicit GEMMs; the key then also names
 *     the convolution, the choice is "cudnn:2+1+3" (an algorithm per reader). Untimed,
 *     such a run takes the library's own algorithms ("cudnn:0+0+0"), as other modes do.
 * Not yet: a kernel's vector width (a rendering of its own per width).
 *
 * Tuning runs on the arena before the tensors are initialised: each candidate is issued
 * a few times over whatever the buffers hold, which the initialisation then overwrites,
 * so tuning leaves no trace in the run. A generated kernel's time does not depend on the
 * values it reads (no data-dependent branches but the ALU's), nor does a GEMM's. */
#ifndef CGC_AUTOTUNE_H
#define CGC_AUTOTUNE_H

#include <stddef.h>
#include <stdio.h>

#include "devexec.h"
#include "tune.h"

enum {
    AUTOTUNE_GRID_FACTORS = 4,  /* items per block x 1, 2, 4, 8 */
    AUTOTUNE_BLOCKS = 3,        /* a kernel's block, a half and a quarter of it */
};

typedef struct AutotuneReport {
    int kernels, gemms, mlps;   /* choices timed (mlps: fused MLP runs) */
    int windows;                /* convolution runs timed (implicit GEMMs, the library) */
    int candidates;             /* candidates timed in all */
    int untimed;                /* left to heuristics: the budget ran out */
    int refused;                /* candidates the device refused (left out): GEMM
                                 * algorithms, generated GEMM and fused MLP kernels */
    double gemm_compile_s;      /* of SECONDS: compiling the generated GEMMs' module */
    double seconds;             /* wall time of the tuning */
} AutotuneReport;

/* What a choices file is for: PLAN (plan_hash) at training batch BATCH (the GEMMs'
 * sizes, and so the keys, follow it). */
uint64_t autotune_plan_hash(const Plan *plan, int64_t batch);

/* A GEMM's key in the choices file, with the symbols at SYMVALS:
 * "m64.n128.k784.b1.nt.bf16.bf16.bf16.f32acc.relu_bias" (sizes, batch, transposes of A
 * and B, types of A, B and C, compute, epilogue). Steps with one key share one choice. */
void autotune_gemm_key(const PlanGemm *g, const int64_t *symvals, char *buf, size_t len);
/* Implicit-GEMM run R's key (Plan.windows): "window.b64." and, per reader, its GEMM's key
 * and the patches its kernels gather (hashed where longer than a token). */
void autotune_window_key(const Plan *plan, int r, const int64_t *symvals, char *buf, size_t len);

/* Times the candidates of every step of PLAN's training graphs with the symbols at
 * their training values (FEED) and puts the fastest in force; OUT (tune_init'd) receives
 * every choice. Stops timing once BUDGET_S seconds are spent: the steps left keep the
 * plan's defaults, written untimed. A GEMM algorithm, generated GEMM or fused MLP kernel
 * that the device refuses at its first issue (its error printed), the device working on,
 * is left out. Returns 0, or -1 after reporting a device error. */
int autotune_run(DevExec *e, const Plan *plan, const DevFeed *feed, double budget_s,
                 TuneFile *out, AutotuneReport *report);

/* The choices of T (read back from its file, for this plan) for each step and fused MLP
 * run of PLAN's training graphs, with the symbols at SYMVALS, to run on sm_ARCH, into
 * *OUT (plan_choices_free). Needs no device. Returns 0, or -1 with WHY when T lacks a
 * choice the plan needs, holds one that is not of a kind the tuner writes for that step,
 * or names a generated kernel below sm_80. */
int autotune_resolve(const Plan *plan, const int64_t *symvals, int arch, const TuneFile *t,
                     PlanChoices *out, char *why, size_t why_len);

/* Puts the choices of T in force on E's device (autotune_resolve; the generated GEMM and
 * MLP module loaded when they name one of its kernels). Returns 0; -1 with WHY when T is
 * refused (autotune_resolve: the file is then tuned again); -2 with WHY when this device
 * fails (the batch cannot be bound, or the generated kernels T names cannot be loaded),
 * which is no fault of T's. */
int autotune_apply(DevExec *e, const Plan *plan, const DevFeed *feed, const TuneFile *t,
                   char *why, size_t why_len);

/* The choices without a device (--check, --emit): the plan's launch shapes and the
 * library's own GEMM algorithms, untimed ("tuning none"). SYMVALS size the GEMMs. */
void autotune_heuristics(const Plan *plan, const int64_t *symvals, TuneFile *out);

/* --explain's section on max-autotune: what has a choice, and the choices before tuning
 * (the heuristics at the program's batch). */
void autotune_explain(const Plan *plan, FILE *out);

#endif
