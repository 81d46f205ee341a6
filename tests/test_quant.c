/* Tests of MLX affine quantization: bit packing against hand-built words,
 * the quantizer's error bound and MLX's scale/bias rules, quantized products
 * against dequantize-then-multiply (reference and SIMD), the config.json
 * block and the checkpoint loader. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "choir/quant.h"
#include "choir/safetensors.h"
#include "testutil.h"

static const int k_bits[] = {2, 3, 4, 5, 6, 8};
static const int k_groups[] = {32, 64, 128};

/* Independent packer: MLX's layout viewed as little-endian bytes, bit p of
 * the stream is bit p % 8 of byte p / 8. */
static void pack_bytewise(const uint8_t *codes, int64_t n, int bits, uint32_t *words) {
    int64_t nbytes = (n * bits + 31) / 32 * 4;
    uint8_t *bytes = calloc((size_t)nbytes, 1);
    for (int64_t c = 0; c < n; c++)
        for (int k = 0; k < bits; k++)
            if (codes[c] >> k & 1) {
                int64_t p = c * bits + k;
                bytes[p / 8] |= (uint8_t)(1u << (p % 8));
            }
    for (int64_t i = 0; i < nbytes / 4; i++)
        words[i] = (uint32_t)bytes[4 * i] | (uint32_t)bytes[4 * i + 1] << 8 |
                   (uint32_t)bytes[4 * i + 2] << 16 | (uint32_t)bytes[4 * i + 3] << 24;
    free(bytes);
}

