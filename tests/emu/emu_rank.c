/* emu_rank: one rank of a job that trains on the CUDA emulation, for tests/e2e/ranks_device.sh.
 *
 *     mpirun -n R emu_rank MODEL.net MODE SAVE [tune=FILE] [KEY=VALUE ...]
 *
 * compiles MODEL for the R ranks its launcher started (in MODE, with the train keys
 * overridden as given), builds the plan's kernels for the emulation, and trains on the
 * emulated device as cgc's runtime does on a GPU: the collectives over the ranks are the
 * device's (DeviceOps.coll_start, MPI underneath), between the plan's steps.
 * Rank 0 saves to SAVE, which the script compares with what `cgc --device cpu` saves.
 *
 * tune=FILE (max-autotune): FILE is the choices file, and each device offers three GEMM
 * algorithms on a modeled clock on which rank 0's fastest is algorithm 1 and every other
 * rank's algorithm 3; each rank prints how many GEMMs it ran with each algorithm. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "driver/compile.h"
#include "driver/pipeline.h"
#include "runtime/comm.h"
#include "runtime/train.h"
#include "tests/emu/emu_device.h"

enum { MAX_OVERRIDES = 16 };

#ifndef EMU_RANK_ASAN   /* emu_rank_asan: the kernels built with AddressSanitizer too */
#define EMU_RANK_ASAN 0
#endif

/* Gives D three GEMM algorithms on a modeled clock, on which a rank other than 0 would
 * choose otherwise than rank 0 (launches slower than any GEMM). */
static void model_tuning(Device *d, int rank)
{
    double algo_ms[DEVICE_GEMM_ALGOS + 1] = {3.0, rank == 0 ? 1.0 : 2.0, 1.5, rank == 0 ? 2.0 : 1.0};
    emu_device_gemm_algos(d, 3, 0);
    emu_device_model_time(d, algo_ms, 5.0);
}

/* Trains P compiled in MODE on an emulated device as rank C of the job; TUNE, the choices
 * file of a modeled tuning, or NULL. */
static int train_emulated(Source *src, IrProgram *p, PlanMode mode, const char *net, const char *save,
                          const char *tune, Comm *c, int rank)
{
    bool lead = rank == 0;
    Compiled compiled;
    if (compile_program(p, &(CompileOptions){.mode = mode, .net_path = net}, &compiled) != 0) return 1;
    char so[256] = "";
    Device *d = NULL;
    int rc = 1;
    if (emu_build_plan(compiled.plan, EMU_RANK_ASAN, so, sizeof so) == 0 && emu_device_open(so, &d) == 0) {
        RunOptions o = {.net_path = net, .src = src, .save_path = save, .device = d,
                        .plan = compiled.plan, .comm = c, .verbose = lead, .quiet = !lead,
                        .tune_file = tune, .tune_budget_s = 1e9};
        if (tune) model_tuning(d, rank);
        rc = train_run(p, &o);
        if (tune)
            printf("emu_rank: rank %d: GEMMs of algorithms 1, 2, 3: %d, %d, %d\n", rank,
                   emu_device_gemm_calls(d, 1), emu_device_gemm_calls(d, 2), emu_device_gemm_calls(d, 3));
    }
    if (d) d->ops->close(d);
    if (so[0]) emu_remove_build(so);
    compiled_free(&compiled);
    return rc;
}

int main(int argc, char **argv)
{
    PlanMode mode;
    if (argc < 4 || argc - 4 > MAX_OVERRIDES || !plan_mode_from_name(argv[2], &mode)) {
        fprintf(stderr, "usage: emu_rank MODEL.net MODE SAVE [KEY=VALUE ...] (at most %d)\n", MAX_OVERRIDES);
        return 2;
    }
    Override ov[MAX_OVERRIDES];
    int nov = 0;
    const char *tune = NULL;
    for (int i = 4; i < argc; i++) {
        if (!strncmp(argv[i], "tune=", 5)) {
            tune = argv[i] + 5;
            continue;
        }
        char *eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "emu_rank: '%s' is not KEY=VALUE\n", argv[i]);
            return 2;
        }
        *eq = '\0';
        ov[nov++] = (Override){argv[i], argv[i], eq + 1};
    }
    CommWorld w;
    if (comm_world(&w) != 0) return 1;
    if (w.size > 1) diag_set_rank(w.rank);
    Comm *c = comm_open(&w);   /* a job, even of one rank */
    if (!c) return 1;
    Source *src = source_load(argv[1]);
    IrProgram *p = src ? pipeline_compile_until(src, ov, nov, PASS_TRAINING, w.size) : NULL;
    int rc = p ? train_emulated(src, p, mode, argv[1], argv[3], tune, c, w.rank) : 1;
    if (p) ir_program_free(p);
    if (src) source_free(src);
    if (c) comm_close(c, rc != 0);
    return rc;
}
