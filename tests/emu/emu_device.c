/* emu_device.c: a Device over a shared object of emulated kernels (see emu_device.h).
 *
 * The GEMM is the CPU executor's MATMUL in miniature: operands are widened to f32
 * exactly (f16/bf16 patterns), rounded to tf32 for GEMM_TF32 with cpu_round_tf32 (or not:
 * emu_device_tf32_in_f32), multiplied by cblas_sgemm in pieces of K whose sums are added
 * in turn (split_k_gemm: a GPU library's order of additions is its own, so the
 * emulation's differs from the CPU's), and the result is stored rounded to its dtype with
 * cpu_round_f16/bf16. A cuBLASLt epilogue (GEMM groups) works on the f32 product before
 * that rounding, as the executor computes a GEMM group's unstored members (ir.h,
 * IR_GROUP_GEMM).
 *
 * Graphs are recorded, as CUDA's stream capture records them: between capture_begin and
 * capture_end a launch copies its arguments' values (sizes from the kernels' shared
 * object, cgc_emu_argbytes_NAME) and a GEMM its call, and nothing runs; graph_launch runs
 * the copies in order. A copy, a wait or a fence while capturing is refused as CUDA's
 * thread-local capture refuses it, and makes capture_end fail, so that what the
 * emulation replays is what a CUDA graph could hold. A collective over the ranks and the
 * wait for it are recorded too (NCCL's collectives can be captured, on a stream forked
 * from the captured one and joined back), and run in their order when replayed.
 */
#define _GNU_SOURCE
#include "tests/emu/emu_device.h"

#include <cblas.h>
#include <dlfcn.h>
#include <errno.h>
#include <dirent.h>
#include <ftw.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <time.h>
#include <unistd.h>

#include "runtime/cpu/exec.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#else
#define ASAN_POISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define ASAN_UNPOISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#endif

typedef int (*EmuLaunchFn)(unsigned grid, unsigned block, void (*thunk)(void **),
                           void **args, const char *name);

typedef struct EmuKernel {
    struct EmuKernel *next;
    void (*thunk)(void **);
    const unsigned char *argbytes;      /* parameter sizes, then 0; NULL if not exported */
    const unsigned char *noalias;       /* per parameter: 2 a __restrict__ pointer written,
                                         * 1 one read, 0 no such pointer; NULL: none */
    const unsigned *bound;              /* its __launch_bounds__; NULL if not exported */
    const unsigned *slots;              /* its parameters are slots (plan.h): how many;
                                         * NULL if not */
    char name[];
} EmuKernel;

enum { EMU_MAX_ARGS = 256 };

/* One recorded launch or GEMM. */
typedef struct EmuNode {
    EmuKernel *kernel;                  /* NULL: a GEMM */
    unsigned grid, block;
    int nargs;
    uint64_t *args;                     /* the values, one 8-byte slot each */
    GemmCall gemm;
    bool is_conv;                       /* a convolution (kernel NULL too) */
    ConvCall conv;
    bool coll_start, coll_wait;         /* a collective over the ranks, or its wait (kernel
                                         * NULL) */
    int slot;
    CommOp op;
    DeviceSpan *spans;                  /* coll_start: a copy of its spans */
    int nspans;
    DeviceSite site;
} EmuNode;

struct DeviceGraph {
    EmuNode *nodes;
    int n, cap;
};

/* Live allocations, so that free can lift the poison mark_unused put on padding. */
typedef struct EmuAlloc {
    struct EmuAlloc *next;
    void *p;
    size_t bytes;                       /* what was asked for */
    size_t rounded;                     /* what was given: 256-byte granules, or whole
                                         * pages when mapped (emu_device_count_bytes) */
    uint8_t *touched;                   /* mapped: per page, PAGE_READ | PAGE_WRITTEN in
                                         * the launch being counted */
} EmuAlloc;

typedef struct EmuDevice {
    void *so;
    char so_path[256];
    EmuLaunchFn launch;
    EmuKernel *kernels;
    EmuAlloc *allocs;
    DeviceGraph *recording;             /* between capture_begin and capture_end */
    bool invalid;                       /* something was refused while recording */
    bool fail_captures;                 /* emu_device_fail_captures */
    int gemm_algos;                     /* emu_device_gemm_algos */
    int refused_algo;                   /* emu_device_gemm_algos: one that fails, or 0 */
    char refused_kernels[4][64];        /* emu_device_refuse_kernels: name prefixes */
    int nrefused_kernels;
    int gemm_algo_calls[DEVICE_GEMM_ALGOS + 1];   /* GEMMs run, per GemmCall.algo */
    double clock_ms;                    /* the modeled time so far (Device.clock_modeled) */
    double algo_ms[DEVICE_GEMM_ALGOS + 1], launch_ms;   /* what each GEMM and launch adds */
    unsigned favoured_block;            /* a launch of this many threads adds half launch_ms */
    int loads;                          /* load_kernels calls */
    int conv_algos;                     /* emu_device_convs: 0, no convolution library */
    bool conv_none;                     /* emu_device_conv_none: it offers no algorithm */
    bool tf32_in_f32;                   /* emu_device_tf32_in_f32: GEMM_TF32 unrounded */
    double conv_ms[DEVICE_CONV_ALGOS + 1];  /* what each convolution adds to the modeled clock */
    int conv_calls[CONV_KINDS];         /* convolutions run, per kind */
    DeviceOps ops;                      /* emu_ops, with conv where emu_device_convs says */
    Comm *comm;                         /* join: the job this device is a rank of */
    size_t memory;                      /* emu_device_memory: the bytes it holds, 0: no limit */
    bool counting;                      /* emu_device_count_bytes */
    EmuLaunchBytes *counted;            /* the launches counted, in order */
    int ncounted, counted_cap;
    struct EmuColl *colls;              /* per collective slot: the one in flight */
    int ncolls;
} EmuDevice;

/* A collective over the ranks in flight: its spans' inputs, widened to f32, laid out in
 * HOST as comm.h's collective OP takes them, which MPI runs on. Meanwhile the spans'
 * outputs hold NaN (nothing may read them before coll_wait), and the inputs of a
 * reduce-scatter or an all-gather, which it reads from where they are, must not change
 * (their hash, CHECK, is compared at coll_wait). */
typedef struct EmuColl {
    bool active;
    CommOp op;
    DeviceSpan *span;
    int nspans;
    float *host;
    int64_t piece;                      /* elements of HOST per rank (all of it for a sum) */
    uint64_t check;
} EmuColl;

struct DeviceFence {
    double seconds;     /* wall time when recorded: every call has finished by then */
    /* upload_async's copy that this fence marks the end of, not made yet (bytes 0: none) */
    DevPtr dst;
    const void *src;
    size_t bytes;
};

static EmuDevice *impl(Device *d) { return d->impl; }

static double wall_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* "relu h1 (mlp.net:5)" for messages. */
static const char *site_str(const DeviceSite *s, char *buf, size_t n)
{
    if (!s) return "(no site)";
    snprintf(buf, n, "%s%s%s", s->what ? s->what : "", s->net_path ? " (" : "",
             s->net_path ? s->net_path : "");
    size_t len = strlen(buf);
    if (s->net_path && s->line > 0) snprintf(buf + len, n - len, ":%d)", s->line);
    else if (s->net_path) snprintf(buf + len, n - len, ")");
    return buf;
}

/* Refuses CALL while a graph is being recorded (returns true), as CUDA would. */
static bool refused_in_capture(Device *d, const char *call)
{
    if (!impl(d)->recording) return false;
    fprintf(stderr, "cgc: error: CUDA emulation: %s while a graph is being captured: a CUDA "
                    "graph cannot hold it, so the capture fails\n", call);
    impl(d)->invalid = true;
    return true;
}

/* ---- memory ---- */

/* ---- counting the pages a launch reads and writes (emu_device_count_bytes) ----
 * Every allocation is whole pages of its own. Around a launch they are made inaccessible;
 * the first access to a page faults, and the handler records it (a read, or a write by
 * the fault's error code) and opens the page that far: a read opens it for reading, so
 * that a later write faults again and is recorded too; a write opens it whole. */

enum { PAGE = 4096, PAGE_READ = 1, PAGE_WRITTEN = 2 };

static EmuDevice *counting;     /* the device whose launch is being counted */
static struct sigaction previous_segv;

