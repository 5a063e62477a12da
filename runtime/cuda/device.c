/* device.c: the cuda Device (runtime/device.h) on the driver API.
 *
 * One primary context (so that cuBLAS, which goes through the runtime API, uses the same
 * one), one non-blocking stream that carries every copy, memset, launch and GEMM in
 * order, a second that carries upload_async's copies beside them (ordered with the first
 * by fences only), and the module compiled by NVRTC. Nothing waits for the device except download,
 * sync and a waiting fence query. Errors of a kernel that fail while it runs surface at
 * the next wait: those messages name the last kernel launched. */
#define _GNU_SOURCE
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

static CudaDevice *impl(Device *d) { return (CudaDevice *)d; }

/* ---- memory ---- */

static int dev_alloc(Device *d, size_t bytes, DevPtr *out)
{
    CudaDevice *cd = impl(d);
    CUdeviceptr p = 0;
    *out = 0;
    if (bytes == 0) bytes = 1;     /* a real, distinct address even for empty buffers */
    if (CU(NULL, cuMemAlloc_v2, &p, bytes)) {
        fprintf(stderr, "cgc: note: the allocation was %zu bytes on %s\n", bytes, d->name);
        return -1;
    }
    /* Zeroed on the stream, so that it is ordered before any use of the memory. */
    if (CU(NULL, cuMemsetD8Async, p, 0, bytes, cd->stream)) {
        cu.cuMemFree_v2(p);
        return -1;
    }
    *out = (DevPtr)p;
    return 0;
}

static void dev_free(Device *d, DevPtr p)
{
    if (!p) return;
    /* Work still queued may use P: let it finish before the memory goes back. */
    cuda_wait(impl(d), NULL, "cuStreamSynchronize");
    CU(NULL, cuMemFree_v2, (CUdeviceptr)p);
}

static bool is_pinned(CudaDevice *cd, const void *src, size_t bytes)
{
    const char *s = src;
    for (int i = 0; i < cd->npinned; i++) {
        const PinnedBlock *b = &cd->pinned[i];
        if (s >= b->p && s < b->p + b->bytes) return true;
        if (s < b->p && s + bytes > b->p) return true;
    }
    return false;
}

/* An async copy from pageable memory returns once the bytes are staged, so SRC is free
 * at once; from pinned memory the DMA reads SRC later, so wait for it to keep the
 * contract that SRC may be reused when upload returns. */
static int dev_upload(Device *d, DevPtr dst, const void *src, size_t bytes)
{
    CudaDevice *cd = impl(d);
    if (bytes == 0) return 0;
    if (CU(NULL, cuMemcpyHtoDAsync_v2, (CUdeviceptr)dst, src, bytes, cd->stream)) return -1;
    if (is_pinned(cd, src, bytes))
        return cuda_wait(cd, NULL, "cuStreamSynchronize");
    return 0;
}

static int dev_download(Device *d, void *dst, DevPtr src, size_t bytes)
{
    CudaDevice *cd = impl(d);
    if (bytes == 0) return cuda_wait(cd, NULL, "cuStreamSynchronize");
    if (CU(NULL, cuMemcpyDtoHAsync_v2, dst, (CUdeviceptr)src, bytes, cd->stream)) return -1;
    return cuda_wait(cd, NULL, "cuStreamSynchronize");
}

static int dev_download_async(Device *d, void *dst, DevPtr src, size_t bytes)
{
    if (bytes == 0) return 0;
    return CU(NULL, cuMemcpyDtoHAsync_v2, dst, (CUdeviceptr)src, bytes, impl(d)->stream);
}

static int dev_upload_async(Device *d, DevPtr dst, const void *src, size_t bytes, DeviceFence *after,
                            DeviceFence *done)
{
    CudaDevice *cd = impl(d);
    if ((after && CU(NULL, cuStreamWaitEvent, cd->copies, after->event, 0)) ||
        (bytes && CU(NULL, cuMemcpyHtoDAsync_v2, (CUdeviceptr)dst, src, bytes, cd->copies)) ||
        CU(NULL, cuEventRecord, done->event, cd->copies))
        return -1;
    done->recorded = true;
    return 0;
}

