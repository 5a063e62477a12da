/* ---- codegen/repro/main.h: the program: set up, warm up, time the steps, report ----
 * cgc embeds this file as it stands at the end of every reproducer it writes
 * (`cgc --emit DIR`: DIR/repro/repro.c), after the step's code; cgc's build compiles it
 * (tests/codegen/repro_host.c). */

static int by_value(const void *pa, const void *pb)
{
    float a = *(const float *)pa, b = *(const float *)pb;
    return a < b ? -1 : a > b;
}

/* Quantile Q of the N sorted values, interpolated between the two nearest ranks. */
static double quantile(const float *sorted, int n, double q)
{
    double pos = q * (n - 1);
    int lo = (int)pos, hi = lo + 1 < n ? lo + 1 : lo;
    return sorted[lo] + (pos - lo) * (sorted[hi] - sorted[lo]);
}

/* FILE beside this program (argv[0]'s directory), or in the current one. */
static void cubin_path(const char *argv0, const char *file, char *path, size_t n)
{
    const char *slash = strrchr(argv0, '/');
    if (slash) snprintf(path, n, "%.*s/%s", (int)(slash - argv0), argv0, file);
    else snprintf(path, n, "%s", file);
}

int main(int argc, char **argv)
{
    long steps = DEFAULT_STEPS;
    char *end = NULL;
    if (argc == 2) steps = strtol(argv[1], &end, 10);
    if (argc > 2 || (end && (*end || end == argv[1])) || steps < 1 || steps > 10000000) {
        fprintf(stderr, "usage: %s [steps]   (timed training steps, 1 to 10000000; default %d)\n",
                argv[0], DEFAULT_STEPS);
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    CUmodule module[NUM_MODULES];
    char name[100] = "", path[4096];
    CU("the CUDA driver", cuInit, 0);
    CU("device 0", cuDeviceGet, &dev, 0);
    CU("device 0", cuDeviceGetName, name, (int)sizeof name, dev);
    CU("device 0", cuDevicePrimaryCtxRetain, &ctx, dev);      /* shared with cuBLAS */
    CU("device 0", cuCtxSetCurrent, ctx);
    CU("the stream", cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
    for (int i = 0; i < NUM_MODULES; i++) {
        cubin_path(argv[0], module_file[i], path, sizeof path);
        CU(path, cuModuleLoad, &module[i], path);     /* make builds it, for ARCH */
    }
    for (int k = 0; k < NUM_KERNELS; k++)
        check_cu(cuModuleGetFunction(&kernel[k], module[kernel_module[k]], kernel_name[k]),
                 "cuModuleGetFunction", NULL, 0, kernel_name[k], 0);
    CU("the arena", cuMemAlloc, &arena, ARENA_BYTES ? ARENA_BYTES : 256);
    fill_arena();
    gemm_setup();
    /* the step counter (CAPTURE) starts at micro-step 0, row 0: the arena is zeroed */

    check_each_step = 1;
    for (training_step = 0; training_step < WARMUP_STEPS; training_step++) {
        run_training_step(training_step);
        check_each_step = 0;
    }
    training_step = -1;
    CU("the warm-up steps", cuStreamSynchronize, stream);
#if CAPTURE
    /* One training step recorded, not run: from now on each step is one graph launch. */
    CUgraph graph;
    CUgraphExec graph_exec;
    size_t graph_nodes = 0;
    CU("the step's CUDA graph", cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    run_training_step(WARMUP_STEPS);
    CU("the step's CUDA graph", cuStreamEndCapture, stream, &graph);
    CU("the step's CUDA graph", cuGraphGetNodes, graph, NULL, &graph_nodes);
    CU("the step's CUDA graph", cuGraphInstantiateWithFlags, &graph_exec, graph, 0);
#endif

    CUevent *mark = malloc((size_t)(steps + 1) * sizeof *mark);  /* mark[i]: before timed step i */
    float *ms = malloc((size_t)steps * sizeof *ms);
    if (!mark || !ms) {
        fprintf(stderr, "repro: error: out of host memory for %ld steps\n", steps);
        return 1;
    }
    for (long i = 0; i <= steps; i++) CU("the timing events", cuEventCreate, &mark[i], CU_EVENT_DEFAULT);
    for (long i = 0; i < steps; i++) {
        training_step = WARMUP_STEPS + i;
        CU("the timing events", cuEventRecord, mark[i], stream);
#if CAPTURE
        CU("the step's CUDA graph", cuGraphLaunch, graph_exec, stream);
#else
        run_training_step(training_step);
#endif
    }
    CU("the timing events", cuEventRecord, mark[steps], stream);
    training_step = -1;
    CU("the timed steps", cuEventSynchronize, mark[steps]);
    for (long i = 0; i < steps; i++)
        CU("the timing events", cuEventElapsedTime, &ms[i], mark[i], mark[i + 1]);
    qsort(ms, (size_t)steps, sizeof *ms, by_value);

    printf("%s: " SOURCE_NAME " (model " MODEL_NAME "), mode " MODE ", " PRECISION
           ", batch %d, accumulate %d\n", name, BATCH, ACCUMULATE);
    printf("per training step: %d kernel launches and %d library GEMMs (%d of them cuBLASLt matmuls)\n",
           LAUNCHES_PER_STEP, GEMMS_PER_STEP, LT_GEMMS_PER_STEP);
#if CAPTURE
    printf("each timed step replayed as one CUDA graph of %zu nodes (captured after the warm-up)\n",
           graph_nodes);
#endif
    printf("ms per step over %ld steps after %d warm-up: median %.4f, p10 %.4f, p90 %.4f\n", steps,
           WARMUP_STEPS, quantile(ms, (int)steps, 0.5), quantile(ms, (int)steps, 0.1),
           quantile(ms, (int)steps, 0.9));
    printf("arena %.2f MiB; not replayed: the data pipeline (shuffle, batch gathers, loss totals):\n"
           "the inputs were filled once with random values and every step reads that batch\n",
           (double)ARENA_BYTES / (1 << 20));

    for (long i = 0; i <= steps; i++) CU("the timing events", cuEventDestroy, mark[i]);
#if CAPTURE
    CU("the step's CUDA graph", cuGraphExecDestroy, graph_exec);
    CU("the step's CUDA graph", cuGraphDestroy, graph);
#endif
    free(mark);
    free(ms);
    gemm_close();
    CU("the arena", cuMemFree, arena);
    for (int i = 0; i < NUM_MODULES; i++) CU(module_file[i], cuModuleUnload, module[i]);
    CU("the stream", cuStreamDestroy, stream);
    CU("device 0", cuDevicePrimaryCtxRelease, dev);
    return 0;
}
