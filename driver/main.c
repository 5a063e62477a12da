/* main.c: the cgc command line.
 *
 *   parse -> sema -> command-line overrides -> precision -> training lowering
 *         -> checkpoint -> fusion -> plan and memory plan -> check, inspect or run
 *
 * (driver/pipeline.c does everything up to training lowering, driver/compile.c the
 * rest up to the plan). Exit status: 0 success, 1 an error in the model, data
 * or run, 2 a malformed command line.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>

#include "../base/clock.h"
#include "bench.h"
#include "build_config.h"
#include "../compiler/passes.h"
#include "pipeline.h"
#include "compile.h"
#include "../runtime/autotune.h"
#include "backend.h"
#include "job.h"
#include "../runtime/comm.h"
#include "../runtime/generate.h"
#include "../runtime/predict.h"
#include "../runtime/profile.h"
#include "../runtime/safetensors.h"
#include "../runtime/train.h"
#include "../runtime/tune.h"
#include "../base/outfile.h"

#define STATS_ROLE "write --stats to"

static const char usage_text[] =
    "usage: cgc FILE.net [options]\n"
    "\n"
    "Compiles a .net model and trains it (see README.md, and docs/language.md for the\n"
    "language).\n"
    "\n"
    "What to do:\n"
    "  --check                 compile everything (front end, IR, kernels, NVRTC for\n"
    "                          --arch) and run nothing; needs no GPU\n"
    "  --arch sm_XX|none       with --check or --bench: the GPU architecture to compile for\n"
    "                          (default: the first GPU's, else sm_90); none stops before\n"
    "                          NVRTC\n"
    "  --dump-ir[=GRAPH]       print the IR after all passes and exit; GRAPH is forward,\n"
    "                          train, train_micro, eval (default: all four) or decode\n"
    "                          (a text model's, one position a step, as --generate runs)\n"
    "  --dump-ir-after PASS    print the IR after PASS and exit: sema, precision,\n"
    "                          training, checkpoint or fusion (with --dump-ir=GRAPH: one graph)\n"
    "  --explain               print what the passes decided (precision of every tensor and\n"
    "                          why, fusion groups, why neighbouring kernels are apart,\n"
    "                          recomputed activations, memory plan, kernels per step)\n"
    "                          and exit\n"
    "  --stats FILE            also write those numbers as JSON to FILE (works with --check)\n"
    "  --device DEV            auto (default: the first usable GPU, else the CPU), cpu,\n"
    "                          or cuda[:N]; with several ranks, each takes the GPU\n"
    "                          cuda:LOCAL_RANK (auto: if every rank has one)\n"
    "  --devices               list the CUDA devices cgc can use and cuDNN's version, and\n"
    "                          exit\n"
    "  --emit DIR              write the generated CUDA kernels (one .cu each, module.cu),\n"
    "                          the device prelude, the host plan, the IR after each pass\n"
    "                          (ir/) and a reproducer that builds with nvcc (repro/) to\n"
    "                          DIR, then go on (with --check: compile only; not with\n"
    "                          --explain or --dump-ir)\n"
    "  --mode MODE             default (the default: fused kernels, optimizer updates in\n"
    "                          place and multi-tensor), eager (one kernel or GEMM per IR\n"
    "                          op, the baseline), reduce-overhead (default's kernels, each\n"
    "                          micro-batch's launches replayed as one CUDA graph from the\n"
    "                          second batch on)\n"
    "                          or max-autotune (reduce-overhead, with each launch's grid and\n"
    "                          each GEMM's cuBLAS(Lt) algorithm, and from sm_80 generated\n"
    "                          GEMM, fused MLP and implicit-GEMM convolution kernels, and\n"
    "                          cuDNN's convolution algorithms where it loads, timed on the\n"
    "                          GPU, at most 60 s, the fastest kept in the cache's\n"
    "                          cgc/tune/)\n"
    "  --tune-budget SECONDS   max-autotune: the most time tuning may take (default 60);\n"
    "                          what it leaves untimed keeps the plan's choice\n"
    "  --tune-file FILE        max-autotune: keep the choices in FILE instead of the cache,\n"
    "                          as a lockfile: read when it is there (an error when it was\n"
    "                          made for another plan, batch or GPU), tuned and written when\n"
    "                          not (on a GPU); with --emit, the choices the reproducer\n"
    "                          replays (--check --emit needs FILE to be there; a training\n"
    "                          run that has yet to write it emits the heuristics')\n"
    "  --save FILE             save parameters and training state (safetensors) after\n"
    "                          every epoch and at the end\n"
    "  --resume FILE           continue the run saved in FILE\n"
    "  --stop-after K          stop after global step K as if interrupted (saving when\n"
    "                          --save is given); schedules still span the whole run\n"
    "  --generate PROMPT       continue PROMPT with a text model's --resume weights and\n"
    "                          exit (on the --device; the file's seed draws)\n"
    "  --tokens N              bytes --generate samples (default 200)\n"
    "  --temperature T         logits divided by T before sampling (default 1; 0: the\n"
    "                          likeliest byte each time)\n"
    "  --top-k K               sample among the K likeliest bytes (default 0: all)\n"
    "  --logits FILE           with --generate: also write the logits each byte was drawn\n"
    "                          from to FILE, a NumPy array f32 [tokens, 256]\n"
    "  --predict INPUT         run --resume's weights on INPUT (.npy, .npz, .safetensors,\n"
    "                          .csv or a directory of .npy) in evaluation mode and exit\n"
    "  --out FILE              where --predict writes the outputs: .npy, or .safetensors\n"
    "                          with each row's class too for a classifier\n"
    "  --metrics FILE          append one JSON object per epoch to FILE\n"
    "  --metrics-every N       also one every N steps: the mean training loss since the\n"
    "                          last (on a GPU, read back each time)\n"
    "  --detect-anomaly        check the values of every op and stop at the first NaN or\n"
    "                          infinity, naming the op, its line and the step (on a GPU:\n"
    "                          every value the plan stores, read back after each graph\n"
    "                          run, no CUDA graphs, memory not reused; off, it costs\n"
    "                          nothing)\n"
    "  --bench                 set eager against --mode (default when eager or not given):\n"
    "                          launches per step, planned memory, cold and warm compile\n"
    "                          times, and on a GPU step times (median, p10, p90); exits\n"
    "  --profile FILE          write a Chrome trace (opens in Perfetto) of the second to\n"
    "                          fourth training steps this run takes: every op of the CPU\n"
    "                          reference executor, or every launch and GEMM on a device\n"
    "  --nproc N               train on N ranks on this machine, at most 8 a core (Open\n"
    "                          MPI's mpirun starts cgc N times; `mpirun -n N cgc ...`\n"
    "                          does the same, across machines too); batch stays the\n"
    "                          global batch, each rank takes its share; with --check,\n"
    "                          --explain or --dump-ir: compile as for N ranks, start\n"
    "                          nothing. A job of one rank (--nproc 1, or a launcher's\n"
    "                          one rank) still sums its gradients over its ranks (NCCL\n"
    "                          on a GPU): what the sums cost, as DDP with one process\n"
    "  -q, --quiet             print only errors\n"
    "  -v, --verbose           also report compile time (the front end and passes, the\n"
    "                          plan and kernel source, NVRTC or the kernel cache)\n"
    "                          and, on a GPU, the median step time, the launches\n"
    "                          and GEMMs per step as run, and the device memory\n"
    "  --version, -h, --help\n"
    "\n"
    "Train keys (override the file's train block; values are .net expressions):\n"
    "  --data SPEC             idx(\"DIR\", scale = S), synthetic(samples = K) or\n"
    "                          text(\"FILE\", context = T)\n"
    "  --batch N  --epochs N  --steps N  --accumulate N  --seed N\n"
    "  --shuffle true|false  --drop-last true|false\n"
    "  --optimizer SPEC        sgd(lr, momentum, nesterov, weight_decay), adam(...), adamw(...)\n"
    "  --lr X                  the optimizer's learning rate\n"
    "  --schedule SPEC         constant, cosine(warmup, min_lr), step(every, gamma)\n"
    "  --precision P           fp32, tf32, bf16 or fp16\n"
    "  --clip-norm X           max global gradient norm, 0 = off\n"
    "  --checkpoint M          none, all or auto (activation checkpointing: the backward\n"
    "                          keeps some layer outputs and recomputes the segments between\n"
    "                          them, products included; results are bit for bit the same;\n"
    "                          all: the least memory, auto: the fewest FLOPs that fit\n"
    "                          --memory)\n"
    "  --memory SIZE           budget for checkpoint = auto, e.g. 512MB: the planned bytes of\n"
    "                          activations and temporaries of a step (default: the GPU's\n"
    "                          free memory less the plan's persistent buffers: parameters,\n"
    "                          optimizer state, inputs; the data set a GPU run uploads is\n"
    "                          not counted; none on the CPU)\n"
    "  --shard S               none, or optimizer: with several ranks, each keeps and\n"
    "                          updates a slice of the optimizer state (ZeRO stage 1)\n"
    "  --prefetch N            micro-batches of rows read ahead on host threads (one a\n"
    "                          micro-batch, up to 4) while the step runs (default 2,\n"
    "                          or 0 on the CPU bound to one core; 0: read in the\n"
    "                          step), on the CPU and when the data set streams to a GPU\n"
    "  --stream M              auto, always or never: a GPU run's data set stays on the\n"
    "                          GPU whole (never), or on the host, each micro-batch's rows\n"
    "                          copied over on a copy stream while the step before runs\n"
    "                          (always); auto streams when it takes more than 90% of the\n"
    "                          GPU's memory left once the plan's arena is allocated\n";

enum { OPT_TRAIN_KEY = 256, OPT_DUMP_IR, OPT_DEVICE, OPT_SAVE, OPT_RESUME, OPT_STOP_AFTER,
       OPT_DETECT_ANOMALY,
       OPT_METRICS, OPT_METRICS_EVERY, OPT_CHECK, OPT_VERSION, OPT_HELP, OPT_LR, OPT_EMIT, OPT_MODE,
       OPT_ARCH, OPT_DEVICES, OPT_DUMP_AFTER, OPT_EXPLAIN, OPT_STATS, OPT_PROFILE, OPT_BENCH,
       OPT_TUNE_BUDGET, OPT_TUNE_FILE, OPT_NPROC, OPT_GENERATE, OPT_TOKENS, OPT_TEMPERATURE,
       OPT_TOP_K, OPT_LOGITS, OPT_PREDICT, OPT_OUT };

/* Flags that are train keys: the flag name, then the key it sets. */
static const char *const train_flags[][2] = {
    {"data", "data"},           {"batch", "batch"},       {"epochs", "epochs"},
    {"steps", "steps"},         {"shuffle", "shuffle"},   {"drop-last", "drop_last"},
    {"optimizer", "optimizer"}, {"schedule", "schedule"}, {"precision", "precision"},
    {"accumulate", "accumulate"}, {"clip-norm", "clip_norm"}, {"checkpoint", "checkpoint"},
    {"memory", "memory"},       {"seed", "seed"},         {"shard", "shard"},
    {"prefetch", "prefetch"},   {"stream", "stream"},
};
enum { NUM_TRAIN_FLAGS = sizeof train_flags / sizeof train_flags[0] };

