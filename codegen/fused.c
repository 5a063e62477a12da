/* codegen/fused.c: renders fusion groups. Skeleton. */
#include "codegen_impl.h"
