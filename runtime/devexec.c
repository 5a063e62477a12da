/* devexec.c: the plan runner: a Plan (codegen/plan.h) issued on a Device (device.h).
 *
 * Everything a step touches lives in one arena allocated once, laid out by the memory
 * plan (codegen/memplan.c): each buffer that is not a view gets a 256-byte-aligned
 * offset sized for the symbols' maxima, buffers whose lives do not meet share memory,
 * views resolve to the address of the buffer they alias, and every byte no buffer covers
 * is handed to mark_unused so that the emulation's AddressSanitizer catches a kernel
 * that strays. The arena's size is known before anything is allocated, so a plan that
 * cannot fit the device stops there, with the numbers and what to change.
 * Kernels are looked up once, when the runner is made; a graph run then only resolves
 * sizes and arguments and issues the steps, in order, without waiting. Reading a value
 * back is the one thing that waits, and it converts f16/bf16 bit patterns and i32 to f32
 * on the host so that callers compare everything as f32.
 */
#include "devexec.h"

#include <stdlib.h>
#include <string.h>

#include "../base/half.h"
#include "cpu/exec.h"

enum { ARENA_ALIGN = 256 };

struct DevExec {
    const Plan *plan;
    const IrProgram *p;
    Device *d;
    const char *net_path;
    int64_t symmax[IR_MAX_SYMBOLS];
    int64_t symvals[IR_MAX_SYMBOLS];         /* of the last run, for devexec_value */
    const IrGraph *last;        /* the graph last run */
    bool reuse;                 /* buffers share memory: only outputs survive a run */
    DevPtr arena;
    size_t arena_bytes;
    size_t persistent_bytes;    /* of the arena: tensors, inputs, constants, outputs */
    size_t *offset;             /* per buffer, into the arena (views: their root's) */
    void **kernel;              /* per plan kernel: the device's handle */
    /* max-autotune's choices: per plan kernel, the items and threads per block its
     * launches take (0: the plan's); per step of each graph, its GEMM's algorithm or
     * generated kernel */
    int64_t *items;
    int *block;
    PlanStepChoice *gemm[PG_NUM];
    int *mlp;                   /* per fused MLP run (Plan.mlps): its shape + 1, 0: its steps */
    int *window;                /* per implicit-GEMM run (Plan.windows), reader by reader
                                 * (PLAN_WINDOW_MAX_READERS each): its tile shape, -1 off */
    int *conv;                  /* the same, by the convolution library: its algorithm,
                                 * -1 off (PlanChoices.window_conv) */
    int64_t *conv_checked;      /* per run: the batch its calls were last found possible
                                 * at (conv_possible), or -1 */
    DeviceSpan *spans;          /* a collective's spans, as coll_start takes them */
    int *flying, nflying;       /* the collectives started and not yet waited for */
    int *born[PG_NUM];          /* per graph, the activations each step is the first to
                                 * name (births): mark_undefined */
    bool gemm_kernels_loaded;   /* devexec_load_gemm_kernels has run */
    /* devexec_timing_start .. devexec_timing_collect: each launch and GEMM between two
     * fences; times are taken from BASE, recorded at the first start */
    bool timing;
    DeviceFence *base;
    DevTimedEvent *ev;
    DeviceFence **fence;        /* ev[i] runs between fence[2i] and fence[2i + 1] */
    int nev, capev, nfences;
};

static int timed_begin(DevExec *e, const DevTimedEvent *ev);
static int timed_end(DevExec *e);

/* One kernel parameter's value; args[i] points at one of these. */
typedef union ArgValue {
    DevPtr ptr;
    int64_t i64;
    uint64_t u64;
    float f32;
} ArgValue;
_Static_assert(sizeof(ArgValue) == 8, "an array of ArgValue is a packed kernel's slots");

/* ---- host conversions of 16-bit storage ---- */

static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* X is already representable (cpu_round_f16 rounded it); this only repacks the bits. */
static uint16_t f32_to_f16(float x)
{
    x = cpu_round_f16(x);
    uint32_t u = f32_bits(x), sign = (u >> 16) & 0x8000;
    int exp = (int)((u >> 23) & 0xff) - 127;
    uint32_t man = u & 0x7fffff;
    if (exp == 128) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= -14) return (uint16_t)(sign | (uint32_t)(exp + 15) << 10 | man >> 13);
    float mag = x < 0 ? -x : x;                    /* subnormal: a multiple of 2^-24 */
    return (uint16_t)(sign | (uint32_t)(mag * 0x1p24f));
}

static uint16_t f32_to_bf16(float x) { return (uint16_t)(f32_bits(cpu_round_bf16(x)) >> 16); }

/* N values of type T at SRC into f32 OUT. */
static void to_f32(DType t, const void *src, int64_t n, float *out)
{
    for (int64_t i = 0; i < n; i++) {
        switch (t) {
        case DT_F32: out[i] = ((const float *)src)[i]; break;
        case DT_F16: out[i] = half_f16_to_f32(((const uint16_t *)src)[i]); break;
        case DT_BF16: out[i] = half_bf16_to_f32(((const uint16_t *)src)[i]); break;
        case DT_I32: out[i] = (float)((const int32_t *)src)[i]; break;
        }
    }
}

/* N f32 values into type T at OUT (i32 truncates, as a label would be given). */
static void from_f32(DType t, const float *src, int64_t n, void *out)
{
    for (int64_t i = 0; i < n; i++) {
        switch (t) {
        case DT_F32: ((float *)out)[i] = src[i]; break;
        case DT_F16: ((uint16_t *)out)[i] = f32_to_f16(src[i]); break;
        case DT_BF16: ((uint16_t *)out)[i] = f32_to_bf16(src[i]); break;
        case DT_I32: ((int32_t *)out)[i] = (int32_t)src[i]; break;
        }
    }
}

/* ---- the arena ---- */

/* Offsets of every buffer (the memory plan, codegen/memplan.c) and the arena's size. */
static void layout(DevExec *e)
{
    PlanLayout l;
    plan_layout(e->plan, e->symmax, e->reuse, &l);
    memcpy(e->offset, l.offset, (size_t)e->plan->nbuffers * sizeof *e->offset);
    e->arena_bytes = l.arena_bytes;
    e->persistent_bytes = l.persistent_bytes;
    plan_layout_free(&l);
}

typedef struct Span {
    size_t lo, hi;
} Span;

static int span_order(const void *pa, const void *pb)
{
    const Span *a = pa, *b = pb;
    return a->lo != b->lo ? (a->lo < b->lo ? -1 : 1) : (a->hi != b->hi ? (a->hi < b->hi ? -1 : 1) : 0);
}

/* Hands every byte of the arena that no buffer covers to mark_unused. Buffers that share
 * memory overlap and need not come in offset order, so the spans are sorted first. */
static void mark_padding(DevExec *e)
{
    const Plan *plan = e->plan;
    if (!e->d->ops->mark_unused) return;
    Span *spans = xmalloc((size_t)(plan->nbuffers ? plan->nbuffers : 1) * sizeof *spans);
    int n = 0;
    for (int b = 0; b < plan->nbuffers; b++) {
        size_t bytes = plan_buffer_bytes(plan, b, e->symmax);     /* views: 0 */
        if (bytes) spans[n++] = (Span){ e->offset[b], e->offset[b] + bytes };
    }
    qsort(spans, (size_t)n, sizeof *spans, span_order);
    size_t covered = 0;     /* every byte below is some buffer's, or already marked */
    for (int i = 0; i < n; i++) {
        if (spans[i].lo > covered) e->d->ops->mark_unused(e->d, e->arena + covered, spans[i].lo - covered);
        if (spans[i].hi > covered) covered = spans[i].hi;
    }
    if (e->arena_bytes > covered) e->d->ops->mark_unused(e->d, e->arena + covered, e->arena_bytes - covered);
    free(spans);
}

