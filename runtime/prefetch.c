/* prefetch.c: worker threads filling a ring of slots (see prefetch.h).
 *
 * Slot I holds the micro-batches J with J % slots == I in turn. Its state moves FREE ->
 * FILLING (a worker gathers) -> READY -> TAKEN (the trainer reads) -> FREE; one mutex
 * guards the states and the walk. Workers wait on one condition variable (a slot to
 * fill), the trainer on another (a slot filled), and each hand-off wakes one thread: a
 * slot given back makes one slot fillable, and a worker that finds none asleep looks
 * again before it waits. Only a new walk, or the end, wakes every worker. Workers gather outside the lock, one per slot up to MAX_WORKERS, so that
 * reads that wait on a disk, or conversions, go on side by side.
 *
 * $CGC_DATA_DELAY_MS, a test instrument, makes every gather sleep that long first, as a
 * slow disk would, so that a test can see the reads overlap the steps.
 */
#define _GNU_SOURCE
#include "prefetch.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/clock.h"
#include "../base/diag.h"

typedef enum SlotState { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_TAKEN } SlotState;

enum { MAX_WORKERS = 4 };

/* An epoch's walk: micro-batches up to MICROS - 1 of ORDER. */
typedef struct Walk {
    const Dataset *d;
    const int64_t *order;
    int64_t phase, batch, micros;
    int rank, ranks;
    long delay_ms;
} Walk;

struct Prefetch {
    int depth, nslots;          /* nslots: depth, or 1 for depth 0 */
    PrefetchSlot *slots;
    SlotState *state;
    PrefetchAlloc a;
    Walk walk;
    int64_t next_fill, next_take;
    bool walking, quit;
    int nworkers;
    pthread_t workers[MAX_WORKERS];
    pthread_mutex_t mu;
    pthread_cond_t slot_free;   /* the workers' wait: a slot to fill, or the end */
    pthread_cond_t slot_filled; /* the trainer's: a slot FILLING no longer */
    double waited, read;
};

static void *slot_alloc(const PrefetchAlloc *a, size_t bytes)
{
    return a->alloc ? a->alloc(a->ctx, bytes) : malloc(bytes);
}

static void slot_release(const PrefetchAlloc *a, void *p)
{
    if (!p) return;
    if (a->alloc) a->release(a->ctx, p);
    else free(p);
}