typedef struct Cli {
    const char *path;
    bool check, quiet, verbose, devices;
    const char *arch;           /* --arch: NULL for the default */
    const char *dump_ir;        /* NULL: no dump; "" all graphs */
    const char *device;
    const char *lr;
    const char *emit_dir;       /* --emit: NULL for none */
    const char *tune_file;      /* --tune-file: NULL for the cache's choices */
    int dump_after;             /* --dump-ir-after: a PipelinePass, or -1 */
    bool explain, bench;
    int nproc;                  /* --nproc: 0 when not given */
    CommWorld world;            /* the job this process is a rank of (comm_world) */
    const char *stats_path;     /* --stats: NULL for none; else STATS_ROLE's output */
    PlanMode mode;
    char *pass_ir[PASS_NUM];    /* --emit: each graph printed after each pass (malloc'd) */
    RunOptions run;
    double started;             /* clock_seconds() when the source was read */
    double passes_s;            /* the front end and the passes up to training lowering */
    Override overrides[NUM_TRAIN_FLAGS * 4 + 1];   /* + 1: --lr goes last */
    int noverrides;
    const char *generate;       /* --generate: the prompt, or NULL */
    GenerateOptions gen;        /* --tokens, --temperature, --top-k, --logits */
    PredictOptions predict;     /* --predict INPUT, --out FILE */
    bool gen_flags;             /* one of them was given */
} Cli;

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "cgc: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'cgc --help'.\n");
    return 2;
}

/* --dump-ir's GRAPH: every graph (""), or one of them by name. */
static bool graph_name_ok(const char *which)
{
    const char *const names[] = {"", "forward", "train", "train_micro", "eval", "decode"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(which, names[i]) == 0) return true;
    return false;
}

/* Parses a non-negative integer flag value; false when it is not one. */
static bool parse_count(const char *s, int64_t *out)
{
    char *end;
    if (!*s || *s == '-') return false;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end || errno || v < 0) return false;   /* ERANGE: past what an int64_t holds */
    *out = v;
    return true;
}

/* A plain decimal (no sign, inf, nan, hex or blanks) at most HI, and above 0 or (ZERO) at
 * least 0: --tune-budget's seconds, --temperature. False for anything else. */
static bool parse_decimal(const char *s, bool zero, double hi, double *out)
{
    char *end;
    errno = 0;
    if (!*s || !strchr("0123456789.", *s)) return false;
    double v = strtod(s, &end);
    if (*end || errno || !(zero ? v >= 0 : v > 0) || !(v <= hi) || strpbrk(s, "xXpP")) return false;
    *out = v;
    return true;
}

/* --mode: torch.compile's names. Returns 0, or -1 after saying what there is. */
static int parse_mode(const char *s, PlanMode *mode)
{
    if (plan_mode_from_name(s, mode)) return 0;
    fprintf(stderr, "cgc: --mode %s: unknown mode; the modes are eager, default, reduce-overhead "
            "and max-autotune\nTry 'cgc --help'.\n", diag_quote(s, 40));
    return -1;
}

