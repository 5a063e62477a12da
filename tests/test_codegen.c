/* test_codegen.c: the eager plan of small programs: buffers and views, one step per
 * computing node, ASSIGN copies last and safe when values alias assigned tensors,
 * kernel names valid and unique, no .net text in any kernel, --emit's errors; and the
 * default plan of a hand-grouped graph (buffers, steps and text of fused kernels); a
 * reduce-overhead plan's train graphs read the micro-step from the device's step counter. */
#include <stdlib.h>
#include <sys/stat.h>

#include "codegen/plan.h"
#include "compiler/passes.h"
#include "driver/pipeline.h"
#include "tests/testfiles.h"

/* Legal but unusual binding names: CUDA keywords and C type names, and a symbol whose
 * name must never reach a kernel. */
static const char weird_net[] =
    "model weird {\n"
    "    input x: f32[Batch_Size, 8]\n"
    "    input y: i32[Batch_Size]\n"
    "\n"
    "    __global__ = relu(linear(x, 16))\n"
    "    int64_t    = gelu(linear(__global__, 16))\n"
    "    out_       = linear(int64_t, 4)\n"
    "\n"
    "    output out_\n"
    "    loss   cross_entropy(out_, y)\n"
    "}\n"
    "\n"
    "train {\n"
    "    data      = synthetic(samples = 64)\n"
    "    batch     = 8\n"
    "    epochs    = 1\n"
    "    optimizer = adam(lr = 1e-3)\n"
    "    precision = bf16\n"
    "    seed      = 1\n"
    "}\n";

static bool is_identifier(const char *s)
{
    if (!*s || (*s >= '0' && *s <= '9')) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return false;
    return true;
}

static void check_buffers(const Plan *pl, const PlanGraph *pg)
{
    const IrGraph *g = pg->ir;
    for (int id = 0; id < g->nnodes; id++) {
        const IrNode *n = &g->nodes[id];
        int b = pg->node_buffer[id];
        if (n->op == IR_ASSIGN) {
            CHECK_EQ_INT(b, -1);
            continue;
        }
        CHECK(b >= 0 && b < pl->nbuffers);
        const PlanBuffer *buf = &pl->buffers[b];
        if (n->op == IR_READ) CHECK_EQ_INT(buf->alias_of, pl->tensor_buffer_base + n->index);
        else if (n->op == IR_INPUT) CHECK_EQ_INT(buf->alias_of, pl->input_buffer[n->index]);
        else if (n->op == IR_CONST) CHECK(buf->kind == PB_CONST && buf->value == n->value);
        else if (n->op != IR_RESHAPE) CHECK(buf->kind == PB_NODE && buf->alias_of == -1);
        CHECK(buf->dtype == n->dtype);
    }
}

/* One step per computing node, in node order, then the ASSIGNs. */
static void check_steps(const Plan *pl, const PlanGraph *pg)
{
    const IrGraph *g = pg->ir;
    int computing = 0, assigns = 0, last = -1;
    for (int id = 0; id < g->nnodes; id++) {
        IrOp op = g->nodes[id].op;
        if (op == IR_ASSIGN) assigns++;
        else if (op != IR_INPUT && op != IR_READ && op != IR_CONST && op != IR_RESHAPE) computing++;
    }
    CHECK_EQ_INT(pg->nsteps, computing + assigns);
    bool in_assigns = false;
    for (int s = 0; s < pg->nsteps; s++) {
        const PlanStep *st = &pg->steps[s];
        bool assign = g->nodes[st->node].op == IR_ASSIGN;
        CHECK(!in_assigns || assign);   /* nothing computes after the first copy */
        if (!assign) {
            CHECK(st->node > last);
            last = st->node;
        }
        in_assigns |= assign;
        CHECK((st->kind == STEP_GEMM) == (g->nodes[st->node].op == IR_MATMUL));
        if (st->kind != STEP_LAUNCH) continue;
        const PlanLaunch *l = &st->launch;
        CHECK(l->kernel >= 0 && l->kernel < pl->nkernels);
        CHECK_EQ_INT(l->nargs, pl->kernels[l->kernel].nparams);
        for (int a = 0; a < l->nargs; a++)
            if (l->arg[a].kind == ARG_BUFFER)
                CHECK(pl->buffers[l->arg[a].index].alias_of == -1);
    }
}

