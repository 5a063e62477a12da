/* train_device.c: the training loop's device backend (see train_internal.h).
 *
 * The dataset goes to the device once; after that a step needs nothing from the host:
 * the epoch's order is made by the plan's data kernels (cgc_order_draws, then
 * cgc_order_shuffle: data_order()'s exact sequence), each micro-batch is gathered from
 * it into the input buffers, and its loss, the skipped flag and the first non-finite
 * loss are added up on the device (cgc_track_loss) in four doubles:
 *     totals = {loss sum, micro-batches, skipped steps, first non-finite step or -1}.
 * The host reads them back only when it prints them, asynchronously for the progress
 * bar (a fence it polls) and waiting at the end of an epoch, which is also where a
 * non-finite loss is reported, with the step the device recorded.
 *
 * A data set the device cannot hold (TrainConfig.stream) stays on the host instead: the
 * order is made there, the rows are read ahead on a host thread into pinned memory and
 * copied on the device's copy stream while the step before runs ("a data set that streams
 * from the host" below); such a run is not captured as graphs.
 *
 * In a reduce-overhead plan the step counter lives on the device too (plan.h: the
 * gathers' first row, the micro-step dropout reads, the step track_loss records), moved
 * by cgc_step_advance after each micro-batch; the host writes it only where the
 * sequence jumps (an epoch's start, a resumed run). So a micro-batch's work reads no
 * host value (a rank's share of a full batch, and its first row in it, are the same in
 * every full batch), and is captured once as a CUDA graph per train graph and replayed,
 * the sums over the ranks in it
 * (train_capture_refusal says when not: a partial batch, the first run, a failed
 * capture). A capture that fails is said once, and the run goes on uncaptured: the same
 * kernels, launched one by one, as the default mode runs them.
 *
 * A max-autotune plan is run as a reduce-overhead one, after dev_autotune has put its
 * choices in force: read from the choices file in the cache, or timed now (autotune.h)
 * before the tensors are initialised, and written there.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../codegen/perf.h"
#include "autotune.h"
#include "devexec.h"
#include "train_internal.h"

enum { TOTALS = 4, MAX_DATA_GRID = 4096 };

/* max-autotune: the most wall time tuning may take, in seconds, unless RunOptions says;
 * the steps left then keep the plan's choices (autotune.h). */
#define AUTOTUNE_BUDGET_S 60.0

/* -v: optimizer steps timed with fences (CUDA events) around them, after a warm-up. */
enum { TIMING_WARMUP = TRAIN_TIMING_WARMUP, TIMING_STEPS = TRAIN_TIMING_STEPS };

/* One launch or GEMM of a step timed launch by launch. */
typedef struct LaunchTime {
    int gid, step;              /* the plan step */
    double seconds;
} LaunchTime;

typedef struct StepTiming {
    DeviceFence *start[TIMING_STEPS], *end[TIMING_STEPS];
    int n;                      /* steps timed so far */
    int64_t seen;               /* steps run in this process */
    bool open;                  /* a step's start is recorded, its end not yet */
    /* The step before the timed ones, launch by launch, for the performance model's report */
    bool launches_open;
    int64_t rows;               /* its micro-batches' rows */
    LaunchTime *launches;
    int nlaunches;
} StepTiming;

/* A train graph's micro-batch as a CUDA graph (reduce-overhead). */
typedef struct StepCapture {
    DeviceGraph *graph;         /* NULL until captured */
    int nodes;                  /* its nodes (DeviceOps.capture_end) */
    int64_t runs;               /* full micro-batches of this graph run so far */
} StepCapture;

/* One split of the dataset in device memory. */
typedef struct DeviceSplit {
    DevPtr x, y;                /* n * x_row f32 (i32 tokens); n * y_row i32 or f32 (0: none);
                                 * a text: its bytes as i32 in x, its labels read from x */
} DeviceSplit;

typedef struct Stream Stream;

typedef struct DeviceBackend {
    Device *d;
    Plan *own_plan;             /* built here when RunOptions gave none */
    const Plan *plan;
    DevExec *e;
    DeviceSplit train, test;
    Stream *stream;             /* the data stays on the host (NULL: on the device, above) */
    DevPtr draws, order;        /* int32: n - 1 swap draws, the epoch's order */
    int64_t phase;              /* where the epoch's text windows start (data_phase) */
    DevPtr totals, eval_totals; /* double[TOTALS], double[2] */
    double *host_totals;        /* host_alloc'd target of the asynchronous reads */
    DeviceFence *fence;
    bool pending;               /* a read of the totals is in flight, fence recorded */
    StepTiming *timing;         /* -v only */
    DevPtr step;                /* the plan's step counter (reduce-overhead), or 0 */
    int64_t step_next[2];       /* what it will hold once the queued work has run
                                 * ({-1, -1} until first written) */
    StepCapture capture[2];     /* train, train_micro */
    bool capture_failed;
    int64_t symmax[IR_MAX_SYMBOLS];     /* the arena's: the largest batch */
    float *values;              /* --detect-anomaly: one node's values, read back */
} DeviceBackend;

/* A data kernel's parameter value; every parameter is 8 bytes. */
typedef union KArg {
    DevPtr p;
    int64_t i;
    uint64_t u;
} KArg;

static DeviceBackend *backend(const Trainer *t) { return t->backend; }

/* ---- step timing (-v) ---- */

/* Records the start (BEGIN) or end of an optimizer step when it is one of those timed. */
static int time_step(DeviceBackend *dev, bool begin)
{
    StepTiming *st = dev->timing;
    if (!st) return 0;
    if (begin) {
        if (st->seen < TIMING_WARMUP || st->n >= TIMING_STEPS) return 0;
        if (!st->start[st->n] && (dev->d->ops->fence_new(dev->d, &st->start[st->n]) != 0 ||
                                  dev->d->ops->fence_new(dev->d, &st->end[st->n]) != 0))
            return -1;
        st->open = true;
        return dev->d->ops->fence_record(dev->d, st->start[st->n]);
    }
    st->seen++;
    if (!st->open) return 0;
    st->open = false;
    return dev->d->ops->fence_record(dev->d, st->end[st->n++]);
}

/* Starts timing the launches of the step about to run, when it is the last of the
 * warm-up (and no --profile times it already). */
static int launches_begin(const Trainer *t, DeviceBackend *dev, int64_t rows)
{
    StepTiming *st = dev->timing;
    if (!st || st->seen != TIMING_WARMUP - 1 || st->nlaunches || t->recording) return 0;
    st->launches_open = true;
    st->rows = rows;
    return devexec_timing_start(dev->e);
}

static void launch_timed(void *ctx, const DevTimedEvent *ev, double start, double end)
{
    StepTiming *st = ctx;
    if (ev->step < 0) return;   /* the data pipeline's: not the plan's steps */
    st->launches = xrealloc(st->launches, (size_t)(st->nlaunches + 1) * sizeof *st->launches);
    st->launches[st->nlaunches++] = (LaunchTime){ev->gid, ev->step, end - start};
}

static int launches_end(DeviceBackend *dev)
{
    StepTiming *st = dev->timing;
    if (!st || !st->launches_open) return 0;
    st->launches_open = false;
    return devexec_timing_collect(dev->e, launch_timed, st);
}

/* The timed launch with the longest time not yet TAKEN, or -1. */
static int slowest(const StepTiming *st, const bool *taken)
{
    int best = -1;
    for (int i = 0; i < st->nlaunches; i++)
        if (!taken[i] && (best < 0 || st->launches[i].seconds > st->launches[best].seconds)) best = i;
    return best;
}

enum { REPORT_LAUNCHES = 10 };
/* The launches held to the roofline: those that move more than BIG_BYTES, at GOAL of it. */
static const double BIG_BYTES = 1e6, GOAL = 0.7;

