/* cuda_emu.h: a host emulation of the CUDA execution model, so that generated kernels
 * compile with the host C++ compiler and run on the CPU (tests compare them with the
 * reference executor where there is no GPU).
 *
 * Included first (`c++ -include cuda_emu.h`) before any kernel source, it defines
 * CGC_EMULATE and the CUDA surface the generated code uses: qualifiers, thread and block
 * indices, __syncthreads, warp shuffles, atomics and the float intrinsics.
 *
 * The execution model (cuda_emu.cpp): the blocks of a grid run one after another; the
 * threads of a block run as fibers on one OS thread and switch only at __syncthreads (a
 * barrier of the block's live threads), at warp shuffles (a rendezvous of the live
 * threads of a warp of 32) and at tensor-core products (a rendezvous of a whole warp).
 * Between two barriers the warps run one after another, each as far as it can go, in
 * ascending and descending order by turns, so a missing barrier shows as wrong values;
 * cp.async copies land at their thread's wait for their group, so a missing wait does.
 * So `__shared__` can be a function-local `static` (one block at a time owns it), atomics
 * need no locking, and a kernel without barriers runs each thread straight through. A barrier that can never complete fails the launch with a
 * message naming the kernel and block, instead of hanging.
 */
#ifndef CGC_CUDA_EMU_H
#define CGC_CUDA_EMU_H

#define CGC_EMULATE 1

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cmath>
#include <type_traits>

/* ---- qualifiers ---- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))
/* Blocks run one at a time, so a function-local static is per block. */
#define __shared__ static
/* __restrict__ is a GNU C++ keyword already. */

/* ---- indices: set by the scheduler before it resumes a thread ---- */
struct cgc_emu_uint3 {
    unsigned x, y, z;
};
extern "C" {
extern cgc_emu_uint3 cgc_emu_thread_idx, cgc_emu_block_idx, cgc_emu_block_dim,
    cgc_emu_grid_dim;
}
#define threadIdx cgc_emu_thread_idx
#define blockIdx cgc_emu_block_idx
#define blockDim cgc_emu_block_dim
#define gridDim cgc_emu_grid_dim
#define warpSize 32

/* ---- synchronisation (cuda_emu.cpp) ---- */
enum { CGC_EMU_SHFL_XOR, CGC_EMU_SHFL_DOWN, CGC_EMU_SHFL_IDX };

extern "C" {
/* FILE and LINE identify the barrier: threads waiting at different barriers never
 * release each other (divergent __syncthreads is an error, reported). */
void cgc_emu_syncthreads(const char *file, int line);
/* What the GPU would fault on, or leaves undefined (WHAT says it): the calling thread
 * stops there, and the launch fails with WHAT, naming the kernel, block and thread. */
void cgc_emu_fault(const char *what) __attribute__((noreturn));
/* Exchanges the 64-bit pattern BITS among the warp's threads in MASK; returns the
 * pattern of the source lane that KIND and ARG (lane mask, delta or lane) select. FILE
 * and LINE identify the call: every lane MASK names must make the same one, with the
 * same MASK (else the launch fails, as cuda_emu.cpp says). */
uint64_t cgc_emu_shuffle(int kind, unsigned mask, uint64_t bits, int arg, int width,
                         const char *file, int line);
int cgc_emu_launch(unsigned grid, unsigned block, void (*thunk)(void **), void **args,
                   const char *name);
/* mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: a rendezvous of the whole warp (all
 * 32 threads must reach it), after which each thread's D holds its fragment of
 * D + A @ B, the fragments laid out as cgc_mma_16816 (cgc_device.h) says. The products
 * are exact in f32 and summed in k order, in f32. */
void cgc_emu_mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2], bool bf16);
/* cp.async.cg.shared.global of 16 bytes (zeros when !VALID), commit_group and
 * wait_group NEWEST, per thread as in PTX (DST, and SRC when VALID, 16-byte aligned, or
 * the launch fails as the GPU's would): the bytes are read from SRC at once but land
 * in DST only when a wait of the same thread completes their (committed) group, so a
 * kernel that reads a stage before waiting for it reads stale data, as it may on a GPU. */
void cgc_emu_cp_async16(void *dst, const void *src, bool valid);
void cgc_emu_cp_async_commit(void);
void cgc_emu_cp_async_wait(unsigned newest);
}

