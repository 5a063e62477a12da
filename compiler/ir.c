/* ir.c: the graph IR's tables, shape rules, builders, text form and verifier.
 *
 * Builders infer each node's shape and dtype from its inputs, so a pass says what it
 * computes and never repeats the shape rules. They assert their preconditions: the
 * front end reports user errors before it builds anything, so a failed assertion here
 * is a bug in cgc. ir_verify re-derives every node's shape with the same rules, which
 * keeps hand-assembled nodes (ir_add_node) honest.
 */
#include "ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The GRAD column read as one fact: whether the op is a gradient op. */
#define NONE false
#define D false
#define DX(op) false
#define DY(op) false
#define D_TIMES(op, v) false
#define FN(name) false
#define NOT_NEEDED true
#define INFO(name, arity, cls, family, fuse, attrs, shape, autocast, cost, diff, grad, meaning,    \
             deriv)                                                                            \
    #name, arity, IR_CLASS_##cls, IR_FAMILY_##family, IR_FUSE_##fuse, IR_ATTRS_##attrs,         \
    IR_SHAPE_##shape, IR_AUTOCAST_##autocast, cost, diff, grad, meaning, deriv
const IrOpInfo ir_op_info[IR_NUM_OPS] = {
#define IR_OP(...) {INFO(__VA_ARGS__), NULL, IR_COMBINE_NONE, false, IR_SLICE_NOT_COLLECTIVE},
#define IR_EW(name, arity, cls, family, fuse, attrs, shape, autocast, cost, diff, grad, meaning, \
              deriv, ...)                                                                      \
    {INFO(name, arity, cls, family, fuse, attrs, shape, autocast, cost, diff, grad, meaning,   \
          deriv), #__VA_ARGS__, IR_COMBINE_NONE, false, IR_SLICE_NOT_COLLECTIVE},
#define IR_RD(name, arity, cls, family, fuse, attrs, shape, autocast, cost, diff, grad, meaning, \
              deriv, combine, mean)                                                            \
    {INFO(name, arity, cls, family, fuse, attrs, shape, autocast, cost, diff, grad, meaning,   \
          deriv), NULL, IR_COMBINE_##combine, mean, IR_SLICE_NOT_COLLECTIVE},
#define IR_CL(name, arity, cls, family, fuse, attrs, shape, autocast, cost, diff, grad, meaning, \
              deriv, slice)                                                                    \
    {INFO(name, arity, cls, family, fuse, attrs, shape, autocast, cost, diff, grad, meaning,   \
          deriv), NULL, IR_COMBINE_NONE, false, IR_SLICE_##slice},
#include "ops.def"
#undef INFO
};

/* Lower-case op names, made once from the table's upper-case ones. */
static char op_names[IR_NUM_OPS][24];

const char *ir_op_name(IrOp op)
{
    if (!op_names[op][0]) {
        const char *u = ir_op_info[op].name;
        size_t i = 0;
        for (; u[i] && i + 1 < sizeof op_names[op]; i++)
            op_names[op][i] = (char)(u[i] >= 'A' && u[i] <= 'Z' ? u[i] + 32 : u[i]);
        op_names[op][i] = '\0';
    }
    return op_names[op];
}

/* ---- dtypes and shapes ---- */

const char *ir_dtype_name(DType t)
{
    static const char *const names[] = {"f32", "f16", "bf16", "i32"};
    return names[t];
}

bool ir_nonfinite_by_design(const IrNode *n, double v)
{
    IrAttrs a = ir_op_info[n->op].attrs;
    return (a == IR_ATTRS_WINDOW_OUTSIDE || a == IR_ATTRS_MASK_VALUE) && !isfinite(n->value) &&
           v == n->value;
}

bool ir_op_is_elementwise(IrOp op)
{
    IrFuse f = ir_op_info[op].fuse;
    return f == IR_FUSE_POINTWISE || f == IR_FUSE_RANDOM;
}

bool ir_op_is_reduction(IrOp op) { return ir_op_info[op].fuse == IR_FUSE_REDUCTION; }

bool ir_op_reduces_to_shape(IrOp op)
{
    return ir_op_is_reduction(op) && ir_op_info[op].shape == IR_SHAPE_OWN;
}

bool ir_node_is_placed(const IrNode *n) { return ir_node_fuse(n) == IR_FUSE_LEAF; }

bool ir_node_is_literal(const IrNode *n)
{
    return ir_op_info[n->op].attrs == IR_ATTRS_CONST_VALUE && n->dtype == DT_F32;
}

int ir_node_input(const IrNode *n)
{
    return ir_op_info[n->op].attrs == IR_ATTRS_INPUT_NAME ? n->index : -1;
}

int ir_node_tensor(const IrNode *n)
{
    IrAttrs a = ir_op_info[n->op].attrs;
    return a == IR_ATTRS_TENSOR_NAME || a == IR_ATTRS_TARGET_NAME ? n->index : -1;
}

int ir_node_reads_tensor(const IrNode *n) { return ir_node_is_placed(n) ? ir_node_tensor(n) : -1; }

bool ir_node_is_assign(const IrNode *n) { return ir_node_fuse(n) == IR_FUSE_EFFECT; }

const char *ir_node_table_name(const IrProgram *p, const IrNode *n)
{
    if (ir_node_input(n) >= 0) return p->inputs[n->index].name;
    return ir_node_tensor(n) >= 0 ? p->tensors[n->index].name : NULL;
}

int ir_member_params(const IrNode *n, bool stored, bool *seed)
{
    IrFuse f = ir_node_fuse(n);
    int count = (stored && f != IR_FUSE_EFFECT) + (f == IR_FUSE_EFFECT) + (f == IR_FUSE_SCALAR);
    if (f == IR_FUSE_RANDOM && !*seed) *seed = true, count++;
    return count;
}

size_t ir_dtype_size(DType t)
{
    switch (t) {
    case DT_F32: case DT_I32: return 4;
    case DT_F16: case DT_BF16: return 2;
    }
    CGC_INTERNAL("unknown dtype %d", (int)t);
}

bool ir_dtype_is_float(DType t) { return t != DT_I32; }

DType ir_promote(DType a, DType b)
{
    if (a == b) return a;
    return DT_F32;
}

Shape ir_shape0(void)
{
    Shape s;
    memset(&s, 0, sizeof s);
    return s;
}

double ir_node_flops(const IrGraph *g, const IrNode *n, const int64_t *symvals)
{
    double out = (double)ir_numel(&n->shape, symvals);
    if (ir_node_fuse(n) == IR_FUSE_MATMUL) {
        Shape cols = { 1, { n->shape.dim[n->shape.rank - 1] } };
        return 2 * (double)ir_numel(&g->nodes[n->in[0]].shape, symvals) * (double)ir_numel(&cols, symvals);
    }
    double in = n->nin ? (double)ir_numel(&g->nodes[n->in[0]].shape, symvals) : 0;
    return ir_op_info[n->op].cost * (in > out ? in : out);
}

int64_t ir_numel(const Shape *s, const int64_t *symvals)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        int64_t d = s->dim[i];
        if (IR_DIM_IS_SYM(d)) {
            CGC_ASSERT(symvals != NULL);
            d = symvals[IR_DIM_SYMBOL(d)];
        }
        n *= d;
    }
    return n;
}

bool ir_shape_equal(const Shape *a, const Shape *b)
{
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dim[i] != b->dim[i]) return false;
    return true;
}

bool ir_shape_is_static(const Shape *s)
{
    for (int i = 0; i < s->rank; i++)
        if (IR_DIM_IS_SYM(s->dim[i])) return false;
    return true;
}

bool ir_shape_is_batched(const Shape *s) { return s->rank > 0 && s->dim[0] == IR_SYM(0); }

bool ir_shape_is_one(const Shape *s)
{
    for (int i = 0; i < s->rank; i++)
        if (s->dim[i] != 1) return false;
    return true;
}

bool ir_broadcast_shape(const Shape *a, const Shape *b, Shape *out)
{
    Shape r = ir_shape0();
    r.rank = a->rank > b->rank ? a->rank : b->rank;
    for (int i = 0; i < r.rank; i++) {
        /* Align from the right. */
        int ia = a->rank - r.rank + i, ib = b->rank - r.rank + i;
        int64_t da = ia >= 0 ? a->dim[ia] : 1, db = ib >= 0 ? b->dim[ib] : 1;
        if (da == db || db == 1) r.dim[i] = da;
        else if (da == 1) r.dim[i] = db;
        else return false;
    }
    *out = r;
    return true;
}

bool ir_shape_fits(const Shape *s, const Shape *work)
{
    Shape out;
    return ir_broadcast_shape(s, work, &out) && ir_shape_equal(&out, work);
}

