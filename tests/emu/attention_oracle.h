/* attention_oracle.h: attention in double, from the very inputs a fused kernel read, so
 * that its outputs are checked on their own rather than within the drift of a reference
 * run that rounds elsewhere (the composition stores S and P in f16 or bf16; the kernels
 * keep them in f32).
 *
 * Q, K, V, dO: [bh, t, d] floats, one head's rows consecutive. Row i attends to the keys
 * j < t (j <= i when causal) with weights softmax_j(scale q_i . k_j). */
#ifndef CGC_TESTS_ATTENTION_ORACLE_H
#define CGC_TESTS_ATTENTION_ORACLE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct AttnRef {
    int64_t bh, t, d;
    bool causal;
    double scale;
} AttnRef;

/* Each output comes with its magnitude beside it (MAG, the same size): the sum of the
 * absolute values of the products it sums, sum_j |p_ij| |v_je| for O, with dS's own two
 * terms counted so (p (|dP| + |rowsum(dP P)|)). A kernel that rounds those terms' factors
 * (the tensor cores' P and dS in the operands' type, O where the row sums read it) errs
 * by a few units of that rounding times the magnitude, however much the terms cancel;
 * the gradients' do (a row of dS sums to zero, and a probability near one makes its dS
 * a difference of near equals). */

/* O = P V, P the softmax of the masked, scaled scores. */
void attn_ref_forward(const AttnRef *a, const float *q, const float *k, const float *v, double *o,
                      double *o_mag);

/* The gradients of sum(O * dO): dV = P^T dO, dS = P (dP - rowsum(dP P)) with dP = dO V^T,
 * dQ = scale dS K, dK = scale dS^T Q; OUT holds dQ, dK, dV one after another, MAG theirs. */
void attn_ref_backward(const AttnRef *a, const float *q, const float *k, const float *v,
                       const float *dout, double *out, double *mag);

/* The L2 norm of DEV - REF over N values relative to that of MAG (0 when all are zero). */
double attn_ref_error(const double *ref, const double *mag, const float *dev, int64_t n);

#endif