/* The fixes that apply to this program, as a list for the message of check_fits: a
 * smaller batch always; checkpointing and a lower precision unless already chosen. */
static void fixes(const IrProgram *p, char *buf, size_t len)
{
    const char *fix[3];
    int n = 0;
    fix[n++] = "a smaller batch";
    if (p->cfg.checkpoint != CKPT_AUTO) fix[n++] = "checkpoint = auto";
    if (p->cfg.precision == PREC_FP32 || p->cfg.precision == PREC_TF32)
        fix[n++] = "a lower precision (bf16)";
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < len; i++) {
        const char *sep = i == 0 ? "" : i == n - 1 ? ", or " : ", ";
        used += (size_t)snprintf(buf + used, len - used, "%s%s", sep, fix[i]);
    }
}

/* Whether the arena fits the memory the device had free when it was opened (unknown
 * free memory passes); reports the numbers and the fixes when it does not, before
 * anything is allocated or run. */
static bool check_fits(const DevExec *e)
{
    size_t have = e->d->free_bytes;
    if (!have || e->arena_bytes <= have) return true;
    char need[32], fixed[32], act[32], free_[32], fix[160];
    diag_format_bytes(e->arena_bytes, need, sizeof need);
    diag_format_bytes(e->persistent_bytes, fixed, sizeof fixed);
    diag_format_bytes(e->arena_bytes - e->persistent_bytes, act, sizeof act);
    diag_format_bytes(have, free_, sizeof free_);
    fixes(e->p, fix, sizeof fix);
    cgc_error("%s: the plan needs %s of device memory (arena: %s of parameters, optimizer "
              "state and data, %s of activations and temporaries at batch %lld) but %s has "
              "%s free; fixes: %s", e->net_path, need, fixed, act,
              (long long)(e->p->nsyms ? e->symmax[0] : 1), e->d->name, free_, fix);
    return false;
}

/* Whether D can run a plan with collectives over the ranks (the device is a rank of the
 * job); says why not. */
static bool check_ranks(const Plan *plan, Device *d, const char *net_path)
{
    bool sums = false;
    for (int g = 0; g < PG_NUM; g++) sums |= plan->graph[g].ncolls > 0;
    if (sums && !d->ops->coll_start) {
        cgc_error("%s: %s cannot sum over the ranks of a job; train the ranks on the CPU",
                  net_path, d->name);
        return false;
    }
    return true;
}

/* Room for the collectives of E's plan: the most spans one takes, and every one in
 * flight. */
static void colls_alloc(DevExec *e)
{
    int spans = 1, colls = 1;
    for (int g = 0; g < PG_NUM; g++) {
        const PlanGraph *pg = &e->plan->graph[g];
        if (pg->ncolls > colls) colls = pg->ncolls;
        for (int c = 0; c < pg->ncolls; c++)
            if (pg->colls[c].nmembers > spans) spans = pg->colls[c].nmembers;
    }
    e->spans = xmalloc((size_t)spans * sizeof *e->spans);
    e->flying = xmalloc((size_t)colls * sizeof *e->flying);
}

DevPtr devexec_buffer(const DevExec *e, int b)
{
    CGC_ASSERT(b >= 0 && b < e->plan->nbuffers);
    return e->arena + e->offset[b];
}

/* Writes the PB_CONST buffers (every element the constant, in the buffer's dtype). */
static int write_constants(DevExec *e)
{
    for (int b = 0; b < e->plan->nbuffers; b++) {
        const PlanBuffer *pb = &e->plan->buffers[b];
        if (pb->kind != PB_CONST || pb->alias_of >= 0) continue;
        int64_t n = ir_numel(&pb->shape, e->symmax);
        float *v = xmalloc((size_t)(n ? n : 1) * sizeof *v);
        void *raw = xmalloc((size_t)(n ? n : 1) * sizeof(float));
        for (int64_t i = 0; i < n; i++) v[i] = (float)pb->value;
        from_f32(pb->dtype, v, n, raw);
        int rc = e->d->ops->upload(e->d, devexec_buffer(e, b), raw, (size_t)n * ir_dtype_size(pb->dtype));
        free(v);
        free(raw);
        if (rc != 0) return -1;
    }
    return 0;
}

/* ---- checking the plan once (its mistakes are cgc's bugs) ---- */

static bool arg_fits(PlanParamType t, PlanArgKind k)
{
    switch (t) {
    case PP_PTR: return k == ARG_BUFFER;
    case PP_I64: return k == ARG_SYMBOL || k == ARG_I64 || k == ARG_RANK;
    case PP_U64: return k == ARG_SEED || k == ARG_I64 || k == ARG_RANK_ROW;
    case PP_F32: return k == ARG_F32 || k == ARG_RUNTIME;
    }
    return false;
}

static void check_launch(const Plan *plan, const PlanStep *s)
{
    const PlanLaunch *l = &s->launch;
    if (l->kernel < 0 || l->kernel >= plan->nkernels)
        CGC_INTERNAL("plan step '%s' launches kernel %d of %d", s->what, l->kernel, plan->nkernels);
    const PlanKernel *k = &plan->kernels[l->kernel];
    if (l->nargs != k->nparams)
        CGC_INTERNAL("plan step '%s' passes %d arguments to %s, which takes %d", s->what,
                     l->nargs, k->name, k->nparams);
    for (int i = 0; i < l->nargs; i++) {
        const PlanArg *a = &l->arg[i];
        bool in_range = a->kind != ARG_BUFFER || (a->index >= 0 && a->index < plan->nbuffers);
        in_range = in_range && (a->kind != ARG_SYMBOL || (a->index >= 0 && a->index < IR_MAX_SYMBOLS));
        in_range = in_range && (a->kind != ARG_RUNTIME || (a->index >= 0 && a->index < IR_NUM_RUNTIME));
        if (!arg_fits(k->param[i], a->kind) || !in_range)
            CGC_INTERNAL("plan step '%s': argument %d (kind %d, index %d) does not fit parameter "
                         "%d of %s", s->what, i, (int)a->kind, a->index, i, k->name);
    }
}

static void check_plan(const Plan *plan)
{
    for (int g = 0; g < PG_NUM; g++)
        for (int i = 0; i < plan->graph[g].nsteps; i++) {
            const PlanStep *s = &plan->graph[g].steps[i];
            if (s->kind == STEP_LAUNCH) check_launch(plan, s);
            else CGC_ASSERT(s->gemm.a >= 0 && s->gemm.b >= 0 && s->gemm.c >= 0 &&
                            s->gemm.a < plan->nbuffers && s->gemm.b < plan->nbuffers &&
                            s->gemm.c < plan->nbuffers);
        }
}

/* ---- making and freeing ---- */

/* The kernels of the device's module: all but the generated GEMMs, which come with
 * devexec_load_gemm_kernels. */
static int find_kernels(DevExec *e)
{
    for (int k = 0; k < e->plan->gemm_kernels_from; k++)
        if (e->d->ops->kernel(e->d, e->plan->kernels[k].name, &e->kernel[k]) != 0) {
            cgc_error("%s: kernel %s of the plan is not in the loaded module; was the device "
                      "opened with this plan's module?", e->net_path, e->plan->kernels[k].name);
            return -1;
        }
    return 0;
}

