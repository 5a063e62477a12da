/* test_devexec.c: the plan runner (runtime/devexec.c) and training on a device
 * (runtime/train_device.c), on the CUDA emulation (tests/emu), against the CPU.
 *
 *  - the arena: every buffer 256-byte aligned, inside the arena, views at their root;
 *    opened without memory reuse, none overlapping;
 *  - the data kernels as the runner launches them: the order of an epoch made on the
 *    device is data_order()'s, element for element;
 *  - train_run on the emulated device and on the CPU reference executor, same model,
 *    seed and steps: final tensors within 1e-4 (relative L2, fp32), the same loss
 *    totals and metrics lines, the device named in the plan line;
 *  - a run saved on the device and resumed on the CPU ends where the CPU alone does;
 *  - a diverging run fails on the device at the step the CPU reports;
 *  - reduce-overhead: when a micro-batch is captured (train_capture_refusal); its runs,
 *    captured once and replayed (the emulation records and replays as a CUDA graph
 *    would, refusing copies and waits inside), match the CPU as the default mode does,
 *    and match the default mode bit for bit, dropout, accumulation, partial batches,
 *    epochs and a resumed run included; when every capture fails, that is said once and
 *    the run, launch by launch, still matches bit for bit;
 *  - --profile on the device: steps 2 to 4, each enclosing one timed event per launch and
 *    GEMM it issued, named by the plan and its kernels (default and reduce-overhead);
 *  - the step times a device run hands over (--bench's).
 *
 * Usage: test_devexec [--asan] (kernels built with AddressSanitizer, which also checks
 * that nothing touches the arena's padding).
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <pthread.h>
#include <pty.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "codegen/perf.h"
#include "driver/compile.h"
#include "driver/pipeline.h"
#include "runtime/data.h"
#include "runtime/autotune.h"
#include "runtime/devexec.h"
#include "runtime/safetensors.h"
#include "runtime/train.h"
#include "runtime/train_internal.h"
#include "tests/check.h"
#include "tests/emu/emu_device.h"
#include "tests/testfiles.h"

static bool asan;
/* The mode the models are compiled in (model_open): eager, or default (fused kernels,
 * in-place updates, memory reused by the plan). */
static PlanMode mode = PLAN_EAGER;

/* A compiled model, its plan, and an emulated device with the plan's kernels. */
typedef struct Model {
    char path[512];
    Source *src;
    IrProgram *p;
    Compiled compiled;      /* the passes after training lowering, as the CLI runs them */
    Plan *plan;
    Device *d;
    char so[256];
} Model;

static bool model_open(Model *m, const char *file, const Override *ov, int nov)
{
    memset(m, 0, sizeof *m);
    if (file[0] == '/') snprintf(m->path, sizeof m->path, "%s", file);     /* tests/models/ */
    else snprintf(m->path, sizeof m->path, "%s/%s", CGC_MODELS_DIR, file);
    m->src = source_load(m->path);
    m->p = m->src ? pipeline_compile(m->src, ov, nov) : NULL;
    CHECK(m->p != NULL);
    if (!m->p) return false;
    CHECK(compile_program(m->p, &(CompileOptions){.mode = mode, .net_path = m->path},
                          &m->compiled) == 0);
    m->plan = m->compiled.plan;
    CHECK(m->plan != NULL);
    if (!m->plan) return false;
    bool ok = emu_build_plan(m->plan, asan, m->so, sizeof m->so) == 0 &&
              emu_device_open(m->so, &m->d) == 0;
    CHECK(ok);
    return ok;
}

static void model_close(Model *m)
{
    if (m->d) m->d->ops->close(m->d);
    if (m->so[0]) emu_remove_build(m->so);
    compiled_free(&m->compiled);
    if (m->p) ir_program_free(m->p);
    if (m->src) source_free(m->src);
}

/* ---- capturing stdout (the plan line), into a file or through a terminal ---- */

static char out_text[65536];