static void check_kernels(const Plan *pl, const char *net)
{
    for (int k = 0; k < pl->nkernels; k++) {
        const PlanKernel *kn = &pl->kernels[k];
        CHECK(is_identifier(kn->name));
        for (int j = 0; j < k; j++) CHECK(strcmp(kn->name, pl->kernels[j].name) != 0);
        CHECK(strstr(kn->source, kn->name) != NULL);
        CHECK(strstr(kn->source, "Batch_Size") == NULL);
        /* no line of the .net file, not even a part of one, reaches a kernel */
        for (const char *line = net; *line;) {
            const char *end = strchr(line, '\n');
            while (*line == ' ') line++;
            int len = (int)(end - line);
            if (len >= 8) {
                char text[128];
                snprintf(text, sizeof text, "%.*s", len < 127 ? len : 127, line);
                if (strstr(kn->source, text)) {
                    fprintf(stderr, "kernel %s contains .net text '%s'\n", kn->name, text);
                    CHECK(false);
                }
            }
            line = end + 1;
        }
    }
    static const char *const data[PDK_NUM] = { "cgc_order_draws", "cgc_order_shuffle",
                                              "cgc_gather_f32", "cgc_gather_i32",
                                              "cgc_track_loss", "cgc_track_eval",
                                              "cgc_step_advance" };
    for (int i = 0; i < PDK_NUM; i++) {
        int k = pl->data_kernel[i];
        CHECK(k >= 0 && k < pl->nkernels);   /* a data kernel the plan lacks: -1 */
        if (k >= 0 && k < pl->nkernels) CHECK_STR(pl->kernels[k].name, data[i]);
    }
}

static void test_weird_names(void)
{
    Source *src = source_from_string("we ird$.net", weird_net, sizeof weird_net - 1);
    IrProgram *p = pipeline_compile(src, NULL, 0);
    CHECK(p != NULL);
    if (!p) return;
    Plan *pl = plan_build(p, PLAN_EAGER, "/some/dir/we ird$.net", NULL);
    CHECK_STR(pl->source_name, "we_ird_.net");
    CHECK(pl->graph[PG_TRAIN].ir == &p->train && pl->graph[PG_EVAL].ir == &p->eval);
    CHECK(pl->graph[PG_TRAIN_MICRO].ir == NULL);
    CHECK(plan_graph_of(pl, &p->forward) == &pl->graph[PG_FORWARD]);
    for (int g = 0; g < PG_NUM; g++) {
        if (!pl->graph[g].ir) continue;
        check_buffers(pl, &pl->graph[g]);
        check_steps(pl, &pl->graph[g]);
    }
    check_kernels(pl, weird_net);
    /* a shared kernel: the forward and eval relu of __global__ are the train one */
    int relu = -1;
    for (int k = 0; k < pl->nkernels; k++)
        if (strcmp(pl->kernels[k].name, "relu___global__") == 0) relu = k;
    CHECK(relu >= 0);
    if (relu >= 0) CHECK(strstr(pl->kernels[relu].source, "(eval graph, node %") != NULL);
    /* bf16 storage: the relu reads and writes 16-bit patterns */
    if (relu >= 0) CHECK(strstr(pl->kernels[relu].source, "cgc_bf16 *__restrict__ out") != NULL);
    int64_t symmax[IR_MAX_SYMBOLS] = { 32 };
    CHECK_EQ_INT(plan_buffer_bytes(pl, pl->input_buffer[0], symmax), 32 * 8 * 4);
    CHECK_EQ_INT(plan_buffer_bytes(pl, pl->graph[PG_TRAIN].node_buffer[0], symmax), 0);
    char *module = plan_module_source(pl);
    CHECK(strncmp(module, plan_device_prelude, strlen(plan_device_prelude)) == 0);
    CHECK(strstr(module, "cgc_track_eval(") != NULL);
    free(module);
    plan_free(pl);
    ir_program_free(p);
    source_free(src);
}

/* t0 := t1 and t1 := t0 (a swap: both values are views of assigned tensors), t2 := t2
 * (nothing to copy), t3 := t0 + 1. */
