/* gemm_tc.c: the generated tensor-core GEMMs of max-autotune (plan.h).
 *
 * For each plain GEMM of the training graphs with f16 or bf16 operands, one kernel per
 * tile shape of plan_gemm_tiles computes C = epilogue(op(A) @ op(B)) as the library
 * call would: f32 accumulation on the tensor cores (mma.sync m16n8k16), then the bias,
 * the activation (relu) and one rounding to C's type, all in the registers that hold the
 * accumulators, so the epilogue costs no pass over C.
 *
 * The kernel, for a BM x BN tile of C per block (grid-stride over the tiles, row-major
 * order so that neighbouring blocks share A's rows):
 *   - k advances BK = 32 at a time through two shared-memory stages: while the warps
 *     multiply one stage, cp.async fills the other (cgc_tile_load, cgc_device.h);
 *   - each operand's stage keeps its global layout (the contiguous dimension stays
 *     contiguous, so every copy is 16 bytes wide), and the fragment reads follow it:
 *     ldmatrix reads a tile's fragments in one instruction, transposed (.trans) where k
 *     runs down the stage's rows;
 *   - the block's warps split the tile WARPS_M x WARPS_N; a warp's (BM / WARPS_M) x
 *     (BN / WARPS_N) is a grid of 16 x 8 products.
 * Kernels depend only on the transposes, the types, the epilogue and the tile (an
 * implicit GEMM's also on its image's and window's sizes, and the positions per image of
 * the NCHW matrices it reads or stores), never on the sizes (m, n, k are parameters),
 * so GEMMs of one kind share their kernels across layers and graphs, and the comment
 * lists every GEMM a kernel serves.
 */
#include "codegen_impl.h"

#include <stdlib.h>
#include <string.h>

/* From small tiles (more blocks for the small batches of a training step) to large (more
 * reuse for wide layers). Each warp's part is a multiple of 16 x 8; the two stages of
 * the largest take 40 KiB of the 48 KiB of static shared memory. */
const PlanGemmTile plan_gemm_tiles[PLAN_GEMM_TILES] = {
    { .bm = 32, .bn = 64, .bk = 32, .warps_m = 1, .warps_n = 2 },
    { .bm = 64, .bn = 64, .bk = 32, .warps_m = 2, .warps_n = 2 },
    { .bm = 128, .bn = 64, .bk = 32, .warps_m = 2, .warps_n = 2 },
    { .bm = 128, .bn = 128, .bk = 32, .warps_m = 2, .warps_n = 2 },
};

void plan_gemm_tile_name(int tile, char *buf, size_t len)
{
    CGC_ASSERT(tile >= 0 && tile < PLAN_GEMM_TILES);
    const PlanGemmTile *t = &plan_gemm_tiles[tile];
    snprintf(buf, len, "%dx%dx%d", t->bm, t->bn, t->bk);
}

unsigned plan_gemm_tile_grid(int tile, int64_t m, int64_t n)
{
    CGC_ASSERT(tile >= 0 && tile < PLAN_GEMM_TILES);
    const PlanGemmTile *t = &plan_gemm_tiles[tile];
    int64_t tiles = ((m + t->bm - 1) / t->bm) * ((n + t->bn - 1) / t->bn);
    if (tiles > 0x7fffffff) tiles = 0x7fffffff;
    return tiles < 1 ? 1u : (unsigned)tiles;
}

bool plan_gemm_generable(const PlanGemm *g)
{
    bool half = g->a_type == DT_F16 || g->a_type == DT_BF16;
    bool c_ok = g->c_type == DT_F32 || g->c_type == DT_F16 || g->c_type == DT_BF16;
    /* Of the epilogues, those a training graph's f16/bf16 GEMMs have: a gelu epilogue
     * forms only where nothing reads the sum before it (never where a backward does), or
     * with aux in f32 (test_gemm_group), so it stays with the library. */
    bool epi = g->epilogue == GEMM_EPI_NONE || (g->epilogue == GEMM_EPI_RELU_BIAS && g->bias >= 0);
    /* Leading dims folded into m or k are more rows of the same matrices: the kernel
     * takes the folded sizes (devexec passes plan_gemm_m, plan_gemm_k). */
    return g->batch.rank == 0 && half && g->b_type == g->a_type && g->compute == GEMM_F32_ACCUM &&
           c_ok && epi && g->aux < 0;
}

/* ---- what a kernel depends on ---- */

/* An implicit GEMM's gathered operand: the patches of a C x H x W image under a window
 * (cgc_window in cgc_device.h, whose fields these are, in order). */
enum { WIN_C, WIN_H, WIN_W, WIN_OH, WIN_OW, WIN_KH, WIN_KW, WIN_SH, WIN_SW, WIN_PH, WIN_PW,
       WIN_DH, WIN_DW, WIN_FIELDS };

typedef struct GemmSpec {
    bool trans_a, trans_b;
    DType in_type, c_type, bias_type;
    GemmEpilogue epilogue;
    int tile;
    char gather;                /* 0, or 'a' / 'b': that operand is the patches of an image */
    int64_t win[WIN_FIELDS];    /* with gather: the image and the window; else zeros */
    /* A convolution's channels-last matrices [N*L, channels] kept in the language's NCHW
     * [N, channels, L] instead (L = OH*OW, each image's positions): */
    bool c_nchw;                /* C stored so (the product) */
    bool a_nchw;                /* A read so (the product's gradient; cgc_nchw_load) */
    int64_t spots;              /* with either: L */
    /* With c_nchw: the pointwise group computed at each element of C instead of storing
     * it (PlanWindow.epilogue), as fused.c renders it: its parameters follow the ABI's
     * and its body runs at element i of the NCHW product; else NULL. */
    const KernelDraft *epi;
} GemmSpec;

static GemmSpec spec_of(const PlanGemm *g, int tile)
{
    bool epi = g->epilogue != GEMM_EPI_NONE;
    return (GemmSpec){ .trans_a = g->trans_a, .trans_b = g->trans_b, .in_type = g->a_type,
                       .c_type = g->c_type, .bias_type = epi ? g->bias_type : DT_F32,
                       .epilogue = g->epilogue, .tile = tile };
}

static bool epi_eq(const KernelDraft *x, const KernelDraft *y)
{
    if (!x || !y) return x == y;
    if (x->nparams != y->nparams || strcmp(x->name, y->name) != 0 || strcmp(x->body.s, y->body.s) != 0)
        return false;
    for (int i = 0; i < x->nparams; i++)
        if (x->param[i].type != y->param[i].type || strcmp(x->param[i].ctype, y->param[i].ctype) != 0 ||
            strcmp(x->param[i].name, y->param[i].name) != 0)
            return false;
    return true;
}

static bool spec_eq(const GemmSpec *x, const GemmSpec *y)
{
    return epi_eq(x->epi, y->epi) && x->trans_a == y->trans_a && x->trans_b == y->trans_b && x->in_type == y->in_type &&
           x->c_type == y->c_type && x->bias_type == y->bias_type &&
           x->epilogue == y->epilogue && x->tile == y->tile && x->gather == y->gather &&
           memcmp(x->win, y->win, sizeof x->win) == 0 && x->c_nchw == y->c_nchw && x->a_nchw == y->a_nchw &&
           x->spots == y->spots;
}

