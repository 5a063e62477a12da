/* test_optim.c: the lowered training step against torch.optim's formulas.
 *
 * A tiny model (y = tanh(x @ w + b), loss = mean((y - 0.25)^2)) is lowered by
 * training_lower and its `train` graph run in f64 by the CPU executor. Beside it the test
 * keeps its own copy of the parameters and optimizer state, updated by hand with
 * torch.optim's update rules (SGD with momentum/nesterov/weight decay, Adam, AdamW),
 * StepLR / cosine schedules, clip_grad_norm_, gradient accumulation and GradScaler, where
 * the gradient is the central finite difference of the forward graph's loss. So each
 * check covers the lowering and, again, autodiff.
 *
 * Tolerance: the finite-difference gradient (eps 1e-6 in f64) is good to about 1e-9
 * relative, not to rounding, so values are compared with rtol 1e-7, atol 1e-9. Anything
 * structurally wrong (a missing bias correction, a wrong schedule step) is off by far more.
 */
#include <stdlib.h>

#include "check.h"
#include "compiler/passes.h"
#include "runtime/cpu/exec.h"

enum { BATCH = 4, NW = 9 };   /* w [2, 3] then b [3]: 9 parameter values, flattened */
static const int OFFSET[2] = {0, 6}, SIZE[2] = {6, 3};
static const double FD_EPS = 1e-6, ATOL = 1e-9, RTOL = 1e-7;
static const double TOTAL_STEPS = 10;
static const SrcLoc L0 = {1, 1};

static float batches[3][BATCH * 2];

/* The hand-kept copy of what the train graph should hold. */
typedef struct Ref {
    double w[NW];
    double buf[NW], m[NW], v[NW];   /* momentum buffer, exp_avg, exp_avg_sq */
    double optim_step;
} Ref;

typedef struct Run {
    IrProgram *p;
    CpuExec *e;       /* runs the train graphs */
    CpuExec *fd;      /* runs the forward graph for finite differences */
    Ref ref;
} Run;

/* --- the model --- */

static void build_forward(IrProgram *p)
{
    IrGraph *g = &p->forward;
    p->model_name = xstrdup("optim");
    ir_add_symbol(p, "N", L0);
    Shape xs = {2, {IR_SYM(0), 2}};
    int x = ir_input(g, p, ir_add_input(p, "x", DT_F32, xs, L0), L0);
    int w = ir_read(g, p, ir_add_tensor(p, "w", IR_PARAM, (Shape){2, {2, 3}}, IR_INIT_UNIFORM, 0.8, -1, L0), L0);
    int b = ir_read(g, p, ir_add_tensor(p, "b", IR_PARAM, (Shape){1, {3}}, IR_INIT_UNIFORM, 0.8, -1, L0), L0);
    int y = ir_unary(g, IR_TANH, ir_binary(g, IR_ADD, ir_matmul(g, x, w, 0, L0), b, L0), L0);
    int err = ir_binary(g, IR_SUB, y, ir_const(g, 0.25, L0), L0);
    g->output[IR_OUT_LOSS] = ir_reduce(g, IR_MEAN, ir_binary(g, IR_MUL, err, err, L0), IR_AXIS_ALL, L0);
    g->output[IR_OUT_PREDICTION] = y;
}

static CpuFeed feed_of(int batch)
{
    CpuFeed f = {.symvals = {BATCH}};
    f.inputs[0] = batches[batch];
    f.runtime[IR_RT_TOTAL_STEPS] = TOTAL_STEPS;
    return f;
}

static void make_batches(void)
{
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < BATCH * 2; i++)
            batches[k][i] = (float)(0.9 * sin(1.7 * i + 2.3 * k + 0.4));
}

static Run run_new(TrainConfig cfg)
{
    Run r = {.p = ir_program_new()};
    build_forward(r.p);
    r.p->cfg = cfg;
    training_lower(r.p);
    r.e = cpu_exec_new(r.p, CPU_F64);
    r.fd = cpu_exec_new(r.p, CPU_F64);
    cpu_exec_init_tensors(r.e, 3);
    cpu_exec_init_tensors(r.fd, 3);
    for (int t = 0; t < 2; t++)
        memcpy(r.ref.w + OFFSET[t], cpu_exec_tensor(r.e, t), (size_t)SIZE[t] * sizeof(double));
    return r;
}

