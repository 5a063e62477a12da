/* text.h: strings that cgc writes for other programs to read: names made safe for
 * generated code and file names, and strings quoted as JSON. The runtime's trace
 * (--profile), --stats and the code generator share them, so that a name reads the same
 * wherever it appears; and the one question asked of a file name's extension.
 */
#ifndef CGC_TEXT_H
#define CGC_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* S with anything but [A-Za-z0-9._-] replaced by '_', cut to MAX - 1 bytes, into DST
 * (FALLBACK when S is empty or NULL): safe in any comment or string literal of generated
 * code, in a file name, and in NVRTC's messages. */
void text_sanitise(char *dst, size_t max, const char *s, const char *fallback);

/* S as a JSON string, quotes included: '"' and '\' escaped, control characters and DEL as
 * \u00XX, and every byte that does not start a valid UTF-8 sequence as U+FFFD, so that
 * the output parses whatever S holds. */
void text_json_string(FILE *f, const char *s);

/* Whether S ends in TAIL and has something before it (a file name's extension). */
bool text_ends_with(const char *s, const char *tail);

#endif
