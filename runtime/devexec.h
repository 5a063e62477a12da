/* devexec.h: runs a Plan (codegen/plan.h) on a Device (runtime/device.h).
 *
 * The device-side counterpart of the CPU reference executor (runtime/cpu/exec.h), with
 * the same shape of API so that the training loop and the tests treat both alike:
 *   - one arena laid out by the memory plan (plan_layout): buffers whose lives do not
 *     meet share memory; 256-byte aligned, padding marked unused; sized for the symbols'
 *     maxima;
 *   - persistent tensors initialised on the host exactly as the CPU executor does
 *     (tensor_init_values) and uploaded;
 *   - a graph run: bind the symbols and runtime scalars, then issue the graph's steps in
 *     order (launches and GEMMs), without waiting for the device;
 *   - reading back any node's value or any tensor (waits), converted to f32.
 */
#ifndef CGC_DEVEXEC_H
#define CGC_DEVEXEC_H

#include <stdint.h>

#include "../codegen/plan.h"
#include "device.h"

typedef struct DevExec DevExec;

typedef struct DevFeed {
    int64_t symvals[IR_MAX_SYMBOLS];             /* symvals[0]: the batch of this run */
    /* Per program input: host data to upload before the run (f32 or int32, dense in the
     * input's shape), or NULL when the input buffer already holds it (gathered on the
     * device by the data kernels). */
    const void *inputs[IR_MAX_INPUTS];
    double runtime[IR_NUM_RUNTIME];
    int64_t rank_row;       /* this rank's first row of the micro-batch (ARG_RANK_ROW) */
    int64_t rank;           /* this process's rank in the job (ARG_RANK) */
} DevFeed;

/* Lays out the arena of PLAN for symbols up to SYMMAX on D, and looks up every kernel.
 * A plan larger than the device's free memory (as measured when it was opened) is
 * refused before anything is allocated, with the numbers and the fixes. NET_PATH names
 * the .net file in errors. Returns NULL after reporting. */
DevExec *devexec_new(const Plan *plan, Device *d, const int64_t *symmax, const char *net_path);
/* As devexec_new, but every buffer gets memory of its own, so that every stored node's
 * value can still be read after a run (the per-node comparisons of the tests). */
DevExec *devexec_new_unshared(const Plan *plan, Device *d, const int64_t *symmax,
                              const char *net_path);
void devexec_free(DevExec *e);

size_t devexec_arena_bytes(const DevExec *e);
Device *devexec_device(DevExec *e);

/* Initialises every persistent tensor as cpu_exec_init_tensors does, and uploads. */
int devexec_init_tensors(DevExec *e, uint64_t seed);

/* Issues graph G (one of the program's) once. Does not wait. */
int devexec_run(DevExec *e, const IrGraph *g, const DevFeed *feed);

/* ---- max-autotune (runtime/autotune.h); the choices: PlanStepChoice (plan.h) ---- */

/* Compiles and loads the plan's generated GEMMs (their own module, DeviceOps
 * .load_kernels) and looks their kernels up: before any choice of one. Once; 0 at once
 * when the plan has none. *SECONDS: the compile's wall time. Returns 0, or -1 after
 * reporting. */
int devexec_load_gemm_kernels(DevExec *e, double *seconds);
bool devexec_gemm_kernels_loaded(const DevExec *e);
/* Fused MLP run R of the plan (Plan.mlps): SHAPE >= 0 runs its fused kernel of that
 * shape, -1 its layers' GEMM steps with the choices in force (issued alone, for timing;
 * the symbols bound; a backward run's other steps between them run either way, so they
 * are not part of it). devexec_choose_mlp puts SHAPE in force for devexec_run (-1: the steps, the
 * default); the generated kernels must be loaded first. devexec_mlp_kernel: the fused
 * kernel in force, or NULL. */
int devexec_mlp(DevExec *e, int r, int shape);
void devexec_choose_mlp(DevExec *e, int r, int shape);
const char *devexec_mlp_kernel(const DevExec *e, int r);
/* Implicit-GEMM run R of the plan (Plan.windows): TILE >= 0 runs reader J's kernel of
 * that tile shape (the GEMM gathering from the image; the storing reader's computes the
 * epilogue too, its runtime values from FEED), -1 reader J's GEMM step with the choice in
 * force (issued alone, for timing). devexec_choose_window puts TILES (one per reader,
 * each >= 0; NULL: the run off, the default) in force for devexec_run: the UNFOLD step
 * skipped (and the TRANSPOSEs and epilogue it computes), every reader by its kernel.
 * devexec_window_tile and devexec_window_kernel: reader J's tile shape and kernel in
 * force, or -1 and NULL. */
int devexec_window(DevExec *e, int r, int j, int tile, const DevFeed *feed);
void devexec_choose_window(DevExec *e, int r, const int *tiles);
int devexec_window_tile(const DevExec *e, int r, int j);
const char *devexec_window_kernel(const DevExec *e, int r, int j);
/* The same runs computed by the device's convolution library (DeviceOps.conv; PlanWindow
 * .conv): devexec_window_conv issues reader J as the library's call with algorithm ALGO
 * (alone, for timing); devexec_conv_algos counts the algorithms it offers for it (and
 * makes the device ready to run any of them); devexec_choose_window_conv puts ALGOS (one
 * per reader; NULL: off) in force: the UNFOLD, both TRANSPOSEs and the FOLD skipped, each
 * reader one call. A device with a library starts with every such run on, algorithm 0
 * (the library's own choice); choosing tiles turns it off, and the other way round.
 * devexec_window_conv_algo: reader J's algorithm in force, -1 when off. */