const char *ir_shape_str(const IrProgram *p, const Shape *s, char *buf, size_t n)
{
    size_t len = 0;
    len += (size_t)snprintf(buf + len, n - len, "[");
    for (int i = 0; i < s->rank && len < n; i++) {
        int64_t d = s->dim[i];
        const char *sep = i ? ", " : "";
        if (IR_DIM_IS_SYM(d)) {
            int k = IR_DIM_SYMBOL(d);
            const char *name = p && k < p->nsyms ? p->syms[k].name : NULL;
            if (name)
                len += (size_t)snprintf(buf + len, n - len, "%s%s", sep, name);
            else
                len += (size_t)snprintf(buf + len, n - len, "%s$%d", sep, k);
        } else {
            len += (size_t)snprintf(buf + len, n - len, "%s%lld", sep, (long long)d);
        }
    }
    if (len < n) snprintf(buf + len, n - len, "]");
    return buf;
}

Shape ir_shape_reduce(const Shape *s, int axis)
{
    if (axis == IR_AXIS_ALL) return ir_shape0();
    CGC_ASSERT(axis >= 0 && axis < s->rank);
    Shape r = ir_shape0();
    for (int i = 0; i < s->rank; i++)
        if (i != axis) r.dim[r.rank++] = s->dim[i];
    return r;
}

Shape ir_shape_keepdim(const Shape *s, int axis)
{
    Shape r = *s;
    for (int i = 0; i < s->rank; i++)
        if (axis == IR_AXIS_ALL || i == axis) r.dim[i] = 1;
    return r;
}

/* ---- programs ---- */

IrProgram *ir_program_new(void)
{
    IrProgram *p = xcalloc(1, sizeof *p);
    ir_graph_init(&p->forward, "forward");
    ir_graph_init(&p->train, "train");
    ir_graph_init(&p->train_micro, "train_micro");
    ir_graph_init(&p->eval, "eval");
    ir_graph_init(&p->decode, "decode");
    p->prediction_input_labels = -1;
    config_defaults(&p->cfg);
    return p;
}

void ir_program_free(IrProgram *p)
{
    if (!p) return;
    for (int i = 0; i < p->nstrings; i++) free(p->strings[i]);
    free(p->strings);
    free(p->string_slots);
    free(p->string_tensor);
    free(p->syms);
    free(p->inputs);
    free(p->tensors);
    ir_graph_free(&p->forward);
    ir_graph_free(&p->train);
    ir_graph_free(&p->train_micro);
    ir_graph_free(&p->eval);
    ir_graph_free(&p->decode);
    free((char *)p->model_name);
    free(p->cfg.data_dir);
    free(p->cfg.data_test);
    free(p->cfg.data_label);
    free(p);
}

static uint64_t hash_string(const char *s) { return fnv1a(FNV_BASIS, s, strlen(s)); }

/* Puts pool entry I into the open-addressing table of P (which has a free slot). */
static void intern_slot(IrProgram *p, int i)
{
    size_t mask = (size_t)p->capslots - 1, at = (size_t)hash_string(p->strings[i]) & mask;
    while (p->string_slots[at] >= 0) at = (at + 1) & mask;
    p->string_slots[at] = i;
}

/* Keeps the table at most half full, so that probes stay short. */
static void intern_grow(IrProgram *p)
{
    if (2 * (p->nstrings + 1) <= p->capslots) return;
    p->capslots = p->capslots ? 2 * p->capslots : 64;
    p->string_slots = xrealloc(p->string_slots, (size_t)p->capslots * sizeof *p->string_slots);
    for (int k = 0; k < p->capslots; k++) p->string_slots[k] = -1;
    for (int i = 0; i < p->nstrings; i++) intern_slot(p, i);
}

/* The pool index of string S, or -1. */
static int intern_index(const IrProgram *p, const char *s)
{
    if (!p->capslots) return -1;
    size_t mask = (size_t)p->capslots - 1, at = (size_t)hash_string(s) & mask;
    for (; p->string_slots[at] >= 0; at = (at + 1) & mask)
        if (strcmp(p->strings[p->string_slots[at]], s) == 0) return p->string_slots[at];
    return -1;
}

const char *ir_intern(IrProgram *p, const char *s)
{
    int i = intern_index(p, s);
    if (i >= 0) return p->strings[i];
    intern_grow(p);
    if (p->nstrings == p->capstrings) {
        p->capstrings = p->capstrings ? 2 * p->capstrings : 32;
        p->strings = xrealloc(p->strings, (size_t)p->capstrings * sizeof *p->strings);
        p->string_tensor = xrealloc(p->string_tensor, (size_t)p->capstrings * sizeof *p->string_tensor);
    }
    p->strings[p->nstrings] = xstrdup(s);
    p->string_tensor[p->nstrings] = -1;
    intern_slot(p, p->nstrings);
    return p->strings[p->nstrings++];
}

int ir_find_symbol(const IrProgram *p, const char *name)
{
    for (int i = 0; i < p->nsyms; i++)
        if (strcmp(p->syms[i].name, name) == 0) return i;
    return -1;
}

int ir_add_symbol(IrProgram *p, const char *name, SrcLoc loc)
{
    int k = ir_find_symbol(p, name);
    if (k >= 0) return k;
    CGC_ASSERT(p->nsyms < IR_MAX_SYMBOLS);
    p->syms = xrealloc(p->syms, (size_t)(p->nsyms + 1) * sizeof *p->syms);
    p->syms[p->nsyms] = (IrSymbol){ir_intern(p, name), loc};
    return p->nsyms++;
}

int ir_add_input(IrProgram *p, const char *name, DType t, Shape s, SrcLoc loc)
{
    CGC_ASSERT(p->ninputs < IR_MAX_INPUTS);
    p->inputs = xrealloc(p->inputs, (size_t)(p->ninputs + 1) * sizeof *p->inputs);
    p->inputs[p->ninputs] = (IrInput){ir_intern(p, name), t, s, loc, 0};
    return p->ninputs++;
}

/* Moves every state tensor one place up, for a parameter to take the first state's
 * place, and renumbers what refers to them: names, the graphs' READs and ASSIGNs. */
static void renumber_states(IrProgram *p)
{
    memmove(&p->tensors[p->nparams + 1], &p->tensors[p->nparams],
            (size_t)(p->ntensors - p->nparams) * sizeof *p->tensors);
    for (int t = p->nparams + 1; t <= p->ntensors; t++)
        p->string_tensor[intern_index(p, p->tensors[t].name)] = t;
    IrGraph *graphs[] = {&p->forward, &p->train, &p->train_micro, &p->eval, &p->decode};
    for (int k = 0; k < 5; k++)
        for (int i = 0; i < graphs[k]->nnodes; i++) {
            IrNode *n = &graphs[k]->nodes[i];
            if (ir_node_tensor(n) >= p->nparams) n->index++;
        }
}

int ir_add_tensor(IrProgram *p, const char *name, IrTensorKind kind, Shape s, IrInit init,
                  double init_value, int param_of, SrcLoc loc)
{
    CGC_ASSERT(ir_find_tensor(p, name) < 0);
    for (int i = 0; i < s.rank; i++) CGC_ASSERT(!IR_DIM_IS_SYM(s.dim[i]));
    CGC_ASSERT(kind == IR_STATE || kind == IR_COPY || param_of < 0);
    if (p->ntensors == p->captensors) {
        p->captensors = p->captensors ? 2 * p->captensors : 16;
        p->tensors = xrealloc(p->tensors, (size_t)p->captensors * sizeof *p->tensors);
    }
    /* Parameters come first, so that indices 0..nparams-1 are the parameters: a new one
     * goes before the states (a batch norm's running statistics) and renumbers them. */
    int t = kind == IR_PARAM ? p->nparams : p->ntensors;
    if (t < p->ntensors) renumber_states(p);
    p->tensors[t] = (IrTensor){.name = ir_intern(p, name), .kind = kind, .dtype = DT_F32, .shape = s,
                               .init = init, .init_value = init_value, .loc = loc,
                               .param_of = param_of, .range = IR_RANGE_FINITE};
    p->string_tensor[intern_index(p, name)] = t;
    if (kind == IR_PARAM) p->nparams++;
    p->ntensors++;
    return t;
}

int ir_add_copy(IrProgram *p, int param, DType t)
{
    CGC_ASSERT(param >= 0 && param < p->nparams && (t == DT_BF16 || t == DT_F16));
    IrTensor w = p->tensors[param];
    size_t len = strlen(w.name) + 16;   /* as long as it needs: names differ, copies' too */
    char *name = xmalloc(len);
    snprintf(name, len, "cgc.%s.%s", ir_dtype_name(t), w.name);
    int c = ir_add_tensor(p, name, IR_COPY, w.shape, w.init, w.init_value, param, w.loc);
    free(name);
    p->tensors[c].dtype = t;
    p->tensors[c].range = IR_RANGE_ANY;   /* fp16 holds a weight past 65504 as inf */
    return c;
}