static void run_free(Run *r)
{
    cpu_exec_free(r->e);
    cpu_exec_free(r->fd);
    ir_program_free(r->p);
}

static double *tensor(Run *r, const char *name)
{
    int t = ir_find_tensor(r->p, name);
    CHECK(t >= 0);
    return t >= 0 ? cpu_exec_tensor(r->e, t) : NULL;
}

/* Output ROLE of the train graph just run; NaN, after a failed check, when lowering gave
 * the graph none (the executor asserts on node -1). */
static double train_output(Run *r, int role)
{
    int id = r->p->train.output[role];
    CHECK(id >= 0);
    return id >= 0 ? cpu_exec_scalar(r->e, id) : NAN;
}

/* --- reference values --- */

static double forward_loss(Run *r, const double *w, int batch)
{
    for (int t = 0; t < 2; t++)
        memcpy(cpu_exec_tensor(r->fd, t), w + OFFSET[t], (size_t)SIZE[t] * sizeof(double));
    CpuFeed f = feed_of(batch);
    CHECK(cpu_exec_run(r->fd, &r->p->forward, &f) == 0);
    return cpu_exec_scalar(r->fd, r->p->forward.output[IR_OUT_LOSS]);
}

static void fd_grad(Run *r, int batch, double *g)
{
    double w[NW];
    memcpy(w, r->ref.w, sizeof w);
    for (int j = 0; j < NW; j++) {
        w[j] = r->ref.w[j] + FD_EPS;
        double plus = forward_loss(r, w, batch);
        w[j] = r->ref.w[j] - FD_EPS;
        double minus = forward_loss(r, w, batch);
        w[j] = r->ref.w[j];
        g[j] = (plus - minus) / (2 * FD_EPS);
    }
}

static double grad_norm(const double *g)
{
    double s = 0;
    for (int j = 0; j < NW; j++)
        s += g[j] * g[j];
    return sqrt(s);
}

/* torch.optim.SGD.step, dampening 0. */
static void sgd_ref(const TrainConfig *c, Ref *r, const double *grad, double lr)
{
    for (int j = 0; j < NW; j++) {
        double g = grad[j];
        if (c->weight_decay != 0)
            g += c->weight_decay * r->w[j];
        if (c->momentum != 0) {
            r->buf[j] = c->momentum * r->buf[j] + g;
            g = c->nesterov ? g + c->momentum * r->buf[j] : r->buf[j];
        }
        r->w[j] -= lr * g;
    }
    r->optim_step++;
}

/* torch.optim.Adam / AdamW.step (amsgrad off). */
static void adam_ref(const TrainConfig *c, Ref *r, const double *grad, double lr)
{
    double t = r->optim_step + 1;
    double bc1 = 1 - pow(c->beta1, t), bc2 = 1 - pow(c->beta2, t);
    for (int j = 0; j < NW; j++) {
        double g = grad[j];
        if (c->optimizer == OPT_ADAMW)
            r->w[j] *= 1 - lr * c->weight_decay;
        else if (c->weight_decay != 0)
            g += c->weight_decay * r->w[j];
        r->m[j] = c->beta1 * r->m[j] + (1 - c->beta1) * g;
        r->v[j] = c->beta2 * r->v[j] + (1 - c->beta2) * g * g;
        double denom = sqrt(r->v[j]) / sqrt(bc2) + c->eps;
        r->w[j] -= lr / bc1 * r->m[j] / denom;
    }
    r->optim_step = t;
}

static void optimizer_ref(const TrainConfig *c, Ref *r, const double *grad, double lr)
{
    if (c->optimizer == OPT_SGD)
        sgd_ref(c, r, grad, lr);
    else
        adam_ref(c, r, grad, lr);
}

/* --- comparing --- */

static void check_values(const char *what, const double *got, const double *want, int n)
{
    for (int j = 0; j < n; j++) {
        check_count++;
        if (!(fabs(got[j] - want[j]) <= ATOL + RTOL * fabs(want[j]))) {
            check_failures++;
            fprintf(stderr, "%s[%d] is %.12g, want %.12g\n", what, j, got[j], want[j]);
        }
    }
}

