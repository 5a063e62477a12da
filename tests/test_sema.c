/* test_sema.c: what sema builds, beyond what the golden files show: the TrainConfig each
 * train-key form produces (defaults, folding, units, optimizer resets, steps without
 * epochs, from the file or a flag), sema_train_entry and sema_train_lr on a command-line
 * value, the program tables (classes, labels input, dropout keyed by the runtime's
 * micro-step), name lookup in a model of many bindings, and Source's line index. */
#include <stdlib.h>

#include "../compiler/passes.h"
#include "check.h"

static const char model_text[] =
    "model m {\n"
    "    input x: f32[N, 784]\n"
    "    input y: i32[N]\n"
    "    h = dropout(relu(linear(x, 32)), 0.5)\n"
    "    logits = linear(h, 10)\n"
    "    output logits\n"
    "    loss cross_entropy(logits, y)\n"
    "}\n";

/* Checks MODEL_TEXT followed by TRAIN; NULL when sema (or the parser) reported errors. */
static IrProgram *check_text(const char *train)
{
    char text[4096];
    snprintf(text, sizeof text, "%s%s", model_text, train);
    Source *src = source_from_string("test.net", text, strlen(text));
    AstFile *file = parse_file(src);
    IrProgram *p = file ? sema_check(src, file) : NULL;
    ast_free(file);
    source_free(src);
    return p;
}

/* Applies KEY = VALUE as the CLI does (the value is its own source); KEY "lr" is --lr. */
static int apply(IrProgram *p, const char *key, const char *value)
{
    Source *src = source_from_string("--flag", value, strlen(value));
    AstExpr *e = parse_value(src);
    int rc = -1;
    if (e && strcmp(key, "lr") == 0) rc = sema_train_lr(src, p, e);
    else if (e) rc = sema_train_entry(src, p, key, (SrcLoc){1, 1}, e);
    ast_expr_free(e);
    source_free(src);
    return rc;
}

static void test_defaults_and_tables(void)
{
    IrProgram *p = check_text("");
    CHECK(p != NULL);
    if (!p) return;
    CHECK(!p->cfg.has_train_block);
    CHECK_EQ_INT(p->cfg.batch, 64);
    CHECK_EQ_INT(p->cfg.epochs, 1);
    CHECK_EQ_INT(p->cfg.optimizer, OPT_ADAMW);
    CHECK_EQ_INT(p->num_classes, 10);
    CHECK_EQ_INT(p->prediction_input_labels, 1);
    CHECK_EQ_INT(p->nparams, 4);
    CHECK_EQ_INT(p->ntensors, 4);
    if (p->ntensors == 4) {
        CHECK_STR(p->tensors[0].name, "h.weight");
        CHECK_STR(p->tensors[3].name, "logits.bias");
        CHECK_CLOSE(p->tensors[0].init_value, 1 / 28.0, 0, 1e-12);
    }
    int dropouts = 0;
    for (int i = 0; i < p->forward.nnodes; i++) {
        const IrNode *n = &p->forward.nodes[i];
        if (n->op != IR_DROPOUT) continue;
        const IrNode *counter = &p->forward.nodes[n->in[1]];
        CHECK_EQ_INT(counter->op, IR_RUNTIME);
        CHECK_EQ_INT(counter->index, IR_RT_MICRO_STEP);
        dropouts++;
    }
    CHECK_EQ_INT(dropouts, 1);
    CHECK(p->forward.output[IR_OUT_LOSS] >= 0);
    CHECK(p->forward.output[IR_OUT_PREDICTION] >= 0);
    CHECK_STR(p->model_name, "m");
    ir_program_free(p);
}

