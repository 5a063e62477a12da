/* test_decode.c: the decode graph (compiler/decode.c) against the evaluation graph it is
 * cut from, both run by the CPU executor from the same seeded weights. Over a window of
 * tokens, the evaluation graph's logits at each position are what the decode graph gives
 * when fed the tokens one position at a time; again after the caches hold another
 * sequence's rows (a restart, as generation does when the window is full). Models the cut
 * cannot take are refused with the reason, the program left as it was. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/passes.h"
#include "driver/pipeline.h"
#include "runtime/cpu/exec.h"
#include "runtime/generate.h"
#include "tests/check.h"

enum { T = 12, V = 256, LAYERS = 2 };

/* A GPT of LAYERS pre-norm blocks over T bytes in PRECISION; EXTRA is spliced into each
 * block, CAUSAL given to its attention. */
static IrProgram *compile_in(const char *precision, const char *causal, const char *extra,
                             const char *data)
{
    char text[4096];
    int at = snprintf(text, sizeof text,
                      "model g {\n"
                      "    input x: i32[N, %d]\n"
                      "    input y: i32[N, %d]\n"
                      "    tok = embedding(x, %d, 16)\n"
                      "    pos = embedding(arange(%d), %d, 16)\n"
                      "    h0 = tok + pos\n", T, T, V, T, T);
    for (int l = 1; l <= LAYERS; l++)
        at += snprintf(text + at, sizeof text - (size_t)at,
                       "    a%d = layernorm(h%d)\n"
                       "    q%d = linear(a%d, 16)\n"
                       "    k%d = linear(a%d, 16)\n"
                       "    v%d = linear(a%d, 16)\n"
                       "    o%d = linear(attention(q%d, k%d, v%d, heads = 2, causal = %s), 16)\n"
                       "    r%d = h%d + o%d%s\n"
                       "    m%d = layernorm(r%d)\n"
                       "    e%d = gelu(linear(m%d, 32))\n"
                       "    f%d = linear(e%d, 16)\n"
                       "    h%d = r%d + f%d\n",
                       l, l - 1, l, l, l, l, l, l, l, l, l, l, causal, l, l - 1, l, extra, l, l, l, l,
                       l, l, l, l, l);
    snprintf(text + at, sizeof text - (size_t)at,
             "    hf = layernorm(h%d)\n"
             "    logits = linear(hf, %d, bias = false, tie = tok)\n"
             "    output logits\n"
             "    loss cross_entropy(logits, y)\n"
             "}\n"
             "train {\n"
             "    data = %s\n"
             "    batch = 2\n"
             "    seed = 3\n"
             "    precision = %s\n"
             "}\n", LAYERS, V, data, precision);
    Source *src = source_from_string("decode.net", text, strlen(text));
    IrProgram *p = pipeline_compile(src, NULL, 0);
    source_free(src);
    CHECK(p != NULL);
    return p;
}

static IrProgram *compile(const char *causal, const char *extra, const char *data)
{
    return compile_in("fp32", causal, extra, data);
}

static const char *text_data = "text(\"/dev/null\", context = 12)";

/* The decode graph's logits for TOKENS[0..n) fed one position at a time against the
 * evaluation graph's over the window (the rest of it zeros): the largest difference
 * relative to the logits' largest magnitude. */
static double decode_error(CpuExec *e, const IrProgram *p, const int32_t *tokens, int n)
{
    int32_t window[T] = {0}, one[T] = {0};
    memcpy(window, tokens, (size_t)n * sizeof *window);
    CpuFeed feed = {.symvals = {1}, .inputs = {window, window}};
    CHECK_EQ_INT(cpu_exec_run(e, &p->eval, &feed), 0);
    int64_t count = 0;
    const float *v = cpu_exec_value(e, p->eval.output[IR_OUT_PREDICTION], &count);
    CHECK_EQ_INT(count, T * V);
    float *want = malloc(sizeof(float) * T * V);
    memcpy(want, v, sizeof(float) * T * V);
    double err = 0, mag = 0;
    for (int t = 0; t < n; t++) {
        one[0] = tokens[t];
        CpuFeed step = {.symvals = {1}, .inputs = {one, one}};
        step.runtime[IR_RT_POSITION] = t;
        CHECK_EQ_INT(cpu_exec_run(e, &p->decode, &step), 0);
        const float *got = cpu_exec_value(e, p->decode.output[IR_OUT_PREDICTION], &count);
        CHECK_EQ_INT(count, V);
        for (int i = 0; i < V && count == V; i++) {
            err = fmax(err, fabs((double)got[i] - want[t * V + i]));
            mag = fmax(mag, fabs((double)want[t * V + i]));
        }
    }
    free(want);
    return err / mag;
}