static const char *epilogue_word(GemmEpilogue e)
{
    switch (e) {
    case GEMM_EPI_NONE: return "";
    case GEMM_EPI_BIAS: return "_bias";
    case GEMM_EPI_RELU_BIAS: return "_bias_relu";
    case GEMM_EPI_GELU_BIAS: break;    /* not generated (plan_gemm_generable) */
    }
    CGC_INTERNAL("unknown GEMM epilogue %d", (int)e);
}

/* "3", or "3x5" where the two differ. */
static int pair_name(char *buf, size_t len, int64_t x, int64_t y)
{
    return x == y ? snprintf(buf, len, "%lld", (long long)x)
                  : snprintf(buf, len, "%lldx%lld", (long long)x, (long long)y);
}

/* "_patches_a_c32h14w14_k3s1p1d1": which operand is gathered, the image, the window. */
static void window_name(const GemmSpec *s, char *buf, size_t len)
{
    const int64_t *w = s->win;
    int at = snprintf(buf, len, "_patches_%c_c%lldh%lldw%lld_k", s->gather, (long long)w[WIN_C],
                      (long long)w[WIN_H], (long long)w[WIN_W]);
    at += pair_name(buf + at, len - (size_t)at, w[WIN_KH], w[WIN_KW]);
    at += snprintf(buf + at, len - (size_t)at, "s");
    at += pair_name(buf + at, len - (size_t)at, w[WIN_SH], w[WIN_SW]);
    at += snprintf(buf + at, len - (size_t)at, "p");
    at += pair_name(buf + at, len - (size_t)at, w[WIN_PH], w[WIN_PW]);
    at += snprintf(buf + at, len - (size_t)at, "d");
    pair_name(buf + at, len - (size_t)at, w[WIN_DH], w[WIN_DW]);
}

/* "gemm_tc_nt_f16_to_f16_bias_relu_64x64x32": layouts, types, epilogue, tile; an
 * implicit GEMM's name says which operand it gathers and from what, which matrices it
 * keeps NCHW ("_a_nchw196", "_c_nchw784"), and the group it computes on C
 * ("_then_add_relu_c1"). */
static void spec_name(const GemmSpec *s, char *buf, size_t len)
{
    char tile[32], bias[16] = "", win[96] = "", a[32] = "", c[32] = "", epi[DRAFT_NAME_MAX + 8] = "";
    plan_gemm_tile_name(s->tile, tile, sizeof tile);
    if (s->epilogue != GEMM_EPI_NONE && s->bias_type != s->c_type)
        snprintf(bias, sizeof bias, "_%s", ir_dtype_name(s->bias_type));
    if (s->gather) window_name(s, win, sizeof win);
    if (s->a_nchw) snprintf(a, sizeof a, "_a_nchw%lld", (long long)s->spots);
    if (s->c_nchw) snprintf(c, sizeof c, "_c_nchw%lld", (long long)s->spots);
    if (s->epi) snprintf(epi, sizeof epi, "_then_%s", s->epi->name);
    snprintf(buf, len, "gemm_tc_%c%c_%s_to_%s%s%s%s%s%s%s_%s", s->trans_a ? 't' : 'n',
             s->trans_b ? 't' : 'n', ir_dtype_name(s->in_type), ir_dtype_name(s->c_type),
             epilogue_word(s->epilogue), bias, win, a, c, epi, tile);
}

/* ---- the kernel's text ---- */

static void render_formula(StrBuf *o, const GemmSpec *s, const char *name)
{
    const char *product = s->trans_a ? (s->trans_b ? "A^T @ B^T" : "A^T @ B")
                                     : (s->trans_b ? "A @ B^T" : "A @ B");
    switch (s->epilogue) {
    case GEMM_EPI_NONE: sb_printf(o, "C = %s", product); break;
    case GEMM_EPI_BIAS: sb_printf(o, "C = %s + bias", product); break;
    case GEMM_EPI_RELU_BIAS: sb_printf(o, "C = relu(%s + bias)", product); break;
    case GEMM_EPI_GELU_BIAS: CGC_INTERNAL("gelu epilogues are not generated");
    }
    sb_printf(o, ", on tensor cores:\n *   A %s %s, B %s %s, C [m, n] %s",
              s->trans_a ? "[k, m]" : "[m, k]", ir_dtype_name(s->in_type),
              s->trans_b ? "[n, k]" : "[k, n]", ir_dtype_name(s->in_type), ir_dtype_name(s->c_type));
    if (s->epilogue != GEMM_EPI_NONE) sb_printf(o, ", bias [n] %s", ir_dtype_name(s->bias_type));
    sb_puts(o, ".\n");
    if (s->a_nchw)
        sb_printf(o, " * A is read from the NCHW tensor [N, %s, %lld] (cgc_nchw_load): the channels-last matrix\n"
                     " * that a transpose would make, never written.\n", s->trans_a ? "m" : "k", (long long)s->spots);
    if (s->c_nchw && s->epi)
        sb_printf(o, " * C, image by image the language's NCHW [N, n, %lld], is never stored: at each of its\n"
                     " * elements the group %s that reads it runs instead (%s_epilogue).\n", (long long)s->spots,
                  s->epi->name, name);
    else if (s->c_nchw)
        sb_printf(o, " * C is stored image by image as [N, n, %lld]: the language's NCHW, so that no transpose\n"
                     " * of the channels-last product follows.\n", (long long)s->spots);
    if (!s->gather) return;
    const int64_t *w = s->win;
    sb_printf(o, " * %c is not read as a matrix: it is the patches of the image [N, %lld, %lld, %lld] at %c,\n"
                 " * under a %lldx%lld window (stride %lldx%lld, padding %lldx%lld, dilation %lldx%lld), each tile\n"
                 " * gathered from the image (cgc_patch_load), so that they are never written.\n",
              s->gather == 'a' ? 'A' : 'B', (long long)w[WIN_C], (long long)w[WIN_H],
              (long long)w[WIN_W], s->gather, (long long)w[WIN_KH], (long long)w[WIN_KW], (long long)w[WIN_SH],
              (long long)w[WIN_SW], (long long)w[WIN_PH], (long long)w[WIN_PW], (long long)w[WIN_DH],
              (long long)w[WIN_DW]);
}

