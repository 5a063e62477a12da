#include "cgc_device.h"

/* mlp.net line 6: relu, computes h1 (train graph, node %9)
 * mlp.net line 6: relu, computes h1 (eval graph, node %9)
 * mlp.net line 6: relu, computes h1 (forward graph, node %9) */
extern "C" __global__ void __launch_bounds__(256)
relu_h1(cgc_half *__restrict__ out, const cgc_half *__restrict__ in_x, int64_t sym0)
{
    const int64_t n = sym0 * 512;
    for (int64_t i = cgc_thread_index(); i < n; i += cgc_thread_count()) {
        const float x = cgc_load(in_x[i]);
        cgc_store(&out[i], x < 0.0f ? 0.0f : x);
    }
}
