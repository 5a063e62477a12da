/* fuzz_tune.c: a libFuzzer target (scripts/fuzz.sh) for the autotune choices file, what
 * --tune-file and the cache's tune/ entries hold (runtime/tune.h): the parser, then the
 * check of every choice against a real plan (models/mlp.net in max-autotune, whose
 * GEMMs, kernels and fused MLP run each need one) as a run does before using them.
 *
 * Beyond "no crash, no leak, no undefined behaviour", a file the parser accepts must
 * survive a round trip: formatted and parsed again it is accepted, and formats to the
 * same text (so what cgc writes is what it reads). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/diag.h"
#include "../../driver/compile.h"
#include "../../driver/pipeline.h"
#include "../../runtime/autotune.h"
#include "../../runtime/tune.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static Source *src;             /* what the plan was made from, kept for the process */
static IrProgram *program;
static Compiled compiled;
static int64_t symvals[IR_MAX_SYMBOLS];

/* The plan the choices are checked against, made once. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    src = source_load(CGC_MODELS_DIR "/mlp.net");
    program = src ? pipeline_compile(src, NULL, 0) : NULL;
    CompileOptions co = { .mode = PLAN_MAX_AUTOTUNE, .net_path = "mlp.net", .quiet = true };
    if (!program || compile_program(program, &co, &compiled) != 0 || !compiled.plan) {
        fprintf(stderr, "fuzz_tune: cannot compile %s/mlp.net\n", CGC_MODELS_DIR);
        exit(1);
    }
    symvals[0] = program->cfg.batch;
    return 0;
}

/* Formatted, T parses again to the same text. */
static void round_trip(const TuneFile *t)
{
    char *text = tune_format(t), why[256];
    TuneFile again;
    if (!text || !tune_parse(text, strlen(text), &again, why, sizeof why)) {
        fprintf(stderr, "fuzz_tune: cgc refuses its own file (%s):\n%s", why, text ? text : "");
        abort();
    }
    char *text2 = tune_format(&again);
    if (!text2 || strcmp(text, text2) != 0) {
        fprintf(stderr, "fuzz_tune: formatted twice, different:\n%s---\n%s", text, text2);
        abort();
    }
    free(text2);
    free(text);
    tune_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    TuneFile t;
    char why[512];
    if (!tune_parse((const char *)data, size, &t, why, sizeof why)) return 0;
    round_trip(&t);
    PlanChoices c;
    for (int arch = 75; arch <= 90; arch += 15)   /* a generated kernel needs sm_80 */
        if (autotune_resolve(compiled.plan, symvals, arch, &t, &c, why, sizeof why) == 0)
            plan_choices_free(&c);
    tune_free(&t);
    return 0;
}