static void print_launch(const DeviceBackend *dev, const LaunchTime *l, double predicted, PerfBound bound)
{
    const PlanStep *s = &dev->plan->graph[l->gid].steps[l->step];
    printf("cgc:   %9.1f us measured %9.1f us predicted %4.0f%%  %-8s %s (line %d)\n", l->seconds * 1e6,
           predicted * 1e6, l->seconds > 0 ? 100 * predicted / l->seconds : 0, perf_bound_name(bound),
           s->what ? s->what : "?", s->loc.line);
}

/* -v: the timed step's launches against the performance model (codegen/perf.h) on the
 * device's part: each one's efficiency, the predicted time over the measured, for the
 * costliest and for every one that moves much and falls short of the goal; and how many
 * of those that move much reach it. */
static void report_launches(const Trainer *t, DeviceBackend *dev)
{
    StepTiming *st = dev->timing;
    const PerfPart *part = perf_part_named(dev->d->model);
    int64_t symvals[IR_MAX_SYMBOLS];
    memcpy(symvals, dev->symmax, sizeof symvals);
    symvals[0] = st->rows;
    size_t n = (size_t)st->nlaunches + 1;
    double *predicted = xcalloc(n, sizeof *predicted), measured = 0, model = 0;
    PerfBound *bound = xcalloc(n, sizeof *bound);
    bool *short_of_goal = xcalloc(n, sizeof *short_of_goal), *taken = xcalloc(n, sizeof *taken);
    int big = 0, held = 0;
    for (int i = 0; i < st->nlaunches; i++) {
        const LaunchTime *l = &st->launches[i];
        PerfStep p = perf_step(dev->plan, (PlanGraphId)l->gid, l->step, symvals, part ? part : &perf_parts[perf_nparts - 1]);
        predicted[i] = p.seconds, bound[i] = p.bound;
        measured += l->seconds, model += p.seconds;
        if (p.read + p.written <= BIG_BYTES) continue;
        big++;
        short_of_goal[i] = p.seconds < GOAL * l->seconds;
        held += short_of_goal[i];
    }
    printf("cgc: step %d launch by launch against the performance model (%s%s): %.3f ms measured, "
           "%.3f predicted (%.0f%%)\n", TIMING_WARMUP, part ? part->name : perf_parts[perf_nparts - 1].name,
           part ? "" : ", a part the model knows no figures for: as if", measured * 1e3, model * 1e3,
           measured > 0 ? 100 * model / measured : 0);
    for (int r = 0; r < st->nlaunches; r++) {
        int i = slowest(st, taken);
        taken[i] = true;
        if (r < REPORT_LAUNCHES || short_of_goal[i]) print_launch(dev, &st->launches[i], predicted[i], bound[i]);
    }
    printf("cgc:   of the %d launches that move over %.0f MB, %d reach under %.0f%% of the roofline\n", big,
           BIG_BYTES / 1e6, held, 100 * GOAL);
    free(taken), free(predicted), free(bound), free(short_of_goal);
}

static int compare_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The median, p10 and p90 of the timed steps (waits for them). Returns 0 or -1. */
static int step_times(DeviceBackend *dev, StepTimes *out)
{
    StepTiming *st = dev->timing;
    float ms[TIMING_STEPS];
    bool done;
    *out = (StepTimes){0};
    for (int i = 0; i < st->n; i++)
        if (dev->d->ops->fence_done(dev->d, st->end[i], true, &done) != 0 ||
            dev->d->ops->fence_elapsed_ms(dev->d, st->start[i], st->end[i], &ms[i]) != 0)
            return -1;
    if (st->n == 0) return 0;
    qsort(ms, (size_t)st->n, sizeof ms[0], compare_float);
    *out = (StepTimes){.n = st->n, .median_ms = ms[st->n / 2], .p10_ms = ms[st->n / 10],
                       .p90_ms = ms[st->n * 9 / 10]};
    if (dev->e) out->launches = devexec_launches(dev->e, PG_TRAIN, &out->gemms);
    return 0;
}

/* Gives the step times to RunOptions.step_times, and prints them with -v. */
static void report_timing(const Trainer *t, DeviceBackend *dev)
{
    StepTimes times;
    if (step_times(dev, &times) != 0) return;
    if (t->o->step_times) *t->o->step_times = times;
    if (!t->o->verbose || t->o->quiet) return;
    if (times.n == 0)
        printf("cgc: step time not measured: the run took fewer than %d steps of warm-up\n",
               TIMING_WARMUP + 1);
    else
        printf("cgc: median step %.4f ms (p10 %.4f, p90 %.4f; device time between events around "
               "%d steps after %d of warm-up)\n", times.median_ms, times.p10_ms, times.p90_ms,
               times.n, TIMING_WARMUP);
    if (times.n > 0)
        printf("cgc: %d launches per step as run, of which %d GEMMs (with the choices in force)\n",
               times.launches, times.gemms);
    if (dev->timing->nlaunches) report_launches(t, dev);
}

/* Prints (-v) the device memory the plan's arena takes and the memory in use as the
 * driver sees it: free once the device was open (module, cuBLAS and cuBLASLt's workspace
 * loaded) minus free now, so it counts the dataset and the allocator's rounding beside the
 * arena; the benchmark sets the two against each other. Called while everything is still
 * allocated. */
static void report_memory(const Trainer *t, DeviceBackend *dev)
{
    size_t free_now = 0, arena = devexec_arena_bytes(dev->e);
    if (t->o->quiet) return;
    printf("cgc: device memory: plan arena %zu bytes (%.1f MiB), ", arena, arena / 1048576.0);
    if (!dev->d->free_bytes || !dev->d->ops->mem_free || dev->d->ops->mem_free(dev->d, &free_now) != 0 ||
        free_now > dev->d->free_bytes) {
        printf("in use not known on %s\n", dev->d->name);
        return;
    }
    size_t used = dev->d->free_bytes - free_now;
    printf("in use %zu bytes (%.1f MiB; the driver's free memory at open minus now)\n", used,
           used / 1048576.0);
}

/* -v: how the training step's convolutions ran (by the library, by implicit GEMMs, or as
 * the plan's steps), and how many of the evaluation's products follow
 * training's implicit GEMMs. */
static void report_convs(const Trainer *t, DeviceBackend *dev)
{
    const Plan *plan = dev->plan;
    int runs = 0, can = 0, by_library = 0, implicit = 0, followers = 0, following = 0;
    for (int r = 0; r < plan->nwindows; r++) {
        bool on = devexec_window_tile(dev->e, r, 0) >= 0;
        if (plan->windows[r].follows >= 0) followers++, following += on;
        if (plan->windows[r].graph != PG_TRAIN) continue;
        runs++;
        can += plan->windows[r].conv;
        by_library += devexec_window_conv_algo(dev->e, r, 0) >= 0;
        implicit += on;
    }
    if (t->o->quiet || runs == 0) return;
    printf("cgc: convolutions of the training step: %d by cuDNN%s, %d by implicit GEMMs, %d by the plan's "
           "steps", by_library, can && !devexec_has_conv(dev->e) ? " (not loaded: libcudnn.so.9 not found, or "
           "$CGC_CUDNN)" : "", implicit, runs - by_library - implicit);
    if (followers) printf("; %d of the evaluation's %d by implicit GEMMs, as training", following,
                          followers);
    printf("\n");
}

/* ---- memory ---- */

static int alloc_upload(DeviceBackend *dev, const void *src, size_t bytes, DevPtr *out,
                        const char *what)
{
    if (dev->d->ops->alloc(dev->d, bytes ? bytes : 4, out) != 0) {
        *out = 0;
        cgc_error("cannot allocate %zu bytes on %s for %s; try a smaller dataset or another "
                  "device", bytes, dev->d->name, what);
        return -1;
    }
    return src && bytes ? dev->d->ops->upload(dev->d, *out, src, bytes) : 0;
}

