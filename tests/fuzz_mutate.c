/* fuzz_mutate.c: deterministic mutation fuzzing of the front end.
 *
 * docs/language.md ("Diagnostics"): no input, however malformed, crashes cgc, hangs it,
 * or leaves it silent. This test takes valid .net texts (mlp.net and one that uses
 * every lexical form), applies a few thousand seeded mutations (bit flips, deletions,
 * inserted bytes including NUL and 0xFF, duplicated spans, hundreds of '(' in a row,
 * keywords dropped in, truncation) and runs each through parse_file, sema_check and
 * parse_value in-process. It checks that:
 *   - nothing crashes (a crash kills the test; a handler names the case first);
 *   - each input is handled quickly (a whole-run alarm catches hangs);
 *   - a rejected parse reported exactly one error (the first, then stop), an accepted
 *     one none, and a rejected sema check at least one.
 * Diagnostics go to /dev/null while a case runs. The same seed gives the same cases, so
 * a failure names a case that can be replayed: `fuzz_mutate [FILE] [--case N]`.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "grammar/ast.h"
#include "compiler/passes.h"

enum {
    CASES_PER_TEXT = 5000,
    MAX_MUTATIONS = 4,
    RUN_SECONDS_LIMIT = 120,   /* far above the few seconds a run takes */
};

/* Every lexical form: tabs, UTF-8 in strings and comments, escapes, units, lists,
 * unary minus, calls over several lines, CRLF. */
static const char forms_net[] =
    "# caf\xc3\xa9 \xe2\x88\x91 comment\n"
    "model forms {\n"
    "\tinput x: f32[B, 4, 4]\r\n"
    "\tinput t: f32[B, 16]\n"
    "\th = reshape(x, [B, -1])\n"
    "\tn = layernorm(h,\n"
    "\t              eps = 2.5E-5)\n"
    "\tg = gelu(n, approximate = \"tanh\") * 0.5 + -(n / 2)\n"
    "\toutput g\n"
    "\tloss mse(g, t)\n"
    "}\n"
    "train {\n"
    "\tdata = synthetic(samples = 256)\n"
    "\tcheckpoint = auto\n"
    "\tmemory = 512MB\n"
    "\toptimizer = sgd(lr = 0.1, momentum = 0.9, nesterov = true)\n"
    "\tschedule = step(every = 10, gamma = 0.5)\n"
    "\tsteps = 2 * 3\n"
    "}";

/* Bytes worth inserting: structure, the edges of each lexical rule, and hostile bytes. */
static const unsigned char interesting[] = {
    0x00, 0xff, 0xc3, 0xa9, 0x80, '\t', '\r', '\n', '(', ')', '[', ']', '{', '}', '"', '\\',
    '#',  '-',  '+',  '*',  '/',  '=',  ',',  ':',  'e', 'E', '.', '0', '9', '_', 'x', ' ',
};

static const char *const fragments[] = {
    "model", "train", "input", "output", "loss", "1e", "1e+", "512MB", "1.", "\"", "\\\"",
    "f32[", "= =", "((((", "----", "[]", "()", "}\n{", "\n\n", "# c\n", "1e999", "0.5",
};

/* splitmix64: small, seedable, the same everywhere. */
static uint64_t rng_state;

static uint64_t next_random(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t below(size_t n) { return n ? (size_t)(next_random() % n) : 0; }

/* A growable byte buffer. */
typedef struct Buf {
    char *data;
    size_t len, cap;
} Buf;

static void buf_reserve(Buf *b, size_t extra)
{
    if (b->len + extra <= b->cap) return;
    b->cap = (b->len + extra) * 2;
    b->data = realloc(b->data, b->cap);
    if (!b->data) abort();
}

static void buf_insert(Buf *b, size_t at, const char *bytes, size_t n)
{
    buf_reserve(b, n);
    memmove(b->data + at + n, b->data + at, b->len - at);
    memcpy(b->data + at, bytes, n);
    b->len += n;
}

static void buf_delete(Buf *b, size_t at, size_t n)
{
    if (at + n > b->len) n = b->len - at;
    memmove(b->data + at, b->data + at + n, b->len - at - n);
    b->len -= n;
}

static void mutate_once(Buf *b)
{
    size_t at = below(b->len + 1);
    switch (below(8)) {
    case 0:  /* flip a bit */
        if (b->len) b->data[below(b->len)] ^= (char)(1u << below(8));
        break;
    case 1: buf_delete(b, at, 1 + below(8)); break;
    case 2: {
        char c = (char)interesting[below(sizeof interesting)];
        buf_insert(b, at, &c, 1);
        break;
    }
    case 3: {
        char c = (char)below(256);
        buf_insert(b, at, &c, 1);
        break;
    }
    case 4: {  /* duplicate a span somewhere else */
        size_t from = below(b->len), n = 1 + below(64);
        if (from + n > b->len) n = b->len - from;
        char *span = malloc(n + 1);
        memcpy(span, b->data + from, n);
        buf_insert(b, at, span, n);
        free(span);
        break;
    }
    case 5: {  /* deep nesting: a run of one opener */
        static const char openers[] = "([-";
        size_t n = 150 + below(300);
        char *run = malloc(n);
        memset(run, openers[below(3)], n);
        buf_insert(b, at, run, n);
        free(run);
        break;
    }
    case 6: {
        const char *f = fragments[below(sizeof fragments / sizeof fragments[0])];
        buf_insert(b, at, f, strlen(f));
        break;
    }
    default: b->len = at; break;  /* truncate */
    }
}

/* --- running one case quietly --- */

static int saved_stderr = -1;
static volatile sig_atomic_t current_case = -1;

static void quiet_begin(void)
{
    fflush(stderr);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    close(null);
}

static void quiet_end(void)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
}

