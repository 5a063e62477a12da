/* test_nvrtc_models.c: every model of models/ in every precision, planned in the eager
 * mode, compiled whole by NVRTC for sm_80 and sm_90 (the cache off, so NVRTC really runs).
 * Any NVRTC error fails the test and shows the log (cuda_compile prints it). No GPU. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdlib.h>

#include "codegen/plan.h"
#include "compiler/pipeline.h"
#include "runtime/device.h"
#include "tests/check.h"

static const char *const PRECISIONS[] = {"fp32", "tf32", "bf16", "fp16"};
static const int ARCHS[] = {80, 90};

static void compile_model(const char *path, const char *name, const char *precision)
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
    Plan *plan = plan_build(p, PLAN_EAGER, path);
    char *module = plan_module_source(plan);
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++) {
        CudaCompileOptions opts = {.arch = ARCHS[i], .verbose = false, .emit_dir = NULL};
        CudaCompileResult r;
        int rc = cuda_compile(module, name, &opts, &r);
        CHECK_EQ_INT(rc, 0);
        if (rc != 0) {
            fprintf(stderr, "%s (%s) failed for sm_%d\n", path, precision, ARCHS[i]);
            continue;
        }
        CHECK(r.cubin_size > 0 && !r.from_cache);
        printf("%s %s sm_%d: %d kernels, %zu-byte cubin in %.2f s\n", path, precision,
               ARCHS[i], plan->nkernels, r.cubin_size, r.seconds);
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

int main(void)
{
    setenv("CGC_NO_CACHE", "1", 1);
    struct dirent **names;
    int n = scandir(CGC_MODELS_DIR, &names, is_net, by_name);
    CHECK(n > 0);
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", CGC_MODELS_DIR, names[i]->d_name);
        for (size_t k = 0; k < sizeof PRECISIONS / sizeof PRECISIONS[0]; k++)
            compile_model(path, names[i]->d_name, PRECISIONS[k]);
        free(names[i]);
    }
    if (n > 0) free(names);
    return check_result();
}