int devexec_load_gemm_kernels(DevExec *e, double *seconds)
{
    const Plan *plan = e->plan;
    *seconds = 0;
    if (e->gemm_kernels_loaded || plan->gemm_kernels_from == plan->nkernels) return 0;
    if (!e->d->ops->load_kernels) {
        cgc_error("%s: %s cannot load the generated GEMMs' module", e->net_path, e->d->name);
        return -1;
    }
    char *source = plan_gemm_module_source(plan), name[160];
    snprintf(name, sizeof name, "%s.gemm", plan->p->model_name ? plan->p->model_name : "model");
    int rc = e->d->ops->load_kernels(e->d, source, name, seconds);
    free(source);
    for (int k = plan->gemm_kernels_from; k < plan->nkernels && rc == 0; k++)
        if (e->d->ops->kernel(e->d, plan->kernels[k].name, &e->kernel[k]) != 0) rc = -1;
    e->gemm_kernels_loaded = rc == 0;
    return rc;
}

bool devexec_gemm_kernels_loaded(const DevExec *e) { return e->gemm_kernels_loaded; }

static DevExec *open_exec(const Plan *plan, Device *d, const int64_t *symmax, bool reuse,
                          const char *net_path)
{
    check_plan(plan);
    if (!check_ranks(plan, d, net_path ? net_path : "(model)")) return NULL;
    DevExec *e = xcalloc(1, sizeof *e);
    e->plan = plan;
    e->p = plan->p;
    e->d = d;
    e->net_path = net_path ? net_path : "(model)";
    CGC_ASSERT(e->p->nsyms <= IR_MAX_SYMBOLS && e->p->ninputs <= IR_MAX_INPUTS);
    for (int k = 0; k < IR_MAX_SYMBOLS && k < e->p->nsyms; k++) e->symmax[k] = symmax[k];
    e->offset = xcalloc((size_t)(plan->nbuffers ? plan->nbuffers : 1), sizeof *e->offset);
    e->kernel = xcalloc((size_t)(plan->nkernels ? plan->nkernels : 1), sizeof *e->kernel);
    e->items = xcalloc((size_t)(plan->nkernels ? plan->nkernels : 1), sizeof *e->items);
    e->block = xcalloc((size_t)(plan->nkernels ? plan->nkernels : 1), sizeof *e->block);
    for (int g = 0; g < PG_NUM; g++)
        e->gemm[g] = xcalloc((size_t)(plan->graph[g].nsteps + 1), sizeof *e->gemm[g]);
    e->mlp = xcalloc((size_t)plan->nmlps + 1, sizeof *e->mlp);
    e->window = xmalloc(((size_t)plan->nwindows * PLAN_WINDOW_MAX_READERS + 1) * sizeof *e->window);
    for (int j = 0; j < plan->nwindows * PLAN_WINDOW_MAX_READERS; j++) e->window[j] = -1;
    /* the library's own algorithms wherever the device has one: as PyTorch calls cuDNN */
    e->conv = xmalloc(((size_t)plan->nwindows * PLAN_WINDOW_MAX_READERS + 1) * sizeof *e->conv);
    e->conv_checked = xmalloc(((size_t)plan->nwindows + 1) * sizeof *e->conv_checked);
    for (int r = 0; r < plan->nwindows; r++) e->conv_checked[r] = -1;
    for (int j = 0; j < plan->nwindows * PLAN_WINDOW_MAX_READERS; j++)
        e->conv[j] = d->ops->conv && plan->windows[j / PLAN_WINDOW_MAX_READERS].conv ? 0 : -1;
    e->reuse = reuse;
    colls_alloc(e);
    layout(e);
    size_t bytes = e->arena_bytes ? e->arena_bytes : ARENA_ALIGN;
    if (!check_fits(e)) {
        devexec_free(e);
        return NULL;
    }
    if (d->ops->alloc(d, bytes, &e->arena) != 0) {
        cgc_error("%s: cannot allocate the %zu-byte arena of the model on %s (%zu bytes free "
                  "when opened); try a smaller batch", e->net_path, bytes, d->name, d->free_bytes);
        e->arena = 0;
        devexec_free(e);
        return NULL;
    }
    mark_padding(e);
    if (write_constants(e) != 0 || find_kernels(e) != 0) {
        devexec_free(e);
        return NULL;
    }
    return e;
}

DevExec *devexec_new(const Plan *plan, Device *d, const int64_t *symmax, const char *net_path)
{
    return open_exec(plan, d, symmax, true, net_path);
}

DevExec *devexec_new_unshared(const Plan *plan, Device *d, const int64_t *symmax,
                              const char *net_path)
{
    return open_exec(plan, d, symmax, false, net_path);
}

void devexec_free(DevExec *e)
{
    if (!e) return;
    for (int i = 0; i < e->nfences; i++) e->d->ops->fence_free(e->d, e->fence[i]);
    if (e->base) e->d->ops->fence_free(e->d, e->base);
    free(e->fence);
    free(e->ev);
    if (e->arena) e->d->ops->free(e->d, e->arena);
    free(e->offset);
    free(e->kernel);
    free(e->items);
    free(e->block);
    for (int g = 0; g < PG_NUM; g++) {
        free(e->gemm[g]);
        free(e->born[g]);
    }
    free(e->spans);
    free(e->flying);
    free(e->mlp);
    free(e->window);
    free(e->conv);
    free(e->conv_checked);
    free(e);
}

size_t devexec_arena_bytes(const DevExec *e) { return e->arena_bytes; }
Device *devexec_device(DevExec *e) { return e->d; }

/* ---- persistent tensors ---- */

static int tensor_buffer(const DevExec *e, int i)
{
    CGC_ASSERT(i >= 0 && i < e->p->ntensors);
    int b = e->plan->tensor_buffer_base + i;
    CGC_ASSERT(b < e->plan->nbuffers && e->plan->buffers[b].kind == PB_TENSOR &&
               e->plan->buffers[b].dtype == e->p->tensors[i].dtype);
    return b;
}

/* Tensor I's elements and its bytes in the arena (a copy's are 16-bit). */
static int64_t tensor_numel(const DevExec *e, int i) { return ir_numel(&e->p->tensors[i].shape, NULL); }
static size_t tensor_bytes(const DevExec *e, int i)
{
    return (size_t)tensor_numel(e, i) * ir_dtype_size(e->p->tensors[i].dtype);
}

int devexec_tensor_get(DevExec *e, int i, float *out)
{
    DType t = e->p->tensors[i].dtype;
    void *raw = t == DT_F32 ? (void *)out : xmalloc(tensor_bytes(e, i) + 1);
    int rc = e->d->ops->download(e->d, raw, devexec_buffer(e, tensor_buffer(e, i)), tensor_bytes(e, i));
    if (raw != out) {
        if (rc == 0) to_f32(t, raw, tensor_numel(e, i), out);
        free(raw);
    }
    return rc;
}

int devexec_tensor_set(DevExec *e, int i, const float *in)
{
    DType t = e->p->tensors[i].dtype;
    void *raw = t == DT_F32 ? (void *)in : xmalloc(tensor_bytes(e, i) + 1);
    if (raw != in) from_f32(t, in, tensor_numel(e, i), raw);
    int rc = e->d->ops->upload(e->d, devexec_buffer(e, tensor_buffer(e, i)), raw, tensor_bytes(e, i));
    if (raw != in) free(raw);
    return rc;
}

int devexec_init_tensors(DevExec *e, uint64_t seed)
{
    for (int i = 0; i < e->p->ntensors; i++) {
        float *v = xmalloc((size_t)tensor_numel(e, i) * sizeof(float) + 1);
        cpu_tensor_init_values(e->p, i, seed, v);
        int rc = devexec_tensor_set(e, i, v);
        free(v);
        if (rc != 0) return -1;
    }
    return 0;
}

/* ---- a graph run ---- */

static int64_t bind_dim(const DevExec *e, int64_t dim)
{
    return IR_DIM_IS_SYM(dim) ? e->symvals[IR_DIM_SYMBOL(dim)] : dim;
}

static DeviceSite site_of(const DevExec *e, const PlanStep *s, const char *kernel)
{
    return (DeviceSite){kernel, s->what, e->net_path, s->loc.line};
}

