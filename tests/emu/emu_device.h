/* emu_device.h: the CUDA emulation as a Device (runtime/device.h), for tests.
 *
 * The kernels of a plan are compiled by the host C++ compiler against cuda_emu.h into a
 * shared object; this device loads it and runs launches through the emulated scheduler.
 * Memory is host memory (a DevPtr is the address), copies are memcpy, GEMMs are the
 * reference GEMM (OpenBLAS, with the CPU executor's rounding), and every call has
 * finished when it returns.
 */
#ifndef CGC_TESTS_EMU_DEVICE_H
#define CGC_TESTS_EMU_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "codegen/plan.h"
#include "runtime/device.h"

/* Loads the kernels shared object SO_PATH (thunks named cgc_emu_thunk_NAME, and the
 * emulator's cgc_emu_launch). Returns 0, or -1 after reporting. */
int emu_device_open(const char *so_path, Device **out);

/* Makes every later capture of D (an emulated device) fail at capture_end, as a CUDA
 * capture that met an illegal call would: what a runtime's fallback is tested with. */
void emu_device_fail_captures(Device *d, bool fail);

/* Makes D offer COUNT GEMM algorithms for every plain GEMM (DeviceOps.gemm_algos; 0, the
 * default, offers none). Each runs the reference GEMM: they test the choosing. Algorithm
 * REFUSED (1 to COUNT; 0: none) fails every call, as a library may refuse one. */
void emu_device_gemm_algos(Device *d, int count, int refused);
/* Makes D's fences read a modeled clock instead of the wall clock: each GEMM with
 * GemmCall.algo == a advances it by ALGO_MS[a] (DEVICE_GEMM_ALGOS + 1 entries; 0 is the
 * library's default), each kernel launch by LAUNCH_MS; so timings, and what autotuning
 * makes of them, are known in advance (and the tuner times one issue of a candidate:
 * Device.clock_modeled). ALGO_MS NULL: the wall clock again. */
void emu_device_model_time(Device *d, const double *algo_ms, double launch_ms);
/* On a modeled clock, a launch of BLOCK threads a block costs half the others (0: none). */
void emu_device_favour_block(Device *d, unsigned block);
/* Makes every later launch on D of a kernel whose name starts with PREFIX fail before it
 * runs, leaving the device usable, as a driver refuses a launch it cannot make (too many
 * registers or too much shared memory for the GPU). Up to 4 prefixes. */
void emu_device_refuse_kernels(Device *d, const char *prefix);
/* Makes D a device with a convolution library (DeviceOps.conv; none by default, as a GPU
 * without cuDNN) offering COUNT algorithms (0: none again), each the reference
 * convolution in double; with ALGO_MS (COUNT + 1 entries, 0 the library's own choice),
 * each call of algorithm a adds ALGO_MS[a] to the modeled clock (emu_device_model_time). */
void emu_device_convs(Device *d, int count, const double *algo_ms);
/* Makes D's GEMMs in GEMM_TF32 multiply their operands unrounded, in f32 (ON), as a
 * library may for a shape where it picks no tensor-core kernel (FAST_TF32 allows tensor
 * cores, it does not demand them), or round them to tf32 as the CPU executor does (the
 * default). */
void emu_device_tf32_in_f32(Device *d, bool on);
/* Makes D hold at most BYTES (0: no limit, the default) of allocations, an alloc past
 * them failing as cuMemAlloc does, with mem_free and Device.free_bytes telling how many
 * are left, as a GPU's driver does. */
void emu_device_memory(Device *d, size_t bytes);
/* Makes D count, for each launch from now on, the pages (4096 bytes) of its memory the
 * kernel reads and those it writes: the bytes a launch moves, as the performance model
 * (codegen/perf.h) predicts them, at a page's granularity. Before D's first alloc: its
 * allocations are then whole pages of their own. GEMMs (the host's reference) are not
 * launches and are not counted. */
void emu_device_count_bytes(Device *d, bool on);
typedef struct EmuLaunchBytes {
    const char *kernel;
    uint64_t read, written;     /* bytes of the pages touched */
} EmuLaunchBytes;
/* The launches counted since the last call, in order; *N how many. D's array, valid
 * until D's next launch. */
const EmuLaunchBytes *emu_device_counted(Device *d, int *n);
/* Makes D's convolution library offer no algorithm for any call (conv_algos counts 0,
 * conv refuses), as cuDNN may for a shape: a runner must run the steps instead. */
void emu_device_conv_none(Device *d, bool none);
/* Convolutions of KIND that D has run (recorded graphs' count when replayed). */
int emu_device_conv_calls(Device *d, ConvKind kind);
/* GEMMs D has run with GemmCall.algo == ALGO (recorded graphs' GEMMs count when replayed). */
int emu_device_gemm_calls(Device *d, int algo);

/* Conversions of the emulation's reference GEMM: N values of type T (f32, f16, bf16) to
 * f32 (tf32-rounded when TF32), and f32 to T, rounded to nearest even. */
void emu_widen(float *dst, const void *src, int64_t n, DType t, bool tf32);
void emu_narrow(void *dst, const float *src, int64_t n, DType t);

/* How many times a runtime asked D to load a second module (DeviceOps.load_kernels:
 * max-autotune's generated GEMMs), which the emulation's shared object already holds. */
int emu_device_kernel_loads(Device *d);

/* Writes PLAN's kernels (plan_emit) and their thunks (plan_emit_emu_thunks) to a new
 * temporary directory and compiles them with the emulator into DIR/kernels.so, with
 * -fsanitize=address when ASAN. SO_PATH (room for 256 bytes) receives the path. Returns
 * 0, or -1 after reporting (the directory is kept for inspection). */
int emu_build_plan(const Plan *plan, bool asan, char *so_path, size_t so_path_len);

/* Compiles the C++/CUDA sources SRCS (.cu files are compiled as C++) with the emulator
 * into the shared object OUT; INCLUDE_DIR (may be NULL) is added with -I. */
int emu_compile_so(const char *const *srcs, int nsrcs, const char *include_dir, bool asan,
                   const char *out);

/* Removes the directory holding SO_PATH (made by emu_build_plan) and everything in it. */
void emu_remove_build(const char *so_path);

#endif