static int stdout_start(void)
{
    fflush(stdout);
    int saved = dup(1), fd = open(tmp_path("stdout.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    close(fd);
    return saved;
}

static const char *stdout_end(int saved)
{
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    FILE *f = fopen(tmp_path("stdout.txt"), "rb");
    size_t n = f ? fread(out_text, 1, sizeof out_text - 1, f) : 0;
    if (f) fclose(f);
    out_text[n] = '\0';
    fputs(out_text, stdout);    /* still in the test's log */
    return out_text;
}

/* A pseudo-terminal as stdout, so that the run draws its progress bar (and reads the
 * totals without waiting); a thread drains it so that the run never blocks on it. False
 * with stdout as it was when there is none (a machine without ptys). */
typedef struct Tty {
    int master, saved;
    size_t len;
    pthread_t reader;
} Tty;

static void *tty_drain(void *arg)
{
    Tty *t = arg;
    char chunk[4096];
    for (ssize_t n; (n = read(t->master, chunk, sizeof chunk)) > 0;) {
        size_t room = sizeof out_text - 1 - t->len, take = (size_t)n < room ? (size_t)n : room;
        memcpy(out_text + t->len, chunk, take);
        t->len += take;
    }
    return NULL;
}

static bool tty_start(Tty *t)
{
    int slave;
    memset(t, 0, sizeof *t);
    if (openpty(&t->master, &slave, NULL, NULL, NULL) != 0) return false;
    fflush(stdout);
    t->saved = dup(1);
    dup2(slave, 1);
    close(slave);
    if (pthread_create(&t->reader, NULL, tty_drain, t) == 0) return true;
    dup2(t->saved, 1);
    close(t->saved);
    close(t->master);
    return false;
}

static const char *tty_end(Tty *t)
{
    fflush(stdout);
    dup2(t->saved, 1);          /* the last slave closes: the reader sees the end */
    close(t->saved);
    pthread_join(t->reader, NULL);
    close(t->master);
    out_text[t->len] = '\0';
    return out_text;
}

/* ---- runs ---- */

typedef struct RunSpec {
    Device *device;             /* NULL: the CPU */
    const char *save, *resume, *metrics, *profile;
    StepTimes *times;
    int64_t stop_after;
    int64_t metrics_every;      /* --metrics-every; 0: epochs only */
    bool tty;                   /* stdout a terminal: the progress bar is drawn */
    double tune_budget_s;       /* max-autotune; 0: the runtime's */
    const char *tune_file;      /* max-autotune: --tune-file; NULL: the cache */
    bool detect_anomaly;
    char *samples;              /* a text model's "sample:" lines, copied here (4096 bytes) */
    const char *expect;         /* text the run must print, or NULL */
    char *text;                 /* what it printed, copied here (TEXT_LEN bytes), or NULL */
} RunSpec;

enum { TEXT_LEN = 16384 };

/* The samples of TEXT into OUT (4096 bytes), one after another: each "sample:", the empty
 * prompt's newline, 120 bytes (train.c's EPOCH_SAMPLE_BYTES, escaped one for one) and a
 * newline. */
enum { SAMPLE_TEXT = 7 + 1 + 120 + 1 };
static void copy_samples(const char *text, char *out)
{
    size_t at = 0;
    out[0] = '\0';
    for (const char *c = text; (c = strstr(c, "sample:")) != NULL; c++) {
        size_t len = strnlen(c, SAMPLE_TEXT);
        if (at + len >= 4096) break;
        memcpy(out + at, c, len);
        out[at += len] = '\0';
    }
}

static int median_reports;      /* device runs long enough to report a median step time */
static int captures;            /* "graph ... captured" lines of reduce-overhead runs */

static int run(Model *m, const RunSpec *s)
{
    RunOptions o = {
        .net_path = m->path, .src = m->src, .save_path = s->save, .resume_path = s->resume,
        .metrics_path = s->metrics, .stop_after = s->stop_after, .device = s->device,
        .metrics_every = s->metrics_every,
        .profile_path = s->profile, .step_times = s->times, .tune_budget_s = s->tune_budget_s,
        .tune_file = s->tune_file, .plan = s->device ? m->plan : NULL, .verbose = s->device != NULL,
        .detect_anomaly = s->detect_anomaly,
    };
    Tty tty;
    int saved = -1;
    /* without a terminal, the run goes on into the file and the terminal's checks fail */
    bool on_tty = s->tty && tty_start(&tty);
    if (s->tty) CHECK(on_tty);
    if (!on_tty) saved = stdout_start();
    int rc = train_run(m->p, &o);
    const char *text = on_tty ? tty_end(&tty) : stdout_end(saved);
    if (s->samples) copy_samples(text, s->samples);
    if (s->text) {
        size_t len = strnlen(text, TEXT_LEN - 1);
        memcpy(s->text, text, len);
        s->text[len] = '\0';
    }
    if (s->expect && !strstr(text, s->expect)) {
        fprintf(stderr, "  the run did not print \"%s\":\n%s", s->expect, text);
        CHECK(false);
    }
    char where[200];
    /* a terminal ends lines with \r\n */
    snprintf(where, sizeof where, " on %s%s", s->device ? s->device->name : "the CPU",
             on_tty ? "\r\n" : "\n");
    CHECK(strstr(text, where) != NULL);
    if (on_tty) CHECK(strstr(text, "\repoch 1/") && strstr(text, "] ") && strstr(text, " loss "));
    /* -v on a device: the step time, or why there is none (fewer steps than the warm-up) */
    if (s->device && rc == 0) {
        CHECK(strstr(text, "cgc: median step ") || strstr(text, "cgc: step time not measured"));
        median_reports += strstr(text, "cgc: median step ") != NULL;
        /* and then the step before the timed ones, launch by launch, against the model */
        if (strstr(text, "cgc: median step ") && !s->profile) {
            CHECK(strstr(text, "cgc: step 50 launch by launch against the performance model (H200 SXM, a "
                               "part the model knows no figures for: as if): ") != NULL);
            /* and how many of the launches that move much reach 70% of the roofline */
            const char *goal = strstr(text, "cgc:   of the ");
            int big = -1, short_of = -1;
            CHECK(goal && sscanf(goal, "cgc:   of the %d launches that move over 1 MB, %d reach under 70%% "
                                       "of the roofline", &big, &short_of) == 2 && short_of >= 0 && short_of <= big);
        }
        char capture_line[64];
        snprintf(capture_line, sizeof capture_line, "cgc: %s: graph ", plan_mode_name(mode));
        for (const char *c = text; (c = strstr(c, capture_line)); c++) {
            captures++;
            /* on a terminal, on a line of its own: the progress bar's cleared first */
            if (on_tty) CHECK(c - text >= 4 && memcmp(c - 4, "\r\033[K", 4) == 0);
        }
        /* only a reduce-overhead or max-autotune plan captures */
        CHECK(plan_mode_captures(mode) || !strstr(text, ": graph "));
        /* and the memory line bench/bench_default.py reads; the emulation tells the memory
         * in use only when given a size (emu_device_memory) */
        const char *mem = strstr(text, "cgc: device memory: plan arena ");
        size_t arena = 0, used = 0;
        CHECK(mem && sscanf(mem, "cgc: device memory: plan arena %zu bytes", &arena) == 1 && arena > 0);
        const char *in_use = mem ? strstr(mem, "), in use ") : NULL;
        CHECK(in_use && (strncmp(in_use, "), in use not known on ", 23) == 0 ||
                         (sscanf(in_use, "), in use %zu bytes", &used) == 1 && used >= arena)));
    }
    return rc;
}

/* ---- the data ----
 *
 * mlp and resmlp read fashion-mnist, whose 60,000 examples took two seconds to load in
 * every run and whose 10,000 test examples, evaluated on the emulation, most of a short
 * run's time. What is compared is the device against the CPU on the same data, so the
 * runs read the first examples of each file instead: a directory of IDX files made at the
 * start, found first through CGC_DATA_PATH (runtime/data.c). */
enum { TRAIN_ROWS = 4096, TEST_ROWS = 500 };   /* 500: the evaluation ends in a partial batch */

/* The first ROWS records of the IDX file FROM (read by runtime/data.c's reader) into the
 * plain IDX file TO. */
static bool cut_idx(const char *from, const char *to, int64_t rows)
{
    int rank;
    int64_t dims[IDX_MAX_RANK];
    uint8_t *bytes = NULL;
    if (idx_read(from, &rank, dims, &bytes) != 0) return false;
    int64_t record = 1;
    for (int i = 1; i < rank; i++) record *= dims[i];
    if (dims[0] > rows) dims[0] = rows;
    unsigned char head[4 + 4 * IDX_MAX_RANK] = {0, 0, 0x08, (unsigned char)rank};
    for (int i = 0; i < rank; i++)
        for (int k = 0; k < 4; k++) head[4 + 4 * i + k] = (unsigned char)(dims[i] >> (24 - 8 * k));
    FILE *out = fopen(to, "wb");
    size_t nhead = 4 + 4 * (size_t)rank, nbody = (size_t)(record * dims[0]);
    bool ok = out && fwrite(head, 1, nhead, out) == nhead && fwrite(bytes, 1, nbody, out) == nbody;
    if (out && fclose(out) != 0) ok = false;
    free(bytes);
    return ok;
}

/* TMPDIR/data/fashion-mnist, first on CGC_DATA_PATH. */
static void small_fashion_mnist(void)
{
    static const char *const names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    char data[128], dir[160], from[256], to[256];
    snprintf(data, sizeof data, "%s/data", tmpdir);
    snprintf(dir, sizeof dir, "%s/fashion-mnist", data);
    CHECK(mkdir(data, 0700) == 0 && mkdir(dir, 0700) == 0);
    for (int i = 0; i < 4; i++) {
        snprintf(from, sizeof from, "/usr/share/datasets/fashion-mnist/%s.gz", names[i]);
        snprintf(to, sizeof to, "%s/%s", dir, names[i]);
        CHECK(cut_idx(from, to, i < 2 ? TRAIN_ROWS : TEST_ROWS));
    }
    CHECK(setenv("CGC_DATA_PATH", data, 1) == 0);
}

/* The small IDX split's images and labels as a directory of .npy files (tensors(...)),
 * its path into DIR. */
static void small_arrays(char *dir, size_t n)
{
    snprintf(dir, n, "%s/arrays", tmpdir);
    CHECK(mkdir(dir, 0700) == 0);
    static const char *const from[2] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"};
    static const char *const to[2] = {"x.npy", "y.npy"};
    for (int i = 0; i < 2; i++) {
        char idx[512], npy[512];
        snprintf(idx, sizeof idx, "%s/data/fashion-mnist/%s", tmpdir, from[i]);
        snprintf(npy, sizeof npy, "%s/%s", dir, to[i]);
        int rank;
        int64_t dims[IDX_MAX_RANK];
        uint8_t *bytes = NULL;
        CHECK_EQ_INT(idx_read(idx, &rank, dims, &bytes), 0);
        int64_t shape[2] = { dims[0], i == 0 ? dims[1] * dims[2] : 0 }, count = shape[0] * (i == 0 ? shape[1] : 1);
        FILE *f = fopen(npy, "wb");
        CHECK(f != NULL);
        if (f && bytes) {
            arrays_npy_header(f, "|u1", shape, i == 0 ? 2 : 1);
            CHECK(fwrite(bytes, 1, (size_t)count, f) == (size_t)count);
        }
        if (f) fclose(f);
        free(bytes);
    }
}

/* ---- comparing checkpoints and metrics ---- */

static double rel_l2(const float *got, const float *want, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = (double)got[i] - want[i];
        num += e * e;
        den += (double)want[i] * want[i];
    }
    if (!(num == num)) return INFINITY;     /* NaN never passes */
    return den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
}

/* Checkpoint F's metadata KEY as a number; a failed check and NaN when it is missing. */
static double meta_number(const StFile *f, const char *key)
{
    const char *v = st_meta(f, key);
    if (!v) fprintf(stderr, "  checkpoint metadata has no %s\n", key);
    CHECK(v != NULL);
    return v ? strtod(v, NULL) : NAN;
}

static int64_t st_elements(const StTensor *t)
{
    int64_t n = 1;
    for (int k = 0; k < t->rank; k++) n *= t->shape[k];
    return n;
}

/* The elements of tensors G and W when both are F32 of one shape, what rel_l2 reads from
 * each; else -1 after a failed check (a file's own shape is no bound on the other's). */
static int64_t f32_elements(const StTensor *g, const StTensor *w)
{
    bool same = strcmp(g->dtype, "F32") == 0 && strcmp(w->dtype, "F32") == 0 && g->rank == w->rank;
    for (int k = 0; same && k < w->rank; k++) same = g->shape[k] == w->shape[k];
    if (!same)
        fprintf(stderr, "  tensor %s: %s of %lld elements in one file, %s of %lld in the other\n",
                w->name, g->dtype, (long long)st_elements(g), w->dtype, (long long)st_elements(w));
    CHECK(same);
    return same ? st_elements(w) : -1;
}

/* Every tensor of GOT within TOL of WANT; the position metadata equal; loss sums close. */
static void compare_checkpoints(const char *got_path, const char *want_path, double tol)
{
    StFile *got = st_load(got_path), *want = st_load(want_path);
    CHECK(got && want);
    if (!got || !want) goto out;
    CHECK_EQ_INT(st_count(got), st_count(want));
    for (int i = 0; i < st_count(want); i++) {
        const StTensor *w = st_get(want, i), *g = st_find(got, w->name);
        CHECK(g != NULL);
        if (!g) continue;
        int64_t n = f32_elements(g, w);
        if (n < 0) continue;
        double err = rel_l2(g->data, w->data, n);
        if (err > tol || getenv("CGC_TEST_VERBOSE"))
            fprintf(stderr, "  tensor %s: relative L2 error %.3g\n", w->name, err);
        CHECK(err <= tol);
    }
    static const char *exact[] = {"cgc.epoch", "cgc.batch_in_epoch", "cgc.step", "cgc.skipped",
                                  "cgc.loss_count", "cgc.total_steps"};
    for (size_t k = 0; k < sizeof exact / sizeof exact[0]; k++)
        CHECK_STR(st_meta(got, exact[k]), st_meta(want, exact[k]) ? st_meta(want, exact[k]) : "?");
    CHECK_CLOSE(meta_number(got, "cgc.loss_sum"), meta_number(want, "cgc.loss_sum"), 1e-6, tol);
out:
    if (got) st_free(got);
    if (want) st_free(want);
}

static double json_field(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = strstr(line, pat);
    return at ? strtod(at + strlen(pat), NULL) : NAN;
}

/* The same lines, with the same epochs and steps and close losses. */
static void compare_metrics(const char *got_path, const char *want_path, double tol)
{
    FILE *g = fopen(got_path, "r"), *w = fopen(want_path, "r");
    CHECK(g && w);
    char gl[1024], wl[1024];
    int lines = 0;
    while (g && w && fgets(wl, sizeof wl, w)) {
        bool more = fgets(gl, sizeof gl, g) != NULL;
        CHECK(more);    /* GOT has a line for each of WANT's */
        if (!more) break;
        lines++;
        bool epoch = strstr(wl, "\"epoch\"") != NULL;   /* else a --metrics-every record */
        CHECK(epoch == (strstr(gl, "\"epoch\"") != NULL));
        if (epoch) CHECK_EQ_INT(json_field(gl, "epoch"), json_field(wl, "epoch"));
        CHECK_EQ_INT(json_field(gl, "step"), json_field(wl, "step"));
        CHECK_CLOSE(json_field(gl, "train_loss"), json_field(wl, "train_loss"), 1e-6, tol);
        if (strstr(wl, "test_loss"))
            CHECK_CLOSE(json_field(gl, "test_loss"), json_field(wl, "test_loss"), 1e-6, tol);
        if (strstr(wl, "test_accuracy"))   /* one row may flip its argmax */
            CHECK_CLOSE(json_field(gl, "test_accuracy"), json_field(wl, "test_accuracy"),
                        1.0 / TEST_ROWS + 1e-9, 0);
    }
    CHECK(lines > 0);
    CHECK(g && !fgets(gl, sizeof gl, g));
    if (g) fclose(g);
    if (w) fclose(w);
}

/* ---- the arena ---- */

/* The runner places buffers where the memory plan says (test_memplan checks the plan's
 * liveness itself): aligned, views on their roots, all inside the arena; opened without
 * reuse, no two buffers share a byte. */
static void check_arena(Model *m, bool reuse)
{
    int64_t symmax[IR_MAX_SYMBOLS] = {100};
    DevExec *e = reuse ? devexec_new(m->plan, m->d, symmax, m->path)
                       : devexec_new_unshared(m->plan, m->d, symmax, m->path);
    CHECK(e != NULL);
    if (!e) return;
    const Plan *plan = m->plan;
    size_t arena = devexec_arena_bytes(e);
    DevPtr base = devexec_buffer(e, 0);
    for (int b = 0; b < plan->nbuffers; b++) {
        DevPtr at = devexec_buffer(e, b);
        CHECK(at % 256 == 0);
        if (plan->buffers[b].alias_of >= 0) {
            CHECK(at == devexec_buffer(e, plan->buffers[b].alias_of));
            continue;
        }
        size_t bytes = plan_buffer_bytes(plan, b, symmax);
        CHECK(at >= base && at + bytes <= base + arena);
        for (int c = 0; c < b && !reuse; c++) {     /* no two buffers share a byte */
            if (plan->buffers[c].alias_of >= 0) continue;
            DevPtr o = devexec_buffer(e, c);
            size_t ob = plan_buffer_bytes(plan, c, symmax);
            if (bytes && ob && !(at + bytes <= o || o + ob <= at)) {
                fprintf(stderr, "  buffers %d and %d overlap\n", b, c);
                CHECK(!"buffers overlap");
            }
        }
    }
    devexec_free(e);
}

/* ---- the performance model's bytes against the emulation's count ---- */

/* Whether COUNTED bytes (whole pages) agree with the model's MODEL: within a tenth, and a
 * page for each of the launch's NBUF buffers (the arena's buffers share pages). */
static bool bytes_agree(double counted, double model, int nbuf)
{
    return fabs(counted - model) <= 0.1 * model + 4096.0 * nbuf;
}

/* FILE's training step on the emulation, every launch's pages counted, against
 * perf_step's bytes read and written for each launch that moves more than 1 MB: the model
 * cannot drift from the kernels it prices. */
static void check_bytes_model(const char *file, const Override *ov, int nov)
{
    printf("the bytes each launch of %s moves: the emulation's count against the model\n", file);
    PlanMode was = mode;
    mode = PLAN_DEFAULT;
    Model m;
    if (model_open(&m, file, ov, nov)) {
        emu_device_count_bytes(m.d, true);
        int64_t symvals[IR_MAX_SYMBOLS] = {m.p->cfg.batch};
        DevExec *e = devexec_new(m.plan, m.d, symvals, m.path);
        CHECK(e && devexec_init_tensors(e, 1) == 0);
        DevFeed feed = { .symvals = { m.p->cfg.batch } };
        feed.runtime[IR_RT_TOTAL_STEPS] = 100;
        emu_device_counted(m.d, &(int){0});   /* the arena's set-up */
        CHECK(e && devexec_run(e, &m.p->train, &feed) == 0);
        int n, at = 0, compared = 0;
        const EmuLaunchBytes *got = emu_device_counted(m.d, &n);
        const PlanGraph *pg = &m.plan->graph[PG_TRAIN];
        for (int i = 0; i < pg->nsteps && e; i++) {
            if (pg->steps[i].kind != STEP_LAUNCH) continue;
            const PlanKernel *k = &m.plan->kernels[pg->steps[i].launch.kernel];
            CHECK(at < n && strcmp(got[at].kernel, k->name) == 0);
            if (at >= n) break;
            PerfStep p = perf_step(m.plan, PG_TRAIN, i, symvals, &perf_parts[0]);
            const EmuLaunchBytes *c = &got[at++];
            if (getenv("CGC_TEST_VERBOSE"))
                printf("    %-40s read %9llu written %9llu; the model %9.0f and %9.0f\n", k->name,
                       (unsigned long long)c->read, (unsigned long long)c->written, p.read, p.written);
            if (p.read + p.written <= 1e6) continue;
            compared++;
            if (bytes_agree((double)c->read, p.read, k->nparams) &&
                bytes_agree((double)c->written, p.written, k->nparams))
                continue;
            fprintf(stderr, "  %s: read %llu, written %llu; the model %.0f and %.0f\n", k->name,
                    (unsigned long long)c->read, (unsigned long long)c->written, p.read, p.written);
            CHECK(!"the model's bytes differ from the emulation's count");
        }
        CHECK_EQ_INT(at, n);
        printf("  %d launches, %d of them moving more than 1 MB compared\n", at, compared);
        CHECK(compared > 0);
        devexec_free(e);
    }
    model_close(&m);
    mode = was;
}

/* The parts the model prices a device as, by the names drivers give them. */
static void check_part_names(void)
{
    const char *names[][2] = {{"NVIDIA H200", "H200 SXM"}, {"NVIDIA H100 80GB HBM3", "H100 SXM"},
                              {"NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"},
                              {"NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"}, {"NVIDIA H100 PCIe", NULL},
                              {"NVIDIA GeForce RTX 4090", NULL}, {"CUDA emulation", NULL}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const PerfPart *p = perf_part_named(names[i][0]);
        CHECK(names[i][1] ? p && strcmp(p->name, names[i][1]) == 0 : p == NULL);
    }
}

/* ---- the data order made on the device ---- */

static void check_order(Model *m, int64_t n, int64_t epoch, bool shuffle, unsigned draw_grid)
{
    int64_t symmax[IR_MAX_SYMBOLS] = {1};
    DevExec *e = devexec_new(m->plan, m->d, symmax, m->path);
    CHECK(e != NULL);
    if (!e) return;
    DevPtr draws = 0, order = 0;
    CHECK_EQ_INT(m->d->ops->alloc(m->d, (size_t)n * 4, &draws), 0);
    CHECK_EQ_INT(m->d->ops->alloc(m->d, (size_t)n * 4, &order), 0);
    uint64_t seed = m->p->cfg.seed;
    int64_t shuffle_flag = shuffle;
    void *a[4] = {&draws, &n, &seed, &epoch}, *b[4] = {&order, &draws, &n, &shuffle_flag};
    /* a data kernel the plan lacks is -1, which devexec_launch asserts against */
    int draw_k = m->plan->data_kernel[PDK_ORDER_DRAWS], shuffle_k = m->plan->data_kernel[PDK_ORDER_SHUFFLE];
    bool have = draw_k >= 0 && draw_k < m->plan->nkernels && shuffle_k >= 0 && shuffle_k < m->plan->nkernels;
    CHECK(have);
    if (have) {
        CHECK_EQ_INT(devexec_launch(e, draw_k, draw_grid, a, "draws"), 0);
        CHECK_EQ_INT(devexec_launch(e, shuffle_k, 1, b, "shuffle"), 0);
    }
    int32_t *got = xmalloc((size_t)n * sizeof *got);
    int64_t *want = xmalloc((size_t)n * sizeof *want);
    CHECK_EQ_INT(m->d->ops->download(m->d, got, order, (size_t)n * 4), 0);
    data_order(seed, epoch, shuffle, n, want);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += got[i] != want[i];
    if (bad) fprintf(stderr, "  order of %lld, epoch %lld: %lld differ\n", (long long)n, (long long)epoch, (long long)bad);
    CHECK_EQ_INT(bad, 0);
    free(got);
    free(want);
    m->d->ops->free(m->d, draws);
    m->d->ops->free(m->d, order);
    devexec_free(e);
}

/* ---- training ---- */

/* Trains FILE with the overrides on the device and on the CPU, and compares; TTY: the
 * device run draws its progress bar on a terminal. */
/* --metrics-every of check_training's runs: each record's loss is read back from the
 * device mid-epoch, and must be the CPU's */
static int64_t metrics_every;

static void check_training(const char *file, const Override *ov, int nov, double tol, bool tty)
{
    printf("training %s on the emulation (%s mode) and the CPU\n", file, plan_mode_name(mode));
    Model m;
    if (model_open(&m, file, ov, nov)) {
        char dev_save[256], cpu_save[256], dev_metrics[256], cpu_metrics[256];
        snprintf(dev_save, sizeof dev_save, "%s", tmp_path("dev.safetensors"));
        snprintf(cpu_save, sizeof cpu_save, "%s", tmp_path("cpu.safetensors"));
        snprintf(dev_metrics, sizeof dev_metrics, "%s", tmp_path("dev.jsonl"));
        snprintf(cpu_metrics, sizeof cpu_metrics, "%s", tmp_path("cpu.jsonl"));
        unlink(dev_metrics);
        unlink(cpu_metrics);
        static char dev_samples[4096], cpu_samples[4096];
        RunSpec dev = {.device = m.d, .save = dev_save, .metrics = dev_metrics, .tty = tty,
                       .metrics_every = metrics_every, .samples = dev_samples};
        CHECK_EQ_INT(run(&m, &dev), 0);
        CHECK_EQ_INT(run(&m, &(RunSpec){.save = cpu_save, .metrics = cpu_metrics,
                                        .metrics_every = metrics_every, .samples = cpu_samples}), 0);
        compare_checkpoints(dev_save, cpu_save, tol);
        compare_metrics(dev_metrics, cpu_metrics, tol);
        /* a text model's samples after each epoch, the device's drawn on the device: the
         * CPU's bytes, from weights equal within TOL (tests/emu/text/chars.net's are) */
        CHECK(strcmp(dev_samples, cpu_samples) == 0);
        if (m.p->cfg.data == DATA_TEXT) CHECK(strstr(dev_samples, "sample:") != NULL);
    }
    model_close(&m);
}

/* Half the run on the device, saved; the rest on the CPU from that file: the same end as
 * the CPU alone. */
static void check_resume_on_cpu(const char *file, const Override *ov, int nov, int64_t stop)
{
    printf("training %s: %lld steps on the emulation, the rest on the CPU\n", file, (long long)stop);
    Model m;
    if (model_open(&m, file, ov, nov)) {
        char half[256], resumed[256], straight[256];
        snprintf(half, sizeof half, "%s", tmp_path("half.safetensors"));
        snprintf(resumed, sizeof resumed, "%s", tmp_path("resumed.safetensors"));
        snprintf(straight, sizeof straight, "%s", tmp_path("straight.safetensors"));
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = half, .stop_after = stop}), 0);
        CHECK_EQ_INT(run(&m, &(RunSpec){.resume = half, .save = resumed}), 0);
        CHECK_EQ_INT(run(&m, &(RunSpec){.save = straight}), 0);
        compare_checkpoints(resumed, straight, 1e-4);
    }
    model_close(&m);
}

