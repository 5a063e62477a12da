#include "cgc_device.h"

/* data pipeline: cgc_order_shuffle (see codegen/plan.h) */
extern "C" __global__ void __launch_bounds__(1) cgc_order_shuffle(int32_t *__restrict__ order, const int32_t *__restrict__ draws, int64_t n, int64_t shuffle)
{
    /* one thread: Fisher-Yates is sequential */
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    for (int64_t i = 0; i < n; i++) order[i] = (int32_t)i;
    if (!shuffle) return;
    for (int64_t k = 0; k < n - 1; k++) {
        const int64_t i = n - 1 - k, j = draws[k];
        const int32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}
