/* none.c: the CUDA device when cgc is built without the CUDA Toolkit: every entry point
 * says so, and cgc runs on the CPU. */
#include <stdio.h>

#include "../device.h"

#define NO_TOOLKIT "this cgc was built without the CUDA Toolkit"
#define HOW_TO_GET_ONE "install the CUDA Toolkit and rebuild (cmake finds it in /usr/local/cuda)"

int cuda_probe(CudaDeviceInfo *infos, int max, char *why, size_t why_len)
{
    snprintf(why, why_len, "%s", NO_TOOLKIT);
    return 0;
}

int cuda_print_devices(FILE *out)
{
    fprintf(out, "no CUDA device: %s\n", NO_TOOLKIT);
    return 0;
}

int cuda_free_memory(int ordinal, size_t *free_bytes)
{
    *free_bytes = 0;
    return -1;
}

int cuda_blas_load(void)
{
    fprintf(stderr, "cgc: error: cannot load cuBLAS: %s; %s\n", NO_TOOLKIT, HOW_TO_GET_ONE);
    return -1;
}

int cuda_compile(const char *source, const char *module_name, const CudaCompileOptions *o,
                 CudaCompileResult *out)
{
    fprintf(stderr, "cgc: error: cannot compile CUDA module: %s; %s\n", NO_TOOLKIT,
            HOW_TO_GET_ONE);
    return -1;
}

int cuda_open(int ordinal, const void *cubin, size_t cubin_size, Device **out)
{
    *out = NULL;
    fprintf(stderr, "cgc: error: cannot open cuda:%d: %s; %s\n", ordinal, NO_TOOLKIT,
            HOW_TO_GET_ONE);
    return -1;
}
