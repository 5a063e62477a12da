/* compiler/training.c: lowers training to IR: the optimizer step is a graph too.
 *
 * From the forward graph (loss and prediction, training mode) this builds the graphs the
 * runtime runs, so that the update fuses and is planned like the rest of the model:
 *   train        one optimizer step: forward, backward (autodiff), gradient accumulation,
 *                fp16 unscaling and the inf/nan check, clipping, the learning-rate
 *                schedule, the optimizer update and the step counters;
 *   train_micro  (accumulate > 1 only) forward and backward, gradients added to the
 *                accumulators; the runtime runs it accumulate - 1 times before each train;
 *   eval         forward in evaluation mode (dropout off, batch norm on its running
 *                statistics), plus the count of correct predictions.
 * Every update follows torch.optim / torch.amp.GradScaler / clip_grad_norm_ to the
 * formula (see the comments at each), so a cgc run and the equivalent PyTorch loop agree.
 *
 * With several ranks (cfg.ranks), each computes the gradients of its rows of the batch,
 * weighted by its share of the rows (the runtime scalar rank_share), so that their sum
 * over the ranks is the gradient of the whole batch's mean loss. The sums are
 * IR_ALLREDUCE nodes in buckets, once per optimizer step: after accumulation and before
 * the fp16 inf check and clipping, which so see the same global gradients on every rank
 * (an overflow on one rank skips the step on all), as DistributedDataParallel does.
 * Batch norm's running statistics are averaged over the ranks where they are assigned.
 * With shard = optimizer (ZeRO stage 1) each rank keeps the optimizer state of one slice
 * of every parameter (IR_SHARD: its elements cut in cfg.ranks pieces): the gradients are
 * reduce-scattered instead, so that a rank receives the sum of its slices only, the
 * rank updates those slices, and an all-gather puts the parameters together again on
 * every rank; the inf check and the clip norm add their per-rank parts over the ranks.
 * What must survive a step (optimizer moments, counters, the loss scale) lives in state
 * tensors named "cgc.*" that checkpoints save with the parameters.
 *
 * Locations: per-parameter nodes carry the parameter's location (the call that created
 * it), gradient-wide nodes (seed, unscale, clipping) the loss's; the learning rate its
 * `schedule` key's (else `optimizer`'s), Adam's shared factors the `optimizer` key's,
 * the loss scale the `precision` key's, and the counters the `train` keyword's, so that
 * every kernel names a line. A key given by a flag instead falls back to the train
 * block; a model without one has no line for them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* GradScaler's defaults (torch.amp.GradScaler). */
#define SCALER_INIT 65536.0
#define SCALER_GROWTH 2.0
#define SCALER_BACKOFF 0.5
#define SCALER_GROWTH_INTERVAL 2000
/* clip_grad_norm_ adds this to the norm before dividing. */
#define CLIP_EPS 1e-6
/* Gradient buckets, as DistributedDataParallel sizes them: the first small, so that the
 * first all-reduce starts early in the backward, the others up to bucket_cap_mb. */
#define FIRST_BUCKET_BYTES ((int64_t)1 << 20)
#define BUCKET_BYTES ((int64_t)25 << 20)

typedef struct Lower {
    IrProgram *p;
    IrGraph *g;            /* the graph being built */
    SrcLoc loc;            /* given to the nodes being built */
    /* state tensors, -1 when this configuration has none */
    int step, optim_step, scale, growth_tracker;
    int *momentum, *exp_avg, *exp_avg_sq, *accum;   /* per parameter */
    /* per graph */
    int *grads;            /* per tensor: its gradient node, or -1 */
    int *slices;           /* shard = optimizer: per parameter, its updated slice, or -1 */
    int bucket;            /* the next collective's bucket */
    int *read_of;          /* per tensor: a READ of it in the graph, or -1 */
    int found_inf;         /* fp16 train: 1 when this step is skipped, else -1 */
} Lower;

static const SrcLoc NO_LOC = {0, 0};

/* --- terse builders at the current location --- */

static int cst(Lower *L, double v) { return ir_const(L->g, v, L->loc); }
/* A tensor is read once per graph: the forward's READ serves the update too. */
static int rd(Lower *L, int tensor)
{
    if (L->read_of[tensor] < 0)
        L->read_of[tensor] = ir_read(L->g, L->p, tensor, L->loc);
    return L->read_of[tensor];
}

