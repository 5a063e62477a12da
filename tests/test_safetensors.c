/* test_safetensors.c: the safetensors reader and writer.
 *
 * Round trips of every dtype cgc writes, a byte-exact file against a hand-written header,
 * the atomic write, and refusal of each kind of bad file, with exact messages where the
 * wording matters and, for every truncation of a valid file, at least a clean error.
 *
 * `test_safetensors --write PATH` writes the file tests/safetensors_check.py verifies
 * with an independent reader (the values are listed there too).
 */
#define _GNU_SOURCE   /* memmem */
#include "runtime/safetensors.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/check.h"
#include "tests/testfiles.h"



static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);   /* the test's own file: what reads it then finds it missing */
    if (!f) return;
    fwrite(p, 1, n, f);
    fclose(f);
}

static uint8_t *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n ? *n : 1);
    if (!b || fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

/* A file made by hand: the length of HEADER (little-endian u64, or CLAIM when nonzero),
 * HEADER, then NDATA bytes of DATA. */
static void write_raw(const char *path, const char *header, uint64_t claim, const void *data,
                      size_t ndata)
{
    size_t n = strlen(header);
    uint64_t len = claim ? claim : n;
    uint8_t *buf = malloc(8 + n + ndata);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(len >> (8 * i));
    memcpy(buf + 8, header, n);
    if (ndata) memcpy(buf + 8 + n, data, ndata);
    write_bytes(path, buf, 8 + n + ndata);
    free(buf);
}

/* ---- the file safetensors_check.py verifies ---- */

static const float WEIGHT[6] = {-1, -0.5, 0, 0.5, 1, 1.5};
static const float BIAS[3] = {1, -2, 3.25f};
static const int64_t STEP = 12345678901LL;
static const uint16_t HALF[2] = {0x3C00, 0xC100};    /* 1.0, -2.5 in f16 */
static const uint16_t BF[2] = {0x3F80, 0xC000};      /* 1.0, -2.0 in bf16 */
static const int32_t IDS[4] = {0, -1, 2147483647, -2147483647 - 1};
static const uint8_t ZETA[3] = {1, 2, 255};
static const double SCALARS[1] = {0.1};

static const StTensor SAMPLE[] = {
    {"weight", "F32", 2, {2, 3}, WEIGHT},
    {"bias", "F32", 1, {3}, BIAS},
    {"step", "I64", 0, {0}, &STEP},
    {"half", "F16", 1, {2}, HALF},
    {"bf", "BF16", 1, {2}, BF},
    {"ids", "I32", 1, {4}, IDS},
    {"empty", "F64", 2, {0, 3}, NULL},
    {"Zeta", "U8", 1, {3}, ZETA},
    {"h1.weight.\"quoted\"", "F64", 1, {1}, SCALARS},
    {"huge.but.empty", "U8", 3, {1, 0, 3000000000LL}, NULL},
};
static const int NSAMPLE = sizeof SAMPLE / sizeof SAMPLE[0];
static const StMeta SAMPLE_META[] = {
    {"format", "pt"},
    {"note", "quote \" backslash \\ and \xC3\xBCnicode"},
};

static size_t tensor_size(const StTensor *t)
{
    size_t n = st_dtype_size(t->dtype);
    for (int i = 0; i < t->rank; i++) n *= (size_t)t->shape[i];
    return n;
}

static void test_round_trip(void)
{
    const char *path = tmp_path("round.safetensors");
    CHECK_EQ_INT(st_save(path, SAMPLE, NSAMPLE, SAMPLE_META, 2), 0);
    StFile *f = st_load(path);
    CHECK(f != NULL);
    if (!f) return;
    CHECK_EQ_INT(st_count(f), NSAMPLE);
    for (int i = 0; i < NSAMPLE; i++) {
        const StTensor *want = &SAMPLE[i];
        const StTensor *got = st_find(f, want->name);
        CHECK(got != NULL);
        if (!got) continue;
        CHECK_STR(got->dtype, want->dtype);
        CHECK_EQ_INT(got->rank, want->rank);
        for (int k = 0; k < want->rank; k++) CHECK_EQ_INT(got->shape[k], want->shape[k]);
        size_t n = tensor_size(want);
        /* GOT's own dtype and shape bound what of its data may be read */
        CHECK(tensor_size(got) == n && (n == 0 || memcmp(got->data, want->data, n) == 0));
    }
    CHECK(st_find(f, "missing") == NULL);
    CHECK_STR(st_meta(f, "format"), "pt");
    CHECK_STR(st_meta(f, "note"), SAMPLE_META[1].value);
    CHECK(st_meta(f, "absent") == NULL);
    /* st_get gives data order, which the writer makes name order. */
    for (int i = 1; i < st_count(f); i++)
        CHECK(strcmp(st_get(f, i - 1)->name, st_get(f, i)->name) < 0);
    st_free(f);

    /* No tensors and no metadata is a valid file too. */
    path = tmp_path("empty.safetensors");
    CHECK_EQ_INT(st_save(path, NULL, 0, NULL, 0), 0);
    f = st_load(path);
    CHECK(f && st_count(f) == 0);
    st_free(f);
}

/* The writer's exact bytes: sorted keys, integers as integers, space padding to 8. */
static void test_exact_bytes(void)
{
    static const float b[2] = {1, 2};
    static const int32_t a = 7;
    StTensor t[2] = {{"b", "F32", 1, {2}, b}, {"a", "I32", 0, {0}, &a}};
    StMeta m = {"format", "pt"};
    const char *path = tmp_path("exact.safetensors");
    CHECK_EQ_INT(st_save(path, t, 2, &m, 1), 0);

    const char *json = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"a\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
    size_t n = strlen(json), padded = (n + 7) / 8 * 8;
    uint8_t want[512];
    memset(want, 0, sizeof want);
    want[0] = (uint8_t)padded;
    memcpy(want + 8, json, n);
    memset(want + 8 + n, ' ', padded - n);
    static const uint8_t data[12] = {7, 0, 0, 0, 0, 0, 0x80, 0x3F, 0, 0, 0, 0x40};
    memcpy(want + 8 + padded, data, sizeof data);
    size_t total = 8 + padded + sizeof data, got_n = 0;
    uint8_t *got = read_bytes(path, &got_n);
    CHECK_EQ_INT(got_n, total);
    CHECK(got && got_n == total && memcmp(got, want, total) == 0);
    free(got);

    /* Big integers stay integers (cJSON alone would print 3e+09). */
    const char *big = tmp_path("big.safetensors");
    CHECK_EQ_INT(st_save(big, &SAMPLE[NSAMPLE - 1], 1, NULL, 0), 0);
    got = read_bytes(big, &got_n);
    CHECK(got && memmem(got, got_n, "[1,0,3000000000]", 16) != NULL);
    free(got);
}

/* Loading PATH must fail with exactly "cgc: error: PATH: WHAT\n". */
static void expect_load_error(const char *path, const char *what)
{
    capture_start();
    StFile *f = st_load(path);
    const char *err = capture_end();
    CHECK(f == NULL);
    st_free(f);
    char want[1024];
    snprintf(want, sizeof want, "cgc: error: %s: %s\n", path, what);
    CHECK_STR(err, want);
}

/* A one-tensor header: {"t": {"dtype": DTYPE, "shape": SHAPE, "data_offsets": OFFSETS}}. */
static const char *one_tensor(const char *dtype, const char *shape, const char *offsets)
{
    static char buf[256];
    snprintf(buf, sizeof buf,
             "{\"t\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":%s}}", dtype, shape,
             offsets);
    return buf;
}