/* Gathers micro-batch MICRO of walk W into S. */
static void fill(const Walk *w, PrefetchSlot *s, int64_t micro)
{
    if (w->delay_ms > 0) {
        struct timespec ts = {w->delay_ms / 1000, (w->delay_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
    }
    int64_t start = micro * w->batch;
    int64_t first = start, rows = w->d->n - start < w->batch ? w->d->n - start : w->batch;
    data_rank_rows(w->rank, w->ranks, &first, &rows);
    data_gather(w->d, w->order, first, rows, w->phase, s->x, s->y);
    s->micro = micro;
    s->rows = rows;
}

static bool fillable(const Prefetch *p)
{
    return p->walking && p->next_fill < p->walk.micros && p->state[p->next_fill % p->nslots] == SLOT_FREE;
}

static void *worker(void *arg)
{
    Prefetch *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && !fillable(p)) pthread_cond_wait(&p->slot_free, &p->mu);
        if (p->quit) break;
        int64_t micro = p->next_fill++;
        int i = (int)(micro % p->nslots);
        p->state[i] = SLOT_FILLING;
        Walk walk = p->walk;
        pthread_mutex_unlock(&p->mu);
        double t0 = clock_seconds();
        fill(&walk, &p->slots[i], micro);
        double dt = clock_seconds() - t0;
        pthread_mutex_lock(&p->mu);
        p->read += dt;
        p->state[i] = SLOT_READY;
        pthread_cond_signal(&p->slot_filled);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static long delay_ms(void)
{
    const char *s = getenv("CGC_DATA_DELAY_MS");
    long v = s ? strtol(s, NULL, 10) : 0;
    return v > 0 && v <= 60000 ? v : 0;
}

size_t prefetch_y_at(const Dataset *d, int64_t rows)
{
    size_t x = (size_t)(rows * d->x_row) * sizeof(float);   /* i32 tokens: as many bytes */
    return (x + 255) / 256 * 256;
}

static int alloc_slots(Prefetch *p, int64_t rows)
{
    const Dataset *d = p->walk.d;
    size_t y_at = prefetch_y_at(d, rows), bytes = y_at + (size_t)(rows * d->y_row) * sizeof(float);
    for (int i = 0; i < p->nslots; i++) {
        p->slots[i].x = slot_alloc(&p->a, bytes ? bytes : 4);
        if (!p->slots[i].x) {
            cgc_error("cannot allocate %zu bytes of host memory for %d micro-batches of data",
                      bytes * (size_t)p->nslots, p->nslots);
            return -1;
        }
        p->slots[i].y = d->y_row ? (char *)p->slots[i].x + y_at : NULL;
    }
    return 0;
}

Prefetch *prefetch_new(const Dataset *d, int depth, int64_t rows, const PrefetchAlloc *a)
{
    Prefetch *p = xcalloc(1, sizeof *p);
    p->walk.d = d;
    p->walk.delay_ms = delay_ms();
    p->depth = depth;
    p->nslots = depth > 0 ? depth : 1;
    p->slots = xcalloc((size_t)p->nslots, sizeof *p->slots);
    p->state = xcalloc((size_t)p->nslots, sizeof *p->state);
    if (a) p->a = *a;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->slot_free, NULL);
    pthread_cond_init(&p->slot_filled, NULL);
    if (alloc_slots(p, rows) != 0) {
        prefetch_free(p);
        return NULL;
    }
    for (int i = 0; i < depth && i < MAX_WORKERS; i++) {
        int rc = pthread_create(&p->workers[i], NULL, worker, p);
        if (rc != 0) {
            cgc_error("cannot start a thread that reads data ahead (%s); try prefetch = 0",
                      strerror(rc));
            prefetch_free(p);
            return NULL;
        }
        p->nworkers++;
    }
    return p;
}

void prefetch_stop(Prefetch *p)
{
    pthread_mutex_lock(&p->mu);
    p->walking = false;
    for (int i = 0; i < p->nslots; i++)
        while (p->state[i] == SLOT_FILLING) pthread_cond_wait(&p->slot_filled, &p->mu);
    for (int i = 0; i < p->nslots; i++) p->state[i] = SLOT_FREE;
    pthread_mutex_unlock(&p->mu);
}

void prefetch_epoch(Prefetch *p, const int64_t *order, int64_t phase, int64_t batch,
                    int64_t from, int64_t micros, int rank, int ranks)
{
    prefetch_stop(p);
    pthread_mutex_lock(&p->mu);
    p->walk.order = order;
    p->walk.phase = phase;
    p->walk.batch = batch;
    p->walk.micros = micros;
    p->walk.rank = rank;
    p->walk.ranks = ranks;
    p->next_fill = p->next_take = from;
    p->walking = true;
    pthread_cond_broadcast(&p->slot_free);
    pthread_mutex_unlock(&p->mu);
}

PrefetchSlot *prefetch_take(Prefetch *p, int64_t micro)
{
    double t0 = clock_seconds();
    pthread_mutex_lock(&p->mu);
    if (!p->walking || micro != p->next_take || micro >= p->walk.micros)
        CGC_INTERNAL("micro-batch %lld taken out of the walk's order (next %lld of %lld)",
                     (long long)micro, (long long)p->next_take, (long long)p->walk.micros);
    p->next_take++;
    PrefetchSlot *s = &p->slots[micro % p->nslots];
    if (!p->nworkers) {
        Walk walk = p->walk;
        pthread_mutex_unlock(&p->mu);
        fill(&walk, s, micro);
        pthread_mutex_lock(&p->mu);
        p->read += clock_seconds() - t0;
    }
    while (p->nworkers && p->state[micro % p->nslots] != SLOT_READY) pthread_cond_wait(&p->slot_filled, &p->mu);
    p->state[micro % p->nslots] = SLOT_TAKEN;
    p->waited += clock_seconds() - t0;
    pthread_mutex_unlock(&p->mu);
    return s;
}

void prefetch_give(Prefetch *p, PrefetchSlot *s)
{
    pthread_mutex_lock(&p->mu);
    p->state[s - p->slots] = SLOT_FREE;
    pthread_cond_signal(&p->slot_free);
    pthread_mutex_unlock(&p->mu);
}

/* Under the lock: the worker adds to READ. */
static double locked(const Prefetch *p, const double *v)
{
    pthread_mutex_lock((pthread_mutex_t *)&p->mu);
    double x = *v;
    pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
    return x;
}

double prefetch_waited(const Prefetch *p) { return locked(p, &p->waited); }
double prefetch_read(const Prefetch *p) { return locked(p, &p->read); }
int prefetch_depth(const Prefetch *p) { return p->depth; }
int prefetch_workers(const Prefetch *p) { return p->nworkers; }

bool prefetch_one_core(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) == 1;
}

void prefetch_free(Prefetch *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->slot_free);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->workers[i], NULL);
    for (int i = 0; i < p->nslots; i++) slot_release(&p->a, p->slots[i].x);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->slot_free);
    pthread_cond_destroy(&p->slot_filled);
    free(p->slots);
    free(p->state);
    free(p);
}
