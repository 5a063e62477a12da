/* test_emu_ops.c: every elementwise op and every reduction of compiler/ops.def on its
 * own, rendered for CUDA, compiled by NVRTC and run on the CUDA emulation against the CPU
 * executor. The ops come from the table (its rows with an expression, of the unary,
 * binary and ternary classes, and its rows of FUSE REDUCTION), so a new row is tested
 * without a line here.
 *
 * One program holds them all: for each storage type (f32, f16, bf16) the operands are
 * parameters cast to the type, and each op is applied to signed operands and to positive
 * ones (so that log, sqrt and pow meet their domain, and NaN where they leave it); binary
 * ops broadcast a [C] operand over an [R, C] one, select an [R, 1] condition of zeros and
 * ones. Two shapes: [5, 37], within one block, and [65, 131], whose 8515 elements end
 * inside a block of CUDA_BLOCK * CUDA_ITEMS_PER_THREAD (1024) and inside a warp, with rows
 * that are no multiple of 8, 16 or 128 long. A reduction along an axis (SUM, MEAN, MAX)
 * reduces both matrices along each axis and whole; one to a shape (REDUCE_TO), each to a
 * row and to a column. The train graph is planned twice: eager (each op its own kernel)
 * and default with each op a group of its own (the fused renderer: pointwise, or reduce);
 * each module is compiled by NVRTC for sm_90 and run on the emulation. Both executors
 * compute elementwise ops in f32 and round stores to the node's type, so every value must
 * agree bit for bit (NaN with NaN); both sum in double, in orders of their own, so a sum
 * or mean may differ by one unit in the last place of its type.
 *
 *     test_emu_ops [--asan]
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/plan.h"
#include "runtime/cpu/exec.h"
#include "runtime/devexec.h"
#include "runtime/device.h"
#include "base/rng.h"
#include "tests/check.h"
#include "tests/emu/emu_device.h"

enum { MAX_OPS = 64 * 6 };
static const SrcLoc L0 = {1, 1};
static const DType types[] = {DT_F32, DT_F16, DT_BF16};
enum { NTYPES = sizeof types / sizeof types[0] };

/* The parameters: signed and positive operands of both shapes, and the condition. */
enum { SIGNED_MAT, SIGNED_ROW, POSITIVE_MAT, POSITIVE_ROW, COND, NPARAMS };

typedef struct OpsProgram {
    IrProgram *p;
    int64_t rows, cols;
    int op_node[MAX_OPS];       /* the nodes compared */
    int nops;
    int32_t *index;             /* the i32 input: rows indices into the matrix's rows */
} OpsProgram;

static Shape shape2(int64_t r, int64_t c)
{
    return (Shape){.rank = 2, .dim = {r, c}};
}

/* Node OP over the operands IN (of one type), built as its class's builder does. */
static int apply(IrGraph *g, IrOp op, const int *in)
{
    IrOpClass c = ir_op_info[op].cls;
    if (c == IR_CLASS_UNARY) return ir_unary(g, op, in[0], L0);
    if (c == IR_CLASS_BINARY) return ir_binary(g, op, in[0], in[1], L0);
    return ir_select(g, in[2], in[0], in[1], L0);
}

static bool tested(IrOp op)
{
    IrOpClass c = ir_op_info[op].cls;
    /* CAST is built by ir_cast: the operands' casts to each type are its cases */
    return ir_op_info[op].expr && op != IR_CAST &&
           (c == IR_CLASS_UNARY || c == IR_CLASS_BINARY || c == IR_CLASS_TERNARY);
}

static void add_case(OpsProgram *o, IrGraph *g, int y)
{
    CHECK(o->nops < MAX_OPS);
    if (o->nops < MAX_OPS) o->op_node[o->nops++] = y;
    ir_binary(g, IR_ADD, y, y, L0);   /* a reader outside the op's group */
}

/* Reduction OP of MAT, an [R, C] matrix: along each axis and whole, or to a row and to
 * a column. */
