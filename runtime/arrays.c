/* arrays.c: the readers of arrays.h.
 *
 * .npy (NumPy's format 1, 2 or 3): the magic "\x93NUMPY", a version, the header's length
 * (2 bytes, or 4 from version 2), then a Python dict literal, {'descr': '<f4',
 * 'fortran_order': False, 'shape': (60000, 784), }, padded; the data follows, exactly
 * the shape's product times the item size. .npz: a zip archive of .npy members named
 * NAME.npy, each stored or deflated (zlib), zip64 where np.savez needed it; read from the
 * central directory at the end, each member's local header checked against it.
 * safetensors: runtime/safetensors.c's reader.
 */
#include "arrays.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../base/diag.h"
#include "../base/outfile.h"
#include "../base/half.h"
#include "safetensors.h"

/* The most a deflated member can inflate to per byte (deflate's limit is 1032:1), and the
 * longest .npy header taken (NumPy writes a few hundred bytes). */
enum { INFLATE_RATIO = 1032, NPY_MAX_HEADER = 1 << 20 };

/* The element types: NumPy's dtype letters and sizes, and safetensors' names. */
static const struct {
    const char *numpy, *descr, *st;   /* descr: kind and size, after the byte order */
    int size;
} TYPES[] = {
    [ARR_BOOL] = {"bool", "b1", "BOOL", 1},   [ARR_U8] = {"uint8", "u1", "U8", 1},
    [ARR_I8] = {"int8", "i1", "I8", 1},       [ARR_U16] = {"uint16", "u2", "U16", 2},
    [ARR_I16] = {"int16", "i2", "I16", 2},    [ARR_U32] = {"uint32", "u4", "U32", 4},
    [ARR_I32] = {"int32", "i4", "I32", 4},    [ARR_U64] = {"uint64", "u8", "U64", 8},
    [ARR_I64] = {"int64", "i8", "I64", 8},    [ARR_F16] = {"float16", "f2", "F16", 2},
    [ARR_BF16] = {"bfloat16", NULL, "BF16", 2}, [ARR_F32] = {"float32", "f4", "F32", 4},
    [ARR_F64] = {"float64", "f8", "F64", 8},
};
enum { NTYPES = sizeof TYPES / sizeof TYPES[0] };

const char *array_type_name(ArrayType t) { return TYPES[t].numpy; }

bool array_type_is_float(ArrayType t) { return t >= ARR_F16; }

/* Element I of type T at P, wherever it lies (an archive's stored member is not aligned). */
#define LOADER(T)                                                                          \
    static inline T load_##T(const void *p, int64_t i)                                     \
    {                                                                                      \
        T v;                                                                               \
        memcpy(&v, (const char *)p + i * (int64_t)sizeof v, sizeof v);                     \
        return v;                                                                          \
    }
LOADER(uint8_t) LOADER(int8_t) LOADER(uint16_t) LOADER(int16_t) LOADER(uint32_t)
LOADER(int32_t) LOADER(uint64_t) LOADER(int64_t) LOADER(float) LOADER(double)
#define LOAD(T, p, i) load_##T(p, i)

double array_value(const Array *a, int64_t i)
{
    const void *p = a->data;
    switch (a->type) {
    case ARR_BOOL: return LOAD(uint8_t, p, i) != 0;
    case ARR_U8: return LOAD(uint8_t, p, i);
    case ARR_I8: return LOAD(int8_t, p, i);
    case ARR_U16: return LOAD(uint16_t, p, i);
    case ARR_I16: return LOAD(int16_t, p, i);
    case ARR_U32: return LOAD(uint32_t, p, i);
    case ARR_I32: return LOAD(int32_t, p, i);
    case ARR_U64: return (double)LOAD(uint64_t, p, i);
    case ARR_I64: return (double)LOAD(int64_t, p, i);
    case ARR_F16: return half_f16_to_f32(LOAD(uint16_t, p, i));
    case ARR_BF16: return half_bf16_to_f32(LOAD(uint16_t, p, i));
    case ARR_F32: return LOAD(float, p, i);
    case ARR_F64: return LOAD(double, p, i);
    }
    CGC_INTERNAL("array type %d", (int)a->type);
}

