/* test_idx.c: the IDX reader, data_load (IDX and synthetic), data_order, data_gather.
 *
 * Every IDX file here is written by the test into a fresh temporary directory, good ones
 * and each kind of bad one, so the exact error messages can be checked; stderr is
 * captured into a file for that. The real Fashion-MNIST is loaded too when installed.
 */
#include "runtime/data.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/check.h"
#include "tests/testfiles.h"


#define CHECK_CONTAINS(text, part)                                                     \
    do {                                                                               \
        const char *t_ = (text), *p_ = (part);                                         \
        check_count++;                                                                 \
        if (!strstr(t_, p_)) {                                                         \
            check_failures++;                                                          \
            fprintf(stderr, "%s:%d: expected \"%s\" in:\n%s\n", __FILE__, __LINE__, p_, t_); \
        }                                                                              \
    } while (0)

/* ---- writing IDX files ---- */


/* An IDX file: magic (0, 0, TYPE, RANK), dimensions, then NPAYLOAD bytes of PAYLOAD
 * (which need not match the dimensions: that is what the bad cases are for). */
static void write_idx(const char *path, int type, int rank, const uint32_t *dims,
                      const uint8_t *payload, size_t npayload, int gz)
{
    uint8_t head[4 + 4 * 8] = {0, 0, (uint8_t)type, (uint8_t)rank};
    for (int i = 0; i < rank; i++) {
        head[4 + 4 * i] = (uint8_t)(dims[i] >> 24);
        head[5 + 4 * i] = (uint8_t)(dims[i] >> 16);
        head[6 + 4 * i] = (uint8_t)(dims[i] >> 8);
        head[7 + 4 * i] = (uint8_t)dims[i];
    }
    size_t nhead = 4 + 4 * (size_t)rank;
    if (gz) {
        gzFile f = gzopen(path, "wb");
        CHECK(f != NULL);   /* the test's own file: what reads it then finds it missing */
        if (!f) return;
        gzwrite(f, head, (unsigned)nhead);
        if (npayload) gzwrite(f, payload, (unsigned)npayload);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL);
        if (!f) return;
        fwrite(head, 1, nhead, f);
        fwrite(payload, 1, npayload, f);
        fclose(f);
    }
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fwrite(p, 1, n, f);
    fclose(f);
}

static uint8_t payload[4096];

/* Reads PATH expecting failure and checks the message is exactly
 * "cgc: error: PATH: WHAT\n". */
static void expect_idx_error(const char *path, const char *what)
{
    int rank;
    int64_t dims[IDX_MAX_RANK];
    uint8_t *bytes = (uint8_t *)"untouched";
    capture_start();
    int rc = idx_read(path, &rank, dims, &bytes);
    const char *err = capture_end();
    CHECK_EQ_INT(rc, -1);
    CHECK(bytes == NULL);
    char want[1024];
    snprintf(want, sizeof want, "cgc: error: %s: %s\n", path, what);
    CHECK_STR(err, want);
}

static void test_good_files(void)
{
    uint32_t dims[3] = {3, 2, 2};
    for (int gz = 0; gz <= 1; gz++) {
        const char *path = tmp_path(gz ? "good.gz" : "good");
        write_idx(path, 0x08, 3, dims, payload, 12, gz);
        int rank = 0;
        int64_t d[IDX_MAX_RANK];
        uint8_t *bytes = NULL;
        CHECK_EQ_INT(idx_read(path, &rank, d, &bytes), 0);
        CHECK_EQ_INT(rank, 3);
        CHECK_EQ_INT(d[0], 3);
        CHECK_EQ_INT(d[1], 2);
        CHECK_EQ_INT(d[2], 2);
        CHECK(bytes && memcmp(bytes, payload, 12) == 0);
        free(bytes);
    }
}

