/* safetensors.c: the safetensors format, read and written (see safetensors.h).
 *
 * Layout: u64 little-endian N, then N bytes of JSON, then the data buffer. The JSON maps
 * each tensor's name to {"dtype", "shape", "data_offsets": [BEGIN, END]} (offsets into
 * the buffer) and may hold "__metadata__", an object of strings. Tensors are contiguous:
 * sorted by offset they tile the buffer with no gap and no overlap.
 *
 * Checkpoints are what users hand to PyTorch, and what they hand back to us may have been
 * cut short by a full disk or written by another tool, so the reader validates every
 * field against the file's real size before trusting it, and the writer replaces the
 * target only once the new file is completely on disk. cJSON builds and parses the
 * header; integers go into it as raw text, since cJSON prints doubles above 2^31 with
 * %g and the format wants exact integers.
 */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/diag.h"
#include "../base/outfile.h"

/* The reference implementation's limit on the header (ours on ranks is StTensor's). */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)
/* Integers in the header are read through doubles; beyond 2^53 they would be rounded. */
#define ST_MAX_INT ((double)((uint64_t)1 << 53))

static const char METADATA_KEY[] = "__metadata__";

/* The dtypes of the reference implementation, with their sizes in bytes. */
static const struct {
    const char *name;
    size_t size;
} DTYPES[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8},
};

/* The interned name of DTYPE, so tensors can point at it; NULL when unknown. */
static const char *dtype_intern(const char *dtype)
{
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (strcmp(DTYPES[i].name, dtype) == 0) return DTYPES[i].name;
    return NULL;
}

size_t st_dtype_size(const char *dtype)
{
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (strcmp(DTYPES[i].name, dtype) == 0) return DTYPES[i].size;
    return 0;
}

/* Bytes of a tensor: false when the product does not fit in 64 bits. */
static bool tensor_bytes(const char *dtype, int rank, const int64_t *shape, uint64_t *bytes)
{
    uint64_t n = st_dtype_size(dtype);
    for (int i = 0; i < rank; i++)
        if (__builtin_mul_overflow(n, (uint64_t)shape[i], &n)) return false;
    *bytes = n;
    return true;
}

/* "[2, 3]" */
static const char *shape_str(int rank, const int64_t *shape, char *buf, size_t n)
{
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < rank && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (at < n) snprintf(buf + at, n - at, "]");
    return buf;
}

/* ------------------------------------------------------------------------------------ */
/* Writing                                                                              */
/* ------------------------------------------------------------------------------------ */

static void add_int(cJSON *array, uint64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    cJSON_AddItemToArray(array, cJSON_CreateRaw(buf));
}

/* One header entry: {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}. */
static cJSON *tensor_entry(const StTensor *t, uint64_t begin, uint64_t end)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "dtype", t->dtype);
    cJSON *shape = cJSON_AddArrayToObject(e, "shape");
    for (int i = 0; i < t->rank; i++) add_int(shape, (uint64_t)t->shape[i]);
    cJSON *offsets = cJSON_AddArrayToObject(e, "data_offsets");
    add_int(offsets, begin);
    add_int(offsets, end);
    return e;
}

static cJSON *metadata_entry(const StMeta *meta, int nmeta)
{
    cJSON *m = cJSON_CreateObject();
    for (int i = 0; i < nmeta; i++) cJSON_AddStringToObject(m, meta[i].key, meta[i].value);
    return m;
}

static const StTensor *sort_tensors;
static int by_tensor_name(const void *a, const void *b)
{
    return strcmp(sort_tensors[*(const int *)a].name, sort_tensors[*(const int *)b].name);
}

/* Tensor indices in the order given, or in name order when SORTED (byte order, as the
 * reference sorts Rust strings). Names come from cgc itself, so a duplicate or a bad
 * tensor is our bug. */
static int *tensor_order(const StTensor *tensors, int n, bool sorted)
{
    int *order = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    for (int i = 0; i < n; i++) {
        const StTensor *t = &tensors[i];
        CGC_ASSERT(st_dtype_size(t->dtype) > 0 && t->rank >= 0 && t->rank <= ST_MAX_RANK);
        CGC_ASSERT(strcmp(t->name, METADATA_KEY) != 0);
        for (int k = 0; k < t->rank; k++) CGC_ASSERT(t->shape[k] >= 0);
        for (int k = 0; k < i; k++) CGC_ASSERT(strcmp(tensors[k].name, t->name) != 0);
        order[i] = i;
    }
    sort_tensors = tensors;
    if (sorted) qsort(order, (size_t)n, sizeof *order, by_tensor_name);
    return order;
}