static void test_assign_aliasing(void)
{
    IrProgram *p = ir_program_new();
    p->model_name = xstrdup("swap");
    Shape s = { .rank = 1, .dim = { 4 } };
    SrcLoc loc = { 3, 1 };
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "t%d", i);
        ir_add_tensor(p, name, IR_PARAM, s, IR_INIT_ZEROS, 0, -1, loc);
    }
    IrGraph *g = &p->train;
    int r0 = ir_read(g, p, 0, loc), r1 = ir_read(g, p, 1, loc), r2 = ir_read(g, p, 2, loc);
    int sum = ir_binary(g, IR_ADD, r0, ir_const(g, 1.0, loc), loc);
    ir_assign(g, p, 0, r1, loc);
    ir_assign(g, p, 1, r0, loc);
    ir_assign(g, p, 2, r2, loc);
    ir_assign(g, p, 3, sum, loc);
    Plan *pl = plan_build(p, PLAN_EAGER, "swap.net", NULL);
    const PlanGraph *pg = &pl->graph[PG_TRAIN];
    CHECK(pl->graph[PG_EVAL].ir == NULL && pl->graph[PG_FORWARD].ir == NULL);
    /* add, save t1, save t0, assign t0, assign t1, assign t3 */
    CHECK_EQ_INT(pg->nsteps, 6);
    if (pg->nsteps == 6) {
        CHECK(strncmp(pg->steps[0].what, "add", 3) == 0);
        CHECK_STR(pg->steps[1].what, "save t1");
        CHECK_STR(pg->steps[2].what, "save t0");
        CHECK_STR(pg->steps[3].what, "assign t0");
        CHECK_STR(pg->steps[4].what, "assign t1");
        CHECK_STR(pg->steps[5].what, "assign t3");
        /* each assign reads the saved copy, not the tensor the other one overwrites */
        const PlanLaunch *save1 = &pg->steps[1].launch, *as0 = &pg->steps[3].launch;
        CHECK_EQ_INT(save1->arg[1].index, pl->tensor_buffer_base + 1);
        CHECK_EQ_INT(as0->arg[0].index, pl->tensor_buffer_base + 0);
        CHECK_EQ_INT(as0->arg[1].index, save1->arg[0].index);
        /* the constant is inlined: the add kernel takes only out and in_a */
        CHECK_EQ_INT(pl->kernels[pg->steps[0].launch.kernel].nparams, 2);
        CHECK(strstr(pl->kernels[pg->steps[0].launch.kernel].source, "const float b = 1.0f;") != NULL);
    }
    plan_free(pl);
    ir_program_free(p);
}

/* The default plan of a hand-grouped graph: group 1 (pointwise) scales t0, takes exp and
 * assigns it back to t0 in place; group 2 (reduce) sums -t1; an eager add reads the exp.
 * Only values read outside their group get buffers, the in-place ASSIGN needs no copy,
 * and with both groups in one multi-tensor set they are one launch. */
static IrProgram *grouped_program(int multi)
{
    IrProgram *p = ir_program_new();
    p->model_name = xstrdup("grouped");
    Shape s = { .rank = 1, .dim = { 4 } };
    SrcLoc loc = { 3, 1 }, loc2 = { 4, 1 };
    ir_add_tensor(p, "t0", IR_PARAM, s, IR_INIT_ZEROS, 0, -1, loc);
    ir_add_tensor(p, "t1", IR_PARAM, s, IR_INIT_ZEROS, 0, -1, loc);
    IrGraph *g = &p->train;
    int r0 = ir_read(g, p, 0, loc);
    int m = ir_binary(g, IR_MUL, r0, ir_const(g, 2.0, loc), loc);
    int e = ir_unary(g, IR_EXP, m, loc);
    int a = ir_assign(g, p, 0, e, loc);
    int r1 = ir_read(g, p, 1, loc2);
    int n = ir_unary(g, IR_NEG, r1, loc2);
    int sum = ir_reduce(g, IR_SUM, n, IR_AXIS_ALL, loc2);
    ir_binary(g, IR_ADD, e, r1, loc2);
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++) g->output[r] = -1;
    g->output[IR_OUT_LOSS] = sum;
    int k1 = ir_add_group(g, &(IrGroup){ .kind = IR_GROUP_POINTWISE, .name = "scale_exp",
                                         .work = s, .multi = multi });
    int k2 = ir_add_group(g, &(IrGroup){ .kind = IR_GROUP_REDUCE, .name = "neg_sum", .work = s,
                                         .axis = IR_AXIS_ALL, .multi = multi });
    g->nodes[m].group = g->nodes[e].group = g->nodes[a].group = k1;
    g->nodes[n].group = g->nodes[sum].group = k2;
    return p;
}

