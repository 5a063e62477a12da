/* train.c: the training loop, and its CPU backend (the reference executor).
 *
 * One epoch walks a seeded order of the training set in micro-batches of `batch`
 * samples; `accumulate` micro-batches make one optimizer step (the last one runs the
 * `train` graph, the others `train_micro`). Micro-batches left over at the end of an
 * epoch that cannot fill a whole step are skipped, as are the last samples that do not
 * fill a micro-batch when drop_last is set. After every epoch the model is evaluated on
 * the test split (dropout off, every sample, larger batches) and the state is saved.
 *
 * The run is a pure function of the program, the data and the seed: the data order of
 * an epoch depends on (seed, epoch), dropout on the micro-step counter, so a run resumed
 * from a checkpoint continues bit for bit.
 *
 * Where the steps run is a backend (train_internal.h): the CPU reference executor here,
 * fed by a host thread that reads each micro-batch's rows ahead (prefetch.h), or a
 * device through the plan runner (train_device.c), which keeps the data, the order and
 * the loss totals on the device so that no step waits on the host (or, for a data set
 * the device cannot hold, streams the rows in beside the steps).
 */
#include "train.h"
#include "train_internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/clock.h"
#include "../base/outfile.h"
#include "cpu/exec.h"
#include "data.h"
#include "generate.h"
#include "prefetch.h"
#include "safetensors.h"

/* ---- the plan: how many micro-batches, steps and epochs ---- */

/* What a rank's micro-batch of COUNT rows weighs in the running loss: its share of the
 * rows times the ranks, so that the mean over the ranks of every rank's sum is the sum
 * of the whole micro-batches' mean losses (1 when the rows divide evenly). */
static double train_loss_weight(const Trainer *t, int64_t count)
{
    int64_t first = 0, rows = count;
    data_rank_rows(t->rank, t->ranks, &first, &rows);
    return t->ranks == 1 ? 1.0 : (double)rows * t->ranks / (double)count;
}

int train_sum_over_ranks(const Trainer *t, double *v, int n, const char *what)
{
    return t->ranks == 1 ? 0 : comm_allreduce(t->o->comm, v, n, COMM_F64, what);
}

/* Every rank needs rows of its own in every micro-batch, and a batch norm over one value
 * per channel in a row (P->stats_per_row) needs two: its unbiased variance divides by
 * n - 1 (PyTorch refuses such a batch too). Every micro-batch holds cfg.batch rows, but
 * the last of an epoch without drop_last, which holds what is left. */
static int check_batch_rows(const Trainer *t, int64_t n)
{
    const TrainConfig *c = &t->p->cfg;
    int64_t last = c->drop_last || n % c->batch == 0 ? c->batch : n % c->batch;
    int64_t need = t->p->stats_per_row == 1 ? 2 : 1;
    int64_t fewest = (last < c->batch ? last : c->batch) / t->ranks;   /* a rank's rows, at least */
    if (fewest >= need) return 0;
    char why[200], per[64] = "";
    if (t->ranks > 1) snprintf(per, sizeof per, " split over %d ranks", t->ranks);
    if (last == c->batch)
        snprintf(why, sizeof why, "batch = %lld%s", (long long)c->batch, per);
    else
        snprintf(why, sizeof why, "the last micro-batch of each epoch holds %lld row%s%s: %lld "
                 "training samples in batches of %lld", (long long)last, last == 1 ? "" : "s", per,
                 (long long)n, (long long)c->batch);
    const char *fix = last == c->batch ? "use a larger batch"
                                       : "set drop_last = true, or a batch that leaves more rows";
    if (need == 2)
        cgc_error("%s:%d: batchnorm over one value per channel needs at least 2 rows per batch%s "
                  "(%s): its variance has no unbiased estimate from one; %s", t->o->net_path,
                  t->p->stats_loc.line, t->ranks > 1 ? " on every rank" : "", why, fix);
    else
        cgc_error("%s gives a rank no rows of its own; %s", why, fix);
    return -1;
}

static int plan(Trainer *t)
{
    const TrainConfig *c = &t->p->cfg;
    int64_t n = t->data.train.n;
    if (check_batch_rows(t, n) != 0) return -1;
    t->micro_per_epoch = c->drop_last ? n / c->batch : (n + c->batch - 1) / c->batch;
    t->steps_per_epoch = t->micro_per_epoch / c->accumulate;
    t->scale_tensor = c->precision == PREC_FP16 ? ir_find_tensor(t->p, "cgc.scaler.scale") : -1;
    if (t->steps_per_epoch == 0) {
        cgc_error("%lld training samples do not make one step of batch %lld x accumulate %lld%s",
                  (long long)n, (long long)c->batch, (long long)c->accumulate,
                  c->drop_last ? " (drop_last is on)" : "");
        return -1;
    }
    if (c->epochs > 0) {
        t->epochs = c->epochs;
        t->total_steps = c->epochs * t->steps_per_epoch;
        if (c->steps > 0 && c->steps < t->total_steps) t->total_steps = c->steps;
    } else {
        t->total_steps = c->steps;
    }
    t->epochs = (t->total_steps + t->steps_per_epoch - 1) / t->steps_per_epoch;
    return 0;
}

/* ---- the CPU backend: the reference executor, data gathered on the host ---- */

typedef struct CpuBackend {
    CpuExec *e;
    int64_t *order;             /* data order of the current epoch */
    int64_t phase;              /* where its text windows start (data_phase) */
    void *x;                    /* one batch of features (f32, or i32 tokens): evaluation */
    void *y;                    /* one batch of labels */
    Prefetch *pf;               /* the training rows, read ahead */
} CpuBackend;

/* The CPU executor's read-ahead: the file's or the flag's, else the default unless this
 * process may run on one core only. There a step computes throughout, so a thread reading
 * ahead takes turns with it rather than overlapping it, and their hand-offs, thousands a
 * second, starve the machine's other processes (mpirun's output among them). */
static int cpu_prefetch_depth(Trainer *t)
{
    const TrainConfig *c = &t->p->cfg;
    if (c->prefetch_given || !prefetch_one_core()) return (int)c->prefetch;
    t->prefetch_why = "this process may run on one core only";
    return 0;
}

/* The executor's collectives (cpu/exec.h), through the job's MPI (comm.h): a bucket's
 * goes in the comm slot of its number. */
static int coll_start(void *ctx, int bucket, IrOp op, void *buf, int64_t n, CpuReal real)
{
    return comm_start(ctx, bucket, comm_op_of(op), buf, n, real == CPU_F64 ? COMM_F64 : COMM_F32);
}

