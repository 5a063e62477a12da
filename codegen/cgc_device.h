/* cgc_device.h: the prelude every generated kernel includes.
 *
 * One text, three compilers: NVRTC (no system headers at all), nvcc -cubin (each emitted
 * .cu on its own), and the host C++ compiler of the CUDA emulation (tests/emu), which
 * defines CGC_EMULATE and force-includes its own header first. Whatever the emulation
 * does not provide is written here, with a host version under CGC_EMULATE.
 *
 * What it holds, each kept bit for bit in step with the CPU reference executor:
 *   - cgc_half and cgc_bf16: 16-bit storage; cgc_load gives the f32 value, cgc_store
 *     rounds to nearest even (f16 overflows to inf), as cpu_round_f16/bf16 do
 *     (runtime/cpu/exec.c); i32 stores truncate, NaN as 0, saturated (to_int32);
 *   - Philox-4x32-10, rng_uniform, rng_below and rng_dropout_keep exactly as
 *     base/rng.c, so a mask or a shuffle is the same on every backend;
 *   - the scalar functions of exec_impl.h (sigmoid, gelu, their gradients), gelu's
 *     erf and exp from cgc_math.h, the text the CPU executor compiles too;
 *   - deterministic warp and block reductions: a fixed shuffle tree, then the warps'
 *     partials combined in warp order by warp 0. No atomics;
 *   - the tensor-core pieces of the generated GEMMs and fused MLPs (max-autotune): one
 *     warp's mma.sync m16n8k16 with f32 accumulation, its fragments read from shared
 *     memory by ldmatrix, asynchronous 16-byte copies to shared memory (cp.async) and
 *     the tile loader built on them. sm_80 and later; the
 *     emulation gives the same fragments the same meaning (tests/emu/cuda_emu.h);
 *   - attention's forward and backward in the manner of FlashAttention, SIMT in f32 and
 *     on the tensor cores in f16 and bf16, templates that codegen/attention.c's kernels
 *     instantiate.
 * Reductions need blockDim.x to be a multiple of 32 (every reducing kernel uses 256).
 */
#ifndef CGC_DEVICE_PRELUDE_H
#define CGC_DEVICE_PRELUDE_H

/* ---- integer types ---- */

#if defined(__CUDACC_RTC__)
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#elif !defined(CGC_EMULATE)
#include <stdint.h>
#endif

#define CGC_INF __int_as_float(0x7f800000)
#define CGC_NAN __int_as_float(0x7fffffff)
#define CGC_LOG2E 1.44269504f
#define CGC_LN2 0.693147181f

/* Grid-stride loops: for (int64_t i = cgc_thread_index(); i < n; i += cgc_thread_count()) */
__device__ __forceinline__ int64_t cgc_thread_index()
{
    return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t cgc_thread_count() { return (int64_t)gridDim.x * blockDim.x; }

/* ---- a multi-tensor kernel's parameters ---- */

/* Its only parameter (PlanKernel.packed): N 8-byte slots, each a pointer, an integer or a
 * float in its low 32 bits, read where the launch put them (__grid_constant__), so that
 * a slot's index may be computed. The emulation passes the launch's array itself. */
#ifdef CGC_EMULATE
template <int N> struct cgc_slots { const uint64_t *v; };
#else
template <int N> struct cgc_slots { uint64_t v[N]; };
#endif

__device__ __forceinline__ float cgc_slot_float(uint64_t s) { return __uint_as_float((unsigned)s); }

/* The row, of the N rows of STRIDE slots at T, that virtual block VB belongs to: each
 * row starts with its first virtual block, ascending from the first row's, at most VB. */
__device__ __forceinline__ const uint64_t *cgc_segment(const uint64_t *t, int n, int stride, int64_t vb)
{
    int lo = 0;
    for (int hi = n; hi - lo > 1;) {
        int mid = (lo + hi) / 2;
        if (vb >= (int64_t)t[mid * stride]) lo = mid;
        else hi = mid;
    }
    return t + lo * stride;
}

/* ---- 16-bit storage types ---- */

typedef struct cgc_half { unsigned short bits; } cgc_half;
typedef struct cgc_bf16 { unsigned short bits; } cgc_bf16;

#ifdef CGC_EMULATE
/* Host versions of the conversions: round_float of runtime/cpu/exec.c (add half a unit
 * minus one plus the lowest kept bit, truncate; subnormals rounded by the FPU through
 * a magic power of two), then the exact value's bits. */
__device__ __forceinline__ float cgc_round_float(float x, int mant, float min_normal,
                                                 float magic, float overflow_at)
{
    uint32_t u = __float_as_uint(x), sign = u & 0x80000000u, a = u ^ sign;
    uint32_t shift = (uint32_t)(23 - mant);
    uint32_t r = (a + ((1u << (shift - 1)) - 1) + ((a >> shift) & 1)) & ~((1u << shift) - 1);
    if (a < __float_as_uint(min_normal))
        r = __float_as_uint((__uint_as_float(a) + magic) - magic);
    if (a >= __float_as_uint(overflow_at)) r = 0x7f800000u;
    if (a > 0x7f800000u) r = a;   /* NaN stays NaN */
    return __uint_as_float(r | sign);
}

__device__ __forceinline__ unsigned short cgc_f16_bits(float x)
{
    float y = cgc_round_float(x, 10, 0x1p-14f, 0x1p-1f, 65520.0f);
    uint32_t u = __float_as_uint(y), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);
    if (a == 0x7f800000u) return (unsigned short)(sign | 0x7c00u);
    if (a < 0x38800000u)   /* below 2^-14: a multiple of 2^-24, exactly */
        return (unsigned short)(sign | (uint32_t)(__uint_as_float(a) * 0x1p24f));
    uint32_t e = (a >> 23) - 127 + 15;
    return (unsigned short)(sign | (e << 10) | ((a >> 13) & 0x3ffu));
}

__device__ __forceinline__ float cgc_f16_value(unsigned short h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    if (e == 31) return __uint_as_float(sign | 0x7f800000u | (m << 13));
    return __uint_as_float(sign | ((e - 15 + 127) << 23) | (m << 13));
}

__device__ __forceinline__ unsigned short cgc_bf16_bits(float x)
{
    float y = cgc_round_float(x, 7, 0x1p-126f, 0x1p-110f, 0x1.ffp127f);
    uint32_t u = __float_as_uint(y);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x7fc0u);
    return (unsigned short)(u >> 16);
}
#else
__device__ __forceinline__ unsigned short cgc_f16_bits(float x)
{
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}

__device__ __forceinline__ float cgc_f16_value(unsigned short h)
{
    float x;
    asm("cvt.f32.f16 %0, %1;" : "=f"(x) : "h"(h));
    return x;
}

__device__ __forceinline__ unsigned short cgc_bf16_bits(float x)
{
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}
#endif

/* ---- loads (to f32) and stores (rounded to the storage type) ---- */

__device__ __forceinline__ float cgc_load(float x) { return x; }
__device__ __forceinline__ float cgc_load(cgc_half x) { return cgc_f16_value(x.bits); }
__device__ __forceinline__ float cgc_load(cgc_bf16 x)
{
    return __uint_as_float((uint32_t)x.bits << 16);
}
__device__ __forceinline__ float cgc_load(int32_t x) { return (float)x; }

