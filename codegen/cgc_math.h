/* cgc_math.h: the erf and exp that gelu and its gradient use, one text for the kernels
 * (cgc_device.h, into which the build inlines it) and for the f32 CPU executor
 * (runtime/cpu/exec.c), so that a GPU, the emulation and the CPU compute the same bits:
 * every step is an fmaf (one rounding everywhere), a product, or a select.
 *
 * Polynomials and selects in place of libm's branches, so that a CPU loop over a tensor
 * vectorizes. Within 1 ulp of erf and about 1 ulp of exp (tests/test_exec.c measures
 * both against libm in double); scripts/fit_erf.py fits the coefficients.
 *
 * The includer defines CGC_MATH_FN (the functions' qualifiers), CGC_BITS and CGC_FLOAT
 * (a float's bits as uint32_t and back) and CGC_PICK(c, a, b) (c ? a : b on floats, as
 * integer masks where a C compiler would otherwise keep a branch). */
#ifndef CGC_MATH_H
#define CGC_MATH_H

/* e^y: y clamped to where the result is neither 0 nor infinite (NaN stays), n = rint(y /
 * ln 2) by the 1.5 * 2^23 shift, r = y - n ln 2 in two fma steps (ln 2 split in two
 * floats), e^r by a degree-6 polynomial on [-ln2/2, ln2/2], then 2^n as two factors,
 * each a normal float, so that a subnormal result is rounded once. */
CGC_MATH_FN float cgc_expf(float y)
{
    y = CGC_PICK(y > 88.75f, 88.75f, y);
    y = CGC_PICK(y < -104.0f, -104.0f, y);
    float k = fmaf(y, 1.44269504f, 12582912.0f);
    float n = k - 12582912.0f;
    float r = fmaf(n, -0.693145752f, y);
    r = fmaf(n, -1.42860677e-06f, r);
    float p = 0.0013836842f;
    p = fmaf(p, r, 0.008374816f);
    p = fmaf(p, r, 0.041668225f);
    p = fmaf(p, r, 0.1666642f);
    p = fmaf(p, r, 0.4999999f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    int32_t e = (int32_t)(CGC_BITS(k) - CGC_BITS(12582912.0f));
    int32_t e1 = e >> 1, e2 = e - e1;
    return p * CGC_FLOAT((uint32_t)(e1 + 127) << 23) * CGC_FLOAT((uint32_t)(e2 + 127) << 23);
}

/* erf(x). |x| < 1: x + x P(x^2), P of degree 6. 1 <= |x|: 1 - e^(R(a) - a^2), a = |x|
 * clamped to 4 (erf rounds to 1 from 3.92), R of degree 9 in a - 2.5 fitted to
 * log(erfc(a)) + a^2, whose magnitude stays near 1 where log(erfc(a)) cancels. Both are
 * computed and one is kept; NaN takes the first. */
CGC_MATH_FN float cgc_erff(float x)
{
    float s = x * x;
    float p = 7.853858e-05f;
    p = fmaf(p, s, -0.0008010193f);
    p = fmaf(p, s, 0.0051883277f);
    p = fmaf(p, s, -0.026853813f);
    p = fmaf(p, s, 0.112835854f);
    p = fmaf(p, s, -0.37612626f);
    p = fmaf(p, s, 0.12837917f);
    p = fmaf(x, p, x);
    uint32_t sign = CGC_BITS(x) & 0x80000000u;
    float a = CGC_FLOAT(CGC_BITS(x) ^ sign);
    float t = CGC_PICK(a > 4.0f, 4.0f, a), u = t - 2.5f;
    float q = -5.5555446e-08f;
    q = fmaf(q, u, 1.6149534e-06f);
    q = fmaf(q, u, -1.3028119e-05f);
    q = fmaf(q, u, 7.739041e-05f);
    q = fmaf(q, u, -0.00042061927f);
    q = fmaf(q, u, 0.002165166f);
    q = fmaf(q, u, -0.01085822f);
    q = fmaf(q, u, 0.05610636f);
    q = fmaf(q, u, -0.35268074f);
    q = fmaf(q, u, -1.5568153f);
    q = fmaf(-t, t, q);
    float r = CGC_FLOAT(CGC_BITS(1.0f - cgc_expf(q)) | sign);
    return CGC_PICK(a >= 1.0f, r, p);
}

#endif