static int bin(Lower *L, IrOp op, int a, int b) { return ir_binary(L->g, op, a, b, L->loc); }
static int add(Lower *L, int a, int b) { return bin(L, IR_ADD, a, b); }
static int mul(Lower *L, int a, int b) { return bin(L, IR_MUL, a, b); }
static int un(Lower *L, IrOp op, int x) { return ir_unary(L->g, op, x, L->loc); }
static int sel(Lower *L, int c, int a, int b) { return ir_select(L->g, c, a, b, L->loc); }
/* The sum of all of X's elements, over a matrix (or more) by rows first. A reduction runs
 * a block per output element on a GPU (plan.h), so one over a whole [4096, 4096] gradient
 * had one block for 16M elements and took 25 ms of a 29 ms step on an H200; by rows, a
 * block sums each row of the last axis, and one more block the row sums. A vector keeps
 * its one block: a reshape to one row would cost its prologue's fusion. */
static int sum_all(Lower *L, int x)
{
    int rank = L->g->nodes[x].shape.rank;
    if (rank >= 2) x = ir_reduce(L->g, IR_SUM, x, rank - 1, L->loc);
    return ir_reduce(L->g, IR_SUM, x, IR_AXIS_ALL, L->loc);
}
static void assign(Lower *L, int tensor, int v) { ir_assign(L->g, L->p, tensor, v, L->loc); }

/* c*x, without the multiplication when c is 1. */
static int scaled(Lower *L, double c, int x)
{
    return c == 1 ? x : mul(L, cst(L, c), x);
}

/* a*x + b*y with constant a and b: the shape of every moment update. */
static int lerp(Lower *L, double a, int x, double b, int y)
{
    return add(L, scaled(L, a, x), scaled(L, b, y));
}

/* fp16: a skipped step leaves the tensor as it was. */
static void assign_unless_skipped(Lower *L, int tensor, int old, int v)
{
    if (L->found_inf >= 0)
        v = sel(L, L->found_inf, old, v);
    assign(L, tensor, v);
}

/* --- shard = optimizer --- */

static bool sharded(const IrProgram *p) { return p->cfg.shard_optimizer && p->cfg.ranks > 1; }

/* Whether the gradients are summed over the ranks: in a job, even of one rank (what the
 * sums cost, as DDP with one process). */
static bool summed(const IrProgram *p) { return p->cfg.ranks > 1 || p->cfg.job; }

/* [S]: a rank's slice of parameter I, its elements cut in cfg.ranks pieces (the last
 * padded with zeros). */
static Shape slice_shape(const IrProgram *p, int i)
{
    int64_t n = ir_numel(&p->tensors[i].shape, NULL), r = p->cfg.ranks;
    return (Shape){.rank = 1, .dim = {(n + r - 1) / r}};
}

/* Parameter I's value as the optimizer updates it: the rank's slice when sharded. */
static int param_read(Lower *L, int i)
{
    int w = rd(L, i);
    return sharded(L->p) ? ir_collective(L->g, IR_SHARD, w, slice_shape(L->p, i), -1, L->loc) : w;
}

/* Parameter I := V (OLD when the step is skipped), or, sharded, V is this rank's slice,
 * gathered with the others' by gather_params. */
static void param_update(Lower *L, int i, int old, int v)
{
    if (!sharded(L->p)) {
        assign_unless_skipped(L, i, old, v);
        return;
    }
    L->slices[i] = L->found_inf >= 0 ? sel(L, L->found_inf, old, v) : v;
}

/* Sharded: scalar X, a sum over this rank's slices, summed over the ranks (in a bucket
 * of its own), NAME in dumps. */
static int sum_over_ranks(Lower *L, int x, const char *name)
{
    if (!sharded(L->p)) return x;
    int sum = ir_allreduce(L->g, x, L->bucket++, L->loc);
    L->g->nodes[sum].name = name;
    return sum;
}

/* --- state tensors --- */

static int scalar_state(IrProgram *p, const char *name, IrInit init, double value)
{
    int t = ir_find_tensor(p, name);
    if (t >= 0)
        return t;
    return ir_add_tensor(p, name, IR_STATE, ir_shape0(), init, value, -1, NO_LOC);
}

/* "PREFIX.PARAM", zeros, of the parameter's shape, or its slice's (SLICE). The name is as
 * long as it needs to be: two parameters differ somewhere, and so must their states. */