/* ---- --profile on a device ---- */

static const cJSON *arg(const cJSON *ev, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ev, "args"), key);
}

static double number(const cJSON *ev, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(ev, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* FILE (accumulate 1) trained with --profile on the emulation in the current mode: the
 * trace holds steps 2 to 4, each enclosing one event per launch and GEMM it issued
 * (the train graph's steps and the data pipeline's gathers, loss tracker and, in
 * reduce-overhead, step advance), named by their plan steps, with their kernels. */
static void check_profile(const char *file, const Override *ov, int nov)
{
    printf("--profile of %s on the emulation (%s mode)\n", file, plan_mode_name(mode));
    char path[256];
    snprintf(path, sizeof path, "%s", tmp_path("trace.json"));
    Model m;
    if (!model_open(&m, file, ov, nov)) {
        model_close(&m);
        return;
    }
    CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .profile = path}), 0);
    const PlanGraph *train = &m.plan->graph[PG_TRAIN];
    int per_step = train->nsteps + 3 + (m.plan->step_state >= 0);
    FILE *f = fopen(path, "rb");
    static char text[1 << 22];
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = '\0';
    cJSON *trace = cJSON_Parse(text);
    CHECK(trace != NULL);
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(trace, "traceEvents");
    const cJSON *other = cJSON_GetObjectItemCaseSensitive(trace, "otherData");
    CHECK(cJSON_IsArray(events));
    const cJSON *device = cJSON_GetObjectItemCaseSensitive(other, "device");
    CHECK(cJSON_IsString(device) && strcmp(device->valuestring, "CUDA emulation") == 0);
    int steps = 0, in_step = 0, gemms = 0;
    double from = 0, to = 0, last_end = 0;
    const cJSON *ev;
    cJSON_ArrayForEach(ev, events) {
        const cJSON *cat = cJSON_GetObjectItemCaseSensitive(ev, "cat");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(ev, "name");
        CHECK(cJSON_IsString(cat) && cJSON_IsString(name) && name->valuestring[0]);
        if (!cJSON_IsString(cat) || !cJSON_IsString(name)) break;
        double ts = number(ev, "ts"), dur = number(ev, "dur");
        CHECK(ts >= 0 && dur >= 0);
        if (strcmp(cat->valuestring, "step") == 0) {
            if (steps > 0) CHECK_EQ_INT(in_step, per_step);
            char want[32];
            snprintf(want, sizeof want, "step %d", steps + 2);
            CHECK_STR(name->valuestring, want);
            steps++, in_step = 0;
            from = ts, to = ts + dur;
            continue;
        }
        /* a launch or GEMM: inside its step, after the one before, its kernel named */
        CHECK(ts >= from && ts + dur <= to + 1e-3 && ts >= last_end - 1e-3);
        last_end = ts + dur;
        in_step++;
        const cJSON *kernel = arg(ev, "kernel"), *graph = arg(ev, "graph");
        CHECK(cJSON_IsString(kernel) && cJSON_IsString(graph));
        if (!cJSON_IsString(kernel) || !cJSON_IsString(graph)) continue;
        bool gemm = strcmp(cat->valuestring, "gemm") == 0;
        gemms += gemm;
        CHECK(gemm ? strcmp(kernel->valuestring, "cuBLAS") == 0
                   : strcmp(cat->valuestring, "kernel") == 0);
        bool known = gemm;
        for (int k = 0; k < m.plan->nkernels && !known; k++)
            known = strcmp(m.plan->kernels[k].name, kernel->valuestring) == 0;
        CHECK(known);
        CHECK(strcmp(graph->valuestring, "train") == 0 ||
              strcmp(graph->valuestring, "data pipeline") == 0);
    }
    CHECK_EQ_INT(steps, 3);
    CHECK_EQ_INT(in_step, per_step);
    CHECK(gemms > 0);
    cJSON_Delete(trace);
    model_close(&m);
}

/* The step times a run hands over (--bench's): every step after the warm-up timed, in
 * order p10 <= median <= p90, and the train graph's launches and GEMMs as run. */
static void check_step_times(void)
{
    printf("step times of a run on the emulation (%s mode)\n", plan_mode_name(mode));
    Override ov[3] = {{"precision", "precision", "fp32"}, {"steps", "steps", "60"},
                      {"batch", "batch", "32"}};
    Model m;
    if (model_open(&m, "regression.net", ov, 3)) {
        StepTimes st = {.n = -1};
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .times = &st}), 0);
        CHECK_EQ_INT(st.n, 60 - TRAIN_TIMING_WARMUP);
        CHECK(st.p10_ms > 0 && st.p10_ms <= st.median_ms && st.median_ms <= st.p90_ms);
        int gemms = 0;      /* no fused MLP run here: the plan's train graph as it is */
        for (int i = 0; i < m.plan->graph[PG_TRAIN].nsteps; i++)
            gemms += m.plan->graph[PG_TRAIN].steps[i].kind == STEP_GEMM;
        CHECK_EQ_INT(st.launches, m.plan->graph[PG_TRAIN].nsteps);
        CHECK_EQ_INT(st.gemms, gemms);
        CHECK(gemms > 0);
    }
    model_close(&m);
}

/* ---- reduce-overhead ---- */

