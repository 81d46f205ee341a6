/* `choir bench vibevoice`: VibeVoice-ASR speed and memory at a published size
 * (--dims 1.5b | 7b), on weights generated in memory (speed does not depend
 * on the values; nothing is downloaded). One request of --audio-min minutes
 * of noise: the encoders over the audio, the prefill of its prompt (the audio
 * tokens plus 64 text tokens), then --steps greedy decoding steps with the KV
 * cache. Prints load time (binding and converting the generated tensors),
 * encoder time, prefill and decode tokens per second, and peak memory
 * (counted by category, and the process's peak RSS). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "choir/alloc.h"
#include "choir/backend.h"
#include "choir/pool.h"
#include "choir/quant.h"
#include "choir/tensor.h"
#include "choir/vibevoice.h"
#include "cli/dev/dev.h"
#include "cli/opt.h"

static const char bv_synopsis[] =
    "usage: choir bench vibevoice [--dims 1.5b|7b] [--audio-min M] [--steps N] [--dtype bf16|f32]\n"
    "                             [--q-bits 4|8] [--layers N] [--threads N] [--prefill-chunk N]\n"
    "                             [--backend cpu|cuda]\n\n"
    "VibeVoice-ASR on random weights at a published size (default 1.5b, 1 minute, 32 steps,\n"
    "bf16 matrices): load, encoder, prefill and decode speed and peak memory. --q-bits\n"
    "quantizes the language model as mlx-community does; --layers runs fewer LM layers\n"
    "(the printed figures then are for that depth). --backend cuda puts the weights and\n"
    "the passes on CUDA device 0 (builds with -DCHOIR_CUDA=ON) and adds its peak memory.\n\n";

int choir_bench_vibevoice(int argc, char **argv) {
    const char *dims_name = "1.5b";
    double minutes = 1.0;
    int steps = 32, layers = 0, bits = 0, prefill_chunk = 0;
    choir_dtype dt = CHOIR_DTYPE_BF16;
    int threads = 0, use_cuda = 0, f32 = 0;
    const cli_opt flags[] = {
        {"--dims", CLI_STRING, &dims_name, 0, 0, "1.5b|7b", "published size (default 1.5b)"},
        {"--audio-min", CLI_DOUBLE, &minutes, 0.001, 90, "M", "minutes of audio (default 1)"},
        {"--steps", CLI_INT, &steps, 1, 1 << 20, "N", "greedy decoding steps (default 32)"},
        {"--dtype", CLI_CHOICE, &f32, 0, 0, "bf16|f32", "matrices (default bf16)"},
        {"--q-bits", CLI_INT, &bits, 4, 8, "4|8", "quantize the language model's linears (mlx-community's layout)"},
        {"--layers", CLI_INT, &layers, 0, 1000, "N", "run the first N language-model layers (default 0: all)"},
        {"--threads", CLI_INT, &threads, 1, 1024, "N", "compute threads"},
        {"--prefill-chunk", CLI_INT, &prefill_chunk, 0, 1 << 20, "N", "prompt tokens per prefill pass (default 0: 256)"},
        {"--backend", CLI_CHOICE, &use_cuda, 0, 0, "cpu|cuda", "where the weights and passes go (default cpu)"},
    };
    const cli_spec spec = {.cmd = "bench vibevoice", .synopsis = bv_synopsis, .opts = flags,
                           .n_opts = (int)(sizeof flags / sizeof flags[0])};
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (bits != 0 && bits != 4 && bits != 8) {
        fprintf(stderr, "choir bench vibevoice: --q-bits is 4 or 8, got '%d'\n", bits);
        return 2;
    }
    if (f32) dt = CHOIR_DTYPE_F32;
    if (threads) choir_pool_set_default_threads(threads);
    const char *backend = use_cuda ? "cuda" : "cpu";
    choir_err err = {0};
    choir_vibevoice_dims D;
    if (choir_vibevoice_dims_named(dims_name, &D, &err)) {
        fprintf(stderr, "choir bench vibevoice: %s\n", err.msg);
        return 2;
    }
    if (layers > D.lm.n_layers) {
        fprintf(stderr, "choir bench vibevoice: --layers %d: the %s language model has %d\n", layers, dims_name,
                D.lm.n_layers);
        return 2;
    }
    if (layers > 0) D.lm.n_layers = layers;
    printf("VibeVoice-ASR %s: LM %d layers x %d (%d heads, %d kv), vocab %d, %s%s; encoders %d stages, "
           "%d filters\n", dims_name, D.lm.n_layers, D.lm.hidden, D.lm.n_heads, D.lm.n_kv_heads, D.lm.vocab,
           bits ? (bits == 8 ? "8-bit LM" : "4-bit LM") : dt == CHOIR_DTYPE_F32 ? "f32" : "bf16",
           D.lm.tied ? ", tied embedding" : "", D.acoustic.n_stages, D.acoustic.n_filters);
    printf("threads        %d\n", choir_pool_threads(choir_pool_default()));
    choir_backend *be = NULL;
    if (strcmp(backend, "cuda") == 0) {
        choir_backend_cuda_opts co = {.device = 0};
        if (!(be = choir_backend_cuda(&co, &err))) {
            fprintf(stderr, "choir bench vibevoice: %s\n", err.msg);
            return 1;
        }
        printf("backend        %s\n", choir_backend_name(be));
    }
    double t0 = choir_now_s();
    choir_vibevoice_randw *w = choir_vibevoice_randw_create(&D, dt, bits, 0, &err);
    if (!w) {
        fprintf(stderr, "choir bench vibevoice: %s\n", err.msg);
        choir_backend_free(be);
        return 1;
    }
    double t1 = choir_now_s();
    choir_vibevoice *m = choir_vibevoice_from_tensors_on(choir_vibevoice_randw_find, w, &D, be, &err);
    double t2 = choir_now_s();
    int status = 0;
    float *x = NULL;
    int32_t *ids = NULL;
    choir_vibevoice_state *s = NULL;
    if (!m) goto fail;
    size_t wb = choir_vibevoice_randw_bytes(w);
    printf("weights        %.2f GB generated in %.1f s (%d tensors); load %.2f s (binding them, re-laying the "
           "convolution kernels%s; the model holds %.2f GB)\n", wb / 1e9, t1 - t0, choir_vibevoice_randw_count(w), t2 - t1,
           be ? ", uploading" : "", choir_vibevoice_weight_bytes(m) / 1e9);
    if (be) choir_backend_mem_reset_peak(be);
    int64_t n = (int64_t)(minutes * 60.0 * CHOIR_VIBEVOICE_SAMPLE_RATE), np = choir_vibevoice_padded_len(n, D.hop);
    int T = (int)(np / D.hop), n_ids = T + 2 + 64;
    if (!(x = choir_alloc(CHOIR_MEM_IO, (size_t)np * sizeof *x)) ||
        !(ids = choir_alloc(CHOIR_MEM_IO, (size_t)n_ids * sizeof *ids))) {
        choir_err_set(&err, CHOIR_ENOMEM, "out of memory for the audio");
        goto fail;
    }
    for (int64_t i = 0; i < n; i++) x[i] = 0.05f * choir_vibevoice_randw_uniform(w);
    choir_vibevoice_normalize(x, n, D.hop, x);
    /* The prompt's shape: 32 text tokens, the audio span, 32 text tokens. */
    for (int i = 0; i < n_ids; i++) ids[i] = 1000 + (i * 7919) % 100000;
    ids[32] = D.audio_bos;
    for (int i = 0; i < T; i++) ids[33 + i] = D.audio_token;
    ids[33 + T] = D.audio_eos;
    choir_vibevoice_plan plan = {.max_samples = np, .max_context = n_ids + steps + 1, .prefill_chunk = prefill_chunk};
    int64_t state_bytes = choir_vibevoice_plan_bytes(&D, &plan);
    if (!(s = choir_vibevoice_state_create(m, &plan, NULL, &err))) goto fail;
    double e0 = choir_now_s();
    if (choir_vibevoice_encode(m, s, x, np, 0, NULL, NULL, &err)) goto fail;
    double e1 = choir_now_s();
    printf("encoders       %.1f s of audio (%d frames) in %.2f s: %.1fx real time\n", minutes * 60, T, e1 - e0,
           minutes * 60 / (e1 - e0));
    if (choir_vibevoice_prefill(m, s, ids, n_ids, NULL, NULL, NULL, &err)) goto fail;
    double p1 = choir_now_s();
    printf("prefill        %d tokens in %.2f s: %.1f tokens/s (chunks of %d)\n", n_ids, p1 - e1, n_ids / (p1 - e1),
           prefill_chunk ? prefill_chunk : 256);
    const float *logits = choir_vibevoice_logits(s);
    for (int i = 0; i < steps; i++) {
        int best = 0;
        for (int v = 1; v < D.lm.vocab; v++)
            if (logits[v] > logits[best]) best = v;
        if (choir_vibevoice_step(m, s, best, NULL, &err)) goto fail;
    }
    double d1 = choir_now_s();
    printf("decode         %d steps at context %d..%d in %.2f s: %.2f tokens/s (%.1f ms/token)\n", steps, n_ids,
           n_ids + steps, d1 - p1, steps / (d1 - p1), 1000.0 * (d1 - p1) / steps);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("peak memory    %.0f MB counted (%.0f MB weights, %.0f MB state planned, %.0f MB activations), "
           "%.0f MB RSS\n", (double)choir_mem_peak(CHOIR_MEM_COUNT) / 1e6, (double)choir_mem_peak(CHOIR_MEM_WEIGHTS) / 1e6,
           state_bytes / 1e6, (double)choir_mem_peak(CHOIR_MEM_ACTIVATIONS) / 1e6, (double)ru.ru_maxrss / 1024.0);
    if (be)
        printf("device memory  %.2f GB weights, peak %.2f GB working memory on %s\n",
               choir_vibevoice_device_bytes(m) / 1e9, (double)choir_backend_mem_peak(be) / 1e9, choir_backend_name(be));
    goto done;
fail:
    fprintf(stderr, "choir bench vibevoice: %s\n", err.msg);
    status = 1;
done:
    choir_vibevoice_state_free(s);
    choir_free(ids);
    choir_free(x);
    choir_vibevoice_free(m);
    choir_vibevoice_randw_free(w);
    choir_backend_free(be);
    return status;
}
