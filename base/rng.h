/* rng.h: counter-based random numbers (Philox-4x32-10, as in cuRAND and PyTorch's CUDA
 * generator), so that every draw is a pure function of (seed, stream, counter) and any
 * backend, the CPU reference today and CUDA kernels later, reproduces it exactly, and a
 * resumed run continues the same sequence without saving generator state.
 *
 * Streams keep unrelated uses apart.
 */
#ifndef CGC_RNG_H
#define CGC_RNG_H

#include <stdbool.h>
#include <stdint.h>

typedef enum RngStream {
    RNG_INIT = 1,       /* parameter initialisation: counter = (tensor index << 40) + element */
    RNG_SHUFFLE = 2,    /* data order: counter = (epoch << 40) + draw */
    RNG_SYNTHETIC = 3,  /* synthetic data */
    RNG_TEXT = 4,       /* where a text's windows start: counter = epoch */
    RNG_SAMPLE = 5,     /* sampling text: counter = the sample (generate.c) and the byte */
    RNG_DROPOUT = 16,   /* dropout node with stream s uses RNG_DROPOUT + s */
} RngStream;

/* Four 32-bit random words for (seed, stream, counter). */
void rng_philox(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t out[4]);
/* Uniform in [0, 1) with 24 random bits: word 0 of the block. */
float rng_uniform(uint64_t seed, uint64_t stream, uint64_t counter);
/* Standard normal (Box-Muller on words 0 and 1). */
double rng_normal(uint64_t seed, uint64_t stream, uint64_t counter);
/* Uniform integer in [0, n) without modulo bias worth mentioning (64-bit multiply). */
uint64_t rng_below(uint64_t seed, uint64_t stream, uint64_t counter, uint64_t n);
/* The dropout mask: true keeps element ELEMENT of dropout stream S at micro-step
 * COUNTER, with drop probability P. */
bool rng_dropout_keep(uint64_t seed, int s, uint64_t counter, uint64_t element, double p);

#endif
