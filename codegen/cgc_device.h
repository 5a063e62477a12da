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
 *   - the scalar functions of exec_impl.h (sigmoid, gelu, their gradients);
 *   - deterministic warp and block reductions: a fixed shuffle tree, then the warps'
 *     partials combined in warp order by warp 0. No atomics;
 *   - the tensor-core pieces of the generated GEMMs and fused MLPs (max-autotune): one
 *     warp's mma.sync m16n8k16 with f32 accumulation, its fragments read from shared
 *     memory by ldmatrix, asynchronous 16-byte copies to shared memory (cp.async) and
 *     the tile loader built on them. sm_80 and later; the
 *     emulation gives the same fragments the same meaning (tests/emu/cuda_emu.h).
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

/* Grid-stride loops: for (int64_t i = cgc_thread_index(); i < n; i += cgc_thread_count()) */
__device__ __forceinline__ int64_t cgc_thread_index()
{
    return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t cgc_thread_count() { return (int64_t)gridDim.x * blockDim.x; }

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

__device__ __forceinline__ float cgc_gelu(float x)
{
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

__device__ __forceinline__ float cgc_gelu_grad(float x)
{
    float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    float pdf = expf(-0.5f * x * x) * 0.39894228040143268f;
    return cdf + x * pdf;
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
 * ROWS x COLS matrix SRC (16-bit values) into shared DST[R][C + 8] (8 columns of
 * padding keep rows 16-byte aligned and spread the fragments' reads over the banks),
 * zeros outside the matrix; the block's THREADS threads share the work. With COLS a
 * multiple of 8 every row starts 16-byte aligned (the arena aligns buffers to 256), so
 * each 8-value chunk is one cp.async, wholly inside or outside the matrix; otherwise the
 * values are copied one by one (synchronously: visible after the next barrier like the
 * rest). */
template <int R, int C, int THREADS>
__device__ __forceinline__ void cgc_tile_load(unsigned short (*dst)[C + 8], const unsigned short *src,
                                              int64_t rows, int64_t cols, int64_t r0, int64_t c0)
{
    if (cols % 8 == 0) {
        for (int i = threadIdx.x; i < R * C / 8; i += THREADS) {
            const int r = i / (C / 8), c = i % (C / 8) * 8;
            const bool in = r0 + r < rows && c0 + c < cols;
            cgc_cp_async16(&dst[r][c], in ? src + (r0 + r) * cols + c0 + c : src, in);
        }
    } else {
        for (int i = threadIdx.x; i < R * C; i += THREADS) {
            const int r = i / C, c = i % C;
            const bool in = r0 + r < rows && c0 + c < cols;
            dst[r][c] = in ? src[(r0 + r) * cols + c0 + c] : (unsigned short)0;
        }
    }
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

#endif