static void reductions(OpsProgram *o, IrGraph *g, IrOp op, int mat)
{
    if (ir_op_reduces_to_shape(op)) {
        add_case(o, g, ir_reduce_to(g, mat, shape2(1, o->cols), L0));
        add_case(o, g, ir_reduce_to(g, mat, shape2(o->rows, 1), L0));
        return;
    }
    static const int axes[] = {1, 0, IR_AXIS_ALL};
    for (size_t a = 0; a < sizeof axes / sizeof *axes; a++) add_case(o, g, ir_reduce(g, op, mat, axes[a], L0));
}

/* Each tested op, per type and sign, stored (read by an add outside its group). */
static void build(OpsProgram *o)
{
    IrProgram *p = o->p = ir_program_new();
    p->model_name = xstrdup("ops");
    IrGraph *g = &p->train;
    int64_t rows = o->rows, cols = o->cols;
    Shape shapes[NPARAMS] = {shape2(rows, cols), shape2(1, cols), shape2(rows, cols), shape2(1, cols),
                             shape2(rows, 1)};
    const char *names[NPARAMS] = {"s", "s_row", "p", "p_row", "c"};
    int read[NPARAMS];
    /* indices that repeat (0, 1, 2, 0, ...) and reach the last row */
    o->index = malloc((size_t)rows * sizeof *o->index);
    for (int64_t k = 0; k < rows; k++) o->index[k] = (int32_t)(k + 1 == rows ? rows - 1 : k % 3);
    int ix = ir_input(g, p, ir_add_input(p, "ix", DT_I32, (Shape){.rank = 1, .dim = {rows}}, L0), L0);
    for (int i = 0; i < NPARAMS; i++)
        read[i] = ir_read(g, p, ir_add_tensor(p, names[i], IR_PARAM, shapes[i], IR_INIT_ZEROS, 0, -1, L0), L0);
    for (int t = 0; t < NTYPES; t++) {
        int in[NPARAMS];
        for (int i = 0; i < NPARAMS; i++) in[i] = ir_cast(g, read[i], types[t], L0);
        for (int op = 0; op < IR_NUM_OPS; op++) {
            for (int positive = 0; positive < 2; positive++) {
                int a = in[positive ? POSITIVE_MAT : SIGNED_MAT], b = in[positive ? POSITIVE_ROW : SIGNED_ROW];
                if (tested(op)) add_case(o, g, apply(g, op, (int[]){a, b, in[COND]}));
                if (ir_op_is_reduction(op)) reductions(o, g, op, a);
            }
        }
        /* a permute of three axes, none of them the last where it was */
        int64_t r0 = rows % 5 == 0 ? 5 : 1;
        int r3 = ir_reshape(g, in[SIGNED_MAT], (Shape){3, {r0, rows / r0, cols}}, L0);
        add_case(o, g, ir_permute(g, r3, (int[]){2, 0, 1}, L0));
        /* the matrix as a table, its rows at the indices; and the matrix's rows added into
         * a table by the indices (row 0 sums every third row, the specials' among them:
         * NaN and inf sums, and the order of a sum shows in its bits) */
        add_case(o, g, ir_embed(g, in[SIGNED_MAT], ix, L0));
        add_case(o, g, ir_embed_grad(g, in[SIGNED_MAT], ix, rows, L0));
        /* the table at the positions 0..rows-1 (arange's kernel); attention's mask over a
         * square of scores, -inf above the diagonal (the outer product of a column with
         * itself: elementwise, so the same bits on both sides, as a GEMM's need not be) */
        add_case(o, g, ir_embed(g, in[SIGNED_MAT], ir_arange(g, rows, L0), L0));
        int row = ir_reshape(g, in[COND], shape2(1, rows), L0);
        int square = ir_binary(g, IR_MUL, in[COND], row, L0);
        add_case(o, g, ir_causal_mask(g, square, -INFINITY, L0));
    }
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++) g->output[r] = -1;
}

/* Default mode's groups: each op alone, a pointwise group of its output's shape or a
 * reduce group of its input's. */
