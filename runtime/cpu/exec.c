/* exec.c: the CPU reference executor (see exec.h).
 *
 * A run walks the graph's nodes in order and computes each into a buffer of its own.
 * Buffers are kept from run to run and only grow, because training calls this ten
 * thousand times with the same few shapes. READ and same-type RESHAPE nodes alias
 * storage instead of copying it. ASSIGNs are applied after the last node, so every
 * read of a step sees the values from before it; they copy into the tensors (rather
 * than swap buffers) so that cpu_exec_tensor's pointers stay put. In training (with
 * reuse) an assigned value is computed in its tensor's storage instead, the copy saved,
 * wherever no later node reads the old values (in_place_plan). One consequence:
 * after a run, a READ node's value shows what the ASSIGNs left there.
 *
 * The kernels exist twice, for float and for double, compiled from exec_impl.h
 * included once per element type, so that the f64 oracle of the gradient checks and
 * the f32 executor that trains cannot drift apart. This file holds what does not
 * depend on the element type: buffers, binding symbols, planning broadcasting walks
 * and axis reductions, rounding to the emulated formats, errors and timing.
 *
 * Parallel loops split work into tasks of a fixed size and combine partial sums in
 * task order, so a result never depends on how many threads ran it. GEMMs are split
 * the same way over single-threaded BLAS calls, so one thread pool serves everything.
 */
#include "exec.h"

#include "../../base/clock.h"
#include "../profile.h"
#include "../../base/rng.h"

#include <cblas.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
/* The elementwise ops' expressions (compiler/ops.def) name math functions as CUDA C++
 * overloads them, exp(x) for expf on a float; <tgmath.h> gives C the same, so that the
 * float and double executors compile one expression. After the other headers: it defines
 * the macros I and complex. */
#include <tgmath.h>

enum {
    PAR_MIN = 32768,    /* elements below which a loop stays serial */
    CHUNK = 4096,       /* elements per parallel task of elementwise work */
    COL_CHUNK = 64,     /* columns per task when reducing over a non-last axis (a
                         * gradient of 128 biases: two tasks) */
};

/* ---- buffers and slots ---- */

typedef struct Buf {
    void *p;
    size_t cap;         /* bytes */
} Buf;

/* What the executor keeps per node id of the graph being run. */
typedef struct Slot {
    Buf own;            /* the node's storage: REAL, or int32 for i32 nodes */
    Buf conv;           /* an i32 node's values as REAL, for ops that read numbers */
    void *val;          /* the value: own.p, or an alias (READ, RESHAPE) */
    int64_t n;          /* elements */
    uint64_t conv_run;  /* the run that filled conv (0: never) */
} Slot;

struct CpuExec {
    const IrProgram *p;
    CpuReal real;
    size_t esize;           /* sizeof(float) or sizeof(double) */
    void **tensors;         /* persistent tensors, fixed shapes, REAL */
    Slot *slots;
    int nslots;
    const IrGraph *graph;   /* the graph of the last run */
    const CpuFeed *feed;    /* during a run */
    int64_t symvals[IR_MAX_SYMBOLS];
    uint64_t run;           /* runs started so far */
    Buf scratch[3];         /* tf32 copies of GEMM operands; REDUCE_TO passes; partials */
    double gemm_seconds;
    Profile *prof;          /* --profile: times every op while set; NULL costs one test */
    bool detect_anomaly;    /* check every node's values (cpu_exec_set_detect_anomaly) */
    bool reuse;             /* hand dead nodes' storage on (cpu_exec_set_reuse) */
    Buf *pool;              /* storage free for the next node that needs some */
    int npool, cappool;
    int *last, *next_dead, *first_dead;   /* per node of PLANNED: release_plan */
    int *in_place;          /* per node of PLANNED: the tensor it is computed in, or -1 */
    const IrGraph *planned;     /* the graph the release plan is for (NULL: none) */
    CpuAnomaly anomaly;     /* the last run's, when it stopped at one */
    CpuCollectives coll;    /* several ranks (cpu_exec_set_collectives); start NULL: none */
    struct Bucket *buckets; /* the graph run's all-reduce buckets (bucket_plan) */
    int nbuckets, capbuckets;
    int64_t *coll_offset;   /* per node of the run: a collective's place in its bucket */
    Buf coll_alone;         /* a collective run alone (a bucket not whole) */
};

/* Makes B hold at least BYTES. The old contents are not kept: callers overwrite. */
static void *buf_reserve(Buf *b, size_t bytes)
{
    if (bytes == 0) bytes = sizeof(double);
    if (b->cap < bytes) {
        free(b->p);
        b->p = xmalloc(bytes);
        b->cap = bytes;
    }
    return b->p;
}

static void buf_free(Buf *b)
{
    free(b->p);
    b->p = NULL;
    b->cap = 0;
}

/* ---- storage handed on between nodes (cpu_exec_set_reuse) ---- */

