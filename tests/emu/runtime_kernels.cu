// runtime_kernels.cu: hand-written kernels that exercise the CUDA emulation
// (test_emu_runtime.c), each with the thunk the emulated device launches it through.
// Compiled as C++ with `-include cuda_emu.h`, as generated kernels are.

#define THUNK_ARG(i, T) (*(T *)args[i])

// Every block reverses its slice through shared memory: correct only if __shared__ is
// per block and no thread reads before every thread has written.
extern "C" __global__ void __launch_bounds__(256) block_reverse(float *out, const float *in, int64_t n)
{
    __shared__ float tile[256];
    unsigned t = threadIdx.x;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + t;
    tile[t] = i < n ? in[i] : -1.0f;
    __syncthreads();
    // a second phase through the same array: the barrier must order it too
    float mine = tile[blockDim.x - 1 - t];
    __syncthreads();
    tile[t] = mine * 2.0f;
    __syncthreads();
    if (i < n) out[i] = tile[t];
}

// A shared-memory tree sum per block, with threads past the end exiting early: the
// barrier is among the threads still running.
extern "C" __global__ void block_sum(float *out, const float *in, int64_t n)
{
    __shared__ float part[128];
    unsigned t = threadIdx.x;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + t;
    part[t] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (t < s) part[t] += part[t + s];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = part[0];
}

// Warp sums by xor butterflies (float, double) and by shifting down (int, unsigned).
extern "C" __global__ void warp_sums(float *fout, double *dout, int *iout, unsigned *uout,
                                     const float *in)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
    float f = in[i];
    double d = (double)in[i] * 0.5;
    int k = (int)i;
    unsigned u = i * 3u;
    for (int off = 16; off > 0; off /= 2) {
        f += __shfl_xor_sync(0xffffffffu, f, off);
        d += __shfl_xor_sync(0xffffffffu, d, off);
        k += __shfl_down_sync(0xffffffffu, k, off);
        u += __shfl_down_sync(0xffffffffu, u, off);
    }
    fout[i] = f;      // every lane holds the warp's sum
    dout[i] = d;
    if (lane == 0) {  // only lane 0 holds the whole sum when shifting down
        iout[i / 32] = k;
        uout[i / 32] = u;
    }
}

// Sub-warp shuffles: width 8 groups, and a down shift that runs off the group's end;
// indexed ones (each lane its own source, 64-bit values, and a source past the width).
extern "C" __global__ void shuffle_width(int *xor_out, int *down_out, unsigned long long *idx_out,
                                         int *idx8_out)
{
    int lane = (int)threadIdx.x;
    xor_out[lane] = __shfl_xor_sync(0xffffffffu, lane, 1, 8);
    down_out[lane] = __shfl_down_sync(0xffffffffu, lane, 3, 8);
    idx_out[lane] = __shfl_sync(0xffffffffu, (unsigned long long)lane << 40 | 7u, lane * 7 % 32);
    idx8_out[lane] = __shfl_sync(0xffffffffu, lane, 9, 8);
}

extern "C" __global__ void atomics_all(int *count, float *fsum, double *dsum,
                                       unsigned long long *usum)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(count, 1);
    atomicAdd(fsum, 0.5f);
    atomicAdd(dsum, (double)i);
    atomicAdd(usum, (unsigned long long)i << 33);
}

// The ABI's grid-stride loop: any grid size covers the work.
extern "C" __global__ void grid_stride(float *out, const float *in, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)blockDim.x * gridDim.x)
        out[i] = 2.0f * in[i] + 1.0f;
}

// Two different barriers in the two sides of a branch: can never complete.
extern "C" __global__ void divergent_barrier(float *out)
{
    if (threadIdx.x < 16) {
        __syncthreads();
        out[threadIdx.x] = 1.0f;
    } else {
        __syncthreads();
        out[threadIdx.x] = 2.0f;
    }
}

