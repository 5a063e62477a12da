/* test_tune.c: the autotune choices file (runtime/tune.h): a round trip through the text,
 * every kind of damage refused with its line, and the file in the cache: missing, stored,
 * read back, refused when made for another plan or corrupt, and rebuilt by a store; and a
 * file a user names instead (--tune-file). */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "runtime/tune.h"
#include "tests/testfiles.h"

static const char *const DEVICE = "NVIDIA H100 80GB  HBM3";   /* two spaces: kept as they are */

/* A file with one choice of each kind, timed and not. */
static void sample(TuneFile *t, uint64_t plan)
{
    char why[256] = "";
    CHECK(tune_init(t, "mlp", 90, DEVICE, plan, why, sizeof why));
    t->tuning_ms = 1834.25;
    CHECK(tune_add(t, TUNE_GEMM, "m64.n512.k784.f16.bias_relu", "lt_algo:3", 0.0121, why, sizeof why));
    CHECK(tune_add(t, TUNE_KERNEL, "fused_add_relu_h1", "block:256", -1, why, sizeof why));
    CHECK(tune_add(t, TUNE_MLP, "forward", "off", 0.5, why, sizeof why));
}

static void test_round_trip(void)
{
    TuneFile t, back;
    char why[256] = "";
    sample(&t, 0x5f0c1e2d3b4a6978ull);
    char *text = tune_format(&t);
    CHECK(text != NULL);
    if (!text) {    /* nothing to parse back */
        tune_free(&t);
        return;
    }
    CHECK(tune_parse(text, strlen(text), &back, why, sizeof why));
    CHECK_STR(why, "");
    CHECK_STR(back.model, "mlp");
    CHECK_STR(back.device, DEVICE);
    CHECK_EQ_INT(back.arch, 90);
    CHECK(back.plan_hash == 0x5f0c1e2d3b4a6978ull);
    CHECK_CLOSE(back.tuning_ms, 1834.25, 0, 1e-9);
    CHECK_EQ_INT(back.nchoices, 3);
    const TuneChoice *g = tune_find(&back, TUNE_GEMM, "m64.n512.k784.f16.bias_relu");
    const TuneChoice *k = tune_find(&back, TUNE_KERNEL, "fused_add_relu_h1");
    CHECK(g && k && tune_find(&back, TUNE_MLP, "forward"));
    CHECK(!tune_find(&back, TUNE_KERNEL, "forward"));   /* kind and key together */
    if (g && k) {
        CHECK_STR(g->choice, "lt_algo:3");
        CHECK_CLOSE(g->ms, 0.0121, 0, 1e-9);
        CHECK_STR(k->choice, "block:256");
        CHECK(k->ms < 0);
    }
    char *again = tune_format(&back);
    CHECK(again && strcmp(text, again) == 0);   /* the text is a fixed point */
    free(again);
    free(text);
    tune_free(&back);

    /* a time that is not a number is written as none, never as text the parser refuses */
    t.tuning_ms = 0.0 / 0.0;
    text = tune_format(&t);
    CHECK(text && strstr(text, "\ntuning none\n"));
    CHECK(text && tune_parse(text, strlen(text), &back, why, sizeof why));
    tune_free(&back);
    free(text);

    /* heuristics: "tuning none" and untimed choices */
    t.tuning_ms = -1;
    text = tune_format(&t);
    CHECK(text && strstr(text, "\ntuning none\n"));
    CHECK(text && tune_parse(text, strlen(text), &back, why, sizeof why));
    CHECK(back.tuning_ms < 0);
    tune_free(&back);
    free(text);
    tune_free(&t);
}

/* The header every damaged file below starts from. */
#define HEAD "cgc-autotune 1\nmodel mlp\ndevice sm_90 NVIDIA H100\nplan 00000000000000ff\ntuning none\n"