/* When a micro-batch is replayed from a graph, and why not otherwise. */
static void check_capture_refusal(void)
{
    printf("reduce-overhead: which micro-batches are captured\n");
    CaptureQuery ok = {.mode = PLAN_REDUCE_OVERHEAD, .device_can = true, .count = 64,
                       .batch = 64, .runs = 1};
    CHECK(train_capture_refusal(&ok) == NULL);
    ok.runs = 1000;
    CHECK(train_capture_refusal(&ok) == NULL);
    ok.mode = PLAN_MAX_AUTOTUNE;
    CHECK(train_capture_refusal(&ok) == NULL);
    struct { CaptureQuery q; const char *why; } refused[] = {
        {{.mode = PLAN_DEFAULT, .device_can = true, .count = 64, .batch = 64, .runs = 1}, "neither reduce-overhead nor max-autotune"},
        {{.mode = PLAN_EAGER, .device_can = true, .count = 64, .batch = 64, .runs = 1}, "neither reduce-overhead nor max-autotune"},
        {{.mode = PLAN_REDUCE_OVERHEAD, .count = 64, .batch = 64, .runs = 1}, "cannot record"},
        {{.mode = PLAN_REDUCE_OVERHEAD, .device_can = true, .failed = true, .count = 64, .batch = 64,
          .runs = 1}, "earlier capture failed"},
        {{.mode = PLAN_REDUCE_OVERHEAD, .device_can = true, .count = 17, .batch = 64, .runs = 5},
         "partial batch"},
        {{.mode = PLAN_REDUCE_OVERHEAD, .device_can = true, .count = 64, .batch = 64}, "warm-up"},
        {{.mode = PLAN_REDUCE_OVERHEAD, .device_can = true, .count = 64, .batch = 64, .runs = 3,
          .profiled = true}, "profiled step"},
        {{.mode = PLAN_REDUCE_OVERHEAD, .device_can = true, .count = 64, .batch = 64, .runs = 3,
          .checked = true}, "anomaly check"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const char *why = train_capture_refusal(&refused[i].q);
        CHECK(why && strstr(why, refused[i].why));
    }
}

/* FILE trained on the emulation in the default mode, saved to SAVE: what the capturing
 * modes must equal bit for bit. */
static void train_default(const char *file, const Override *ov, int nov, const char *save)
{
    Model m;
    mode = PLAN_DEFAULT;
    if (model_open(&m, file, ov, nov))
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = save}), 0);
    model_close(&m);
}

/* FILE trained on the emulation in the default mode and in reduce-overhead: the same
 * weights and totals bit for bit. With RESUME_AT > 0 the reduce-overhead run stops there
 * and a second one resumes it (the step counter written where the sequence jumps). With
 * FAIL, every capture fails: said once, and the run goes on launch by launch. */
static void check_replay_exact(const char *file, const Override *ov, int nov, int64_t resume_at,
                               bool fail)
{
    printf("training %s on the emulation: reduce-overhead against default, bit for bit%s%s\n",
           file, resume_at ? ", resumed" : "", fail ? ", every capture failing" : "");
    char want[256], got[256], half[256];
    snprintf(want, sizeof want, "%s", tmp_path("default.safetensors"));
    snprintf(got, sizeof got, "%s", tmp_path("replayed.safetensors"));
    snprintf(half, sizeof half, "%s", tmp_path("replayed_half.safetensors"));
    Model m;
    train_default(file, ov, nov, want);
    mode = PLAN_REDUCE_OVERHEAD;
    int before = captures;
    if (model_open(&m, file, ov, nov)) {
        if (fail) {
            emu_device_fail_captures(m.d, true);
            capture_start();
        }
        if (resume_at) {
            CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = half, .stop_after = resume_at}), 0);
            CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .resume = half, .save = got}), 0);
        } else {
            CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = got}), 0);
        }
        if (fail) {
            const char *err = capture_end();
            int warned = 0;
            for (const char *c = err; (c = strstr(c, "could not be captured")); c++) warned++;
            if (warned != (resume_at ? 2 : 1)) fprintf(stderr, "%s", err);
            CHECK_EQ_INT(warned, resume_at ? 2 : 1);
            CHECK(strstr(err, "cgc: warning: reduce-overhead: ") != NULL);
            emu_device_fail_captures(m.d, false);
        }
        compare_checkpoints(got, want, 0.0);
    }
    model_close(&m);
    CHECK(fail ? captures == before : captures > before);
}

/* A source made slow ($CGC_DATA_DELAY_MS: each micro-batch's read sleeps 10 ms first, a
 * fifth of an emulated step of M or less) overlaps the steps: they wait for less than half
 * of the reading's time (-v's figures), where reading in the step they would wait for all
 * of it. */
static void check_reads_overlap(Model *m)
{
    static char text[TEXT_LEN];
    setenv("CGC_DATA_DELAY_MS", "10", 1);
    CHECK_EQ_INT(run(m, &(RunSpec){.device = m->d, .text = text}), 0);
    unsetenv("CGC_DATA_DELAY_MS");
    double waited = -1, read = -1;
    const char *line = strstr(text, "cgc: data: the steps waited ");
    CHECK(line && sscanf(line, "cgc: data: the steps waited %lf ms in all for their rows; reading "
                               "them took %lf ms", &waited, &read) == 2);
    printf("  streamed from a source 10 ms slow a micro-batch: the steps waited %.1f ms, the reads "
           "took %.1f ms\n", waited, read);
    CHECK(read >= 10.0 * (double)m->p->cfg.steps && waited >= 0 && waited < read / 2);
}

/* FILE trained on the emulation with its data set on the device, and streamed from the
 * host (stream = always; prefetch = 0 too; stopped at STOP and resumed; with MEMORY,
 * stream = auto on a device of MEMORY bytes, which cannot hold it): the same weights bit
 * for bit. The emulation makes
 * each copy only when the step waits for it, and from the host's rows as they are then,
 * so a step that does not wait, or a host that reuses its rows too soon, differs. */
static void check_streaming(const char *file, const Override *ov, int nov, int64_t stop,
                            size_t memory)
{
    printf("training %s on the emulation: data streamed from the host against on the device\n", file);
    char want[256], got[256], half[256];
    snprintf(want, sizeof want, "%s", tmp_path("resident.safetensors"));
    snprintf(got, sizeof got, "%s", tmp_path("streamed.safetensors"));
    snprintf(half, sizeof half, "%s", tmp_path("streamed_half.safetensors"));
    Model m;
    if (model_open(&m, file, ov, nov)) {
        TrainConfig *c = &m.p->cfg;
        c->stream = STREAM_NEVER;
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = want}), 0);
        c->stream = STREAM_ALWAYS;
        const char *says = "stream = always: its rows stream from the host, 2 micro-batches read ahead";
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = got, .expect = says}), 0);
        compare_checkpoints(got, want, 0.0);
        c->prefetch = 0;
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = got, .expect = "in the steps (prefetch = 0)"}), 0);
        compare_checkpoints(got, want, 0.0);
        c->prefetch = 3;
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = half, .stop_after = stop}), 0);
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .resume = half, .save = got}), 0);
        compare_checkpoints(got, want, 0.0);
        if (memory) check_reads_overlap(&m);
        c->stream = STREAM_AUTO;
        emu_device_memory(m.d, memory);
        if (memory) {
            CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = got,
                                            .expect = "would take more than 90% of"}), 0);
            compare_checkpoints(got, want, 0.0);
        }
        emu_device_memory(m.d, 0);
    }
    model_close(&m);
}

/* The first launch of kernel NAME in the tuned graphs; NULL if none. */
static const PlanStep *first_launch(const Plan *plan, const char *name)
{
    for (int gid = PG_TRAIN; gid <= PG_TRAIN_MICRO; gid++)
        for (int i = 0; i < plan->graph[gid].nsteps; i++) {
            const PlanStep *s = &plan->graph[gid].steps[i];
            if (s->kind == STEP_LAUNCH && strcmp(plan->kernels[s->launch.kernel].name, name) == 0) return s;
        }
    return NULL;
}

/* The choice of kernel NAME at BLOCK threads a block (or its own block, where it cannot
 * take BLOCK): "items:N" with N its first launch's items per block scaled to the block,
 * ",block:B" where B is not its own, as autotune.c writes it. */
static void choice_at_block(const Plan *plan, const char *name, int block, char *buf, size_t len)
{
    const PlanStep *s = first_launch(plan, name);
    CHECK(s != NULL);
    if (!s) return;
    const PlanKernel *k = &plan->kernels[s->launch.kernel];
    if (!k->any_block || block >= k->block) block = k->block;
    int64_t items = s->launch.items_per_block * block / k->block;
    int at = snprintf(buf, len, "items:%lld", (long long)(items > 0 ? items : 1));
    if (block != k->block) snprintf(buf + at, len - (size_t)at, ",block:%d", block);
}

static TuneLoad load_choices(const Model *m, TuneFile *have, char *path, size_t path_len)
{
    TuneFile want;
    char why[256];
    CHECK(tune_init(&want, m->p->model_name, m->d->arch, m->d->model,
                    autotune_plan_hash(m->plan, m->p->cfg.batch), why, sizeof why));
    TuneLoad load = tune_load(&want, have, path, path_len, why, sizeof why);
    if (load != TUNE_FOUND) fprintf(stderr, "  %s: %s\n", path, why);
    tune_free(&want);
    return load;
}

/* The cache (XDG_CACHE_HOME) in the test's directory NAME until cache_end, which puts
 * back what cache_start returned (the variable's value before, or NULL). */
static char *cache_start(const char *name)
{
    const char *xdg = getenv("XDG_CACHE_HOME");
    char *saved = xdg ? strdup(xdg) : NULL;
    setenv("XDG_CACHE_HOME", tmp_path(name), 1);
    return saved;
}

static void cache_end(char *saved)
{
    if (saved) setenv("XDG_CACHE_HOME", saved, 1);
    else unsetenv("XDG_CACHE_HOME");
    free(saved);
}

/* FILE trained on the emulation in mode MODE_ with checkpoint = none and with `all`
 * (the least-memory schedule: matrix products, dropouts and layer norms recomputed): the
 * same weights and totals bit for bit. In max-autotune each run tunes (on a modeled
 * clock, where a launch costs more than a GEMM), and the choices files hold as many GEMM
 * keys: a recomputed GEMM takes its original's choice. */
static void check_checkpoint_exact(const char *file, const Override *ov, int nov, PlanMode mode_)
{
    printf("training %s on the emulation in %s: checkpoint = all against none, bit for bit\n",
           file, plan_mode_name(mode_));
    char want[256], got[256];
    snprintf(want, sizeof want, "%s", tmp_path("plain.safetensors"));
    snprintf(got, sizeof got, "%s", tmp_path("checkpointed.safetensors"));
    Override o[8];
    CHECK(nov < 8);
    memcpy(o, ov, (size_t)nov * sizeof *ov);
    char *saved_xdg = cache_start("ckpt_cache");
    const char *save[2] = { want, got }, *policy[2] = { "none", "all" };
    int gemm_keys[2] = { 0, 0 };
    PlanMode before = mode;
    mode = mode_;
    for (int i = 0; i < 2; i++) {
        o[nov] = (Override){"checkpoint", "checkpoint", policy[i]};
        Model m;
        if (model_open(&m, file, o, nov + 1)) {
            CHECK(i == 0 ? m.compiled.nrecomputed == 0 : m.compiled.nrecomputed > 0);
            double gemm_ms[DEVICE_GEMM_ALGOS + 1] = {3.0};
            if (mode_ == PLAN_MAX_AUTOTUNE) emu_device_model_time(m.d, gemm_ms, 5.0);
            capture_start();
            CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = save[i], .tune_budget_s = 1e9}), 0);
            capture_end();
            TuneFile have;
            char path[4200];
            if (mode_ == PLAN_MAX_AUTOTUNE && load_choices(&m, &have, path, sizeof path) == TUNE_FOUND) {
                for (int k = 0; k < have.nchoices; k++) gemm_keys[i] += have.choices[k].kind == TUNE_GEMM;
                tune_free(&have);
            }
        }
        model_close(&m);
    }
    if (mode_ == PLAN_MAX_AUTOTUNE) {   /* a recomputed GEMM has its original's key: its choice */
        CHECK(gemm_keys[0] > 0);
        CHECK_EQ_INT(gemm_keys[1], gemm_keys[0]);
    }
    mode = before;
    cache_end(saved_xdg);
    compare_checkpoints(got, want, 0.0);
}

/* max-autotune on the emulation, which offers three GEMM algorithms (each the reference
 * GEMM): the first run times the candidates (launches of 128 threads modeled faster) and
 * writes the choices file, each choice the fastest candidate; the next runs read it back
 * and run what it says (rewritten here: every GEMM the third algorithm, every kernel that
 * can take it a quarter of its block); a block a kernel cannot take and a corrupt file are
 * said, tuned again and replaced. Every run trains bit for bit as the default mode does:
 * grids, blocks and algorithms change no value. Returns how many kernels were tuned to
 * fewer threads a block. */
