#include "cgc_device.h"

/* mlp.net line 19: runtime (train graph, node %108) */
extern "C" __global__ void __launch_bounds__(32)
runtime_train_108(float *__restrict__ out, float value)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) cgc_store(&out[0], value);
}