/* The loads of stage S (0 or 1, an expression) for k from K0 (an expression). */
static void render_loads(StrBuf *o, const GemmSpec *s, const char *indent, const char *stage,
                         const char *k0)
{
    if (s->gather == 'a')       /* never transposed: the patches are [m, k] */
        sb_printf(o, "%scgc_patch_load<BM, BK, THREADS>(sa[%s], a16, win, m, k, m0, %s);\n", indent, stage, k0);
    else if (s->a_nchw && s->trans_a)
        sb_printf(o, "%scgc_nchw_load<BK, BM, THREADS>(sa[%s], a16, spots, k, m, %s, m0);\n", indent, stage, k0);
    else if (s->a_nchw)
        sb_printf(o, "%scgc_nchw_load<BM, BK, THREADS>(sa[%s], a16, spots, m, k, m0, %s);\n", indent, stage, k0);
    else if (s->trans_a)
        sb_printf(o, "%scgc_tile_load<BK, BM, THREADS>(sa[%s], a16, k, m, %s, m0);\n", indent, stage, k0);
    else
        sb_printf(o, "%scgc_tile_load<BM, BK, THREADS>(sa[%s], a16, m, k, m0, %s);\n", indent, stage, k0);
    if (s->gather == 'b')       /* never transposed: the patches are [k, n] */
        sb_printf(o, "%scgc_patch_load<BK, BN, THREADS>(sb[%s], b16, win, k, n, %s, n0);\n", indent, stage, k0);
    else if (s->trans_b)
        sb_printf(o, "%scgc_tile_load<BN, BK, THREADS>(sb[%s], b16, n, k, n0, %s);\n", indent, stage, k0);
    else
        sb_printf(o, "%scgc_tile_load<BK, BN, THREADS>(sb[%s], b16, k, n, %s, n0);\n", indent, stage, k0);
}

/* The warp's fragments of stage s for k [ks, ks + 16), each by ldmatrix (cgc_device.h),
 * every lane giving the address of one row of an 8x8 matrix: A's MT 16x16 tiles as four
 * matrices each (rows r..r+7 and r+8..r+15 at k and k + 8, in the order of a[0..3]), B's NT
 * 16x8 tiles as two (k and k + 8). Where op(X)'s stage runs k along its rows rather
 * than its columns (A^T, B not transposed), the matrices are read transposed. */
static void render_fragments(StrBuf *o, const GemmSpec *s)
{
    sb_puts(o, "#pragma unroll\n"
               "                for (int i = 0; i < MT; i++)\n");
    if (!s->trans_a)    /* sa[s][m][k]: lane l gives row l % 16 at k + l / 16 * 8 */
        sb_puts(o, "                    cgc_ldmatrix(fa[i], 4, &sa[s][wm + i * 16 + lane % 16][ks + lane / 16 * 8], false);\n");
    else                /* sa[s][k][m]: row k + l / 16 * 8 + l % 8, at m + l / 8 % 2 * 8 */
        sb_puts(o, "                    cgc_ldmatrix(fa[i], 4, &sa[s][ks + lane / 16 * 8 + lane % 8][wm + i * 16 + lane / 8 % 2 * 8], true);\n");
    sb_puts(o, "#pragma unroll\n"
               "                for (int j = 0; j < NT; j++)\n");
    if (s->trans_b)     /* sb[s][n][k]: lanes 0-15 give row n + l % 8 at k + l / 8 * 8 */
        sb_puts(o, "                    cgc_ldmatrix(fb[j], 2, &sb[s][wn + j * 8 + lane % 8][ks + lane / 8 % 2 * 8], false);\n");
    else                /* sb[s][k][n]: lanes 0-15 give row k + l % 16 at n */
        sb_puts(o, "                    cgc_ldmatrix(fb[j], 2, &sb[s][ks + lane % 16][wn + j * 8], true);\n");
}

/* Parameter P of an epilogue's group as declared: "const cgc_bf16 *in0". */
static void epi_param(StrBuf *o, const DraftParam *p)
{
    sb_printf(o, "%s%s%s", p->ctype, p->ctype[strlen(p->ctype) - 1] == '*' ? "" : " ", p->name);
}

/* Kernel NAME's device function that computes its epilogue's group at element i of the
 * NCHW product, whose value there is `product`. */
static void render_epi_function(StrBuf *o, const GemmSpec *s, const char *name)
{
    sb_printf(o, "/* The fusion group %s at element i of the NCHW product, which holds `product`\n"
                 " * there (fused.c): what its own kernel would do at i, C never stored. */\n"
                 "static __device__ __forceinline__ void %s_epilogue(\n    const int64_t i, const float product",
              s->epi->name, name);
    for (int p = 0; p < s->epi->nparams; p++) {
        sb_puts(o, ",\n    ");
        epi_param(o, &s->epi->param[p]);
    }
    sb_printf(o, ")\n{\n%s}\n\n", s->epi->body.s ? s->epi->body.s : "");
}

static void render_epilogue(StrBuf *o, const GemmSpec *s, const char *name)
{
    const char *in = "                    ";
    sb_printf(o, "%sfloat v = acc[i][j][e];\n", in);
    if (s->epilogue != GEMM_EPI_NONE) sb_printf(o, "%sv += cgc_load(bias[col]);\n", in);
    if (s->epilogue == GEMM_EPI_RELU_BIAS) sb_printf(o, "%sv = v < 0.0f ? 0.0f : v;\n", in);
    const char *at = "(row / spots * n + col) * spots + row % spots";   /* row = image * spots + position */
    if (s->epi) {
        const char *round = fused_rounding(s->c_type);      /* C as a store would hold it */
        sb_printf(o, "%s%s_epilogue(%s, %s%sv%s", in, name, at, round ? round : "", round ? "(" : "", round ? ")" : "");
        for (int p = 0; p < s->epi->nparams; p++) sb_printf(o, ", %s", s->epi->param[p].name);
        sb_puts(o, ");\n");
    } else if (s->c_nchw)
        sb_printf(o, "%scgc_store(&c[%s], v);\n", in, at);
    else
        sb_printf(o, "%scgc_store(&c[row * n + col], v);\n", in);
}

