/* test_cuda_device.c: the cuda Device on a real GPU: memory round trips, a launch of a
 * tiny NVRTC-compiled kernel, a GEMM in each GemmCompute against a host computation on
 * fresh random inputs, each cuBLASLt epilogue (bias, relu, gelu, gelu with aux) in f32,
 * f16 and bf16, pinned memory with async downloads, fences and elapsed time, and
 * launch failures whose messages name the call and the kernel. Exits 77 (skipped) when
 * cuda_probe finds no device, saying why. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "codegen/plan.h"
#include "runtime/device.h"
#include "tests/scale_kernel.h"
#include "tests/testfiles.h"

static const char *const MODULE = SCALE_KERNEL_SOURCE;

static Device *dev;
static void *scale_kernel;
static const DeviceSite SITE = {"scale", "scale x", "test.net", 7};

/* ---- host helpers ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

/* Uniform in [-1, 1), seeded from the clock: fresh inputs on every run. */
static float uniform(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static uint16_t to_bf16(float f)
{
    uint32_t u = bits_of(f);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);     /* nearest even */
}
static float from_bf16(uint16_t h) { return float_of((uint32_t)h << 16); }

/* f32 -> f16, nearest even; inputs here are in [-1, 1), so no overflow/NaN handling. */
static uint16_t to_f16(float f)
{
    uint32_t u = bits_of(f), sign = (u >> 16) & 0x8000u;
    float a = fabsf(f);
    if (a < 6.103515625e-05f) {                                  /* subnormal half */
        return (uint16_t)(sign | (uint32_t)lrintf(a * 16777216.0f));
    }
    uint32_t x = bits_of(a);
    uint32_t mant = x & 0x7fffffu, exp = (x >> 23) - 127 + 15;
    uint32_t h = (exp << 10) | (mant >> 13), rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}