static void arg_value(const DevExec *e, const PlanArg *a, const DevFeed *feed, ArgValue *v)
{
    memset(v, 0, sizeof *v);
    switch (a->kind) {
    case ARG_BUFFER: v->ptr = devexec_buffer(e, a->index); break;
    case ARG_SYMBOL: v->i64 = e->symvals[a->index]; break;
    case ARG_SEED: v->u64 = e->p->cfg.seed; break;
    case ARG_I64: v->i64 = (int64_t)a->value; break;
    case ARG_F32: v->f32 = (float)a->value; break;
    case ARG_RUNTIME: v->f32 = (float)feed->runtime[a->index]; break;
    case ARG_RANK_ROW: v->u64 = (uint64_t)feed->rank_row; break;
    case ARG_RANK: v->i64 = feed->rank; break;
    }
}

/* The N arguments A as a launch passes them: their values into VALS, pointers to those
 * into ARGS. */
static void arg_values(const DevExec *e, const PlanArg *a, int n, const DevFeed *feed, ArgValue *vals, void **args)
{
    for (int i = 0; i < n; i++) {
        vals[i].u64 = 0;    /* a float's slot: its high bytes too */
        arg_value(e, &a[i], feed, &vals[i]);
        args[i] = &vals[i];
    }
}

unsigned devexec_grid(const DevExec *e, const PlanLaunch *l, int64_t items)
{
    if (items <= 0) items = e->items[l->kernel] > 0 ? e->items[l->kernel] : l->items_per_block;
    return plan_launch_grid_items(l, items, e->symvals);
}

static int run_launch(DevExec *e, const PlanStep *s, const DevFeed *feed)
{
    const PlanLaunch *l = &s->launch;
    const PlanKernel *k = &e->plan->kernels[l->kernel];
    ArgValue vals[PLAN_MAX_SLOTS];
    void *args[PLAN_MAX_SLOTS];
    arg_values(e, l->arg, l->nargs, feed, vals, args);   /* packed: args[0] is vals, the slots */
    DeviceSite site = site_of(e, s, k->name);
    unsigned block = (unsigned)(e->block[l->kernel] > 0 ? e->block[l->kernel] : k->block);
    return e->d->ops->launch(e->d, e->kernel[l->kernel], devexec_grid(e, l, 0), block, args, &site);
}

GemmCall devexec_gemm_call(const DevExec *e, const PlanStep *s)
{
    const PlanGemm *g = &s->gemm;
    GemmCall c = {
        .trans_a = g->trans_a, .trans_b = g->trans_b,
        .m = plan_gemm_m(g, e->symvals), .n = bind_dim(e, g->n), .k = plan_gemm_k(g, e->symvals),
        .batch = g->batch.rank ? ir_numel(&g->batch, e->symvals) : 1,
        .a = devexec_buffer(e, g->a), .b = devexec_buffer(e, g->b), .c = devexec_buffer(e, g->c),
        .a_type = g->a_type, .b_type = g->b_type, .c_type = g->c_type, .compute = (int)g->compute,
        .epilogue = (int)g->epilogue, .bias_type = g->bias_type,
        .bias = g->bias >= 0 ? devexec_buffer(e, g->bias) : 0,
        .aux = g->aux >= 0 ? devexec_buffer(e, g->aux) : 0,
    };
    if (g->batch.rank) {
        c.stride_a = g->a_batched ? c.m * c.k : 0;
        c.stride_b = g->b_batched ? c.k * c.n : 0;
        c.stride_c = c.m * c.n;
    }
    return c;
}

DeviceSite devexec_gemm_site(const DevExec *e, const PlanStep *s, const GemmCall *c)
{
    return site_of(e, s, s->gemm.epilogue == GEMM_EPI_NONE && c->algo == 0 ? "cublasGemmEx"
                                                                            : "cublasLtMatmul");
}

/* GEMM step S computed by generated kernel K of tile shape TILE (plan.h's ABI for them:
 * c, a, b, bias, aux, m, n, k; a block per tile of C), then the NEPI arguments EPI of
 * an implicit GEMM's epilogue (PlanWindow.epilogue), runtime values from FEED. */
static int run_gemm_kernel(DevExec *e, const PlanStep *s, const GemmCall *c, int k, int tile,
                           const PlanArg *epi, int nepi, const DevFeed *feed)
{
    CGC_ASSERT(k >= 0 && k < e->plan->nkernels && e->gemm_kernels_loaded && 8 + nepi <= PLAN_MAX_PARAMS);
    DevPtr ptr[5] = {c->c, c->a, c->b, c->bias, c->aux};
    int64_t dims[3] = {c->m, c->n, c->k};
    ArgValue vals[PLAN_MAX_PARAMS];
    void *args[PLAN_MAX_PARAMS];
    for (int i = 0; i < 5; i++) args[i] = &ptr[i];
    for (int i = 0; i < 3; i++) args[5 + i] = &dims[i];
    arg_values(e, epi, nepi, feed, vals, args + 8);
    DeviceSite site = site_of(e, s, e->plan->kernels[k].name);
    return e->d->ops->launch(e->d, e->kernel[k], plan_gemm_tile_grid(tile, c->m, c->n),
                             (unsigned)e->plan->kernels[k].block, args, &site);
}

static int run_gemm(DevExec *e, const PlanStep *s, const PlanStepChoice *choice)
{
    GemmCall c = devexec_gemm_call(e, s);
    c.algo = choice->algo;
    if (c.m == 0 || c.n == 0 || c.batch == 0) return 0;   /* nothing to write */
    int tile = choice->tile - 1;
    if (tile >= 0) return run_gemm_kernel(e, s, &c, s->gemm.tile_kernel[tile], tile, NULL, 0, NULL);
    DeviceSite site = devexec_gemm_site(e, s, &c);
    return e->d->ops->gemm(e->d, &c, &site);
}

/* Reader J of implicit-GEMM run R by its kernel of tile shape TILE: the GEMM with the
 * image in place of the patches, the NCHW gradient in place of its transpose, and the
 * TRANSPOSE's buffer for C where it stores NCHW, then its epilogue's arguments. */
static int run_window_kernel(DevExec *e, int r, int j, int tile, const DevFeed *feed)
{
    const PlanWindow *w = &e->plan->windows[r];
    const PlanStep *s = &e->plan->graph[w->graph].steps[w->reader[j]];
    GemmCall c = devexec_gemm_call(e, s);
    if (c.m == 0 || c.n == 0) return 0;   /* nothing to write */
    DevPtr image = devexec_buffer(e, w->image);
    if (w->operand[j] == 'a') c.a = image;
    if (w->operand[j] == 'b') c.b = image;
    if (w->reads_grad[j]) c.a = devexec_buffer(e, w->grad);
    if (j == w->store_reader) c.c = devexec_buffer(e, w->store);
    bool epi = j == w->store_reader;
    return run_gemm_kernel(e, s, &c, w->kernel[j][tile], tile, epi ? w->epi_arg : NULL, epi ? w->epi_nargs : 0,
                           feed);
}

/* Reader J of run R as the library computes it (ConvCall): the forward from the image
 * into the TRANSPOSE's buffer, the filter gradient from the image and the NCHW gradient,
 * the data gradient from that gradient into the FOLD's buffer; with algorithm ALGO. */