/* ---- the set ---- */

typedef struct Mapping {
    void *p;
    size_t n;
} Mapping;

struct ArraySet {
    const char *format;
    int n;
    Array *arrays;              /* one per name asked for, its name owned */
    Mapping *maps;              /* files mapped */
    int nmaps;
    void **owned;               /* inflated members */
    int nowned;
    StFile *st;
};

const Array *arrays_get(const ArraySet *s, int i)
{
    CGC_ASSERT(i >= 0 && i < s->n);
    return &s->arrays[i];
}

const char *arrays_format(const ArraySet *s) { return s->format; }

void arrays_free(ArraySet *s)
{
    if (!s) return;
    for (int i = 0; i < s->n; i++) free((char *)s->arrays[i].name);
    for (int i = 0; i < s->nmaps; i++)
        if (s->maps[i].n) munmap(s->maps[i].p, s->maps[i].n);
    for (int i = 0; i < s->nowned; i++) free(s->owned[i]);
    st_free(s->st);
    free(s->arrays), free(s->maps), free(s->owned);
    free(s);
}

void arrays_read_randomly(ArraySet *s)
{
    for (int i = 0; i < s->nmaps; i++)
        if (s->maps[i].n) madvise(s->maps[i].p, s->maps[i].n, MADV_RANDOM);
}

/* PATH mapped (an empty file: no bytes), or NULL after an error. *N its size. */
static const uint8_t *map_file(ArraySet *s, const char *path, size_t *n)
{
    struct stat st;
    int fd = open_regular(path, &st);
    if (fd == -2) cgc_error("%s is %s, not a file of arrays", path, file_kind(st.st_mode));
    else if (fd < 0) cgc_error("%s: cannot open: %s", path, strerror(errno));
    if (fd >= 0 && out_protect_read(path, OUT_READ_BY_RUN) != 0) close(fd), fd = -1;
    if (fd < 0) return NULL;
    *n = (size_t)st.st_size;
    void *p = *n ? mmap(NULL, *n, PROT_READ, MAP_PRIVATE, fd, 0) : (void *)"";
    int err = errno;
    close(fd);
    if (p == MAP_FAILED) {
        cgc_error("%s: cannot map the file: %s", path, strerror(err));
        return NULL;
    }
    s->maps = xrealloc(s->maps, (size_t)(s->nmaps + 1) * sizeof *s->maps);
    s->maps[s->nmaps++] = (Mapping){ *n ? p : NULL, *n };
    return p;
}

/* ---- arrays spilled to temporary files ---- */

struct ArraySpill {
    ArraySet *set;
    FILE *files[2];
    int64_t row_elems[2];
    const char *what;
};

static FILE *spill_file(const char *what)
{
    const char *dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char path[4096];
    snprintf(path, sizeof path, "%s/cgc-rows-XXXXXX", dir);
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w+b") : NULL;
    if (!f) {
        cgc_error("%s: cannot make a temporary file in %s for its converted rows: %s; set TMPDIR "
                  "to a directory cgc may write", what, dir, strerror(errno));
        if (fd >= 0) close(fd);
    }
    if (fd >= 0) unlink(path);
    return f;
}

ArraySpill *arrays_spill_new(int n, const char *const *names, const ArrayType *types,
                             const int64_t *cols, const char *what)
{
    CGC_ASSERT(n >= 1 && n <= 2);
    ArraySpill *s = xcalloc(1, sizeof *s);
    s->what = what;
    s->set = xcalloc(1, sizeof *s->set);
    s->set->format = "a table converted";
    s->set->n = n;
    s->set->arrays = xcalloc((size_t)n, sizeof *s->set->arrays);
    for (int i = 0; i < n; i++) {
        Array *a = &s->set->arrays[i];
        a->name = xstrdup(names[i]);
        a->type = types[i];
        a->rank = cols[i] ? 2 : 1;
        a->shape[1] = cols[i];
        s->row_elems[i] = cols[i] ? cols[i] : 1;
        if (!(s->files[i] = spill_file(what))) {
            arrays_spill_free(s);
            return NULL;
        }
    }
    return s;
}