static int check_autotune(const char *file, const Override *ov, int nov)
{
    printf("max-autotune on the emulation: the choices file, and training bit for bit\n");
    int smaller = 0;    /* kernels tuned to fewer threads a block */
    char want[256], got[256], path[4200];
    snprintf(want, sizeof want, "%s", tmp_path("default.safetensors"));
    snprintf(got, sizeof got, "%s", tmp_path("tuned.safetensors"));
    char *saved_xdg = cache_start("cache");
    Model m;
    train_default(file, ov, nov, want);

    mode = PLAN_MAX_AUTOTUNE;
    if (model_open(&m, file, ov, nov)) {
        emu_device_gemm_algos(m.d, 3, 2);   /* the second algorithm fails: left out */
        /* modeled times: algorithm 1 the fastest that works (2, faster, is refused), every
         * launch slower than any GEMM; so each GEMM must choose algorithm 1 */
        double algo_ms[DEVICE_GEMM_ALGOS + 1] = {3.0, 1.0, 0.5, 2.0};
        emu_device_model_time(m.d, algo_ms, 5.0);
        emu_device_favour_block(m.d, 128);   /* a launch of 128 threads costs half */
        capture_start();    /* a budget no loaded machine runs out of: every choice timed */
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = got, .tune_budget_s = 1e9}), 0);
        const char *err = capture_end();
        fprintf(stderr, "%s", err);
        CHECK(strstr(err, "cgc: autotune: timing the launch shapes and GEMM algorithms") != NULL);
        CHECK(strstr(err, "algorithm 2 refused") != NULL);
        CHECK(strstr(err, " refused by the device (the error") != NULL);
        CHECK(strstr(err, "cgc: autotune: the choices are in ") != NULL);
        compare_checkpoints(got, want, 0.0);

        TuneFile have;
        CHECK_EQ_INT(load_choices(&m, &have, path, sizeof path), TUNE_FOUND);
        CHECK(have.tuning_ms >= 0);
        int gemms = 0, kernels = 0;
        for (int i = 0; i < have.nchoices; i++) {
            TuneChoice *c = &have.choices[i];
            char want_choice[64];
            if (c->kind == TUNE_GEMM) {
                gemms++;
                CHECK_STR(c->choice, "lt_algo:1");   /* the fastest; 2 was refused */
                CHECK_CLOSE(c->ms, 1.0, 1e-3, 0);     /* as modeled: the median of one issue */
                snprintf(c->choice, sizeof c->choice, "lt_algo:3");
            } else {
                /* the fastest: 128 threads where the kernel can take them, the first grid */
                kernels++;
                CHECK(c->kind == TUNE_KERNEL);
                choice_at_block(m.plan, c->key, 128, want_choice, sizeof want_choice);
                CHECK_STR(c->choice, want_choice);
                smaller += strstr(c->choice, ",block:128") != NULL;
                /* read back: a quarter of each block where it can be */
                choice_at_block(m.plan, c->key, 64, c->choice, sizeof c->choice);
            }
        }
        CHECK(gemms > 0 && kernels > 0);
        char why[256];
        CHECK_EQ_INT(tune_store(&have, path, sizeof path, why, sizeof why), 0);
        tune_free(&have);
        emu_device_gemm_algos(m.d, 3, 0);
        emu_device_model_time(m.d, NULL, 0);
        emu_device_favour_block(m.d, 0);

        /* read back: every training GEMM now runs the third algorithm, every kernel that
         * can a quarter of its block's threads */
        int calls[4];
        for (int a = 0; a < 4; a++) calls[a] = emu_device_gemm_calls(m.d, a);
        capture_start();
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = got}), 0);
        err = capture_end();
        CHECK(strstr(err, "choices from ") != NULL && strstr(err, "timing the") == NULL);
        CHECK(emu_device_gemm_calls(m.d, 3) > calls[3]);
        CHECK_EQ_INT(emu_device_gemm_calls(m.d, 1), calls[1]);
        CHECK_EQ_INT(emu_device_gemm_calls(m.d, 2), calls[2]);
        compare_checkpoints(got, want, 0.0);

        /* a smaller block for a kernel that shares values across its block is refused,
         * and tuned again */
        CHECK_EQ_INT(load_choices(&m, &have, path, sizeof path), TUNE_FOUND);
        TuneChoice *shared = NULL;
        for (int i = 0; i < have.nchoices && !shared; i++) {
            const PlanStep *s = have.choices[i].kind == TUNE_KERNEL ? first_launch(m.plan, have.choices[i].key) : NULL;
            if (s && !m.plan->kernels[s->launch.kernel].any_block) shared = &have.choices[i];
        }
        CHECK(shared != NULL);
        if (shared) snprintf(shared->choice, sizeof shared->choice, "items:1,block:128");
        CHECK_EQ_INT(tune_store(&have, path, sizeof path, why, sizeof why), 0);
        tune_free(&have);
        capture_start();
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .tune_budget_s = 1e-9}), 0);
        err = capture_end();
        CHECK(strstr(err, "not a launch shape the tuner writes for it: items:1,block:128") != NULL);
        CHECK(strstr(err, "timing the") != NULL);

        /* a file cut short is refused, tuned again and replaced; with a budget spent before
         * the first step, every choice is the plan's, untimed, and said so */
        FILE *f = fopen(path, "w");
        CHECK(f && fputs("cgc-autotune 1\nmodel mlp\n", f) >= 0 && fclose(f) == 0);
        capture_start();
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .tune_budget_s = 1e-9}), 0);
        err = capture_end();
        CHECK(strstr(err, "no 'end' line: the file is cut short; tuning again") != NULL);
        CHECK(strstr(err, "timing the") != NULL && strstr(err, "the time ran out: ") != NULL);
        CHECK_EQ_INT(load_choices(&m, &have, path, sizeof path), TUNE_FOUND);
        TuneFile plain;
        CHECK(tune_init(&plain, "p", 90, "d", 0, why, sizeof why));
        autotune_heuristics(m.plan, (int64_t[8]){m.p->cfg.batch}, &plain);
        CHECK_EQ_INT(have.nchoices, plain.nchoices);
        for (int i = 0; i < have.nchoices && i < plain.nchoices; i++) {
            CHECK(have.choices[i].ms < 0);
            CHECK(strcmp(have.choices[i].key, plain.choices[i].key) == 0);
            CHECK(strcmp(have.choices[i].choice, plain.choices[i].choice) == 0);
        }
        tune_free(&plain);
        tune_free(&have);
    }
    model_close(&m);
    cache_end(saved_xdg);
    return smaller;
}

/* FILE's bytes (at most 64 KiB), for comparing a file before and after. */
static char *file_bytes(const char *file, size_t *n)
{
    static char buf[2][65536];
    static int next;
    char *b = buf[next++ & 1];
    FILE *f = fopen(file, "rb");
    *n = f ? fread(b, 1, sizeof buf[0], f) : 0;
    if (f) fclose(f);
    return b;
}

/* --tune-file: the choices kept in a file of the user's instead of the cache, as a
 * lockfile: the run that finds none tunes and writes it, the next reads it back, one
 * made for another plan is an error that leaves the file as it is (never tuned again and
 * replaced, as the cache's would be), and one that cannot be written is an error before
 * tuning. The cache is not used. */
static void check_tune_file(const char *file, const Override *ov, int nov)
{
    printf("max-autotune with --tune-file: tuned and written, read back, refused when foreign\n");
    char lock[256], why[256], line[400], path[4200];
    snprintf(lock, sizeof lock, "%s", tmp_path("lock.tune"));
    char *saved_xdg = cache_start("cache_tune_file");
    Model m;
    mode = PLAN_MAX_AUTOTUNE;
    if (model_open(&m, file, ov, nov)) {
        capture_start();
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .tune_file = lock, .tune_budget_s = 1e9}), 0);
        const char *err = capture_end();
        fprintf(stderr, "%s", err);
        snprintf(line, sizeof line, "cgc: autotune: the choices are in %s\n", lock);
        CHECK(strstr(err, "timing the") != NULL && strstr(err, line) != NULL);
        TuneFile have, cached;
        bool missing;
        CHECK(tune_read(lock, &have, &missing, why, sizeof why));
        CHECK(have.tuning_ms >= 0 && have.nchoices > 0);
        CHECK_EQ_INT(load_choices(&m, &cached, path, sizeof path), TUNE_MISSING);

        capture_start();
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .tune_file = lock}), 0);
        err = capture_end();
        snprintf(line, sizeof line, "choices from %s (tuned in ", lock);
        CHECK(strstr(err, line) != NULL && strstr(err, "timing the") == NULL);

        /* made for another plan: the run stops before training, the file unchanged */
        have.plan_hash ^= 1;
        CHECK_EQ_INT(tune_store_file(&have, lock), 0);
        size_t n_before, n_after;
        const char *before = file_bytes(lock, &n_before);
        RunOptions o = {.net_path = m.path, .src = m.src, .device = m.d, .plan = m.plan,
                        .tune_file = lock};
        int saved = stdout_start();
        capture_start();
        CHECK(train_run(m.p, &o) != 0);
        err = capture_end();
        stdout_end(saved);
        fprintf(stderr, "%s", err);
        CHECK(strstr(err, "cgc: error: the choices file ") != NULL);
        CHECK(strstr(err, "was written for another plan") != NULL);
        CHECK(strstr(err, "the file is left as it is") != NULL && strstr(err, "timing the") == NULL);
        const char *after = file_bytes(lock, &n_after);
        CHECK(n_before > 0 && n_before == n_after && memcmp(before, after, n_before) == 0);

        /* one that cannot be written, or a name the system cannot take: an error before
         * any tuning (which would say "timing the"), and one that -q keeps */
        char longname[400];
        snprintf(path, sizeof path, "%s", tmp_path("no-such-dir/lock.tune"));
        snprintf(longname, sizeof longname, "%s", tmp_path("x"));
        snprintf(longname + strlen(longname) - 1, sizeof longname - strlen(longname) + 1, "%0300d", 0);
        for (int c = 0; c < 3; c++) {   /* the unwritable one, that with -q, the long name */
            o.tune_file = c < 2 ? path : longname;
            o.quiet = c == 1;
            saved = stdout_start();
            capture_start();
            CHECK(train_run(m.p, &o) != 0);
            err = capture_end();
            stdout_end(saved);
            fprintf(stderr, "%s", err);
            CHECK(strstr(err, "timing the") == NULL);
            if (c < 2) CHECK(strstr(err, "cgc: error: cannot write the choices to ") != NULL &&
                             strstr(err, "is missing or not writable") != NULL);
            else CHECK(strstr(err, "File name too long; name another file (nothing was tuned)") != NULL);
        }
        tune_free(&have);
    }
    model_close(&m);
    cache_end(saved_xdg);
}

/* max-autotune's generated tensor-core GEMMs in a whole training run: a choices file
 * that gives every training GEMM a generated kernel (the tile shapes it has, in turn) is
 * read back, the GEMMs' module is loaded once, and the run trains as the default mode does,
 * to the rounding of the kernels' own order of summation (2e-2, as the fp16 runs above).
 * A file whose choices name no generated kernel loads nothing. */
/* The choices in force in check_autotune_tiles: the heuristics, every GEMM on a
 * generated kernel (tile shapes in turn), every fused MLP run on its kernel (shapes in
 * turn, its GEMMs on the library). */
enum { WITH_HEURISTICS, WITH_TILES, WITH_FUSED_MLPS, WITH_NUM };