// Half a warp at a shuffle, the other half at a barrier: can never complete.
extern "C" __global__ void divergent_shuffle(float *out)
{
    float v = (float)threadIdx.x;
    if (threadIdx.x % 32 < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
    __syncthreads();
    out[threadIdx.x] = v;
}

// What CUDA leaves undefined at a warp shuffle, one case per CASE, each of which the
// emulation must fail the launch for (test_emu_runtime.c names the message of each):
//   0  a mask that leaves out the calling lane
//   1  a mask naming lanes that have exited
//   2  the two halves of a warp at two different shuffles, each with the full mask
//   3  a source lane outside the mask (lanes 0-15 shift down by one: lane 15 reads 16)
//   4  the full mask in a partial warp (a block of 48 threads)
//   5  a width that is not a power of two
// and one that is defined: each half warp exchanging within itself at its own shuffle,
// with its own half mask (case 6: out[i] is lane i ^ 1's value).
extern "C" __global__ void shuffle_rules(float *out, int which)
{
    unsigned lane = threadIdx.x % 32;
    float v = (float)threadIdx.x;
    if (which == 0) v = __shfl_xor_sync(1u << ((lane + 1) % 32), v, 1);
    if (which == 1) {
        if (lane >= 16) return;
        v = __shfl_xor_sync(0xffffffffu, v, 1);
    }
    if (which == 2) {
        if (lane < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
        else v = __shfl_xor_sync(0xffffffffu, v, 2);
    }
    if (which == 3 && lane < 16) v = __shfl_down_sync(0x0000ffffu, v, 1);
    if (which == 4 || which == 5) v = __shfl_xor_sync(0xffffffffu, v, 1, which == 5 ? 12 : 32);
    if (which == 6) {
        if (lane < 16) v = __shfl_xor_sync(0x0000ffffu, v, 1, 16);
        else v = __shfl_xor_sync(0xffff0000u, v, 1, 16);
    }
    out[threadIdx.x] = v;
}

// cp.async with an address the GPU faults on: shared (CASE 0) or global (1) not 16-byte
// aligned; CASE 2 is aligned, and copies IN[0..4) to OUT[0..4).
extern "C" __global__ void cp_async_misaligned(float *out, const float *in, int which)
{
    __shared__ __align__(16) float stage[8];
    cgc_emu_cp_async16(stage + (which == 0 ? 1 : 0), in + (which == 1 ? 1 : 0), true);
    cgc_emu_cp_async_commit();
    cgc_emu_cp_async_wait(0);
    for (int i = 0; i < 4; i++) out[i] = stage[i];
}

// __restrict__ pointers, as generated kernels have them: the emulation refuses a launch
// that passes one address for OUT and IN (cgc_emu_noalias_restrict_scale, below, says
// which parameters are such pointers and which are written, as codegen/emit.c does).
extern "C" __global__ void restrict_scale(float *__restrict__ out, const float *__restrict__ in,
                                          int64_t n)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 3.0f * in[i];
}

// Races the racecheck (ThreadSanitizer, test_emu_runtime --tsan) must report: WHICH 0
// reverses through shared memory without the barrier between the writes and the reads;
// 1 reads a cp.async stage that another thread's copy fills, after its own wait but
// with no barrier; 2 is 0 with the barrier, and has no race.
extern "C" __global__ void racy(float *out, const float *in, int which)
{
    __shared__ __align__(16) float tile[256];
    unsigned t = threadIdx.x, n = blockDim.x;
    if (which == 1) {
        if (t % 4 == 0) cgc_emu_cp_async16(&tile[t], &in[t], true);
        cgc_emu_cp_async_commit();
        cgc_emu_cp_async_wait(0);
        out[t] = tile[(t + 4) % n];
        return;
    }
    tile[t] = in[t];
    if (which == 2) __syncthreads();
    out[t] = tile[n - 1 - t];
}

// The intrinsics generated code uses for random numbers and bit tricks.
extern "C" __global__ void intrinsics(unsigned *u, float *f)
{
    u[0] = __umulhi(0xdeadbeefu, 0x12345678u);
    u[1] = __float_as_uint(-1.5f);
    f[0] = __uint_as_float(0x3fc00000u);
    f[1] = __int_as_float(0x40490fdb);
    f[2] = isnan(f[3]) ? 1.0f : 0.0f;
    f[4] = isinf(f[5]) ? 1.0f : 0.0f;
    f[6] = isfinite(f[5]) ? 1.0f : 0.0f;
    f[7] = rsqrtf(4.0f) + erff(0.0f) + tanhf(0.0f) + fmaxf(1.0f, 2.0f) + fminf(1.0f, 2.0f) +
           floorf(2.5f) + cosf(0.0f) + powf(2.0f, 3.0f) + fabsf(-1.0f) + expf(0.0f) +
           logf(1.0f) + sqrtf(9.0f);
}

// One element past what it was given: AddressSanitizer must catch it.
extern "C" __global__ void write_at(float *out, int64_t i)
{
    if (threadIdx.x == 0) out[i] = 1.0f;
}

// cp.async as PTX has it: each thread copies 16 bytes into one shared tile (group 0)
// and zeros into another (group 1); what it reads there before any wait, after waiting
// for all but the newest group, and after waiting for all, goes to OUT[3][64][4].
extern "C" __global__ void cp_async_groups(float *out, const float *in)
{
    __shared__ __align__(16) float a[64][4], b[64][4];
    unsigned t = threadIdx.x;
    for (int k = 0; k < 4; k++) a[t][k] = b[t][k] = -1.0f;
    cgc_emu_cp_async16(a[t], &in[4 * t], true);
    cgc_emu_cp_async_commit();
    cgc_emu_cp_async16(b[t], in, false);
    cgc_emu_cp_async_commit();
    for (int k = 0; k < 4; k++) out[4 * t + k] = a[t][k] + b[t][k];
    cgc_emu_cp_async_wait(1);
    for (int k = 0; k < 4; k++) out[256 + 4 * t + k] = a[t][k] + b[t][k];
    cgc_emu_cp_async_wait(0);
    for (int k = 0; k < 4; k++) out[512 + 4 * t + k] = a[t][k] + b[t][k];
}

// Between two barriers a warp may run far ahead of another: warp 0 writes a flag that
// warp 1 reads with no barrier between. The emulation runs warps one at a time, in
// ascending order after an even number of barriers and descending after an odd one, so
// warp 1 reads before warp 0 writes after the first barrier, and after it after the
// second; a shuffle does not end a warp's turn.
extern "C" __global__ void warp_order(float *out)
{
    __shared__ float flag[2];
    unsigned t = threadIdx.x;
    if (t == 0) flag[0] = flag[1] = 0.0f;
    __syncthreads();
    if (t == 0) flag[0] = 1.0f;         // warp 0
    if (t == 32) out[0] = flag[0];      // warp 1: 0 (it ran first)
    __syncthreads();
    float seen = t == 32 ? flag[1] : 0.0f;                  // warp 1, before its shuffle
    seen = __shfl_xor_sync(0xffffffffu, seen, 0);           // each lane its own value
    if (t == 0) flag[1] = 1.0f;                             // warp 0, after its shuffle
    if (t == 32) out[1] = seen;         // 1: warp 0 ran first this time, shuffle and all
}

// Half a warp shuffles twice among itself while the other half waits at the barrier:
// the second shuffle's turn passes over the waiting lanes, which read after the barrier
// what the first half wrote before it: out[i] = (i % 16) ^ 3.
extern "C" __global__ void half_warp(float *out)
{
    __shared__ float v[16];
    unsigned t = threadIdx.x;
    if (t < 16) {
        int x = __shfl_xor_sync(0xffffu, (int)t, 1);
        v[t] = (float)__shfl_xor_sync(0xffffu, x, 2);
    }
    __syncthreads();
    out[t] = v[t % 16];
}

extern "C" {
void cgc_emu_thunk_cp_async_groups(void **args)
{
    cp_async_groups(THUNK_ARG(0, float *), THUNK_ARG(1, const float *));
}
void cgc_emu_thunk_warp_order(void **args) { warp_order(THUNK_ARG(0, float *)); }
void cgc_emu_thunk_half_warp(void **args) { half_warp(THUNK_ARG(0, float *)); }
void cgc_emu_thunk_write_at(void **args) { write_at(THUNK_ARG(0, float *), THUNK_ARG(1, int64_t)); }
void cgc_emu_thunk_block_reverse(void **args)
{
    block_reverse(THUNK_ARG(0, float *), THUNK_ARG(1, const float *), THUNK_ARG(2, int64_t));
}
void cgc_emu_thunk_block_sum(void **args)
{
    block_sum(THUNK_ARG(0, float *), THUNK_ARG(1, const float *), THUNK_ARG(2, int64_t));
}
void cgc_emu_thunk_warp_sums(void **args)
{
    warp_sums(THUNK_ARG(0, float *), THUNK_ARG(1, double *), THUNK_ARG(2, int *),
              THUNK_ARG(3, unsigned *), THUNK_ARG(4, const float *));
}
void cgc_emu_thunk_shuffle_width(void **args)
{
    shuffle_width(THUNK_ARG(0, int *), THUNK_ARG(1, int *), THUNK_ARG(2, unsigned long long *),
                  THUNK_ARG(3, int *));
}
void cgc_emu_thunk_atomics_all(void **args)
{
    atomics_all(THUNK_ARG(0, int *), THUNK_ARG(1, float *), THUNK_ARG(2, double *),
                THUNK_ARG(3, unsigned long long *));
}
void cgc_emu_thunk_grid_stride(void **args)
{
    grid_stride(THUNK_ARG(0, float *), THUNK_ARG(1, const float *), THUNK_ARG(2, int64_t));
}
void cgc_emu_thunk_divergent_barrier(void **args) { divergent_barrier(THUNK_ARG(0, float *)); }
void cgc_emu_thunk_divergent_shuffle(void **args) { divergent_shuffle(THUNK_ARG(0, float *)); }
void cgc_emu_thunk_shuffle_rules(void **args)
{
    shuffle_rules(THUNK_ARG(0, float *), THUNK_ARG(1, int));
}
void cgc_emu_thunk_cp_async_misaligned(void **args)
{
    cp_async_misaligned(THUNK_ARG(0, float *), THUNK_ARG(1, const float *), THUNK_ARG(2, int));
}
void cgc_emu_thunk_restrict_scale(void **args)
{
    restrict_scale(THUNK_ARG(0, float *), THUNK_ARG(1, const float *), THUNK_ARG(2, int64_t));
}
extern const unsigned char cgc_emu_argbytes_restrict_scale[] = {8, 8, 8, 0};
extern const unsigned char cgc_emu_noalias_restrict_scale[] = {2, 1, 0};
// A kernel whose parameters are slots (codegen/plan.h, PlanKernel.packed), read as the
// emulation's cgc_slots (codegen/cgc_device.h) reads them: args[0] points at the launch's
// values. Slot 0 is OUT, 1 IN, 2 N, 3 a float factor in its low 32 bits.
extern "C" __global__ void slots_scale(const uint64_t *v)
{
    float *out = (float *)v[0];
    const float *in = (const float *)v[1];
    float a = __uint_as_float((unsigned)v[3]);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (int64_t)v[2];
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = a * in[i];
}
void cgc_emu_thunk_slots_scale(void **args) { slots_scale((const uint64_t *)args[0]); }
extern const unsigned char cgc_emu_argbytes_slots_scale[] = {8, 8, 8, 4, 0};
extern const unsigned char cgc_emu_noalias_slots_scale[] = {0, 0, 0, 0};
extern const unsigned cgc_emu_slots_slots_scale = 4;
// The same with more slots than CUDA's 32,764 bytes of parameters hold.
void cgc_emu_thunk_slots_too_many(void **args) { slots_scale((const uint64_t *)args[0]); }
extern const unsigned cgc_emu_slots_slots_too_many = 4096;
void cgc_emu_thunk_racy(void **args)
{
    racy(THUNK_ARG(0, float *), THUNK_ARG(1, const float *), THUNK_ARG(2, int));
}
void cgc_emu_thunk_intrinsics(void **args)
{
    intrinsics(THUNK_ARG(0, unsigned *), THUNK_ARG(1, float *));
}
}
