/* codegen/memplan.c: the memory plan (plan.h). Skeleton: every buffer its own memory. */
#include "codegen_impl.h"

#include <stdlib.h>

enum { ALIGN = 256 };

static size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static int root_of(const Plan *plan, int b)
{
    while (plan->buffers[b].alias_of >= 0) b = plan->buffers[b].alias_of;
    return b;
}

void plan_layout(const Plan *plan, const int64_t *symmax, bool reuse, PlanLayout *out)
{
    (void)reuse;
    memset(out, 0, sizeof *out);
    out->offset = xcalloc((size_t)(plan->nbuffers ? plan->nbuffers : 1), sizeof *out->offset);
    size_t end = 0;
    for (int b = 0; b < plan->nbuffers; b++) {
        if (plan->buffers[b].alias_of >= 0) continue;
        out->offset[b] = align_up(end);
        end = out->offset[b] + plan_buffer_bytes(plan, b, symmax);
    }
    for (int b = 0; b < plan->nbuffers; b++)
        if (plan->buffers[b].alias_of >= 0) out->offset[b] = out->offset[root_of(plan, b)];
    out->arena_bytes = align_up(end);
}

void plan_layout_free(PlanLayout *l)
{
    free(l->offset);
    memset(l, 0, sizeof *l);
}
