/* half.h: the bits of IEEE binary16 and bfloat16 as f32 (exact: f32 holds every value of
 * both). */
#ifndef CGC_HALF_H
#define CGC_HALF_H

#include <stdint.h>
#include <string.h>

static inline float half_f32_from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline float half_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return half_f32_from_bits(sign | 0x7f800000u | (man << 13));   /* inf, nan */
    if (exp != 0) return half_f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
    float sub = (float)man * 0x1p-24f;                                               /* subnormal, 0 */
    return sign ? -sub : sub;
}

static inline float half_bf16_to_f32(uint16_t b) { return half_f32_from_bits((uint32_t)b << 16); }

#endif
