/* device.h: what the plan runner needs from a device, and the devices that provide it.
 *
 * Two implementations keep this contract:
 *   - cuda (runtime/cuda/driver.c): the driver API loaded at run time with
 *     dlopen("libcuda.so.1"), so cgc starts on machines with no driver; kernels from an
 *     NVRTC-compiled module (runtime/cuda/nvrtc.c, with its on-disk cache); GEMMs through
 *     cuBLAS; everything ordered on one stream.
 *   - emu (tests/emu): the generated .cu compiled by the host C++ compiler against a header
 *     that emulates the CUDA execution model; "device" memory is host memory; GEMMs go to
 *     the reference (OpenBLAS) GEMM; every call completes before it returns.
 *
 * Every call returns 0, or -1 after printing one error that names the call, the error,
 * and (for launches and GEMMs) the kernel and its .net line from the DeviceSite.
 */
#ifndef CGC_DEVICE_H
#define CGC_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../codegen/plan.h"
#include "../compiler/ir.h"
#include "comm.h"

typedef uint64_t DevPtr;            /* a device address; 0 is none */

enum { DEVICE_GEMM_ALGOS = PLAN_GEMM_ALGOS };   /* algorithms a GEMM's tuning chooses among */
enum { DEVICE_CONV_ALGOS = 8 };                 /* and a convolution's */

/* Where a launch or GEMM came from, for error messages. */
typedef struct DeviceSite {
    const char *kernel;             /* kernel name, or "cublasGemmEx" */
    const char *what;               /* the step: "relu h1" */
    const char *net_path;           /* may be NULL */
    int line;                       /* .net line, 0 for none */
} DeviceSite;

/* A GEMM with every size resolved; see PlanGemm for the meaning (row-major). */
typedef struct GemmCall {
    bool trans_a, trans_b;
    int64_t m, n, k, batch;
    DevPtr a, b, c;
    int64_t stride_a, stride_b, stride_c;   /* elements; 0 = shared by every batch */
    DType a_type, b_type, c_type;
    int compute;                            /* GemmCompute (codegen/plan.h) */
    int epilogue;                           /* GemmEpilogue (codegen/plan.h); batch 1 only */
    DevPtr bias, aux;                       /* epilogue operands (aux 0: none) */
    DType bias_type;
    /* The algorithm: 0, the library's own choice; K >= 1, the K-th of the candidates
     * gemm_algos counts for this call (max-autotune's choice; a call with other sizes
     * that has fewer takes its last). */
    int algo;
} GemmCall;

/* A convolution as a library computes it: NCHW tensors, the filter [k, c, r, s], groups
 * 1, cross-correlation (no flip), zero padding; every size resolved. What a PlanWindow
 * run computes (codegen/plan.h) when a library runs it.
 *   CONV_FORWARD      y = x * f                        reads x, f; writes y
 *   CONV_DATA_GRAD    x = the gradient of x given y    reads y, f; writes x
 *   CONV_FILTER_GRAD  f = the gradient of f given y    reads x, y; writes f (summed over n)
 * The result is overwritten (beta 0). */
typedef enum ConvKind { CONV_FORWARD, CONV_DATA_GRAD, CONV_FILTER_GRAD, CONV_KINDS } ConvKind;

typedef struct ConvCall {
    ConvKind kind;
    int64_t n, c, h, w;             /* x: [n, c, h, w] */
    int64_t k, r, s;                /* f: [k, c, r, s] */
    int64_t oh, ow;                 /* y: [n, k, oh, ow] */
    int stride[2], pad[2], dilation[2];
    DevPtr x, f, y;
    DType type;                     /* of x, f and y: f32, f16 or bf16 */
    int compute;                    /* GemmCompute: GEMM_F32 allows no TF32 */
    int algo;                       /* as GemmCall.algo, among conv_algos' */
} ConvCall;

/* The collective that IR collective OP asks of the job, by the side that is this rank's
 * slice (ops.def's SLICE): what both the CPU executor's and a device's run. */
static inline CommOp comm_op_of(IrOp op)
{
    IrSlice s = ir_op_info[op].slice;
    return s == IR_SLICE_OUT ? COMM_REDUCE_SCATTER : s == IR_SLICE_IN ? COMM_ALLGATHER : COMM_SUM;
}

/* One value of a collective over the job's R ranks: COUNT elements of TYPE, read at IN,
 * the result written at OUT. A sum (COMM_SUM) is made in place (IN == OUT). With S =
 * ceil(COUNT / R), rank r's slice of a value is its elements [r S, r S + S), zeros past
 * the end: a reduce-scatter (COMM_REDUCE_SCATTER) writes this rank's slice of the sum of
 * the COUNT elements at IN to the S elements at OUT; an all-gather (COMM_ALLGATHER) puts
 * every rank's slice (S elements at IN) together into the COUNT elements at OUT. */
typedef struct DeviceSpan {
    DevPtr in, out;
    int64_t count;
    DType type;                     /* f32, f16 or bf16 */
} DeviceSpan;