static void test_pack_hand_built(void **state) {
    (void)state;
    uint32_t w[8];
    /* 4-bit: the first element sits in the 4 least significant bits. */
    uint8_t c4[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    choir_quant_pack(c4, 8, 4, w);
    assert_int_equal(w[0], 0x76543210u);
    /* 8-bit: bytes in order. */
    uint8_t c8[4] = {0x01, 0x02, 0x03, 0xfe};
    choir_quant_pack(c8, 4, 8, w);
    assert_int_equal(w[0], 0xfe030201u);
    /* 2-bit: code j at bits 2j..2j+1. */
    uint8_t c2[16] = {1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3};
    choir_quant_pack(c2, 16, 2, w);
    assert_int_equal(w[0], 0xC0000039u);
    /* 3-bit: codes 0..7 fill 24 bits; code 10 straddles words 0 and 1. */
    uint8_t c3[32] = {0, 1, 2, 3, 4, 5, 6, 7};
    choir_quant_pack(c3, 8, 3, w);
    assert_int_equal(w[0], 0x00FAC688u);
    memset(c3, 0, sizeof c3);
    c3[10] = 7;
    choir_quant_pack(c3, 32, 3, w);
    assert_int_equal(w[0], 0xC0000000u);
    assert_int_equal(w[1], 0x00000001u);
    assert_int_equal(w[2], 0u);
    /* 5-bit: code 6 occupies bits 30..34. */
    uint8_t c5[32] = {0};
    c5[6] = 21;
    c5[31] = 31;
    choir_quant_pack(c5, 32, 5, w);
    assert_int_equal(w[0], 0x40000000u);
    assert_int_equal(w[1], 5u);
    assert_int_equal(w[4], 0xF8000000u);
    /* 6-bit: code 5 occupies bits 30..35. */
    uint8_t c6[16] = {0};
    c6[5] = 63;
    c6[0] = 1;
    choir_quant_pack(c6, 16, 6, w);
    assert_int_equal(w[0], 0xC0000001u);
    assert_int_equal(w[1], 0xFu);
    assert_int_equal(w[2], 0u);
}

static void test_pack_matches_bytewise(void **state) {
    (void)state;
    enum { N = 4 * 128 };
    uint8_t codes[N], back[N];
    uint32_t a[N / 4 * 8 / 32 * 4 + 8], b[N / 4 * 8 / 32 * 4 + 8];
    uint64_t x = 0x12345;
    for (size_t bi = 0; bi < sizeof k_bits / sizeof *k_bits; bi++) {
        int bits = k_bits[bi];
        for (int i = 0; i < N; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            codes[i] = (uint8_t)((x >> 33) & ((1u << bits) - 1));
        }
        choir_quant_pack(codes, N, bits, a);
        pack_bytewise(codes, N, bits, b);
        assert_int_equal(choir_quant_packed_cols(N, bits), N * bits / 32);
        assert_memory_equal(a, b, (size_t)(N * bits / 32) * 4);
        choir_quant_unpack(a, N, bits, back);
        assert_memory_equal(codes, back, N);
    }
}

/* MLX's rules on a hand-computed group: the larger-magnitude edge becomes
 * the bias and the scale is snapped so that 0.0 decodes exactly. */
static void test_quantize_mlx_rules(void **state) {
    (void)state;
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = -1.0f + 1.5f * (float)i / 31.0f;
    x[5] = 0.0f;
    uint32_t packed[4];
    float s, b;
    assert_int_equal(choir_quantize(x, 1, 32, 4, 32, CHOIR_DTYPE_F32, packed, &s, &b, NULL), 0);
    assert_true(s == -1.0f / -10.0f);
    assert_true(b == -1.0f);
    uint8_t codes[32];
    choir_quant_unpack(packed, 32, 4, codes);
    assert_int_equal(codes[0], 0);
    assert_int_equal(codes[5], 10);
    assert_int_equal(codes[31], 15);
    /* Max-dominated group: negative scale, bias = max. */
    for (int i = 0; i < 32; i++) x[i] = -0.5f + 1.5f * (float)i / 31.0f;
    assert_int_equal(choir_quantize(x, 1, 32, 4, 32, CHOIR_DTYPE_F32, packed, &s, &b, NULL), 0);
    assert_true(s < 0.0f);
    assert_true(b == 1.0f);
    choir_quant_unpack(packed, 32, 4, codes);
    assert_int_equal(codes[31], 0);
    assert_int_equal(codes[0], 15);
}

/* A nearly symmetric group: MLX snaps the scale to -1/-8 = 0.125, which
 * makes 0.99 need code 16 (clamped to 15, 0.115 off); choir keeps the
 * min/max scale there, choir_quantize_mlx reproduces MLX. */
static void test_quantize_snap_guard(void **state) {
    (void)state;
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = -1.0f + 1.99f * (float)i / 31.0f;
    uint32_t packed[4];
    float s, b;
    uint8_t codes[32];
    assert_int_equal(choir_quantize_mlx(x, 1, 32, 4, 32, CHOIR_DTYPE_F32, packed, &s, &b, NULL), 0);
    assert_true(s == 0.125f);
    assert_true(b == -1.0f);
    choir_quant_unpack(packed, 32, 4, codes);
    assert_int_equal(codes[31], 15);
    assert_true(fabsf(s * 15.0f + b - x[31]) > 0.5f * s);
    assert_int_equal(choir_quantize(x, 1, 32, 4, 32, CHOIR_DTYPE_F32, packed, &s, &b, NULL), 0);
    assert_true(s == (x[31] - x[0]) / 15.0f);
    assert_true(b == -1.0f);
    choir_quant_unpack(packed, 32, 4, codes);
    for (int i = 0; i < 32; i++) assert_true(fabsf(s * (float)codes[i] + b - x[i]) <= 0.5f * s + 1e-6f);
}

static void test_quantize_error_bound(void **state) {
    (void)state;
    const int64_t rows = 7, cols = 256;
    float *w = choir_alloc(CHOIR_MEM_OTHER, sizeof(float) * rows * cols);
    float *d = choir_alloc(CHOIR_MEM_OTHER, sizeof(float) * rows * cols);
    uint32_t *packed = choir_alloc(CHOIR_MEM_OTHER, sizeof(uint32_t) * rows * cols);
    float *sc = choir_alloc(CHOIR_MEM_OTHER, sizeof(float) * rows * cols);
    float *bi = choir_alloc(CHOIR_MEM_OTHER, sizeof(float) * rows * cols);
    tu_fill_uniform(w, (size_t)(rows * cols), 11, -1.0f, 1.0f);
    for (int64_t c = 0; c < cols; c++) w[2 * cols + c] = 0.25f; /* a constant row */
    for (int64_t c = 0; c < cols; c++) w[3 * cols + c] = (float)c * 1e-3f - 0.05f;
    for (size_t bi_ = 0; bi_ < 6; bi_++)
        for (size_t gi = 0; gi < 3; gi++) {
            int bits = k_bits[bi_], G = k_groups[gi];
            assert_int_equal(
                choir_quantize(w, rows, cols, bits, G, CHOIR_DTYPE_F32, packed, sc, bi, NULL), 0);
            choir_weight W = {.kind = CHOIR_WEIGHT_QUANT, .rows = rows, .cols = cols,
                              .data = packed, .scales = sc, .biases = bi,
                              .sb_dtype = CHOIR_DTYPE_F32, .bits = bits, .group_size = G};
            choir_quant_dequant(&W, d);
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < cols; c++) {
                    float step = fabsf(sc[r * (cols / G) + c / G]);
                    float e = fabsf(d[r * cols + c] - w[r * cols + c]);
                    /* half a step, plus f32 rounding of the affine map */
                    float tol = 0.5f * step + 4e-7f * (1.0f + fabsf(w[r * cols + c]));
                    if (e > tol)
                        fail_msg("bits %d group %d [%lld,%lld]: error %g > half step %g", bits, G,
                                 (long long)r, (long long)c, (double)e, (double)step / 2);
                }
        }
    choir_free(w);
    choir_free(d);
    choir_free(packed);
    choir_free(sc);
    choir_free(bi);
}

