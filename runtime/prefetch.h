/* prefetch.h: the next micro-batches' rows, gathered on host threads while the current
 * step runs (what a DataLoader's workers and prefetch_factor give a PyTorch user).
 *
 * A Prefetch walks one epoch's micro-batches in order. Micro-batch J's rows are this
 * rank's share (data_rank_rows) of ORDER[J * batch ..), as data_gather writes them
 * (features converted from their files, text windows from the phase), into one of DEPTH
 * slots, by one of its worker threads (one a slot, up to 4). The trainer takes
 * micro-batch J's slot, waiting only if no worker has filled it yet (that wait is what
 * prefetch_waited reports), uses it and gives it back; a worker then fills it with
 * micro-batch J + DEPTH. DEPTH 0 has no thread: a take gathers the rows there and then,
 * so the whole read is waited for.
 *
 * The rows a slot holds do not depend on when a worker gathered them, so a run that
 * prefetches is the run that does not, bit for bit.
 */
#ifndef CGC_PREFETCH_H
#define CGC_PREFETCH_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"

typedef struct PrefetchSlot {
    void *x, *y;                /* the rows' features and labels (y NULL: no labels), one
                                 * block: y at x + prefetch_y_at */
    int64_t micro;              /* the micro-batch they are */
    int64_t rows;               /* how many: this rank's share */
} PrefetchSlot;

/* Where a slot's buffers come from: pinned memory for a device that copies from them
 * asynchronously, else NULL for malloc. alloc returns NULL on failure. */
typedef struct PrefetchAlloc {
    void *(*alloc)(void *ctx, size_t bytes);
    void (*release)(void *ctx, void *p);
    void *ctx;
} PrefetchAlloc;

typedef struct Prefetch Prefetch;

/* A prefetcher of D's rows, DEPTH micro-batches ahead, in slots of ROWS rows. NULL after
 * an error (the thread or the memory) was reported. */
Prefetch *prefetch_new(const Dataset *d, int depth, int64_t rows, const PrefetchAlloc *a);
/* Starts a walk of the epoch whose order is ORDER (NULL: file order) and whose text
 * windows start at PHASE: micro-batches FROM .. MICROS - 1 of BATCH rows each (the last
 * one short when the rows run out), rank RANK of RANKS taking its share of each. ORDER
 * must not change until prefetch_stop. */
void prefetch_epoch(Prefetch *p, const int64_t *order, int64_t phase, int64_t batch,
                    int64_t from, int64_t micros, int rank, int ranks);
/* Ends the walk: the worker is idle and every slot free when it returns. */
void prefetch_stop(Prefetch *p);
/* Micro-batch MICRO's slot, the walk's next; waits until it is filled. */
PrefetchSlot *prefetch_take(Prefetch *p, int64_t micro);
/* S back to the worker: its buffers are no longer read. */
void prefetch_give(Prefetch *p, PrefetchSlot *s);
/* Seconds the takes waited for rows, and seconds spent gathering them, over the run. */
double prefetch_waited(const Prefetch *p);
double prefetch_read(const Prefetch *p);
int prefetch_depth(const Prefetch *p);
int prefetch_workers(const Prefetch *p);
/* Whether this process may run on one core only (a rank that mpirun bound to a core). */
bool prefetch_one_core(void);
/* Where a slot's labels start, in bytes from its features: a slot of ROWS rows of D is
 * one block of prefetch_y_at(D, ROWS) + ROWS * y_row * 4 bytes. */
size_t prefetch_y_at(const Dataset *d, int64_t rows);
void prefetch_free(Prefetch *p);

#endif
