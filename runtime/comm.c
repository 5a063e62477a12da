/* comm.c: the job's ranks and MPI's collectives (see comm.h). */
#include "comm.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include "../base/diag.h"
#include "../base/clock.h"

#ifdef CGC_HAVE_MPI
#include <mpi.h>
#endif

/* ---- the world, from the environment ---- */

/* Variable NAME as a number in [lo, hi] into *OUT: 0; 1 when unset; -1 after reporting. */
static int env_int(const char *name, int lo, int hi, int *out)
{
    const char *s = getenv(name);
    if (!s) return 1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cgc_error("the environment variable %s is '%s', not a number from %d to %d", name,
                  diag_quote(s, 40), lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* One launcher's three variables: 0 with all of *W set; 1 when SIZE is unset; -1 after
 * reporting. */
static int launcher_vars(const char *size, const char *rank, const char *local, CommWorld *w)
{
    int rs = env_int(size, 1, INT_MAX, &w->size);
    if (rs != 0) return rs;
    if (env_int(rank, 0, w->size - 1, &w->rank) != 0) {
        if (!getenv(rank)) cgc_error("%s is set but %s is not", size, rank);
        return -1;
    }
    w->local_rank = w->rank;   /* one machine unless the launcher says otherwise */
    return env_int(local, 0, w->size - 1, &w->local_rank) < 0 ? -1 : 0;
}

int comm_world(CommWorld *w)
{
    *w = (CommWorld){0, 1, 0, NULL};
    CommWorld mpi = *w, torch = *w;
    int rm = launcher_vars("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                           "OMPI_COMM_WORLD_LOCAL_RANK", &mpi);
    int rt = launcher_vars("WORLD_SIZE", "RANK", "LOCAL_RANK", &torch);
    if (rm < 0 || rt < 0) return -1;
    if (rm == 0 && rt == 0 && (mpi.size != torch.size || mpi.rank != torch.rank)) {
        cgc_error("mpirun says rank %d of %d, but RANK and WORLD_SIZE say %d of %d; unset "
                  "RANK and WORLD_SIZE under mpirun", mpi.rank, mpi.size, torch.rank, torch.size);
        return -1;
    }
    if (rm == 0) {
        *w = mpi;
        w->launcher = "mpirun";
        return 0;
    }
    if (rt != 0 || torch.size == 1) return 0;
    /* Without mpirun, MPI joins the others only through a PMIx server (srun --mpi=pmix,
     * prun); a process started alone would make a world of one and wait forever. */
    if (!getenv("PMIX_RANK")) {
        cgc_error("WORLD_SIZE is %d, but this process was not started by a launcher that MPI "
                  "can join (mpirun, or a PMIx one such as Slurm's srun with PMIx); start the "
                  "job with `mpirun -n %d cgc ...`", torch.size, torch.size);
        return -1;
    }
    *w = torch;
    w->launcher = "RANK/WORLD_SIZE";
    return 0;
}

/* ---- collectives ---- */

struct Comm {
    CommWorld world;
    CommStats stats;
    double timeout_s;
    bool mpi;               /* MPI_Init was called */
#ifdef CGC_HAVE_MPI
    MPI_Request *slot;      /* per slot (comm_start): its collective in flight, or null */
    int nslots;
#endif
};

int comm_rank(const Comm *c) { return c->world.rank; }
CommStats comm_stats(const Comm *c) { return c->stats; }

/* The ring's steps for OP over RANKS ranks: each moves 1 / RANKS of the bytes. */
static double ring_steps(CommOp op, int ranks) { return (op == COMM_SUM ? 2.0 : 1.0) * (ranks - 1); }

double comm_predict(CommOp op, int64_t bytes, int ranks)
{
    if (ranks <= 1) return 0;
    double steps = ring_steps(op, ranks);
    return steps / ranks * (double)bytes / COMM_BANDWIDTH + steps * COMM_LATENCY_S;
}

double comm_predict_gpu(CommOp op, int64_t bytes, int ranks)
{
    if (ranks <= 1) return 0;
    return ring_steps(op, ranks) / ranks * (double)bytes / COMM_GPU_BANDWIDTH + COMM_GPU_LATENCY_S;
}

int comm_size(const Comm *c) { return c->world.size; }
double comm_timeout_s(const Comm *c) { return c->timeout_s; }

int comm_allreduce(Comm *c, void *buf, int64_t n, CommType t, const char *what)
{
    return comm_run(c, COMM_SUM, buf, n, t, what);
}

static double timeout_seconds(void)
{
    const char *s = getenv("CGC_COMM_TIMEOUT");
    char *end;
    double v = s ? strtod(s, &end) : 0;
    if (s && (end == s || *end || !(v > 0))) {
        cgc_warning("CGC_COMM_TIMEOUT is '%s', not a number of seconds above 0; using %d",
                    diag_quote(s, 40), COMM_TIMEOUT_S);
        v = 0;
    }
    return v > 0 ? v : COMM_TIMEOUT_S;
}

#ifdef CGC_HAVE_MPI

/* MPI's words for error CODE. */
static const char *mpi_text(int code, char *buf)
{
    int len = 0;
    if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) snprintf(buf, 64, "MPI error %d", code);
    return buf;
}

static int mpi_failed(const Comm *c, int code, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    cgc_error("%s failed: %s", what, mpi_text(code, text));
    return -1;
}

Comm *comm_open(const CommWorld *w)
{
    Comm *c = xcalloc(1, sizeof *c);
    c->world = *w;
    c->timeout_s = timeout_seconds();
    if (w->size == 1) return c;
    int rc = MPI_Init(NULL, NULL);
    if (rc != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING];
        cgc_error("MPI did not start: %s", mpi_text(rc, text));
        free(c);
        return NULL;
    }
    c->mpi = true;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank != w->rank || size != w->size) {
        cgc_error("MPI says rank %d of %d, the launcher rank %d of %d", rank, size, w->rank,
                  w->size);
        comm_close(c, true);
        return NULL;
    }
    return c;
}

