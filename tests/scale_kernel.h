/* scale_kernel.h: a tiny hand-written CUDA module (x *= a over n floats) for the tests of
 * the NVRTC path and the CUDA device, which need a kernel that is not generated. */
#ifndef CGC_TESTS_SCALE_KERNEL_H
#define CGC_TESTS_SCALE_KERNEL_H

#define SCALE_KERNEL_SOURCE \
    "extern \"C\" __global__ void __launch_bounds__(128)\n"                                  \
    "scale(float *x, float a, long long n)\n"                                                 \
    "{\n"                                                                                      \
    "    for (long long i = blockIdx.x * 128ll + threadIdx.x; i < n; i += gridDim.x * 128ll)\n" \
    "        x[i] *= a;\n"                                                                      \
    "}\n"

#endif
