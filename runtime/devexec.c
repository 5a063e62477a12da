/* devexec.c: placeholder until the plan runner lands. */
#include "devexec.h"