/* The first of the pool's buffers (sorted by capacity) that holds at least BYTES. */
static int pool_find(const CpuExec *e, size_t bytes)
{
    int lo = 0, hi = e->npool;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (e->pool[mid].cap < bytes) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void pool_put(CpuExec *e, Buf *b)
{
    if (!b->p) return;
    if (e->npool == e->cappool) {
        e->cappool = e->cappool ? 2 * e->cappool : 64;
        e->pool = xrealloc(e->pool, (size_t)e->cappool * sizeof *e->pool);
    }
    int at = pool_find(e, b->cap);
    memmove(&e->pool[at + 1], &e->pool[at], (size_t)(e->npool - at) * sizeof *e->pool);
    e->pool[at] = *b;
    e->npool++;
    *b = (Buf){0};
}

/* B made to hold BYTES: as buf_reserve, but from the pool's smallest buffer that is
 * large enough when there is one (B's own, too small, goes to the pool). */
static void *slot_reserve(CpuExec *e, Buf *b, size_t bytes)
{
    if (!e->reuse || b->cap >= bytes) return buf_reserve(b, bytes);
    int at = pool_find(e, bytes);
    if (at == e->npool) return buf_reserve(b, bytes);
    Buf got = e->pool[at];
    memmove(&e->pool[at], &e->pool[at + 1], (size_t)(e->npool - at - 1) * sizeof *e->pool);
    e->npool--;
    pool_put(e, b);
    *b = got;
    return b->p;
}

static void slots_reserve(CpuExec *e, int n)
{
    if (n <= e->nslots) return;
    e->slots = xrealloc(e->slots, (size_t)n * sizeof *e->slots);
    memset(e->slots + e->nslots, 0, (size_t)(n - e->nslots) * sizeof *e->slots);
    e->nslots = n;
}

/* ---- shapes with symbols bound ---- */

typedef struct Dims {
    int rank;
    int64_t d[IR_MAX_RANK];
} Dims;

static Dims bind_shape(const Shape *s, const int64_t *symvals)
{
    Dims r = { .rank = s->rank };
    for (int i = 0; i < s->rank; i++) {
        int64_t d = s->dim[i];
        r.d[i] = IR_DIM_IS_SYM(d) ? symvals[IR_DIM_SYMBOL(d)] : d;
    }
    return r;
}

static int64_t dims_numel(const Dims *d)
{
    int64_t n = 1;
    for (int i = 0; i < d->rank; i++) n *= d->d[i];
    return n;
}

/* Dense row-major strides of D. */
static void dims_strides(const Dims *d, int64_t *stride)
{
    int64_t s = 1;
    for (int i = d->rank - 1; i >= 0; i--) {
        stride[i] = s;
        s *= d->d[i];
    }
}

/* The first RANK - DROP dimensions of D (matrix batch dims). */
static Dims dims_prefix(const Dims *d, int drop)
{
    Dims r = *d;
    r.rank = d->rank - drop;
    return r;
}

/* ---- broadcasting walks ----
 *
 * A walk visits the elements of an output in order and, for each of up to three
 * operands, the offset of the element that broadcasting pairs with it. Dimensions of
 * size 1 are dropped and neighbours merged wherever every operand allows, so the
 * common cases (same shapes, a scalar operand, a [C] bias on [N, C]) become one or a
 * few long spans with unit or zero strides, which the kernels vectorize. */

typedef struct Walk {
    int rank, nops;
    int64_t dim[IR_MAX_RANK];
    int64_t stride[IR_MAX_IN][IR_MAX_RANK];  /* 0 where the operand is broadcast */
    int64_t n;
} Walk;

/* The strides of operand OP, a shape broadcast to OUT (trailing dimensions aligned). */
static void walk_operand_strides(const Dims *out, const Dims *op, int64_t *stride)
{
    int64_t dense[IR_MAX_RANK];
    dims_strides(op, dense);
    int lead = out->rank - op->rank;
    CGC_ASSERT(lead >= 0);
    for (int i = 0; i < out->rank; i++) {
        int j = i - lead;
        stride[i] = (j < 0 || op->d[j] == 1) ? 0 : dense[j];
        CGC_ASSERT(j < 0 || op->d[j] == 1 || op->d[j] == out->d[i]);
    }
}

static void walk_plan(Walk *w, const Dims *out, int nops, const Dims *ops)
{
    int64_t st[IR_MAX_IN][IR_MAX_RANK];
    for (int k = 0; k < nops; k++) walk_operand_strides(out, &ops[k], st[k]);
    memset(w, 0, sizeof *w);
    w->nops = nops;
    w->n = dims_numel(out);
    for (int i = 0; i < out->rank; i++) {
        if (out->d[i] == 1) continue;
        bool merge = w->rank > 0;
        for (int k = 0; k < nops && merge; k++)
            merge = st[k][i] * out->d[i] == w->stride[k][w->rank - 1];
        if (merge) {
            w->dim[w->rank - 1] *= out->d[i];
            for (int k = 0; k < nops; k++) w->stride[k][w->rank - 1] = st[k][i];
            continue;
        }
        w->dim[w->rank] = out->d[i];
        for (int k = 0; k < nops; k++) w->stride[k][w->rank] = st[k][i];
        w->rank++;
    }
    if (w->rank == 0) w->dim[w->rank++] = 1;   /* a single element */
}

/* Offsets of each operand's element paired with output element INDEX. */
static void walk_offsets(const Walk *w, int64_t index, int64_t *off)
{
    for (int k = 0; k < w->nops; k++) off[k] = 0;
    for (int i = w->rank - 1; i >= 0 && index > 0; i--) {
        int64_t j = index % w->dim[i];
        index /= w->dim[i];
        for (int k = 0; k < w->nops; k++) off[k] += j * w->stride[k][i];
    }
}

/* Computes output elements [OUT, OUT+LEN) from operand elements OFF[k] + i*STEP[k]. */
typedef void (*SpanFn)(void *ctx, int64_t out, const int64_t *off, const int64_t *step,
                       int64_t len);

/* Runs FN over the walk in spans of at most CHUNK elements, in parallel when large.
 * One call per span, not per element, so the function pointer costs nothing. */
static void walk_run(const Walk *w, SpanFn fn, void *ctx)
{
    if (w->n == 0) return;
    int64_t inner = w->dim[w->rank - 1];
    int64_t per_row = (inner + CHUNK - 1) / CHUNK;
    int64_t tasks = (w->n / inner) * per_row;
    int64_t step[IR_MAX_IN];
    for (int k = 0; k < w->nops; k++) step[k] = w->stride[k][w->rank - 1];

#pragma omp parallel for schedule(static) if (w->n >= PAR_MIN)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t row = t / per_row, lo = (t % per_row) * CHUNK;
        int64_t len = inner - lo < CHUNK ? inner - lo : CHUNK;
        int64_t off[IR_MAX_IN];
        walk_offsets(w, row * inner, off);
        for (int k = 0; k < w->nops; k++) off[k] += lo * step[k];
        fn(ctx, row * inner + lo, off, step, len);
    }
}

/* ---- axis plans: a tensor seen as [outer, len, inner] around one axis ---- */

typedef struct AxisPlan {
    int64_t outer, len, inner;
} AxisPlan;

static AxisPlan axis_plan(const Dims *d, int axis)
{
    AxisPlan a = { 1, 1, 1 };
    if (axis == IR_AXIS_ALL) {
        a.len = dims_numel(d);
        return a;
    }
    CGC_ASSERT(axis >= 0 && axis < d->rank);
    for (int i = 0; i < axis; i++) a.outer *= d->d[i];
    a.len = d->d[axis];
    for (int i = axis + 1; i < d->rank; i++) a.inner *= d->d[i];
    return a;
}

/* REDUCE_TO as a sequence of single-axis sums: each maximal run of dimensions that
 * the output keeps as 1 (and the input does not) is summed away in one pass, the
 * innermost run first. Returns the number of passes written to PASS. */
