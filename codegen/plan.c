/* plan.c: placeholder until the eager plan lands. */
#include "plan.h"
