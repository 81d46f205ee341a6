/* `choir bench kokoro`: real-time factor and time to first audio for a
 * paragraph, streamed piece by piece, and N copies of it as concurrent
 * requests, for each batch size of --batch (default 1,8); peak memory.
 * --backend cuda runs the decoder on GPU 0 and adds the device figures:
 * achieved TFLOP/s (the decoder's convolution FLOPs over its device time)
 * and GB/s (bytes the kernels read and wrote), against the card's ceilings
 * measured in the same run (choir_cuda_measure_ceilings). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "choir/alloc.h"
#include "choir/error.h"
#include "choir/kokoro.h"
#include "choir/phonemizer.h"
#include "choir/pool.h"
#include "cli/dev/dev.h"
#include "cli/opt.h"

static const char *const k_paragraph =
    "The old lighthouse stood at the edge of the cliff, its lamp long dark. Every evening, "
    "the keeper's daughter climbed the spiral stairs to watch the ships pass by. She counted "
    "them, named them, and wondered where they were going. One night, a storm rolled in from "
    "the west, and the harbor lights went out one by one. Without thinking twice, she struck "
    "a match, lit the old lamp, and turned the great lens toward the sea.";

typedef struct run {
    double t0, first, samples;
} run;

static int on_audio(void *user, const float *pcm, int64_t n, int piece, int n_pieces) {
    run *r = user;
    (void)pcm, (void)n_pieces;
    if (piece == 0) r->first = choir_now_s() - r->t0;
    r->samples += (double)n;
    return 0;
}

/* --pieces-out: the pieces `choir_kokoro_speak` makes of the text (short
 * first piece), each as ids + style, and choir's zero-noise synthesis of each
 * alone, for a peer to run the same inputs and compare (bench/peers/kokoro_onnx.sh). */
typedef struct dump_ctx {
    const char *dir;
    int piece;
    int failed;
} dump_ctx;

static int write_file(const char *dir, int piece, const char *what, const void *data, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/piece-%d.%s", dir, piece, what);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static void dump_stage(void *user, const char *stage, const float *data, int ndim,
                       const int64_t *shape) {
    dump_ctx *d = user;
    if (strcmp(stage, "pred_dur") && strcmp(stage, "F0_pred") && strcmp(stage, "N_pred") &&
        strcmp(stage, "audio"))
        return;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    char what[64];
    snprintf(what, sizeof what, "choir.%s.f32", stage);
    if (write_file(d->dir, d->piece, what, data, (size_t)n * sizeof *data)) d->failed = 1;
}

static int dump_pieces(const choir_kokoro *m, const choir_kokoro_voice *v,
                       const choir_clause_list *clauses, const char *dir, choir_err *err) {
    choir_piece_list pieces = {0};
    int rc = choir_split_pieces(clauses, CHOIR_KOKORO_MAX_PHONEMES, true, &pieces, err);
    int32_t ids[CHOIR_KOKORO_MAX_PHONEMES + 2];
    for (int i = 0; rc == 0 && i < pieces.n; i++) {
        int k = choir_kokoro_phonemes_to_ids(m, pieces.items[i].phonemes, ids,
                                             CHOIR_KOKORO_MAX_PHONEMES + 2, NULL, err);
        if (k < 0) {
            rc = k;
            break;
        }
        const float *style = choir_kokoro_voice_style(v, pieces.items[i].n_phonemes);
        dump_ctx d = {.dir = dir, .piece = i};
        if (write_file(dir, i, "ids.i32", ids, (size_t)k * sizeof *ids) ||
            write_file(dir, i, "style.f32", style, CHOIR_KOKORO_STYLE_DIM * sizeof *style)) {
            rc = choir_err_set(err, CHOIR_EIO, "--pieces-out %s: cannot write piece %d", dir, i);
            break;
        }
        choir_kokoro_params p = choir_kokoro_default_params();
        p.noise = CHOIR_KOKORO_NOISE_ZERO;
        p.trace = dump_stage;
        p.trace_user = &d;
        float *audio = NULL;
        int64_t ns = 0;
        if ((rc = choir_kokoro_synthesize_ids(m, ids, k, style, &p, &audio, &ns, err))) break;
        choir_free(audio);
        if (d.failed) {
            rc = choir_err_set(err, CHOIR_EIO, "--pieces-out %s: cannot write piece %d", dir, i);
            break;
        }
        printf("  piece %d: %d ids, %.2f s of audio (zero noise) -> %s/piece-%d.*\n", i, k,
               (double)ns / CHOIR_KOKORO_SAMPLE_RATE, dir, i);
    }
    choir_piece_list_free(&pieces);
    return rc;
}

