/* conv.c: the device's convolutions through cuDNN 9, on the device's stream.
 *
 * cuDNN is loaded at run time, like the driver: dlopen of $CGC_CUDNN when set, else of
 * "libcudnn.so.9" (the CUDA Toolkit's, or the one a PyTorch wheel brings when its folder
 * is on LD_LIBRARY_PATH). Without it the device has no `conv` op and the plan's own steps
 * compute every convolution, so cgc builds and runs where cuDNN is not installed.
 *
 * The calls are cuDNN's convolution API (cudnnConvolutionForward and its two gradients),
 * what PyTorch drives with cudnn.benchmark. Per call shape (a ConvCall but for its
 * addresses) a small cache keeps the descriptors and the algorithms of the heuristics'
 * list (cudnnGet*Algorithm_v7), best first, less those that
 *   - are not deterministic (cgc's runs repeat bit for bit: plan.h's kernel ABI),
 *   - use tensor cores on f32 data where the GEMMs may not (GEMM_F32, no TF32),
 *   - want more than CONV_WORKSPACE_MAX bytes of workspace.
 * Algorithm 0 is the list's first; K >= 1 its K-th, the last for a shorter list.
 * One workspace serves every call (one stream); it grows outside a capture only, and
 * conv_algos grows it for all the algorithms it counts, so that a captured call finds it
 * large enough. The legacy API is deprecated in cuDNN 9 but complete for 2-D
 * convolutions; the warnings are silenced for this file alone. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cudnn.h>

#include "../../codegen/plan.h"
#include "cuda_internal.h"

#define CUDNN_FUNCS(X)                                                                     \
    X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream) X(cudnnGetErrorString)                \
    X(cudnnCreateTensorDescriptor) X(cudnnDestroyTensorDescriptor)                         \
    X(cudnnSetTensor4dDescriptor) X(cudnnCreateFilterDescriptor)                           \
    X(cudnnDestroyFilterDescriptor) X(cudnnSetFilter4dDescriptor)                          \
    X(cudnnCreateConvolutionDescriptor) X(cudnnDestroyConvolutionDescriptor)               \
    X(cudnnSetConvolution2dDescriptor) X(cudnnSetConvolutionMathType)                      \
    X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnGetConvolutionBackwardDataAlgorithm_v7) \
    X(cudnnGetConvolutionBackwardFilterAlgorithm_v7) X(cudnnConvolutionForward)            \
    X(cudnnConvolutionBackwardData) X(cudnnConvolutionBackwardFilter)                      \
    X(cudnnGetConvolutionForwardWorkspaceSize) X(cudnnGetConvolutionBackwardDataWorkspaceSize) \
    X(cudnnGetConvolutionBackwardFilterWorkspaceSize)

#define CUDNN_FIELD(sym) __typeof__(sym) *sym;
typedef struct Cudnn {
    CUDNN_FUNCS(CUDNN_FIELD)
} Cudnn;
#undef CUDNN_FIELD

enum { CONV_CACHE = 32 };
#define CONV_WORKSPACE_MAX ((size_t)512 << 20)

/* A call shape: a ConvCall without its addresses or algorithm. */
typedef struct ConvKey {
    ConvKind kind;
    int64_t dims[9];                    /* n, c, h, w, k, r, s, oh, ow */
    int geometry[6];                    /* stride, pad, dilation */
    DType type;
    int compute;
} ConvKey;

typedef struct ConvEntry {
    ConvKey key;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t fd;
    cudnnConvolutionDescriptor_t cd;
    int algo[DEVICE_CONV_ALGOS];        /* the kind's algorithm enum, best first */
    cudnnMathType_t math[DEVICE_CONV_ALGOS];
    size_t memory[DEVICE_CONV_ALGOS];
    int nalgo;
} ConvEntry;

struct CudaConv {
    void *lib;
    Cudnn dnn;
    cudnnHandle_t handle;
    CUdeviceptr workspace;
    size_t workspace_bytes;
    ConvEntry cache[CONV_CACHE];
    int ncache;
    unsigned next_evict;
};

