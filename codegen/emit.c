/* emit.c: the plan made readable: the host plan as text, --emit's files, and the
 * thunks through which the CUDA emulation calls kernels.
 *
 * Everything printed here is stable (no addresses, no times), so that golden tests can
 * compare it and a person can diff two compilations.
 */
#include "codegen_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../base/outfile.h"


/* ---- the host plan ---- */

/* "1605632" for a static shape, "3136 * N" with symbols. */
static void bytes_str(const Plan *pl, const PlanBuffer *buf, char *out, size_t n)
{
    int64_t lit = (int64_t)ir_dtype_size(buf->dtype);
    char syms[96] = "";
    for (int i = 0; i < buf->shape.rank; i++) {
        int64_t d = buf->shape.dim[i];
        if (!IR_DIM_IS_SYM(d)) {
            lit *= d;
            continue;
        }
        size_t used = strlen(syms);
        snprintf(syms + used, sizeof syms - used, " * %s", pl->p->syms[IR_DIM_SYMBOL(d)].name);
    }
    snprintf(out, n, "%lld%s", (long long)lit, syms);
}

static void print_buffer(FILE *out, const Plan *pl, int i)
{
    const PlanBuffer *buf = &pl->buffers[i];
    char shape[128], bytes[128], where[48];
    ir_shape_str(pl->p, &buf->shape, shape, sizeof shape);
    switch (buf->kind) {
    case PB_TENSOR: snprintf(where, sizeof where, "tensor %d", buf->index); break;
    case PB_INPUT: snprintf(where, sizeof where, "input %d", buf->index); break;
    case PB_DATA: snprintf(where, sizeof where, "data"); break;
    case PB_COUNTER: snprintf(where, sizeof where, "counter"); break;
    case PB_STEP: snprintf(where, sizeof where, "step"); break;
    case PB_CONST: snprintf(where, sizeof where, "const %s %%%d", codegen_graph_label[buf->graph], buf->index); break;
    case PB_NODE: snprintf(where, sizeof where, "%s %%%d", codegen_graph_label[buf->graph], buf->index); break;
    }
    fprintf(out, "  b%-4d %-18s %s%s  %s", i, where, ir_dtype_name(buf->dtype), shape, buf->what);
    if (buf->alias_of >= 0) {
        fprintf(out, "  (view of b%d)\n", buf->alias_of);
        return;
    }
    bytes_str(pl, buf, bytes, sizeof bytes);
    fprintf(out, "  %s bytes", bytes);
    if (buf->kind == PB_CONST) fprintf(out, ", value %.9g", buf->value);
    fputc('\n', out);
}

static void print_arg(FILE *out, const Plan *pl, const PlanArg *a)
{
    switch (a->kind) {
    case ARG_BUFFER: fprintf(out, "b%d", a->index); break;
    case ARG_SYMBOL: fprintf(out, "%s", pl->p->syms[a->index].name); break;
    case ARG_SEED: fprintf(out, "seed"); break;
    case ARG_I64: fprintf(out, "%lld", (long long)a->value); break;
    case ARG_F32: fprintf(out, "%.9g", a->value); break;
    case ARG_RUNTIME: fprintf(out, "runtime %d", a->index); break;
    case ARG_RANK_ROW: fprintf(out, "rank_row"); break;
    case ARG_RANK: fprintf(out, "rank"); break;
    }
}

/* The kernel's parameter names, read back from its signature. */
static void param_name(const PlanKernel *k, int i, char *out, size_t n)
{
    const char *s = strchr(k->source, '(');
    const char *sig = strstr(k->source, "__launch_bounds__");
    if (sig) s = strchr(strchr(sig, ')') + 1, '(');
    for (int at = 0; s && at < i; at++) s = strchr(s + 1, ',');
    out[0] = '\0';
    if (!s) return;
    const char *end = s + 1;
    while (*end && *end != ',' && *end != ')') end++;
    const char *start = end;
    while (start > s && (start[-1] == '_' || (start[-1] >= 'a' && start[-1] <= 'z') ||
                         (start[-1] >= 'A' && start[-1] <= 'Z') || (start[-1] >= '0' && start[-1] <= '9')))
        start--;
    snprintf(out, n, "%.*s", (int)(end - start), start);
}

