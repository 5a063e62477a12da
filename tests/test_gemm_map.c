/* test_gemm_map.c: codegen/gemm_map.h, the mapping of a row-major GEMM onto column-major
 * cuBLAS and cuBLASLt that the runtime and every reproducer use, checked without a GPU:
 *
 *  - a column-major GEMM as BLAS defines it (op, leading dimension), given the mapped
 *    sizes, operands and layouts and the row-major buffers as they lie, computes the
 *    row-major C = op(A) @ op(B), for every pair of transposes and shapes down to 1 and
 *    k = 0; each layout is the stored matrix's and each leading dimension is at least 1;
 *  - the rules beside it: which GEMMs go through cuBLASLt, which of the heuristic's
 *    algorithms a choice takes, and the alignment the heuristic is told.
 */
#include <stdlib.h>

#include "codegen/gemm_map.h"
#include "tests/check.h"

/* Element (I, J) of op(X), X column-major with leading dimension LD. */
static double at(const double *x, GemmMapOperand o, int64_t i, int64_t j)
{
    return o.trans ? x[j + i * o.ld] : x[i + j * o.ld];
}

/* C = op(A) @ op(B), column-major, as cublasGemmEx computes it with MAP's arguments:
 * A is the first operand passed (our B), B the second (our A). */
static void col_major_gemm(const GemmMap *map, const double *a, const double *b, double *c)
{
    for (int64_t i = 0; i < map->m; i++)
        for (int64_t j = 0; j < map->n; j++) {
            double sum = 0;
            for (int64_t l = 0; l < map->k; l++) sum += at(a, map->a, i, l) * at(b, map->b, l, j);
            c[i + j * map->c.ld] = sum;
        }
}

/* Whether operand O, read as op(O) of ROWS x COLS, is laid out as such a stored matrix. */
static int layout_fits(GemmMapOperand o, int64_t rows, int64_t cols)
{
    int64_t stored_rows = o.trans ? cols : rows, stored_cols = o.trans ? rows : cols;
    return o.rows == stored_rows && o.cols == stored_cols && o.ld >= (stored_rows > 0 ? stored_rows : 1);
}

/* Whether O's leading dimension keeps its stored matrix inside a dense buffer of
 * rows x cols, as the buffers here are: col_major_gemm indexes them with it. */
static int dense(GemmMapOperand o)
{
    return o.ld <= (o.rows > 0 ? o.rows : 1);
}

static void check_case(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b)
{
    double *a = malloc(sizeof *a * (size_t)(m * k + 1)), *b = malloc(sizeof *b * (size_t)(k * n + 1));
    double *c = calloc((size_t)(m * n + 1), sizeof *c);
    for (int64_t i = 0; i < m * k; i++) a[i] = (double)(i % 7) - 3;
    for (int64_t i = 0; i < k * n; i++) b[i] = (double)(i % 5) - 2;
    GemmMap map = gemm_map(m, n, k, trans_a, trans_b);
    CHECK(map.m == n && map.n == m && map.k == k);
    CHECK(layout_fits(map.a, map.m, map.k) && layout_fits(map.b, map.k, map.n));
    CHECK(layout_fits(map.c, map.m, map.n) && !map.c.trans);
    int in_bounds = map.m == n && map.n == m && map.k == k && layout_fits(map.a, map.m, map.k) &&
                    layout_fits(map.b, map.k, map.n) && layout_fits(map.c, map.m, map.n) &&
                    dense(map.a) && dense(map.b) && dense(map.c);
    CHECK(in_bounds);
    if (in_bounds) col_major_gemm(&map, b, a, c);
    int wrong = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double want = 0;    /* row-major: A [m, k] or [k, m], B [k, n] or [n, k] */
            for (int64_t l = 0; l < k; l++)
                want += (trans_a ? a[l * m + i] : a[i * k + l]) * (trans_b ? b[j * k + l] : b[l * n + j]);
            wrong += c[i * n + j] != want;
        }
    CHECK_EQ_INT(wrong, 0);
    free(a);
    free(b);
    free(c);
}

int main(void)
{
    static const int64_t shape[][3] = { {3, 5, 4}, {1, 6, 2}, {4, 1, 3}, {2, 3, 1}, {5, 4, 0}, {8, 8, 8} };
    for (size_t s = 0; s < sizeof shape / sizeof shape[0]; s++)
        for (int t = 0; t < 4; t++) check_case(shape[s][0], shape[s][1], shape[s][2], t & 1, t & 2);
    CHECK(gemm_map(5, 4, 0, false, true).a.ld == 1);    /* k = 0: cuBLAS wants ld >= 1 */

    CHECK(gemm_map_uses_lt(true, 0, 1, 64));            /* an epilogue */
    CHECK(gemm_map_uses_lt(false, 2, 1, 64));           /* a plain GEMM given an algorithm */
    CHECK(!gemm_map_uses_lt(false, 0, 1, 64));
    CHECK(!gemm_map_uses_lt(false, 2, 3, 64));          /* batched: cuBLAS */
    CHECK(!gemm_map_uses_lt(false, 2, 1, 0));

    CHECK_EQ_INT(gemm_map_lt_algo(0, 5), 0);            /* no choice: the heuristic's first */
    CHECK_EQ_INT(gemm_map_lt_algo(3, 5), 2);
    CHECK_EQ_INT(gemm_map_lt_algo(7, 5), 4);            /* a shorter list: its last */

    CHECK_EQ_INT(gemm_map_alignment(0x1000), 256);
    CHECK_EQ_INT(gemm_map_alignment(0x1010), 16);
    CHECK_EQ_INT(gemm_map_alignment(0x1002), 2);
    CHECK_EQ_INT(gemm_map_alignment(0x1001), 1);
    return check_result();
}
