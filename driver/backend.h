/* backend.h: from the command line's --device, --mode and --arch to something that runs:
 * the CPU reference executor, or a CUDA device with the plan's module compiled (NVRTC,
 * through the kernel cache) and loaded. */
#ifndef CGC_BACKEND_H
#define CGC_BACKEND_H

#include <stdbool.h>

#include "../codegen/plan.h"
#include "../runtime/device.h"

typedef struct Backend {
    Device *device;         /* NULL: the CPU reference executor */
    const Plan *plan;       /* the plan the device's module was built from (not owned) */
    int ordinal;
} Backend;

typedef struct BackendOptions {
    const char *device;     /* "auto", "cpu", "cuda", "cuda:N" */
    const Plan *plan;       /* what a device runs (compile_program's); not owned */
    const char *net_path;
    const char *emit_dir;   /* where --emit wrote the kernels (for compile errors), or NULL */
    bool verbose, quiet;
} BackendOptions;

/* Whether DEVICE is a --device value: auto, cpu, cuda or cuda:N (N below
 * CUDA_MAX_DEVICES); whether such a device exists is backend_open's question. */
bool backend_device_name_ok(const char *device);

/* Opens what O->device asks for. `auto` takes the first usable GPU and says so on one
 * line, or says why there is none and takes the CPU. Returns 0, or -1 after reporting. */
int backend_open(const BackendOptions *o, Backend *out);
void backend_close(Backend *be);

/* --check: compiles O->plan's module with NVRTC for ARCH (sm_XX as 90; 0: the first
 * device's, or sm_90 without one) and reports what was compiled. Returns 0 or -1. */
int backend_check_compile(const BackendOptions *o, int arch);

/* The memory free on the GPU that DEVICE (as --device) would take (cuda_free_memory: it
 * costs a context creation, so only checkpoint = auto without `memory` asks), or its total
 * when the driver cannot say; 0 for none or the CPU. */
size_t backend_device_memory(const char *device);

/* The architecture --check compiles for by default: the first GPU's, else sm_90. */
int backend_default_arch(void);

/* "sm_90" -> 90; "none" -> -1 (no NVRTC compile); 0 when malformed. */
int backend_parse_arch(const char *s);

#endif