/* "PREFIX.w" and "PREFIX.b" against the flattened WANT. */
static void check_state(Run *r, const char *prefix, const double *want, const char *label)
{
    static const char *const names[2] = {"w", "b"};
    for (int t = 0; t < 2; t++) {
        char name[128], what[192];
        if (prefix)
            snprintf(name, sizeof name, "%s.%s", prefix, names[t]);
        else
            snprintf(name, sizeof name, "%s", names[t]);
        snprintf(what, sizeof what, "%s: %s", label, name);
        const double *got = tensor(r, name);
        if (got)
            check_values(what, got, want + OFFSET[t], SIZE[t]);
    }
}

static double scalar_state(Run *r, const char *name)
{
    const double *v = tensor(r, name);
    return v ? v[0] : NAN;
}

static void check_all_state(Run *r, const char *label)
{
    const TrainConfig *c = &r->p->cfg;
    check_state(r, NULL, r->ref.w, label);
    if (c->optimizer == OPT_SGD && c->momentum != 0)
        check_state(r, "cgc.sgd.momentum_buffer", r->ref.buf, label);
    if (c->optimizer != OPT_SGD) {
        check_state(r, "cgc.adam.exp_avg", r->ref.m, label);
        check_state(r, "cgc.adam.exp_avg_sq", r->ref.v, label);
    }
    CHECK_CLOSE(scalar_state(r, "cgc.optim.step"), r->ref.optim_step, 0, 0);
}

/* One train run on BATCH. Its loss output must be the forward's loss at the parameters
 * the step started from (unscaled, under fp16), to rounding. */
static void train_step(Run *r, int batch)
{
    CpuFeed f = feed_of(batch);
    CHECK(cpu_exec_run(r->e, &r->p->forward, &f) == 0);   /* no ASSIGNs: changes nothing */
    double want = cpu_exec_scalar(r->e, r->p->forward.output[IR_OUT_LOSS]);
    CHECK(cpu_exec_run(r->e, &r->p->train, &f) == 0);
    CHECK_CLOSE(train_output(r, IR_OUT_LOSS), want, 0, 1e-15);
}

/* --- the tests --- */

static TrainConfig config(OptKind opt, double lr)
{
    TrainConfig c;
    config_defaults(&c);
    c.optimizer = opt;
    c.lr = lr;
    c.weight_decay = 0;
    return c;
}

/* Three steps of each optimizer on three batches, state compared after each. */
static double schedule_ref(const TrainConfig *c, double t);

/* Three steps of each optimizer; the last cases under a schedule, so that every term that
 * takes the learning rate takes the scheduled one (AdamW's decay included). */
static void optimizers(void)
{
    enum { NCASES = 8 };
    TrainConfig cases[NCASES];
    const char *labels[NCASES] = {"sgd", "sgd momentum", "sgd nesterov wd", "adam", "adam wd",
                                  "adamw", "adamw wd cosine warmup", "sgd nesterov wd step"};
    cases[0] = config(OPT_SGD, 0.1);
    cases[1] = config(OPT_SGD, 0.1), cases[1].momentum = 0.9;
    cases[2] = config(OPT_SGD, 0.1), cases[2].momentum = 0.9, cases[2].nesterov = true;
    cases[2].weight_decay = 0.05;
    cases[3] = config(OPT_ADAM, 0.01);
    cases[4] = config(OPT_ADAM, 0.01), cases[4].weight_decay = 0.1;
    cases[5] = config(OPT_ADAMW, 0.01), cases[5].weight_decay = 0.1;
    cases[6] = cases[5], cases[6].schedule = SCHED_COSINE, cases[6].warmup = 2;
    cases[6].min_lr = 0.001;
    cases[7] = cases[2], cases[7].schedule = SCHED_STEP, cases[7].step_every = 1;
    cases[7].gamma = 0.5;
    for (int k = 0; k < NCASES; k++) {
        Run r = run_new(cases[k]);
        for (int step = 0; step < 3; step++) {
            double g[NW];
            fd_grad(&r, step, g);
            train_step(&r, step);
            optimizer_ref(&cases[k], &r.ref, g, schedule_ref(&cases[k], step));
            char label[64];
            snprintf(label, sizeof label, "%s, step %d", labels[k], step + 1);
            check_all_state(&r, label);
            CHECK_CLOSE(scalar_state(&r, "cgc.train.step"), step + 1, 0, 0);
        }
        run_free(&r);
    }
}

