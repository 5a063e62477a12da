/* compiler/fusion.c: fusion groups (see ir.h, IrGroup). Skeleton: no groups yet. */
#include "passes.h"

void fusion_assign(IrProgram *p)
{
    (void)p;
}
