/* `choir bench sam-audio`: SAM-Audio speed and memory at the published sizes
 * (small 1536/12, base 2048/16, large 2816/22; full DAC-VAE codec; t5-base
 * widths) with deterministic random weights written by the randw generator
 * into a scratch directory and loaded by the real loader.
 *
 * It separates `--seconds` of noise with the requested ODE (default midpoint,
 * 16 steps) and prints the wall time of each stage: text, codec encode, one
 * network evaluation (median of the ODE's), the ODE, both decodes; the
 * real-time factor (wall / audio seconds); and the counted peak of working
 * memory beyond the weights, with the estimate the engine admits by. With
 * --nfe N only N evaluations run and the ODE's time is projected from their
 * median (said so in the output), for CPU runs at large sizes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "choir/alloc.h"
#include "choir/pool.h"
#include "choir/randw.h"
#include "choir/sam_audio.h"
#include "cli/dev/dev.h"
#include "cli/opt.h"

typedef struct mbuf {
    FILE *f;
    int first;
} mbuf;

static void t(mbuf *m, const char *name, double off, double scale, int nd, long long a, long long b, long long c) {
    fprintf(m->f, "%s{\"name\":\"%s\",\"shape\":[%lld", m->first ? "" : ",\n", name, a);
    if (nd > 1) fprintf(m->f, ",%lld", b);
    if (nd > 2) fprintf(m->f, ",%lld", c);
    fprintf(m->f, "],\"offset\":%g,\"scale\":%g}", off, scale);
    m->first = 0;
}

/* A weight-normed conv [out, in, k] (transposed: [in, out, k]). */
static void wn(mbuf *m, const char *p, long long a, long long b, long long k, int bias_n) {
    char n[300];
    snprintf(n, sizeof n, "%s.weight_g", p);
    t(m, n, 1, 0.1, 3, a, 1, 1);
    snprintf(n, sizeof n, "%s.weight_v", p);
    t(m, n, 0, 1.0 / sqrt((double)b * k), 3, a, b, k);
    snprintf(n, sizeof n, "%s.bias", p);
    t(m, n, 0, 0.02, 1, bias_n, 0, 0);
}

static void plain_conv(mbuf *m, const char *p, long long a, long long b, long long k, long long bias_n) {
    char n[300];
    snprintf(n, sizeof n, "%s.weight", p);
    t(m, n, 0, 1.0 / sqrt((double)b * k), 3, a, b, k);
    snprintf(n, sizeof n, "%s.bias", p);
    t(m, n, 0, 0.02, 1, bias_n, 0, 0);
}

static void alpha(mbuf *m, const char *p, long long C) {
    char n[300];
    snprintf(n, sizeof n, "%s.alpha", p);
    t(m, n, 1, 0.3, 3, 1, C, 1);
}

static void ru(mbuf *m, const char *p, long long d, int elu) {
    char n[300];
    if (!elu) {
        snprintf(n, sizeof n, "%s.block.0", p), alpha(m, n, d);
        snprintf(n, sizeof n, "%s.block.2", p), alpha(m, n, d);
        snprintf(n, sizeof n, "%s.block.1", p), wn(m, n, d, d, 7, d);
        snprintf(n, sizeof n, "%s.block.3", p), wn(m, n, d, d, 1, d);
    } else {
        snprintf(n, sizeof n, "%s.block.1", p), plain_conv(m, n, d / 2, d, 3, d / 2);
        snprintf(n, sizeof n, "%s.block.3", p), plain_conv(m, n, d, d / 2, 1, d);
    }
}

static void lstm(mbuf *m, const char *p) {
    char n[300];
    for (int l = 0; l < 2; l++) {
        snprintf(n, sizeof n, "%s.lstm.weight_ih_l%d", p, l), t(m, n, 0, 0.04, 2, 2048, 512, 0);
        snprintf(n, sizeof n, "%s.lstm.weight_hh_l%d", p, l), t(m, n, 0, 0.04, 2, 2048, 512, 0);
        snprintf(n, sizeof n, "%s.lstm.bias_ih_l%d", p, l), t(m, n, 0, 0.02, 1, 2048, 0, 0);
        snprintf(n, sizeof n, "%s.lstm.bias_hh_l%d", p, l), t(m, n, 0, 0.02, 1, 2048, 0, 0);
    }
}

