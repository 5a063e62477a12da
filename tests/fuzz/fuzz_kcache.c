/* fuzz_kcache.c: a libFuzzer target (scripts/fuzz.sh) for the kernel cache's entries
 * (runtime/cuda/kcache.h), the one file cgc reads that it then loads onto a GPU. Each
 * input is put in a private cache directory as the entry of a fixed key, and loaded.
 *
 * The oracle is the entry format: a hit must hand back exactly the bytes after the
 * header and the key, and only for an entry whose header and key are those of the key
 * asked for. A miss is followed by a store of the input as the payload, which must then
 * load back, byte for byte. */
#define _GNU_SOURCE
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../runtime/cuda/kcache.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char KEY[] = "nvrtc 13.0|sm_90|-default-device|extern \"C\" __global__ void k() {}";
static char entry_path[PATH_MAX];

/* A private cache of our own: $XDG_CACHE_HOME in a fresh temporary directory, in $TMPDIR
 * or /tmp. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    static char root[PATH_MAX];
    const char *tmp = getenv("TMPDIR");
    char dir[PATH_MAX], name[64];
    snprintf(root, sizeof root, "%s/cgc_fuzz_kcache.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(root) || setenv("XDG_CACHE_HOME", root, 1) != 0) abort();
    unsetenv("CGC_NO_CACHE");
    if (!kcache_dir(dir, sizeof dir)) {
        fprintf(stderr, "fuzz_kcache: no cache directory: %s\n", dir);
        exit(1);
    }
    kcache_entry_name(KEY, sizeof KEY - 1, name, sizeof name);
    snprintf(entry_path, sizeof entry_path, "%s/%s", dir, name);
    return 0;
}

static void put(const uint8_t *data, size_t size)
{
    FILE *f = fopen(entry_path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) abort();
}

/* A hit's payload must be the entry's bytes after the 32-byte header (magic, key and
 * payload lengths, checksums) and the key, the lengths those the header gives. */
static void check_hit(const uint8_t *data, size_t size, const void *payload, size_t n)
{
    size_t head = 32 + sizeof KEY - 1;
    uint64_t key_len = 0, payload_len = 0;
    if (size >= 24) {
        memcpy(&key_len, data + 8, 8);
        memcpy(&payload_len, data + 16, 8);
    }
    if (size < head || n != size - head || key_len != sizeof KEY - 1 || payload_len != n ||
        memcmp(data, "CGCKC01\n", 8) != 0 || memcmp(data + 32, KEY, sizeof KEY - 1) != 0 ||
        (n && memcmp(payload, data + head, n) != 0)) {
        fprintf(stderr, "fuzz_kcache: an entry of %zu bytes loaded as %zu bytes of payload that "
                        "are not its own\n", size, n);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    void *payload = NULL;
    size_t n = 0;
    put(data, size);
    if (kcache_load(KEY, sizeof KEY - 1, &payload, &n, false)) {
        check_hit(data, size, payload, n);
        free(payload);
        return 0;
    }
    kcache_store(KEY, sizeof KEY - 1, data, size, false);
    if (!kcache_load(KEY, sizeof KEY - 1, &payload, &n, false) || n != size ||
        (size && memcmp(payload, data, size) != 0)) {
        fprintf(stderr, "fuzz_kcache: a stored payload of %zu bytes did not load back\n", size);
        abort();
    }
    free(payload);
    return 0;
}
