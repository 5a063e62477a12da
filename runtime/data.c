/* data.c: training data for the CPU runtime (see data.h).
 *
 * Three sources. IDX files (the MNIST family's format: two zero bytes, a type byte, a rank
 * byte, big-endian u32 dimensions, then the values) are read through zlib, which takes
 * gzip and plain files alike, and validated before anything trusts them: a header may
 * claim gigabytes in a file of a hundred bytes, so the payload is read in chunks into a
 * buffer that only grows as far as the file really goes. Synthetic data is drawn from the
 * seed: normal features and labels from a fixed random "teacher", so that a model trained
 * on it has something to learn. A text file is mapped, never read whole: a corpus larger
 * than memory trains, and each rank touches only the pages of its own windows.
 *
 * The result is a Dataset shaped for the model's inputs (input 0 the features, input 1
 * the labels): rows in memory, or a text's windows read from the mapping, plus the epoch
 * order (a seeded Fisher-Yates shuffle) and row gathering for batches.
 */
#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../base/outfile.h"
#include "../base/rng.h"
#include "../base/text.h"
#include "arrays.h"
#include "csv.h"

/* IDX payloads are at most 4 GiB (the format's u32 dimensions could claim more; no real
 * dataset does, and refusing early keeps every size below in range). */
#define IDX_MAX_BYTES ((uint64_t)1 << 32)
enum {
    IDX_TYPE_UBYTE = 0x08,
    IDX_FIRST_CHUNK = 16 << 20,     /* the payload buffer starts here and doubles */
    IDX_READ_CHUNK = 64 << 20,      /* bytes per gzread call (its length is an unsigned) */
};

/* Synthetic data is held in memory whole; beyond this many floats it is surely a typo. */
#define SYNTHETIC_MAX_VALUES ((int64_t)1 << 31)

/* Text is bytes: an embedding and a loss over them need this many rows and classes. */
enum { TEXT_VOCAB = 256 };

/* Counter ranges of the RNG_SYNTHETIC stream, far apart so they never overlap. */
#define SYNTH_FEATURES ((uint64_t)0)
#define SYNTH_TEACHER ((uint64_t)1 << 60)

/* ------------------------------------------------------------------------------------ */
/* IDX files                                                                            */
/* ------------------------------------------------------------------------------------ */

/* How an IDX payload is named in messages: MNIST-style files hold labels (rank 1) or
 * images (rank 3); anything else is just data. */
static const char *idx_payload_name(int rank)
{
    if (rank == 1) return "label data";
    if (rank >= 3) return "image data";
    return "data";
}

/* zlib's account of why a read failed: the OS error, or what was wrong with the gzip
 * stream ("invalid block type", "unexpected end of file"). */
static const char *idx_read_error(gzFile f)
{
    int code;
    const char *msg = gzerror(f, &code);
    if (code == Z_ERRNO) return strerror(errno);
    return msg && *msg ? msg : "read error";
}

/* Reads up to N bytes (N may exceed what one gzread takes). Returns the count read, or -1
 * on a read error (reported). A short count means the end of the data. */
static int64_t idx_read_bytes(gzFile f, const char *path, uint8_t *buf, uint64_t n)
{
    uint64_t have = 0;
    while (have < n) {
        uint64_t want = n - have < IDX_READ_CHUNK ? n - have : IDX_READ_CHUNK;
        int got = gzread(f, buf + have, (unsigned)want);
        if (got < 0) {
            cgc_error("%s: cannot read: %s", path, idx_read_error(f));
            return -1;
        }
        if (got == 0) break;
        have += (uint64_t)got;
    }
    return (int64_t)have;
}

/* The 4-byte magic: 0x00 0x00, the type byte, the rank. */
static int idx_check_magic(const char *path, const uint8_t magic[4], int64_t got)
{
    if (got < 4) {
        cgc_error("%s: not an IDX file: only %lld bytes long, shorter than the 4-byte header",
                  path, (long long)got);
        return -1;
    }
    if (magic[0] != 0 || magic[1] != 0) {
        cgc_error("%s: not an IDX file: it starts with 0x%02X 0x%02X, not 0x00 0x00", path,
                  magic[0], magic[1]);
        return -1;
    }
    if (magic[2] != IDX_TYPE_UBYTE) {
        cgc_error("%s: unsupported IDX data type 0x%02X (only unsigned bytes, 0x08)", path,
                  magic[2]);
        return -1;
    }
    if (magic[3] < 1 || magic[3] > IDX_MAX_RANK) {
        cgc_error("%s: IDX rank %d is not supported (1 to %d dimensions)", path, magic[3],
                  IDX_MAX_RANK);
        return -1;
    }
    return 0;
}

/* Reads the RANK big-endian u32 dimensions and returns their product (the payload size),
 * or -1 after an error: a truncated header, a zero dimension, or more than 4 GiB. */
static int64_t idx_read_dims(gzFile f, const char *path, int rank, int64_t dims[IDX_MAX_RANK])
{
    uint8_t raw[4 * IDX_MAX_RANK];
    int64_t got = idx_read_bytes(f, path, raw, 4 * (uint64_t)rank);
    if (got < 0) return -1;
    if (got < 4 * rank) {
        cgc_error("%s: truncated: the IDX header needs %d bytes of dimensions, found %lld",
                  path, 4 * rank, (long long)got);
        return -1;
    }
    uint64_t total = 1;
    for (int i = 0; i < rank; i++) {
        const uint8_t *b = raw + 4 * i;
        uint64_t d = (uint64_t)b[0] << 24 | (uint64_t)b[1] << 16 | (uint64_t)b[2] << 8 | b[3];
        if (d == 0) {
            cgc_error("%s: IDX dimension %d is 0", path, i + 1);
            return -1;
        }
        /* Each factor is below 2^32 and the running product at most 2^32, so checking
         * before multiplying keeps everything within 64 bits. */
        if (total > IDX_MAX_BYTES / d) {
            cgc_error("%s: IDX dimensions claim more than 4 GiB of data", path);
            return -1;
        }
        total *= d;
        dims[i] = (int64_t)d;
    }
    return (int64_t)total;
}

/* Reads exactly TOTAL payload bytes, growing the buffer only as the data really arrives,
 * then makes sure nothing follows. Returns the buffer, or NULL after an error. */
static uint8_t *idx_read_payload(gzFile f, const char *path, int rank, uint64_t total)
{
    uint64_t cap = total < IDX_FIRST_CHUNK ? total : IDX_FIRST_CHUNK;
    uint8_t *buf = xmalloc(cap);
    uint64_t have = 0;
    for (;;) {
        int64_t got = idx_read_bytes(f, path, buf + have, cap - have);
        if (got < 0) goto fail;
        have += (uint64_t)got;
        if (have < cap || cap == total) break;
        cap = cap * 2 < total ? cap * 2 : total;
        buf = xrealloc(buf, cap);
    }
    if (have < total) {
        cgc_error("%s: truncated: expected %llu bytes of %s, found %llu", path,
                  (unsigned long long)total, idx_payload_name(rank), (unsigned long long)have);
        goto fail;
    }
    uint8_t extra[4096];
    int64_t more = idx_read_bytes(f, path, extra, sizeof extra);
    if (more < 0) goto fail;
    if (more > 0) {
        cgc_error("%s: unexpected bytes after the %llu bytes of %s its header describes",
                  path, (unsigned long long)total, idx_payload_name(rank));
        goto fail;
    }
    return buf;
fail:
    free(buf);
    return NULL;
}