void arrays_spill_row(ArraySpill *s, int i, const void *row)
{
    fwrite(row, (size_t)TYPES[s->set->arrays[i].type].size, (size_t)s->row_elems[i], s->files[i]);
}

/* Maps array I's file, ROWS rows; 0, or -1 after an error. */
static int spill_map(ArraySpill *s, int i, int64_t rows)
{
    Array *a = &s->set->arrays[i];
    a->shape[0] = rows;
    a->count = rows * s->row_elems[i];
    size_t bytes = (size_t)a->count * (size_t)TYPES[a->type].size;
    FILE *f = s->files[i];
    if (fflush(f) != 0 || ferror(f)) {
        cgc_error("%s: cannot write its converted rows to a temporary file: %s; set TMPDIR to a "
                  "directory with room for %zu bytes", s->what, strerror(errno), bytes);
        return -1;
    }
    void *p = bytes ? mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fileno(f), 0) : (void *)"";
    if (p == MAP_FAILED) {
        cgc_error("%s: cannot map its converted rows: %s", s->what, strerror(errno));
        return -1;
    }
    ArraySet *set = s->set;
    set->maps = xrealloc(set->maps, (size_t)(set->nmaps + 1) * sizeof *set->maps);
    set->maps[set->nmaps++] = (Mapping){ bytes ? p : NULL, bytes };
    a->data = p;
    return 0;
}

ArraySet *arrays_spill_done(ArraySpill *s, int64_t rows)
{
    int rc = 0;
    for (int i = 0; i < s->set->n && rc == 0; i++) rc = spill_map(s, i, rows);
    ArraySet *set = rc == 0 ? s->set : NULL;
    if (set) s->set = NULL;
    arrays_spill_free(s);
    return set;
}

void arrays_spill_free(ArraySpill *s)
{
    if (!s) return;
    for (int i = 0; i < 2; i++)
        if (s->files[i]) fclose(s->files[i]);
    arrays_free(s->set);
    free(s);
}

/* ---- .npy ---- */

/* The little-endian integer of BYTES bytes at P. */
static uint64_t le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}


/* The header's value of KEY (after its colon and blanks), or NULL. */
static const char *npy_key(const char *h, const char *key)
{
    const char *k = strstr(h, key);
    if (!k) return NULL;
    k += strlen(key);
    while (*k == ' ') k++;
    if (*k++ != ':') return NULL;
    while (*k == ' ') k++;
    return k;
}

/* 'descr': '<f4' (or '|u1', '=i8') as a type; -1 after an error naming WHERE. */
static int npy_descr(const char *where, const char *v)
{
    char q = v ? v[0] : 0, d[16] = "";
    const char *end = q == '\'' || q == '"' ? strchr(v + 1, q) : NULL;
    if (!end || end - v - 1 >= (long)sizeof d) {
        cgc_error("%s: the .npy header's 'descr' is not a dtype string", where);
        return -1;
    }
    memcpy(d, v + 1, (size_t)(end - v - 1));
    d[end - v - 1] = '\0';
    if (d[0] == '>' && strcmp(d + 1, "u1") != 0 && strcmp(d + 1, "i1") != 0 && strcmp(d + 1, "b1") != 0) {
        cgc_error("%s: dtype '%s' is big-endian; save it little-endian (arr.astype(arr.dtype."
                  "newbyteorder('<')))", where, d);
        return -1;
    }
    const char *kind = strchr("<>|=", d[0]) ? d + 1 : d;
    for (int t = 0; t < NTYPES; t++)
        if (TYPES[t].descr && strcmp(kind, TYPES[t].descr) == 0) return t;
    cgc_error("%s: dtype '%s' is not one cgc reads (bool, integers of 8 to 64 bits, float16, "
              "float32, float64)", where, diag_quote(d, 16));
    return -1;
}