static void print_launch(FILE *out, const Plan *pl, const PlanLaunch *l)
{
    const PlanKernel *k = &pl->kernels[l->kernel];
    char work[128];
    ir_shape_str(pl->p, &l->work, work, sizeof work);
    fprintf(out, "launch %s: blocks = ceil(numel %s / %lld) in [1, %lld], %d threads%s\n", k->name,
            work, (long long)l->items_per_block, (long long)l->max_blocks, k->block,
            k->any_block ? " (or fewer: a grid-stride loop)" : "");
    fprintf(out, "        (");
    for (int i = 0; i < l->nargs; i++) {
        char name[32];
        if (k->packed) snprintf(name, sizeof name, "slot %d", i);   /* plan.h: one array */
        else param_name(k, i, name, sizeof name);
        fprintf(out, "%s%s = ", i ? ", " : "", name);
        print_arg(out, pl, &l->arg[i]);
    }
    fprintf(out, ")\n");
}

static void print_dim(FILE *out, const Plan *pl, int64_t d)
{
    if (IR_DIM_IS_SYM(d)) fprintf(out, "%s", pl->p->syms[IR_DIM_SYMBOL(d)].name);
    else fprintf(out, "%lld", (long long)d);
}

/* A cuBLASLt epilogue: ", epilogue relu(c + bias b12 f16)", and the aux output. */
static void print_epilogue(FILE *out, const PlanGemm *g)
{
    static const char *const act[] = { "", "", "relu", "gelu_tanh" };
    if (g->epilogue == GEMM_EPI_NONE) return;
    fprintf(out, ", epilogue %s%sc + bias b%d %s%s", act[g->epilogue], *act[g->epilogue] ? "(" : "",
            g->bias, ir_dtype_name(g->bias_type), *act[g->epilogue] ? ")" : "");
    if (g->aux >= 0) fprintf(out, ", aux b%d = c + bias", g->aux);
}

static void print_gemm(FILE *out, const Plan *pl, const PlanGemm *g)
{
    static const char *const compute[] = { "f32", "tf32", "f32 accumulate" };
    char batch[128];
    ir_shape_str(pl->p, &g->batch, batch, sizeof batch);
    fprintf(out, "gemm b%d %s = b%d %s%s @ b%d %s%s: m = ", g->c, ir_dtype_name(g->c_type), g->a,
            ir_dtype_name(g->a_type), g->trans_a ? "^T" : "", g->b, ir_dtype_name(g->b_type),
            g->trans_b ? "^T" : "");
    print_dim(out, pl, g->m);
    if (g->m_lead.rank) {
        char lead[128];
        fprintf(out, " times the batch %s", ir_shape_str(pl->p, &g->m_lead, lead, sizeof lead));
    }
    fprintf(out, ", n = ");
    print_dim(out, pl, g->n);
    fprintf(out, ", k = ");
    print_dim(out, pl, g->k);
    if (g->k_lead.rank) {
        char lead[128];
        fprintf(out, " summed over the batch %s", ir_shape_str(pl->p, &g->k_lead, lead, sizeof lead));
    }
    fprintf(out, ", compute %s", compute[g->compute]);
    if (g->batch.rank)
        fprintf(out, ", batch %s (a %s, b %s)", batch, g->a_batched ? "batched" : "shared",
                g->b_batched ? "batched" : "shared");
    print_epilogue(out, g);
    fputc('\n', out);
    if (g->tile_kernel[0] < 0) return;
    fprintf(out, "         or generated (max-autotune's candidates):");
    for (int t = 0; t < PLAN_GEMM_TILES; t++)
        if (g->tile_kernel[t] >= 0) fprintf(out, "%s %s", t ? "," : "", pl->kernels[g->tile_kernel[t]].name);
    fputc('\n', out);
}

/* Step S of G as an implicit-GEMM run's UNFOLD, TRANSPOSE or reader (max-autotune's
 * candidates). */