static void *map_pages(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static bool fault_is_write(void *context)
{
#if defined(__x86_64__)
    return (((ucontext_t *)context)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#else
    (void)context;
    return false;   /* a write then faults twice: it counts as a read too */
#endif
}

static void count_fault(int sig, siginfo_t *info, void *context)
{
    char *at = info->si_addr;
    for (EmuAlloc *a = counting ? counting->allocs : NULL; a; a = a->next) {
        if (!a->touched || at < (char *)a->p || at >= (char *)a->p + a->rounded) continue;
        size_t page = (size_t)(at - (char *)a->p) / PAGE;
        uint8_t was = a->touched[page];
        bool write = fault_is_write(context) || (was & PAGE_READ);
        a->touched[page] = (uint8_t)(was | (write ? PAGE_WRITTEN : PAGE_READ));
        mprotect((char *)a->p + page * PAGE, PAGE, write ? PROT_READ | PROT_WRITE : PROT_READ);
        return;
    }
    sigaction(sig, &previous_segv, NULL);   /* not ours: fault as before */
}

static void protect_all(EmuDevice *e, int prot)
{
    for (EmuAlloc *a = e->allocs; a; a = a->next)
        if (a->touched) mprotect(a->p, a->rounded, prot);
}

/* After a launch: its pages, tallied into e->counted, and everything open again. */
static void tally_launch(EmuDevice *e, const char *kernel)
{
    EmuLaunchBytes n = { .kernel = kernel };
    for (EmuAlloc *a = e->allocs; a; a = a->next) {
        for (size_t i = 0; a->touched && i < a->rounded / PAGE; i++) {
            n.read += a->touched[i] & PAGE_READ ? PAGE : 0;
            n.written += a->touched[i] & PAGE_WRITTEN ? PAGE : 0;
        }
        if (a->touched) memset(a->touched, 0, a->rounded / PAGE);
    }
    protect_all(e, PROT_READ | PROT_WRITE);
    if (e->ncounted == e->counted_cap) {
        e->counted_cap = e->counted_cap ? 2 * e->counted_cap : 64;
        e->counted = realloc(e->counted, (size_t)e->counted_cap * sizeof *e->counted);
        CGC_ASSERT(e->counted);
    }
    e->counted[e->ncounted++] = n;
}

/* Runs a launch of kernel K with its pages counted. */
static int counted_launch(EmuDevice *e, EmuKernel *k, unsigned grid, unsigned block, void **args)
{
    struct sigaction sa = { .sa_sigaction = count_fault, .sa_flags = SA_SIGINFO | SA_NODEFER };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &previous_segv);
    counting = e;
    protect_all(e, PROT_NONE);
    int rc = e->launch(grid, block, k->thunk, args, k->name);
    protect_all(e, PROT_READ | PROT_WRITE);
    counting = NULL;
    sigaction(SIGSEGV, &previous_segv, NULL);
    tally_launch(e, k->name);
    return rc;
}

static size_t in_use(Device *d)
{
    size_t n = 0;
    for (const EmuAlloc *a = impl(d)->allocs; a; a = a->next) n += a->rounded;
    return n;
}

static int emu_alloc(Device *d, size_t bytes, DevPtr *out)
{
    if (refused_in_capture(d, "alloc")) return -1;
    size_t rounded = (bytes + 255) / 256 * 256;
    if (rounded == 0) rounded = 256;
    size_t limit = impl(d)->memory;
    if (limit && (rounded > limit || in_use(d) > limit - rounded)) {
        fprintf(stderr, "cgc: error: CUDA emulation: alloc of %zu bytes failed: the device's %zu "
                        "bytes hold %zu already (CUDA_ERROR_OUT_OF_MEMORY)\n", bytes, limit, in_use(d));
        return -1;
    }
    bool mapped = impl(d)->counting;
    if (mapped) rounded = (rounded + PAGE - 1) / PAGE * PAGE;
    void *p = mapped ? map_pages(rounded) : aligned_alloc(256, rounded);
    EmuAlloc *a = calloc(1, sizeof *a);
    if (mapped && p && a) a->touched = calloc(rounded / PAGE, 1);
    if (!p || !a || (mapped && !a->touched)) {
        if (mapped && p) munmap(p, rounded);
        else free(p);
        free(a);
        fprintf(stderr, "cgc: error: CUDA emulation: alloc of %zu bytes failed: out of host "
                        "memory\n", bytes);
        return -1;
    }
    memset(p, 0, rounded);
    /* what was asked for, to the byte: an access past it is one compute-sanitizer's
     * memcheck reports, though the GPU's allocation granule would hide it */
    ASAN_POISON_MEMORY_REGION((char *)p + bytes, rounded - bytes);
    *a = (EmuAlloc){ impl(d)->allocs, p, bytes, rounded, a->touched };
    impl(d)->allocs = a;
    *out = (DevPtr)(uintptr_t)p;
    return 0;
}

static void emu_free(Device *d, DevPtr p)
{
    if (refused_in_capture(d, "free")) return;
    for (EmuAlloc **link = &impl(d)->allocs; *link; link = &(*link)->next) {
        EmuAlloc *a = *link;
        if ((DevPtr)(uintptr_t)a->p != p) continue;
        ASAN_UNPOISON_MEMORY_REGION(a->p, a->rounded);
        *link = a->next;
        if (a->touched) munmap(a->p, a->rounded);
        else free(a->p);
        free(a->touched);
        free(a);
        return;
    }
    if (p) fprintf(stderr, "cgc: error: CUDA emulation: free of %#llx, which alloc did not "
                           "give (ignored)\n", (unsigned long long)p);
}

/* Whether [P, P + BYTES) lies inside one live allocation: the runtime's pointers and sizes
 * are what is under test, and a wrong one must be an error here, not a write elsewhere. */
static bool owned(Device *d, DevPtr p, size_t bytes)
{
    for (const EmuAlloc *a = impl(d)->allocs; a; a = a->next) {
        DevPtr start = (DevPtr)(uintptr_t)a->p;
        if (p >= start && p - start <= a->bytes && bytes <= a->bytes - (p - start)) return true;
    }
    return false;
}

/* OWNED's answer, with an error naming CALL and its range when no. */
static bool check_owned(Device *d, DevPtr p, size_t bytes, const char *call)
{
    if (owned(d, p, bytes)) return true;
    fprintf(stderr, "cgc: error: CUDA emulation: %s of %zu bytes at %#llx, outside every "
                    "allocation\n", call, bytes, (unsigned long long)p);
    return false;
}

static void emu_mark_unused(Device *d, DevPtr p, size_t bytes)
{
    ASAN_POISON_MEMORY_REGION((void *)(uintptr_t)p, bytes);
}

/* Not while a graph is being recorded: the kernels a capture records run as they run
 * outside one, where this has marked their buffers. */
static void emu_mark_undefined(Device *d, DevPtr p, size_t bytes)
{
    if (impl(d)->recording || !bytes || !check_owned(d, p, bytes, "mark_undefined")) return;
    memset((void *)(uintptr_t)p, 0xFF, bytes);
}

static int emu_upload(Device *d, DevPtr dst, const void *src, size_t bytes)
{
    if (refused_in_capture(d, "upload")) return -1;
    if (bytes && !check_owned(d, dst, bytes, "upload")) return -1;
    if (bytes) memcpy((void *)(uintptr_t)dst, src, bytes);
    return 0;
}

static int emu_download(Device *d, void *dst, DevPtr src, size_t bytes)
{
    if (refused_in_capture(d, "download")) return -1;
    if (bytes && !check_owned(d, src, bytes, "download")) return -1;
    if (bytes) memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return 0;
}

/* The copy is made as late as the contract allows: when the stream waits for DONE or the
 * host learns that it has passed. Until then DST holds 0xFF bytes (NaN, -1), so that a
 * kernel that reads it without waiting fails its comparison, and SRC is read only then,
 * so that a host that reuses SRC too early sends the wrong rows. */
static int emu_upload_async(Device *d, DevPtr dst, const void *src, size_t bytes, DeviceFence *after,
                            DeviceFence *done)
{
    (void)after;        /* every earlier call has finished: AFTER has passed */
    if (refused_in_capture(d, "upload_async")) return -1;
    if (bytes && !check_owned(d, dst, bytes, "upload_async")) return -1;
    if (done->bytes) {
        fprintf(stderr, "cgc: error: CUDA emulation: upload_async's fence is still that of a "
                        "copy nothing has waited for\n");
        return -1;
    }
    memset((void *)(uintptr_t)dst, 0xFF, bytes);
    done->dst = dst, done->src = src, done->bytes = bytes;
    return 0;
}

static void finish_copy(DeviceFence *f)
{
    if (f->bytes) memcpy((void *)(uintptr_t)f->dst, f->src, f->bytes);
    f->bytes = 0;
}

static int emu_fence_wait(Device *d, DeviceFence *f)
{
    if (refused_in_capture(d, "fence wait")) return -1;
    finish_copy(f);
    return 0;
}

static void *emu_host_alloc(Device *d, size_t bytes) { return malloc(bytes ? bytes : 1); }
static void emu_host_free(Device *d, void *p) { free(p); }

/* ---- kernels ---- */

/* The shared object holds every kernel of the plan already (emu_build_plan): a second
 * module only needs to be valid C++ for the emulation, which the build checked; what
 * is counted is that the runtime asked (emu_device_kernel_loads). */
static int emu_load_kernels(Device *d, const char *source, const char *name, double *seconds)
{
    *seconds = 0;
    if (!source || !*source || impl(d)->loads > 0) {
        fprintf(stderr, "cgc: error: CUDA emulation: load_kernels %s: %s\n", name,
                impl(d)->loads ? "a second module is already loaded" : "empty source");
        return -1;
    }
    impl(d)->loads++;
    return 0;
}

static int emu_kernel(Device *d, const char *name, void **handle)
{
    char sym[300];
    snprintf(sym, sizeof sym, "cgc_emu_thunk_%s", name);
    void *fn = dlsym(impl(d)->so, sym);
    if (!fn) {
        fprintf(stderr, "cgc: error: CUDA emulation: kernel %s: no symbol %s in %s; was the "
                        "shared object built from this plan's thunks?\n",
                name, sym, impl(d)->so_path);
        return -1;
    }
    size_t len = strlen(name) + 1;
    EmuKernel *k = malloc(sizeof *k + len);
    if (!k) return -1;
    k->thunk = (void (*)(void **))fn;
    snprintf(sym, sizeof sym, "cgc_emu_argbytes_%s", name);
    k->argbytes = dlsym(impl(d)->so, sym);
    snprintf(sym, sizeof sym, "cgc_emu_noalias_%s", name);
    k->noalias = k->argbytes ? dlsym(impl(d)->so, sym) : NULL;
    snprintf(sym, sizeof sym, "cgc_emu_block_%s", name);
    k->bound = dlsym(impl(d)->so, sym);
    snprintf(sym, sizeof sym, "cgc_emu_slots_%s", name);
    k->slots = dlsym(impl(d)->so, sym);
    memcpy(k->name, name, len);
    k->next = impl(d)->kernels;
    impl(d)->kernels = k;
    *handle = k;
    return 0;
}

static EmuNode *record(Device *d, const DeviceSite *site)
{
    DeviceGraph *g = impl(d)->recording;
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 64;
        EmuNode *grown = realloc(g->nodes, (size_t)cap * sizeof *grown);
        if (!grown) {
            fprintf(stderr, "cgc: error: CUDA emulation: out of host memory recording a graph\n");
            impl(d)->invalid = true;
            return NULL;
        }
        g->nodes = grown;
        g->cap = cap;
    }
    EmuNode *n = &g->nodes[g->n++];
    memset(n, 0, sizeof *n);
    if (site) n->site = *site;
    return n;
}

