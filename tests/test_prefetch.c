/* test_prefetch.c: the reader that gathers micro-batches ahead on a thread (prefetch.h).
 *
 * Built with ThreadSanitizer (prefetch.c and data.c compiled into it), so that a slot read
 * while the worker writes it, or a state changed outside the lock, is a report and a
 * failure. A data set whose row R holds R * 100 + column, with label R, lets every slot be
 * checked against a closed formula of the epoch's order: depths 0 to 4, one rank and a
 * rank's share of three, walks started mid-epoch (a resumed run), walks stopped halfway
 * (an interrupted one), and a consumer that sometimes dawdles, sometimes not, so that the
 * worker is found both ahead and behind.
 */
#include "runtime/prefetch.h"

#include <stdlib.h>
#include <time.h>

#include "tests/check.h"

enum { N = 500, XROW = 7, BATCH = 24 };

static float xs[N * XROW];
static int32_t ys[N];

static void pause_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* Micro-batch J of the walk, in S: this rank's share of ORDER[J * BATCH ..). */
static void check_slot(const PrefetchSlot *s, const int64_t *order, int64_t j, int rank, int ranks)
{
    int64_t first = j * BATCH, rows = N - first < BATCH ? N - first : BATCH;
    data_rank_rows(rank, ranks, &first, &rows);
    CHECK_EQ_INT(s->micro, j);
    CHECK_EQ_INT(s->rows, rows);
    int bad = 0;
    for (int64_t r = 0; r < rows && r < s->rows; r++) {
        int64_t row = order[first + r];
        bad += ((const int32_t *)s->y)[r] != row;
        for (int c = 0; c < XROW; c++) bad += ((const float *)s->x)[r * XROW + c] != (float)(row * 100 + c);
    }
    CHECK_EQ_INT(bad, 0);
}

/* Walks epochs of D at DEPTH as rank RANK of RANKS: the second from micro-batch 5, the
 * third stopped halfway. */
static void walk(const Dataset *d, int depth, int rank, int ranks)
{
    Prefetch *p = prefetch_new(d, depth, BATCH, NULL);
    CHECK(p != NULL);
    if (!p) return;
    CHECK_EQ_INT(prefetch_depth(p), depth);
    int64_t order[N], micros = N / BATCH + 1;   /* the last one short */
    unsigned seed = (unsigned)(depth * 7 + rank);
    for (int64_t epoch = 0; epoch < 3; epoch++) {
        prefetch_stop(p);
        data_order(11, epoch, true, N, order);
        int64_t from = epoch == 1 ? 5 : 0, to = epoch == 2 ? micros / 2 : micros;
        prefetch_epoch(p, order, 0, BATCH, from, micros, rank, ranks);
        for (int64_t j = from; j < to; j++) {
            if (rand_r(&seed) % 3 == 0) pause_us(rand_r(&seed) % 300);   /* the step */
            PrefetchSlot *s = prefetch_take(p, j);
            check_slot(s, order, j, rank, ranks);
            prefetch_give(p, s);
        }
    }
    CHECK(prefetch_read(p) > 0 && prefetch_waited(p) >= 0);
    if (depth == 0) CHECK(prefetch_waited(p) >= prefetch_read(p));   /* read in the take */
    prefetch_free(p);
}

int main(void)
{
    for (int r = 0; r < N; r++) {
        ys[r] = r;
        for (int c = 0; c < XROW; c++) xs[r * XROW + c] = (float)(r * 100 + c);
    }
    Dataset d = {.n = N, .x_row = XROW, .x = xs, .y_row = 1, .y_int = true, .y_i32 = ys};
    for (int depth = 0; depth <= 4; depth++) {
        walk(&d, depth, 0, 1);
        walk(&d, depth, 1, 3);
    }
    /* freed in the middle of a walk, the worker busy or waiting */
    for (int depth = 1; depth <= 3; depth++) {
        Prefetch *p = prefetch_new(&d, depth, BATCH, NULL);
        int64_t order[N];
        data_order(3, 0, true, N, order);
        prefetch_epoch(p, order, 0, BATCH, 0, N / BATCH, 0, 1);
        PrefetchSlot *s = prefetch_take(p, 0);
        check_slot(s, order, 0, 0, 1);
        prefetch_free(p);
    }
    return check_result();
}