static ConvCall conv_call(const DevExec *e, const PlanWindow *w, int j, int algo)
{
    const PlanGemm *g = &e->plan->graph[w->graph].steps[w->reader[j]].gemm;
    char role = plan_window_conv_role(w, j);
    const int64_t *dim = w->image_shape.dim;
    ConvCall c = {
        .kind = role == 'f' ? CONV_FORWARD : role == 'w' ? CONV_FILTER_GRAD : CONV_DATA_GRAD,
        .n = bind_dim(e, dim[0]), .c = bind_dim(e, dim[1]), .h = bind_dim(e, dim[2]), .w = bind_dim(e, dim[3]),
        .k = bind_dim(e, role == 'f' ? g->n : role == 'w' ? g->m : g->k),
        .r = w->win.kernel[0], .s = w->win.kernel[1],
        .stride = {w->win.stride[0], w->win.stride[1]}, .pad = {w->win.pad[0], w->win.pad[1]},
        .dilation = {w->win.dilation[0], w->win.dilation[1]},
        .type = e->plan->buffers[w->image].dtype, .compute = (int)g->compute, .algo = algo,
    };
    c.oh = ir_window_extent(c.h, &w->win, 0);
    c.ow = ir_window_extent(c.w, &w->win, 1);
    c.x = devexec_buffer(e, role == 'd' ? w->fold_out : w->image);
    c.f = devexec_buffer(e, role == 'w' ? g->c : g->b);
    c.y = devexec_buffer(e, role == 'f' ? w->store : w->grad);
    return c;
}

static int run_window_conv(DevExec *e, int r, int j, int algo)
{
    const PlanWindow *w = &e->plan->windows[r];
    const PlanStep *s = &e->plan->graph[w->graph].steps[w->reader[j]];
    ConvCall c = conv_call(e, w, j, algo);
    if (c.n == 0) return 0;     /* nothing to write */
    DeviceSite site = site_of(e, s, devexec_conv_name(&c));
    return e->d->ops->conv(e->d, &c, &site);
}

const char *devexec_conv_name(const ConvCall *c)
{
    static const char *const name[CONV_KINDS] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                                 "cudnnConvolutionBackwardFilter"};
    return name[c->kind];
}

int devexec_window_conv(DevExec *e, int r, int j, int algo)
{
    CGC_ASSERT(r >= 0 && r < e->plan->nwindows && e->plan->windows[r].conv && e->d->ops->conv);
    CGC_ASSERT(j >= 0 && j < e->plan->windows[r].nreaders && algo >= 0);
    return run_window_conv(e, r, j, algo);
}

int devexec_conv_algos(DevExec *e, int r, int j, int *count)
{
    CGC_ASSERT(r >= 0 && r < e->plan->nwindows && e->plan->windows[r].conv && e->d->ops->conv);
    const PlanWindow *w = &e->plan->windows[r];
    ConvCall c = conv_call(e, w, j, 0);
    *count = 0;
    if (c.n == 0) return 0;
    DeviceSite site = site_of(e, &e->plan->graph[w->graph].steps[w->reader[j]], devexec_conv_name(&c));
    return e->d->ops->conv_algos(e->d, &c, count, &site);
}

void devexec_choose_window_conv(DevExec *e, int r, const int *algos)
{
    CGC_ASSERT(r >= 0 && r < e->plan->nwindows);
    const PlanWindow *w = &e->plan->windows[r];
    CGC_ASSERT(!algos || (w->conv && e->d->ops->conv));
    if (algos) devexec_choose_window(e, r, NULL);
    for (int j = 0; j < PLAN_WINDOW_MAX_READERS; j++)
        e->conv[r * PLAN_WINDOW_MAX_READERS + j] = algos && j < w->nreaders ? algos[j] : -1;
}

bool devexec_has_conv(const DevExec *e) { return e->d->ops->conv != NULL; }

int devexec_window(DevExec *e, int r, int j, int tile, const DevFeed *feed)
{
    CGC_ASSERT(r >= 0 && r < e->plan->nwindows);
    const PlanWindow *w = &e->plan->windows[r];
    CGC_ASSERT(j >= 0 && j < w->nreaders && tile < PLAN_GEMM_TILES);
    if (tile >= 0) return run_window_kernel(e, r, j, tile, feed);
    const PlanStep *s = &e->plan->graph[w->graph].steps[w->reader[j]];
    return run_gemm(e, s, &e->gemm[w->graph][w->reader[j]]);
}

void devexec_choose_window(DevExec *e, int r, const int *tiles)
{
    CGC_ASSERT(r >= 0 && r < e->plan->nwindows);
    const PlanWindow *w = &e->plan->windows[r];
    if (tiles) devexec_choose_window_conv(e, r, NULL);
    for (int j = 0; j < PLAN_WINDOW_MAX_READERS; j++) {
        int t = tiles && j < w->nreaders ? tiles[j] : -1;
        CGC_ASSERT(t < 0 || (t < PLAN_GEMM_TILES && w->kernel[j][t] >= 0 && e->gemm_kernels_loaded));
        e->window[r * PLAN_WINDOW_MAX_READERS + j] = t;
    }
}

/* Whether implicit-GEMM run R is on (its first reader's tile, as they all are or none). */
static bool window_on(const DevExec *e, int r) { return e->window[r * PLAN_WINDOW_MAX_READERS] >= 0; }
/* Whether the library computes run R. */
static bool conv_on(const DevExec *e, int r) { return e->conv[r * PLAN_WINDOW_MAX_READERS] >= 0; }

int devexec_window_conv_algo(const DevExec *e, int r, int j)
{
    CGC_ASSERT(r >= 0 && r < e->plan->nwindows && j >= 0 && j < PLAN_WINDOW_MAX_READERS);
    return e->conv[r * PLAN_WINDOW_MAX_READERS + j];
}

bool devexec_unwritten(const DevExec *e, PlanGraphId gid, int b)
{
    const Plan *pl = e->plan;
    const PlanGraph *pg = &pl->graph[gid];
    b = plan_buffer_root(pl, b);
    for (int r = 0; r < pl->nwindows; r++) {
        const PlanWindow *w = &pl->windows[r];
        if (w->graph != gid || !(window_on(e, r) || conv_on(e, r))) continue;
        int dgrad = -1;         /* the data gradient's C, before its FOLD */
        for (int j = 0; conv_on(e, r) && j < w->nreaders; j++)
            if (plan_window_conv_role(w, j) == 'd') dgrad = pg->steps[w->reader[j]].gemm.c;
        int unwritten[5] = {pg->node_buffer[pg->steps[w->unfold].node],
                            w->store_reader >= 0 ? pg->steps[w->reader[w->store_reader]].gemm.c : -1,
                            w->grad_transpose >= 0 ? pg->node_buffer[pg->steps[w->grad_transpose].node] : -1,
                            dgrad,
                            window_on(e, r) && w->epilogue >= 0 ? w->store : -1};   /* C in registers */
        for (int k = 0; k < 5; k++)
            if (unwritten[k] >= 0 && plan_buffer_root(pl, unwritten[k]) == b) return true;
    }
    return false;
}

int devexec_window_tile(const DevExec *e, int r, int j)
{
    CGC_ASSERT(r >= 0 && r < e->plan->nwindows && j >= 0 && j < PLAN_WINDOW_MAX_READERS);
    return e->window[r * PLAN_WINDOW_MAX_READERS + j];
}

const char *devexec_window_kernel(const DevExec *e, int r, int j)
{
    CGC_ASSERT(r >= 0 && r < e->plan->nwindows);
    int t = e->window[r * PLAN_WINDOW_MAX_READERS + j];
    return t >= 0 ? e->plan->kernels[e->plan->windows[r].kernel[j][t]].name : NULL;
}

const char *devexec_gemm_kernel(const DevExec *e, PlanGraphId gid, int i)
{
    int j, r = plan_window_reader(e->plan, gid, i, &j);
    if (r >= 0 && window_on(e, r)) return devexec_window_kernel(e, r, j);
    const PlanStep *s = &e->plan->graph[gid].steps[i];
    int tile = e->gemm[gid][i].tile;
    return tile > 0 ? e->plan->kernels[s->gemm.tile_kernel[tile - 1]].name : NULL;
}