static int reduce_to_plan(const Dims *x, const Dims *out, AxisPlan *pass)
{
    int lead = x->rank - out->rank, npass = 0;
    CGC_ASSERT(lead >= 0);
    Dims cur = *x;
    int i = x->rank - 1;
    while (i >= 0) {
        bool reduced = cur.d[i] != 1 && (i < lead || out->d[i - lead] == 1);
        if (!reduced) {
            i--;
            continue;
        }
        int hi = i;   /* the run is [lo, hi]; size-1 dims inside it do not break it */
        while (i >= 0 && (i < lead || out->d[i - lead] == 1)) i--;
        int lo = i + 1;
        AxisPlan a = { 1, 1, 1 };
        for (int j = 0; j < lo; j++) a.outer *= cur.d[j];
        for (int j = lo; j <= hi; j++) a.len *= cur.d[j], cur.d[j] = 1;
        for (int j = hi + 1; j < cur.rank; j++) a.inner *= cur.d[j];
        pass[npass++] = a;
    }
    return npass;
}

/* ---- rounding to the emulated formats ----
 *
 * Bit arithmetic on the binary32 (or binary64) encoding: adding half a unit of the
 * kept precision minus one, plus the lowest kept bit, then truncating, is round to
 * nearest with ties to even, and a carry out of the mantissa correctly bumps the
 * exponent. Below the format's smallest normal number the unit is fixed; adding and
 * subtracting a power of two whose ulp is that unit lets the FPU round (the default
 * rounding mode is nearest even). Both results are computed and one selected, without
 * branches, so that loops over whole tensors vectorize. */

typedef struct HalfFormat {
    int mant;               /* mantissa bits kept */
    double min_normal;      /* below it the format is subnormal */
    double subnormal_magic; /* a power of two whose float ulp is the subnormal unit */
    double overflow_at;     /* the smallest magnitude that rounds to infinity */
} HalfFormat;

/* f16: 10 mantissa bits, exponents down to -14, largest 65504 (65520 rounds up). */
static const HalfFormat FMT_F16 = { 10, 0x1p-14, 0x1p-1, 65520.0 };
/* bf16 and tf32 share f32's exponent range. */
static const HalfFormat FMT_BF16 = { 7, 0x1p-126, 0x1p-110, 0x1.ffp127 };
static const HalfFormat FMT_TF32 = { 10, 0x1p-126, 0x1p-113, 0x1.ffep127 };

static inline uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float f32_from(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline uint64_t f64_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline double f64_from(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* C ? A : B by masks: GCC keeps a conditional FP result as a branch, which stops
 * vectorization; integer masks it does not. */
static inline uint32_t select32(bool c, uint32_t a, uint32_t b)
{
    uint32_t m = -(uint32_t)c;
    return (a & m) | (b & ~m);
}

static inline uint64_t select64(bool c, uint64_t a, uint64_t b)
{
    uint64_t m = -(uint64_t)c;
    return (a & m) | (b & ~m);
}

static inline float round_float(float x, const HalfFormat *f)
{
    uint32_t u = f32_bits(x), sign = u & 0x80000000u, a = u ^ sign;
    uint32_t shift = (uint32_t)(23 - f->mant);
    uint32_t normal = (a + ((1u << (shift - 1)) - 1) + ((a >> shift) & 1)) & ~((1u << shift) - 1);
    float magic = (float)f->subnormal_magic;
    uint32_t sub = f32_bits((f32_from(a) + magic) - magic);
    uint32_t r = select32(a < f32_bits((float)f->min_normal), sub, normal);
    r = select32(a >= f32_bits((float)f->overflow_at), 0x7f800000u, r);
    r = select32(a > 0x7f800000u, a, r);   /* NaN stays NaN */
    return f32_from(r | sign);
}

/* The same rounding straight from binary64, so that the f64 executor does not round
 * twice (to float, then to the half format). */
static inline double round_double(double x, const HalfFormat *f)
{
    const uint64_t inf = 0x7ff0000000000000ull;
    uint64_t u = f64_bits(x), sign = u & 0x8000000000000000ull, a = u ^ sign;
    uint64_t shift = (uint64_t)(52 - f->mant), one = 1;
    uint64_t normal = (a + ((one << (shift - 1)) - 1) + ((a >> shift) & 1)) & ~((one << shift) - 1);
    double magic = f->subnormal_magic * 0x1p29;   /* 52 - 23 more mantissa bits */
    uint64_t sub = f64_bits((f64_from(a) + magic) - magic);
    uint64_t r = select64(a < f64_bits(f->min_normal), sub, normal);
    r = select64(a >= f64_bits(f->overflow_at), inf, r);
    r = select64(a > inf, a, r);
    return f64_from(r | sign);
}

float cpu_round_f16(float x) { return round_float(x, &FMT_F16); }
float cpu_round_bf16(float x) { return round_float(x, &FMT_BF16); }
float cpu_round_tf32(float x) { return round_float(x, &FMT_TF32); }

/* The format a node's storage is rounded to, or NULL for f32 (and i32). */
static const HalfFormat *storage_format(DType t)
{
    if (t == DT_F16) return &FMT_F16;
    if (t == DT_BF16) return &FMT_BF16;
    return NULL;
}

/* The format node NODE of G is rounded to when computed: its storage's, except for a
 * GEMM group's unstored members, which stay in cuBLASLt's f32 accumulator (ir.h). */
static const HalfFormat *node_format(const IrGraph *g, const IrNode *node)
{
    if (ir_gemm_unrounded(g, (int)(node - g->nodes))) return NULL;
    return storage_format(node->dtype);
}

/* ---- erf and exp of the f32 executor: the kernels' (codegen/cgc_math.h) ---- */

#define CGC_MATH_FN static inline
#define CGC_BITS f32_bits
#define CGC_FLOAT f32_from
#define CGC_PICK(c, a, b) f32_from(select32((c), f32_bits(a), f32_bits(b)))
#include "../../codegen/cgc_math.h"

float cpu_erff(float x) { return cgc_erff(x); }
float cpu_expf(float x) { return cgc_expf(x); }

/* ---- splitting GEMMs ---- */

enum {
    GEMM_MIN_PART = 64,         /* rows or columns per part, at least */
    GEMM_MAX_PARTS = 8,
    GEMM_MIN_SPLIT = 1 << 20,   /* multiply-adds below which one call does it all */
};

/* OpenBLAS, loaded at the first matrix product rather than with the program. Its
 * threaded build starts a pool of threads as it loads, one a core, and gives each thread
 * that runs its code a buffer of its own (BLAS_BUFFER bytes); when one cannot be allocated
 * (ulimit -d, ulimit -v) it asks again without end, and exit() waits on the pool. Loaded
 * with OPENBLAS_NUM_THREADS=1 it starts no pool: cgc calls it single-threaded from threads
 * of its own (gemm), as many as have a buffer's room. The buffer's size on x86-64
 * (BUFFER_SIZE in OpenBLAS's common_x86_64.h), as measured: */
#define BLAS_BUFFER ((size_t)128 << 20)
#define BLAS_LIBRARY "libopenblas.so.0"

static struct {
    void (*sgemm)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint, float,
                  const float *, blasint, const float *, blasint, float, float *, blasint);
    void (*dgemm)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint, double,
                  const double *, blasint, const double *, blasint, double, double *, blasint);
    void (*sgemv)(CBLAS_ORDER, CBLAS_TRANSPOSE, blasint, blasint, float, const float *, blasint,
                  const float *, blasint, float, float *, blasint);
    void (*dgemv)(CBLAS_ORDER, CBLAS_TRANSPOSE, blasint, blasint, double, const double *, blasint,
                  const double *, blasint, double, double *, blasint);
    int threads;            /* that may call it at once; 0: not loaded yet */
} blas;

