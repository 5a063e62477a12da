/* test_gemm_group.c: GEMM groups (ir.h, IR_GROUP_GEMM) on small hand-built graphs:
 * y = act(x @ w^T + b), with x an input and w, b parameters, cast to the precision's type.
 *
 *  - fusion forms the group where it removes a launch and only there: relu when the sum
 *    has no other reader, gelu_tanh with the aux output (the sum also read by another
 *    GEMM) only in f32 and with n a multiple of 8, nothing when the sum's kernel holds
 *    more than the bias add and the activation, nor for a layer whose result nobody reads
 *    (the epilogue would have nowhere to store it);
 *  - the plan runs a group as one GEMM step with its epilogue, bias and aux buffers;
 *  - the CPU executor keeps the group's rule: in f16 the grouped relu and gelu equal the
 *    f32 product plus bias, activated in f32 and rounded once, computed here with the
 *    same BLAS call, bit for bit; the ungrouped graph equals the op-by-op rounding, also
 *    bit for bit; and the two differ (there are elements where double rounding moves
 *    the result), so the comparison can fail. In f32 both agree bit for bit.
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/plan.h"
#include "compiler/passes.h"
#include "runtime/cpu/exec.h"
#include "tests/check.h"

enum { M = 48, K = 96 };

typedef enum Reader { ONLY_ACT, ALSO_GEMM, ALSO_POINTWISE, NOBODY } Reader;

typedef struct Case {
    DType type;
    IrOp act;           /* IR_RELU, IR_GELU_TANH, or IR_ADD for none */
    int n;
    Reader sum_readers; /* who else reads the sum x @ w^T + b (NOBODY: nor the activation) */
} Case;

/* The program of case C: forward graph only, output the activation (prediction). */
static IrProgram *build(const Case *c)
{
    IrProgram *p = ir_program_new();
    p->model_name = xstrdup("gemm_group");
    SrcLoc loc = { 1, 1 };
    ir_add_input(p, "x", DT_F32, (Shape){ .rank = 2, .dim = { M, K } }, loc);
    ir_add_tensor(p, "w", IR_PARAM, (Shape){ .rank = 2, .dim = { c->n, K } }, IR_INIT_ZEROS, 0, -1, loc);
    ir_add_tensor(p, "b", IR_PARAM, (Shape){ .rank = 1, .dim = { c->n } }, IR_INIT_ZEROS, 0, -1, loc);
    IrGraph *g = &p->forward;
    int x = ir_cast(g, ir_input(g, p, 0, loc), c->type, loc);
    int w = ir_cast(g, ir_read(g, p, 0, loc), c->type, loc);
    int b = ir_cast(g, ir_read(g, p, 1, loc), c->type, loc);
    int sum = ir_binary(g, IR_ADD, ir_matmul(g, x, w, IR_MATMUL_TRANS_B, loc), b, loc);
    int y = c->act == IR_ADD ? sum : ir_unary(g, c->act, sum, loc);
    if (c->sum_readers == ALSO_POINTWISE) y = ir_binary(g, IR_MUL, y, sum, loc);
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++) g->output[r] = -1;
    g->output[IR_OUT_PREDICTION] = c->sum_readers == NOBODY ? x : y;
    if (c->sum_readers == ALSO_GEMM)   /* as a backward reads a pre-activation */
        g->output[IR_OUT_LOSS] = ir_reduce(g, IR_SUM, ir_matmul(g, sum, w, 0, loc), IR_AXIS_ALL, loc);
    return p;
}

static int gemm_groups(const IrGraph *g)
{
    int n = 0;
    for (int k = 0; k < g->ngroups; k++) n += g->groups[k].kind == IR_GROUP_GEMM;
    return n;
}

/* ---- where fusion forms groups, and the plan's step ---- */

