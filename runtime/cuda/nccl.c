/* nccl.c: the device's collectives over the ranks, through NCCL (DeviceOps.join,
 * coll_start, coll_wait).
 *
 * NCCL is loaded at run time, like the driver and cuDNN: dlopen of $CGC_NCCL when set,
 * else of "libnccl.so.2" (the CUDA Toolkit's, or the one a PyTorch wheel brings in
 * nvidia/nccl/lib when that folder is on LD_LIBRARY_PATH), when the device joins a job;
 * a run of one rank never loads it.
 *
 * join: rank 0 makes the job's id (ncclGetUniqueId), MPI sends it to the others
 * (comm_broadcast: the job is already an MPI one), and each rank makes its communicator
 * on its device (ncclCommInitRank), with a stream of its own for the sums.
 *
 * A collective: the sum stream waits for an event recorded on the device's stream after
 * the work that computed the spans, then runs the spans' calls as one group
 * (ncclGroupStart .. ncclGroupEnd: NCCL fuses them), then records the slot's event, for
 * which coll_wait makes the device's stream wait. So a bucket is summed beside the
 * backward's later kernels, and what needs the sums waits on the GPU, not on the host.
 * A sum is an in-place ncclAllReduce. shard = optimizer's slices are NCCL's
 * ncclReduceScatter and ncclAllGather where the ranks divide a value evenly; where they
 * do not, the last slice is short, and its pieces go one by one (an ncclReduce to each
 * rank of its piece, an ncclBroadcast from each rank of its piece), with the padding of
 * this rank's reduced slice zeroed (device.h's DeviceSpan).
 * Every sum of a run is issued in the same order on every rank (the plan is the same),
 * which NCCL requires.
 *
 * A rank that dies or hangs leaves the others' sums waiting for it on their GPUs, for
 * ever. So the host never blocks on a device that has joined: its waits poll (cuda_wait,
 * through CudaDevice.poll), and each poll asks NCCL for an error of the communicator; an
 * error, or a wait past the job's timeout, aborts the communicator and ends the job
 * (MPI_Abort), naming the rank that saw it. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "cuda_internal.h"

#define NCCL_FUNCS(X)                                                                      \
    X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy) X(ncclGetErrorString)        \
    X(ncclAllReduce) X(ncclGroupStart) X(ncclGroupEnd) X(ncclCommGetAsyncError)          \
    X(ncclCommAbort) X(ncclReduceScatter) X(ncclAllGather) X(ncclReduce) X(ncclBroadcast)

#define NCCL_FIELD(sym) __typeof__(sym) *sym;
typedef struct Nccl {
    NCCL_FUNCS(NCCL_FIELD)
} Nccl;
#undef NCCL_FIELD

struct CudaNccl {
    void *lib;
    Nccl f;
    Comm *job;
    ncclComm_t comm;
    CUstream stream;            /* the sums' own */
    CUevent ready;              /* on the device's stream: the spans are computed */
    CUevent *done;              /* per slot: its sum has finished */
    int nslots;
};

static const char *nccl_path(void)
{
    const char *path = getenv("CGC_NCCL");
    return path && *path ? path : "libnccl.so.2";
}

static int nccl_check(const struct CudaNccl *n, ncclResult_t r, const char *call)
{
    if (r == ncclSuccess) return 0;
    fprintf(stderr, "cgc: error: %s failed: %s\n", call, n->f.ncclGetErrorString(r));
    return -1;
}

