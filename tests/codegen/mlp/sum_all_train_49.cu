#include "cgc_device.h"

/* mlp.net line 11: sum (train graph, node %49)
 * mlp.net line 11: sum (train graph, node %52)
 * mlp.net line 11: sum (train graph, node %76)
 * mlp.net line 11: sum (train graph, node %78) */
extern "C" __global__ void __launch_bounds__(256)
sum_all_train_49(float *__restrict__ out, const float *__restrict__ in_x)
{
    const int64_t rows = 1, len = 512, inner = 1;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t base = (r / inner) * len * inner + r % inner;
        double acc0 = 0.0;
        for (int64_t k = threadIdx.x; k < len; k += blockDim.x)
            acc0 += (double)cgc_load(in_x[base + k * inner]);
        acc0 = cgc_block_sum(acc0);
        if (threadIdx.x == 0) cgc_store(&out[r], (float)acc0);
    }
}
