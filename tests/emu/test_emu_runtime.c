/* test_emu_runtime.c: the CUDA emulation itself, on hand-written kernels
 * (runtime_kernels.cu) run through the emulated Device: shared memory per block, barrier
 * ordering, warp shuffles, atomics, grid-stride loops, divergent barriers reported as
 * errors, and the reference GEMM.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/wait.h>

#include "runtime/cpu/exec.h"
#include "tests/emu/emu_device.h"
#include "tests/testfiles.h"

static Device *dev;

/* Device memory of BYTES; the test stops when there is none, since the kernels below
 * would write through the null pointer. */
static DevPtr dev_alloc(size_t bytes)
{
    DevPtr p = 0;
    CHECK(dev->ops->alloc(dev, bytes, &p) == 0);
    if (!p) {
        fprintf(stderr, "test_emu_runtime: no device memory of %zu bytes; stopping\n", bytes);
        check_result();     /* the summary, with the failed check above */
        exit(1);
    }
    return p;
}

static int launch(const char *name, unsigned grid, unsigned block, void **args)
{
    void *k = NULL;
    if (dev->ops->kernel(dev, name, &k) != 0) return -1;
    DeviceSite site = { name, "test launch", "runtime_kernels.cu", 1 };
    return dev->ops->launch(dev, k, grid, block, args, &site);
}

/* Inputs that are never zero and differ per element. */
static void fill(float *x, int64_t n, unsigned seed)
{
    for (int64_t i = 0; i < n; i++) x[i] = (float)((i * 7 + seed) % 23) - 11.5f;
}

static void test_block_reverse(void)
{
    enum { B = 256, G = 3 };
    int64_t n = B * G - 40;   /* the last block is partly past the end */
    float in[B * G], out[B * G];
    fill(in, n, 1);
    DevPtr din = dev_alloc(sizeof in), dout = dev_alloc(sizeof out);
    dev->ops->upload(dev, din, in, sizeof in);
    void *args[] = { &dout, &din, &n };
    CHECK_EQ_INT(launch("block_reverse", G, B, args), 0);
    dev->ops->download(dev, out, dout, sizeof out);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t b = i / B, t = i % B, src = b * B + (B - 1 - t);
        float want = 2.0f * (src < n ? in[src] : -1.0f);
        bad += out[i] != want;
    }
    CHECK_EQ_INT(bad, 0);
    dev->ops->free(dev, din);
    dev->ops->free(dev, dout);
}

/* cp.async's bytes land at the issuing thread's wait for their group, not before. */
static void test_cp_async(void)
{
    float in[256], out[768];
    fill(in, 256, 3);
    DevPtr din = dev_alloc(sizeof in), dout = dev_alloc(sizeof out);
    dev->ops->upload(dev, din, in, sizeof in);
    void *args[] = { &dout, &din };
    CHECK_EQ_INT(launch("cp_async_groups", 1, 64, args), 0);
    dev->ops->download(dev, out, dout, sizeof out);
    int bad = 0;
    for (int i = 0; i < 256; i++) {
        bad += out[i] != -2.0f;               /* nothing landed before a wait */
        bad += out[256 + i] != in[i] - 1.0f;  /* group 0 landed, group 1 (zeros) not yet */
        bad += out[512 + i] != in[i];         /* both */
    }
    CHECK_EQ_INT(bad, 0);
    dev->ops->free(dev, din);
    dev->ops->free(dev, dout);
}

/* Warps run one at a time between barriers, the order turning at each barrier. */
static void test_warp_order(void)
{
    float out[2] = { -1.0f, -1.0f };
    DevPtr dout = dev_alloc(sizeof out);
    void *args[] = { &dout };
    CHECK_EQ_INT(launch("warp_order", 1, 64, args), 0);
    dev->ops->download(dev, out, dout, sizeof out);
    CHECK(out[0] == 0.0f && out[1] == 1.0f);
    dev->ops->free(dev, dout);
}