static void test_quantize_rejects(void **state) {
    (void)state;
    float w[64] = {0}, s[4], b[4];
    uint32_t p[64];
    choir_err err;
    assert_int_equal(choir_quantize(w, 1, 64, 7, 32, CHOIR_DTYPE_F32, p, s, b, &err),
                     CHOIR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "7 bits"));
    assert_int_equal(choir_quantize(w, 1, 64, 4, 16, CHOIR_DTYPE_F32, p, s, b, &err),
                     CHOIR_EUNSUPPORTED);
    assert_int_equal(choir_quantize(w, 1, 48, 4, 32, CHOIR_DTYPE_F32, p, s, b, &err),
                     CHOIR_ESHAPE);
    assert_int_equal(choir_quantize(w, 1, 64, 4, 32, CHOIR_DTYPE_I32, p, s, b, &err),
                     CHOIR_EINVAL);
    assert_false(choir_quant_supported(1, 64));
    assert_true(choir_quant_supported(5, 128));
}

/* A quantized weight with scales/biases in sb_dtype; buffers owned by q. */
typedef struct qmat {
    choir_weight W;
    uint32_t *packed;
    void *sc, *bi;
} qmat;

static void qmat_make(qmat *q, int64_t rows, int64_t cols, int bits, int G, choir_dtype dt,
                      uint64_t seed) {
    float *w = choir_alloc(CHOIR_MEM_OTHER, sizeof(float) * rows * cols);
    tu_fill_uniform(w, (size_t)(rows * cols), seed, -0.2f, 0.3f);
    q->packed = choir_alloc(CHOIR_MEM_OTHER, sizeof(uint32_t) * rows * cols * bits / 32);
    q->sc = choir_alloc(CHOIR_MEM_OTHER, sizeof(float) * rows * cols / G);
    q->bi = choir_alloc(CHOIR_MEM_OTHER, sizeof(float) * rows * cols / G);
    assert_int_equal(choir_quantize(w, rows, cols, bits, G, dt, q->packed, q->sc, q->bi, NULL), 0);
    q->W = (choir_weight){.kind = CHOIR_WEIGHT_QUANT, .rows = rows, .cols = cols,
                          .data = q->packed, .scales = q->sc, .biases = q->bi, .sb_dtype = dt,
                          .bits = bits, .group_size = G};
    choir_free(w);
}

static void qmat_free(qmat *q) {
    choir_free(q->packed);
    choir_free(q->sc);
    choir_free(q->bi);
}

