/* ---- codegen/repro/replay.h: what replays the tables above: the checks, the fill,
 * the GEMMs and the launches ----
 * cgc embeds this file as it stands in every reproducer it writes (`cgc --emit DIR`:
 * DIR/repro/repro.c), after the plan's tables and codegen/gemm_map.h and before the
 * step's code; cgc's build compiles it (tests/codegen/repro_host.c). */

/* ---- errors: every call checked, naming where the replay was ---- */

static long training_step = -1;     /* of the replay; -1 while setting up */
static int check_each_step;         /* wait after every launch and GEMM (first step) */
static CUstream stream;

static void where(const char *graph, int step, const char *name, int line)
{
    fprintf(stderr, "repro: error: ");
    if (training_step >= 0) fprintf(stderr, "training step %ld, ", training_step + 1);
    if (graph) fprintf(stderr, "graph %s step %d (%s", graph, step, name);
    if (graph && line > 0) fprintf(stderr, ", " SOURCE_NAME " line %d", line);
    if (graph) fprintf(stderr, "): ");
    else if (name) fprintf(stderr, "%s: ", name);
}

static void check_cu(CUresult r, const char *call, const char *graph, int step,
                     const char *name, int line)
{
    if (r == CUDA_SUCCESS) return;
    const char *ename = NULL, *text = NULL;
    cuGetErrorName(r, &ename);
    cuGetErrorString(r, &text);
    where(graph, step, name, line);
    fprintf(stderr, "%s failed: %s (error %d%s%s)\n", call, ename ? ename : "unnamed", (int)r,
            text ? ": " : "", text ? text : "");
    exit(1);
}

static void check_blas(cublasStatus_t s, const char *call, const char *graph, int step,
                       const char *name, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS) return;
    where(graph, step, name, line);
    fprintf(stderr, "%s failed: %s (%s)\n", call, cublasGetStatusName(s), cublasGetStatusString(s));
    exit(1);
}

/* Setup calls, named by what they were for: CU("the arena", cuMemAlloc, &arena, n). */
#define CU(what, fn, ...) check_cu(fn(__VA_ARGS__), #fn, NULL, 0, (what), 0)
#define BLAS(what, fn, ...) check_blas(fn(__VA_ARGS__), #fn, NULL, 0, (what), 0)

/* After a step's launch or GEMM: in the first warm-up step, wait for it and check. */
static void settle(const char *graph, int step, const char *name, int line)
{
    if (check_each_step)
        check_cu(cuStreamSynchronize(stream), "cuStreamSynchronize", graph, step, name, line);
}

/* ---- the fills ---- */

/* A 64-bit linear congruential generator (Knuth's MMIX constants), seeded with SEED.
 * Enough for plausible values, and deliberately simple: it is not cgc's Philox
 * initialisation, so the values are not bit for bit those of a cgc run (the timing of
 * a step does not depend on them, except where fp16 loss scaling skips a step). */
static uint64_t lcg_state;

static float lcg_uniform(void)      /* in [0, 1) */
{
    lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)(lcg_state >> 40) * 0x1p-24f;
}