/* The header text, padded with spaces to a multiple of 8 bytes so the data that follows
 * is aligned. Keys and data follow ORDER, "__metadata__" placed as in name order. */
static char *build_header(const StTensor *tensors, const int *order, int n, const StMeta *meta,
                          int nmeta, size_t *len)
{
    cJSON *root = cJSON_CreateObject();
    bool meta_done = nmeta == 0;
    uint64_t offset = 0;
    for (int k = 0; k <= n; k++) {
        const StTensor *t = k < n ? &tensors[order[k]] : NULL;
        if (!meta_done && (!t || strcmp(METADATA_KEY, t->name) < 0)) {
            cJSON_AddItemToObject(root, METADATA_KEY, metadata_entry(meta, nmeta));
            meta_done = true;
        }
        if (!t) break;
        uint64_t bytes;
        CGC_ASSERT(tensor_bytes(t->dtype, t->rank, t->shape, &bytes));
        cJSON_AddItemToObject(root, t->name, tensor_entry(t, offset, offset + bytes));
        offset += bytes;
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) CGC_INTERNAL("cJSON could not print a safetensors header");
    size_t n0 = strlen(text), padded = (n0 + 7) / 8 * 8;
    char *header = xmalloc(padded + 1);
    memcpy(header, text, n0);
    memset(header + n0, ' ', padded - n0);
    header[padded] = '\0';
    cJSON_free(text);
    *len = padded;
    return header;
}

static bool write_all(FILE *f, const void *p, size_t n)
{
    return n == 0 || fwrite(p, 1, n, f) == n;
}

/* Opens the checkpoint PATH for reading; -1 after an error that says what is wrong. */
static int open_checkpoint(const char *path)
{
    struct stat st;
    int fd = open_regular(path, &st);
    if (fd == -1) cgc_error("%s: cannot open: %s", path, strerror(errno));
    if (fd == -2) cgc_error("%s: is %s, not a file cgc can read; give the path of a checkpoint", path,
                            file_kind(st.st_mode));
    return fd < 0 ? -1 : fd;
}

/* Whether the regular file FD begins as a safetensors file does: a header length that
 * fits, then a JSON object. Only the header is read. */
static bool is_safetensors(int fd)
{
    uint8_t prefix[8];
    struct stat st;
    if (fstat(fd, &st) != 0 || pread(fd, prefix, 8, 0) != 8) return false;
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)prefix[i] << (8 * i);
    if (n < 2 || n > (uint64_t)st.st_size - 8 || n > ((uint64_t)1 << 26)) return false;
    char *text = xmalloc((size_t)n + 1);
    bool ok = pread(fd, text, (size_t)n, 8) == (ssize_t)n;
    text[ok ? n : 0] = '\0';
    cJSON *root = ok ? cJSON_Parse(text) : NULL;
    ok = cJSON_IsObject(root);
    cJSON_Delete(root);
    free(text);
    return ok;
}

const OutKind st_checkpoint = {"a checkpoint (a safetensors file)", is_safetensors, true};
const OutKind st_tensors = {"a safetensors file", is_safetensors, false};

int st_check_writable(const char *path)
{
    return out_check(ST_SAVE_ROLE, path, &st_checkpoint);
}

int st_save(const char *path, const StTensor *tensors, int ntensors, const StMeta *meta,
            int nmeta)
{
    return st_write(ST_SAVE_ROLE, &st_checkpoint, path, tensors, ntensors, meta, nmeta);
}

/* Opens PATH and writes the header of the tensors in ORDER; 0, or -1 after an error. */
static int stream_open(StStream *s, const char *role, const OutKind *kind, const char *path,
                       const StTensor *tensors, const int *order, int n, const StMeta *meta,
                       int nmeta)
{
    if (out_open(&s->o, role, path, kind) != 0) return -1;
    size_t header_len;
    char *header = build_header(tensors, order, n, meta, nmeta, &header_len);
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)header_len >> (8 * i));
    s->left = 0;
    for (int k = 0; k < n; k++) {
        uint64_t bytes;
        CGC_ASSERT(tensor_bytes(tensors[k].dtype, tensors[k].rank, tensors[k].shape, &bytes));
        s->left += bytes;
    }
    (void)(write_all(s->o.f, len, 8) && write_all(s->o.f, header, header_len));
    free(header);
    return 0;
}

