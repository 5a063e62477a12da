#include "cgc_device.h"

/* mlp.net line 11: cross_entropy (train graph, node %24)
 * mlp.net line 11: cross_entropy (eval graph, node %24)
 * mlp.net line 11: cross_entropy (forward graph, node %24) */
extern "C" __global__ void __launch_bounds__(1024)
cross_entropy_train_24(
    float *__restrict__ out,
    const float *__restrict__ logits,
    const int32_t *__restrict__ labels,
    int64_t sym0)
{
    if (blockIdx.x != 0) return;
    double part = 0.0;
    const int lane = threadIdx.x & 31;
    const int64_t n = sym0, c = 10;
    for (int64_t r = threadIdx.x >> 5; r < n; r += blockDim.x >> 5) {
        float m = -CGC_INF;
        for (int64_t k = lane; k < c; k += 32) {
            const float v = cgc_load(logits[r * c + k]);
            m = v > m ? v : m;
        }
        m = cgc_warp_max(m);
        double s = 0.0;
        for (int64_t k = lane; k < c; k += 32) s += (double)cgc_expf(cgc_load(logits[r * c + k]) - m);
        s = cgc_warp_sum(s);
        const double lse = (double)m + log(s);
        const int32_t label = labels[r];
        if (lane == 0)
            part += (label < 0 || label >= c) ? (double)CGC_NAN
                                              : lse - (double)cgc_load(logits[r * c + label]);
    }
    const double total = cgc_block_sum(part);
    if (threadIdx.x == 0) cgc_store(&out[0], (float)(total / (double)n));
}
