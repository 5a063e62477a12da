/* fuzz_files.c: libFuzzer targets (scripts/fuzz.sh) for the binary files cgc reads, each
 * through its public reader: IDX datasets, gzip'd or not (fuzz_idx), safetensors
 * checkpoints (fuzz_safetensors), a user's arrays, .npz, .npy or safetensors, for
 * inputs x and y (fuzz_arrays), and CSV tables (fuzz_csv). The readers take a path, so each input is written to a
 * file first. An input may be refused with a message; it may not crash, leak or trip a
 * sanitizer, and what a reader accepts is read through to the end. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../runtime/arrays.h"
#include "../../runtime/csv.h"
#include "../../runtime/data.h"
#include "../../runtime/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input as a file of its own (one per process, rewritten each time) in $TMPDIR, or
 * /tmp: a memory file system there (TMPDIR=/dev/shm) keeps the disk out of the loop. */
static const char *as_file(const uint8_t *data, size_t size)
{
    static char path[4096];
    const char *dir = getenv("TMPDIR");
    if (!path[0]) snprintf(path, sizeof path, "%s/cgc_fuzz_%ld.bin", dir && dir[0] ? dir : "/tmp", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    return path;
}

#ifdef FUZZ_CSV
/* Every field's text is as long as it says; the records are counted in order. */
static int csv_field(void *ctx, int64_t record, int64_t line, int col, const char *text, size_t len)
{
    (void)line, (void)col;
    if (strlen(text) > len || record != *(int64_t *)ctx) abort();
    return 0;
}

static int csv_record(void *ctx, int64_t record, int64_t line, int fields)
{
    if (line < 1 || fields < 1 || record != (*(int64_t *)ctx)++) abort();
    return 0;
}
#endif

#if !defined FUZZ_IDX && !defined FUZZ_ARRAYS && !defined FUZZ_CSV
/* Bytes per element of a dtype the reader accepted (it knows no other). */
static uint64_t dtype_bytes(const char *dtype)
{
    size_t n = st_dtype_size(dtype);
    if (n == 0) abort();   /* st_load accepted a dtype it does not know */
    return n;
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = as_file(data, size);
#ifdef FUZZ_IDX
    int rank = 0;
    int64_t dims[IDX_MAX_RANK];
    uint8_t *bytes = NULL;
    if (idx_read(path, &rank, dims, &bytes) == 0) {
        uint64_t n = 1, sum = 0;
        for (int i = 0; i < rank; i++) n *= (uint64_t)dims[i];
        for (uint64_t i = 0; i < n; i++) sum += bytes[i];   /* every byte it claims is there */
        if (sum == 0xFFFFFFFFFFFFFFFFull) abort();
    }
    free(bytes);
#elif defined FUZZ_CSV
    int64_t records = 0;
    (void)csv_read(path, csv_field, csv_record, &records);
#elif defined FUZZ_ARRAYS
    static const char *const names[] = { "x", "y" };
    ArraySet *s = arrays_open(path, names, 2);
    for (int i = 0; s && i < 2; i++) {   /* every element it claims is there */
        const Array *a = arrays_get(s, i);
        double sum = 0;
        for (int64_t k = 0; k < a->count; k++) sum += array_value(a, k) != 0;
        if (sum < 0) abort();
    }
    arrays_free(s);
#else
    StFile *f = st_load(path);
    for (int i = 0; f && i < st_count(f); i++) {   /* every byte a tensor claims is there */
        const StTensor *t = st_get(f, i);
        uint64_t n = dtype_bytes(t->dtype), sum = 0;
        for (int k = 0; k < t->rank; k++) n *= (uint64_t)t->shape[k];
        for (uint64_t b = 0; b < n; b++) sum += ((const uint8_t *)t->data)[b];
        if (sum == 0xFFFFFFFFFFFFFFFFull) abort();
    }
    st_free(f);
#endif
    return 0;
}