/* A text's bytes as i32 tokens, converted a chunk at a time: no host copy of it whole. */
static int upload_text(DeviceBackend *dev, const Dataset *s, DeviceSplit *out, const char *what)
{
    enum { CHUNK = 1 << 20 };
    if (alloc_upload(dev, NULL, (size_t)s->text_bytes * sizeof(int32_t), &out->x, what) != 0) return -1;
    int32_t *buf = xmalloc(CHUNK * sizeof *buf);
    int rc = 0;
    for (int64_t at = 0; at < s->text_bytes && rc == 0; at += CHUNK) {
        int64_t n = s->text_bytes - at < CHUNK ? s->text_bytes - at : CHUNK;
        for (int64_t i = 0; i < n; i++) buf[i] = s->text[at + i];
        rc = dev->d->ops->upload(dev->d, out->x + (DevPtr)at * sizeof(int32_t), buf, (size_t)n * sizeof *buf);
    }
    free(buf);
    return rc;
}

/* Rows left in their files, converted a chunk of rows at a time: no host copy of them whole. */
static int upload_rows(DeviceBackend *dev, const Dataset *s, DeviceSplit *out, const char *what)
{
    enum { CHUNK_ROWS = 1024 };   /* rows a chunk: a few MB of host buffer */
    size_t x_row = (size_t)s->x_row * sizeof(float), y_row = (size_t)s->y_row * sizeof(float);   /* i32: as many */
    if (alloc_upload(dev, NULL, (size_t)s->n * x_row, &out->x, what) != 0 ||
        (s->y_row && alloc_upload(dev, NULL, (size_t)s->n * y_row, &out->y, what) != 0))
        return -1;
    void *x = xmalloc(CHUNK_ROWS * x_row), *y = xmalloc(CHUNK_ROWS * y_row + 1);
    int rc = 0;
    for (int64_t at = 0; at < s->n && rc == 0; at += CHUNK_ROWS) {
        int64_t n = s->n - at < CHUNK_ROWS ? s->n - at : CHUNK_ROWS;
        data_gather(s, NULL, at, n, 0, x, s->y_row ? y : NULL);
        rc = dev->d->ops->upload(dev->d, out->x + (DevPtr)at * x_row, x, (size_t)n * x_row);
        if (rc == 0 && s->y_row) rc = dev->d->ops->upload(dev->d, out->y + (DevPtr)at * y_row, y, (size_t)n * y_row);
    }
    free(x), free(y);
    return rc;
}

static int upload_split(DeviceBackend *dev, const Dataset *s, DeviceSplit *out, const char *what)
{
    if (s->text) return upload_text(dev, s, out, what);
    if (s->x_file) return upload_rows(dev, s, out, what);
    size_t x_bytes = (size_t)(s->n * s->x_row) * sizeof(float);   /* int32 tokens: as many */
    size_t y_bytes = (size_t)(s->n * s->y_row) * (s->y_int ? sizeof(int32_t) : sizeof(float));
    const void *x = s->x_int ? (const void *)s->x_i32 : (const void *)s->x;
    const void *y = s->y_int ? (const void *)s->y_i32 : (const void *)s->y_f32;
    if (alloc_upload(dev, x, x_bytes, &out->x, what) != 0) return -1;
    return s->y_row ? alloc_upload(dev, y, y_bytes, &out->y, what) : 0;
}

static void free_ptr(DeviceBackend *dev, DevPtr p)
{
    if (p) dev->d->ops->free(dev->d, p);
}

/* ---- the plan's buffers the data kernels read and write ---- */

static DevPtr node_buffer(const DeviceBackend *dev, const IrGraph *g, IrOutputRole role)
{
    if (g->output[role] < 0) return 0;
    const PlanGraph *pg = plan_graph_of(dev->plan, g);
    CGC_ASSERT(pg);
    int buf = pg->node_buffer[g->output[role]];
    CGC_ASSERT(buf >= 0 && dev->plan->buffers[buf].dtype == DT_F32);
    return devexec_buffer(dev->e, buf);
}

/* Input I's buffer, which the gathers write in the dataset's own type. */
static DevPtr input_buffer(const DeviceBackend *dev, int i)
{
    int buf = dev->plan->input_buffer[i];
    DType t = dev->plan->buffers[buf].dtype;
    if (t != DT_F32 && t != DT_I32)
        CGC_INTERNAL("input %d's buffer is %s; the gather kernels write f32 or i32", i, ir_dtype_name(t));
    return devexec_buffer(dev->e, buf);
}

/* ---- data kernels ---- */

static int launch(const Trainer *t, PlanDataKernel which, int64_t work, KArg *a, int n,
                  const char *what)
{
    DeviceBackend *dev = backend(t);
    int k = dev->plan->data_kernel[which];
    void *args[PLAN_DATA_KERNEL_MAX_PARAMS];
    CGC_ASSERT(n <= PLAN_DATA_KERNEL_MAX_PARAMS && k >= 0 && k < dev->plan->nkernels && dev->plan->kernels[k].nparams == n);
    for (int i = 0; i < n; i++) args[i] = &a[i];
    /* Kernels loop over their work (plan.h), so any grid is correct; WORK 0 means a kernel
     * that must run as one block. */
    int64_t block = dev->plan->kernels[k].block > 0 ? dev->plan->kernels[k].block : 1;
    int64_t grid = (work + block - 1) / block;
    grid = grid < 1 ? 1 : grid > MAX_DATA_GRID ? MAX_DATA_GRID : grid;
    return devexec_launch(dev->e, k, (unsigned)grid, args, what);
}

/* Rows [start, start + count) of split S (in ORDER, or file order when 0) into the
 * input buffers, a text's windows from PHASE; START is read from the step counter STATE
 * instead when it is not 0. */
static int gather(const Trainer *t, const Dataset *d, const DeviceSplit *s, DevPtr order,
                  int64_t start, int64_t count, DevPtr state, int64_t phase)
{
    DeviceBackend *dev = backend(t);
    bool text = d->text != NULL;
    KArg x[9] = {{.p = input_buffer(dev, 0)}, {.p = s->x}, {.p = order}, {.i = start}, {.i = count},
                 {.i = d->x_row}, {.p = state}, {.i = text ? d->window : d->x_row}, {.i = phase}};
    if (launch(t, d->x_int ? PDK_GATHER_I32 : PDK_GATHER_F32, count * d->x_row, x, 9,
               "gather the features") != 0)
        return -1;
    if (!d->y_row) return 0;
    KArg y[9] = {{.p = input_buffer(dev, 1)}, {.p = text ? s->x : s->y}, {.p = order}, {.i = start},
                 {.i = count}, {.i = d->y_row}, {.p = state}, {.i = text ? d->window : d->y_row},
                 {.i = text ? phase + 1 : 0}};
    return launch(t, d->y_int ? PDK_GATHER_I32 : PDK_GATHER_F32, count * d->y_row, y, 9,
                  "gather the labels");
}

/* ---- a data set that streams from the host ----
 *
 * Micro-batch J's rows, read on a host thread into pinned memory (prefetch.h), are copied
 * on the device's copy stream into staging slot J % 2 while the step before runs; J's
 * gather waits for that copy and reads the slot, and the copy of J + 2 waits for that
 * gather. The host gives J's pinned rows back once their copy has landed. */

struct Stream {
    Prefetch *pf;
    int64_t *order;             /* the epoch's order, made on the host */
    int64_t rows;               /* a slot's rows: a rank's micro-batch or an evaluation batch */
    DevPtr slot[2];             /* staging, laid out as a PrefetchSlot */
    DeviceFence *copied[2], *gathered[2];
    bool gathered_yet[2];       /* gathered[k] recorded once */
    void *eval;                 /* an evaluation batch's rows on the host, likewise */
};