/* TEXT (N bytes, or strlen when 0) is refused, its reason containing WANT. */
static void refused(const char *text, size_t n, const char *want)
{
    TuneFile t;
    char why[256] = "";
    bool ok = tune_parse(text, n ? n : strlen(text), &t, why, sizeof why);
    CHECK(!ok);
    CHECK(t.nchoices == 0 && t.choices == NULL);
    if (!strstr(why, want)) {
        fprintf(stderr, "  refused for '%s', not '%s'\n", why, want);
        CHECK(!"the reason names the damage");
    }
    if (ok) tune_free(&t);
}

static void test_damage(void)
{
    refused("", 0, "empty");
    refused("# only a comment\n\n", 0, "empty");
    refused("cgc-autotune 2\n", 0, "line 1: format version '2'");
    refused("model mlp\n", 0, "line 1: not a cgc autotune file");
    refused(HEAD, 0, "cut short");
    refused(HEAD "gemm a lt_algo:1 0.5\n", 0, "cut short");
    refused(HEAD "gemm a lt_algo:1 0.5\nend 2\n", 0, "line 7: 'end 2' but the file has 1");
    refused(HEAD "end 0\nkernel k block:128 -\n", 0, "line 7: text after the 'end' line");
    refused(HEAD "block k 128 -\nend 1\n", 0, "line 6: 'block' is not a kind");
    refused(HEAD "gemm a/b lt_algo:1 0.5\nend 1\n", 0, "line 6: key 'a/b' is not a token");
    refused(HEAD "gemm a lt\"algo 0.5\nend 1\n", 0, "line 6: choice");
    refused(HEAD "gemm a x 0.5\ngemm a y 0.5\nend 2\n", 0, "line 7: gemm a is chosen twice");
    refused(HEAD "gemm a x\nend 1\n", 0, "line 6: expected 'gemm KEY CHOICE MS'");
    refused(HEAD "gemm a x 0.5 extra\nend 1\n", 0, "line 6: expected");
    static const char *const times[] = {"abc", "-1", "nan", "inf", "1e999", "0.5ms"};
    for (int i = 0; i < 6; i++) {
        char buf[256];
        snprintf(buf, sizeof buf, HEAD "kernel k block:64 %s\nend 1\n", times[i]);
        refused(buf, 0, "line 6: time");
    }
    refused("cgc-autotune 1\nmodel mlp\ndevice sm_90 NVIDIA\nplan 0ff\ntuning none\nend 0\n", 0,
            "line 4: expected 'plan' and 16 hex digits");
    refused("cgc-autotune 1\nmodel mlp\ndevice sm_90 NVIDIA\nplan 00000000000000fg\ntuning none\nend 0\n",
            0, "line 4");
    refused("cgc-autotune 1\nmodel mlp\ndevice 90 NVIDIA\n", 0, "line 3: expected 'device sm_XX NAME'");
    refused("cgc-autotune 1\nmodel mlp\ndevice sm_90 NVI\001DIA\n", 0, "line 3: the device name");
    refused("cgc-autotune 1\nmodel ../x\n", 0, "line 2: expected 'model NAME'");
    refused("cgc-autotune 1\nmodel mlp\ndevice sm_90 X\nplan 00000000000000ff\ntuning fast\n", 0,
            "line 5: expected 'tuning none' or 'tuning T ms'");
    refused("cgc-autotune 1\nmodel mlp\ndevice sm_90 X\nplan 00000000000000ff\ntuning -3 ms\n", 0,
            "line 5");
    static const char with_nul[] = HEAD "gemm a x\0 0.5\nend 1\n";
    refused(with_nul, sizeof with_nul - 1, "line 6: a NUL byte");
    char longline[1200];
    snprintf(longline, sizeof longline, HEAD "# %0900d\nend 0\n", 0);
    refused(longline, 0, "line 6: longer than");
}