static int parse_pass(const char *s)
{
    for (int i = 0; i < PASS_NUM; i++)
        if (strcmp(s, pipeline_pass_names[i]) == 0) return i;
    return -1;
}

/* --emit DIR: DIR/ir/N_PASS.ir, the IR after each pass as --dump-ir-after prints it.
 * Called after plan_emit, which refuses a DIR of 4096 characters or more, so the names
 * fit. Returns 0 or -1 (reported). */
static int emit_pass_irs(const Cli *cli)
{
    char dir[4100], path[4200];
    CGC_ASSERT(strlen(cli->emit_dir) < 4096);
    snprintf(dir, sizeof dir, "%s/ir", cli->emit_dir);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        cgc_error("%s: cannot create the directory: %s", dir, strerror(errno));
        return -1;
    }
    for (int pass = 0; pass < PASS_NUM; pass++) {
        CGC_ASSERT(cli->pass_ir[pass]);
        snprintf(path, sizeof path, "%s/%d_%s.ir", dir, pass + 1, pipeline_pass_names[pass]);
        const char *text = cli->pass_ir[pass];
        if (out_write(PLAN_EMIT_ROLE, path, &out_generated, text, strlen(text)) != 0) return -1;
    }
    return 0;
}

/* The architecture --arch names, or sm_90 (what --check compiles for without a GPU). */
static int arch_or_default(const Cli *cli)
{
    int arch = cli->arch ? backend_parse_arch(cli->arch) : 0;
    return arch > 0 ? arch : 90;
}

/* The choices file the cache holds for PLAN on the first CUDA device, when there is one
 * and it was made for this plan, batch and architecture (ARCH, 0: the device's): into
 * *OUT, with the device's name in DEVICE. */
static bool tuned_choices(const Plan *plan, int arch, TuneFile *out, char *device, size_t len)
{
    CudaDeviceInfo info;
    char why[256], path[4200];
    if (cuda_probe(&info, 1, why, sizeof why) < 1) return false;
    int dev_arch = info.cc_major * 10 + info.cc_minor;
    if (arch > 0 && arch != dev_arch) return false;
    TuneFile want;
    const IrProgram *p = plan->p;
    int64_t rows = p->cfg.batch / p->cfg.ranks;   /* rank 0's share: the batch it tunes at */
    if (!tune_init(&want, p->model_name, dev_arch, info.name, autotune_plan_hash(plan, rows), why, sizeof why))
        return false;
    bool found = tune_load(&want, out, path, sizeof path, why, sizeof why) == TUNE_FOUND;
    tune_free(&want);
    snprintf(device, len, "%s", info.name);
    return found;
}

/* --tune-file FILE: its choices into *OUT, when it is a choices file made for this
 * model, plan and batch. Returns false after reporting, or, when MISSING is not NULL and
 * there is no FILE, silently with *MISSING set. */
static bool read_tune_file(const Plan *plan, const char *path, TuneFile *out, bool *missing)
{
    const IrProgram *p = plan->p;
    char why[256];
    uint64_t want = autotune_plan_hash(plan, p->cfg.batch);
    bool absent;
    if (!tune_read(path, out, &absent, why, sizeof why)) {
        if (absent && missing) {
            *missing = true;
            return false;
        }
        cgc_error("--tune-file %s: %s%s", diag_quote(path, 80), why,
                  absent ? " (--emit --check replays the choices of a file that is there: a run "
                           "in max-autotune on a GPU with --tune-file writes it)" : "");
        return false;
    }
    if (strcmp(out->model, p->model_name) != 0 || out->plan_hash != want) {
        cgc_error("--tune-file %s: the choices were made for %s%s (plan %016llx), not for this "
                  "plan of %s at batch %lld (plan %016llx): a change to the model, its train "
                  "block or the flags makes another plan; tune this one on the GPU (a run in "
                  "max-autotune with --tune-file writes the file)",
                  diag_quote(path, 80), strcmp(out->model, p->model_name) != 0 ? "model " : "another plan of ",
                  out->model, (unsigned long long)out->plan_hash, p->model_name, (long long)p->cfg.batch,
                  (unsigned long long)want);
        tune_free(out);
        return false;
    }
    return true;
}

/* --emit DIR with max-autotune: the choices the reproducer replays and DIR/autotune.tune
 * writes, in the format of the cache's files (tune.h): those of --tune-file; else those
 * tuned on this machine's GPU when the cache holds them for this plan (*TUNED); else
 * those a run without a GPU would make (heuristics, untimed). A training run whose
 * --tune-file is not there yet (it tunes and writes it) emits the heuristics', and says
 * so. Into *CHOICES (for the program's batch) and *OUT. Returns 0 or -1 (reported). */
static int emit_choices(const Plan *plan, const Cli *cli, TuneFile *out, PlanChoices *choices,
                        bool *tuned)
{
    const IrProgram *p = plan->p;
    char why[256], device[128] = "";
    int64_t symvals[IR_MAX_SYMBOLS] = {p->cfg.batch};
    char quoted[128];    /* diag_quote's buffers are 128 bytes */
    const char *file = NULL;
    if (cli->tune_file) file = strcpy(quoted, diag_quote(cli->tune_file, 80));
    bool missing = false;
    if (file && !read_tune_file(plan, cli->tune_file, out, cli->check ? NULL : &missing)) {
        if (!missing) return -1;
        if (!cli->quiet)
            fprintf(stderr, "cgc: --emit: --tune-file %s is not there yet, so the reproducer "
                            "replays the heuristics' choices; once a run on a GPU has tuned "
                            "and written it, --check --emit DIR --tune-file %s writes one that "
                            "replays the tuned choices\n", file, file);
        file = NULL;
    } else if (file) {
        if (autotune_resolve(plan, symvals, out->arch, out, choices, why, sizeof why) != 0) {
            cgc_error("--tune-file %s: %s", file, why);
            tune_free(out);
            return -1;
        }
        *tuned = out->tuning_ms >= 0;
    } else {
        *tuned = tuned_choices(plan, cli->arch ? backend_parse_arch(cli->arch) : 0, out, device,
                               sizeof device);
        if (*tuned && autotune_resolve(plan, symvals, out->arch, out, choices, why, sizeof why) != 0) {
            if (!cli->quiet)   /* as a run would, which then tunes again */
                fprintf(stderr, "cgc: --emit: the cache's autotune choices for %s are refused (%s); "
                                "using the heuristics'\n", device, why);
            tune_free(out);
            *tuned = false;
        }
    }
    if (*tuned && !cli->quiet)
        fprintf(stderr, "cgc: --emit: the autotune choices are those tuned on %s (sm_%d), from %s\n",
                out->device, out->arch, file ? file : "the cache");
    if (file || *tuned) return 0;
    if (!tune_init(out, p->model_name, arch_or_default(cli), "none (heuristics: nothing timed)",
                   autotune_plan_hash(plan, p->cfg.batch), why, sizeof why)) {
        cgc_error("--emit: the autotune choices: %s", why);
        return -1;
    }
    autotune_heuristics(plan, symvals, out);
    int rc = autotune_resolve(plan, symvals, out->arch, out, choices, why, sizeof why);
    if (rc != 0) CGC_INTERNAL("the heuristics' choices are refused: %s", why);
    return 0;
}