int st_stream_open(StStream *s, const char *role, const OutKind *kind, const char *path,
                   const StTensor *tensors, int ntensors)
{
    int *order = tensor_order(tensors, ntensors, false);
    int rc = stream_open(s, role, kind, path, tensors, order, ntensors, NULL, 0);
    free(order);
    return rc;
}

void st_stream_write(StStream *s, const void *p, size_t n)
{
    CGC_ASSERT(n <= s->left);
    s->left -= n;
    (void)write_all(s->o.f, p, n);   /* a failed write is out_close's to report */
}

int st_stream_close(StStream *s)
{
    CGC_ASSERT(s->left == 0);
    return out_close(&s->o);
}

void st_stream_discard(StStream *s) { out_discard(&s->o); }

int st_write(const char *role, const OutKind *kind, const char *path, const StTensor *tensors,
             int ntensors, const StMeta *meta, int nmeta)
{
    int *order = tensor_order(tensors, ntensors, true);
    StStream s;
    int rc = stream_open(&s, role, kind, path, tensors, order, ntensors, meta, nmeta);
    for (int k = 0; rc == 0 && k < ntensors; k++) {
        const StTensor *t = &tensors[order[k]];
        uint64_t bytes;
        CGC_ASSERT(tensor_bytes(t->dtype, t->rank, t->shape, &bytes));
        CGC_ASSERT(bytes == 0 || t->data != NULL);
        st_stream_write(&s, t->data, (size_t)bytes);
    }
    free(order);
    return rc == 0 ? st_stream_close(&s) : -1;
}

/* ------------------------------------------------------------------------------------ */
/* Reading                                                                              */
/* ------------------------------------------------------------------------------------ */

struct StFile {
    uint8_t *bytes;         /* the whole file; tensors point into it */
    size_t mapped;          /* st_map: the mapping's bytes (0: BYTES was malloc'd) */
    StTensor *tensors;      /* in data order */
    int ntensors;
    StMeta *meta;
    int nmeta;
};

/* Where tensor I's bytes lie in the buffer, kept for the coverage check. */
typedef struct Span {
    uint64_t begin, end;
    const char *name;
} Span;

/* The header length a file starts with, checked against the file's size before anything
 * is allocated for it. Returns -1 after an error. */
static int check_header_length(const char *path, const uint8_t prefix[8], uint64_t size,
                               uint64_t *n)
{
    if (size < 8) {
        cgc_error("%s: truncated: a safetensors file starts with an 8-byte header length, "
                  "but the file has %llu bytes", path, (unsigned long long)size);
        return -1;
    }
    *n = 0;
    for (int i = 7; i >= 0; i--) *n = *n << 8 | prefix[i];
    if (*n > size - 8) {
        cgc_error("%s: truncated: header says %llu bytes but the file has %llu", path,
                  (unsigned long long)*n, (unsigned long long)size);
        return -1;
    }
    if (*n > ST_MAX_HEADER) {
        cgc_error("%s: header of %llu bytes is over the 100 MB limit", path,
                  (unsigned long long)*n);
        return -1;
    }
    return 0;
}

/* The rest of F after the 8 bytes of PREFIX, appended to them: SIZE bytes in all. */
static uint8_t *read_rest(FILE *f, const char *path, const uint8_t prefix[8], uint64_t size)
{
    uint8_t *buf = xmalloc((size_t)size);
    memcpy(buf, prefix, 8);
    size_t got = fread(buf + 8, 1, (size_t)(size - 8), f);
    if (got != size - 8 || ferror(f)) {
        cgc_error("%s: cannot read: %s", path, ferror(f) ? "read error" : "the file shrank");
        free(buf);
        return NULL;
    }
    return buf;
}

