/* The cross-attention logits of alignment heads from a teacher-forced
 * decoder pass (choir/whisper_words.h), for word timestamps. */
#include <string.h>

#include "choir/alloc.h"
#include "choir/whisper_words.h"
#include "models/whisper/whisper_internal.h"

int choir_whisper_cross_qk(const choir_whisper *m, const choir_whisper_cross *cross,
                           const int32_t *tokens, int n_tokens, const choir_whisper_head *heads,
                           int n_heads, float *qk, float *logits, choir_err *err) {
    const choir_whisper_dims *D = &m->dims;
    if (!cross || !tokens || !qk || (n_heads > 0 && !heads) || n_heads < 1 ||
        n_heads > CHOIR_WHISPER_MAX_HEADS)
        return choir_err_set(err, CHOIR_EINVAL, "whisper cross_qk: missing argument or %d heads",
                             n_heads);
    if (n_tokens < 1 || n_tokens > D->n_text_ctx)
        return choir_err_set(err, CHOIR_EINVAL,
                             "whisper cross_qk: %d tokens (a window holds 1 to %d)", n_tokens,
                             D->n_text_ctx);
    for (int i = 0; i < n_heads; i++)
        if (heads[i].layer < 0 || heads[i].layer >= D->n_text_layer || heads[i].head < 0 ||
            heads[i].head >= D->n_head)
            return choir_err_set(err, CHOIR_EINVAL,
                                 "whisper cross_qk: head (%d, %d) outside %d layers of %d heads",
                                 heads[i].layer, heads[i].head, D->n_text_layer, D->n_head);
    if (cross->gpu != m->gpu)
        return choir_err_set(err, CHOIR_EINVAL, "whisper cross_qk: the window was made for the %s",
                             m->gpu ? "CPU" : "GPU");
    choir_whisper_seq *s = choir_whisper_seq_create(m, n_tokens, err);
    if (!s) return err && err->code ? err->code : CHOIR_ENOMEM;
    choir_whisper_seq_reset(s, cross);
    /* choir_whisper_decode's checks, for the one sequence. */
    int rc = choir_whisper_decode_check(m, &s, 1, tokens, &n_tokens, err);
    int32_t layer[CHOIR_WHISPER_MAX_HEADS], head[CHOIR_WHISPER_MAX_HEADS];
    for (int i = 0; i < n_heads; i++) layer[i] = heads[i].layer, head[i] = heads[i].head;
    wh_qk_req req = {n_heads, layer, head, qk};
#ifdef CHOIR_HAVE_CUDA
    /* On the device: the pass in its decoder stream, the logits and qk
     * downloaded into the caller's memory. */
    if (!rc && m->gpu) {
        wh_dec_rt *rt = wg_dec_rt(m->gpu, n_tokens, logits ? n_tokens : 0,
                                  wh_dec_qk_bytes(D, n_heads, n_tokens), err);
        rc = rt ? wh_decode_run(rt, wg_net(m->gpu), D, &s, 1, tokens, &n_tokens, true, logits, &req, err)
                : (err && err->code ? err->code : CHOIR_ENOMEM);
    } else
#endif
    if (!rc) rc = wh_decode_host(m, &s, 1, tokens, &n_tokens, true, logits, &req, err);
    choir_whisper_seq_free(s);
    return rc;
}

int choir_whisper_model_alignment_heads(const choir_whisper *m, choir_whisper_head *out) {
    if (m->n_align > 0) {
        memcpy(out, m->align, (size_t)m->n_align * sizeof *out);
        return m->n_align;
    }
    return choir_whisper_alignment_heads(&m->dims, false, out);
}

int choir_whisper_window_words(const choir_whisper *m, const choir_tokenizer *tok, const choir_whisper_cross *cross,
                               int language, choir_whisper_task task, int mel_frames, double time_offset,
                               double *last_speech_end, choir_whisper_word_segment *segs, int n_segs,
                               const choir_whisper_word_opts *opts, choir_err *err) {
    const choir_whisper_dims *D = &m->dims;
    const choir_whisper_specials *sp = &m->sp;
    for (int s = 0; s < n_segs; s++) segs[s].words = NULL, segs[s].n_words = 0;
    int n_text = 0;
    for (int s = 0; s < n_segs; s++)
        for (int k = 0; k < segs[s].n_tokens; k++) n_text += segs[s].tokens[k] < sp->eot;
    int frames = mel_frames / 2;
    if (n_text == 0 || frames < 1) return 0;
    /* openai's find_alignment: the start sequence without any prompt, then
     * <|notimestamps|>, the text and <|endoftext|>. */
    int32_t sot[3];
    int n_sot = 0;
    sot[n_sot++] = sp->sot;
    if (sp->multilingual) {
        sot[n_sot++] = sp->lang0 + (language >= 0 ? language : 0);
        sot[n_sot++] = task == CHOIR_WHISPER_TRANSLATE ? sp->translate : sp->transcribe;
    }
    int T = n_sot + 1 + n_text + 1, A = D->n_audio_ctx, V = D->n_vocab;
    if (T > D->n_text_ctx)
        return choir_err_set(err, CHOIR_EINVAL, "word timestamps: %d text tokens in one window (at most %d)", n_text,
                             D->n_text_ctx - n_sot - 2);
    if (frames > A) frames = A;
    choir_whisper_head heads[CHOIR_WHISPER_MAX_HEADS];
    int H = choir_whisper_model_alignment_heads(m, heads);
    if (H < 1) return choir_err_set(err, CHOIR_EINVAL, "word timestamps: the model has no alignment heads");
    int32_t *tokens = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)T * sizeof *tokens);
    float *qk = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)H * T * A * sizeof *qk);
    float *logits = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)T * V * sizeof *logits);
    float *matrix = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)T * frames * sizeof *matrix);
    float *probs = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)n_text * sizeof *probs);
    int rc = 0;
    if (!tokens || !qk || !logits || !matrix || !probs) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "word timestamps: out of memory");
        goto done;
    }
    int t = 0;
    for (int i = 0; i < n_sot; i++) tokens[t++] = sot[i];
    tokens[t++] = sp->no_timestamps;
    for (int s = 0; s < n_segs; s++)
        for (int k = 0; k < segs[s].n_tokens; k++)
            if (segs[s].tokens[k] < sp->eot) tokens[t++] = segs[s].tokens[k];
    tokens[t++] = sp->eot;
    rc = choir_whisper_cross_qk(m, cross, tokens, T, heads, H, qk, logits, err);
    if (!rc)
        rc = choir_whisper_alignment_matrix(qk, H, T, A, frames, 1.0f, CHOIR_WHISPER_MEDFILT_WIDTH, matrix, err);
    if (rc) goto done;
    /* Position n_sot + j (from <|notimestamps|> on) predicts text token j. */
    for (int j = 0; j < n_text; j++)
        probs[j] = choir_whisper_text_token_prob(logits + (size_t)(n_sot + j) * V, sp->eot, tokens[n_sot + 1 + j]);
    rc = choir_whisper_add_word_timestamps(tok, sp, matrix + (size_t)n_sot * frames, frames, probs, time_offset,
                                           last_speech_end, segs, n_segs, opts, err);
done:
    choir_free(tokens);
    choir_free(qk);
    choir_free(logits);
    choir_free(matrix);
    choir_free(probs);
    return rc;
}