static int coll_progress(void *ctx) { return comm_progress(ctx); }

static int coll_wait(void *ctx, int bucket)
{
    char what[64];
    snprintf(what, sizeof what, "the collective of bucket %d", bucket);
    return comm_wait(ctx, bucket, what);
}

static int cpu_open(Trainer *t)
{
    CpuBackend *cpu = t->backend = xcalloc(1, sizeof *cpu);
    cpu->e = cpu_exec_new(t->p, CPU_F32);
    cpu_exec_set_reuse(cpu->e, true);   /* the trainer reads only the graphs' outputs */
    if (t->ranks > 1)
        cpu_exec_set_collectives(cpu->e, &(CpuCollectives){t->o->comm, t->rank, t->ranks, coll_start,
                                                         coll_progress, coll_wait});
    t->tensors = xcalloc((size_t)(t->p->ntensors ? t->p->ntensors : 1), sizeof *t->tensors);
    for (int i = 0; i < t->p->ntensors; i++) t->tensors[i] = cpu_exec_tensor(cpu->e, i);
    int64_t rows = t->p->cfg.batch > EVAL_BATCH ? t->p->cfg.batch : EVAL_BATCH;
    cpu->x = xmalloc((size_t)(rows * (t->data.train.x_row ? t->data.train.x_row : 1)) * sizeof(float));
    cpu->y = xmalloc((size_t)(rows * (t->data.train.y_row ? t->data.train.y_row : 1)) * sizeof(float));
    cpu->order = xmalloc((size_t)t->data.train.n * sizeof *cpu->order);
    t->prefetch = cpu->pf = prefetch_new(&t->data.train, cpu_prefetch_depth(t), t->p->cfg.batch, NULL);
    return cpu->pf ? 0 : -1;
}

static void cpu_close(Trainer *t)
{
    CpuBackend *cpu = t->backend;
    if (!cpu) return;
    prefetch_free(cpu->pf);
    cpu_exec_free(cpu->e);
    free(cpu->x);
    free(cpu->y);
    free(cpu->order);
    free(cpu);
    free(t->tensors);
}

static const char *cpu_where(const Trainer *t) { return "the CPU"; }

static int cpu_init_tensors(Trainer *t)
{
    cpu_exec_init_tensors(((CpuBackend *)t->backend)->e, t->p->cfg.seed);
    return 0;
}

/* t->tensors are the executor's own arrays: nothing to copy either way. */
static int cpu_tensors_in_place(Trainer *t) { return 0; }

static int cpu_epoch_begin(Trainer *t, const TrainProgress *pr)
{
    const TrainConfig *c = &t->p->cfg;
    CpuBackend *cpu = t->backend;
    prefetch_stop(cpu->pf);
    data_order(c->seed, pr->epoch, c->shuffle, t->data.train.n, cpu->order);
    cpu->phase = data_phase(&t->data.train, c->seed, pr->epoch);
    prefetch_epoch(cpu->pf, cpu->order, cpu->phase, c->batch, pr->batch_in_epoch,
                   t->steps_per_epoch * c->accumulate, t->rank, t->ranks);
    return 0;
}

int train_report_anomaly(const Trainer *t, const IrGraph *g, const CpuAnomaly *a,
                         int64_t micro_step, const char *from)
{
    const IrNode *n = &g->nodes[a->node];
    char when[64] = "in the evaluation", where[512] = "", what[160] = "", shape[128];
    if (g != &t->p->eval)
        snprintf(when, sizeof when, "in step %lld", (long long)(micro_step / t->p->cfg.accumulate) + 1);
    if (n->loc.line > 0) snprintf(where, sizeof where, " at %s:%d", t->o->net_path, n->loc.line);
    if (n->name) snprintf(what, sizeof what, ", computing '%s'", n->name);
    train_clear_progress(t);
    cgc_error("anomaly %s: %s%s (%s graph, node %%%d%s) computed %s at element %lld of %s, from "
              "%s", when, ir_op_name(n->op), where, g->name, a->node, what,
              isnan(a->value) ? "NaN" : a->value > 0 ? "+inf" : "-inf", (long long)a->element,
              ir_shape_str(t->p, &n->shape, shape, sizeof shape), from);
    return -1;
}

/* Runs graph G on ROWS rows at X and Y, rows [first, first + rows) of a micro-batch of
 * COUNT from START, as micro-batch number MICRO_STEP of the run (optimizer step *
 * accumulate + micro-batch within the step), the counter dropout masks are keyed by. */
static int run_batch(Trainer *t, const IrGraph *g, void *x, void *y, int64_t start, int64_t count,
                     int64_t rows, int64_t micro_step)
{
    CpuBackend *cpu = t->backend;
    int64_t first = start, share = count;
    if (g != &t->p->eval) data_rank_rows(t->rank, t->ranks, &first, &share);
    CGC_ASSERT(share == rows);
    CpuFeed feed;
    memset(&feed, 0, sizeof feed);
    feed.symvals[0] = rows;
    feed.inputs[0] = x;
    feed.inputs[1] = y;
    feed.runtime[IR_RT_TOTAL_STEPS] = (double)t->total_steps;
    feed.runtime[IR_RT_MICRO_STEP] = (double)micro_step;
    feed.runtime[IR_RT_RANK_SHARE] = (double)rows / (double)count;
    feed.first_row = first - start;
    cpu_exec_set_profile(cpu->e, t->recording);
    cpu_exec_set_detect_anomaly(cpu->e, t->o->detect_anomaly);
    int rc = cpu_exec_run(cpu->e, g, &feed);
    const CpuAnomaly *a = rc ? cpu_exec_anomaly(cpu->e) : NULL;
    return a ? train_report_anomaly(t, g, a, micro_step, "values that were all finite") : rc;
}

static double output_scalar(Trainer *t, const IrGraph *g, IrOutputRole role)
{
    CpuBackend *cpu = t->backend;
    return g->output[role] >= 0 ? cpu_exec_scalar(cpu->e, g->output[role]) : 0.0;
}

/* The totals live in PR itself; a non-finite loss stops the run at once. */
static int cpu_micro_batch(Trainer *t, const IrGraph *g, TrainProgress *pr, int64_t start,
                           int64_t count, int64_t micro_step)
{
    CpuBackend *cpu = t->backend;
    PrefetchSlot *s = prefetch_take(cpu->pf, start / t->p->cfg.batch);
    int rc = run_batch(t, g, s->x, s->y, start, count, s->rows, micro_step);
    prefetch_give(cpu->pf, s);
    if (rc != 0) return -1;
    double loss = output_scalar(t, g, IR_OUT_LOSS);
    if (!isfinite(loss) && t->p->cfg.precision != PREC_FP16)
        return train_loss_not_finite(t, pr->step, isnan(loss) ? "NaN" : "infinite");
    pr->loss_sum += loss * train_loss_weight(t, count);
    pr->loss_count++;
    if (g == &t->p->train) pr->skipped += output_scalar(t, g, IR_OUT_SKIPPED) != 0;
    return 0;
}