bool ir_tensor_saved(const IrTensor *t) { return t->kind == IR_PARAM || t->kind == IR_STATE; }

const char *ir_range_text(IrRange r)
{
    switch (r) {
    case IR_RANGE_FINITE: return "a finite number";
    case IR_RANGE_NONNEG: return "a finite number >= 0";
    case IR_RANGE_POSITIVE: return "a finite number > 0";
    case IR_RANGE_COUNT: return "a whole number >= 0";
    case IR_RANGE_ANY: return "any number";
    }
    return "?";
}

bool ir_range_holds(IrRange r, float v)
{
    switch (r) {
    case IR_RANGE_FINITE: return isfinite(v);
    case IR_RANGE_NONNEG: return isfinite(v) && v >= 0;
    case IR_RANGE_POSITIVE: return isfinite(v) && v > 0;
    case IR_RANGE_COUNT: return isfinite(v) && v >= 0 && v == floorf(v);
    case IR_RANGE_ANY: return true;
    }
    return false;
}

void ir_drop_tensors(IrProgram *p, int n)
{
    CGC_ASSERT(n >= p->nparams && n <= p->ntensors);
    for (int i = n; i < p->ntensors; i++) p->string_tensor[intern_index(p, p->tensors[i].name)] = -1;
    p->ntensors = n;
}

void ir_keep_tensors(IrProgram *p, const bool *keep)
{
    int *to = xmalloc((size_t)(p->ntensors ? p->ntensors : 1) * sizeof *to), n = 0, params = 0;
    for (int i = 0; i < p->ntensors; i++) {
        p->string_tensor[intern_index(p, p->tensors[i].name)] = -1;
        to[i] = keep[i] ? n : -1;
        if (!keep[i]) continue;
        params += p->tensors[i].kind == IR_PARAM;
        CGC_ASSERT(p->tensors[i].param_of < 0 || keep[p->tensors[i].param_of]);
        p->tensors[n] = p->tensors[i];
        if (p->tensors[n].param_of >= 0) p->tensors[n].param_of = to[p->tensors[n].param_of];
        p->string_tensor[intern_index(p, p->tensors[n].name)] = n;
        n++;
    }
    IrGraph *graphs[] = {&p->forward, &p->train, &p->train_micro, &p->eval, &p->decode};
    for (size_t k = 0; k < sizeof graphs / sizeof *graphs; k++)
        for (int i = 0; i < graphs[k]->nnodes; i++) {
            IrNode *x = &graphs[k]->nodes[i];
            if (ir_node_tensor(x) < 0) continue;
            CGC_ASSERT(to[x->index] >= 0);
            x->index = to[x->index];
        }
    p->ntensors = n;
    p->nparams = params;
    free(to);
}

int ir_find_tensor(const IrProgram *p, const char *name)
{
    int i = intern_index(p, name);
    return i < 0 ? -1 : p->string_tensor[i];
}

/* ---- graphs ---- */

void ir_graph_init(IrGraph *g, const char *name)
{
    memset(g, 0, sizeof *g);
    g->name = name;
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++) g->output[r] = -1;
}

void ir_graph_free(IrGraph *g)
{
    free(g->nodes);
    free(g->groups);
    free(g->boundaries);
    ir_graph_init(g, g->name);
}

void ir_graph_copy(IrGraph *dst, const IrGraph *src, const char *name)
{
    ir_graph_free(dst);
    *dst = *src;
    dst->name = name;
    dst->cap = src->nnodes;
    dst->nodes = xmalloc((size_t)(src->nnodes ? src->nnodes : 1) * sizeof *src->nodes);
    if (src->nnodes) memcpy(dst->nodes, src->nodes, (size_t)src->nnodes * sizeof *src->nodes);
    dst->groups = NULL;
    if (src->ngroups) {
        dst->groups = xmalloc((size_t)src->ngroups * sizeof *src->groups);
        memcpy(dst->groups, src->groups, (size_t)src->ngroups * sizeof *src->groups);
    }
    dst->boundaries = NULL;
    if (src->nboundaries) {
        dst->boundaries = xmalloc((size_t)src->nboundaries * sizeof *src->boundaries);
        memcpy(dst->boundaries, src->boundaries, (size_t)src->nboundaries * sizeof *src->boundaries);
    }
}

const IrGroup *ir_unit_group(const IrGraph *g, int u)
{
    return u >= 1 && u <= g->ngroups ? &g->groups[u - 1] : NULL;
}

const Shape *ir_unit_work(const IrGraph *g, int u)
{
    const IrGroup *gr = ir_unit_group(g, u);
    return gr ? &gr->work : &g->nodes[u - g->ngroups - 1].shape;
}

int ir_add_group(IrGraph *g, const IrGroup *gr)
{
    g->groups = xrealloc(g->groups, (size_t)(g->ngroups + 1) * sizeof *g->groups);
    g->groups[g->ngroups] = *gr;
    return ++g->ngroups;
}

/* Node U reads X, of another group, without X being stored: a backward attention group
 * reads its forward group's P (a softmax, or a cast of it), which its kernel recomputes
 * (ir.h, IR_GROUP_ATTENTION). An attention group's products are its stored values. */
static bool recomputed_read(const IrGraph *g, int u, int x)
{
    int ku = g->nodes[u].group, kx = g->nodes[x].group;
    return ku && kx && g->groups[ku - 1].kind == IR_GROUP_ATTENTION &&
           g->groups[kx - 1].kind == IR_GROUP_ATTENTION && g->nodes[x].op != IR_MATMUL;
}

bool ir_member_stored(const IrGraph *g, int id)
{
    int k = g->nodes[id].group;
    if (k == 0) return true;
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++)
        if (g->output[r] == id) return true;
    for (int u = id + 1; u < g->nnodes; u++)   /* readers come after: the order is topological */
        for (int j = 0; j < g->nodes[u].nin; j++)
            if (g->nodes[u].in[j] == id && g->nodes[u].group != k && !recomputed_read(g, u, id))
                return true;
    return false;
}

bool *ir_stored_members(const IrGraph *g)
{
    bool *stored = xcalloc((size_t)g->nnodes + 1, sizeof *stored);
    for (int u = 0; u < g->nnodes; u++) {
        stored[u] |= g->nodes[u].group == 0;
        for (int j = 0; j < g->nodes[u].nin; j++) {
            int x = g->nodes[u].in[j];
            if (g->nodes[x].group != g->nodes[u].group && !recomputed_read(g, u, x)) stored[x] = true;
        }
    }
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++)
        if (g->output[r] >= 0) stored[g->output[r]] = true;
    return stored;
}

/* What member U of group K adds to its operands; SEEN[x] == K marks the values K's
 * members already read, *SEED a seed already counted. */
static int member_operands(const IrGraph *g, int u, const bool *stored, int *seen, bool *seed)
{
    const IrNode *n = &g->nodes[u];
    int k = n->group;
    int count = ir_member_params(n, stored[u], seed);
    for (int j = 0; j < n->nin; j++) {
        int x = n->in[j];
        const IrNode *xn = &g->nodes[x];
        bool member = xn->group == k && !ir_node_is_placed(xn);
        if (member || ir_node_is_literal(xn) || seen[x] == k) continue;
        seen[x] = k;
        count++;
    }
    return count;
}

void ir_group_operands(const IrGraph *g, int *count)
{
    bool *stored = ir_stored_members(g), *seed = xcalloc((size_t)g->ngroups + 1, sizeof *seed);
    int *seen = xcalloc((size_t)g->nnodes + 1, sizeof *seen);
    for (int k = 0; k < g->ngroups; k++) count[k] = 0;
    for (int u = 0; u < g->nnodes; u++) {
        int k = g->nodes[u].group;
        if (k && !ir_node_is_placed(&g->nodes[u]))
            count[k - 1] += member_operands(g, u, stored, seen, &seed[k - 1]);
    }
    free(stored), free(seed), free(seen);
}

IrSpan *ir_group_spans(const IrGraph *g)
{
    IrSpan *span = xcalloc((size_t)g->ngroups + 1, sizeof *span);
    for (int id = g->nnodes - 1; id >= 0; id--) {
        int k = g->nodes[id].group;
        if (k <= 0 || k > g->ngroups) continue;
        if (!span[k].end) span[k].end = id + 1;
        span[k].first = id;
    }
    return span;
}

static bool attn_matmul(const IrNode *n, int flags)
{
    return n->op == IR_MATMUL && (n->flags & ~IR_MATMUL_TF32) == flags;
}

/* The scale of MUL node N by its literal input, else leaves *SCALE. */
static void attn_scale(const IrGraph *g, const IrNode *n, double *scale)
{
    for (int j = 0; j < n->nin; j++)
        if (ir_node_is_literal(&g->nodes[n->in[j]])) *scale = g->nodes[n->in[j]].value;
}