static void lin(mbuf *m, const char *p, long long out, long long in, int bias) {
    char n[300];
    snprintf(n, sizeof n, "%s.weight", p);
    t(m, n, 0, 1.0 / sqrt((double)in), 2, out, in, 0);
    if (bias) {
        snprintf(n, sizeof n, "%s.bias", p);
        t(m, n, 0, 0.02, 1, out, 0, 0);
    }
}

static int write_model(const char *dir, long long D, int L, int H) {
    char p[4096], n[300], q[300];
    long long F = 64 * (((long long)(2 * 4 * D / 3) + 63) / 64);
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    if (!f) return -1;
    fprintf(f, "{\"in_channels\":768,\"audio_codec\":{\"encoder_dim\":64,\"encoder_rates\":[2,8,10,12],\"latent_dim\":1024,"
               "\"decoder_dim\":1536,\"decoder_rates\":[12,10,8,2],\"codebook_dim\":128,\"sample_rate\":48000},"
               "\"text_encoder\":{\"dim\":768},\"transformer\":{\"dim\":%lld,\"n_heads\":%d,\"n_layers\":%d,"
               "\"max_positions\":10000,\"frequency_embedding_dim\":256,\"context_dim\":%lld,\"out_channels\":256},"
               "\"num_anchors\":3,\"anchor_embedding_dim\":128}\n", D, H, L, D);
    fclose(f);
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    mbuf m = {fopen(p, "w"), 1};
    if (!m.f) return -1;
    fprintf(m.f, "{\"generator\":\"randw-v1\",\"tensors\":[\n");
    /* codec encoder */
    wn(&m, "audio_codec.encoder.block.0", 64, 1, 7, 64);
    long long d = 64;
    int er[4] = {2, 8, 10, 12}, dr[4] = {12, 10, 8, 2}, wr[4] = {8, 5, 4, 2};
    for (int i = 0; i < 4; i++) {
        for (int r = 0; r < 3; r++) snprintf(n, sizeof n, "audio_codec.encoder.block.%d.block.%d", i + 1, r), ru(&m, n, d, 0);
        snprintf(n, sizeof n, "audio_codec.encoder.block.%d.block.3", i + 1), alpha(&m, n, d);
        snprintf(n, sizeof n, "audio_codec.encoder.block.%d.block.4", i + 1), wn(&m, n, 2 * d, d, 2 * er[i], 2 * d);
        d *= 2;
    }
    alpha(&m, "audio_codec.encoder.block.5", d);
    wn(&m, "audio_codec.encoder.block.6", 1024, d, 3, 1024);
    wn(&m, "audio_codec.quantizer.in_proj", 256, 1024, 1, 256);
    wn(&m, "audio_codec.quantizer.out_proj", 1024, 128, 1, 1024);
    wn(&m, "audio_codec.decoder.model.0", 1536, 1024, 7, 1536);
    for (int i = 0; i < 4; i++) {
        long long ci = 1536 >> i, co = 1536 >> (i + 1);
        snprintf(q, sizeof q, "audio_codec.decoder.model.%d.block", i + 1);
        snprintf(n, sizeof n, "%s.0", q), alpha(&m, n, ci);
        snprintf(n, sizeof n, "%s.1", q), wn(&m, n, ci, co, 2 * dr[i], co);
        snprintf(n, sizeof n, "%s.3", q), plain_conv(&m, n, ci / 3, co / 3, 2 * wr[i], co / 3);
        snprintf(n, sizeof n, "%s.4", q), ru(&m, n, co, 0);
        snprintf(n, sizeof n, "%s.5", q), ru(&m, n, co, 0);
        snprintf(n, sizeof n, "%s.6", q), ru(&m, n, co / 3, 1);
        snprintf(n, sizeof n, "%s.7", q), ru(&m, n, co / 3, 1);
        snprintf(n, sizeof n, "%s.8", q), ru(&m, n, co, 0);
        snprintf(n, sizeof n, "%s.11", q), plain_conv(&m, n, ci / 3, co / 3, 2 * wr[i], ci / 3);
    }
    const char *wm = "audio_codec.decoder.wm_model";
    snprintf(n, sizeof n, "%s.encoder_block.pre.0", wm), alpha(&m, n, 96);
    snprintf(n, sizeof n, "%s.encoder_block.pre.1", wm), wn(&m, n, 1, 96, 7, 1);
    snprintf(n, sizeof n, "%s.encoder_block.pre.3", wm), plain_conv(&m, n, 32, 1, 7, 32);
    snprintf(n, sizeof n, "%s.encoder_block.post.0", wm), lstm(&m, n);
    snprintf(n, sizeof n, "%s.encoder_block.post.2", wm), plain_conv(&m, n, 128, 512, 7, 128);
    snprintf(n, sizeof n, "%s.msg_processor.msg_processor.weight", wm), t(&m, n, 0, 0.1, 2, 32, 128, 0);
    snprintf(n, sizeof n, "%s.decoder_block.pre.0", wm), plain_conv(&m, n, 512, 128, 7, 512);
    snprintf(n, sizeof n, "%s.decoder_block.pre.1", wm), lstm(&m, n);
    snprintf(n, sizeof n, "%s.decoder_block.post.1", wm), plain_conv(&m, n, 1, 32, 7, 1);
    /* DiT */
    for (int l = 0; l < L; l++) {
        snprintf(q, sizeof q, "transformer.layers.%d", l);
        snprintf(n, sizeof n, "%s.scale_shift_table", q), t(&m, n, 0, 0.3, 2, 6, D, 0);
        const char *att[2] = {"attention", "cross_attention"}, *w[4] = {"wq", "wk", "wv", "wo"};
        for (int a = 0; a < 2; a++) {
            for (int k = 0; k < 4; k++) snprintf(n, sizeof n, "%s.%s.%s", q, att[a], w[k]), lin(&m, n, D, D, 0);
            snprintf(n, sizeof n, "%s.%s.q_norm.weight", q, att[a]), t(&m, n, 1, 0.1, 1, D / H, 0, 0);
            snprintf(n, sizeof n, "%s.%s.k_norm.weight", q, att[a]), t(&m, n, 1, 0.1, 1, D / H, 0, 0);
        }
        snprintf(n, sizeof n, "%s.feed_forward.w1", q), lin(&m, n, F, D, 0);
        snprintf(n, sizeof n, "%s.feed_forward.w2", q), lin(&m, n, D, F, 0);
        snprintf(n, sizeof n, "%s.feed_forward.w3", q), lin(&m, n, F, D, 0);
        snprintf(n, sizeof n, "%s.attention_norm.weight", q), t(&m, n, 1, 0.1, 1, D, 0, 0);
        snprintf(n, sizeof n, "%s.ffn_norm.weight", q), t(&m, n, 1, 0.1, 1, D, 0, 0);
    }
    t(&m, "transformer.final_layer_scale_shift_table", 0, 0.3, 2, 2, D, 0);
    t(&m, "transformer.norm.weight", 1, 0.1, 1, D, 0, 0);
    lin(&m, "transformer.output", 256, D, 0);
    for (int b = 1; b <= 2; b++) {
        snprintf(n, sizeof n, "transformer.x_embedder.block.block%d.groupnorm.weight", b), t(&m, n, 1, 0.1, 1, D, 0, 0);
        snprintf(n, sizeof n, "transformer.x_embedder.block.block%d.groupnorm.bias", b), t(&m, n, 0, 0.02, 1, D, 0, 0);
        snprintf(n, sizeof n, "transformer.x_embedder.block.block%d.project", b), plain_conv(&m, n, D, D, 3, D);
    }
    lin(&m, "transformer.y_embedder.projection.w1", D, D, 0);
    lin(&m, "transformer.y_embedder.projection.w2", D, D, 0);
    lin(&m, "transformer.y_embedder.projection.w3", D, D, 0);
    lin(&m, "transformer.t_embedder.projection.w1", D, 256, 0);
    lin(&m, "transformer.t_embedder.projection.w2", D, D, 0);
    lin(&m, "transformer.t_embedder.projection.w3", D, 256, 0);
    lin(&m, "transformer.t_block", 6 * D, D, 1);
    lin(&m, "proj", D, 768, 1);
    lin(&m, "memory_proj", D, 768, 1);
    t(&m, "align_masked_video.gate", 0.8, 0.1, 1, 1, 0, 0);
    t(&m, "align_masked_video.conv.bias", 0, 0.02, 1, D, 0, 0);
    t(&m, "align_masked_video.layer_norm.weight", 1, 0.1, 1, D, 0, 0);
    t(&m, "align_masked_video.layer_norm.bias", 0, 0.02, 1, D, 0, 0);
    t(&m, "embed_anchors.gate", 0.8, 0.1, 1, 1, 0, 0);
    t(&m, "embed_anchors.embed.weight", 0, 0.5, 2, 4, 128, 0);
    lin(&m, "embed_anchors.proj", D, 128, 0);
    fprintf(m.f, "]}\n");
    fclose(m.f);
    /* t5-base widths, random, with a small Unigram vocabulary. */
    snprintf(p, sizeof p, "%s/t5", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/t5/config.json", dir);
    f = fopen(p, "w");
    if (!f) return -1;
    fprintf(f, "{\"d_model\":768,\"d_kv\":64,\"num_heads\":12,\"num_layers\":12,\"d_ff\":3072,\"vocab_size\":32128,"
               "\"feed_forward_proj\":\"relu\",\"layer_norm_epsilon\":1e-6}\n");
    fclose(f);
    snprintf(p, sizeof p, "%s/t5/tokenizer.json", dir);
    f = fopen(p, "w");
    if (!f) return -1;
    fprintf(f, "{\"added_tokens\":[{\"id\":0,\"content\":\"<pad>\"},{\"id\":1,\"content\":\"</s>\"},{\"id\":2,\"content\":\"<unk>\"}],"
               "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\",\"prepend_scheme\":\"always\"},"
               "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"Sequence\":{\"id\":\"A\"}},"
               "{\"SpecialToken\":{\"id\":\"</s>\"}}],\"special_tokens\":{\"</s>\":{\"ids\":[1]}}},"
               "\"model\":{\"type\":\"Unigram\",\"unk_id\":2,\"vocab\":[[\"<pad>\",0],[\"</s>\",0],[\"<unk>\",0],"
               "[\"\xe2\x96\x81man\",-1],[\"\xe2\x96\x81speaking\",-1]]}}\n");
    fclose(f);
    snprintf(p, sizeof p, "%s/t5/manifest.json", dir);
    m = (mbuf){fopen(p, "w"), 1};
    if (!m.f) return -1;
    fprintf(m.f, "{\"generator\":\"randw-v1\",\"tensors\":[\n");
    t(&m, "shared.weight", 0, 1, 2, 32128, 768, 0);
    t(&m, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 0, 0.5, 2, 32, 12, 0);
    for (int l = 0; l < 12; l++) {
        const char *w[4] = {"q", "k", "v", "o"};
        for (int k = 0; k < 4; k++)
            snprintf(n, sizeof n, "encoder.block.%d.layer.0.SelfAttention.%s", l, w[k]), lin(&m, n, 768, 768, 0);
        snprintf(n, sizeof n, "encoder.block.%d.layer.0.layer_norm.weight", l), t(&m, n, 1, 0.1, 1, 768, 0, 0);
        snprintf(n, sizeof n, "encoder.block.%d.layer.1.layer_norm.weight", l), t(&m, n, 1, 0.1, 1, 768, 0, 0);
        snprintf(n, sizeof n, "encoder.block.%d.layer.1.DenseReluDense.wi", l), lin(&m, n, 3072, 768, 0);
        snprintf(n, sizeof n, "encoder.block.%d.layer.1.DenseReluDense.wo", l), lin(&m, n, 768, 3072, 0);
    }
    t(&m, "encoder.final_layer_norm.weight", 1, 0.1, 1, 768, 0, 0);
    fprintf(m.f, "]}\n");
    fclose(m.f);
    return 0;
}

static double rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss * 1024.0 / 1e6;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int choir_bench_sam_audio(int argc, char **argv) {
    const char *size = "small", *dir = NULL;
    double seconds = 10;
    int nfe = 0, cuda = 0, bf16 = 0;
    choir_sam_params p;
    choir_sam_default_params(&p);
    int threads = 0, euler = p.method == CHOIR_SAM_EULER, sz = 0;
    const cli_opt flags[] = {
        {"--size", CLI_CHOICE, &sz, 0, 0, "small|base|large", "published size (default small)"},
        {"--seconds", CLI_DOUBLE, &seconds, 0.01, 3600, "S", "seconds of audio (default 10)"},
        {"--steps", CLI_INT, &p.steps, 1, 1024, "N", "ODE steps (default 16)"},
        {"--method", CLI_CHOICE, &euler, 0, 0, "midpoint|euler", "ODE solver (default midpoint)"},
        {"--nfe", CLI_INT, &nfe, 0, 1 << 20, "N",
         "time only N network evaluations and project the ODE from\ntheir median (default 0: all)"},
        {"--dir", CLI_STRING, &dir, 0, 0, "SCRATCH", "where the random model is written (default: a temporary folder)"},
        {"--threads", CLI_INT, &threads, 1, 1024, "N", "compute threads"},
        {"--backend", CLI_CHOICE, &cuda, 0, 0, "cpu|cuda", "where the model runs (default cpu)"},
        {"--bf16", CLI_FLAG, &bf16, 0, 0, NULL, "with --backend cuda: bf16 matrices"},
    };
    const cli_spec spec = {.cmd = "bench sam-audio",
                           .synopsis = "usage: choir bench sam-audio [--size small|base|large] [--seconds 10] [--steps 16]\n"
                                       "         [--method midpoint|euler] [--nfe N] [--dir SCRATCH] [--threads N]\n"
                                       "         [--backend cpu|cuda] [--bf16]\n\n",
                           .opts = flags,
                           .n_opts = (int)(sizeof flags / sizeof flags[0])};
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    static const char *const sizes[] = {"small", "base", "large"};
    size = sizes[sz];
    p.method = euler ? CHOIR_SAM_EULER : CHOIR_SAM_MIDPOINT;
    if (threads) choir_pool_set_default_threads(threads);
    long long D;
    int L, H;
    if (!strcmp(size, "small")) D = 1536, L = 12, H = 12;
    else if (!strcmp(size, "base")) D = 2048, L = 16, H = 16;
    else if (!strcmp(size, "large")) D = 2816, L = 22, H = 22;
    else return fprintf(stderr, "choir bench sam-audio: unknown size %s\n", size), 2;
    char tmpl[] = "/tmp/choir-sam-bench-XXXXXX", p2[4200], p3[4200];
    if (!dir && !(dir = mkdtemp(tmpl))) return 1;
    choir_err err = {0};
    double t0 = choir_now_s();
    snprintf(p2, sizeof p2, "%s/manifest.json", dir);
    snprintf(p3, sizeof p3, "%s/t5/manifest.json", dir);
    char t5[4200], t5c[4300];
    snprintf(t5, sizeof t5, "%s/t5", dir);
    snprintf(t5c, sizeof t5c, "%s/t5/config.json", dir);
    if (write_model(dir, D, L, H) != 0 || choir_randw_write_checkpoint(p2, NULL, dir, &err) != 0 ||
        choir_randw_write_checkpoint(p3, NULL, t5, &err) != 0) {
        fprintf(stderr, "choir bench sam-audio: writing the random model: %s\n", err.msg);
        return 1;
    }
    double t_write = choir_now_s() - t0;
    t0 = choir_now_s();
    choir_sam_load_opts lo = {.device = cuda ? 1 : 0, .bf16 = bf16};
    choir_sam *m = choir_sam_load_ex(dir, &lo, &err);
    if (!m) return fprintf(stderr, "choir bench sam-audio: %s\n", err.msg), 1;
    double t_load = choir_now_s() - t0;
    int64_t n = (int64_t)(seconds * CHOIR_SAM_RATE), T = choir_sam_frames(m, n), C = choir_sam_channels(m);
    float *x = malloc((size_t)n * sizeof *x), *lat = malloc((size_t)(T * C) * 4), *xs = malloc((size_t)(T * 2 * C) * 4);
    float *v = malloc((size_t)(T * 2 * C) * 4), *y = malloc((size_t)(T * choir_sam_hop(m)) * 4), *half = malloc((size_t)(T * C) * 4);
    for (int64_t i = 0; i < n; i++) x[i] = 0.3f * sinf((float)i * 0.01f) + 0.05f * (float)((i * 7919) % 101 - 50) / 50.0f;
    printf("sam-audio %s (dim %lld, %d layers) on %s%s, %.1f s of audio (%lld frames), %s %d steps, %d threads\n", size,
           D, L, choir_sam_backend_name(m), bf16 && cuda ? " (bf16 matrices)" : "", seconds, (long long)T,
           p.method == CHOIR_SAM_EULER ? "euler" : "midpoint", p.steps, choir_pool_threads(choir_pool_default()));
    printf("  weights          %.1f MB (written in %.1f s, loaded in %.2f s)\n", (double)choir_sam_weight_bytes(m) / 1e6,
           t_write, t_load);
    int64_t base = choir_mem_current(CHOIR_MEM_COUNT);
    choir_mem_reset_peaks();
    double tt = choir_now_s();
    int32_t *ids = NULL;
    int nid = 0;
    float *text = NULL;
    int rc = choir_sam_tokenize(m, "man speaking", &ids, &nid, &err);
    if (!rc) text = malloc((size_t)(nid * choir_sam_text_dim(m)) * 4), rc = choir_sam_text_features(m, ids, nid, text, &err);
    double t_text = choir_now_s() - tt;
    tt = choir_now_s();
    if (!rc) rc = choir_sam_encode(m, x, n, lat, &err);
    double t_enc = choir_now_s() - tt;
    if (!rc && cuda) {
        /* A GPU's first calls pay for its libraries' set-up: warm up once. */
        tt = choir_now_s();
        rc = choir_sam_encode(m, x, n, lat, &err);
        t_enc = choir_now_s() - tt;
        choir_sam_item w = {.frames = T, .valid_frames = T, .features = lat, .text = text, .text_len = nid};
        float tw = 0.5f;
        choir_sam_noise(m, p.seed, T, xs);
        const float *xw = xs;
        if (!rc) rc = choir_sam_velocity(m, &w, 1, &tw, &xw, &v, &err);
        for (int64_t i = 0; i < T && !rc; i++) memcpy(half + i * C, xs + i * 2 * C, (size_t)C * 4);
        if (!rc) rc = choir_sam_decode(m, half, T, NULL, y, &err);
    }
    choir_sam_noise(m, p.seed, T, xs);
    choir_sam_item it = {.frames = T, .valid_frames = T, .features = lat, .text = text, .text_len = nid};
    int per_step = p.method == CHOIR_SAM_EULER ? 1 : 2, total_nfe = per_step * p.steps;
    int run = nfe > 0 && nfe < total_nfe ? nfe : total_nfe;
    double *ts = calloc((size_t)run, sizeof *ts), t_ode = 0;
    if (!rc && run < total_nfe) {
        for (int k = 0; k < run && !rc; k++) {
            float tv = (float)k / (float)run;
            const float *xc = xs;
            tt = choir_now_s();
            rc = choir_sam_velocity(m, &it, 1, &tv, &xc, &v, &err);
            ts[k] = choir_now_s() - tt;
        }
        qsort(ts, (size_t)run, sizeof *ts, cmp_d);
        t_ode = ts[run / 2] * total_nfe;
    } else if (!rc) {
        tt = choir_now_s();
        rc = choir_sam_ode(m, &it, 1, &xs, &p, &err);
        t_ode = choir_now_s() - tt;
        ts[0] = t_ode / total_nfe;
    }
    double t_dec = 0;
    for (int part = 0; part < 2 && !rc; part++) {
        for (int64_t i = 0; i < T; i++) memcpy(half + i * C, xs + i * 2 * C + part * C, (size_t)C * 4);
        tt = choir_now_s();
        rc = choir_sam_decode(m, half, T, NULL, y, &err);
        t_dec += choir_now_s() - tt;
    }
    if (rc) return fprintf(stderr, "choir bench sam-audio: %s\n", err.msg), 1;
    int64_t peak = choir_mem_peak(CHOIR_MEM_COUNT) - base;
    double total = t_text + t_enc + t_ode + t_dec;
    printf("  text (T5)        %.3f s\n", t_text);
    printf("  codec encode     %.3f s\n", t_enc);
    printf("  one evaluation   %.3f s (%s)\n", run < total_nfe ? ts[run / 2] : ts[0],
           run < total_nfe ? "median of the ones run" : "mean over the ODE");
    printf("  ODE (%d evals)   %.3f s%s\n", total_nfe, t_ode, run < total_nfe ? " (projected from the median)" : "");
    printf("  codec decode x2  %.3f s\n", t_dec);
    printf("  real-time factor %.3f (%.3f s for %.1f s of audio)%s\n", total / seconds, total, seconds,
           run < total_nfe ? ", ODE projected" : "");
    printf("  peak memory      %.1f MB counted beyond the weights (estimate %.1f MB); max RSS %.1f MB\n", (double)peak / 1e6,
           (double)choir_sam_chunk_bytes(m, T, nid) / 1e6, rss_mb());
    if (cuda) {
        int64_t dpeak = 0, dnow = choir_sam_device_bytes(m, &dpeak);
        printf("  device memory    %.1f MB at most, %.1f MB held between calls (weights)\n", (double)dpeak / 1e6,
               (double)dnow / 1e6);
    }
    choir_free(ids);
    free(text), free(x), free(lat), free(xs), free(v), free(y), free(half), free(ts);
    choir_sam_free(m);
    if (dir == tmpl) {
        char cmd[4400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpl);
    }
    return 0;
}