static void check_products(choir_isa isa) {
    if (choir_kernels_set_isa(isa) != isa) {
        choir_kernels_set_isa(choir_kernels_best_isa());
        return; /* this CPU lacks the ISA */
    }
    const choir_dtype dts[] = {CHOIR_DTYPE_F32, CHOIR_DTYPE_F16, CHOIR_DTYPE_BF16};
    const int64_t Ms[] = {1, 6, 37}; /* 37: two input blocks, a 4-row tile and a tail */
    enum { MMAX = 37 };
    const int64_t rows = 37, cols = 384;
    float *x = choir_alloc(CHOIR_MEM_OTHER, sizeof(float) * MMAX * cols);
    float *deq = choir_alloc(CHOIR_MEM_OTHER, sizeof(float) * rows * cols);
    float *row = choir_alloc(CHOIR_MEM_OTHER, sizeof(float) * cols);
    float *y = choir_alloc(CHOIR_MEM_OTHER, sizeof(float) * MMAX * rows);
    float *ref = choir_alloc(CHOIR_MEM_OTHER, sizeof(float) * MMAX * rows);
    float bias[37];
    tu_fill_uniform(x, (size_t)(MMAX * cols), 5, -1.0f, 1.0f);
    tu_fill_uniform(bias, 37, 6, -1.0f, 1.0f);
    for (int bi = 0; bi < 6; bi++)
        for (int gi = 0; gi < 3; gi++) {
            qmat q;
            int bits = k_bits[bi], G = k_groups[gi];
            qmat_make(&q, rows, cols, bits, G, dts[(bi + gi) % 3], (uint64_t)(bi * 3 + gi));
            /* the reference dequantization, element by element */
            choir_isa was = choir_kernels_isa();
            choir_kernels_set_isa(CHOIR_ISA_REF);
            choir_quant_dequant(&q.W, deq);
            choir_kernels_set_isa(was);
            for (int64_t r = 0; r < rows; r++) {
                choir_quant_dequant_row(&q.W, r, row);
                assert_memory_equal(row, deq + r * cols, sizeof(float) * cols);
            }
            for (int mi = 0; mi < 3; mi++) {
                int64_t M = Ms[mi];
                const float *b = (mi == 1) ? NULL : bias;
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = 0; n < rows; n++) {
                        double acc = b ? b[n] : 0.0;
                        for (int64_t k = 0; k < cols; k++)
                            acc += (double)x[m * cols + k] * deq[n * cols + k];
                        ref[m * rows + n] = (float)acc;
                    }
                choir_qlinear(x, M, &q.W, b, y);
                double e = tu_rel_l2(y, ref, (size_t)(M * rows));
                if (e > 1e-5)
                    fail_msg("isa %s bits %d group %d M %lld: rel-L2 %g", choir_isa_name(isa),
                             bits, G, (long long)M, e);
            }
            qmat_free(&q);
        }
    choir_free(x);
    choir_free(deq);
    choir_free(row);
    choir_free(y);
    choir_free(ref);
    choir_kernels_set_isa(choir_kernels_best_isa());
}

static void test_products_ref(void **state) {
    (void)state;
    check_products(CHOIR_ISA_REF);
}

static void test_products_simd(void **state) {
    (void)state;
    check_products(choir_kernels_best_isa());
    /* On an AVX-512 CPU the AVX2 kernels are still what AVX2-only CPUs run. */
    if (choir_kernels_best_isa() != CHOIR_ISA_AVX2) check_products(CHOIR_ISA_AVX2);
}

/* A row's result must not depend on the batch it came in (the engine batches
 * requests): every row of an M = 37 product equals the M = 1 product of that
 * row, bit for bit, for every width and the selected ISA. */