/* Whether ulimit -d or -v limits what this process may allocate. */
static bool memory_limited(void)
{
    const int kinds[] = {RLIMIT_DATA, RLIMIT_AS};
    for (int i = 0; i < 2; i++) {
        struct rlimit r;
        if (getrlimit(kinds[i], &r) == 0 && r.rlim_cur != RLIM_INFINITY) return true;
    }
    return false;
}

/* Loads OpenBLAS (once) and returns how many threads may call it at once: OpenMP's count
 * or, under a limit on memory, as many as have a buffer's room now. 0 after an error. */
static int blas_load(void)
{
    if (blas.threads) return blas.threads;
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    void *lib = dlopen(BLAS_LIBRARY, RTLD_NOW | RTLD_GLOBAL);
    if (lib) {
        *(void **)&blas.sgemm = dlsym(lib, "cblas_sgemm");
        *(void **)&blas.dgemm = dlsym(lib, "cblas_dgemm");
        *(void **)&blas.sgemv = dlsym(lib, "cblas_sgemv");
        *(void **)&blas.dgemv = dlsym(lib, "cblas_dgemv");
        void (*set_threads)(int);   /* a program that linked OpenBLAS loaded it before */
        *(void **)&set_threads = dlsym(lib, "openblas_set_num_threads");
        if (set_threads) set_threads(1);
    }
    if (!lib || !blas.sgemm || !blas.dgemm || !blas.sgemv || !blas.dgemv) {
        cgc_error("the CPU's matrix products need OpenBLAS (%s): %s; apt-get install "
                  "libopenblas0", BLAS_LIBRARY, lib ? "a routine is missing" : dlerror());
        return 0;
    }
    int t = omp_get_max_threads();
    for (; memory_limited() && t > 0; t--) {
        void *room = malloc((size_t)t * BLAS_BUFFER);
        free(room);
        if (room) break;
    }
    if (t == 0)
        cgc_error("the CPU's matrix products need %zu MB for OpenBLAS's buffer, more than this "
                  "process may still allocate (ulimit -d, ulimit -v): raise the limit",
                  BLAS_BUFFER >> 20);
    return blas.threads = t;
}

/* How a product of [m, k] by [k, n] is cut: along rows (m) or columns (n) of C, into
 * PARTS blocks of SIZE out of TOTAL. */
typedef struct GemmSplit {
    bool rows;
    int parts;
    int64_t size, total;
} GemmSplit;

static GemmSplit gemm_split(int64_t m, int64_t n, int64_t k)
{
    GemmSplit s = { .rows = m >= n, .parts = 1 };
    s.total = s.rows ? m : n;
    s.size = s.total;
    if (m * n * k < GEMM_MIN_SPLIT) return s;
    int64_t parts = s.total / GEMM_MIN_PART;
    s.parts = (int)(parts < 1 ? 1 : parts > GEMM_MAX_PARTS ? GEMM_MAX_PARTS : parts);
    /* multiples of 16 keep the parts aligned to the BLAS kernels' register blocks */
    s.size = ((s.total + s.parts - 1) / s.parts + 15) / 16 * 16;
    s.parts = (int)((s.total + s.size - 1) / s.size);
    return s;
}

/* ---- errors, time, scalars ---- */

/* An EMBED's index outside its table of ROWS rows. */
static int report_bad_index(const IrNode *node, int32_t index, int64_t rows)
{
    if (node->loc.line > 0)
        cgc_error("index %d out of range for an embedding of %lld rows at line %d of the .net "
                  "file", (int)index, (long long)rows, node->loc.line);
    else
        cgc_error("index %d out of range for an embedding of %lld rows", (int)index,
                  (long long)rows);
    return -1;
}

static int report_bad_label(const IrNode *node, int32_t label, int64_t classes)
{
    const char *what = node->name ? node->name : ir_op_info[node->op].name;
    if (node->loc.line > 0)
        cgc_error("label %d out of range for %lld classes at line %d of the .net file (%s)",
                  (int)label, (long long)classes, node->loc.line, what);
    else
        cgc_error("label %d out of range for %lld classes (%s)", (int)label,
                  (long long)classes, what);
    return -1;
}

/* A float value as the int32 an i32 node stores: truncated like a C cast, NaN as 0,
 * saturated instead of undefined behaviour. */
static int32_t to_int32(double x)
{
    if (isnan(x)) return 0;
    if (x >= 2147483647.0) return INT32_MAX;
    if (x <= -2147483648.0) return INT32_MIN;
    return (int32_t)x;
}

/* The counter input of DROPOUT as the unsigned count rng.h expects. */
static uint64_t to_counter(double x)
{
    if (!(x >= 0)) return 0;
    if (x >= 18446744073709551615.0) return UINT64_MAX;
    return (uint64_t)x;
}

/* Ops that only move elements (shape ops that do not sum): their output needs no
 * rounding when the input already has the node's dtype. */
static bool moves_elements(IrOp op)
{
    return ir_op_info[op].cls == IR_CLASS_SHAPE && !ir_op_is_reduction(op);
}

/* A collective the job runs over the ranks, in a bucket (the others are local). */
static bool in_bucket(const IrNode *x) { return ir_node_fuse(x) == IR_FUSE_COLLECTIVE; }

/* ---- the kernels, once per element type ---- */

/* ---- sliding windows (UNFOLD, FOLD; ir.h's IrWindow) ---- */

typedef struct WinGeo {
    IrWindow win;
    bool rows;                  /* IR_WINDOW_ROWS layout */
    int64_t n, c, h, w;         /* the image */
    int64_t oh, ow, kk;         /* output positions, kernel entries per channel */
} WinGeo;