/* The bytes split S would take on the device. */
static uint64_t split_bytes(const Dataset *s)
{
    if (s->text) return (uint64_t)s->text_bytes * sizeof(int32_t);
    return (uint64_t)s->n * (uint64_t)(s->x_row + s->y_row) * sizeof(float);
}

/* Whether the data set streams (TrainConfig.stream), said unless quiet; -1 after an error. */
static int stream_decision(const Trainer *t, DeviceBackend *dev)
{
    StreamMode mode = t->p->cfg.stream;
    uint64_t bytes = split_bytes(&t->data.train) + (t->data.has_test ? split_bytes(&t->data.test) : 0);
    size_t left = 0;
    bool known = dev->d->ops->mem_free && dev->d->ops->mem_free(dev->d, &left) == 0;
    bool streams = mode == STREAM_ALWAYS || (mode == STREAM_AUTO && known && bytes > left / 10 * 9);
    if (!streams) return 0;
    if (!dev->d->ops->upload_async) {
        cgc_error("%s cannot copy beside its kernels, so the data set cannot stream to it; use "
                  "stream = never, or train on the CPU", dev->d->name);
        return -1;
    }
    if (t->o->quiet) return 1;
    if (mode == STREAM_ALWAYS) printf("cgc: stream = always: ");
    else printf("cgc: the data set's %.1f MB would take more than 90%% of the %.1f MB left on %s: ",
                bytes / 1e6, left / 1e6, dev->d->name);
    printf("its rows stream from the host, %lld micro-batches read ahead\n",
           (long long)t->p->cfg.prefetch);
    return 1;
}

static void *pinned_alloc(void *ctx, size_t bytes) { return ((Device *)ctx)->ops->host_alloc(ctx, bytes); }
static void pinned_free(void *ctx, void *p) { ((Device *)ctx)->ops->host_free(ctx, p); }

static int stream_open(Trainer *t, DeviceBackend *dev)
{
    const Dataset *d = &t->data.train;
    Stream *s = dev->stream = xcalloc(1, sizeof *s);
    int64_t eval_rows = !t->data.has_test ? 0 : t->data.test.n < EVAL_BATCH ? t->data.test.n : EVAL_BATCH;
    s->rows = t->p->cfg.batch > eval_rows ? t->p->cfg.batch : eval_rows;
    size_t bytes = prefetch_y_at(d, s->rows) + (size_t)(s->rows * d->y_row) * sizeof(float);
    PrefetchAlloc pinned = {pinned_alloc, pinned_free, dev->d};
    t->prefetch = s->pf = prefetch_new(d, (int)t->p->cfg.prefetch, s->rows, &pinned);
    if (!s->pf) return -1;
    s->order = xmalloc((size_t)(d->n ? d->n : 1) * sizeof *s->order);
    s->eval = xmalloc(bytes);
    for (int k = 0; k < 2; k++)
        if (alloc_upload(dev, NULL, bytes, &s->slot[k], "a micro-batch copied from the host") != 0 ||
            dev->d->ops->fence_new(dev->d, &s->copied[k]) != 0 ||
            dev->d->ops->fence_new(dev->d, &s->gathered[k]) != 0)
            return -1;
    return 0;
}

static void stream_close(DeviceBackend *dev)
{
    Stream *s = dev->stream;
    if (!s) return;
    prefetch_free(s->pf);
    for (int k = 0; k < 2; k++) {
        free_ptr(dev, s->slot[k]);
        if (s->copied[k]) dev->d->ops->fence_free(dev->d, s->copied[k]);
        if (s->gathered[k]) dev->d->ops->fence_free(dev->d, s->gathered[k]);
    }
    free(s->order);
    free(s->eval);
    free(s);
}

static void stream_epoch(Trainer *t, Stream *s, const TrainProgress *pr)
{
    const TrainConfig *c = &t->p->cfg;
    const Dataset *d = &t->data.train;
    prefetch_stop(s->pf);
    data_order(c->seed, pr->epoch, c->shuffle, d->n, s->order);
    prefetch_epoch(s->pf, s->order, data_phase(d, c->seed, pr->epoch), c->batch, pr->batch_in_epoch,
                   t->steps_per_epoch * c->accumulate, t->rank, t->ranks);
}

/* ROWS rows of D as a slot of S holds them: features, then labels at prefetch_y_at. */
static void slot_view(const Stream *s, const Dataset *d, int k, Dataset *rows, DeviceSplit *at)
{
    *rows = (Dataset){.x_row = d->x_row, .x_int = d->x_int, .y_row = d->y_row, .y_int = d->y_int};
    *at = (DeviceSplit){.x = s->slot[k], .y = s->slot[k] + prefetch_y_at(d, s->rows)};
}

static size_t slot_bytes(const Stream *s, const Dataset *d, int64_t rows)
{
    return prefetch_y_at(d, s->rows) + (size_t)(rows * d->y_row) * sizeof(float);
}

/* Micro-batch MICRO's rows into the input buffers, from the host. */
static int stream_gather(const Trainer *t, DeviceBackend *dev, int64_t micro)
{
    Stream *s = dev->stream;
    const DeviceOps *ops = dev->d->ops;
    const Dataset *d = &t->data.train;
    int k = (int)(micro % 2);
    PrefetchSlot *h = prefetch_take(s->pf, micro);
    Dataset rows;
    DeviceSplit at;
    slot_view(s, d, k, &rows, &at);
    bool landed;
    int rc = ops->upload_async(dev->d, s->slot[k], h->x, slot_bytes(s, d, h->rows),
                               s->gathered_yet[k] ? s->gathered[k] : NULL, s->copied[k]);
    if (rc == 0) rc = ops->fence_wait(dev->d, s->copied[k]);
    if (rc == 0) rc = gather(t, &rows, &at, 0, 0, h->rows, 0, 0);
    if (rc == 0) rc = ops->fence_record(dev->d, s->gathered[k]);
    s->gathered_yet[k] = rc == 0;
    if (rc == 0) rc = ops->fence_done(dev->d, s->copied[k], true, &landed);
    prefetch_give(s->pf, h);
    return rc;
}

/* Rows [START, START + COUNT) of the test split into the input buffers, from the host. */
static int stream_eval_gather(const Trainer *t, DeviceBackend *dev, int64_t start, int64_t count)
{
    Stream *s = dev->stream;
    const Dataset *d = &t->data.test;
    Dataset rows;
    DeviceSplit at;
    slot_view(s, d, 0, &rows, &at);
    data_gather(d, NULL, start, count, 0, s->eval, d->y_row ? (char *)s->eval + prefetch_y_at(d, s->rows) : NULL);
    if (dev->d->ops->upload(dev->d, s->slot[0], s->eval, slot_bytes(s, d, count)) != 0) return -1;
    return gather(t, &rows, &at, 0, 0, count, 0, 0);
}

/* The first non-finite element of node ID's values after a run, into *A; false if none. */
static bool not_finite(DeviceBackend *dev, const IrGraph *g, int id, CpuAnomaly *a)
{
    int64_t n = ir_numel(&g->nodes[id].shape, dev->symmax);
    dev->values = xrealloc(dev->values, (size_t)(n > 0 ? n : 1) * sizeof *dev->values);
    if (devexec_value(dev->e, g, id, dev->values, &n) != 0) return false;
    for (int64_t k = 0; k < n; k++) {
        if (isfinite(dev->values[k]) || ir_nonfinite_by_design(&g->nodes[id], dev->values[k])) continue;
        *a = (CpuAnomaly){ .node = id, .element = k, .value = dev->values[k] };
        return true;
    }
    return false;
}

/* --detect-anomaly: the first value G's run stored, in the graph's order, that is not
 * finite. In eager mode every op's value is stored; where kernels are fused, the values
 * inside one are not, and the op named is the first stored one, which may be the end of
 * the chain whose earlier op made it. The run's updates have happened (on the CPU they
 * stop before them), so the values that are views of tensors are left out: they show the
 * tensors as updated (the update's own values, checked, come later in the graph); so are
 * those that max-autotune's implicit GEMMs never write. Returns 0, or -1 after the
 * report. */