static void test_lenient(void)
{
    /* comments anywhere, blank lines, tabs, trailing blanks and CRLF endings are fine */
    const char *text = "# made by hand\r\ncgc-autotune 1\r\n\r\nmodel mlp  \r\n"
                       "device sm_80 A100-SXM4-40GB\r\nplan 00000000000000FF\r\n"
                       "tuning 12.5 ms\r\n# a note\r\ngemm\tkey.1\tlt_algo:0\t0\r\nend 1\r\n";
    TuneFile t;
    char why[256] = "";
    CHECK(tune_parse(text, strlen(text), &t, why, sizeof why));
    CHECK_STR(why, "");
    CHECK_STR(t.device, "A100-SXM4-40GB");
    CHECK_EQ_INT(t.arch, 80);
    CHECK(t.plan_hash == 0xff);
    CHECK(tune_find(&t, TUNE_GEMM, "key.1") != NULL);
    tune_free(&t);
}

static void test_names(void)
{
    TuneFile t;
    char why[256] = "", name[300];
    CHECK(!tune_init(&t, "../etc", 90, "GPU", 1, why, sizeof why));
    CHECK(strstr(why, "model name") != NULL);
    CHECK(!tune_init(&t, "mlp", 90, "GPU\nplan 0", 1, why, sizeof why));
    CHECK(strstr(why, "device name") != NULL);
    CHECK(tune_init(&t, "mlp", 90, "GPU", 1, why, sizeof why));
    CHECK(!tune_add(&t, TUNE_GEMM, "a b", "x", 1, why, sizeof why));
    CHECK(!tune_add(&t, TUNE_GEMM, "", "x", 1, why, sizeof why));
    CHECK(!tune_add(&t, TUNE_GEMM, "a", "x", 0.0 / 0.0, why, sizeof why));
    CHECK_EQ_INT(t.nchoices, 0);
    /* at most 8192 choices: a planted file costs a moment, not minutes */
    for (int i = 0; i < 8192; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%d", i);
        if (!tune_add(&t, TUNE_KERNEL, key, "block:128", -1, why, sizeof why)) break;
    }
    CHECK_EQ_INT(t.nchoices, 8192);
    CHECK(!tune_add(&t, TUNE_KERNEL, "one.more", "block:128", -1, why, sizeof why));
    CHECK(strstr(why, "more than 8192 choices") != NULL);
    tune_free(&t);
    tune_file_name("mlp", 90, "NVIDIA H100 80GB HBM3", name, sizeof name);
    CHECK_STR(name, "mlp.sm_90.nvidia-h100-80gb-hbm3.tune");
}

/* Points the cache at TMPDIR/NAME (fresh). */
static void use_cache_home(const char *name)
{
    mkdir(tmp_path(name), 0700);
    setenv("XDG_CACHE_HOME", tmp_path(name), 1);
    unsetenv("CGC_NO_CACHE");
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) fputs(text, f), fclose(f);
}

