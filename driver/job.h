/* job.h: training on several ranks, from the command line's side.
 *
 * `cgc model.net --nproc N` is the one-machine shortcut: cgc starts itself N times under
 * Open MPI's mpirun, which then tells each process its rank (runtime/comm.h). A job
 * started any other way (mpirun -n N cgc ..., across machines with a hostfile) needs
 * nothing from here but the check that every rank compiled the same program.
 */
#ifndef CGC_JOB_H
#define CGC_JOB_H

#include <stdint.h>

#include "../compiler/ir.h"

/* Replaces this process with `mpirun -n NPROC` running this cgc with ARGV's arguments,
 * less --nproc. Returns only on failure (the exit status, after reporting). */
int job_launch(int argc, char **argv, int nproc);

/* A hash of what a rank trains: the training and evaluation graphs of P and its train
 * settings, which every rank of a job must share (FNV-1a, 64 bits). */
uint64_t job_program_hash(const IrProgram *p);

#endif
