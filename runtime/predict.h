/* predict.h: a trained model's outputs for new inputs (--predict).
 *
 * The program is inference_lower's (compiler/inference.c): the evaluation graph's
 * prediction alone, dropout off, batch norm on its running statistics. The weights come
 * from a checkpoint, the inputs from a file data.c reads (data_load_inputs), and the
 * outputs, row for row, go to an .npy array or a safetensors file (the output under its
 * binding's name and, for a classifier, each row's class as "class", i32). Rows run in
 * batches of the train block's batch, on the CPU reference executor or on a device, and
 * each batch's outputs are written as it ends: only the classes are held to the end.
 */
#ifndef CGC_PREDICT_H
#define CGC_PREDICT_H

#include "../base/diag.h"
#include "../base/outfile.h"
#include "../compiler/ir.h"
#include "data.h"
#include "device.h"

#define PREDICT_OUT_ROLE "write the predictions to"   /* --out's role as an output (outfile.h) */

typedef struct PredictOptions {
    const char *input;          /* the file of inputs */
    const char *out;            /* .npy or .safetensors */
    Device *device;             /* NULL: the CPU reference executor */
    const Plan *plan;           /* the device's: its arena for symbols up to SYMMAX */
    const int64_t *symmax;
    const char *net_path;
    bool quiet;
} PredictOptions;

/* The kind of output PATH's name asks for (outfile.h): .npy or .safetensors; else NULL. */
const OutKind *predict_out_kind(const char *path);

/* The prediction for D's rows (its features), on O's device (NULL: the CPU reference
 * executor) from TENSORS (host f32, every tensor of P), into OUT: D->n times
 * predict_row_values(P) floats. 0, or -1 after an error. */
int predict_values(const IrProgram *p, const PredictOptions *o, float *const *tensors,
                   const Dataset *d, float *out);
int64_t predict_row_values(const IrProgram *p);

/* P's weights from the checkpoint WEIGHTS, its outputs for O->input's rows to O->out. 0,
 * or -1 after an error (SRC: P's source). */
int predict_run(const IrProgram *p, Source *src, const char *weights, const PredictOptions *o);

#endif
