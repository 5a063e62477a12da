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

/* An .npy header (format 1.0) to F: DESCR ('<f4', '<i4'), SHAPE[0..rank); the data follows. */
void arrays_npy_header(FILE *f, const char *descr, const int64_t *shape, int rank);

const char *array_type_name(ArrayType t);   /* "uint8", "float32", ... */
bool array_type_is_float(ArrayType t);
/* Element I of A as a double (exact for every type but 64-bit integers past 2^53). */
double array_value(const Array *a, int64_t i);

#endif