/* Records a launch with a copy of each argument's value. */
static int record_launch(Device *d, EmuKernel *k, unsigned grid, unsigned block, void **args,
                         const DeviceSite *site)
{
    if (!k->argbytes) {
        fprintf(stderr, "cgc: error: CUDA emulation: kernel %s: no cgc_emu_argbytes_%s in %s, "
                        "so its launch cannot be captured\n", k->name, k->name, impl(d)->so_path);
        impl(d)->invalid = true;
        return -1;
    }
    int nargs = 0;
    while (k->argbytes[nargs]) nargs++;
    EmuNode *n = record(d, site);
    if (!n) return -1;
    *n = (EmuNode){ .kernel = k, .grid = grid, .block = block, .nargs = nargs,
                    .args = calloc((size_t)(nargs ? nargs : 1), sizeof *n->args), .site = n->site };
    if (!n->args) {
        impl(d)->invalid = true;
        return -1;
    }
    for (int i = 0; i < nargs; i++) {
        CGC_ASSERT(k->argbytes[i] <= sizeof n->args[i]);
        memcpy(&n->args[i], args[i], k->argbytes[i]);
    }
    return 0;
}

/* Whether K's __restrict__ pointers in ARGS keep apart: two that are the same address
 * where one is written break the promise the kernel was compiled under (the GPU may then
 * cache or reorder across them), so the launch fails. Null pointers (an unused operand)
 * alias nothing. Only the starts are compared: the extents are the plan's to know. */
static bool restrict_kept(const EmuKernel *k, void **args, const char *where)
{
    if (!k->noalias) return true;
    for (int i = 0; k->argbytes[i]; i++) {
        for (int j = i + 1; k->noalias[i] && k->argbytes[j]; j++) {
            if (!k->noalias[j] || (k->noalias[i] < 2 && k->noalias[j] < 2)) continue;
            void *a = *(void **)args[i], *b = *(void **)args[j];
            if (!a || a != b) continue;
            fprintf(stderr, "cgc: error: CUDA emulation: launch of %s for %s: parameters %d and "
                            "%d are __restrict__ and %s written, but both point at %p; the "
                            "launch fails\n", k->name, where, i, j,
                    k->noalias[i] == 2 && k->noalias[j] == 2 ? "both" : "one is", a);
            return false;
        }
    }
    return true;
}

/* Launch of K (checked) with ARGS, as cuLaunchKernel's kernelParams; EACH: a pointer to
 * each parameter's value (ARGS itself, but for a packed kernel: to each slot). */
static int launch_checked(Device *d, EmuKernel *k, unsigned grid, unsigned block, void **args,
                          void **each, const DeviceSite *site)
{
    char buf[512];
    if (impl(d)->recording) return record_launch(d, k, grid, block, each, site);
    if (!restrict_kept(k, each, site_str(site, buf, sizeof buf))) return -1;
    impl(d)->clock_ms += impl(d)->launch_ms * (block == impl(d)->favoured_block ? 0.5 : 1.0);
    int rc = impl(d)->counting ? counted_launch(impl(d), k, grid, block, args)
                               : impl(d)->launch(grid, block, k->thunk, args, k->name);
    if (rc == 0) return 0;
    fprintf(stderr, "cgc: error: CUDA emulation: launch of %s for %s failed (see above)\n",
            k->name, site_str(site, buf, sizeof buf));
    return -1;
}

/* A packed kernel's launch (plan.h): ARGS[0] points at its slots, one after another. The
 * driver refuses more than PLAN_MAX_PARAM_BYTES of parameters. */
static int launch_slots(Device *d, EmuKernel *k, unsigned grid, unsigned block, void **args,
                        const DeviceSite *site)
{
    char buf[512];
    size_t n = *k->slots;
    if (n * sizeof(uint64_t) > PLAN_MAX_PARAM_BYTES) {
        fprintf(stderr, "cgc: error: CUDA emulation: launch of %s for %s: %zu bytes of parameters, "
                        "more than the %d CUDA takes; the launch fails\n",
                k->name, site_str(site, buf, sizeof buf), n * sizeof(uint64_t), PLAN_MAX_PARAM_BYTES);
        return -1;
    }
    void **each = malloc((n ? n : 1) * sizeof *each);
    if (!each) return -1;
    for (size_t i = 0; i < n; i++) each[i] = (uint64_t *)args[0] + i;
    int rc = launch_checked(d, k, grid, block, args, each, site);
    free(each);
    return rc;
}

static int emu_launch(Device *d, void *kernel, unsigned grid, unsigned block, void **args,
                      const DeviceSite *site)
{
    EmuKernel *k = kernel;
    char buf[512];
    if (!k) {   /* as cuda_device says of a launch without a handle */
        fprintf(stderr, "cgc: error: CUDA emulation: launch for %s: no kernel handle\n",
                site_str(site, buf, sizeof buf));
        return -1;
    }
    for (int i = 0; i < impl(d)->nrefused_kernels; i++) {
        const char *prefix = impl(d)->refused_kernels[i];
        if (strncmp(k->name, prefix, strlen(prefix)) != 0) continue;
        fprintf(stderr, "cgc: error: CUDA emulation: launch of %s for %s refused (as the test "
                        "asked: emu_device_refuse_kernels)\n", k->name, site_str(site, buf, sizeof buf));
        return -1;
    }
    if (k->bound && block > *k->bound) {   /* the driver refuses it */
        fprintf(stderr, "cgc: error: CUDA emulation: launch of %s for %s: block %u, more threads "
                        "than its __launch_bounds__ (%u)\n", k->name, site_str(site, buf, sizeof buf),
                block, *k->bound);
        return -1;
    }
    return k->slots ? launch_slots(d, k, grid, block, args, site)
                    : launch_checked(d, k, grid, block, args, args, site);
}

/* ---- the reference GEMM ---- */

static float f16_to_f32(uint16_t bits)
{
    _Float16 h;
    memcpy(&h, &bits, sizeof h);
    return (float)h;
}

static uint16_t f32_to_f16(float x)
{
    _Float16 h = (_Float16)cpu_round_f16(x);   /* exact: x is rounded already */
    uint16_t bits;
    memcpy(&bits, &h, sizeof bits);
    return bits;
}