static void test_bad_files(void)
{
    uint32_t dims[3] = {3, 2, 2};
    const char *p = tmp_path("bad");

    write_idx(p, 0x08, 3, dims, payload, 5, 0);
    expect_idx_error(p, "truncated: expected 12 bytes of image data, found 5");
    write_idx(p, 0x08, 1, dims, payload, 2, 1);
    expect_idx_error(p, "truncated: expected 3 bytes of label data, found 2");
    write_idx(p, 0x08, 3, dims, payload, 13, 0);
    expect_idx_error(p, "unexpected bytes after the 12 bytes of image data its header describes");
    write_idx(p, 0x0D, 3, dims, payload, 48, 0);
    expect_idx_error(p, "unsupported IDX data type 0x0D (only unsigned bytes, 0x08)");
    write_idx(p, 0x08, 0, dims, payload, 0, 0);
    expect_idx_error(p, "IDX rank 0 is not supported (1 to 4 dimensions)");
    write_idx(p, 0x08, 5, (uint32_t[]){1, 1, 1, 1, 1}, payload, 1, 0);
    expect_idx_error(p, "IDX rank 5 is not supported (1 to 4 dimensions)");
    write_idx(p, 0x08, 3, (uint32_t[]){3, 0, 2}, payload, 0, 0);
    expect_idx_error(p, "IDX dimension 2 is 0");
    write_idx(p, 0x08, 3, dims, payload, 12, 0);
    write_bytes(p, "\x01\x00\x08\x03", 4);
    expect_idx_error(p, "not an IDX file: it starts with 0x01 0x00, not 0x00 0x00");
    write_bytes(p, "\0\0", 2);
    expect_idx_error(p, "not an IDX file: only 2 bytes long, shorter than the 4-byte header");
    write_bytes(p, "\0\0\x08\x03\0\0\0\x03\0\0", 10);
    expect_idx_error(p, "truncated: the IDX header needs 12 bytes of dimensions, found 6");
    write_idx(p, 0x08, 3, (uint32_t[]){65536, 65536, 2}, payload, 0, 0);
    expect_idx_error(p, "IDX dimensions claim more than 4 GiB of data");
    expect_idx_error(tmp_path("missing"), "cannot open: No such file or directory");
}

/* Bytes of address space the process holds now (sanitizers reserve a lot up front). */
static rlim_t address_space_now(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (f) {
        if (fscanf(f, "%lu", &pages) != 1) pages = 0;
        fclose(f);
    }
    return (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE);
}

/* A header claiming 4 GiB in a tiny file must be refused without allocating 4 GiB: with
 * the address space capped at 1 GiB more than is in use, an up-front allocation would
 * end the test. */
static void test_huge_claim(void)
{
    const char *p = tmp_path("huge");
    write_idx(p, 0x08, 2, (uint32_t[]){65536, 65536}, payload, 100, 0);
    struct rlimit old, cap;
    getrlimit(RLIMIT_AS, &old);
    cap = old;
    cap.rlim_cur = address_space_now() + ((rlim_t)1 << 30);
    if (old.rlim_cur != RLIM_INFINITY && old.rlim_cur < cap.rlim_cur) cap.rlim_cur = old.rlim_cur;
    setrlimit(RLIMIT_AS, &cap);
    expect_idx_error(p, "truncated: expected 4294967296 bytes of data, found 100");
    setrlimit(RLIMIT_AS, &old);
}

/* A gzip stream cut in half: zlib notices, and so must we. */
static void test_cut_gzip(void)
{
    const char *p = tmp_path("cut.gz");
    uint8_t big[4096];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)(i * 7919 >> 3);
    write_idx(p, 0x08, 2, (uint32_t[]){64, 64}, big, sizeof big, 1);
    struct stat st;
    stat(p, &st);
    CHECK(truncate(p, st.st_size / 2) == 0);
    int rank;
    int64_t dims[IDX_MAX_RANK];
    uint8_t *bytes;
    capture_start();
    int rc = idx_read(p, &rank, dims, &bytes);
    const char *err = capture_end();
    CHECK_EQ_INT(rc, -1);
    CHECK_CONTAINS(err, "cgc: error: ");
    CHECK_CONTAINS(err, p);
}

/* ---- data_load on a small fake dataset ---- */

