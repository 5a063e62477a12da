/* bench_allreduce.c: what one all-reduce costs on this machine's MPI (not a test).
 *
 *   mpirun -n R build/bench_allreduce
 *
 * For sizes from 4 bytes to 64 MB, the median time of an in-place MPI_Allreduce of f32
 * sums over 30 repeats, barrier-aligned, beside what runtime/comm.h's model predicts; then
 * the latency (the median of the smallest) and the bandwidth (the ring's bytes per rank,
 * 2 (R - 1) / R of the message, over the median time at 1 MB, the size of a small model's
 * gradients; larger messages fall out of the caches and slow down), which is where
 * comm.h's figures * come from (BENCHMARKS.md). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "../runtime/comm.h"

enum { REPEATS = 30 };

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    double latency = 0, bandwidth = 0;
    if (rank == 0) printf("%12s %12s %12s %10s\n", "bytes", "median ms", "model ms", "GB/s");
    for (long bytes = 4; bytes <= 64L << 20; bytes *= 4) {
        float *buf = calloc((size_t)bytes / 4, sizeof *buf);
        double t[REPEATS];
        for (int r = 0; r < REPEATS; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double start = MPI_Wtime();
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)(bytes / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            t[r] = MPI_Wtime() - start;
        }
        MPI_Allreduce(MPI_IN_PLACE, t, REPEATS, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        qsort(t, REPEATS, sizeof *t, by_value);
        double median = t[REPEATS / 2], moved = 2.0 * (ranks - 1) / ranks * (double)bytes;
        if (rank == 0)
            printf("%12ld %12.4f %12.4f %10.2f\n", bytes, median * 1e3,
                   comm_predict(COMM_SUM, bytes, ranks) * 1e3, moved / median / 1e9);
        if (bytes == 4) latency = median;
        if (bytes == 1L << 20) bandwidth = moved / median;
        free(buf);
    }
    if (rank == 0)
        printf("%d ranks: latency %.2f us (4 bytes), bandwidth %.2f GB/s (1 MB)\n", ranks,
               latency * 1e6, bandwidth / 1e9);
    MPI_Finalize();
    return 0;
}