static int param_state(IrProgram *p, const char *prefix, int param, bool slice)
{
    IrTensor pt = p->tensors[param];
    size_t len = strlen(prefix) + strlen(pt.name) + 2;
    char *name = xmalloc(len);
    snprintf(name, len, "%s.%s", prefix, pt.name);
    Shape shape = slice ? slice_shape(p, param) : pt.shape;
    int t = ir_add_tensor(p, name, IR_STATE, shape, IR_INIT_ZEROS, 0, param, pt.loc);
    p->tensors[t].sharded = slice;
    free(name);
    return t;
}

/* Per-parameter ids of PREFIX's state, or all -1 when WANTED is false. The optimizer's
 * (OPTIMIZER) are slices when sharded. */
static int *param_states(IrProgram *p, const char *prefix, bool wanted, bool optimizer)
{
    int *ids = xmalloc((size_t)(p->nparams ? p->nparams : 1) * sizeof *ids);
    for (int i = 0; i < p->nparams; i++)
        ids[i] = wanted ? param_state(p, prefix, i, optimizer && sharded(p)) : -1;
    return ids;
}

static void register_state(Lower *L)
{
    IrProgram *p = L->p;
    const TrainConfig *c = &p->cfg;
    bool adam = c->optimizer == OPT_ADAM || c->optimizer == OPT_ADAMW;
    /* fp16: a step the scaler skips has still run its forward pass, which updates the
     * model's own state (batch statistics) with whatever it computed. */
    for (int i = p->nparams; i < p->ntensors && c->precision == PREC_FP16; i++)
        p->tensors[i].range = IR_RANGE_ANY;
    L->step = scalar_state(p, IR_TRAIN_STEP, IR_INIT_ZEROS, 0);
    L->optim_step = scalar_state(p, IR_OPTIM_STEP, IR_INIT_ZEROS, 0);
    p->tensors[L->step].range = p->tensors[L->optim_step].range = IR_RANGE_COUNT;
    L->scale = L->growth_tracker = -1;
    if (c->precision == PREC_FP16) {
        L->scale = scalar_state(p, "cgc.scaler.scale", IR_INIT_CONST, SCALER_INIT);
        L->growth_tracker = scalar_state(p, "cgc.scaler.growth_tracker", IR_INIT_ZEROS, 0);
        p->tensors[L->scale].range = IR_RANGE_POSITIVE;
        p->tensors[L->growth_tracker].range = IR_RANGE_COUNT;
    }
    L->momentum = param_states(p, "cgc.sgd.momentum_buffer",
                               c->optimizer == OPT_SGD && c->momentum != 0, true);
    L->exp_avg = param_states(p, "cgc.adam.exp_avg", adam, true);
    L->exp_avg_sq = param_states(p, "cgc.adam.exp_avg_sq", adam, true);
    for (int i = 0; i < p->nparams && adam; i++) p->tensors[L->exp_avg_sq[i]].range = IR_RANGE_NONNEG;
    L->accum = param_states(p, "cgc.accum", c->accumulate > 1, false);
}

/* --- gradients --- */

/* Starts building on G: remembers the READs it already has. */
static void begin_graph(Lower *L, IrGraph *g)
{
    L->g = g;
    free(L->read_of);
    L->read_of = xmalloc((size_t)(L->p->ntensors ? L->p->ntensors : 1) * sizeof *L->read_of);
    for (int t = 0; t < L->p->ntensors; t++)
        L->read_of[t] = -1;
    for (int i = g->nnodes - 1; i >= 0; i--)
        if (ir_node_reads_tensor(&g->nodes[i]) >= 0)
            L->read_of[g->nodes[i].index] = i;
}

/* Forward copied into G, then its backward: the seed is d loss / d loss (the loss scale
 * under fp16), divided by the number of micro-steps so that accumulated gradients are
 * the gradient of the mean loss, as when dividing the loss in a PyTorch loop. */
static void build_backward(Lower *L, IrGraph *g, const char *name)
{
    IrProgram *p = L->p;
    ir_graph_copy(g, &p->forward, name);
    g->nforward = g->nnodes;
    begin_graph(L, g);
    int loss = g->output[IR_OUT_LOSS];
    CGC_ASSERT(loss >= 0);
    L->loc = g->nodes[loss].loc;
    double share = 1.0 / (double)p->cfg.accumulate;
    int seed = L->scale >= 0 ? scaled(L, share, rd(L, L->scale)) : cst(L, share);
    if (p->cfg.ranks > 1)
        seed = mul(L, ir_runtime(g, IR_RT_RANK_SHARE, L->loc), seed);
    free(L->grads);
    L->grads = xmalloc((size_t)(p->ntensors ? p->ntensors : 1) * sizeof *L->grads);
    autodiff(g, p, loss, seed, L->grads);
}