static void test_fused_plan(void)
{
    IrProgram *p = grouped_program(0);
    Plan *pl = plan_build(p, PLAN_DEFAULT, "grouped.net", NULL);
    const PlanGraph *pg = &pl->graph[PG_TRAIN];
    /* nodes: r0 c m e assign r1 neg sum add */
    CHECK_EQ_INT(pg->node_buffer[2], -1);   /* m: registers only */
    CHECK(pg->node_buffer[3] >= 0);         /* e: the add reads it */
    CHECK_EQ_INT(pg->node_buffer[4], -1);   /* the in-place ASSIGN */
    CHECK_EQ_INT(pg->node_buffer[6], -1);   /* neg: only the sum reads it */
    CHECK(pg->node_buffer[7] >= 0);         /* the sum: a graph output */
    CHECK_EQ_INT(pg->nsteps, 3);            /* two fused kernels and the add; no copy */
    if (pg->nsteps == 3) {
        const PlanKernel *k1 = &pl->kernels[pg->steps[0].launch.kernel];
        const PlanKernel *k2 = &pl->kernels[pg->steps[1].launch.kernel];
        CHECK_EQ_INT(pg->steps[0].group, 1);
        CHECK_EQ_INT(pg->steps[1].group, 2);
        CHECK_EQ_INT(pg->steps[2].group, 0);
        CHECK_STR(k1->name, "scale_exp");
        CHECK_STR(k2->name, "neg_sum");
        CHECK(strstr(k1->source, "grouped.net line 3: mul, exp, assign (train graph, nodes %2..%4)"));
        CHECK(strstr(k1->source, "const float v0 = x0 * 2.0f;   /* mul */"));
        CHECK(strstr(k1->source, "const float v1 = exp(v0);   /* exp */"));
        CHECK(strstr(k1->source, "/* in place */"));
        /* out0 is e's buffer, out1 the tensor t0 */
        CHECK_EQ_INT(pg->steps[0].launch.arg[1].index, pl->tensor_buffer_base + 0);
        CHECK(strstr(k2->source, "acc0 += (double)v0;") && strstr(k2->source, "cgc_block_sum(acc0)"));
    }
    plan_free(pl);
    ir_program_free(p);
    p = grouped_program(1);
    pl = plan_build(p, PLAN_DEFAULT, "grouped.net", NULL);
    pg = &pl->graph[PG_TRAIN];
    CHECK_EQ_INT(pg->nsteps, 2);   /* one launch for both groups, then the add */
    if (pg->nsteps == 2) {
        const PlanKernel *k = &pl->kernels[pg->steps[0].launch.kernel];
        CHECK_STR(k->name, "scale_exp_x2");
        CHECK_EQ_INT(pg->steps[0].group, 1);
        /* a virtual block for the 4 elements, one for the sum's row */
        CHECK(strstr(k->source, "for (int64_t vb = blockIdx.x; vb < 2; vb += gridDim.x)"));
        CHECK(strstr(k->source, "grouped.net line 4: neg, sum (train graph, nodes %6..%7)"));
    }
    plan_free(pl);
    ir_program_free(p);
}

/* A fused f16 value is rounded in its register where the CPU executor would store it,
 * so the next member computes with the same number. */
static void test_fused_rounding(void)
{
    IrProgram *p = ir_program_new();
    p->model_name = xstrdup("half");
    Shape s = { .rank = 1, .dim = { 4 } };
    SrcLoc loc = { 2, 1 };
    ir_add_tensor(p, "t", IR_PARAM, s, IR_INIT_ZEROS, 0, -1, loc);
    IrGraph *g = &p->train;
    int half = ir_cast(g, ir_read(g, p, 0, loc), DT_F16, loc);
    int e = ir_unary(g, IR_EXP, half, loc);
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++) g->output[r] = -1;
    g->output[IR_OUT_PREDICTION] = e;
    int k = ir_add_group(g, &(IrGroup){ .kind = IR_GROUP_POINTWISE, .name = "cast_exp", .work = s });
    g->nodes[half].group = g->nodes[e].group = k;
    Plan *pl = plan_build(p, PLAN_DEFAULT, "half.net", NULL);
    const PlanGraph *pg = &pl->graph[PG_TRAIN];
    CHECK_EQ_INT(pg->nsteps, 1);
    CHECK_EQ_INT(pg->node_buffer[half], -1);
    if (pg->nsteps == 1) {
        const char *src = pl->kernels[pg->steps[0].launch.kernel].source;
        CHECK(strstr(src, "const float v0 = cgc_round_f16(x0);   /* cast */") != NULL);
        CHECK(strstr(src, "const float v1 = cgc_round_f16(exp(v0));   /* exp */") != NULL);
        CHECK(strstr(src, "cgc_half *__restrict__ out0") != NULL);
    }
    plan_free(pl);
    ir_program_free(p);
}