static void print_implicit(FILE *out, const Plan *pl, PlanGraphId g, int s)
{
    int j, run = plan_window_at(pl, g, s);
    if (run >= 0) {
        const PlanWindow *w = &pl->windows[run];
        fprintf(out, "       or skipped, with steps");
        for (int k = 0; k < w->nreaders; k++)
            fprintf(out, "%s%d", k == 0 ? " " : k + 1 < w->nreaders ? ", " : " and ", w->reader[k] + 1);
        fprintf(out, " in an implicit-GEMM run that gathers the patches from b%d (max-autotune's "
                     "candidate)\n", w->image);
        return;
    }
    run = plan_window_skips(pl, g, s);
    if (run >= 0) {
        const PlanWindow *w = &pl->windows[run];
        if (w->transpose == s && w->epilogue >= 0)
            fprintf(out, "       or skipped, step %d computing step %d on its product in registers (max-autotune's "
                         "implicit-GEMM candidate)\n", w->reader[w->store_reader] + 1, w->epilogue + 1);
        else if (w->transpose == s)
            fprintf(out, "       or skipped, step %d storing its product NCHW into b%d (max-autotune's "
                         "implicit-GEMM candidate)\n", w->reader[w->store_reader] + 1, w->store);
        else if (w->epilogue == s)
            fprintf(out, "       or skipped, step %d computing it at each element of its product (max-autotune's "
                         "implicit-GEMM candidate)\n", w->reader[w->store_reader] + 1);
        else
            fprintf(out, "       or skipped, its readers reading the NCHW b%d as this channels-last "
                         "matrix (max-autotune's implicit-GEMM candidate)\n", w->grad);
        return;
    }
    run = plan_window_reader(pl, g, s, &j);
    if (run < 0) return;
    const PlanWindow *w = &pl->windows[run];
    fprintf(out, "         or implicit");
    if (w->operand[j])
        fprintf(out, ", %c = the patches of b%d (with step %d skipped)", w->operand[j], w->image, w->unfold + 1);
    if (w->reads_grad[j])
        fprintf(out, ", a = the NCHW b%d read as channels last (with step %d skipped)", w->grad,
                w->grad_transpose + 1);
    if (j == w->store_reader && w->epilogue >= 0)
        fprintf(out, ", C as NCHW into step %d's group, computed here (with steps %d and %d skipped)",
                w->epilogue + 1, w->transpose + 1, w->epilogue + 1);
    else if (j == w->store_reader)
        fprintf(out, ", C = b%d as NCHW (with step %d skipped)", w->store, w->transpose + 1);
    fputc(':', out);
    const char *sep = "";
    for (int t = 0; t < PLAN_GEMM_TILES; t++)
        if (w->kernel[j][t] >= 0) {
            fprintf(out, "%s %s", sep, pl->kernels[w->kernel[j][t]].name);
            sep = ",";
        }
    fputc('\n', out);
}

/* Step S of G as a step cuDNN skips or a call it makes, where it computes the run. */
static void print_conv(FILE *out, const Plan *pl, PlanGraphId g, int s)
{
    for (int r = 0; r < pl->nwindows; r++) {
        const PlanWindow *w = &pl->windows[r];
        if (w->graph != g || !w->conv) continue;
        if (plan_window_conv_skips(pl, r, s)) {
            fprintf(out, "       or skipped where cuDNN computes the convolution of b%d\n", w->image);
            return;
        }
        for (int j = 0; j < w->nreaders; j++) {
            if (w->reader[j] != s) continue;
            const PlanGemm *gm = &pl->graph[g].steps[s].gemm;
            char role = plan_window_conv_role(w, j);
            if (role == 'f')
                fprintf(out, "         or cudnnConvolutionForward(x = b%d, w = b%d) -> b%d\n", w->image, gm->b, w->store);
            else if (role == 'w')
                fprintf(out, "         or cudnnConvolutionBackwardFilter(x = b%d, dy = b%d) -> b%d\n", w->image, w->grad,
                        gm->c);
            else
                fprintf(out, "         or cudnnConvolutionBackwardData(w = b%d, dy = b%d) -> b%d\n", gm->b, w->grad,
                        w->fold_out);
            return;
        }
    }
}

/* Step S of G in the implicit-GEMM runs and the convolution library's, where it has a
 * part in one. */
static void print_window(FILE *out, const Plan *pl, PlanGraphId g, int s)
{
    int j, run = plan_window_at(pl, g, s);
    if (run < 0) run = plan_window_skips(pl, g, s);
    if (run < 0) run = plan_window_reader(pl, g, s, &j);
    if (run >= 0 && pl->windows[run].implicit) print_implicit(out, pl, g, s);
    print_conv(out, pl, g, s);
}

/* The collectives started after step AFTER of PG (-1: before the first). */
static void print_collectives(FILE *out, const Plan *pl, const PlanGraph *pg, int after)
{
    for (int c = 0; c < pg->ncolls; c++) {
        const PlanCollective *pc = &pg->colls[c];
        if (pc->after != after) continue;
        static const char *const words[] = {
            [IR_SLICE_WHOLE] = "sum", [IR_SLICE_OUT] = "reduce-scatter", [IR_SLICE_IN] = "all-gather",
        };
        IrSlice slice = ir_op_info[pc->op].slice;
        bool sum = slice == IR_SLICE_WHOLE;
        fprintf(out, "       %s %s over the ranks, bucket %d%s:", after < 0 ? "first" : "then", words[slice],
                pc->bucket, sum ? ", in place" : "");
        for (int m = 0; m < pc->nmembers; m++) {
            fprintf(out, "%s %s", m ? "," : "", pl->buffers[pc->member[m]].what);
            if (!sum) fprintf(out, " into %s", pl->buffers[pc->out[m]].what);
        }
        if (pc->wait < pg->nsteps) fprintf(out, "; step %d waits for it\n", pc->wait + 1);
        else fputs("; the graph's end waits for it\n", out);
    }
}