/* accumulate > 1: the micro-steps' gradients join this one's, and the accumulators are
 * emptied for the next step. */
static void add_accumulated(Lower *L)
{
    for (int i = 0; i < L->p->nparams; i++) {
        if (L->grads[i] < 0 || L->accum[i] < 0)
            continue;
        L->loc = L->p->tensors[i].loc;
        L->grads[i] = add(L, rd(L, L->accum[i]), L->grads[i]);
        assign(L, L->accum[i], ir_broadcast(L->g, cst(L, 0), L->p->tensors[i].shape, L->loc));
    }
}

/* Parameter I's VALUES[i] through collective OP (a sum, a reduce-scatter of the
 * gradient, an all-gather of the slice), for each I of ORDER[0 .. N), in buckets filled
 * in that order: the first small, so that its collective can start early. */
static void in_buckets(Lower *L, int *values, const int *order, int n, IrOp op)
{
    int first = L->bucket;
    int64_t filled = 0;
    for (int k = 0; k < n; k++) {
        int i = order[k];
        const IrTensor *t = &L->p->tensors[i];
        int64_t bytes = ir_numel(&t->shape, NULL) * (int64_t)sizeof(float);
        int64_t cap = L->bucket == first ? FIRST_BUCKET_BYTES : BUCKET_BYTES;
        if (filled > 0 && filled + bytes > cap) L->bucket++, filled = 0;
        filled += bytes;
        L->loc = t->loc;
        IrSlice side = ir_op_info[op].slice;   /* the result: a slice, the whole tensor, or the value */
        Shape shape = side == IR_SLICE_OUT ? slice_shape(L->p, i)
                      : side == IR_SLICE_IN ? t->shape : L->g->nodes[values[i]].shape;
        values[i] = ir_collective(L->g, op, values[i], shape, L->bucket, L->loc);
        L->g->nodes[values[i]].name = t->name;
    }
    if (filled > 0) L->bucket++;
}

/* Several ranks: each gradient summed over them (reduce-scattered when sharded), in
 * buckets filled in the order the backward finishes the gradients (their nodes'
 * order), so that a bucket can be sent while the backward computes the next. */
static void sum_gradients(Lower *L)
{
    int np = L->p->nparams, *order = xmalloc((size_t)(np ? np : 1) * sizeof *order), n = 0;
    for (int i = 0; i < np; i++)
        if (L->grads[i] >= 0) order[n++] = i;
    for (int a = 1; a < n; a++)   /* by gradient node, ascending */
        for (int b = a; b > 0 && L->grads[order[b - 1]] > L->grads[order[b]]; b--) {
            int t = order[b];
            order[b] = order[b - 1], order[b - 1] = t;
        }
    in_buckets(L, L->grads, order, n, sharded(L->p) ? IR_REDUCE_SCATTER : IR_ALLREDUCE);
    free(order);
}

/* shard = optimizer: every rank's updated slices put together, in parameter order, and
 * assigned. */
static void gather_params(Lower *L)
{
    int np = L->p->nparams, *order = xmalloc((size_t)(np ? np : 1) * sizeof *order), n = 0;
    for (int i = 0; i < np; i++)
        if (L->slices[i] >= 0) order[n++] = i;
    in_buckets(L, L->slices, order, n, IR_ALLGATHER);
    for (int k = 0; k < n; k++) {
        L->loc = L->p->tensors[order[k]].loc;
        assign(L, order[k], L->slices[order[k]]);
    }
    free(order);
}

/* fp16 (GradScaler.unscale_ and its inf check): the gradients are divided by the scale;
 * any inf or nan among them marks the step as skipped. */
static void unscale(Lower *L)
{
    IrGraph *g = L->g;
    L->loc = g->nodes[g->output[IR_OUT_LOSS]].loc;
    int inv = bin(L, IR_DIV, cst(L, 1), rd(L, L->scale));
    int nonfinite = -1;
    for (int i = 0; i < L->p->nparams; i++) {
        if (L->grads[i] < 0)
            continue;
        L->grads[i] = mul(L, L->grads[i], inv);
        int n = sum_all(L, un(L, IR_NONFINITE, L->grads[i]));
        nonfinite = nonfinite < 0 ? n : add(L, nonfinite, n);
    }
    nonfinite = sum_over_ranks(L, nonfinite < 0 ? cst(L, 0) : nonfinite, "nonfinite_count");
    L->found_inf = bin(L, IR_LESS, cst(L, 0), nonfinite);
    g->output[IR_OUT_SKIPPED] = L->found_inf;
}