static void test_cache(void)
{
    TuneFile t, got;
    char path[512] = "", why[512] = "";
    use_cache_home("cache");
    sample(&t, 42);
    CHECK_EQ_INT(tune_load(&t, &got, path, sizeof path, why, sizeof why), TUNE_MISSING);
    CHECK(strstr(path, "/cgc/tune/mlp.sm_90.nvidia-h100-80gb--hbm3.tune") != NULL);

    CHECK_EQ_INT(tune_store(&t, path, sizeof path, why, sizeof why), 0);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK_EQ_INT(tune_load(&t, &got, path, sizeof path, why, sizeof why), TUNE_FOUND);
    CHECK_EQ_INT(got.nchoices, 3);
    tune_free(&got);

    /* made for another plan: refused, and saying so */
    TuneFile other;
    sample(&other, 43);
    CHECK_EQ_INT(tune_load(&other, &got, path, sizeof path, why, sizeof why), TUNE_REFUSED);
    CHECK(strstr(why, "another plan") != NULL);
    CHECK(got.choices == NULL);

    /* corrupt: refused with the line; a store rebuilds it */
    write_text(path, HEAD "gemm a lt_algo:1 zero\nend 1\n");
    CHECK_EQ_INT(tune_load(&t, &got, path, sizeof path, why, sizeof why), TUNE_REFUSED);
    CHECK(strstr(why, "line 6") != NULL);
    CHECK_EQ_INT(tune_store(&t, path, sizeof path, why, sizeof why), 0);
    CHECK_EQ_INT(tune_load(&t, &got, path, sizeof path, why, sizeof why), TUNE_FOUND);
    tune_free(&got);

    /* a symbolic link in place of the file is never followed */
    char target[600];
    snprintf(target, sizeof target, "%s.elsewhere", path);
    CHECK(rename(path, target) == 0);
    CHECK(symlink(target, path) == 0);
    CHECK_EQ_INT(tune_load(&t, &got, path, sizeof path, why, sizeof why), TUNE_REFUSED);
    CHECK(strstr(why, "symbolic link") != NULL);

    /* the longest names the format takes still make a file name (the device's cut short) */
    TuneFile big;
    char model[TUNE_TOKEN_MAX + 1], device[TUNE_DEVICE_MAX + 1];
    memset(model, 'm', TUNE_TOKEN_MAX), model[TUNE_TOKEN_MAX] = '\0';
    memset(device, 'D', TUNE_DEVICE_MAX), device[TUNE_DEVICE_MAX] = '\0';
    CHECK(tune_init(&big, model, 999, device, 7, why, sizeof why));
    CHECK_EQ_INT(tune_store(&big, path, sizeof path, why, sizeof why), 0);
    CHECK_EQ_INT(tune_load(&big, &got, path, sizeof path, why, sizeof why), TUNE_FOUND);
    CHECK_STR(got.device, device);
    tune_free(&got);
    tune_free(&big);

    /* the caches off: nothing read or written */
    setenv("CGC_NO_CACHE", "1", 1);
    CHECK(path[0] != '\0');    /* from the load above */
    CHECK_EQ_INT(tune_load(&t, &got, path, sizeof path, why, sizeof why), TUNE_NO_CACHE);
    CHECK(strstr(why, "CGC_NO_CACHE") != NULL);
    CHECK_STR(path, "");
    strcpy(path, "stale");
    CHECK_EQ_INT(tune_store(&t, path, sizeof path, why, sizeof why), -1);
    CHECK_STR(path, "");
    unsetenv("CGC_NO_CACHE");

    /* a cache directory others may write is refused, with one warning */
    use_cache_home("open");
    CHECK(mkdir(tmp_path("open/cgc"), 0777) == 0 && chmod(tmp_path("open/cgc"), 0777) == 0);
    capture_start();
    TuneLoad r = tune_load(&t, &got, path, sizeof path, why, sizeof why);
    const char *err = capture_end();
    CHECK_EQ_INT(r, TUNE_NO_CACHE);
    CHECK(strstr(err, "cgc: warning: autotune directory") != NULL);
    CHECK(strstr(err, "group- or world-writable") != NULL);
    tune_free(&other);
    tune_free(&t);
}

/* CALL (returning 0 or -1) fails, saying WANT. */
#define FAILS_SAYING(call, want)                                  \
    do {                                                          \
        capture_start();                                          \
        int rc_ = (call);                                         \
        const char *err_ = capture_end();                         \
        CHECK_EQ_INT(rc_, -1);                                    \
        CHECK(strstr(err_, want) != NULL);                        \
    } while (0)

/* A file a user names (--tune-file): missing, stored (a relative path too), read back,
 * refused when made for another plan or when not a regular file; a path that names a
 * directory or lies in none cannot be written. */