void comm_close(Comm *c, bool failed)
{
    if (!c) return;
    if (c->mpi && failed) {
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (c->mpi) MPI_Finalize();
    free(c->slot);
    free(c);
}

static MPI_Datatype mpi_type(CommType t) { return t == COMM_F64 ? MPI_DOUBLE : MPI_FLOAT; }

/* Starts OP over BUF (N elements per rank, comm.h) into *REQ, counted in the stats. */
static int istart(Comm *c, CommOp op, void *buf, int64_t n, CommType t, MPI_Request *req)
{
    int64_t whole = op == COMM_SUM ? n : n * c->world.size;
    CGC_ASSERT(n >= 0 && whole <= INT_MAX);
    int64_t bytes = whole * (t == COMM_F64 ? 8 : 4);
    c->stats.calls++;
    c->stats.bytes += bytes;
    c->stats.model_s += comm_predict(op, bytes, c->world.size);
    MPI_Datatype type = mpi_type(t);
    switch (op) {
    case COMM_SUM:
        return MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, type, MPI_SUM, MPI_COMM_WORLD, req);
    case COMM_REDUCE_SCATTER:   /* in place: the pieces are read from BUF, the share lands first */
        return MPI_Ireduce_scatter_block(MPI_IN_PLACE, buf, (int)n, type, MPI_SUM, MPI_COMM_WORLD, req);
    case COMM_ALLGATHER:        /* in place: this rank's piece is already at its place */
        return MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)n, type, MPI_COMM_WORLD, req);
    case COMM_GATHER:           /* in place on rank 0, whose piece is already at its place */
        if (c->world.rank == 0)
            return MPI_Igather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)n, type, 0, MPI_COMM_WORLD, req);
        return MPI_Igather(buf, (int)n, type, NULL, 0, type, 0, MPI_COMM_WORLD, req);
    }
    CGC_INTERNAL("unknown collective %d", (int)op);
}

int comm_start(Comm *c, int slot, CommOp op, void *buf, int64_t n, CommType t)
{
    CGC_ASSERT(slot >= 0);
    if (!c->mpi) return 0;   /* one rank: the sum, its share and the gathering are the value */
    if (slot >= c->nslots) {
        int grown = slot + 8;
        c->slot = xrealloc(c->slot, (size_t)grown * sizeof *c->slot);
        while (c->nslots < grown) c->slot[c->nslots++] = MPI_REQUEST_NULL;
    }
    CGC_ASSERT(c->slot[slot] == MPI_REQUEST_NULL);
    int rc = istart(c, op, buf, n, t, &c->slot[slot]);
    return rc == MPI_SUCCESS ? 0 : mpi_failed(c, rc, "starting a collective");
}

