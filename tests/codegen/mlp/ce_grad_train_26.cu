#include "cgc_device.h"

/* mlp.net line 11: ce_grad (train graph, node %26) */
extern "C" __global__ void __launch_bounds__(256)
ce_grad_train_26(
    float *__restrict__ out,
    const float *__restrict__ in_d,
    const float *__restrict__ logits,
    const int32_t *__restrict__ labels,
    int64_t sym0)
{
    const double scale = (double)cgc_load(in_d[0]) / (double)(sym0);
    const int lane = threadIdx.x & 31;
    const int64_t n = sym0, c = 10;
    for (int64_t r = cgc_thread_index() >> 5; r < n; r += cgc_thread_count() >> 5) {
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
        const bool bad = label < 0 || label >= c;
        for (int64_t k = lane; k < c; k += 32) {
            const double p = exp((double)cgc_load(logits[r * c + k]) - lse) - (k == label ? 1.0 : 0.0);
            cgc_store(&out[r * c + k], bad ? CGC_NAN : (float)(scale * p));
        }
    }
}
