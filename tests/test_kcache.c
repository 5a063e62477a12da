/* test_kcache.c: the on-disk kernel cache, through cuda_compile (NVRTC; no GPU needed):
 * a round trip, cold then warm, damaged and foreign entries recompiled rather than
 * loaded, and cache directories that are not safely ours refused. Each case has its own
 * XDG_CACHE_HOME under a temporary directory. Also what else of the toolkit's loads
 * without a GPU: cuBLAS and cuBLASLt, every entry point the device calls. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pwd.h>
#include <libgen.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "runtime/device.h"
#include "tests/scale_kernel.h"
#include "tests/testfiles.h"

static const char *const KERNEL = SCALE_KERNEL_SOURCE;

/* A kernel whose source differs from KERNEL (so a different cache key). */
static char other_kernel[1024];

static CudaCompileOptions opts = {.arch = 80, .verbose = false, .emit_dir = NULL};

/* Points the cache at TMPDIR/NAME (fresh) and returns that path. */
static const char *use_cache_home(const char *name)
{
    static char path[256];
    snprintf(path, sizeof path, "%s", tmp_path(name));
    mkdir(path, 0700);
    setenv("XDG_CACHE_HOME", path, 1);
    return path;
}

static char *entry_dir(const char *home)
{
    static char path[300];
    snprintf(path, sizeof path, "%s/cgc/nvrtc", home);
    return path;
}

/* The one entry of DIR whose name is not EXCEPT, into NAME. */
static bool find_entry(const char *dir, const char *except, char *name, size_t len)
{
    DIR *d = opendir(dir);
    bool found = false;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 6, ".cubin") != 0) continue;
        if (except && strcmp(e->d_name, except) == 0) continue;
        snprintf(name, len, "%s", e->d_name);
        found = true;
    }
    if (d) closedir(d);
    return found;
}

/* Compiles SRC; returns whether it came from the cache. The cubin must be non-empty and,
 * when WANT is given, identical to it. */
static bool compile(const char *src, const CudaCompileResult *want)
{
    CudaCompileResult r;
    int rc = cuda_compile(src, "kcache_test", &opts, &r);
    CHECK_EQ_INT(rc, 0);
    if (rc != 0) return false;
    CHECK(r.cubin && r.cubin_size > 0);
    if (want) {
        CHECK_EQ_INT(r.cubin_size, want->cubin_size);
        CHECK(r.cubin_size == want->cubin_size && memcmp(r.cubin, want->cubin, r.cubin_size) == 0);
    }
    free(r.cubin);
    return r.from_cache;
}

static void mode_is(const char *path, unsigned want)
{
    struct stat st;
    CHECK_EQ_INT(lstat(path, &st), 0);
    CHECK_EQ_INT(st.st_mode & 07777, want);
}

static CudaCompileResult reference;     /* KERNEL compiled once, cache off */

static void test_round_trip(void)
{
    const char *home = use_cache_home("round_trip");
    CHECK(!compile(KERNEL, &reference));        /* cold */
    CHECK(compile(KERNEL, &reference));         /* warm: the same bytes */
    char name[64], path[512];
    bool found = find_entry(entry_dir(home), NULL, name, sizeof name);
    CHECK(found);
    snprintf(path, sizeof path, "%s/cgc", home);
    mode_is(path, 0700);
    mode_is(entry_dir(home), 0700);
    if (!found) return;     /* NAME is the entry's only when found */
    snprintf(path, sizeof path, "%s/%s", entry_dir(home), name);
    mode_is(path, 0600);
}

/* Damages the only entry of HOME with HOW, then checks it is recompiled and replaced. */
static void damaged_entry_case(const char *home, void (*how)(const char *path),
                               const char *note)
{
    char name[64], path[512];
    CHECK(!compile(KERNEL, &reference));
    bool found = find_entry(entry_dir(home), NULL, name, sizeof name);
    CHECK(found);   /* the entry to damage */
    if (!found) return;
    snprintf(path, sizeof path, "%s/%s", entry_dir(home), name);
    how(path);
    opts.verbose = true;
    capture_start();
    bool hit = compile(KERNEL, &reference);
    const char *err = capture_end();
    opts.verbose = false;
    CHECK(!hit);
    CHECK(strstr(err, note) != NULL);
    CHECK(strstr(err, "recompiling") != NULL);
    if (!strstr(err, note)) fprintf(stderr, "stderr was:\n%s\n", err);
    CHECK(compile(KERNEL, &reference));         /* replaced by a good entry */
}