int comm_progress(Comm *c)
{
    if (!c->mpi) return 0;
    for (int i = 0; i < c->nslots; i++) {
        if (c->slot[i] == MPI_REQUEST_NULL) continue;
        int done, rc = MPI_Test(&c->slot[i], &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_failed(c, rc, "a collective");
        return 0;   /* one test moves every request in flight */
    }
    return 0;
}

/* Polls REQ until it completes, and ends the job at the timeout. Each test moves the
 * collective a step (MPI progresses inside its calls), so the first milliseconds poll
 * back to back, yielding the core only to a rank that shares it; after that a wait is
 * long (a rank is slower, or gone) and polls sleep between tests. */
static int finish_after(Comm *c, MPI_Request *req, double work_s, const char *what)
{
    double start = clock_seconds(), waited = 0, timeout = c->timeout_s + work_s;
    for (;;) {
        int done, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        waited = clock_seconds() - start;
        if (rc != MPI_SUCCESS) return mpi_failed(c, rc, what);
        if (done) {
            c->stats.wait_s += waited;
            return 0;
        }
        if (waited > timeout) break;
        if (waited < 0.01) sched_yield();
        else nanosleep(&(struct timespec){0, 100000}, NULL);
    }
    cgc_error("%s did not complete in %.0f s: another rank has stopped or hangs "
              "(CGC_COMM_TIMEOUT sets the limit); ending the job", what, waited);
    comm_close(c, true);
    exit(1);
}

static int finish(Comm *c, MPI_Request *req, const char *what)
{
    return finish_after(c, req, 0, what);
}

int comm_wait(Comm *c, int slot, const char *what)
{
    if (!c->mpi) return 0;
    CGC_ASSERT(slot >= 0 && slot < c->nslots);
    return finish(c, &c->slot[slot], what);
}

int comm_run(Comm *c, CommOp op, void *buf, int64_t n, CommType t, const char *what)
{
    if (!c->mpi) return 0;
    MPI_Request req;
    int rc = istart(c, op, buf, n, t, &req);
    if (rc != MPI_SUCCESS) return mpi_failed(c, rc, what);
    return finish(c, &req, what);
}

int comm_broadcast_after(Comm *c, void *buf, size_t bytes, int root, double work_s, const char *what)
{
    if (!c->mpi) return 0;
    for (size_t done = 0; done < bytes;) {   /* MPI counts in int */
        size_t part = bytes - done < (size_t)INT_MAX ? bytes - done : (size_t)INT_MAX;
        MPI_Request req;
        int rc = MPI_Ibcast((char *)buf + done, (int)part, MPI_BYTE, root, MPI_COMM_WORLD, &req);
        if (rc != MPI_SUCCESS) return mpi_failed(c, rc, what);
        if (finish_after(c, &req, work_s, what) != 0) return -1;
        done += part;
    }
    return 0;
}

int comm_broadcast(Comm *c, void *buf, size_t bytes, int root, const char *what)
{
    return comm_broadcast_after(c, buf, bytes, root, 0, what);
}

int comm_agree(Comm *c, uint64_t value, const char *what, const char *hint)
{
    if (!c->mpi) return 0;
    int n = c->world.size;
    uint64_t *all = xmalloc((size_t)n * sizeof *all);
    MPI_Request req;
    int rc = MPI_Iallgather(&value, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS || finish(c, &req, what) != 0) {
        free(all);
        return rc != MPI_SUCCESS ? mpi_failed(c, rc, what) : -1;
    }
    int differ = 0, first = -1;
    for (int r = 1; r < n; r++)
        if (all[r] != all[0]) differ++, first = first < 0 ? r : first;
    free(all);
    if (!differ) return 0;
    if (c->world.rank == 0)
        cgc_error("%s differ between ranks: %d of the %d ranks (rank %d the first) differ from "
                  "rank 0; %s", what, differ, n, first, hint);
    return -1;
}

#else   /* built without MPI: a world of one rank only */

Comm *comm_open(const CommWorld *w)
{
    if (w->size > 1) {
        cgc_error("this cgc was built without MPI, so it cannot train on %d ranks; install "
                  "Open MPI (apt-get install libopenmpi-dev openmpi-bin) and rebuild",
                  w->size);
        return NULL;
    }
    Comm *c = xcalloc(1, sizeof *c);
    c->world = *w;
    c->timeout_s = timeout_seconds();
    return c;
}

void comm_close(Comm *c, bool failed) { free(c); }
int comm_start(Comm *c, int slot, CommOp op, void *buf, int64_t n, CommType t) { return 0; }
int comm_progress(Comm *c) { return 0; }
int comm_wait(Comm *c, int slot, const char *what) { return 0; }
int comm_run(Comm *c, CommOp op, void *buf, int64_t n, CommType t, const char *what) { return 0; }
int comm_broadcast(Comm *c, void *buf, size_t bytes, int root, const char *what) { return 0; }
int comm_broadcast_after(Comm *c, void *buf, size_t bytes, int root, double work_s, const char *what)
{
    return 0;
}
int comm_agree(Comm *c, uint64_t value, const char *what, const char *hint) { return 0; }

#endif