static int dev_fence_wait(Device *d, DeviceFence *f)
{
    return CU(NULL, cuStreamWaitEvent, impl(d)->stream, f->event, 0);
}

static void *dev_host_alloc(Device *d, size_t bytes)
{
    CudaDevice *cd = impl(d);
    void *p = NULL;
    if (CU(NULL, cuMemHostAlloc, &p, bytes ? bytes : 1, 0)) return NULL;
    if (cd->npinned == cd->pinned_cap) {
        int cap = cd->pinned_cap ? 2 * cd->pinned_cap : 8;
        PinnedBlock *grown = realloc(cd->pinned, (size_t)cap * sizeof *grown);
        if (!grown) {
            cu.cuMemFreeHost(p);
            fprintf(stderr, "cgc: error: out of memory recording a pinned block\n");
            return NULL;
        }
        cd->pinned = grown;
        cd->pinned_cap = cap;
    }
    cd->pinned[cd->npinned++] = (PinnedBlock){p, bytes ? bytes : 1};
    return p;
}

static void dev_host_free(Device *d, void *p)
{
    CudaDevice *cd = impl(d);
    if (!p) return;
    for (int i = 0; i < cd->npinned; i++) {
        if (cd->pinned[i].p != p) continue;
        cd->pinned[i] = cd->pinned[--cd->npinned];
        break;
    }
    /* An async download into P may still be in flight. */
    cuda_wait(cd, NULL, "cuStreamSynchronize");
    CU(NULL, cuMemFreeHost, p);
}

/* ---- kernels ---- */

static int dev_kernel(Device *d, const char *name, void **handle)
{
    CUfunction f = NULL;
    *handle = NULL;
    CUresult r = cu.cuModuleGetFunction(&f, impl(d)->module, name);
    if (r == CUDA_ERROR_NOT_FOUND && impl(d)->more)
        r = cu.cuModuleGetFunction(&f, impl(d)->more, name);
    if (r != CUDA_SUCCESS) {
        DeviceSite site = {name, "lookup in the compiled module", NULL, 0};
        return cuda_check(r, "cuModuleGetFunction", &site);
    }
    *handle = f;
    return 0;
}

static int load_module(CudaDevice *cd, CUmodule *out, const void *cubin, size_t cubin_size);

static int dev_load_kernels(Device *d, const char *source, const char *name, double *seconds)
{
    CudaDevice *cd = impl(d);
    if (cd->more) {
        fprintf(stderr, "cgc: error: load_kernels: %s: this device already holds a second module\n", name);
        return -1;
    }
    CudaCompileOptions co = {.arch = d->arch};
    CudaCompileResult r = {0};
    int rc = cuda_compile(source, name, &co, &r);
    if (rc == 0) rc = load_module(cd, &cd->more, r.cubin, r.cubin_size);
    *seconds = r.seconds;
    free(r.cubin);
    return rc;
}

static void remember_launch(CudaDevice *cd, const DeviceSite *site)
{
    snprintf(cd->last_kernel, sizeof cd->last_kernel, "%s", site && site->kernel ? site->kernel : "?");
    snprintf(cd->last_what, sizeof cd->last_what, "%s", site && site->what ? site->what : "");
    snprintf(cd->last_net, sizeof cd->last_net, "%s", site && site->net_path ? site->net_path : "");
    cd->last_line = site ? site->line : 0;
}

static int dev_launch(Device *d, void *kernel, unsigned grid, unsigned block, void **args,
                      const DeviceSite *site)
{
    CudaDevice *cd = impl(d);
    char where[512];
    if (!kernel || grid == 0 || block == 0) {
        cuda_site_text(site, where, sizeof where);
        fprintf(stderr, "cgc: error: %s: cuLaunchKernel not called: %s (grid %u, block %u)\n",
                where, !kernel ? "no kernel handle (was it looked up?)" : "empty launch", grid,
                block);
        return -1;
    }
    remember_launch(cd, site);
    CUresult r = cu.cuLaunchKernel((CUfunction)kernel, grid, 1, 1, block, 1, 1, 0, cd->stream,
                                   args, NULL);
    if (r == CUDA_SUCCESS) return 0;
    cuda_check(r, "cuLaunchKernel", site);
    fprintf(stderr, "cgc: note: the launch was grid %u x block %u on %s\n", grid, block, d->name);
    return -1;
}