static const char synopsis[] =
    "usage: choir bench kokoro --model DIR [--voice V] [--text T] [--threads N]\n"
    "                          [--batch 1,8] [--requests N] [--backend cpu|cuda]\n"
    "                          [--gpu-dtype f32|tf32|bf16|bf16-tf32] [--pieces-out DIR]\n"
    "                          [--conv-stats off|on|ab]\n\n"
    "For each batch size B of --batch: streams the paragraph with B pieces\n"
    "synthesised together (after the short first one), then B copies of it (or N\n"
    "with --requests) as concurrent requests in one batch; prints real-time factor\n"
    "(compute seconds per audio second), time to first audio, and peak memory.\n"
    "--backend cuda (CUDA builds) runs the decoder on GPU 0 and also prints the\n"
    "achieved TFLOP/s and GB/s against the card's measured ceilings. --gpu-dtype tf32:\n"
    "f32 weights, cuBLAS products (convolutions, ALBERT) on the tensor cores in\n"
    "TF32, as PyTorch runs its f32 convolutions by default (cuDNN allow_tf32).\n"
    "bf16: the decoder's weights and convolutions in bf16, the rest (ALBERT, the\n"
    "LSTMs, the F0/N blocks) in f32; bf16-tf32: the same with that rest in TF32.\n"
    "--conv-stats off|on|ab (CUDA): CHOIR_KOKORO_CONV_STATS for the device (the\n"
    "Snake units' AdaIN statistics from the producing convolution's epilogue);\n"
    "ab runs each batch of concurrent requests twice in this process, off then on\n"
    "(the decoder's weights uploaded again between), and prints both.\n"
    "--pieces-out DIR: instead of timing, writes the pieces the streamed run makes\n"
    "of the text (piece-K.ids.i32, piece-K.style.f32) and choir's zero-noise\n"
    "synthesis of each alone (piece-K.choir.{pred_dur,F0_pred,N_pred,audio}.f32),\n"
    "raw little-endian, for a peer to run the same inputs.\n\n";

typedef struct gpu_side {
#ifdef CHOIR_HAVE_CUDA
    choir_cuda *cu;
    choir_kokoro_gpu *g;
#endif
    double tflops_ceiling, gbs_ceiling;
} gpu_side;

/* Device figures of the runs since the last reset. */
static void print_gpu(gpu_side *gs) {
#ifdef CHOIR_HAVE_CUDA
    if (!gs->g) return;
    choir_kokoro_gpu_stats st;
    choir_kokoro_gpu_get_stats(gs->g, &st);
    if (st.seconds <= 0) return;
    double tf = st.flops / st.seconds / 1e12, gb = st.bytes / st.seconds / 1e9;
    printf("    gpu: %lld decode calls, %lld pieces, %.3f s on the device: %.1f GFLOP at %.2f "
           "TFLOP/s (%.1f%% of %.0f bf16), %.1f GB at %.0f GB/s (%.1f%% of %.0f copy)\n",
           (long long)st.calls, (long long)st.pieces, st.seconds, st.flops / 1e9, tf,
           100.0 * tf / gs->tflops_ceiling, gs->tflops_ceiling, st.bytes / 1e9, gb,
           100.0 * gb / gs->gbs_ceiling, gs->gbs_ceiling);
    if (st.albert_calls || st.lstm_calls || st.f0n_calls)
        printf("    gpu front: ALBERT %lld calls, %.3f s; LSTMs %lld calls, %.3f s; F0/N blocks "
               "%lld calls, %.3f s (upload to download, serialised with the decoder)\n",
               (long long)st.albert_calls, st.albert_seconds, (long long)st.lstm_calls,
               st.lstm_seconds, (long long)st.f0n_calls, st.f0n_seconds);
    choir_kokoro_gpu_reset_stats(gs->g);
#else
    (void)gs;
#endif
}