static float bf16_to_f32(uint16_t bits)
{
    uint32_t u = (uint32_t)bits << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint16_t f32_to_bf16(float x)
{
    float r = cpu_round_bf16(x);
    uint32_t u;
    memcpy(&u, &r, sizeof u);
    return (uint16_t)(u >> 16);
}

/* N elements of type T at SRC as f32 in DST; tf32-rounded when TF32. */
void emu_widen(float *dst, const void *src, int64_t n, DType t, bool tf32)
{
    for (int64_t i = 0; i < n; i++) {
        float x = t == DT_F16    ? f16_to_f32(((const uint16_t *)src)[i])
                  : t == DT_BF16 ? bf16_to_f32(((const uint16_t *)src)[i])
                                 : ((const float *)src)[i];
        dst[i] = tf32 ? cpu_round_tf32(x) : x;
    }
}

void emu_narrow(void *dst, const float *src, int64_t n, DType t)
{
    for (int64_t i = 0; i < n; i++) {
        if (t == DT_F16) ((uint16_t *)dst)[i] = f32_to_f16(src[i]);
        else if (t == DT_BF16) ((uint16_t *)dst)[i] = f32_to_bf16(src[i]);
        else ((float *)dst)[i] = src[i];
    }
}

static bool gemm_type_ok(DType t) { return t == DT_F32 || t == DT_F16 || t == DT_BF16; }

/* cuBLASLt's epilogue on the f32 product C [m, n] (plan.h, GemmEpilogue): plus the bias
 * (widened exactly), the sum into AUX when there is one, then the activation, as the CPU
 * executor computes the group's members (cpu_gelu_tanh is its own gelu_tanh). */
static void epilogue(float *c, float *aux, const GemmCall *g)
{
    float *bias = malloc((size_t)g->n * sizeof(float));
    emu_widen(bias, (const void *)(uintptr_t)g->bias, g->n, g->bias_type, false);
    for (int64_t i = 0; i < g->m * g->n; i++) {
        float x = c[i] + bias[i % g->n];
        if (aux) aux[i] = x;
        if (g->epilogue == GEMM_EPI_RELU_BIAS) x = x < 0 ? 0 : x;
        if (g->epilogue == GEMM_EPI_GELU_BIAS) x = cpu_gelu_tanh(x);
        c[i] = x;
    }
    free(bias);
}

/* The epilogue's operands are what the contract allows: one matrix, a bias of C's type or
 * f32, an aux output only under GELU. */
static bool epilogue_ok(const GemmCall *g)
{
    if (g->epilogue == GEMM_EPI_NONE) return true;
    return g->batch == 1 && g->bias && (g->bias_type == g->c_type || g->bias_type == DT_F32) &&
           (!g->aux || g->epilogue == GEMM_EPI_GELU_BIAS) && g->epilogue <= GEMM_EPI_GELU_BIAS;
}

/* Bytes an operand of N elements of SIZE per batch entry, STRIDE elements apart, spans. */
static size_t operand_bytes(int64_t batch, int64_t stride, int64_t n, size_t size)
{
    return n && batch ? (size_t)((batch - 1) * stride + n) * size : 0;
}

/* Whether every matrix G reads or writes lies inside an allocation (check_owned). */
static bool gemm_owned(Device *d, const GemmCall *g)
{
    size_t as = ir_dtype_size(g->a_type), bs = ir_dtype_size(g->b_type), cs = ir_dtype_size(g->c_type);
    size_t a = operand_bytes(g->batch, g->stride_a, g->m * g->k, as);
    size_t b = operand_bytes(g->batch, g->stride_b, g->k * g->n, bs);
    size_t c = operand_bytes(g->batch, g->stride_c, g->m * g->n, cs);
    size_t bias = g->epilogue != GEMM_EPI_NONE ? (size_t)g->n * ir_dtype_size(g->bias_type) : 0;
    return (!a || check_owned(d, g->a, a, "GEMM operand A")) &&
           (!b || check_owned(d, g->b, b, "GEMM operand B")) &&
           (!c || check_owned(d, g->c, c, "GEMM result C")) &&
           (!bias || check_owned(d, g->bias, bias, "GEMM bias")) &&
           (!g->aux || !c || check_owned(d, g->aux, (size_t)(g->m * g->n) * cs, "GEMM aux output"));
}

/* C = A B in f32 as a GPU library may sum it: K split in SPLIT_K pieces, each piece's
 * product summed on its own and the partial sums added in turn (split-K), an order of
 * additions the CPU executor's single GEMM does not share, so that a comparison sees the
 * rounding a device's own order brings. */
enum { SPLIT_K = 8 };

static int split_k_gemm(const GemmCall *g, const float *a, int lda, const float *b, int ldb, float *c)
{
    CBLAS_TRANSPOSE ta = g->trans_a ? CblasTrans : CblasNoTrans, tb = g->trans_b ? CblasTrans : CblasNoTrans;
    int m = (int)g->m, n = (int)g->n, k = (int)g->k, piece = (k + SPLIT_K - 1) / SPLIT_K;
    size_t cn = (size_t)m * (size_t)n;
    float *part = malloc((cn ? cn : 1) * sizeof *part);
    if (!part) return -1;
    for (int k0 = 0; k0 < k; k0 += piece) {
        int kk = k - k0 < piece ? k - k0 : piece;
        const float *ak = a + (g->trans_a ? (size_t)k0 * (size_t)m : (size_t)k0);
        const float *bk = b + (g->trans_b ? (size_t)k0 : (size_t)k0 * (size_t)n);
        cblas_sgemm(CblasRowMajor, ta, tb, m, n, kk, 1, ak, lda, bk, ldb, 0, k0 ? part : c, n);
        for (size_t i = 0; i < cn && k0; i++) c[i] += part[i];
    }
    free(part);
    return 0;
}

static int emu_gemm(Device *d, const GemmCall *g, const DeviceSite *site)
{
    char buf[512];
    if (impl(d)->recording) {
        EmuNode *n = record(d, site);
        if (!n) return -1;
        n->gemm = *g;
        return 0;
    }
    if (!gemm_type_ok(g->a_type) || !gemm_type_ok(g->b_type) || !gemm_type_ok(g->c_type) ||
        g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 0 || g->m > INT32_MAX ||
        g->n > INT32_MAX || g->k > INT32_MAX || !epilogue_ok(g) || g->algo < 0 ||
        g->algo > impl(d)->gemm_algos || (g->algo > 0 && g->batch != 1)) {
        fprintf(stderr, "cgc: error: CUDA emulation: GEMM for %s: unsupported call (types "
                        "%s %s -> %s, m %lld n %lld k %lld batch %lld, epilogue %d, "
                        "algorithm %d of %d)\n",
                site_str(site, buf, sizeof buf), ir_dtype_name(g->a_type),
                ir_dtype_name(g->b_type), ir_dtype_name(g->c_type), (long long)g->m,
                (long long)g->n, (long long)g->k, (long long)g->batch, g->epilogue, g->algo,
                impl(d)->gemm_algos);
        return -1;
    }
    if (!gemm_owned(d, g)) {
        fprintf(stderr, "cgc: error: CUDA emulation: GEMM for %s: m %lld n %lld k %lld batch "
                        "%lld reach past its buffers\n", site_str(site, buf, sizeof buf),
                (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->batch);
        return -1;
    }
    if (g->algo > 0 && g->algo == impl(d)->refused_algo) {
        fprintf(stderr, "cgc: error: CUDA emulation: GEMM for %s: algorithm %d refused (as the "
                        "test asked: emu_device_gemm_algos)\n", site_str(site, buf, sizeof buf), g->algo);
        return -1;
    }
    impl(d)->gemm_algo_calls[g->algo]++;
    impl(d)->clock_ms += impl(d)->algo_ms[g->algo];
    int64_t an = g->m * g->k, bn = g->k * g->n, cn = g->m * g->n;
    float *a = malloc((size_t)(an ? an : 1) * sizeof(float));
    float *b = malloc((size_t)(bn ? bn : 1) * sizeof(float));
    float *c = malloc((size_t)(cn ? cn : 1) * sizeof(float));
    float *aux = g->aux ? malloc((size_t)(cn ? cn : 1) * sizeof(float)) : NULL;
    if (!a || !b || !c || (g->aux && !aux)) {
        free(a), free(b), free(c), free(aux);
        fprintf(stderr, "cgc: error: CUDA emulation: GEMM for %s: out of host memory\n",
                site_str(site, buf, sizeof buf));
        return -1;
    }
    bool tf32 = g->compute == GEMM_TF32 && !impl(d)->tf32_in_f32;
    size_t as = ir_dtype_size(g->a_type), bs = ir_dtype_size(g->b_type), cs = ir_dtype_size(g->c_type);
    int lda = (int)(g->trans_a ? g->m : g->k), ldb = (int)(g->trans_b ? g->k : g->n);
    for (int64_t i = 0; i < g->batch; i++) {
        const char *pa = (const char *)(uintptr_t)g->a + (size_t)(i * g->stride_a) * as;
        const char *pb = (const char *)(uintptr_t)g->b + (size_t)(i * g->stride_b) * bs;
        char *pc = (char *)(uintptr_t)g->c + (size_t)(i * g->stride_c) * cs;
        emu_widen(a, pa, an, g->a_type, tf32);
        emu_widen(b, pb, bn, g->b_type, tf32);
        if (g->k == 0) memset(c, 0, (size_t)cn * sizeof(float));
        else if (cn && split_k_gemm(g, a, lda, b, ldb, c) != 0) {
            free(a), free(b), free(c), free(aux);
            fprintf(stderr, "cgc: error: CUDA emulation: GEMM for %s: out of host memory\n",
                    site_str(site, buf, sizeof buf));
            return -1;
        }
        if (g->epilogue != GEMM_EPI_NONE) epilogue(c, aux, g);
        if (aux) emu_narrow((void *)(uintptr_t)g->aux, aux, cn, g->c_type);
        emu_narrow(pc, c, cn, g->c_type);
    }
    free(a), free(b), free(c), free(aux);
    return 0;
}

/* The emulation's "algorithms" all run the reference GEMM: they exist so that the
 * choosing and passing of one can be tested (emu_device_gemm_algos). */
static int emu_gemm_algos(Device *d, const GemmCall *g, int *count, const DeviceSite *site)
{
    (void)site;
    *count = g->batch == 1 ? impl(d)->gemm_algos : 0;
    return 0;
}

/* ---- convolutions: the reference a library is held to ---- */

/* The element of a [d0, d1, d2, d3] tensor at (i, j, k, l). */
static int64_t at4(const int64_t *dims, int64_t i, int64_t j, int64_t k, int64_t l)
{
    return ((i * dims[1] + j) * dims[2] + k) * dims[3] + l;
}

/* Whether [a, a + an) and [b, b + bn) share a byte. */
static bool overlap(DevPtr a, size_t an, DevPtr b, size_t bn) { return a < b + bn && b < a + an; }

/* What cuDNN would refuse, fault on or leave undefined: the types, a size outside its
 * int, a dimension the others do not imply, an algorithm not offered, a tensor outside
 * its allocation, a result written over an operand. */
static bool conv_ok(Device *d, const ConvCall *c)
{
    int64_t dims[9] = {c->n, c->c, c->h, c->w, c->k, c->r, c->s, c->oh, c->ow};
    for (int i = 0; i < 9; i++)
        if (dims[i] < 1 || dims[i] > INT32_MAX) return false;
    IrWindow w = {.kernel = {(int)c->r, (int)c->s}, .stride = {c->stride[0], c->stride[1]},
                  .pad = {c->pad[0], c->pad[1]}, .dilation = {c->dilation[0], c->dilation[1]}, .groups = 1};
    size_t size = ir_dtype_size(c->type);
    size_t xb = (size_t)(c->n * c->c * c->h * c->w) * size, fb = (size_t)(c->k * c->c * c->r * c->s) * size,
           yb = (size_t)(c->n * c->k * c->oh * c->ow) * size;
    bool apart = c->kind == CONV_FORWARD ? !overlap(c->y, yb, c->x, xb) && !overlap(c->y, yb, c->f, fb)
               : c->kind == CONV_DATA_GRAD ? !overlap(c->x, xb, c->y, yb) && !overlap(c->x, xb, c->f, fb)
                                           : !overlap(c->f, fb, c->x, xb) && !overlap(c->f, fb, c->y, yb);
    return apart && !impl(d)->conv_none && gemm_type_ok(c->type) && c->algo >= 0 && c->algo <= impl(d)->conv_algos &&
           ir_window_extent(c->h, &w, 0) == c->oh && ir_window_extent(c->w, &w, 1) == c->ow &&
           check_owned(d, c->x, xb, "convolution input") && check_owned(d, c->f, fb, "convolution filter") &&
           check_owned(d, c->y, yb, "convolution output");
}

/* The three products of a convolution in double, one loop nest: for every output
 * position, filter tap and channel pair inside the image, y += x f (forward), x += y f
 * (data gradient), f += x y (filter gradient). */
static void conv_reference(const ConvCall *c, const float *x, const float *f, const float *y, double *out)
{
    int64_t xd[4] = {c->n, c->c, c->h, c->w}, fd[4] = {c->k, c->c, c->r, c->s}, yd[4] = {c->n, c->k, c->oh, c->ow};
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t k = 0; k < c->k; k++)
            for (int64_t oy = 0; oy < c->oh; oy++)
                for (int64_t ox = 0; ox < c->ow; ox++)
                    for (int64_t ch = 0; ch < c->c; ch++)
                        for (int64_t r = 0; r < c->r; r++)
                            for (int64_t s = 0; s < c->s; s++) {
                                int64_t iy = oy * c->stride[0] - c->pad[0] + r * c->dilation[0];
                                int64_t ix = ox * c->stride[1] - c->pad[1] + s * c->dilation[1];
                                if (iy < 0 || iy >= c->h || ix < 0 || ix >= c->w) continue;
                                int64_t xi = at4(xd, n, ch, iy, ix), fi = at4(fd, k, ch, r, s),
                                        yi = at4(yd, n, k, oy, ox);
                                if (c->kind == CONV_FORWARD) out[yi] += (double)x[xi] * f[fi];
                                else if (c->kind == CONV_DATA_GRAD) out[xi] += (double)y[yi] * f[fi];
                                else out[fi] += (double)x[xi] * y[yi];
                            }
}

static int emu_conv(Device *d, const ConvCall *c, const DeviceSite *site)
{
    char buf[512];
    if (impl(d)->recording) {
        EmuNode *n = record(d, site);
        if (!n) return -1;
        n->is_conv = true;
        n->conv = *c;
        return 0;
    }
    if (!conv_ok(d, c)) {
        fprintf(stderr, "cgc: error: CUDA emulation: convolution for %s: unsupported call (kind %d, "
                        "type %s, x [%lld, %lld, %lld, %lld], f [%lld, %lld, %lld, %lld], y [.., .., %lld, "
                        "%lld], algorithm %d of %d)\n", site_str(site, buf, sizeof buf), (int)c->kind,
                ir_dtype_name(c->type), (long long)c->n, (long long)c->c, (long long)c->h, (long long)c->w,
                (long long)c->k, (long long)c->c, (long long)c->r, (long long)c->s, (long long)c->oh,
                (long long)c->ow, c->algo, impl(d)->conv_algos);
        return -1;
    }
    impl(d)->conv_calls[c->kind]++;
    impl(d)->clock_ms += impl(d)->conv_ms[c->algo];
    int64_t nx = c->n * c->c * c->h * c->w, nf = c->k * c->c * c->r * c->s, ny = c->n * c->k * c->oh * c->ow;
    int64_t nout = c->kind == CONV_FORWARD ? ny : c->kind == CONV_DATA_GRAD ? nx : nf;
    float *x = malloc((size_t)nx * sizeof *x), *f = malloc((size_t)nf * sizeof *f);
    float *y = malloc((size_t)ny * sizeof *y), *out = malloc((size_t)nout * sizeof *out);
    double *sum = calloc((size_t)nout, sizeof *sum);
    int rc = x && f && y && out && sum ? 0 : -1;
    if (rc == 0) {
        bool tf32 = c->compute == GEMM_TF32 && !impl(d)->tf32_in_f32;
        if (c->kind != CONV_DATA_GRAD) emu_widen(x, (const void *)(uintptr_t)c->x, nx, c->type, tf32);
        if (c->kind != CONV_FILTER_GRAD) emu_widen(f, (const void *)(uintptr_t)c->f, nf, c->type, tf32);
        if (c->kind != CONV_FORWARD) emu_widen(y, (const void *)(uintptr_t)c->y, ny, c->type, tf32);
        conv_reference(c, x, f, y, sum);
        for (int64_t i = 0; i < nout; i++) out[i] = (float)sum[i];
        DevPtr dst = c->kind == CONV_FORWARD ? c->y : c->kind == CONV_DATA_GRAD ? c->x : c->f;
        emu_narrow((void *)(uintptr_t)dst, out, nout, c->type);
    } else
        fprintf(stderr, "cgc: error: CUDA emulation: convolution for %s: out of host memory\n",
                site_str(site, buf, sizeof buf));
    free(x), free(f), free(y), free(out), free(sum);
    return rc;
}

/* Like the GEMMs' algorithms, the emulation's all run the reference. */
static int emu_conv_algos(Device *d, const ConvCall *c, int *count, const DeviceSite *site)
{
    (void)c, (void)site;
    *count = impl(d)->conv_none ? 0 : impl(d)->conv_algos;
    return 0;
}

/* ---- ordering and time: every call has finished when it returns ---- */

static int emu_sync(Device *d) { return refused_in_capture(d, "sync") ? -1 : 0; }

static int emu_fence_new(Device *d, DeviceFence **f)
{
    *f = calloc(1, sizeof **f);
    return *f ? 0 : -1;
}

static void emu_fence_free(Device *d, DeviceFence *f) { free(f); }

static int emu_fence_record(Device *d, DeviceFence *f)
{
    if (refused_in_capture(d, "fence record")) return -1;
    f->seconds = d->clock_modeled ? impl(d)->clock_ms / 1000 : wall_seconds();
    return 0;
}

static int emu_fence_done(Device *d, DeviceFence *f, bool wait, bool *done)
{
    if (refused_in_capture(d, "fence query")) return -1;
    finish_copy(f);
    *done = true;
    return 0;
}

static int emu_fence_elapsed_ms(Device *d, DeviceFence *from, DeviceFence *to, float *ms)
{
    *ms = (float)((to->seconds - from->seconds) * 1000.0);
    return 0;
}

/* ---- graphs ---- */

static void graph_destroy(DeviceGraph *g)
{
    if (!g) return;
    for (int i = 0; i < g->n; i++) free(g->nodes[i].args), free(g->nodes[i].spans);
    free(g->nodes);
    free(g);
}

static int emu_capture_begin(Device *d)
{
    EmuDevice *e = impl(d);
    if (e->recording) {
        fprintf(stderr, "cgc: error: CUDA emulation: capture_begin while capturing\n");
        return -1;
    }
    e->recording = calloc(1, sizeof *e->recording);
    e->invalid = e->fail_captures;
    if (e->fail_captures)
        fprintf(stderr, "cgc: error: CUDA emulation: this capture is made to fail "
                        "(emu_device_fail_captures)\n");
    return e->recording ? 0 : -1;
}

static int emu_capture_end(Device *d, DeviceGraph **out, int *nodes)
{
    EmuDevice *e = impl(d);
    DeviceGraph *g = e->recording;
    *out = NULL;
    *nodes = 0;
    e->recording = NULL;
    if (!g || e->invalid) {
        fprintf(stderr, "cgc: error: CUDA emulation: the capture failed (%s)\n",
                g ? "a call above was refused" : "capture_begin was not called");
        graph_destroy(g);
        return -1;
    }
    *out = g;
    *nodes = g->n;
    return 0;
}

static int emu_coll_start(Device *d, int slot, CommOp op, const DeviceSpan *span, int n);
static int emu_coll_wait(Device *d, int slot);

static int emu_graph_launch(Device *d, DeviceGraph *g)
{
    if (refused_in_capture(d, "graph launch")) return -1;
    for (int i = 0; i < g->n; i++) {
        EmuNode *n = &g->nodes[i];
        if (n->coll_start || n->coll_wait) {
            if ((n->coll_start ? emu_coll_start(d, n->slot, n->op, n->spans, n->nspans)
                               : emu_coll_wait(d, n->slot)) != 0)
                return -1;
            continue;
        }
        if (!n->kernel) {
            if ((n->is_conv ? emu_conv(d, &n->conv, &n->site) : emu_gemm(d, &n->gemm, &n->site)) != 0) return -1;
            continue;
        }
        void *args[EMU_MAX_ARGS];
        CGC_ASSERT(n->kernel->slots || n->nargs <= EMU_MAX_ARGS);
        if (n->kernel->slots) args[0] = n->args;    /* the slots, one after another */
        else for (int a = 0; a < n->nargs; a++) args[a] = &n->args[a];
        if (emu_launch(d, n->kernel, n->grid, n->block, args, &n->site) != 0) return -1;
    }
    return 0;
}

static void emu_graph_free(Device *d, DeviceGraph *g) { graph_destroy(g); }

/* ---- collectives over the ranks: MPI's, through the job's Comm ---- */

static int emu_join(Device *d, Comm *c)
{
    impl(d)->comm = c;
    return 0;
}

static size_t span_bytes(DType t) { return t == DT_F32 ? 4 : 2; }

/* Elements of span S's value a rank's slice holds (device.h), over R ranks. */
static int64_t slice_of(const DeviceSpan *s, int r) { return (s->count + r - 1) / r; }

/* Whether span S of collective OP is one a GPU's collectives are asked for, on memory
 * this device gave out. */
static bool span_ok(Device *d, CommOp op, const DeviceSpan *s)
{
    if (s->type != DT_F32 && s->type != DT_F16 && s->type != DT_BF16) {
        fprintf(stderr, "cgc: error: CUDA emulation: a collective over the ranks of %s values, "
                        "which a GPU's collectives are not asked for\n", ir_dtype_name(s->type));
        return false;
    }
    int r = comm_size(impl(d)->comm);
    size_t es = span_bytes(s->type), whole = (size_t)s->count * es, slice = (size_t)slice_of(s, r) * es;
    if (op == COMM_SUM && s->in != s->out) {
        fprintf(stderr, "cgc: error: CUDA emulation: a sum over the ranks not in place\n");
        return false;
    }
    return check_owned(d, s->in, op == COMM_ALLGATHER ? slice : whole, "coll_start (input)") &&
           check_owned(d, s->out, op == COMM_REDUCE_SCATTER ? slice : whole, "coll_start (output)");
}

static EmuColl *coll_slot(Device *d, int slot)
{
    EmuDevice *e = impl(d);
    if (slot >= e->ncolls) {
        e->colls = xrealloc(e->colls, (size_t)(slot + 1) * sizeof *e->colls);
        memset(e->colls + e->ncolls, 0, (size_t)(slot + 1 - e->ncolls) * sizeof *e->colls);
        e->ncolls = slot + 1;
    }
    return &e->colls[slot];
}

/* Records a collective (SPAN, N of them) or, with SPAN NULL, the wait for it. */
static int record_coll(Device *d, int slot, CommOp op, const DeviceSpan *span, int n)
{
    EmuNode *node = record(d, NULL);
    if (!node) return -1;
    node->slot = slot;
    node->op = op;
    node->coll_start = span != NULL;
    node->coll_wait = span == NULL;
    if (!span) return 0;
    node->spans = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *span);
    memcpy(node->spans, span, (size_t)n * sizeof *span);
    node->nspans = n;
    return 0;
}