static int cpu_read_totals(Trainer *t, TrainProgress *pr, bool wait) { return 0; }

static int cpu_evaluate(Trainer *t, EvalResult *r)
{
    const Dataset *d = &t->data.test;
    const IrGraph *g = &t->p->eval;
    int64_t first = 0, n = d->n;
    data_rank_rows(t->rank, t->ranks, &first, &n);
    double sums[2] = {0, 0};   /* loss times rows, correct predictions */
    CpuBackend *cpu = t->backend;
    for (int64_t start = first; start < first + n; start += EVAL_BATCH) {
        int64_t count = first + n - start < EVAL_BATCH ? first + n - start : EVAL_BATCH;
        data_gather(d, NULL, start, count, 0, cpu->x, cpu->y);
        if (run_batch(t, g, cpu->x, cpu->y, start, count, count, 0) != 0) return -1;   /* no dropout */
        sums[0] += output_scalar(t, g, IR_OUT_LOSS) * (double)count;
        sums[1] += output_scalar(t, g, IR_OUT_CORRECT);
    }
    if (train_sum_over_ranks(t, sums, 2, "the evaluation's totals") != 0) return -1;
    double loss = sums[0], correct = sums[1];
    r->loss = loss / (double)d->n;
    r->has_accuracy = g->output[IR_OUT_CORRECT] >= 0;
    r->accuracy = correct / ((double)d->n * (double)(d->y_row > 0 ? d->y_row : 1));   /* per label */
    return 0;
}

static double cpu_gemm_seconds(const Trainer *t)
{
    return cpu_exec_gemm_seconds(((const CpuBackend *)t->backend)->e);
}

static int cpu_sample(Trainer *t, const GenerateOptions *g)
{
    return generate_text(t->p, t->tensors, g, true, stdout);
}

static const TrainBackendOps cpu_backend = {
    .open = cpu_open,
    .close = cpu_close,
    .where = cpu_where,
    .emulated = true,
    .init_tensors = cpu_init_tensors,
    .pull_tensors = cpu_tensors_in_place,
    .push_tensors = cpu_tensors_in_place,
    .epoch_begin = cpu_epoch_begin,
    .micro_batch = cpu_micro_batch,
    .read_totals = cpu_read_totals,
    .evaluate = cpu_evaluate,
    .sample = cpu_sample,
    .host = true,
    .gemm_seconds = cpu_gemm_seconds,
};

/* ---- reporting ---- */

/* A loss as the epoch and progress lines print it: four decimals, or four significant
 * digits with an exponent from a million up, where the decimals would be dozens of
 * meaningless digits (a diverging run). */
static const char *loss_text(double v, char *buf, size_t n)
{
    snprintf(buf, n, fabs(v) < 1e6 || !isfinite(v) ? "%.4f" : "%.4e", v);
    return buf;
}

static void draw_progress(Trainer *t, const TrainProgress *pr, double seconds, bool force)
{
    double at = clock_seconds();
    if (!t->live || t->o->quiet || (!force && at - t->last_draw < 0.1)) return;
    t->last_draw = at;
    int64_t done = pr->batch_in_epoch, total = t->steps_per_epoch * t->p->cfg.accumulate;
    int width = 30, filled = total ? (int)(width * done / total) : width;
    double rate = seconds > 0 ? (double)(done * t->p->cfg.batch) / seconds : 0;
    double eta = done ? seconds * (double)(total - done) / (double)done : 0;
    char loss[32];
    loss_text(pr->loss_count ? pr->loss_sum / (double)pr->loss_count : 0.0, loss, sizeof loss);
    printf("\repoch %lld/%lld [%.*s%*s] %lld/%lld loss %s %.0f samples/s ETA %d:%02d \033[K",
           (long long)pr->epoch + 1, (long long)t->epochs, filled,
           "==============================", width - filled, "", (long long)done,
           (long long)total, loss, rate, (int)eta / 60, (int)eta % 60);
    fflush(stdout);
}

void train_clear_progress(const Trainer *t)
{
    if (!t->live || t->o->quiet) return;
    printf("\r\033[K");
    fflush(stdout);
}

static void json_number(FILE *f, const char *key, double v)
{
    if (isfinite(v)) fprintf(f, ",\"%s\":%.9g", key, v);
    else fprintf(f, ",\"%s\":null", key);
}

/* The epoch's line, and its --metrics object; 0, or -1 when the metrics cannot be written. */
static int report_epoch(Trainer *t, const TrainProgress *pr, int64_t micro_done,
                        double seconds, const EvalResult *ev)
{
    double train_loss = pr->loss_count ? pr->loss_sum / (double)pr->loss_count : NAN;
    double rate = seconds > 0 ? (double)(micro_done * t->p->cfg.batch) / seconds : 0;
    if (!t->o->quiet) {
        train_clear_progress(t);
        char loss[32];
        printf("epoch %lld/%lld  step %lld  train_loss %s", (long long)pr->epoch + 1,
               (long long)t->epochs, (long long)pr->step, loss_text(train_loss, loss, sizeof loss));
        if (ev) printf("  test_loss %s", loss_text(ev->loss, loss, sizeof loss));
        if (ev && ev->has_accuracy) printf("  test_accuracy %.4f", ev->accuracy);
        printf("  %.0f samples/s  %.1f s", rate, seconds);
        if (pr->skipped) printf("  (%lld fp16 steps skipped so far)", (long long)pr->skipped);
        printf("\n");
        fflush(stdout);
    }
    if (t->metrics) {
        fprintf(t->metrics, "{\"epoch\":%lld,\"step\":%lld", (long long)pr->epoch + 1, (long long)pr->step);
        json_number(t->metrics, "train_loss", train_loss);
        if (ev) json_number(t->metrics, "test_loss", ev->loss);
        if (ev && ev->has_accuracy) json_number(t->metrics, "test_accuracy", ev->accuracy);
        json_number(t->metrics, "samples_per_s", rate);
        json_number(t->metrics, "seconds", seconds);
        fputs("}\n", t->metrics);
        return out_flush(t->metrics, TRAIN_METRICS_ROLE, t->o->metrics_path, false);
    }
    return 0;
}