/* Fused MLP run R (Plan.mlps) in one launch of its kernel of shape SHAPE (plan.h's ABI,
 * plan_mlp_args, then m). */
static int run_mlp_kernel(DevExec *e, int r, int shape)
{
    const PlanMlp *run = &e->plan->mlps[r];
    const PlanStep *st = &e->plan->graph[run->graph].steps[run->step[0]];
    int k = run->kernel[shape];
    CGC_ASSERT(k >= 0 && k < e->plan->nkernels && e->gemm_kernels_loaded);
    int buf[3 * PLAN_MLP_MAX_LAYERS + 1], n = plan_mlp_args(e->plan, r, buf);
    DevPtr ptr[3 * PLAN_MLP_MAX_LAYERS + 1];
    void *args[3 * PLAN_MLP_MAX_LAYERS + 2];
    int64_t m = plan_gemm_m(&st->gemm, e->symvals);
    for (int i = 0; i < n; i++) {
        ptr[i] = buf[i] >= 0 ? devexec_buffer(e, buf[i]) : 0;
        args[i] = &ptr[i];
    }
    args[n] = &m;
    if (m == 0) return 0;   /* nothing to write */
    DeviceSite site = site_of(e, st, e->plan->kernels[k].name);
    return e->d->ops->launch(e->d, e->kernel[k], plan_mlp_grid(shape, m),
                             (unsigned)e->plan->kernels[k].block, args, &site);
}

int devexec_mlp(DevExec *e, int r, int shape)
{
    CGC_ASSERT(r >= 0 && r < e->plan->nmlps && shape >= -1 && shape < PLAN_MLP_SHAPES);
    if (shape >= 0) return run_mlp_kernel(e, r, shape);
    const PlanMlp *run = &e->plan->mlps[r];
    for (int j = 0; j < run->nlayers; j++) {
        const PlanStep *s = &e->plan->graph[run->graph].steps[run->step[j]];
        if (run_gemm(e, s, &e->gemm[run->graph][run->step[j]]) != 0) return -1;
    }
    return 0;
}

void devexec_choose_mlp(DevExec *e, int r, int shape)
{
    CGC_ASSERT(r >= 0 && r < e->plan->nmlps && shape >= -1 && shape < PLAN_MLP_SHAPES);
    CGC_ASSERT(shape < 0 || e->gemm_kernels_loaded);
    e->mlp[r] = shape + 1;
}

const char *devexec_mlp_kernel(const DevExec *e, int r)
{
    CGC_ASSERT(r >= 0 && r < e->plan->nmlps);
    return e->mlp[r] > 0 ? e->plan->kernels[e->plan->mlps[r].kernel[e->mlp[r] - 1]].name : NULL;
}

/* Uploads the host inputs of FEED into their PB_INPUT buffers. */
static int upload_inputs(DevExec *e, const DevFeed *feed)
{
    for (int i = 0; i < e->p->ninputs; i++) {
        if (!feed->inputs[i]) continue;
        const IrInput *in = &e->p->inputs[i];
        int b = e->plan->input_buffer[i];
        DType t = e->plan->buffers[b].dtype;
        int64_t n = ir_numel(&in->shape, e->symvals);
        size_t bytes = (size_t)n * ir_dtype_size(t);
        int rc;
        if (t == DT_F32 || t == DT_I32) {     /* the host's own layout */
            rc = e->d->ops->upload(e->d, devexec_buffer(e, b), feed->inputs[i], bytes);
        } else {    /* an f32 input stored as f16 or bf16 on the device */
            void *raw = xmalloc(bytes ? bytes : 1);
            from_f32(t, feed->inputs[i], n, raw);
            rc = e->d->ops->upload(e->d, devexec_buffer(e, b), raw, bytes);
            free(raw);
        }
        if (rc != 0) return -1;
    }
    return 0;
}

static int bind_symbols(DevExec *e, const DevFeed *feed)
{
    for (int k = 0; k < IR_MAX_SYMBOLS; k++) {
        e->symvals[k] = k < e->p->nsyms ? feed->symvals[k] : 0;
        if (e->symvals[k] < 0 || e->symvals[k] > e->symmax[k]) {
            cgc_error("%s: symbol %s is %lld in this run, but the device arena was laid out for "
                      "at most %lld (a cgc bug: the runner was made for a smaller batch)",
                      e->net_path, k < e->p->nsyms ? e->p->syms[k].name : "?",
                      (long long)e->symvals[k], (long long)e->symmax[k]);
            return -1;
        }
    }
    return 0;
}

/* The PlanGraphId of PG. */
static int graph_id(const DevExec *e, const PlanGraph *pg)
{
    int gid = (int)(pg - e->plan->graph);
    CGC_ASSERT(gid >= 0 && gid < PG_NUM);
    return gid;
}

int devexec_bind(DevExec *e, const DevFeed *feed) { return bind_symbols(e, feed); }

int devexec_step(DevExec *e, PlanGraphId gid, int i, const DevFeed *feed, const PlanStepChoice *c)
{
    const PlanStep *s = &e->plan->graph[gid].steps[i];
    if (s->kind == STEP_GEMM) return run_gemm(e, s, c ? c : &e->gemm[gid][i]);
    PlanStepChoice saved = devexec_choice_of(e, gid, i);
    if (c) devexec_choose(e, gid, i, c);
    int rc = run_launch(e, s, feed);
    devexec_choose(e, gid, i, &saved);
    return rc;
}

PlanStepChoice devexec_choice_of(const DevExec *e, PlanGraphId gid, int i)
{
    const PlanStep *s = &e->plan->graph[gid].steps[i];
    int k = s->launch.kernel;
    return s->kind == STEP_GEMM ? e->gemm[gid][i] : (PlanStepChoice){.items = e->items[k], .block = e->block[k]};
}

void devexec_choose(DevExec *e, PlanGraphId gid, int i, const PlanStepChoice *c)
{
    const PlanStep *s = &e->plan->graph[gid].steps[i];
    if (s->kind == STEP_GEMM) {
        CGC_ASSERT(c->tile == 0 || (c->tile <= PLAN_GEMM_TILES && s->gemm.tile_kernel[c->tile - 1] >= 0 &&
                                    e->gemm_kernels_loaded));
        e->gemm[gid][i] = *c;
        return;
    }
    const PlanKernel *k = &e->plan->kernels[s->launch.kernel];
    CGC_ASSERT(c->block == 0 || c->block == k->block ||
               (k->any_block && c->block % 32 == 0 && c->block > 0 && c->block < k->block));
    e->items[s->launch.kernel] = c->items;
    e->block[s->launch.kernel] = c->block;
}

/* What devexec_run issues for step I of GID with the choices in force: the step itself,
 * its fused MLP run's kernel (*RUN: the run), nothing (a later layer of a fused run), an
 * implicit GEMM's kernel (*RUN: the run, *READER: which reader), or nothing but its
 * buffers' birth (the UNFOLD or TRANSPOSE of an implicit-GEMM run that is on: the
 * patches, never written; the product, stored NCHW by its kernel). */
typedef enum Issue { ISSUE_STEP, ISSUE_RUN, ISSUE_NOTHING, ISSUE_WINDOW, ISSUE_SKIPPED, ISSUE_CONV } Issue;

/* The library's run that skips or replaces step I of GID, or -1; *READER: the reader. */
static int conv_run_at(const DevExec *e, PlanGraphId gid, int i, int *reader)
{
    *reader = -1;
    for (int r = 0; r < e->plan->nwindows; r++) {
        const PlanWindow *w = &e->plan->windows[r];
        if (w->graph != gid || !conv_on(e, r)) continue;
        if (plan_window_conv_skips(e->plan, r, i)) return r;
        for (int j = 0; j < w->nreaders; j++)
            if (w->reader[j] == i) return *reader = j, r;
    }
    return -1;
}