static void test_emit_errors(void)
{
    const char *file = tmp_path("a_file");
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);   /* the file in the way of the directory below */
    if (!f) return;
    fputs("x", f);
    fclose(f);
    IrProgram *p = ir_program_new();
    p->model_name = xstrdup("empty");
    Plan *pl = plan_build(p, PLAN_EAGER, "empty.net", NULL);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/sub", file);
    capture_start();
    int rc = plan_emit(pl, dir, NULL, 0);
    const char *err = capture_end();
    CHECK_EQ_INT(rc, -1);
    CHECK(strstr(err, "cgc: error: ") != NULL && strstr(err, "a_file") != NULL);
    /* mkdir -p of a fresh nested path works, and writes the prelude and the plan */
    rc = plan_emit(pl, tmp_path("x/y/z"), NULL, 0);
    CHECK_EQ_INT(rc, 0);
    struct stat st;
    CHECK(stat(tmp_path("x/y/z/cgc_device.h"), &st) == 0 && st.st_size > 1000);
    CHECK(stat(tmp_path("x/y/z/host_plan.txt"), &st) == 0);
    CHECK(stat(tmp_path("x/y/z/cgc_track_loss.cu"), &st) == 0);
    plan_free(pl);
    ir_program_free(p);
}

/* Dropout reads the micro-step: a default plan passes it as a float; a reduce-overhead
 * plan's train graphs read it from the step counter, and nothing else changes. */
static const char dropout_net[] =
    "model drop {\n"
    "    input x: f32[B, 8]\n"
    "    input y: i32[B]\n"
    "    h = dropout(relu(linear(x, 16)), 0.25)\n"
    "    out = linear(h, 4)\n"
    "    output out\n"
    "    loss cross_entropy(out, y)\n"
    "}\n"
    "train {\n"
    "    data = synthetic(samples = 64)\n"
    "    batch = 8\n"
    "    accumulate = 2\n"
    "    optimizer = sgd(lr = 0.1)\n"
    "}\n";

/* Launches of graph G that pass the micro-step as a float, and that pass the buffer B. */
static void count_step_args(const Plan *pl, PlanGraphId g, int b, int *as_float, int *as_buffer)
{
    *as_float = *as_buffer = 0;
    const PlanGraph *pg = &pl->graph[g];
    for (int i = 0; i < pg->nsteps; i++) {
        const PlanLaunch *l = &pg->steps[i].launch;
        if (pg->steps[i].kind != STEP_LAUNCH) continue;
        for (int a = 0; a < l->nargs; a++) {
            *as_float += l->arg[a].kind == ARG_RUNTIME && l->arg[a].index == IR_RT_MICRO_STEP;
            *as_buffer += b >= 0 && l->arg[a].kind == ARG_BUFFER && l->arg[a].index == b;
        }
    }
}