/* The hash of the inputs of C's spans (a reduce-scatter's or an all-gather's), over R
 * ranks. */
static uint64_t inputs_hash(const EmuColl *c, int r)
{
    uint64_t h = FNV_BASIS;
    for (int i = 0; i < c->nspans; i++) {
        const DeviceSpan *s = &c->span[i];
        int64_t n = c->op == COMM_ALLGATHER ? slice_of(s, r) : s->count;
        h = fnv1a(h, (const void *)(uintptr_t)s->in, (size_t)n * span_bytes(s->type));
    }
    return h;
}

/* C's inputs into HOST as comm.h lays out OP: a sum's one after another; a
 * reduce-scatter's piece r holding every span's slice r, an all-gather's this rank's
 * piece its slices, at the same places (zeros past a value's end). */
static void pack(EmuColl *c, int ranks, int rank)
{
    int64_t off = 0;
    for (int i = 0; i < c->nspans; i++) {
        const DeviceSpan *s = &c->span[i];
        const char *in = (const char *)(uintptr_t)s->in;
        int64_t slice = slice_of(s, ranks), es = (int64_t)span_bytes(s->type);
        if (c->op == COMM_SUM) {
            emu_widen(c->host + off, in, s->count, s->type, false);
            off += s->count;
            continue;
        }
        for (int r = 0; r < ranks; r++) {
            if (c->op == COMM_ALLGATHER && r != rank) continue;
            float *to = c->host + r * c->piece + off;
            int64_t lo = c->op == COMM_ALLGATHER ? 0 : r * slice;
            int64_t have = c->op == COMM_ALLGATHER ? slice : s->count - lo < 0 ? 0 : s->count - lo < slice ? s->count - lo : slice;
            emu_widen(to, in + lo * es, have, s->type, false);
            for (int64_t k = have; k < slice; k++) to[k] = 0;
        }
        off += slice;
    }
}

