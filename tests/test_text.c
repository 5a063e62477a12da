/* test_text.c: base/text.h, the names and JSON strings that the trace, --stats and the
 * generated code share:
 *
 *  - text_sanitise keeps [A-Za-z0-9._-], replaces every other byte (UTF-8 ones included)
 *    by '_', cuts to the buffer, and gives the fallback for an empty or absent name;
 *  - text_json_string escapes quotes, backslashes, control characters and DEL, keeps
 *    valid UTF-8 as it is, and writes U+FFFD for each byte that does not start a valid
 *    sequence (stray continuations, overlong forms, surrogates, past U+10FFFF, cut
 *    sequences), so that whatever a name holds, the output parses.
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/text.h"
#include "tests/check.h"

static const char *sanitised(const char *s, size_t max, const char *fallback)
{
    static char buf[64];
    text_sanitise(buf, max, s, fallback);
    return buf;
}

/* What text_json_string writes for S. */
static const char *json(const char *s)
{
    static char buf[256];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    if (!f) return NULL;
    text_json_string(f, s);
    fclose(f);
    return buf;
}

static void test_sanitise(void)
{
    CHECK_STR(sanitised("mlp.net", 64, "model"), "mlp.net");
    CHECK_STR(sanitised("A-z_0.9", 64, "model"), "A-z_0.9");
    CHECK_STR(sanitised("my model/v2*", 64, "model"), "my_model_v2_");
    CHECK_STR(sanitised("caf\xc3\xa9", 64, "model"), "caf__");
    CHECK_STR(sanitised("*/ \"x\" /*", 64, "model"), "____x____");
    CHECK_STR(sanitised("abcdefgh", 5, "model"), "abcd");
    CHECK_STR(sanitised("", 64, "model.net"), "model.net");
    CHECK_STR(sanitised(NULL, 64, "module"), "module");
    CHECK_STR(sanitised(NULL, 4, "module"), "mod");
}

static void test_json_escapes(void)
{
    CHECK_STR(json(""), "\"\"");
    CHECK_STR(json("h1.weight"), "\"h1.weight\"");
    CHECK_STR(json("a\"b\\c"), "\"a\\\"b\\\\c\"");
    CHECK_STR(json("tab\there\nnl"), "\"tab\\u0009here\\u000anl\"");
    CHECK_STR(json("\x01\x1f\x7f"), "\"\\u0001\\u001f\\u007f\"");
    CHECK_STR(json("/ and ~ stay"), "\"/ and ~ stay\"");
}

static void test_json_utf8(void)
{
    /* valid: two, three and four bytes, the extremes of each */
    CHECK_STR(json("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
    CHECK_STR(json("\xc2\x80\xdf\xbf"), "\"\xc2\x80\xdf\xbf\"");
    CHECK_STR(json("\xe0\xa0\x80\xed\x9f\xbf\xef\xbf\xbf"), "\"\xe0\xa0\x80\xed\x9f\xbf\xef\xbf\xbf\"");
    CHECK_STR(json("\xf0\x90\x80\x80\xf4\x8f\xbf\xbf"), "\"\xf0\x90\x80\x80\xf4\x8f\xbf\xbf\"");
    /* invalid: one U+FFFD per byte that starts nothing, the rest read again */
    CHECK_STR(json("a\x80z"), "\"a\\ufffdz\"");                 /* stray continuation */
    CHECK_STR(json("\xc0\xaf"), "\"\\ufffd\\ufffd\"");          /* overlong '/' */
    CHECK_STR(json("\xe0\x80\xaf"), "\"\\ufffd\\ufffd\\ufffd\""); /* overlong, 3 bytes */
    CHECK_STR(json("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\""); /* a surrogate */
    CHECK_STR(json("\xf4\x90\x80\x80"), "\"\\ufffd\\ufffd\\ufffd\\ufffd\""); /* > U+10FFFF */
    CHECK_STR(json("\xf5\xff"), "\"\\ufffd\\ufffd\"");          /* never in UTF-8 */
    CHECK_STR(json("\xc3"), "\"\\ufffd\"");                     /* cut at the end */
    CHECK_STR(json("\xe2\x82x"), "\"\\ufffd\\ufffdx\"");        /* cut before a letter */
}

int main(void)
{
    test_sanitise();
    test_json_escapes();
    test_json_utf8();
    return check_result();
}
