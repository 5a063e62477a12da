/* job.c: the --nproc launch and the program every rank must share (see job.h). */
#include "job.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool is_nproc(const char *arg, bool *takes_next)
{
    *takes_next = strcmp(arg, "--nproc") == 0;
    return *takes_next || strncmp(arg, "--nproc=", 8) == 0;
}

int job_launch(int argc, char **argv, int nproc)
{
    char self[4096], count[16];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        cgc_error("--nproc: cannot find this cgc's own path (/proc/self/exe): %s", strerror(errno));
        return 1;
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
    fflush(stdout);
    execvp(args[0], (char *const *)args);
    cgc_error("--nproc: cannot start mpirun: %s; install Open MPI (apt-get install openmpi-bin), "
              "or start the ranks with a launcher of your own", strerror(errno));
    free(args);
    return 1;
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
