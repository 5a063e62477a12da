/* cuda_internal.h: what the files of runtime/cuda/ share: the driver API table (the
 * driver is loaded at run time, never linked), error reporting, and the device's state.
 * Not for use outside runtime/cuda/. */
#ifndef CGC_CUDA_INTERNAL_H
#define CGC_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda.h>
#include <stdbool.h>

#include "../device.h"

/* Every driver entry point cgc uses, by the exact symbol libcuda.so.1 exports (the
 * versioned _v2 names where cuda.h maps the plain name to one). The table's types come
 * from cuda.h's prototypes, so a wrong signature does not compile. */
#define CUDA_DRIVER_FUNCS(X)                                                              \
    X(cuGetErrorName) X(cuGetErrorString) X(cuInit) X(cuDriverGetVersion)                 \
    X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceTotalMem_v2)          \
    X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2)   \
    X(cuCtxSetCurrent) X(cuMemGetInfo_v2) X(cuModuleLoadData) X(cuModuleUnload)           \
    X(cuModuleGetFunction) X(cuLaunchKernel) X(cuStreamCreate) X(cuStreamDestroy_v2)      \
    X(cuStreamSynchronize) X(cuEventCreate) X(cuEventDestroy_v2) X(cuEventRecord)         \
    X(cuEventQuery) X(cuEventSynchronize) X(cuEventElapsedTime_v2) X(cuMemAlloc_v2)       \
    X(cuMemFree_v2) X(cuMemsetD8Async) X(cuMemcpyHtoDAsync_v2) X(cuMemcpyDtoHAsync_v2)    \
    X(cuMemHostAlloc) X(cuMemFreeHost) X(cuStreamBeginCapture_v2) X(cuStreamEndCapture)   \
    X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy) \
    X(cuGraphGetNodes) X(cuStreamIsCapturing) X(cuStreamWaitEvent) X(cuStreamQuery)

#define CUDA_DRIVER_FIELD(sym) __typeof__(sym) *sym;
typedef struct CudaDriver {
    CUDA_DRIVER_FUNCS(CUDA_DRIVER_FIELD)
} CudaDriver;
#undef CUDA_DRIVER_FIELD

extern CudaDriver cu;

/* Loads libcuda.so.1 and calls cuInit once per process; false with WHY (a sentence) when
 * there is no usable driver. Later calls give the first answer. */
bool cuda_driver_load(char *why, size_t why_len);

/* Reports a failed driver call R of CALL ("cuMemAlloc_v2") and returns -1; 0 for
 * CUDA_SUCCESS. SITE (may be NULL) names the kernel and the .net line. */
int cuda_check(CUresult r, const char *call, const DeviceSite *site);
/* Calls driver function F with the arguments and checks it, naming F. */
#define CU(site, f, ...) cuda_check(cu.f(__VA_ARGS__), #f, (site))

/* "NAME (description)" of R, into BUF. */
void cuda_result_text(CUresult r, char *buf, size_t len);

/* "models/mlp.net:12: kernel relu_h1 (relu h1)" or "cuda", into BUF. */
void cuda_site_text(const DeviceSite *site, char *buf, size_t len);

/* A pinned host block from host_alloc: uploads from it must wait (see device.c). */
typedef struct PinnedBlock {
    char *p;
    size_t bytes;
} PinnedBlock;

typedef struct CudaDevice {
    Device base;                /* first: a Device * is a CudaDevice * */
    DeviceOps ops;              /* cuda_ops, with cuDNN's convolutions where it loads */
    int ordinal;
    CUdevice dev;
    CUcontext ctx;              /* the primary context, shared with cuBLAS (runtime API) */
    CUstream stream;            /* non-blocking: every copy, launch and GEMM goes here */
    CUstream copies;            /* non-blocking: upload_async's copies, beside the kernels */
    CUmodule module;
    CUmodule more;              /* load_kernels' module (max-autotune's generated GEMMs) */
    cublasHandle_t blas;
    struct CudaLt *lt;          /* cuBLASLt, for GEMMs with an epilogue (gemm.c) */
    struct CudaConv *conv;      /* cuDNN, where it loads (conv.c) */
    struct CudaNccl *nccl;      /* NCCL, once the device joins a job (nccl.c) */
    /* Called by every wait, with the seconds waited so far, while set (nccl.c, once the
     * device has joined a job): the wait polls instead of blocking. */
    void (*poll)(struct CudaDevice *cd, double waited);
    PinnedBlock *pinned;
    int npinned, pinned_cap;
    /* The last launch, for errors that surface later (at a sync). */
    char last_kernel[128], last_what[128], last_net[256];
    int last_line;
} CudaDevice;

struct DeviceFence {
    CUevent event;
    bool recorded;
};

/* Waits for EVENT, or for all the work queued on CD's stream when EVENT is NULL; CALL
 * names the wait in an error. Where the device sums over ranks the wait polls instead of
 * blocking (CudaDevice.poll), so that a rank that died or hangs in a sum, for which
 * NCCL's kernels would wait forever, ends the job (runtime/cuda/driver.c). */
int cuda_wait(CudaDevice *cd, CUevent event, const char *call);
/* Reports R, the answer of a wait or a query of CD's work, as cuda_check does, adding
 * which kernel ran last (an error may belong to any kernel issued before); 0 for success. */
int cuda_check_wait(CudaDevice *cd, CUresult r, const char *call);

/* cuBLAS and cuBLASLt on the device's stream (runtime/cuda/gemm.c). */
int cuda_gemm_init(CudaDevice *cd);
void cuda_gemm_close(CudaDevice *cd);
int cuda_gemm(Device *d, const GemmCall *g, const DeviceSite *site);
int cuda_gemm_algos(Device *d, const GemmCall *g, int *count, const DeviceSite *site);

/* cuDNN's convolutions on the device's stream (runtime/cuda/conv.c). *AVAILABLE: whether
 * cuDNN loaded and started (without it the device offers no `conv`, and init still
 * succeeds). */
int cuda_conv_init(CudaDevice *cd, bool *available);
/* cuDNN's version (9.1.0 as 90100) where it loads, else 0; *PATH: what was loaded. */
size_t cuda_cudnn_version(const char **path);
void cuda_conv_close(CudaDevice *cd);
int cuda_conv(Device *d, const ConvCall *c, const DeviceSite *site);
int cuda_conv_algos(Device *d, const ConvCall *c, int *count, const DeviceSite *site);

/* NCCL's sums over the ranks (runtime/cuda/nccl.c): enable gives CD's ops join,
 * coll_start and coll_wait (the library loads at join); close ends what join began. */
void cuda_nccl_enable(CudaDevice *cd);
void cuda_nccl_close(CudaDevice *cd);

#endif