static void test_reduce_overhead_plan(void)
{
    Source *src = source_from_string("drop.net", dropout_net, sizeof dropout_net - 1);
    IrProgram *p = pipeline_compile(src, NULL, 0);
    CHECK(p != NULL);
    if (!p) return;
    Plan *def = plan_build(p, PLAN_DEFAULT, "drop.net", NULL);
    Plan *ro = plan_build(p, PLAN_REDUCE_OVERHEAD, "drop.net", NULL);
    CHECK_EQ_INT(def->step_state, -1);
    CHECK(ro->step_state >= 0);
    if (ro->step_state < 0) goto out;
    const PlanBuffer *st = &ro->buffers[ro->step_state];
    CHECK(st->kind == PB_STEP && st->dtype == DT_I32 && st->shape.rank == 1 &&
          st->shape.dim[0] == 4);
    /* a kernel shared by a train graph and another graph may split in two */
    CHECK(ro->nkernels >= def->nkernels);
    for (int g = PG_TRAIN; g <= PG_TRAIN_MICRO; g++) {
        int f, b;
        count_step_args(def, (PlanGraphId)g, -1, &f, &b);
        CHECK(f > 0);
        count_step_args(ro, (PlanGraphId)g, ro->step_state, &f, &b);
        CHECK_EQ_INT(f, 0);
        CHECK(b > 0);
        CHECK_EQ_INT(ro->graph[g].nsteps, def->graph[g].nsteps);
    }
    bool reads = false;
    for (int k = 0; k < ro->nkernels; k++)
        reads = reads || strstr(ro->kernels[k].source, "const int64_t *") != NULL;
    CHECK(reads);
    CHECK_STR(plan_mode_name(ro->mode), "reduce-overhead");
out:
    plan_free(def);
    plan_free(ro);
    ir_program_free(p);
    source_free(src);
}

/* The plan's hash (what a tuning file is checked against) changes with every field
 * that decides what a step runs: a GEMM's sizes, transposes, types and epilogue (its
 * bias included), a launch's grid, a kernel's source and block. Each field of one
 * step or kernel is changed in turn and put back. */