static void group_each_op(OpsProgram *o)
{
    IrGraph *g = &o->p->train;
    for (int k = 0; k < o->nops; k++) {
        IrNode *n = &g->nodes[o->op_node[k]];
        if (ir_node_fuse(n) == IR_FUSE_BARRIER) continue;   /* a kernel of its own */
        char name[64];
        snprintf(name, sizeof name, "%s_%d", ir_op_name(n->op), k);
        IrGroup gr = {.kind = IR_GROUP_POINTWISE, .name = ir_intern(o->p, name), .work = n->shape};
        if (ir_op_is_reduction(n->op)) {
            gr.kind = IR_GROUP_REDUCE;
            gr.work = g->nodes[n->in[0]].shape;
            gr.axis = ir_op_reduces_to_shape(n->op) ? 0 : n->axis;
        }
        n->group = ir_add_group(g, &gr);
    }
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The signed matrix's first elements: what rounding and narrowing must get right bit for
 * bit. NaNs whose payload is only in the low bits (narrowing must keep them NaN), signed
 * zeros and infinities, an f32 subnormal, values past f16's range and at its edge, ties of
 * f16 and bf16 rounding (to even, either way), and f16's smallest subnormal. */
static const uint32_t special_bits[] = {
    0x7f800001u, 0xff800003u, 0x7fc00000u, 0x7f800000u, 0xff800000u, 0x80000000u,
    0x00000000u, 0x00000400u, 0x47880000u /* 69632 */, 0x477fe000u /* 65504 */,
    0x3f808000u /* 1 + 2^-8: bf16 tie */, 0x3f818000u /* 1 + 3 * 2^-8: bf16 tie, up */,
    0x3f801000u /* 1 + 2^-11: f16 tie */, 0x3f803000u /* 1 + 3 * 2^-11: f16 tie, up */,
    0x33800000u /* 2^-24 */, 0xb3000000u /* -2^-25 */,
};
enum { NSPECIAL = sizeof special_bits / sizeof special_bits[0] };

/* Parameter values: signed ones away from 0 (the matrix's first elements the specials
 * above), positive ones in [0.25, 4], conditions 0 or 1; the same for both executors. */
static void fill(const IrProgram *p, int i, float *v)
{
    int64_t n = ir_numel(&p->tensors[i].shape, NULL);
    for (int64_t k = 0; k < n; k++) {
        double u = rng_uniform(5, (uint64_t)i, (uint64_t)k);
        if (i == COND) v[k] = u < 0.5 ? 0.0f : 1.0f;
        else if (i == POSITIVE_MAT || i == POSITIVE_ROW) v[k] = (float)(0.25 + 3.75 * u);
        else if (i == SIGNED_MAT && k < NSPECIAL) v[k] = from_bits(special_bits[k]);
        else v[k] = (float)((u < 0.5 ? -1 : 1) * (0.125 + 4 * fabs(u - 0.5)));
    }
}

static bool same_bits(float c, float d)
{
    return (isnan(c) && isnan(d)) || memcmp(&c, &d, sizeof c) == 0;
}

/* C and D equal, or, for a sum, a unit in the last place of type T apart (2^-23 of the
 * larger for f32, 2^-10 for f16, 2^-7 for bf16). */
static bool agree(float c, float d, const IrNode *n)
{
    if (same_bits(c, d)) return true;
    if (!ir_op_is_reduction(n->op) || ir_op_info[n->op].combine == IR_COMBINE_MAX || !isfinite(c) || !isfinite(d))
        return false;
    double ulp = n->dtype == DT_F16 ? 0x1p-10 : n->dtype == DT_BF16 ? 0x1p-7 : 0x1p-23;
    return fabs((double)c - d) <= ulp * fmax(fabs(c), fabs(d));
}

/* Every tested node of the run on D against the CPU executor's. */
static void compare(const OpsProgram *o, CpuExec *cpu, DevExec *dev, const char *mode)
{
    float *got = malloc((size_t)(o->rows * o->cols) * sizeof *got);
    for (int k = 0; k < o->nops; k++) {
        int id = o->op_node[k];
        const IrNode *n = &o->p->train.nodes[id];
        int64_t cn = 0, dn = 0;
        const float *want = cpu_exec_value(cpu, id, &cn);
        CHECK_EQ_INT(devexec_value(dev, &o->p->train, id, got, &dn), 0);
        CHECK_EQ_INT(dn, cn);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < cn && i < dn; i++)
            if (!agree(want[i], got[i], n) && bad++ == 0) first = i;
        check_count++;
        if (bad) {
            check_failures++;
            fprintf(stderr, "  [%lld, %lld] %s, %s %s (node %%%d): %lld of %lld elements differ; first [%lld]: "
                    "cpu %.9g, device %.9g\n", (long long)o->rows, (long long)o->cols, mode, ir_op_name(n->op), ir_dtype_name(n->dtype), id,
                    (long long)bad, (long long)cn, (long long)first, want[first], got[first]);
        }
    }
    free(got);
}