static WinGeo win_geo(const IrNode *node, const Dims *image)
{
    WinGeo g = { .win = node->win, .rows = node->flags & IR_WINDOW_ROWS };
    g.n = image->d[0], g.c = image->d[1], g.h = image->d[2], g.w = image->d[3];
    const IrWindow *w = &g.win;
    g.oh = ir_window_extent(g.h, w, 0), g.ow = ir_window_extent(g.w, w, 1);
    g.kk = (int64_t)w->kernel[0] * w->kernel[1];
    return g;
}

/* ---- the collectives (ops.def's IR_CL rows) and IR_SHARD ---- */

/* One bucket of a run: its members' values gathered in one buffer, on which one
 * collective of theirs runs in place (cpu/exec.h). A sum's buffer holds the members one
 * after another, N elements; a reduce-scatter's or an all-gather's holds one piece of N
 * per rank, piece r holding each member's slice r (ops.def) in the same places. A bucket
 * is whole when each of its values is computed before the first of its members runs
 * (fusion may order a graph otherwise); the members of a bucket that is not are run one
 * by one, each where it runs (every rank runs the same order, so all agree). */
typedef struct Bucket {
    IrOp op;            /* its members' */
    int ready;          /* the last node whose value it takes: it starts after that one */
    int first;          /* its first member */
    int64_t n;          /* elements (per piece) */
    Buf buf;
    bool whole, started, done;
} Bucket;

/* Bucket K of this run, those up to it made empty when new (their storage kept from
 * earlier runs). */
static Bucket *bucket_at(CpuExec *e, int k)
{
    while (k >= e->nbuckets) {
        if (e->nbuckets == e->capbuckets) {
            e->capbuckets = e->capbuckets ? 2 * e->capbuckets : 8;
            e->buckets = xrealloc(e->buckets, (size_t)e->capbuckets * sizeof *e->buckets);
            memset(e->buckets + e->nbuckets, 0, (size_t)(e->capbuckets - e->nbuckets) * sizeof *e->buckets);
        }
        Bucket *b = &e->buckets[e->nbuckets++];
        *b = (Bucket){.ready = -1, .first = -1, .buf = b->buf};
    }
    return &e->buckets[k];
}

/* Which side of collective X is this rank's slice (ops.def's SLICE). */
static IrSlice slice_side(const IrNode *x) { return ir_op_info[x->op].slice; }

static int64_t node_numel(const CpuExec *e, const IrNode *x)
{
    Dims d = bind_shape(&x->shape, e->symvals);
    return dims_numel(&d);
}

/* What collective node ID puts in a piece of its bucket: its value (a sum) or a slice. */
static int64_t piece_numel(const CpuExec *e, const IrGraph *g, int id)
{
    const IrNode *x = &g->nodes[id];
    return node_numel(e, slice_side(x) == IR_SLICE_IN ? &g->nodes[x->in[0]] : x);
}

/* OUT[0 .. S) := slice R of IN (N elements; ops.def): zeros past its end. */
static void slice_of(const CpuExec *e, char *out, const char *in, int64_t n, int64_t s, int r)
{
    int64_t lo = (int64_t)r * s, have = n - lo < 0 ? 0 : n - lo < s ? n - lo : s;
    if (have > 0) memcpy(out, in + (size_t)lo * e->esize, (size_t)have * e->esize);
    memset(out + (size_t)have * e->esize, 0, (size_t)(s - have) * e->esize);
}

/* Node ID's input into BUF, a bucket of N elements per piece, at OFF in its pieces. */
static void pack(const CpuExec *e, const IrGraph *g, int id, char *buf, int64_t n, int64_t off)
{
    const IrNode *x = &g->nodes[id];
    const Slot *in = &e->slots[x->in[0]];
    int64_t s = piece_numel(e, g, id);
    size_t es = e->esize;
    switch (slice_side(x)) {
    case IR_SLICE_WHOLE: memcpy(buf + (size_t)off * es, in->val, (size_t)s * es); return;
    case IR_SLICE_OUT:
        for (int r = 0; r < e->coll.ranks; r++)
            slice_of(e, buf + (size_t)(r * n + off) * es, in->val, in->n, s, r);
        return;
    case IR_SLICE_IN: memcpy(buf + (size_t)(e->coll.rank * n + off) * es, in->val, (size_t)s * es); return;
    case IR_SLICE_NOT_COLLECTIVE: CGC_INTERNAL("%s has no bucket", ir_op_info[x->op].name);
    }
}

/* OUT := node ID's value, from BUF after its collective (as pack laid it out). */
static void unpack(const CpuExec *e, const IrGraph *g, int id, const char *buf, int64_t n, int64_t off,
                   void *out)
{
    const IrNode *x = &g->nodes[id];
    int64_t s = piece_numel(e, g, id), total = node_numel(e, x);
    size_t es = e->esize;
    if (slice_side(x) != IR_SLICE_IN) {
        memcpy(out, buf + (size_t)off * es, (size_t)s * es);
        return;
    }
    for (int r = 0; r < e->coll.ranks && r * s < total; r++) {
        int64_t have = total - r * s < s ? total - r * s : s;
        memcpy((char *)out + (size_t)(r * s) * es, buf + (size_t)(r * n + off) * es, (size_t)have * es);
    }
}

static size_t bucket_bytes(const CpuExec *e, IrOp op, int64_t n)
{
    return (size_t)n * (ir_op_info[op].slice == IR_SLICE_WHOLE ? 1 : (size_t)e->coll.ranks) * e->esize;
}

/* The buckets of G for this run, and each member's offset in its bucket's pieces (node
 * order). */
static void bucket_plan(CpuExec *e, const IrGraph *g)
{
    e->nbuckets = 0;
    e->coll_offset = xrealloc(e->coll_offset, (size_t)(g->nnodes ? g->nnodes : 1) * sizeof *e->coll_offset);
    for (int id = 0; id < g->nnodes; id++) {
        const IrNode *x = &g->nodes[id];
        if (!in_bucket(x)) continue;
        Bucket *b = bucket_at(e, x->index);
        if (b->first < 0) b->first = id, b->op = x->op;
        CGC_ASSERT(b->op == x->op);
        e->coll_offset[id] = b->n;
        b->n += piece_numel(e, g, id);
        if (x->in[0] > b->ready) b->ready = x->in[0];
    }
    for (int k = 0; k < e->nbuckets; k++) e->buckets[k].whole = e->buckets[k].ready < e->buckets[k].first;
}

