/* perf.h: what each launch and GEMM of a plan costs at the least, on a GPU part, before
 * anything runs (a roofline model).
 *
 * A step must move its bytes (each buffer it reads, read once; each it writes, written
 * once) and do its FLOPs (a GEMM's 2mnk; a kernel's ops, each its table cost times the
 * elements it makes; a causal attention kernel's, those of the unmasked scores). At the
 * part's peak memory bandwidth and peak throughput (for the step's kind of arithmetic: f32
 * on CUDA cores, or a GEMM's or an attention kernel's tensor-core type) that takes
 * a time; the larger of the two says whether the step is bound by memory or by compute.
 * A step is bound by latency instead when it cannot take less than a launch takes, or
 * when it runs too few threads to keep the SMs' memory requests in flight (under half of
 * the 1024 an SM needs for that, or for a GEMM fewer tiles than SMs, after a split along
 * K where K is long enough, as cuBLAS splits): its bandwidth and throughput then scale
 * with the threads it has. The parts' figures are the published ones (perf.c names
 * each source).
 */
#ifndef CGC_PERF_H
#define CGC_PERF_H

#include <stdint.h>

#include "plan.h"

typedef struct PerfPart {
    const char *name;           /* "H200 SXM" */
    int arch;                   /* 80, 90 */
    int sms;
    double bandwidth;           /* bytes/s of device memory */
    double f32, tf32, half;     /* FLOP/s, dense: CUDA cores' f32; tensor cores' tf32, f16/bf16 */
    double launch_s;            /* the least a launch takes on the device's timeline */
} PerfPart;

extern const PerfPart perf_parts[];
extern const int perf_nparts;
/* The part a device's model name is ("NVIDIA H200", "NVIDIA A100-SXM4-80GB"), or NULL:
 * another part, or a PCIe one, whose figures differ. */
const PerfPart *perf_part_named(const char *model);
/* The threads a launch must run to fill the part with the most SMs (fill, perf.c). */
int64_t perf_fill_threads(void);
/* Where the parts' figures come from, for the reports that print them. */
extern const char perf_sources[];

typedef enum PerfBound { PERF_MEMORY, PERF_COMPUTE, PERF_LATENCY } PerfBound;

typedef struct PerfStep {
    double read, written;       /* bytes */
    double flops;
    int64_t blocks;             /* a launch's grid; a GEMM's 128 x 128 tiles of C, times its
                                 * splits along K */
    double threads;             /* a launch's: blocks times the kernel's block */
    double seconds;             /* predicted, on the part */
    PerfBound bound;
} PerfStep;

/* Step I of graph GID of PLAN with symbol k at SYMVALS[k], on PART. */
PerfStep perf_step(const Plan *plan, PlanGraphId gid, int i, const int64_t *symvals, const PerfPart *part);
const char *perf_bound_name(PerfBound b);     /* "memory", "compute", "latency" */

#endif