static void test_batch_invariance(void **state) {
    (void)state;
    enum { M = 37, ROWS = 29, COLS = 256 };
    float *x = choir_alloc(CHOIR_MEM_OTHER, sizeof(float) * M * COLS);
    float *y = choir_alloc(CHOIR_MEM_OTHER, sizeof(float) * M * ROWS);
    float y1[ROWS], bias[ROWS];
    tu_fill_uniform(x, M * COLS, 21, -1.0f, 1.0f);
    tu_fill_uniform(bias, ROWS, 22, -1.0f, 1.0f);
    for (int bi = 0; bi < 6; bi++)
        for (int gi = 0; gi < 3; gi++) {
            qmat q;
            qmat_make(&q, ROWS, COLS, k_bits[bi], k_groups[gi], CHOIR_DTYPE_BF16, 77);
            choir_qlinear(x, M, &q.W, bias, y);
            for (int m = 0; m < M; m++) {
                choir_qlinear(x + m * COLS, 1, &q.W, bias, y1);
                if (memcmp(y1, y + m * ROWS, sizeof y1) != 0)
                    fail_msg("bits %d group %d: row %d differs between M=%d and M=1", k_bits[bi],
                             k_groups[gi], m, M);
            }
            qmat_free(&q);
        }
    choir_free(x);
    choir_free(y);
}

static void test_config(void **state) {
    (void)state;
    const char *text =
        "{\"model_type\":\"whisper\",\"quantization\":{\"group_size\":32,\"bits\":3,"
        "\"mode\":\"affine\",\"decoder.blocks.0.mlp1\":{\"group_size\":64,\"bits\":6},"
        "\"decoder.token_embedding\":false}}";
    cJSON *root = cJSON_Parse(text);
    choir_err err;
    choir_quant_config *qc = choir_quant_config_from_json(root, &err);
    assert_non_null(qc);
    int bits = 0, g = 0;
    assert_int_equal(choir_quant_config_global(qc, &bits, &g), 1);
    assert_int_equal(bits, 3);
    assert_int_equal(g, 32);
    assert_int_equal(choir_quant_config_layer(qc, "decoder.blocks.0.mlp1", &bits, &g), 1);
    assert_int_equal(bits, 6);
    assert_int_equal(g, 64);
    assert_int_equal(choir_quant_config_layer(qc, "decoder.blocks.1.mlp1", &bits, &g), 1);
    assert_int_equal(bits, 3);
    assert_int_equal(choir_quant_config_layer(qc, "decoder.token_embedding", &bits, &g), 0);
    choir_quant_config_free(qc);
    cJSON_Delete(root);

    /* only the duplicate key; group size defaults to 64 */
    root = cJSON_Parse("{\"quantization_config\":{\"bits\":8}}");
    qc = choir_quant_config_from_json(root, &err);
    assert_int_equal(choir_quant_config_global(qc, &bits, &g), 1);
    assert_int_equal(bits, 8);
    assert_int_equal(g, 64);
    choir_quant_config_free(qc);
    cJSON_Delete(root);

    root = cJSON_Parse("{\"hidden\":3}");
    qc = choir_quant_config_from_json(root, &err);
    assert_int_equal(choir_quant_config_global(qc, &bits, &g), 0);
    assert_int_equal(choir_quant_config_layer(qc, "x", &bits, &g), 0);
    choir_quant_config_free(qc);
    cJSON_Delete(root);

    root = cJSON_Parse("{\"quantization\":{\"bits\":4,\"group_size\":32,\"mode\":\"mxfp4\"}}");
    assert_null(choir_quant_config_from_json(root, &err));
    assert_int_equal(err.code, CHOIR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "mxfp4"));
    cJSON_Delete(root);
    root = cJSON_Parse("{\"quantization\":{\"bits\":4,\"group_size\":64,\"a.b\":{\"bits\":7}}}");
    assert_null(choir_quant_config_from_json(root, &err));
    assert_non_null(strstr(err.msg, "a.b"));
    cJSON_Delete(root);
    choir_quant_config_free(NULL);
}

