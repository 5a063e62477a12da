/* kcache.h: the on-disk cache of compiled kernel modules (cubins).
 *
 * Where: cgc/nvrtc/ of the user's cache ($XDG_CACHE_HOME, else ~/.cache), made and
 * checked as runtime/cachedir.h says; CGC_NO_CACHE=1 turns it off.
 *
 * Safety: the cache holds code that cgc loads onto the GPU, so nothing in it is trusted
 * unless it is ours: a private directory (cachedir.h's checks, one warning when it fails
 * them, then compilation goes on without caching) and regular files of the user, never
 * read through a symbolic link.
 *
 * An entry is named by a 64-bit hash of its key (the full key material: NVRTC version,
 * architecture, options, source) but holds the whole key, compared byte for byte on load,
 * and a CRC-32 of its payload: a corrupt, truncated or foreign entry (one written for
 * another key) is never loaded; the caller recompiles and the store replaces it. Entries
 * are written atomically (temporary file in the same directory, then rename).
 */
#ifndef CGC_KCACHE_H
#define CGC_KCACHE_H

#include <stdbool.h>
#include <stddef.h>

/* The payload stored under KEY (KEY_LEN bytes), malloc'd into *PAYLOAD / *SIZE: true on
 * a hit. A miss is silent; a rejected entry (corrupt, truncated, foreign) gets a one-line
 * note when VERBOSE. */
bool kcache_load(const void *key, size_t key_len, void **payload, size_t *size, bool verbose);

/* Stores PAYLOAD under KEY, replacing any entry; failures only warn (the cache is an
 * optimisation, never a reason to fail a compile). */
void kcache_store(const void *key, size_t key_len, const void *payload, size_t size,
                  bool verbose);

/* The entry directory in use ("$XDG_CACHE_HOME/cgc/nvrtc"), into BUF; false (BUF says
 * why) when the cache is off or unusable. For messages and tests. */
bool kcache_dir(char *buf, size_t len);

/* The file name (no directory) of KEY's entry: 16 hex digits + ".cubin". */
void kcache_entry_name(const void *key, size_t key_len, char *buf, size_t len);

#endif
