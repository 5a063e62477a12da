/* bench.c: --bench (see bench.h). */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile.h"
#include "backend.h"
#include "../base/clock.h"
#include "../codegen/perf.h"
#include "../runtime/device.h"
#include "../runtime/train.h"

/* What one mode gives. */
typedef struct ModeFigures {
    int kernels, gemms;             /* per training step */
    size_t peak, activations;       /* planned bytes */
    double cold, warm;              /* seconds; < 0: not measured */
    bool warm_from_cache;
    double predicted;               /* the model's step on an H200 (perf.h), seconds */
    StepTimes steps;                /* on a GPU; n == 0: not measured */
    double on_device;               /* the model's step on the GPU's part; < 0: not known */
    const char *part;               /* that part's name */
} ModeFigures;

/* Steps timed per mode after the warm-up (train.h): enough for a stable median. */
enum { BENCH_TIMED_STEPS = 200 };

/* Front end, passes and plan for MODE; *SECONDS their time. QUIET: the warnings were
 * given by the same compile before. Returns 0 or -1 (reported). */
static int compile_mode(const BenchOptions *o, PlanMode mode, bool quiet, IrProgram **p,
                        Compiled *c, double *seconds)
{
    double start = clock_seconds();
    *p = pipeline_compile(o->src, o->overrides, o->noverrides);
    if (!*p) return -1;
    CompileOptions co = {.mode = mode, .net_path = o->net_path, .quiet = quiet};
    if (compile_program(*p, &co, c) != 0) {
        ir_program_free(*p);
        return -1;
    }
    *seconds = clock_seconds() - start;
    return 0;
}

/* One whole compile of MODE to a cubin for ARCH (none when ARCH <= 0), cold or warm: its
 * seconds in *SECONDS (< 0: not compiled). Returns 0, or -1 after an error (reported). */
static int timed_compile(const BenchOptions *o, PlanMode mode, int arch, bool cold,
                         ModeFigures *f, double *seconds)
{
    IrProgram *p;
    Compiled c;
    double front;
    if (compile_mode(o, mode, !cold, &p, &c, &front) != 0) return -1;
    f->kernels = compiled_steps_per_train(&c, &f->gemms);
    f->peak = c.layout.arena_bytes;
    f->activations = compiled_activation_bytes(&c);
    f->predicted = compiled_predicted_seconds(&c, &perf_parts[perf_nparts - 1]);
    *seconds = -1;
    int rc = 0;
    if (arch > 0) {
        char *source = plan_module_source(c.plan);
        CudaCompileOptions co = {.arch = arch, .cold = cold};
        CudaCompileResult r = {0};
        rc = cuda_compile(source, p->model_name, &co, &r);
        if (rc == 0) {
            *seconds = front + r.seconds;
            if (!cold) f->warm_from_cache = r.from_cache;
        }
        free(r.cubin);
        free(source);
    }
    compiled_free(&c);
    ir_program_free(p);
    return rc;
}

/* Trains MODE on the device --device opens for the warm-up and BENCH_TIMED_STEPS steps
 * (fewer when the run is shorter), quietly, into F->steps. Returns 0, or -1 after an
 * error (reported). */
static int time_steps(const BenchOptions *o, PlanMode mode, ModeFigures *f)
{
    IrProgram *p;
    Compiled c;
    double front;
    if (compile_mode(o, mode, true, &p, &c, &front) != 0) return -1;
    BackendOptions bo = {.device = o->device, .plan = c.plan, .net_path = o->net_path,
                         .quiet = true};
    Backend b;
    int rc = backend_open(&bo, &b);
    if (rc == 0) {
        RunOptions ro = {.net_path = o->net_path, .src = o->src, .quiet = true,
                         .device = b.device, .plan = b.plan, .step_times = &f->steps,
                         .tune_budget_s = o->tune_budget_s,
                         .stop_after = TRAIN_TIMING_WARMUP + BENCH_TIMED_STEPS};
        if (b.device) rc = train_run(p, &ro);
        const PerfPart *part = b.device ? perf_part_named(b.device->model) : NULL;
        f->on_device = part ? compiled_predicted_seconds(&c, part) : -1;
        f->part = part ? part->name : NULL;
        backend_close(&b);
    }
    compiled_free(&c);
    ir_program_free(p);
    return rc == 0 ? 0 : -1;
}

static int measure(const BenchOptions *o, PlanMode mode, int arch, ModeFigures *f)
{
    memset(f, 0, sizeof *f);
    if (timed_compile(o, mode, arch, true, f, &f->cold) != 0) return -1;
    return timed_compile(o, mode, arch, false, f, &f->warm);
}

static void print_seconds(double s)
{
    if (s < 0) printf(" %15s", "-");
    else if (s < 1) printf(" %12.1f ms", s * 1e3);
    else printf(" %13.2f s", s);
}

static void print_bytes(size_t n)
{
    char b[32];
    diag_format_bytes(n, b, sizeof b);
    printf(" %15s", b);
}

/* The ratio of eager's figure to the mode's: "2.95x less" when the mode's is smaller,
 * "1.10x more" when it is larger. */