/* The whole file, once its header length is known to fit; NULL after an error. */
static uint8_t *read_file(const char *path, uint64_t *size, uint64_t *header_len)
{
    int fd = open_checkpoint(path);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "rb");
    if (!f && fd >= 0) {
        cgc_error("%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    if (!f) return NULL;
    struct stat st;
    uint8_t *buf = NULL;
    if (fstat(fileno(f), &st) != 0) {
        cgc_error("%s: cannot read: %s", path, strerror(errno));
    } else {
        *size = (uint64_t)st.st_size;
        uint8_t prefix[8] = {0};
        size_t got = fread(prefix, 1, sizeof prefix, f);
        if (got < sizeof prefix && *size >= sizeof prefix) *size = got;   /* it shrank */
        if (check_header_length(path, prefix, *size, header_len) == 0)
            buf = read_rest(f, path, prefix, *size);
    }
    fclose(f);
    return buf;
}

/* Length of the valid UTF-8 sequence at S (at most N bytes), or 0 when it is not one. */
static size_t utf8_char(const uint8_t *s, size_t n)
{
    size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xC2 && s[0] < 0xE0 ? 2
               : s[0] >= 0xE0 && s[0] < 0xF0 ? 3 : s[0] >= 0xF0 && s[0] < 0xF5 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    /* Overlong forms, surrogates and code points past U+10FFFF. */
    if (len == 3 && ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0))) return 0;
    if (len == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90))) return 0;
    return len;
}

/* The header must be UTF-8 text (the reference decodes it as such) with no NUL, which
 * would also end cJSON's parse early. Returns the offset of the first bad byte, or N. */
static size_t first_bad_text_byte(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t len = s[i] == 0 ? 0 : utf8_char(s + i, n - i);
        if (len == 0) return i;
        i += len;
    }
    return n;
}

/* The JSON header, parsed, or NULL after an error. */
static cJSON *parse_header(const char *path, const uint8_t *text, size_t n)
{
    size_t bad = first_bad_text_byte(text, n);
    if (bad < n) {
        cgc_error("%s: header is not UTF-8 text (byte %zu of the header is 0x%02X)", path, bad,
                  text[bad]);
        return NULL;
    }
    char *copy = xstrndup((const char *)text, n);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(copy, n + 1, &end, 1);
    if (!root) {
        size_t at = end && end >= copy && end <= copy + n ? (size_t)(end - copy) : 0;
        cgc_error("%s: header is not valid JSON (at byte %zu of the header: '%s')", path, at,
                  diag_quote(copy + at, 20));
    } else if (!cJSON_IsObject(root)) {
        cgc_error("%s: header is not a JSON object", path);
        cJSON_Delete(root);
        root = NULL;
    }
    free(copy);
    return root;
}

/* A non-negative integer the header gives as a JSON number. */
static bool json_count(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= ST_MAX_INT) || d != (double)(uint64_t)d) return false;
    *out = (uint64_t)d;
    return true;
}

static int meta_error(const char *path, const char *msg)
{
    cgc_error("%s: \"__metadata__\" %s", path, msg);
    return -1;
}

static int read_metadata(const char *path, const cJSON *m, StFile *f)
{
    if (!cJSON_IsObject(m)) return meta_error(path, "is not an object of strings");
    int n = cJSON_GetArraySize(m);
    f->meta = xcalloc((size_t)(n > 0 ? n : 1), sizeof *f->meta);
    for (const cJSON *e = m->child; e; e = e->next) {
        if (!cJSON_IsString(e)) {
            cgc_error("%s: \"__metadata__\" value of '%s' is not a string", path,
                      diag_quote(e->string, 60));
            return -1;
        }
        f->meta[f->nmeta].key = xstrdup(e->string);
        f->meta[f->nmeta].value = xstrdup(e->valuestring);
        f->nmeta++;
    }
    return 0;
}

static int tensor_error(const char *path, const char *name, const char *msg)
{
    cgc_error("%s: tensor '%s': %s", path, diag_quote(name, 60), msg);
    return -1;
}

static int read_shape(const char *path, const cJSON *e, StTensor *t)
{
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsArray(shape)) return tensor_error(path, t->name, "\"shape\" is not a list");
    int rank = cJSON_GetArraySize(shape);
    if (rank > ST_MAX_RANK) {
        char msg[64];
        snprintf(msg, sizeof msg, "rank %d is more than cgc supports (%d)", rank, ST_MAX_RANK);
        return tensor_error(path, t->name, msg);
    }
    t->rank = 0;
    for (const cJSON *d = shape->child; d; d = d->next) {
        uint64_t v;
        if (!json_count(d, &v))
            return tensor_error(path, t->name, "\"shape\" holds something other than a "
                                               "non-negative integer");
        t->shape[t->rank++] = (int64_t)v;
    }
    return 0;
}

