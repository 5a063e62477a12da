/* text.c: sanitised names, JSON strings and file name extensions (see text.h). */
#include "text.h"

#include <stdbool.h>
#include <string.h>

void text_sanitise(char *dst, size_t max, const char *s, const char *fallback)
{
    size_t n = 0;
    for (; s && s[n] && n + 1 < max; n++) {
        char c = s[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        dst[n] = ok ? c : '_';
    }
    dst[n] = '\0';
    if (n == 0) snprintf(dst, max, "%s", fallback);
}

/* The length of the UTF-8 sequence at S (RFC 3629: shortest form, no surrogates, at most
 * U+10FFFF), or 0 when S does not start one. */
static int utf8_length(const unsigned char *s)
{
    int n = s[0] < 0xc2 ? 0 : s[0] < 0xe0 ? 2 : s[0] < 0xf0 ? 3 : s[0] < 0xf5 ? 4 : 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (n == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0))) return 0;
    if (n == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))) return 0;
    return n;
}

void text_json_string(FILE *f, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', f);
    while (*s) {
        int n = *s < 0x80 ? 1 : utf8_length(s);
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if (*s < 0x20 || *s == 0x7f) fprintf(f, "\\u%04x", *s);
        else if (n == 0) fputs("\\ufffd", f);
        else fwrite(s, 1, (size_t)n, f);
        s += n ? n : 1;
    }
    fputc('"', f);
}

bool text_ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n > m && strcmp(s + n - m, tail) == 0;
}
