/* gemm_map.h: a row-major GEMM as cuBLAS and cuBLASLt, which are column-major, take it.
 *
 * One mapping for both places that call the libraries: cgc's runtime
 * (runtime/cuda/gemm.c) includes this header, and cgc embeds it as it stands in every
 * reproducer it writes (codegen/repro.c), so that the two cannot drift apart. Hence
 * plain C types only: no cgc type and no CUDA type; the callers turn `trans` into
 * CUBLAS_OP_T.
 *
 * A row-major [r, c] matrix is the column-major [c, r] matrix with the same bytes and
 * leading dimension c, so
 *     C = op(A) @ op(B)   (row-major, C [m, n])
 * is computed as
 *     C^T = op(B)^T @ op(A)^T   (column-major, C^T [n, m], ldc = n)
 * by passing B first and A second with their own transposes:
 *     B stored [k, n] (ld n, op N) or, when trans_b, [n, k] (ld k, op T);
 *     A stored [m, k] (ld k, op N) or, when trans_a, [k, m] (ld m, op T).
 * cuBLASLt takes the same swap: its A is our B, its B our A, and its D is C^T [n, m], so
 * the bias, one value per column of row-major C, is a vector over D's n rows, as
 * cuBLASLt wants it, and the aux output (GELU's input) has D's layout, ld n.
 */
#ifndef CGC_GEMM_MAP_H
#define CGC_GEMM_MAP_H

#include <stdbool.h>
#include <stdint.h>

/* cuBLASLt's workspace (NVIDIA's recommendation for Hopper; enough elsewhere). The
 * heuristic's list of algorithms depends on it, so a reproducer's lt_algo-th algorithm
 * is the runtime's only with the same size. */
enum { GEMM_MAP_LT_WORKSPACE = 32 << 20 };

/* One operand as the library takes it: the column-major ROWS x COLS matrix its bytes
 * are, with leading dimension LD, and whether the product reads its transpose (op T). */
typedef struct GemmMapOperand {
    int64_t rows, cols, ld;
    bool trans;
} GemmMapOperand;

/* Row-major C [m, n] = op(A) @ op(B) as column-major C^T [n, m] = op(B)^T @ op(A)^T. */
typedef struct GemmMap {
    int64_t m, n, k;            /* the library's: our n, m and k */
    GemmMapOperand a, b, c;     /* the library's A (our B), B (our A), and C = D (our C^T) */
} GemmMap;

/* The row-major ROWS x COLS matrix as the column-major COLS x ROWS one with the same
 * bytes. The leading dimension is at least 1: cuBLAS wants that of an empty one too. */
static inline GemmMapOperand gemm_map_operand(int64_t rows, int64_t cols, bool trans)
{
    GemmMapOperand o = { cols, rows, cols > 0 ? cols : 1, trans };
    return o;
}

static inline GemmMap gemm_map(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b)
{
    GemmMap g;
    g.m = n, g.n = m, g.k = k;
    g.a = trans_b ? gemm_map_operand(n, k, true) : gemm_map_operand(k, n, false);
    g.b = trans_a ? gemm_map_operand(k, m, true) : gemm_map_operand(m, k, false);
    g.c = gemm_map_operand(m, n, false);
    return g;
}

/* Whether a GEMM goes through cublasLtMatmul rather than cublasGemmEx: one with an
 * epilogue, or a plain one (batch 1, k > 0) given one of cuBLASLt's algorithms (ALGO > 0:
 * max-autotune's choice), which then runs with epilogue DEFAULT and no bias. */
static inline bool gemm_map_uses_lt(bool epilogue, int algo, int64_t batch, int64_t k)
{
    return epilogue || (algo > 0 && batch == 1 && k > 0);
}

/* The index in the heuristic's list of FOUND algorithms (best first) of choice ALGO,
 * counted from 1 (0: the heuristic's first). A list shorter than the one tuned (another
 * GPU or library) gives its last. */
static inline int gemm_map_lt_algo(int algo, int found)
{
    return algo < 1 ? 0 : algo > found ? found - 1 : algo - 1;
}

/* The largest power of two up to 256 dividing ADDRESS: the alignment cuBLASLt's
 * heuristic is told an operand has. */
static inline uint32_t gemm_map_alignment(uint64_t address)
{
    uint32_t a = 1;
    while (a < 256 && address % (2 * a) == 0) a *= 2;
    return a;
}

#endif
