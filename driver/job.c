/* job.c: the --nproc launch and the program every rank must share (see job.h). */
#include "job.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Ranks past this many a core would each get so little of one that the job crawls while
 * MPI's polling takes the rest; past one a core, a job still runs, slower than fewer. */
enum { MAX_RANKS_PER_CORE = 8 };

/* After the launcher is told to stop, mpirun has this long to end the ranks before every
 * process of the job is killed. */
#define STOP_GRACE_S 5.0

static bool is_nproc(const char *arg, bool *takes_next)
{
    *takes_next = strcmp(arg, "--nproc") == 0;
    return *takes_next || strncmp(arg, "--nproc=", 8) == 0;
}

int job_check_cores(int nproc)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores <= 0 || nproc <= cores) return 0;
    if (nproc > MAX_RANKS_PER_CORE * cores) {
        cgc_error("--nproc %d: this machine has %ld cores, and %d ranks would get %.2g of one "
                  "each; give at most %ld (%d a core), or start the job across machines with "
                  "mpirun and a hostfile", nproc, cores, nproc, (double)cores / nproc,
                  MAX_RANKS_PER_CORE * cores, MAX_RANKS_PER_CORE);
        return -1;
    }
    cgc_warning("--nproc %d: more ranks than this machine's %ld cores; they share them, and "
                "the job runs slower than %ld ranks would", nproc, cores, cores);
    return 0;
}

/* mpirun's command line (malloc'd, NULL-terminated): this cgc, NPROC times, with ARGV's
 * arguments less --nproc. NULL after an error. */
static const char **mpirun_args(int argc, char **argv, int nproc)
{
    static char self[4096], count[16];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        cgc_error("--nproc: cannot find this cgc's own path (/proc/self/exe): %s", strerror(errno));
        return NULL;
    }
    self[len] = '\0';
    snprintf(count, sizeof count, "%d", nproc);
    const char **args = xcalloc((size_t)argc + 8, sizeof *args);
    int n = 0;
    args[n++] = "mpirun";
    args[n++] = "-n";
    args[n++] = count;
    if (nproc > sysconf(_SC_NPROCESSORS_ONLN)) args[n++] = "--oversubscribe";
    if (geteuid() == 0) args[n++] = "--allow-run-as-root";   /* asked for: the user is root */
    args[n++] = self;
    for (int i = 1; i < argc; i++) {
        bool next;
        if (is_nproc(argv[i], &next)) {
            i += next;
            continue;
        }
        if (strcmp(argv[i], "--") == 0) {   /* the rest are operands, as getopt reads them */
            while (i < argc) args[n++] = argv[i++];
            break;
        }
        args[n++] = argv[i];
    }
    args[n] = NULL;
    return args;
}

/* ---- running mpirun, and stopping it ---- */

static const struct {
    int sig;
    const char *name;
} stop_signals[] = {{SIGINT, "SIGINT"}, {SIGTERM, "SIGTERM"}, {SIGHUP, "SIGHUP"}};
#define NSTOP (int)(sizeof stop_signals / sizeof stop_signals[0])
static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) { stop_signal = sig; }

/* The launcher's handlers (HANDLER), or the default dispositions for mpirun: a signal
 * ignored here (as `cmd &` ignores SIGINT) would stay ignored across exec. */
static void set_stop_handlers(void (*handler)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < NSTOP; i++) sigaction(stop_signals[i].sig, &sa, NULL);
}

/* SIGKILL to every process of session SID but this one: mpirun's ranks run in their own
 * process groups, but in its session. */
static void kill_session(pid_t sid)
{
    DIR *d = opendir("/proc");
    for (struct dirent *e; d && (e = readdir(d));) {
        char *end, path[64], stat[512];
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0 || pid == getpid()) continue;
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(stat, 1, sizeof stat - 1, f) : 0;
        if (f) fclose(f);
        stat[n] = '\0';
        const char *after = strrchr(stat, ')');   /* the name may hold spaces and ')' */
        int ppid, pgrp, session;
        char state;
        if (after && sscanf(after + 1, " %c %d %d %d", &state, &ppid, &pgrp, &session) == 4 &&
            session == sid)
            kill((pid_t)pid, SIGKILL);
    }
    if (d) closedir(d);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The interval at which the launcher looks at mpirun and at the signals it was sent. */