/* After node ID of G: the buckets whose values are all computed are gathered and started. */
static int buckets_start(CpuExec *e, const IrGraph *g, int id)
{
    bool flying = false;
    for (int k = 0; k < e->nbuckets; k++) {
        Bucket *b = &e->buckets[k];
        flying |= b->started && !b->done;
        if (b->ready != id || b->started || !b->whole) continue;
        char *buf = buf_reserve(&b->buf, bucket_bytes(e, b->op, b->n));
        for (int m = 0; m < g->nnodes; m++) {
            const IrNode *x = &g->nodes[m];
            if (in_bucket(x) && x->index == k)
                pack(e, g, m, buf, b->n, e->coll_offset[m]);
        }
        if (e->coll.start(e->coll.ctx, k, b->op, buf, b->n, e->real) != 0) return -1;
        b->started = flying = true;
    }
    return flying ? e->coll.progress(e->coll.ctx) : 0;
}

/* Collective node ID's value into OUT: from its bucket, or, with one rank, what one rank
 * makes of its input. */
static int collective_value(CpuExec *e, const IrGraph *g, int id, void *out)
{
    const IrNode *x = &g->nodes[id];
    const Slot *in = &e->slots[x->in[0]];
    int64_t n = node_numel(e, x);
    if (!in_bucket(x) || !e->coll.start) {
        /* one rank: the program was compiled for one (training.c), where every slice is
         * the whole */
        CGC_ASSERT(slice_side(x) == IR_SLICE_WHOLE || e->coll.start);
        if (!in_bucket(x)) slice_of(e, out, in->val, in->n, n, e->coll.rank);
        else memcpy(out, in->val, (size_t)n * e->esize);
        return 0;
    }
    Bucket *b = &e->buckets[x->index];
    if (!b->whole) {   /* run alone, as a bucket of its own */
        int64_t s = piece_numel(e, g, id);
        char *buf = buf_reserve(&e->coll_alone, bucket_bytes(e, x->op, s));
        pack(e, g, id, buf, s, 0);
        if (e->coll.start(e->coll.ctx, x->index, x->op, buf, s, e->real) != 0 ||
            e->coll.wait(e->coll.ctx, x->index) != 0)
            return -1;
        unpack(e, g, id, buf, s, 0, out);
        return 0;
    }
    CGC_ASSERT(b->started);
    if (!b->done && e->coll.wait(e->coll.ctx, x->index) != 0) return -1;
    b->done = true;
    unpack(e, g, id, b->buf.p, b->n, e->coll_offset[id], out);
    return 0;
}

void cpu_exec_set_collectives(CpuExec *e, const CpuCollectives *c)
{
    e->coll = c ? *c : (CpuCollectives){0};
}

/* The elementwise spans are compiled twice on x86-64, and the loader picks the one the
 * processor runs: for x86-64-v3 (AVX2 and FMA: 8 floats a vector, fmaf one instruction)
 * and for the baseline. Both round alike: exec.c is compiled with -ffp-contract=off. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPAN_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define SPAN_CLONES
#endif

#define REAL float
#define SFX(name) name##_f32
#define MATH(fn) fn##f
#define KERNEL_ERF cgc_erff
#define KERNEL_EXP cgc_expf
#define GEMM blas.sgemm
#define GEMV blas.sgemv
#define ROUND(x, fmt) round_float((x), (fmt))
#include "exec_impl.h"

#define REAL double
#define SFX(name) name##_f64
#define MATH(fn) fn
#define KERNEL_ERF erf
#define KERNEL_EXP exp
#define GEMM blas.dgemm
#define GEMV blas.dgemv
#define ROUND(x, fmt) round_double((x), (fmt))
#include "exec_impl.h"

float cpu_gelu_tanh(float x) { return gelu_tanh_f32(x); }

/* ---- the public interface ---- */

CpuExec *cpu_exec_new(const IrProgram *p, CpuReal real)
{
    CpuExec *e = xcalloc(1, sizeof *e);
    e->p = p;
    e->real = real;
    e->esize = real == CPU_F64 ? sizeof(double) : sizeof(float);
    e->tensors = xcalloc((size_t)(p->ntensors ? p->ntensors : 1), sizeof *e->tensors);
    for (int i = 0; i < p->ntensors; i++) {
        int64_t n = ir_numel(&p->tensors[i].shape, NULL);
        CGC_ASSERT(n >= 0);
        e->tensors[i] = xcalloc((size_t)(n ? n : 1), e->esize);
    }
    return e;
}

void cpu_exec_free(CpuExec *e)
{
    if (!e) return;
    for (int i = 0; i < e->p->ntensors; i++) free(e->tensors[i]);
    free(e->tensors);
    for (int i = 0; i < e->nslots; i++) {
        buf_free(&e->slots[i].own);
        buf_free(&e->slots[i].conv);
    }
    free(e->slots);
    for (int i = 0; i < e->npool; i++) buf_free(&e->pool[i]);
    free(e->pool);
    free(e->last), free(e->next_dead), free(e->first_dead), free(e->in_place);
    for (int i = 0; i < 3; i++) buf_free(&e->scratch[i]);
    for (int i = 0; i < e->capbuckets; i++) buf_free(&e->buckets[i].buf);
    free(e->buckets);
    free(e->coll_offset);
    buf_free(&e->coll_alone);
    free(e);
}

/* The initial value of element EL of tensor I. */
static double init_value(const IrTensor *t, int i, uint64_t seed, int64_t el)
{
    switch (t->init) {
    case IR_INIT_ZEROS: return 0;
    case IR_INIT_ONES: return 1;
    case IR_INIT_CONST: return t->init_value;
    case IR_INIT_UNIFORM: {
        float u = rng_uniform(seed, RNG_INIT, ((uint64_t)i << 40) + (uint64_t)el);
        return (2.0 * u - 1.0) * t->init_value;
    }
    case IR_INIT_NORMAL:
        return rng_normal(seed, RNG_INIT, ((uint64_t)i << 40) + (uint64_t)el) * t->init_value;
    }
    CGC_INTERNAL("tensor %s has an unknown init %d", t->name, (int)t->init);
}

/* The initial value of element EL of tensor I, in double (F64) or in float: a copy's is
 * its parameter's as that type holds it, rounded to the copy's type, as the cast it
 * stands for would round it. */
