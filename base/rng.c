/* rng.c: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC 2011). The 128-bit counter is (counter, stream), the 64-bit key is the seed. */
#include "rng.h"

#include <math.h>

static void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

void rng_philox(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(0xD2511F53u, c0, &hi0, &lo0);
        mulhilo(0xCD9E8D57u, c2, &hi1, &lo1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

float rng_uniform(uint64_t seed, uint64_t stream, uint64_t counter)
{
    uint32_t r[4];
    rng_philox(seed, stream, counter, r);
    return (float)(r[0] >> 8) * (1.0f / 16777216.0f);
}

double rng_normal(uint64_t seed, uint64_t stream, uint64_t counter)
{
    uint32_t r[4];
    rng_philox(seed, stream, counter, r);
    /* u1 in (0, 1] so the log is finite. */
    double u1 = ((double)(r[0] >> 8) + 1.0) / 16777216.0;
    double u2 = (double)(r[1] >> 8) / 16777216.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t rng_below(uint64_t seed, uint64_t stream, uint64_t counter, uint64_t n)
{
    uint32_t r[4];
    rng_philox(seed, stream, counter, r);
    uint64_t x = ((uint64_t)r[0] << 32) | r[1];
    return (uint64_t)(((unsigned __int128)x * n) >> 64);
}

bool rng_dropout_keep(uint64_t seed, int s, uint64_t counter, uint64_t element, double p)
{
    uint64_t stream = ((uint64_t)(RNG_DROPOUT + s) << 40) | (counter & ((1ull << 40) - 1));
    return rng_uniform(seed, stream, element) >= (float)p;
}