/* --- schedules: lr(t) seen through one plain-SGD step from the same start --- */

static double cosine_ref(const TrainConfig *c, double t)
{
    double w = (double)c->warmup, T = TOTAL_STEPS;
    if (t < w)
        return c->lr * (t + 1) / w;
    double progress = fmin(t - w, T - w) / fmax(T - w, 1);
    return c->min_lr + (c->lr - c->min_lr) * 0.5 * (1 + cos(M_PI * progress));
}

static double schedule_ref(const TrainConfig *c, double t)
{
    switch (c->schedule) {
    case SCHED_CONSTANT: return c->lr;
    case SCHED_STEP: return c->lr * pow(c->gamma, floor(t / (double)c->step_every));
    case SCHED_COSINE: return cosine_ref(c, t);
    }
    return NAN;
}

static void check_schedule(TrainConfig c, const char *label, const double *ts, int nts)
{
    Run r = run_new(c);
    double g[NW], start[NW];
    fd_grad(&r, 0, g);
    memcpy(start, r.ref.w, sizeof start);
    for (int k = 0; k < nts; k++) {
        for (int t = 0; t < 2; t++)
            memcpy(cpu_exec_tensor(r.e, t), start + OFFSET[t], (size_t)SIZE[t] * sizeof(double));
        double *step = tensor(&r, "cgc.train.step");
        if (step) step[0] = ts[k];
        memcpy(r.ref.w, start, sizeof start);
        train_step(&r, 0);
        double lr = schedule_ref(&c, ts[k]);
        sgd_ref(&c, &r.ref, g, lr);
        char what[96];
        snprintf(what, sizeof what, "%s, t = %g, lr %g: w", label, ts[k], lr);
        check_values(what, cpu_exec_tensor(r.e, 0), r.ref.w, SIZE[0]);
        CHECK_CLOSE(scalar_state(&r, "cgc.train.step"), ts[k] + 1, 0, 0);
    }
    run_free(&r);
}

static void schedules(void)
{
    TrainConfig c = config(OPT_SGD, 0.1);
    const double constant_t[] = {0, 5};
    check_schedule(c, "constant", constant_t, 2);

    c.schedule = SCHED_STEP, c.step_every = 2, c.gamma = 0.5;
    const double step_t[] = {0, 1, 2, 3, 7};
    check_schedule(c, "step", step_t, 5);

    c = config(OPT_SGD, 0.1);
    c.schedule = SCHED_COSINE, c.warmup = 3, c.min_lr = 0.01;
    const double warm_t[] = {0, 1, 2, 3, 6, 9, 10, 12};
    check_schedule(c, "cosine warmup 3", warm_t, 8);

    /* torch's CosineAnnealingLR(T_max = T, eta_min): eta_min + (lr - eta_min)(1 + cos(pi t/T))/2 */
    c.warmup = 0, c.min_lr = 0;
    const double plain_t[] = {0, 4, 10};
    check_schedule(c, "cosine", plain_t, 3);
    CHECK_CLOSE(cosine_ref(&c, 4), 0.1 * (1 + cos(M_PI * 4 / TOTAL_STEPS)) / 2, 1e-15, 0);
}

/* --- clipping --- */

static void clipping(void)
{
    const double clips[] = {1e-3, 1e3};   /* clips hard; never clips (coefficient 1) */
    for (int k = 0; k < 2; k++) {
        TrainConfig c = config(OPT_SGD, 0.1);
        c.momentum = 0.9;
        c.clip_norm = clips[k];
        Run r = run_new(c);
        for (int step = 0; step < 2; step++) {
            double g[NW];
            fd_grad(&r, step, g);
            double norm = grad_norm(g), coef = fmin(c.clip_norm / (norm + 1e-6), 1);
            for (int j = 0; j < NW; j++)
                g[j] *= coef;
            train_step(&r, step);
            CHECK_CLOSE(train_output(&r, IR_OUT_GRAD_NORM), norm, ATOL, RTOL);
            sgd_ref(&c, &r.ref, g, c.lr);
            check_all_state(&r, k == 0 ? "clip 1e-3" : "clip 1e3");
        }
        run_free(&r);
    }
}

