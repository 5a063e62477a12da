/* profile.c: the --profile trace (see profile.h).
 *
 * Recording only appends to two arrays, steps and ops, so that it perturbs the timed
 * work as little as it can; the JSON is written once, at the end. Every string that
 * comes from the user (the model file's path, value names, the model's name) goes
 * through text_json_string (base/text.h), which escapes what JSON requires and replaces
 * bytes that are not UTF-8 with U+FFFD, so the file parses whatever the names hold.
 */
#include "profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/outfile.h"
#include "../base/text.h"
#include "build_config.h"

typedef struct ProfStep {
    int64_t step;
    double start, end;
    int first_op, nops;         /* its ops: ops[first_op .. first_op + nops) */
} ProfStep;

typedef struct ProfOp {
    const IrGraph *g;           /* NULL: a kernel or GEMM timed on a device (below) */
    int id;
    Shape shape;                /* the node's, symbols bound */
    double start, end;
    char *what, *kernel;        /* a device's: the plan step, the kernel ("cuBLAS") */
    const char *graph;
    int line;
    bool gemm;
} ProfOp;

struct Profile {
    const IrProgram *p;
    char *net_path;
    OutFile out;                /* the trace, written at the end */
    ProfStep *steps;
    int nsteps, capsteps;
    ProfOp *ops;
    int nops, capops;
    int step_first_op;          /* the first op of the step being recorded */
    char *device;               /* profile_set_device's, or NULL: the CPU */
};

Profile *profile_open(const char *path, const IrProgram *p, const char *net_path)
{
    OutFile out;
    if (out_open(&out, PROFILE_ROLE, path, &out_json) != 0) return NULL;
    Profile *pr = xcalloc(1, sizeof *pr);
    pr->out = out;
    pr->p = p;
    pr->net_path = xstrdup(net_path ? net_path : "");
    return pr;
}

void profile_step(Profile *pr, int64_t step, double start, double end)
{
    if (pr->nsteps == pr->capsteps) {
        pr->capsteps = pr->capsteps ? 2 * pr->capsteps : 4;
        pr->steps = xrealloc(pr->steps, (size_t)pr->capsteps * sizeof *pr->steps);
    }
    pr->steps[pr->nsteps++] = (ProfStep){ step, start, end, pr->step_first_op,
                                          pr->nops - pr->step_first_op };
    pr->step_first_op = pr->nops;
}

static ProfOp *new_op(Profile *pr)
{
    if (pr->nops == pr->capops) {
        pr->capops = pr->capops ? 2 * pr->capops : 1024;
        pr->ops = xrealloc(pr->ops, (size_t)pr->capops * sizeof *pr->ops);
    }
    ProfOp *op = &pr->ops[pr->nops++];
    memset(op, 0, sizeof *op);
    return op;
}

void profile_op(Profile *pr, const IrGraph *g, int id, const int64_t *symvals,
                double start, double end)
{
    Shape s = g->nodes[id].shape;
    for (int i = 0; i < s.rank; i++)
        if (IR_DIM_IS_SYM(s.dim[i])) s.dim[i] = symvals[IR_DIM_SYMBOL(s.dim[i])];
    ProfOp *op = new_op(pr);
    *op = (ProfOp){ .g = g, .id = id, .shape = s, .start = start, .end = end };
}

void profile_set_device(Profile *pr, const char *device)
{
    free(pr->device);
    pr->device = xstrdup(device);
}

void profile_kernel(Profile *pr, const char *what, const char *kernel, const char *graph,
                    int line, bool gemm, double start, double end)
{
    ProfOp *op = new_op(pr);
    op->what = xstrdup(what ? what : "");
    op->kernel = xstrdup(kernel ? kernel : "");
    op->graph = graph;
    op->line = line;
    op->gemm = gemm;
    op->start = start;
    op->end = end;
}

int profile_steps(const Profile *pr) { return pr->nsteps; }
int profile_ops(const Profile *pr) { return pr->nops; }

/* ---- writing JSON ---- */

/* T as microseconds since T0, from whole nanoseconds: rounding is monotonic, so a step
 * written this way still encloses its ops exactly. */
static int64_t ns_since(double t, double t0) { return llround((t - t0) * 1e9); }

