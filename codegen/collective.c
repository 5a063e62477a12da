/* collective.c: where each graph's collectives over the ranks run among its steps
 * (plan.h's PlanCollective).
 *
 * A collective reads its input's buffer, which only the step computing that input
 * writes (a node's buffer is its own; views are not computed), and writes its own: a sum
 * in place, in its input's buffer; a reduce-scatter or an all-gather (shard = optimizer)
 * into a buffer no step computes. So a member is ready after the last step that writes
 * its input, and its result is needed at the first step after that which names its
 * output. A bucket starts when its last member is ready and is waited for where the
 * first of its results is needed; when a result is needed before another member is
 * ready, each member runs alone, from its own readiness to its own need, as the CPU
 * executor does (runtime/cpu/exec.c).
 */
#include "codegen_impl.h"

#include <stdlib.h>
#include <string.h>

/* Whether step S names root buffer B; *WRITES, whether it writes it. */
static bool step_names(const Plan *pl, const PlanStep *s, int b, bool *writes)
{
    bool named = false;
    *writes = false;
    if (s->kind == STEP_GEMM) {
        const PlanGemm *g = &s->gemm;
        const int operand[] = {g->a, g->b, g->bias, g->c, g->aux};    /* the last two written */
        for (int i = 0; i < 5; i++) {
            if (operand[i] < 0 || plan_buffer_root(pl, operand[i]) != b) continue;
            named = true;
            *writes |= i >= 3;
        }
        return named;
    }
    const PlanKernel *k = &pl->kernels[s->launch.kernel];
    for (int a = 0; a < s->launch.nargs; a++) {
        const PlanArg *arg = &s->launch.arg[a];
        if (arg->kind != ARG_BUFFER || plan_buffer_root(pl, arg->index) != b) continue;
        named = true;
        *writes |= plan_param_written(k->param_ctype[a]);
    }
    return named;
}

/* A member of graph PG, from root buffer IN to root buffer OUT: the last step that
 * writes IN (*READY) and the first after that which names OUT (*NEED; nsteps when none
 * does). */
static void member_steps(const Plan *pl, const PlanGraph *pg, int in, int out, int *ready, int *need)
{
    *ready = -1;
    *need = pg->nsteps;
    for (int i = 0; i < pg->nsteps; i++) {
        bool writes;
        if (step_names(pl, &pg->steps[i], in, &writes) && writes) *ready = i;
    }
    for (int i = *ready + 1; i < pg->nsteps && *need == pg->nsteps; i++) {
        bool writes;
        if (step_names(pl, &pg->steps[i], out, &writes)) *need = i;
    }
}

/* A collective OP of bucket K from the N buffers IN to the N buffers OUT (it takes both
 * arrays), started after step AFTER and waited for at step WAIT. */
static void add_coll(PlanGraph *pg, int *cap, IrOp op, int k, int after, int wait, int *in, int *out, int n)
{
    if (pg->ncolls == *cap) {
        *cap = *cap ? 2 * *cap : 8;
        pg->colls = xrealloc(pg->colls, (size_t)*cap * sizeof *pg->colls);
    }
    pg->colls[pg->ncolls++] = (PlanCollective){op, k, after, wait, n, in, out};
}

static int *one_int(int v)
{
    int *p = xmalloc(sizeof *p);
    *p = v;
    return p;
}

static int by_start(const void *a, const void *b)
{
    const PlanCollective *x = a, *y = b;
    if (x->after != y->after) return x->after < y->after ? -1 : 1;
    if (x->bucket != y->bucket) return x->bucket < y->bucket ? -1 : 1;
    return (x->member[0] > y->member[0]) - (x->member[0] < y->member[0]);
}

/* Bucket K's members of graph PG (node ids ID[0 .. N)): one collective, or one each. */
static void plan_bucket(const Plan *pl, PlanGraph *pg, int *cap, int k, const int *id, int n)
{
    const IrGraph *g = pg->ir;
    IrOp op = g->nodes[id[0]].op;
    int *in = xmalloc((size_t)n * sizeof *in), *out = xmalloc((size_t)n * sizeof *out);
    int *ready = xmalloc((size_t)n * sizeof *ready), *need = xmalloc((size_t)n * sizeof *need);
    int last = -1, first = pg->nsteps;
    for (int j = 0; j < n; j++) {
        CGC_ASSERT(g->nodes[id[j]].op == op);
        in[j] = plan_buffer_root(pl, pg->node_buffer[g->nodes[id[j]].in[0]]);
        out[j] = plan_buffer_root(pl, pg->node_buffer[id[j]]);
        const PlanBuffer *pb = &pl->buffers[in[j]];
        member_steps(pl, pg, in[j], out[j], &ready[j], &need[j]);
        if (pb->kind != PB_NODE || ready[j] < 0)   /* a tensor or constant: not a step's */
            CGC_INTERNAL("%s graph: the collective over the ranks %%%d is of %s, which no step "
                         "computes", g->name, id[j], pb->what);
        if (ready[j] > last) last = ready[j];
        if (need[j] < first) first = need[j];
    }
    if (last < first) {     /* every member ready before any result is needed */
        add_coll(pg, cap, op, k, last, first, in, out, n);
        in = out = NULL;
    }
    for (int j = 0; in && j < n; j++)
        add_coll(pg, cap, op, k, ready[j], need[j], one_int(in[j]), one_int(out[j]), 1);
    free(in);
    free(out);
    free(ready);
    free(need);
}

typedef struct Member {
    int bucket, id;
} Member;

/* By bucket, then in node order. */
static int by_bucket(const void *a, const void *b)
{
    const Member *x = a, *y = b;
    if (x->bucket != y->bucket) return x->bucket < y->bucket ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static void graph_collectives(const Plan *pl, PlanGraph *pg)
{
    const IrGraph *g = pg->ir;
    Member *m = xmalloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof *m);
    int *id = xmalloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof *id), n = 0, cap = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (ir_op_info[g->nodes[i].op].fuse == IR_FUSE_COLLECTIVE)
            m[n++] = (Member){g->nodes[i].index, i};
    qsort(m, (size_t)n, sizeof *m, by_bucket);
    for (int first = 0, end = 0; first < n; first = end) {
        for (end = first; end < n && m[end].bucket == m[first].bucket; end++) id[end - first] = m[end].id;
        plan_bucket(pl, pg, &cap, m[first].bucket, id, end - first);
    }
    free(m);
    free(id);
    if (pg->ncolls) qsort(pg->colls, (size_t)pg->ncolls, sizeof *pg->colls, by_start);
}

void plan_add_collectives(Plan *pl)
{
    for (int gid = 0; gid < PG_NUM; gid++)
        if (pl->graph[gid].ir) graph_collectives(pl, &pl->graph[gid]);
}