static int check_values(const Trainer *t, const IrGraph *g, int64_t micro_step)
{
    DeviceBackend *dev = backend(t);
    const PlanGraph *pg = plan_graph_of(dev->plan, g);
    PlanGraphId gid = (PlanGraphId)(pg - dev->plan->graph);
    CpuAnomaly a;
    for (int id = 0; id < g->nnodes; id++) {
        int buf = pg->node_buffer[id];
        if (buf < 0 || dev->plan->buffers[plan_buffer_root(dev->plan, buf)].kind == PB_TENSOR ||
            devexec_unwritten(dev->e, gid, buf))
            continue;
        if (!not_finite(dev, g, id, &a)) continue;
        return train_report_anomaly(t, g, &a, micro_step, dev->plan->mode == PLAN_EAGER
                                    ? "values that were all finite"
                                    : "the finite values stored before it (a fused kernel "
                                      "stores none of its own: an op earlier in it may have "
                                      "made the value)");
    }
    return 0;
}

/* A micro-batch of COUNT rows from START, of which this rank takes ROWS from FIRST, and
 * its number in the run (the counter dropout masks are keyed by). */
typedef struct MicroBatch {
    int64_t start, count, first, rows, micro_step;
} MicroBatch;

/* Runs G on this rank's rows of micro-batch M. */
static int run_graph(const Trainer *t, const IrGraph *g, const MicroBatch *m)
{
    DevFeed feed;
    memset(&feed, 0, sizeof feed);
    feed.symvals[0] = m->rows;
    feed.runtime[IR_RT_TOTAL_STEPS] = (double)t->total_steps;
    feed.runtime[IR_RT_MICRO_STEP] = (double)m->micro_step;
    feed.runtime[IR_RT_RANK_SHARE] = (double)m->rows / (double)m->count;
    feed.rank_row = m->first - m->start;
    feed.rank = t->rank;
    if (devexec_run(backend(t)->e, g, &feed) != 0) return -1;
    return t->o->detect_anomaly ? check_values(t, g, m->micro_step) : 0;
}

/* ---- the backend ---- */

