/* gemm.c: the device's GEMMs through cuBLAS, on the device's stream.
 *
 * GemmCall is row-major; cuBLAS is column-major. codegen/gemm_map.h maps the one onto
 * the other (B passed first, A second, C computed as C^T), for this file and for --emit's
 * reproducer alike. Scalars alpha = 1, beta = 0 are host floats
 * (CUBLAS_POINTER_MODE_HOST), the scale type of both compute types used.
 *
 * A GEMM with an epilogue (a GEMM group: bias, then ReLU or GELU) goes through
 * cublasLtMatmul, with the same mapping; the aux output (GELU's input) has D's leading
 * dimension n, a multiple of 8, as the documentation requires: fusion only forms such
 * groups. A plain GEMM given an algorithm (GemmCall.algo: max-autotune's choice among the
 * heuristic's list, which cuda_gemm_algos counts) goes the same way, with no epilogue.
 * Descriptors, layouts and the heuristic's algorithm are kept in a small cache keyed by
 * everything but the A, B and C addresses (whose alignment is part of the key), since a
 * plan repeats the same calls every step; the workspace is allocated once.
 *
 * cuBLAS and cuBLASLt are loaded when the first device opens (cuda_blas_load), not linked:
 * loading cuBLASLt takes about a tenth of a second, which every run of cgc would pay
 * otherwise, on the CPU, for --check and for --help. */
#define _GNU_SOURCE
#include <cublasLt.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../codegen/gemm_map.h"
#include "../../codegen/plan.h"
#include "cuda_internal.h"

/* The entry points, by the names the headers give them (cublas_v2.h maps some to _v2). */
#define BLAS_FUNCS(X)                                                                        \
    X(cublasCreate) X(cublasDestroy) X(cublasSetStream) X(cublasSetWorkspace)               \
    X(cublasSetPointerMode) X(cublasGetStatusName) X(cublasGetStatusString) X(cublasGemmEx) \
    X(cublasGemmStridedBatchedEx)
#define BLAS_LT_FUNCS(X)                                                                     \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmul) X(cublasLtMatmulDescCreate)       \
    X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)                          \
    X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)                            \
    X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                    \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic)

#define BLAS_FIELD(sym) __typeof__(sym) *sym;
static struct {
    BLAS_FUNCS(BLAS_FIELD)
    BLAS_LT_FUNCS(BLAS_FIELD)
} blas;
#undef BLAS_FIELD

#define BLAS_STR(x) #x
#define BLAS_NAME(sym) BLAS_STR(sym)    /* the exported name: cublasCreate_v2 */
#define BLAS_SONAME(lib) "lib" lib ".so." BLAS_NAME(CUBLAS_VER_MAJOR)

/* The library SONAME (libcublas.so.13) of the toolkit this cgc was built with, as the
 * loader finds it, else from the toolkit's library directory. NULL after saying why. */
static void *blas_open(const char *soname)
{
    void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (lib) return lib;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", CGC_CUDA_LIBRARY_DIR, soname);
    if ((lib = dlopen(path, RTLD_NOW | RTLD_LOCAL))) return lib;
    const char *e = dlerror();
    fprintf(stderr, "cgc: error: cannot load %s, the CUDA Toolkit's cuBLAS this cgc was built "
                    "with (%s); install it, or add its directory to LD_LIBRARY_PATH\n",
            soname, e ? e : "not found");
    return NULL;
}

int cuda_blas_load(void)
{
    static int state;   /* 0 not tried, 1 loaded, -1 failed */
    if (state) return state > 0 ? 0 : -1;
    state = -1;
    void *lt = blas_open(BLAS_SONAME("cublasLt")), *lib = lt ? blas_open(BLAS_SONAME("cublas")) : NULL;
    if (!lib) return -1;
#define BLAS_RESOLVE(sym)                                                                     \
    if (!(*(void **)&blas.sym = dlsym(handle, BLAS_NAME(sym)))) {                             \
        fprintf(stderr, "cgc: error: %s has no %s: not the cuBLAS this cgc was built with\n", \
                soname, BLAS_NAME(sym));                                                      \
        return -1;                                                                            \
    }
    void *handle = lib;
    const char *soname = BLAS_SONAME("cublas");
    BLAS_FUNCS(BLAS_RESOLVE)
    handle = lt, soname = BLAS_SONAME("cublasLt");
    BLAS_LT_FUNCS(BLAS_RESOLVE)
#undef BLAS_RESOLVE
    state = 1;
    return 0;
}