void plan_print(FILE *out, const Plan *pl)
{
    fprintf(out, "host plan of %s: model %s, mode %s\n", pl->source_name, pl->p->model_name,
            plan_mode_name(pl->mode));
    fprintf(out, "%d kernels, %d buffers\n\nbuffers (bytes with the symbols at their maxima; views take none):\n",
            pl->nkernels, pl->nbuffers);
    for (int i = 0; i < pl->nbuffers; i++) print_buffer(out, pl, i);
    for (int g = 0; g < PG_NUM; g++) {
        const PlanGraph *pg = &pl->graph[g];
        if (!pg->ir) continue;
        fprintf(out, "\ngraph %s: %d steps\n", codegen_graph_label[g], pg->nsteps);
        print_collectives(out, pl, pg, -1);
        for (int s = 0; s < pg->nsteps; s++) {
            const PlanStep *st = &pg->steps[s];
            fprintf(out, "  %3d  %s", s + 1, st->what);
            if (st->group) fprintf(out, "  (fusion group %d)", st->group);
            if (st->loc.line > 0) fprintf(out, "  (line %d)", st->loc.line);
            fprintf(out, "\n       ");
            if (st->kind == STEP_GEMM) print_gemm(out, pl, &st->gemm);
            else print_launch(out, pl, &st->launch);
            print_window(out, pl, (PlanGraphId)g, s);
            print_collectives(out, pl, pg, s);
            int run = plan_mlp_at(pl, (PlanGraphId)g, s);
            if (run < 0) continue;
            const PlanMlp *m = &pl->mlps[run];
            fprintf(out, "       steps");
            for (int j = 0; j < m->nlayers; j++)
                fprintf(out, "%s%d", j == 0 ? " " : j + 1 < m->nlayers ? ", " : " and ", m->step[j] + 1);
            fprintf(out, " or one fused MLP %s kernel (max-autotune's candidates):",
                    m->backward ? "backward" : "forward");
            for (int k = 0; k < PLAN_MLP_SHAPES; k++)
                fprintf(out, "%s %s", k ? "," : "", pl->kernels[pl->mlps[run].kernel[k]].name);
            fputc('\n', out);
        }
    }
    fprintf(out, "\ndata pipeline kernels:");
    for (int i = 0; i < PDK_NUM; i++) fprintf(out, " %s", pl->kernels[pl->data_kernel[i]].name);
    fputc('\n', out);
}

/* ---- --emit DIR ---- */

/* mkdir -p DIR. Returns 0, or -1 after an error naming the directory. */
static int make_dirs(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        cgc_error("%s: the --emit directory's name is too long", diag_quote(dir, 60));
        return -1;
    }
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            cgc_error("%s: cannot create the directory: %s (check the --emit path)", path, strerror(errno));
            return -1;
        }
        *p = c;
        if (c == '\0') break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        cgc_error("%s: exists and is not a directory; give --emit a directory", dir);
        return -1;
    }
    return 0;
}

/* DIR/NAME, an output (base/outfile.h) of PATH's buffer of N bytes, opened in *O. */
static int open_in(const char *dir, const char *name, char *path, size_t n, OutFile *o)
{
    if (snprintf(path, n, "%s/%s", dir, name) >= (int)n) {
        cgc_error("cannot %s %s/%s: the name is too long", PLAN_EMIT_ROLE, diag_quote(dir, 60),
                  name);
        return -1;
    }
    return out_open(o, PLAN_EMIT_ROLE, path, &out_generated);
}

static int write_text(const char *dir, const char *name, const char *a, const char *b)
{
    char path[4352];
    OutFile o;
    if (open_in(dir, name, path, sizeof path, &o) != 0) return -1;
    fputs(a, o.f);
    if (b) fputs(b, o.f);
    return out_close(&o);
}

/* DIR/repro: the module again (and the generated kernels' module when CHOICES use it),
 * and the reproducer that replays the step (codegen/repro.c). */