/* The first product P V after softmax SM, reading SM or its casts, or -1. */
static int attn_output(const IrGraph *g, int sm)
{
    int p[4] = { sm }, np = 1;
    for (int u = sm + 1; u < g->nnodes; u++) {
        const IrNode *n = &g->nodes[u];
        bool reads_p = false;
        for (int i = 0; i < np; i++) reads_p |= n->nin > 0 && n->in[0] == p[i];
        if (reads_p && attn_matmul(n, 0)) return u;
        if (reads_p && n->op == IR_CAST && np < 4) p[np++] = u;
    }
    return -1;
}

static const IrAttention attn_none = { .scale = 1, .s = -1, .mask = -1, .sm = -1, .q = -1, .k = -1, .v = -1,
                                       .o = -1, .dout = -1, .dq = -1, .dk = -1, .dv = -1 };

IrAttention ir_attention_group(const IrGraph *g, const IrSpan *span, int k)
{
    IrAttention a = attn_none;
    for (int id = span[k].first; id < span[k].end; id++)
        if (g->nodes[id].op == IR_SOFTMAX_GRAD) a.backward = true, a.sm = g->nodes[id].in[1];
    for (int id = span[k].first; id < span[k].end; id++) {
        const IrNode *n = &g->nodes[id];
        bool inside = n->nin > 0 && g->nodes[n->in[0]].group == k;
        if (n->op == IR_CAUSAL_MASK) a.causal = true, a.mask = a.backward ? a.mask : id;
        else if (n->op == IR_MUL) attn_scale(g, n, &a.scale);
        else if (n->op == IR_SOFTMAX) a.sm = id;
        else if (attn_matmul(n, IR_MATMUL_TRANS_B) && a.backward) a.dout = n->in[0], a.v = n->in[1];
        else if (attn_matmul(n, IR_MATMUL_TRANS_B)) a.s = id, a.q = n->in[0], a.k = n->in[1];
        else if (attn_matmul(n, 0) && a.backward) a.dq = id, a.k = n->in[1];
        else if (attn_matmul(n, 0)) a.o = id, a.v = n->in[1];
        else if (attn_matmul(n, IR_MATMUL_TRANS_A) && inside) a.dk = id, a.q = n->in[1];
        else if (attn_matmul(n, IR_MATMUL_TRANS_A)) a.dv = id;
    }
    for (int f = a.sm >= 0 ? g->nodes[a.sm].group : 0, id = span[f].first; a.backward && id < span[f].end; id++)
        if (attn_matmul(&g->nodes[id], 0)) a.o = id;   /* the forward group's O */
    bool whole = a.backward ? a.q >= 0 && a.k >= 0 && a.v >= 0 && a.o >= 0 && a.dout >= 0 &&
                                  a.dq >= 0 && a.dk >= 0 && a.dv >= 0
                            : a.q >= 0 && a.k >= 0 && a.v >= 0 && a.o >= 0 && a.sm >= 0;
    if (!whole) CGC_INTERNAL("%s graph: attention group %d is not a whole chain", g->name, k);
    return a;
}

/* Node ID, or what its casts cast. */
static int uncast(const IrGraph *g, int id)
{
    while (g->nodes[id].op == IR_CAST) id = g->nodes[id].in[0];
    return id;
}

bool ir_attention_chain(const IrGraph *g, int sm, IrAttention *a)
{
    *a = attn_none;
    if (g->nodes[sm].op != IR_SOFTMAX) return false;
    int m = uncast(g, g->nodes[sm].in[0]);
    a->causal = g->nodes[m].op == IR_CAUSAL_MASK;
    if (a->causal) a->mask = m, m = uncast(g, g->nodes[m].in[0]);
    if (g->nodes[m].op == IR_MUL) attn_scale(g, &g->nodes[m], &a->scale), m = uncast(g, g->nodes[m].in[0]);
    const IrNode *s = &g->nodes[m];
    a->o = attn_output(g, sm);
    if (!attn_matmul(s, IR_MATMUL_TRANS_B) || s->shape.rank != 4 || a->o < 0) return false;
    a->s = m, a->sm = sm, a->q = s->in[0], a->k = s->in[1], a->v = g->nodes[a->o].in[1];
    return true;
}

bool *ir_cone(const IrGraph *g, int out)
{
    bool *needed = xcalloc((size_t)g->nnodes + 1, sizeof *needed);
    needed[out] = true;
    for (int id = out; id >= 0; id--)
        for (int k = 0; needed[id] && k < g->nodes[id].nin; k++) needed[g->nodes[id].in[k]] = true;
    return needed;
}

bool ir_gemm_unrounded(const IrGraph *g, int id)
{
    int k = g->nodes[id].group;
    return k != 0 && g->groups[k - 1].kind == IR_GROUP_GEMM && !ir_member_stored(g, id);
}

int ir_add_node(IrGraph *g, const IrNode *n)
{
    CGC_ASSERT(n->nin == ir_op_info[n->op].arity);
    for (int i = 0; i < n->nin; i++) CGC_ASSERT(n->in[i] >= 0 && n->in[i] < g->nnodes);
    if (g->nnodes == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        g->nodes = xrealloc(g->nodes, (size_t)g->cap * sizeof *g->nodes);
    }
    g->nodes[g->nnodes] = *n;
    return g->nnodes++;
}

static const IrNode *node(const IrGraph *g, int id)
{
    CGC_ASSERT(id >= 0 && id < g->nnodes);
    return &g->nodes[id];
}

/* A node with the given op, type and inputs; the other fields zero. */
static IrNode make(IrOp op, DType t, Shape s, SrcLoc loc, int nin, int a, int b, int c)
{
    IrNode n;
    memset(&n, 0, sizeof n);
    n.op = op, n.dtype = t, n.shape = s, n.loc = loc, n.nin = nin;
    n.in[0] = a, n.in[1] = b, n.in[2] = c;
    return n;
}

int ir_input(IrGraph *g, const IrProgram *p, int input, SrcLoc loc)
{
    CGC_ASSERT(input >= 0 && input < p->ninputs);
    IrNode n = make(IR_INPUT, p->inputs[input].dtype, p->inputs[input].shape, loc, 0, 0, 0, 0);
    n.index = input;
    n.name = p->inputs[input].name;
    return ir_add_node(g, &n);
}

int ir_read(IrGraph *g, const IrProgram *p, int tensor, SrcLoc loc)
{
    CGC_ASSERT(tensor >= 0 && tensor < p->ntensors);
    IrNode n = make(IR_READ, p->tensors[tensor].dtype, p->tensors[tensor].shape, loc, 0, 0, 0, 0);
    n.index = tensor;
    n.name = p->tensors[tensor].name;
    return ir_add_node(g, &n);
}

int ir_collective(IrGraph *g, IrOp op, int x, Shape shape, int bucket, SrcLoc loc)
{
    const IrNode *in = node(g, x);
    CGC_ASSERT(ir_op_info[op].family == IR_FAMILY_COLLECTIVE && in->dtype == DT_F32);
    CGC_ASSERT(ir_op_info[op].attrs == IR_ATTRS_BUCKET ? bucket >= 0 : bucket == -1);
    if (ir_op_info[op].slice == IR_SLICE_WHOLE) CGC_ASSERT(ir_shape_equal(&shape, &in->shape));
    else {   /* one side is a slice: [S], a size */
        const Shape *slice = ir_op_info[op].slice == IR_SLICE_IN ? &in->shape : &shape;
        CGC_ASSERT(slice->rank == 1 && slice->dim[0] > 0);
    }
    IrNode n = make(op, DT_F32, shape, loc, 1, x, 0, 0);
    n.index = bucket;
    return ir_add_node(g, &n);
}

int ir_allreduce(IrGraph *g, int x, int bucket, SrcLoc loc)
{
    return ir_collective(g, IR_ALLREDUCE, x, node(g, x)->shape, bucket, loc);
}

int ir_const(IrGraph *g, double value, SrcLoc loc)
{
    IrNode n = make(IR_CONST, DT_F32, ir_shape0(), loc, 0, 0, 0, 0);
    n.value = value;
    return ir_add_node(g, &n);
}

int ir_runtime(IrGraph *g, IrRuntimeScalar which, SrcLoc loc)
{
    CGC_ASSERT((unsigned)which < IR_NUM_RUNTIME);
    IrNode n = make(IR_RUNTIME, DT_F32, ir_shape0(), loc, 0, 0, 0, 0);
    n.index = (int)which;
    return ir_add_node(g, &n);
}

int ir_unary(IrGraph *g, IrOp op, int x, SrcLoc loc)
{
    CGC_ASSERT(ir_op_info[op].cls == IR_CLASS_UNARY && op != IR_CAST);
    const IrNode *in = node(g, x);
    CGC_ASSERT(ir_dtype_is_float(in->dtype));
    IrNode n = make(op, in->dtype, in->shape, loc, 1, x, 0, 0);
    return ir_add_node(g, &n);
}

