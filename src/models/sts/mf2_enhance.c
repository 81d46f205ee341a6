/* Enhancing segments and long recordings with MossFormer2_SE_48K.
 *
 * One pass (choir_mf2_enhance) = features -> mask network -> masked STFT.
 * Long recordings: the reference's 4-s window plan (spec §3) for parity, and
 * choir's crossfaded chunks through choir/chunker.h for everything else. */
#include <string.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/chunker.h"
#include "mf2_internal.h"

void choir_mf2_default_params(choir_mf2_params *p) {
    memset(p, 0, sizeof *p);
    p->dither = 0.0f;
    p->seed = 0x6d6f7373u;
    p->chunk_seconds = 12.0;
    p->overlap_seconds = 1.0;
}

const choir_chunk_limits choir_mf2_chunk_limits = {"mossformer2", 0.1, 60, 1};

int choir_mf2_check_params(const choir_mf2_params *p, choir_err *err) {
    if (!p) return choir_err_set(err, CHOIR_EINVAL, "mossformer2: no params");
    return choir_chunk_check(&choir_mf2_chunk_limits, p->chunk_seconds, p->overlap_seconds, err);
}

/* Features, mask and masked resynthesis of a segment of n >= 1920 samples,
 * all working memory from `work` (mf2_pass_bytes(n) of it, given
 * back before it returns); the features and mask are handed to on_window
 * when it is set. */
static int enhance_pass(const choir_mf2 *m, const float *x, int64_t n, float *y, float dither,
                        uint64_t seed, choir_mf2_window_fn on_window, void *user, int k, choir_arena *work,
                        choir_err *err) {
    const int64_t T = choir_mf2_frames(n);
    size_t mark = choir_arena_mark(work);
    float *feat = choir_arena_alloc(work, (size_t)(T * CHOIR_MF2_FEATS) * sizeof(float));
    float *mask = choir_arena_alloc(work, (size_t)(T * CHOIR_MF2_BINS) * sizeof(float));
    int rc = 0;
    if (!feat || !mask) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "mossformer2: the working memory has no room for a %lld-frame segment",
                           (long long)T);
        goto done;
    }
    if ((rc = mf2_features_in(m, x, n, dither, seed, NULL, feat, work, err)) < 0) goto done;
    if ((rc = mf2_mask_in(m, feat, T, mask, NULL, work, err)) < 0) goto done;
    if ((rc = mf2_apply_mask_in(m, x, n, mask, T, y, work, err)) < 0) goto done;
    if (on_window) {
        /* The window callback wants int16 scale, as the reference stores it. */
        for (int64_t i = 0; i < n; i++) y[i] *= 32768.0f;
        on_window(user, k, feat, mask, T, y, n);
        for (int64_t i = 0; i < n; i++) y[i] /= 32768.0f;
    }
done:
    choir_arena_release(work, mark);
    return rc;
}

/* choir_mf2_enhance inside `work`. */
static int enhance_in(const choir_mf2 *m, const float *x, int64_t n, float *y, const choir_mf2_params *p,
                      choir_arena *work, choir_err *err) {
    if (n <= 0) return 0;
    if (n >= CHOIR_MF2_WIN) return enhance_pass(m, x, n, y, p->dither, p->seed, NULL, NULL, 0, work, err);
    /* Shorter than one frame: the reference fails; pad with silence and cut back. */
    float pad[CHOIR_MF2_WIN];
    memset(pad, 0, sizeof pad);
    memcpy(pad, x, (size_t)n * sizeof(float));
    int rc = enhance_pass(m, pad, CHOIR_MF2_WIN, pad, p->dither, p->seed, NULL, NULL, 0, work, err);
    if (rc == 0) memcpy(y, pad, (size_t)n * sizeof(float));
    return rc;
}

int choir_mf2_enhance(const choir_mf2 *m, const float *x, int64_t n, float *y, const choir_mf2_params *p,
                      choir_err *err) {
    choir_mf2_params def;
    if (!p) {
        choir_mf2_default_params(&def);
        p = &def;
    }
    if (n <= 0) return 0;
    choir_arena *work = choir_arena_create((size_t)mf2_pass_bytes(n), CHOIR_MEM_ACTIVATIONS, err);
    if (!work) return CHOIR_ENOMEM;
    int rc = enhance_in(m, x, n, y, p, work, err);
    choir_arena_free(work);
    return rc;
}