/* DIR/autotune.tune: T as its file. Returns 0 or -1 (reported). */
static int write_choices(const TuneFile *t, const Cli *cli)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/autotune.tune", cli->emit_dir);
    return tune_store_file(t, path);
}

/* --emit DIR: the plan and the IR after each pass written out (in max-autotune, with its
 * choices). Returns 0 or -1 (reported). */
static int emit_plan(const Plan *plan, const Cli *cli, bool *tuned_out)
{
    bool autotuned = plan->mode == PLAN_MAX_AUTOTUNE, tuned = false;
    TuneFile t;
    PlanChoices choices;
    if (autotuned && emit_choices(plan, cli, &t, &choices, &tuned) != 0) return -1;
    *tuned_out = tuned;
    int rc = plan_emit(plan, cli->emit_dir, autotuned ? &choices : NULL, arch_or_default(cli));
    if (rc == 0) rc = emit_pass_irs(cli);
    if (rc == 0 && autotuned) rc = write_choices(&t, cli);
    if (autotuned) {
        tune_free(&t);
        plan_choices_free(&choices);
    }
    const char *what = !autotuned ? ""
                       : tuned   ? ", the tuned autotune choices (autotune.tune)"
                                 : ", the autotune choices before tuning (autotune.tune)";
    if (rc == 0 && !cli->quiet)
        fprintf(stderr, "cgc: wrote %d kernels, the host plan, the IR after each pass%s and a "
                        "reproducer to %s (%s/repro: make, then ./repro on a GPU)\n",
                plan->nkernels, what, cli->emit_dir, cli->emit_dir);
    return rc;
}

/* --stats FILE. Returns 0, or 1 after an error. */
static int write_stats(const Compiled *c, const char *path)
{
    OutFile o;
    if (out_open(&o, STATS_ROLE, path, &out_json) != 0) return 1;
    compiled_write_stats(c, o.f);
    return out_close(&o) != 0;
}

/* Every file the run will write, checked before any work (base/outfile.h): none may land
 * on the model's source, on the checkpoint resumed (but a save), on --predict's input, on
 * another output, or on anything but a new file or one of its own kind. TRAINS: a training run. 0, or 1 after
 * an error. */