/* The dtype of an elementwise result, as torch's type promotion decides it: a
 * zero-dimensional operand (a constant, a loss scale) does not promote a dimensioned one,
 * so a bf16 tensor times 0.5 stays bf16; otherwise ir_promote. */
static DType elementwise_dtype(const IrNode *a, const IrNode *b)
{
    if (a->shape.rank == 0 && b->shape.rank > 0) return b->dtype;
    if (b->shape.rank == 0 && a->shape.rank > 0) return a->dtype;
    return ir_promote(a->dtype, b->dtype);
}

int ir_binary(IrGraph *g, IrOp op, int a, int b, SrcLoc loc)
{
    CGC_ASSERT(ir_op_info[op].cls == IR_CLASS_BINARY);
    const IrNode *na = node(g, a), *nb = node(g, b);
    CGC_ASSERT(ir_dtype_is_float(na->dtype) && ir_dtype_is_float(nb->dtype));
    Shape s;
    CGC_ASSERT(ir_broadcast_shape(&na->shape, &nb->shape, &s));
    IrNode n = make(op, elementwise_dtype(na, nb), s, loc, 2, a, b, 0);
    return ir_add_node(g, &n);
}

int ir_select(IrGraph *g, int cond, int a, int b, SrcLoc loc)
{
    const IrNode *nc = node(g, cond), *na = node(g, a), *nb = node(g, b);
    Shape s, s2;
    CGC_ASSERT(ir_broadcast_shape(&na->shape, &nb->shape, &s));
    CGC_ASSERT(ir_broadcast_shape(&s, &nc->shape, &s2));
    IrNode n = make(IR_SELECT, elementwise_dtype(na, nb), s2, loc, 3, cond, a, b);
    return ir_add_node(g, &n);
}

int ir_cast(IrGraph *g, int x, DType t, SrcLoc loc)
{
    const IrNode *in = node(g, x);
    if (in->dtype == t) return x;
    IrNode n = make(IR_CAST, t, in->shape, loc, 1, x, 0, 0);
    return ir_add_node(g, &n);
}

int ir_count(IrGraph *g, const Shape *s, SrcLoc loc)
{
    double fixed = 1;
    Shape symbolic = {0};
    for (int k = 0; k < s->rank; k++)
        if (IR_DIM_IS_SYM(s->dim[k])) symbolic.dim[symbolic.rank++] = s->dim[k];
        else fixed *= (double)s->dim[k];
    int count = ir_const(g, fixed, loc);
    if (symbolic.rank == 0) return count;
    int ones = ir_broadcast(g, ir_const(g, 1, loc), symbolic, loc);
    int n = ir_reduce(g, IR_SUM, ones, IR_AXIS_ALL, loc);
    return fixed == 1 ? n : ir_binary(g, IR_MUL, count, n, loc);
}

int ir_dropout(IrGraph *g, int x, int counter, double p, int stream, SrcLoc loc)
{
    const IrNode *in = node(g, x);
    CGC_ASSERT(node(g, counter)->shape.rank == 0);
    CGC_ASSERT(p >= 0 && p < 1);
    IrNode n = make(IR_DROPOUT, in->dtype, in->shape, loc, 2, x, counter, 0);
    n.value = p;
    n.index = stream;
    return ir_add_node(g, &n);
}

int ir_reduce(IrGraph *g, IrOp op, int x, int axis, SrcLoc loc)
{
    CGC_ASSERT(ir_op_info[op].cls == IR_CLASS_REDUCE);
    const IrNode *in = node(g, x);
    IrNode n = make(op, in->dtype, ir_shape_reduce(&in->shape, axis), loc, 1, x, 0, 0);
    n.axis = axis;
    return ir_add_node(g, &n);
}

/* Element counts agree, symbols included: the symbolic dims of both sides must be the
 * same multiset, and the products of the numeric ones equal. */
static bool same_numel(const Shape *a, const Shape *b)
{
    int64_t pa = 1, pb = 1;
    int syms_a[IR_MAX_RANK], syms_b[IR_MAX_RANK], na = 0, nb = 0;
    for (int i = 0; i < a->rank; i++)
        if (IR_DIM_IS_SYM(a->dim[i])) syms_a[na++] = IR_DIM_SYMBOL(a->dim[i]);
        else pa *= a->dim[i];
    for (int i = 0; i < b->rank; i++)
        if (IR_DIM_IS_SYM(b->dim[i])) syms_b[nb++] = IR_DIM_SYMBOL(b->dim[i]);
        else pb *= b->dim[i];
    if (pa != pb || na != nb) return false;
    for (int i = 0; i < na; i++) {
        bool found = false;
        for (int j = 0; j < nb && !found; j++)
            if (syms_b[j] == syms_a[i]) syms_b[j] = -1, found = true;
        if (!found) return false;
    }
    return true;
}

int ir_reshape(IrGraph *g, int x, Shape s, SrcLoc loc)
{
    const IrNode *in = node(g, x);
    CGC_ASSERT(same_numel(&in->shape, &s));
    if (ir_shape_equal(&in->shape, &s)) return x;
    IrNode n = make(IR_RESHAPE, in->dtype, s, loc, 1, x, 0, 0);
    return ir_add_node(g, &n);
}

int ir_broadcast(IrGraph *g, int x, Shape s, SrcLoc loc)
{
    const IrNode *in = node(g, x);
    Shape b;
    CGC_ASSERT(ir_broadcast_shape(&in->shape, &s, &b) && ir_shape_equal(&b, &s));
    if (ir_shape_equal(&in->shape, &s)) return x;
    IrNode n = make(IR_BROADCAST, in->dtype, s, loc, 1, x, 0, 0);
    return ir_add_node(g, &n);
}

int ir_reduce_to(IrGraph *g, int x, Shape s, SrcLoc loc)
{
    const IrNode *in = node(g, x);
    Shape b;
    CGC_ASSERT(ir_broadcast_shape(&s, &in->shape, &b) && ir_shape_equal(&b, &in->shape));
    if (ir_shape_equal(&in->shape, &s)) return x;
    IrNode n = make(IR_REDUCE_TO, in->dtype, s, loc, 1, x, 0, 0);
    return ir_add_node(g, &n);
}

int ir_transpose(IrGraph *g, int x, SrcLoc loc)
{
    const IrNode *in = node(g, x);
    CGC_ASSERT(in->shape.rank >= 2);
    Shape s = in->shape;
    int64_t t = s.dim[s.rank - 1];
    s.dim[s.rank - 1] = s.dim[s.rank - 2];
    s.dim[s.rank - 2] = t;
    IrNode n = make(IR_TRANSPOSE, in->dtype, s, loc, 1, x, 0, 0);
    return ir_add_node(g, &n);
}

int ir_perm_axis(const IrNode *n, int i) { return n->flags >> (3 * i) & 7; }

/* Whether N's flags hold a permutation of its input's RANK axes; its shape into *S. */
static bool permute_shape(const IrNode *n, const Shape *in, Shape *s)
{
    unsigned seen = 0;
    *s = *in;
    for (int i = 0; i < in->rank; i++) {
        int a = ir_perm_axis(n, i);
        if (a >= in->rank || seen >> a & 1) return false;
        seen |= 1u << a;
        s->dim[i] = in->dim[a];
    }
    return n->flags >> (3 * in->rank) == 0;
}

int ir_permute(IrGraph *g, int x, const int *perm, SrcLoc loc)
{
    const IrNode *in = node(g, x);
    IrNode n = make(IR_PERMUTE, in->dtype, in->shape, loc, 1, x, 0, 0);
    for (int i = 0; i < in->shape.rank; i++) n.flags |= perm[i] << (3 * i);
    CGC_ASSERT(permute_shape(&n, &in->shape, &n.shape));
    return ir_add_node(g, &n);
}

int ir_arange(IrGraph *g, int64_t n, SrcLoc loc)
{
    CGC_ASSERT(n >= 1);
    IrNode a = make(IR_ARANGE, DT_I32, (Shape){ .rank = 1, .dim = { n } }, loc, 0, 0, 0, 0);
    return ir_add_node(g, &a);
}

int ir_causal_mask(IrGraph *g, int x, double value, SrcLoc loc)
{
    const IrNode *in = node(g, x);
    CGC_ASSERT(in->shape.rank >= 2 && ir_dtype_is_float(in->dtype));
    CGC_ASSERT(in->shape.dim[in->shape.rank - 1] == in->shape.dim[in->shape.rank - 2]);
    IrNode n = make(IR_CAUSAL_MASK, in->dtype, in->shape, loc, 1, x, 0, 0);
    n.value = value;
    return ir_add_node(g, &n);
}