static bool nccl_load(struct CudaNccl *n)
{
    n->lib = dlopen(nccl_path(), RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        fprintf(stderr, "cgc: error: cannot load NCCL (%s), which several ranks on GPUs sum "
                        "their gradients with: %s; install it (the CUDA Toolkit's, or a PyTorch "
                        "wheel's nvidia/nccl/lib on LD_LIBRARY_PATH), set CGC_NCCL to the "
                        "library, or train the ranks on the CPU\n",
                nccl_path(), dlerror());
        return false;
    }
#define NCCL_LOAD(sym)                                                                     \
    if (!(*(void **)&n->f.sym = dlsym(n->lib, #sym))) {                                   \
        fprintf(stderr, "cgc: error: %s has no %s: not an NCCL 2 library\n", nccl_path(), #sym); \
        return false;                                                                      \
    }
    NCCL_FUNCS(NCCL_LOAD)
#undef NCCL_LOAD
    return true;
}

/* One look at the sums of a device that has joined a job, while the host has waited
 * WAITED seconds for it (CudaDevice.poll): returns while NCCL reports nothing wrong and
 * the job's timeout (comm_timeout_s) has not passed; else says which, aborts NCCL's
 * communicator and ends the whole job, as a collective of comm.h that times out does. */
static void nccl_poll(CudaDevice *cd, double waited)
{
    struct CudaNccl *n = cd->nccl;
    if (!n->comm) return;
    ncclResult_t async = ncclSuccess, r = n->f.ncclCommGetAsyncError(n->comm, &async);
    if (r == ncclSuccess) r = async == ncclInProgress ? ncclSuccess : async;
    double limit = comm_timeout_s(n->job);
    if (r == ncclSuccess && waited <= limit) return;
    if (r != ncclSuccess)
        fprintf(stderr, "cgc: error: rank %d: NCCL failed in a sum over the ranks: %s; ending the "
                        "job\n", comm_rank(n->job), n->f.ncclGetErrorString(r));
    else
        fprintf(stderr, "cgc: error: rank %d: the GPU's work did not complete in %.0f s: another "
                        "rank has stopped or hangs in a sum over the ranks (CGC_COMM_TIMEOUT sets "
                        "the limit); ending the job\n", comm_rank(n->job), waited);
    n->f.ncclCommAbort(n->comm);
    n->comm = NULL;
    comm_close(n->job, true);
    exit(1);
}

static int nccl_join(Device *d, Comm *c)
{
    CudaDevice *cd = d->impl;
    struct CudaNccl *n = cd->nccl = calloc(1, sizeof *n);
    if (!n) return -1;
    cd->poll = nccl_poll;
    if (!nccl_load(n)) return -1;
    n->job = c;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (comm_rank(c) == 0 && nccl_check(n, n->f.ncclGetUniqueId(&id), "ncclGetUniqueId") != 0) return -1;
    if (comm_broadcast(c, &id, sizeof id, 0, "sending NCCL's id") != 0 ||
        nccl_check(n, n->f.ncclCommInitRank(&n->comm, comm_size(c), id, comm_rank(c)),
                   "ncclCommInitRank") != 0)
        return -1;
    return CU(NULL, cuStreamCreate, &n->stream, CU_STREAM_NON_BLOCKING) ||
           CU(NULL, cuEventCreate, &n->ready, CU_EVENT_DISABLE_TIMING) ? -1 : 0;
}

static ncclDataType_t nccl_type(DType t)
{
    return t == DT_F16 ? ncclFloat16 : t == DT_BF16 ? ncclBfloat16 : ncclFloat32;
}

/* Slot SLOT's event, made when first used. */
static int slot_event(struct CudaNccl *n, int slot, CUevent *out)
{
    if (slot >= n->nslots) {
        CUevent *grown = realloc(n->done, (size_t)(slot + 1) * sizeof *grown);
        if (!grown) return -1;
        n->done = grown;
        for (; n->nslots <= slot; n->nslots++)
            if (CU(NULL, cuEventCreate, &n->done[n->nslots], CU_EVENT_DISABLE_TIMING)) return -1;
    }
    *out = n->done[slot];
    return 0;
}

static size_t type_bytes(DType t) { return t == DT_F32 ? 4 : 2; }

/* Rank R's piece of span S over RANKS: its elements [R slice, ...), *LEN of them. */
static char *piece(const DeviceSpan *s, DevPtr base, int r, int ranks, size_t *len)
{
    size_t n = (size_t)s->count, slice = (n + (size_t)ranks - 1) / (size_t)ranks, lo = (size_t)r * slice;
    *len = lo >= n ? 0 : n - lo < slice ? n - lo : slice;
    return (char *)(uintptr_t)base + lo * type_bytes(s->type);
}

/* A reduce-scatter of span S the ranks do not divide evenly: rank r's piece reduced to
 * rank r, and the padding of this rank's slice zeroed. Inside a group. */
static int reduce_pieces(struct CudaNccl *n, const DeviceSpan *s)
{
    int ranks = comm_size(n->job), me = comm_rank(n->job);
    size_t es = type_bytes(s->type), slice = ((size_t)s->count + (size_t)ranks - 1) / (size_t)ranks, mine = 0;
    for (int r = 0; r < ranks; r++) {
        size_t len;
        char *send = piece(s, s->in, r, ranks, &len);
        if (r == me) mine = len;
        if (len && nccl_check(n, n->f.ncclReduce(send, (void *)(uintptr_t)s->out, len, nccl_type(s->type),
                                                 ncclSum, r, n->comm, (cudaStream_t)n->stream),
                              "ncclReduce") != 0)
            return -1;
    }
    if (mine == slice) return 0;
    return CU(NULL, cuMemsetD8Async, s->out + mine * es, 0, (slice - mine) * es, n->stream) ? -1 : 0;
}

/* An all-gather of span S the ranks do not divide evenly: each rank's piece broadcast
 * from it. Inside a group. */
static int broadcast_pieces(struct CudaNccl *n, const DeviceSpan *s)
{
    int ranks = comm_size(n->job);
    for (int r = 0; r < ranks; r++) {
        size_t len;
        char *recv = piece(s, s->out, r, ranks, &len);
        if (len && nccl_check(n, n->f.ncclBroadcast((void *)(uintptr_t)s->in, recv, len, nccl_type(s->type), r,
                                                    n->comm, (cudaStream_t)n->stream),
                              "ncclBroadcast") != 0)
            return -1;
    }
    return 0;
}

/* Span S's part of collective OP, inside the group. */
static int nccl_span(struct CudaNccl *n, CommOp op, const DeviceSpan *s)
{
    int ranks = comm_size(n->job);
    void *in = (void *)(uintptr_t)s->in, *out = (void *)(uintptr_t)s->out;
    size_t count = (size_t)s->count, slice = count / (size_t)ranks;
    ncclDataType_t t = nccl_type(s->type);
    cudaStream_t st = (cudaStream_t)n->stream;
    bool even = count % (size_t)ranks == 0;
    switch (op) {
    case COMM_SUM:
        return nccl_check(n, n->f.ncclAllReduce(in, out, count, t, ncclSum, n->comm, st), "ncclAllReduce");
    case COMM_REDUCE_SCATTER:
        if (!even) return reduce_pieces(n, s);
        return nccl_check(n, n->f.ncclReduceScatter(in, out, slice, t, ncclSum, n->comm, st), "ncclReduceScatter");
    case COMM_ALLGATHER:
        if (!even) return broadcast_pieces(n, s);
        return nccl_check(n, n->f.ncclAllGather(in, out, slice, t, n->comm, st), "ncclAllGather");
    case COMM_GATHER: break;
    }
    fprintf(stderr, "cgc: error: NCCL is not asked for collective %d on a device\n", (int)op);
    return -1;
}

static int nccl_coll_start(Device *d, int slot, CommOp op, const DeviceSpan *span, int count)
{
    CudaDevice *cd = d->impl;
    struct CudaNccl *n = cd->nccl;
    CUevent done;
    if (!n || !n->comm || slot_event(n, slot, &done) != 0) return -1;
    if (CU(NULL, cuEventRecord, n->ready, cd->stream) || CU(NULL, cuStreamWaitEvent, n->stream, n->ready, 0) ||
        nccl_check(n, n->f.ncclGroupStart(), "ncclGroupStart") != 0)
        return -1;
    int rc = 0;
    for (int i = 0; i < count && rc == 0; i++) rc = nccl_span(n, op, &span[i]);
    /* the group is ended whatever happened in it */
    if (nccl_check(n, n->f.ncclGroupEnd(), "ncclGroupEnd") != 0 || rc != 0) return -1;
    return CU(NULL, cuEventRecord, done, n->stream) ? -1 : 0;
}

static int nccl_coll_wait(Device *d, int slot)
{
    CudaDevice *cd = d->impl;
    struct CudaNccl *n = cd->nccl;
    if (!n || slot >= n->nslots) {
        fprintf(stderr, "cgc: error: a wait for collective %d, which was never started\n", slot);
        return -1;
    }
    return CU(NULL, cuStreamWaitEvent, cd->stream, n->done[slot], 0) ? -1 : 0;
}

void cuda_nccl_enable(CudaDevice *cd)
{
    cd->ops.join = nccl_join;
    cd->ops.coll_start = nccl_coll_start;
    cd->ops.coll_wait = nccl_coll_wait;
}

void cuda_nccl_close(CudaDevice *cd)
{
    struct CudaNccl *n = cd->nccl;
    if (!n) return;
    /* sums still running: waited for as any wait of the device is, under the timeout */
    if (n->stream && n->ready && !CU(NULL, cuEventRecord, n->ready, n->stream))
        cuda_wait(cd, n->ready, "cuEventSynchronize");
    for (int i = 0; i < n->nslots; i++) cu.cuEventDestroy_v2(n->done[i]);
    if (n->ready) cu.cuEventDestroy_v2(n->ready);
    if (n->comm) n->f.ncclCommDestroy(n->comm);
    if (n->stream) cu.cuStreamDestroy_v2(n->stream);
    if (n->lib) dlclose(n->lib);
    free(n->done);
    free(n);
    cd->nccl = NULL;
    cd->poll = NULL;
}