static char *render(const GemmSpec *s, const char *name, const char *uses)
{
    const PlanGemmTile *t = &plan_gemm_tiles[s->tile];
    int warps = t->warps_m * t->warps_n, wtm = t->bm / t->warps_m, wtn = t->bn / t->warps_n;
    CGC_ASSERT(wtm % 16 == 0 && wtn % 8 == 0 && t->bk % 16 == 0);
    DType bias = s->epilogue != GEMM_EPI_NONE ? s->bias_type : s->c_type;
    StrBuf o = { 0 };
    if (s->epi) render_epi_function(&o, s, name);
    sb_puts(&o, uses);
    sb_puts(&o, " *\n * ");
    render_formula(&o, s, name);
    sb_printf(&o, " * A block per %dx%d tile of C (grid-stride), %d warps of %dx%d, k %d at a time\n"
                  " * through two shared-memory stages filled by cp.async; fragments read by ldmatrix;\n"
                  " * mma.sync m16n8k16 with f32 accumulation, the epilogue on the accumulators, one\n"
                  " * rounding to C's type. */\n",
              t->bm, t->bn, warps, wtm, wtn, t->bk);
    sb_printf(&o, "extern \"C\" __global__ void __launch_bounds__(%d)\n%s(\n", 32 * warps, name);
    sb_printf(&o, "    %s__restrict__ c,\n    %s__restrict__ a,\n    %s__restrict__ b,\n"
                  "    %s__restrict__ bias,\n    %s__restrict__ aux,\n"
                  "    int64_t m, int64_t n, int64_t k",
              cuda_storage_ctype(s->c_type, false), cuda_storage_ctype(s->in_type, true),
              cuda_storage_ctype(s->in_type, true), cuda_storage_ctype(bias, true),
              cuda_storage_ctype(s->c_type, false));
    for (int p = 0; s->epi && p < s->epi->nparams; p++) {
        sb_puts(&o, ",\n    ");
        epi_param(&o, &s->epi->param[p]);
    }
    sb_puts(&o, ")\n{\n");
    sb_printf(&o, "    enum { BM = %d, BN = %d, BK = %d, THREADS = %d, MT = %d, NT = %d };\n",
              t->bm, t->bn, t->bk, 32 * warps, wtm / 16, wtn / 8);
    sb_printf(&o, "    __shared__ __align__(16) unsigned short sa[2][%s][%s + 8];   /* op(A), %s */\n",
              s->trans_a ? "BK" : "BM", s->trans_a ? "BM" : "BK",
              s->trans_a ? "m contiguous" : "k contiguous");
    sb_printf(&o, "    __shared__ __align__(16) unsigned short sb[2][%s][%s + 8];   /* op(B), %s */\n",
              s->trans_b ? "BN" : "BK", s->trans_b ? "BK" : "BN",
              s->trans_b ? "k contiguous" : "n contiguous");
    if (s->gather) {
        const int64_t *w = s->win;
        sb_puts(&o, "    const cgc_window win = {");
        for (int f = 0; f < WIN_FIELDS; f++) sb_printf(&o, "%s%lld", f ? ", " : "", (long long)w[f]);
        sb_puts(&o, "};   /* C, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW */\n");
    }
    if (s->a_nchw || s->c_nchw)
        sb_printf(&o, "    const int64_t spots = %lld;   /* positions per image */\n", (long long)s->spots);
    sb_printf(&o, "    const unsigned short *a16 = (const unsigned short *)a, *b16 = (const unsigned short *)b;\n"
                  "    const int warp = threadIdx.x / 32, lane = threadIdx.x %% 32, g = lane / 4, t = lane %% 4;\n"
                  "    const int wm = warp / %d * %d, wn = warp %% %d * %d;   /* the warp's part of the tile */\n",
              t->warps_n, wtm, t->warps_n, wtn);
    sb_puts(&o, "    const int64_t tiles_n = (n + BN - 1) / BN, tiles = (m + BM - 1) / BM * tiles_n;\n"
                "    const int64_t steps = (k + BK - 1) / BK;\n"
                "    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {\n"
                "        const int64_t m0 = tile / tiles_n * BM, n0 = tile % tiles_n * BN;\n"
                "        float acc[MT][NT][4];\n"
                "#pragma unroll\n"
                "        for (int i = 0; i < MT; i++)\n"
                "#pragma unroll\n"
                "            for (int j = 0; j < NT; j++)\n"
                "#pragma unroll\n"
                "                for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;\n"
                "        if (steps > 0) {\n");
    render_loads(&o, s, "            ", "0", "0");
    sb_puts(&o, "        }\n"
                "        cgc_cp_async_commit();\n"
                "        for (int64_t step = 0; step < steps; step++) {\n"
                "            const int s = (int)(step & 1);\n"
                "            if (step + 1 < steps) {   /* the next stage, while this one is used */\n");
    render_loads(&o, s, "                ", "s ^ 1", "(step + 1) * BK");
    sb_puts(&o, "            }\n"
                "            cgc_cp_async_commit();\n"
                "            cgc_cp_async_wait_prior();   /* this stage has landed */\n"
                "            __syncthreads();\n"
                "#pragma unroll\n"
                "            for (int ks = 0; ks < BK; ks += 16) {\n"
                "                uint32_t fa[MT][4], fb[NT][2];\n");
    render_fragments(&o, s);
    sb_printf(&o, "#pragma unroll\n"
                  "                for (int i = 0; i < MT; i++)\n"
                  "#pragma unroll\n"
                  "                    for (int j = 0; j < NT; j++) cgc_mma_16816(acc[i][j], fa[i], fb[j], %s);\n"
                  "            }\n"
                  "            __syncthreads();   /* before the next loads overwrite this stage */\n"
                  "        }\n",
              s->in_type == DT_BF16 ? "true" : "false");
    sb_puts(&o, "#pragma unroll\n"
                "        for (int i = 0; i < MT; i++)\n"
                "#pragma unroll\n"
                "            for (int j = 0; j < NT; j++)\n"
                "#pragma unroll\n"
                "                for (int e = 0; e < 4; e++) {\n"
                "                    const int64_t row = m0 + wm + i * 16 + g + (e >= 2 ? 8 : 0);\n"
                "                    const int64_t col = n0 + wn + j * 8 + 2 * t + (e & 1);\n"
                "                    if (row >= m || col >= n) continue;\n");
    render_epilogue(&o, s, name);
    sb_puts(&o, "                }\n    }\n}\n");
    return o.s;
}

/* ---- adding them to a plan ---- */

typedef struct GemmKernel {
    GemmSpec spec;
    KernelUses uses;
    int kernel;         /* its index in the plan */
} GemmKernel;

static void set_params(PlanKernel *k, const GemmSpec *s)
{
    plan_kernel_params(k, PLAN_MAX_PARAMS);
    DType bias = s->epilogue != GEMM_EPI_NONE ? s->bias_type : s->c_type;
    const char *ct[] = { cuda_storage_ctype(s->c_type, false), cuda_storage_ctype(s->in_type, true),
                         cuda_storage_ctype(s->in_type, true), cuda_storage_ctype(bias, true),
                         cuda_storage_ctype(s->c_type, false), "int64_t", "int64_t", "int64_t" };
    k->nparams = (int)(sizeof ct / sizeof ct[0]);
    for (int i = 0; i < k->nparams; i++) {
        k->param[i] = i < 5 ? PP_PTR : PP_I64;
        k->param_restrict[i] = i < 5;
        k->param_ctype[i] = ct[i];
    }
    /* the epilogue's, never restrict: a kernel shared by several runs would have to
     * hold it for all of them */
    for (int p = 0; s->epi && p < s->epi->nparams; p++, k->nparams++) {
        CGC_ASSERT(k->nparams < PLAN_MAX_PARAMS);
        k->param[k->nparams] = s->epi->param[p].type;
        k->param_restrict[k->nparams] = false;
        k->param_ctype[k->nparams] = s->epi->param[p].ctype;
    }
}

/* Whether tile shape T is no better than a smaller one of the same warps for an M x N
 * GEMM: the smaller gives as many blocks of as many threads, and T's larger tile only
 * adds rows or columns of C that are not there, each block loading and multiplying them
 * for nothing. Such a tile is neither generated nor timed for the GEMM. A dim < 0 (not
 * known when the plan is made): never. */
static bool tile_dominated(int t, int64_t m, int64_t n)
{
    const PlanGemmTile *x = &plan_gemm_tiles[t];
    if (m < 0 || n < 0) return false;
    for (int u = 0; u < PLAN_GEMM_TILES; u++) {
        const PlanGemmTile *y = &plan_gemm_tiles[u];
        if (u == t || y->warps_m != x->warps_m || y->warps_n != x->warps_n || y->bk != x->bk ||
            y->bm > x->bm || y->bn > x->bn)
            continue;
        if (plan_gemm_tile_grid(u, m, n) == plan_gemm_tile_grid(t, m, n)) return true;
    }
    return false;
}

/* Dim D of a training graph's GEMM at its largest: the batch symbol at the configured
 * batch (each micro-batch's rows, the most a train graph runs with); -1 for another
 * symbol. */