static int blas_check(cublasStatus_t s, const char *call, const DeviceSite *site)
{
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    char where[512];
    cuda_site_text(site, where, sizeof where);
    fprintf(stderr, "cgc: error: %s: %s failed: %s (%s)\n", where, call, blas.cublasGetStatusName(s),
            blas.cublasGetStatusString(s));
    return -1;
}

/* ---- cuBLASLt ---- */

enum { LT_CACHE = 32 };                 /* descriptor sets kept (a plan has a few dozen GEMMs) */

/* What decides a cublasLtMatmul's descriptors and algorithm. */
typedef struct LtKey {
    int64_t m, n, k;
    bool trans_a, trans_b;
    DType a_type, b_type, c_type, bias_type;
    int compute, epilogue;
    DevPtr bias, aux;                   /* set in the descriptor itself */
    unsigned align_a, align_b, align_c; /* the heuristic assumes these */
} LtKey;

typedef struct LtEntry {
    LtKey key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;  /* cuBLASLt's A (our B), B (our A), C = D */
    cublasLtMatmulAlgo_t algo[DEVICE_GEMM_ALGOS];  /* the heuristic's, best first */
    int nalgo;
} LtEntry;

struct CudaLt {
    cublasLtHandle_t handle;
    CUdeviceptr workspace;
    LtEntry cache[LT_CACHE];
    int ncache;
    unsigned next_evict;                /* round robin once the cache is full */
};

static void lt_entry_free(LtEntry *e)
{
    if (e->desc) blas_check(blas.cublasLtMatmulDescDestroy(e->desc), "cublasLtMatmulDescDestroy", NULL);
    if (e->la) blas_check(blas.cublasLtMatrixLayoutDestroy(e->la), "cublasLtMatrixLayoutDestroy", NULL);
    if (e->lb) blas_check(blas.cublasLtMatrixLayoutDestroy(e->lb), "cublasLtMatrixLayoutDestroy", NULL);
    if (e->lc) blas_check(blas.cublasLtMatrixLayoutDestroy(e->lc), "cublasLtMatrixLayoutDestroy", NULL);
    memset(e, 0, sizeof *e);
}

static int lt_init(CudaDevice *cd)
{
    struct CudaLt *lt = calloc(1, sizeof *lt);
    if (!lt) {
        fprintf(stderr, "cgc: error: out of host memory for cuBLASLt\n");
        return -1;
    }
    cd->lt = lt;
    if (blas_check(blas.cublasLtCreate(&lt->handle), "cublasLtCreate", NULL)) {
        lt->handle = NULL;
        return -1;
    }
    return CU(NULL, cuMemAlloc_v2, &lt->workspace, GEMM_MAP_LT_WORKSPACE);
}

static void lt_close(CudaDevice *cd)
{
    struct CudaLt *lt = cd->lt;
    if (!lt) return;
    for (int i = 0; i < lt->ncache; i++) lt_entry_free(&lt->cache[i]);
    /* the workspace may still be in use by queued GEMMs */
    if (lt->workspace) {
        cuda_wait(cd, NULL, "cuStreamSynchronize");
        CU(NULL, cuMemFree_v2, lt->workspace);
    }
    if (lt->handle) blas_check(blas.cublasLtDestroy(lt->handle), "cublasLtDestroy", NULL);
    free(lt);
    cd->lt = NULL;
}

int cuda_gemm_init(CudaDevice *cd)
{
    if (cuda_blas_load() || lt_init(cd)) return -1;
    /* cublasCreate uses the runtime API, which finds the primary context current on this
     * thread (cuda_open made it so) and shares it. */
    if (blas_check(blas.cublasCreate(&cd->blas), "cublasCreate", NULL)) {
        cd->blas = NULL;
        return -1;
    }
    /* cublasSetStream resets the workspace, so it comes first. cuBLAS shares cuBLASLt's
     * workspace: both run on the one stream, never at once. With a workspace of its own
     * cuBLAS allocates nothing while a stream is captured (a CUDA graph). */
    return blas_check(blas.cublasSetStream(cd->blas, (cudaStream_t)cd->stream), "cublasSetStream", NULL) ||
           blas_check(blas.cublasSetWorkspace(cd->blas, (void *)(uintptr_t)cd->lt->workspace,
                                         GEMM_MAP_LT_WORKSPACE), "cublasSetWorkspace", NULL) ||
           blas_check(blas.cublasSetPointerMode(cd->blas, CUBLAS_POINTER_MODE_HOST),
                      "cublasSetPointerMode", NULL)
               ? -1 : 0;
}