/* The shape of TABLE's rows at INDEX: INDEX's, then the table's row width. */
static Shape embed_shape(const Shape *table, const Shape *index)
{
    Shape s = *index;
    s.dim[s.rank++] = table->dim[1];
    return s;
}

int ir_embed(IrGraph *g, int table, int index, SrcLoc loc)
{
    const IrNode *t = node(g, table), *ix = node(g, index);
    CGC_ASSERT(t->shape.rank == 2 && ir_dtype_is_float(t->dtype) && ix->dtype == DT_I32);
    CGC_ASSERT(ix->shape.rank < IR_MAX_RANK);
    IrNode n = make(IR_EMBED, t->dtype, embed_shape(&t->shape, &ix->shape), loc, 2, table, index, 0);
    return ir_add_node(g, &n);
}

int ir_embed_grad(IrGraph *g, int d, int index, int64_t rows, SrcLoc loc)
{
    const IrNode *dn = node(g, d), *ix = node(g, index);
    CGC_ASSERT(ix->dtype == DT_I32 && dn->shape.rank == ix->shape.rank + 1);
    Shape s = { .rank = 2, .dim = { rows, dn->shape.dim[dn->shape.rank - 1] } };
    IrNode n = make(IR_EMBED_GRAD, DT_F32, s, loc, 2, d, index, 0);
    return ir_add_node(g, &n);
}

/* The shape of a @ b with the given transposes, or false when they do not fit. */
static bool matmul_shape(const Shape *a, const Shape *b, int flags, Shape *out)
{
    if (a->rank < 2 || b->rank < 2) return false;
    int64_t m = a->dim[a->rank - ((flags & IR_MATMUL_TRANS_A) ? 1 : 2)];
    int64_t ka = a->dim[a->rank - ((flags & IR_MATMUL_TRANS_A) ? 2 : 1)];
    int64_t kb = b->dim[b->rank - ((flags & IR_MATMUL_TRANS_B) ? 1 : 2)];
    int64_t nn = b->dim[b->rank - ((flags & IR_MATMUL_TRANS_B) ? 2 : 1)];
    if (ka != kb) return false;
    Shape la = *a, lb = *b;
    la.rank -= 2;
    lb.rank -= 2;
    if (flags & IR_MATMUL_BATCH_SUM) {
        if (!(flags & IR_MATMUL_TRANS_A) || (flags & IR_MATMUL_TRANS_B) || la.rank == 0 ||
            !ir_shape_equal(&la, &lb))
            return false;
        *out = ir_shape0();
    } else if (!ir_broadcast_shape(&la, &lb, out)) return false;
    out->dim[out->rank++] = m;
    out->dim[out->rank++] = nn;
    return true;
}

int ir_matmul(IrGraph *g, int a, int b, int flags, SrcLoc loc)
{
    const IrNode *na = node(g, a), *nb = node(g, b);
    Shape s;
    CGC_ASSERT(matmul_shape(&na->shape, &nb->shape, flags, &s));
    IrNode n = make(IR_MATMUL, ir_promote(na->dtype, nb->dtype), s, loc, 2, a, b, 0);
    n.flags = flags;
    return ir_add_node(g, &n);
}

int64_t ir_window_extent(int64_t in, const IrWindow *w, int axis)
{
    int64_t span = (int64_t)w->dilation[axis] * (w->kernel[axis] - 1) + 1;
    int64_t padded = in + 2 * (int64_t)w->pad[axis];
    return padded < span ? -1 : (padded - span) / w->stride[axis] + 1;
}

bool ir_window_shape(const Shape *image, const IrWindow *w, int flags, Shape *out)
{
    if (image->rank != 4 || IR_DIM_IS_SYM(image->dim[1]) || IR_DIM_IS_SYM(image->dim[2]) ||
        IR_DIM_IS_SYM(image->dim[3]))
        return false;
    for (int i = 0; i < 2; i++)
        if (w->kernel[i] < 1 || w->stride[i] < 1 || w->pad[i] < 0 || w->dilation[i] < 1)
            return false;
    int64_t c = image->dim[1], groups = w->groups;
    int64_t oh = ir_window_extent(image->dim[2], w, 0), ow = ir_window_extent(image->dim[3], w, 1);
    int64_t kk = (int64_t)w->kernel[0] * w->kernel[1];
    if (oh < 1 || ow < 1 || groups < 1 || c % groups != 0 || (!(flags & IR_WINDOW_ROWS) && groups != 1))
        return false;
    *out = (Shape){0};
    out->dim[out->rank++] = image->dim[0];
    if (!(flags & IR_WINDOW_ROWS)) {
        out->dim[out->rank++] = c;
        out->dim[out->rank++] = kk;
        out->dim[out->rank++] = oh;
        out->dim[out->rank++] = ow;
    } else {
        if (groups > 1) out->dim[out->rank++] = groups;
        out->dim[out->rank++] = oh * ow;
        out->dim[out->rank++] = kk * (c / groups);
    }
    return true;
}

int64_t ir_window_source(const IrWindow *w, int flags, const int64_t image[4], int64_t e)
{
    int64_t c = image[1], h = image[2], wd = image[3];
    int64_t oh = ir_window_extent(h, w, 0), ow = ir_window_extent(wd, w, 1);
    int64_t kk = (int64_t)w->kernel[0] * w->kernel[1], positions = oh * ow, n, ch, l, k;
    if (flags & IR_WINDOW_ROWS) {   /* [N, G, L, C/G * KK] */
        int64_t cg = c / w->groups, row = e / (cg * kk), col = e % (cg * kk);
        l = row % positions, n = row / positions / w->groups;
        ch = row / positions % w->groups * cg + col / kk, k = col % kk;
    } else {                        /* [N, C, KK, OH, OW] */
        l = e % positions, k = e / positions % kk, ch = e / positions / kk % c, n = e / positions / kk / c;
    }
    int64_t y = l / ow * w->stride[0] - w->pad[0] + k / w->kernel[1] * w->dilation[0];
    int64_t x = l % ow * w->stride[1] - w->pad[1] + k % w->kernel[1] * w->dilation[1];
    if (y < 0 || y >= h || x < 0 || x >= wd) return -1;
    return ((n * c + ch) * h + y) * wd + x;
}

int ir_unfold_twin(const IrGraph *g, int id)
{
    const IrNode *u = &g->nodes[id];
    if (u->op != IR_UNFOLD) return -1;
    for (int i = u->in[0] + 1; i < id; i++) {
        const IrNode *n = &g->nodes[i];
        if (n->op == IR_UNFOLD && n->in[0] == u->in[0] && n->flags == u->flags && n->dtype == u->dtype &&
            memcmp(&n->win, &u->win, sizeof n->win) == 0 && n->value == u->value)
            return i;
    }
    return -1;
}

int ir_unfold(IrGraph *g, int x, IrWindow w, int flags, double outside, SrcLoc loc)
{
    const IrNode *in = node(g, x);
    Shape s;
    CGC_ASSERT(ir_window_shape(&in->shape, &w, flags, &s));
    IrNode n = make(IR_UNFOLD, in->dtype, s, loc, 1, x, 0, 0);
    n.win = w, n.flags = flags, n.value = outside;
    return ir_add_node(g, &n);
}

int ir_fold(IrGraph *g, int x, Shape image, IrWindow w, int flags, SrcLoc loc)
{
    const IrNode *in = node(g, x);
    Shape s;
    CGC_ASSERT(ir_window_shape(&image, &w, flags, &s) && ir_shape_equal(&s, &in->shape));
    IrNode n = make(IR_FOLD, in->dtype, image, loc, 1, x, 0, 0);
    n.win = w, n.flags = flags;
    return ir_add_node(g, &n);
}

int ir_mode_switch(IrGraph *g, int train, int eval, SrcLoc loc)
{
    CGC_ASSERT(ir_shape_equal(&node(g, train)->shape, &node(g, eval)->shape));
    DType t = ir_promote(node(g, train)->dtype, node(g, eval)->dtype);
    train = ir_cast(g, train, t, loc);
    eval = ir_cast(g, eval, t, loc);
    IrNode n = make(IR_MODE_SWITCH, t, node(g, train)->shape, loc, 2, train, eval, 0);
    return ir_add_node(g, &n);
}

int ir_softmax(IrGraph *g, IrOp op, int x, int axis, SrcLoc loc)
{
    CGC_ASSERT(ir_op_info[op].family == IR_FAMILY_SOFTMAX);
    const IrNode *in = node(g, x);
    CGC_ASSERT(axis >= 0 && axis < in->shape.rank);
    IrNode n = make(op, in->dtype, in->shape, loc, 1, x, 0, 0);
    n.axis = axis;
    return ir_add_node(g, &n);
}

