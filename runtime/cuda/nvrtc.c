/* nvrtc.c: cuda_compile: a whole generated module to a cubin with NVRTC, through the
 * on-disk kernel cache (kcache.h).
 *
 * The options are fixed and part of the cache key: a real architecture (so NVRTC emits a
 * CUBIN, not PTX), -default-device (generated code has no __device__ on helpers), and
 * IEEE arithmetic stated explicitly (no fast math, precise division and square root,
 * denormals kept, and no contraction of a * b + c into an FMA, which the CPU reference
 * and the emulation do not do), because device results are checked against the CPU
 * reference. (Library functions such as expf still differ from glibc's by an ulp or two.)
 *
 * One more option is passed but is no part of the key: --split-compile=0, which lets
 * NVRTC optimise the module's kernels on every core at once. It changes how long a
 * compile takes, not the machine code (the .text of every kernel of mlp.net's two
 * modules came out byte for byte the same with and without it, NVRTC 13.0); the
 * generated GEMMs' module of mlp.net took 7.7 to 9.3 s with it against 10.7 to 11.1 s
 * without, on 2 cores (BENCHMARKS.md). An NVRTC that does not know the option refuses
 * it, and the compile is retried without. */
#define _GNU_SOURCE
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/clock.h"
#include "../../base/text.h"
#include "../device.h"
#include "kcache.h"

enum { NUM_OPTIONS = 6 };

typedef struct CompileJob {
    const char *source;
    char module[64];                    /* sanitised: it appears in NVRTC's messages */
    char arch_opt[40];                  /* --gpu-architecture=sm_90 */
    char arch[16];                      /* sm_90, for messages */
    const char *options[NUM_OPTIONS];
    int nvrtc_major, nvrtc_minor;
} CompileJob;

static int nvrtc_fail(nvrtcResult r, const char *call, const CompileJob *job)
{
    fprintf(stderr, "cgc: error: module %s for %s: %s failed: %s\n", job->module,
            job->arch, call, nvrtcGetErrorString(r));
    return -1;
}

static int job_init(CompileJob *job, const char *source, const char *module_name, int arch)
{
    memset(job, 0, sizeof *job);
    job->source = source;
    text_sanitise(job->module, sizeof job->module, module_name, "module");
    if (arch < 80 || arch > 199) {   /* the prelude's bf16 conversion needs sm_80 */
        fprintf(stderr, "cgc: error: module %s: cannot compile for compute capability %d.%d: "
                        "cgc supports sm_80 to sm_199\n",
                job->module, arch / 10, arch % 10);
        return -1;
    }
    snprintf(job->arch, sizeof job->arch, "sm_%d", arch);
    snprintf(job->arch_opt, sizeof job->arch_opt, "--gpu-architecture=%s", job->arch);
    const char *opts[NUM_OPTIONS] = {job->arch_opt, "-default-device", "--ftz=false",
                                     "--prec-div=true", "--prec-sqrt=true", "--fmad=false"};
    memcpy(job->options, opts, sizeof opts);
    nvrtcResult r = nvrtcVersion(&job->nvrtc_major, &job->nvrtc_minor);
    return r == NVRTC_SUCCESS ? 0 : nvrtc_fail(r, "nvrtcVersion", job);
}

/* The cache key: everything the cubin depends on, as text, then the source. */
static char *job_key(const CompileJob *job, size_t *len)
{
    char head[512];
    int n = snprintf(head, sizeof head, "cgc kernel cache key 1\nnvrtc %d.%d\n%s",
                     job->nvrtc_major, job->nvrtc_minor, job->arch_opt);
    for (int i = 1; i < NUM_OPTIONS; i++)
        n += snprintf(head + n, sizeof head - (size_t)n, " %s", job->options[i]);
    n += snprintf(head + n, sizeof head - (size_t)n, "\n");
    size_t src_len = strlen(job->source);
    char *key = malloc((size_t)n + src_len);
    if (!key) return NULL;
    memcpy(key, head, (size_t)n);
    memcpy(key + n, job->source, src_len);
    *len = (size_t)n + src_len;
    return key;
}

/* The source NVRTC refused, written where the lines its log names can be read: a new
 * directory under $TMPDIR (or /tmp), kept. */