static void test_plan_hash(void)
{
    static const char net[] =
        "model hashed {\n    input x: f32[B, 8]\n    input y: i32[B]\n"
        "    h = relu(linear(x, 16))\n    out = linear(h, 4)\n    output out\n"
        "    loss cross_entropy(out, y)\n}\n"
        "train {\n    data = synthetic(samples = 64)\n    batch = 8\n    precision = bf16\n}\n";
    Source *src = source_from_string("hashed.net", net, sizeof net - 1);
    Override ov[1] = {{"precision", "precision", "bf16"}};
    IrProgram *p = pipeline_compile(src, ov, 1);
    CHECK(p != NULL);
    if (!p) return;
    fusion_assign(p);
    Plan *pl = plan_build(p, PLAN_DEFAULT, "hashed.net", NULL);
    const uint64_t h0 = plan_hash(pl);
    PlanGemm *gm = NULL;
    PlanLaunch *launch = NULL;
    for (int i = 0; i < pl->graph[PG_TRAIN].nsteps; i++) {
        PlanStep *st = &pl->graph[PG_TRAIN].steps[i];
        if (st->kind == STEP_GEMM && st->gemm.bias >= 0 && !gm) gm = &st->gemm;
        if (st->kind == STEP_LAUNCH && !launch) launch = &st->launch;
    }
    CHECK(gm != NULL && launch != NULL);   /* linear's bias add is a GEMM epilogue here */
    if (!gm || !launch) goto out;
#define CHANGES(field, value)                                                       \
    do {                                                                            \
        __typeof__(field) saved_ = (field);                                         \
        (field) = (value);                                                          \
        if (plan_hash(pl) == h0) fprintf(stderr, "plan_hash ignores " #field "\n"); \
        CHECK(plan_hash(pl) != h0);                                                 \
        (field) = saved_;                                                           \
    } while (0)
    CHANGES(gm->m, gm->m + 1);
    CHANGES(gm->n, gm->n + 1);
    CHANGES(gm->k, gm->k + 1);
    CHANGES(gm->trans_a, !gm->trans_a);
    CHANGES(gm->trans_b, !gm->trans_b);
    CHANGES(gm->a_type, gm->a_type == DT_F32 ? DT_BF16 : DT_F32);
    CHANGES(gm->c_type, gm->c_type == DT_F32 ? DT_BF16 : DT_F32);
    CHANGES(gm->epilogue, gm->epilogue == GEMM_EPI_BIAS ? GEMM_EPI_RELU_BIAS : GEMM_EPI_BIAS);
    CHANGES(gm->bias, -1);
    CHANGES(launch->items_per_block, launch->items_per_block + 1);
    CHANGES(launch->max_blocks, launch->max_blocks + 1);
    CHANGES(pl->kernels[launch->kernel].block, pl->kernels[launch->kernel].block * 2);
    char *edited = xstrdup(pl->kernels[launch->kernel].source);
    edited[0] = edited[0] == ' ' ? '\t' : ' ';
    CHANGES(pl->kernels[launch->kernel].source, edited);
    free(edited);
#undef CHANGES
    CHECK(plan_hash(pl) == h0);   /* everything put back */
out:
    plan_free(pl);
    ir_program_free(p);
    source_free(src);
}

/* A model of N chained layers relu(linear(h, 8)), adam, fp16 and clipping: every
 * parameter's update in one multi-tensor launch, had a kernel room for them all. */
static char *deep_net(int n)
{
    size_t cap = (size_t)n * 64 + 512, len = 0;
    char *s = malloc(cap);
    len += (size_t)snprintf(s + len, cap - len, "model deep {\n    input x: f32[N, 8]\n"
                            "    input y: i32[N]\n    h0 = x\n");
    for (int i = 1; i <= n; i++)
        len += (size_t)snprintf(s + len, cap - len, "    h%d = relu(linear(h%d, 8))\n", i, i - 1);
    snprintf(s + len, cap - len, "    out = linear(h%d, 3)\n    output out\n"
             "    loss cross_entropy(out, y)\n}\ntrain {\n    optimizer = adam(lr = 1e-3)\n"
             "    precision = fp16\n    clip_norm = 1.0\n}\n", n);
    return s;
}

/* Launches of graph G whose kernel's name starts with PREFIX and contains PART. */
static int count_launches(const Plan *pl, PlanGraphId g, const char *prefix, const char *part)
{
    int n = 0;
    for (int i = 0; i < pl->graph[g].nsteps; i++) {
        const PlanStep *st = &pl->graph[g].steps[i];
        if (st->kind != STEP_LAUNCH) continue;
        const char *name = pl->kernels[st->launch.kernel].name;
        n += strncmp(name, prefix, strlen(prefix)) == 0 && strstr(name, part) != NULL;
    }
    return n;
}

/* Bytes of kernel K's parameters as CUDA lays them out: each at its size's alignment; a
 * packed kernel's one array of 8-byte slots. */
static size_t param_bytes(const PlanKernel *k)
{
    size_t bytes = 0;
    for (int i = 0; i < k->nparams; i++) {
        size_t size = k->packed || strchr(k->param_ctype[i], '*') ? 8 : k->param[i] == PP_F32 ? 4 : 8;
        bytes = (bytes + size - 1) / size * size + size;
    }
    return bytes;
}

/* 200 layers: 402 parameters, whose updates take more slots than one kernel has
 * (PLAN_MAX_SLOTS). The updates' multi-tensor launch is split into several packed
 * kernels, each within CUDA's bytes of parameters, and every step passes what its
 * kernel takes; max-autotune's fused MLP runs stop at PLAN_MLP_MAX_LAYERS. */
static void test_wide_plan(void)
{
    char *text = deep_net(200);
    Source *src = source_from_string("deep.net", text, strlen(text));
    IrProgram *p = pipeline_compile(src, NULL, 0);
    CHECK(p != NULL);
    if (!p) goto out;
    fusion_assign(p);
    const PlanMode modes[] = { PLAN_DEFAULT, PLAN_MAX_AUTOTUNE };
    for (int m = 0; m < 2; m++) {
        Plan *pl = plan_build(p, modes[m], "deep.net", NULL);
        for (int k = 0; k < pl->nkernels; k++) {
            const PlanKernel *kn = &pl->kernels[k];
            CHECK(kn->nparams <= (kn->packed ? PLAN_MAX_SLOTS : PLAN_MAX_PARAMS));
            CHECK(param_bytes(kn) <= PLAN_MAX_PARAM_BYTES);
        }
        for (int g = 0; g < PG_NUM; g++)
            for (int i = 0; i < pl->graph[g].nsteps; i++) {
                const PlanStep *st = &pl->graph[g].steps[i];
                if (st->kind == STEP_LAUNCH)
                    CHECK_EQ_INT(st->launch.nargs, pl->kernels[st->launch.kernel].nparams);
            }
        CHECK(count_launches(pl, PG_TRAIN, "adam", "_x") >= 2);
        for (int r = 0; r < pl->nmlps; r++) CHECK(pl->mlps[r].nlayers <= PLAN_MLP_MAX_LAYERS);
        plan_free(pl);
    }
    ir_program_free(p);
out:
    source_free(src);
    free(text);
}

/* An optimizer's values that are the same for every element (the schedule's step size,
 * the bias corrections, the clipping factor: pow, cos and divisions of single-element
 * tensors) are computed once before a segment's loop, not again for each element. */
static void test_uniform_hoisted(void)
{
    static const char net[] =
        "model u {\n"
        "    input x: f32[N, 8]\n"
        "    input y: i32[N]\n"
        "    h = relu(linear(x, 16))\n"
        "    logits = linear(h, 4)\n"
        "    output logits\n"
        "    loss cross_entropy(logits, y)\n"
        "}\n"
        "train {\n"
        "    batch = 8\n"
        "    optimizer = adamw(lr = 1e-3, weight_decay = 1e-4)\n"
        "    schedule = cosine(warmup = 20)\n"
        "    clip_norm = 1.0\n"
        "}\n";
    Source *src = source_from_string("u.net", net, strlen(net));
    IrProgram *p = pipeline_compile(src, NULL, 0);
    CHECK(p != NULL);
    if (!p) goto out;
    fusion_assign(p);
    Plan *pl = plan_build(p, PLAN_DEFAULT, "u.net", NULL);
    int updates = 0;
    for (int k = 0; k < pl->nkernels; k++) {
        const char *text = pl->kernels[k].source;
        if (!strstr(text, "pow(")) continue;   /* the update's bias corrections */
        updates++;
        for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
            const char *end = strchr(line, '\n');
            int len = end ? (int)(end - line) : (int)strlen(line);
            bool scalar = strstr(line, "pow(") && (!end || strstr(line, "pow(") < end);
            bool first_element = strstr(line, "[0])") && (!end || strstr(line, "[0])") < end);
            const char *code = line + strspn(line, " ");   /* a statement before the loop */
            if ((scalar || first_element) && strncmp(code, "const float u", 13) != 0) {
                fprintf(stderr, "  %s: in the element loop: %.*s\n", pl->kernels[k].name, len, line);
                CHECK(false);
            }
        }
    }
    CHECK(updates >= 1);
    plan_free(pl);
    ir_program_free(p);
out:
    source_free(src);
}