static Issue issue_of(const DevExec *e, PlanGraphId gid, int i, int *run, int *reader)
{
    int c = conv_run_at(e, gid, i, reader);
    if (c >= 0) {
        *run = c;
        return *reader >= 0 ? ISSUE_CONV : ISSUE_SKIPPED;
    }
    int w = plan_window_skips(e->plan, gid, i);
    if (w >= 0 && window_on(e, w)) return ISSUE_SKIPPED;
    w = plan_window_reader(e->plan, gid, i, reader);
    if (w >= 0 && window_on(e, w)) {
        *run = w;
        return ISSUE_WINDOW;
    }
    int r = *run = plan_mlp_layer_of(e->plan, gid, i);
    if (r < 0 || e->mlp[r] == 0) return ISSUE_STEP;
    return e->plan->mlps[r].step[0] == i ? ISSUE_RUN : ISSUE_NOTHING;
}

int devexec_launches(const DevExec *e, PlanGraphId gid, int *gemms)
{
    const PlanGraph *pg = &e->plan->graph[gid];
    int n = 0, ng = 0, r, j;
    for (int i = 0; i < pg->nsteps; i++) {
        Issue what = issue_of(e, gid, i, &r, &j);
        n += what != ISSUE_NOTHING && what != ISSUE_SKIPPED;
        ng += what == ISSUE_RUN || what == ISSUE_WINDOW || what == ISSUE_CONV ||
              (what == ISSUE_STEP && pg->steps[i].kind == STEP_GEMM);
    }
    if (gemms) *gemms = ng;
    return n;
}

/* ---- what a step finds in the buffers it is the first to name ---- */

/* E->born[GID], made once: for each step of GID, the activations (its PB_NODE buffers)
 * it is the first to name, as the memory plan counts: NSTEPS + 1 offsets, then the
 * buffers step by step (step i's are born[nsteps + 1 + born[i]] up to the next offset). */
static const int *births(DevExec *e, PlanGraphId gid)
{
    if (e->born[gid]) return e->born[gid];
    const Plan *pl = e->plan;
    int nsteps = pl->graph[gid].nsteps, nb = pl->nbuffers;
    int *step_of = xmalloc((size_t)(nb ? nb : 1) * sizeof *step_of);
    plan_first_steps(pl, gid, step_of);
    for (int b = 0; b < nb; b++)
        if (pl->buffers[b].kind != PB_NODE) step_of[b] = -1;
    int *born = xcalloc((size_t)nsteps + 1 + (size_t)nb + 1, sizeof *born), *list = born + nsteps + 1;
    for (int b = 0; b < nb; b++)      /* a counting sort by step */
        if (step_of[b] >= 0) born[step_of[b] + 1]++;
    for (int i = 0; i < nsteps; i++) born[i + 1] += born[i];
    int *next = xmalloc((size_t)(nsteps ? nsteps : 1) * sizeof *next);
    memcpy(next, born, (size_t)nsteps * sizeof *next);
    for (int b = 0; b < nb; b++)
        if (step_of[b] >= 0) list[next[step_of[b]]++] = b;
    free(next);
    free(step_of);
    return e->born[gid] = born;
}

/* Before step I of GID runs: the activations it is the first to name hold nothing of
 * this run yet, only what an earlier value left in the memory the plan reuses, or the
 * zeros of a new arena. The device may mark them so: the emulation fills them with NaN
 * (0xFF bytes), so that a kernel reading one before writing it computes NaN instead of a
 * stale value that passes; a GPU has nothing to do. A fused MLP run's buffers are born at
 * its first step, where its kernel runs: the memory plan counts them live from there. */
static void mark_born(DevExec *e, PlanGraphId gid, int i)
{
    if (!e->d->ops->mark_undefined) return;
    const int *born = births(e, gid);
    const int *list = born + e->plan->graph[gid].nsteps + 1;
    for (int k = born[i]; k < born[i + 1]; k++)
        e->d->ops->mark_undefined(e->d, devexec_buffer(e, list[k]),
                                  plan_buffer_bytes(e->plan, list[k], e->symmax));
}

/* Before graph GID first runs the library's calls of run R at this batch: whether the
 * library has an algorithm for each (and room for them all); a run it has none for goes
 * back to the steps, said once. -1 for an error. */
static int conv_possible(DevExec *e, PlanGraphId gid)
{
    for (int r = 0; r < e->plan->nwindows; r++) {
        const PlanWindow *w = &e->plan->windows[r];
        if (w->graph != gid || !conv_on(e, r) || e->conv_checked[r] == e->symvals[0]) continue;
        int count = 1;
        for (int j = 0; j < w->nreaders && count > 0; j++)
            if (devexec_conv_algos(e, r, j, &count) != 0) return -1;
        e->conv_checked[r] = e->symvals[0];
        if (count > 0) continue;
        const PlanStep *s = &e->plan->graph[gid].steps[w->reader[0]];
        cgc_warning("%s:%d: the device's convolution library has no algorithm for this "
                    "convolution (%s) at batch %lld; it runs as the plan's steps",
                    e->net_path, s->loc.line, s->what, (long long)e->symvals[0]);
        devexec_choose_window_conv(e, r, NULL);
    }
    return 0;
}

/* Issues step I of graph G (GID) as the choices in force say. */
static int issue_step(DevExec *e, const IrGraph *g, PlanGraphId gid, int i, const DevFeed *feed)
{
    const PlanStep *s = &e->plan->graph[gid].steps[i];
    int r, j;
    Issue what = issue_of(e, gid, i, &r, &j);
    if (what == ISSUE_NOTHING) return 0;        /* a later layer: done at the run's first */
    mark_born(e, gid, i);
    if (what == ISSUE_SKIPPED) return 0;
    if (what == ISSUE_CONV) {                   /* the library, on the NCHW tensors */
        DevTimedEvent ev = {s->what, "cuDNN", g->name, s->loc.line, true, gid, i};
        int algo = e->conv[r * PLAN_WINDOW_MAX_READERS + j];
        return (e->timing && timed_begin(e, &ev) != 0) || run_window_conv(e, r, j, algo) != 0 ||
               (e->timing && timed_end(e) != 0) ? -1 : 0;
    }
    if (what == ISSUE_WINDOW) {                 /* the GEMM, gathering from the image */
        DevTimedEvent ev = {s->what, devexec_window_kernel(e, r, j), g->name, s->loc.line, true, gid, i};
        int tile = e->window[r * PLAN_WINDOW_MAX_READERS + j];
        return (e->timing && timed_begin(e, &ev) != 0) || run_window_kernel(e, r, j, tile, feed) != 0 ||
               (e->timing && timed_end(e) != 0) ? -1 : 0;
    }
    if (what == ISSUE_RUN) {                    /* the run's layers in one launch */
        DevTimedEvent ev = {s->what, devexec_mlp_kernel(e, r), g->name, s->loc.line, true, gid, i};
        return (e->timing && timed_begin(e, &ev) != 0) || run_mlp_kernel(e, r, e->mlp[r] - 1) != 0 ||
               (e->timing && timed_end(e) != 0) ? -1 : 0;
    }
    bool gemm = s->kind == STEP_GEMM;
    if (e->timing) {
        const char *kernel = gemm ? devexec_gemm_kernel(e, gid, i) : e->plan->kernels[s->launch.kernel].name;
        DevTimedEvent ev = {s->what, kernel ? kernel : "cuBLAS", g->name, s->loc.line, gemm, gid, i};
        if (timed_begin(e, &ev) != 0) return -1;
    }
    int rc = gemm ? run_gemm(e, s, &e->gemm[gid][i]) : run_launch(e, s, feed);
    return rc != 0 || (e->timing && timed_end(e) != 0) ? -1 : 0;
}