/* A warp's threads waiting at a barrier are not run while its other threads shuffle. */
static void test_half_warp(void)
{
    float out[32];
    DevPtr dout = dev_alloc(sizeof out);
    void *args[] = { &dout };
    CHECK_EQ_INT(launch("half_warp", 1, 32, args), 0);
    dev->ops->download(dev, out, dout, sizeof out);
    int bad = 0;
    for (int i = 0; i < 32; i++) bad += out[i] != (float)((i % 16) ^ 3);
    CHECK_EQ_INT(bad, 0);
    dev->ops->free(dev, dout);
}

static void test_block_sum(void)
{
    enum { B = 128, G = 5 };
    int64_t n = B * G - 77;
    float in[B * G], out[G];
    fill(in, B * G, 3);
    DevPtr din = dev_alloc(sizeof in), dout = dev_alloc(sizeof out);
    dev->ops->upload(dev, din, in, sizeof in);
    void *args[] = { &dout, &din, &n };
    CHECK_EQ_INT(launch("block_sum", G, B, args), 0);
    dev->ops->download(dev, out, dout, sizeof out);
    for (int b = 0; b < G; b++) {
        double want = 0;
        for (int64_t i = (int64_t)b * B; i < (int64_t)(b + 1) * B && i < n; i++) want += in[i];
        CHECK_CLOSE(out[b], want, 1e-3, 1e-6);
    }
    dev->ops->free(dev, din);
    dev->ops->free(dev, dout);
}

static void test_warp_sums(void)
{
    enum { B = 96, G = 2, N = B * G, W = N / 32 };
    float in[N], f[N];
    double d[N];
    int k[W];
    unsigned u[W];
    fill(in, N, 5);
    DevPtr din = dev_alloc(sizeof in), df = dev_alloc(sizeof f), dd = dev_alloc(sizeof d),
           dk = dev_alloc(sizeof k), du = dev_alloc(sizeof u);
    dev->ops->upload(dev, din, in, sizeof in);
    void *args[] = { &df, &dd, &dk, &du, &din };
    CHECK_EQ_INT(launch("warp_sums", G, B, args), 0);
    dev->ops->download(dev, f, df, sizeof f);
    dev->ops->download(dev, d, dd, sizeof d);
    dev->ops->download(dev, k, dk, sizeof k);
    dev->ops->download(dev, u, du, sizeof u);
    for (int w = 0; w < W; w++) {
        double fs = 0;
        long long ks = 0;
        unsigned us = 0;
        for (int i = w * 32; i < w * 32 + 32; i++) fs += in[i], ks += i, us += (unsigned)i * 3u;
        for (int i = w * 32; i < w * 32 + 32; i++) {
            CHECK_CLOSE(f[i], fs, 1e-4, 1e-6);
            CHECK_CLOSE(d[i], fs * 0.5, 1e-9, 1e-12);
        }
        CHECK_EQ_INT(k[w], ks);
        CHECK_EQ_INT(u[w], us);
    }
    int xo[32], down[32], idx8[32];
    unsigned long long idx[32];
    DevPtr dx = dev_alloc(sizeof xo), ddown = dev_alloc(sizeof down), didx = dev_alloc(sizeof idx),
           didx8 = dev_alloc(sizeof idx8);
    void *args2[] = { &dx, &ddown, &didx, &didx8 };
    CHECK_EQ_INT(launch("shuffle_width", 1, 32, args2), 0);
    dev->ops->download(dev, xo, dx, sizeof xo);
    dev->ops->download(dev, down, ddown, sizeof down);
    dev->ops->download(dev, idx, didx, sizeof idx);
    dev->ops->download(dev, idx8, didx8, sizeof idx8);
    for (int lane = 0; lane < 32; lane++) {
        CHECK_EQ_INT(xo[lane], lane ^ 1);
        /* past the end of its group of 8, a lane keeps its own value */
        CHECK_EQ_INT(down[lane], lane % 8 + 3 < 8 ? lane + 3 : lane);
        /* indexed: all 64 bits of lane 7l % 32's value; source 9 of a group of 8 is its 1 */
        CHECK(idx[lane] == ((unsigned long long)(lane * 7 % 32) << 40 | 7u));
        CHECK_EQ_INT(idx8[lane], lane / 8 * 8 + 1);
    }
}