static double init_element(const IrProgram *p, int i, uint64_t seed, int64_t el, bool f64)
{
    const IrTensor *t = &p->tensors[i];
    if (t->kind != IR_COPY) return f64 ? init_value(t, i, seed, el) : (float)init_value(t, i, seed, el);
    const HalfFormat *f = storage_format(t->dtype);
    double w = init_value(&p->tensors[t->param_of], t->param_of, seed, el);
    return f64 ? round_double(w, f) : round_float((float)w, f);
}

void cpu_tensor_init_values(const IrProgram *p, int i, uint64_t seed, float *out)
{
    CGC_ASSERT(i >= 0 && i < p->ntensors);
    int64_t n = ir_numel(&p->tensors[i].shape, NULL);
    for (int64_t el = 0; el < n; el++) out[el] = (float)init_element(p, i, seed, el, false);
}

void cpu_exec_init_tensors(CpuExec *e, uint64_t seed)
{
    for (int i = 0; i < e->p->ntensors; i++) {
        if (e->real == CPU_F32) {
            cpu_tensor_init_values(e->p, i, seed, e->tensors[i]);
            continue;
        }
        /* f64 (gradient checks) keeps the draws' double precision. */
        int64_t n = ir_numel(&e->p->tensors[i].shape, NULL);
        for (int64_t el = 0; el < n; el++) ((double *)e->tensors[i])[el] = init_element(e->p, i, seed, el, true);
    }
}

void cpu_copies_refresh(const IrProgram *p, float *const *tensors)
{
    for (int i = 0; i < p->ntensors; i++) {
        const IrTensor *t = &p->tensors[i];
        if (t->kind != IR_COPY) continue;
        const HalfFormat *f = storage_format(t->dtype);
        const float *w = tensors[t->param_of];
        int64_t n = ir_numel(&t->shape, NULL);
        for (int64_t el = 0; el < n; el++) tensors[i][el] = round_float(w[el], f);
    }
}

void *cpu_exec_tensor(CpuExec *e, int i)
{
    CGC_ASSERT(i >= 0 && i < e->p->ntensors);
    return e->tensors[i];
}

/* --profile: node ID of G ran from START until now. */
static void profile_node(const CpuExec *e, const IrGraph *g, int id, double start)
{
    profile_op(e->prof, g, id, e->symvals, start, clock_seconds());
}

/* Copies the value of ASSIGN node A into its tensor. */
static void apply_assign(CpuExec *e, const IrGraph *g, const IrNode *a)
{
    const Slot *s = &e->slots[a->in[0]];
    int64_t n = ir_numel(&e->p->tensors[a->index].shape, NULL);
    CGC_ASSERT(s->n == n && g->nodes[a->in[0]].dtype != DT_I32);
    if (s->val != e->tensors[a->index])
        memcpy(e->tensors[a->index], s->val, (size_t)n * e->esize);
}

/* Applies every ASSIGN of G. A value that aliases storage (a READ of some tensor) is
 * first copied into its own buffer, so that an earlier ASSIGN to that tensor cannot
 * change what a later one copies: all of them see the step's values. */
static void apply_assigns(CpuExec *e, const IrGraph *g)
{
    for (int id = 0; id < g->nnodes; id++) {
        if (!ir_node_is_assign(&g->nodes[id])) continue;
        Slot *s = &e->slots[g->nodes[id].in[0]];
        if (s->val == s->own.p || s->val == e->tensors[g->nodes[id].index]) continue;   /* in place */
        size_t bytes = (size_t)s->n * e->esize;
        memcpy(slot_reserve(e, &s->own, bytes), s->val, bytes);
        s->val = s->own.p;
    }
    for (int id = 0; id < g->nnodes; id++) {
        if (!ir_node_is_assign(&g->nodes[id])) continue;
        double start = e->prof ? clock_seconds() : 0;
        apply_assign(e, g, &g->nodes[id]);
        if (e->prof) profile_node(e, g, id, start);
    }
}

/* Whether node ID's value (just computed) holds a NaN or an infinity; if so, records the
 * first as the run's anomaly. Integer values (labels) have none. */
static bool anomalous(CpuExec *e, const IrGraph *g, int id)
{
    const Slot *s = &e->slots[id];
    const IrNode *n = &g->nodes[id];   /* a constant is as written; an ASSIGN, its value */
    if (n->dtype == DT_I32 || ir_op_info[n->op].attrs == IR_ATTRS_CONST_VALUE || ir_node_is_assign(n))
        return false;
    for (int64_t i = 0; i < s->n; i++) {
        double v = e->real == CPU_F64 ? ((const double *)s->val)[i] : ((const float *)s->val)[i];
        if (isfinite(v) || ir_nonfinite_by_design(&g->nodes[id], v)) continue;
        e->anomaly = (CpuAnomaly){ .node = id, .element = i, .value = v };
        return true;
    }
    return false;
}

/* When each node's storage dies, for a run with reuse: LAST[o], the last node of G that
 * reads storage O (through the same-dtype reshapes and UNFOLD twins that alias it,
 * SFX(place)), or G's node count for storage that outlives the run (an output, an
 * ASSIGN's value); the nodes whose storage dies after node i are the chain
 * FIRST_DEAD[i], NEXT_DEAD[...]. OWNER is scratch: the node that owns a node's storage,
 * -1 for a tensor's (READ). */
/* Whether node V reads tensor T's storage (ALIAS: per node, the tensor whose storage it
 * is) only element for element: a select (its span declares no restrict), each input
 * that is T of V's own shape, as the fp16 update's select of the new value or the old. */
static bool reads_in_step(const IrGraph *g, const int *alias, int v, int t)
{
    const IrNode *x = &g->nodes[v];
    if (ir_op_info[x->op].cls != IR_CLASS_TERNARY) return false;
    for (int k = 0; k < x->nin; k++)
        if (alias[x->in[k]] == t && !ir_shape_equal(&g->nodes[x->in[k]].shape, &x->shape)) return false;
    return true;
}

/* The value an ASSIGN copies into its tensor T is computed in T's storage instead, the
 * copy saved, where that cannot change what the graph reads: it is an elementwise node,
 * T is assigned once, and every other node reading T's old values (through a READ of T
 * or a view of one) runs before it; it reads them itself only element for element
 * (reads_in_step: the spans that declare restrict read elsewhere). Into E->in_place. */