static void check_autotune_tiles(const char *file, const Override *ov, int nov)
{
    printf("max-autotune with generated GEMMs or fused MLPs chosen: loaded once, trains as the "
           "default mode\n");
    char want[256], got[256], path[4200], why[256];
    snprintf(want, sizeof want, "%s", tmp_path("default.safetensors"));
    snprintf(got, sizeof got, "%s", tmp_path("tiles.safetensors"));
    char *saved_xdg = cache_start("tile-cache");
    train_default(file, ov, nov, want);
    mode = PLAN_MAX_AUTOTUNE;
    int heuristic_gemms = 0;
    for (int with = 0; with < WITH_NUM; with++) {
        Model m;    /* a device of its own: a device loads a second module once */
        if (model_open(&m, file, ov, nov)) {
            TuneFile t;
            CHECK(tune_init(&t, m.p->model_name, m.d->arch, m.d->model,
                            autotune_plan_hash(m.plan, m.p->cfg.batch), why, sizeof why));
            autotune_heuristics(m.plan, (int64_t[8]){m.p->cfg.batch}, &t);
            int changed = 0;
            for (int gid = PG_TRAIN; with == WITH_TILES && gid <= PG_TRAIN_MICRO; gid++)
                for (int i = 0; i < m.plan->graph[gid].nsteps; i++) {
                    /* each GEMM, in turn, one of the tile shapes the plan has a kernel for */
                    const PlanStep *s = &m.plan->graph[gid].steps[i];
                    char key[TUNE_TOKEN_MAX + 1], name[32];
                    if (s->kind != STEP_GEMM) continue;
                    autotune_gemm_key(&s->gemm, (int64_t[8]){m.p->cfg.batch}, key, sizeof key);
                    TuneChoice *c = (TuneChoice *)tune_find(&t, TUNE_GEMM, key);
                    if (!c || strncmp(c->choice, "tile:", 5) == 0) continue;    /* a key seen */
                    for (int k = 0; k < PLAN_GEMM_TILES; k++) {
                        int tile = (changed + k) % PLAN_GEMM_TILES;
                        if (s->gemm.tile_kernel[tile] < 0) continue;
                        plan_gemm_tile_name(tile, name, sizeof name);
                        snprintf(c->choice, sizeof c->choice, "tile:%s", name);
                        changed++;
                        break;
                    }
                }
            for (int i = 0; i < t.nchoices; i++) {
                TuneChoice *c = &t.choices[i];
                if (with == WITH_TILES && c->kind == TUNE_GEMM)     /* every GEMM has a tile */
                    CHECK(strncmp(c->choice, "tile:", 5) == 0);
                if (with == WITH_FUSED_MLPS && c->kind == TUNE_MLP) {
                    CHECK(strcmp(c->choice, "steps") == 0);     /* the heuristics' */
                    snprintf(c->choice, sizeof c->choice, "fused:rows%d",
                             plan_mlp_rows[changed++ % PLAN_MLP_SHAPES]);
                }
            }
            CHECK(with == WITH_HEURISTICS || changed > 0);
            CHECK_EQ_INT(tune_store(&t, path, sizeof path, why, sizeof why), 0);
            tune_free(&t);
            int loads = emu_device_kernel_loads(m.d), library = emu_device_gemm_calls(m.d, 0);
            capture_start();
            CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = got}), 0);
            const char *err = capture_end();
            CHECK(strstr(err, "choices from ") != NULL && strstr(err, "timing the") == NULL);
            if (!strstr(err, "choices from ")) fprintf(stderr, "%s", err);
            CHECK_EQ_INT(emu_device_kernel_loads(m.d), loads + (with != WITH_HEURISTICS));
            /* the library still runs the evaluation's GEMMs, and every GEMM without tiles;
             * a fused run's GEMMs are not among them */
            int gemms = emu_device_gemm_calls(m.d, 0) - library;
            CHECK(gemms > 0);
            if (with == WITH_HEURISTICS) heuristic_gemms = gemms;
            if (with == WITH_FUSED_MLPS) CHECK(gemms < heuristic_gemms);
            compare_checkpoints(got, want, with != WITH_HEURISTICS ? 2e-2 : 0.0);
        }
        model_close(&m);
    }
    cache_end(saved_xdg);
}

/* RUN's standard output (what -v reports) as well as its status into *RC; the text is
 * valid until the next call. */
static const char *run_stdout(Model *m, const RunSpec *spec, int *rc)
{
    static char text[1 << 16];
    const char *path = tmp_path("stdout.txt");
    fflush(stdout);
    int saved = dup(1), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    close(fd);
    *rc = run(m, spec);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = '\0';
    if (f) fclose(f);
    return text;
}

/* Whether -v's report TEXT says that all FOLLOWERS runs of the evaluation follow
 * training's implicit GEMMs. */
static bool followers_on(const char *text, int followers)
{
    char want[128];
    snprintf(want, sizeof want, "; %d of the evaluation's %d by implicit GEMMs", followers,
             followers);
    if (strstr(text, want)) return true;
    fprintf(stderr, "  -v did not say \"%s\":\n%s", want, text);
    return false;
}

/* The implicit-GEMM convolutions of emulation model MODEL in bf16 (IMPLICIT of them in
 * the train graph, EPILOGUES of those computing the group after their product) chosen
 * through a choices file, whatever timing would choose: the run reads them back and
 * applies them (the UNFOLD steps skipped, the readers by their kernels), and trains
 * within 2e-2 of the default mode. test_emu_gemm checks the kernels' values, alone and
 * in their graph, and the memory plan's liveness for them. */
static void check_autotune_windows(const char *model, int implicit_want, int epilogues_want)
{
    printf("max-autotune with the implicit-GEMM convolutions of %s chosen\n", model);
    char file[4200], want[256], got[256], tuned[256], why[256];
    snprintf(file, sizeof file, "%s/../tests/emu/models/%s.net", CGC_MODELS_DIR, model);
    snprintf(want, sizeof want, "%s", tmp_path("windows-default.safetensors"));
    snprintf(got, sizeof got, "%s", tmp_path("windows.safetensors"));
    snprintf(tuned, sizeof tuned, "%s", tmp_path("windows.tune"));
    Override ov[1] = {{"precision", "precision", "bf16"}};
    char *saved_xdg = cache_start("window-cache");
    int followers = 0;
    train_default(file, ov, 1, want);
    mode = PLAN_MAX_AUTOTUNE;
    Model m;
    if (model_open(&m, file, ov, 1)) {
        int implicit = 0, epilogues = 0;
        for (int r = 0; r < m.plan->nwindows; r++) {
            bool train = m.plan->windows[r].graph == PG_TRAIN;
            implicit += train && m.plan->windows[r].implicit;
            epilogues += train && m.plan->windows[r].epilogue >= 0;
            followers += m.plan->windows[r].follows >= 0;
        }
        CHECK_EQ_INT(implicit, implicit_want);
        CHECK_EQ_INT(epilogues, epilogues_want);
        CHECK(followers > 0);       /* the evaluation's products */
        int64_t symvals[IR_MAX_SYMBOLS] = {m.p->cfg.batch};
        TuneFile t;
        CHECK(tune_init(&t, m.p->model_name, m.d->arch, m.d->model,
                        autotune_plan_hash(m.plan, m.p->cfg.batch), why, sizeof why));
        autotune_heuristics(m.plan, symvals, &t);
        for (int r = 0; r < m.plan->nwindows; r++) {
            const PlanWindow *w = &m.plan->windows[r];
            char key[TUNE_TOKEN_MAX + 1], name[32];
            if (!w->implicit || w->follows >= 0) continue;     /* a follower has no choice of its own */
            autotune_window_key(m.plan, r, symvals, key, sizeof key);
            TuneChoice *c = (TuneChoice *)tune_find(&t, TUNE_WINDOW, key);
            /* the heuristics': the library's own algorithms, where a device has one */
            CHECK(c != NULL && strncmp(c->choice, w->conv ? "cudnn:0+0" : "patches", 9) == 0);
            if (!c) continue;
            int at = snprintf(c->choice, sizeof c->choice, "implicit:");
            for (int j = 0; j < w->nreaders; j++) {
                int tile = 0;
                while (w->kernel[j][tile] < 0) tile++;
                plan_gemm_tile_name(tile, name, sizeof name);
                at += snprintf(c->choice + at, sizeof c->choice - (size_t)at, "%s%s", j ? "+" : "", name);
            }
        }
        CHECK_EQ_INT(tune_store_file(&t, tuned), 0);
        tune_free(&t);
        int loads = emu_device_kernel_loads(m.d), rc;
        capture_start();
        const char *out = run_stdout(&m, &(RunSpec){.device = m.d, .save = got, .tune_file = tuned}, &rc);
        const char *err = capture_end();
        CHECK_EQ_INT(rc, 0);
        CHECK(strstr(err, "timing the") == NULL);
        if (strstr(err, "timing the")) fprintf(stderr, "%s", err);
        CHECK_EQ_INT(emu_device_kernel_loads(m.d), loads + 1);   /* the generated kernels */
        compare_checkpoints(got, want, 2e-2);
        CHECK(followers_on(out, followers));    /* as the file's choices resolve */
    }
    model_close(&m);
    /* tuned live, on a modeled clock where the steps' launches and GEMMs cost more than
     * the readers' kernels: every run chooses its implicit GEMMs, and the followers take
     * that choice at once, with no file read back */
    if (model_open(&m, file, ov, 1)) {
        double gemm_ms[DEVICE_GEMM_ALGOS + 1] = {3.0};
        emu_device_model_time(m.d, gemm_ms, 5.0);
        int rc;
        capture_start();
        const char *out = run_stdout(&m, &(RunSpec){.device = m.d, .tune_budget_s = 1e9}, &rc);
        capture_end();
        CHECK_EQ_INT(rc, 0);
        CHECK(followers_on(out, followers));
        emu_device_model_time(m.d, NULL, 0);
    }
    model_close(&m);
    /* --detect-anomaly reads back every value the plan stores, but for the ones these
     * choices leave unwritten (the patches, the channels-last product and gradient: NaN
     * under the emulation), and passes the -inf a max pooling reads outside the image
     * (here and on the CPU); a device of its own, which loads the generated kernels */
    if (model_open(&m, file, ov, 1)) {
        for (int cpu = 0; cpu < 2; cpu++) {
            capture_start();
            int rc = run(&m, &(RunSpec){.device = cpu ? NULL : m.d, .tune_file = tuned, .detect_anomaly = true});
            const char *err = capture_end();
            CHECK_EQ_INT(rc, 0);
            if (rc != 0) fprintf(stderr, "%s", err);
        }
    }
    model_close(&m);
    cache_end(saved_xdg);
}

/* max-autotune on an emulation with a convolution library (three algorithms, each the
 * reference convolution in double; emu_device_convs) for conv_chain in fp32, where no
 * implicit GEMM is generated: with modeled times (algorithm 2 the fastest, the steps'
 * launches slower than any call), every run of the train graph chooses the library,
 * algorithm 2 for each call, and the run reads that back (and trains the same, bit for
 * bit, the library's calls made). It trains within ERR of the
 * default mode without the library (the reference sums in double, the steps' GEMMs in
 * f32). Then the other modes use the library's own choice with no file at all, and a
 * library that has no algorithm for the calls leaves them to the steps, saying so. */
