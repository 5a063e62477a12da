/* mutate_cli.c: byte-level mutations of model files, each given to the cgc binary.
 *
 *   mutate_cli CGC MODEL.net...
 *
 * For every model, 120 seeded mutations (bit flips, random bytes, deleted, duplicated
 * and inserted spans, deep bracket nesting, truncation) are written to a temporary file
 * and run through `cgc --check` (eager, or fused in the default mode) or `cgc
 * --dump-ir`; the first few that pass are also trained for two steps, so that data
 * loading, the executor and the training loop see mutated models too. Each run must end
 * within 10 seconds, by exit 0, or by exit 1 with an "error:" on standard error. A
 * failing input is kept and its path printed, so it can be replayed. This is the suite's
 * sample; the campaign is scripts/fuzz.sh's fuzz_net, run for hours.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MUTATIONS_PER_MODEL = 120, TRAINED_PER_MODEL = 10, TIME_LIMIT_S = 10, MAX_LEN = 1 << 20 };

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t next(void)   /* xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

static size_t below(size_t n) { return n ? (size_t)(next() % n) : 0; }

/* Applies one random mutation to BUF (of length *LEN, capacity MAX_LEN). */
static const char *mutate(unsigned char *buf, size_t *len)
{
    size_t n = *len, at = below(n + 1), span = 1 + below(40);
    switch (below(8)) {
    case 0: if (n) buf[below(n)] ^= (unsigned char)(1u << below(8)); return "bit flip";
    case 1: if (n) buf[below(n)] = (unsigned char)next(); return "random byte";
    case 2:
        if (at + span > n) span = n - at;
        memmove(buf + at, buf + at + span, n - at - span);
        *len = n - span;
        return "deleted span";
    case 3:
        if (n + span > MAX_LEN) return "none";
        memmove(buf + at + span, buf + at, n - at);
        for (size_t i = 0; i < span; i++) buf[at + i] = (unsigned char)next();
        *len = n + span;
        return "inserted random bytes";
    case 4: {
        size_t from = below(n);
        if (from + span > n) span = n - from;
        if (n + span > MAX_LEN) return "none";
        memmove(buf + at + span, buf + at, n - at);
        memmove(buf + at, buf + (from < at ? from : from + span), span);  /* may overlap */
        *len = n + span;
        return "duplicated span";
    }
    case 5: {
        const char *tok[] = {"(", "[", "-", "{", "\"", "#", "\n", "=", ",", "1e999", "0", "-1", "N", "x"};
        const char *t = tok[below(sizeof tok / sizeof tok[0])];
        size_t tl = strlen(t), reps = 1 + below(400);
        if (n + tl * reps > MAX_LEN) return "none";
        memmove(buf + at + tl * reps, buf + at, n - at);
        for (size_t i = 0; i < reps; i++) memcpy(buf + at + i * tl, t, tl);
        *len = n + tl * reps;
        return "repeated token";
    }
    case 6: *len = at; return "truncated";
    default: {
        const char *words[] = {"linear", "relu", "dropout", "layernorm", "reshape", "matmul", "sum",
                               "cross_entropy", "mse", "softmax", "batch", "epochs", "steps", "lr",
                               "idx", "synthetic", "i32", "f16", "bf16", "model", "train", "input",
                               "output", "loss", "9999999999", "0.5", "-3", "\"\\", "memory", "512GB"};
        const char *w = words[below(sizeof words / sizeof words[0])];
        size_t wl = strlen(w);
        if (n + wl > MAX_LEN) return "none";
        memmove(buf + at + wl, buf + at, n - at);
        memcpy(buf + at, w, wl);
        *len = n + wl;
        return "inserted word";
    }
    }
}

/* Runs ARGV (ARGV[0] is cgc); 0 when the outcome is acceptable, with its exit status in
 * *CODE. */
static int run_one(char *const argv[], int *code, char *why, size_t whylen)
{
    char errpath[] = "/tmp/cgc-mutate-err-XXXXXX";
    int errfd = mkstemp(errpath);
    if (errfd < 0) { snprintf(why, whylen, "mkstemp failed"); return -1; }
    pid_t pid = fork();
    if (pid < 0) {  /* else waitpid(-1) finds no child and the run would count as passed */
        snprintf(why, whylen, "fork failed");
        close(errfd), unlink(errpath);
        return -1;
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(errfd, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    time_t start = time(NULL);
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (time(NULL) - start > TIME_LIMIT_S) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            snprintf(why, whylen, "did not finish within %d s", TIME_LIMIT_S);
            close(errfd), unlink(errpath);
            return -1;
        }
        usleep(1000);
    }
    char err[4096] = {0};
    ssize_t got = pread(errfd, err, sizeof err - 1, 0);
    close(errfd);
    unlink(errpath);
    if (got < 0) got = 0;
    err[got] = '\0';
    if (WIFSIGNALED(status)) { snprintf(why, whylen, "killed by signal %d", WTERMSIG(status)); return -1; }
    *code = WEXITSTATUS(status);
    if (*code == 0) return 0;
    if (*code != 1) { snprintf(why, whylen, "exit status %d", *code); return -1; }
    if (!strstr(err, "error:")) { snprintf(why, whylen, "exit 1 without a diagnostic: '%.200s'", err); return -1; }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: mutate_cli CGC MODEL.net...\n"); return 2; }
    static unsigned char orig[MAX_LEN], buf[MAX_LEN];
    int failures = 0, runs = 0;
    for (int m = 2; m < argc; m++) {
        FILE *f = fopen(argv[m], "rb");
        if (!f) { perror(argv[m]); return 1; }
        size_t olen = fread(orig, 1, sizeof orig, f);
        fclose(f);
        int trained = 0;
        for (int i = 0; i < MUTATIONS_PER_MODEL; i++) {
            memcpy(buf, orig, olen);
            size_t len = olen;
            const char *what = mutate(buf, &len);
            if (below(3) == 0) what = mutate(buf, &len);   /* sometimes two at once */
            char path[] = "/tmp/cgc-mutant-XXXXXX.net";
            int fd = mkstemps(path, 4);
            if (fd < 0 || write(fd, buf, len) != (ssize_t)len) { perror("mutant"); return 1; }
            close(fd);
            char why[512];
            /* --arch none: the front end and the plan, not NVRTC (test_nvrtc_models
             * compiles every model; here a compile per mutant would dominate); a third
             * of the mutants eager, two thirds fused (one of them dumped), so that both
             * renderers and the fusion pass see mutants */
            char *check[] = {argv[1], path, "--mode", i % 3 == 0 ? "eager" : "default",
                             i % 3 == 1 ? "--dump-ir" : "--check", "--arch", "none", NULL};
            if (i % 3 == 1) check[5] = NULL;
            char *train[] = {argv[1], path, "--steps", "2", "-q", NULL};
            int code = 1, ok = run_one(check, &code, why, sizeof why) == 0;
            runs++;
            if (ok && code == 0 && trained < TRAINED_PER_MODEL) {
                trained++;
                runs++;
                ok = run_one(train, &code, why, sizeof why) == 0;
            }
            if (!ok) {
                failures++;
                fprintf(stderr, "FAIL %s mutation %d (%s): %s; input kept in %s\n", argv[m], i, what, why, path);
            } else {
                unlink(path);
            }
        }
    }
    printf("%d passed, %d failed\n", runs - failures, failures);
    return failures ? 1 : 0;
}