static IrProgram *make_program(int features, DType label_type, int label_rank, int classes,
                               const char *dir)
{
    IrProgram *p = ir_program_new();
    ir_add_symbol(p, "N", (SrcLoc){2, 14});
    ir_add_input(p, "x", DT_F32, (Shape){2, {IR_SYM(0), features}}, (SrcLoc){2, 11});
    if (label_rank > 0) {
        Shape s = {label_rank, {IR_SYM(0), 2, 2}};
        ir_add_input(p, "y", label_type, s, (SrcLoc){3, 11});
    }
    p->num_classes = classes;
    p->cfg.data = DATA_IDX;
    p->cfg.data_dir = strdup(dir);
    p->cfg.data_scale = 0.5;
    p->cfg.data_loc = (SrcLoc){6, 12};
    return p;
}

/* DIR with train (5 images of 2 x 3) and test (2 images) files; LABELS are the training
 * labels (NLABELS of them); gz picks the compressed names for the images. */
static void make_dataset(const char *dir, const uint8_t *labels, uint32_t nlabels, int gz)
{
    mkdir(dir, 0700);
    char path[512];
    uint8_t test_labels[2] = {2, 0};
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte%s", dir, gz ? ".gz" : "");
    write_idx(path, 0x08, 3, (uint32_t[]){5, 2, 3}, payload, 30, gz);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", dir);
    write_idx(path, 0x08, 1, &nlabels, labels, nlabels, 0);
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte%s", dir, gz ? ".gz" : "");
    write_idx(path, 0x08, 3, (uint32_t[]){2, 2, 3}, payload + 30, 12, gz);
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte.gz", dir);
    write_idx(path, 0x08, 1, (uint32_t[]){2}, test_labels, 2, 1);
}

static const uint8_t LABELS[5] = {0, 2, 1, 1, 0};

/* Whether S holds N samples of COLS values and class labels: what a check may then read,
 * the counts having come from the files. */
static bool holds(const Dataset *s, int64_t n, int64_t cols)
{
    return s->n == n && s->x_row == cols && s->x && s->y_int && s->y_i32;
}

static void test_load_good(void)
{
    for (int gz = 0; gz <= 1; gz++) {
        char *dir = tmp_path(gz ? "fake_gz" : "fake");
        make_dataset(dir, LABELS, 5, gz);
        IrProgram *p = make_program(6, DT_I32, 1, 3, dir);
        DataSplits d;
        CHECK_EQ_INT(data_load(p, NULL, NULL, &d), 0);
        CHECK_EQ_INT(d.train.n, 5);
        CHECK_EQ_INT(d.train.x_row, 6);
        CHECK_EQ_INT(d.train.y_row, 1);
        CHECK(d.train.y_int);
        /* the values are read only where the counts the files gave say they are there */
        if (holds(&d.train, 5, 6)) {
            for (int i = 0; i < 30; i++) CHECK_CLOSE(d.train.x[i], payload[i] * 0.5, 0, 1e-7);
            for (int i = 0; i < 5; i++) CHECK_EQ_INT(d.train.y_i32[i], LABELS[i]);
        }
        CHECK(d.has_test);
        CHECK_EQ_INT(d.test.n, 2);
        if (d.has_test && holds(&d.test, 2, 6)) {
            CHECK_CLOSE(d.test.x[11], payload[41] * 0.5, 0, 1e-7);
            CHECK_EQ_INT(d.test.y_i32[0], 2);
        }
        char want[512];
        snprintf(want, sizeof want, "%s: 5 train, 2 test, from %s", dir, dir);
        CHECK_STR(d.description, want);
        data_free(&d);
        ir_program_free(p);
    }
}

/* Labels given to an f32 input are the byte values as floats. */
static void test_load_float_labels(void)
{
    char *dir = tmp_path("fake");
    IrProgram *p = make_program(6, DT_F32, 1, 0, dir);
    DataSplits d;
    CHECK_EQ_INT(data_load(p, NULL, NULL, &d), 0);
    CHECK(!d.train.y_int);
    CHECK(d.train.y_f32 && d.train.y_f32[1] == 2.0f);
    data_free(&d);
    ir_program_free(p);
}

