/* nvrtc_compile.c: compiles a whole generated module (FILE.cu, prelude included by
 * text, no #include) with NVRTC for each architecture given, as the runtime will.
 * Prints NVRTC's log whole on failure. Usage: nvrtc_compile FILE.cu 80 90 ...
 * Exit: 0 every compile passed, 1 one failed, 2 bad usage or unreadable file. */
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = s ? fread(s, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!s || got != (size_t)n) {
        free(s);
        return NULL;
    }
    s[n] = '\0';
    return s;
}

static int compile_for(const char *path, const char *src, const char *arch)
{
    nvrtcProgram prog;
    if (nvrtcCreateProgram(&prog, src, path, 0, NULL, NULL) != NVRTC_SUCCESS) {
        fprintf(stderr, "nvrtc_compile: %s: nvrtcCreateProgram failed\n", path);
        return 1;
    }
    char opt[64];
    snprintf(opt, sizeof opt, "--gpu-architecture=sm_%s", arch);
    const char *opts[] = { opt, "--std=c++17" };
    nvrtcResult r = nvrtcCompileProgram(prog, 2, opts);
    size_t logn = 0;
    nvrtcGetProgramLogSize(prog, &logn);
    if (r != NVRTC_SUCCESS) {
        char *log = malloc(logn + 1);
        nvrtcGetProgramLog(prog, log);
        log[logn] = '\0';
        fprintf(stderr, "nvrtc_compile: %s for sm_%s: %s\n%s\n", path, arch,
                nvrtcGetErrorString(r), log);
        free(log);
        nvrtcDestroyProgram(&prog);
        return 1;
    }
    size_t cubin = 0;
    nvrtcGetCUBINSize(prog, &cubin);
    printf("%s: sm_%s: %zu bytes of cubin\n", path, arch, cubin);
    nvrtcDestroyProgram(&prog);
    return cubin > 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: nvrtc_compile FILE.cu ARCH... (e.g. 80 90)\n");
        return 2;
    }
    char *src = read_all(argv[1]);
    if (!src) {
        fprintf(stderr, "nvrtc_compile: %s: cannot read it\n", argv[1]);
        return 2;
    }
    int failed = 0;
    for (int i = 2; i < argc; i++) failed |= compile_for(argv[1], src, argv[i]);
    free(src);
    return failed;
}