int choir_bench_kokoro(int argc, char **argv) {
    const char *model_dir = NULL, *voice_spec = "af_heart", *text = k_paragraph;
    const char *batch_list = "1,8", *pieces_out = NULL;
    int requests = 0;
    int threads = 0, backend = 0, gpu_dtype = 0; /* cpu; f32 */
    int conv_stats = -1;                          /* -1: as the environment; 0 off, 1 on, 2 ab */
    const cli_opt flags[] = {
        {"--model", CLI_STRING, &model_dir, 0, 0, "DIR", "Kokoro model directory (required)"},
        {"--voice", CLI_STRING, &voice_spec, 0, 0, "V", "voice name in DIR/voices, or a .bin file (default af_heart)"},
        {"--text", CLI_STRING, &text, 0, 0, "T", "text to speak (default: a paragraph)"},
        {"--threads", CLI_INT, &threads, 1, 1024, "N", "compute threads"},
        {"--batch", CLI_STRING, &batch_list, 0, 0, "1,8", "batch sizes 1..1024, at most 16 (default 1,8)"},
        {"--requests", CLI_INT, &requests, 0, 1 << 20, "N", "concurrent requests in the batched run (default 0: B)"},
        {"--backend", CLI_CHOICE, &backend, 0, 0, "cpu|cuda", "where the decoder runs (default cpu)"},
        {"--gpu-dtype", CLI_CHOICE, &gpu_dtype, 0, 0, "f32|tf32|bf16|bf16-tf32",
         "weights and products on the GPU (default f32)"},
        {"--pieces-out", CLI_STRING, &pieces_out, 0, 0, "DIR", "write the pieces and their synthesis instead of timing"},
        {"--conv-stats", CLI_CHOICE, &conv_stats, 0, 0, "off|on|ab",
         "AdaIN statistics from the convolutions (CUDA; ab: both, one process)"},
    };
    const cli_spec spec = {.cmd = "bench kokoro", .synopsis = synopsis, .opts = flags,
                           .n_opts = (int)(sizeof flags / sizeof flags[0])};
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (!model_dir) {
        fprintf(stderr, "choir bench kokoro: --model DIR is required\n");
        cli_usage(&spec, stderr);
        return 2;
    }
    if (threads) choir_pool_set_default_threads(threads);
    bool use_gpu = backend == 1, gpu_tf32 = gpu_dtype == 1 || gpu_dtype == 3,
         gpu_bf16 = gpu_dtype == 2 || gpu_dtype == 3;
    int batches[16];
    int n_batches = cli_parse_ints(batch_list, 1, 1024, batches, 16);
    if (n_batches < 1) {
        fprintf(stderr, "choir bench kokoro: --batch %s: want up to 16 sizes 1..1024 like 1,8,32\n", batch_list);
        return 2;
    }
#ifdef CHOIR_HAVE_CUDA
    if (use_gpu && choir_cuda_device_count() < 1) {
        fprintf(stderr, "choir bench kokoro: --backend cuda: no CUDA device visible\n");
        return 1;
    }
#else
    if (use_gpu) {
        fprintf(stderr, "choir bench kokoro: --backend cuda: this build has no CUDA backend "
                        "(configure with -DCHOIR_CUDA=ON)\n");
        return 2;
    }
    (void)gpu_bf16, (void)gpu_tf32;
#endif
    choir_err err = {0};
    int rc = 1;
    char voices[2048];
    snprintf(voices, sizeof voices, "%s/voices", model_dir);
    choir_kokoro_voice *v = NULL;
    choir_phonemizer *ph = NULL;
    choir_kokoro_item *items = NULL;
    choir_piece_list pieces = {0};
    choir_clause_list clauses = {0};
    int32_t *ids = NULL;
    gpu_side gs = {0};
    double t = choir_now_s();
    choir_kokoro *m = choir_kokoro_load(model_dir, &err);
    if (!m) goto done;
    printf("kokoro bench: %s, %d threads, weights %.1f MB, load %.2f s\n", model_dir,
           choir_pool_threads(choir_pool_default()), (double)choir_kokoro_weight_bytes(m) / 1e6,
           choir_now_s() - t);
#ifdef CHOIR_HAVE_CUDA
    if (use_gpu) {
        if (choir_cuda_device_count() < 1) {
            choir_err_set(&err, CHOIR_EUNSUPPORTED, "--backend cuda: no CUDA device visible");
            goto done;
        }
        if (!(gs.cu = choir_cuda_init(0, &err))) goto done;
        if (choir_cuda_measure_ceilings(gs.cu, &gs.tflops_ceiling, &gs.gbs_ceiling, &err) != 0)
            goto done;
        if (gpu_tf32 && choir_cuda_set_tf32(gs.cu, true, &err)) goto done;
        if (conv_stats >= 0) setenv("CHOIR_KOKORO_CONV_STATS", conv_stats == 1 ? "1" : "0", 1);
        t = choir_now_s();
        if (!(gs.g = choir_kokoro_gpu_create(m, gs.cu, gpu_bf16, &err))) goto done;
        choir_kokoro_set_gpu(m, gs.g);
        choir_kokoro_gpu_stats st;
        choir_kokoro_gpu_get_stats(gs.g, &st);
        printf("  decoder on %s (%s convolutions), %.1f MB of device weights, upload %.2f s\n"
               "  ceilings measured now: bf16 matmul %.1f TFLOP/s, device copy %.0f GB/s\n",
               choir_cuda_get_props(gs.cu)->name,
               gpu_bf16 ? (gpu_tf32 ? "bf16, the rest tf32" : "bf16") : gpu_tf32 ? "tf32" : "f32",
               (double)st.weight_bytes / 1e6, choir_now_s() - t, gs.tflops_ceiling, gs.gbs_ceiling);
    }
#endif
    if (!(v = choir_kokoro_voice_load(voice_spec, voices, &err))) goto done;
    if (!(ph = choir_phonemizer_create(CHOIR_PHONEMIZER_EN_US, &err))) goto done;
    if (choir_phonemize_clauses(ph, text, &clauses, &err) != 0) goto done;
    if (pieces_out) {
        if (dump_pieces(m, v, &clauses, pieces_out, &err) == 0) rc = 0;
        goto done;
    }
    if (choir_split_pieces(&clauses, CHOIR_KOKORO_MAX_PHONEMES, false, &pieces, &err) != 0) goto done;

    for (int bi = 0; bi < n_batches; bi++) {
        int b = batches[bi];
        choir_kokoro_speak_params sp = choir_kokoro_default_speak_params();
        sp.batch = b;
        run r = {.t0 = choir_now_s()};
        if (choir_kokoro_speak(m, ph, v, text, &sp, on_audio, &r, &err) != 0) goto done;
        double wall = choir_now_s() - r.t0, audio_s = r.samples / CHOIR_KOKORO_SAMPLE_RATE;
        printf("  paragraph, batch %d: %.2f s audio in %.2f s, RTF %.5f, first audio %.4f s\n", b,
               audio_s, wall, wall / audio_s, r.first);
        print_gpu(&gs);

        /* copies of the paragraph at once, each cut into its pieces: one batch */
        int copies = requests > 0 ? requests : b;
        int n = copies * pieces.n, stride = CHOIR_KOKORO_MAX_PHONEMES + 2;
        choir_free(ids);
        choir_free(items);
        ids = choir_alloc(CHOIR_MEM_IO, (size_t)n * stride * sizeof *ids);
        items = choir_calloc(CHOIR_MEM_IO, (size_t)n, sizeof *items);
        if (!ids || !items) {
            choir_err_set(&err, CHOIR_ENOMEM, "out of memory for %d pieces", n);
            goto done;
        }
        for (int i = 0; i < n; i++) {
            const choir_piece *p = &pieces.items[i % pieces.n];
            int k = choir_kokoro_phonemes_to_ids(m, p->phonemes, ids + (size_t)i * stride, stride,
                                                 NULL, &err);
            if (k < 0) goto done;
            items[i] = (choir_kokoro_item){.ids = ids + (size_t)i * stride, .n_ids = k,
                                           .style = choir_kokoro_voice_style(v, p->n_phonemes)};
        }
        choir_kokoro_params params = choir_kokoro_default_params();
        t = choir_now_s();
        if (choir_kokoro_synthesize_batch(m, items, n, &params, &err) != 0) goto done;
        double wall2 = choir_now_s() - t, samples = 0;
        for (int i = 0; i < n; i++) samples += (double)items[i].n_samples, choir_free(items[i].audio);
        printf("  %d requests at once (%d pieces, one batch): %.2f s audio in %.2f s, RTF %.5f%s\n",
               copies, n, samples / CHOIR_KOKORO_SAMPLE_RATE, wall2,
               wall2 / (samples / CHOIR_KOKORO_SAMPLE_RATE),
               conv_stats == 2 ? " (conv stats off)" : "");
        print_gpu(&gs);
#ifdef CHOIR_HAVE_CUDA
        if (conv_stats == 2 && gs.g) {
            /* the same batch with the statistics from the convolutions: the
             * decoder made again with the switch on, then back off */
            for (int on = 1; on >= 0; on--) {
                setenv("CHOIR_KOKORO_CONV_STATS", on ? "1" : "0", 1);
                choir_kokoro_set_gpu(m, NULL);
                choir_kokoro_gpu_free(gs.g);
                if (!(gs.g = choir_kokoro_gpu_create(m, gs.cu, gpu_bf16, &err))) goto done;
                choir_kokoro_set_gpu(m, gs.g);
                if (!on) break;
                for (int i = 0; i < n; i++) items[i].audio = NULL, items[i].n_samples = 0;
                t = choir_now_s();
                if (choir_kokoro_synthesize_batch(m, items, n, &params, &err) != 0) goto done;
                wall2 = choir_now_s() - t, samples = 0;
                for (int i = 0; i < n; i++)
                    samples += (double)items[i].n_samples, choir_free(items[i].audio);
                printf("  %d requests at once (%d pieces, one batch): %.2f s audio in %.2f s, RTF "
                       "%.5f (conv stats on)\n",
                       copies, n, samples / CHOIR_KOKORO_SAMPLE_RATE, wall2,
                       wall2 / (samples / CHOIR_KOKORO_SAMPLE_RATE));
                print_gpu(&gs);
            }
        }
#endif
    }

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("  peak memory: counted %.1f MB (activations %.1f MB, weights %.1f MB), max RSS %.1f MB\n",
           (double)choir_mem_peak(CHOIR_MEM_COUNT) / 1e6,
           (double)choir_mem_peak(CHOIR_MEM_ACTIVATIONS) / 1e6,
           (double)choir_mem_peak(CHOIR_MEM_WEIGHTS) / 1e6, (double)ru.ru_maxrss / 1024.0);
#ifdef CHOIR_HAVE_CUDA
    if (gs.cu)
        printf("  device memory: peak %.1f MB, now %.1f MB\n",
               (double)choir_cuda_mem_peak(gs.cu) / 1e6, (double)choir_cuda_mem_current(gs.cu) / 1e6);
#endif
    rc = 0;
done:
    if (rc) fprintf(stderr, "choir bench kokoro: %s\n", err.msg[0] ? err.msg : "failed");
    choir_free(ids);
    choir_free(items);
    choir_piece_list_free(&pieces);
    choir_clause_list_free(&clauses);
    choir_phonemizer_free(ph);
    choir_kokoro_voice_free(v);
#ifdef CHOIR_HAVE_CUDA
    choir_kokoro_gpu_free(gs.g);
    choir_cuda_free(gs.cu);
#endif
    choir_kokoro_free(m);
    return rc;
}