/* ---- the loop ---- */

int train_loss_not_finite(const Trainer *t, int64_t step, const char *what)
{
    const IrNode *n = &t->p->train.nodes[t->p->train.output[IR_OUT_LOSS]];
    train_clear_progress(t);
    cgc_error("the loss became %s at step %lld (the loss at %s:%d); try a lower learning rate, "
              "clip_norm, or fp32", what, (long long)step + 1, t->o->net_path, n->loc.line);
    return -1;
}

/* One optimizer step: ACCUMULATE micro-batches. */
static int train_step(Trainer *t, TrainProgress *pr)
{
    const TrainConfig *c = &t->p->cfg;
    for (int64_t k = 0; k < c->accumulate; k++) {
        bool last = k == c->accumulate - 1;
        const IrGraph *g = last ? &t->p->train : &t->p->train_micro;
        int64_t start = pr->batch_in_epoch * c->batch;
        int64_t count = t->data.train.n - start < c->batch ? t->data.train.n - start : c->batch;
        int64_t micro_step = pr->step * c->accumulate + k;
        if (t->ops->micro_batch(t, g, pr, start, count, micro_step) != 0) return -1;
        pr->batch_in_epoch++;
    }
    pr->step++;
    return 0;
}

/* ---- --profile: a few steps recorded (profile.h) ---- */

enum { PROFILE_STEPS = 3 };

/* The steps to record: the second to the fourth that this run takes (the first is a
 * warm-up: buffers grow, caches fill), or as many as there are; a run of one step
 * records that one. */
static void profile_window(Trainer *t, const TrainProgress *pr)
{
    const RunOptions *o = t->o;
    int64_t end = o->stop_after && o->stop_after < t->total_steps ? o->stop_after : t->total_steps;
    t->profile_from = pr->step + (end - pr->step > 1);
    t->profile_to = t->profile_from + PROFILE_STEPS < end ? t->profile_from + PROFILE_STEPS : end;
}

/* Writes the trace, if not yet written, and says what it holds. */
static int profile_finish(Trainer *t)
{
    if (!t->profile) return 0;
    int steps = profile_steps(t->profile), ops = profile_ops(t->profile);
    int rc = profile_close(t->profile);
    t->profile = NULL;
    if (rc != 0 || t->o->quiet) return rc;
    const char *path = t->o->profile_path;
    long long first = (long long)t->profile_from + 1, last = first + steps - 1;
    if (steps == 0) printf("cgc: profiled no steps; %s holds an empty trace\n", path);
    else if (steps == 1) printf("cgc: profiled 1 step (step %lld, %d ops) to %s\n", first, ops, path);
    else printf("cgc: profiled %d steps (steps %lld to %lld, %d ops) to %s\n", steps, first, last,
                ops, path);
    fflush(stdout);
    return 0;
}

/* train_step, timing every op when the step is one --profile records. */
static int train_step_profiled(Trainer *t, TrainProgress *pr)
{
    if (!t->profile || pr->step < t->profile_from || pr->step >= t->profile_to)
        return train_step(t, pr);
    bool device = t->ops->profile_step_begin != NULL;
    if (device && t->ops->profile_step_begin(t) != 0) return -1;
    t->recording = t->profile;
    double start = clock_seconds();
    int rc = train_step(t, pr);
    double end = clock_seconds();
    t->recording = NULL;
    if (rc == 0 && device) rc = t->ops->profile_step_end(t, &start, &end);
    if (rc != 0) return rc;
    profile_step(t->profile, pr->step, start, end);
    return pr->step == t->profile_to ? profile_finish(t) : 0;
}

/* Several ranks: the epoch's loss sum is the one the epoch began with plus the mean over
 * the ranks of what each added (train_loss_weight). */
static int combine_losses(Trainer *t, TrainProgress *pr)
{
    if (t->ranks == 1) return 0;
    double added = pr->loss_sum - t->loss_base;
    if (train_sum_over_ranks(t, &added, 1, "the epoch's loss") != 0) return -1;
    pr->loss_sum = t->loss_base + added / t->ranks;
    return 0;
}

/* ---- several ranks: what must be the same on every rank ---- */

/* H, continued over BYTES bytes at P: FNV-1a (base/diag.h) eight bytes at a step,
 * which the data sets' sizes call for. */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t bytes)
{
    const unsigned char *b = p;
    size_t k = 0;
    for (; k + 8 <= bytes; k += 8) {
        uint64_t w;
        memcpy(&w, b + k, 8);
        h = (h ^ w) * FNV_PRIME;
    }
    for (; k < bytes; k++) h = (h ^ b[k]) * FNV_PRIME;
    return h;
}

/* The bytes of D's rows as data_gather gives them, a chunk of rows at a time. */
static uint64_t hash_rows(uint64_t h, const Dataset *d)
{
    enum { CHUNK_ROWS = 1024 };   /* rows a chunk: a few MB of host buffer */
    size_t x_row = (size_t)d->x_row * sizeof(float), y_row = (size_t)d->y_row * sizeof(float);   /* i32: as many */
    void *x = xmalloc(CHUNK_ROWS * x_row), *y = xmalloc(CHUNK_ROWS * y_row + 1);
    h = hash_bytes(h, &d->n, sizeof d->n);
    for (int64_t at = 0; at < d->n; at += CHUNK_ROWS) {
        int64_t n = d->n - at < CHUNK_ROWS ? d->n - at : CHUNK_ROWS;
        data_gather(d, NULL, at, n, 0, x, d->y_row ? y : NULL);
        h = hash_bytes(hash_bytes(h, x, (size_t)n * x_row), y, d->y_row ? (size_t)n * y_row : 0);
    }
    free(x), free(y);
    return h;
}

static uint64_t hash_dataset(uint64_t h, const Dataset *d)
{
    if (d->text) return hash_bytes(hash_bytes(h, &d->window, sizeof d->window), d->text, (size_t)d->text_bytes);
    if (d->x_file) return hash_rows(h, d);
    size_t n = (size_t)d->n, y_bytes = d->y_int ? sizeof(int32_t) : sizeof(float);
    const void *y = d->y_int ? (const void *)d->y_i32 : (const void *)d->y_f32;
    h = hash_bytes(h, &d->n, sizeof d->n);
    h = hash_bytes(h, d->x_int ? (const void *)d->x_i32 : (const void *)d->x,
                   n * (size_t)d->x_row * sizeof(float));   /* 4 bytes either way */
    return hash_bytes(h, y, n * (size_t)d->y_row * y_bytes);
}

