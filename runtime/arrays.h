/* arrays.h: named arrays from a user's files: a safetensors file, a NumPy .npz archive
 * (np.savez, stored or compressed), or a directory of .npy files, one per name.
 *
 * Every field is checked against the file's real size before it is trusted: a header that
 * claims more data than the file holds, an archive member that would inflate past what
 * deflate can give from its bytes, a damaged member (its CRC-32), Fortran order, a
 * big-endian dtype, a type NumPy has but cgc does not read: each is an error naming the
 * file (and the member) and what is wrong. Files are mapped, not read; an archive's
 * compressed members are inflated, the others are used in place.
 */
#ifndef CGC_ARRAYS_H
#define CGC_ARRAYS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum { ARRAY_MAX_RANK = 8 };

/* The element types read, by NumPy's names (array_type_name). */
typedef enum ArrayType {
    ARR_BOOL, ARR_U8, ARR_I8, ARR_U16, ARR_I16, ARR_U32, ARR_I32, ARR_U64, ARR_I64,
    ARR_F16, ARR_BF16, ARR_F32, ARR_F64,
} ArrayType;

typedef struct Array {
    const char *name;
    ArrayType type;
    int rank;
    int64_t shape[ARRAY_MAX_RANK];
    int64_t count;              /* elements: the shape's product */
    const void *data;           /* count elements, little-endian, C order */
} Array;

typedef struct ArraySet ArraySet;

/* The arrays NAMES[0..n) of PATH: a directory (NAME.npy in it), an .npz archive or a
 * safetensors file, told apart by their bytes; for one name, also an .npy file. NULL after "cgc: error: PATH: ...", which
 * for a name the file lacks lists those it has. */
ArraySet *arrays_open(const char *path, const char *const *names, int n);
/* Names[I]'s array. */
const Array *arrays_get(const ArraySet *s, int i);
/* What PATH is: "a directory of .npy files", "an .npz archive", "a safetensors file". */
const char *arrays_format(const ArraySet *s);
void arrays_free(ArraySet *s);
/* From now on S's files are read a row here and there (a shuffled order): the kernel is
 * told to stop reading ahead of each page touched, which would fill memory with rows
 * nobody asked for. */
void arrays_read_randomly(ArraySet *s);

/* Arrays a reader makes a row at a time (a CSV table's, converted), kept in temporary
 * files ($TMPDIR, else /tmp; unlinked at once) and mapped once whole, so that they take no
 * memory of their own: data larger than memory. */
typedef struct ArraySpill ArraySpill;
/* N arrays, array I named NAMES[I], of TYPES[I], with COLS[I] elements a row (0: one, the
 * array of rank 1). WHAT, the file being read, names errors. NULL after an error. */
ArraySpill *arrays_spill_new(int n, const char *const *names, const ArrayType *types,
                             const int64_t *cols, const char *what);
/* Appends a row (COLS[I] elements, or 1) to array I. */
void arrays_spill_row(ArraySpill *s, int i, const void *row);
/* The arrays, ROWS rows each, mapped; NULL after an error (a write that failed: a full
 * disk). Frees S either way. */
ArraySet *arrays_spill_done(ArraySpill *s, int64_t rows);
void arrays_spill_free(ArraySpill *s);

/* An .npy header (format 1.0) to F: DESCR ('<f4', '<i4'), SHAPE[0..rank); the data follows. */
void arrays_npy_header(FILE *f, const char *descr, const int64_t *shape, int rank);

const char *array_type_name(ArrayType t);   /* "uint8", "float32", ... */
bool array_type_is_float(ArrayType t);
/* Element I of A as a double (exact for every type but 64-bit integers past 2^53). */
double array_value(const Array *a, int64_t i);

#endif