static int check_outputs(const Cli *cli, bool trains)
{
    out_protect(cli->path, "the model's source", NULL);
    if (cli->run.resume_path)
        out_protect(cli->run.resume_path, "the checkpoint --resume reads", &st_checkpoint);
    if (cli->predict.input) out_protect(cli->predict.input, "the input of --predict", NULL);
    const struct {
        const char *path, *role;
        const OutKind *kind;
    } outs[] = {
        {cli->run.save_path, ST_SAVE_ROLE, &st_checkpoint},
        {cli->stats_path, STATS_ROLE, &out_json},
        {cli->run.metrics_path, TRAIN_METRICS_ROLE, &out_json},
        {cli->run.profile_path, PROFILE_ROLE, &out_json},
        {cli->gen.logits_path, GENERATE_LOGITS_ROLE, &out_npy},
        {cli->predict.out, PREDICT_OUT_ROLE, cli->predict.out ? predict_out_kind(cli->predict.out) : NULL},
        {trains ? cli->tune_file : NULL, TUNE_FILE_ROLE, &tune_choices},
    };
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        if (outs[i].path && out_reserve(outs[i].role, outs[i].path, outs[i].kind) != 0) return 1;
    struct stat st;
    if (cli->emit_dir && stat(cli->emit_dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        cgc_error("cannot write --emit's files to %s: it is %s, not a directory", cli->emit_dir,
                  file_kind(st.st_mode));
        return 1;
    }
    return 0;
}

/* Returns 0 when the command line is well formed, else the exit status. */
static int parse_args(int argc, char **argv, Cli *cli)
{
    static struct option opts[NUM_TRAIN_FLAGS + 40];
    int n = 0;
    for (int i = 0; i < NUM_TRAIN_FLAGS; i++)
        opts[n++] = (struct option){train_flags[i][0], required_argument, NULL, OPT_TRAIN_KEY + 100 + i};
    opts[n++] = (struct option){"lr", required_argument, NULL, OPT_LR};
    opts[n++] = (struct option){"dump-ir", optional_argument, NULL, OPT_DUMP_IR};
    opts[n++] = (struct option){"device", required_argument, NULL, OPT_DEVICE};
    opts[n++] = (struct option){"save", required_argument, NULL, OPT_SAVE};
    opts[n++] = (struct option){"resume", required_argument, NULL, OPT_RESUME};
    opts[n++] = (struct option){"stop-after", required_argument, NULL, OPT_STOP_AFTER};
    opts[n++] = (struct option){"detect-anomaly", no_argument, NULL, OPT_DETECT_ANOMALY};
    opts[n++] = (struct option){"metrics", required_argument, NULL, OPT_METRICS};
    opts[n++] = (struct option){"metrics-every", required_argument, NULL, OPT_METRICS_EVERY};
    opts[n++] = (struct option){"check", no_argument, NULL, OPT_CHECK};
    opts[n++] = (struct option){"emit", required_argument, NULL, OPT_EMIT};
    opts[n++] = (struct option){"mode", required_argument, NULL, OPT_MODE};
    opts[n++] = (struct option){"arch", required_argument, NULL, OPT_ARCH};
    opts[n++] = (struct option){"devices", no_argument, NULL, OPT_DEVICES};
    opts[n++] = (struct option){"dump-ir-after", required_argument, NULL, OPT_DUMP_AFTER};
    opts[n++] = (struct option){"explain", no_argument, NULL, OPT_EXPLAIN};
    opts[n++] = (struct option){"stats", required_argument, NULL, OPT_STATS};
    opts[n++] = (struct option){"profile", required_argument, NULL, OPT_PROFILE};
    opts[n++] = (struct option){"bench", no_argument, NULL, OPT_BENCH};
    opts[n++] = (struct option){"tune-budget", required_argument, NULL, OPT_TUNE_BUDGET};
    opts[n++] = (struct option){"generate", required_argument, NULL, OPT_GENERATE};
    opts[n++] = (struct option){"tokens", required_argument, NULL, OPT_TOKENS};
    opts[n++] = (struct option){"temperature", required_argument, NULL, OPT_TEMPERATURE};
    opts[n++] = (struct option){"top-k", required_argument, NULL, OPT_TOP_K};
    opts[n++] = (struct option){"logits", required_argument, NULL, OPT_LOGITS};
    opts[n++] = (struct option){"predict", required_argument, NULL, OPT_PREDICT};
    opts[n++] = (struct option){"out", required_argument, NULL, OPT_OUT};
    opts[n++] = (struct option){"tune-file", required_argument, NULL, OPT_TUNE_FILE};
    opts[n++] = (struct option){"nproc", required_argument, NULL, OPT_NPROC};
    opts[n++] = (struct option){"verbose", no_argument, NULL, 'v'};
    opts[n++] = (struct option){"quiet", no_argument, NULL, 'q'};
    opts[n++] = (struct option){"version", no_argument, NULL, OPT_VERSION};
    opts[n++] = (struct option){"help", no_argument, NULL, OPT_HELP};
    CGC_ASSERT(n < (int)(sizeof opts / sizeof *opts));
    opts[n] = (struct option){0, 0, 0, 0};

    cli->device = "auto";
    cli->dump_after = -1;
    opterr = 0;
    int c, idx = 0;
    while ((c = getopt_long(argc, argv, ":qvh", opts, &idx)) != -1) {
        switch (c) {
        case 'q': cli->quiet = true; break;
        case 'v': cli->verbose = true; break;
        case OPT_DEVICES: cli->devices = true; break;
        case OPT_ARCH:
            if (backend_parse_arch(optarg) == 0)
                return usage_error("--arch takes sm_XX (sm_80, sm_90, ...) or none, not '%s'", optarg);
            cli->arch = optarg;
            break;
        case 'h': case OPT_HELP: fputs(usage_text, stdout); exit(0);
        case OPT_VERSION:
            printf("cgc %s (%s)\n", CGC_VERSION,
                   CGC_CUDA_TOOLKIT_VERSION[0] ? "built with CUDA Toolkit " CGC_CUDA_TOOLKIT_VERSION
                                               : "built without the CUDA Toolkit: CPU only");
            exit(0);
        case OPT_CHECK: cli->check = true; break;
        case OPT_EMIT: cli->emit_dir = optarg; break;
        case OPT_MODE:
            if (parse_mode(optarg, &cli->mode) != 0) return 2;
            break;
        case OPT_DUMP_IR: cli->dump_ir = optarg ? optarg : ""; break;
        case OPT_DUMP_AFTER:
            cli->dump_after = parse_pass(optarg);
            if (cli->dump_after < 0)
                return usage_error("--dump-ir-after takes sema, precision, training, checkpoint or "
                                   "fusion, not '%s'", optarg);
            break;
        case OPT_EXPLAIN: cli->explain = true; break;
        case OPT_STATS: cli->stats_path = optarg; break;
        case OPT_DEVICE: cli->device = optarg; break;
        case OPT_DETECT_ANOMALY: cli->run.detect_anomaly = true; break;
        case OPT_SAVE: cli->run.save_path = optarg; break;
        case OPT_RESUME: cli->run.resume_path = optarg; break;
        case OPT_METRICS: cli->run.metrics_path = optarg; break;
        case OPT_PROFILE: cli->run.profile_path = optarg; break;
        case OPT_BENCH: cli->bench = true; break;
        case OPT_TUNE_BUDGET:
            if (!parse_decimal(optarg, false, 86400, &cli->run.tune_budget_s))
                return usage_error("--tune-budget takes seconds (a number above 0, at most 86400), "
                                   "not '%s'", optarg);
            break;
        case OPT_TUNE_FILE: cli->tune_file = optarg; break;
        case OPT_NPROC: {
            int64_t v;
            if (!parse_count(optarg, &v) || v < 1 || v > 4096)
                return usage_error("--nproc takes a number of ranks from 1 to 4096, not '%s'", optarg);
            cli->nproc = (int)v;
            break;
        }
        case OPT_LR: cli->lr = optarg; break;
        case OPT_GENERATE: cli->generate = optarg; break;
        case OPT_PREDICT: cli->predict.input = optarg; break;
        case OPT_OUT: cli->predict.out = optarg; break;
        case OPT_TOKENS:
            cli->gen_flags = true;
            if (!parse_count(optarg, &cli->gen.tokens) || cli->gen.tokens == 0 || cli->gen.tokens > 1000000)
                return usage_error("--tokens takes a number of bytes from 1 to 1000000, not '%s'", optarg);
            break;
        case OPT_TEMPERATURE:
            cli->gen_flags = true;
            if (!parse_decimal(optarg, true, 100, &cli->gen.temperature))
                return usage_error("--temperature takes a number from 0 (the likeliest byte) to "
                                   "100, not '%s'", optarg);
            break;
        case OPT_LOGITS:
            cli->gen_flags = true;
            cli->gen.logits_path = optarg;
            break;
        case OPT_TOP_K:
            cli->gen_flags = true;
            if (!parse_count(optarg, &cli->gen.top_k) || cli->gen.top_k > 256)
                return usage_error("--top-k takes a number of bytes from 0 (all) to 256, not '%s'", optarg);
            break;
        case OPT_METRICS_EVERY:
            if (!parse_count(optarg, &cli->run.metrics_every) || cli->run.metrics_every == 0)
                return usage_error("--metrics-every takes a positive number of steps, not '%s'", optarg);
            break;
        case OPT_STOP_AFTER:
            if (!parse_count(optarg, &cli->run.stop_after) || cli->run.stop_after == 0)
                return usage_error("--stop-after takes a positive step number (at most "
                                   "9223372036854775807), not '%s'", optarg);
            break;
        case ':': return usage_error("%s needs a value", argv[optind - 1]);
        case '?':
            return usage_error("unknown option '%s'", argv[optind - 1]);
        default: {
            int k = c - OPT_TRAIN_KEY - 100;
            CGC_ASSERT(k >= 0 && k < NUM_TRAIN_FLAGS);
            int most = (int)(sizeof cli->overrides / sizeof cli->overrides[0]) - 1;   /* and --lr */
            if (cli->noverrides == most) {
                char what[64];
                snprintf(what, sizeof what, "%d training flags (--batch, --epochs, ...) at most; --%s",
                         most, train_flags[k][0]);
                return usage_error("%s is one more", what);
            }
            cli->overrides[cli->noverrides++] = (Override){train_flags[k][1], train_flags[k][0], optarg};
            break;
        }
        }
    }
    if (cli->devices && optind == argc) return 0;
    if (cli->gen_flags && !cli->generate)
        return usage_error("%s", "--tokens, --temperature, --top-k and --logits are about what --generate "
                                 "samples; give --generate PROMPT too");
    if (cli->generate && !cli->run.resume_path)
        return usage_error("%s", "--generate samples from trained weights: give --resume FILE, a "
                                 "checkpoint that --save wrote");
    if (cli->generate && (cli->check || cli->explain || cli->dump_ir || cli->dump_after >= 0 ||
                          cli->bench || cli->emit_dir || cli->stats_path || cli->run.save_path ||
                          cli->run.metrics_path || cli->run.stop_after || cli->run.profile_path ||
                          cli->nproc || cli->tune_file))
        return usage_error("%s", "--generate samples and exits; it does not go with --check, "
                                 "--explain, --dump-ir, --bench, --emit, --stats, --save, "
                                 "--metrics, --stop-after, --profile, --nproc or --tune-file");
    if (cli->predict.out && !cli->predict.input)
        return usage_error("%s", "--out names where --predict writes; give --predict INPUT too");
    if (cli->predict.out && !predict_out_kind(cli->predict.out))
        return usage_error("--out %s: the predictions go to an .npy array or a .safetensors file; "
                           "end the name in one of them", diag_quote(cli->predict.out, 80));
    if (cli->predict.input && (!cli->run.resume_path || (!cli->predict.out && !cli->explain)))
        return usage_error("%s", "--predict INPUT runs trained weights on INPUT: give --resume "
                                 "FILE (a checkpoint --save wrote) and --out FILE (.npy or .safetensors)");
    if (cli->predict.input && (cli->generate || cli->check || cli->dump_ir || cli->dump_after >= 0 ||
                               cli->bench || cli->emit_dir || cli->run.save_path || cli->run.metrics_path ||
                               cli->run.stop_after || cli->run.profile_path || cli->nproc || cli->tune_file))
        return usage_error("%s", "--predict writes predictions and exits; it goes with --explain, "
                                 "not with --generate, --check, --dump-ir, --bench, --emit, --save, "
                                 "--metrics, --stop-after, --profile, --nproc or --tune-file");
    if (cli->run.metrics_every && !cli->run.metrics_path)
        return usage_error("%s", "--metrics-every N adds objects to the --metrics file; give "
                                 "--metrics FILE too");
    if (cli->device && !backend_device_name_ok(cli->device))
        return usage_error("--device takes auto, cpu, cuda or cuda:N (cgc --devices lists the "
                           "GPUs), not '%s'", diag_quote(cli->device, 40));
    if (cli->dump_ir && !graph_name_ok(cli->dump_ir))
        return usage_error("--dump-ir=GRAPH takes forward, train, train_micro, eval or decode, not '%s'",
                           diag_quote(cli->dump_ir, 40));
    if (cli->run.tune_budget_s > 0 && cli->mode != PLAN_MAX_AUTOTUNE)
        return usage_error("%s", "--tune-budget goes with --mode max-autotune (the only mode that "
                                 "tunes)");
    if (cli->tune_file && (cli->mode != PLAN_MAX_AUTOTUNE || cli->bench || cli->explain || cli->dump_ir ||
                           cli->dump_after >= 0 || (cli->check && !cli->emit_dir)))
        return usage_error("%s", "--tune-file goes with --mode max-autotune, in a training run (the "
                                 "choices it reads, or tunes and writes) or with --emit (the "
                                 "choices the reproducer replays)");
    if (cli->emit_dir && (cli->explain || cli->dump_ir || cli->dump_after >= 0))
        return usage_error("%s", "--emit writes its files before a check or a training run; it "
                                 "does not go with --explain or --dump-ir (run them one after "
                                 "the other)");
    if (cli->arch && !cli->check && !cli->bench)
        return usage_error("%s", "--arch goes with --check or --bench (a run compiles for its own "
                                 "GPU)");
    if (cli->run.profile_path && (cli->check || cli->explain || cli->dump_ir || cli->dump_after >= 0))
        return usage_error("%s", "--profile records a training run; it does not go with --check, "
                                 "--explain or --dump-ir");
    if (cli->bench && (cli->check || cli->explain || cli->dump_ir || cli->dump_after >= 0 ||
                       cli->emit_dir || cli->stats_path || cli->run.profile_path ||
                       cli->run.save_path || cli->run.resume_path || cli->run.metrics_path ||
                       cli->run.stop_after || cli->quiet))
        return usage_error("%s", "--bench compiles and compares on its own, trains nothing and "
                                 "prints its table; it does not go with --check, --explain, "
                                 "--dump-ir, --emit, --stats, --profile, --save, --resume, "
                                 "--metrics, --stop-after or --quiet");
    if (cli->nproc && cli->bench)
        return usage_error("%s", "--bench times one process; it does not go with --nproc");
    if (cli->nproc && cli->world.launcher && cli->nproc != cli->world.size) {
        char ranks[96];
        snprintf(ranks, sizeof ranks, "%d, but the launcher started this job with %d ranks",
                 cli->nproc, cli->world.size);
        return usage_error("--nproc %s: give one or the other", ranks);
    }
    if (optind == argc) return usage_error("%s", "no model file given (usage: cgc FILE.net [options])");
    if (optind + 1 < argc) return usage_error("unexpected argument '%s' (one model file at a time)", argv[optind + 1]);
    cli->path = argv[optind];
    return 0;
}

/* Prints graph WHICH of P to OUT (graph_name_ok), or every graph that has nodes when
 * WHICH is "". */
static void print_graphs(FILE *out, const IrProgram *p, const char *which)
{
    const IrGraph *graphs[] = {&p->forward, &p->train, &p->train_micro, &p->eval, &p->decode};
    for (size_t i = 0; i < sizeof graphs / sizeof graphs[0]; i++) {
        const IrGraph *g = graphs[i];
        if (*which && strcmp(which, g->name) != 0) continue;
        if (g->nnodes == 0 && *which == '\0') continue;
        ir_print(out, p, g);
    }
}

/* --emit: keeps the IR after PASS as text (a later call for the same pass, as in
 * checkpoint = auto's trials, replaces it). */
static void keep_pass_ir(void *ctx, PipelinePass pass, const IrProgram *p)
{
    Cli *cli = ctx;
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f) return;
    print_graphs(f, p, "");
    if (fclose(f) != 0) {
        free(text);
        return;
    }
    free(cli->pass_ir[pass]);
    cli->pass_ir[pass] = text;
}

