/* autotune.c: max-autotune's tuner (autotune.h). For each step of the training graphs,
 * in order: its candidates, each issued alone a few times between two fences; the
 * median time wins; the winner is put in force and written to the choices file. A kernel
 * is tuned at its first launch and a GEMM key at its first step; later steps with the
 * same kernel or key take that choice. */
#include "autotune.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/clock.h"

enum {
    WARMUP = 2,         /* issues of a candidate before it is timed */
    REPS = 5,           /* issues between the two fences of a sample */
    SAMPLES = 3,        /* samples of a candidate; the median is its time */
};

static bool tuned_graph(PlanGraphId gid) { return gid == PG_TRAIN || gid == PG_TRAIN_MICRO; }

/* ---- keys and choices ---- */

static int64_t dim(int64_t d, const int64_t *symvals)
{
    return IR_DIM_IS_SYM(d) ? symvals[IR_DIM_SYMBOL(d)] : d;
}

static const char *compute_name(GemmCompute c)
{
    switch (c) {
    case GEMM_F32: return "f32";
    case GEMM_TF32: return "tf32";
    case GEMM_F32_ACCUM: return "f32acc";
    }
    return "?";
}

static const char *epilogue_name(GemmEpilogue e)
{
    switch (e) {
    case GEMM_EPI_NONE: return "none";
    case GEMM_EPI_BIAS: return "bias";
    case GEMM_EPI_RELU_BIAS: return "relu_bias";
    case GEMM_EPI_GELU_BIAS: return "gelu_bias";
    }
    return "?";
}

void autotune_gemm_key(const PlanGemm *g, const int64_t *symvals, char *buf, size_t len)
{
    int64_t batch = g->batch.rank ? ir_numel(&g->batch, symvals) : 1;
    snprintf(buf, len, "m%lld.n%lld.k%lld.b%lld.%c%c.%s.%s.%s.%s.%s%s",
             (long long)plan_gemm_m(g, symvals), (long long)dim(g->n, symvals),
             (long long)plan_gemm_k(g, symvals), (long long)batch, g->trans_a ? 't' : 'n',
             g->trans_b ? 't' : 'n', ir_dtype_name(g->a_type), ir_dtype_name(g->b_type),
             ir_dtype_name(g->c_type), compute_name(g->compute), epilogue_name(g->epilogue),
             g->aux >= 0 ? "_aux" : "");
}

uint64_t autotune_plan_hash(const Plan *plan, int64_t batch)
{
    return plan_hash(plan) ^ ((uint64_t)batch * 0x9e3779b97f4a7c15ull);
}

/* A kernel's key: its name, or when longer than a token may be, its first 100 characters
 * and a hash of the whole name. */
static void kernel_key(const char *name, char *buf, size_t len)
{
    if (strlen(name) <= TUNE_TOKEN_MAX) {
        snprintf(buf, len, "%s", name);
        return;
    }
    uint64_t h = fnv1a(FNV_BASIS, name, strlen(name));
    snprintf(buf, len, "%.100s.%016llx", name, (unsigned long long)h);
}

/* A launch's choice: "items:1024" (items per block, the kernel's own block), or
 * "items:512,block:128" (and threads per block). */
static void launch_choice(const PlanStepChoice *c, char *buf, size_t len)
{
    int at = snprintf(buf, len, "items:%lld", (long long)c->items);
    if (c->block > 0) snprintf(buf + at, len - (size_t)at, ",block:%d", c->block);
}

/* A GEMM's choice: "default" (the library's own algorithm), "lt_algo:K" (the K-th of
 * cuBLASLt's list), "tile:64x64x32" (the generated kernel of that tile shape). */
static void gemm_choice(const PlanStepChoice *c, char *buf, size_t len)
{
    if (c->tile > 0) {
        char tile[32];
        plan_gemm_tile_name(c->tile - 1, tile, sizeof tile);
        snprintf(buf, len, "tile:%s", tile);
    } else if (c->algo == 0) {
        snprintf(buf, len, "default");
    } else {
        snprintf(buf, len, "lt_algo:%d", c->algo);
    }
}