static void check_autotune_convs(const char *file, const Override *ov, int nov, double err_tol)
{
    printf("max-autotune with a convolution library: %s\n", file);
    char want[256], got[256], again[256], path[4200];
    snprintf(want, sizeof want, "%s", tmp_path("conv-default.safetensors"));
    snprintf(got, sizeof got, "%s", tmp_path("conv-tuned.safetensors"));
    snprintf(again, sizeof again, "%s", tmp_path("conv-read-back.safetensors"));
    char *saved_xdg = cache_start("conv-cache");
    train_default(file, ov, nov, want);
    mode = PLAN_MAX_AUTOTUNE;
    Model m;
    if (model_open(&m, file, ov, nov)) {
        double conv_ms[DEVICE_CONV_ALGOS + 1] = {0.4, 0.3, 0.1, 0.2};
        double gemm_ms[DEVICE_GEMM_ALGOS + 1] = {3.0};
        emu_device_convs(m.d, 3, conv_ms);
        emu_device_model_time(m.d, gemm_ms, 5.0);
        int before[CONV_KINDS];
        for (int k = 0; k < CONV_KINDS; k++) before[k] = emu_device_conv_calls(m.d, (ConvKind)k);
        capture_start();
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = got, .tune_budget_s = 1e9}), 0);
        const char *err = capture_end();
        if (getenv("CGC_TEST_VERBOSE")) fprintf(stderr, "%s", err);
        compare_checkpoints(got, want, err_tol);
        TuneFile have;
        CHECK_EQ_INT(load_choices(&m, &have, path, sizeof path), TUNE_FOUND);
        int runs = 0;
        for (int i = 0; i < have.nchoices; i++) {
            const TuneChoice *c = &have.choices[i];
            if (c->kind != TUNE_WINDOW) continue;
            runs++;
            CHECK(strncmp(c->choice, "cudnn:2+2", 9) == 0);      /* the fastest, each call */
            if (strncmp(c->choice, "cudnn:2+2", 9) != 0) fprintf(stderr, "  chose %s\n", c->choice);
        }
        CHECK(runs > 0);
        tune_free(&have);
        for (int k = 0; k < CONV_KINDS; k++)
            if (k != CONV_DATA_GRAD) CHECK(emu_device_conv_calls(m.d, (ConvKind)k) > before[k]);
        emu_device_model_time(m.d, NULL, 0);
        /* read back: the same choices, no timing, the library's calls again, and bit for
         * bit the tuning run's training (which the steps' would not be: the reference
         * sums in double) */
        for (int k = 0; k < CONV_KINDS; k++) before[k] = emu_device_conv_calls(m.d, (ConvKind)k);
        capture_start();
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = again}), 0);
        err = capture_end();
        CHECK(strstr(err, "choices from ") != NULL && strstr(err, "timing the") == NULL);
        for (int k = 0; k < CONV_KINDS; k++)
            if (k != CONV_DATA_GRAD) CHECK(emu_device_conv_calls(m.d, (ConvKind)k) > before[k]);
        compare_checkpoints(again, got, 0.0);
    }
    model_close(&m);
    mode = PLAN_DEFAULT;        /* no choices: the library's own algorithms */
    if (model_open(&m, file, ov, nov)) {
        emu_device_convs(m.d, 3, NULL);
        int before = emu_device_conv_calls(m.d, CONV_FORWARD);
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = got}), 0);
        CHECK(emu_device_conv_calls(m.d, CONV_FORWARD) > before);
        compare_checkpoints(got, want, err_tol);
        /* a library with no algorithm for these calls: the steps, said; the same run as
         * without the library, bit for bit */
        emu_device_conv_none(m.d, true);
        before = emu_device_conv_calls(m.d, CONV_FORWARD);
        capture_start();
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = got}), 0);
        const char *err = capture_end();
        CHECK(strstr(err, "has no algorithm for this convolution") != NULL);
        CHECK(strstr(err, "it runs as the plan's steps") != NULL);
        CHECK_EQ_INT(emu_device_conv_calls(m.d, CONV_FORWARD), before);
        compare_checkpoints(got, want, 0.0);
    }
    model_close(&m);
    cache_end(saved_xdg);
}

/* A tuning run of M (odd_mlp at batch 80), whose stderr must hold NEED, trains into GOT
 * as the default mode did into WANT; the choices it wrote hold one fused MLP choice,
 * timed, and no generated kernel unless GENERATED. */
static void tune_odd_mlp(Model *m, const char *need, const char *got, const char *want,
                         bool generated)
{
    char path[4200];
    capture_start();
    CHECK_EQ_INT(run(m, &(RunSpec){.device = m->d, .save = got, .tune_budget_s = 1e9}), 0);
    const char *err = capture_end();
    CHECK(strstr(err, "(generated GEMMs and fused MLPs included)") != NULL);
    CHECK(strstr(err, need) != NULL);
    if (!strstr(err, need)) fprintf(stderr, "%s", err);
    compare_checkpoints(got, want, 2e-2);
    TuneFile have;
    int mlps = 0;
    CHECK_EQ_INT(load_choices(m, &have, path, sizeof path), TUNE_FOUND);
    for (int i = 0; i < have.nchoices; i++) {
        const TuneChoice *c = &have.choices[i];
        if (!generated) CHECK(strncmp(c->choice, "tile:", 5) != 0 && strncmp(c->choice, "fused:", 6) != 0);
        if (c->kind != TUNE_MLP) continue;
        /* batch 80: the forward pass, then the input gradients */
        CHECK(strcmp(c->key, mlps++ ? "m80.bwd_f16_6_40_10_24" : "m80.f16_37_24r_10r_40r_6") == 0);
        CHECK(strcmp(c->choice, "steps") == 0 || strncmp(c->choice, "fused:rows", 10) == 0);
        CHECK(c->ms >= 0);
    }
    CHECK_EQ_INT(mlps, 2);
    tune_free(&have);
}

/* Both fused MLP kernels of odd_mlp (FILE, batch 80) chosen, whatever timing would
 * choose (the heuristics' choices, the runs' set to the fused kernels of 16 and of 32
 * rows, given as --tune-file): the forward pass's kernel, and the input gradients' (a
 * backward run, its relu_grad steps between its layers) train FILE through the
 * runtime's path (the file read back and applied, the training loop) and end within
 * 2e-2 of what the default mode trained into WANT; --profile shows each kernel launched
 * once per step and the later layers' own steps not at all. In 3 steps the weights move
 * little, so the comparison catches only gross errors: test_emu_gemm checks the
 * kernels' values, alone and in their graph. */
static void check_fused_mlps(const char *file, const Override *ov, int nov, const char *got,
                             const char *want)
{
    printf("max-autotune with both fused MLP kernels chosen (%d overrides)\n", nov);
    char tuned[256], trace[256], why[256];
    snprintf(tuned, sizeof tuned, "%s", tmp_path("fused.tune"));
    snprintf(trace, sizeof trace, "%s", tmp_path("fused-trace.json"));
    Model m;
    TuneFile have;
    if (!model_open(&m, file, ov, nov)) {
        model_close(&m);
        return;
    }
    CHECK_EQ_INT(m.plan->nmlps, 2);
    if (m.plan->nmlps != 2 || !m.plan->mlps[1].backward) {
        model_close(&m);
        return;
    }
    int64_t symvals[IR_MAX_SYMBOLS] = {m.p->cfg.batch};
    CHECK(tune_init(&have, m.p->model_name, m.d->arch, m.d->model,
                    autotune_plan_hash(m.plan, m.p->cfg.batch), why, sizeof why));
    autotune_heuristics(m.plan, symvals, &have);
    int fused = 0;
    for (int i = 0; i < have.nchoices; i++)
        if (have.choices[i].kind == TUNE_MLP)
            snprintf(have.choices[i].choice, sizeof have.choices[i].choice, "fused:rows%d",
                     plan_mlp_rows[fused++ % 2]);
    CHECK_EQ_INT(fused, 2);
    CHECK_EQ_INT(tune_store_file(&have, tuned), 0);
    tune_free(&have);
    capture_start();
    CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = got, .tune_file = tuned, .profile = trace}), 0);
    const char *err = capture_end();
    CHECK(strstr(err, "timing the") == NULL);
    compare_checkpoints(got, want, 2e-2);
    FILE *f = fopen(trace, "rb");
    static char text[1 << 22];
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = '\0';
    static const char *const launched[] = {"\"mlp_fused_f16_37_24r_10r_40r_6_rows16\"",
                                           "\"mlp_fused_bwd_f16_6_40_10_24_rows32\""};
    for (int k = 0; k < 2; k++) {
        int count = 0;
        for (const char *at = strstr(text, launched[k]); at; at = strstr(at + 1, launched[k])) count++;
        CHECK_EQ_INT(count, 2);     /* --profile takes steps 2 to 4; the run has 3 */
    }
    /* the backward run's later layers, which its kernel computes: no event of their own
     * (the forward's share their names with the eval graph's steps) */
    const PlanGraph *train = &m.plan->graph[PG_TRAIN];
    const PlanMlp *bwd = &m.plan->mlps[1];
    for (int j = 1; j < bwd->nlayers; j++) {
        char step[64];
        snprintf(step, sizeof step, "\"%s\"", train->steps[bwd->step[j]].what);
        CHECK(strstr(text, step) == NULL);
    }
    snprintf(why, sizeof why, "\"%s\"", train->steps[bwd->link[1]].what);
    CHECK(strstr(text, why) != NULL);   /* the relu_grad step between them still runs */
    model_close(&m);
}

/* max-autotune times a fused MLP run against its steps: the choice is written with its
 * time, read back, and whichever it is trains as the default mode does; generated
 * kernels whose launches the device refuses are left out. */
static void check_autotune_mlp(void)
{
    printf("max-autotune times a fused MLP run against its steps\n");
    char file[4200], want[256], got[256];
    snprintf(file, sizeof file, "%s/../tests/models/odd_mlp.net", CGC_MODELS_DIR);  /* 37-24-10-40-6 */
    snprintf(want, sizeof want, "%s", tmp_path("default.safetensors"));
    snprintf(got, sizeof got, "%s", tmp_path("mlp.safetensors"));
    /* batch 80: more than one block in every shape, and a last batch of 16 in the epoch */
    Override ov[3] = {{"precision", "precision", "fp16"}, {"steps", "steps", "6"}, {"batch", "batch", "80"}};
    char *saved_xdg = cache_start("mlp-cache");
    train_default(file, ov, 3, want);
    mode = PLAN_MAX_AUTOTUNE;
    Model m;
    if (model_open(&m, file, ov, 3)) {
        CHECK_EQ_INT(m.plan->nmlps, 2);
        CHECK(m.plan->nmlps == 2 && !m.plan->mlps[0].backward && m.plan->mlps[1].backward);
        tune_odd_mlp(&m, " and 2 fused MLP runs in ", got, want, true);
    }
    model_close(&m);
    if (model_open(&m, file, ov, 3)) {     /* read back, on a device of its own */
        capture_start();
        CHECK_EQ_INT(run(&m, &(RunSpec){.device = m.d, .save = got}), 0);
        const char *err = capture_end();
        CHECK(strstr(err, "choices from ") != NULL && strstr(err, "timing the") == NULL);
        if (!strstr(err, "choices from ")) fprintf(stderr, "%s", err);
        compare_checkpoints(got, want, 2e-2);
    }
    model_close(&m);
    check_fused_mlps(file, ov, 3, got, want);
    /* checkpointing moves the backward's steps about (an optimizer update and weight
     * casts come before the input gradients' run, now steps 13, 15 and 18) and leaves
     * every result as it was */
    Override all[4] = {ov[0], ov[1], ov[2], {"checkpoint", "checkpoint", "all"}};
    check_fused_mlps(file, all, 4, got, want);
    cache_end(saved_xdg);

    /* the device refuses every generated kernel's launch (as a GPU short of registers or
     * shared memory for one would): each is left out, counted, and the run goes on with
     * the library's GEMMs and the run's steps */
    saved_xdg = cache_start("mlp-refused-cache");
    if (model_open(&m, file, ov, 3)) {
        emu_device_refuse_kernels(m.d, "mlp_fused_");
        emu_device_refuse_kernels(m.d, "gemm_tc_");
        tune_odd_mlp(&m, " refused by the device (the errors are above) were left out", got, want, false);
    }
    model_close(&m);
    cache_end(saved_xdg);
    /* a GEMM whose every candidate is refused (its one library algorithm, its generated
     * kernels; a GEMM with an epilogue has no other) ends the run, saying which */
    saved_xdg = cache_start("mlp-all-refused-cache");
    if (model_open(&m, file, ov, 3)) {
        emu_device_gemm_algos(m.d, 1, 1);
        emu_device_refuse_kernels(m.d, "gemm_tc_");
        RunOptions o = {.net_path = m.path, .src = m.src, .device = m.d, .plan = m.plan,
                        .tune_budget_s = 1e9};
        int saved = stdout_start();
        capture_start();
        CHECK(train_run(m.p, &o) != 0);
        const char *err = capture_end();
        stdout_end(saved);
        CHECK(strstr(err, "cgc: error: autotune: the device refused every candidate of ") != NULL);
        if (!strstr(err, "every candidate of")) fprintf(stderr, "%s", err);
    }
    model_close(&m);
    cache_end(saved_xdg);
}

/* The step number in "... at step N (...". */
static long long failed_step(const char *err)
{
    const char *at = strstr(err, " at step ");
    return at ? strtoll(at + 9, NULL, 10) : -1;
}