static int read_offsets(const char *path, const cJSON *e, const char *name, Span *span)
{
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    uint64_t b, en;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_count(off->child, &b) ||
        !json_count(off->child->next, &en))
        return tensor_error(path, name, "\"data_offsets\" is not a list of two non-negative "
                                        "integers");
    span->begin = b;
    span->end = en;
    span->name = name;
    return 0;
}

/* One entry, checked on its own: known dtype, integer shape and offsets that lie within
 * the buffer and hold exactly shape * dtype size bytes. */
static int read_tensor(const char *path, const cJSON *e, uint64_t buffer, StTensor *t,
                       Span *span)
{
    t->name = xstrdup(e->string);
    if (!cJSON_IsObject(e)) return tensor_error(path, t->name, "entry is not an object");
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(dtype)) return tensor_error(path, t->name, "\"dtype\" is not a string");
    t->dtype = dtype_intern(dtype->valuestring);
    if (!t->dtype) {
        char msg[128];
        snprintf(msg, sizeof msg, "unknown dtype \"%s\"", diag_quote(dtype->valuestring, 40));
        return tensor_error(path, t->name, msg);
    }
    if (read_shape(path, e, t) < 0 || read_offsets(path, e, t->name, span) < 0) return -1;
    char msg[256], sbuf[128];
    uint64_t bytes;
    bool fits = tensor_bytes(t->dtype, t->rank, t->shape, &bytes);
    if (span->begin > span->end || span->end > buffer) {
        snprintf(msg, sizeof msg, "data_offsets [%llu, %llu] are outside the %llu-byte data",
                 (unsigned long long)span->begin, (unsigned long long)span->end,
                 (unsigned long long)buffer);
        return tensor_error(path, t->name, msg);
    }
    if (!fits || span->end - span->begin != bytes) {
        char nbuf[32] = "too many";
        if (fits) snprintf(nbuf, sizeof nbuf, "%llu", (unsigned long long)bytes);
        snprintf(msg, sizeof msg, "data_offsets [%llu, %llu] do not match shape %s of %s (%s bytes)",
                 (unsigned long long)span->begin, (unsigned long long)span->end,
                 shape_str(t->rank, t->shape, sbuf, sizeof sbuf), t->dtype, nbuf);
        return tensor_error(path, t->name, msg);
    }
    return 0;
}

