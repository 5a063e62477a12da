#include "cgc_device.h"

/* mlp.net line 6: assign, computes cgc_adam_exp_avg_h1_weight (train graph, node %169)
 * mlp.net line 6: assign, computes cgc_adam_exp_avg_sq_h1_weight (train graph, node %171)
 * mlp.net line 6: assign, computes h1_weight (train graph, node %174) */
extern "C" __global__ void __launch_bounds__(256)
assign_f32_512x784(float *__restrict__ out, const float *__restrict__ in_x)
{
    const int64_t n = 401408;
    for (int64_t i = cgc_thread_index(); i < n; i += cgc_thread_count()) {
        const float x = cgc_load(in_x[i]);
        cgc_store(&out[i], x);
    }
}