/* A learning rate that makes the loss overflow: both fail, at the same step. */
static void check_divergence(void)
{
    printf("a diverging run on the emulation and the CPU\n");
    Override ov[3] = {{"precision", "precision", "fp32"}, {"steps", "steps", "40"},
                      {"optimizer", "optimizer", "sgd(lr = 1e4)"}};
    Model m;
    if (model_open(&m, "regression.net", ov, 3)) {
        capture_start();
        int dev_rc = run(&m, &(RunSpec){.device = m.d});
        char dev_err[4096];
        snprintf(dev_err, sizeof dev_err, "%s", capture_end());
        capture_start();
        int cpu_rc = run(&m, &(RunSpec){0});
        const char *cpu_err = capture_end();
        fprintf(stderr, "  emulation: %s  cpu: %s", dev_err, cpu_err);
        CHECK_EQ_INT(dev_rc, 1);
        CHECK_EQ_INT(cpu_rc, 1);
        CHECK(strstr(dev_err, "the loss became NaN or infinite at step ") != NULL);
        CHECK(failed_step(cpu_err) > 0);
        CHECK_EQ_INT(failed_step(dev_err), failed_step(cpu_err));
    }
    model_close(&m);
}

/* --detect-anomaly on the emulation and on the CPU: exp(z * 100) overflows in the first
 * step's forward. In eager mode the device names the op the CPU names (exp, its line, its
 * node); fused, the first value it stores that is not finite, and says so. */
static void check_anomaly(void)
{
    printf("--detect-anomaly (%s) on the emulation and the CPU\n", plan_mode_name(mode));
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("overflow.net"));
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("model overflow {\n    input x: f32[B, 32]\n    input t: f32[B, 4]\n"
          "    z    = linear(x, 16)\n    h    = tanh(exp(z * 100))\n    pred = linear(h, 4)\n"
          "    output pred\n    loss   mse(pred, t)\n}\n"
          "train {\n    data = synthetic(samples = 256)\n    batch = 64\n    epochs = 1\n"
          "    optimizer = sgd(lr = 0.1)\n    seed = 1\n}\n", f);
    fclose(f);
    Model m;
    if (model_open(&m, path, NULL, 0)) {
        capture_start();
        int dev_rc = run(&m, &(RunSpec){.device = m.d, .detect_anomaly = true});
        char dev_err[4096];
        snprintf(dev_err, sizeof dev_err, "%s", capture_end());
        capture_start();
        int cpu_rc = run(&m, &(RunSpec){.detect_anomaly = true});
        const char *cpu_err = capture_end();
        fprintf(stderr, "  emulation: %s  cpu: %s", dev_err, cpu_err);
        CHECK_EQ_INT(dev_rc, 1);
        CHECK_EQ_INT(cpu_rc, 1);
        char want[700];
        snprintf(want, sizeof want, "anomaly in step 1: exp at %s:5 (train graph, node %%", path);
        CHECK(strstr(cpu_err, want) != NULL);
        if (mode == PLAN_EAGER) {   /* the same op, node and words */
            const char *dn = strstr(dev_err, "node %"), *cn = strstr(cpu_err, "node %");
            int dev_node = -1, cpu_node = -2;
            if (dn) sscanf(dn, "node %%%d", &dev_node);
            if (cn) sscanf(cn, "node %%%d", &cpu_node);
            CHECK(strstr(dev_err, want) != NULL);
            CHECK_EQ_INT(dev_node, cpu_node);
            CHECK(strstr(dev_err, "computed +inf at element ") && strstr(dev_err, "from values that were all finite"));
        } else {
            CHECK(strstr(dev_err, "anomaly in step 1: ") && strstr(dev_err, "a fused kernel stores none"));
        }
    }
    model_close(&m);
}

int main(int argc, char **argv)
{
    asan = argc > 1 && strcmp(argv[1], "--asan") == 0;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cgc_devexec_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    small_fashion_mnist();

    Override mlp[3] = {{"precision", "precision", "fp32"}, {"batch", "batch", "32"},
                       {"steps", "steps", "16"}};
    Model m;
    if (model_open(&m, "mlp.net", mlp, 3)) {
        check_arena(&m, false);
        check_arena(&m, true);
        check_order(&m, 1000, 0, true, 3);
        check_order(&m, 1000, 5, true, 1);
        check_order(&m, 60000, 2, true, 64);
        check_order(&m, 7, 1, false, 1);
        check_order(&m, 1, 0, true, 1);
    }
    model_close(&m);

    check_training("mlp.net", mlp, 3, 1e-4, false);
    check_part_names();
    /* a batch at which most launches move more than 1 MB, in fp32 and in bf16 */
    Override wide[2] = {{"precision", "precision", "fp32"}, {"batch", "batch", "2048"}};
    check_bytes_model("mlp.net", wide, 2);
    wide[0].value = "bf16";
    check_bytes_model("mlp.net", wide, 2);
    /* tensors(...): rows left in their mapped files, uploaded a chunk of rows at a time */
    char arrays[256], source[400];
    small_arrays(arrays, sizeof arrays);
    snprintf(source, sizeof source, "tensors(\"%s\", scale = 1/255)", arrays);
    Override arr[4] = {{"precision", "precision", "fp32"}, {"batch", "batch", "32"},
                       {"steps", "steps", "16"}, {"data", "data", source}};
    check_training("mlp.net", arr, 4, 1e-4, false);
    /* a device of 24 MB: the plan's arena (15 MB) fits, the data set (13 MB) does not */
    check_streaming("mlp.net", arr, 4, 7, 24 << 20);
    /* tokens: i32 features gathered on the device, an embedding and its gradient */
    char tokens[4200];
    snprintf(tokens, sizeof tokens, "%s/../tests/emu/models/tokens.net", CGC_MODELS_DIR);
    Override tok[1] = {{"steps", "steps", "12"}};
    check_training(tokens, tok, 1, 1e-4, false);
    /* text: windows gathered from the mapped file's bytes at each epoch's phase; 40 steps
     * of 16 an epoch cross two epochs' phases */
    char chars[4200];
    snprintf(chars, sizeof chars, "%s/../tests/emu/text/chars.net", CGC_MODELS_DIR);
    Override txt[1] = {{"steps", "steps", "40"}};
    metrics_every = 3;
    check_training(chars, txt, 1, 1e-4, false);
    metrics_every = 0;
    check_streaming(chars, txt, 1, 25, 0);
    /* 8 steps of 2 micro-batches per epoch: three epochs, the last one cut short */
    Override reg[4] = {{"precision", "precision", "fp32"}, {"steps", "steps", "20"},
                       {"accumulate", "accumulate", "2"}, {"batch", "batch", "500"}};
    check_training("regression.net", reg, 4, 1e-4, true);
    /* fp16: loss scaling skips steps; the device counts them as the CPU does. 60 steps:
     * more than the 50 of warm-up before -v times steps, so a median is reported. */
    Override half[3] = {{"precision", "precision", "fp16"}, {"steps", "steps", "60"},
                        {"batch", "batch", "64"}};
    check_training("regression.net", half, 3, 1e-2, false);
    /* a learning rate too large for fp16: most steps are skipped, and counted alike */
    Override skips[3] = {{"precision", "precision", "fp16"}, {"steps", "steps", "20"},
                         {"optimizer", "optimizer", "sgd(lr = 100)"}};
    check_training("regression.net", skips, 3, 1e-2, false);
    check_resume_on_cpu("mlp.net", mlp, 3, 8);
    check_divergence();
    check_anomaly();

    /* The default mode: fused kernels, optimizer updates stored in place, multi-tensor
     * launches, memory reused; trains as the CPU does, loss scaling and accumulation
     * included, and with checkpointing's copies. */
    mode = PLAN_DEFAULT;
    check_training("mlp.net", mlp, 3, 1e-4, false);
    check_training("regression.net", reg, 4, 1e-4, false);
    check_training("regression.net", half, 3, 1e-2, false);
    /* 2e-2 as test_fusion allows: mlp's GEMM groups round matmul + bias + relu to fp16
     * once, where the CPU's unfused graph rounds the product and the sum apart. Adam's
     * first moments drift most, with or without checkpointing, and more with more steps
     * (1.3e-2 after 40 steps of batches of all 60,000 examples, 3.2e-2 after 40 of the
     * first 4,096's; within 2e-2 after these 16) */
    Override ckpt[4] = {{"precision", "precision", "fp16"}, {"batch", "batch", "32"},
                        {"steps", "steps", "16"}, {"checkpoint", "checkpoint", "all"}};
    check_training("mlp.net", ckpt, 4, 2e-2, false);
    check_anomaly();
    /* checkpointing replays the same kernels on the same values: bit for bit, residual
     * branches, dropout and layer norms (resmlp), convolutions (conv_chain), fp16's loss
     * scaling (mlp), in the fused modes; under ASan the first two */
    Override drop_ck[3] = {{"precision", "precision", "bf16"}, {"batch", "batch", "16"},
                           {"steps", "steps", "6"}};
    check_checkpoint_exact("resmlp.net", drop_ck, 3, PLAN_DEFAULT);
    if (!asan) check_checkpoint_exact("resmlp.net", drop_ck, 3, PLAN_REDUCE_OVERHEAD);
    Override conv_ck[2] = {{"precision", "precision", "fp16"}, {"steps", "steps", "3"}};
    char convs[4200];
    snprintf(convs, sizeof convs, "%s/../tests/emu/models/conv_chain.net", CGC_MODELS_DIR);
    check_checkpoint_exact(convs, conv_ck, 2, PLAN_DEFAULT);
    Override half_ck[3] = {{"precision", "precision", "fp16"}, {"batch", "batch", "32"},
                           {"steps", "steps", "8"}};
    if (!asan) check_checkpoint_exact("mlp.net", half_ck, 3, PLAN_MAX_AUTOTUNE);

    /* reduce-overhead: the default mode's kernels, the step counter on the device, each
     * micro-batch captured once and replayed */
    check_capture_refusal();
    mode = PLAN_REDUCE_OVERHEAD;
    check_training("mlp.net", mlp, 3, 1e-4, false);
    check_training(tokens, tok, 1, 1e-4, false);
    metrics_every = 3;   /* the loss read back between replays of a captured graph */
    check_training(chars, txt, 1, 1e-4, false);   /* captured again at each new phase */
    metrics_every = 0;
    check_training("regression.net", reg, 4, 1e-4, true);
    check_training("regression.net", skips, 3, 1e-2, false);
    check_replay_exact("regression.net", reg, 4, 0, false);
    check_replay_exact("regression.net", reg, 4, 5, false);
    check_replay_exact("regression.net", reg, 4, 0, true);
    /* dropout: its masks keyed by the micro-step the kernels read from the device */
    Override drop[3] = {{"precision", "precision", "bf16"}, {"batch", "batch", "16"},
                        {"steps", "steps", "6"}};
    check_replay_exact("resmlp.net", drop, 3, 0, false);
    /* --profile: the profiled steps run launch by launch, each launch timed */
    Override prof[3] = {{"precision", "precision", "fp32"}, {"steps", "steps", "8"},
                        {"batch", "batch", "128"}};
    check_profile("regression.net", prof, 3);
    /* max-autotune: reduce-overhead with its launch shapes and GEMM algorithms tuned */
    int smaller = check_autotune("mlp.net", mlp, 3);
    smaller += check_autotune("regression.net", reg, 4);     /* accumulation: train_micro tuned too */
    CHECK(smaller > 0);     /* some kernel took fewer threads a block */
    check_tune_file("regression.net", reg, 4);
    /* generated GEMMs: mlp in fp16 (nt with bias and relu, nt, nn, tn) */
    Override tiles[3] = {{"precision", "precision", "fp16"}, {"batch", "batch", "40"},
                         {"steps", "steps", "12"}};
    check_autotune_tiles("mlp.net", tiles, 3);
    check_autotune_mlp();
    /* under ASan, the one whose kernels take the most arguments (test_emu_gemm_asan
     * runs cnn's implicit GEMMs and pools too): the suite's longest test stays short */
    if (!asan) check_autotune_windows("image_windows", 2, 0);    /* c1 and c3, of groups 1 */
    check_autotune_windows("conv_chain", 2, 2);                  /* each with its bias and relu */
    char chain[4200];
    snprintf(chain, sizeof chain, "%s/../tests/emu/models/conv_chain.net", CGC_MODELS_DIR);
    check_autotune_convs(chain, NULL, 0, 1e-5);
    mode = PLAN_DEFAULT;
    check_profile("regression.net", prof, 3);
    check_step_times();
    mode = PLAN_EAGER;
    CHECK(median_reports > 0);
    CHECK(captures > 0);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_result();
}