/* 'shape': (A, B, ) into A; -1 after an error. */
static int npy_shape(const char *where, const char *v, Array *a)
{
    if (!v || *v != '(') {
        cgc_error("%s: the .npy header's 'shape' is not a tuple", where);
        return -1;
    }
    a->rank = 0, a->count = 1;
    for (v++;;) {
        while (*v == ' ' || *v == ',') v++;
        if (*v == ')') return 0;
        char *end;
        errno = 0;
        long long d = strtoll(v, &end, 10);
        if (end == v || errno || d < 0 || a->rank == ARRAY_MAX_RANK) {
            cgc_error("%s: the .npy header's 'shape' is not a tuple of at most %d sizes",
                      where, ARRAY_MAX_RANK);
            return -1;
        }
        if (d > 0 && a->count > INT64_MAX / 8 / d) {
            cgc_error("%s: the .npy header's shape has more than 2^60 elements", where);
            return -1;
        }
        a->shape[a->rank++] = d, a->count *= d;
        v = end;
    }
}

/* The .npy header of B[0..n) as A (data and all); -1 after an error. */
static int npy_parse(const char *where, const uint8_t *b, size_t n, Array *a)
{
    if (n < 10 || memcmp(b, "\x93NUMPY", 6) != 0) {
        cgc_error("%s: not a .npy array (it does not begin with NumPy's magic bytes)", where);
        return -1;
    }
    size_t at = b[6] == 1 ? 10 : 12;
    uint64_t len = n < at ? 0 : le(b + 8, (int)at - 8);
    if (b[6] < 1 || b[6] > 3 || n < at || len > NPY_MAX_HEADER || len > n - at) {
        cgc_error("%s: a .npy header of version %d.%d and %llu bytes does not fit the file's %zu",
                  where, b[6], b[7], (unsigned long long)len, n);
        return -1;
    }
    char *h = xstrndup((const char *)b + at, (size_t)len);
    const char *fortran = npy_key(h, "'fortran_order'");
    int type = npy_descr(where, npy_key(h, "'descr'"));
    int rc = type < 0 || npy_shape(where, npy_key(h, "'shape'"), a) < 0 ? -1 : 0;
    if (rc == 0 && (!fortran || strncmp(fortran, "False", 5) != 0)) {
        cgc_error("%s: the array is stored in Fortran order; save np.ascontiguousarray(a)", where);
        rc = -1;
    }
    free(h);
    if (rc < 0) return -1;
    a->type = (ArrayType)type;
    uint64_t want = (uint64_t)a->count * (uint64_t)TYPES[type].size, have = n - at - len;
    if (want != have) {
        char shape[160] = "";
        for (int k = 0, w = 0; k < a->rank && w < (int)sizeof shape; k++)
            w += snprintf(shape + w, sizeof shape - (size_t)w, "%s%lld", k ? ", " : "", (long long)a->shape[k]);
        cgc_error("%s: its header says %s of shape (%s): %llu bytes of data; the file holds %llu%s",
                  where, TYPES[type].numpy, shape, (unsigned long long)want, (unsigned long long)have,
                  want > have ? " (truncated?)" : "");
        return -1;
    }
    a->data = b + at + len;
    return 0;
}

void arrays_npy_header(FILE *f, const char *descr, const int64_t *shape, int rank)
{
    char dict[512], dims[320] = "";
    for (int k = 0, w = 0; k < rank && w < (int)sizeof dims; k++)   /* as NumPy: (5,), (5, 256) */
        w += snprintf(dims + w, sizeof dims - (size_t)w, "%s%lld%s", k ? ", " : "", (long long)shape[k],
                      rank == 1 ? "," : "");
    int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                       descr, dims);
    int pad = (64 - (10 + len + 1) % 64) % 64;   /* the data starts at a multiple of 64 */
    unsigned header = (unsigned)(len + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc((int)(header & 0xff), f), fputc((int)(header >> 8), f);
    fprintf(f, "%s%*s\n", dict, pad, "");
}

