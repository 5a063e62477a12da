/* generate.h: text from a byte model (--generate, and the sample after each epoch of a
 * text run).
 *
 * A model that trains on text(...) reads a window of T bytes and predicts, at every
 * position, the next. Generation feeds it the context (the prompt, then what it has
 * sampled, from position 0, so that a causal model sees what it saw in training) and
 * samples the next byte from its prediction at the context's last position, over and
 * over, on the CPU reference executor or on a device (the plan's kernels). With the
 * program's decode graph (compiler/decode.c) each byte runs one position, the earlier
 * ones' keys and values in its caches; a full context restarts from its last T/2 bytes.
 * Without one (the per-epoch sample, a model the cut cannot take), each byte runs the
 * evaluation graph over the whole window, its last T bytes.
 */
#ifndef CGC_GENERATE_H
#define CGC_GENERATE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../base/diag.h"
#include "../compiler/ir.h"
#include "devexec.h"

typedef struct GenerateOptions {
    const char *prompt;     /* the bytes to continue; empty: a newline */
    int64_t tokens;         /* bytes to sample */
    double temperature;     /* > 0: the logits divided by it; 0: the likeliest byte */
    int64_t top_k;          /* sample among the K likeliest bytes; 0: among all 256 */
    uint64_t seed;          /* draw i is rng_uniform(seed, RNG_SAMPLE, first_draw + i) */
    uint64_t first_draw;
    const char *logits_path;   /* or NULL: GENERATE_LOGITS_ROLE's .npy, f32 [tokens, 256],
                                * row i the logits byte i was drawn from */
} GenerateOptions;

#define GENERATE_LOGITS_ROLE "write the logits to"   /* its role as an output (outfile.h) */

/* Writes O->prompt, then O->tokens bytes sampled after it, to OUT, one at a time as each
 * is drawn; the model's tensors are TENSORS (host f32, every persistent tensor of P).
 * ESCAPE: bytes other than printable ASCII, newline and tab written as '?'. 0, or -1 after an error. */
int generate_text(const IrProgram *p, float *const *tensors, const GenerateOptions *o, bool escape,
                  FILE *out);

/* generate_text with the tensors on a device: DEV's, its plan's evaluation graph running
 * the window (at batch 1). */
int generate_text_device(const IrProgram *p, DevExec *dev, const GenerateOptions *o, bool escape,
                         FILE *out);

/* Where generate_run runs: DEVICE, with PLAN's arena for symbols up to SYMMAX (NET_PATH
 * names the .net file in errors). */
typedef struct GenerateDevice {
    Device *device;
    const Plan *plan;
    const int64_t *symmax;
    const char *net_path;
} GenerateDevice;

/* P's tensors from the checkpoint PATH, then generate_text to stdout, on D (NULL: the CPU
 * reference executor). P trains on text(...); its inputs are checked as the data's are
 * (SRC: P's source). */
int generate_run(const IrProgram *p, Source *src, const char *path, const GenerateOptions *o,
                 const GenerateDevice *d);

#endif
