/* data.h: training data: IDX files (plain or gzip), text files, synthetic data, order
 * and batches.
 *
 * An IDX or synthetic dataset is held whole in memory as f32 features (already scaled)
 * or i32 tokens, and labels (i32 class ids, or f32 targets), one row per sample. A
 * tensors(...) dataset stays in its files, mapped (an archive's compressed members
 * inflated, in their own types), checked whole once and converted a row at a time as
 * batches are gathered, so that data larger than memory trains; a CSV table's rows are
 * converted to f32 once, into temporary files (arrays.h), and used likewise. A text
 * dataset is the file's bytes, mapped: its samples are windows of context + 1 bytes, the
 * first context bytes the features and the last context the labels, read from the
 * mapping when a batch is gathered. Batches are gathered from a seeded order; the order
 * of epoch E, and where the text's windows start in it (data_phase), are pure functions
 * of (seed, E), so a resumed run only needs the epoch and its position in it.
 */
#ifndef CGC_DATA_H
#define CGC_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "../compiler/ir.h"
#include "arrays.h"

typedef struct Dataset {
    int64_t n;                  /* samples */
    int64_t x_row;              /* features per sample */
    float *x;                   /* n * x_row, unless x_int */
    bool x_int;                 /* features are tokens (int32), for an embedding */
    int32_t *x_i32;             /* n * x_row when x_int */
    int64_t y_row;              /* labels per sample: 0 when the model has one input */
    bool y_int;                 /* labels are class ids (int32) rather than f32 */
    int32_t *y_i32;             /* n * y_row when y_int */
    float *y_f32;               /* n * y_row otherwise */
    const uint8_t *text;        /* text: the split's bytes (in DataSplits' mapping), else NULL */
    int64_t text_bytes;         /* text: how many */
    int64_t window;             /* text: a sample's bytes, x_row + 1; sample i of an epoch of
                                 * phase P starts at P + i * window */
    const Array *x_file;        /* tensors(...), csv(...): the features left in their file
                                 * (mapped) or archive, converted as rows are gathered (x NULL): rows
                                 * first .. first + n - 1 of it */
    const Array *y_file;        /* the labels likewise, or NULL */
    int64_t first;
    double scale;               /* x_file's integers are multiplied by it */
} Dataset;

typedef struct DataSplits {
    Dataset train;
    Dataset test;
    bool has_test;
    char *description;          /* "fashion-mnist: 60000 train, 10000 test (/usr/share/...)" */
    void *map;                  /* text: the file, mapped */
    size_t map_bytes;
    ArraySet *arrays[2];        /* tensors(...): the train and test files' arrays */
} DataSplits;

/* Loads the data P->cfg asks for, shaped for P's inputs (input 0: features, input 1:
 * labels). NET_PATH is the .net file (relative IDX directories are looked up beside it,
 * then in each directory of $CGC_DATA_PATH, then in /usr/share/datasets). Every problem
 * is reported as "cgc: error: FILE: what is wrong" (or at the `data` entry of the .net
 * file when the directory is not found); returns 0, or -1 after reporting. SRC may be
 * NULL in tests. */
int data_load(const IrProgram *p, Source *src, const char *net_path, DataSplits *out);
/* Text feeds two i32[N, T] inputs, T the context: a window's first T bytes to an
 * embedding of at least 256 rows, its last T to a loss of at least 256 classes. 0, or -1
 * after an error at the input that does not fit (SRC: the model's source). */
int data_check_text_inputs(const IrProgram *p, Source *src);
void data_free(DataSplits *d);
/* The first input's values for prediction from PATH, into OUT->train (features only): a CSV
 * table (a .csv name; the train block's label column left out where it has one), an .npy
 * array, or the array named as the input in an .npz, a safetensors file or a directory.
 * 0, or -1 after an error. */
int data_load_inputs(const IrProgram *p, Source *src, const char *path, DataSplits *out);

/* Reads one IDX file (gzip or plain: zlib decides). Validates magic, type byte (only
 * unsigned byte data, 0x08), rank, that the dimensions' product fits and that the file
 * holds exactly that many bytes. On success DIMS and RANK describe it and BYTES (malloc'd)
 * the values. Returns 0, or -1 after "cgc: error: PATH: what is wrong". A rank past
 * IDX_MAX_RANK is such an error. */
enum { IDX_MAX_RANK = 4 };
int idx_read(const char *path, int *rank, int64_t dims[IDX_MAX_RANK], uint8_t **bytes);

/* The order of epoch EPOCH: a permutation of 0..n-1 (Fisher-Yates on rng.h's
 * RNG_SHUFFLE stream), or the identity when !shuffle. */
void data_order(uint64_t seed, int64_t epoch, bool shuffle, int64_t n, int64_t *order);

/* Where epoch EPOCH's text windows start: a position below D's window drawn from the seed
 * (RNG_TEXT), so that over the epochs every position of the text starts a sample; 0 for
 * other data. */
int64_t data_phase(const Dataset *d, uint64_t seed, int64_t epoch);

/* Rows [*FIRST, *FIRST + *COUNT) of a micro-batch of COUNT rows from FIRST, which rank
 * RANK of RANKS takes: a contiguous share, the first ranks one row fewer when the rows do
 * not divide evenly. */
void data_rank_rows(int rank, int ranks, int64_t *first, int64_t *count);

/* Copies rows ORDER[start .. start+count) into X (count * x_row floats, or int32 when
 * x_int) and Y (count * y_row int32 or floats; may be NULL when y_row == 0), text windows
 * starting at PHASE. ORDER NULL: rows start .. start+count in file order (evaluation). */
void data_gather(const Dataset *d, const int64_t *order, int64_t start, int64_t count,
                 int64_t phase, void *x, void *y);

#endif
