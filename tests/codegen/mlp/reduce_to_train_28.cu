#include "cgc_device.h"

/* mlp.net line 8: reduce_to (train graph, node %28) */
extern "C" __global__ void __launch_bounds__(256)
reduce_to_train_28(cgc_half *__restrict__ out, const cgc_half *__restrict__ in_x, int64_t sym0)
{
    const int64_t nout = 10, nred = sym0;
    for (int64_t o = blockIdx.x; o < nout; o += gridDim.x) {
        int64_t rest = o;
        const int64_t k1 = rest % 10;
        rest /= 10;
        const int64_t base = k1 * 1;
        double acc = 0.0;
        for (int64_t r = threadIdx.x; r < nred; r += blockDim.x) {
            int64_t left = r;
            const int64_t r0 = left % sym0;
            left /= sym0;
            acc += (double)cgc_load(in_x[base + r0 * 10]);
        }
        acc = cgc_block_sum(acc);
        if (threadIdx.x == 0) cgc_store(&out[o], (float)acc);
    }
}
