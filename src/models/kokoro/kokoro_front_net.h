/* Kokoro's ALBERT and BiLSTMs over backend operations (kokoro_front_net.c):
 * one implementation for the CPU and CUDA backends, n pieces per call. */
#ifndef CHOIR_KOKORO_FRONT_NET_H
#define CHOIR_KOKORO_FRONT_NET_H

#include "choir/backend.h"
#include "models/kokoro/kokoro_internal.h"

/* The front's ALBERT linears (in the checkpoint's storage, never converted)
 * and the LSTMs the model has, on one backend (on the CPU: pointers into the
 * model). The model and the backend must outlive it. NULL (and err) on
 * failure. */
typedef struct kk_fnet kk_fnet;
kk_fnet *kk_fnet_create(const choir_kokoro *m, choir_backend *be, choir_err *err);
/* NULL is a no-op. */
void kk_fnet_free(kk_fnet *f);
int64_t kk_fnet_weight_bytes(const kk_fnet *f);
bool kk_fnet_has_albert(const kk_fnet *f);
bool kk_fnet_has_lstm(const kk_fnet *f, const kk_lstm *l);

/* Working memory of kk_fnet_albert over `rows` ids in all, and of
 * kk_fnet_bilstm for n pieces of at most T steps. */
int64_t kk_fnet_albert_work_bytes(int64_t rows);
int64_t kk_fnet_bilstm_work_bytes(int n, int64_t T, int64_t In, int64_t H, bool host);

/* ALBERT's layers and bert_encoder for n pieces, from their normalised
 * embeddings emb[b] [T[b], 128] (host, kk_albert_embed): bert[b] [T[b], 768]
 * (NULL: not brought down) and d_en[b] [T[b], 512] (host). Each piece
 * attends to its own ids only.
 * Returns 0 or the error (the stream's sticky error copied and cleared). */
int kk_fnet_albert(const kk_fnet *f, choir_stream *s, int n, const float *const *emb,
                   const int64_t *T, float *const *bert, float *const *d_en, choir_err *err);

/* y[b] [T[b], 2H] = the bidirectional LSTM l over x[b] [T[b], In] (host in
 * and out) for n pieces in one call. CHOIR_EINVAL when l is not on f. */
int kk_fnet_bilstm(const kk_fnet *f, choir_stream *s, const kk_lstm *l, int n,
                   const float *const *x, const int64_t *T, float *const *y, choir_err *err);
/* The same with the output left in backend memory: y [n, Tm, 2H] (the
 * stream's, taken by the caller; Tm >= every T[b]), zeros past each piece's
 * length. The working memory still kk_fnet_bilstm's, less y. */
int kk_fnet_bilstm_keep(const kk_fnet *f, choir_stream *s, const kk_lstm *l, int n,
                        const float *const *x, const int64_t *T, int64_t Tm, float *y,
                        choir_err *err);

/* The same over input already in backend memory: x [n, Tm, In] (rows past
 * each T[b] not read). The working memory kk_fnet_bilstm_keep's. */
int kk_fnet_bilstm_dev(const kk_fnet *f, choir_stream *s, const kk_lstm *l, int n,
                       const float *x, const int64_t *T, int64_t Tm, float *y, choir_err *err);

/* The duration encoder's three (BiLSTM, AdaLayerNorm) layers and the
 * duration LSTM for n pieces in one call, every intermediate kept in backend
 * memory: d[b] [T[b], 640] (host) is [d_en ; s_pro] in and the duration
 * encoder's output [x ; s_pro] out; y[b] [T[b], 512] (host) the duration
 * LSTM's output; norm_gb[b] [3, 1024] (host) each norm's (1 + gamma, beta)
 * of the piece's style, so that the norm is choir_op_layer_norm's affine
 * (kk_ada_layer_norm computes (1 + gamma) * norm + beta: the same floats up
 * to the order the backend rounds the product and sum in). CHOIR_EINVAL when
 * the four LSTMs are not on f. */
int64_t kk_fnet_duration_work_bytes(int n, int64_t T);
int kk_fnet_duration(const kk_fnet *f, choir_stream *s, int n, float *const *d, const int64_t *T,
                     const float *const *norm_gb, float *const *y, choir_err *err);

/* The text encoder for n pieces (embedding, 3 x (conv, LayerNorm,
 * LeakyReLU), BiLSTM): ids[b] [T[b]] (host, valid ids) -> y[b] [T[b], 512]
 * (host). The convolutions run per piece at its own length, so a piece's
 * result does not depend on its batch. CHOIR_EINVAL when the model has no
 * text encoder on f (kk_fnet_has_text). */
bool kk_fnet_has_text(const kk_fnet *f);
int64_t kk_fnet_text_work_bytes(int n, int64_t T);
int kk_fnet_text_encoder(const kk_fnet *f, choir_stream *s, int n, const int32_t *const *ids,
                         const int64_t *T, float *const *y, choir_err *err);

#endif
