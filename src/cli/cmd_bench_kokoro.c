/* `choir bench kokoro`: real-time factor and time to first audio for a
 * paragraph, streamed piece by piece at batch 1 and 8, then 8 requests at
 * once; peak memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "choir/alloc.h"
#include "choir/kokoro.h"
#include "choir/phonemizer.h"
#include "choir/pool.h"
#include "cli/cli.h"

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

static void usage(FILE *f) {
    fprintf(f, "usage: choir bench kokoro --model DIR [--voice V] [--text T] [--threads N]\n"
               "                          [--requests N]\n\n"
               "Streams a paragraph at batch 1 and 8 (pieces synthesised together), then\n"
               "N copies (default 8) as concurrent requests; prints real-time factor (compute seconds\n"
               "per audio second), time to first audio, and peak memory.\n");
}

int choir_bench_kokoro(int argc, char **argv) {
    const char *model_dir = NULL, *voice_spec = "af_heart", *text = k_paragraph;
    int requests = 8;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return usage(stdout), 0;
        if (!v) return usage(stderr), 2;
        if (strcmp(a, "--model") == 0) model_dir = v;
        else if (strcmp(a, "--voice") == 0) voice_spec = v;
        else if (strcmp(a, "--text") == 0) text = v;
        else if (strcmp(a, "--threads") == 0) choir_pool_set_default_threads(atoi(v));
        else if (strcmp(a, "--requests") == 0) requests = atoi(v);
        else return usage(stderr), 2;
        i++;
    }
    if (!model_dir) return usage(stderr), 2;
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
    double t = choir_now_s();
    choir_kokoro *m = choir_kokoro_load(model_dir, &err);
    if (!m) goto done;
    printf("kokoro bench: %s, %d threads, weights %.1f MB, load %.2f s\n", model_dir,
           choir_pool_threads(choir_pool_default()), (double)choir_kokoro_weight_bytes(m) / 1e6,
           choir_now_s() - t);
    if (!(v = choir_kokoro_voice_load(voice_spec, voices, &err))) goto done;
    if (!(ph = choir_phonemizer_create(CHOIR_PHONEMIZER_EN_US, &err))) goto done;

    for (int b = 1; b <= 8; b *= 8) {
        choir_kokoro_speak_params sp = choir_kokoro_default_speak_params();
        sp.batch = b;
        run r = {.t0 = choir_now_s()};
        if (choir_kokoro_speak(m, ph, v, text, &sp, on_audio, &r, &err) != 0) goto done;
        double wall = choir_now_s() - r.t0, audio_s = r.samples / CHOIR_KOKORO_SAMPLE_RATE;
        printf("  paragraph, batch %d: %.2f s audio in %.2f s, RTF %.3f, first audio %.3f s\n", b,
               audio_s, wall, wall / audio_s, r.first);
    }

    /* N requests at once: each a whole paragraph cut into pieces */
    if (choir_phonemize_clauses(ph, text, &clauses, &err) != 0) goto done;
    if (choir_split_pieces(&clauses, CHOIR_KOKORO_MAX_PHONEMES, false, &pieces, &err) != 0) goto done;
    if (requests < 1) requests = 1;
    int n = requests * pieces.n, stride = CHOIR_KOKORO_MAX_PHONEMES + 2;
    ids = choir_alloc(CHOIR_MEM_IO, (size_t)n * stride * sizeof *ids);
    items = choir_calloc(CHOIR_MEM_IO, (size_t)n, sizeof *items);
    if (!ids || !items) goto done;
    for (int i = 0; i < n; i++) {
        const choir_piece *p = &pieces.items[i % pieces.n];
        int k = choir_kokoro_phonemes_to_ids(m, p->phonemes, ids + (size_t)i * stride, stride, NULL, &err);
        if (k < 0) goto done;
        items[i] = (choir_kokoro_item){.ids = ids + (size_t)i * stride, .n_ids = k,
                                       .style = choir_kokoro_voice_style(v, p->n_phonemes)};
    }
    choir_kokoro_params params = choir_kokoro_default_params();
    t = choir_now_s();
    if (choir_kokoro_synthesize_batch(m, items, n, &params, &err) != 0) goto done;
    double wall = choir_now_s() - t, samples = 0;
    for (int i = 0; i < n; i++) samples += (double)items[i].n_samples, choir_free(items[i].audio);
    printf("  %d requests at once (%d pieces): %.2f s audio in %.2f s, RTF %.3f\n", requests, n,
           samples / CHOIR_KOKORO_SAMPLE_RATE, wall, wall / (samples / CHOIR_KOKORO_SAMPLE_RATE));

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("  peak memory: counted %.1f MB (activations %.1f MB, weights %.1f MB), max RSS %.1f MB\n",
           (double)choir_mem_peak(CHOIR_MEM_COUNT) / 1e6,
           (double)choir_mem_peak(CHOIR_MEM_ACTIVATIONS) / 1e6,
           (double)choir_mem_peak(CHOIR_MEM_WEIGHTS) / 1e6, (double)ru.ru_maxrss / 1024.0);
    rc = 0;
done:
    if (rc) fprintf(stderr, "choir bench kokoro: %s\n", err.msg[0] ? err.msg : "failed");
    choir_free(ids);
    choir_free(items);
    choir_piece_list_free(&pieces);
    choir_clause_list_free(&clauses);
    choir_phonemizer_free(ph);
    choir_kokoro_voice_free(v);
    choir_kokoro_free(m);
    return rc;
}