int ir_softmax_grad(IrGraph *g, IrOp op, int d, int y, int axis, SrcLoc loc)
{
    CGC_ASSERT(ir_op_info[op].family == IR_FAMILY_SOFTMAX_GRAD);
    const IrNode *nd = node(g, d), *ny = node(g, y);
    CGC_ASSERT(ir_shape_equal(&nd->shape, &ny->shape));
    IrNode n = make(op, ir_promote(nd->dtype, ny->dtype), ny->shape, loc, 2, d, y, 0);
    n.axis = axis;
    return ir_add_node(g, &n);
}

/* logits [..., C] float and labels i32 [...], the same leading dimensions. */
static void check_logits_labels(const IrGraph *g, int logits, int labels)
{
    const IrNode *nl = node(g, logits), *ny = node(g, labels);
    CGC_ASSERT(nl->shape.rank >= 2 && ir_dtype_is_float(nl->dtype));
    CGC_ASSERT(ny->shape.rank == nl->shape.rank - 1 && ny->dtype == DT_I32);
    for (int i = 0; i < ny->shape.rank; i++) CGC_ASSERT(ny->shape.dim[i] == nl->shape.dim[i]);
}

int ir_cross_entropy(IrGraph *g, int logits, int labels, SrcLoc loc)
{
    check_logits_labels(g, logits, labels);
    IrNode n = make(IR_CROSS_ENTROPY, DT_F32, ir_shape0(), loc, 2, logits, labels, 0);
    return ir_add_node(g, &n);
}

int ir_ce_grad(IrGraph *g, int d, int logits, int labels, SrcLoc loc)
{
    check_logits_labels(g, logits, labels);
    CGC_ASSERT(node(g, d)->shape.rank == 0);
    const IrNode *nl = node(g, logits);
    IrNode n = make(IR_CE_GRAD, nl->dtype, nl->shape, loc, 3, d, logits, labels);
    return ir_add_node(g, &n);
}

int ir_count_correct(IrGraph *g, int logits, int labels, SrcLoc loc)
{
    check_logits_labels(g, logits, labels);
    IrNode n = make(IR_COUNT_CORRECT, DT_F32, ir_shape0(), loc, 2, logits, labels, 0);
    return ir_add_node(g, &n);
}

int ir_assign(IrGraph *g, const IrProgram *p, int tensor, int value, SrcLoc loc)
{
    CGC_ASSERT(tensor >= 0 && tensor < p->ntensors);
    const IrNode *v = node(g, value);
    CGC_ASSERT(ir_shape_equal(&v->shape, &p->tensors[tensor].shape));
    CGC_ASSERT(v->dtype == p->tensors[tensor].dtype);
    IrNode n = make(IR_ASSIGN, DT_F32, ir_shape0(), loc, 1, value, 0, 0);
    n.index = tensor;
    n.name = p->tensors[tensor].name;
    return ir_add_node(g, &n);
}

/* ---- text form ----
 *
 *   graph train of model mlp
 *   symbols: N
 *   input 0 x: f32[N, 784]
 *   tensor 0 h1.weight: f32[512, 784] param uniform(0.0357142857)
 *   %3 = matmul %0, %1 trans_b : f32[N, 512]  ; h1 @6:14
 *   outputs: loss %40, prediction %12
 *
 * Numbers print with %.9g so that a dump is the same on every machine. */

static const char *init_str(const IrProgram *p, const IrTensor *t, char *buf, size_t n)
{
    if (t->kind == IR_COPY) {
        snprintf(buf, n, "of %s", p->tensors[t->param_of].name);
        return buf;
    }
    switch (t->init) {
    case IR_INIT_ZEROS: return "zeros";
    case IR_INIT_ONES: return "ones";
    case IR_INIT_UNIFORM: snprintf(buf, n, "uniform(%.9g)", t->init_value); return buf;
    case IR_INIT_CONST: snprintf(buf, n, "const(%.9g)", t->init_value); return buf;
    case IR_INIT_NORMAL: snprintf(buf, n, "normal(%.9g)", t->init_value); return buf;
    }
    return "?";
}

static void print_tables(FILE *out, const IrProgram *p)
{
    char sb[128], ib[300];
    fprintf(out, "symbols:");
    for (int i = 0; i < p->nsyms; i++) fprintf(out, " %s", p->syms[i].name);
    fputc('\n', out);
    for (int i = 0; i < p->ninputs; i++)
        fprintf(out, "input %d %s: %s%s\n", i, p->inputs[i].name,
                ir_dtype_name(p->inputs[i].dtype), ir_shape_str(p, &p->inputs[i].shape, sb, sizeof sb));
    for (int i = 0; i < p->ntensors; i++) {
        const IrTensor *t = &p->tensors[i];
        static const char *const kind[] = {"param", "state", "copy", "state"};
        fprintf(out, "tensor %d %s: %s%s %s %s\n", i, t->name, ir_dtype_name(t->dtype),
                ir_shape_str(p, &t->shape, sb, sizeof sb), kind[t->kind], init_str(p, t, ib, sizeof ib));
    }
}

static const char *runtime_name(int which)
{
    switch (which) {
    case IR_RT_TOTAL_STEPS: return "total_steps";
    case IR_RT_MICRO_STEP: return "micro_step";
    case IR_RT_RANK_SHARE: return "rank_share";
    case IR_RT_POSITION: return "position";
    }
    return "?";
}

static void print_axis(FILE *out, int axis)
{
    if (axis == IR_AXIS_ALL) fputs(" axis=all", out);
    else fprintf(out, " axis=%d", axis);
}

/* " kernel=3x3 stride=1x1 pad=1x1 dilation=1x1 groups=1 rows" */
static void print_window(FILE *out, const IrNode *n)
{
    const IrWindow *w = &n->win;
    fprintf(out, " kernel=%dx%d stride=%dx%d pad=%dx%d dilation=%dx%d groups=%d%s", w->kernel[0],
            w->kernel[1], w->stride[0], w->stride[1], w->pad[0], w->pad[1], w->dilation[0],
            w->dilation[1], w->groups, (n->flags & IR_WINDOW_ROWS) ? " rows" : "");
}

static void print_matmul_flags(FILE *out, int flags)
{
    if (flags & IR_MATMUL_TRANS_A) fputs(" trans_a", out);
    if (flags & IR_MATMUL_TRANS_B) fputs(" trans_b", out);
    if (flags & IR_MATMUL_TF32) fputs(" tf32", out);
    if (flags & IR_MATMUL_BATCH_SUM) fputs(" batch_sum", out);
}

/* The attributes the op reads (ops.def, ATTRS). */
static void print_attrs(FILE *out, const IrProgram *p, const IrNode *n)
{
    switch (ir_op_info[n->op].attrs) {
    case IR_ATTRS_NO_ATTR: break;
    case IR_ATTRS_INPUT_NAME: fprintf(out, " %s", p->inputs[n->index].name); break;
    case IR_ATTRS_TENSOR_NAME: fprintf(out, " %s", p->tensors[n->index].name); break;
    case IR_ATTRS_TARGET_NAME: fprintf(out, " -> %s", p->tensors[n->index].name); break;
    case IR_ATTRS_CONST_VALUE: fprintf(out, " %.9g", n->value); break;
    case IR_ATTRS_RUNTIME_NAME: fprintf(out, " %s", runtime_name(n->index)); break;
    case IR_ATTRS_P_STREAM: fprintf(out, " p=%.9g stream=%d", n->value, n->index); break;
    case IR_ATTRS_MATMUL_FLAGS: print_matmul_flags(out, n->flags); break;
    case IR_ATTRS_AXIS: print_axis(out, n->axis); break;
    case IR_ATTRS_WINDOW: print_window(out, n); break;
    case IR_ATTRS_WINDOW_OUTSIDE:
        print_window(out, n);
        fprintf(out, " outside=%.9g", n->value);
        break;
    case IR_ATTRS_BUCKET: fprintf(out, " bucket=%d", n->index); break;
    case IR_ATTRS_MASK_VALUE: fprintf(out, " masked=%.9g", n->value); break;
    case IR_ATTRS_PERM:
        fputs(" perm=", out);
        for (int i = 0; i < n->shape.rank; i++) fprintf(out, "%s%d", i ? "," : "", ir_perm_axis(n, i));
        break;
    }
}

static const char *const role_names[IR_NUM_OUTPUT_ROLES] = {
    "loss", "prediction", "correct", "skipped", "grad_norm",
};

const char *ir_group_kind_name(IrGroupKind kind)
{
    static const char *const names[] = { "pointwise", "reduce", "row", "gemm", "attention", "classifier" };
    return names[kind];
}