static void poll_pause(void) { nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL); }

/* Whether PID ended within SECONDS (its status in *STATUS); a second stop signal ends the
 * wait at once. */
static bool reaped_within(pid_t pid, double seconds, int *status)
{
    int first = stop_signal;
    for (double until = now_s() + seconds; now_s() < until && stop_signal == first;) {
        if (waitpid(pid, status, WNOHANG) == pid) return true;
        poll_pause();
    }
    return waitpid(pid, status, WNOHANG) == pid;
}

/* Told to stop (SIG): mpirun is told too and given STOP_GRACE_S to end its ranks; then,
 * or at a second signal, every process of its session is killed. Returns 128 + SIG. */
static int stop_job(pid_t pid, int sig, int nproc)
{
    const char *name = "a signal";
    for (int i = 0; i < NSTOP; i++)
        if (stop_signals[i].sig == sig) name = stop_signals[i].name;
    fprintf(stderr, "cgc: %s: stopping the job's %d ranks\n", name, nproc);
    stop_signal = sig;
    kill(pid, sig);
    int status;
    bool ended = reaped_within(pid, STOP_GRACE_S, &status);
    kill_session(pid);
    if (!ended) {
        fprintf(stderr, "cgc: the job did not end within %g s; its processes were killed\n",
                STOP_GRACE_S);
        waitpid(pid, &status, 0);
    }
    return 128 + sig;
}

int job_launch(int argc, char **argv, int nproc)
{
    const char **args = mpirun_args(argc, argv, nproc);
    if (!args) return 1;
    fflush(stdout);
    fflush(stderr);
    set_stop_handlers(on_stop);
    pid_t pid = fork();
    if (pid == 0) {   /* a session of its own, which stop_job can end whole */
        setsid();
        set_stop_handlers(SIG_DFL);
        execvp(args[0], (char *const *)args);
        cgc_error("--nproc: cannot start mpirun: %s; install Open MPI (apt-get install "
                  "openmpi-bin), or start the ranks with a launcher of your own", strerror(errno));
        _exit(127);
    }
    free(args);
    if (pid < 0) {
        cgc_error("--nproc: cannot start mpirun: %s", strerror(errno));
        return 1;
    }
    /* Polled: a stop signal landing between the check and a blocking waitpid would be
     * acted on only when mpirun ends. */
    int status;
    for (;;) {
        if (stop_signal) return stop_job(pid, stop_signal, nproc);
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) {
            cgc_error("--nproc: waiting for mpirun: %s", strerror(errno));
            return 1;
        }
        poll_pause();
    }
    kill_session(pid);   /* nothing of the job outlives mpirun */
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

uint64_t job_program_hash(const IrProgram *p)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f) return 0;
    const IrGraph *graphs[] = {&p->train, &p->train_micro, &p->eval};
    for (size_t i = 0; i < sizeof graphs / sizeof graphs[0]; i++)
        if (graphs[i]->nnodes) ir_print(f, p, graphs[i]);
    const TrainConfig *c = &p->cfg;
    char optimizer[512], schedule[256], data[1024];
    config_optimizer_str(c, optimizer, sizeof optimizer);
    config_schedule_str(c, schedule, sizeof schedule);
    config_data_str(c, data, sizeof data);
    fprintf(f, "%s %s %s batch %lld epochs %lld steps %lld seed %llu shuffle %d drop_last %d "
               "accumulate %lld clip %.17g\n", optimizer, schedule, data, (long long)c->batch,
            (long long)c->epochs, (long long)c->steps, (unsigned long long)c->seed, c->shuffle,
            c->drop_last, (long long)c->accumulate, c->clip_norm);
    uint64_t h = fclose(f) == 0 ? fnv1a(FNV_BASIS, text, size) : FNV_BASIS;
    free(text);
    return h;
}