int choir_mf2_enhance_reference(const choir_mf2 *m, const float *x, int64_t n, float *y,
                                const choir_mf2_params *p, choir_mf2_window_fn on_window, void *user,
                                choir_err *err) {
    choir_mf2_params def;
    if (!p) {
        choir_mf2_default_params(&def);
        p = &def;
    }
    const int64_t one_pass = 20 * (int64_t)CHOIR_MF2_RATE;
    if (n <= one_pass) {
        if (n < CHOIR_MF2_WIN) return choir_mf2_enhance(m, x, n, y, p, err);
        choir_arena *one = choir_arena_create((size_t)mf2_pass_bytes(n), CHOIR_MEM_ACTIVATIONS, err);
        if (!one) return CHOIR_ENOMEM;
        int rc = enhance_pass(m, x, n, y, p->dither, p->seed, on_window, user, 0, one, err);
        choir_arena_free(one);
        return rc;
    }
    const int64_t W = 4 * (int64_t)CHOIR_MF2_RATE, S = W * 3 / 4, G = (W - S) / 2;
    /* The reference's padding (not the minimal one); it decides which windows exist. */
    int64_t padded = n;
    if (n < W) padded = W;
    else if (n < W + S) padded = W + S;
    else if ((n - W) % S != 0) padded = n + (n - ((n - W) / S) * S);
    /* One block for every window: the window, its output and one pass. */
    choir_arena *work = choir_arena_create(
        (size_t)(mf2_pass_bytes(W) + 2 * (W * (int64_t)sizeof(float) + CHOIR_ALIGN)), CHOIR_MEM_ACTIVATIONS,
        err);
    if (!work) return CHOIR_ENOMEM;
    float *win = choir_arena_alloc(work, (size_t)W * sizeof(float));
    float *out = choir_arena_alloc(work, (size_t)W * sizeof(float));
    /* Never written by any window: zeros, also inside the signal when
     * n - W is a multiple of S (the reference's silent last 0.5 s). */
    memset(y, 0, (size_t)n * sizeof(float));
    int rc = 0;
    for (int64_t k = 0; k * S + W <= padded; k++) {
        const int64_t start = k * S;
        const int64_t own0 = k == 0 ? 0 : start + G, own1 = start + W - G;
        if (own0 >= n) break; /* only padding from here on */
        int64_t have = n - start < W ? n - start : W;
        memcpy(win, x + start, (size_t)have * sizeof(float));
        memset(win + have, 0, (size_t)(W - have) * sizeof(float));
        rc = enhance_pass(m, win, W, out, p->dither, p->seed + (uint64_t)k, on_window, user, (int)k, work, err);
        if (rc < 0) break;
        int64_t end = own1 < n ? own1 : n;
        memcpy(y + own0, out + (own0 - start), (size_t)(end - own0) * sizeof(float));
    }
    choir_arena_free(work);
    return rc;
}

/* --- crossfaded chunks ---------------------------------------------------- */

struct choir_mf2_stream {
    const choir_mf2 *m;
    choir_mf2_params p;
    int channels;
    choir_mf2_emit_fn emit;
    void *user;
    choir_chunker *chunker;
    float *plane;   /* [chunk_frames] one channel of the current chunk */
    int64_t chunk_frames;
    int64_t chunks;
    choir_arena *work; /* where the stream and its passes live */
    choir_arena *own;  /* work, when the stream made it itself */
};

static int stream_process(void *user, const float *in, int64_t frames, float *out, choir_err *err) {
    choir_mf2_stream *s = user;
    const int C = s->channels;
    /* Channels are enhanced independently, as the reference does for stereo. */
    for (int c = 0; c < C; c++) {
        for (int64_t i = 0; i < frames; i++) s->plane[i] = in[i * C + c];
        choir_mf2_params p = s->p;
        p.seed += (uint64_t)s->chunks * 131 + (uint64_t)c;
        int rc = enhance_in(s->m, s->plane, frames, s->plane, &p, s->work, err);
        if (rc < 0) return rc;
        for (int64_t i = 0; i < frames; i++) out[i * C + c] = s->plane[i];
    }
    s->chunks++;
    return 0;
}

static int stream_emit(void *user, const float *out, int64_t frames, int64_t offset, choir_err *err) {
    choir_mf2_stream *s = user;
    return s->emit ? s->emit(s->user, out, frames, offset, err) : 0;
}

static void chunker_params(int channels, const choir_mf2_params *p, choir_chunker_params *cp) {
    memset(cp, 0, sizeof *cp);
    cp->rate = CHOIR_MF2_RATE;
    cp->in_channels = cp->out_channels = channels;
    cp->chunk_seconds = p->chunk_seconds;
    cp->overlap_seconds = p->overlap_seconds;
}

/* What a stream carves from its arena: itself, its chunker, one channel's
 * plane and one pass over a chunk, or over `pass_frames` when fewer (a
 * recording shorter than a chunk is one pass over itself). */
static int64_t stream_arena_bytes(int channels, const choir_mf2_params *p, int64_t pass_frames) {
    choir_chunker_params cp;
    chunker_params(channels, p, &cp);
    int64_t frames = choir_chunker_chunk_frames(&cp);
    int64_t pass = pass_frames > 0 && pass_frames < frames ? pass_frames : frames;
    return (int64_t)sizeof(choir_mf2_stream) + choir_chunker_memory_bytes(&cp) + frames * (int64_t)sizeof(float) +
           2 * CHOIR_ALIGN + mf2_pass_bytes(pass);
}

