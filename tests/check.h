/* check.h: the assertions the C tests use. A failed check prints file, line, what was
 * expected and what was seen, and the test goes on so that one run shows every
 * failure; main returns check_result(). */
#ifndef CGC_TESTS_CHECK_H
#define CGC_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_failures, check_count;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        check_count++;                                                               \
        if (!(cond)) {                                                               \
            check_failures++;                                                        \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define CHECK_EQ_INT(got, want)                                                          \
    do {                                                                                 \
        long long g_ = (long long)(got), w_ = (long long)(want);                         \
        check_count++;                                                                   \
        if (g_ != w_) {                                                                  \
            check_failures++;                                                            \
            fprintf(stderr, "%s:%d: %s is %lld, want %lld\n", __FILE__, __LINE__, #got, \
                    g_, w_);                                                             \
        }                                                                                \
    } while (0)

/* |got - want| <= atol + rtol * |want|; NaN never passes. */
#define CHECK_CLOSE(got, want, atol, rtol)                                                   \
    do {                                                                                     \
        double g_ = (double)(got), w_ = (double)(want);                                      \
        check_count++;                                                                       \
        if (!(fabs(g_ - w_) <= (atol) + (rtol) * fabs(w_))) {                                \
            check_failures++;                                                                \
            fprintf(stderr, "%s:%d: %s is %.10g, want %.10g (atol %g, rtol %g)\n", __FILE__, \
                    __LINE__, #got, g_, w_, (double)(atol), (double)(rtol));                 \
        }                                                                                    \
    } while (0)

#define CHECK_STR(got, want)                                                                \
    do {                                                                                    \
        const char *g_ = (got), *w_ = (want);                                               \
        check_count++;                                                                      \
        if (!g_ || strcmp(g_, w_) != 0) {                                                   \
            check_failures++;                                                               \
            fprintf(stderr, "%s:%d: %s is \"%s\", want \"%s\"\n", __FILE__, __LINE__, #got, \
                    g_ ? g_ : "(null)", w_);                                                \
        }                                                                                   \
    } while (0)

static inline int check_result(void)
{
    if (check_count == 0) {
        fprintf(stderr, "no checks ran\n");
        return 1;
    }
    printf("%d checks, %d failed\n", check_count, check_failures);
    return check_failures ? 1 : 0;
}

#endif