/* clip_grad_norm_: the global L2 norm over all gradients; every gradient is multiplied
 * by min(clip / (norm + 1e-6), 1), even when that is 1, as torch does. */
static void clip(Lower *L)
{
    IrGraph *g = L->g;
    L->loc = g->nodes[g->output[IR_OUT_LOSS]].loc;
    int squares = -1;
    for (int i = 0; i < L->p->nparams; i++) {
        if (L->grads[i] < 0)
            continue;
        int s = sum_all(L, mul(L, L->grads[i], L->grads[i]));
        squares = squares < 0 ? s : add(L, squares, s);
    }
    if (squares < 0)
        return;   /* no gradients: nothing to clip */
    int norm = un(L, IR_SQRT, sum_over_ranks(L, squares, "grad_norm_squares"));
    g->output[IR_OUT_GRAD_NORM] = norm;
    int ratio = bin(L, IR_DIV, cst(L, L->p->cfg.clip_norm), add(L, norm, cst(L, CLIP_EPS)));
    int coef = bin(L, IR_MINIMUM, ratio, cst(L, 1));
    for (int i = 0; i < L->p->nparams; i++)
        if (L->grads[i] >= 0)
            L->grads[i] = mul(L, L->grads[i], coef);
}

/* --- learning-rate schedule, t = optimizer steps attempted so far (0-based) --- */

/* torch's StepLR: lr * gamma^floor(t / K). */
static int step_lr(Lower *L, int t)
{
    const TrainConfig *c = &L->p->cfg;
    CGC_ASSERT(c->step_every > 0);
    int epochs = un(L, IR_FLOOR, bin(L, IR_DIV, t, cst(L, (double)c->step_every)));
    return mul(L, cst(L, c->lr), bin(L, IR_POW, cst(L, c->gamma), epochs));
}

/* Linear warmup over W steps to lr, then cosine annealing to min_lr over the remaining
 * T - W steps (T = the run's total steps, known at run time); with W = 0 this is torch's
 * CosineAnnealingLR(T_max = T, eta_min = min_lr). Past T it stays at min_lr. */
static int cosine_lr(Lower *L, int t)
{
    const TrainConfig *c = &L->p->cfg;
    double lr = c->lr, m = c->min_lr, w = (double)c->warmup;
    int total = ir_runtime(L->g, IR_RT_TOTAL_STEPS, L->loc);
    int span = bin(L, IR_SUB, total, cst(L, w));
    int done = bin(L, IR_MINIMUM, bin(L, IR_SUB, t, cst(L, w)), span);
    int progress = bin(L, IR_DIV, done, bin(L, IR_MAXIMUM, span, cst(L, 1)));
    int wave = add(L, cst(L, 1), un(L, IR_COS, mul(L, cst(L, M_PI), progress)));
    int annealed = scaled(L, (lr - m) * 0.5, wave);
    if (m != 0)
        annealed = add(L, cst(L, m), annealed);
    if (c->warmup == 0)
        return annealed;
    int warm = mul(L, cst(L, lr / w), add(L, t, cst(L, 1)));
    return sel(L, bin(L, IR_LESS, t, cst(L, w)), warm, annealed);
}

/* The first of A and B that the file wrote, else the train block's. */
static SrcLoc key_loc(const Lower *L, SrcLoc a, SrcLoc b)
{
    return a.line ? a : b.line ? b : L->p->cfg.train_loc;
}

static int learning_rate(Lower *L)
{
    L->loc = key_loc(L, L->p->cfg.schedule_loc, L->p->cfg.optimizer_loc);
    switch (L->p->cfg.schedule) {
    case SCHED_CONSTANT: return cst(L, L->p->cfg.lr);
    case SCHED_STEP: return step_lr(L, rd(L, L->step));
    case SCHED_COSINE: return cosine_lr(L, rd(L, L->step));
    }
    CGC_INTERNAL("unknown schedule %d", (int)L->p->cfg.schedule);
}

/* --- optimizers: torch.optim's update rules, one parameter at a time --- */

/* torch.optim.SGD (dampening 0): buf = momentum*buf + g (buf starts at 0, which equals
 * torch's clone on the first step); nesterov uses g + momentum*buf. */