int idx_read(const char *path, int *rank, int64_t dims[IDX_MAX_RANK], uint8_t **bytes)
{
    *bytes = NULL;
    struct stat st;
    int fd = open_regular(path, &st);
    if (fd == -1) {
        cgc_error("%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (fd == -2) {
        cgc_error("%s: is %s, not an IDX file; put the dataset's files there", path,
                  file_kind(st.st_mode));
        return -1;
    }
    if (out_protect_read(path, OUT_READ_BY_RUN) != 0) {
        close(fd);
        return -1;
    }
    errno = 0;
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        cgc_error("%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
        close(fd);
        return -1;
    }
    gzbuffer(f, 1 << 20);
    uint8_t magic[4];
    int64_t got = idx_read_bytes(f, path, magic, 4);
    int64_t total = -1;
    if (got >= 0 && idx_check_magic(path, magic, got) == 0) {
        *rank = magic[3];
        total = idx_read_dims(f, path, *rank, dims);
    }
    if (total >= 0) *bytes = idx_read_payload(f, path, *rank, (uint64_t)total);
    gzclose(f);
    return *bytes ? 0 : -1;
}

/* ------------------------------------------------------------------------------------ */
/* Errors about the model's inputs                                                      */
/* ------------------------------------------------------------------------------------ */

/* An error about the model itself: at LOC in the .net file when we have it, else plain. */
static void input_error(Source *src, SrcLoc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void input_error(Source *src, SrcLoc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (src && loc.line > 0) {   /* else no line of the file said it: a flag did */
        diag_verror(src, loc, fmt, ap);
    } else {
        char msg[512];
        vsnprintf(msg, sizeof msg, fmt, ap);
        cgc_error("%s", msg);
    }
    va_end(ap);
}

/* Values per sample of input I: the product of its dimensions after the batch. Every one
 * must be a number, since the data is laid out before any batch is bound. Returns -1
 * after an error. */
static int64_t input_row(const IrProgram *p, Source *src, int i)
{
    const IrInput *in = &p->inputs[i];
    int64_t row = 1;
    for (int k = 1; k < in->shape.rank; k++) {
        int64_t d = in->shape.dim[k];
        if (IR_DIM_IS_SYM(d)) {
            input_error(src, in->loc,
                        "input '%s': dimension %d is the symbol '%s'; data needs every "
                        "dimension after the batch to be a number",
                        in->name, k + 1, p->syms[IR_DIM_SYMBOL(d)].name);
            return -1;
        }
        if (d > 0 && row > SYNTHETIC_MAX_VALUES / d) {
            input_error(src, in->loc,
                        "input '%s': more than 2^31 values per sample is too many to load",
                        in->name);
            return -1;
        }
        row *= d;
    }
    return row;
}

/* What the data must produce for the model's inputs. */
typedef struct InputPlan {
    int64_t x_row;
    int64_t x_tokens;   /* i32 features: their values are below it (an embedding's rows); 0: f32 */
    int64_t y_row;      /* 0: no labels (one input) */
    bool y_int;
} InputPlan;

int data_check_text_inputs(const IrProgram *p, Source *src)
{
    int64_t t = p->cfg.text_context;
    if (p->ninputs != 2) {
        input_error(src, p->cfg.data_loc, "text data provides two inputs (the tokens and the next "
                    "tokens, i32[N, %lld] each); the model declares %d", (long long)t, p->ninputs);
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        const IrInput *in = &p->inputs[i];
        char buf[128];
        if (in->dtype == DT_I32 && in->shape.rank == 2 && in->shape.dim[1] == t) continue;
        input_error(src, in->loc, "input '%s' is %s%s; text(context = %lld) gives i32[%s, %lld]",
                    in->name, ir_dtype_name(in->dtype), ir_shape_str(p, &in->shape, buf, sizeof buf),
                    (long long)t, p->nsyms > 0 ? p->syms[0].name : "N", (long long)t);
        return -1;
    }
    const IrInput *x = &p->inputs[0];
    if (x->index_rows < TEXT_VOCAB) {
        input_error(src, x->loc, "input '%s' holds bytes 0 to 255, but %s", x->name,
                    x->index_rows ? "an embedding that reads it has fewer than 256 rows: make its "
                                    "vocabulary 256" : "no embedding reads it");
        return -1;
    }
    if (p->num_classes > 0 && p->num_classes < TEXT_VOCAB) {
        input_error(src, p->inputs[1].loc, "input '%s' holds bytes 0 to 255, but the loss has %d "
                    "classes: make it 256", p->inputs[1].name, p->num_classes);
        return -1;
    }
    return 0;
}

/* Checks the inputs fit what data can provide: float features (or tokens an embedding
 * reads, from synthetic data or a text's bytes), and optionally either i32 class ids or
 * float targets. */
static int plan_inputs(const IrProgram *p, Source *src, InputPlan *plan)
{
    SrcLoc data_loc = p->cfg.data_loc;
    if (p->cfg.data == DATA_TEXT) {
        if (data_check_text_inputs(p, src) < 0) return -1;
        *plan = (InputPlan){.x_row = p->cfg.text_context, .x_tokens = TEXT_VOCAB,
                            .y_row = p->cfg.text_context, .y_int = true};
        return 0;
    }
    if (p->ninputs < 1 || p->ninputs > 2) {
        input_error(src, data_loc,
                    "data provides two inputs (features, labels); the model declares %d",
                    p->ninputs);
        return -1;
    }
    const IrInput *x = &p->inputs[0];
    plan->x_tokens = x->dtype == DT_I32 ? x->index_rows : 0;
    if (x->dtype == DT_I32 && p->cfg.data == DATA_SYNTHETIC && x->index_rows == 0) {
        input_error(src, x->loc, "input '%s' is i32 but no embedding reads it: synthetic data "
                    "cannot tell which tokens to draw", x->name);
        return -1;
    }
    if (!ir_dtype_is_float(x->dtype) && plan->x_tokens == 0) {
        input_error(src, x->loc, "input '%s' is %s, but data features are floating point",
                    x->name, ir_dtype_name(x->dtype));
        return -1;
    }
    if (plan->x_tokens && p->cfg.data == DATA_IDX) {
        input_error(src, x->loc, "input '%s' is i32, but IDX images are floating point features",
                    x->name);
        return -1;
    }
    plan->x_row = input_row(p, src, 0);
    if (plan->x_row < 0) return -1;
    plan->y_row = 0;
    plan->y_int = false;
    if (p->ninputs == 1) return 0;

    const IrInput *y = &p->inputs[1];
    plan->y_int = y->dtype == DT_I32;
    if (plan->y_int && y->shape.rank != 1 && p->cfg.data == DATA_IDX) {
        char buf[128];
        input_error(src, y->loc,
                    "input '%s' is i32%s; IDX labels are one class id per sample, i32[%s]",
                    y->name, ir_shape_str(p, &y->shape, buf, sizeof buf),
                    p->nsyms > 0 ? p->syms[0].name : "N");
        return -1;
    }
    plan->y_row = input_row(p, src, 1);
    return plan->y_row < 0 ? -1 : 0;
}

/* ------------------------------------------------------------------------------------ */
/* IDX datasets                                                                         */
/* ------------------------------------------------------------------------------------ */

static const char *const IDX_NAMES[4] = {
    "train-images-idx3-ubyte", "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte",
};

/* Something is at PATH: a file, or what idx_read will say is not one. */
static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static char *path_join(const char *dir, const char *name)
{
    size_t ld = strlen(dir), ln = strlen(name);
    char *s = xmalloc(ld + ln + 2);
    memcpy(s, dir, ld);
    size_t at = ld;
    if (ld > 0 && dir[ld - 1] != '/') s[at++] = '/';
    memcpy(s + at, name, ln + 1);
    return s;
}

/* DIR/NAME, or DIR/NAME.gz when only that exists; NULL when neither does. Whatever is
 * there counts: a directory or a FIFO in a file's place is an error, not a missing file. */
static char *idx_file(const char *dir, const char *name)
{
    char *plain = path_join(dir, name);
    if (file_exists(plain)) return plain;
    size_t n = strlen(plain);
    char *gz = xrealloc(plain, n + 4);
    memcpy(gz + n, ".gz", 4);
    if (file_exists(gz)) return gz;
    free(gz);
    return NULL;
}

static bool is_data_dir(const char *dir)
{
    char *f = idx_file(dir, IDX_NAMES[0]);
    free(f);
    return f != NULL;
}

/* The directory the .net file lives in ("." for a bare file name). */
static char *net_dir(const char *net_path)
{
    const char *slash = net_path ? strrchr(net_path, '/') : NULL;
    if (!slash) return xstrdup(".");
    if (slash == net_path) return xstrdup("/");
    return xstrndup(net_path, (size_t)(slash - net_path));
}

/* The places a relative data directory is looked for, in order: beside the .net file,
 * each directory of $CGC_DATA_PATH, /usr/share/datasets. An absolute one is just itself. */
static int data_candidates(const char *dir, const char *net_path, char ***out)
{
    int n = 0, cap = 4;
    char **c = xmalloc(cap * sizeof *c);
    if (dir[0] == '/') {
        c[n++] = xstrdup(dir);
        *out = c;
        return n;
    }
    char *base = net_dir(net_path);
    c[n++] = path_join(base, dir);
    free(base);
    const char *env = getenv("CGC_DATA_PATH");
    for (const char *s = env; s && *s;) {
        const char *colon = strchr(s, ':');
        size_t len = colon ? (size_t)(colon - s) : strlen(s);
        if (len > 0) {
            if (n + 1 >= cap) c = xrealloc(c, (cap *= 2) * sizeof *c);
            char *d = xstrndup(s, len);
            c[n++] = path_join(d, dir);
            free(d);
        }
        s += len + (colon ? 1 : 0);
    }
    if (n + 1 >= cap) c = xrealloc(c, (cap *= 2) * sizeof *c);
    c[n++] = path_join("/usr/share/datasets", dir);
    *out = c;
    return n;
}

/* PLACES joined by ", ", for a message (malloc'd). */
static char *join_places(char **places, int n)
{
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(places[i]) + 2;
    char *list = xcalloc(1, len);
    for (int i = 0; i < n; i++) strcat(strcat(list, i ? ", " : ""), places[i]);
    return list;
}

static void free_strings(char **s, int n)
{
    for (int i = 0; i < n; i++) free(s[i]);
    free(s);
}

/* The first of PLACES that exists but is no directory, said as "PLACE is a FIFO" into
 * BUF; "" when there is none. */
static const char *not_a_dir(char **places, int n, char *buf, size_t len)
{
    struct stat st;
    buf[0] = '\0';
    for (int i = 0; i < n && !buf[0]; i++)
        if (stat(places[i], &st) == 0 && !S_ISDIR(st.st_mode))
            snprintf(buf, len, "; %s is %s, not a directory", places[i], file_kind(st.st_mode));
    return buf;
}

/* Reports that DIR is nowhere: at the `data` entry, with every place looked in, which of
 * them is something else than a directory, and for Fashion-MNIST the package it is in. */
static void report_missing_dir(const IrProgram *p, Source *src, char **places, int n)
{
    char *list = join_places(places, n), other[PATH_MAX + 64];
    const char *dir = p->cfg.data_dir;
    not_a_dir(places, n, other, sizeof other);
    const char *hint = strcmp(dir, "fashion-mnist") == 0 && !other[0]
                           ? "on Debian: apt-get install dataset-fashion-mnist" : NULL;
    if (src && p->cfg.data_loc.line > 0) {
        diag_error(src, p->cfg.data_loc, "data directory \"%s\" not found (no %s[.gz] in %s)%s",
                   dir, IDX_NAMES[0], list, other);
        if (hint) diag_note(src, (SrcLoc){0, 0}, "%s", hint);
    } else {
        cgc_error("data directory \"%s\" not found (no %s[.gz] in %s)%s", dir, IDX_NAMES[0],
                  list, other);
        if (hint) fprintf(stderr, "cgc: note: %s\n", hint);
    }
    free(list);
}

/* The first candidate directory holding the training images, or NULL after an error. */
static char *find_data_dir(const IrProgram *p, Source *src, const char *net_path)
{
    char **places;
    int n = data_candidates(p->cfg.data_dir, net_path, &places);
    char *found = NULL;
    for (int i = 0; i < n && !found; i++)
        if (is_data_dir(places[i])) found = xstrdup(places[i]);
    if (!found) report_missing_dir(p, src, places, n);
    free_strings(places, n);
    return found;
}

/* "60000 x 28 x 28" */
static const char *dims_str(const int64_t *dims, int rank, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < rank && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? " x " : "", (long long)dims[i]);
    return buf;
}

/* Images: rank 2 or more, each image's values matching input 0's row. Fills d->x. */
static int load_images(const char *path, const InputPlan *plan, double scale, Dataset *d)
{
    int rank;
    int64_t dims[IDX_MAX_RANK];
    uint8_t *bytes;
    if (idx_read(path, &rank, dims, &bytes) < 0) return -1;
    int64_t per = 1;
    for (int i = 1; i < rank; i++) per *= dims[i];
    if (rank < 2 || per != plan->x_row) {
        char buf[96];
        cgc_error("%s: images of %lld values each (%s), but the model's first input takes "
                  "%lld values per sample",
                  path, (long long)per, dims_str(dims, rank, buf, sizeof buf),
                  (long long)plan->x_row);
        free(bytes);
        return -1;
    }
    /* One table lookup per byte: the value is byte * scale rounded once from double. */
    float table[256];
    for (int v = 0; v < 256; v++) table[v] = (float)(v * scale);
    d->n = dims[0];
    d->x_row = per;
    size_t count = (size_t)(d->n * per);
    d->x = xmalloc(count * sizeof *d->x);
    for (size_t i = 0; i < count; i++) d->x[i] = table[bytes[i]];
    free(bytes);
    return 0;
}

/* Labels: rank 1, one per image, below the model's class count when it has one. */
static int load_labels(const char *path, const char *images, const IrProgram *p,
                       const InputPlan *plan, Dataset *d)
{
    int rank;
    int64_t dims[IDX_MAX_RANK];
    uint8_t *bytes;
    if (idx_read(path, &rank, dims, &bytes) < 0) return -1;
    int status = -1;
    if (rank != 1) {
        char buf[96];
        cgc_error("%s: labels must be one byte per sample (rank 1), found %s", path,
                  dims_str(dims, rank, buf, sizeof buf));
    } else if (dims[0] != d->n) {
        cgc_error("%s: %lld labels, but %s has %lld images", path, (long long)dims[0], images,
                  (long long)d->n);
    } else {
        status = 0;
    }
    for (int64_t i = 0; status == 0 && plan->y_int && p->num_classes > 0 && i < d->n; i++) {
        if (bytes[i] >= p->num_classes) {
            cgc_error("%s: label %d at index %lld is out of range for the model's %d classes",
                      path, bytes[i], (long long)i, p->num_classes);
            status = -1;
        }
    }
    if (status == 0) {
        d->y_row = 1;
        d->y_int = plan->y_int;
        if (plan->y_int) {
            d->y_i32 = xmalloc((size_t)d->n * sizeof *d->y_i32);
            for (int64_t i = 0; i < d->n; i++) d->y_i32[i] = bytes[i];
        } else {
            d->y_f32 = xmalloc((size_t)d->n * sizeof *d->y_f32);
            for (int64_t i = 0; i < d->n; i++) d->y_f32[i] = bytes[i];
        }
    }
    free(bytes);
    return status;
}

/* One split from its images and labels files. */
static int load_split(const IrProgram *p, const InputPlan *plan, const char *images,
                      const char *labels, Dataset *d)
{
    if (load_images(images, plan, p->cfg.data_scale, d) < 0) return -1;
    if (plan->y_row == 0) return 0;
    return load_labels(labels, images, p, plan, d);
}

/* Idx labels are one byte per sample: input 1, when declared, must take one value each. */
static int check_idx_labels(const IrProgram *p, Source *src, const InputPlan *plan)
{
    if (plan->y_row == 0 || plan->y_row == 1) return 0;
    const IrInput *y = &p->inputs[1];
    char buf[128];
    input_error(src, y->loc,
                "input '%s' is %s%s, but idx data gives one label per sample "
                "(i32[N] class ids, or a float per sample)",
                y->name, ir_dtype_name(y->dtype), ir_shape_str(p, &y->shape, buf, sizeof buf));
    return -1;
}

/* The four files in DIR (labels only when the model takes them). The test split is
 * optional, but half of it is an error. */
static int load_idx_dir(const IrProgram *p, const InputPlan *plan, const char *dir,
                        DataSplits *out)
{
    char *f[4];
    for (int i = 0; i < 4; i++) f[i] = idx_file(dir, IDX_NAMES[i]);
    int status = -1;
    if (plan->y_row > 0 && !f[1]) {
        cgc_error("%s: no %s[.gz] beside %s", dir, IDX_NAMES[1], f[0]);
    } else if ((f[2] != NULL) != (f[3] != NULL) && plan->y_row > 0) {
        cgc_error("%s: %s found without %s[.gz]", dir, f[2] ? f[2] : f[3],
                  IDX_NAMES[f[2] ? 3 : 2]);
    } else if (load_split(p, plan, f[0], f[1], &out->train) == 0) {
        out->has_test = f[2] != NULL;
        status = out->has_test ? load_split(p, plan, f[2], f[3], &out->test) : 0;
    }
    for (int i = 0; i < 4; i++) free(f[i]);
    return status;
}

static char *describe(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *describe(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return xstrdup(buf);
}

static int load_idx(const IrProgram *p, Source *src, const char *net_path,
                    const InputPlan *plan, DataSplits *out)
{
    CGC_ASSERT(p->cfg.data_dir != NULL);
    if (check_idx_labels(p, src, plan) < 0) return -1;
    char *dir = find_data_dir(p, src, net_path);
    if (!dir) return -1;
    int status = load_idx_dir(p, plan, dir, out);
    if (status == 0) {
        if (out->has_test)
            out->description = describe("%s: %lld train, %lld test, from %s", p->cfg.data_dir,
                                        (long long)out->train.n, (long long)out->test.n, dir);
        else
            out->description = describe("%s: %lld train, no test split, from %s",
                                        p->cfg.data_dir, (long long)out->train.n, dir);
    }
    free(dir);
    return status;
}

/* ------------------------------------------------------------------------------------ */
/* Synthetic data                                                                       */
/* ------------------------------------------------------------------------------------ */

/* A fixed random linear map (the teacher) of ROWS x COLS, scaled by 1/sqrt(COLS) so its
 * outputs have about unit variance for standard normal inputs. */
static float *teacher_weights(uint64_t seed, int64_t rows, int64_t cols)
{
    float *w = xmalloc((size_t)(rows * cols) * sizeof *w);
    double scale = 1.0 / sqrt((double)cols);
    for (int64_t i = 0; i < rows * cols; i++)
        w[i] = (float)(rng_normal(seed, RNG_SYNTHETIC, SYNTH_TEACHER + (uint64_t)i) * scale);
    return w;
}

/* OUT[r] = W[r, :] . X for the ROWS outputs of one sample. */
static void teacher_apply(const float *w, const float *x, int64_t rows, int64_t cols,
                          float *out)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *wr = w + r * cols;
        float acc = 0;
        for (int64_t c = 0; c < cols; c++) acc += wr[c] * x[c];
        out[r] = acc;
    }
}