/* ---- ordering and time ---- */

static int dev_sync(Device *d)
{
    return cuda_wait(impl(d), NULL, "cuStreamSynchronize");
}

static int dev_fence_new(Device *d, DeviceFence **f)
{
    *f = calloc(1, sizeof **f);
    if (!*f) {
        fprintf(stderr, "cgc: error: out of memory for a fence\n");
        return -1;
    }
    if (CU(NULL, cuEventCreate, &(*f)->event, CU_EVENT_DEFAULT)) {
        free(*f);
        *f = NULL;
        return -1;
    }
    return 0;
}

static void dev_fence_free(Device *d, DeviceFence *f)
{
    if (!f) return;
    CU(NULL, cuEventDestroy_v2, f->event);
    free(f);
}

static int dev_fence_record(Device *d, DeviceFence *f)
{
    if (CU(NULL, cuEventRecord, f->event, impl(d)->stream)) return -1;
    f->recorded = true;
    return 0;
}

static int dev_fence_done(Device *d, DeviceFence *f, bool wait, bool *done)
{
    CudaDevice *cd = impl(d);
    *done = false;
    if (wait) {
        if (cuda_wait(cd, f->event, "cuEventSynchronize")) return -1;
        *done = true;
        return 0;
    }
    CUresult r = cu.cuEventQuery(f->event);
    if (r == CUDA_ERROR_NOT_READY) return 0;
    if (cuda_check_wait(cd, r, "cuEventQuery")) return -1;
    *done = true;
    return 0;
}

static int dev_fence_elapsed_ms(Device *d, DeviceFence *from, DeviceFence *to, float *ms)
{
    *ms = 0;
    if (!from->recorded || !to->recorded) {
        fprintf(stderr, "cgc: error: cuEventElapsedTime_v2 not called: a fence was never "
                        "recorded (record both before asking for the time between them)\n");
        return -1;
    }
    return CU(NULL, cuEventElapsedTime_v2, ms, from->event, to->event);
}

/* ---- graphs: stream capture ----
 * Thread-local capture mode: a call of this thread that would be unsafe while the stream
 * is captured (a synchronous copy, an allocation) fails and invalidates the capture,
 * which then surfaces at cuStreamEndCapture. cuBLAS works under capture with the
 * workspace set at open (gemm.c), so it allocates nothing there. */

struct DeviceGraph {
    CUgraph graph;
    CUgraphExec exec;
};