int64_t choir_mf2_stream_bytes(int channels, const choir_mf2_params *p) {
    return choir_mf2_stream_bytes_upto(channels, p, 0);
}

int64_t choir_mf2_stream_bytes_upto(int channels, const choir_mf2_params *p, int64_t frames) {
    choir_chunker_params cp;
    chunker_params(channels, p, &cp);
    int64_t chunk = choir_chunker_chunk_frames(&cp);
    int64_t pass = frames > 0 && frames < chunk ? frames : chunk;
    return stream_arena_bytes(channels, p, frames) + mf2_outside_bytes(pass);
}

choir_mf2_stream *choir_mf2_stream_create(const choir_mf2 *m, int channels, const choir_mf2_params *p,
                                          choir_mf2_emit_fn emit, void *user, choir_err *err) {
    return choir_mf2_stream_create_in(m, channels, p, NULL, emit, user, err);
}

choir_mf2_stream *choir_mf2_stream_create_in(const choir_mf2 *m, int channels, const choir_mf2_params *p,
                                             choir_arena *arena, choir_mf2_emit_fn emit, void *user,
                                             choir_err *err) {
    choir_mf2_params def;
    if (!p) {
        choir_mf2_default_params(&def);
        p = &def;
    }
    if (!m || channels < 1 || channels > 64) {
        choir_err_set(err, CHOIR_EINVAL, "mossformer2: bad stream arguments (%d channels)", channels);
        return NULL;
    }
    if (choir_mf2_check_params(p, err) < 0)
        return NULL;
    /* Everything the stream holds, and each pass over a chunk, is carved
     * from one arena: the caller's, or one of exactly the stream's size. */
    choir_arena *own = NULL;
    if (!arena && !(arena = own = choir_arena_create((size_t)stream_arena_bytes(channels, p, 0),
                                                     CHOIR_MEM_ACTIVATIONS, err)))
        return NULL;
    choir_mf2_stream *s = choir_arena_alloc(arena, sizeof *s);
    if (!s) {
        choir_err_set(err, CHOIR_ENOMEM, "mossformer2: the arena has no room for a stream");
        choir_arena_free(own);
        return NULL;
    }
    memset(s, 0, sizeof *s);
    s->m = m;
    s->p = *p;
    s->channels = channels;
    s->emit = emit;
    s->user = user;
    s->work = arena;
    s->own = own;
    choir_chunker_params cp;
    chunker_params(channels, p, &cp);
    s->chunk_frames = choir_chunker_chunk_frames(&cp);
    s->plane = choir_arena_alloc(arena, (size_t)s->chunk_frames * sizeof(float));
    if (!s->plane) {
        choir_err_set(err, CHOIR_ENOMEM, "mossformer2: the arena has no room for a stream");
        goto fail;
    }
    s->chunker = choir_chunker_create_in(arena, &cp, stream_process, stream_emit, s, err);
    if (!s->chunker) goto fail;
    return s;
fail:
    choir_mf2_stream_free(s);
    return NULL;
}

void choir_mf2_stream_free(choir_mf2_stream *s) {
    /* The stream is a piece of its arena: freeing its own arena frees it. */
    if (s) choir_arena_free(s->own);
}

int choir_mf2_stream_push(choir_mf2_stream *s, const float *x, int64_t frames, choir_err *err) {
    return choir_chunker_push(s->chunker, x, frames, err);
}

int choir_mf2_stream_finish(choir_mf2_stream *s, choir_err *err) { return choir_chunker_finish(s->chunker, err); }

int64_t choir_mf2_stream_chunks(const choir_mf2_stream *s) { return s->chunks; }

typedef struct collect {
    float *y;
    int channels;
} collect;

static int collect_emit(void *user, const float *out, int64_t frames, int64_t offset, choir_err *err) {
    (void)err;
    collect *c = user;
    memcpy(c->y + offset * c->channels, out, (size_t)(frames * c->channels) * sizeof(float));
    return 0;
}

int choir_mf2_enhance_chunked(const choir_mf2 *m, const float *x, int64_t frames, int channels, float *y,
                              const choir_mf2_params *p, choir_err *err) {
    collect c = {.y = y, .channels = channels};
    choir_mf2_stream *s = choir_mf2_stream_create(m, channels, p, collect_emit, &c, err);
    if (!s) return err ? err->code : CHOIR_EINVAL;
    int rc = choir_mf2_stream_push(s, x, frames, err);
    if (rc == 0) rc = choir_mf2_stream_finish(s, err);
    choir_mf2_stream_free(s);
    return rc;
}
