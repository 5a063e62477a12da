/* backend.c: choosing and opening the device a run uses (see backend.h). */
#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DEFAULT_ARCH = 90 };

int backend_parse_arch(const char *s)
{
    if (strcmp(s, "none") == 0) return -1;
    if (strncmp(s, "sm_", 3) != 0) return 0;
    char *end;
    long v = strtol(s + 3, &end, 10);
    return (*end || v < 50 || v > 1000) ? 0 : (int)v;
}

/* Compiles PLAN's module for ARCH. */
static int compile_module(const Plan *plan, const BackendOptions *o, int arch,
                          CudaCompileResult *out)
{
    char *source = plan_module_source(plan);
    CudaCompileOptions co = {.arch = arch, .verbose = o->verbose, .emit_dir = o->emit_dir};
    int rc = cuda_compile(source, plan->p->model_name, &co, out);
    free(source);
    return rc;
}

int backend_default_arch(void)
{
    CudaDeviceInfo info[1];
    char why[256];
    return cuda_probe(info, 1, why, sizeof why) > 0 ? info[0].cc_major * 10 + info[0].cc_minor
                                                    : DEFAULT_ARCH;
}

int backend_check_compile(const BackendOptions *o, int arch)
{
    if (arch < 0) return 0;
    if (arch == 0) arch = backend_default_arch();
    const Plan *plan = o->plan;
    CudaCompileResult r = {0};
    int rc = compile_module(plan, o, arch, &r);
    if (rc == 0 && !o->quiet)
        printf("%s: %d kernels compiled for sm_%d by NVRTC (%zu-byte cubin)\n", o->net_path,
               plan->gemm_kernels_from, arch, r.cubin_size);
    free(r.cubin);
    char *gemms = rc == 0 ? plan_gemm_module_source(plan) : NULL;
    if (gemms) {    /* max-autotune's generated GEMMs: a module of their own */
        char name[160];
        snprintf(name, sizeof name, "%s.gemm", plan->p->model_name);
        CudaCompileOptions co = {.arch = arch, .verbose = o->verbose, .emit_dir = o->emit_dir};
        CudaCompileResult g = {0};
        rc = cuda_compile(gemms, name, &co, &g);
        if (rc == 0 && !o->quiet)
            printf("%s: %d generated GEMM, fused MLP and implicit-GEMM kernels (max-autotune's "
                   "candidates, a module of their own) compiled for sm_%d by NVRTC (%zu-byte cubin)\n",
                   o->net_path, plan->nkernels - plan->gemm_kernels_from, arch, g.cubin_size);
        free(g.cubin);
        free(gemms);
    }
    return rc;
}

size_t backend_device_memory(const char *device)
{
    if (strncmp(device, "cuda", 4) != 0 && strcmp(device, "auto") != 0) return 0;
    CudaDeviceInfo info[CUDA_MAX_DEVICES];
    char why[256];
    int count = cuda_probe(info, CUDA_MAX_DEVICES, why, sizeof why);
    long ordinal = device[4] == ':' ? strtol(device + 5, NULL, 10) : 0;
    if (ordinal < 0 || ordinal >= count) return 0;
    size_t free_bytes;
    /* free is what counts (another process may hold memory); the total is an upper bound
     * when the driver cannot say */
    return cuda_free_memory((int)ordinal, &free_bytes) == 0 ? free_bytes : info[ordinal].total_bytes;
}

bool backend_device_name_ok(const char *device)
{
    if (strcmp(device, "auto") == 0 || strcmp(device, "cpu") == 0 || strcmp(device, "cuda") == 0)
        return true;
    if (strncmp(device, "cuda:", 5) != 0 || !device[5]) return false;
    char *end;
    long v = strtol(device + 5, &end, 10);
    return !*end && device[5] >= '0' && device[5] <= '9' && v >= 0 && v < CUDA_MAX_DEVICES;
}

/* --device cuda[:N] or auto: which ordinal, or -1 for the CPU; -2 after an error. */
static int pick_ordinal(const BackendOptions *o, CudaDeviceInfo *info, int *count)
{
    char why[256] = "";
    *count = cuda_probe(info, CUDA_MAX_DEVICES, why, sizeof why);
    if (strcmp(o->device, "auto") == 0) {
        if (*count > 0) return 0;
        if (!o->quiet) fprintf(stderr, "cgc: no usable CUDA device: %s; running on the CPU\n", why);
        return -1;
    }
    int ordinal = 0;
    if (o->device[4] == ':') {
        char *end;
        long v = strtol(o->device + 5, &end, 10);
        if (!o->device[5] || *end || v < 0 || v >= CUDA_MAX_DEVICES) {
            cgc_error("--device %s: expected cuda or cuda:N with N a device number (cgc --devices lists them)",
                      diag_quote(o->device, 40));
            return -2;
        }
        ordinal = (int)v;
    }
    if (*count == 0) {
        cgc_error("--device %s: no usable CUDA device: %s; use --device cpu", o->device, why);
        return -2;
    }
    if (ordinal >= *count) {
        cgc_error("--device %s: there %s only %d CUDA device%s (cuda:0%s); see cgc --devices",
                  o->device, *count == 1 ? "is" : "are", *count, *count == 1 ? "" : "s",
                  *count == 1 ? "" : " ...");
        return -2;
    }
    return ordinal;
}

int backend_open(const BackendOptions *o, Backend *out)
{
    memset(out, 0, sizeof *out);
    if (strcmp(o->device, "cpu") == 0) return 0;
    bool cuda = strncmp(o->device, "cuda", 4) == 0 && (o->device[4] == '\0' || o->device[4] == ':');
    if (!cuda && strcmp(o->device, "auto") != 0) {
        cgc_error("--device: unknown device '%s' (auto, cpu or cuda[:N])", diag_quote(o->device, 40));
        return -1;
    }
    CudaDeviceInfo info[CUDA_MAX_DEVICES];
    int count;
    int ordinal = pick_ordinal(o, info, &count);
    if (ordinal == -1) return 0;
    if (ordinal < 0) return -1;
    const CudaDeviceInfo *d = &info[ordinal];
    if (strcmp(o->device, "auto") == 0 && !o->quiet)
        fprintf(stderr, "cgc: running on cuda:%d (%s, sm_%d%d)\n", ordinal, d->name, d->cc_major,
                d->cc_minor);
    out->plan = o->plan;
    CudaCompileResult r = {0};
    if (compile_module(out->plan, o, d->cc_major * 10 + d->cc_minor, &r) != 0 ||
        cuda_open(ordinal, r.cubin, r.cubin_size, &out->device) != 0) {
        free(r.cubin);
        backend_close(out);
        if (strcmp(o->device, "auto") != 0) return -1;
        /* auto means a usable GPU, else the CPU; the error above says why it is not */
        if (!o->quiet) fprintf(stderr, "cgc: cuda:%d is not usable; running on the CPU\n", ordinal);
        return 0;
    }
    free(r.cubin);
    out->ordinal = ordinal;
    return 0;
}

void backend_close(Backend *be)
{
    if (be->device) be->device->ops->close(be->device);
    memset(be, 0, sizeof *be);
}