static void flip_last_byte(const char *path)
{
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f) return;
    fseek(f, -1, SEEK_END);
    int c = fgetc(f);
    fseek(f, -1, SEEK_END);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

static void truncate_half(const char *path)
{
    struct stat st;
    CHECK_EQ_INT(stat(path, &st), 0);
    CHECK_EQ_INT(truncate(path, st.st_size / 2), 0);
}

/* The entry replaced by a symbolic link to a good copy of itself: never followed. */
static void symlink_to_copy(const char *path)
{
    char copy[600];
    snprintf(copy, sizeof copy, "%s.copy", path);
    CHECK(rename(path, copy) == 0);
    CHECK_EQ_INT(symlink(copy, path), 0);
}

/* The entry replaced by a FIFO: the open must not block, and it is not loaded. */
static void fifo_instead(const char *path)
{
    CHECK_EQ_INT(unlink(path), 0);
    CHECK_EQ_INT(mkfifo(path, 0600), 0);
}

/* The entry handed to another user (root only). */
static void give_to_nobody(const char *path)
{
    struct passwd *nobody = getpwnam("nobody");
    CHECK_EQ_INT(chown(path, nobody ? nobody->pw_uid : 65534, (gid_t)-1), 0);
}

static void test_corrupt_and_truncated(void)
{
    damaged_entry_case(use_cache_home("corrupt"), flip_last_byte, "payload checksum");
    damaged_entry_case(use_cache_home("truncated"), truncate_half, "truncated");
    damaged_entry_case(use_cache_home("entry_symlink"), symlink_to_copy, "symbolic link");
    damaged_entry_case(use_cache_home("entry_fifo"), fifo_instead, "not a regular file");
    if (geteuid() == 0)
        damaged_entry_case(use_cache_home("entry_owner"), give_to_nobody, "another user");
    else
        printf("note: not root, so the case of a cache entry owned by another user is skipped\n");
}

static bool copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    char buf[65536];
    size_t n;
    bool ok = in && out;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    if (in) fclose(in);
    if (out) fclose(out);
    return ok;
}

/* A valid entry for KERNEL copied over OTHER's file must not be loaded for OTHER. */
static void test_foreign_entry(void)
{
    const char *home = use_cache_home("foreign");
    char a[64], b[64], pa[512], pb[512];
    CudaCompileResult other;
    CudaCompileOptions off = opts;
    setenv("CGC_NO_CACHE", "1", 1);
    int rc = cuda_compile(other_kernel, "kcache_test", &off, &other);
    unsetenv("CGC_NO_CACHE");
    CHECK_EQ_INT(rc, 0);
    if (rc != 0) return;    /* no cubin to hold the cached ones to */
    CHECK(!compile(KERNEL, &reference));
    bool found_a = find_entry(entry_dir(home), NULL, a, sizeof a);
    CHECK(found_a);
    CHECK(!compile(other_kernel, &other));
    bool found_b = found_a && find_entry(entry_dir(home), a, b, sizeof b);
    CHECK(found_b);
    if (!found_b) {     /* the two entries copied one over the other below */
        free(other.cubin);
        return;
    }
    snprintf(pa, sizeof pa, "%s/%s", entry_dir(home), a);
    snprintf(pb, sizeof pb, "%s/%s", entry_dir(home), b);
    CHECK(copy_file(pa, pb));
    CHECK(!compile(other_kernel, &other));      /* recompiled: the right cubin, not KERNEL's */
    CHECK(compile(other_kernel, &other));
    CHECK(compile(KERNEL, &reference));
    free(other.cubin);
}

/* HOME/cgc has been made unsafe: compiling still works, twice uncached, with one warning
 * that names the directory and WHAT is wrong. */
static void refused_dir_case(const char *home, const char *what)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/cgc", home);
    capture_start();
    bool hit1 = compile(KERNEL, &reference);
    bool hit2 = compile(KERNEL, &reference);
    const char *err = capture_end();
    CHECK(!hit1 && !hit2);
    CHECK(strstr(err, "cgc: warning: kernel cache directory") != NULL);
    CHECK(strstr(err, dir) != NULL);
    CHECK(strstr(err, what) != NULL);
    const char *first = strstr(err, "warning");
    CHECK(first && !strstr(first + 1, "warning"));      /* warned once */
    if (!strstr(err, what)) fprintf(stderr, "stderr was:\n%s\n", err);
}