static void test_refusals(void)
{
    const char *p = tmp_path("bad.safetensors");
    static const uint8_t zeros[90];

    write_raw(p, "{}", 1234, zeros, 90);
    expect_load_error(p, "truncated: header says 1234 bytes but the file has 100");
    /* A header over the reference's 100 MB limit, refused before anything is read: the
     * file is sparse, so it costs no disk. */
    write_raw(p, "", 100000008, NULL, 0);
    CHECK(truncate(p, 100000100) == 0);
    expect_load_error(p, "header of 100000008 bytes is over the 100 MB limit");
    write_bytes(p, "\x02\0\0", 3);
    expect_load_error(p, "truncated: a safetensors file starts with an 8-byte header length, "
                         "but the file has 3 bytes");
    write_raw(p, "{\"t\":", 0, NULL, 0);
    expect_load_error(p, "header is not valid JSON (at byte 5 of the header: '')");
    write_raw(p, "{} x", 0, NULL, 0);
    expect_load_error(p, "header is not valid JSON (at byte 3 of the header: 'x')");
    write_raw(p, "[1, 2]  ", 0, NULL, 0);
    expect_load_error(p, "header is not a JSON object");
    write_bytes(p, "\x04\0\0\0\0\0\0\0{}\0 ", 12);
    expect_load_error(p, "header is not UTF-8 text (byte 2 of the header is 0x00)");
    write_raw(p, "{\"\xFF\":1}", 0, NULL, 0);
    expect_load_error(p, "header is not UTF-8 text (byte 2 of the header is 0xFF)");

    write_raw(p, one_tensor("F33", "[2]", "[0,8]"), 0, zeros, 8);
    expect_load_error(p, "tensor 't': unknown dtype \"F33\"");
    write_raw(p, "{\"h1.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,12]}}", 0,
              zeros, 12);
    expect_load_error(p, "tensor 'h1.weight': data_offsets [0, 12] do not match shape [2, 3] "
                         "of F32 (24 bytes)");
    write_raw(p, one_tensor("F32", "[2]", "[0,16]"), 0, zeros, 8);
    expect_load_error(p, "tensor 't': data_offsets [0, 16] are outside the 8-byte data");
    write_raw(p, one_tensor("F32", "[2]", "[8,0]"), 0, zeros, 8);
    expect_load_error(p, "tensor 't': data_offsets [8, 0] are outside the 8-byte data");
    write_raw(p, one_tensor("F32", "[-2]", "[0,8]"), 0, zeros, 8);
    expect_load_error(p, "tensor 't': \"shape\" holds something other than a non-negative "
                         "integer");
    write_raw(p, one_tensor("F32", "[1.5]", "[0,8]"), 0, zeros, 8);
    expect_load_error(p, "tensor 't': \"shape\" holds something other than a non-negative "
                         "integer");
    write_raw(p, one_tensor("F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]"), 0, zeros, 4);
    expect_load_error(p, "tensor 't': rank 9 is more than cgc supports (8)");
    write_raw(p, one_tensor("F32", "[2]", "[0]"), 0, zeros, 8);
    expect_load_error(p, "tensor 't': \"data_offsets\" is not a list of two non-negative "
                         "integers");
    write_raw(p, one_tensor("F32", "2", "[0,8]"), 0, zeros, 8);
    expect_load_error(p, "tensor 't': \"shape\" is not a list");
    write_raw(p, one_tensor("F32", "[4294967296,4294967296,4294967296]", "[0,8]"), 0, zeros, 8);
    expect_load_error(p, "tensor 't': data_offsets [0, 8] do not match shape [4294967296, "
                         "4294967296, 4294967296] of F32 (too many bytes)");
    write_raw(p, "{\"t\":3}", 0, NULL, 0);
    expect_load_error(p, "tensor 't': entry is not an object");

    write_raw(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                 "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 0, zeros, 6);
    expect_load_error(p, "tensors 'a' and 'b' overlap (bytes 2 to 4)");
    write_raw(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                 "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[6,8]}}", 0, zeros, 8);
    expect_load_error(p, "bytes 4 to 6 of the data belong to no tensor (before 'b')");
    write_raw(p, one_tensor("U8", "[2]", "[0,2]"), 0, zeros, 5);
    expect_load_error(p, "bytes 2 to 5 of the data belong to no tensor (after the last)");
    write_raw(p, "{\"t\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                 "\"t\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}", 0, zeros, 4);
    expect_load_error(p, "tensor 't': appears twice in the header");

    write_raw(p, "{\"__metadata__\":{\"step\":3}}", 0, NULL, 0);
    expect_load_error(p, "\"__metadata__\" value of 'step' is not a string");
    write_raw(p, "{\"__metadata__\":[\"a\"]}", 0, NULL, 0);
    expect_load_error(p, "\"__metadata__\" is not an object of strings");
    expect_load_error(tmp_path("missing.safetensors"), "cannot open: No such file or directory");
}

/* Every prefix of a valid file is refused cleanly: never a crash, always one error. */
static void test_every_truncation(void)
{
    const char *good = tmp_path("good.safetensors");
    CHECK_EQ_INT(st_save(good, SAMPLE, 4, SAMPLE_META, 1), 0);
    size_t n = 0;
    uint8_t *bytes = read_bytes(good, &n);
    CHECK(bytes && n > 100);
    const char *p = tmp_path("cut.safetensors");
    int refused = 0;
    for (size_t len = 0; len < n; len++) {
        write_bytes(p, bytes, len);
        capture_start();
        StFile *f = st_load(p);
        const char *err = capture_end();
        refused += f == NULL && strncmp(err, "cgc: error: ", 12) == 0 && strstr(err, p) &&
                   strchr(err, '\n') == err + strlen(err) - 1;
        st_free(f);
    }
    CHECK_EQ_INT(refused, n);
    free(bytes);
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    if (d) closedir(d);
    return n;
}

static void test_atomic_write(void)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/atomic", tmpdir);
    mkdir(dir, 0700);
    char path[300];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK_EQ_INT(st_save(path, SAMPLE, 2, NULL, 0), 0);
    CHECK_EQ_INT(st_save(path, SAMPLE + 5, 1, NULL, 0), 0);   /* replaces it */
    CHECK_EQ_INT(count_entries(dir), 1);
    StFile *f = st_load(path);
    CHECK(f && st_count(f) == 1 && st_find(f, "ids"));
    st_free(f);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0044) != 0);   /* not mkstemp's 0600 */

    snprintf(path, sizeof path, "%s/no/such/dir/model.safetensors", tmpdir);
    capture_start();
    int rc = st_save(path, SAMPLE, 2, NULL, 0);
    const char *err = capture_end();
    CHECK_EQ_INT(rc, -1);
    char want[512];
    snprintf(want, sizeof want, "cgc: error: cannot save to %s: directory %s/no/such/dir is "
             "missing or not writable\n", path, tmpdir);
    CHECK_STR(err, want);

    /* The target is a directory: refused before anything is written. */
    snprintf(path, sizeof path, "%s/sub", dir);
    mkdir(path, 0700);
    char inner[400];
    snprintf(inner, sizeof inner, "%s/x", path);
    write_bytes(inner, "x", 1);
    capture_start();
    rc = st_save(path, SAMPLE, 2, NULL, 0);
    err = capture_end();
    CHECK_EQ_INT(rc, -1);
    snprintf(want, sizeof want, "cgc: error: cannot save to %s: it is a directory; give the "
             "name of a new file or of a checkpoint (a safetensors file)\n", path);
    CHECK_STR(err, want);
    CHECK_EQ_INT(count_entries(dir), 2);   /* model.safetensors and sub, no temporary */

    /* A file that is not safetensors (a model's source, say) is refused and kept. */
    snprintf(path, sizeof path, "%s/model.net", dir);
    write_bytes(path, "model m {}\n", 11);
    capture_start();
    rc = st_save(path, SAMPLE, 2, NULL, 0);
    err = capture_end();
    CHECK_EQ_INT(rc, -1);
    CHECK(strstr(err, "the file exists and is not a checkpoint") != NULL);
    char text[16] = "";
    FILE *src = fopen(path, "rb");
    CHECK(src && fread(text, 1, 11, src) == 11 && memcmp(text, "model m {}\n", 11) == 0);
    if (src) fclose(src);

    /* A leftover temporary file of the target goes at the next save; another's stays. */
    char stale[400], other[400];
    snprintf(stale, sizeof stale, "%s/model.safetensors.tmp.AbC123", dir);
    snprintf(other, sizeof other, "%s/model.net.tmp.AbC123", dir);
    write_bytes(stale, "x", 1);
    write_bytes(other, "x", 1);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK_EQ_INT(st_save(path, SAMPLE, 2, NULL, 0), 0);
    CHECK(access(stale, F_OK) != 0);
    CHECK(access(other, F_OK) == 0);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write") == 0)
        return st_save(argv[2], SAMPLE, NSAMPLE, SAMPLE_META, 2) == 0 ? 0 : 1;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cgc_test_st_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_exact_bytes();
    test_refusals();
    test_every_truncation();
    test_atomic_write();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_result();
}