static void test_atomics(void)
{
    enum { B = 200, G = 7, N = B * G };
    DevPtr dc = dev_alloc(4), df = dev_alloc(4), dd = dev_alloc(8), du = dev_alloc(8);
    void *args[] = { &dc, &df, &dd, &du };
    CHECK_EQ_INT(launch("atomics_all", G, B, args), 0);
    int c;
    float f;
    double d;
    unsigned long long u;
    dev->ops->download(dev, &c, dc, 4);
    dev->ops->download(dev, &f, df, 4);
    dev->ops->download(dev, &d, dd, 8);
    dev->ops->download(dev, &u, du, 8);
    CHECK_EQ_INT(c, N);
    CHECK_CLOSE(f, N * 0.5, 0, 0);
    CHECK_CLOSE(d, (double)N * (N - 1) / 2, 0, 0);
    CHECK(u == ((unsigned long long)N * (N - 1) / 2) << 33);
}

static void test_grid_stride(void)
{
    enum { N = 10007 };
    float *in = malloc(N * sizeof *in), *out = malloc(N * sizeof *out);
    fill(in, N, 11);
    int64_t n = N;
    DevPtr din = dev_alloc(N * sizeof *in), dout = dev_alloc(N * sizeof *out);
    dev->ops->upload(dev, din, in, N * sizeof *in);
    void *args[] = { &dout, &din, &n };
    CHECK_EQ_INT(launch("grid_stride", 3, 64, args), 0);   /* 192 threads for 10007 items */
    dev->ops->download(dev, out, dout, N * sizeof *out);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += out[i] != 2.0f * in[i] + 1.0f;
    CHECK_EQ_INT(bad, 0);
    free(in);
    free(out);
}

static void test_divergence_reported(void)
{
    DevPtr d = dev_alloc(64 * sizeof(float));
    void *args[] = { &d };
    capture_start();
    int rc = launch("divergent_barrier", 2, 32, args);
    const char *msg = capture_end();
    CHECK_EQ_INT(rc, -1);
    CHECK(strstr(msg, "kernel divergent_barrier, block 0 of 2") != NULL);
    CHECK(strstr(msg, "threads 0-15 wait at __syncthreads") != NULL);
    CHECK(strstr(msg, "threads 16-31 wait at __syncthreads") != NULL);
    CHECK(strstr(msg, "launch of divergent_barrier for test launch (runtime_kernels.cu:1)") != NULL);
    fputs(msg, stdout);   /* what a user sees, in the test log */

    capture_start();
    rc = launch("divergent_shuffle", 1, 64, args);
    msg = capture_end();
    CHECK_EQ_INT(rc, -1);
    CHECK(strstr(msg, "kernel divergent_shuffle, block 0 of 1, thread 0") != NULL);
    CHECK(strstr(msg, "of the mask waits at a barrier or tensor-core product instead") != NULL);

    /* the emulator recovers: the next launch runs normally */
    test_block_reverse();
}

/* Launches NAME, which must fail with a message containing WANT. */
static void expect_fault(const char *name, unsigned block, void **args, const char *want)
{
    capture_start();
    int rc = launch(name, 1, block, args);
    const char *msg = capture_end();
    CHECK_EQ_INT(rc, -1);
    bool said = strstr(msg, want) && strstr(msg, "the launch fails");
    if (!said) fprintf(stderr, "%s: expected a fault saying \"%s\", got:\n%s\n", name, want, msg);
    CHECK(said);
}

/* Each shuffle CUDA leaves undefined fails its launch with what is wrong; a shuffle of
 * two half warps, each within its own half, is defined and runs. */