/* One line of max-autotune's report ("cgc: autotune: ..."), unless quiet. */
static void say_autotune(const Trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say_autotune(const Trainer *t, const char *fmt, ...)
{
    if (t->o->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cgc: autotune: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* max-autotune: the choices of the file in the cache when it was made for this plan
 * and batch on this device, else tuned now and kept there. With --tune-file FILE, FILE
 * takes the cache's place, but as a lockfile: one that is there and cannot be used is an
 * error, never tuned again and replaced. Runs before the tensors are initialised
 * (autotune.h), so tuning leaves nothing behind in the arena. The choices in force are
 * left in *CHOSEN (their file's text, malloc'd) for the other ranks. */
static int dev_autotune(Trainer *t, DeviceBackend *dev, const DevFeed *tuned, char **chosen)
{
    const Plan *plan = dev->plan;
    DevFeed feed = *tuned;
    uint64_t hash = autotune_plan_hash(plan, feed.symvals[0]);
    char why[512], path[4200] = "";
    TuneFile want, have;
    bool keep = tune_init(&want, t->p->model_name, dev->d->arch, dev->d->model, hash, why, sizeof why);
    const char *file = t->o->tune_file;
    TuneLoad load = TUNE_NO_CACHE;
    if (!keep && file) {
        cgc_error("the choices file %s: %s", diag_quote(file, 80), why);
        return -1;
    } else if (!keep) {
        say_autotune(t, "%s: the choices will not be kept", why);
        tune_init(&want, "model", 90, "device", hash, why, sizeof why);   /* a scratch file */
    } else if (file) {
        snprintf(path, sizeof path, "%s", file);
        load = tune_load_file(&want, file, &have, why, sizeof why);
    } else {
        load = tune_load(&want, &have, path, sizeof path, why, sizeof why);
    }
    if (load == TUNE_FOUND) {
        char apply_why[300];
        int rc = autotune_apply(dev->e, plan, &feed, &have, apply_why, sizeof apply_why);
        if (rc == 0)
            say_autotune(t, "%d choices from %s (tuned in %.1f s when written; delete it to "
                            "tune again)", have.nchoices, path, have.tuning_ms / 1e3);
        if (rc == 0) *chosen = tune_format(&have);
        tune_free(&have);
        if (rc != -1) tune_free(&want);
        if (rc == 0) return 0;
        if (rc == -2) {   /* this device's failure, not the file's: tuning would meet it too */
            cgc_error("%s%s: the choices were made for this plan on this GPU, but %s; the file "
                      "is left as it is", file ? "the choices file " : "", diag_quote(path, 80), apply_why);
            return -1;
        }
        snprintf(why, sizeof why, "%s", apply_why);
        load = TUNE_REFUSED;
    }
    if (load == TUNE_REFUSED && file && access(file, F_OK) != 0) {   /* a name not to be used */
        cgc_error("the choices file %s: %s; name another file (nothing was tuned)", diag_quote(file, 80),
                  why);
        tune_free(&want);
        return -1;
    }
    if (load == TUNE_REFUSED && file) {
        cgc_error("the choices file %s: %s; this run is model %s on %s (sm_%d), and the file is left "
                  "as it is: delete it, or name another file, to tune again", diag_quote(file, 80),
                  why, t->p->model_name, dev->d->model, dev->d->arch);
        tune_free(&want);
        return -1;
    }
    if (load == TUNE_REFUSED) say_autotune(t, "%s: %s; tuning again", path, why);
    if (load == TUNE_MISSING && file && tune_check_file(file) != 0) {
        tune_free(&want);
        return -1;
    }
    if (load == TUNE_NO_CACHE && keep) say_autotune(t, "%s", why);
    double budget = t->o->tune_budget_s > 0 ? t->o->tune_budget_s : AUTOTUNE_BUDGET_S;
    say_autotune(t, "timing the launch shapes and GEMM algorithms%s of %s on %s (at most %g s)",
                 plan->gemm_kernels_from < plan->nkernels && dev->d->arch >= 80
                     ? (plan->nmlps ? " (generated GEMMs and fused MLPs included)"
                                    : " (generated GEMMs included)") : "",
                 t->p->model_name, dev->d->name, budget);
    AutotuneReport r;
    if (autotune_run(dev->e, plan, &feed, budget, &want, &r) != 0) {
        tune_free(&want);
        return -1;
    }
    if (plan->nwindows == 0)
        say_autotune(t, "%d candidates timed for %d kernels, %d GEMMs and %d fused MLP runs in %.1f s",
                     r.candidates, r.kernels, r.gemms, r.mlps, r.seconds);
    else
        say_autotune(t, "%d candidates timed for %d kernels, %d GEMMs, %d fused MLP runs and %d "
                        "convolutions (implicit GEMMs, cuDNN) in %.1f s",
                     r.candidates, r.kernels, r.gemms, r.mlps, r.windows, r.seconds);
    if (r.gemm_compile_s > 0)
        say_autotune(t, "of which %.1f s compiled the generated GEMMs and MLPs (%d kernels)",
                     r.gemm_compile_s, plan->nkernels - plan->gemm_kernels_from);
    if (r.refused)   /* a warning, which -q keeps: it explains the errors printed above */
        cgc_warning("autotune: %d candidate%s refused by the device (the error%s above) %s left "
                    "out; the run goes on without %s", r.refused, r.refused == 1 ? "" : "s",
                    r.refused == 1 ? " is" : "s are", r.refused == 1 ? "was" : "were",
                    r.refused == 1 ? "it" : "them");
    if (r.untimed)
        say_autotune(t, "the time ran out: %d kernels and GEMMs keep the plan's choices, untimed "
                        "(delete the choices file to tune again)", r.untimed);
    if (load != TUNE_NO_CACHE) {
        int rc = file ? tune_store_file(&want, file)
                      : tune_store(&want, path, sizeof path, why, sizeof why);
        if (rc == 0) {
            say_autotune(t, "the choices are in %s", path);
        } else if (file) {   /* the user asked for the file: not a note -q would silence */
            char cache_why[256];   /* the time spent tuning is not lost: the cache keeps it */
            bool cached = tune_store(&want, path, sizeof path, cache_why, sizeof cache_why) == 0;
            cgc_error("the choices file was not written, after tuning; nothing was trained%s%s%s",
                      cached ? " (the choices are kept in the cache, " : "", cached ? path : "",
                      cached ? ": copy that file to the one named, or run without it)" : "");
            tune_free(&want);
            return -1;
        } else {
            say_autotune(t, "%s; the choices are not kept", why);
        }
    }
    *chosen = tune_format(&want);
    tune_free(&want);
    return 0;
}

/* The batch max-autotune times: the rows of a full micro-batch that rank 0 takes (its
 * choices are every rank's). */
static DevFeed tuning_feed(const Trainer *t)
{
    DevFeed feed;
    memset(&feed, 0, sizeof feed);
    int64_t first = 0, rows = t->p->cfg.batch;
    data_rank_rows(0, t->ranks, &first, &rows);
    feed.symvals[0] = rows;
    feed.runtime[IR_RT_TOTAL_STEPS] = (double)t->total_steps;
    return feed;
}

/* Puts rank 0's choices, the text of a choices file, in force on this rank's device. */
static int take_choices(Trainer *t, DeviceBackend *dev, const DevFeed *feed, const char *text)
{
    TuneFile f;
    char why[300];
    if (!tune_parse(text, strlen(text), &f, why, sizeof why))
        CGC_INTERNAL("rank 0's autotune choices do not read back: %s", why);
    int rc = autotune_apply(dev->e, dev->plan, feed, &f, why, sizeof why);
    tune_free(&f);
    if (rc != 0)
        cgc_error("max-autotune: rank 0's choices cannot be used on %s: %s", dev->d->name, why);
    return rc == 0 ? 0 : -1;
}

/* max-autotune: rank 0 chooses (dev_autotune) and sends its choices, which the other
 * ranks put in force on their devices, so that every rank runs the same kernels and
 * rounds alike. Rank 0 may take the tuning budget and the kernels' compilation before it
 * sends: the others wait that much longer than for a collective. */
static int dev_choose(Trainer *t, DeviceBackend *dev)
{
    DevFeed feed = tuning_feed(t);
    char *text = NULL;
    int64_t len = -1;
    char gpu[160];
    snprintf(gpu, sizeof gpu, "%s sm_%d", dev->d->model, dev->d->arch);
    if (t->ranks > 1 && comm_agree(t->o->comm, fnv1a(FNV_BASIS, gpu, strlen(gpu)), "the GPUs' models",
                                   "max-autotune with several ranks needs GPUs alike (rank 0 "
                                   "chooses for all); use the reduce-overhead mode") != 0)
        return -1;
    if (t->rank == 0 && dev_autotune(t, dev, &feed, &text) == 0) len = (int64_t)strlen(text);
    if (t->ranks == 1) {
        free(text);
        return len < 0 ? -1 : 0;
    }
    double budget = t->o->tune_budget_s > 0 ? t->o->tune_budget_s : AUTOTUNE_BUDGET_S;
    double wait = 2 * budget;   /* the budget, and as long again compiling what is timed */
    Comm *c = t->o->comm;
    if (comm_broadcast_after(c, &len, sizeof len, 0, wait, "rank 0's autotune choices") != 0) return -1;
    if (len < 0) {
        if (t->rank != 0) cgc_error("max-autotune: rank 0 could not choose (its error is above)");
        return -1;
    }
    if (t->rank != 0) text = xmalloc((size_t)len + 1);
    int rc = comm_broadcast(c, text, (size_t)len, 0, "rank 0's autotune choices");
    if (rc == 0 && t->rank != 0) {
        text[len] = '\0';
        rc = take_choices(t, dev, &feed, text);
    }
    free(text);
    return rc;
}

static int dev_open_plan(Trainer *t, DeviceBackend *dev)
{
    dev->plan = t->o->plan;
    if (!dev->plan) dev->plan = dev->own_plan = plan_build(t->p, PLAN_EAGER, t->o->net_path, NULL);
    const TrainConfig *c = &t->p->cfg;
    int64_t eval_rows = t->data.has_test ? (t->data.test.n < EVAL_BATCH ? t->data.test.n : EVAL_BATCH) : 0;
    int64_t rows = (c->batch + t->ranks - 1) / t->ranks;     /* a rank's share, at most */
    int64_t symmax[IR_MAX_SYMBOLS] = {rows > eval_rows ? rows : eval_rows};
    memcpy(dev->symmax, symmax, sizeof symmax);
    /* --detect-anomaly reads every stored value after a run: each keeps its own memory */
    dev->e = t->o->detect_anomaly ? devexec_new_unshared(dev->plan, dev->d, symmax, t->o->net_path)
                                : devexec_new(dev->plan, dev->d, symmax, t->o->net_path);
    if (!dev->e) return -1;
    dev->step = dev->plan->step_state >= 0 ? devexec_buffer(dev->e, dev->plan->step_state) : 0;
    dev->step_next[0] = dev->step_next[1] = -1;
    return dev->plan->mode == PLAN_MAX_AUTOTUNE ? dev_choose(t, dev) : 0;
}

/* A job, even of one rank: the device joins it. */
static int dev_join(Trainer *t, DeviceBackend *dev)
{
    if (!t->o->comm) return 0;
    if (!dev->d->ops->join) {
        cgc_error("%s cannot be a rank of a job; train the ranks on the CPU", dev->d->name);
        return -1;
    }
    return dev->d->ops->join(dev->d, t->o->comm);
}

/* The data set, and the arrays its order is made in, to the device. */
static int dev_upload_data(Trainer *t, DeviceBackend *dev)
{
    size_t n = (size_t)t->data.train.n;
    return upload_split(dev, &t->data.train, &dev->train, "the training set") != 0 ||
           (t->data.has_test && upload_split(dev, &t->data.test, &dev->test, "the test set") != 0) ||
           alloc_upload(dev, NULL, n * sizeof(int32_t), &dev->draws, "the data order") != 0 ||
           alloc_upload(dev, NULL, n * sizeof(int32_t), &dev->order, "the data order") != 0 ? -1 : 0;
}

static int dev_open(Trainer *t)
{
    DeviceBackend *dev = t->backend = xcalloc(1, sizeof *dev);
    dev->d = t->o->device;
    t->tensors = xcalloc((size_t)(t->p->ntensors ? t->p->ntensors : 1), sizeof *t->tensors);
    for (int i = 0; i < t->p->ntensors; i++)
        t->tensors[i] = xcalloc((size_t)ir_numel(&t->p->tensors[i].shape, NULL) + 1, sizeof(float));
    if (dev_join(t, dev) != 0 || dev_open_plan(t, dev) != 0) return -1;
    int streams = stream_decision(t, dev);
    if (streams < 0 || (streams ? stream_open(t, dev) : dev_upload_data(t, dev)) != 0 ||
        alloc_upload(dev, NULL, TOTALS * sizeof(double), &dev->totals, "the loss totals") != 0 ||
        alloc_upload(dev, NULL, 2 * sizeof(double), &dev->eval_totals, "the loss totals") != 0)
        return -1;
    dev->host_totals = dev->d->ops->host_alloc(dev->d, TOTALS * sizeof(double));
    if (!dev->host_totals) {
        cgc_error("cannot allocate %zu bytes of host memory for %s", TOTALS * sizeof(double), dev->d->name);
        return -1;
    }
    if (t->o->verbose || t->o->step_times) dev->timing = xcalloc(1, sizeof *dev->timing);
    return dev->d->ops->fence_new(dev->d, &dev->fence);
}

static void dev_close(Trainer *t)
{
    DeviceBackend *dev = backend(t);
    if (!dev) return;
    if (dev->d->ops->sync) dev->d->ops->sync(dev->d);     /* nothing in flight uses what we free */
    if (dev->fence) dev->d->ops->fence_free(dev->d, dev->fence);
    if (dev->timing) {
        report_timing(t, dev);
        if (dev->e && t->o->verbose) report_memory(t, dev);
        if (dev->e && t->o->verbose) report_convs(t, dev);
        for (int i = 0; i < TIMING_STEPS && dev->timing->start[i]; i++) {
            dev->d->ops->fence_free(dev->d, dev->timing->start[i]);
            dev->d->ops->fence_free(dev->d, dev->timing->end[i]);
        }
        free(dev->timing->launches);
        free(dev->timing);
    }
    for (int i = 0; i < 2; i++)
        if (dev->capture[i].graph) dev->d->ops->graph_free(dev->d, dev->capture[i].graph);
    if (dev->host_totals) dev->d->ops->host_free(dev->d, dev->host_totals);
    stream_close(dev);
    DevPtr ptrs[] = {dev->train.x, dev->train.y, dev->test.x, dev->test.y, dev->draws, dev->order,
                     dev->totals, dev->eval_totals};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) free_ptr(dev, ptrs[i]);
    devexec_free(dev->e);
    free(dev->values);
    if (dev->own_plan) plan_free(dev->own_plan);
    for (int i = 0; i < t->p->ntensors; i++) free(t->tensors[i]);
    free(t->tensors);
    free(dev);
}

static const char *dev_where(const Trainer *t) { return backend(t)->d->name; }

static int dev_init_tensors(Trainer *t) { return devexec_init_tensors(backend(t)->e, t->p->cfg.seed); }

static int dev_pull_tensors(Trainer *t)
{
    for (int i = 0; i < t->p->ntensors; i++)
        if (devexec_tensor_get(backend(t)->e, i, t->tensors[i]) != 0) return -1;
    return 0;
}

static int dev_sample(Trainer *t, const GenerateOptions *g)
{
    return generate_text_device(t->p, backend(t)->e, g, true, stdout);
}

static int dev_push_tensors(Trainer *t)
{
    for (int i = 0; i < t->p->ntensors; i++)
        if (devexec_tensor_set(backend(t)->e, i, t->tensors[i]) != 0) return -1;
    return 0;
}

/* The epoch's text windows start at PHASE: a micro-batch captured with another phase in
 * its gathers is captured again. */
static int set_phase(DeviceBackend *dev, int64_t phase)
{
    if (phase == dev->phase) return 0;
    dev->phase = phase;
    for (int i = 0; i < 2; i++) {
        StepCapture *sc = &dev->capture[i];
        if (sc->graph) dev->d->ops->graph_free(dev->d, sc->graph);
        *sc = (StepCapture){0};
    }
    return 0;
}

/* The totals restart from PR (a resumed epoch continues its sums); the order of the
 * epoch is drawn and shuffled on the device. */
static int dev_epoch_begin(Trainer *t, const TrainProgress *pr)
{
    DeviceBackend *dev = backend(t);
    const TrainConfig *c = &t->p->cfg;
    CGC_ASSERT(!dev->pending);    /* the last epoch ended with a waiting read */
    double totals[TOTALS] = {pr->loss_sum, (double)pr->loss_count, (double)pr->skipped, -1};
    if (dev->d->ops->upload(dev->d, dev->totals, totals, sizeof totals) != 0) return -1;
    if (dev->stream) {
        stream_epoch(t, dev->stream, pr);
        return 0;
    }
    int64_t n = t->data.train.n;
    KArg draws[4] = {{.p = dev->draws}, {.i = n}, {.u = c->seed}, {.i = pr->epoch}};
    KArg shuffle[4] = {{.p = dev->order}, {.p = dev->draws}, {.i = n}, {.i = c->shuffle}};
    if (launch(t, PDK_ORDER_DRAWS, n - 1, draws, 4, "draw the epoch's order") != 0) return -1;
    if (launch(t, PDK_ORDER_SHUFFLE, 0, shuffle, 4, "shuffle the epoch's order") != 0) return -1;
    return set_phase(dev, data_phase(&t->data.train, c->seed, pr->epoch));
}

/* ---- a micro-batch, and its capture (reduce-overhead) ---- */

const char *train_capture_refusal(const CaptureQuery *q)
{
    if (!plan_mode_captures(q->mode)) return "the plan's mode is neither reduce-overhead nor max-autotune";
    if (!q->device_can) return "the device cannot record graphs";
    if (q->failed) return "an earlier capture failed";
    if (q->count != q->batch) return "a partial batch runs launch by launch";
    if (q->profiled) return "a profiled step runs launch by launch, each timed";
    if (q->checked) return "the anomaly check reads every value after each run";
    if (q->streamed) return "the data streams from the host: each micro-batch waits for its copy";
    if (q->runs == 0) return "the first full batch runs launch by launch, as a warm-up";
    return NULL;
}

/* Makes the device's step counter hold micro-step MICRO_STEP at row START, writing it
 * only when the sequence the device keeps has jumped. */
static int set_step(DeviceBackend *dev, int64_t micro_step, int64_t start)
{
    if (dev->step_next[0] == micro_step && dev->step_next[1] == start) return 0;
    int64_t state[2] = {micro_step, start};
    if (dev->d->ops->upload(dev->d, dev->step, state, sizeof state) != 0) return -1;
    dev->step_next[0] = micro_step;
    dev->step_next[1] = start;
    return 0;
}

/* The work of micro-batch M: what a capture records. A rank's loss weighs its share of
 * the rows times the ranks (train_loss_weight). */
static int micro_batch_work(Trainer *t, const IrGraph *g, const TrainProgress *pr, const MicroBatch *m)
{
    DeviceBackend *dev = backend(t);
    const TrainConfig *c = &t->p->cfg;
    int rc = dev->stream ? stream_gather(t, dev, m->start / c->batch)
                         : gather(t, &t->data.train, &dev->train, dev->order, m->first, m->rows,
                                  dev->step, dev->phase);
    if (rc != 0) return -1;
    if (run_graph(t, g, m) != 0) return -1;
    /* The skipped flag counts once per optimizer step: the step's last graph has it. */
    DevPtr skipped = g == &t->p->train ? node_buffer(dev, g, IR_OUT_SKIPPED) : 0;
    KArg a[9] = {{.p = dev->totals}, {.p = node_buffer(dev, g, IR_OUT_LOSS)}, {.p = skipped},
                 {.i = pr->step}, {.i = c->precision != PREC_FP16}, {.p = dev->step},
                 {.i = c->accumulate}, {.i = m->rows * t->ranks}, {.i = m->count}};
    if (launch(t, PDK_TRACK_LOSS, 0, a, 9, "add up the loss") != 0) return -1;
    if (!dev->step) return 0;
    KArg adv[2] = {{.p = dev->step}, {.i = c->batch}};
    return launch(t, PDK_STEP_ADVANCE, 0, adv, 2, "advance the step counter");
}

/* Captures the micro-batch into SC; on failure says so once, and the run goes on
 * uncaptured. Returns 0 when SC holds a graph, 1 when the work must run uncaptured. */
static int capture(Trainer *t, const IrGraph *g, const TrainProgress *pr, const MicroBatch *m,
                   StepCapture *sc)
{
    DeviceBackend *dev = backend(t);
    const DeviceOps *ops = dev->d->ops;
    if (ops->capture_begin(dev->d) == 0) {
        int work = micro_batch_work(t, g, pr, m);
        if (ops->capture_end(dev->d, &sc->graph, &sc->nodes) == 0 && work == 0) {
            train_clear_progress(t);
            if (!t->o->quiet)
                printf("cgc: %s: graph %s captured at step %lld: its micro-batch is one "
                       "CUDA graph of %d nodes from now on\n", plan_mode_name(dev->plan->mode),
                       g->name, (long long)pr->step + 1, sc->nodes);
            return 0;
        }
        if (sc->graph) ops->graph_free(dev->d, sc->graph);
        sc->graph = NULL;
    }
    dev->capture_failed = true;
    train_clear_progress(t);
    cgc_warning("%s: the micro-batch of graph %s could not be captured as a CUDA graph (the "
                "error is above); the run goes on without graphs, as the default mode runs",
                plan_mode_name(dev->plan->mode), g->name);
    return 1;
}

static int dev_micro_batch(Trainer *t, const IrGraph *g, TrainProgress *pr, int64_t start,
                           int64_t count, int64_t micro_step)
{
    DeviceBackend *dev = backend(t);
    const TrainConfig *c = &t->p->cfg;
    int64_t k = micro_step % c->accumulate;
    MicroBatch m = {.start = start, .count = count, .first = start, .rows = count,
                    .micro_step = micro_step};
    data_rank_rows(t->rank, t->ranks, &m.first, &m.rows);
    if (k == 0 && (time_step(dev, true) != 0 || launches_begin(t, dev, m.rows) != 0)) return -1;
    if (dev->step && set_step(dev, micro_step, m.first) != 0) return -1;
    StepCapture *sc = &dev->capture[g == &t->p->train ? 0 : 1];
    CaptureQuery q = {.mode = dev->plan->mode, .device_can = dev->d->ops->capture_begin != NULL,
                      .failed = dev->capture_failed, .count = count, .batch = c->batch,
                      .runs = sc->runs,
                      .profiled = t->recording != NULL || (dev->timing && dev->timing->launches_open),
                      .checked = t->o->detect_anomaly, .streamed = dev->stream != NULL};
    bool replay = train_capture_refusal(&q) == NULL;
    if (count == c->batch) sc->runs++;
    if (replay && !sc->graph && capture(t, g, pr, &m, sc) != 0)
        replay = false;
    int rc = replay ? dev->d->ops->graph_launch(dev->d, sc->graph) : micro_batch_work(t, g, pr, &m);
    if (rc != 0) return -1;
    if (dev->step) {
        dev->step_next[0]++;
        dev->step_next[1] += c->batch;
    }
    if (k != c->accumulate - 1) return 0;
    return launches_end(dev) != 0 ? -1 : time_step(dev, false);
}

/* Queues a read of the totals into host_totals, with the fence after it. */
static int request_totals(DeviceBackend *dev)
{
    if (dev->d->ops->download_async(dev->d, dev->host_totals, dev->totals, TOTALS * sizeof(double)) != 0 ||
        dev->d->ops->fence_record(dev->d, dev->fence) != 0)
        return -1;
    dev->pending = true;
    return 0;
}

static int apply_totals(Trainer *t, TrainProgress *pr)
{
    const double *h = backend(t)->host_totals;
    backend(t)->pending = false;
    pr->loss_sum = h[0];
    pr->loss_count = (int64_t)h[1];
    pr->skipped = (int64_t)h[2];
    return h[3] >= 0 ? train_loss_not_finite(t, (int64_t)h[3], "NaN or infinite") : 0;
}

/* Without waiting: the last read if it has landed (and a new one queued), else nothing.
 * Waiting: a fresh read, waited for. */
static int dev_read_totals(Trainer *t, TrainProgress *pr, bool wait)
{
    DeviceBackend *dev = backend(t);
    bool done = false;
    if (wait) {
        if (request_totals(dev) != 0 || dev->d->ops->fence_done(dev->d, dev->fence, true, &done) != 0) return -1;
        return apply_totals(t, pr);
    }
    if (!dev->pending) return request_totals(dev);
    if (dev->d->ops->fence_done(dev->d, dev->fence, false, &done) != 0) return -1;
    if (!done) return 0;
    if (apply_totals(t, pr) != 0) return -1;
    return request_totals(dev);
}

/* This rank's share of the test split in file order, in batches of EVAL_BATCH; one read
 * at the end, summed over the ranks. */
static int dev_evaluate(Trainer *t, EvalResult *r)
{
    DeviceBackend *dev = backend(t);
    const Dataset *d = &t->data.test;
    const IrGraph *g = &t->p->eval;
    double zero[2] = {0, 0}, totals[2];
    int64_t first = 0, n = d->n;
    data_rank_rows(t->rank, t->ranks, &first, &n);
    if (dev->d->ops->upload(dev->d, dev->eval_totals, zero, sizeof zero) != 0) return -1;
    for (int64_t start = first; start < first + n; start += EVAL_BATCH) {
        int64_t count = first + n - start < EVAL_BATCH ? first + n - start : EVAL_BATCH;
        int rc = dev->stream ? stream_eval_gather(t, dev, start, count)
                             : gather(t, d, &dev->test, 0, start, count, 0, 0);
        if (rc != 0) return -1;
        MicroBatch m = {.start = start, .count = count, .first = start, .rows = count};
        if (run_graph(t, g, &m) != 0) return -1;      /* no dropout */
        KArg a[4] = {{.p = dev->eval_totals}, {.p = node_buffer(dev, g, IR_OUT_LOSS)},
                     {.p = node_buffer(dev, g, IR_OUT_CORRECT)}, {.i = count}};
        if (launch(t, PDK_TRACK_EVAL, 0, a, 4, "add up the test loss") != 0) return -1;
    }
    if (dev->d->ops->download(dev->d, totals, dev->eval_totals, sizeof totals) != 0 ||
        train_sum_over_ranks(t, totals, 2, "the evaluation's totals") != 0)
        return -1;
    r->loss = totals[0] / (double)d->n;
    r->has_accuracy = g->output[IR_OUT_CORRECT] >= 0;
    r->accuracy = totals[1] / ((double)d->n * (double)(d->y_row > 0 ? d->y_row : 1));   /* per label */
    return 0;
}

static double dev_gemm_seconds(const Trainer *t) { return -1; }

/* ---- --profile ---- */

static int dev_profile_step_begin(Trainer *t)
{
    DeviceBackend *dev = backend(t);
    profile_set_device(t->profile, dev->d->name);
    return devexec_timing_start(dev->e);
}

typedef struct ProfiledStep {
    Profile *profile;
    double start, end;
    int events;
} ProfiledStep;

static void profiled_event(void *ctx, const DevTimedEvent *ev, double start, double end)
{
    ProfiledStep *s = ctx;
    profile_kernel(s->profile, ev->what, ev->kernel, ev->graph, ev->line, ev->gemm, start, end);
    if (s->events++ == 0) s->start = start;
    s->end = end > s->end ? end : s->end;
}

static int dev_profile_step_end(Trainer *t, double *start, double *end)
{
    ProfiledStep s = {.profile = t->profile};
    if (devexec_timing_collect(backend(t)->e, profiled_event, &s) != 0) return -1;
    *start = s.start;
    *end = s.end;
    return 0;
}

const TrainBackendOps train_device_backend = {
    .open = dev_open,
    .close = dev_close,
    .where = dev_where,
    .emulated = false,
    .init_tensors = dev_init_tensors,
    .pull_tensors = dev_pull_tensors,
    .push_tensors = dev_push_tensors,
    .epoch_begin = dev_epoch_begin,
    .micro_batch = dev_micro_batch,
    .read_totals = dev_read_totals,
    .evaluate = dev_evaluate,
    .sample = dev_sample,
    .gemm_seconds = dev_gemm_seconds,
    .profile_step_begin = dev_profile_step_begin,
    .profile_step_end = dev_profile_step_end,
};