/* ---- .npz ---- */

/* A member of the archive, from its central directory entry. */
typedef struct ZipMember {
    char *name;
    int method, flags;
    uint32_t crc;
    uint64_t csize, usize, local;
} ZipMember;

typedef struct Zip {
    const char *path;
    const uint8_t *b;
    size_t n;
    ZipMember *m;
    int count;
} Zip;

/* The zip64 extra field of entry E (its fields present where E's are 0xffffffff). */
static void zip64_extra(const uint8_t *x, size_t len, ZipMember *m)
{
    for (size_t at = 0; at + 4 <= len;) {
        uint64_t id = le(x + at, 2), size = le(x + at + 2, 2), f = at + 4;
        if (id == 1) {
            if (m->usize == 0xffffffffu && f + 8 <= at + 4 + size && f + 8 <= len) m->usize = le(x + f, 8), f += 8;
            if (m->csize == 0xffffffffu && f + 8 <= at + 4 + size && f + 8 <= len) m->csize = le(x + f, 8), f += 8;
            if (m->local == 0xffffffffu && f + 8 <= at + 4 + size && f + 8 <= len) m->local = le(x + f, 8);
            return;
        }
        at += 4 + size;
    }
}

static int zip_bad(const Zip *z, const char *what)
{
    cgc_error("%s: not a readable .npz (zip) archive: %s", z->path, what);
    return -1;
}

/* The end of the central directory: its entries, size and offset (zip64's when there). */
static int zip_end(Zip *z, uint64_t *entries, uint64_t *offset)
{
    if (z->n < 22) return zip_bad(z, "shorter than an empty archive");
    size_t lo = z->n > 22 + 65535 ? z->n - 22 - 65535 : 0, e = z->n - 22;   /* a comment may follow */
    while (memcmp(z->b + e, "PK\5\6", 4) != 0)
        if (e-- == lo) return zip_bad(z, "no end of central directory record");
    *entries = le(z->b + e + 10, 2), *offset = le(z->b + e + 16, 4);
    if ((*entries == 0xffff || *offset == 0xffffffffu) && e >= 20 && memcmp(z->b + e - 20, "PK\6\7", 4) == 0) {
        uint64_t at = le(z->b + e - 20 + 8, 8);
        if (z->n < 56 || at > z->n - 56 || memcmp(z->b + at, "PK\6\6", 4) != 0)
            return zip_bad(z, "a damaged zip64 record");
        *entries = le(z->b + at + 32, 8), *offset = le(z->b + at + 48, 8);
    }
    if (*offset > z->n || *entries > z->n / 46) return zip_bad(z, "its directory lies outside the file");
    return 0;
}

/* The central directory's entries into Z->m. */
static int zip_read(Zip *z)
{
    uint64_t entries, at;
    if (zip_end(z, &entries, &at) < 0) return -1;
    z->m = xcalloc((size_t)entries + 1, sizeof *z->m);
    for (uint64_t i = 0; i < entries; i++) {
        if (at + 46 > z->n || memcmp(z->b + at, "PK\1\2", 4) != 0) return zip_bad(z, "a damaged directory entry");
        const uint8_t *e = z->b + at;
        uint64_t name = le(e + 28, 2), extra = le(e + 30, 2), comment = le(e + 32, 2);
        if (at + 46 + name + extra + comment > z->n) return zip_bad(z, "a directory entry past its end");
        ZipMember *m = &z->m[z->count++];
        *m = (ZipMember){ xstrndup((const char *)e + 46, (size_t)name), (int)le(e + 10, 2),
                          (int)le(e + 8, 2), (uint32_t)le(e + 16, 4), le(e + 20, 4), le(e + 24, 4),
                          le(e + 42, 4) };
        zip64_extra(e + 46 + name, (size_t)extra, m);
        at += 46 + name + extra + comment;
    }
    return 0;
}

/* Member M's bytes: in place when stored, else inflated into memory S owns; NULL after
 * an error naming WHERE. */