static void test_train_block(void)
{
    IrProgram *p = check_text("train {\n"
                              "    data = idx(\"fashion-mnist\", scale = 1/255)\n"
                              "    batch = 2 * 64\n"
                              "    steps = 100\n"
                              "    shuffle = false\n"
                              "    optimizer = sgd(0.1, momentum = 0.9, nesterov = true)\n"
                              "    schedule = step(every = 10)\n"
                              "    precision = bf16\n"
                              "    accumulate = 4\n"
                              "    clip_norm = 0.5\n"
                              "    checkpoint = auto\n"
                              "    memory = 1.5GB\n"
                              "    seed = 7\n"
                              "}\n");
    CHECK(p != NULL);
    if (!p) return;
    TrainConfig *c = &p->cfg;
    sema_train_finish(c);
    CHECK(c->has_train_block);
    CHECK_EQ_INT(c->data, DATA_IDX);
    CHECK_STR(c->data_dir, "fashion-mnist");
    CHECK_CLOSE(c->data_scale, 1 / 255.0, 0, 1e-15);
    CHECK_EQ_INT(c->data_loc.line, 10);
    CHECK_EQ_INT(c->batch, 128);
    CHECK_EQ_INT(c->steps, 100);
    CHECK_EQ_INT(c->epochs, 0);          /* steps alone limits the run */
    CHECK(!c->shuffle);
    CHECK(c->drop_last);
    CHECK_EQ_INT(c->optimizer, OPT_SGD);
    CHECK_CLOSE(c->lr, 0.1, 0, 0);
    CHECK_CLOSE(c->momentum, 0.9, 0, 0);
    CHECK(c->nesterov);
    CHECK_CLOSE(c->weight_decay, 0, 0, 0);
    CHECK_EQ_INT(c->schedule, SCHED_STEP);
    CHECK_EQ_INT(c->step_every, 10);
    CHECK_CLOSE(c->gamma, 0.1, 0, 0);
    CHECK_EQ_INT(c->precision, PREC_BF16);
    CHECK_EQ_INT(c->accumulate, 4);
    CHECK_CLOSE(c->clip_norm, 0.5, 0, 0);
    CHECK_EQ_INT(c->checkpoint, CKPT_AUTO);
    CHECK_EQ_INT(c->memory, 1610612736);
    CHECK_EQ_INT(c->seed, 7);

    /* Command-line overrides: a new optimizer replaces every optimizer setting. */
    CHECK_EQ_INT(apply(p, "optimizer", "adam"), 0);
    CHECK_EQ_INT(c->optimizer, OPT_ADAM);
    CHECK_CLOSE(c->lr, 1e-3, 0, 0);
    CHECK_CLOSE(c->momentum, 0, 0, 0);
    CHECK(!c->nesterov);
    CHECK_CLOSE(c->beta2, 0.999, 0, 0);
    CHECK_EQ_INT(apply(p, "optimizer", "adamw(lr = 3e-4)"), 0);
    CHECK_CLOSE(c->weight_decay, 0.01, 0, 0);
    CHECK_CLOSE(c->lr, 3e-4, 0, 0);
    CHECK_EQ_INT(apply(p, "memory", "512MB"), 0);
    CHECK_EQ_INT(c->memory, 512 * 1024 * 1024);
    CHECK_EQ_INT(apply(p, "memory", "64KB"), 0);
    CHECK_EQ_INT(c->memory, 65536);
    CHECK_EQ_INT(apply(p, "schedule", "cosine(warmup = 5, min_lr = 1e-5)"), 0);
    CHECK_EQ_INT(c->schedule, SCHED_COSINE);
    CHECK_EQ_INT(c->warmup, 5);
    CHECK_EQ_INT(apply(p, "data", "synthetic(samples = 100)"), 0);
    CHECK_EQ_INT(c->data, DATA_SYNTHETIC);
    CHECK_EQ_INT(c->synthetic_samples, 100);
    CHECK_EQ_INT(apply(p, "drop_last", "false"), 0);
    CHECK(!c->drop_last);

    /* A rejected value reports (counted, whatever its source) and leaves the setting alone. */
    fprintf(stderr, "(two expected diagnostics follow)\n");
    int errors = diag_error_count();
    CHECK_EQ_INT(apply(p, "batch", "0"), -1);
    CHECK_EQ_INT(c->batch, 128);
    CHECK_EQ_INT(apply(p, "optimizer", "sgd(momentum = 0.5)"), -1);
    CHECK_EQ_INT(c->optimizer, OPT_ADAMW);
    CHECK_EQ_INT(diag_error_count(), errors + 2);
    ir_program_free(p);
}

