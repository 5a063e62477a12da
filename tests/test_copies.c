/* test_copies.c: the parameters' half copies (IR_COPY, compiler/precision.c) against the
 * parameters they stand for, on the CPU executor.
 *
 * A model with a tied embedding, a layernorm and a linear layer trains in bf16 and in
 * fp16 (AdamW with weight decay, clipping, accumulation): before every step each copy
 * holds its parameter rounded to the copy's type, element for element, which is the cast
 * that the forward graph (reading the parameters) still makes; the train and evaluation
 * graphs' losses, computed from the copies, equal the forward graph's on the same rows
 * bit for bit. After the parameters are set by other means (a checkpoint's values),
 * cpu_copies_refresh makes the copies theirs again. And the structure: the train and
 * evaluation graphs cast no parameter to a half type, and each parameter assigned is
 * assigned its copy beside it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/pipeline.h"
#include "runtime/cpu/exec.h"
#include "tests/check.h"

enum { T = 8, V = 64, BATCH = 3, STEPS = 6 };

static IrProgram *compile(const char *precision, int accumulate)
{
    char text[1024];
    snprintf(text, sizeof text,
             "model c {\n"
             "    input x: i32[N, %d]\n"
             "    input y: i32[N, %d]\n"
             "    tok = embedding(x, %d, 16)\n"
             "    n = layernorm(tok)\n"
             "    h = gelu(linear(n, 16)) + tok\n"
             "    logits = linear(h, %d, bias = false, tie = tok)\n"
             "    output logits\n"
             "    loss cross_entropy(logits, y)\n"
             "}\n"
             "train {\n"
             "    data = text(\"/dev/null\", context = %d)\n"
             "    batch = %d\n"
             "    optimizer = adamw(lr = 0.05, weight_decay = 0.1)\n"
             "    clip_norm = 0.5\n"
             "    accumulate = %d\n"
             "    precision = %s\n"
             "    seed = 5\n"
             "}\n", T, T, V, V, T, BATCH, accumulate, precision);
    Source *src = source_from_string("copies.net", text, strlen(text));
    IrProgram *p = pipeline_compile(src, NULL, 0);
    source_free(src);
    CHECK(p != NULL);
    return p;
}

/* Elements of copies that are not their parameter rounded to the copy's type. */
static int64_t stale_elements(CpuExec *e, const IrProgram *p)
{
    int64_t bad = 0;
    for (int i = 0; i < p->ntensors; i++) {
        const IrTensor *t = &p->tensors[i];
        if (t->kind != IR_COPY) continue;
        const float *c = cpu_exec_tensor(e, i), *w = cpu_exec_tensor(e, t->param_of);
        for (int64_t k = 0; k < ir_numel(&t->shape, NULL); k++) {
            float want = t->dtype == DT_BF16 ? cpu_round_bf16(w[k]) : cpu_round_f16(w[k]);
            bad += memcmp(&c[k], &want, sizeof want) != 0;
        }
    }
    return bad;
}

/* The loss of graph G on rows X, Y at micro-batch MICRO. */
static double loss_of(CpuExec *e, const IrGraph *g, const int32_t *x, const int32_t *y, int micro)
{
    CpuFeed feed = {.symvals = {BATCH}, .inputs = {x, y}};
    feed.runtime[IR_RT_TOTAL_STEPS] = 100;
    feed.runtime[IR_RT_MICRO_STEP] = micro;
    feed.runtime[IR_RT_RANK_SHARE] = 1;
    CHECK_EQ_INT(cpu_exec_run(e, g, &feed), 0);
    return cpu_exec_scalar(e, g->output[IR_OUT_LOSS]);
}

/* GOT, GRAPH's loss at STEP from the copies, the bits of WANT, the forward's from the
 * casts. */
static bool same_loss(double got, double want, const char *precision, const char *graph, int step)
{
    if (memcmp(&got, &want, sizeof got) == 0) return true;
    printf("%s step %d: %s's loss from the copies %.9g, the forward's from the casts %.9g\n",
           precision, step, graph, got, want);
    return false;
}

/* No graph but the forward casts a parameter to a half type; every ASSIGN of a parameter
 * with a copy in P->train has the copy's ASSIGN after it. */
