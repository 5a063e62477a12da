/* test_precision.c: the precision pass (compiler/precision.c) against torch.autocast's
 * own rules, written out here rather than read from the op table, so that a wrong row of
 * compiler/ops.def fails.
 *
 * For each op, a tiny forward graph feeds it the output of a matrix product (which
 * autocast runs in the half type), runs precision_assign under bf16 and under fp16, and
 * checks the dtype of the op's inputs afterwards:
 *   - torch.autocast's float32 list (the CUDA autocast docs, "CUDA Ops that can autocast
 *     to float32"), as far as cgc has the op: exp, log, rsqrt, softplus, pow, sum, mean,
 *     softmax, log_softmax: inputs cast to f32;
 *   - ops autocast leaves alone (relu, tanh, gelu, neg, an add of two products): inputs
 *     stay in the half type;
 *   - matmul: inputs in the half type.
 * Under fp32 nothing changes type.
 */
#include "check.h"
#include "compiler/passes.h"

static const SrcLoc L0 = {1, 1};

typedef enum Want { WANT_F32, WANT_HALF } Want;

/* A program whose forward graph computes OP of x @ w (a binary OP: of it and another
 * product; MATMUL: the product itself); the op's node id through *OP_ID. */
static IrProgram *program_of(IrOp op, Precision precision, int *op_id)
{
    IrProgram *p = ir_program_new();
    IrGraph *g = &p->forward;
    p->model_name = xstrdup("precision");
    p->cfg.precision = precision;
    ir_add_symbol(p, "N", L0);
    int x = ir_input(g, p, ir_add_input(p, "x", DT_F32, (Shape){2, {IR_SYM(0), 4}}, L0), L0);
    int w = ir_read(g, p, ir_add_tensor(p, "w", IR_PARAM, (Shape){2, {4, 6}}, IR_INIT_UNIFORM,
                                         0.5, -1, L0), L0);
    int h = ir_matmul(g, x, w, 0, L0);
    switch (op == IR_MATMUL ? IR_CLASS_MATMUL : ir_op_info[op].cls) {
    case IR_CLASS_MATMUL: *op_id = h; break;
    case IR_CLASS_REDUCE: *op_id = ir_reduce(g, op, h, 1, L0); break;
    case IR_CLASS_BINARY: *op_id = ir_binary(g, op, h, ir_matmul(g, x, w, 0, L0), L0); break;
    default:
        *op_id = ir_op_info[op].family == IR_FAMILY_SOFTMAX ? ir_softmax(g, op, h, 1, L0)
                                                            : ir_unary(g, op, h, L0);
    }
    g->output[IR_OUT_PREDICTION] = *op_id;
    return p;
}

/* The dtype of input K of the node in the precision pass's graph that OP became: the
 * last node of that op (the pass rebuilds the graph in order). */
static DType input_type(const IrGraph *g, IrOp op, int k)
{
    for (int id = g->nnodes - 1; id >= 0; id--)
        if (g->nodes[id].op == op) return g->nodes[g->nodes[id].in[k]].dtype;
    return DT_I32;   /* not found: no float type, so every check fails */
}

static void check_op(IrOp op, Want want)
{
    static const Precision halves[] = {PREC_BF16, PREC_FP16};
    static const DType half_type[] = {DT_BF16, DT_F16};
    for (int h = 0; h < 2; h++) {
        int id;
        IrProgram *p = program_of(op, halves[h], &id);
        precision_assign(p);
        DType expect = want == WANT_F32 ? DT_F32 : half_type[h];
        for (int k = 0; k < ir_op_info[op].arity; k++) {
            DType got = input_type(&p->forward, op, k);
            if (got != expect)
                fprintf(stderr, "%s under %s: input %d is %s, want %s\n", ir_op_name(op),
                        config_precision_name(halves[h]), k, ir_dtype_name(got),
                        ir_dtype_name(expect));
            CHECK(got == expect);
        }
        ir_program_free(p);
    }
    int id;
    IrProgram *p = program_of(op, PREC_FP32, &id);
    precision_assign(p);
    CHECK(input_type(&p->forward, op, 0) == DT_F32);
    ir_program_free(p);
}

int main(void)
{
    static const IrOp f32_ops[] = {IR_EXP, IR_LOG, IR_RSQRT, IR_SOFTPLUS, IR_POW, IR_SUM,
                                   IR_MEAN, IR_SOFTMAX, IR_LOG_SOFTMAX};
    static const IrOp half_ops[] = {IR_RELU, IR_TANH, IR_GELU, IR_NEG, IR_ADD, IR_MATMUL};
    for (size_t i = 0; i < sizeof f32_ops / sizeof *f32_ops; i++) check_op(f32_ops[i], WANT_F32);
    for (size_t i = 0; i < sizeof half_ops / sizeof *half_ops; i++) check_op(half_ops[i], WANT_HALF);
    return check_result();
}