/* data_load on DIR with the program P, expecting exactly WANT on stderr. */
static void expect_load_error(IrProgram *p, Source *src, const char *net, const char *want)
{
    DataSplits d;
    capture_start();
    int rc = data_load(p, src, net, &d);
    const char *err = capture_end();
    CHECK_EQ_INT(rc, -1);
    CHECK(d.train.x == NULL && d.description == NULL);
    CHECK_STR(err, want);
}

static void test_load_errors(void)
{
    char want[1024];
    char *dir = tmp_path("fake_bad");

    make_dataset(dir, (const uint8_t[]){0, 1, 2, 1, 3}, 5, 0);
    IrProgram *p = make_program(6, DT_I32, 1, 3, dir);
    snprintf(want, sizeof want, "cgc: error: %s/train-labels-idx1-ubyte: label 3 at index 4 is "
             "out of range for the model's 3 classes\n", dir);
    expect_load_error(p, NULL, NULL, want);
    ir_program_free(p);

    make_dataset(dir, LABELS, 4, 0);
    p = make_program(6, DT_I32, 1, 3, dir);
    snprintf(want, sizeof want, "cgc: error: %s/train-labels-idx1-ubyte: 4 labels, but "
             "%s/train-images-idx3-ubyte has 5 images\n", dir, dir);
    expect_load_error(p, NULL, NULL, want);
    ir_program_free(p);

    make_dataset(dir, LABELS, 5, 0);
    p = make_program(7, DT_I32, 1, 3, dir);
    snprintf(want, sizeof want, "cgc: error: %s/train-images-idx3-ubyte: images of 6 values "
             "each (5 x 2 x 3), but the model's first input takes 7 values per sample\n", dir);
    expect_load_error(p, NULL, NULL, want);
    ir_program_free(p);

    p = make_program(6, DT_I32, 2, 3, dir);
    expect_load_error(p, NULL, NULL, "cgc: error: input 'y' is i32[N, 2]; IDX labels are "
                                     "one class id per sample, i32[N]\n");
    ir_program_free(p);

    p = make_program(6, DT_I32, 1, 3, dir);
    ir_add_input(p, "z", DT_F32, (Shape){1, {IR_SYM(0)}}, (SrcLoc){4, 11});
    expect_load_error(p, NULL, NULL, "cgc: error: data provides two inputs (features, labels); "
                                     "the model declares 3\n");
    ir_program_free(p);

    /* A symbolic dimension after the batch, reported at the input in the .net file. */
    p = make_program(6, DT_I32, 1, 3, dir);
    int t = ir_add_symbol(p, "T", (SrcLoc){2, 17});
    p->inputs[0].shape.dim[1] = IR_SYM(t);
    const char *text = "model m {\n    input x: f32[N, T]\n    input y: i32[N]\n}\n";
    Source *src = source_from_string("m.net", text, strlen(text));
    expect_load_error(p, src, "m.net",
                      "m.net:2:11: error: input 'x': dimension 2 is the symbol 'T'; data needs "
                      "every dimension after the batch to be a number\n"
                      "    input x: f32[N, T]\n"
                      "          ^\n");
    source_free(src);
    ir_program_free(p);
}

