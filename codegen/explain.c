/* codegen/explain.c: --stats and --explain. Skeleton. */
#include "compile.h"

void compiled_write_stats(const Compiled *c, FILE *out) { (void)c, (void)out; }
void compiled_explain(const Compiled *c, FILE *out) { (void)c, (void)out; }
