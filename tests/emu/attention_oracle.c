/* attention_oracle.c: attention in double (attention_oracle.h): plain loops, one row of
 * probabilities at a time. */
#include "attention_oracle.h"

#include <math.h>
#include <stdlib.h>

/* Row I's probabilities over the keys of head H into P (t of them, zero where masked). */
static void probabilities(const AttnRef *a, const float *q, const float *k, int64_t h, int64_t i,
                          double *p)
{
    const float *qi = q + (h * a->t + i) * a->d;
    double top = -INFINITY, sum = 0;
    for (int64_t j = 0; j < a->t; j++) {
        const float *kj = k + (h * a->t + j) * a->d;
        double s = 0;
        for (int64_t e = 0; e < a->d; e++) s += (double)qi[e] * kj[e];
        p[j] = a->causal && j > i ? -INFINITY : a->scale * s;
        if (p[j] > top) top = p[j];
    }
    for (int64_t j = 0; j < a->t; j++) sum += p[j] = p[j] == -INFINITY ? 0 : exp(p[j] - top);
    for (int64_t j = 0; j < a->t; j++) p[j] /= sum;
}

void attn_ref_forward(const AttnRef *a, const float *q, const float *k, const float *v, double *o,
                      double *o_mag)
{
    double *p = malloc((size_t)a->t * sizeof *p);
    for (int64_t h = 0; h < a->bh; h++)
        for (int64_t i = 0; i < a->t; i++) {
            probabilities(a, q, k, h, i, p);
            double *oi = o + (h * a->t + i) * a->d, *mi = o_mag + (h * a->t + i) * a->d;
            for (int64_t e = 0; e < a->d; e++) oi[e] = mi[e] = 0;
            for (int64_t j = 0; j < a->t; j++)
                for (int64_t e = 0; e < a->d; e++) {
                    double term = p[j] * v[(h * a->t + j) * a->d + e];
                    oi[e] += term;
                    mi[e] += fabs(term);
                }
        }
    free(p);
}

void attn_ref_backward(const AttnRef *a, const float *q, const float *k, const float *v,
                       const float *dout, double *out, double *mag)
{
    int64_t n = a->bh * a->t * a->d;
    double *dq = out, *dk = out + n, *dv = out + 2 * n;
    double *mq = mag, *mk = mag + n, *mv = mag + 2 * n;
    for (int64_t x = 0; x < 3 * n; x++) out[x] = mag[x] = 0;
    double *p = malloc((size_t)a->t * sizeof *p), *ds = malloc((size_t)a->t * sizeof *ds);
    for (int64_t h = 0; h < a->bh; h++)
        for (int64_t i = 0; i < a->t; i++) {
            probabilities(a, q, k, h, i, p);
            const float *doi = dout + (h * a->t + i) * a->d;
            double delta = 0;
            for (int64_t j = 0; j < a->t; j++) {
                double dp = 0;
                for (int64_t e = 0; e < a->d; e++) dp += (double)doi[e] * v[(h * a->t + j) * a->d + e];
                ds[j] = dp;
                delta += p[j] * dp;
            }
            for (int64_t j = 0; j < a->t; j++) {
                double size = p[j] * (fabs(ds[j]) + fabs(delta));   /* dS's own terms */
                ds[j] = p[j] * (ds[j] - delta);
                for (int64_t e = 0; e < a->d; e++) {
                    int64_t at_i = (h * a->t + i) * a->d + e, at_j = (h * a->t + j) * a->d + e;
                    dq[at_i] += a->scale * ds[j] * k[at_j];
                    dk[at_j] += a->scale * ds[j] * q[at_i];
                    dv[at_j] += p[j] * doi[e];
                    mq[at_i] += a->scale * size * fabs(k[at_j]);
                    mk[at_j] += a->scale * size * fabs(q[at_i]);
                    mv[at_j] += p[j] * fabs(doi[e]);
                }
            }
        }
    free(p);
    free(ds);
}

double attn_ref_error(const double *ref, const double *mag, const float *dev, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)dev[i] - ref[i];
        num += d * d;
        den += mag[i] * mag[i];
    }
    if (!isfinite(num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