static int64_t train_dim(const Plan *plan, int64_t d)
{
    if (!IR_DIM_IS_SYM(d)) return d;
    return IR_DIM_SYMBOL(d) == 0 ? plan->p->cfg.batch : -1;
}

/* G's rows at their largest (m_lead's dims folded in), or -1 where a dim is unknown. */
static int64_t train_rows(const Plan *plan, const PlanGemm *g)
{
    int64_t rows = train_dim(plan, g->m);
    for (int i = 0; i < g->m_lead.rank && rows >= 0; i++) {
        int64_t d = train_dim(plan, g->m_lead.dim[i]);
        rows = d < 0 ? -1 : rows * d;
    }
    return rows;
}

/* The generated kernels of a plan being made: one per distinct spec, appended to the
 * plan's kernels together (add_kernels), in the order first asked for. */
typedef struct KernelSet {
    GemmKernel *k;
    int n, cap;
} KernelSet;

/* The plan index of SET's kernel for S (made when new), noting the GEMM it serves. */
static int kernel_of(KernelSet *set, const Plan *plan, const GemmSpec *s, const PlanStep *st,
                     PlanGraphId gid)
{
    int k = 0;
    while (k < set->n && !spec_eq(&set->k[k].spec, s)) k++;
    if (k == set->n) {
        if (set->n == set->cap) {
            set->cap = set->cap ? 2 * set->cap : 16;
            set->k = xrealloc(set->k, (size_t)set->cap * sizeof *set->k);
        }
        set->k[set->n++] = (GemmKernel){ .spec = *s, .kernel = plan->nkernels + k };
    }
    kernel_uses_add(&set->k[k].uses, "%s line %d: %s (%s graph)", plan->source_name, st->loc.line,
                    st->what, codegen_graph_label[gid]);
    return set->k[k].kernel;
}

/* Renders SET's kernels onto PLAN's, and frees SET. */
static void add_kernels(Plan *plan, KernelSet *set)
{
    plan->kernels = xrealloc(plan->kernels, (size_t)(plan->nkernels + set->n + 1) * sizeof *plan->kernels);
    for (int k = 0; k < set->n; k++) {
        PlanKernel *pk = &plan->kernels[plan->nkernels];
        char name[256];
        memset(pk, 0, sizeof *pk);
        spec_name(&set->k[k].spec, name, sizeof name);
        plan_unique_kernel_name(plan, name, sizeof name);   /* two epilogues of one group name */
        pk->name = xstrdup(name);
        plan->nkernels++;
        const PlanGemmTile *t = &plan_gemm_tiles[set->k[k].spec.tile];
        pk->block = 32 * t->warps_m * t->warps_n;
        set_params(pk, &set->k[k].spec);
        StrBuf uses = { 0 };
        kernel_uses_comment(&uses, &set->k[k].uses, "\n");
        pk->source = render(&set->k[k].spec, name, uses.s);
        sb_free(&uses);
        sb_free(&set->k[k].uses.lines);
    }
    free(set->k);
}

void plan_add_gemm_kernels(Plan *plan)
{
    KernelSet set = { 0 };
    for (int gid = PG_TRAIN; gid <= PG_TRAIN_MICRO; gid++) {   /* the graphs tuned */
        PlanGraph *pg = &plan->graph[gid];
        for (int i = 0; i < pg->nsteps; i++) {
            PlanStep *st = &pg->steps[i];     /* tile_kernel is -1 (plan_build) */
            if (st->kind != STEP_GEMM || !plan_gemm_generable(&st->gemm)) continue;
            int64_t rows = train_rows(plan, &st->gemm), cols = train_dim(plan, st->gemm.n);
            for (int t = 0; t < PLAN_GEMM_TILES; t++) {
                if (tile_dominated(t, rows, cols)) continue;
                GemmSpec s = spec_of(&st->gemm, t);
                st->gemm.tile_kernel[t] = kernel_of(&set, plan, &s, st, (PlanGraphId)gid);
            }
        }
    }
    add_kernels(plan, &set);
}

/* ---- implicit-GEMM convolutions (plan.h, PlanWindow) ---- */

/* Whether launch step S of PG stores only node ID's value: its kernel is ID's own, or
 * that of a group of one launch in which no other member has a buffer. */
static bool stores_only(const PlanGraph *pg, const PlanStep *s, int id)
{
    const IrGraph *g = pg->ir;
    if (s->group == 0) return s->node == id;
    if (g->nodes[id].group != s->group || g->groups[s->group - 1].multi != 0) return false;
    for (int v = 0; v < g->nnodes; v++)
        if (v != id && g->nodes[v].group == s->group && pg->node_buffer[v] >= 0) return false;
    return true;
}

/* Whether GEMM G reads the [N, L, cols] tensor of SHAPE (its operand WHICH's buffer) as
 * the [N*L, cols] matrix: op(A) that matrix or (TRANS) its transpose, or op(B) that
 * matrix. */
static bool reads_rows(const PlanGemm *g, char which, bool trans, const Shape *shape, DType type)
{
    CGC_ASSERT(which == 'a' || !trans);
    const Shape *lead = which == 'a' && !trans ? &g->m_lead : &g->k_lead;
    int64_t rows = which == 'a' ? (trans ? g->k : g->m) : g->k;
    int64_t cols = which == 'a' ? (trans ? g->m : g->k) : g->n;
    bool t = which == 'a' ? g->trans_a : g->trans_b;
    return t == trans && g->a_type == type && lead->rank == 1 && lead->dim[0] == shape->dim[0] &&
           rows == shape->dim[1] && cols == shape->dim[2];
}

/* Whether launch step S names buffer root U. */
static bool launch_names(const Plan *plan, const PlanStep *s, int u)
{
    for (int a = 0; a < s->launch.nargs; a++)
        if (s->launch.arg[a].kind == ARG_BUFFER && plan_buffer_root(plan, s->launch.arg[a].index) == u)
            return true;
    return false;
}

/* Whether GEMM G names buffer root U, as an operand or an epilogue's (but A, without
 * WITH_A). */
static bool gemm_names(const Plan *plan, const PlanGemm *g, int u, bool with_a)
{
    int b[5] = { with_a ? g->a : -1, g->b, g->c, g->bias, g->aux };
    for (int k = 0; k < 5; k++)
        if (b[k] >= 0 && plan_buffer_root(plan, b[k]) == u) return true;
    return false;
}

/* Whether step S names buffer root U. */
static bool step_names(const Plan *plan, const PlanStep *s, int u)
{
    return s->kind == STEP_LAUNCH ? launch_names(plan, s, u) : gemm_names(plan, &s->gemm, u, true);
}

/* The readers of buffer U in PG's steps other than UNFOLD into W: false when one is not a
 * GEMM that reads_patches, or there are too many. */