/* The number after PREFIX in S, in [LO, HI]; false for anything else. */
static bool parse_number(const char *s, const char *prefix, long long lo, long long hi,
                         long long *out)
{
    size_t n = strlen(prefix);
    if (strncmp(s, prefix, n) != 0 || s[n] < '0' || s[n] > '9') return false;
    char *end;
    errno = 0;
    long long v = strtoll(s + n, &end, 10);
    if (*end || errno || v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* The choice launch_choice wrote, for kernel K (a block it cannot take is refused: over
 * its own, not whole warps, or other than its own where it is not any_block). */
static bool parse_launch_choice(const char *s, const PlanKernel *k, PlanStepChoice *c)
{
    char items[TUNE_TOKEN_MAX + 1];
    const char *comma = strchr(s, ',');
    long long v, block = 0;
    snprintf(items, sizeof items, "%.*s", comma ? (int)(comma - s) : (int)strlen(s), s);
    if (!parse_number(items, "items:", 1, 1ll << 30, &v)) return false;
    if (comma && !parse_number(comma + 1, "block:", 32, k->block - 1, &block)) return false;
    if (block % 32 != 0 || (block > 0 && !k->any_block)) return false;
    *c = (PlanStepChoice){.items = v, .block = (int)block};
    return true;
}

/* The choice gemm_choice wrote, for GEMM G (a tile shape G has no kernel for is
 * refused). */
static bool parse_gemm_choice(const char *s, const PlanGemm *g, PlanStepChoice *c)
{
    long long v;
    *c = (PlanStepChoice){0};
    if (strcmp(s, "default") == 0) return true;
    if (parse_number(s, "lt_algo:", 1, DEVICE_GEMM_ALGOS, &v)) {
        c->algo = (int)v;
        return true;
    }
    for (int t = 0; t < PLAN_GEMM_TILES; t++) {
        char want[48];
        c->tile = t + 1;
        gemm_choice(c, want, sizeof want);
        if (strcmp(s, want) == 0) return g->tile_kernel[t] >= 0;
    }
    return false;
}

/* A fused MLP run's key: its batch and its kernel's name without the prefix and the
 * shape, "m256.bf16_784_128r_128r_128r_10", "m256.bwd_bf16_10_128_128_128" (runs with
 * one key share one choice). */
static void mlp_key(const Plan *plan, const PlanMlp *run, const int64_t *symvals, char *buf,
                    size_t len)
{
    const char *name = plan->kernels[run->kernel[0]].name, *prefix = "mlp_fused_";
    char key[320];
    size_t n = strlen(name), skip = strncmp(name, prefix, strlen(prefix)) == 0 ? strlen(prefix) : 0;
    const char *shape = strrchr(name, '_');     /* "_rows16" */
    if (shape && shape > name + skip) n = (size_t)(shape - name);
    int64_t m = plan_gemm_m(&plan->graph[run->graph].steps[run->step[0]].gemm, symvals);
    snprintf(key, sizeof key, "m%lld.%.*s", (long long)m, (int)(n - skip), name + skip);
    kernel_key(key, buf, len);
}

/* A fused MLP run's choice: "steps" (its GEMMs, each by its own choice) or
 * "fused:rows64" (the fused kernel of that shape). */
static void mlp_choice(int shape, char *buf, size_t len)
{
    if (shape < 0) snprintf(buf, len, "steps");
    else snprintf(buf, len, "fused:rows%d", plan_mlp_rows[shape]);
}

static bool parse_mlp_choice(const char *s, int *shape)
{
    for (*shape = -1; *shape < PLAN_MLP_SHAPES; (*shape)++) {
        char want[32];
        mlp_choice(*shape, want, sizeof want);
        if (strcmp(s, want) == 0) return true;
    }
    return false;
}

/* An implicit-GEMM run's key: the batch, then per reader its GEMM's key and its kernels'
 * name without the tile ("window.b64.m50176.n32.k9....+nt_bf16_to_bf16_patches_a_c1h28w28_
 * k3s1p1d1_c_nchw784+m32..."; the GEMM's key alone where it has none), then, where a
 * library can compute it, the convolution ("+conv_c1h28w28_k3x3s1x1p1x1d1x1"), hashed
 * where longer than a token; runs of one key (the same GEMMs over the same patches and
 * layouts) share one choice. */
static void window_key(const Plan *plan, const PlanWindow *w, const int64_t *symvals, char *buf,
                       size_t len)
{
    char key[2048];
    int at = snprintf(key, sizeof key, "window.b%lld", (long long)symvals[0]);
    for (int j = 0; j < w->nreaders && at < (int)sizeof key; j++) {
        char gemm[TUNE_TOKEN_MAX + 1];
        autotune_gemm_key(&plan->graph[w->graph].steps[w->reader[j]].gemm, symvals, gemm, sizeof gemm);
        int k = -1;
        for (int t = 0; t < PLAN_GEMM_TILES && k < 0; t++) k = w->kernel[j][t];
        at += snprintf(key + at, sizeof key - (size_t)at, "%c%s", j ? '+' : '.', gemm);
        if (k < 0 || at >= (int)sizeof key) continue;     /* a run only the library computes */
        const char *name = plan->kernels[k].name, *kind = name + strlen("gemm_tc_");
        int n = (int)(strrchr(name, '_') - kind);
        at += snprintf(key + at, sizeof key - (size_t)at, "+%.*s", n, kind);
    }
    const IrWindow *win = &w->win;
    const int64_t *dim = w->image_shape.dim;
    if (w->conv && at < (int)sizeof key)    /* what the library's calls are */
        snprintf(key + at, sizeof key - (size_t)at, "+conv_c%lldh%lldw%lld_k%dx%ds%dx%dp%dx%dd%dx%d%s",
                 (long long)dim[1], (long long)dim[2], (long long)dim[3], win->kernel[0], win->kernel[1],
                 win->stride[0], win->stride[1], win->pad[0], win->pad[1], win->dilation[0], win->dilation[1],
                 w->fold >= 0 ? "_dgrad" : "");
    kernel_key(key, buf, len);
}

void autotune_window_key(const Plan *plan, int r, const int64_t *symvals, char *buf, size_t len)
{
    window_key(plan, &plan->windows[r], symvals, buf, len);
}

/* An implicit-GEMM run's choice: "patches" (the UNFOLD and its readers' own choices),
 * "implicit:64x64x32+32x64x32" (each reader's tile shape) or "cudnn:0+3+1" (each reader
 * by the convolution library, with that algorithm; 0 its own). */
static void window_choice(const PlanWindow *w, const int *tiles, const int *algos, char *buf, size_t len)
{
    if (algos && algos[0] >= 0) {
        int at = snprintf(buf, len, "cudnn:");
        for (int j = 0; j < w->nreaders && at < (int)len; j++)
            at += snprintf(buf + at, len - (size_t)at, "%s%d", j ? "+" : "", algos[j]);
        return;
    }
    if (!tiles || tiles[0] < 0) {
        snprintf(buf, len, "patches");
        return;
    }
    int at = snprintf(buf, len, "implicit:");
    for (int j = 0; j < w->nreaders && at < (int)len; j++) {
        char tile[32];
        plan_gemm_tile_name(tiles[j], tile, sizeof tile);
        at += snprintf(buf + at, len - (size_t)at, "%s%s", j ? "+" : "", tile);
    }
}

/* A "cudnn:" choice's algorithms into ALGOS; false unless W can take it. */
static bool parse_conv_choice(const char *s, const PlanWindow *w, int *algos)
{
    if (!w->conv) return false;
    for (int j = 0; j < w->nreaders; j++) {
        char *end;
        long a = strtol(s, &end, 10);
        if (end == s || *s == '-' || *s == '+' || a > DEVICE_CONV_ALGOS ||
            *end != (j + 1 < w->nreaders ? '+' : '\0'))
            return false;
        algos[j] = (int)a;
        s = *end ? end + 1 : end;
    }
    return true;
}

/* The choice window_choice wrote, for W, into TILES and ALGOS [PLAN_WINDOW_MAX_READERS]
 * (all -1: patches); a tile shape a reader has no kernel for is refused, as is the
 * library for a run it cannot compute. */
static bool parse_window_choice(const char *s, const PlanWindow *w, int *tiles, int *algos)
{
    for (int j = 0; j < PLAN_WINDOW_MAX_READERS; j++) tiles[j] = algos[j] = -1;
    if (strcmp(s, "patches") == 0) return true;
    if (strncmp(s, "cudnn:", 6) == 0) return parse_conv_choice(s + 6, w, algos);
    const char *prefix = "implicit:";
    if (strncmp(s, prefix, strlen(prefix)) != 0) return false;
    s += strlen(prefix);
    for (int j = 0; j < w->nreaders; j++) {
        for (int t = 0; t < PLAN_GEMM_TILES && tiles[j] < 0; t++) {
            char tile[32];
            plan_gemm_tile_name(t, tile, sizeof tile);
            size_t n = strlen(tile);
            if (w->kernel[j][t] >= 0 && strncmp(s, tile, n) == 0 && (s[n] == '+' || s[n] == '\0'))
                tiles[j] = t, s += n;
        }
        if (tiles[j] < 0 || *s != (j + 1 < w->nreaders ? '+' : '\0')) return false;
        if (*s) s++;
    }
    return true;
}

/* ---- timing ---- */

typedef struct Tuner {
    DevExec *e;
    Device *d;
    const Plan *plan;
    const DevFeed *feed;
    DeviceFence *from, *to;
    double start, budget_s;
    TuneFile *out;
    AutotuneReport *report;
} Tuner;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* What a candidate issues: step I of GID with choice C; or (C NULL) fused MLP run RUN
 * with shape SHAPE (-1: its steps); or (WINDOW) reader READER of implicit-GEMM run RUN by
 * its kernel of tile shape SHAPE (-1: its step with its choice), or (CONV) by the
 * library's algorithm SHAPE. */
typedef struct Issue {
    PlanGraphId gid;
    int i;
    const PlanStepChoice *c;
    int run, shape;
    bool window, conv;
    int reader;
} Issue;

static int issue(Tuner *t, const Issue *x)
{
    if (x->conv) return devexec_window_conv(t->e, x->run, x->reader, x->shape);
    if (x->window) return devexec_window(t->e, x->run, x->reader, x->shape, t->feed);
    return x->c ? devexec_step(t->e, x->gid, x->i, t->feed, x->c) : devexec_mlp(t->e, x->run, x->shape);
}

/* Whether X is a candidate the device may refuse and the run go on without: a GEMM
 * algorithm of the library's (a library's status leaves the device as it was), or a
 * generated kernel (a launch the driver cannot make, for its registers or shared memory
 * on this GPU, is refused before it runs). */
static bool may_be_refused(const Tuner *t, const Issue *x)
{
    if (!x->c) return x->shape >= 0 || x->conv;     /* a kernel or a library call, not steps */
    return x->c->tile > 0 || (t->plan->graph[x->gid].steps[x->i].kind == STEP_GEMM && x->c->algo > 0);
}

/* A failed issue of X: 1 when it was the first, X may_be_refused and the device still
 * works (a sync succeeds; an error that breaks the context fails it), so that the
 * candidate is dropped; -1 otherwise. */
static int failed_issue(Tuner *t, const Issue *x, bool first)
{
    const DeviceOps *ops = t->d->ops;
    return first && may_be_refused(t, x) && (!ops->sync || ops->sync(t->d) == 0) ? 1 : -1;
}

/* The median time in ms of one issue of X. A modeled clock has no noise to outlast: its
 * one timed issue is the time. Returns 0, or failed_issue's 1 or -1. */
static int time_candidate(Tuner *t, const Issue *x, double *ms)
{
    const DeviceOps *ops = t->d->ops;
    bool modeled = t->d->clock_modeled;
    int warmup = modeled ? 0 : WARMUP, samples = modeled ? 1 : SAMPLES, reps = modeled ? 1 : REPS;
    int issued = 0;
    double sample[SAMPLES];
    for (int w = 0; w < warmup; w++, issued++)
        if (issue(t, x) != 0) return failed_issue(t, x, issued == 0);
    for (int s = 0; s < samples; s++) {
        if (ops->fence_record(t->d, t->from) != 0) return -1;
        for (int r = 0; r < reps; r++, issued++)
            if (issue(t, x) != 0) return failed_issue(t, x, issued == 0);
        bool done;
        float elapsed;
        if (ops->fence_record(t->d, t->to) != 0 || ops->fence_done(t->d, t->to, true, &done) != 0 ||
            ops->fence_elapsed_ms(t->d, t->from, t->to, &elapsed) != 0)
            return -1;
        sample[s] = elapsed / reps;
    }
    qsort(sample, (size_t)samples, sizeof sample[0], cmp_double);
    *ms = sample[samples / 2];
    t->report->candidates++;
    return 0;
}

/* Times candidates C[0..N) of step I; the fastest into *BEST (the first of equals).
 * Refused candidates are counted and left out; -1 when every one is refused. */
static int pick(Tuner *t, PlanGraphId gid, int i, const PlanStepChoice *c, int n,
                PlanStepChoice *best, double *best_ms)
{
    *best_ms = -1;
    for (int k = 0; k < n; k++) {
        double ms;
        int rc = time_candidate(t, &(Issue){.gid = gid, .i = i, .c = &c[k]}, &ms);
        if (rc < 0) return -1;
        if (rc > 0) t->report->refused++;
        else if (*best_ms < 0 || ms < *best_ms) *best = c[k], *best_ms = ms;
    }
    if (*best_ms >= 0) return 0;
    const PlanStep *s = &t->plan->graph[gid].steps[i];
    cgc_error("autotune: the device refused every candidate of %s (line %d of the model): "
              "the errors are above", s->what, s->loc.line);
    return -1;
}

static bool over_budget(const Tuner *t) { return clock_seconds() - t->start > t->budget_s; }

/* Step I's choice among candidates C[0..N): timed when there are two or more and the
 * budget allows (then *TIMED is counted), else *BEST as the caller set it, the plan's;
 * put in force, its time in *MS (-1: untimed). */
static int choose(Tuner *t, PlanGraphId gid, int i, const PlanStepChoice *c, int n,
                  PlanStepChoice *best, double *ms, int *timed)
{
    *ms = -1;
    if (n > 1 && over_budget(t)) {
        t->report->untimed++;
    } else if (n > 1) {
        if (pick(t, gid, i, c, n, best, ms) != 0) return -1;
        (*timed)++;
    }
    devexec_choose(t->e, gid, i, best);
    return 0;
}

static void add(Tuner *t, TuneKind kind, const char *key, const char *choice, double ms)
{
    char why[256];
    if (!tune_add(t->out, kind, key, choice, ms, why, sizeof why))
        CGC_INTERNAL("autotune: %s", why);   /* keys and choices are made here, as tokens */
}

/* A launch: its kernel's block, and where the kernel is any_block a half and a quarter
 * of it (of whole warps), each with the items per block that keep a thread's share, x 1,
 * 2, 4, 8: those that give distinct grids. */
static int tune_launch(Tuner *t, PlanGraphId gid, int i)
{
    const PlanLaunch *l = &t->plan->graph[gid].steps[i].launch;
    const PlanKernel *k = &t->plan->kernels[l->kernel];
    char key[TUNE_TOKEN_MAX + 1];
    kernel_key(k->name, key, sizeof key);
    if (l->max_blocks == 1 || tune_find(t->out, TUNE_KERNEL, key)) return 0;
    int64_t per = l->items_per_block > 0 ? l->items_per_block : 1;    /* as plan_launch_grid */
    PlanStepChoice c[AUTOTUNE_BLOCKS * AUTOTUNE_GRID_FACTORS], best = {.items = per};
    int n = 0;
    for (int b = 0; b < (k->any_block ? AUTOTUNE_BLOCKS : 1); b++) {
        int block = k->block >> b;
        if (block < 32 || block % 32 != 0) break;
        int64_t items = per * block / k->block > 0 ? per * block / k->block : 1;
        unsigned last = 0;
        for (int f = 0; f < AUTOTUNE_GRID_FACTORS; f++) {
            unsigned grid = devexec_grid(t->e, l, items << f);
            if (f > 0 && grid == last) continue;
            c[n++] = (PlanStepChoice){.items = items << f, .block = b ? block : 0};
            last = grid;
        }
    }
    double ms;
    char choice[64];
    if (choose(t, gid, i, c, n, &best, &ms, &t->report->kernels) != 0) return -1;
    launch_choice(&best, choice, sizeof choice);
    add(t, TUNE_KERNEL, key, choice, ms);
    return 0;
}

/* A GEMM: cuBLAS's own (plain GEMMs), cuBLASLt's list, and the plan's generated
 * kernels (on sm_80 and later). */
static int tune_gemm(Tuner *t, PlanGraphId gid, int i)
{
    const PlanStep *s = &t->plan->graph[gid].steps[i];
    char key[TUNE_TOKEN_MAX + 1], choice[64];
    autotune_gemm_key(&s->gemm, t->feed->symvals, key, sizeof key);
    const TuneChoice *known = tune_find(t->out, TUNE_GEMM, key);
    PlanStepChoice best = {.algo = 0};
    if (known) {
        bool ok = parse_gemm_choice(known->choice, &s->gemm, &best);
        CGC_ASSERT(ok);     /* written below, by gemm_choice, for a step of the same key */
        devexec_choose(t->e, gid, i, &best);
        return 0;
    }
    GemmCall call = devexec_gemm_call(t->e, s);
    DeviceSite site = devexec_gemm_site(t->e, s, &call);
    int count = 0;
    if (t->d->ops->gemm_algos && call.m > 0 && call.n > 0 &&
        t->d->ops->gemm_algos(t->d, &call, &count, &site) != 0)
        return -1;
    PlanStepChoice c[DEVICE_GEMM_ALGOS + 1 + PLAN_GEMM_TILES];
    int n = 0;
    if (s->gemm.epilogue == GEMM_EPI_NONE || count == 0) c[n++] = (PlanStepChoice){.algo = 0};
    for (int a = 1; a <= count; a++) c[n++] = (PlanStepChoice){.algo = a};
    for (int k = 0; k < PLAN_GEMM_TILES && devexec_gemm_kernels_loaded(t->e); k++)
        if (s->gemm.tile_kernel[k] >= 0) c[n++] = (PlanStepChoice){.tile = k + 1};
    double ms;
    if (choose(t, gid, i, c, n, &best, &ms, &t->report->gemms) != 0) return -1;
    gemm_choice(&best, choice, sizeof choice);
    add(t, TUNE_GEMM, key, choice, ms);
    return 0;
}

/* A fused MLP run: its steps (each by the choice just made for it) or its fused kernel
 * in each shape, on sm_80 and later. */
static int tune_mlp(Tuner *t, int r)
{
    char key[TUNE_TOKEN_MAX + 1], choice[32];
    mlp_key(t->plan, &t->plan->mlps[r], t->feed->symvals, key, sizeof key);
    const TuneChoice *known = tune_find(t->out, TUNE_MLP, key);
    int best = -1;
    if (known) {
        bool ok = parse_mlp_choice(known->choice, &best);
        CGC_ASSERT(ok);     /* written below, by mlp_choice */
        devexec_choose_mlp(t->e, r, best);
        return 0;
    }
    double best_ms = -1;
    int n = devexec_gemm_kernels_loaded(t->e) ? 1 + PLAN_MLP_SHAPES : 1;
    if (n > 1 && over_budget(t)) {
        t->report->untimed++;
    } else if (n > 1) {
        for (int shape = -1; shape < PLAN_MLP_SHAPES; shape++) {
            double ms;
            int rc = time_candidate(t, &(Issue){.run = r, .shape = shape}, &ms);
            if (rc < 0) return -1;
            if (rc > 0) t->report->refused++;
            else if (best_ms < 0 || ms < best_ms) best = shape, best_ms = ms;
        }
        t->report->mlps++;
    }
    devexec_choose_mlp(t->e, r, best);
    mlp_choice(best, choice, sizeof choice);
    add(t, TUNE_MLP, key, choice, best_ms);
    return 0;
}

/* The time of X into *SUM (added), or *SUM = -1 once a candidate is refused; -1 for an
 * error. */
static int time_into(Tuner *t, const Issue *x, double *sum)
{
    double ms;
    int rc = time_candidate(t, x, &ms);
    if (rc < 0) return -1;
    if (rc > 0) t->report->refused++;
    if (*sum >= 0) *sum = rc > 0 ? -1 : *sum + ms;
    return 0;
}

/* Run W's patches: its UNFOLD step, TRANSPOSEs, epilogue and readers, each by the
 * choice just made for it, into *MS. */
static int time_patches(Tuner *t, int r, double *ms)
{
    const PlanWindow *w = &t->plan->windows[r];
    int steps[4] = {w->unfold, w->transpose, w->grad_transpose, w->epilogue};
    *ms = 0;
    for (int k = 0; k < 4; k++) {
        if (steps[k] < 0) continue;
        PlanStepChoice c = devexec_choice_of(t->e, w->graph, steps[k]);
        if (time_into(t, &(Issue){.gid = w->graph, .i = steps[k], .c = &c}, ms) != 0) return -1;
    }
    for (int j = 0; j < w->nreaders; j++)
        if (time_into(t, &(Issue){.window = true, .run = r, .reader = j, .shape = -1}, ms) != 0) return -1;
    return 0;
}

/* Each reader's fastest candidate into PICK, their sum into *MS (-1: a reader has none
 * the device runs): its implicit kernels (the tile shape), or (CONV) the library's
 * algorithms (from 1). */
static int time_readers(Tuner *t, int r, bool conv, int *pick, double *ms)
{
    const PlanWindow *w = &t->plan->windows[r];
    *ms = 0;
    for (int j = 0; j < w->nreaders; j++) {
        int count = PLAN_GEMM_TILES;
        double best = -1;
        if (conv && devexec_conv_algos(t->e, r, j, &count) != 0) return -1;
        for (int k = 0; k < count; k++) {
            if (!conv && w->kernel[j][k] < 0) continue;
            double x = 0;
            Issue is = {.window = !conv, .conv = conv, .run = r, .reader = j, .shape = conv ? k + 1 : k};
            if (time_into(t, &is, &x) != 0) return -1;
            if (x >= 0 && (best < 0 || x < best)) best = x, pick[j] = is.shape;
        }
        *ms = best < 0 || *ms < 0 ? -1 : *ms + best;
    }
    return 0;
}

/* Puts run R's choice in force: TILES (each reader's tile shape) or ALGOS (each reader's
 * algorithm of the library), whichever is on (its first entry >= 0), else the steps; a
 * device without the library runs the steps for ALGOS. */
static void choose_window(DevExec *e, int r, const int *tiles, const int *algos)
{
    devexec_choose_window(e, r, tiles[0] >= 0 ? tiles : NULL);
    devexec_choose_window_conv(e, r, algos[0] >= 0 && devexec_has_conv(e) ? algos : NULL);
}

/* An implicit-GEMM run: its steps (the patches) against each reader's fastest implicit
 * kernel (sm_80 and later, the generated kernels loaded) and against each reader's
 * fastest algorithm of the convolution library (where the device has one), which skips
 * the data gradient's FOLD too (timed with the other two). Untimed, the library's own
 * algorithms where it can run the run (what the other modes do), else the steps. */
static int tune_window(Tuner *t, int r)
{
    const PlanWindow *w = &t->plan->windows[r];
    char key[TUNE_TOKEN_MAX + 1], choice[160];
    window_key(t->plan, w, t->feed->symvals, key, sizeof key);
    int tiles[PLAN_WINDOW_MAX_READERS], algos[PLAN_WINDOW_MAX_READERS];
    const TuneChoice *known = tune_find(t->out, TUNE_WINDOW, key);
    if (known) {
        bool ok = parse_window_choice(known->choice, w, tiles, algos);
        CGC_ASSERT(ok);     /* written below, by window_choice, for a run of the same key */
        choose_window(t->e, r, tiles, algos);
        return 0;
    }
    bool implicit_ok = w->implicit && devexec_gemm_kernels_loaded(t->e), conv_ok = w->conv && devexec_has_conv(t->e);
    double patches = -1, implicit = -1, conv = -1, fold = 0, best = -1;
    for (int j = 0; j < PLAN_WINDOW_MAX_READERS; j++) tiles[j] = algos[j] = -1;
    if (!(implicit_ok || conv_ok) || over_budget(t)) {
        if (implicit_ok || conv_ok) t->report->untimed++;
        if (conv_ok)
            for (int j = 0; j < w->nreaders; j++) algos[j] = 0;
    } else {
        PlanStepChoice fc = w->fold >= 0 ? devexec_choice_of(t->e, w->graph, w->fold) : (PlanStepChoice){0};
        PlanStepChoice ec = w->epilogue >= 0 ? devexec_choice_of(t->e, w->graph, w->epilogue) : (PlanStepChoice){0};
        if (time_patches(t, r, &patches) != 0 ||
            (implicit_ok && time_readers(t, r, false, tiles, &implicit) != 0) ||
            (conv_ok && time_readers(t, r, true, algos, &conv) != 0) ||
            (conv_ok && w->fold >= 0 && time_into(t, &(Issue){.gid = w->graph, .i = w->fold, .c = &fc}, &fold) != 0) ||
            (conv >= 0 && w->epilogue >= 0 &&   /* the library's forward leaves the epilogue a step */
             time_into(t, &(Issue){.gid = w->graph, .i = w->epilogue, .c = &ec}, &conv) != 0))
            return -1;
        t->report->windows++;
        best = patches < 0 ? -1 : patches + fold;
        if (implicit >= 0 && (best < 0 || implicit + fold < best)) best = implicit + fold;
        else tiles[0] = -1;
        if (conv >= 0 && (best < 0 || conv < best)) best = conv, tiles[0] = -1;
        else algos[0] = -1;
    }
    choose_window(t->e, r, tiles, algos);
    window_choice(w, tiles, algos, choice, sizeof choice);
    add(t, TUNE_WINDOW, key, choice, best);
    return 0;
}

/* The choice of run R of a graph not tuned, which follows a training run (PlanWindow
 * .follows) whose readers' tile shapes are TWIN: implicit where that run is, each reader
 * with the tile shape of the twin's product where it has that kernel (else its
 * smallest), into TILES; returns whether it is on. Off, R keeps its own default (the
 * library's algorithm where it has one, else the steps). */
static bool follow_tiles(const Plan *plan, int r, const int *twin, int *tiles)
{
    const PlanWindow *w = &plan->windows[r];
    CGC_ASSERT(w->follows >= 0);
    int t = twin[plan->windows[w->follows].store_reader];
    for (int j = 0; j < PLAN_WINDOW_MAX_READERS; j++) tiles[j] = -1;
    if (twin[0] < 0) return false;
    for (int j = 0; j < w->nreaders; j++) {
        tiles[j] = t >= 0 && w->kernel[j][t] >= 0 ? t : 0;
        while (w->kernel[j][tiles[j]] < 0) tiles[j]++;     /* a follower has some kernel */
    }
    return true;
}

/* The runs that follow a training run, put in force as their twins now are. */
static void follow_live(DevExec *e, const Plan *plan)
{
    for (int r = 0; r < plan->nwindows; r++) {
        int twin[PLAN_WINDOW_MAX_READERS], tiles[PLAN_WINDOW_MAX_READERS];
        if (plan->windows[r].follows < 0) continue;
        for (int j = 0; j < PLAN_WINDOW_MAX_READERS; j++) twin[j] = devexec_window_tile(e, plan->windows[r].follows, j);
        if (follow_tiles(plan, r, twin, tiles)) devexec_choose_window(e, r, tiles);
    }
}

int autotune_run(DevExec *e, const Plan *plan, const DevFeed *feed, double budget_s,
                 TuneFile *out, AutotuneReport *report)
{
    memset(report, 0, sizeof *report);
    Tuner t = {.e = e, .d = devexec_device(e), .plan = plan, .feed = feed,
               .start = clock_seconds(), .budget_s = budget_s, .out = out, .report = report};
    const DeviceOps *ops = t.d->ops;
    int rc = ops->fence_new(t.d, &t.from) != 0 || ops->fence_new(t.d, &t.to) != 0 ? -1 : 0;
    if (rc == 0) rc = devexec_bind(e, feed);
    /* the generated GEMMs are candidates on sm_80 and later (mma.sync m16n8k16) */
    if (rc == 0 && t.d->arch >= 80) rc = devexec_load_gemm_kernels(e, &report->gemm_compile_s);
    for (int gid = 0; gid < PG_NUM && rc == 0; gid++) {
        if (!tuned_graph((PlanGraphId)gid)) continue;
        const PlanGraph *pg = &plan->graph[gid];
        for (int i = 0; i < pg->nsteps && rc == 0; i++)
            rc = pg->steps[i].kind == STEP_GEMM ? tune_gemm(&t, (PlanGraphId)gid, i)
                                                : tune_launch(&t, (PlanGraphId)gid, i);
        for (int r = 0; r < plan->nmlps && rc == 0; r++)    /* against its steps' choices */
            if ((int)plan->mlps[r].graph == gid) rc = tune_mlp(&t, r);
        for (int r = 0; r < plan->nwindows && rc == 0; r++)
            if ((int)plan->windows[r].graph == gid) rc = tune_window(&t, r);
    }
    if (rc == 0) follow_live(e, plan);
    if (rc == 0 && ops->sync) rc = ops->sync(t.d);
    if (t.from) ops->fence_free(t.d, t.from);
    if (t.to) ops->fence_free(t.d, t.to);
    report->seconds = clock_seconds() - t.start;
    out->tuning_ms = report->seconds * 1e3;
    return rc;
}

/* ---- choices read back ---- */

static int refuse(char *why, size_t why_len, const char *what, const char *key)
{
    snprintf(why, why_len, "%s %s", what, key);
    return -1;
}

/* Step S's choice in T into *C; -1 with WHY when T has none or one the tuner would not
 * write for S on sm_ARCH. */
static int resolve_step(const Plan *plan, const PlanStep *s, const int64_t *symvals, int arch,
                        const TuneFile *t, PlanStepChoice *c, char *why, size_t why_len)
{
    char key[TUNE_TOKEN_MAX + 1];
    if (s->kind == STEP_LAUNCH) {
        if (s->launch.max_blocks == 1) return 0;    /* no choice: one block */
        kernel_key(plan->kernels[s->launch.kernel].name, key, sizeof key);
        const TuneChoice *ch = tune_find(t, TUNE_KERNEL, key);
        if (!ch) return refuse(why, why_len, "no choice for kernel", key);
        if (!parse_launch_choice(ch->choice, &plan->kernels[s->launch.kernel], c))
            return refuse(why, why_len, "not a launch shape the tuner writes for it:", ch->choice);
        return 0;
    }
    autotune_gemm_key(&s->gemm, symvals, key, sizeof key);
    const TuneChoice *ch = tune_find(t, TUNE_GEMM, key);
    if (!ch) return refuse(why, why_len, "no choice for GEMM", key);
    if (!parse_gemm_choice(ch->choice, &s->gemm, c))
        return refuse(why, why_len, "not a GEMM choice the tuner writes for it:", ch->choice);
    if (c->tile > 0 && arch < 80)
        return refuse(why, why_len, "a generated GEMM needs sm_80 or later:", ch->choice);
    return 0;
}

int autotune_resolve(const Plan *plan, const int64_t *symvals, int arch, const TuneFile *t,
                     PlanChoices *out, char *why, size_t why_len)
{
    plan_choices_init(out, plan);
    out->arch = t->arch;
    if (t->tuning_ms >= 0) snprintf(out->device, sizeof out->device, "%s", t->device);
    int rc = 0;
    for (int gid = 0; gid < PG_NUM && rc == 0; gid++) {
        const PlanGraph *pg = &plan->graph[gid];
        for (int i = 0; out->step[gid] && i < pg->nsteps && rc == 0; i++)
            rc = resolve_step(plan, &pg->steps[i], symvals, arch, t, &out->step[gid][i], why, why_len);
    }
    for (int r = 0; r < plan->nmlps && rc == 0; r++) {
        char key[TUNE_TOKEN_MAX + 1];
        mlp_key(plan, &plan->mlps[r], symvals, key, sizeof key);
        const TuneChoice *ch = tune_find(t, TUNE_MLP, key);
        if (!ch) rc = refuse(why, why_len, "no choice for the fused MLP run", key);
        else if (!parse_mlp_choice(ch->choice, &out->mlp_shape[r]))
            rc = refuse(why, why_len, "not a fused MLP choice the tuner writes:", ch->choice);
        else if (out->mlp_shape[r] >= 0 && arch < 80)
            rc = refuse(why, why_len, "a fused MLP kernel needs sm_80 or later:", ch->choice);
    }
    for (int r = 0; r < plan->nwindows && rc == 0; r++) {
        char key[TUNE_TOKEN_MAX + 1];
        int *tiles = &out->window_tile[r * PLAN_WINDOW_MAX_READERS];
        if (!tuned_graph(plan->windows[r].graph)) continue;     /* the library's own, where there is one */
        window_key(plan, &plan->windows[r], symvals, key, sizeof key);
        const TuneChoice *ch = tune_find(t, TUNE_WINDOW, key);
        if (!ch) rc = refuse(why, why_len, "no choice for the convolution's patches", key);
        else if (!parse_window_choice(ch->choice, &plan->windows[r], tiles,
                                      &out->window_conv[r * PLAN_WINDOW_MAX_READERS]))
            rc = refuse(why, why_len, "not a convolution choice the tuner writes:", ch->choice);
        else if (tiles[0] >= 0 && arch < 80)
            rc = refuse(why, why_len, "an implicit GEMM kernel needs sm_80 or later:", ch->choice);
    }
    for (int r = 0; r < plan->nwindows && rc == 0; r++) {
        int *tiles = &out->window_tile[r * PLAN_WINDOW_MAX_READERS];
        if (plan->windows[r].follows < 0 ||
            !follow_tiles(plan, r, &out->window_tile[plan->windows[r].follows * PLAN_WINDOW_MAX_READERS], tiles))
            continue;
        for (int j = 0; j < PLAN_WINDOW_MAX_READERS; j++) out->window_conv[r * PLAN_WINDOW_MAX_READERS + j] = -1;
    }
    if (rc != 0) plan_choices_free(out);
    return rc;
}

int autotune_apply(DevExec *e, const Plan *plan, const DevFeed *feed, const TuneFile *t,
                   char *why, size_t why_len)
{
    if (devexec_bind(e, feed) != 0) {
        snprintf(why, why_len, "cannot bind the batch (the error above)");
        return -2;
    }
    PlanChoices c;
    if (autotune_resolve(plan, feed->symvals, devexec_device(e)->arch, t, &c, why, why_len) != 0)
        return -1;
    double seconds;
    if (plan_choices_generated(&c, plan) && devexec_load_gemm_kernels(e, &seconds) != 0) {
        plan_choices_free(&c);
        snprintf(why, why_len, "cannot load the generated GEMM and MLP kernels it names (the "
                               "error above)");
        return -2;
    }
    for (int gid = 0; gid < PG_NUM; gid++) {
        const PlanGraph *pg = &plan->graph[gid];
        for (int i = 0; c.step[gid] && i < pg->nsteps; i++)
            if (pg->steps[i].kind == STEP_GEMM || pg->steps[i].launch.max_blocks != 1)
                devexec_choose(e, (PlanGraphId)gid, i, &c.step[gid][i]);
    }
    for (int r = 0; r < plan->nmlps; r++) devexec_choose_mlp(e, r, c.mlp_shape[r]);
    for (int r = 0; r < plan->nwindows; r++)
        choose_window(e, r, &c.window_tile[r * PLAN_WINDOW_MAX_READERS],
                      &c.window_conv[r * PLAN_WINDOW_MAX_READERS]);
    plan_choices_free(&c);
    return 0;
}

/* ---- without a device ---- */

void autotune_heuristics(const Plan *plan, const int64_t *symvals, TuneFile *out)
{
    char why[256], key[TUNE_TOKEN_MAX + 1], choice[64];
    for (int gid = 0; gid < PG_NUM; gid++) {
        if (!tuned_graph((PlanGraphId)gid)) continue;
        const PlanGraph *pg = &plan->graph[gid];
        for (int i = 0; i < pg->nsteps; i++) {
            const PlanStep *s = &pg->steps[i];
            TuneKind kind = s->kind == STEP_GEMM ? TUNE_GEMM : TUNE_KERNEL;
            if (kind == TUNE_GEMM) {
                autotune_gemm_key(&s->gemm, symvals, key, sizeof key);
                gemm_choice(&(PlanStepChoice){0}, choice, sizeof choice);
            } else {
                if (s->launch.max_blocks == 1) continue;
                kernel_key(plan->kernels[s->launch.kernel].name, key, sizeof key);
                PlanStepChoice c = {.items = s->launch.items_per_block > 0 ? s->launch.items_per_block : 1};
                launch_choice(&c, choice, sizeof choice);
            }
            if (!tune_find(out, kind, key) && !tune_add(out, kind, key, choice, -1, why, sizeof why))
                CGC_INTERNAL("autotune: %s", why);
        }
    }
    for (int r = 0; r < plan->nmlps; r++) {
        mlp_key(plan, &plan->mlps[r], symvals, key, sizeof key);
        mlp_choice(-1, choice, sizeof choice);
        if (!tune_find(out, TUNE_MLP, key) && !tune_add(out, TUNE_MLP, key, choice, -1, why, sizeof why))
            CGC_INTERNAL("autotune: %s", why);
    }
    for (int r = 0; r < plan->nwindows; r++) {
        const PlanWindow *w = &plan->windows[r];
        int algos[PLAN_WINDOW_MAX_READERS] = {0};    /* the library's own, where it can */
        if (!tuned_graph(w->graph)) continue;
        window_key(plan, w, symvals, key, sizeof key);
        window_choice(w, NULL, w->conv ? algos : NULL, choice, sizeof choice);
        if (!tune_find(out, TUNE_WINDOW, key) && !tune_add(out, TUNE_WINDOW, key, choice, -1, why, sizeof why))
            CGC_INTERNAL("autotune: %s", why);
    }
    out->tuning_ms = -1;
}

/* The kernels of the tuned graphs' launches that have a choice and are any_block. */
static int any_block_kernels(const Plan *plan)
{
    bool *seen = xcalloc((size_t)plan->nkernels + 1, sizeof *seen);
    int n = 0;
    for (int gid = 0; gid < PG_NUM; gid++)
        for (int i = 0; tuned_graph((PlanGraphId)gid) && i < plan->graph[gid].nsteps; i++) {
            const PlanStep *s = &plan->graph[gid].steps[i];
            if (s->kind != STEP_LAUNCH || s->launch.max_blocks == 1 || seen[s->launch.kernel]) continue;
            seen[s->launch.kernel] = true;
            n += plan->kernels[s->launch.kernel].any_block;
        }
    free(seen);
    return n;
}

void autotune_explain(const Plan *plan, FILE *out)
{
    int64_t symvals[IR_MAX_SYMBOLS] = {plan->p->cfg.batch};
    TuneFile t;
    char why[256];
    if (!tune_init(&t, "explain", 90, "none", 0, why, sizeof why)) CGC_INTERNAL("%s", why);
    autotune_heuristics(plan, symvals, &t);
    int count[TUNE_NKINDS] = {0};
    for (int i = 0; i < t.nchoices; i++) count[t.choices[i].kind]++;
    static const char *const kind_name[TUNE_NKINDS] = {"gemm", "kernel", "mlp", "window"};
    int generated = plan->mlp_kernels_from - plan->gemm_kernels_from;
    fprintf(out, "\nAutotune: %d kernels and %d GEMM shapes of the training step have a "
                 "choice. On a GPU\neach is timed and the fastest is kept in the cache "
                 "(cgc/tune/): a launch's items per\nblock x 1, 2, 4, 8 (for the %d kernels "
                 "that share nothing across a block, with\nall, half and a quarter of its "
                 "threads); a GEMM's cuBLAS algorithm, cuBLASLt's\nheuristic list",
            count[TUNE_KERNEL], count[TUNE_GEMM], any_block_kernels(plan));
    if (generated > 0)
        fprintf(out, " and, from\nsm_80, the plan's generated tensor-core kernels (%d here, "
                     "in %d tile shapes less\nthose a smaller one matches in blocks, the "
                     "epilogue fused; compiled when tuning\nstarts)",
                generated, PLAN_GEMM_TILES);

    fprintf(out, ".\n");
    int backward = 0;
    for (int r = 0; r < plan->nmlps; r++) backward += plan->mlps[r].backward;
    if (plan->nmlps > 0 && backward == 0)
        fprintf(out, "From sm_80 too, %d run%s of GEMMs that %s a narrow MLP's forward pass: "
                     "the steps\nagainst one fully fused kernel (%d kernels here, in %d shapes).\n",
                plan->nmlps, plan->nmlps == 1 ? "" : "s", plan->nmlps == 1 ? "is" : "are",
                plan->nkernels - plan->mlp_kernels_from, PLAN_MLP_SHAPES);
    else if (plan->nmlps > 0)
        fprintf(out, "From sm_80 too, %d runs of GEMMs that are a narrow MLP's pass (%d forward, %d "
                     "backward: the\ninput gradients): the steps against one fully fused kernel (%d "
                     "kernels here, in %d\nshapes).\n",
                plan->nmlps, plan->nmlps - backward, backward, plan->nkernels - plan->mlp_kernels_from,
                PLAN_MLP_SHAPES);
    int implicit = 0, nchw = 0, epilogues = 0, grads = 0, conv = 0, followers = 0;
    for (int r = 0; r < plan->nwindows; r++) {
        const PlanWindow *w = &plan->windows[r];
        followers += w->follows >= 0;
        if (!tuned_graph(w->graph)) continue;
        conv += w->conv;
        if (!w->implicit) continue;
        implicit++;
        nchw += w->store_reader >= 0;
        epilogues += w->epilogue >= 0;
        grads += w->grad_transpose >= 0;
    }
    if (implicit > 0)
        fprintf(out, "From sm_80 too, %d convolution%s patches: the UNFOLD and the GEMMs that read "
                     "them against\nimplicit GEMMs gathering from the image (among the kernels above), "
                     "the UNFOLD skipped;\nin %d the product is stored NCHW and in %d its gradient read "
                     "NCHW, their TRANSPOSEs\nskipped too; %d compute the pointwise group that reads the "
                     "product on it instead of\nstoring it; the evaluation's %d products take "
                     "training's choice, untimed.\n",
                implicit, implicit == 1 ? "'s" : "s'", nchw, grads, epilogues, followers);
    if (conv > 0)
        fprintf(out, "Where cuDNN loads, %d convolution%s steps against each of cuDNN's deterministic "
                     "algorithms\nfor each call (forward, filter and data gradients; cudnn.benchmark's "
                     "search); before\ntuning, and in the other modes, cuDNN's own choice.\n",
                conv, conv == 1 ? "'s" : "s'");
    fprintf(out, "Nothing is timed here: these are the choices before tuning.\n");
    fprintf(out, "  %-6s  %-56s  %s\n", "kind", "key", "choice");
    for (int i = 0; i < t.nchoices; i++)
        fprintf(out, "  %-6s  %-56s  %s\n", kind_name[t.choices[i].kind], t.choices[i].key,
                t.choices[i].choice);
    tune_free(&t);
}