/* HOST, after C's collective, into C's outputs. */
static void unpack(const EmuColl *c, int ranks)
{
    int64_t off = 0;
    for (int i = 0; i < c->nspans; i++) {
        const DeviceSpan *s = &c->span[i];
        char *out = (char *)(uintptr_t)s->out;
        int64_t slice = slice_of(s, ranks), es = (int64_t)span_bytes(s->type);
        if (c->op == COMM_SUM) {
            emu_narrow(out, c->host + off, s->count, s->type);
            off += s->count;
            continue;
        }
        if (c->op == COMM_REDUCE_SCATTER) emu_narrow(out, c->host + off, slice, s->type);
        for (int r = 0; c->op == COMM_ALLGATHER && r < ranks && r * slice < s->count; r++) {
            int64_t have = s->count - r * slice < slice ? s->count - r * slice : slice;
            emu_narrow(out + r * slice * es, c->host + r * c->piece + off, have, s->type);
        }
        off += slice;
    }
}

static int emu_coll_start(Device *d, int slot, CommOp op, const DeviceSpan *span, int n)
{
    EmuDevice *e = impl(d);
    if (!e->comm) {
        fprintf(stderr, "cgc: error: CUDA emulation: collective %d started before the device joined "
                        "a job\n", slot);
        return -1;
    }
    if (op != COMM_SUM && op != COMM_REDUCE_SCATTER && op != COMM_ALLGATHER) {
        fprintf(stderr, "cgc: error: CUDA emulation: collective %d of kind %d, which a device is "
                        "not asked for\n", slot, (int)op);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (!span_ok(d, op, &span[i])) return -1;
    if (e->recording) return record_coll(d, slot, op, span, n);
    EmuColl *c = coll_slot(d, slot);
    if (c->active) {
        fprintf(stderr, "cgc: error: CUDA emulation: collective %d started again before it was "
                        "waited for\n", slot);
        return -1;
    }
    int ranks = comm_size(e->comm), rank = comm_rank(e->comm);
    c->op = op;
    c->piece = 0;
    for (int i = 0; i < n; i++) c->piece += op == COMM_SUM ? span[i].count : slice_of(&span[i], ranks);
    int64_t total = c->piece * (op == COMM_SUM ? 1 : ranks);
    c->host = xrealloc(c->host, (size_t)(total ? total : 1) * sizeof *c->host);
    c->span = xrealloc(c->span, (size_t)(n > 0 ? n : 1) * sizeof *c->span);
    memcpy(c->span, span, (size_t)(n > 0 ? n : 0) * sizeof *span);
    c->nspans = n;
    pack(c, ranks, rank);
    c->check = op == COMM_SUM ? 0 : inputs_hash(c, ranks);
    for (int i = 0; i < n; i++) {   /* the results are not there yet */
        int64_t out = op == COMM_REDUCE_SCATTER ? slice_of(&span[i], ranks) : span[i].count;
        memset((void *)(uintptr_t)span[i].out, 0xFF, (size_t)out * span_bytes(span[i].type));
    }
    c->active = true;
    return comm_start(e->comm, slot, op, c->host, c->piece, COMM_F32);
}

static int emu_coll_wait(Device *d, int slot)
{
    EmuDevice *e = impl(d);
    if (e->recording) return record_coll(d, slot, COMM_SUM, NULL, 0);
    EmuColl *c = slot < e->ncolls ? &e->colls[slot] : NULL;
    if (!c || !c->active) {
        fprintf(stderr, "cgc: error: CUDA emulation: a wait for collective %d, which is not in "
                        "flight\n", slot);
        return -1;
    }
    c->active = false;
    if (comm_wait(e->comm, slot, "the collective over the ranks") != 0) return -1;
    int ranks = comm_size(e->comm);
    if (c->op != COMM_SUM && inputs_hash(c, ranks) != c->check) {
        fprintf(stderr, "cgc: error: CUDA emulation: the input of collective %d changed while it "
                        "was in flight (a step wrote it before the wait)\n", slot);
        return -1;
    }
    unpack(c, ranks);
    return 0;
}

static void emu_close(Device *d)
{
    EmuDevice *e = impl(d);
    graph_destroy(e->recording);    /* a capture never ended */
    e->recording = NULL;
    while (e->kernels) {
        EmuKernel *k = e->kernels;
        e->kernels = k->next;
        free(k);
    }
    while (e->allocs) emu_free(d, (DevPtr)(uintptr_t)e->allocs->p);
    for (int i = 0; i < e->ncolls; i++) {
        free(e->colls[i].host);
        free(e->colls[i].span);
    }
    free(e->colls);
    free(e->counted);
    dlclose(e->so);
    free(e);
    free(d);
}

static const DeviceOps emu_ops = {
    .alloc = emu_alloc,
    .free = emu_free,
    .mark_unused = emu_mark_unused,
    .mark_undefined = emu_mark_undefined,
    .upload = emu_upload,
    .download = emu_download,
    .download_async = emu_download,
    .host_alloc = emu_host_alloc,
    .upload_async = emu_upload_async,
    .fence_wait = emu_fence_wait,
    .host_free = emu_host_free,
    .kernel = emu_kernel,
    .load_kernels = emu_load_kernels,
    .launch = emu_launch,
    .gemm = emu_gemm,
    .gemm_algos = emu_gemm_algos,
    .sync = emu_sync,
    .fence_new = emu_fence_new,
    .fence_free = emu_fence_free,
    .fence_record = emu_fence_record,
    .fence_done = emu_fence_done,
    .fence_elapsed_ms = emu_fence_elapsed_ms,
    .capture_begin = emu_capture_begin,
    .capture_end = emu_capture_end,
    .graph_launch = emu_graph_launch,
    .graph_free = emu_graph_free,
    .join = emu_join,
    .coll_start = emu_coll_start,
    .coll_wait = emu_coll_wait,
    .close = emu_close,
};

/* An emulated device: its ops are its own copy of emu_ops (emu_device_convs sets conv). */
static bool is_emu(const Device *d) { return d->ops->close == emu_close; }

void emu_device_count_bytes(Device *d, bool on)
{
    CGC_ASSERT(is_emu(d) && !impl(d)->allocs);   /* before the first alloc: whole pages */
    impl(d)->counting = on;
}

const EmuLaunchBytes *emu_device_counted(Device *d, int *n)
{
    CGC_ASSERT(is_emu(d));
    *n = impl(d)->ncounted;
    impl(d)->ncounted = 0;
    return impl(d)->counted;
}

int emu_device_open(const char *so_path, Device **out)
{
    void *so = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        fprintf(stderr, "cgc: error: CUDA emulation: cannot load %s: %s\n", so_path, dlerror());
        return -1;
    }
    EmuLaunchFn launch = (EmuLaunchFn)dlsym(so, "cgc_emu_launch");
    if (!launch) {
        fprintf(stderr, "cgc: error: CUDA emulation: %s has no cgc_emu_launch; link "
                        "tests/emu/cuda_emu.cpp into it\n", so_path);
        dlclose(so);
        return -1;
    }
    Device *d = calloc(1, sizeof *d);
    EmuDevice *e = calloc(1, sizeof *e);
    if (!d || !e) {
        free(d), free(e), dlclose(so);
        return -1;
    }
    e->so = so;
    e->launch = launch;
    snprintf(e->so_path, sizeof e->so_path, "%s", so_path);
    e->ops = emu_ops;
    d->ops = &e->ops;
    d->impl = e;
    snprintf(d->name, sizeof d->name, "CUDA emulation");
    snprintf(d->model, sizeof d->model, "CUDA emulation");
    d->arch = 90;       /* what the emulated kernels were generated for */
    *out = d;
    return 0;
}

