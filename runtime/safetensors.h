/* safetensors.h: reading and writing the safetensors format (what PyTorch's
 * safetensors.torch.load_file reads): an 8-byte little-endian header length, a JSON
 * header mapping names to {dtype, shape, data_offsets} plus an optional "__metadata__"
 * object of string values, then the raw little-endian tensor bytes.
 *
 * Writing is atomic: a temporary file in the same directory, fsync, rename over the
 * target, fsync of the directory. Reading validates everything before use (header length
 * within the file, JSON well formed, dtypes known, offsets in order, in bounds, matching
 * shape * dtype size, covering the data exactly) and never reads past the end.
 */
#ifndef CGC_SAFETENSORS_H
#define CGC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../base/outfile.h"

/* The most dimensions a tensor may have: a file's tensor of higher rank is refused. */
enum { ST_MAX_RANK = 8 };

typedef struct StTensor {
    const char *name;
    const char *dtype;          /* "F32", "F64", "I32", "I64", "F16", "BF16", "U8" */
    int rank;
    int64_t shape[ST_MAX_RANK];
    const void *data;           /* shape * dtype size bytes, little-endian */
} StTensor;

typedef struct StMeta {
    const char *key;
    const char *value;
} StMeta;

/* A checkpoint as an output (outfile.h): replaces only a safetensors file, and is on the
 * disk, renamed, before st_save returns. */
extern const OutKind st_checkpoint;
/* Other tensors (--predict's): replaces a safetensors file, but never the checkpoint a run
 * resumes, as a checkpoint may. */
extern const OutKind st_tensors;
#define ST_SAVE_ROLE "save to"   /* its role in messages: "cannot save to PATH: ..." */

/* Writes the tensors (in the given order; the header lists them sorted by name, as the
 * reference implementation does) and metadata to PATH, an output of kind st_checkpoint.
 * Returns 0, or -1 after "cgc: error: cannot save to PATH: ...". */
int st_save(const char *path, const StTensor *tensors, int ntensors, const StMeta *meta,
            int nmeta);

/* st_save for an output of another ROLE and KIND (outfile.h): "cannot ROLE PATH: ...". */
int st_write(const char *role, const OutKind *kind, const char *path, const StTensor *tensors,
             int ntensors, const StMeta *meta, int nmeta);

/* A file written as its tensors are computed: the header of TENSORS (their data unused),
 * keys and data in the order given, then each tensor's bytes in that order, in pieces,
 * through st_stream_write, then st_stream_close (every byte written, or an internal
 * error). Open and close return 0, or -1 after an error; a failed write is reported by
 * the close. */
typedef struct StStream {
    OutFile o;
    uint64_t left;              /* bytes of data still to write */
} StStream;
int st_stream_open(StStream *s, const char *role, const OutKind *kind, const char *path,
                   const StTensor *tensors, int ntensors);
void st_stream_write(StStream *s, const void *p, size_t n);
int st_stream_close(StStream *s);
/* Ends an open stream without a file: the old one stays as it was. */
void st_stream_discard(StStream *s);

/* out_check of a save to PATH: for checking before hours of work, not after. */
int st_check_writable(const char *path);

typedef struct StFile StFile;

/* Reads and validates PATH. Returns NULL after "cgc: error: PATH: what is wrong". */
StFile *st_load(const char *path);
/* As st_load, with the file mapped instead of read: the tensors' bytes are read from the
 * file as they are touched, so a file larger than memory opens (a data set's). */
StFile *st_map(const char *path);
void st_free(StFile *f);
int st_count(const StFile *f);
const StTensor *st_get(const StFile *f, int i);
const StTensor *st_find(const StFile *f, const char *name);   /* NULL when absent */
const char *st_meta(const StFile *f, const char *key);        /* NULL when absent */
size_t st_dtype_size(const char *dtype);                       /* 0 for unknown */

#endif
