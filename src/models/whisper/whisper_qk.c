/* The cross-attention logits of alignment heads from a teacher-forced
 * decoder pass (choir/whisper_words.h), for word timestamps. */
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
    if (m->gpu || cross->gpu)
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "whisper cross_qk: not on a GPU-attached model yet");
    choir_whisper_seq *s = choir_whisper_seq_create(m, n_tokens, err);
    if (!s) return err && err->code ? err->code : CHOIR_ENOMEM;
    choir_whisper_seq_reset(s, cross);
    /* choir_whisper_decode's checks, for the one sequence. */
    int rc = choir_whisper_decode_check(m, &s, 1, tokens, &n_tokens, err);
    int32_t layer[CHOIR_WHISPER_MAX_HEADS], head[CHOIR_WHISPER_MAX_HEADS];
    for (int i = 0; i < n_heads; i++) layer[i] = heads[i].layer, head[i] = heads[i].head;
    wh_qk_req req = {n_heads, layer, head, qk};
    if (!rc) rc = wh_decode_host(m, &s, 1, tokens, &n_tokens, true, logits, &req, err);
    choir_whisper_seq_free(s);
    return rc;
}
