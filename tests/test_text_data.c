/* test_text_data.c: text(FILE, context = T) data: the splits, the windows a batch gathers and
 * the epoch's phase, against the bytes the test wrote (a closed formula of the
 * position), and every kind of bad file and model, each with its exact message.
 */
#include "runtime/data.h"

#include <stdlib.h>
#include <sys/stat.h>

#include "base/rng.h"
#include "tests/check.h"
#include "tests/testfiles.h"

enum { T = 9, W = T + 1, LEN = 1000 };

static uint8_t byte_at(int64_t i) { return (uint8_t)(i * 37 + 11); }

static void write_text(const char *path, int64_t n)
{
    FILE *f = fopen(path, "wb");
    for (int64_t i = 0; f && i < n; i++) fputc(byte_at(i), f);
    if (f) fclose(f);
}

/* Tokens and next tokens, i32[N, CONTEXT] each, an embedding of ROWS reading the first,
 * a loss of CLASSES over the second. */
static IrProgram *text_program(const char *path, int64_t context, int64_t rows, int classes)
{
    IrProgram *p = ir_program_new();
    ir_add_symbol(p, "N", (SrcLoc){2, 14});
    ir_add_input(p, "tokens", DT_I32, (Shape){2, {IR_SYM(0), context}}, (SrcLoc){2, 11});
    ir_add_input(p, "next", DT_I32, (Shape){2, {IR_SYM(0), context}}, (SrcLoc){3, 11});
    p->inputs[0].index_rows = rows;
    p->num_classes = classes;
    p->cfg.data = DATA_TEXT;
    p->cfg.data_dir = strdup(path);
    p->cfg.text_context = T;
    p->cfg.data_loc = (SrcLoc){6, 12};
    return p;
}

/* A gathered window: its features the file's bytes from FIRST on, its labels from
 * FIRST + 1. */
static void check_window(const int32_t *x, const int32_t *y, int64_t first)
{
    for (int c = 0; c < T; c++) {
        CHECK_EQ_INT(x[c], byte_at(first + c));
        CHECK_EQ_INT(y[c], byte_at(first + c + 1));
    }
}

static void test_splits_and_windows(void)
{
    char *path = tmp_path("corpus.txt");
    write_text(path, LEN);
    IrProgram *p = text_program(path, T, 256, 256);
    DataSplits d;
    CHECK_EQ_INT(data_load(p, NULL, NULL, &d), 0);
    /* the last tenth evaluates; training keeps W - 1 bytes to spare for its phase */
    CHECK_EQ_INT(d.train.text_bytes, 900);
    CHECK_EQ_INT(d.train.n, 89);
    CHECK_EQ_INT(d.test.n, 10);
    CHECK(d.has_test && d.train.x_int && d.train.y_int && d.train.x_row == T && d.train.y_row == T);
    char want[512];
    snprintf(want, sizeof want, "text: 1000 bytes, 89 train and 10 test windows of 10, from %s", path);
    CHECK_STR(d.description, want);

    int64_t order[3] = {88, 5, 0};
    int32_t x[2 * T], y[2 * T];
    data_gather(&d.train, order, 0, 2, 9, x, y);
    check_window(x, y, 9 + 88 * W);
    check_window(x + T, y + T, 9 + 5 * W);
    data_gather(&d.test, NULL, 8, 2, 0, x, y);   /* evaluation: file order, phase 0 */
    check_window(x, y, 900 + 8 * W);
    check_window(x + T, y + T, 900 + 9 * W);

    /* every position of a window starts the samples of some epoch, and no epoch's last
     * window leaves the split (crosscheck_gpt reproduces the draws themselves) */
    bool seen[W] = {false};
    for (int64_t e = 0; e < 200; e++) {
        int64_t ph = data_phase(&d.train, 5, e);
        CHECK(ph >= 0 && ph < W && ph + d.train.n * W <= d.train.text_bytes);
        if (ph >= 0 && ph < W) seen[ph] = true;
    }
    for (int k = 0; k < W; k++) CHECK(seen[k]);
    data_free(&d);
    ir_program_free(p);
}

/* The smallest file: ten windows, one to evaluate; training gives one up to its phase. */
static void test_shortest(void)
{
    char *path = tmp_path("short.txt");
    write_text(path, 10 * W);
    IrProgram *p = text_program(path, T, 256, 256);
    DataSplits d;
    CHECK_EQ_INT(data_load(p, NULL, NULL, &d), 0);
    CHECK_EQ_INT(d.train.n, 8);
    CHECK_EQ_INT(d.test.n, 1);
    for (int64_t e = 0; e < 20; e++)   /* 90 bytes: 8 windows and 10 to spare */
        CHECK(data_phase(&d.train, 1, e) + 8 * W <= 90);
    data_free(&d);
    ir_program_free(p);
}