static float from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) return (h & 0x8000u ? -1.0f : 1.0f) * (float)mant / 16777216.0f;
    return float_of(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

/* ---- memory and launches ---- */

static void test_memory(void)
{
    enum { N = 1000 };
    float host[N], back[N];
    DevPtr p;
    CHECK_EQ_INT(dev->ops->alloc(dev, sizeof host, &p), 0);
    CHECK(p != 0 && p % 256 == 0);
    CHECK_EQ_INT(dev->ops->download(dev, back, p, sizeof back), 0);
    int nonzero = 0;
    for (int i = 0; i < N; i++) nonzero += back[i] != 0.0f;
    CHECK_EQ_INT(nonzero, 0);                                   /* alloc zeroes */
    for (int i = 0; i < N; i++) host[i] = uniform();
    CHECK_EQ_INT(dev->ops->upload(dev, p, host, sizeof host), 0);
    CHECK_EQ_INT(dev->ops->download(dev, back, p, sizeof back), 0);
    CHECK(memcmp(host, back, sizeof host) == 0);
    dev->ops->free(dev, p);
}

static void test_launch(void)
{
    enum { N = 100000 };
    static float host[N], back[N];
    DevPtr p;
    float a = 1.0f + uniform();
    long long n = N;
    for (int i = 0; i < N; i++) host[i] = uniform();
    CHECK_EQ_INT(dev->ops->alloc(dev, sizeof host, &p), 0);
    CHECK_EQ_INT(dev->ops->upload(dev, p, host, sizeof host), 0);
    void *args[] = {&p, &a, &n};
    CHECK_EQ_INT(dev->ops->launch(dev, scale_kernel, 7, 128, args, &SITE), 0);
    CHECK_EQ_INT(dev->ops->download(dev, back, p, sizeof back), 0);
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += back[i] != host[i] * a;     /* one IEEE multiply */
    CHECK_EQ_INT(wrong, 0);
    dev->ops->free(dev, p);
}

/* ---- GEMMs ---- */

typedef struct GemmCase {
    const char *name;
    DType in;
    int compute;
    double rtol;
    bool trans_a, trans_b;
    int64_t batch;
    bool b_shared;          /* B broadcast over the batch (stride 0) */
} GemmCase;

/* Rounds V to what the device will see for a stored operand of type T (tf32 is rounded
 * inside cuBLAS: keep f32 and rely on the tolerance). Writes the stored bits into DST. */
static float store_as(DType t, float v, void *dst, size_t i)
{
    if (t == DT_F16) return from_f16(((uint16_t *)dst)[i] = to_f16(v));
    if (t == DT_BF16) return from_bf16(((uint16_t *)dst)[i] = to_bf16(v));
    ((float *)dst)[i] = v;
    return v;
}

static int product_errors(const GemmCase *c, const float *a, const float *b, const float *out,
                          int64_t m, int64_t n, int64_t k);

static void run_gemm_case(const GemmCase *c)
{
    const int64_t m = 37, n = 29, k = 53, batch = c->batch;
    size_t es = c->in == DT_F32 ? 4 : 2;
    int64_t na = m * k * batch, nb = k * n * (c->b_shared ? 1 : batch), nc = m * n * batch;
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *out = malloc(nc * 4);
    void *a_dev_bits = malloc(na * es), *b_dev_bits = malloc(nb * es);
    for (int64_t i = 0; i < na; i++) a[i] = store_as(c->in, uniform(), a_dev_bits, i);
    for (int64_t i = 0; i < nb; i++) b[i] = store_as(c->in, uniform(), b_dev_bits, i);
    DevPtr da, db, dc;
    CHECK_EQ_INT(dev->ops->alloc(dev, na * es, &da), 0);
    CHECK_EQ_INT(dev->ops->alloc(dev, nb * es, &db), 0);
    CHECK_EQ_INT(dev->ops->alloc(dev, nc * 4, &dc), 0);
    CHECK_EQ_INT(dev->ops->upload(dev, da, a_dev_bits, na * es), 0);
    CHECK_EQ_INT(dev->ops->upload(dev, db, b_dev_bits, nb * es), 0);
    GemmCall g = {.trans_a = c->trans_a, .trans_b = c->trans_b, .m = m, .n = n, .k = k,
                  .batch = batch, .a = da, .b = db, .c = dc, .stride_a = m * k,
                  .stride_b = c->b_shared ? 0 : k * n, .stride_c = m * n, .a_type = c->in,
                  .b_type = c->in, .c_type = DT_F32, .compute = c->compute};
    DeviceSite site = {"cublasGemmEx", c->name, "test.net", 3};
    CHECK_EQ_INT(dev->ops->gemm(dev, &g, &site), 0);
    CHECK_EQ_INT(dev->ops->download(dev, out, dc, nc * 4), 0);
    CHECK_EQ_INT(product_errors(c, a, b, out, m, n, k), 0);
    /* max-autotune's candidates: a plain GEMM may run any algorithm of cuBLASLt's list
     * (through cublasLtMatmul); each must give the product. Batched GEMMs offer none. */
    int count = -1;
    CHECK_EQ_INT(dev->ops->gemm_algos(dev, &g, &count, &site), 0);
    CHECK(batch == 1 ? count >= 1 && count <= DEVICE_GEMM_ALGOS : count == 0);
    for (g.algo = 1; g.algo <= count; g.algo++) {
        memset(out, 0, nc * 4);
        CHECK_EQ_INT(dev->ops->upload(dev, dc, out, nc * 4), 0);   /* so each run writes C */
        CHECK_EQ_INT(dev->ops->gemm(dev, &g, &site), 0);
        CHECK_EQ_INT(dev->ops->download(dev, out, dc, nc * 4), 0);
        int errors = product_errors(c, a, b, out, m, n, k);
        if (errors) fprintf(stderr, "%s: with cuBLASLt's algorithm %d of %d\n", c->name, g.algo, count);
        CHECK_EQ_INT(errors, 0);
    }
    dev->ops->free(dev, da), dev->ops->free(dev, db), dev->ops->free(dev, dc);
    free(a), free(b), free(out), free(a_dev_bits), free(b_dev_bits);
}

/* Elements of C (OUT) that differ from A @ B (as case C stores them) by more than its
 * tolerance, the first few printed. */
static int product_errors(const GemmCase *c, const float *a, const float *b, const float *out,
                          int64_t m, int64_t n, int64_t k)
{
    const int64_t batch = c->batch;
    int bad = 0;
    for (int64_t t = 0; t < batch; t++) {
        const float *A = a + t * m * k, *B = b + (c->b_shared ? 0 : t * k * n);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double want = 0, mag = 0;
                for (int64_t p = 0; p < k; p++) {
                    double x = c->trans_a ? A[p * m + i] : A[i * k + p];
                    double y = c->trans_b ? B[j * k + p] : B[p * n + j];
                    want += x * y, mag += fabs(x * y);
                }
                double got = out[t * m * n + i * n + j];
                /* Relative to the sum of |products|: the scale of the rounding error. */
                if (!(fabs(got - want) <= c->rtol * mag) && bad++ < 5)
                    fprintf(stderr, "%s: C[%lld][%lld][%lld] = %.8g, want %.8g\n", c->name,
                            (long long)t, (long long)i, (long long)j, got, want);
            }
    }
    return bad;
}