/* Every rank reads the data itself, and takes its share of the same epoch order: ranks on
 * machines whose data path holds other files would train on other samples, which would
 * show only later, as ranks whose weights differ. */
static int check_same_data(const Trainer *t)
{
    if (t->ranks == 1) return 0;
    uint64_t h = hash_dataset(FNV_BASIS, &t->data.train);
    if (t->data.has_test) h = hash_dataset(h, &t->data.test);
    return comm_agree(t->o->comm, h, "the data the ranks read",
                      "every rank must read the same data (on each machine, the data path "
                      "must hold the same files)");
}

/* MPI counts the elements of a call in an int, and a parameter's gradient is summed (or
 * reduce-scattered, R slices) in one call. */
static int check_collective_sizes(const Trainer *t)
{
    for (int i = 0; i < t->p->nparams && t->ranks > 1; i++) {
        int64_t n = ir_numel(&t->p->tensors[i].shape, NULL);
        if ((n + t->ranks - 1) / t->ranks * t->ranks <= INT_MAX) continue;
        cgc_error("%s:%d: parameter '%s' has %lld elements, more than one MPI call carries "
                  "(2^31 - 1), so its gradient cannot be summed over the ranks; train it on "
                  "one rank, or make the layer smaller", t->o->net_path, t->p->tensors[i].loc.line,
                  t->p->tensors[i].name, (long long)n);
        return -1;
    }
    return 0;
}

/* Several ranks apply the same update to the same sums, so they hold the same tensors
 * after every step (but the slices of shard = optimizer's state, each its own); checked
 * where a checkpoint is made, by a hash of them all. */
static int check_ranks_agree(Trainer *t)
{
    if (t->ranks == 1) return 0;
    if (t->ops->pull_tensors(t) != 0) return -1;
    uint64_t h = FNV_BASIS;
    for (int i = 0; i < t->p->ntensors; i++)
        if (!t->p->tensors[i].sharded)
            h = hash_bytes(h, t->tensors[i], (size_t)ir_numel(&t->p->tensors[i].shape, NULL) * sizeof(float));
    return comm_agree(t->o->comm, h, "the trained tensors",
                      "the ranks' updates diverged, which is a bug in cgc; please report it");
}

/* ---- checkpoints: shard = optimizer's states are slices on the ranks, whole in a file ---- */

/* The tensors as a checkpoint holds them (train.h): this rank's, but for the sharded
 * states: buffers of every rank's slices (zeros) where WHOLE, else NULL. */
static float **checkpoint_buffers(const Trainer *t, bool whole)
{
    const IrProgram *p = t->p;
    float **w = xcalloc((size_t)(p->ntensors ? p->ntensors : 1), sizeof *w);
    for (int i = 0; i < p->ntensors; i++) {
        int64_t n = ir_numel(&p->tensors[i].shape, NULL);
        if (!p->tensors[i].sharded) w[i] = t->tensors[i];
        else if (whole) w[i] = xcalloc((size_t)(n * t->ranks), sizeof(float));
    }
    return w;
}

static void free_checkpoint_buffers(const Trainer *t, float **w)
{
    for (int i = 0; i < t->p->ntensors; i++)
        if (t->p->tensors[i].sharded) free(w[i]);
    free(w);
}

/* Rank 0's W (checkpoint_buffers) := every rank's slices of the sharded states. */
static int gather_slices(Trainer *t, float **w)
{
    for (int i = 0; i < t->p->ntensors; i++) {
        if (!t->p->tensors[i].sharded) continue;
        int64_t n = ir_numel(&t->p->tensors[i].shape, NULL);
        if (t->rank == 0) memcpy(w[i], t->tensors[i], (size_t)n * sizeof(float));
        if (comm_run(t->o->comm, COMM_GATHER, t->rank == 0 ? w[i] : t->tensors[i], n, COMM_F32,
                     "gathering the optimizer state") != 0)
            return -1;
    }
    return 0;
}

static int save(Trainer *t, const TrainProgress *pr)
{
    if (check_ranks_agree(t) != 0) return -1;
    if (!t->o->save_path) return 0;
    if (t->ops->pull_tensors(t) != 0) return -1;
    float **w = checkpoint_buffers(t, t->rank == 0);
    int rc = gather_slices(t, w);
    if (rc == 0 && t->rank == 0) rc = train_state_save(t->o->save_path, t->p, w, pr, t->total_steps);
    free_checkpoint_buffers(t, w);
    return rc;
}

typedef enum { RUN_ON, RUN_DONE, RUN_INTERRUPTED, RUN_FAILED } RunState;

/* A loss this many times the first step's is a run diverging, not noise. */
#define DIVERGED_RATIO 1000.0

/* After the run's first step: its mean loss, from the totals SUM0 and COUNT0 before it. */
static int note_first_loss(Trainer *t, TrainProgress *pr, double sum0, int64_t count0)
{
    if (t->ops->read_totals(t, pr, true) != 0) return -1;
    t->first_loss_known = true;
    t->first_loss = pr->loss_count > count0 ? (pr->loss_sum - sum0) / (double)(pr->loss_count - count0)
                                            : NAN;
    t->first_loss_step = pr->step;
    return 0;
}

/* The epoch's mean loss against the first step's: a warning, once, when it has grown by
 * orders of magnitude (a non-finite loss stops the run; a huge finite one would end it
 * "done"). */
static void warn_if_diverging(Trainer *t, const TrainProgress *pr)
{
    double first = t->first_loss, mean = pr->loss_count ? pr->loss_sum / (double)pr->loss_count : NAN;
    if (t->rank != 0 || t->diverging_said || !t->first_loss_known || !(first > 0) ||
        !isfinite(first) || !(mean > DIVERGED_RATIO * first))
        return;
    t->diverging_said = true;
    train_clear_progress(t);
    cgc_warning("the training loss grew from %.4g at step %lld to %.4g, the mean of epoch %lld: "
                "the run is diverging; try a lower learning rate, clip_norm, or fp32", first,
                (long long)t->first_loss_step, mean, (long long)pr->epoch + 1);
}

/* The progress bar, with the loss totals as far as they are known without waiting. */
static int progress(Trainer *t, TrainProgress *pr, double started)
{
    if (t->live && !t->o->quiet && t->ops->read_totals(t, pr, false) != 0) return -1;
    draw_progress(t, pr, clock_seconds() - started, false);
    return 0;
}

/* fp16's loss scaler halves the scale at every skipped step and doubles it after a long
 * run of good ones. A scale 2^32 below where it started means that step after step
 * overflowed at every scale tried: the run has diverged, and the scaler can no longer
 * recover (a scale of 0 never grows). The run stops, keeping the last checkpoint. */
