/* draft.c: a kernel being written (KernelDraft, codegen_impl.h): the text it grows in,
 * its parameters and name, the uses its comment lists, and the plan's buffers its
 * arguments name. Every kernel generator of codegen/ (cuda.c, fused.c, fused_row.c,
 * gemm_tc.c, mlp_fused.c, collective.c) writes through these, and plan.c calls the
 * generators; draft.c calls none of them, so no file of codegen/ calls back into the one
 * that called it.
 */
#include "codegen_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- strings ---- */

/* Room for N more bytes and the terminator. */
static void sb_reserve(StrBuf *b, size_t n)
{
    if (b->len + n + 1 <= b->cap) return;
    b->cap = (b->len + n + 1) * 2;
    b->s = xrealloc(b->s, b->cap);
}

void sb_putn(StrBuf *b, const char *s, size_t n)
{
    sb_reserve(b, n);
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void sb_puts(StrBuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

void sb_printf(StrBuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    CGC_ASSERT(n >= 0);
    sb_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void sb_free(StrBuf *b)
{
    free(b->s);
    memset(b, 0, sizeof *b);
}

void codegen_mangle(char *dst, size_t max, const char *s)
{
    size_t n = 0;
    for (; *s && n + 1 < max; s++) {
        char c = *s;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        dst[n++] = ok ? c : '_';
    }
    dst[n] = '\0';
}

/* ---- types and parameters ---- */

const char *cuda_storage_ctype(DType t, bool is_const)
{
    static const char *const out[] = { "float *", "cgc_half *", "cgc_bf16 *", "int32_t *" };
    static const char *const in[] = { "const float *", "const cgc_half *", "const cgc_bf16 *",
                                      "const int32_t *" };
    CGC_ASSERT(t >= DT_F32 && t <= DT_I32);
    return is_const ? in[t] : out[t];
}

DraftParam *draft_param(KernelDraft *d, PlanParamType type, const char *ctype,
                             const char *name, PlanArg arg)
{
    CGC_ASSERT(d->nparams < (d->packed ? PLAN_MAX_SLOTS : PLAN_MAX_PARAMS));
    if (d->nparams == d->capparams) {
        d->capparams = d->capparams ? d->capparams * 2 : 32;
        d->param = xrealloc(d->param, (size_t)d->capparams * sizeof *d->param);
    }
    DraftParam *p = &d->param[d->nparams++];
    p->type = type;
    p->ctype = ctype;
    snprintf(p->name, sizeof p->name, "%s", name);
    p->arg = arg;
    return p;
}

void draft_free(KernelDraft *d)
{
    sb_free(&d->body);
    sb_free(&d->head);
    free(d->param);
    d->param = NULL;
    d->nparams = d->capparams = 0;
}

void draft_buffer(KernelDraft *d, const char *name, int buffer, DType t, bool is_const)
{
    draft_param(d, PP_PTR, cuda_storage_ctype(t, is_const), name,
              (PlanArg){ .kind = ARG_BUFFER, .index = buffer });
}

/* Appends a sym<k> parameter for every symbol the body used: the sizes come last. */
void draft_finish_symbols(KernelDraft *d)
{
    for (int k = 0; k < IR_MAX_SYMBOLS; k++) {
        if (!(d->symbols & (1u << k))) continue;
        char name[16];
        snprintf(name, sizeof name, "sym%d", k);
        draft_param(d, PP_I64, "int64_t", name, (PlanArg){ .kind = ARG_SYMBOL, .index = k });
    }
}

/* ---- names, uses and buffers ---- */

bool plan_param_written(const char *ctype) { return !ctype || strncmp(ctype, "const ", 6) != 0; }

void plan_kernel_params(PlanKernel *k, int n)
{
    size_t m = (size_t)(n > 0 ? n : 1);
    k->param = xcalloc(m, sizeof *k->param);
    k->param_ctype = xcalloc(m, sizeof *k->param_ctype);
    k->param_restrict = xcalloc(m, sizeof *k->param_restrict);
}

void plan_kernel_free(PlanKernel *k)
{
    free(k->name), free(k->source);
    free(k->param), free(k->param_ctype), free(k->param_restrict);
}

int plan_buffer_root(const Plan *pl, int b)
{
    while (pl->buffers[b].alias_of >= 0) b = pl->buffers[b].alias_of;
    return b;
}

static bool name_taken(const Plan *pl, const char *name)
{
    for (int k = 0; k < pl->nkernels; k++)
        if (strcmp(pl->kernels[k].name, name) == 0) return true;
    return false;
}

void plan_unique_kernel_name(const Plan *pl, char *name, size_t len)
{
    size_t base = strlen(name);
    for (int suffix = 2; name_taken(pl, name); suffix++) {
        CGC_ASSERT(base + 12 < len);
        snprintf(name + base, len - base, "_%d", suffix);
    }
}

void kernel_uses_add(KernelUses *u, const char *fmt, ...)
{
    if (++u->n > CODEGEN_MAX_LISTED_USES) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    CGC_ASSERT(n >= 0);
    char *line = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(line, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_printf(&u->lines, "%s\n", line);
    free(line);
}

void kernel_uses_comment(StrBuf *out, const KernelUses *u, const char *close)
{
    const char *line = u->lines.s ? u->lines.s : "";
    bool first = true;
    while (*line) {
        const char *end = strchr(line, '\n');
        sb_printf(out, "%s%.*s", first ? "/* " : "\n * ", (int)(end - line), line);
        first = false;
        line = end + 1;
    }
    if (u->n > CODEGEN_MAX_LISTED_USES)
        sb_printf(out, "\n * and %d more uses", u->n - CODEGEN_MAX_LISTED_USES);
    if (!first) sb_puts(out, close);
}

void draft_root_args(const Plan *pl, KernelDraft *d)
{
    for (int i = 0; i < d->nparams; i++)
        if (d->param[i].arg.kind == ARG_BUFFER)
            d->param[i].arg.index = plan_buffer_root(pl, d->param[i].arg.index);
}