static bool patch_readers(const Plan *plan, const PlanGraph *pg, int unfold, int u,
                          const Shape *shape, DType type, PlanWindow *w)
{
    w->nreaders = 0;
    for (int i = 0; i < pg->nsteps; i++) {
        const PlanStep *s = &pg->steps[i];
        if (i == unfold) continue;
        if (s->kind == STEP_LAUNCH) {
            if (launch_names(plan, s, u)) return false;
            continue;
        }
        const PlanGemm *g = &s->gemm;
        bool a = plan_buffer_root(plan, g->a) == u, b = plan_buffer_root(plan, g->b) == u;
        bool other = plan_buffer_root(plan, g->c) == u || (g->bias >= 0 && plan_buffer_root(plan, g->bias) == u) ||
                     (g->aux >= 0 && plan_buffer_root(plan, g->aux) == u);
        if (!a && !b && !other) continue;
        if (other || (a && b) || w->nreaders == PLAN_WINDOW_MAX_READERS ||
            !reads_rows(g, a ? 'a' : 'b', false, shape, type))
            return false;
        w->operand[w->nreaders] = a ? 'a' : 'b';
        w->reader[w->nreaders++] = i;
    }
    return w->nreaders > 0;
}

/* The one step of PG but STEP that names buffer root U, when it is a node's launch after
 * STEP; else -1 (none, several, or another kind). */
static int sole_launch_after(const Plan *plan, const PlanGraph *pg, int step, int u)
{
    int t = -1;
    for (int i = 0; i < pg->nsteps; i++) {
        const PlanStep *s = &pg->steps[i];
        if (i == step || !step_names(plan, s, u)) continue;
        if (t >= 0 || s->kind != STEP_LAUNCH || s->node < 0) return -1;
        t = i;
    }
    return t > step ? t : -1;
}

/* The step of PG that transposes the product C (a buffer root) of reader STEP into
 * [N, out, L] of TYPE, when it stores nothing else and is the only other step to name C;
 * else -1. */
static int transpose_store(const Plan *plan, const PlanGraph *pg, int step, int c, DType type)
{
    int t = sole_launch_after(plan, pg, step, c);
    if (t < 0) return -1;
    const PlanStep *s = &pg->steps[t];
    const IrNode *n = &pg->ir->nodes[s->node];
    int in = pg->node_buffer[n->in[0]], out = pg->node_buffer[s->node];
    if (n->op != IR_TRANSPOSE || n->shape.rank != 3 || !stores_only(pg, s, s->node) || in < 0 ||
        plan_buffer_root(plan, in) != c || out < 0)
        return -1;
    out = plan_buffer_root(plan, out);
    bool ok = out != c && plan->buffers[out].kind == PB_NODE && plan->buffers[out].dtype == type;
    return ok ? t : -1;
}

/* W's reader that may store NCHW (plan.h, PlanWindow): the product (operand 'a') whose
 * C only a TRANSPOSE reads. */
static void find_nchw_store(const Plan *plan, const PlanGraph *pg, PlanWindow *w)
{
    w->store_reader = w->transpose = w->store = -1;
    for (int j = 0; j < w->nreaders; j++) {
        const PlanGemm *g = &pg->steps[w->reader[j]].gemm;
        int c = plan_buffer_root(plan, g->c);
        if (w->operand[j] != 'a' || plan->buffers[c].kind != PB_NODE) continue;
        int t = transpose_store(plan, pg, w->reader[j], c, g->c_type);
        if (t < 0) continue;
        w->store_reader = j;
        w->transpose = t;
        w->store = plan_buffer_root(plan, pg->node_buffer[pg->steps[t].node]);
        return;
    }
}

/* The launch step of PG that stores buffer root U, when it is a TRANSPOSE storing
 * nothing else; else -1. */
static int transpose_into(const Plan *plan, const PlanGraph *pg, int u)
{
    for (int i = 0; i < pg->nsteps; i++) {
        const PlanStep *s = &pg->steps[i];
        if (s->kind != STEP_LAUNCH || s->node < 0) continue;
        int b = pg->node_buffer[s->node];
        if (b < 0 || plan_buffer_root(plan, b) != u) continue;
        bool ok = pg->ir->nodes[s->node].op == IR_TRANSPOSE && stores_only(pg, s, s->node);
        return ok ? i : -1;
    }
    return -1;
}

/* STEP as a reader of W that reads OPERAND ('a', 'b' or 0: no patches), the readers
 * kept ascending. */
static void add_reader(PlanWindow *w, int step, char operand)
{
    CGC_ASSERT(w->nreaders < PLAN_WINDOW_MAX_READERS);
    int j = w->nreaders++;
    for (; j > 0 && w->reader[j - 1] > step; j--) {
        w->reader[j] = w->reader[j - 1];
        w->operand[j] = w->operand[j - 1];
    }
    w->reader[j] = step;
    w->operand[j] = operand;
}

/* The product's gradient (plan.h, PlanWindow): where W's weight gradient reads it as A
 * from a TRANSPOSE of the NCHW gradient to channels last, and every other step that
 * names that transpose is a GEMM reading it as A (the data gradient, dY @ W), which
 * joins W's readers; all of them then read the NCHW gradient itself. */
static void find_grad_transpose(const Plan *plan, PlanGraphId gid, PlanWindow *w)
{
    const PlanGraph *pg = &plan->graph[gid];
    w->grad_transpose = w->grad = -1;
    int j = 0;
    while (j < w->nreaders && !(w->operand[j] == 'b' && pg->steps[w->reader[j]].gemm.trans_a)) j++;
    if (j == w->nreaders) return;
    const PlanGemm *g = &pg->steps[w->reader[j]].gemm;
    int u = plan_buffer_root(plan, g->a), t = transpose_into(plan, pg, u);
    if (t < 0 || t > w->reader[j]) return;
    const IrNode *n = &pg->ir->nodes[pg->steps[t].node];
    int grad = pg->node_buffer[n->in[0]];
    if (grad < 0 || !reads_rows(g, 'a', true, &n->shape, g->a_type)) return;
    grad = plan_buffer_root(plan, grad);
    if (grad == u || plan->buffers[grad].dtype != g->a_type) return;
    PlanWindow x = *w;      /* all the data gradients or none */
    for (int i = 0; i < pg->nsteps; i++) {
        const PlanStep *s = &pg->steps[i];
        int other;
        if (i == t || i == w->reader[j] || !step_names(plan, s, u)) continue;
        if (s->kind != STEP_GEMM || i < t || gemm_names(plan, &s->gemm, u, false) ||
            !reads_rows(&s->gemm, 'a', false, &n->shape, g->a_type) ||
            plan_window_reader(plan, gid, i, &other) >= 0 || x.nreaders == PLAN_WINDOW_MAX_READERS)
            return;
        add_reader(&x, i, 0);
    }
    for (int k = 0; k < x.nreaders; k++)
        x.reads_grad[k] = plan_buffer_root(plan, pg->steps[x.reader[k]].gemm.a) == u;
    x.grad_transpose = t;
    x.grad = grad;
    *w = x;
}

/* The FOLD step of PG that is the only other step to name buffer root U (the data
 * gradient's C, of reader STEP), folding it over W's window into an image of W's shape
 * and storing nothing else; -1 when there is none. */
