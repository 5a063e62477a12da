/* test_nvrtc_models.c: every model of models/ in every precision, planned in the eager
 * and the default (fused) mode, compiled whole by NVRTC (the cache off, so NVRTC really
 * runs), each plan for sm_80 or sm_90 in turn so that each precision and mode meets
 * both; and max-autotune's generated GEMMs (their own module) of
 * mlp.net in f16 (sm_80) and bf16 (sm_90), which hold every kind the shipped models
 * make (nt with bias and relu, nt, nn, tn; every tile shape). Any NVRTC error fails the test and shows the
 * log (cuda_compile prints it). No GPU. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdlib.h>

#include "driver/compile.h"
#include "driver/pipeline.h"
#include "runtime/device.h"
#include "tests/check.h"

static const char *const PRECISIONS[] = {"fp32", "tf32", "bf16", "fp16"};
static const int ARCHS[] = {80, 90};

/* The plan of MODE: eager as it is, default through compile_program (checkpoint, fusion). */
static Plan *build_plan(IrProgram *p, PlanMode mode, const char *path)
{
    if (mode == PLAN_EAGER) return plan_build(p, PLAN_EAGER, path, NULL);
    CompileOptions o = {.mode = mode, .net_path = path};
    Compiled c;
    if (compile_program(p, &o, &c) != 0) return NULL;
    Plan *plan = c.plan;
    c.plan = NULL;   /* ours now */
    compiled_free(&c);
    return plan;
}

/* MODE's plan of PATH in PRECISION compiled for every arch: its module, or with GEMMS
 * the generated GEMMs' module. */
static void compile_model(const char *path, const char *name, const char *precision,
                          PlanMode mode, bool gemms, const int *archs, size_t narchs)
{
    Source *src = source_load(path);
    CHECK(src != NULL);
    if (!src) return;
    Override o = {"precision", "precision", precision};
    IrProgram *p = pipeline_compile(src, &o, 1);
    CHECK(p != NULL);
    if (!p) {
        fprintf(stderr, "%s (%s): the front end refused it\n", path, precision);
        source_free(src);
        return;
    }
    const char *mode_name = gemms ? "generated GEMMs" : plan_mode_name(mode);
    Plan *plan = build_plan(p, mode, path);
    CHECK(plan != NULL);
    if (!plan) {
        ir_program_free(p);
        source_free(src);
        return;
    }
    char *module = gemms ? plan_gemm_module_source(plan) : plan_module_source(plan);
    int nkernels = gemms ? plan->nkernels - plan->gemm_kernels_from : plan->gemm_kernels_from;
    CHECK(module != NULL && nkernels > 0);
    for (size_t i = 0; module && i < narchs; i++) {
        CudaCompileOptions opts = {.arch = archs[i], .verbose = false, .emit_dir = NULL};
        CudaCompileResult r;
        int rc = cuda_compile(module, name, &opts, &r);
        CHECK_EQ_INT(rc, 0);
        if (rc != 0) {
            fprintf(stderr, "%s (%s, %s) failed for sm_%d\n", path, precision, mode_name, archs[i]);
            continue;
        }
        CHECK(r.cubin_size > 0 && !r.from_cache);
        printf("%s %s %s sm_%d: %d kernels, %zu-byte cubin in %.2f s\n", path, precision,
               mode_name, archs[i], nkernels, r.cubin_size, r.seconds);
        free(r.cubin);
    }
    free(module);
    plan_free(plan);
    ir_program_free(p);
    source_free(src);
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int is_net(const struct dirent *e)
{
    size_t n = strlen(e->d_name);
    return n > 4 && strcmp(e->d_name + n - 4, ".net") == 0;
}

/* PATH in every precision, planned eager and default, each plan compiled for one of
 * ARCHS, in turn. */
static void compile_every_plan(const char *path, const char *name, const int *archs, size_t narchs)
{
    for (size_t k = 0; k < sizeof PRECISIONS / sizeof PRECISIONS[0]; k++)
        for (int mode = PLAN_EAGER; mode <= PLAN_DEFAULT; mode++)
            compile_model(path, name, PRECISIONS[k], (PlanMode)mode, false,
                          &archs[(k + (size_t)mode) % narchs], 1);
}

/* Usage: test_nvrtc_models [MODEL.net]: with a model of models/ named, only its plans, for
 * sm_90 (the sanitizer build's run: NVRTC's verdict on a module does not depend on how
 * cgc was built, the code around it does). */
int main(int argc, char **argv)
{
    setenv("CGC_NO_CACHE", "1", 1);
    if (argc == 2) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", CGC_MODELS_DIR, argv[1]);
        compile_every_plan(path, argv[1], &ARCHS[1], 1);
        return check_result();
    }
    struct dirent **names;
    int n = scandir(CGC_MODELS_DIR, &names, is_net, by_name);
    CHECK(n > 0);
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", CGC_MODELS_DIR, names[i]->d_name);
        compile_every_plan(path, names[i]->d_name, ARCHS, sizeof ARCHS / sizeof ARCHS[0]);
        free(names[i]);
    }
    if (n > 0) free(names);
    char mlp[1024];
    snprintf(mlp, sizeof mlp, "%s/mlp.net", CGC_MODELS_DIR);
    /* one arch each (the module takes NVRTC about 12 s on a CI core): both types, both archs */
    compile_model(mlp, "mlp.net", "fp16", PLAN_MAX_AUTOTUNE, true, &ARCHS[0], 1);
    compile_model(mlp, "mlp.net", "bf16", PLAN_MAX_AUTOTUNE, true, &ARCHS[1], 1);
    /* the fused backward kernel with each activation gradient it applies */
    char act[1024];
    snprintf(act, sizeof act, "%s/../tests/models/act_mlp.net", CGC_MODELS_DIR);
    compile_model(act, "act_mlp.net", "fp16", PLAN_MAX_AUTOTUNE, true, &ARCHS[0], 1);
    /* the convolutions' GEMMs over the batch's rows and their implicit GEMMs */
    char cnn[1024];
    snprintf(cnn, sizeof cnn, "%s/cnn.net", CGC_MODELS_DIR);
    compile_model(cnn, "cnn.net", "bf16", PLAN_MAX_AUTOTUNE, true, &ARCHS[0], 1);
    return check_result();
}
