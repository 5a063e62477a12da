/* ---- codegen/repro/types.h: the includes, and the types of the tables below ----
 * cgc embeds this file as it stands in every reproducer it writes (`cgc --emit DIR`:
 * DIR/repro/repro.c), after the header comment and before the plan's tables; cgc's
 * build compiles it (tests/codegen/repro_host.c). */

#include <cuda.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CGC_INF HUGE_VALF   /* for float literals written as cgc writes them */
#define CGC_NAN NAN

/* ---- the fills: a row per buffer written before the first step ---- */

typedef enum Type { T_F32, T_F16, T_BF16, T_I32 } Type;
typedef enum How {
    FILL_VALUE,         /* every element `value` */
    FILL_UNIFORM,       /* uniform in [-value, value] */
    FILL_UNIT,          /* uniform in [0, 1): features, float targets */
    FILL_LABELS,        /* integers uniform in [0, value): class labels (0 when value is 0) */
} How;

typedef struct Fill {
    int buffer;
    int64_t count;      /* elements */
    Type type;
    How how;
    float value;
} Fill;

/* ---- GEMMs: a row per GEMM the library computes, row-major as the plan has it (the
 * mapping onto column-major cuBLAS and cuBLASLt is codegen/gemm_map.h, below) ---- */

typedef struct Gemm {
    const char *graph;          /* where it is, for messages */
    int step, line;
    int trans_a, trans_b;
    int m, n, k, batch;         /* batch 1: a plain GEMM */
    long long stride_a, stride_b, stride_c;   /* elements between batches; 0 broadcasts */
    int a, b, c;                /* buffers */
    cudaDataType a_type, b_type, c_type;
    cublasComputeType_t compute;
    int lt;                     /* through cublasLtMatmul with `epilogue` */
    int lt_algo;                /* the heuristic's lt_algo-th algorithm; 0: its first */
    cublasLtEpilogue_t epilogue;
    int bias, aux;              /* buffers; -1 when none */
    cudaDataType bias_type;
    /* made once by gemm_setup (lt only) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;      /* cuBLASLt's A (our B), B (our A), C = D */
    cublasLtMatmulAlgo_t algo;
} Gemm;

/* ---- launches: a kernel's arguments, written in place by each step ---- */

/* One kernel parameter: the kernel reads as many bytes as its parameter's type. */
typedef union Arg {
    CUdeviceptr ptr;
    int64_t i64;
    uint64_t u64;
    float f32;
} Arg;

#define PTR(b) { .ptr = arena + offset_of[b] }
#define NO_PTR { .ptr = 0 }   /* a generated kernel's absent bias or aux */
#define I64(v) { .i64 = (v) }
#define U64(v) { .u64 = (v) }
#define F32(v) { .f32 = (v) }