void ir_print(FILE *out, const IrProgram *p, const IrGraph *g)
{
    char sb[128];
    fprintf(out, "graph %s of model %s\n", g->name, p->model_name ? p->model_name : "?");
    print_tables(out, p);
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = &g->nodes[i];
        fprintf(out, "%%%d = %s", i, ir_op_name(n->op));
        for (int k = 0; k < n->nin; k++) fprintf(out, "%s %%%d", k ? "," : "", n->in[k]);
        print_attrs(out, p, n);
        fprintf(out, " : %s%s", ir_dtype_name(n->dtype), ir_shape_str(p, &n->shape, sb, sizeof sb));
        /* Leaves and assignments already show their table name. */
        bool show_name = n->name && !ir_node_table_name(p, n);
        if (show_name || n->loc.line || n->group || n->recompute) fputs("  ;", out);
        if (show_name) fprintf(out, " %s", n->name);
        if (n->loc.line) fprintf(out, " @%d:%d", n->loc.line, n->loc.col);
        if (n->recompute) fputs(" recompute", out);
        if (n->group) fprintf(out, " g%d", n->group);
        fputc('\n', out);
    }
    for (int k = 0; k < g->ngroups; k++) {
        const IrGroup *gr = &g->groups[k];
        fprintf(out, "group g%d %s %s over %s", k + 1, gr->name,
                ir_group_kind_name(gr->kind), ir_shape_str(p, &gr->work, sb, sizeof sb));
        if (gr->kind == IR_GROUP_REDUCE && gr->axis == IR_AXIS_ALL) fputs(" axis all", out);
        else if (gr->kind == IR_GROUP_REDUCE) fprintf(out, " axis %d", gr->axis);
        if (gr->multi) fprintf(out, " multi %d%s", gr->multi, gr->last ? " last" : "");
        fputc('\n', out);
    }
    fputs("outputs:", out);
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++)
        if (g->output[r] >= 0) fprintf(out, " %s %%%d", role_names[r], g->output[r]);
    fputc('\n', out);
}

/* ---- verification ---- */

static void verify_fail(const IrGraph *g, int id, const char *what)
{
    cgc_internal_error(__FILE__, __LINE__, "graph %s, node %%%d (%s): %s", g->name, id,
                       ir_op_name(g->nodes[id].op), what);
}

static Shape in_shape(const IrGraph *g, const IrNode *n, int k) { return g->nodes[n->in[k]].shape; }

bool ir_node_shape(const IrProgram *p, const IrGraph *g, const IrNode *n, Shape *s)
{
    Shape a, b, t;
    switch (ir_op_info[n->op].shape) {
    case IR_SHAPE_OWN: return false;
    case IR_SHAPE_IN0: *s = in_shape(g, n, 0); return true;
    case IR_SHAPE_IN1: *s = in_shape(g, n, 1); return true;
    case IR_SHAPE_BROADCAST:
        *s = in_shape(g, n, 0);
        for (int k = 1; k < n->nin; k++) {
            a = *s, b = in_shape(g, n, k);
            if (!ir_broadcast_shape(&a, &b, s)) s->rank = -1;
            if (s->rank < 0) break;
        }
        return true;
    case IR_SHAPE_REDUCE:
        a = in_shape(g, n, 0);
        if (n->axis != IR_AXIS_ALL && (n->axis < 0 || n->axis >= a.rank)) s->rank = -1;
        else *s = ir_shape_reduce(&a, n->axis);
        return true;
    case IR_SHAPE_MATMUL:
        a = in_shape(g, n, 0), b = in_shape(g, n, 1);
        if (!matmul_shape(&a, &b, n->flags, s)) s->rank = -1;
        return true;
    case IR_SHAPE_TRANSPOSE:
        *s = t = in_shape(g, n, 0);
        if (t.rank < 2) s->rank = -1;
        else s->dim[t.rank - 1] = t.dim[t.rank - 2], s->dim[t.rank - 2] = t.dim[t.rank - 1];
        return true;
    case IR_SHAPE_PERMUTE:
        a = in_shape(g, n, 0);
        if (!permute_shape(n, &a, s)) s->rank = -1;
        return true;
    case IR_SHAPE_EMBED:
        a = in_shape(g, n, 0);
        b = in_shape(g, n, 1);
        if (a.rank != 2 || b.rank >= IR_MAX_RANK) s->rank = -1;
        else *s = embed_shape(&a, &b);
        return true;
    case IR_SHAPE_SCALAR: *s = ir_shape0(); return true;
    case IR_SHAPE_WINDOW:
        a = in_shape(g, n, 0);
        if (!ir_window_shape(&a, &n->win, n->flags, s)) s->rank = -1;
        return true;
    case IR_SHAPE_IMAGE:
        a = in_shape(g, n, 0);
        *s = n->shape;
        if (!ir_window_shape(s, &n->win, n->flags, &b) || !ir_shape_equal(&a, &b)) s->rank = -1;
        return true;
    case IR_SHAPE_ASSIGN:
        *s = ir_shape0();
        a = in_shape(g, n, 0);
        if (n->index < 0 || n->index >= p->ntensors || !ir_shape_equal(&a, &p->tensors[n->index].shape))
            s->rank = -1;
        return true;
    }
    return false;
}

/* Fusion groups: numbers in range, members consecutive, operands within the limit. */
/* A reduce group's reductions are whole only when its kernel ends: no member reads one. */
static void verify_reduce_groups(const IrGraph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = &g->nodes[i];
        if (!n->group || n->group > g->ngroups || g->groups[n->group - 1].kind != IR_GROUP_REDUCE) continue;
        for (int j = 0; j < n->nin; j++)
            if (g->nodes[n->in[j]].group == n->group && ir_op_is_reduction(g->nodes[n->in[j]].op))
                verify_fail(g, i, "reads a reduction of its own reduce group");
    }
}

static void verify_groups(const IrGraph *g)
{
    bool *started = xcalloc((size_t)g->ngroups + 1, sizeof *started);
    for (int i = 0; i < g->nnodes; i++) {
        int k = g->nodes[i].group;
        if (k < 0 || k > g->ngroups) verify_fail(g, i, "group number out of range");
        if (!k || (i > 0 && g->nodes[i - 1].group == k)) continue;
        if (started[k]) verify_fail(g, i, "members of its group are not consecutive");
        started[k] = true;
    }
    free(started);
    int *operands = xmalloc(((size_t)g->ngroups + 1) * sizeof *operands);
    ir_group_operands(g, operands);
    for (int k = 0; k < g->ngroups; k++)
        if (operands[k] > IR_GROUP_MAX_OPERANDS)
            cgc_internal_error(__FILE__, __LINE__, "graph %s, group %d (%s): %d operands, more than "
                               "%d", g->name, k + 1, g->groups[k].name ? g->groups[k].name : "-",
                               operands[k], IR_GROUP_MAX_OPERANDS);
    free(operands);
    verify_reduce_groups(g);
}

/* What is wrong with N's index attribute, by what it names (ops.def, ATTRS), or NULL. */
static const char *bad_index(const IrProgram *p, const IrNode *n)
{
    switch (ir_op_info[n->op].attrs) {
    case IR_ATTRS_INPUT_NAME:
        return n->index < 0 || n->index >= p->ninputs ? "bad input index" : NULL;
    case IR_ATTRS_TENSOR_NAME: case IR_ATTRS_TARGET_NAME:
        return n->index < 0 || n->index >= p->ntensors ? "bad tensor index" : NULL;
    case IR_ATTRS_RUNTIME_NAME:
        return n->index < 0 || n->index >= IR_NUM_RUNTIME ? "bad runtime scalar" : NULL;
    case IR_ATTRS_NO_ATTR: case IR_ATTRS_CONST_VALUE: case IR_ATTRS_P_STREAM:
    case IR_ATTRS_MATMUL_FLAGS: case IR_ATTRS_AXIS: case IR_ATTRS_WINDOW:
    case IR_ATTRS_WINDOW_OUTSIDE: case IR_ATTRS_BUCKET: case IR_ATTRS_PERM: case IR_ATTRS_MASK_VALUE:
        return NULL;
    }
    return NULL;
}

void ir_verify(const IrProgram *p, const IrGraph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = &g->nodes[i];
        if ((unsigned)n->op >= IR_NUM_OPS) verify_fail(g, i, "unknown op");
        if (n->nin != ir_op_info[n->op].arity) verify_fail(g, i, "wrong number of inputs");
        for (int k = 0; k < n->nin; k++)
            if (n->in[k] < 0 || n->in[k] >= i) verify_fail(g, i, "input is not an earlier node");
        const char *bad = bad_index(p, n);
        if (bad) verify_fail(g, i, bad);
        Shape want;
        if (ir_node_shape(p, g, n, &want) && (want.rank < 0 || !ir_shape_equal(&want, &n->shape)))
            verify_fail(g, i, "shape does not follow from the inputs");
    }
    for (int r = 0; r < IR_NUM_OUTPUT_ROLES; r++)
        if (g->output[r] >= g->nnodes) cgc_internal_error(__FILE__, __LINE__, "graph %s: output out of range", g->name);
    verify_groups(g);
}