static void print_ratio(double eager, double other, const char *less)
{
    if (eager > 0 && other > 0 && eager >= other) printf("   %.2fx %s", eager / other, less);
    else if (eager > 0 && other > 0) printf("   %.2fx more", other / eager);
    putchar('\n');
}

/* Whether --device would run on a GPU (auto: when one is usable). */
static bool on_gpu(const char *device)
{
    if (strncmp(device, "cuda", 4) == 0) return true;
    if (strcmp(device, "auto") != 0) return false;
    CudaDeviceInfo info[1];
    char why[256];
    return cuda_probe(info, 1, why, sizeof why) > 0;
}

int bench_run(const BenchOptions *o)
{
    PlanMode mode = o->mode == PLAN_EAGER ? PLAN_DEFAULT : o->mode;
    const char *name = plan_mode_name(mode);
    int arch = o->arch == 0 ? backend_default_arch() : o->arch;
    ModeFigures e, m;
    if (measure(o, PLAN_EAGER, arch, &e) != 0 || measure(o, mode, arch, &m) != 0) return 1;

    printf("cgc --bench %s: eager against %s\n\n", o->net_path, name);
    printf("%-26s %15s %15s\n", "", "eager", name);
    printf("%-26s %15d %15d", "launches per step", e.kernels, m.kernels);
    print_ratio(e.kernels, m.kernels, "fewer");
    printf("%-26s %15d %15d\n", "  of which GEMMs", e.gemms, m.gemms);
    if (plan_mode_captures(mode))
        printf("  (%s makes each micro-batch's launches one CUDA graph launch\n"
               "   from the second full batch on)\n", name);
    printf("%-26s", "planned peak memory");
    print_bytes(e.peak), print_bytes(m.peak);
    print_ratio((double)e.peak, (double)m.peak, "less");
    printf("%-26s", "  activations, temporaries");
    print_bytes(e.activations), print_bytes(m.activations);
    print_ratio((double)e.activations, (double)m.activations, "less");
    printf("%-26s %12.4f ms %12.4f ms", "step, predicted", e.predicted * 1e3, m.predicted * 1e3);
    print_ratio(e.predicted, m.predicted, "faster");
    printf("  (the performance model's, on an %s: --explain)\n", perf_parts[perf_nparts - 1].name);
    if (arch > 0) {
        printf("%-26s", "compile, cold");
        print_seconds(e.cold), print_seconds(m.cold);
        printf("   front end, passes, NVRTC for sm_%d\n", arch);
        printf("%-26s", "compile, warm");
        print_seconds(e.warm), print_seconds(m.warm);
        printf("   %s\n", e.warm_from_cache && m.warm_from_cache
                              ? "the module from the kernel cache"
                              : "not from the cache: it is off or unusable (see above)");
    } else {
        printf("compile times: not measured (--arch none)\n");
    }
    if (!on_gpu(o->device)) {
        printf("\nstep times: not measured: on the CPU both modes run the same IR through the "
               "reference\nexecutor, so there is nothing of the modes' to time: that needs a GPU\n");
        return 0;
    }
    if (time_steps(o, PLAN_EAGER, &e) != 0 || time_steps(o, mode, &m) != 0) return 1;
    if (e.steps.n == 0 || m.steps.n == 0) {
        printf("\nstep times: not measured: a mode's run timed no step (it has %d steps or "
               "fewer, all\nwarm-up, or no GPU could be opened)\n", TRAIN_TIMING_WARMUP);
        return 0;
    }
    printf("\nstep times (device time between events around each step, after %d steps of "
           "warm-up;\n%d steps timed in eager, %d in %s):\n", TRAIN_TIMING_WARMUP, e.steps.n,
           m.steps.n, name);
    const char *rows[3] = {"step, median", "step, p10", "step, p90"};
    double ev[3] = {e.steps.median_ms, e.steps.p10_ms, e.steps.p90_ms};
    double mv[3] = {m.steps.median_ms, m.steps.p10_ms, m.steps.p90_ms};
    for (int i = 0; i < 3; i++) {
        printf("%-26s %12.4f ms %12.4f ms", rows[i], ev[i], mv[i]);
        print_ratio(ev[i], mv[i], "faster");
    }
    if (e.on_device >= 0 && m.on_device >= 0)
        printf("%-26s %13.0f%% %14.0f%%  (the model's step on the %s over the median)\n",
               "  of the prediction", 100 * e.on_device / (ev[0] * 1e-3), 100 * m.on_device / (mv[0] * 1e-3),
               e.part);
    else
        printf("  of the prediction: not known (the model has no figures for this GPU)\n");
    /* The plan's counts above are before max-autotune's choices; these are what ran. */
    printf("%-26s %15d %15d", "launches per step, as run", e.steps.launches, m.steps.launches);
    print_ratio(e.steps.launches, m.steps.launches, "fewer");
    printf("%-26s %15d %15d\n", "  of which GEMMs", e.steps.gemms, m.steps.gemms);
    return 0;
}