typedef struct Device Device;
typedef struct DeviceFence DeviceFence;     /* a point in the device's stream */
typedef struct DeviceGraph DeviceGraph;     /* recorded work, replayed as one (a CUDA graph) */

typedef struct DeviceOps {
    /* Memory. alloc gives zeroed memory aligned to 256 bytes. */
    int (*alloc)(Device *d, size_t bytes, DevPtr *out);
    void (*free)(Device *d, DevPtr p);
    /* Marks [p, p + bytes) as not to be touched by kernels (arena padding); the emulation
     * poisons it for AddressSanitizer, the GPU ignores it. May be NULL. */
    void (*mark_unused)(Device *d, DevPtr p, size_t bytes);
    /* Marks [p, p + bytes) as holding nothing yet, before the first step of a run that
     * names it: the emulation fills it with 0xFF bytes (NaN in every float type, -1 as an
     * integer), so that a kernel that reads it before writing it fails its comparison;
     * the GPU ignores it. May be NULL. */
    void (*mark_undefined)(Device *d, DevPtr p, size_t bytes);
    /* The device memory free now, as the driver reports it (to set against free_bytes,
     * the free memory at open: -v's "in use" line). NULL where it is not known. */
    int (*mem_free)(Device *d, size_t *free_bytes);
    /* Ordered after earlier work; SRC may be reused as soon as upload returns. */
    int (*upload)(Device *d, DevPtr dst, const void *src, size_t bytes);
    /* Waits for earlier work, then copies. */
    int (*download)(Device *d, void *dst, DevPtr src, size_t bytes);
    /* Ordered after earlier work, does not wait: DST (from host_alloc) holds the bytes once
     * the fence F recorded after it has passed. */
    int (*download_async)(Device *d, void *dst, DevPtr src, size_t bytes);
    void *(*host_alloc)(Device *d, size_t bytes);      /* pinned on the GPU; NULL on failure */
    void (*host_free)(Device *d, void *p);
    /* A copy on the device's second stream, so that it overlaps the kernels: it starts
     * once AFTER (a fence recorded on either stream; NULL: none) has passed, and DONE is
     * recorded after it. SRC (from host_alloc) must stay as it is until DONE has passed,
     * and no kernel may read DST before the stream has waited for DONE (fence_wait). */
    int (*upload_async)(Device *d, DevPtr dst, const void *src, size_t bytes, DeviceFence *after,
                        DeviceFence *done);
    /* Work queued on the stream from now on waits until F has passed. */
    int (*fence_wait)(Device *d, DeviceFence *f);

    /* Kernels of the loaded module, by name; the handle stays valid while D lives. */
    int (*kernel)(Device *d, const char *name, void **handle);
    /* Compiles SOURCE (a module: the prelude, then kernels) for the device and loads it
     * beside the first, so that `kernel` finds its kernels too; NAME names it in errors and
     * the kernel cache. Once per device. *SECONDS: the compile's (or cache load's) wall
     * time. The generated GEMMs of max-autotune come this way, only when needed. */
    int (*load_kernels)(Device *d, const char *source, const char *name, double *seconds);
    /* ARGS as cuLaunchKernel's kernelParams: args[i] points at parameter i's value. */
    int (*launch)(Device *d, void *kernel, unsigned grid, unsigned block, void **args,
                  const DeviceSite *site);
    int (*gemm)(Device *d, const GemmCall *g, const DeviceSite *site);
    /* How many algorithms GEMM G can be given (GemmCall.algo from 1 to *COUNT), in the
     * library's order of preference, at most DEVICE_GEMM_ALGOS; *COUNT is 0 when G
     * cannot take a choice (a batched GEMM). NULL where the device offers no choice. */
    int (*gemm_algos)(Device *d, const GemmCall *g, int *count, const DeviceSite *site);
    /* A convolution (NULL where the device has no convolution library), and how many
     * algorithms it can be given (ConvCall.algo from 1 to *COUNT), best first by the
     * library's heuristics, at most DEVICE_CONV_ALGOS. Memory the call needs beside its
     * tensors (a workspace) is the device's affair; conv_algos makes room for every
     * algorithm it counts, so that a later call allocates nothing (a capture may follow). */
    int (*conv)(Device *d, const ConvCall *c, const DeviceSite *site);
    int (*conv_algos)(Device *d, const ConvCall *c, int *count, const DeviceSite *site);

    /* Several ranks (NULL where the device cannot be one). join makes D a rank of job
     * C, once, before any collective. coll_start runs OP (COMM_SUM, COMM_REDUCE_SCATTER
     * or COMM_ALLGATHER) over the ranks on N spans, ordered after earlier work, as
     * collective SLOT (a small number >= 0, one per collective in flight), while later
     * work goes on beside it; coll_wait orders all later work after SLOT's collective.
     * Between the two nothing may write the spans' inputs or touch their outputs. */
    int (*join)(Device *d, Comm *c);
    int (*coll_start)(Device *d, int slot, CommOp op, const DeviceSpan *span, int n);
    int (*coll_wait)(Device *d, int slot);

    /* Ordering and time. */
    int (*sync)(Device *d);
    int (*fence_new)(Device *d, DeviceFence **f);
    void (*fence_free)(Device *d, DeviceFence *f);
    int (*fence_record)(Device *d, DeviceFence *f);
    /* DONE: whether everything before the last record has finished; WAIT blocks until so. */
    int (*fence_done)(Device *d, DeviceFence *f, bool wait, bool *done);
    /* Milliseconds of device time between two recorded (and passed) fences. */
    int (*fence_elapsed_ms)(Device *d, DeviceFence *from, DeviceFence *to, float *ms);

    /* Graphs (NULL where the device cannot record them). Between capture_begin and
     * capture_end, launches and GEMMs are recorded with their arguments' values at the
     * call, not run; any other call (a copy, a sync, a fence) is an error there, and
     * makes capture_end fail. capture_end always ends the recording; on success *OUT
     * holds the graph, ready to launch, and *NODES its nodes (the launches, a GEMM's
     * kernels, copies or sets).
     * graph_launch runs it once, ordered like any other work. */
    int (*capture_begin)(Device *d);
    int (*capture_end)(Device *d, DeviceGraph **out, int *nodes);
    int (*graph_launch)(Device *d, DeviceGraph *g);
    void (*graph_free)(Device *d, DeviceGraph *g);

    void (*close)(Device *d);
} DeviceOps;