static int dnn_check(const struct CudaConv *cv, cudnnStatus_t s, const char *call, const DeviceSite *site)
{
    if (s == CUDNN_STATUS_SUCCESS) return 0;
    char where[512];
    cuda_site_text(site, where, sizeof where);
    fprintf(stderr, "cgc: error: %s: %s failed: %s\n", where, call, cv->dnn.cudnnGetErrorString(s));
    return -1;
}

#define DNN(cv, site, f, ...) dnn_check((cv), (cv)->dnn.f(__VA_ARGS__), #f, (site))

static void entry_free(struct CudaConv *cv, ConvEntry *e)
{
    if (e->xd) cv->dnn.cudnnDestroyTensorDescriptor(e->xd);
    if (e->yd) cv->dnn.cudnnDestroyTensorDescriptor(e->yd);
    if (e->fd) cv->dnn.cudnnDestroyFilterDescriptor(e->fd);
    if (e->cd) cv->dnn.cudnnDestroyConvolutionDescriptor(e->cd);
    memset(e, 0, sizeof *e);
}

/* The library cgc loads: $CGC_CUDNN, else libcudnn.so.9 from the loader's path. */
static const char *dnn_path(void)
{
    const char *path = getenv("CGC_CUDNN");
    return path && *path ? path : "libcudnn.so.9";
}

size_t cuda_cudnn_version(const char **path)
{
    *path = dnn_path();
    void *lib = dlopen(*path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) return 0;
    size_t (*get_version)(void);
    *(void **)&get_version = dlsym(lib, "cudnnGetVersion");
    size_t version = get_version ? get_version() : 0;
    dlclose(lib);
    return version;
}

/* Loads cuDNN's entry points into CV; false (quietly: the steps run instead) when the
 * library or one of them is missing. */
static bool dnn_load(struct CudaConv *cv)
{
    cv->lib = dlopen(dnn_path(), RTLD_NOW | RTLD_LOCAL);
    if (!cv->lib) return false;
#define CUDNN_LOAD(sym) if (!(*(void **)&cv->dnn.sym = dlsym(cv->lib, #sym))) return false;
    CUDNN_FUNCS(CUDNN_LOAD)
#undef CUDNN_LOAD
    return true;
}

int cuda_conv_init(CudaDevice *cd, bool *available)
{
    *available = false;
    struct CudaConv *cv = calloc(1, sizeof *cv);
    if (!cv) {
        fprintf(stderr, "cgc: error: out of host memory for cuDNN\n");
        return -1;
    }
    cd->conv = cv;
    if (!dnn_load(cv)) return 0;
    /* cudnnCreate, like cublasCreate, finds the primary context current on this thread.
     * A cuDNN that loads but cannot start (built for a newer driver, say) leaves the run
     * to cgc's own kernels, as a missing one does. */
    cudnnStatus_t st = cv->dnn.cudnnCreate(&cv->handle);
    if (st == CUDNN_STATUS_SUCCESS) st = cv->dnn.cudnnSetStream(cv->handle, (cudaStream_t)cd->stream);
    if (st == CUDNN_STATUS_SUCCESS) {
        *available = true;
        return 0;
    }
    fprintf(stderr, "cgc: warning: cuDNN loaded but did not start (%s); convolutions run as cgc's "
                    "own kernels\n", cv->dnn.cudnnGetErrorString(st));
    if (cv->handle) cv->dnn.cudnnDestroy(cv->handle);
    cv->handle = NULL;
    return 0;
}

void cuda_conv_close(CudaDevice *cd)
{
    struct CudaConv *cv = cd->conv;
    if (!cv) return;
    for (int i = 0; i < cv->ncache; i++) entry_free(cv, &cv->cache[i]);
    if (cv->workspace) {            /* queued calls may still use it */
        cuda_wait(cd, NULL, "cuStreamSynchronize");
        CU(NULL, cuMemFree_v2, cv->workspace);
    }
    if (cv->handle) cv->dnn.cudnnDestroy(cv->handle);
    if (cv->lib) dlclose(cv->lib);
    free(cv);
    cd->conv = NULL;
}

