/* gemm.c: the device's GEMMs through cuBLAS, on the device's stream.
 *
 * GemmCall is row-major; cuBLAS is column-major. A row-major [r, c] matrix is the
 * column-major [c, r] matrix with the same bytes and leading dimension c, so
 *     C = op(A) @ op(B)   (row-major, C [m, n])
 * is computed as
 *     C^T = op(B)^T @ op(A)^T   (column-major, C^T [n, m], ldc = n)
 * by passing B first and A second with their own transposes:
 *     B stored [k, n] (ld n, op N) or, when trans_b, [n, k] (ld k, op T);
 *     A stored [m, k] (ld k, op N) or, when trans_a, [k, m] (ld m, op T).
 * Scalars alpha = 1, beta = 0 are host floats (CUBLAS_POINTER_MODE_HOST), the scale type
 * of both compute types used. */
#include <limits.h>
#include <stdio.h>

#include "../../codegen/plan.h"
#include "cuda_internal.h"

static int blas_check(cublasStatus_t s, const char *call, const DeviceSite *site)
{
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    char where[512];
    cuda_site_text(site, where, sizeof where);
    fprintf(stderr, "cgc: error: %s: %s failed: %s (%s)\n", where, call, cublasGetStatusName(s),
            cublasGetStatusString(s));
    return -1;
}

int cuda_gemm_init(CudaDevice *cd)
{
    /* cublasCreate uses the runtime API, which finds the primary context current on this
     * thread (cuda_open made it so) and shares it. */
    if (blas_check(cublasCreate(&cd->blas), "cublasCreate", NULL)) {
        cd->blas = NULL;
        return -1;
    }
    return blas_check(cublasSetStream(cd->blas, (cudaStream_t)cd->stream), "cublasSetStream", NULL) ||
           blas_check(cublasSetPointerMode(cd->blas, CUBLAS_POINTER_MODE_HOST),
                      "cublasSetPointerMode", NULL)
               ? -1 : 0;
}

void cuda_gemm_close(CudaDevice *cd)
{
    if (cd->blas) blas_check(cublasDestroy(cd->blas), "cublasDestroy", NULL);
    cd->blas = NULL;
}

static bool blas_type(DType t, cudaDataType *out)
{
    switch (t) {
    case DT_F32: *out = CUDA_R_32F; return true;
    case DT_F16: *out = CUDA_R_16F; return true;
    case DT_BF16: *out = CUDA_R_16BF; return true;
    default: return false;
    }
}

/* The compute type, or false when GemmCompute and the operand types do not go together. */
static bool blas_compute(const GemmCall *g, cublasComputeType_t *out)
{
    bool f32_in = g->a_type == DT_F32 && g->b_type == DT_F32;
    bool half_in = g->a_type == g->b_type && (g->a_type == DT_F16 || g->a_type == DT_BF16);
    switch (g->compute) {
    case GEMM_F32: *out = CUBLAS_COMPUTE_32F; return f32_in && g->c_type == DT_F32;
    case GEMM_TF32: *out = CUBLAS_COMPUTE_32F_FAST_TF32; return f32_in && g->c_type == DT_F32;
    case GEMM_F32_ACCUM:
        *out = CUBLAS_COMPUTE_32F;
        return half_in && (g->c_type == g->a_type || g->c_type == DT_F32);
    default: return false;
    }
}

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

static int gemm_refuse(const GemmCall *g, const DeviceSite *site, const char *why)
{
    char where[512];
    cuda_site_text(site, where, sizeof where);
    fprintf(stderr,
            "cgc: error: %s: GEMM not issued: %s (m %lld, n %lld, k %lld, batch %lld, types "
            "%s x %s -> %s, compute %d); this is a cgc bug in the plan, please report it\n",
            where, why, (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->batch,
            ir_dtype_name(g->a_type), ir_dtype_name(g->b_type), ir_dtype_name(g->c_type),
            g->compute);
    return -1;
}

int cuda_gemm(Device *d, const GemmCall *g, const DeviceSite *site)
{
    CudaDevice *cd = (CudaDevice *)d;
    cudaDataType ta, tb, tc;
    cublasComputeType_t compute;
    if (!blas_type(g->a_type, &ta) || !blas_type(g->b_type, &tb) || !blas_type(g->c_type, &tc))
        return gemm_refuse(g, site, "an operand type cuBLAS cannot take");
    if (!blas_compute(g, &compute))
        return gemm_refuse(g, site, "the compute mode does not match the operand types");
    if (!fits_int(g->m) || !fits_int(g->n) || !fits_int(g->k) || !fits_int(g->batch))
        return gemm_refuse(g, site, "a size beyond cuBLAS's 32-bit int arguments");
    if (g->m == 0 || g->n == 0 || g->batch == 0) return 0;
    int m = (int)g->m, n = (int)g->n, k = (int)g->k;
    cublasOperation_t op_b = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_a = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    int ldb = g->trans_b ? k : n, lda = g->trans_a ? m : k, ldc = n;
    if (ldb == 0) ldb = 1;      /* k == 0: cuBLAS still wants ld >= 1 */
    if (lda == 0) lda = 1;
    const float alpha = 1.0f, beta = 0.0f;
    if (g->batch == 1)
        return blas_check(cublasGemmEx(cd->blas, op_b, op_a, n, m, k, &alpha,
                                       (const void *)(uintptr_t)g->b, tb, ldb,
                                       (const void *)(uintptr_t)g->a, ta, lda, &beta,
                                       (void *)(uintptr_t)g->c, tc, ldc, compute,
                                       CUBLAS_GEMM_DEFAULT),
                          "cublasGemmEx", site);
    return blas_check(cublasGemmStridedBatchedEx(
                          cd->blas, op_b, op_a, n, m, k, &alpha,
                          (const void *)(uintptr_t)g->b, tb, ldb, (long long)g->stride_b,
                          (const void *)(uintptr_t)g->a, ta, lda, (long long)g->stride_a, &beta,
                          (void *)(uintptr_t)g->c, tc, ldc, (long long)g->stride_c,
                          (int)g->batch, compute, CUBLAS_GEMM_DEFAULT),
                      "cublasGemmStridedBatchedEx", site);
}