static int dev_capture_begin(Device *d)
{
    return CU(NULL, cuStreamBeginCapture_v2, impl(d)->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
}

static void graph_destroy(DeviceGraph *g)
{
    if (g->exec) CU(NULL, cuGraphExecDestroy, g->exec);
    if (g->graph) CU(NULL, cuGraphDestroy, g->graph);
    free(g);
}

static int dev_capture_end(Device *d, DeviceGraph **out, int *nodes)
{
    *out = NULL;
    *nodes = 0;
    DeviceGraph *g = calloc(1, sizeof *g);
    CUgraph graph = NULL;
    int rc = CU(NULL, cuStreamEndCapture, impl(d)->stream, &graph);   /* ends it, even failing */
    if (!g) {
        if (graph) cu.cuGraphDestroy(graph);
        fprintf(stderr, "cgc: error: out of host memory for a CUDA graph\n");
        return -1;
    }
    g->graph = graph;
    size_t n = 0;
    if (rc || CU(NULL, cuGraphGetNodes, graph, NULL, &n) ||
        CU(NULL, cuGraphInstantiateWithFlags, &g->exec, graph, 0)) {
        graph_destroy(g);
        return -1;
    }
    *out = g;
    *nodes = n > INT_MAX ? INT_MAX : (int)n;
    return 0;
}

static int dev_graph_launch(Device *d, DeviceGraph *g)
{
    return CU(NULL, cuGraphLaunch, g->exec, impl(d)->stream);
}

static void dev_graph_free(Device *d, DeviceGraph *g)
{
    if (!g) return;
    /* a launch of it may still be running */
    cuda_wait(impl(d), NULL, "cuStreamSynchronize");
    graph_destroy(g);
}

static int dev_mem_free(Device *d, size_t *free_bytes)
{
    size_t total = 0;
    (void)d;    /* its context is current on this thread since open_context */
    return CU(NULL, cuMemGetInfo_v2, free_bytes, &total) ? -1 : 0;
}

/* ---- opening and closing ---- */

static void dev_close(Device *d)
{
    CudaDevice *cd = impl(d);
    if (!cd) return;
    if (cd->stream) cuda_wait(cd, NULL, "cuStreamSynchronize");
    if (cd->copies) CU(NULL, cuStreamSynchronize, cd->copies);
#ifdef CGC_HAVE_CUDNN
    cuda_conv_close(cd);
#endif
#ifdef CGC_HAVE_NCCL
    cuda_nccl_close(cd);
#endif
    cuda_gemm_close(cd);
    for (int i = 0; i < cd->npinned; i++) cu.cuMemFreeHost(cd->pinned[i].p);
    free(cd->pinned);
    if (cd->more) CU(NULL, cuModuleUnload, cd->more);
    if (cd->module) CU(NULL, cuModuleUnload, cd->module);
    if (cd->stream) CU(NULL, cuStreamDestroy_v2, cd->stream);
    if (cd->copies) CU(NULL, cuStreamDestroy_v2, cd->copies);
    if (cd->ctx) CU(NULL, cuDevicePrimaryCtxRelease_v2, cd->dev);
    free(cd);
}

static const DeviceOps cuda_ops = {
    .alloc = dev_alloc,
    .free = dev_free,
    .mark_unused = NULL,
    .mark_undefined = NULL,
    .mem_free = dev_mem_free,
    .upload = dev_upload,
    .download = dev_download,
    .download_async = dev_download_async,
    .host_alloc = dev_host_alloc,
    .host_free = dev_host_free,
    .upload_async = dev_upload_async,
    .fence_wait = dev_fence_wait,
    .kernel = dev_kernel,
    .load_kernels = dev_load_kernels,
    .launch = dev_launch,
    .gemm = cuda_gemm,
    .gemm_algos = cuda_gemm_algos,
    .sync = dev_sync,
    .fence_new = dev_fence_new,
    .fence_free = dev_fence_free,
    .fence_record = dev_fence_record,
    .fence_done = dev_fence_done,
    .fence_elapsed_ms = dev_fence_elapsed_ms,
    .capture_begin = dev_capture_begin,
    .capture_end = dev_capture_end,
    .graph_launch = dev_graph_launch,
    .graph_free = dev_graph_free,
    .close = dev_close,
};

/* Loads cuDNN for CD: its ops gain the convolutions where it is there. */
static int open_conv(CudaDevice *cd)
{
#ifdef CGC_HAVE_CUDNN
    bool available;
    if (cuda_conv_init(cd, &available) != 0) return -1;
    if (!available) return 0;
    cd->ops.conv = cuda_conv;
    cd->ops.conv_algos = cuda_conv_algos;
#else
    (void)cd;
#endif
    return 0;
}

/* CD's ops gain the sums over the ranks where cgc was built with NCCL's header. */
static void open_nccl(CudaDevice *cd)
{
#ifdef CGC_HAVE_NCCL
    cuda_nccl_enable(cd);
#else
    (void)cd;
#endif
}

static int open_context(CudaDevice *cd)
{
    char name[100] = "";
    int major = 0, minor = 0;
    if (CU(NULL, cuDeviceGet, &cd->dev, cd->ordinal) ||
        CU(NULL, cuDeviceGetName, name, (int)sizeof name, cd->dev) ||
        CU(NULL, cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cd->dev) ||
        CU(NULL, cuDeviceGetAttribute, &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cd->dev) ||
        CU(NULL, cuDevicePrimaryCtxRetain, &cd->ctx, cd->dev))
        return -1;
    snprintf(cd->base.name, sizeof cd->base.name, "%s (cuda:%d)", name, cd->ordinal);
    snprintf(cd->base.model, sizeof cd->base.model, "%s", name);
    cd->base.arch = 10 * major + minor;
    return CU(NULL, cuCtxSetCurrent, cd->ctx) ||
           CU(NULL, cuStreamCreate, &cd->stream, CU_STREAM_NON_BLOCKING) ||
           CU(NULL, cuStreamCreate, &cd->copies, CU_STREAM_NON_BLOCKING) ? -1 : 0;
}

/* The memory left for the plan's arena: read once the module, cuBLAS and cuBLASLt's
 * workspace hold theirs, so that devexec's check before running compares like with like. */
static int read_free_memory(CudaDevice *cd)
{
    size_t free_bytes = 0, total = 0;
    if (CU(NULL, cuMemGetInfo_v2, &free_bytes, &total)) return -1;
    cd->base.free_bytes = free_bytes;
    return 0;
}

static int load_module(CudaDevice *cd, CUmodule *out, const void *cubin, size_t cubin_size)
{
    if (!cubin || cubin_size == 0) {
        fprintf(stderr, "cgc: error: cuda_open: no compiled module to load (cuda_compile "
                        "first)\n");
        return -1;
    }
    CUresult r = cu.cuModuleLoadData(out, cubin);
    if (r == CUDA_SUCCESS) return 0;
    cuda_check(r, "cuModuleLoadData", NULL);
    int version = 0;
    cu.cuDriverGetVersion(&version);
    fprintf(stderr, "cgc: note: the module is a %zu-byte cubin from NVRTC for %s; the driver "
                    "supports CUDA %d.%d (a driver older than the toolkit may refuse it)\n",
            cubin_size, cd->base.name, version / 1000, version % 1000 / 10);
    return -1;
}

int cuda_print_devices(FILE *out)
{
    CudaDeviceInfo infos[CUDA_MAX_DEVICES];
    char why[512];
    int n = cuda_probe(infos, CUDA_MAX_DEVICES, why, sizeof why);
    if (n == 0) fprintf(out, "no CUDA device: %s\n", why);
    for (int i = 0; i < n && i < CUDA_MAX_DEVICES; i++)
        fprintf(out, "cuda:%d  %s  %.1f GiB  sm_%d%d  %d SMs\n", i, infos[i].name,
                (double)infos[i].total_bytes / (1024.0 * 1024.0 * 1024.0), infos[i].cc_major,
                infos[i].cc_minor, infos[i].sm_count);
#ifdef CGC_HAVE_CUDNN
    const char *path;
    size_t v = cuda_cudnn_version(&path);
    if (v) fprintf(out, "cuDNN %zu.%zu.%zu (%s): convolutions by cuDNN where the plan allows\n", v / 10000,
                   v / 100 % 100, v % 100, path);
    else fprintf(out, "cuDNN: not loaded (%s): convolutions run as cgc's own kernels\n", path);
#endif
    return n;
}

int cuda_free_memory(int ordinal, size_t *free_bytes)
{
    char why[512];
    CUdevice dev;
    CUcontext ctx;
    size_t total = 0;
    *free_bytes = 0;
    if (!cuda_driver_load(why, sizeof why) || cu.cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS ||
        cu.cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
        return -1;
    bool ok = cu.cuCtxSetCurrent(ctx) == CUDA_SUCCESS &&
              cu.cuMemGetInfo_v2(free_bytes, &total) == CUDA_SUCCESS;
    cu.cuDevicePrimaryCtxRelease_v2(dev);
    return ok ? 0 : -1;
}

int cuda_open(int ordinal, const void *cubin, size_t cubin_size, Device **out)
{
    char why[512];
    *out = NULL;
    if (!cuda_driver_load(why, sizeof why)) {
        fprintf(stderr, "cgc: error: cannot open cuda:%d: %s\n", ordinal, why);
        return -1;
    }
    CudaDevice *cd = calloc(1, sizeof *cd);
    if (!cd) {
        fprintf(stderr, "cgc: error: out of memory opening cuda:%d\n", ordinal);
        return -1;
    }
    cd->ops = cuda_ops;
    cd->base.ops = &cd->ops;
    cd->base.impl = cd;
    cd->ordinal = ordinal;
    open_nccl(cd);
    if (open_context(cd) || load_module(cd, &cd->module, cubin, cubin_size) || cuda_gemm_init(cd) ||
        open_conv(cd) || read_free_memory(cd)) {
        dev_close(&cd->base);
        return -1;
    }
    *out = &cd->base;
    return 0;
}