static void test_user_file(void)
{
    TuneFile t, other, got;
    char why[256], path[300];
    bool missing;
    sample(&t, 7);
    sample(&other, 8);
    snprintf(path, sizeof path, "%s", tmp_path("lock.tune"));
    CHECK_EQ_INT(tune_load_file(&t, path, &got, why, sizeof why), TUNE_MISSING);
    CHECK(!tune_read(path, &got, &missing, why, sizeof why) && missing);
    CHECK_EQ_INT(tune_store_file(&t, path), 0);
    CHECK_EQ_INT(tune_load_file(&t, path, &got, why, sizeof why), TUNE_FOUND);
    CHECK_EQ_INT(got.nchoices, 3);
    tune_free(&got);
    CHECK_EQ_INT(tune_load_file(&other, path, &got, why, sizeof why), TUNE_REFUSED);
    CHECK_STR(why, "was written for another plan");
    CHECK(tune_read(path, &got, &missing, why, sizeof why) && !missing);   /* as it is */
    tune_free(&got);
    CHECK_EQ_INT(chdir(tmpdir), 0);
    CHECK_EQ_INT(tune_store_file(&other, "relative.tune"), 0);
    CHECK_EQ_INT(tune_load_file(&other, tmp_path("relative.tune"), &got, why, sizeof why), TUNE_FOUND);
    tune_free(&got);
    CHECK(mkfifo(tmp_path("fifo.tune"), 0600) == 0);
    CHECK_EQ_INT(tune_load_file(&t, tmp_path("fifo.tune"), &got, why, sizeof why), TUNE_REFUSED);
    CHECK(strstr(why, "is not a regular file") != NULL);
    write_text(tmp_path("short.tune"), "cgc-autotune 1\n");
    CHECK_EQ_INT(tune_load_file(&t, tmp_path("short.tune"), &got, why, sizeof why), TUNE_REFUSED);
    CHECK(strstr(why, "line") != NULL);
    FAILS_SAYING(tune_store_file(&t, tmp_path("no/such/dir.tune")), "directory");
    snprintf(path, sizeof path, "%s/", tmpdir);
    FAILS_SAYING(tune_store_file(&t, path), "names a directory");
    /* checked before tuning: a writable place, or why not */
    CHECK_EQ_INT(tune_check_file(tmp_path("lock.tune")), 0);
    CHECK_EQ_INT(tune_check_file(tmp_path("new.tune")), 0);
    FAILS_SAYING(tune_check_file(tmp_path("no/such/dir.tune")), "is missing or not writable");
    FAILS_SAYING(tune_check_file(path), "names a directory");
    CHECK_EQ_INT(mkdir(tmp_path("adir.tune"), 0700), 0);
    FAILS_SAYING(tune_check_file(tmp_path("adir.tune")), "it is a directory");
    /* a file that is not a choices file is not written over, nor checked as writable */
    write_text(tmp_path("notes.tune"), "my notes\n");
    FAILS_SAYING(tune_check_file(tmp_path("notes.tune")), "is not a choices file");
    FAILS_SAYING(tune_store_file(&t, tmp_path("notes.tune")), "is not a choices file");
    CHECK(tune_read(tmp_path("notes.tune"), &got, &missing, why, sizeof why) == false);
    char longname[400];
    snprintf(longname, sizeof longname, "%s/%0300d.tune", tmpdir, 0);
    FAILS_SAYING(tune_check_file(longname), "File name too long");
    /* a user's file is made as other files are (0666 less the umask), the cache's 0600;
     * no temporary file is left beside it */
    mode_t saved_mask = umask(022);
    CHECK_EQ_INT(tune_store_file(&t, tmp_path("mode.tune")), 0);
    umask(saved_mask);
    struct stat st;
    CHECK(stat(tmp_path("mode.tune"), &st) == 0 && (st.st_mode & 0777) == 0644);
    DIR *d = opendir(tmpdir);
    for (struct dirent *e; d && (e = readdir(d));)
        CHECK(strstr(e->d_name, ".tmp.") == NULL);
    if (d) closedir(d);
    tune_free(&other);
    tune_free(&t);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cgc-test-tune-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    test_round_trip();
    test_damage();
    test_lenient();
    test_names();
    test_cache();
    test_user_file();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "test_tune: could not remove %s\n", tmpdir);
    return check_result();
}