/* In PRECISION, within TOL (f32: another order of the same sums; bf16: a unit or two of
 * its 8 bits where a product rounds on the other side). */
static void decode_matches_eval(const char *precision, double tol)
{
    IrProgram *p = compile_in(precision, "true", "", text_data);
    if (!p) return;
    int tensors = p->ntensors;
    char why[256];
    CHECK_EQ_INT(decode_lower(p, why, sizeof why), 0);
    CHECK_EQ_INT(p->ntensors, tensors + 2 * LAYERS);
    for (int i = tensors; i < p->ntensors; i++) CHECK_EQ_INT(p->tensors[i].kind, IR_CACHE);
    CpuExec *e = cpu_exec_new(p, CPU_F32);
    cpu_exec_init_tensors(e, p->cfg.seed);
    int32_t a[T], b[T];
    for (int i = 0; i < T; i++) a[i] = (i * 37 + 11) % V, b[i] = (i * 101 + 5) % V;
    double first = decode_error(e, p, a, T);
    double again = decode_error(e, p, b, T / 2);   /* the caches hold A's rows past T/2 */
    printf("decode against eval, %s: relative error %.3g, after a restart %.3g\n", precision,
           first, again);
    CHECK(first < tol);
    CHECK(again < tol);
    cpu_exec_free(e);
    ir_program_free(p);
}

/* What generate_text writes, greedy, from P's seeded weights: PROMPT and TOKENS bytes
 * (unescaped, *N of them). */
static char *generated(const IrProgram *p, const char *prompt, int tokens, size_t *n)
{
    CpuExec *e = cpu_exec_new(p, CPU_F32);
    cpu_exec_init_tensors(e, p->cfg.seed);
    float **w = malloc((size_t)p->ntensors * sizeof *w);
    for (int i = 0; i < p->ntensors; i++) w[i] = cpu_exec_tensor(e, i);
    GenerateOptions o = { .prompt = prompt, .tokens = tokens, .seed = 1 };
    char *text = NULL;
    FILE *f = open_memstream(&text, n);
    CHECK_EQ_INT(generate_text(p, w, &o, false, f), 0);
    fclose(f);
    free(w);
    cpu_exec_free(e);
    return text;
}

/* Within the window, generating through the decode graph writes what generating through
 * the evaluation graph does (which, past it, keeps the last T bytes, not T/2 to T). */
static void generate_matches_window(void)
{
    IrProgram *p = compile("true", "", text_data);
    if (!p) return;
    size_t nw, nc, differ = 0;
    char *window = generated(p, "ab", T - 2, &nw), why[256];
    CHECK_EQ_INT(decode_lower(p, why, sizeof why), 0);
    char *cached = generated(p, "ab", T - 2, &nc);
    CHECK_EQ_INT(nw, T + 1);
    bool same = nw == nc && memcmp(window, cached, nw) == 0;
    if (!same) fprintf(stderr, "generated through the window and the decode graph: other bytes\n");
    CHECK(same);
    for (size_t i = 3; i < nw; i++) differ += window[i] != window[i - 1];
    CHECK(differ > 0);   /* not one byte over and over, which a wrong position could give too */
    free(window), free(cached);
    ir_program_free(p);
}

/* decode_lower refuses, saying WANT, and leaves the program as it was. */
static void refused(const char *causal, const char *extra, const char *data, const char *want)
{
    IrProgram *p = compile(causal, extra, data);
    if (!p) return;
    int tensors = p->ntensors;
    char why[256];
    CHECK_EQ_INT(decode_lower(p, why, sizeof why), -1);
    bool says = strstr(why, want) != NULL;
    if (!says) fprintf(stderr, "decode_lower's reason '%s' does not say '%s'\n", why, want);
    CHECK(says);
    CHECK_EQ_INT(p->ntensors, tensors);
    CHECK_EQ_INT(p->decode.nnodes, 0);
    ir_program_free(p);
}

int main(void)
{
    decode_matches_eval("fp32", 1e-6);
    decode_matches_eval("bf16", 2e-2);
    generate_matches_window();
    refused("false", "", text_data, "causal = false");
    refused("true", " + softmax(o1, axis = 1)", text_data, "softmax at line");
    refused("true", "", "synthetic(samples = 8)", "does not train on text");
    return check_result();
}
