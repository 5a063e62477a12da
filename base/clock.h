/* clock.h: the one clock cgc times itself with (progress, throughput, GEMM share). */
#ifndef CGC_CLOCK_H
#define CGC_CLOCK_H

#include <time.h>

/* Seconds on the monotonic clock: for differences only. */
static inline double clock_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
