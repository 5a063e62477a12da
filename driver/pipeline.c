/* pipeline.c: parse, check, apply overrides, lower (see pipeline.h).
 *
 * Every train key has a flag that overrides the file; its value is parsed as a .net
 * expression and checked by the same code as the train block (sema_train_entry; --lr,
 * sema_train_lr), with the flag's name as the "file" in messages, so `--batch 0` is
 * reported exactly like `batch = 0`. The rules that relate keys (sema_train_finish) are
 * applied after the last override. */
#include "pipeline.h"

#include <stdio.h>
#include <string.h>

#include "../compiler/passes.h"

/* Applies one override: the value is parsed and checked as the train block would. */
static int apply_override(IrProgram *p, const Override *o)
{
    char flag[64];
    snprintf(flag, sizeof flag, "--%s", o->flag);
    Source *src = source_from_string(flag, o->value, strlen(o->value));
    AstExpr *e = parse_value(src);
    int rc = -1;
    if (e && o->key) rc = sema_train_entry(src, p, o->key, (SrcLoc){1, 1}, e);
    else if (e) rc = sema_train_lr(src, p, e);
    if (rc == 0 && o->key) sema_train_key_loc(&p->cfg, o->key, (SrcLoc){0, 0});   /* no line says it now */
    ast_expr_free(e);
    source_free(src);
    return rc;
}

const char *const pipeline_pass_names[PASS_NUM] = {
    "sema", "precision", "training", "checkpoint", "fusion",
};

IrProgram *pipeline_compile(Source *src, const Override *overrides, int noverrides)
{
    return pipeline_compile_until(src, overrides, noverrides, PASS_TRAINING, 0);
}

static IrProgram *compile_until(Source *src, const Override *overrides, int noverrides,
                                PipelinePass last, int ranks, const PassObserver *obs);

IrProgram *pipeline_compile_until(Source *src, const Override *overrides, int noverrides,
                                  PipelinePass last, int ranks)
{
    return compile_until(src, overrides, noverrides, last, ranks, NULL);
}

IrProgram *pipeline_compile_observed(Source *src, const Override *overrides, int noverrides,
                                     int ranks, const PassObserver *obs)
{
    return compile_until(src, overrides, noverrides, PASS_TRAINING, ranks, obs);
}

static void observe(const PassObserver *obs, PipelinePass pass, const IrProgram *p)
{
    if (obs && obs->after) obs->after(obs->ctx, pass, p);
}

static IrProgram *compile_until(Source *src, const Override *overrides, int noverrides,
                                PipelinePass last, int ranks, const PassObserver *obs)
{
    CGC_ASSERT(last <= PASS_TRAINING && ranks >= 0);
    AstFile *ast = parse_file(src);
    if (!ast) return NULL;
    IrProgram *p = sema_check(src, ast);
    ast_free(ast);
    if (!p) return NULL;
    int failed = 0;
    for (int i = 0; i < noverrides; i++)
        if (overrides[i].key) failed |= apply_override(p, &overrides[i]) != 0;
    /* After --optimizer, which resets the learning rate to the new optimizer's default. */
    for (int i = 0; i < noverrides; i++)
        if (!overrides[i].key) failed |= apply_override(p, &overrides[i]) != 0;
    if (failed) {
        ir_program_free(p);
        return NULL;
    }
    sema_train_finish(&p->cfg);
    p->cfg.ranks = ranks ? ranks : 1;
    p->cfg.job = ranks > 0;
    observe(obs, PASS_SEMA, p);
    if (last >= PASS_PRECISION) precision_assign(p), observe(obs, PASS_PRECISION, p);
    if (last >= PASS_TRAINING) training_lower(p), observe(obs, PASS_TRAINING, p);
    return p;
}