static int fold_of(const Plan *plan, const PlanGraph *pg, int step, int u, const PlanWindow *w)
{
    int f = sole_launch_after(plan, pg, step, u);
    if (f < 0) return -1;
    const PlanStep *s = &pg->steps[f];
    const IrNode *n = &pg->ir->nodes[s->node];
    int in = pg->node_buffer[n->in[0]], out = pg->node_buffer[s->node];
    bool ok = n->op == IR_FOLD && (n->flags & IR_WINDOW_ROWS) && memcmp(&n->win, &w->win, sizeof w->win) == 0 &&
              ir_shape_equal(&n->shape, &w->image_shape) && stores_only(pg, s, s->node) && in >= 0 &&
              plan_buffer_root(plan, in) == u && out >= 0 && plan_buffer_root(plan, out) != u;
    return ok ? f : -1;
}

/* Whether reader J of W is a library call (plan.h, PlanWindow) of type TYPE: the product
 * storing NCHW, the weight gradient reading the NCHW gradient, or the data gradient
 * reading it whose C only a FOLD reads (into W->fold, W->fold_out). */
static bool conv_reader(const Plan *plan, const PlanGraph *pg, PlanWindow *w, int j, DType type)
{
    const PlanGemm *g = &pg->steps[w->reader[j]].gemm;
    bool types = g->a_type == type && g->b_type == type && g->c_type == type && g->epilogue == GEMM_EPI_NONE &&
                 g->batch.rank == 0;
    if (!types) return false;
    if (w->operand[j] == 'a') return j == w->store_reader && g->trans_b;
    if (w->operand[j] == 'b') return w->reads_grad[j] && g->trans_a && !g->trans_b;
    if (!w->reads_grad[j] || g->trans_b || w->fold >= 0) return false;
    int u = plan_buffer_root(plan, g->c);
    w->fold = fold_of(plan, pg, w->reader[j], u, w);
    if (w->fold < 0) return false;
    w->fold_out = plan_buffer_root(plan, pg->node_buffer[pg->steps[w->fold].node]);
    return plan->buffers[w->fold_out].dtype == type;
}

/* Whether a convolution library can run W (PlanWindow.conv); its FOLD where it has one. */
static void find_conv(const Plan *plan, const PlanGraph *pg, PlanWindow *w)
{
    DType type = plan->buffers[w->image].dtype;
    w->fold = w->fold_out = -1;
    w->conv = w->store_reader >= 0 && w->win.groups == 1 && w->image_shape.rank == 4;
    for (int j = 0; j < w->nreaders && w->conv; j++) w->conv = conv_reader(plan, pg, w, j, type);
    if (!w->conv) w->fold = w->fold_out = -1;
}

char plan_window_conv_role(const PlanWindow *w, int j)
{
    CGC_ASSERT(j >= 0 && j < w->nreaders);
    return w->operand[j] == 'a' ? 'f' : w->operand[j] == 'b' ? 'w' : 'd';
}

/* Step I of graph GID as the UNFOLD of a PlanWindow, into W; false when it is not one. */
static bool window_run(const Plan *plan, PlanGraphId gid, int i, PlanWindow *w)
{
    const PlanGraph *pg = &plan->graph[gid];
    const PlanStep *s = &pg->steps[i];
    if (s->kind != STEP_LAUNCH || s->node < 0) return false;
    const IrNode *n = &pg->ir->nodes[s->node];
    if (n->op != IR_UNFOLD || !(n->flags & IR_WINDOW_ROWS) || n->win.groups != 1 ||
        n->shape.rank != 3 || !stores_only(pg, s, s->node))
        return false;
    int image = pg->node_buffer[n->in[0]], u = pg->node_buffer[s->node];
    if (image < 0 || u < 0) return false;
    image = plan_buffer_root(plan, image);
    DType type = plan->buffers[image].dtype;
    if (type != n->dtype || plan->buffers[plan_buffer_root(plan, u)].dtype != type ||
        !patch_readers(plan, pg, i, plan_buffer_root(plan, u), &n->shape, type, w))
        return false;
    w->graph = gid;
    w->unfold = i;
    w->image = image;
    w->image_shape = pg->ir->nodes[n->in[0]].shape;
    w->win = n->win;
    find_grad_transpose(plan, gid, w);
    find_nchw_store(plan, pg, w);
    find_conv(plan, pg, w);
    return true;
}

/* The spec of reader J's kernel of tile TILE in run R, whose UNFOLD node N reads an
 * image of shape IMAGE: the operand that is the patches gathered from it, the product's
 * gradient read NCHW, C stored NCHW, as R has them. */
static GemmSpec window_spec(const PlanWindow *r, int j, const PlanGemm *g, int tile, const IrNode *n,
                            const Shape *image)
{
    GemmSpec s = spec_of(g, tile);
    const IrWindow *w = &n->win;
    int64_t h = image->dim[2], wd = image->dim[3], oh = ir_window_extent(h, w, 0), ow = ir_window_extent(wd, w, 1);
    s.gather = r->operand[j];
    if (s.gather) {
        int64_t f[WIN_FIELDS] = { image->dim[1], h, wd, oh, ow, w->kernel[0], w->kernel[1], w->stride[0],
                                  w->stride[1], w->pad[0], w->pad[1], w->dilation[0], w->dilation[1] };
        memcpy(s.win, f, sizeof f);
    }
    s.a_nchw = r->reads_grad[j];
    s.c_nchw = j == r->store_reader;
    s.spots = s.a_nchw || s.c_nchw ? oh * ow : 0;
    return s;
}

/* Whether pointwise group K of PG can run at the elements of the NCHW product U, held
 * in registers: every input of its members rooted at U has the group's work shape (read
 * at the element computed), and no member writes a tensor in place (an ASSIGN, which
 * steps before the group's own may read) or gathers a window (an UNFOLD, which reads
 * other elements). */
static bool epilogue_group(const Plan *plan, const PlanGraph *pg, int k, int u)
{
    const IrGraph *g = pg->ir;
    const IrGroup *gr = &g->groups[k - 1];
    if (gr->kind != IR_GROUP_POINTWISE || gr->multi != 0) return false;
    for (int id = 0; id < g->nnodes; id++) {
        const IrNode *n = &g->nodes[id];
        if (n->group != k) continue;
        if (ir_node_is_assign(n) || ir_node_fuse(n) == IR_FUSE_WINDOW) return false;
        for (int j = 0; j < n->nin; j++) {
            int b = pg->node_buffer[n->in[j]];
            if (g->nodes[n->in[j]].group != k && b >= 0 && plan_buffer_root(plan, b) == u &&
                !ir_shape_equal(&g->nodes[n->in[j]].shape, &gr->work))
                return false;
        }
    }
    return true;
}

/* W's epilogue (plan.h, PlanWindow): the step after the TRANSPOSE that is the only
 * other to name the NCHW product, when it runs one pointwise group that epilogue_group
 * allows and no step between the product and it (but the TRANSPOSE) names a buffer it
 * names, so that it may run at the product's step; else -1. */
static int find_epilogue(const Plan *plan, const PlanGraph *pg, const PlanWindow *w)
{
    if (w->store_reader < 0) return -1;
    int e = sole_launch_after(plan, pg, w->transpose, w->store);
    if (e < 0 || pg->steps[e].group == 0 || !epilogue_group(plan, pg, pg->steps[e].group, w->store)) return -1;
    const PlanLaunch *l = &pg->steps[e].launch;
    for (int i = w->reader[w->store_reader] + 1; i < e; i++)
        for (int a = 0; i != w->transpose && a < l->nargs; a++) {
            int u = l->arg[a].kind == ARG_BUFFER ? plan_buffer_root(plan, l->arg[a].index) : -1;
            if (u >= 0 && u != w->store && step_names(plan, &pg->steps[i], u)) return -1;
        }
    return e;
}