/* Names the case before dying, so that it can be replayed with --case. */
static void on_fatal_signal(int sig)
{
    char msg[96];
    int n = snprintf(msg, sizeof msg, "fuzz_mutate: signal %d in case %d\n", sig,
                     (int)current_case);
    if (saved_stderr >= 0 && n > 0) (void)!write(saved_stderr, msg, (size_t)n);
    signal(sig, SIG_DFL);
    raise(sig);
}

typedef struct Stats {
    int parsed, rejected, checked, values;
} Stats;

/* Runs the front end over one input and checks what the contract promises. */
static void run_case(int id, const char *text, size_t len, Stats *stats)
{
    current_case = id;
    Source *src = source_from_string("fuzz.net", text, len);
    quiet_begin();
    AstFile *file = parse_file(src);
    int parse_errors = src->nerrors;
    IrProgram *prog = file ? sema_check(src, file) : NULL;
    int total_errors = src->nerrors;
    ast_free(file);
    if (prog) ir_program_free(prog);
    Source *val = source_from_string("--value", text, len);
    AstExpr *value = parse_value(val);
    quiet_end();

    if (file) {
        stats->parsed++;
        if (parse_errors != 0) fprintf(stderr, "case %d: parsed, yet %d errors\n", id, parse_errors);
        CHECK_EQ_INT(parse_errors, 0);
        if (!prog && total_errors == 0) fprintf(stderr, "case %d: sema failed silently\n", id);
        CHECK(prog || total_errors > 0);
        stats->checked += prog != NULL;
    } else {
        stats->rejected++;
        if (parse_errors != 1) fprintf(stderr, "case %d: rejected with %d errors\n", id, parse_errors);
        CHECK_EQ_INT(parse_errors, 1);
    }
    CHECK_EQ_INT(val->nerrors, value ? 0 : 1);
    stats->values += value != NULL;
    ast_expr_free(value);
    source_free(val);
    source_free(src);
    current_case = -1;
}

/* Case ID of TEXT: the same mutations every run. */
static void make_case(Buf *b, const char *text, size_t len, int id)
{
    rng_state = 0x5eed0000ull + (uint64_t)id;
    b->len = 0;
    buf_insert(b, 0, text, len);
    int n = 1 + (int)below(MAX_MUTATIONS);
    for (int i = 0; i < n; i++) mutate_once(b);
}

static void fuzz_text(const char *text, size_t len, int first_id, int only, Stats *stats)
{
    Buf b = {0};
    for (int i = 0; i < CASES_PER_TEXT; i++) {
        int id = first_id + i;
        if (only >= 0 && id != only) continue;
        make_case(&b, text, len, id);
        run_case(id, b.data, b.len, stats);
    }
    run_case(first_id + CASES_PER_TEXT, text, len, stats);  /* the text itself */
    free(b.data);
}

/* Inputs no mutation is likely to produce: huge runs and nothing at all. */
static void fuzz_extremes(Stats *stats)
{
    static const char fills[] = "([-{\"#a9\n\xff";
    size_t n = 200000;
    char *text = malloc(n);
    for (size_t i = 0; i < sizeof fills - 1; i++) {
        memset(text, fills[i], n);
        run_case(-100 - (int)i, text, n, stats);
    }
    run_case(-1, "", 0, stats);
    free(text);
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    Buf b = {0};
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) buf_insert(&b, b.len, chunk, n);
    fclose(f);
    *len = b.len;
    return b.data;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int only = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--case") == 0 && i + 1 < argc) only = atoi(argv[++i]);
        else path = argv[i];
    }
    saved_stderr = dup(2);
    signal(SIGSEGV, on_fatal_signal);
    signal(SIGABRT, on_fatal_signal);
    signal(SIGBUS, on_fatal_signal);
    alarm(RUN_SECONDS_LIMIT);  /* a hang kills the test */

    Stats stats = {0};
    clock_t start = clock();
    if (path) {
        size_t len;
        char *text = read_file(path, &len);
        if (!text) {
            fprintf(stderr, "fuzz_mutate: cannot read %s\n", path);
            return 1;
        }
        fuzz_text(text, len, 0, only, &stats);
        free(text);
    } else {
        size_t mlp_len;
        char *mlp = read_file(CGC_MODELS_DIR "/mlp.net", &mlp_len);   /* docs/language.md */
        if (!mlp) {
            fprintf(stderr, "fuzz_mutate: cannot read %s\n", CGC_MODELS_DIR "/mlp.net");
            return 1;
        }
        fuzz_text(mlp, mlp_len, 0, only, &stats);
        free(mlp);
        fuzz_text(forms_net, sizeof forms_net - 1, 100000, only, &stats);
        if (only < 0) fuzz_extremes(&stats);
    }
    printf("%d parsed (%d passed sema), %d rejected, %d whole texts were values; %.1f s\n",
           stats.parsed, stats.checked, stats.rejected, stats.values,
           (double)(clock() - start) / CLOCKS_PER_SEC);
    /* The unmutated texts must parse and check; anything else means a broken fuzzer. */
    CHECK(stats.checked >= (path ? 1 : 2));
    CHECK(stats.rejected > 0);
    return check_result();
}