static int dump_ir(const IrProgram *p, const char *which)
{
    print_graphs(stdout, p, which);
    return 0;
}

static BackendOptions backend_options(const Cli *cli, const Plan *plan)
{
    return (BackendOptions){.device = cli->device, .plan = plan, .net_path = cli->path,
                            .emit_dir = cli->emit_dir, .verbose = cli->verbose,
                            .quiet = cli->quiet};
}

/* Several ranks: each takes the GPU cuda:LOCAL_RANK (--device cuda; auto, when every
 * rank finds its own, else every rank the CPU: NCCL's sums and MPI's do not meet), with
 * NCCL between them, or the CPU. False after reporting. */
static bool ranks_device_ok(Cli *cli)
{
    static char own[16];
    if (cli->world.size == 1 || strcmp(cli->device, "cpu") == 0) return true;
    if (strncmp(cli->device, "cuda:", 5) == 0) {
        cgc_error("--device %s: with several ranks each takes the GPU of its local rank "
                  "(cuda:LOCAL_RANK); use --device cuda", diag_quote(cli->device, 40));
        return false;
    }
    if (strcmp(cli->device, "auto") == 0) {
        CudaDeviceInfo info[CUDA_MAX_DEVICES];
        char why[256] = "";
        double found = cli->world.local_rank < cuda_probe(info, CUDA_MAX_DEVICES, why, sizeof why);
        if (comm_allreduce(cli->run.comm, &found, 1, COMM_F64, "which ranks have a GPU") != 0)
            return false;
        if (found < cli->world.size) {
            if (!cli->quiet)
                fprintf(stderr, "cgc: note: %g of the %d ranks found a GPU of their own; every "
                                "rank trains on the CPU\n", found, cli->world.size);
            cli->device = "cpu";
            return true;
        }
    }
    snprintf(own, sizeof own, "cuda:%d", cli->world.local_rank);
    cli->device = own;
    return true;
}

