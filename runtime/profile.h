/* profile.h: --profile FILE, a Chrome trace (Trace Event JSON; opens in Perfetto and
 * chrome://tracing) of a few training steps.
 *
 * The trainer opens the file before the run, so that a path that cannot be written fails
 * before any training; it then records a few steps and writes the trace when the last
 * of them is done. Each recorded step is one complete event ("step 2"), and each op run
 * in it another, named as --emit's host plan names its steps ("matmul %6", "relu h1"),
 * with the op, graph, node, .net line, output shape (symbols bound) and dtype as args.
 * Times are on the monotonic clock (clock.h), in microseconds from the first step.
 *
 * The CPU reference executor reports ops (cpu_exec_set_profile). On a device the events
 * are the plan's launches and GEMMs, the data pipeline's kernels among them, each between
 * two fences (devexec_timing_start/collect, CUDA events on a GPU), named as the host plan
 * names its steps, with the kernel, graph and .net line as args; the steps' and the
 * events' times are then device time, from the first fence recorded.
 */
#ifndef CGC_PROFILE_H
#define CGC_PROFILE_H

#include <stdbool.h>
#include <stdint.h>

#include "../compiler/ir.h"

typedef struct Profile Profile;

#define PROFILE_ROLE "write the trace to"   /* the trace's role as an output (outfile.h) */

/* Opens the output PATH (outfile.h, JSON) for the trace of P's run (NET_PATH names the
 * model file in the trace's otherData). Returns NULL after reporting when it cannot. */
Profile *profile_open(const char *path, const IrProgram *p, const char *net_path);

/* A recorded optimizer step: global step STEP (1-based, as the progress lines count)
 * ran from START to END (clock_seconds()), enclosing the ops reported since the last
 * step. */
void profile_step(Profile *pr, int64_t step, double start, double end);

/* The CPU executor's hook: node ID of G ran from START to END, with the program's
 * symbols bound to SYMVALS (8 of them, as CpuFeed's). */
void profile_op(Profile *pr, const IrGraph *g, int id, const int64_t *symvals,
                double start, double end);

/* The run is on device DEVICE (its name, for otherData): times are device time. */
void profile_set_device(Profile *pr, const char *device);

/* A launch or GEMM timed on the device: the plan step WHAT, its KERNEL ("cuBLAS" for a
 * GEMM), GRAPH (a static string) and .net LINE (0: none), from START to END. */
void profile_kernel(Profile *pr, const char *what, const char *kernel, const char *graph,
                    int line, bool gemm, double start, double end);

/* How many steps and ops were recorded so far. */
int profile_steps(const Profile *pr);
int profile_ops(const Profile *pr);

/* Writes the trace to PATH and frees PR. Returns 0, or -1 after reporting (the file could
 * not be written; whatever PATH held before is kept). */
int profile_close(Profile *pr);

/* Writes nothing (the run failed before training): PATH is left as it was. Frees PR. */
void profile_discard(Profile *pr);

#endif