/* NVRTC compiles the plan's module for sm_90 (no GPU needed; without the CUDA Toolkit,
 * cgc has no NVRTC and this part is left out). */
static void nvrtc_compiles(const Plan *plan)
{
#ifndef CGC_HAVE_NVRTC
    (void)plan;
    return;
#endif
    char *source = plan_module_source(plan);
    CudaCompileResult r = {0};
    CHECK_EQ_INT(cuda_compile(source, plan->p->model_name, &(CudaCompileOptions){.arch = 90}, &r), 0);
    CHECK(r.cubin_size > 0);
    free(r.cubin);
    free(source);
}

static void run_mode(OpsProgram *o, PlanMode mode, bool asan)
{
    const char *name = mode == PLAN_EAGER ? "eager" : "default";
    Plan *plan = plan_build(o->p, mode, "ops.net", NULL);
    nvrtc_compiles(plan);
    char so[256];
    Device *d = NULL;
    int rc = emu_build_plan(plan, asan, so, sizeof so);
    if (rc == 0) rc = emu_device_open(so, &d);
    CHECK_EQ_INT(rc, 0);
    if (rc == 0) {
        int64_t symmax[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        DevExec *dev = devexec_new_unshared(plan, d, symmax, "ops.net");
        CpuExec *cpu = cpu_exec_new(o->p, CPU_F32);
        for (int i = 0; i < o->p->ntensors; i++) {
            fill(o->p, i, cpu_exec_tensor(cpu, i));
            CHECK_EQ_INT(devexec_tensor_set(dev, i, cpu_exec_tensor(cpu, i)), 0);
        }
        CpuFeed cf = {.symvals = {0}, .inputs = {o->index}};
        DevFeed df = {.symvals = {0}, .inputs = {o->index}};
        CHECK_EQ_INT(cpu_exec_run(cpu, &o->p->train, &cf), 0);
        CHECK_EQ_INT(devexec_run(dev, &o->p->train, &df), 0);
        int before = check_failures;
        compare(o, cpu, dev, name);
        printf("[%lld, %lld] %s: %d op nodes, %d kernels: %s\n", (long long)o->rows,
               (long long)o->cols, name, o->nops, plan->nkernels,
               check_failures == before ? "all equal" : "MISMATCHES");
        if (check_failures == before) emu_remove_build(so);
        cpu_exec_free(cpu);
        devexec_free(dev);
        d->ops->close(d);
    }
    plan_free(plan);
}

int main(int argc, char **argv)
{
    bool asan = argc > 1 && strcmp(argv[1], "--asan") == 0;
    static const int64_t shapes[][2] = {{5, 37}, {65, 131}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        OpsProgram o = {.rows = shapes[s][0], .cols = shapes[s][1]};
        build(&o);
        /* the table's elementwise ops and reductions, each way */
        CHECK(o.nops >= 2 * NTYPES * (30 + 3 * 3 + 2));
        run_mode(&o, PLAN_EAGER, asan);
        group_each_op(&o);
        run_mode(&o, PLAN_DEFAULT, asan);
        ir_program_free(o.p);
        free(o.index);
    }
    return check_result();
}