void emu_device_fail_captures(Device *d, bool fail)
{
    CGC_ASSERT(is_emu(d));
    impl(d)->fail_captures = fail;
}

void emu_device_gemm_algos(Device *d, int count, int refused)
{
    CGC_ASSERT(is_emu(d) && count >= 0 && count <= DEVICE_GEMM_ALGOS);
    CGC_ASSERT(refused >= 0 && refused <= count);
    impl(d)->gemm_algos = count;
    impl(d)->refused_algo = refused;
}

void emu_device_model_time(Device *d, const double *algo_ms, double launch_ms)
{
    EmuDevice *e = impl(d);
    CGC_ASSERT(is_emu(d));
    d->clock_modeled = algo_ms != NULL;
    for (int a = 0; a <= DEVICE_GEMM_ALGOS; a++) e->algo_ms[a] = algo_ms ? algo_ms[a] : 0;
    e->launch_ms = algo_ms ? launch_ms : 0;
}

void emu_device_favour_block(Device *d, unsigned block)
{
    CGC_ASSERT(is_emu(d));
    impl(d)->favoured_block = block;
}

void emu_device_refuse_kernels(Device *d, const char *prefix)
{
    EmuDevice *e = impl(d);
    CGC_ASSERT(is_emu(d) && e->nrefused_kernels < 4 && strlen(prefix) < 64);
    snprintf(e->refused_kernels[e->nrefused_kernels++], sizeof e->refused_kernels[0], "%s", prefix);
}

void emu_device_convs(Device *d, int count, const double *algo_ms)
{
    CGC_ASSERT(is_emu(d) && count >= 0 && count <= DEVICE_CONV_ALGOS);
    EmuDevice *e = impl(d);
    e->ops.conv = count > 0 ? emu_conv : NULL;
    e->ops.conv_algos = count > 0 ? emu_conv_algos : NULL;
    e->conv_algos = count;
    for (int a = 0; a <= DEVICE_CONV_ALGOS; a++) e->conv_ms[a] = algo_ms && a <= count ? algo_ms[a] : 0;
}

static int emu_mem_free(Device *d, size_t *free_bytes)
{
    *free_bytes = impl(d)->memory - in_use(d);
    return 0;
}

void emu_device_memory(Device *d, size_t bytes)
{
    CGC_ASSERT(is_emu(d));
    impl(d)->memory = bytes;
    impl(d)->ops.mem_free = bytes ? emu_mem_free : NULL;
    d->free_bytes = bytes ? bytes - in_use(d) : 0;
}

void emu_device_tf32_in_f32(Device *d, bool on)
{
    CGC_ASSERT(is_emu(d));
    impl(d)->tf32_in_f32 = on;
}

void emu_device_conv_none(Device *d, bool none)
{
    CGC_ASSERT(is_emu(d));
    impl(d)->conv_none = none;
}

int emu_device_conv_calls(Device *d, ConvKind kind)
{
    CGC_ASSERT(is_emu(d) && kind >= 0 && kind < CONV_KINDS);
    return impl(d)->conv_calls[kind];
}