/* Relative directories: beside the .net file, then $CGC_DATA_PATH, then the system. */
static void test_search_path(void)
{
    char models[256], beside[256], root[256], net[300];
    snprintf(models, sizeof models, "%s/models", tmpdir);
    snprintf(beside, sizeof beside, "%s/models/beside", tmpdir);
    snprintf(root, sizeof root, "%s/root", tmpdir);
    snprintf(net, sizeof net, "%s/m.net", models);
    mkdir(models, 0700);
    mkdir(root, 0700);
    make_dataset(beside, LABELS, 5, 0);
    char in_root[300];
    snprintf(in_root, sizeof in_root, "%s/elsewhere", root);
    make_dataset(in_root, LABELS, 5, 1);

    IrProgram *p = make_program(6, DT_I32, 1, 3, "beside");
    DataSplits d;
    unsetenv("CGC_DATA_PATH");
    CHECK_EQ_INT(data_load(p, NULL, net, &d), 0);
    CHECK(d.description && strstr(d.description, beside));
    data_free(&d);
    ir_program_free(p);

    char env[600];
    snprintf(env, sizeof env, "%s/nothing::%s", tmpdir, root);
    setenv("CGC_DATA_PATH", env, 1);
    p = make_program(6, DT_I32, 1, 3, "elsewhere");
    CHECK_EQ_INT(data_load(p, NULL, net, &d), 0);
    CHECK(d.description && strstr(d.description, in_root));
    data_free(&d);
    ir_program_free(p);

    /* Not found: at the `data` entry, every place looked in; no package hint, which is
     * for Fashion-MNIST only. */
    p = make_program(6, DT_I32, 1, 3, "nowhere");
    const char *text = "model m {\n}\ntrain {\n}\n\ndata = idx(\"nowhere\")\n";
    Source *src = source_from_string("m.net", text, strlen(text));
    char want[2048];
    snprintf(want, sizeof want,
             "m.net:6:12: error: data directory \"nowhere\" not found (no "
             "train-images-idx3-ubyte[.gz] in %s/nowhere, %s/nothing/nowhere, %s/nowhere, "
             "/usr/share/datasets/nowhere)\n"
             "data = idx(\"nowhere\")\n"
             "           ^\n",
             models, tmpdir, root);
    expect_load_error(p, src, net, want);
    CHECK_EQ_INT(src->nerrors, 1);
    source_free(src);
    ir_program_free(p);
    unsetenv("CGC_DATA_PATH");
}