struct Device {
    const DeviceOps *ops;
    void *impl;
    char name[128];                 /* "NVIDIA H100 80GB HBM3 (cuda:0)", "CUDA emulation" */
    char model[128];                /* "NVIDIA H100 80GB HBM3": what autotune choices are for */
    int arch;                       /* its compute capability as 90 for sm_90 */
    size_t free_bytes;              /* device memory free once opened, after what the device
                                     * itself holds (module, BLAS workspaces); 0: unknown */
    bool clock_modeled;             /* fences read a modeled clock, not a measured one: the
                                     * same work takes the same time every issue */
};

/* ---- the CUDA device (runtime/cuda/) ---- */

/* What `cgc --devices` prints and `--device auto` decides from. */
/* The most devices cgc looks at: cuda:0 to cuda:15. */
enum { CUDA_MAX_DEVICES = 16 };

typedef struct CudaDeviceInfo {
    char name[128];
    size_t total_bytes;
    int cc_major, cc_minor;
    int sm_count;
} CudaDeviceInfo;

/* Loads the driver and counts devices. Returns the count (0 when none is usable) and, in
 * WHY, a sentence saying why none is ("libcuda.so.1 not found: no NVIDIA driver"). */
int cuda_probe(CudaDeviceInfo *infos, int max, char *why, size_t why_len);

/* The memory free on device ORDINAL now (cuMemGetInfo), into *FREE_BYTES. It needs a
 * context: it retains the device's primary context for the query and releases it, so it
 * costs about one context creation. Returns 0, or -1 (quietly) when it cannot tell. */
int cuda_free_memory(int ordinal, size_t *free_bytes);

/* Loads cuBLAS and cuBLASLt and their entry points, as the first cuda_open does (they are
 * not linked: loading them costs every run of cgc a tenth of a second). Needs no GPU.
 * Returns 0, or -1 after saying why. */
int cuda_blas_load(void);

/* Prints the device list as `cgc --devices` does, one line per device:
 *     cuda:0  NVIDIA H100 80GB HBM3  79.1 GiB  sm_90  132 SMs
 * or one line "no CUDA device: WHY". Returns the number of devices. */
int cuda_print_devices(FILE *out);

/* Compile options for cuda_open and `--check` (runtime/cuda/nvrtc.c). */
typedef struct CudaCompileOptions {
    int arch;                       /* compute capability as 90 for sm_90 */
    bool verbose;                   /* -v: report cold/warm compile times */
    const char *emit_dir;           /* where the module source was emitted, for errors */
    bool cold;                      /* compile with NVRTC even when the cache holds the
                                     * module (--bench's cold time); still stored */
} CudaCompileOptions;

typedef struct CudaCompileResult {
    void *cubin;                    /* malloc'd */
    size_t cubin_size;
    double seconds;                 /* wall time of this compile (or cache load) */
    bool from_cache;
} CudaCompileResult;

/* Compiles SOURCE (a whole module) for O->arch, through the kernel cache
 * (runtime/cuda/kcache.h). On failure prints the NVRTC log whole and where the source
 * is, and returns -1. */
int cuda_compile(const char *source, const char *module_name, const CudaCompileOptions *o,
                 CudaCompileResult *out);

/* Opens device ORDINAL: primary context, one stream, cuBLAS on that stream, and loads
 * CUBIN as the module that `kernel` looks names up in. */
int cuda_open(int ordinal, const void *cubin, size_t cubin_size, Device **out);

#endif