static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* f32 to f16 bits, round to nearest even; overflow gives inf, as cgc's stores do. */
static uint16_t f16_bits(float x)
{
    uint32_t u = f32_bits(x), sign = (u >> 16) & 0x8000u, mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);         /* NaN */
    if (mag >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);        /* >= 65520: inf */
    if (mag < 0x38800000u) {          /* below 2^-14: a multiple of 2^-24, or 0 */
        uint32_t man = (mag & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(mag >> 23);
        if (shift > 24) return (uint16_t)sign;
        uint32_t q = man >> shift, rest = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rest > half || (rest == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t h = ((mag >> 23) - 112) << 10 | (mag & 0x7fffffu) >> 13, rest = mag & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;          /* carries into the exponent */
    return (uint16_t)(sign | h);
}

/* f32 to bf16 bits, round to nearest even. */
static uint16_t bf16_bits(float x)
{
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* The arena zeroed (tensors initialised to zeros, the launch counter, every value),
 * then each fill written: persistent tensors by their initialiser (f32), the plan's
 * constants in their dtype, the program inputs at random. */
static void fill_arena(void)
{
    CU("zeroing the arena", cuMemsetD8, arena, 0, ARENA_BYTES);
    lcg_state = SEED;
    for (int i = 0; i < NUM_FILLS; i++) {
        const Fill *f = &fills[i];
        size_t size = f->type == T_F16 || f->type == T_BF16 ? 2 : 4;
        unsigned char *host = malloc((size_t)f->count * size + 1);
        if (!host) {
            fprintf(stderr, "repro: error: out of host memory for the fill of b%d\n", f->buffer);
            exit(1);
        }
        for (int64_t e = 0; e < f->count; e++) {
            float v = f->value;
            if (f->how == FILL_UNIFORM) v = (2.0f * lcg_uniform() - 1.0f) * f->value;
            if (f->how == FILL_UNIT) v = lcg_uniform();
            if (f->how == FILL_LABELS) {
                int32_t classes = (int32_t)f->value, label = (int32_t)(lcg_uniform() * f->value);
                v = classes > 0 ? (float)(label < classes ? label : classes - 1) : 0.0f;
            }
            uint16_t half;
            int32_t i32;
            switch (f->type) {
            case T_F32: memcpy(host + e * 4, &v, 4); break;
            case T_I32: i32 = (int32_t)v; memcpy(host + e * 4, &i32, 4); break;
            case T_F16: half = f16_bits(v); memcpy(host + e * 2, &half, 2); break;
            case T_BF16: half = bf16_bits(v); memcpy(host + e * 2, &half, 2); break;
            }
        }
        CU("filling the arena", cuMemcpyHtoD, arena + offset_of[f->buffer], host,
           (size_t)f->count * size);
        free(host);
    }
    /* the replay's stream does not wait for the legacy default stream */
    check_cu(cuCtxSynchronize(), "cuCtxSynchronize", NULL, 0, "filling the arena", 0);
}

/* ---- GEMMs: each row of the table through cuBLAS, or through cuBLASLt where `lt`,
 * mapped onto their column-major API by gemm_map (above). Scalars alpha = 1 and
 * beta = 0 are host floats; cuBLASLt gets GEMM_MAP_LT_WORKSPACE and the heuristic's
 * first algorithm for the operands' alignments, or its lt_algo-th (of at most LT_ALGOS)
 * where max-autotune chose one, which also sends a plain GEMM through cublasLtMatmul
 * (epilogue DEFAULT, no bias). ---- */

static cublasHandle_t blas;
static cublasLtHandle_t blas_lt;
static CUdeviceptr lt_workspace;

#define GEMM_CHECK(g, name, fn, ...) \
    check_blas(fn(__VA_ARGS__), #fn, (g)->graph, (g)->step, (name), (g)->line)

static cublasOperation_t blas_op(bool trans)
{
    return trans ? CUBLAS_OP_T : CUBLAS_OP_N;
}

static void lt_set(Gemm *g, cublasLtMatmulDescAttributes_t attr, const void *v, size_t size)
{
    GEMM_CHECK(g, "cublasLtMatmul", cublasLtMatmulDescSetAttribute, g->desc, attr, v, size);
}

static void lt_prefer(Gemm *g, cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                      const void *v, size_t size)
{
    GEMM_CHECK(g, "cublasLtMatmul", cublasLtMatmulPreferenceSetAttribute, pref, attr, v, size);
}

/* The layout of operand O of G's mapping, of type T. */
static void lt_layout(Gemm *g, cublasLtMatrixLayout_t *l, cudaDataType t, GemmMapOperand o)
{
    GEMM_CHECK(g, "cublasLtMatmul", cublasLtMatrixLayoutCreate, l, t, (uint64_t)o.rows, (uint64_t)o.cols,
               o.ld);
}

/* The descriptor and layouts of cuBLASLt GEMM G: operations, epilogue and its operands. */
static void lt_describe(Gemm *g)
{
    GemmMap map = gemm_map(g->m, g->n, g->k, g->trans_a, g->trans_b);
    cublasOperation_t op_a = blas_op(map.a.trans), op_b = blas_op(map.b.trans);
    GEMM_CHECK(g, "cublasLtMatmul", cublasLtMatmulDescCreate, &g->desc, g->compute, CUDA_R_32F);
    lt_set(g, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a);
    lt_set(g, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b);
    lt_set(g, CUBLASLT_MATMUL_DESC_EPILOGUE, &g->epilogue, sizeof g->epilogue);
    if (g->bias >= 0) {
        const void *bias = (const void *)(uintptr_t)(arena + offset_of[g->bias]);
        lt_set(g, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
        lt_set(g, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &g->bias_type, sizeof g->bias_type);
    }
    if (g->aux >= 0) {
        void *aux = (void *)(uintptr_t)(arena + offset_of[g->aux]);
        int64_t aux_ld = map.c.ld;
        lt_set(g, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
        lt_set(g, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
    }
    lt_layout(g, &g->la, g->b_type, map.a);
    lt_layout(g, &g->lb, g->a_type, map.b);
    lt_layout(g, &g->lc, g->c_type, map.c);
}

/* The algorithm of cuBLASLt GEMM G: the heuristic's lt_algo-th (gemm_map_lt_algo) for
 * the workspace and the operands' alignments. */
static void lt_choose(Gemm *g)
{
    CUdeviceptr a = arena + offset_of[g->a], b = arena + offset_of[g->b], c = arena + offset_of[g->c];
    cublasLtMatmulPreference_t pref;
    GEMM_CHECK(g, "cublasLtMatmul", cublasLtMatmulPreferenceCreate, &pref);
    uint64_t ws = GEMM_MAP_LT_WORKSPACE;
    uint32_t align_a = gemm_map_alignment(b), align_b = gemm_map_alignment(a);    /* Lt's A: our B */
    uint32_t align_c = gemm_map_alignment(c);
    lt_prefer(g, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    lt_prefer(g, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a);
    lt_prefer(g, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b);
    lt_prefer(g, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c);
    lt_prefer(g, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof align_c);
    cublasLtMatmulHeuristicResult_t result[LT_ALGOS];
    int found = 0;
    GEMM_CHECK(g, "cublasLtMatmul", cublasLtMatmulAlgoGetHeuristic, blas_lt, g->desc, g->la, g->lb, g->lc,
               g->lc, pref, LT_ALGOS, result, &found);
    GEMM_CHECK(g, "cublasLtMatmul", cublasLtMatmulPreferenceDestroy, pref);
    if (found == 0) {
        where(g->graph, g->step, "cublasLtMatmul", g->line);
        fprintf(stderr, "cublasLtMatmulAlgoGetHeuristic found no algorithm\n");
        exit(1);
    }
    int chosen = gemm_map_lt_algo(g->lt_algo, found);
    if (chosen + 1 < g->lt_algo)
        fprintf(stderr, "repro: note: graph %s step %d: cuBLASLt lists %d algorithms here, not the "
                        "%d-th that was tuned; using its last, as cgc does\n", g->graph, g->step, found,
                g->lt_algo);
    g->algo = result[chosen].algo;
}

static void gemm_setup(void)
{
    BLAS("cuBLAS", cublasCreate, &blas);
    BLAS("cuBLAS", cublasSetStream, blas, (cudaStream_t)stream);
    BLAS("cuBLAS", cublasSetPointerMode, blas, CUBLAS_POINTER_MODE_HOST);
    BLAS("cuBLASLt", cublasLtCreate, &blas_lt);
    CU("the cuBLASLt workspace", cuMemAlloc, &lt_workspace, GEMM_MAP_LT_WORKSPACE);
#if CAPTURE
    /* a graph capture may not allocate: cuBLAS gets the workspace too (one stream: the
     * two never run at once), as cgc's runtime does */
    BLAS("cuBLAS", cublasSetWorkspace, blas, (void *)(uintptr_t)lt_workspace, GEMM_MAP_LT_WORKSPACE);
#endif
    for (int i = 0; i < NUM_GEMMS; i++) {
        if (!gemms[i].lt) continue;
        lt_describe(&gemms[i]);
        lt_choose(&gemms[i]);
    }
}

static void gemm_close(void)
{
    for (int i = 0; i < NUM_GEMMS; i++) {
        Gemm *g = &gemms[i];
        if (!g->lt) continue;
        GEMM_CHECK(g, "cublasLtMatmul", cublasLtMatmulDescDestroy, g->desc);
        GEMM_CHECK(g, "cublasLtMatmul", cublasLtMatrixLayoutDestroy, g->la);
        GEMM_CHECK(g, "cublasLtMatmul", cublasLtMatrixLayoutDestroy, g->lb);
        GEMM_CHECK(g, "cublasLtMatmul", cublasLtMatrixLayoutDestroy, g->lc);
    }
    CU("the cuBLASLt workspace", cuMemFree, lt_workspace);
    BLAS("cuBLASLt", cublasLtDestroy, blas_lt);
    BLAS("cuBLAS", cublasDestroy, blas);
}

static void run_gemm(Gemm *g)
{
    const float alpha = 1.0f, beta = 0.0f;
    const void *a = (const void *)(uintptr_t)(arena + offset_of[g->a]);
    const void *b = (const void *)(uintptr_t)(arena + offset_of[g->b]);
    void *c = (void *)(uintptr_t)(arena + offset_of[g->c]);
    if (g->lt) {
        GEMM_CHECK(g, "cublasLtMatmul", cublasLtMatmul, blas_lt, g->desc, &alpha, b, g->la, a, g->lb, &beta,
                   c, g->lc, c, g->lc, &g->algo, (void *)(uintptr_t)lt_workspace, GEMM_MAP_LT_WORKSPACE,
                   (cudaStream_t)stream);
        settle(g->graph, g->step, "cublasLtMatmul", g->line);
        return;
    }
    /* the library's sizes and leading dimensions (its A is our B) */
    GemmMap map = gemm_map(g->m, g->n, g->k, g->trans_a, g->trans_b);
    int m = (int)map.m, n = (int)map.n, k = (int)map.k;
    int lda = (int)map.a.ld, ldb = (int)map.b.ld, ldc = (int)map.c.ld;
    if (g->batch == 1) {
        GEMM_CHECK(g, "cublasGemmEx", cublasGemmEx, blas, blas_op(map.a.trans), blas_op(map.b.trans), m, n,
                   k, &alpha, b, g->b_type, lda, a, g->a_type, ldb, &beta, c, g->c_type, ldc, g->compute,
                   CUBLAS_GEMM_DEFAULT);
        settle(g->graph, g->step, "cublasGemmEx", g->line);
        return;
    }
    GEMM_CHECK(g, "cublasGemmStridedBatchedEx", cublasGemmStridedBatchedEx, blas, blas_op(map.a.trans),
               blas_op(map.b.trans), m, n, k, &alpha, b, g->b_type, lda, g->stride_b, a, g->a_type, ldb,
               g->stride_a, &beta, c, g->c_type, ldc, g->stride_c, g->batch, g->compute, CUBLAS_GEMM_DEFAULT);
    settle(g->graph, g->step, "cublasGemmStridedBatchedEx", g->line);
}

/* ---- launches ---- */

static void launch(const char *graph, int step, int line, int k, unsigned grid, Arg *arg, int nargs)
{
    void *params[MAX_PARAMS] = { arg };     /* a packed kernel's: the array itself */
    for (int i = 0; i < nargs && !kernel_packed[k]; i++) params[i] = &arg[i];
    check_cu(cuLaunchKernel(kernel[k], grid, 1, 1, kernel_block[k], 1, 1, 0, stream, params, NULL),
             "cuLaunchKernel", graph, step, kernel_name[k], line);
    settle(graph, step, kernel_name[k], line);
}