static void check_structure(const IrProgram *p)
{
    const IrGraph *graphs[] = {&p->train, &p->train_micro, &p->eval};
    int copies = 0;
    for (int i = 0; i < p->ntensors; i++) copies += p->tensors[i].kind == IR_COPY;
    CHECK(copies >= 3);   /* tok.weight (the tied projection's), the linear's weight and bias */
    for (int k = 0; k < 3; k++)
        for (int id = 0; id < graphs[k]->nnodes; id++) {
            const IrNode *n = &graphs[k]->nodes[id];
            if (n->op != IR_CAST || n->dtype == DT_F32) continue;
            int t = ir_node_reads_tensor(&graphs[k]->nodes[n->in[0]]);
            CHECK(t < 0 || p->tensors[t].kind != IR_PARAM);
        }
    int assigned = 0;
    for (int c = 0; c < p->ntensors; c++) {
        if (p->tensors[c].kind != IR_COPY) continue;
        int param_at = -1, copy_at = -1;
        for (int id = 0; id < p->train.nnodes; id++) {
            const IrNode *n = &p->train.nodes[id];
            if (!ir_node_is_assign(n)) continue;
            if (n->index == p->tensors[c].param_of) param_at = id;
            if (n->index == c) copy_at = id;
        }
        CHECK(param_at >= 0 && copy_at > param_at);
        assigned += copy_at > param_at;
    }
    CHECK_EQ_INT(assigned, copies);
}

static void train_in(const char *precision, int accumulate)
{
    IrProgram *p = compile(precision, accumulate);
    if (!p) return;
    check_structure(p);
    CpuExec *e = cpu_exec_new(p, CPU_F32);
    cpu_exec_set_reuse(e, true);   /* as training runs: the update's values computed in place */
    cpu_exec_init_tensors(e, p->cfg.seed);
    CHECK_EQ_INT(stale_elements(e, p), 0);
    int32_t x[BATCH * T], y[BATCH * T];
    int micro = 0;
    for (int step = 0; step < STEPS; step++) {
        for (int a = 0; a < accumulate; a++, micro++) {
            for (int i = 0; i < BATCH * T; i++)
                x[i] = (i * 37 + micro * 11) % V, y[i] = (i * 13 + micro * 29 + 1) % V;
            double want = loss_of(e, &p->forward, x, y, micro);
            CHECK(same_loss(loss_of(e, &p->eval, x, y, micro), want, precision, "eval", step));
            const IrGraph *g = a + 1 < accumulate ? &p->train_micro : &p->train;
            CHECK(same_loss(loss_of(e, g, x, y, micro), want, precision, g->name, step));
        }
        CHECK_EQ_INT(stale_elements(e, p), 0);
    }
    for (int i = 0; i < p->nparams; i++) {   /* a checkpoint's values */
        float *w = cpu_exec_tensor(e, i);
        for (int64_t k = 0; k < ir_numel(&p->tensors[i].shape, NULL); k++) w[k] = w[k] * 0.75f + 1e-3f;
    }
    CHECK(stale_elements(e, p) > 0);
    float **tensors = malloc((size_t)p->ntensors * sizeof *tensors);
    for (int i = 0; i < p->ntensors; i++) tensors[i] = cpu_exec_tensor(e, i);
    cpu_copies_refresh(p, tensors);
    CHECK_EQ_INT(stale_elements(e, p), 0);
    CHECK(same_loss(loss_of(e, &p->eval, x, y, micro), loss_of(e, &p->forward, x, y, micro), precision,
                    "eval after the refresh", STEPS));
    printf("%s, accumulate %d: copies equal their parameters' casts over %d steps\n", precision,
           accumulate, STEPS);
    free(tensors);
    cpu_exec_free(e);
    ir_program_free(p);
}

/* fp32 and tf32 cast nothing: no copies. */
static void no_copies(const char *precision)
{
    IrProgram *p = compile(precision, 1);
    if (!p) return;
    for (int i = 0; i < p->ntensors; i++) CHECK(p->tensors[i].kind != IR_COPY);
    ir_program_free(p);
}

int main(void)
{
    train_in("bf16", 1);
    train_in("fp16", 2);
    no_copies("fp32");
    no_copies("tf32");
    return check_result();
}