static void expect_error(IrProgram *p, const char *want)
{
    DataSplits d;
    capture_start();
    int rc = data_load(p, NULL, NULL, &d);
    const char *err = capture_end();
    CHECK_EQ_INT(rc, -1);
    CHECK(d.train.text == NULL && d.map == NULL && d.description == NULL);
    CHECK_STR(err, want);
    ir_program_free(p);
}

static void test_bad_files(void)
{
    char want[1024], *path = tmp_path("empty.txt");
    write_text(path, 0);
    snprintf(want, sizeof want, "cgc: error: %s: the file is empty: 0 bytes is too short for context 9: "
             "the evaluation split, the file's last tenth, must hold a window of 10 bytes, so the "
             "file needs at least 100\n", path);
    expect_error(text_program(path, T, 256, 256), want);

    path = tmp_path("ninety_nine.txt");
    write_text(path, 10 * W - 1);
    snprintf(want, sizeof want, "cgc: error: %s: 99 bytes is too short for context 9: the evaluation "
             "split, the file's last tenth, must hold a window of 10 bytes, so the file needs at "
             "least 100\n", path);
    expect_error(text_program(path, T, 256, 256), want);

    path = tmp_path("a_dir");
    mkdir(path, 0700);
    snprintf(want, sizeof want, "cgc: error: %s is a directory, not a text file\n", path);
    expect_error(text_program(path, T, 256, 256), want);

    path = tmp_path("a_fifo");   /* opening it must not wait for a writer */
    CHECK_EQ_INT(mkfifo(path, 0600), 0);
    snprintf(want, sizeof want, "cgc: error: %s is a FIFO (named pipe), not a text file\n", path);
    expect_error(text_program(path, T, 256, 256), want);

    path = tmp_path("missing.txt");
    snprintf(want, sizeof want, "cgc: error: text file \"%s\" not found (looked for %s)\n", path, path);
    expect_error(text_program(path, T, 256, 256), want);
}

static void test_bad_models(void)
{
    char *path = tmp_path("corpus.txt");
    expect_error(text_program(path, T, 65, 256),
                 "cgc: error: input 'tokens' holds bytes 0 to 255, but an embedding that reads it "
                 "has fewer than 256 rows: make its vocabulary 256\n");
    expect_error(text_program(path, T, 0, 256),
                 "cgc: error: input 'tokens' holds bytes 0 to 255, but no embedding reads it\n");
    expect_error(text_program(path, T, 256, 10),
                 "cgc: error: input 'next' holds bytes 0 to 255, but the loss has 10 classes: make it 256\n");
    expect_error(text_program(path, T + 1, 256, 256),
                 "cgc: error: input 'tokens' is i32[N, 10]; text(context = 9) gives i32[N, 9]\n");
    IrProgram *p = text_program(path, T, 256, 256);
    p->inputs[1].dtype = DT_F32;
    expect_error(p, "cgc: error: input 'next' is f32[N, 9]; text(context = 9) gives i32[N, 9]\n");
    p = text_program(path, T, 256, 256);
    p->ninputs = 1;
    expect_error(p, "cgc: error: text data provides two inputs (the tokens and the next tokens, "
                    "i32[N, 9] each); the model declares 1\n");
}

/* Debian's fortunes (install-deps.sh installs it): a real corpus mapped, its windows
 * against the file read with stdio. */
static void test_fortunes(void)
{
    const char *path = "/usr/share/games/fortunes/cookie";
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("skipped: %s not installed (apt-get install fortunes)\n", path);
        return;
    }
    static uint8_t bytes[1 << 20];
    size_t len = fread(bytes, 1, sizeof bytes, f);
    fclose(f);
    IrProgram *p = text_program(path, T, 256, 256);
    DataSplits d;
    CHECK_EQ_INT(data_load(p, NULL, NULL, &d), 0);
    CHECK_EQ_INT(d.train.text_bytes + d.test.text_bytes, (int64_t)len);
    int64_t order[1] = {d.train.n - 1}, phase = data_phase(&d.train, 3, 7);
    int32_t x[T], y[T];
    data_gather(&d.train, order, 0, 1, phase, x, y);
    for (int c = 0; c < T; c++) {
        CHECK_EQ_INT(x[c], bytes[phase + order[0] * W + c]);
        CHECK_EQ_INT(y[c], bytes[phase + order[0] * W + c + 1]);
    }
    data_free(&d);
    ir_program_free(p);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cgc_test_text_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_splits_and_windows();
    test_shortest();
    test_bad_files();
    test_bad_models();
    test_fortunes();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_result();
}