static void sgd_update(Lower *L, int i, int lr)
{
    const TrainConfig *c = &L->p->cfg;
    int w = param_read(L, i), g = L->grads[i];
    if (c->weight_decay != 0)
        g = add(L, g, scaled(L, c->weight_decay, w));
    if (c->momentum != 0) {
        int old = rd(L, L->momentum[i]);
        int buf = lerp(L, c->momentum, old, 1, g);
        assign_unless_skipped(L, L->momentum[i], old, buf);
        g = c->nesterov ? add(L, g, scaled(L, c->momentum, buf)) : buf;
    }
    param_update(L, i, w, bin(L, IR_SUB, w, mul(L, lr, g)));
}

/* The step-dependent factors Adam shares between parameters. */
typedef struct AdamScalars {
    int step_size;     /* lr / (1 - beta1^t) */
    int bc2_sqrt;      /* sqrt(1 - beta2^t) */
    int decay;         /* AdamW with weight decay: 1 - lr*wd; else -1 */
} AdamScalars;

static AdamScalars adam_scalars(Lower *L, int lr)
{
    const TrainConfig *c = &L->p->cfg;
    L->loc = key_loc(L, c->optimizer_loc, NO_LOC);
    int t = add(L, rd(L, L->optim_step), cst(L, 1));
    int bc1 = bin(L, IR_SUB, cst(L, 1), bin(L, IR_POW, cst(L, c->beta1), t));
    int bc2 = bin(L, IR_SUB, cst(L, 1), bin(L, IR_POW, cst(L, c->beta2), t));
    AdamScalars s = {bin(L, IR_DIV, lr, bc1), un(L, IR_SQRT, bc2), -1};
    if (c->optimizer == OPT_ADAMW && c->weight_decay != 0)
        s.decay = bin(L, IR_SUB, cst(L, 1), scaled(L, c->weight_decay, lr));
    return s;
}

/* torch.optim.Adam and AdamW (decoupled: w *= 1 - lr*wd before the Adam step). */
static void adam_update(Lower *L, int i, AdamScalars s)
{
    const TrainConfig *c = &L->p->cfg;
    int w = param_read(L, i), g = L->grads[i];
    int w0 = w;
    if (s.decay >= 0)
        w = mul(L, w, s.decay);
    else if (c->weight_decay != 0 && c->optimizer == OPT_ADAM)
        g = add(L, g, scaled(L, c->weight_decay, w));
    int m_old = rd(L, L->exp_avg[i]), v_old = rd(L, L->exp_avg_sq[i]);
    int m = lerp(L, c->beta1, m_old, 1 - c->beta1, g);
    int v = lerp(L, c->beta2, v_old, 1 - c->beta2, mul(L, g, g));
    int denom = add(L, bin(L, IR_DIV, un(L, IR_SQRT, v), s.bc2_sqrt), cst(L, c->eps));
    int delta = mul(L, s.step_size, bin(L, IR_DIV, m, denom));
    assign_unless_skipped(L, L->exp_avg[i], m_old, m);
    assign_unless_skipped(L, L->exp_avg_sq[i], v_old, v);
    param_update(L, i, w0, bin(L, IR_SUB, w, delta));
}

/* Parameters without a gradient are left alone, as torch skips those with grad None. */
static void optimizer_update(Lower *L, int lr)
{
    bool adam = L->p->cfg.optimizer != OPT_SGD;
    AdamScalars s = adam ? adam_scalars(L, lr) : (AdamScalars){-1, -1, -1};
    for (int i = 0; i < L->p->nparams; i++) {
        if (L->grads[i] < 0)
            continue;
        L->loc = L->p->tensors[i].loc;
        if (adam)
            adam_update(L, i, s);
        else
            sgd_update(L, i, lr);
    }
}

/* --- counters and the loss scale --- */

/* GradScaler.update: halve on inf/nan (and restart the count), double after
 * growth_interval clean steps in a row. */
static void update_scaler(Lower *L)
{
    L->loc = key_loc(L, L->p->cfg.precision_loc, NO_LOC);
    int scale = rd(L, L->scale), tracker = rd(L, L->growth_tracker);
    int next = add(L, tracker, cst(L, 1));
    int grow = bin(L, IR_EQUAL, next, cst(L, SCALER_GROWTH_INTERVAL));
    int clean_scale = sel(L, grow, mul(L, scale, cst(L, SCALER_GROWTH)), scale);
    assign(L, L->scale, sel(L, L->found_inf, mul(L, scale, cst(L, SCALER_BACKOFF)), clean_scale));
    int clean_tracker = sel(L, grow, cst(L, 0), next);
    assign(L, L->growth_tracker, sel(L, L->found_inf, cst(L, 0), clean_tracker));
}