static void test_weight_from_st(void **state) {
    (void)state;
    qmat q;
    qmat_make(&q, 8, 128, 5, 32, CHOIR_DTYPE_BF16, 9);
    float plain[4 * 64];
    tu_fill_uniform(plain, 256, 3, -1, 1);
    choir_err err;
    choir_st_writer *wr = choir_st_writer_create(&err);
    assert_non_null(wr);
    int64_t sw[2] = {8, 128 * 5 / 32}, ss[2] = {8, 4}, sp[2] = {4, 64}, sbad[2] = {8, 3};
    assert_int_equal(choir_st_writer_add(wr, "l.q.weight", CHOIR_DTYPE_U32, 2, sw, q.packed, &err), 0);
    assert_int_equal(choir_st_writer_add(wr, "l.q.scales", CHOIR_DTYPE_BF16, 2, ss, q.sc, &err), 0);
    assert_int_equal(choir_st_writer_add(wr, "l.q.biases", CHOIR_DTYPE_BF16, 2, ss, q.bi, &err), 0);
    assert_int_equal(choir_st_writer_add(wr, "l.bad.weight", CHOIR_DTYPE_U32, 2, sw, q.packed, &err), 0);
    assert_int_equal(choir_st_writer_add(wr, "l.bad.scales", CHOIR_DTYPE_BF16, 2, sbad, q.sc, &err), 0);
    assert_int_equal(choir_st_writer_add(wr, "l.bad.biases", CHOIR_DTYPE_BF16, 2, sbad, q.bi, &err), 0);
    assert_int_equal(choir_st_writer_add(wr, "l.p.weight", CHOIR_DTYPE_F32, 2, sp, plain, &err), 0);
    const char *path = tu_tmpfile("q.safetensors");
    assert_int_equal(choir_st_writer_save(wr, path, &err), 0);
    choir_st_writer_free(wr);

    choir_st *st = choir_st_open(path, &err);
    assert_non_null(st);
    cJSON *root = cJSON_Parse("{\"quantization\":{\"bits\":4,\"group_size\":64,"
                              "\"l.q\":{\"bits\":5,\"group_size\":32}}}");
    choir_quant_config *qc = choir_quant_config_from_json(root, &err);
    choir_weight W;
    assert_int_equal(choir_weight_from_st(st, "l.q", qc, &W, &err), 0);
    assert_int_equal(W.kind, CHOIR_WEIGHT_QUANT);
    assert_int_equal(W.bits, 5);
    assert_int_equal(W.group_size, 32);
    assert_int_equal(choir_weight_expect(&W, 8, 128, "l.q", &err), 0);
    float a[128], b[128];
    for (int r = 0; r < 8; r++) {
        choir_quant_dequant_row(&W, r, a);
        choir_quant_dequant_row(&q.W, r, b);
        assert_memory_equal(a, b, sizeof a);
    }
    assert_int_equal(choir_weight_from_st(st, "l.p", qc, &W, &err), 0);
    assert_int_equal(W.kind, CHOIR_WEIGHT_F32);
    assert_int_equal(choir_weight_expect(&W, 4, 64, "l.p", &err), 0);
    assert_int_equal(choir_weight_expect(&W, 4, 65, "l.p", &err), CHOIR_ESHAPE);
    assert_int_equal(choir_weight_from_st(st, "l.bad", qc, &W, &err), CHOIR_ESHAPE);
    assert_non_null(strstr(err.msg, "l.bad"));
    assert_int_equal(choir_weight_from_st(st, "l.none", qc, &W, &err), CHOIR_ENOTFOUND);
    /* the global 4-bit/64 parameters do not fit the 5-bit tensors */
    choir_quant_config_free(qc);
    cJSON_Delete(root);
    root = cJSON_Parse("{\"quantization\":{\"bits\":4,\"group_size\":64}}");
    qc = choir_quant_config_from_json(root, &err);
    assert_int_equal(choir_weight_from_st(st, "l.q", qc, &W, &err), CHOIR_ESHAPE);
    choir_quant_config_free(qc);
    cJSON_Delete(root);
    choir_st_close(st);
    qmat_free(&q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_hand_built),    cmocka_unit_test(test_pack_matches_bytewise),
        cmocka_unit_test(test_quantize_mlx_rules), cmocka_unit_test(test_quantize_snap_guard),
        cmocka_unit_test(test_quantize_error_bound),
        cmocka_unit_test(test_quantize_rejects),   cmocka_unit_test(test_products_ref),
        cmocka_unit_test(test_products_simd),      cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_weight_from_st),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
