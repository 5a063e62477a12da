/* repro_host.c: the reproducer's fixed host code (codegen/repro/types.h, replay.h and
 * main.h, and codegen/gemm_map.h) compiled as codegen/repro.c arranges it in every
 * DIR/repro/repro.c, with a small stand-in for each part that cgc generates, so that an
 * error in the fixed code fails cgc's build rather than a user's nvcc.
 * tests/codegen.cmake compiles it with the CUDA Toolkit's headers, once for each value
 * of CAPTURE, and links it nowhere. The stand-ins follow what repro.c's write_*
 * functions write, each under the name of its function. */
#include "codegen/repro/types.h"

/* write_constants */
#define SOURCE_NAME "stand_in.net"
enum {
    BATCH = 4,
    ACCUMULATE = 1,
    TOTAL_STEPS = 1000,
    WARMUP_STEPS = 20,
    DEFAULT_STEPS = 200,
    MAX_PARAMS = 8,
    LT_ALGOS = 8,
};
static const uint64_t SEED = 1ULL;

/* write_kernels */
enum { NUM_MODULES = 1 };
static const char *const module_file[NUM_MODULES] = { "module.cubin" };
enum { K_scale, NUM_KERNELS };
static const char *const kernel_name[NUM_KERNELS] = { "scale" };
static const unsigned kernel_block[NUM_KERNELS] = { 256 };
static const unsigned char kernel_module[NUM_KERNELS] = { 0 };
static const unsigned char kernel_packed[NUM_KERNELS] = { 0 };
static CUfunction kernel[NUM_KERNELS];

/* write_arena */
enum { NUM_BUFFERS = 4 };
static const size_t ARENA_BYTES = 1024;
static const size_t offset_of[NUM_BUFFERS] = { 0, 256, 512, 768 };
static CUdeviceptr arena;

/* write_fills */
static const Fill fills[] = {
    { 0, 16, T_F32, FILL_UNIFORM, 0.5f },
    { 3, 4, T_I32, FILL_LABELS, 10.0f },
};
enum { NUM_FILLS = 2 };

/* write_gemms */
static Gemm gemms[] = {
    { .graph = "train", .step = 2, .line = 7, .trans_a = 0, .trans_b = 1, .m = 4, .n = 4, .k = 4, .batch = 1,
      .a = 0, .b = 1, .c = 2, .a_type = CUDA_R_32F, .b_type = CUDA_R_32F, .c_type = CUDA_R_32F,
      .compute = CUBLAS_COMPUTE_32F,
      .lt = 1, .epilogue = CUBLASLT_EPILOGUE_RELU_BIAS, .bias = 3, .bias_type = CUDA_R_32F, .aux = -1 },
};
enum { NUM_GEMMS = 1 };

#include "codegen/gemm_map.h"
#include "codegen/repro/replay.h"

/* write_steps */
static void run_train(int64_t micro_step)
{
    {
        Arg a[] = { PTR(0), I64(BATCH), F32((float)micro_step), U64(SEED), NO_PTR };
        launch("train", 1, 6, K_scale, 1, a, 5);
    }
    run_gemm(&gemms[0]);
}

static void run_training_step(long step)
{
    for (int k = 0; k < ACCUMULATE; k++) run_train((int64_t)step * ACCUMULATE + k);
}

/* write_main */
#define MODEL_NAME "stand_in"
#define MODE "default"
#define PRECISION "fp32"
enum { LAUNCHES_PER_STEP = 1, GEMMS_PER_STEP = 1, LT_GEMMS_PER_STEP = 1 };

#include "codegen/repro/main.h"