static void increment(Lower *L, int tensor)
{
    assign(L, tensor, add(L, rd(L, tensor), cst(L, 1)));
}

static void advance_counters(Lower *L)
{
    L->loc = L->p->cfg.train_loc;
    increment(L, L->step);
    int old = rd(L, L->optim_step);
    assign_unless_skipped(L, L->optim_step, old, add(L, old, cst(L, 1)));
}

/* Several ranks: every value the forward assigns (batch norm's running statistics,
 * updated from each rank's own rows) becomes its mean over the ranks, in one bucket
 * (number 0), so that every rank keeps the same statistics. The forward is copied with
 * its ASSIGNs moved to the end, after the sums: an ASSIGN lands after the step wherever
 * it stands, and a bucket can start only once all its values are computed. */
static void average_assigned(IrProgram *p)
{
    IrGraph *src = &p->forward, g = {0};
    bool any = false;
    for (int i = 0; i < src->nnodes; i++) any |= ir_node_is_assign(&src->nodes[i]);
    if (!any || !summed(p))
        return;
    ir_graph_init(&g, src->name);
    int n = src->nnodes, *map = xmalloc((size_t)n * sizeof *map);
    for (int i = 0; i < n; i++) {
        IrNode node = src->nodes[i];
        for (int k = 0; k < node.nin; k++)
            node.in[k] = map[node.in[k]];
        map[i] = ir_node_is_assign(&node) ? -1 : ir_add_node(&g, &node);
    }
    for (int i = 0; i < n; i++) {
        IrNode node = src->nodes[i];
        if (!ir_node_is_assign(&node))
            continue;
        int sum = ir_allreduce(&g, map[node.in[0]], 0, node.loc);
        g.nodes[sum].name = node.name;
        int ranks = ir_const(&g, (double)p->cfg.ranks, node.loc);
        node.in[0] = ir_binary(&g, IR_DIV, sum, ranks, node.loc);
        map[i] = ir_add_node(&g, &node);
    }
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++)
        g.output[r] = src->output[r] < 0 ? -1 : map[src->output[r]];
    free(map);
    ir_graph_free(src);
    *src = g;
    ir_verify(p, src);
}

/* The buckets the running statistics of G take: 1 when it averages any, else 0. */
static int statistics_buckets(const IrGraph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        if (ir_op_info[g->nodes[i].op].slice == IR_SLICE_WHOLE) return 1;
    return 0;
}

/* --- the graphs --- */

static void build_train(Lower *L)
{
    IrProgram *p = L->p;
    build_backward(L, &p->train, "train");
    L->found_inf = -1;
    if (p->cfg.accumulate > 1)
        add_accumulated(L);
    L->bucket = statistics_buckets(&p->train);
    if (summed(p))
        sum_gradients(L);
    if (L->scale >= 0)
        unscale(L);
    if (p->cfg.clip_norm > 0)
        clip(L);
    int lr = learning_rate(L);
    optimizer_update(L, lr);
    if (sharded(p))
        gather_params(L);
    if (L->scale >= 0)
        update_scaler(L);
    advance_counters(L);
    ir_verify(p, &p->train);
}

static void build_train_micro(Lower *L)
{
    IrProgram *p = L->p;
    build_backward(L, &p->train_micro, "train_micro");
    for (int i = 0; i < p->nparams; i++) {
        if (L->grads[i] < 0)
            continue;
        L->loc = p->tensors[i].loc;
        assign(L, L->accum[i], add(L, rd(L, L->accum[i]), L->grads[i]));
    }
    ir_verify(p, &p->train_micro);
}

/* The node of G reading program input INPUT, added when there is none. */
static int find_input(IrGraph *g, const IrProgram *p, int input)
{
    for (int i = 0; i < g->nnodes; i++)
        if (ir_node_input(&g->nodes[i]) == input)
            return i;
    return ir_input(g, p, input, NO_LOC);
}

/* SRC in one mode, keeping only the nodes its outputs need (and, while training, its
 * ASSIGNs: batch norm's running statistics). A MODE_SWITCH becomes its training or its
 * evaluation input; in evaluation a dropout becomes its input (the dropout counter goes
 * with the dropouts) and nothing is assigned. */
