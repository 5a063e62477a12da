/* comm.h: the ranks of a training job, and the collectives between them.
 *
 * A job is one process per rank. A launcher starts them and tells each, in its
 * environment, its rank and how many there are: Open MPI's mpirun (OMPI_COMM_WORLD_RANK,
 * OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK), or one that sets RANK, WORLD_SIZE
 * and LOCAL_RANK as torchrun does, under mpirun or a launcher Open MPI connects to
 * (PMIx). comm_world reads that before anything else runs, so that the compiler knows
 * the world it compiles for; comm_open then joins the job through MPI, only when there
 * is more than one rank, so a run of one rank never touches MPI.
 *
 * Collectives are MPI's, on host memory. None may hang: each is started non-blocking and
 * polled, and one that has not completed after the timeout (a rank died, or hangs) ends
 * the whole job (MPI_Abort) with a message that says which collective waited and for
 * how long.
 */
#ifndef CGC_COMM_H
#define CGC_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct CommWorld {
    int rank, size;         /* 0 and 1 outside a job */
    int local_rank;         /* among the ranks on this machine: which GPU to take */
    const char *launcher;   /* "mpirun", "RANK/WORLD_SIZE", or NULL outside a job */
} CommWorld;

/* The world the environment describes. Returns 0, or -1 after reporting variables that
 * contradict each other or are not numbers. */
int comm_world(CommWorld *w);

/* Seconds a collective may wait before the job is ended: CGC_COMM_TIMEOUT (seconds, > 0)
 * when set, else COMM_TIMEOUT_S. */
enum { COMM_TIMEOUT_S = 300 };

typedef struct Comm Comm;

/* Joins the job W describes (MPI_Init when W has more than one rank). NULL after
 * reporting why it cannot: cgc built without MPI, MPI failing to start. */
Comm *comm_open(const CommWorld *w);
/* Leaves the job. FAILED: this rank stops on an error, so the others, which would wait
 * for it forever, are ended too (MPI_Abort); otherwise every rank leaves together. */
void comm_close(Comm *c, bool failed);

int comm_rank(const Comm *c);
int comm_size(const Comm *c);
/* How long a rank waits for the others before it calls it a hang, in seconds. */
double comm_timeout_s(const Comm *c);

typedef enum CommType { COMM_F32, COMM_F64 } CommType;

/* The collectives over a buffer of every rank, N elements per rank:
 *   COMM_SUM             BUF[0 .. N) := the sum over the ranks of their BUF[0 .. N)
 *   COMM_REDUCE_SCATTER  BUF holds SIZE pieces of N; BUF[0 .. N) := the sum over the
 *                        ranks of their piece number RANK (a rank's share of the sum)
 *   COMM_ALLGATHER       BUF holds SIZE pieces of N; piece r := rank r's piece r
 *   COMM_GATHER          the same on rank 0 only; another rank's BUF is its N elements,
 *                        which it sends */
typedef enum CommOp { COMM_SUM, COMM_REDUCE_SCATTER, COMM_ALLGATHER, COMM_GATHER } CommOp;

/* OP over BUF, completed. WHAT names it in a timeout ("the evaluation's totals").
 * Returns 0, or -1 after reporting. */
int comm_run(Comm *c, CommOp op, void *buf, int64_t n, CommType t, const char *what);
/* The sum over the ranks: comm_run's COMM_SUM. */
int comm_allreduce(Comm *c, void *buf, int64_t n, CommType t, const char *what);
/* OP started: it proceeds while the caller computes, through comm_progress, and is
 * complete after comm_wait of the same SLOT (a small number >= 0, one per collective in
 * flight). */
int comm_start(Comm *c, int slot, CommOp op, void *buf, int64_t n, CommType t);
int comm_progress(Comm *c);
int comm_wait(Comm *c, int slot, const char *what);
/* BYTES of BUF := rank ROOT's, on every rank. */
int comm_broadcast(Comm *c, void *buf, size_t bytes, int root, const char *what);
/* As comm_broadcast, where ROOT sends after up to WORK_S seconds of work of its own (the
 * others wait that much longer before they call it a hang). */
int comm_broadcast_after(Comm *c, void *buf, size_t bytes, int root, double work_s, const char *what);
/* Whether every rank has the same VALUE (a hash of what it compiled, say). If not, rank 0
 * reports how many ranks differ from it, which first, WHAT differs ("the compiled
 * program") and HINT (why, or what to do), and every rank returns -1. */
int comm_agree(Comm *c, uint64_t value, const char *what, const char *hint);

/* What the job's collectives have cost this rank so far. */
typedef struct CommStats {
    int64_t calls;          /* collectives run */
    int64_t bytes;          /* their buffers' bytes, once each (what one rank sends in) */
    double wait_s;          /* seconds spent waiting for them to complete */
    double model_s;         /* what comm_predict says they take */
} CommStats;
CommStats comm_stats(const Comm *c);

/* The model --explain predicts with: a ring all-reduce of BYTES over RANKS ranks moves
 * 2 (R - 1) / R of them through each rank at COMM_BANDWIDTH bytes per second, in
 * 2 (R - 1) messages of COMM_LATENCY_S each; a reduce-scatter or an all-gather of BYTES
 * (the whole buffer, every rank's piece) is either half of that ring. The figures are
 * Open MPI's over shared memory on the 2-core development machine, rounded
 * (scripts/bench_ranks.sh: 9.9 GB/s at 1 MB, 0.27 us for 4 bytes; BENCHMARKS.md); across
 * machines both are worse. */
#define COMM_BANDWIDTH 8e9
#define COMM_LATENCY_S 0.2e-6
double comm_predict(CommOp op, int64_t bytes, int ranks);
/* The same ring for ranks on GPUs, whose sums are NCCL's: BYTES at COMM_GPU_BANDWIDTH
 * (nccl-tests' bus bandwidth, the figure its ring formula divides by) and one
 * COMM_GPU_LATENCY_S per collective (NCCL pipelines a ring's steps). The figures are
 * published nccl-tests results for 8 x H100 SXM over NVLink (about 450 GB/s at large
 * sizes, some 10 us for a small all-reduce), not this project's measurement; GPUs on
 * PCIe see about a tenth of the bandwidth. */
#define COMM_GPU_BANDWIDTH 450e9
#define COMM_GPU_LATENCY_S 10e-6
double comm_predict_gpu(CommOp op, int64_t bytes, int ranks);

#endif
