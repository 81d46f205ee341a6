/* The device half of an attached Whisper model (whisper_cuda.c): the CUDA
 * backend it runs on, the weights placed there, the pools of caches and the
 * streams the forward (whisper_enc.c, whisper_dec.c) runs on. Private to
 * src/models/whisper; CUDA builds only. */
#ifndef CHOIR_WHISPER_CUDA_H
#define CHOIR_WHISPER_CUDA_H

#ifdef CHOIR_HAVE_CUDA

#include "choir/cuda.h"
#include "models/whisper/whisper_internal.h"

#define WG_MAX_LENT 8 /* pinned logits blocks lent at once */

typedef struct choir_whisper_gpu choir_whisper_gpu;

struct choir_whisper_gpu {
    const choir_whisper *m;
    choir_whisper_gpu_opts opts;
    choir_backend *be;          /* the CUDA backend; its context is cu */
    choir_cuda *cu;
    choir_backend_weights *ws;  /* every weight on the device */
    /* The weights as the forward reads them: device pointers throughout
     * (net.enc = enc, net.dec = dec). */
    wh_net net;
    wh_block *enc, *dec;
    /* The encoder's (and cross K/V's) stream: a pass's mel, rows and
     * working memory; empty between calls (enc_mark). */
    choir_stream *enc_stream;
    size_t enc_reserved, enc_mark;
    /* Self-attention caches [n_text_layer][positions][d] per sequence, the
     * positions those asked for so far (grown, and the slots laid out anew,
     * when a longer one comes); cross K/V [n_text_layer][n_audio_ctx][d]
     * per window. */
    wh_pool self, cross;
    /* The decoder's stream, inputs and captured steps (whisper_dec.c); its
     * memory planned for rt.rows_cap rows and logits_cap logits rows, and
     * extra_cap bytes more (the largest cross-attention logits pass). */
    wh_dec_rt rt;
    int logits_cap;
    size_t extra_cap;
    /* Pinned host blocks lent for logits (wg_logits_alloc). */
    struct {
        void *p;
        size_t bytes;
    } lent[WG_MAX_LENT];
};

#endif
#endif