static void check_forms(const Case *c, int want)
{
    IrProgram *p = build(c);
    fusion_assign(p);
    plan_free(plan_build(p, PLAN_DEFAULT, "gemm_group.net", NULL));   /* and it plans */
    int got = gemm_groups(&p->forward);
    if (got != want)
        fprintf(stderr, "case %s %s n %d readers %d: %d GEMM groups, want %d\n", ir_dtype_name(c->type),
                ir_op_name(c->act), c->n, c->sum_readers, got, want);
    CHECK_EQ_INT(got, want);
    ir_program_free(p);
}

static void check_forming(void)
{
    check_forms(&(Case){ DT_F32, IR_RELU, 72, ONLY_ACT }, 1);
    check_forms(&(Case){ DT_F16, IR_RELU, 70, ONLY_ACT }, 1);
    check_forms(&(Case){ DT_BF16, IR_GELU_TANH, 70, ONLY_ACT }, 1);
    check_forms(&(Case){ DT_F32, IR_ADD, 70, ONLY_ACT }, 1);
    check_forms(&(Case){ DT_F32, IR_GELU_TANH, 72, ALSO_GEMM }, 1);    /* with the aux output */
    check_forms(&(Case){ DT_F32, IR_GELU_TANH, 70, ALSO_GEMM }, 0);    /* aux ld not a multiple of 8 */
    check_forms(&(Case){ DT_F16, IR_GELU_TANH, 72, ALSO_GEMM }, 0);    /* aux would be rounded */
    check_forms(&(Case){ DT_F32, IR_RELU, 72, ALSO_GEMM }, 0);         /* relu: the sum only for it */
    check_forms(&(Case){ DT_F32, IR_RELU, 72, ALSO_POINTWISE }, 0);    /* that kernel stays */
    check_forms(&(Case){ DT_F32, IR_RELU, 72, NOBODY }, 0);            /* nothing to store */
}

/* The GEMM step of the grouped gelu-with-aux program: epilogue, bias and aux buffers. */
static void check_plan(void)
{
    IrProgram *p = build(&(Case){ DT_F32, IR_GELU_TANH, 72, ALSO_GEMM });
    fusion_assign(p);
    Plan *pl = plan_build(p, PLAN_DEFAULT, "gemm_group.net", NULL);
    const PlanGraph *pg = &pl->graph[PG_FORWARD];
    const PlanStep *s = NULL;
    for (int i = 0; i < pg->nsteps && !s; i++)
        if (pg->steps[i].kind == STEP_GEMM && pg->steps[i].gemm.epilogue != GEMM_EPI_NONE) s = &pg->steps[i];
    CHECK(s != NULL);
    if (s) {
        CHECK_EQ_INT(s->gemm.epilogue, GEMM_EPI_GELU_BIAS);
        CHECK(s->gemm.bias >= 0 && s->gemm.aux >= 0 && s->gemm.c >= 0);
        CHECK_EQ_INT(s->gemm.bias_type, DT_F32);
        if (s->gemm.bias >= 0) CHECK_EQ_INT(pl->buffers[s->gemm.bias].shape.dim[0], 72);
        int group = s->node >= 0 ? p->forward.nodes[s->node].group : 0;
        CHECK(group > 0);   /* the step's node is in its GEMM group */
        if (group > 0) CHECK_STR(p->forward.groups[group - 1].name, "gemm_bias_gelu_prediction");
    }
    plan_free(pl);
    ir_program_free(p);
}

/* ---- the executor's rounding ---- */

static float round_to(float x, DType t)
{
    return t == DT_F16 ? cpu_round_f16(x) : t == DT_BF16 ? cpu_round_bf16(x) : x;
}

static float activate(float x, IrOp act)
{
    if (act == IR_RELU) return x < 0 ? 0 : x;
    return act == IR_GELU_TANH ? cpu_gelu_tanh(x) : x;
}