/* The installed Fashion-MNIST, when there is one: sizes, label range, and speed. */
static void test_fashion_mnist(void)
{
    struct stat st;
    if (stat("/usr/share/datasets/fashion-mnist", &st) != 0) {
        printf("fashion-mnist not installed; skipping that part\n");
        return;
    }
    IrProgram *p = ir_program_new();
    ir_add_symbol(p, "N", (SrcLoc){0, 0});
    ir_add_input(p, "x", DT_F32, (Shape){3, {IR_SYM(0), 28, 28}}, (SrcLoc){0, 0});
    ir_add_input(p, "y", DT_I32, (Shape){1, {IR_SYM(0)}}, (SrcLoc){0, 0});
    p->num_classes = 10;
    p->cfg.data = DATA_IDX;
    p->cfg.data_dir = strdup("fashion-mnist");
    p->cfg.data_scale = 1.0 / 255;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    DataSplits d;
    CHECK_EQ_INT(data_load(p, NULL, "/nonexistent/m.net", &d), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("fashion-mnist loaded in %.2f s\n", secs);
    CHECK_EQ_INT(d.train.n, 60000);
    CHECK_EQ_INT(d.test.n, 10000);
    CHECK_EQ_INT(d.train.x_row, 784);
    CHECK_STR(d.description,
              "fashion-mnist: 60000 train, 10000 test, from /usr/share/datasets/fashion-mnist");
    /* an installed copy of other sizes is read no further than its counts */
    bool sized = holds(&d.train, 60000, 784);
    float lo = 1, hi = 0;
    for (int64_t i = 0; sized && i < 60000 * 784; i++) {
        lo = d.train.x[i] < lo ? d.train.x[i] : lo;
        hi = d.train.x[i] > hi ? d.train.x[i] : hi;
    }
    CHECK(lo == 0.0f && hi == 1.0f);
    int counts[10] = {0};
    for (int64_t i = 0; sized && i < 60000; i++) {
        int32_t y = d.train.y_i32[i];
        if (y >= 0 && y < 10) counts[y]++;
    }
    for (int c = 0; c < 10; c++) CHECK_EQ_INT(counts[c], 6000);
    data_free(&d);
    ir_program_free(p);
}

/* ---- order, gather, synthetic ---- */

static int is_permutation(const int64_t *order, int64_t n)
{
    char seen[1000] = {0};
    for (int64_t i = 0; i < n; i++) {
        if (order[i] < 0 || order[i] >= n || seen[order[i]]) return 0;
        seen[order[i]] = 1;
    }
    return 1;
}

static void test_order(void)
{
    enum { N = 1000 };
    static int64_t a[N], b[N], c[N], e[N];
    data_order(7, 0, false, N, a);
    for (int i = 0; i < N; i++) CHECK_EQ_INT(a[i], i);
    data_order(7, 0, true, N, a);
    data_order(7, 0, true, N, b);
    data_order(7, 1, true, N, c);
    data_order(8, 0, true, N, e);
    CHECK(is_permutation(a, N) && is_permutation(c, N) && is_permutation(e, N));
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    CHECK(memcmp(a, e, sizeof a) != 0);
    int fixed = 0;
    for (int i = 0; i < N; i++) fixed += a[i] == i;
    CHECK(fixed < 10);   /* about 1 expected for a random permutation */
    data_order(7, 0, true, 1, a);
    CHECK_EQ_INT(a[0], 0);
    data_order(7, 0, true, 0, a);   /* nothing to do, and nothing must break */
}

static void test_gather(void)
{
    char *dir = tmp_path("fake");
    IrProgram *p = make_program(6, DT_I32, 1, 3, dir);
    DataSplits d;
    CHECK_EQ_INT(data_load(p, NULL, NULL, &d), 0);
    CHECK_EQ_INT(d.train.n, 5);     /* the samples gathered below */
    if (!holds(&d.train, 5, 6)) {
        data_free(&d);
        ir_program_free(p);
        return;
    }
    int64_t order[3] = {4, 0, 2};
    float x[2 * 6];
    int32_t y[2];
    data_gather(&d.train, order, 1, 2, 0, x, y);
    CHECK(memcmp(x, d.train.x, 6 * sizeof(float)) == 0);
    CHECK(memcmp(x + 6, d.train.x + 12, 6 * sizeof(float)) == 0);
    CHECK_EQ_INT(y[0], LABELS[0]);
    CHECK_EQ_INT(y[1], LABELS[2]);
    data_free(&d);
    ir_program_free(p);
}

static IrProgram *synthetic_program(DType label_type, int label_rank, int classes,
                                    uint64_t seed)
{
    IrProgram *p = make_program(6, label_type, label_rank, classes, "unused");
    p->cfg.data = DATA_SYNTHETIC;
    p->cfg.synthetic_samples = 200;
    p->cfg.seed = seed;
    return p;
}

static void test_synthetic(void)
{
    DataSplits a, b, c;
    IrProgram *p = synthetic_program(DT_I32, 1, 4, 42);
    CHECK_EQ_INT(data_load(p, NULL, NULL, &a), 0);
    CHECK_EQ_INT(data_load(p, NULL, NULL, &b), 0);
    p->cfg.seed = 43;
    CHECK_EQ_INT(data_load(p, NULL, NULL, &c), 0);
    CHECK_EQ_INT(a.train.n, 200);
    CHECK_EQ_INT(a.train.x_row, 6);
    CHECK_EQ_INT(a.train.y_row, 1);
    CHECK(a.train.y_int && !a.has_test);
    /* the comparisons below read 200 samples of each */
    bool sized = holds(&a.train, 200, 6) && holds(&b.train, 200, 6) && holds(&c.train, 200, 6);
    CHECK(sized);
    if (!sized) {
        data_free(&a);
        data_free(&b);
        data_free(&c);
        ir_program_free(p);
        return;
    }
    CHECK(memcmp(a.train.x, b.train.x, 200 * 6 * sizeof(float)) == 0);
    CHECK(memcmp(a.train.y_i32, b.train.y_i32, 200 * sizeof(int32_t)) == 0);
    CHECK(memcmp(a.train.x, c.train.x, 200 * 6 * sizeof(float)) != 0);
    CHECK_STR(a.description, "synthetic: 200 samples, no test split (seed 42)");
    /* Standard normal features; every class of the teacher shows up. */
    double sum = 0, sq = 0;
    for (int i = 0; i < 1200; i++) sum += a.train.x[i], sq += a.train.x[i] * a.train.x[i];
    CHECK_CLOSE(sum / 1200, 0, 0.15, 0);
    CHECK_CLOSE(sq / 1200, 1, 0.15, 0);
    int counts[4] = {0};
    for (int i = 0; i < 200; i++) {
        CHECK(a.train.y_i32[i] >= 0 && a.train.y_i32[i] < 4);
        if (a.train.y_i32[i] >= 0 && a.train.y_i32[i] < 4) counts[a.train.y_i32[i]]++;
    }
    for (int k = 0; k < 4; k++) CHECK(counts[k] > 10);
    data_free(&a);
    data_free(&b);
    data_free(&c);
    ir_program_free(p);

    /* A label per position (i32[N, 2]): each from its own scores of the teacher, so the
     * positions of a sample need not agree. */
    p = synthetic_program(DT_I32, 2, 4, 42);
    CHECK_EQ_INT(data_load(p, NULL, NULL, &a), 0);
    CHECK_EQ_INT(a.train.y_row, 2);
    int differ = 0, in_range = 0;
    for (int i = 0; a.train.y_i32 && i < 200; i++) {
        const int32_t *y = a.train.y_i32 + 2 * i;
        differ += y[0] != y[1];
        in_range += y[0] >= 0 && y[0] < 4 && y[1] >= 0 && y[1] < 4;
    }
    CHECK_EQ_INT(in_range, 200);
    CHECK(differ > 50);
    data_free(&a);
    ir_program_free(p);

    /* Tokens (an i32 first input an embedding of 5 rows reads): drawn below 5, each
     * value drawn; without the embedding, refused. */
    p = synthetic_program(DT_I32, 2, 4, 42);
    p->inputs[0].dtype = DT_I32;
    p->inputs[0].index_rows = 5;
    CHECK_EQ_INT(data_load(p, NULL, NULL, &a), 0);
    CHECK(a.train.x_int && a.train.x_i32 && !a.train.x);
    int seen[5] = {0}, outside = 0;
    for (int i = 0; a.train.x_i32 && i < 200 * 6; i++) {
        int32_t v = a.train.x_i32[i];
        if (v >= 0 && v < 5) seen[v]++;
        else outside++;
    }
    CHECK_EQ_INT(outside, 0);
    for (int k = 0; k < 5; k++) CHECK(seen[k] > 100);
    data_free(&a);
    p->inputs[0].index_rows = 0;
    expect_load_error(p, NULL, NULL, "cgc: error: input 'x' is i32 but no embedding reads it: "
                                     "synthetic data cannot tell which tokens to draw\n");
    ir_program_free(p);

    /* Float targets: input 1's per-sample shape ([N, 2] here), a linear map of x. */
    p = synthetic_program(DT_F32, 2, 0, 1);
    CHECK_EQ_INT(data_load(p, NULL, NULL, &a), 0);
    CHECK_EQ_INT(a.train.y_row, 2);
    CHECK(!a.train.y_int && a.train.y_f32);
    data_free(&a);
    ir_program_free(p);

    /* One input: features only. */
    p = synthetic_program(DT_F32, 0, 0, 1);
    CHECK_EQ_INT(data_load(p, NULL, NULL, &a), 0);
    CHECK_EQ_INT(a.train.y_row, 0);
    CHECK(a.train.y_i32 == NULL && a.train.y_f32 == NULL);
    data_free(&a);
    ir_program_free(p);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cgc_test_idx_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(i * 37 + 11);
    test_good_files();
    test_bad_files();
    test_huge_claim();
    test_cut_gzip();
    test_load_good();
    test_load_float_labels();
    test_load_errors();
    test_search_path();
    test_fashion_mnist();
    test_order();
    test_gather();
    test_synthetic();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_result();
}