static int check_scaler(Trainer *t, const TrainProgress *pr)
{
    int s = t->scale_tensor;
    if (s < 0) return 0;
    if (t->ops->pull_tensors(t) != 0) return -1;
    double scale = t->tensors[s][0], start = t->p->tensors[s].init_value;
    if (scale >= ldexp(start, -32)) return 0;
    train_clear_progress(t);
    cgc_error("fp16: the loss scale has collapsed to %g (it started at %g): %lld of the %lld "
              "steps so far were skipped because their gradients overflowed at every scale, "
              "so the run has diverged; try a lower learning rate, clip_norm, or bf16", scale,
              start, (long long)pr->skipped, (long long)pr->step);
    return -1;
}

/* A text run: after the epoch's line, a short sample of what the model writes now (a
 * window's forward pass a byte, where the backend runs the model), unless on the CPU
 * that would cost more than EPOCH_SAMPLE_FLOPS (about half a second of a 2-core CPU),
 * which a model the size of GPT-2 small at a context of 1024 passes four hundred times
 * over. */
enum { EPOCH_SAMPLE_BYTES = 120 };
#define EPOCH_SAMPLE_FLOPS 5e10

static int epoch_sample(Trainer *t, const TrainProgress *pr)
{
    if (t->p->cfg.data != DATA_TEXT || t->o->quiet) return 0;
    double params = 0;
    for (int i = 0; i < t->p->nparams; i++) params += (double)ir_numel(&t->p->tensors[i].shape, NULL);
    double flops = 2 * params * (double)t->p->cfg.text_context * EPOCH_SAMPLE_BYTES;
    if (t->ops->host && flops > EPOCH_SAMPLE_FLOPS) {
        if (!t->no_sample_said)
            printf("cgc: no sample after each epoch: %d bytes from a model of %.0f parameters at "
                   "a context of %lld would take the CPU about %.0f GFLOP\n", EPOCH_SAMPLE_BYTES,
                   params, (long long)t->p->cfg.text_context, flops / 1e9);
        t->no_sample_said = true;
        return 0;
    }
    GenerateOptions g = {.prompt = "", .tokens = EPOCH_SAMPLE_BYTES, .temperature = 0.8,
                         .top_k = 40, .seed = t->p->cfg.seed,
                         .first_draw = (uint64_t)(pr->epoch + 1) << 32};
    printf("sample:");
    return t->ops->sample(t, &g);
}

/* --metrics-every N: after every Nth step, the mean loss of the micro-batches since the
 * previous record (over the ranks, as the epoch's), read back from a device each time. */
static int report_steps(Trainer *t, TrainProgress *pr)
{
    int64_t every = t->o->metrics_every;
    if (!every || pr->step % every != 0) return 0;
    if (t->ops->read_totals(t, pr, true) != 0) return -1;
    double since = pr->loss_sum - t->every_sum;
    int64_t n = pr->loss_count - t->every_count;
    t->every_sum = pr->loss_sum;
    t->every_count = pr->loss_count;
    if (t->ranks > 1 && train_sum_over_ranks(t, &since, 1, "the steps' loss") != 0) return -1;
    if (!t->metrics) return 0;
    fprintf(t->metrics, "{\"step\":%lld", (long long)pr->step);
    json_number(t->metrics, "train_loss", n ? since / t->ranks / (double)n : NAN);
    fputs("}\n", t->metrics);
    return out_flush(t->metrics, TRAIN_METRICS_ROLE, t->o->metrics_path, false);
}

/* Trains the rest of epoch PR->epoch. */
static RunState train_epoch(Trainer *t, TrainProgress *pr)
{
    const TrainConfig *c = &t->p->cfg;
    if (t->ops->epoch_begin(t, pr) != 0) return RUN_FAILED;
    t->loss_base = pr->loss_sum;
    int64_t first_micro = pr->batch_in_epoch;
    double started = clock_seconds() - pr->train_seconds;
    int64_t end = t->steps_per_epoch * c->accumulate;
    double sum0 = pr->loss_sum;
    int64_t count0 = pr->loss_count;
    t->every_sum = sum0;
    t->every_count = count0;
    RunState state = RUN_ON;
    while (pr->batch_in_epoch < end) {
        if (train_step_profiled(t, pr) != 0 || progress(t, pr, started) != 0 ||
            report_steps(t, pr) != 0)
            return RUN_FAILED;
        if (!t->first_loss_known && note_first_loss(t, pr, sum0, count0) != 0) return RUN_FAILED;
        if (!t->o->device && check_scaler(t, pr) != 0) return RUN_FAILED;   /* cheap on the CPU */
        if (pr->step >= t->total_steps) { state = RUN_DONE; break; }
        if (t->o->stop_after && pr->step >= t->o->stop_after) { state = RUN_INTERRUPTED; break; }
    }
    if (t->ops->read_totals(t, pr, true) != 0 || check_scaler(t, pr) != 0 ||
        combine_losses(t, pr) != 0)
        return RUN_FAILED;
    pr->train_seconds = clock_seconds() - started;
    bool epoch_complete = pr->batch_in_epoch >= end;
    EvalResult ev, *evp = NULL;
    /* An interruption mid-epoch is not evaluated; one that falls on the epoch's last step
     * is, as the uninterrupted run would be there (a resumed run starts the next epoch). */
    if ((state != RUN_INTERRUPTED || epoch_complete) && t->data.has_test) {
        if (t->ops->evaluate(t, &ev) != 0) return RUN_FAILED;
        evp = &ev;
    }
    draw_progress(t, pr, pr->train_seconds, true);
    if (report_epoch(t, pr, pr->batch_in_epoch - first_micro, pr->train_seconds, evp) != 0 ||
        epoch_sample(t, pr) != 0)
        return RUN_FAILED;
    warn_if_diverging(t, pr);
    if (epoch_complete) {
        pr->epoch++;
        pr->batch_in_epoch = 0;
        pr->loss_sum = 0;
        pr->loss_count = 0;
        pr->train_seconds = 0;
        if (state == RUN_ON && pr->epoch >= t->epochs) state = RUN_DONE;
    }
    if (save(t, pr) != 0) return RUN_FAILED;
    return state;
}

static const char *precision_text(const Trainer *t)
{
    switch (t->p->cfg.precision) {
    case PREC_FP32: return "fp32";
    case PREC_TF32: return t->ops->emulated ? "tf32 (emulated)" : "tf32";
    case PREC_BF16: return t->ops->emulated ? "bf16 (emulated)" : "bf16";
    case PREC_FP16: return t->ops->emulated ? "fp16 (emulated)" : "fp16";
    }
    return "?";
}