/* Runs P's forward graph on X (the parameters W, B set first); the prediction into OUT. */
static void run(IrProgram *p, const float *x, const float *w, const float *b, int n, float *out)
{
    CpuExec *e = cpu_exec_new(p, CPU_F32);
    memcpy(cpu_exec_tensor(e, 0), w, (size_t)n * K * sizeof *w);
    memcpy(cpu_exec_tensor(e, 1), b, (size_t)n * sizeof *b);
    CpuFeed feed;
    memset(&feed, 0, sizeof feed);
    feed.inputs[0] = x;
    CHECK_EQ_INT(cpu_exec_run(e, &p->forward, &feed), 0);
    int64_t count = 0;
    const float *y = cpu_exec_value(e, p->forward.output[IR_OUT_PREDICTION], &count);
    CHECK_EQ_INT(count, (int64_t)M * n);
    CHECK(y != NULL);
    if (y && count == (int64_t)M * n) memcpy(out, y, (size_t)M * n * sizeof *out);
    else memset(out, 0xff, (size_t)M * n * sizeof *out);   /* a NaN no rounding makes: fails below */
    cpu_exec_free(e);
}

static float uniform(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) / 0x1p52 - 1.0);
}

/* Grouped equals the f32 computation rounded once; ungrouped the op-by-op rounding. */
static void check_rounding(const Case *c)
{
    int n = c->n;
    float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * n * K), *b = malloc(sizeof(float) * n);
    float *xr = malloc(sizeof(float) * M * K), *wr = malloc(sizeof(float) * n * K), *prod = malloc(sizeof(float) * M * n);
    float *grouped = malloc(sizeof(float) * M * n), *plain = malloc(sizeof(float) * M * n);
    uint64_t s = 7;
    for (int i = 0; i < M * K; i++) x[i] = uniform(&s), xr[i] = round_to(x[i], c->type);
    for (int i = 0; i < n * K; i++) w[i] = uniform(&s) * 0.2f, wr[i] = round_to(w[i], c->type);
    for (int i = 0; i < n; i++) b[i] = uniform(&s);
    IrProgram *pg = build(c), *pp = build(c);
    fusion_assign(pg);
    CHECK_EQ_INT(gemm_groups(&pg->forward), 1);
    run(pg, x, w, b, n, grouped);
    run(pp, x, w, b, n, plain);
    /* the executor's own BLAS call for this product (one part: below its split size) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, n, K, 1, xr, K, wr, K, 0, prod, n);
    int once_bad = 0, twice_bad = 0, differ = 0;
    for (int i = 0; i < M * n; i++) {
        float bias = round_to(b[i % n], c->type);
        float once = round_to(activate(prod[i] + bias, c->act), c->type);
        float twice = round_to(activate(round_to(round_to(prod[i], c->type) + bias, c->type), c->act), c->type);
        once_bad += memcmp(&grouped[i], &once, sizeof once) != 0;
        twice_bad += memcmp(&plain[i], &twice, sizeof twice) != 0;
        differ += memcmp(&grouped[i], &plain[i], sizeof once) != 0;
    }
    printf("%s %s n %d: grouped vs ungrouped differ in %d of %d elements\n", ir_dtype_name(c->type),
           ir_op_name(c->act), n, differ, M * n);
    CHECK_EQ_INT(once_bad, 0);
    CHECK_EQ_INT(twice_bad, 0);
    if (c->type == DT_F32) CHECK_EQ_INT(differ, 0);
    else CHECK(differ > 0);
    ir_program_free(pg), ir_program_free(pp);
    free(x), free(w), free(b), free(xr), free(wr), free(prod), free(grouped), free(plain);
}

int main(void)
{
    check_forming();
    check_plan();
    check_rounding(&(Case){ DT_F16, IR_RELU, 72, ONLY_ACT });
    check_rounding(&(Case){ DT_BF16, IR_RELU, 70, ONLY_ACT });
    check_rounding(&(Case){ DT_F16, IR_GELU_TANH, 72, ONLY_ACT });
    check_rounding(&(Case){ DT_F16, IR_ADD, 72, ONLY_ACT });
    check_rounding(&(Case){ DT_F32, IR_RELU, 72, ONLY_ACT });
    return check_result();
}