#define __syncthreads() cgc_emu_syncthreads(__FILE__, __LINE__)
/* Blocks run one after another on one OS thread: every write is already visible to the
 * blocks that follow (the "last block" pattern then always elects the grid's last one). */
#define __threadfence() ((void)0)

template <typename T> static inline uint64_t cgc_emu_to_bits(T v)
{
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}

template <typename T> static inline T cgc_emu_from_bits(uint64_t b)
{
    T v;
    memcpy(&v, &b, sizeof v);
    return v;
}

/* The call site comes in as default arguments (__builtin_FILE and __builtin_LINE are
 * evaluated where the shuffle is called). */
#define CGC_EMU_SITE const char *cgc_file = __builtin_FILE(), int cgc_line = __builtin_LINE()
#define CGC_EMU_SHUFFLES(T)                                                                   \
    static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32,      \
                                    CGC_EMU_SITE)                                             \
    {                                                                                         \
        return cgc_emu_from_bits<T>(cgc_emu_shuffle(CGC_EMU_SHFL_XOR, mask,                  \
            cgc_emu_to_bits(v), lane_mask, width, cgc_file, cgc_line));                      \
    }                                                                                         \
    static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32,    \
                                     CGC_EMU_SITE)                                            \
    {                                                                                         \
        return cgc_emu_from_bits<T>(cgc_emu_shuffle(CGC_EMU_SHFL_DOWN, mask,                 \
            cgc_emu_to_bits(v), (int)delta, width, cgc_file, cgc_line));                     \
    }                                                                                         \
    static inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32,           \
                                CGC_EMU_SITE)                                                 \
    {                                                                                         \
        return cgc_emu_from_bits<T>(cgc_emu_shuffle(CGC_EMU_SHFL_IDX, mask,                  \
            cgc_emu_to_bits(v), src_lane, width, cgc_file, cgc_line));                       \
    }
CGC_EMU_SHUFFLES(float)
CGC_EMU_SHUFFLES(double)
CGC_EMU_SHUFFLES(int)
CGC_EMU_SHUFFLES(unsigned)
CGC_EMU_SHUFFLES(unsigned long long)
#undef CGC_EMU_SHUFFLES
#undef CGC_EMU_SITE

/* ---- atomics: relaxed atomic operations, as CUDA's are (threads switch only at
 * barriers and shuffles, so a plain update would do; the racecheck, ThreadSanitizer,
 * must see them as atomics) ---- */
template <typename T> static inline T cgc_emu_atomic_add(T *address, T value)
{
    if constexpr (std::is_integral<T>::value) {
        return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
    } else {   /* compare and swap on the bits */
        using Bits = typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type;
        Bits *bits = (Bits *)address, seen = __atomic_load_n(bits, __ATOMIC_RELAXED);
        for (;;) {
            T old = cgc_emu_from_bits<T>(seen);
            Bits next = (Bits)cgc_emu_to_bits((T)(old + value));
            if (__atomic_compare_exchange_n(bits, &seen, next, false, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED))
                return old;
        }
    }
}
#define CGC_EMU_ATOMIC_ADD(T) \
    static inline T atomicAdd(T *address, T value) { return cgc_emu_atomic_add(address, value); }
CGC_EMU_ATOMIC_ADD(float)
CGC_EMU_ATOMIC_ADD(double)
CGC_EMU_ATOMIC_ADD(int)
CGC_EMU_ATOMIC_ADD(unsigned)
CGC_EMU_ATOMIC_ADD(unsigned long long)
#undef CGC_EMU_ATOMIC_ADD

/* ---- integer and bit intrinsics ---- */
static inline unsigned __umulhi(unsigned a, unsigned b)
{
    return (unsigned)(((uint64_t)a * b) >> 32);
}
static inline unsigned __float_as_uint(float x) { return cgc_emu_from_bits<unsigned>(cgc_emu_to_bits(x)); }
static inline float __uint_as_float(unsigned x) { return cgc_emu_from_bits<float>(cgc_emu_to_bits(x)); }
static inline float __int_as_float(int x) { return cgc_emu_from_bits<float>(cgc_emu_to_bits(x)); }

/* ---- float math: expf, logf, ... come from <math.h>; the classification functions
 * are the C++ overloads, as CUDA's are. ---- */
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }   /* not in libm */
using std::isfinite;
using std::isinf;
using std::isnan;

#endif