static void print_plan(const Trainer *t, const TrainProgress *pr)
{
    const TrainConfig *c = &t->p->cfg;
    if (t->o->quiet) return;
    printf("cgc: training %s on %s\n", t->p->model_name, t->data.description);
    if (t->o->verbose)
        printf("cgc: the data read and converted in %.1f ms\n", 1e3 * t->load_seconds);
    printf("cgc: %lld steps (%lld per epoch, %lld epoch%s) of batch %lld%s, %s, %s, %s on %s\n",
           (long long)t->total_steps, (long long)t->steps_per_epoch, (long long)t->epochs,
           t->epochs == 1 ? "" : "s",
           (long long)c->batch, c->accumulate > 1 ? " with accumulation" : "",
           config_optimizer_name(c->optimizer), config_schedule_name(c->schedule),
           precision_text(t), t->ops->where(t));
    const char *how = t->o->device ? "the device's collectives" : "MPI";
    if (t->ranks > 1)
        printf("cgc: %d ranks, each taking its %lld or so rows of every batch; gradients summed "
               "over them every step (%s)\n", t->ranks, (long long)(c->batch / t->ranks), how);
    else if (t->o->comm)
        printf("cgc: a job of one rank: its gradients are summed over it every step (%s), as "
               "in a job of several\n", how);
    if (pr->step > 0)
        printf("cgc: resuming at step %lld (epoch %lld, batch %lld)\n", (long long)pr->step,
               (long long)pr->epoch + 1, (long long)pr->batch_in_epoch);
    fflush(stdout);
}

/* The persistent tensors: from the seed, then from the checkpoint when resuming. */
/* A resumed run's progress must be one this run could have reached: its settings (which
 * train_state_load compares) fix the epoch's length, so the step follows from the epoch
 * and the micro-batches taken; steps are skipped only by fp16's scaler, and the loss sum
 * is a number (but in fp16, whose skipped steps may add an overflowed loss). A file that
 * says otherwise was not written by such a run. */
static int check_progress(const Trainer *t, const TrainProgress *pr)
{
    const TrainConfig *c = &t->p->cfg;
    const char *path = t->o->resume_path;
    int64_t micro = t->steps_per_epoch * c->accumulate;
    const char *wrong = NULL;
    if (pr->batch_in_epoch > micro || pr->batch_in_epoch % c->accumulate)
        wrong = "its place in the epoch (cgc.batch_in_epoch) is not a step of this run's epochs";
    else if (pr->step != pr->epoch * t->steps_per_epoch + pr->batch_in_epoch / c->accumulate)
        wrong = "its step (cgc.step) does not follow from its epoch and place in the epoch";
    else if (pr->skipped > pr->step || (pr->skipped && c->precision != PREC_FP16))
        wrong = "it counts skipped steps (cgc.skipped) that this run could not have skipped";
    else if ((!isfinite(pr->loss_sum) && c->precision != PREC_FP16) || pr->loss_count > pr->batch_in_epoch)
        wrong = "its loss so far (cgc.loss_sum, cgc.loss_count) is not one a run records";
    if (!wrong) return 0;
    cgc_error("%s: %s (epoch %lld, micro-batch %lld of %lld, step %lld, %lld skipped); a run "
              "resumes only from a checkpoint that cgc saved, unchanged", path, wrong,
              (long long)pr->epoch, (long long)pr->batch_in_epoch, (long long)micro,
              (long long)pr->step, (long long)pr->skipped);
    return -1;
}

/* Several ranks: what rank 0 read from the checkpoint into W (checkpoint_buffers), sent
 * to the others (the file need not be on their machines); of a sharded state each rank
 * keeps its slice. */
static int share_checkpoint(Trainer *t, float **w, TrainProgress *pr)
{
    Comm *c = t->o->comm;
    for (int i = 0; i < t->p->ntensors && t->ranks > 1; i++) {
        bool sharded = t->p->tensors[i].sharded;
        int64_t n = ir_numel(&t->p->tensors[i].shape, NULL), all = sharded ? n * t->ranks : n;
        float *buf = w[i] ? w[i] : xcalloc((size_t)all, sizeof(float));
        int rc = comm_broadcast(c, buf, (size_t)all * sizeof(float), 0, "sending the checkpoint");
        if (rc == 0 && sharded) memcpy(t->tensors[i], buf + t->rank * n, (size_t)n * sizeof(float));
        if (buf != w[i]) free(buf);
        if (rc != 0) return -1;
    }
    return t->ranks > 1 ? comm_broadcast(c, pr, sizeof *pr, 0, "sending the checkpoint") : 0;
}

static int init_state(Trainer *t, TrainProgress *pr)
{
    if (t->ops->init_tensors(t) != 0) return -1;
    if (!t->o->resume_path) return 0;
    if (t->ops->pull_tensors(t) != 0) return -1;
    bool lead = t->rank == 0;   /* the file is read on rank 0 only (share_checkpoint) */
    float **w = checkpoint_buffers(t, lead);
    int rc = lead && (train_state_load(t->o->resume_path, t->p, w, pr, t->total_steps) != 0 ||
                      check_progress(t, pr) != 0 ||
                      train_state_check_counters(t->o->resume_path, t->p, w, pr) != 0) ? -1 : 0;
    if (rc == 0) rc = share_checkpoint(t, w, pr);
    free_checkpoint_buffers(t, w);
    return rc == 0 ? t->ops->push_tensors(t) : -1;
}

static int setup(Trainer *t, IrProgram *p, const RunOptions *o, TrainProgress *pr)
{
    memset(t, 0, sizeof *t);
    memset(pr, 0, sizeof *pr);
    t->p = p;
    t->o = o;
    t->ops = o->device ? &train_device_backend : &cpu_backend;
    t->rank = o->comm ? comm_rank(o->comm) : 0;
    t->ranks = o->comm ? comm_size(o->comm) : 1;
    CGC_ASSERT(t->ranks == (p->cfg.ranks > 1 ? p->cfg.ranks : 1));
    /* --save writes after the first epoch: find out now, not an epoch later, that it can't. */
    if (t->rank == 0 && o->save_path && st_check_writable(o->save_path) != 0) return -1;
    if (t->rank == 0 && o->profile_path && !(t->profile = profile_open(o->profile_path, p, o->net_path)))
        return -1;
    if (check_collective_sizes(t) != 0) return -1;
    double loading = clock_seconds();
    if (data_load(p, o->src, o->net_path, &t->data) != 0 || check_same_data(t) != 0) return -1;
    t->load_seconds = clock_seconds() - loading;
    if (plan(t) != 0) return -1;
    if (t->ops->open(t) != 0) return -1;
    if (init_state(t, pr) != 0) return -1;
    if (t->rank == 0 && o->metrics_path &&
        !(t->metrics = out_append(TRAIN_METRICS_ROLE, o->metrics_path, &out_json)))
        return -1;
    /* mpirun gives every rank a terminal of its own, whatever the job's output is */
    t->live = isatty(STDOUT_FILENO) && t->ranks == 1;
    return 0;
}