/* A job: joins it, and checks that every rank compiled the same program. */
static int join_job(const IrProgram *p, Cli *cli)
{
    if (!p->cfg.job) return 0;
    Comm *c = comm_open(&cli->world);
    if (!c) return -1;
    cli->run.comm = c;
    return comm_agree(c, job_program_hash(p), "the compiled programs",
                      "every rank must run the same cgc on the same .net file, with the same "
                      "flags");
}

/* Leaves the job (if any) after a run that ends with status RC; returns RC. */
static int leave_job(Cli *cli, int rc)
{
    comm_close(cli->run.comm, rc != 0);
    cli->run.comm = NULL;
    return rc;
}

/* Trains P on the device --device chooses. */
static int run(IrProgram *p, const Plan *plan, Source *src, Cli *cli)
{
    if (join_job(p, cli) != 0 || !ranks_device_ok(cli)) return leave_job(cli, 1);
    BackendOptions bo = backend_options(cli, plan);
    Backend b;
    if (backend_open(&bo, &b) != 0) return leave_job(cli, 1);
    if (!b.device && plan_mode_captures(cli->mode) && !cli->quiet)
        fprintf(stderr, "cgc: note: --mode %s %s on a GPU; on the CPU the reference "
                        "executor runs every step op by op\n", plan_mode_name(cli->mode),
                cli->mode == PLAN_MAX_AUTOTUNE ? "tunes kernels and captures CUDA graphs"
                                               : "captures CUDA graphs");
    if (!b.device && cli->tune_file && !cli->quiet)
        fprintf(stderr, "cgc: note: a training run on the CPU tunes nothing: it neither reads "
                        "nor writes --tune-file %s\n", diag_quote(cli->tune_file, 80));
    cli->run.net_path = cli->path;
    cli->run.src = src;
    cli->run.quiet = cli->quiet;
    cli->run.tune_file = cli->tune_file;
    cli->run.verbose = cli->verbose;
    cli->run.device = b.device;
    cli->run.plan = b.plan;
    int rc = train_run(p, &cli->run);
    backend_close(&b);
    return leave_job(cli, rc);
}

/* --generate: a sample of the text model P continuing the prompt, from --resume's weights,
 * on the device --device chooses (C: the compiled plan and the symbols' maxima). */
static int generate(const IrProgram *p, const Compiled *c, Source *src, Cli *cli)
{
    cli->gen.prompt = cli->generate;
    cli->gen.seed = p->cfg.seed;
    BackendOptions bo = backend_options(cli, c->plan);
    Backend b;
    if (backend_open(&bo, &b) != 0) return -1;
    GenerateDevice d = { b.device, b.plan, c->symmax, cli->path };
    int rc = generate_run(p, src, cli->run.resume_path, &cli->gen, b.device ? &d : NULL);
    backend_close(&b);
    return rc;
}

/* --predict: the outputs of --resume's weights for the rows of --predict's file, on the
 * device --device chooses. */
static int predict(const IrProgram *p, const Compiled *c, Source *src, Cli *cli)
{
    BackendOptions bo = backend_options(cli, c->plan);
    Backend b;
    if (backend_open(&bo, &b) != 0) return -1;
    PredictOptions o = cli->predict;
    o.device = b.device, o.plan = b.plan, o.symmax = c->symmax, o.net_path = cli->path, o.quiet = cli->quiet;
    int rc = predict_run(p, src, cli->run.resume_path, &o);
    backend_close(&b);
    return rc;
}

/* --generate continues text with a byte model (refused before anything compiles),
 * through the decode graph and its KV cache where the model allows one. */
static int prepare_generate(IrProgram *p, const Cli *cli)
{
    if (p->cfg.data != DATA_TEXT) {
        cgc_error("%s: --generate continues text with a byte model, one that trains on "
                  "text(\"FILE\", context = T); this one does not", cli->path);
        return -1;
    }
    char why[256];
    if (decode_lower(p, why, sizeof why) != 0 && !cli->quiet)
        fprintf(stderr, "cgc: note: %s: each byte generated runs the whole window (T "
                        "positions), without a cache of earlier keys and values: %s\n", cli->path, why);
    return 0;
}

/* --dump-ir=decode: the graph --generate runs a position at a time, built as for it. */
static int prepare_decode_dump(IrProgram *p, const Cli *cli)
{
    char why[256] = "it trains on no text(\"FILE\", context = T)";
    if (p->cfg.data == DATA_TEXT && decode_lower(p, why, sizeof why) == 0) return 0;
    cgc_error("%s: --dump-ir=decode: the model has no decode graph: %s", cli->path, why);
    return -1;
}

/* --nproc N: what each rank would check alone, checked once, then the ranks. */
static int launch(IrProgram *p, Source *src, Cli *cli, int argc, char **argv)
{
    cli->run.net_path = cli->path;
    cli->run.src = src;
    if (train_check_launch(p, &cli->run, cli->nproc) != 0) return 1;
    return job_launch(argc, argv, cli->nproc);
}

/* --check: the front end's verdict, then NVRTC. TUNED: --emit wrote tuned choices. */
static int check(const IrProgram *p, const Plan *plan, const Cli *cli, bool tuned)
{
    int64_t nparams = 0;
    for (int i = 0; i < p->nparams; i++) nparams += ir_numel(&p->tensors[i].shape, NULL);
    if (!cli->quiet)
        printf("%s: ok: model %s, %lld parameters in %d tensors\n", cli->path, p->model_name,
               (long long)nparams, p->nparams);
    if (plan->mode == PLAN_MAX_AUTOTUNE && !cli->quiet && tuned)
        printf("%s: max-autotune: --check times nothing; the choices --emit wrote are the tuned "
               "ones it named\n", cli->path);
    else if (plan->mode == PLAN_MAX_AUTOTUNE && !cli->quiet)
        printf("%s: max-autotune: --check times nothing, so its choices are heuristics: the "
               "plan's launch shapes, cuBLAS's own GEMM algorithms, no fused MLP kernel, no "
               "implicit-GEMM convolution and cuDNN's own convolution algorithms; a run on a GPU times them and keeps the fastest in the "
               "cache (cgc/tune/)\n", cli->path);
    BackendOptions bo = backend_options(cli, plan);
    return backend_check_compile(&bo, cli->arch ? backend_parse_arch(cli->arch) : 0) != 0;
}

/* Whether the RANKS ranks of a job would each take a GPU (ranks_device_ok): with --device
 * cuda, or auto where this machine has a GPU for each. */
static bool ranks_on_gpus(const Cli *cli, int ranks)
{
    if (ranks <= 1 || strcmp(cli->device, "cpu") == 0) return false;
    if (strcmp(cli->device, "auto") != 0) return true;
    CudaDeviceInfo info[CUDA_MAX_DEVICES];
    char why[256];
    return cuda_probe(info, CUDA_MAX_DEVICES, why, sizeof why) >= ranks;
}