static void copy_mode(IrGraph *dst, const IrGraph *src, const char *name, bool eval)
{
    int n = src->nnodes;
    int *same = xmalloc((size_t)(n ? n : 1) * sizeof *same);   /* id, through switches */
    bool *live = xcalloc((size_t)(n ? n : 1), sizeof *live);
    for (int i = 0; i < n; i++) {
        const IrNode *x = &src->nodes[i];
        same[i] = x->op == IR_MODE_SWITCH ? same[x->in[eval]]
                  : eval && x->op == IR_DROPOUT ? same[x->in[0]] : i;
        live[i] = !eval && ir_node_is_assign(x);
    }
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++)
        if (src->output[r] >= 0)
            live[same[src->output[r]]] = true;
    for (int i = n - 1; i >= 0; i--)
        for (int k = 0; live[i] && k < src->nodes[i].nin; k++)
            live[same[src->nodes[i].in[k]]] = true;

    ir_graph_free(dst);
    dst->name = name;
    int *map = xmalloc((size_t)(n ? n : 1) * sizeof *map);
    for (int i = 0; i < n; i++) {
        if (!live[i])
            continue;
        IrNode node = src->nodes[i];
        for (int k = 0; k < node.nin; k++)
            node.in[k] = map[same[node.in[k]]];
        map[i] = ir_add_node(dst, &node);
    }
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++)
        dst->output[r] = src->output[r] < 0 ? -1 : map[same[src->output[r]]];
    free(same);
    free(live);
    free(map);
}

/* The forward graph as sema built it holds both modes where they differ (MODE_SWITCH);
 * from here on it is the training one, which the train graphs copy. */
static void resolve_training_mode(IrProgram *p)
{
    bool switches = false;
    for (int i = 0; i < p->forward.nnodes; i++)
        switches |= p->forward.nodes[i].op == IR_MODE_SWITCH;
    if (!switches)
        return;
    IrGraph g = {0};
    copy_mode(&g, &p->forward, p->forward.name, false);
    ir_graph_free(&p->forward);
    p->forward = g;
    ir_verify(p, &p->forward);
}

/* X as f32, reusing a cast the graph already has (the loss's, usually). */
static int as_f32(IrGraph *g, int x, SrcLoc loc)
{
    for (int i = x + 1; i < g->nnodes; i++)
        if (g->nodes[i].op == IR_CAST && g->nodes[i].in[0] == x && g->nodes[i].dtype == DT_F32)
            return i;
    return ir_cast(g, x, DT_F32, loc);
}

/* Accuracy needs class scores [..., C] and the integer labels the loss compares them to
 * (one per position of a sequence). */
static void add_correct_count(IrProgram *p, IrGraph *g)
{
    int pred = g->output[IR_OUT_PREDICTION];
    if (p->num_classes <= 0 || p->prediction_input_labels < 0 || pred < 0)
        return;
    IrNode n = g->nodes[pred];
    if (n.shape.rank < 2 || n.shape.dim[n.shape.rank - 1] != p->num_classes ||
        !ir_dtype_is_float(n.dtype))
        return;
    int labels = find_input(g, p, p->prediction_input_labels);
    const Shape *ls = &g->nodes[labels].shape;
    for (int i = 0; i < n.shape.rank - 1; i++)
        if (ls->rank != n.shape.rank - 1 || ls->dim[i] != n.shape.dim[i]) return;
    int scores = as_f32(g, pred, n.loc);   /* autocast: metrics in f32 */
    g->output[IR_OUT_CORRECT] = ir_count_correct(g, scores, labels, n.loc);
}

static void build_eval(IrProgram *p)
{
    copy_mode(&p->eval, &p->forward, "eval", true);
    add_correct_count(p, &p->eval);
    ir_verify(p, &p->eval);
}

void training_lower(IrProgram *p)
{
    CGC_ASSERT(p->cfg.accumulate >= 1);
    Lower L = {.p = p};
    build_eval(p);
    resolve_training_mode(p);
    average_assigned(p);
    register_state(&L);
    L.slices = xmalloc((size_t)(p->nparams ? p->nparams : 1) * sizeof *L.slices);
    for (int i = 0; i < p->nparams; i++) L.slices[i] = -1;
    build_train(&L);
    ir_graph_free(&p->train_micro);
    if (p->cfg.accumulate > 1)
        build_train_micro(&L);
    free(L.grads);
    free(L.slices);
    free(L.read_of);
    free(L.momentum);
    free(L.exp_avg);
    free(L.exp_avg_sq);
    free(L.accum);
    precision_copies(p);
}