static void in_place_plan(CpuExec *e, const IrGraph *g)
{
    int n = g->nnodes, nt = e->p->ntensors;
    int *alias = xmalloc((size_t)(n ? n : 1) * sizeof *alias);     /* per node: a tensor's storage */
    int *late = xmalloc((size_t)(nt ? nt : 1) * sizeof *late);      /* per tensor: its last reader */
    int *assigns = xcalloc((size_t)(nt ? nt : 1), sizeof *assigns);
    for (int t = 0; t < nt; t++) late[t] = -1;
    for (int i = 0; i < n; i++) {
        const IrNode *x = &g->nodes[i];
        bool view = ir_node_fuse(x) == IR_FUSE_VIEW && g->nodes[x->in[0]].dtype == x->dtype;
        alias[i] = ir_node_reads_tensor(x) >= 0 ? ir_node_reads_tensor(x) : view ? alias[x->in[0]] : -1;
        for (int k = 0; k < x->nin; k++)
            if (alias[x->in[k]] >= 0) late[alias[x->in[k]]] = i;
        if (ir_node_is_assign(x)) assigns[x->index]++;
    }
    e->in_place = xrealloc(e->in_place, (size_t)(n ? n : 1) * sizeof *e->in_place);
    for (int i = 0; i < n; i++) e->in_place[i] = -1;
    for (int i = 0; i < n; i++) {
        const IrNode *a = &g->nodes[i];
        if (!ir_node_is_assign(a)) continue;
        int v = a->in[0], t = a->index;
        bool before = late[t] < v || (late[t] == v && reads_in_step(g, alias, v, t));
        if (assigns[t] == 1 && ir_op_is_elementwise(g->nodes[v].op) && before) e->in_place[v] = t;
    }
    free(alias), free(late), free(assigns);
}

static void release_plan(CpuExec *e, const IrGraph *g)
{
    if (e->planned == g) return;   /* training runs the same few graphs, unchanged */
    e->planned = g;
    in_place_plan(e, g);
    int n = g->nnodes;
    int *owner = xmalloc((size_t)(n ? n : 1) * sizeof *owner);
    e->last = xrealloc(e->last, (size_t)(n ? n : 1) * sizeof *e->last);
    e->next_dead = xrealloc(e->next_dead, (size_t)(n ? n : 1) * sizeof *e->next_dead);
    e->first_dead = xrealloc(e->first_dead, (size_t)(n ? n : 1) * sizeof *e->first_dead);
    for (int i = 0; i < n; i++) {
        const IrNode *x = &g->nodes[i];
        bool alias = ir_node_fuse(x) == IR_FUSE_VIEW && g->nodes[x->in[0]].dtype == x->dtype;
        int twin = ir_unfold_twin(g, i);
        owner[i] = ir_node_reads_tensor(x) >= 0 ? -1 : alias ? owner[x->in[0]] : twin >= 0 ? owner[twin] : i;
        e->last[i] = i;
        e->first_dead[i] = -1;
        for (int k = 0; k < x->nin; k++) {
            int o = owner[x->in[k]];
            if (o >= 0 && e->last[o] < n) e->last[o] = ir_node_is_assign(x) ? n : i;
        }
    }
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++)
        if (g->output[r] >= 0 && owner[g->output[r]] >= 0) e->last[owner[g->output[r]]] = n;
    for (int o = 0; o < n; o++)
        if (owner[o] == o && e->last[o] < n) {
            e->next_dead[o] = e->first_dead[e->last[o]];
            e->first_dead[e->last[o]] = o;
        }
    free(owner);
}

/* Hands the storage that dies after node ID to the pool. */
static void release_dead(CpuExec *e, int id)
{
    for (int o = e->first_dead[id]; o >= 0; o = e->next_dead[o]) {
        pool_put(e, &e->slots[o].own);
        pool_put(e, &e->slots[o].conv);
        e->slots[o].val = NULL;
        e->slots[o].conv_run = 0;
    }
}

int cpu_exec_run(CpuExec *e, const IrGraph *g, const CpuFeed *feed)
{
    CGC_ASSERT(e->p->nsyms <= IR_MAX_SYMBOLS && e->p->ninputs <= IR_MAX_INPUTS);
    for (int k = 0; k < IR_MAX_SYMBOLS; k++) {
        e->symvals[k] = k < e->p->nsyms ? feed->symvals[k] : 0;
        CGC_ASSERT(e->symvals[k] >= 0);
    }
    e->graph = g;
    e->feed = feed;
    e->run++;
    slots_reserve(e, g->nnodes);
    e->anomaly = (CpuAnomaly){ .node = -1 };
    if (e->reuse) {   /* every node's storage is free again; the run takes what it needs */
        for (int i = 0; i < e->nslots; i++) {
            pool_put(e, &e->slots[i].own);
            pool_put(e, &e->slots[i].conv);
            e->slots[i].conv_run = 0;
        }
        release_plan(e, g);
    }
    if (e->coll.start) bucket_plan(e, g);
    int rc = 0;
    for (int id = 0; id < g->nnodes && rc == 0; id++) {
        double start = e->prof ? clock_seconds() : 0;
        rc = e->real == CPU_F64 ? exec_node_f64(e, g, id) : exec_node_f32(e, g, id);
        if (rc == 0 && e->coll.start) rc = buckets_start(e, g, id);
        /* an ASSIGN's work is its copy, timed in apply_assigns */
        if (e->prof && !ir_node_is_assign(&g->nodes[id])) profile_node(e, g, id, start);
        if (rc == 0 && e->detect_anomaly && anomalous(e, g, id)) rc = -1;
        if (e->reuse) release_dead(e, id);
    }
    if (rc == 0) apply_assigns(e, g);
    e->feed = NULL;
    return rc;
}

const void *cpu_exec_value(CpuExec *e, int id, int64_t *numel)
{
    CGC_ASSERT(e->graph && id >= 0 && id < e->graph->nnodes);
    if (numel) *numel = e->slots[id].n;
    return e->slots[id].val;
}

double cpu_exec_scalar(CpuExec *e, int id)
{
    int64_t n;
    const void *v = cpu_exec_value(e, id, &n);
    CGC_ASSERT(n >= 1);
    if (e->graph->nodes[id].dtype == DT_I32) return *(const int32_t *)v;
    return e->real == CPU_F64 ? *(const double *)v : *(const float *)v;
}

double cpu_exec_gemm_seconds(const CpuExec *e) { return e->gemm_seconds; }

void cpu_exec_set_profile(CpuExec *e, Profile *prof) { e->prof = prof; }

void cpu_exec_set_detect_anomaly(CpuExec *e, bool on) { e->detect_anomaly = on; }

void cpu_exec_set_reuse(CpuExec *e, bool on) { e->reuse = on; }

const CpuAnomaly *cpu_exec_anomaly(const CpuExec *e)
{
    return e->anomaly.node >= 0 ? &e->anomaly : NULL;
}