static int32_t argmax(const float *v, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return (int32_t)best;
}

/* docs/language.md ("Data"): random features and labels of the inputs' shapes. Labels drawn
 * independently of the features would give a model nothing to learn, so both come from a
 * random teacher instead: features are standard normal; each class id is the argmax of
 * its own num_classes outputs (2 when the loss does not say) of a fixed random linear map
 * of the features; float targets are that map itself, shaped as input 1's sample. All of
 * it is a pure function of the seed. */
static int load_synthetic(const IrProgram *p, Source *src, const InputPlan *plan,
                          DataSplits *out)
{
    int64_t n = p->cfg.synthetic_samples;
    int64_t wide = plan->x_row > plan->y_row ? plan->x_row : plan->y_row;
    if (wide < 1) wide = 1;
    if (n <= 0) {
        input_error(src, p->cfg.data_loc, "synthetic data needs at least one sample, not %lld",
                    (long long)n);
        return -1;
    }
    if (n > SYNTHETIC_MAX_VALUES / wide) {
        input_error(src, p->cfg.data_loc,
                    "synthetic data of %lld samples x %lld values is too large to hold",
                    (long long)n, (long long)wide);
        return -1;
    }
    uint64_t seed = p->cfg.seed;
    Dataset *d = &out->train;
    d->n = n;
    d->x_row = plan->x_row;
    d->x = xmalloc((size_t)(n * plan->x_row) * sizeof *d->x);
    for (int64_t i = 0; i < n * plan->x_row; i++)
        d->x[i] = (float)rng_normal(seed, RNG_SYNTHETIC, SYNTH_FEATURES + (uint64_t)i);
    if (plan->x_tokens) {   /* tokens drawn uniformly; the teacher sees each as token / rows */
        d->x_int = true;
        d->x_i32 = xmalloc((size_t)(n * plan->x_row) * sizeof *d->x_i32);
        for (int64_t i = 0; i < n * plan->x_row; i++) {
            d->x_i32[i] = (int32_t)rng_below(seed, RNG_SYNTHETIC, SYNTH_FEATURES + (uint64_t)i,
                                             (uint64_t)plan->x_tokens);
            d->x[i] = (float)d->x_i32[i] / (float)plan->x_tokens;
        }
    }

    d->y_row = plan->y_row;
    d->y_int = plan->y_int;
    if (plan->y_row > 0) {
        int64_t classes = p->num_classes > 0 ? p->num_classes : 2;
        int64_t outs = plan->y_int ? classes * plan->y_row : plan->y_row;
        if (outs > SYNTHETIC_MAX_VALUES / (plan->x_row > 0 ? plan->x_row : 1)) {
            input_error(src, p->cfg.data_loc, "synthetic labels of %lld outputs from %lld features "
                        "need a teacher too large to hold", (long long)outs, (long long)plan->x_row);
            return -1;
        }
        float *w = teacher_weights(seed, outs, plan->x_row);
        float *scores = xmalloc((size_t)outs * sizeof *scores);
        if (plan->y_int) d->y_i32 = xmalloc((size_t)(n * plan->y_row) * sizeof *d->y_i32);
        else d->y_f32 = xmalloc((size_t)(n * plan->y_row) * sizeof *d->y_f32);
        for (int64_t i = 0; i < n; i++) {
            const float *x = d->x + i * plan->x_row;
            if (plan->y_int) {   /* a class per label: the argmax of its own CLASSES scores */
                teacher_apply(w, x, outs, plan->x_row, scores);
                for (int64_t t = 0; t < plan->y_row; t++)
                    d->y_i32[i * plan->y_row + t] = argmax(scores + t * classes, classes);
            } else {
                teacher_apply(w, x, outs, plan->x_row, d->y_f32 + i * plan->y_row);
            }
        }
        free(scores);
        free(w);
    }
    if (d->x_int) {   /* the teacher's view of the tokens */
        free(d->x);
        d->x = NULL;
    }
    out->has_test = false;
    out->description = describe("synthetic: %lld samples, no test split (seed %llu)",
                                (long long)n, (unsigned long long)seed);
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Text files                                                                           */
/* ------------------------------------------------------------------------------------ */

/* The first place a relative FILE is looked for (data_candidates) where something is, or
 * NULL after saying where it looked. */
/* The data file NAME (a relative one found as data_candidates says), or NULL after an
 * error saying where it was looked for, ending in HINT. */
static char *find_file(const IrProgram *p, Source *src, const char *name, const char *net_path,
                       const char *what, const char *hint)
{
    char **places;
    int n = data_candidates(name, net_path, &places);
    char *found = NULL;
    for (int i = 0; i < n && !found; i++)
        if (file_exists(places[i])) found = xstrdup(places[i]);
    if (!found) {
        char *list = join_places(places, n);
        input_error(src, p->cfg.data_loc, "%s \"%s\" not found (looked for %s)%s", what, name,
                    list, hint);
        free(list);
    }
    free_strings(places, n);
    return found;
}

static char *find_text_file(const IrProgram *p, Source *src, const char *net_path)
{
    return find_file(p, src, p->cfg.data_dir, net_path, "text file",
                     strstr(p->cfg.data_dir, "fortunes") ? "; on Debian: apt-get install fortunes" : "");
}

/* Windows of W bytes in LEN; for training (SHIFTS) as many as leave at least W - 1 bytes
 * to spare, so that an epoch's phase (data_phase) can start them at any position of a
 * window, or one when only one fits. */
static void text_split(Dataset *d, const uint8_t *bytes, int64_t len, int64_t context, bool shifts)
{
    int64_t w = context + 1, n = len / w;
    if (shifts && n > 1 && len - n * w < w - 1) n--;
    *d = (Dataset){.n = n, .x_row = context, .x_int = true, .y_row = context, .y_int = true,
                   .text = bytes, .text_bytes = len, .window = w};
}

/* Maps the regular file PATH (open as FD, ST its status) and splits it: the last tenth
 * is the evaluation split, and each split must hold a window. */
static int map_text(const IrProgram *p, const char *path, int fd, const struct stat *st,
                    DataSplits *out)
{
    int64_t t = p->cfg.text_context, w = t + 1, len = (int64_t)st->st_size;
    if (len < 10 * w) {
        cgc_error("%s: %s%lld bytes is too short for context %lld: the evaluation split, the file's "
                  "last tenth, must hold a window of %lld bytes, so the file needs at least %lld",
                  path, len ? "" : "the file is empty: ", (long long)len, (long long)t, (long long)w,
                  (long long)(10 * w));
        return -1;
    }
    void *map = mmap(NULL, (size_t)len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        cgc_error("%s: cannot map the file: %s", path, strerror(errno));
        return -1;
    }
    out->map = map;
    out->map_bytes = (size_t)len;
    int64_t test = len / 10;
    text_split(&out->train, map, len - test, t, true);
    text_split(&out->test, (const uint8_t *)map + (len - test), test, t, false);
    out->has_test = true;
    out->description = describe("text: %lld bytes, %lld train and %lld test windows of %lld, from %s",
                                (long long)len, (long long)out->train.n, (long long)out->test.n,
                                (long long)w, path);
    return 0;
}

static int load_text(const IrProgram *p, Source *src, const char *net_path, DataSplits *out)
{
    char *path = find_text_file(p, src, net_path);
    if (!path) return -1;
    struct stat st;
    int fd = open_regular(path, &st), rc = -1;
    if (fd == -2) cgc_error("%s is %s, not a text file", path, file_kind(st.st_mode));
    else if (fd < 0) cgc_error("%s: cannot open: %s", path, strerror(errno));
    else if (out_protect_read(path, OUT_READ_BY_RUN) == 0) rc = map_text(p, path, fd, &st, out);
    if (fd >= 0) close(fd);
    free(path);
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Arrays: tensors("TRAIN", test = "TEST", scale = S)                                     */
/* ------------------------------------------------------------------------------------ */

/* Input I's array A is [count, the input's dimensions after the batch]; else an error
 * naming the array, the file and both shapes. */
static int check_array_shape(const IrProgram *p, const char *path, const Array *a, int i,
                             int64_t count)
{
    const IrInput *in = &p->inputs[i];
    bool ok = a->rank == in->shape.rank && a->rank >= 1 && a->shape[0] == count;
    for (int k = 1; ok && k < a->rank; k++) ok = a->shape[k] == in->shape.dim[k];
    if (ok) return 0;
    char got[128], want[128];
    int64_t dims[ARRAY_MAX_RANK];
    memcpy(dims, in->shape.dim, sizeof(int64_t) * (size_t)in->shape.rank);
    dims[0] = count;
    cgc_error("%s: '%s' is %s [%s], but the input '%s' needs [%s]%s", path, a->name,
              array_type_name(a->type), dims_str(a->shape, a->rank, got, sizeof got), in->name,
              dims_str(dims, in->shape.rank, want, sizeof want),
              i > 0 && a->rank >= 1 && a->shape[0] != count ? ": one row per example of the first input" : "");
    return -1;
}

/* Elements FROM .. FROM + N - 1 of A as f32 into OUT: floats as they are (float64
 * rounded), integers times SCALE as IDX bytes are ((float)(v * scale)). */
static void array_floats(const Array *a, int64_t from, int64_t n, double scale, float *out)
{
    if (a->type == ARR_U8) {
        const uint8_t *b = (const uint8_t *)a->data + from;
        for (int64_t i = 0; i < n; i++) out[i] = (float)(b[i] * scale);
    } else if (a->type == ARR_F32) {
        memcpy(out, (const float *)a->data + from, (size_t)n * sizeof *out);
    } else {
        bool is_float = array_type_is_float(a->type);
        for (int64_t i = 0; i < n; i++) {
            double v = array_value(a, from + i);
            out[i] = is_float ? (float)v : (float)(v * scale);
        }
    }
}

/* Elements FROM .. FROM + N - 1 of A (integers, checked) as i32 into OUT. */
static void array_int32s(const Array *a, int64_t from, int64_t n, int32_t *out)
{
    for (int64_t i = 0; i < n; i++) out[i] = (int32_t)array_value(a, from + i);
}

/* A's NaN values, counted and warned of; floats given a scale, warned of too. */
static void check_features(const char *path, const Array *a, double scale)
{
    if (!array_type_is_float(a->type)) return;
    int64_t nans = 0, first = -1;
    for (int64_t i = 0; i < a->count; i++) {
        double v = array_value(a, i);
        if (v != v && nans++ == 0) first = i;
    }
    if (nans)
        cgc_warning("%s: '%s' holds %lld NaN value%s (the first at element %lld): a loss over "
                    "them is NaN", path, a->name, (long long)nans, nans == 1 ? "" : "s",
                    (long long)first);
    if (scale != 1)
        cgc_warning("%s: '%s' is %s: scale = %g multiplies integer features only; these are "
                    "taken as they are", path, a->name, array_type_name(a->type), scale);
}

/* Integers (tokens or class ids) in [0, LIMIT); -1 after an error naming the first
 * element that is not, WHAT saying what bounds them. */
static int check_ints(const char *path, const Array *a, int64_t limit, const char *what)
{
    if (array_type_is_float(a->type)) {
        cgc_error("%s: '%s' is %s, but it feeds an i32 input: integers (%s) are needed", path,
                  a->name, array_type_name(a->type), what);
        return -1;
    }
    for (int64_t i = 0; i < a->count; i++) {
        double v = array_value(a, i);
        if (v < 0 || v >= (double)limit) {
            cgc_error("%s: '%s' holds %.0f at element %lld, outside 0 to %lld (%s)", path, a->name,
                      v, (long long)i, (long long)limit - 1, what);
            return -1;
        }
    }
    return 0;
}

/* Input 0's array A as D's features, as PLAN says, checked. */
static int tensor_features(const IrProgram *p, const InputPlan *plan, const char *path,
                           const Array *a, Dataset *d)
{
    d->x_row = plan->x_row;
    d->x_file = a;
    d->scale = p->cfg.data_scale;
    d->x_int = plan->x_tokens > 0;
    if (d->x_int) return check_ints(path, a, plan->x_tokens, "tokens, below the embedding's rows");
    check_features(path, a, p->cfg.data_scale);
    return 0;
}

/* Input 1's array A as D's labels: class ids below the loss's classes, or f32 targets. */
static int tensor_labels(const IrProgram *p, const InputPlan *plan, const char *path,
                         const Array *a, Dataset *d)
{
    d->y_row = plan->y_row;
    d->y_int = plan->y_int;
    d->y_file = a;
    if (!plan->y_int) return 0;
    int64_t classes = p->num_classes > 0 ? p->num_classes : INT32_MAX;
    return check_ints(path, a, classes, p->num_classes > 0 ? "class ids, below the loss's classes"
                                                           : "i32 values");
}

/* One split from the arrays of PATH named as the model's inputs, which *SET keeps. */
static int load_tensor_split(const IrProgram *p, const InputPlan *plan, const char *path,
                             Dataset *d, ArraySet **set)
{
    const char *names[2] = { p->inputs[0].name, p->ninputs > 1 ? p->inputs[1].name : NULL };
    ArraySet *s = *set = arrays_open(path, names, p->ninputs);
    if (!s) return -1;
    const Array *x = arrays_get(s, 0);
    d->n = x->rank >= 1 ? x->shape[0] : 0;
    int rc = 0;
    for (int i = 0; i < p->ninputs && rc == 0; i++) rc = check_array_shape(p, path, arrays_get(s, i), i, d->n);
    if (rc == 0 && d->n == 0) {
        cgc_error("%s: '%s' holds no examples", path, x->name);
        rc = -1;
    }
    if (rc == 0) rc = tensor_features(p, plan, path, x, d);
    if (rc == 0 && p->ninputs > 1) rc = tensor_labels(p, plan, path, arrays_get(s, 1), d);
    if (rc == 0 && p->cfg.shuffle) arrays_read_randomly(s);   /* the checks above read it in order */
    return rc;
}

/* Rows [FIRST, n) of D moved to T, D keeping the others. */
static void split_rows(Dataset *d, int64_t first, Dataset *t)
{
    int64_t n = d->n - first;
    if (d->x_file) {   /* the same arrays, further on */
        *t = *d;
        t->n = n, t->first = d->first + first;
        d->n = first;
        return;
    }
    *t = (Dataset){ .n = n, .x_row = d->x_row, .x_int = d->x_int, .y_row = d->y_row, .y_int = d->y_int };
    size_t xs = d->x_int ? sizeof(int32_t) : sizeof(float), ys = d->y_int ? sizeof(int32_t) : sizeof(float);
    void *x = xmalloc((size_t)(n * d->x_row) * xs + 1), *y = d->y_row ? xmalloc((size_t)(n * d->y_row) * ys + 1) : NULL;
    memcpy(x, (char *)(d->x_int ? (void *)d->x_i32 : (void *)d->x) + (size_t)(first * d->x_row) * xs,
           (size_t)(n * d->x_row) * xs);
    if (y) memcpy(y, (char *)(d->y_int ? (void *)d->y_i32 : (void *)d->y_f32) + (size_t)(first * d->y_row) * ys,
                  (size_t)(n * d->y_row) * ys);
    if (d->x_int) t->x_i32 = x;
    else t->x = x;
    if (d->y_int) t->y_i32 = y;
    else t->y_f32 = y;
    d->n = first;
}

/* Without a test file (TEST false), the last tenth of TRAIN's examples is the test split. */
static int hold_out(const char *train, bool test, DataSplits *out)
{
    if (!test && out->train.n < 10) {
        cgc_error("%s: %lld examples; the evaluation split, the last tenth, needs 10 at least "
                  "(or give test = \"FILE\")", train, (long long)out->train.n);
        return -1;
    }
    if (!test) split_rows(&out->train, out->train.n - out->train.n / 10, &out->test);
    out->has_test = true;
    return 0;
}

static int load_tensors(const IrProgram *p, Source *src, const char *net_path,
                        const InputPlan *plan, DataSplits *out)
{
    char *train = find_file(p, src, p->cfg.data_dir, net_path, "tensors: the file", "");
    char *test = train && p->cfg.data_test
                     ? find_file(p, src, p->cfg.data_test, net_path, "tensors: the test file", "") : NULL;
    int rc = !train || (p->cfg.data_test && !test) ? -1 : load_tensor_split(p, plan, train, &out->train, &out->arrays[0]);
    if (rc == 0 && test) rc = load_tensor_split(p, plan, test, &out->test, &out->arrays[1]);
    rc = rc == 0 ? hold_out(train, test != NULL, out) : -1;
    if (rc == 0)
        out->description = describe("tensors: %lld train, %lld test%s, from %s (%s)%s%s",
                                    (long long)out->train.n, (long long)out->test.n,
                                    test ? "" : " (its last tenth)", train, arrays_format(out->arrays[0]),
                                    test ? " and " : "", test ? test : "");
    free(train);
    free(test);
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* CSV tables: csv("FILE", test = "FILE2", label = "COLUMN", scale = S)                  */
/* ------------------------------------------------------------------------------------ */

/* A table being read into a Dataset: the header's columns, then row by row. */
typedef struct Table {
    const IrProgram *p;
    const InputPlan *plan;
    const char *path;
    Dataset *d;
    int columns, label;         /* label: the labels' column, or -1 */
    char **names;
    ArraySpill *spill;          /* the rows converted: features (f32), then labels */
    float *row;                 /* the record's features */
    union { int32_t i; float f; } y;   /* and its label */
    int64_t nans, first_nan_line;
    bool predicting;            /* features only: a label column is left out when there */
} Table;

/* The header's field COL. */
static int table_name(Table *t, int col, const char *text)
{
    t->names = xrealloc(t->names, (size_t)(col + 1) * sizeof *t->names);
    t->names[col] = xstrdup(text);
    t->columns = col + 1;
    return 0;
}

/* After the header: the labels' column found, and the features' count that of input 0. */
static int table_columns(Table *t)
{
    const char *want = t->p->cfg.data_label;
    for (int c = 0; want && c < t->columns; c++)
        if (strcmp(t->names[c], want) == 0) {
            if (t->label >= 0) {
                cgc_error("%s: two columns are named '%s'; the labels' must be one", t->path, want);
                return -1;
            }
            t->label = c;
        }
    if (t->plan->y_row > 0 && !want) {
        cgc_error("%s: the model's second input '%s' takes labels: say which column holds them "
                  "(csv(\"%s\", label = \"%s\"))", t->path, t->p->inputs[1].name,
                  t->p->cfg.data_dir, t->names[t->columns - 1]);
        return -1;
    }
    if (want && t->label < 0 && !t->predicting) {
        char list[512] = "";
        for (int c = 0, at = 0; c < t->columns && at < (int)sizeof list; c++)
            at += snprintf(list + at, sizeof list - (size_t)at, "%s'%s'", c ? ", " : "", diag_quote(t->names[c], 40));
        cgc_error("%s: no column '%s' for the labels; the header names %s", t->path, want, list);
        return -1;
    }
    int64_t features = t->columns - (t->label >= 0);
    if (features != t->plan->x_row || (t->plan->y_row > 1)) {
        cgc_error("%s: %lld feature columns and %s, but the model's first input takes %lld values "
                  "per example%s", t->path, (long long)features,
                  t->label >= 0 ? "one label" : "no labels", (long long)t->plan->x_row,
                  t->plan->y_row > 1 ? " and its second more than one label" : "");
        return -1;
    }
    return 0;
}

/* Cell TEXT of line LINE, column COL, as a number; -1 after an error. */
static int table_number(const Table *t, int64_t line, int col, const char *text, double *v)
{
    char *end;
    while (*text == ' ' || *text == '\t') text++;
    *v = strtod(text, &end);
    while (*end == ' ' || *end == '\t') end++;
    if (end != text && *end == '\0') return 0;
    char what[96];
    snprintf(what, sizeof what, "'%s' is not a number", diag_quote(text, 40));
    cgc_error("%s: line %lld, column %d ('%s'): %s", t->path, (long long)line, col + 1,
              diag_quote(t->names[col], 40), *text ? what : "an empty cell; every cell must be a number");
    return -1;
}

static int table_cell(void *ctx, int64_t record, int64_t line, int col, const char *text, size_t len)
{
    Table *t = ctx;
    (void)len;
    if (record == 0) return table_name(t, col, text);
    if (col >= t->columns) return 0;   /* the record's count says so after it */
    const Dataset *d = t->d;
    double v;
    if (table_number(t, line, col, text, &v) < 0) return -1;
    if (col != t->label) {
        t->row[col - (t->label >= 0 && col > t->label)] = (float)(v * t->p->cfg.data_scale);
        if (v != v && t->nans++ == 0) t->first_nan_line = line;
        return 0;
    }
    if (!d->y_row) return 0;
    if (!d->y_int) return t->y.f = (float)v, 0;
    int64_t classes = t->p->num_classes > 0 ? t->p->num_classes : INT32_MAX;
    if (v == floor(v) && v >= 0 && v < (double)classes) return t->y.i = (int32_t)v, 0;
    cgc_error("%s: line %lld: the label %s is not a class id from 0 to %lld", t->path,
              (long long)line, diag_quote(text, 40), (long long)classes - 1);
    return -1;
}

static int table_record(void *ctx, int64_t record, int64_t line, int fields)
{
    Table *t = ctx;
    if (record == 0) return table_columns(t);
    if (fields != t->columns) {
        cgc_error("%s: line %lld has %d field%s; the header has %d", t->path, (long long)line,
                  fields, fields == 1 ? "" : "s", t->columns);
        return -1;
    }
    arrays_spill_row(t->spill, 0, t->row);
    if (t->d->y_row) arrays_spill_row(t->spill, 1, &t->y);
    t->d->n = record;
    return 0;
}

/* One split from the CSV file PATH, its rows converted into *SET's arrays; for PREDICTING,
 * the label column may be absent. */
static int load_csv_split(const IrProgram *p, const InputPlan *plan, const char *path, Dataset *d,
                          ArraySet **set, bool predicting)
{
    *d = (Dataset){ .x_row = plan->x_row, .y_row = plan->y_row ? 1 : 0, .y_int = plan->y_int, .scale = 1 };
    Table t = { .p = p, .plan = plan, .path = path, .d = d, .label = -1, .predicting = predicting };
    const char *names[2] = {"features", "labels"};
    ArrayType types[2] = {ARR_F32, d->y_int ? ARR_I32 : ARR_F32};
    int64_t cols[2] = {d->x_row, 0};
    if (!(t.spill = arrays_spill_new(d->y_row ? 2 : 1, names, types, cols, path))) return -1;
    t.row = xcalloc((size_t)d->x_row + 1, sizeof *t.row);
    int rc = csv_read(path, table_cell, table_record, &t);
    if (rc == 0 && t.columns == 0) {
        cgc_error("%s: empty: a header line and a row per example are needed", path);
        rc = -1;
    } else if (rc == 0 && d->n == 0) {
        cgc_error("%s: a header and no rows", path);
        rc = -1;
    }
    if (rc == 0 && t.nans)
        cgc_warning("%s: %lld NaN feature value%s (the first on line %lld): a loss over them is NaN",
                    path, (long long)t.nans, t.nans == 1 ? "" : "s", (long long)t.first_nan_line);
    for (int c = 0; c < t.columns; c++) free(t.names[c]);
    free(t.names);
    free(t.row);
    *set = rc == 0 ? arrays_spill_done(t.spill, d->n) : NULL;
    if (rc != 0) arrays_spill_free(t.spill);
    if (!*set) return -1;
    d->x_file = arrays_get(*set, 0);
    d->y_file = d->y_row ? arrays_get(*set, 1) : NULL;
    return 0;
}

static int load_csv(const IrProgram *p, Source *src, const char *net_path, const InputPlan *plan,
                    DataSplits *out)
{
    if (plan->x_tokens) {
        input_error(src, p->inputs[0].loc, "input '%s' is i32, but CSV features are floating "
                    "point", p->inputs[0].name);
        return -1;
    }
    char *train = find_file(p, src, p->cfg.data_dir, net_path, "csv: the file", "");
    char *test = train && p->cfg.data_test
                     ? find_file(p, src, p->cfg.data_test, net_path, "csv: the test file", "") : NULL;
    int rc = !train || (p->cfg.data_test && !test) ? -1 : load_csv_split(p, plan, train, &out->train, &out->arrays[0], false);
    if (rc == 0 && test) rc = load_csv_split(p, plan, test, &out->test, &out->arrays[1], false);
    rc = rc == 0 ? hold_out(train, test != NULL, out) : -1;
    if (rc == 0)
        out->description = describe("csv: %lld train, %lld test%s, from %s%s%s", (long long)out->train.n,
                                    (long long)out->test.n, test ? "" : " (its last tenth)", train,
                                    test ? " and " : "", test ? test : "");
    free(train);
    free(test);
    return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Entry points                                                                         */
/* ------------------------------------------------------------------------------------ */

int data_load(const IrProgram *p, Source *src, const char *net_path, DataSplits *out)
{
    memset(out, 0, sizeof *out);
    InputPlan plan;
    if (plan_inputs(p, src, &plan) < 0) return -1;
    int status = p->cfg.data == DATA_IDX       ? load_idx(p, src, net_path, &plan, out)
                 : p->cfg.data == DATA_TEXT    ? load_text(p, src, net_path, out)
                 : p->cfg.data == DATA_TENSORS ? load_tensors(p, src, net_path, &plan, out)
                 : p->cfg.data == DATA_CSV     ? load_csv(p, src, net_path, &plan, out)
                                               : load_synthetic(p, src, &plan, out);
    if (status < 0) data_free(out);
    return status;
}

int data_load_inputs(const IrProgram *p, Source *src, const char *path, DataSplits *out)
{
    memset(out, 0, sizeof *out);
    InputPlan plan = { .x_row = input_row(p, src, 0) };
    const IrInput *x = &p->inputs[0];
    plan.x_tokens = x->dtype == DT_I32 ? (x->index_rows ? x->index_rows : INT32_MAX) : 0;
    if (plan.x_row < 0) return -1;
    IrProgram one = *p;   /* the features alone: no second input to fill */
    one.ninputs = 1;
    int rc = text_ends_with(path, ".csv") && !plan.x_tokens
                 ? load_csv_split(&one, &plan, path, &out->train, &out->arrays[0], true)
                 : load_tensor_split(&one, &plan, path, &out->train, &out->arrays[0]);
    if (rc != 0) data_free(out);
    return rc;
}

static void dataset_free(Dataset *d)
{
    free(d->x);
    free(d->x_i32);
    free(d->y_i32);
    free(d->y_f32);
    memset(d, 0, sizeof *d);
}

void data_free(DataSplits *d)
{
    dataset_free(&d->train);
    dataset_free(&d->test);
    arrays_free(d->arrays[0]);
    arrays_free(d->arrays[1]);
    if (d->map) munmap(d->map, d->map_bytes);
    free(d->description);
    memset(d, 0, sizeof *d);
}

/* Fisher-Yates from the back: draw k (k = 0, 1, ...) picks the element for position
 * i = n-1-k among 0..i, with counter (epoch << 40) + k, so the order of an epoch depends
 * on nothing but the seed and the epoch number. */
void data_order(uint64_t seed, int64_t epoch, bool shuffle, int64_t n, int64_t *order)
{
    for (int64_t i = 0; i < n; i++) order[i] = i;
    if (!shuffle) return;
    uint64_t base = (uint64_t)epoch << 40;
    for (int64_t i = n - 1, k = 0; i > 0; i--, k++) {
        int64_t j = (int64_t)rng_below(seed, RNG_SHUFFLE, base + (uint64_t)k, (uint64_t)i + 1);
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

int64_t data_phase(const Dataset *d, uint64_t seed, int64_t epoch)
{
    if (!d->text) return 0;
    int64_t slack = d->text_bytes - d->n * d->window;
    int64_t span = slack < d->window - 1 ? slack : d->window - 1;
    return span > 0 ? (int64_t)rng_below(seed, RNG_TEXT, (uint64_t)epoch, (uint64_t)span + 1) : 0;
}

/* Text row ROW's window, starting at PHASE: its first x_row bytes into X, its last into
 * Y (when not NULL). */
void data_rank_rows(int rank, int ranks, int64_t *first, int64_t *count)
{
    int64_t n = *count, lo = n * rank / ranks, hi = n * (rank + 1) / ranks;
    *first += lo;
    *count = hi - lo;
}

static void gather_window(const Dataset *d, int64_t row, int64_t phase, int32_t *x, int32_t *y)
{
    CGC_ASSERT(phase >= 0 && phase + (row + 1) * d->window <= d->text_bytes);
    const uint8_t *w = d->text + phase + row * d->window;
    for (int64_t c = 0; c < d->x_row; c++) x[c] = w[c];
    for (int64_t c = 0; y && c < d->y_row; c++) y[c] = w[c + 1];
}

/* Row ROW of D's arrays, converted, as row R of X and Y. */
static void gather_file_row(const Dataset *d, int64_t row, int64_t r, void *x, void *y)
{
    if (d->x_int) array_int32s(d->x_file, row * d->x_row, d->x_row, (int32_t *)x + r * d->x_row);
    else array_floats(d->x_file, row * d->x_row, d->x_row, d->scale, (float *)x + r * d->x_row);
    if (d->y_row == 0 || !y) return;
    if (d->y_int) array_int32s(d->y_file, row * d->y_row, d->y_row, (int32_t *)y + r * d->y_row);
    else array_floats(d->y_file, row * d->y_row, d->y_row, 1, (float *)y + r * d->y_row);
}

void data_gather(const Dataset *d, const int64_t *order, int64_t start, int64_t count,
                 int64_t phase, void *x, void *y)
{
    for (int64_t r = 0; r < count; r++) {
        int64_t row = order ? order[start + r] : start + r;
        CGC_ASSERT(row >= 0 && row < d->n);
        if (d->text) {
            gather_window(d, row, phase, (int32_t *)x + r * d->x_row, y ? (int32_t *)y + r * d->y_row : NULL);
            continue;
        }
        if (d->x_file) {
            gather_file_row(d, d->first + row, r, x, y);
            continue;
        }
        if (d->x_int)
            memcpy((int32_t *)x + r * d->x_row, d->x_i32 + row * d->x_row,
                   (size_t)d->x_row * sizeof(int32_t));
        else
            memcpy((float *)x + r * d->x_row, d->x + row * d->x_row, (size_t)d->x_row * sizeof(float));
        if (d->y_row == 0 || !y) continue;
        if (d->y_int)
            memcpy((int32_t *)y + r * d->y_row, d->y_i32 + row * d->y_row,
                   (size_t)d->y_row * sizeof(int32_t));
        else
            memcpy((float *)y + r * d->y_row, d->y_f32 + row * d->y_row,
                   (size_t)d->y_row * sizeof(float));
    }
}