__device__ __forceinline__ void cgc_store(float *p, float v) { *p = v; }
__device__ __forceinline__ void cgc_store(cgc_half *p, float v) { p->bits = cgc_f16_bits(v); }
__device__ __forceinline__ void cgc_store(cgc_bf16 *p, float v) { p->bits = cgc_bf16_bits(v); }
/* As the CPU executor's to_int32: truncated, NaN as 0, saturated. */
__device__ __forceinline__ void cgc_store(int32_t *p, float v)
{
    if (v != v) *p = 0;
    else if (v >= 2147483647.0f) *p = 2147483647;
    else if (v <= -2147483648.0f) *p = -2147483647 - 1;
    else *p = (int32_t)v;
}

/* N consecutive elements (4 or 8) as f32 values, in accesses of N elements but at most
 * 16 bytes each: four of f32 or i32 in one 16-byte access, four of a half type in one of
 * 8 bytes, eight of a half type in one of 16, eight of f32 in two. The vector paths of
 * fused kernels: cgc_load4 and cgc_store4, or cgc_load8 and cgc_store8 where a pointwise
 * kernel touches half-type tensors. P must be aligned to an access (the memory plan's
 * buffers are, from any element a multiple of N); the emulation faults on a misaligned
 * one, as the GPU does. */
template <int N> struct cgc_fv { float x[N]; };
typedef cgc_fv<4> cgc_f4;
typedef cgc_fv<8> cgc_f8;
template <int N, typename T> struct alignas(N * sizeof(T) < 16 ? N * sizeof(T) : 16) cgc_vec { T e[N]; };

template <int N, typename T> __device__ __forceinline__ cgc_fv<N> cgc_loadv(const T *p)
{
#ifdef CGC_EMULATE
    if ((unsigned long long)p % alignof(cgc_vec<N, T>) != 0)
        cgc_emu_fault("a vector load from an address not aligned to its access");
#endif
    const cgc_vec<N, T> v = *reinterpret_cast<const cgc_vec<N, T> *>(p);
    cgc_fv<N> r;
    for (int k = 0; k < N; k++) r.x[k] = cgc_load(v.e[k]);
    return r;
}

template <int N, typename T> __device__ __forceinline__ void cgc_storev(T *p, const float *x)
{
#ifdef CGC_EMULATE
    if ((unsigned long long)p % alignof(cgc_vec<N, T>) != 0)
        cgc_emu_fault("a vector store to an address not aligned to its access");
#endif
    cgc_vec<N, T> v;
    for (int k = 0; k < N; k++) cgc_store(&v.e[k], x[k]);
    *reinterpret_cast<cgc_vec<N, T> *>(p) = v;
}
#define cgc_load4 cgc_loadv<4>
#define cgc_store4 cgc_storev<4>
#define cgc_load8 cgc_loadv<8>
#define cgc_store8 cgc_storev<8>

/* A value rounded to a storage type but kept in a register: fused kernels round each
 * value where the CPU executor stores it, so that the next op sees the same number. */
__device__ __forceinline__ float cgc_round_f16(float v) { return cgc_f16_value(cgc_f16_bits(v)); }
__device__ __forceinline__ float cgc_round_bf16(float v)
{
    return __uint_as_float((uint32_t)cgc_bf16_bits(v) << 16);
}
__device__ __forceinline__ float cgc_round_i32(float v)
{
    int32_t r;
    cgc_store(&r, v);
    return (float)r;
}

/* ---- pooling windows ---- */

/* A window as pooling's UNFOLD lays it out (compiler/ir.h): image h x w, output oh x ow,
 * kernel, stride, padding and dilation. */
struct CgcWindow {
    int64_t h, w, oh, ow;
    int kh, kw, sh, sw, ph, pw, dh, dw;
};

/* Entry I of the patches [N, C, KH*KW, OH, OW] of image X [N, C, H, W]: the pixel that
 * the window puts there, or OUTSIDE where it falls in the padding. A fused kernel reads
 * a pool's window through this instead of stored patches (compiler/fusion.c); the
 * UNFOLD kernel and the CPU executor's unfold place the same pixels. */
template <typename T>
__device__ __forceinline__ float cgc_window_entry(const T *x, int64_t i, CgcWindow v, float outside)
{
    const int64_t l = i % (v.oh * v.ow), q = i / (v.oh * v.ow);
    const int64_t k = q % (v.kh * v.kw), plane = q / (v.kh * v.kw);
    const int64_t h = (l / v.ow) * v.sh - v.ph + (k / v.kw) * v.dh;
    const int64_t w = (l % v.ow) * v.sw - v.pw + (k % v.kw) * v.dw;
    return h >= 0 && h < v.h && w >= 0 && w < v.w ? cgc_load(x[(plane * v.h + h) * v.w + w]) : outside;
}

/* ---- scalar functions (exec_impl.h) ---- */

__device__ __forceinline__ bool cgc_isfinite(float x)
{
    return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u;
}

/* max that lets NaN win, as torch.amax and the executor's MAX reduction. */
__device__ __forceinline__ float cgc_max_nan(float m, float x)
{
    return (x > m || x != x) ? x : m;
}

__device__ __forceinline__ float cgc_sigmoid(float x)
{
    /* Two forms, so that exp never overflows. */
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    float z = expf(x);
    return z / (1.0f + z);
}

/* erf and exp, as the CPU executor computes them (cgc_math.h, inlined here when the build
 * embeds this file). */
#define CGC_MATH_FN __device__ __forceinline__
#define CGC_BITS __float_as_uint
#define CGC_FLOAT __uint_as_float
#define CGC_PICK(c, a, b) ((c) ? (a) : (b))
#include "cgc_math.h"

__device__ __forceinline__ float cgc_gelu(float x)
{
    return 0.5f * x * (1.0f + cgc_erff(x * 0.70710678118654752f));
}

__device__ __forceinline__ float cgc_gelu_grad(float x)
{
    float cdf = 0.5f * (1.0f + cgc_erff(x * 0.70710678118654752f));
    float pdf = cgc_expf(-0.5f * x * x) * 0.39894228040143268f;
    return fmaf(x, pdf, cdf);
}