static const uint8_t *zip_member(ArraySet *s, const Zip *z, const ZipMember *m, const char *where)
{
    const uint8_t *l = m->local <= z->n ? z->b + m->local : NULL;
    if (!l || z->n - m->local < 30 || memcmp(l, "PK\3\4", 4) != 0) {
        cgc_error("%s: its local header is missing or damaged", where);
        return NULL;
    }
    uint64_t data = m->local + 30 + le(l + 26, 2) + le(l + 28, 2);
    if (data > z->n || m->csize > z->n - data) {
        cgc_error("%s: %llu bytes past the archive's end (truncated?)", where, (unsigned long long)m->csize);
        return NULL;
    }
    if (m->flags & 1 || (m->method != 0 && m->method != 8)) {
        cgc_error("%s: %s; np.savez and np.savez_compressed write neither", where,
                  m->flags & 1 ? "encrypted" : "compressed by a method other than deflate");
        return NULL;
    }
    const uint8_t *bytes = z->b + data;
    if (m->method == 0 && m->csize != m->usize) {
        cgc_error("%s: stored, but its sizes differ (%llu and %llu bytes)", where,
                  (unsigned long long)m->csize, (unsigned long long)m->usize);
        return NULL;
    }
    if (m->method == 8) {
        if (m->usize / INFLATE_RATIO > m->csize + 1) {
            cgc_error("%s: claims %llu bytes from %llu compressed, more than deflate can give",
                      where, (unsigned long long)m->usize, (unsigned long long)m->csize);
            return NULL;
        }
        uint8_t *out = xmalloc(m->usize ? (size_t)m->usize : 1);
        s->owned = xrealloc(s->owned, (size_t)(s->nowned + 1) * sizeof *s->owned);
        s->owned[s->nowned++] = out;
        z_stream zs = { .next_in = (Bytef *)bytes, .next_out = out };
        int rc = inflateInit2(&zs, -MAX_WBITS);
        uint64_t in_left = m->csize, out_left = m->usize;
        while (rc == Z_OK) {   /* zlib counts in uInt: feed and drain in pieces */
            zs.avail_in = in_left > (1u << 30) ? 1u << 30 : (uInt)in_left;
            zs.avail_out = out_left > (1u << 30) ? 1u << 30 : (uInt)out_left;
            uInt ai = zs.avail_in, ao = zs.avail_out;
            rc = inflate(&zs, Z_NO_FLUSH);
            in_left -= ai - zs.avail_in, out_left -= ao - zs.avail_out;
            if (rc == Z_OK && ai == zs.avail_in && ao == zs.avail_out) rc = Z_DATA_ERROR;
        }
        inflateEnd(&zs);
        if (rc != Z_STREAM_END || out_left != 0) {
            cgc_error("%s: its compressed data is damaged or shorter than its size says", where);
            return NULL;
        }
        bytes = out;
    }
    uLong crc = crc32(0, Z_NULL, 0);
    for (uint64_t at = 0; at < m->usize; at += 1u << 30)
        crc = crc32(crc, bytes + at, (uInt)(m->usize - at > (1u << 30) ? 1u << 30 : m->usize - at));
    if (crc != m->crc) {
        cgc_error("%s: damaged: its CRC-32 does not match its bytes", where);
        return NULL;
    }
    return bytes;
}

/* "a.npy", "b.npy" as "a, b" into BUF, for messages. */
static const char *zip_names(const Zip *z, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < z->count && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s'%s'", i ? ", " : "", diag_quote(z->m[i].name, 40));
    return z->count ? buf : "nothing";
}

