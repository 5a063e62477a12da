/* test_attention.c: attention(q, k, v, heads, causal) as the front end composes it
 * (reshapes and permutes into heads, batched products, the mask, a softmax), run by the
 * CPU executor, against multi-head scaled dot-product attention written out directly
 * in double: which channels make a head, the scale, which keys a causal query sees, and
 * the order the heads are concatenated in. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/pipeline.h"
#include "runtime/cpu/exec.h"
#include "tests/check.h"

enum { N = 2, T = 5, C = 12 };

/* out [N, T, C]: per head h (channels h*d .. h*d + d - 1) softmax(q k^T / sqrt(d)) v. */
static void reference(const float *q, const float *k, const float *v, int heads, bool causal,
                      double *out)
{
    int d = C / heads;
    for (int n = 0; n < N; n++)
        for (int h = 0; h < heads; h++)
            for (int t = 0; t < T; t++) {
                double w[T], max = -INFINITY, sum = 0;
                int keys = causal ? t + 1 : T;
                for (int s = 0; s < keys; s++) {
                    double dot = 0;
                    for (int j = 0; j < d; j++)
                        dot += (double)q[(n * T + t) * C + h * d + j] * k[(n * T + s) * C + h * d + j];
                    w[s] = dot / sqrt((double)d);
                    max = w[s] > max ? w[s] : max;
                }
                for (int s = 0; s < keys; s++) sum += w[s] = exp(w[s] - max);
                for (int j = 0; j < d; j++) {
                    double o = 0;
                    for (int s = 0; s < keys; s++) o += w[s] / sum * v[(n * T + s) * C + h * d + j];
                    out[(n * T + t) * C + h * d + j] = o;
                }
            }
}

/* The forward graph of a model whose output is attention over three inputs. */
static IrProgram *compile(int heads, bool causal)
{
    char text[512];
    snprintf(text, sizeof text,
             "model m {\n"
             "    input q: f32[N, %d, %d]\n"
             "    input k: f32[N, %d, %d]\n"
             "    input v: f32[N, %d, %d]\n"
             "    a = attention(q, k, v, heads = %d, causal = %s)\n"
             "    output a\n"
             "    loss mean(a)\n"
             "}\n",
             T, C, T, C, T, C, heads, causal ? "true" : "false");
    Source *src = source_from_string("attention.net", text, strlen(text));
    IrProgram *p = pipeline_compile(src, NULL, 0);
    source_free(src);
    return p;
}

static void check_case(int heads, bool causal, const float *q, const float *k, const float *v)
{
    IrProgram *p = compile(heads, causal);
    CHECK(p != NULL);
    if (!p) return;
    CpuExec *e = cpu_exec_new(p, CPU_F64);
    CpuFeed feed = {.symvals = {N}, .inputs = {q, k, v}};
    CHECK_EQ_INT(cpu_exec_run(e, &p->forward, &feed), 0);
    int64_t n = 0;
    const double *got = cpu_exec_value(e, p->forward.output[IR_OUT_PREDICTION], &n);
    double want[N * T * C];
    reference(q, k, v, heads, causal, want);
    CHECK_EQ_INT(n, N * T * C);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && n == N * T * C && bad < 0; i++)
        if (fabs(got[i] - want[i]) > 1e-12 + 1e-10 * fabs(want[i])) bad = i;
    if (bad >= 0)
        fprintf(stderr, "attention heads = %d, causal = %d: element %lld is %.17g, want %.17g\n",
                heads, causal, (long long)bad, got[bad], want[bad]);
    CHECK(bad < 0);
    cpu_exec_free(e);
    ir_program_free(p);
}

int main(void)
{
    static float q[N * T * C], k[N * T * C], v[N * T * C];
    uint32_t s = 12345;
    for (int i = 0; i < N * T * C; i++) {   /* values in [-2, 2), a fixed LCG */
        float *x[3] = {q, k, v};
        for (int j = 0; j < 3; j++) {
            s = s * 1664525u + 1013904223u;
            x[j][i] = (float)(s >> 8) / (float)(1u << 24) * 4.0f - 2.0f;
        }
    }
    static const int heads[] = {1, 2, 3, 12};
    for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++)
        for (int causal = 0; causal < 2; causal++) check_case(heads[h], causal, q, k, v);
    return check_result();
}