static int by_begin(const void *a, const void *b)
{
    const Span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Sorted by offset, the tensors must tile the buffer exactly. */
static int check_coverage(const char *path, Span *spans, int n, uint64_t buffer)
{
    qsort(spans, (size_t)n, sizeof *spans, by_begin);
    uint64_t at = 0;
    const char *prev = NULL;
    for (int i = 0; i < n; i++) {
        const Span *s = &spans[i];
        if (s->begin < at) {
            cgc_error("%s: tensors '%s' and '%s' overlap (bytes %llu to %llu)", path,
                      diag_quote(prev, 60), diag_quote(s->name, 60),
                      (unsigned long long)s->begin, (unsigned long long)at);
            return -1;
        }
        if (s->begin > at) {
            cgc_error("%s: bytes %llu to %llu of the data belong to no tensor (before '%s')",
                      path, (unsigned long long)at, (unsigned long long)s->begin,
                      diag_quote(s->name, 60));
            return -1;
        }
        at = s->end;
        prev = s->name;
    }
    if (at != buffer) {
        cgc_error("%s: bytes %llu to %llu of the data belong to no tensor (after the last)",
                  path, (unsigned long long)at, (unsigned long long)buffer);
        return -1;
    }
    return 0;
}

static int find_tensor(const StFile *f, const char *name)
{
    for (int i = 0; i < f->ntensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return i;
    return -1;
}

static int by_data_begin(const void *a, const void *b)
{
    const StTensor *x = a, *y = b;
    if (x->data != y->data) return (const uint8_t *)x->data < (const uint8_t *)y->data ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Reads every entry of ROOT into F, then checks they tile the buffer at DATA. */
static int read_entries(const char *path, const cJSON *root, const uint8_t *data,
                        uint64_t buffer, StFile *f)
{
    int n = cJSON_GetArraySize(root);
    f->tensors = xcalloc((size_t)(n > 0 ? n : 1), sizeof *f->tensors);
    Span *spans = xcalloc((size_t)(n > 0 ? n : 1), sizeof *spans);
    int status = 0;
    for (const cJSON *e = root->child; e && status == 0; e = e->next) {
        if (strcmp(e->string, METADATA_KEY) == 0) {
            status = f->meta ? meta_error(path, "appears twice") : read_metadata(path, e, f);
            continue;
        }
        if (find_tensor(f, e->string) >= 0) {
            status = tensor_error(path, e->string, "appears twice in the header");
            continue;
        }
        StTensor *t = &f->tensors[f->ntensors++];
        Span *s = &spans[f->ntensors - 1];
        status = read_tensor(path, e, buffer, t, s);
        if (status == 0) t->data = data + s->begin;
    }
    if (status == 0) status = check_coverage(path, spans, f->ntensors, buffer);
    if (status == 0) qsort(f->tensors, (size_t)f->ntensors, sizeof *f->tensors, by_data_begin);
    free(spans);
    return status;
}

static StFile *st_parse(const char *path, uint8_t *bytes, uint64_t size, uint64_t n, size_t mapped);

/* PATH mapped, its header length checked; NULL after an error. */
static uint8_t *map_file(const char *path, uint64_t *size, uint64_t *header_len)
{
    int fd = open_checkpoint(path);
    struct stat st;
    if (fd < 0) return NULL;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) != 0) cgc_error("%s: cannot read: %s", path, strerror(errno));
    else if ((*size = (uint64_t)st.st_size) < 8) check_header_length(path, NULL, *size, header_len);
    else if ((p = mmap(NULL, (size_t)*size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED)
        cgc_error("%s: cannot map the file: %s", path, strerror(errno));
    close(fd);
    if (p == MAP_FAILED) return NULL;
    if (check_header_length(path, p, *size, header_len) == 0) return p;
    munmap(p, (size_t)*size);
    return NULL;
}

StFile *st_map(const char *path)
{
    uint64_t size, n;
    uint8_t *bytes = map_file(path, &size, &n);
    return bytes ? st_parse(path, bytes, size, n, (size_t)size) : NULL;
}

StFile *st_load(const char *path)
{
    uint64_t size, n;
    uint8_t *bytes = read_file(path, &size, &n);
    return bytes ? st_parse(path, bytes, size, n, 0) : NULL;
}

/* The file BYTES (SIZE of them, a header of N), owned from now on: malloc'd, or a mapping
 * of MAPPED bytes. */
static StFile *st_parse(const char *path, uint8_t *bytes, uint64_t size, uint64_t n, size_t mapped)
{
    cJSON *root = parse_header(path, bytes + 8, (size_t)n);
    StFile *f = xcalloc(1, sizeof *f);
    f->bytes = bytes;
    f->mapped = mapped;
    if (!root || read_entries(path, root, bytes + 8 + n, size - 8 - n, f) < 0) {
        st_free(f);
        f = NULL;
    }
    cJSON_Delete(root);
    return f;
}

void st_free(StFile *f)
{
    if (!f) return;
    for (int i = 0; i < f->ntensors; i++) free((char *)f->tensors[i].name);
    for (int i = 0; i < f->nmeta; i++) {
        free((char *)f->meta[i].key);
        free((char *)f->meta[i].value);
    }
    free(f->tensors);
    free(f->meta);
    if (f->mapped) munmap(f->bytes, f->mapped);
    else free(f->bytes);
    free(f);
}

int st_count(const StFile *f) { return f->ntensors; }

const StTensor *st_get(const StFile *f, int i)
{
    CGC_ASSERT(i >= 0 && i < f->ntensors);
    return &f->tensors[i];
}

const StTensor *st_find(const StFile *f, const char *name)
{
    int i = find_tensor(f, name);
    return i < 0 ? NULL : &f->tensors[i];
}

const char *st_meta(const StFile *f, const char *key)
{
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
    return NULL;
}