/* The memory this machine has available for new work (MemAvailable), or 0 when unknown. */
static uint64_t memory_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return (uint64_t)kb * 1024;
}

/* A mapped text holds nothing of its own: its pages are the page cache's, shared by the
 * ranks and given back under pressure. */
static uint64_t dataset_bytes(const Dataset *d)
{
    if (d->text) return 0;
    return (uint64_t)d->n * (uint64_t)(d->x_row + d->y_row) * 4;
}

/* What T->ranks ranks hold at least, together, against what the machine has: each the
 * whole data set and the persistent tensors with their gradients. */
static int check_launch_memory(const Trainer *t)
{
    uint64_t data = dataset_bytes(&t->data.train) + dataset_bytes(&t->data.test), tensors = 0;
    for (int i = 0; i < t->p->ntensors; i++)
        tensors += (uint64_t)ir_numel(&t->p->tensors[i].shape, NULL) * 4 * (i < t->p->nparams ? 2 : 1);
    uint64_t rank = data + tensors, avail = memory_available();
    if (avail == 0 || rank * (uint64_t)t->ranks <= avail) return 0;
    char b_data[32], b_tensors[32], b_all[32], b_avail[32];
    diag_format_bytes(data, b_data, sizeof b_data);
    diag_format_bytes(tensors, b_tensors, sizeof b_tensors);
    diag_format_bytes(rank * (uint64_t)t->ranks, b_all, sizeof b_all);
    diag_format_bytes(avail, b_avail, sizeof b_avail);
    uint64_t fit = avail / rank;
    char fits[64] = "not one rank fits";
    if (fit) snprintf(fits, sizeof fits, "at most %llu fit", (unsigned long long)fit);
    cgc_error("%d ranks on this machine would each hold the data set (%s) and the model's "
              "tensors and gradients (%s): at least %s in all, more than the %s it has "
              "available; %s", t->ranks, b_data, b_tensors, b_all, b_avail, fits);
    return -1;
}

int train_check_launch(IrProgram *p, const RunOptions *o, int ranks)
{
    Trainer t;
    memset(&t, 0, sizeof t);
    t.p = p;
    t.o = o;
    t.ranks = ranks;
    CGC_ASSERT(ranks == (p->cfg.ranks > 1 ? p->cfg.ranks : 1));
    int rc = check_collective_sizes(&t) != 0 || data_load(p, o->src, o->net_path, &t.data) != 0 ||
             plan(&t) != 0 || check_launch_memory(&t) != 0 ? -1 : 0;
    data_free(&t.data);
    return rc;
}

/* 0, or -1 when the metrics' last writes fail. */
static int teardown(Trainer *t)
{
    if (t->ops) t->ops->close(t);
    int rc = t->metrics ? out_flush(t->metrics, TRAIN_METRICS_ROLE, t->o->metrics_path, true) : 0;
    data_free(&t->data);
    return rc;
}

/* -v: how long the steps waited for their rows, against the time reading them took. */
static void report_reads(const Prefetch *pf, const char *why)
{
    int depth = prefetch_depth(pf), workers = prefetch_workers(pf);
    printf("cgc: data: the steps waited %.1f ms in all for their rows; reading them took %.1f ms, ",
           1e3 * prefetch_waited(pf), 1e3 * prefetch_read(pf));
    if (depth) printf("%d micro-batch%s ahead on %d host thread%s\n", depth, depth == 1 ? "" : "es",
                      workers, workers == 1 ? "" : "s");
    else printf("in the steps (prefetch = 0%s%s)\n", why ? ": " : "", why ? why : "");
}

static void print_done(const Trainer *t, RunState state, int64_t step, double seconds)
{
    const RunOptions *o = t->o;
    double gemm = t->ops->gemm_seconds(t);
    char share[64] = "";
    if (gemm >= 0)
        snprintf(share, sizeof share, " (%.0f%% of it in GEMMs)", seconds > 0 ? 100.0 * gemm / seconds : 0.0);
    printf("cgc: %s at step %lld in %.1f s%s%s%s\n", state == RUN_INTERRUPTED ? "stopped" : "done",
           (long long)step, seconds, share, o->save_path ? "; saved to " : "",
           o->save_path ? o->save_path : "");
    if (t->prefetch && o->verbose) report_reads(t->prefetch, t->prefetch_why);
    if (t->ranks > 1 && o->verbose) {
        CommStats s = comm_stats(o->comm);
        printf("cgc: rank 0 ran %lld collectives over the %d ranks (%.1f MB in all), and waited "
               "%.3f s for them; comm.h's model predicts %.3f s\n", (long long)s.calls, t->ranks,
               (double)s.bytes / 1e6, s.wait_s, s.model_s);
    }
}

int train_run(IrProgram *p, const RunOptions *o)
{
    Trainer t;
    TrainProgress pr;
    int rc = 1;
    if (setup(&t, p, o, &pr) != 0) goto out;
    print_plan(&t, &pr);
    if (pr.step >= t.total_steps) {
        if (!o->quiet) printf("cgc: nothing to do: the run already took its %lld steps\n", (long long)t.total_steps);
        rc = 0;
        goto out;
    }
    if (o->stop_after && pr.step >= o->stop_after) {
        if (!o->quiet)
            printf("cgc: nothing to do: the run is at step %lld already (asked to stop after %lld)\n",
                   (long long)pr.step, (long long)o->stop_after);
        rc = 0;
        goto out;
    }
    profile_window(&t, &pr);
    double started = clock_seconds();
    RunState state = RUN_ON;
    while (state == RUN_ON) state = train_epoch(&t, &pr);
    if (state == RUN_FAILED) goto out;
    if (!o->quiet) print_done(&t, state, pr.step, clock_seconds() - started);
    rc = 0;
out:
    if (t.profile && !t.profile_to) {     /* no training began: no trace to speak of */
        profile_discard(t.profile);
        t.profile = NULL;
    }
    if (profile_finish(&t) != 0) rc = 1;
    if (teardown(&t) != 0) rc = 1;
    return rc;
}