static void test_symlink_refused(void)
{
    const char *home = use_cache_home("symlink");
    char real[300], link[300];
    snprintf(real, sizeof real, "%s/elsewhere", home);
    snprintf(link, sizeof link, "%s/cgc", home);
    CHECK_EQ_INT(mkdir(real, 0700), 0);
    CHECK_EQ_INT(symlink(real, link), 0);
    refused_dir_case(home, "symbolic link");
    char inside[400];
    snprintf(inside, sizeof inside, "%s/nvrtc", real);
    CHECK(access(inside, F_OK) != 0);           /* nothing written through the link */
}

static void test_group_writable_refused(void)
{
    const char *home = use_cache_home("group_writable");
    char dir[300];
    snprintf(dir, sizeof dir, "%s/cgc", home);
    CHECK_EQ_INT(mkdir(dir, 0700), 0);
    CHECK_EQ_INT(chmod(dir, 0770), 0);
    refused_dir_case(home, "group- or world-writable");
}

static void test_foreign_owner_refused(void)
{
    if (geteuid() != 0) {
        printf("note: not root, so the case of a cache directory owned by another user is "
               "skipped (it needs chown)\n");
        return;
    }
    const char *home = use_cache_home("other_owner");
    char dir[300];
    snprintf(dir, sizeof dir, "%s/cgc", home);
    struct passwd *nobody = getpwnam("nobody");
    uid_t uid = nobody ? nobody->pw_uid : 65534;
    CHECK_EQ_INT(mkdir(dir, 0700), 0);
    CHECK_EQ_INT(chown(dir, uid, (gid_t)-1), 0);
    refused_dir_case(home, "belongs to uid");
}

static void test_cache_off(void)
{
    const char *home = use_cache_home("off");
    setenv("CGC_NO_CACHE", "1", 1);
    capture_start();
    bool hit1 = compile(KERNEL, &reference);
    bool hit2 = compile(KERNEL, &reference);
    const char *err = capture_end();
    unsetenv("CGC_NO_CACHE");
    CHECK(!hit1 && !hit2);
    CHECK(strstr(err, "warning") == NULL);
    char path[300];
    snprintf(path, sizeof path, "%s/cgc", home);
    CHECK(access(path, F_OK) != 0);
}

static void test_compile_error_shows_log(void)
{
    use_cache_home("error");
    CudaCompileResult r;
    static const char broken[] = "extern \"C\" __global__ void broken(float *x) { x[0] = y; }\n";
    capture_start();
    int rc = cuda_compile(broken, "broken mod/../x", &opts, &r);
    const char *err = capture_end();
    CHECK_EQ_INT(rc, -1);
    CHECK(strstr(err, "nvrtcCompileProgram failed") != NULL);
    CHECK(strstr(err, "NVRTC log for module broken_mod_.._x") != NULL);
    CHECK(strstr(err, "identifier \"y\" is undefined") != NULL);
    /* the refused source is kept in a file of its own, which the note names */
    const char *note = strstr(err, "the source NVRTC compiled is in ");
    char path[512] = "";
    CHECK(note && sscanf(note, "the source NVRTC compiled is in %511[^:]", path) == 1);
    CHECK(strstr(path, "/cgc-nvrtc-") && strstr(path, "/broken_mod_.._x.cu"));
    FILE *f = fopen(path, "r");
    char kept[sizeof broken + 8] = "";
    CHECK(f && fread(kept, 1, sizeof kept - 1, f) == strlen(broken));
    CHECK_STR(kept, broken);
    if (f) fclose(f);
    if (path[0] && remove(path) == 0) rmdir(dirname(path));
    if (rc != -1 || !strstr(err, "identifier")) fprintf(stderr, "stderr was:\n%s\n", err);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cgc_kcache_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(other_kernel, sizeof other_kernel, "%s// another key\n", KERNEL);
    setenv("CGC_NO_CACHE", "1", 1);
    if (cuda_compile(KERNEL, "kcache_test", &opts, &reference) != 0) return 1;
    unsetenv("CGC_NO_CACHE");

    test_round_trip();
    test_corrupt_and_truncated();
    test_foreign_entry();
    test_symlink_refused();
    test_group_writable_refused();
    test_foreign_owner_refused();
    test_cache_off();
    test_compile_error_shows_log();
    CHECK_EQ_INT(cuda_blas_load(), 0);   /* loaded and every symbol found */
    CHECK_EQ_INT(cuda_blas_load(), 0);   /* once */

    free(reference.cubin);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", tmpdir);
    return check_result();
}