static int emit_repro(const Plan *plan, const char *dir, const char *module, const PlanChoices *choices,
                      int arch)
{
    char sub[4352], path[4480];
    snprintf(sub, sizeof sub, "%s/repro", dir);
    if (make_dirs(sub) != 0 || write_text(sub, "module.cu", module, NULL) != 0) return -1;
    if (plan_repro_uses_gemm_module(plan, choices)) {
        char *gemm_module = plan_gemm_module_source(plan);
        int rc = write_text(sub, "gemm_module.cu", gemm_module, NULL);
        free(gemm_module);
        if (rc != 0) return -1;
    }
    OutFile o;
    if (open_in(sub, "repro.c", path, sizeof path, &o) != 0) return -1;
    plan_write_repro(o.f, plan, choices);
    if (out_close(&o) != 0 || open_in(sub, "Makefile", path, sizeof path, &o) != 0) return -1;
    plan_write_repro_makefile(o.f, plan, choices, arch);
    return out_close(&o);
}

int plan_emit(const Plan *plan, const char *dir, const PlanChoices *choices, int arch)
{
    if (make_dirs(dir) != 0) return -1;
    if (write_text(dir, "cgc_device.h", plan_device_prelude, NULL) != 0) return -1;
    for (int k = 0; k < plan->nkernels; k++) {
        char name[160];
        snprintf(name, sizeof name, "%s.cu", plan->kernels[k].name);
        if (write_text(dir, name, "#include \"cgc_device.h\"\n\n", plan->kernels[k].source) != 0)
            return -1;
    }
    char *module = plan_module_source(plan);
    int rc = write_text(dir, "module.cu", module, NULL);
    if (rc == 0 && plan->graph[PG_TRAIN].ir) rc = emit_repro(plan, dir, module, choices, arch);   /* a step to replay */
    free(module);
    if (rc != 0) return -1;
    char path[4352];
    OutFile o;
    if (open_in(dir, "host_plan.txt", path, sizeof path, &o) != 0) return -1;
    plan_print(o.f, plan);
    return out_close(&o);
}

/* ---- the emulation's thunks ---- */

void plan_emit_emu_thunks(FILE *out, const Plan *plan)
{
    fprintf(out, "/* thunks: the CUDA emulation calls kernel NAME as cgc_emu_thunk_NAME(args),\n"
                 " * args[i] pointing at parameter i's value (cuLaunchKernel's kernelParams);\n"
                 " * cgc_emu_argbytes_NAME lists the parameters' sizes, then 0 (what a graph\n"
                 " * capture copies); cgc_emu_noalias_NAME says of each parameter 2 (a\n"
                 " * __restrict__ pointer written), 1 (one read) or 0 (neither), so that a\n"
                 " * launch aliasing them fails; cgc_emu_block_NAME is its __launch_bounds__,\n"
                 " * which no launch may pass; cgc_emu_slots_NAME, of a kernel whose parameters\n"
                 " * are slots (plan.h), their count: args[0] points at their values, and the\n"
                 " * tables above describe the slots */\n");
    for (int k = 0; k < plan->nkernels; k++) {
        const PlanKernel *kn = &plan->kernels[k];
        fprintf(out, "extern \"C\" void cgc_emu_thunk_%s(void **args)\n{\n    %s(", kn->name, kn->name);
        if (kn->packed)
            fprintf(out, "cgc_slots<%d>{(const uint64_t *)args[0]}", kn->nparams);
        for (int i = 0; i < kn->nparams && !kn->packed; i++)
            fprintf(out, "%s*(%s *)args[%d]", i ? ", " : "", kn->param_ctype[i], i);
        fprintf(out, ");\n}\n");
        if (kn->packed) fprintf(out, "extern \"C\" const unsigned cgc_emu_slots_%s = %d;\n", kn->name, kn->nparams);
        fprintf(out, "extern \"C\" const unsigned char cgc_emu_argbytes_%s[] = {", kn->name);
        for (int i = 0; i < kn->nparams; i++) fprintf(out, "sizeof(%s), ", kn->param_ctype[i]);
        fprintf(out, "0};\n");
        fprintf(out, "extern \"C\" const unsigned char cgc_emu_noalias_%s[] = {", kn->name);
        for (int i = 0; i < kn->nparams; i++) {
            fprintf(out, "%d, ", !kn->param_restrict[i] ? 0 : plan_param_written(kn->param_ctype[i]) ? 2 : 1);
        }
        fprintf(out, "0};\n");
        fprintf(out, "extern \"C\" const unsigned cgc_emu_block_%s = %d;\n", kn->name, kn->block);
    }
}
