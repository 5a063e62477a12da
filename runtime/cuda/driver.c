/* driver.c: the CUDA driver API, loaded at run time.
 *
 * cgc must start, compile and run on machines without an NVIDIA driver, so libcuda.so.1
 * is opened with dlopen and every entry point is looked up by its exported (versioned)
 * name; nothing here links against the driver. Below the rest of runtime/cuda/: the
 * driver's table, its errors, waiting for the device, and cuda_probe (what is there, or
 * why nothing is). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../../base/clock.h"
#include "cuda_internal.h"

CudaDriver cu;

static bool resolve_all(void *lib, char *why, size_t why_len)
{
#define CUDA_DRIVER_RESOLVE(sym)                                                      \
    if (!(cu.sym = (__typeof__(cu.sym))dlsym(lib, #sym))) {                           \
        snprintf(why, why_len, "the NVIDIA driver is too old: libcuda.so.1 has no %s " \
                 "(cgc needs a driver for CUDA %d.%d or newer)", #sym,                \
                 CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);                      \
        return false;                                                                 \
    }
    CUDA_DRIVER_FUNCS(CUDA_DRIVER_RESOLVE)
#undef CUDA_DRIVER_RESOLVE
    return true;
}

static bool load_once(char *why, size_t why_len)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(why, why_len, "libcuda.so.1 not found: no NVIDIA driver (%s)", e ? e : "?");
        return false;
    }
    if (!resolve_all(lib, why, why_len)) return false;
    /* The cubins come from this build's NVRTC and cuBLAS is this build's: an older driver
     * has every entry point we call yet cannot load them. */
    int version = 0;
    if (cu.cuDriverGetVersion(&version) == CUDA_SUCCESS && version < CUDA_VERSION) {
        snprintf(why, why_len, "the NVIDIA driver supports CUDA %d.%d; this cgc was built with "
                 "CUDA %d.%d and needs a driver for it or newer", version / 1000,
                 version % 1000 / 10, CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
        return false;
    }
    CUresult r = cu.cuInit(0);
    if (r != CUDA_SUCCESS) {
        char text[256];
        cuda_result_text(r, text, sizeof text);
        snprintf(why, why_len, "cuInit failed: %s", text);
        return false;
    }
    return true;
}

bool cuda_driver_load(char *why, size_t why_len)
{
    static int state;               /* 0: not tried, 1: loaded, -1: failed */
    static char first_why[512];
    if (state == 0) state = load_once(first_why, sizeof first_why) ? 1 : -1;
    if (state < 0) snprintf(why, why_len, "%s", first_why);
    return state > 0;
}

void cuda_result_text(CUresult r, char *buf, size_t len)
{
    const char *name = NULL, *text = NULL;
    if (cu.cuGetErrorName) cu.cuGetErrorName(r, &name);
    if (cu.cuGetErrorString) cu.cuGetErrorString(r, &text);
    if (name)
        snprintf(buf, len, "%s (%s)", name, text ? text : "no description");
    else
        snprintf(buf, len, "CUresult %d", (int)r);
}

void cuda_site_text(const DeviceSite *site, char *buf, size_t len)
{
    if (!site) {
        snprintf(buf, len, "cuda");
        return;
    }
    char where[300] = "";
    if (site->net_path && site->line > 0)
        snprintf(where, sizeof where, "%s:%d: ", site->net_path, site->line);
    else if (site->net_path)
        snprintf(where, sizeof where, "%s: ", site->net_path);
    snprintf(buf, len, "%skernel %s%s%s%s", where, site->kernel ? site->kernel : "?",
             site->what ? " (" : "", site->what ? site->what : "", site->what ? ")" : "");
}

int cuda_check(CUresult r, const char *call, const DeviceSite *site)
{
    if (r == CUDA_SUCCESS) return 0;
    char text[256], where[512];
    cuda_result_text(r, text, sizeof text);
    cuda_site_text(site, where, sizeof where);
    fprintf(stderr, "cgc: error: %s: %s failed: %s\n", where, call, text);
    return -1;
}

/* ---- waiting ---- */

int cuda_check_wait(CudaDevice *cd, CUresult r, const char *call)
{
    if (r == CUDA_SUCCESS) return 0;
    cuda_check(r, call, NULL);
    if (cd->last_kernel[0])
        fprintf(stderr,
                "cgc: note: the error may come from a kernel that ran before this wait; the "
                "last launched was %s (%s) from %s:%d; run under compute-sanitizer to find "
                "the one at fault\n",
                cd->last_kernel, cd->last_what, cd->last_net[0] ? cd->last_net : "?",
                cd->last_line);
    return -1;
}

int cuda_wait(CudaDevice *cd, CUevent event, const char *call)
{
    /* the first milliseconds back to back (a step's wait is short), then sleeping */
    for (double start = clock_seconds(), waited; cd->poll;) {
        CUresult r = event ? cu.cuEventQuery(event) : cu.cuStreamQuery(cd->stream);
        if (r != CUDA_ERROR_NOT_READY) return cuda_check_wait(cd, r, call);
        cd->poll(cd, waited = clock_seconds() - start);
        if (waited < 0.01) sched_yield();
        else nanosleep(&(struct timespec){0, 100000}, NULL);
    }
    return cuda_check_wait(cd, event ? cu.cuEventSynchronize(event) : cu.cuStreamSynchronize(cd->stream), call);
}

/* ---- what is there ---- */

static int device_info(int ordinal, CudaDeviceInfo *info)
{
    CUdevice dev;
    if (CU(NULL, cuDeviceGet, &dev, ordinal)) return -1;
    memset(info, 0, sizeof *info);
    if (CU(NULL, cuDeviceGetName, info->name, (int)sizeof info->name, dev) ||
        CU(NULL, cuDeviceTotalMem_v2, &info->total_bytes, dev) ||
        CU(NULL, cuDeviceGetAttribute, &info->cc_major,
           CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) ||
        CU(NULL, cuDeviceGetAttribute, &info->cc_minor,
           CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) ||
        CU(NULL, cuDeviceGetAttribute, &info->sm_count,
           CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))
        return -1;
    return 0;
}

int cuda_probe(CudaDeviceInfo *infos, int max, char *why, size_t why_len)
{
    if (!cuda_driver_load(why, why_len)) return 0;
    int count = 0;
    CUresult r = cu.cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS) {
        char text[256];
        cuda_result_text(r, text, sizeof text);
        snprintf(why, why_len, "cuDeviceGetCount failed: %s", text);
        return 0;
    }
    if (count == 0) {
        snprintf(why, why_len, "the NVIDIA driver is loaded but sees no CUDA device");
        return 0;
    }
    for (int i = 0; i < count && i < max; i++) {
        if (device_info(i, &infos[i]) != 0) {
            snprintf(why, why_len, "cannot query cuda:%d (see the error above)", i);
            return 0;
        }
    }
    snprintf(why, why_len, "%d CUDA device%s", count, count == 1 ? "" : "s");
    return count;
}