void cuda_gemm_close(CudaDevice *cd)
{
    lt_close(cd);
    if (cd->blas) blas_check(blas.cublasDestroy(cd->blas), "cublasDestroy", NULL);
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

static LtKey lt_key(const GemmCall *g)
{
    LtKey k;
    memset(&k, 0, sizeof k);    /* compared with memcmp: padding included */
    k.m = g->m, k.n = g->n, k.k = g->k, k.trans_a = g->trans_a, k.trans_b = g->trans_b;
    k.a_type = g->a_type, k.b_type = g->b_type, k.c_type = g->c_type, k.bias_type = g->bias_type;
    k.compute = g->compute, k.epilogue = g->epilogue, k.bias = g->bias, k.aux = g->aux;
    k.align_a = gemm_map_alignment(g->a), k.align_b = gemm_map_alignment(g->b);
    k.align_c = gemm_map_alignment(g->c);
    return k;
}

static cublasLtEpilogue_t lt_epilogue(const GemmCall *g)
{
    switch (g->epilogue) {
    case GEMM_EPI_RELU_BIAS: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case GEMM_EPI_GELU_BIAS: return g->aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
    case GEMM_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
    default: return CUBLASLT_EPILOGUE_DEFAULT;      /* a plain GEMM given an algorithm */
    }
}

static cublasOperation_t blas_op(bool trans)
{
    return trans ? CUBLAS_OP_T : CUBLAS_OP_N;
}

#define LT_DESC_SET(e, attr, value) \
    blas_check(blas.cublasLtMatmulDescSetAttribute((e)->desc, attr, &(value), sizeof(value)), \
               "cublasLtMatmulDescSetAttribute(" #attr ")", site)

/* The matmul descriptor of entry E for call G, mapped as MAP: operations, epilogue and its
 * operands. */
static int lt_desc(LtEntry *e, const GemmCall *g, const GemmMap *map, cublasComputeType_t compute,
                   const DeviceSite *site)
{
    if (blas_check(blas.cublasLtMatmulDescCreate(&e->desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate", site))
        return -1;
    cublasOperation_t op_a = blas_op(map->a.trans), op_b = blas_op(map->b.trans);
    cublasLtEpilogue_t epi = lt_epilogue(g);
    if (LT_DESC_SET(e, CUBLASLT_MATMUL_DESC_TRANSA, op_a) || LT_DESC_SET(e, CUBLASLT_MATMUL_DESC_TRANSB, op_b) ||
        LT_DESC_SET(e, CUBLASLT_MATMUL_DESC_EPILOGUE, epi))
        return -1;
    if (g->epilogue == GEMM_EPI_NONE) return 0;     /* a plain GEMM given an algorithm */
    cudaDataType bias_type;
    const void *bias = (const void *)(uintptr_t)g->bias;
    if (!blas_type(g->bias_type, &bias_type)) return gemm_refuse(g, site, "a bias type cuBLASLt cannot take");
    if (LT_DESC_SET(e, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias) ||
        LT_DESC_SET(e, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type))
        return -1;
    if (!g->aux) return 0;
    void *aux = (void *)(uintptr_t)g->aux;
    int64_t aux_ld = map->c.ld;
    return LT_DESC_SET(e, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux) ||
                   LT_DESC_SET(e, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld)
               ? -1 : 0;
}

/* The layout of operand O of a mapping, of type T. */
static int lt_layout(cublasLtMatrixLayout_t *l, cudaDataType t, GemmMapOperand o, const DeviceSite *site)
{
    return blas_check(blas.cublasLtMatrixLayoutCreate(l, t, (uint64_t)o.rows, (uint64_t)o.cols, o.ld),
                      "cublasLtMatrixLayoutCreate", site);
}

/* cuBLASLt's heuristic's algorithms, best first, for the workspace and alignments of E. */
static int lt_algo(struct CudaLt *lt, LtEntry *e, const GemmCall *g, const DeviceSite *site)
{
    cublasLtMatmulPreference_t pref;
    if (blas_check(blas.cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", site)) return -1;
    uint64_t ws = GEMM_MAP_LT_WORKSPACE;
    uint32_t aa = e->key.align_b, ab = e->key.align_a, ac = e->key.align_c;  /* Lt's A is our B */
    struct { cublasLtMatmulPreferenceAttributes_t attr; const void *v; size_t size; } set[] = {
        { CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws },
        { CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa },
        { CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab },
        { CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof ac },
        { CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof ac },
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof set / sizeof *set && rc == 0; i++)
        rc = blas_check(blas.cublasLtMatmulPreferenceSetAttribute(pref, set[i].attr, set[i].v, set[i].size),
                        "cublasLtMatmulPreferenceSetAttribute", site);
    cublasLtMatmulHeuristicResult_t result[DEVICE_GEMM_ALGOS];
    int found = 0;
    if (rc == 0)
        rc = blas_check(blas.cublasLtMatmulAlgoGetHeuristic(lt->handle, e->desc, e->la, e->lb, e->lc, e->lc,
                                                       pref, DEVICE_GEMM_ALGOS, result, &found),
                        "cublasLtMatmulAlgoGetHeuristic", site);
    blas_check(blas.cublasLtMatmulPreferenceDestroy(pref), "cublasLtMatmulPreferenceDestroy", site);
    if (rc == 0 && found == 0) return gemm_refuse(g, site, "cuBLASLt has no algorithm for it");
    e->nalgo = 0;
    for (int i = 0; i < found && i < DEVICE_GEMM_ALGOS; i++) e->algo[e->nalgo++] = result[i].algo;
    return rc;
}

/* The cache entry for call G, made (descriptors, layouts, algorithm) on a miss. */
static LtEntry *lt_entry(struct CudaLt *lt, const GemmCall *g, cublasComputeType_t compute,
                         cudaDataType ta, cudaDataType tb, cudaDataType tc, const DeviceSite *site)
{
    LtKey key = lt_key(g);
    for (int i = 0; i < lt->ncache; i++)
        if (memcmp(&lt->cache[i].key, &key, sizeof key) == 0) return &lt->cache[i];
    int slot = lt->ncache < LT_CACHE ? lt->ncache++ : (int)(lt->next_evict++ % LT_CACHE);
    LtEntry *e = &lt->cache[slot];
    lt_entry_free(e);
    e->key = key;
    GemmMap map = gemm_map(g->m, g->n, g->k, g->trans_a, g->trans_b);
    if (lt_desc(e, g, &map, compute, site) || lt_layout(&e->la, tb, map.a, site) ||
        lt_layout(&e->lb, ta, map.b, site) || lt_layout(&e->lc, tc, map.c, site) || lt_algo(lt, e, g, site)) {
        lt_entry_free(e);
        memset(&e->key, 0xff, sizeof e->key);   /* matches no call: a failed entry is made again */
        return NULL;
    }
    return e;
}

/* C = epilogue(op(A) @ op(B)) through cublasLtMatmul, with the heuristic's G->algo-th
 * algorithm (its first for 0); sizes already checked. */
static int lt_gemm(CudaDevice *cd, const GemmCall *g, cublasComputeType_t compute, cudaDataType ta,
                   cudaDataType tb, cudaDataType tc, const DeviceSite *site)
{
    bool epi = g->epilogue != GEMM_EPI_NONE;
    if (g->batch != 1 || (epi && !g->bias) || (g->aux && g->epilogue != GEMM_EPI_GELU_BIAS))
        return gemm_refuse(g, site, "cuBLASLt on a batched GEMM, or an epilogue without its operands");
    LtEntry *e = lt_entry(cd->lt, g, compute, ta, tb, tc, site);
    if (!e) return -1;
    int algo = gemm_map_lt_algo(g->algo, e->nalgo);
    const float alpha = 1.0f, beta = 0.0f;
    void *c = (void *)(uintptr_t)g->c;
    return blas_check(blas.cublasLtMatmul(cd->lt->handle, e->desc, &alpha, (const void *)(uintptr_t)g->b, e->la,
                                     (const void *)(uintptr_t)g->a, e->lb, &beta, c, e->lc, c, e->lc,
                                     &e->algo[algo], (void *)(uintptr_t)cd->lt->workspace,
                                     GEMM_MAP_LT_WORKSPACE, (cudaStream_t)cd->stream),
                      "cublasLtMatmul", site);
}

/* The library types of G; -1 after refusing a call cuBLAS cannot make. */
static int gemm_types(const GemmCall *g, cudaDataType *ta, cudaDataType *tb, cudaDataType *tc,
                      cublasComputeType_t *compute, const DeviceSite *site)
{
    if (!blas_type(g->a_type, ta) || !blas_type(g->b_type, tb) || !blas_type(g->c_type, tc))
        return gemm_refuse(g, site, "an operand type cuBLAS cannot take");
    if (!blas_compute(g, compute))
        return gemm_refuse(g, site, "the compute mode does not match the operand types");
    if (!fits_int(g->m) || !fits_int(g->n) || !fits_int(g->k) || !fits_int(g->batch))
        return gemm_refuse(g, site, "a size beyond cuBLAS's 32-bit int arguments");
    return 0;
}

/* A plain GEMM (batch 1) takes cuBLASLt's algorithms as one with an epilogue does:
 * given one (max-autotune), it goes through cublasLtMatmul with no epilogue. */
int cuda_gemm_algos(Device *d, const GemmCall *g, int *count, const DeviceSite *site)
{
    CudaDevice *cd = (CudaDevice *)d;
    cudaDataType ta = CUDA_R_32F, tb = CUDA_R_32F, tc = CUDA_R_32F;   /* set by gemm_types */
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    *count = 0;
    if (gemm_types(g, &ta, &tb, &tc, &compute, site) != 0) return -1;
    if (g->batch != 1 || g->m == 0 || g->n == 0 || g->k == 0) return 0;
    LtEntry *e = lt_entry(cd->lt, g, compute, ta, tb, tc, site);
    if (!e) return -1;
    *count = e->nalgo;
    return 0;
}

int cuda_gemm(Device *d, const GemmCall *g, const DeviceSite *site)
{
    CudaDevice *cd = (CudaDevice *)d;
    cudaDataType ta = CUDA_R_32F, tb = CUDA_R_32F, tc = CUDA_R_32F;   /* set by gemm_types */
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    if (gemm_types(g, &ta, &tb, &tc, &compute, site) != 0) return -1;
    if (g->m == 0 || g->n == 0 || g->batch == 0) return 0;
    if (gemm_map_uses_lt(g->epilogue != GEMM_EPI_NONE, g->algo, g->batch, g->k))
        return lt_gemm(cd, g, compute, ta, tb, tc, site);
    /* the library's sizes and leading dimensions (its A is our B), checked by gemm_types */
    GemmMap map = gemm_map(g->m, g->n, g->k, g->trans_a, g->trans_b);
    int m = (int)map.m, n = (int)map.n, k = (int)map.k;
    int lda = (int)map.a.ld, ldb = (int)map.b.ld, ldc = (int)map.c.ld;
    const float alpha = 1.0f, beta = 0.0f;
    if (g->batch == 1)
        return blas_check(blas.cublasGemmEx(cd->blas, blas_op(map.a.trans), blas_op(map.b.trans), m, n, k, &alpha,
                                       (const void *)(uintptr_t)g->b, tb, lda,
                                       (const void *)(uintptr_t)g->a, ta, ldb, &beta,
                                       (void *)(uintptr_t)g->c, tc, ldc, compute,
                                       CUBLAS_GEMM_DEFAULT),
                          "cublasGemmEx", site);
    return blas_check(blas.cublasGemmStridedBatchedEx(
                          cd->blas, blas_op(map.a.trans), blas_op(map.b.trans), m, n, k, &alpha,
                          (const void *)(uintptr_t)g->b, tb, lda, (long long)g->stride_b,
                          (const void *)(uintptr_t)g->a, ta, ldb, (long long)g->stride_a, &beta,
                          (void *)(uintptr_t)g->c, tc, ldc, (long long)g->stride_c,
                          (int)g->batch, compute, CUBLAS_GEMM_DEFAULT),
                      "cublasGemmStridedBatchedEx", site);
}