static void keep_source(const CompileJob *job)
{
    const char *tmp = getenv("TMPDIR");
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/cgc-nvrtc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    FILE *f = NULL;
    if (mkdtemp(dir)) {
        snprintf(path, sizeof path, "%s/%s.cu", dir, job->module);
        f = fopen(path, "w");
    }
    bool written = f && fputs(job->source, f) >= 0;
    if (f && fclose(f) != 0) written = false;
    if (written)
        fprintf(stderr, "cgc: note: the source NVRTC compiled is in %s: its line numbers are "
                        "the log's\n", path);
}

static void print_log(nvrtcProgram prog, const CompileJob *job, const CudaCompileOptions *o)
{
    size_t size = 0;
    char *log = NULL;
    if (nvrtcGetProgramLogSize(prog, &size) == NVRTC_SUCCESS && size > 0) log = malloc(size);
    if (log && nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS)
        fprintf(stderr, "NVRTC log for module %s:\n%s\n", job->module, log);
    free(log);
    if (o->emit_dir)
        fprintf(stderr, "cgc: note: the generated source is in %s (the module is its .cu "
                        "files after cgc_device.h)\n", o->emit_dir);
    else
        keep_source(job);
}

/* NVRTC proper: SOURCE to a cubin. */
static int nvrtc_build(const CompileJob *job, const CudaCompileOptions *o, void **cubin,
                       size_t *size)
{
    nvrtcProgram prog;
    nvrtcResult r = nvrtcCreateProgram(&prog, job->source, job->module, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS) return nvrtc_fail(r, "nvrtcCreateProgram", job);
    const char *options[NUM_OPTIONS + 1];
    memcpy(options, job->options, sizeof job->options);
    options[NUM_OPTIONS] = "--split-compile=0";     /* as many threads as there are cores */
    r = nvrtcCompileProgram(prog, NUM_OPTIONS + 1, options);
    if (r == NVRTC_ERROR_INVALID_OPTION) {     /* an NVRTC before the option: a new program */
        nvrtcDestroyProgram(&prog);
        r = nvrtcCreateProgram(&prog, job->source, job->module, 0, NULL, NULL);
        if (r != NVRTC_SUCCESS) return nvrtc_fail(r, "nvrtcCreateProgram", job);
        r = nvrtcCompileProgram(prog, NUM_OPTIONS, job->options);
    }
    if (r != NVRTC_SUCCESS) {
        nvrtc_fail(r, "nvrtcCompileProgram", job);
        print_log(prog, job, o);
        nvrtcDestroyProgram(&prog);
        return -1;
    }
    *cubin = NULL;
    r = nvrtcGetCUBINSize(prog, size);
    if (r == NVRTC_SUCCESS && !(*cubin = malloc(*size ? *size : 1))) {
        fprintf(stderr, "cgc: error: module %s: out of memory for a %zu-byte cubin\n",
                job->module, *size);
        nvrtcDestroyProgram(&prog);
        return -1;
    }
    if (r == NVRTC_SUCCESS) r = nvrtcGetCUBIN(prog, *cubin);
    nvrtcDestroyProgram(&prog);
    if (r != NVRTC_SUCCESS) {
        free(*cubin);
        *cubin = NULL;
        return nvrtc_fail(r, "nvrtcGetCUBIN", job);
    }
    return 0;
}

int cuda_compile(const char *source, const char *module_name, const CudaCompileOptions *o,
                 CudaCompileResult *out)
{
    double start = clock_seconds();
    CompileJob job;
    memset(out, 0, sizeof *out);
    if (job_init(&job, source, module_name, o->arch)) return -1;
    size_t key_len = 0;
    char *key = job_key(&job, &key_len);
    if (!key) {
        fprintf(stderr, "cgc: error: module %s: out of memory for the cache key\n", job.module);
        return -1;
    }
    out->from_cache = !o->cold && kcache_load(key, key_len, &out->cubin, &out->cubin_size, o->verbose);
    if (!out->from_cache) {
        if (nvrtc_build(&job, o, &out->cubin, &out->cubin_size)) {
            free(key);
            return -1;
        }
        kcache_store(key, key_len, out->cubin, out->cubin_size, o->verbose);
    }
    free(key);
    out->seconds = clock_seconds() - start;
    if (o->verbose)
        fprintf(stderr, "cgc: module %s for sm_%d: %s in %.3f s (%zu-byte cubin, NVRTC %d.%d)\n",
                job.module, o->arch, out->from_cache ? "loaded from the kernel cache (warm)"
                                                     : "compiled by NVRTC (cold)",
                out->seconds, out->cubin_size, job.nvrtc_major, job.nvrtc_minor);
    return 0;
}