static void test_gemms(void)
{
    static const GemmCase cases[] = {
        {"f32", DT_F32, GEMM_F32, 1e-5, false, false, 1, false},
        {"f32 A^T", DT_F32, GEMM_F32, 1e-5, true, false, 1, false},
        {"f32 B^T", DT_F32, GEMM_F32, 1e-5, false, true, 1, false},
        {"f32 batched", DT_F32, GEMM_F32, 1e-5, true, true, 3, false},
        {"tf32", DT_F32, GEMM_TF32, 1e-3, false, true, 1, false},
        {"tf32 batched, B shared", DT_F32, GEMM_TF32, 1e-3, false, false, 4, true},
        {"f16", DT_F16, GEMM_F32_ACCUM, 1e-2, false, false, 1, false},
        {"f16 A^T batched", DT_F16, GEMM_F32_ACCUM, 1e-2, true, false, 2, false},
        {"bf16", DT_BF16, GEMM_F32_ACCUM, 1e-2, false, true, 1, false},
        {"bf16 batched, B shared", DT_BF16, GEMM_F32_ACCUM, 1e-2, true, false, 3, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_gemm_case(&cases[i]);
}

/* ---- cuBLASLt epilogues (GEMM groups) ---- */

typedef struct EpilogueCase {
    DType type;             /* A, B, C, bias and aux */
    int epilogue;           /* GemmEpilogue */
    bool aux;
    int64_t n;
} EpilogueCase;

static double gelu_tanh(double x)
{
    return 0.5 * x * (1 + tanh(0.79788456080286536 * (x + 0.044715 * x * x * x)));
}

static double activation(int epilogue, double x)
{
    if (epilogue == GEMM_EPI_RELU_BIAS) return x < 0 ? 0 : x;
    return epilogue == GEMM_EPI_GELU_BIAS ? gelu_tanh(x) : x;
}

/* Stored value V of type T back as a float (C and aux downloads). */
static float load_as(DType t, const void *src, size_t i)
{
    if (t == DT_F16) return from_f16(((const uint16_t *)src)[i]);
    if (t == DT_BF16) return from_bf16(((const uint16_t *)src)[i]);
    return ((const float *)src)[i];
}

/* C = act(A @ B^T + bias) (a linear layer) through the device's epilogue, against the
 * host in f64: within the accumulation's error plus one rounding of the output. */
static void run_epilogue_case(const EpilogueCase *c)
{
    const int64_t m = 37, k = 53, n = c->n;
    size_t es = c->type == DT_F32 ? 4 : 2;
    double rtol = c->type == DT_F32 ? 1e-5 : 1e-2, out_eps = c->type == DT_F32 ? 1e-6 : c->type == DT_F16 ? 1e-3 : 8e-3;
    float *a = malloc(m * k * 4), *b = malloc(n * k * 4), *bias = malloc(n * 4);
    void *a_bits = malloc(m * k * es), *b_bits = malloc(n * k * es), *bias_bits = malloc(n * es);
    void *out = malloc(m * n * es), *aux_out = malloc(m * n * es);
    for (int64_t i = 0; i < m * k; i++) a[i] = store_as(c->type, uniform(), a_bits, i);
    for (int64_t i = 0; i < n * k; i++) b[i] = store_as(c->type, uniform(), b_bits, i);
    for (int64_t i = 0; i < n; i++) bias[i] = store_as(c->type, uniform(), bias_bits, i);
    DevPtr da, db, dc, dbias, daux = 0;
    CHECK_EQ_INT(dev->ops->alloc(dev, m * k * es, &da), 0);
    CHECK_EQ_INT(dev->ops->alloc(dev, n * k * es, &db), 0);
    CHECK_EQ_INT(dev->ops->alloc(dev, m * n * es, &dc), 0);
    CHECK_EQ_INT(dev->ops->alloc(dev, n * es, &dbias), 0);
    if (c->aux) CHECK_EQ_INT(dev->ops->alloc(dev, m * n * es, &daux), 0);
    CHECK_EQ_INT(dev->ops->upload(dev, da, a_bits, m * k * es), 0);
    CHECK_EQ_INT(dev->ops->upload(dev, db, b_bits, n * k * es), 0);
    CHECK_EQ_INT(dev->ops->upload(dev, dbias, bias_bits, n * es), 0);
    GemmCall g = {.trans_b = true, .m = m, .n = n, .k = k, .batch = 1, .a = da, .b = db, .c = dc,
                  .a_type = c->type, .b_type = c->type, .c_type = c->type,
                  .compute = c->type == DT_F32 ? GEMM_F32 : GEMM_F32_ACCUM, .epilogue = c->epilogue,
                  .bias = dbias, .aux = daux, .bias_type = c->type};
    char name[64];
    snprintf(name, sizeof name, "%s epilogue %d%s n %lld", ir_dtype_name(c->type), c->epilogue,
             c->aux ? " aux" : "", (long long)n);
    DeviceSite site = {"cublasLtMatmul", name, "test.net", 4};
    CHECK_EQ_INT(dev->ops->gemm(dev, &g, &site), 0);
    CHECK_EQ_INT(dev->ops->download(dev, out, dc, m * n * es), 0);
    if (c->aux) CHECK_EQ_INT(dev->ops->download(dev, aux_out, daux, m * n * es), 0);
    int bad = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double pre = bias[j], mag = fabs(bias[j]);
            for (int64_t p = 0; p < k; p++) pre += (double)a[i * k + p] * b[j * k + p], mag += fabs((double)a[i * k + p] * b[j * k + p]);
            double want = activation(c->epilogue, pre), got = load_as(c->type, out, i * n + j);
            /* the activation's slope is at most about 1.13 (gelu), so the input's error carries */
            double tol = 1.2 * rtol * mag + out_eps * fabs(want) + 1e-6;
            if (!(fabs(got - want) <= tol) && bad++ < 5)
                fprintf(stderr, "%s: C[%lld][%lld] = %.8g, want %.8g\n", name, (long long)i, (long long)j, got, want);
            if (!c->aux) continue;
            double got_aux = load_as(c->type, aux_out, i * n + j);
            if (!(fabs(got_aux - pre) <= rtol * mag + out_eps * fabs(pre) + 1e-6) && bad++ < 5)
                fprintf(stderr, "%s: aux[%lld][%lld] = %.8g, want %.8g\n", name, (long long)i, (long long)j, got_aux, pre);
        }
    CHECK_EQ_INT(bad, 0);
    dev->ops->free(dev, da), dev->ops->free(dev, db), dev->ops->free(dev, dc), dev->ops->free(dev, dbias);
    if (daux) dev->ops->free(dev, daux);
    free(a), free(b), free(bias), free(a_bits), free(b_bits), free(bias_bits), free(out), free(aux_out);
}

/* Every epilogue in f32, f16 and bf16, with n a multiple of 8 and not (aux: only a
 * multiple of 8, as cuBLASLt requires of its leading dimension and fusion ensures). */
static void test_epilogues(void)
{
    static const DType types[] = {DT_F32, DT_F16, DT_BF16};
    static const int64_t widths[] = {64, 29};
    for (size_t t = 0; t < 3; t++)
        for (size_t w = 0; w < 2; w++) {
            for (int e = GEMM_EPI_BIAS; e <= GEMM_EPI_GELU_BIAS; e++)
                run_epilogue_case(&(EpilogueCase){types[t], e, false, widths[w]});
            if (widths[w] % 8 == 0) run_epilogue_case(&(EpilogueCase){types[t], GEMM_EPI_GELU_BIAS, true, widths[w]});
        }
}

/* ---- pinned memory, fences, time ---- */

static void test_pinned_and_fences(void)
{
    enum { N = 1 << 20 };
    float *pinned = dev->ops->host_alloc(dev, N * sizeof(float));
    float *copy = malloc(N * sizeof(float));
    CHECK(pinned != NULL);
    if (!pinned) return;
    for (int i = 0; i < N; i++) copy[i] = pinned[i] = uniform();
    DevPtr p;
    CHECK_EQ_INT(dev->ops->alloc(dev, N * sizeof(float), &p), 0);
    CHECK_EQ_INT(dev->ops->upload(dev, p, pinned, N * sizeof(float)), 0);
    memset(pinned, 0, N * sizeof(float));      /* the contract: reusable on return */
    DeviceFence *f0, *f1;
    CHECK_EQ_INT(dev->ops->fence_new(dev, &f0), 0);
    CHECK_EQ_INT(dev->ops->fence_new(dev, &f1), 0);
    float a = 1.0f;
    long long n = N;
    void *args[] = {&p, &a, &n};
    CHECK_EQ_INT(dev->ops->fence_record(dev, f0), 0);
    for (int i = 0; i < 20; i++)
        CHECK_EQ_INT(dev->ops->launch(dev, scale_kernel, 64, 128, args, &SITE), 0);
    CHECK_EQ_INT(dev->ops->download_async(dev, pinned, p, N * sizeof(float)), 0);
    CHECK_EQ_INT(dev->ops->fence_record(dev, f1), 0);
    bool done = false;
    CHECK_EQ_INT(dev->ops->fence_done(dev, f1, true, &done), 0);
    CHECK(done);
    CHECK_EQ_INT(dev->ops->fence_done(dev, f0, false, &done), 0);
    CHECK(done);
    CHECK(memcmp(pinned, copy, N * sizeof(float)) == 0);
    float ms = -1;
    CHECK_EQ_INT(dev->ops->fence_elapsed_ms(dev, f0, f1, &ms), 0);
    CHECK(ms > 0.0f && ms < 60000.0f);
    printf("20 launches over 4 MiB and a 4 MiB download: %.3f ms of device time\n", ms);
    CHECK_EQ_INT(dev->ops->sync(dev), 0);
    dev->ops->fence_free(dev, f0), dev->ops->fence_free(dev, f1);
    dev->ops->free(dev, p);
    dev->ops->host_free(dev, pinned);
    free(copy);
}

/* ---- failures name the call and the kernel ---- */

static void test_launch_failures(void)
{
    DevPtr p;
    CHECK_EQ_INT(dev->ops->alloc(dev, 1024, &p), 0);
    float a = 2.0f;
    long long n = 256;
    void *args[] = {&p, &a, &n};
    capture_start();
    int rc = dev->ops->launch(dev, scale_kernel, 1, 2048, args, &SITE);  /* > 1024 threads */
    const char *err = capture_end();
    CHECK_EQ_INT(rc, -1);
    CHECK(strstr(err, "test.net:7: kernel scale (scale x): cuLaunchKernel failed: CUDA_ERROR_") != NULL);
    if (rc != -1 || !strstr(err, "cuLaunchKernel")) fprintf(stderr, "stderr was:\n%s\n", err);

    capture_start();
    rc = dev->ops->launch(dev, NULL, 1, 128, args, &SITE);
    err = capture_end();
    CHECK_EQ_INT(rc, -1);
    CHECK(strstr(err, "kernel scale") && strstr(err, "no kernel handle"));

    void *h = (void *)1;
    capture_start();
    rc = dev->ops->kernel(dev, "no_such_kernel", &h);
    err = capture_end();
    CHECK_EQ_INT(rc, -1);
    CHECK(h == NULL);
    CHECK(strstr(err, "kernel no_such_kernel") && strstr(err, "cuModuleGetFunction failed"));
    CHECK_EQ_INT(dev->ops->sync(dev), 0);       /* none of these broke the context */
    dev->ops->free(dev, p);
}

int main(void)
{
    CudaDeviceInfo info;
    char why[512];
    if (cuda_probe(&info, 1, why, sizeof why) == 0) {
        printf("skipped: no CUDA device: %s\n", why);
        return 77;
    }
    (void)tmp_path;                             /* only the stderr capture is used */
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cgc_cudadev_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    rng_state ^= (uint64_t)time(NULL) * 0x2545f4914f6cdd1dull;
    printf("%s, sm_%d%d, %d SMs; random seed state %llx\n", info.name, info.cc_major,
           info.cc_minor, info.sm_count, (unsigned long long)rng_state);
    CudaCompileOptions o = {.arch = info.cc_major * 10 + info.cc_minor};
    CudaCompileResult cubin;
    setenv("CGC_NO_CACHE", "1", 1);
    if (cuda_compile(MODULE, "test_cuda_device", &o, &cubin) != 0) return 1;
    if (cuda_open(0, cubin.cubin, cubin.cubin_size, &dev) != 0) return 1;
    printf("opened %s, %.1f GiB free\n", dev->name, (double)dev->free_bytes / (1 << 30));
    CHECK(dev->free_bytes > 0);
    CHECK_EQ_INT(dev->ops->kernel(dev, "scale", &scale_kernel), 0);
    if (scale_kernel) {
        test_memory();
        test_launch();
        test_gemms();
        test_epilogues();
        test_pinned_and_fences();
        test_launch_failures();
    }
    dev->ops->close(dev);
    free(cubin.cubin);
    rmdir(tmpdir);
    return check_result();
}