static int open_npz(ArraySet *s, const char *path, const uint8_t *b, size_t n, const char *const *names)
{
    Zip z = { path, b, n, NULL, 0 };
    int rc = zip_read(&z);
    for (int i = 0; rc == 0 && i < s->n; i++) {
        char member[512], where[1024], list[512];
        snprintf(member, sizeof member, "%s.npy", names[i]);
        const ZipMember *m = NULL;
        for (int k = 0; k < z.count && !m; k++)
            if (strcmp(z.m[k].name, member) == 0) m = &z.m[k];
        snprintf(where, sizeof where, "%s (%s)", path, member);
        const uint8_t *bytes = m ? zip_member(s, &z, m, where) : NULL;
        if (!m) cgc_error("%s: no array '%s' (%s); the archive holds %s", path, names[i], member,
                          zip_names(&z, list, sizeof list));
        rc = bytes && npy_parse(where, bytes, (size_t)m->usize, &s->arrays[i]) == 0 ? 0 : -1;
    }
    for (int k = 0; k < z.count; k++) free(z.m[k].name);
    free(z.m);
    return rc;
}

/* ---- safetensors and directories ---- */

static int open_st(ArraySet *s, const char *path, const char *const *names)
{
    if (!(s->st = st_map(path))) return -1;
    for (int i = 0; i < s->n; i++) {
        const StTensor *t = st_find(s->st, names[i]);
        if (!t) {
            char list[512] = "";
            for (int k = 0, at = 0; k < st_count(s->st) && at < (int)sizeof list; k++)
                at += snprintf(list + at, sizeof list - (size_t)at, "%s'%s'", k ? ", " : "",
                               diag_quote(st_get(s->st, k)->name, 40));
            cgc_error("%s: no tensor '%s'; the file holds %s", path, names[i], *list ? list : "none");
            return -1;
        }
        Array *a = &s->arrays[i];
        int type = 0;
        while (type < NTYPES && strcmp(TYPES[type].st, t->dtype) != 0) type++;
        if (type == NTYPES) {
            cgc_error("%s: tensor '%s' is %s, which cgc does not read", path, names[i], t->dtype);
            return -1;
        }
        a->type = (ArrayType)type, a->rank = t->rank, a->count = 1, a->data = t->data;
        for (int k = 0; k < t->rank; k++) a->count *= a->shape[k] = t->shape[k];
    }
    return 0;
}

static int open_dir(ArraySet *s, const char *path, const char *const *names)
{
    for (int i = 0; i < s->n; i++) {
        char file[4096];
        snprintf(file, sizeof file, "%s/%s.npy", path, names[i]);
        size_t n;
        struct stat st;
        if (stat(file, &st) != 0) {
            cgc_error("%s: no %s.npy for the input '%s'", path, names[i], names[i]);
            return -1;
        }
        const uint8_t *b = map_file(s, file, &n);
        if (!b || npy_parse(file, b, n, &s->arrays[i]) < 0) return -1;
    }
    return 0;
}

ArraySet *arrays_open(const char *path, const char *const *names, int n)
{
    ArraySet *s = xcalloc(1, sizeof *s);
    s->n = n;
    s->arrays = xcalloc((size_t)n + 1, sizeof *s->arrays);
    for (int i = 0; i < n; i++) s->arrays[i].name = xstrdup(names[i]);
    struct stat st;
    int rc = -1;
    size_t len = 0;
    const uint8_t *b = NULL;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        s->format = "a directory of .npy files";
        rc = open_dir(s, path, names);
    } else if ((b = map_file(s, path, &len)) && len >= 4 && memcmp(b, "PK", 2) == 0) {
        s->format = "an .npz archive";
        rc = open_npz(s, path, b, len, names);
    } else if (b && len >= 6 && memcmp(b, "\x93NUMPY", 6) == 0 && n == 1) {
        s->format = "an .npy array";
        rc = npy_parse(path, b, len, &s->arrays[0]);
    } else if (b && len >= 6 && memcmp(b, "\x93NUMPY", 6) == 0) {
        cgc_error("%s: one .npy array; the inputs need one each: a directory with NAME.npy for "
                  "each input, or an .npz archive (np.savez)", path);
    } else if (b) {
        s->format = "a safetensors file";
        rc = open_st(s, path, names);
    }
    if (rc == 0) return s;
    arrays_free(s);
    return NULL;
}