/* Everything after the front end: the passes and the plan, then what the flags ask. */
static int compile_and_go(IrProgram *p, Source *src, Cli *cli)
{
    PassObserver keep = {keep_pass_ir, cli};
    CompileOptions co = {.mode = cli->mode, .net_path = cli->path,
                         .stop_after_checkpoint = cli->dump_after == PASS_CHECKPOINT,
                         .observer = cli->emit_dir ? &keep : NULL};
    if (p->cfg.checkpoint == CKPT_AUTO && p->cfg.memory == 0 && !cli->check)
        co.device_free = backend_device_memory(cli->device);
    if (cli->mode == PLAN_EAGER && cli->dump_after == PASS_FUSION && !cli->quiet)
        fprintf(stderr, "cgc: note: --mode eager does not fuse; the IR after fusion is the IR "
                        "after checkpoint\n");
    Compiled c;
    bool tuned = false;   /* --emit wrote tuned autotune choices */
    double start = clock_seconds();
    int rc = compile_program(p, &co, &c) != 0;
    if (rc == 0 && cli->verbose)
        fprintf(stderr, "cgc: %s: plan in %.1f ms: front end and passes %.1f ms, fusion, "
                        "plan and kernel source %.1f ms\n", cli->path,
                1e3 * (clock_seconds() - cli->started), 1e3 * cli->passes_s,
                1e3 * (clock_seconds() - start));
    if (rc == 0 && (cli->dump_ir || cli->dump_after >= 0)) {
        rc = dump_ir(p, cli->dump_ir ? cli->dump_ir : "");
    } else if (rc == 0) {
        if (cli->stats_path) rc = write_stats(&c, cli->stats_path);
        if (rc == 0 && cli->explain) {
            compiled_explain(&c, ranks_on_gpus(cli, p->cfg.ranks), stdout);
            if (c.plan->mode == PLAN_MAX_AUTOTUNE) autotune_explain(c.plan, stdout);
        }
        else if (rc == 0 && cli->emit_dir && emit_plan(c.plan, cli, &tuned) != 0) rc = 1;
        else if (rc == 0 && cli->check) rc = check(p, c.plan, cli, tuned);
        else if (rc == 0 && cli->generate) rc = generate(p, &c, src, cli) != 0;
        else if (rc == 0 && cli->predict.input) rc = predict(p, &c, src, cli) != 0;
        else if (rc == 0) rc = run(p, c.plan, src, cli);
    }
    compiled_free(&c);
    return rc;
}

static int cgc_main(int argc, char **argv)
{
    Cli cli;
    memset(&cli, 0, sizeof cli);
    cli.gen = (GenerateOptions){.tokens = 200, .temperature = 1.0};
    cli.mode = PLAN_DEFAULT;   /* the compiler's fused kernels, as torch.compile's default */
    if (comm_world(&cli.world) != 0) return 1;
    int rc = parse_args(argc, argv, &cli);
    if (rc) return rc;
    if (cli.devices) return cuda_print_devices(stdout) >= 0 ? 0 : 1;
    bool trains = !cli.check && !cli.explain && !cli.dump_ir && cli.dump_after < 0 && !cli.bench &&
                  !cli.generate && !cli.predict.input;
    if (cli.world.rank == 0 && (rc = check_outputs(&cli, trains)) != 0) return rc;
    /* a job, even of one rank, when a launcher started it or --nproc asks for one; 0: none */
    int ranks = cli.world.launcher ? cli.world.size : cli.nproc;
    /* A reproducer replays one device's step, without the job's sums. */
    if (cli.world.launcher && (cli.predict.input || cli.generate))   /* --nproc: parse_args */
        return usage_error("%s runs on one process, not as one rank of a job; run it without "
                           "mpirun", cli.predict.input ? "--predict" : "--generate");
    if (ranks > 0 && cli.emit_dir)
        return usage_error("--emit writes the kernels and reproducer of one device's training "
                           "step, not a job's (%s); emit from a run of its own",
                           cli.world.launcher ? "this job" : "--nproc");
    bool launches = cli.nproc > 1 && cli.world.size == 1 && trains;
    if (launches && job_check_cores(cli.nproc) != 0) return 1;
    if (cli.world.size > 1) diag_set_rank(cli.world.rank);
    if (cli.world.rank > 0) {   /* rank 0 reports and writes files for the job */
        cli.quiet = true;
        cli.stats_path = NULL;
    }

    cli.started = clock_seconds();
    Source *src = source_load(cli.path);
    if (!src) return 1;
    if (cli.lr)
        cli.overrides[cli.noverrides++] = (Override){NULL, "lr", cli.lr};
    if (cli.bench) {
        BenchOptions bo = {.net_path = cli.path, .src = src, .overrides = cli.overrides,
                           .noverrides = cli.noverrides, .mode = cli.mode, .device = cli.device,
                           .arch = cli.arch ? backend_parse_arch(cli.arch) : 0,
                           .tune_budget_s = cli.run.tune_budget_s};
        rc = bench_run(&bo);
        source_free(src);
        return rc;
    }
    PipelinePass last = cli.dump_after >= 0 && cli.dump_after < PASS_TRAINING
                            ? (PipelinePass)cli.dump_after : PASS_TRAINING;
    PassObserver keep = {keep_pass_ir, &cli};
    IrProgram *p = last < PASS_TRAINING || !cli.emit_dir
                       ? pipeline_compile_until(src, cli.overrides, cli.noverrides, last, ranks)
                       : pipeline_compile_observed(src, cli.overrides, cli.noverrides, ranks, &keep);
    cli.passes_s = clock_seconds() - cli.started;
    if (!p) {
        /* Every failure should have said why; this is the net for one that did not. */
        if (diag_error_count() == 0) fprintf(stderr, "cgc: %s: compilation failed\n", cli.path);
        for (int i = 0; i < PASS_NUM; i++) free(cli.pass_ir[i]);
        source_free(src);
        return 1;
    }
    /* the passes up to training lowering have run: the rest are compile_program's */
    if (launches)
        rc = launch(p, src, &cli, argc, argv);
    else if (cli.dump_after >= 0 && cli.dump_after <= PASS_TRAINING)
        rc = dump_ir(p, cli.dump_ir ? cli.dump_ir : "");
    else if (cli.generate && prepare_generate(p, &cli) != 0)
        rc = 1;
    else if (cli.dump_ir && strcmp(cli.dump_ir, "decode") == 0 && prepare_decode_dump(p, &cli) != 0)
        rc = 1;
    else {
        if (cli.predict.input) inference_lower(p);
        rc = compile_and_go(p, src, &cli);
    }
    ir_program_free(p);
    source_free(src);
    for (int i = 0; i < PASS_NUM; i++) free(cli.pass_ir[i]);
    return rc;
}

int main(int argc, char **argv)
{
    /* A file grown past `ulimit -f` is then a write error that names it, not a silent end. */
    signal(SIGXFSZ, SIG_IGN);
    int rc = cgc_main(argc, argv);
    if (out_stdout_done() != 0 && rc == 0) rc = 1;
    return rc;
}