/* TRAIN checked, the flags (KEY, VALUE pairs, NULL-terminated) applied, then the rules
 * that relate keys: what the command line does. NULL when anything was refused. */
static IrProgram *check_with_flags(const char *train, const char *const *flags)
{
    IrProgram *p = check_text(train);
    if (!p) return NULL;
    for (int i = 0; flags[i]; i += 2) {
        if (apply(p, flags[i], flags[i + 1]) != 0) {
            ir_program_free(p);
            return NULL;
        }
    }
    sema_train_finish(&p->cfg);
    return p;
}

/* epochs and steps: `steps` without `epochs` means steps alone limit the run (epochs 0),
 * whether each came from the file or from a flag; with both, whichever ends first. */
static void test_epochs_and_steps(void)
{
    static const struct {
        const char *train;
        const char *flags[5];
        int64_t epochs, steps;
    } cases[] = {
        {"train {\n    epochs = 3\n    steps = 10\n}\n", {NULL}, 3, 10},
        {"train {\n    steps = 10\n}\n", {NULL}, 0, 10},
        {"train {\n    batch = 64\n}\n", {"steps", "10", NULL}, 0, 10},
        {"train {\n    epochs = 3\n}\n", {"steps", "10", NULL}, 3, 10},
        {"train {\n    steps = 10\n}\n", {"epochs", "2", NULL}, 2, 10},
        {"train {\n    batch = 64\n}\n", {NULL}, 1, 0},
        /* Without a train block: one step, unless a flag says otherwise. */
        {"", {NULL}, 0, 1},
        {"", {"steps", "5", NULL}, 0, 5},
        {"", {"epochs", "2", NULL}, 2, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        IrProgram *p = check_with_flags(cases[i].train, cases[i].flags);
        CHECK(p != NULL);
        if (!p) continue;
        if (p->cfg.epochs != cases[i].epochs || p->cfg.steps != cases[i].steps)
            fprintf(stderr, "case %zu:\n", i);
        CHECK_EQ_INT(p->cfg.epochs, cases[i].epochs);
        CHECK_EQ_INT(p->cfg.steps, cases[i].steps);
        ir_program_free(p);
    }
}

/* --lr is the optimizer's lr argument: a folded constant > 0, no other number forms. */
static void test_lr_flag(void)
{
    IrProgram *p = check_text("train {\n    optimizer = sgd(0.5)\n}\n");
    CHECK(p != NULL);
    if (!p) return;
    CHECK_EQ_INT(apply(p, "lr", "1/1000"), 0);
    CHECK_CLOSE(p->cfg.lr, 1e-3, 0, 0);
    CHECK_EQ_INT(apply(p, "lr", "2 * 0.05"), 0);
    CHECK_CLOSE(p->cfg.lr, 0.1, 0, 0);
    CHECK_EQ_INT(p->cfg.optimizer, OPT_SGD);
    fprintf(stderr, "(three expected diagnostics follow)\n");
    CHECK_EQ_INT(apply(p, "lr", "0x10"), -1);
    CHECK_EQ_INT(apply(p, "lr", "-1"), -1);
    CHECK_EQ_INT(apply(p, "lr", "adam"), -1);
    CHECK_CLOSE(p->cfg.lr, 0.1, 0, 0);
    ir_program_free(p);
}

/* Names resolve the same however many there are: a chain of 300 bindings (the table grows
 * several times), then one bound twice. */
static void test_many_bindings(void)
{
    enum { N = 300 };
    size_t cap = 64 * N, len = 0;
    char *text = malloc(cap);
    len += (size_t)snprintf(text + len, cap - len, "model m {\n    input x: f32[N, 4]\n"
                                                   "    h0 = x * 1\n");
    for (int i = 1; i < N; i++)
        len += (size_t)snprintf(text + len, cap - len, "    h%d = h%d * 1\n", i, i - 1);
    size_t body = len;
    const char *const endings[] = {
        "    output h299\n    loss mean(h0 + h150 + h299)\n}\n",
        "    h7 = x\n    output h299\n    loss mean(h299)\n}\n",
    };
    for (int k = 0; k < 2; k++) {
        snprintf(text + body, cap - body, "%s", endings[k]);
        Source *src = source_from_string("many.net", text, strlen(text));
        AstFile *file = parse_file(src);
        CHECK(file != NULL);
        if (k == 1) fprintf(stderr, "(one expected diagnostic and its note follow)\n");
        IrProgram *p = file ? sema_check(src, file) : NULL;
        CHECK_EQ_INT(p != NULL, k == 0);
        CHECK_EQ_INT(src->nerrors, k);
        ir_program_free(p);
        ast_free(file);
        source_free(src);
    }
    free(text);
}

/* source_line_start finds every line, the empty ones and the one after a final newline
 * included, and no line that is not there. */
/* embedding's std is the standard deviation of its table's normal initialisation. */
static void test_embedding_std(void)
{
    static const char text[] =
        "model m {\n"
        "    input x: i32[N, 8]\n"
        "    input y: i32[N, 8]\n"
        "    tok = embedding(x, 64, 16, std = 0.02)\n"
        "    pos = embedding(arange(8), 8, 16)\n"
        "    logits = linear(tok + pos, 64)\n"
        "    output logits\n"
        "    loss cross_entropy(logits, y)\n"
        "}\n";
    Source *src = source_from_string("std.net", text, sizeof text - 1);
    AstFile *file = parse_file(src);
    IrProgram *p = file ? sema_check(src, file) : NULL;
    CHECK(p != NULL && p->ntensors >= 2);
    for (int i = 0; p && i < p->ntensors; i++) {
        const IrTensor *t = &p->tensors[i];
        if (strcmp(t->name, "tok.weight") == 0) CHECK(t->init == IR_INIT_NORMAL && t->init_value == 0.02);
        if (strcmp(t->name, "pos.weight") == 0) CHECK(t->init == IR_INIT_NORMAL && t->init_value == 1.0);
    }
    ir_program_free(p);
    ast_free(file);
    source_free(src);
}

static void test_source_lines(void)
{
    Source *src = source_from_string("lines.net", "a\nbb\n\nccc\n", 10);
    CHECK(source_line_start(src, 0) == NULL);
    CHECK(source_line_start(src, 1) == src->text);
    CHECK(source_line_start(src, 2) == src->text + 2);
    CHECK(source_line_start(src, 3) == src->text + 5);
    CHECK(source_line_start(src, 4) == src->text + 6);
    CHECK(source_line_start(src, 5) == src->text + 10);
    CHECK(source_line_start(src, 6) == NULL);
    source_free(src);
    src = source_from_string("empty.net", "", 0);
    CHECK(source_line_start(src, 1) == src->text);
    CHECK(source_line_start(src, 2) == NULL);
    source_free(src);
}

static void test_errors_return_null(void)
{
    fprintf(stderr, "(one expected diagnostic follows)\n");
    CHECK(check_text("train {\n    batch = -1\n}\n") == NULL);
}

/* Every did-you-mean in cgc goes through diag_closest: a swap of two adjacent letters is
 * one edit, like a wrong, missing or extra letter; a third of the name is the most a
 * typo may change. */
static void test_closest(void)
{
    static const char *const keys[] = {"batch", "epochs", "steps", "seed", "lr", NULL};
    CHECK_STR(diag_closest("bacth", keys), "batch");
    CHECK_STR(diag_closest("BATCH", keys), "batch");
    CHECK_STR(diag_closest("epohcs", keys), "epochs");
    CHECK_STR(diag_closest("sede", keys), "seed");
    CHECK_STR(diag_closest("rl", keys), "lr");
    CHECK_STR(diag_closest("step", keys), "steps");
    CHECK(diag_closest("abthc", keys) == NULL);    /* two swaps in five letters */
    CHECK(diag_closest("momentum", keys) == NULL);
}

int main(void)
{
    test_closest();
    test_defaults_and_tables();
    test_train_block();
    test_epochs_and_steps();
    test_lr_flag();
    test_many_bindings();
    test_embedding_std();
    test_source_lines();
    test_errors_return_null();
    return check_result();
}