/* W's epilogue group rendered for its kernels by CTX (its graph's), with its arguments
 * put in W; NULL, and W's epilogue off, when there is none or it would take too many
 * parameters. */
static KernelDraft *epilogue_draft(const Plan *plan, const RenderCtx *ctx, PlanWindow *w)
{
    int e = w->epilogue;
    if (e < 0) return NULL;
    KernelDraft *d = xcalloc(1, sizeof *d);
    fused_render_epilogue(ctx, plan->graph[w->graph].steps[e].group, w->store, "product", d);
    if (d->nparams > PLAN_MAX_PARAMS - 8) {     /* after the GEMM ABI's eight */
        draft_free(d);
        free(d);
        w->epilogue = -1;
        return NULL;
    }
    draft_root_args(plan, d);
    w->epi_nargs = d->nparams;
    w->epi_arg = xmalloc((size_t)(d->nparams ? d->nparams : 1) * sizeof *w->epi_arg);
    for (int i = 0; i < d->nparams; i++) w->epi_arg[i] = d->param[i].arg;
    return d;
}

/* The training graph's implicit run that W, of the evaluation graph, follows (plan.h,
 * PlanWindow.follows): the same convolution (its UNFOLD at the same .net line, the same
 * window over an image of the same shape), W only storing the product NCHW, as that run
 * does; else -1. */
static int twin_run(const Plan *plan, const PlanWindow *w)
{
    if (w->graph != PG_EVAL || w->nreaders != 1 || w->store_reader != 0) return -1;
    int line = plan->graph[w->graph].steps[w->unfold].loc.line;
    for (int r = 0; r < plan->nwindows; r++) {
        const PlanWindow *x = &plan->windows[r];
        if (x->graph == PG_TRAIN && x->implicit && x->store_reader >= 0 &&
            plan->graph[PG_TRAIN].steps[x->unfold].loc.line == line &&
            memcmp(&x->win, &w->win, sizeof w->win) == 0 && ir_shape_equal(&x->image_shape, &w->image_shape))
            return r;
    }
    return -1;
}

/* Whether reader J of W has a generated kernel of tile shape T: a training graph's where
 * its GEMM has a plain one (plan_add_gemm_kernels), a follower's where its twin's
 * product does. */
static bool reader_tile(const Plan *plan, const PlanWindow *w, int j, int t)
{
    const PlanGemm *g = &plan->graph[w->graph].steps[w->reader[j]].gemm;
    if (w->follows < 0) return g->tile_kernel[t] >= 0;
    const PlanWindow *x = &plan->windows[w->follows];
    return plan_gemm_generable(g) && x->kernel[x->store_reader][t] >= 0;
}

/* Whether every reader of W has a generated kernel of some tile shape. */
static bool readers_generable(const Plan *plan, const PlanWindow *w)
{
    for (int j = 0; j < w->nreaders; j++) {
        bool any = false;
        for (int t = 0; t < PLAN_GEMM_TILES; t++) any |= reader_tile(plan, w, j, t);
        if (!any) return false;
    }
    return true;
}

void plan_add_window_kernels(Plan *plan)
{
    KernelSet set = { 0 };
    KernelDraft **epi = NULL;       /* the epilogues' drafts, until their kernels are made */
    int nepi = 0;
    for (int gid = 0; gid < PG_NUM; gid++) {
        const PlanGraph *pg = &plan->graph[gid];
        RenderCtx ctx = { .p = plan->p, .g = pg->ir, .node_buffer = pg->node_buffer, .plan = plan };
        for (int i = 0; pg->ir && i < pg->nsteps; i++) {
            PlanWindow w;
            memset(&w, 0, sizeof w);
            if (!window_run(plan, (PlanGraphId)gid, i, &w)) continue;
            w.follows = twin_run(plan, &w);
            w.implicit = (gid <= PG_TRAIN_MICRO || w.follows >= 0) && readers_generable(plan, &w);
            if (!w.implicit) w.follows = -1;
            if (!w.implicit && !w.conv) continue;
            w.epilogue = w.implicit ? find_epilogue(plan, pg, &w) : -1;
            if (w.epilogue >= 0 && !ctx.span) {
                ctx.span = ir_group_spans(pg->ir);
                ctx.scratch = render_scratch_new(pg->ir->nnodes);
            }
            KernelDraft *draft = epilogue_draft(plan, &ctx, &w);
            if (draft) {
                epi = xrealloc(epi, (size_t)(nepi + 1) * sizeof *epi);
                epi[nepi++] = draft;
            }
            const IrNode *n = &pg->ir->nodes[pg->steps[i].node];
            const Shape *image = &pg->ir->nodes[n->in[0]].shape;
            for (int j = 0; j < w.nreaders; j++) {
                const PlanStep *st = &pg->steps[w.reader[j]];
                for (int t = 0; t < PLAN_GEMM_TILES; t++) {
                    w.kernel[j][t] = -1;
                    if (!w.implicit || !reader_tile(plan, &w, j, t)) continue;
                    GemmSpec s = window_spec(&w, j, &st->gemm, t, n, image);
                    if (j == w.store_reader) s.epi = draft;
                    w.kernel[j][t] = kernel_of(&set, plan, &s, st, (PlanGraphId)gid);
                }
            }
            plan->windows = xrealloc(plan->windows, (size_t)(plan->nwindows + 1) * sizeof *plan->windows);
            plan->windows[plan->nwindows++] = w;
        }
        free((IrSpan *)ctx.span);
        render_scratch_free(ctx.scratch);
    }
    add_kernels(plan, &set);
    for (int k = 0; k < nepi; k++) {
        draft_free(epi[k]);
        free(epi[k]);
    }
    free(epi);
}

int plan_window_at(const Plan *plan, PlanGraphId gid, int i)
{
    for (int r = 0; r < plan->nwindows; r++)
        if (plan->windows[r].graph == gid && plan->windows[r].unfold == i) return r;
    return -1;
}

int plan_window_skips(const Plan *plan, PlanGraphId gid, int i)
{
    for (int r = 0; r < plan->nwindows; r++)
        if (plan->windows[r].graph == gid && (plan->windows[r].unfold == i || plan->windows[r].transpose == i ||
                                               plan->windows[r].grad_transpose == i ||
                                               plan->windows[r].epilogue == i))
            return r;
    return -1;
}

bool plan_window_conv_skips(const Plan *plan, int r, int i)
{
    const PlanWindow *w = &plan->windows[r];
    return w->conv && (i == w->unfold || i == w->transpose || i == w->grad_transpose || i == w->fold);
}

int plan_window_reader(const Plan *plan, PlanGraphId gid, int i, int *j)
{
    for (int r = 0; r < plan->nwindows; r++)
        for (*j = 0; plan->windows[r].graph == gid && *j < plan->windows[r].nreaders; (*j)++)
            if (plan->windows[r].reader[*j] == i) return r;
    *j = -1;
    return -1;
}