static ConvKey key_of(const ConvCall *c)
{
    ConvKey k;
    memset(&k, 0, sizeof k);        /* compared with memcmp */
    k.kind = c->kind;
    int64_t dims[9] = {c->n, c->c, c->h, c->w, c->k, c->r, c->s, c->oh, c->ow};
    memcpy(k.dims, dims, sizeof dims);
    int geometry[6] = {c->stride[0], c->stride[1], c->pad[0], c->pad[1], c->dilation[0], c->dilation[1]};
    memcpy(k.geometry, geometry, sizeof geometry);
    k.type = c->type;
    k.compute = c->compute;
    return k;
}

static bool dnn_type(DType t, cudnnDataType_t *out)
{
    switch (t) {
    case DT_F32: *out = CUDNN_DATA_FLOAT; return true;
    case DT_F16: *out = CUDNN_DATA_HALF; return true;
    case DT_BF16: *out = CUDNN_DATA_BFLOAT16; return true;
    default: return false;
    }
}

/* The descriptors of C into E. */
static int describe(struct CudaConv *cv, const ConvCall *c, ConvEntry *e, const DeviceSite *site)
{
    cudnnDataType_t t;
    for (int i = 0; i < 9; i++)
        if (e->key.dims[i] < 1 || e->key.dims[i] > INT_MAX) {
            char where[512];
            cuda_site_text(site, where, sizeof where);
            fprintf(stderr, "cgc: error: %s: a convolution dimension of %lld is beyond cuDNN's int\n",
                    where, (long long)e->key.dims[i]);
            return -1;
        }
    if (!dnn_type(c->type, &t)) CGC_INTERNAL("a convolution of type %s", ir_dtype_name(c->type));
    cudnnMathType_t math = c->compute == GEMM_F32 ? CUDNN_FMA_MATH
                         : c->type == DT_F32     ? CUDNN_DEFAULT_MATH : CUDNN_TENSOR_OP_MATH;
    return DNN(cv, site, cudnnCreateTensorDescriptor, &e->xd) ||
           DNN(cv, site, cudnnCreateTensorDescriptor, &e->yd) ||
           DNN(cv, site, cudnnCreateFilterDescriptor, &e->fd) ||
           DNN(cv, site, cudnnCreateConvolutionDescriptor, &e->cd) ||
           DNN(cv, site, cudnnSetTensor4dDescriptor, e->xd, CUDNN_TENSOR_NCHW, t, (int)c->n, (int)c->c,
               (int)c->h, (int)c->w) ||
           DNN(cv, site, cudnnSetTensor4dDescriptor, e->yd, CUDNN_TENSOR_NCHW, t, (int)c->n, (int)c->k,
               (int)c->oh, (int)c->ow) ||
           DNN(cv, site, cudnnSetFilter4dDescriptor, e->fd, t, CUDNN_TENSOR_NCHW, (int)c->k, (int)c->c,
               (int)c->r, (int)c->s) ||
           DNN(cv, site, cudnnSetConvolution2dDescriptor, e->cd, c->pad[0], c->pad[1], c->stride[0],
               c->stride[1], c->dilation[0], c->dilation[1], CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ||
           DNN(cv, site, cudnnSetConvolutionMathType, e->cd, math)
               ? -1 : 0;
}

/* Whether a heuristic's answer is one cgc may run (this file's comment). */
static bool usable(cudnnStatus_t status, cudnnDeterminism_t det, cudnnMathType_t math, size_t memory,
                   const ConvCall *c)
{
    bool strict = c->compute == GEMM_F32 && c->type == DT_F32;
    return status == CUDNN_STATUS_SUCCESS && det == CUDNN_DETERMINISTIC && memory <= CONV_WORKSPACE_MAX &&
           !(strict && math != CUDNN_FMA_MATH);
}

/* Keeps an answer of the heuristics in E when usable. */
#define KEEP(e, p, c)                                                                       \
    if (usable((p).status, (p).determinism, (p).mathType, (p).memory, (c)) &&              \
        (e)->nalgo < DEVICE_CONV_ALGOS) {                                                   \
        (e)->algo[(e)->nalgo] = (int)(p).algo;                                              \
        (e)->math[(e)->nalgo] = (p).mathType;                                               \
        (e)->memory[(e)->nalgo++] = (p).memory;                                             \
    }

/* The workspace algorithm I of E needs, as cuDNN states it for the call (the heuristics'
 * figure is an estimate), into E->memory[I]; false when cuDNN will not say (the
 * algorithm is then left out, as one the heuristics marked unsupported). */
static bool workspace_of(struct CudaConv *cv, const ConvCall *c, ConvEntry *e, int i)
{
    size_t bytes = 0;
    cudnnStatus_t st = cv->dnn.cudnnSetConvolutionMathType(e->cd, e->math[i]);
    if (st == CUDNN_STATUS_SUCCESS && c->kind == CONV_FORWARD)
        st = cv->dnn.cudnnGetConvolutionForwardWorkspaceSize(cv->handle, e->xd, e->fd, e->cd, e->yd,
                                                             (cudnnConvolutionFwdAlgo_t)e->algo[i], &bytes);
    else if (st == CUDNN_STATUS_SUCCESS && c->kind == CONV_DATA_GRAD)
        st = cv->dnn.cudnnGetConvolutionBackwardDataWorkspaceSize(cv->handle, e->fd, e->yd, e->cd, e->xd,
                                                                  (cudnnConvolutionBwdDataAlgo_t)e->algo[i], &bytes);
    else if (st == CUDNN_STATUS_SUCCESS)
        st = cv->dnn.cudnnGetConvolutionBackwardFilterWorkspaceSize(
            cv->handle, e->xd, e->yd, e->cd, e->fd, (cudnnConvolutionBwdFilterAlgo_t)e->algo[i], &bytes);
    if (st != CUDNN_STATUS_SUCCESS) return false;
    if (bytes > e->memory[i]) e->memory[i] = bytes;
    return e->memory[i] <= CONV_WORKSPACE_MAX;
}

/* The heuristics' list for C into E. */
static int list_algos(struct CudaConv *cv, const ConvCall *c, ConvEntry *e, const DeviceSite *site)
{
    enum { ASK = 16 };
    int got = 0;
    if (c->kind == CONV_FORWARD) {
        cudnnConvolutionFwdAlgoPerf_t p[ASK];
        if (DNN(cv, site, cudnnGetConvolutionForwardAlgorithm_v7, cv->handle, e->xd, e->fd, e->cd, e->yd,
                ASK, &got, p) != 0)
            return -1;
        for (int i = 0; i < got; i++) KEEP(e, p[i], c)
    } else if (c->kind == CONV_DATA_GRAD) {
        cudnnConvolutionBwdDataAlgoPerf_t p[ASK];
        if (DNN(cv, site, cudnnGetConvolutionBackwardDataAlgorithm_v7, cv->handle, e->fd, e->yd, e->cd,
                e->xd, ASK, &got, p) != 0)
            return -1;
        for (int i = 0; i < got; i++) KEEP(e, p[i], c)
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[ASK];
        if (DNN(cv, site, cudnnGetConvolutionBackwardFilterAlgorithm_v7, cv->handle, e->xd, e->yd, e->cd,
                e->fd, ASK, &got, p) != 0)
            return -1;
        for (int i = 0; i < got; i++) KEEP(e, p[i], c)
    }
    int kept = 0;
    for (int i = 0; i < e->nalgo; i++)
        if (workspace_of(cv, c, e, i))
            e->algo[kept] = e->algo[i], e->math[kept] = e->math[i], e->memory[kept++] = e->memory[i];
    e->nalgo = kept;
    return 0;
}

/* C's cache entry, made on first use. */
static ConvEntry *entry_of(struct CudaConv *cv, const ConvCall *c, const DeviceSite *site)
{
    ConvKey key = key_of(c);
    for (int i = 0; i < cv->ncache; i++)
        if (memcmp(&cv->cache[i].key, &key, sizeof key) == 0) return &cv->cache[i];
    ConvEntry *e;
    if (cv->ncache < CONV_CACHE) e = &cv->cache[cv->ncache++];
    else {
        e = &cv->cache[cv->next_evict++ % CONV_CACHE];
        entry_free(cv, e);
    }
    e->key = key;
    if (describe(cv, c, e, site) != 0 || list_algos(cv, c, e, site) != 0) {
        entry_free(cv, e);      /* a zeroed entry matches no key (n >= 1) */
        return NULL;
    }
    return e;
}

/* Makes the workspace at least BYTES, outside a capture only. */
static int workspace_for(CudaDevice *cd, size_t bytes, const DeviceSite *site)
{
    struct CudaConv *cv = cd->conv;
    if (bytes <= cv->workspace_bytes) return 0;
    CUstreamCaptureStatus capturing;
    if (CU(site, cuStreamIsCapturing, cd->stream, &capturing) != 0) return -1;
    if (capturing != CU_STREAM_CAPTURE_STATUS_NONE) {
        char where[512];
        cuda_site_text(site, where, sizeof where);
        fprintf(stderr, "cgc: error: %s: cuDNN needs %zu bytes of workspace, more than it had before "
                        "the CUDA graph's capture\n", where, bytes);
        return -1;
    }
    if (cv->workspace) {
        if (cuda_wait(cd, NULL, "cuStreamSynchronize") != 0 || CU(site, cuMemFree_v2, cv->workspace) != 0)
            return -1;
        cv->workspace = 0;
        cv->workspace_bytes = 0;
    }
    if (CU(site, cuMemAlloc_v2, &cv->workspace, bytes) != 0) return -1;
    cv->workspace_bytes = bytes;
    return 0;
}

int cuda_conv_algos(Device *d, const ConvCall *c, int *count, const DeviceSite *site)
{
    CudaDevice *cd = (CudaDevice *)d;
    ConvEntry *e = entry_of(cd->conv, c, site);
    if (!e) return -1;
    size_t most = 0;
    for (int i = 0; i < e->nalgo; i++) most = e->memory[i] > most ? e->memory[i] : most;
    *count = e->nalgo;
    return workspace_for(cd, most, site);
}

int cuda_conv(Device *d, const ConvCall *c, const DeviceSite *site)
{
    CudaDevice *cd = (CudaDevice *)d;
    struct CudaConv *cv = cd->conv;
    ConvEntry *e = entry_of(cv, c, site);
    if (!e) return -1;
    if (e->nalgo == 0) {    /* conv_algos said so: the runner runs the steps instead */
        char where[512];
        cuda_site_text(site, where, sizeof where);
        fprintf(stderr, "cgc: error: %s: cuDNN offers no deterministic algorithm for this convolution "
                        "within %zu MiB of workspace\n", where, CONV_WORKSPACE_MAX >> 20);
        return -1;
    }
    int i = c->algo <= 0 ? 0 : (c->algo > e->nalgo ? e->nalgo : c->algo) - 1;
    if (workspace_for(cd, e->memory[i], site) != 0 ||
        DNN(cv, site, cudnnSetConvolutionMathType, e->cd, e->math[i]) != 0)
        return -1;
    const float one = 1, zero = 0;
    void *ws = (void *)(uintptr_t)cv->workspace, *x = (void *)(uintptr_t)c->x, *f = (void *)(uintptr_t)c->f,
         *y = (void *)(uintptr_t)c->y;
    size_t wsb = cv->workspace_bytes;
    if (c->kind == CONV_FORWARD)
        return DNN(cv, site, cudnnConvolutionForward, cv->handle, &one, e->xd, x, e->fd, f, e->cd,
                   (cudnnConvolutionFwdAlgo_t)e->algo[i], ws, wsb, &zero, e->yd, y);
    if (c->kind == CONV_DATA_GRAD)
        return DNN(cv, site, cudnnConvolutionBackwardData, cv->handle, &one, e->fd, f, e->yd, y, e->cd,
                   (cudnnConvolutionBwdDataAlgo_t)e->algo[i], ws, wsb, &zero, e->xd, x);
    return DNN(cv, site, cudnnConvolutionBackwardFilter, cv->handle, &one, e->xd, x, e->yd, y, e->cd,
               (cudnnConvolutionBwdFilterAlgo_t)e->algo[i], ws, wsb, &zero, e->fd, f);
}