static void json_micros(FILE *f, int64_t ns)
{
    fprintf(f, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

/* The fields every complete event has. */
static void event_begin(FILE *f, const char *name, const char *cat, double start, double end,
                        double t0)
{
    int64_t from = ns_since(start, t0), to = ns_since(end, t0);
    fputs("{\"name\": ", f);
    text_json_string(f, name);
    fprintf(f, ", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": ", cat);
    json_micros(f, from);
    fputs(", \"dur\": ", f);
    json_micros(f, to - from);
    fputs(", \"pid\": 1, \"tid\": 1, \"args\": {", f);
}

/* Event categories by op class; in step with IrOpClass. */
static const char *const class_category[] = {
    [IR_CLASS_LEAF] = "leaf",       [IR_CLASS_UNARY] = "elementwise",
    [IR_CLASS_BINARY] = "elementwise", [IR_CLASS_TERNARY] = "elementwise",
    [IR_CLASS_REDUCE] = "reduction", [IR_CLASS_SHAPE] = "shape",
    [IR_CLASS_MATMUL] = "matmul",   [IR_CLASS_OTHER] = "other",
    [IR_CLASS_EFFECT] = "assign",
};

/* What --emit's host plan calls the node: the op and the value, a table's name for
 * leaves and assignments, else the node number. */
static void op_name(const IrProgram *p, const IrNode *n, int id, char *buf, size_t size)
{
    const char *table = ir_node_table_name(p, n), *what = table ? table : n->name;
    if (what) snprintf(buf, size, "%s %s", ir_op_name(n->op), what);
    else snprintf(buf, size, "%s %%%d", ir_op_name(n->op), id);
}

/* A device's event: the plan step, with its kernel, graph and .net line. */
static void write_kernel(const Profile *pr, const ProfOp *op, double t0)
{
    FILE *f = pr->out.f;
    event_begin(f, op->what, op->gemm ? "gemm" : "kernel", op->start, op->end, t0);
    fputs("\"kernel\": ", f);
    text_json_string(f, op->kernel);
    fputs(", \"graph\": ", f);
    text_json_string(f, op->graph);
    if (op->line > 0) fprintf(f, ", \"line\": %d", op->line);
    fputs("}}", f);
}

static void write_op(const Profile *pr, const ProfOp *op, double t0)
{
    FILE *f = pr->out.f;
    if (!op->g) {
        write_kernel(pr, op, t0);
        return;
    }
    const IrNode *n = &op->g->nodes[op->id];
    char name[256];
    op_name(pr->p, n, op->id, name, sizeof name);
    event_begin(f, name, class_category[ir_op_info[n->op].cls], op->start, op->end, t0);
    fprintf(f, "\"op\": \"%s\", \"graph\": ", ir_op_name(n->op));
    text_json_string(f, op->g->name);
    fprintf(f, ", \"node\": %d", op->id);
    if (n->loc.line > 0) fprintf(f, ", \"line\": %d", n->loc.line);
    fputs(", \"shape\": [", f);
    for (int i = 0; i < op->shape.rank; i++)
        fprintf(f, "%s%lld", i ? ", " : "", (long long)op->shape.dim[i]);
    fprintf(f, "], \"dtype\": \"%s\"", ir_dtype_name(n->dtype));
    if (n->group) {
        fputs(", \"kernel\": ", f);
        text_json_string(f, op->g->groups[n->group - 1].name);
    }
    fputs("}}", f);
}

static void write_step(const Profile *pr, const ProfStep *s, double t0)
{
    char name[48];
    snprintf(name, sizeof name, "step %lld", (long long)s->step);
    event_begin(pr->out.f, name, "step", s->start, s->end, t0);
    fprintf(pr->out.f, "\"step\": %lld, \"ops\": %d}}", (long long)s->step, s->nops);
}

static void write_other_data(const Profile *pr)
{
    FILE *f = pr->out.f;
    fputs("\"otherData\": {\"generator\": \"cgc " CGC_VERSION "\", \"model\": ", f);
    text_json_string(f, pr->p->model_name ? pr->p->model_name : "");
    fputs(", \"net_file\": ", f);
    text_json_string(f, pr->net_path);
    fputs(", \"device\": ", f);
    text_json_string(f, pr->device ? pr->device : "cpu");
    fprintf(f, ", \"executor\": \"%s\", \"precision\": \"%s\", \"batch\": %lld, "
               "\"steps_recorded\": %d, \"ops_recorded\": %d, \"clock\": \"%s\"}",
            pr->device ? "the plan's kernels and GEMMs, one by one" : "reference, op by op",
            config_precision_name(pr->p->cfg.precision), (long long)pr->p->cfg.batch,
            pr->nsteps, pr->nops,
            pr->device ? "device events, from the first recorded" : "CLOCK_MONOTONIC");
}

/* The whole trace: each step, then its ops (Perfetto nests them by time). */
static void write_trace(const Profile *pr)
{
    FILE *f = pr->out.f;
    double t0 = pr->nsteps ? pr->steps[0].start : pr->nops ? pr->ops[0].start : 0;
    fputs("{\"traceEvents\": [", f);
    bool first = true;
    for (int k = 0; k < pr->nsteps; k++) {
        const ProfStep *s = &pr->steps[k];
        fputs(first ? "\n" : ",\n", f);
        first = false;
        write_step(pr, s, t0);
        for (int i = s->first_op; i < s->first_op + s->nops; i++) {
            fputs(",\n", f);
            write_op(pr, &pr->ops[i], t0);
        }
    }
    /* ops of a step that did not finish (the run failed in it) */
    for (int i = pr->step_first_op; i < pr->nops; i++) {
        fputs(first ? "\n" : ",\n", f);
        first = false;
        write_op(pr, &pr->ops[i], t0);
    }
    fputs("\n],\n\"displayTimeUnit\": \"ms\",\n", f);
    write_other_data(pr);
    fputs("}\n", f);
}

static void profile_free(Profile *pr)
{
    for (int i = 0; i < pr->nops; i++) free(pr->ops[i].what), free(pr->ops[i].kernel);
    free(pr->device);
    free(pr->net_path);
    free(pr->steps);
    free(pr->ops);
    free(pr);
}

void profile_discard(Profile *pr)
{
    out_discard(&pr->out);
    profile_free(pr);
}

int profile_close(Profile *pr)
{
    write_trace(pr);
    int rc = out_close(&pr->out);
    profile_free(pr);
    return rc;
}