/* ---- collectives over the ranks (PlanCollective) ---- */

/* Starts PG's collectives that follow step AFTER: the next in PlanGraph.colls' order
 * from *NEXT. Collective C is the device's slot C. A span counts the elements of the
 * whole value: the input's of a sum or a reduce-scatter, the output's of an all-gather. */
static int colls_start(DevExec *e, const PlanGraph *pg, int after, int *next)
{
    for (; *next < pg->ncolls && pg->colls[*next].after == after; ++*next) {
        const PlanCollective *pc = &pg->colls[*next];
        for (int m = 0; m < pc->nmembers; m++) {
            int whole = ir_op_info[pc->op].slice == IR_SLICE_IN ? pc->out[m] : pc->member[m];
            const PlanBuffer *b = &e->plan->buffers[whole];
            e->spans[m] = (DeviceSpan){devexec_buffer(e, pc->member[m]), devexec_buffer(e, pc->out[m]),
                                       ir_numel(&b->shape, e->symvals), b->dtype};
        }
        if (e->d->ops->coll_start(e->d, *next, comm_op_of(pc->op), e->spans, pc->nmembers) != 0) return -1;
        e->flying[e->nflying++] = *next;
    }
    return 0;
}

/* Makes step STEP of PG (nsteps: the graph's end) wait for the collectives in flight it
 * needs. */
static int colls_wait(DevExec *e, const PlanGraph *pg, int step)
{
    for (int k = 0; k < e->nflying;) {
        int c = e->flying[k];
        if (pg->colls[c].wait != step) {
            k++;
            continue;
        }
        if (e->d->ops->coll_wait(e->d, c) != 0) return -1;
        e->flying[k] = e->flying[--e->nflying];
    }
    return 0;
}

int devexec_run(DevExec *e, const IrGraph *g, const DevFeed *feed)
{
    const PlanGraph *pg = plan_graph_of(e->plan, g);
    if (!pg) CGC_INTERNAL("graph %s has no plan", g->name);
    if (bind_symbols(e, feed) != 0 || upload_inputs(e, feed) != 0) return -1;
    e->last = g;
    PlanGraphId gid = (PlanGraphId)graph_id(e, pg);
    int next = 0;
    e->nflying = 0;
    if (conv_possible(e, gid) != 0 || colls_start(e, pg, -1, &next) != 0) return -1;
    for (int i = 0; i < pg->nsteps; i++)
        if (colls_wait(e, pg, i) != 0 || issue_step(e, g, gid, i, feed) != 0 ||
            colls_start(e, pg, i, &next) != 0)
            return -1;
    return colls_wait(e, pg, pg->nsteps);
}

int devexec_launch(DevExec *e, int k, unsigned grid, void **args, const char *what)
{
    CGC_ASSERT(k >= 0 && k < e->plan->nkernels);
    const PlanKernel *pk = &e->plan->kernels[k];
    DeviceSite site = {pk->name, what, e->net_path, 0};
    if (e->timing && timed_begin(e, &(DevTimedEvent){what, pk->name, "data pipeline", 0, false, -1, -1}) != 0)
        return -1;
    int rc = e->d->ops->launch(e->d, e->kernel[k], grid < 1 ? 1 : grid, (unsigned)pk->block,
                               args, &site);
    return rc != 0 || (e->timing && timed_end(e) != 0) ? -1 : 0;
}

/* ---- timing (--profile) ---- */

/* Timing: records the fence before EV; fences are made once and reused. */
static int timed_begin(DevExec *e, const DevTimedEvent *ev)
{
    const DeviceOps *ops = e->d->ops;
    if (e->nev == e->capev) {
        e->capev = e->capev ? 2 * e->capev : 256;
        e->ev = xrealloc(e->ev, (size_t)e->capev * sizeof *e->ev);
        e->fence = xrealloc(e->fence, (size_t)e->capev * 2 * sizeof *e->fence);
    }
    while (e->nfences < 2 * (e->nev + 1)) {
        if (ops->fence_new(e->d, &e->fence[e->nfences]) != 0) return -1;
        e->nfences++;
    }
    e->ev[e->nev] = *ev;
    return ops->fence_record(e->d, e->fence[2 * e->nev]);
}

/* Timing: records the fence after the event timed_begin began. */
static int timed_end(DevExec *e)
{
    return e->d->ops->fence_record(e->d, e->fence[2 * e->nev++ + 1]);
}

int devexec_timing_start(DevExec *e)
{
    CGC_ASSERT(!e->timing);
    e->nev = 0;
    if (!e->base) {
        if (e->d->ops->fence_new(e->d, &e->base) != 0) return -1;
        if (e->d->ops->fence_record(e->d, e->base) != 0) return -1;
    }
    e->timing = true;
    return 0;
}

int devexec_timing_collect(DevExec *e, DevTimedFn fn, void *ctx)
{
    CGC_ASSERT(e->timing);
    e->timing = false;
    const DeviceOps *ops = e->d->ops;
    bool done;
    if (e->nev > 0 && ops->fence_done(e->d, e->fence[2 * e->nev - 1], true, &done) != 0) return -1;
    for (int i = 0; i < e->nev; i++) {
        float from, to;
        if (ops->fence_elapsed_ms(e->d, e->base, e->fence[2 * i], &from) != 0 ||
            ops->fence_elapsed_ms(e->d, e->base, e->fence[2 * i + 1], &to) != 0)
            return -1;
        fn(ctx, &e->ev[i], from * 1e-3, to * 1e-3);
    }
    e->nev = 0;
    return 0;
}

/* ---- reading values back ---- */

/* Whether buffer B still holds its value after G has run: it is not a node value of its
 * own (a view of a tensor, an input or a constant) or it is one of G's outputs, which the
 * memory plan keeps apart. */
static bool holds_after_run(const DevExec *e, const IrGraph *g, int b)
{
    const Plan *plan = e->plan;
    const PlanGraph *pg = plan_graph_of(plan, g);
    b = plan_buffer_root(plan, b);
    if (plan->buffers[b].kind != PB_NODE) return true;
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++) {
        int out = g->output[r];
        if (out >= 0 && pg->node_buffer[out] >= 0 && plan_buffer_root(plan, pg->node_buffer[out]) == b) return true;
    }
    return false;
}

int devexec_value(DevExec *e, const IrGraph *g, int id, float *out, int64_t *numel)
{
    const PlanGraph *pg = plan_graph_of(e->plan, g);
    CGC_ASSERT(pg && id >= 0 && id < g->nnodes);
    CGC_ASSERT(e->last == g);
    int b = pg->node_buffer[id];
    if (b < 0)
        CGC_INTERNAL("devexec_value: node %%%d (%s) of graph %s has no buffer: it is an assign, "
                     "or fused into a kernel that never stores it", id, ir_op_name(g->nodes[id].op),
                     g->name);
    if (e->reuse && !holds_after_run(e, g, b))
        CGC_INTERNAL("devexec_value: node %%%d (%s) of graph %s is not an output, so its memory "
                     "is reused during the run; open the runner with devexec_new_unshared to "
                     "read it", id, ir_op_name(g->nodes[id].op), g->name);
    DType t = e->plan->buffers[b].dtype;
    int64_t n = ir_numel(&g->nodes[id].shape, e->symvals);
    size_t bytes = (size_t)n * ir_dtype_size(t);
    void *raw = xmalloc(bytes ? bytes : 1);
    int rc = e->d->ops->download(e->d, raw, devexec_buffer(e, b), bytes);
    if (rc == 0) to_f32(t, raw, n, out);
    free(raw);
    if (numel) *numel = n;
    return rc;
}