/* --- accumulation: micro-steps on batches 0 and 2, the step on 1 and 0 --- */

static void accumulation(void)
{
    TrainConfig c = config(OPT_SGD, 0.1);
    c.momentum = 0.9;
    c.accumulate = 2;
    Run r = run_new(c);
    CHECK(r.p->train_micro.nnodes > 0);
    static const int micro_batch[2] = {0, 2}, step_batch[2] = {1, 0};
    for (int step = 0; step < 2; step++) {
        double g0[NW], g1[NW], mean[NW], half[NW];
        fd_grad(&r, micro_batch[step], g0);
        fd_grad(&r, step_batch[step], g1);
        CpuFeed f = feed_of(micro_batch[step]);
        CHECK(cpu_exec_run(r.e, &r.p->train_micro, &f) == 0);
        for (int j = 0; j < NW; j++)
            half[j] = g0[j] / 2, mean[j] = (g0[j] + g1[j]) / 2;
        check_state(&r, "cgc.accum", half, "after the micro-step");
        train_step(&r, step_batch[step]);
        sgd_ref(&c, &r.ref, mean, c.lr);
        check_all_state(&r, "accumulate 2");
        double zeros[NW] = {0};
        check_state(&r, "cgc.accum", zeros, "after the step");
        CHECK_CLOSE(scalar_state(&r, "cgc.train.step"), step + 1, 0, 0);
    }
    run_free(&r);
}

/* --- fp16 loss scaling (the forward stays f64 here: no precision pass, only GradScaler's
 * logic, which is exact because the scale is a power of two) --- */

static double skipped(Run *r)
{
    return train_output(r, IR_OUT_SKIPPED);
}

static void loss_scaling(void)
{
    TrainConfig c = config(OPT_ADAM, 0.01);
    c.precision = PREC_FP16;
    Run r = run_new(c);
    CHECK_CLOSE(scalar_state(&r, "cgc.scaler.scale"), 65536, 0, 0);

    double g[NW];   /* a clean step */
    fd_grad(&r, 0, g);
    train_step(&r, 0);
    adam_ref(&c, &r.ref, g, c.lr);
    check_all_state(&r, "fp16 clean step");
    CHECK_CLOSE(skipped(&r), 0, 0, 0);
    CHECK_CLOSE(scalar_state(&r, "cgc.scaler.scale"), 65536, 0, 0);
    CHECK_CLOSE(scalar_state(&r, "cgc.scaler.growth_tracker"), 1, 0, 0);

    /* an inf in the data: the step is skipped, the scale halved */
    float saved = batches[1][0];
    batches[1][0] = INFINITY;
    CpuFeed f = feed_of(1);
    CHECK(cpu_exec_run(r.e, &r.p->train, &f) == 0);
    batches[1][0] = saved;
    CHECK_CLOSE(skipped(&r), 1, 0, 0);
    check_all_state(&r, "fp16 skipped step");   /* unchanged, optim.step included */
    CHECK_CLOSE(scalar_state(&r, "cgc.scaler.scale"), 32768, 0, 0);
    CHECK_CLOSE(scalar_state(&r, "cgc.scaler.growth_tracker"), 0, 0, 0);
    CHECK_CLOSE(scalar_state(&r, "cgc.train.step"), 2, 0, 0);

    /* the 2000th clean step in a row doubles the scale */
    double *tracker = tensor(&r, "cgc.scaler.growth_tracker");
    if (tracker) tracker[0] = 1999;
    fd_grad(&r, 2, g);
    train_step(&r, 2);
    adam_ref(&c, &r.ref, g, c.lr);
    check_all_state(&r, "fp16 growth step");
    CHECK_CLOSE(skipped(&r), 0, 0, 0);
    CHECK_CLOSE(scalar_state(&r, "cgc.scaler.scale"), 65536, 0, 0);
    CHECK_CLOSE(scalar_state(&r, "cgc.scaler.growth_tracker"), 0, 0, 0);
    run_free(&r);
}

int main(void)
{
    make_batches();
    optimizers();
    schedules();
    clipping();
    accumulation();
    loss_scaling();
    return check_result();
}
