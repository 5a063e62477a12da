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

/* NPROC ranks against this machine's cores: refused past MAX_RANKS_PER_CORE a core (job.c),
 * a warning past one. 0, or -1 after an error. */
int job_check_cores(int nproc);

/* Runs `mpirun -n NPROC` with this cgc and ARGV's arguments, less --nproc, and returns its
 * exit status. mpirun runs in a session
 * of its own: SIGINT, SIGTERM or SIGHUP to this process is passed on to it, and what of
 * the job is left a few seconds later (or at a second signal) is killed; the status is
 * then 128 + the signal. */
int job_launch(int argc, char **argv, int nproc);

/* A hash of what a rank trains: the training and evaluation graphs of P and its train
 * settings, which every rank of a job must share (FNV-1a, 64 bits). */
uint64_t job_program_hash(const IrProgram *p);

#endif