int emu_device_kernel_loads(Device *d)
{
    CGC_ASSERT(is_emu(d));
    return impl(d)->loads;
}

int emu_device_gemm_calls(Device *d, int algo)
{
    CGC_ASSERT(is_emu(d) && algo >= 0 && algo <= DEVICE_GEMM_ALGOS);
    return impl(d)->gemm_algo_calls[algo];
}

/* ---- building a plan's kernels ---- */

/* Runs ARGV (argv[0] found on PATH or absolute) and waits; 0 when it exits 0. */
static int run_command(char *const *argv)
{
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        execvp(argv[0], argv);
        fprintf(stderr, "cgc: error: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* The emulator a plan's kernels link: the object this build compiled (CGC_EMU_OBJECT,
 * with the build's sanitizers, or the racecheck's), or its source where the kernels want
 * ASan and this build has none. */
static const char *emulator_file(bool asan)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    (void)asan;
    return CGC_EMU_OBJECT;
#else
    return asan ? CGC_EMU_DIR "/cuda_emu.cpp" : CGC_EMU_OBJECT;
#endif
}

int emu_compile_so(const char *const *srcs, int nsrcs, const char *include_dir, bool asan,
                   const char *out)
{
    char inc[300] = "";
    if (include_dir) snprintf(inc, sizeof inc, "-I%s", include_dir);
#if defined(__SANITIZE_THREAD__)   /* the kernels under TSan too (the racecheck) */
    bool tsan = true;
#else
    bool tsan = false;
#endif
    const char *fixed[] = {
        CGC_EMU_CXX, "-std=c++17", "-O1", "-fPIC", "-shared",
        "-include", CGC_EMU_DIR "/cuda_emu.h",
    };
    enum { NFIXED = sizeof fixed / sizeof fixed[0] };
    const char **argv = calloc((size_t)nsrcs * 2 + NFIXED + 10, sizeof *argv);
    if (!argv) return -1;
    int n = 0;
    for (int i = 0; i < NFIXED; i++) argv[n++] = fixed[i];
    if (include_dir) argv[n++] = inc;
    if (asan || tsan) argv[n++] = "-g";   /* lines for a sanitizer's report (a sixth of the compile) */
    if (asan) argv[n++] = "-fsanitize=address";
    if (tsan) argv[n++] = "-fsanitize=thread";
    for (int i = 0; i < nsrcs; i++) {
        size_t len = strlen(srcs[i]);
        bool cu = len > 3 && strcmp(srcs[i] + len - 3, ".cu") == 0;
        argv[n++] = cu ? "-xc++" : "-xnone";
        argv[n++] = srcs[i];
    }
    argv[n++] = "-xnone";
    argv[n++] = emulator_file(asan);
    argv[n++] = "-o";
    argv[n++] = out;
    argv[n] = NULL;
    int rc = run_command((char *const *)argv);
    free(argv);
    if (rc != 0)
        fprintf(stderr, "cgc: error: CUDA emulation: compiling %s with %s failed (the "
                        "compiler's messages are above); the sources are kept\n",
                out, CGC_EMU_CXX);
    return rc;
}

/* Kernel names become file names; codegen promises C identifiers, checked here. */
static bool is_identifier(const char *s)
{
    if (!*s || (*s >= '0' && *s <= '9')) return false;
    for (; *s; s++)
        if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9')))
            return false;
    return true;
}

/* DIR/all_kernels.cu: every kernel's .cu, then the thunks (which call the kernels, so
 * come after them), in one translation unit, as NVRTC compiles the module: one parse of
 * the prelude instead of one per kernel. */
static int write_unity(const Plan *plan, const char *path, const char *thunks)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cgc: error: %s: %s\n", path, strerror(errno));
        return -1;
    }
    for (int k = 0; k < plan->nkernels; k++) {
        if (!is_identifier(plan->kernels[k].name)) {
            fprintf(stderr, "cgc: error: CUDA emulation: kernel %d has a name that is not "
                            "a C identifier\n", k);
            fclose(f);
            return -1;
        }
        fprintf(f, "#include \"%s.cu\"\n", plan->kernels[k].name);
    }
    fprintf(f, "#include \"%s\"\n", thunks);
    return fclose(f) == 0 ? 0 : -1;
}

static int write_thunks(const Plan *plan, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cgc: error: %s: %s\n", path, strerror(errno));
        return -1;
    }
    plan_emit_emu_thunks(f, plan);
    return fclose(f) == 0 ? 0 : -1;
}

/* ---- the cache of compiled plans ----
 *
 * The tests of one build compile the same plans many times (test_emu_gemm under three
 * schedules, a model in several tests), and for most cases the compile is most of the
 * time. Where XDG_CACHE_HOME is set (ctest sets it to the build's test-cache), a plan's
 * shared object is kept in its cgc-emu/ under a hash of everything the compile reads: the
 * files written for it, the emulator it links, the compiler and the sanitizer. Each
 * build gets a copy of its own, not a link: dlopen takes one file (one inode) for one
 * library, and each device needs its own emulator state. */

static uint64_t hash_file(uint64_t h, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return fnv1a(h, path, strlen(path) + 1);   /* a file it cannot read: no match */
    char buf[1 << 14];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) h = fnv1a(h, buf, n);
    fclose(f);
    return h;
}

static int not_dot(const struct dirent *e) { return e->d_name[0] != '.'; }

/* The key of compiling DIR's files with ASAN: 0 when the cache is off. */
static uint64_t build_key(const char *dir, bool asan)
{
    const char *cache = getenv("XDG_CACHE_HOME");
    if (!cache || !*cache) return 0;
    const char *fixed[] = { CGC_EMU_CXX, asan ? "asan" : "",
#if defined(__SANITIZE_THREAD__)
                            "tsan",
#endif
    };
    uint64_t h = FNV_BASIS;
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) h = fnv1a(h, fixed[i], strlen(fixed[i]) + 1);
    h = hash_file(hash_file(h, CGC_EMU_DIR "/cuda_emu.h"), emulator_file(asan));
    struct dirent **names;
    int n = scandir(dir, &names, not_dot, alphasort);
    if (n < 0) return 0;
    for (int i = 0; i < n; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        h = hash_file(fnv1a(h, names[i]->d_name, strlen(names[i]->d_name) + 1), path);
        free(names[i]);
    }
    free(names);
    return h ? h : 1;
}

static void cache_path(uint64_t key, const char *suffix, char *out, size_t len)
{
    snprintf(out, len, "%s/cgc-emu/%016llx.so%s", getenv("XDG_CACHE_HOME"), (unsigned long long)key, suffix);
}

static int copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    char buf[1 << 16];
    size_t n;
    bool ok = in && out;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    ok = ok && !ferror(in);
    if (in) fclose(in);
    if (out && fclose(out) != 0) ok = false;
    return ok ? 0 : -1;
}

/* Keeps SO under KEY: written under a name of this process's, then renamed, so that a
 * test running beside this one sees the whole file or none. */
static void cache_store(uint64_t key, const char *so)
{
    char dir[300], tmp[320], final[300];
    snprintf(dir, sizeof dir, "%s/cgc-emu", getenv("XDG_CACHE_HOME"));
    mkdir(getenv("XDG_CACHE_HOME"), 0755);
    mkdir(dir, 0755);
    char suffix[32];
    snprintf(suffix, sizeof suffix, ".%d.tmp", (int)getpid());
    cache_path(key, suffix, tmp, sizeof tmp);
    cache_path(key, "", final, sizeof final);
    if (copy_file(so, tmp) != 0 || rename(tmp, final) != 0) unlink(tmp);
}

int emu_build_plan(const Plan *plan, bool asan, char *so_path, size_t so_path_len)
{
    const char *tmp = getenv("TMPDIR");
    char dir[200], unity[256], thunks[256];
    snprintf(dir, sizeof dir, "%s/cgc-emu-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "cgc: error: CUDA emulation: cannot make a directory %s: %s\n", dir,
                strerror(errno));
        return -1;
    }
    snprintf(unity, sizeof unity, "%s/all_kernels.cu", dir);
    snprintf(thunks, sizeof thunks, "%s/thunks.cpp", dir);
    snprintf(so_path, so_path_len, "%s/kernels.so", dir);
    if (plan_emit(plan, dir, NULL, 0) != 0 || write_thunks(plan, thunks) != 0 ||
        write_unity(plan, unity, "thunks.cpp") != 0)
        return -1;
    uint64_t key = build_key(dir, asan);
    char cached[300];
    if (key) cache_path(key, "", cached, sizeof cached);
    if (key && access(cached, R_OK) == 0 && copy_file(cached, so_path) == 0) return 0;
    const char *srcs[] = { unity };
    int rc = emu_compile_so(srcs, 1, dir, asan, so_path);
    if (rc == 0 && key) cache_store(key, so_path);
    return rc;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

void emu_remove_build(const char *so_path)
{
    char copy[256];
    snprintf(copy, sizeof copy, "%s", so_path);
    const char *dir = dirname(copy);
    if (strstr(dir, "cgc-emu-")) nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}