__device__ __forceinline__ float cgc_gelu_tanh(float x)
{
    float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

__device__ __forceinline__ float cgc_gelu_tanh_grad(float x)
{
    float k = 0.79788456080286536f;
    float t = tanhf(k * (x + 0.044715f * x * x * x));
    float du = k * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

__device__ __forceinline__ float cgc_silu_grad(float x)
{
    float s = cgc_sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}

/* DROPOUT's counter input as the unsigned count rng.h expects (exec.c's to_counter). */
__device__ __forceinline__ uint64_t cgc_to_counter(float x)
{
    if (!(x >= 0.0f)) return 0;
    if (x >= 18446744073709551615.0f) return 0xffffffffffffffffull;
    return (uint64_t)x;
}

/* ---- Philox-4x32-10 (base/rng.c) ---- */

enum { CGC_RNG_SHUFFLE = 2, CGC_RNG_DROPOUT = 16 };

__device__ __forceinline__ void cgc_philox(uint64_t seed, uint64_t stream, uint64_t counter,
                                           uint32_t out[4])
{
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

__device__ __forceinline__ float cgc_rng_uniform(uint64_t seed, uint64_t stream, uint64_t counter)
{
    uint32_t r[4];
    cgc_philox(seed, stream, counter, r);
    return (float)(r[0] >> 8) * (1.0f / 16777216.0f);
}

/* The high 64 bits of a * b (rng.c uses unsigned __int128). */
__device__ __forceinline__ uint64_t cgc_mulhi64(uint64_t a, uint64_t b)
{
#ifdef CGC_EMULATE
    uint64_t a_lo = (uint32_t)a, a_hi = a >> 32, b_lo = (uint32_t)b, b_hi = b >> 32;
    uint64_t p0 = a_lo * b_lo, p1 = a_lo * b_hi, p2 = a_hi * b_lo, p3 = a_hi * b_hi;
    uint64_t mid = (p0 >> 32) + (uint32_t)p1 + (uint32_t)p2;
    return p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
#else
    return __umul64hi(a, b);
#endif
}

__device__ __forceinline__ uint64_t cgc_rng_below(uint64_t seed, uint64_t stream, uint64_t counter,
                                                  uint64_t n)
{
    uint32_t r[4];
    cgc_philox(seed, stream, counter, r);
    uint64_t x = ((uint64_t)r[0] << 32) | r[1];
    return cgc_mulhi64(x, n);
}

/* rng_dropout_keep: element ELEMENT of dropout stream S at micro-step COUNTER survives. */
__device__ __forceinline__ bool cgc_dropout_keep(uint64_t seed, int s, uint64_t counter,
                                                 uint64_t element, float p)
{
    uint64_t stream = ((uint64_t)(CGC_RNG_DROPOUT + s) << 40) | (counter & ((1ull << 40) - 1));
    return cgc_rng_uniform(seed, stream, element) >= p;
}

/* ---- deterministic reductions ----
 * Each block function returns the block's result to every thread, and ends with a
 * barrier so that the next call may reuse its shared memory. */

__device__ __forceinline__ double cgc_warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float cgc_warp_max_nan(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = cgc_max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Plain max (a NaN is skipped unless it comes first), as softmax's row maximum. */
__device__ __forceinline__ float cgc_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

__device__ double cgc_block_sum(double v)
{
    __shared__ double part[32];
    __shared__ double total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = cgc_warp_sum(v);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = cgc_warp_sum(lane < nwarps ? part[lane] : 0.0);
        if (lane == 0) total = v;
    }
    __syncthreads();
    v = total;
    __syncthreads();
    return v;
}

/* V summed over the threads of the block in the same lane (threadIdx.x % 32): the
 * column sums of a tile 32 wide whose rows are the block's warps, each returned to its
 * column's threads. blockDim.x must be a multiple of 32. */
__device__ double cgc_column_sum(double v)
{
    __shared__ double part[32][32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    part[warp][lane] = v;
    __syncthreads();
    if (warp == 0) {
        double s = 0.0;
        for (int w = 0; w < nwarps; w++) s += part[w][lane];
        part[0][lane] = s;
    }
    __syncthreads();
    v = part[0][lane];
    __syncthreads();
    return v;
}

/* NAN_WINS: torch.amax's rule (MAX); otherwise softmax's plain maximum. */
__device__ float cgc_block_max(float v, bool nan_wins)
{
    __shared__ float part[32];
    __shared__ float total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = nan_wins ? cgc_warp_max_nan(v) : cgc_warp_max(v);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nwarps ? part[lane] : -CGC_INF;
        v = nan_wins ? cgc_warp_max_nan(v) : cgc_warp_max(v);
        if (lane == 0) total = v;
    }
    __syncthreads();
    v = total;
    __syncthreads();
    return v;
}

/* ---- tensor cores (the generated GEMMs of max-autotune; sm_80 and later) ----
 * One warp's D += A @ B for a 16x16 (A, row-major) by 16x8 (B, column-major) tile, in
 * f32, the fragments as the PTX ISA lays them out for mma.m16n8k16: with g = lane / 4
 * and t = lane % 4, lane holds
 *   a[0] = A[g][2t..2t+1]     a[1] = A[g+8][2t..2t+1]
 *   a[2] = A[g][2t+8..2t+9]   a[3] = A[g+8][2t+8..2t+9]
 *   b[0] = B[2t..2t+1][g]     b[1] = B[2t+8..2t+9][g]
 *   d[0..1] = D[g][2t..2t+1]  d[2..3] = D[g+8][2t..2t+1]
 * two 16-bit values per register, the lower index in the lower half. Every lane of the
 * warp must call it (mma.sync.aligned). BF16 picks the type of A and B. */
__device__ __forceinline__ void cgc_mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2],
                                              bool bf16)
{
#ifdef CGC_EMULATE
    cgc_emu_mma_16816(d, a, b, bf16);
#elif __CUDA_ARCH__ >= 800
    if (bf16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    __trap();   /* no such instruction before sm_80: max-autotune never offers these kernels */
#endif
}

/* Two 16-bit values as one fragment register, LO in the lower half. */
__device__ __forceinline__ uint32_t cgc_pair(unsigned short lo, unsigned short hi)
{
    return (uint32_t)lo | (uint32_t)hi << 16;
}

/* Fragment registers straight from shared memory (ldmatrix): N 8x8 matrices of 16-bit
 * values (N = 4 or 2, a constant at each call), matrix i's rows at the addresses lanes 8i
 * to 8i + 7 give as ROW (each 16-byte aligned; with N = 2 only lanes 0 to 15 give one).
 * Lane l receives in r[i] matrix i's row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 (the
 * lower column in the lower half); with TRANS its column l / 4, rows 2 (l % 4) and
 * 2 (l % 4) + 1: the pair a fragment takes from a tile whose k runs down the rows. One
 * instruction instead of a load (or two and a pack) per register. Every lane of the warp
 * must call it (ldmatrix.sync.aligned); sm_75 and later. */
__device__ __forceinline__ void cgc_ldmatrix(uint32_t *r, int n, const unsigned short *row, bool trans)
{
#ifdef CGC_EMULATE
    /* each lane reads its values itself, through the row addresses the others give; an
     * address the GPU would fault on (not 16-byte aligned) stops the emulation too */
    if ((uintptr_t)row % 16 != 0) cgc_emu_fault("ldmatrix: a row address not 16-byte aligned");
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    for (int i = 0; i < n; i++) {
        const int at = 8 * i + (trans ? 2 * t : g);
        const unsigned short *p = (const unsigned short *)(uintptr_t)__shfl_sync(
            0xffffffffu, (unsigned long long)(uintptr_t)row, at);
        const unsigned short *q = (const unsigned short *)(uintptr_t)__shfl_sync(
            0xffffffffu, (unsigned long long)(uintptr_t)row, at + 1);
        r[i] = trans ? cgc_pair(p[g], q[g]) : cgc_pair(p[2 * t], p[2 * t + 1]);
    }
#elif __CUDA_ARCH__ >= 750
    uint32_t at;
    asm volatile("{ .reg .u64 s; cvta.to.shared.u64 s, %1; cvt.u32.u64 %0, s; }" : "=r"(at) : "l"(row));
    if (n == 4 && trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
    else if (n == 4)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
    else if (trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                     : "=r"(r[0]), "=r"(r[1]) : "r"(at));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                     : "=r"(r[0]), "=r"(r[1]) : "r"(at));
#else
    __trap();
#endif
}

/* F32 values LO and HI rounded to f16 (or bf16 when BF16) as one fragment register, the
 * bits cgc_store would write: a fused MLP's layer output becoming the next one's input. */
__device__ __forceinline__ uint32_t cgc_pack2(float lo, float hi, bool bf16)
{
    return bf16 ? cgc_pair(cgc_bf16_bits(lo), cgc_bf16_bits(hi))
                : cgc_pair(cgc_f16_bits(lo), cgc_f16_bits(hi));
}

/* 16 bytes from global SRC to shared DST, asynchronously (cp.async.cg, sm_80), both
 * 16-byte aligned; zeros instead when !VALID (SRC is then not read). Complete once
 * cgc_cp_async_wait has returned for the group committed after it. */
__device__ __forceinline__ void cgc_cp_async16(void *dst, const void *src, bool valid)
{
#ifdef CGC_EMULATE
    cgc_emu_cp_async16(dst, src, valid);
#elif __CUDA_ARCH__ >= 800
    uint32_t to;
    asm volatile("{ .reg .u64 s; cvta.to.shared.u64 s, %1; cvt.u32.u64 %0, s; }"
                 : "=r"(to) : "l"(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"(to), "l"(src), "r"(valid ? 16 : 0) : "memory");
#else
    __trap();
#endif
}
/* Closes the group of copies issued since the last commit (a group may be empty). */
__device__ __forceinline__ void cgc_cp_async_commit()
{
#ifdef CGC_EMULATE
    cgc_emu_cp_async_commit();
#elif __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
/* Waits until at most the newest group is still in flight. */
__device__ __forceinline__ void cgc_cp_async_wait_prior()
{
#ifdef CGC_EMULATE
    cgc_emu_cp_async_wait(1);
#elif __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group 1;" ::: "memory");
#endif
}

/* Waits until every group has landed. */
__device__ __forceinline__ void cgc_cp_async_wait_all()
{
#ifdef CGC_EMULATE
    cgc_emu_cp_async_wait(0);
#elif __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group 0;" ::: "memory");
#endif
}

/* One stage of a GEMM operand: the tile [r0, r0 + R) x [c0, c0 + C) of the row-major
 * ROWS x COLS matrix SRC (16-bit values, rows LD apart) into shared DST[R][C + 8] (8
 * columns of padding keep rows 16-byte aligned and spread the fragments' reads over the
 * banks), zeros outside the matrix; the block's THREADS threads share the work. With
 * COLS and LD multiples of 8 every row starts 16-byte aligned (the arena aligns buffers
 * to 256), so each 8-value chunk is one cp.async, wholly inside or outside the matrix;
 * otherwise the values are copied one by one (synchronously: visible after the next
 * barrier like the rest). cgc_tile_load: rows COLS apart. */
template <int R, int C, int THREADS>
__device__ __forceinline__ void cgc_tile_load_ld(unsigned short (*dst)[C + 8], const unsigned short *src,
                                                 int64_t rows, int64_t cols, int64_t ld, int64_t r0,
                                                 int64_t c0)
{
    if (cols % 8 == 0 && ld % 8 == 0) {
        for (int i = threadIdx.x; i < R * C / 8; i += THREADS) {
            const int r = i / (C / 8), c = i % (C / 8) * 8;
            const bool in = r0 + r < rows && c0 + c < cols;
            cgc_cp_async16(&dst[r][c], in ? src + (r0 + r) * ld + c0 + c : src, in);
        }
    } else {
        for (int i = threadIdx.x; i < R * C; i += THREADS) {
            const int r = i / C, c = i % C;
            const bool in = r0 + r < rows && c0 + c < cols;
            dst[r][c] = in ? src[(r0 + r) * ld + c0 + c] : (unsigned short)0;
        }
    }
}

template <int R, int C, int THREADS>
__device__ __forceinline__ void cgc_tile_load(unsigned short (*dst)[C + 8], const unsigned short *src,
                                              int64_t rows, int64_t cols, int64_t r0, int64_t c0)
{
    cgc_tile_load_ld<R, C, THREADS>(dst, src, rows, cols, cols, r0, c0);
}

/* One stage of a GEMM operand kept in the language's NCHW: the tile [r0, r0 + R) x
 * [q0, q0 + C) of the row-major ROWS x COLS matrix whose entry (r, q) is X[n, q, l] for
 * r = n*SPOTS + l (a convolution's channels-last [N*OH*OW, channels] from its NCHW
 * [N, channels, OH*OW]; 16-bit values, zeros past the matrix) into shared DST[R][C + 8],
 * as cgc_tile_load lays it out, value by value, neighbouring threads reading neighbouring
 * positions l (contiguous in X); visible after the next barrier. */
template <int R, int C, int THREADS>
__device__ __forceinline__ void cgc_nchw_load(unsigned short (*dst)[C + 8], const unsigned short *x,
                                              int64_t spots, int64_t rows, int64_t cols, int64_t r0,
                                              int64_t q0)
{
    for (int i = threadIdx.x; i < R * C; i += THREADS) {
        const int r = i % R, q = i / R;
        const int64_t row = r0 + r, col = q0 + q;
        dst[r][q] = row < rows && col < cols ? x[(row / spots * cols + col) * spots + row % spots]
                                             : (unsigned short)0;
    }
}

/* A convolution's patches (UNFOLD into rows, groups 1) as an implicit GEMM operand: the
 * row-major matrix of N*OH*OW rows and C*KH*KW columns whose entry (r, q), with
 * r = (n*OH + oh)*OW + ow and q = (c*KH + kh)*KW + kw, is the image's
 * x[n, c, oh*SH - PH + kh*DH, ow*SW - PW + kw*DW], and 0 outside the image. */
struct cgc_window {
    int64_t c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
};

/* One stage of an implicit GEMM's operand: the tile [r0, r0 + R) x [q0, q0 + C) of the
 * patches of image X (16-bit values; ROWS x COLS, zeros past them) into shared
 * DST[R][C + 8], as cgc_tile_load lays it out, gathered value by value (the entries of a
 * patch row are not contiguous in the image), so visible after the next barrier. */
template <int R, int C, int THREADS>
__device__ __forceinline__ void cgc_patch_load(unsigned short (*dst)[C + 8], const unsigned short *x,
                                               const cgc_window &g, int64_t rows, int64_t cols,
                                               int64_t r0, int64_t q0)
{
    for (int i = threadIdx.x; i < R * C; i += THREADS) {
        const int r = i / C, q = i % C;
        unsigned short v = 0;
        if (r0 + r < rows && q0 + q < cols) {
            const int64_t l = (r0 + r) % (g.oh * g.ow), img = (r0 + r) / (g.oh * g.ow);
            const int64_t k = (q0 + q) % (g.kh * g.kw), c = (q0 + q) / (g.kh * g.kw);
            const int64_t h = l / g.ow * g.sh - g.ph + k / g.kw * g.dh;
            const int64_t w = l % g.ow * g.sw - g.pw + k % g.kw * g.dw;
            if (h >= 0 && h < g.h && w >= 0 && w < g.w) v = x[((img * g.c + c) * g.h + h) * g.w + w];
        }
        dst[r][q] = v;
    }
}

/* ---- attention (codegen/attention.c) ----
 * Q, K, V, O and their gradients are bh heads of t rows of D (CgcHead: each head's rows
 * consecutive, or a linear layer's [N, t, H, D] read as heads in place), lse and the
 * rows' deltas [bh, t]. A block is 128 threads over a tile of rows (queries, or keys
 * in the backward's key blocks), 128 / rows threads a row: a row's scores are spread over
 * its threads (combined by shuffles within the warp), and so are its D outputs. Tiles of
 * Q, K, V and dO are staged in shared memory as f32 (a padded row apart, so that a
 * row's threads reading down a column hit different banks); the math is f32, and each
 * stored value is rounded once. Grid-stride over the items (tiles of every head). Keys
 * past t, or past the query under CAUSAL, weigh nothing, and whole tiles past the
 * diagonal are never loaded. */
__device__ __forceinline__ int64_t cgc_min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* How the heads of each operand of an attention kernel interleave: 1 where a head's rows
 * are consecutive ([bh, t, D]), H where the kernel reads or writes a linear layer's
 * [N, t, H, D] in place, the permute to heads skipped (a position's H heads side by side). */
struct CgcAttnHeads {
    int64_t q, k, v, o, dout, dq, dk, dv;
};

/* One head of an operand: row r at p + r * ld. */
template <typename T>
struct CgcHead {
    T *p;
    int64_t ld;
};

/* Head B of X (T rows of D per head) whose heads interleave HS to a position. */
template <typename T>
__device__ __forceinline__ CgcHead<T> cgc_head(T *x, int64_t b, int64_t hs, int64_t t, int d)
{
    CgcHead<T> h = { x + (b / hs) * t * hs * d + (b % hs) * d, hs * d };
    return h;
}

/* ROWS rows of head X from row FIRST into DST (f32), zero past row T. */
template <int ROWS, int D, typename T>
__device__ __forceinline__ void cgc_rows_load(float (*dst)[D + 1], CgcHead<const T> x, int64_t first, int64_t t)
{
    for (int i = threadIdx.x; i < ROWS * D; i += blockDim.x) {
        int r = i / D, c = i % D;
        dst[r][c] = first + r < t ? cgc_load(x.p[(first + r) * x.ld + c]) : 0.0f;
    }
}

/* The sum over the TPR threads of a row (consecutive lanes). */
template <int TPR>
__device__ __forceinline__ float cgc_row_sum(float v)
{
    for (int w = TPR / 2; w > 0; w /= 2) v += __shfl_xor_sync(0xffffffffu, v, w);
    return v;
}

template <int TPR>
__device__ __forceinline__ float cgc_row_max(float v)
{
    for (int w = TPR / 2; w > 0; w /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, w));
    return v;
}

/* The forward, for a tile of BQ queries: keys and values BK at a time, S = scale Q K^T,
 * P = exp(S - m) with the row's running maximum m and sum l (an online softmax), the
 * accumulated P V rescaled by exp(m_old - m) whenever m grows; O = (P V) / l and
 * lse = m + log l. */
template <int D, int BQ, int BK, bool CAUSAL, typename TI, typename TO>
__device__ void cgc_attention_forward(TO *o, float *lse, const TI *q, const TI *k, const TI *v,
                                      CgcAttnHeads hs, int64_t bh, int64_t t, float scale)
{
    enum { TPR = 128 / BQ, SC = BK / TPR, OC = (D + TPR - 1) / TPR };
    __shared__ float qs[BQ][D + 1], ks[BK][D + 1], vs[BK][D + 1], ps[BQ][BK + 1];
    const int row = threadIdx.x / TPR, sub = threadIdx.x % TPR;
    const int64_t tiles = (t + BQ - 1) / BQ;
    for (int64_t item = blockIdx.x; item < bh * tiles; item += gridDim.x) {
        const int64_t b = item / tiles, q0 = item % tiles * BQ, query = q0 + row;
        const CgcHead<const TI> qh = cgc_head(q, b, hs.q, t, D), kh = cgc_head(k, b, hs.k, t, D);
        const CgcHead<const TI> vh = cgc_head(v, b, hs.v, t, D);
        const CgcHead<TO> oh = cgc_head(o, b, hs.o, t, D);
        __syncthreads();   /* the last item is done with qs */
        cgc_rows_load<BQ, D>(qs, qh, q0, t);
        float m = -CGC_INF, l = 0, acc[OC];
        for (int j = 0; j < OC; j++) acc[j] = 0;
        for (int64_t k0 = 0; k0 < (CAUSAL ? cgc_min64(t, q0 + BQ) : t); k0 += BK) {
            __syncthreads();   /* the last tile is done with ks, vs and ps */
            cgc_rows_load<BK, D>(ks, kh, k0, t);
            cgc_rows_load<BK, D>(vs, vh, k0, t);
            __syncthreads();
            float s[SC], top = -CGC_INF;
            for (int j = 0; j < SC; j++) {
                int c = sub + j * TPR;
                float dot = 0;
                for (int e = 0; e < D; e++) dot += qs[row][e] * ks[c][e];
                bool keep = k0 + c < t && (!CAUSAL || k0 + c <= query);
                s[j] = keep ? dot * scale : -CGC_INF;
                top = fmaxf(top, s[j]);
            }
            float m_new = fmaxf(m, cgc_row_max<TPR>(top));   /* -inf: no key yet */
            float alpha = m_new == -CGC_INF ? 1.0f : expf(m - m_new), sum = 0;
            for (int j = 0; j < SC; j++) {
                float p = s[j] == -CGC_INF ? 0.0f : expf(s[j] - m_new);
                ps[row][sub + j * TPR] = p;
                sum += p;
            }
            l = l * alpha + cgc_row_sum<TPR>(sum);
            m = m_new;
            __syncthreads();   /* every row's P is in ps */
            for (int j = 0; j < OC; j++) {
                int c = sub + j * TPR;
                float a = acc[j] * alpha;
                for (int e = 0; e < BK && c < D; e++) a += ps[row][e] * vs[e][c];
                acc[j] = a;
            }
        }
        for (int j = 0; j < OC && query < t; j++)
            if (sub + j * TPR < D) cgc_store(&oh.p[query * oh.ld + sub + j * TPR], acc[j] / l);
        if (query < t && sub == 0) lse[b * t + query] = m + logf(l);
    }
}

/* The forward on tensor cores, for f16 or bf16 operands (BF16 says which): four warps of 16 queries each (64 a tile), the queries' fragments kept in
 * registers for the whole tile; S = Q K^T by mma.sync, its accumulators scaled to log2
 * units in place (a row's values spread over a quad of lanes: rows g and g + 8 of the
 * warp's 16) and masked in the tiles that reach past T or across the diagonal only, the
 * online softmax on them in exp2 (one MUFU instruction, where expf takes several), P rounded to the operands' type as the A
 * fragments of O += P V straight from those accumulators (the layouts agree), V's
 * fragments read transposed. The head width is padded to 16 with zeros. */
template <int D, int BK, bool CAUSAL, bool BF16, typename TO>
__device__ void cgc_attention_forward_tc(TO *o, float *lse, const unsigned short *q,
                                         const unsigned short *k, const unsigned short *v,
                                         CgcAttnHeads hs, int64_t bh, int64_t t, float scale)
{
    enum { BQ = 64, DP = (D + 15) / 16 * 16, KS = DP / 16, NT = BK / 8, OT = DP / 8 };
    const float scale2 = scale * CGC_LOG2E;   /* the scores in log2 units: exp2 is one instruction */
    /* two stages of keys and values where 48 KiB hold them: the next tile's copies run
     * while the warps compute on this one */
    enum { STAGES = (BQ + 4 * BK) * (DP + 8) * 2 <= 48 * 1024 ? 2 : 1 };
    __shared__ __align__(16) unsigned short qs[BQ][DP + 8], ks[STAGES][BK][DP + 8], vs[STAGES][BK][DP + 8];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const int64_t tiles = (t + BQ - 1) / BQ;
    for (int64_t item = blockIdx.x; item < bh * tiles; item += gridDim.x) {
        const int64_t b = item / tiles, q0 = item % tiles * BQ, end = CAUSAL ? cgc_min64(t, q0 + BQ) : t;
        const int64_t rows[2] = { q0 + warp * 16 + g, q0 + warp * 16 + g + 8 };
        const CgcHead<const unsigned short> qh = cgc_head(q, b, hs.q, t, D), kh = cgc_head(k, b, hs.k, t, D);
        const CgcHead<const unsigned short> vh = cgc_head(v, b, hs.v, t, D);
        const CgcHead<TO> oh = cgc_head(o, b, hs.o, t, D);
        __syncthreads();   /* the last item is done with qs, ks and vs */
        cgc_tile_load_ld<BQ, DP, 128>(qs, qh.p, t, D, qh.ld, q0, 0);
        cgc_tile_load_ld<BK, DP, 128>(ks[0], kh.p, t, D, kh.ld, 0, 0);
        cgc_tile_load_ld<BK, DP, 128>(vs[0], vh.p, t, D, vh.ld, 0, 0);
        cgc_cp_async_commit();
        cgc_cp_async_wait_all();
        __syncthreads();
        uint32_t qa[KS][4];
        for (int kk = 0; kk < KS; kk++)
            cgc_ldmatrix(qa[kk], 4, &qs[warp * 16 + lane % 16][kk * 16 + lane / 16 * 8], false);
        float m[2] = { -CGC_INF, -CGC_INF }, l[2] = { 0, 0 }, acc[OT][4];
        for (int dj = 0; dj < OT; dj++) acc[dj][0] = acc[dj][1] = acc[dj][2] = acc[dj][3] = 0;
        /* at the top of each tile its keys and values are in stage st, and no warp reads
         * the other stage any more */
        for (int64_t k0 = 0, st = 0; k0 < end; k0 += BK, st = (st + 1) % STAGES) {
            const bool next = k0 + BK < end;
            if (STAGES == 2 && next) {
                cgc_tile_load_ld<BK, DP, 128>(ks[st ^ 1], kh.p, t, D, kh.ld, k0 + BK, 0);
                cgc_tile_load_ld<BK, DP, 128>(vs[st ^ 1], vh.p, t, D, vh.ld, k0 + BK, 0);
                cgc_cp_async_commit();
            }
            /* only a tile past T or across the diagonal masks: the others' keys all count */
            const bool edge = k0 + BK > t || (CAUSAL && k0 + BK - 1 > q0);
            float s[NT][4], top[2] = { -CGC_INF, -CGC_INF }, sum[2] = { 0, 0 };
            for (int j = 0; j < NT; j++) {
                s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0;
                for (int kk = 0; kk < KS; kk++) {
                    uint32_t kb[2];
                    cgc_ldmatrix(kb, 2, &ks[st][j * 8 + lane % 8][kk * 16 + lane / 8 % 2 * 8], false);
                    cgc_mma_16816(s[j], qa[kk], kb, BF16);
                }
                for (int e = 0; e < 4; e++) {
                    float x = s[j][e] * scale2;
                    if (edge) {
                        const int64_t key = k0 + j * 8 + 2 * tq + e % 2;
                        x = key < t && (!CAUSAL || key <= rows[e / 2]) ? x : -CGC_INF;
                    }
                    s[j][e] = x;
                    top[e / 2] = fmaxf(top[e / 2], x);
                }
            }
            float alpha[2], base[2];
            for (int h = 0; h < 2; h++) {
                const float m_new = fmaxf(m[h], cgc_row_max<4>(top[h]));   /* -inf: no key yet */
                alpha[h] = m_new == -CGC_INF ? 1.0f : exp2f(m[h] - m_new);
                base[h] = m_new == -CGC_INF ? 0.0f : m_new;   /* exp2(-inf - base) is 0 */
                m[h] = m_new;
            }
            for (int j = 0; j < NT; j++)
                for (int e = 0; e < 4; e++) {
                    s[j][e] = exp2f(s[j][e] - base[e / 2]);
                    sum[e / 2] += s[j][e];
                }
            for (int h = 0; h < 2; h++) l[h] = l[h] * alpha[h] + cgc_row_sum<4>(sum[h]);
            for (int dj = 0; dj < OT; dj++)
                for (int e = 0; e < 4; e++) acc[dj][e] *= alpha[e / 2];
            for (int kk = 0; kk < NT / 2; kk++) {
                const uint32_t pa[4] = { cgc_pack2(s[2 * kk][0], s[2 * kk][1], BF16),
                                         cgc_pack2(s[2 * kk][2], s[2 * kk][3], BF16),
                                         cgc_pack2(s[2 * kk + 1][0], s[2 * kk + 1][1], BF16),
                                         cgc_pack2(s[2 * kk + 1][2], s[2 * kk + 1][3], BF16) };
                for (int dj = 0; dj < OT; dj++) {
                    uint32_t vb[2];
                    cgc_ldmatrix(vb, 2, &vs[st][kk * 16 + lane % 16][dj * 8], true);
                    cgc_mma_16816(acc[dj], pa, vb, BF16);
                }
            }
            if (next) {
                if (STAGES == 1) {
                    __syncthreads();   /* every warp is done with this tile */
                    cgc_tile_load_ld<BK, DP, 128>(ks[0], kh.p, t, D, kh.ld, k0 + BK, 0);
                    cgc_tile_load_ld<BK, DP, 128>(vs[0], vh.p, t, D, vh.ld, k0 + BK, 0);
                    cgc_cp_async_commit();
                }
                cgc_cp_async_wait_all();
                __syncthreads();   /* the next tile is in; every warp is done with this one */
            }
        }
        for (int dj = 0; dj < OT; dj++)
            for (int e = 0; e < 4; e++) {
                const int64_t row = rows[e / 2];
                const int col = dj * 8 + 2 * tq + e % 2;
                if (row < t && col < D) cgc_store(&oh.p[row * oh.ld + col], acc[dj][e] / l[e / 2]);
            }
        for (int h = 0; h < 2 && tq == 0; h++)   /* m in log2 units */
            if (rows[h] < t) lse[b * t + rows[h]] = m[h] * CGC_LN2 + logf(l[h]);
    }
}

template <typename T> struct CgcIsBf16 { enum { value = 0 }; };
template <> struct CgcIsBf16<cgc_bf16> { enum { value = 1 }; };

/* The forward of f16 or bf16 operands (the tensor cores take their 16-bit patterns). */
template <int D, int BK, bool CAUSAL, typename TI, typename TO>
__device__ void cgc_attention_forward_half(TO *o, float *lse, const TI *q, const TI *k, const TI *v,
                                           CgcAttnHeads hs, int64_t bh, int64_t t, float scale)
{
    cgc_attention_forward_tc<D, BK, CAUSAL, CgcIsBf16<TI>::value>(
        o, lse, (const unsigned short *)q, (const unsigned short *)k, (const unsigned short *)v, hs, bh,
        t, scale);
}

/* The lse (times UNIT: 1, or log2 e for exp2) and delta (the sum of dO O, which is that
 * of dP P: O = P V) of BT rows from FIRST, zero past T: a warp a row, its lanes along the
 * row (coalesced), then summed across the warp. Every thread of the block takes part. */
template <int BT, int D, typename TO, typename TD>
__device__ __forceinline__ void cgc_rows_stats(float *lses, float *deltas, const float *lse,
                                               CgcHead<const TO> o, CgcHead<const TD> dout,
                                               int64_t first, int64_t t, float unit)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int r = warp; r < BT; r += blockDim.x / 32) {
        const int64_t row = first + r;
        float d = 0;
        for (int e = lane; e < D && row < t; e += 32)
            d += cgc_load(dout.p[row * dout.ld + e]) * cgc_load(o.p[row * o.ld + e]);
        d = cgc_row_sum<32>(d);
        if (lane == 0) {
            lses[r] = row < t ? lse[row] * unit : 0.0f;
            deltas[r] = d;
        }
    }
}

/* The other side's rows that a backward block of ROWS rows from R0 runs over, [FROM, TO):
 * under CAUSAL a key block's queries from its first key on, a query block's keys up to
 * its last query; else all T. */
template <bool CAUSAL>
__device__ __forceinline__ void cgc_attention_backward_span(bool keys, int64_t r0, int64_t rows,
                                                            int64_t t, int64_t *from, int64_t *to)
{
    *from = keys && CAUSAL ? r0 : 0;
    *to = !keys && CAUSAL ? cgc_min64(t, r0 + rows) : t;
}

/* The backward, deterministic (no atomics): items [0, bh * tiles) are key blocks, each
 * holding BT keys and values of a head and running down the query tiles from its
 * diagonal, summing dV = P^T dO and dK = scale dS^T Q; the items after are query
 * blocks, each holding BT queries and running along the key tiles up to its diagonal,
 * summing dQ = scale dS K. Each recomputes P = exp(S - lse), dP = dO V^T and
 * dS = P (dP - delta). */
template <int D, int BT, bool CAUSAL, typename TI, typename TO, typename TD, typename TG>
__device__ void cgc_attention_backward(TG *dq, TG *dk, TG *dv, const TI *q, const TI *k,
                                       const TI *v, const TO *o, const TD *dout,
                                       const float *lse, CgcAttnHeads hs, int64_t bh, int64_t t,
                                       float scale)
{
    enum { TPR = 128 / BT, SC = BT / TPR, OC = (D + TPR - 1) / TPR };
    __shared__ float qs[BT][D + 1], dos[BT][D + 1], ks[BT][D + 1], vs[BT][D + 1];
    __shared__ float ps[BT][BT + 1], dss[BT][BT + 1], lses[BT], deltas[BT];
    const int row = threadIdx.x / TPR, sub = threadIdx.x % TPR;
    const int64_t tiles = (t + BT - 1) / BT;
    for (int64_t item = blockIdx.x; item < 2 * bh * tiles; item += gridDim.x) {
        const bool keys = item < bh * tiles;
        const int64_t it = keys ? item : item - bh * tiles;
        const int64_t b = it / tiles, r0 = it % tiles * BT, mine = r0 + row;
        const CgcHead<const TI> qh = cgc_head(q, b, hs.q, t, D), kh = cgc_head(k, b, hs.k, t, D);
        const CgcHead<const TI> vh = cgc_head(v, b, hs.v, t, D);
        const CgcHead<const TO> oh = cgc_head(o, b, hs.o, t, D);
        const CgcHead<const TD> doh = cgc_head(dout, b, hs.dout, t, D);
        const CgcHead<TG> dqh = cgc_head(dq, b, hs.dq, t, D), dkh = cgc_head(dk, b, hs.dk, t, D);
        const CgcHead<TG> dvh = cgc_head(dv, b, hs.dv, t, D);
        float acc[2][OC];
        for (int j = 0; j < OC; j++) acc[0][j] = acc[1][j] = 0;
        __syncthreads();   /* the last item is done with the tiles */
        if (keys) {
            cgc_rows_load<BT, D>(ks, kh, r0, t);
            cgc_rows_load<BT, D>(vs, vh, r0, t);
        } else {
            cgc_rows_load<BT, D>(qs, qh, r0, t);
            cgc_rows_load<BT, D>(dos, doh, r0, t);
            cgc_rows_stats<BT, D>(lses, deltas, lse + b * t, oh, doh, r0, t, 1.0f);
        }
        int64_t from, to;
        cgc_attention_backward_span<CAUSAL>(keys, r0, BT, t, &from, &to);
        for (int64_t c0 = from; c0 < to; c0 += BT) {
            __syncthreads();   /* the last tile is done with the other side's rows */
            if (keys) {
                cgc_rows_load<BT, D>(qs, qh, c0, t);
                cgc_rows_load<BT, D>(dos, doh, c0, t);
                cgc_rows_stats<BT, D>(lses, deltas, lse + b * t, oh, doh, c0, t, 1.0f);
            } else {
                cgc_rows_load<BT, D>(ks, kh, c0, t);
                cgc_rows_load<BT, D>(vs, vh, c0, t);
            }
            __syncthreads();
            for (int j = 0; j < SC; j++) {
                int c = sub + j * TPR, qi = keys ? c : row, ki = keys ? row : c;
                int64_t query = keys ? c0 + c : mine, key = keys ? mine : c0 + c;
                float s = 0, dp = 0;
                for (int e = 0; e < D; e++) s += qs[qi][e] * ks[ki][e], dp += dos[qi][e] * vs[ki][e];
                bool keep = key < t && query < t && (!CAUSAL || key <= query);
                float p = keep ? expf(s * scale - lses[qi]) : 0.0f;
                ps[row][c] = p;
                dss[row][c] = p * (dp - deltas[qi]);
            }
            __syncthreads();   /* every row's P and dS are in ps and dss */
            for (int j = 0; j < OC; j++) {
                int e = sub + j * TPR;
                for (int c = 0; c < BT && e < D; c++) {
                    if (keys) acc[0][j] += dss[row][c] * qs[c][e], acc[1][j] += ps[row][c] * dos[c][e];
                    else acc[0][j] += dss[row][c] * ks[c][e];
                }
            }
        }
        for (int j = 0; j < OC && mine < t; j++) {
            int e = sub + j * TPR;
            if (e >= D) continue;
            if (keys) {
                cgc_store(&dkh.p[mine * dkh.ld + e], acc[0][j] * scale);
                cgc_store(&dvh.p[mine * dvh.ld + e], acc[1][j]);
            } else {
                cgc_store(&dqh.p[mine * dqh.ld + e], acc[0][j] * scale);
            }
        }
    }
}

/* One warp's 16 x (8 NT) product tile ACC = A B^T over the padded head width, A's 16 rows
 * from A_ROWS (16 rows of [.][DP + 8]), B's 8 NT rows from B_ROWS, both [row][d]: the
 * scores (Q K^T, or K Q^T) and their gradients (dO V^T, V dO^T) of the backward. */
template <int DP, int NT, bool BF16>
__device__ __forceinline__ void cgc_tc_rows_dot(float (*acc)[4], const unsigned short (*a_rows)[DP + 8],
                                                const unsigned short (*b_rows)[DP + 8])
{
    const int lane = threadIdx.x % 32;
    for (int j = 0; j < NT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0;
    for (int kk = 0; kk < DP / 16; kk++) {
        uint32_t a[4];
        cgc_ldmatrix(a, 4, &a_rows[lane % 16][kk * 16 + lane / 16 * 8], false);
        for (int j = 0; j < NT; j++) {
            uint32_t b[2];
            cgc_ldmatrix(b, 2, &b_rows[j * 8 + lane % 8][kk * 16 + lane / 8 % 2 * 8], false);
            cgc_mma_16816(acc[j], a, b, BF16);
        }
    }
}

/* OUT (16 x DP, OT = DP / 8 tiles) += X B, X (16 x 8 NT) in accumulator layout rounded to
 * the operands' type as A fragments, B (8 NT x DP) the rows B_ROWS [k][d] read transposed:
 * dV += P^T dO, dK += dS^T Q, dQ += dS K. */
template <int DP, int NT, bool BF16>
__device__ __forceinline__ void cgc_tc_acc_product(float (*out)[4], const float (*x)[4],
                                                   const unsigned short (*b_rows)[DP + 8])
{
    const int lane = threadIdx.x % 32;
    for (int kk = 0; kk < NT / 2; kk++) {
        const uint32_t a[4] = { cgc_pack2(x[2 * kk][0], x[2 * kk][1], BF16),
                                cgc_pack2(x[2 * kk][2], x[2 * kk][3], BF16),
                                cgc_pack2(x[2 * kk + 1][0], x[2 * kk + 1][1], BF16),
                                cgc_pack2(x[2 * kk + 1][2], x[2 * kk + 1][3], BF16) };
        for (int dj = 0; dj < DP / 8; dj++) {
            uint32_t b[2];
            cgc_ldmatrix(b, 2, &b_rows[kk * 16 + lane % 16][dj * 8], true);
            cgc_mma_16816(out[dj], a, b, BF16);
        }
    }
}

/* The backward on tensor cores, for f16 or bf16 operands, as the SIMT one divides it: a key block's four warps hold 16 keys each (64 a tile) and run over the
 * query tiles of BC from the diagonal, S^T = K Q^T and dP^T = V dO^T by mma.sync, P^T
 * and dS^T made in the accumulators, then dV += P^T dO and dK += dS^T Q with those as A
 * fragments; a query block's warps hold 16 queries each and run over the key tiles up
 * to the diagonal, S = Q K^T, dP = dO V^T, dQ += dS K. The tiles of their own rows and
 * the other side's stay in shared memory, read by ldmatrix (transposed where k runs down
 * the rows), so no product needs a transpose of its own. */
template <int D, int BC, bool CAUSAL, bool BF16, typename TO, typename TD, typename TG>
__device__ void cgc_attention_backward_tc(TG *dq, TG *dk, TG *dv, const unsigned short *q,
                                          const unsigned short *k, const unsigned short *v,
                                          const TO *o, const TD *dout, const float *lse,
                                          CgcAttnHeads hs, int64_t bh, int64_t t, float scale)
{
    enum { BR = 64, DP = (D + 15) / 16 * 16, NT = BC / 8, OT = DP / 8 };
    const float scale2 = scale * CGC_LOG2E;   /* exp2, one instruction, as the forward */
    __shared__ __align__(16) unsigned short own1[BR][DP + 8], own2[BR][DP + 8];
    __shared__ __align__(16) unsigned short oth1[BC][DP + 8], oth2[BC][DP + 8];
    __shared__ float lses[BR > BC ? BR : BC], deltas[BR > BC ? BR : BC];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const int64_t tiles = (t + BR - 1) / BR;
    for (int64_t item = blockIdx.x; item < 2 * bh * tiles; item += gridDim.x) {
        const bool keys = item < bh * tiles;
        const int64_t it = keys ? item : item - bh * tiles;
        const int64_t b = it / tiles, r0 = it % tiles * BR;
        const int64_t mine[2] = { r0 + warp * 16 + g, r0 + warp * 16 + g + 8 };
        const CgcHead<const unsigned short> qh = cgc_head(q, b, hs.q, t, D), kh = cgc_head(k, b, hs.k, t, D);
        const CgcHead<const unsigned short> vh = cgc_head(v, b, hs.v, t, D);
        const CgcHead<const unsigned short> dh = cgc_head((const unsigned short *)dout, b, hs.dout, t, D);
        const CgcHead<const TO> oh = cgc_head(o, b, hs.o, t, D);
        const CgcHead<const TD> doh = cgc_head(dout, b, hs.dout, t, D);
        const CgcHead<TG> dqh = cgc_head(dq, b, hs.dq, t, D), dkh = cgc_head(dk, b, hs.dk, t, D);
        const CgcHead<TG> dvh = cgc_head(dv, b, hs.dv, t, D);
        const CgcHead<const unsigned short> mine1 = keys ? kh : qh, mine2 = keys ? vh : dh;
        const CgcHead<const unsigned short> other1 = keys ? qh : kh, other2 = keys ? dh : vh;
        float acc[2][OT][4];
        for (int dj = 0; dj < OT; dj++)
            for (int e = 0; e < 4; e++) acc[0][dj][e] = acc[1][dj][e] = 0;
        __syncthreads();   /* the last item is done with the tiles */
        cgc_tile_load_ld<BR, DP, 128>(own1, mine1.p, t, D, mine1.ld, r0, 0);
        cgc_tile_load_ld<BR, DP, 128>(own2, mine2.p, t, D, mine2.ld, r0, 0);
        cgc_cp_async_commit();   /* waited for with the first tile of the other side */
        if (!keys) cgc_rows_stats<BR, D>(lses, deltas, lse + b * t, oh, doh, r0, t, CGC_LOG2E);
        int64_t from, to;
        cgc_attention_backward_span<CAUSAL>(keys, r0, BR, t, &from, &to);
        for (int64_t c0 = from; c0 < to; c0 += BC) {
            __syncthreads();   /* the last tile is done with the other side's rows */
            cgc_tile_load_ld<BC, DP, 128>(oth1, other1.p, t, D, other1.ld, c0, 0);
            cgc_tile_load_ld<BC, DP, 128>(oth2, other2.p, t, D, other2.ld, c0, 0);
            if (keys) cgc_rows_stats<BC, D>(lses, deltas, lse + b * t, oh, doh, c0, t, CGC_LOG2E);
            cgc_cp_async_commit();
            cgc_cp_async_wait_all();
            __syncthreads();
            float s[NT][4], dp[NT][4];
            cgc_tc_rows_dot<DP, NT, BF16>(s, &own1[warp * 16], oth1);    /* S or S^T */
            cgc_tc_rows_dot<DP, NT, BF16>(dp, &own2[warp * 16], oth2);   /* dP or dP^T */
            /* only a tile with rows past T or across the diagonal masks */
            const bool edge = r0 + BR > t || c0 + BC > t ||
                              (CAUSAL && (keys ? r0 + BR - 1 > c0 : c0 + BC - 1 > r0));
            for (int j = 0; j < NT; j++)
                for (int e = 0; e < 4; e++) {
                    const int qi = keys ? j * 8 + 2 * tq + e % 2 : warp * 16 + g + e / 2 * 8;
                    float p = exp2f(s[j][e] * scale2 - lses[qi]);   /* lses in log2 units */
                    if (edge) {
                        const int64_t col = c0 + j * 8 + 2 * tq + e % 2, row = mine[e / 2];
                        const int64_t query = keys ? col : row, key = keys ? row : col;
                        p = key < t && query < t && (!CAUSAL || key <= query) ? p : 0.0f;
                    }
                    s[j][e] = p;
                    dp[j][e] = p * (dp[j][e] - deltas[qi]);
                }
            if (keys) {
                cgc_tc_acc_product<DP, NT, BF16>(acc[1], s, oth2);    /* dV += P^T dO */
                cgc_tc_acc_product<DP, NT, BF16>(acc[0], dp, oth1);   /* dK += dS^T Q */
            } else {
                cgc_tc_acc_product<DP, NT, BF16>(acc[0], dp, oth1);   /* dQ += dS K */
            }
        }
        for (int dj = 0; dj < OT; dj++)
            for (int e = 0; e < 4; e++) {
                const int64_t row = mine[e / 2];
                const int col = dj * 8 + 2 * tq + e % 2;
                if (row >= t || col >= D) continue;
                if (keys) {
                    cgc_store(&dkh.p[row * dkh.ld + col], acc[0][dj][e] * scale);
                    cgc_store(&dvh.p[row * dvh.ld + col], acc[1][dj][e]);
                } else {
                    cgc_store(&dqh.p[row * dqh.ld + col], acc[0][dj][e] * scale);
                }
            }
    }
}

/* The backward of f16 or bf16 operands (the tensor cores take their 16-bit patterns). */
template <int D, int BC, bool CAUSAL, typename TI, typename TO, typename TD, typename TG>
__device__ void cgc_attention_backward_half(TG *dq, TG *dk, TG *dv, const TI *q, const TI *k,
                                            const TI *v, const TO *o, const TD *dout,
                                            const float *lse, CgcAttnHeads hs, int64_t bh, int64_t t,
                                            float scale)
{
    cgc_attention_backward_tc<D, BC, CAUSAL, CgcIsBf16<TI>::value>(
        dq, dk, dv, (const unsigned short *)q, (const unsigned short *)k, (const unsigned short *)v,
        o, dout, lse, hs, bh, t, scale);
}

#endif