/* A GEMM whose operand must be copied first (an f16 input times f32 weights meet in f32)
 * comes after the copy that writes it, in every graph (the copy used to be planned after
 * the GEMM, which then read a buffer nothing had written yet). */
static void test_gemm_operand_copies_first(void)
{
    static const char net[] = "model m {\n    input x: f16[N, 8]\n    input y: i32[N]\n"
                              "    h = linear(x, 4)\n    output h\n    loss cross_entropy(h, y)\n}\n";
    Source *src = source_from_string("f16_input.net", net, sizeof net - 1);
    IrProgram *p = pipeline_compile(src, NULL, 0);
    CHECK(p != NULL);
    Plan *pl = p ? plan_build(p, PLAN_EAGER, "f16_input.net", NULL) : NULL;
    int copies = 0;
    for (int g = 0; pl && g < PG_NUM; g++) {
        const PlanGraph *pg = &pl->graph[g];
        for (int i = 0; pg->ir && i < pg->nsteps; i++) {
            if (pg->steps[i].kind != STEP_GEMM) continue;
            int ops[2] = { pg->steps[i].gemm.a, pg->steps[i].gemm.b };
            for (int o = 0; o < 2; o++) {
                const char *what = pl->buffers[ops[o]].what;
                size_t n = strlen(what);
                if (n < 2 || (strcmp(what + n - 2, ".a") != 0 && strcmp(what + n - 2, ".b") != 0))
                    continue;   /* not a copy */
                copies++;
                int writer = -1;
                for (int j = 0; j < pg->nsteps && writer < 0; j++)
                    for (int a = 0; pg->steps[j].kind == STEP_LAUNCH && a < pg->steps[j].launch.nargs; a++)
                        if (pg->steps[j].launch.arg[a].kind == ARG_BUFFER &&
                            pg->steps[j].launch.arg[a].index == ops[o])
                            writer = j;
                CHECK(writer >= 0 && writer < i);
            }
        }
    }
    CHECK(copies > 0);
    plan_free(pl);
    ir_program_free(p);
    source_free(src);
}

int main(void)
{
    test_gemm_operand_copies_first();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cgc_codegen_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_weird_names();
    test_assign_aliasing();
    test_fused_plan();
    test_fused_rounding();
    test_reduce_overhead_plan();
    test_plan_hash();
    test_wide_plan();
    test_uniform_hoisted();
    test_emit_errors();
    int rc = check_result();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return rc;
}