int devexec_window_conv(DevExec *e, int r, int j, int algo);
int devexec_conv_algos(DevExec *e, int r, int j, int *count);
void devexec_choose_window_conv(DevExec *e, int r, const int *algos);
int devexec_window_conv_algo(const DevExec *e, int r, int j);
bool devexec_has_conv(const DevExec *e);
/* "cudnnConvolutionForward" and the like: what C calls, for sites and reports. */
const char *devexec_conv_name(const ConvCall *c);
/* Whether buffer B of graph GID is left unwritten by the implicit-GEMM runs in force
 * (the patches, a channels-last product or gradient, an NCHW product whose epilogue the
 * product's kernel computes), so that it holds nothing of a run. */
bool devexec_unwritten(const DevExec *e, PlanGraphId gid, int b);
/* The launches a run of graph GID issues with the choices in force (each fused MLP run
 * one, its later layers none, an implicit-GEMM run's UNFOLD none), and in *GEMMS (when
 * not NULL) how many of them are GEMMs: cuBLAS calls, generated GEMM kernels (implicit
 * ones too) and fused MLP kernels. */
int devexec_launches(const DevExec *e, PlanGraphId gid, int *gemms);
/* Binds FEED's symbols (as devexec_run does first), for devexec_step. */
int devexec_bind(DevExec *e, const DevFeed *feed);
/* Issues step I of graph GID alone, with choice C (NULL: the choice in force). */
int devexec_step(DevExec *e, PlanGraphId gid, int i, const DevFeed *feed, const PlanStepChoice *c);
/* The choice in force for step I of graph GID. */
PlanStepChoice devexec_choice_of(const DevExec *e, PlanGraphId gid, int i);
/* Puts choice C in force for step I of graph GID (for a launch: for its kernel). */
void devexec_choose(DevExec *e, PlanGraphId gid, int i, const PlanStepChoice *c);
/* The grid launch L gets with the bound symbols, with ITEMS per block (0: the choice in
 * force, else the plan's). */
unsigned devexec_grid(const DevExec *e, const PlanLaunch *l, int64_t items);
/* The generated kernel that GEMM step I of GID runs by the choice in force, or NULL (the
 * library). */
const char *devexec_gemm_kernel(const DevExec *e, PlanGraphId gid, int i);
/* GEMM step S's call with the bound symbols (algo 0), and the site its errors name. */
GemmCall devexec_gemm_call(const DevExec *e, const PlanStep *s);
DeviceSite devexec_gemm_site(const DevExec *e, const PlanStep *s, const GemmCall *c);

/* The device address of buffer B (for the data kernels and tests). */
DevPtr devexec_buffer(const DevExec *e, int b);

/* Launches kernel K of the plan with grid GRID and ARGS (kernelParams form); the data
 * pipeline's way to run its kernels. */
int devexec_launch(DevExec *e, int k, unsigned grid, void **args, const char *what);

/* Timing (--profile): between devexec_timing_start and devexec_timing_collect, every
 * launch and GEMM (devexec_run's and devexec_launch's) is issued between two fences.
 * Collecting waits for the last, then calls FN once per event in issue order, with its
 * start and end in seconds of device time since the first devexec_timing_start. */
typedef struct DevTimedEvent {
    const char *what;               /* the plan step's (or data kernel's) description */
    const char *kernel;             /* its kernel's name, or "cuBLAS" for a GEMM */
    const char *graph;              /* the IR graph's name, or "data pipeline" */
    int line;                       /* its .net line, or 0 */
    bool gemm;                      /* a GEMM: cuBLAS, a generated GEMM or a fused MLP kernel */
    int gid, step;                  /* the plan step: its PlanGraphId and index; -1 for a data
                                     * kernel */
} DevTimedEvent;
typedef void (*DevTimedFn)(void *ctx, const DevTimedEvent *ev, double start, double end);
int devexec_timing_start(DevExec *e);
int devexec_timing_collect(DevExec *e, DevTimedFn fn, void *ctx);

/* After a run of G (waits): node ID's value as f32 (i32 values converted), numel in
 * *NUMEL. OUT has room for the node's elements at the symbols' maxima. Only stored nodes
 * have values (PlanGraph.node_buffer >= 0), and with memory reused only the graph's
 * outputs and views of tensors, inputs and constants keep theirs after the run: asking
 * for any other node is an internal error (use devexec_new_unshared). */
int devexec_value(DevExec *e, const IrGraph *g, int id, float *out, int64_t *numel);
/* Persistent tensor I to/from host f32 (waits); a copy's values are converted from and to
 * its 16-bit type (rounded on the way in). */
int devexec_tensor_get(DevExec *e, int i, float *out);
int devexec_tensor_set(DevExec *e, int i, const float *in);

#endif