static void test_shuffle_rules(void)
{
    static const char *const want[] = {
        "whose mask 0x2 leaves out the calling lane 0",
        "but lane 16 of the mask has exited",
        "but lane 16 of the mask waits at another shuffle",
        "reads lane 16, which its mask 0xffff leaves out",
        "but lane 16 of the mask is not in the block (a partial warp)",
        "of width 12, which is not a power of two",
    };
    float out[64];
    DevPtr d = dev_alloc(sizeof out);
    for (int which = 0; which < 6; which++) {
        void *args[] = { &d, &which };
        expect_fault("shuffle_rules", which == 4 ? 48 : 64, args, want[which]);
    }
    int which = 6;
    void *args[] = { &d, &which };
    CHECK_EQ_INT(launch("shuffle_rules", 1, 64, args), 0);
    dev->ops->download(dev, out, d, sizeof out);
    int bad = 0;
    for (int i = 0; i < 64; i++) bad += out[i] != (float)(i ^ 1);
    CHECK_EQ_INT(bad, 0);
    dev->ops->free(dev, d);
}

/* cp.async to or from an address not 16-byte aligned fails the launch; aligned, it copies. */
static void test_cp_async_alignment(void)
{
    float in[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, out[4];
    DevPtr din = dev_alloc(sizeof in), dout = dev_alloc(sizeof out);
    dev->ops->upload(dev, din, in, sizeof in);
    for (int which = 0; which < 2; which++) {
        void *args[] = { &dout, &din, &which };
        expect_fault("cp_async_misaligned", 1, args,
                     which ? "from a global address not 16-byte aligned"
                           : "to a shared address not 16-byte aligned");
    }
    int which = 2;
    void *args[] = { &dout, &din, &which };
    CHECK_EQ_INT(launch("cp_async_misaligned", 1, 1, args), 0);
    dev->ops->download(dev, out, dout, sizeof out);
    for (int i = 0; i < 4; i++) CHECK_CLOSE(out[i], in[i], 0, 0);
    dev->ops->free(dev, din);
    dev->ops->free(dev, dout);
}

enum { SCALED = 40 };

/* restrict_scale's operands: X (SCALED values from SEED) uploaded to *DX, and *DY. */
static void scale_operands(float *x, unsigned seed, DevPtr *dx, DevPtr *dy)
{
    fill(x, SCALED, seed);
    *dx = dev_alloc(SCALED * sizeof(float));
    *dy = dev_alloc(SCALED * sizeof(float));
    dev->ops->upload(dev, *dx, x, SCALED * sizeof(float));
}

/* restrict_scale from DX into DY, read back into Y. Returns the launch's result. */
static int scale(DevPtr dy, DevPtr dx, float *y)
{
    int64_t n = SCALED;
    void *args[] = { &dy, &dx, &n };
    int rc = launch("restrict_scale", 1, 64, args);
    dev->ops->download(dev, y, dy, SCALED * sizeof(float));
    return rc;
}

/* Two __restrict__ parameters at one address, one written: the launch fails. Apart, or
 * both NULL where NULL stands for an operand not used, it runs. */
static void test_restrict_alias(void)
{
    float x[SCALED], y[SCALED];
    DevPtr dx, dy;
    scale_operands(x, 5, &dx, &dy);
    int64_t n = SCALED;
    void *alias[] = { &dx, &dx, &n };
    expect_fault("restrict_scale", 64, alias,
                 "parameters 0 and 1 are __restrict__ and one is written, but both point at");
    CHECK_EQ_INT(scale(dy, dx, y), 0);
    int bad = 0;
    for (int i = 0; i < SCALED; i++) bad += y[i] != 3.0f * x[i];
    CHECK_EQ_INT(bad, 0);
    DevPtr null = 0;
    int64_t none = 0;
    void *unused[] = { &null, &null, &none };
    CHECK_EQ_INT(launch("restrict_scale", 1, 64, unused), 0);
    dev->ops->free(dev, dx);
    dev->ops->free(dev, dy);
}

/* A kernel whose parameters are slots, one array that args[0] points at: it reads them
 * there, live and when replayed from a graph (which copied them when it was recorded);
 * more than CUDA's bytes of parameters, the launch fails. */
static void test_packed_slots(void)
{
    float x[SCALED], y[SCALED], a = 2.5f;
    DevPtr dx, dy;
    scale_operands(x, 9, &dx, &dy);
    uint32_t bits;
    memcpy(&bits, &a, sizeof bits);
    uint64_t slots[4] = { dy, dx, SCALED, bits };
    void *args[] = { slots };
    CHECK_EQ_INT(launch("slots_scale", 2, 32, args), 0);
    dev->ops->download(dev, y, dy, sizeof y);
    int bad = 0;
    for (int i = 0; i < SCALED; i++) bad += y[i] != a * x[i];
    CHECK_EQ_INT(bad, 0);
    DeviceGraph *g = NULL;
    int nodes = 0;
    CHECK_EQ_INT(dev->ops->capture_begin(dev), 0);
    CHECK_EQ_INT(launch("slots_scale", 2, 32, args), 0);
    CHECK_EQ_INT(dev->ops->capture_end(dev, &g, &nodes), 0);
    slots[3] = 0;                   /* after the recording: the graph keeps 2.5 */
    float zero[SCALED] = { 0 };
    dev->ops->upload(dev, dy, zero, sizeof zero);
    CHECK(g && dev->ops->graph_launch(dev, g) == 0);
    dev->ops->download(dev, y, dy, sizeof y);
    bad = 0;
    for (int i = 0; i < SCALED; i++) bad += y[i] != a * x[i];
    CHECK_EQ_INT(bad, 0);
    if (g) dev->ops->graph_free(dev, g);
    expect_fault("slots_too_many", 32, args, "32768 bytes of parameters, more than the 32764");
    dev->ops->free(dev, dx);
    dev->ops->free(dev, dy);
}

/* mark_undefined: memory a run has not written yet reads as NaN (0xFF bytes), so a
 * kernel that reads it before writing computes NaN; written, it reads as written. */
static void test_mark_undefined(void)
{
    float x[SCALED], y[SCALED];
    DevPtr dx, dy;
    scale_operands(x, 9, &dx, &dy);
    dev->ops->mark_undefined(dev, dx + 8 * sizeof(float), 4 * sizeof(float));
    CHECK_EQ_INT(scale(dy, dx, y), 0);
    int nan = 0, right = 0;
    for (int i = 0; i < SCALED; i++) {
        nan += isnan(y[i]) && i >= 8 && i < 12;
        right += y[i] == 3.0f * x[i];
    }
    CHECK_EQ_INT(nan, 4);
    CHECK_EQ_INT(right, 36);
    dev->ops->free(dev, dx);
    dev->ops->free(dev, dy);
}

static void test_intrinsics(void)
{
    unsigned u[2];
    float f[8] = { 0, 0, 0, NAN, 0, INFINITY, 0, 0 };
    DevPtr du = dev_alloc(sizeof u), df = dev_alloc(sizeof f);
    dev->ops->upload(dev, df, f, sizeof f);
    void *args[] = { &du, &df };
    CHECK_EQ_INT(launch("intrinsics", 1, 1, args), 0);
    dev->ops->download(dev, u, du, sizeof u);
    dev->ops->download(dev, f, df, sizeof f);
    CHECK_EQ_INT(u[0], (unsigned)(((unsigned long long)0xdeadbeefu * 0x12345678u) >> 32));
    CHECK_EQ_INT(u[1], 0xbfc00000u);
    CHECK_CLOSE(f[0], 1.5, 0, 0);
    CHECK_CLOSE(f[1], 3.14159274, 1e-7, 0);
    CHECK_CLOSE(f[2], 1, 0, 0);
    CHECK_CLOSE(f[4], 1, 0, 0);
    CHECK_CLOSE(f[6], 0, 0, 0);
    CHECK_CLOSE(f[7], 0.5 + 2 + 1 + 2 + 1 + 8 + 1 + 1 + 3, 1e-6, 0);
}

static void test_bad_launch(void)
{
    DevPtr d = dev_alloc(4);
    void *args[] = { &d };
    capture_start();
    int rc = launch("divergent_barrier", 1, 2048, args);
    const char *msg = capture_end();
    CHECK_EQ_INT(rc, -1);
    CHECK(strstr(msg, "block 2048") != NULL);
}

static const char *self_path, *so_path;   /* this program, the kernels' shared object */

/* Launches NAME (one block of BLOCK threads) in a child, which a sanitizer must stop
 * with a report that says SANITIZER and names the kernel and WHERE (what it reports on);
 * WHAT says what the kernel does. With RACE >= 0 the child is this program anew,
 * `--race RACE SO` (ThreadSanitizer's state does not survive a fork whole), which
 * launches NAME itself. */
static void expect_report(const char *name, unsigned block, void **args, int race,
                          const char *sanitizer, const char *where, const char *what)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(tmp_path("report.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 2);
        char which[16];
        snprintf(which, sizeof which, "%d", race);
        if (race >= 0) execl(self_path, self_path, "--race", which, so_path, (char *)NULL);
        else launch(name, 1, block, args);
        _exit(0);   /* not caught */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    char report[8192] = "";
    FILE *f = fopen(tmp_path("report.txt"), "r");
    if (f) {
        report[fread(report, 1, sizeof report - 1, f)] = '\0';
        fclose(f);
    }
    unlink(tmp_path("report.txt"));
    bool caught = !(WIFEXITED(status) && WEXITSTATUS(status) == 0) &&
                  strstr(report, sanitizer) && strstr(report, name) && strstr(report, where);
    if (!caught) fprintf(stderr, "%s was not caught by %s; child said:\n%s\n", what, sanitizer, report);
    CHECK(caught);
}

/* Under ASan, a kernel that writes past its allocation, or into padding marked unused,
 * must be stopped by AddressSanitizer. */
static void expect_asan_report(DevPtr base, int64_t index, const char *what)
{
    void *args[] = { &base, &index };
    expect_report("write_at", 32, args, -1, "AddressSanitizer", "WRITE of size 4", what);
}

static void test_asan_catches(void)
{
    DevPtr p = dev_alloc(512), q = dev_alloc(100);
    expect_asan_report(p, 128, "a write past the end of an allocation");
    expect_asan_report(q, 25, "a write past the 100 bytes allocated, inside the 256 rounded to");
    dev->ops->free(dev, q);
    dev->ops->mark_unused(dev, p + 256, 256);
    expect_asan_report(p, 64, "a write into padding marked unused");
    dev->ops->free(dev, p);
}

/* Kernel `racy` as case WHICH, one block of 128 threads. Returns the launch's result. */
static int launch_racy(int which, float *out)
{
    float in[128];
    fill(in, 128, 7);
    DevPtr din = dev_alloc(sizeof in), dout = dev_alloc(128 * sizeof(float));
    dev->ops->upload(dev, din, in, sizeof in);
    void *args[] = { &dout, &din, &which };
    int rc = launch("racy", 1, 128, args);
    if (out) dev->ops->download(dev, out, dout, 128 * sizeof(float));
    dev->ops->free(dev, din);
    dev->ops->free(dev, dout);
    return rc;
}

/* Under ThreadSanitizer (the racecheck), a missing barrier and a cp.async stage read
 * without one are reported as data races on the shared tile; with the barrier, the
 * kernel runs clean and right. */
static void test_tsan_catches(void)
{
    const char *tile = "Location is global 'racy::tile'";   /* the shared memory */
    expect_report("racy", 128, NULL, 0, "ThreadSanitizer: data race", tile,
                  "a missing __syncthreads");
    expect_report("racy", 128, NULL, 1, "ThreadSanitizer: data race", tile,
                  "a cp.async stage read without a barrier");
    float in[128], out[128];
    fill(in, 128, 7);
    CHECK_EQ_INT(launch_racy(2, out), 0);
    int bad = 0;
    for (int i = 0; i < 128; i++) bad += out[i] != in[127 - i];
    CHECK_EQ_INT(bad, 0);
}

/* C[b] = op(A[b]) op(B), B shared by the batch, f16 operands, bf16 result: against a
 * plain loop over the same widened values with the same rounding. */
static void test_gemm(void)
{
    enum { M = 5, N = 3, K = 7, BATCH = 2 };
    uint16_t a[BATCH][K][M], b[N][K], c[BATCH][M][N];   /* A transposed, B transposed */
    float af[BATCH][K][M], bf[N][K];
    for (int i = 0; i < BATCH * K * M; i++) {
        float x = cpu_round_f16((float)((i * 5) % 17 - 8) * 0.37f);
        (&af[0][0][0])[i] = x;
        _Float16 h = (_Float16)x;
        memcpy(&(&a[0][0][0])[i], &h, 2);
    }
    for (int i = 0; i < N * K; i++) {
        float x = cpu_round_f16((float)((i * 3) % 11 - 5) * 0.61f);
        (&bf[0][0])[i] = x;
        _Float16 h = (_Float16)x;
        memcpy(&(&b[0][0])[i], &h, 2);
    }
    DevPtr da = dev_alloc(sizeof a), db = dev_alloc(sizeof b), dc = dev_alloc(sizeof c);
    dev->ops->upload(dev, da, a, sizeof a);
    dev->ops->upload(dev, db, b, sizeof b);
    GemmCall g = { .trans_a = true, .trans_b = true, .m = M, .n = N, .k = K, .batch = BATCH,
                   .a = da, .b = db, .c = dc, .stride_a = K * M, .stride_b = 0,
                   .stride_c = M * N, .a_type = DT_F16, .b_type = DT_F16, .c_type = DT_BF16,
                   .compute = GEMM_F32_ACCUM };
    DeviceSite site = { "cublasGemmEx", "test gemm", NULL, 0 };
    CHECK_EQ_INT(dev->ops->gemm(dev, &g, &site), 0);
    dev->ops->download(dev, c, dc, sizeof c);
    for (int bt = 0; bt < BATCH; bt++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float s = 0;
                for (int k = 0; k < K; k++) s += af[bt][k][i] * bf[j][k];
                uint32_t bits = (uint32_t)c[bt][i][j] << 16;
                float got;
                memcpy(&got, &bits, 4);
                CHECK_CLOSE(got, cpu_round_bf16(s), 0, 1.0 / 128);
            }
}

int main(int argc, char **argv)
{
    bool asan = argc > 1 && strcmp(argv[1], "--asan") == 0;
    bool tsan = argc > 1 && strcmp(argv[1], "--tsan") == 0;
    if (argc == 4 && strcmp(argv[1], "--race") == 0) {   /* test_tsan_catches' child */
        if (emu_device_open(argv[3], &dev) != 0) return 1;
        launch_racy(atoi(argv[2]), NULL);
        return 0;   /* not caught */
    }
    self_path = argv[0];
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cgc-emu-rt-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    const char *src[] = { CGC_EMU_DIR "/runtime_kernels.cu" };
    char so[256];
    snprintf(so, sizeof so, "%s", tmp_path("runtime_kernels.so"));
    so_path = so;
    if (emu_compile_so(src, 1, NULL, asan, so) != 0 || emu_device_open(so, &dev) != 0) {
        fprintf(stderr, "test_emu_runtime: cannot build or load %s\n", so);
        return 1;
    }
    test_block_reverse();
    test_block_sum();
    test_cp_async();
    test_warp_order();
    test_half_warp();
    test_warp_sums();
    test_atomics();
    test_grid_stride();
    test_divergence_reported();
    test_shuffle_rules();
    test_cp_async_alignment();
    test_restrict_alias();
    test_packed_slots();
    test_mark_undefined();
    test_intrinsics();
    test_bad_launch();
    test_gemm();
    if (asan) test_asan_catches();
    if (tsan) test_tsan_catches();
    dev->ops->close(dev);
    unlink(so);
    rmdir(tmpdir);
    return check_result();
}
