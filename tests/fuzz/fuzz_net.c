/* fuzz_net.c: a libFuzzer target (scripts/fuzz.sh) for everything cgc does with a .net
 * file short of NVRTC and training: the lexer and parser, sema, the passes, the plan
 * and the kernel source of every mode. An input may be refused with diagnostics; it may
 * not crash, abort on an internal error, leak under ASan or trip UBSan. */
#include <stddef.h>
#include <stdint.h>

#include "../../base/diag.h"
#include "../../driver/compile.h"
#include "../../driver/pipeline.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const PlanMode modes[] = { PLAN_EAGER, PLAN_DEFAULT, PLAN_REDUCE_OVERHEAD,
                                      PLAN_MAX_AUTOTUNE };
    Source *src = source_from_string("fuzz.net", (const char *)data, size);
    IrProgram *p = pipeline_compile(src, NULL, 0);
    if (p) {
        /* the mode from the input's length, so that the corpus covers all four */
        CompileOptions co = { .mode = modes[size % 4], .net_path = "fuzz.net", .quiet = true };
        Compiled c;
        compile_program(p, &co, &c);
        compiled_free(&c);
        ir_program_free(p);
    }
    source_free(src);
    return 0;
}
